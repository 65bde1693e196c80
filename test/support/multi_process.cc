#include "multi_process.hpp"

#include <weft/build_config.hpp>

#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

namespace weft::test {

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
