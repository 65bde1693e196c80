// The ABI facts of NVIDIA's nccl.h (compiled with the CUDA toolkit's include directory), for nccl_abi_test.
#include <nccl.h>

#include <cstddef>
#include <map>
#include <string>
#include <typeinfo>

#include "abi_text.hpp"

std::map<std::string, std::string> nvidiaNcclAbiFacts() {
  std::map<std::string, std::string> facts;
#define WEFT_NCCL_ABI_FACT(name, value) facts[name] = weftAbiText(value);
#include "abi_facts.inc"
#undef WEFT_NCCL_ABI_FACT
  return facts;
}
