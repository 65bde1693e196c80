// The libfabric transport between real processes (forked ranks), over the real tcp (through ofi_rxm) and shm
// providers: verified writes of many sizes and offsets, back-to-back writes behind one flush, exact atomic counts from
// several threads on both sides, flush timeouts against a stopped peer, a killed peer, bad blobs and options, and
// PortChannel through Communicator + ProxyService with libfabric forced for the same host.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <poll.h>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <multi_process.hpp>
#include <regex>
#include <string>
#include <thread>
#include <vector>
#include <weft/build_config.hpp>
#include <weft/communicator.hpp>
#include <weft/error.hpp>
#include <weft/proxy_service.hpp>
#include <weft/shared_host_memory.hpp>

#include "../../transports/common/usable_cpus.hpp"
#include "../../transports/libfabric/libfabric_wire.hpp"
#include "logging.hpp"
#include "transport_plugin.hpp"

namespace weft {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

/// Length-prefixed messages over one end of a socketpair, every receive with a deadline.
class Channel {
 public:
  explicit Channel(int fd) : fd_(fd) {}
  ~Channel() { close(fd_); }
  void send(const std::vector<uint8_t>& bytes) {
    uint32_t n = static_cast<uint32_t>(bytes.size());
    writeAll(&n, sizeof(n));
    writeAll(bytes.data(), bytes.size());
  }
  std::vector<uint8_t> recv(std::chrono::milliseconds timeout = 10s) {
    auto deadline = Clock::now() + timeout;
    uint32_t n = 0;
    readAll(&n, sizeof(n), deadline);
    if (n > (1u << 20)) throw Error(ErrorCode::kProtocolError, "message too long");
    std::vector<uint8_t> bytes(n);
    readAll(bytes.data(), n, deadline);
    return bytes;
  }
  void sendValue(uint64_t v) {
    std::vector<uint8_t> b(sizeof(v));
    std::memcpy(b.data(), &v, sizeof(v));
    send(b);
  }
  uint64_t recvValue(std::chrono::milliseconds timeout = 10s) {
    auto b = recv(timeout);
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
  void readAll(void* p, size_t n, Clock::time_point deadline) {
    auto* c = static_cast<char*>(p);
    while (n > 0) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) throw Error(ErrorCode::kTimeout, "test channel: peer did not answer");
      pollfd pfd{fd_, POLLIN, 0};
      if (poll(&pfd, 1, static_cast<int>(left)) <= 0) continue;
      ssize_t r = ::recv(fd_, c, n, 0);
      if (r == 0) throw Error(ErrorCode::kRemoteError, "peer closed the test channel");
      if (r < 0) {
        if (errno == EINTR) continue;
        throwSystemError("recv on the test channel", errno);
      }
      c += r;
      n -= static_cast<size_t>(r);
    }
  }
  int fd_;
};

struct ChannelPair {
  int fds[2] = {-1, -1};
  ChannelPair() {
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) throwSystemError("socketpair", errno);
  }
  ~ChannelPair() {
    close(fds[0]);
    close(fds[1]);
  }
  std::unique_ptr<Channel> take(int rank) {
    close(fds[1 - rank]);
    int mine = fds[rank];
    fds[0] = fds[1] = -1;
    return std::make_unique<Channel>(mine);
  }
};

uint64_t loadAcquire(const void* word) { return __atomic_load_n(static_cast<const uint64_t*>(word), __ATOMIC_ACQUIRE); }

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

/// Page-aligned heap memory (libfabric registers any host memory; no shared file is needed).
std::shared_ptr<uint8_t> hostBuffer(uint64_t bytes) {
  void* p = nullptr;
  if (posix_memalign(&p, 4096, bytes) != 0) throw Error(ErrorCode::kSystemError, "posix_memalign");
  std::memset(p, 0, bytes);
  return std::shared_ptr<uint8_t>(static_cast<uint8_t*>(p), [](uint8_t* q) { std::free(q); });
}

/// `provider` may carry "+isolated": the plugin then lets only its progress thread into the provider
/// (isolate_provider), as it does by default for shm on hosts of 8 or more cores; "shm+isolated" checks that path
/// on any host.
std::shared_ptr<TransportPlugin> loadFabric(const std::string& provider, const std::string& signals = "auto") {
  const size_t plus = provider.find('+');
  if (plus == std::string::npos) {
    return loadTransportPlugin("libfabric", {}, {{"provider", provider}, {"signals", signals}});
  }
  if (provider.substr(plus) != "+isolated") throw Error(ErrorCode::kInvalidArgument, "test provider " + provider);
  return loadTransportPlugin(
      "libfabric", {}, {{"provider", provider.substr(0, plus)}, {"signals", signals}, {"isolate_provider", "true"}});
}

/// Whether this machine's libfabric offers `provider` (checked in the parent, before any fork). Only a provider that
/// fi_getinfo does not offer, or a plugin that was not built, skips a test: any other failure to start the plugin
/// (a refused option, a broken init) is a failure, so that it cannot hide behind a skip (CI once skipped every test
/// here while the plugin refused an option the tests pass).
///
/// The probe runs in a child process: in a GPU build the plugin pins a staging buffer, which starts the GPU runtime,
/// and a runtime started in the parent does not survive the fork of the test's ranks (they failed with
/// "initialization error" on the GPU machine).
bool providerPresent(const std::string& provider, std::string* why) {
  int fds[2];
  if (::pipe(fds) != 0) throw Error(ErrorCode::kSystemError, "pipe");
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    std::string message;
    try {
      loadFabric(provider);
    } catch (const Error& e) {
      message = e.message().empty() ? std::string("(no message)") : e.message();
    }
    if (!message.empty()) (void)!::write(fds[1], message.data(), message.size());
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string message;
  char buf[512];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof(buf))) > 0;) message.append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  int status = 0;
  (void)::waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    ADD_FAILURE() << "probing the libfabric plugin with provider " << provider << " crashed (status " << status << ")";
    return false;
  }
  if (message.empty()) return true;
  *why = message;
  const bool absent = why->find("offers FI_EP_RDM endpoints") != std::string::npos ||
                      why->find("' not found: no ") != std::string::npos;
  if (!absent) ADD_FAILURE() << "the libfabric plugin with provider " << provider << " failed to start: " << *why;
  return false;
}

/// Removes the names of this process's shm regions ("<pid>:<uid>:<index>" in /dev/shm) before a rank dies on purpose
/// without closing: the peer's mapping and the dead endpoint stay as a crash leaves them, but each run no longer
/// leaves a 16 MB region behind (a container's /dev/shm is often 64 MB).
std::string shmRegionPrefix() { return std::to_string(::getpid()) + ":" + std::to_string(::getuid()) + ":"; }

