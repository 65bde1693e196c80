// Pieces of libweft_nccl that do not need the collective engine: NCCL <-> weft type mapping, result codes, the
// [nccl] settings, and the loader of the fallback NCCL/RCCL. Unit-tested on their own (test/unit/nccl_*_test.cc).
#pragma once

#include <weft/nccl.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <weft/collectives.hpp>
#include <weft/config.hpp>
#include <weft/error.hpp>

namespace weft::detail {

/// The operations of the NCCL API as [nccl] force_fallback names them.
enum class NcclOp {
  kAllReduce,
  kAllGather,
  kReduceScatter,
  kBroadcast,
  kReduce,
  kAllToAll,
  kGather,
  kScatter,
  kSendRecv
};
/// Number of NcclOp values.
inline constexpr int kNcclOpCount = 9;
/// "allreduce", "allgather", ... (the names of ncclFallbackOperations()).
const char* ncclOpName(NcclOp op);

/// weft's type for an NCCL type; nullopt for a value outside ncclDataType_t.
std::optional<DataType> toDataType(ncclDataType_t type);
/// weft's reduction for a built-in NCCL op; nullopt for ncclNumOps and above (PreMulSum handles, garbage).
std::optional<ReduceOp> toReduceOp(ncclRedOp_t op);
/// The NCCL result for a weft error code: kInvalidArgument -> ncclInvalidArgument,
/// kInvalidUsage/kNotSupported/kConfigError/kPluginError -> ncclInvalidUsage,
/// kTimeout/kRemoteError/kProtocolError/kTransportError -> ncclRemoteError, kSystemError -> ncclSystemError, kGpuError
/// -> ncclUnhandledCudaError, the rest -> ncclInternalError.
ncclResult_t toResult(ErrorCode code);
/// NCCL's text for a result code ("unhandled cuda error", ...), "unknown result code" outside the enum.
const char* resultString(ncclResult_t result);

/// What libweft_nccl reads from the [nccl] section of the config (and its environment overrides).
struct NcclSettings {
  std::string fallbackLibrary;  ///< empty = no fallback
  uint32_t forcedMask = 0;      ///< bit (1 << NcclOp) set = always sent to the fallback

  /// From config.ncclFallbackLibrary / ncclForceFallback ("all" sets every bit). Throws Error(kConfigError) for an
  /// unknown operation name.
  static NcclSettings fromConfig(const Config& config);
  /// Whether `op` must go to the fallback library.
  bool forced(NcclOp op) const { return (forcedMask >> static_cast<int>(op)) & 1u; }
};

/// The entry points of a real NCCL/RCCL, resolved with dlsym. A null member means the library lacks that function
/// (the optional ones: Register, windows, AlltoAll, Gather, Scatter, CommInitRankConfig/Split on old versions).
struct FallbackApi {
  ncclResult_t (*getVersion)(int*) = nullptr;
  ncclResult_t (*getUniqueId)(ncclUniqueId*) = nullptr;
  ncclResult_t (*commInitRank)(ncclComm_t*, int, ncclUniqueId, int) = nullptr;
  ncclResult_t (*commInitRankConfig)(ncclComm_t*, int, ncclUniqueId, int, ncclConfig_t*) = nullptr;
  ncclResult_t (*commFinalize)(ncclComm_t) = nullptr;
  ncclResult_t (*commDestroy)(ncclComm_t) = nullptr;
  ncclResult_t (*commAbort)(ncclComm_t) = nullptr;
  ncclResult_t (*commGetAsyncError)(ncclComm_t, ncclResult_t*) = nullptr;
  const char* (*getErrorString)(ncclResult_t) = nullptr;
  const char* (*getLastError)(ncclComm_t) = nullptr;
  ncclResult_t (*commRegister)(ncclComm_t, void*, size_t, void**) = nullptr;
  ncclResult_t (*commDeregister)(ncclComm_t, void*) = nullptr;
  ncclResult_t (*commWindowRegister)(ncclComm_t, void*, size_t, ncclWindow_t*, int) = nullptr;
  ncclResult_t (*commWindowDeregister)(ncclComm_t, ncclWindow_t) = nullptr;
  ncclResult_t (*redOpCreatePreMulSum)(ncclRedOp_t*, void*, ncclDataType_t, ncclScalarResidence_t,
                                       ncclComm_t) = nullptr;
  ncclResult_t (*redOpDestroy)(ncclRedOp_t, ncclComm_t) = nullptr;
  ncclResult_t (*allReduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                            WEFT_NCCL_STREAM) = nullptr;
  ncclResult_t (*broadcast)(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t, WEFT_NCCL_STREAM) = nullptr;
  ncclResult_t (*reduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, int, ncclComm_t,
                         WEFT_NCCL_STREAM) = nullptr;
  ncclResult_t (*allGather)(const void*, void*, size_t, ncclDataType_t, ncclComm_t, WEFT_NCCL_STREAM) = nullptr;
  ncclResult_t (*reduceScatter)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                                WEFT_NCCL_STREAM) = nullptr;
  ncclResult_t (*allToAll)(const void*, void*, size_t, ncclDataType_t, ncclComm_t, WEFT_NCCL_STREAM) = nullptr;
  ncclResult_t (*gather)(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t, WEFT_NCCL_STREAM) = nullptr;
  ncclResult_t (*scatter)(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t, WEFT_NCCL_STREAM) = nullptr;
  ncclResult_t (*send)(const void*, size_t, ncclDataType_t, int, ncclComm_t, WEFT_NCCL_STREAM) = nullptr;
  ncclResult_t (*recv)(void*, size_t, ncclDataType_t, int, ncclComm_t, WEFT_NCCL_STREAM) = nullptr;
  ncclResult_t (*groupStart)() = nullptr;
  ncclResult_t (*groupEnd)() = nullptr;
};

/// A real NCCL/RCCL opened with dlopen(RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND), so its own calls between its entry
/// points stay inside it even when libweft_nccl is preloaded (sanitizer builds drop RTLD_DEEPBIND, which the
/// sanitizer runtimes refuse). Kept open for the life of the process: NCCL does not support being unloaded.
class FallbackLibrary {
 public:
  /// The library at `path` (opened once per path per process). Throws Error(kPluginError) naming the path and
  /// dlerror() when it does not load, when it is libweft_nccl itself (it exports weftNcclMarker, or its
  /// ncclGetVersion is ours), or when a required entry point (GetVersion, GetUniqueId, CommInitRank, CommDestroy,
  /// CommAbort, GetErrorString, AllReduce, Broadcast, Reduce, AllGather, ReduceScatter, Send, Recv, GroupStart,
  /// GroupEnd) is missing.
  static std::shared_ptr<FallbackLibrary> open(const std::string& path);

  /// The resolved entry points.
  const FallbackApi& api() const { return api_; }
  /// The path it was opened from.
  const std::string& path() const { return path_; }
  /// Its ncclGetVersion().
  int version() const { return version_; }

  FallbackLibrary(const FallbackLibrary&) = delete;
  FallbackLibrary& operator=(const FallbackLibrary&) = delete;

 private:
  FallbackLibrary() = default;
  FallbackApi api_;
  std::string path_;
  int version_ = 0;
};

}  // namespace weft::detail

extern "C" {
/// Present only in libweft_nccl: FallbackLibrary refuses a library that exports it (loading ourselves as the
/// fallback would recurse forever).
extern const int weftNcclMarker;
}
