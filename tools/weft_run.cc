// weft-run: starts the N ranks of a job on this host, each with the environment TcpBootstrap::fromEnvironment
// reads, and prefixes every line they print with "[rank i] ".
//
//   weft-run -n N [--timeout SECONDS] [--grace SECONDS] [--host-address ADDR] -- prog args...
//
// Exit status: 0 when every rank exits 0; otherwise that of the first rank to fail (128 + signal for a rank
// killed by a signal), or 124 when the timeout ran out. After a failure, a timeout or a forwarded SIGINT/SIGTERM,
// the remaining ranks get SIGTERM and, after the grace period, SIGKILL.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>
#include <weft/bootstrap.hpp>
#include <weft/error.hpp>
#include <weft/unique_id.hpp>

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;

/// A line longer than this is passed on in pieces, each with the prefix, so memory stays bounded.
constexpr size_t kMaxLineBytes = 64 * 1024;
/// The exit status for a job stopped by --timeout (the one timeout(1) uses).
constexpr int kTimeoutExitCode = 124;

// The self-pipe: signal handlers only write the signal number here; the poll loop does the rest.
int gSignalPipe[2] = {-1, -1};

extern "C" void onSignal(int signo) {
  const int saved = errno;
  const unsigned char byte = static_cast<unsigned char>(signo);
  [[maybe_unused]] ssize_t n = write(gSignalPipe[1], &byte, 1);
  errno = saved;
}

void writeAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    ssize_t n = write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return;  // our own output is gone (closed pipe): nothing better to do than drop it
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
}

void say(const std::string& message) {
  std::string line = "weft-run: " + message + "\n";
  writeAll(STDERR_FILENO, line.data(), line.size());
}

/// One output stream of one rank: a pipe read end and the part of a line not yet passed on.
struct Stream {
  int fd = -1;
  int outFd = STDOUT_FILENO;
  std::string pending;
};

/// One rank: its process (the leader of its own process group) and its two streams.
struct Rank {
  int index = 0;
  pid_t pid = -1;
  bool running = false;
  int status = 0;
  Stream out;
  Stream err;
};

std::string rankPrefix(int rank) { return "[rank " + std::to_string(rank) + "] "; }

// Passes on every complete line in s.pending (and, at end of stream, the rest) as one write each, so lines
// of different ranks never mix within a line.
void flushLines(Stream& s, int rank, bool endOfStream) {
  const std::string prefix = rankPrefix(rank);
  size_t start = 0;
  while (true) {
    size_t nl = s.pending.find('\n', start);
    size_t end;
    if (nl != std::string::npos) {
      end = nl + 1;
    } else if (s.pending.size() - start >= kMaxLineBytes || (endOfStream && start < s.pending.size())) {
      end = s.pending.size();
    } else {
      break;
    }
    std::string line = prefix + s.pending.substr(start, end - start);
    if (line.back() != '\n') line.push_back('\n');
    writeAll(s.outFd, line.data(), line.size());
    start = end;
  }
  s.pending.erase(0, start);
}

// Reads what is there; returns false at end of stream (or a read error), after passing on the rest.
bool drain(Stream& s, int rank) {
  char buf[16384];
  while (true) {
    ssize_t n = read(s.fd, buf, sizeof(buf));
    if (n > 0) {
      s.pending.append(buf, static_cast<size_t>(n));
      flushLines(s, rank, false);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    flushLines(s, rank, true);
    close(s.fd);
    s.fd = -1;
    return false;
  }
}

std::string describeStatus(int status) {
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const char* name = strsignal(WTERMSIG(status));
    return "was killed by signal " + std::to_string(WTERMSIG(status)) + " (" + (name ? name : "?") + ")";
  }
  return "ended with status " + std::to_string(status);
}

