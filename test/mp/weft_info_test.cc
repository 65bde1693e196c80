// weft-info, run as a user would: it lists the host plugin with its device and names the transport it would
// choose per peer class, and says why a transport cannot be used.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <string>

namespace {

std::string run(const std::string& env, const std::string& args, int* status) {
  std::string cmd = env + " " WEFT_BIN_DIR "/weft-info " + args + " 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  std::string out;
  std::array<char, 4096> buf{};
  while (size_t n = fread(buf.data(), 1, buf.size(), pipe)) out.append(buf.data(), n);
  *status = pclose(pipe);
  return out;
}

TEST(WeftInfoTest, ShowsPluginsAndChoices) {
  int status = 0;
  std::string out = run("env -u WEFT_CONFIG WEFT_TRANSPORTS_OTHER_HOST=host", "", &status);
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find("libweft-transport-host.so"), std::string::npos) << out;
  EXPECT_NE(out.find("device 0: host host-memory load-store"), std::string::npos) << out;
  EXPECT_NE(out.find("same_host     tries [cuda_ipc, host]: host memory: host;"), std::string::npos) << out;
  EXPECT_NE(out.find("other_host    tries [host]: host memory: host; gpu memory: none;"), std::string::npos) << out;
  EXPECT_NE(out.find("host (gpu memory): not supported: no device of it can register GPU memory"), std::string::npos)
      << out;
}

TEST(WeftInfoTest, SaysWhyNoTransportServesAClass) {
  int status = 0;
  std::string out = run("WEFT_TRANSPORTS_SAME_HOST=nosuch", "", &status);
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find("same_host     tries [nosuch]: host memory: none; gpu memory: none;"), std::string::npos) << out;
  EXPECT_NE(out.find("no libweft-transport-nosuch.so in"), std::string::npos) << out;
}

TEST(WeftInfoTest, BadConfigIsAnErrorNamingTheVariable) {
  int status = 0;
  std::string out = run("WEFT_BOOTSTRAP_TIMEOUT_MS=soon", "", &status);
  EXPECT_NE(status, 0) << out;
  EXPECT_NE(out.find("WEFT_BOOTSTRAP_TIMEOUT_MS"), std::string::npos) << out;
}

TEST(WeftInfoTest, ParamsListsEveryParameter) {
  int status = 0;
  std::string out = run("", "--params", &status);
  EXPECT_EQ(status, 0) << out;
  for (const char* name : {"WEFT_CONFIG", "WEFT_PLUGIN_PATH", "WEFT_LOG_LEVEL", "WEFT_BOOTSTRAP_TIMEOUT_MS",
                           "WEFT_TRANSPORT_<NAME>_<KEY>", "WEFT_HOST_ID"}) {
    EXPECT_NE(out.find(name), std::string::npos) << name;
  }
}

}  // namespace
