// TcpBootstrap when things go wrong: a rank that never arrives, a root that never arrives, a rank killed mid-job,
// and stray connections without the job's secret. Every failure must come within the timeout and name the rank.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>
#include <weft/bootstrap.hpp>
#include <weft/error.hpp>

#include "bootstrap_message.hpp"
#include "multi_process.hpp"

namespace weft {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Runs f, which must throw weft::Error; returns it with how long f took.
std::pair<Error, milliseconds> failureOf(const std::function<void()>& f) {
  auto start = Clock::now();
  try {
    f();
  } catch (const Error& e) {
    std::printf("got the expected error: %s\n", e.what());  // shown in the rank's log, for people reading it
    return {e, std::chrono::duration_cast<milliseconds>(Clock::now() - start)};
  }
  ADD_FAILURE() << "no weft::Error thrown";
  return {Error(ErrorCode::kInternalError, "none"), milliseconds(0)};
}

TEST(BootstrapFailureTest, MissingRankIsNamedByEveryone) {
  UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
  auto results = test::runRanks(
      4,
      [&](int rank, int size) {
        if (rank == 3) return;  // never joins
        auto [e, took] = failureOf([&] { TcpBootstrap boot(rank, size, id, milliseconds(1000)); });
        EXPECT_EQ(e.code(), ErrorCode::kTimeout) << e.what();
        EXPECT_NE(e.message().find("rank 3"), std::string::npos) << e.what();
        EXPECT_NE(e.message().find("1000 ms"), std::string::npos) << e.what();
        EXPECT_GE(took.count(), 900);
        EXPECT_LT(took.count(), 2000) << e.what();
      },
      std::chrono::seconds(20));
  WEFT_EXPECT_RANKS_OK(results);
}

TEST(BootstrapFailureTest, CollectiveTimeoutNamesTheSilentRank) {
  UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
  auto results = test::runRanks(3, [&](int rank, int size) {
    TcpBootstrap boot(rank, size, id, milliseconds(1000));
    if (rank == 2) {
      std::this_thread::sleep_for(milliseconds(1500));  // alive, but never joins the allGather
      return;
    }
    auto [e, took] = failureOf([&] {
      int v[3] = {};
      boot.allGather(v, sizeof(int));
    });
    EXPECT_EQ(e.code(), ErrorCode::kTimeout) << e.what();
    EXPECT_NE(e.message().find("allGather timed out after 1000 ms waiting for rank 2"), std::string::npos) << e.what();
    EXPECT_GE(took.count(), 900);
    EXPECT_LT(took.count(), 1400);
  });
  WEFT_EXPECT_RANKS_OK(results);
}

TEST(BootstrapFailureTest, MissingRootTimesOut) {
  UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
  auto results = test::runRanks(2, [&](int rank, int size) {
    if (rank == 0) return;
    auto [e, took] = failureOf([&] { TcpBootstrap boot(rank, size, id, milliseconds(800)); });
    EXPECT_EQ(e.code(), ErrorCode::kTimeout) << e.what();
    EXPECT_NE(e.message().find("root (rank 0)"), std::string::npos) << e.what();
    EXPECT_LT(took.count(), 1500) << e.what();
  });
  WEFT_EXPECT_RANKS_OK(results);
}

TEST(BootstrapFailureTest, KilledRankIsReportedNotWaitedFor) {
  UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
  auto results = test::runRanks(
      3,
      [&](int rank, int size) {
        TcpBootstrap boot(rank, size, id, milliseconds(5000));
        boot.barrier();
        if (rank == 2) raise(SIGKILL);
        auto [e, took] = failureOf([&] {
          int v[3] = {rank, rank, rank};
          boot.allGather(v, sizeof(int));
        });
        EXPECT_EQ(e.code(), ErrorCode::kRemoteError) << e.what();
        EXPECT_NE(e.message().find("rank 2"), std::string::npos) << e.what();
        EXPECT_LT(took.count(), 3000) << "waited out the timeout instead of noticing the death: " << e.what();
        // Later calls that need the dead rank fail at once; the survivors still talk to each other.
        auto [r, rtook] = failureOf([&] {
          int v = 0;
          boot.recv(&v, sizeof(v), 2, 0);
        });
        EXPECT_EQ(r.code(), ErrorCode::kRemoteError) << r.what();
        EXPECT_LT(rtook.count(), 500);
        int peer = 1 - rank;
        int v = rank + 10;
        boot.send(&v, sizeof(v), peer, 5);
        boot.recv(&v, sizeof(v), peer, 5);
        EXPECT_EQ(v, peer + 10);
      },
      std::chrono::seconds(20));
  EXPECT_TRUE(results[0].ok()) << results[0].output;
  EXPECT_TRUE(results[1].ok()) << results[1].output;
  EXPECT_EQ(results[2].signal, SIGKILL);
}

// Opens a TCP connection to 127.0.0.1:port, retrying while nobody listens yet; -1 on failure.
int connectLoopback(uint16_t port) {
  for (int attempt = 0; attempt < 200; ++attempt) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) return fd;
    close(fd);
    std::this_thread::sleep_for(milliseconds(10));
  }
  return -1;
}

