/// A one-sided link to one peer over one transport: write, atomicAdd (the signal) and flush.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <weft/registered_memory.hpp>

namespace weft {

namespace detail {
struct ConnectionImpl;
}

/// A connection made by Communicator::connect. Operations are posted in order; write and atomicAdd may
/// complete asynchronously until flush returns. One thread at a time may post on a connection.
class Connection {
 public:
  /// Copies `bytes` from local `src` at `srcOffset` into the peer's `dst` at `dstOffset`. Both ranges are
  /// bounds-checked (kInvalidArgument); `dst` must belong to this connection's peer and `src` to this rank.
  void write(const RegisteredMemory& dst, uint64_t dstOffset, const RegisteredMemory& src, uint64_t srcOffset,
             uint64_t bytes);

  /// Adds `value` to the 64-bit word at `dstOffset` (8-byte aligned) of the peer's `dst`, after every earlier
  /// write on this connection is visible to the peer. This is how a signal is sent.
  void atomicAdd(const RegisteredMemory& dst, uint64_t dstOffset, uint64_t value);

  /// Returns once every earlier write and atomicAdd has completed; throws kTimeout after `timeout`. Some transports
  /// (libfabric over tcp and shm) confirm delivery by asking the peer: its transport answers for 100 ms after this
  /// side's last signal once it closes, and a barrier before teardown makes sure of it.
  void flush(std::chrono::milliseconds timeout = std::chrono::seconds(30));

  /// Drives the transport's progress once from this thread and returns how many events it handled; 0 at once for
  /// transports that progress by themselves. Connections over one transport share its progress: calling it on one
  /// of them serves all. ProxyService's threads call it while idle; a host thread that polls for a peer's signal
  /// over libfabric may call it too.
  uint32_t progress();

  /// The transport carrying this connection ("host", "libfabric", ...).
  const std::string& transport() const;

  /// The peer's rank.
  int remoteRank() const;

  /// Whether writes and atomicAdds over this connection can land in the peer's GPU memory. False where the
  /// transport reaches no GPU memory or only copies GPU sources through host memory (libfabric without
  /// FI_HMEM): GPU-side waiters then wait on host memory mapped for the GPU.
  bool writesGpuMemory() const;

  /// Whether peer memory imported over this transport is mapped for loads and stores here (cuda_ipc, host), which
  /// MemoryChannel needs.
  bool mapsPeerMemory() const;

  explicit Connection(std::unique_ptr<detail::ConnectionImpl> impl);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

 private:
  std::unique_ptr<detail::ConnectionImpl> impl_;
};

}  // namespace weft
