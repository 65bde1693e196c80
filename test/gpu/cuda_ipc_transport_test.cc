// The cuda_ipc transport on a real GPU, through the Communicator: two ranks (forked processes sharing the GPU, e.g.
// under MPS, and threads of one process) exchange registrations of GPU memory (cudaMalloc memory inside a larger
// allocation, and cuMem/hipMem allocations shared as POSIX file descriptors), write patterns of 1 B .. 64 MiB, signal
// with atomicAdd after the data (the peer waits on its counter, then checks the bytes), and write into the peer's
// memory from a kernel through the mapped address. Skipped where no GPU is present.
//
// The parent never touches the GPU runtime (it does not survive fork): every variant runs its ranks in forked
// processes; the "threads" variant forks one process whose two threads are the ranks.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <exception>
#include <functional>
#include <string>
#include <thread>
#include <vector>
#include <weft/communicator.hpp>
#include <weft/error.hpp>
#include <weft/gpu.hpp>

#include "multi_process.hpp"

#if WEFT_BUILD_GPU_CUDA || WEFT_BUILD_GPU_HIP
#include "cuda_ipc_transport_kernels.hpp"
#endif

namespace weft::test {
namespace {

#if WEFT_BUILD_GPU_CUDA || WEFT_BUILD_GPU_HIP

using std::chrono::milliseconds;
constexpr uint64_t kMiB = uint64_t{1} << 20;

enum class Placement { kProcesses, kThreads };

std::string placementName(const ::testing::TestParamInfo<Placement>& info) {
  return info.param == Placement::kProcesses ? "TwoProcesses" : "TwoThreadsOfOneProcess";
}

Config ipcConfig(const std::string& handleType) {
  Config c = Config::defaults();
  c.transports[PeerClass::kSameProcess] = {"cuda_ipc"};
  c.transports[PeerClass::kSameHost] = {"cuda_ipc"};
  c.transportOptions["cuda_ipc"]["handle_type"] = handleType;
  c.bootstrapTimeout = milliseconds(20000);
  return c;
}

/// Runs body(rank, 2) as two ranks placed as asked, each in its own forked process or as two threads of one forked
/// process; expects every rank to end well.
void runTwoRanks(Placement placement, const std::function<void(int rank, int size)>& body) {
  std::vector<RankResult> results;
  if (placement == Placement::kProcesses) {
    results = runRanks(2, body, std::chrono::seconds(120));
  } else {
    results = runRanks(
        1,
        [&](int, int) {
          std::string failures[2];
          std::thread threads[2];
          for (int r = 0; r < 2; ++r) {
            threads[r] = std::thread([&, r] {
              try {
                checkGpu(hipSetDevice(0), "hipSetDevice");
                body(r, 2);
              } catch (const std::exception& e) {
                failures[r] = e.what();
              }
            });
          }
          for (auto& t : threads) t.join();
          for (int r = 0; r < 2; ++r) EXPECT_EQ(failures[r], "") << "rank " << r << " (thread) threw";
        },
        std::chrono::seconds(120));
  }
  WEFT_EXPECT_RANKS_OK(results);
}

/// Device memory from hipMalloc, zeroed, freed on destruction.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(uint64_t bytes) : bytes_(bytes) {
    checkGpu(hipMalloc(&ptr_, bytes), "hipMalloc");
    checkGpu(hipMemset(ptr_, 0, bytes), "hipMemset");
    checkGpu(hipDeviceSynchronize(), "waiting for the fill (later work runs on non-blocking streams)");
    checkGpu(hipDeviceSynchronize(), "hipDeviceSynchronize");
  }
  ~DeviceBuffer() { (void)hipFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  uint8_t* get() const { return static_cast<uint8_t*>(ptr_); }
  uint64_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  uint64_t bytes_;
};

/// A cuMem/hipMem allocation shareable as a POSIX fd, freed on destruction.
class PosixFdBuffer {
 public:
  explicit PosixFdBuffer(uint64_t bytes) : ptr_(allocPosixFdMemory(bytes, &bytes_)) {}
  ~PosixFdBuffer() { freePosixFdMemory(ptr_, bytes_); }
  PosixFdBuffer(const PosixFdBuffer&) = delete;
  PosixFdBuffer& operator=(const PosixFdBuffer&) = delete;
  uint8_t* get() const { return static_cast<uint8_t*>(ptr_); }
  uint64_t bytes() const { return bytes_; }

