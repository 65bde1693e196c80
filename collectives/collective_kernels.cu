// The collective kernels (GPU builds) and the host thread team (WEFT_GPU=none) around the algorithms of
// collective_algorithms.hpp, dispatched on the element type.
#include <algorithm>
#include <weft/reduce_device.hpp>

#include "collective_launch.hpp"

#if !defined(WEFT_COMPILER_CUDA) && !defined(WEFT_COMPILER_HIP)
#include <atomic>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>
#endif

namespace weft::detail {
namespace {

/// Calls f(T{}) with T the element type of `type` (the small floats as their bit-holding structs).
template <class F>
void withElementType(DataType type, F&& f) {
  switch (type) {
    case DataType::kInt8: f(int8_t{}); break;
    case DataType::kUint8: f(uint8_t{}); break;
    case DataType::kInt32: f(int32_t{}); break;
    case DataType::kUint32: f(uint32_t{}); break;
    case DataType::kInt64: f(int64_t{}); break;
    case DataType::kUint64: f(uint64_t{}); break;
    case DataType::kFloat16: f(Float16{}); break;
    case DataType::kFloat32: f(float{}); break;
    case DataType::kFloat64: f(double{}); break;
    case DataType::kBfloat16: f(Bfloat16{}); break;
    case DataType::kFloat8E4M3: f(Float8E4M3{}); break;
    case DataType::kFloat8E5M2: f(Float8E5M2{}); break;
  }
}

bool isReducing(int32_t kind) {
  const auto k = static_cast<CollectiveKind>(kind);
  return k == CollectiveKind::kAllReduce || k == CollectiveKind::kReduceScatter || k == CollectiveKind::kReduce;
}

#if defined(WEFT_COMPILER_CUDA) || defined(WEFT_COMPILER_HIP)

struct GpuBlockSync {
  WEFT_HOST_DEVICE_INLINE void operator()() const {
#if defined(WEFT_DEVICE_COMPILE)
    __syncthreads();
#endif
  }
  /// A block barrier that also says whether `pred` held on every thread of the block.
  WEFT_HOST_DEVICE_INLINE bool all(bool pred) const {
#if defined(WEFT_DEVICE_COMPILE)
    return __syncthreads_and(pred) != 0;
#else
    return pred;
#endif
  }
};

WEFT_DEVICE_INLINE Team<GpuBlockSync> gpuTeam() {
  return Team<GpuBlockSync>{blockIdx.x, gridDim.x, threadIdx.x, blockDim.x, GpuBlockSync{}};
}

template <class T>
WEFT_GLOBAL void __launch_bounds__(kGpuThreads) reducingKernel(CollectiveArgs args) {
  runReducing<T>(gpuTeam(), args);
}

// The LL16 kernels come in two unrollings: U = kOneShotUnroll where a worker handles several packets per round,
// U = 1 where every worker has at most one (small messages): that kernel's code is a fraction of the size, and a
// small message's time is mostly the cold instruction fetch of whatever the kernel runs.
template <class T, uint32_t U>
WEFT_GLOBAL void __launch_bounds__(kOneShotThreads) oneShotKernel(OneShotArgs args) {
  allReduceOneShot<T, U>(gpuTeam(), args);
}

template <class T, uint32_t U>
WEFT_GLOBAL void __launch_bounds__(kOneShotThreads) twoShotKernel(OneShotArgs args) {
  allReduceTwoShot<T, U>(gpuTeam(), args);
}

template <uint32_t U>
WEFT_GLOBAL void __launch_bounds__(kOneShotThreads) oneShotGatherKernel(OneShotArgs args, uint64_t recvStride) {
  allGatherOneShot<U>(gpuTeam(), args, recvStride);
}

WEFT_GLOBAL void __launch_bounds__(kGpuThreads) movingKernel(CollectiveArgs args, uint64_t elementBytes) {
  runMoving(gpuTeam(), args, elementBytes);
}

template <class T>
WEFT_GLOBAL void __launch_bounds__(kGpuThreads) portAllReduceKernel(PortAllReduceArgs args) {
  portAllReduce<T>(gpuTeam(), args);
}

#else

/// Host workers are blocks of one thread: the block barrier is nothing.
struct HostBlockSync {
  void operator()() const {}
  bool all(bool pred) const { return pred; }  // a host block is one thread
};

/// Runs body(team) in `workers` threads (the calling one among them), each a block of one thread, and rethrows
/// the first failure; a failing worker sets `abort` so that workers waiting in a grid barrier stop.
template <class Body>
void runHostTeam(uint32_t workers, uint32_t* abort, Body&& body) {
  std::mutex mutex;
  std::exception_ptr failure;
  auto work = [&](uint32_t id) {
    try {
      body(Team<HostBlockSync>{id, workers, 0, 1, HostBlockSync{}});
    } catch (const TeamAborted&) {
      // Another worker failed first and set the abort flag; it reports.
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex);
      if (!failure) failure = std::current_exception();
      if (abort != nullptr) atomicStore<MemoryOrder::kRelease>(abort, 1u);
    }
  };
  std::vector<std::thread> threads;
  threads.reserve(workers - 1);
  for (uint32_t id = 1; id < workers; ++id) threads.emplace_back(work, id);
  work(0);
  for (auto& t : threads) t.join();
  if (failure) std::rethrow_exception(failure);
}

#endif

}  // namespace

