// weft-bench: measures weft beside floors measured in the same run. Runs under weft-run, mpirun, srun or
// torchrun (the bootstrap reads the launcher's environment).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <weft/bootstrap.hpp>
#include <weft/error.hpp>

#include "bench_options.hpp"
#include "collectives_bench.hpp"
#include "fifo_bench.hpp"
#include "gpu_primitives_bench.hpp"
#include "memory_channel_bench.hpp"
#include "primitives_bench.hpp"
#include "serialization.hpp"

namespace {

constexpr int kRowsTag = 900;

using weft::bench::BenchRow;

std::vector<uint8_t> encodeRows(const std::vector<BenchRow>& rows) {
  weft::detail::ByteWriter w;
  w.put<uint32_t>(static_cast<uint32_t>(rows.size()));
  for (const BenchRow& r : rows) {
    w.putString(r.benchmark);
    w.putString(r.unit);
    w.put<uint64_t>(r.bytes);
    w.put<int32_t>(r.iterations);
    w.putBytes(&r.weft, sizeof(double));
    w.putBytes(&r.floor, sizeof(double));
    w.put<int32_t>(r.wrong);
  }
  return w.take();
}

std::vector<BenchRow> decodeRows(const std::vector<uint8_t>& bytes) {
  weft::detail::ByteReader r(bytes.data(), bytes.size(), "benchmark rows");
  std::vector<BenchRow> rows(r.get<uint32_t>());
  for (BenchRow& row : rows) {
    row.benchmark = r.getString(256);
    row.unit = r.getString(16);
    row.bytes = r.get<uint64_t>();
    row.iterations = r.get<int32_t>();
    uint64_t w = r.get<uint64_t>();
    std::memcpy(&row.weft, &w, sizeof(double));
    uint64_t f = r.get<uint64_t>();
    std::memcpy(&row.floor, &f, sizeof(double));
    row.wrong = r.get<int32_t>();
  }
  return rows;
}

// Pairs (0,1), (2,3), ...: the higher rank's #wrong counts join the lower rank's timings, and every pair's
// rows reach rank 0, which prints them.
void reportPairs(weft::Bootstrap& boot, std::vector<BenchRow> rows, const weft::bench::BenchOptions& options,
                 const std::string& what) {
  const int rank = boot.rank();
  const int peer = rank ^ 1;
  if (peer >= boot.size()) return;
  if (rank > peer) {
    boot.sendBytes(encodeRows(rows), peer, kRowsTag);
    return;
  }
  std::vector<BenchRow> theirs = decodeRows(boot.recvBytes(peer, kRowsTag));
  for (size_t i = 0; i < rows.size() && i < theirs.size(); ++i) rows[i].wrong += theirs[i].wrong;
  if (rank != 0) {
    boot.sendBytes(encodeRows(rows), 0, kRowsTag + 1);
    return;
  }
  for (int lower = 0; lower + 1 < boot.size(); lower += 2) {
    std::vector<BenchRow> pairRows = lower == 0 ? rows : decodeRows(boot.recvBytes(lower, kRowsTag + 1));
    std::string title = "weft-bench " + what + ": ranks " + std::to_string(lower) + " -> " + std::to_string(lower + 1) +
                        " of " + std::to_string(boot.size());
    weft::bench::printTable(stdout, title, pairRows);
    weft::bench::writeJsonLines(options.jsonPath, "weft", boot.size(), pairRows);
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"weft-bench: weft's figures beside floors measured in the same run"};
  app.require_subcommand(1);
  weft::bench::BenchOptions options;
  auto* primitives = app.add_subcommand(
      "primitives",
      "Connection put+signal/wait latency and put bandwidth between rank pairs (host memory), then the "
      "memory-channel and fifo figures");
  auto* connection = app.add_subcommand(
      "connection", "only the connection rows of primitives: put+signal/wait latency and put bandwidth (host memory)");
  auto* memoryChannel = app.add_subcommand(
      "memory-channel", "semaphore and LL8/LL16 packet ping-pong, MemoryChannel put bandwidth between rank pairs");
  auto* fifo = app.add_subcommand("fifo", "FIFO round trip and trigger rate (one producer, one proxy thread)");
  auto* gpu = app.add_subcommand("gpu",
                                 "GPU kernels on GPU memory between rank pairs: semaphore, LL8/LL16 and PortChannel "
                                 "ping-pong, PortChannel and MemoryChannel put bandwidth (sizes: multiples of 16)");
  for (CLI::App* sub : {primitives, connection, memoryChannel, fifo, gpu}) {
    // K, M, G as in weft-bench collectives (and nccl-tests): `-e 64K` was refused here while collectives took it.
    sub->add_option("-b,--minbytes", options.minBytes, "smallest message in bytes (K, M, G suffixes: powers of 1024)")
        ->transform(CLI::AsSizeValue(false))
        ->capture_default_str();
    sub->add_option("-e,--maxbytes", options.maxBytes, "largest message in bytes")
        ->transform(CLI::AsSizeValue(false))
        ->capture_default_str();
    sub->add_option("-f,--stepfactor", options.stepFactor, "size multiplier between steps")->capture_default_str();
    sub->add_option("-n,--iters", options.iterations, "iterations per size (0: about 64 MiB moved per size)")
        ->capture_default_str();
    sub->add_option("-w,--warmup_iters", options.warmup, "warm-up iterations per size")->capture_default_str();
    sub->add_option("--json", options.jsonPath, "append one JSON line per row to this file (- for stdout)");
    sub->add_flag("!--no-check", options.check, "skip verifying the data that arrived");
  }
  for (CLI::App* sub : {primitives, connection}) {
    sub->add_option("--rounds", options.rounds,
                    "connection rows: weft and its floor take turns this many times per size, each keeping its best")
        ->check(CLI::Range(1, 1000))
        ->capture_default_str();
  }
  weft::bench::CollectivesOptions collectivesOptions;
  auto* collectives = weft::bench::addCollectivesCommand(app, collectivesOptions);
  CLI11_PARSE(app, argc, argv);
  try {
    std::unique_ptr<weft::TcpBootstrap> boot = weft::TcpBootstrap::fromEnvironment();
    // The error is said while this rank's bootstrap is still open: once it closes, a peer still setting up fails at
    // once, and weft-run then stops the ranks left, this one included, which must have said why by then.
    try {
      // Collectives run on any rank count, one included (as nccl-tests does).
      if (collectives->parsed()) return weft::bench::runCollectivesBench(*boot, collectivesOptions);
      if (boot->size() < 2) {
        std::fprintf(stderr, "weft-bench: needs at least 2 ranks, e.g. weft-run -n 2 -- weft-bench primitives\n");
        return 2;
      }
      options.sizes();  // validates the size range on every rank before any communication
      const bool all = primitives->parsed();
      if (all || connection->parsed()) {
        reportPairs(*boot, weft::bench::runPrimitives(*boot, options), options,
                    "connection put (host memory; floor: memcpy into the same peer pages, raw flag)");
      }
      if (all || memoryChannel->parsed()) {
        reportPairs(*boot, weft::bench::runMemoryChannel(*boot, options), options,
                    "memory channel (floor: raw stores into the same mapped pages)");
      }
      if ((all || fifo->parsed()) && boot->rank() == 0) {
        auto rows = weft::bench::runFifoBench(options);
        weft::bench::printTable(stdout, "weft-bench fifo: rank 0 (floor: raw mapped-memory flags)", rows);
        weft::bench::writeJsonLines(options.jsonPath, "weft", boot->size(), rows);
      }
      if ((all && weft::bench::gpuPrimitivesAvailable()) || gpu->parsed()) {
        weft::bench::BenchOptions gpuOptions = options;
        if (all) gpuOptions.minBytes = std::max<uint64_t>(gpuOptions.minBytes, 16);  // whole 16-byte units
        reportPairs(*boot, weft::bench::runGpuPrimitives(*boot, gpuOptions), options,
                    "gpu (kernels on GPU memory; floors: raw flags, raw copies, hipMemcpyAsync)");
      } else if (all && boot->rank() == 0) {
        std::printf("weft-bench gpu: skipped (%s)\n", "no GPU in this build or on this machine");
      }
      boot->barrier();
    } catch (const weft::Error& e) {
      std::fprintf(stderr, "weft-bench: %s\n", e.what());
      return 1;
    }
  } catch (const weft::Error& e) {
    std::fprintf(stderr, "weft-bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