void forgetShmRegionsOfThisProcess() {
  const std::string prefix = shmRegionPrefix();
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) == 0) (void)::unlink(entry.path().c_str());
  }
}

class LibfabricTransportTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    std::string why;
    if (!providerPresent(GetParam(), &why)) GTEST_SKIP() << "provider " << GetParam() << " unavailable: " << why;
  }
};

/// One rank's plugin, endpoint, connection and an exchanged inbox (the peer's registration imported).
struct Pair {
  std::shared_ptr<TransportPlugin> plugin;
  std::shared_ptr<uint8_t> inbox, outbox;
  TransportMemory inReg, outReg;
  TransportEndpoint ep;
  TransportConnection conn;
  TransportRemoteMemory remote;

  Pair(Channel& ch, const std::string& provider, uint64_t inBytes, uint64_t outBytes,
       const std::string& signals = "auto") {
    plugin = loadFabric(provider, signals);
    inbox = hostBuffer(inBytes);
    outbox = hostBuffer(outBytes);
    inReg = plugin->registerMemory(inbox.get(), inBytes, MemoryKind::kHost);
    outReg = plugin->registerMemory(outbox.get(), outBytes, MemoryKind::kHost);
    ep = plugin->createEndpoint(0);
    ch.send(ep.blob());
    ch.send(inReg.blob());
    auto peerEp = ch.recv();
    auto peerInbox = ch.recv();
    conn = ep.connect(peerEp, 3s);
    // What Communicator::connect does: neither side goes on before both connected (the side that opens the
    // connection waits inside connect for the other to answer).
    ch.send(std::vector<uint8_t>{1});
    (void)ch.recv();
    remote = plugin->importMemory(peerInbox, 3s);
  }
};

constexpr uint64_t kHeader = 4096;  // counters live here; data follows

/// Two forked ranks, each with its end of a ChannelPair and a Pair over `provider` (an inbox of `inBytes`, an outbox of
/// `outBytes`), each running body(rank, its channel, its pair).
template <class Body>
std::vector<test::RankResult> runPair(const std::string& provider, uint64_t inBytes, uint64_t outBytes, Body&& body,
                                      std::chrono::milliseconds timeout) {
  ChannelPair pairs;
  return test::runRanks(
      2,
      [&](int rank, int) {
        auto ch = pairs.take(rank);
        Pair p(*ch, provider, inBytes, outBytes);
        body(rank, ch.get(), p);
      },
      timeout);
}
constexpr uint64_t kMaxTransfer = uint64_t{64} << 20;

TEST_P(LibfabricTransportTest, WritesFromOneByteTo64MiBAtOddOffsetsArriveIntact) {
  const std::string provider = GetParam();
  auto results = runPair(
      provider, kHeader + kMaxTransfer + 64, kMaxTransfer + 64,
      [&](int rank, Channel* ch, Pair& p) {
        uint8_t* in = p.inbox.get();
        uint8_t* out = p.outbox.get();
        const uint64_t sizes[] = {1, 7, 1024, 4097, 65537, (1 << 20) + 3, (16 << 20) - 1, kMaxTransfer};
        uint64_t round = 0;
        for (uint64_t size : sizes) {
          const uint64_t srcOffset = round % 3, dstOffset = kHeader + round % 5;
          for (uint64_t j = 0; j < size; ++j) out[srcOffset + j] = pattern(rank, size, j);
          p.conn.write(p.remote, dstOffset, p.outReg, srcOffset, size);
          p.conn.atomicAdd(p.remote, 0, 1);  // ordered after the write: "round `round` is there"
          p.conn.flush(5s);
          ++round;
          waitCounter(in, round, 10s, "data signal");
          uint64_t wrong = 0;
          for (uint64_t j = 0; j < size; ++j) wrong += in[dstOffset + j] != pattern(1 - rank, size, j);
          ASSERT_EQ(wrong, 0u) << "size " << size;
          p.conn.atomicAdd(p.remote, 8, 1);  // "checked": the peer may overwrite
          p.conn.flush(5s);
          waitCounter(in + 8, round, 10s, "ack signal");
        }
        // The peer leaves only after our last flush returned: that flush's confirming read is answered by the peer,
        // and a peer that saw our ack and closed its endpoint at once never answers it (see docs/libfabric.md).
        ch->sendValue(1);
        EXPECT_EQ(ch->recvValue(), 1u);
      },
      40s);
  WEFT_EXPECT_RANKS_OK(results);
}

// flush means "at the destination": after it returns, the writer tells the reader over another channel (no signal)
// and the reader checks at once. Writes over tcp go without delivery-complete acknowledgements; the read that flush
// posts behind them is what vouches for them (see docs/libfabric.md, flush).
TEST_P(LibfabricTransportTest, FlushedWritesAreAtThePeerWithoutASignal) {
  const std::string provider = GetParam();
  constexpr uint64_t kBytes = 16 << 20;
  auto results = runPair(
      provider, kHeader + kBytes, kBytes,
      [&](int rank, Channel* ch, Pair& p) {
        const uint64_t sizes[] = {8, 4096, 1 << 20, kBytes, kBytes / 2 + 1};
        for (uint64_t round = 0; round < 10; ++round) {
          const uint64_t size = sizes[round % 5];
          if (rank == 0) {
            for (uint64_t j = 0; j < size; ++j) p.outbox.get()[j] = pattern(static_cast<int>(round), size, j);
            // In pieces, as a put loop issues them; the flush covers them all.
            for (uint64_t done = 0; done < size; done += std::min<uint64_t>(size - done, 1 << 20)) {
              p.conn.write(p.remote, kHeader + done, p.outReg, done, std::min<uint64_t>(size - done, 1 << 20));
            }
            p.conn.flush(5s);
            p.conn.flush(5s);  // nothing new: returns without another round trip, and still true
            ch->sendValue(round);
            ASSERT_EQ(ch->recvValue(), round);  // checked: the source may change
          } else {
            ASSERT_EQ(ch->recvValue(), round);
            uint64_t wrong = 0;
            for (uint64_t j = 0; j < size; ++j) {
              wrong += p.inbox.get()[kHeader + j] != pattern(static_cast<int>(round), size, j);
            }
            ASSERT_EQ(wrong, 0u) << "round " << round << ", " << size << " bytes";
            ch->sendValue(round);
          }
        }
      },
      60s);
  WEFT_EXPECT_RANKS_OK(results);
}

