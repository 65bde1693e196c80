// CollectiveComm: sets up scratch memory, semaphores and mapped peer scratch on every rank, checks each call's
// arguments and hands the operation to the kernel (or host thread team) of collective_kernels.cu.
#include <algorithm>
#include <array>
#include <chrono>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>
#include <weft/collectives.hpp>
#include <weft/connection.hpp>
#include <weft/device_error.hpp>
#include <weft/error.hpp>
#include <weft/memory_semaphore.hpp>
#include <weft/packet_device.hpp>
#include <weft/params.hpp>
#include <weft/proxy_service.hpp>
#include <weft/reduce_device.hpp>
#include <weft/shared_host_memory.hpp>

#include "auto_registrations.hpp"
#include "collective_launch.hpp"
#include "logging.hpp"

namespace weft {

uint64_t dataTypeBytes(DataType type) {
  switch (type) {
    case DataType::kInt8:
    case DataType::kUint8:
    case DataType::kFloat8E4M3:
    case DataType::kFloat8E5M2: return 1;
    case DataType::kFloat16:
    case DataType::kBfloat16: return 2;
    case DataType::kInt32:
    case DataType::kUint32:
    case DataType::kFloat32: return 4;
    case DataType::kInt64:
    case DataType::kUint64:
    case DataType::kFloat64: return 8;
  }
  return 0;
}

const char* dataTypeName(DataType type) {
  switch (type) {
    case DataType::kInt8: return "int8";
    case DataType::kUint8: return "uint8";
    case DataType::kInt32: return "int32";
    case DataType::kUint32: return "uint32";
    case DataType::kInt64: return "int64";
    case DataType::kUint64: return "uint64";
    case DataType::kFloat16: return "float16";
    case DataType::kFloat32: return "float32";
    case DataType::kFloat64: return "float64";
    case DataType::kBfloat16: return "bfloat16";
    case DataType::kFloat8E4M3: return "float8e4m3";
    case DataType::kFloat8E5M2: return "float8e5m2";
  }
  return "unknown";
}

const char* reduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kProd: return "prod";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kMin: return "min";
    case ReduceOp::kAvg: return "avg";
  }
  return "unknown";
}

const char* collectiveKindName(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllReduce: return "allreduce";
    case CollectiveKind::kAllGather: return "allgather";
    case CollectiveKind::kReduceScatter: return "reducescatter";
    case CollectiveKind::kBroadcast: return "broadcast";
    case CollectiveKind::kReduce: return "reduce";
    case CollectiveKind::kAllToAll: return "alltoall";
    case CollectiveKind::kAllToAllV: return "alltoallv";
    case CollectiveKind::kSendRecv: return "sendrecv";
  }
  return "unknown";
}

const char* allReduceAlgorithmName(AllReduceAlgorithm algorithm) {
  switch (algorithm) {
    case AllReduceAlgorithm::kAuto: return "auto";
    case AllReduceAlgorithm::kOneShotLL: return "oneshot_ll";
    case AllReduceAlgorithm::kScatterGather: return "scatter_gather";
    case AllReduceAlgorithm::kTwoShotLL: return "twoshot_ll";
    case AllReduceAlgorithm::kPort: return "port";
  }
  return "unknown";
}

namespace detail {

namespace {

constexpr int kScratchTag = 0x57430001;
constexpr int kConnectTag = 0x57430002;
constexpr int kSemaphoreTag = 0x57430003;
constexpr int kPacketTag = 0x57430004;
constexpr int kRegistrationTag = 0x57440000;  // + the registration's sequence number (mod 2^16)
constexpr int kPortSemaphoreTag = 0x57430006;
// Blocks of the port allreduce's kernel when WEFT_COLL_PORT_BLOCKS is 0: it only reduces one share per piece.
constexpr uint32_t kDefaultPortBlocks = 8;
// Most ranks on one GPU the port allreduce runs among (it falls back to scatter-gather beyond): with 4 ranks sharing
// an H100 under MPS a proxy's copy, issued on its connection's stream while the kernel on the caller's stream waited
// for it, never completed (hardware queues are shared among MPS clients and streams beyond them share a queue).
constexpr uint32_t kPortMostRanksPerGpu = 2;
#if WEFT_BUILD_GPU_CUDA || WEFT_BUILD_GPU_HIP
constexpr bool kGpuBuild = true;
constexpr MemoryKind kScratchKind = MemoryKind::kGpu;
#else
constexpr bool kGpuBuild = false;
constexpr MemoryKind kScratchKind = MemoryKind::kHost;
#endif

bool validType(DataType type) { return static_cast<int32_t>(type) >= 0 && static_cast<int32_t>(type) < kDataTypeCount; }
bool validOp(ReduceOp op) { return static_cast<int32_t>(op) >= 0 && static_cast<int32_t>(op) < kReduceOpCount; }

// a * b, or kInvalidArgument naming `what` when it does not fit in 64 bits.
uint64_t checkedMul(uint64_t a, uint64_t b, const char* what) {
  if (a != 0 && b > std::numeric_limits<uint64_t>::max() / a) {
    throw Error(ErrorCode::kInvalidArgument, std::string(what) + ": element count overflows 64-bit byte sizes");
  }
  return a * b;
}

constexpr AllReduceAlgorithm kAllReduceAlgorithms[] = {AllReduceAlgorithm::kAuto, AllReduceAlgorithm::kOneShotLL,
                                                       AllReduceAlgorithm::kScatterGather,
                                                       AllReduceAlgorithm::kTwoShotLL, AllReduceAlgorithm::kPort};

// With more than two ranks, kAuto's built-in choice sends a message past the one-shot limit two-shot up to this many
// bytes divided by the rank count, scatter-gather beyond: the two-shot writes 4(n-1)/n times the message in packets
// per rank (twice its bytes through the packets' flags), and the staged path's rank syncs stop dominating from about
// a megabyte. Measured with weft-bench collectives --tune on one H100 shared by 4 and 8 ranks: the two-shot beat the
// staged path at 1 MB among 4 (39 against 44 us) and at 256 KB among 8 (32 against 57), and lost at 4 MB among 4
// (147 against 67) and at 1 MB among 8 (81 against 68).
constexpr uint64_t kTwoShotBudgetBytes = 4 << 20;
// Among more than two ranks the one-shot goes no further than this (nor past its limit): with the LL16 grids sized
// per kernel and the relaxed epoch advance, --tune on one H100 shared by 4 ranks (2026-12-06, -f 2) had the one-shot
// ahead up to 128 KB (8.8 against 10.8 us for the two-shot) and behind from 256 KB (13.9 against 11.0); among 8
// (earlier grids) it led at 64 KB (23.0 against 31.3) and lost at 256 KB (63.5 against 32.2). Two ranks keep the
// one-shot up to its limit: there the two-shot moves as many packets and never led by more than the noise.
constexpr uint64_t kOneShotManyRanksBytes = 128 << 10;

// The algorithm the options ask for: an explicit one as given, kAuto as WEFT_ALLREDUCE_ALGO says (kAuto when unset).
AllReduceAlgorithm resolveAlgorithm(AllReduceAlgorithm requested) {
  const int32_t v = static_cast<int32_t>(requested);
  if (v < 0 || v > static_cast<int32_t>(AllReduceAlgorithm::kPort)) {
    throw Error(ErrorCode::kInvalidArgument,
                "CollectiveComm: allReduceAlgorithm " + std::to_string(v) + " is not an AllReduceAlgorithm");
  }
  if (requested != AllReduceAlgorithm::kAuto) return requested;
  const std::optional<std::string> env = paramString("WEFT_ALLREDUCE_ALGO");
  if (!env) return AllReduceAlgorithm::kAuto;
  for (AllReduceAlgorithm a : kAllReduceAlgorithms) {
    if (*env == allReduceAlgorithmName(a)) return a;
  }
  throw Error(ErrorCode::kConfigError,
              "WEFT_ALLREDUCE_ALGO='" + *env + "': not one of auto, oneshot_ll, scatter_gather, twoshot_ll, port");
}

// The algorithm a [[collectives.allreduce]] rule names (the config parser accepted only the names of real ones).
AllReduceAlgorithm ruleAlgorithm(const std::string& name) {
  for (AllReduceAlgorithm a : kAllReduceAlgorithms) {
    if (name == allReduceAlgorithmName(a)) return a;
  }
  return AllReduceAlgorithm::kScatterGather;
}

}  // namespace

class CollectiveCommImpl {
 public:
  CollectiveCommImpl(std::shared_ptr<Communicator> comm, const CollectiveOptions& options)
      : comm_(std::move(comm)), options_(options) {
    if (!comm_) throw Error(ErrorCode::kInvalidArgument, "CollectiveComm: null communicator");
    rank_ = comm_->rank();
    size_ = comm_->size();
    const uint64_t minScratch = kScratchAlign * static_cast<uint64_t>(size_ + 2);
    if (options_.scratchBytes < minScratch || options_.scratchBytes > (uint64_t{1} << 40)) {
      throw Error(ErrorCode::kInvalidArgument, "CollectiveComm: scratchBytes " + std::to_string(options_.scratchBytes) +
                                                   " outside [" + std::to_string(minScratch) + ", 2^40] for " +
                                                   std::to_string(size_) + " ranks");
    }
    if (options_.hostThreads == 0 || options_.hostThreads > 64) {
      throw Error(ErrorCode::kInvalidArgument,
                  "CollectiveComm: hostThreads " + std::to_string(options_.hostThreads) + " outside [1, 64]");
    }
    if (options_.oneShotMaxBytes > (uint64_t{1} << 32)) {
      throw Error(ErrorCode::kInvalidArgument,
                  "CollectiveComm: oneShotMaxBytes " + std::to_string(options_.oneShotMaxBytes) + " above 2^32");
    }
    // Read before any communication, so that a bad value fails on every rank alike instead of leaving peers waiting.
    algorithm_ = resolveAlgorithm(options_.allReduceAlgorithm);
    const int64_t waitMs = paramInt("WEFT_COLL_REGISTER_WAIT_MS");
    if (waitMs < 0 || waitMs > 60000) {
      throw Error(ErrorCode::kInvalidArgument,
                  "CollectiveComm: WEFT_COLL_REGISTER_WAIT_MS " + std::to_string(waitMs) + " outside [0, 60000]");
    }
    registerWait_ = std::chrono::milliseconds(waitMs);
    budgetNs_ = options_.budgetNs != 0 ? options_.budgetNs : defaultWaitBudgetNs();
    if (options_.oneShotMaxBytes != 0 && size_ <= kOneShotMaxRanks) {
      const uint64_t perLaunch = options_.oneShotMaxBytes / static_cast<uint64_t>(size_ > 1 ? size_ - 1 : 1) / 16 * 16;
      oneShotLimitBytes_ = perLaunch < 16 ? 16 : perLaunch;
      // A two-shot share takes half a slot (the other half carries the reduced share back).
      twoShotLimitBytes_ = static_cast<uint64_t>(size_) * (oneShotLimitBytes_ / 2);
    }
    resolvePlacement();
    for (const AllReduceRule& rule : comm_->config().allReduceRules) {
      if ((rule.ranks == 0 || rule.ranks == size_) &&
          (rule.ranksPerGpu == 0 || static_cast<uint32_t>(rule.ranksPerGpu) == mostRanksOnAGpu_)) {
        rules_.push_back({rule.maxBytes, ruleAlgorithm(rule.algorithm)});
      }
    }
    gpuBlocks_ = resolveGpuBlocks();
    packetGrids_ = resolvePacketGrids(resolvePacketsPerThread());
    // The block-pair algorithms pair block b of every rank: every rank runs the smallest grid (team) any asks for.
    // Every rank must also pick the same allreduce algorithm for a size, or each waits for packets (or syncs) the
    // others never send: the selection's fingerprint travels along and a mismatch fails every rank alike.
    constexpr size_t kShape = 5;  // per rank: blocks, host threads, selection (2 words), registers on first use
    std::vector<uint32_t> shapes(kShape * static_cast<size_t>(size_));
    const uint64_t selection = selectionFingerprint();
    const size_t mine = kShape * static_cast<size_t>(rank_);
    shapes[mine] = gpuBlocks_;
    shapes[mine + 1] = options_.hostThreads;
    shapes[mine + 2] = static_cast<uint32_t>(selection);
    shapes[mine + 3] = static_cast<uint32_t>(selection >> 32);
    shapes[mine + 4] = options_.autoRegister && paramBool("WEFT_COLL_AUTO_REGISTER") ? 1u : 0u;
    comm_->bootstrap().allGather(shapes.data(), kShape * sizeof(uint32_t));
    for (int p = 0; p < size_; ++p) {
      const size_t at = kShape * static_cast<size_t>(p);
      if (shapes[at + 2] != shapes[2] || shapes[at + 3] != shapes[3]) {
        throw Error(ErrorCode::kInvalidUsage,
                    "CollectiveComm: ranks 0 and " + std::to_string(p) +
                        " select allreduce algorithms differently (allReduceAlgorithm, WEFT_ALLREDUCE_ALGO, "
                        "oneShotMaxBytes or [[collectives.allreduce]] differ); every rank must use the same");
      }
    }
    hostThreads_ = options_.hostThreads;
    // Registration on first use needs every rank to offer (a rank that does not would leave the others waiting).
    autoRegister_ = size_ > 1 && size_ <= static_cast<int>(kMaxZeroCopyRanks);
    for (int p = 0; p < size_; ++p) {
      const size_t at = kShape * static_cast<size_t>(p);
      gpuBlocks_ = std::min(gpuBlocks_, shapes[at]);
      hostThreads_ = std::min(hostThreads_, shapes[at + 1]);
      autoRegister_ = autoRegister_ && shapes[at + 4] != 0;
    }
    // Every (rank, block) chunk of a scatter-gather piece gets a slot of at least 16 bytes of the scratch's half.
    const uint64_t mostBlocks =
        std::max<uint64_t>(1, regionBytes(options_.scratchBytes, 2) / (16 * static_cast<uint64_t>(size_)));
    gpuBlocks_ = static_cast<uint32_t>(std::min<uint64_t>(gpuBlocks_, mostBlocks));
    hostThreads_ = static_cast<uint32_t>(std::min<uint64_t>(hostThreads_, mostBlocks));
    allocate();
    connectPeers();
    if (portWanted()) setUpPortChannels();
    logInfo(LogSubsys::kColl,
            "collectives: rank {} of {} ready, {} bytes of scratch per rank; allreduce {}, {} allreduce rules from "
            "the config, LL16 launches up to {} bytes one-shot and {} two-shot on up to {} blocks (small kernels; "
            "unrolled float {}, int8 {}); {} blocks per staged kernel ({} ranks on this GPU)",
            rank_, size_, options_.scratchBytes, allReduceAlgorithmName(algorithm_), rules_.size(), oneShotLimitBytes_,
            twoShotLimitBytes_, packetGrids_.small, packetGrids_.unrolled[static_cast<int>(DataType::kFloat32)],
            packetGrids_.unrolled[static_cast<int>(DataType::kInt8)], gpuBlocks_, ranksOnGpu_);
  }

