#include "nccl_loader.hpp"

#include <dlfcn.h>

#include <weft/error.hpp>

namespace weft::bench {

namespace {

template <class Fn>
bool resolve(void* handle, const char* name, Fn& out, std::string& error) {
  void* sym = dlsym(handle, name);
  if (sym == nullptr) {
    if (error.empty()) error = std::string("symbol ") + name + " not found";
    return false;
  }
  out = reinterpret_cast<Fn>(sym);
  return true;
}

}  // namespace

NcclLibrary::NcclLibrary(const std::string& path) {
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    error_ = why != nullptr ? why : ("cannot load " + path);
    return;
  }
  bool ok = true;
  ok &= resolve(handle, "ncclGetVersion", api_.getVersion, error_);
  ok &= resolve(handle, "ncclGetUniqueId", api_.getUniqueId, error_);
  ok &= resolve(handle, "ncclCommInitRank", api_.commInitRank, error_);
  ok &= resolve(handle, "ncclCommDestroy", api_.commDestroy, error_);
  ok &= resolve(handle, "ncclGetErrorString", api_.getErrorString, error_);
  ok &= resolve(handle, "ncclAllReduce", api_.allReduce, error_);
  ok &= resolve(handle, "ncclAllGather", api_.allGather, error_);
  ok &= resolve(handle, "ncclReduceScatter", api_.reduceScatter, error_);
  ok &= resolve(handle, "ncclBroadcast", api_.broadcast, error_);
  ok &= resolve(handle, "ncclReduce", api_.reduce, error_);
  ok &= resolve(handle, "ncclSend", api_.send, error_);
  ok &= resolve(handle, "ncclRecv", api_.recv, error_);
  ok &= resolve(handle, "ncclGroupStart", api_.groupStart, error_);
  ok &= resolve(handle, "ncclGroupEnd", api_.groupEnd, error_);
  if (!ok) {
    error_ = path + ": " + error_;
    dlclose(handle);
    return;
  }
  handle_ = handle;
}

NcclLibrary::~NcclLibrary() {
  if (handle_ != nullptr) dlclose(handle_);
}

std::string NcclLibrary::version() const {
  int v = 0;
  if (!loaded() || api_.getVersion(&v) != 0) return "unknown";
  // Since 2.9 the code is major * 10000 + minor * 100 + patch.
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
}

void NcclLibrary::check(int result, const char* what) const {
  if (result == 0) return;
  const char* text = api_.getErrorString != nullptr ? api_.getErrorString(result) : "unknown";
  throw Error(ErrorCode::kGpuError,
              std::string("nccl: ") + what + " failed: " + text + " (ncclResult_t " + std::to_string(result) + ")");
}

}  // namespace weft::bench
