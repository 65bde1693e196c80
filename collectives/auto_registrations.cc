#include "auto_registrations.hpp"

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <weft/bootstrap.hpp>
#include <weft/error.hpp>
#include <weft/shared_host_memory.hpp>

#include "collective_algorithms.hpp"
#include "logging.hpp"

#if WEFT_BUILD_GPU_CUDA
#include <cuda.h>
#endif

namespace weft::detail {

namespace {

// One tag for the whole conversation: messages of one (peer, tag) arrive in order, so a release always follows the
// share it releases, and each direction has its own mailbox (messages are keyed by sender).
constexpr int kAutoRegistrationTag = 0x57450001;

bool covers(const AllocationIdentity& a, const void* p, uint64_t bytes) {
  const auto* b = static_cast<const uint8_t*>(p);
  return b >= a.base && static_cast<uint64_t>(b - a.base) <= a.bytes &&
         a.bytes - static_cast<uint64_t>(b - a.base) >= bytes;
}

bool same(const AllocationIdentity& a, const AllocationIdentity& b) {
  return a.base == b.base && a.bytes == b.bytes && a.serial == b.serial;
}

bool overlaps(const AllocationIdentity& a, const AllocationIdentity& b) {
  return a.base < b.base + b.bytes && b.base < a.base + a.bytes;
}

#if WEFT_BUILD_GPU_CUDA
using PointerGetAttributes = CUresult (*)(unsigned int, CUpointer_attribute*, void**, CUdeviceptr);

// cuPointerGetAttributes through the runtime (no link against libcuda); null when the driver lacks it.
PointerGetAttributes pointerGetAttributes() {
  static const PointerGetAttributes fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult status{};
    if (cudaGetDriverEntryPointByVersion("cuPointerGetAttributes", &f, 12000, cudaEnableDefault, &status) !=
            cudaSuccess ||
        status != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      return PointerGetAttributes{nullptr};
    }
    return reinterpret_cast<PointerGetAttributes>(f);
  }();
  return fn;
}

bool capturing(hipStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &status) != cudaSuccess) {
    (void)cudaGetLastError();
    return true;  // unknown: do nothing that capture forbids
  }
  return status != cudaStreamCaptureStatusNone;
}
#elif WEFT_BUILD_GPU_HIP
bool capturing(hipStream_t stream) {
  hipStreamCaptureStatus status = hipStreamCaptureStatusNone;
  if (hipStreamIsCapturing(stream, &status) != hipSuccess) {
    (void)hipGetLastError();
    return true;
  }
  return status != hipStreamCaptureStatusNone;
}
#endif

}  // namespace

std::optional<AllocationIdentity> identifyAllocation(const void* p, uint64_t bytes) {
  AllocationIdentity a;
#if WEFT_BUILD_GPU_CUDA
  const PointerGetAttributes fn = pointerGetAttributes();
  if (fn == nullptr) return std::nullopt;
  unsigned int type = 0;
  CUdeviceptr start = 0;
  size_t size = 0;
  unsigned long long id = 0;
  CUpointer_attribute attributes[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                      CU_POINTER_ATTRIBUTE_RANGE_SIZE, CU_POINTER_ATTRIBUTE_BUFFER_ID};
  void* data[] = {&type, &start, &size, &id};
  if (fn(4, attributes, data, reinterpret_cast<CUdeviceptr>(p)) != CUDA_SUCCESS) return std::nullopt;
  if (type != CU_MEMORYTYPE_DEVICE || start == 0) return std::nullopt;
  a.base = reinterpret_cast<uint8_t*>(start);
  a.bytes = size;
  a.serial = id;
#elif WEFT_BUILD_GPU_HIP
  unsigned int type = 0;
  void* start = nullptr;
  size_t size = 0;
  unsigned long long id = 0;
  void* ptr = const_cast<void*>(p);
  if (hipPointerGetAttribute(&type, HIP_POINTER_ATTRIBUTE_MEMORY_TYPE, ptr) != hipSuccess ||
      hipPointerGetAttribute(&start, HIP_POINTER_ATTRIBUTE_RANGE_START_ADDR, ptr) != hipSuccess ||
      hipPointerGetAttribute(&size, HIP_POINTER_ATTRIBUTE_RANGE_SIZE, ptr) != hipSuccess ||
      hipPointerGetAttribute(&id, HIP_POINTER_ATTRIBUTE_BUFFER_ID, ptr) != hipSuccess) {
    (void)hipGetLastError();
    return std::nullopt;
  }
  if (type != static_cast<unsigned int>(hipMemoryTypeDevice) || start == nullptr) return std::nullopt;
  a.base = static_cast<uint8_t*>(start);
  a.bytes = size;
  a.serial = id;
#else
  SharedHostAllocation s;
  if (!findSharedHostAllocation(p, bytes, &s)) return std::nullopt;
  a.base = static_cast<uint8_t*>(s.base);
  a.bytes = s.bytes;
  a.serial = s.serial;
#endif
  if (!covers(a, p, bytes)) return std::nullopt;
  return a;
}

