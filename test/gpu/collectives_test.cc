// CollectiveComm on the GPU: 2 and 4 forked ranks sharing one GPU, whose scratch buffers and semaphores cuda_ipc
// maps into each other. Every collective on every type (every op at one count for the reducing ones), counts 1,
// odd and larger than a small scratch, in-place and out-of-place, outputs poisoned first, results compared bit for
// bit with a CPU reference built from every rank's input; plus an allreduce captured into a CUDA graph and
// replayed twice with fresh inputs (the semaphores and grid barrier keep their epochs in device memory).
// allreduce again with each algorithm forced (one-shot LL16, scatter-gather) on every type and op, at and around
// the one-shot limit and past it (several one-shot launches); and one-shot allreduces in a CUDA graph replayed
// three times with an eager call in between (the one-shot epoch lives in device memory, so no replay reuses one).
// Then the whole matrix again on buffers inside one registered allocation at per-rank offsets (zero-copy runs
// counted), and with unregistered recvs or sends where a collective does or does not need them registered.
//
// Tests that fork come first and the parent never touches the GPU runtime (see memory_channel_test.cc).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <vector>
#include <weft/collectives.hpp>
#include <weft/communicator.hpp>
#include <weft/error.hpp>
#include <weft/gpu.hpp>
#include <weft/reduce_device.hpp>

#include "multi_process.hpp"

namespace weft::test {
namespace {

using std::chrono::milliseconds;
using Bytes = std::vector<uint8_t>;

#if WEFT_BUILD_GPU_CUDA || WEFT_BUILD_GPU_HIP

constexpr uint64_t kMs = 1'000'000;
constexpr uint8_t kPoison = 0xa5;

Config ipcConfig() {
  Config c = Config::defaults();
  c.transports[PeerClass::kSameProcess] = {"cuda_ipc"};
  c.transports[PeerClass::kSameHost] = {"cuda_ipc"};
  c.bootstrapTimeout = milliseconds(20000);
  return c;
}

template <class F>
void withType(DataType type, F&& f) {
  switch (type) {
    case DataType::kInt8: f(int8_t{}); break;
    case DataType::kUint8: f(uint8_t{}); break;
    case DataType::kInt32: f(int32_t{}); break;
    case DataType::kUint32: f(uint32_t{}); break;
    case DataType::kInt64: f(int64_t{}); break;
    case DataType::kUint64: f(uint64_t{}); break;
    case DataType::kFloat16: f(Float16{}); break;
    case DataType::kFloat32: f(float{}); break;
    case DataType::kFloat64: f(double{}); break;
    case DataType::kBfloat16: f(Bfloat16{}); break;
    case DataType::kFloat8E4M3: f(Float8E4M3{}); break;
    case DataType::kFloat8E5M2: f(Float8E5M2{}); break;
  }
}

Bytes makeInput(uint64_t seed, int caseId, int rank, DataType type, uint64_t count) {
  std::mt19937_64 rng(seed ^ (static_cast<uint64_t>(caseId) * 0x9e3779b97f4a7c15ull) ^
                      (static_cast<uint64_t>(rank) << 48));
  Bytes out(count * dataTypeBytes(type));
  std::uniform_real_distribution<double> real(-8.0, 8.0);
  withType(type, [&](auto tag) {
    using T = decltype(tag);
    for (uint64_t i = 0; i < count; ++i) {
      T v;
      if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
        v = static_cast<T>(real(rng));
      } else if constexpr (std::is_same_v<T, Float16> || std::is_same_v<T, Bfloat16>) {
        v = T::fromFloat(static_cast<float>(real(rng)));
      } else {
        const uint64_t bits = rng();
        std::memcpy(&v, &bits, sizeof(T));
      }
      std::memcpy(out.data() + i * sizeof(T), &v, sizeof(T));
    }
  });
  return out;
}

void referenceReduce(DataType type, ReduceOp op, const std::vector<Bytes>& inputs, uint64_t offset, uint64_t count,
                     uint8_t* out) {
  withType(type, [&](auto tag) {
    using T = decltype(tag);
    for (uint64_t i = 0; i < count; ++i) {
      const T r = reduceOrdered<T>(op, static_cast<int>(inputs.size()), [&](int p) {
        T v;
        std::memcpy(&v, inputs[static_cast<size_t>(p)].data() + (offset + i) * sizeof(T), sizeof(T));
        return v;
      });
      std::memcpy(out + i * sizeof(T), &r, sizeof(T));
    }
  });
}

std::string firstDifference(const Bytes& got, const Bytes& want) {
  if (got.size() != want.size()) return "size " + std::to_string(got.size()) + " vs " + std::to_string(want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i]) {
      return "byte " + std::to_string(i) + " of " + std::to_string(got.size()) + ": got " + std::to_string(got[i]) +
             ", want " + std::to_string(want[i]);
    }
  }
  return "";
}

