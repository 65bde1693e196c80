#include <mutex>
#include <weft/error.hpp>
#include <weft/gpu.hpp>

#include "logging.hpp"

namespace weft {

int gpuDeviceCount() {
  if constexpr (!kHasGpuRuntime) {
    return 0;
  } else {
    static int count = [] {
      int n = 0;
      hipError_t e = hipGetDeviceCount(&n);
      if (e != hipSuccess) {
        // Said once: a GPU build on a login node or CI machine keeps working for everything host-side.
        logWarn(LogSubsys::kInit, "no usable GPU ({}); running host-only", hipGetErrorString(e));
        (void)hipGetLastError();
        return 0;
      }
      return n;
    }();
    return count;
  }
}

void checkGpu(hipError_t e, const char* what) {
  if (e != hipSuccess) {
    throw Error(ErrorCode::kGpuError, std::string(what) + ": " + hipGetErrorString(e));
  }
}

}  // namespace weft