/// What travels on kAutoRegistrationTag; a kShare is followed by the registration (Communicator::sendMemory).
struct AutoRegistrations::Message {
  enum Type : uint32_t {
    kShare = 1,     // owner -> peer: import my registration (slot, generation)
    kRelease = 2,   // owner -> peer: close it once you launched `after` operations and they finished
    kImported = 3,  // peer -> owner: mapped (the table holds it)
    kRefused = 4,   // peer -> owner: could not map it
    kClosed = 5,    // peer -> owner: released; the slot may be used again
  };
  uint32_t type;
  uint32_t slot;
  uint64_t generation;
  uint64_t after;
};

AutoRegistrations::AutoRegistrations(Communicator& comm, uint32_t firstSlot, uint32_t slots, MemoryKind kind,
                                     EntryWriter write)
    : comm_(comm),
      firstSlot_(firstSlot),
      kind_(kind),
      write_(std::move(write)),
      rank_(comm.rank()),
      size_(comm.size()),
      own_(slots),
      imports_(static_cast<size_t>(comm.size()), std::vector<Import>(slots)) {}

AutoRegistrations::~AutoRegistrations() {
#if WEFT_BUILD_GPU_CUDA || WEFT_BUILD_GPU_HIP
  for (PendingRelease& r : releases_) {
    if (r.done != nullptr) (void)hipEventDestroy(r.done);
  }
#endif
}

uint32_t AutoRegistrations::live() const {
  return static_cast<uint32_t>(
      std::count_if(own_.begin(), own_.end(), [](const OwnSlot& s) { return s.state == State::kLive; }));
}

void AutoRegistrations::send(int peer, const Message& m) {
  comm_.bootstrap().send(&m, sizeof(m), peer, kAutoRegistrationTag);
}

void AutoRegistrations::startOperation(hipStream_t stream) {
#if WEFT_BUILD_GPU_CUDA || WEFT_BUILD_GPU_HIP
  // Registrations, imports and table writes are not allowed while the stream is being captured (they may call what
  // capture forbids); they wait for a later call, and find only names what is shared already.
  capturing_ = capturing(stream);
#else
  (void)stream;
#endif
}

bool AutoRegistrations::poll(hipStream_t stream) {
  answered_ = false;
  if (capturing_) return false;
  Bootstrap& boot = comm_.bootstrap();
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    while (boot.hasMessage(p, kAutoRegistrationTag)) {
      Message m{};
      boot.recv(&m, sizeof(m), p, kAutoRegistrationTag);
      handle(p, m, stream);
    }
  }
  finishReleases(stream);
  return answered_;
}

