#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <weft/config.hpp>
#include <weft/error.hpp>

namespace weft {
namespace {

namespace fs = std::filesystem;

const std::string kExampleFile = WEFT_SOURCE_DIR "/docs/weft.example.toml";

std::string readText(const std::string& path) {
  std::ifstream file(path);
  EXPECT_TRUE(file) << path;
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

// A fresh directory, removed with its contents at scope end.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "weft-config-test-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  std::string file(const std::string& name, const std::string& text) const {
    std::string path = (path_ / name).string();
    std::ofstream(path) << text;
    return path;
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// Changes the working directory for one scope.
class ScopedChdir {
 public:
  explicit ScopedChdir(const fs::path& dir) : old_(fs::current_path()) { fs::current_path(dir); }
  ~ScopedChdir() { fs::current_path(old_); }

 private:
  fs::path old_;
};

// Runs f, which must throw Error(kConfigError); returns the message.
template <class F>
std::string configError(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kConfigError) << e.what();
    return e.message();
  }
  ADD_FAILURE() << "no weft::Error thrown";
  return {};
}

std::string parseError(const std::string& toml) {
  return configError([&] { Config::parse(toml, "weft.toml"); });
}

using Strings = std::vector<std::string>;

TEST(ConfigTest, DefaultsWorkWithNoFile) {
  Config c = Config::defaults();
  EXPECT_EQ(c.source, "built-in defaults");
  EXPECT_EQ(c.transportsFor(PeerClass::kSameProcess), (Strings{"cuda_ipc", "host"}));
  EXPECT_EQ(c.transportsFor(PeerClass::kSameHost), (Strings{"cuda_ipc", "host"}));
  EXPECT_EQ(c.transportsFor(PeerClass::kOtherHost), (Strings{"ibverbs", "libfabric"}));
  EXPECT_EQ(c.bootstrapTimeout, std::chrono::milliseconds(30000));
  EXPECT_TRUE(c.pluginPath.empty());
  EXPECT_TRUE(c.bootstrapInterface.empty());
  EXPECT_TRUE(c.optionsFor("ibverbs").empty());
  EXPECT_TRUE(c.logLevel.empty());
  // An empty file is the defaults too.
  Config empty = Config::parse("", "empty.toml");
  EXPECT_EQ(empty.transports, c.transports);
  EXPECT_EQ(empty.source, "empty.toml");
}

TEST(ConfigTest, PeerClassNames) {
  for (PeerClass p : {PeerClass::kSameProcess, PeerClass::kSameHost, PeerClass::kOtherHost}) {
    EXPECT_EQ(peerClassFromName(peerClassName(p)), p);
  }
  EXPECT_STREQ(peerClassName(PeerClass::kOtherHost), "other_host");
  EXPECT_FALSE(peerClassFromName("same_hots").has_value());
}

TEST(ConfigTest, ExampleFileParsesWithEveryKey) {
  Config c = Config::fromFile(kExampleFile);
  EXPECT_EQ(c.source, kExampleFile);
  EXPECT_EQ(c.pluginPath, (Strings{"/opt/weft/plugins", "/usr/local/lib/weft"}));
  EXPECT_EQ(c.transportsFor(PeerClass::kOtherHost), (Strings{"ibverbs", "libfabric"}));
  EXPECT_EQ(c.optionsFor("host"), (std::map<std::string, std::string>{{"io_timeout_ms", "2000"}}));
  EXPECT_EQ(c.optionsFor("cuda_ipc"), (std::map<std::string, std::string>{{"handle_type", "runtime"}}));
  EXPECT_EQ(c.optionsFor("libfabric"), (std::map<std::string, std::string>{{"provider", "tcp"},
                                                                           {"domain", "eth0"},
                                                                           {"progress_thread", "true"},
                                                                           {"isolate_provider", "false"},
                                                                           {"signals", "auto"}}));
  EXPECT_EQ(c.optionsFor("ibverbs"),
            (std::map<std::string, std::string>{
                {"device", "mlx5_0"}, {"port", "1"}, {"gid_index", "3"}, {"qps_per_peer", "4"}, {"atomics", "true"}}));
  EXPECT_EQ(c.optionsFor("my_fabric"), (std::map<std::string, std::string>{{"rails", "2"}, {"mode", "fast-path"}}));
  EXPECT_EQ(c.bootstrapTimeout, std::chrono::milliseconds(30000));
  EXPECT_EQ(c.bootstrapInterface, "eth0");
  EXPECT_EQ(c.proxyThreads, 2);
  EXPECT_TRUE(c.proxyPinNuma);
  EXPECT_EQ(c.allReduceRules, (std::vector<AllReduceRule>{{2, 1048576, "oneshot_ll"}, {2, 0, "scatter_gather"}}));
  EXPECT_EQ(c.logLevel, "warn");
  EXPECT_EQ(c.logSubsys, "INIT,BOOT,NET");
  // The example is complete: it sets every option weft knows.
  for (const TransportOptionInfo& o : knownTransportOptions()) {
    EXPECT_EQ(c.optionsFor(o.transport).count(o.key), 1u) << o.transport << "." << o.key << " missing from the example";
  }
}

TEST(ConfigTest, FileOverridesOnlyTheKeysItSets) {
  Config c = Config::parse("[transports]\nother_host = [\"libfabric\"]\n[bootstrap]\ntimeout_ms = 2500\n", "t.toml");
  EXPECT_EQ(c.transportsFor(PeerClass::kOtherHost), (Strings{"libfabric"}));
  EXPECT_EQ(c.transportsFor(PeerClass::kSameHost), (Strings{"cuda_ipc", "host"}));
  EXPECT_EQ(c.bootstrapTimeout, std::chrono::milliseconds(2500));
  // Dotted keys and an empty list (no transport may connect such peers) are valid TOML and valid config.
  Config dotted = Config::parse("transports.other_host = []\ntransport.ibverbs.port = 2\n", "t.toml");
  EXPECT_TRUE(dotted.transportsFor(PeerClass::kOtherHost).empty());
  EXPECT_EQ(dotted.optionsFor("ibverbs").at("port"), "2");
}

TEST(ConfigTest, ThirdPartyTransportOptionsPassThroughAsText) {
  Config c = Config::parse("[transport.acme_net]\nratio = 0.5\nflag = false\nname = \"x\"\nwhen = 1979-05-27\n", "t");
  EXPECT_EQ(c.optionsFor("acme_net"), (std::map<std::string, std::string>{
                                          {"ratio", "0.5"}, {"flag", "false"}, {"name", "x"}, {"when", "1979-05-27"}}));
  EXPECT_EQ(
      parseError("[transport.acme_net]\nlist = [1, 2]\n"),
      "weft.toml:2:8: 'transport.acme_net.list' must be a string, integer, float, boolean, date or time, got array");
}

TEST(ConfigTest, UnknownTopLevelKey) {
  EXPECT_EQ(parseError("[bootstrap]\ntimeout_ms = 100\n\n[transprots]\nsame_host = [\"host\"]\n"),
            "weft.toml:4:2: unknown key 'transprots' (known: plugins, transports, transport, bootstrap, proxy, nccl, "
            "collectives, log)");
  EXPECT_EQ(parseError("verbose = true\n"),
            "weft.toml:1:1: unknown key 'verbose' (known: plugins, transports, transport, bootstrap, proxy, nccl, "
            "collectives, log)");
}

TEST(ConfigTest, UnknownNestedKey) {
  std::string toml =
      "# weft config\n"
      "[plugins]\n"
      "path = [\"/opt\"]\n"
      "\n"
      "[transports]\n"
      "same_process = [\"host\"]\n"
      "same_hots = [\"host\"]\n";
  EXPECT_EQ(parseError(toml),
            "weft.toml:7:1: unknown key 'transports.same_hots' (known: same_process, same_host, other_host)");
  EXPECT_EQ(parseError("[bootstrap]\n  timeout = 5\n"),
            "weft.toml:2:3: unknown key 'bootstrap.timeout' (known: timeout_ms, interface)");
  EXPECT_EQ(parseError("[log]\nlevels = \"info\"\n"), "weft.toml:2:1: unknown key 'log.levels' (known: level, subsys)");
}

TEST(ConfigTest, WrongType) {
  EXPECT_EQ(parseError("[bootstrap]\ntimeout_ms = \"5s\"\n"),
            "weft.toml:2:14: 'bootstrap.timeout_ms' must be an integer, got string");
  EXPECT_EQ(parseError("[transports]\nsame_host = \"host\"\n"),
            "weft.toml:2:13: 'transports.same_host' must be an array of strings, got string");
  EXPECT_EQ(parseError("[transports]\nsame_host = [\"host\", 3]\n"),
            "weft.toml:2:22: 'transports.same_host[1]' must be a string, got integer");
  EXPECT_EQ(parseError("plugins = 3\n"), "weft.toml:1:11: 'plugins' must be a table, got integer");
  EXPECT_EQ(parseError("[transport]\nhost = 1\n"), "weft.toml:2:8: 'transport.host' must be a table, got integer");
  EXPECT_EQ(parseError("[bootstrap]\ntimeout_ms = 0\n"),
            "weft.toml:2:14: 'bootstrap.timeout_ms' must be in [1, 86400000], got 0");
  EXPECT_EQ(parseError("[log]\nlevel = \"loud\"\n"),
            "weft.toml:2:9: 'log.level' must be trace, debug, info, warn, error or off, got 'loud'");
  EXPECT_NE(parseError("[log]\nsubsys = \"BOOT,DISK\"\n").find("weft.toml:2:10: 'log.subsys' must be"),
            std::string::npos);
}

TEST(ConfigTest, BadTransportNames) {
  EXPECT_EQ(parseError("[transports]\nsame_host = [\"host\", \"../evil\"]\n"),
            "weft.toml:2:22: 'transports.same_host[1]': bad transport name '../evil' (lowercase letters, digits "
            "and '_', starting with a letter, at most 64 chars)");
  EXPECT_EQ(parseError("[transports]\nother_host = [\"ibverbs\", \"ibverbs\"]\n"),
            "weft.toml:2:26: 'transports.other_host[1]': transport 'ibverbs' is listed twice");
  EXPECT_NE(
      parseError("[transport.Libfabric]\nprovider = \"tcp\"\n").find("weft.toml:1:12: bad transport name 'Libfabric'"),
      std::string::npos);
}

TEST(ConfigTest, BadTomlSyntax) {
  std::string message = parseError("[transports]\nsame_host = [\"host\"\nother_host = []\n");
  EXPECT_EQ(message.rfind("weft.toml:3:", 0), 0u) << message;
  EXPECT_NE(message.find("invalid TOML: "), std::string::npos) << message;
  message = parseError("[bootstrap]\ntimeout_ms = 5\ntimeout_ms = 6\n");  // a redefined key is invalid TOML
  EXPECT_EQ(message.rfind("weft.toml:3:14: invalid TOML: ", 0), 0u) << message;
  EXPECT_NE(message.find("'timeout_ms'"), std::string::npos) << message;
  message = parseError("key = \"\xff\"\n");
  EXPECT_EQ(message.rfind("weft.toml:1:", 0), 0u) << message;
}

// toml++ recurses once per level of a dotted key; a hostile file must get an error, not a stack overflow.
TEST(ConfigTest, DeeplyDottedKeysAreRefusedBeforeParsing) {
  std::string deep;
  for (int i = 0; i < 100000; ++i) deep += "k.";
  EXPECT_EQ(parseError("\n" + deep + "k = 1\n"), "weft.toml:2:130: more than 64 '.' on one line: keys nest too deep");
  EXPECT_EQ(parseError("[" + deep + "k]\n"), "weft.toml:1:131: more than 64 '.' on one line: keys nest too deep");
  // 64 levels are fine TOML (and then an unknown key); dots in strings and comments do not count.
  std::string ok;
  for (int i = 0; i < 64; ++i) ok += "k.";
  EXPECT_EQ(parseError(ok + "k = 1\n"),
            "weft.toml:1:1: unknown key 'k' (known: plugins, transports, transport, bootstrap, proxy, nccl, "
            "collectives, log)");
  std::string dots(500, '.');
  Config c = Config::parse("[transport.acme]\na = \"" + dots + "\"  # " + dots + "\nb = '" + dots + "'\nc = \"\"\"\n" +
                               dots + "\\\"\"\"\n" + dots + "\n\"\"\"\nd = \'\'\'" + dots + "\'\'\'\n",
                           "t");
  EXPECT_EQ(c.optionsFor("acme").at("a"), dots);
  EXPECT_EQ(c.optionsFor("acme").at("b"), dots);
  EXPECT_EQ(c.optionsFor("acme").at("c"), dots + "\"\"\"\n" + dots + "\n");
  EXPECT_EQ(c.optionsFor("acme").at("d"), dots);
}

// config_fuzz found that toml++ 3.3 reaches __builtin_unreachable on "\xc4\xb9H" (U+0139 outside a string):
// such text is refused before toml++ sees it; non-ASCII inside strings and comments stays fine.
TEST(ConfigTest, NonAsciiOutsideStringsIsRefusedBeforeParsing) {
  EXPECT_EQ(parseError(std::string("\xc4\xb9H\0", 4)),
            "weft.toml:1:1: a non-ASCII character outside a string or comment");
  EXPECT_EQ(parseError(std::string("H\0", 2)), "weft.toml:1:2: control character 0 is not allowed in TOML");
  EXPECT_EQ(parseError("[\x03"), "weft.toml:1:2: control character 3 is not allowed in TOML");
  // toml++ breaks one of its own invariants on this (an abort, or undefined behaviour with NDEBUG).
  EXPECT_EQ(parseError("[.1"), "weft.toml: invalid TOML (the parser rejected its structure)");
  EXPECT_EQ(parseError("a = \"x\x7fy\"\n"), "weft.toml:1:7: control character 127 is not allowed in TOML");
  EXPECT_EQ(parseError("[log]\nlevel = \"info\"\n\xc3\xa9 = 1\n"),
            "weft.toml:3:1: a non-ASCII character outside a string or comment");
  Config c = Config::parse("# caf\xc3\xa9 \xc4\xb9\n[transport.acme]\nname = \"caf\xc3\xa9 \xc4\xb9\"\n", "t");
  EXPECT_EQ(c.optionsFor("acme").at("name"), "caf\xc3\xa9 \xc4\xb9");
}

TEST(ConfigTest, UnknownOptionOfAKnownTransport) {
  EXPECT_EQ(parseError("[transport.ibverbs]\nport = 1\ngid = 3\n"),
            "weft.toml:3:1: unknown option 'gid' of transport 'ibverbs' (known: device, port, gid_index, qps_per_peer, "
            "atomics)");
  EXPECT_EQ(parseError("[transport.host]\nsocket_timeout = 1\n"),
            "weft.toml:2:1: unknown option 'socket_timeout' of transport 'host' (known: io_timeout_ms)");
  // The host plugin has always taken io_timeout_ms; the table refused it from the file and the environment.
  EXPECT_EQ(Config::parse("[transport.host]\nio_timeout_ms = 500\n", "t.toml").optionsFor("host"),
            (std::map<std::string, std::string>{{"io_timeout_ms", "500"}}));
  EXPECT_EQ(parseError("[transport.host]\nio_timeout_ms = 0\n"),
            "weft.toml:2:17: 'transport.host.io_timeout_ms' must be an integer in [1, 600000]");
}

TEST(ConfigTest, WrongOptionType) {
  EXPECT_EQ(parseError("[transport.ibverbs]\nport = \"1\"\n"),
            "weft.toml:2:8: 'transport.ibverbs.port' must be an integer, got string");
  EXPECT_EQ(parseError("[transport.ibverbs]\nport = 0\n"),
            "weft.toml:2:8: 'transport.ibverbs.port' must be an integer in [1, 255]");
  EXPECT_EQ(parseError("[transport.libfabric]\nprogress_thread = 1\n"),
            "weft.toml:2:19: 'transport.libfabric.progress_thread' must be a boolean, got integer");
  EXPECT_EQ(parseError("[transport.cuda_ipc]\nhandle_type = \"fabric\"\n"),
            "weft.toml:2:15: 'transport.cuda_ipc.handle_type' must be one of \"runtime\", \"posix_fd\"");
  EXPECT_EQ(parseError("[transport.libfabric]\nsignals = \"cq\"\n"),
            "weft.toml:2:11: 'transport.libfabric.signals' must be one of \"auto\", \"data_after_completion\", "
            "\"atomic\"");
  EXPECT_EQ(parseError("[transport.libfabric]\nprovider = \"\"\n"),
            "weft.toml:2:12: 'transport.libfabric.provider' must be a non-empty string");
}

TEST(ConfigTest, CollectivesAllReduceRules) {
  EXPECT_TRUE(Config::defaults().allReduceRules.empty());
  Config c = Config::parse(
      "[[collectives.allreduce]]\nranks = 2\nmax_bytes = 65536\nalgorithm = \"oneshot_ll\"\n"
      "[[collectives.allreduce]]\nranks = 4\nranks_per_gpu = 4\nmax_bytes = 1048576\nalgorithm = \"twoshot_ll\"\n"
      "[[collectives.allreduce]]\nalgorithm = \"scatter_gather\"\n",
      "t.toml");
  EXPECT_EQ(c.allReduceRules, (std::vector<AllReduceRule>{
                                  {2, 65536, "oneshot_ll"}, {4, 1048576, "twoshot_ll", 4}, {0, 0, "scatter_gather"}}));
  EXPECT_EQ(parseError("[[collectives.allreduce]]\nranks_per_gpu = -1\nalgorithm = \"oneshot_ll\"\n"),
            "weft.toml:2:17: 'collectives.allreduce[0].ranks_per_gpu' must be in [0, 2^31), 0 for any placement");
  EXPECT_EQ(parseError("[[collectives.allreduce]]\nalgorithm = \"ring\"\n"),
            "weft.toml:2:13: 'collectives.allreduce[0].algorithm' must be one of \"oneshot_ll\", \"scatter_gather\", "
            "\"twoshot_ll\", \"port\", got 'ring'");
  EXPECT_EQ(parseError("[[collectives.allreduce]]\nalgorithm = \"oneshot_ll\"\n[[collectives.allreduce]]\n"
                       "max_bytes = -1\nalgorithm = \"oneshot_ll\"\n"),
            "weft.toml:4:13: 'collectives.allreduce[1].max_bytes' must be >= 0 (0: any size)");
  EXPECT_EQ(parseError("[[collectives.allreduce]]\nranks = 2\n"),
            "weft.toml:1:1: 'collectives.allreduce[0]' has no 'algorithm'");
  EXPECT_EQ(
      parseError("[[collectives.allreduce]]\nsize = 2\nalgorithm = \"oneshot_ll\"\n"),
      "weft.toml:2:1: unknown key 'collectives.allreduce[0].size' (known: ranks, ranks_per_gpu, max_bytes, algorithm)");
  EXPECT_EQ(parseError("[collectives]\nallreduce = \"oneshot_ll\"\n"),
            "weft.toml:2:13: 'collectives.allreduce' must be an array of tables ([[collectives.allreduce]]), got "
            "string");
  EXPECT_EQ(parseError("[collectives]\nallgather = 1\n"),
            "weft.toml:2:1: unknown key 'collectives.allgather' (known: allreduce)");
}

TEST(ConfigTest, ProxySection) {
  Config d = Config::defaults();
  EXPECT_EQ(d.proxyThreads, 1);
  EXPECT_TRUE(d.proxyPinNuma);
  Config c = Config::parse("[proxy]\nthreads = 8\npin_numa = false\n", "p.toml");
  EXPECT_EQ(c.proxyThreads, 8);
  EXPECT_FALSE(c.proxyPinNuma);
  EXPECT_EQ(configError([] { Config::parse("[proxy]\nthreads = 0\n", "p.toml"); }),
            "p.toml:2:11: 'proxy.threads' must be in [1, 64], got 0");
  EXPECT_EQ(configError([] { Config::parse("[proxy]\nthreads = 65\n", "p.toml"); }),
            "p.toml:2:11: 'proxy.threads' must be in [1, 64], got 65");
  EXPECT_NE(configError([] { Config::parse("[proxy]\npin_numa = 1\n", "p.toml"); }).find("proxy.pin_numa"),
            std::string::npos);
  EXPECT_NE(configError([] { Config::parse("[proxy]\nthread = 2\n", "p.toml"); }).find("proxy.thread"),
            std::string::npos);
  c.applyEnvironment({{"WEFT_PROXY_THREADS", "3"}, {"WEFT_PROXY_PIN_NUMA", "on"}});
  EXPECT_EQ(c.proxyThreads, 3);
  EXPECT_TRUE(c.proxyPinNuma);
  EXPECT_EQ(configError([] {
              Config::defaults().applyEnvironment({{"WEFT_PROXY_THREADS", "many"}});
            }),
            "WEFT_PROXY_THREADS='many': must be an integer in [1, 64]");
  EXPECT_EQ(configError([] {
              Config::defaults().applyEnvironment({{"WEFT_PROXY_PIN_NUMA", "2"}});
            }),
            "WEFT_PROXY_PIN_NUMA='2': must be a boolean (1/0, true/false, yes/no, on/off)");
  EXPECT_EQ(d.proxyDirectMaxBytes, kDefaultPortDirectMaxBytes);
  EXPECT_EQ(Config::parse("[proxy]\ndirect_max_bytes = 0\n", "p.toml").proxyDirectMaxBytes, 0u);
  EXPECT_EQ(Config::parse("[proxy]\ndirect_max_bytes = 65536\n", "p.toml").proxyDirectMaxBytes, 65536u);
  EXPECT_EQ(configError([] { Config::parse("[proxy]\ndirect_max_bytes = -1\n", "p.toml"); }),
            "p.toml:2:20: 'proxy.direct_max_bytes' must be in [0, 16777216], got -1");
  EXPECT_EQ(configError([] { Config::parse("[proxy]\ndirect_max_bytes = 16777217\n", "p.toml"); }),
            "p.toml:2:20: 'proxy.direct_max_bytes' must be in [0, 16777216], got 16777217");
  c.applyEnvironment({{"WEFT_PROXY_DIRECT_MAX_BYTES", "0"}});
  EXPECT_EQ(c.proxyDirectMaxBytes, 0u);
  EXPECT_EQ(configError([] {
              Config::defaults().applyEnvironment({{"WEFT_PROXY_DIRECT_MAX_BYTES", "4k"}});
            }),
            "WEFT_PROXY_DIRECT_MAX_BYTES='4k': must be an integer in [0, 16777216]");
}

TEST(ConfigTest, EnvironmentOverridesSingleKeys) {
  Config c = Config::parse(
      "[plugins]\npath = [\"/file\"]\n[bootstrap]\ntimeout_ms = 5000\n[transport.acme_net]\nx = 1\n", "t.toml");
  c.applyEnvironment({
      {"WEFT_PLUGIN_PATH", "/env/a::/env/b"},
      {"WEFT_TRANSPORTS_SAME_PROCESS", "host"},
      {"WEFT_TRANSPORTS_SAME_HOST", " host , cuda_ipc "},
      {"WEFT_TRANSPORTS_OTHER_HOST", "libfabric"},
      {"WEFT_BOOTSTRAP_TIMEOUT_MS", "7000"},
      {"WEFT_BOOTSTRAP_INTERFACE", "ib0"},
      {"WEFT_TRANSPORT_LIBFABRIC_PROVIDER", "tcp"},
      {"WEFT_TRANSPORT_LIBFABRIC_PROGRESS_THREAD", "on"},
      {"WEFT_TRANSPORT_CUDA_IPC_HANDLE_TYPE", "posix_fd"},
      {"WEFT_TRANSPORT_IBVERBS_GID_INDEX", "+5"},
      {"WEFT_TRANSPORT_ACME_NET_X", "2"},       // a name the config knows, holding '_'
      {"WEFT_TRANSPORT_ZETA_RAIL_COUNT", "4"},  // a name it does not: ends at the first '_'
      {"WEFT_LOG_LEVEL", "debug"},
      {"WEFT_LOG_SUBSYS", "^NET,PROXY"},
      {"WEFT_RANK", "3"},  // declared, but not config's business
  });
  EXPECT_EQ(c.pluginPath, (Strings{"/env/a", "/env/b", "/file"}));
  EXPECT_EQ(c.transportsFor(PeerClass::kSameProcess), (Strings{"host"}));
  EXPECT_EQ(c.transportsFor(PeerClass::kSameHost), (Strings{"host", "cuda_ipc"}));
  EXPECT_EQ(c.transportsFor(PeerClass::kOtherHost), (Strings{"libfabric"}));
  EXPECT_EQ(c.bootstrapTimeout, std::chrono::milliseconds(7000));
  EXPECT_EQ(c.bootstrapInterface, "ib0");
  EXPECT_EQ(c.optionsFor("libfabric"),
            (std::map<std::string, std::string>{{"provider", "tcp"}, {"progress_thread", "true"}}));
  EXPECT_EQ(c.optionsFor("cuda_ipc").at("handle_type"), "posix_fd");
  EXPECT_EQ(c.optionsFor("ibverbs").at("gid_index"), "5");
  EXPECT_EQ(c.optionsFor("acme_net").at("x"), "2");
  EXPECT_EQ(c.optionsFor("zeta").at("rail_count"), "4");
  EXPECT_EQ(c.logLevel, "debug");
  EXPECT_EQ(c.logSubsys, "^NET,PROXY");
  // Empty values count as unset.
  Config d = Config::defaults();
  d.applyEnvironment({{"WEFT_TRANSPORTS_OTHER_HOST", ""}, {"WEFT_BOOTSTRAP_TIMEOUT_MS", ""}});
  EXPECT_EQ(d.transportsFor(PeerClass::kOtherHost), (Strings{"ibverbs", "libfabric"}));
  EXPECT_EQ(d.bootstrapTimeout, std::chrono::milliseconds(30000));
}

TEST(ConfigTest, MalformedEnvironmentNamesTheVariable) {
  auto envError = [](const std::string& name, const std::string& value) {
    return configError([&] { Config::defaults().applyEnvironment({{name, value}}); });
  };
  EXPECT_EQ(envError("WEFT_BOOTSTRAP_TIMEOUT_MS", "5s"),
            "WEFT_BOOTSTRAP_TIMEOUT_MS='5s': must be an integer in [1, 86400000] (milliseconds)");
  EXPECT_EQ(envError("WEFT_BOOTSTRAP_TIMEOUT_MS", "0"),
            "WEFT_BOOTSTRAP_TIMEOUT_MS='0': must be an integer in [1, 86400000] (milliseconds)");
  EXPECT_EQ(envError("WEFT_TRANSPORTS_SAME_HOST", "host,,cuda_ipc"),
            "WEFT_TRANSPORTS_SAME_HOST='host,,cuda_ipc': empty entry in the comma list");
  EXPECT_EQ(envError("WEFT_TRANSPORTS_OTHER_HOST", "IBVERBS")
                .rfind("WEFT_TRANSPORTS_OTHER_HOST='IBVERBS': bad transport name", 0),
            0u);
  EXPECT_EQ(envError("WEFT_TRANSPORTS_SAME_PROCESS", "host,host"),
            "WEFT_TRANSPORTS_SAME_PROCESS='host,host': transport 'host' is listed twice");
  EXPECT_EQ(envError("WEFT_TRANSPORT_IBVERBS_PORT", "one"),
            "WEFT_TRANSPORT_IBVERBS_PORT='one': option 'port' of transport 'ibverbs' must be an integer in [1, 255]");
  EXPECT_EQ(envError("WEFT_TRANSPORT_IBVERBS_PORT", "256"),
            "WEFT_TRANSPORT_IBVERBS_PORT='256': option 'port' of transport 'ibverbs' must be an integer in [1, 255]");
  EXPECT_EQ(envError("WEFT_TRANSPORT_IBVERBS_PORTS", "1"),
            "WEFT_TRANSPORT_IBVERBS_PORTS='1': unknown option 'ports' of transport 'ibverbs' (known: device, port, "
            "gid_index, qps_per_peer, atomics)");
  EXPECT_EQ(envError("WEFT_TRANSPORT_LIBFABRIC_PROGRESS_THREAD", "maybe"),
            "WEFT_TRANSPORT_LIBFABRIC_PROGRESS_THREAD='maybe': option 'progress_thread' of transport 'libfabric' must "
            "be a boolean (1/0, true/false, yes/no, on/off)");
  EXPECT_EQ(envError("WEFT_TRANSPORT_CUDA_IPC_HANDLE_TYPE", "dmabuf"),
            "WEFT_TRANSPORT_CUDA_IPC_HANDLE_TYPE='dmabuf': option 'handle_type' of transport 'cuda_ipc' must be one "
            "of \"runtime\", \"posix_fd\"");
  EXPECT_EQ(
      envError("WEFT_TRANSPORT_LIBFABRIC", "tcp"),
      "WEFT_TRANSPORT_LIBFABRIC='tcp': expected WEFT_TRANSPORT_<NAME>_<KEY>, e.g. WEFT_TRANSPORT_LIBFABRIC_PROVIDER");
  EXPECT_EQ(envError("WEFT_LOG_LEVEL", "loud"),
            "WEFT_LOG_LEVEL='loud': must be trace, debug, info, warn, error or off");
  EXPECT_EQ(envError("WEFT_LOG_SUBSYS", "BOOT,DISK").rfind("WEFT_LOG_SUBSYS='BOOT,DISK': must be", 0), 0u);
}

TEST(ConfigTest, LoadReadsTheFileWeftConfigNames) {
  TempDir dir;
  std::string path = dir.file("mine.toml", "[bootstrap]\ntimeout_ms = 1500\n");
  Config c = Config::load({{"WEFT_CONFIG", path}});
  EXPECT_EQ(c.source, path);
  EXPECT_EQ(c.bootstrapTimeout, std::chrono::milliseconds(1500));
  // The environment still wins over the file.
  c = Config::load({{"WEFT_CONFIG", path}, {"WEFT_BOOTSTRAP_TIMEOUT_MS", "900"}});
  EXPECT_EQ(c.bootstrapTimeout, std::chrono::milliseconds(900));
  // A broken file named by WEFT_CONFIG is an error naming its path, line and key.
  std::string broken = dir.file("broken.toml", "\n[bootstrap]\ntimeout = 3\n");
  EXPECT_EQ(configError([&] {
              Config::load({{"WEFT_CONFIG", broken}});
            }),
            broken + ":3:1: unknown key 'bootstrap.timeout' (known: timeout_ms, interface)");
}

TEST(ConfigTest, WeftConfigPointingAtAMissingFileIsAnError) {
  TempDir dir;
  std::string missing = (dir.path() / "absent.toml").string();
  ScopedChdir here(dir.path());
  dir.file("weft.toml", "");  // must not be used as a fallback
  EXPECT_EQ(configError([&] {
              Config::load({{"WEFT_CONFIG", missing}});
            }),
            "WEFT_CONFIG='" + missing + "': cannot use config file: No such file or directory");
  EXPECT_NE(configError([&] { Config::fromFile(missing); }).find(missing + ": cannot open config file: No such file"),
            std::string::npos);
  EXPECT_EQ(configError([&] { Config::fromFile(dir.path().string()); }),
            dir.path().string() + ": config file is not a regular file");
}

TEST(ConfigTest, OversizedFileIsRefused) {
  TempDir dir;
  std::string path = dir.file("big.toml", std::string((1 << 20) + 1, '#'));
  EXPECT_NE(configError([&] { Config::fromFile(path); }).find("more than the limit of 1048576"), std::string::npos);
}

TEST(ConfigTest, LocalWeftTomlIsPickedUp) {
  TempDir dir;
  dir.file("weft.toml", "[transports]\nsame_host = [\"host\"]\n");
  {
    ScopedChdir here(dir.path());
    Config c = Config::load(Environment{});
    EXPECT_EQ(c.source, "weft.toml");
    EXPECT_EQ(c.transportsFor(PeerClass::kSameHost), (Strings{"host"}));
  }
  TempDir empty;
  ScopedChdir here(empty.path());
  EXPECT_EQ(Config::load(Environment{}).source, "built-in defaults");
}

TEST(ConfigTest, LoadReadsTheProcessEnvironment) {
  TempDir dir;
  std::string path = dir.file("env.toml", "[transports]\nother_host = [\"libfabric\"]\n");
  ::setenv("WEFT_CONFIG", path.c_str(), 1);
  ::setenv("WEFT_TRANSPORT_LIBFABRIC_PROVIDER", "shm", 1);
  Config c;
  std::string error;
  try {
    c = Config::load();
  } catch (const Error& e) {
    error = e.what();
  }
  ::unsetenv("WEFT_CONFIG");
  ::unsetenv("WEFT_TRANSPORT_LIBFABRIC_PROVIDER");
  ASSERT_EQ(error, "");
  EXPECT_EQ(c.source, path);
  EXPECT_EQ(c.transportsFor(PeerClass::kOtherHost), (Strings{"libfabric"}));
  EXPECT_EQ(c.optionsFor("libfabric").at("provider"), "shm");
}

TEST(ConfigTest, DocumentationCoversEveryOption) {
  std::string doc = readText(WEFT_SOURCE_DIR "/docs/configuration.md");
  for (const std::string& t : shippedTransports()) {
    EXPECT_NE(doc.find("[transport." + t + "]"), std::string::npos) << t;
  }
  for (const TransportOptionInfo& o : knownTransportOptions()) {
    EXPECT_NE(doc.find("`" + o.key + "`"), std::string::npos) << o.transport << "." << o.key;
    std::string env = "WEFT_TRANSPORT_";
    for (char ch : o.transport + "_" + o.key) env += static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    EXPECT_NE(doc.find(env), std::string::npos) << env;
  }
  for (const char* key : {"`path`", "`same_process`", "`same_host`", "`other_host`", "`timeout_ms`", "`interface`",
                          "`level`", "`subsys`"}) {
    EXPECT_NE(doc.find(key), std::string::npos) << key;
  }
}

// Every ```toml block of the page parses, and the last one (the complete file) says what the example file says.
TEST(ConfigTest, DocumentationExamplesParse) {
  std::string doc = readText(WEFT_SOURCE_DIR "/docs/configuration.md");
  std::vector<std::string> blocks;
  for (size_t at = doc.find("```toml\n"); at != std::string::npos; at = doc.find("```toml\n", at)) {
    size_t start = at + 8;
    size_t end = doc.find("```", start);
    ASSERT_NE(end, std::string::npos);
    blocks.push_back(doc.substr(start, end - start));
    at = end + 3;
  }
  ASSERT_GE(blocks.size(), 6u);
  for (size_t i = 0; i < blocks.size(); ++i) {
    EXPECT_NO_THROW(Config::parse(blocks[i], "configuration.md block " + std::to_string(i))) << blocks[i];
  }
  Config inDoc = Config::parse(blocks.back(), "doc");
  Config example = Config::fromFile(kExampleFile);
  EXPECT_EQ(inDoc.pluginPath, example.pluginPath);
  EXPECT_EQ(inDoc.transports, example.transports);
  EXPECT_EQ(inDoc.transportOptions, example.transportOptions);
  EXPECT_EQ(inDoc.bootstrapTimeout, example.bootstrapTimeout);
  EXPECT_EQ(inDoc.bootstrapInterface, example.bootstrapInterface);
  EXPECT_EQ(inDoc.logLevel, example.logLevel);
  EXPECT_EQ(inDoc.logSubsys, example.logSubsys);
  EXPECT_EQ(inDoc.allReduceRules, example.allReduceRules);
}

}  // namespace
}  // namespace weft
