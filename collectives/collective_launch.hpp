// The one entry point from CollectiveComm to the algorithms: a kernel on the stream (GPU builds) or a team of
// host threads run to completion (WEFT_GPU=none).
#pragma once

#include <cstdint>
#include <weft/collectives.hpp>
#include <weft/gpu.hpp>

#include "collective_algorithms.hpp"

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

/// Blocks of a one-shot kernel the current GPU holds resident at once, divided among `ranksOnGpu` ranks (1..256).
uint32_t oneShotGridBlocks(uint32_t ranksOnGpu);

/// Threads per block of a one-shot allreduce kernel, the most blocks one gets by default, and the packets per thread
/// it aims for: the grid grows with the message (a 1 KB message is one block) up to kOneShotMaxBlocks, or fewer
/// where the GPU holds fewer resident beside the other ranks sharing it (a block spins on packets a peer's block
/// writes; oneShotGridBlocks).
inline constexpr uint32_t kOneShotThreads = 256;
inline constexpr uint32_t kOneShotMaxBlocks = 64;
inline constexpr uint32_t kOneShotPacketsPerThread = 2;

/// Runs the operation in `args` on elements of `type`. GPU builds: enqueues one kernel of `gpuBlocks` blocks on
/// `stream` and returns what the launch reported (hipSuccess or the launch error), without waiting. Host builds: runs
/// `hostThreads` threads (the calling one among them) to completion and rethrows the first failure of a worker (a
/// wait's Error(kTimeout)); returns hipSuccess.
hipError_t launchCollective(const CollectiveArgs& args, DataType type, uint32_t gpuBlocks, uint32_t hostThreads,
                            hipStream_t stream);

/// Runs one LL16 allreduce launch on elements of `type`, one-shot (allReduceOneShot) or two-shot
/// (allReduceTwoShot): as launchCollective, with a grid sized by the message (GPU builds) or `hostThreads` workers
/// (host builds). `maxBlocks` (0: kOneShotMaxBlocks) caps the grid; `packetsPerThread` (0: kOneShotPacketsPerThread)
/// is what it aims for below that cap.
hipError_t launchAllReducePackets(const OneShotArgs& args, DataType type, bool twoShot, uint32_t maxBlocks,
                                  uint32_t packetsPerThread, uint32_t hostThreads, hipStream_t stream);

/// Runs one one-shot allgather launch (allGatherOneShot): args.count bytes of this rank's input, peers' blocks at
/// recv + p * recvStride; grid and host workers as launchAllReduceOneShot.
hipError_t launchAllGatherOneShot(const OneShotArgs& args, uint64_t recvStride, uint32_t maxBlocks,
                                  uint32_t packetsPerThread, uint32_t hostThreads, hipStream_t stream);

}  // namespace weft::detail
