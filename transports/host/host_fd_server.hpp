// Handing region files between processes: each plugin instance runs a server on an abstract unix socket that sends
// a region's file descriptor (SCM_RIGHTS) to whoever presents its region id and token.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>

#include <weft/plugin/transport.h>

#include "host_wire.hpp"

namespace weft::host {

/// The answer to a request: a result code, the region's file (dup()ed, closed by the server after sending), its size
/// and offset, and the reason when refused.
struct FdLookup {
  weftResult_t status = weftInvalidArgument;
  int fd = -1;
  uint64_t size = 0;
  uint64_t fdOffset = 0;
  std::string message;
};

/// Serves region files on abstract socket `@name` from a thread; stopped and joined by the destructor.
class HostFdServer {
 public:
  /// `lookup` answers one request (called on the server thread; must be thread-safe against registration);
  /// `ioTimeout` bounds every read and write to one client, so a stuck client delays others by at most that.
  /// Throws HostFailure when the socket cannot be made.
  HostFdServer(std::string name, std::function<FdLookup(const FdRequest&)> lookup, std::chrono::milliseconds ioTimeout);
  ~HostFdServer();
  HostFdServer(const HostFdServer&) = delete;
  HostFdServer& operator=(const HostFdServer&) = delete;

  /// The socket's name (without the leading NUL of the abstract namespace).
  const std::string& name() const { return name_; }

 private:
  void run();
  void serve(int client);

  std::string name_;
  std::function<FdLookup(const FdRequest&)> lookup_;
  std::chrono::milliseconds ioTimeout_;
  int listenFd_ = -1;
  int stopFd_ = -1;
  std::thread thread_;
};

/// What fetchRegionFd received: the file (owned by the caller) and the owner's size and offset.
struct FetchedFd {
  int fd = -1;
  uint64_t size = 0;
  uint64_t fdOffset = 0;
};

/// Asks the server on `@socketName` (owned by process `ownerPid`, for messages) for region `regionId` with `token`,
/// within `deadline`. Throws HostFailure: weftRemoteError when the owner is gone or refuses (with its reason),
/// weftTimeout when it does not answer in time, weftSystemError for local failures.
FetchedFd fetchRegionFd(const std::string& socketName, uint32_t ownerPid, uint64_t regionId,
                        const uint8_t (&token)[kTokenBytes], std::chrono::steady_clock::time_point deadline);

}  // namespace weft::host
