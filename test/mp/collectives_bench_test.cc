// `weft-bench collectives` as a user runs it: the real weft-run starting real weft-bench ranks on the host build,
// its table and JSON lines checked (every row present, nothing wrong, the nccl-tests bandwidth formulas), and
// bench/plot.py run on the output where matplotlib is importable.
#include <gtest/gtest.h>

#include <algorithm>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>
#include <weft/config.hpp>

#include "json_lines.hpp"
#include "shell.hpp"

namespace {

const std::string kBin = WEFT_BIN_DIR;

using weft::test::readJsonLines;
using weft::test::runShell;
using weft::test::TempDir;
using Result = weft::test::ShellResult;

bool exists(const std::string& path) { return weft::test::pathExists(path); }

size_t countOf(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// weft-bench collectives under weft-run; returns its result. Skips the test when weft-bench was not built.
Result bench(int ranks, const std::string& args) {
  return runShell(kBin + "/weft-run --timeout 60 -n " + std::to_string(ranks) + " -- " + kBin +
                  "/weft-bench collectives " + args);
}

class CollectivesBench : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!exists(kBin + "/weft-bench")) GTEST_SKIP() << "weft-bench not built (WEFT_BUILD_BENCH=OFF)";
    ASSERT_FALSE(dir_.path().empty());
    json_ = dir_.path() + "/out.jsonl";
  }
  TempDir dir_{"weft-cbench"};
  std::string json_;
};

double busFactor(const std::string& collective, int n) {
  if (collective == "allreduce") return 2.0 * (n - 1) / n;
  if (collective == "allgather" || collective == "reducescatter" || collective == "alltoall") return (n - 1.0) / n;
  return 1.0;
}

