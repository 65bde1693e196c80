#include <weft/config.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

// toml++ 3.3 states its parser's invariants with TOML_ASSERT_ASSUME: an abort in debug builds and
// __builtin_assume (undefined behaviour when false) with NDEBUG. Malformed input breaks some of them (config_fuzz
// found "[.1"), so in this one file they are checks that throw, and parse() turns that into a config error.
namespace weft::detail {
struct TomlInvariantBroken {};
}  // namespace weft::detail
#pragma push_macro("NDEBUG")
#undef NDEBUG
#define TOML_ASSERT(expr) ((expr) ? static_cast<void>(0) : throw ::weft::detail::TomlInvariantBroken{})
#include <toml++/toml.h>
#pragma pop_macro("NDEBUG")
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <limits>
#include <sstream>
#include <weft/error.hpp>
#include <weft/proxy_service.hpp>

#include "logging.hpp"

namespace weft {
namespace {

constexpr const char* kDefaultsSource = "built-in defaults";
constexpr const char* kLocalConfigFile = "weft.toml";
// Far beyond any real config; stops a wrong WEFT_CONFIG (a device, a huge log) from being read whole into memory.
constexpr int64_t kMaxConfigBytes = 1 << 20;
constexpr int64_t kMaxTimeoutMs = 24LL * 3600 * 1000;
constexpr size_t kMaxTransportNameLength = 64;
constexpr std::string_view kTransportOptionPrefix = "WEFT_TRANSPORT_";

constexpr PeerClass kAllPeerClasses[] = {PeerClass::kSameProcess, PeerClass::kSameHost, PeerClass::kOtherHost};

const std::vector<std::string> kShippedTransports = {"host", "cuda_ipc", "libfabric", "ibverbs"};

constexpr int64_t kIntMax = std::numeric_limits<int32_t>::max();

// The one table of known transport options (see config.hpp).
const std::vector<TransportOptionInfo> kKnownOptions = {
    {"host",
     "io_timeout_ms",
     OptionType::kInt,
     {},
     1,
     600000,
     "Budget in milliseconds of each socket read or write the memory-sharing server does for one importing peer "
     "(default 2000): a peer that stalls mid-request is dropped after it, and the server goes on serving others."},
    {"cuda_ipc",
     "handle_type",
     OptionType::kString,
     {"runtime", "posix_fd"},
     0,
     0,
     "How GPU memory is shared between processes: \"runtime\" (cudaIpc/hipIpc memory handles) or \"posix_fd\" "
     "(driver allocations exported as file descriptors, passed over a Unix socket)."},
    {"libfabric",
     "provider",
     OptionType::kString,
     {},
     0,
     0,
     "libfabric provider to use (e.g. \"efa\", \"cxi\", \"verbs\", \"tcp\", \"shm\"); default: the first provider "
     "fi_getinfo offers with the needed capabilities."},
    {"libfabric",
     "domain",
     OptionType::kString,
     {},
     0,
     0,
     "libfabric domain (NIC) name, e.g. \"rdmap0s31\"; default: the one nearest the GPU."},
    {"libfabric",
     "progress_thread",
     OptionType::kBool,
     {},
     0,
     0,
     "Run a dedicated thread that drives libfabric progress (for providers with manual progress)."},
    {"libfabric",
     "isolate_provider",
     OptionType::kBool,
     {},
     0,
     0,
     "Only the progress thread calls into libfabric; callers queue and wait within their budgets. Default: on for "
     "shm where the process may use 8 or more CPUs (a peer that dies inside shm can leave a lock spinning "
     "forever; docs/libfabric.md)."},
    {"libfabric",
     "signals",
     OptionType::kString,
     {"auto", "data_after_completion", "atomic"},
     0,
     0,
     "How a signal reaches the peer: \"data_after_completion\" (64-bit CQ data of a small write, posted once the "
     "writes before it completed, applied by the target's progress thread), \"atomic\" (fi_atomic add after the "
     "writes completed) or \"auto\" (CQ data right behind the writes where the provider delivers them in order, "
     "else after their completion; atomics where it carries no 8 bytes of CQ data)."},
    {"ibverbs",
     "device",
     OptionType::kString,
     {},
     0,
     0,
     "RDMA device name, e.g. \"mlx5_0\"; default: the one nearest the GPU."},
    {"ibverbs", "port", OptionType::kInt, {}, 1, 255, "Port number on the device (1-based)."},
    {"ibverbs",
     "gid_index",
     OptionType::kInt,
     {},
     0,
     255,
     "GID table index (RoCE: picks the IP version and VLAN); default: chosen by the transport."},
    {"ibverbs", "qps_per_peer", OptionType::kInt, {}, 1, 64, "Queue pairs opened to each peer; writes are spread."},
    {"ibverbs",
     "atomics",
     OptionType::kBool,
     {},
     0,
     0,
     "Signal with RDMA atomic fetch-add (default); false: a send carrying the add, applied by the peer's receiver "
     "thread (host-memory tokens only)."},
};

const char* const kLogLevels[] = {"trace", "debug", "info", "warn", "warning", "error", "off", "none"};
const char* const kLogSubsystems[] = {"init", "boot", "net", "p2p", "coll", "plugin", "proxy", "config", "all"};

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}

std::string upper(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::toupper(c); });
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// Keys and values may hold anything TOML can quote; keep error messages on one printable line.
std::string printable(std::string_view s) {
  constexpr size_t kMaxShown = 200;
  std::string out;
  for (unsigned char c : s.substr(0, kMaxShown)) {
    if (c < 0x20 || c == 0x7f) {
      static const char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  if (s.size() > kMaxShown) out += "...";
  return out;
}

template <class List>
std::string joined(const List& items, std::string_view separator) {
  std::string out;
  for (const auto& item : items) {
    if (!out.empty()) out += separator;
    out += item;
  }
  return out;
}

std::vector<std::string> split(std::string_view text, char separator) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    size_t end = text.find(separator, start);
    parts.emplace_back(text.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start));
    if (end == std::string_view::npos) break;
    start = end + 1;
  }
  return parts;
}

