/// Collectives over weft's channels: allreduce, allgather, reduce-scatter, broadcast, reduce, all-to-all(v) and
/// grouped send/recv among all ranks of a Communicator. Kernels run on the caller's stream in GPU builds; in builds
/// without a GPU the same algorithm code runs in host threads on host memory (so CI checks it).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <weft/communicator.hpp>
#include <weft/gpu.hpp>

namespace weft {

/// Element types. fp16, bf16 and fp8 are reduced in fp32.
enum class DataType : int32_t {
  kInt8,
  kUint8,
  kInt32,
  kUint32,
  kInt64,
  kUint64,
  kFloat16,
  kFloat32,
  kFloat64,
  kBfloat16,
  kFloat8E4M3,
  kFloat8E5M2,
};
/// Number of DataType values.
inline constexpr int kDataTypeCount = 12;

/// Bytes of one element of `type`; 0 for a value outside the enum.
uint64_t dataTypeBytes(DataType type);
/// "float32", "bfloat16", ... ("unknown" for a value outside the enum).
const char* dataTypeName(DataType type);

/// Reductions. kAvg divides the sum by the rank count (integer types: truncating division).
enum class ReduceOp : int32_t { kSum, kProd, kMax, kMin, kAvg };
/// Number of ReduceOp values.
inline constexpr int kReduceOpCount = 5;
/// "sum", "prod", ... ("unknown" outside the enum).
const char* reduceOpName(ReduceOp op);

/// The operations CollectiveComm runs.
enum class CollectiveKind {
  kAllReduce,
  kAllGather,
  kReduceScatter,
  kBroadcast,
  kReduce,
  kAllToAll,
  kAllToAllV,
  kSendRecv
};
/// "allreduce", "allgather", ...
const char* collectiveKindName(CollectiveKind kind);

/// Whether an operation runs natively, and if not, why (for logs and for the NCCL library's fallback decision).
struct CollectiveSupport {
  bool native = false;
  std::string reason;  ///< empty when native
};

/// How allReduce moves data.
enum class AllReduceAlgorithm : int32_t {
  /// Chosen by message size and rank count (see CollectiveOptions::oneShotMaxBytes).
  kAuto,
  /// One-shot LL16: every rank writes its whole input as LL16 packets into every peer's packet buffer and reduces
  /// what it receives, with no rank-wide synchronisation. Messages larger than the per-launch limit go in several
  /// launches of the same algorithm.
  kOneShotLL,
  /// Staged reduce-scatter + all-gather through scratch, with rank-wide semaphore synchronisation per piece.
  kScatterGather,
  /// Two-shot LL16: rank q reduces share q of the message from the LL16 packets every peer wrote it, then writes the
  /// result as packets into every peer (an LL reduce-scatter and all-gather, no rank-wide synchronisation). Each rank
  /// writes 4(n-1)/n times the message in packets instead of the one-shot's 2(n-1), for a second packet latency.
  /// Messages larger than the per-launch limit go in several launches.
  kTwoShotLL,
  /// Reduce-scatter + all-gather whose bytes the copy engines move, leaving the SMs to the application's kernels: per
  /// piece the input is copied into scratch, a kernel of a few blocks (WEFT_COLL_PORT_BLOCKS) puts each peer's share
  /// into that peer's scratch through PortChannels (the proxy issues copy-engine copies; nothing goes the direct
  /// load/store path), reduces its own share once the peers' arrived, puts the result into every peer's scratch,
  /// and a copy brings the whole reduced piece into recv. Chosen only when asked for (by the options,
  /// WEFT_ALLREDUCE_ALGO or a config rule); its proxy thread runs only then.
  kPort,
};
/// "auto", "oneshot_ll", "scatter_gather", "twoshot_ll" or "port" ("unknown" outside the enum); the spellings
/// WEFT_ALLREDUCE_ALGO takes.
const char* allReduceAlgorithmName(AllReduceAlgorithm algorithm);

/// How a CollectiveComm is set up.
struct CollectiveOptions {
  /// Registered staging memory per rank, in bytes; larger operations are done in pieces of this size.
  uint64_t scratchBytes = 64ull << 20;
  /// Budget of every wait inside a collective in nanoseconds; 0 = defaultWaitBudgetNs().
  uint64_t budgetNs = 0;
  /// Builds without a GPU: threads per rank that run each operation (the calling thread among them), 1..64.
  /// Ignored on GPU builds.
  uint32_t hostThreads = 4;
  /// GPU builds: blocks of each staged collective kernel (scatter-gather allreduce, reduce-scatter, allgather, ...),
  /// 1..256. 0 lets WEFT_COLL_GPU_BLOCKS choose, and when that is unset or 0 sizes the grid from the GPU: half the
  /// blocks its SMs hold resident, divided among the ranks that share the GPU. Ranks may differ. Ignored on host
  /// builds.
  uint32_t gpuBlocks = 0;
  /// allReduce's algorithm. kAuto lets the environment variable WEFT_ALLREDUCE_ALGO (auto, oneshot_ll,
  /// scatter_gather, twoshot_ll) choose; any other value is used as given and the variable is ignored. Every rank must
  /// end up with the same setting.
  AllReduceAlgorithm allReduceAlgorithm = AllReduceAlgorithm::kAuto;
  /// Sizes the LL16 paths: among n ranks one one-shot launch carries up to L = oneShotMaxBytes / (n - 1) bytes
  /// (rounded down to 16, at least 16), one two-shot launch up to n * L / 2. kAuto sends a message one-shot up to L,
  /// two-shot above that up to 4 MiB / n when more than two ranks share it, and scatter-gather beyond. Each rank holds
  /// 2 * n * 2 * L bytes of packet buffer. 0 disables both (kOneShotLL and kTwoShotLL then fall back to
  /// kScatterGather). Every rank must pass the same value.
  uint64_t oneShotMaxBytes = 1ull << 20;
  /// Registers on first use the allocations that collectives run on (GPU memory the transport can share; on host
  /// builds memory from allocSharedHostMemory) and shares them with the peers, so that operations on buffers nobody
  /// registered run zero-copy too, from a few calls after an allocation is first used; registerBuffer then only
  /// saves those first calls. No rank waits for another to do so. Off when false on any rank, or when
  /// WEFT_COLL_AUTO_REGISTER=0 on any rank. An allocation freed while peers hold it mapped stays mapped there until
  /// memory at an overlapping address is used in a collective or the communicator goes.
  bool autoRegister = true;
};

/// One point-to-point operation of a group (ncclGroupStart ... ncclGroupEnd).
struct PointToPoint {
  enum class Direction { kSend, kRecv } direction;
  void* buffer;  ///< source of a send, destination of a recv
  uint64_t count;
  DataType type;
  int peer;
};

namespace detail {
class CollectiveCommImpl;
}

/// Collectives among every rank of a Communicator. Construction is collective (every rank of the communicator
/// builds one, in the same order as other collective setup calls). Each operation is collective too: every rank
/// calls the same operations in the same order with matching counts and types.
///
/// On GPU builds the buffers are GPU memory of the current device, operations are enqueued on `stream` and return
/// before they complete, without host synchronisation (so they can be captured into a CUDA/HIP graph); buffers may
/// differ from call to call. In builds without a GPU the buffers are host memory, `stream` is ignored and each call
/// returns when this rank's part is complete.
///
/// Errors: Error(kInvalidArgument) for a bad argument (null buffer with count > 0, bad root or peer, a type or op
/// outside the enums), Error(kNotSupported) for what supports() refuses, Error(kTimeout) naming the rank, peer and
/// operation when a peer does not take part within the budget. In-place operations (send == recv, or for allgather
/// send == recv + rank * count, for reduce-scatter recv == send + rank * recvCount) are allowed.
class CollectiveComm {
 public:
  CollectiveComm(std::shared_ptr<Communicator> comm, CollectiveOptions options = {});
  ~CollectiveComm();
  CollectiveComm(const CollectiveComm&) = delete;
  CollectiveComm& operator=(const CollectiveComm&) = delete;

