// The host transport between real processes (forked ranks) and within one process. Blobs travel over a socketpair
// made before the fork; data moves only through the plugin.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <multi_process.hpp>
#include <thread>
#include <weft/error.hpp>
#include <weft/shared_host_memory.hpp>

// The plugin's private wire format, so tests can forge tampered blobs.
#include "../../transports/host/host_wire.hpp"
#include "transport_plugin.hpp"

namespace weft {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

/// Length-prefixed messages over one end of a socketpair, every receive with a deadline.
class BlobChannel {
 public:
  explicit BlobChannel(int fd) : fd_(fd) {}
  ~BlobChannel() { close(fd_); }

  void send(const std::vector<uint8_t>& bytes) {
    uint32_t n = static_cast<uint32_t>(bytes.size());
    writeAll(&n, sizeof(n));
    writeAll(bytes.data(), bytes.size());
  }

  std::vector<uint8_t> recv(std::chrono::milliseconds timeout = 10s) {
    auto deadline = Clock::now() + timeout;
    uint32_t n = 0;
    if (!readAll(&n, sizeof(n), deadline)) throw Error(ErrorCode::kRemoteError, "peer closed the channel");
    if (n > (1u << 20)) throw Error(ErrorCode::kProtocolError, "message too long");
    std::vector<uint8_t> bytes(n);
    if (!readAll(bytes.data(), n, deadline)) throw Error(ErrorCode::kRemoteError, "peer closed mid-message");
    return bytes;
  }

  void sendValue(uint64_t v) {
    std::vector<uint8_t> b(sizeof(v));
    std::memcpy(b.data(), &v, sizeof(v));
    send(b);
  }
  uint64_t recvValue() {
    auto b = recv();
    uint64_t v = 0;
    if (b.size() != sizeof(v)) throw Error(ErrorCode::kProtocolError, "bad value message");
    std::memcpy(&v, b.data(), sizeof(v));
    return v;
  }

 private:
  void writeAll(const void* p, size_t n) {
    auto* c = static_cast<const char*>(p);
    while (n > 0) {
      ssize_t w = ::send(fd_, c, n, MSG_NOSIGNAL);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) throwSystemError("send on the test channel", errno);
      c += w;
      n -= static_cast<size_t>(w);
    }
  }
  bool readAll(void* p, size_t n, Clock::time_point deadline) {
    auto* c = static_cast<char*>(p);
    while (n > 0) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) throw Error(ErrorCode::kTimeout, "test channel: peer did not answer");
      pollfd pfd{fd_, POLLIN, 0};
      if (poll(&pfd, 1, static_cast<int>(left)) <= 0) continue;
      ssize_t r = ::recv(fd_, c, n, 0);
      if (r == 0) return false;
      if (r < 0) {
        if (errno == EINTR) continue;
        throwSystemError("recv on the test channel", errno);
      }
      c += r;
      n -= static_cast<size_t>(r);
    }
    return true;
  }
  int fd_;
};

/// Both ends of a socketpair, made in the parent; each rank keeps its own end and closes the other.
struct ChannelPair {
  int fds[2] = {-1, -1};
  ChannelPair() {
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) throwSystemError("socketpair", errno);
  }
  ~ChannelPair() {
    close(fds[0]);
    close(fds[1]);
  }
  /// In a forked rank: the rank's channel (rank 0 or 1).
  std::unique_ptr<BlobChannel> take(int rank) {
    close(fds[1 - rank]);
    int mine = fds[rank];
    fds[0] = fds[1] = -1;
    return std::make_unique<BlobChannel>(mine);
  }
};

uint64_t loadAcquire(const void* word) { return __atomic_load_n(static_cast<const uint64_t*>(word), __ATOMIC_ACQUIRE); }

/// Spins (yielding: ranks share 2 cores) until the 64-bit counter at `word` reaches `expected`, within `timeout`.
void waitCounter(const void* word, uint64_t expected, std::chrono::milliseconds timeout, const char* what) {
  auto deadline = Clock::now() + timeout;
  while (loadAcquire(word) < expected) {
    if (Clock::now() > deadline) {
      throw Error(ErrorCode::kTimeout, std::string(what) + ": expected " + std::to_string(expected) + ", saw " +
                                           std::to_string(loadAcquire(word)));
    }
    std::this_thread::yield();
  }
}

