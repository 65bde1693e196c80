// Connection::write from GPU memory over libfabric tcp into a peer's host memory. Where the provider has no FI_HMEM
// the plugin stages the source through a pinned ring: a write returns once its bytes are copied out, so the source
// may change right after, while earlier pieces are still on the wire. Sizes cross the 1 MiB piece and the 8 MiB
// ring, and a stream of writes wraps the ring many times.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <vector>
#include <weft/bootstrap.hpp>
#include <weft/communicator.hpp>
#include <weft/device.hpp>
#include <weft/error.hpp>
#include <weft/gpu.hpp>
#include <weft/shared_host_memory.hpp>

#include "multi_process.hpp"
#include "transport_plugins.hpp"

namespace weft::test {
namespace {

using std::chrono::milliseconds;

#if WEFT_BUILD_GPU_CUDA || WEFT_BUILD_GPU_HIP

uint8_t pattern(uint64_t round, uint64_t i) { return static_cast<uint8_t>((i * 131 + round * 29 + 7) & 0xff); }

constexpr uint64_t kHeader = 64;  // the signal word at 0
constexpr uint64_t kSizes[] = {1, 4097, (64 << 10) + 3, (1 << 20) + 5, (3 << 20) + 7, (9 << 20) + 11};
constexpr uint64_t kMaxBytes = (9 << 20) + 11 + 8;
constexpr uint64_t kStreamWrites = 320;  // 64 KiB each: 20 MiB, the 8 MiB ring wraps twice
constexpr uint64_t kStreamBytes = 64 << 10;

void waitSignal(Connection& conn, const uint8_t* host, uint64_t expected) {
  const auto* word = reinterpret_cast<const uint64_t*>(host);
  const bool ok = spinWaitUntil(
      [&] {
        if (atomicLoad<MemoryOrder::kAcquire>(word) >= expected) return true;
        (void)conn.progress();
        return false;
      },
      WaitBudget{20'000'000'000ull});
  if (!ok) throw Error(ErrorCode::kTimeout, "signal " + std::to_string(expected) + " did not come");
}

void gpuSourceRank(int rank, int size, const UniqueId& id) {
  checkGpu(hipSetDevice(0), "hipSetDevice");
  Communicator comm(std::make_shared<TcpBootstrap>(rank, size, id, milliseconds(20000)), libfabricConfig("tcp"));
  const int peer = 1 - rank;
  std::shared_ptr<Connection> conn = comm.connect(peer, 1, MemoryKind::kGpu);
  ASSERT_EQ(conn->transport(), "libfabric");
  const uint64_t bytes = kHeader + std::max(kMaxBytes, kStreamWrites * kStreamBytes);
  if (rank == 1) {  // the target: host memory
    auto storage = allocSharedHostMemory(bytes);
    auto* host = static_cast<uint8_t*>(storage.get());
    std::memset(host, 0, bytes);
    RegisteredMemory mem = comm.registerMemory(host, bytes, MemoryKind::kHost);
    comm.sendMemory(mem, peer, 2);
    uint64_t signals = 0;
    uint64_t round = 0;
    for (uint64_t n : kSizes) {
      waitSignal(*conn, host, ++signals);
      uint64_t wrong = 0;
      for (uint64_t i = 0; i < n; ++i) wrong += host[kHeader + round % 7 + i] != pattern(round, i);
      EXPECT_EQ(wrong, 0u) << "size " << n;
      ++round;
      comm.bootstrap().barrier();  // checked: the next round may overwrite
    }
    waitSignal(*conn, host, ++signals);
    uint64_t wrong = 0;
    for (uint64_t w = 0; w < kStreamWrites; ++w) {
      for (uint64_t i = 0; i < kStreamBytes; ++i) wrong += host[kHeader + w * kStreamBytes + i] != pattern(1000 + w, i);
    }
    EXPECT_EQ(wrong, 0u) << "stream of " << kStreamWrites << " writes";
    comm.bootstrap().barrier();  // the writer's last flush returned before either side closes
    return;
  }
  uint8_t* gpu = nullptr;
  checkGpu(hipMalloc(&gpu, bytes), "hipMalloc");
  std::unique_ptr<uint8_t, void (*)(uint8_t*)> owner(gpu, [](uint8_t* p) { (void)hipFree(p); });
  RegisteredMemory src = comm.registerMemory(gpu, bytes, MemoryKind::kGpu);
  RegisteredMemory dst = comm.recvMemory(peer, 2);
  std::vector<uint8_t> fill(bytes);
  auto upload = [&](uint64_t offset, uint64_t n, uint64_t round) {
    for (uint64_t i = 0; i < n; ++i) fill[i] = pattern(round, i);
    checkGpu(hipMemcpy(gpu + offset, fill.data(), n, hipMemcpyHostToDevice), "filling the source");
  };
  auto spoil = [&](uint64_t offset, uint64_t n) {
    checkGpu(hipMemset(gpu + offset, 0xee, n), "overwriting the source");
    checkGpu(hipDeviceSynchronize(), "overwriting the source");
  };
  uint64_t round = 0;
  for (uint64_t n : kSizes) {
    const uint64_t srcOffset = round % 5, dstOffset = kHeader + round % 7;
    upload(srcOffset, n, round);
    conn->write(dst, dstOffset, src, srcOffset, n);
    spoil(srcOffset, n);  // write returned: its bytes are out of the source
    conn->atomicAdd(dst, 0, 1);
    conn->flush(milliseconds(20000));
    ++round;
    comm.bootstrap().barrier();
  }
  // Back-to-back writes from distinct places of the source, then one signal: the ring fills and frees as they go.
  for (uint64_t w = 0; w < kStreamWrites; ++w) upload(w * kStreamBytes, kStreamBytes, 1000 + w);
  for (uint64_t w = 0; w < kStreamWrites; ++w) {
    conn->write(dst, kHeader + w * kStreamBytes, src, w * kStreamBytes, kStreamBytes);
  }
  spoil(0, kStreamWrites * kStreamBytes);
  conn->atomicAdd(dst, 0, 1);
  conn->flush(milliseconds(20000));
  comm.bootstrap().barrier();
}

TEST(LibfabricGpuSource, WritesFromGpuMemoryArriveIntactAndFreeTheSourceAtOnce) {
  if (!gpuPresentWithoutInit()) GTEST_SKIP() << "no GPU on this machine: mp_libfabric_transport_test covers the host";
  if (!transportPluginBuilt("libfabric")) {
    GTEST_SKIP() << "the libfabric plugin was not built (no libfabric at build time)";
  }
  UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
  auto results = runRanks(
      2, [&](int rank, int n) { gpuSourceRank(rank, n, id); }, std::chrono::seconds(120));
  WEFT_EXPECT_RANKS_OK(results);
}

#else

TEST(LibfabricGpuSource, NeedsAGpuBuild) { GTEST_SKIP() << "built without a GPU runtime (WEFT_GPU=none)"; }

#endif

}  // namespace
}  // namespace weft::test