#if defined(WEFT_COMPILER_CUDA) || defined(WEFT_COMPILER_HIP)
namespace {

// Blocks of `kernel` (`threads` threads each) one SM holds at once; at least 1.
template <class Kernel>
int blocksPerSm(Kernel kernel, uint32_t threads = kGpuThreads) {
  int perSm = 0;
#if defined(WEFT_COMPILER_CUDA)
  const cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&perSm, kernel, static_cast<int>(threads), 0);
#else
  const hipError_t e = hipOccupancyMaxActiveBlocksPerMultiprocessor(&perSm, kernel, static_cast<int>(threads), 0);
#endif
  return e != hipSuccess || perSm < 1 ? 1 : perSm;
}

// Blocks per SM of the heaviest staged kernel (by registers: on sm_90 the moving kernel and most reductions use
// 114-128 registers per thread, one block of 512 threads per SM, while the fp8 ones use 64).
int stagedBlocksPerSm() {
  int perSm = blocksPerSm(movingKernel);
  for (int t = 0; t < kDataTypeCount; ++t) {
    withElementType(static_cast<DataType>(t),
                    [&](auto element) { perSm = std::min(perSm, blocksPerSm(reducingKernel<decltype(element)>)); });
  }
  return perSm;
}

// The current GPU's SM count, 0 when the device cannot be queried. Asked once per sizing: hipGetDeviceProperties
// fills the whole structure each time.
int currentSmCount() {
  int device = 0;
  hipDeviceProp_t prop{};
  if (hipGetDevice(&device) != hipSuccess || hipGetDeviceProperties(&prop, device) != hipSuccess) return 0;
  return prop.multiProcessorCount;
}

// smCount x perSm, divided among ranksOnGpu ranks, in [1, kGpuMaxBlocks] (1 when smCount is 0).
uint32_t shareOfGpu(int smCount, int perSm, uint32_t ranksOnGpu) {
  uint64_t blocks = static_cast<uint64_t>(smCount < 0 ? 0 : smCount) * static_cast<uint64_t>(perSm) /
                    (ranksOnGpu == 0 ? 1 : ranksOnGpu);
  if (blocks < 1) blocks = 1;
  if (blocks > kGpuMaxBlocks) blocks = kGpuMaxBlocks;
  return static_cast<uint32_t>(blocks);
}

}  // namespace
#endif

