// Reading rank, size, local rank, root and timeout from the variables that launchers (mpirun, srun, torchrun)
// already set, so that a job started by any of them can bootstrap without extra code.
#include <fmt/format.h>

#include <cerrno>
#include <cstdlib>
#include <weft/bootstrap.hpp>
#include <weft/error.hpp>

#include "logging.hpp"

extern char** environ;  // NOLINT: POSIX

namespace weft {
namespace {

using Vars = std::map<std::string, std::string>;

const std::string* find(const Vars& vars, const std::string& name) {
  auto it = vars.find(name);
  return it == vars.end() ? nullptr : &it->second;
}

// A non-negative decimal integer that fits in `int` (or `limit`), else kConfigError naming the variable.
long long parseInt(const Vars& vars, const std::string& name, long long limit = 0x7fffffff) {
  const std::string& text = *find(vars, name);
  if (text.empty()) throw Error(ErrorCode::kConfigError, fmt::format("{} is set but empty", name));
  long long value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') {
      throw Error(ErrorCode::kConfigError, fmt::format("{}='{}' is not a non-negative integer", name, text));
    }
    value = value * 10 + (c - '0');
    if (value > limit) throw Error(ErrorCode::kConfigError, fmt::format("{}='{}' is too large", name, text));
  }
  return value;
}

struct Launcher {
  const char* name;
  const char* rankVar;
  const char* sizeVar;
  const char* localRankVar;
};

// In the order they are tried; the first whose rank variable is set wins.
constexpr Launcher kLaunchers[] = {
    {"weft", "WEFT_RANK", "WEFT_SIZE", "WEFT_LOCAL_RANK"},
    {"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
    {"pmi", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"},
    {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"},
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"},
};

// Every variable of this process (params.hpp's processEnvironment keeps only WEFT_* ones; launchers use others).
Vars allEnvironmentVariables() {
  Vars vars;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string entry(*e);
    size_t eq = entry.find('=');
    if (eq == std::string::npos) continue;
    vars.emplace(entry.substr(0, eq), entry.substr(eq + 1));
  }
  return vars;
}

}  // namespace

LauncherEnvironment parseLauncherEnvironment(const std::map<std::string, std::string>& vars) {
  const Launcher* launcher = nullptr;
  for (const auto& l : kLaunchers) {
    if (find(vars, l.rankVar) != nullptr || find(vars, l.sizeVar) != nullptr) {
      launcher = &l;
      break;
    }
  }
  if (launcher == nullptr) {
    throw Error(ErrorCode::kConfigError,
                "no launcher found in the environment: set WEFT_RANK, WEFT_SIZE and WEFT_ROOT_ADDR=host:port (or "
                "WEFT_UNIQUE_ID), or start the job with mpirun, srun or torchrun");
  }
  LauncherEnvironment env;
  env.launcher = launcher->name;
  for (const char* var : {launcher->rankVar, launcher->sizeVar}) {
    if (find(vars, var) == nullptr) {
      throw Error(ErrorCode::kConfigError,
                  fmt::format("{} is set but {} is not (launcher '{}')",
                              var == launcher->rankVar ? launcher->sizeVar : launcher->rankVar, var, launcher->name));
    }
  }
  env.rank = static_cast<int>(parseInt(vars, launcher->rankVar));
  env.size = static_cast<int>(parseInt(vars, launcher->sizeVar));
  if (env.size < 1 || env.rank >= env.size) {
    throw Error(ErrorCode::kConfigError,
                fmt::format("{}={} is not a rank of {}={}", launcher->rankVar, env.rank, launcher->sizeVar, env.size));
  }
  // WEFT_LOCAL_RANK overrides; otherwise only the launcher's own variable (a torchrun job under srun has
  // SLURM_LOCALID set too, counting srun tasks rather than torchrun workers).
  if (find(vars, "WEFT_LOCAL_RANK") != nullptr) {
    env.localRank = static_cast<int>(parseInt(vars, "WEFT_LOCAL_RANK"));
  } else if (find(vars, launcher->localRankVar) != nullptr) {
    env.localRank = static_cast<int>(parseInt(vars, launcher->localRankVar));
  }
  if (const auto* id = find(vars, "WEFT_UNIQUE_ID")) {
    try {
      env.uniqueId = uniqueIdFromString(*id);
    } catch (const Error& e) {
      throw Error(ErrorCode::kConfigError, "WEFT_UNIQUE_ID: " + e.message());
    }
  } else if (const auto* addr = find(vars, "WEFT_ROOT_ADDR"); addr != nullptr && !addr->empty()) {
    env.rootAddress = *addr;
  } else if (env.launcher == "torchrun") {
    const auto* masterAddr = find(vars, "MASTER_ADDR");
    const auto* masterPort = find(vars, "MASTER_PORT");
    if (masterAddr == nullptr || masterPort == nullptr || masterAddr->empty()) {
      throw Error(ErrorCode::kConfigError,
                  "RANK/WORLD_SIZE are set (torchrun) but MASTER_ADDR/MASTER_PORT are not: set them, or set "
                  "WEFT_ROOT_ADDR=host:port");
    }
    // torch's TCPStore already listens on MASTER_PORT; the bootstrap root takes the next port.
    long long port = parseInt(vars, "MASTER_PORT", 65534);
    if (port == 0) throw Error(ErrorCode::kConfigError, "MASTER_PORT=0 is not a port");
    bool v6 = masterAddr->find(':') != std::string::npos && masterAddr->front() != '[';
    env.rootAddress = v6 ? fmt::format("[{}]:{}", *masterAddr, port + 1) : fmt::format("{}:{}", *masterAddr, port + 1);
  } else {
    throw Error(ErrorCode::kConfigError,
                fmt::format("rank and size come from {}/{} ({}), but the root's address is unknown: set "
                            "WEFT_ROOT_ADDR=host:port (a free port on the host of rank 0, the same value on every "
                            "rank) or WEFT_UNIQUE_ID (from TcpBootstrap::createUniqueId)",
                            launcher->rankVar, launcher->sizeVar, launcher->name));
  }
  if (find(vars, "WEFT_BOOTSTRAP_TIMEOUT_MS") != nullptr) {
    long long ms = parseInt(vars, "WEFT_BOOTSTRAP_TIMEOUT_MS");
    if (ms == 0) throw Error(ErrorCode::kConfigError, "WEFT_BOOTSTRAP_TIMEOUT_MS must be positive");
    env.timeout = std::chrono::milliseconds(ms);
  }
  return env;
}

std::unique_ptr<TcpBootstrap> TcpBootstrap::fromEnvironment() {
  LauncherEnvironment env = parseLauncherEnvironment(allEnvironmentVariables());
  logInfo(LogSubsys::kBoot, "rank {} of {} (local rank {}) from launcher '{}', root {}", env.rank, env.size,
          env.localRank, env.launcher, env.uniqueId ? "from WEFT_UNIQUE_ID" : env.rootAddress);
  std::unique_ptr<TcpBootstrap> boot =
      env.uniqueId ? std::make_unique<TcpBootstrap>(env.rank, env.size, *env.uniqueId, env.timeout)
                   : std::make_unique<TcpBootstrap>(env.rank, env.size, env.rootAddress, env.timeout);
  boot->localRank_ = env.localRank;
  return boot;
}

}  // namespace weft
