// GPU producer of the FIFO benchmark. Not globbed into weft-bench (only *.cc are): bench/CMakeLists.txt adds it with
// weft_gpu_sources() and defines WEFT_FIFO_BENCH_GPU on GPU builds.
#include <weft/gpu.hpp>

#include "fifo_bench_kernels.hpp"

#if defined(WEFT_COMPILER_CUDA) || defined(WEFT_COMPILER_HIP)
namespace weft::bench {
namespace {
WEFT_GLOBAL void fifoBenchKernel(FifoDeviceHandle fifo, RawRing raw, int roundTrips, int rateTriggers,
                                 FifoBenchTimes* out) {
  fifoBenchProducer(fifo, raw, roundTrips, rateTriggers, out);
}
}  // namespace

void runFifoBenchProducerOnGpu(FifoDeviceHandle fifo, RawRing raw, int roundTrips, int rateTriggers,
                               FifoBenchTimes* out) {
  fifoBenchKernel<<<1, 1>>>(fifo, raw, roundTrips, rateTriggers, out);
  checkGpu(hipGetLastError(), "launching the fifo benchmark kernel");
  checkGpu(hipDeviceSynchronize(), "the fifo benchmark kernel");
}
}  // namespace weft::bench
#endif
