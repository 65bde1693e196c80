// The GPU runtime calls the cuda_ipc transport makes, under one set of names for CUDA and HIP. A plugin includes
// only the plugin ABI and its vendor library, so this maps names itself (as include/weft/gpu.hpp does for core).
//
// CUDA: the runtime (shared libcudart, the one libweft uses) plus the driver's virtual memory calls (cuMem*) for
// allocations exported as file descriptors. The driver calls are resolved through cudaGetDriverEntryPointByVersion
// rather than linked: the plugin then loads on a machine without a driver (CI, login nodes) and reports no devices.
// HIP: every call is in libamdhip64.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#if WEFT_CUDA_IPC_HIP
#include <hip/hip_runtime.h>
#elif WEFT_CUDA_IPC_CUDA
#include <cuda.h>
#include <cuda_runtime.h>
#else
#error "build the cuda_ipc transport with WEFT_CUDA_IPC_CUDA=1 or WEFT_CUDA_IPC_HIP=1"
#endif

#include "cuda_ipc_failure.hpp"

namespace weft::cuda_ipc::rt {

#if WEFT_CUDA_IPC_HIP

inline constexpr const char* kPlatform = "hip";
using Error = hipError_t;
using Stream = hipStream_t;
using Event = hipEvent_t;
using IpcHandle = hipIpcMemHandle_t;
using VmmHandle = hipMemGenericAllocationHandle_t;
inline constexpr Error kSuccess = hipSuccess;
inline constexpr Error kNotReady = hipErrorNotReady;
/// Result of the virtual-memory and address-range calls (the driver API's on CUDA, the runtime's on HIP).
using DrvError = hipError_t;
inline constexpr DrvError kDrvSuccess = hipSuccess;

inline const char* errorString(Error e) { return hipGetErrorString(e); }
inline const char* drvErrorString(DrvError e) { return hipGetErrorString(e); }
inline Error deviceCount(int* n) { return hipGetDeviceCount(n); }
inline Error getDevice(int* d) { return hipGetDevice(d); }
inline Error setDevice(int d) { return hipSetDevice(d); }
inline Error busId(char* out, int len, int d) { return hipDeviceGetPCIBusId(out, len, d); }
inline Error ipcGetHandle(IpcHandle* h, void* p) { return hipIpcGetMemHandle(h, p); }
inline Error ipcOpen(void** p, const IpcHandle& h) { return hipIpcOpenMemHandle(p, h, hipIpcMemLazyEnablePeerAccess); }
inline Error ipcClose(void* p) { return hipIpcCloseMemHandle(p); }
inline Error copyAsync(void* d, const void* s, size_t n, Stream st) {
  return hipMemcpyAsync(d, s, n, hipMemcpyDefault, st);
}
inline Error streamCreate(Stream* s) { return hipStreamCreateWithFlags(s, hipStreamNonBlocking); }
inline Error streamDestroy(Stream s) { return hipStreamDestroy(s); }
inline Error eventCreate(Event* e) { return hipEventCreateWithFlags(e, hipEventDisableTiming); }
inline Error eventRecord(Event e, Stream s) { return hipEventRecord(e, s); }
inline Error eventQuery(Event e) { return hipEventQuery(e); }
inline Error eventDestroy(Event e) { return hipEventDestroy(e); }
/// Clears the thread's last error when it is `e` (an answer the plugin expected, such as "not ready" or "not a
/// virtual-memory allocation"), so the application's next hipGetLastError does not report it; other errors stay.
inline void forget(Error e) {
  if (e != hipSuccess && hipPeekAtLastError() == e) (void)hipGetLastError();
}

/// The device owning `p` when it is plain device memory (not host, managed or unregistered); false otherwise.
inline bool deviceOfPointer(const void* p, int* device, std::string* what) {
  hipPointerAttribute_t a{};
  hipError_t e = hipPointerGetAttributes(&a, p);
  if (e != hipSuccess) {
    (void)hipGetLastError();  // an unknown pointer is an answer here, not an error to leave behind
    *what = std::string("the runtime does not know the pointer (") + hipGetErrorString(e) + ")";
    return false;
  }
  if (a.memoryType != hipMemoryTypeDevice || a.isManaged) {
    *what = "it is not device memory (host, managed or unified memory)";
    return false;
  }
  *device = a.device;
  return true;
}

/// Base and size of the allocation holding `p`.
inline DrvError addressRange(const void* p, uint64_t* base, uint64_t* size) {
  hipDeviceptr_t b = nullptr;
  size_t s = 0;
  hipError_t e = hipMemGetAddressRange(&b, &s, const_cast<void*>(p));
  *base = reinterpret_cast<uint64_t>(b);
  *size = s;
  return e;
}

inline DrvError vmmRetain(VmmHandle* h, void* p) { return hipMemRetainAllocationHandle(h, p); }
inline DrvError vmmRelease(VmmHandle h) { return hipMemRelease(h); }
inline DrvError vmmAllowsPosixFd(VmmHandle h, bool* allows) {
  hipMemAllocationProp prop{};
  hipError_t e = hipMemGetAllocationPropertiesFromHandle(&prop, h);
  *allows = e == hipSuccess && (prop.requestedHandleType & hipMemHandleTypePosixFileDescriptor) != 0;
  return e;
}
inline DrvError vmmExportFd(int* fd, VmmHandle h) {
  return hipMemExportToShareableHandle(fd, h, hipMemHandleTypePosixFileDescriptor, 0);
}
inline DrvError vmmImportFd(VmmHandle* h, int fd) {
  return hipMemImportFromShareableHandle(h, reinterpret_cast<void*>(static_cast<intptr_t>(fd)),
                                         hipMemHandleTypePosixFileDescriptor);
}
inline DrvError vmmReserve(uint64_t* va, uint64_t size) {
  void* p = nullptr;
  hipError_t e = hipMemAddressReserve(&p, size, 0, nullptr, 0);
  *va = reinterpret_cast<uint64_t>(p);
  return e;
}
inline DrvError vmmFree(uint64_t va, uint64_t size) { return hipMemAddressFree(reinterpret_cast<void*>(va), size); }
inline DrvError vmmMap(uint64_t va, uint64_t size, VmmHandle h) {
  return hipMemMap(reinterpret_cast<void*>(va), size, 0, h, 0);
}
inline DrvError vmmUnmap(uint64_t va, uint64_t size) { return hipMemUnmap(reinterpret_cast<void*>(va), size); }
inline DrvError vmmAllowReadWrite(uint64_t va, uint64_t size, int device) {
  hipMemAccessDesc d{};
  d.location.type = hipMemLocationTypeDevice;
  d.location.id = device;
  d.flags = hipMemAccessFlagsProtReadWrite;
  return hipMemSetAccess(reinterpret_cast<void*>(va), size, &d, 1);
}
/// Whether the virtual memory calls are available (always, with HIP).
inline bool vmmAvailable(std::string* /*why*/) { return true; }

#else  // CUDA

inline constexpr const char* kPlatform = "cuda";
using Error = cudaError_t;
using Stream = cudaStream_t;
using Event = cudaEvent_t;
using IpcHandle = cudaIpcMemHandle_t;
using VmmHandle = CUmemGenericAllocationHandle;
inline constexpr Error kSuccess = cudaSuccess;
inline constexpr Error kNotReady = cudaErrorNotReady;
/// Result of the virtual-memory and address-range calls (the driver API's on CUDA, the runtime's on HIP).
using DrvError = CUresult;
inline constexpr DrvError kDrvSuccess = CUDA_SUCCESS;

inline const char* errorString(Error e) { return cudaGetErrorString(e); }
inline Error deviceCount(int* n) { return cudaGetDeviceCount(n); }
inline Error getDevice(int* d) { return cudaGetDevice(d); }
inline Error setDevice(int d) { return cudaSetDevice(d); }
inline Error busId(char* out, int len, int d) { return cudaDeviceGetPCIBusId(out, len, d); }
inline Error ipcGetHandle(IpcHandle* h, void* p) { return cudaIpcGetMemHandle(h, p); }
inline Error ipcOpen(void** p, const IpcHandle& h) {
  return cudaIpcOpenMemHandle(p, h, cudaIpcMemLazyEnablePeerAccess);
}
inline Error ipcClose(void* p) { return cudaIpcCloseMemHandle(p); }
inline Error copyAsync(void* d, const void* s, size_t n, Stream st) {
  return cudaMemcpyAsync(d, s, n, cudaMemcpyDefault, st);
}
inline Error streamCreate(Stream* s) { return cudaStreamCreateWithFlags(s, cudaStreamNonBlocking); }
inline Error streamDestroy(Stream s) { return cudaStreamDestroy(s); }
inline Error eventCreate(Event* e) { return cudaEventCreateWithFlags(e, cudaEventDisableTiming); }
inline Error eventRecord(Event e, Stream s) { return cudaEventRecord(e, s); }
inline Error eventQuery(Event e) { return cudaEventQuery(e); }
inline Error eventDestroy(Event e) { return cudaEventDestroy(e); }
/// Clears the thread's last error when it is `e` (an answer the plugin expected, such as "not ready"), so the
/// application's next cudaGetLastError does not report it; other errors stay.
inline void forget(Error e) {
  if (e != cudaSuccess && cudaPeekAtLastError() == e) (void)cudaGetLastError();
}
/// The driver API keeps no last-error state: nothing to clear.
inline void forget(CUresult) {}

inline bool deviceOfPointer(const void* p, int* device, std::string* what) {
  cudaPointerAttributes a{};
  cudaError_t e = cudaPointerGetAttributes(&a, p);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();  // an unknown pointer is an answer here, not an error to leave behind
    *what = std::string("the runtime does not know the pointer (") + cudaGetErrorString(e) + ")";
    return false;
  }
  if (a.type != cudaMemoryTypeDevice) {
    *what = "it is not device memory (host, managed or unregistered memory)";
    return false;
  }
  *device = a.device;
  return true;
}

