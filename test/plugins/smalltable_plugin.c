/* A plugin whose table says it is only 16 bytes long: smaller than any v1.0 table, so the loader must refuse it. */
#include <weft/plugin/transport.h>

static const weftTransport_v1 kSmall = {
    .structSize = 16,
    .abiVersion = weftTransportAbiVersion_v1,
    .name = "smalltable",
};

WEFT_TRANSPORT_PLUGIN_EXPORT const weftTransport_v1* weftTransportPlugin_v1(void) { return &kSmall; }
