// Uses the installed weft: its version and platform header, its errors and its GPU runtime layer.
// Prints one line per fact; the test that builds this compares them with what the build tree knows.
#include <dlfcn.h>

#include <cstdio>
#include <string>
#include <weft/build_config.hpp>
#include <weft/device.hpp>
#include <weft/error.hpp>
#include <weft/gpu.hpp>

namespace {

const char* platformName() {
  switch (weft::kGpuPlatform) {
    case weft::GpuPlatform::kCuda: return "cuda";
    case weft::GpuPlatform::kHip: return "hip";
    case weft::GpuPlatform::kNone: return "none";
  }
  return "?";
}

// The file libweft was loaded from, so the test can tell the installed copy from the build tree's.
std::string libweftPath() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&weft::gpuDeviceCount), &info) == 0 || info.dli_fname == nullptr) return "?";
  return info.dli_fname;
}

}  // namespace

int main() {
  std::printf("version %s\n", WEFT_VERSION_STRING);
  std::printf("platform %s\n", platformName());
  std::printf("gpus %d\n", weft::gpuDeviceCount());
  std::printf("libweft %s\n", libweftPath().c_str());
#ifdef WEFT_OUTSIDE_PLUGIN_DIR
  std::printf("plugindir %s\n", WEFT_OUTSIDE_PLUGIN_DIR);
#endif
  uint64_t counter = 41;
  weft::atomicFetchAdd<weft::MemoryOrder::kRelaxed>(&counter, uint64_t{1});
  std::printf("atomic %llu\n", static_cast<unsigned long long>(counter));
  try {
    throw weft::Error(weft::ErrorCode::kTimeout, "rank 3 did not answer");
  } catch (const weft::Error& e) {
    std::printf("error %s\n", e.what());
    return e.code() == weft::ErrorCode::kTimeout ? 0 : 1;
  }
}