TEST_P(LibfabricTransportTest, ManyBackToBackWritesThenOneSignalAndFlush) {
  const std::string provider = GetParam();
  constexpr uint64_t kWrites = 3000, kSlot = 1000;  // odd slot size: unaligned destinations
  auto results = runPair(
      provider, kHeader + kWrites * kSlot, kWrites * kSlot,
      [&](int rank, Channel* ch, Pair& p) {
        uint8_t* out = p.outbox.get();
        for (uint64_t j = 0; j < kWrites * kSlot; ++j) out[j] = pattern(rank, kSlot, j);
        for (uint64_t i = 0; i < kWrites; ++i) {
          // Slots in a scrambled order, so completion order says nothing about placement.
          const uint64_t slot = (i * 7919) % kWrites;
          p.conn.write(p.remote, kHeader + slot * kSlot, p.outReg, slot * kSlot, kSlot);
        }
        p.conn.atomicAdd(p.remote, 0, 1);
        p.conn.flush(10s);
        waitCounter(p.inbox.get(), 1, 10s, "signal behind the writes");
        uint64_t wrong = 0;
        for (uint64_t j = 0; j < kWrites * kSlot; ++j)
          wrong += p.inbox.get()[kHeader + j] != pattern(1 - rank, kSlot, j);
        EXPECT_EQ(wrong, 0u);
        ch->sendValue(1);
        EXPECT_EQ(ch->recvValue(), 1u);
      },
      30s);
  WEFT_EXPECT_RANKS_OK(results);
}

// shm names each endpoint's region "<pid>:<uid>:<index>" in /dev/shm. A process that died without closing (a killed
// rank) leaves its region there, and once its pid comes round again the new endpoint found a region it could not
// take: fi_enable failed with EBUSY (CI under parallel ctest, 2026-12-06). Each rank here plants such regions under
// its own pid before it starts, as a stale one from another libfabric version looks.
TEST_P(LibfabricTransportTest, StaleShmRegionsUnderThisPidDoNotStopTheEndpoint) {
  const std::string provider = GetParam();
  constexpr int kPlanted = 64;  // every endpoint index this process might take
  ChannelPair pairs;
  auto results = test::runRanks(
      2,
      [&](int rank, int) {
        auto ch = pairs.take(rank);
        // Whatever the ranks leave under this pid goes at the end, on failure too: the planted names, and none live.
        struct Forget {
          ~Forget() { forgetShmRegionsOfThisProcess(); }
        } forget;
        const std::vector<char> zeros(4096, 0);  // version 0: no libfabric's region
        for (int i = 0; i < kPlanted; ++i) {
          FILE* f = std::fopen(("/dev/shm/" + shmRegionPrefix() + std::to_string(i)).c_str(), "wx");
          if (f == nullptr) continue;  // a live one of this pid: not ours to touch
          std::fwrite(zeros.data(), 1, zeros.size(), f);
          std::fclose(f);
        }
        {
          Pair p(*ch, provider, kHeader + 4096, 4096);
          for (uint64_t j = 0; j < 4096; ++j) p.outbox.get()[j] = pattern(rank, 4096, j);
          p.conn.write(p.remote, kHeader, p.outReg, 0, 4096);
          p.conn.atomicAdd(p.remote, 0, 1);
          p.conn.flush(5s);
          waitCounter(p.inbox.get(), 1, 10s, "signal behind the write");
          uint64_t wrong = 0;
          for (uint64_t j = 0; j < 4096; ++j) wrong += p.inbox.get()[kHeader + j] != pattern(1 - rank, 4096, j);
          EXPECT_EQ(wrong, 0u);
          ch->sendValue(1);
          EXPECT_EQ(ch->recvValue(), 1u);
        }
      },
      30s);
  WEFT_EXPECT_RANKS_OK(results);
}

// Both ranks add into each other's word from several threads at once, 8-byte writes mixed in; every add arrives once.
void addsFromBothSides(const std::string& provider) {
  // These small values travel as remote CQ data (tcp, shm) and are added by the target's own progress thread, which
  // also makes shm exact: its fi_atomic FI_SUM (libfabric 1.17) miscounts such streams (docs/libfabric.md).
  constexpr int kThreads = 4;
  constexpr uint64_t kAddsPerThread = 3000;
  auto results = runPair(
      provider, kHeader, 4096,
      [&](int rank, Channel* ch, Pair& p) {
        auto peerEp = std::vector<uint8_t>();
        std::vector<std::thread> threads;
        std::atomic<int> failures{0};
        for (int t = 0; t < kThreads; ++t) {
          threads.emplace_back([&, t] {
            try {
              for (uint64_t i = 0; i < kAddsPerThread; ++i) {
                p.conn.atomicAdd(p.remote, 16, t + 1);
                if (i % 500 == 0) p.conn.write(p.remote, 1024 + 8 * t, p.outReg, 0, 8);  // writes mixed in
              }
              p.conn.flush(10s);
            } catch (const std::exception& e) {
              std::fprintf(stderr, "thread %d: %s\n", t, e.what());
              failures.fetch_add(1);
            }
          });
        }
        for (auto& th : threads) th.join();
        ASSERT_EQ(failures.load(), 0);
        ch->sendValue(1);  // all my adds are flushed
        ASSERT_EQ(ch->recvValue(), 1u);
        const uint64_t expected = kAddsPerThread * (kThreads * (kThreads + 1) / 2);
        // Adds carried as CQ data are applied by this rank's progress thread from its completion queue, possibly
        // after the peer's flush returned: wait for the sum, then make sure nothing more arrives.
        waitCounter(p.inbox.get() + 16, expected, 10s, "the peer's adds");
        std::this_thread::sleep_for(50ms);
        EXPECT_EQ(loadAcquire(p.inbox.get() + 16), expected);
        EXPECT_EQ(loadAcquire(p.inbox.get() + 8), 0u) << "a neighbouring word was touched";
        EXPECT_EQ(loadAcquire(p.inbox.get() + 24), 0u) << "a neighbouring word was touched";
        ch->sendValue(2);
        ASSERT_EQ(ch->recvValue(), 2u);
      },
      30s);
  WEFT_EXPECT_RANKS_OK(results);
}

TEST_P(LibfabricTransportTest, AtomicAddsFromBothSidesAndManyThreadsAreExact) { addsFromBothSides(GetParam()); }

// The same with every core of the machine kept busy by other processes. shm used to ask for FI_DELIVERY_COMPLETE,
// which kept one write in flight per endpoint: each operation then waited for both ranks' progress threads to be
// scheduled, and the flushes ran out of their 10 s (every run on 2 and on 16 cores). It now asks for in-order RMA.
TEST_P(LibfabricTransportTest, AtomicAddsFromBothSidesFinishOnBusyCores) {
  std::vector<pid_t> busy;
  const long cores = sysconf(_SC_NPROCESSORS_ONLN);
  for (long i = 0; i < std::max(1L, cores); ++i) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      alarm(60);  // never outlives a crashed test
      volatile uint64_t spin = 0;
      for (;;) spin = spin + 1;
    }
    busy.push_back(pid);
  }
  addsFromBothSides(GetParam());
  for (pid_t pid : busy) {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
  }
}

