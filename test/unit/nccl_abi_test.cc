// weft's nccl.h against NVIDIA's: sizes, ncclConfig_t offsets, enum values, NCCL_* constants, initializers and the
// type of every function (so a program built against either header runs against either library).
#include <gtest/gtest.h>
#include <weft/nccl.h>

#include <cstddef>
#include <map>
#include <string>
#include <typeinfo>

#include "abi_text.hpp"

#ifdef WEFT_HAVE_NVIDIA_NCCL_H
std::map<std::string, std::string> nvidiaNcclAbiFacts();
#endif

namespace {

std::map<std::string, std::string> weftFacts() {
  std::map<std::string, std::string> facts;
#define WEFT_NCCL_ABI_FACT(name, value) facts[name] = weftAbiText(value);
#include "abi_facts.inc"
#undef WEFT_NCCL_ABI_FACT
  return facts;
}

TEST(NcclAbiTest, LayoutsThatPythonAndCCallersHardCode) {
  std::map<std::string, std::string> f = weftFacts();
  EXPECT_EQ(f["sizeof(ncclUniqueId)"], "128");
  EXPECT_EQ(f["sizeof(ncclConfig_t)"], "80");
  EXPECT_EQ(f["offsetof(ncclConfig_t, blocking)"], "16");
  EXPECT_EQ(f["offsetof(ncclConfig_t, netName)"], "32");
  EXPECT_EQ(f["ncclConfig_t initializer magic"], std::to_string(0xcafebeefu));
  EXPECT_EQ(f["NCCL_VERSION(2, 28, 9)"], "22809");
  EXPECT_EQ(f["NCCL_VERSION(2, 8, 4)"], "2804");
  EXPECT_EQ(f["ncclMaxRedOp"], "2147483647");
  EXPECT_EQ(f["ncclFloat8e5m2"], "11");
  EXPECT_EQ(f.size(), 165u) << "abi_facts.inc changed: update this count";
}

TEST(NcclAbiTest, EveryFactMatchesNvidiasHeader) {
#ifndef WEFT_HAVE_NVIDIA_NCCL_H
  GTEST_SKIP() << "NVIDIA's nccl.h was not found at configure time";
#else
  std::map<std::string, std::string> ours = weftFacts();
  std::map<std::string, std::string> theirs = nvidiaNcclAbiFacts();
  ASSERT_EQ(ours.size(), theirs.size());
  for (const auto& [name, value] : theirs) EXPECT_EQ(ours[name], value) << name;
  EXPECT_NE(theirs["type of ncclAllReduce"].find("CUstream_st"), std::string::npos) << theirs["type of ncclAllReduce"];
#endif
}

}  // namespace
