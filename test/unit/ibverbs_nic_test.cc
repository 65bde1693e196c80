// NIC choice on synthetic hwloc topologies (XML written here): two packages, each with a NUMA node, host bridges,
// and PCI switches holding GPUs and NICs in different arrangements.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "ibverbs_nic.hpp"

namespace weft::ibverbs {
namespace {

std::string pciDev(const std::string& busId, const char* classId) {
  return "<object type=\"PCIDev\" pci_busid=\"" + busId + "\" pci_type=\"" + classId +
         " [1234:0001] [0000:0000] 00\" pci_link_speed=\"0.000000\"/>\n";
}
std::string gpu(const std::string& busId) { return pciDev(busId, "0302"); }
std::string nic(const std::string& busId) { return pciDev(busId, "0207"); }

/// A PCI switch port (PCI-to-PCI bridge) at `busId` spanning buses [lo, hi], holding `children`.
std::string pciSwitch(const std::string& busId, int lo, int hi, const std::string& children) {
  char range[64];
  std::snprintf(range, sizeof(range), "0000:[%02x-%02x]", lo, hi);
  return "<object type=\"Bridge\" bridge_type=\"1-1\" depth=\"1\" pci_busid=\"" + busId +
         "\" pci_type=\"0604 [1000:0001] [0000:0000] 00\" pci_link_speed=\"0.000000\" bridge_pci=\"" + range + "\">\n" +
         children + "</object>\n";
}
std::string hostBridge(int lo, int hi, const std::string& children) {
  char range[64];
  std::snprintf(range, sizeof(range), "0000:[%02x-%02x]", lo, hi);
  return std::string("<object type=\"Bridge\" bridge_type=\"0-1\" depth=\"0\" bridge_pci=\"") + range + "\">\n" +
         children + "</object>\n";
}
std::string package(int index, const std::string& io) {
  const std::string cpu = index == 0 ? "0x00000003" : "0x0000000c";
  const std::string node = index == 0 ? "0x00000001" : "0x00000002";
  const std::string attrs = "cpuset=\"" + cpu + "\" complete_cpuset=\"" + cpu + "\" nodeset=\"" + node +
                            "\" complete_nodeset=\"" + node + "\"";
  std::string pu;
  for (int p = 0; p < 2; ++p) {
    char set[16];
    std::snprintf(set, sizeof(set), "0x%08x", 1u << (index * 2 + p));
    pu += "<object type=\"PU\" os_index=\"" + std::to_string(index * 2 + p) + "\" cpuset=\"" + set +
          "\" complete_cpuset=\"" + set + "\" nodeset=\"" + node + "\" complete_nodeset=\"" + node + "\"/>\n";
  }
  return "<object type=\"Package\" os_index=\"" + std::to_string(index) + "\" " + attrs + ">\n" +
         "<object type=\"NUMANode\" os_index=\"" + std::to_string(index) + "\" " + attrs +
         " local_memory=\"1000000\"/>\n" + pu + io + "</object>\n";
}
std::string machine(const std::string& packages) {
  return "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<!DOCTYPE topology SYSTEM \"hwloc2.dtd\">\n"
         "<topology version=\"2.0\">\n<object type=\"Machine\" os_index=\"0\" cpuset=\"0x0000000f\" "
         "complete_cpuset=\"0x0000000f\" allowed_cpuset=\"0x0000000f\" nodeset=\"0x00000003\" "
         "complete_nodeset=\"0x00000003\" allowed_nodeset=\"0x00000003\">\n" +
         packages + "</object>\n</topology>\n";
}

/// A loaded topology, destroyed at scope end.
class Topology {
 public:
  explicit Topology(const std::string& xml) {
    hwloc_topology_init(&topo_);
    hwloc_topology_set_io_types_filter(topo_, HWLOC_TYPE_FILTER_KEEP_ALL);
    EXPECT_EQ(hwloc_topology_set_xmlbuffer(topo_, xml.c_str(), static_cast<int>(xml.size() + 1)), 0);
    EXPECT_EQ(hwloc_topology_load(topo_), 0);
  }
  ~Topology() { hwloc_topology_destroy(topo_); }
  hwloc_topology_t get() const { return topo_; }

