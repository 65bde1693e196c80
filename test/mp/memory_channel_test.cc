// MemoryDevice2DeviceSemaphore and MemoryChannel between real processes over the host transport: host threads
// drive the device-handle code on shared host memory mapped into every peer. Data is verified on arrival.
#include <gtest/gtest.h>

#include <cstring>
#include <thread>
#include <weft/communicator.hpp>
#include <weft/error.hpp>
#include <weft/memory_channel.hpp>
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

uint8_t pattern(int rank, int round, uint64_t i) { return static_cast<uint8_t>(rank * 29 + round * 13 + i * 7 + 1); }

// One rank's channels to every other rank: its data buffer, its packet buffer (one slot per peer) and, per
// peer, a semaphore and two channels (puts land in the peer's data buffer; packets in the peer's packet slot
// reserved for this rank).
struct Mesh {
  static constexpr int kSemaphoreTag = 10;
  static constexpr int kDataTag = 11;
  static constexpr int kPacketTag = 12;
  static constexpr int kConnectTag = 13;

  std::shared_ptr<void> dataStorage;  // first, so freed after comm stops receiving into them
  std::shared_ptr<void> packetStorage;
  Communicator comm;
  uint64_t bytes;
  uint64_t slotBytes;
  RegisteredMemory data;
  RegisteredMemory packets;
  std::vector<MemoryChannel::DeviceHandle> put;     // by peer: remote = peer's data
  std::vector<MemoryChannel::DeviceHandle> packet;  // by peer: remote = peer's packet buffer
  std::vector<std::unique_ptr<MemoryChannel>> owners;

  Mesh(int rank, int size, const UniqueId& id, uint64_t bytesPerPeer, uint64_t budgetNs)
      : comm(std::make_shared<TcpBootstrap>(rank, size, id, milliseconds(10000)), hostOnlyConfig()),
        bytes(bytesPerPeer * (size + 1)),  // one slice per rank and a staging slice
        slotBytes(packetBufferBytes<LL16Packet>(bytesPerPeer)),
        put(size),
        packet(size) {
    dataStorage = allocSharedHostMemory(bytes);
    packetStorage = allocSharedHostMemory(slotBytes * size);
    data = comm.registerMemory(dataStorage.get(), bytes, MemoryKind::kHost);
    packets = comm.registerMemory(packetStorage.get(), slotBytes * size, MemoryKind::kHost);
    for (int p = 0; p < size; ++p) {
      if (p == rank) continue;
      comm.sendMemory(data, p, kDataTag);
      comm.sendMemory(packets, p, kPacketTag);
    }
    for (int p = 0; p < size; ++p) {
      if (p == rank) continue;
      RegisteredMemory peerData = comm.recvMemory(p, kDataTag);
      RegisteredMemory peerPackets = comm.recvMemory(p, kPacketTag);
      auto sem = std::make_shared<MemoryDevice2DeviceSemaphore>(comm, comm.connect(p, kConnectTag), kSemaphoreTag,
                                                                MemoryKind::kHost);
      EXPECT_EQ(sem->kind(), MemoryKind::kHost);
      owners.push_back(std::make_unique<MemoryChannel>(sem, peerData, data, packets));
      put[p] = owners.back()->deviceHandle({nullptr, p, budgetNs});
      owners.push_back(std::make_unique<MemoryChannel>(sem, peerPackets, data, packets));
      packet[p] = owners.back()->deviceHandle({nullptr, p, budgetNs});
    }
  }
  uint8_t* local() const { return static_cast<uint8_t*>(dataStorage.get()); }
};

