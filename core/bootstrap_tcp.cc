// TcpBootstrap: one Boost.Asio io_context and one I/O thread per instance. The I/O thread owns every socket: it
// accepts and authenticates connections, reads frames into a mailbox keyed by (peer, frame type, tag), and writes
// queued frames one at a time per connection. Caller threads only post work to it and wait on one condition
// variable with a deadline, so concurrent send/recv from many threads need no further locking and a slow tag never
// holds up another (the reader always drains the socket into the mailbox).
#include <arpa/inet.h>
#include <fmt/format.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <sys/random.h>

#include <algorithm>
#include <utility>  // before Asio: Boost 1.74's awaitable.hpp uses std::exchange without it
// clang-format off
#include <boost/asio.hpp>
// clang-format on
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <tuple>
#include <weft/bootstrap.hpp>
#include <weft/error.hpp>

#include "bootstrap_message.hpp"
#include "logging.hpp"

namespace weft {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using detail::FrameType;
using detail::SocketAddress;

namespace {

// Tags of the internal collectives (frames of type kCollective): each has its own queue, so two ranks that call
// different collectives time out instead of misreading each other's data.
constexpr int32_t kTagAllGather = 1;
constexpr int32_t kTagBarrier = 2;
constexpr int32_t kTagBroadcast = 3;

// Pause between attempts to reach a listener that is not up yet.
constexpr std::chrono::milliseconds kConnectRetry{25};
// How long a failing root waits for its abort notices to be written before it gives up on them.
constexpr std::chrono::milliseconds kAbortFlush{500};
// Read buffer per connection.
constexpr size_t kReadChunk = 256 * 1024;

tcp::endpoint toEndpoint(const SocketAddress& a) {
  if (a.family == 4) {
    asio::ip::address_v4::bytes_type b;
    std::memcpy(b.data(), a.ip.data(), 4);
    return {asio::ip::address_v4(b), a.port};
  }
  asio::ip::address_v6::bytes_type b;
  std::memcpy(b.data(), a.ip.data(), 16);
  return {asio::ip::address_v6(b, a.scopeId), a.port};
}

SocketAddress fromEndpoint(const tcp::endpoint& ep) {
  SocketAddress a;
  a.port = ep.port();
  asio::ip::address addr = ep.address();
  if (addr.is_v6() && addr.to_v6().is_v4_mapped()) {
    addr = asio::ip::make_address_v4(asio::ip::v4_mapped, addr.to_v6());
  }
  if (addr.is_v4()) {
    a.family = 4;
    auto b = addr.to_v4().to_bytes();
    std::memcpy(a.ip.data(), b.data(), 4);
  } else {
    a.family = 6;
    auto b = addr.to_v6().to_bytes();
    std::memcpy(a.ip.data(), b.data(), 16);
    a.scopeId = static_cast<uint32_t>(addr.to_v6().scope_id());
  }
  return a;
}

std::string rankList(const std::vector<int>& ranks) {
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  return out;
}

// "host", "host:port", "[v6]", "[v6]:port" or a bare IPv6 literal. port = -1 when absent.
std::pair<std::string, int> splitHostPort(const std::string& text) {
  std::string host;
  std::string port;
  if (!text.empty() && text.front() == '[') {
    size_t close = text.find(']');
    if (close == std::string::npos) throw Error(ErrorCode::kInvalidArgument, "address '" + text + "' lacks ']'");
    host = text.substr(1, close - 1);
    if (close + 1 < text.size()) {
      if (text[close + 1] != ':') throw Error(ErrorCode::kInvalidArgument, "address '" + text + "': junk after ']'");
      port = text.substr(close + 2);
      if (port.empty()) throw Error(ErrorCode::kInvalidArgument, "address '" + text + "' has an empty port");
    }
  } else if (std::count(text.begin(), text.end(), ':') == 1) {
    size_t colon = text.find(':');
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (port.empty()) throw Error(ErrorCode::kInvalidArgument, "address '" + text + "' has an empty port");
  } else {
    host = text;  // a host name, an IPv4 literal or a bare IPv6 literal
  }
  if (host.empty()) throw Error(ErrorCode::kInvalidArgument, "address '" + text + "' has an empty host");
  int value = -1;
  if (!port.empty()) {
    value = 0;
    for (char c : port) {
      if (c < '0' || c > '9' || value > 65535) {
        throw Error(ErrorCode::kInvalidArgument, "address '" + text + "' has a bad port '" + port + "'");
      }
      value = value * 10 + (c - '0');
    }
    if (value > 65535) throw Error(ErrorCode::kInvalidArgument, "address '" + text + "' has a bad port '" + port + "'");
  }
  return {host, value};
}

// Resolves a host name or literal; IPv4 results first, since that is what most clusters route.
SocketAddress resolveHost(const std::string& host, uint16_t port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  int rc = getaddrinfo(host.c_str(), nullptr, &hints, &result);
  if (rc != 0) {
    throw Error(ErrorCode::kInvalidArgument, fmt::format("cannot resolve host '{}': {}", host, gai_strerror(rc)));
  }
  std::optional<SocketAddress> v4, v6;
  for (addrinfo* ai = result; ai != nullptr; ai = ai->ai_next) {
    if (ai->ai_family == AF_INET && !v4) {
      SocketAddress a;
      a.family = 4;
      std::memcpy(a.ip.data(), &reinterpret_cast<sockaddr_in*>(ai->ai_addr)->sin_addr, 4);
      v4 = a;
    } else if (ai->ai_family == AF_INET6 && !v6) {
      SocketAddress a;
      a.family = 6;
      auto* sa6 = reinterpret_cast<sockaddr_in6*>(ai->ai_addr);
      std::memcpy(a.ip.data(), &sa6->sin6_addr, 16);
      a.scopeId = sa6->sin6_scope_id;
      v6 = a;
    }
  }
  freeaddrinfo(result);
  if (!v4 && !v6) throw Error(ErrorCode::kInvalidArgument, fmt::format("host '{}' has no IP address", host));
  SocketAddress a = v4 ? *v4 : *v6;
  a.port = port;
  return a;
}

// The address of WEFT_BOOTSTRAP_INTERFACE when set; else this host's first up, non-loopback IPv4 address, else a
// global IPv6 one, else 127.0.0.1.
SocketAddress defaultHostAddress() {
  const char* wanted = std::getenv("WEFT_BOOTSTRAP_INTERFACE");
  std::string ifname = wanted != nullptr ? wanted : "";
  SocketAddress fallback;
  fallback.family = 4;
  fallback.ip[0] = 127;
  fallback.ip[3] = 1;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return fallback;
  std::optional<SocketAddress> v4, v6;
  for (ifaddrs* ifa = list; ifa != nullptr; ifa = ifa->ifa_next) {
    if (ifa->ifa_addr == nullptr || !(ifa->ifa_flags & IFF_UP)) continue;
    if (ifname.empty() ? (ifa->ifa_flags & IFF_LOOPBACK) != 0 : ifname != ifa->ifa_name) continue;
    if (ifa->ifa_addr->sa_family == AF_INET && !v4) {
      SocketAddress a;
      a.family = 4;
      std::memcpy(a.ip.data(), &reinterpret_cast<sockaddr_in*>(ifa->ifa_addr)->sin_addr, 4);
      v4 = a;
    } else if (ifa->ifa_addr->sa_family == AF_INET6 && !v6) {
      auto* sa6 = reinterpret_cast<sockaddr_in6*>(ifa->ifa_addr);
      if (IN6_IS_ADDR_LINKLOCAL(&sa6->sin6_addr)) continue;
      SocketAddress a;
      a.family = 6;
      std::memcpy(a.ip.data(), &sa6->sin6_addr, 16);
      v6 = a;
    }
  }
  freeifaddrs(list);
  if (!ifname.empty() && !v4 && !v6) {
    throw Error(ErrorCode::kConfigError,
                fmt::format("WEFT_BOOTSTRAP_INTERFACE={} names no interface of this host that is up and has an address",
                            ifname));
  }
  return v4 ? *v4 : v6 ? *v6 : fallback;
}

std::array<uint8_t, detail::kSecretBytes> randomSecret() {
  std::array<uint8_t, detail::kSecretBytes> secret{};
  size_t filled = 0;
  while (filled < secret.size()) {
    ssize_t n = getrandom(secret.data() + filled, secret.size() - filled, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      // No getrandom (old kernel, seccomp): the C++ library's nondeterministic source instead.
      std::random_device device;
      for (; filled < secret.size(); ++filled) secret[filled] = static_cast<uint8_t>(device());
      break;
    }
    filled += static_cast<size_t>(n);
  }
  return secret;
}

}  // namespace

struct TcpBootstrap::Impl {
  // One queued frame and how its write ended (fields under Impl::mu_).
  struct SendOp {
    std::shared_ptr<const std::vector<uint8_t>> frame;  // shared: a collective sends one frame to every peer
    int peer = -1;
    bool done = false;
    bool failed = false;
    ErrorCode code = ErrorCode::kRemoteError;
    std::string error;
  };
  using SendPtr = std::shared_ptr<SendOp>;

