// AutoRegistrations: the allocations a rank's collectives run on, registered with every peer on first use, so that
// unregistered buffers go zero-copy too after a few calls. No rank ever waits for another here: a rank shares an
// allocation when a call first touches it and goes on staging; peers import it at their next call that polls and
// answer; once every peer has, the rank's offers name it. Offers are checked on the GPU against each rank's table
// (exchangeOffers), so every rank decides alike whether a call runs zero-copy whatever state the others are in.
#pragma once

#include <chrono>

#include <weft/communicator.hpp>
#include <weft/gpu.hpp>
#include <weft/registered_memory.hpp>

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

namespace weft::detail {

/// The allocation a buffer lies in: [base, base + bytes), and a number that no other allocation of this process had,
/// so that memory freed and allocated again at the same address is told apart.
struct AllocationIdentity {
  uint8_t* base = nullptr;
  uint64_t bytes = 0;
  uint64_t serial = 0;
};

/// The allocation holding [p, p + bytes) when peers could map it: GPU memory the runtime knows as device memory
/// (GPU builds), memory from allocSharedHostMemory (host builds). nullopt otherwise.
std::optional<AllocationIdentity> identifyAllocation(const void* p, uint64_t bytes);

class AutoRegistrations {
 public:
  /// Writes one entry of the registration table (host copy and, on GPU builds, device copy) before returning:
  /// `owner`'s registration in `slot` is mapped at `base` (null: none) and is generation `generation`.
  using EntryWriter = std::function<void(uint32_t slot, int owner, uint8_t* base, uint64_t generation)>;

  /// Registrations go into table slots [firstSlot, firstSlot + slots) with transports for memory of `kind`.
  AutoRegistrations(Communicator& comm, uint32_t firstSlot, uint32_t slots, MemoryKind kind, EntryWriter write);
  ~AutoRegistrations();
  AutoRegistrations(const AutoRegistrations&) = delete;
  AutoRegistrations& operator=(const AutoRegistrations&) = delete;

  /// Starts an operation that may run zero-copy, on `stream`: notes whether the stream is being captured (then
  /// nothing is shared, imported or written until a later operation). Called before its find calls.
  void startOperation(hipStream_t stream);

  /// Takes in what peers sent since the last poll (their allocations to import, their answers, their releases) and
  /// closes imports no launched work uses any more. Never waits for a peer. Called at each operation that may run
  /// zero-copy, after its find calls (so that a peer that sees this rank's answer has seen its shares before it);
  /// `stream` is the operation's (releases wait on its earlier work). Returns whether one of this rank's shares
  /// got all its answers meanwhile (then `find` may name it now).
  bool poll(hipStream_t stream);

  /// The registration key of the allocation holding [p, p + bytes) and p's offset in it, when every peer has it
  /// mapped; -1 otherwise, after starting to share that allocation when it is new. An allocation that overlaps one
  /// shared earlier means the earlier was freed: that one is released first.
  int64_t find(const void* p, uint64_t bytes, uint64_t* offset);

  /// Waits at most `budget` for every peer to answer the allocations this rank began to share and has not waited
  /// for yet, taking in the peers' messages meanwhile (peers doing the same in the same operation import this
  /// rank's allocations while it imports theirs, so all go live in the operation that first touched them). Each
  /// allocation is waited for once at most: a peer that does not poll in time leaves it to the later operations, as
  /// without a wait. Returns whether it waited for any (then `find` may now name them). Not while capturing.
  bool settle(hipStream_t stream, std::chrono::nanoseconds budget);

  /// Counts one launched operation that polled (releases wait until this rank launched every operation that may
  /// still use the released allocation).
  void launched() { ++launched_; }

  /// Allocations shared with every peer and usable now (for tests and logs).
  uint32_t live() const;

 private:
  struct Message;
  enum class State : uint8_t { kFree, kSharing, kLive, kRefused, kReleasing };
  struct OwnSlot {
    State state = State::kFree;
    AllocationIdentity allocation;
    uint64_t generation = 0;
    RegisteredMemory local;
    int answers = 0;
    bool refused = false;
    bool settled = false;  // settle() has waited for this share once
  };
  struct Import {
    RegisteredMemory remote;
    uint64_t generation = 0;
  };
  struct PendingRelease {
    int owner;
    uint32_t slot;
    uint64_t generation;
    uint64_t after;  // the owner's launched count when it released: this rank must have launched as many
    hipEvent_t done = nullptr;
  };

  void send(int peer, const Message& m);
  void handle(int peer, const Message& m, hipStream_t stream);
  void release(uint32_t slot);
  void finishReleases(hipStream_t stream);
  bool closeImport(PendingRelease& r, hipStream_t stream);

  Communicator& comm_;
  const uint32_t firstSlot_;
  const MemoryKind kind_;
  const EntryWriter write_;
  const int rank_;
  const int size_;
  uint64_t launched_ = 0;
  bool capturing_ = false;  // the current operation's stream is being captured into a graph
  bool answered_ = false;   // a share of this rank got its last answer since poll last reported
  std::vector<OwnSlot> own_;
  std::vector<std::vector<Import>> imports_;  // [owner][slot]
  std::vector<PendingRelease> releases_;
  std::vector<AllocationIdentity> unshareable_;  // allocations this rank could not register: not tried again
};

}  // namespace weft::detail