/// The driver's virtual-memory and address-range calls, resolved once through the runtime.
struct DriverCalls {
  decltype(&::cuMemGetAddressRange) getAddressRange = nullptr;
  decltype(&::cuMemRetainAllocationHandle) retain = nullptr;
  decltype(&::cuMemRelease) release = nullptr;
  decltype(&::cuMemGetAllocationPropertiesFromHandle) properties = nullptr;
  decltype(&::cuMemExportToShareableHandle) exportHandle = nullptr;
  decltype(&::cuMemImportFromShareableHandle) importHandle = nullptr;
  decltype(&::cuMemAddressReserve) reserve = nullptr;
  decltype(&::cuMemAddressFree) addressFree = nullptr;
  decltype(&::cuMemMap) map = nullptr;
  decltype(&::cuMemUnmap) unmap = nullptr;
  decltype(&::cuMemSetAccess) setAccess = nullptr;
  decltype(&::cuGetErrorString) errorString = nullptr;
  std::string missing;  ///< the first call that could not be resolved, "" when all were
};

template <class Fn>
void resolve(const char* symbol, Fn* out, std::string* missing) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult status{};
  // 12000: the CUDA 12.0 ABI of each entry point, which is the one cuda.h of CUDA >= 12 declares.
  if (cudaGetDriverEntryPointByVersion(symbol, &fn, 12000, cudaEnableDefault, &status) != cudaSuccess ||
      status != cudaDriverEntryPointSuccess || fn == nullptr) {
    (void)cudaGetLastError();
    if (missing->empty()) *missing = symbol;
    return;
  }
  *out = reinterpret_cast<Fn>(fn);
}

