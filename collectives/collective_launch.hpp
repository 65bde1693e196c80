// The one entry point from CollectiveComm to the algorithms: a kernel on the stream (GPU builds) or a team of
// host threads run to completion (WEFT_GPU=none).
#pragma once

#include <cstdint>
#include <weft/collectives.hpp>
#include <weft/gpu.hpp>

#include "collective_algorithms.hpp"
#include "port_allreduce.hpp"

namespace weft::detail {

/// Threads per block of a staged collective kernel, and the most blocks its grid gets. The grid barrier needs every
/// block of a grid resident at once, also when several ranks share one GPU: collectiveGridBlocks sizes the grid from
/// the GPU's SMs and occupancy, divided among those ranks.
inline constexpr uint32_t kGpuThreads = 512;
inline constexpr uint32_t kGpuMaxBlocks = 256;
static_assert(kGpuMaxBlocks <= kMaxPairBlocks, "every block of a grid needs its row of block-pair flags");

/// The most blocks a staged collective kernel may have when `ranksOnGpu` ranks (>= 1) share the current GPU: what
/// the GPU holds resident of the heaviest staged kernel (SMs x blocks per SM), divided among them, in
/// [1, kGpuMaxBlocks]; also the default grid. More would leave blocks unscheduled behind spinning ones (H200, 2 ranks
/// under MPS, 99 blocks each of a 1-block-per-SM kernel: the staged allgather's grid barrier waited until its
/// budget trapped). Host builds: kGpuMaxBlocks (host teams are capped by CollectiveOptions::hostThreads).
uint32_t collectiveGridBlocks(uint32_t ranksOnGpu);

/// Threads per block of an LL16 kernel, and the packets per thread the unrolled (U = kOneShotUnroll) kernels aim
/// for by default. A message with at most one packet per thread of the largest grid the small (U = 1) kernels may
/// have runs them; a larger one runs the unrolled kernels on a grid that grows with it.
inline constexpr uint32_t kOneShotThreads = 256;
inline constexpr uint32_t kOneShotPacketsPerThread = 2;

/// The most blocks each LL16 kernel may have: what the current GPU holds resident of it (SMs x blocks per SM, from
/// its registers), divided among the ranks sharing the GPU, and no more than a cap (a block spins on packets a
/// peer's block writes, so every block of every rank must be resident at once). Per kernel, because their
/// registers differ fourfold (sm_90: 40-80 for the small kernels, 64-210 for the unrolled ones).
struct PacketGridCaps {
  uint32_t small = 1;                   ///< the small allreduce, reduce-scatter and gather kernels, every type
  uint32_t unrolled[kDataTypeCount]{};  ///< the unrolled one-shot and two-shot allreduce kernels, per type
  uint32_t unrolledGather = 1;          ///< the unrolled gather kernel
  uint32_t packetsPerThread = kOneShotPacketsPerThread;  ///< what the unrolled grids aim for
};

/// The caps for `ranksOnGpu` ranks sharing the current GPU, none above `most` (1..kGpuMaxBlocks). Host builds: every
/// cap is `most`.
PacketGridCaps packetGridCaps(uint32_t ranksOnGpu, uint32_t most, uint32_t packetsPerThread);

/// Runs the operation in `args` on elements of `type`. GPU builds: enqueues one kernel of `gpuBlocks` blocks on
/// `stream` and returns what the launch reported (hipSuccess or the launch error), without waiting. Host builds: runs
/// `hostThreads` threads (the calling one among them) to completion and rethrows the first failure of a worker (a
/// wait's Error(kTimeout)); returns hipSuccess.
hipError_t launchCollective(const CollectiveArgs& args, DataType type, uint32_t gpuBlocks, uint32_t hostThreads,
                            hipStream_t stream);

/// Runs one LL16 allreduce launch on elements of `type`, one-shot (allReduceOneShot) or two-shot
/// (allReduceTwoShot): as launchCollective, with a grid sized by the message (GPU builds) or `hostThreads` workers
/// (host builds), within `caps`.
hipError_t launchAllReducePackets(const OneShotArgs& args, DataType type, bool twoShot, const PacketGridCaps& caps,
                                  uint32_t hostThreads, hipStream_t stream);

/// Runs one one-shot allgather launch (allGatherOneShot): args.count bytes of this rank's input, peers' blocks at
/// recv + p * recvStride; grid and host workers as launchAllReduceOneShot.
hipError_t launchAllGatherOneShot(const OneShotArgs& args, uint64_t recvStride, const PacketGridCaps& caps,
                                  uint32_t hostThreads, hipStream_t stream);

/// Runs one piece of the copy-engine allreduce (portAllReduce) on elements of `type`: a kernel of `gpuBlocks` blocks
/// (GPU builds) or `hostThreads` workers run to completion (host builds), as launchCollective.
hipError_t launchPortAllReduce(const PortAllReduceArgs& args, DataType type, uint32_t gpuBlocks, uint32_t hostThreads,
                               hipStream_t stream);

}  // namespace weft::detail
