// PortChannel through the FIFO and a ProxyService over the host transport, between real processes, driven by host
// threads (the same device-handle code kernels run): data verified after put/signal/wait, flushes, atomicAdd,
// several producer threads and proxy threads, the trigger_stats plugin's counts, a bad request stopping the proxy
// with an error that names it, and a wait that times out naming the waiter. The direct path (small requests done by
// the calling thread through the host transport's mapping of the peer's memory) alone and mixed with the proxy's.
#include <gtest/gtest.h>

#include <cstring>
#include <thread>
#include <weft/communicator.hpp>
#include <weft/error.hpp>
#include <weft/proxy_service.hpp>
#include <weft/shared_host_memory.hpp>

#include "multi_process.hpp"

namespace weft {
namespace {

using std::chrono::milliseconds;
constexpr uint64_t kMs = 1'000'000;

Config hostOnlyConfig() {
  Config c = Config::defaults();
  c.transports[PeerClass::kSameProcess] = {"host"};
  c.transports[PeerClass::kSameHost] = {"host"};
  c.bootstrapTimeout = milliseconds(5000);
  return c;
}

uint8_t pattern(int rank, uint64_t i) { return static_cast<uint8_t>(rank * 29 + i * 13 + 1); }

// One rank's side of a pair: a proxy, `channels` channels to the peer (one connection each), a source buffer and a
// destination buffer the peer puts into.
struct Side {
  std::shared_ptr<void> srcStorage, dstStorage;  // first, so freed after comm stops receiving into them
  Communicator comm;
  ProxyService proxy;
  uint8_t* src;
  uint8_t* dst;
  std::vector<PortChannel> channels;