uint32_t collectiveGridBlocks(uint32_t ranksOnGpu) {
#if defined(WEFT_COMPILER_CUDA) || defined(WEFT_COMPILER_HIP)
  return shareOfGpu(currentSmCount(), stagedBlocksPerSm(), ranksOnGpu);
#else
  (void)ranksOnGpu;
  return kGpuMaxBlocks;
#endif
}

PacketGridCaps packetGridCaps(uint32_t ranksOnGpu, uint32_t most, uint32_t packetsPerThread) {
  PacketGridCaps caps;
  caps.packetsPerThread = packetsPerThread == 0 ? kOneShotPacketsPerThread : packetsPerThread;
#if defined(WEFT_COMPILER_CUDA) || defined(WEFT_COMPILER_HIP)
  // Each kernel's occupancy at the LL16 block size (blocksPerSm defaults to the staged kernels' larger blocks).
  const int smCount = currentSmCount();
  auto cap = [&](auto kernel) {
    return std::min(most, shareOfGpu(smCount, blocksPerSm(kernel, kOneShotThreads), ranksOnGpu));
  };
  caps.small = cap(oneShotGatherKernel<1>);
  caps.unrolledGather = cap(oneShotGatherKernel<kOneShotUnroll>);
  for (int t = 0; t < kDataTypeCount; ++t) {
    withElementType(static_cast<DataType>(t), [&](auto element) {
      using T = decltype(element);
      caps.small = std::min({caps.small, cap(oneShotKernel<T, 1>), cap(twoShotKernel<T, 1>)});
      caps.unrolled[t] = std::min(cap(oneShotKernel<T, kOneShotUnroll>), cap(twoShotKernel<T, kOneShotUnroll>));
    });
  }
#else
  (void)ranksOnGpu;
  caps.small = caps.unrolledGather = most;
  for (uint32_t& c : caps.unrolled) c = most;
#endif
  return caps;
}

hipError_t launchCollective(const CollectiveArgs& args, DataType type, uint32_t gpuBlocks, uint32_t hostThreads,
                            hipStream_t stream) {
#if defined(WEFT_COMPILER_CUDA) || defined(WEFT_COMPILER_HIP)
  (void)hostThreads;
  const uint32_t blocks = gpuBlocks == 0 ? 1 : gpuBlocks;
  if (isReducing(args.kind)) {
    withElementType(type, [&](auto element) {
      using T = decltype(element);
      reducingKernel<T><<<blocks, kGpuThreads, 0, stream>>>(args);
    });
  } else {
    movingKernel<<<blocks, kGpuThreads, 0, stream>>>(args, dataTypeBytes(type));
  }
  return hipGetLastError();
#else
  (void)stream;
  (void)gpuBlocks;
  const uint32_t workers = hostThreads == 0 ? 1 : hostThreads;
  runHostTeam(workers, &args.ctx.barrier->abort, [&](const Team<HostBlockSync>& team) {
    if (isReducing(args.kind)) {
      withElementType(type, [&](auto element) { runReducing<decltype(element)>(team, args); });
    } else {
      runMoving(team, args, dataTypeBytes(type));
    }
  });
  return hipSuccess;
#endif
}

