// The trigger FIFO driven by host threads (the same protocol code GPU producers run): many concurrent producers
// through a small ring (wrap-around and back-pressure), per-producer order, nothing lost or duplicated, the lap bit
// across many laps, pushPair adjacency, and the push/sync timeouts naming what waited.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>
#include <weft/error.hpp>
#include <weft/fifo.hpp>
#include <weft/gpu.hpp>

namespace weft {
namespace {

constexpr uint64_t kMs = 1'000'000;

FifoTrigger makeTrigger(uint32_t producer, uint32_t seq) {
  return FifoTrigger{(static_cast<uint64_t>(producer) << 32) | seq, static_cast<uint64_t>(seq) * 3 + 1};
}

// Consumes `total` triggers, checking each producer's sequence arrives in order and each trigger is intact.
void consume(Fifo& fifo, uint64_t total, uint32_t producers, std::vector<uint32_t>& nextSeq, uint64_t& corrupt) {
  uint64_t got = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (got < total) {
    FifoTrigger t{};
    if (!fifo.poll(&t)) {
      ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "consumer stalled after " << got << " triggers";
      std::this_thread::yield();
      continue;
    }
    const uint32_t producer = static_cast<uint32_t>(t.word0 >> 32);
    const uint32_t seq = static_cast<uint32_t>(t.word0);
    if (producer >= producers || t.word1 != static_cast<uint64_t>(seq) * 3 + 1) {
      ++corrupt;
    } else {
      EXPECT_EQ(seq, nextSeq[producer]) << "producer " << producer << " out of order or duplicated";
      nextSeq[producer] = seq + 1;
    }
    fifo.pop();
    ++got;
  }
}

TEST(FifoTest, ManyProducersThroughASmallRingLoseNothingAndKeepOrder) {
  constexpr uint32_t kProducers = 8;
  constexpr uint32_t kPerProducer = 20000;
  Fifo fifo(16, HandleSide::kHost);  // 16 slots: 10,000 laps, producers mostly wait for room
  const FifoDeviceHandle h = fifo.deviceHandle(10'000 * kMs);
  std::vector<std::thread> producers;
  std::vector<std::vector<uint64_t>> positions(kProducers);
  for (uint32_t p = 0; p < kProducers; ++p) {
    producers.emplace_back([&, p] {
      for (uint32_t i = 0; i < kPerProducer; ++i) positions[p].push_back(h.push(makeTrigger(p, i)));
    });
  }
  std::vector<uint32_t> nextSeq(kProducers, 0);
  uint64_t corrupt = 0;
  consume(fifo, uint64_t{kProducers} * kPerProducer, kProducers, nextSeq, corrupt);
  for (auto& t : producers) t.join();
  EXPECT_EQ(corrupt, 0u);
  for (uint32_t p = 0; p < kProducers; ++p) EXPECT_EQ(nextSeq[p], kPerProducer) << "producer " << p;
  // Every position was handed out exactly once, and each producer's positions increase.
  std::vector<uint8_t> seen(uint64_t{kProducers} * kPerProducer, 0);
  for (uint32_t p = 0; p < kProducers; ++p) {
    for (size_t i = 0; i < positions[p].size(); ++i) {
      ASSERT_LT(positions[p][i], seen.size());
      ++seen[positions[p][i]];
      if (i > 0) EXPECT_LT(positions[p][i - 1], positions[p][i]);
    }
  }
  EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), static_cast<long>(seen.size()));
  EXPECT_EQ(fifo.finished(), uint64_t{kProducers} * kPerProducer);
  FifoTrigger none{};
  EXPECT_FALSE(fifo.poll(&none)) << "a slot of the previous lap looked new";
}

TEST(FifoTest, LapBitTellsNewFromOldOverManyLaps) {
  Fifo fifo(4, HandleSide::kHost);
  const FifoDeviceHandle h = fifo.deviceHandle(100 * kMs);
  for (uint32_t i = 0; i < 1000; ++i) {
    FifoTrigger t{};
    ASSERT_FALSE(fifo.poll(&t)) << "empty slot looked written at position " << i;
    EXPECT_EQ(h.push(makeTrigger(1, i)), i);
    ASSERT_TRUE(fifo.poll(&t));
    EXPECT_EQ(t.word0, makeTrigger(1, i).word0);
    EXPECT_EQ(t.word1, makeTrigger(1, i).word1) << "lap bit leaked into the payload";
    EXPECT_FALSE(fifo.poll(&t, 1));
    fifo.pop();
  }
}

TEST(FifoTest, FullRingAppliesBackPressureUntilTheConsumerPops) {
  Fifo fifo(8, HandleSide::kHost);
  const FifoDeviceHandle h = fifo.deviceHandle(5000 * kMs);
  for (uint32_t i = 0; i < 8; ++i) h.push(makeTrigger(0, i));
  std::atomic<bool> pushed{false};
  std::thread late([&] {
    h.push(makeTrigger(0, 8));
    pushed = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(pushed.load()) << "push into a full ring did not wait";
  FifoTrigger t{};
  ASSERT_TRUE(fifo.poll(&t));
  fifo.pop();
  late.join();
  EXPECT_TRUE(pushed.load());
  for (uint32_t i = 1; i <= 8; ++i) {
    ASSERT_TRUE(fifo.poll(&t));
    EXPECT_EQ(static_cast<uint32_t>(t.word0), i);
    fifo.pop();
  }
}

TEST(FifoTest, PushIntoAFullRingTimesOutNamingTheFifoPush) {
  Fifo fifo(4, HandleSide::kHost, nullptr, 3);
  const FifoDeviceHandle h = fifo.deviceHandle(50 * kMs);
  for (uint32_t i = 0; i < 4; ++i) h.push(makeTrigger(0, i));
  const auto start = std::chrono::steady_clock::now();
  try {
    h.push(makeTrigger(0, 4));
    FAIL() << "push into a full ring with no consumer returned";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kTimeout);
    EXPECT_NE(e.message().find("fifo push"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("rank 3"), std::string::npos) << e.message();
  }
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(50));
  EXPECT_TRUE(fifo.errors().hasError());
  EXPECT_NE(fifo.errors().describe().find("fifo push"), std::string::npos);
}

TEST(FifoTest, SyncWaitsForTheConsumerAndTimesOutWithoutIt) {
  Fifo fifo(8, HandleSide::kHost);
  const FifoDeviceHandle h = fifo.deviceHandle(30 * kMs);
  const uint64_t a = h.push(makeTrigger(0, 0));
  const uint64_t b = h.push(makeTrigger(0, 1));
  EXPECT_FALSE(h.finished(a));
  try {
    h.sync(a);
    FAIL() << "sync on an unpopped trigger returned";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kTimeout);
    EXPECT_NE(e.message().find("fifo sync"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("expected 1, observed 0"), std::string::npos) << e.message();
  }
  FifoTrigger t{};
  ASSERT_TRUE(fifo.poll(&t));
  fifo.pop();
  h.sync(a, 1000 * kMs);
  EXPECT_TRUE(h.finished(a));
  EXPECT_FALSE(h.finished(b));
  std::thread consumer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    FifoTrigger u{};
    ASSERT_TRUE(fifo.poll(&u));
    fifo.pop();
  });
  h.sync(b, 2000 * kMs);  // returns once the consumer thread pops b
  consumer.join();
  EXPECT_EQ(fifo.finished(), 2u);
}

