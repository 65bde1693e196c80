/* A plugin whose init fails with a message: the loader's error must carry that message. */
#include <weft/plugin/transport.h>

static const char* initfailLastError(void) { return "initfail plugin: the device /dev/initfail0 is missing"; }

static weftResult_t initfailInit(const weftHostServices_v1* host, uint64_t numOptions, const char* const* keys,
                                 const char* const* values, void** state) {
  (void)host, (void)numOptions, (void)keys, (void)values, (void)state;
  return weftSystemError;
}

static weftResult_t initfailFinalize(void* state) {
  (void)state;
  return weftSuccess;
}

static const weftTransport_v1 kInitFail = {
    .structSize = sizeof(weftTransport_v1),
    .abiVersion = weftTransportAbiVersion_v1,
    .name = "initfail",
    .lastError = initfailLastError,
    .init = initfailInit,
    .finalize = initfailFinalize,
    .deviceCount = 0,
    .deviceInfo = 0,
    .createEndpoint = weftNotSupportedCreateEndpoint_v1,
    .destroyEndpoint = weftNotSupportedObject_v1,
    .connect = weftNotSupportedConnect_v1,
    .closeConnection = weftNotSupportedObject_v1,
    .registerMemory = weftNotSupportedRegisterMemory_v1,
    .deregisterMemory = weftNotSupportedObject_v1,
    .importMemory = weftNotSupportedImportMemory_v1,
    .releaseMemory = weftNotSupportedObject_v1,
    .write = weftNotSupportedWrite_v1,
    .atomicAdd = weftNotSupportedAtomicAdd_v1,
    .flush = weftNotSupportedFlush_v1,
};

WEFT_TRANSPORT_PLUGIN_EXPORT const weftTransport_v1* weftTransportPlugin_v1(void) { return &kInitFail; }
