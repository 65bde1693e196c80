#include "host_fd_server.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <thread>

#include "../common/process_exit.hpp"
#include "host_failure.hpp"

namespace weft::host {
namespace {

/// The address of abstract socket `@name` and its length.
socklen_t abstractAddress(const std::string& name, sockaddr_un* addr) {
  std::memset(addr, 0, sizeof(*addr));
  addr->sun_family = AF_UNIX;
  if (name.empty() || name.size() + 1 > sizeof(addr->sun_path)) {
    throw HostFailure(weftInvalidArgument, "unix socket name '" + name + "' is empty or too long");
  }
  std::memcpy(addr->sun_path + 1, name.data(), name.size());  // sun_path[0] == 0: the abstract namespace
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
}

/// Milliseconds left until `deadline`, at least 0, rounded up so a short budget still polls once.
int msLeft(std::chrono::steady_clock::time_point deadline) {
  auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
  if (left < 0) return 0;
  return left > 1000000 ? 1000000 : static_cast<int>(left);
}

/// Waits until `fd` has `events` or the deadline passes; false on timeout. Restarts after EINTR.
bool waitFor(int fd, short events, std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    int n = poll(&p, 1, msLeft(deadline));
    if (n > 0) return true;
    if (n == 0) return false;
    if (errno != EINTR) throwErrno("poll on unix socket", errno);
  }
}

class FdGuard {
 public:
  explicit FdGuard(int fd) : fd_(fd) {}
  ~FdGuard() {
    if (fd_ >= 0) close(fd_);
  }
  FdGuard(const FdGuard&) = delete;
  FdGuard& operator=(const FdGuard&) = delete;
  int get() const { return fd_; }
  int release() {
    int f = fd_;
    fd_ = -1;
    return f;
  }

 private:
  int fd_;
};

}  // namespace