  // A socket and its read/write state; touched only on the I/O thread.
  struct Connection {
    explicit Connection(asio::io_context& io) : socket(io), timer(io) {}
    tcp::socket socket;
    asio::steady_timer timer;  // hello deadline (accepted) or connect retry (outgoing)
    int peer = -1;
    bool authenticated = false;
    bool open = true;
    std::string remote;
    detail::FrameDecoder decoder;
    std::vector<uint8_t> readBuffer = std::vector<uint8_t>(kReadChunk);
    std::deque<SendPtr> writeQueue;
    bool writing = false;
  };
  using ConnPtr = std::shared_ptr<Connection>;

  struct Failure {
    ErrorCode code;
    std::string reason;
  };

  Impl(int rank, int size, const detail::UniqueIdContents& id, std::chrono::milliseconds timeout, bool rootOnAll)
      : rank_(rank), size_(size), timeout_(timeout), id_(id), rootListensOnAll_(rootOnAll) {
    conns_.resize(size);
    connected_.assign(size, 0);
    failed_.resize(size);
    registered_.resize(size);
    connectError_.resize(size);
  }

  ~Impl() {
    if (thread_.joinable()) {
      asio::post(io_, [this] {
        stopping_ = true;
        boost::system::error_code ec;
        acceptor_.close(ec);
        acceptRetry_.cancel();
        for (auto& c : conns_) {
          if (c) closeConnection(c, std::nullopt);
        }
        for (auto& c : pending_) closeConnection(c, std::nullopt);
        pending_.clear();
        io_.stop();
      });
      thread_.join();
    }
  }

  // ---- setup (caller thread) ----