bool isShipped(std::string_view transport) {
  return std::find(kShippedTransports.begin(), kShippedTransports.end(), transport) != kShippedTransports.end();
}

// Plugin names become file names (libweft-transport-<name>.so), so only a safe alphabet is accepted.
bool validTransportName(std::string_view name) {
  if (name.empty() || name.size() > kMaxTransportNameLength) return false;
  if (!std::islower(static_cast<unsigned char>(name.front()))) return false;
  return std::all_of(name.begin(), name.end(),
                     [](unsigned char c) { return std::islower(c) || std::isdigit(c) || c == '_'; });
}

const char* const kTransportNameRule = "lowercase letters, digits and '_', starting with a letter, at most 64 chars";

std::vector<std::string> optionKeysOf(std::string_view transport) {
  std::vector<std::string> keys;
  for (const TransportOptionInfo& option : kKnownOptions) {
    if (option.transport == transport) keys.push_back(option.key);
  }
  return keys;
}

const TransportOptionInfo* findOption(std::string_view transport, std::string_view key) {
  for (const TransportOptionInfo& option : kKnownOptions) {
    if (option.transport == transport && option.key == key) return &option;
  }
  return nullptr;
}

std::string unknownOptionMessage(const std::string& transport, const std::string& key) {
  std::vector<std::string> keys = optionKeysOf(transport);
  std::string known = keys.empty() ? "transport '" + transport + "' takes no options" : "known: " + joined(keys, ", ");
  return "unknown option '" + printable(key) + "' of transport '" + transport + "' (" + known + ")";
}

std::string optionTypeText(const TransportOptionInfo& option) {
  switch (option.type) {
    case OptionType::kString:
      if (option.allowedValues.empty()) return "a non-empty string";
      return "one of \"" + joined(option.allowedValues, "\", \"") + "\"";
    case OptionType::kInt:
      return "an integer in [" + std::to_string(option.minValue) + ", " + std::to_string(option.maxValue) + "]";
    case OptionType::kBool: return "a boolean";
  }
  return "?";
}

// Checks a string value of a string option; the value to store, or nullopt when rejected.
std::optional<std::string> checkStringOption(const TransportOptionInfo& option, const std::string& value) {
  if (value.empty()) return std::nullopt;
  if (!option.allowedValues.empty() &&
      std::find(option.allowedValues.begin(), option.allowedValues.end(), value) == option.allowedValues.end()) {
    return std::nullopt;
  }
  return value;
}

std::optional<std::string> checkIntOption(const TransportOptionInfo& option, int64_t value) {
  if (value < option.minValue || value > option.maxValue) return std::nullopt;
  return std::to_string(value);
}

bool validLogLevel(std::string_view level) {
  std::string l = lower(level);
  return std::any_of(std::begin(kLogLevels), std::end(kLogLevels), [&](const char* n) { return l == n; });
}

bool validLogSubsys(std::string_view subsys) {
  std::string l = lower(subsys);
  if (!l.empty() && l.front() == '^') l.erase(0, 1);
  if (l.empty()) return false;
  for (const std::string& part : split(l, ',')) {
    std::string_view name = trim(part);
    if (std::none_of(std::begin(kLogSubsystems), std::end(kLogSubsystems), [&](const char* n) { return name == n; })) {
      return false;
    }
  }
  return true;
}

const std::string kLogLevelRule = "trace, debug, info, warn, error or off";
const std::string kLogSubsysRule =
    "a comma list of INIT, BOOT, NET, P2P, COLL, PLUGIN, PROXY, CONFIG, ALL, optionally starting with ^";

// ---- the file ----

const char* tomlTypeName(const toml::node& node) {
  switch (node.type()) {
    case toml::node_type::table: return "table";
    case toml::node_type::array: return "array";
    case toml::node_type::string: return "string";
    case toml::node_type::integer: return "integer";
    case toml::node_type::floating_point: return "float";
    case toml::node_type::boolean: return "boolean";
    case toml::node_type::date: return "date";
    case toml::node_type::time: return "time";
    case toml::node_type::date_time: return "date-time";
    case toml::node_type::none: return "nothing";
  }
  return "?";
}

