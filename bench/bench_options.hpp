// Command-line options and result output shared by weft-bench's benchmarks.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace weft::bench {

/// What every benchmark takes from the command line.
struct BenchOptions {
  uint64_t minBytes = 8;
  uint64_t maxBytes = 64ull << 20;
  uint64_t stepFactor = 4;
  int iterations = 0;  ///< 0: choose per size so each size takes a few milliseconds
  int warmup = 5;
  int rounds = 1;  ///< primitives' connection rows: weft and its floor alternate this many times, each keeps its best
  std::string jsonPath;  ///< "" for none, "-" for stdout
  bool check = true;

  /// The message sizes from minBytes to maxBytes, multiplied by stepFactor each step.
  std::vector<uint64_t> sizes() const;
  /// Iterations for a message of `bytes` (the fixed count, or one that moves about 64 MiB, within [20, 2000]).
  int iterationsFor(uint64_t bytes) const;
};

/// One measured row: the weft figure, the floor measured in the same run, and their ratio.
struct BenchRow {
  std::string benchmark;  ///< e.g. "put+signal latency"
  std::string unit;       ///< "us" or "GB/s"
  uint64_t bytes = 0;
  int iterations = 0;
  double weft = 0;
  double floor = 0;
  int wrong = 0;  ///< elements that arrived wrong in the check run
};

/// Prints rows as an aligned table (with a header when `header`) to `out`.
void printTable(std::FILE* out, const std::string& title, const std::vector<BenchRow>& rows);

/// Appends rows as JSON lines (one object per row) to `path` ("-" for stdout).
void writeJsonLines(const std::string& path, const std::string& library, int ranks, const std::vector<BenchRow>& rows);

/// Formats a byte count as nccl-tests does (plain integer) and human-readable (1K, 4M).
std::string humanBytes(uint64_t bytes);

}  // namespace weft::bench