/// Rank 1 stops itself (SIGSTOP: its progress thread stops with it, nothing is received) with `bytes` of inbox after
/// the header. Rank 0 runs `whileStopped` (writes, a signal, a flush that must time out), continues the peer and
/// flushes again: the operations stayed pending and now complete. Rank 1 then waits for the signal and runs `check`.
void againstAStoppedPeer(const std::string& provider, uint64_t bytes, const std::function<void(Pair&)>& whileStopped,
                         const std::function<void(Pair&)>& check) {
  auto results = runPair(
      provider, kHeader + bytes, bytes,
      [&](int rank, Channel* ch, Pair& p) {
        if (rank == 1) {
          ch->sendValue(static_cast<uint64_t>(getpid()));
          raise(SIGSTOP);
          ASSERT_EQ(ch->recvValue(), 5u);
          waitCounter(p.inbox.get(), 1, 10s, "signal after continuing");
          check(p);
          ch->sendValue(6);
          return;
        }
        auto peer = static_cast<pid_t>(ch->recvValue());
        std::this_thread::sleep_for(100ms);  // let it stop
        whileStopped(p);
        kill(peer, SIGCONT);
        p.conn.flush(10s);
        ch->sendValue(5);
        EXPECT_EQ(ch->recvValue(), 6u);
      },
      30s);
  WEFT_EXPECT_RANKS_OK(results);
}

TEST_P(LibfabricTransportTest, FlushAgainstAStoppedPeerTimesOutAndLaterCompletes) {
  constexpr uint64_t kBytes = 32 << 20;
  againstAStoppedPeer(
      GetParam(), kBytes,
      [&](Pair& p) {
        for (uint64_t j = 0; j < kBytes; ++j) p.outbox.get()[j] = pattern(0, kBytes, j);
        p.conn.write(p.remote, kHeader, p.outReg, 0, kBytes);
        p.conn.atomicAdd(p.remote, 0, 1);
        auto start = Clock::now();
        std::string msg = errorOf(ErrorCode::kTimeout, [&] { p.conn.flush(300ms); });
        auto took = Clock::now() - start;
        EXPECT_GE(took, 250ms);
        EXPECT_LT(took, 2s);
        EXPECT_NE(msg.find("timed out"), std::string::npos) << msg;
        // It says where the operations wait: posted to the provider, queued here, or signals held behind writes.
        EXPECT_NE(msg.find("posted and not completed"), std::string::npos) << msg;
        EXPECT_NE(msg.find("signals held behind writes"), std::string::npos) << msg;
        EXPECT_NE(msg.find("the oldest posted: fi_"), std::string::npos) << msg;  // and which operation waits longest
      },
      [&](Pair& p) {
        uint64_t wrong = 0;
        for (uint64_t j = 0; j < kBytes; ++j) wrong += p.inbox.get()[kHeader + j] != pattern(0, kBytes, j);
        EXPECT_EQ(wrong, 0u);
      });
}

// A small write completes at the sender without the peer (inline or into the socket); only the read that confirms
// it is at the peer waits for a peer that is stopped, or that closed its endpoint once it saw the last signal. The
// timeout says so instead of leaving "1 posted" to guess at.
TEST_P(LibfabricTransportTest, AFlushWaitingOnlyForThePeersAnswerSaysSo) {
  againstAStoppedPeer(
      GetParam(), 64,
      [&](Pair& p) {
        p.outbox.get()[0] = 0x5a;
        p.conn.write(p.remote, kHeader, p.outReg, 0, 8);
        p.conn.atomicAdd(p.remote, 0, 1);
        std::string msg = errorOf(ErrorCode::kTimeout, [&] { p.conn.flush(500ms); });
        EXPECT_NE(msg.find("1 posted and not completed, 0 queued"), std::string::npos) << msg;
        EXPECT_NE(msg.find("the read that confirms delivery"), std::string::npos) << msg;
      },
      [&](Pair& p) { EXPECT_EQ(p.inbox.get()[kHeader], 0x5a); });
}

// The peer saw the last signal and closed at once; this side's flush, its read posted 10 ms after the signal, must
// still be answered (finalize keeps the endpoint answering for a while after a peer's last signal). Failed before:
// the read went unanswered and the flush timed out although the data had arrived.
TEST_P(LibfabricTransportTest, APeerThatClosesRightAfterTheLastSignalStillAnswersTheFlush) {
  const std::string provider = GetParam();
  auto results = runPair(
      provider, kHeader + 64, 64,
      [&](int rank, Channel* ch, Pair& p) {
        ch->sendValue(1);
        ASSERT_EQ(ch->recvValue(), 1u);  // both connected and ready
        if (rank == 1) {
          waitCounter(p.inbox.get(), 1, 10s, "the last signal");
          EXPECT_EQ(p.inbox.get()[kHeader], 0x6b);
          return;  // closes at once: Pair's plugin finalizes
        }
        p.outbox.get()[0] = 0x6b;
        p.conn.write(p.remote, kHeader, p.outReg, 0, 8);
        p.conn.atomicAdd(p.remote, 0, 1);
        std::this_thread::sleep_for(10ms);  // the peer is closing by now
        p.conn.flush(5s);
      },
      30s);
  WEFT_EXPECT_RANKS_OK(results);
}

TEST_P(LibfabricTransportTest, PeerKilledMidTransferGivesAnErrorNotAHang) {
  const std::string provider = GetParam();
  if (provider == "shm" && transport_support::usableCpus() < 8) {  // the plugin's kSpareCpusFrom
    // Without isolate_provider (the default below 8 usable CPUs), a thread of ours that posts to a peer that died
    // holding the spin lock of its shm region spins forever (libfabric 1.17), and callers behind it wait on it:
    // CI's 2 cores hung here (docs/libfabric.md). shm+isolated runs this test on every host.
    GTEST_SKIP() << "shm is not isolated by default on " << transport_support::usableCpus()
                 << " usable CPUs: a dead peer can hang it; the shm+isolated case covers this";
  }
  constexpr uint64_t kBytes = 8 << 20;
  auto results = runPair(
      provider, kHeader + kBytes, kBytes,
      [&](int rank, Channel* ch, Pair& p) {
        if (rank == 1) {
          ch->sendValue(1);
          waitCounter(p.inbox.get(), 2, 10s, "first transfers");
          forgetShmRegionsOfThisProcess();
          _exit(0);  // die mid-transfer without cleanup, the way a crashed rank does
        }
        ASSERT_EQ(ch->recvValue(), 1u);
        auto start = Clock::now();
        bool failed = false;
        for (int i = 0; i < 200 && !failed; ++i) {
          try {
            p.conn.write(p.remote, kHeader, p.outReg, 0, kBytes);
            p.conn.atomicAdd(p.remote, 0, 1);
            p.conn.flush(1s);
          } catch (const Error& e) {
            EXPECT_TRUE(e.code() == ErrorCode::kRemoteError || e.code() == ErrorCode::kTimeout) << e.what();
            failed = true;
          }
        }
        EXPECT_TRUE(failed) << "200 transfers to a dead peer all succeeded";
        EXPECT_LT(Clock::now() - start, 8s);
      },
      30s);
  ASSERT_EQ(results.size(), 2u);
  EXPECT_TRUE(results[0].ok()) << test::describeFailures(results);
}

