// MemoryDevice2DeviceSemaphore on the GPU: ping-pong between two ranks sharing one GPU (forked processes, and
// threads of one process), with the counters in GPU memory mapped by the cuda_ipc transport; and the timeout
// path: a kernel waits for a signal nobody sends, traps, and the host reads the record naming the waiter.
//
// Tests that fork come first: the parent must not initialise the GPU runtime before forking (it does not survive
// fork()), and GoogleTest runs a file's tests in order. ctest runs each test in its own process anyway.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>
#include <weft/communicator.hpp>
#include <weft/device_error.hpp>
#include <weft/error.hpp>
#include <weft/gpu.hpp>
#include <weft/memory_semaphore.hpp>

#include "memory_semaphore_kernels.hpp"
#include "multi_process.hpp"

namespace weft::test {
namespace {

using std::chrono::milliseconds;

constexpr uint64_t kMs = 1'000'000;

#if WEFT_BUILD_GPU_CUDA || WEFT_BUILD_GPU_HIP

Config ipcConfig() {
  Config c = Config::defaults();
  c.transports[PeerClass::kSameProcess] = {"cuda_ipc"};
  c.transports[PeerClass::kSameHost] = {"cuda_ipc"};
  c.bootstrapTimeout = milliseconds(10000);
  return c;
}

// A non-blocking stream (so ranks that are threads of one process do not serialise on the legacy stream).
class Stream {
 public:
  Stream() { checkGpu(hipStreamCreateWithFlags(&s_, hipStreamNonBlocking), "hipStreamCreateWithFlags"); }
  ~Stream() { (void)hipStreamDestroy(s_); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  hipStream_t get() const { return s_; }

 private:
  hipStream_t s_ = nullptr;
};

void pingPongRank(int rank, int size, const UniqueId& id) {
  checkGpu(hipSetDevice(0), "hipSetDevice");
  Communicator comm(std::make_shared<TcpBootstrap>(rank, size, id, milliseconds(10000)), ipcConfig());
  const int peer = rank ^ 1;  // pairs (0,1), (2,3), ... all on one GPU
  const int role = rank & 1;
  MemoryDevice2DeviceSemaphore sem(comm, comm.connect(peer, 1), 2, MemoryKind::kGpu);
  ASSERT_EQ(sem.kind(), MemoryKind::kGpu);
  // Every rank of these tests runs on GPU 0: the semaphore signals and waits at device scope.
  EXPECT_TRUE(sem.sameGpu());
  EXPECT_EQ(sem.deviceHandle().deviceScope, 1u);
  DeviceErrorBlock errors;
  Stream stream;
  constexpr int kRounds = 1000;
  constexpr int kWaiters = 64;
  comm.bootstrap().barrier();
  launchSemaphorePingPong(sem.deviceHandle({errors.deviceRecord(), 0, 10000 * kMs}), role, kRounds, kWaiters,
                          stream.get());
  hipError_t e = hipStreamSynchronize(stream.get());
  EXPECT_FALSE(errors.hasError()) << errors.describe();
  checkGpu(e, "semaphore ping-pong kernel");
  comm.bootstrap().barrier();
}

TEST(MemorySemaphoreGpu, PingPongBetweenTwoProcesses) {
  if (!gpuPresentWithoutInit()) GTEST_SKIP() << "no GPU device node on this machine";
  UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
  auto results = runRanks(
      2, [&](int rank, int n) { pingPongRank(rank, n, id); }, std::chrono::seconds(60));
  WEFT_EXPECT_RANKS_OK(results);
}

TEST(MemorySemaphoreGpu, PingPongBetweenFourProcesses) {
  if (!gpuPresentWithoutInit()) GTEST_SKIP() << "no GPU device node on this machine";
  UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
  auto results = runRanks(
      4, [&](int rank, int n) { pingPongRank(rank, n, id); }, std::chrono::seconds(60));
  WEFT_EXPECT_RANKS_OK(results);
}

// The waiting kernel traps; the host sees the failed synchronize and the record names rank, peer and channel.
// In a forked child, since a trap leaves the GPU context unusable.
TEST(MemorySemaphoreGpu, WaitNobodySignalsTrapsAndIsRecorded) {
  if (!gpuPresentWithoutInit()) GTEST_SKIP() << "no GPU device node on this machine";
  auto results = runRanks(1, [&](int, int) {
    checkGpu(hipSetDevice(0), "hipSetDevice");
    DeviceErrorBlock errors;
    uint64_t* words = nullptr;
    checkGpu(hipMalloc(&words, 3 * sizeof(uint64_t)), "hipMalloc");
    checkGpu(hipMemset(words, 0, 3 * sizeof(uint64_t)), "hipMemset");
    checkGpu(hipDeviceSynchronize(), "waiting for the fill (later work runs on non-blocking streams)");
    MemoryDevice2DeviceSemaphoreDeviceHandle sem{&words[0], &words[1], &words[2], 300 * kMs,
                                                 WaitSite{errors.deviceRecord(), 0, 1, 5}};
    Stream stream;
    const auto start = std::chrono::steady_clock::now();
    hipError_t e = runStuckSemaphoreWait(sem, stream.get());
    EXPECT_NE(e, hipSuccess) << "the wait returned without a signal";
    EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(300));
    ASSERT_TRUE(errors.hasError());
    EXPECT_EQ(errors.describe(),
              "rank 0: semaphore wait on peer 1 channel 5 ran out of its 300 ms budget: expected 1, observed 0");
    try {
      errors.check();
      ADD_FAILURE() << "check() did not throw";
    } catch (const Error& err) {
      EXPECT_EQ(err.code(), ErrorCode::kTimeout);
    }
    std::fflush(nullptr);
    std::_Exit(::testing::Test::HasFailure() ? 1 : 0);  // no teardown in a broken context
  });
  WEFT_EXPECT_RANKS_OK(results);
}

// Last: this initialises the runtime in the test process itself.
TEST(MemorySemaphoreGpu, PingPongBetweenTwoAndFourThreads) {
  if (!gpuPresentWithoutInit() || gpuDeviceCount() == 0) GTEST_SKIP() << "no GPU on this machine";
  for (int size : {2, 4}) {
    SCOPED_TRACE("ranks as threads: " + std::to_string(size));
    UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
    std::vector<std::thread> ranks;
    for (int r = 0; r < size; ++r) {
      ranks.emplace_back([&, r, size] {
        try {
          pingPongRank(r, size, id);
        } catch (const std::exception& e) {
          ADD_FAILURE() << "rank " << r << ": " << e.what();
        }
      });
    }
    for (auto& t : ranks) t.join();
  }
}

#else

TEST(MemorySemaphoreGpu, KernelsNeedAGpuBuild) {
  GTEST_SKIP() << "WEFT_GPU=none build: the semaphore protocol ran in host threads (unit_packet_test, "
                  "mp_memory_channel_test); no kernels to launch";
}

#endif

}  // namespace
}  // namespace weft::test
