// Launchers of small_float_test's kernels (kept out of the GoogleTest translation unit, see
// device_atomics_kernels.hpp).
#pragma once

#include <cstdint>
#include <weft/platform.hpp>

namespace weft::test {

/// Floats whose bits small_float_test converts: i << 8 for the first 2^24 (every sign, exponent and top mantissa
/// bits, ties of every small format included), then (i << 8) | (i * 0x9d & 0xff) (the bits below them).
inline constexpr uint64_t kFloatPatterns = uint64_t{1} << 25;
WEFT_HOST_DEVICE_INLINE uint32_t floatPattern(uint64_t i) {
  const uint32_t hi = static_cast<uint32_t>(i & 0xffffffu) << 8;
  return i < (uint64_t{1} << 24) ? hi : hi | (static_cast<uint32_t>(i * 0x9d) & 0xffu);
}

/// On the GPU: decoded[v] = the fp32 bits of Float16{v}.toFloat() for every v < 65536, and encoded[i] =
/// Float16::fromFloat(bits floatPattern(i)).bits for every i < kFloatPatterns; the same for Bfloat16. Device
/// buffers of 65536 uint32 and kFloatPatterns uint16 each.
void launchSmallFloatConversions(uint32_t* decoded16, uint16_t* encoded16, uint32_t* decodedBf16,
                                 uint16_t* encodedBf16);

}  // namespace weft::test
