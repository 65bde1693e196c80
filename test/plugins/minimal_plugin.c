/* A valid transport plugin with one device and no data operations: every one points at the shared stubs. Its table
 * is a version 1.0 table (the smallest core accepts), so core must never call the 1.1 entry behind it. */
#include <stdlib.h>
#include <string.h>
#include <weft/plugin/transport.h>

static int gState;
static const weftHostServices_v1* gHost;

static const char* minimalLastError(void) { return ""; }

static weftResult_t minimalInit(const weftHostServices_v1* host, uint64_t numOptions, const char* const* keys,
                                const char* const* values, void** state) {
  (void)numOptions, (void)keys, (void)values;
  gHost = host;
  if (gHost != NULL && gHost->log != NULL) gHost->log(gHost->context, weftLogInfo, "minimal plugin initialized");
  *state = &gState;
  return weftSuccess;
}

static weftResult_t minimalFinalize(void* state) {
  (void)state;
  return weftSuccess;
}

static weftResult_t minimalDeviceCount(void* state, uint32_t* count) {
  (void)state;
  *count = 1;
  return weftSuccess;
}

static weftResult_t minimalDeviceInfo(void* state, uint32_t device, weftDeviceInfo_v1* info) {
  (void)state;
  if (device != 0) return weftInvalidArgument;
  memset(info->name, 0, sizeof(info->name));
  strcpy(info->name, "minimal0");
  info->flags = weftDeviceGpuMemory;
  info->numaNode = 3;
  info->gpuDevice = 7;
  return weftSuccess;
}

static weftResult_t minimalProgressBeyondTheTable(void* state, uint32_t* handled) {
  (void)state, (void)handled;
  abort(); /* core read past structSize */
}

static const weftTransport_v1 kMinimal = {
    .structSize = weftTransportMinStructSize_v1,
    .abiVersion = weftTransportAbiVersion_v1,
    .name = "minimal",
    .lastError = minimalLastError,
    .init = minimalInit,
    .finalize = minimalFinalize,
    .deviceCount = minimalDeviceCount,
    .deviceInfo = minimalDeviceInfo,
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
    .progress = minimalProgressBeyondTheTable,
};

WEFT_TRANSPORT_PLUGIN_EXPORT const weftTransport_v1* weftTransportPlugin_v1(void) { return &kMinimal; }
