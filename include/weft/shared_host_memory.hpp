/// Host memory that other processes of this host can map: backed by an anonymous shared file (memfd).
#pragma once

#include <cstdint>
#include <memory>

namespace weft {

/// Allocates `bytes` (rounded up to whole pages) of zeroed host memory backed by a memfd, mapped read/write, and
/// records it so that findSharedHostMemory (and so registerMemory with the host transport) can find its file.
/// The memory is unmapped and its file closed when the last copy of the returned pointer goes.
/// Throws Error(kInvalidArgument) for 0 or absurd sizes, Error(kSystemError) when memfd_create/ftruncate/mmap fail.
/// Thread-safe. After fork() a child shares the pages with its parent (MAP_SHARED).
std::shared_ptr<void> allocSharedHostMemory(uint64_t bytes);

/// Looks up the live allocation holding [ptr, ptr + bytes). On success writes the backing file descriptor (owned by
/// the allocation: valid while it lives; dup() it to keep it longer) into `*fd` and the offset of `ptr` inside that
/// file into `*offset`, and returns true; returns false (outputs untouched) when no single allocation covers the
/// range. Thread-safe.
bool findSharedHostMemory(const void* ptr, uint64_t bytes, int* fd, uint64_t* offset);

/// A live allocation of allocSharedHostMemory: where it starts, its size (whole pages) and a number no other
/// allocation of this process had, so that memory freed and allocated again at the same address is told apart.
struct SharedHostAllocation {
  void* base = nullptr;
  uint64_t bytes = 0;
  uint64_t serial = 0;
};

/// Looks up the live allocation holding [ptr, ptr + bytes) and writes it into `*out`; false (out untouched) when no
/// single allocation covers the range. Thread-safe.
bool findSharedHostAllocation(const void* ptr, uint64_t bytes, SharedHostAllocation* out);

}  // namespace weft