int exitCodeOf(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

std::string listRanks(const std::vector<int>& ranks) {
  std::string out;
  for (int r : ranks) out += (out.empty() ? "" : ", ") + std::to_string(r);
  return out;
}

/// The environment of rank `rank`: ours, with the WEFT_* launch variables replaced.
std::vector<std::string> rankEnvironment(int rank, int size, const std::string& uniqueId) {
  static const char* const kOwned[] = {
      "WEFT_RANK=", "WEFT_SIZE=", "WEFT_LOCAL_RANK=", "WEFT_LOCAL_SIZE=", "WEFT_UNIQUE_ID=", "WEFT_ROOT_ADDR="};
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    bool owned = false;
    for (const char* prefix : kOwned) owned = owned || std::strncmp(*e, prefix, std::strlen(prefix)) == 0;
    if (!owned) env.emplace_back(*e);
  }
  env.push_back("WEFT_RANK=" + std::to_string(rank));
  env.push_back("WEFT_SIZE=" + std::to_string(size));
  env.push_back("WEFT_LOCAL_RANK=" + std::to_string(rank));
  env.push_back("WEFT_LOCAL_SIZE=" + std::to_string(size));
  env.push_back("WEFT_UNIQUE_ID=" + uniqueId);
  return env;
}

void makePipe(int fds[2]) {
  if (pipe2(fds, O_CLOEXEC) != 0) weft::throwSystemError("weft-run: pipe2", errno);
}

void setNonBlocking(int fd) {
  int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) weft::throwSystemError("weft-run: fcntl", errno);
}

// Starts one rank in its own process group, so that a signal reaches everything it started (a shell's
// children too) and the terminal's Ctrl-C reaches it only through us.
void startRank(Rank& r, const std::vector<std::string>& command, const std::vector<std::string>& env) {
  int outPipe[2];
  int errPipe[2];
  makePipe(outPipe);
  makePipe(errPipe);
  // Everything exec needs is prepared before fork: the child only calls async-signal-safe functions.
  std::vector<char*> argv;
  for (const auto& a : command) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  sigset_t none;
  sigemptyset(&none);
  // Until the child has reset its handlers, a signal (the SIGTERM of a stop that starts right now) would run our
  // handler in the child and land in our self-pipe, as if sent to us: keep them blocked across the fork.
  sigset_t handled;
  sigset_t previous;
  sigemptyset(&handled);
  sigaddset(&handled, SIGINT);
  sigaddset(&handled, SIGTERM);
  sigaddset(&handled, SIGCHLD);
  sigprocmask(SIG_BLOCK, &handled, &previous);

  pid_t pid = fork();
  if (pid < 0) {
    const int forkErrno = errno;
    sigprocmask(SIG_SETMASK, &previous, nullptr);
    weft::throwSystemError("weft-run: fork for rank " + std::to_string(r.index), forkErrno);
  }
  if (pid == 0) {
    setpgid(0, 0);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGCHLD, SIG_DFL);
    signal(SIGPIPE, SIG_DFL);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    dup2(outPipe[1], STDOUT_FILENO);
    dup2(errPipe[1], STDERR_FILENO);
    if (r.index != 0) {  // like mpirun: only rank 0 reads our stdin
      int devNull = open("/dev/null", O_RDONLY);
      if (devNull >= 0) dup2(devNull, STDIN_FILENO);
    }
    execvpe(argv[0], argv.data(), envp.data());
    const char* why = strerror(errno);
    const char* parts[] = {"weft-run: cannot run ", argv[0], ": ", why, "\n"};
    for (const char* p : parts) [[maybe_unused]] ssize_t n = write(STDERR_FILENO, p, std::strlen(p));
    _exit(127);
  }
  sigprocmask(SIG_SETMASK, &previous, nullptr);
  setpgid(pid, pid);  // also here: whichever of parent and child runs first, the group exists before a kill
  close(outPipe[1]);
  close(errPipe[1]);
  r.pid = pid;
  r.running = true;
  r.out = Stream{outPipe[0], STDOUT_FILENO, {}};
  r.err = Stream{errPipe[0], STDERR_FILENO, {}};
  setNonBlocking(r.out.fd);
  setNonBlocking(r.err.fd);
}

