/* A plugin whose table claims ABI major version 99: the loader must refuse it, naming found and expected. */
#include <weft/plugin/transport.h>

static const weftTransport_v1 kBadAbi = {
    .structSize = sizeof(weftTransport_v1),
    .abiVersion = 99,
    .name = "badabi",
};

WEFT_TRANSPORT_PLUGIN_EXPORT const weftTransport_v1* weftTransportPlugin_v1(void) { return &kBadAbi; }
