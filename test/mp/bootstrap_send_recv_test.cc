// Tagged send/recv under contention: every pair of ranks, several tags, several threads per rank at once; messages
// of one (peer, tag) arrive in order and a tag nobody reads never blocks another.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <weft/bootstrap.hpp>
#include <weft/error.hpp>

#include "multi_process.hpp"

namespace weft {
namespace {

using std::chrono::milliseconds;

TEST(BootstrapSendRecvTest, AllPairsManyTagsManyThreadsInOrder) {
  constexpr int kRanks = 4;
  constexpr int kTags = 3;
  constexpr int kMessages = 40;
  UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
  auto results = test::runRanks(
      kRanks,
      [&](int rank, int size) {
        TcpBootstrap boot(rank, size, id, milliseconds(10000));
        std::atomic<int> errors{0};
        std::vector<std::thread> threads;
        // One sender and one receiver thread per (peer, tag): (size-1) * kTags * 2 threads per rank.
        for (int peer = 0; peer < size; ++peer) {
          if (peer == rank) continue;
          for (int tag = 0; tag < kTags; ++tag) {
            threads.emplace_back([&, peer, tag] {
              try {
                for (int m = 0; m < kMessages; ++m) {
                  // Sizes vary so that frames of different lengths interleave on one connection.
                  std::vector<uint8_t> msg(8 + (m * 97 + tag * 1000) % 5000);
                  for (size_t b = 0; b < msg.size(); ++b)
                    msg[b] = static_cast<uint8_t>(rank + peer * 3 + tag * 5 + m + b);
                  boot.sendBytes(msg, peer, tag);
                }
              } catch (const std::exception& e) {
                std::fprintf(stderr, "send to %d tag %d: %s\n", peer, tag, e.what());
                ++errors;
              }
            });
            threads.emplace_back([&, peer, tag] {
              try {
                for (int m = 0; m < kMessages; ++m) {
                  auto msg = boot.recvBytes(peer, tag);
                  size_t expect = 8 + (m * 97 + tag * 1000) % 5000;
                  if (msg.size() != expect) throw std::runtime_error("message " + std::to_string(m) + " out of order");
                  for (size_t b = 0; b < msg.size(); ++b) {
                    if (msg[b] != static_cast<uint8_t>(peer + rank * 3 + tag * 5 + m + b)) {
                      throw std::runtime_error("message " + std::to_string(m) + " corrupt or out of order");
                    }
                  }
                }
              } catch (const std::exception& e) {
                std::fprintf(stderr, "recv from %d tag %d: %s\n", peer, tag, e.what());
                ++errors;
              }
            });
          }
        }
        for (auto& t : threads) t.join();
        EXPECT_EQ(errors.load(), 0);
        boot.barrier();
      },
      std::chrono::seconds(40));
  WEFT_EXPECT_RANKS_OK(results);
}

TEST(BootstrapSendRecvTest, UnreadTagDoesNotBlockAnotherAndSizesAreChecked) {
  UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
  auto results = test::runRanks(2, [&](int rank, int size) {
    TcpBootstrap boot(rank, size, id, milliseconds(3000));
    if (rank == 0) {
      std::vector<uint8_t> big(2 << 20, 1);  // nobody reads tag 1 until the end
      boot.send(big.data(), big.size(), 1, 1);
      int v = 42;
      boot.send(&v, sizeof(v), 1, 2);
      boot.send(&v, sizeof(v), 1, 3);
      boot.barrier();
    } else {
      int v = 0;
      boot.recv(&v, sizeof(v), 0, 2);
      EXPECT_EQ(v, 42);
      int64_t wrong = 0;
      try {
        boot.recv(&wrong, sizeof(wrong), 0, 3);
        ADD_FAILURE() << "a 4-byte message was received into 8 bytes";
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
      }
      std::vector<uint8_t> big(2 << 20, 0);
      boot.recv(big.data(), big.size(), 0, 1);
      EXPECT_EQ(big.front(), 1);
      EXPECT_EQ(big.back(), 1);
      boot.barrier();
    }
  });
  WEFT_EXPECT_RANKS_OK(results);
}

// hasMessage answers at once whether recv would: false before the peer sent (and for another tag), true once the
// message is in, false again after recv took it; a message to itself counts too.
TEST(BootstrapSendRecvTest, HasMessageTellsWithoutWaiting) {
  UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
  auto results = test::runRanks(2, [&](int rank, int size) {
    TcpBootstrap boot(rank, size, id, milliseconds(5000));
    const int peer = 1 - rank;
    if (rank == 0) {
      boot.barrier();  // rank 1 looked before anything was sent
      int v = 7;
      boot.send(&v, sizeof(v), peer, 11);
      boot.barrier();
    } else {
      const auto start = std::chrono::steady_clock::now();
      EXPECT_FALSE(boot.hasMessage(peer, 11));
      EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(100)) << "hasMessage waited";
      boot.barrier();
      const auto deadline = std::chrono::steady_clock::now() + milliseconds(5000);
      while (!boot.hasMessage(peer, 11) && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(milliseconds(1));
      }
      EXPECT_TRUE(boot.hasMessage(peer, 11));
      EXPECT_FALSE(boot.hasMessage(peer, 12));
      int v = 0;
      boot.recv(&v, sizeof(v), peer, 11);
      EXPECT_EQ(v, 7);
      EXPECT_FALSE(boot.hasMessage(peer, 11));
      boot.barrier();
    }
    int self = rank;
    boot.send(&self, sizeof(self), rank, 13);
    EXPECT_TRUE(boot.hasMessage(rank, 13));
    boot.recv(&self, sizeof(self), rank, 13);
    EXPECT_THROW(boot.hasMessage(size, 13), Error);
  });
  WEFT_EXPECT_RANKS_OK(results);
}

}  // namespace
}  // namespace weft