#if defined(WEFT_COMPILER_CUDA) || defined(WEFT_COMPILER_HIP)
namespace {
uint64_t ceilDiv(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

// The grid for `packets` packets: one packet per thread where `smallCap` blocks hold them all (the small kernels,
// `*small` set), else about caps.packetsPerThread per thread, up to `unrolledCap` blocks. At least one block.
uint32_t packetGrid(uint64_t packets, uint32_t smallCap, uint32_t unrolledCap, uint32_t packetsPerThread, bool* small) {
  const uint64_t oneEach = ceilDiv(packets, kOneShotThreads);
  *small = oneEach <= smallCap;
  const uint64_t blocks = *small ? oneEach : std::min<uint64_t>(unrolledCap, ceilDiv(oneEach, packetsPerThread));
  return static_cast<uint32_t>(blocks == 0 ? 1 : blocks);
}
}  // namespace
#endif

hipError_t launchAllReducePackets(const OneShotArgs& args, DataType type, bool twoShot, const PacketGridCaps& caps,
                                  uint32_t hostThreads, hipStream_t stream) {
#if defined(WEFT_COMPILER_CUDA) || defined(WEFT_COMPILER_HIP)
  (void)hostThreads;
  const uint64_t bytes = args.count * dataTypeBytes(type);
  // The one-shot grid covers the message, the two-shot grid one share (each worker handles packet j of every share).
  const uint64_t packets =
      packetCount<LL16Packet>(twoShot ? twoShotShareBytes(bytes, static_cast<uint64_t>(args.ctx.size)) : bytes);
  bool small = false;
  const uint32_t blocks =
      packetGrid(packets, caps.small, caps.unrolled[static_cast<int>(type)], caps.packetsPerThread, &small);
  withElementType(type, [&](auto element) {
    using T = decltype(element);
    void (*kernel)(OneShotArgs) = twoShot ? (small ? twoShotKernel<T, 1> : twoShotKernel<T, kOneShotUnroll>)
                                          : (small ? oneShotKernel<T, 1> : oneShotKernel<T, kOneShotUnroll>);
    kernel<<<blocks, kOneShotThreads, 0, stream>>>(args);
  });
  return hipGetLastError();
#else
  (void)stream;
  (void)caps;
  // The LL16 paths never wait in a grid barrier, so no abort flag: a worker whose packet wait runs out throws, and
  // the others run out of their own budgets at about the same time.
  runHostTeam(hostThreads == 0 ? 1 : hostThreads, nullptr, [&](const Team<HostBlockSync>& team) {
    withElementType(type, [&](auto element) {
      if (twoShot) {
        allReduceTwoShot<decltype(element)>(team, args);
      } else {
        allReduceOneShot<decltype(element)>(team, args);
      }
    });
  });
  return hipSuccess;
#endif
}

hipError_t launchPortAllReduce(const PortAllReduceArgs& args, DataType type, uint32_t gpuBlocks, uint32_t hostThreads,
                               hipStream_t stream) {
#if defined(WEFT_COMPILER_CUDA) || defined(WEFT_COMPILER_HIP)
  (void)hostThreads;
  withElementType(type, [&](auto element) {
    portAllReduceKernel<decltype(element)><<<gpuBlocks == 0 ? 1 : gpuBlocks, kGpuThreads, 0, stream>>>(args);
  });
  return hipGetLastError();
#else
  (void)stream;
  (void)gpuBlocks;
  runHostTeam(hostThreads == 0 ? 1 : hostThreads, &args.ctx.barrier->abort, [&](const Team<HostBlockSync>& team) {
    withElementType(type, [&](auto element) { portAllReduce<decltype(element)>(team, args); });
  });
  return hipSuccess;
#endif
}

hipError_t launchAllGatherOneShot(const OneShotArgs& args, uint64_t recvStride, const PacketGridCaps& caps,
                                  uint32_t hostThreads, hipStream_t stream) {
#if defined(WEFT_COMPILER_CUDA) || defined(WEFT_COMPILER_HIP)
  (void)hostThreads;
  const uint64_t packets = packetCount<LL16Packet>(args.count);
  bool small = false;
  const uint32_t blocks = packetGrid(packets, caps.small, caps.unrolledGather, caps.packetsPerThread, &small);
  void (*kernel)(OneShotArgs, uint64_t) = small ? oneShotGatherKernel<1> : oneShotGatherKernel<kOneShotUnroll>;
  kernel<<<blocks, kOneShotThreads, 0, stream>>>(args, recvStride);
  return hipGetLastError();
#else
  (void)stream;
  (void)caps;
  runHostTeam(hostThreads == 0 ? 1 : hostThreads, nullptr,
              [&](const Team<HostBlockSync>& team) { allGatherOneShot(team, args, recvStride); });
  return hipSuccess;
#endif
}

}  // namespace weft::detail