  ~CollectiveCommImpl() {
#if WEFT_BUILD_GPU_CUDA || WEFT_BUILD_GPU_HIP
    // Kernels still using the memory would fault; the caller's contract is to finish them first, but a device
    // sync here makes a late destruction safe rather than a use-after-free.
    (void)hipDeviceSynchronize();
#endif
    portProxy_.reset();  // its threads stop before the scratch they copy between goes
#if WEFT_BUILD_GPU_CUDA || WEFT_BUILD_GPU_HIP
    if (portChannelsDevice_ != nullptr) (void)hipFree(portChannelsDevice_);
    if (peersDevice_ != nullptr) (void)hipFree(peersDevice_);
    if (barrierDevice_ != nullptr) (void)hipFree(barrierDevice_);
    if (oneShotDevice_ != nullptr) (void)hipFree(oneShotDevice_);
    autoRegistrations_.reset();  // its imports are unmapped while the device is idle
    if (regTableDevice_ != nullptr) (void)hipFree(regTableDevice_);
    if (tableStream_ != nullptr) (void)hipStreamDestroy(tableStream_);
    if (planDevice_ != nullptr) (void)hipFree(planDevice_);
    if (offerRoundDevice_ != nullptr) (void)hipFree(offerRoundDevice_);
#endif
  }

  int rank() const { return rank_; }
  int size() const { return size_; }
  Communicator& communicator() const { return *comm_; }

  CollectiveSupport supports(CollectiveKind kind, DataType type, ReduceOp op) const {
    if (!validType(type)) return {false, "data type " + std::to_string(static_cast<int32_t>(type)) + " is unknown"};
    const bool reducing =
        kind == CollectiveKind::kAllReduce || kind == CollectiveKind::kReduceScatter || kind == CollectiveKind::kReduce;
    if (reducing && !validOp(op))
      return {false, "reduce op " + std::to_string(static_cast<int32_t>(op)) + " is unknown"};
    if ((kind == CollectiveKind::kAllToAll || kind == CollectiveKind::kAllToAllV) &&
        2 * static_cast<uint64_t>(size_) > kMaxGroupEntries) {
      return {false, std::string(collectiveKindName(kind)) + " among " + std::to_string(size_) +
                         " ranks needs more than the " + std::to_string(kMaxGroupEntries) +
                         " group entries one launch carries"};
    }
    if (static_cast<int32_t>(kind) < 0 ||
        static_cast<int32_t>(kind) > static_cast<int32_t>(CollectiveKind::kSendRecv)) {
      return {false, "collective kind is unknown"};
    }
    return {true, ""};
  }

  void allReduce(const void* send, void* recv, uint64_t count, DataType type, ReduceOp op, hipStream_t stream) {
    const char* what = "allreduce";
    checkTypeOp(what, type, &op);
    checkBuffers(what, send, recv, count);
    checkedMul(count, dataTypeBytes(type), what);
    if (count == 0) return;
    const AllReduceAlgorithm algorithm = allReduceAlgorithmFor(count, type);
    if (algorithm == AllReduceAlgorithm::kPort) {
      allReducePort(send, recv, count, type, op, stream);
      return;
    }
    if (algorithm == AllReduceAlgorithm::kOneShotLL || algorithm == AllReduceAlgorithm::kTwoShotLL) {
      reducePackets(CollectiveKind::kAllReduce, send, recv, count, 0, type, op,
                    algorithm == AllReduceAlgorithm::kTwoShotLL, -1, stream);
      return;
    }
    CollectiveArgs a = baseArgs(CollectiveKind::kAllReduce);
    fill(a, send, recv, count, op, 0);
    offer(a, send, count * dataTypeBytes(type), recv, count * dataTypeBytes(type), stream);
    run(a, type, stream);
  }