// Every rank puts a pattern into its slice of every peer's buffer with several host threads, signals, waits for
// every peer's signal, checks what arrived, then reads every peer's slice back with get and checks it too.
void putGetSignalWait(int size, uint64_t bytesPerPeer, uint32_t threads) {
  UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
  auto results = test::runRanks(size, [&](int rank, int n) {
    Mesh mesh(rank, n, id, bytesPerPeer, 10000 * kMs);
    constexpr int kRounds = 3;
    std::vector<uint8_t> staged(bytesPerPeer);
    for (int round = 0; round < kRounds; ++round) {
      // This rank's outgoing data sits in its own slice; peers' data land in their slices of the peer.
      for (uint64_t i = 0; i < bytesPerPeer; ++i) mesh.local()[bytesPerPeer * rank + i] = pattern(rank, round, i);
      for (int p = 0; p < n; ++p) {
        if (p == rank) continue;
        const auto& h = mesh.put[p];
        std::vector<std::thread> ts;
        for (uint32_t t = 0; t < threads; ++t) {
          ts.emplace_back([&, t] { h.put(bytesPerPeer * rank, bytesPerPeer * rank, bytesPerPeer, t, threads); });
        }
        for (auto& th : ts) th.join();
        h.signal();
      }
      for (int p = 0; p < n; ++p) {
        if (p == rank) continue;
        mesh.put[p].wait();
        uint64_t wrong = 0;
        for (uint64_t i = 0; i < bytesPerPeer; ++i) wrong += mesh.local()[bytesPerPeer * p + i] != pattern(p, round, i);
        EXPECT_EQ(wrong, 0u) << "round " << round << " from rank " << p;
      }
      // Each rank reads back what it wrote into every peer, with get from an odd offset into its staging slice.
      for (int p = 0; p < n; ++p) {
        if (p == rank) continue;
        const auto& h = mesh.put[p];
        const uint64_t odd = bytesPerPeer > 8 ? 3 : 0;
        const uint64_t staging = bytesPerPeer * n;
        h.get(bytesPerPeer * rank + odd, staging, bytesPerPeer - odd, 0, 1);
        uint64_t wrong = 0;
        for (uint64_t i = 0; i + odd < bytesPerPeer; ++i) {
          wrong += mesh.local()[staging + i] != pattern(rank, round, i + odd);
        }
        EXPECT_EQ(wrong, 0u) << "get from rank " << p;
      }
      mesh.comm.bootstrap().barrier();  // nobody overwrites a slice that a peer is still reading
    }
  });
  WEFT_EXPECT_RANKS_OK(results);
}

TEST(MemoryChannelMpTest, PutGetSignalWaitTwoRanks) { putGetSignalWait(2, (1 << 20) + 5, 4); }
TEST(MemoryChannelMpTest, PutGetSignalWaitFourRanks) { putGetSignalWait(4, 4099, 3); }

// Semaphore ping-pong: rank 0 signals, rank 1 waits and signals back, many rounds; counts exact at the end.
TEST(MemoryChannelMpTest, SemaphorePingPong) {
  UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
  constexpr int kRounds = 2000;
  auto results = test::runRanks(2, [&](int rank, int n) {
    Communicator comm(std::make_shared<TcpBootstrap>(rank, n, id, milliseconds(10000)), hostOnlyConfig());
    const int peer = 1 - rank;
    MemoryDevice2DeviceSemaphore sem(comm, comm.connect(peer, 1), 2, MemoryKind::kHost);
    EXPECT_EQ(sem.peer(), peer);
    auto h = sem.deviceHandle({nullptr, 0, 5000 * kMs});
    for (int i = 0; i < kRounds; ++i) {
      if (rank == 0) {
        h.signal();
        h.wait();
      } else {
        h.wait();
        h.signal();
      }
    }
    EXPECT_EQ(h.received(), static_cast<uint64_t>(kRounds));
    EXPECT_EQ(h.consumed(), static_cast<uint64_t>(kRounds));
    EXPECT_FALSE(h.poll());
    comm.bootstrap().barrier();
  });
  WEFT_EXPECT_RANKS_OK(results);
}

// LL packets in a ring: each round every rank sends a fresh pattern to the next rank and reads the previous
// rank's, with an epoch flag per round and the same packet slots every round (never cleared). With two ranks
// this is a ping-pong in both directions.
template <class Packet>
void packetRing(int size, uint64_t bytes, int rounds) {
  UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
  auto results = test::runRanks(size, [&](int rank, int n) {
    Mesh mesh(rank, n, id, bytes, 10000 * kMs);
    const int next = (rank + 1) % n;
    const int prev = (rank + n - 1) % n;
    // Outgoing data in this rank's slice; incoming unpacked into prev's slice. Packets land in the packet slot
    // the receiver reserves for the sender.
    for (int round = 0; round < rounds; ++round) {
      const uint32_t flag = static_cast<uint32_t>(round + 1);
      for (uint64_t i = 0; i < bytes; ++i) mesh.local()[bytes * rank + i] = pattern(rank, round, i);
      mesh.packet[next].template putPackets<Packet>(mesh.slotBytes * rank, bytes * rank, bytes, flag, 0, 1);
      mesh.packet[prev].template unpackPackets<Packet>(mesh.slotBytes * prev, bytes * prev, bytes, flag, 0, 1);
      uint64_t wrong = 0;
      for (uint64_t i = 0; i < bytes; ++i) wrong += mesh.local()[bytes * prev + i] != pattern(prev, round, i);
      ASSERT_EQ(wrong, 0u) << "round " << round << " from rank " << prev;
      // The next rank must have read round r before round r + 1 overwrites its slot: a semaphore handshake.
      mesh.put[prev].signal();
      mesh.put[next].wait();
    }
    mesh.comm.bootstrap().barrier();
  });
  WEFT_EXPECT_RANKS_OK(results);
}