bool knownNcclOperation(const std::string& op) {
  const std::vector<std::string>& known = ncclFallbackOperations();
  return std::find(known.begin(), known.end(), op) != known.end();
}

class FileParser {
 public:
  FileParser(const std::string& source, Config& config) : source_(source), config_(config) {}

  void parseRoot(const toml::table& root) {
    checkKeys(root, "", {"plugins", "transports", "transport", "bootstrap", "proxy", "nccl", "collectives", "log"});
    if (const toml::node* n = root.get("plugins")) parsePlugins(tableOf(*n, "plugins"));
    if (const toml::node* n = root.get("transports")) parseTransports(tableOf(*n, "transports"));
    if (const toml::node* n = root.get("transport")) parseTransportOptions(tableOf(*n, "transport"));
    if (const toml::node* n = root.get("bootstrap")) parseBootstrap(tableOf(*n, "bootstrap"));
    if (const toml::node* n = root.get("proxy")) parseProxy(tableOf(*n, "proxy"));
    if (const toml::node* n = root.get("nccl")) parseNccl(tableOf(*n, "nccl"));
    if (const toml::node* n = root.get("collectives")) parseCollectives(tableOf(*n, "collectives"));
    if (const toml::node* n = root.get("log")) parseLog(tableOf(*n, "log"));
  }

 private:
  [[noreturn]] void fail(const toml::source_region& where, const std::string& what) const {
    throw Error(ErrorCode::kConfigError, source_ + ":" + std::to_string(where.begin.line) + ":" +
                                             std::to_string(where.begin.column) + ": " + what);
  }

  [[noreturn]] void failType(const toml::node& node, const std::string& path, const std::string& wanted) const {
    fail(node.source(), "'" + printable(path) + "' must be " + wanted + ", got " + tomlTypeName(node));
  }

  void checkKeys(const toml::table& table, const std::string& prefix, std::initializer_list<std::string_view> known) {
    for (auto&& [key, value] : table) {
      (void)value;
      if (std::find(known.begin(), known.end(), key.str()) != known.end()) continue;
      fail(key.source(),
           "unknown key '" + printable(prefix + std::string(key.str())) + "' (known: " + joined(known, ", ") + ")");
    }
  }

  const toml::table& tableOf(const toml::node& node, const std::string& path) {
    if (!node.is_table()) failType(node, path, "a table");
    return *node.as_table();
  }

  std::string stringOf(const toml::node& node, const std::string& path) {
    if (!node.is_string()) failType(node, path, "a string");
    return node.as_string()->get();
  }

  int64_t intOf(const toml::node& node, const std::string& path) {
    if (!node.is_integer()) failType(node, path, "an integer");
    return node.as_integer()->get();
  }

  std::vector<std::string> stringListOf(const toml::node& node, const std::string& path) {
    if (!node.is_array()) failType(node, path, "an array of strings");
    std::vector<std::string> out;
    size_t index = 0;
    for (const toml::node& element : *node.as_array()) {
      out.push_back(stringOf(element, path + "[" + std::to_string(index++) + "]"));
    }
    return out;
  }

  void parsePlugins(const toml::table& table) {
    checkKeys(table, "plugins.", {"path"});
    if (const toml::node* n = table.get("path")) {
      std::vector<std::string> dirs = stringListOf(*n, "plugins.path");
      for (size_t i = 0; i < dirs.size(); ++i) {
        if (dirs[i].empty())
          fail(n->as_array()->get(i)->source(), "'plugins.path[" + std::to_string(i) + "]' is empty");
      }
      config_.pluginPath = std::move(dirs);
    }
  }

  void parseTransports(const toml::table& table) {
    checkKeys(table, "transports.", {"same_process", "same_host", "other_host"});
    for (PeerClass c : kAllPeerClasses) {
      const toml::node* n = table.get(peerClassName(c));
      if (n == nullptr) continue;
      std::string path = std::string("transports.") + peerClassName(c);
      std::vector<std::string> list = stringListOf(*n, path);
      for (size_t i = 0; i < list.size(); ++i) {
        const toml::source_region& where = n->as_array()->get(i)->source();
        std::string elementPath = path + "[" + std::to_string(i) + "]";
        if (!validTransportName(list[i])) {
          fail(where,
               "'" + elementPath + "': bad transport name '" + printable(list[i]) + "' (" + kTransportNameRule + ")");
        }
        if (std::find(list.begin(), list.begin() + i, list[i]) != list.begin() + i) {
          fail(where, "'" + elementPath + "': transport '" + list[i] + "' is listed twice");
        }
      }
      config_.transports[c] = std::move(list);
    }
  }

  void parseTransportOptions(const toml::table& table) {
    for (auto&& [nameKey, node] : table) {
      std::string name(nameKey.str());
      std::string path = "transport." + name;
      if (!validTransportName(name)) {
        fail(nameKey.source(),
             "bad transport name '" + printable(name) + "' in [" + printable(path) + "] (" + kTransportNameRule + ")");
      }
      const toml::table& options = tableOf(node, path);
      std::map<std::string, std::string>& out = config_.transportOptions[name];
      for (auto&& [key, value] : options) {
        std::string keyText(key.str());
        std::string keyPath = path + "." + keyText;
        out[keyText] = isShipped(name) ? knownOptionValue(name, key, value, keyPath) : passThroughValue(value, keyPath);
      }
    }
  }

