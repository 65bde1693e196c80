// Tests of the weft-run launcher: the real binary, started on small shell commands (and on this test binary
// as a rank that bootstraps from the environment weft-run gives it).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>
#include <weft/bootstrap.hpp>
#include <weft/unique_id.hpp>

namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

const std::string kWeftRun = std::string(WEFT_BIN_DIR) + "/weft-run";

/// weft-run started with a pipe on each of its stdout and stderr; killed (with SIGKILL) if still running at the end.
class Launch {
 public:
  explicit Launch(const std::vector<std::string>& args, const std::vector<std::string>& extraEnv = {}) {
    int out[2];
    int err[2];
    if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) throw std::runtime_error("pipe2 failed");
    std::vector<std::string> all = {kWeftRun};
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : all) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_ = fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      for (const auto& e : extraEnv) putenv(const_cast<char*>(e.c_str()));
      dup2(out[1], STDOUT_FILENO);
      dup2(err[1], STDERR_FILENO);
      execv(argv[0], argv.data());
      _exit(126);
    }
    close(out[1]);
    close(err[1]);
    outFd_ = out[0];
    errFd_ = err[0];
    start_ = Clock::now();
  }
  ~Launch() {
    if (pid_ > 0 && !exited_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (outFd_ >= 0) close(outFd_);
    if (errFd_ >= 0) close(errFd_);
  }
  Launch(const Launch&) = delete;
  Launch& operator=(const Launch&) = delete;

  /// Reads output until `until()` holds or both streams end or `budget` passes; returns until().
  bool readUntil(const std::function<bool()>& until, std::chrono::milliseconds budget) {
    const auto end = Clock::now() + budget;
    while (!until() && (outFd_ >= 0 || errFd_ >= 0)) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now()).count();
      if (left <= 0) break;
      pollfd fds[2] = {{outFd_, POLLIN, 0}, {errFd_, POLLIN, 0}};
      if (poll(fds, 2, static_cast<int>(left)) <= 0) continue;
      readSome(fds[0], outFd_, out_);
      readSome(fds[1], errFd_, err_);
    }
    return until();
  }

  /// Reads all output and waits for weft-run to exit, at most `budget`; returns its exit code, or -1 when it
  /// is still running (then it is killed) or ended by a signal.
  int finish(std::chrono::milliseconds budget = 20s) {
    readUntil([] { return false; }, budget);
    const auto end = Clock::now() + 2s;
    int status = 0;
    while (true) {
      pid_t r = waitpid(pid_, &status, WNOHANG);
      if (r == pid_) break;
      if (Clock::now() >= end) return -1;
      std::this_thread::sleep_for(10ms);
    }
    exited_ = true;
    elapsed_ = Clock::now() - start_;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

  pid_t pid() const { return pid_; }
  const std::string& out() const { return out_; }
  const std::string& err() const { return err_; }
  /// Seconds from start to exit (valid after finish()).
  double elapsedSeconds() const { return std::chrono::duration<double>(elapsed_).count(); }
  /// stdout and stderr, for failure messages.
  std::string transcript() const { return "--- stdout:\n" + out_ + "--- stderr:\n" + err_; }

 private:
  static void readSome(const pollfd& p, int& fd, std::string& into) {
    if (fd < 0 || p.revents == 0) return;
    char buf[4096];
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n > 0) {
      into.append(buf, static_cast<size_t>(n));
    } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
      close(fd);
      fd = -1;
    }
  }

  pid_t pid_ = -1;
  int outFd_ = -1;
  int errFd_ = -1;
  bool exited_ = false;
  std::string out_;
  std::string err_;
  Clock::time_point start_;
  Clock::duration elapsed_{};
};

std::vector<std::string> linesOf(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(WeftRun, PrefixesEachRanksLinesOnTheStreamTheyWereWrittenTo) {
  Launch run({"-n", "3", "--", "sh", "-c", "echo hello; echo 'on stderr' >&2"});
  ASSERT_EQ(run.finish(), 0) << run.transcript();
  for (int r = 0; r < 3; ++r) {
    const std::string prefix = "[rank " + std::to_string(r) + "] ";
    EXPECT_TRUE(contains(run.out(), prefix + "hello\n")) << run.transcript();
    EXPECT_TRUE(contains(run.err(), prefix + "on stderr\n")) << run.transcript();
    EXPECT_FALSE(contains(run.out(), prefix + "on stderr")) << run.transcript();
  }
  EXPECT_EQ(linesOf(run.out()).size(), 3u) << run.transcript();
}

TEST(WeftRun, LinesWrittenInPiecesAreNotMixedWithOtherRanks) {
  // Each line goes out in three write()s (dash's printf writes at once), from 4 ranks at the same time.
  Launch run({"-n", "4", "--", "sh", "-c",
              "i=0; while [ $i -lt 300 ]; do printf 'r%s-a-' $WEFT_RANK; printf 'b-'; printf 'c%s\\n' $i; "
              "i=$((i+1)); done; printf 'no newline at the end'"});
  ASSERT_EQ(run.finish(), 0) << run.transcript();
  const std::regex line(R"(\[rank ([0-3])\] (r([0-3])-a-b-c([0-9]+)|no newline at the end))");
  std::vector<int> perRank(4, 0);
  std::vector<int> tails(4, 0);
  for (const auto& l : linesOf(run.out())) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(l, m, line)) << "mixed or unprefixed line: '" << l << "'";
    const int rank = std::stoi(m[1]);
    if (m[3].matched) {
      EXPECT_EQ(m[3], m[1]) << "line of one rank under another's prefix: " << l;
      EXPECT_EQ(std::stoi(m[4]), perRank[rank]) << "lines out of order: " << l;
      ++perRank[rank];
    } else {
      ++tails[rank];
    }
  }
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(perRank[r], 300) << "rank " << r;
    EXPECT_EQ(tails[r], 1) << "rank " << r << ": the unterminated last line is passed on once, terminated";
  }
}

