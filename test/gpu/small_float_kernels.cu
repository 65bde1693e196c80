// Kernels of small_float_test.
#include "small_float_kernels.hpp"

#include <weft/gpu.hpp>
#include <weft/reduce_device.hpp>

#if defined(WEFT_COMPILER_CUDA) || defined(WEFT_COMPILER_HIP)

namespace weft::test {
namespace {

WEFT_GLOBAL void conversionsKernel(uint32_t* decoded16, uint16_t* encoded16, uint32_t* decodedBf16,
                                   uint16_t* encodedBf16) {
  const uint64_t stride = uint64_t{gridDim.x} * blockDim.x;
  for (uint64_t i = uint64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < kFloatPatterns; i += stride) {
    if (i < 65536) {
      decoded16[i] = detail::floatToBits(Float16{static_cast<uint16_t>(i)}.toFloat());
      decodedBf16[i] = detail::floatToBits(Bfloat16{static_cast<uint16_t>(i)}.toFloat());
    }
    const float f = detail::bitsToFloat(floatPattern(i));
    encoded16[i] = Float16::fromFloat(f).bits;
    encodedBf16[i] = Bfloat16::fromFloat(f).bits;
  }
}

}  // namespace

void launchSmallFloatConversions(uint32_t* decoded16, uint16_t* encoded16, uint32_t* decodedBf16,
                                 uint16_t* encodedBf16) {
  conversionsKernel<<<1024, 256>>>(decoded16, encoded16, decodedBf16, encodedBf16);
  checkGpu(hipGetLastError(), "conversionsKernel");
  checkGpu(hipDeviceSynchronize(), "conversionsKernel");
}

}  // namespace weft::test

#endif
