#include "collectives_bench.hpp"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <type_traits>
#include <weft/communicator.hpp>
#include <weft/error.hpp>
#include <weft/gpu.hpp>
#include <weft/reduce_device.hpp>
#include <weft/shared_host_memory.hpp>

#include "bench_options.hpp"
#include "nccl_loader.hpp"

#if WEFT_BUILD_GPU_CUDA || WEFT_BUILD_GPU_HIP
#define WEFT_COLLECTIVES_BENCH_GPU 1
#else
#define WEFT_COLLECTIVES_BENCH_GPU 0
#endif

namespace weft::bench {

namespace {

using Clock = std::chrono::steady_clock;

constexpr uint8_t kPoisonByte = 0xa5;  // not a pattern value of any floating type (the patterns are integers)
constexpr int kOutOfPlace = 0;
constexpr int kInPlace = 1;
constexpr uint64_t kMinBufferBytes = 256;

const std::array<CollectiveKind, 6> kKinds = {CollectiveKind::kAllReduce,     CollectiveKind::kAllGather,
                                              CollectiveKind::kReduceScatter, CollectiveKind::kBroadcast,
                                              CollectiveKind::kReduce,        CollectiveKind::kAllToAll};

// nccl-tests' type names, in DataType order.
const std::array<const char*, kDataTypeCount> kTypeNames = {"int8", "uint8", "int32",  "uint32",   "int64",  "uint64",
                                                            "half", "float", "double", "bfloat16", "f8e4m3", "f8e5m2"};

const char* typeName(DataType t) { return kTypeNames[static_cast<int>(t)]; }

std::optional<DataType> parseType(const std::string& name) {
  for (int i = 0; i < kDataTypeCount; ++i) {
    if (name == kTypeNames[i] || name == dataTypeName(static_cast<DataType>(i))) return static_cast<DataType>(i);
  }
  if (name == "fp16" || name == "float16") return DataType::kFloat16;
  if (name == "bf16") return DataType::kBfloat16;
  if (name == "fp32") return DataType::kFloat32;
  if (name == "fp64") return DataType::kFloat64;
  return std::nullopt;
}

std::optional<ReduceOp> parseOp(const std::string& name) {
  for (int i = 0; i < kReduceOpCount; ++i) {
    if (name == reduceOpName(static_cast<ReduceOp>(i))) return static_cast<ReduceOp>(i);
  }
  return std::nullopt;
}

bool reducesKind(CollectiveKind k) {
  return k == CollectiveKind::kAllReduce || k == CollectiveKind::kReduceScatter || k == CollectiveKind::kReduce;
}

bool rootedKind(CollectiveKind k) { return k == CollectiveKind::kBroadcast || k == CollectiveKind::kReduce; }

std::vector<std::string> splitCommas(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    if (end > start) out.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

// What the options select, resolved and validated.
struct Selection {
  std::vector<CollectiveKind> kinds;
  std::vector<DataType> types;
  std::vector<ReduceOp> ops;
};

Selection resolveSelection(const CollectivesOptions& o) {
  Selection s;
  for (const std::string& name : splitCommas(o.collective)) {
    if (name == "all") {
      s.kinds.assign(kKinds.begin(), kKinds.end());
      continue;
    }
    auto it =
        std::find_if(kKinds.begin(), kKinds.end(), [&](CollectiveKind k) { return name == collectiveKindName(k); });
    if (it == kKinds.end()) {
      throw Error(ErrorCode::kInvalidArgument, "weft-bench collectives: unknown collective '" + name +
                                                   "' (allreduce, allgather, reducescatter, broadcast, reduce, "
                                                   "alltoall or all)");
    }
    s.kinds.push_back(*it);
  }
  for (const std::string& name : splitCommas(o.type)) {
    if (name == "all") {
      for (int i = 0; i < kDataTypeCount; ++i) s.types.push_back(static_cast<DataType>(i));
      continue;
    }
    std::optional<DataType> t = parseType(name);
    if (!t) {
      throw Error(ErrorCode::kInvalidArgument, "weft-bench collectives: unknown datatype '" + name +
                                                   "' (int8, uint8, int32, uint32, int64, uint64, half, float, "
                                                   "double, bfloat16, f8e4m3, f8e5m2 or all)");
    }
    s.types.push_back(*t);
  }
  for (const std::string& name : splitCommas(o.op)) {
    if (name == "all") {
      for (int i = 0; i < kReduceOpCount; ++i) s.ops.push_back(static_cast<ReduceOp>(i));
      continue;
    }
    std::optional<ReduceOp> op = parseOp(name);
    if (!op) {
      throw Error(ErrorCode::kInvalidArgument,
                  "weft-bench collectives: unknown op '" + name + "' (sum, prod, min, max, avg or all)");
    }
    s.ops.push_back(*op);
  }
  if (s.kinds.empty() || s.types.empty() || s.ops.empty()) {
    throw Error(ErrorCode::kInvalidArgument, "weft-bench collectives: empty collective, datatype or op list");
  }
  return s;
}

// The buffers one call uses: `count` elements per rank as the API takes it, and the bytes each buffer spans.
struct Geometry {
  uint64_t count = 0;
  uint64_t sendBytes = 0;
  uint64_t recvBytes = 0;
  uint64_t bytes() const { return std::max(sendBytes, recvBytes); }
};

// nccl-tests' rule: the size is the whole buffer, so per-rank counts of the gathering and scattering collectives
// are size / type / ranks, rounded down.
Geometry geometry(CollectiveKind kind, uint64_t size, uint64_t elemBytes, int ranks) {
  const uint64_t elems = size / elemBytes;
  const uint64_t n = static_cast<uint64_t>(ranks);
  Geometry g;
  switch (kind) {
    case CollectiveKind::kAllGather:
      g.count = elems / n;
      g.sendBytes = g.count * elemBytes;
      g.recvBytes = n * g.count * elemBytes;
      break;
    case CollectiveKind::kReduceScatter:
      g.count = elems / n;
      g.sendBytes = n * g.count * elemBytes;
      g.recvBytes = g.count * elemBytes;
      break;
    case CollectiveKind::kAllToAll:
      g.count = elems / n;
      g.sendBytes = g.recvBytes = n * g.count * elemBytes;
      break;
    default:
      g.count = elems;
      g.sendBytes = g.recvBytes = elems * elemBytes;
      break;
  }
  return g;
}

// ---- data pattern and CPU reference ----

// Element `i` of rank `rank`'s input. Floating types get small integers (exact in every format's range, so only
// the reduction's rounding matters); integer types get a long-period wrap-around sequence.
template <class T>
T patternValue(int rank, uint64_t i) {
  if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(static_cast<uint64_t>(rank + 1) * 1000003ull + i * 2654435761ull);
  } else {
    const float v = static_cast<float>(static_cast<int>((i * 7 + static_cast<uint64_t>(rank) * 3) % 61) - 30);
    if constexpr (std::is_floating_point_v<T>) {
      return static_cast<T>(v);
    } else {
      return T::fromFloat(v);
    }
  }
}

template <class F>
decltype(auto) withType(DataType type, F&& f) {
  switch (type) {
    case DataType::kInt8: return f(std::type_identity<int8_t>{});
    case DataType::kUint8: return f(std::type_identity<uint8_t>{});
    case DataType::kInt32: return f(std::type_identity<int32_t>{});
    case DataType::kUint32: return f(std::type_identity<uint32_t>{});
    case DataType::kInt64: return f(std::type_identity<int64_t>{});
    case DataType::kUint64: return f(std::type_identity<uint64_t>{});
    case DataType::kFloat16: return f(std::type_identity<Float16>{});
    case DataType::kFloat32: return f(std::type_identity<float>{});
    case DataType::kFloat64: return f(std::type_identity<double>{});
    case DataType::kBfloat16: return f(std::type_identity<Bfloat16>{});
    case DataType::kFloat8E4M3: return f(std::type_identity<Float8E4M3>{});
    case DataType::kFloat8E5M2: return f(std::type_identity<Float8E5M2>{});
  }
  throw Error(ErrorCode::kInvalidArgument, "weft-bench collectives: datatype outside the enum");
}

// This rank's input: element j of the send buffer is patternValue(rank, j).
std::vector<uint8_t> makeInput(DataType type, int rank, uint64_t bytes) {
  std::vector<uint8_t> out(bytes);
  withType(type, [&]<class T>(std::type_identity<T>) {
    const uint64_t n = bytes / sizeof(T);
    for (uint64_t j = 0; j < n; ++j) {
      T v = patternValue<T>(rank, j);
      std::memcpy(out.data() + j * sizeof(T), &v, sizeof(T));
    }
  });
  return out;
}

// What `rank`'s receive buffer must hold afterwards (empty when nothing is checked there: reduce off the root).
std::vector<uint8_t> makeExpected(CollectiveKind kind, DataType type, ReduceOp op, int root, int rank, int ranks,
                                  const Geometry& g) {
  if (kind == CollectiveKind::kReduce && rank != root) return {};
  std::vector<uint8_t> out(g.recvBytes);
  withType(type, [&]<class T>(std::type_identity<T>) {
    auto put = [&](uint64_t at, T v) { std::memcpy(out.data() + at * sizeof(T), &v, sizeof(T)); };
    const uint64_t c = g.count;
    switch (kind) {
      case CollectiveKind::kAllReduce:
      case CollectiveKind::kReduce:
        for (uint64_t i = 0; i < c; ++i)
          put(i, reduceOrdered<T>(op, ranks, [&](int p) { return patternValue<T>(p, i); }));
        break;
      case CollectiveKind::kReduceScatter:
        for (uint64_t i = 0; i < c; ++i) {
          const uint64_t j = static_cast<uint64_t>(rank) * c + i;
          put(i, reduceOrdered<T>(op, ranks, [&](int p) { return patternValue<T>(p, j); }));
        }
        break;
      case CollectiveKind::kBroadcast:
        for (uint64_t i = 0; i < c; ++i) put(i, patternValue<T>(root, i));
        break;
      case CollectiveKind::kAllGather:
        for (int p = 0; p < ranks; ++p) {
          for (uint64_t i = 0; i < c; ++i) put(static_cast<uint64_t>(p) * c + i, patternValue<T>(p, i));
        }
        break;
      case CollectiveKind::kAllToAll:
        for (int p = 0; p < ranks; ++p) {
          for (uint64_t i = 0; i < c; ++i) {
            put(static_cast<uint64_t>(p) * c + i, patternValue<T>(p, static_cast<uint64_t>(rank) * c + i));
          }
        }
        break;
      default: break;
    }
  });
  return out;
}

int64_t countWrong(const std::vector<uint8_t>& got, const std::vector<uint8_t>& expected, uint64_t elemBytes) {
  int64_t wrong = 0;
  for (uint64_t at = 0; at + elemBytes <= expected.size(); at += elemBytes) {
    if (std::memcmp(got.data() + at, expected.data() + at, elemBytes) != 0) ++wrong;
  }
  return wrong;
}

// ---- GPU (or host stand-in) resources ----

// GPU memory, or in builds without a GPU shared host memory (so that -R can register it with the peers).
class DeviceBuffer {
 public:
  explicit DeviceBuffer(uint64_t bytes) : bytes_(bytes) {
#if WEFT_COLLECTIVES_BENCH_GPU
    void* p = nullptr;
    checkGpu(hipMalloc(&p, bytes), "hipMalloc for weft-bench collectives");
    ptr_ = std::shared_ptr<void>(p, [](void* q) { (void)hipFree(q); });
    checkGpu(hipMemset(p, 0, bytes), "hipMemset for weft-bench collectives");
    checkGpu(hipDeviceSynchronize(), "waiting for the fill (later work runs on non-blocking streams)");
#else
    ptr_ = allocSharedHostMemory(bytes);
#endif
  }
  uint8_t* get() const { return static_cast<uint8_t*>(ptr_.get()); }
  uint64_t bytes() const { return bytes_; }

