#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <weft/error.hpp>
#include <weft/params.hpp>

extern char** environ;  // NOLINT: POSIX declares it nowhere in a header under C++

namespace weft {
namespace {

constexpr std::string_view kTransportOptionPrefix = "WEFT_TRANSPORT_";
constexpr std::string_view kTypeInt = "int";
constexpr std::string_view kTypeBool = "bool";
constexpr std::string_view kTypePerKey = "typed per key";

// The one table. Config::defaults() reads its defaults from here, so the documented default and the real one agree.
const std::vector<ParamInfo> kParams = {
    {"WEFT_CONFIG", "string", "",
     "Path of the TOML config file. When set, the file must exist; when unset, ./weft.toml is read if present, else "
     "the built-in defaults apply."},
    {"WEFT_PLUGIN_PATH", "path-list", "",
     "Colon-separated directories searched for transport plugins (libweft-transport-<name>.so), before [plugins] path "
     "and the build and install directories."},
    {"WEFT_LOG_LEVEL", "string", "warn", "Log level: trace, debug, info, warn, error or off. Overrides [log] level."},
    {"WEFT_LOG_SUBSYS", "string", "ALL",
     "Comma-separated subsystems to log (INIT, BOOT, NET, P2P, COLL, PLUGIN, PROXY, CONFIG, ALL); a leading ^ "
     "excludes the listed ones instead. Overrides [log] subsys."},
    {"WEFT_RANK", "int", "", "This process's rank in the job (0-based), when not taken from the launcher."},
    {"WEFT_SIZE", "int", "", "Number of ranks in the job, when not taken from the launcher."},
    {"WEFT_LOCAL_RANK", "int", "",
     "This process's rank among the ranks of its host, when not taken from the launcher."},
    {"WEFT_UNIQUE_ID", "string", "",
     "Serialized unique id of the job (root address and job secret), as printed by the root; lets ranks join without "
     "passing the id in code."},
    {"WEFT_ROOT_ADDR", "string", "",
     "host:port of the bootstrap root, for launcher-driven startup (the root listens there, the others connect)."},
    {"WEFT_BOOTSTRAP_TIMEOUT_MS", "int", "30000",
     "Milliseconds a bootstrap step (connect, exchange, barrier) waits before failing with a timeout naming the rank "
     "that did not answer. Overrides [bootstrap] timeout_ms."},
    {"WEFT_BOOTSTRAP_SECRET", "string", "",
     "Per-job secret every bootstrap connection must prove, for launcher-driven startup (a unique id carries its "
     "own)."},
    {"WEFT_BOOTSTRAP_INTERFACE", "string", "",
     "Network interface the bootstrap listens and connects on (e.g. eth0). Overrides [bootstrap] interface; default: "
     "the interface of the default route."},
    {"WEFT_TRANSPORTS_SAME_PROCESS", "list", "cuda_ipc,host",
     "Comma-separated transports to try, in order, between ranks of one process. Overrides [transports] "
     "same_process."},
    {"WEFT_TRANSPORTS_SAME_HOST", "list", "cuda_ipc,host",
     "Comma-separated transports to try, in order, between ranks of one host. Overrides [transports] same_host."},
    {"WEFT_TRANSPORTS_OTHER_HOST", "list", "ibverbs,libfabric",
     "Comma-separated transports to try, in order, between ranks of different hosts. Overrides [transports] "
     "other_host."},
    {"WEFT_TRANSPORT_<NAME>_<KEY>", std::string(kTypePerKey), "",
     "Sets option <key> of transport <name> (both upper-cased), e.g. WEFT_TRANSPORT_LIBFABRIC_PROVIDER=tcp; overrides "
     "[transport.<name>] <key> and is checked against the option's type for the transports weft ships."},
    {"WEFT_HOST_ID", "string", "",
     "Overrides the host identity used to tell same-host peers from other-host peers (default: derived from the "
     "hostname, boot id and network namespace); ranks with equal values are treated as one host."},
    {"WEFT_PROXY_THREADS", "int", "1",
     "Proxy threads of each ProxyService made from the config (each with its own FIFO; connections are spread over "
     "them). Overrides [proxy] threads."},
    {"WEFT_PROXY_PIN_NUMA", "bool", "1",
     "Pin proxy threads to the GPU's NUMA node (through hwloc; a GPU with no NUMA node leaves them unpinned). "
     "Overrides [proxy] pin_numa."},
    {"WEFT_PROXY_DIRECT_MAX_BYTES", "int", "4096",
     "Largest PortChannel put the calling thread does itself (loads and stores into the peer's mapped memory, over "
     "cuda_ipc and host) instead of the proxy; 0 sends every request through the proxy. Overrides [proxy] "
     "direct_max_bytes."},
    {"WEFT_NCCL_FALLBACK", "string", "",
     "Path (or soname) of a real NCCL/RCCL that libweft_nccl.so forwards to what weft does not run natively. "
     "Overrides [nccl] fallback_library."},
    {"WEFT_NCCL_FORCE_FALLBACK", "list", "",
     "Comma-separated operations libweft_nccl.so always sends to the fallback library (allreduce, allgather, "
     "reducescatter, broadcast, reduce, alltoall, gather, scatter, sendrecv, all). Overrides [nccl] force_fallback."},
    {"WEFT_ALLREDUCE_ALGO", "string", "auto",
     "Algorithm of CollectiveComm::allReduce when the code leaves CollectiveOptions::allReduceAlgorithm at auto: "
     "auto (one-shot LL16 for small messages, two-shot LL16 for mid-sized ones among more than two ranks, "
     "scatter-gather above), oneshot_ll, twoshot_ll, scatter_gather or port (copy engines move the bytes). Must be the "
     "same on every rank."},
    {"WEFT_COLL_AUTO_REGISTER", "bool", "1",
     "Collectives register the allocations they run on with the peers on first use, so that later operations on them "
     "run zero-copy (CollectiveOptions::autoRegister). 0 on any rank turns it off for the communicator."},
    {"WEFT_COLL_REGISTER_WAIT_MS", "int", "20",
     "Most milliseconds a collective that first touches an allocation waits for the peers to take it in (they do in "
     "the same operation), so that it already runs zero-copy; once per allocation. 0: no wait, it goes zero-copy a few "
     "operations later. At most 60000."},
    {"WEFT_COLL_PORT_BLOCKS", "int", "0",
     "Blocks of the port allreduce's kernel (1..256), which only reduces (the copy engines move the bytes); 0: 8."},
    {"WEFT_COLL_GPU_BLOCKS", "int", "0",
     "Blocks of each staged collective kernel (1..256) when the code leaves CollectiveOptions::gpuBlocks at 0; 0 sizes "
     "the grid from the GPU (half its resident blocks, divided among the ranks sharing it)."},
    {"WEFT_COLL_ONESHOT_BLOCKS", "int", "0",
     "Most blocks of an LL16 collective kernel (1..256); 0: 256. Each kernel is held further to what the GPU holds "
     "resident of it beside the other ranks sharing it. The grid grows with the message up to this."},
    {"WEFT_COLL_LL_PACKETS_PER_THREAD", "int", "0",
     "Packets per thread the unrolled LL16 collective kernels' grids aim for (1..16); 0: 2. Messages with at most one "
     "packet per thread of the small kernels' largest grid run those instead."},
    {"WEFT_WAIT_TIMEOUT_MS", "int", "30000",
     "Budget of every device and host wait (semaphores, FIFO, packets) in milliseconds; a wait that runs out records "
     "who waited for what and stops with an error instead of hanging."},
};

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}

// True when `name` is WEFT_TRANSPORT_<NAME>_<KEY> with both parts non-empty.
bool matchesTransportOptionPattern(std::string_view name) {
  if (name.substr(0, kTransportOptionPrefix.size()) != kTransportOptionPrefix) return false;
  std::string_view rest = name.substr(kTransportOptionPrefix.size());
  size_t underscore = rest.find('_');
  return underscore != std::string_view::npos && underscore > 0 && underscore + 1 < rest.size();
}

const ParamInfo& declared(std::string_view name) {
  const ParamInfo* info = findParam(name);
  if (info == nullptr) {
    throw Error(ErrorCode::kInvalidArgument,
                "environment parameter '" + std::string(name) + "' is not declared in core/params.cc");
  }
  return *info;
}

void requireType(const ParamInfo& info, std::string_view name, std::string_view wanted) {
  if (info.type != wanted && info.type != kTypePerKey) {
    throw Error(ErrorCode::kInvalidArgument, "environment parameter '" + std::string(name) + "' is declared as " +
                                                 info.type + ", not " + std::string(wanted));
  }
}

// The raw text the getters parse: the variable's value, else the declared default, else nullopt.
std::optional<std::string> valueOrDefault(std::string_view name, const ParamInfo& info, const Environment* env) {
  std::optional<std::string> value = env != nullptr ? paramString(name, *env) : paramString(name);
  if (value) return value;
  if (!info.defaultValue.empty()) return info.defaultValue;
  return std::nullopt;
}

std::optional<int64_t> intIfSet(std::string_view name, const Environment* env) {
  const ParamInfo& info = declared(name);
  requireType(info, name, kTypeInt);
  std::optional<std::string> text = valueOrDefault(name, info, env);
  if (!text) return std::nullopt;
  std::optional<int64_t> parsed = parseParamInt(*text);
  if (!parsed) {
    throw Error(ErrorCode::kConfigError,
                std::string(name) + "='" + *text + "': not a decimal integer in the int64 range");
  }
  return parsed;
}

int64_t intRequired(std::string_view name, const Environment* env) {
  std::optional<int64_t> value = intIfSet(name, env);
  if (!value) throw Error(ErrorCode::kConfigError, std::string(name) + " is not set and has no default");
  return *value;
}

bool boolRequired(std::string_view name, const Environment* env) {
  const ParamInfo& info = declared(name);
  requireType(info, name, kTypeBool);
  std::optional<std::string> text = valueOrDefault(name, info, env);
  if (!text) throw Error(ErrorCode::kConfigError, std::string(name) + " is not set and has no default");
  std::optional<bool> parsed = parseParamBool(*text);
  if (!parsed) {
    throw Error(ErrorCode::kConfigError,
                std::string(name) + "='" + *text + "': not a boolean (1/0, true/false, yes/no, on/off)");
  }
  return *parsed;
}

}  // namespace