/// Deterministic test bytes that depend on the writer, the transfer size and the position (no short period).
inline uint8_t pattern(int rank, uint64_t size, uint64_t j) {
  return static_cast<uint8_t>((j ^ (j >> 8) ^ (j >> 16)) * 31 + size * 7 + static_cast<uint64_t>(rank) * 101);
}

template <class F>
std::string errorOf(ErrorCode code, F&& f) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    return e.message();
  }
  ADD_FAILURE() << "no weft::Error thrown";
  return "";
}

constexpr uint64_t kHeader = 4096;  // counters live here; data follows
constexpr uint64_t kMaxTransfer = uint64_t{64} << 20;

TEST(HostTransportTest, TwoProcessesWritePatternsOneByteTo64MiBAndSignal) {
  ChannelPair pair;
  auto results = test::runRanks(
      2,
      [&](int rank, int) {
        auto ch = pair.take(rank);
        auto plugin = loadTransportPlugin("host", {}, {});
        const uint64_t inboxBytes = kHeader + kMaxTransfer + 64;
        auto inbox = allocSharedHostMemory(inboxBytes);
        auto outbox = allocSharedHostMemory(kMaxTransfer + 64);
        auto inReg = plugin->registerMemory(inbox.get(), inboxBytes, MemoryKind::kHost);
        auto outReg = plugin->registerMemory(outbox.get(), kMaxTransfer + 64, MemoryKind::kHost);
        auto ep = plugin->createEndpoint(0);
        ch->send(ep.blob());
        ch->send(inReg.blob());
        auto peerEp = ch->recv();
        auto peerInbox = ch->recv();
        auto conn = ep.connect(peerEp, 3s);
        auto remote = plugin->importMemory(peerInbox, 3s);
        ASSERT_NE(remote.mappedAddress(), nullptr);
        ASSERT_NE(remote.mappedAddress(), inbox.get());

        auto* in = static_cast<uint8_t*>(inbox.get());
        auto* out = static_cast<uint8_t*>(outbox.get());
        const uint64_t sizes[] = {1,           2, 7, 8, 63, 4095, 4096, 65537, 1 << 20, (1 << 20) + 3, (16 << 20) - 1,
                                  kMaxTransfer};
        uint64_t round = 0;
        for (uint64_t size : sizes) {
          const uint64_t srcOffset = round % 3, dstOffset = kHeader + round % 5;
          for (uint64_t j = 0; j < size; ++j) out[srcOffset + j] = pattern(rank, size, j);
          conn.write(remote, dstOffset, outReg, srcOffset, size);
          conn.atomicAdd(remote, 0, 1);  // "data round `round` is there"
          conn.flush(1s);
          ++round;
          waitCounter(in, round, 10s, "data signal");
          for (uint64_t j = 0; j < size; ++j) {
            if (in[dstOffset + j] != pattern(1 - rank, size, j)) {
              FAIL() << "size " << size << ": byte " << j << " is " << int(in[dstOffset + j]) << ", expected "
                     << int(pattern(1 - rank, size, j));
            }
          }
          conn.atomicAdd(remote, 8, 1);  // "I have checked round `round`": the peer may overwrite its buffer
          conn.flush(1s);
          waitCounter(in + 8, round, 10s, "ack signal");
        }
      },
      30s);
  WEFT_EXPECT_RANKS_OK(results);
}

