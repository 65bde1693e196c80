// Whether a peer process has exited, for the error messages of transports that talk to their peers over local
// sockets: a reset or an early close from an owner that is dying should say "has exited", not look like a bug.
// Header-only: every plugin is its own shared object and links nothing of libweft.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <cerrno>
#include <chrono>
#include <fstream>
#include <string>
#include <thread>

namespace weft::transport_support {

/// The state letter of /proc/<pid>/stat ('R', 'S', 'Z', 'X', ...), or '\0' when it cannot be read.
inline char processStateLetter(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(stat, line);
  // The command name in parentheses may hold spaces and ')': the state follows the last ')'.
  const size_t paren = line.rfind(')');
  return paren == std::string::npos || paren + 2 >= line.size() ? '\0' : line[paren + 2];
}

/// True once `pid` runs no more: no process has the pid, or it is a zombie, or it is being reaped ('X').
/// A process that vanishes between the two looks is caught by looking again.
inline bool processHasExited(pid_t pid) {
  auto gone = [pid] { return kill(pid, 0) != 0 && errno == ESRCH; };
  if (gone()) return true;
  const char state = processStateLetter(pid);
  if (state == 'Z' || state == 'X' || state == 'x') return true;
  return state == '\0' && gone();
}

/// Waits up to `grace` for `pid` to exit. The threads of a dying process go one by one and its sockets close with
/// the last of them, so a peer sees the reset slightly before the process counts as exited.
inline bool processExitsWithin(pid_t pid, std::chrono::milliseconds grace) {
  const auto until = std::chrono::steady_clock::now() + grace;
  for (;;) {
    if (processHasExited(pid)) return true;
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace weft::transport_support
