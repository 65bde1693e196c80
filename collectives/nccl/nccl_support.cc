#include "nccl_support.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <map>
#include <mutex>

#include "logging.hpp"

extern "C" {
__attribute__((visibility("default"))) extern const int weftNcclMarker = 1;
}

namespace weft::detail {

namespace {

constexpr const char* kOpNames[kNcclOpCount] = {"allreduce", "allgather", "reducescatter", "broadcast", "reduce",
                                                "alltoall",  "gather",    "scatter",       "sendrecv"};

// Sanitizer runtimes abort a process that dlopens with RTLD_DEEPBIND, so those builds bind normally.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif

template <class Fn>
void resolve(void* handle, const char* name, Fn& out) {
  out = reinterpret_cast<Fn>(dlsym(handle, name));
}

// The handle of the object this code is linked into (libweft_nccl, or a test executable).
void* selfHandle() {
  Dl_info info{};
  if (dladdr(&weftNcclMarker, &info) == 0 || info.dli_fname == nullptr) return nullptr;
  void* self = dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD);
  if (self != nullptr) dlclose(self);  // only the pointer is compared; NOLOAD took a reference
  return self;
}

}  // namespace

const char* ncclOpName(NcclOp op) {
  int i = static_cast<int>(op);
  return i >= 0 && i < kNcclOpCount ? kOpNames[i] : "unknown";
}

std::optional<DataType> toDataType(ncclDataType_t type) {
  switch (type) {
    case ncclInt8: return DataType::kInt8;
    case ncclUint8: return DataType::kUint8;
    case ncclInt32: return DataType::kInt32;
    case ncclUint32: return DataType::kUint32;
    case ncclInt64: return DataType::kInt64;
    case ncclUint64: return DataType::kUint64;
    case ncclFloat16: return DataType::kFloat16;
    case ncclFloat32: return DataType::kFloat32;
    case ncclFloat64: return DataType::kFloat64;
    case ncclBfloat16: return DataType::kBfloat16;
    case ncclFloat8e4m3: return DataType::kFloat8E4M3;
    case ncclFloat8e5m2: return DataType::kFloat8E5M2;
    default: return std::nullopt;
  }
}

std::optional<ReduceOp> toReduceOp(ncclRedOp_t op) {
  switch (op) {
    case ncclSum: return ReduceOp::kSum;
    case ncclProd: return ReduceOp::kProd;
    case ncclMax: return ReduceOp::kMax;
    case ncclMin: return ReduceOp::kMin;
    case ncclAvg: return ReduceOp::kAvg;
    default: return std::nullopt;
  }
}

ncclResult_t toResult(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument: return ncclInvalidArgument;
    case ErrorCode::kInvalidUsage:
    case ErrorCode::kNotSupported:
    case ErrorCode::kConfigError:
    case ErrorCode::kPluginError: return ncclInvalidUsage;
    case ErrorCode::kTimeout:
    case ErrorCode::kRemoteError:
    case ErrorCode::kProtocolError:
    case ErrorCode::kTransportError: return ncclRemoteError;
    case ErrorCode::kSystemError: return ncclSystemError;
    case ErrorCode::kGpuError: return ncclUnhandledCudaError;
    default: return ncclInternalError;
  }
}

const char* resultString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with WEFT_LOG_LEVEL=info for details)";
    case ncclSystemError: return "unhandled system error (run with WEFT_LOG_LEVEL=info for details)";
    case ncclInternalError: return "internal error - please report this issue to the weft developers";
    case ncclInvalidArgument: return "invalid argument (run with WEFT_LOG_LEVEL=warn for details)";
    case ncclInvalidUsage: return "invalid usage (run with WEFT_LOG_LEVEL=warn for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}

NcclSettings NcclSettings::fromConfig(const Config& config) {
  NcclSettings s;
  s.fallbackLibrary = config.ncclFallbackLibrary;
  for (const std::string& name : config.ncclForceFallback) {
    if (name == "all") {
      s.forcedMask = (1u << kNcclOpCount) - 1;
      continue;
    }
    const auto* it = std::find_if(std::begin(kOpNames), std::end(kOpNames), [&](const char* n) { return name == n; });
    if (it == std::end(kOpNames)) {
      throw Error(ErrorCode::kConfigError, "nccl force_fallback: unknown operation '" + name + "'");
    }
    s.forcedMask |= 1u << (it - std::begin(kOpNames));
  }
  return s;
}

