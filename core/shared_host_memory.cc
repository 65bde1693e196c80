#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <weft/error.hpp>
#include <weft/shared_host_memory.hpp>

#include "logging.hpp"

namespace weft {
namespace {

/// Largest allocation accepted: far beyond any machine, small enough that page rounding cannot overflow.
constexpr uint64_t kMaxSharedHostBytes = uint64_t{1} << 48;

struct Allocation {
  uint64_t bytes;
  int fd;
  uint64_t serial;
};

/// Live allocations by base address. Leaked on purpose: allocations may be freed during static destruction.
struct Registry {
  std::mutex mutex;
  std::map<uintptr_t, Allocation> byBase;
  uint64_t allocations = 0;  // serials handed out
};

Registry& registry() {
  static Registry* r = new Registry();
  return *r;
}

}  // namespace

std::shared_ptr<void> allocSharedHostMemory(uint64_t bytes) {
  if (bytes == 0 || bytes > kMaxSharedHostBytes) {
    throw Error(ErrorCode::kInvalidArgument,
                "allocSharedHostMemory: size " + std::to_string(bytes) + " is not in [1, 2^48] bytes");
  }
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t rounded = (bytes + page - 1) / page * page;
  int fd = memfd_create("weft-shared-host-memory", MFD_CLOEXEC);
  if (fd < 0) throwSystemError("allocSharedHostMemory: memfd_create", errno);
  if (ftruncate(fd, static_cast<off_t>(rounded)) != 0) {
    int e = errno;
    close(fd);
    throwSystemError("allocSharedHostMemory: ftruncate to " + std::to_string(rounded) + " bytes", e);
  }
  void* p = mmap(nullptr, rounded, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    int e = errno;
    close(fd);
    throwSystemError("allocSharedHostMemory: mmap of " + std::to_string(rounded) + " bytes", e);
  }
  {
    std::lock_guard<std::mutex> lock(registry().mutex);
    registry().byBase[reinterpret_cast<uintptr_t>(p)] = Allocation{rounded, fd, ++registry().allocations};
  }
  logDebug(LogSubsys::kInit, "shared host memory: {} bytes at {} (memfd {})", rounded, p, fd);
  return std::shared_ptr<void>(p, [rounded, fd](void* q) {
    {
      std::lock_guard<std::mutex> lock(registry().mutex);
      registry().byBase.erase(reinterpret_cast<uintptr_t>(q));
    }
    munmap(q, rounded);
    close(fd);
  });
}

namespace {

// The allocation holding [ptr, ptr + bytes), or null; the caller holds the registry's mutex.
const std::pair<const uintptr_t, Allocation>* holding(const void* ptr, uint64_t bytes) {
  const uintptr_t begin = reinterpret_cast<uintptr_t>(ptr);
  auto& map = registry().byBase;
  auto it = map.upper_bound(begin);  // first allocation starting after ptr
  if (it == map.begin()) return nullptr;
  --it;
  const uint64_t inside = begin - it->first;
  if (inside >= it->second.bytes || bytes > it->second.bytes - inside) return nullptr;
  return &*it;
}

}  // namespace

bool findSharedHostMemory(const void* ptr, uint64_t bytes, int* fd, uint64_t* offset) {
  std::lock_guard<std::mutex> lock(registry().mutex);
  const auto* a = holding(ptr, bytes);
  if (a == nullptr) return false;
  if (fd != nullptr) *fd = a->second.fd;
  if (offset != nullptr) *offset = reinterpret_cast<uintptr_t>(ptr) - a->first;
  return true;
}

bool findSharedHostAllocation(const void* ptr, uint64_t bytes, SharedHostAllocation* out) {
  std::lock_guard<std::mutex> lock(registry().mutex);
  const auto* a = holding(ptr, bytes);
  if (a == nullptr) return false;
  out->base = reinterpret_cast<void*>(a->first);
  out->bytes = a->second.bytes;
  out->serial = a->second.serial;
  return true;
}

}  // namespace weft