 private:
  std::shared_ptr<void> ptr_;
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

// Times work enqueued on a stream: GPU events on GPU builds, the host clock otherwise (calls complete there).
class StreamTimer {
 public:
  explicit StreamTimer(hipStream_t stream) : stream_(stream) {
#if WEFT_COLLECTIVES_BENCH_GPU
    checkGpu(hipEventCreate(&start_), "hipEventCreate");
    checkGpu(hipEventCreate(&stop_), "hipEventCreate");
#endif
  }
  ~StreamTimer() {
#if WEFT_COLLECTIVES_BENCH_GPU
    (void)hipEventDestroy(start_);
    (void)hipEventDestroy(stop_);
#endif
  }
  StreamTimer(const StreamTimer&) = delete;
  StreamTimer& operator=(const StreamTimer&) = delete;

  void start() {
#if WEFT_COLLECTIVES_BENCH_GPU
    checkGpu(hipEventRecord(start_, stream_), "hipEventRecord");
#endif
    begin_ = Clock::now();
  }
  /// Seconds since start(), once the stream's work is done.
  double stop() {
#if WEFT_COLLECTIVES_BENCH_GPU
    checkGpu(hipEventRecord(stop_, stream_), "hipEventRecord");
    checkGpu(hipEventSynchronize(stop_), "hipEventSynchronize");
    float ms = 0;
    checkGpu(hipEventElapsedTime(&ms, start_, stop_), "hipEventElapsedTime");
    return ms * 1e-3;
#else
    return std::chrono::duration<double>(Clock::now() - begin_).count();
#endif
  }

