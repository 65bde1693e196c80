// Communicator, Connection, RegisteredMemory and Host2HostSemaphore across real processes over the host
// transport: memory exchanged through the bootstrap, data written and verified on the other side, signals
// counted exactly, and the errors a user gets for misuse.
#include <gtest/gtest.h>

#include <cstring>
#include <thread>
#include <weft/communicator.hpp>
#include <weft/error.hpp>
#include <weft/gpu.hpp>
#include <weft/host_semaphore.hpp>
#include <weft/memory_semaphore.hpp>
#include <weft/shared_host_memory.hpp>

#include "multi_process.hpp"

namespace weft {
namespace {

using std::chrono::milliseconds;

Config hostOnlyConfig() {
  Config c = Config::defaults();
  c.transports[PeerClass::kSameProcess] = {"host"};
  c.transports[PeerClass::kSameHost] = {"host"};
  c.bootstrapTimeout = milliseconds(5000);
  return c;
}

std::shared_ptr<Bootstrap> join(int rank, int size, const UniqueId& id) {
  return std::make_shared<TcpBootstrap>(rank, size, id, milliseconds(10000));
}

uint8_t pattern(int rank, uint64_t i) { return static_cast<uint8_t>(rank * 31 + i * 7 + 3); }

// Every rank writes a distinct pattern into every other rank's buffer slice, then signals; each rank checks
// that every slice holds its writer's pattern.
void allToAllWrites(int size, uint64_t sliceBytes) {
  UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
  auto results = test::runRanks(size, [&](int rank, int n) {
    Communicator comm(join(rank, n, id), hostOnlyConfig());
    const uint64_t total = sliceBytes * n;
    auto recvStorage = allocSharedHostMemory(total);
    auto sendStorage = allocSharedHostMemory(sliceBytes);
    auto* send = static_cast<uint8_t*>(sendStorage.get());
    for (uint64_t i = 0; i < sliceBytes; ++i) send[i] = pattern(rank, i);
    RegisteredMemory recvMem = comm.registerMemory(recvStorage.get(), total, MemoryKind::kHost);
    RegisteredMemory sendMem = comm.registerMemory(send, sliceBytes, MemoryKind::kHost);
    std::vector<RegisteredMemory> remotes(n);
    std::vector<std::shared_ptr<Connection>> conns(n);
    std::vector<std::unique_ptr<Host2HostSemaphore>> sems(n);
    for (int p = 0; p < n; ++p) {
      if (p == rank) continue;
      EXPECT_EQ(comm.peerClass(p), PeerClass::kSameHost);
      EXPECT_EQ(comm.transportFor(p), "host");
      comm.sendMemory(recvMem, p, 1);
    }
    for (int p = 0; p < n; ++p) {
      if (p == rank) continue;
      remotes[p] = comm.recvMemory(p, 1);
      EXPECT_EQ(remotes[p].rank(), p);
      EXPECT_EQ(remotes[p].size(), total);
      EXPECT_FALSE(remotes[p].isLocal());
      EXPECT_NE(remotes[p].data(), nullptr);  // the host transport maps peer memory
      conns[p] = comm.connect(p, 2);
      sems[p] = std::make_unique<Host2HostSemaphore>(comm, conns[p], 3);
    }
    for (int p = 0; p < n; ++p) {
      if (p == rank) continue;
      conns[p]->write(remotes[p], sliceBytes * rank, sendMem, 0, sliceBytes);
      sems[p]->signal();
      conns[p]->flush();
    }
    auto* recv = static_cast<uint8_t*>(recvStorage.get());
    for (int p = 0; p < n; ++p) {
      if (p == rank) continue;
      sems[p]->wait(std::chrono::seconds(10));
      uint64_t wrong = 0;
      for (uint64_t i = 0; i < sliceBytes; ++i) wrong += recv[sliceBytes * p + i] != pattern(p, i);
      EXPECT_EQ(wrong, 0u) << "slice from rank " << p;
    }
    comm.bootstrap().barrier();
  });
  WEFT_EXPECT_RANKS_OK(results);
}

TEST(CommunicatorTest, AllToAllWritesTwoRanks) { allToAllWrites(2, 1 << 20); }
TEST(CommunicatorTest, AllToAllWritesFourRanks) { allToAllWrites(4, 4099); }
TEST(CommunicatorTest, AllToAllWritesEightRanks) { allToAllWrites(8, 65536); }

TEST(CommunicatorTest, SignalsFromManyThreadsAreCountedExactly) {
  UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
  constexpr int kThreads = 4;
  constexpr int kPerThread = 5000;
  auto results = test::runRanks(2, [&](int rank, int n) {
    Communicator comm(join(rank, n, id), hostOnlyConfig());
    int peer = 1 - rank;
    auto storage = allocSharedHostMemory(64);
    RegisteredMemory counters = comm.registerMemory(storage.get(), 64, MemoryKind::kHost);
    comm.sendMemory(counters, peer, 1);
    RegisteredMemory remote = comm.recvMemory(peer, 1);
    auto conn = comm.connect(peer, 2);
    if (rank == 0) {
      std::vector<std::thread> threads;
      // Connection allows one poster at a time; each thread has its own connection.
      std::vector<std::shared_ptr<Connection>> conns;
      for (int t = 0; t < kThreads; ++t) conns.push_back(comm.connect(peer, 10 + t));
      for (int t = 0; t < kThreads; ++t) {
        threads.emplace_back([&, t] {
          for (int i = 0; i < kPerThread; ++i) conns[t]->atomicAdd(remote, 8, 3);
        });
      }
      for (auto& th : threads) th.join();
      conn->flush();
    } else {
      for (int t = 0; t < kThreads; ++t) comm.connect(peer, 10 + t);
    }
    comm.bootstrap().barrier();
    if (rank == 1) {
      EXPECT_EQ(static_cast<uint64_t*>(storage.get())[1], uint64_t{3} * kThreads * kPerThread);
      EXPECT_EQ(static_cast<uint64_t*>(storage.get())[0], 0u);
    }
  });
  WEFT_EXPECT_RANKS_OK(results);
}

TEST(CommunicatorTest, MisuseGivesClearErrors) {
  UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
  auto results = test::runRanks(2, [&](int rank, int n) {
    Communicator comm(join(rank, n, id), hostOnlyConfig());
    int peer = 1 - rank;
    auto storage = allocSharedHostMemory(4096);
    RegisteredMemory mem = comm.registerMemory(storage.get(), 4096, MemoryKind::kHost);
    comm.sendMemory(mem, peer, 1);
    RegisteredMemory remote = comm.recvMemory(peer, 1);
    auto conn = comm.connect(peer, 2);
    auto expectError = [](ErrorCode code, const std::string& needle, auto&& fn) {
      try {
        fn();
        ADD_FAILURE() << "no error; expected " << needle;
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), code) << e.what();
        EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      }
    };
    expectError(ErrorCode::kInvalidArgument, "outside rank", [&] { conn->write(remote, 4000, mem, 0, 200); });
    expectError(ErrorCode::kInvalidArgument, "outside rank", [&] { conn->write(remote, 0, mem, ~0ull, 2); });
    expectError(ErrorCode::kInvalidArgument, "not 8-byte aligned", [&] { conn->atomicAdd(remote, 4, 1); });
    expectError(ErrorCode::kInvalidArgument, "not to this connection's peer", [&] { conn->write(mem, 0, mem, 0, 8); });
    expectError(ErrorCode::kInvalidArgument, "local registration", [&] { conn->write(remote, 0, remote, 0, 8); });
    expectError(ErrorCode::kInvalidArgument, "peer rank 7", [&] { comm.connect(7, 3); });
    expectError(ErrorCode::kInvalidArgument, "non-null", [&] { comm.registerMemory(nullptr, 8, MemoryKind::kHost); });
    // Plain heap memory cannot be mapped by another process: the host transport says how to allocate it.
    std::vector<uint8_t> heap(64);
    expectError(ErrorCode::kNotSupported, "allocSharedHostMemory",
                [&] { comm.registerMemory(heap.data(), heap.size(), MemoryKind::kHost); });
    comm.bootstrap().barrier();
  });
  WEFT_EXPECT_RANKS_OK(results);
}