TEST(HostTransportTest, AtomicAddsFromManyThreadsAreCountedExactly) {
  constexpr int kThreads = 4;
  constexpr uint64_t kAddsPerThread = 20000;
  ChannelPair pair;
  auto results = test::runRanks(
      2,
      [&](int rank, int) {
        auto ch = pair.take(rank);
        auto plugin = loadTransportPlugin("host", {}, {});
        auto inbox = allocSharedHostMemory(kHeader);
        auto inReg = plugin->registerMemory(inbox.get(), kHeader, MemoryKind::kHost);
        auto ep = plugin->createEndpoint(0);
        ch->send(ep.blob());
        ch->send(inReg.blob());
        auto peerEp = ch->recv();
        auto remote = plugin->importMemory(ch->recv(), 3s);
        auto shared = ep.connect(peerEp, 3s);
        std::vector<std::thread> threads;
        std::atomic<int> failures{0};
        for (int t = 0; t < kThreads; ++t) {
          threads.emplace_back([&, t] {
            try {
              // Threads 0 and 1 share one connection; 2 and 3 each open their own.
              TransportConnection own = t < 2 ? shared : ep.connect(peerEp, 3s);
              for (uint64_t i = 0; i < kAddsPerThread; ++i) own.atomicAdd(remote, 16, t + 1);
              own.flush(1s);
            } catch (...) {
              failures.fetch_add(1);
            }
          });
        }
        for (auto& th : threads) th.join();
        ASSERT_EQ(failures.load(), 0);
        ch->sendValue(1);  // all my adds are flushed
        ASSERT_EQ(ch->recvValue(), 1u);
        const uint64_t expected = kAddsPerThread * (kThreads * (kThreads + 1) / 2);
        EXPECT_EQ(loadAcquire(static_cast<uint8_t*>(inbox.get()) + 16), expected);
        EXPECT_EQ(loadAcquire(inbox.get()), 0u) << "a neighbouring word was touched";
        ch->sendValue(2);  // keep my memory registered until the peer has checked too
        ASSERT_EQ(ch->recvValue(), 2u);
      },
      30s);
  WEFT_EXPECT_RANKS_OK(results);
}

TEST(HostTransportTest, WrongTokenOrRegionIsRefusedAndTheRightOneStillWorks) {
  ChannelPair pair;
  auto results = test::runRanks(
      2,
      [&](int rank, int) {
        auto ch = pair.take(rank);
        auto plugin = loadTransportPlugin("host", {}, {});
        if (rank == 0) {
          auto mem = allocSharedHostMemory(8192);
          std::memcpy(static_cast<char*>(mem.get()) + 100, "owned by rank 0", 16);
          auto reg = plugin->registerMemory(static_cast<char*>(mem.get()) + 100, 4000, MemoryKind::kHost);
          ch->send(reg.blob());
          ASSERT_EQ(ch->recvValue(), 7u);  // the importer is done
          return;
        }
        auto blob = ch->recv();
        ASSERT_EQ(blob.size(), sizeof(host::MemoryBlob));
        auto tampered = blob;
        tampered[offsetof(host::MemoryBlob, token)] ^= 1;
        auto start = Clock::now();
        std::string msg = errorOf(ErrorCode::kRemoteError, [&] { plugin->importMemory(tampered, 2s); });
        EXPECT_NE(msg.find("token does not match"), std::string::npos) << msg;
        EXPECT_LT(Clock::now() - start, 1s);
        tampered = blob;
        tampered[offsetof(host::MemoryBlob, regionId)] ^= 0x40;
        msg = errorOf(ErrorCode::kRemoteError, [&] { plugin->importMemory(tampered, 2s); });
        EXPECT_NE(msg.find("is not registered"), std::string::npos) << msg;
        tampered = blob;
        tampered[offsetof(host::MemoryBlob, hostId)] ^= 1;
        msg = errorOf(ErrorCode::kInvalidArgument, [&] { plugin->importMemory(tampered, 2s); });
        EXPECT_NE(msg.find("one host only"), std::string::npos) << msg;
        auto remote = plugin->importMemory(blob, 2s);
        EXPECT_STREQ(static_cast<const char*>(remote.mappedAddress()), "owned by rank 0");
        ch->sendValue(7);
      },
      20s);
  WEFT_EXPECT_RANKS_OK(results);
}

/// The state letter of process `pid` from /proc (e.g. 'T' when stopped).
char processState(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t paren = all.rfind(')');
  return paren == std::string::npos || paren + 2 >= all.size() ? '?' : all[paren + 2];
}

