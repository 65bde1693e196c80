// TcpBootstrap collectives across real processes: allGather, barrier and broadcast from every root with 2, 4 and 8
// ranks, data checked byte for byte; the "host:port" and environment ways to start.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <weft/bootstrap.hpp>
#include <weft/error.hpp>

#include "multi_process.hpp"

namespace weft {
namespace {

using std::chrono::milliseconds;

// A value that differs per rank, round and byte, so a misplaced slice is caught.
uint8_t pattern(int rank, int round, size_t byte) {
  return static_cast<uint8_t>(rank * 31 + round * 7 + byte * 13 + 1);
}

void exerciseCollectives(Bootstrap& boot, int rank, int size) {
  ASSERT_EQ(boot.rank(), rank);
  ASSERT_EQ(boot.size(), size);
  for (size_t bytes : {size_t{1}, size_t{12}, size_t{4096}, size_t{300000}}) {
    std::vector<uint8_t> all(bytes * size, 0);
    for (size_t b = 0; b < bytes; ++b) all[rank * bytes + b] = pattern(rank, 0, b);
    boot.allGather(all.data(), bytes);
    for (int r = 0; r < size; ++r) {
      for (size_t b = 0; b < bytes; ++b) {
        ASSERT_EQ(all[r * bytes + b], pattern(r, 0, b)) << "allGather of " << bytes << " bytes, slice of rank " << r;
      }
    }
  }
  for (int round = 0; round < 3; ++round) boot.barrier();
  for (int root = 0; root < size; ++root) {
    std::vector<uint8_t> data(1000, 0);
    if (rank == root) {
      for (size_t b = 0; b < data.size(); ++b) data[b] = pattern(root, 1, b);
    }
    boot.broadcast(data.data(), data.size(), root);
    for (size_t b = 0; b < data.size(); ++b) ASSERT_EQ(data[b], pattern(root, 1, b)) << "broadcast from " << root;
  }
  // Repeated small allGathers, as the Communicator does at setup.
  for (int round = 0; round < 20; ++round) {
    std::vector<int> ranks(size, -1);
    ranks[rank] = rank * 1000 + round;
    boot.allGather(ranks.data(), sizeof(int));
    for (int r = 0; r < size; ++r) ASSERT_EQ(ranks[r], r * 1000 + round);
  }
  boot.barrier();
}

class BootstrapCollectivesTest : public ::testing::TestWithParam<int> {};

TEST_P(BootstrapCollectivesTest, AllGatherBarrierBroadcastFromEveryRoot) {
  int size = GetParam();
  UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
  auto results = test::runRanks(
      size,
      [&](int rank, int n) {
        TcpBootstrap boot(rank, n, id, milliseconds(10000));
        exerciseCollectives(boot, rank, n);
      },
      std::chrono::seconds(40));
  WEFT_EXPECT_RANKS_OK(results);
}

INSTANTIATE_TEST_SUITE_P(Sizes, BootstrapCollectivesTest, ::testing::Values(2, 4, 8));

TEST(BootstrapInitTest, Ipv6Loopback) {
  UniqueId id;
  try {
    id = TcpBootstrap::createUniqueId("[::1]");
  } catch (const Error& e) {
    GTEST_SKIP() << "no IPv6 loopback here: " << e.what();
  }
  auto results = test::runRanks(3, [&](int rank, int size) {
    TcpBootstrap boot(rank, size, id, milliseconds(5000));
    EXPECT_EQ(boot.listenAddress().rfind("[::1]:", 0), 0u) << boot.listenAddress();
    exerciseCollectives(boot, rank, size);
  });
  WEFT_EXPECT_RANKS_OK(results);
}

// Small collectives must cost well under a millisecond: a lost TCP_NODELAY (40 ms per message) or a needless
// extra round trip shows up here.
TEST(BootstrapInitTest, SmallCollectivesAreCheap) {
  constexpr int kRounds = 300;
  UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
  auto results = test::runRanks(4, [&](int rank, int size) {
    TcpBootstrap boot(rank, size, id, milliseconds(10000));
    boot.barrier();
    auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < kRounds; ++i) {
      uint64_t v[4] = {};
      v[rank] = static_cast<uint64_t>(i);
      boot.allGather(v, sizeof(uint64_t));
      ASSERT_EQ(v[(rank + 1) % size], static_cast<uint64_t>(i));
    }
    auto us = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - start).count();
    std::printf("allGather of 8 bytes x 4 ranks: %.1f us per call\n", static_cast<double>(us) / kRounds);
    EXPECT_LT(us, 3'000'000) << "300 small allGathers took " << us << " us";
  });
  WEFT_EXPECT_RANKS_OK(results);
}