TEST_F(CollectivesBench, EveryCollectiveTwoRanksTableAndJsonLines) {
  Result r = bench(2, "-b 8 -e 64K -f 4 -n 5 -w 1 --json " + json_);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(countOf(r.output, "# Out of bounds values : 0 OK"), 6u) << r.output;
  EXPECT_EQ(countOf(r.output, "# Avg bus bandwidth"), 6u) << r.output;
  EXPECT_NE(r.output.find("#  Rank  1 Pid"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("#wrong"), std::string::npos) << r.output;

  const std::vector<std::string> collectives = {"allreduce", "allgather", "reducescatter",
                                                "broadcast", "reduce",    "alltoall"};
  const std::vector<uint64_t> sizes = {8, 32, 128, 512, 2048, 8192, 32768};  // 8 * 4^k up to 64K
  std::set<std::tuple<std::string, uint64_t, bool>> expected;
  for (const std::string& c : collectives) {
    for (uint64_t s : sizes) {
      expected.insert({c, s, false});
      if (c != "alltoall") expected.insert({c, s, true});
    }
  }
  std::set<std::tuple<std::string, uint64_t, bool>> seen;
  for (const nlohmann::json& j : readJsonLines(json_)) {
    const std::string c = j.at("collective").get<std::string>();
    const uint64_t bytes = j.at("bytes").get<uint64_t>();
    const bool inplace = j.at("inplace").get<bool>();
    SCOPED_TRACE(j.dump());
    EXPECT_TRUE(seen.insert({c, bytes, inplace}).second) << "duplicate row";
    EXPECT_EQ(j.at("library"), "weft");
    EXPECT_EQ(j.at("algorithm"), "default");
    EXPECT_EQ(j.at("ranks"), 2);
    EXPECT_EQ(j.at("type"), "float");
    EXPECT_EQ(j.at("wrong").get<int64_t>(), 0);
    const bool reduces = c == "allreduce" || c == "reducescatter" || c == "reduce";
    EXPECT_EQ(j.at("op"), reduces ? "sum" : "none");
    EXPECT_EQ(j.at("root").get<int>(), (c == "broadcast" || c == "reduce") ? 0 : -1);
    const bool perRank = c == "allgather" || c == "reducescatter" || c == "alltoall";
    EXPECT_EQ(j.at("count").get<uint64_t>(), perRank ? bytes / 4 / 2 : bytes / 4);
    const double time = j.at("time_us").get<double>();
    ASSERT_GT(time, 0);
    const double algbw = j.at("algbw").get<double>();
    EXPECT_NEAR(algbw, static_cast<double>(bytes) / time / 1e3, 1e-9 * algbw);
    EXPECT_NEAR(j.at("busbw").get<double>(), algbw * busFactor(c, 2), 1e-9 * algbw);
    ASSERT_TRUE(j.contains("floor_us"));
    EXPECT_GT(j.at("floor_us").get<double>(), 0);
  }
  EXPECT_EQ(seen, expected);
}

// Every datatype and op on three ranks with sizes that split unevenly: the engine's results match the bit-exact
// CPU reference (fp16/bf16/fp8 included), and counts round down as nccl-tests rounds them.
TEST_F(CollectivesBench, EveryTypeAndOpThreeRanksBitExact) {
  Result r = bench(
      3, "-b 1000 -e 1000 -d all -o all -n 1 -w 0 -O allreduce,reducescatter,reduce,allgather -r 2 --json " + json_);
  ASSERT_EQ(r.status, 0) << r.output;
  std::map<std::string, int> rowsPerCollective;
  for (const nlohmann::json& j : readJsonLines(json_)) {
    SCOPED_TRACE(j.dump());
    EXPECT_EQ(j.at("wrong").get<int64_t>(), 0);
    EXPECT_EQ(j.at("ranks"), 3);
    ++rowsPerCollective[j.at("collective").get<std::string>()];
    if (j.at("collective") == "reduce") EXPECT_EQ(j.at("root"), 2);
    if (j.at("collective") == "allgather" && j.at("type") == "double") {
      EXPECT_EQ(j.at("count"), 41);   // 1000 / 8 / 3
      EXPECT_EQ(j.at("bytes"), 984);  // 3 * 41 * 8
    }
  }
  // 12 types x 5 ops x 2 placements for the reducing ones; 12 types x 2 placements for allgather.
  EXPECT_EQ(rowsPerCollective["allreduce"], 120);
  EXPECT_EQ(rowsPerCollective["reducescatter"], 120);
  EXPECT_EQ(rowsPerCollective["reduce"], 120);
  EXPECT_EQ(rowsPerCollective["allgather"], 24);
}

// --tune times both allreduce algorithms per size and writes [[collectives.allreduce]] rules: the file parses, its
// rules give every measured size the algorithm the table printed as fastest, and a run with it as WEFT_CONFIG
// follows them (the library logs how many rules it took) with nothing wrong.
TEST_F(CollectivesBench, TuneWritesRulesThatTheLibraryFollows) {
  const std::string file = dir_.path() + "/tuned.toml";
  Result r = bench(2, "-b 1K -e 256K -f 4 -n 3 -w 1 --tune " + file);
  ASSERT_EQ(r.status, 0) << r.output;
  ASSERT_NE(r.output.find("# wrote " + file), std::string::npos) << r.output;
  const weft::Config c = weft::Config::fromFile(file);
  ASSERT_FALSE(c.allReduceRules.empty());
  EXPECT_EQ(c.allReduceRules.back().maxBytes, 0u);
  for (size_t i = 0; i < c.allReduceRules.size(); ++i) {
    const weft::AllReduceRule& rule = c.allReduceRules[i];
    EXPECT_EQ(rule.ranks, 2);
    EXPECT_EQ(rule.ranksPerGpu, 2) << "the placement it was measured on (two ranks of one host)";
    if (i + 1 < c.allReduceRules.size()) {
      EXPECT_NE(rule.algorithm, c.allReduceRules[i + 1].algorithm) << "consecutive rules should have been merged";
      if (i + 2 < c.allReduceRules.size()) EXPECT_LT(rule.maxBytes, c.allReduceRules[i + 1].maxBytes);
    }
  }
  size_t rows = 0;
  std::istringstream lines(r.output);
  for (std::string line; std::getline(lines, line);) {
    unsigned long long bytes = 0;
    double oneShot = 0, scatterGather = 0, twoShot = 0;
    char fastest[32] = {};
    if (std::sscanf(line.c_str(), "[rank 0] %llu %lf %lf %lf %31s", &bytes, &oneShot, &scatterGather, &twoShot,
                    fastest) != 5)
      continue;
    ++rows;
    std::string chosen;
    for (const weft::AllReduceRule& rule : c.allReduceRules) {
      if (rule.maxBytes == 0 || bytes <= rule.maxBytes) {
        chosen = rule.algorithm;
        break;
      }
    }
    EXPECT_EQ(chosen, fastest) << line;
    const double best = std::min({oneShot, scatterGather, twoShot});
    EXPECT_EQ(std::string(fastest), oneShot == best         ? "oneshot_ll"
                                    : scatterGather == best ? "scatter_gather"
                                                            : "twoshot_ll")
        << line;
  }
  EXPECT_EQ(rows, 5u) << r.output;  // 1K, 4K, 16K, 64K, 256K

  Result run = runShell("WEFT_CONFIG=" + file + " WEFT_LOG_LEVEL=info WEFT_LOG_SUBSYS=coll " + kBin +
                        "/weft-run --timeout 60 -n 2 -- " + kBin +
                        "/weft-bench collectives -b 1K -e 256K -f 4 -n 2 -w 0 -O allreduce");
  ASSERT_EQ(run.status, 0) << run.output;
  EXPECT_NE(run.output.find("# Out of bounds values : 0 OK"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find(std::to_string(c.allReduceRules.size()) + " allreduce rules from the config"),
            std::string::npos)
      << run.output;
}

TEST_F(CollectivesBench, NoCheckReportsNotApplicable) {
  Result r = bench(2, "-b 64 -e 64 -O allreduce -c 0 -n 2 -w 0 --json " + json_);
  ASSERT_EQ(r.status, 0) << r.output;
  std::vector<nlohmann::json> rows = readJsonLines(json_);
  ASSERT_EQ(rows.size(), 2u);
  for (const nlohmann::json& j : rows) EXPECT_EQ(j.at("wrong").get<int64_t>(), -1) << j.dump();
  EXPECT_NE(r.output.find("N/A"), std::string::npos) << r.output;
}

TEST_F(CollectivesBench, BadOptionsAreRefusedWithTheReason) {
  Result type = bench(1, "-d float7 -b 8 -e 8");
  EXPECT_NE(type.status, 0);
  EXPECT_NE(type.output.find("unknown datatype 'float7'"), std::string::npos) << type.output;
  Result root = bench(2, "-r 2 -b 8 -e 8");
  EXPECT_NE(root.status, 0);
  EXPECT_NE(root.output.find("root 2 is not a rank of 2"), std::string::npos) << root.output;
  Result range = bench(1, "-b 64 -e 8");
  EXPECT_NE(range.status, 0);
  EXPECT_NE(range.output.find("0 < -b <= -e"), std::string::npos) << range.output;
  Result graph = bench(1, "-G 1 -b 8 -e 8");
  EXPECT_NE(graph.status, 0);
  EXPECT_NE(graph.output.find("-G needs a GPU build"), std::string::npos) << graph.output;
}

TEST_F(CollectivesBench, VersusNcclIsSkippedWithoutAGpu) {
  Result r = bench(2, "-b 64 -e 256 -O broadcast -n 2 -w 0 --vs nccl --json " + json_);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("--vs nccl: skipped"), std::string::npos) << r.output;
  std::vector<nlohmann::json> rows = readJsonLines(json_);
  ASSERT_EQ(rows.size(), 6u);  // 64, 128, 256 x 2 placements, weft only
  for (const nlohmann::json& j : rows) EXPECT_EQ(j.at("library"), "weft");
}

TEST_F(CollectivesBench, PlotMakesPngAndSvg) {
  // Debian's python3-matplotlib lives in /usr/bin/python3, which a pyenv or venv python3 on PATH may hide.
  std::string python;
  for (const char* candidate : {"python3", "/usr/bin/python3"}) {
    if (runShell(std::string(candidate) + " -c 'import matplotlib'").status == 0) {
      python = candidate;
      break;
    }
  }
  if (python.empty()) GTEST_SKIP() << "python3-matplotlib is not installed: apt install python3-matplotlib";
  Result r = bench(2, "-b 8 -e 4K -f 8 -n 2 -w 0 -O allreduce,allgather --json " + json_);
  ASSERT_EQ(r.status, 0) << r.output;
  const std::string plot = std::string(WEFT_SOURCE_DIR) + "/bench/plot.py";
  const std::string png = dir_.path() + "/out.png";
  const std::string svg = dir_.path() + "/out.svg";
  Result p = runShell(python + " " + plot + " " + json_ + " " + json_ + " --out " + png + " --floor");
  ASSERT_EQ(p.status, 0) << p.output;
  EXPECT_NE(p.output.find("4 lines"), std::string::npos) << p.output;  // 2 collectives x 2 placements
  std::ifstream in(png, std::ios::binary);
  char magic[8] = {};
  in.read(magic, sizeof(magic));
  EXPECT_EQ(std::string(magic + 1, 3), "PNG");
  Result s = runShell(python + " " + plot + " " + json_ + " --out " + svg);
  ASSERT_EQ(s.status, 0) << s.output;
  std::ifstream svgIn(svg);
  std::string svgText((std::istreambuf_iterator<char>(svgIn)), std::istreambuf_iterator<char>());
  EXPECT_NE(svgText.find("<svg"), std::string::npos);
  EXPECT_NE(svgText.find("allreduce"), std::string::npos);  // the legend names the lines
  Result bad = runShell(python + " " + plot + " " + json_ + " --out " + dir_.path() + "/out.gif");
  EXPECT_NE(bad.status, 0);
}

}  // namespace