TEST(MemoryChannelMpTest, Ll16PingPongTwoRanks) { packetRing<LL16Packet>(2, 1003, 200); }
TEST(MemoryChannelMpTest, Ll8PingPongTwoRanks) { packetRing<LL8Packet>(2, 517, 200); }
TEST(MemoryChannelMpTest, Ll16RingFourRanks) { packetRing<LL16Packet>(4, 4096, 50); }
TEST(MemoryChannelMpTest, Ll8RingFourRanks) { packetRing<LL8Packet>(4, 33, 50); }

// A wait that nobody signals runs out within its budget and names the waiter: rank, peer and channel; a
// packet read nobody writes does the same.
TEST(MemoryChannelMpTest, WaitNobodySignalsTimesOutAndNamesTheWaiter) {
  UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
  auto results = test::runRanks(2, [&](int rank, int n) {
    Mesh mesh(rank, n, id, 64, 200 * kMs);
    const int peer = 1 - rank;
    if (rank == 1) {
      const auto start = std::chrono::steady_clock::now();
      try {
        mesh.put[peer].wait();
        ADD_FAILURE() << "wait returned without a signal";
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::kTimeout);
        EXPECT_EQ(e.message(),
                  "rank 1: semaphore wait on peer 0 channel 0 ran out of its 200 ms budget: expected 1, "
                  "observed 0");
      }
      EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(200));
      try {
        mesh.packet[peer].readPacket<LL16Packet>(0, 0, 9);
        ADD_FAILURE() << "readPacket returned without a packet";
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::kTimeout);
        EXPECT_NE(e.message().find("rank 1: packet read on peer 0 channel 0"), std::string::npos) << e.message();
        EXPECT_NE(e.message().find("expected 9, observed 0"), std::string::npos) << e.message();
      }
    }
    mesh.comm.bootstrap().barrier();
  });
  WEFT_EXPECT_RANKS_OK(results);
}

// Misuse is refused with a message: an unmapped or local "remote", memory of another kind, GPU counters in a
// build or machine without a GPU.
TEST(MemoryChannelMpTest, BadPartsAreRefused) {
  UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
  auto results = test::runRanks(2, [&](int rank, int n) {
    Communicator comm(std::make_shared<TcpBootstrap>(rank, n, id, milliseconds(10000)), hostOnlyConfig());
    const int peer = 1 - rank;
    auto sem = std::make_shared<MemoryDevice2DeviceSemaphore>(comm, comm.connect(peer, 1), 2, MemoryKind::kHost);
    auto storage = allocSharedHostMemory(4096);
    RegisteredMemory local = comm.registerMemory(storage.get(), 4096, MemoryKind::kHost);
    comm.sendMemory(local, peer, 3);
    RegisteredMemory remote = comm.recvMemory(peer, 3);
    try {
      MemoryChannel bad(sem, local, local);
      ADD_FAILURE() << "a local buffer was taken as the remote one";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(e.message().find("memory channel to rank " + std::to_string(peer)), std::string::npos);
    }
    EXPECT_THROW(MemoryChannel(sem, remote, remote), Error);
    EXPECT_THROW(MemoryChannel(nullptr, remote, local), Error);
    MemoryChannel good(sem, remote, local);
    EXPECT_EQ(good.peer(), peer);
    EXPECT_EQ(good.deviceHandle().remote, remote.data());
    if (kGpuPlatform == GpuPlatform::kNone) {
      EXPECT_EQ(defaultSemaphoreMemoryKind(), MemoryKind::kHost);
      try {
        MemoryDevice2DeviceSemaphore gpu(comm, comm.connect(peer, 4), 5, MemoryKind::kGpu);
        ADD_FAILURE() << "GPU counters were made without a GPU";
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::kNotSupported);
      }
    }
    comm.bootstrap().barrier();
  });
  WEFT_EXPECT_RANKS_OK(results);
}

}  // namespace
}  // namespace weft