void AutoRegistrations::handle(int peer, const Message& m, hipStream_t stream) {
  if (m.slot >= own_.size()) {
    throw Error(ErrorCode::kProtocolError, "collectives: rank " + std::to_string(peer) + " named registration slot " +
                                               std::to_string(m.slot) + " of " + std::to_string(own_.size()));
  }
  switch (m.type) {
    case Message::kShare: {
      Import& in = imports_[static_cast<size_t>(peer)][m.slot];
      bool ok = false;
      try {
        in.remote = comm_.recvMemory(peer, kAutoRegistrationTag);
        ok = in.remote.data() != nullptr;
      } catch (const Error& e) {
        logDebug(LogSubsys::kColl, "rank {}: cannot import rank {}'s allocation (slot {}): {}", rank_, peer, m.slot,
                 e.what());
      }
      if (ok) {
        in.generation = m.generation;
        write_(firstSlot_ + m.slot, peer, static_cast<uint8_t*>(in.remote.data()), m.generation);
      } else {
        in = Import{};
      }
      send(peer, Message{ok ? Message::kImported : Message::kRefused, m.slot, m.generation, 0});
      return;
    }
    case Message::kRelease:
      releases_.push_back(PendingRelease{peer, m.slot, m.generation, m.after});
      finishReleases(stream);
      return;
    case Message::kImported:
    case Message::kRefused: {
      OwnSlot& s = own_[m.slot];
      if (s.state != State::kSharing || s.generation != m.generation) return;  // answers to a slot released since
      s.refused = s.refused || m.type == Message::kRefused;
      if (++s.answers == size_ - 1) {
        s.state = s.refused ? State::kRefused : State::kLive;
        answered_ = true;
        logDebug(LogSubsys::kColl, "rank {}: allocation [{}, +{}) {} (slot {})", rank_,
                 static_cast<const void*>(s.allocation.base), s.allocation.bytes,
                 s.refused ? "refused by a peer: it stages" : "mapped by every peer: zero copy", m.slot);
      }
      return;
    }
    case Message::kClosed: {
      OwnSlot& s = own_[m.slot];
      if (s.state != State::kReleasing || s.generation != m.generation) return;
      if (++s.answers == size_ - 1) {
        write_(firstSlot_ + m.slot, rank_, nullptr, 0);
        s.local = RegisteredMemory{};
        s.state = State::kFree;
      }
      return;
    }
    default:
      throw Error(ErrorCode::kProtocolError, "collectives: rank " + std::to_string(peer) +
                                                 " sent an unknown registration message " + std::to_string(m.type));
  }
}

// Closes each released import once this rank launched every operation the owner may have offered it in and those
// finished (operations of a communicator run in launch order). The table entry goes first: later offers of that
// generation, if any, map nothing.
void AutoRegistrations::finishReleases(hipStream_t stream) {
  releases_.erase(
      std::remove_if(releases_.begin(), releases_.end(), [&](PendingRelease& r) { return closeImport(r, stream); }),
      releases_.end());
}

bool AutoRegistrations::closeImport(PendingRelease& r, hipStream_t stream) {
  if (launched_ < r.after) return false;
#if WEFT_BUILD_GPU_CUDA || WEFT_BUILD_GPU_HIP
  if (r.done == nullptr) {
    checkGpu(hipEventCreateWithFlags(&r.done, hipEventDisableTiming), "collectives: creating a release event");
    checkGpu(hipEventRecord(r.done, stream), "collectives: recording a release event");
    return false;
  }
  const hipError_t e = hipEventQuery(r.done);
  if (e == hipErrorNotReady) {
    (void)hipGetLastError();
    return false;
  }
  checkGpu(e, "collectives: waiting for the operations before a release");
  (void)hipEventDestroy(r.done);
  r.done = nullptr;
#else
  (void)stream;  // host teams finish before the call that launched them returns
#endif
  Import& in = imports_[static_cast<size_t>(r.owner)][r.slot];
  if (in.generation == r.generation && in.remote) {
    write_(firstSlot_ + r.slot, r.owner, nullptr, 0);
    in = Import{};
  }
  send(r.owner, Message{Message::kClosed, r.slot, r.generation, 0});
  return true;
}

