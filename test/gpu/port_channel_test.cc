// PortChannel driven by GPU kernels: the FIFO, the proxy and Host2DeviceSemaphore on the GPU path.
// - Over cuda_ipc on GPU memory (the copy engine moves the data, a signal kernel adds to the peer's counter in GPU
//   memory): every device-handle method, between rank pairs of 2 and 4 forked ranks and of 2 and 4 threads; 1 KB
//   requests done by the kernel's thread itself (the direct path), and the same through the proxy with it off.
// - Over the host transport on host buffers (semaphore counters the GPU reads through mapped host memory).
// - The timeout path: a kernel waiting for a signal that never comes traps with a record naming the channel wait.
// Tests that fork come first: the parent must not initialise the GPU runtime before forking.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <thread>
#include <vector>
#include <weft/communicator.hpp>
#include <weft/error.hpp>
#include <weft/gpu.hpp>
#include <weft/proxy_service.hpp>
#include <weft/shared_host_memory.hpp>

#include "fifo_kernels.hpp"
#include "multi_process.hpp"
#include "transport_plugins.hpp"

namespace weft::test {
namespace {

using std::chrono::milliseconds;
constexpr uint64_t kMs = 1'000'000;

Config hostOnlyConfig() {
  Config c = Config::defaults();
  c.transports[PeerClass::kSameProcess] = {"host"};
  c.transports[PeerClass::kSameHost] = {"host"};
  c.bootstrapTimeout = milliseconds(10000);
  return c;
}

uint8_t pattern(uint64_t i) { return static_cast<uint8_t>(i * 13 + 5); }

#if WEFT_BUILD_GPU_CUDA || WEFT_BUILD_GPU_HIP

Config ipcConfig() {
  Config c = Config::defaults();
  c.transports[PeerClass::kSameProcess] = {"cuda_ipc"};
  c.transports[PeerClass::kSameHost] = {"cuda_ipc"};
  c.bootstrapTimeout = milliseconds(20000);
  return c;
}

constexpr uint64_t kPortBytes = (64 << 10) + 5;  // odd: the copy engine sees unaligned sizes
constexpr int kPortRounds = 20;

// What one exercise moves and which path it takes: puts above directMaxBytes go through the proxy, and so does what
// follows them until a flush (the atomicAdd and signal after the round's flush then go direct); `allDirect` expects
// no request at all in the proxy's hands.
struct PortExercise {
  uint64_t bytes = kPortBytes;
  uint64_t directMaxBytes = kDefaultPortDirectMaxBytes;
  bool allDirect = false;
};

// One rank of the exercise: pairs (0,1), (2,3), ...; the kernel drives every channel method. Over cuda_ipc the
// buffer is GPU memory; over libfabric it is pinned host memory the kernel reaches through its mapping (a provider
// without FI_HMEM cannot write into GPU memory).
void portExerciseRank(int rank, int size, const UniqueId& id, const Config& config = ipcConfig(),
                      PortExercise exercise = {}) {
  const uint64_t bytes = exercise.bytes;
  checkGpu(hipSetDevice(0), "hipSetDevice");
  Communicator comm(std::make_shared<TcpBootstrap>(rank, size, id, milliseconds(20000)), config);
  const std::string transport = config.transports.at(PeerClass::kSameHost).front();
  const bool hostData = transport != "cuda_ipc";
  const int peer = rank ^ 1;
  const int role = rank & 1;
  ProxyServiceOptions o;
  o.side = HandleSide::kDevice;
  o.budgetNs = 20'000 * kMs;
  o.directMaxBytes = exercise.directMaxBytes;
  ProxyService proxy(comm, o);
  const uint64_t dataBytes = portDataBytes(bytes);
  void* data = nullptr;
  void* check = nullptr;
  if (hostData) {
    checkGpu(hipHostMalloc(&data, dataBytes, hipHostMallocMapped | hipHostMallocPortable), "hipHostMalloc");
  } else {
    checkGpu(hipMalloc(&data, dataBytes), "hipMalloc");
    checkGpu(hipMemset(data, 0, dataBytes), "hipMemset");
    checkGpu(hipDeviceSynchronize(), "waiting for the fill (later work runs on non-blocking streams)");
  }
  if (hostData) std::memset(data, 0, dataBytes);
  checkGpu(hipMalloc(&check, sizeof(PortCheck)), "hipMalloc");
  checkGpu(hipMemset(check, 0, sizeof(PortCheck)), "hipMemset");
  checkGpu(hipDeviceSynchronize(), "waiting for the fill (later work runs on non-blocking streams)");
  {
    RegisteredMemory local = comm.registerMemory(data, dataBytes, hostData ? MemoryKind::kHost : MemoryKind::kGpu);
    comm.sendMemory(local, peer, 1);
    MemoryId remote = proxy.addMemory(comm.recvMemory(peer, 1));
    MemoryId src = proxy.addMemory(local);
    std::shared_ptr<Connection> connection = comm.connect(peer, 2, MemoryKind::kGpu);
    EXPECT_EQ(connection->transport(), transport);
    SemaphoreId sem = proxy.buildSemaphore(connection, 3);
    PortChannel channel = proxy.portChannel(sem, remote, src);
    proxy.start();
    hipStream_t stream = nullptr;
    checkGpu(hipStreamCreateWithFlags(&stream, hipStreamNonBlocking), "hipStreamCreateWithFlags");
    comm.bootstrap().barrier();
    launchPortExercise(channel.deviceHandle(), static_cast<uint8_t*>(data), bytes, role, kPortRounds, 256,
                       static_cast<PortCheck*>(check), stream);
    const hipError_t e = hipStreamSynchronize(stream);
    EXPECT_FALSE(proxy.errors().hasError()) << proxy.errors().describe();
    proxy.checkError();
    checkGpu(e, "port exercise kernel");
    (void)hipStreamDestroy(stream);
    PortCheck c{};
    checkGpu(hipMemcpy(&c, check, sizeof(c), hipMemcpyDeviceToHost), "hipMemcpy");
    EXPECT_EQ(c.putWrong, 0u);
    EXPECT_EQ(c.putWithSignalWrong, 0u);
    EXPECT_EQ(c.putSignalFlushWrong, 0u);
    EXPECT_EQ(c.counterWrong, 0u);
    EXPECT_EQ(c.pollAfterAll, 0u);
    EXPECT_EQ(c.rounds, static_cast<uint64_t>(kPortRounds));
    if (exercise.allDirect) {
      EXPECT_EQ(proxy.finishedRequests(), 0u) << "every request should have been done by the kernel's thread";
    } else {
      EXPECT_GT(proxy.finishedRequests(), 0u) << "the puts should have gone through the proxy";
    }
    // The host's own look at the last round's landing slices and the counter.
    std::vector<uint8_t> arrived(dataBytes);
    checkGpu(hipMemcpy(arrived.data(), data, dataBytes, hipMemcpyDefault), "hipMemcpy");
    uint64_t wrong = 0;
    for (uint64_t slice = 1; slice <= 3; ++slice) {
      for (uint64_t i = 0; i < bytes; ++i) {
        wrong += arrived[slice * bytes + i] != portPattern(1 - role, kPortRounds - 1, i);
      }
    }
    EXPECT_EQ(wrong, 0u);
    uint64_t counter = 0;
    std::memcpy(&counter, arrived.data() + portCounterOffset(bytes), sizeof(counter));
    EXPECT_EQ(counter, static_cast<uint64_t>(kPortRounds) * (kPortRounds + 1) / 2);
    comm.bootstrap().barrier();  // the peer is done with this rank's memory
    proxy.stop();
  }
  if (hostData) {
    (void)hipHostFree(data);
  } else {
    (void)hipFree(data);
  }
  (void)hipFree(check);
}

TEST(PortChannelGpu, EveryMethodOverCudaIpcBetweenTwoProcesses) {
  if (!gpuPresentWithoutInit()) GTEST_SKIP() << "no GPU on this machine: mp_port_channel_test covers host threads";
  UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
  auto results = runRanks(
      2, [&](int rank, int n) { portExerciseRank(rank, n, id); }, std::chrono::seconds(120));
  WEFT_EXPECT_RANKS_OK(results);
}

TEST(PortChannelGpu, EveryMethodOverCudaIpcBetweenFourProcesses) {
  if (!gpuPresentWithoutInit()) GTEST_SKIP() << "no GPU on this machine: mp_port_channel_test covers host threads";
  UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
  auto results = runRanks(
      4, [&](int rank, int n) { portExerciseRank(rank, n, id); }, std::chrono::seconds(120));
  WEFT_EXPECT_RANKS_OK(results);
}

// 1 KB requests where cuda_ipc maps the peer's memory: the kernel's thread does every one itself (stores into the
// peer's buffer, atomic adds into its counter and destination) and the proxy sees none.
TEST(PortChannelGpu, SmallRequestsTakeTheDirectPathOverCudaIpcBetweenTwoProcesses) {
  if (!gpuPresentWithoutInit()) GTEST_SKIP() << "no GPU on this machine: mp_port_channel_test covers host threads";
  UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
  auto results = runRanks(
      2,
      [&](int rank, int n) {
        portExerciseRank(rank, n, id, ipcConfig(), {1024, 4096, true});
      },
      std::chrono::seconds(120));
  WEFT_EXPECT_RANKS_OK(results);
}

// The same 1 KB exercise with the direct path off: everything through the proxy.
TEST(PortChannelGpu, SmallRequestsThroughTheProxyWhenTheDirectPathIsOff) {
  if (!gpuPresentWithoutInit()) GTEST_SKIP() << "no GPU on this machine: mp_port_channel_test covers host threads";
  UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
  auto results = runRanks(
      2,
      [&](int rank, int n) {
        portExerciseRank(rank, n, id, ipcConfig(), {1024, 0, false});
      },
      std::chrono::seconds(120));
  WEFT_EXPECT_RANKS_OK(results);
}

// The kernel's channel over libfabric tcp: the proxy stages nothing here (host buffers), but the semaphore behind
// the GPU-memory connection must count in host memory when the provider cannot write GPU memory (failed before:
// its GPU counter was registered as a staged source the peer could not import).
TEST(PortChannelGpu, EveryMethodOverLibfabricTcpBetweenTwoProcesses) {
  if (!gpuPresentWithoutInit()) GTEST_SKIP() << "no GPU on this machine: mp_libfabric_transport_test covers the host";
  if (!transportPluginBuilt("libfabric"))
    GTEST_SKIP() << "the libfabric plugin was not built (no libfabric at build time)";
  UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
  auto results = runRanks(
      2, [&](int rank, int n) { portExerciseRank(rank, n, id, libfabricConfig("tcp")); }, std::chrono::seconds(120));
  WEFT_EXPECT_RANKS_OK(results);
}

#endif

TEST(PortChannelGpu, KernelsPutSignalFlushAndWaitBetweenTwoRanks) {
  if (!gpuPresentWithoutInit()) GTEST_SKIP() << "no GPU on this machine: mp_port_channel_test covers host threads";
  UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
  constexpr uint64_t kBytes = 64 << 10;
  constexpr int kRounds = 16;
  auto results = runRanks(2, [&](int rank, int) {
    Communicator comm(std::make_shared<TcpBootstrap>(rank, 2, id, milliseconds(20000)), hostOnlyConfig());
    ProxyServiceOptions o;
    o.side = HandleSide::kDevice;
    o.budgetNs = 20'000 * kMs;
    ProxyService proxy(comm, o);
    const int peer = 1 - rank;
    auto srcStorage = allocSharedHostMemory(kBytes * kRounds);
    auto dstStorage = allocSharedHostMemory(kBytes * kRounds);
    auto* src = static_cast<uint8_t*>(srcStorage.get());
    for (uint64_t i = 0; i < kBytes * kRounds; ++i) src[i] = pattern(i);
    RegisteredMemory srcMem = comm.registerMemory(src, kBytes * kRounds, MemoryKind::kHost);
    RegisteredMemory dstMem = comm.registerMemory(dstStorage.get(), kBytes * kRounds, MemoryKind::kHost);
    comm.sendMemory(dstMem, peer, 1);
    MemoryId remoteDst = proxy.addMemory(comm.recvMemory(peer, 1));
    MemoryId localSrc = proxy.addMemory(srcMem);
    SemaphoreId sem = proxy.buildSemaphore(comm.connect(peer, 2), 3);
    PortChannel channel = proxy.portChannel(sem, remoteDst, localSrc);
    proxy.start();
    if (rank == 0) {
      launchPortSender(channel.deviceHandle(), kBytes, kRounds);
    } else {
      launchPortReceiver(channel.deviceHandle(), kRounds);
    }
    finishGpuKernels(rank == 0 ? "port sender" : "port receiver");
    EXPECT_FALSE(proxy.errors().hasError()) << proxy.errors().describe();
    proxy.checkError();
    if (rank == 1) {
      const auto* dst = static_cast<const uint8_t*>(dstStorage.get());
      uint64_t wrong = 0;
      for (uint64_t i = 0; i < kBytes * kRounds; ++i) wrong += dst[i] != pattern(i);
      EXPECT_EQ(wrong, 0u);
    }
    comm.bootstrap().barrier();
  });
  WEFT_EXPECT_RANKS_OK(results);
}

TEST(PortChannelGpu, KernelWaitWithoutASignalTrapsNamingTheChannelWait) {
  if (!gpuPresentWithoutInit()) GTEST_SKIP() << "no GPU on this machine: mp_port_channel_test covers the host path";
  UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
  auto results = runRanks(2, [&](int rank, int) {
    Communicator comm(std::make_shared<TcpBootstrap>(rank, 2, id, milliseconds(20000)), hostOnlyConfig());
    ProxyService proxy(comm, ProxyServiceOptions{.side = HandleSide::kDevice});
    const int peer = 1 - rank;
    auto storage = allocSharedHostMemory(4096);
    RegisteredMemory mem = comm.registerMemory(storage.get(), 4096, MemoryKind::kHost);
    comm.sendMemory(mem, peer, 1);
    MemoryId remote = proxy.addMemory(comm.recvMemory(peer, 1));
    MemoryId local = proxy.addMemory(mem);
    SemaphoreId sem = proxy.buildSemaphore(comm.connect(peer, 2), 3);
    PortChannel channel = proxy.portChannel(sem, remote, local);
    proxy.start();
    if (rank == 1) {
      launchPortWait(channel.deviceHandle(), 300 * kMs);
      EXPECT_THROW(finishGpuKernels("port wait"), Error);
      ASSERT_TRUE(proxy.errors().hasError());
      EXPECT_NE(proxy.errors().describe().find("rank 1: channel wait on peer 0 channel 0 ran out of its 300 ms"),
                std::string::npos)
          << proxy.errors().describe();
    }
    comm.bootstrap().barrier();
    if (rank == 1) std::_Exit(::testing::Test::HasFailure() ? 1 : 0);  // the trapped context cannot be torn down
  });
  WEFT_EXPECT_RANKS_OK(results);
}

#if WEFT_BUILD_GPU_CUDA || WEFT_BUILD_GPU_HIP
// Last: this initialises the runtime in the test process itself.
TEST(PortChannelGpu, EveryMethodOverCudaIpcBetweenTwoAndFourThreads) {
  if (!gpuPresentWithoutInit() || gpuDeviceCount() == 0) GTEST_SKIP() << "no GPU on this machine";
  for (int size : {2, 4}) {
    SCOPED_TRACE("ranks as threads: " + std::to_string(size));
    UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
    std::vector<std::thread> ranks;
    for (int r = 0; r < size; ++r) {
      ranks.emplace_back([&, r, size] {
        try {
          portExerciseRank(r, size, id);
        } catch (const std::exception& e) {
          ADD_FAILURE() << "rank " << r << ": " << e.what();
        }
      });
    }
    for (auto& t : ranks) t.join();
  }
}
#endif

}  // namespace
}  // namespace weft::test
