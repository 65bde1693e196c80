// The system NCCL (or RCCL), loaded with dlopen at run time for `weft-bench collectives --vs nccl`: weft-bench
// neither links it nor needs it installed. Only the few functions the benchmark calls are resolved, through
// prototypes declared here to match nccl.h's ABI (2.19 and later).
#pragma once

#include <cstdint>
#include <string>
#include <weft/gpu.hpp>

namespace weft::bench {

/// nccl.h's ncclUniqueId: 128 opaque bytes made by one rank and sent to the others.
struct NcclUniqueId {
  char internal[128];
};

/// nccl.h's ncclComm_t.
using NcclComm = struct NcclCommOpaque*;

/// The resolved functions of a loaded libnccl.so.2 (ncclResult_t, ncclDataType_t and ncclRedOp_t are ints, whose
/// values equal weft's DataType and ReduceOp enumerators: int8 0 ... f8e5m2 11; sum 0, prod 1, max 2, min 3, avg 4).
struct NcclApi {
  int (*getVersion)(int*) = nullptr;
  int (*getUniqueId)(NcclUniqueId*) = nullptr;
  int (*commInitRank)(NcclComm*, int, NcclUniqueId, int) = nullptr;
  int (*commDestroy)(NcclComm) = nullptr;
  const char* (*getErrorString)(int) = nullptr;
  int (*allReduce)(const void*, void*, size_t, int, int, NcclComm, hipStream_t) = nullptr;
  int (*allGather)(const void*, void*, size_t, int, NcclComm, hipStream_t) = nullptr;
  int (*reduceScatter)(const void*, void*, size_t, int, int, NcclComm, hipStream_t) = nullptr;
  int (*broadcast)(const void*, void*, size_t, int, int, NcclComm, hipStream_t) = nullptr;
  int (*reduce)(const void*, void*, size_t, int, int, int, NcclComm, hipStream_t) = nullptr;
  int (*send)(const void*, size_t, int, int, NcclComm, hipStream_t) = nullptr;
  int (*recv)(void*, size_t, int, int, NcclComm, hipStream_t) = nullptr;
  int (*groupStart)() = nullptr;
  int (*groupEnd)() = nullptr;
};

/// A dlopen'ed NCCL; closes the library on destruction.
class NcclLibrary {
 public:
  /// Loads `path` (e.g. "libnccl.so.2") and resolves every NcclApi function. On failure loaded() is false and
  /// error() says what was missing (dlerror text); nothing throws.
  explicit NcclLibrary(const std::string& path);
  ~NcclLibrary();
  NcclLibrary(const NcclLibrary&) = delete;
  NcclLibrary& operator=(const NcclLibrary&) = delete;

  bool loaded() const { return handle_ != nullptr; }
  const std::string& error() const { return error_; }
  const NcclApi& api() const { return api_; }
  /// "2.28.3" from ncclGetVersion, or "unknown".
  std::string version() const;
  /// Throws Error(kGpuError) naming `what` and NCCL's error string when `result` is not ncclSuccess (0).
  void check(int result, const char* what) const;

 private:
  void* handle_ = nullptr;
  std::string error_;
  NcclApi api_;
};

}  // namespace weft::bench