  std::string knownOptionValue(const std::string& transport, const toml::key& key, const toml::node& value,
                               const std::string& path) {
    const TransportOptionInfo* option = findOption(transport, key.str());
    if (option == nullptr) fail(key.source(), unknownOptionMessage(transport, std::string(key.str())));
    std::optional<std::string> checked;
    switch (option->type) {
      case OptionType::kString: checked = checkStringOption(*option, stringOf(value, path)); break;
      case OptionType::kInt: checked = checkIntOption(*option, intOf(value, path)); break;
      case OptionType::kBool:
        if (!value.is_boolean()) failType(value, path, "a boolean");
        checked = value.as_boolean()->get() ? "true" : "false";
        break;
    }
    if (!checked) fail(value.source(), "'" + printable(path) + "' must be " + optionTypeText(*option));
    return *checked;
  }

  // A third-party plugin's options: any scalar, handed over as text for the plugin to interpret.
  std::string passThroughValue(const toml::node& value, const std::string& path) {
    if (value.is_string()) return value.as_string()->get();
    if (value.is_integer()) return std::to_string(value.as_integer()->get());
    if (value.is_boolean()) return value.as_boolean()->get() ? "true" : "false";
    std::ostringstream text;
    if (const auto* f = value.as_floating_point()) text << *f;
    if (const auto* d = value.as_date()) text << *d;
    if (const auto* t = value.as_time()) text << *t;
    if (const auto* dt = value.as_date_time()) text << *dt;
    if (!text.str().empty()) return text.str();
    failType(value, path, "a string, integer, float, boolean, date or time");
  }

  void parseBootstrap(const toml::table& table) {
    checkKeys(table, "bootstrap.", {"timeout_ms", "interface"});
    if (const toml::node* n = table.get("timeout_ms")) {
      int64_t ms = intOf(*n, "bootstrap.timeout_ms");
      if (ms < 1 || ms > kMaxTimeoutMs) {
        fail(n->source(),
             "'bootstrap.timeout_ms' must be in [1, " + std::to_string(kMaxTimeoutMs) + "], got " + std::to_string(ms));
      }
      config_.bootstrapTimeout = std::chrono::milliseconds(ms);
    }
    if (const toml::node* n = table.get("interface")) {
      std::string name = stringOf(*n, "bootstrap.interface");
      if (name.empty()) fail(n->source(), "'bootstrap.interface' is empty");
      config_.bootstrapInterface = std::move(name);
    }
  }

  void parseProxy(const toml::table& table) {
    checkKeys(table, "proxy.", {"threads", "pin_numa", "direct_max_bytes"});
    if (const toml::node* n = table.get("threads")) {
      int64_t threads = intOf(*n, "proxy.threads");
      if (threads < 1 || threads > kMaxProxyThreads) {
        fail(n->source(), "'proxy.threads' must be in [1, " + std::to_string(kMaxProxyThreads) + "], got " +
                              std::to_string(threads));
      }
      config_.proxyThreads = static_cast<int>(threads);
    }
    if (const toml::node* n = table.get("pin_numa")) {
      const auto* b = n->as_boolean();
      if (b == nullptr) failType(*n, "proxy.pin_numa", "a boolean");
      config_.proxyPinNuma = b->get();
    }
    if (const toml::node* n = table.get("direct_max_bytes")) {
      const int64_t bytes = intOf(*n, "proxy.direct_max_bytes");
      if (bytes < 0 || static_cast<uint64_t>(bytes) > kMaxPortDirectBytes) {
        fail(n->source(), "'proxy.direct_max_bytes' must be in [0, " + std::to_string(kMaxPortDirectBytes) + "], got " +
                              std::to_string(bytes));
      }
      config_.proxyDirectMaxBytes = static_cast<uint64_t>(bytes);
    }
  }

  void parseNccl(const toml::table& table) {
    checkKeys(table, "nccl.", {"fallback_library", "force_fallback"});
    if (const toml::node* n = table.get("fallback_library")) {
      std::string path = stringOf(*n, "nccl.fallback_library");
      if (path.empty()) fail(n->source(), "'nccl.fallback_library' is empty");
      config_.ncclFallbackLibrary = std::move(path);
    }
    if (const toml::node* n = table.get("force_fallback")) {
      std::vector<std::string> ops = stringListOf(*n, "nccl.force_fallback");
      for (const std::string& op : ops) {
        if (!knownNcclOperation(op)) {
          fail(n->source(), "'nccl.force_fallback' names unknown operation '" + printable(op) +
                                "' (known: " + joined(ncclFallbackOperations(), ", ") + ")");
        }
      }
      config_.ncclForceFallback = std::move(ops);
    }
  }

