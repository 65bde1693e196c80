// The fork harness itself: results and deadlines must be reported faithfully, or every mp test lies.
#include <gtest/gtest.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <thread>

#include "multi_process.hpp"

namespace weft::test {
namespace {

TEST(MultiProcessTest, ReportsExitFailureSignalAndTimeout) {
  auto results = runRanks(
      4,
      [](int rank, int) {
        if (rank == 1) throw std::runtime_error("boom");
        if (rank == 2) raise(SIGKILL);
        if (rank == 3) std::this_thread::sleep_for(std::chrono::seconds(30));
        std::printf("hello from %d\n", rank);
      },
      std::chrono::milliseconds(1500));
  EXPECT_TRUE(results[0].ok());
  EXPECT_NE(results[0].output.find("hello from 0"), std::string::npos);
  EXPECT_EQ(results[1].exitCode, 1);
  EXPECT_NE(results[1].output.find("boom"), std::string::npos);
  EXPECT_EQ(results[2].signal, SIGKILL);
  EXPECT_TRUE(results[3].timedOut);
  EXPECT_NE(describeFailures(results), "");
}

// A hang must say where it hung: every thread of a rank that runs out of time writes its stack before the kill.
[[gnu::noinline]] void parkHereForever() {
  for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
}

TEST(MultiProcessTest, ARankThatRunsOutOfTimeWritesEveryThreadsStack) {
  auto results = runRanks(
      1,
      [](int, int) {
        std::thread helper([] {
          pthread_setname_np(pthread_self(), "weft-parked");
          parkHereForever();
        });
        helper.detach();
        parkHereForever();
      },
      std::chrono::milliseconds(1000));
  ASSERT_TRUE(results[0].timedOut);
  const std::string& out = results[0].output;
  EXPECT_NE(out.find("ran out of time; its threads:"), std::string::npos) << out;
  EXPECT_NE(out.find("(weft-parked) waits in"), std::string::npos) << out;
  size_t stacks = 0;
  for (size_t at = out.find("--- stack of thread"); at != std::string::npos;
       at = out.find("--- stack of thread", at + 1)) {
    ++stacks;
  }
  EXPECT_EQ(stacks, 2u) << out;
  // Each stack is a real unwind: it holds frames of libc's sleep under the handler.
  EXPECT_NE(out.find("libc.so"), std::string::npos) << out;
}

}  // namespace
}  // namespace weft::test
