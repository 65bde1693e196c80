// Running real programs from tests (weft-run, weft-bench, fi_info) and a scratch directory for their files.
#pragma once

#include <string>

namespace weft::test {

/// What a shell command printed (stdout and stderr together) and its exit status (-1: it did not exit normally,
/// or could not be started).
struct ShellResult {
  int status = -1;
  std::string output;
};

/// Runs `command` through /bin/sh and waits for it.
ShellResult runShell(const std::string& command);

/// Whether something exists at `path`.
bool pathExists(const std::string& path);

/// A fresh directory under /tmp (its name starts with `prefix`), removed with its contents when this goes away.
/// path() is empty when it could not be made.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "weft-test");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace weft::test
