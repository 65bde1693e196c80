#include <weft/device.hpp>
#include <weft/error.hpp>
#include <weft/host_semaphore.hpp>
#include <weft/shared_host_memory.hpp>

namespace weft {

Host2HostSemaphore::Host2HostSemaphore(Communicator& comm, std::shared_ptr<Connection> connection, int tag)
    : connection_(std::move(connection)) {
  if (!connection_) throw Error(ErrorCode::kInvalidArgument, "Host2HostSemaphore needs a connection");
  peer_ = connection_->remoteRank();
  rank_ = comm.rank();
  inboundStorage_ = allocSharedHostMemory(sizeof(uint64_t));
  inbound_ = static_cast<uint64_t*>(inboundStorage_.get());
  localInbound_ = comm.registerMemory(inbound_, sizeof(uint64_t), MemoryKind::kHost);
  comm.sendMemory(localInbound_, peer_, tag);
  remoteInbound_ = comm.recvMemory(peer_, tag);
}

void Host2HostSemaphore::signal() { connection_->atomicAdd(remoteInbound_, 0, 1); }

bool Host2HostSemaphore::poll() {
  if (atomicLoad<MemoryOrder::kAcquire>(inbound_) > expected_) {
    ++expected_;
    return true;
  }
  return false;
}

void Host2HostSemaphore::wait(std::chrono::nanoseconds budget) {
  const uint64_t want = expected_ + 1;
  // The waiting thread drives the transport's progress itself (libfabric: reads its completion queue, which applies
  // the peer's signal), as a raw libfabric loop's waiter does: one thread on the path instead of two.
  bool ok = spinWaitUntil(
      [&] {
        if (atomicLoad<MemoryOrder::kAcquire>(inbound_) >= want) return true;
        connection_->progress();
        return atomicLoad<MemoryOrder::kAcquire>(inbound_) >= want;
      },
      WaitBudget{static_cast<uint64_t>(budget.count())});
  if (!ok) {
    throw Error(ErrorCode::kTimeout, "rank " + std::to_string(rank_) + ": host2host semaphore wait for rank " +
                                         std::to_string(peer_) + " ran out after " +
                                         std::to_string(budget.count() / 1000000) + " ms (expected " +
                                         std::to_string(want) + ", saw " + std::to_string(received()) + ")");
  }
  expected_ = want;
}

uint64_t Host2HostSemaphore::received() const { return atomicLoad<MemoryOrder::kRelaxed>(inbound_); }

}  // namespace weft
