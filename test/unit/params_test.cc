#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <weft/error.hpp>
#include <weft/params.hpp>

namespace weft {
namespace {

template <class F>
Error expectError(ErrorCode code, F&& f) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    return e;
  }
  ADD_FAILURE() << "no weft::Error thrown";
  return Error(ErrorCode::kInternalError, "none");
}

// Sets a variable for one scope and restores what was there before.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    ::setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_.c_str(), old_->c_str(), 1);
    } else {
      ::unsetenv(name_.c_str());
    }
  }

 private:
  std::string name_;
  std::optional<std::string> old_;
};

TEST(ParamsTest, EveryParameterWeftReadsIsDeclaredOnceWithTypeAndHelp) {
  const std::set<std::string> expected = {"WEFT_CONFIG",
                                          "WEFT_PLUGIN_PATH",
                                          "WEFT_LOG_LEVEL",
                                          "WEFT_LOG_SUBSYS",
                                          "WEFT_RANK",
                                          "WEFT_SIZE",
                                          "WEFT_LOCAL_RANK",
                                          "WEFT_UNIQUE_ID",
                                          "WEFT_ROOT_ADDR",
                                          "WEFT_BOOTSTRAP_TIMEOUT_MS",
                                          "WEFT_BOOTSTRAP_SECRET",
                                          "WEFT_BOOTSTRAP_INTERFACE",
                                          "WEFT_TRANSPORTS_SAME_PROCESS",
                                          "WEFT_TRANSPORTS_SAME_HOST",
                                          "WEFT_TRANSPORTS_OTHER_HOST",
                                          "WEFT_TRANSPORT_<NAME>_<KEY>",
                                          "WEFT_HOST_ID",
                                          "WEFT_WAIT_TIMEOUT_MS",
                                          "WEFT_PROXY_THREADS",
                                          "WEFT_PROXY_PIN_NUMA",
                                          "WEFT_PROXY_DIRECT_MAX_BYTES",
                                          "WEFT_NCCL_FALLBACK",
                                          "WEFT_NCCL_FORCE_FALLBACK",
                                          "WEFT_ALLREDUCE_ALGO",
                                          "WEFT_COLL_AUTO_REGISTER",
                                          "WEFT_COLL_REGISTER_WAIT_MS",
                                          "WEFT_COLL_GPU_BLOCKS",
                                          "WEFT_COLL_ONESHOT_BLOCKS",
                                          "WEFT_COLL_LL_PACKETS_PER_THREAD",
                                          "WEFT_COLL_PORT_BLOCKS"};
  std::set<std::string> seen;
  const std::set<std::string> types = {"string", "int", "bool", "list", "path-list", "typed per key"};
  for (const ParamInfo& p : allParams()) {
    EXPECT_TRUE(seen.insert(p.name).second) << p.name << " declared twice";
    EXPECT_EQ(types.count(p.type), 1u) << p.name << " has type " << p.type;
    EXPECT_GT(p.help.size(), 20u) << p.name << " needs help text";
    EXPECT_EQ(p.name.rfind("WEFT_", 0), 0u) << p.name;
    EXPECT_EQ(findParam(p.name), &p) << p.name;
  }
  EXPECT_EQ(seen, expected);
}

TEST(ParamsTest, DeclaredDefaultsAreWhatTheGettersReturn) {
  EXPECT_EQ(findParam("WEFT_BOOTSTRAP_TIMEOUT_MS")->defaultValue, "30000");
  EXPECT_EQ(paramInt("WEFT_BOOTSTRAP_TIMEOUT_MS", Environment{}), 30000);
  EXPECT_EQ(findParam("WEFT_TRANSPORTS_OTHER_HOST")->defaultValue, "ibverbs,libfabric");
  // A default is only used by the typed getters; paramString reports unset as unset.
  EXPECT_FALSE(paramString("WEFT_BOOTSTRAP_TIMEOUT_MS", Environment{}).has_value());
}

TEST(ParamsTest, TransportOptionNamesMatchThePatternEntry) {
  const ParamInfo* pattern = findParam("WEFT_TRANSPORT_<NAME>_<KEY>");
  ASSERT_NE(pattern, nullptr);
  EXPECT_EQ(findParam("WEFT_TRANSPORT_LIBFABRIC_PROVIDER"), pattern);
  EXPECT_EQ(findParam("WEFT_TRANSPORT_CUDA_IPC_HANDLE_TYPE"), pattern);
  EXPECT_EQ(findParam("WEFT_TRANSPORT_LIBFABRIC"), nullptr);   // no key
  EXPECT_EQ(findParam("WEFT_TRANSPORT_LIBFABRIC_"), nullptr);  // empty key
  EXPECT_EQ(findParam("WEFT_TRANSPORT__KEY"), nullptr);        // empty name
  EXPECT_NE(findParam("WEFT_TRANSPORTS_SAME_HOST"), pattern);
  EXPECT_EQ(findParam("WEFT_TRANSPORTS_SAME_HOTS"), nullptr);
}

