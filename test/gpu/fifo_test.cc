// The FIFO with GPU producers: thousands of concurrent GPU threads push through a small ring (wrap-around and
// back-pressure), a host thread consumes, and every trigger arrives exactly once and in each producer's order; a
// push-and-sync loop; and a push into a ring nobody drains, which traps and leaves a record naming the fifo push.
// Each test runs in a forked process: the parent never touches the GPU runtime, and a trapped kernel's context dies
// with its process.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>
#include <weft/error.hpp>
#include <weft/fifo.hpp>
#include <weft/gpu.hpp>

#include "fifo_kernels.hpp"
#include "multi_process.hpp"

namespace weft::test {
namespace {

constexpr uint64_t kMs = 1'000'000;

#define WEFT_SKIP_WITHOUT_GPU_DEVICE()                                                    \
  if (!gpuPresentWithoutInit()) {                                                         \
    GTEST_SKIP() << "no GPU on this machine (or a WEFT_GPU=none build): the host-thread " \
                    "FIFO tests (unit_fifo_test) cover the protocol";                     \
  }

TEST(FifoGpu, ThousandsOfGpuProducersDeliverEveryTriggerExactlyOnce) {
  WEFT_SKIP_WITHOUT_GPU_DEVICE();
  auto results = runRanks(1, [](int, int) {
    ASSERT_GT(gpuDeviceCount(), 0);
    constexpr int kBlocks = 64;
    constexpr int kThreadsPerBlock = 128;
    constexpr int kPerThread = 8;
    constexpr uint32_t kProducers = kBlocks * kThreadsPerBlock;  // 8192 concurrent producers
    Fifo fifo(512, HandleSide::kDevice);
    ASSERT_EQ(fifo.side(), HandleSide::kDevice);
    launchFifoProducers(fifo.deviceHandle(20'000 * kMs), kBlocks, kThreadsPerBlock, kPerThread);
    std::vector<uint32_t> next(kProducers, 0);
    uint64_t corrupt = 0, outOfOrder = 0;
    const uint64_t total = uint64_t{kProducers} * kPerThread;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    for (uint64_t got = 0; got < total;) {
      FifoTrigger t{};
      if (!fifo.poll(&t)) {
        ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "stalled after " << got << " triggers";
        continue;
      }
      const uint32_t thread = static_cast<uint32_t>(t.word0 >> 32);
      const uint32_t i = static_cast<uint32_t>(t.word0);
      if (thread >= kProducers || t.word1 != gpuTestTrigger(thread, i).word1) {
        ++corrupt;
      } else {
        if (i != next[thread]) ++outOfOrder;
        next[thread] = i + 1;
      }
      fifo.pop();
      ++got;
    }
    finishGpuKernels("fifo producers");
    EXPECT_EQ(corrupt, 0u);
    EXPECT_EQ(outOfOrder, 0u);
    uint64_t short_ = 0;
    for (uint32_t p = 0; p < kProducers; ++p) short_ += next[p] != kPerThread;
    EXPECT_EQ(short_, 0u) << "producers whose triggers did not all arrive";
    FifoTrigger none{};
    EXPECT_FALSE(fifo.poll(&none)) << "a trigger beyond the pushed ones";
    EXPECT_FALSE(fifo.errors().hasError()) << fifo.errors().describe();
  });
  WEFT_EXPECT_RANKS_OK(results);
}

TEST(FifoGpu, PushAndSyncRoundTrips) {
  WEFT_SKIP_WITHOUT_GPU_DEVICE();
  auto results = runRanks(1, [](int, int) {
    constexpr int kCount = 10000;
    Fifo fifo(128, HandleSide::kDevice);
    launchFifoPushAndSync(fifo.deviceHandle(10'000 * kMs), kCount, 128);
    for (int got = 0; got < kCount;) {
      FifoTrigger t{};
      if (!fifo.poll(&t)) continue;
      EXPECT_EQ(t.word0, gpuTestTrigger(0, static_cast<uint32_t>(got)).word0);
      fifo.pop();
      ++got;
    }
    finishGpuKernels("fifo push and sync");
    EXPECT_EQ(fifo.finished(), static_cast<uint64_t>(kCount));
  });
  WEFT_EXPECT_RANKS_OK(results);
}

TEST(FifoGpu, PushIntoAnUndrainedRingTrapsAndRecordsTheFifoPush) {
  WEFT_SKIP_WITHOUT_GPU_DEVICE();
  auto results = runRanks(1, [](int, int) {
    Fifo fifo(16, HandleSide::kDevice, nullptr, 0);
    launchFifoPushAndSync(fifo.deviceHandle(200 * kMs), 17, 1000);  // the 17th push finds the ring full
    EXPECT_THROW(finishGpuKernels("stuck fifo push"), Error);
    ASSERT_TRUE(fifo.errors().hasError());
    EXPECT_NE(fifo.errors().describe().find("rank 0: fifo push ran out of its 200 ms budget"), std::string::npos)
        << fifo.errors().describe();
    std::_Exit(0);  // the trapped context cannot be torn down cleanly
  });
  WEFT_EXPECT_RANKS_OK(results);
}

}  // namespace
}  // namespace weft::test
