// Signals without RDMA atomics: the sender posts a send carrying {region key, offset, delta}; the receiver thread
// looks the region up among this process's registrations and applies the add with a CPU atomic.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>

namespace weft::ibverbs {

/// The payload of one signal send. Both ends are little-endian x86-64/aarch64 hosts; the magic catches anything else.
struct SignalMessage {
  uint32_t magic;      ///< kSignalMagic
  uint32_t regionKey;  ///< the destination registration's key at the receiver (its blob's regionKey)
  uint64_t offset;     ///< byte offset of the 64-bit word inside the registration
  uint64_t value;      ///< what to add
};
static_assert(sizeof(SignalMessage) == 24);

inline constexpr uint32_t kSignalMagic = 0x53564257;  // "WBVS"

/// The registrations a receiver applies signals to. Thread-safe: registration and removal from user threads, apply
/// from the receiver thread; remove() waits for an apply in progress, so no add lands in freed memory.
class SignalTargets {
 public:
  /// Makes [base, base + size) the target of signals naming `key`. `hostMemory` false (GPU memory the CPU cannot
  /// address atomically) keeps the key known but refuses signals to it.
  void add(uint32_t key, uint8_t* base, uint64_t size, bool hostMemory);
  /// Forgets `key` (unknown keys are ignored).
  void remove(uint32_t key);
  /// Applies one received message of `bytes` bytes. Returns "" when applied, else why not (short or foreign
  /// message, unknown key, offset out of bounds or not 8-byte aligned, GPU memory): the receiver logs it.
  std::string apply(const void* message, uint64_t bytes);

 private:
  struct Target {
    uint8_t* base;
    uint64_t size;
    bool hostMemory;
  };
  std::mutex mutex_;
  std::map<uint32_t, Target> targets_;
};

}  // namespace weft::ibverbs