  void setup() {
    auto deadline = Clock::now() + timeout_;
    if (rank_ == 0) {
      tcp::endpoint ep = toEndpoint(id_.root);
      if (rootListensOnAll_) {
        ep = tcp::endpoint(ep.address().is_v4() ? asio::ip::address(asio::ip::address_v4::any())
                                                : asio::ip::address(asio::ip::address_v6::any()),
                           ep.port());
      }
      openAcceptor(ep, /*fallbackToAny=*/true);
    }
    thread_ = std::thread([this] { runIo(); });
    if (size_ == 1) return;
    if (rank_ == 0) {
      asio::post(io_, [this] { startAccept(); });
      setupRoot(deadline);
    } else {
      setupNonRoot(deadline);
    }
    logInfo(LogSubsys::kBoot, "rank {}: bootstrap of {} ranks connected, listening at {}", rank_, size_,
            listen_.toString());
  }

  void openAcceptor(const tcp::endpoint& ep, bool fallbackToAny) {
    boost::system::error_code ec;
    acceptor_.open(ep.protocol(), ec);
    if (!ec) acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) acceptor_.bind(ep, ec);
    if (ec == boost::system::errc::address_not_available && fallbackToAny) {
      // The id names an address this host does not have (NAT, a name that resolves differently here): take the
      // port on every interface instead.
      logInfo(LogSubsys::kBoot, "rank {}: {} is not an address of this host, listening on all interfaces", rank_,
              fromEndpoint(ep).toString());
      acceptor_.close(ec);
      tcp::endpoint any(ep.address().is_v4() ? asio::ip::address(asio::ip::address_v4::any())
                                             : asio::ip::address(asio::ip::address_v6::any()),
                        ep.port());
      openAcceptor(any, false);
      return;
    }
    if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) {
      throw Error(ErrorCode::kSystemError,
                  fmt::format("rank {}: cannot listen at {}: {}", rank_, fromEndpoint(ep).toString(), ec.message()));
    }
    listen_ = fromEndpoint(acceptor_.local_endpoint());
  }

  void setupRoot(Clock::time_point deadline) {
    std::unique_lock lk(mu_);
    bool all = cv_.wait_until(lk, deadline, [&] {
      for (int r = 1; r < size_; ++r) {
        if (!connected_[r]) return false;
      }
      return true;
    });
    if (!all) {
      std::vector<int> missing;
      for (int r = 1; r < size_; ++r) {
        if (!connected_[r]) missing.push_back(r);
      }
      std::string reason = fmt::format("timed out after {} ms waiting for {} to register at {}", timeout_.count(),
                                       rankList(missing), id_.root.toString());
      for (const auto& note : notes_) reason += "; " + note;
      lk.unlock();
      abortSetup(ErrorCode::kTimeout, reason);
      throw Error(ErrorCode::kTimeout, fmt::format("rank 0: {}", reason));
    }
    std::vector<SocketAddress> table = registered_;
    lk.unlock();
    auto payload = detail::encodePeerTable(table);
    std::vector<SendPtr> ops;
    for (int r = 1; r < size_; ++r)
      ops.push_back(postFrame(r, FrameType::kPeerTable, 0, payload.data(), payload.size()));
    waitSends(ops, deadline, "sending the peer table");
  }

  // Tells every registered rank why setup failed, so their errors name the cause instead of "root went away".
  void abortSetup(ErrorCode code, const std::string& reason) {
    auto payload = detail::encodeAbort({static_cast<uint32_t>(code), reason});
    auto abortFrame = std::make_shared<const std::vector<uint8_t>>(
        detail::encodeFrame(FrameType::kAbort, 0, payload.data(), payload.size()));
    std::vector<SendPtr> ops;
    {
      std::lock_guard lk(mu_);
      for (int r = 1; r < size_; ++r) {
        if (!connected_[r]) continue;
        auto op = std::make_shared<SendOp>();
        op->peer = r;
        op->frame = abortFrame;
        ops.push_back(op);
      }
    }
    for (auto& op : ops) enqueue(op);
    std::unique_lock lk(mu_);
    cv_.wait_until(lk, Clock::now() + kAbortFlush, [&] {
      return std::all_of(ops.begin(), ops.end(), [](const SendPtr& op) { return op->done || op->failed; });
    });
  }

  void setupNonRoot(Clock::time_point deadline) {
    asio::post(io_, [this, deadline] { startConnect(0, toEndpoint(id_.root), deadline, /*sendHello=*/false); });
    {
      std::unique_lock lk(mu_);
      bool ok = cv_.wait_until(lk, deadline, [&] { return connected_[0] || failed_[0]; });
      if (!ok || !connected_[0]) {
        throw Error(ErrorCode::kTimeout,
                    fmt::format("rank {}: timed out after {} ms connecting to the root (rank 0) at {}{}", rank_,
                                timeout_.count(), id_.root.toString(),
                                connectError_[0].empty() ? "" : " (last error: " + connectError_[0] + ")"));
      }
    }
    // Listen on the interface that reaches the root: the one the other ranks can most likely reach too.
    SocketAddress local = localToRoot_;
    local.port = 0;
    openAcceptor(toEndpoint(local), false);
    asio::post(io_, [this] { startAccept(); });
    detail::Hello hello{id_.secret, rank_, size_, listen_};
    auto helloPayload = detail::encodeHello(hello);
    auto helloOp = postFrame(0, FrameType::kHello, 0, helloPayload.data(), helloPayload.size());
    waitSends({helloOp}, deadline, "registering with the root");

    // Wait a little past our own deadline for the root's table or verdict: the root started its clock no later
    // than we did, and its verdict names the missing rank, which our own timeout could not.
    auto grace = std::min<std::chrono::milliseconds>(timeout_ / 4, std::chrono::milliseconds(1000));
    std::vector<SocketAddress> table;
    {
      std::unique_lock lk(mu_);
      bool ok = cv_.wait_until(lk, deadline + grace, [&] { return table_.has_value() || abort_ || failed_[0]; });
      if (abort_) {
        throw Error(static_cast<ErrorCode>(abort_->code),
                    fmt::format("rank {}: setup aborted by the root (rank 0): {}", rank_, abort_->reason));
      }
      if (!table_) {
        if (ok) {
          throw Error(failed_[0]->code,
                      fmt::format("rank {}: the root (rank 0) failed during setup: {}", rank_, failed_[0]->reason));
        }
        throw Error(ErrorCode::kTimeout,
                    fmt::format("rank {}: timed out after {} ms waiting for the root (rank 0) to send the peer table",
                                rank_, timeout_.count()));
      }
      table = *table_;
    }
    asio::post(io_, [this, table, deadline] {
      for (int r = 1; r < rank_; ++r) startConnect(r, toEndpoint(table[r]), deadline, /*sendHello=*/true);
    });
    std::unique_lock lk(mu_);
    auto allConnected = [&] {
      for (int r = 0; r < size_; ++r) {
        if (r != rank_ && !connected_[r]) return false;
      }
      return true;
    };
    auto anyFailed = [&] {
      for (int r = 0; r < size_; ++r) {
        if (r != rank_ && failed_[r]) return true;
      }
      return false;
    };
    bool ok = cv_.wait_until(lk, deadline, [&] { return allConnected() || anyFailed(); });
    for (int r = 0; r < size_; ++r) {
      if (r != rank_ && failed_[r]) {
        throw Error(failed_[r]->code, fmt::format("rank {}: setup failed: {}", rank_, failed_[r]->reason));
      }
    }
    if (!ok) {
      std::vector<int> lower, higher;
      for (int r = 1; r < size_; ++r) {
        if (r != rank_ && !connected_[r]) (r < rank_ ? lower : higher).push_back(r);
      }
      std::string what;
      if (!lower.empty()) what = "connecting to " + rankList(lower);
      if (!higher.empty()) what += (what.empty() ? "" : " and ") + ("waiting for " + rankList(higher) + " to connect");
      throw Error(ErrorCode::kTimeout, fmt::format("rank {}: timed out after {} ms {}", rank_, timeout_.count(), what));
    }
  }

  // ---- I/O thread ----

  void runIo() {
    // Handlers do not throw by design; this loop only keeps a surprise from terminating the process.
    for (;;) {
      try {
        io_.run();
        return;
      } catch (const std::exception& e) {
        logError(LogSubsys::kBoot, "rank {}: unexpected exception on the bootstrap I/O thread: {}", rank_, e.what());
      }
    }
  }

  void startAccept() {
    if (stopping_ || !acceptor_.is_open()) return;
    auto c = std::make_shared<Connection>(io_);
    acceptor_.async_accept(c->socket, [this, c](const boost::system::error_code& ec) {
      if (stopping_ || ec == asio::error::operation_aborted) return;
      if (ec) {
        // EMFILE and friends: try again shortly rather than spinning.
        logWarn(LogSubsys::kBoot, "rank {}: accept failed: {}", rank_, ec.message());
        acceptRetry_.expires_after(std::chrono::milliseconds(50));
        acceptRetry_.async_wait([this](const boost::system::error_code& e) {
          if (!e) startAccept();
        });
        return;
      }
      onAccepted(c);
      startAccept();
    });
  }

  void onAccepted(const ConnPtr& c) {
    boost::system::error_code ec;
    auto remote = c->socket.remote_endpoint(ec);
    c->remote = ec ? "<unknown>" : fromEndpoint(remote).toString();
    c->socket.set_option(tcp::no_delay(true), ec);
    c->decoder.setMaxLength(detail::kMaxHelloBytes);
    pending_.push_back(c);
    c->timer.expires_after(timeout_);
    c->timer.async_wait([this, c](const boost::system::error_code& e) {
      if (!e && c->open && !c->authenticated) refuse(c, fmt::format("no hello within {} ms", timeout_.count()));
    });
    startRead(c);
  }

  void startConnect(int peer, tcp::endpoint ep, Clock::time_point deadline, bool sendHello) {
    if (stopping_) return;
    auto c = conns_[peer] && !conns_[peer]->authenticated ? conns_[peer] : std::make_shared<Connection>(io_);
    c->peer = peer;
    c->remote = fromEndpoint(ep).toString();
    conns_[peer] = c;
    c->socket.async_connect(ep, [this, c, ep, deadline, sendHello](const boost::system::error_code& ec) {
      if (stopping_ || !c->open) return;
      if (ec) {
        {
          std::lock_guard lk(mu_);
          connectError_[c->peer] = ec.message();
        }
        if (Clock::now() + kConnectRetry >= deadline) return;  // the waiting caller reports the timeout
        boost::system::error_code ignored;
        c->socket.close(ignored);
        c->timer.expires_after(kConnectRetry);
        c->timer.async_wait([this, c, ep, deadline, sendHello](const boost::system::error_code& e) {
          if (!e) startConnect(c->peer, ep, deadline, sendHello);
        });
        return;
      }
      boost::system::error_code ignored;
      c->socket.set_option(tcp::no_delay(true), ignored);
      c->authenticated = true;  // we chose whom to call; the callee checks our secret
      c->decoder.setMaxLength(detail::kMaxFrameBytes);
      if (sendHello) {
        auto op = std::make_shared<SendOp>();
        op->peer = c->peer;
        auto payload = detail::encodeHello({id_.secret, rank_, size_, listen_});
        op->frame = std::make_shared<const std::vector<uint8_t>>(
            detail::encodeFrame(FrameType::kHello, 0, payload.data(), payload.size()));
        c->writeQueue.push_back(op);
        writeNext(c);
      }
      {
        std::lock_guard lk(mu_);
        connected_[c->peer] = 1;
        if (c->peer == 0) localToRoot_ = fromEndpoint(c->socket.local_endpoint(ignored));
      }
      cv_.notify_all();
      startRead(c);
    });
  }

  void startRead(const ConnPtr& c) {
    c->socket.async_read_some(asio::buffer(c->readBuffer),
                              [this, c](const boost::system::error_code& ec, size_t n) { onRead(c, ec, n); });
  }

  void onRead(const ConnPtr& c, const boost::system::error_code& ec, size_t n) {
    if (stopping_ || !c->open) return;
    if (ec) {
      if (!c->authenticated) {
        refuse(c, fmt::format("closed before presenting the job secret ({})", ec.message()));
        return;
      }
      std::string how = c->decoder.midFrame() ? "in the middle of a message" : "";
      closeConnection(c, Failure{ErrorCode::kRemoteError, fmt::format("rank {} closed its connection{} ({})", c->peer,
                                                                      how.empty() ? "" : " " + how, ec.message())});
      return;
    }
    try {
      c->decoder.feed(c->readBuffer.data(), n);
      while (c->open && c->decoder.hasFrame()) onFrame(c, c->decoder.pop());
    } catch (const Error& e) {
      if (!c->authenticated) {
        refuse(c, e.message());
      } else {
        closeConnection(c, Failure{ErrorCode::kProtocolError,
                                   fmt::format("rank {} sent a malformed message: {}", c->peer, e.message())});
      }
      return;
    }
    if (c->open) startRead(c);
  }

  void onFrame(const ConnPtr& c, detail::Frame f) {
    if (!c->authenticated) {
      onHello(c, f);
      return;
    }
    switch (f.type) {
      case FrameType::kUser:
      case FrameType::kCollective: {
        {
          std::lock_guard lk(mu_);
          mailbox_[{c->peer, static_cast<uint16_t>(f.type), f.tag}].push_back(std::move(f.payload));
        }
        cv_.notify_all();
        return;
      }
      case FrameType::kPeerTable:
        if (c->peer == 0 && rank_ != 0) {
          auto table = detail::decodePeerTable(f.payload, size_);
          {
            std::lock_guard lk(mu_);
            table_ = std::move(table);
          }
          cv_.notify_all();
          return;
        }
        break;
      case FrameType::kAbort:
        if (c->peer == 0 && rank_ != 0) {
          auto notice = detail::decodeAbort(f.payload);
          {
            std::lock_guard lk(mu_);
            abort_ = std::move(notice);
          }
          cv_.notify_all();
          return;
        }
        break;
      case FrameType::kHello: break;
    }
    throw Error(ErrorCode::kProtocolError, fmt::format("unexpected frame type {}", static_cast<int>(f.type)));
  }

  void onHello(const ConnPtr& c, const detail::Frame& f) {
    if (f.type != FrameType::kHello) {
      refuse(c, "first message is not a hello");
      return;
    }
    detail::Hello h = detail::decodeHello(f.payload);  // throws: caller refuses
    if (!detail::secretsEqual(h.secret, id_.secret)) {
      refuse(c, "wrong job secret");
      return;
    }
    if (h.size != size_) {
      std::string note =
          fmt::format("rank {} at {} announced a job of {} ranks, this job has {}", h.rank, c->remote, h.size, size_);
      {
        std::lock_guard lk(mu_);
        notes_.push_back(note);
      }
      refuse(c, note);
      return;
    }
    if (h.rank <= rank_ || h.rank >= size_) {
      refuse(c, fmt::format("rank {} may not connect to rank {} (only higher ranks of {} do)", h.rank, rank_, size_));
      return;
    }
    if (conns_[h.rank]) {
      refuse(c, fmt::format("rank {} is already connected", h.rank));
      return;
    }
    if (rank_ == 0 && h.listen.family == 0) {
      refuse(c, fmt::format("rank {} registered without a listen address", h.rank));
      return;
    }
    c->peer = h.rank;
    c->authenticated = true;
    c->timer.cancel();
    c->decoder.setMaxLength(detail::kMaxFrameBytes);
    conns_[h.rank] = c;
    pending_.erase(std::remove(pending_.begin(), pending_.end(), c), pending_.end());
    {
      std::lock_guard lk(mu_);
      connected_[h.rank] = 1;
      registered_[h.rank] = h.listen;
    }
    cv_.notify_all();
    logDebug(LogSubsys::kBoot, "rank {}: rank {} connected from {}", rank_, h.rank, c->remote);
  }

  void refuse(const ConnPtr& c, const std::string& why) {
    logWarn(LogSubsys::kBoot, "rank {}: refused a connection from {}: {}", rank_, c->remote, why);
    closeConnection(c, std::nullopt);
    pending_.erase(std::remove(pending_.begin(), pending_.end(), c), pending_.end());
  }

  // Closes the socket and fails its queued writes; `failure` (for an authenticated peer) is what later calls that
  // need this peer report.
  void closeConnection(const ConnPtr& c, const std::optional<Failure>& failure) {
    if (!c->open) return;
    c->open = false;
    boost::system::error_code ignored;
    c->socket.shutdown(tcp::socket::shutdown_both, ignored);
    c->socket.close(ignored);
    c->timer.cancel();
    Failure f = failure.value_or(Failure{ErrorCode::kRemoteError, "the bootstrap is shutting down"});
    {
      std::lock_guard lk(mu_);
      if (c->authenticated && failure && !failed_[c->peer]) {
        failed_[c->peer] = f;
        logInfo(LogSubsys::kBoot, "rank {}: {}", rank_, f.reason);
      }
      for (auto& op : c->writeQueue) {
        op->failed = true;
        op->code = f.code;
        op->error = f.reason;
      }
    }
    c->writeQueue.clear();
    cv_.notify_all();
  }

  void writeNext(const ConnPtr& c) {
    if (c->writing || c->writeQueue.empty() || !c->open) return;
    c->writing = true;
    SendPtr op = c->writeQueue.front();
    asio::async_write(c->socket, asio::buffer(*op->frame), [this, c, op](const boost::system::error_code& ec, size_t) {
      c->writing = false;
      if (stopping_ || !c->open) return;
      if (ec) {
        closeConnection(
            c, Failure{ErrorCode::kRemoteError, fmt::format("writing to rank {} failed ({})", c->peer, ec.message())});
        return;
      }
      {
        std::lock_guard lk(mu_);
        op->done = true;
      }
      cv_.notify_all();
      c->writeQueue.pop_front();
      writeNext(c);
    });
  }

  // Queues a frame for the peer's connection (any thread).
  void enqueue(const SendPtr& op) {
    asio::post(io_, [this, op] {
      const ConnPtr& c = conns_[op->peer];
      if (!c || !c->open || !c->authenticated) {
        std::lock_guard lk(mu_);
        op->failed = true;
        op->code = failed_[op->peer] ? failed_[op->peer]->code : ErrorCode::kRemoteError;
        op->error = failed_[op->peer] ? failed_[op->peer]->reason : fmt::format("rank {} is not connected", op->peer);
      } else {
        c->writeQueue.push_back(op);
        writeNext(c);
        return;
      }
      cv_.notify_all();
    });
  }

  SendPtr postFrame(int peer, FrameType type, int32_t tag, const void* data, uint64_t bytes) {
    auto op = std::make_shared<SendOp>();
    op->peer = peer;
    op->frame = std::make_shared<const std::vector<uint8_t>>(detail::encodeFrame(type, tag, data, bytes));
    enqueue(op);
    return op;
  }

  // ---- waits (caller threads) ----

  void waitSends(const std::vector<SendPtr>& ops, Clock::time_point deadline, const std::string& what) {
    std::unique_lock lk(mu_);
    cv_.wait_until(lk, deadline, [&] {
      return std::all_of(ops.begin(), ops.end(), [](const SendPtr& op) { return op->done || op->failed; });
    });
    std::vector<int> late;
    for (const auto& op : ops) {
      if (op->failed) throw Error(op->code, fmt::format("rank {}: {} failed: {}", rank_, what, op->error));
      if (!op->done) late.push_back(op->peer);
    }
    if (!late.empty()) {
      lk.unlock();
      // A frame may be half written: the stream to those peers cannot be trusted any more.
      for (int peer : late) {
        asio::post(io_, [this, peer] {
          if (conns_[peer]) {
            closeConnection(conns_[peer],
                            Failure{ErrorCode::kTimeout, fmt::format("an earlier write to rank {} timed out", peer)});
          }
        });
      }
      throw Error(ErrorCode::kTimeout, fmt::format("rank {}: {} timed out after {} ms waiting for {} to take the data",
                                                   rank_, what, timeout_.count(), rankList(late)));
    }
  }

  // Waits until a message of (peer, type, tag) is queued for every peer in `peers`, then takes them (in order).
  std::vector<std::vector<uint8_t>> takeMessages(const std::vector<int>& peers, FrameType type, int32_t tag,
                                                 Clock::time_point deadline, const std::string& what) {
    auto key = [&](int peer) { return std::make_tuple(peer, static_cast<uint16_t>(type), tag); };
    auto has = [&](int peer) {
      auto it = mailbox_.find(key(peer));
      return it != mailbox_.end() && !it->second.empty();
    };
    std::unique_lock lk(mu_);
    cv_.wait_until(lk, deadline, [&] {
      bool all = true;
      for (int p : peers) {
        if (has(p)) continue;
        if (failed_[p]) return true;
        all = false;
      }
      return all;
    });
    std::vector<int> missing;
    for (int p : peers) {
      if (has(p)) continue;
      if (failed_[p])
        throw Error(failed_[p]->code, fmt::format("rank {}: {} failed: {}", rank_, what, failed_[p]->reason));
      missing.push_back(p);
    }
    if (!missing.empty()) {
      throw Error(ErrorCode::kTimeout, fmt::format("rank {}: {} timed out after {} ms waiting for {}", rank_, what,
                                                   timeout_.count(), rankList(missing)));
    }
    std::vector<std::vector<uint8_t>> out;
    out.reserve(peers.size());
    for (int p : peers) {
      auto it = mailbox_.find(key(p));
      out.push_back(std::move(it->second.front()));
      it->second.pop_front();
      if (it->second.empty()) mailbox_.erase(it);
    }
    return out;
  }

  // ---- operations ----

  void checkPeer(int peer, const char* what) const {
    if (peer < 0 || peer >= size_) {
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("rank {}: {}: peer {} is not a rank of this job of {}", rank_, what, peer, size_));
    }
  }

  std::vector<int> others() const {
    std::vector<int> peers;
    for (int r = 0; r < size_; ++r) {
      if (r != rank_) peers.push_back(r);
    }
    return peers;
  }

  // Every rank sends its slice straight to every other rank: one round trip over the full mesh, which beats a
  // ring's size-1 rounds for the small setup payloads this carries and moves the same number of bytes.
  void allGatherTagged(void* allData, uint64_t bytesPerRank, int32_t tag, const char* what) {
    if (bytesPerRank > 0 && allData == nullptr) {
      throw Error(ErrorCode::kInvalidArgument, fmt::format("rank {}: {} of a null buffer", rank_, what));
    }
    if (size_ == 1) return;
    auto deadline = Clock::now() + timeout_;
    auto* base = static_cast<uint8_t*>(allData);
    const uint8_t* mine = bytesPerRank ? base + rank_ * bytesPerRank : nullptr;
    auto frame = std::make_shared<const std::vector<uint8_t>>(
        detail::encodeFrame(FrameType::kCollective, tag, mine, bytesPerRank));
    std::vector<SendPtr> ops;
    auto peers = others();
    for (int p : peers) {
      auto op = std::make_shared<SendOp>();
      op->peer = p;
      op->frame = frame;
      enqueue(op);
      ops.push_back(op);
    }
    auto got = takeMessages(peers, FrameType::kCollective, tag, deadline, what);
    for (size_t i = 0; i < peers.size(); ++i) {
      if (got[i].size() != bytesPerRank) {
        throw Error(ErrorCode::kInvalidUsage,
                    fmt::format("rank {}: {}: rank {} contributed {} bytes, this rank {} (the size must match on "
                                "every rank)",
                                rank_, what, peers[i], got[i].size(), bytesPerRank));
      }
      if (bytesPerRank) std::memcpy(base + peers[i] * bytesPerRank, got[i].data(), bytesPerRank);
    }
    waitSends(ops, deadline, what);
  }

  void broadcast(void* data, uint64_t bytes, int root) {
    checkPeer(root, "broadcast");
    if (bytes > 0 && data == nullptr) {
      throw Error(ErrorCode::kInvalidArgument, fmt::format("rank {}: broadcast of a null buffer", rank_));
    }
    if (size_ == 1) return;
    auto deadline = Clock::now() + timeout_;
    std::string what = fmt::format("broadcast from rank {}", root);
    if (rank_ == root) {
      auto frame = std::make_shared<const std::vector<uint8_t>>(
          detail::encodeFrame(FrameType::kCollective, kTagBroadcast, data, bytes));
      std::vector<SendPtr> ops;
      for (int p : others()) {
        auto op = std::make_shared<SendOp>();
        op->peer = p;
        op->frame = frame;
        enqueue(op);
        ops.push_back(op);
      }
      waitSends(ops, deadline, what);
      return;
    }
    auto got = takeMessages({root}, FrameType::kCollective, kTagBroadcast, deadline, what);
    if (got[0].size() != bytes) {
      throw Error(ErrorCode::kInvalidUsage, fmt::format("rank {}: {}: the root sent {} bytes, this rank expects {}",
                                                        rank_, what, got[0].size(), bytes));
    }
    if (bytes) std::memcpy(data, got[0].data(), bytes);
  }

  void send(const void* data, uint64_t bytes, int peer, int tag) {
    checkPeer(peer, "send");
    if (bytes > 0 && data == nullptr) throw Error(ErrorCode::kInvalidArgument, "send of a null buffer");
    if (peer == rank_) {
      auto* p = static_cast<const uint8_t*>(data);
      {
        std::lock_guard lk(mu_);
        mailbox_[{peer, static_cast<uint16_t>(FrameType::kUser), tag}].emplace_back(p, p + bytes);
      }
      cv_.notify_all();
      return;
    }
    auto deadline = Clock::now() + timeout_;
    auto op = postFrame(peer, FrameType::kUser, tag, data, bytes);
    waitSends({op}, deadline, fmt::format("send to rank {} (tag {}, {} bytes)", peer, tag, bytes));
  }

  void recv(void* data, uint64_t bytes, int peer, int tag) {
    checkPeer(peer, "recv");
    if (bytes > 0 && data == nullptr) throw Error(ErrorCode::kInvalidArgument, "recv into a null buffer");
    auto deadline = Clock::now() + timeout_;
    std::string what = fmt::format("recv from rank {} (tag {})", peer, tag);
    auto got = takeMessages({peer}, FrameType::kUser, tag, deadline, what);
    if (got[0].size() != bytes) {
      throw Error(ErrorCode::kInvalidArgument, fmt::format("rank {}: {}: the message has {} bytes, the buffer {}",
                                                           rank_, what, got[0].size(), bytes));
    }
    if (bytes) std::memcpy(data, got[0].data(), bytes);
  }

  bool hasMessage(int peer, int tag) {
    checkPeer(peer, "hasMessage");
    std::lock_guard lk(mu_);
    auto it = mailbox_.find({peer, static_cast<uint16_t>(FrameType::kUser), tag});
    return it != mailbox_.end() && !it->second.empty();
  }

  const int rank_;
  const int size_;
  const std::chrono::milliseconds timeout_;
  const detail::UniqueIdContents id_;
  const bool rootListensOnAll_;
  SocketAddress listen_;  // written before the I/O thread reads it

  // Declared first among the Asio objects so that it is destroyed last.
  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> work_ = asio::make_work_guard(io_);
  tcp::acceptor acceptor_{io_};
  asio::steady_timer acceptRetry_{io_};
  std::vector<ConnPtr> conns_;    // I/O thread only: by peer rank
  std::vector<ConnPtr> pending_;  // I/O thread only: accepted, not yet authenticated
  bool stopping_ = false;         // I/O thread only
  std::thread thread_;

  std::mutex mu_;
  std::condition_variable cv_;
  // Under mu_:
  std::map<std::tuple<int, uint16_t, int32_t>, std::deque<std::vector<uint8_t>>> mailbox_;
  std::vector<char> connected_;
  std::vector<std::optional<Failure>> failed_;
  std::vector<SocketAddress> registered_;  // root: each rank's listen address
  std::optional<std::vector<SocketAddress>> table_;
  std::optional<detail::AbortNotice> abort_;
  std::vector<std::string> notes_;  // root: why members of the job were refused, for the timeout message
  std::vector<std::string> connectError_;
  SocketAddress localToRoot_;
};