  void parseCollectives(const toml::table& table) {
    checkKeys(table, "collectives.", {"allreduce"});
    const toml::node* n = table.get("allreduce");
    if (n == nullptr) return;
    if (!n->is_array_of_tables())
      failType(*n, "collectives.allreduce", "an array of tables ([[collectives.allreduce]])");
    std::vector<AllReduceRule> rules;
    for (const toml::node& element : *n->as_array()) {
      const std::string path = "collectives.allreduce[" + std::to_string(rules.size()) + "]";
      const toml::table& t = *element.as_table();
      checkKeys(t, path + ".", {"ranks", "ranks_per_gpu", "max_bytes", "algorithm"});
      AllReduceRule rule;
      if (const toml::node* v = t.get("ranks")) {
        const int64_t ranks = intOf(*v, path + ".ranks");
        if (ranks < 0 || ranks > kIntMax) fail(v->source(), "'" + path + ".ranks' must be in [0, 2^31), 0 for any");
        rule.ranks = static_cast<int>(ranks);
      }
      if (const toml::node* v = t.get("ranks_per_gpu")) {
        const int64_t most = intOf(*v, path + ".ranks_per_gpu");
        if (most < 0 || most > kIntMax) {
          fail(v->source(), "'" + path + ".ranks_per_gpu' must be in [0, 2^31), 0 for any placement");
        }
        rule.ranksPerGpu = static_cast<int>(most);
      }
      if (const toml::node* v = t.get("max_bytes")) {
        const int64_t bytes = intOf(*v, path + ".max_bytes");
        if (bytes < 0) fail(v->source(), "'" + path + ".max_bytes' must be >= 0 (0: any size)");
        rule.maxBytes = static_cast<uint64_t>(bytes);
      }
      const toml::node* a = t.get("algorithm");
      if (a == nullptr) fail(element.source(), "'" + path + "' has no 'algorithm'");
      rule.algorithm = stringOf(*a, path + ".algorithm");
      const auto& known = allReduceRuleAlgorithms();
      if (std::find(known.begin(), known.end(), rule.algorithm) == known.end()) {
        std::string names;
        for (const std::string& k : known) names += (names.empty() ? "\"" : ", \"") + k + "\"";
        fail(a->source(),
             "'" + path + ".algorithm' must be one of " + names + ", got '" + printable(rule.algorithm) + "'");
      }
      rules.push_back(std::move(rule));
    }
    config_.allReduceRules = std::move(rules);
  }

  void parseLog(const toml::table& table) {
    checkKeys(table, "log.", {"level", "subsys"});
    if (const toml::node* n = table.get("level")) {
      std::string level = stringOf(*n, "log.level");
      if (!validLogLevel(level))
        fail(n->source(), "'log.level' must be " + kLogLevelRule + ", got '" + printable(level) + "'");
      config_.logLevel = std::move(level);
    }
    if (const toml::node* n = table.get("subsys")) {
      std::string subsys = stringOf(*n, "log.subsys");
      if (!validLogSubsys(subsys)) {
        fail(n->source(), "'log.subsys' must be " + kLogSubsysRule + ", got '" + printable(subsys) + "'");
      }
      config_.logSubsys = std::move(subsys);
    }
  }

  const std::string& source_;
  Config& config_;
};

// toml++ bounds the nesting of arrays and inline tables but not of dotted keys, and recurses once per level when it
// builds and frees the tree: "k.k.k...= 1" with ~50000 dots overflows an 8 MiB stack. A dotted key or table header
// lies on one line, so capping the dots per line (outside strings and comments) caps the depth before toml++ runs.
constexpr int kMaxDotsPerLine = 64;

// Also refuses non-ASCII text outside strings and comments (see below).
void checkKeyDepth(std::string_view text, const std::string& source) {
  enum class State { kNormal, kComment, kBasic, kLiteral, kMultiBasic, kMultiLiteral };
  State state = State::kNormal;
  int line = 1, dots = 0;
  size_t lineStart = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '\n') {
      ++line;
      dots = 0;
      lineStart = i + 1;
      if (state != State::kMultiBasic && state != State::kMultiLiteral) state = State::kNormal;
      continue;
    }
    const auto byte = static_cast<unsigned char>(c);
    if ((byte < 0x20 && c != '\t' && c != '\r') || byte == 0x7f) {
      // TOML allows no control character but tab anywhere (newlines aside); toml++ 3.3 trips an internal
      // assertion on some (e.g. "[\x03", found by config_fuzz), so they never reach it.
      throw Error(ErrorCode::kConfigError, source + ":" + std::to_string(line) + ":" +
                                               std::to_string(i - lineStart + 1) + ": control character " +
                                               std::to_string(byte) + " is not allowed in TOML");
    }
    std::string_view ahead = text.substr(i, 3);
    switch (state) {
      case State::kNormal:
        if (c == '#') {
          state = State::kComment;
        } else if (ahead == "\"\"\"") {
          state = State::kMultiBasic;
          i += 2;
        } else if (ahead == "'''") {
          state = State::kMultiLiteral;
          i += 2;
        } else if (c == '"') {
          state = State::kBasic;
        } else if (c == '\'') {
          state = State::kLiteral;
        } else if (c == '.' && ++dots > kMaxDotsPerLine) {
          throw Error(ErrorCode::kConfigError,
                      source + ":" + std::to_string(line) + ":" + std::to_string(i - lineStart + 1) + ": more than " +
                          std::to_string(kMaxDotsPerLine) + " '.' on one line: keys nest too deep");
        } else if (static_cast<unsigned char>(c) >= 0x80) {
          // TOML allows only ASCII outside strings and comments. Refusing it here also keeps such text away from
          // toml++ 3.3's whitespace classifier, which reaches __builtin_unreachable for e.g. U+0139 (found by
          // config_fuzz), i.e. undefined behaviour.
          throw Error(ErrorCode::kConfigError, source + ":" + std::to_string(line) + ":" +
                                                   std::to_string(i - lineStart + 1) +
                                                   ": a non-ASCII character outside a string or comment");
        }
        break;
      case State::kComment: break;
      case State::kBasic:
        if (c == '\\' && i + 1 < text.size() && text[i + 1] != '\n') {
          ++i;
        } else if (c == '"') {
          state = State::kNormal;
        }
        break;
      case State::kLiteral:
        if (c == '\'') state = State::kNormal;
        break;
      case State::kMultiBasic:
        if (c == '\\' && i + 1 < text.size() && text[i + 1] != '\n') {
          ++i;  // an escaped character, which may be a quote
        } else if (ahead == "\"\"\"") {
          state = State::kNormal;
          i += 2;
        }
        break;
      case State::kMultiLiteral:
        if (ahead == "'''") {
          state = State::kNormal;
          i += 2;
        }
        break;
    }
  }
}