TEST(CommunicatorTest, SemaphoreWaitThatNobodySignalsNamesThePeer) {
  UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
  auto results = test::runRanks(2, [&](int rank, int n) {
    Communicator comm(join(rank, n, id), hostOnlyConfig());
    int peer = 1 - rank;
    auto conn = comm.connect(peer, 2);
    Host2HostSemaphore sem(comm, conn, 3);
    if (rank == 0) {
      auto start = std::chrono::steady_clock::now();
      try {
        sem.wait(milliseconds(300));
        ADD_FAILURE() << "wait returned without a signal";
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::kTimeout);
        EXPECT_NE(std::string(e.what()).find("for rank 1"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("expected 1, saw 0"), std::string::npos) << e.what();
      }
      EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(3));
      EXPECT_FALSE(sem.poll());
    }
    comm.bootstrap().barrier();
    if (rank == 1) sem.signal();
    if (rank == 0) {
      sem.wait(std::chrono::seconds(10));
      EXPECT_EQ(sem.expected(), 1u);
    }
    comm.bootstrap().barrier();
  });
  WEFT_EXPECT_RANKS_OK(results);
}

TEST(CommunicatorTest, TransportMismatchIsNamed) {
  UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
  auto results = test::runRanks(2, [&](int rank, int n) {
    Config c = hostOnlyConfig();
    // Rank 1 believes it is on another host, and no transport serves other hosts in its config.
    c.transports[PeerClass::kOtherHost] = {};
    if (rank == 1) setenv("WEFT_HOST_ID", "elsewhere", 1);
    Communicator comm(join(rank, n, id), c);
    EXPECT_EQ(comm.peerClass(1 - rank), PeerClass::kOtherHost);
    try {
      comm.transportFor(1 - rank);
      ADD_FAILURE() << "a transport was chosen for other_host peers with an empty list";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kPluginError);
      EXPECT_NE(std::string(e.what()).find("other_host"), std::string::npos) << e.what();
    }
    comm.bootstrap().barrier();
  });
  WEFT_EXPECT_RANKS_OK(results);
}

