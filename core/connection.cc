#include <weft/connection.hpp>
#include <weft/error.hpp>

#include "connection_impl.hpp"
#include "registered_memory_impl.hpp"

namespace weft {

namespace {

// Checks [offset, offset + bytes) against a buffer of `size` without overflowing.
void checkRange(const char* what, uint64_t offset, uint64_t bytes, uint64_t size, int rank) {
  if (offset > size || bytes > size - offset) {
    throw Error(ErrorCode::kInvalidArgument, std::string(what) + " range [" + std::to_string(offset) + ", +" +
                                                 std::to_string(bytes) + ") is outside rank " + std::to_string(rank) +
                                                 "'s registered " + std::to_string(size) + " bytes");
  }
}

}  // namespace

Connection::Connection(std::unique_ptr<detail::ConnectionImpl> impl) : impl_(std::move(impl)) {}
Connection::~Connection() = default;

const TransportRemoteMemory& detail::ConnectionImpl::remoteOf(const RegisteredMemory& dst) {
  if (!dst) throw Error(ErrorCode::kInvalidArgument, "destination is an empty RegisteredMemory");
  if (dst.impl() == cachedDst) return *cachedRemote;
  const auto& impl = *dst.impl();
  if (impl.local || impl.descriptor.rank != remoteRank) {
    throw Error(ErrorCode::kInvalidArgument, "destination memory belongs to rank " +
                                                 std::to_string(impl.descriptor.rank) + (impl.local ? " (local)" : "") +
                                                 ", not to this connection's peer rank " + std::to_string(remoteRank));
  }
  auto it = impl.remoteRegistrations.find(transport);
  if (it == impl.remoteRegistrations.end()) {
    throw Error(ErrorCode::kInvalidArgument,
                "rank " + std::to_string(remoteRank) + "'s memory was not imported over transport '" + transport + "'");
  }
  cachedDst = dst.impl();
  cachedRemote = &it->second;
  return it->second;
}

const TransportMemory& detail::ConnectionImpl::localOf(const RegisteredMemory& src) {
  if (!src || !src.isLocal()) throw Error(ErrorCode::kInvalidArgument, "write source must be a local registration");
  if (src.impl() == cachedSrc) return *cachedLocal;
  auto it = src.impl()->localRegistrations.find(transport);
  if (it == src.impl()->localRegistrations.end()) {
    throw Error(ErrorCode::kInvalidArgument, "write source is not registered with transport '" + transport + "'");
  }
  cachedSrc = src.impl();
  cachedLocal = &it->second;
  return it->second;
}

void Connection::write(const RegisteredMemory& dst, uint64_t dstOffset, const RegisteredMemory& src, uint64_t srcOffset,
                       uint64_t bytes) {
  const TransportRemoteMemory& remote = impl_->remoteOf(dst);
  const TransportMemory& local = impl_->localOf(src);
  checkRange("write destination", dstOffset, bytes, dst.size(), dst.rank());
  checkRange("write source", srcOffset, bytes, src.size(), src.rank());
  if (bytes == 0) return;
  impl_->connection.write(remote, dstOffset, local, srcOffset, bytes);
}

void Connection::atomicAdd(const RegisteredMemory& dst, uint64_t dstOffset, uint64_t value) {
  const TransportRemoteMemory& remote = impl_->remoteOf(dst);
  checkRange("atomicAdd destination", dstOffset, sizeof(uint64_t), dst.size(), dst.rank());
  if (dstOffset % sizeof(uint64_t) != 0) {
    throw Error(ErrorCode::kInvalidArgument,
                "atomicAdd offset " + std::to_string(dstOffset) + " is not 8-byte aligned");
  }
  impl_->connection.atomicAdd(remote, dstOffset, value);
}

void Connection::flush(std::chrono::milliseconds timeout) { impl_->connection.flush(timeout); }

uint32_t Connection::progress() { return impl_->endpoint.plugin()->progress(); }

const std::string& Connection::transport() const { return impl_->transport; }

int Connection::remoteRank() const { return impl_->remoteRank; }

bool Connection::writesGpuMemory() const { return impl_->writesGpuMemory; }

bool Connection::mapsPeerMemory() const { return impl_->mapsPeerMemory; }

}  // namespace weft