TEST(BootstrapInitTest, HostPortConstructor) {
  std::string root = "127.0.0.1:" + std::to_string(test::freeLoopbackPort());
  auto results = test::runRanks(3, [&](int rank, int size) {
    TcpBootstrap boot(rank, size, root, milliseconds(5000));
    EXPECT_EQ(boot.timeout(), milliseconds(5000));
    exerciseCollectives(boot, rank, size);
  });
  WEFT_EXPECT_RANKS_OK(results);
}

TEST(BootstrapInitTest, HostPortWithMismatchedSecretIsRefused) {
  // Rank 1 uses another WEFT_BOOTSTRAP_SECRET: the root refuses it, so setup times out naming rank 1.
  std::string root = "127.0.0.1:" + std::to_string(test::freeLoopbackPort());
  auto results = test::runRanks(2, [&](int rank, int size) {
    setenv("WEFT_BOOTSTRAP_SECRET", rank == 0 ? "alpha" : "beta", 1);
    try {
      TcpBootstrap boot(rank, size, root, milliseconds(1000));
      ADD_FAILURE() << "rank " << rank << " joined a job with another secret";
    } catch (const Error& e) {
      if (rank == 0) {
        EXPECT_EQ(e.code(), ErrorCode::kTimeout) << e.what();
        EXPECT_NE(e.message().find("rank 1"), std::string::npos) << e.what();
      }
    }
  });
  WEFT_EXPECT_RANKS_OK(results);
  EXPECT_NE(results[0].output.find("wrong job secret"), std::string::npos) << results[0].output;
}

TEST(BootstrapInitTest, FromEnvironmentWithUniqueId) {
  std::string id = uniqueIdToString(TcpBootstrap::createUniqueId("127.0.0.1"));
  auto results = test::runRanks(4, [&](int rank, int size) {
    setenv("WEFT_RANK", std::to_string(rank).c_str(), 1);
    setenv("WEFT_SIZE", std::to_string(size).c_str(), 1);
    setenv("WEFT_LOCAL_RANK", std::to_string(rank % 2).c_str(), 1);
    setenv("WEFT_UNIQUE_ID", id.c_str(), 1);
    setenv("WEFT_BOOTSTRAP_TIMEOUT_MS", "4000", 1);
    auto boot = TcpBootstrap::fromEnvironment();
    EXPECT_EQ(boot->rank(), rank);
    EXPECT_EQ(boot->size(), size);
    EXPECT_EQ(boot->localRank(), rank % 2);
    EXPECT_EQ(boot->timeout(), milliseconds(4000));
    boot->barrier();
  });
  WEFT_EXPECT_RANKS_OK(results);
}

TEST(BootstrapInitTest, FromEnvironmentTorchrun) {
  int port = test::freeLoopbackPort();
  auto results = test::runRanks(2, [&](int rank, int size) {
    setenv("RANK", std::to_string(rank).c_str(), 1);
    setenv("WORLD_SIZE", std::to_string(size).c_str(), 1);
    setenv("LOCAL_RANK", std::to_string(rank).c_str(), 1);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("MASTER_PORT", std::to_string(port - 1).c_str(), 1);
    auto boot = TcpBootstrap::fromEnvironment();
    EXPECT_EQ(boot->localRank(), rank);
    if (rank == 0) {
      EXPECT_EQ(boot->listenAddress(), "0.0.0.0:" + std::to_string(port));
    }
    boot->barrier();
  });
  WEFT_EXPECT_RANKS_OK(results);
}

}  // namespace
}  // namespace weft