  Side(int rank, const UniqueId& id, uint64_t bytes, int channelCount, ProxyServiceOptions options)
      : comm(std::make_shared<TcpBootstrap>(rank, 2, id, milliseconds(10000)), hostOnlyConfig()), proxy(comm, options) {
    const int peer = 1 - rank;
    srcStorage = allocSharedHostMemory(bytes);
    dstStorage = allocSharedHostMemory(bytes);
    src = static_cast<uint8_t*>(srcStorage.get());
    dst = static_cast<uint8_t*>(dstStorage.get());
    RegisteredMemory srcMem = comm.registerMemory(src, bytes, MemoryKind::kHost);
    RegisteredMemory dstMem = comm.registerMemory(dst, bytes, MemoryKind::kHost);
    comm.sendMemory(dstMem, peer, 1);
    MemoryId remoteDst = proxy.addMemory(comm.recvMemory(peer, 1));
    MemoryId localSrc = proxy.addMemory(srcMem);
    proxy.addMemory(dstMem);
    for (int c = 0; c < channelCount; ++c) {
      std::shared_ptr<Connection> connection = comm.connect(peer, 10 + c);
      EXPECT_TRUE(connection->mapsPeerMemory());    // the host transport maps shared memory
      EXPECT_FALSE(connection->writesGpuMemory());  // and reaches no GPU memory
      SemaphoreId sem = proxy.buildSemaphore(connection, 20 + c);
      channels.push_back(proxy.portChannel(sem, remoteDst, localSrc));
    }
    proxy.start();
  }
};

// Host-thread handles; the direct path off unless asked for, so the proxy's own path is what these tests exercise.
ProxyServiceOptions hostSide(int threads = 1, uint64_t budgetNs = 5000 * kMs, uint64_t directMaxBytes = 0) {
  ProxyServiceOptions o;
  o.side = HandleSide::kHost;
  o.threads = threads;
  o.budgetNs = budgetNs;
  o.fifoSize = 64;
  o.directMaxBytes = directMaxBytes;
  return o;
}

TEST(PortChannelTest, PutWithSignalDeliversVerifiedDataBothWays) {
  UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
  constexpr uint64_t kBytes = 1 << 20;
  auto results = test::runRanks(2, [&](int rank, int) {
    Side s(rank, id, kBytes, 1, hostSide());
    const PortChannelDeviceHandle ch = s.channels[0].deviceHandle();
    for (uint64_t i = 0; i < kBytes; ++i) s.src[i] = pattern(rank, i);
    // Four rounds, each into a different quarter, alternating put+signal and put, signal, flush.
    for (int round = 0; round < 4; ++round) {
      const uint64_t off = round * (kBytes / 4);
      if (round % 2 == 0) {
        ch.putWithSignal(off, kBytes / 4);
      } else {
        ch.put(off, off, kBytes / 4);
        ch.signal();
        ch.flush();
      }
      ch.wait();
      uint64_t wrong = 0;
      for (uint64_t i = off; i < off + kBytes / 4; ++i) wrong += s.dst[i] != pattern(1 - rank, i);
      EXPECT_EQ(wrong, 0u) << "round " << round;
    }
    EXPECT_FALSE(ch.poll());
    s.proxy.checkError();
    s.comm.bootstrap().barrier();
  });
  WEFT_EXPECT_RANKS_OK(results);
}

class PortChannelPathTest : public ::testing::TestWithParam<uint64_t> {};  // the direct_max_bytes to run with

INSTANTIATE_TEST_SUITE_P(ProxyAndDirect, PortChannelPathTest, ::testing::Values(0, 4096),
                         [](const auto& info) { return info.param == 0 ? "ThroughTheProxy" : "Direct"; });

TEST_P(PortChannelPathTest, PutWithSignalAndFlushLetsTheSourceBeReusedAtOnce) {
  UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
  constexpr uint64_t kBytes = 4096;
  constexpr int kRounds = 200;
  auto results = test::runRanks(2, [&](int rank, int) {
    Side s(rank, id, kBytes * kRounds, 1, hostSide(1, 5000 * kMs, GetParam()));
    const PortChannelDeviceHandle ch = s.channels[0].deviceHandle();
    if (rank == 0) {
      for (int r = 0; r < kRounds; ++r) {
        std::memset(s.src, r & 0xff, kBytes);  // the same source every round: flush must have finished the copy
        ch.putWithSignalAndFlush(static_cast<uint64_t>(r) * kBytes, 0, kBytes);
      }
    } else {
      for (int r = 0; r < kRounds; ++r) ch.wait();
      uint64_t wrong = 0;
      for (int r = 0; r < kRounds; ++r) {
        for (uint64_t i = 0; i < kBytes; ++i)
          wrong += s.dst[static_cast<uint64_t>(r) * kBytes + i] != static_cast<uint8_t>(r);
      }
      EXPECT_EQ(wrong, 0u);
    }
    // The direct path leaves the proxy idle; without it, each round is one trigger.
    EXPECT_EQ(s.proxy.finishedRequests(), rank == 0 && GetParam() == 0 ? uint64_t{kRounds} : 0u);
    s.comm.bootstrap().barrier();
    s.proxy.checkError();
  });
  WEFT_EXPECT_RANKS_OK(results);
}

// Many producer threads on two channels served by two proxy threads; each thread puts its own slice and the
// atomicAdds and signals are counted exactly.
TEST_P(PortChannelPathTest, ManyProducerThreadsAndProxyThreadsCountExactly) {
  UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
  constexpr int kThreads = 4;
  constexpr int kPerThread = 300;
  constexpr uint64_t kSlice = 256;
  constexpr uint64_t kBytes = 64 + kSlice * kThreads * kPerThread;
  auto results = test::runRanks(2, [&](int rank, int) {
    Side s(rank, id, kBytes, 2, hostSide(2, 5000 * kMs, GetParam()));
    for (uint64_t i = 0; i < kBytes; ++i) s.src[i] = pattern(rank, i);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        const PortChannelDeviceHandle ch = s.channels[t % 2].deviceHandle();
        for (int i = 0; i < kPerThread; ++i) {
          const uint64_t off = 64 + kSlice * (static_cast<uint64_t>(t) * kPerThread + i);
          ch.put(off, kSlice);
          ch.atomicAdd(8 * (t % 2), 1);
        }
        ch.signal();
      });
    }
    for (auto& t : threads) t.join();
    // Each channel's peer semaphore gets kThreads / 2 signals; the second is on another connection and thread.
    for (int c = 0; c < 2; ++c) {
      const PortChannelDeviceHandle ch = s.channels[c].deviceHandle();
      for (int k = 0; k < kThreads / 2; ++k) ch.wait();
    }
    auto* counters = reinterpret_cast<uint64_t*>(s.dst);
    EXPECT_EQ(counters[0] + counters[1], uint64_t{kThreads} * kPerThread);
    EXPECT_EQ(counters[0], uint64_t{kThreads / 2} * kPerThread);
    uint64_t wrong = 0;
    for (uint64_t i = 64; i < kBytes; ++i) wrong += s.dst[i] != pattern(1 - rank, i);
    EXPECT_EQ(wrong, 0u);
    EXPECT_EQ(s.proxy.threads(), 2);
    s.proxy.checkError();
    s.comm.bootstrap().barrier();
  });
  WEFT_EXPECT_RANKS_OK(results);
}