class GpuBuffer {
 public:
  explicit GpuBuffer(uint64_t bytes) : bytes_(bytes) {
    checkGpu(hipMalloc(&ptr_, bytes == 0 ? 1 : bytes), "hipMalloc");
  }
  ~GpuBuffer() { (void)hipFree(ptr_); }
  GpuBuffer(const GpuBuffer&) = delete;
  GpuBuffer& operator=(const GpuBuffer&) = delete;
  uint8_t* get() const { return static_cast<uint8_t*>(ptr_); }
  void upload(const Bytes& b) const {
    checkGpu(hipMemcpy(ptr_, b.data(), b.size(), hipMemcpyHostToDevice), "hipMemcpy to the GPU");
    checkGpu(hipDeviceSynchronize(), "waiting for the fill (later work runs on non-blocking streams)");
  }
  Bytes download(uint64_t offset, uint64_t bytes) const {
    Bytes out(bytes);
    checkGpu(hipMemcpy(out.data(), get() + offset, bytes, hipMemcpyDeviceToHost), "hipMemcpy from the GPU");
    return out;
  }

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

/// Runs `enqueue` on `stream`: when `graph` is set (CUDA builds), captured into a CUDA graph that is launched once,
/// waited for and destroyed; otherwise directly, without waiting.
template <class F>
void runMaybeCaptured(hipStream_t stream, bool graph, F&& enqueue) {
#if WEFT_BUILD_GPU_CUDA
  if (graph) {
    cudaGraph_t g = nullptr;
    cudaGraphExec_t exec = nullptr;
    checkGpu(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
    enqueue();
    checkGpu(cudaStreamEndCapture(stream, &g), "cudaStreamEndCapture");
    checkGpu(cudaGraphInstantiate(&exec, g, 0), "cudaGraphInstantiate");
    checkGpu(cudaGraphLaunch(exec, stream), "cudaGraphLaunch");
    checkGpu(hipStreamSynchronize(stream), "graph replay");
    (void)cudaGraphExecDestroy(exec);
    (void)cudaGraphDestroy(g);
    return;
  }
#endif
  (void)graph;
  enqueue();
}

struct Case {
  CollectiveKind kind;
  DataType type;
  ReduceOp op;
  uint64_t count;
  bool inPlace;
  int root;
};

std::string describe(const Case& c) {
  return std::string(collectiveKindName(c.kind)) + " " + dataTypeName(c.type) + " " + reduceOpName(c.op) + " count " +
         std::to_string(c.count) + (c.inPlace ? " in-place" : " out-of-place") + " root " + std::to_string(c.root);
}

// The expected output of this rank, what its one device buffer holds before the call (in-place: the input; else
// poison), and where the checked output starts in it.
struct Plan {
  Bytes want;
  Bytes bufferBefore;
  uint64_t outOffset = 0;
};

Plan plan(const Case& c, const std::vector<Bytes>& inputs, int rank) {
  const size_t n = inputs.size();
  const uint64_t es = dataTypeBytes(c.type);
  const uint64_t r = static_cast<uint64_t>(rank);
  const Bytes& mine = inputs[r];
  Plan p;
  switch (c.kind) {
    case CollectiveKind::kAllReduce:
      p.want.resize(c.count * es);
      referenceReduce(c.type, c.op, inputs, 0, c.count, p.want.data());
      p.bufferBefore = c.inPlace ? mine : Bytes(c.count * es, kPoison);
      break;
    case CollectiveKind::kReduce:
      p.bufferBefore = c.inPlace ? mine : Bytes(c.count * es, kPoison);
      if (rank == c.root) {
        p.want.resize(c.count * es);
        referenceReduce(c.type, c.op, inputs, 0, c.count, p.want.data());
      } else {
        p.want = p.bufferBefore;
      }
      break;
    case CollectiveKind::kReduceScatter:
      p.want.resize(c.count * es);
      referenceReduce(c.type, c.op, inputs, r * c.count, c.count, p.want.data());
      p.bufferBefore = c.inPlace ? mine : Bytes(c.count * es, kPoison);
      p.outOffset = c.inPlace ? r * c.count * es : 0;
      break;
    case CollectiveKind::kAllGather:
      for (const Bytes& in : inputs) p.want.insert(p.want.end(), in.begin(), in.end());
      p.bufferBefore = Bytes(c.count * es * n, kPoison);
      if (c.inPlace) std::memcpy(p.bufferBefore.data() + r * c.count * es, mine.data(), mine.size());
      break;
    case CollectiveKind::kBroadcast:
      p.want = inputs[static_cast<size_t>(c.root)];
      p.bufferBefore = (c.inPlace && rank == c.root) ? mine : Bytes(c.count * es, kPoison);
      break;
    case CollectiveKind::kAllToAll:
      for (const Bytes& in : inputs) {
        p.want.insert(p.want.end(), in.begin() + static_cast<std::ptrdiff_t>(r * c.count * es),
                      in.begin() + static_cast<std::ptrdiff_t>((r + 1) * c.count * es));
      }
      p.bufferBefore = c.inPlace ? mine : Bytes(c.count * es * n, kPoison);
      break;
    default: break;
  }
  return p;
}

void enqueue(CollectiveComm& coll, const Case& c, const uint8_t* send, uint8_t* buffer, hipStream_t stream) {
  const uint64_t es = dataTypeBytes(c.type);
  const uint64_t r = static_cast<uint64_t>(coll.rank());
  const uint8_t* s = c.inPlace ? buffer : send;
  uint8_t* recv = buffer;
  if (c.inPlace && c.kind == CollectiveKind::kAllGather) s = buffer + r * c.count * es;
  if (c.inPlace && c.kind == CollectiveKind::kReduceScatter) recv = buffer + r * c.count * es;
  switch (c.kind) {
    case CollectiveKind::kAllReduce: coll.allReduce(s, recv, c.count, c.type, c.op, stream); break;
    case CollectiveKind::kReduce: coll.reduce(s, recv, c.count, c.type, c.op, c.root, stream); break;
    case CollectiveKind::kReduceScatter: coll.reduceScatter(s, recv, c.count, c.type, c.op, stream); break;
    case CollectiveKind::kAllGather: coll.allGather(s, recv, c.count, c.type, stream); break;
    case CollectiveKind::kBroadcast: coll.broadcast(s, recv, c.count, c.type, c.root, stream); break;
    case CollectiveKind::kAllToAll: coll.allToAll(s, recv, c.count, c.type, stream); break;
    default: break;
  }
}

// Where runCase puts a case's buffers: each in its own allocation (arena null), or in `arena` (a registered device
// buffer of `bytes`) at offsets that differ by rank, odd element offsets on odd ranks, so that the zero-copy paths
// run; an out-of-place send or recv may stay in its own allocation (unregistered).
struct Placement {
  uint8_t* arena = nullptr;
  uint64_t bytes = 0;
  bool sendOutside = false;
  bool recvOutside = false;
};

void runCase(CollectiveComm& coll, const Case& c, int caseId, uint64_t seed, hipStream_t stream, Placement place = {}) {
  SCOPED_TRACE(describe(c));
  const int n = coll.size();
  const uint64_t r = static_cast<uint64_t>(coll.rank());
  const uint64_t es = dataTypeBytes(c.type);
  const uint64_t inCount = (c.kind == CollectiveKind::kReduceScatter || c.kind == CollectiveKind::kAllToAll)
                               ? c.count * static_cast<uint64_t>(n)
                               : c.count;
  std::vector<Bytes> inputs;
  for (int p = 0; p < n; ++p) inputs.push_back(makeInput(seed, caseId, p, c.type, inCount));
  const Plan p = plan(c, inputs, coll.rank());
  const Bytes& mine = inputs[static_cast<size_t>(r)];
  GpuBuffer send(mine.size());
  GpuBuffer buffer(p.bufferBefore.size());
  uint8_t* sendAt = send.get();
  uint8_t* bufferAt = buffer.get();
  if (place.arena != nullptr) {
    // The buffer (also the in-place send) in the first half, the out-of-place send in the second.
    ASSERT_LE(64 * r + es + p.bufferBefore.size(), place.bytes / 2);
    ASSERT_LE(32 * r + mine.size(), place.bytes / 2);
    if (!(place.recvOutside && !c.inPlace)) bufferAt = place.arena + 64 * r + (r % 2) * es;
    if (!(place.sendOutside && !c.inPlace)) sendAt = place.arena + place.bytes / 2 + 32 * r;
  }
  checkGpu(hipMemcpy(sendAt, mine.data(), mine.size(), hipMemcpyHostToDevice), "hipMemcpy to the GPU");
  checkGpu(hipMemcpy(bufferAt, p.bufferBefore.data(), p.bufferBefore.size(), hipMemcpyHostToDevice),
           "hipMemcpy to the GPU");
  checkGpu(hipDeviceSynchronize(), "waiting for the fill (later work runs on non-blocking streams)");
  enqueue(coll, c, sendAt, bufferAt, stream);
  const hipError_t e = hipStreamSynchronize(stream);
  coll.checkError();
  checkGpu(e, "collective kernel");
  Bytes got(p.want.size());
  checkGpu(hipMemcpy(got.data(), bufferAt + p.outOffset, got.size(), hipMemcpyDeviceToHost), "hipMemcpy from the GPU");
  EXPECT_EQ(firstDifference(got, p.want), "");
}

std::vector<Case> matrix(int n) {
  std::vector<Case> cases;
  int k = 0;
  for (int t = 0; t < kDataTypeCount; ++t) {
    const auto type = static_cast<DataType>(t);
    for (CollectiveKind kind : {CollectiveKind::kAllReduce, CollectiveKind::kReduceScatter, CollectiveKind::kReduce}) {
      for (int o = 0; o < kReduceOpCount; ++o) {
        cases.push_back({kind, type, static_cast<ReduceOp>(o), 1003, (k++ % 2) == 0, k % n});
      }
      cases.push_back({kind, type, ReduceOp::kSum, 1, (k++ % 2) == 0, k % n});
      cases.push_back({kind, type, ReduceOp::kSum, 5000, (k++ % 2) == 0, k % n});
    }
    for (CollectiveKind kind : {CollectiveKind::kAllGather, CollectiveKind::kBroadcast, CollectiveKind::kAllToAll}) {
      for (uint64_t count : {uint64_t{1}, uint64_t{1003}, uint64_t{5000}}) {
        cases.push_back({kind, type, ReduceOp::kSum, count, (k++ % 2) == 0, k % n});
      }
    }
  }
  return cases;
}

CollectiveOptions withScratch(uint64_t scratchBytes) {
  CollectiveOptions o;
  o.scratchBytes = scratchBytes;
  o.budgetNs = 20000 * kMs;
  return o;
}

struct GpuRank {
  std::shared_ptr<Communicator> comm;
  std::unique_ptr<CollectiveComm> coll;
  GpuRank(int rank, int size, const UniqueId& id, uint64_t scratchBytes)
      : GpuRank(rank, size, id, withScratch(scratchBytes)) {}
  GpuRank(int rank, int size, const UniqueId& id, const CollectiveOptions& o) {
    checkGpu(hipSetDevice(0), "hipSetDevice");
    comm = std::make_shared<Communicator>(std::make_shared<TcpBootstrap>(rank, size, id, milliseconds(20000)),
                                          ipcConfig());
    coll = std::make_unique<CollectiveComm>(comm, o);
  }
};

// allreduce with `algorithm` forced: every type and op at an odd count, in-place and out-of-place; counts 1, 2, 3,
// 7 (two-shot among 4: ranks with empty shares), at and around the one-shot and two-shot launch limits, three
// times the one-shot limit (LL16 paths: several launches) and many scratch pieces.
void allReduceWith(int rank, int size, const UniqueId& id, uint64_t seed, AllReduceAlgorithm algorithm) {
  constexpr uint64_t kMax = 8192;
  CollectiveOptions o = withScratch(8192);
  o.allReduceAlgorithm = algorithm;
  o.oneShotMaxBytes = kMax;
  GpuRank r(rank, size, id, o);
  Stream stream;
  const uint64_t perLaunch = kMax / static_cast<uint64_t>(size - 1) / 16 * 16;
  int caseId = 0;
  for (int t = 0; t < kDataTypeCount && !::testing::Test::HasFailure(); ++t) {
    const auto type = static_cast<DataType>(t);
    const uint64_t atLimit = perLaunch / dataTypeBytes(type);
    const uint64_t atTwoShotLimit = static_cast<uint64_t>(size) * (perLaunch / 2) / dataTypeBytes(type);
    std::vector<Case> cases;
    for (int op = 0; op < kReduceOpCount; ++op) {
      for (bool inPlace : {false, true}) {
        cases.push_back({CollectiveKind::kAllReduce, type, static_cast<ReduceOp>(op), 1003, inPlace, 0});
      }
    }
    for (uint64_t count : {uint64_t{1}, uint64_t{2}, uint64_t{3}, uint64_t{7}, atLimit - 1, atLimit, atLimit + 1,
                           atTwoShotLimit, atTwoShotLimit + 1, 3 * atLimit + 5, uint64_t{5000}}) {
      cases.push_back({CollectiveKind::kAllReduce, type, ReduceOp::kSum, count, (caseId % 2) == 0, 0});
    }
    // The port allreduce runs among at most two ranks per GPU; beyond, scatter-gather (docs/collectives.md).
    const AllReduceAlgorithm want =
        algorithm == AllReduceAlgorithm::kPort && size > 2 ? AllReduceAlgorithm::kScatterGather : algorithm;
    for (const Case& c : cases) {
      EXPECT_EQ(r.coll->allReduceAlgorithmFor(c.count, type), want);
      runCase(*r.coll, c, caseId++, seed, stream.get());
      if (::testing::Test::HasFailure()) break;
    }
  }
  r.comm->bootstrap().barrier();
}

void everyCollective(int rank, int size, const UniqueId& id, uint64_t seed, bool oneShot = true) {
  CollectiveOptions o = withScratch(8192);  // small scratch: the 5000-element cases go in many pieces
  if (!oneShot) o.oneShotMaxBytes = 0;      // every allreduce and allgather through scratch
  GpuRank r(rank, size, id, o);
  Stream stream;
  const std::vector<Case> cases = matrix(size);
  for (size_t i = 0; i < cases.size() && !::testing::Test::HasFailure(); ++i) {
    runCase(*r.coll, cases[i], static_cast<int>(i), seed, stream.get());
  }
  // Group operations: allToAllV with uneven counts and a ring sendRecv with a send to self.
  {
    const int next = (rank + 1) % size;
    const int prev = (rank + size - 1) % size;
    const uint64_t count = 3001;
    Bytes out = makeInput(seed, 900 + rank, rank, DataType::kInt32, count);
    Bytes self = makeInput(seed, 950 + rank, rank, DataType::kInt32, 17);
    GpuBuffer outD(out.size()), selfD(self.size()), inD(out.size()), selfInD(self.size());
    outD.upload(out);
    selfD.upload(self);
    inD.upload(Bytes(out.size(), kPoison));
    selfInD.upload(Bytes(self.size(), kPoison));
    std::vector<PointToPoint> ops = {{PointToPoint::Direction::kSend, outD.get(), count, DataType::kInt32, next},
                                     {PointToPoint::Direction::kRecv, inD.get(), count, DataType::kInt32, prev},
                                     {PointToPoint::Direction::kSend, selfD.get(), 17, DataType::kInt32, rank},
                                     {PointToPoint::Direction::kRecv, selfInD.get(), 17, DataType::kInt32, rank}};
    r.coll->sendRecv(ops, stream.get());
    checkGpu(hipStreamSynchronize(stream.get()), "sendrecv kernel");
    r.coll->checkError();
    EXPECT_EQ(firstDifference(inD.download(0, out.size()), makeInput(seed, 900 + prev, prev, DataType::kInt32, count)),
              "");
    EXPECT_EQ(firstDifference(selfInD.download(0, self.size()), self), "");
  }
  r.comm->bootstrap().barrier();  // peers' kernels are done with this rank's scratch before it goes
}

#if WEFT_BUILD_GPU_CUDA
// allreduce captured into a graph, then replayed twice with fresh inputs written between the replays.
void graphReplay(int rank, int size, const UniqueId& id, uint64_t seed) {
  GpuRank r(rank, size, id, 1 << 20);
  Stream stream;
  const uint64_t count = 300007;  // more than one piece of the 1 MB scratch
  const Case c{CollectiveKind::kAllReduce, DataType::kFloat32, ReduceOp::kSum, count, false, 0};
  GpuBuffer send(count * 4), recv(count * 4);
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  checkGpu(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
  r.coll->allReduce(send.get(), recv.get(), count, DataType::kFloat32, ReduceOp::kSum, stream.get());
  checkGpu(cudaStreamEndCapture(stream.get(), &graph), "cudaStreamEndCapture");
  checkGpu(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
  for (int replay = 0; replay < 2; ++replay) {
    std::vector<Bytes> inputs;
    for (int p = 0; p < size; ++p) inputs.push_back(makeInput(seed, 1000 + replay, p, c.type, count));
    const Plan p = plan(c, inputs, rank);
    send.upload(inputs[static_cast<size_t>(rank)]);
    recv.upload(p.bufferBefore);
    r.comm->bootstrap().barrier();  // every rank's inputs are in place before any replay starts
    checkGpu(cudaGraphLaunch(exec, stream.get()), "cudaGraphLaunch");
    const hipError_t e = hipStreamSynchronize(stream.get());
    r.coll->checkError();
    checkGpu(e, "graph replay");
    EXPECT_EQ(firstDifference(recv.download(0, p.want.size()), p.want), "") << "replay " << replay;
    r.comm->bootstrap().barrier();  // nobody overwrites inputs while a peer still reads them
  }
  (void)cudaGraphExecDestroy(exec);
  (void)cudaGraphDestroy(graph);
  r.comm->bootstrap().barrier();
}
#endif

#if WEFT_BUILD_GPU_CUDA
// LL16 allreduces captured into a graph (a small one, one at the default limit's scale, two-shot among 4 ranks, and, on
// a second CollectiveComm with a small forced one-shot limit, one that takes several launches), replayed three times
// with fresh inputs and an eager one-shot call between the second and third replay.
void oneShotGraphReplay(int rank, int size, const UniqueId& id, uint64_t seed) {
  checkGpu(hipSetDevice(0), "hipSetDevice");
  auto comm =
      std::make_shared<Communicator>(std::make_shared<TcpBootstrap>(rank, size, id, milliseconds(20000)), ipcConfig());
  CollectiveComm autoComm(comm, withScratch(1 << 20));
  CollectiveOptions small = withScratch(1 << 16);
  small.allReduceAlgorithm = AllReduceAlgorithm::kOneShotLL;
  small.oneShotMaxBytes = 4096;
  CollectiveComm chunked(comm, small);
  Stream stream;
  struct Op {
    CollectiveComm* coll;
    Case c;
  };
  const Op ops[] = {{&autoComm, {CollectiveKind::kAllReduce, DataType::kFloat32, ReduceOp::kSum, 1000, false, 0}},
                    {&autoComm, {CollectiveKind::kAllReduce, DataType::kBfloat16, ReduceOp::kMax, 60001, true, 0}},
                    {&chunked, {CollectiveKind::kAllReduce, DataType::kInt32, ReduceOp::kSum, 5003, false, 0}}};
  std::vector<std::unique_ptr<GpuBuffer>> sends, bufs;
  for (const Op& op : ops) {
    // 60001 bf16 among 4 ranks is past the one-shot's share of kAuto: two-shot, on the same packets and epoch.
    EXPECT_NE(op.coll->allReduceAlgorithmFor(op.c.count, op.c.type), AllReduceAlgorithm::kScatterGather)
        << describe(op.c);
    const uint64_t bytes = op.c.count * dataTypeBytes(op.c.type);
    sends.push_back(std::make_unique<GpuBuffer>(bytes));
    bufs.push_back(std::make_unique<GpuBuffer>(bytes));
  }
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  checkGpu(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
  for (size_t k = 0; k < std::size(ops); ++k)
    enqueue(*ops[k].coll, ops[k].c, sends[k]->get(), bufs[k]->get(), stream.get());
  checkGpu(cudaStreamEndCapture(stream.get(), &graph), "cudaStreamEndCapture");
  checkGpu(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
  for (int replay = 0; replay < 3 && !::testing::Test::HasFailure(); ++replay) {
    std::vector<Plan> plans;
    for (size_t k = 0; k < std::size(ops); ++k) {
      std::vector<Bytes> inputs;
      for (int p = 0; p < size; ++p) {
        inputs.push_back(makeInput(seed, 2000 + replay * 10 + static_cast<int>(k), p, ops[k].c.type, ops[k].c.count));
      }
      plans.push_back(plan(ops[k].c, inputs, rank));
      sends[k]->upload(inputs[static_cast<size_t>(rank)]);
      bufs[k]->upload(plans.back().bufferBefore);
    }
    comm->bootstrap().barrier();  // every rank's inputs are in place before any replay starts
    checkGpu(cudaGraphLaunch(exec, stream.get()), "cudaGraphLaunch");
    const hipError_t e = hipStreamSynchronize(stream.get());
    autoComm.checkError();
    chunked.checkError();
    checkGpu(e, "graph replay");
    for (size_t k = 0; k < std::size(ops); ++k) {
      EXPECT_EQ(firstDifference(bufs[k]->download(0, plans[k].want.size()), plans[k].want), "")
          << "replay " << replay << " " << describe(ops[k].c);
    }
    comm->bootstrap().barrier();  // nobody overwrites inputs while a peer still reads them
    if (replay == 1) {
      runCase(autoComm, {CollectiveKind::kAllReduce, DataType::kFloat16, ReduceOp::kSum, 777, false, 0}, 3000, seed,
              stream.get());
    }
  }
  (void)cudaGraphExecDestroy(exec);
  (void)cudaGraphDestroy(graph);
  comm->bootstrap().barrier();
}

#endif

// Buffers one element past a 16-byte boundary (send, recv, both, or in place) take the element-by-element path of
// the reductions, aligned ones the 16-byte vector path; both give the reference. One scratch piece and several.
void misalignedReductions(int rank, int size, const UniqueId& id, uint64_t seed) {
  for (uint64_t scratch : {uint64_t{8192}, uint64_t{1} << 20}) {
    CollectiveOptions o = withScratch(scratch);
    o.allReduceAlgorithm = AllReduceAlgorithm::kScatterGather;
    GpuRank r(rank, size, id, o);
    Stream stream;
    int caseId = 0;
    for (DataType type : {DataType::kFloat32, DataType::kFloat16, DataType::kInt8, DataType::kFloat64}) {
      const uint64_t es = dataTypeBytes(type);
      for (uint64_t count : {uint64_t{7}, uint64_t{1003}, uint64_t{5000}}) {
        for (int shape = 0; shape < 4 && !::testing::Test::HasFailure();
             ++shape) {  // 0 send, 1 recv, 2 both, 3 in place
          SCOPED_TRACE(std::string(dataTypeName(type)) + " count " + std::to_string(count) + " shape " +
                       std::to_string(shape) + " scratch " + std::to_string(scratch));
          ++caseId;
          std::vector<Bytes> inputs;
          for (int p = 0; p < size; ++p) inputs.push_back(makeInput(seed, caseId, p, type, count));
          Bytes want(count * es);
          referenceReduce(type, ReduceOp::kSum, inputs, 0, count, want.data());
          const uint64_t sendOff = shape == 1 ? 0 : es;
          const uint64_t recvOff = shape == 0 ? 0 : es;
          GpuBuffer sendBuf(count * es + 16), recvBuf(count * es + 16);
          uint8_t* send = sendBuf.get() + sendOff;
          uint8_t* recv = shape == 3 ? send : recvBuf.get() + recvOff;
          const Bytes& mine = inputs[static_cast<size_t>(rank)];
          checkGpu(hipMemcpy(send, mine.data(), mine.size(), hipMemcpyHostToDevice), "hipMemcpy to the GPU");
          checkGpu(hipDeviceSynchronize(), "waiting for the fill (later work runs on non-blocking streams)");
          r.coll->allReduce(send, recv, count, type, ReduceOp::kSum, stream.get());
          const hipError_t e = hipStreamSynchronize(stream.get());
          r.coll->checkError();
          checkGpu(e, "allreduce kernel");
          Bytes got(count * es);
          checkGpu(hipMemcpy(got.data(), recv, got.size(), hipMemcpyDeviceToHost), "hipMemcpy from the GPU");
          EXPECT_EQ(firstDifference(got, want), "");
          const uint64_t per = count / static_cast<uint64_t>(size);
          if (per == 0 || shape == 3) continue;
          checkGpu(hipMemcpy(send, mine.data(), per * static_cast<uint64_t>(size) * es, hipMemcpyHostToDevice),
                   "hipMemcpy to the GPU");
          checkGpu(hipDeviceSynchronize(), "waiting for the fill (later work runs on non-blocking streams)");
          r.coll->reduceScatter(send, recv, per, type, ReduceOp::kSum, stream.get());
          const hipError_t e2 = hipStreamSynchronize(stream.get());
          r.coll->checkError();
          checkGpu(e2, "reducescatter kernel");
          Bytes share(per * es);
          checkGpu(hipMemcpy(share.data(), recv, share.size(), hipMemcpyDeviceToHost), "hipMemcpy from the GPU");
          EXPECT_EQ(firstDifference(share, Bytes(want.begin() + static_cast<std::ptrdiff_t>(per * es * rank),
                                                 want.begin() + static_cast<std::ptrdiff_t>(per * es * (rank + 1)))),
                    "");
        }
      }
    }
    r.comm->bootstrap().barrier();
  }
}

// Zero-copy allreduce: one registered GPU buffer per rank, allreduces from and into it at rank-specific offsets,
// every type at odd and large counts (sum; max on float), in place and out of place, then the same call captured in
// a CUDA graph and replayed; every run counted as zero-copy. Then a recv outside the registration: every rank stages.
void zeroCopyAllReduce(int rank, int size, const UniqueId& id, uint64_t seed) {
  CollectiveOptions o = withScratch(1 << 20);
  o.oneShotMaxBytes = 0;   // every allreduce is scatter-gather, the path registrations change
  o.autoRegister = false;  // the unregistered recv below must stage
  GpuRank r(rank, size, id, o);
  Stream stream;
  constexpr uint64_t kBufferBytes = 16 << 20;
  GpuBuffer buffer(kBufferBytes), outside(kBufferBytes);
  const uint32_t reg = r.coll->registerBuffer(buffer.get(), kBufferBytes);
  uint64_t zeroCopy = 0;
  int caseId = 0;
  auto check = [&](DataType type, ReduceOp op, uint64_t count, uint8_t* send, uint8_t* recv, bool graph) {
    ++caseId;
    const uint64_t es = dataTypeBytes(type);
    std::vector<Bytes> inputs;
    for (int p = 0; p < size; ++p) inputs.push_back(makeInput(seed, caseId, p, type, count));
    Bytes want(count * es);
    referenceReduce(type, op, inputs, 0, count, want.data());
    checkGpu(hipMemcpy(send, inputs[static_cast<size_t>(rank)].data(), count * es, hipMemcpyHostToDevice),
             "hipMemcpy to the GPU");
    if (recv != send) checkGpu(hipMemset(recv, 0xa5, count * es), "hipMemset (poison)");
    checkGpu(hipDeviceSynchronize(), "waiting for the fill (later work runs on non-blocking streams)");
    runMaybeCaptured(stream.get(), graph, [&] { r.coll->allReduce(send, recv, count, type, op, stream.get()); });
    const hipError_t e = hipStreamSynchronize(stream.get());
    r.coll->checkError();
    checkGpu(e, "allreduce kernel");
    Bytes got(count * es);
    checkGpu(hipMemcpy(got.data(), recv, got.size(), hipMemcpyDeviceToHost), "hipMemcpy from the GPU");
    EXPECT_EQ(firstDifference(got, want), "")
        << dataTypeName(type) << " " << reduceOpName(op) << " count " << count << " case " << caseId;
  };
  uint8_t* base = buffer.get();
  for (DataType type : {DataType::kFloat32, DataType::kFloat16, DataType::kBfloat16, DataType::kInt8,
                        DataType::kFloat64, DataType::kFloat8E4M3}) {
    const uint64_t es = dataTypeBytes(type);
    for (uint64_t count : {uint64_t{1}, uint64_t{1003}, uint64_t{300007}, (uint64_t{6} << 20) / es}) {
      for (bool inPlace : {false, true}) {
        uint8_t* send = base + 256 * static_cast<uint64_t>(rank) + (rank % 2) * es;
        uint8_t* recv = inPlace ? send : base + kBufferBytes / 2 + 64 * static_cast<uint64_t>(rank);
        check(type, ReduceOp::kSum, count, send, recv, false);
        ++zeroCopy;
        if (type == DataType::kFloat32) {
          check(type, ReduceOp::kMax, count, send, recv, false);
          check(type, ReduceOp::kSum, count, send, recv, true);
          zeroCopy += 2;
        }
      }
      if (::testing::Test::HasFailure()) break;
    }
  }
  // reduceScatter: share `rank` of every rank's send, reduced straight into recv (in place: recv is that share).
  for (DataType type : {DataType::kFloat32, DataType::kBfloat16, DataType::kInt8}) {
    const uint64_t es = dataTypeBytes(type);
    for (uint64_t count : {uint64_t{1003}, (uint64_t{1} << 20) / es}) {
      for (bool inPlace : {false, true}) {
        ++caseId;
        const uint64_t total = count * static_cast<uint64_t>(size);
        std::vector<Bytes> inputs;
        for (int p = 0; p < size; ++p) inputs.push_back(makeInput(seed, caseId, p, type, total));
        Bytes all(total * es);
        referenceReduce(type, ReduceOp::kSum, inputs, 0, total, all.data());
        const Bytes want(all.begin() + static_cast<std::ptrdiff_t>(count * es * rank),
                         all.begin() + static_cast<std::ptrdiff_t>(count * es * (rank + 1)));
        uint8_t* send = base + 256 * static_cast<uint64_t>(rank);
        uint8_t* recv = inPlace ? send + count * es * static_cast<uint64_t>(rank)
                                : base + kBufferBytes / 2 + 64 * static_cast<uint64_t>(rank);
        checkGpu(hipMemcpy(send, inputs[static_cast<size_t>(rank)].data(), total * es, hipMemcpyHostToDevice),
                 "hipMemcpy to the GPU");
        checkGpu(hipDeviceSynchronize(), "waiting for the fill (later work runs on non-blocking streams)");
        r.coll->reduceScatter(send, recv, count, type, ReduceOp::kSum, stream.get());
        const hipError_t e = hipStreamSynchronize(stream.get());
        r.coll->checkError();
        checkGpu(e, "reducescatter kernel");
        Bytes got(count * es);
        checkGpu(hipMemcpy(got.data(), recv, got.size(), hipMemcpyDeviceToHost), "hipMemcpy from the GPU");
        EXPECT_EQ(firstDifference(got, want), "") << "reducescatter " << dataTypeName(type) << " count " << count;
        ++zeroCopy;
      }
    }
  }
  EXPECT_EQ(r.coll->zeroCopyCalls(), zeroCopy);
  uint8_t* recv = rank == size - 1 ? outside.get() : base + kBufferBytes / 2;
  check(DataType::kFloat32, ReduceOp::kSum, 300007, base, recv, false);
  EXPECT_EQ(r.coll->zeroCopyCalls(), zeroCopy) << "a rank with an unregistered recv: every rank stages";
  r.coll->deregisterBuffer(reg);
  r.comm->bootstrap().barrier();
}

// Every collective with a zero-copy path on buffers inside one registered device buffer (the whole matrix of
// everyCollective, one-shot off): results match the reference and zeroCopyCalls counts every call that must not
// stage. Then, on three types, recvs outside the registration on every rank (allreduce and reduce stage, the
// others still go zero-copy) and sends outside on every rank but the root (only broadcast still goes zero-copy).
bool expectZeroCopy(const Case& c, bool sendOutside, bool recvOutside) {
  if (c.kind == CollectiveKind::kAllToAll && c.inPlace) return false;
  if (recvOutside && !c.inPlace) return c.kind != CollectiveKind::kAllReduce && c.kind != CollectiveKind::kReduce;
  if (sendOutside && !c.inPlace) return c.kind == CollectiveKind::kBroadcast;
  return true;
}

void zeroCopyEveryCollective(int rank, int size, const UniqueId& id, uint64_t seed) {
  CollectiveOptions o = withScratch(8192);
  o.oneShotMaxBytes = 0;   // no one-shot LL: every call either stages or goes zero-copy
  o.autoRegister = false;  // buffers outside the registration must stage
  GpuRank r(rank, size, id, o);
  Stream stream;
  constexpr uint64_t kArenaBytes = 4 << 20;
  GpuBuffer arena(kArenaBytes);
  const uint32_t reg = r.coll->registerBuffer(arena.get(), kArenaBytes);
  const std::vector<Case> cases = matrix(size);
  uint64_t zeroCopy = 0;
  for (int pass = 0; pass < 3 && !::testing::Test::HasFailure(); ++pass) {
    for (size_t i = 0; i < cases.size(); ++i) {
      const Case& c = cases[i];
      if (pass > 0 && c.type != DataType::kFloat32 && c.type != DataType::kUint8 && c.type != DataType::kFloat16) {
        continue;
      }
      const Placement place{arena.get(), kArenaBytes, pass == 2 && rank != c.root, pass == 1};
      const uint64_t before = r.coll->zeroCopyCalls();
      runCase(*r.coll, c, static_cast<int>(i + cases.size() * static_cast<size_t>(pass)), seed, stream.get(), place);
      const bool want = expectZeroCopy(c, pass == 2, pass == 1);  // size > 1: some rank's send is outside
      EXPECT_EQ(r.coll->zeroCopyCalls() - before, want ? 1u : 0u)
          << "pass " << pass << ": " << describe(c) << (want ? " should" : " should not") << " run zero-copy";
      zeroCopy += want ? 1 : 0;
      if (::testing::Test::HasFailure()) break;
    }
  }
  EXPECT_EQ(r.coll->zeroCopyCalls(), zeroCopy);
  r.coll->deregisterBuffer(reg);
  r.comm->bootstrap().barrier();
}

// Large messages: each collective at 256 MB (the largest buffer of the call: the input of allreduce, reduce and
// broadcast, the output of allGather, both of reduceScatter and allToAll) out of place, and at an odd size a little
// above 64 MB in place, float sum on the default selection and the default 64 MB scratch (so the staged paths go
// in several pieces); then count 0 of each, which must leave the buffers untouched.
void largeMessages(int rank, int size, const UniqueId& id, uint64_t seed) {
  GpuRank r(rank, size, id, CollectiveOptions{});
  Stream stream;
  const uint64_t n = static_cast<uint64_t>(size);
  constexpr uint64_t kBig = (uint64_t{256} << 20) / 4;     // floats in 256 MB
  constexpr uint64_t kOdd = (uint64_t{64} << 20) / 4 + 7;  // floats, odd
  int caseId = 5000;
  for (const bool big : {true, false}) {
    const uint64_t total = big ? kBig : kOdd;
    const uint64_t per = total / n;  // the per-rank count of the collectives whose large side is n times it
    const Case cases[] = {
        {CollectiveKind::kAllReduce, DataType::kFloat32, ReduceOp::kSum, total, !big, 0},
        {CollectiveKind::kReduce, DataType::kFloat32, ReduceOp::kSum, total, !big, size - 1},
        {CollectiveKind::kBroadcast, DataType::kFloat32, ReduceOp::kSum, total, !big, size - 1},
        {CollectiveKind::kAllGather, DataType::kFloat32, ReduceOp::kSum, per, !big, 0},
        {CollectiveKind::kReduceScatter, DataType::kFloat32, ReduceOp::kSum, per, !big, 0},
        {CollectiveKind::kAllToAll, DataType::kFloat32, ReduceOp::kSum, per, false, 0},
    };
    for (const Case& c : cases) {
      if (::testing::Test::HasFailure()) return;
      runCase(*r.coll, c, caseId++, seed, stream.get());
    }
  }
  // Count 0: no launch, no error, and nothing written into the (poisoned) buffers.
  GpuBuffer send(64), recv(64 * n);
  send.upload(Bytes(64, 1));
  recv.upload(Bytes(64 * n, kPoison));
  r.coll->allReduce(send.get(), recv.get(), 0, DataType::kFloat32, ReduceOp::kSum, stream.get());
  r.coll->reduce(send.get(), recv.get(), 0, DataType::kFloat32, ReduceOp::kSum, 0, stream.get());
  r.coll->broadcast(send.get(), recv.get(), 0, DataType::kFloat32, 0, stream.get());
  r.coll->allGather(send.get(), recv.get(), 0, DataType::kFloat32, stream.get());
  r.coll->reduceScatter(send.get(), recv.get(), 0, DataType::kFloat32, ReduceOp::kSum, stream.get());
  r.coll->allToAll(send.get(), recv.get(), 0, DataType::kFloat32, stream.get());
  checkGpu(hipStreamSynchronize(stream.get()), "count-0 collectives");
  r.coll->checkError();
  EXPECT_EQ(firstDifference(recv.download(0, 64 * n), Bytes(64 * n, kPoison)), "");
  r.comm->bootstrap().barrier();
}

uint64_t freshSeed() { return std::random_device{}() * 0x100000001ull + static_cast<uint64_t>(time(nullptr)); }

/// Runs body(rank, size, id, seed) on 2 and then on 4 processes, each time with a fresh id and seed.
template <class Body>
void onTwoAndFourProcesses(Body body, std::chrono::seconds timeout) {
  for (int size : {2, 4}) {
    UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
    const uint64_t seed = freshSeed();
    auto results = runRanks(
        size, [&](int rank, int n) { body(rank, n, id, seed); }, timeout);
    WEFT_EXPECT_RANKS_OK(results) << size << " ranks, seed " << seed;
  }
}

TEST(CollectivesGpu, EveryCollectiveTwoProcesses) {
  if (!gpuPresentWithoutInit()) GTEST_SKIP() << "no GPU device node on this machine";
  UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
  const uint64_t seed = freshSeed();
  auto results = runRanks(
      2, [&](int rank, int n) { everyCollective(rank, n, id, seed); }, std::chrono::seconds(180));
  WEFT_EXPECT_RANKS_OK(results) << "seed " << seed;
}

// Every LL16 launch on one block: the unrolled kernels at many packets per thread for all but the smallest sizes.
TEST(CollectivesGpu, EveryCollectiveOnOneLLBlockTwoProcesses) {
  if (!gpuPresentWithoutInit()) GTEST_SKIP() << "no GPU device node on this machine";
  UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
  const uint64_t seed = freshSeed();
  auto results = runRanks(
      2,
      [&](int rank, int n) {
        ASSERT_EQ(setenv("WEFT_COLL_ONESHOT_BLOCKS", "1", 1), 0);
        everyCollective(rank, n, id, seed);
      },
      std::chrono::seconds(180));
  WEFT_EXPECT_RANKS_OK(results) << "seed " << seed;
}

TEST(CollectivesGpu, EveryCollectiveStagedOnlyThreeProcesses) {
  if (!gpuPresentWithoutInit()) GTEST_SKIP() << "no GPU device node on this machine";
  UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
  const uint64_t seed = freshSeed();
  auto results = runRanks(
      3, [&](int rank, int n) { everyCollective(rank, n, id, seed, false); }, std::chrono::seconds(180));
  WEFT_EXPECT_RANKS_OK(results) << "seed " << seed;
}

TEST(CollectivesGpu, EveryCollectiveFourProcesses) {
  if (!gpuPresentWithoutInit()) GTEST_SKIP() << "no GPU device node on this machine";
  UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
  const uint64_t seed = freshSeed();
  auto results = runRanks(
      4, [&](int rank, int n) { everyCollective(rank, n, id, seed); }, std::chrono::seconds(240));
  WEFT_EXPECT_RANKS_OK(results) << "seed " << seed;
}

TEST(CollectivesGpu, EveryCollectiveEightProcesses) {
  if (!gpuPresentWithoutInit()) GTEST_SKIP() << "no GPU device node on this machine";
  UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
  const uint64_t seed = freshSeed();
  auto results = runRanks(
      8, [&](int rank, int n) { everyCollective(rank, n, id, seed); }, std::chrono::seconds(300));
  WEFT_EXPECT_RANKS_OK(results) << "seed " << seed;
}

TEST(CollectivesGpu, LargeMessagesUpTo256MBAndCountZeroTwoProcesses) {
  if (!gpuPresentWithoutInit()) GTEST_SKIP() << "no GPU device node on this machine";
  UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
  const uint64_t seed = freshSeed();
  auto results = runRanks(
      2, [&](int rank, int n) { largeMessages(rank, n, id, seed); }, std::chrono::seconds(300));
  WEFT_EXPECT_RANKS_OK(results) << "seed " << seed;
}

TEST(CollectivesGpu, AllReduceEachAlgorithmTwoAndFourProcesses) {
  if (!gpuPresentWithoutInit()) GTEST_SKIP() << "no GPU device node on this machine";
  for (int size : {2, 4}) {
    for (AllReduceAlgorithm algorithm : {AllReduceAlgorithm::kOneShotLL, AllReduceAlgorithm::kScatterGather,
                                         AllReduceAlgorithm::kTwoShotLL, AllReduceAlgorithm::kPort}) {
      UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
      const uint64_t seed = freshSeed();
      auto results = runRanks(
          size, [&](int rank, int n) { allReduceWith(rank, n, id, seed, algorithm); }, std::chrono::seconds(180));
      WEFT_EXPECT_RANKS_OK(results) << size << " ranks, " << allReduceAlgorithmName(algorithm) << ", seed " << seed;
    }
  }
}

// The LL16 grids' shapes: the default (the small U = 1 kernels on as many blocks as the message needs, here up to 4),
// one block (every message above 256 packets runs the unrolled kernels, up to 32 packets per thread), and two blocks
// at 16 packets per thread; one-shot and two-shot, on every type and the sizes at the launch limits.
TEST(CollectivesGpu, AllReduceLLGridShapesTwoAndFourProcesses) {
  if (!gpuPresentWithoutInit()) GTEST_SKIP() << "no GPU device node on this machine";
  const std::pair<const char*, const char*> shapes[] = {{"0", "0"}, {"1", "1"}, {"2", "16"}};
  for (const auto& shape : shapes) {
    // Plain locals: clang before 16 (hipcc) cannot capture structured bindings in a lambda.
    const char* blocks = shape.first;
    const char* perThread = shape.second;
    for (int size : {2, 4}) {
      for (AllReduceAlgorithm algorithm : {AllReduceAlgorithm::kOneShotLL, AllReduceAlgorithm::kTwoShotLL}) {
        UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
        const uint64_t seed = freshSeed();
        auto results = runRanks(
            size,
            [&](int rank, int n) {
              ASSERT_EQ(setenv("WEFT_COLL_ONESHOT_BLOCKS", blocks, 1), 0);
              ASSERT_EQ(setenv("WEFT_COLL_LL_PACKETS_PER_THREAD", perThread, 1), 0);
              allReduceWith(rank, n, id, seed, algorithm);
            },
            std::chrono::seconds(180));
        WEFT_EXPECT_RANKS_OK(results) << "at most " << blocks << " blocks, " << perThread << " packets per thread, "
                                      << size << " ranks, " << allReduceAlgorithmName(algorithm) << ", seed " << seed;
      }
    }
  }
}

TEST(CollectivesGpu, ReductionsOnMisalignedBuffersTwoProcesses) {
  if (!gpuPresentWithoutInit()) GTEST_SKIP() << "no GPU device node on this machine";
  UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
  const uint64_t seed = freshSeed();
  auto results = runRanks(
      2, [&](int rank, int n) { misalignedReductions(rank, n, id, seed); }, std::chrono::seconds(180));
  WEFT_EXPECT_RANKS_OK(results) << "seed " << seed;
}

// The most blocks anyone may ask for, on 2 ranks sharing the GPU: more than it holds resident of the staged kernels
// (H200: 132, one 512-thread block per SM), so without the limit (collectiveGridBlocks) spinning blocks leave
// others unscheduled and the wait budget traps: the staged allgather's grid barrier did at 99 blocks per rank,
// when the limit was sized from the fp8 reduction's occupancy (2 blocks per SM).
TEST(CollectivesGpu, GridAskedToFillTheGpuIsClampedAndCompletesTwoProcesses) {
  if (!gpuPresentWithoutInit()) GTEST_SKIP() << "no GPU device node on this machine";
  UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
  const uint64_t seed = freshSeed();
  auto results = runRanks(
      2,
      [&](int rank, int n) {
        CollectiveOptions o = withScratch(uint64_t{1} << 24);
        o.gpuBlocks = 256;
        o.budgetNs = 5000 * kMs;
        o.allReduceAlgorithm = AllReduceAlgorithm::kScatterGather;
        GpuRank r(rank, n, id, o);
        Stream stream;
        int caseId = 0;
        runCase(*r.coll, {CollectiveKind::kAllReduce, DataType::kFloat32, ReduceOp::kSum, uint64_t{1} << 22, false, 0},
                ++caseId, seed, stream.get());
        runCase(*r.coll, {CollectiveKind::kAllReduce, DataType::kBfloat16, ReduceOp::kMax, 300001, true, 0}, ++caseId,
                seed, stream.get());
        runCase(*r.coll, {CollectiveKind::kAllGather, DataType::kFloat32, ReduceOp::kSum, uint64_t{1} << 20, false, 0},
                ++caseId, seed, stream.get());
        runCase(*r.coll,
                {CollectiveKind::kReduceScatter, DataType::kFloat32, ReduceOp::kSum, uint64_t{1} << 20, false, 0},
                ++caseId, seed, stream.get());
        r.comm->bootstrap().barrier();
      },
      std::chrono::seconds(120));
  WEFT_EXPECT_RANKS_OK(results) << "seed " << seed;
}

// A peer that never joins: rank 0's kernel waits for it, runs out of its budget, records the wait and traps;
// checkError names the operation, the rank and the peer.
TEST(CollectivesGpu, PeerThatNeverJoinsTrapsAndIsRecorded) {
  if (!gpuPresentWithoutInit()) GTEST_SKIP() << "no GPU device node on this machine";
  UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
  auto results = runRanks(
      2,
      [&](int rank, int n) {
        checkGpu(hipSetDevice(0), "hipSetDevice");
        auto comm = std::make_shared<Communicator>(std::make_shared<TcpBootstrap>(rank, n, id, milliseconds(20000)),
                                                   ipcConfig());
        CollectiveOptions o;
        o.scratchBytes = 1 << 16;
        o.budgetNs = 300 * kMs;
        CollectiveComm coll(comm, o);
        if (rank == 0) {
          GpuBuffer data(4096);
          Stream stream;
          coll.allReduce(data.get(), data.get(), 1024, DataType::kFloat32, ReduceOp::kSum, stream.get());
          EXPECT_NE(hipStreamSynchronize(stream.get()), hipSuccess) << "the allreduce finished without its peer";
          try {
            coll.checkError();
            ADD_FAILURE() << "no error recorded";
          } catch (const Error& e) {
            EXPECT_EQ(e.code(), ErrorCode::kTimeout);
            const std::string text = e.what();
            EXPECT_NE(text.find("allreduce"), std::string::npos) << text;
            EXPECT_NE(text.find("rank 0"), std::string::npos) << text;
            EXPECT_NE(text.find("peer 1"), std::string::npos) << text;
          }
        }
        comm->bootstrap().barrier();
        std::fflush(nullptr);
        std::_Exit(::testing::Test::HasFailure() ? 1 : 0);  // no teardown in a broken context
      },
      std::chrono::seconds(60));
  WEFT_EXPECT_RANKS_OK(results);
}

TEST(CollectivesGpu, ZeroCopyEveryCollectiveTwoThreeAndFourProcesses) {
  if (!gpuPresentWithoutInit()) GTEST_SKIP() << "no GPU device node on this machine";
  for (int size : {2, 3, 4}) {
    UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
    const uint64_t seed = freshSeed();
    auto results = runRanks(
        size, [&](int rank, int n) { zeroCopyEveryCollective(rank, n, id, seed); }, std::chrono::seconds(240));
    WEFT_EXPECT_RANKS_OK(results) << size << " ranks, seed " << seed;
  }
}

#if WEFT_BUILD_GPU_CUDA
TEST(CollectivesGpu, ZeroCopyAllReduceAndReduceScatterOnRegisteredBuffersTwoAndFourProcesses) {
  if (!gpuPresentWithoutInit()) GTEST_SKIP() << "no GPU device node on this machine";
  onTwoAndFourProcesses(zeroCopyAllReduce, std::chrono::seconds(180));
}

// Registration on first use: device buffers nobody registered go zero-copy, every result right; then the same
// allreduce captured in a CUDA graph replays zero-copy; then the buffer is freed and another allocated (often at the
// same address): results stay right and the new one goes zero-copy in turn. waitForPeers: the call that first touches
// an allocation waits for the peers to take it in (generous budget; it ends once they have) and is zero-copy itself;
// without (WEFT_COLL_REGISTER_WAIT_MS=0) one within a few goes zero-copy (the first too, when the peers' answers
// happen to arrive within it).
void autoRegisteredZeroCopy(int rank, int size, const UniqueId& id, uint64_t seed, bool waitForPeers) {
  setenv("WEFT_COLL_REGISTER_WAIT_MS", waitForPeers ? "10000" : "0", 1);
  CollectiveOptions o = withScratch(1 << 20);
  o.oneShotMaxBytes = 0;  // every allreduce is scatter-gather
  GpuRank r(rank, size, id, o);
  Stream stream;
  constexpr uint64_t kBufferBytes = 8 << 20;
  constexpr uint64_t kCount = 300007;
  int caseId = 0;
  auto allReduceOnce = [&](uint8_t* base, bool graph) {
    ++caseId;
    std::vector<Bytes> inputs;
    for (int p = 0; p < size; ++p) inputs.push_back(makeInput(seed, caseId, p, DataType::kFloat32, kCount));
    Bytes want(kCount * 4);
    referenceReduce(DataType::kFloat32, ReduceOp::kSum, inputs, 0, kCount, want.data());
    uint8_t* send = base + 256 * static_cast<uint64_t>(rank);
    uint8_t* recv = base + kBufferBytes / 2 + 64 * static_cast<uint64_t>(rank);
    checkGpu(hipMemcpy(send, inputs[static_cast<size_t>(rank)].data(), kCount * 4, hipMemcpyHostToDevice),
             "hipMemcpy to the GPU");
    checkGpu(hipMemset(recv, 0xa5, kCount * 4), "hipMemset (poison)");
    checkGpu(hipDeviceSynchronize(), "waiting for the fill (later work runs on non-blocking streams)");
    const uint64_t before = r.coll->zeroCopyCalls();
    runMaybeCaptured(stream.get(), graph,
                     [&] { r.coll->allReduce(send, recv, kCount, DataType::kFloat32, ReduceOp::kSum, stream.get()); });
    const hipError_t e = hipStreamSynchronize(stream.get());
    r.coll->checkError();
    checkGpu(e, "allreduce kernel");
    Bytes got(kCount * 4);
    checkGpu(hipMemcpy(got.data(), recv, got.size(), hipMemcpyDeviceToHost), "hipMemcpy from the GPU");
    EXPECT_EQ(firstDifference(got, want), "") << "case " << caseId;
    return r.coll->zeroCopyCalls() - before;
  };
  auto untilZeroCopy = [&](uint8_t* base) {
    for (int call = 0; call < 200 && !::testing::Test::HasFailure(); ++call) {
      if (allReduceOnce(base, false) == 1) return call;
    }
    ADD_FAILURE() << "no zero-copy run in 200 calls";
    return -1;
  };
  auto first = std::make_unique<GpuBuffer>(kBufferBytes);
  if (waitForPeers) {
    EXPECT_EQ(allReduceOnce(first->get(), false), 1u) << "the first call waited and is zero-copy";
  } else {
    EXPECT_GE(untilZeroCopy(first->get()), 0);
  }
  for (int i = 0; i < 3; ++i) EXPECT_EQ(allReduceOnce(first->get(), false), 1u) << "call " << i;
#if WEFT_BUILD_GPU_CUDA
  EXPECT_EQ(allReduceOnce(first->get(), true), 1u) << "the graph replay staged";
#endif
  first.reset();  // the next allocation often lands at its address: every call's data check would catch a stale map
  GpuBuffer second(kBufferBytes);
  if (waitForPeers) {
    // A new allocation at the old address is a new registration: right data (checked), zero-copy at once.
    EXPECT_EQ(allReduceOnce(second.get(), false), 1u) << "the new allocation waited";
  } else {
    EXPECT_GE(untilZeroCopy(second.get()), 0);
  }
  EXPECT_EQ(allReduceOnce(second.get(), false), 1u);
  r.comm->bootstrap().barrier();
}

// The copy-engine allreduce on large messages (several pieces of a 6 MB scratch, odd counts, in place and out of
// place, sum and max), eager and captured into CUDA graphs (two captures, each launched once).
void portAllReduceLarge(int rank, int size, const UniqueId& id, uint64_t seed) {
  CollectiveOptions o = withScratch(6 << 20);
  o.allReduceAlgorithm = AllReduceAlgorithm::kPort;
  GpuRank r(rank, size, id, o);
  Stream stream;
  // Among more than two ranks on one GPU it falls back to scatter-gather (docs/collectives.md); results must hold.
  EXPECT_EQ(r.coll->allReduceAlgorithmFor(1 << 20, DataType::kFloat32),
            size > 2 ? AllReduceAlgorithm::kScatterGather : AllReduceAlgorithm::kPort);
  int caseId = 0;
  for (uint64_t count : {uint64_t{1}, uint64_t{300007}, (uint64_t{16} << 20) / 4 + 3}) {
    for (bool graph : {false, true}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
        ++caseId;
        const bool inPlace = caseId % 2 == 0;
        std::vector<Bytes> inputs;
        for (int p = 0; p < size; ++p) inputs.push_back(makeInput(seed, caseId, p, DataType::kFloat32, count));
        Bytes want(count * 4);
        referenceReduce(DataType::kFloat32, op, inputs, 0, count, want.data());
        GpuBuffer send(count * 4), recvBuffer(count * 4);
        uint8_t* recv = inPlace ? send.get() : recvBuffer.get();
        for (int replay = 0; replay < (graph ? 2 : 1); ++replay) {
          send.upload(inputs[static_cast<size_t>(rank)]);
          if (!inPlace) checkGpu(hipMemset(recv, 0xa5, count * 4), "hipMemset (poison)");
          checkGpu(hipDeviceSynchronize(), "waiting for the fill");
          runMaybeCaptured(stream.get(), graph,
                           [&] { r.coll->allReduce(send.get(), recv, count, DataType::kFloat32, op, stream.get()); });
          const hipError_t e = hipStreamSynchronize(stream.get());
          r.coll->checkError();
          checkGpu(e, "port allreduce");
          Bytes got(count * 4);
          checkGpu(hipMemcpy(got.data(), recv, got.size(), hipMemcpyDeviceToHost), "hipMemcpy from the GPU");
          EXPECT_EQ(firstDifference(got, want), "")
              << "count " << count << (graph ? " graph" : "") << (inPlace ? " in place" : "") << " case " << caseId;
        }
        if (::testing::Test::HasFailure()) return;
      }
    }
  }
  r.comm->bootstrap().barrier();
}

TEST(CollectivesGpu, PortAllReduceLargeAndInCudaGraphTwoAndFourProcesses) {
  if (!gpuPresentWithoutInit()) GTEST_SKIP() << "no GPU device node on this machine";
  onTwoAndFourProcesses(portAllReduceLarge, std::chrono::seconds(180));
}

TEST(CollectivesGpu, UnregisteredBuffersGoZeroCopyAfterAFewCallsTwoAndFourProcesses) {
  if (!gpuPresentWithoutInit()) GTEST_SKIP() << "no GPU device node on this machine";
  onTwoAndFourProcesses([](int rank, int size, const UniqueId& id,
                           uint64_t seed) { autoRegisteredZeroCopy(rank, size, id, seed, false); },
                        std::chrono::seconds(180));
}

TEST(CollectivesGpu, UnregisteredBuffersGoZeroCopyAtTheFirstCallTwoAndFourProcesses) {
  if (!gpuPresentWithoutInit()) GTEST_SKIP() << "no GPU device node on this machine";
  onTwoAndFourProcesses(
      [](int rank, int size, const UniqueId& id, uint64_t seed) { autoRegisteredZeroCopy(rank, size, id, seed, true); },
      std::chrono::seconds(180));
}

TEST(CollectivesGpu, AllReduceInCudaGraphTwoAndFourProcesses) {
  if (!gpuPresentWithoutInit()) GTEST_SKIP() << "no GPU device node on this machine";
  onTwoAndFourProcesses(graphReplay, std::chrono::seconds(120));
}

TEST(CollectivesGpu, OneShotAllReduceInCudaGraphTwoAndFourProcesses) {
  if (!gpuPresentWithoutInit()) GTEST_SKIP() << "no GPU device node on this machine";
  onTwoAndFourProcesses(oneShotGraphReplay, std::chrono::seconds(120));
}
#endif

#else

TEST(CollectivesGpu, KernelsNeedAGpuBuild) {
  GTEST_SKIP() << "WEFT_GPU=none build: the collective algorithms ran in host threads (mp_collectives_test)";
}

#endif

}  // namespace
}  // namespace weft::test
