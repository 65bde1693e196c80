/// weft's configuration: which transports to try for which pair of ranks, how each transport is set up, where plugins
/// live, bootstrap and log settings. Read from a TOML file (docs/configuration.md), then single keys are overridden by
/// environment variables; with no file at all the built-in defaults work.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>
#include <weft/params.hpp>

namespace weft {

/// Where a peer rank sits relative to this one; each class has its own ordered transport preference.
enum class PeerClass { kSameProcess, kSameHost, kOtherHost };

/// The config-file spelling of a class: "same_process", "same_host", "other_host".
const char* peerClassName(PeerClass peerClass);

/// The class spelled `name` ("same_process", "same_host", "other_host"); nullopt for anything else.
std::optional<PeerClass> peerClassFromName(std::string_view name);

/// The type of one transport option.
enum class OptionType { kString, kInt, kBool };

/// One option of a transport weft ships. The table of these (knownTransportOptions) is the single list that the file
/// parser, the environment overrides, docs/configuration.md and its test all check against.
struct TransportOptionInfo {
  std::string transport;                   ///< transport name, e.g. "ibverbs"
  std::string key;                         ///< option key, e.g. "gid_index"
  OptionType type;                         ///< how the value is checked
  std::vector<std::string> allowedValues;  ///< kString only: the accepted values; empty = any non-empty string
  int64_t minValue = 0;                    ///< kInt only: smallest accepted value
  int64_t maxValue = 0;                    ///< kInt only: largest accepted value
  std::string help;                        ///< what the option does
};

/// The transports weft ships, whose [transport.<name>] tables are checked key by key: host, cuda_ipc, libfabric,
/// ibverbs. A table for any other name (a third-party plugin) passes its scalar keys through unchecked.
const std::vector<std::string>& shippedTransports();

/// Every option of every shipped transport, grouped by transport in shippedTransports() order.
const std::vector<TransportOptionInfo>& knownTransportOptions();

/// The operation names [nccl] force_fallback and WEFT_NCCL_FORCE_FALLBACK accept: "allreduce", "allgather",
/// "reducescatter", "broadcast", "reduce", "alltoall", "gather", "scatter", "sendrecv" and "all".
const std::vector<std::string>& ncclFallbackOperations();

/// One rule of [[collectives.allreduce]]: allreduces of `ranks` ranks (0: any number) and at most `maxBytes` bytes
/// (0: any size), on communicators whose most ranks on one GPU are `ranksPerGpu` (0: any placement), run `algorithm`
/// ("oneshot_ll", "scatter_gather", "twoshot_ll" or "port"). weft-bench collectives --tune writes them.
struct AllReduceRule {
  int ranks = 0;
  uint64_t maxBytes = 0;
  std::string algorithm;
  int ranksPerGpu = 0;
  bool operator==(const AllReduceRule&) const = default;
};

/// The algorithm names [[collectives.allreduce]] accepts: "oneshot_ll", "scatter_gather" and "twoshot_ll".
const std::vector<std::string>& allReduceRuleAlgorithms();

/// Default of ProxyServiceOptions::directMaxBytes ([proxy] direct_max_bytes).
inline constexpr uint64_t kDefaultPortDirectMaxBytes = 4096;
/// Largest ProxyServiceOptions::directMaxBytes (one thread copying more is slower than the proxy's copy engine).
inline constexpr uint64_t kMaxPortDirectBytes = uint64_t{16} << 20;

/// The parsed configuration. A value type: copy it freely. Built by defaults(), parse(), fromFile() or load().
struct Config {
  /// [plugins] path: directories searched for plugins, in order, before the build and install directories.
  std::vector<std::string> pluginPath;
  /// [transports]: for each peer class, the transports to try in order. Always holds all three classes.
  std::map<PeerClass, std::vector<std::string>> transports;
  /// [transport.<name>] key = value, values as text: integers in decimal, booleans as "true"/"false".
  std::map<std::string, std::map<std::string, std::string>> transportOptions;
  /// [bootstrap] timeout_ms: budget of each bootstrap step.
  std::chrono::milliseconds bootstrapTimeout{30000};
  /// [bootstrap] interface: network interface for the bootstrap; empty = choose automatically.
  std::string bootstrapInterface;
  /// [proxy] threads: proxy threads per ProxyService built from this config (ProxyServiceOptions::fromConfig).
  int proxyThreads = 1;
  /// [proxy] pin_numa: pin proxy threads to the GPU's NUMA node.
  bool proxyPinNuma = true;
  /// [proxy] direct_max_bytes: largest PortChannel put the calling thread does itself where the connection maps the
  /// peer's memory (ProxyServiceOptions::directMaxBytes); 0 = every request through the proxy.
  uint64_t proxyDirectMaxBytes = kDefaultPortDirectMaxBytes;
  /// [nccl] fallback_library: path (or soname) of a real NCCL/RCCL that libweft_nccl.so forwards to what weft does not
  /// run natively; empty = no fallback (such calls fail with ncclInvalidUsage).
  std::string ncclFallbackLibrary;
  /// [nccl] force_fallback: operations libweft_nccl.so always sends to the fallback library (names from
  /// ncclFallbackOperations()); empty = only what weft cannot run.
  std::vector<std::string> ncclForceFallback;
  /// [[collectives.allreduce]]: the allreduce selection, first matching rule first; sizes no rule covers take the
  /// built-in selection. Used when neither CollectiveOptions nor WEFT_ALLREDUCE_ALGO forces an algorithm.
  std::vector<AllReduceRule> allReduceRules;
  /// [log] level and subsys, as WEFT_LOG_LEVEL / WEFT_LOG_SUBSYS take them; empty = not set by the config.
  std::string logLevel, logSubsys;
  /// Where the values came from: "built-in defaults" or the file's path.
  std::string source;

