/* A plugin built against a later minor version of v1: its table has one more entry appended than core knows.
 * Core must accept it (the table only grew) and never touch the entry it does not know. */
#include <string.h>
#include <weft/plugin/transport.h>

static int gState;
static const weftHostServices_v1* gHost;

static const char* futureLastError(void) { return ""; }

static weftResult_t futureInit(const weftHostServices_v1* host, uint64_t numOptions, const char* const* keys,
                               const char* const* values, void** state) {
  (void)numOptions, (void)keys, (void)values;
  gHost = host;
  if (gHost != NULL && gHost->log != NULL) gHost->log(gHost->context, weftLogInfo, "future plugin initialized");
  *state = &gState;
  return weftSuccess;
}

static weftResult_t futureFinalize(void* state) {
  (void)state;
  return weftSuccess;
}

static weftResult_t futureDeviceCount(void* state, uint32_t* count) {
  (void)state;
  *count = 1;
  return weftSuccess;
}

static weftResult_t futureDeviceInfo(void* state, uint32_t device, weftDeviceInfo_v1* info) {
  (void)state;
  if (device != 0) return weftInvalidArgument;
  memset(info->name, 0, sizeof(info->name));
  strcpy(info->name, "future0");
  info->flags = weftDeviceGpuMemory | weftDeviceGpuSourceOnly; /* a staging transport, as libfabric without FI_HMEM */
  info->numaNode = 3;
  info->gpuDevice = 7;
  return weftSuccess;
}

/* The current v1 table followed by an entry of a later minor version. */
struct FutureTable {
  weftTransport_v1 base;
  weftResult_t (*laterEntry)(void* state);
};

static const struct FutureTable kFuture = {.base =
                                               {
                                                   .structSize = sizeof(struct FutureTable),
                                                   .abiVersion = weftTransportAbiVersion_v1,
                                                   .name = "future",
                                                   .lastError = futureLastError,
                                                   .init = futureInit,
                                                   .finalize = futureFinalize,
                                                   .deviceCount = futureDeviceCount,
                                                   .deviceInfo = futureDeviceInfo,
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
                                               },
                                           .laterEntry = weftNotSupportedObject_v1};

WEFT_TRANSPORT_PLUGIN_EXPORT const weftTransport_v1* weftTransportPlugin_v1(void) { return &kFuture.base; }
