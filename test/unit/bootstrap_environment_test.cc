// parseLauncherEnvironment: each launcher's variables, precedence, and the errors that say what to set.
#include <gtest/gtest.h>

#include <weft/bootstrap.hpp>
#include <weft/error.hpp>

namespace weft {
namespace {

using Vars = std::map<std::string, std::string>;

Error errorOf(const Vars& vars) {
  try {
    parseLauncherEnvironment(vars);
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "no weft::Error thrown";
  return Error(ErrorCode::kInternalError, "");
}

TEST(BootstrapEnvironmentTest, WeftVariablesWithRootAddress) {
  auto env = parseLauncherEnvironment(
      {{"WEFT_RANK", "2"}, {"WEFT_SIZE", "4"}, {"WEFT_ROOT_ADDR", "node0:5000"}, {"WEFT_LOCAL_RANK", "1"}});
  EXPECT_EQ(env.launcher, "weft");
  EXPECT_EQ(env.rank, 2);
  EXPECT_EQ(env.size, 4);
  EXPECT_EQ(env.localRank, 1);
  EXPECT_EQ(env.rootAddress, "node0:5000");
  EXPECT_FALSE(env.uniqueId);
  EXPECT_EQ(env.timeout, std::chrono::milliseconds(30000));
}

TEST(BootstrapEnvironmentTest, WeftUniqueIdWinsOverRootAddress) {
  UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
  auto env = parseLauncherEnvironment({{"WEFT_RANK", "0"},
                                       {"WEFT_SIZE", "1"},
                                       {"WEFT_UNIQUE_ID", uniqueIdToString(id)},
                                       {"WEFT_ROOT_ADDR", "x:1"},
                                       {"WEFT_BOOTSTRAP_TIMEOUT_MS", "1500"}});
  ASSERT_TRUE(env.uniqueId);
  EXPECT_EQ(*env.uniqueId, id);
  EXPECT_EQ(env.timeout, std::chrono::milliseconds(1500));
  EXPECT_EQ(env.localRank, -1);
  Error e = errorOf({{"WEFT_RANK", "0"}, {"WEFT_SIZE", "1"}, {"WEFT_UNIQUE_ID", "abc"}});
  EXPECT_EQ(e.code(), ErrorCode::kConfigError);
  EXPECT_NE(e.message().find("WEFT_UNIQUE_ID"), std::string::npos) << e.message();
}

TEST(BootstrapEnvironmentTest, OpenMpi) {
  auto env = parseLauncherEnvironment({{"OMPI_COMM_WORLD_RANK", "5"},
                                       {"OMPI_COMM_WORLD_SIZE", "8"},
                                       {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                       {"SLURM_PROCID", "0"},
                                       {"SLURM_NTASKS", "2"},
                                       {"SLURM_LOCALID", "0"},
                                       {"WEFT_ROOT_ADDR", "10.0.0.1:6000"}});
  EXPECT_EQ(env.launcher, "openmpi");
  EXPECT_EQ(env.rank, 5);
  EXPECT_EQ(env.size, 8);
  EXPECT_EQ(env.localRank, 1);
  EXPECT_EQ(env.rootAddress, "10.0.0.1:6000");
}

TEST(BootstrapEnvironmentTest, Pmi) {
  auto env = parseLauncherEnvironment(
      {{"PMI_RANK", "3"}, {"PMI_SIZE", "4"}, {"MPI_LOCALRANKID", "3"}, {"WEFT_ROOT_ADDR", "h:7"}});
  EXPECT_EQ(env.launcher, "pmi");
  EXPECT_EQ(env.rank, 3);
  EXPECT_EQ(env.size, 4);
  EXPECT_EQ(env.localRank, 3);
}

TEST(BootstrapEnvironmentTest, Slurm) {
  auto env = parseLauncherEnvironment({{"SLURM_PROCID", "7"},
                                       {"SLURM_NTASKS", "16"},
                                       {"SLURM_LOCALID", "3"},
                                       {"WEFT_LOCAL_RANK", "2"},
                                       {"WEFT_ROOT_ADDR", "n1:9"}});
  EXPECT_EQ(env.launcher, "slurm");
  EXPECT_EQ(env.rank, 7);
  EXPECT_EQ(env.size, 16);
  EXPECT_EQ(env.localRank, 2) << "WEFT_LOCAL_RANK overrides the launcher's";
}

TEST(BootstrapEnvironmentTest, MpiAndSlurmWithoutRootSayWhatToSet) {
  for (const Vars& vars :
       {Vars{{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}}, Vars{{"PMI_RANK", "0"}, {"PMI_SIZE", "2"}},
        Vars{{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}}}) {
    Error e = errorOf(vars);
    EXPECT_EQ(e.code(), ErrorCode::kConfigError);
    EXPECT_NE(e.message().find("WEFT_ROOT_ADDR"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("WEFT_UNIQUE_ID"), std::string::npos) << e.message();
  }
}

TEST(BootstrapEnvironmentTest, TorchrunUsesMasterPortPlusOne) {
  auto env = parseLauncherEnvironment({{"RANK", "1"},
                                       {"WORLD_SIZE", "2"},
                                       {"LOCAL_RANK", "1"},
                                       {"MASTER_ADDR", "trainer-0"},
                                       {"MASTER_PORT", "29500"},
                                       {"SLURM_LOCALID", "0"}});
  EXPECT_EQ(env.launcher, "torchrun");
  EXPECT_EQ(env.rank, 1);
  EXPECT_EQ(env.size, 2);
  EXPECT_EQ(env.localRank, 1);
  EXPECT_EQ(env.rootAddress, "trainer-0:29501");
  auto v6 =
      parseLauncherEnvironment({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_ADDR", "fe80::1"}, {"MASTER_PORT", "80"}});
  EXPECT_EQ(v6.rootAddress, "[fe80::1]:81");
  auto overridden = parseLauncherEnvironment(
      {{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_ADDR", "a"}, {"MASTER_PORT", "80"}, {"WEFT_ROOT_ADDR", "b:90"}});
  EXPECT_EQ(overridden.rootAddress, "b:90");
  Error e = errorOf({{"RANK", "0"}, {"WORLD_SIZE", "1"}});
  EXPECT_EQ(e.code(), ErrorCode::kConfigError);
  EXPECT_NE(e.message().find("MASTER_ADDR"), std::string::npos) << e.message();
  EXPECT_EQ(errorOf({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_ADDR", "a"}, {"MASTER_PORT", "65535"}}).code(),
            ErrorCode::kConfigError);
}

TEST(BootstrapEnvironmentTest, MalformedValuesNameTheVariable) {
  struct Case {
    Vars vars;
    std::string names;
  };
  std::vector<Case> cases = {
      {{{"WEFT_RANK", "x"}, {"WEFT_SIZE", "2"}, {"WEFT_ROOT_ADDR", "h:1"}}, "WEFT_RANK"},
      {{{"WEFT_RANK", "-1"}, {"WEFT_SIZE", "2"}, {"WEFT_ROOT_ADDR", "h:1"}}, "WEFT_RANK"},
      {{{"WEFT_RANK", "2"}, {"WEFT_SIZE", "2"}, {"WEFT_ROOT_ADDR", "h:1"}}, "WEFT_RANK"},
      {{{"WEFT_RANK", "0"}, {"WEFT_ROOT_ADDR", "h:1"}}, "WEFT_SIZE"},
      {{{"WEFT_SIZE", "2"}, {"WEFT_ROOT_ADDR", "h:1"}}, "WEFT_RANK"},
      {{{"WEFT_RANK", "0"}, {"WEFT_SIZE", "99999999999"}, {"WEFT_ROOT_ADDR", "h:1"}}, "WEFT_SIZE"},
      {{{"WEFT_RANK", "0"}, {"WEFT_SIZE", "1"}, {"WEFT_ROOT_ADDR", "h:1"}, {"WEFT_BOOTSTRAP_TIMEOUT_MS", "0"}},
       "WEFT_BOOTSTRAP_TIMEOUT_MS"},
      {{{"WEFT_RANK", "0"}, {"WEFT_SIZE", "1"}, {"WEFT_ROOT_ADDR", "h:1"}, {"WEFT_BOOTSTRAP_TIMEOUT_MS", "1s"}},
       "WEFT_BOOTSTRAP_TIMEOUT_MS"},
      {{{"WEFT_RANK", "0"}, {"WEFT_SIZE", "1"}}, "WEFT_ROOT_ADDR"},
      {{{"OMPI_COMM_WORLD_RANK", "0"},
        {"OMPI_COMM_WORLD_SIZE", "1"},
        {"OMPI_COMM_WORLD_LOCAL_RANK", "z"},
        {"WEFT_ROOT_ADDR", "h:1"}},
       "OMPI_COMM_WORLD_LOCAL_RANK"},
      {{}, "WEFT_RANK"},
  };
  for (const auto& c : cases) {
    Error e = errorOf(c.vars);
    EXPECT_EQ(e.code(), ErrorCode::kConfigError) << e.what();
    EXPECT_NE(e.message().find(c.names), std::string::npos) << e.message();
  }
}

}  // namespace
}  // namespace weft
