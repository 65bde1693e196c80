// The cuda_ipc transport plugin: GPU memory shared between processes of one host (NVLink/PCIe peer access on NVIDIA,
// xGMI on AMD, or one GPU shared under MPS). A registration exports the allocation holding the buffer: a runtime IPC
// handle for cudaMalloc-family memory, or a file descriptor for cuMem/hipMem allocations, which importers fetch from
// this process's fd server. An importer maps the allocation, so peer memory is reachable by load/store; write is a
// copy-engine copy on a per-connection stream, atomicAdd a one-thread kernel behind it, flush waits for an event.
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <csignal>
#include <cstdarg>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "../common/process_exit.hpp"
#include "cuda_ipc_failure.hpp"
#include "cuda_ipc_fd_server.hpp"
#include "cuda_ipc_wire.hpp"
#include "ipc_runtime.hpp"

namespace weft::cuda_ipc {
namespace {

thread_local std::string tLastError;

/// Budget for each exchange the fd server has with one client.
constexpr std::chrono::milliseconds kServerIoTimeout{2000};

/// Tags at the start of each object, so a handle of the wrong kind is refused instead of misused.
enum class Tag : uint32_t {
  kState = 0x53494357,
  kEndpoint = 0x45494357,
  kConnection = 0x43494357,
  kRegion = 0x52494357,
  kRemote = 0x49494357,
  kDead = 0
};

/// How registrations are shared (the handle_type option).
enum class HandleType { kRuntime, kPosixFd };

struct IpcState;

struct Device {
  std::string busId;  // lowercase, as sysfs spells it
  int numaNode = -1;
};

struct IpcEndpoint {
  Tag tag = Tag::kEndpoint;
  IpcState* state;
  int device;
};

// A small write held back so that, when the signal follows (a putWithSignal), one kernel does both: one launch
// instead of a copy plus a kernel halves the latency of a small put + signal. Anything else issues it as a copy.
struct PendingWrite {
  uint8_t* dst = nullptr;
  const uint8_t* src = nullptr;
  uint64_t bytes = 0;
};

// Writes up to this size wait for a following signal (rt::kFusedCopyMaxBytes: what one block copies quickly).
constexpr uint64_t kFusedWriteMaxBytes = rt::kFusedCopyMaxBytes;

struct IpcConnection {
  Tag tag = Tag::kConnection;
  IpcEndpoint* endpoint;
  int device;
  rt::Stream stream = nullptr;
  ProcessIdentity peer{};
  bool peerInThisProcess = false;
  bool peerInOurPidNamespace = false;
  std::mutex pendingMutex;  // the ABI lets callers share a connection; the pending write is one slot
  PendingWrite pending;
};

struct IpcRegion {
  Tag tag = Tag::kRegion;
  IpcState* state;
  uint64_t id = 0;  // non-zero for posix_fd regions (the fd server's key)
  uint8_t* address = nullptr;
  uint64_t size = 0;
  HandleKind kind = HandleKind::kRuntime;
  UniqueFd fd;  // posix_fd: the exported allocation, dup()ed to importers
  rt::VmmHandle vmm{};
  bool vmmRetained = false;
  uint64_t allocationSize = 0;
  uint8_t token[kTokenBytes] = {};
};

/// A runtime IPC mapping shared by every import of one allocation in this process (the runtime maps a handle once
/// per process; opening it twice is an error on some drivers).
struct RuntimeMapping {
  void* base = nullptr;
  int device = -1;
  uint64_t references = 0;
};
using RuntimeKey = std::array<uint8_t, kIpcHandleBytes>;

struct IpcRemote {
  Tag tag = Tag::kRemote;
  IpcState* state;
  uint8_t* mapped = nullptr;  // the peer's first registered byte, in this process
  uint64_t size = 0;
  HandleKind kind = HandleKind::kRuntime;
  bool sameProcess = false;
  RuntimeKey runtimeKey{};
  uint64_t va = 0;  // posix_fd: the reserved range and what is mapped there
  uint64_t vaSize = 0;
  rt::VmmHandle vmm{};
  int device = -1;
};

struct IpcState {
  Tag tag = Tag::kState;
  weftHostServices_v1 services{};
  HandleType handleType = HandleType::kRuntime;
  std::string hostId;
  std::vector<Device> devices;
  std::string noDeviceReason;
  std::mutex mutex;  // guards everything below
  std::map<uint64_t, IpcRegion*> fdRegions;
  std::set<IpcRegion*> regions;
  std::set<IpcRemote*> remotes;
  std::set<IpcConnection*> connections;
  std::set<IpcEndpoint*> endpoints;
  std::map<RuntimeKey, RuntimeMapping> runtimeMappings;
  uint64_t nextRegionId = 1;
  std::unique_ptr<FdServer> server;  // started with the first posix_fd registration
};

void logf(const IpcState* s, int32_t level, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
void logf(const IpcState* s, int32_t level, const char* fmt, ...) {
  if (s == nullptr || s->services.log == nullptr) return;
  char line[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(line, sizeof(line), fmt, ap);
  va_end(ap);
  s->services.log(s->services.context, level, line);
}

/// Runs `body`, turning every exception into a result code and the thread's lastError: no exception leaves the plugin.
template <class F>
weftResult_t guard(F&& body) noexcept {
  try {
    tLastError.clear();
    body();
    return weftSuccess;
  } catch (const IpcFailure& e) {
    tLastError = std::string("cuda_ipc: ") + e.what();
    return e.code();
  } catch (const std::bad_alloc&) {
    tLastError = "cuda_ipc: out of memory";
    return weftOutOfMemory;
  } catch (const std::exception& e) {
    tLastError = std::string("cuda_ipc: internal error: ") + e.what();
    return weftInternalError;
  } catch (...) {
    tLastError = "cuda_ipc: unknown internal error";
    return weftInternalError;
  }
}

template <class T>
T* checked(void* object, Tag tag, const char* what) {
  auto* o = static_cast<T*>(object);
  if (o == nullptr || o->tag != tag) throw IpcFailure(weftInvalidArgument, std::string("not a valid ") + what);
  return o;
}

void requireOut(const void* p, const char* what) {
  if (p == nullptr) throw IpcFailure(weftInvalidArgument, std::string("output pointer ") + what + " is NULL");
}

/// Makes `device` current for the scope and restores the caller's device after, so the plugin never changes
/// the application's current device behind its back.
class ScopedDevice {
 public:
  explicit ScopedDevice(int device) {
    rt::check(rt::getDevice(&previous_), "getting the current GPU");
    if (previous_ != device) {
      rt::check(rt::setDevice(device), "selecting GPU " + std::to_string(device));
      restore_ = true;
    }
  }
  ~ScopedDevice() {
    if (restore_) (void)rt::setDevice(previous_);
  }
  ScopedDevice(const ScopedDevice&) = delete;
  ScopedDevice& operator=(const ScopedDevice&) = delete;

 private:
  int previous_ = 0;
  bool restore_ = false;
};

std::string readFirstLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

/// "<boot id>/<hostname>/<network namespace>": processes that agree on it share the kernel (and so the GPUs) and can
/// reach each other's abstract unix sockets.
std::string makeHostId() {
  std::string boot = readFirstLine("/proc/sys/kernel/random/boot_id");
  if (boot.empty()) boot = "unknown-boot";
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0) std::snprintf(host, sizeof(host), "unknown-host");
  char ns[128] = {};
  ssize_t n = readlink("/proc/self/ns/net", ns, sizeof(ns) - 1);
  return boot + "/" + host + "/" + (n > 0 ? std::string(ns, static_cast<size_t>(n)) : std::string("net:unknown"));
}

void randomBytes(void* out, size_t bytes) {
  auto* p = static_cast<uint8_t*>(out);
  while (bytes > 0) {
    ssize_t n = getrandom(p, bytes, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      throwErrno("getrandom", errno);
    }
    p += n;
    bytes -= static_cast<size_t>(n);
  }
}

/// This process: pid, pid namespace and a nonce drawn once per process (redrawn in a forked child, whose pid differs).
ProcessIdentity thisProcess() {
  static std::mutex mutex;
  static ProcessIdentity cached{};
  std::lock_guard<std::mutex> lock(mutex);
  const auto pid = static_cast<uint32_t>(getpid());
  if (cached.pid != pid) {
    cached.pid = pid;
    struct stat st {};
    cached.pidNamespace = stat("/proc/self/ns/pid", &st) == 0 ? static_cast<uint64_t>(st.st_ino) : 0;
    randomBytes(&cached.nonce, sizeof(cached.nonce));
  }
  return cached;
}

bool sameProcess(const ProcessIdentity& a, const ProcessIdentity& b) { return a.pid == b.pid && a.nonce == b.nonce; }

bool samePidNamespace(const ProcessIdentity& a, const ProcessIdentity& b) {
  return a.pidNamespace != 0 && a.pidNamespace == b.pidNamespace;
}

/// True when `who` certainly has exited: it is in our pid namespace and its pid is gone or a zombie.
bool certainlyExited(const ProcessIdentity& who) {
  return samePidNamespace(who, thisProcess()) && transport_support::processHasExited(static_cast<pid_t>(who.pid));
}

std::string lowercase(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

/// NUMA node of the PCI device `busId` (lowercase), -1 when sysfs has none (VMs often report -1).
int numaNodeOf(const std::string& busId) {
  std::string text = readFirstLine("/sys/bus/pci/devices/" + busId + "/numa_node");
  if (text.empty()) return -1;
  char* end = nullptr;
  long node = std::strtol(text.c_str(), &end, 10);
  return end == text.c_str() || node < 0 || node > 4095 ? -1 : static_cast<int>(node);
}

std::string hex(uint64_t v) {
  char b[24];
  std::snprintf(b, sizeof(b), "0x%" PRIx64, v);
  return b;
}

void checkRange(uint64_t offset, uint64_t bytes, uint64_t size, const char* what) {
  if (offset > size || bytes > size - offset) {
    throw IpcFailure(weftInvalidArgument, std::string(what) + " range [" + std::to_string(offset) + ", +" +
                                              std::to_string(bytes) + ") exceeds its " + std::to_string(size) +
                                              " bytes");
  }
}

uint64_t clampTimeoutNs(uint64_t timeoutNs) {
  constexpr uint64_t kYear = uint64_t{365} * 24 * 3600 * 1000000000ull;  // keeps time_point arithmetic in range
  return timeoutNs > kYear ? kYear : timeoutNs;
}

FdAnswer lookupRegion(IpcState* s, const FdRequest& request) {
  FdAnswer a;
  std::lock_guard<std::mutex> lock(s->mutex);
  auto it = s->fdRegions.find(request.regionId);
  if (it == s->fdRegions.end()) {
    a.message = "region " + std::to_string(request.regionId) + " is not registered (deregistered already?)";
    return a;
  }
  IpcRegion* r = it->second;
  uint8_t diff = 0;  // compare every byte: the time taken says nothing about how much matched
  for (int i = 0; i < kTokenBytes; ++i) diff |= static_cast<uint8_t>(r->token[i] ^ request.token[i]);
  if (diff != 0) {
    a.message = "token does not match region " + std::to_string(request.regionId);
    logf(s, weftLogWarn, "fd server refused region %" PRIu64 ": wrong token", request.regionId);
    return a;
  }
  a.fd = UniqueFd(fcntl(r->fd.get(), F_DUPFD_CLOEXEC, 0));
  if (a.fd.get() < 0) {
    a.status = weftSystemError;
    a.message = std::string("owner could not dup the allocation's file: ") + std::strerror(errno);
    return a;
  }
  a.status = weftSuccess;
  a.allocationSize = r->allocationSize;
  return a;
}

/// Starts the fd server if it is not running yet. Caller holds s->mutex.
void ensureServer(IpcState* s) {
  if (s->server) return;
  uint64_t nonce = 0;
  randomBytes(&nonce, sizeof(nonce));
  char name[kSocketNameBytes];
  std::snprintf(name, sizeof(name), "weft-cuda-ipc-%u-%016" PRIx64, thisProcess().pid, nonce);
  s->server = std::make_unique<FdServer>(
      name, [s](const FdRequest& r) { return lookupRegion(s, r); }, kServerIoTimeout);
  logf(s, weftLogDebug, "cuda_ipc fd server up at @%s", name);
}

// ---- teardown helpers: free one object; errors are logged, never thrown (they run in finalize too) ----

void closeRemote(IpcRemote* r) {
  IpcState* s = r->state;
  if (r->sameProcess) {
    // Nothing was mapped.
  } else if (r->kind == HandleKind::kRuntime) {
    void* closeBase = nullptr;
    int device = -1;
    {
      std::lock_guard<std::mutex> lock(s->mutex);
      auto it = s->runtimeMappings.find(r->runtimeKey);
      if (it != s->runtimeMappings.end() && --it->second.references == 0) {
        closeBase = it->second.base;
        device = it->second.device;
        s->runtimeMappings.erase(it);
      }
    }
    if (closeBase != nullptr) {
      int previous = 0;
      (void)rt::getDevice(&previous);
      if (previous != device) (void)rt::setDevice(device);
      rt::Error e = rt::ipcClose(closeBase);
      if (previous != device) (void)rt::setDevice(previous);
      if (e != rt::kSuccess) logf(s, weftLogWarn, "closing an imported IPC mapping failed: %s", rt::errorString(e));
    }
  } else {
    rt::DrvError e = rt::vmmUnmap(r->va, r->vaSize);
    if (e != rt::kDrvSuccess) logf(s, weftLogWarn, "unmapping imported memory failed: %s", rt::drvErrorString(e));
    e = rt::vmmFree(r->va, r->vaSize);
    if (e != rt::kDrvSuccess)
      logf(s, weftLogWarn, "freeing an imported address range failed: %s", rt::drvErrorString(e));
    e = rt::vmmRelease(r->vmm);
    if (e != rt::kDrvSuccess)
      logf(s, weftLogWarn, "releasing an imported allocation failed: %s", rt::drvErrorString(e));
  }
  r->tag = Tag::kDead;
  delete r;
}

void freeRegion(IpcRegion* r) {
  if (r->vmmRetained) {
    rt::DrvError e = rt::vmmRelease(r->vmm);
    if (e != rt::kDrvSuccess) {
      logf(r->state, weftLogWarn, "releasing a retained allocation handle failed: %s", rt::drvErrorString(e));
    }
  }
  r->fd.reset();
  r->tag = Tag::kDead;
  delete r;
}

// Enqueues the held-back write as a copy (caller holds pendingMutex and has selected the device).
void issuePending(IpcConnection* c) {
  if (c->pending.bytes == 0) return;
  const PendingWrite w = c->pending;
  c->pending = PendingWrite{};
  rt::check(rt::copyAsync(w.dst, w.src, w.bytes, c->stream),
            "enqueueing a copy of " + std::to_string(w.bytes) + " bytes to pid " + std::to_string(c->peer.pid));
}

void freeConnection(IpcConnection* c) {
  if (c->stream != nullptr && c->pending.bytes != 0) {
    try {
      std::lock_guard<std::mutex> lock(c->pendingMutex);
      ScopedDevice on(c->device);
      issuePending(c);
    } catch (const std::exception& e) {
      logf(c->endpoint->state, weftLogWarn, "issuing a held-back write at close failed: %s", e.what());
    }
  }
  if (c->stream != nullptr) {
    rt::Error e = rt::streamDestroy(c->stream);  // pending work still completes; the stream's resources go after
    if (e != rt::kSuccess) logf(c->endpoint->state, weftLogWarn, "destroying a stream failed: %s", rt::errorString(e));
  }
  c->tag = Tag::kDead;
  delete c;
}

// ---- entry points ----

const char* ipcLastError() { return tLastError.c_str(); }

weftResult_t ipcInit(const weftHostServices_v1* host, uint64_t numOptions, const char* const* keys,
                     const char* const* values, void** stateOut) {
  return guard([&] {
    requireOut(stateOut, "state");
    if (numOptions > 0 && (keys == nullptr || values == nullptr)) {
      throw IpcFailure(weftInvalidArgument, "options given without key or value arrays");
    }
    auto s = std::make_unique<IpcState>();
    if (host != nullptr && host->structSize >= offsetof(weftHostServices_v1, log) + sizeof(host->log)) {
      s->services = *host;
    }
    for (uint64_t i = 0; i < numOptions; ++i) {
      const std::string key = keys[i] != nullptr ? keys[i] : "", value = values[i] != nullptr ? values[i] : "";
      if (key == "handle_type") {
        if (value == "runtime") {
          s->handleType = HandleType::kRuntime;
        } else if (value == "posix_fd") {
          s->handleType = HandleType::kPosixFd;
        } else {
          throw IpcFailure(weftInvalidArgument,
                           "option handle_type='" + value + "' is not \"runtime\" or \"posix_fd\"");
        }
      } else {
        throw IpcFailure(weftInvalidArgument, "unknown option '" + key + "' (cuda_ipc knows handle_type)");
      }
    }
    s->hostId = makeHostId();
    int count = 0;
    rt::Error e = rt::deviceCount(&count);
    if (e != rt::kSuccess) {
      // No driver or no GPU is an answer (zero devices), so core falls back to another transport.
      s->noDeviceReason = std::string(rt::kPlatform) + " reports no usable GPU: " + rt::errorString(e);
      count = 0;
    }
    for (int d = 0; d < count; ++d) {
      char bus[kBusIdBytes] = {};
      Device dev;
      if (rt::busId(bus, sizeof(bus) - 1, d) == rt::kSuccess) dev.busId = lowercase(bus);
      dev.numaNode = dev.busId.empty() ? -1 : numaNodeOf(dev.busId);
      s->devices.push_back(dev);
    }
    logf(s.get(), weftLogDebug, "cuda_ipc up: %zu %s GPU(s), handle_type %s%s%s", s->devices.size(), rt::kPlatform,
         s->handleType == HandleType::kRuntime ? "runtime" : "posix_fd", s->noDeviceReason.empty() ? "" : "; ",
         s->noDeviceReason.c_str());
    *stateOut = s.release();
  });
}

weftResult_t ipcFinalize(void* state) {
  return guard([&] {
    auto* s = checked<IpcState>(state, Tag::kState, "cuda_ipc state");
    s->server.reset();  // joins the server thread first: nothing looks at regions after this
    const size_t live = s->regions.size() + s->remotes.size() + s->connections.size() + s->endpoints.size();
    if (live > 0) logf(s, weftLogWarn, "finalize with %zu objects still live: freeing them", live);
    for (IpcConnection* c : s->connections) freeConnection(c);
    s->connections.clear();
    std::set<IpcRemote*> remotes;
    remotes.swap(s->remotes);
    for (IpcRemote* r : remotes) closeRemote(r);
    for (IpcRegion* r : s->regions) freeRegion(r);
    s->regions.clear();
    s->fdRegions.clear();
    for (IpcEndpoint* e : s->endpoints) {
      e->tag = Tag::kDead;
      delete e;
    }
    s->endpoints.clear();
    s->tag = Tag::kDead;
    delete s;
  });
}

weftResult_t ipcDeviceCount(void* state, uint32_t* count) {
  return guard([&] {
    auto* s = checked<IpcState>(state, Tag::kState, "cuda_ipc state");
    requireOut(count, "count");
    *count = static_cast<uint32_t>(s->devices.size());
  });
}

weftResult_t ipcDeviceInfo(void* state, uint32_t device, weftDeviceInfo_v1* info) {
  return guard([&] {
    auto* s = checked<IpcState>(state, Tag::kState, "cuda_ipc state");
    requireOut(info, "info");
    if (device >= s->devices.size()) {
      throw IpcFailure(weftInvalidArgument, "cuda_ipc has " + std::to_string(s->devices.size()) + " devices, not " +
                                                std::to_string(device + 1));
    }
    auto covers = [&](size_t offset, size_t size) { return info->structSize >= offset + size; };
    if (covers(offsetof(weftDeviceInfo_v1, name), sizeof(info->name))) {
      std::memset(info->name, 0, sizeof(info->name));
      std::snprintf(info->name, sizeof(info->name), "%s%u", rt::kPlatform, device);
    }
    if (covers(offsetof(weftDeviceInfo_v1, flags), sizeof(info->flags))) {
      info->flags = weftDeviceGpuMemory | weftDeviceLoadStore;
    }
    if (covers(offsetof(weftDeviceInfo_v1, numaNode), sizeof(info->numaNode))) {
      info->numaNode = s->devices[device].numaNode;
    }
    if (covers(offsetof(weftDeviceInfo_v1, gpuDevice), sizeof(info->gpuDevice))) {
      info->gpuDevice = static_cast<int32_t>(device);
    }
  });
}

weftResult_t ipcCreateEndpoint(void* state, uint32_t device, void** endpointOut, void* blob, uint64_t blobCapacity,
                               uint64_t* blobUsed) {
  return guard([&] {
    auto* s = checked<IpcState>(state, Tag::kState, "cuda_ipc state");
    requireOut(endpointOut, "endpoint");
    requireOut(blob, "blob");
    requireOut(blobUsed, "blobUsed");
    if (device >= s->devices.size()) {
      throw IpcFailure(weftInvalidArgument, "cuda_ipc has no device " + std::to_string(device) +
                                                (s->noDeviceReason.empty() ? "" : " (" + s->noDeviceReason + ")"));
    }
    if (blobCapacity < sizeof(EndpointBlob)) {
      throw IpcFailure(weftInvalidArgument, "endpoint blob buffer of " + std::to_string(blobCapacity) +
                                                " bytes is smaller than " + std::to_string(sizeof(EndpointBlob)));
    }
    auto e = std::make_unique<IpcEndpoint>();
    e->state = s;
    e->device = static_cast<int>(device);
    EndpointBlob b{};
    b.magic = kEndpointMagic;
    b.version = kWireVersion;
    setField(b.hostId, s->hostId);
    setField(b.busId, s->devices[device].busId);
    b.process = thisProcess();
    b.gpuDevice = static_cast<int32_t>(device);
    std::memcpy(blob, &b, sizeof(b));
    *blobUsed = sizeof(b);
    {
      std::lock_guard<std::mutex> lock(s->mutex);
      s->endpoints.insert(e.get());
    }
    *endpointOut = e.release();
  });
}

weftResult_t ipcDestroyEndpoint(void* endpoint) {
  return guard([&] {
    auto* e = checked<IpcEndpoint>(endpoint, Tag::kEndpoint, "cuda_ipc endpoint");
    {
      std::lock_guard<std::mutex> lock(e->state->mutex);
      e->state->endpoints.erase(e);
    }
    e->tag = Tag::kDead;
    delete e;
  });
}

weftResult_t ipcConnect(void* endpoint, const void* peerBlob, uint64_t peerBlobBytes, uint64_t /*timeoutNs*/,
                        void** connectionOut) {
  return guard([&] {
    auto* e = checked<IpcEndpoint>(endpoint, Tag::kEndpoint, "cuda_ipc endpoint");
    requireOut(connectionOut, "connection");
    EndpointBlob b = decodeEndpointBlob(peerBlob, peerBlobBytes);
    const std::string peerHost = getField(b.hostId, "host id");
    if (peerHost != e->state->hostId) {
      throw IpcFailure(weftInvalidArgument, "peer endpoint (pid " + std::to_string(b.process.pid) + ") is on host '" +
                                                peerHost + "', this process is on '" + e->state->hostId +
                                                "': cuda_ipc joins processes of one host only");
    }
    // Nothing to agree on with the peer: data moves into memory imported with importMemory. The stream is this
    // connection's own, so flush waits for this connection's work only.
    auto c = std::make_unique<IpcConnection>();
    c->endpoint = e;
    c->device = e->device;
    c->peer = b.process;
    c->peerInThisProcess = sameProcess(b.process, thisProcess());
    c->peerInOurPidNamespace = samePidNamespace(b.process, thisProcess());
    {
      ScopedDevice on(c->device);
      rt::check(rt::streamCreate(&c->stream), "creating a stream on GPU " + std::to_string(c->device));
      rt::check(rt::loadSignalKernel(), "loading the signal kernel on GPU " + std::to_string(c->device));
    }
    {
      std::lock_guard<std::mutex> lock(e->state->mutex);
      e->state->connections.insert(c.get());
    }
    *connectionOut = c.release();
  });
}

weftResult_t ipcCloseConnection(void* connection) {
  return guard([&] {
    auto* c = checked<IpcConnection>(connection, Tag::kConnection, "cuda_ipc connection");
    IpcState* s = c->endpoint->state;
    {
      std::lock_guard<std::mutex> lock(s->mutex);
      s->connections.erase(c);
    }
    freeConnection(c);
  });
}

weftResult_t ipcRegisterMemory(void* state, const weftMemoryDescriptor_v1* desc, void** memoryOut, void* blob,
                               uint64_t blobCapacity, uint64_t* blobUsed) {
  return guard([&] {
    auto* s = checked<IpcState>(state, Tag::kState, "cuda_ipc state");
    requireOut(memoryOut, "memory");
    requireOut(blob, "blob");
    requireOut(blobUsed, "blobUsed");
    if (desc == nullptr || desc->structSize < offsetof(weftMemoryDescriptor_v1, gpuDevice) + sizeof(desc->gpuDevice)) {
      throw IpcFailure(weftInvalidArgument, "memory descriptor is NULL or too small");
    }
    if (blobCapacity < sizeof(MemoryBlob)) {
      throw IpcFailure(weftInvalidArgument, "memory blob buffer of " + std::to_string(blobCapacity) +
                                                " bytes is smaller than " + std::to_string(sizeof(MemoryBlob)));
    }
    if (desc->kind != weftMemoryGpu) {
      throw IpcFailure(weftNotSupported, "cuda_ipc registers GPU memory only (kind " + std::to_string(desc->kind) +
                                             "); host memory goes through the host transport");
    }
    if (desc->address == 0 || desc->size == 0 || desc->size > kMaxAllocationBytes) {
      throw IpcFailure(weftInvalidArgument,
                       "buffer address is 0 or its size " + std::to_string(desc->size) + " is not in [1, 2^48]");
    }
    if (s->devices.empty()) {
      throw IpcFailure(weftNotSupported,
                       "cuda_ipc has no GPU here" + (s->noDeviceReason.empty() ? "" : " (" + s->noDeviceReason + ")"));
    }
    std::string why;
    if (!rt::vmmAvailable(&why)) throw IpcFailure(weftNotSupported, why);
    void* ptr = reinterpret_cast<void*>(desc->address);
    const std::string what = "buffer " + hex(desc->address) + " (" + std::to_string(desc->size) + " bytes)";
    int device = -1;
    if (!rt::deviceOfPointer(ptr, &device, &why)) {
      throw IpcFailure(weftNotSupported, what + " cannot be shared by cuda_ipc: " + why);
    }
    ScopedDevice on(device);
    uint64_t base = 0, allocationSize = 0;
    rt::checkDrv(rt::addressRange(ptr, &base, &allocationSize), "looking up the allocation of " + what,
                 weftInvalidArgument);
    const uint64_t offset = desc->address - base;
    if (desc->address < base || offset > allocationSize || desc->size > allocationSize - offset) {
      throw IpcFailure(weftInvalidArgument, what + " runs past the end of its allocation [" + hex(base) + ", +" +
                                                std::to_string(allocationSize) + ")");
    }
    // Until it is handed out, the registration frees itself (and the handle it may have retained) on any throw.
    struct RegionDeleter {
      void operator()(IpcRegion* r) const { freeRegion(r); }
    };
    std::unique_ptr<IpcRegion, RegionDeleter> r(new IpcRegion);
    r->state = s;
    r->address = static_cast<uint8_t*>(ptr);
    r->size = desc->size;
    r->allocationSize = allocationSize;
    MemoryBlob b{};
    b.magic = kMemoryMagic;
    b.version = kWireVersion;
    setField(b.hostId, s->hostId);
    setField(b.busId, static_cast<size_t>(device) < s->devices.size() ? s->devices[device].busId : "");
    b.owner = thisProcess();
    b.ownerBase = base;
    b.baseOffset = offset;
    b.size = desc->size;
    b.allocationSize = allocationSize;
    // A virtual-memory (cuMem/hipMem) allocation is recognized by having an allocation handle; the runtime's IPC
    // handles cannot share those, so they go as file descriptors whatever handle_type says.
    rt::VmmHandle vmm{};
    const rt::DrvError retained = rt::vmmRetain(&vmm, reinterpret_cast<void*>(base));
    const bool isVmm = retained == rt::kDrvSuccess;
    rt::forget(retained);
    if (isVmm) {
      r->vmm = vmm;
      r->vmmRetained = true;
      bool allowsFd = false;
      rt::checkDrv(rt::vmmAllowsPosixFd(vmm, &allowsFd), "reading the allocation properties of " + what);
      if (!allowsFd) {
        throw IpcFailure(weftNotSupported, what +
                                               " is a virtual-memory allocation made without the POSIX file "
                                               "descriptor handle type: create it with requestedHandleTypes = "
                                               "POSIX_FILE_DESCRIPTOR so other processes can import it");
      }
      int fd = -1;
      rt::checkDrv(rt::vmmExportFd(&fd, vmm), "exporting " + what + " as a file descriptor");
      r->fd = UniqueFd(fd);
      r->kind = HandleKind::kPosixFd;
      randomBytes(r->token, sizeof(r->token));
      b.handleKind = static_cast<uint32_t>(HandleKind::kPosixFd);
      std::memcpy(b.token, r->token, sizeof(b.token));
      std::lock_guard<std::mutex> lock(s->mutex);
      ensureServer(s);
      setField(b.socketName, s->server->name());
      r->id = s->nextRegionId++;
      b.regionId = r->id;
      s->fdRegions[r->id] = r.get();
      s->regions.insert(r.get());
    } else {
      if (s->handleType == HandleType::kPosixFd) {
        throw IpcFailure(weftNotSupported, what +
                                               " is not a virtual-memory allocation, and handle_type = \"posix_fd\" "
                                               "shares only those: allocate it with cuMemCreate/hipMemCreate and the "
                                               "POSIX file descriptor handle type, or use handle_type = \"runtime\"");
      }
      rt::IpcHandle h{};
      rt::Error e = rt::ipcGetHandle(&h, reinterpret_cast<void*>(base));
      if (e != rt::kSuccess) {
        rt::forget(e);
        throw IpcFailure(weftNotSupported, what + ": the runtime gives no IPC handle for it (" + rt::errorString(e) +
                                               "); memory of cudaMalloc/hipMalloc can be shared, stream-ordered "
                                               "pool memory cannot");
      }
      static_assert(sizeof(h) == kIpcHandleBytes, "the runtime's IPC handle must fit the blob field");
      std::memcpy(b.ipcHandle, &h, sizeof(h));
      b.handleKind = static_cast<uint32_t>(HandleKind::kRuntime);
      std::lock_guard<std::mutex> lock(s->mutex);
      s->regions.insert(r.get());
    }
    std::memcpy(blob, &b, sizeof(b));
    *blobUsed = sizeof(b);
    *memoryOut = r.release();
  });
}

weftResult_t ipcDeregisterMemory(void* memory) {
  return guard([&] {
    auto* r = checked<IpcRegion>(memory, Tag::kRegion, "cuda_ipc registration");
    {
      std::lock_guard<std::mutex> lock(r->state->mutex);
      r->state->regions.erase(r);
      if (r->id != 0) r->state->fdRegions.erase(r->id);
    }
    freeRegion(r);
  });
}

/// Maps a runtime IPC handle once per process and counts its users. Returns the allocation's base here.
uint8_t* openRuntimeMapping(IpcState* s, const MemoryBlob& b, const RuntimeKey& key) {
  int device = 0;
  rt::check(rt::getDevice(&device), "getting the current GPU");
  std::lock_guard<std::mutex> lock(s->mutex);  // held across the open, so two importers do not both open it
  auto it = s->runtimeMappings.find(key);
  if (it != s->runtimeMappings.end()) {
    ++it->second.references;
    return static_cast<uint8_t*>(it->second.base);
  }
  rt::IpcHandle h;
  std::memcpy(&h, b.ipcHandle, sizeof(h));
  void* base = nullptr;
  rt::Error e = rt::ipcOpen(&base, h);
  if (e != rt::kSuccess) {
    rt::forget(e);
    const std::string text = "opening the IPC handle of pid " + std::to_string(b.owner.pid) + "'s memory on GPU " +
                             b.busId + " failed: " + rt::errorString(e);
    if (certainlyExited(b.owner)) throw IpcFailure(weftRemoteError, text + " (the owner has exited)");
    throw IpcFailure(weftRemoteError, text + " (has the owner freed it, or is the GPU not reachable from here?)");
  }
  s->runtimeMappings[key] = RuntimeMapping{base, device, 1};
  return static_cast<uint8_t*>(base);
}

weftResult_t ipcImportMemory(void* state, const void* blob, uint64_t blobBytes, uint64_t timeoutNs, void** remoteOut,
                             uint64_t* mappedAddress) {
  return guard([&] {
    auto* s = checked<IpcState>(state, Tag::kState, "cuda_ipc state");
    requireOut(remoteOut, "remote");
    requireOut(mappedAddress, "mappedAddress");
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::nanoseconds(clampTimeoutNs(timeoutNs));
    MemoryBlob b = decodeMemoryBlob(blob, blobBytes);
    const std::string ownerHost = getField(b.hostId, "host id");
    if (ownerHost != s->hostId) {
      throw IpcFailure(weftInvalidArgument, "memory of pid " + std::to_string(b.owner.pid) +
                                                " was registered on host '" + ownerHost + "', this process is on '" +
                                                s->hostId + "': cuda_ipc maps GPU memory of one host only");
    }
    auto r = std::make_unique<IpcRemote>();
    r->state = s;
    r->size = b.size;
    r->kind = static_cast<HandleKind>(b.handleKind);
    if (sameProcess(b.owner, thisProcess())) {
      // Our own memory (ranks as threads of one process): the owner's pointer is valid here.
      r->sameProcess = true;
      r->mapped = reinterpret_cast<uint8_t*>(b.ownerBase) + b.baseOffset;
    } else if (s->devices.empty()) {
      throw IpcFailure(weftNotSupported, "cuda_ipc has no GPU here to map pid " + std::to_string(b.owner.pid) +
                                             "'s memory" +
                                             (s->noDeviceReason.empty() ? "" : " (" + s->noDeviceReason + ")"));
    } else if (r->kind == HandleKind::kRuntime) {
      std::memcpy(r->runtimeKey.data(), b.ipcHandle, kIpcHandleBytes);
      r->mapped = openRuntimeMapping(s, b, r->runtimeKey) + b.baseOffset;
    } else {
      std::string why;
      if (!rt::vmmAvailable(&why)) throw IpcFailure(weftNotSupported, why);
      FetchedFd got = fetchFd(getField(b.socketName, "socket name"), b.owner.pid, b.regionId, b.token, deadline);
      if (got.allocationSize != b.allocationSize) {
        throw IpcFailure(weftRemoteError, "owner pid " + std::to_string(b.owner.pid) + " describes region " +
                                              std::to_string(b.regionId) + " differently from its blob");
      }
      rt::check(rt::getDevice(&r->device), "getting the current GPU");
      const std::string what = "pid " + std::to_string(b.owner.pid) + "'s allocation of " +
                               std::to_string(b.allocationSize) + " bytes on GPU " + b.busId;
      rt::checkDrv(rt::vmmImportFd(&r->vmm, got.fd.get()), "importing " + what, weftRemoteError);
      got.fd.reset();  // the imported handle keeps the memory; the file is not needed any more
      rt::DrvError e = rt::vmmReserve(&r->va, b.allocationSize);
      if (e != rt::kDrvSuccess) {
        (void)rt::vmmRelease(r->vmm);
        rt::checkDrv(e, "reserving addresses for " + what);
      }
      r->vaSize = b.allocationSize;
      e = rt::vmmMap(r->va, r->vaSize, r->vmm);
      if (e == rt::kDrvSuccess) {
        e = rt::vmmAllowReadWrite(r->va, r->vaSize, r->device);
        if (e != rt::kDrvSuccess) (void)rt::vmmUnmap(r->va, r->vaSize);
      }
      if (e != rt::kDrvSuccess) {
        (void)rt::vmmFree(r->va, r->vaSize);
        (void)rt::vmmRelease(r->vmm);
        rt::checkDrv(e, "mapping " + what + " for GPU " + std::to_string(r->device));
      }
      r->mapped = reinterpret_cast<uint8_t*>(r->va) + b.baseOffset;
    }
    {
      std::lock_guard<std::mutex> lock(s->mutex);
      s->remotes.insert(r.get());
    }
    *mappedAddress = reinterpret_cast<uint64_t>(r->mapped);
    *remoteOut = r.release();
  });
}

weftResult_t ipcReleaseMemory(void* remote) {
  return guard([&] {
    auto* r = checked<IpcRemote>(remote, Tag::kRemote, "cuda_ipc imported memory");
    {
      std::lock_guard<std::mutex> lock(r->state->mutex);
      r->state->remotes.erase(r);
    }
    closeRemote(r);
  });
}

weftResult_t ipcWrite(void* connection, void* dstRemote, uint64_t dstOffset, void* srcMemory, uint64_t srcOffset,
                      uint64_t bytes) {
  return guard([&] {
    auto* c = checked<IpcConnection>(connection, Tag::kConnection, "cuda_ipc connection");
    auto* dst = checked<IpcRemote>(dstRemote, Tag::kRemote, "cuda_ipc imported memory (destination)");
    auto* src = checked<IpcRegion>(srcMemory, Tag::kRegion, "cuda_ipc registration (source)");
    checkRange(dstOffset, bytes, dst->size, "destination");
    checkRange(srcOffset, bytes, src->size, "source");
    if (bytes == 0) return;
    std::lock_guard<std::mutex> lock(c->pendingMutex);
    ScopedDevice on(c->device);
    issuePending(c);
    if (bytes <= kFusedWriteMaxBytes) {
      c->pending = PendingWrite{dst->mapped + dstOffset, src->address + srcOffset, bytes};
      return;
    }
    rt::check(rt::copyAsync(dst->mapped + dstOffset, src->address + srcOffset, bytes, c->stream),
              "enqueueing a copy of " + std::to_string(bytes) + " bytes to pid " + std::to_string(c->peer.pid));
  });
}

weftResult_t ipcAtomicAdd(void* connection, void* dstRemote, uint64_t dstOffset, uint64_t value) {
  return guard([&] {
    auto* c = checked<IpcConnection>(connection, Tag::kConnection, "cuda_ipc connection");
    auto* dst = checked<IpcRemote>(dstRemote, Tag::kRemote, "cuda_ipc imported memory (destination)");
    checkRange(dstOffset, sizeof(uint64_t), dst->size, "atomicAdd destination");
    uint8_t* word = dst->mapped + dstOffset;
    if (reinterpret_cast<uintptr_t>(word) % alignof(uint64_t) != 0) {
      throw IpcFailure(weftInvalidArgument,
                       "atomicAdd destination offset " + std::to_string(dstOffset) + " is not 8-byte aligned");
    }
    std::lock_guard<std::mutex> lock(c->pendingMutex);
    ScopedDevice on(c->device);
    // Same stream as the writes: the kernel starts only after every earlier copy has completed. A held-back write
    // is done by the same kernel, before its add.
    const PendingWrite w = c->pending;
    c->pending = PendingWrite{};
    rt::check(rt::launchCopyAndSignalAdd(w.dst, w.src, w.bytes, reinterpret_cast<uint64_t*>(word), value, c->stream),
              "launching the signal kernel for pid " + std::to_string(c->peer.pid));
  });
}

weftResult_t ipcFlush(void* connection, uint64_t timeoutNs) {
  return guard([&] {
    auto* c = checked<IpcConnection>(connection, Tag::kConnection, "cuda_ipc connection");
    const auto start = std::chrono::steady_clock::now();
    const auto deadline = start + std::chrono::nanoseconds(clampTimeoutNs(timeoutNs));
    rt::Event event = nullptr;
    {
      ScopedDevice on(c->device);
      {
        std::lock_guard<std::mutex> lock(c->pendingMutex);
        issuePending(c);
      }
      rt::check(rt::eventCreate(&event), "creating an event");
      rt::Error e = rt::eventRecord(event, c->stream);
      if (e != rt::kSuccess) {
        (void)rt::eventDestroy(event);
        rt::check(e, "recording an event on the connection's stream");
      }
    }
    struct EventGuard {
      rt::Event e;
      ~EventGuard() { (void)rt::eventDestroy(e); }
    } eventGuard{event};
    // Short copies finish within microseconds: spin first, then back off so a long flush does not burn a core.
    for (uint64_t polls = 0;; ++polls) {
      rt::Error e = rt::eventQuery(event);
      if (e == rt::kSuccess) break;
      rt::forget(rt::kNotReady);
      if (e != rt::kNotReady) {
        rt::check(e, "waiting for the writes to pid " + std::to_string(c->peer.pid) + " (a copy or signal failed)");
      }
      const auto now = std::chrono::steady_clock::now();
      if (now >= deadline) {
        const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now - start).count();
        throw IpcFailure(weftTimeout, "flush to pid " + std::to_string(c->peer.pid) + " timed out after " +
                                          std::to_string(ms) + " ms with copies still pending");
      }
      if (polls < 2000) continue;
      if (polls < 4000) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
    }
    // The copies land in the peer's memory even after it died (the mapping keeps the allocation), so only this
    // tells the caller that nobody will read them.
    if (!c->peerInThisProcess && c->peerInOurPidNamespace && certainlyExited(c->peer)) {
      throw IpcFailure(weftRemoteError, "peer pid " + std::to_string(c->peer.pid) +
                                            " has exited: the data written to it will never be read");
    }
  });
}

const weftTransport_v1 kCudaIpcTransport = {
    .structSize = sizeof(weftTransport_v1),
    .abiVersion = weftTransportAbiVersion_v1,
    .name = "cuda_ipc",
    .lastError = ipcLastError,
    .init = ipcInit,
    .finalize = ipcFinalize,
    .deviceCount = ipcDeviceCount,
    .deviceInfo = ipcDeviceInfo,
    .createEndpoint = ipcCreateEndpoint,
    .destroyEndpoint = ipcDestroyEndpoint,
    .connect = ipcConnect,
    .closeConnection = ipcCloseConnection,
    .registerMemory = ipcRegisterMemory,
    .deregisterMemory = ipcDeregisterMemory,
    .importMemory = ipcImportMemory,
    .releaseMemory = ipcReleaseMemory,
    .write = ipcWrite,
    .atomicAdd = ipcAtomicAdd,
    .flush = ipcFlush,
    .progress = nullptr,  // progresses by itself
};

}  // namespace
}  // namespace weft::cuda_ipc

extern "C" WEFT_TRANSPORT_PLUGIN_EXPORT const weftTransport_v1* weftTransportPlugin_v1(void) {
  return &weft::cuda_ipc::kCudaIpcTransport;
}
