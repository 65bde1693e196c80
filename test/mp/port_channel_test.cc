// PortChannel through the FIFO and a ProxyService over the host transport, between real processes, driven by host
// threads (the same device-handle code kernels run): data verified after put/signal/wait, flushes, atomicAdd,
// several producer threads and proxy threads, the trigger_stats plugin's counts, a bad request stopping the proxy
// with an error that names it, and a wait that times out naming the waiter.
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

ProxyServiceOptions hostSide(int threads = 1, uint64_t budgetNs = 5000 * kMs) {
  ProxyServiceOptions o;
  o.side = HandleSide::kHost;
  o.threads = threads;
  o.budgetNs = budgetNs;
  o.fifoSize = 64;
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

TEST(PortChannelTest, PutWithSignalAndFlushLetsTheSourceBeReusedAtOnce) {
  UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
  constexpr uint64_t kBytes = 4096;
  constexpr int kRounds = 200;
  auto results = test::runRanks(2, [&](int rank, int) {
    Side s(rank, id, kBytes * kRounds, 1, hostSide());
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
    s.comm.bootstrap().barrier();
    s.proxy.checkError();
  });
  WEFT_EXPECT_RANKS_OK(results);
}

// Many producer threads on two channels served by two proxy threads; each thread puts its own slice and the
// atomicAdds and signals are counted exactly.
TEST(PortChannelTest, ManyProducerThreadsAndProxyThreadsCountExactly) {
  UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
  constexpr int kThreads = 4;
  constexpr int kPerThread = 300;
  constexpr uint64_t kSlice = 256;
  constexpr uint64_t kBytes = 64 + kSlice * kThreads * kPerThread;
  auto results = test::runRanks(2, [&](int rank, int) {
    Side s(rank, id, kBytes, 2, hostSide(2));
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