TEST(FifoTest, PushPairTakesAdjacentPositionsUnderConcurrency) {
  constexpr uint32_t kProducers = 4;
  constexpr uint32_t kPairs = 5000;
  Fifo fifo(32, HandleSide::kHost);
  const FifoDeviceHandle h = fifo.deviceHandle(10'000 * kMs);
  std::vector<std::thread> producers;
  for (uint32_t p = 0; p < kProducers; ++p) {
    producers.emplace_back([&, p] {
      for (uint32_t i = 0; i < kPairs; ++i) h.pushPair(makeTrigger(p, 2 * i), makeTrigger(p, 2 * i + 1), 10'000 * kMs);
    });
  }
  uint64_t broken = 0;
  for (uint64_t n = 0; n < uint64_t{kProducers} * kPairs; ++n) {
    FifoTrigger first{}, second{};
    ASSERT_TRUE(spinWaitUntil([&] { return fifo.poll(&first); }, WaitBudget{10'000 * kMs}));
    ASSERT_TRUE(spinWaitUntil([&] { return fifo.poll(&second, 1); }, WaitBudget{10'000 * kMs}));
    if (second.word0 != first.word0 + 1 || (first.word0 & 1) != 0) ++broken;
    fifo.pop(2);
  }
  for (auto& t : producers) t.join();
  EXPECT_EQ(broken, 0u) << "another producer's trigger came between the two of a pair";
}

TEST(FifoTest, SizeOutsideTheLimitsIsRefused) {
  EXPECT_THROW(Fifo(0, HandleSide::kHost), Error);
  try {
    Fifo f(kMaxFifoSize + 1, HandleSide::kHost);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(e.message().find("fifo size"), std::string::npos);
  }
}

TEST(FifoTest, DeviceSideFallsBackToHostWithoutAGpu) {
  Fifo fifo(16);  // kDevice by default
  if (kHasGpuRuntime && gpuDeviceCount() > 0) GTEST_SKIP() << "a GPU is present: the FIFO lives on it";
  EXPECT_EQ(fifo.side(), HandleSide::kHost);
  const FifoDeviceHandle h = fifo.deviceHandle();
  EXPECT_EQ(h.defaultBudgetNs, defaultWaitBudgetNs());
  h.push(makeTrigger(0, 7));
  FifoTrigger t{};
  ASSERT_TRUE(fifo.poll(&t));
  EXPECT_EQ(t.word0, makeTrigger(0, 7).word0);
}

}  // namespace
}  // namespace weft
