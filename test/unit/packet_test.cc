// LL8/LL16 packets, the cooperative copy and the memory channel/semaphore device handles, driven by host
// threads on plain host memory (the same protocol code kernels run).
#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <thread>
#include <vector>
#include <weft/copy_device.hpp>
#include <weft/error.hpp>
#include <weft/memory_channel_device.hpp>
#include <weft/packet_device.hpp>

namespace weft {
namespace {

constexpr uint64_t kMs = 1'000'000;

uint8_t patternByte(uint64_t i, uint32_t salt) { return static_cast<uint8_t>((i * 131 + salt * 17 + 5) & 0xff); }

// Runs body(threadId, numThreads) on `numThreads` real host threads standing in for GPU threads.
template <class F>
void onThreads(uint32_t numThreads, F&& body) {
  std::vector<std::thread> threads;
  for (uint32_t t = 0; t < numThreads; ++t) threads.emplace_back([&, t] { body(t, numThreads); });
  for (auto& th : threads) th.join();
}

TEST(PacketTest, LayoutIsDataFlagDataFlag) {
  static_assert(offsetof(LL16Packet, data0) == 0 && offsetof(LL16Packet, flag0) == 4);
  static_assert(offsetof(LL16Packet, data1) == 8 && offsetof(LL16Packet, flag1) == 12);
  static_assert(offsetof(LL8Packet, data) == 0 && offsetof(LL8Packet, flag) == 4);
  LL16Packet p = LL16Packet::encode(0x1122334455667788ull, 0xabcdu);
  EXPECT_EQ(p.data0, 0x55667788u);
  EXPECT_EQ(p.data1, 0x11223344u);
  EXPECT_EQ(p.flag0, 0xabcdu);
  EXPECT_EQ(p.flag1, 0xabcdu);
  LL8Packet q = LL8Packet::encode(0xdeadbeefu, 7);
  EXPECT_EQ(q.data, 0xdeadbeefu);
  EXPECT_EQ(q.flag, 7u);
}

TEST(PacketTest, DecodeAcceptsOnlyTheExpectedFlagInBothHalves) {
  uint64_t payload = 0;
  uint32_t seen = 0;
  LL16Packet p = LL16Packet::encode(0x0102030405060708ull, 9);
  ASSERT_TRUE(LL16Packet::decode(p, 9, payload, seen));
  EXPECT_EQ(payload, 0x0102030405060708ull);
  EXPECT_FALSE(LL16Packet::decode(p, 10, payload, seen));
  EXPECT_EQ(seen, 9u);
  // A torn packet: the second half still carries the previous epoch's flag.
  LL16Packet torn = p;
  torn.flag1 = 8;
  payload = 0;
  EXPECT_FALSE(LL16Packet::decode(torn, 9, payload, seen));
  EXPECT_EQ(seen, 8u);
  EXPECT_EQ(payload, 0u);
  torn = p;
  torn.flag0 = 8;
  EXPECT_FALSE(LL16Packet::decode(torn, 9, payload, seen));
  EXPECT_EQ(seen, 8u);

  uint32_t small = 0;
  LL8Packet q = LL8Packet::encode(42, 3);
  ASSERT_TRUE(LL8Packet::decode(q, 3, small, seen));
  EXPECT_EQ(small, 42u);
  EXPECT_FALSE(LL8Packet::decode(q, 4, small, seen));
  EXPECT_EQ(seen, 3u);
}

TEST(PacketTest, StoreThenLoadRoundTripsThroughMemory) {
  LL16Packet p16{};
  LL16Packet::store(&p16, 0xfedcba9876543210ull, 77);
  uint64_t payload = 0;
  uint32_t seen = 0;
  ASSERT_TRUE(LL16Packet::tryLoad(&p16, 77, payload, seen));
  EXPECT_EQ(payload, 0xfedcba9876543210ull);
  EXPECT_FALSE(LL16Packet::tryLoad(&p16, 78, payload, seen));
  LL8Packet p8{};
  LL8Packet::store(&p8, 0x01020304u, 5);
  uint32_t small = 0;
  ASSERT_TRUE(LL8Packet::tryLoad(&p8, 5, small, seen));
  EXPECT_EQ(small, 0x01020304u);
  EXPECT_EQ(packetCount<LL16Packet>(17), 3u);
  EXPECT_EQ(packetBufferBytes<LL16Packet>(17), 48u);
  EXPECT_EQ(packetCount<LL8Packet>(17), 5u);
  EXPECT_EQ(packetBufferBytes<LL8Packet>(0), 0u);
}

TEST(PacketTest, ReadingAPacketNobodyWroteTimesOutAndNamesTheWaiter) {
  LL16Packet p = LL16Packet::encode(1, 4);  // last epoch's packet
  DeviceErrorRecord record{};
  WaitSite site{&record, 2, 3, 11};
  try {
    (void)readPacket(&p, 5u, 20 * kMs, site);
    FAIL() << "readPacket returned without its flag";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kTimeout);
    std::string what = e.what();
    EXPECT_NE(what.find("rank 2"), std::string::npos) << what;
    EXPECT_NE(what.find("packet read"), std::string::npos) << what;
    EXPECT_NE(what.find("peer 3"), std::string::npos) << what;
    EXPECT_NE(what.find("channel 11"), std::string::npos) << what;
    EXPECT_NE(what.find("expected 5, observed 4"), std::string::npos) << what;
  }
  EXPECT_EQ(record.state, 2u);
  EXPECT_EQ(record.op, static_cast<uint32_t>(WaitOp::kPacketRead));
  EXPECT_EQ(record.expected, 5u);
  EXPECT_EQ(record.observed, 4u);
}

// One writer and one reader thread reuse the same packet buffer for many epochs without clearing it; every
// epoch's data differs, so a stale packet accepted as new would show up as wrong data.
template <class Packet>
void epochReuseWithoutClearing(uint64_t bytes, uint32_t threadsPerSide) {
  constexpr int kEpochs = 200;
  std::vector<Packet> buffer(packetCount<Packet>(bytes));  // zeroed once, never again
  std::vector<std::vector<uint8_t>> sent(kEpochs, std::vector<uint8_t>(bytes));
  std::vector<std::vector<uint8_t>> received(kEpochs, std::vector<uint8_t>(bytes, 0));
  for (int e = 0; e < kEpochs; ++e) {
    for (uint64_t i = 0; i < bytes; ++i) sent[e][i] = patternByte(i, static_cast<uint32_t>(e));
  }
  // The reader acknowledges each epoch so the writer never overwrites a packet that is still unread.
  uint64_t acked = 0;
  WaitSite site{nullptr, 0, 1, 0};
  std::thread writer([&] {
    for (int e = 0; e < kEpochs; ++e) {
      waitAtLeast(&acked, static_cast<uint64_t>(e) * threadsPerSide, 2000 * kMs, site, WaitOp::kChannelWait);
      onThreads(threadsPerSide, [&](uint32_t t, uint32_t n) {
        putPackets(buffer.data(), sent[e].data(), bytes, static_cast<uint32_t>(e + 1), t, n);
      });
    }
  });
  std::thread reader([&] {
    for (int e = 0; e < kEpochs; ++e) {
      onThreads(threadsPerSide, [&](uint32_t t, uint32_t n) {
        unpackPackets(received[e].data(), buffer.data(), bytes, static_cast<uint32_t>(e + 1), t, n, 2000 * kMs, site);
        atomicFetchAdd<MemoryOrder::kRelease>(&acked, uint64_t{1});
      });
    }
  });
  writer.join();
  reader.join();
  int wrongEpochs = 0;
  for (int e = 0; e < kEpochs; ++e) wrongEpochs += sent[e] != received[e] ? 1 : 0;
  EXPECT_EQ(wrongEpochs, 0);
}

TEST(PacketTest, Ll16EpochsReuseTheBufferWithoutClearing) { epochReuseWithoutClearing<LL16Packet>(1000, 3); }
TEST(PacketTest, Ll8EpochsReuseTheBufferWithoutClearing) { epochReuseWithoutClearing<LL8Packet>(1001, 2); }
TEST(PacketTest, Ll16OneByteEpochs) { epochReuseWithoutClearing<LL16Packet>(1, 1); }

// Packets of odd sizes and source/destination offsets, split over many thread counts: exactly the bytes asked
// for arrive, and the guard bytes around the destination are untouched.
template <class Packet>
void packUnpackOddShapes() {
  const uint64_t sizes[] = {1, 3, 4, 5, 7, 8, 9, 15, 16, 17, 63, 100, 1027};
  const uint32_t threadCounts[] = {1, 2, 3, 5, 32, 64};
  uint32_t flag = 1;
  for (uint64_t bytes : sizes) {
    for (uint64_t offset : {0, 1, 3, 6}) {
      for (uint32_t n : threadCounts) {
        std::vector<uint8_t> src(bytes + 16);
        for (uint64_t i = 0; i < src.size(); ++i) src[i] = patternByte(i, flag);
        std::vector<Packet> packets(packetCount<Packet>(bytes));
        std::vector<uint8_t> dst(bytes + 32, 0xee);
        for (uint32_t t = 0; t < n; ++t) putPackets(packets.data(), src.data() + offset, bytes, flag, t, n);
        WaitSite site{nullptr, 0, 1, 0};
        for (uint32_t t = 0; t < n; ++t) {
          unpackPackets(dst.data() + 8 + offset, packets.data(), bytes, flag, t, n, 100 * kMs, site);
        }
        ASSERT_EQ(std::memcmp(dst.data() + 8 + offset, src.data() + offset, bytes), 0)
            << "bytes " << bytes << " offset " << offset << " threads " << n;
        for (uint64_t i = 0; i < 8 + offset; ++i) ASSERT_EQ(dst[i], 0xee) << "guard before, byte " << i;
        for (uint64_t i = 8 + offset + bytes; i < dst.size(); ++i) ASSERT_EQ(dst[i], 0xee) << "guard after " << i;
        ++flag;
      }
    }
  }
}

TEST(PacketTest, Ll16OddSizesOffsetsAndThreadCounts) { packUnpackOddShapes<LL16Packet>(); }
TEST(PacketTest, Ll8OddSizesOffsetsAndThreadCounts) { packUnpackOddShapes<LL8Packet>(); }

// The cooperative copy over every combination of small sizes, source and destination misalignment and thread
// count: each byte written once, nothing outside the range touched.
TEST(CooperativeCopyTest, OddSizesOffsetsAndThreadCounts) {
  const uint32_t threadCounts[] = {1, 2, 3, 4, 7, 16, 31, 64, 256};
  for (uint64_t bytes : {0ull, 1ull, 2ull, 15ull, 16ull, 17ull, 31ull, 33ull, 100ull, 255ull, 4097ull}) {
    for (uint64_t srcOff = 0; srcOff < 16; srcOff += 3) {
      for (uint64_t dstOff = 0; dstOff < 16; dstOff += 5) {
        for (uint32_t n : threadCounts) {
          alignas(16) static uint8_t src[4097 + 64];
          alignas(16) static uint8_t dst[4097 + 64];
          for (uint64_t i = 0; i < sizeof(src); ++i) src[i] = patternByte(i, static_cast<uint32_t>(bytes + n));
          std::memset(dst, 0xee, sizeof(dst));
          for (uint32_t t = 0; t < n + 2; ++t)
            copyCooperative(dst + dstOff, src + srcOff, bytes, t, n);  // t >= n: no-op
          ASSERT_EQ(std::memcmp(dst + dstOff, src + srcOff, bytes), 0)
              << "bytes " << bytes << " src+" << srcOff << " dst+" << dstOff << " threads " << n;
          for (uint64_t i = 0; i < dstOff; ++i) ASSERT_EQ(dst[i], 0xee);
          for (uint64_t i = dstOff + bytes; i < sizeof(dst); ++i) ASSERT_EQ(dst[i], 0xee) << "byte " << i;
        }
      }
    }
  }
}

// The one-thread copy (sixteen loads in flight) over sizes around its 256-byte step and every offset pairing.
TEST(CooperativeCopyTest, OneThreadCopyOddSizesAndOffsets) {
  for (uint64_t bytes : {0ull, 1ull, 15ull, 16ull, 255ull, 256ull, 257ull, 511ull, 1024ull, 4096ull, 4097ull}) {
    for (uint64_t srcOff = 0; srcOff < 32; srcOff += 7) {
      for (uint64_t dstOff = 0; dstOff < 32; dstOff += 5) {
        alignas(16) static uint8_t src[4097 + 64];
        alignas(16) static uint8_t dst[4097 + 64];
        for (uint64_t i = 0; i < sizeof(src); ++i) src[i] = patternByte(i, static_cast<uint32_t>(bytes));
        std::memset(dst, 0xee, sizeof(dst));
        copyByOneThread(dst + dstOff, src + srcOff, bytes);
        ASSERT_EQ(std::memcmp(dst + dstOff, src + srcOff, bytes), 0)
            << "bytes " << bytes << " src+" << srcOff << " dst+" << dstOff;
        for (uint64_t i = 0; i < dstOff; ++i) ASSERT_EQ(dst[i], 0xee);
        for (uint64_t i = dstOff + bytes; i < sizeof(dst); ++i) ASSERT_EQ(dst[i], 0xee) << "byte " << i;
      }
    }
  }
}

TEST(CooperativeCopyTest, RealThreadsCopyALargeUnalignedRange) {
  const uint64_t bytes = (3u << 20) + 13;
  std::vector<uint8_t> src(bytes + 32), dst(bytes + 32, 0);
  for (uint64_t i = 0; i < src.size(); ++i) src[i] = patternByte(i, 9);
  for (uint32_t n : {1u, 3u, 8u}) {
    std::fill(dst.begin(), dst.end(), 0);
    onThreads(n, [&](uint32_t t, uint32_t k) { copyCooperative(dst.data() + 5, src.data() + 5, bytes, t, k); });
    EXPECT_EQ(std::memcmp(dst.data() + 5, src.data() + 5, bytes), 0) << n << " threads";
    EXPECT_EQ(dst[4], 0);
    EXPECT_EQ(dst[5 + bytes], 0);
  }
}

// Two "ranks" as host threads, each with a channel handle onto the other's plain memory: put, signal, wait,
// get, single-element read/write and packets through the same handle code kernels use.
struct LocalPair {
  std::vector<uint8_t> data[2];
  std::vector<uint8_t> packets[2];
  uint64_t inbound[2] = {0, 0};
  uint64_t expected[2] = {0, 0};
  MemoryChannelDeviceHandle handle[2];
  // With `packetMode`, `remote` is the peer's packet buffer (so putPackets land where the peer unpacks);
  // otherwise it is the peer's data buffer.
  explicit LocalPair(uint64_t bytes, uint64_t budgetNs = 2000 * kMs, bool packetMode = false) {
    for (int r = 0; r < 2; ++r) {
      data[r].assign(bytes, 0);
      packets[r].assign(bytes * 4 + 64, 0);
    }
    for (int r = 0; r < 2; ++r) {
      const int p = 1 - r;
      MemoryChannelDeviceHandle& h = handle[r];
      h.semaphore = {&inbound[r], &inbound[p], &expected[r], budgetNs, WaitSite{nullptr, r, p, 7}};
      h.remote = packetMode ? packets[p].data() : data[p].data();
      h.remoteBytes = packetMode ? packets[p].size() : bytes;
      h.local = data[r].data();
      h.localBytes = bytes;
      h.packets = packets[r].data();
      h.packetBytes = packets[r].size();
    }
  }
};

TEST(MemoryChannelHandleTest, PutSignalWaitGetBetweenTwoThreads) {
  constexpr uint64_t kBytes = 10007;
  constexpr uint64_t kIndex = 2 * kBytes / 4 + 4;  // a uint32_t past every range the copies touch
  LocalPair pair(3 * kBytes);
  for (uint64_t i = 0; i < kBytes; ++i) pair.data[0][i] = patternByte(i, 1);
  std::thread rank0([&] {
    const auto& h = pair.handle[0];
    onThreads(5, [&](uint32_t t, uint32_t n) { h.put(kBytes + 3, 0, kBytes - 3, t, n); });
    h.signal();
    h.wait();                                      // rank 1 has read it and written its answer
    EXPECT_EQ(h.read<uint32_t>(kIndex), 0xbeefu);  // rank 1's own memory, read remotely
  });
  std::thread rank1([&] {
    const auto& h = pair.handle[1];
    h.wait();
    h.write<uint32_t>(kIndex, 0xc0ffeeu);
    reinterpret_cast<uint32_t*>(h.local)[kIndex] = 0xbeefu;
    onThreads(3, [&](uint32_t t, uint32_t n) { h.get(1, 1, 100, t, n); });  // rank 0's first bytes, by get
    h.signal();
  });
  rank0.join();
  rank1.join();
  int wrong = 0;
  for (uint64_t i = 0; i + 3 < kBytes; ++i) wrong += pair.data[1][kBytes + 3 + i] != patternByte(i, 1);
  for (uint64_t i = 1; i < 101; ++i) wrong += pair.data[1][i] != patternByte(i, 1);
  uint32_t element = 0;
  std::memcpy(&element, &pair.data[0][kIndex * 4], 4);
  EXPECT_EQ(element, 0xc0ffeeu);  // write() landed in rank 0's memory
  EXPECT_EQ(wrong, 0);
  EXPECT_EQ(pair.handle[0].semaphore.consumed(), 1u);
  EXPECT_EQ(pair.handle[1].semaphore.received(), 1u);
}

TEST(MemoryChannelHandleTest, PacketPingPongBetweenTwoThreads) {
  constexpr uint64_t kBytes = 333;
  constexpr int kRounds = 300;
  LocalPair pair(kBytes, 2000 * kMs, true);
  int wrong = 0;
  std::thread rank0([&] {
    const auto& h = pair.handle[0];
    for (int r = 0; r < kRounds; ++r) {
      for (uint64_t i = 0; i < kBytes; ++i) pair.data[0][i] = patternByte(i, r);
      const uint32_t flag = static_cast<uint32_t>(2 * r + 1);
      h.putPackets<LL16Packet>(0, 0, kBytes, flag, 0, 1);
      h.unpackPackets<LL16Packet>(0, 0, kBytes, flag + 1, 0, 1);  // the echo, incremented
      for (uint64_t i = 0; i < kBytes; ++i) wrong += pair.data[0][i] != static_cast<uint8_t>(patternByte(i, r) + 1);
    }
  });
  std::thread rank1([&] {
    const auto& h = pair.handle[1];
    for (int r = 0; r < kRounds; ++r) {
      const uint32_t flag = static_cast<uint32_t>(2 * r + 1);
      h.unpackPackets<LL16Packet>(0, 0, kBytes, flag, 0, 1);
      for (uint64_t i = 0; i < kBytes; ++i) ++pair.data[1][i];
      h.putPackets<LL16Packet>(0, 0, kBytes, flag + 1, 0, 1);
    }
  });
  rank0.join();
  rank1.join();
  EXPECT_EQ(wrong, 0);
}

TEST(MemoryChannelHandleTest, SingleLl8PacketsByIndex) {
  LocalPair pair(64, 2000 * kMs, true);
  const auto& a = pair.handle[0];
  const auto& b = pair.handle[1];
  for (uint32_t i = 0; i < 8; ++i) a.writePacket<LL8Packet>(16, i, 1000 + i, 3);
  for (uint32_t i = 0; i < 8; ++i) EXPECT_EQ(b.readPacket<LL8Packet>(16, i, 3), 1000 + i);
}

TEST(MemorySemaphoreHandleTest, ManyWaitersWithTheirOwnTargets) {
  LocalPair pair(8);
  constexpr int kSignals = 500;
  constexpr uint32_t kWaiters = 4;
  std::vector<uint64_t> lastSeen(kWaiters, 0);
  std::thread signaller([&] {
    for (int i = 0; i < kSignals; ++i) pair.handle[0].signal();
  });
  onThreads(kWaiters, [&](uint32_t t, uint32_t) {
    for (uint64_t target = 1; target <= kSignals; ++target) pair.handle[1].semaphore.waitFor(target);
    lastSeen[t] = pair.handle[1].semaphore.received();
  });
  signaller.join();
  for (uint32_t t = 0; t < kWaiters; ++t) EXPECT_EQ(lastSeen[t], static_cast<uint64_t>(kSignals));
  EXPECT_EQ(pair.handle[1].semaphore.consumed(), 0u);  // waitFor leaves `expected` alone
  EXPECT_TRUE(pair.handle[1].poll());
  EXPECT_EQ(pair.handle[1].semaphore.consumed(), 1u);
}

TEST(MemorySemaphoreHandleTest, RelaxedSignalsAndWaitsCount) {
  LocalPair pair(8);
  for (int i = 0; i < 3; ++i) pair.handle[0].relaxedSignal();
  for (int i = 0; i < 3; ++i) pair.handle[1].relaxedWait();
  EXPECT_FALSE(pair.handle[1].poll());
  EXPECT_EQ(pair.handle[1].semaphore.consumed(), 3u);
}

TEST(MemorySemaphoreHandleTest, WaitNobodySignalsTimesOutAndNamesTheWaiter) {
  LocalPair pair(8, 30 * kMs);
  DeviceErrorRecord record{};
  pair.handle[1].semaphore.site.record = &record;
  pair.handle[0].signal();
  pair.handle[1].wait();  // the one signal that was sent
  const uint64_t start = clockNanoseconds();
  try {
    pair.handle[1].wait();
    FAIL() << "wait returned without a signal";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kTimeout);
    EXPECT_EQ(e.message(),
              "rank 1: semaphore wait on peer 0 channel 7 ran out of its 30 ms budget: expected 2, observed 1")
        << e.what();
  }
  EXPECT_GE(clockNanoseconds() - start, 30 * kMs);
  EXPECT_EQ(record.state, 2u);
  EXPECT_EQ(record.rank, 1);
  EXPECT_EQ(record.peer, 0);
  EXPECT_EQ(record.channel, 7);
  EXPECT_EQ(pair.handle[1].semaphore.consumed(), 1u);  // a failed wait consumes nothing
}

}  // namespace
}  // namespace weft
