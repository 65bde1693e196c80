#include "multi_process.hpp"

#include <weft/build_config.hpp>

#include <execinfo.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

namespace weft::test {
namespace {

/// SIGUSR2 handler of a rank: writes the calling thread's stack to the rank's output. The parent sends it to every
/// thread of a rank that ran out of time, so a hang says where each thread waited (symbols: exported names; the
/// offsets of the rest resolve with addr2line against the same build).
void writeThreadStack(int) {
  void* frames[48];
  const int n = backtrace(frames, 48);
  char head[64];
  const int len =
      std::snprintf(head, sizeof(head), "--- stack of thread %ld:\n", static_cast<long>(syscall(SYS_gettid)));
  (void)!write(2, head, static_cast<size_t>(len));
  backtrace_symbols_fd(frames, n, 2);
}

void armStackDump() {
  void* warm[1];
  (void)backtrace(warm, 1);  // loads the unwinder now, not inside the handler
  struct sigaction sa {};
  sa.sa_handler = writeThreadStack;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGUSR2, &sa, nullptr);
}

std::string readFirstLine(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

/// Asks every thread of `pid` for its stack (written to the rank's own output) and returns, per thread, its name and
/// where the kernel has it waiting: threads that block SIGUSR2 still show up here.
std::string dumpThreads(pid_t pid) {
  std::ostringstream out;
  std::error_code ec;
  const std::filesystem::path tasks = "/proc/" + std::to_string(pid) + "/task";
  for (const auto& task : std::filesystem::directory_iterator(tasks, ec)) {
    const std::string tid = task.path().filename().string();
    out << "thread " << tid << " (" << readFirstLine(task.path() / "comm") << ") waits in "
        << readFirstLine(task.path() / "wchan") << "\n";
    (void)syscall(SYS_tgkill, pid, std::stoi(tid), SIGUSR2);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return out.str();
}

}  // namespace

std::vector<RankResult> runRanks(int size, const std::function<void(int, int)>& body,
                                 std::chrono::milliseconds deadline) {
  std::vector<RankResult> results(size);
  std::vector<pid_t> pids(size, -1);
  std::vector<std::string> logs(size);
  std::fflush(stdout);
  std::fflush(stderr);
  for (int r = 0; r < size; ++r) {
    char path[] = "/tmp/weft-rank-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) throw std::runtime_error("mkstemp failed");
    logs[r] = path;
    pid_t pid = fork();
    if (pid < 0) throw std::runtime_error("fork failed");
    if (pid == 0) {
      dup2(fd, 1);
      dup2(fd, 2);
      close(fd);
      setvbuf(stdout, nullptr, _IONBF, 0);
      armStackDump();
      int code = 0;
      try {
        body(r, size);
        if (::testing::Test::HasFailure()) code = 1;
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d threw: %s\n", r, e.what());
        code = 1;
      } catch (...) {
        std::fprintf(stderr, "rank %d threw a non-std exception\n", r);
        code = 1;
      }
      std::fflush(stdout);
      std::fflush(stderr);
      _exit(code);
    }
    close(fd);
    pids[r] = pid;
    results[r].rank = r;
  }
  std::vector<std::string> threads(size);
  auto until = std::chrono::steady_clock::now() + deadline;
  int remaining = size;
  while (remaining > 0) {
    for (int r = 0; r < size; ++r) {
      if (pids[r] < 0) continue;
      int status = 0;
      pid_t got = waitpid(pids[r], &status, WNOHANG);
      if (got == pids[r]) {
        if (WIFEXITED(status)) results[r].exitCode = WEXITSTATUS(status);
        if (WIFSIGNALED(status)) results[r].signal = WTERMSIG(status);
        pids[r] = -1;
        --remaining;
      }
    }
    if (remaining == 0) break;
    if (std::chrono::steady_clock::now() > until) {
      for (int r = 0; r < size; ++r) {
        if (pids[r] < 0) continue;
        threads[r] = dumpThreads(pids[r]);
        kill(pids[r], SIGKILL);
        waitpid(pids[r], nullptr, 0);
        results[r].timedOut = true;
        pids[r] = -1;
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  for (int r = 0; r < size; ++r) {
    std::ifstream in(logs[r]);
    std::stringstream ss;
    ss << in.rdbuf();
    results[r].output = ss.str();
    if (!threads[r].empty()) results[r].output += "ran out of time; its threads:\n" + threads[r];
    unlink(logs[r].c_str());
    std::istringstream lines(results[r].output);
    for (std::string line; std::getline(lines, line);) std::cerr << "[rank " << r << "] " << line << "\n";
  }
  return results;
}

std::string describeFailures(const std::vector<RankResult>& results) {
  std::ostringstream out;
  for (const auto& r : results) {
    if (r.ok()) continue;
    out << "rank " << r.rank;
    if (r.timedOut)
      out << " timed out";
    else if (r.signal)
      out << " killed by signal " << r.signal;
    else
      out << " exited " << r.exitCode;
    out << "; ";
  }
  return out.str();
}

bool gpuPresentWithoutInit() {
#if WEFT_BUILD_GPU_CUDA
  return access("/dev/nvidiactl", F_OK) == 0;
#elif WEFT_BUILD_GPU_HIP
  return access("/dev/kfd", F_OK) == 0;
#else
  return false;
#endif
}

int freeLoopbackPort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  int port = ntohs(addr.sin_port);
  close(fd);
  return port;
}

}  // namespace weft::test