// ---- the environment ----

[[noreturn]] void failVariable(const std::string& name, const std::string& value, const std::string& what) {
  throw Error(ErrorCode::kConfigError, name + "='" + printable(value) + "': " + what);
}

std::vector<std::string> transportListFromVariable(const std::string& name, const std::string& value) {
  std::vector<std::string> list;
  for (const std::string& part : split(value, ',')) {
    std::string transport(trim(part));
    if (transport.empty()) failVariable(name, value, "empty entry in the comma list");
    if (!validTransportName(transport)) {
      failVariable(name, value, "bad transport name '" + printable(transport) + "' (" + kTransportNameRule + ")");
    }
    if (std::find(list.begin(), list.end(), transport) != list.end()) {
      failVariable(name, value, "transport '" + transport + "' is listed twice");
    }
    list.push_back(std::move(transport));
  }
  return list;
}

// WEFT_TRANSPORT_<NAME>_<KEY>: both parts may hold '_' (cuda_ipc, handle_type), so the longest transport name this
// config knows of that fits wins; an unknown name is taken to end at the first '_'.
std::pair<std::string, std::string> splitTransportVariable(const Config& config, const std::string& variable) {
  std::string rest = variable.substr(kTransportOptionPrefix.size());
  std::vector<std::string> candidates(kShippedTransports.begin(), kShippedTransports.end());
  for (const auto& [name, options] : config.transportOptions) candidates.push_back(name);
  for (const auto& [peerClass, list] : config.transports) candidates.insert(candidates.end(), list.begin(), list.end());
  size_t bestLength = 0;
  for (const std::string& candidate : candidates) {
    std::string prefix = upper(candidate) + "_";
    if (candidate.size() > bestLength && rest.size() > prefix.size() && rest.compare(0, prefix.size(), prefix) == 0) {
      bestLength = candidate.size();
    }
  }
  if (bestLength == 0) bestLength = rest.find('_');
  return {lower(rest.substr(0, bestLength)), lower(rest.substr(bestLength + 1))};
}

void applyTransportVariable(Config& config, const std::string& variable, const std::string& value) {
  auto [transport, key] = splitTransportVariable(config, variable);
  if (!validTransportName(transport)) {
    failVariable(variable, value, "bad transport name '" + printable(transport) + "' (" + kTransportNameRule + ")");
  }
  if (!isShipped(transport)) {
    config.transportOptions[transport][key] = value;
    return;
  }
  const TransportOptionInfo* option = findOption(transport, key);
  if (option == nullptr) failVariable(variable, value, unknownOptionMessage(transport, key));
  std::optional<std::string> checked;
  switch (option->type) {
    case OptionType::kString: checked = checkStringOption(*option, value); break;
    case OptionType::kInt:
      if (std::optional<int64_t> parsed = parseParamInt(value)) checked = checkIntOption(*option, *parsed);
      break;
    case OptionType::kBool:
      if (std::optional<bool> parsed = parseParamBool(value)) checked = *parsed ? "true" : "false";
      break;
  }
  if (!checked) {
    std::string wanted =
        option->type == OptionType::kBool ? "a boolean (1/0, true/false, yes/no, on/off)" : optionTypeText(*option);
    failVariable(variable, value, "option '" + key + "' of transport '" + transport + "' must be " + wanted);
  }
  config.transportOptions[transport][key] = *checked;
}

