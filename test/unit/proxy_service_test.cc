// The port request encoding (including offsets and sizes beyond 4 GiB, carried in a second trigger), a
// PortChannelDeviceHandle pushing through a real Fifo, and ProxyService's checks of its options and plugins.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <weft/communicator.hpp>
#include <weft/error.hpp>
#include <weft/proxy_service.hpp>

namespace weft {
namespace {

constexpr uint64_t kGiB = uint64_t{1} << 30;
constexpr uint64_t kMs = 1'000'000;

PortRequest roundTrip(const PortRequest& in, int expectTriggers) {
  FifoTrigger t[2] = {};
  EXPECT_EQ(encodePortRequest(in, t), expectTriggers);
  EXPECT_EQ(t[0].word1 & kFifoLapBit, 0u) << "the encoding used the FIFO's lap bit";
  EXPECT_EQ(portTriggerIsWide(t[0]), expectTriggers == 2);
  if (expectTriggers == 2) EXPECT_EQ(t[1].word1 & kFifoLapBit, 0u);
  PortRequest out{};
  EXPECT_TRUE(decodePortRequest(t[0], t[1], &out));
  return out;
}

void expectSame(const PortRequest& a, const PortRequest& b) {
  EXPECT_EQ(a.type, b.type);
  EXPECT_EQ(a.channel, b.channel);
  EXPECT_EQ(a.dstOffset, b.dstOffset);
  EXPECT_EQ(a.srcOffset, b.srcOffset);
  EXPECT_EQ(a.size, b.size);
}

TEST(PortRequestEncoding, SmallRequestsTakeOneTrigger) {
  const PortRequest r{kPortPut | kPortSignal, 1234, 0xfffffff0u, 17, 0xffffffffu};
  expectSame(roundTrip(r, 1), r);
  const PortRequest flush{kPortFlush, kMaxPortChannels - 1, 0, 0, 0};
  expectSame(roundTrip(flush, 1), flush);
}

TEST(PortRequestEncoding, OffsetsAndSizesBeyondFourGibGoIntoASecondTrigger) {
  const PortRequest bigDst{kPortPut, 7, 5 * kGiB + 3, 11, 64};
  expectSame(roundTrip(bigDst, 2), bigDst);
  const PortRequest bigSrc{kPortPut | kPortSignal | kPortFlush, 8, 0, (uint64_t{1} << 40) + 5, 4 * kGiB};
  expectSame(roundTrip(bigSrc, 2), bigSrc);
  const PortRequest bigSize{kPortPut, 9, 4 * kGiB - 1, 4 * kGiB + 1, 6 * kGiB + 12345};
  expectSame(roundTrip(bigSize, 2), bigSize);
  const PortRequest allOnes{kPortAtomicAdd, 1, ~uint64_t{0} - 7, ~uint64_t{0}, ~uint64_t{0}};
  expectSame(roundTrip(allOnes, 2), allOnes);  // an atomicAdd of -1
}

TEST(PortRequestEncoding, MalformedTriggersAreRefused) {
  FifoTrigger t[2] = {};
  encodePortRequest(PortRequest{kPortPut, 3, 8 * kGiB, 0, 1}, t);
  PortRequest out{};
  EXPECT_FALSE(decodePortRequest(t[1], t[1], &out)) << "an extension decoded as a head";
  FifoTrigger otherChannel[2] = {};
  encodePortRequest(PortRequest{kPortPut, 4, 8 * kGiB, 0, 1}, otherChannel);
  EXPECT_FALSE(decodePortRequest(t[0], otherChannel[1], &out)) << "an extension of another channel was accepted";
  EXPECT_FALSE(decodePortRequest(t[0], FifoTrigger{0, 0}, &out)) << "a wide head without extension was accepted";
  FifoTrigger reserved = t[0];
  reserved.word1 |= uint64_t{1} << 35;
  EXPECT_FALSE(decodePortRequest(reserved, t[1], &out));
  EXPECT_FALSE(decodePortRequest(FifoTrigger{0, 0}, FifoTrigger{0, 0}, &out)) << "type 0 accepted";
}

// The device handle's request path, through a real FIFO, as the proxy thread reads it.
TEST(PortRequestEncoding, DeviceHandlePushesWideRequestsAsAdjacentPairs) {
  Fifo fifo(8, HandleSide::kHost);
  PortChannelDeviceHandle h{};
  h.fifo = fifo.deviceHandle(100 * kMs);
  h.channel = 42;
  h.put(16, 32, 1024);                                // position 0 (no direct path: every request is pushed)
  h.putWithSignal(6 * kGiB, 5 * kGiB, 4 * kGiB + 8);  // positions 1 and 2
  h.atomicAdd(9 * kGiB, 5);                           // 3 and 4
  EXPECT_EQ(h.request(kPortSignal, 0, 0, 0), 5u);
  const PortRequest want[] = {{kPortPut, 42, 16, 32, 1024},
                              {kPortPut | kPortSignal, 42, 6 * kGiB, 5 * kGiB, 4 * kGiB + 8},
                              {kPortAtomicAdd, 42, 9 * kGiB, 0, 5},
                              {kPortSignal, 42, 0, 0, 0}};
  for (const PortRequest& w : want) {
    FifoTrigger head{}, ext{};
    ASSERT_TRUE(fifo.poll(&head));
    uint32_t n = 1;
    if (portTriggerIsWide(head)) {
      ASSERT_TRUE(fifo.poll(&ext, 1));
      n = 2;
    }
    PortRequest got{};
    ASSERT_TRUE(decodePortRequest(head, ext, &got));
    expectSame(got, w);
    fifo.pop(n);
  }
  FifoTrigger none{};
  EXPECT_FALSE(fifo.poll(&none));
}

Config hostOnlyConfig() {
  Config c = Config::defaults();
  c.transports[PeerClass::kSameProcess] = {"host"};
  c.transports[PeerClass::kSameHost] = {"host"};
  return c;
}

template <class F>
ErrorCode codeOf(F&& f, std::string* message = nullptr) {
  try {
    f();
  } catch (const Error& e) {
    if (message != nullptr) *message = e.message();
    return e.code();
  }
  ADD_FAILURE() << "no weft::Error thrown";
  return ErrorCode::kInternalError;
}

TEST(ProxyServiceTest, BadOptionsAreRefused) {
  UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
  Communicator comm(std::make_shared<TcpBootstrap>(0, 1, id, std::chrono::milliseconds(5000)), hostOnlyConfig());
  ProxyServiceOptions o;
  o.threads = 0;
  EXPECT_EQ(codeOf([&] { ProxyService p(comm, o); }), ErrorCode::kInvalidArgument);
  o.threads = kMaxProxyThreads + 1;
  EXPECT_EQ(codeOf([&] { ProxyService p(comm, o); }), ErrorCode::kInvalidArgument);
  o.threads = 1;
  o.fifoSize = 0;
  EXPECT_EQ(codeOf([&] { ProxyService p(comm, o); }), ErrorCode::kInvalidArgument);
  o.fifoSize = kDefaultFifoSize;
  o.directMaxBytes = kMaxPortDirectBytes + 1;
  EXPECT_EQ(codeOf([&] { ProxyService p(comm, o); }), ErrorCode::kInvalidArgument);
}

// [proxy] threads, pin_numa and direct_max_bytes reach a ProxyService built from the communicator's config.
TEST(ProxyServiceTest, ThreadCountComesFromTheConfig) {
  UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
  Config config = hostOnlyConfig();
  config.applyEnvironment(
      {{"WEFT_PROXY_THREADS", "3"}, {"WEFT_PROXY_PIN_NUMA", "off"}, {"WEFT_PROXY_DIRECT_MAX_BYTES", "512"}});
  Communicator comm(std::make_shared<TcpBootstrap>(0, 1, id, std::chrono::milliseconds(5000)), config);
  const ProxyServiceOptions o = ProxyServiceOptions::fromConfig(comm.config());
  EXPECT_EQ(o.threads, 3);
  EXPECT_FALSE(o.pinToGpuNumaNode);
  EXPECT_EQ(o.directMaxBytes, 512u);
  ProxyService proxy(comm);
  EXPECT_EQ(proxy.threads(), 3);
  proxy.start();
  EXPECT_EQ(proxy.numaNode(), -1);  // pinning is off
  proxy.stop();
}

TEST(ProxyServiceTest, HandlerPluginsThatCannotLoadGiveClearErrors) {
  UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
  Communicator comm(std::make_shared<TcpBootstrap>(0, 1, id, std::chrono::milliseconds(5000)), hostOnlyConfig());
  ProxyServiceOptions o;
  std::string message;
  o.handlerPlugins = {"no_such_handler"};
  EXPECT_EQ(codeOf([&] { ProxyService p(comm, o); }, &message), ErrorCode::kPluginError);
  EXPECT_NE(message.find("libweft-proxy-no_such_handler.so"), std::string::npos) << message;
  o.handlerPlugins = {"../etc"};
  EXPECT_EQ(codeOf([&] { ProxyService p(comm, o); }), ErrorCode::kPluginError);  // a path: dlopen fails
  o.handlerPlugins = {"bad name"};
  EXPECT_EQ(codeOf([&] { ProxyService p(comm, o); }), ErrorCode::kInvalidArgument);
  // A shared object without the symbol: a transport plugin is one.
  o.handlerPlugins = {std::string(WEFT_PLUGIN_BUILD_DIR) + "/libweft-transport-host.so"};
  EXPECT_EQ(codeOf([&] { ProxyService p(comm, o); }, &message), ErrorCode::kPluginError);
  EXPECT_NE(message.find("weftProxyHandlerPlugin_v1"), std::string::npos) << message;
}

TEST(ProxyServiceTest, TriggerStatsLoadsByNameAndPrintsASummaryAtShutdown) {
  UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
  Communicator comm(std::make_shared<TcpBootstrap>(0, 1, id, std::chrono::milliseconds(5000)), hostOnlyConfig());
  ProxyServiceOptions o;
  o.side = HandleSide::kHost;
  o.threads = 2;
  o.handlerPlugins = {"trigger_stats"};
  testing::internal::CaptureStderr();
  {
    ProxyService proxy(comm, o);
    proxy.start();
    EXPECT_TRUE(proxy.running());
    EXPECT_EQ(proxy.numaNode(), -1);  // host-side handles: nothing to pin to
    EXPECT_EQ(codeOf([&] { proxy.start(); }), ErrorCode::kInvalidUsage);
    proxy.stop();
    EXPECT_FALSE(proxy.running());
    proxy.checkError();
  }
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("weft trigger_stats: total 0"), std::string::npos) << err;
}

TEST(ProxyServiceTest, ChannelsFromUnknownIdsAreRefused) {
  UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
  Communicator comm(std::make_shared<TcpBootstrap>(0, 1, id, std::chrono::milliseconds(5000)), hostOnlyConfig());
  ProxyService proxy(comm, ProxyServiceOptions{.side = HandleSide::kHost});
  std::string message;
  EXPECT_EQ(codeOf([&] { proxy.portChannel(0, 0, 0); }, &message), ErrorCode::kInvalidArgument);
  EXPECT_NE(message.find("semaphore id 0"), std::string::npos) << message;
  EXPECT_EQ(codeOf([&] { proxy.semaphore(3); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(codeOf([&] { proxy.addMemory(RegisteredMemory()); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(codeOf([&] { proxy.fifo(1); }), ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace weft