TEST(WeftRun, GivesEachRankItsLaunchEnvironment) {
  Launch run({"-n", "3", "--", "sh", "-c",
              "echo \"rank=$WEFT_RANK size=$WEFT_SIZE local=$WEFT_LOCAL_RANK/$WEFT_LOCAL_SIZE id=$WEFT_UNIQUE_ID\""},
             {"WEFT_RANK=77", "WEFT_ROOT_ADDR=10.0.0.1:1"});
  ASSERT_EQ(run.finish(), 0) << run.transcript();
  const std::regex line(R"(\[rank ([0-9])\] rank=([0-9]+) size=3 local=([0-9]+)/3 id=([0-9a-f]+))");
  std::set<std::string> ids;
  std::set<int> ranks;
  for (const auto& l : linesOf(run.out())) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(l, m, line)) << l;
    EXPECT_EQ(m[1], m[2]) << "WEFT_RANK of the caller must be replaced: " << l;
    EXPECT_EQ(m[1], m[3]);
    ranks.insert(std::stoi(m[1]));
    ids.insert(m[4]);
  }
  EXPECT_EQ(ranks, (std::set<int>{0, 1, 2}));
  ASSERT_EQ(ids.size(), 1u) << "every rank must get the same unique id";
  EXPECT_EQ(ids.begin()->size(), 2 * weft::kUniqueIdBytes);
  EXPECT_NO_THROW(weft::uniqueIdFromString(*ids.begin()));
}

// Run as a rank by the next test (never on its own: DISABLED_ keeps ctest and plain runs away from it).
TEST(WeftRunChild, DISABLED_BootstrapsFromTheEnvironment) {
  auto boot = weft::TcpBootstrap::fromEnvironment();
  std::vector<int> all(static_cast<size_t>(boot->size()), -1);
  all[static_cast<size_t>(boot->rank())] = boot->rank() * 10;
  boot->allGather(all.data(), sizeof(int));
  for (int r = 0; r < boot->size(); ++r) ASSERT_EQ(all[static_cast<size_t>(r)], r * 10);
  boot->barrier();
  std::printf("bootstrapped as rank %d of %d\n", boot->rank(), boot->size());
}

TEST(WeftRun, RanksBootstrapFromTheEnvironmentItSets) {
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  ASSERT_GT(n, 0);
  self[n] = '\0';
  Launch run({"-n", "3", "--timeout", "30", "--", self, "--gtest_also_run_disabled_tests",
              "--gtest_filter=WeftRunChild.DISABLED_BootstrapsFromTheEnvironment"});
  ASSERT_EQ(run.finish(40s), 0) << run.transcript();
  for (int r = 0; r < 3; ++r) {
    EXPECT_TRUE(
        contains(run.out(), "[rank " + std::to_string(r) + "] bootstrapped as rank " + std::to_string(r) + " of 3\n"))
        << run.transcript();
  }
}

TEST(WeftRun, FirstFailureSetsTheExitCodeAndStopsTheOthers) {
  // Rank 1 fails at once; the others sit in a shell's child (not exec'd), which must be stopped too.
  Launch run({"-n", "3", "--grace", "5", "--", "sh", "-c", "if [ $WEFT_RANK = 1 ]; then exit 3; fi; sleep 30; exit 0"});
  EXPECT_EQ(run.finish(), 3) << run.transcript();
  EXPECT_LT(run.elapsedSeconds(), 4.0) << "the sleeping ranks were not stopped by SIGTERM";
  EXPECT_TRUE(contains(run.err(), "rank 1 exited with code 3; stopping ranks 0, 2")) << run.transcript();
}

