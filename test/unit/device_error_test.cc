// The wait-timeout record: host code running the device protocol throws an error that names the waiter,
// and a record filled by a waiter is what DeviceErrorBlock::check reports.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <thread>
#include <weft/device_error.hpp>
#include <weft/error.hpp>

namespace weft {
namespace {

TEST(DeviceErrorTest, WaitThatNobodySatisfiesRecordsAndThrows) {
  DeviceErrorBlock block;
  uint64_t word = 3;
  WaitSite site{block.deviceRecord(), 2, 5, 7};
  auto start = std::chrono::steady_clock::now();
  try {
    waitAtLeast(&word, uint64_t{4}, 50'000'000, site, WaitOp::kSemaphoreWait);
    FAIL() << "returned without the value";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kTimeout);
    EXPECT_STREQ(
        e.what(),
        "timeout: rank 2: semaphore wait on peer 5 channel 7 ran out of its 50 ms budget: expected 4, observed 3");
  }
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(50));
  ASSERT_TRUE(block.hasError());
  EXPECT_EQ(block.hostRecord()->peer, 5);
  EXPECT_THROW(block.check(), Error);
  block.clear();
  EXPECT_FALSE(block.hasError());
  EXPECT_NO_THROW(block.check());
}

TEST(DeviceErrorTest, FirstReportWins) {
  DeviceErrorBlock block;
  WaitSite a{block.deviceRecord(), 0, 1, -1};
  WaitSite b{block.deviceRecord(), 0, 2, -1};
  EXPECT_THROW(reportWaitTimeout(a, WaitOp::kFifoPush, 1, 0, 1000000), Error);
  EXPECT_THROW(reportWaitTimeout(b, WaitOp::kChannelWait, 9, 8, 1000000), Error);
  EXPECT_EQ(block.describe(), "rank 0: fifo push on peer 1 ran out of its 1 ms budget: expected 1, observed 0");
}

TEST(DeviceErrorTest, WaitReturnsOnceAnotherThreadStores) {
  uint64_t word = 0;
  std::thread t([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    atomicStore<MemoryOrder::kRelease>(&word, uint64_t{10});
  });
  WaitSite site{nullptr, 0, -1, -1};
  EXPECT_EQ(waitAtLeast(&word, uint64_t{10}, 5'000'000'000ull, site, WaitOp::kSemaphoreWait), 10u);
  t.join();
}

// consumeNextSignal advances the consumed count before it waits: a timeout must put it back, or a caller that
// catches the error and waits again would wait for one signal too many.
TEST(DeviceErrorTest, ConsumingWaitThatTimesOutLeavesTheSignalToConsume) {
  uint64_t word = 4;
  uint64_t consumed = 4;
  WaitSite site{nullptr, 1, 0, -1};
  EXPECT_THROW(consumeNextSignal(&word, &consumed, 20'000'000, site, WaitOp::kSemaphoreWait), Error);
  EXPECT_EQ(consumed, 4u);
  atomicStore<MemoryOrder::kRelease>(&word, uint64_t{5});
  consumeNextSignal(&word, &consumed, 1'000'000'000, site, WaitOp::kSemaphoreWait);
  EXPECT_EQ(consumed, 5u);
  EXPECT_THROW(consumeNextSignal<MemoryOrder::kRelaxed>(&word, &consumed, 20'000'000, site, WaitOp::kSemaphoreWait),
               Error);
  EXPECT_EQ(consumed, 5u);
}

TEST(DeviceErrorTest, DefaultBudgetFollowsTheParameter) {
  setenv("WEFT_WAIT_TIMEOUT_MS", "1500", 1);
  EXPECT_EQ(defaultWaitBudgetNs(), 1'500'000'000ull);
  unsetenv("WEFT_WAIT_TIMEOUT_MS");
  EXPECT_EQ(defaultWaitBudgetNs(), 30'000'000'000ull);
}

}  // namespace
}  // namespace weft