void sendAll(int fd, const std::vector<uint8_t>& bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::send(fd, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
    if (n <= 0) return;  // the bootstrap may close on us: that is the point
    done += static_cast<size_t>(n);
  }
}

TEST(BootstrapFailureTest, StrayConnectionsAreRefusedAndTheJobCompletes) {
  UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
  uint16_t port = detail::decodeUniqueId(id).root.port;
  constexpr int kJob = 3;
  auto results = test::runRanks(
      kJob + 1,
      [&](int rank, int) {
        if (rank == kJob) {
          // The stray: garbage, a hello with a wrong secret, a hello claiming a huge length, and one that stays silent.
          std::vector<int> fds;
          int garbage = connectLoopback(port);
          ASSERT_GE(garbage, 0);
          std::string http = "GET / HTTP/1.1\r\nHost: weft\r\n\r\n";
          sendAll(garbage, std::vector<uint8_t>(http.begin(), http.end()));
          fds.push_back(garbage);
          int wrong = connectLoopback(port);
          detail::Hello hello;
          hello.secret = detail::deriveSecret("not this job");
          hello.rank = 1;
          hello.size = kJob;
          hello.listen.family = 4;
          hello.listen.port = 1;
          hello.listen.ip = {127, 0, 0, 1};
          auto payload = detail::encodeHello(hello);
          sendAll(wrong, detail::encodeFrame(detail::FrameType::kHello, 0, payload.data(), payload.size()));
          fds.push_back(wrong);
          int huge = connectLoopback(port);
          std::vector<uint8_t> header(detail::kFrameHeaderBytes);
          detail::encodeFrameHeader({detail::FrameType::kHello, 0, uint64_t{1} << 29}, header.data());
          sendAll(huge, header);
          fds.push_back(huge);
          fds.push_back(connectLoopback(port));  // silent
          std::this_thread::sleep_for(milliseconds(1500));
          for (int fd : fds) close(fd);
          return;
        }
        // Give the stray a head start so that it hits the root during registration.
        if (rank != 0) std::this_thread::sleep_for(milliseconds(300));
        TcpBootstrap boot(rank, kJob, id, milliseconds(5000));
        std::vector<int> all(kJob, -1);
        all[rank] = rank;
        boot.allGather(all.data(), sizeof(int));
        for (int r = 0; r < kJob; ++r) EXPECT_EQ(all[r], r);
        boot.barrier();
      },
      std::chrono::seconds(20));
  WEFT_EXPECT_RANKS_OK(results);
  const std::string& root = results[0].output;
  EXPECT_NE(root.find("refused a connection"), std::string::npos) << root;
  EXPECT_NE(root.find("bad frame magic"), std::string::npos) << root;
  EXPECT_NE(root.find("wrong job secret"), std::string::npos) << root;
  EXPECT_NE(root.find("exceeds the limit"), std::string::npos) << root;
}

}  // namespace
}  // namespace weft
