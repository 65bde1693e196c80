// Several "hosts" on one machine for tests: network namespaces joined through a bridge, each with its own address,
// and a way to run forked ranks placed in them.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "multi_process.hpp"

namespace weft::test {

/// The result of one command run by runCommand.
struct CommandResult {
  int exitCode = -1;   ///< exit status when it exited; -1 when it could not be started or was killed
  std::string output;  ///< what it wrote to stdout and stderr (or why it could not be started)
};

/// Runs `argv` (argv[0] looked up on PATH) with posix_spawn, waiting at most `timeout`, and returns its exit status
/// and output. Never throws for a failing command; a command still running at the deadline is killed (exitCode -1).
CommandResult runCommand(const std::vector<std::string>& argv,
                         std::chrono::milliseconds timeout = std::chrono::seconds(10));

/// N virtual hosts: network namespaces "weft-vh-<pid>-<n>-h<i>", each with lo up and one veth (interface(i)) whose
/// other end sits on a bridge in one more namespace ("...-hub"); host i has address 10.213.0.(i+1)/24, so every
/// host reaches every other one. Needs root and the ip command (iproute2).
///
/// The constructor never throws: when namespaces cannot be made (not root, no ip, namespaces forbidden, no veth or
/// bridge support) it removes what it made and available() is false with reason() saying why. With
/// WEFT_REQUIRE_NETNS=1 in the environment, WEFT_REQUIRE_VIRTUAL_HOSTS turns that into a test failure, not a skip.
/// Namespaces left by earlier runs whose process is gone (same "weft-vh-" prefix, dead pid) are removed on
/// construction. The destructor removes every namespace (and with them the veths and the bridge); it does nothing in
/// a forked child, so ranks that inherit the object never tear down their parent's hosts.
class VirtualHosts {
 public:
  /// Makes `count` hosts (1..16).
  explicit VirtualHosts(int count);
  ~VirtualHosts();
  VirtualHosts(const VirtualHosts&) = delete;
  VirtualHosts& operator=(const VirtualHosts&) = delete;

  /// Whether the hosts exist.
  bool available() const { return available_; }
  /// Why they do not ("" when available).
  const std::string& reason() const { return reason_; }

  /// Number of hosts.
  int hosts() const { return static_cast<int>(names_.size()); }
  /// Host i's IPv4 address, e.g. "10.213.0.1".
  std::string address(int i) const;
  /// Host i's interface towards the others (the same name in every host's namespace).
  std::string interface(int i) const;
  /// Host i's namespace name (as `ip netns` knows it).
  const std::string& namespaceName(int i) const;

  /// Moves the calling thread into host i's network namespace (setns from /run/netns/<name>). Call it in a forked
  /// rank before it makes any socket; sockets made earlier stay where they were. Throws Error(kSystemError).
  void enter(int i) const;

  /// Runs `fn` on a new thread inside host i's namespace and returns its result (exceptions are passed on), leaving
  /// the calling thread where it is: e.g. making a bootstrap id whose root address is host i's.
  void runIn(int i, const std::function<void()>& fn) const;

  /// Takes host i's interface down (`ip link set ... down`): its routes go and nothing passes until linkUp(i).
  /// Throws Error(kSystemError) with ip's message when the command fails.
  void linkDown(int i) const;
  /// Brings host i's interface back up.
  void linkUp(int i) const;

 private:
  void build(int count);
  void removeAll() noexcept;
  void ip(const std::vector<std::string>& args) const;

  bool available_ = false;
  std::string reason_;
  std::string prefix_;
  std::string hub_;
  std::vector<std::string> names_;
  int ownerPid_ = -1;
};

/// Where each rank runs: placement[r] is the host index of rank r.
using Placement = std::vector<int>;

/// runRanks over `hosts`: rank r is forked, enters host placement[r]'s namespace, sets WEFT_BOOTSTRAP_INTERFACE to
/// that host's interface, and runs body(r, size). Every rank is killed at `deadline`.
std::vector<RankResult> runRanksOnHosts(const VirtualHosts& hosts, const Placement& placement,
                                        const std::function<void(int rank, int size)>& body,
                                        std::chrono::milliseconds deadline = std::chrono::seconds(60));

/// Whether the environment demands the namespace tests run (WEFT_REQUIRE_NETNS=1): then missing namespaces are a
/// failure, not a skip.
bool namespacesRequired();

}  // namespace weft::test

/// Skips the current test (with the reason) when `hosts` are unavailable, or fails it when WEFT_REQUIRE_NETNS=1.
#define WEFT_REQUIRE_VIRTUAL_HOSTS(hosts)                                                             \
  do {                                                                                                \
    if (!(hosts).available()) {                                                                       \
      if (::weft::test::namespacesRequired()) FAIL() << "WEFT_REQUIRE_NETNS=1: " << (hosts).reason(); \
      GTEST_SKIP() << "virtual hosts (network namespaces) unavailable: " << (hosts).reason();         \
    }                                                                                                 \
  } while (0)
