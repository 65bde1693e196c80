// weft-bench primitives over host threads and the configured transports.
#pragma once

#include <vector>
#include <weft/bootstrap.hpp>

#include "bench_options.hpp"

namespace weft::bench {

/// Runs the primitive benchmarks between rank pairs (0,1), (2,3), ...: every rank calls it; the rows of this
/// rank's pair come back (the lower rank's carry the sender-side figures, the higher rank's the #wrong counts).
std::vector<BenchRow> runPrimitives(Bootstrap& boot, const BenchOptions& options);

}  // namespace weft::bench
