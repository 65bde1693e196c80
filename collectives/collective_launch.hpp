// The one entry point from CollectiveComm to the algorithms: a kernel on the stream (GPU builds) or a team of
// host threads run to completion (WEFT_GPU=none).
#pragma once

#include <cstdint>
#include <weft/collectives.hpp>
#include <weft/gpu.hpp>

#include "collective_algorithms.hpp"

namespace weft::detail {

/// Blocks and threads per block of a collective kernel. Few blocks, so that all of them are resident at once
/// (the grid barrier needs that) even when several ranks share one GPU.
inline constexpr uint32_t kGpuBlocks = 16;
inline constexpr uint32_t kGpuThreads = 512;

/// Threads per block of a one-shot allreduce kernel, the most blocks one gets, and the packets per thread it aims
/// for: the grid grows with the message (a 1 KB message is one block) up to kOneShotMaxBlocks, few enough that
/// every block of 4 ranks sharing one GPU is resident at once (a block spins on packets a peer's block writes).
inline constexpr uint32_t kOneShotThreads = 256;
inline constexpr uint32_t kOneShotMaxBlocks = 64;
inline constexpr uint32_t kOneShotPacketsPerThread = 2;

/// Runs the operation in `args` on elements of `type`. GPU builds: enqueues one kernel on `stream` and returns
/// what the launch reported (hipSuccess or the launch error), without waiting. Host builds: runs `hostThreads`
/// threads (the calling one among them) to completion and rethrows the first failure of a worker (a wait's
/// Error(kTimeout)); returns hipSuccess.
hipError_t launchCollective(const CollectiveArgs& args, DataType type, uint32_t hostThreads, hipStream_t stream);

/// Runs one one-shot allreduce launch (allReduceOneShot) on elements of `type`: as launchCollective, with a grid
/// sized by the message (GPU builds) or `hostThreads` workers (host builds).
hipError_t launchAllReduceOneShot(const OneShotArgs& args, DataType type, uint32_t hostThreads, hipStream_t stream);

}  // namespace weft::detail
