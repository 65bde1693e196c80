// MemoryChannel on the GPU: every method (put, get, write, read, signal, wait, relaxed variants, poll, LL16 and
// LL8 packets) run by a block of GPU threads per rank, between rank pairs (2 or 4 ranks) sharing one GPU whose buffers
// the cuda_ipc transport maps into each other; as forked processes and as threads of one process. Plus the packet read
// timeout: the kernel traps and the host reads the record.
//
// Tests that fork come first: the parent must not initialise the GPU runtime before forking, and GoogleTest runs
// a file's tests in order (ctest runs each test in its own process anyway).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>
#include <weft/communicator.hpp>
#include <weft/device_error.hpp>
#include <weft/error.hpp>
#include <weft/gpu.hpp>
#include <weft/memory_channel.hpp>

#include "memory_channel_kernels.hpp"
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

// Zeroed GPU memory that frees itself.
class GpuBuffer {
 public:
  explicit GpuBuffer(uint64_t bytes) : bytes_(bytes) {
    checkGpu(hipMalloc(&ptr_, bytes), "hipMalloc");
    checkGpu(hipMemset(ptr_, 0, bytes), "hipMemset");
    checkGpu(hipDeviceSynchronize(), "waiting for the fill (later work runs on non-blocking streams)");
  }
  ~GpuBuffer() { (void)hipFree(ptr_); }
  GpuBuffer(const GpuBuffer&) = delete;
  GpuBuffer& operator=(const GpuBuffer&) = delete;
  void* get() const { return ptr_; }
  uint64_t bytes() const { return bytes_; }
  std::vector<uint8_t> toHost() const {
    std::vector<uint8_t> out(bytes_);
    checkGpu(hipMemcpy(out.data(), ptr_, bytes_, hipMemcpyDeviceToHost), "hipMemcpy");
    return out;
  }

 private:
  void* ptr_ = nullptr;
  uint64_t bytes_;
};

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

constexpr uint64_t kBytes = (256 << 10) + 13;  // odd, so every copy has unaligned heads and tails
constexpr int kRounds = 50;
constexpr int kThreads = 256;

void exerciseRank(int rank, int size, const UniqueId& id) {
  checkGpu(hipSetDevice(0), "hipSetDevice");
  Communicator comm(std::make_shared<TcpBootstrap>(rank, size, id, milliseconds(10000)), ipcConfig());
  const int peer = rank ^ 1;  // pairs (0,1), (2,3), ... all on one GPU; each pair runs the two-rank exercise
  const int role = rank & 1;
  const int peerRole = peer & 1;
  GpuBuffer data(channelDataBytes(kBytes));
  GpuBuffer packets(packetBufferBytes<LL16Packet>(kBytes));
  GpuBuffer check(sizeof(ChannelCheck));
  std::vector<uint8_t> mine(kBytes);
  for (uint64_t i = 0; i < kBytes; ++i) mine[i] = channelPattern(role, 0, i);
  checkGpu(hipMemcpy(static_cast<uint8_t*>(data.get()) + kBytes * role, mine.data(), kBytes, hipMemcpyHostToDevice),
           "hipMemcpy");
  checkGpu(hipDeviceSynchronize(), "waiting for the fill (later work runs on non-blocking streams)");
  RegisteredMemory localData = comm.registerMemory(data.get(), data.bytes(), MemoryKind::kGpu);
  RegisteredMemory localPackets = comm.registerMemory(packets.get(), packets.bytes(), MemoryKind::kGpu);
  comm.sendMemory(localData, peer, 1);
  comm.sendMemory(localPackets, peer, 2);
  RegisteredMemory peerData = comm.recvMemory(peer, 1);
  RegisteredMemory peerPackets = comm.recvMemory(peer, 2);
  ASSERT_NE(peerData.data(), nullptr) << "cuda_ipc did not map the peer's buffer";
  auto sem = std::make_shared<MemoryDevice2DeviceSemaphore>(comm, comm.connect(peer, 3), 4, MemoryKind::kGpu);
  MemoryChannel putChannel(sem, peerData, localData, localPackets);
  MemoryChannel packetChannel(sem, peerPackets, localData, localPackets);
  DeviceErrorBlock errors;
  const DeviceWaitOptions options{errors.deviceRecord(), 0, 10000 * kMs};
  Stream stream;
  comm.bootstrap().barrier();
  launchChannelExercise(putChannel.deviceHandle(options), packetChannel.deviceHandle(options), role, kBytes, kRounds,
                        kThreads, static_cast<ChannelCheck*>(check.get()), stream.get());
  hipError_t e = hipStreamSynchronize(stream.get());
  ASSERT_FALSE(errors.hasError()) << errors.describe();
  checkGpu(e, "channel exercise kernel");
  ChannelCheck c{};
  checkGpu(hipMemcpy(&c, check.get(), sizeof(c), hipMemcpyDeviceToHost), "hipMemcpy");
  EXPECT_EQ(c.putWrong, 0u);
  EXPECT_EQ(c.getWrong, 0u);
  EXPECT_EQ(c.elementWrong, 0u);
  EXPECT_EQ(c.ll16Wrong, 0u);
  EXPECT_EQ(c.ll8Wrong, 0u);
  EXPECT_EQ(c.relaxedRounds, static_cast<uint64_t>(kRounds));
  EXPECT_EQ(c.pollAfterAll, 0u);
  EXPECT_EQ(c.finalReceived, static_cast<uint64_t>(kRounds) + 5);  // 5 exchanges + the relaxed rounds
  // The host's own look at what the peer's put left in this rank's buffer.
  std::vector<uint8_t> arrived = data.toHost();
  uint64_t wrong = 0;
  for (uint64_t i = 0; i < kBytes; ++i) wrong += arrived[kBytes * peerRole + i] != channelPattern(peerRole, 0, i);
  EXPECT_EQ(wrong, 0u);
  comm.bootstrap().barrier();  // the peer's kernel is done with this rank's memory before it is freed
}

