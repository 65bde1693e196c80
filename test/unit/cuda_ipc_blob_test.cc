// The cuda_ipc transport's parts that need no GPU: the blob codec (truncated, garbled and inconsistent blobs are
// refused, never crash), the fd server that hands allocation files to importers (real abstract unix sockets and a
// memfd), and, in GPU builds, the plugin's behaviour where no GPU is usable (options checked, host memory refused).
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <random>
#include <weft/error.hpp>

#include "../../transports/cuda_ipc/cuda_ipc_fd_server.hpp"
#include "../../transports/cuda_ipc/cuda_ipc_wire.hpp"
#include "transport_plugin.hpp"

namespace weft::cuda_ipc {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

MemoryBlob validRuntimeBlob() {
  MemoryBlob b{};
  b.magic = kMemoryMagic;
  b.version = kWireVersion;
  setField(b.hostId, "boot/host/net:[1]");
  setField(b.busId, "0000:3b:00.0");
  b.owner.pid = 1234;
  b.owner.nonce = 99;
  b.handleKind = static_cast<uint32_t>(HandleKind::kRuntime);
  b.ownerBase = 0x7f0000000000;
  b.baseOffset = 4096;
  b.size = 1 << 20;
  b.allocationSize = (1 << 20) + 4096;
  for (int i = 0; i < kIpcHandleBytes; ++i) b.ipcHandle[i] = static_cast<uint8_t>(i * 3);
  return b;
}

MemoryBlob validFdBlob() {
  MemoryBlob b = validRuntimeBlob();
  b.handleKind = static_cast<uint32_t>(HandleKind::kPosixFd);
  setField(b.socketName, "weft-cuda-ipc-test");
  b.regionId = 7;
  return b;
}

/// The weftResult_t a decode fails with, or weftSuccess; the message goes to `why`.
template <class Blob, class Decode>
weftResult_t decodeResult(const Blob& b, uint64_t bytes, Decode decode, std::string* why = nullptr) {
  try {
    decode(&b, bytes);
    return weftSuccess;
  } catch (const IpcFailure& e) {
    if (why != nullptr) *why = e.what();
    return e.code();
  }
}

weftResult_t memoryResult(const MemoryBlob& b, std::string* why = nullptr) {
  return decodeResult(b, sizeof(b), decodeMemoryBlob, why);
}

TEST(CudaIpcBlob, ValidBlobsRoundTrip) {
  MemoryBlob b = validRuntimeBlob();
  MemoryBlob back = decodeMemoryBlob(&b, sizeof(b));
  EXPECT_EQ(std::memcmp(&back, &b, sizeof(b)), 0);
  MemoryBlob f = validFdBlob();
  EXPECT_EQ(memoryResult(f), weftSuccess);
  EndpointBlob e{};
  e.magic = kEndpointMagic;
  e.version = kWireVersion;
  setField(e.hostId, "h");
  EXPECT_EQ(decodeEndpointBlob(&e, sizeof(e)).magic, kEndpointMagic);
}

TEST(CudaIpcBlob, EveryTruncationAndExtensionIsRefused) {
  MemoryBlob b = validRuntimeBlob();
  std::vector<uint8_t> bytes(sizeof(b) + 16, 0);
  std::memcpy(bytes.data(), &b, sizeof(b));
  for (uint64_t n = 0; n < bytes.size(); ++n) {
    if (n == sizeof(b)) continue;
    std::string why;
    EXPECT_EQ(decodeResult(
                  *bytes.data(), n, [](const void* p, uint64_t k) { decodeMemoryBlob(p, k); }, &why),
              weftInvalidArgument)
        << n << " bytes";
    EXPECT_NE(why.find("bytes"), std::string::npos) << why;
  }
  EndpointBlob e{};
  for (uint64_t n : {uint64_t{0}, uint64_t{1}, uint64_t{sizeof(e) - 1}, uint64_t{sizeof(e) + 1}}) {
    std::vector<uint8_t> buf(n + 1, 0);
    EXPECT_EQ(decodeResult(*buf.data(), n, [](const void* p, uint64_t k) { decodeEndpointBlob(p, k); }),
              weftInvalidArgument);
  }
  EXPECT_THROW(decodeMemoryBlob(nullptr, sizeof(MemoryBlob)), IpcFailure);
  EXPECT_THROW(decodeEndpointBlob(nullptr, sizeof(EndpointBlob)), IpcFailure);
}

TEST(CudaIpcBlob, WrongMagicVersionAndUnterminatedFieldsAreRefused) {
  MemoryBlob b = validRuntimeBlob();
  b.magic = kEndpointMagic;  // an endpoint blob's magic in a memory blob
  EXPECT_EQ(memoryResult(b), weftInvalidArgument);
  b = validRuntimeBlob();
  b.version = kWireVersion + 1;
  EXPECT_EQ(memoryResult(b), weftInvalidArgument);
  b = validRuntimeBlob();
  std::memset(b.hostId, 'x', sizeof(b.hostId));
  std::string why;
  EXPECT_EQ(memoryResult(b, &why), weftInvalidArgument);
  EXPECT_NE(why.find("host id"), std::string::npos) << why;
  b = validRuntimeBlob();
  std::memset(b.busId, '1', sizeof(b.busId));
  EXPECT_EQ(memoryResult(b), weftInvalidArgument);
  b = validFdBlob();
  std::memset(b.socketName, 'a', sizeof(b.socketName));
  EXPECT_EQ(memoryResult(b), weftInvalidArgument);
  EndpointBlob e{};
  e.magic = kEndpointMagic;
  e.version = kWireVersion;
  std::memset(e.hostId, 'y', sizeof(e.hostId));
  EXPECT_THROW(decodeEndpointBlob(&e, sizeof(e)), IpcFailure);
}

TEST(CudaIpcBlob, InconsistentNumbersAreRefused) {
  struct Case {
    const char* what;
    void (*tamper)(MemoryBlob&);
  };
  const Case cases[] = {
      {"zero size", [](MemoryBlob& b) { b.size = 0; }},
      {"unknown handle kind", [](MemoryBlob& b) { b.handleKind = 3; }},
      {"handle kind 0", [](MemoryBlob& b) { b.handleKind = 0; }},
      {"size past the allocation", [](MemoryBlob& b) { b.size = b.allocationSize - b.baseOffset + 1; }},
      {"offset past the allocation", [](MemoryBlob& b) { b.baseOffset = b.allocationSize + 1; }},
      {"offset + size wraps", [](MemoryBlob& b) { b.baseOffset = ~uint64_t{0} - 10, b.size = 100; }},
      {"huge allocation", [](MemoryBlob& b) { b.allocationSize = kMaxAllocationBytes + 1, b.size = 1; }},
  };
  for (const Case& c : cases) {
    MemoryBlob b = validRuntimeBlob();
    c.tamper(b);
    EXPECT_EQ(memoryResult(b), weftInvalidArgument) << c.what;
  }
  MemoryBlob f = validFdBlob();
  f.regionId = 0;
  EXPECT_EQ(memoryResult(f), weftInvalidArgument) << "posix_fd without region";
  f = validFdBlob();
  setField(f.socketName, "");
  EXPECT_EQ(memoryResult(f), weftInvalidArgument) << "posix_fd without socket";
  // The same fields are not needed by a runtime handle.
  MemoryBlob r = validRuntimeBlob();
  r.regionId = 0;
  EXPECT_EQ(memoryResult(r), weftSuccess);
}

TEST(CudaIpcBlob, RandomGarbleGivesAResultNeverACrash) {
  std::mt19937_64 rng(20240601);
  int refused = 0;
  for (int round = 0; round < 20000; ++round) {
    MemoryBlob b = round % 2 ? validFdBlob() : validRuntimeBlob();
    auto* raw = reinterpret_cast<uint8_t*>(&b);
    const int flips = 1 + static_cast<int>(rng() % 8);
    for (int i = 0; i < flips; ++i) raw[rng() % sizeof(b)] ^= static_cast<uint8_t>(1 + rng() % 255);
    weftResult_t r = memoryResult(b);
    EXPECT_TRUE(r == weftSuccess || r == weftInvalidArgument) << r;
    refused += r != weftSuccess;
    if (r == weftSuccess) {  // whatever passes is internally consistent
      EXPECT_GT(b.size, 0u);
      EXPECT_LE(b.baseOffset + b.size, b.allocationSize);
    }
  }
  EXPECT_GT(refused, 1000) << "garbling magic, version, kinds and sizes should be caught often";
}

// ---- fd server ----

std::string uniqueSocketName(const char* tag) {
  static std::atomic<int> counter{0};
  return "weft-cuda-ipc-test-" + std::string(tag) + "-" + std::to_string(getpid()) + "-" +
         std::to_string(counter.fetch_add(1));
}

/// A server holding one memfd of 4096 bytes as region 5 with a known token.
struct ServedRegion {
  uint8_t token[kTokenBytes];
  UniqueFd file;
  std::atomic<int> lookups{0};
  std::unique_ptr<FdServer> server;

