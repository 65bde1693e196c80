// The fork harness itself: results and deadlines must be reported faithfully, or every mp test lies.
#include <gtest/gtest.h>
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

}  // namespace
}  // namespace weft::test