HostFdServer::HostFdServer(std::string name, std::function<FdLookup(const FdRequest&)> lookup,
                           std::chrono::milliseconds ioTimeout)
    : name_(std::move(name)), lookup_(std::move(lookup)), ioTimeout_(ioTimeout) {
  sockaddr_un addr;
  socklen_t len = abstractAddress(name_, &addr);
  FdGuard listenFd(socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (listenFd.get() < 0) throwErrno("socket(AF_UNIX, SOCK_SEQPACKET)", errno);
  if (bind(listenFd.get(), reinterpret_cast<sockaddr*>(&addr), len) != 0) {
    throwErrno("bind to abstract unix socket @" + name_, errno);
  }
  if (listen(listenFd.get(), 64) != 0) throwErrno("listen on @" + name_, errno);
  FdGuard stopFd(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (stopFd.get() < 0) throwErrno("eventfd", errno);
  listenFd_ = listenFd.release();
  stopFd_ = stopFd.release();
  thread_ = std::thread([this] { run(); });
}

HostFdServer::~HostFdServer() {
  uint64_t one = 1;
  if (write(stopFd_, &one, sizeof(one)) != sizeof(one)) {
    // An eventfd write fails only on counter overflow; the thread still sees the fd readable.
  }
  if (thread_.joinable()) thread_.join();
  close(listenFd_);
  close(stopFd_);
}

void HostFdServer::run() {
  for (;;) {
    pollfd fds[2] = {{listenFd_, POLLIN, 0}, {stopFd_, POLLIN, 0}};
    int n = poll(fds, 2, 1000);  // the stop eventfd ends the wait; the period only bounds a lost wakeup
    if (n < 0 && errno != EINTR) return;
    if (fds[1].revents != 0) return;
    if (n <= 0 || (fds[0].revents & POLLIN) == 0) continue;
    int client = accept4(listenFd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (client < 0) continue;  // the client gave up (EAGAIN, ECONNABORTED) or fds ran out: it sees a failure
    FdGuard guard(client);
    try {
      serve(client);
    } catch (...) {
      // One client's broken request or vanished socket must not stop the server; that client sees the failure.
    }
  }
}

void HostFdServer::serve(int client) {
  const auto deadline = std::chrono::steady_clock::now() + ioTimeout_;
  if (!waitFor(client, POLLIN, deadline)) return;
  FdRequest request{};
  ssize_t got = recv(client, &request, sizeof(request), MSG_DONTWAIT);
  FdLookup answer;
  if (got != static_cast<ssize_t>(sizeof(request)) || request.magic != kRequestMagic ||
      request.version != kWireVersion) {
    answer.status = weftInvalidArgument;
    answer.message = "malformed fd request";
  } else {
    answer = lookup_(request);
  }
  FdGuard fd(answer.fd);
  FdReply reply{};
  reply.magic = kReplyMagic;
  reply.status = answer.status;
  reply.size = answer.size;
  reply.fdOffset = answer.fdOffset;
  std::strncpy(reply.message, answer.message.c_str(), sizeof(reply.message) - 1);
  iovec iov{&reply, sizeof(reply)};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  if (answer.status == weftSuccess && fd.get() >= 0) {
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    int raw = fd.get();
    std::memcpy(CMSG_DATA(c), &raw, sizeof(int));
  }
  if (!waitFor(client, POLLOUT, deadline)) return;
  (void)sendmsg(client, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
}

namespace {
// A peer that dies while answering shows up as a reset or an early close; say so plainly when it is gone. Its
// sockets close with its last thread, a moment before it counts as exited: give it that moment.
std::string ownerState(uint32_t pid) {
  constexpr std::chrono::milliseconds kDyingGrace{200};
  return transport_support::processExitsWithin(static_cast<pid_t>(pid), kDyingGrace)
             ? " (the owning process has exited)"
             : "";
}
}  // namespace

FetchedFd fetchRegionFd(const std::string& socketName, uint32_t ownerPid, uint64_t regionId,
                        const uint8_t (&token)[kTokenBytes], std::chrono::steady_clock::time_point deadline) {
  const std::string who = "owner pid " + std::to_string(ownerPid) + " (socket @" + socketName + ")";
  sockaddr_un addr;
  socklen_t len = abstractAddress(socketName, &addr);
  FdGuard s(socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (s.get() < 0) throwErrno("socket(AF_UNIX, SOCK_SEQPACKET)", errno);
  for (;;) {
    if (connect(s.get(), reinterpret_cast<sockaddr*>(&addr), len) == 0) break;
    int e = errno;
    if (e == EINTR) continue;
    if (e == ECONNREFUSED || e == ENOENT) {
      throw HostFailure(weftRemoteError, "cannot reach " + who + ": " + std::strerror(e) +
                                             " (the owning process has exited or finalized its host transport)");
    }
    if (e != EAGAIN) throwErrno("connect to " + who, e);
    // A full listen backlog: the owner is busy; retry until the deadline.
    if (std::chrono::steady_clock::now() >= deadline) {
      throw HostFailure(weftTimeout, "timed out connecting to " + who + ": its listen queue stayed full");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  FdRequest request{};
  request.magic = kRequestMagic;
  request.version = kWireVersion;
  request.regionId = regionId;
  std::memcpy(request.token, token, kTokenBytes);
  if (!waitFor(s.get(), POLLOUT, deadline)) throw HostFailure(weftTimeout, "timed out sending a request to " + who);
  if (send(s.get(), &request, sizeof(request), MSG_DONTWAIT | MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof(request))) {
    const int e = errno;
    throw HostFailure(weftRemoteError,
                      "sending the request to " + who + " failed: " + std::strerror(e) + ownerState(ownerPid));
  }
  if (!waitFor(s.get(), POLLIN, deadline))
    throw HostFailure(weftTimeout, "timed out waiting for " + who + " to answer");
  FdReply reply{};
  iovec iov{&reply, sizeof(reply)};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 4)] = {};
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t got = recvmsg(s.get(), &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  int e = errno;
  // Collect every descriptor that arrived, so none leaks whatever the reply says.
  int received = -1;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); got >= 0 && c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int f;
      std::memcpy(&f, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      if (received < 0) {
        received = f;
      } else {
        close(f);
      }
    }
  }
  FdGuard fd(received);
  if (got < 0) {
    throw HostFailure(weftRemoteError,
                      "receiving the answer of " + who + " failed: " + std::strerror(e) + ownerState(ownerPid));
  }
  if (got == 0)
    throw HostFailure(weftRemoteError, who + " closed the connection without answering" + ownerState(ownerPid));
  if (got != static_cast<ssize_t>(sizeof(reply)) || reply.magic != kReplyMagic || (msg.msg_flags & MSG_CTRUNC)) {
    throw HostFailure(weftRemoteError, who + " sent a malformed answer");
  }
  reply.message[sizeof(reply.message) - 1] = '\0';
  if (reply.status != weftSuccess) {
    throw HostFailure(weftRemoteError, who + " refused region " + std::to_string(regionId) + ": " + reply.message);
  }
  if (fd.get() < 0) throw HostFailure(weftRemoteError, who + " accepted but sent no file descriptor");
  FetchedFd out;
  out.size = reply.size;
  out.fdOffset = reply.fdOffset;
  out.fd = fd.release();
  return out;
}

}  // namespace weft::host