// Requests behind one that is still in the proxy's hands go through the proxy too, in FIFO order, until a flush:
// a small put after a large one, and the signal after both, arrive after the large put's data; after the flush the
// next small requests are direct again. The proxy's request count tells which path each took.
TEST(PortChannelTest, DirectRequestsWaitBehindProxiedOnesUntilAFlush) {
  UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
  constexpr uint64_t kLarge = 256 << 10;
  constexpr uint64_t kSmall = 1024;
  constexpr uint64_t kBytes = kLarge + 4 * kSmall;
  constexpr int kRounds = 20;
  auto results = test::runRanks(2, [&](int rank, int) {
    Side s(rank, id, kBytes, 1, hostSide(1, 5000 * kMs, 4096));
    const PortChannelDeviceHandle ch = s.channels[0].deviceHandle();
    EXPECT_TRUE(ch.inOrderForDirect());
    auto check = [&](uint64_t from, uint64_t to, int round) {
      uint64_t wrong = 0;
      for (uint64_t i = from; i < to; ++i) wrong += s.dst[i] != static_cast<uint8_t>(pattern(1 - rank, i) + round);
      EXPECT_EQ(wrong, 0u) << "bytes " << from << ".." << to << " of round " << round;
    };
    uint64_t proxied = 0;
    for (int round = 0; round < kRounds; ++round) {
      for (uint64_t i = 0; i < kBytes; ++i) s.src[i] = static_cast<uint8_t>(pattern(rank, i) + round);
      ch.put(0, 0, kLarge);                 // proxy: above direct_max_bytes
      EXPECT_FALSE(ch.inOrderForDirect());  // ... and still in its hands
      ch.put(kLarge, kLarge, kSmall);       // proxy: behind the large one
      ch.signal();                          // proxy
      ch.wait();
      check(0, kLarge + kSmall, round);
      ch.flush();  // proxy; afterwards nothing is pending
      EXPECT_TRUE(ch.inOrderForDirect());
      proxied += 4;
      ch.putWithSignal(kLarge + kSmall, kLarge + kSmall, kSmall);  // direct
      ch.wait();
      check(kLarge + kSmall, kLarge + 2 * kSmall, round);
      ch.atomicAdd(kLarge + 3 * kSmall, 1);  // direct, ordered before the direct signal
      ch.signal();
      ch.wait();
      EXPECT_EQ(atomicLoad<MemoryOrder::kAcquire>(reinterpret_cast<uint64_t*>(s.dst + kLarge + 3 * kSmall)),
                static_cast<uint64_t>(round + 1));
      ch.flush();                    // a fence: nothing in the proxy's hands
      s.comm.bootstrap().barrier();  // the peer has checked this round before the source changes
    }
    EXPECT_EQ(s.proxy.finishedRequests(), proxied);
    EXPECT_FALSE(ch.poll());
    s.proxy.checkError();
    s.comm.bootstrap().barrier();
  });
  WEFT_EXPECT_RANKS_OK(results);
}

TEST(PortChannelTest, TriggerStatsCountsRequestsByType) {
  UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
  auto results = test::runRanks(2, [&](int rank, int) {
    ProxyServiceOptions o = hostSide();
    o.handlerPlugins = {"trigger_stats"};
    Side s(rank, id, 4096, 1, o);
    const PortChannelDeviceHandle ch = s.channels[0].deviceHandle();
    for (int i = 0; i < 10; ++i) ch.putWithSignal(0, 128);
    for (int i = 0; i < 3; ++i) ch.atomicAdd(0, 1);
    ch.flush();
    for (int i = 0; i < 10; ++i) ch.wait();
    s.comm.bootstrap().barrier();
  });
  WEFT_EXPECT_RANKS_OK(results);
  for (const auto& r : results) {
    EXPECT_NE(r.output.find("weft trigger_stats: put+signal count 10 "), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("weft trigger_stats: atomic_add count 3 "), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("weft trigger_stats: flush count 1 "), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("weft trigger_stats: total 14"), std::string::npos) << r.output;
  }
}

// A put whose destination offset needs the wide encoding (5 GiB) reaches the transport exactly, which refuses it
// (the buffer is 4 KiB): the proxy thread stops with that error, and the flush behind it times out naming the FIFO.
TEST(PortChannelTest, OutOfBoundsWidePutStopsTheProxyWithANamedError) {
  UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
  auto results = test::runRanks(2, [&](int rank, int) {
    Side s(rank, id, 4096, 1, hostSide(1, 300 * kMs));
    if (rank == 0) {
      const PortChannelDeviceHandle ch = s.channels[0].deviceHandle();
      ch.put(5ull << 30, 0, 64);
      try {
        ch.flush();
        ADD_FAILURE() << "flush behind a failed put returned";
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::kTimeout);
        EXPECT_NE(e.message().find("fifo sync"), std::string::npos) << e.message();
        EXPECT_NE(e.message().find("channel 0"), std::string::npos) << e.message();
      }
      try {
        s.proxy.checkError();
        ADD_FAILURE() << "the proxy reported no error";
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
        EXPECT_NE(e.message().find(std::to_string(5ull << 30)), std::string::npos) << e.message();
      }
    }
    s.comm.bootstrap().barrier();
  });
  WEFT_EXPECT_RANKS_OK(results);
}

TEST(PortChannelTest, WaitWithoutASignalTimesOutNamingTheWaiter) {
  UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
  auto results = test::runRanks(2, [&](int rank, int) {
    Side s(rank, id, 4096, 1, hostSide(1, 200 * kMs));
    if (rank == 1) {
      const PortChannelDeviceHandle ch = s.channels[0].deviceHandle();
      const auto start = std::chrono::steady_clock::now();
      try {
        ch.wait();
        ADD_FAILURE() << "wait without a signal returned";
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::kTimeout);
        EXPECT_NE(e.message().find("rank 1: channel wait on peer 0 channel 0"), std::string::npos) << e.message();
        EXPECT_NE(e.message().find("expected 1, observed 0"), std::string::npos) << e.message();
      }
      EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(200));
      EXPECT_TRUE(s.proxy.errors().hasError());
    }
    s.comm.bootstrap().barrier();
  });
  WEFT_EXPECT_RANKS_OK(results);
}

}  // namespace
}  // namespace weft
