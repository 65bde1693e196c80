#include "ibverbs_signal.hpp"

#include <cstring>

namespace weft::ibverbs {

void SignalTargets::add(uint32_t key, uint8_t* base, uint64_t size, bool hostMemory) {
  std::lock_guard<std::mutex> lock(mutex_);
  targets_[key] = Target{base, size, hostMemory};
}

void SignalTargets::remove(uint32_t key) {
  std::lock_guard<std::mutex> lock(mutex_);
  targets_.erase(key);
}

std::string SignalTargets::apply(const void* message, uint64_t bytes) {
  if (message == nullptr || bytes != sizeof(SignalMessage)) {
    return "signal message of " + std::to_string(bytes) + " bytes (expected " + std::to_string(sizeof(SignalMessage)) +
           ")";
  }
  SignalMessage m;
  std::memcpy(&m, message, sizeof(m));
  if (m.magic != kSignalMagic) return "signal message with a foreign magic";
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = targets_.find(m.regionKey);
  if (it == targets_.end()) return "signal to region " + std::to_string(m.regionKey) + ", which is not registered";
  const Target& t = it->second;
  if (!t.hostMemory) {
    return "signal to region " + std::to_string(m.regionKey) +
           ", which is GPU memory: signals without atomics reach host memory only";
  }
  if (t.size < sizeof(uint64_t) || m.offset > t.size - sizeof(uint64_t)) {
    return "signal offset " + std::to_string(m.offset) + " beyond region " + std::to_string(m.regionKey) + " of " +
           std::to_string(t.size) + " bytes";
  }
  uint8_t* word = t.base + m.offset;
  if (reinterpret_cast<uintptr_t>(word) % alignof(uint64_t) != 0) {
    return "signal offset " + std::to_string(m.offset) + " is not 8-byte aligned";
  }
  // seq_cst: the receive completion that carried this message came after the data of earlier writes was placed, and
  // the release half orders those bytes before the new token value for a reader that acquires it.
  __atomic_fetch_add(reinterpret_cast<uint64_t*>(word), m.value, __ATOMIC_SEQ_CST);
  return "";
}

}  // namespace weft::ibverbs