  // Where the communicator has registrations or registers on first use, the operation starts with the offer
  // exchange (zero copy when every buffer the run touches on another rank is registered: zeroCopyNeeds). Every rank
  // makes the same choice: registerBuffer is collective and autoRegister_ agreed at setup.
  void offer(CollectiveArgs& a, const void* send, uint64_t sendBytes, const void* recv, uint64_t recvBytes,
             hipStream_t stream) {
    if ((liveRegistrations_ == 0 && !autoRegistrations_) || size_ > static_cast<int>(kMaxZeroCopyRanks)) return;
    a.offers = 1;
    if (autoRegistrations_) autoRegistrations_->startOperation(stream);
    a.offer.sendReg = findRegistration(send, sendBytes, &a.offer.sendOffset);
    a.offer.recvReg = findRegistration(recv, recvBytes, &a.offer.recvOffset);
    if (!autoRegistrations_) return;
    // Shares first (in find), then the peers' messages: a peer that sees this rank's answer has seen its shares, so
    // peers that wait (settle) answer each other before they stop. A buffer this call began to share is waited for
    // a little: the peers take it in during the same call, so this call already runs zero-copy (and so does a graph
    // captured after one eager call).
    bool changed = autoRegistrations_->poll(stream);
    const bool unmapped = a.offer.sendReg < 0 || a.offer.recvReg < 0;
    if (unmapped) changed = autoRegistrations_->settle(stream, registerWait_) || changed;
    if (changed && unmapped) {
      a.offer.sendReg = findRegistration(send, sendBytes, &a.offer.sendOffset);
      a.offer.recvReg = findRegistration(recv, recvBytes, &a.offer.recvOffset);
    }
  }

  // registerBuffer's registration holding [p, p + bytes), else one made on first use; -1 when neither.
  int64_t findRegistration(const void* p, uint64_t bytes, uint64_t* offset) {
    const int64_t explicitReg = findExplicitRegistration(p, bytes, offset);
    if (explicitReg >= 0 || !autoRegistrations_) return explicitReg;
    return autoRegistrations_->find(p, bytes, offset);
  }

  // The registerBuffer registration holding [p, p + bytes) and p's offset in it, or -1.
  int64_t findExplicitRegistration(const void* p, uint64_t bytes, uint64_t* offset) const {
    const auto* b = static_cast<const uint8_t*>(p);
    for (uint32_t r = 0; r < kMaxRegistrations; ++r) {
      const Registration& g = registrations_[r];
      if (g.base != nullptr && b >= g.base && static_cast<uint64_t>(b - g.base) <= g.bytes &&
          g.bytes - static_cast<uint64_t>(b - g.base) >= bytes) {
        *offset = static_cast<uint64_t>(b - g.base);
        return registrationKey(r, 0);
      }
    }
    *offset = 0;
    return -1;
  }

  uint32_t registerBuffer(void* buffer, uint64_t bytes) {
    if (buffer == nullptr || bytes == 0) {
      throw Error(ErrorCode::kInvalidArgument, "registerBuffer: null buffer or zero bytes");
    }
    uint32_t id = 0;
    while (id < kMaxRegistrations && registrations_[id].base != nullptr) ++id;
    if (id == kMaxRegistrations) {
      throw Error(ErrorCode::kInvalidUsage, "registerBuffer: " + std::to_string(kMaxRegistrations) +
                                                " buffers are registered already; deregister one first");
    }
    const int tag = kRegistrationTag + static_cast<int>(registrationSeq_++ & 0xffff);
    Registration g;
    g.local = comm_->registerMemory(buffer, bytes, kScratchKind);
    for (int p = 0; p < size_; ++p) {
      if (p != rank_) comm_->sendMemory(g.local, p, tag);
    }
    g.remote.resize(static_cast<size_t>(size_));
    std::string problem;
    for (int p = 0; p < size_; ++p) {
      if (p == rank_) continue;
      g.remote[static_cast<size_t>(p)] =
          recvMapped(p, tag, "buffer", "; host memory must come from allocSharedHostMemory", &problem);
    }
    everyRankMapped(problem, "registerBuffer: ", "a peer's buffer", "");
    g.base = static_cast<const uint8_t*>(buffer);
    g.bytes = bytes;
    for (int p = 0; p < size_; ++p) {
      regTableHost_[static_cast<size_t>(id) * static_cast<size_t>(size_) + static_cast<size_t>(p)] = RegistrationEntry{
          p == rank_ ? static_cast<uint8_t*>(buffer) : static_cast<uint8_t*>(g.remote[static_cast<size_t>(p)].data()),
          0};
    }
    registrations_[id] = std::move(g);
    ++liveRegistrations_;
    publishRegistrations();
    return id;
  }

  void deregisterBuffer(uint32_t id) {
    if (id >= kMaxRegistrations || registrations_[id].base == nullptr) {
      throw Error(ErrorCode::kInvalidArgument, "deregisterBuffer: " + std::to_string(id) + " is not a registration");
    }
#if WEFT_BUILD_GPU_CUDA || WEFT_BUILD_GPU_HIP
    // Kernels still in flight may read the table or the peers' mappings.
    checkGpu(hipDeviceSynchronize(), "deregisterBuffer: waiting for the GPU");
#endif
    comm_->bootstrap().barrier();  // every rank's kernels are done with it before any mapping goes away
    for (int p = 0; p < size_; ++p) {
      regTableHost_[static_cast<size_t>(id) * static_cast<size_t>(size_) + static_cast<size_t>(p)] =
          RegistrationEntry{};
    }
    publishRegistrations();
    registrations_[id] = Registration{};
    --liveRegistrations_;
  }

  uint64_t zeroCopyCalls() const {
#if WEFT_BUILD_GPU_CUDA || WEFT_BUILD_GPU_HIP
    uint64_t runs = 0;
    checkGpu(hipMemcpy(&runs, &planDevice_->runs, sizeof(runs), hipMemcpyDeviceToHost), "reading the zero-copy count");
    return runs;
#else
    return planHost_->runs;
#endif
  }

  // The copy-engine allreduce (port_allreduce.hpp): per piece, the input into this rank's stage region, one launch
  // (puts through the proxy, reduction, puts of the result), the reduced piece out of the out region into recv.
  void allReducePort(const void* send, void* recv, uint64_t count, DataType type, ReduceOp op, hipStream_t stream) {
    checkError();
    const uint64_t es = dataTypeBytes(type);
    const uint64_t n = static_cast<uint64_t>(size_);
    const uint64_t region = regionBytes(options_.scratchBytes, 3);
    const uint64_t slot = region / n / kScratchAlign * kScratchAlign;
    const uint64_t vector = es >= 16 ? 1 : 16 / es;
    const uint64_t slotElements = slot / es;
    const uint64_t pieceMax = slotElements > vector ? n * (slotElements - vector) : 0;
    if (pieceMax == 0) {
      throw Error(ErrorCode::kInvalidUsage, "allreduce (port): scratchBytes " + std::to_string(options_.scratchBytes) +
                                                " leaves no room for " + std::to_string(size_) + " ranks' slots");
    }
    auto* mine = static_cast<uint8_t*>(scratch_.get());
    PortAllReduceArgs a{};
    a.ctx = context_;
    a.op = op;
    a.kind = static_cast<int32_t>(CollectiveKind::kAllReduce);
    a.stageOffset = 0;
    a.inOffset = region;
    a.outOffset = 2 * region;
    a.slotBytes = slot;
#if WEFT_BUILD_GPU_CUDA || WEFT_BUILD_GPU_HIP
    a.channels = portChannelsDevice_;
#else
    a.channels = portChannelsHost_.data();
#endif
    const auto* from = static_cast<const uint8_t*>(send);
    auto* to = static_cast<uint8_t*>(recv);
    for (uint64_t start = 0; start < count; start += pieceMax) {
      a.count = std::min(pieceMax, count - start);
      checkGpu(hipMemcpyAsync(mine + a.stageOffset, from + start * es, a.count * es, hipMemcpyDefault, stream),
               "allreduce (port): copying the input into scratch");
      hipError_t e = hipSuccess;
      try {
        e = launchPortAllReduce(a, type, portBlocks_, hostThreads_, stream);
      } catch (const Error& error) {
        throw Error(error.code(), "allreduce (port): " + error.message());
      }
      if (e != hipSuccess) {
        checkError();
        throw Error(ErrorCode::kGpuError,
                    std::string("allreduce (port): kernel launch failed: ") + hipGetErrorString(e));
      }
      checkGpu(hipMemcpyAsync(to + start * es, mine + a.outOffset, a.count * es, hipMemcpyDefault, stream),
               "allreduce (port): copying the result out of scratch");
    }
  }

  // Whether the port allreduce may be chosen here, and so needs its channels. Not where more than
  // kPortMostRanksPerGpu ranks share a GPU (every rank knows the same maximum): it then runs scatter-gather. Host
  // builds have no such limit (their copies are the proxy's own memcpy).
  bool portWanted() const {
    const bool named = algorithm_ == AllReduceAlgorithm::kPort ||
                       std::any_of(rules_.begin(), rules_.end(),
                                   [](const Rule& r) { return r.algorithm == AllReduceAlgorithm::kPort; });
    if (named && kGpuBuild && mostRanksOnAGpu_ > kPortMostRanksPerGpu) {
      if (rank_ == 0) {
        logWarn(LogSubsys::kColl,
                "collectives: the port allreduce runs scatter-gather instead: {} ranks share one GPU, and beyond {} "
                "the proxy's copies were seen to wait behind the kernel that waits for them (docs/collectives.md)",
                mostRanksOnAGpu_, kPortMostRanksPerGpu);
      }
      return false;
    }
    return named;
  }