// Reads the whole of a small regular file; errors name the file and errno's text.
std::string readConfigFile(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    throw Error(ErrorCode::kConfigError, path + ": cannot open config file: " + std::strerror(errno));
  }
  struct FdCloser {
    int fd;
    ~FdCloser() { ::close(fd); }
  } closer{fd};
  struct stat info {};
  if (::fstat(fd, &info) != 0) {
    throw Error(ErrorCode::kConfigError, path + ": cannot stat config file: " + std::strerror(errno));
  }
  if (!S_ISREG(info.st_mode)) throw Error(ErrorCode::kConfigError, path + ": config file is not a regular file");
  if (info.st_size > kMaxConfigBytes) {
    throw Error(ErrorCode::kConfigError, path + ": config file is " + std::to_string(info.st_size) +
                                             " bytes, more than the limit of " + std::to_string(kMaxConfigBytes));
  }
  std::string text;
  char buffer[8192];
  while (true) {
    ssize_t got = ::read(fd, buffer, sizeof(buffer));
    if (got < 0) {
      if (errno == EINTR) continue;
      throw Error(ErrorCode::kConfigError, path + ": cannot read config file: " + std::strerror(errno));
    }
    if (got == 0) break;
    text.append(buffer, static_cast<size_t>(got));
    if (static_cast<int64_t>(text.size()) > kMaxConfigBytes) {
      throw Error(ErrorCode::kConfigError, path + ": config file grew past the limit of " +
                                               std::to_string(kMaxConfigBytes) + " bytes while being read");
    }
  }
  return text;
}

}  // namespace

const char* peerClassName(PeerClass peerClass) {
  switch (peerClass) {
    case PeerClass::kSameProcess: return "same_process";
    case PeerClass::kSameHost: return "same_host";
    case PeerClass::kOtherHost: return "other_host";
  }
  return "unknown";
}

std::optional<PeerClass> peerClassFromName(std::string_view name) {
  for (PeerClass c : kAllPeerClasses) {
    if (name == peerClassName(c)) return c;
  }
  return std::nullopt;
}

const std::vector<std::string>& shippedTransports() { return kShippedTransports; }

const std::vector<TransportOptionInfo>& knownTransportOptions() { return kKnownOptions; }

Config Config::defaults() {
  // The defaults live in the parameter table (core/params.cc), so `weft-info --params` shows the real ones.
  auto declaredDefault = [](const char* name) -> const std::string& {
    const ParamInfo* info = findParam(name);
    if (info == nullptr) throw Error(ErrorCode::kInternalError, std::string(name) + " is missing from the param table");
    return info->defaultValue;
  };
  Config config;
  config.source = kDefaultsSource;
  for (PeerClass c : kAllPeerClasses) {
    std::string name = "WEFT_TRANSPORTS_" + upper(peerClassName(c));
    config.transports[c] = transportListFromVariable(name, declaredDefault(name.c_str()));
  }
  std::optional<int64_t> ms = parseParamInt(declaredDefault("WEFT_BOOTSTRAP_TIMEOUT_MS"));
  if (!ms || *ms < 1) throw Error(ErrorCode::kInternalError, "bad declared default of WEFT_BOOTSTRAP_TIMEOUT_MS");
  config.bootstrapTimeout = std::chrono::milliseconds(*ms);
  return config;
}

Config Config::parse(std::string_view tomlText, const std::string& sourceName) {
  Config config = defaults();
  config.source = sourceName;
  checkKeyDepth(tomlText, sourceName);
  toml::table root;
  try {
    root = toml::parse(tomlText, sourceName);
  } catch (const toml::parse_error& e) {
    throw Error(ErrorCode::kConfigError, sourceName + ":" + std::to_string(e.source().begin.line) + ":" +
                                             std::to_string(e.source().begin.column) +
                                             ": invalid TOML: " + printable(e.description()));
  } catch (const detail::TomlInvariantBroken&) {
    throw Error(ErrorCode::kConfigError, sourceName + ": invalid TOML (the parser rejected its structure)");
  }
  FileParser(sourceName, config).parseRoot(root);
  return config;
}

const std::vector<std::string>& allReduceRuleAlgorithms() {
  static const std::vector<std::string> kAlgorithms = {"oneshot_ll", "scatter_gather", "twoshot_ll", "port"};
  return kAlgorithms;
}

const std::vector<std::string>& ncclFallbackOperations() {
  static const std::vector<std::string> kOperations = {"allreduce", "allgather", "reducescatter", "broadcast", "reduce",
                                                       "alltoall",  "gather",    "scatter",       "sendrecv",  "all"};
  return kOperations;
}

Config Config::fromFile(const std::string& path) {
  Config config = parse(readConfigFile(path), path);
  logInfo(LogSubsys::kConfig, "config read from {}", path);
  return config;
}

Config Config::load() { return load(processEnvironment()); }

Config Config::load(const Environment& env) {
  Config config;
  if (std::optional<std::string> path = paramString("WEFT_CONFIG", env)) {
    struct stat info {};
    if (::stat(path->c_str(), &info) != 0) {
      throw Error(ErrorCode::kConfigError,
                  "WEFT_CONFIG='" + printable(*path) + "': cannot use config file: " + std::strerror(errno));
    }
    config = fromFile(*path);
  } else if (::access(kLocalConfigFile, F_OK) == 0) {
    config = fromFile(kLocalConfigFile);
  } else {
    config = defaults();
    logDebug(LogSubsys::kConfig, "no WEFT_CONFIG and no ./{}: using the built-in defaults", kLocalConfigFile);
  }
  config.applyEnvironment(env);
  return config;
}

