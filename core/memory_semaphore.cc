#include <string>
#include <weft/error.hpp>
#include <weft/gpu.hpp>
#include <weft/memory_semaphore.hpp>
#include <weft/shared_host_memory.hpp>

namespace weft {

namespace {

// One zeroed 64-bit word of GPU memory, freed with its last owner.
std::shared_ptr<void> allocGpuWord(const char* what) {
  void* p = nullptr;
  checkGpu(hipMalloc(&p, sizeof(uint64_t)), what);
  std::shared_ptr<void> owned(p, [](void* q) { (void)hipFree(q); });
  checkGpu(hipMemset(p, 0, sizeof(uint64_t)), what);
  return owned;
}

}  // namespace

MemoryKind defaultSemaphoreMemoryKind() {
  return kGpuPlatform != GpuPlatform::kNone && gpuDeviceCount() > 0 ? MemoryKind::kGpu : MemoryKind::kHost;
}

MemoryDevice2DeviceSemaphore::MemoryDevice2DeviceSemaphore(Communicator& comm, std::shared_ptr<Connection> connection,
                                                           int tag, MemoryKind kind)
    : connection_(std::move(connection)), kind_(kind), rank_(comm.rank()) {
  if (!connection_) throw Error(ErrorCode::kInvalidArgument, "MemoryDevice2DeviceSemaphore needs a connection");
  peer_ = connection_->remoteRank();
  const std::string who = "rank " + std::to_string(rank_) + ": memory semaphore with rank " + std::to_string(peer_);
  if (kind_ == MemoryKind::kGpu) {
    if (kGpuPlatform == GpuPlatform::kNone || gpuDeviceCount() == 0) {
      throw Error(ErrorCode::kNotSupported, who + ": GPU counters need a GPU build and a GPU (use MemoryKind::kHost)");
    }
    inboundStorage_ = allocGpuWord("hipMalloc of a memory semaphore's inbound counter");
    expectedStorage_ = allocGpuWord("hipMalloc of a memory semaphore's expected count");
  } else {
    inboundStorage_ = allocSharedHostMemory(sizeof(uint64_t));
    expectedStorage_ = std::make_shared<uint64_t>(0);
  }
  localInbound_ = comm.registerMemory(inboundStorage_.get(), sizeof(uint64_t), kind_);
  comm.sendMemory(localInbound_, peer_, tag);
  remoteInbound_ = comm.recvMemory(peer_, tag);
  if (remoteInbound_.data() == nullptr) {
    throw Error(ErrorCode::kInvalidArgument, who + ": the peer's counter is not mapped by transport '" +
                                                 connection_->transport() +
                                                 "' (a memory semaphore needs a transport that maps peer memory)");
  }
  if (remoteInbound_.size() < sizeof(uint64_t) || remoteInbound_.kind() != kind_) {
    throw Error(ErrorCode::kInvalidArgument,
                who +
                    ": the peer's counter is not an 8-byte word of the same memory kind (both sides must choose the "
                    "same MemoryKind)");
  }
  // Both counters on one GPU: device-scope signals and waits suffice (the handle's deviceScope). Both ranks
  // exchange where they run (whatever the kind, so that both make the same calls), so both pick the same scope.
  const uint64_t mine = comm.gpuPlacementKey();
  uint64_t theirs = 0;
  comm.bootstrap().send(&mine, sizeof(mine), peer_, tag);
  comm.bootstrap().recv(&theirs, sizeof(theirs), peer_, tag);
  sameGpu_ = kind_ == MemoryKind::kGpu && mine == theirs;
}

MemoryDevice2DeviceSemaphore::DeviceHandle MemoryDevice2DeviceSemaphore::deviceHandle(
    const DeviceWaitOptions& options) const {
  DeviceHandle h{};
  h.inbound = static_cast<uint64_t*>(inboundStorage_.get());
  h.remoteInbound = static_cast<uint64_t*>(remoteInbound_.data());
  h.expected = static_cast<uint64_t*>(expectedStorage_.get());
  h.budgetNs = options.budgetNs != 0 ? options.budgetNs : defaultWaitBudgetNs();
  h.site = WaitSite{options.record, rank_, peer_, options.channel};
  h.deviceScope = sameGpu_ ? 1u : 0u;
  return h;
}

}  // namespace weft
