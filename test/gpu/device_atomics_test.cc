// Tests of include/weft/device.hpp: atomics, release/acquire message passing and budgeted spin-waits.
//
// Each protocol (device_atomics_kernels.hpp) is written once and run twice: by GPU kernels (skipped when
// there is no GPU) and by host threads (always, in every build), so the same code is checked on both sides.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>
#include <weft/device.hpp>
#include <weft/error.hpp>
#include <weft/gpu.hpp>

#include "device_array.hpp"
#include "device_atomics_kernels.hpp"

namespace weft::test {
namespace {

void expectCountedExactlyOnce(uint64_t counter, const std::vector<uint32_t>& seen) {
  ASSERT_EQ(counter, seen.size());
  size_t wrong = 0;
  size_t firstWrong = seen.size();
  for (size_t i = 0; i < seen.size(); ++i) {
    if (seen[i] != 1) {
      ++wrong;
      if (firstWrong == seen.size()) firstWrong = i;
    }
  }
  EXPECT_EQ(wrong, 0u) << "first value not returned exactly once: " << firstWrong;
}

void expectStuckWaitTimedOut(const StuckWait& w, uint64_t budgetNs) {
  EXPECT_EQ(w.returned, 0u) << "spinWaitUntil reported a flag nobody set";
  EXPECT_GE(w.elapsedNs, budgetNs) << "gave up before the budget ran out";
  EXPECT_LT(w.elapsedNs, 2000 * kMillisecond) << "overran the budget by far";
}

// --- Host threads ----------------------------------------------------------------------------------

TEST(DeviceAtomicsHost, FetchAddFromManyThreadsLosesNothing) {
  constexpr int kThreads = 8;
  constexpr int kIters = 20000;
  uint64_t counter = 0;
  std::vector<uint32_t> seen(static_cast<size_t>(kThreads) * kIters, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back([&] { countingRole(&counter, seen.data(), kIters); });
  for (auto& t : threads) t.join();
  expectCountedExactlyOnce(counter, seen);
}

TEST(DeviceAtomicsHost, ReleaseAcquirePublishesEveryWord) {
  constexpr int kRounds = 2000;
  Mailbox box{};
  std::thread writer([&] { writerRole(&box, kRounds, 2000 * kMillisecond); });
  std::thread reader([&] { readerRole(&box, kRounds, 2000 * kMillisecond); });
  writer.join();
  reader.join();
  EXPECT_EQ(box.timeouts, 0u);
  EXPECT_EQ(box.errors, 0u);
  EXPECT_EQ(box.ack, static_cast<uint64_t>(kRounds));
}

TEST(DeviceAtomicsHost, SpinWaitGivesUpWhenBudgetRunsOut) {
  constexpr uint64_t kBudget = 5 * kMillisecond;
  StuckWait w{};
  std::thread waiter([&] { stuckWaitRole(&w, kBudget); });
  waiter.join();
  expectStuckWaitTimedOut(w, kBudget);
}

TEST(DeviceAtomicsHost, SpinWaitSeesFlagSetByAnotherThread) {
  StuckWait w{};
  std::thread waiter([&] { stuckWaitRole(&w, 2000 * kMillisecond); });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  atomicStore<MemoryOrder::kRelease>(&w.flag, uint64_t{1});
  waiter.join();
  EXPECT_EQ(w.returned, 1u);
}

TEST(DeviceAtomicsHost, WithScopeRunsTheFormOfTheScopeAskedFor) {
  const auto scopeOf = [](auto tag) { return decltype(tag)::value; };
  EXPECT_EQ(withScope(true, scopeOf), Scope::kDevice);
  EXPECT_EQ(withScope(false, scopeOf), Scope::kSystem);
  uint64_t flag = 0;
  withScope(false, [&](auto tag) { atomicStore<MemoryOrder::kRelease, decltype(tag)::value>(&flag, uint64_t{7}); });
  EXPECT_EQ(atomicLoad<MemoryOrder::kAcquire>(&flag), 7u);
}

// --- GPU kernels -----------------------------------------------------------------------------------

#if WEFT_BUILD_GPU_CUDA || WEFT_BUILD_GPU_HIP

#define WEFT_SKIP_WITHOUT_GPU()                                                          \
  if (gpuDeviceCount() == 0) {                                                           \
    GTEST_SKIP() << "no GPU on this machine: kernel variant skipped (host variant ran)"; \
  }

TEST(DeviceAtomicsGpu, FetchAddFromManyThreadsLosesNothing) {
  WEFT_SKIP_WITHOUT_GPU();
  constexpr int kBlocks = 132;
  constexpr int kThreadsPerBlock = 256;
  constexpr int kIters = 16;
  const size_t total = static_cast<size_t>(kBlocks) * kThreadsPerBlock * kIters;
  DeviceArray<uint64_t> counter(1);
  DeviceArray<uint32_t> seen(total);
  launchCountingKernel(counter.get(), seen.get(), kIters, kBlocks, kThreadsPerBlock);
  expectCountedExactlyOnce(counter.toHost()[0], seen.toHost());
}

TEST(DeviceAtomicsGpu, ReleaseAcquirePublishesEveryWordBetweenBlocks) {
  WEFT_SKIP_WITHOUT_GPU();
  constexpr int kRounds = 5000;
  DeviceArray<Mailbox> box(1);
  launchMessagePassingKernel(box.get(), kRounds, 2000 * kMillisecond);
  Mailbox result = box.toHost()[0];
  EXPECT_EQ(result.timeouts, 0u);
  EXPECT_EQ(result.errors, 0u);
  EXPECT_EQ(result.ack, static_cast<uint64_t>(kRounds));
}

TEST(DeviceAtomicsGpu, SpinWaitGivesUpWhenBudgetRunsOut) {
  WEFT_SKIP_WITHOUT_GPU();
  constexpr uint64_t kBudget = 5 * kMillisecond;
  DeviceArray<StuckWait> w(1);
  launchStuckWaitKernel(w.get(), kBudget);
  expectStuckWaitTimedOut(w.toHost()[0], kBudget);
}

#else

TEST(DeviceAtomicsGpu, KernelsNeedAGpuBuild) {
  GTEST_SKIP() << "WEFT_GPU=none build: the protocols ran in host threads (DeviceAtomicsHost); no kernels to launch";
}

#endif

}  // namespace
}  // namespace weft::test