 private:
  hipStream_t stream_;
  Clock::time_point begin_;
#if WEFT_COLLECTIVES_BENCH_GPU
  hipEvent_t start_ = nullptr;
  hipEvent_t stop_ = nullptr;
#endif
};

#if WEFT_COLLECTIVES_BENCH_GPU
// A graph captured from the work `enqueue` puts on `stream`, instantiated for replay.
class CapturedGraph {
 public:
  template <class F>
  CapturedGraph(hipStream_t stream, F&& enqueue) {
#if WEFT_BUILD_GPU_CUDA
    checkGpu(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
    enqueue();
    checkGpu(cudaStreamEndCapture(stream, &graph_), "cudaStreamEndCapture");
    checkGpu(cudaGraphInstantiate(&exec_, graph_, 0), "cudaGraphInstantiate");
#else
    checkGpu(hipStreamBeginCapture(stream, hipStreamCaptureModeThreadLocal), "hipStreamBeginCapture");
    enqueue();
    checkGpu(hipStreamEndCapture(stream, &graph_), "hipStreamEndCapture");
    checkGpu(hipGraphInstantiate(&exec_, graph_, nullptr, nullptr, 0), "hipGraphInstantiate");
#endif
  }
  ~CapturedGraph() {
#if WEFT_BUILD_GPU_CUDA
    if (exec_ != nullptr) (void)cudaGraphExecDestroy(exec_);
    if (graph_ != nullptr) (void)cudaGraphDestroy(graph_);
#else
    if (exec_ != nullptr) (void)hipGraphExecDestroy(exec_);
    if (graph_ != nullptr) (void)hipGraphDestroy(graph_);
#endif
  }
  CapturedGraph(const CapturedGraph&) = delete;
  CapturedGraph& operator=(const CapturedGraph&) = delete;
  void launch(hipStream_t stream) {
#if WEFT_BUILD_GPU_CUDA
    checkGpu(cudaGraphLaunch(exec_, stream), "cudaGraphLaunch");
#else
    checkGpu(hipGraphLaunch(exec_, stream), "hipGraphLaunch");
#endif
  }

 private:
#if WEFT_BUILD_GPU_CUDA
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
#else
  hipGraph_t graph_ = nullptr;
  hipGraphExec_t exec_ = nullptr;
#endif
};
#endif

// ---- the libraries measured ----

class Library {
 public:
  virtual ~Library() = default;
  virtual const char* name() const = 0;
  /// "" when the call can run; otherwise why not (the same answer on every rank).
  virtual std::string skipReason(CollectiveKind kind, DataType type, ReduceOp op, uint64_t count) const = 0;
  virtual void launch(CollectiveKind kind, const void* send, void* recv, uint64_t count, DataType type, ReduceOp op,
                      int root, hipStream_t stream) = 0;
  /// Throws what a completed operation left behind (called after the stream is synchronised).
  virtual void finish() {}
};

class WeftLibrary : public Library {
 public:
  explicit WeftLibrary(CollectiveComm& comm) : comm_(comm) {}
  const char* name() const override { return "weft"; }
  std::string skipReason(CollectiveKind kind, DataType type, ReduceOp op, uint64_t count) const override {
    CollectiveSupport s = comm_.supports(kind, type, op, count);
    return s.native ? "" : s.reason;
  }
  void launch(CollectiveKind kind, const void* send, void* recv, uint64_t count, DataType type, ReduceOp op, int root,
              hipStream_t stream) override {
    switch (kind) {
      case CollectiveKind::kAllReduce: comm_.allReduce(send, recv, count, type, op, stream); break;
      case CollectiveKind::kAllGather: comm_.allGather(send, recv, count, type, stream); break;
      case CollectiveKind::kReduceScatter: comm_.reduceScatter(send, recv, count, type, op, stream); break;
      case CollectiveKind::kBroadcast: comm_.broadcast(send, recv, count, type, root, stream); break;
      case CollectiveKind::kReduce: comm_.reduce(send, recv, count, type, op, root, stream); break;
      case CollectiveKind::kAllToAll: comm_.allToAll(send, recv, count, type, stream); break;
      default: throw Error(ErrorCode::kInternalError, "weft-bench collectives: collective not benchmarked");
    }
  }
  void finish() override { comm_.checkError(); }

 private:
  CollectiveComm& comm_;
};

class NcclRunner : public Library {
 public:
  NcclRunner(const NcclLibrary& lib, Bootstrap& boot) : lib_(lib), ranks_(boot.size()) {
    NcclUniqueId id{};
    if (boot.rank() == 0) lib_.check(lib_.api().getUniqueId(&id), "ncclGetUniqueId");
    boot.broadcast(&id, sizeof(id), 0);
    lib_.check(lib_.api().commInitRank(&comm_, boot.size(), id, boot.rank()), "ncclCommInitRank");
  }
  ~NcclRunner() override {
    if (comm_ != nullptr) (void)lib_.api().commDestroy(comm_);
  }
  NcclRunner(const NcclRunner&) = delete;
  NcclRunner& operator=(const NcclRunner&) = delete;
  const char* name() const override { return "nccl"; }
  std::string skipReason(CollectiveKind, DataType, ReduceOp, uint64_t) const override { return ""; }
  void launch(CollectiveKind kind, const void* send, void* recv, uint64_t count, DataType type, ReduceOp op, int root,
              hipStream_t stream) override {
    const NcclApi& a = lib_.api();
    const int t = static_cast<int>(type);  // DataType and ReduceOp enumerators equal NCCL's (nccl_loader.hpp)
    const int o = static_cast<int>(op);
    switch (kind) {
      case CollectiveKind::kAllReduce:
        lib_.check(a.allReduce(send, recv, count, t, o, comm_, stream), "ncclAllReduce");
        break;
      case CollectiveKind::kAllGather:
        lib_.check(a.allGather(send, recv, count, t, comm_, stream), "ncclAllGather");
        break;
      case CollectiveKind::kReduceScatter:
        lib_.check(a.reduceScatter(send, recv, count, t, o, comm_, stream), "ncclReduceScatter");
        break;
      case CollectiveKind::kBroadcast:
        lib_.check(a.broadcast(send, recv, count, t, root, comm_, stream), "ncclBroadcast");
        break;
      case CollectiveKind::kReduce:
        lib_.check(a.reduce(send, recv, count, t, o, root, comm_, stream), "ncclReduce");
        break;
      case CollectiveKind::kAllToAll: {
        const uint64_t chunk = count * dataTypeBytes(type);
        lib_.check(a.groupStart(), "ncclGroupStart");
        for (int p = 0; p < ranks_; ++p) {
          lib_.check(a.send(static_cast<const uint8_t*>(send) + p * chunk, count, t, p, comm_, stream), "ncclSend");
          lib_.check(a.recv(static_cast<uint8_t*>(recv) + p * chunk, count, t, p, comm_, stream), "ncclRecv");
        }
        lib_.check(a.groupEnd(), "ncclGroupEnd");
        break;
      }
      default: throw Error(ErrorCode::kInternalError, "weft-bench collectives: collective not benchmarked");
    }
  }

