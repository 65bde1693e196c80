// Device memory for GPU tests: zeroed, freed with the object, read back as a vector. GPU builds only.
#pragma once

#include <cstddef>
#include <vector>
#include <weft/gpu.hpp>

#if WEFT_BUILD_GPU_CUDA || WEFT_BUILD_GPU_HIP

namespace weft::test {

template <class T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t count) : count_(count) {
    checkGpu(hipMalloc(reinterpret_cast<void**>(&ptr_), count * sizeof(T)), "hipMalloc");
    checkGpu(hipMemset(ptr_, 0, count * sizeof(T)), "hipMemset");
    checkGpu(hipDeviceSynchronize(), "waiting for the fill (later work runs on non-blocking streams)");
  }
  ~DeviceArray() { (void)hipFree(ptr_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  T* get() const { return ptr_; }
  std::vector<T> toHost() const {
    std::vector<T> out(count_);
    checkGpu(hipMemcpy(out.data(), ptr_, count_ * sizeof(T), hipMemcpyDeviceToHost), "hipMemcpy");
    return out;
  }

 private:
  T* ptr_ = nullptr;
  size_t count_;
};

}  // namespace weft::test

#endif
