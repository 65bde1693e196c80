// The state behind Connection (core-internal).
#pragma once

#include <memory>
#include <string>
#include <weft/connection.hpp>

#include "registered_memory_impl.hpp"
#include "transport_plugin.hpp"

namespace weft::detail {

struct ConnectionImpl {
  std::string transport;
  int remoteRank = -1;
  TransportEndpoint endpoint;
  TransportConnection connection;
  bool writesGpuMemory = false;  ///< the transport can write and add into the peer's GPU memory
  bool mapsPeerMemory = false;   ///< the transport maps imported peer memory for load/store

  /// The imported form of `dst` over this connection's transport; throws kInvalidArgument when `dst` is not
  /// this peer's memory or was not imported over this transport.
  const TransportRemoteMemory& remoteOf(const RegisteredMemory& dst);

  /// The local registration of `src` over this connection's transport; throws kInvalidArgument otherwise.
  const TransportMemory& localOf(const RegisteredMemory& src);

  // The last memories used and their handles: a put loop reuses the same buffers, and the map lookups by
  // transport name cost more than the host transport's whole write of a small message. The shared_ptr keeps
  // the cached registration alive, so a freed and reallocated one can never alias it.
  std::shared_ptr<RegisteredMemoryImpl> cachedDst;
  const TransportRemoteMemory* cachedRemote = nullptr;
  std::shared_ptr<RegisteredMemoryImpl> cachedSrc;
  const TransportMemory* cachedLocal = nullptr;
};

}  // namespace weft::detail