TEST(HostTransportTest, ImportAfterTheOwnerDiedFailsQuickly) {
  ChannelPair pair;
  auto results = test::runRanks(
      2,
      [&](int rank, int) {
        auto ch = pair.take(rank);
        auto plugin = loadTransportPlugin("host", {}, {});
        if (rank == 0) {
          auto mem = allocSharedHostMemory(4096);
          auto reg = plugin->registerMemory(mem.get(), 4096, MemoryKind::kHost);
          ch->send(reg.blob());
          ch->sendValue(static_cast<uint64_t>(getpid()));
          _exit(0);  // die without any cleanup, the way a crashed rank does
        }
        auto blob = ch->recv();
        auto owner = static_cast<pid_t>(ch->recvValue());
        // Dead: a zombie (not reaped yet) or gone.
        auto until = Clock::now() + 5s;
        while (processState(owner) != 'Z' && processState(owner) != '?' && Clock::now() < until) {
          std::this_thread::sleep_for(1ms);
        }
        ASSERT_TRUE(processState(owner) == 'Z' || processState(owner) == '?');
        auto start = Clock::now();
        std::string msg = errorOf(ErrorCode::kRemoteError, [&] { plugin->importMemory(blob, 2s); });
        EXPECT_LT(Clock::now() - start, 2s);
        EXPECT_NE(msg.find("has exited"), std::string::npos) << msg;
      },
      20s);
  WEFT_EXPECT_RANKS_OK(results);
}

TEST(HostTransportTest, ImportFromAHungOwnerTimesOut) {
  ChannelPair pair;
  auto results = test::runRanks(
      2,
      [&](int rank, int) {
        auto ch = pair.take(rank);
        auto plugin = loadTransportPlugin("host", {}, {});
        if (rank == 0) {
          auto mem = allocSharedHostMemory(4096);
          auto reg = plugin->registerMemory(mem.get(), 4096, MemoryKind::kHost);
          ch->send(reg.blob());
          ch->sendValue(static_cast<uint64_t>(getpid()));
          raise(SIGSTOP);  // the fd server thread stops with us; rank 1 continues us when done
          ASSERT_EQ(ch->recvValue(), 9u);
          return;
        }
        auto blob = ch->recv();
        auto owner = static_cast<pid_t>(ch->recvValue());
        auto until = Clock::now() + 5s;
        while (processState(owner) != 'T' && Clock::now() < until) std::this_thread::sleep_for(1ms);
        ASSERT_EQ(processState(owner), 'T');
        auto start = Clock::now();
        std::string msg = errorOf(ErrorCode::kTimeout, [&] { plugin->importMemory(blob, 300ms); });
        auto took = Clock::now() - start;
        kill(owner, SIGCONT);
        EXPECT_GE(took, 250ms);
        EXPECT_LT(took, 2s);
        EXPECT_NE(msg.find("timed out"), std::string::npos) << msg;
        ch->sendValue(9);
      },
      20s);
  WEFT_EXPECT_RANKS_OK(results);
}

TEST(HostTransportTest, SameInstanceImportIsTheLocalBuffer) {
  auto plugin = loadTransportPlugin("host", {}, {});
  auto mem = allocSharedHostMemory(4096);
  auto reg = plugin->registerMemory(static_cast<char*>(mem.get()) + 64, 1024, MemoryKind::kHost);
  auto remote = plugin->importMemory(reg.blob(), 1s);
  EXPECT_EQ(remote.mappedAddress(), static_cast<char*>(mem.get()) + 64);
}

