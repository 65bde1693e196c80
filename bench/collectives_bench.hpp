// weft-bench collectives: nccl-tests' command line, table and bus-bandwidth formulas for weft's CollectiveComm,
// optionally beside the system NCCL on the same ranks (--vs nccl) and beside a copy floor measured in the same run.
#pragma once

#include <cstdint>
#include <string>
#include <vector>
#include <weft/bootstrap.hpp>
#include <weft/collectives.hpp>

namespace CLI {
class App;
}

namespace weft::bench {

/// What `weft-bench collectives` takes from the command line (nccl-tests' options and defaults where they make
/// sense; -b/-e/-f default to a sweep instead of nccl-tests' single 32 MiB size).
struct CollectivesOptions {
  uint64_t minBytes = 8;
  uint64_t maxBytes = 64ull << 20;
  uint64_t stepFactor = 2;
  uint64_t stepBytes = 0;  ///< > 0: sizes grow by this many bytes instead of by stepFactor
  int iterations = 20;     ///< timed iterations per size; 0: about 64 MiB moved per size, within [20, 2000]
  int warmup = 5;
  int check = 1;           ///< 1: verify one extra run of every size against a CPU reference
  int graphLaunches = 0;   ///< > 0: capture the iterations into a CUDA/HIP graph and launch it this many times
  std::string op = "sum";  ///< sum, prod, min, max, avg or all
  std::string type = "float";
  std::string collective = "all";  ///< allreduce, allgather, reducescatter, broadcast, reduce, alltoall or all
  int root = 0;
  int ignoredBlocking = 0;              ///< nccl-tests' -z (blocking collectives): accepted and ignored
  std::string jsonPath;                 ///< "" for none, "-" for stdout
  std::string versus;                   ///< "" or "nccl"
  std::string tunePath;                 ///< "": measure; else time every allreduce algorithm, write the rules here
  uint64_t scratchBytes = 64ull << 20;  ///< CollectiveOptions::scratchBytes
  uint32_t hostThreads = 4;             ///< CollectiveOptions::hostThreads (WEFT_GPU=none builds)
  int registered = 0;                   ///< -R: 1 registers the send and recv buffers (CollectiveComm::registerBuffer)

  /// The message sizes: minBytes, then times stepFactor (or plus stepBytes) up to maxBytes. Error(kInvalidArgument)
  /// for an empty or endless range.
  std::vector<uint64_t> sizes() const;
};

/// Adds the `collectives` subcommand with every option bound to `options`; returns it (parsed() after parsing).
CLI::App* addCollectivesCommand(CLI::App& app, CollectivesOptions& options);

/// One measured row of the table (one library, collective, type, op and size; out-of-place and in-place).
struct CollectiveRow {
  std::string library;  ///< "weft" or "nccl"
  CollectiveKind kind = CollectiveKind::kAllReduce;
  uint64_t bytes = 0;  ///< the size column: the larger of the send and receive buffers, as nccl-tests prints it
  uint64_t count = 0;  ///< elements per rank passed to the call
  DataType type = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  bool reduces = true;        ///< false: the redop column says "none"
  int root = -1;              ///< -1 for collectives without a root
  bool hasInPlace = true;     ///< false where the collective has no in-place form here (all-to-all)
  double timeUs[2] = {0, 0};  ///< [0] out-of-place, [1] in-place: average per iteration, the slowest rank's
  double algBw[2] = {0, 0};   ///< GB/s: bytes / time
  double busBw[2] = {0, 0};   ///< GB/s: algBw * busBandwidthFactor
  int64_t wrong[2] = {0, 0};  ///< elements that differ from the reference, summed over ranks (-1: not checked)
  double floorUs = 0;         ///< a plain copy of `bytes` bytes on every rank at once, the slowest rank's
};

/// nccl-tests' bus-bandwidth factor for `kind` over `ranks` ranks: allreduce 2(n-1)/n; allgather, reduce-scatter
/// and all-to-all (n-1)/n; broadcast and reduce 1.
double busBandwidthFactor(CollectiveKind kind, int ranks);

/// Runs the benchmark on every rank of `boot` (collective); rank 0 prints the tables and writes the JSON lines.
/// Returns the process exit status: 0, or 1 when any element arrived wrong. Throws weft::Error on bad options
/// (kInvalidArgument) and on failures of the engine or the GPU runtime.
int runCollectivesBench(TcpBootstrap& boot, const CollectivesOptions& options);

}  // namespace weft::bench
