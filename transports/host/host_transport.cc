// The host transport plugin: CPU memory shared between processes of one host. Memory must live in a file
// (weft::allocSharedHostMemory's memfd); an importer gets that file from the owner's fd server and maps it, so
// write is a memcpy into the peer's pages and atomicAdd a 64-bit atomic on them.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <cstdarg>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <string>

#include "host_failure.hpp"
#include "host_fd_server.hpp"
#include "host_wire.hpp"

namespace weft::host {
namespace {

thread_local std::string tLastError;

/// Default budget for each socket read/write the fd server does for one client.
constexpr std::chrono::milliseconds kDefaultServerIoTimeout{2000};
/// Largest region accepted (bounds a malformed blob's mmap length).
constexpr uint64_t kMaxRegionBytes = uint64_t{1} << 48;

/// Tags at the start of each object, so a handle of the wrong kind is refused instead of misused.
enum class Tag : uint32_t {
  kState = 0x53544857,
  kEndpoint = 0x45544857,
  kConnection = 0x43544857,
  kRegion = 0x52544857,
  kRemote = 0x49544857,
  kDead = 0
};

struct HostState;

struct HostEndpoint {
  Tag tag = Tag::kEndpoint;
  HostState* state;
  uint64_t id;
};

struct HostConnection {
  Tag tag = Tag::kConnection;
  HostEndpoint* endpoint;
  uint32_t peerPid;
};

struct HostRegion {
  Tag tag = Tag::kRegion;
  HostState* state;
  uint64_t id;
  int fd;  // our dup of the caller's file, handed to importers
  uint8_t token[kTokenBytes];
  uint8_t* address;
  uint64_t size;
  uint64_t fdOffset;
};

struct HostRemote {
  Tag tag = Tag::kRemote;
  HostState* state;
  uint8_t* mapped;  // the peer's first registered byte, in this process
  uint64_t size;
  void* mapBase;  // what munmap needs; nullptr for a same-process import (nothing was mapped)
  uint64_t mapLength;
};

struct HostState {
  Tag tag = Tag::kState;
  weftHostServices_v1 services{};
  std::string hostId;
  std::chrono::milliseconds serverIoTimeout{kDefaultServerIoTimeout};
  std::mutex mutex;
  std::map<uint64_t, HostRegion*> regions;
  uint64_t nextRegionId = 1;
  std::atomic<uint64_t> nextEndpointId{1};
  std::unique_ptr<HostFdServer> server;
};

void logf(const HostState* s, int32_t level, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
void logf(const HostState* s, int32_t level, const char* fmt, ...) {
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
    // lastError is the most recent failure: success leaves it alone, which keeps a thread_local access
    // (through __tls_get_addr in a dlopen'd object) off the data path.
    body();
    return weftSuccess;
  } catch (const HostFailure& e) {
    tLastError = e.what();
    return e.code();
  } catch (const std::bad_alloc&) {
    tLastError = "host transport: out of memory";
    return weftOutOfMemory;
  } catch (const std::exception& e) {
    tLastError = std::string("host transport: internal error: ") + e.what();
    return weftInternalError;
  } catch (...) {
    tLastError = "host transport: unknown internal error";
    return weftInternalError;
  }
}

template <class T>
T* checked(void* object, Tag tag, const char* what) {
  auto* o = static_cast<T*>(object);
  if (o == nullptr || o->tag != tag) throw HostFailure(weftInvalidArgument, std::string("not a valid ") + what);
  return o;
}

void requireOut(const void* p, const char* what) {
  if (p == nullptr) throw HostFailure(weftInvalidArgument, std::string("output pointer ") + what + " is NULL");
}

std::string readFirstLine(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

/// "<boot id>/<hostname>/<network namespace>": processes agree on it only when they share the kernel (so memfds
/// can be mapped) and the network namespace (so the abstract unix socket is reachable).
std::string makeHostId() {
  std::string boot = readFirstLine("/proc/sys/kernel/random/boot_id");
  if (boot.empty()) boot = "unknown-boot";
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0) std::strcpy(host, "unknown-host");
  char ns[128] = {};
  ssize_t n = readlink("/proc/self/ns/net", ns, sizeof(ns) - 1);
  std::string id = boot + "/" + host + "/" + (n > 0 ? std::string(ns, n) : std::string("net:unknown"));
  if (id.size() >= static_cast<size_t>(kHostIdBytes)) id.resize(kHostIdBytes - 1);
  return id;
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

/// Copies `value` into a fixed field, NUL-padded.
template <size_t N>
void setField(char (&field)[N], const std::string& value) {
  std::memset(field, 0, N);
  std::memcpy(field, value.data(), value.size() < N - 1 ? value.size() : N - 1);
}

/// The field as a string, or a failure when it has no NUL (a malformed blob).
template <size_t N>
std::string getField(const char (&field)[N], const char* what) {
  size_t len = strnlen(field, N);
  if (len == N) throw HostFailure(weftInvalidArgument, std::string("malformed blob: ") + what + " is not terminated");
  return std::string(field, len);
}

bool tokensEqual(const uint8_t* a, const uint8_t* b) {
  uint8_t diff = 0;  // no early exit: the time taken says nothing about how much matched
  for (int i = 0; i < kTokenBytes; ++i) diff |= static_cast<uint8_t>(a[i] ^ b[i]);
  return diff == 0;
}

uint64_t deadlineNs(uint64_t timeoutNs) {
  constexpr uint64_t kMax = uint64_t{365} * 24 * 3600 * 1000000000ull;  // a year: keeps time_point arithmetic sane
  return timeoutNs > kMax ? kMax : timeoutNs;
}

FdLookup lookupRegion(HostState* s, const FdRequest& request) {
  FdLookup out;
  std::lock_guard<std::mutex> lock(s->mutex);
  auto it = s->regions.find(request.regionId);
  if (it == s->regions.end()) {
    out.status = weftInvalidArgument;
    out.message = "region " + std::to_string(request.regionId) + " is not registered (deregistered already?)";
    return out;
  }
  HostRegion* r = it->second;
  if (!tokensEqual(r->token, request.token)) {
    out.status = weftInvalidArgument;
    out.message = "token does not match region " + std::to_string(request.regionId);
    logf(s, weftLogWarn, "refused region %" PRIu64 ": token does not match", request.regionId);
    return out;
  }
  out.fd = fcntl(r->fd, F_DUPFD_CLOEXEC, 0);
  if (out.fd < 0) {
    out.status = weftSystemError;
    out.message = std::string("owner could not dup the region's file: ") + std::strerror(errno);
    return out;
  }
  out.status = weftSuccess;
  out.size = r->size;
  out.fdOffset = r->fdOffset;
  return out;
}

// ---- entry points ----

const char* hostLastError() { return tLastError.c_str(); }

weftResult_t hostInit(const weftHostServices_v1* host, uint64_t numOptions, const char* const* keys,
                      const char* const* values, void** stateOut) {
  return guard([&] {
    requireOut(stateOut, "state");
    if (numOptions > 0 && (keys == nullptr || values == nullptr)) {
      throw HostFailure(weftInvalidArgument, "options given without key or value arrays");
    }
    auto s = std::make_unique<HostState>();
    if (host != nullptr && host->structSize >= offsetof(weftHostServices_v1, log) + sizeof(host->log)) {
      s->services = *host;
    }
    for (uint64_t i = 0; i < numOptions; ++i) {
      std::string key = keys[i] != nullptr ? keys[i] : "", value = values[i] != nullptr ? values[i] : "";
      if (key == "io_timeout_ms") {
        char* end = nullptr;
        errno = 0;
        unsigned long long ms = std::strtoull(value.c_str(), &end, 10);
        if (value.empty() || *end != '\0' || errno != 0 || ms == 0 || ms > 600000) {
          throw HostFailure(weftInvalidArgument, "option io_timeout_ms='" + value + "' is not 1..600000");
        }
        s->serverIoTimeout = std::chrono::milliseconds(ms);
      } else {
        throw HostFailure(weftInvalidArgument, "unknown option '" + key + "' (the host transport knows io_timeout_ms)");
      }
    }
    s->hostId = makeHostId();
    uint64_t nonce = 0;
    randomBytes(&nonce, sizeof(nonce));
    char name[kSocketNameBytes];
    std::snprintf(name, sizeof(name), "weft-host-%d-%016" PRIx64, static_cast<int>(getpid()), nonce);
    HostState* raw = s.get();
    s->server = std::make_unique<HostFdServer>(
        name, [raw](const FdRequest& r) { return lookupRegion(raw, r); }, s->serverIoTimeout);
    logf(raw, weftLogDebug, "host transport up: host id %s, fd server @%s", raw->hostId.c_str(), name);
    *stateOut = s.release();
  });
}

weftResult_t hostFinalize(void* state) {
  return guard([&] {
    auto* s = checked<HostState>(state, Tag::kState, "host transport state");
    s->server.reset();  // stops and joins the server thread first: nothing looks at regions after this
    if (!s->regions.empty()) {
      logf(s, weftLogWarn, "finalize with %zu registrations still live: freeing them", s->regions.size());
    }
    for (auto& [id, r] : s->regions) {
      close(r->fd);
      r->tag = Tag::kDead;
      delete r;
    }
    s->regions.clear();
    s->tag = Tag::kDead;
    delete s;
  });
}

weftResult_t hostDeviceCount(void* state, uint32_t* count) {
  return guard([&] {
    checked<HostState>(state, Tag::kState, "host transport state");
    requireOut(count, "count");
    *count = 1;
  });
}

weftResult_t hostDeviceInfo(void* state, uint32_t device, weftDeviceInfo_v1* info) {
  return guard([&] {
    checked<HostState>(state, Tag::kState, "host transport state");
    requireOut(info, "info");
    if (device != 0)
      throw HostFailure(weftInvalidArgument, "host transport has one device (0), not " + std::to_string(device));
    auto covers = [&](size_t offset, size_t size) { return info->structSize >= offset + size; };
    if (covers(offsetof(weftDeviceInfo_v1, name), sizeof(info->name))) {
      std::memset(info->name, 0, sizeof(info->name));
      std::strcpy(info->name, "host");
    }
    if (covers(offsetof(weftDeviceInfo_v1, flags), sizeof(info->flags))) {
      info->flags = weftDeviceHostMemory | weftDeviceLoadStore;
    }
    if (covers(offsetof(weftDeviceInfo_v1, numaNode), sizeof(info->numaNode))) info->numaNode = -1;
    if (covers(offsetof(weftDeviceInfo_v1, gpuDevice), sizeof(info->gpuDevice))) info->gpuDevice = -1;
  });
}

weftResult_t hostCreateEndpoint(void* state, uint32_t device, void** endpointOut, void* blob, uint64_t blobCapacity,
                                uint64_t* blobUsed) {
  return guard([&] {
    auto* s = checked<HostState>(state, Tag::kState, "host transport state");
    requireOut(endpointOut, "endpoint");
    requireOut(blob, "blob");
    requireOut(blobUsed, "blobUsed");
    if (device != 0) throw HostFailure(weftInvalidArgument, "host transport has no device " + std::to_string(device));
    if (blobCapacity < sizeof(EndpointBlob)) {
      throw HostFailure(weftInvalidArgument, "endpoint blob buffer of " + std::to_string(blobCapacity) +
                                                 " bytes is smaller than " + std::to_string(sizeof(EndpointBlob)));
    }
    auto e = std::make_unique<HostEndpoint>();
    e->state = s;
    e->id = s->nextEndpointId.fetch_add(1);
    EndpointBlob b{};
    b.magic = kEndpointMagic;
    b.version = kWireVersion;
    setField(b.hostId, s->hostId);
    b.pid = static_cast<uint32_t>(getpid());
    b.endpointId = e->id;
    std::memcpy(blob, &b, sizeof(b));
    *blobUsed = sizeof(b);
    *endpointOut = e.release();
  });
}

weftResult_t hostDestroyEndpoint(void* endpoint) {
  return guard([&] {
    auto* e = checked<HostEndpoint>(endpoint, Tag::kEndpoint, "host transport endpoint");
    e->tag = Tag::kDead;
    delete e;
  });
}

weftResult_t hostConnect(void* endpoint, const void* peerBlob, uint64_t peerBlobBytes, uint64_t /*timeoutNs*/,
                         void** connectionOut) {
  return guard([&] {
    auto* e = checked<HostEndpoint>(endpoint, Tag::kEndpoint, "host transport endpoint");
    requireOut(connectionOut, "connection");
    if (peerBlob == nullptr || peerBlobBytes != sizeof(EndpointBlob)) {
      throw HostFailure(weftInvalidArgument, "peer endpoint blob has " + std::to_string(peerBlobBytes) +
                                                 " bytes, a host transport endpoint blob has " +
                                                 std::to_string(sizeof(EndpointBlob)));
    }
    EndpointBlob b;
    std::memcpy(&b, peerBlob, sizeof(b));
    if (b.magic != kEndpointMagic || b.version != kWireVersion) {
      throw HostFailure(weftInvalidArgument,
                        "peer blob is not a host transport endpoint of wire version " + std::to_string(kWireVersion));
    }
    std::string peerHost = getField(b.hostId, "host id");
    if (peerHost != e->state->hostId) {
      throw HostFailure(weftInvalidArgument, "peer endpoint (pid " + std::to_string(b.pid) + ") is on host '" +
                                                 peerHost + "', this process is on '" + e->state->hostId +
                                                 "': the host transport joins processes of one host only");
    }
    // Nothing to set up: data moves through memory imported with importMemory.
    auto c = std::make_unique<HostConnection>();
    c->endpoint = e;
    c->peerPid = b.pid;
    *connectionOut = c.release();
  });
}

weftResult_t hostCloseConnection(void* connection) {
  return guard([&] {
    auto* c = checked<HostConnection>(connection, Tag::kConnection, "host transport connection");
    c->tag = Tag::kDead;
    delete c;
  });
}

weftResult_t hostRegisterMemory(void* state, const weftMemoryDescriptor_v1* desc, void** memoryOut, void* blob,
                                uint64_t blobCapacity, uint64_t* blobUsed) {
  return guard([&] {
    auto* s = checked<HostState>(state, Tag::kState, "host transport state");
    requireOut(memoryOut, "memory");
    requireOut(blob, "blob");
    requireOut(blobUsed, "blobUsed");
    if (desc == nullptr || desc->structSize < offsetof(weftMemoryDescriptor_v1, gpuDevice)) {
      throw HostFailure(weftInvalidArgument, "memory descriptor is NULL or too small");
    }
    if (blobCapacity < sizeof(MemoryBlob)) {
      throw HostFailure(weftInvalidArgument, "memory blob buffer of " + std::to_string(blobCapacity) +
                                                 " bytes is smaller than " + std::to_string(sizeof(MemoryBlob)));
    }
    if (desc->kind != weftMemoryHost) {
      throw HostFailure(weftNotSupported,
                        "the host transport registers host memory only (kind " + std::to_string(desc->kind) + ")");
    }
    if (desc->address == 0 || desc->size == 0 || desc->size > kMaxRegionBytes) {
      throw HostFailure(weftInvalidArgument,
                        "buffer address is 0 or its size " + std::to_string(desc->size) + " is not in [1, 2^48]");
    }
    if (desc->fd < 0) {
      char what[160];
      std::snprintf(what, sizeof(what), "buffer 0x%" PRIx64 " (%" PRIu64 " bytes) is not backed by a shareable file",
                    desc->address, desc->size);
      throw HostFailure(weftNotSupported, std::string(what) +
                                              ": allocate it with weft::allocSharedHostMemory so other processes can "
                                              "map it");
    }
    struct stat st {};
    if (fstat(desc->fd, &st) != 0)
      throwErrno("fstat of the buffer's file descriptor " + std::to_string(desc->fd), errno);
    if (desc->fdOffset > static_cast<uint64_t>(st.st_size) ||
        desc->size > static_cast<uint64_t>(st.st_size) - desc->fdOffset) {
      throw HostFailure(weftInvalidArgument, "buffer [offset " + std::to_string(desc->fdOffset) + ", +" +
                                                 std::to_string(desc->size) + ") lies beyond its file of " +
                                                 std::to_string(st.st_size) + " bytes");
    }
    auto r = std::make_unique<HostRegion>();
    r->state = s;
    r->address = reinterpret_cast<uint8_t*>(desc->address);
    r->size = desc->size;
    r->fdOffset = desc->fdOffset;
    randomBytes(r->token, sizeof(r->token));
    r->fd = fcntl(desc->fd, F_DUPFD_CLOEXEC, 0);
    if (r->fd < 0) throwErrno("dup of the buffer's file descriptor", errno);
    MemoryBlob b{};
    b.magic = kMemoryMagic;
    b.version = kWireVersion;
    setField(b.hostId, s->hostId);
    setField(b.socketName, s->server->name());
    b.ownerPid = static_cast<uint32_t>(getpid());
    std::memcpy(b.token, r->token, sizeof(b.token));
    b.size = r->size;
    b.fdOffset = r->fdOffset;
    b.ownerAddress = desc->address;
    {
      std::lock_guard<std::mutex> lock(s->mutex);
      r->id = s->nextRegionId++;
      b.regionId = r->id;
      s->regions[r->id] = r.get();
    }
    std::memcpy(blob, &b, sizeof(b));
    *blobUsed = sizeof(b);
    *memoryOut = r.release();
  });
}

weftResult_t hostDeregisterMemory(void* memory) {
  return guard([&] {
    auto* r = checked<HostRegion>(memory, Tag::kRegion, "host transport registration");
    {
      std::lock_guard<std::mutex> lock(r->state->mutex);
      r->state->regions.erase(r->id);
    }
    close(r->fd);
    r->tag = Tag::kDead;
    delete r;
  });
}

weftResult_t hostImportMemory(void* state, const void* blob, uint64_t blobBytes, uint64_t timeoutNs, void** remoteOut,
                              uint64_t* mappedAddress) {
  return guard([&] {
    auto* s = checked<HostState>(state, Tag::kState, "host transport state");
    requireOut(remoteOut, "remote");
    requireOut(mappedAddress, "mappedAddress");
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::nanoseconds(deadlineNs(timeoutNs));
    if (blob == nullptr || blobBytes != sizeof(MemoryBlob)) {
      throw HostFailure(weftInvalidArgument, "memory blob has " + std::to_string(blobBytes) +
                                                 " bytes, a host transport memory blob has " +
                                                 std::to_string(sizeof(MemoryBlob)));
    }
    MemoryBlob b;
    std::memcpy(&b, blob, sizeof(b));
    if (b.magic != kMemoryMagic || b.version != kWireVersion) {
      throw HostFailure(weftInvalidArgument,
                        "blob is not a host transport memory handle of wire version " + std::to_string(kWireVersion));
    }
    std::string ownerHost = getField(b.hostId, "host id");
    std::string socketName = getField(b.socketName, "socket name");
    if (ownerHost != s->hostId) {
      throw HostFailure(weftInvalidArgument, "memory of pid " + std::to_string(b.ownerPid) +
                                                 " was registered on host '" + ownerHost + "', this process is on '" +
                                                 s->hostId + "': the host transport maps memory of one host only");
    }
    if (b.size == 0 || b.size > kMaxRegionBytes || b.fdOffset > kMaxRegionBytes) {
      throw HostFailure(weftInvalidArgument, "memory blob has an invalid size or offset");
    }
    auto remote = std::make_unique<HostRemote>();
    remote->state = s;
    remote->size = b.size;
    if (b.ownerPid == static_cast<uint32_t>(getpid()) && socketName == s->server->name()) {
      // Our own registration: it is mapped here already.
      std::lock_guard<std::mutex> lock(s->mutex);
      auto it = s->regions.find(b.regionId);
      if (it == s->regions.end() || !tokensEqual(it->second->token, b.token) || it->second->size != b.size) {
        throw HostFailure(weftInvalidArgument, "region " + std::to_string(b.regionId) +
                                                   " of this process is not registered or the token does not match");
      }
      remote->mapped = it->second->address;
    } else {
      FetchedFd got = fetchRegionFd(socketName, b.ownerPid, b.regionId, b.token, deadline);
      int fd = got.fd;
      struct FdCloser {
        int fd;
        ~FdCloser() { close(fd); }
      } closer{fd};
      if (got.size != b.size || got.fdOffset != b.fdOffset) {
        throw HostFailure(weftRemoteError, "owner pid " + std::to_string(b.ownerPid) + " describes region " +
                                               std::to_string(b.regionId) + " differently from the blob");
      }
      struct stat st {};
      if (fstat(fd, &st) != 0) throwErrno("fstat of the received region file", errno);
      if (b.fdOffset + b.size > static_cast<uint64_t>(st.st_size)) {
        throw HostFailure(weftRemoteError, "received region file is smaller than the region");
      }
      const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
      const uint64_t base = b.fdOffset / page * page;  // mmap offsets must be page aligned
      const uint64_t length = b.fdOffset - base + b.size;
      void* p = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, static_cast<off_t>(base));
      if (p == MAP_FAILED) throwErrno("mmap of " + std::to_string(length) + " bytes of the peer's region", errno);
      remote->mapBase = p;
      remote->mapLength = length;
      remote->mapped = static_cast<uint8_t*>(p) + (b.fdOffset - base);
    }
    *mappedAddress = reinterpret_cast<uint64_t>(remote->mapped);
    *remoteOut = remote.release();
  });
}

weftResult_t hostReleaseMemory(void* remoteHandle) {
  return guard([&] {
    auto* r = checked<HostRemote>(remoteHandle, Tag::kRemote, "host transport imported memory");
    if (r->mapBase != nullptr) munmap(r->mapBase, r->mapLength);
    r->tag = Tag::kDead;
    delete r;
  });
}

void checkRange(uint64_t offset, uint64_t bytes, uint64_t size, const char* what) {
  if (offset > size || bytes > size - offset) {
    throw HostFailure(weftInvalidArgument, std::string(what) + " range [" + std::to_string(offset) + ", +" +
                                               std::to_string(bytes) + ") exceeds its " + std::to_string(size) +
                                               " bytes");
  }
}

weftResult_t hostWrite(void* connection, void* dstRemote, uint64_t dstOffset, void* srcMemory, uint64_t srcOffset,
                       uint64_t bytes) {
  return guard([&] {
    checked<HostConnection>(connection, Tag::kConnection, "host transport connection");
    auto* dst = checked<HostRemote>(dstRemote, Tag::kRemote, "host transport imported memory (destination)");
    auto* src = checked<HostRegion>(srcMemory, Tag::kRegion, "host transport registration (source)");
    checkRange(dstOffset, bytes, dst->size, "destination");
    checkRange(srcOffset, bytes, src->size, "source");
    // Synchronous: the bytes are in the peer's pages when memcpy returns, so flush has nothing to wait for.
    std::memmove(dst->mapped + dstOffset, src->address + srcOffset, bytes);
  });
}

weftResult_t hostAtomicAdd(void* connection, void* dstRemote, uint64_t dstOffset, uint64_t value) {
  return guard([&] {
    checked<HostConnection>(connection, Tag::kConnection, "host transport connection");
    auto* dst = checked<HostRemote>(dstRemote, Tag::kRemote, "host transport imported memory (destination)");
    checkRange(dstOffset, sizeof(uint64_t), dst->size, "atomicAdd destination");
    uint8_t* word = dst->mapped + dstOffset;
    if (reinterpret_cast<uintptr_t>(word) % alignof(uint64_t) != 0) {
      throw HostFailure(weftInvalidArgument,
                        "atomicAdd destination offset " + std::to_string(dstOffset) + " is not 8-byte aligned");
    }
    // seq_cst includes release: the plain stores of earlier writes (on this thread, or on threads that synchronized
    // with it) become visible no later than the new counter value to a reader that loads it with acquire.
    __atomic_fetch_add(reinterpret_cast<uint64_t*>(word), value, __ATOMIC_SEQ_CST);
  });
}

weftResult_t hostFlush(void* connection, uint64_t /*timeoutNs*/) {
  return guard([&] {
    checked<HostConnection>(connection, Tag::kConnection, "host transport connection");
    // Writes and adds completed when they returned; the fence orders them before whatever the caller does next.
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
  });
}

const weftTransport_v1 kHostTransport = {
    .structSize = sizeof(weftTransport_v1),
    .abiVersion = weftTransportAbiVersion_v1,
    .name = "host",
    .lastError = hostLastError,
    .init = hostInit,
    .finalize = hostFinalize,
    .deviceCount = hostDeviceCount,
    .deviceInfo = hostDeviceInfo,
    .createEndpoint = hostCreateEndpoint,
    .destroyEndpoint = hostDestroyEndpoint,
    .connect = hostConnect,
    .closeConnection = hostCloseConnection,
    .registerMemory = hostRegisterMemory,
    .deregisterMemory = hostDeregisterMemory,
    .importMemory = hostImportMemory,
    .releaseMemory = hostReleaseMemory,
    .write = hostWrite,
    .atomicAdd = hostAtomicAdd,
    .flush = hostFlush,
    .progress = nullptr,  // progresses by itself
};

}  // namespace
}  // namespace weft::host

extern "C" WEFT_TRANSPORT_PLUGIN_EXPORT const weftTransport_v1* weftTransportPlugin_v1(void) {
  return &weft::host::kHostTransport;
}
