/* A shared object that is not a transport plugin: it exports no weftTransportPlugin_v1. */
#include <weft/plugin/transport.h>

WEFT_TRANSPORT_PLUGIN_EXPORT int weftSomethingElse(void) { return 42; }