  int rank() const;
  int size() const;
  Communicator& communicator() const;

  /// Whether `kind` on `count` elements of `type` with `op` (ignored where no reduction happens) runs natively.
  CollectiveSupport supports(CollectiveKind kind, DataType type, ReduceOp op, uint64_t count) const;

  /// recv[i] = op over ranks of send[i], i < count, on every rank.
  void allReduce(const void* send, void* recv, uint64_t count, DataType type, ReduceOp op, hipStream_t stream);
  /// recv[r * sendCount + i] = send of rank r [i].
  void allGather(const void* send, void* recv, uint64_t sendCount, DataType type, hipStream_t stream);
  /// recv[i] = op over ranks of send[rank * recvCount + i].
  void reduceScatter(const void* send, void* recv, uint64_t recvCount, DataType type, ReduceOp op, hipStream_t stream);
  /// recv[i] = send of `root` [i] on every rank (send is read on the root only).
  void broadcast(const void* send, void* recv, uint64_t count, DataType type, int root, hipStream_t stream);
  /// recv[i] = op over ranks of send[i] on `root` only (recv is written on the root only).
  void reduce(const void* send, void* recv, uint64_t count, DataType type, ReduceOp op, int root, hipStream_t stream);
  /// recv[p * count + i] = send of rank p [rank * count + i].
  void allToAll(const void* send, void* recv, uint64_t count, DataType type, hipStream_t stream);
  /// All-to-all with per-peer counts and element displacements (arrays of size() entries, host memory).
  void allToAllV(const void* send, const uint64_t* sendCounts, const uint64_t* sendDispls, void* recv,
                 const uint64_t* recvCounts, const uint64_t* recvDispls, DataType type, hipStream_t stream);
  /// Runs a group of sends and receives together (no ordering deadlock between them): each send must match a
  /// receive of the same count and type posted on its peer's group, in the same order per pair.
  void sendRecv(std::span<const PointToPoint> ops, hipStream_t stream);

