/// Host2HostSemaphore: a monotonic 64-bit counter that a host thread of one rank signals over a Connection
/// and a host thread of the peer waits on.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <weft/communicator.hpp>

namespace weft {

/// A semaphore between this rank and the peer of `connection`. Construction is pairwise and collective
/// (both ranks construct one with the same tag): each side allocates its inbound counter in shared host
/// memory, registers it and sends it to the other.
class Host2HostSemaphore {
 public:
  Host2HostSemaphore(Communicator& comm, std::shared_ptr<Connection> connection, int tag);

  /// Increments the peer's inbound counter by one, ordered after every earlier write on the connection.
  void signal();

  /// Consumes one signal if one has arrived (acquire): returns whether it did.
  bool poll();

  /// Waits for the next signal (acquire), driving the connection's progress while it spins (Connection::progress).
  /// Throws Error(kTimeout) naming the peer, the expected and the seen value when `budget` runs out.
  void wait(std::chrono::nanoseconds budget = std::chrono::seconds(30));

  /// Signals received so far (relaxed read of the inbound counter).
  uint64_t received() const;

  /// Signals consumed by poll/wait so far.
  uint64_t expected() const { return expected_; }

 private:
  std::shared_ptr<Connection> connection_;
  std::shared_ptr<void> inboundStorage_;
  uint64_t* inbound_ = nullptr;
  RegisteredMemory localInbound_;
  RegisteredMemory remoteInbound_;
  uint64_t expected_ = 0;
  int peer_ = -1;
  int rank_ = -1;
};

}  // namespace weft
