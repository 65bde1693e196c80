#include "network_namespaces.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <thread>
#include <weft/error.hpp>

extern char** environ;

namespace weft::test {

namespace {

constexpr const char* kPrefix = "weft-vh-";
constexpr const char* kInterface = "weft0";
constexpr const char* kBridge = "br0";
constexpr const char* kNetnsDir = "/run/netns";
constexpr int kMaxHosts = 16;

// Instances made by this process so far: part of every name, so that several in one process never collide.
std::atomic<int> instanceCounter{0};

// Removes namespaces "weft-vh-<pid>-..." whose process no longer exists (an earlier run that was killed).
void removeStaleNamespaces() {
  DIR* dir = opendir(kNetnsDir);
  if (dir == nullptr) return;
  std::vector<std::string> stale;
  while (dirent* entry = readdir(dir)) {
    std::string name = entry->d_name;
    if (name.rfind(kPrefix, 0) != 0) continue;
    const char* digits = name.c_str() + std::strlen(kPrefix);
    char* end = nullptr;
    long pid = std::strtol(digits, &end, 10);
    if (end == digits || *end != '-' || pid <= 0) continue;
    if (kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) stale.push_back(name);
  }
  closedir(dir);
  for (const auto& name : stale) runCommand({"ip", "netns", "delete", name});
}

}  // namespace

CommandResult runCommand(const std::vector<std::string>& argv, std::chrono::milliseconds timeout) {
  CommandResult result;
  if (argv.empty()) {
    result.output = "empty command";
    return result;
  }
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    result.output = std::string("pipe failed: ") + std::strerror(errno);
    return result;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 2);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  int rc = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    result.output = "cannot run " + argv[0] + ": " + std::strerror(rc);
    return result;
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  bool killed = false;
  char buffer[4096];
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      kill(pid, SIGKILL);
      killed = true;
      break;
    }
    pollfd pfd{fds[0], POLLIN, 0};
    int ready = poll(&pfd, 1, static_cast<int>(left.count()));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) continue;
    ssize_t n = read(fds[0], buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // EOF: the command closed its output
    result.output.append(buffer, static_cast<size_t>(n));
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (killed) {
    result.output += "\n(killed after " + std::to_string(timeout.count()) + " ms)";
  } else if (WIFEXITED(status)) {
    result.exitCode = WEXITSTATUS(status);
  }
  return result;
}

bool namespacesRequired() {
  const char* v = std::getenv("WEFT_REQUIRE_NETNS");
  return v != nullptr && std::strcmp(v, "1") == 0;
}

VirtualHosts::VirtualHosts(int count) : ownerPid_(static_cast<int>(getpid())) {
  prefix_ = std::string(kPrefix) + std::to_string(ownerPid_) + "-" + std::to_string(instanceCounter++);
  try {
    build(count);
    available_ = true;
  } catch (const std::exception& e) {
    reason_ = e.what();
    removeAll();
    names_.clear();
  }
}

VirtualHosts::~VirtualHosts() {
  if (static_cast<int>(getpid()) == ownerPid_) removeAll();
}

void VirtualHosts::ip(const std::vector<std::string>& args) const {
  std::vector<std::string> argv{"ip"};
  argv.insert(argv.end(), args.begin(), args.end());
  CommandResult r = runCommand(argv);
  if (r.exitCode != 0) {
    std::string text;
    for (const auto& a : argv) text += (text.empty() ? "" : " ") + a;
    while (!r.output.empty() && (r.output.back() == '\n' || r.output.back() == ' ')) r.output.pop_back();
    throw Error(ErrorCode::kSystemError,
                "'" + text + "' failed (exit " + std::to_string(r.exitCode) + "): " + r.output);
  }
}

