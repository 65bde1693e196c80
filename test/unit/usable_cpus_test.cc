// transports/common/usable_cpus.hpp: the cgroup quota texts of v1 and v2, and a real process whose affinity mask is
// narrowed to one CPU.
#include "../../transports/common/usable_cpus.hpp"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

namespace weft::transport_support {
namespace {

TEST(UsableCpusTest, AQuotaGivesItsCpusRoundedUp) {
  EXPECT_EQ(cpusOfQuota(200000, 100000), 2);
  EXPECT_EQ(cpusOfQuota(150000, 100000), 2);
  EXPECT_EQ(cpusOfQuota(50000, 100000), 1);
  EXPECT_EQ(cpusOfQuota(-1, 100000), 0);  // cgroup v1: no quota
  EXPECT_EQ(cpusOfQuota(100000, 0), 0);
}

TEST(UsableCpusTest, CpuMaxTextOfCgroupV2) {
  EXPECT_EQ(cpusOfCpuMax("max 100000\n"), 0);
  EXPECT_EQ(cpusOfCpuMax("400000 100000\n"), 4);
  EXPECT_EQ(cpusOfCpuMax("250000 100000"), 3);
  EXPECT_EQ(cpusOfCpuMax(""), 0);
  EXPECT_EQ(cpusOfCpuMax("garbage"), 0);
  EXPECT_EQ(cpusOfCpuMax("x 100000"), 0);
}

TEST(UsableCpusTest, CgroupPathsOfUnifiedHybridAndV1Hosts) {
  CgroupPaths v2 = cgroupPathsOf("0::/kubepods/pod1/c2\n");
  EXPECT_EQ(v2.unified, "/kubepods/pod1/c2");
  EXPECT_EQ(v2.cpu, "");
  // A hybrid host: v1 controllers and an empty unified hierarchy.
  CgroupPaths hybrid = cgroupPathsOf("4:memory:/jobs/7\n2:cpu,cpuacct:/jobs/7\n0::/\n");
  EXPECT_EQ(hybrid.unified, "/");
  EXPECT_EQ(hybrid.cpu, "/jobs/7");
  CgroupPaths v1 = cgroupPathsOf("3:cpuacct:/a\n1:cpu:/docker/abc\n");
  EXPECT_EQ(v1.unified, "");
  EXPECT_EQ(v1.cpu, "/docker/abc");
  // "cpuset" is not "cpu".
  EXPECT_EQ(cgroupPathsOf("5:cpuset:/x\n").cpu, "");
  EXPECT_EQ(cgroupPathsOf("").unified, "");
}

TEST(UsableCpusTest, ThisProcessCountsAtLeastOneAndAtMostEveryCpu) {
  const int n = usableCpus();
  EXPECT_GE(n, 1);
  EXPECT_LE(n, static_cast<int>(std::thread::hardware_concurrency()));
}

// A child pinned to one CPU counts one, whatever the host has.
TEST(UsableCpusTest, AnAffinityMaskOfOneCpuCountsOne) {
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(sched_getcpu() >= 0 ? sched_getcpu() : 0, &one);
    if (sched_setaffinity(0, sizeof(one), &one) != 0) _exit(2);
    _exit(usableCpus() == 1 ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

}  // namespace
}  // namespace weft::transport_support
