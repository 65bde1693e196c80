#include <string>
#include <weft/error.hpp>
#include <weft/memory_channel.hpp>

namespace weft {

MemoryChannel::MemoryChannel(std::shared_ptr<MemoryDevice2DeviceSemaphore> semaphore, RegisteredMemory remote,
                             RegisteredMemory local, RegisteredMemory packetBuffer)
    : semaphore_(std::move(semaphore)),
      remote_(std::move(remote)),
      local_(std::move(local)),
      packetBuffer_(std::move(packetBuffer)) {
  if (!semaphore_) throw Error(ErrorCode::kInvalidArgument, "MemoryChannel needs a semaphore");
  const std::string who =
      "rank " + std::to_string(semaphore_->rank()) + ": memory channel to rank " + std::to_string(semaphore_->peer());
  if (!remote_ || remote_.isLocal() || remote_.rank() != semaphore_->peer()) {
    throw Error(ErrorCode::kInvalidArgument, who + ": the remote memory must be a registration received from the peer");
  }
  if (remote_.data() == nullptr) {
    throw Error(ErrorCode::kInvalidArgument,
                who + ": the remote memory is not mapped into this process (its transport does not map peer memory)");
  }
  if (!local_ || !local_.isLocal()) {
    throw Error(ErrorCode::kInvalidArgument, who + ": the local memory must be a registration of this rank");
  }
  if (packetBuffer_ && !packetBuffer_.isLocal()) {
    throw Error(ErrorCode::kInvalidArgument, who + ": the packet buffer must be a registration of this rank");
  }
  const MemoryKind kind = semaphore_->kind();
  for (const RegisteredMemory* m : {&remote_, &local_, &packetBuffer_}) {
    if (*m && m->kind() != kind) {
      throw Error(ErrorCode::kInvalidArgument, who + ": every buffer must be of the semaphore's memory kind (" +
                                                   (kind == MemoryKind::kGpu ? "GPU" : "host") + ")");
    }
  }
}

MemoryChannel::DeviceHandle MemoryChannel::deviceHandle(const DeviceWaitOptions& options) const {
  DeviceHandle h{};
  h.semaphore = semaphore_->deviceHandle(options);
  h.remote = static_cast<uint8_t*>(remote_.data());
  h.remoteBytes = remote_.size();
  h.local = static_cast<uint8_t*>(local_.data());
  h.localBytes = local_.size();
  h.packets = packetBuffer_ ? static_cast<uint8_t*>(packetBuffer_.data()) : nullptr;
  h.packetBytes = packetBuffer_ ? packetBuffer_.size() : 0;
  return h;
}

}  // namespace weft