const std::vector<ParamInfo>& allParams() { return kParams; }

const ParamInfo* findParam(std::string_view name) {
  const ParamInfo* pattern = nullptr;
  for (const ParamInfo& info : kParams) {
    if (info.name == name) return &info;
    if (info.type == kTypePerKey) pattern = &info;
  }
  // WEFT_TRANSPORTS_* never reaches here as a pattern match: exact entries won above, and the prefix needs "T_".
  if (pattern != nullptr && matchesTransportOptionPattern(name)) return pattern;
  return nullptr;
}

Environment processEnvironment() {
  Environment env;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    std::string_view text(*entry);
    size_t eq = text.find('=');
    if (eq == std::string_view::npos) continue;
    env.emplace(std::string(text.substr(0, eq)), std::string(text.substr(eq + 1)));
  }
  return env;
}

std::optional<std::string> paramString(std::string_view name) {
  declared(name);
  const char* value = std::getenv(std::string(name).c_str());
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

std::optional<std::string> paramString(std::string_view name, const Environment& env) {
  declared(name);
  auto it = env.find(std::string(name));
  if (it == env.end() || it->second.empty()) return std::nullopt;
  return it->second;
}

int64_t paramInt(std::string_view name) { return intRequired(name, nullptr); }
int64_t paramInt(std::string_view name, const Environment& env) { return intRequired(name, &env); }
std::optional<int64_t> paramIntIfSet(std::string_view name) { return intIfSet(name, nullptr); }
std::optional<int64_t> paramIntIfSet(std::string_view name, const Environment& env) { return intIfSet(name, &env); }
bool paramBool(std::string_view name) { return boolRequired(name, nullptr); }
bool paramBool(std::string_view name, const Environment& env) { return boolRequired(name, &env); }

std::optional<int64_t> parseParamInt(std::string_view text) {
  if (text.empty()) return std::nullopt;
  std::string_view digits = text;
  if (digits.front() == '+') digits.remove_prefix(1);  // from_chars takes '-' but not '+'
  if (digits.empty() || digits.front() == '+' || (digits.front() == '-' && text.front() == '+')) return std::nullopt;
  int64_t value = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value, 10);
  if (ec != std::errc() || end != digits.data() + digits.size()) return std::nullopt;
  return value;
}

std::optional<bool> parseParamBool(std::string_view text) {
  std::string l = lower(text);
  if (l == "1" || l == "true" || l == "yes" || l == "on") return true;
  if (l == "0" || l == "false" || l == "no" || l == "off") return false;
  return std::nullopt;
}

}  // namespace weft
