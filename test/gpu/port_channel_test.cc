// PortChannel driven by GPU kernels between two forked ranks: the FIFO, the proxy and Host2DeviceSemaphore on the
// GPU path. Data moves over the host transport (shared host memory: the cuda_ipc transport was not there yet when
// this was written), so the kernels ask for puts of host buffers and wait on semaphore counters the GPU reads through
// mapped host memory. Also the timeout path: a kernel waiting for a signal that never comes traps with a record
// naming the channel wait.
#include <gtest/gtest.h>

#include <cstring>
#include <weft/communicator.hpp>
#include <weft/error.hpp>
#include <weft/gpu.hpp>
#include <weft/proxy_service.hpp>
#include <weft/shared_host_memory.hpp>

#include "fifo_kernels.hpp"
#include "multi_process.hpp"

namespace weft::test {
namespace {

using std::chrono::milliseconds;
constexpr uint64_t kMs = 1'000'000;

Config hostOnlyConfig() {
  Config c = Config::defaults();
  c.transports[PeerClass::kSameProcess] = {"host"};
  c.transports[PeerClass::kSameHost] = {"host"};
  c.bootstrapTimeout = milliseconds(10000);
  return c;
}

uint8_t pattern(uint64_t i) { return static_cast<uint8_t>(i * 13 + 5); }

TEST(PortChannelGpu, KernelsPutSignalFlushAndWaitBetweenTwoRanks) {
  if (!gpuPresentWithoutInit()) GTEST_SKIP() << "no GPU on this machine: mp_port_channel_test covers host threads";
  UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
  constexpr uint64_t kBytes = 64 << 10;
  constexpr int kRounds = 16;
  auto results = runRanks(2, [&](int rank, int) {
    Communicator comm(std::make_shared<TcpBootstrap>(rank, 2, id, milliseconds(20000)), hostOnlyConfig());
    ProxyServiceOptions o;
    o.side = HandleSide::kDevice;
    o.budgetNs = 20'000 * kMs;
    ProxyService proxy(comm, o);
    const int peer = 1 - rank;
    auto srcStorage = allocSharedHostMemory(kBytes * kRounds);
    auto dstStorage = allocSharedHostMemory(kBytes * kRounds);
    auto* src = static_cast<uint8_t*>(srcStorage.get());
    for (uint64_t i = 0; i < kBytes * kRounds; ++i) src[i] = pattern(i);
    RegisteredMemory srcMem = comm.registerMemory(src, kBytes * kRounds, MemoryKind::kHost);
    RegisteredMemory dstMem = comm.registerMemory(dstStorage.get(), kBytes * kRounds, MemoryKind::kHost);
    comm.sendMemory(dstMem, peer, 1);
    MemoryId remoteDst = proxy.addMemory(comm.recvMemory(peer, 1));
    MemoryId localSrc = proxy.addMemory(srcMem);
    SemaphoreId sem = proxy.buildSemaphore(comm.connect(peer, 2), 3);
    PortChannel channel = proxy.portChannel(sem, remoteDst, localSrc);
    proxy.start();
    if (rank == 0) {
      launchPortSender(channel.deviceHandle(), kBytes, kRounds);
    } else {
      launchPortReceiver(channel.deviceHandle(), kRounds);
    }
    finishGpuKernels(rank == 0 ? "port sender" : "port receiver");
    EXPECT_FALSE(proxy.errors().hasError()) << proxy.errors().describe();
    proxy.checkError();
    if (rank == 1) {
      const auto* dst = static_cast<const uint8_t*>(dstStorage.get());
      uint64_t wrong = 0;
      for (uint64_t i = 0; i < kBytes * kRounds; ++i) wrong += dst[i] != pattern(i);
      EXPECT_EQ(wrong, 0u);
    }
    comm.bootstrap().barrier();
  });
  WEFT_EXPECT_RANKS_OK(results);
}

TEST(PortChannelGpu, KernelWaitWithoutASignalTrapsNamingTheChannelWait) {
  if (!gpuPresentWithoutInit()) GTEST_SKIP() << "no GPU on this machine: mp_port_channel_test covers the host path";
  UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
  auto results = runRanks(2, [&](int rank, int) {
    Communicator comm(std::make_shared<TcpBootstrap>(rank, 2, id, milliseconds(20000)), hostOnlyConfig());
    ProxyService proxy(comm, ProxyServiceOptions{.side = HandleSide::kDevice});
    const int peer = 1 - rank;
    auto storage = allocSharedHostMemory(4096);
    RegisteredMemory mem = comm.registerMemory(storage.get(), 4096, MemoryKind::kHost);
    comm.sendMemory(mem, peer, 1);
    MemoryId remote = proxy.addMemory(comm.recvMemory(peer, 1));
    MemoryId local = proxy.addMemory(mem);
    SemaphoreId sem = proxy.buildSemaphore(comm.connect(peer, 2), 3);
    PortChannel channel = proxy.portChannel(sem, remote, local);
    proxy.start();
    if (rank == 1) {
      launchPortWait(channel.deviceHandle(), 300 * kMs);
      EXPECT_THROW(finishGpuKernels("port wait"), Error);
      ASSERT_TRUE(proxy.errors().hasError());
      EXPECT_NE(proxy.errors().describe().find("rank 1: channel wait on peer 0 channel 0 ran out of its 300 ms"),
                std::string::npos)
          << proxy.errors().describe();
    }
    comm.bootstrap().barrier();
    if (rank == 1) std::_Exit(::testing::Test::HasFailure() ? 1 : 0);  // the trapped context cannot be torn down
  });
  WEFT_EXPECT_RANKS_OK(results);
}

}  // namespace
}  // namespace weft::test
