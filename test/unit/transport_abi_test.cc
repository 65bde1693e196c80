// The transport C ABI's layout is frozen: every size and offset is asserted here, so an accidental change of
// transport_v1.h fails the build. (test/plugins/abi_c99_check.c checks that the header is valid C99.)
#include <gtest/gtest.h>
#include <weft/plugin/transport.h>

#include <cstddef>
#include <type_traits>

namespace {

static_assert(sizeof(weftResult_t) == 4 && std::is_signed_v<weftResult_t>);
static_assert(weftTransportAbiVersion == 1 && weftTransportAbiVersion_v1 == 1);
static_assert(std::is_same_v<weftTransport, weftTransport_v1>);

static_assert(sizeof(weftHostServices_v1) == 24);
static_assert(offsetof(weftHostServices_v1, structSize) == 0);
static_assert(offsetof(weftHostServices_v1, abiVersion) == 4);
static_assert(offsetof(weftHostServices_v1, context) == 8);
static_assert(offsetof(weftHostServices_v1, log) == 16);

static_assert(sizeof(weftDeviceInfo_v1) == 88);
static_assert(offsetof(weftDeviceInfo_v1, structSize) == 0);
static_assert(offsetof(weftDeviceInfo_v1, abiVersion) == 4);
static_assert(offsetof(weftDeviceInfo_v1, name) == 8);
static_assert(offsetof(weftDeviceInfo_v1, flags) == 72);
static_assert(offsetof(weftDeviceInfo_v1, numaNode) == 80);
static_assert(offsetof(weftDeviceInfo_v1, gpuDevice) == 84);

static_assert(sizeof(weftMemoryDescriptor_v1) == 48);
static_assert(offsetof(weftMemoryDescriptor_v1, structSize) == 0);
static_assert(offsetof(weftMemoryDescriptor_v1, abiVersion) == 4);
static_assert(offsetof(weftMemoryDescriptor_v1, address) == 8);
static_assert(offsetof(weftMemoryDescriptor_v1, size) == 16);
static_assert(offsetof(weftMemoryDescriptor_v1, kind) == 24);
static_assert(offsetof(weftMemoryDescriptor_v1, fd) == 28);
static_assert(offsetof(weftMemoryDescriptor_v1, fdOffset) == 32);
static_assert(offsetof(weftMemoryDescriptor_v1, gpuDevice) == 40);
static_assert(offsetof(weftMemoryDescriptor_v1, reserved) == 44);

static_assert(sizeof(weftTransport_v1) == 208);  // 1.1: progress appended
static_assert(offsetof(weftTransport_v1, structSize) == 0);
static_assert(offsetof(weftTransport_v1, abiVersion) == 4);
static_assert(offsetof(weftTransport_v1, name) == 8);
static_assert(offsetof(weftTransport_v1, lastError) == 72);
static_assert(offsetof(weftTransport_v1, init) == 80);
static_assert(offsetof(weftTransport_v1, finalize) == 88);
static_assert(offsetof(weftTransport_v1, deviceCount) == 96);
static_assert(offsetof(weftTransport_v1, deviceInfo) == 104);
static_assert(offsetof(weftTransport_v1, createEndpoint) == 112);
static_assert(offsetof(weftTransport_v1, destroyEndpoint) == 120);
static_assert(offsetof(weftTransport_v1, connect) == 128);
static_assert(offsetof(weftTransport_v1, closeConnection) == 136);
static_assert(offsetof(weftTransport_v1, registerMemory) == 144);
static_assert(offsetof(weftTransport_v1, deregisterMemory) == 152);
static_assert(offsetof(weftTransport_v1, importMemory) == 160);
static_assert(offsetof(weftTransport_v1, releaseMemory) == 168);
static_assert(offsetof(weftTransport_v1, write) == 176);
static_assert(offsetof(weftTransport_v1, atomicAdd) == 184);
static_assert(offsetof(weftTransport_v1, flush) == 192);
static_assert(weftTransportMinStructSize_v1 == 200);
static_assert(offsetof(weftTransport_v1, progress) == 200);  // 1.1

static_assert(std::is_standard_layout_v<weftTransport_v1> && std::is_trivially_copyable_v<weftTransport_v1>);
static_assert(std::is_standard_layout_v<weftMemoryDescriptor_v1> && std::is_standard_layout_v<weftDeviceInfo_v1>);

TEST(TransportAbiTest, ResultCodesAreDistinctAndStable) {
  const weftResult_t codes[] = {weftSuccess,     weftNotSupported,  weftInvalidArgument, weftSystemError, weftTimeout,
                                weftRemoteError, weftInternalError, weftOutOfMemory,     weftInvalidUsage};
  for (size_t i = 0; i < std::size(codes); ++i) EXPECT_EQ(codes[i], static_cast<weftResult_t>(i));
}

TEST(TransportAbiTest, StubsReturnNotSupported) {
  EXPECT_EQ(weftNotSupportedCreateEndpoint_v1(nullptr, 0, nullptr, nullptr, 0, nullptr), weftNotSupported);
  EXPECT_EQ(weftNotSupportedObject_v1(nullptr), weftNotSupported);
  EXPECT_EQ(weftNotSupportedConnect_v1(nullptr, nullptr, 0, 0, nullptr), weftNotSupported);
  EXPECT_EQ(weftNotSupportedRegisterMemory_v1(nullptr, nullptr, nullptr, nullptr, 0, nullptr), weftNotSupported);
  EXPECT_EQ(weftNotSupportedImportMemory_v1(nullptr, nullptr, 0, 0, nullptr, nullptr), weftNotSupported);
  EXPECT_EQ(weftNotSupportedWrite_v1(nullptr, nullptr, 0, nullptr, 0, 0), weftNotSupported);
  EXPECT_EQ(weftNotSupportedAtomicAdd_v1(nullptr, nullptr, 0, 0), weftNotSupported);
  EXPECT_EQ(weftNotSupportedFlush_v1(nullptr, 0), weftNotSupported);
}

TEST(TransportAbiTest, DeviceFlagsAreDistinctBits) {
  EXPECT_EQ(weftDeviceHostMemory & weftDeviceGpuMemory, 0u);
  EXPECT_EQ((weftDeviceHostMemory | weftDeviceGpuMemory) & weftDeviceLoadStore, 0u);
  EXPECT_STREQ(WEFT_TRANSPORT_PLUGIN_SYMBOL, "weftTransportPlugin_v1");
}

}  // namespace