struct Options {
  int size = 0;
  double timeoutSeconds = 0;
  double graceSeconds = 3;
  std::string hostAddress = "127.0.0.1";
  std::vector<std::string> command;
};

std::chrono::milliseconds toMilliseconds(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000.0 + 0.5));
}

int runJob(const Options& opt) {
  const std::string uniqueId = weft::uniqueIdToString(weft::TcpBootstrap::createUniqueId(opt.hostAddress));

  makePipe(gSignalPipe);
  setNonBlocking(gSignalPipe[0]);
  setNonBlocking(gSignalPipe[1]);
  struct sigaction sa {};
  sa.sa_handler = onSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGCHLD, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);

  std::vector<Rank> ranks(static_cast<size_t>(opt.size));
  for (int i = 0; i < opt.size; ++i) {
    ranks[i].index = i;
    try {
      startRank(ranks[i], opt.command, rankEnvironment(i, opt.size, uniqueId));
    } catch (const weft::Error& e) {
      say(std::string(e.what()) + "; stopping the ranks already started");
      for (auto& r : ranks) {
        if (r.running) kill(-r.pid, SIGKILL);
      }
      while (waitpid(-1, nullptr, 0) > 0) {
      }
      return 1;
    }
  }

  const auto start = Clock::now();
  const std::optional<Clock::time_point> deadline =
      opt.timeoutSeconds > 0 ? std::optional(start + toMilliseconds(opt.timeoutSeconds)) : std::nullopt;
  std::optional<Clock::time_point> killAt;  // set once the job is being stopped: when SIGKILL follows
  bool killSent = false;
  std::optional<Clock::time_point> stopReadingAt;
  int result = 0;
  bool failed = false;
  int running = opt.size;

  auto stopAll = [&](int signo) {
    for (auto& r : ranks) {
      if (r.running) kill(-r.pid, signo);
    }
    if (!killAt) killAt = Clock::now() + toMilliseconds(opt.graceSeconds);
  };
  auto runningRanks = [&] {
    std::vector<int> list;
    for (const auto& r : ranks) {
      if (r.running) list.push_back(r.index);
    }
    return list;
  };

  bool deadlinePassed = false;
  while (true) {
    int openStreams = 0;
    std::vector<pollfd> fds;
    std::vector<Stream*> streams;
    fds.push_back({gSignalPipe[0], POLLIN, 0});
    streams.push_back(nullptr);
    for (auto& r : ranks) {
      for (Stream* s : {&r.out, &r.err}) {
        if (s->fd >= 0) {
          fds.push_back({s->fd, POLLIN, 0});
          streams.push_back(s);
          ++openStreams;
        }
      }
    }
    if (running == 0 && openStreams == 0) break;

    // Wake for the nearest of: the timeout, the end of the grace period, the end of reading after all exited.
    auto now = Clock::now();
    std::optional<Clock::time_point> wake;
    for (const auto& t : {!deadlinePassed ? deadline : std::nullopt, killSent ? std::nullopt : killAt, stopReadingAt}) {
      if (t && (!wake || *t < *wake)) wake = *t;
    }
    int waitMs = -1;
    if (wake) {
      waitMs = *wake <= now
                   ? 0
                   : static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(*wake - now).count() + 1);
    }
    int n = poll(fds.data(), fds.size(), waitMs);
    if (n < 0 && errno != EINTR) weft::throwSystemError("weft-run: poll", errno);

    for (size_t i = 1; n > 0 && i < fds.size(); ++i) {
      if (fds[i].revents != 0) {
        Rank* owner = nullptr;
        for (auto& r : ranks) {
          if (&r.out == streams[i] || &r.err == streams[i]) owner = &r;
        }
        drain(*streams[i], owner->index);
      }
    }

    if (n > 0 && (fds[0].revents & POLLIN) != 0) {
      unsigned char sig[64];
      ssize_t got;
      while ((got = read(gSignalPipe[0], sig, sizeof(sig))) > 0) {
        for (ssize_t k = 0; k < got; ++k) {
          if (sig[k] == SIGINT || sig[k] == SIGTERM) {
            if (killAt) {
              say("second signal: killing ranks " + listRanks(runningRanks()));
              stopAll(SIGKILL);
              killSent = true;
            } else {
              say(std::string("got ") + strsignal(sig[k]) + ": passing it on to ranks " + listRanks(runningRanks()));
              stopAll(sig[k]);
            }
          }
        }
      }
    }

    // Reap whoever ended (SIGCHLD only says that someone did).
    pid_t pid;
    int status;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
      for (auto& r : ranks) {
        if (r.pid != pid || !r.running) continue;
        r.running = false;
        r.status = status;
        --running;
        const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
        if (!ok && !failed) {
          failed = true;
          result = exitCodeOf(status);
          auto others = runningRanks();
          say("rank " + std::to_string(r.index) + " " + describeStatus(status) +
              (others.empty() ? "" : "; stopping ranks " + listRanks(others)));
          if (!others.empty()) stopAll(SIGTERM);
        }
        // Whatever the rank left behind in its group goes with it (it could hold our pipes open).
        if (!ok) kill(-r.pid, SIGKILL);
      }
    }
    if (running == 0 && !stopReadingAt) stopReadingAt = Clock::now() + toMilliseconds(opt.graceSeconds);

    now = Clock::now();
    if (deadline && !deadlinePassed && now >= *deadline && running > 0) {
      deadlinePassed = true;
      say(fmt::format("timeout after {:g} s; ranks still running: ", opt.timeoutSeconds) + listRanks(runningRanks()) +
          "; stopping them");
      if (!failed) {
        failed = true;
        result = kTimeoutExitCode;
      }
      stopAll(SIGTERM);
    }
    if (killAt && !killSent && now >= *killAt && running > 0) {
      say("ranks " + listRanks(runningRanks()) +
          fmt::format(" outlived the {:g} s grace period; sending SIGKILL", opt.graceSeconds));
      for (auto& r : ranks) {
        if (r.running) kill(-r.pid, SIGKILL);
      }
      killSent = true;
    }
    if (stopReadingAt && now >= *stopReadingAt) {
      // Every rank has exited but something they started still holds an output pipe open: stop waiting for it.
      for (auto& r : ranks) {
        kill(-r.pid, SIGKILL);
        for (Stream* s : {&r.out, &r.err}) {
          if (s->fd >= 0) {
            flushLines(*s, r.index, true);
            close(s->fd);
            s->fd = -1;
          }
        }
      }
    }
  }
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  // Everything after "--" is the command, untouched by option parsing.
  int split = 1;
  while (split < argc && std::strcmp(argv[split], "--") != 0) ++split;

  Options opt;
  CLI::App app{
      "weft-run: start N ranks of a weft job on this host, each line of their output prefixed "
      "with [rank i].\nUsage: weft-run -n N [options] -- prog args..."};
  app.add_option("-n,--np", opt.size, "number of ranks")->required()->check(CLI::Range(1, 1024));
  app.add_option("--timeout", opt.timeoutSeconds, "stop the job after this many seconds (0: never)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--grace", opt.graceSeconds, "seconds between SIGTERM and SIGKILL when stopping ranks")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--host-address", opt.hostAddress, "address the rank-0 bootstrap listens on")->capture_default_str();
  try {
    app.parse(split, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  for (int i = split + 1; i < argc; ++i) opt.command.emplace_back(argv[i]);
  if (opt.command.empty()) {
    say("no command: usage is weft-run -n N [options] -- prog args...");
    return 2;
  }
  try {
    return runJob(opt);
  } catch (const weft::Error& e) {
    say(e.what());
    return 1;
  }
}
