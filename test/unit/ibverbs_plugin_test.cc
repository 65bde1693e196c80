// The real ibverbs plugin on a machine without RDMA devices: it loads through core's loader, reports 0 devices with a
// logged reason (so selection falls through to the next transport), and refuses bad options and misuse cleanly.
#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <string>
#include <vector>
#include <weft/error.hpp>

#include "plugin_loader.hpp"
#include "transport_plugin.hpp"

namespace weft {
namespace {

const std::string kPlugin = std::string(WEFT_PLUGIN_BUILD_DIR) + "/libweft-transport-ibverbs.so";

bool machineHasRdmaDevices() {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list != nullptr) ibv_free_device_list(list);
  return list != nullptr && n > 0;
}

struct Captured {
  std::vector<std::pair<int32_t, std::string>> lines;
};

void capture(void* context, int32_t level, const char* message) {
  static_cast<Captured*>(context)->lines.emplace_back(level, message);
}

const weftTransport_v1* table(const SharedLibrary& lib) {
  auto fn = reinterpret_cast<weftTransportPluginFn_v1>(lib.symbol(WEFT_TRANSPORT_PLUGIN_SYMBOL));
  EXPECT_NE(fn, nullptr);
  return fn != nullptr ? fn() : nullptr;
}

TEST(IbverbsPluginTest, NoDevicesMeansZeroDevicesAndALoggedReason) {
  if (machineHasRdmaDevices()) GTEST_SKIP() << "this machine has RDMA devices";
  SharedLibrary lib(kPlugin);
  const weftTransport_v1* t = table(lib);
  ASSERT_NE(t, nullptr);
  EXPECT_STREQ(t->name, "ibverbs");
  Captured log;
  weftHostServices_v1 host{sizeof(host), weftTransportAbiVersion_v1, &log, capture};
  void* state = nullptr;
  ASSERT_EQ(t->init(&host, 0, nullptr, nullptr, &state), weftSuccess) << t->lastError();
  uint32_t count = 99;
  ASSERT_EQ(t->deviceCount(state, &count), weftSuccess);
  EXPECT_EQ(count, 0u);
  bool said = false;
  for (const auto& [level, line] : log.lines) {
    if (line.find("0 devices") != std::string::npos && line.find("RDMA") != std::string::npos) said = level >= 1;
  }
  EXPECT_TRUE(said) << "no log line explains the 0 devices; got " << log.lines.size() << " lines";
  // Nothing can be created on a device that does not exist, and memory has nowhere to be registered.
  void* endpoint = nullptr;
  uint8_t blob[weftBlobMaxBytes_v1];
  uint64_t used = 0;
  EXPECT_EQ(t->createEndpoint(state, 0, &endpoint, blob, sizeof(blob), &used), weftInvalidArgument);
  EXPECT_NE(std::string(t->lastError()).find("0 devices"), std::string::npos) << t->lastError();
  uint64_t word = 0;
  weftMemoryDescriptor_v1 desc{sizeof(desc),
                               weftTransportAbiVersion_v1,
                               reinterpret_cast<uint64_t>(&word),
                               sizeof(word),
                               weftMemoryHost,
                               -1,
                               0,
                               -1,
                               0};
  void* memory = nullptr;
  EXPECT_EQ(t->registerMemory(state, &desc, &memory, blob, sizeof(blob), &used), weftInvalidUsage);
  weftDeviceInfo_v1 info{sizeof(info), weftTransportAbiVersion_v1, {}, 0, 0, 0};
  EXPECT_EQ(t->deviceInfo(state, 0, &info), weftInvalidArgument);
  EXPECT_EQ(t->finalize(state), weftSuccess);
}

TEST(IbverbsPluginTest, LoaderSeesZeroDevices) {
  if (machineHasRdmaDevices()) GTEST_SKIP() << "this machine has RDMA devices";
  auto plugin = loadTransportPlugin("ibverbs", {}, {{"qps_per_peer", "4"}, {"atomics", "false"}});
  EXPECT_EQ(plugin->path(), kPlugin);
  EXPECT_TRUE(plugin->devices().empty());
}

TEST(IbverbsPluginTest, ConfiguredDeviceThatIsMissingIsNamed) {
  if (machineHasRdmaDevices()) GTEST_SKIP() << "this machine has RDMA devices";
  SharedLibrary lib(kPlugin);
  const weftTransport_v1* t = table(lib);
  ASSERT_NE(t, nullptr);
  Captured log;
  weftHostServices_v1 host{sizeof(host), weftTransportAbiVersion_v1, &log, capture};
  const char* keys[] = {"device"};
  const char* values[] = {"mlx5_9"};
  void* state = nullptr;
  ASSERT_EQ(t->init(&host, 1, keys, values, &state), weftSuccess) << t->lastError();
  uint32_t count = 99;
  ASSERT_EQ(t->deviceCount(state, &count), weftSuccess);
  EXPECT_EQ(count, 0u);
  EXPECT_EQ(t->finalize(state), weftSuccess);
  ASSERT_FALSE(log.lines.empty());
}

TEST(IbverbsPluginTest, BadOptionsFailInitWithTheirText) {
  try {
    loadTransportPlugin("ibverbs", {}, {{"port", "0"}});
    ADD_FAILURE() << "port=0 accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kPluginError);
    EXPECT_NE(e.message().find("port='0' is not an integer in [1, 255]"), std::string::npos) << e.what();
  }
  try {
    loadTransportPlugin("ibverbs", {}, {{"gid", "1"}});
    ADD_FAILURE() << "unknown option accepted";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("unknown option 'gid'"), std::string::npos) << e.what();
  }
}

TEST(IbverbsPluginTest, WrongHandlesAreRefused) {
  SharedLibrary lib(kPlugin);
  const weftTransport_v1* t = table(lib);
  ASSERT_NE(t, nullptr);
  uint64_t notAnObject[8] = {};
  uint32_t count = 0;
  EXPECT_EQ(t->deviceCount(notAnObject, &count), weftInvalidArgument);
  EXPECT_EQ(t->flush(notAnObject, 1000), weftInvalidArgument);
  EXPECT_EQ(t->write(nullptr, nullptr, 0, nullptr, 0, 8), weftInvalidArgument);
  EXPECT_EQ(t->atomicAdd(notAnObject, notAnObject, 0, 1), weftInvalidArgument);
  void* remote = nullptr;
  uint64_t mapped = 0;
  void* state = nullptr;
  ASSERT_EQ(t->init(nullptr, 0, nullptr, nullptr, &state), weftSuccess);
  uint8_t junk[64] = {};
  EXPECT_EQ(t->importMemory(state, junk, sizeof(junk), 1000, &remote, &mapped), weftInvalidArgument);
  EXPECT_EQ(t->finalize(state), weftSuccess);
}

}  // namespace
}  // namespace weft