inline const DriverCalls& driver() {
  static const DriverCalls calls = [] {
    DriverCalls c;
    resolve("cuMemGetAddressRange", &c.getAddressRange, &c.missing);
    resolve("cuMemRetainAllocationHandle", &c.retain, &c.missing);
    resolve("cuMemRelease", &c.release, &c.missing);
    resolve("cuMemGetAllocationPropertiesFromHandle", &c.properties, &c.missing);
    resolve("cuMemExportToShareableHandle", &c.exportHandle, &c.missing);
    resolve("cuMemImportFromShareableHandle", &c.importHandle, &c.missing);
    resolve("cuMemAddressReserve", &c.reserve, &c.missing);
    resolve("cuMemAddressFree", &c.addressFree, &c.missing);
    resolve("cuMemMap", &c.map, &c.missing);
    resolve("cuMemUnmap", &c.unmap, &c.missing);
    resolve("cuMemSetAccess", &c.setAccess, &c.missing);
    resolve("cuGetErrorString", &c.errorString, &c.missing);
    return c;
  }();
  return calls;
}

/// Calls a resolved driver entry; CUDA_ERROR_NOT_SUPPORTED when it did not resolve.
template <class Fn, class... Args>
DrvError callDriver(Fn fn, Args... args) {
  return fn == nullptr ? CUDA_ERROR_NOT_SUPPORTED : fn(args...);
}

