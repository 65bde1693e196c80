/// Memory registered with weft: a local buffer that peers can write to, or a peer's buffer seen from here.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace weft {

/// Where a buffer lives.
enum class MemoryKind : uint8_t { kHost = 0, kGpu = 1 };

namespace detail {
struct RegisteredMemoryImpl;
}

/// A registered buffer. Made by Communicator::registerMemory (local) or Communicator::recvMemory (a peer's).
/// Copies share the registration; it is released when the last copy goes.
class RegisteredMemory {
 public:
  RegisteredMemory() = default;

  /// The buffer in this process: the local pointer, or the mapped peer memory when the transport maps it
  /// for load/store; nullptr for a peer's buffer that is reachable only through a Connection.
  void* data() const;

  /// Length in bytes.
  uint64_t size() const;

  /// The rank that owns the buffer.
  int rank() const;

  /// True when this process owns the buffer.
  bool isLocal() const;

  /// Host or GPU memory.
  MemoryKind kind() const;

  /// Names of the transports this buffer is registered with (local) or reachable through (remote).
  std::vector<std::string> transports() const;

  /// True when this object refers to a registration.
  explicit operator bool() const { return impl_ != nullptr; }

  /// The serialized form a peer needs to reach the buffer (a local registration only).
  std::vector<uint8_t> serialize() const;

  /// Internal: the shared state.
  const std::shared_ptr<detail::RegisteredMemoryImpl>& impl() const { return impl_; }

  explicit RegisteredMemory(std::shared_ptr<detail::RegisteredMemoryImpl> impl) : impl_(std::move(impl)) {}

 private:
  std::shared_ptr<detail::RegisteredMemoryImpl> impl_;
};

/// The parsed wire form of a RegisteredMemory: what was registered where, with one opaque handle per transport.
struct RegisteredMemoryDescriptor {
  /// One transport's handle for the buffer.
  struct Entry {
    std::string transport;
    std::vector<uint8_t> handle;
  };
  int rank = -1;
  uint64_t size = 0;
  MemoryKind kind = MemoryKind::kHost;
  uint64_t hostHash = 0;
  uint32_t pid = 0;
  uint64_t address = 0;  ///< the owner's address (meaningful in the owner's process only)
  std::vector<Entry> entries;

  /// Current format version; a blob of another version is refused.
  static constexpr uint16_t kVersion = 1;
  /// Limits that bound what a malformed blob can make us allocate.
  static constexpr uint32_t kMaxEntries = 16;
  static constexpr uint32_t kMaxTransportName = 64;
  static constexpr uint32_t kMaxHandleBytes = 4096;

  /// Encodes this descriptor.
  std::vector<uint8_t> serialize() const;

  /// Decodes and validates a blob; throws Error(kProtocolError) saying what is wrong with it.
  static RegisteredMemoryDescriptor deserialize(const uint8_t* data, size_t size);
};

}  // namespace weft