// The other way round: the writer dies with a large write carrying its signal half sent. The target must stay up
// while its progress thread meets the broken connection, and tear down without a crash (see docs/libfabric.md,
// "Teardown over a dead link").
TEST_P(LibfabricTransportTest, WriterKilledMidTransferLeavesTheTargetStandingAndItsTeardownClean) {
  const std::string provider = GetParam();
  constexpr uint64_t kBytes = 8 << 20;
  auto results = runPair(
      provider, kHeader + kBytes, kBytes,
      [&](int rank, Channel* ch, Pair& p) {
        if (rank == 0) {
          for (int i = 0;; ++i) {
            p.conn.write(p.remote, kHeader, p.outReg, 0, kBytes);
            p.conn.atomicAdd(p.remote, 0, 1);
            if (i == 3) {
              forgetShmRegionsOfThisProcess();
              _exit(0);  // with the last write and its signal still on the way
            }
            p.conn.flush(5s);
          }
        }
        waitCounter(p.inbox.get(), 3, 10s, "first transfers");
        std::this_thread::sleep_for(500ms);  // the progress thread meets the closed connection
      },
      30s);
  ASSERT_EQ(results.size(), 2u);
  EXPECT_TRUE(results[1].ok()) << test::describeFailures(results);
}

TEST_P(LibfabricTransportTest, BadBlobsAndRangesAreRefused) {
  auto plugin = loadFabric(GetParam());
  ASSERT_EQ(plugin->devices().size(), 1u);
  EXPECT_TRUE(plugin->devices()[0].hostMemory);
  auto buf = hostBuffer(8192);
  auto reg = plugin->registerMemory(buf.get(), 4096, MemoryKind::kHost);
  auto ep = plugin->createEndpoint(0);
  auto blob = reg.blob();
  ASSERT_EQ(blob.size(), sizeof(fabric::MemoryBlob));
  errorOf(ErrorCode::kInvalidArgument, [&] { plugin->importMemory({blob.begin(), blob.end() - 1}, 1s); });
  errorOf(ErrorCode::kInvalidArgument, [&] { plugin->importMemory(std::vector<uint8_t>(blob.size(), 0xab), 1s); });
  errorOf(ErrorCode::kInvalidArgument, [&] { plugin->importMemory({}, 1s); });
  auto badProvider = blob;
  std::memcpy(badProvider.data() + offsetof(fabric::MemoryBlob, provider), "psm9", 5);
  std::string msg = errorOf(ErrorCode::kInvalidArgument, [&] { plugin->importMemory(badProvider, 1s); });
  EXPECT_NE(msg.find("psm9"), std::string::npos) << msg;
  auto badFlags = blob;
  badFlags[offsetof(fabric::MemoryBlob, flags) + 3] = 0x80;
  errorOf(ErrorCode::kInvalidArgument, [&] { plugin->importMemory(badFlags, 1s); });

  auto epBlob = ep.blob();
  errorOf(ErrorCode::kInvalidArgument, [&] { ep.connect(blob, 1s); });  // a memory blob is no endpoint blob
  auto badLen = epBlob;
  uint32_t huge = 100000;
  std::memcpy(badLen.data() + offsetof(fabric::EndpointBlob, addressBytes), &huge, sizeof(huge));
  errorOf(ErrorCode::kInvalidArgument, [&] { ep.connect(badLen, 1s); });
  auto unterminated = epBlob;
  std::memset(unterminated.data() + offsetof(fabric::EndpointBlob, provider), 'x', fabric::kProviderBytes);
  errorOf(ErrorCode::kInvalidArgument, [&] { ep.connect(unterminated, 1s); });

  // Loopback through our own endpoint: ranges and alignment are checked before anything is posted.
  auto conn = ep.connect(epBlob, 1s);
  auto remote = plugin->importMemory(blob, 1s);
  errorOf(ErrorCode::kInvalidArgument, [&] { conn.write(remote, 4000, reg, 0, 97); });
  errorOf(ErrorCode::kInvalidArgument, [&] { conn.write(remote, 0, reg, 1, 4096); });
  errorOf(ErrorCode::kInvalidArgument, [&] { conn.write(remote, ~uint64_t{0}, reg, 0, 2); });
  msg = errorOf(ErrorCode::kInvalidArgument, [&] { conn.atomicAdd(remote, 4, 1); });
  EXPECT_NE(msg.find("not 8-byte aligned"), std::string::npos) << msg;
  errorOf(ErrorCode::kInvalidArgument, [&] { conn.atomicAdd(remote, 4096, 1); });
  // And a valid loopback write + add lands.
  std::memcpy(buf.get() + 4096, "loop", 5);
  auto src = plugin->registerMemory(buf.get() + 4096, 4096, MemoryKind::kHost);
  conn.write(remote, 64, src, 0, 5);
  conn.atomicAdd(remote, 0, 41);
  conn.atomicAdd(remote, 0, 1);
  conn.flush(3s);
  EXPECT_STREQ(reinterpret_cast<const char*>(buf.get()) + 64, "loop");
  EXPECT_EQ(loadAcquire(buf.get()), 42u);
}

TEST_P(LibfabricTransportTest, GpuMemoryWithoutAStagingPathIsNotSupported) {
#if WEFT_BUILD_GPU_NONE
  auto plugin = loadFabric(GetParam());
  EXPECT_FALSE(plugin->devices()[0].gpuMemory);
  auto buf = hostBuffer(4096);
  std::string msg =
      errorOf(ErrorCode::kNotSupported, [&] { plugin->registerMemory(buf.get(), 4096, MemoryKind::kGpu, 0); });
  EXPECT_NE(msg.find("WEFT_GPU=none"), std::string::npos) << msg;
#else
  GTEST_SKIP() << "GPU builds stage or register GPU memory (covered by GPU tests)";
#endif
}

INSTANTIATE_TEST_SUITE_P(Providers, LibfabricTransportTest, ::testing::Values("tcp", "shm", "shm+isolated"),
                         [](const auto& info) {
                           std::string name = info.param;
                           std::replace(name.begin(), name.end(), '+', '_');
                           return name;
                         });