TEST(ParamsTest, UndeclaredNamesAreRejected) {
  Error e = expectError(ErrorCode::kInvalidArgument, [] { paramString("WEFT_BOOTSTRAP_TIMEOUT"); });
  EXPECT_NE(e.message().find("'WEFT_BOOTSTRAP_TIMEOUT' is not declared"), std::string::npos) << e.message();
  expectError(ErrorCode::kInvalidArgument, [] { paramString("WEFT_RANKS", Environment{{"WEFT_RANKS", "1"}}); });
  expectError(ErrorCode::kInvalidArgument, [] { paramInt("WEFT_RNAK"); });
  expectError(ErrorCode::kInvalidArgument, [] { paramBool("WEFT_NOPE"); });
  // Declared, but of another type: a bug in the caller, not in the user's environment.
  e = expectError(ErrorCode::kInvalidArgument, [] { paramInt("WEFT_ROOT_ADDR", Environment{}); });
  EXPECT_NE(e.message().find("declared as string, not int"), std::string::npos) << e.message();
  expectError(ErrorCode::kInvalidArgument, [] { paramBool("WEFT_RANK", Environment{}); });
}

TEST(ParamsTest, IntegersParseStrictly) {
  auto get = [](const char* value) { return paramInt("WEFT_RANK", Environment{{"WEFT_RANK", value}}); };
  EXPECT_EQ(get("0"), 0);
  EXPECT_EQ(get("17"), 17);
  EXPECT_EQ(get("+5"), 5);
  EXPECT_EQ(get("-3"), -3);
  EXPECT_EQ(get("9223372036854775807"), INT64_MAX);
  for (const char* bad : {"12x", " 5", "5 ", "0x10", "1e3", "+-3", "-", "+", "++1", "9223372036854775808", "two"}) {
    Error e = expectError(ErrorCode::kConfigError, [&] { get(bad); });
    EXPECT_NE(e.message().find(std::string("WEFT_RANK='") + bad + "'"), std::string::npos) << e.message();
  }
}

TEST(ParamsTest, UnsetIntegerWithoutDefault) {
  Error e = expectError(ErrorCode::kConfigError, [] { paramInt("WEFT_RANK", Environment{}); });
  EXPECT_NE(e.message().find("WEFT_RANK is not set"), std::string::npos) << e.message();
  EXPECT_FALSE(paramIntIfSet("WEFT_RANK", Environment{}).has_value());
  EXPECT_EQ(paramIntIfSet("WEFT_RANK", Environment{{"WEFT_RANK", "4"}}), 4);
  // An empty value counts as unset.
  EXPECT_FALSE(paramIntIfSet("WEFT_RANK", Environment{{"WEFT_RANK", ""}}).has_value());
  EXPECT_EQ(paramInt("WEFT_BOOTSTRAP_TIMEOUT_MS", Environment{{"WEFT_BOOTSTRAP_TIMEOUT_MS", ""}}), 30000);
}

TEST(ParamsTest, BooleansParseTheUsualSpellings) {
  // No fixed parameter is boolean yet; transport options of bool keys go through the pattern entry.
  const char* name = "WEFT_TRANSPORT_LIBFABRIC_PROGRESS_THREAD";
  auto get = [&](const char* value) { return paramBool(name, Environment{{name, value}}); };
  for (const char* yes : {"1", "true", "TRUE", "Yes", "on"}) EXPECT_TRUE(get(yes)) << yes;
  for (const char* no : {"0", "false", "False", "NO", "off"}) EXPECT_FALSE(get(no)) << no;
  for (const char* bad : {"2", "maybe", "tru", " true"}) {
    Error e = expectError(ErrorCode::kConfigError, [&] { get(bad); });
    EXPECT_NE(e.message().find(std::string(name) + "='" + bad + "'"), std::string::npos) << e.message();
  }
  Error e = expectError(ErrorCode::kConfigError, [&] { paramBool(name, Environment{}); });
  EXPECT_NE(e.message().find("is not set and has no default"), std::string::npos) << e.message();
}

TEST(ParamsTest, ProcessEnvironmentIsRead) {
  ScopedEnv timeout("WEFT_BOOTSTRAP_TIMEOUT_MS", "1234");
  ScopedEnv other("WEFTLESS_VARIABLE", "x");
  EXPECT_EQ(paramInt("WEFT_BOOTSTRAP_TIMEOUT_MS"), 1234);
  EXPECT_EQ(paramString("WEFT_BOOTSTRAP_TIMEOUT_MS"), "1234");
  Environment env = processEnvironment();
  EXPECT_EQ(env.at("WEFT_BOOTSTRAP_TIMEOUT_MS"), "1234");
  // Every variable is kept: launcher parsing reads OMPI_*, SLURM_*, RANK and others.
  EXPECT_EQ(env.at("WEFTLESS_VARIABLE"), "x");
  {
    ScopedEnv bad("WEFT_BOOTSTRAP_TIMEOUT_MS", "soon");
    expectError(ErrorCode::kConfigError, [] { paramInt("WEFT_BOOTSTRAP_TIMEOUT_MS"); });
  }
  {
    ScopedEnv empty("WEFT_BOOTSTRAP_TIMEOUT_MS", "");
    EXPECT_FALSE(paramString("WEFT_BOOTSTRAP_TIMEOUT_MS").has_value());
  }
}

TEST(ParamsTest, DocumentationListsEveryParameter) {
  std::ifstream file(WEFT_SOURCE_DIR "/docs/configuration.md");
  ASSERT_TRUE(file) << "docs/configuration.md missing";
  std::stringstream text;
  text << file.rdbuf();
  for (const ParamInfo& p : allParams()) {
    EXPECT_NE(text.str().find("`" + p.name + "`"), std::string::npos) << p.name << " is not in docs/configuration.md";
  }
}

}  // namespace
}  // namespace weft
