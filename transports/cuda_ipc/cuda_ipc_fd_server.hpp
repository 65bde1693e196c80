// Passing the file descriptors of exported cuMem/hipMem allocations between processes: the owner serves them on an
// abstract unix socket (SCM_RIGHTS) to whoever presents a registration's id and token; an importer asks with a
// deadline. Header-only and free of GPU headers, so it is unit-tested on machines without a GPU.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <functional>
#include <string>
#include <thread>

#include "../common/process_exit.hpp"
#include "cuda_ipc_failure.hpp"
#include "cuda_ipc_wire.hpp"

namespace weft::cuda_ipc {

/// An owned file descriptor, closed on destruction.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { reset(); }
  UniqueFd(UniqueFd&& o) noexcept : fd_(o.release()) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = o.release();
    }
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  /// The descriptor, -1 when none.
  int get() const { return fd_; }
  /// Gives up ownership.
  int release() {
    int f = fd_;
    fd_ = -1;
    return f;
  }
  /// Closes the descriptor now.
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

namespace fdwire {

inline socklen_t abstractAddress(const std::string& name, sockaddr_un* addr) {
  std::memset(addr, 0, sizeof(*addr));
  addr->sun_family = AF_UNIX;
  if (name.empty() || name.size() + 1 > sizeof(addr->sun_path)) {
    throw IpcFailure(weftInvalidArgument, "fd server name '" + name + "' is empty or longer than a unix socket path");
  }
  std::memcpy(addr->sun_path + 1, name.data(), name.size());  // a leading NUL selects the abstract namespace
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
}

/// Polls `fd` for `events` until `deadline`; false when the deadline passed first.
inline bool pollUntil(int fd, short events, std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    int ms = left <= 0 ? 0 : (left > 600000 ? 600000 : static_cast<int>(left));
    pollfd p{fd, events, 0};
    int n = ::poll(&p, 1, ms);
    if (n > 0) return true;
    if (n == 0) {
      if (std::chrono::steady_clock::now() >= deadline) return false;
      continue;
    }
    if (errno != EINTR) throwErrno("poll on the fd server socket", errno);
  }
}

}  // namespace fdwire

/// The owner's answer to one request: status, the file to send (the server closes it after sending), the
/// allocation's size, and why it refused.
struct FdAnswer {
  weftResult_t status = weftInvalidArgument;
  UniqueFd fd;
  uint64_t allocationSize = 0;
  std::string message;
};

/// Serves registration files on abstract socket `@name` from one thread; stopped and joined by the destructor.
class FdServer {
 public:
  /// `lookup` answers one request on the server thread (it must be thread-safe against registration); `ioTimeout`
  /// bounds the exchange with one client, so a stuck client delays the others by at most that. Throws IpcFailure when
  /// the socket or the thread cannot be made (weftSystemError; a name already bound gives EADDRINUSE's text).
  FdServer(std::string name, std::function<FdAnswer(const FdRequest&)> lookup, std::chrono::milliseconds ioTimeout)
      : name_(std::move(name)), lookup_(std::move(lookup)), ioTimeout_(ioTimeout) {
    sockaddr_un addr;
    socklen_t len = fdwire::abstractAddress(name_, &addr);
    listen_ = UniqueFd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (listen_.get() < 0) throwErrno("socket(AF_UNIX, SOCK_SEQPACKET) for the fd server", errno);
    if (::bind(listen_.get(), reinterpret_cast<sockaddr*>(&addr), len) != 0) {
      throwErrno("bind of the fd server to @" + name_, errno);
    }
    if (::listen(listen_.get(), 128) != 0) throwErrno("listen on @" + name_, errno);
    wake_ = UniqueFd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (wake_.get() < 0) throwErrno("eventfd for the fd server", errno);
    thread_ = std::thread([this] { loop(); });
  }

  ~FdServer() {
    uint64_t one = 1;
    (void)!::write(wake_.get(), &one, sizeof(one));
    if (thread_.joinable()) thread_.join();
  }
  FdServer(const FdServer&) = delete;
  FdServer& operator=(const FdServer&) = delete;

  /// The socket's name, without the abstract namespace's leading NUL.
  const std::string& name() const { return name_; }

