// CollectiveComm between 1 to 4 real processes over the host transport (host thread teams on shared host memory):
// every collective on every type (every op where one reduces), counts 0, 1, odd, and larger than the scratch
// (a small scratchBytes forces many pieces), in-place and out-of-place, outputs poisoned first, fresh random
// inputs per run, every result compared bit for bit with a CPU reference computed here from every rank's input.
// allreduce also runs with each algorithm forced (one-shot LL16, scatter-gather) and with the automatic choice,
// at and around the one-shot size limit, and many times back to back (the LL epochs and buffer parities).
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>
#include <vector>
#include <weft/collectives.hpp>
#include <weft/communicator.hpp>
#include <weft/copy_device.hpp>
#include <weft/error.hpp>
#include <weft/reduce_device.hpp>
#include <weft/shared_host_memory.hpp>

#include "multi_process.hpp"

namespace weft {
namespace {

using std::chrono::milliseconds;
using Bytes = std::vector<uint8_t>;

constexpr uint64_t kMs = 1'000'000;
constexpr uint8_t kPoison = 0xa5;

Config hostOnlyConfig() {
  Config c = Config::defaults();
  c.transports[PeerClass::kSameProcess] = {"host"};
  c.transports[PeerClass::kSameHost] = {"host"};
  c.bootstrapTimeout = milliseconds(10000);
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

// `count` elements of `rank`'s input for case `caseId`: raw random bits for integers and fp8 (NaNs and
// saturation included), random values in [-8, 8] for the wider floats.
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

// Element `i` of the reduction over ranks of inputs[p] viewed from element `offset`, into out (bytes).
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

// Describes the first differing byte ("" when equal).
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

// Where runCase puts a case's buffers: in their own vectors (arena null), or copied into `arena` (a registered
// shared buffer of `bytes`) at offsets that differ by rank, so that the zero-copy paths run.
struct Placement {
  uint8_t* arena = nullptr;
  uint64_t bytes = 0;
  bool sendOutside = false;  // an out-of-place send stays in its vector (unregistered)
  bool recvOutside = false;  // an out-of-place recv stays in its vector (unregistered)
};

// Runs one case on this rank and checks its output against the reference.
void runCase(CollectiveComm& coll, const Case& c, int caseId, uint64_t seed, Placement place = {}) {
  const int n = coll.size();
  const int rank = coll.rank();
  const uint64_t es = dataTypeBytes(c.type);
  const uint64_t nn = static_cast<uint64_t>(n);
  const uint64_t r = static_cast<uint64_t>(rank);
  SCOPED_TRACE(describe(c));
  // Inputs of every rank (the reference needs them all): per-rank counts as each collective defines them.
  const uint64_t inCount =
      (c.kind == CollectiveKind::kReduceScatter || c.kind == CollectiveKind::kAllToAll) ? c.count * nn : c.count;
  std::vector<Bytes> inputs;
  for (int p = 0; p < n; ++p) inputs.push_back(makeInput(seed, caseId, p, c.type, inCount));
  const Bytes& mine = inputs[r];
  Bytes buffer;  // in-place: the one buffer; out-of-place: recv
  Bytes sendCopy = mine;
  Bytes want;
  const uint8_t* send = nullptr;
  uint8_t* recv = nullptr;
  uint64_t outOffset = 0;  // where the checked output starts in `buffer`
  switch (c.kind) {
    case CollectiveKind::kAllReduce:
      want.resize(c.count * es);
      referenceReduce(c.type, c.op, inputs, 0, c.count, want.data());
      buffer = c.inPlace ? mine : Bytes(c.count * es, kPoison);
      break;
    case CollectiveKind::kReduce:
      if (rank == c.root) {
        want.resize(c.count * es);
        referenceReduce(c.type, c.op, inputs, 0, c.count, want.data());
      } else {
        want = c.inPlace ? mine : Bytes(c.count * es, kPoison);  // recv is written on the root only
      }
      buffer = c.inPlace ? mine : Bytes(c.count * es, kPoison);
      break;
    case CollectiveKind::kReduceScatter:
      want.resize(c.count * es);
      referenceReduce(c.type, c.op, inputs, r * c.count, c.count, want.data());
      buffer = c.inPlace ? mine : Bytes(c.count * es, kPoison);
      outOffset = c.inPlace ? r * c.count * es : 0;
      break;
    case CollectiveKind::kAllGather:
      for (int p = 0; p < n; ++p) want.insert(want.end(), inputs[p].begin(), inputs[p].end());
      buffer = Bytes(c.count * es * nn, kPoison);
      // memcpy of nothing still needs valid pointers, and an empty vector's data() may be null.
      if (c.inPlace && !mine.empty()) std::memcpy(buffer.data() + r * c.count * es, mine.data(), mine.size());
      break;
    case CollectiveKind::kBroadcast:
      want = inputs[static_cast<size_t>(c.root)];
      buffer = (c.inPlace && rank == c.root) ? mine : Bytes(c.count * es, kPoison);
      break;
    case CollectiveKind::kAllToAll:
      for (int p = 0; p < n; ++p) {
        const uint8_t* from = inputs[p].data() + r * c.count * es;
        want.insert(want.end(), from, from + c.count * es);
      }
      buffer = c.inPlace ? mine : Bytes(c.count * es * nn, kPoison);
      break;
    default: FAIL() << "not a plain collective";
  }
  recv = buffer.data();
  send = c.inPlace ? buffer.data() : sendCopy.data();
  if (c.inPlace && c.kind == CollectiveKind::kAllGather) send = buffer.data() + r * c.count * es;
  if (c.inPlace && c.kind == CollectiveKind::kReduceScatter) recv = buffer.data() + r * c.count * es;
  if (buffer.empty()) recv = nullptr;
  if (mine.empty() && !c.inPlace) send = nullptr;
  uint8_t* arenaBuffer = nullptr;
  uint8_t* arenaSend = nullptr;
  if (place.arena != nullptr) {
    // recv in the first half (odd element offsets on odd ranks), the out-of-place send in the second.
    arenaBuffer = place.arena + 64 * r + (r % 2) * es;
    arenaSend = place.arena + place.bytes / 2 + 32 * r;
    ASSERT_LE(64 * r + es + buffer.size(), place.bytes / 2);
    ASSERT_LE(32 * r + sendCopy.size(), place.bytes / 2);
    if (!buffer.empty()) std::memcpy(arenaBuffer, buffer.data(), buffer.size());
    if (!sendCopy.empty()) std::memcpy(arenaSend, sendCopy.data(), sendCopy.size());
    auto move = [&](const uint8_t* p) -> uint8_t* {
      if (p == nullptr) return nullptr;
      if (p >= buffer.data() && p < buffer.data() + buffer.size()) return arenaBuffer + (p - buffer.data());
      return arenaSend + (p - sendCopy.data());
    };
    if (!(place.sendOutside && !c.inPlace)) send = move(send);
    if (!(place.recvOutside && !c.inPlace)) recv = move(recv);
  }
  switch (c.kind) {
    case CollectiveKind::kAllReduce: coll.allReduce(send, recv, c.count, c.type, c.op, nullptr); break;
    case CollectiveKind::kReduce: coll.reduce(send, recv, c.count, c.type, c.op, c.root, nullptr); break;
    case CollectiveKind::kReduceScatter: coll.reduceScatter(send, recv, c.count, c.type, c.op, nullptr); break;
    case CollectiveKind::kAllGather: coll.allGather(send, recv, c.count, c.type, nullptr); break;
    case CollectiveKind::kBroadcast: coll.broadcast(send, recv, c.count, c.type, c.root, nullptr); break;
    case CollectiveKind::kAllToAll: coll.allToAll(send, recv, c.count, c.type, nullptr); break;
    default: break;
  }
  if (place.arena != nullptr) {
    if (!buffer.empty() && !(place.recvOutside && !c.inPlace)) {
      std::memcpy(buffer.data(), arenaBuffer, buffer.size());
    }
    if (!sendCopy.empty() && !(place.sendOutside && !c.inPlace)) {
      std::memcpy(sendCopy.data(), arenaSend, sendCopy.size());
    }
  }
  const Bytes got(buffer.begin() + static_cast<std::ptrdiff_t>(outOffset),
                  buffer.begin() + static_cast<std::ptrdiff_t>(outOffset + want.size()));
  EXPECT_EQ(firstDifference(got, want), "");
  if (!c.inPlace) EXPECT_EQ(firstDifference(sendCopy, mine), "") << "the send buffer changed";
}

std::vector<Case> matrix(int n) {
  std::vector<Case> cases;
  const CollectiveKind reducing[] = {CollectiveKind::kAllReduce, CollectiveKind::kReduceScatter,
                                     CollectiveKind::kReduce};
  const CollectiveKind moving[] = {CollectiveKind::kAllGather, CollectiveKind::kBroadcast, CollectiveKind::kAllToAll};
  int k = 0;
  for (int t = 0; t < kDataTypeCount; ++t) {
    const auto type = static_cast<DataType>(t);
    for (CollectiveKind kind : reducing) {
      for (int o = 0; o < kReduceOpCount; ++o) {
        cases.push_back({kind, type, static_cast<ReduceOp>(o), 1003, (k++ % 2) == 0, k % n});
      }
      for (uint64_t count : {uint64_t{0}, uint64_t{1}, uint64_t{5000}}) {
        cases.push_back({kind, type, ReduceOp::kSum, count, (k++ % 2) == 0, k % n});
      }
    }
    for (CollectiveKind kind : moving) {
      for (uint64_t count : {uint64_t{0}, uint64_t{1}, uint64_t{1003}, uint64_t{5000}}) {
        cases.push_back({kind, type, ReduceOp::kSum, count, (k++ % 2) == 0, k % n});
      }
    }
  }
  return cases;
}

uint64_t freshSeed() { return std::random_device{}() * 0x100000001ull + static_cast<uint64_t>(time(nullptr)); }

struct Rank {
  std::shared_ptr<Communicator> comm;
  std::unique_ptr<CollectiveComm> coll;
  Rank(int rank, int size, const UniqueId& id, CollectiveOptions options) {
    comm = std::make_shared<Communicator>(std::make_shared<TcpBootstrap>(rank, size, id, milliseconds(10000)),
                                          hostOnlyConfig());
    coll = std::make_unique<CollectiveComm>(comm, options);
  }
};

CollectiveOptions smallScratch() {
  CollectiveOptions o;
  o.scratchBytes = 8192;  // 5000 elements of 8 bytes take 10 pieces of allreduce and 20 of reducescatter
  o.budgetNs = 10000 * kMs;
  o.hostThreads = 3;
  return o;
}

void everyCollective(int size, bool oneShot = true) {
  UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
  const uint64_t seed = freshSeed();
  auto results = test::runRanks(
      size,
      [&](int rank, int n) {
        CollectiveOptions o = smallScratch();
        if (!oneShot) o.oneShotMaxBytes = 0;  // every allreduce and allgather through scratch
        Rank r(rank, n, id, o);
        const std::vector<Case> cases = matrix(n);
        for (size_t i = 0; i < cases.size(); ++i) {
          runCase(*r.coll, cases[i], static_cast<int>(i), seed);
          if (::testing::Test::HasFailure()) break;  // the first failure tells; the rest would repeat it
        }
        r.comm->bootstrap().barrier();
      },
      std::chrono::seconds(120));
  WEFT_EXPECT_RANKS_OK(results) << "seed " << seed;
}

TEST(CollectivesMpTest, EveryCollectiveTypeAndOpOneRank) { everyCollective(1); }
TEST(CollectivesMpTest, EveryCollectiveTypeAndOpTwoRanks) { everyCollective(2); }
TEST(CollectivesMpTest, EveryCollectiveTypeAndOpThreeRanks) { everyCollective(3); }
TEST(CollectivesMpTest, EveryCollectiveTypeAndOpFourRanks) { everyCollective(4); }
TEST(CollectivesMpTest, EveryCollectiveTypeAndOpStagedOnlyThreeRanks) { everyCollective(3, false); }

// A message of about a megabyte through the default-sized path (one piece per few hundred KB).
TEST(CollectivesMpTest, LargeOddMessagesThreeRanks) {
  UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
  const uint64_t seed = freshSeed();
  auto results = test::runRanks(3, [&](int rank, int n) {
    CollectiveOptions o;
    o.scratchBytes = 256 << 10;
    o.budgetNs = 10000 * kMs;
    o.hostThreads = 2;
    Rank r(rank, n, id, o);
    runCase(*r.coll, {CollectiveKind::kAllReduce, DataType::kUint8, ReduceOp::kSum, 1000003, false, 0}, 1, seed);
    runCase(*r.coll, {CollectiveKind::kAllReduce, DataType::kFloat32, ReduceOp::kSum, 250001, true, 0}, 2, seed);
    runCase(*r.coll, {CollectiveKind::kAllGather, DataType::kBfloat16, ReduceOp::kSum, 100003, false, 0}, 3, seed);
    r.comm->bootstrap().barrier();
  });
  WEFT_EXPECT_RANKS_OK(results) << "seed " << seed;
}

// allToAllV with uneven per-pair counts (zero for some pairs) and gaps between the blocks (left poisoned).
TEST(CollectivesMpTest, AllToAllVUnevenCountsThreeAndFourRanks) {
  for (int size : {3, 4}) {
    UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
    const uint64_t seed = freshSeed();
    auto results = test::runRanks(size, [&](int rank, int n) {
      Rank r(rank, n, id, smallScratch());
      const uint64_t nn = static_cast<uint64_t>(n);
      auto pairCount = [](int from, int to) { return static_cast<uint64_t>(((from * 5 + to * 3) % 4) * 701); };
      for (DataType type : {DataType::kUint8, DataType::kFloat16, DataType::kInt64}) {
        const uint64_t es = dataTypeBytes(type);
        std::vector<uint64_t> sc(nn), sd(nn), rc(nn), rd(nn);
        uint64_t sendTotal = 0, recvTotal = 0;
        for (int p = 0; p < n; ++p) {
          sc[p] = pairCount(rank, p);
          sd[p] = sendTotal + 1;  // one-element gaps
          sendTotal += sc[p] + 1;
          rc[p] = pairCount(p, rank);
          rd[p] = recvTotal + 2;
          recvTotal += rc[p] + 2;
        }
        auto input = [&](int p) { return makeInput(seed, static_cast<int>(type), p, type, 4 * 701 * nn + 2 * nn); };
        const Bytes send = input(rank);
        Bytes recv(recvTotal * es, kPoison);
        Bytes want(recvTotal * es, kPoison);
        for (int p = 0; p < n; ++p) {
          // What p sends to this rank: p's block for `rank`, at p's displacement for it.
          uint64_t pDispl = 0;
          for (int q = 0; q < rank; ++q) pDispl += pairCount(p, q) + 1;
          pDispl += 1;
          const Bytes theirs = input(p);
          if (rc[p] != 0) std::memcpy(want.data() + rd[p] * es, theirs.data() + pDispl * es, rc[p] * es);
        }
        r.coll->allToAllV(send.data(), sc.data(), sd.data(), recv.data(), rc.data(), rd.data(), type, nullptr);
        EXPECT_EQ(firstDifference(recv, want), "") << dataTypeName(type);
      }
      r.comm->bootstrap().barrier();
    });
    WEFT_EXPECT_RANKS_OK(results) << "seed " << seed;
  }
}

// Grouped send/recv: a ring plus a send to self and two sends in a row to the same peer; then a group that only
// ranks 0 and 1 take part in (the others call nothing), then an allreduce to show the channels are still in step.
TEST(CollectivesMpTest, SendRecvGroupsFourRanks) {
  UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
  const uint64_t seed = freshSeed();
  auto results = test::runRanks(4, [&](int rank, int n) {
    Rank r(rank, n, id, smallScratch());
    const int next = (rank + 1) % n;
    const int prev = (rank + n - 1) % n;
    auto payload = [&](int from, int to, int part, uint64_t count) {
      return makeInput(seed, 100 + from * 16 + to * 4 + part, from, DataType::kInt32, count);
    };
    const uint64_t big = 3001, small = 17;
    Bytes toNextA = payload(rank, next, 0, big), toNextB = payload(rank, next, 1, small),
          toSelf = payload(rank, rank, 0, small);
    Bytes fromPrevA(big * 4, kPoison), fromPrevB(small * 4, kPoison), fromSelf(small * 4, kPoison);
    std::vector<PointToPoint> ops = {
        {PointToPoint::Direction::kRecv, fromPrevA.data(), big, DataType::kInt32, prev},
        {PointToPoint::Direction::kSend, toNextA.data(), big, DataType::kInt32, next},
        {PointToPoint::Direction::kSend, toSelf.data(), small, DataType::kInt32, rank},
        {PointToPoint::Direction::kSend, toNextB.data(), small, DataType::kInt32, next},
        {PointToPoint::Direction::kRecv, fromSelf.data(), small, DataType::kInt32, rank},
        {PointToPoint::Direction::kRecv, fromPrevB.data(), small, DataType::kInt32, prev},
    };
    r.coll->sendRecv(ops, nullptr);
    EXPECT_EQ(firstDifference(fromPrevA, payload(prev, rank, 0, big)), "");
    EXPECT_EQ(firstDifference(fromPrevB, payload(prev, rank, 1, small)), "");
    EXPECT_EQ(firstDifference(fromSelf, payload(rank, rank, 0, small)), "");
    if (rank < 2) {
      const int peer = 1 - rank;
      Bytes out = payload(rank, peer, 2, 4099), in(4099 * 4, kPoison);
      std::vector<PointToPoint> pair = {{PointToPoint::Direction::kSend, out.data(), 4099, DataType::kInt32, peer},
                                        {PointToPoint::Direction::kRecv, in.data(), 4099, DataType::kInt32, peer}};
      r.coll->sendRecv(pair, nullptr);
      EXPECT_EQ(firstDifference(in, payload(peer, rank, 2, 4099)), "");
    }
    runCase(*r.coll, {CollectiveKind::kAllReduce, DataType::kInt32, ReduceOp::kSum, 3000, false, 0}, 7, seed);
    r.comm->bootstrap().barrier();
  });
  WEFT_EXPECT_RANKS_OK(results) << "seed " << seed;
}

// A rank that never joins the operation: the other's wait runs out of its budget and names the rank, the peer
// and the operation; within a few budgets, not a hang. Every allreduce algorithm (packet waits, a semaphore wait).
TEST(CollectivesMpTest, PeerThatNeverJoinsTimesOut) {
  for (AllReduceAlgorithm algorithm : {AllReduceAlgorithm::kOneShotLL, AllReduceAlgorithm::kScatterGather,
                                       AllReduceAlgorithm::kTwoShotLL, AllReduceAlgorithm::kPort}) {
    SCOPED_TRACE(allReduceAlgorithmName(algorithm));
    UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
    auto results = test::runRanks(2, [&](int rank, int n) {
      CollectiveOptions o = smallScratch();
      o.budgetNs = 300 * kMs;
      o.allReduceAlgorithm = algorithm;
      Rank r(rank, n, id, o);
      if (rank == 0) {
        std::vector<float> data(100, 1.0f);
        EXPECT_EQ(r.coll->allReduceAlgorithmFor(data.size(), DataType::kFloat32), algorithm);
        const auto start = std::chrono::steady_clock::now();
        try {
          r.coll->allReduce(data.data(), data.data(), data.size(), DataType::kFloat32, ReduceOp::kSum, nullptr);
          ADD_FAILURE() << "allreduce returned without its peer";
        } catch (const Error& e) {
          EXPECT_EQ(e.code(), ErrorCode::kTimeout);
          const std::string text = e.what();
          EXPECT_NE(text.find("allreduce"), std::string::npos) << text;
          EXPECT_NE(text.find("rank 0"), std::string::npos) << text;
          EXPECT_NE(text.find("peer 1"), std::string::npos) << text;
        }
        EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(3));
      }
      r.comm->bootstrap().barrier();
    });
    WEFT_EXPECT_RANKS_OK(results);
  }
}

// The one-shot limit per launch for n ranks with oneShotMaxBytes `max` (as CollectiveOptions documents it).
uint64_t oneShotLimit(uint64_t max, int n) {
  const uint64_t perLaunch = max / static_cast<uint64_t>(n > 1 ? n - 1 : 1) / 16 * 16;
  return perLaunch < 16 ? 16 : perLaunch;
}

// allreduce with `algorithm` (kAuto: the size decides) on every type and op, counts 0, 1, 2, 3, 7 (two-shot: ranks
// with empty shares), odd, at and around the one-shot and two-shot launch limits, several times the one-shot limit
// (forced LL16 paths: several launches) and many scratch pieces; in-place and out-of-place; and the selection each
// count gets (kAuto: one-shot up to the limit, then two-shot among more than two ranks, else scatter-gather).
void allReduceWith(int size, AllReduceAlgorithm algorithm) {
  SCOPED_TRACE(allReduceAlgorithmName(algorithm));
  UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
  const uint64_t seed = freshSeed();
  constexpr uint64_t kMax = 4096;
  auto results = test::runRanks(
      size,
      [&](int rank, int n) {
        CollectiveOptions o = smallScratch();
        o.allReduceAlgorithm = algorithm;
        o.oneShotMaxBytes = kMax;
        Rank r(rank, n, id, o);
        const uint64_t limit = oneShotLimit(kMax, n);
        int caseId = 0;
        for (int t = 0; t < kDataTypeCount && !::testing::Test::HasFailure(); ++t) {
          const auto type = static_cast<DataType>(t);
          const uint64_t es = dataTypeBytes(type);
          std::vector<Case> cases;
          for (int op = 0; op < kReduceOpCount; ++op) {
            for (bool inPlace : {false, true}) {
              cases.push_back({CollectiveKind::kAllReduce, type, static_cast<ReduceOp>(op), 1003, inPlace, 0});
            }
          }
          const uint64_t atLimit = limit / es;
          const uint64_t atTwoShotLimit = static_cast<uint64_t>(n) * (limit / 2) / es;
          for (uint64_t count : {uint64_t{0}, uint64_t{1}, uint64_t{2}, uint64_t{3}, uint64_t{7}, atLimit - 1, atLimit,
                                 atLimit + 1, atTwoShotLimit, atTwoShotLimit + 1, 3 * atLimit + 5, uint64_t{5000}}) {
            cases.push_back({CollectiveKind::kAllReduce, type, ReduceOp::kSum, count, (caseId % 2) == 0, 0});
            cases.push_back({CollectiveKind::kAllReduce, type, ReduceOp::kMax, count, (caseId % 2) != 0, 0});
          }
          for (const Case& c : cases) {
            const AllReduceAlgorithm above =
                n > 2 ? AllReduceAlgorithm::kTwoShotLL : AllReduceAlgorithm::kScatterGather;
            const AllReduceAlgorithm want = algorithm != AllReduceAlgorithm::kAuto ? algorithm
                                            : c.count * es <= limit                ? AllReduceAlgorithm::kOneShotLL
                                                                                   : above;
            EXPECT_EQ(r.coll->allReduceAlgorithmFor(c.count, type), want) << describe(c);
            runCase(*r.coll, c, caseId++, seed);
            if (::testing::Test::HasFailure()) break;
          }
        }
        r.comm->bootstrap().barrier();
      },
      std::chrono::seconds(120));
  WEFT_EXPECT_RANKS_OK(results) << "seed " << seed;
}

void allReduceEachAlgorithm(int size) {
  for (AllReduceAlgorithm algorithm :
       {AllReduceAlgorithm::kOneShotLL, AllReduceAlgorithm::kScatterGather, AllReduceAlgorithm::kTwoShotLL,
        AllReduceAlgorithm::kPort, AllReduceAlgorithm::kAuto}) {
    allReduceWith(size, algorithm);
  }
}

TEST(CollectivesMpTest, AllReduceEachAlgorithmOneRank) { allReduceEachAlgorithm(1); }
TEST(CollectivesMpTest, AllReduceEachAlgorithmTwoRanks) { allReduceEachAlgorithm(2); }
TEST(CollectivesMpTest, AllReduceEachAlgorithmThreeRanks) { allReduceEachAlgorithm(3); }
TEST(CollectivesMpTest, AllReduceEachAlgorithmFourRanks) { allReduceEachAlgorithm(4); }

// Hundreds of one-shot allreduces back to back with no barrier between them, one rank now and then late, other
// collectives in between: a fast rank's next call must never overwrite packets a slow peer still reads, and no
// call may take an earlier call's packets for its own (every result is checked).
TEST(CollectivesMpTest, OneShotBackToBackThreeRanks) {
  UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
  const uint64_t seed = freshSeed();
  auto results = test::runRanks(3, [&](int rank, int n) {
    CollectiveOptions o = smallScratch();
    o.hostThreads = 2;
    Rank r(rank, n, id, o);
    for (int i = 0; i < 300 && !::testing::Test::HasFailure(); ++i) {
      if (rank == i % n && i % 7 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
      const DataType type = i % 2 == 0 ? DataType::kInt32 : DataType::kFloat16;
      const uint64_t count = 1 + static_cast<uint64_t>((i * 37) % 300);
      ASSERT_EQ(r.coll->allReduceAlgorithmFor(count, type), AllReduceAlgorithm::kOneShotLL);
      runCase(*r.coll, {CollectiveKind::kAllReduce, type, ReduceOp::kSum, count, i % 3 == 0, 0}, i, seed);
      // One-shot allgathers share the packet buffers and the epoch: interleave them (odd sizes, in place too).
      if (i % 5 == 4) {
        runCase(*r.coll,
                {CollectiveKind::kAllGather, DataType::kUint8, ReduceOp::kSum, 77 + static_cast<uint64_t>(i),
                 i % 10 == 9, 0},
                i + 1000, seed);
      }
      if (i % 50 == 49) {
        runCase(*r.coll, {CollectiveKind::kAllGather, DataType::kFloat32, ReduceOp::kSum, 20000, false, 0}, i, seed);
      }
    }
    r.comm->bootstrap().barrier();
  });
  WEFT_EXPECT_RANKS_OK(results) << "seed " << seed;
}

// The same for two-shot allreduces among four ranks, with counts from 1 element (three ranks with empty shares, which
// still publish one packet each launch) up, and one-shot allgathers on the same packet buffers and epoch in between.
TEST(CollectivesMpTest, TwoShotBackToBackFourRanks) {
  UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
  const uint64_t seed = freshSeed();
  auto results = test::runRanks(4, [&](int rank, int n) {
    CollectiveOptions o = smallScratch();
    o.hostThreads = 2;
    o.allReduceAlgorithm = AllReduceAlgorithm::kTwoShotLL;
    Rank r(rank, n, id, o);
    for (int i = 0; i < 200 && !::testing::Test::HasFailure(); ++i) {
      if (rank == i % n && i % 7 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
      const DataType type = i % 2 == 0 ? DataType::kInt32 : DataType::kFloat16;
      const uint64_t count = i % 4 == 0 ? 1 + static_cast<uint64_t>(i % 3) : 1 + static_cast<uint64_t>((i * 37) % 900);
      runCase(*r.coll, {CollectiveKind::kAllReduce, type, ReduceOp::kSum, count, i % 3 == 0, 0}, i, seed);
      if (i % 5 == 4) {
        runCase(*r.coll,
                {CollectiveKind::kAllGather, DataType::kUint8, ReduceOp::kSum, 77 + static_cast<uint64_t>(i),
                 i % 10 == 9, 0},
                i + 1000, seed);
      }
    }
    r.comm->bootstrap().barrier();
  });
  WEFT_EXPECT_RANKS_OK(results) << "seed " << seed;
}

// WEFT_ALLREDUCE_ALGO chooses when the options leave the algorithm at auto; an explicit option wins; a value that
// is none of the names is refused with kConfigError on every rank before any communication.
TEST(CollectivesMpTest, AllReduceAlgoEnvironmentVariable) {
  UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
  auto results = test::runRanks(2, [&](int rank, int n) {
    auto comm = std::make_shared<Communicator>(std::make_shared<TcpBootstrap>(rank, n, id, milliseconds(10000)),
                                               hostOnlyConfig());
    ASSERT_EQ(setenv("WEFT_ALLREDUCE_ALGO", "scatter_gather", 1), 0);
    {
      CollectiveComm c(comm, smallScratch());
      EXPECT_EQ(c.allReduceAlgorithmFor(1, DataType::kFloat32), AllReduceAlgorithm::kScatterGather);
      runCase(c, {CollectiveKind::kAllReduce, DataType::kFloat32, ReduceOp::kSum, 100, false, 0}, 1, 5);
      CollectiveOptions forced = smallScratch();
      forced.allReduceAlgorithm = AllReduceAlgorithm::kOneShotLL;
      CollectiveComm d(comm, forced);
      EXPECT_EQ(d.allReduceAlgorithmFor(1 << 20, DataType::kFloat32), AllReduceAlgorithm::kOneShotLL);
      runCase(d, {CollectiveKind::kAllReduce, DataType::kFloat32, ReduceOp::kSum, 100, false, 0}, 2, 5);
      comm->bootstrap().barrier();
    }
    ASSERT_EQ(setenv("WEFT_ALLREDUCE_ALGO", "oneshot_ll", 1), 0);
    {
      CollectiveComm c(comm, smallScratch());
      EXPECT_EQ(c.allReduceAlgorithmFor(1 << 20, DataType::kFloat32), AllReduceAlgorithm::kOneShotLL);
      comm->bootstrap().barrier();
    }
    ASSERT_EQ(setenv("WEFT_ALLREDUCE_ALGO", "twoshot_ll", 1), 0);
    {
      CollectiveComm c(comm, smallScratch());
      EXPECT_EQ(c.allReduceAlgorithmFor(1, DataType::kFloat32), AllReduceAlgorithm::kTwoShotLL);
      runCase(c, {CollectiveKind::kAllReduce, DataType::kFloat32, ReduceOp::kSum, 100, false, 0}, 4, 5);
      comm->bootstrap().barrier();
    }
    ASSERT_EQ(setenv("WEFT_ALLREDUCE_ALGO", "fastest", 1), 0);
    try {
      CollectiveComm c(comm, smallScratch());
      ADD_FAILURE() << "WEFT_ALLREDUCE_ALGO=fastest accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kConfigError);
      EXPECT_NE(std::string(e.what()).find("WEFT_ALLREDUCE_ALGO"), std::string::npos) << e.what();
    }
    unsetenv("WEFT_ALLREDUCE_ALGO");
    CollectiveOptions off = smallScratch();
    off.oneShotMaxBytes = 0;
    off.allReduceAlgorithm = AllReduceAlgorithm::kOneShotLL;
    CollectiveComm c(comm, off);
    EXPECT_EQ(c.allReduceAlgorithmFor(1, DataType::kFloat32), AllReduceAlgorithm::kScatterGather);
    runCase(c, {CollectiveKind::kAllReduce, DataType::kFloat32, ReduceOp::kSum, 100, false, 0}, 3, 5);
    comm->bootstrap().barrier();
  });
  WEFT_EXPECT_RANKS_OK(results);
}

// The built-in allreduce choice with the default options: one-shot up to its limit on 2 ranks; on more, one-shot up
// to 128 KiB, two-shot up to 4 MiB / n, scatter-gather beyond (float, so sizes are 4-byte counts).
TEST(CollectivesMpTest, BuiltInAllReduceChoiceByRankCountAndSize) {
  for (int size : {2, 4}) {
    UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
    auto results = test::runRanks(size, [&](int rank, int n) {
      auto comm = std::make_shared<Communicator>(std::make_shared<TcpBootstrap>(rank, n, id, milliseconds(10000)),
                                                 hostOnlyConfig());
      CollectiveComm c(comm, CollectiveOptions{});
      auto at = [&](uint64_t bytes) { return c.allReduceAlgorithmFor(bytes / 4, DataType::kFloat32); };
      if (n == 2) {
        EXPECT_EQ(at(64 << 10), AllReduceAlgorithm::kOneShotLL);
        EXPECT_EQ(at(1 << 20), AllReduceAlgorithm::kOneShotLL);
        EXPECT_EQ(at((1 << 20) + 16), AllReduceAlgorithm::kScatterGather);
      } else {
        EXPECT_EQ(at(128 << 10), AllReduceAlgorithm::kOneShotLL);
        EXPECT_EQ(at((128 << 10) + 4), AllReduceAlgorithm::kTwoShotLL);
        EXPECT_EQ(at(1 << 20), AllReduceAlgorithm::kTwoShotLL);
        EXPECT_EQ(at((1 << 20) + 4), AllReduceAlgorithm::kScatterGather);
      }
      comm->bootstrap().barrier();
    });
    WEFT_EXPECT_RANKS_OK(results) << size << " ranks";
  }
}

// WEFT_COLL_LL_PACKETS_PER_THREAD shapes the LL16 grids (GPU builds; the GPU test runs them at 1 and 16); a value
// outside [0, 16] is refused on every rank before any communication.
TEST(CollectivesMpTest, LLPacketsPerThreadOutsideItsRangeIsRefused) {
  UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
  auto results = test::runRanks(2, [&](int rank, int n) {
    auto comm = std::make_shared<Communicator>(std::make_shared<TcpBootstrap>(rank, n, id, milliseconds(10000)),
                                               hostOnlyConfig());
    for (const char* bad : {"17", "-1"}) {
      ASSERT_EQ(setenv("WEFT_COLL_LL_PACKETS_PER_THREAD", bad, 1), 0);
      try {
        CollectiveComm c(comm, smallScratch());
        ADD_FAILURE() << "WEFT_COLL_LL_PACKETS_PER_THREAD=" << bad << " accepted";
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
        EXPECT_NE(std::string(e.what()).find("WEFT_COLL_LL_PACKETS_PER_THREAD"), std::string::npos) << e.what();
      }
    }
    ASSERT_EQ(setenv("WEFT_COLL_LL_PACKETS_PER_THREAD", "1", 1), 0);
    CollectiveComm c(comm, smallScratch());
    runCase(c, {CollectiveKind::kAllReduce, DataType::kFloat32, ReduceOp::kSum, 100, false, 0}, 1, 5);
    unsetenv("WEFT_COLL_LL_PACKETS_PER_THREAD");
    comm->bootstrap().barrier();
  });
  WEFT_EXPECT_RANKS_OK(results);
}

// WEFT_COLL_REGISTER_WAIT_MS outside [0, 60000] (or not a number) is refused on every rank before any communication.
TEST(CollectivesMpTest, RegisterWaitOutsideItsRangeIsRefused) {
  UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
  auto results = test::runRanks(2, [&](int rank, int n) {
    auto comm = std::make_shared<Communicator>(std::make_shared<TcpBootstrap>(rank, n, id, milliseconds(10000)),
                                               hostOnlyConfig());
    for (const char* bad : {"-1", "60001", "soon"}) {
      ASSERT_EQ(setenv("WEFT_COLL_REGISTER_WAIT_MS", bad, 1), 0);
      try {
        CollectiveComm c(comm, smallScratch());
        ADD_FAILURE() << "WEFT_COLL_REGISTER_WAIT_MS=" << bad << " accepted";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("WEFT_COLL_REGISTER_WAIT_MS"), std::string::npos) << e.what();
      }
    }
    unsetenv("WEFT_COLL_REGISTER_WAIT_MS");
    CollectiveComm c(comm, smallScratch());
    runCase(c, {CollectiveKind::kAllReduce, DataType::kFloat32, ReduceOp::kSum, 100, false, 0}, 1, 5);
    comm->bootstrap().barrier();
  });
  WEFT_EXPECT_RANKS_OK(results);
}

// [[collectives.allreduce]] rules (what weft-bench --tune writes) pick the algorithm by size, first match first,
// rules for another rank count or another placement (ranks_per_gpu; host builds: ranks per host) ignored, sizes past
// every rule to the built-in choice; an explicit algorithm wins.
// Ranks whose selections differ would wait on each other's packets or syncs forever: they all fail at setup.
TEST(CollectivesMpTest, ConfigRulesSelectTheAllReduceAlgorithm) {
  UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
  UniqueId id2 = TcpBootstrap::createUniqueId("127.0.0.1");
  auto results = test::runRanks(2, [&](int rank, int n) {
    Config config = hostOnlyConfig();
    config.allReduceRules = {{3, 0, "oneshot_ll"},
                             {2, 0, "oneshot_ll", 1},  // one rank per GPU (host): not these two
                             {2, 256, "scatter_gather", 2},
                             {0, 4096, "oneshot_ll"}};
    auto comm =
        std::make_shared<Communicator>(std::make_shared<TcpBootstrap>(rank, n, id, milliseconds(10000)), config);
    {
      CollectiveOptions o = smallScratch();
      o.oneShotMaxBytes = 8192;  // the built-in choice: one-shot up to 8192 bytes on 2 ranks
      CollectiveComm c(comm, o);
      EXPECT_EQ(c.ranksPerGpu(), 2);  // both ranks on this host
      const std::pair<uint64_t, AllReduceAlgorithm> want[] = {
          {1, AllReduceAlgorithm::kScatterGather},   {64, AllReduceAlgorithm::kScatterGather},
          {65, AllReduceAlgorithm::kOneShotLL},      {1024, AllReduceAlgorithm::kOneShotLL},
          {1025, AllReduceAlgorithm::kOneShotLL},       // past every rule: built-in, under its limit
          {2049, AllReduceAlgorithm::kScatterGather}};  // built-in, over its limit
      int caseId = 0;
      for (const auto& [count, algorithm] : want) {
        EXPECT_EQ(c.allReduceAlgorithmFor(count, DataType::kFloat32), algorithm) << count << " floats";
        runCase(c, {CollectiveKind::kAllReduce, DataType::kFloat32, ReduceOp::kSum, count, false, 0}, ++caseId, 9);
      }
      EXPECT_EQ(c.allReduceAlgorithmFor(32, DataType::kFloat64), AllReduceAlgorithm::kScatterGather);  // 256 bytes
      EXPECT_EQ(c.allReduceAlgorithmFor(33, DataType::kFloat64), AllReduceAlgorithm::kOneShotLL);
      CollectiveOptions forced = smallScratch();
      forced.allReduceAlgorithm = AllReduceAlgorithm::kOneShotLL;
      CollectiveComm d(comm, forced);
      EXPECT_EQ(d.allReduceAlgorithmFor(1, DataType::kFloat32), AllReduceAlgorithm::kOneShotLL);
      comm->bootstrap().barrier();
    }
    Config other = hostOnlyConfig();
    if (rank == 1) other.allReduceRules = {{0, 65536, "scatter_gather"}};
    auto comm2 =
        std::make_shared<Communicator>(std::make_shared<TcpBootstrap>(rank, n, id2, milliseconds(10000)), other);
    try {
      CollectiveComm c(comm2, smallScratch());
      ADD_FAILURE() << "ranks with different allreduce rules were accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidUsage);
      EXPECT_NE(std::string(e.what()).find("select allreduce algorithms differently"), std::string::npos) << e.what();
    }
  });
  WEFT_EXPECT_RANKS_OK(results);
}

// Bad arguments are refused with kInvalidArgument naming what is wrong, before anything runs.
// Buffers that start one element past a 16-byte boundary (send, recv, or both) take the element-by-element path
// of the reductions; aligned ones the 16-byte vector path. Both give the reference, out-of-place and in-place.
TEST(CollectivesMpTest, ReductionsOnMisalignedBuffersTwoAndThreeRanks) {
  for (int size : {2, 3}) {
    UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
    const uint64_t seed = freshSeed();
    auto results = test::runRanks(size, [&](int rank, int n) {
      Rank r(rank, n, id, smallScratch());
      int caseId = 0;
      for (DataType type : {DataType::kFloat32, DataType::kFloat16, DataType::kInt8, DataType::kFloat64}) {
        const uint64_t es = dataTypeBytes(type);
        for (uint64_t count : {uint64_t{7}, uint64_t{1003}, uint64_t{5000}}) {
          for (int shape = 0; shape < 4; ++shape) {  // 0: send off, 1: recv off, 2: both, 3: in place, off
            SCOPED_TRACE(std::string(dataTypeName(type)) + " count " + std::to_string(count) + " shape " +
                         std::to_string(shape));
            ++caseId;
            std::vector<Bytes> inputs;
            for (int p = 0; p < n; ++p) inputs.push_back(makeInput(seed, caseId, p, type, count));
            Bytes want(count * es);
            referenceReduce(type, ReduceOp::kSum, inputs, 0, count, want.data());
            const uint64_t sendOff = shape == 1 ? 0 : es;
            const uint64_t recvOff = shape == 0 ? 0 : es;
            // 16-byte aligned storage, so that the offsets above are what decides the alignment.
            std::vector<Bytes16> sendStore(count * es / 16 + 2), recvStore(count * es / 16 + 2);
            auto* sendBase = reinterpret_cast<uint8_t*>(sendStore.data());
            auto* recvBase = reinterpret_cast<uint8_t*>(recvStore.data());
            uint8_t* send = sendBase + sendOff;
            uint8_t* recv = shape == 3 ? send : recvBase + recvOff;
            std::memcpy(send, inputs[static_cast<size_t>(rank)].data(), count * es);
            r.coll->allReduce(send, recv, count, type, ReduceOp::kSum, nullptr);
            EXPECT_EQ(firstDifference(Bytes(recv, recv + count * es), want), "");
            const uint64_t per = count / static_cast<uint64_t>(n);
            if (per > 0 && shape != 3) {
              // reduceScatter of the first per * n elements: rank r gets share r.
              std::memcpy(send, inputs[static_cast<size_t>(rank)].data(), per * static_cast<uint64_t>(n) * es);
              r.coll->reduceScatter(send, recv, per, type, ReduceOp::kSum, nullptr);
              EXPECT_EQ(firstDifference(Bytes(recv, recv + per * es),
                                        Bytes(want.begin() + static_cast<std::ptrdiff_t>(per * es * rank),
                                              want.begin() + static_cast<std::ptrdiff_t>(per * es * (rank + 1)))),
                        "");
            }
          }
          if (::testing::Test::HasFailure()) return;
        }
      }
      r.comm->bootstrap().barrier();
    });
    WEFT_EXPECT_RANKS_OK(results) << "seed " << seed << ", " << size << " ranks";
  }
}

// Zero-copy allreduce and reducescatter on registered buffers: every rank registers a shared buffer and runs them
// from and into it at rank-specific offsets (odd ones too), in place and out of place, every type (allreduce: sum and
// max); the results match the reference and the count of zero-copy runs says they did not stage. Then one rank's recv
// lies outside its registration (every rank must stage, and does), and after deregistration everything stages again.
void zeroCopyAllReduce(int size) {
  UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
  const uint64_t seed = freshSeed();
  auto results = test::runRanks(
      size,
      [&](int rank, int n) {
        CollectiveOptions o = smallScratch();
        o.oneShotMaxBytes = 0;   // every allreduce is scatter-gather, the path registrations change
        o.autoRegister = false;  // after deregistration the buffer must stage
        Rank r(rank, n, id, o);
        constexpr uint64_t kBufferBytes = 1 << 20;
        std::shared_ptr<void> buffer = allocSharedHostMemory(kBufferBytes);
        auto* base = static_cast<uint8_t*>(buffer.get());
        const uint32_t reg = r.coll->registerBuffer(base, kBufferBytes);
        Bytes outside(kBufferBytes);  // plain memory, never registered
        uint64_t zeroCopy = 0;
        int caseId = 0;
        auto check = [&](DataType type, ReduceOp op, uint64_t count, uint8_t* send, uint8_t* recv) {
          ++caseId;
          const uint64_t es = dataTypeBytes(type);
          std::vector<Bytes> inputs;
          for (int p = 0; p < n; ++p) inputs.push_back(makeInput(seed, caseId, p, type, count));
          Bytes want(count * es);
          referenceReduce(type, op, inputs, 0, count, want.data());
          std::memcpy(send, inputs[static_cast<size_t>(rank)].data(), count * es);
          if (recv != send) std::memset(recv, kPoison, count * es);
          r.coll->allReduce(send, recv, count, type, op, nullptr);
          EXPECT_EQ(firstDifference(Bytes(recv, recv + count * es), want), "")
              << dataTypeName(type) << " " << reduceOpName(op) << " count " << count << " case " << caseId;
        };
        for (int t = 0; t < kDataTypeCount && !::testing::Test::HasFailure(); ++t) {
          const auto type = static_cast<DataType>(t);
          const uint64_t es = dataTypeBytes(type);
          for (uint64_t count : {uint64_t{1}, uint64_t{7}, uint64_t{1003}, uint64_t{20000}}) {
            for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
              for (bool inPlace : {false, true}) {
                // Offsets differ by rank (and are odd multiples of the element size on odd ranks).
                uint8_t* send = base + 64 * static_cast<uint64_t>(rank) + (rank % 2) * es;
                uint8_t* recv = inPlace ? send : base + (kBufferBytes / 2) + 32 * static_cast<uint64_t>(rank);
                check(type, op, count, send, recv);
                ++zeroCopy;
              }
            }
          }
        }
        // reduceScatter from and into the registration: share `rank` of every rank's send, reduced into recv.
        for (DataType type : {DataType::kFloat32, DataType::kFloat16, DataType::kInt64, DataType::kUint8}) {
          const uint64_t es = dataTypeBytes(type);
          for (uint64_t count : {uint64_t{1}, uint64_t{7}, uint64_t{1003}, uint64_t{5000}}) {
            for (bool inPlace : {false, true}) {
              ++caseId;
              const uint64_t total = count * static_cast<uint64_t>(n);
              std::vector<Bytes> inputs;
              for (int p = 0; p < n; ++p) inputs.push_back(makeInput(seed, caseId, p, type, total));
              Bytes all(total * es);
              referenceReduce(type, ReduceOp::kSum, inputs, 0, total, all.data());
              const Bytes want(all.begin() + static_cast<std::ptrdiff_t>(count * es * rank),
                               all.begin() + static_cast<std::ptrdiff_t>(count * es * (rank + 1)));
              uint8_t* send = base + 16 * static_cast<uint64_t>(rank) + (rank % 2) * es;
              uint8_t* recv = inPlace ? send + count * es * static_cast<uint64_t>(rank)
                                      : base + kBufferBytes / 2 + 48 * static_cast<uint64_t>(rank);
              std::memcpy(send, inputs[static_cast<size_t>(rank)].data(), total * es);
              if (!inPlace) std::memset(recv, kPoison, count * es);
              r.coll->reduceScatter(send, recv, count, type, ReduceOp::kSum, nullptr);
              EXPECT_EQ(firstDifference(Bytes(recv, recv + count * es), want), "")
                  << "reducescatter " << dataTypeName(type) << " count " << count << (inPlace ? " in place" : "");
              ++zeroCopy;
            }
          }
        }
        EXPECT_EQ(r.coll->zeroCopyCalls(), zeroCopy);
        // Rank n - 1 receives into unregistered memory: nobody may take the zero-copy path.
        uint8_t* recv = rank == n - 1 ? outside.data() : base + kBufferBytes / 2;
        check(DataType::kFloat32, ReduceOp::kSum, 5000, base, recv);
        EXPECT_EQ(r.coll->zeroCopyCalls(), zeroCopy);
        r.coll->deregisterBuffer(reg);
        check(DataType::kFloat32, ReduceOp::kSum, 5000, base, base + kBufferBytes / 2);
        EXPECT_EQ(r.coll->zeroCopyCalls(), zeroCopy);
        EXPECT_THROW(r.coll->deregisterBuffer(reg), Error);
        r.comm->bootstrap().barrier();
      },
      std::chrono::seconds(180));
  WEFT_EXPECT_RANKS_OK(results) << "seed " << seed;
}

TEST(CollectivesMpTest, ZeroCopyAllReduceAndReduceScatterOnRegisteredBuffersTwoRanks) { zeroCopyAllReduce(2); }
TEST(CollectivesMpTest, ZeroCopyAllReduceAndReduceScatterOnRegisteredBuffersThreeRanks) { zeroCopyAllReduce(3); }
TEST(CollectivesMpTest, ZeroCopyAllReduceAndReduceScatterOnRegisteredBuffersFourRanks) { zeroCopyAllReduce(4); }
TEST(CollectivesMpTest, ZeroCopyAllReduceAndReduceScatterOnRegisteredBuffersFiveRanks) { zeroCopyAllReduce(5); }
// Nine ranks: past kDirectWriteRanks, the allreduce reduces into its own recv and copies the other shares.
TEST(CollectivesMpTest, ZeroCopyAllReduceAndReduceScatterOnRegisteredBuffersNineRanks) { zeroCopyAllReduce(9); }

// Every collective with a zero-copy path, on buffers inside a registration at offsets that differ by rank (the
// whole matrix of everyCollective): results match the reference and zeroCopyCalls counts every call that should
// not stage. Then buffers outside the registration where a collective does not need them registered (it still
// goes zero-copy) and where it does (every rank stages): recvs outside on every rank, and sends outside on every
// rank but the root.
bool expectZeroCopy(const Case& c, const Placement& place) {
  if (c.count == 0 || (c.kind == CollectiveKind::kAllToAll && c.inPlace)) return false;
  if (place.recvOutside && !c.inPlace) return c.kind != CollectiveKind::kAllReduce && c.kind != CollectiveKind::kReduce;
  if (place.sendOutside && !c.inPlace) return c.kind == CollectiveKind::kBroadcast;
  return true;
}

void zeroCopyEveryCollective(int size) {
  UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
  const uint64_t seed = freshSeed();
  auto results = test::runRanks(
      size,
      [&](int rank, int n) {
        CollectiveOptions o = smallScratch();
        o.oneShotMaxBytes = 0;  // no one-shot LL: every call either stages or goes zero-copy
        Rank r(rank, n, id, o);
        constexpr uint64_t kArenaBytes = 1 << 20;
        std::shared_ptr<void> arena = allocSharedHostMemory(kArenaBytes);
        const uint32_t reg = r.coll->registerBuffer(arena.get(), kArenaBytes);
        const std::vector<Case> cases = matrix(n);
        uint64_t zeroCopy = 0;
        for (int pass = 0; pass < 3 && !::testing::Test::HasFailure(); ++pass) {
          for (size_t i = 0; i < cases.size(); ++i) {
            const Case& c = cases[i];
            // The passes with buffers outside keep to three types, enough for the rule (which ignores the type).
            if (pass > 0 && c.type != DataType::kFloat32 && c.type != DataType::kUint8 && c.type != DataType::kFloat16)
              continue;
            Placement place{static_cast<uint8_t*>(arena.get()), kArenaBytes, pass == 2 && rank != c.root, pass == 1};
            const uint64_t before = r.coll->zeroCopyCalls();
            runCase(*r.coll, c, static_cast<int>(i + cases.size() * static_cast<size_t>(pass)), seed, place);
            const bool want =
                expectZeroCopy(c, Placement{nullptr, 0, pass == 2, pass == 1});  // n > 1: some send is outside
            EXPECT_EQ(r.coll->zeroCopyCalls() - before, want ? 1u : 0u)
                << "pass " << pass << ": " << describe(c) << (want ? " should" : " should not") << " run zero-copy";
            zeroCopy += want ? 1 : 0;
            if (::testing::Test::HasFailure()) break;
          }
        }
        EXPECT_EQ(r.coll->zeroCopyCalls(), zeroCopy);
        r.coll->deregisterBuffer(reg);
        r.comm->bootstrap().barrier();
      },
      std::chrono::seconds(240));
  WEFT_EXPECT_RANKS_OK(results) << "seed " << seed;
}

TEST(CollectivesMpTest, ZeroCopyEveryCollectiveTwoRanks) { zeroCopyEveryCollective(2); }
TEST(CollectivesMpTest, ZeroCopyEveryCollectiveThreeRanks) { zeroCopyEveryCollective(3); }
TEST(CollectivesMpTest, ZeroCopyEveryCollectiveFourRanks) { zeroCopyEveryCollective(4); }

// Registration on first use: buffers nobody registered, in shared memory at offsets that differ by rank, go zero-copy
// within a few calls (each rank shares its allocation at the first call and the peers import it at their next ones)
// and then stay zero-copy; every result matches the reference, before and after. Then every rank frees its buffer and
// allocates another (often at the same address): the results stay right (a stale mapping of the freed one would give
// the old contents) and the new allocation goes zero-copy in turn.
// waitForPeers: a call that first touches an allocation waits for the peers to take it in (generously here, so a
// loaded machine does not make it flaky: the wait ends once they have), and is zero-copy itself. Without the wait
// (WEFT_COLL_REGISTER_WAIT_MS=0) a call within a few goes zero-copy (the first one too, when the peers' answers
// happen to arrive within it: each call shares first and takes in messages after).
void autoRegisteredZeroCopy(int size, bool waitForPeers) {
  UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
  const uint64_t seed = freshSeed();
  auto results = test::runRanks(
      size,
      [&](int rank, int n) {
        setenv("WEFT_COLL_REGISTER_WAIT_MS", waitForPeers ? "10000" : "0", 1);
        CollectiveOptions o = smallScratch();
        o.oneShotMaxBytes = 0;  // every allreduce is scatter-gather
        Rank r(rank, n, id, o);
        constexpr uint64_t kBufferBytes = 256 << 10;
        constexpr uint64_t kCount = 5000;
        int caseId = 0;
        auto allReduceOnce = [&](uint8_t* base) {
          ++caseId;
          std::vector<Bytes> inputs;
          for (int p = 0; p < n; ++p) inputs.push_back(makeInput(seed, caseId, p, DataType::kFloat32, kCount));
          Bytes want(kCount * 4);
          referenceReduce(DataType::kFloat32, ReduceOp::kSum, inputs, 0, kCount, want.data());
          uint8_t* send = base + 64 * static_cast<uint64_t>(rank);
          uint8_t* recv = base + kBufferBytes / 2 + 32 * static_cast<uint64_t>(rank);
          std::memcpy(send, inputs[static_cast<size_t>(rank)].data(), kCount * 4);
          std::memset(recv, kPoison, kCount * 4);
          const uint64_t before = r.coll->zeroCopyCalls();
          r.coll->allReduce(send, recv, kCount, DataType::kFloat32, ReduceOp::kSum, nullptr);
          EXPECT_EQ(firstDifference(Bytes(recv, recv + kCount * 4), want), "") << "case " << caseId;
          return r.coll->zeroCopyCalls() - before;
        };
        // Within a bound of calls (the messages travel through the bootstrap's I/O threads), every call agreeing.
        auto untilZeroCopy = [&](uint8_t* base) {
          for (int call = 0; call < 200 && !::testing::Test::HasFailure(); ++call) {
            if (allReduceOnce(base) == 1) return call;
          }
          ADD_FAILURE() << "no zero-copy run in 200 calls";
          return -1;
        };
        std::shared_ptr<void> first = allocSharedHostMemory(kBufferBytes);
        if (waitForPeers) {
          EXPECT_EQ(allReduceOnce(static_cast<uint8_t*>(first.get())), 1u) << "the first call waited and is zero-copy";
        } else {
          EXPECT_GE(untilZeroCopy(static_cast<uint8_t*>(first.get())), 0);
        }
        for (int i = 0; i < 5; ++i) EXPECT_EQ(allReduceOnce(static_cast<uint8_t*>(first.get())), 1u) << "call " << i;
        first.reset();  // the next allocation often lands at its address: every call's data check would catch a stale
                        // map
        std::shared_ptr<void> second = allocSharedHostMemory(kBufferBytes);
        if (waitForPeers) {
          // A new allocation at the old address is a new registration: right data (checked), zero-copy at once.
          EXPECT_EQ(allReduceOnce(static_cast<uint8_t*>(second.get())), 1u) << "the new allocation waited";
        } else {
          EXPECT_GE(untilZeroCopy(static_cast<uint8_t*>(second.get())), 0);
        }
        for (int i = 0; i < 5; ++i) EXPECT_EQ(allReduceOnce(static_cast<uint8_t*>(second.get())), 1u) << "call " << i;
        r.comm->bootstrap().barrier();
      },
      std::chrono::seconds(120));
  WEFT_EXPECT_RANKS_OK(results) << "seed " << seed;
}

TEST(CollectivesMpTest, UnregisteredBuffersGoZeroCopyAfterAFewCallsTwoRanks) { autoRegisteredZeroCopy(2, false); }
TEST(CollectivesMpTest, UnregisteredBuffersGoZeroCopyAfterAFewCallsThreeRanks) { autoRegisteredZeroCopy(3, false); }
TEST(CollectivesMpTest, UnregisteredBuffersGoZeroCopyAtTheFirstCallTwoRanks) { autoRegisteredZeroCopy(2, true); }
TEST(CollectivesMpTest, UnregisteredBuffersGoZeroCopyAtTheFirstCallThreeRanks) { autoRegisteredZeroCopy(3, true); }

// One rank turning registration on first use off (WEFT_COLL_AUTO_REGISTER=0) turns it off for every rank: no call
// goes zero-copy, and none waits for offers that rank never makes.
TEST(CollectivesMpTest, AutoRegistrationOffOnOneRankIsOffForAll) {
  UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
  auto results = test::runRanks(
      3,
      [&](int rank, int n) {
        if (rank == 1) setenv("WEFT_COLL_AUTO_REGISTER", "0", 1);
        CollectiveOptions o = smallScratch();
        o.oneShotMaxBytes = 0;
        Rank r(rank, n, id, o);
        std::shared_ptr<void> buffer = allocSharedHostMemory(64 << 10);
        auto* base = static_cast<float*>(buffer.get());
        for (int call = 0; call < 20; ++call) {
          for (int i = 0; i < 1000; ++i) base[i] = static_cast<float>(rank + i);
          r.coll->allReduce(base, base + 2000, 1000, DataType::kFloat32, ReduceOp::kSum, nullptr);
          for (int i = 0; i < 1000; i += 97) ASSERT_EQ(base[2000 + i], static_cast<float>(3 + 3 * i)) << i;
        }
        EXPECT_EQ(r.coll->zeroCopyCalls(), 0u);
        r.comm->bootstrap().barrier();
      },
      std::chrono::seconds(60));
  WEFT_EXPECT_RANKS_OK(results);
}

// Memory the host transport cannot share (plain heap memory): every rank's registerBuffer fails alike, with the
// reason, instead of some ranks going on while others stop.
TEST(CollectivesMpTest, RegisteringMemoryPeersCannotMapFailsOnEveryRank) {
  UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
  auto results = test::runRanks(2, [&](int rank, int n) {
    Rank r(rank, n, id, smallScratch());
    Bytes plain(4096);
    try {
      r.coll->registerBuffer(plain.data(), plain.size());
      ADD_FAILURE() << "registering heap memory should fail";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kNotSupported) << e.what();
    }
    EXPECT_THROW(r.coll->registerBuffer(nullptr, 16), Error);
    r.comm->bootstrap().barrier();
  });
  WEFT_EXPECT_RANKS_OK(results);
}

// The scatter-gather allreduce pairs worker b of every rank: ranks that ask for different team sizes run the
// smallest, and the results are right (with the sizes as asked, the extra workers would wait for partners forever).
TEST(CollectivesMpTest, RanksAskingForDifferentTeamSizesAgree) {
  UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
  const uint64_t seed = freshSeed();
  auto results = test::runRanks(3, [&](int rank, int n) {
    CollectiveOptions o = smallScratch();
    o.hostThreads = static_cast<uint32_t>(1 + 2 * rank);  // 1, 3, 5
    o.allReduceAlgorithm = AllReduceAlgorithm::kScatterGather;
    Rank r(rank, n, id, o);
    runCase(*r.coll, {CollectiveKind::kAllReduce, DataType::kFloat32, ReduceOp::kSum, 5000, false, 0}, 1, seed);
    runCase(*r.coll, {CollectiveKind::kAllReduce, DataType::kInt8, ReduceOp::kMax, 20011, true, 0}, 2, seed);
    r.comm->bootstrap().barrier();
  });
  WEFT_EXPECT_RANKS_OK(results) << "seed " << seed;
}

TEST(CollectivesMpTest, GridSizeOutsideItsRangeIsRefused) {
  UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
  auto results = test::runRanks(1, [&](int rank, int n) {
    CollectiveOptions o = smallScratch();
    o.gpuBlocks = 257;
    try {
      Rank r(rank, n, id, o);
      ADD_FAILURE() << "gpuBlocks 257 accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
      EXPECT_NE(std::string(e.what()).find("gpuBlocks 257"), std::string::npos) << e.what();
    }
  });
  WEFT_EXPECT_RANKS_OK(results);
}

TEST(CollectivesMpTest, BadArgumentsAreRefused) {
  UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
  auto results = test::runRanks(2, [&](int rank, int n) {
    Rank r(rank, n, id, smallScratch());
    CollectiveComm& c = *r.coll;
    std::vector<float> buf(64);
    auto expectInvalid = [](auto&& call, const char* word) {
      try {
        call();
        ADD_FAILURE() << "accepted: " << word;
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
        EXPECT_NE(std::string(e.what()).find(word), std::string::npos) << e.what();
      }
    };
    expectInvalid([&] { c.allReduce(nullptr, buf.data(), 4, DataType::kFloat32, ReduceOp::kSum, nullptr); }, "send");
    expectInvalid([&] { c.allGather(buf.data(), nullptr, 4, DataType::kFloat32, nullptr); }, "recv");
    expectInvalid([&] { c.allReduce(buf.data(), buf.data(), 4, static_cast<DataType>(42), ReduceOp::kSum, nullptr); },
                  "data type");
    expectInvalid(
        [&] { c.allReduce(buf.data(), buf.data(), 4, DataType::kFloat32, static_cast<ReduceOp>(9), nullptr); },
        "reduce op");
    expectInvalid([&] { c.broadcast(buf.data(), buf.data(), 4, DataType::kFloat32, 2, nullptr); }, "root");
    expectInvalid([&] { c.reduce(buf.data(), buf.data(), 4, DataType::kFloat32, ReduceOp::kSum, -1, nullptr); },
                  "root");
    expectInvalid([&] { c.allReduce(buf.data(), buf.data(), ~0ull / 2, DataType::kFloat32, ReduceOp::kSum, nullptr); },
                  "overflow");
    std::vector<PointToPoint> badPeer = {{PointToPoint::Direction::kSend, buf.data(), 4, DataType::kFloat32, 5}};
    expectInvalid([&] { c.sendRecv(badPeer, nullptr); }, "peer 5");
    expectInvalid(
        [&] { c.allToAllV(buf.data(), nullptr, nullptr, buf.data(), nullptr, nullptr, DataType::kFloat32, nullptr); },
        "null count");
    EXPECT_FALSE(c.supports(CollectiveKind::kAllReduce, static_cast<DataType>(42), ReduceOp::kSum, 1).native);
    EXPECT_TRUE(c.supports(CollectiveKind::kAllReduce, DataType::kFloat8E4M3, ReduceOp::kAvg, 1).native);
    EXPECT_EQ(c.supports(CollectiveKind::kSendRecv, DataType::kUint8, ReduceOp::kSum, 0).reason, "");
    EXPECT_NO_THROW(c.checkError());
    // Nothing ran, so the channels are in step: a real operation still works.
    runCase(c, {CollectiveKind::kAllReduce, DataType::kFloat32, ReduceOp::kMax, 100, false, 0}, 1, 99);
    r.comm->bootstrap().barrier();
  });
  WEFT_EXPECT_RANKS_OK(results);
}

}  // namespace
}  // namespace weft