void Config::applyEnvironment() { applyEnvironment(processEnvironment()); }

void Config::applyEnvironment(const Environment& env) {
  if (std::optional<std::string> value = paramString("WEFT_PLUGIN_PATH", env)) {
    std::vector<std::string> dirs;
    for (std::string& dir : split(*value, ':')) {
      if (!dir.empty()) dirs.push_back(std::move(dir));
    }
    pluginPath.insert(pluginPath.begin(), dirs.begin(), dirs.end());
  }
  for (PeerClass c : kAllPeerClasses) {
    std::string name = "WEFT_TRANSPORTS_" + upper(peerClassName(c));
    if (std::optional<std::string> value = paramString(name, env))
      transports[c] = transportListFromVariable(name, *value);
  }
  if (std::optional<std::string> value = paramString("WEFT_BOOTSTRAP_TIMEOUT_MS", env)) {
    std::optional<int64_t> ms = parseParamInt(*value);
    if (!ms || *ms < 1 || *ms > kMaxTimeoutMs) {
      failVariable("WEFT_BOOTSTRAP_TIMEOUT_MS", *value,
                   "must be an integer in [1, " + std::to_string(kMaxTimeoutMs) + "] (milliseconds)");
    }
    bootstrapTimeout = std::chrono::milliseconds(*ms);
  }
  if (std::optional<std::string> value = paramString("WEFT_BOOTSTRAP_INTERFACE", env)) bootstrapInterface = *value;
  if (std::optional<std::string> value = paramString("WEFT_PROXY_THREADS", env)) {
    std::optional<int64_t> threads = parseParamInt(*value);
    if (!threads || *threads < 1 || *threads > kMaxProxyThreads) {
      failVariable("WEFT_PROXY_THREADS", *value, "must be an integer in [1, " + std::to_string(kMaxProxyThreads) + "]");
    }
    proxyThreads = static_cast<int>(*threads);
  }
  if (std::optional<std::string> value = paramString("WEFT_PROXY_PIN_NUMA", env)) {
    std::optional<bool> pin = parseParamBool(*value);
    if (!pin) failVariable("WEFT_PROXY_PIN_NUMA", *value, "must be a boolean (1/0, true/false, yes/no, on/off)");
    proxyPinNuma = *pin;
  }
  if (std::optional<std::string> value = paramString("WEFT_PROXY_DIRECT_MAX_BYTES", env)) {
    std::optional<int64_t> bytes = parseParamInt(*value);
    if (!bytes || *bytes < 0 || static_cast<uint64_t>(*bytes) > kMaxPortDirectBytes) {
      failVariable("WEFT_PROXY_DIRECT_MAX_BYTES", *value,
                   "must be an integer in [0, " + std::to_string(kMaxPortDirectBytes) + "]");
    }
    proxyDirectMaxBytes = static_cast<uint64_t>(*bytes);
  }
  if (std::optional<std::string> value = paramString("WEFT_NCCL_FALLBACK", env)) ncclFallbackLibrary = *value;
  if (std::optional<std::string> value = paramString("WEFT_NCCL_FORCE_FALLBACK", env)) {
    std::vector<std::string> ops;
    for (std::string& op : split(*value, ',')) {
      if (op.empty()) continue;
      if (!knownNcclOperation(op)) {
        failVariable("WEFT_NCCL_FORCE_FALLBACK", *value,
                     "names unknown operation '" + op + "' (known: " + joined(ncclFallbackOperations(), ", ") + ")");
      }
      ops.push_back(std::move(op));
    }
    ncclForceFallback = std::move(ops);
  }
  if (std::optional<std::string> value = paramString("WEFT_LOG_LEVEL", env)) {
    if (!validLogLevel(*value)) failVariable("WEFT_LOG_LEVEL", *value, "must be " + kLogLevelRule);
    logLevel = *value;
  }
  if (std::optional<std::string> value = paramString("WEFT_LOG_SUBSYS", env)) {
    if (!validLogSubsys(*value)) failVariable("WEFT_LOG_SUBSYS", *value, "must be " + kLogSubsysRule);
    logSubsys = *value;
  }
  for (const auto& [name, raw] : env) {
    if (name.compare(0, kTransportOptionPrefix.size(), kTransportOptionPrefix) != 0) continue;
    if (findParam(name) == nullptr) {
      failVariable(name, raw, "expected WEFT_TRANSPORT_<NAME>_<KEY>, e.g. WEFT_TRANSPORT_LIBFABRIC_PROVIDER");
    }
    if (std::optional<std::string> value = paramString(name, env)) applyTransportVariable(*this, name, *value);
  }
}

const std::vector<std::string>& Config::transportsFor(PeerClass peerClass) const {
  static const std::vector<std::string> kNone;
  auto it = transports.find(peerClass);
  return it == transports.end() ? kNone : it->second;
}

std::map<std::string, std::string> Config::optionsFor(const std::string& transport) const {
  auto it = transportOptions.find(transport);
  return it == transportOptions.end() ? std::map<std::string, std::string>{} : it->second;
}

}  // namespace weft