  /// The algorithm allReduce uses for `count` elements of `type` (never kAuto): the selection every rank makes
  /// alike from the options, WEFT_ALLREDUCE_ALGO, the rank count and the message size.
  AllReduceAlgorithm allReduceAlgorithmFor(uint64_t count, DataType type) const;

  /// The most ranks of this communicator that share one GPU (host builds: one host, whose memory they share); the
  /// same on every rank. [[collectives.allreduce]] rules with `ranks_per_gpu` apply only where it matches.
  int ranksPerGpu() const;

  /// Throws the error a finished or failed operation left (a device timeout record, a failed launch), if any.
  void checkError() const;

  /// Registers [buffer, buffer + bytes) with every peer: each maps it, so that collectives can read their input from
  /// and write their output into the ranks' own buffers (zero copy) instead of staging through scratch. Collective:
  /// every rank calls it, in the same order as other collective calls, each with its own buffer (sizes may differ).
  /// GPU builds: GPU memory the transport can share (hipMalloc); host builds: memory from allocSharedHostMemory.
  /// Returns the id for deregisterBuffer; at most 64 at once. Error(kNotSupported) on every rank when any cannot map
  /// a peer's buffer.
  ///
  /// Each call that would stage decides per call, on the GPU, with every rank alike, whether the buffers other ranks
  /// must reach lie inside registrations; then it runs zero-copy, otherwise it stages as usual. What must be
  /// registered: allReduce (above the one-shot size) every rank's send and recv; reduceScatter (above the one-shot
  /// size), allGather (above the one-shot size) and allToAll every rank's send (allToAll in place always stages);
  /// reduce every rank's send and the root's recv; broadcast the root's send. A buffer only its own rank touches
  /// (an allGather's recv, a broadcast's recv) need not be registered.
  uint32_t registerBuffer(void* buffer, uint64_t bytes);
  /// Undoes registerBuffer(id), collectively, after this rank's GPU work is done (it synchronises the device).
  void deregisterBuffer(uint32_t id);
  /// How many of this rank's collective calls so far ran zero-copy (registerBuffer says when they do). GPU builds
  /// read it from the device: call it after the operations completed.
  uint64_t zeroCopyCalls() const;

 private:
  std::unique_ptr<detail::CollectiveCommImpl> impl_;
};

}  // namespace weft
