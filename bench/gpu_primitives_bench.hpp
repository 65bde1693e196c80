// weft-bench gpu: the primitives driven by GPU kernels on GPU memory that the transports map or copy between
// ranks (cuda_ipc on one host): semaphore, LL8/LL16 and PortChannel ping-pong, PortChannel and MemoryChannel put
// bandwidth, each beside a floor measured in the same run.
#pragma once

#include <vector>
#include <weft/bootstrap.hpp>

#include "bench_options.hpp"

namespace weft::bench {

/// Whether this build and this machine can run runGpuPrimitives (a GPU build and a visible GPU).
bool gpuPrimitivesAvailable();

/// Runs the GPU benchmarks between rank pairs (0,1), (2,3), ...: every rank calls it; rank r uses GPU
/// r % deviceCount. The rows of this rank's pair come back in the shape runPrimitives returns (the lower rank's carry
/// the timings, the higher rank's the #wrong counts of what arrived on its side).
std::vector<BenchRow> runGpuPrimitives(Bootstrap& boot, const BenchOptions& options);

}  // namespace weft::bench