  // PortChannels from this rank's scratch into every peer's, served by a proxy of their own that sends every request
  // through the transport (no direct load/store path): the copy engines move the bytes.
  void setUpPortChannels() {
    const int64_t blocks = paramInt("WEFT_COLL_PORT_BLOCKS");
    if (blocks < 0 || blocks > static_cast<int64_t>(kGpuMaxBlocks)) {
      throw Error(ErrorCode::kInvalidArgument, "CollectiveComm: WEFT_COLL_PORT_BLOCKS " + std::to_string(blocks) +
                                                   " outside [0, " + std::to_string(kGpuMaxBlocks) + "]");
    }
    // No more than half the staged kernels' grid: its grid barrier needs every block resident, and SMs must stay
    // free for the one-thread kernels the cuda_ipc transport signals with (a port grid of the whole staged grid
    // left none: the proxy's signal waited behind the kernel waiting for it).
    portBlocks_ = std::min(blocks == 0 ? kDefaultPortBlocks : static_cast<uint32_t>(blocks),
                           std::max<uint32_t>(1, gpuBlocks_ / 2));
    ProxyServiceOptions o = ProxyServiceOptions::fromConfig(comm_->config());
    o.directMaxBytes = 0;
    o.budgetNs = budgetNs_;
    portProxy_ = std::make_unique<ProxyService>(*comm_, o);
    const MemoryId src = portProxy_->addMemory(localScratch_);
    std::vector<PortChannelDeviceHandle> handles(static_cast<size_t>(size_));
    for (int p = 0; p < size_; ++p) {
      if (p == rank_) continue;
      // The connection the rank syncs already use: each cuda_ipc connection has a stream of its own, and streams
      // beyond the device's hardware queues (CUDA_DEVICE_MAX_CONNECTIONS, 8 by default) share queues, where a copy
      // or signal kernel of the proxy could wait behind the very kernel that waits for it.
      const SemaphoreId sem = portProxy_->buildSemaphore(connections_[static_cast<size_t>(p)], kPortSemaphoreTag);
      const MemoryId dst = portProxy_->addMemory(remoteScratch_[static_cast<size_t>(p)]);
      handles[static_cast<size_t>(p)] = portProxy_->portChannel(sem, dst, src).deviceHandle();
    }
#if WEFT_BUILD_GPU_CUDA || WEFT_BUILD_GPU_HIP
    checkGpu(hipMalloc(&portChannelsDevice_, sizeof(PortChannelDeviceHandle) * handles.size()),
             "hipMalloc of the port channels");
    checkGpu(hipMemcpy(portChannelsDevice_, handles.data(), sizeof(PortChannelDeviceHandle) * handles.size(),
                       hipMemcpyHostToDevice),
             "hipMemcpy of the port channels");
#else
    portChannelsHost_ = std::move(handles);
#endif
    portProxy_->start();
  }

  // One entry of the registration table, here and on the GPU, before returning. Kernels in flight never read it:
  // an entry changes only while no offer names its slot and generation.
  void writeTableEntry(uint32_t slot, int owner, uint8_t* base, uint64_t generation) {
    const size_t at = static_cast<size_t>(slot) * static_cast<size_t>(size_) + static_cast<size_t>(owner);
    regTableHost_[at] = RegistrationEntry{base, generation};
#if WEFT_BUILD_GPU_CUDA || WEFT_BUILD_GPU_HIP
    if (tableStream_ == nullptr) {
      checkGpu(hipStreamCreateWithFlags(&tableStream_, hipStreamNonBlocking), "creating the registration table stream");
    }
    checkGpu(hipMemcpyAsync(regTableDevice_ + at, &regTableHost_[at], sizeof(RegistrationEntry), hipMemcpyHostToDevice,
                            tableStream_),
             "writing a registration table entry");
    checkGpu(hipStreamSynchronize(tableStream_), "waiting for a registration table entry");
#endif
  }

  void publishRegistrations() {
#if WEFT_BUILD_GPU_CUDA || WEFT_BUILD_GPU_HIP
    checkGpu(hipMemcpy(regTableDevice_, regTableHost_.data(), sizeof(RegistrationEntry) * regTableHost_.size(),
                       hipMemcpyHostToDevice),
             "hipMemcpy of the registration table");
    checkGpu(hipDeviceSynchronize(), "waiting for the registration table");
#endif
  }

  int ranksPerGpu() const { return static_cast<int>(mostRanksOnAGpu_); }

  AllReduceAlgorithm allReduceAlgorithmFor(uint64_t count, DataType type) const {
    const AllReduceAlgorithm a = chooseAllReduce(count, type);
    return a == AllReduceAlgorithm::kPort && !portProxy_ ? AllReduceAlgorithm::kScatterGather : a;
  }

  AllReduceAlgorithm chooseAllReduce(uint64_t count, DataType type) const {
    if (algorithm_ == AllReduceAlgorithm::kPort) return algorithm_;
    if (oneShotLimitBytes_ == 0) return AllReduceAlgorithm::kScatterGather;
    if (algorithm_ != AllReduceAlgorithm::kAuto) return algorithm_;
    const uint64_t es = dataTypeBytes(type);
    if (es == 0) return AllReduceAlgorithm::kScatterGather;
    for (const Rule& rule : rules_) {
      if (rule.maxBytes == 0 || count <= rule.maxBytes / es) return rule.algorithm;
    }
    // One launch, and no larger than the limit: a bigger message moves 2(n-1) times its size in packets per rank,
    // where the staged path's fixed cost (three rank syncs) no longer dominates. More than two ranks: the one-shot
    // up to kOneShotManyRanksBytes at most, then the two-shot, up to kTwoShotBudgetBytes / n.
    const uint64_t oneShotMost = size_ > 2 ? std::min(oneShotLimitBytes_, kOneShotManyRanksBytes) : oneShotLimitBytes_;
    if (count <= oneShotMost / es) return AllReduceAlgorithm::kOneShotLL;
    const uint64_t twoShotMost = kTwoShotBudgetBytes / static_cast<uint64_t>(size_);
    return size_ > 2 && count <= twoShotMost / es ? AllReduceAlgorithm::kTwoShotLL : AllReduceAlgorithm::kScatterGather;
  }

  void allGather(const void* send, void* recv, uint64_t sendCount, DataType type, hipStream_t stream) {
    const char* what = "allgather";
    checkTypeOp(what, type, nullptr);
    checkBuffers(what, send, recv, sendCount);
    checkedMul(checkedMul(sendCount, dataTypeBytes(type), what), static_cast<uint64_t>(size_), what);
    if (sendCount == 0) return;
    const uint64_t bytes = sendCount * dataTypeBytes(type);
    if (oneShotLimitBytes_ != 0 && bytes <= oneShotLimitBytes_) {
      gatherPackets(CollectiveKind::kAllGather, send, recv, bytes, 0, bytes, -1, stream);
      return;
    }
    CollectiveArgs a = baseArgs(CollectiveKind::kAllGather);
    fill(a, send, recv, sendCount, ReduceOp::kSum, 0);
    offer(a, send, bytes, recv, bytes * static_cast<uint64_t>(size_), stream);
    run(a, type, stream);
  }

  void reduceScatter(const void* send, void* recv, uint64_t recvCount, DataType type, ReduceOp op, hipStream_t stream) {
    const char* what = "reducescatter";
    checkTypeOp(what, type, &op);
    checkBuffers(what, send, recv, recvCount);
    checkedMul(checkedMul(recvCount, dataTypeBytes(type), what), static_cast<uint64_t>(size_), what);
    if (recvCount == 0) return;
    if (oneShotLimitBytes_ != 0 && recvCount * dataTypeBytes(type) <= oneShotLimitBytes_) {
      reducePackets(CollectiveKind::kReduceScatter, send, recv, recvCount, recvCount * dataTypeBytes(type), type, op,
                    false, -1, stream);
      return;
    }
    CollectiveArgs a = baseArgs(CollectiveKind::kReduceScatter);
    fill(a, send, recv, recvCount, op, 0);
    const uint64_t recvBytes = recvCount * dataTypeBytes(type);
    offer(a, send, recvBytes * static_cast<uint64_t>(size_), recv, recvBytes, stream);
    run(a, type, stream);
  }

  void broadcast(const void* send, void* recv, uint64_t count, DataType type, int root, hipStream_t stream) {
    const char* what = "broadcast";
    checkTypeOp(what, type, nullptr);
    checkRoot(what, root);
    if (count > 0 && recv == nullptr) throw Error(ErrorCode::kInvalidArgument, "broadcast: null recv buffer");
    if (count > 0 && rank_ == root && send == nullptr) {
      throw Error(ErrorCode::kInvalidArgument, "broadcast: null send buffer on the root");
    }
    const uint64_t bytes = checkedMul(count, dataTypeBytes(type), what);
    if (count == 0) return;
    if (oneShotLimitBytes_ != 0 && bytes <= oneShotLimitBytes_) {
      gatherPackets(CollectiveKind::kBroadcast, send, recv, bytes, 0, 0, root, stream);
      return;
    }
    CollectiveArgs a = baseArgs(CollectiveKind::kBroadcast);
    fill(a, send, recv, count, ReduceOp::kSum, root);
    offer(a, send, count * dataTypeBytes(type), recv, count * dataTypeBytes(type), stream);
    run(a, type, stream);
  }