UniqueId TcpBootstrap::createUniqueId(const std::string& address) {
  detail::UniqueIdContents c;
  if (address.empty()) {
    c.root = defaultHostAddress();
  } else {
    auto [host, port] = splitHostPort(address);
    c.root = resolveHost(host, static_cast<uint16_t>(std::max(port, 0)));
  }
  if (c.root.port == 0) {
    // Ask the OS for a free port on that address. Another process could take it before the root binds it; the
    // root's bind then fails with a clear error.
    asio::io_context io;
    tcp::acceptor probe(io);
    boost::system::error_code ec;
    tcp::endpoint ep = toEndpoint(c.root);
    probe.open(ep.protocol(), ec);
    if (!ec) probe.bind(ep, ec);
    if (ec) {
      throw Error(ErrorCode::kInvalidArgument,
                  fmt::format("cannot find a free port at {}: {}", c.root.toString(), ec.message()));
    }
    c.root.port = probe.local_endpoint().port();
  }
  c.secret = randomSecret();
  return detail::encodeUniqueId(c);
}

namespace {
void checkRankSize(int rank, int size) {
  if (size < 1 || rank < 0 || rank >= size) {
    throw Error(ErrorCode::kInvalidArgument, fmt::format("bootstrap rank {} is not in [0, {})", rank, size));
  }
}
}  // namespace