void VirtualHosts::build(int count) {
  if (count < 1 || count > kMaxHosts) {
    throw Error(ErrorCode::kInvalidArgument,
                "VirtualHosts: " + std::to_string(count) + " hosts is not in [1, " + std::to_string(kMaxHosts) + "]");
  }
  if (geteuid() != 0) throw Error(ErrorCode::kNotSupported, "needs root (euid " + std::to_string(geteuid()) + ")");
  CommandResult version = runCommand({"ip", "-V"});
  if (version.exitCode != 0) {
    throw Error(ErrorCode::kNotSupported, "the ip command (iproute2) is not usable: " + version.output);
  }
  removeStaleNamespaces();
  hub_ = prefix_ + "-hub";
  // The hub first: whether it can be made is the test of whether namespaces are allowed here at all.
  try {
    ip({"netns", "add", hub_});
  } catch (const Error& e) {
    hub_.clear();
    throw Error(ErrorCode::kNotSupported, "network namespaces cannot be made here: " + e.message());
  }
  ip({"-n", hub_, "link", "set", "lo", "up"});
  ip({"-n", hub_, "link", "add", kBridge, "type", "bridge"});
  ip({"-n", hub_, "link", "set", kBridge, "up"});
  for (int i = 0; i < count; ++i) {
    const std::string name = prefix_ + "-h" + std::to_string(i);
    ip({"netns", "add", name});
    names_.push_back(name);
    const std::string hubSide = "h" + std::to_string(i);
    // Both ends are made inside their namespaces, so no name ever appears in the caller's namespace.
    ip({"-n", hub_, "link", "add", hubSide, "type", "veth", "peer", "name", kInterface, "netns", name});
    ip({"-n", hub_, "link", "set", hubSide, "master", kBridge});
    ip({"-n", hub_, "link", "set", hubSide, "up"});
    ip({"-n", name, "link", "set", "lo", "up"});
    ip({"-n", name, "addr", "add", address(i) + "/24", "dev", kInterface});
    ip({"-n", name, "link", "set", kInterface, "up"});
  }
}

void VirtualHosts::removeAll() noexcept {
  // Deleting a namespace destroys the veth ends in it, and with them their peers on the bridge.
  for (const auto& name : names_) runCommand({"ip", "netns", "delete", name});
  if (!hub_.empty()) runCommand({"ip", "netns", "delete", hub_});
}

std::string VirtualHosts::address(int i) const { return "10.213.0." + std::to_string(i + 1); }

std::string VirtualHosts::interface(int) const { return kInterface; }

const std::string& VirtualHosts::namespaceName(int i) const { return names_.at(static_cast<size_t>(i)); }

void VirtualHosts::enter(int i) const {
  const std::string path = std::string(kNetnsDir) + "/" + namespaceName(i);
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throwSystemError("cannot open " + path, errno);
  if (setns(fd, CLONE_NEWNET) != 0) {
    int e = errno;
    close(fd);
    throwSystemError("setns into " + path, e);
  }
  close(fd);
}

void VirtualHosts::runIn(int i, const std::function<void()>& fn) const {
  std::exception_ptr failure;
  std::thread worker([&] {
    try {
      enter(i);
      fn();
    } catch (...) {
      failure = std::current_exception();
    }
  });
  worker.join();
  if (failure) std::rethrow_exception(failure);
}

void VirtualHosts::linkDown(int i) const { ip({"-n", namespaceName(i), "link", "set", kInterface, "down"}); }

void VirtualHosts::linkUp(int i) const { ip({"-n", namespaceName(i), "link", "set", kInterface, "up"}); }

std::vector<RankResult> runRanksOnHosts(const VirtualHosts& hosts, const Placement& placement,
                                        const std::function<void(int rank, int size)>& body,
                                        std::chrono::milliseconds deadline) {
  for (int h : placement) {
    if (h < 0 || h >= hosts.hosts()) {
      throw Error(ErrorCode::kInvalidArgument,
                  "placement names host " + std::to_string(h) + " of " + std::to_string(hosts.hosts()));
    }
  }
  return runRanks(
      static_cast<int>(placement.size()),
      [&](int rank, int size) {
        const int host = placement[static_cast<size_t>(rank)];
        hosts.enter(host);
        setenv("WEFT_BOOTSTRAP_INTERFACE", hosts.interface(host).c_str(), 1);
        body(rank, size);
      },
      deadline);
}

}  // namespace weft::test