  void reduce(const void* send, void* recv, uint64_t count, DataType type, ReduceOp op, int root, hipStream_t stream) {
    const char* what = "reduce";
    checkTypeOp(what, type, &op);
    checkRoot(what, root);
    if (count > 0 && send == nullptr) throw Error(ErrorCode::kInvalidArgument, "reduce: null send buffer");
    if (count > 0 && rank_ == root && recv == nullptr) {
      throw Error(ErrorCode::kInvalidArgument, "reduce: null recv buffer on the root");
    }
    const uint64_t bytes = checkedMul(count, dataTypeBytes(type), what);
    if (count == 0) return;
    if (oneShotLimitBytes_ != 0 && bytes <= oneShotLimitBytes_) {
      reducePackets(CollectiveKind::kReduce, send, recv, count, 0, type, op, false, root, stream);
      return;
    }
    CollectiveArgs a = baseArgs(CollectiveKind::kReduce);
    fill(a, send, recv, count, op, root);
    offer(a, send, count * dataTypeBytes(type), recv, count * dataTypeBytes(type), stream);
    run(a, type, stream);
  }

  void allToAll(const void* send, void* recv, uint64_t count, DataType type, hipStream_t stream) {
    const char* what = "alltoall";
    checkTypeOp(what, type, nullptr);
    checkBuffers(what, send, recv, count);
    checkGroupSize(CollectiveKind::kAllToAll);
    const uint64_t bytes = checkedMul(count, dataTypeBytes(type), what);
    checkedMul(bytes, static_cast<uint64_t>(size_), what);
    if (count == 0) return;
    const auto* s8 = static_cast<const uint8_t*>(send);
    const auto* r8 = static_cast<const uint8_t*>(recv);
    const uint64_t all = bytes * static_cast<uint64_t>(size_);
    const bool overlap = s8 < r8 + all && r8 < s8 + all;
    // Small blocks go one-shot as packets (in place only when send is recv: the packet worker reads each packet of
    // every block before writing it, which a shifted overlap would break).
    if (oneShotLimitBytes_ != 0 && bytes <= oneShotLimitBytes_ && (!overlap || s8 == r8)) {
      gatherPackets(CollectiveKind::kAllToAll, send, recv, bytes, bytes, bytes, -1, stream);
      return;
    }
    CollectiveArgs a = baseArgs(CollectiveKind::kAllToAll);
    for (int p = 0; p < size_; ++p) {
      const uint64_t off = bytes * static_cast<uint64_t>(p);
      addEntry(a, const_cast<uint8_t*>(static_cast<const uint8_t*>(send)) + off, bytes, p, true);
      addEntry(a, static_cast<uint8_t*>(recv) + off, bytes, p, false);
    }
    // The staged path reads the entries; the zero-copy one reads send, recv and count. It pulls block `rank` of
    // every peer's send into recv, so a rank whose buffers overlap (in place) offers nothing and every rank stages.
    fill(a, send, recv, count, ReduceOp::kSum, 0);
    offer(a, send, all, recv, all, stream);
    if (overlap) a.offer.sendReg = -1;
    run(a, type, stream);
  }

  void allToAllV(const void* send, const uint64_t* sendCounts, const uint64_t* sendDispls, void* recv,
                 const uint64_t* recvCounts, const uint64_t* recvDispls, DataType type, hipStream_t stream) {
    const char* what = "alltoallv";
    checkTypeOp(what, type, nullptr);
    if (sendCounts == nullptr || sendDispls == nullptr || recvCounts == nullptr || recvDispls == nullptr) {
      throw Error(ErrorCode::kInvalidArgument, "alltoallv: null count or displacement array");
    }
    checkGroupSize(CollectiveKind::kAllToAllV);
    const uint64_t es = dataTypeBytes(type);
    CollectiveArgs a = baseArgs(CollectiveKind::kAllToAllV);
    uint64_t total = 0;
    for (int p = 0; p < size_; ++p) {
      for (int dir = 0; dir < 2; ++dir) {
        const bool isSend = dir == 0;
        const uint64_t count = isSend ? sendCounts[p] : recvCounts[p];
        const uint64_t displ = isSend ? sendDispls[p] : recvDispls[p];
        const void* base = isSend ? send : recv;
        if (count == 0) continue;
        if (base == nullptr) {
          throw Error(ErrorCode::kInvalidArgument, std::string("alltoallv: null ") + (isSend ? "send" : "recv") +
                                                       " buffer with a count for rank " + std::to_string(p));
        }
        const uint64_t bytes = checkedMul(count, es, what);
        const uint64_t off = checkedMul(displ, es, what);
        if (off > std::numeric_limits<uint64_t>::max() - bytes) {
          throw Error(ErrorCode::kInvalidArgument,
                      "alltoallv: displacement plus count overflows for rank " + std::to_string(p));
        }
        addEntry(a, const_cast<uint8_t*>(static_cast<const uint8_t*>(base)) + off, bytes, p, isSend);
        total += bytes;
      }
    }
    if (total == 0) return;
    run(a, type, stream);
  }

  void sendRecv(std::span<const PointToPoint> ops, hipStream_t stream) {
    CollectiveArgs a = baseArgs(CollectiveKind::kSendRecv);
    if (ops.size() > kMaxGroupEntries) {
      throw Error(ErrorCode::kInvalidArgument, "sendrecv: a group of " + std::to_string(ops.size()) +
                                                   " operations exceeds the limit of " +
                                                   std::to_string(kMaxGroupEntries));
    }
    for (size_t i = 0; i < ops.size(); ++i) {
      const PointToPoint& op = ops[i];
      const std::string where = "sendrecv: operation " + std::to_string(i);
      if (!validType(op.type)) throw Error(ErrorCode::kInvalidArgument, where + ": unknown data type");
      if (op.direction != PointToPoint::Direction::kSend && op.direction != PointToPoint::Direction::kRecv) {
        throw Error(ErrorCode::kInvalidArgument, where + ": unknown direction");
      }
      if (op.peer < 0 || op.peer >= size_) {
        throw Error(ErrorCode::kInvalidArgument,
                    where + ": peer " + std::to_string(op.peer) + " outside [0, " + std::to_string(size_) + ")");
      }
      if (op.count > 0 && op.buffer == nullptr) throw Error(ErrorCode::kInvalidArgument, where + ": null buffer");
      const uint64_t bytes = checkedMul(op.count, dataTypeBytes(op.type), "sendrecv");
      if (bytes == 0) continue;
      addEntry(a, static_cast<uint8_t*>(op.buffer), bytes, op.peer, op.direction == PointToPoint::Direction::kSend);
    }
    if (a.groupCount == 0) return;
    run(a, DataType::kUint8, stream);
  }

  void checkError() const {
    if (portProxy_) {
      portProxy_->checkError();
      if (portProxy_->errors().hasError()) {
        throw Error(ErrorCode::kTimeout, "allreduce (port): " + portProxy_->errors().describe());
      }
    }
    if (!errors_.hasError()) return;
    const DeviceErrorRecord& r = *errors_.hostRecord();
    const char* op = r.channel >= 0 && r.channel <= static_cast<int32_t>(CollectiveKind::kSendRecv)
                         ? collectiveKindName(static_cast<CollectiveKind>(r.channel))
                         : "collective";
    // The record's channel field carries the collective kind (see rankSync).
    throw Error(ErrorCode::kTimeout, std::string(op) + ": " + errors_.describe());
  }

 private:
  // LL16 launches of at most oneShotLimitBytes_ (one-shot) or twoShotLimitBytes_ (two-shot) each: an allreduce
  // (sendStride 0, root -1), a one-shot reduce (root: the rank that writes recv) or a one-shot reduceScatter of
  // `count` elements per rank, whose input for rank p starts at send + p * sendStride.
  void reducePackets(CollectiveKind kind, const void* send, void* recv, uint64_t count, uint64_t sendStride,
                     DataType type, ReduceOp op, bool twoShot, int root, hipStream_t stream) {
    const char* what = collectiveKindName(kind);
    const uint64_t es = dataTypeBytes(type);
    const uint64_t chunk = (twoShot ? twoShotLimitBytes_ : oneShotLimitBytes_) / es;
    OneShotArgs a{};
    a.ctx = context_;
    a.state = oneShotState_;
    a.slotBytes = oneShotSlotBytes_;
    a.op = op;
    a.kind = static_cast<int32_t>(kind);
    a.root = root;
    a.sendStride = sendStride;
    for (int p = 0; p < size_; ++p) a.packets[p] = packetPeers_[static_cast<size_t>(p)];
    for (uint64_t start = 0; start < count; start += chunk) {
      a.count = count - start < chunk ? count - start : chunk;
      a.send = static_cast<const uint8_t*>(send) + start * es;
      a.recv = static_cast<uint8_t*>(recv) + start * es;
      checkError();
      hipError_t e = hipSuccess;
      try {
        e = launchAllReducePackets(a, type, twoShot, packetGrids_, hostThreads_, stream);
      } catch (const Error& error) {
        throw Error(error.code(), std::string(what) + ": " + error.message());
      }
      if (e != hipSuccess) {
        checkError();
        throw Error(ErrorCode::kGpuError, std::string(what) + ": kernel launch failed: " + hipGetErrorString(e));
      }
    }
  }