 private:
  void loop() {
    for (;;) {
      pollfd fds[2] = {{listen_.get(), POLLIN, 0}, {wake_.get(), POLLIN, 0}};
      int n = ::poll(fds, 2, -1);
      if (n < 0) {
        if (errno == EINTR) continue;
        return;
      }
      if (fds[1].revents != 0) return;
      if ((fds[0].revents & POLLIN) == 0) continue;
      UniqueFd client(::accept4(listen_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
      if (client.get() < 0) continue;  // the client gave up already, or descriptors ran out: it sees a failure
      try {
        answer(client.get());
      } catch (...) {
        // One broken client must not stop the server; it sees a closed socket.
      }
    }
  }

  void answer(int client) {
    const auto deadline = std::chrono::steady_clock::now() + ioTimeout_;
    if (!fdwire::pollUntil(client, POLLIN, deadline)) return;
    FdRequest request{};
    ssize_t got = ::recv(client, &request, sizeof(request), MSG_DONTWAIT);
    FdAnswer a;
    if (got != static_cast<ssize_t>(sizeof(request)) || request.magic != kRequestMagic ||
        request.version != kWireVersion) {
      a.message = "malformed fd request";
    } else {
      a = lookup_(request);
    }
    FdReply reply{};
    reply.magic = kReplyMagic;
    reply.status = a.status;
    reply.allocationSize = a.allocationSize;
    std::strncpy(reply.message, a.message.c_str(), sizeof(reply.message) - 1);
    iovec iov{&reply, sizeof(reply)};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
    if (a.status == weftSuccess && a.fd.get() >= 0) {
      msg.msg_control = control;
      msg.msg_controllen = sizeof(control);
      cmsghdr* c = CMSG_FIRSTHDR(&msg);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int));
      const int raw = a.fd.get();
      std::memcpy(CMSG_DATA(c), &raw, sizeof(raw));
    }
    if (!fdwire::pollUntil(client, POLLOUT, deadline)) return;
    (void)::sendmsg(client, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
  }

  std::string name_;
  std::function<FdAnswer(const FdRequest&)> lookup_;
  std::chrono::milliseconds ioTimeout_;
  UniqueFd listen_;
  UniqueFd wake_;
  std::thread thread_;
};

/// What fetchFd received: the file (owned) and the owner's allocation size.
struct FetchedFd {
  UniqueFd fd;
  uint64_t allocationSize = 0;
};

/// Asks the fd server `@socketName` of process `ownerPid` (for messages) for region `regionId` with `token`, by
/// `deadline`. Throws IpcFailure: weftRemoteError when the owner is gone, refuses (with its reason) or answers
/// something malformed; weftTimeout when it does not answer in time; weftSystemError for local failures.
inline FetchedFd fetchFd(const std::string& socketName, uint32_t ownerPid, uint64_t regionId,
                         const uint8_t (&token)[kTokenBytes], std::chrono::steady_clock::time_point deadline) {
  const std::string who = "owner pid " + std::to_string(ownerPid) + " (fd server @" + socketName + ")";
  // A dying owner resets or closes the connection a moment before it counts as exited: give it that moment.
  auto ownerState = [ownerPid] {
    return transport_support::processExitsWithin(static_cast<pid_t>(ownerPid), std::chrono::milliseconds(200))
               ? std::string(" (the owner has exited)")
               : std::string();
  };
  sockaddr_un addr;
  socklen_t len = fdwire::abstractAddress(socketName, &addr);
  UniqueFd s(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (s.get() < 0) throwErrno("socket(AF_UNIX, SOCK_SEQPACKET)", errno);
  while (::connect(s.get(), reinterpret_cast<sockaddr*>(&addr), len) != 0) {
    const int e = errno;
    if (e == EINTR) continue;
    if (e == ECONNREFUSED || e == ENOENT) {
      throw IpcFailure(weftRemoteError, "cannot reach " + who + ": " + std::strerror(e) +
                                            " (the owner has exited or finalized its cuda_ipc transport)");
    }
    if (e != EAGAIN) throwErrno("connect to " + who, e);
    if (std::chrono::steady_clock::now() >=
        deadline) {  // EAGAIN: the owner's backlog is full; retry until the deadline
      throw IpcFailure(weftTimeout, "timed out connecting to " + who + ": its listen queue stayed full");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  FdRequest request{};
  request.magic = kRequestMagic;
  request.version = kWireVersion;
  request.regionId = regionId;
  std::memcpy(request.token, token, kTokenBytes);
  if (!fdwire::pollUntil(s.get(), POLLOUT, deadline)) throw IpcFailure(weftTimeout, "timed out sending to " + who);
  if (::send(s.get(), &request, sizeof(request), MSG_DONTWAIT | MSG_NOSIGNAL) !=
      static_cast<ssize_t>(sizeof(request))) {
    const int e = errno;
    throw IpcFailure(weftRemoteError, "sending the request to " + who + " failed: " + std::strerror(e) + ownerState());
  }
  if (!fdwire::pollUntil(s.get(), POLLIN, deadline)) {
    throw IpcFailure(weftTimeout, "timed out waiting for " + who + " to answer");
  }
  FdReply reply{};
  iovec iov{&reply, sizeof(reply)};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 4)] = {};
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  const ssize_t got = ::recvmsg(s.get(), &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  const int e = errno;
  UniqueFd received;
  // Take ownership of every descriptor that came, so none leaks whatever the reply says; keep the first.
  for (cmsghdr* c = got >= 0 ? CMSG_FIRSTHDR(&msg) : nullptr; c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int f;
      std::memcpy(&f, CMSG_DATA(c) + i * sizeof(int), sizeof(f));
      UniqueFd owned(f);
      if (received.get() < 0) received = std::move(owned);
    }
  }
  if (got < 0) {
    throw IpcFailure(weftRemoteError, "receiving the answer of " + who + " failed: " + std::strerror(e) + ownerState());
  }
  if (got == 0) throw IpcFailure(weftRemoteError, who + " closed the connection without answering" + ownerState());
  if (got != static_cast<ssize_t>(sizeof(reply)) || reply.magic != kReplyMagic || (msg.msg_flags & MSG_CTRUNC) != 0) {
    throw IpcFailure(weftRemoteError, who + " sent a malformed answer");
  }
  reply.message[sizeof(reply.message) - 1] = '\0';
  if (reply.status != weftSuccess) {
    throw IpcFailure(weftRemoteError, who + " refused region " + std::to_string(regionId) + ": " + reply.message);
  }
  if (received.get() < 0) throw IpcFailure(weftRemoteError, who + " accepted but sent no file descriptor");
  FetchedFd out;
  out.fd = std::move(received);
  out.allocationSize = reply.allocationSize;
  return out;
}

}  // namespace weft::cuda_ipc