// ---- the signal paths: CQ data behind the writes, CQ data after their completion, fi_atomic ----

/// (provider, `signals` option).
class LibfabricSignalPathTest : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {
 protected:
  void SetUp() override {
    std::string why;
    if (!providerPresent(std::get<0>(GetParam()), &why)) GTEST_SKIP() << "provider unavailable: " << why;
  }
};

// The peer that sees a signal sees every byte written before it on the connection: rank 0 writes sizes from 1 byte
// to past the 4 MiB chunk, a fresh pattern each round, signals without flushing, and rank 1 checks the bytes the
// moment its counter moves. Every third signal has a value too large for CQ data (it goes as fi_atomic), so the two
// kinds interleave on one word and one connection; some rounds split the data in two writes, some wait 200 us before
// signalling (the signal then cannot ride on the write).
TEST_P(LibfabricSignalPathTest, ThePeerThatSeesASignalSeesAllEarlierData) {
  // Copies, not a structured binding: clang 15 (hipcc) refuses lambdas that capture one.
  const std::string provider = std::get<0>(GetParam());
  const std::string signals = std::get<1>(GetParam());
  if (provider == "shm" && signals == "atomic") {
    GTEST_SKIP() << "shm (libfabric 1.17) miscounts streams of fi_atomic FI_SUM (docs/libfabric.md)";
  }
  ChannelPair pairs;
  constexpr uint64_t kData = (4 << 20) + 4096;
  const uint64_t sizes[] = {1, 8, 4097, 65539, 1 << 20, (4 << 20) + 17};
  constexpr int kRounds = 90;
  constexpr uint64_t kBig = (uint64_t{1} << 20) + 1;  // more than the 16 bits a CQ data signal carries
  auto results = test::runRanks(
      2,
      [&](int rank, int) {
        auto ch = pairs.take(rank);
        Pair p(*ch, provider, kHeader + kData, kData, signals);
        uint8_t* in = p.inbox.get();
        uint8_t* out = p.outbox.get();
        uint64_t sum = 0;
        for (int round = 0; round < kRounds; ++round) {
          const uint64_t size = sizes[round % 6];
          const uint64_t value = round % 3 == 2 ? kBig : 1;
          sum += value;
          if (rank == 0) {
            for (uint64_t j = 0; j < size; ++j) out[j] = pattern(round, size, j);
            if (round % 5 == 3 && size > 1) {  // two writes: the signal rides on the second (or follows it)
              p.conn.write(p.remote, kHeader, p.outReg, 0, size / 2);
              p.conn.write(p.remote, kHeader + size / 2, p.outReg, size / 2, size - size / 2);
            } else {
              p.conn.write(p.remote, kHeader, p.outReg, 0, size);
            }
            // Sometimes past the window in which a write waits for its signal: then they go as two messages.
            if (round % 5 == 4) std::this_thread::sleep_for(200us);
            p.conn.atomicAdd(p.remote, 0, value);  // no flush: the signal alone must order the data
            waitCounter(in + 8, round + 1, 10s, "the reader's check");
            p.conn.flush(5s);  // before the source is rewritten
          } else {
            waitCounter(in, sum, 10s, "signal of a round");
            uint64_t wrong = 0;
            for (uint64_t j = 0; j < size; ++j) wrong += in[kHeader + j] != pattern(round, size, j);
            ASSERT_EQ(wrong, 0u) << "round " << round << ", " << size << " bytes, signal value " << value;
            ASSERT_EQ(loadAcquire(in), sum) << "round " << round;
            p.conn.atomicAdd(p.remote, 8, 1);
          }
        }
        p.conn.flush(5s);
        ch->sendValue(1);
        EXPECT_EQ(ch->recvValue(), 1u);
      },
      60s);
  WEFT_EXPECT_RANKS_OK(results);
}

// Signals into several registrations and words (the CQ data names registration and word), from both sides at once,
// with values around the 16-bit limit: every word ends at its exact sum, its neighbours untouched.
TEST_P(LibfabricSignalPathTest, SignalsReachTheRightRegistrationAndWordWithExactSums) {
  // Copies, not a structured binding: clang 15 (hipcc) refuses lambdas that capture one.
  const std::string provider = std::get<0>(GetParam());
  const std::string signals = std::get<1>(GetParam());
  if (provider == "shm" && signals == "atomic") {
    GTEST_SKIP() << "shm (libfabric 1.17) miscounts streams of fi_atomic FI_SUM (docs/libfabric.md)";
  }
  ChannelPair pairs;
  constexpr int kRegions = 3, kAdds = 2000;
  const uint64_t values[] = {1, 65535, 65536, 7};  // 65536 no longer fits: fi_atomic
  auto results = test::runRanks(
      2,
      [&](int rank, int) {
        auto ch = pairs.take(rank);
        auto plugin = loadFabric(provider, signals);
        std::vector<std::shared_ptr<uint8_t>> buffers;
        std::vector<TransportMemory> regs;
        for (int r = 0; r < kRegions; ++r) {
          buffers.push_back(hostBuffer(4096));
          regs.push_back(plugin->registerMemory(buffers.back().get(), 4096, MemoryKind::kHost));
        }
        auto ep = plugin->createEndpoint(0);
        ch->send(ep.blob());
        for (auto& r : regs) ch->send(r.blob());
        auto conn = ep.connect(ch->recv(), 3s);
        std::vector<TransportRemoteMemory> remotes;
        for (int r = 0; r < kRegions; ++r) remotes.push_back(plugin->importMemory(ch->recv(), 3s));
        ch->send(std::vector<uint8_t>{1});  // both connected (as Communicator::connect confirms) before any add
        (void)ch->recv();
        for (int i = 0; i < kAdds; ++i) {
          const int r = i % kRegions;
          conn.atomicAdd(remotes[r], 8 * (1 + 2 * r), values[i % 4]);  // words 1, 3, 5 of regions 0, 1, 2
        }
        conn.flush(10s);
        for (int r = 0; r < kRegions; ++r) {
          uint64_t expected = 0;
          for (int i = r; i < kAdds; i += kRegions) expected += values[i % 4];
          const uint8_t* base = buffers[r].get();
          waitCounter(base + 8 * (1 + 2 * r), expected, 10s, "a registration's word");
        }
        ch->sendValue(1);
        EXPECT_EQ(ch->recvValue(), 1u);
        std::this_thread::sleep_for(20ms);  // anything extra would have landed by now
        for (int r = 0; r < kRegions; ++r) {
          uint64_t expected = 0;
          for (int i = r; i < kAdds; i += kRegions) expected += values[i % 4];
          const uint8_t* base = buffers[r].get();
          for (int w = 0; w < 8; ++w) {
            EXPECT_EQ(loadAcquire(base + 8 * w), w == 1 + 2 * r ? expected : 0) << "region " << r << " word " << w;
          }
        }
      },
      30s);
  WEFT_EXPECT_RANKS_OK(results);
}