  // One one-shot launch of allGatherOneShot (bytes <= oneShotLimitBytes_): an allgather of every rank's `bytes`
  // (sendStride 0, recvStride bytes), an allToAll of blocks of `bytes` (both strides bytes) or a broadcast of the
  // root's `bytes` (both strides 0).
  void gatherPackets(CollectiveKind kind, const void* send, void* recv, uint64_t bytes, uint64_t sendStride,
                     uint64_t recvStride, int root, hipStream_t stream) {
    OneShotArgs a{};
    a.ctx = context_;
    a.state = oneShotState_;
    a.slotBytes = oneShotSlotBytes_;
    a.kind = static_cast<int32_t>(kind);
    a.root = root;
    a.sendStride = sendStride;
    for (int p = 0; p < size_; ++p) a.packets[p] = packetPeers_[static_cast<size_t>(p)];
    a.count = bytes;
    a.send = static_cast<const uint8_t*>(send);
    a.recv = static_cast<uint8_t*>(recv);
    checkError();
    hipError_t e = hipSuccess;
    try {
      e = launchAllGatherOneShot(a, recvStride, packetGrids_, hostThreads_, stream);
    } catch (const Error& error) {
      throw Error(error.code(), std::string(collectiveKindName(kind)) + ": " + error.message());
    }
    if (e != hipSuccess) {
      checkError();
      throw Error(ErrorCode::kGpuError,
                  std::string(collectiveKindName(kind)) + ": kernel launch failed: " + hipGetErrorString(e));
    }
  }

  // The packet buffers of the one-shot path: 2 parities x size_ source slots of oneShotSlotBytes_ each, zeroed (no
  // flag is 0), registered and mapped by every peer; and the epoch state.
  void allocatePackets() {
    if (oneShotLimitBytes_ == 0) return;
    oneShotSlotBytes_ =
        (packetBufferBytes<LL16Packet>(oneShotLimitBytes_) + kScratchAlign - 1) / kScratchAlign * kScratchAlign;
    const uint64_t bytes = 2 * static_cast<uint64_t>(size_) * oneShotSlotBytes_;
#if WEFT_BUILD_GPU_CUDA || WEFT_BUILD_GPU_HIP
    void* p = nullptr;
    checkGpu(hipMalloc(&p, bytes), "hipMalloc of the one-shot packet buffer");
    packets_ = std::shared_ptr<void>(p, [](void* q) { (void)hipFree(q); });
    checkGpu(hipMemset(p, 0, bytes), "hipMemset of the one-shot packet buffer");
    checkGpu(hipMalloc(&oneShotDevice_, sizeof(OneShotState)), "hipMalloc of the one-shot epoch");
    checkGpu(hipMemset(oneShotDevice_, 0, sizeof(OneShotState)), "hipMemset of the one-shot epoch");
    oneShotState_ = oneShotDevice_;
#else
    packets_ = allocSharedHostMemory(bytes);  // memfd memory: zero-filled
    oneShotState_ = &oneShotHost_;
#endif
    localPackets_ = comm_->registerMemory(packets_.get(), bytes, kScratchKind);
    for (int p = 0; p < size_; ++p) {
      if (p != rank_) comm_->sendMemory(localPackets_, p, kPacketTag);
    }
    packetPeers_.assign(static_cast<size_t>(size_), nullptr);
    remotePackets_.resize(static_cast<size_t>(size_));
    for (int p = 0; p < size_; ++p) {
      if (p == rank_) {
        packetPeers_[static_cast<size_t>(p)] = static_cast<uint8_t*>(packets_.get());
        continue;
      }
      RegisteredMemory remote = comm_->recvMemory(p, kPacketTag);
      if (remote.data() == nullptr || remote.size() < bytes) {
        throw Error(ErrorCode::kInvalidArgument,
                    "CollectiveComm: rank " + std::to_string(p) + "'s one-shot packet buffer is unmapped or " +
                        std::to_string(remote.size()) + " bytes, this rank's is " + std::to_string(bytes) +
                        " (oneShotMaxBytes must match on every rank)");
      }
      packetPeers_[static_cast<size_t>(p)] = static_cast<uint8_t*>(remote.data());
      remotePackets_[static_cast<size_t>(p)] = std::move(remote);
    }
  }

  // What decides allReduceAlgorithmFor, hashed (FNV-1a): the forced algorithm, the one-shot limit and the rules.
  uint64_t selectionFingerprint() const {
    uint64_t h = 0xcbf29ce484222325ull;
    auto mix = [&h](uint64_t v) {
      for (int i = 0; i < 8; ++i) {
        h ^= (v >> (8 * i)) & 0xffu;
        h *= 0x100000001b3ull;
      }
    };
    mix(static_cast<uint64_t>(algorithm_));
    mix(oneShotLimitBytes_);
    for (const Rule& rule : rules_) {
      mix(rule.maxBytes);
      mix(static_cast<uint64_t>(rule.algorithm));
    }
    return h;
  }

  // Which ranks share this rank's GPU (same host, same PCI bus id; host builds: same host, whose memory they share),
  // and the most on any one GPU: an allGather every rank makes, so the latter is the same on every rank.
  void resolvePlacement() {
    const uint64_t key = comm_->gpuPlacementKey();
    std::vector<uint64_t> keys(static_cast<size_t>(size_));
    keys[static_cast<size_t>(rank_)] = key;
    comm_->bootstrap().allGather(keys.data(), sizeof(uint64_t));
    ranksOnGpu_ = static_cast<uint32_t>(std::count(keys.begin(), keys.end(), key));
    for (uint64_t k : keys) {
      mostRanksOnAGpu_ = std::max(mostRanksOnAGpu_, static_cast<uint32_t>(std::count(keys.begin(), keys.end(), k)));
    }
  }

  // Grid of the staged kernels: as options or WEFT_COLL_GPU_BLOCKS say, else sized by the ranks sharing this GPU.
  uint32_t resolveGpuBlocks() {
    int64_t want = options_.gpuBlocks;
    if (want == 0) want = paramInt("WEFT_COLL_GPU_BLOCKS");
    if (want < 0 || want > static_cast<int64_t>(kGpuMaxBlocks)) {
      throw Error(ErrorCode::kInvalidArgument,
                  "CollectiveComm: gpuBlocks " + std::to_string(want) +
                      " (CollectiveOptions::gpuBlocks or WEFT_COLL_GPU_BLOCKS) outside [0, " +
                      std::to_string(kGpuMaxBlocks) + "]");
    }
#if WEFT_BUILD_GPU_CUDA || WEFT_BUILD_GPU_HIP
    const uint32_t limit = collectiveGridBlocks(ranksOnGpu_);
    if (want == 0) return limit;
    if (want > static_cast<int64_t>(limit)) {
      logWarn(LogSubsys::kColl,
              "collectives: rank {}: {} blocks asked for, {} used: that is what this GPU holds resident of the "
              "staged kernels, divided among the {} ranks sharing it; more would leave blocks unscheduled behind "
              "spinning ones",
              rank_, want, limit, ranksOnGpu_);
      return limit;
    }
    return static_cast<uint32_t>(want);
#else
    return static_cast<uint32_t>(want == 0 ? 1 : want);
#endif
  }

  // The LL16 grids' caps: WEFT_COLL_ONESHOT_BLOCKS (0: kGpuMaxBlocks) and, per kernel, what the GPU holds resident
  // of it beside the other ranks sharing it (blocks spin on packets peers' blocks write): on sm_90 4 ranks get 99
  // blocks of the small kernels but only 33 of the heaviest unrolled one (int8, 210 registers). Ranks may differ:
  // the LL16 kernels have no grid barrier and pair no blocks across ranks.
  PacketGridCaps resolvePacketGrids(uint32_t packetsPerThread) const {
    const int64_t want = paramInt("WEFT_COLL_ONESHOT_BLOCKS");
    if (want < 0 || want > static_cast<int64_t>(kGpuMaxBlocks)) {
      throw Error(ErrorCode::kInvalidArgument, "CollectiveComm: WEFT_COLL_ONESHOT_BLOCKS " + std::to_string(want) +
                                                   " outside [0, " + std::to_string(kGpuMaxBlocks) + "]");
    }
    const uint32_t most = want == 0 ? kGpuMaxBlocks : static_cast<uint32_t>(want);
    PacketGridCaps caps = packetGridCaps(ranksOnGpu_, most, packetsPerThread);
#if WEFT_BUILD_GPU_CUDA || WEFT_BUILD_GPU_HIP
    if (want != 0 && caps.small < most) {
      logWarn(LogSubsys::kColl,
              "collectives: rank {}: {} LL16 blocks asked for, {} used by the small kernels (fewer by some unrolled "
              "ones): what this GPU holds resident of each, divided among the {} ranks sharing it",
              rank_, want, caps.small, ranksOnGpu_);
    }
#endif
    return caps;
  }

  // Packets per thread the unrolled LL16 grids aim for below their caps: WEFT_COLL_LL_PACKETS_PER_THREAD, 1..16
  // (0: 2). Ranks may differ, as for the caps.
  static uint32_t resolvePacketsPerThread() {
    const int64_t want = paramInt("WEFT_COLL_LL_PACKETS_PER_THREAD");
    if (want < 0 || want > 16) {
      throw Error(ErrorCode::kInvalidArgument,
                  "CollectiveComm: WEFT_COLL_LL_PACKETS_PER_THREAD " + std::to_string(want) + " outside [0, 16]");
    }
    return static_cast<uint32_t>(want);
  }

  // The scratch allocation: the staging regions, then the block-pair flags (kMaxPairBlocks rows of one flag per
  // rank, written by peers) and this rank's round counter per block.
  uint64_t pairFlagCount() const { return uint64_t{kMaxPairBlocks} * static_cast<uint64_t>(size_); }
  uint64_t pairFlagsOffset() const {
    return (options_.scratchBytes + kScratchAlign - 1) / kScratchAlign * kScratchAlign;
  }
  // Then the offers peers write (zero-copy runs), one per rank.
  uint64_t offersOffset() const {
    const uint64_t end = pairFlagsOffset() + (pairFlagCount() + kMaxPairBlocks) * sizeof(uint64_t);
    return (end + kScratchAlign - 1) / kScratchAlign * kScratchAlign;
  }
  uint64_t scratchAllocBytes() const { return offersOffset() + static_cast<uint64_t>(size_) * sizeof(ZeroCopyOffer); }
  uint64_t* pairFlagsOf(uint8_t* scratch) const { return reinterpret_cast<uint64_t*>(scratch + pairFlagsOffset()); }