inline const char* drvErrorString(DrvError e) {
  const char* text = nullptr;
  if (driver().errorString == nullptr || driver().errorString(e, &text) != CUDA_SUCCESS || text == nullptr) {
    return "unknown CUDA driver error";
  }
  return text;
}

/// Whether the driver calls resolved; `why` names the first that did not.
inline bool vmmAvailable(std::string* why) {
  if (driver().missing.empty()) return true;
  *why = "the CUDA driver offers no " + driver().missing;
  return false;
}

inline DrvError addressRange(const void* p, uint64_t* base, uint64_t* size) {
  CUdeviceptr b = 0;
  size_t s = 0;
  DrvError e = callDriver(driver().getAddressRange, &b, &s, reinterpret_cast<CUdeviceptr>(p));
  *base = static_cast<uint64_t>(b);
  *size = s;
  return e;
}
inline DrvError vmmRetain(VmmHandle* h, void* p) { return callDriver(driver().retain, h, p); }
inline DrvError vmmRelease(VmmHandle h) { return callDriver(driver().release, h); }
inline DrvError vmmAllowsPosixFd(VmmHandle h, bool* allows) {
  CUmemAllocationProp prop{};
  DrvError e = callDriver(driver().properties, &prop, h);
  *allows = e == CUDA_SUCCESS && (prop.requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) != 0;
  return e;
}
inline DrvError vmmExportFd(int* fd, VmmHandle h) {
  return callDriver(driver().exportHandle, fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
}
inline DrvError vmmImportFd(VmmHandle* h, int fd) {
  return callDriver(driver().importHandle, h, reinterpret_cast<void*>(static_cast<intptr_t>(fd)),
                    CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
}
inline DrvError vmmReserve(uint64_t* va, uint64_t size) {
  CUdeviceptr p = 0;
  DrvError e = callDriver(driver().reserve, &p, size, 0, 0, 0);
  *va = static_cast<uint64_t>(p);
  return e;
}
inline DrvError vmmFree(uint64_t va, uint64_t size) { return callDriver(driver().addressFree, va, size); }
inline DrvError vmmMap(uint64_t va, uint64_t size, VmmHandle h) { return callDriver(driver().map, va, size, 0, h, 0); }
inline DrvError vmmUnmap(uint64_t va, uint64_t size) { return callDriver(driver().unmap, va, size); }
inline DrvError vmmAllowReadWrite(uint64_t va, uint64_t size, int device) {
  CUmemAccessDesc d{};
  d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  d.location.id = device;
  d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  return callDriver(driver().setAccess, va, size, &d, 1);
}

#endif

/// Throws IpcFailure(`code`) naming `what` and the runtime's error text when `e` is not success.
/// The error is reported through the plugin's result, so it is taken out of the runtime's last-error slot.
inline void check(Error e, const std::string& what, weftResult_t code = weftSystemError) {
  if (e == kSuccess) return;
  forget(e);
  throw IpcFailure(code, what + " failed: " + errorString(e));
}

/// As check, for the virtual-memory and address-range calls.
inline void checkDrv(DrvError e, const std::string& what, weftResult_t code = weftSystemError) {
  if (e == kDrvSuccess) return;
  forget(e);
  throw IpcFailure(code, what + " failed: " + drvErrorString(e));
}

/// Launches the signal kernel (cuda_ipc_kernels.cu) on `stream`: one thread atomically adds `value` to `*word` at
/// system scope after the stream's earlier work. Returns the launch's own error (none from earlier calls).
Error launchSignalAdd(uint64_t* word, uint64_t value, Stream stream);

/// Largest copy launchCopyAndSignalAdd does (one block).
inline constexpr uint64_t kFusedCopyMaxBytes = 64ull << 10;

/// One kernel on `stream`: copies `bytes` (<= kFusedCopyMaxBytes; 0 for none) from `src` to `dst`, then adds `value`
/// to `*word` at system scope, the copy visible before the add. Returns the launch's own error.
Error launchCopyAndSignalAdd(uint8_t* dst, const uint8_t* src, uint64_t bytes, uint64_t* word, uint64_t value,
                             Stream stream);

/// Loads the signal kernels onto the current device now. With lazy module loading (the CUDA default since 12.2) the
/// first launch would load it, and loading waits for the kernels already running; a proxy launching its first
/// signal while the application's kernel spins waiting for that signal would deadlock.
Error loadSignalKernel();

}  // namespace weft::cuda_ipc::rt