INSTANTIATE_TEST_SUITE_P(Paths, LibfabricSignalPathTest,
                         ::testing::Combine(::testing::Values("tcp", "shm"),
                                            ::testing::Values("auto", "data_after_completion", "atomic")),
                         [](const auto& info) { return std::get<0>(info.param) + "_" + std::get<1>(info.param); });

TEST(LibfabricTransportOptionsTest, UnknownProviderAndOptionAreClearErrors) {
  std::string msg = errorOf(ErrorCode::kPluginError, [&] { loadFabric("nosuchprov"); });
  EXPECT_NE(msg.find("'nosuchprov'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("fi_getinfo offers"), std::string::npos) << msg;
  EXPECT_NE(msg.find("tcp"), std::string::npos) << msg;
  msg = errorOf(ErrorCode::kPluginError, [&] { loadTransportPlugin("libfabric", {}, {{"rails", "2"}}); });
  EXPECT_NE(msg.find("unknown option 'rails'"), std::string::npos) << msg;
  msg = errorOf(ErrorCode::kPluginError, [&] {
    loadTransportPlugin("libfabric", {}, {{"provider", "tcp"}, {"progress_thread", "maybe"}});
  });
  EXPECT_NE(msg.find("progress_thread"), std::string::npos) << msg;
  msg = errorOf(ErrorCode::kPluginError, [&] {
    loadTransportPlugin("libfabric", {}, {{"provider", "tcp"}, {"signals", "telepathy"}});
  });
  EXPECT_NE(msg.find("signals='telepathy'"), std::string::npos) << msg;
}

// The domain option is a choice, not a hint: fi_getinfo returns every interface of tcp for domain "lo", and the
// plugin once took the best of them (another interface) instead.
TEST(LibfabricTransportOptionsTest, TheDomainAskedForIsTheOneUsed) {
  std::string why;
  if (!providerPresent("tcp", &why)) GTEST_SKIP() << why;
  auto plugin = loadTransportPlugin("libfabric", {}, {{"provider", "tcp"}, {"domain", "lo"}});
  ASSERT_EQ(plugin->devices().size(), 1u);
  EXPECT_EQ(plugin->devices()[0].name, "lo");
  std::string msg = errorOf(ErrorCode::kPluginError, [&] {
    loadTransportPlugin("libfabric", {}, {{"provider", "tcp"}, {"domain", "nosuchif0"}});
  });
  EXPECT_NE(msg.find("domain 'nosuchif0'"), std::string::npos) << msg;
}

// Without a progress thread the callers drive progress; over tcp both sides keep calling flush until done.
TEST(LibfabricTransportOptionsTest, CallerDrivenProgressStillDeliversOverTcp) {
  std::string why;
  if (!providerPresent("tcp", &why)) GTEST_SKIP() << why;
  ChannelPair pairs;
  auto results = test::runRanks(
      2,
      [&](int rank, int) {
        auto ch = pairs.take(rank);
        auto plugin = loadTransportPlugin("libfabric", {}, {{"provider", "tcp"}, {"progress_thread", "false"}});
        constexpr uint64_t kBytes = 1 << 20;
        auto in = hostBuffer(kHeader + kBytes), out = hostBuffer(kBytes);
        auto inReg = plugin->registerMemory(in.get(), kHeader + kBytes, MemoryKind::kHost);
        auto outReg = plugin->registerMemory(out.get(), kBytes, MemoryKind::kHost);
        auto ep = plugin->createEndpoint(0);
        ch->send(ep.blob());
        ch->send(inReg.blob());
        auto conn = ep.connect(ch->recv(), 3s);
        auto remote = plugin->importMemory(ch->recv(), 3s);
        ch->send(std::vector<uint8_t>{1});  // both connected (as Communicator::connect confirms) before any write
        (void)ch->recv();
        for (uint64_t j = 0; j < kBytes; ++j) out.get()[j] = pattern(rank, kBytes, j);
        conn.write(remote, kHeader, outReg, 0, kBytes);
        conn.atomicAdd(remote, 0, 1);
        // Both ranks flush repeatedly (that is where progress happens) until their own inbox is signalled. A short
        // flush may time out while the megabyte is still on its way (ASan on a loaded machine): that only means again.
        auto progressFor = [&](std::chrono::milliseconds ms) {
          try {
            conn.flush(ms);
          } catch (const Error& e) {
            if (e.code() != ErrorCode::kTimeout) throw;
          }
        };
        auto deadline = Clock::now() + 10s;
        while (loadAcquire(in.get()) < 1 && Clock::now() < deadline) progressFor(10ms);
        ASSERT_EQ(loadAcquire(in.get()), 1u);
        uint64_t wrong = 0;
        for (uint64_t j = 0; j < kBytes; ++j) wrong += in.get()[kHeader + j] != pattern(1 - rank, kBytes, j);
        EXPECT_EQ(wrong, 0u);
        conn.flush(5s);
        // Keep progressing for the peer until it is done too.
        ch->sendValue(1);
        deadline = Clock::now() + 10s;
        std::vector<uint8_t> got;
        while (Clock::now() < deadline) {
          progressFor(10ms);
          try {
            got = ch->recv(10ms);
            break;
          } catch (const Error&) {
          }
        }
        EXPECT_EQ(got.size(), sizeof(uint64_t));
      },
      30s);
  WEFT_EXPECT_RANKS_OK(results);
}

/// The counts the plugin logs at teardown (debug level): completions its progress thread read, and those its callers'
/// progress calls read. {-1, -1} when the line is missing.
std::pair<long, long> completionsReadByThreadAndCallers(const std::string& output) {
  std::smatch m;
  static const std::regex line(
      "progress thread [0-9]+ rounds handling ([0-9]+) completions.*callers [0-9]+ progress "
      "calls handling ([0-9]+)");
  if (!std::regex_search(output, m, line)) return {-1, -1};
  return {std::stol(m[1].str()), std::stol(m[2].str())};
}

// Where cores are to spare, the progress thread stays out of the provider while a caller drives progress: on 16
// cores the two read the CQ side by side and took each other's completions, which made a put+signal ping-pong over
// tcp 2.1-2.3x the raw loop instead of 1.2-1.3x. Below 8 usable CPUs the thread keeps reading (it helps there).
TEST(LibfabricTransportOptionsTest, TheProgressThreadLeavesTheCqToACallerThatDrivesProgress) {
  std::string why;
  if (!providerPresent("tcp", &why)) GTEST_SKIP() << why;
  if (transport_support::usableCpus() < 8) {  // the plugin's kSpareCpusFrom
    GTEST_SKIP() << "the progress thread rests beside callers only from 8 usable CPUs; this process has "
                 << transport_support::usableCpus();
  }
  constexpr uint64_t kRounds = 2000;
  ChannelPair pairs;
  auto results = test::runRanks(
      2,
      [&](int rank, int) {
        setenv("WEFT_LOG_LEVEL", "debug", 1);  // the counts are logged at teardown
        reloadLogSettings();
        auto ch = pairs.take(rank);
        Pair p(*ch, "tcp", kHeader + 64, 64);
        const auto deadline = Clock::now() + 20s;
        auto awaitRound = [&](uint64_t round) {  // the caller drives progress, as Host2HostSemaphore::wait does
          while (loadAcquire(p.inbox.get()) < round) {
            p.plugin->progress();
            if (Clock::now() > deadline) FAIL() << "round " << round << " never arrived";
          }
        };
        for (uint64_t round = 1; round <= kRounds; ++round) {
          if (rank == 1) awaitRound(round);
          p.conn.write(p.remote, kHeader, p.outReg, 0, 8);
          p.conn.atomicAdd(p.remote, 0, 1);
          if (rank == 0) awaitRound(round);
        }
        p.conn.flush(5s);
        ch->sendValue(1);  // both flushed before either closes
        (void)ch->recv();
      },
      60s);
  WEFT_EXPECT_RANKS_OK(results);
  for (int rank = 0; rank < 2; ++rank) {
    const auto [byThread, byCallers] = completionsReadByThreadAndCallers(results[rank].output);
    ASSERT_GE(byThread, 0) << "rank " << rank << " logged no counts:\n" << results[rank].output;
    EXPECT_GE(byCallers, static_cast<long>(kRounds)) << "rank " << rank;
    // A few completions come while no caller drives (connect, the final flush); the ping-pong's are the callers'.
    EXPECT_LT(byThread * 20, byCallers) << "rank " << rank << ": the progress thread read " << byThread
                                        << " completions beside a caller that read " << byCallers;
  }
}

// ---- through the object model: Communicator + ProxyService + PortChannel over libfabric ----

class LibfabricPortChannelTest : public LibfabricTransportTest {};

Config fabricConfig(const std::string& provider, const std::string& progressThread = "true") {
  Config c = Config::defaults();
  c.transports[PeerClass::kSameProcess] = {"libfabric"};
  c.transports[PeerClass::kSameHost] = {"libfabric"};
  c.transportOptions["libfabric"]["provider"] = provider;
  c.transportOptions["libfabric"]["progress_thread"] = progressThread;
  c.bootstrapTimeout = std::chrono::milliseconds(5000);
  return c;
}

// Both ranks put to each other through PortChannels (host-side handles): large puts with signals, with and without
// flush, then many small put+signal+flush rounds; every byte checked.
void portChannelRounds(const std::string& provider, const std::string& progressThread) {
  UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
  constexpr uint64_t kBytes = 1 << 20;
  auto results = test::runRanks(2, [&](int rank, int) {
    Communicator comm(std::make_shared<TcpBootstrap>(rank, 2, id, std::chrono::milliseconds(10000)),
                      fabricConfig(provider, progressThread));
    const int peer = 1 - rank;
    ASSERT_EQ(comm.transportFor(peer), "libfabric");
    ProxyServiceOptions o;
    o.side = HandleSide::kHost;
    o.threads = 1;
    o.budgetNs = 5000ull * 1000 * 1000;
    o.fifoSize = 64;
    ProxyService proxy(comm, o);
    auto srcStorage = allocSharedHostMemory(kBytes), dstStorage = allocSharedHostMemory(kBytes);
    auto* src = static_cast<uint8_t*>(srcStorage.get());
    auto* dst = static_cast<uint8_t*>(dstStorage.get());
    RegisteredMemory srcMem = comm.registerMemory(src, kBytes, MemoryKind::kHost);
    RegisteredMemory dstMem = comm.registerMemory(dst, kBytes, MemoryKind::kHost);
    comm.sendMemory(dstMem, peer, 1);
    MemoryId remoteDst = proxy.addMemory(comm.recvMemory(peer, 1));
    MemoryId localSrc = proxy.addMemory(srcMem);
    proxy.addMemory(dstMem);
    std::shared_ptr<Connection> connection = comm.connect(peer, 10);
    EXPECT_FALSE(connection->mapsPeerMemory());
#if WEFT_BUILD_GPU_NONE
    EXPECT_FALSE(connection->writesGpuMemory());  // a build without a GPU runtime neither stages nor registers it
#endif
    SemaphoreId sem = proxy.buildSemaphore(connection, 20);
    PortChannel channel = proxy.portChannel(sem, remoteDst, localSrc);
    proxy.start();
    const PortChannelDeviceHandle ch = channel.deviceHandle();
    for (uint64_t i = 0; i < kBytes; ++i) src[i] = pattern(rank, kBytes, i);
    for (int round = 0; round < 4; ++round) {
      const uint64_t off = round * (kBytes / 4);
      if (round % 2 == 0) {
        ch.putWithSignal(off, kBytes / 4);
      } else {
        ch.put(off, off, kBytes / 4);
        ch.signal();
        ch.flush();
      }
      ch.wait();
      uint64_t wrong = 0;
      for (uint64_t i = off; i < off + kBytes / 4; ++i) wrong += dst[i] != pattern(1 - rank, kBytes, i);
      EXPECT_EQ(wrong, 0u) << "round " << round;
    }
    // Many small put+signal+flush rounds reusing the source at once.
    for (int r = 0; r < 50; ++r) {
      std::memset(src, r + rank, 512);
      ch.putWithSignalAndFlush(0, 0, 512);
      ch.wait();
      EXPECT_EQ(dst[0], static_cast<uint8_t>(r + peer));
      EXPECT_EQ(dst[511], static_cast<uint8_t>(r + peer));
      comm.bootstrap().barrier();  // the peer has checked before the next round overwrites
    }
    EXPECT_FALSE(ch.poll());
    proxy.checkError();
    comm.bootstrap().barrier();
  });
  WEFT_EXPECT_RANKS_OK(results);
}

TEST_P(LibfabricPortChannelTest, PutSignalFlushWaitDeliverVerifiedData) { portChannelRounds(GetParam(), "true"); }

// Without the plugin's progress thread nothing reads a waiting rank's completion queue except its proxy thread,
// which drives the transport's progress while idle (ABI 1.1 progress entry): the peer's signals still arrive.
TEST_P(LibfabricPortChannelTest, ProxyThreadDrivesProgressWithoutTheProgressThread) {
  portChannelRounds(GetParam(), "false");
}

INSTANTIATE_TEST_SUITE_P(Providers, LibfabricPortChannelTest, ::testing::Values("tcp", "shm"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace weft