  void allocate() {
#if WEFT_BUILD_GPU_CUDA || WEFT_BUILD_GPU_HIP
    void* p = nullptr;
    checkGpu(hipMalloc(&p, scratchAllocBytes()), "hipMalloc of collective scratch");
    scratch_ = std::shared_ptr<void>(p, [](void* q) { (void)hipFree(q); });
    checkGpu(hipMemset(p, 0, scratchAllocBytes()), "hipMemset of collective scratch");
#else
    scratch_ = allocSharedHostMemory(scratchAllocBytes());
#endif
    localScratch_ = comm_->registerMemory(scratch_.get(), scratchAllocBytes(), kScratchKind);
  }

  // Receives rank p's memory sent under `tag`. Where this rank cannot load/store it (the transport has no such path,
  // or cannot even import it: a network transport and GPU memory it cannot write into), records why in `problem`
  // (the first failure only) and returns what it got, for everyRankMapped to decide on every rank alike.
  RegisteredMemory recvMapped(int p, int tag, const char* what, const char* hint, std::string* problem) {
    const std::string whose = "rank " + std::to_string(rank_) + " cannot map rank " + std::to_string(p) + "'s " + what;
    RegisteredMemory remote;
    try {
      remote = comm_->recvMemory(p, tag);
    } catch (const Error& e) {
      if (e.code() != ErrorCode::kNotSupported) throw;
      if (problem->empty()) *problem = whose + " (" + e.what() + hint + ")";
      return remote;
    }
    if (remote.data() == nullptr && problem->empty()) {
      *problem = whose + " (transport " + comm_->transportFor(p, kScratchKind) + " has no load/store path" + hint + ")";
    }
    return remote;
  }

  // Every rank learns whether every rank mapped what its peers shared (`problem` is this rank's failure, "" when
  // none), so that all throw kNotSupported alike or none does.
  void everyRankMapped(const std::string& problem, const std::string& prefix, const std::string& what,
                       const std::string& suffix) {
    std::vector<uint8_t> ok(static_cast<size_t>(size_));
    ok[static_cast<size_t>(rank_)] = problem.empty() ? 1 : 0;
    comm_->bootstrap().allGather(ok.data(), 1);
    for (int p = 0; p < size_; ++p) {
      if (ok[static_cast<size_t>(p)] == 0) {
        throw Error(
            ErrorCode::kNotSupported,
            prefix + (problem.empty() ? "rank " + std::to_string(p) + " cannot map " + what : problem) + suffix);
      }
    }
  }

  void connectPeers() {
    for (int p = 0; p < size_; ++p) {
      if (p != rank_) comm_->sendMemory(localScratch_, p, kScratchTag);
    }
    std::vector<PeerSlot> slots(static_cast<size_t>(size_));
    const DeviceWaitOptions waitOptions{errors_.deviceRecord(), -1, budgetNs_};
    remoteScratch_.resize(static_cast<size_t>(size_));
    connections_.resize(static_cast<size_t>(size_));
    std::string problem;
    for (int p = 0; p < size_; ++p) {
      if (p == rank_) continue;
      RegisteredMemory& remote = remoteScratch_[static_cast<size_t>(p)];
      remote = recvMapped(p, kScratchTag, "scratch", "", &problem);
    }
    // Decided before anyone connects, so that all stop alike (a communicator spanning hosts, or one whose config
    // picks a network transport) instead of some waiting for peers that stopped.
    everyRankMapped(problem, "CollectiveComm: ", "a peer's scratch",
                    "; collectives need every rank's memory mapped by every other (one host)");
    for (int p = 0; p < size_; ++p) {
      PeerSlot& slot = slots[static_cast<size_t>(p)];
      slot = PeerSlot{};
      if (p == rank_) {
        slot.scratch = static_cast<uint8_t*>(scratch_.get());
        slot.pairFlags = pairFlagsOf(slot.scratch);
        continue;
      }
      const RegisteredMemory& remote = remoteScratch_[static_cast<size_t>(p)];
      if (remote.size() != scratchAllocBytes()) {
        throw Error(ErrorCode::kInvalidArgument, "CollectiveComm: rank " + std::to_string(p) + "'s scratch is " +
                                                     std::to_string(remote.size()) + " bytes, this rank's is " +
                                                     std::to_string(options_.scratchBytes) +
                                                     " (scratchBytes must match on every rank)");
      }
      connections_[static_cast<size_t>(p)] = comm_->connect(p, kConnectTag, kScratchKind);
      auto sem = std::make_shared<MemoryDevice2DeviceSemaphore>(*comm_, connections_[static_cast<size_t>(p)],
                                                                kSemaphoreTag, kScratchKind);
      slot.scratch = static_cast<uint8_t*>(remote.data());
      slot.pairFlags = pairFlagsOf(slot.scratch);
      slot.sem = sem->deviceHandle(waitOptions);
      semaphores_.push_back(std::move(sem));
    }
#if WEFT_BUILD_GPU_CUDA || WEFT_BUILD_GPU_HIP
    checkGpu(hipMalloc(&peersDevice_, sizeof(PeerSlot) * slots.size()), "hipMalloc of the collective peer table");
    checkGpu(hipMemcpy(peersDevice_, slots.data(), sizeof(PeerSlot) * slots.size(), hipMemcpyHostToDevice),
             "hipMemcpy of the collective peer table");
    checkGpu(hipMalloc(&barrierDevice_, sizeof(GridBarrierState)), "hipMalloc of the collective grid barrier");
    checkGpu(hipMemset(barrierDevice_, 0, sizeof(GridBarrierState)), "hipMemset of the collective grid barrier");
    context_.peers = peersDevice_;
    context_.barrier = barrierDevice_;
#else
    peersHost_ = std::move(slots);
    context_.peers = peersHost_.data();
    context_.barrier = &barrierHost_;
#endif
    context_.scratchBytes = options_.scratchBytes;
    context_.pairFlags = pairFlagsOf(static_cast<uint8_t*>(scratch_.get()));
    context_.pairRounds = context_.pairFlags + pairFlagCount();
    context_.offersOffset = offersOffset();
    regTableHost_.assign(static_cast<size_t>(kRegistrationSlots) * static_cast<size_t>(size_), RegistrationEntry{});
#if WEFT_BUILD_GPU_CUDA || WEFT_BUILD_GPU_HIP
    checkGpu(hipMalloc(&regTableDevice_, sizeof(RegistrationEntry) * regTableHost_.size()),
             "hipMalloc of the registration table");
    checkGpu(hipMemset(regTableDevice_, 0, sizeof(RegistrationEntry) * regTableHost_.size()),
             "hipMemset of the registration table");
    checkGpu(hipMalloc(&planDevice_, sizeof(ZeroCopyPlan)), "hipMalloc of the zero-copy plan");
    checkGpu(hipMemset(planDevice_, 0, sizeof(ZeroCopyPlan)), "hipMemset of the zero-copy plan");
    checkGpu(hipMalloc(&offerRoundDevice_, sizeof(uint64_t) * kMaxPairBlocks), "hipMalloc of the offer rounds");
    checkGpu(hipMemset(offerRoundDevice_, 0, sizeof(uint64_t) * kMaxPairBlocks), "hipMemset of the offer rounds");
    checkGpu(hipDeviceSynchronize(), "waiting for the collective setup's fills");
    context_.regTable = regTableDevice_;
    context_.plan = planDevice_;
    context_.offerRounds = offerRoundDevice_;
#else
    planHost_ = std::make_unique<ZeroCopyPlan>();
    context_.regTable = regTableHost_.data();
    context_.plan = planHost_.get();
    context_.offerRounds = offerRoundsHost_.data();
#endif
    context_.budgetNs = budgetNs_;
    context_.record = errors_.deviceRecord();
    context_.rank = rank_;
    context_.size = size_;
#if WEFT_BUILD_GPU_CUDA || WEFT_BUILD_GPU_HIP
    context_.oneGpu = ranksOnGpu_ == static_cast<uint32_t>(size_) ? 1u : 0u;
#endif
    allocatePackets();
    if (autoRegister_) {
      autoRegistrations_ =
          std::make_unique<AutoRegistrations>(*comm_, kMaxRegistrations, kMaxAutoRegistrations, kScratchKind,
                                              [this](uint32_t slot, int owner, uint8_t* base, uint64_t generation) {
                                                writeTableEntry(slot, owner, base, generation);
                                              });
    }
    // Every rank's scratch, packet buffers and semaphores exist before any rank's first operation signals into them.
    comm_->bootstrap().barrier();
  }

  void checkTypeOp(const char* what, DataType type, const ReduceOp* op) const {
    if (!validType(type)) {
      throw Error(ErrorCode::kInvalidArgument,
                  std::string(what) + ": unknown data type " + std::to_string(static_cast<int32_t>(type)));
    }
    if (op != nullptr && !validOp(*op)) {
      throw Error(ErrorCode::kInvalidArgument,
                  std::string(what) + ": unknown reduce op " + std::to_string(static_cast<int32_t>(*op)));
    }
  }

  static void checkBuffers(const char* what, const void* send, const void* recv, uint64_t count) {
    if (count > 0 && send == nullptr)
      throw Error(ErrorCode::kInvalidArgument, std::string(what) + ": null send buffer");
    if (count > 0 && recv == nullptr)
      throw Error(ErrorCode::kInvalidArgument, std::string(what) + ": null recv buffer");
  }

