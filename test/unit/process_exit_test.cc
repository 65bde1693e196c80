// transports/common/process_exit.hpp on real child processes: running, zombie, reaped, and one that dies while
// the caller waits (the case a transport meets when a dying owner's socket resets a request).
#include "../../transports/common/process_exit.hpp"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

namespace weft::transport_support {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// A child that lives for `life`, then exits; the caller reaps it.
pid_t childLivingFor(std::chrono::milliseconds life) {
  const pid_t pid = fork();
  if (pid == 0) {
    std::this_thread::sleep_for(life);
    _exit(0);
  }
  return pid;
}

void reap(pid_t pid) {
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
}

TEST(ProcessExit, ARunningProcessHasNotExited) {
  const pid_t child = childLivingFor(10s);
  ASSERT_GT(child, 0);
  EXPECT_FALSE(processHasExited(child));
  const auto start = Clock::now();
  EXPECT_FALSE(processExitsWithin(child, 50ms));
  EXPECT_GE(Clock::now() - start, 50ms);
  EXPECT_FALSE(processHasExited(getpid()));
  kill(child, SIGKILL);
  reap(child);
}

TEST(ProcessExit, AZombieHasExited) {
  const pid_t child = childLivingFor(0ms);
  ASSERT_GT(child, 0);
  // Not reaped: it stays a zombie ('Z'), its pid still taken.
  const auto until = Clock::now() + 5s;
  while (processStateLetter(child) != 'Z' && Clock::now() < until) std::this_thread::sleep_for(1ms);
  ASSERT_EQ(processStateLetter(child), 'Z');
  EXPECT_EQ(kill(child, 0), 0);
  EXPECT_TRUE(processHasExited(child));
  reap(child);
}

TEST(ProcessExit, AReapedProcessHasExited) {
  const pid_t child = childLivingFor(0ms);
  ASSERT_GT(child, 0);
  reap(child);
  EXPECT_EQ(processStateLetter(child), '\0');
  EXPECT_TRUE(processHasExited(child));
  EXPECT_TRUE(processExitsWithin(child, 0ms));
}

TEST(ProcessExit, AProcessThatDiesDuringTheGraceCountsAsExited) {
  const pid_t child = childLivingFor(100ms);
  ASSERT_GT(child, 0);
  // Reaped the moment it exits, as a launcher does: the pid goes from running to gone with no zombie to see.
  std::thread reaper([child] { reap(child); });
  EXPECT_FALSE(processHasExited(child));
  const auto start = Clock::now();
  EXPECT_TRUE(processExitsWithin(child, 5s));
  EXPECT_LT(Clock::now() - start, 4s);
  reaper.join();
}

TEST(ProcessExit, StateLetterOfThisProcessIsRunningOrSleeping) {
  const char state = processStateLetter(getpid());
  EXPECT_TRUE(state == 'R' || state == 'S') << state;
  EXPECT_EQ(processStateLetter(0x7ffffff0), '\0');
}

}  // namespace
}  // namespace weft::transport_support