 private:
  const NcclLibrary& lib_;
  int ranks_;
  NcclComm comm_ = nullptr;
};

// ---- measuring ----

// One rank's figures for one (library, size): gathered to every rank with the bootstrap.
struct RankFigures {
  double seconds[2] = {0, 0};  // per iteration
  double floorSeconds = 0;
  int64_t wrong[2] = {0, 0};
  int32_t skipped = 0;
  int32_t pad = 0;
};
static_assert(std::is_trivially_copyable_v<RankFigures>);

class Runner {
 public:
  Runner(TcpBootstrap& boot, const CollectivesOptions& options, uint64_t capacity)
      : boot_(boot), options_(options), a_(capacity), b_(capacity) {}

  hipStream_t stream() const { return stream_.get(); }

  // -R: both buffers registered with `coll` (collective), so the collectives with a zero-copy path take it.
  void registerBuffers(CollectiveComm& coll) {
    coll.registerBuffer(a_.get(), a_.bytes());
    coll.registerBuffer(b_.get(), b_.bytes());
  }

  int iterationsFor(uint64_t bytes) const {
    if (options_.iterations > 0) return options_.iterations;
    return static_cast<int>(std::clamp<uint64_t>((64ull << 20) / std::max<uint64_t>(bytes, 1), 20, 2000));
  }

  void sync() { checkGpu(hipStreamSynchronize(stream_.get()), "hipStreamSynchronize"); }

  // Seconds per iteration of `enqueue`, timed after every rank has finished its previous work.
  template <class F>
  double timeIterations(int iters, F&& enqueue) {
    sync();
    boot_.barrier();
    StreamTimer timer(stream_.get());
#if WEFT_COLLECTIVES_BENCH_GPU
    if (options_.graphLaunches > 0) {
      CapturedGraph graph(stream_.get(), [&] {
        for (int i = 0; i < iters; ++i) enqueue();
      });
      graph.launch(stream_.get());  // the first launch uploads the graph; not timed
      sync();
      boot_.barrier();
      timer.start();
      for (int g = 0; g < options_.graphLaunches; ++g) graph.launch(stream_.get());
      return timer.stop() / (static_cast<double>(iters) * options_.graphLaunches);
    }
#endif
    timer.start();
    for (int i = 0; i < iters; ++i) enqueue();
    return timer.stop() / iters;
  }

  // The floor: every rank copies `bytes` bytes within its own memory at the same time.
  double floorSeconds(uint64_t bytes) {
    const int iters = iterationsFor(bytes);
    uint8_t* dst = b_.get();
    const uint8_t* src = a_.get();
    auto copy = [&] {
      checkGpu(hipMemcpyAsync(dst, src, bytes, hipMemcpyDeviceToDevice, stream_.get()), "hipMemcpyAsync (floor)");
    };
    for (int i = 0; i < options_.warmup; ++i) copy();
    return timeIterations(iters, copy);
  }

  // Out-of-place and in-place figures of one library for one call shape.
  RankFigures measure(Library& lib, CollectiveKind kind, DataType type, ReduceOp op, int root, const Geometry& g) {
    try {
      return measureOrThrow(lib, kind, type, op, root, g);
    } catch (const Error&) {
      lib.finish();  // a kernel that stopped on a wait recorded which one: that error says more than the sync's
      throw;
    }
  }

  RankFigures measureOrThrow(Library& lib, CollectiveKind kind, DataType type, ReduceOp op, int root,
                             const Geometry& g) {
    RankFigures f;
    const uint64_t es = dataTypeBytes(type);
    const int rank = boot_.rank();
    const int ranks = boot_.size();
    for (int place : {kOutOfPlace, kInPlace}) {
      if (place == kInPlace && kind == CollectiveKind::kAllToAll) continue;
      uint8_t* send = a_.get();
      uint8_t* recv = b_.get();
      uint8_t* region = b_.get();  // the receive region, poisoned before the checked run
      if (place == kInPlace) {
        send = recv = b_.get();
        if (kind == CollectiveKind::kAllGather) send = b_.get() + static_cast<uint64_t>(rank) * g.count * es;
        if (kind == CollectiveKind::kReduceScatter) recv = b_.get() + static_cast<uint64_t>(rank) * g.count * es;
        region = b_.get();
      }
      const uint64_t regionBytes = place == kInPlace ? g.bytes() : g.recvBytes;
      auto enqueue = [&] { lib.launch(kind, send, recv, g.count, type, op, root, stream_.get()); };
      f.wrong[place] = -1;
      if (options_.check != 0) {
        // On the benchmark's stream: it does not synchronise with the legacy default stream.
        checkGpu(hipMemsetAsync(region, kPoisonByte, regionBytes, stream_.get()), "hipMemsetAsync (poison)");
        std::vector<uint8_t> input = makeInput(type, rank, g.sendBytes);
        checkGpu(hipMemcpyAsync(send, input.data(), input.size(), hipMemcpyHostToDevice, stream_.get()),
                 "hipMemcpyAsync (input)");
        enqueue();
        sync();
        lib.finish();
        std::vector<uint8_t> expected = makeExpected(kind, type, op, root, rank, ranks, g);
        std::vector<uint8_t> got(expected.size());
        checkGpu(hipMemcpy(got.data(), recv, got.size(), hipMemcpyDeviceToHost), "hipMemcpy (output)");
        f.wrong[place] = countWrong(got, expected, es);
      }
      for (int i = 0; i < options_.warmup; ++i) enqueue();
      f.seconds[place] = timeIterations(iterationsFor(g.bytes()), enqueue);
      lib.finish();
    }
    return f;
  }

