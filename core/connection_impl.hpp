// The state behind Connection (core-internal).
#pragma once

#include <string>
#include <weft/connection.hpp>

#include "transport_plugin.hpp"

namespace weft::detail {

struct ConnectionImpl {
  std::string transport;
  int remoteRank = -1;
  TransportEndpoint endpoint;
  TransportConnection connection;

  /// The imported form of `dst` over this connection's transport; throws kInvalidArgument when `dst` is not
  /// this peer's memory or was not imported over this transport.
  const TransportRemoteMemory& remoteOf(const RegisteredMemory& dst) const;
};

}  // namespace weft::detail