TcpBootstrap::TcpBootstrap(int rank, int size, const UniqueId& id, std::chrono::milliseconds timeout) {
  checkRankSize(rank, size);
  if (timeout.count() <= 0) throw Error(ErrorCode::kInvalidArgument, "bootstrap timeout must be positive");
  setLogRank(rank);
  impl_ = std::make_unique<Impl>(rank, size, detail::decodeUniqueId(id), timeout, /*rootOnAll=*/false);
  impl_->setup();
}

TcpBootstrap::TcpBootstrap(int rank, int size, const std::string& rootAddress, std::chrono::milliseconds timeout) {
  checkRankSize(rank, size);
  if (timeout.count() <= 0) throw Error(ErrorCode::kInvalidArgument, "bootstrap timeout must be positive");
  setLogRank(rank);
  auto [host, port] = splitHostPort(rootAddress);
  if (port <= 0) {
    throw Error(ErrorCode::kInvalidArgument, fmt::format("root address '{}' needs a port (host:port)", rootAddress));
  }
  detail::UniqueIdContents c;
  c.root = resolveHost(host, static_cast<uint16_t>(port));
  const char* secret = std::getenv("WEFT_BOOTSTRAP_SECRET");
  c.secret = detail::deriveSecret(secret != nullptr && *secret != '\0' ? std::string(secret) : "addr:" + rootAddress);
  impl_ = std::make_unique<Impl>(rank, size, c, timeout, /*rootOnAll=*/true);
  impl_->setup();
}

TcpBootstrap::~TcpBootstrap() = default;

int TcpBootstrap::rank() const { return impl_->rank_; }
int TcpBootstrap::size() const { return impl_->size_; }
std::chrono::milliseconds TcpBootstrap::timeout() const { return impl_->timeout_; }
int TcpBootstrap::localRank() const { return localRank_; }
std::string TcpBootstrap::listenAddress() const { return impl_->listen_.toString(); }

void TcpBootstrap::allGather(void* allData, uint64_t bytesPerRank) {
  impl_->allGatherTagged(allData, bytesPerRank, kTagAllGather, "allGather");
}
void TcpBootstrap::barrier() { impl_->allGatherTagged(nullptr, 0, kTagBarrier, "barrier"); }
void TcpBootstrap::broadcast(void* data, uint64_t bytes, int root) { impl_->broadcast(data, bytes, root); }
void TcpBootstrap::send(const void* data, uint64_t bytes, int peer, int tag) { impl_->send(data, bytes, peer, tag); }
void TcpBootstrap::recv(void* data, uint64_t bytes, int peer, int tag) { impl_->recv(data, bytes, peer, tag); }
bool TcpBootstrap::hasMessage(int peer, int tag) { return impl_->hasMessage(peer, tag); }

}  // namespace weft