 private:
  uint64_t bytes_ = 0;
  void* ptr_;
};

std::vector<uint8_t> toHost(const uint8_t* device, uint64_t bytes) {
  std::vector<uint8_t> out(bytes);
  checkGpu(hipMemcpy(out.data(), device, bytes, hipMemcpyDeviceToHost), "hipMemcpy to host");
  return out;
}

/// Waits until the 64-bit word at `word` (device memory) reaches `want`, polling a copy of it, at most `budget`.
/// Returns the last value seen.
uint64_t waitForCounter(const uint8_t* word, uint64_t want, milliseconds budget) {
  const auto deadline = std::chrono::steady_clock::now() + budget;
  uint64_t seen = 0;
  for (;;) {
    checkGpu(hipMemcpy(&seen, word, sizeof(seen), hipMemcpyDeviceToHost), "hipMemcpy of the counter");
    if (seen >= want || std::chrono::steady_clock::now() >= deadline) return seen;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

/// Checks that device bytes [at, at + size) hold pattern `seed` and the byte on either side (inside `guardLo` ..
/// `guardHi`) is still 0. Reports the first mismatch.
void expectPatternAt(const uint8_t* base, uint64_t at, uint64_t size, uint32_t seed, uint64_t guardLo, uint64_t guardHi,
                     const std::string& what) {
  const uint64_t lo = at > guardLo ? at - 1 : at;
  const uint64_t hi = at + size < guardHi ? at + size + 1 : at + size;
  std::vector<uint8_t> got = toHost(base + lo, hi - lo);
  if (lo < at) EXPECT_EQ(got[0], 0) << what << ": the byte before the written range changed";
  if (hi > at + size) EXPECT_EQ(got.back(), 0) << what << ": the byte after the written range changed";
  uint64_t wrong = 0, first = size;
  for (uint64_t i = 0; i < size; ++i) {
    if (got[at - lo + i] != ipcPatternByte(seed, i)) {
      if (wrong++ == 0) first = i;
    }
  }
  EXPECT_EQ(wrong, 0u) << what << ": " << wrong << " of " << size << " bytes wrong, first at " << first;
}

std::shared_ptr<Bootstrap> join(int rank, int size, const UniqueId& id) {
  return std::make_shared<TcpBootstrap>(rank, size, id, milliseconds(20000));
}

/// One round of the write protocol, symmetric on both ranks: zero the landing zone, write `size` bytes of this rank's
/// pattern at `dstOffset` of the peer's buffer, signal, flush; then wait for the peer's signal and check its bytes.
struct WriteRound {
  uint64_t size;
  uint64_t dstOffset;
};

void runWriteRounds(Communicator& comm, Connection& conn, const RegisteredMemory& remoteData,
                    const RegisteredMemory& remoteCounter, uint64_t counterOffset, const RegisteredMemory& sendMem,
                    uint8_t* send, uint8_t* landing, uint64_t landingBytes, const uint8_t* counter,
                    const std::vector<WriteRound>& rounds) {
  const int rank = comm.rank(), peer = 1 - rank;
  for (size_t r = 0; r < rounds.size(); ++r) {
    const auto [size, dstOffset] = rounds[r];
    const uint32_t mySeed = static_cast<uint32_t>(rank * 1000 + r), peerSeed = static_cast<uint32_t>(peer * 1000 + r);
    checkGpu(hipMemset(landing, 0, landingBytes), "hipMemset of the landing zone");
    checkGpu(hipDeviceSynchronize(), "waiting for the fill (later work runs on non-blocking streams)");
    checkGpu(hipDeviceSynchronize(), "hipDeviceSynchronize");
    launchIpcFillPattern(send, size, mySeed);
    comm.bootstrap().barrier();  // both landing zones are zero before anyone writes
    conn.write(remoteData, dstOffset, sendMem, 0, size);
    conn.atomicAdd(remoteCounter, counterOffset, 1);
    conn.flush(milliseconds(20000));
    const uint64_t seen = waitForCounter(counter, r + 1, milliseconds(20000));
    ASSERT_EQ(seen, r + 1) << "rank " << rank << " round " << r << ": the peer's signal did not arrive";
    expectPatternAt(landing, dstOffset, size, peerSeed, 0, landingBytes,
                    "rank " + std::to_string(rank) + " round " + std::to_string(r) + " (" + std::to_string(size) +
                        " bytes at offset " + std::to_string(dstOffset) + ")");
    comm.bootstrap().barrier();  // the peer has checked before the next round zeroes and overwrites
  }
}

class CudaIpcTransport : public ::testing::TestWithParam<Placement> {
 protected:
  void SetUp() override {
    if (!gpuPresentWithoutInit()) GTEST_SKIP() << "no GPU device node on this machine: cuda_ipc GPU test skipped";
  }
};

TEST_P(CudaIpcTransport, WritesOneByteTo64MiBAndSignalsAfterTheData) {
  const UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
  runTwoRanks(GetParam(), [&](int rank, int size) {
    Communicator comm(join(rank, size, id), ipcConfig("runtime"));
    const int peer = 1 - rank;
    ASSERT_EQ(comm.transportFor(peer), "cuda_ipc");
    constexpr uint64_t kMax = 64 * kMiB;
    constexpr uint64_t kLead = 64 * 1024;  // the registered range starts inside its allocation
    constexpr uint64_t kLanding = kMax + 4096;
    DeviceBuffer recvAlloc(kLead + kLanding + 4096);
    DeviceBuffer send(kMax);
    DeviceBuffer counter(256);
    RegisteredMemory recvMem = comm.registerMemory(recvAlloc.get() + kLead, kLanding, MemoryKind::kGpu);
    RegisteredMemory sendMem = comm.registerMemory(send.get(), kMax, MemoryKind::kGpu);
    // The counter word sits at offset 8 of a registration that starts 64 bytes into its allocation.
    RegisteredMemory counterMem = comm.registerMemory(counter.get() + 64, 128, MemoryKind::kGpu);
    comm.sendMemory(recvMem, peer, 1);
    comm.sendMemory(counterMem, peer, 2);
    RegisteredMemory remoteRecv = comm.recvMemory(peer, 1);
    RegisteredMemory remoteCounter = comm.recvMemory(peer, 2);
    EXPECT_EQ(remoteRecv.size(), kLanding);
    EXPECT_NE(remoteRecv.data(), nullptr) << "cuda_ipc maps peer memory";
    auto conn = comm.connect(peer, 3);
    EXPECT_EQ(conn->transport(), "cuda_ipc");
    const std::vector<WriteRound> rounds = {{1, 0},         {1, 4095},     {2, 1},     {7, 13},
                                            {64, 64},       {4096, 3},     {65537, 0}, {kMiB + 3, 5},
                                            {16 * kMiB, 0}, {kMax - 1, 1}, {kMax, 0},  {kMax, 4096}};
    runWriteRounds(comm, *conn, remoteRecv, remoteCounter, 8, sendMem, send.get(), recvAlloc.get() + kLead, kLanding,
                   counter.get() + 64 + 8, rounds);
    // The bytes before the registered range were never written.
    std::vector<uint8_t> lead = toHost(recvAlloc.get(), kLead);
    uint64_t dirty = 0;
    for (uint8_t b : lead) dirty += b != 0;
    EXPECT_EQ(dirty, 0u) << "bytes before the registered range changed";
    // Out-of-range writes are refused before anything is enqueued.
    EXPECT_THROW(conn->write(remoteRecv, kLanding - 1, sendMem, 0, 2), Error);
    EXPECT_THROW(conn->atomicAdd(remoteCounter, 4, 1), Error);  // not 8-byte aligned
    comm.bootstrap().barrier();
  });
}

TEST_P(CudaIpcTransport, ManySignalsAreCountedExactly) {
  const UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
  runTwoRanks(GetParam(), [&](int rank, int size) {
    Communicator comm(join(rank, size, id), ipcConfig("runtime"));
    const int peer = 1 - rank;
    DeviceBuffer counter(64);
    RegisteredMemory counterMem = comm.registerMemory(counter.get(), 64, MemoryKind::kGpu);
    comm.sendMemory(counterMem, peer, 1);
    RegisteredMemory remote = comm.recvMemory(peer, 1);
    auto a = comm.connect(peer, 2);
    auto b = comm.connect(peer, 3);  // two connections (two streams) add to one word
    constexpr int kAdds = 500;
    for (int i = 0; i < kAdds; ++i) {
      a->atomicAdd(remote, 16, 1);
      b->atomicAdd(remote, 16, 2);
    }
    a->flush(milliseconds(20000));
    b->flush(milliseconds(20000));
    comm.bootstrap().barrier();
    std::vector<uint8_t> words = toHost(counter.get(), 64);
    uint64_t got[8];
    std::memcpy(got, words.data(), sizeof(got));
    EXPECT_EQ(got[2], uint64_t{3} * kAdds);
    EXPECT_EQ(got[1], 0u);
    EXPECT_EQ(got[3], 0u);
    comm.bootstrap().barrier();
  });
}

TEST_P(CudaIpcTransport, KernelWritesPeerMemoryThroughTheMappedAddress) {
  const UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
  runTwoRanks(GetParam(), [&](int rank, int size) {
    Communicator comm(join(rank, size, id), ipcConfig("runtime"));
    const int peer = 1 - rank;
    constexpr uint64_t kBytes = kMiB + 7;
    DeviceBuffer alloc(256 + kBytes + 1);
    RegisteredMemory mine = comm.registerMemory(alloc.get() + 256, kBytes, MemoryKind::kGpu);
    comm.sendMemory(mine, peer, 1);
    RegisteredMemory theirs = comm.recvMemory(peer, 1);
    ASSERT_NE(theirs.data(), nullptr);
    launchIpcFillPattern(static_cast<uint8_t*>(theirs.data()), kBytes, static_cast<uint32_t>(77 + rank));
    comm.bootstrap().barrier();  // both kernels have finished (launchIpcFillPattern synchronizes)
    expectPatternAt(alloc.get(), 256, kBytes, static_cast<uint32_t>(77 + peer), 0, 256 + kBytes + 1,
                    "rank " + std::to_string(rank) + "'s buffer written by rank " + std::to_string(peer) + "'s kernel");
    // Host memory is the host transport's job: with only cuda_ipc configured, no transport carries it.
    std::vector<uint8_t> host(4096);
    try {
      comm.registerMemory(host.data(), host.size(), MemoryKind::kHost);
      ADD_FAILURE() << "cuda_ipc registered host memory";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kPluginError) << e.what();
      EXPECT_NE(std::string(e.what()).find("cuda_ipc: not supported: no device of it can register host memory"),
                std::string::npos)
          << e.what();
    }
    comm.bootstrap().barrier();
  });
}

TEST_P(CudaIpcTransport, PosixFdAllocationsUnderEitherHandleType) {
  const UniqueId id1 = TcpBootstrap::createUniqueId("127.0.0.1");
  const UniqueId id2 = TcpBootstrap::createUniqueId("127.0.0.1");
  for (const char* handleType : {"runtime", "posix_fd"}) {
    SCOPED_TRACE(handleType);
    const UniqueId& id = std::string(handleType) == "runtime" ? id1 : id2;
    runTwoRanks(GetParam(), [&](int rank, int size) {
      Communicator comm(join(rank, size, id), ipcConfig(handleType));
      const int peer = 1 - rank;
      PosixFdBuffer recv(8 * kMiB);  // data first, the counter in the last 64 bytes
      PosixFdBuffer send(8 * kMiB);
      const uint64_t dataBytes = recv.bytes() - 64;
      RegisteredMemory recvMem = comm.registerMemory(recv.get(), recv.bytes(), MemoryKind::kGpu);
      RegisteredMemory sendMem = comm.registerMemory(send.get(), send.bytes(), MemoryKind::kGpu);
      if (std::string(handleType) == "posix_fd") {
        DeviceBuffer plain(4096);
        try {
          comm.registerMemory(plain.get(), 4096, MemoryKind::kGpu);
          ADD_FAILURE() << "handle_type=posix_fd registered hipMalloc memory";
        } catch (const Error& e) {
          EXPECT_EQ(e.code(), ErrorCode::kNotSupported) << e.what();
        }
      }
      comm.sendMemory(recvMem, peer, 1);
      RegisteredMemory remote = comm.recvMemory(peer, 1);
      ASSERT_NE(remote.data(), nullptr);
      auto conn = comm.connect(peer, 2);
      const std::vector<WriteRound> rounds = {{1, 0}, {4097, 3}, {kMiB, 0}, {dataBytes - 9, 9}, {dataBytes, 0}};
      runWriteRounds(comm, *conn, remote, remote, dataBytes, sendMem, send.get(), recv.get(), dataBytes,
                     recv.get() + dataBytes, rounds);
      // A kernel writes through the fd-mapped address too.
      checkGpu(hipMemset(recv.get(), 0, dataBytes), "hipMemset");
      checkGpu(hipDeviceSynchronize(), "waiting for the fill (later work runs on non-blocking streams)");
      checkGpu(hipDeviceSynchronize(), "hipDeviceSynchronize");
      comm.bootstrap().barrier();
      launchIpcFillPattern(static_cast<uint8_t*>(remote.data()) + 100, 4096, static_cast<uint32_t>(500 + rank));
      comm.bootstrap().barrier();
      expectPatternAt(recv.get(), 100, 4096, static_cast<uint32_t>(500 + peer), 0, dataBytes,
                      "fd-mapped kernel write into rank " + std::to_string(rank));
      comm.bootstrap().barrier();
    });
  }
}

INSTANTIATE_TEST_SUITE_P(Placements, CudaIpcTransport, ::testing::Values(Placement::kProcesses, Placement::kThreads),
                         placementName);

#else

TEST(CudaIpcTransport, NeedsAGpuBuild) { GTEST_SKIP() << "built with WEFT_GPU=none: no cuda_ipc transport"; }

#endif

}  // namespace
}  // namespace weft::test
