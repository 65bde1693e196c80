// fp16 and bf16 conversions on the GPU give the bits the host's give (the reference the collective tests compare
// against): every fp16/bf16 value decoded, 2^25 fp32 patterns encoded. The device fp16 path uses the GPU's
// conversion instructions, the host one the software encoder; NaNs are compared as NaN on decode and bit for bit
// on encode (both give the canonical quiet NaN).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>
#include <weft/gpu.hpp>
#include <weft/reduce_device.hpp>

#include "device_array.hpp"
#include "small_float_kernels.hpp"

namespace weft::test {
namespace {

#if WEFT_BUILD_GPU_CUDA || WEFT_BUILD_GPU_HIP

template <class Small>
void expectSameConversions(const char* name, const std::vector<uint32_t>& decoded,
                           const std::vector<uint16_t>& encoded) {
  uint64_t wrong = 0;
  for (uint32_t v = 0; v < 65536; ++v) {
    const float host = Small{static_cast<uint16_t>(v)}.toFloat();
    const float gpu = detail::bitsToFloat(decoded[v]);
    const bool same = std::isnan(host) ? std::isnan(gpu) : detail::floatToBits(host) == decoded[v];
    if (!same && wrong++ < 5) ADD_FAILURE() << name << " decode of 0x" << std::hex << v << ": gpu " << decoded[v];
  }
  for (uint64_t i = 0; i < kFloatPatterns; ++i) {
    const uint16_t host = Small::fromFloat(detail::bitsToFloat(floatPattern(i))).bits;
    if (host != encoded[i] && wrong++ < 10) {
      ADD_FAILURE() << name << " encode of fp32 0x" << std::hex << floatPattern(i) << ": host 0x" << host << ", gpu 0x"
                    << encoded[i];
    }
  }
  EXPECT_EQ(wrong, 0u) << name;
}

TEST(SmallFloatGpu, ConversionsMatchTheHostBitForBit) {
  if (gpuDeviceCount() == 0) GTEST_SKIP() << "no GPU on this machine";
  DeviceArray<uint32_t> decoded16(65536), decodedBf16(65536);
  DeviceArray<uint16_t> encoded16(kFloatPatterns), encodedBf16(kFloatPatterns);
  launchSmallFloatConversions(decoded16.get(), encoded16.get(), decodedBf16.get(), encodedBf16.get());
  expectSameConversions<Float16>("fp16", decoded16.toHost(), encoded16.toHost());
  expectSameConversions<Bfloat16>("bf16", decodedBf16.toHost(), encodedBf16.toHost());
}

#else

TEST(SmallFloatGpu, ConversionsNeedAGpuBuild) {
  GTEST_SKIP() << "WEFT_GPU=none build: the host conversions are checked by unit_collective_types_test";
}

#endif

}  // namespace
}  // namespace weft::test
