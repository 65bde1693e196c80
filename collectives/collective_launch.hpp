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

/// Runs the operation in `args` on elements of `type`. GPU builds: enqueues one kernel on `stream` and returns
/// what the launch reported (hipSuccess or the launch error), without waiting. Host builds: runs `hostThreads`
/// threads (the calling one among them) to completion and rethrows the first failure of a worker (a wait's
/// Error(kTimeout)); returns hipSuccess.
hipError_t launchCollective(const CollectiveArgs& args, DataType type, uint32_t hostThreads, hipStream_t stream);

}  // namespace weft::detail