TEST(HostTransportTest, TwoInstancesInOneProcessGoThroughTheSocket) {
  auto a = loadTransportPlugin("host", {}, {});
  auto b = loadTransportPlugin("host", {}, {});
  auto dst = allocSharedHostMemory(8192);
  auto src = allocSharedHostMemory(4096);
  auto dstReg = a->registerMemory(static_cast<char*>(dst.get()) + 4096 + 16, 2048, MemoryKind::kHost);
  auto srcReg = b->registerMemory(src.get(), 4096, MemoryKind::kHost);
  auto remote = b->importMemory(dstReg.blob(), 1s);
  ASSERT_NE(remote.mappedAddress(), nullptr);
  EXPECT_NE(remote.mappedAddress(), static_cast<char*>(dst.get()) + 4096 + 16) << "expected a second mapping";
  auto epA = a->createEndpoint(0);
  auto epB = b->createEndpoint(0);
  auto connA = epA.connect(epB.blob(), 1s);
  auto connB = epB.connect(epA.blob(), 1s);
  std::memcpy(src.get(), "through the fd server", 22);
  connB.write(remote, 8, srcReg, 0, 22);
  connB.atomicAdd(remote, 0, 41);
  connB.atomicAdd(remote, 0, 1);
  connB.flush(0ns);
  EXPECT_STREQ(static_cast<char*>(dst.get()) + 4096 + 16 + 8, "through the fd server");
  EXPECT_EQ(loadAcquire(static_cast<char*>(dst.get()) + 4096 + 16), 42u);
}

TEST(HostTransportTest, BadInputGivesErrorsNotCrashes) {
  auto plugin = loadTransportPlugin("host", {}, {});
  std::vector<char> heap(4096);
  std::string msg =
      errorOf(ErrorCode::kNotSupported, [&] { plugin->registerMemory(heap.data(), heap.size(), MemoryKind::kHost); });
  EXPECT_NE(msg.find("allocSharedHostMemory"), std::string::npos) << msg;
  auto mem = allocSharedHostMemory(4096);
  errorOf(ErrorCode::kNotSupported, [&] { plugin->registerMemory(mem.get(), 4096, MemoryKind::kGpu, 0); });
  auto reg = plugin->registerMemory(mem.get(), 4096, MemoryKind::kHost);
  auto remote = plugin->importMemory(reg.blob(), 1s);
  auto ep = plugin->createEndpoint(0);
  auto conn = ep.connect(ep.blob(), 1s);
  errorOf(ErrorCode::kInvalidArgument, [&] { conn.write(remote, 4000, reg, 0, 97); });
  errorOf(ErrorCode::kInvalidArgument, [&] { conn.write(remote, 0, reg, 1, 4096); });
  errorOf(ErrorCode::kInvalidArgument, [&] { conn.write(remote, ~uint64_t{0}, reg, 0, 2); });
  msg = errorOf(ErrorCode::kInvalidArgument, [&] { conn.atomicAdd(remote, 4, 1); });
  EXPECT_NE(msg.find("not 8-byte aligned"), std::string::npos) << msg;
  errorOf(ErrorCode::kInvalidArgument, [&] { conn.atomicAdd(remote, 4096, 1); });

  auto blob = reg.blob();
  errorOf(ErrorCode::kInvalidArgument, [&] { plugin->importMemory({blob.begin(), blob.end() - 1}, 1s); });
  errorOf(ErrorCode::kInvalidArgument, [&] { plugin->importMemory(std::vector<uint8_t>(blob.size(), 0xab), 1s); });
  errorOf(ErrorCode::kInvalidArgument, [&] { plugin->importMemory({}, 1s); });
  auto badEp = ep.blob();
  badEp[offsetof(host::EndpointBlob, hostId)] ^= 1;
  msg = errorOf(ErrorCode::kInvalidArgument, [&] { ep.connect(badEp, 1s); });
  EXPECT_NE(msg.find("one host only"), std::string::npos) << msg;
  errorOf(ErrorCode::kInvalidArgument, [&] { ep.connect(blob, 1s); });  // a memory blob is no endpoint blob
}

TEST(HostTransportTest, DeregisteredRegionCannotBeImported) {
  auto owner = loadTransportPlugin("host", {}, {});
  auto importer = loadTransportPlugin("host", {}, {});
  auto mem = allocSharedHostMemory(4096);
  std::vector<uint8_t> blob;
  {
    auto reg = owner->registerMemory(mem.get(), 4096, MemoryKind::kHost);
    blob = reg.blob();
  }
  std::string msg = errorOf(ErrorCode::kRemoteError, [&] { importer->importMemory(blob, 1s); });
  EXPECT_NE(msg.find("is not registered"), std::string::npos) << msg;
}

}  // namespace
}  // namespace weft