void AutoRegistrations::release(uint32_t slot) {
  OwnSlot& s = own_[slot];
  logDebug(LogSubsys::kColl, "rank {}: releasing allocation [{}, +{}) (slot {}, generation {})", rank_,
           static_cast<const void*>(s.allocation.base), s.allocation.bytes, slot, s.generation);
  s.state = State::kReleasing;
  s.answers = 0;
  for (int p = 0; p < size_; ++p) {
    if (p != rank_) send(p, Message{Message::kRelease, slot, s.generation, launched_});
  }
}

bool AutoRegistrations::settle(hipStream_t stream, std::chrono::nanoseconds budget) {
  if (capturing_ || budget.count() <= 0) return false;
  auto waiting = [&] {
    return std::any_of(own_.begin(), own_.end(),
                       [](const OwnSlot& s) { return s.state == State::kSharing && !s.settled; });
  };
  if (!waiting()) return false;
  const auto deadline = std::chrono::steady_clock::now() + budget;
  while (waiting() && std::chrono::steady_clock::now() < deadline) {
    (void)poll(stream);  // never waits: takes in what has arrived (imports, answers)
    if (waiting()) std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
  for (OwnSlot& s : own_) {
    if (s.state == State::kSharing) s.settled = true;
  }
  return true;
}

int64_t AutoRegistrations::find(const void* p, uint64_t bytes, uint64_t* offset) {
  *offset = 0;
  const std::optional<AllocationIdentity> a = identifyAllocation(p, bytes);
  if (!a) return -1;
  for (uint32_t i = 0; i < own_.size(); ++i) {
    OwnSlot& s = own_[i];
    if (s.state == State::kFree || s.state == State::kReleasing || !same(s.allocation, *a)) continue;
    if (s.state != State::kLive) return -1;
    *offset = static_cast<uint64_t>(static_cast<const uint8_t*>(p) - a->base);
    return registrationKey(firstSlot_ + i, s.generation);
  }
  if (capturing_) return -1;
  // New to this rank. Allocations never overlap: one shared earlier that this one overlaps was freed.
  for (uint32_t i = 0; i < own_.size(); ++i) {
    OwnSlot& s = own_[i];
    if (s.state != State::kFree && s.state != State::kReleasing && overlaps(s.allocation, *a)) release(i);
  }
  unshareable_.erase(std::remove_if(unshareable_.begin(), unshareable_.end(),
                                    [&](const AllocationIdentity& u) { return overlaps(u, *a) && !same(u, *a); }),
                     unshareable_.end());
  if (std::any_of(unshareable_.begin(), unshareable_.end(), [&](const AllocationIdentity& u) { return same(u, *a); })) {
    return -1;
  }
  auto free = std::find_if(own_.begin(), own_.end(), [](const OwnSlot& s) { return s.state == State::kFree; });
  if (free == own_.end()) return -1;  // every slot in use: this allocation stages
  OwnSlot& s = *free;
  try {
    s.local = comm_.registerMemory(a->base, a->bytes, kind_);
  } catch (const Error& e) {
    logInfo(LogSubsys::kColl, "rank {}: allocation [{}, +{}) cannot be shared ({}); collectives on it stage", rank_,
            static_cast<const void*>(a->base), a->bytes, e.what());
    unshareable_.push_back(*a);
    return -1;
  }
  const auto slot = static_cast<uint32_t>(free - own_.begin());
  s.allocation = *a;
  s.generation += 1;
  s.answers = 0;
  s.refused = false;
  s.settled = false;
  s.state = State::kSharing;
  // This rank's own column too: the offer exchange checks every rank's offer, this rank's included, in the table.
  write_(firstSlot_ + slot, rank_, a->base, s.generation);
  logDebug(LogSubsys::kColl, "rank {}: sharing allocation [{}, +{}) (slot {}, generation {})", rank_,
           static_cast<const void*>(a->base), a->bytes, slot, s.generation);
  for (int q = 0; q < size_; ++q) {
    if (q == rank_) continue;
    send(q, Message{Message::kShare, slot, s.generation, 0});
    comm_.sendMemory(s.local, q, kAutoRegistrationTag);
  }
  return -1;
}

}  // namespace weft::detail