  void checkRoot(const char* what, int root) const {
    if (root < 0 || root >= size_) {
      throw Error(ErrorCode::kInvalidArgument,
                  std::string(what) + ": root " + std::to_string(root) + " outside [0, " + std::to_string(size_) + ")");
    }
  }

  void checkGroupSize(CollectiveKind kind) const {
    CollectiveSupport s = supports(kind, DataType::kUint8, ReduceOp::kSum);
    if (!s.native) throw Error(ErrorCode::kNotSupported, s.reason);
  }

  CollectiveArgs baseArgs(CollectiveKind kind) const {
    CollectiveArgs a{};
    a.ctx = context_;
    a.kind = static_cast<int32_t>(kind);
    return a;
  }

  static void fill(CollectiveArgs& a, const void* send, void* recv, uint64_t count, ReduceOp op, int root) {
    a.send = static_cast<const uint8_t*>(send);
    a.recv = static_cast<uint8_t*>(recv);
    a.count = count;
    a.op = op;
    a.root = root;
  }

  static void addEntry(CollectiveArgs& a, uint8_t* buffer, uint64_t bytes, int peer, bool isSend) {
    if (bytes == 0) return;
    a.group[a.groupCount++] = GroupEntry{buffer, bytes, peer, isSend ? 1u : 0u};
  }

  void run(const CollectiveArgs& a, DataType type, hipStream_t stream) {
    const auto kind = static_cast<CollectiveKind>(a.kind);
    checkError();  // an earlier kernel's timeout: the channels are out of step, refuse to go on
    hipError_t e = hipSuccess;
    try {
      e = launchCollective(a, type, gpuBlocks_, hostThreads_, stream);
    } catch (const Error& error) {
      throw Error(error.code(), std::string(collectiveKindName(kind)) + ": " + error.message());
    }
    if (a.offers != 0 && autoRegistrations_) autoRegistrations_->launched();
    if (e != hipSuccess) {
      checkError();
      throw Error(ErrorCode::kGpuError,
                  std::string(collectiveKindName(kind)) + ": kernel launch failed: " + hipGetErrorString(e));
    }
  }

  std::shared_ptr<Communicator> comm_;
  CollectiveOptions options_;
  int rank_ = 0;
  int size_ = 1;
  uint64_t budgetNs_ = 0;
  DeviceErrorBlock errors_;
  std::shared_ptr<void> scratch_;
  RegisteredMemory localScratch_;
  std::vector<RegisteredMemory> remoteScratch_;
  std::vector<std::shared_ptr<MemoryDevice2DeviceSemaphore>> semaphores_;
  std::vector<std::shared_ptr<Connection>> connections_;  // to every peer (null for this rank), for the scratch kind
  CollectiveContext context_{};
  AllReduceAlgorithm algorithm_ = AllReduceAlgorithm::kAuto;
  uint64_t oneShotLimitBytes_ = 0;  // bytes per one-shot launch; 0: no LL16 paths
  uint64_t twoShotLimitBytes_ = 0;  // bytes per two-shot launch
  // [[collectives.allreduce]] rules for this many ranks, in file order.
  struct Rule {
    uint64_t maxBytes;
    AllReduceAlgorithm algorithm;
  };
  std::vector<Rule> rules_;
  PacketGridCaps packetGrids_;    // the LL16 kernels' grid caps
  uint32_t gpuBlocks_ = 1;        // grid of the staged kernels (GPU builds), the same on every rank
  uint32_t hostThreads_ = 1;      // workers of a host team (host builds), the same on every rank
  uint32_t ranksOnGpu_ = 1;       // ranks of this communicator on this rank's GPU, itself included
  uint32_t mostRanksOnAGpu_ = 1;  // the most ranks of this communicator on any one GPU (the same on every rank)
  uint64_t oneShotSlotBytes_ = 0;
  std::shared_ptr<void> packets_;
  RegisteredMemory localPackets_;
  std::vector<RegisteredMemory> remotePackets_;
  std::vector<uint8_t*> packetPeers_;
  OneShotState* oneShotState_ = nullptr;
  // Registered buffers (registerBuffer): the same ids on every rank, since registration is collective.
  struct Registration {
    const uint8_t* base = nullptr;
    uint64_t bytes = 0;
    RegisteredMemory local;
    std::vector<RegisteredMemory> remote;
  };
  std::vector<Registration> registrations_ = std::vector<Registration>(kMaxRegistrations);
  // The port allreduce (set up only where it may be chosen): its proxy, its channels into every peer's scratch.
  std::unique_ptr<ProxyService> portProxy_;
  uint32_t portBlocks_ = kDefaultPortBlocks;
#if WEFT_BUILD_GPU_CUDA || WEFT_BUILD_GPU_HIP
  PortChannelDeviceHandle* portChannelsDevice_ = nullptr;
#else
  std::vector<PortChannelDeviceHandle> portChannelsHost_;
#endif
  std::chrono::nanoseconds registerWait_{0};  // how long an operation waits for peers to take in its new buffers
  bool autoRegister_ = false;                 // every rank registers the allocations it runs on (agreed at setup)
  std::unique_ptr<AutoRegistrations> autoRegistrations_;
  uint32_t liveRegistrations_ = 0;
  uint64_t registrationSeq_ = 0;
  // [kRegistrationSlots][size]: where each rank's registration in each slot is mapped here.
  std::vector<RegistrationEntry> regTableHost_;
#if WEFT_BUILD_GPU_CUDA || WEFT_BUILD_GPU_HIP
  RegistrationEntry* regTableDevice_ = nullptr;
  hipStream_t tableStream_ = nullptr;  // writes single table entries without waiting for the caller's streams
  ZeroCopyPlan* planDevice_ = nullptr;
  uint64_t* offerRoundDevice_ = nullptr;
#else
  std::unique_ptr<ZeroCopyPlan> planHost_;
  std::array<uint64_t, kMaxPairBlocks> offerRoundsHost_{};
#endif
#if WEFT_BUILD_GPU_CUDA || WEFT_BUILD_GPU_HIP
  PeerSlot* peersDevice_ = nullptr;
  GridBarrierState* barrierDevice_ = nullptr;
  OneShotState* oneShotDevice_ = nullptr;
#else
  std::vector<PeerSlot> peersHost_;
  GridBarrierState barrierHost_{};
  OneShotState oneShotHost_{};
#endif
};

}  // namespace detail

CollectiveComm::CollectiveComm(std::shared_ptr<Communicator> comm, CollectiveOptions options)
    : impl_(std::make_unique<detail::CollectiveCommImpl>(std::move(comm), options)) {}
CollectiveComm::~CollectiveComm() = default;

int CollectiveComm::rank() const { return impl_->rank(); }
int CollectiveComm::size() const { return impl_->size(); }
Communicator& CollectiveComm::communicator() const { return impl_->communicator(); }

CollectiveSupport CollectiveComm::supports(CollectiveKind kind, DataType type, ReduceOp op, uint64_t) const {
  return impl_->supports(kind, type, op);
}

void CollectiveComm::allReduce(const void* send, void* recv, uint64_t count, DataType type, ReduceOp op,
                               hipStream_t stream) {
  impl_->allReduce(send, recv, count, type, op, stream);
}
void CollectiveComm::allGather(const void* send, void* recv, uint64_t sendCount, DataType type, hipStream_t stream) {
  impl_->allGather(send, recv, sendCount, type, stream);
}
void CollectiveComm::reduceScatter(const void* send, void* recv, uint64_t recvCount, DataType type, ReduceOp op,
                                   hipStream_t stream) {
  impl_->reduceScatter(send, recv, recvCount, type, op, stream);
}
void CollectiveComm::broadcast(const void* send, void* recv, uint64_t count, DataType type, int root,
                               hipStream_t stream) {
  impl_->broadcast(send, recv, count, type, root, stream);
}
void CollectiveComm::reduce(const void* send, void* recv, uint64_t count, DataType type, ReduceOp op, int root,
                            hipStream_t stream) {
  impl_->reduce(send, recv, count, type, op, root, stream);
}
void CollectiveComm::allToAll(const void* send, void* recv, uint64_t count, DataType type, hipStream_t stream) {
  impl_->allToAll(send, recv, count, type, stream);
}
void CollectiveComm::allToAllV(const void* send, const uint64_t* sendCounts, const uint64_t* sendDispls, void* recv,
                               const uint64_t* recvCounts, const uint64_t* recvDispls, DataType type,
                               hipStream_t stream) {
  impl_->allToAllV(send, sendCounts, sendDispls, recv, recvCounts, recvDispls, type, stream);
}
void CollectiveComm::sendRecv(std::span<const PointToPoint> ops, hipStream_t stream) { impl_->sendRecv(ops, stream); }
AllReduceAlgorithm CollectiveComm::allReduceAlgorithmFor(uint64_t count, DataType type) const {
  return impl_->allReduceAlgorithmFor(count, type);
}
int CollectiveComm::ranksPerGpu() const { return impl_->ranksPerGpu(); }
void CollectiveComm::checkError() const { impl_->checkError(); }
uint32_t CollectiveComm::registerBuffer(void* buffer, uint64_t bytes) { return impl_->registerBuffer(buffer, bytes); }
void CollectiveComm::deregisterBuffer(uint32_t id) { impl_->deregisterBuffer(id); }
uint64_t CollectiveComm::zeroCopyCalls() const { return impl_->zeroCopyCalls(); }

}  // namespace weft