std::shared_ptr<FallbackLibrary> FallbackLibrary::open(const std::string& path) {
  static std::mutex mutex;
  static std::map<std::string, std::shared_ptr<FallbackLibrary>> opened;
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = opened.find(path); it != opened.end()) return it->second;

  const int flags = RTLD_NOW | RTLD_LOCAL | (kSanitized ? 0 : RTLD_DEEPBIND);
  void* handle = dlopen(path.c_str(), flags);
  if (handle == nullptr) {
    const char* why = dlerror();
    throw Error(ErrorCode::kPluginError,
                "nccl fallback library '" + path + "' does not load: " + (why != nullptr ? why : "unknown error"));
  }
  // Deliberately never dlclose'd (NCCL keeps threads and atexit handlers): the handle lives as long as the process.
  std::shared_ptr<FallbackLibrary> lib(new FallbackLibrary());
  lib->path_ = path;
  FallbackApi& a = lib->api_;
  resolve(handle, "ncclGetVersion", a.getVersion);
  if (dlsym(handle, "weftNcclMarker") != nullptr || handle == selfHandle()) {
    throw Error(ErrorCode::kPluginError, "nccl fallback library '" + path +
                                             "' is libweft_nccl itself; point WEFT_NCCL_FALLBACK / [nccl] "
                                             "fallback_library at NVIDIA's NCCL or AMD's RCCL");
  }
  resolve(handle, "ncclGetUniqueId", a.getUniqueId);
  resolve(handle, "ncclCommInitRank", a.commInitRank);
  resolve(handle, "ncclCommInitRankConfig", a.commInitRankConfig);
  resolve(handle, "ncclCommFinalize", a.commFinalize);
  resolve(handle, "ncclCommDestroy", a.commDestroy);
  resolve(handle, "ncclCommAbort", a.commAbort);
  resolve(handle, "ncclCommGetAsyncError", a.commGetAsyncError);
  resolve(handle, "ncclGetErrorString", a.getErrorString);
  resolve(handle, "ncclGetLastError", a.getLastError);
  resolve(handle, "ncclCommRegister", a.commRegister);
  resolve(handle, "ncclCommDeregister", a.commDeregister);
  resolve(handle, "ncclCommWindowRegister", a.commWindowRegister);
  resolve(handle, "ncclCommWindowDeregister", a.commWindowDeregister);
  resolve(handle, "ncclRedOpCreatePreMulSum", a.redOpCreatePreMulSum);
  resolve(handle, "ncclRedOpDestroy", a.redOpDestroy);
  resolve(handle, "ncclAllReduce", a.allReduce);
  resolve(handle, "ncclBroadcast", a.broadcast);
  resolve(handle, "ncclReduce", a.reduce);
  resolve(handle, "ncclAllGather", a.allGather);
  resolve(handle, "ncclReduceScatter", a.reduceScatter);
  resolve(handle, "ncclAlltoAll", a.allToAll);
  resolve(handle, "ncclGather", a.gather);
  resolve(handle, "ncclScatter", a.scatter);
  resolve(handle, "ncclSend", a.send);
  resolve(handle, "ncclRecv", a.recv);
  resolve(handle, "ncclGroupStart", a.groupStart);
  resolve(handle, "ncclGroupEnd", a.groupEnd);
  const std::pair<const char*, const void*> required[] = {
      {"ncclGetVersion", reinterpret_cast<const void*>(a.getVersion)},
      {"ncclGetUniqueId", reinterpret_cast<const void*>(a.getUniqueId)},
      {"ncclCommInitRank", reinterpret_cast<const void*>(a.commInitRank)},
      {"ncclCommDestroy", reinterpret_cast<const void*>(a.commDestroy)},
      {"ncclCommAbort", reinterpret_cast<const void*>(a.commAbort)},
      {"ncclGetErrorString", reinterpret_cast<const void*>(a.getErrorString)},
      {"ncclAllReduce", reinterpret_cast<const void*>(a.allReduce)},
      {"ncclBroadcast", reinterpret_cast<const void*>(a.broadcast)},
      {"ncclReduce", reinterpret_cast<const void*>(a.reduce)},
      {"ncclAllGather", reinterpret_cast<const void*>(a.allGather)},
      {"ncclReduceScatter", reinterpret_cast<const void*>(a.reduceScatter)},
      {"ncclSend", reinterpret_cast<const void*>(a.send)},
      {"ncclRecv", reinterpret_cast<const void*>(a.recv)},
      {"ncclGroupStart", reinterpret_cast<const void*>(a.groupStart)},
      {"ncclGroupEnd", reinterpret_cast<const void*>(a.groupEnd)},
  };
  for (const auto& [name, fn] : required) {
    if (fn == nullptr) {
      throw Error(ErrorCode::kPluginError, "nccl fallback library '" + path + "' lacks " + name);
    }
  }
  if (a.getVersion(&lib->version_) != ncclSuccess) {
    throw Error(ErrorCode::kPluginError, "nccl fallback library '" + path + "': ncclGetVersion failed");
  }
  logInfo(LogSubsys::kColl, "nccl fallback library {} loaded (version {}{})", path, lib->version_,
          kSanitized ? ", without RTLD_DEEPBIND in this sanitizer build" : "");
  opened.emplace(path, lib);
  return lib;
}

}  // namespace weft::detail