  /// The built-in defaults (those declared in the parameter table): same_process and same_host try cuda_ipc then
  /// host, other_host tries ibverbs then libfabric, bootstrap timeout 30000 ms. Applies no environment.
  static Config defaults();

  /// Parses TOML text on top of defaults(); `sourceName` (a path or label) starts every error message. Applies no
  /// environment. Throws Error(kConfigError) "<source>:<line>:<column>: <what>, naming the key" on malformed TOML,
  /// an unknown key, a value of the wrong type or out of range, or a bad transport name.
  static Config parse(std::string_view tomlText, const std::string& sourceName);

  /// Reads and parses the file at `path` (at most 1 MiB). Throws Error(kConfigError) naming the path when it cannot be
  /// read, else as parse(). Applies no environment.
  static Config fromFile(const std::string& path);

  /// The configuration weft runs with: the file WEFT_CONFIG names (it must exist), else ./weft.toml if present, else
  /// defaults(); then applyEnvironment(). Throws Error(kConfigError) on any malformed file or variable.
  static Config load();
  /// As load(), reading variables from `env` instead of the process environment (the current directory still counts).
  static Config load(const Environment& env);

  /// Overrides single keys from the process environment: WEFT_PLUGIN_PATH (prepended), WEFT_TRANSPORTS_<CLASS>,
  /// WEFT_BOOTSTRAP_TIMEOUT_MS, WEFT_BOOTSTRAP_INTERFACE, WEFT_PROXY_THREADS, WEFT_PROXY_PIN_NUMA,
  /// WEFT_PROXY_DIRECT_MAX_BYTES,
  /// WEFT_NCCL_FALLBACK, WEFT_NCCL_FORCE_FALLBACK, WEFT_TRANSPORT_<NAME>_<KEY>, WEFT_LOG_LEVEL,
  /// WEFT_LOG_SUBSYS. Throws Error(kConfigError) naming the variable when one is malformed; `*this` may then be
  /// partly updated.
  void applyEnvironment();
  /// As above, reading `env` instead of the process environment.
  void applyEnvironment(const Environment& env);

  /// The ordered transport preference for `peerClass` (possibly empty: no transport may connect such peers).
  const std::vector<std::string>& transportsFor(PeerClass peerClass) const;

  /// The options set for `transport` (file and environment); empty when none.
  std::map<std::string, std::string> optionsFor(const std::string& transport) const;
};

}  // namespace weft
