// Runs a test body in several real processes (ranks) forked from the test, with a deadline.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

namespace weft::test {

/// How one forked rank ended.
struct RankResult {
  int rank = -1;
  int exitCode = -1;  ///< exit status when it exited, -1 otherwise
  int signal = 0;     ///< the signal that ended it, 0 when it exited
  bool timedOut = false;
  std::string output;  ///< what it wrote to stdout and stderr
  bool ok() const { return exitCode == 0 && signal == 0 && !timedOut; }
};

/// Forks `size` processes; process i runs body(i, size) and exits 0 when the body returns without a
/// GoogleTest failure or exception, 1 otherwise (the exception's text goes to its output). Ranks still
/// running at the deadline first write every thread's stack to their output (SIGUSR2; the list of threads with
/// their names and kernel wait channels follows it), then are killed with SIGKILL and marked timedOut. Each rank's
/// output is echoed with a "[rank i]" prefix once it has ended.
std::vector<RankResult> runRanks(int size, const std::function<void(int rank, int size)>& body,
                                 std::chrono::milliseconds deadline = std::chrono::seconds(60));

/// Describes every rank that did not end well, for an assertion message ("" when all are ok).
std::string describeFailures(const std::vector<RankResult>& results);

/// Whether a GPU device node exists (/dev/nvidiactl or /dev/kfd), found without initializing any GPU runtime:
/// a test that forks GPU ranks must not touch CUDA/HIP in the parent, since a runtime does not survive fork().
/// Always false in WEFT_GPU=none builds.
bool gpuPresentWithoutInit();

/// A free TCP port on 127.0.0.1 at the time of the call.
int freeLoopbackPort();

}  // namespace weft::test

/// Asserts that every rank of a runRanks() result ended well.
#define WEFT_EXPECT_RANKS_OK(results) EXPECT_EQ(::weft::test::describeFailures(results), "")
