// `weft-bench primitives` over libfabric as a user runs it: the real weft-run starting two real weft-bench ranks
// with libfabric forced between them (tcp, and shm where this libfabric has it), every weft row printed beside its
// raw libfabric floor from the same run. Checks that the rows exist, nothing arrived wrong, and the figures are
// positive and finite; no performance thresholds (CI machines are noisy).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "json_lines.hpp"
#include "shell.hpp"
#include "transport_plugins.hpp"

namespace {

const std::string kBin = WEFT_BIN_DIR;

using weft::test::readJsonLines;
using weft::test::runShell;
using weft::test::TempDir;
using Result = weft::test::ShellResult;

bool exists(const std::string& path) { return weft::test::pathExists(path); }

class PrimitivesLibfabricBench : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (!exists(kBin + "/weft-bench")) GTEST_SKIP() << "weft-bench not built (WEFT_BUILD_BENCH=OFF)";
    if (!weft::test::transportPluginBuilt("libfabric")) {
      GTEST_SKIP() << "the libfabric transport is not built (CMake found no libfabric)";
    }
    if (runShell("fi_info -p " + GetParam() + " -t FI_EP_RDM >/dev/null").status != 0 && exists("/usr/bin/fi_info")) {
      GTEST_SKIP() << "fi_info offers no RDM endpoint of provider " << GetParam();
    }
    ASSERT_FALSE(dir_.path().empty());
    json_ = dir_.path() + "/out.jsonl";
  }
  TempDir dir_{"weft-pbench"};
  std::string json_;
};

TEST_P(PrimitivesLibfabricBench, EveryRowBesideItsRawLoopNothingWrong) {
  const std::string provider = GetParam();
  // Sizes 8 * 8^k up to 2 MiB: latency rows stop at 1 MiB, bandwidth rows go on. Two rounds: weft and the raw loop
  // take turns twice per size, and each size still makes one row per family.
  Result r = runShell("WEFT_TRANSPORTS_SAME_HOST=libfabric WEFT_TRANSPORT_LIBFABRIC_PROVIDER=" + provider + " " + kBin +
                      "/weft-run --timeout 120 -n 2 -- " + kBin +
                      "/weft-bench primitives -b 8 -e 2M -f 8 -n 40 -w 4 --rounds 2 --json " + json_);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("over libfabric; floor: raw libfabric loop (provider " + provider), std::string::npos)
      << r.output;

  const std::vector<uint64_t> sizes = {8, 64, 512, 4096, 32768, 262144, 2097152};
  // What the floor of each row family is depends on the provider's offer (remote CQ data, FI_SUM atomics), which
  // the header line names; the rows of every family present must cover every size.
  std::map<std::string, std::set<uint64_t>> seen;
  for (const nlohmann::json& j : readJsonLines(json_)) {
    const std::string name = j.at("benchmark").get<std::string>();
    if (name.rfind("put+signal latency", 0) != 0 && name.rfind("put bandwidth", 0) != 0) continue;
    SCOPED_TRACE(j.dump());
    EXPECT_NE(name.find("[raw "), std::string::npos) << "a libfabric row without its raw floor";
    const uint64_t bytes = j.at("bytes").get<uint64_t>();
    EXPECT_TRUE(seen[name].insert(bytes).second) << "duplicate row";
    EXPECT_EQ(j.at("wrong").get<int64_t>(), 0);
    const double weft = j.at("weft").get<double>(), floor = j.at("floor").get<double>();
    EXPECT_TRUE(std::isfinite(weft) && weft > 0) << weft;
    EXPECT_TRUE(std::isfinite(floor) && floor > 0) << floor;
    EXPECT_NEAR(j.at("ratio").get<double>(), weft / floor, 1e-9 * weft / floor);
    EXPECT_EQ(j.at("unit").get<std::string>(), name.rfind("put bandwidth", 0) == 0 ? "GB/s" : "us");
  }
  ASSERT_TRUE(seen.count("put bandwidth [raw fi_write]")) << r.output;
  EXPECT_EQ(seen["put bandwidth [raw fi_write]"], std::set<uint64_t>(sizes.begin(), sizes.end()));
  int latencyFamilies = 0;
  for (const auto& [name, got] : seen) {
    if (name.rfind("put+signal latency", 0) != 0) continue;
    ++latencyFamilies;
    EXPECT_EQ(got, std::set<uint64_t>(sizes.begin(), sizes.end() - 1)) << name;
  }
  EXPECT_GE(latencyFamilies, 1) << r.output;
  // The table carries the same rows, #wrong 0 on each.
  EXPECT_NE(r.output.find("put bandwidth [raw fi_write]"), std::string::npos) << r.output;
}

INSTANTIATE_TEST_SUITE_P(Providers, PrimitivesLibfabricBench, ::testing::Values("tcp", "shm"),
                         [](const auto& info) { return info.param; });

}  // namespace