 private:
  hwloc_topology_t topo_ = nullptr;
};

// Package 0: host bridge 00-3f with switch A (GPU 0, GPU 1, NIC 0) and switch B (GPU 2, no NIC); another host
// bridge 40-5f with NIC 1. Package 1: host bridge 80-bf with switch C (GPU 3, NIC 2) and GPU 4 in a slot of its own.
std::string dgxLike() {
  return machine(
      package(0, hostBridge(0x00, 0x3f,
                            pciSwitch("0000:00:01.0", 0x01, 0x0f,
                                      gpu("0000:02:00.0") + gpu("0000:03:00.0") + nic("0000:04:00.0")) +
                                pciSwitch("0000:00:02.0", 0x10, 0x1f, gpu("0000:11:00.0"))) +
                     hostBridge(0x40, 0x5f, pciSwitch("0000:40:01.0", 0x41, 0x4f, nic("0000:42:00.0")))) +
      package(1, hostBridge(0x80, 0xbf,
                            pciSwitch("0000:80:01.0", 0x81, 0x8f, gpu("0000:82:00.0") + nic("0000:83:00.0")) +
                                pciSwitch("0000:80:02.0", 0x90, 0x9f, gpu("0000:91:00.0")))));
}

TEST(IbverbsNicTest, AffinityLevels) {
  Topology t(dgxLike());
  EXPECT_EQ(nicAffinity(t.get(), "0000:02:00.0", "0000:04:00.0"), NicAffinity::kSamePciSwitch);
  EXPECT_EQ(nicAffinity(t.get(), "0000:11:00.0", "0000:04:00.0"), NicAffinity::kSameHostBridge);
  EXPECT_EQ(nicAffinity(t.get(), "0000:11:00.0", "0000:42:00.0"), NicAffinity::kSameNumaNode);
  EXPECT_EQ(nicAffinity(t.get(), "0000:02:00.0", "0000:83:00.0"), NicAffinity::kOther);
  EXPECT_EQ(nicAffinity(t.get(), "0000:02:00.0", "0000:ee:00.0"), NicAffinity::kUnknown);
  EXPECT_EQ(nicAffinity(t.get(), "not a bus id", "0000:04:00.0"), NicAffinity::kUnknown);
  // CUDA writes the domain with 8 digits and upper case.
  EXPECT_EQ(nicAffinity(t.get(), "00000000:82:00.0", "0000:83:00.0"), NicAffinity::kSamePciSwitch);
}

TEST(IbverbsNicTest, EachGpuGetsItsNearestNic) {
  Topology t(dgxLike());
  const std::vector<std::string> nics = {"0000:04:00.0", "0000:42:00.0", "0000:83:00.0"};
  auto c =
      assignNics(t.get(), {"0000:02:00.0", "0000:03:00.0", "0000:11:00.0", "00000000:82:00.0", "0000:91:00.0"}, nics);
  ASSERT_EQ(c.size(), 5u);
  EXPECT_EQ(c[0].nic, 0u);  // same switch
  EXPECT_EQ(c[0].affinity, NicAffinity::kSamePciSwitch);
  EXPECT_EQ(c[1].nic, 0u);
  EXPECT_EQ(c[2].nic, 0u);  // same host bridge beats NIC 1 on the same NUMA node
  EXPECT_EQ(c[2].affinity, NicAffinity::kSameHostBridge);
  EXPECT_EQ(c[3].nic, 2u);
  EXPECT_EQ(c[4].nic, 2u);
  EXPECT_EQ(c[4].affinity, NicAffinity::kSameHostBridge);
}

TEST(IbverbsNicTest, NumaNodeBeatsAnotherPackageAndTiesSpread) {
  // Two GPUs on package 0 with no NIC on their host bridge; two NICs on package 0's second host bridge and one on
  // package 1.
  Topology t(machine(package(0, hostBridge(0x00, 0x1f, gpu("0000:01:00.0") + gpu("0000:02:00.0")) +
                                    hostBridge(0x20, 0x3f, nic("0000:21:00.0") + nic("0000:22:00.0"))) +
                     package(1, hostBridge(0x80, 0x9f, nic("0000:81:00.0")))));
  auto c = assignNics(t.get(), {"0000:01:00.0", "0000:02:00.0"}, {"0000:81:00.0", "0000:21:00.0", "0000:22:00.0"});
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0].affinity, NicAffinity::kSameNumaNode);
  EXPECT_EQ(c[1].affinity, NicAffinity::kSameNumaNode);
  EXPECT_EQ(c[0].nic, 1u);  // nearest tie: lowest index first
  EXPECT_EQ(c[1].nic, 2u);  // then the least loaded
}

TEST(IbverbsNicTest, UnknownNicsStillYieldAChoice) {
  Topology t(dgxLike());
  auto c = assignNics(t.get(), {"0000:02:00.0"}, {"0000:ee:00.0", "0000:ef:00.0"});
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].nic, 0u);
  EXPECT_EQ(c[0].affinity, NicAffinity::kUnknown);
}

TEST(IbverbsNicTest, ParsesPciAddresses) {
  PciAddress a;
  ASSERT_TRUE(parsePciAddress("0001:3b:1f.7", &a));
  EXPECT_EQ(a.domain, 1u);
  EXPECT_EQ(a.bus, 0x3bu);
  EXPECT_EQ(a.device, 0x1fu);
  EXPECT_EQ(a.function, 7u);
  ASSERT_TRUE(parsePciAddress("3B:00.0", &a));
  EXPECT_EQ(a.domain, 0u);
  EXPECT_EQ(a.bus, 0x3bu);
  for (const char* bad :
       {"", "3b:00", "3b:20.0", "3b:00.8", "zz:00.0", "0000:100:00.0", ":00.0", "123456789:00:00.0"}) {
    EXPECT_FALSE(parsePciAddress(bad, &a)) << bad;
  }
}

}  // namespace
}  // namespace weft::ibverbs
