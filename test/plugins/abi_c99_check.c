/* Compiled with -std=c99 -pedantic -Werror: every type, field and constant of the transport ABI must be valid C99. */
#include <stddef.h>
#include <weft/plugin/transport.h>

/* C99 has no _Static_assert: a negative array size fails the build instead. */
#define WEFT_C99_ASSERT(name, cond) typedef char weftC99Assert_##name[(cond) ? 1 : -1]

WEFT_C99_ASSERT(table_header,
                offsetof(weftTransport_v1, structSize) == 0 && offsetof(weftTransport_v1, abiVersion) == 4);
WEFT_C99_ASSERT(services_header, offsetof(weftHostServices_v1, abiVersion) == 4);
WEFT_C99_ASSERT(device_header, offsetof(weftDeviceInfo_v1, abiVersion) == 4);
WEFT_C99_ASSERT(memory_header, offsetof(weftMemoryDescriptor_v1, abiVersion) == 4);
WEFT_C99_ASSERT(result_width, sizeof(weftResult_t) == 4);
WEFT_C99_ASSERT(version, weftTransportAbiVersion == 1);

static const weftResult_t kAllResults[] = {weftSuccess,       weftNotSupported, weftInvalidArgument,
                                           weftSystemError,   weftTimeout,      weftRemoteError,
                                           weftInternalError, weftOutOfMemory,  weftInvalidUsage};
static const int32_t kAllLevels[] = {weftLogTrace, weftLogDebug, weftLogInfo, weftLogWarn, weftLogError};

/* Referenced so that -Wunused does not drop the checks above from consideration. */
size_t weftAbiC99Check(void);
size_t weftAbiC99Check(void) {
  weftTransport table = {0};
  weftHostServices_v1 services = {0};
  weftDeviceInfo_v1 info = {0};
  weftMemoryDescriptor_v1 mem = {0};
  weftTransportPluginFn getter = 0;
  const char* symbol = WEFT_TRANSPORT_PLUGIN_SYMBOL;
  table.write = weftNotSupportedWrite_v1;
  table.flush = weftNotSupportedFlush_v1;
  info.flags = weftDeviceHostMemory | weftDeviceGpuMemory | weftDeviceLoadStore;
  mem.kind = weftMemoryHost + weftMemoryGpu;
  mem.fd = -1;
  (void)getter;
  return sizeof(table) + sizeof(services) + sizeof(info) + sizeof(mem) + sizeof(kAllResults) + sizeof(kAllLevels) +
         (size_t)weftBlobMaxBytes_v1 + (size_t)weftNameMaxBytes_v1 + (size_t)weftTransportMinStructSize_v1 +
         (symbol[0] == 'w');
}