TEST(MemoryChannelGpu, EveryMethodBetweenTwoProcesses) {
  if (!gpuPresentWithoutInit()) GTEST_SKIP() << "no GPU device node on this machine";
  UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
  auto results = runRanks(
      2, [&](int rank, int n) { exerciseRank(rank, n, id); }, std::chrono::seconds(90));
  WEFT_EXPECT_RANKS_OK(results);
}

TEST(MemoryChannelGpu, EveryMethodBetweenFourProcesses) {
  if (!gpuPresentWithoutInit()) GTEST_SKIP() << "no GPU device node on this machine";
  UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
  auto results = runRanks(
      4, [&](int rank, int n) { exerciseRank(rank, n, id); }, std::chrono::seconds(120));
  WEFT_EXPECT_RANKS_OK(results);
}

// A packet read whose flag never comes traps the kernel; the record names the waiter and the flags.
TEST(MemoryChannelGpu, PacketReadNobodyWritesTrapsAndIsRecorded) {
  if (!gpuPresentWithoutInit()) GTEST_SKIP() << "no GPU device node on this machine";
  auto results = runRanks(1, [&](int, int) {
    checkGpu(hipSetDevice(0), "hipSetDevice");
    DeviceErrorBlock errors;
    GpuBuffer packets(64);
    GpuBuffer words(3 * sizeof(uint64_t));
    auto* w = static_cast<uint64_t*>(words.get());
    MemoryChannelDeviceHandle ch{};
    ch.semaphore = {&w[0], &w[1], &w[2], 300 * kMs, WaitSite{errors.deviceRecord(), 1, 0, 9}};
    ch.packets = static_cast<uint8_t*>(packets.get());
    ch.packetBytes = packets.bytes();
    Stream stream;
    hipError_t e = runStuckPacketRead(ch, 42, stream.get());
    EXPECT_NE(e, hipSuccess) << "the packet read returned without its flag";
    ASSERT_TRUE(errors.hasError());
    EXPECT_EQ(errors.describe(),
              "rank 1: packet read on peer 0 channel 9 ran out of its 300 ms budget: expected 42, observed 0");
    EXPECT_THROW(errors.check(), Error);
    std::fflush(nullptr);
    std::_Exit(::testing::Test::HasFailure() ? 1 : 0);  // no teardown in a broken context
  });
  WEFT_EXPECT_RANKS_OK(results);
}

// Last: this initialises the runtime in the test process itself.
TEST(MemoryChannelGpu, EveryMethodBetweenTwoAndFourThreads) {
  if (!gpuPresentWithoutInit() || gpuDeviceCount() == 0) GTEST_SKIP() << "no GPU on this machine";
  for (int size : {2, 4}) {
    SCOPED_TRACE("ranks as threads: " + std::to_string(size));
    UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
    std::vector<std::thread> ranks;
    for (int r = 0; r < size; ++r) {
      ranks.emplace_back([&, r, size] {
        try {
          exerciseRank(r, size, id);
        } catch (const std::exception& e) {
          ADD_FAILURE() << "rank " << r << ": " << e.what();
        }
      });
    }
    for (auto& t : ranks) t.join();
  }
}

#else

TEST(MemoryChannelGpu, KernelsNeedAGpuBuild) {
  GTEST_SKIP() << "WEFT_GPU=none build: the channel protocol ran in host threads (unit_packet_test, "
                  "mp_memory_channel_test); no kernels to launch";
}

#endif

}  // namespace
}  // namespace weft::test
