/// The host-side object model of a job: registers memory, exchanges it with peers and connects to them.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>
#include <weft/bootstrap.hpp>
#include <weft/config.hpp>
#include <weft/connection.hpp>
#include <weft/registered_memory.hpp>

namespace weft {

namespace detail {
struct CommunicatorImpl;
}

/// Where a rank runs, as every rank reported it at setup.
struct PeerInfo {
  int rank = -1;
  uint64_t hostHash = 0;  ///< same value = same host (hostname, boot id and network namespace)
  uint32_t pid = 0;
};

/// One rank's view of the job. Construction is collective (an allGather of every rank's host and pid).
/// The calls that talk to one peer (sendMemory/recvMemory, connect) are pairwise: both ranks call them with
/// the same tag. Not thread-safe; use one thread per communicator or lock around it.
class Communicator {
 public:
  /// Sets up over `bootstrap`, choosing transports as `config` says.
  explicit Communicator(std::shared_ptr<Bootstrap> bootstrap, Config config = Config::load());
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  /// This rank and the job size.
  int rank() const;
  int size() const;

  /// The bootstrap the communicator talks through.
  Bootstrap& bootstrap() const;

  /// The configuration in use.
  const Config& config() const;

  /// Every rank's host and pid.
  const std::vector<PeerInfo>& peers() const;

  /// Names the GPU this rank runs on, the current device when called (its host and PCI bus id; host builds and
  /// machines without a GPU: the host alone). Two ranks with the same key share one GPU, or one host's memory.
  uint64_t gpuPlacementKey() const;

  /// How this rank reaches `peer`: same process, same host or another host.
  PeerClass peerClass(int peer) const;

  /// The transport that connects this rank to `peer`: the first entry of the config's list for that peer
  /// class whose plugin loads and offers a device. Throws kPluginError listing why each entry was refused.
  std::string transportFor(int peer) const;

  /// The transport that carries memory of `kind` to `peer`: the first entry of the config's list for that peer
  /// class whose plugin loads and has a device that can register `kind`. One list thus serves both kinds (the
  /// default same_host list ["cuda_ipc", "host"] sends GPU memory over cuda_ipc and host memory over host).
  std::string transportFor(int peer, MemoryKind kind) const;

  /// Registers `bytes` at `ptr` with every transport this rank uses to reach its peers with memory of `kind`.
  /// Host memory that peers on this host should reach must come from allocSharedHostMemory(). The memory must stay
  /// allocated until this Communicator is destroyed: a network transport receives peers' writes into it for as long as
  /// its endpoint is open, including writes still in flight when a link died.
  RegisteredMemory registerMemory(void* ptr, uint64_t bytes, MemoryKind kind);

  /// Sends a local registration to `peer` (pairs with recvMemory on the peer, same tag).
  void sendMemory(const RegisteredMemory& memory, int peer, int tag);

  /// Receives `peer`'s registration and makes it reachable over transportFor(peer, its kind) (imports and, where the
  /// transport can, maps it).
  RegisteredMemory recvMemory(int peer, int tag);

  /// Connects to `peer` over transportFor(peer). Both ranks call it with the same tag.
  std::shared_ptr<Connection> connect(int peer, int tag);

  /// Connects to `peer` over transportFor(peer, kind): the connection that moves memory of `kind` (for GPU
  /// memory, from the endpoint of the current GPU). Both ranks call it with the same tag and kind.
  std::shared_ptr<Connection> connect(int peer, int tag, MemoryKind kind);

 private:
  std::unique_ptr<detail::CommunicatorImpl> impl_;
};

/// The identity of this host as used for PeerInfo::hostHash (WEFT_HOST_ID overrides it).
uint64_t localHostHash();

}  // namespace weft