  explicit ServedRegion(milliseconds ioTimeout = milliseconds(1000)) {
    for (int i = 0; i < kTokenBytes; ++i) token[i] = static_cast<uint8_t>(0xa0 + i);
    file = UniqueFd(memfd_create("cuda-ipc-test", MFD_CLOEXEC));
    EXPECT_GE(file.get(), 0);
    EXPECT_EQ(ftruncate(file.get(), 4096), 0);
    const char hello[] = "hello from the owner";
    EXPECT_EQ(pwrite(file.get(), hello, sizeof(hello), 0), static_cast<ssize_t>(sizeof(hello)));
    server = std::make_unique<FdServer>(
        uniqueSocketName("srv"),
        [this](const FdRequest& r) {
          ++lookups;
          FdAnswer a;
          if (r.regionId != 5 || std::memcmp(r.token, token, kTokenBytes) != 0) {
            a.message = "no such region or wrong token";
            return a;
          }
          a.status = weftSuccess;
          a.fd = UniqueFd(fcntl(file.get(), F_DUPFD_CLOEXEC, 0));
          a.allocationSize = 4096;
          return a;
        },
        ioTimeout);
  }
};

TEST(CudaIpcFdServer, HandsTheFileToARequesterWithTheToken) {
  ServedRegion owner;
  FetchedFd got = fetchFd(owner.server->name(), getpid(), 5, owner.token, steady_clock::now() + milliseconds(2000));
  ASSERT_GE(got.fd.get(), 0);
  EXPECT_NE(got.fd.get(), owner.file.get());
  EXPECT_EQ(got.allocationSize, 4096u);
  char text[32] = {};
  ASSERT_GT(pread(got.fd.get(), text, sizeof(text) - 1, 0), 0);
  EXPECT_STREQ(text, "hello from the owner");  // the same file, not a copy
  EXPECT_EQ(fcntl(got.fd.get(), F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
}

TEST(CudaIpcFdServer, WrongTokenOrRegionIsARemoteErrorWithTheReason) {
  ServedRegion owner;
  uint8_t wrong[kTokenBytes];
  std::memcpy(wrong, owner.token, kTokenBytes);
  wrong[3] ^= 1;
  for (uint64_t region : {uint64_t{5}, uint64_t{6}}) {
    try {
      fetchFd(owner.server->name(), getpid(), region, region == 5 ? wrong : owner.token,
              steady_clock::now() + milliseconds(2000));
      ADD_FAILURE() << "fetch with a wrong token or region succeeded";
    } catch (const IpcFailure& e) {
      EXPECT_EQ(e.code(), weftRemoteError);
      EXPECT_NE(std::string(e.what()).find("wrong token"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(owner.lookups.load(), 2);
}

TEST(CudaIpcFdServer, OwnerGoneIsARemoteErrorAtOnce) {
  std::string name;
  uint8_t token[kTokenBytes] = {};
  {
    ServedRegion owner;
    name = owner.server->name();
    std::memcpy(token, owner.token, kTokenBytes);
  }
  const auto start = steady_clock::now();
  try {
    fetchFd(name, 4242, 5, token, steady_clock::now() + milliseconds(3000));
    ADD_FAILURE() << "fetch from a stopped server succeeded";
  } catch (const IpcFailure& e) {
    EXPECT_EQ(e.code(), weftRemoteError);
    EXPECT_NE(std::string(e.what()).find("4242"), std::string::npos) << e.what();
  }
  EXPECT_LT(steady_clock::now() - start, milliseconds(1000));
}

TEST(CudaIpcFdServer, SilentServerIsATimeoutWithinTheBudget) {
  // A bound, listening socket that nobody serves: connect succeeds (backlog), the answer never comes.
  const std::string name = uniqueSocketName("mute");
  sockaddr_un addr;
  socklen_t len = fdwire::abstractAddress(name, &addr);
  UniqueFd mute(socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  ASSERT_EQ(bind(mute.get(), reinterpret_cast<sockaddr*>(&addr), len), 0);
  ASSERT_EQ(listen(mute.get(), 4), 0);
  uint8_t token[kTokenBytes] = {};
  const auto start = steady_clock::now();
  try {
    fetchFd(name, 1, 5, token, steady_clock::now() + milliseconds(200));
    ADD_FAILURE() << "fetch from a silent server succeeded";
  } catch (const IpcFailure& e) {
    EXPECT_EQ(e.code(), weftTimeout) << e.what();
  }
  const auto took = steady_clock::now() - start;
  EXPECT_GE(took, milliseconds(190));
  EXPECT_LT(took, milliseconds(1500));
}

TEST(CudaIpcFdServer, GarbageRequestDoesNotStopTheServer) {
  ServedRegion owner(milliseconds(200));
  {
    sockaddr_un addr;
    socklen_t len = fdwire::abstractAddress(owner.server->name(), &addr);
    UniqueFd s(socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
    ASSERT_EQ(connect(s.get(), reinterpret_cast<sockaddr*>(&addr), len), 0);
    const char junk[5] = {1, 2, 3, 4, 5};
    ASSERT_EQ(send(s.get(), junk, sizeof(junk), MSG_NOSIGNAL), 5);
    FdReply reply{};
    ASSERT_EQ(recv(s.get(), &reply, sizeof(reply), 0), static_cast<ssize_t>(sizeof(reply)));
    EXPECT_EQ(reply.magic, kReplyMagic);
    EXPECT_NE(reply.status, weftSuccess);
  }
  {
    // A client that connects and says nothing delays the server by at most its io timeout.
    sockaddr_un addr;
    socklen_t len = fdwire::abstractAddress(owner.server->name(), &addr);
    UniqueFd idle(socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
    ASSERT_EQ(connect(idle.get(), reinterpret_cast<sockaddr*>(&addr), len), 0);
    FetchedFd got = fetchFd(owner.server->name(), getpid(), 5, owner.token, steady_clock::now() + milliseconds(2000));
    EXPECT_GE(got.fd.get(), 0);
  }
  EXPECT_EQ(owner.lookups.load(), 1);  // the junk never reached the lookup
}

// ---- the plugin where no GPU is usable (GPU builds; on a GPU machine the parts that need none) ----

std::string pluginFile() { return std::string(WEFT_PLUGIN_BUILD_DIR) + "/libweft-transport-cuda_ipc.so"; }

TEST(CudaIpcPlugin, UnknownOptionsAndValuesAreRefusedAtInit) {
  if (!std::filesystem::exists(pluginFile())) GTEST_SKIP() << "no cuda_ipc plugin in this build (WEFT_GPU=none)";
  try {
    loadTransportPluginFile(pluginFile(), "cuda_ipc", {{"handle_type", "dmabuf"}});
    ADD_FAILURE() << "handle_type=dmabuf accepted";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("handle_type='dmabuf'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(loadTransportPluginFile(pluginFile(), "cuda_ipc", {{"no_such_key", "1"}}), Error);
  EXPECT_NO_THROW(loadTransportPluginFile(pluginFile(), "cuda_ipc", {{"handle_type", "posix_fd"}}));
}

TEST(CudaIpcPlugin, HostMemoryIsNotSupportedAndBadBlobsAreInvalid) {
  if (!std::filesystem::exists(pluginFile())) GTEST_SKIP() << "no cuda_ipc plugin in this build (WEFT_GPU=none)";
  auto plugin = loadTransportPluginFile(pluginFile(), "cuda_ipc");
  for (const TransportDeviceInfo& d : plugin->devices()) {
    EXPECT_TRUE(d.gpuMemory);
    EXPECT_TRUE(d.loadStore);
    EXPECT_FALSE(d.hostMemory);
    EXPECT_GE(d.numaNode, -1);
  }
  std::vector<uint8_t> host(4096);
  try {
    plugin->registerMemory(host.data(), host.size(), MemoryKind::kHost);
    ADD_FAILURE() << "host memory registered";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotSupported) << e.what();
    EXPECT_NE(e.message().find("host transport"), std::string::npos) << e.what();
  }
  MemoryBlob b = validRuntimeBlob();
  std::vector<uint8_t> blob(sizeof(b));
  std::memcpy(blob.data(), &b, sizeof(b));
  blob.pop_back();
  EXPECT_THROW(plugin->importMemory(blob, milliseconds(100)), Error);
  // A well-formed blob from another host is refused before anything is opened.
  blob.resize(sizeof(b));
  std::memcpy(blob.data(), &b, sizeof(b));
  try {
    plugin->importMemory(blob, milliseconds(100));
    ADD_FAILURE() << "a blob of another host imported";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    EXPECT_NE(e.message().find("one host only"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace weft::cuda_ipc
