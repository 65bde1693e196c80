// weft-bench FIFO figures: the push -> proxy pop -> completion round trip beside a raw mapped-memory round trip, and
// the trigger rate of one producer.
#pragma once

#include <vector>

#include "bench_options.hpp"

namespace weft::bench {

/// Runs the FIFO benchmarks in this process (no peer needed) and returns their rows:
///   "fifo round trip"  (us): push one trigger, a proxy thread pops it, the producer sees it finished (sync);
///                            floor: a flag written into mapped host memory and an acknowledgement read back.
///   "fifo trigger rate" (us per trigger): one producer pushes 10,000 triggers, syncing once per FIFO length;
///                            floor: the same loop writing raw 16-byte slots with no FIFO protocol.
/// The producer is one GPU thread when weft-bench is built with fifo_bench_kernels.cu (WEFT_FIFO_BENCH_GPU) and a GPU
/// is present; otherwise a host thread. options.iterations (0: 2000) sets the round-trip count.
std::vector<BenchRow> runFifoBench(const BenchOptions& options);

}  // namespace weft::bench
