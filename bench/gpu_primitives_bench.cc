#include "gpu_primitives_bench.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>
#include <weft/communicator.hpp>
#include <weft/device_error.hpp>
#include <weft/error.hpp>
#include <weft/gpu.hpp>
#include <weft/memory_channel.hpp>
#include <weft/proxy_service.hpp>

#if defined(WEFT_BENCH_GPU)
#include "gpu_primitives_kernels.hpp"
#include "raw_libfabric_loop.hpp"
#endif

namespace weft::bench {

#if defined(WEFT_BENCH_GPU)

namespace {

using Clock = std::chrono::steady_clock;

constexpr uint64_t kBudgetNs = 30'000'000'000ull;
constexpr uint64_t kMaxPacketBytes = 1ull << 20;  // LL packets are for small messages
constexpr uint64_t kMaxPortPingPongBytes = 4ull << 20;
constexpr int kCopyThreads = 512;
constexpr int kPairBarrierTag = 310;

double secondsSince(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

uint8_t patternByte(int rank, uint64_t i) { return static_cast<uint8_t>(rank * 41 + i * 3 + 7); }

// Iterations for a bandwidth row: about 4 GiB moved, within [20, 2000] (a fixed count from -n wins).
int bandwidthIterations(const BenchOptions& options, uint64_t bytes) {
  if (options.iterations > 0) return options.iterations;
  return static_cast<int>(std::clamp<uint64_t>((4ull << 30) / std::max<uint64_t>(bytes, 1), 20, 2000));
}

// Blocks for a copy of `bytes` by kCopyThreads-thread blocks: enough for 64 bytes per thread, at most two per SM.
int copyBlocks(uint64_t bytes, int smCount) {
  const uint64_t perBlock = kCopyThreads * 64ull;
  return static_cast<int>(std::clamp<uint64_t>((bytes + perBlock - 1) / perBlock, 1, 2ull * smCount));
}

class DeviceBuffer {
 public:
  explicit DeviceBuffer(uint64_t bytes) : bytes_(bytes) {
    checkGpu(hipMalloc(&ptr_, bytes), "hipMalloc for the gpu benchmark");
    checkGpu(hipMemset(ptr_, 0, bytes), "hipMemset for the gpu benchmark");
    checkGpu(hipDeviceSynchronize(), "waiting for the fill (later work runs on non-blocking streams)");
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

class Stream {
 public:
  Stream() { checkGpu(hipStreamCreateWithFlags(&s_, hipStreamNonBlocking), "hipStreamCreateWithFlags"); }
  ~Stream() { (void)hipStreamDestroy(s_); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  hipStream_t get() const { return s_; }

 private:
  hipStream_t s_ = nullptr;
};

// Everything one rank of a pair sets up once: a data buffer (source [0, max), weft's landing [max, 2 max), the
// floor's landing [2 max, 3 max)), a packet buffer, a flag word for the raw floors, the memory channels and a
// port channel over the transport the config chooses for GPU memory.
//
// Where that transport does not map peer memory (libfabric), only the port channel rows run, beside a raw
// libfabric loop on host memory; where it cannot write GPU memory either (no FI_HMEM), the port channel's puts
// land in host memory ([max, 2 max) of hostLanding_) and its signals in a host counter the GPU reads.
class GpuPair {
 public:
  GpuPair(Bootstrap& boot, Communicator& comm, uint64_t maxBytes)
      : boot_(boot),
        rank_(boot.rank()),
        peer_(boot.rank() ^ 1),
        first_(rank_ < peer_),
        max_(maxBytes),
        data_(3 * maxBytes),
        packets_(packetBufferBytes<LL16Packet>(std::min(maxBytes, kMaxPacketBytes))),
        flags_(64) {
    std::vector<uint8_t> pattern(max_);
    for (uint64_t i = 0; i < max_; ++i) pattern[i] = patternByte(rank_, i);
    checkGpu(hipMemcpy(data_.get(), pattern.data(), max_, hipMemcpyHostToDevice), "filling the source");
    checkGpu(hipDeviceSynchronize(), "waiting for the fill (later work runs on non-blocking streams)");
    std::shared_ptr<Connection> portConnection = comm.connect(peer_, 305, MemoryKind::kGpu);
    portTransport_ = portConnection->transport();
    if (portConnection->mapsPeerMemory()) {
      setUpMemoryChannels(comm);
    } else if (rawLibfabricAvailable() && portTransport_ == "libfabric") {
      const auto fabricOptions = comm.config().optionsFor("libfabric");
      auto option = [&](const char* key) {
        auto it = fabricOptions.find(key);
        return it != fabricOptions.end() ? it->second : std::string();
      };
      fabric_ = std::make_unique<RawFabricPair>(boot, peer_, option("provider"), option("domain"), max_, 320);
    }
    ProxyServiceOptions proxyOptions = ProxyServiceOptions::fromConfig(comm.config());
    proxyOptions.side = HandleSide::kDevice;
    proxyOptions.budgetNs = kBudgetNs;
    proxy_ = std::make_unique<ProxyService>(comm, proxyOptions);
    const SemaphoreId s = proxy_->buildSemaphore(portConnection, 306);
    if (!mapped()) {
      localData_ = comm.registerMemory(data_.get(), data_.bytes(), MemoryKind::kGpu);
      // A member, not a local: the registration ends with its last copy, and the peer writes into it until the end.
      hostLandingReg_ = localData_;
      if (!portConnection->writesGpuMemory()) {
        hostLanding_.assign(2 * max_, 0);
        hostLandingReg_ = comm.registerMemory(hostLanding_.data(), hostLanding_.size(), MemoryKind::kHost);
      }
      comm.sendMemory(hostLandingReg_, peer_, 307);
      peerLanding_ = comm.recvMemory(peer_, 307);
    }
    const MemoryId dst = proxy_->addMemory(peerLanding_);
    const MemoryId src = proxy_->addMemory(localData_);
    port_ = proxy_->portChannel(s, dst, src).deviceHandle();
    proxy_->start();
    directMaxBytes_ = port_.direct.order != nullptr ? proxyOptions.directMaxBytes : 0;
    if (directMaxBytes_ > 0) {
      // Small puts of port_ take the direct path; a second service with it off measures the proxy's path too.
      proxyOptions.directMaxBytes = 0;
      proxyOnly_ = std::make_unique<ProxyService>(comm, proxyOptions);
      const SemaphoreId s2 = proxyOnly_->buildSemaphore(portConnection, 308);
      portViaProxy_ =
          proxyOnly_->portChannel(s2, proxyOnly_->addMemory(peerLanding_), proxyOnly_->addMemory(localData_))
              .deviceHandle();
      proxyOnly_->start();
    }
    hipDeviceProp_t prop{};
    int device = 0;
    checkGpu(hipGetDevice(&device), "hipGetDevice");
    checkGpu(hipGetDeviceProperties(&prop, device), "hipGetDeviceProperties");
    smCount_ = prop.multiProcessorCount;
    checkGpu(hipMalloc(&times_, sizeof(PingPongTimes)), "hipMalloc for the benchmark's times");
    if (rank_ == 0) {
      std::printf("# weft-bench gpu: port channel over %s (puts land in %s memory)%s\n", portTransport_.c_str(),
                  hostLanding_.empty() ? "GPU" : "host",
                  mapped()  ? ""
                  : fabric_ ? ("; floor: raw libfabric loop on host memory (" + fabric_->description() +
                               "); memory channel rows skipped (peer memory not mapped)")
                                  .c_str()
                            : "; floors and memory channel rows skipped (peer memory not mapped)");
      std::fflush(stdout);
    }
  }
  ~GpuPair() {
    proxyOnly_.reset();
    proxy_.reset();
    (void)hipFree(times_);
  }
  GpuPair(const GpuPair&) = delete;
  GpuPair& operator=(const GpuPair&) = delete;

  std::vector<BenchRow> run(const BenchOptions& options) {
    std::vector<BenchRow> rows;
    if (mapped()) {
      semaphoreRow(options, rows);
      for (PacketFormat format : {PacketFormat::kLL16, PacketFormat::kLL8}) packetRows(options, format, rows);
    }
    portPingPongRows(options, rows);
    portBandwidthRows(options, rows);
    if (mapped()) memoryBandwidthRows(options, rows);
    pairBarrier();
    return rows;
  }

 private:
  bool mapped() const { return peerData_ != nullptr; }

  // The memory channels, their semaphore and the raw floors' peer pointers (transports that map peer memory).
  void setUpMemoryChannels(Communicator& comm) {
    localData_ = comm.registerMemory(data_.get(), data_.bytes(), MemoryKind::kGpu);
    const RegisteredMemory& localData = localData_;
    RegisteredMemory localPackets = comm.registerMemory(packets_.get(), packets_.bytes(), MemoryKind::kGpu);
    RegisteredMemory localFlags = comm.registerMemory(flags_.get(), flags_.bytes(), MemoryKind::kGpu);
    comm.sendMemory(localData, peer_, 300);
    comm.sendMemory(localPackets, peer_, 301);
    comm.sendMemory(localFlags, peer_, 302);
    RegisteredMemory peerData = comm.recvMemory(peer_, 300);
    RegisteredMemory peerPackets = comm.recvMemory(peer_, 301);
    RegisteredMemory peerFlags = comm.recvMemory(peer_, 302);
    if (peerData.data() == nullptr || peerFlags.data() == nullptr) {
      throw Error(ErrorCode::kInvalidUsage, "weft-bench gpu: the transport chosen for GPU memory (" +
                                                comm.transportFor(peer_, MemoryKind::kGpu) +
                                                ") does not map peer memory; MemoryChannel needs cuda_ipc");
    }
    auto sem = std::make_shared<MemoryDevice2DeviceSemaphore>(comm, comm.connect(peer_, 303, MemoryKind::kGpu), 304,
                                                              MemoryKind::kGpu);
    const DeviceWaitOptions waits{errors_.deviceRecord(), 0, kBudgetNs};
    putChannel_ = std::make_unique<MemoryChannel>(sem, peerData, localData, localPackets);
    packetChannel_ = std::make_unique<MemoryChannel>(sem, peerPackets, localData, localPackets);
    put_ = putChannel_->deviceHandle(waits);
    packet_ = packetChannel_->deviceHandle(waits);
    peerData_ = static_cast<uint8_t*>(peerData.data());
    peerLanding_ = peerData;
    raw_ = RawPeer{reinterpret_cast<uint64_t*>(flags_.get()), static_cast<uint64_t*>(peerFlags.data()),
                   peerData_ + 2 * max_, 0};
  }

  // The two ranks of this pair meet (other pairs run on: a job-wide barrier would also tie an odd last rank in).
  void pairBarrier() {
    boot_.sendBytes({}, peer_, kPairBarrierTag);
    (void)boot_.recvBytes(peer_, kPairBarrierTag);
  }

  void finish(const char* what) {
    const hipError_t e = hipStreamSynchronize(stream_.get());
    errors_.check();
    for (ProxyService* p : {proxy_.get(), proxyOnly_.get()}) {
      if (p == nullptr) continue;
      p->checkError();      // a failed proxy thread is the cause of any wait that ran out behind it
      p->errors().check();  // a port channel wait that ran out records here, then stops the kernel
    }
    checkGpu(e, what);
  }

  // After a kernel ran `rounds` raw floor round trips: both flags must have counted exactly that far, or the floor's
  // waits did not wait (a count left over from an earlier kernel satisfies them) and its figure would be wrong.
  void rawFloorRan(uint64_t rounds) {
    uint64_t mine = 0;
    checkGpu(hipMemcpy(&mine, raw_.mine, sizeof(mine), hipMemcpyDeviceToHost), "reading the raw floor's flag");
    if (mine != raw_.base + rounds) {
      throw Error(ErrorCode::kInternalError, "weft-bench gpu: the raw floor's flag holds " + std::to_string(mine) +
                                                 " after " + std::to_string(rounds) + " round trips from " +
                                                 std::to_string(raw_.base) + ": the floor did not wait for its peer");
    }
    raw_.base = mine;
  }

  PingPongTimes times() {
    PingPongTimes t{};
    checkGpu(hipMemcpy(&t, times_, sizeof(t), hipMemcpyDeviceToHost), "reading the benchmark's times");
    return t;
  }

  // Zeroes this rank's landing areas so that a check sees only what the measured operation wrote.
  void clearLanding(uint64_t bytes) {
    checkGpu(hipMemset(data_.get() + max_, 0, bytes), "clearing the landing area");
    checkGpu(hipMemset(data_.get() + 2 * max_, 0, bytes), "clearing the floor's landing area");
    checkGpu(hipDeviceSynchronize(), "waiting for the fill (later work runs on non-blocking streams)");
    if (!hostLanding_.empty()) std::memset(hostLanding_.data() + max_, 0, bytes);
    pairBarrier();
  }

  // Where the peer's port channel puts land here: data_, or hostLanding_ where the transport cannot write GPU memory.
  const uint8_t* portLanding() const { return hostLanding_.empty() ? data_.get() : hostLanding_.data(); }

  // Bytes of [offset, offset + bytes) of `base` (this rank's data buffer by default) that differ from the peer's
  // source pattern.
  int countWrong(uint64_t offset, uint64_t bytes, const uint8_t* base = nullptr) {
    std::vector<uint8_t> got(bytes);
    checkGpu(hipMemcpy(got.data(), (base != nullptr ? base : data_.get()) + offset, bytes, hipMemcpyDefault),
             "reading back");
    int wrong = 0;
    for (uint64_t i = 0; i < bytes; ++i) wrong += got[i] != patternByte(peer_, i) ? 1 : 0;
    return wrong;
  }

  void semaphoreRow(const BenchOptions& options, std::vector<BenchRow>& rows) {
    const int iters = options.iterations > 0 ? options.iterations : 20000;
    BenchRow row{"gpu semaphore ping-pong (floor: raw flag)", "us", 0, iters};
    pairBarrier();
    const int warmup = std::max(options.warmup, 100);
    launchSemaphorePingPong(put_.semaphore, raw_, first_, warmup, iters, times_, stream_.get());
    finish("semaphore ping-pong kernel");
    const bool deviceScope = put_.semaphore.deviceScope != 0;
    rawFloorRan((deviceScope ? 2 : 1) * (static_cast<uint64_t>(warmup) + iters));
    const PingPongTimes t = times();
    row.weft = static_cast<double>(t.weftNs) / 1e3 / iters / 2;
    row.floor = static_cast<double>(t.rawNs) / 1e3 / iters / 2;
    if (deviceScope) row.benchmark = "gpu semaphore ping-pong, device scope (floor: raw flag, system scope)";
    rows.push_back(row);
    // Both ranks on one GPU: the semaphore signals and waits at device scope, so the same raw flag at device scope
    // is the floor of like with like.
    if (deviceScope) {
      BenchRow same{"gpu semaphore ping-pong, device scope (floor: raw flag, device scope)", "us", 0, iters};
      same.weft = row.weft;
      same.floor = static_cast<double>(t.rawDeviceScopeNs) / 1e3 / iters / 2;
      rows.push_back(same);
    }
  }

  void packetRows(const BenchOptions& options, PacketFormat format, std::vector<BenchRow>& rows) {
    const uint32_t payload = format == PacketFormat::kLL8 ? LL8Packet::kPayloadBytes : LL16Packet::kPayloadBytes;
    const char* name = format == PacketFormat::kLL8 ? "gpu LL8 ping-pong (floor: copy + raw flag)"
                                                    : "gpu LL16 ping-pong (floor: copy + raw flag)";
    for (uint64_t bytes : options.sizes()) {
      if (bytes > kMaxPacketBytes) break;
      const int iters = options.iterations > 0 ? options.iterations : 2000;
      const int warmup = std::max(options.warmup, 20);
      const uint64_t packets = (bytes + payload - 1) / payload;
      const int threads = static_cast<int>(std::clamp<uint64_t>((packets + 31) / 32 * 32, 32, 1024));
      BenchRow row{name, "us", bytes, iters};
      clearLanding(bytes);
      launchPacketPingPong(format, packet_, raw_, bytes, max_, flag_, first_, warmup, iters, threads, times_,
                           stream_.get());
      flag_ += static_cast<uint32_t>(warmup + iters);
      finish("packet ping-pong kernel");
      rawFloorRan(static_cast<uint64_t>(warmup) + iters);
      const PingPongTimes t = times();
      if (options.check) row.wrong = countWrong(max_, bytes) + countWrong(2 * max_, bytes);
      row.weft = static_cast<double>(t.weftNs) / 1e3 / iters / 2;
      row.floor = static_cast<double>(t.rawNs) / 1e3 / iters / 2;
      rows.push_back(row);
    }
  }

  void portPingPongRows(const BenchOptions& options, std::vector<BenchRow>& rows) {
    for (uint64_t bytes : options.sizes()) {
      if (bytes > kMaxPortPingPongBytes) break;
      const int iters = options.iterations > 0 ? options.iterations : 1000;
      const int warmup = std::max(options.warmup, 20);
      if (bytes <= directMaxBytes_) {
        // The kernel's thread does the put and the signal itself: the floor is the same thread's raw copy and flag.
        BenchRow row{"gpu port putWithSignal ping-pong, direct path (floor: one-thread copy + raw flag)", "us", bytes,
                     iters};
        clearLanding(bytes);
        launchPortPingPong(port_, bytes, max_, first_, warmup, iters, true, raw_, data_.get(), times_, stream_.get());
        finish("port channel ping-pong kernel");
        rawFloorRan(static_cast<uint64_t>(warmup) + iters);
        pairBarrier();
        if (options.check) row.wrong = countWrong(max_, bytes) + countWrong(2 * max_, bytes);
        const PingPongTimes t = times();
        row.weft = static_cast<double>(t.weftNs) / 1e3 / iters / 2;
        row.floor = static_cast<double>(t.rawNs) / 1e3 / iters / 2;
        rows.push_back(row);
      }
      const PortChannelDeviceHandle& channel = bytes <= directMaxBytes_ ? portViaProxy_ : port_;
      BenchRow row{mapped()  ? "gpu port putWithSignal ping-pong via the proxy (floor: host-issued copy + sync)"
                   : fabric_ ? "gpu port putWithSignal ping-pong over libfabric (floor: raw libfabric host ping-pong)"
                             : "gpu port putWithSignal ping-pong (no floor)",
                   "us", bytes, iters};
      clearLanding(bytes);
      launchPortPingPong(channel, bytes, max_, first_, warmup, iters, false, raw_, data_.get(), times_, stream_.get());
      finish("port channel ping-pong kernel");
      pairBarrier();  // both flushed: the peer's puts into this rank have landed
      if (options.check) row.wrong = countWrong(max_, bytes, portLanding());
      row.weft = static_cast<double>(times().weftNs) / 1e3 / iters / 2;
      if (!mapped()) {
        // The same exchange between two bare libfabric endpoints on host memory: what the network path costs.
        if (fabric_) {
          (void)fabric_->pingPongMicros(bytes, warmup, fabric_->cheapestSignal());  // warmup >= 20
          row.floor = fabric_->pingPongMicros(bytes, iters, fabric_->cheapestSignal());
        }
        rows.push_back(row);
        continue;
      }
      // The floor: what one copy-engine copy of the same bytes into the peer costs when the host issues it and
      // waits for it, which is the work a proxy does per put.
      for (int i = 0; i < warmup; ++i) copyToPeerFloor(bytes);
      const auto t = Clock::now();
      for (int i = 0; i < iters; ++i) copyToPeerFloor(bytes);
      row.floor = secondsSince(t) * 1e6 / iters;
      rows.push_back(row);
    }
  }

  void copyToPeerFloor(uint64_t bytes) {
    checkGpu(hipMemcpyAsync(raw_.landing, data_.get(), bytes, hipMemcpyDeviceToDevice, stream_.get()),
             "hipMemcpyAsync into the peer");
    checkGpu(hipStreamSynchronize(stream_.get()), "hipStreamSynchronize");
  }

  void portBandwidthRows(const BenchOptions& options, std::vector<BenchRow>& rows) {
    for (uint64_t bytes : options.sizes()) {
      const int iters = bandwidthIterations(options, bytes);
      BenchRow row{mapped()  ? "gpu port channel put bandwidth (floor: hipMemcpyAsync D2D)"
                   : fabric_ ? "gpu port channel put bandwidth over libfabric (floor: raw fi_write stream, host)"
                             : "gpu port channel put bandwidth (no floor)",
                   "GB/s", bytes, iters};
      clearLanding(bytes);
      if (first_) {
        launchPortPutStream(port_, bytes, max_, 1, stream_.get());
        finish("port channel put kernel");
      }
      pairBarrier();
      if (!first_ && options.check) row.wrong = countWrong(max_, bytes, portLanding());
      if (first_) {
        launchPortPutStream(port_, bytes, max_, std::min(options.warmup, iters), stream_.get());
        finish("port channel put kernel");
        auto t = Clock::now();
        launchPortPutStream(port_, bytes, max_, iters, stream_.get());
        finish("port channel put kernel");
        row.weft = static_cast<double>(bytes) * iters / secondsSince(t) / 1e9;
      }
      if (!mapped()) {
        if (fabric_) {
          if (options.warmup > 0) (void)fabric_->streamGigabytesPerSecond(bytes, std::min(options.warmup, iters));
          const double gbps = fabric_->streamGigabytesPerSecond(bytes, iters);
          if (first_) row.floor = gbps;
        }
        pairBarrier();
        rows.push_back(row);
        continue;
      }
      if (first_) {
        for (int i = 0; i < std::min(options.warmup, iters); ++i) enqueueFloorCopy(bytes);
        finish("floor copies");
        const auto t = Clock::now();
        for (int i = 0; i < iters; ++i) enqueueFloorCopy(bytes);
        finish("floor copies");
        row.floor = static_cast<double>(bytes) * iters / secondsSince(t) / 1e9;
      }
      pairBarrier();
      rows.push_back(row);
    }
  }

  void enqueueFloorCopy(uint64_t bytes) {
    checkGpu(hipMemcpyAsync(raw_.landing, data_.get(), bytes, hipMemcpyDeviceToDevice, stream_.get()),
             "hipMemcpyAsync into the peer");
  }

  void memoryBandwidthRows(const BenchOptions& options, std::vector<BenchRow>& rows) {
    for (uint64_t bytes : options.sizes()) {
      const int iters = bandwidthIterations(options, bytes);
      const int blocks = copyBlocks(bytes, smCount_);
      BenchRow row{"gpu memory channel put bandwidth (floor: raw copy kernel)", "GB/s", bytes, iters};
      clearLanding(bytes);
      if (first_) {
        launchMemoryPutStream(put_, bytes, max_, 1, blocks, kCopyThreads, stream_.get());
        launchRawCopyStream(raw_.landing, data_.get(), bytes, 1, blocks, kCopyThreads, stream_.get());
        finish("memory channel put kernel");
      }
      pairBarrier();
      if (!first_ && options.check) row.wrong = countWrong(max_, bytes) + countWrong(2 * max_, bytes);
      if (first_) {
        launchMemoryPutStream(put_, bytes, max_, std::min(options.warmup, iters), blocks, kCopyThreads, stream_.get());
        finish("memory channel put kernel");
        auto t = Clock::now();
        launchMemoryPutStream(put_, bytes, max_, iters, blocks, kCopyThreads, stream_.get());
        finish("memory channel put kernel");
        row.weft = static_cast<double>(bytes) * iters / secondsSince(t) / 1e9;
        launchRawCopyStream(raw_.landing, data_.get(), bytes, std::min(options.warmup, iters), blocks, kCopyThreads,
                            stream_.get());
        finish("raw copy kernel");
        t = Clock::now();
        launchRawCopyStream(raw_.landing, data_.get(), bytes, iters, blocks, kCopyThreads, stream_.get());
        finish("raw copy kernel");
        row.floor = static_cast<double>(bytes) * iters / secondsSince(t) / 1e9;
      }
      pairBarrier();
      rows.push_back(row);
    }
  }

  Bootstrap& boot_;
  int rank_;
  int peer_;
  bool first_;
  uint64_t max_;
  DeviceBuffer data_;
  DeviceBuffer packets_;
  DeviceBuffer flags_;
  uint8_t* peerData_ = nullptr;  // the peer's data buffer mapped here; nullptr when the transport maps nothing
  std::string portTransport_;
  RegisteredMemory localData_;             // data_, registered
  RegisteredMemory peerLanding_;           // where this rank's port channel puts land: the peer's data_ or hostLanding_
  std::vector<uint8_t> hostLanding_;       // the port channel's landing when the transport cannot write GPU memory
  RegisteredMemory hostLandingReg_;        // where the peer's port channel puts land here: localData_ or hostLanding_
  std::unique_ptr<RawFabricPair> fabric_;  // the floor over libfabric
  DeviceErrorBlock errors_;
  Stream stream_;
  std::unique_ptr<MemoryChannel> putChannel_;
  std::unique_ptr<MemoryChannel> packetChannel_;
  MemoryChannelDeviceHandle put_{};
  MemoryChannelDeviceHandle packet_{};
  RawPeer raw_{};
  std::unique_ptr<ProxyService> proxy_;
  PortChannelDeviceHandle port_{};
  uint64_t directMaxBytes_ = 0;              // port_'s direct path takes puts up to this size (0: it has none)
  std::unique_ptr<ProxyService> proxyOnly_;  // with the direct path off, for the proxy's own figures
  PortChannelDeviceHandle portViaProxy_{};
  int smCount_ = 1;
  PingPongTimes* times_ = nullptr;
  uint32_t flag_ = 0;
};

}  // namespace

bool gpuPrimitivesAvailable() { return gpuDeviceCount() > 0; }

std::vector<BenchRow> runGpuPrimitives(Bootstrap& boot, const BenchOptions& options) {
  const int devices = gpuDeviceCount();
  if (devices == 0) throw Error(ErrorCode::kInvalidUsage, "weft-bench gpu: no GPU on this machine");
  checkGpu(hipSetDevice(boot.rank() % devices), "hipSetDevice");
  auto bootPtr = std::shared_ptr<Bootstrap>(&boot, [](Bootstrap*) {});
  Communicator comm(bootPtr, Config::load());
  boot.barrier();
  if ((boot.rank() ^ 1) >= boot.size()) return {};
  for (uint64_t bytes : options.sizes()) {
    if (bytes % 16 != 0) {
      throw Error(ErrorCode::kInvalidArgument, "weft-bench gpu: sizes must be multiples of 16 bytes (got " +
                                                   std::to_string(bytes) + "); e.g. -b 1024 -f 4");
    }
  }
  GpuPair pair(boot, comm, options.sizes().back());
  return pair.run(options);
}

#else

bool gpuPrimitivesAvailable() { return false; }

std::vector<BenchRow> runGpuPrimitives(Bootstrap&, const BenchOptions&) {
  throw Error(ErrorCode::kInvalidUsage, "weft-bench gpu: this weft-bench was built without a GPU (WEFT_GPU=none)");
}

#endif

}  // namespace weft::bench