TEST(WeftRun, FailureWhileOthersAreStillStartingIsNotTakenForASignalToUs) {
  // Rank 0 fails before the last ranks have even exec'd: the SIGTERM they get must not come back as ours.
  for (int attempt = 0; attempt < 5; ++attempt) {
    Launch run({"-n", "8", "--grace", "5", "--", "sh", "-c", "if [ $WEFT_RANK = 0 ]; then exit 3; fi; sleep 30"});
    EXPECT_EQ(run.finish(), 3) << run.transcript();
    EXPECT_FALSE(contains(run.err(), "signal")) << run.transcript();
    EXPECT_LT(run.elapsedSeconds(), 4.0);
  }
}

TEST(WeftRun, RankKilledBySignalGives128PlusSignal) {
  Launch run({"-n", "2", "--", "sh", "-c", "if [ $WEFT_RANK = 0 ]; then kill -SEGV $$; fi; sleep 30"});
  EXPECT_EQ(run.finish(), 128 + SIGSEGV) << run.transcript();
  EXPECT_TRUE(contains(run.err(), "rank 0 was killed by signal 11")) << run.transcript();
  EXPECT_LT(run.elapsedSeconds(), 4.0);
}

TEST(WeftRun, TimeoutStopsTheJobAndNamesWhoWasRunning) {
  Launch run({"-n", "3", "--timeout", "1", "--", "sh", "-c", "if [ $WEFT_RANK = 2 ]; then exit 0; fi; sleep 30"});
  EXPECT_EQ(run.finish(), 124) << run.transcript();
  EXPECT_GE(run.elapsedSeconds(), 1.0);
  EXPECT_LT(run.elapsedSeconds(), 4.0);
  EXPECT_TRUE(contains(run.err(), "timeout after 1 s; ranks still running: 0, 1;")) << run.transcript();
}

TEST(WeftRun, RanksThatIgnoreSigtermGetSigkillAfterTheGracePeriod) {
  // Rank 1 fails only once rank 0 has started ignoring SIGTERM (it says so by creating a file).
  char dir[] = "/tmp/weft_run_test_XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string marker = std::string(dir) + "/ignoring";
  Launch run({"-n", "2", "--grace", "1", "--", "sh", "-c",
              "if [ $WEFT_RANK = 1 ]; then i=0; while [ ! -e " + marker +
                  " ] && [ $i -lt 500 ]; do sleep 0.01; i=$((i+1)); done; exit 5; fi; trap '' TERM; touch " + marker +
                  "; sleep 30"});
  EXPECT_EQ(run.finish(), 5) << run.transcript();
  EXPECT_GE(run.elapsedSeconds(), 1.0) << "SIGKILL came before the grace period ended";
  EXPECT_LT(run.elapsedSeconds(), 4.0);
  EXPECT_TRUE(contains(run.err(), "ranks 0 outlived the 1 s grace period; sending SIGKILL")) << run.transcript();
  std::remove(marker.c_str());
  rmdir(dir);
}

TEST(WeftRun, ForwardsSigintToTheRanks) {
  Launch run({"-n", "2", "--", "sh", "-c", "echo ready; exec sleep 30"});
  ASSERT_TRUE(run.readUntil(
      [&] { return contains(run.out(), "[rank 0] ready") && contains(run.out(), "[rank 1] ready"); }, 10s))
      << run.transcript();
  kill(run.pid(), SIGINT);
  EXPECT_EQ(run.finish(), 128 + SIGINT) << run.transcript();
  EXPECT_LT(run.elapsedSeconds(), 5.0);
  EXPECT_TRUE(contains(run.err(), "passing it on to ranks 0, 1")) << run.transcript();
}

TEST(WeftRun, AllRanksSucceedingGivesZero) {
  Launch run({"-n", "4", "--", "true"});
  EXPECT_EQ(run.finish(), 0) << run.transcript();
  EXPECT_EQ(run.err(), "");
}

TEST(WeftRun, UnrunnableCommandFailsWith127) {
  Launch run({"-n", "2", "--", "/nonexistent/weft-run-test-program"});
  EXPECT_EQ(run.finish(), 127) << run.transcript();
  EXPECT_TRUE(contains(run.err(), "cannot run /nonexistent/weft-run-test-program")) << run.transcript();
}

TEST(WeftRun, BadUsageIsRefused) {
  {
    Launch run({"-n", "2"});
    EXPECT_EQ(run.finish(), 2) << run.transcript();
    EXPECT_TRUE(contains(run.err(), "no command")) << run.transcript();
  }
  {
    Launch run({"-n", "0", "--", "true"});
    EXPECT_NE(run.finish(), 0) << run.transcript();
  }
  {
    Launch run({"--", "true"});
    EXPECT_NE(run.finish(), 0) << run.transcript();
    EXPECT_TRUE(contains(run.err(), "-n")) << run.transcript();
  }
}

}  // namespace
