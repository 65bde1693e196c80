// weft-bench memory channel: MemoryDevice2DeviceSemaphore ping-pong, LL8/LL16 packet ping-pong and MemoryChannel
// put bandwidth between rank pairs, each beside a raw floor on the same mapped peer pages.
#pragma once

#include <vector>
#include <weft/bootstrap.hpp>

#include "bench_options.hpp"

namespace weft::bench {

/// Runs the memory channel benchmarks between rank pairs (0,1), (2,3), ... with host threads on shared host
/// memory mapped by the host transport: every rank calls it; the rows of this rank's pair come back (the lower
/// rank's carry the timings, the higher rank's the #wrong counts), in the same shape as runPrimitives.
std::vector<BenchRow> runMemoryChannel(Bootstrap& boot, const BenchOptions& options);

}  // namespace weft::bench