 private:
  TcpBootstrap& boot_;
  const CollectivesOptions& options_;
  Stream stream_;
  DeviceBuffer a_;
  DeviceBuffer b_;
};

// ---- output ----

void printRankLines(TcpBootstrap& boot, int device) {
  constexpr size_t kLine = 256;
  std::array<char, kLine> mine{};
  char host[64] = {};
  gethostname(host, sizeof(host) - 1);
#if WEFT_COLLECTIVES_BENCH_GPU
  hipDeviceProp_t prop{};
  char bus[32] = {};
  checkGpu(hipGetDeviceProperties(&prop, device), "hipGetDeviceProperties");
  checkGpu(hipDeviceGetPCIBusId(bus, sizeof(bus), device), "hipDeviceGetPCIBusId");
  std::snprintf(mine.data(), kLine, "#  Rank %2d Pid %6d on %10s device %2d [%s] %s", boot.rank(),
                static_cast<int>(getpid()), host, device, bus, prop.name);
#else
  std::snprintf(mine.data(), kLine, "#  Rank %2d Pid %6d on %10s device %2d [host] host memory (WEFT_GPU=none build)",
                boot.rank(), static_cast<int>(getpid()), host, device);
#endif
  std::vector<char> all(kLine * static_cast<size_t>(boot.size()));
  std::memcpy(all.data() + kLine * static_cast<size_t>(boot.rank()), mine.data(), kLine);
  boot.allGather(all.data(), kLine);
  if (boot.rank() != 0) return;
  std::printf("#\n# Using devices\n");
  for (int r = 0; r < boot.size(); ++r) {
    const char* line = all.data() + kLine * static_cast<size_t>(r);
    std::printf("%.*s\n", static_cast<int>(strnlen(line, kLine)), line);
  }
}

void printTableHeader(const std::string& title) {
  std::printf("#\n# %s\n", title.c_str());
  // The size..root columns take 51 characters, each placement's four columns 33.
  auto centered = [](const char* text) {
    const std::string t = text;
    const size_t left = (33 - t.size()) / 2;
    return std::string(left, ' ') + t + std::string(33 - left - t.size(), ' ');
  };
  std::printf("#%50s %s %s\n", "", centered("out-of-place").c_str(), centered("in-place").c_str());
  std::printf("# %10s %13s %9s %7s %6s %9s %7s %7s %6s %9s %7s %7s %6s %9s\n", "size", "count", "type", "redop", "root",
              "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong", "floor");
  std::printf("# %10s %13s %9s %7s %6s %9s %7s %7s %6s %9s %7s %7s %6s %9s\n", "(B)", "(elements)", "", "", "", "(us)",
              "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)");
}

std::string wrongText(int64_t wrong) { return wrong < 0 ? "N/A" : std::to_string(wrong); }

void printRow(const CollectiveRow& r) {
  std::printf("  %10llu %13llu %9s %7s %6d", static_cast<unsigned long long>(r.bytes),
              static_cast<unsigned long long>(r.count), typeName(r.type), r.reduces ? reduceOpName(r.op) : "none",
              r.root);
  for (int place : {kOutOfPlace, kInPlace}) {
    if (place == kInPlace && !r.hasInPlace) {
      std::printf(" %9s %7s %7s %6s", "N/A", "N/A", "N/A", "N/A");
      continue;
    }
    std::printf(" %9.2f %7.2f %7.2f %6s", r.timeUs[place], r.algBw[place], r.busBw[place],
                wrongText(r.wrong[place]).c_str());
  }
  std::printf(" %9.2f\n", r.floorUs);
}

// Prints the footer of one library's table; returns the elements that arrived wrong.
int64_t printFooter(const std::vector<CollectiveRow>& rows) {
  int64_t wrong = 0;
  double busBw = 0;
  int measured = 0;
  for (const CollectiveRow& r : rows) {
    for (int place : {kOutOfPlace, kInPlace}) {
      if (place == kInPlace && !r.hasInPlace) continue;
      wrong += std::max<int64_t>(r.wrong[place], 0);
      busBw += r.busBw[place];
      ++measured;
    }
  }
  std::printf("# Out of bounds values : %lld %s\n", static_cast<long long>(wrong), wrong == 0 ? "OK" : "FAILED");
  std::printf("# Avg bus bandwidth    : %g\n", measured > 0 ? busBw / measured : 0.0);
  return wrong;
}

void printRatios(const std::vector<CollectiveRow>& weftRows, const std::vector<CollectiveRow>& ncclRows) {
  std::printf("#\n# weft vs nccl: time (us) of each and speedup = nccl time / weft time (> 1: weft is faster)\n");
  std::printf("# %10s %9s %7s %6s %9s %9s %8s %9s %9s %8s\n", "size", "type", "redop", "root", "weft", "nccl",
              "speedup", "weft-ip", "nccl-ip", "speedup");
  for (const CollectiveRow& w : weftRows) {
    auto it = std::find_if(ncclRows.begin(), ncclRows.end(), [&](const CollectiveRow& n) {
      return n.bytes == w.bytes && n.type == w.type && n.op == w.op && n.root == w.root;
    });
    if (it == ncclRows.end()) continue;
    std::printf("  %10llu %9s %7s %6d", static_cast<unsigned long long>(w.bytes), typeName(w.type),
                w.reduces ? reduceOpName(w.op) : "none", w.root);
    for (int place : {kOutOfPlace, kInPlace}) {
      if (place == kInPlace && !w.hasInPlace) {
        std::printf(" %9s %9s %8s", "N/A", "N/A", "N/A");
        continue;
      }
      const double speedup = w.timeUs[place] > 0 ? it->timeUs[place] / w.timeUs[place] : 0;
      std::printf(" %9.2f %9.2f %7.2fx", w.timeUs[place], it->timeUs[place], speedup);
    }
    std::printf("\n");
  }
}

void writeJson(const std::string& path, const std::vector<CollectiveRow>& rows, int ranks, bool floorMeasured) {
  if (path.empty() || rows.empty()) return;
  std::ofstream file;
  std::ostream* out = &std::cout;
  if (path != "-") {
    file.open(path, std::ios::app);
    if (!file) throw Error(ErrorCode::kSystemError, "weft-bench collectives: cannot open " + path + " for JSON lines");
    out = &file;
  }
  for (const CollectiveRow& r : rows) {
    for (int place : {kOutOfPlace, kInPlace}) {
      if (place == kInPlace && !r.hasInPlace) continue;
      nlohmann::json j = {{"library", r.library},
                          {"collective", collectiveKindName(r.kind)},
                          {"algorithm", "default"},
                          {"ranks", ranks},
                          {"bytes", r.bytes},
                          {"count", r.count},
                          {"type", typeName(r.type)},
                          {"op", r.reduces ? reduceOpName(r.op) : "none"},
                          {"root", r.root},
                          {"inplace", place == kInPlace},
                          {"time_us", r.timeUs[place]},
                          {"algbw", r.algBw[place]},
                          {"busbw", r.busBw[place]},
                          {"wrong", r.wrong[place]}};
      if (floorMeasured) j["floor_us"] = r.floorUs;
      *out << j.dump() << "\n";
    }
  }
  out->flush();
  if (path != "-" && !file) throw Error(ErrorCode::kSystemError, "weft-bench collectives: writing " + path + " failed");
}

// Loads the system NCCL when every rank can use it; returns null (and rank 0 says why) otherwise.
std::unique_ptr<NcclLibrary> loadNcclEverywhere(TcpBootstrap& boot, int device) {
  std::string reason;
  std::unique_ptr<NcclLibrary> lib;
#if WEFT_COLLECTIVES_BENCH_GPU
#if WEFT_BUILD_GPU_CUDA
  const char* path = "libnccl.so.2";
#else
  const char* path = "librccl.so.1";
#endif
  lib = std::make_unique<NcclLibrary>(path);
  if (!lib->loaded()) reason = lib->error();
  // NCCL refuses two ranks on one GPU: compare the devices' bus ids before asking it.
  constexpr size_t kBus = 32;
  std::vector<char> buses(kBus * static_cast<size_t>(boot.size()));
  checkGpu(hipDeviceGetPCIBusId(buses.data() + kBus * static_cast<size_t>(boot.rank()), kBus, device),
           "hipDeviceGetPCIBusId");
  boot.allGather(buses.data(), kBus);
  // Ranks on other hosts may share a bus id legitimately; without the host name this check is for one host.
  for (int r = 0; r < boot.size() && reason.empty(); ++r) {
    for (int q = r + 1; q < boot.size(); ++q) {
      if (std::strncmp(buses.data() + kBus * r, buses.data() + kBus * q, kBus) == 0) {
        reason = "ranks " + std::to_string(r) + " and " + std::to_string(q) +
                 " share one GPU, which NCCL does not allow (run one rank per GPU)";
        break;
      }
    }
  }
#else
  (void)device;
  reason = "this weft-bench was built without a GPU (WEFT_GPU=none)";
#endif
  int32_t ok = reason.empty() ? 1 : 0;
  std::vector<int32_t> all(static_cast<size_t>(boot.size()));
  all[static_cast<size_t>(boot.rank())] = ok;
  boot.allGather(all.data(), sizeof(int32_t));
  const bool everyone = std::all_of(all.begin(), all.end(), [](int32_t v) { return v == 1; });
  if (!everyone) {
    if (!reason.empty()) {
      std::fprintf(stdout, "# --vs nccl: skipped on rank %d: %s\n", boot.rank(), reason.c_str());
    } else if (boot.rank() == 0) {
      std::fprintf(stdout, "# --vs nccl: skipped (another rank cannot load NCCL)\n");
    }
    std::fflush(stdout);
    return nullptr;
  }
  return lib;
}

}  // namespace

std::vector<uint64_t> CollectivesOptions::sizes() const {
  if (minBytes == 0 || maxBytes < minBytes) {
    throw Error(ErrorCode::kInvalidArgument, "weft-bench collectives: sizes need 0 < -b <= -e");
  }
  if (stepBytes == 0 && stepFactor < 2) {
    throw Error(ErrorCode::kInvalidArgument, "weft-bench collectives: -f must be at least 2 (or set -i stepbytes)");
  }
  std::vector<uint64_t> out;
  for (uint64_t s = minBytes; s <= maxBytes;) {
    out.push_back(s);
    if (out.size() > 100000) {
      throw Error(ErrorCode::kInvalidArgument, "weft-bench collectives: more than 100000 sizes; raise -i or -f");
    }
    if (stepBytes > 0) {
      if (s > maxBytes - stepBytes) break;
      s += stepBytes;
    } else {
      if (s > maxBytes / stepFactor) break;
      s *= stepFactor;
    }
  }
  return out;
}

CLI::App* addCollectivesCommand(CLI::App& app, CollectivesOptions& o) {
  CLI::App* sub = app.add_subcommand(
      "collectives",
      "nccl-tests-style allreduce, allgather, reducescatter, broadcast, reduce and alltoall over weft's "
      "CollectiveComm (optionally beside the system NCCL), with a copy floor measured in the same run");
  sub->add_option("-b,--minbytes", o.minBytes, "smallest size in bytes (K, M, G suffixes: powers of 1024)")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  sub->add_option("-e,--maxbytes", o.maxBytes, "largest size in bytes")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  sub->add_option("-f,--stepfactor", o.stepFactor, "size multiplier between steps")->capture_default_str();
  sub->add_option("-i,--stepbytes", o.stepBytes, "size increment between steps (overrides -f when > 0)")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  sub->add_option("-n,--iters", o.iterations, "timed iterations per size (0: about 64 MiB moved per size)")
      ->capture_default_str();
  sub->add_option("-w,--warmup_iters", o.warmup, "warm-up iterations per size")->capture_default_str();
  sub->add_option("-c,--check", o.check, "check results against a CPU reference (0 or 1)")->capture_default_str();
  sub->add_option("-G,--cudagraph", o.graphLaunches,
                  "capture the -n iterations into a CUDA/HIP graph and launch it this many times (GPU builds)")
      ->capture_default_str();
  sub->add_option("-o,--op", o.op, "sum, prod, min, max, avg, all (or a comma list)")->capture_default_str();
  sub->add_option("-d,--datatype", o.type,
                  "int8, uint8, int32, uint32, int64, uint64, half, float, double, bfloat16, f8e4m3, f8e5m2, all")
      ->capture_default_str();
  sub->add_option("-r,--root", o.root, "root rank of broadcast and reduce")->capture_default_str();
  sub->add_option("-O,--collective", o.collective,
                  "allreduce, allgather, reducescatter, broadcast, reduce, alltoall, all (or a comma list)")
      ->capture_default_str();
  sub->add_option("-z,--blocking", o.ignoredBlocking, "accepted for nccl-tests compatibility; ignored");
  sub->add_option("--json", o.jsonPath, "append one JSON line per row and placement to this file (- for stdout)");
  sub->add_option("--tune", o.tunePath,
                  "time every allreduce algorithm at each size (first -d type, sum) and write the fastest per size "
                  "as [[collectives.allreduce]] rules to this TOML file (rank 0), for WEFT_CONFIG or weft.toml");
  sub->add_option("--vs", o.versus, "also run this library on the same ranks and sizes: nccl");
  sub->add_option("--host-threads", o.hostThreads, "threads per rank that run each operation (WEFT_GPU=none builds)")
      ->capture_default_str();
  sub->add_option("-R,--registered", o.registered,
                  "1: register the send and recv buffers with every peer (collectives past the one-shot size then run "
                  "zero-copy)")
      ->capture_default_str();
  sub->add_option("--scratch", o.scratchBytes, "CollectiveComm scratch bytes per rank")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  return sub;
}

double busBandwidthFactor(CollectiveKind kind, int ranks) {
  const double n = ranks;
  switch (kind) {
    case CollectiveKind::kAllReduce: return 2.0 * (n - 1) / n;
    case CollectiveKind::kAllGather:
    case CollectiveKind::kReduceScatter:
    case CollectiveKind::kAllToAll: return (n - 1) / n;
    default: return 1.0;
  }
}

// --tune: every allreduce algorithm at every size, each through its own CollectiveComm with the algorithm forced;
// the fastest (out-of-place time, the slowest rank's) wins the size. Consecutive sizes with one winner become one
// rule whose max_bytes is the largest of them; the last rule has no limit. Results are checked as in a normal run:
// a wrong element fails the run and writes no file.
int runAllReduceTuning(TcpBootstrap& boot, const CollectivesOptions& options, const Selection& sel,
                       const std::vector<uint64_t>& sizes, uint64_t capacity, int device) {
  const int rank = boot.rank();
  const int ranks = boot.size();
  const DataType type = sel.types.front();
  const AllReduceAlgorithm algorithms[] = {AllReduceAlgorithm::kOneShotLL, AllReduceAlgorithm::kScatterGather,
                                           AllReduceAlgorithm::kTwoShotLL};
  constexpr size_t kAlgorithms = std::size(algorithms);
  auto bootPtr = std::shared_ptr<Bootstrap>(&boot, [](Bootstrap*) {});
  Config config = Config::load();
  config.allReduceRules.clear();  // the rules being tuned must not steer the measurement
  auto comm = std::make_shared<Communicator>(bootPtr, config);
  std::vector<std::unique_ptr<CollectiveComm>> colls;
  std::vector<std::unique_ptr<WeftLibrary>> libs;
  for (AllReduceAlgorithm a : algorithms) {
    CollectiveOptions o;
    o.scratchBytes = options.scratchBytes;
    o.hostThreads = options.hostThreads;
    o.allReduceAlgorithm = a;
    colls.push_back(std::make_unique<CollectiveComm>(comm, o));
    libs.push_back(std::make_unique<WeftLibrary>(*colls.back()));
  }
  Runner runner(boot, options, capacity);
  printRankLines(boot, device);
  if (rank == 0) {
    std::printf("# weft-bench collectives --tune: allreduce %s sum on %d ranks, out-of-place time (us, slowest rank)\n",
                typeName(type), ranks);
    std::printf("# %12s", "size (B)");
    for (AllReduceAlgorithm a : algorithms) std::printf(" %14s", allReduceAlgorithmName(a));
    std::printf("  fastest\n");
  }
  std::vector<std::pair<uint64_t, size_t>> winners;  // (bytes, algorithm index)
  int64_t wrong = 0;
  for (uint64_t size : sizes) {
    const Geometry g = geometry(CollectiveKind::kAllReduce, size, dataTypeBytes(type), ranks);
    if (g.count == 0) continue;
    std::vector<RankFigures> all(kAlgorithms * static_cast<size_t>(ranks));
    for (size_t a = 0; a < kAlgorithms; ++a) {
      all[static_cast<size_t>(rank) * kAlgorithms + a] =
          runner.measure(*libs[a], CollectiveKind::kAllReduce, type, ReduceOp::kSum, 0, g);
    }
    boot.allGather(all.data(), sizeof(RankFigures) * kAlgorithms);
    double us[kAlgorithms] = {};
    for (size_t a = 0; a < kAlgorithms; ++a) {
      for (int r = 0; r < ranks; ++r) {
        const RankFigures& f = all[static_cast<size_t>(r) * kAlgorithms + a];
        us[a] = std::max(us[a], f.seconds[kOutOfPlace] * 1e6);
        for (int place : {kOutOfPlace, kInPlace}) wrong += std::max<int64_t>(f.wrong[place], 0);
      }
    }
    const size_t best = static_cast<size_t>(std::min_element(std::begin(us), std::end(us)) - std::begin(us));
    winners.emplace_back(g.bytes(), best);
    if (rank == 0) {
      std::printf("  %12llu", static_cast<unsigned long long>(g.bytes()));
      for (double t : us) std::printf(" %14.2f", t);
      std::printf("  %s\n", allReduceAlgorithmName(algorithms[best]));
    }
  }
  int ok = wrong == 0 && !winners.empty() ? 1 : 0;
  if (rank == 0 && ok == 0) {
    std::fprintf(stderr, "weft-bench collectives --tune: %lld wrong elements or no size measured; %s not written\n",
                 static_cast<long long>(wrong), options.tunePath.c_str());
  }
  if (rank == 0 && ok == 1) {
    // The rules name the placement they were measured on: ranks sharing one GPU contend for its SMs and memory,
    // so their best choice need not hold where each rank has a GPU of its own.
    const int perGpu = colls.front()->ranksPerGpu();
    std::string text = "# weft-bench collectives --tune: allreduce " + std::string(typeName(type)) + " on " +
                       std::to_string(ranks) + " ranks (at most " + std::to_string(perGpu) + " on one GPU), sizes " +
                       std::to_string(winners.front().first) + " to " + std::to_string(winners.back().first) +
                       " bytes.\n# Use as WEFT_CONFIG or copy into weft.toml.\n";
    for (size_t i = 0; i < winners.size(); ++i) {
      const bool last = i + 1 == winners.size();
      if (!last && winners[i + 1].second == winners[i].second) continue;
      text += "\n[[collectives.allreduce]]\nranks = " + std::to_string(ranks) +
              "\nranks_per_gpu = " + std::to_string(perGpu) + "\n";
      if (!last) text += "max_bytes = " + std::to_string(winners[i].first) + "\n";
      text += std::string("algorithm = \"") + allReduceAlgorithmName(algorithms[winners[i].second]) + "\"\n";
    }
    std::FILE* f = std::fopen(options.tunePath.c_str(), "w");
    if (f == nullptr || std::fputs(text.c_str(), f) < 0 || std::fclose(f) != 0) {
      std::fprintf(stderr, "weft-bench collectives --tune: cannot write %s: %s\n", options.tunePath.c_str(),
                   std::strerror(errno));
      ok = 0;
    } else {
      std::printf("# wrote %s\n", options.tunePath.c_str());
    }
    std::fflush(stdout);
  }
  boot.barrier();
  boot.broadcast(&ok, sizeof(ok), 0);
  return ok == 1 ? 0 : 1;
}

int runCollectivesBench(TcpBootstrap& boot, const CollectivesOptions& options) {
  const Selection sel = resolveSelection(options);
  const std::vector<uint64_t> sizes = options.sizes();
  const int rank = boot.rank();
  const int ranks = boot.size();
  if (options.root < 0 || options.root >= ranks) {
    throw Error(ErrorCode::kInvalidArgument, "weft-bench collectives: root " + std::to_string(options.root) +
                                                 " is not a rank of " + std::to_string(ranks));
  }
  if (options.iterations < 0 || options.warmup < 0 || options.graphLaunches < 0 ||
      (options.check != 0 && options.check != 1) || (options.registered != 0 && options.registered != 1)) {
    throw Error(ErrorCode::kInvalidArgument, "weft-bench collectives: -n, -w and -G must be >= 0, -c and -R 0 or 1");
  }
  if (!options.versus.empty() && options.versus != "nccl") {
    throw Error(ErrorCode::kInvalidArgument,
                "weft-bench collectives: --vs takes 'nccl' (got '" + options.versus + "')");
  }
  int device = 0;
#if WEFT_COLLECTIVES_BENCH_GPU
  const int devices = gpuDeviceCount();
  if (devices == 0) throw Error(ErrorCode::kInvalidUsage, "weft-bench collectives: no GPU on this machine");
  device = (boot.localRank() >= 0 ? boot.localRank() : rank) % devices;
  checkGpu(hipSetDevice(device), "hipSetDevice");
#else
  if (options.graphLaunches > 0) {
    throw Error(ErrorCode::kNotSupported, "weft-bench collectives: -G needs a GPU build (this one is WEFT_GPU=none)");
  }
#endif
  const uint64_t capacity = std::max(sizes.back(), kMinBufferBytes);
  if (!options.tunePath.empty()) return runAllReduceTuning(boot, options, sel, sizes, capacity, device);

  auto bootPtr = std::shared_ptr<Bootstrap>(&boot, [](Bootstrap*) {});
  auto comm = std::make_shared<Communicator>(bootPtr, Config::load());
  CollectiveOptions collOptions;
  collOptions.scratchBytes = options.scratchBytes;
  collOptions.hostThreads = options.hostThreads;
  CollectiveComm coll(comm, collOptions);
  WeftLibrary weftLib(coll);
  std::vector<Library*> libs = {&weftLib};
  std::unique_ptr<NcclLibrary> ncclLib;
  std::unique_ptr<NcclRunner> nccl;
  if (options.versus == "nccl") {
    ncclLib = loadNcclEverywhere(boot, device);
    if (ncclLib) {
      nccl = std::make_unique<NcclRunner>(*ncclLib, boot);
      libs.push_back(nccl.get());
    }
  }
  Runner runner(boot, options, capacity);
  if (options.registered != 0) runner.registerBuffers(coll);

  if (rank == 0) {
    std::printf(
        "# weft-bench collectives: nranks %d minBytes %llu maxBytes %llu step: %llu(%s) warmup iters: %d "
        "iters: %d graph launches: %d validation: %d\n",
        ranks, static_cast<unsigned long long>(options.minBytes), static_cast<unsigned long long>(options.maxBytes),
        static_cast<unsigned long long>(options.stepBytes > 0 ? options.stepBytes : options.stepFactor),
        options.stepBytes > 0 ? "bytes" : "factor", options.warmup, options.iterations, options.graphLaunches,
        options.check);
    if (nccl)
      std::printf("# versus: nccl %s (system library, same ranks, buffers and stream)\n", ncclLib->version().c_str());
  }
  printRankLines(boot, device);

  int64_t totalWrong = 0;
  for (CollectiveKind kind : sel.kinds) {
    std::vector<std::vector<CollectiveRow>> rows(libs.size());
    std::vector<std::string> skips;
    const std::vector<ReduceOp> ops = reducesKind(kind) ? sel.ops : std::vector<ReduceOp>{ReduceOp::kSum};
    const int root = rootedKind(kind) ? options.root : -1;
    for (DataType type : sel.types) {
      for (ReduceOp op : ops) {
        for (uint64_t size : sizes) {
          const Geometry g = geometry(kind, size, dataTypeBytes(type), ranks);
          const double floorSeconds = runner.floorSeconds(g.bytes());
          std::vector<RankFigures> all(libs.size() * static_cast<size_t>(ranks));
          for (size_t l = 0; l < libs.size(); ++l) {
            RankFigures f;
            const std::string why = libs[l]->skipReason(kind, type, op, g.count);
            if (why.empty()) {
              f = runner.measure(*libs[l], kind, type, op, std::max(root, 0), g);
            } else {
              f.skipped = 1;
              if (rank == 0) {
                skips.push_back(std::string(libs[l]->name()) + " " + typeName(type) + " " + reduceOpName(op) + " " +
                                std::to_string(g.bytes()) + " B: " + why);
              }
            }
            f.floorSeconds = floorSeconds;
            all[static_cast<size_t>(rank) * libs.size() + l] = f;
          }
          boot.allGather(all.data(), sizeof(RankFigures) * libs.size());
          for (size_t l = 0; l < libs.size(); ++l) {
            CollectiveRow row;
            row.library = libs[l]->name();
            row.kind = kind;
            row.bytes = g.bytes();
            row.count = g.count;
            row.type = type;
            row.op = op;
            row.reduces = reducesKind(kind);
            row.root = root;
            row.hasInPlace = kind != CollectiveKind::kAllToAll;
            bool skipped = false;
            for (int r = 0; r < ranks; ++r) {
              const RankFigures& f = all[static_cast<size_t>(r) * libs.size() + l];
              skipped = skipped || f.skipped != 0;
              row.floorUs = std::max(row.floorUs, f.floorSeconds * 1e6);
              for (int place : {kOutOfPlace, kInPlace}) {
                row.timeUs[place] = std::max(row.timeUs[place], f.seconds[place] * 1e6);
                row.wrong[place] = f.wrong[place] < 0 ? -1 : row.wrong[place] + f.wrong[place];
              }
            }
            if (skipped) continue;
            for (int place : {kOutOfPlace, kInPlace}) {
              // bytes / us / 1e3 = GB/s (10^9 bytes per second, as nccl-tests reports).
              row.algBw[place] = row.timeUs[place] > 0 ? static_cast<double>(row.bytes) / row.timeUs[place] / 1e3 : 0;
              row.busBw[place] = row.algBw[place] * busBandwidthFactor(kind, ranks);
            }
            rows[l].push_back(row);
          }
        }
      }
    }
    if (rank != 0) continue;
    for (size_t l = 0; l < libs.size(); ++l) {
      printTableHeader(std::string(collectiveKindName(kind)) + ": " + libs[l]->name() + " on " + std::to_string(ranks) +
                       " ranks (floor: a device-to-device copy of the size on every rank " + "at once)");
      for (const CollectiveRow& r : rows[l]) printRow(r);
      totalWrong += printFooter(rows[l]);
      writeJson(options.jsonPath, rows[l], ranks, true);
    }
    for (const std::string& s : skips) std::printf("# skipped: %s\n", s.c_str());
    if (libs.size() > 1) printRatios(rows[0], rows[1]);
    std::fflush(stdout);
  }
  nccl.reset();
  boot.barrier();
  // Only rank 0 knows the total; share it so every rank exits alike.
  boot.broadcast(&totalWrong, sizeof(totalWrong), 0);
  return totalWrong == 0 ? 0 : 1;
}

}  // namespace weft::bench