// Ranks of one host share a placement key in host builds (no GPU: the host's memory is the one device), and a rank
// that believes it is elsewhere does not; a memory semaphore on host memory never takes the device-scope path.
TEST(CommunicatorTest, GpuPlacementKeyNamesTheHostWithoutAGpu) {
  if (kGpuPlatform != GpuPlatform::kNone) GTEST_SKIP() << "GPU build: the key also names the GPU (gpu tests)";
  UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
  auto results = test::runRanks(3, [&](int rank, int n) {
    if (rank == 2) setenv("WEFT_HOST_ID", "elsewhere", 1);
    Communicator comm(join(rank, n, id), hostOnlyConfig());
    std::vector<uint64_t> keys(3);
    keys[static_cast<size_t>(rank)] = comm.gpuPlacementKey();
    comm.bootstrap().allGather(keys.data(), sizeof(uint64_t));
    EXPECT_EQ(keys[0], keys[1]);
    EXPECT_NE(keys[0], keys[2]);
    EXPECT_EQ(keys[static_cast<size_t>(rank)], comm.gpuPlacementKey()) << "the key changed between calls";
    if (rank < 2) {
      MemoryDevice2DeviceSemaphore sem(comm, comm.connect(1 - rank, 1), 2, MemoryKind::kHost);
      EXPECT_FALSE(sem.sameGpu());
      EXPECT_EQ(sem.deviceHandle().deviceScope, 0u);
    }
    comm.bootstrap().barrier();
  });
  WEFT_EXPECT_RANKS_OK(results);
}

TEST(CommunicatorTest, RanksAsThreadsOfOneProcessAreSameProcessPeers) {
  UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
  std::vector<std::string> failures(2);
  auto shared = allocSharedHostMemory(4096);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        Communicator comm(join(rank, 2, id), hostOnlyConfig());
        int peer = 1 - rank;
        if (comm.peerClass(peer) != PeerClass::kSameProcess) throw std::runtime_error("not same-process");
        auto* base = static_cast<uint8_t*>(shared.get()) + rank * 2048;
        RegisteredMemory mem = comm.registerMemory(base, 2048, MemoryKind::kHost);
        comm.sendMemory(mem, peer, 1);
        RegisteredMemory remote = comm.recvMemory(peer, 1);
        auto conn = comm.connect(peer, 2);
        Host2HostSemaphore sem(comm, conn, 3);
        std::memset(base + 1024, 0x40 + rank, 1024);
        conn->write(remote, 0, mem, 1024, 1024);
        sem.signal();
        sem.wait(std::chrono::seconds(10));
        for (int i = 0; i < 1024; ++i) {
          if (base[i] != 0x40 + peer) throw std::runtime_error("byte " + std::to_string(i) + " wrong");
        }
      } catch (const std::exception& e) {
        failures[rank] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures[0], "");
  EXPECT_EQ(failures[1], "");
}

}  // namespace
}  // namespace weft
