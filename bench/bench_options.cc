#include "bench_options.hpp"

#include <algorithm>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <weft/error.hpp>

namespace weft::bench {

std::vector<uint64_t> BenchOptions::sizes() const {
  if (minBytes == 0 || maxBytes < minBytes || stepFactor < 2) {
    throw Error(ErrorCode::kInvalidArgument, "sizes need 0 < min <= max and a step factor of at least 2");
  }
  std::vector<uint64_t> out;
  for (uint64_t s = minBytes; s <= maxBytes; s *= stepFactor) {
    out.push_back(s);
    if (s > maxBytes / stepFactor) break;
  }
  return out;
}

int BenchOptions::iterationsFor(uint64_t bytes) const {
  if (iterations > 0) return iterations;
  uint64_t n = (64ull << 20) / std::max<uint64_t>(bytes, 1);
  return static_cast<int>(std::clamp<uint64_t>(n, 20, 2000));
}

std::string humanBytes(uint64_t bytes) {
  const char* units[] = {"B", "K", "M", "G", "T"};
  int u = 0;
  uint64_t v = bytes;
  while (v >= 1024 && v % 1024 == 0 && u < 4) {
    v /= 1024;
    ++u;
  }
  return std::to_string(v) + units[u];
}

void printTable(std::FILE* out, const std::string& title, const std::vector<BenchRow>& rows) {
  std::fprintf(out, "# %s\n", title.c_str());
  std::fprintf(out, "# %-34s %12s %6s %7s %14s %14s %8s %7s\n", "benchmark", "size", "", "iters", "weft", "floor",
               "ratio", "#wrong");
  for (const BenchRow& r : rows) {
    double ratio = r.floor > 0 ? r.weft / r.floor : 0;
    std::fprintf(out, "  %-34s %12llu %6s %7d %9.3f %-4s %9.3f %-4s %7.2fx %7d\n", r.benchmark.c_str(),
                 static_cast<unsigned long long>(r.bytes), humanBytes(r.bytes).c_str(), r.iterations, r.weft,
                 r.unit.c_str(), r.floor, r.unit.c_str(), ratio, r.wrong);
  }
  std::fflush(out);
}

void writeJsonLines(const std::string& path, const std::string& library, int ranks, const std::vector<BenchRow>& rows) {
  if (path.empty()) return;
  std::ofstream file;
  std::ostream* out = &std::cout;
  if (path != "-") {
    file.open(path, std::ios::app);
    if (!file) throw Error(ErrorCode::kSystemError, "cannot open " + path + " for the JSON lines");
    out = &file;
  }
  for (const BenchRow& r : rows) {
    nlohmann::json j = {{"library", library},
                        {"ranks", ranks},
                        {"benchmark", r.benchmark},
                        {"bytes", r.bytes},
                        {"iterations", r.iterations},
                        {"unit", r.unit},
                        {"weft", r.weft},
                        {"floor", r.floor},
                        {"ratio", r.floor > 0 ? r.weft / r.floor : 0},
                        {"wrong", r.wrong}};
    *out << j.dump() << "\n";
  }
}

}  // namespace weft::bench
