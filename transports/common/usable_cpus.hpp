// How many CPUs this process can count on: its affinity mask, lowered to the CPU quota of its cgroup where one is
// set. A container given 2 CPUs by quota on a 128-core host sees all 128 in its mask; a transport that sizes a
// default by the cores it has (libfabric's isolate_provider) must see 2 there.
// Header-only: every plugin is its own shared object and links nothing of libweft.
#pragma once

#include <sched.h>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

namespace weft::transport_support {

/// CPUs a quota of `quota` us per `period` us gives (rounded up); 0 for no limit (a negative or "max" quota).
inline int cpusOfQuota(int64_t quota, int64_t period) {
  if (quota <= 0 || period <= 0) return 0;
  return static_cast<int>((quota + period - 1) / period);
}

/// The limit of a cgroup v2 cpu.max ("QUOTA PERIOD" or "max PERIOD"); 0 for none or text it cannot read.
inline int cpusOfCpuMax(const std::string& text) {
  std::istringstream in(text);
  std::string quota;
  int64_t period = 0;
  if (!(in >> quota >> period) || quota == "max") return 0;
  try {
    return cpusOfQuota(std::stoll(quota), period);
  } catch (...) {
    return 0;
  }
}

/// Where this process's cgroup sits, from /proc/self/cgroup: the unified (v2) path ("0::PATH") and the v1 cpu
/// controller's path ("N:cpu,cpuacct:PATH" or "N:cpu:PATH"); empty when there is none.
struct CgroupPaths {
  std::string unified;
  std::string cpu;
};

inline CgroupPaths cgroupPathsOf(const std::string& procSelfCgroup) {
  CgroupPaths paths;
  std::istringstream in(procSelfCgroup);
  std::string line;
  while (std::getline(in, line)) {
    const size_t first = line.find(':');
    const size_t second = first == std::string::npos ? first : line.find(':', first + 1);
    if (second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1);
    const std::string path = line.substr(second + 1);
    if (line.compare(0, first, "0") == 0 && controllers.empty()) {
      paths.unified = path;
      continue;
    }
    std::istringstream list(controllers);
    for (std::string c; std::getline(list, c, ',');) {
      if (c == "cpu") paths.cpu = path;
    }
  }
  return paths;
}

inline std::string readWholeFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

/// The CPU limit of this process's cgroup (v2 cpu.max, else v1 cfs quota); 0 when none is set or none can be read.
/// Only the process's own cgroup is read, not its ancestors'.
inline int cgroupCpuLimit() {
  const CgroupPaths paths = cgroupPathsOf(readWholeFile("/proc/self/cgroup"));
  if (!paths.unified.empty()) {
    if (int n = cpusOfCpuMax(readWholeFile("/sys/fs/cgroup" + paths.unified + "/cpu.max"))) return n;
  }
  if (!paths.cpu.empty()) {
    for (const char* mount : {"/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"}) {
      std::ifstream quota(std::string(mount) + paths.cpu + "/cpu.cfs_quota_us");
      std::ifstream period(std::string(mount) + paths.cpu + "/cpu.cfs_period_us");
      int64_t q = 0, p = 0;
      if (quota >> q && period >> p) return cpusOfQuota(q, p);
    }
  }
  return 0;
}

/// CPUs this process may run on (its affinity mask), at most its cgroup's quota.
inline int usableCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  int n = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set)
                                                       : static_cast<int>(std::thread::hardware_concurrency());
  const int limit = cgroupCpuLimit();
  if (limit > 0 && limit < n) n = limit;
  return n;
}

}  // namespace weft::transport_support
