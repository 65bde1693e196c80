// The collective algorithms, written once for GPU kernels and for host threads. A "team" is the set of workers
// of one rank for one operation: numBlocks blocks of numThreads threads (a GPU grid; on the host, each thread of
// the team is a block of one thread). Every function here is called by every worker of the team with the same
// arguments.
//
// Data path (every collective): a rank copies (stages) its input into its own registered scratch memory, the
// ranks synchronise, each rank reads what it needs straight from its peers' scratch (mapped into this process)
// and writes its output, and the ranks synchronise again before the scratch is reused. Operations larger than
// the scratch go in pieces, each piece through the same steps.
//
// Synchronisation (rankSync): a grid barrier in device memory (so every block's stores are done), then block 0
// signals every peer's semaphore and waits for every peer's signal (release/acquire at system scope), then a
// second grid barrier releases the other blocks. A grid barrier needs every block resident at once, which the
// launcher guarantees by launching few blocks (kGpuBlocks).
//
// Small allreduces take the one-shot LL16 path instead (allReduceOneShot): no scratch, no rank sync, no grid
// barrier; the data carries its own flags.
#pragma once

#include <cstdint>
#include <weft/copy_device.hpp>
#include <weft/device.hpp>
#include <weft/device_error.hpp>
#include <weft/memory_semaphore_device.hpp>
#include <weft/packet_device.hpp>
#include <weft/platform.hpp>
#include <weft/reduce_device.hpp>

namespace weft::detail {

/// Scratch regions start at multiples of this, so typed accesses to scratch are aligned for every element type.
inline constexpr uint64_t kScratchAlign = 256;
/// Most group entries (sends plus receives) one sendRecv/allToAll(V) call carries in its kernel arguments.
inline constexpr uint32_t kMaxGroupEntries = 96;

/// What a rank knows about one peer (itself included: its own scratch, no semaphore).
struct PeerSlot {
  uint8_t* scratch;                              // the peer's scratch, mapped into this process
  MemoryDevice2DeviceSemaphoreDeviceHandle sem;  // signals to and from the peer (unused for this rank)
  uint64_t* pairFlags;                           // the peer's block-pair flags (pairSync), mapped
};

/// Most blocks (GPU) or workers (host) a team of the block-pair algorithms has: the flag region holds this many
/// rows of one flag per rank.
inline constexpr uint32_t kMaxPairBlocks = 256;

/// A sense-reversal barrier among the blocks of one grid, in device memory (host memory for host teams), reusable
/// by any number of launches (it returns to arrived == 0 after each use).
struct GridBarrierState {
  uint32_t arrived;
  uint32_t generation;
  uint32_t abort;  ///< host teams: set by a worker that failed, so the others stop waiting
  uint32_t reserved;
};

/// One rank's fixed context: made at setup, passed by value in every launch.
struct CollectiveContext {
  PeerSlot* peers;  ///< size() entries (device memory on GPU builds)
  GridBarrierState* barrier;
  uint64_t scratchBytes;
  uint64_t budgetNs;
  DeviceErrorRecord* record;
  /// Block-pair sync (pairSync): this rank's inbound flags [kMaxPairBlocks][size] (flag [b][p] is the last round
  /// block b of rank p reached) and its per-block round counters [kMaxPairBlocks], both at the tail of its scratch.
  uint64_t* pairFlags;
  uint64_t* pairRounds;
  /// Zero-copy runs (registered buffers): peer p's registration in slot r is mapped here at regTable[r * size + p]
  /// (base null where the slot is free); peers write their offers into offers[p] of this rank's scratch, at
  /// offersOffset in every rank's scratch; `plan` (this rank's, device-local) counts the runs; `offerRounds`
  /// [kMaxPairBlocks] counts the handshakes each block took part in (every block of a grid takes part in each).
  const struct RegistrationEntry* regTable;
  uint64_t offersOffset;
  struct ZeroCopyPlan* plan;
  uint64_t* offerRounds;
  int32_t rank;
  int32_t size;
  /// 1 when every rank of the communicator runs on this rank's GPU (GPU builds): the ranks' flags then need only
  /// device-scope release and acquire (syncRelease, syncWait), which do not reach out over the bus to the host.
  uint32_t oneGpu;
  uint32_t reserved;
};

/// Most registrations (CollectiveComm::registerBuffer) one communicator holds at once: table slots
/// [0, kMaxRegistrations), the same slot on every rank.
inline constexpr uint32_t kMaxRegistrations = 64;

/// Most allocations a rank registers on first use (AutoRegistrations): table slots [kMaxRegistrations,
/// kRegistrationSlots), numbered by their owner (rank p's slot s is its own, whatever slot s is on other ranks).
inline constexpr uint32_t kMaxAutoRegistrations = 64;
inline constexpr uint32_t kRegistrationSlots = kMaxRegistrations + kMaxAutoRegistrations;

/// Where one rank's registration in one slot is mapped in this process, and which registration of that slot it is:
/// an offer names slot and generation (registrationKey), so an offer of a registration whose slot was since
/// released and reused maps nothing. registerBuffer's registrations are generation 0.
struct RegistrationEntry {
  uint8_t* base;
  uint64_t generation;
};

/// The value an offer carries for a buffer in registration (slot, generation); < 0 means "not registered".
WEFT_HOST_DEVICE_INLINE int64_t registrationKey(uint32_t slot, uint64_t generation) {
  return static_cast<int64_t>((generation << 32) | slot);
}

/// Most ranks a zero-copy run serves (the plan holds one send and one recv per rank); larger teams always stage.
inline constexpr uint32_t kMaxZeroCopyRanks = 256;

/// What a rank tells its peers about one collective: where its send and recv lie among its registrations
/// (reg < 0: not registered), published with `round` last (release) into the peer's scratch.
struct ZeroCopyOffer {
  int64_t sendReg;
  int64_t recvReg;
  uint64_t sendOffset;
  uint64_t recvOffset;
  uint64_t round;
  uint64_t reserved[3];
};

/// What this rank's zero-copy runs leave behind (block 0 counts them).
struct ZeroCopyPlan {
  uint64_t runs;  ///< operations of this rank that ran zero-copy (CollectiveComm::zeroCopyCalls)
};

/// One send or receive of a group: `bytes` at `buffer`, to or from `peer`.
struct GroupEntry {
  uint8_t* buffer;
  uint64_t bytes;
  int32_t peer;
  uint32_t isSend;
};

/// One operation's arguments (trivially copyable: they travel as kernel arguments).
struct CollectiveArgs {
  CollectiveContext ctx;
  int32_t kind;  ///< a CollectiveKind
  ReduceOp op;
  int32_t root;
  uint32_t groupCount;  ///< entries of `group` in use (group kinds)
  uint64_t count;       ///< elements: per rank for allGather/reduceScatter/allToAll, the whole buffer otherwise
  const uint8_t* send;
  uint8_t* recv;
  /// Collectives with a zero-copy path, where they stage otherwise: 1 when the ranks exchange offers first (the
  /// communicator has registrations, so a zero-copy run is possible); this rank's offer.
  uint32_t offers;
  ZeroCopyOffer offer;
  GroupEntry group[kMaxGroupEntries];
};
static_assert(std::is_trivially_copyable_v<CollectiveArgs>);

/// The workers of one rank for one operation.
template <class BlockSync>
struct Team {
  uint32_t blockId;
  uint32_t numBlocks;
  uint32_t threadId;
  uint32_t numThreads;
  BlockSync blockSync;  ///< a block barrier (every thread of the block calls it)

  WEFT_HOST_DEVICE_INLINE uint32_t flatId() const { return blockId * numThreads + threadId; }
  WEFT_HOST_DEVICE_INLINE uint32_t flatCount() const { return numBlocks * numThreads; }
};

#if !defined(WEFT_DEVICE_COMPILE)
/// Thrown by a host worker that stops because another worker of its team failed (the launcher reports the other).
struct TeamAborted {};
#endif

/// Stops every worker of the team after a failure: device code traps; host code throws (the launcher catches).
[[noreturn]] WEFT_HOST_DEVICE_INLINE void abortTeam() {
#if defined(WEFT_DEVICE_COMPILE) && defined(WEFT_COMPILER_CUDA)
  __trap();
#elif defined(WEFT_DEVICE_COMPILE)
  __builtin_trap();
#else
  throw TeamAborted{};
#endif
}

/// A release store of `value` into a flag another rank polls with syncWait: at device scope when every rank runs on
/// this GPU (ctx.oneGpu), at system scope otherwise.
WEFT_HOST_DEVICE_INLINE void syncRelease(const CollectiveContext& ctx, uint64_t* flag, uint64_t value) {
  withScope(ctx.oneGpu != 0,
            [&](auto scope) { atomicStore<MemoryOrder::kRelease, decltype(scope)::value>(flag, value); });
}

/// Polls `flag` with acquire loads (at syncRelease's scope) until it reaches `target`; reports a timeout at `site`.
WEFT_HOST_DEVICE_INLINE void syncWait(const CollectiveContext& ctx, const uint64_t* flag, uint64_t target,
                                      const WaitSite& site) {
  withScope(ctx.oneGpu != 0, [&](auto scope) {
    waitAtLeast<MemoryOrder::kAcquire, decltype(scope)::value>(flag, target, ctx.budgetNs, site, WaitOp::kBarrier);
  });
}

/// Grid barrier, called by one thread per block after a block barrier. Its wait has twice the semaphores' budget:
/// while block 0 waits for a peer the other blocks wait here, and the peer wait must be the one that runs out
/// first and is recorded (it names the peer).
///
/// Device scope: every party is a block of this grid on this GPU. The arrival is acq_rel and the waiters poll with
/// relaxed loads and take one acquire fence once the generation moved (system-scope acquire polls from every block
/// cost microseconds per barrier). Stores a block made before the barrier, to this GPU's memory or to mapped peer
/// memory, happen before everything every block does after it; block 0's signal that follows in
/// rankSync carries them on to the peers (causality order is transitive across the scopes).
WEFT_HOST_DEVICE_INLINE void gridBarrierOneThread(const CollectiveContext& ctx, uint32_t numBlocks, int32_t kind) {
  if (numBlocks == 1) return;
  GridBarrierState* s = ctx.barrier;
  const uint32_t generation = atomicLoad<MemoryOrder::kRelaxed, Scope::kDevice>(&s->generation);
  const uint32_t before = atomicFetchAdd<MemoryOrder::kAcqRel, Scope::kDevice>(&s->arrived, 1u);
  if (before == numBlocks - 1) {
    atomicStore<MemoryOrder::kRelaxed, Scope::kDevice>(&s->arrived, 0u);
    atomicStore<MemoryOrder::kRelease, Scope::kDevice>(&s->generation, generation + 1);
    return;
  }
  uint32_t seen = generation;
  bool aborted = false;
  const bool ok = spinWaitUntil(
      [&] {
        seen = atomicLoad<MemoryOrder::kRelaxed, Scope::kDevice>(&s->generation);
        aborted = atomicLoad<MemoryOrder::kRelaxed, Scope::kDevice>(&s->abort) != 0;
        return seen != generation || aborted;
      },
      WaitBudget{2 * ctx.budgetNs});
  fence<MemoryOrder::kAcquire, Scope::kDevice>();
  if (aborted) abortTeam();
  if (!ok) {
    reportWaitTimeout(WaitSite{ctx.record, ctx.rank, -1, kind}, WaitOp::kBarrier, generation + 1, seen,
                      2 * ctx.budgetNs);
  }
}

template <class TeamT>
WEFT_HOST_DEVICE_INLINE void gridBarrier(const TeamT& team, const CollectiveContext& ctx, int32_t kind) {
  team.blockSync();
  if (team.threadId == 0) gridBarrierOneThread(ctx, team.numBlocks, kind);
  team.blockSync();
}

/// Synchronises this rank with every peer p for which active(p) holds (and with no other): afterwards every
/// store any worker of either rank made before the call is visible to every worker of both. Both ranks of a pair
/// must make the same number of such calls naming each other.
template <class TeamT, class Active>
WEFT_HOST_DEVICE_INLINE void rankSync(const TeamT& team, const CollectiveContext& ctx, int32_t kind, Active&& active) {
  gridBarrier(team, ctx, kind);
  if (team.blockId == 0) {
    for (int32_t p = static_cast<int32_t>(team.threadId); p < ctx.size; p += static_cast<int32_t>(team.numThreads)) {
      if (p != ctx.rank && active(p)) ctx.peers[p].sem.signal();
    }
    for (int32_t p = static_cast<int32_t>(team.threadId); p < ctx.size; p += static_cast<int32_t>(team.numThreads)) {
      if (p != ctx.rank && active(p)) {
        MemoryDevice2DeviceSemaphoreDeviceHandle sem = ctx.peers[p].sem;
        sem.site.channel = kind;  // the record names the collective
        sem.wait();
      }
    }
  }
  gridBarrier(team, ctx, kind);
}

template <class TeamT>
WEFT_HOST_DEVICE_INLINE void rankSyncAll(const TeamT& team, const CollectiveContext& ctx, int32_t kind) {
  rankSync(team, ctx, kind, [](int32_t) { return true; });
}

/// Block-pair sync: block b of this rank and block b of every peer p for which active(p) holds meet in round
/// `round` (a count every block pair advances alike, kept across launches in ctx.pairRounds). Afterwards every store
/// the block made before the call is visible to block b of those peers, and theirs to this block. No grid barrier:
/// the algorithms that use it give block b of every rank the same part of the data, so blocks need not wait for
/// the other blocks of their own grid. Every rank must run the same number of blocks.
template <class TeamT, class Active>
WEFT_HOST_DEVICE_INLINE void pairSync(const TeamT& team, const CollectiveContext& ctx, int32_t kind, uint64_t round,
                                      Active&& active) {
  team.blockSync();
  const uint64_t row = static_cast<uint64_t>(team.blockId) * static_cast<uint64_t>(ctx.size);
  for (int32_t p = static_cast<int32_t>(team.threadId); p < ctx.size; p += static_cast<int32_t>(team.numThreads)) {
    if (p != ctx.rank && active(p)) {
      syncRelease(ctx, &ctx.peers[p].pairFlags[row + static_cast<uint64_t>(ctx.rank)], round);
    }
  }
  // Acquire polls, not relaxed polls and one acquire fence: a system-scope fence cost about 0.8 us per sync on an
  // H100 (2 ranks' zero-copy allreduce, docs/performance.md). The block barrier below carries the acquire on to the
  // block's other threads.
  for (int32_t p = static_cast<int32_t>(team.threadId); p < ctx.size; p += static_cast<int32_t>(team.numThreads)) {
    if (p == ctx.rank || !active(p)) continue;
    const uint64_t* flag = &ctx.pairFlags[row + static_cast<uint64_t>(p)];
    syncWait(ctx, flag, round, WaitSite{ctx.record, ctx.rank, p, kind});
  }
  team.blockSync();
}

/// The last sync of a zero-copy run: afterwards no peer reads this rank's buffers or writes them, so the kernel may
/// end and the stream's next work may touch them. A block-pair sync with every peer (pairSync, round counted in
/// ctx.pairRounds like the scatter-gather steps) is enough: each block's own reads and writes of peer buffers come
/// before its arrival, and a rank's kernel ends only once every one of its blocks saw block b of every peer arrive.
/// It spares the two grid barriers and the rank-level round trip of rankSync (about 2.5 us of a 16 MB allreduce of
/// 2 ranks on an H100).
template <class TeamT>
WEFT_HOST_DEVICE_INLINE void finishZeroCopy(const TeamT& team, const CollectiveContext& ctx, int32_t kind) {
  uint64_t* rounds = &ctx.pairRounds[team.blockId];
  const uint64_t round = atomicLoad<MemoryOrder::kRelaxed, Scope::kDevice>(rounds) + 1;
  pairSync(team, ctx, kind, round, [](int32_t) { return true; });
  if (team.threadId == 0) atomicStore<MemoryOrder::kRelaxed, Scope::kDevice>(rounds, round);
}

/// The threads of one block of `team`, as a team of one block (flatId is the thread within the block).
template <class TeamT>
WEFT_HOST_DEVICE_INLINE TeamT blockOf(const TeamT& team) {
  TeamT b = team;
  b.blockId = 0;
  b.numBlocks = 1;
  return b;
}

/// Elements of T that fit in `bytes`, at least 1 (setup guarantees regions hold one element of every type).
template <class T>
WEFT_HOST_DEVICE_INLINE uint64_t elementsIn(uint64_t bytes) {
  const uint64_t n = bytes / sizeof(T);
  return n == 0 ? 1 : n;
}

/// Bytes of a scratch region when the scratch is cut into `parts` equal, aligned regions.
WEFT_HOST_DEVICE_INLINE uint64_t regionBytes(uint64_t scratchBytes, uint64_t parts) {
  return (scratchBytes / parts) / kScratchAlign * kScratchAlign;
}

WEFT_HOST_DEVICE_INLINE uint64_t minU64(uint64_t a, uint64_t b) { return a < b ? a : b; }

/// Elements of T in one 16-byte vector.
template <class T>
inline constexpr uint64_t kVectorElems = sizeof(Bytes16) / sizeof(T);

WEFT_HOST_DEVICE_INLINE bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

/// Start of share q of c elements cut into n shares (q == n gives c). Shares start at multiples of a 16-byte vector,
/// so that a share's vectors are aligned wherever its buffer is; every rank computes the same bounds.
template <class T>
WEFT_HOST_DEVICE_INLINE uint64_t shareStart(uint64_t c, uint64_t q, uint64_t n) {
  if (q >= n) return c;
  return c * q / n / kVectorElems<T> * kVectorElems<T>;
}

/// dst[v] (and dst2[v] unless null) = the reduction over p = 0..n-1, in that order, of src(p)[v], for the 16-byte
/// vectors v < vectors of elements of T, lane by lane exactly as reduceOrdered. Each worker takes kUnroll vectors per
/// round and issues their loads together, so it waits for one memory latency per round, not per vector.
template <class T, class TeamT, class Src, class Store>
WEFT_HOST_DEVICE_INLINE void reduceVectors(const TeamT& team, ReduceOp op, int n, uint64_t vectors, Src&& src,
                                           Store&& store) {
  using Traits = ReduceTraits<T>;
  using Acc = typename Traits::Acc;
  constexpr uint64_t kLanes = kVectorElems<T>;
  constexpr uint32_t kUnroll = kLanes >= 8 ? 2 : 4;  // bounds the accumulator registers (16 per worker)
  const uint64_t stride = team.flatCount();
  if (n == 2) {
    // Both sources' loads of a round go out together (the general loop below waits for one source's before it
    // issues the next's): 2 ranks' zero-copy and staged reductions, about 1.5-3 us of a 16 MB allreduce on an H100.
    const Bytes16* s0 = src(0);
    const Bytes16* s1 = src(1);
    for (uint64_t v0 = team.flatId(); v0 < vectors; v0 += stride * kUnroll) {
      Bytes16 w0[kUnroll];
      Bytes16 w1[kUnroll];
      for (uint32_t u = 0; u < kUnroll; ++u) {
        const uint64_t v = v0 + u * stride;
        w0[u] = v < vectors ? s0[v] : Bytes16{0, 0};
        w1[u] = v < vectors ? s1[v] : Bytes16{0, 0};
      }
      for (uint32_t u = 0; u < kUnroll; ++u) {
        const uint64_t v = v0 + u * stride;
        if (v >= vectors) break;
        Bytes16 out;
        for (uint64_t e = 0; e < kLanes; ++e) {
          T t0;
          T t1;
          memcpy(&t0, reinterpret_cast<const uint8_t*>(&w0[u]) + e * sizeof(T), sizeof(T));
          memcpy(&t1, reinterpret_cast<const uint8_t*>(&w1[u]) + e * sizeof(T), sizeof(T));
          const Acc x = reduceCombine(op, Traits::load(t0), Traits::load(t1));
          const T t = Traits::store(canonicalNan(reduceFinish(op, x, n)));
          memcpy(reinterpret_cast<uint8_t*>(&out) + e * sizeof(T), &t, sizeof(T));
        }
        store(v, out);
      }
    }
    return;
  }
  for (uint64_t v0 = team.flatId(); v0 < vectors; v0 += stride * kUnroll) {
    Acc acc[kUnroll][kLanes];
    for (int p = 0; p < n; ++p) {
      const Bytes16* from = src(p);
      Bytes16 w[kUnroll];
      for (uint32_t u = 0; u < kUnroll; ++u) {
        const uint64_t v = v0 + u * stride;
        w[u] = v < vectors ? from[v] : Bytes16{0, 0};
      }
      for (uint32_t u = 0; u < kUnroll; ++u) {
        for (uint64_t e = 0; e < kLanes; ++e) {
          T t;
          memcpy(&t, reinterpret_cast<const uint8_t*>(&w[u]) + e * sizeof(T), sizeof(T));
          const Acc x = Traits::load(t);
          acc[u][e] = p == 0 ? x : reduceCombine(op, acc[u][e], x);
        }
      }
    }
    for (uint32_t u = 0; u < kUnroll; ++u) {
      const uint64_t v = v0 + u * stride;
      if (v >= vectors) break;
      Bytes16 out;
      for (uint64_t e = 0; e < kLanes; ++e) {
        const T t = Traits::store(canonicalNan(reduceFinish(op, acc[u][e], n)));
        memcpy(reinterpret_cast<uint8_t*>(&out) + e * sizeof(T), &t, sizeof(T));
      }
      store(v, out);
    }
  }
}

/// The reduction over p (rank order) of value(p)[i] for i < count, where value(p) points at elements of T, handed to
/// `store(v, out)` per 16-byte vector v (reduceVectors) when `dstAligned` and every value(p) is 16-byte aligned, and
/// to `storeOne(i, t)` element by element for the rest. value(p) is called per round: resolving the sources once
/// into a local array cost a 2-rank 16 MB allreduce 3-8% and an 8-rank one 6% on an H100 (the array went to the
/// stack, and the kernels spilled more).
template <class T, class TeamT, class ValueOf, class Store, class StoreOne>
WEFT_HOST_DEVICE_INLINE void reduceRangeWith(const TeamT& team, const CollectiveContext& ctx, ReduceOp op,
                                             uint64_t count, ValueOf&& value, bool dstAligned, Store&& store,
                                             StoreOne&& storeOne) {
  uint64_t done = 0;
  bool vector = dstAligned;
  for (int p = 0; p < ctx.size && vector; ++p) vector = aligned16(value(p));
  if (vector) {
    const uint64_t vectors = count / kVectorElems<T>;
    reduceVectors<T>(
        team, op, ctx.size, vectors, [&](int p) { return reinterpret_cast<const Bytes16*>(value(p)); }, store);
    done = vectors * kVectorElems<T>;
  }
  const uint64_t stride = team.flatCount();
  for (uint64_t i = done + team.flatId(); i < count; i += stride) {
    storeOne(i, reduceOrdered<T>(op, ctx.size, [&](int p) { return value(p)[i]; }));
  }
}

/// dst[i] (and dst2[i] unless null) = the reduction over p (rank order) of value(p)[i] for i < count. `value(p)` must
/// be 16-byte aligned for every p whenever dst is (callers pass scratch regions, which are, and buffers that are
/// checked).
template <class T, class TeamT, class ValueOf>
WEFT_HOST_DEVICE_INLINE void reduceRange(const TeamT& team, const CollectiveContext& ctx, ReduceOp op, uint64_t count,
                                         ValueOf&& value, T* dst, T* dst2) {
  auto* d0 = reinterpret_cast<Bytes16*>(dst);
  auto* d1 = reinterpret_cast<Bytes16*>(dst2);
  reduceRangeWith<T>(
      team, ctx, op, count, value, aligned16(dst) && (dst2 == nullptr || aligned16(dst2)),
      [&](uint64_t v, const Bytes16& out) {
        d0[v] = out;
        if (d1 != nullptr) d1[v] = out;
      },
      [&](uint64_t i, T t) {
        dst[i] = t;
        if (dst2 != nullptr) dst2[i] = t;
      });
}

/// dsts[d][i], for every d < nd, = the reduction over p (rank order) of value(p)[i] for i < count (as reduceRange).
template <class T, class TeamT, class ValueOf>
WEFT_HOST_DEVICE_INLINE void reduceRangeInto(const TeamT& team, const CollectiveContext& ctx, ReduceOp op,
                                             uint64_t count, ValueOf&& value, T* const* dsts, int nd) {
  bool aligned = true;
  for (int d = 0; d < nd; ++d) aligned = aligned && aligned16(dsts[d]);
  reduceRangeWith<T>(
      team, ctx, op, count, value, aligned,
      [&](uint64_t v, const Bytes16& out) {
        for (int d = 0; d < nd; ++d) reinterpret_cast<Bytes16*>(dsts[d])[v] = out;
      },
      [&](uint64_t i, T t) {
        for (int d = 0; d < nd; ++d) dsts[d][i] = t;
      });
}

/// dst[i] = reduce over ranks of src_p[i], i < count, where src_p = peer p's scratch + offset (rank order).
template <class T, class TeamT>
WEFT_HOST_DEVICE_INLINE void reduceFromScratch(const TeamT& team, const CollectiveContext& ctx, ReduceOp op,
                                               uint64_t scratchOffset, uint64_t count, T* dst, T* dst2) {
  reduceRange<T>(
      team, ctx, op, count, [&](int p) { return reinterpret_cast<const T*>(ctx.peers[p].scratch + scratchOffset); },
      dst, dst2);
}

// ---- the collectives --------------------------------------------------------------------------------------------

/// Which of rank p's buffers a zero-copy run of `a` touches from other ranks (kZeroCopySend, kZeroCopyRecv): only
/// those must be registered. A buffer only its own rank reads or writes need not be.
inline constexpr uint32_t kZeroCopySend = 1;
inline constexpr uint32_t kZeroCopyRecv = 2;
WEFT_HOST_DEVICE_INLINE uint32_t zeroCopyNeeds(const CollectiveArgs& a, int32_t p) {
  switch (static_cast<CollectiveKind>(a.kind)) {
    case CollectiveKind::kAllReduce: return kZeroCopySend | kZeroCopyRecv;  // peers write or read the reduced shares
    case CollectiveKind::kReduce: return kZeroCopySend | (p == a.root ? kZeroCopyRecv : 0u);
    case CollectiveKind::kBroadcast: return p == a.root ? kZeroCopySend : 0u;
    default: return kZeroCopySend;  // reduceScatter, allGather, allToAll: every rank reads the sends it needs
  }
}

/// Where rank p's registration `reg` (registrationKey; < 0: none) lies in this process, plus `offset`; null when this
/// rank has not mapped that registration (another generation of the slot, or none).
WEFT_HOST_DEVICE_INLINE uint8_t* mappedRegistration(const CollectiveContext& ctx, int32_t p, int64_t reg,
                                                    uint64_t offset) {
  if (reg < 0) return nullptr;
  const uint64_t slot = static_cast<uint64_t>(reg) & 0xffffffffu;
  if (slot >= kRegistrationSlots) return nullptr;
  const RegistrationEntry entry = ctx.regTable[slot * static_cast<uint64_t>(ctx.size) + static_cast<uint64_t>(p)];
  if (entry.base == nullptr || entry.generation != static_cast<uint64_t>(reg) >> 32) return nullptr;
  return entry.base + offset;
}

/// Rank p's offer of this operation, in this rank's scratch (read it only after exchangeOffers).
WEFT_HOST_DEVICE_INLINE const ZeroCopyOffer& offerOf(const CollectiveArgs& a, int32_t p) {
  return reinterpret_cast<const ZeroCopyOffer*>(a.ctx.peers[a.ctx.rank].scratch + a.ctx.offersOffset)[p];
}

/// Rank p's send and recv of this operation as mapped here (after exchangeOffers): this rank's own buffers whether
/// registered or not; a peer's from its offer, null where this rank has not mapped it.
WEFT_HOST_DEVICE_INLINE const uint8_t* offeredSend(const CollectiveArgs& a, int32_t p) {
  if (p == a.ctx.rank) return a.send;
  const ZeroCopyOffer& o = offerOf(a, p);
  return mappedRegistration(a.ctx, p, o.sendReg, o.sendOffset);
}
WEFT_HOST_DEVICE_INLINE uint8_t* offeredRecv(const CollectiveArgs& a, int32_t p) {
  if (p == a.ctx.rank) return a.recv;
  const ZeroCopyOffer& o = offerOf(a, p);
  return mappedRegistration(a.ctx, p, o.recvReg, o.recvOffset);
}

/// The offer exchange of a collective on a communicator with registrations: block 0 publishes this rank's offer to
/// every peer; every block waits for every peer's (the peers' kernels have started, so their buffers hold this
/// call's input and nothing earlier on their streams still uses them) and concludes by itself whether every buffer
/// that zeroCopyNeeds names is mapped here. Every block reads the same offers and the same table (an entry changes
/// only while no launched operation can name it: imports are written before peers learn of them, releases after
/// the work that may use them), so every block of every rank concludes alike, with no grid barrier. Offers are not
/// overwritten before they are read: a rank's next offer to p follows its own next kernel start, which follows
/// this call's last sync with p, which every block of p passes only after this exchange.
template <class TeamT>
WEFT_HOST_DEVICE bool exchangeOffers(const TeamT& team, const CollectiveArgs& a) {
  const CollectiveContext& ctx = a.ctx;
  uint64_t* rounds = &ctx.offerRounds[team.blockId];
  const uint64_t round = atomicLoad<MemoryOrder::kRelaxed, Scope::kDevice>(rounds) + 1;
  if (team.blockId == 0) {
    for (int32_t p = static_cast<int32_t>(team.threadId); p < ctx.size; p += static_cast<int32_t>(team.numThreads)) {
      if (p == ctx.rank) continue;
      auto* to = reinterpret_cast<ZeroCopyOffer*>(ctx.peers[p].scratch + ctx.offersOffset) + ctx.rank;
      to->sendReg = a.offer.sendReg;
      to->recvReg = a.offer.recvReg;
      to->sendOffset = a.offer.sendOffset;
      to->recvOffset = a.offer.recvOffset;
      syncRelease(ctx, &to->round, round);
    }
  }
  // Every rank's offer is checked, this rank's own included (against its own entries), so that every rank weighs
  // the same facts: a rank that needs nothing of its peers (a broadcast's root) must still stage when the others
  // cannot reach its buffers.
  bool registered = true;
  for (int32_t p = static_cast<int32_t>(team.threadId); p < ctx.size; p += static_cast<int32_t>(team.numThreads)) {
    const ZeroCopyOffer* o = &a.offer;
    if (p != ctx.rank) {
      o = &offerOf(a, p);
      syncWait(ctx, &o->round, round, WaitSite{ctx.record, ctx.rank, p, a.kind});
    }
    const uint32_t needs = zeroCopyNeeds(a, p);
    if (((needs & kZeroCopySend) != 0 && mappedRegistration(ctx, p, o->sendReg, o->sendOffset) == nullptr) ||
        ((needs & kZeroCopyRecv) != 0 && mappedRegistration(ctx, p, o->recvReg, o->recvOffset) == nullptr)) {
      registered = false;
    }
  }
  // Also the block barrier after which every thread of the block may read every offer.
  const bool all = team.blockSync.all(registered);
  if (team.threadId == 0) {
    atomicStore<MemoryOrder::kRelaxed, Scope::kDevice>(rounds, round);
    if (team.blockId == 0 && all) ctx.plan->runs += 1;
  }
  return all;
}

/// Most ranks whose zero-copy allreduce writes every rank's recv straight from the reduction; larger teams copy the
/// shares after a rank sync. Measured on one H100 shared under MPS (graph, float, 16 MB / 64 MB out of place, direct
/// writes against reduce + sync + copy): 3 ranks 72.6 -> 58.4 / 212.4 -> 185.4 us, 4 ranks 90.2 -> 76.1 / 271.4 ->
/// 239.7, 6 ranks 122.2 -> 116.9 / 407.9 -> 392.9, 8 ranks 147.3 -> 142.3 / 500.4 -> 478.2 (docs/performance.md).
/// Past 8 it is not measured.
inline constexpr uint64_t kDirectWriteRanks = 8;

/// allReduce on registered buffers, after exchangeOffers found every rank's send and recv mapped: rank q reduces
/// share q straight from every rank's send and writes it into every rank's recv at once (up to kDirectWriteRanks
/// ranks: every byte read once and written once where it belongs, no sync in between); with more, into its own recv,
/// then a rank sync and each rank copies the other shares from their reducers' recv. A last sync (finishZeroCopy):
/// nobody reads this rank's send or writes its recv once the kernel ends. In place is safe: share q of every buffer
/// is read and then written by the same worker of rank q, and no other rank reads share q.
template <class T, class TeamT>
WEFT_HOST_DEVICE void allReduceZeroCopy(const TeamT& team, const CollectiveArgs& a) {
  const CollectiveContext& ctx = a.ctx;
  const uint64_t n = static_cast<uint64_t>(ctx.size);
  const uint64_t rank = static_cast<uint64_t>(ctx.rank);
  const uint64_t lo = shareStart<T>(a.count, rank, n);
  const uint64_t hi = shareStart<T>(a.count, rank + 1, n);
  auto sendOf = [&](int p) { return reinterpret_cast<const T*>(offeredSend(a, p)) + lo; };
  if (n == 2) {  // both destinations in registers
    reduceRange<T>(team, ctx, a.op, hi - lo, sendOf, reinterpret_cast<T*>(a.recv) + lo,
                   reinterpret_cast<T*>(offeredRecv(a, static_cast<int32_t>(1 - rank))) + lo);
  } else if (n <= kDirectWriteRanks) {
    T* to[kDirectWriteRanks];
    for (uint64_t p = 0; p < n; ++p) {
      // This rank's own recv first, then the next ranks': the ranks start on different buffers.
      to[p] = reinterpret_cast<T*>(offeredRecv(a, static_cast<int32_t>((rank + p) % n))) + lo;
    }
    reduceRangeInto<T>(team, ctx, a.op, hi - lo, sendOf, to, static_cast<int>(n));
  } else {
    reduceRange<T>(team, ctx, a.op, hi - lo, sendOf, reinterpret_cast<T*>(a.recv) + lo, static_cast<T*>(nullptr));
    rankSync(team, ctx, a.kind, [](int32_t) { return true; });
    for (uint64_t q = 0; q < n; ++q) {
      if (q == rank) continue;
      const uint64_t qlo = shareStart<T>(a.count, q, n);
      const uint64_t qhi = shareStart<T>(a.count, q + 1, n);
      copyCooperative(reinterpret_cast<T*>(a.recv) + qlo,
                      reinterpret_cast<const T*>(offeredRecv(a, static_cast<int32_t>(q))) + qlo,
                      (qhi - qlo) * sizeof(T), team.flatId(), team.flatCount());
    }
  }
  finishZeroCopy(team, ctx, a.kind);
}

/// allReduce (scatter-gather). Every piece of the message is cut into n x numBlocks chunks of equal length (a
/// multiple of a 16-byte vector where the scratch allows): chunk j = q * numBlocks + b belongs to share q (reduced by
/// rank q) and is handled by block b of every rank, which meets only block b of its peers (pairSync), never the
/// rest of its own grid. Per piece:
///   stage: block b copies chunk (q, b) of every share but this rank's own into slot (q, b) of the "in" half of
///   this rank's scratch; pair sync; reduce: block b reduces chunk (rank, b) from its own send buffer and slot
///   (rank, b) of every peer's "in" half into slot b of its "out" half and into recv; pair sync; gather: block b
///   copies slot b of every peer's "out" half (chunk (p, b)) into recv.
/// Slots sit at fixed places whatever the piece, so only block b of any rank ever touches slot (q, b) or out slot
/// b: the next piece needs no sync before it stages (block b of a peer read this rank's "in" slots of block b before
/// the second sync, and reads its "out" slot b before the next piece's first sync, which this block passes before it
/// writes that slot again). A last pair sync after the last piece: when the kernel (or host team) ends, every peer
/// block has read all it needed of this rank's scratch, so any operation may use the scratch next.
template <class T, class TeamT>
WEFT_HOST_DEVICE void allReduceSteps(const TeamT& team, const CollectiveArgs& a) {
  if (a.offers != 0 && exchangeOffers(team, a)) {
    allReduceZeroCopy<T>(team, a);
    return;
  }
  const CollectiveContext& ctx = a.ctx;
  const uint64_t half = regionBytes(ctx.scratchBytes, 2);
  const auto* send = reinterpret_cast<const T*>(a.send);
  auto* recv = reinterpret_cast<T*>(a.recv);
  const uint64_t n = static_cast<uint64_t>(ctx.size);
  const uint64_t rank = static_cast<uint64_t>(ctx.rank);
  const uint64_t b = team.blockId;
  const uint64_t chunks = n * team.numBlocks;
  // Slot capacity in elements, in units of a vector where a slot holds one (setup keeps slots >= 16 bytes).
  uint64_t slot = half / sizeof(T) / chunks;
  const uint64_t unit = slot >= kVectorElems<T> ? kVectorElems<T> : 1;
  slot = slot / unit * unit;
  const uint64_t pieceMax = slot * chunks;
  const TeamT block = blockOf(team);
  uint8_t* mine = ctx.peers[ctx.rank].scratch;
  auto all = [](int32_t) { return true; };
  uint64_t round = atomicLoad<MemoryOrder::kRelaxed, Scope::kDevice>(&ctx.pairRounds[b]);
  for (uint64_t start = 0; start < a.count; start += pieceMax) {
    const uint64_t c = minU64(pieceMax, a.count - start);
    uint64_t len = (c + chunks - 1) / chunks;
    len = (len + unit - 1) / unit * unit;  // <= slot: slot is a multiple of unit and c <= slot * chunks
    // Chunk (q, b) of this piece: elements [lo, hi) of the piece.
    auto bounds = [&](uint64_t q, uint64_t& lo, uint64_t& hi) {
      lo = minU64((q * team.numBlocks + b) * len, c);
      hi = minU64(lo + len, c);
    };
    for (uint64_t q = 0; q < n; ++q) {
      if (q == rank) continue;  // peers never read this rank's own share from scratch: it is reduced from send
      uint64_t lo, hi;
      bounds(q, lo, hi);
      copyCooperative(mine + (q * team.numBlocks + b) * slot * sizeof(T), send + start + lo, (hi - lo) * sizeof(T),
                      block.flatId(), block.flatCount());
    }
    pairSync(team, ctx, a.kind, ++round, all);
    uint64_t lo, hi;
    bounds(rank, lo, hi);
    const uint64_t inSlot = (rank * team.numBlocks + b) * slot * sizeof(T);
    // Element e of send is read before recv's element e is written, by the same worker: in-place is safe.
    reduceRange<T>(
        block, ctx, a.op, hi - lo,
        [&](int p) {
          return p == ctx.rank ? send + start + lo : reinterpret_cast<const T*>(ctx.peers[p].scratch + inSlot);
        },
        reinterpret_cast<T*>(mine + half + b * slot * sizeof(T)), recv + start + lo);
    pairSync(team, ctx, a.kind, ++round, all);
    for (uint64_t p = 0; p < n; ++p) {
      if (p == rank) continue;
      uint64_t plo, phi;
      bounds(p, plo, phi);
      copyCooperative(recv + start + plo, ctx.peers[p].scratch + half + b * slot * sizeof(T), (phi - plo) * sizeof(T),
                      block.flatId(), block.flatCount());
    }
  }
  pairSync(team, ctx, a.kind, ++round, all);
  if (team.threadId == 0) atomicStore<MemoryOrder::kRelaxed, Scope::kDevice>(&ctx.pairRounds[b], round);
}

// ---- one-shot LL16 allreduce ------------------------------------------------------------------------------------

/// Most ranks the one-shot path serves (its kernel arguments carry one packet-buffer pointer per rank).
inline constexpr int32_t kOneShotMaxRanks = 32;
/// Packets one worker handles per round of the one-shot loops: their loads are issued together, so a worker waits
/// for one memory latency per round rather than one per packet.
inline constexpr uint32_t kOneShotUnroll = 4;

/// The one-shot path's epoch, in device memory (host memory for host teams), so that a replayed CUDA graph takes a
/// fresh epoch each time. `counter` counts finished one-shot launches: launch k uses parity k & 1 of the packet
/// buffers and flag (k >> 1) + 1 (never 0, which fresh zeroed memory holds; never the flag the same parity held
/// the launch before). `done` counts the blocks of the running launch that have read the counter; the last one
/// resets it and advances the counter.
struct OneShotState {
  uint64_t counter;
  uint32_t done;
  uint32_t reserved;
};

/// Arguments of one one-shot launch (kept small: they travel as kernel arguments on the latency-critical path).
/// Packet buffer layout, on every rank: [parity 0..1][source rank 0..n-1][slotBytes], source `rank`'s slot
/// unused (a rank reads its own input from send).
struct OneShotArgs {
  CollectiveContext ctx;  ///< rank, size, budget and error record (peers, barrier and scratch are not used)
  OneShotState* state;
  uint64_t slotBytes;  ///< bytes of one (parity, source) slot: room for the packets of one launch
  ReduceOp op;
  int32_t kind;
  /// -1: every rank's data goes to every rank. Otherwise the rank whose result this launch is for (reduce: only it
  /// writes recv) or whose data it carries (broadcast: the others publish one token packet, see allGatherOneShot).
  int32_t root;
  uint64_t count;       ///< elements of this launch
  uint64_t sendStride;  ///< bytes between the inputs for consecutive ranks in send (reduceScatter); 0: one input
  const uint8_t* send;
  uint8_t* recv;
  uint8_t* packets[kOneShotMaxRanks];  ///< every rank's packet buffer, mapped ([rank]: this rank's own)
};
static_assert(std::is_trivially_copyable_v<OneShotArgs>);

/// The epoch a launch of the LL16 paths works in, read once at its start (finishOneShot advances it): launch k
/// (counter k) uses parity k & 1 of the packet buffers and flag (k >> 1) + 1.
struct OneShotEpoch {
  uint64_t counter;
  uint64_t parity;
  uint32_t flag;
};

WEFT_HOST_DEVICE_INLINE OneShotEpoch readEpoch(const OneShotState& state) {
  const uint64_t counter = atomicLoad<MemoryOrder::kRelaxed, Scope::kDevice>(&state.counter);
  return OneShotEpoch{counter, counter & 1u, static_cast<uint32_t>(counter >> 1) + 1u};
}

/// Ends a one-shot launch: every worker read `counter` (the epoch) at its start; once this block is done with it, the
/// last block to get here advances the epoch for the next launch. Device scope: only this grid touches the state,
/// and the next launch reads it after this kernel ends. A one-block grid (every message up to a few KB) needs no
/// count of finished blocks: that skips a device-memory round trip at the end of the smallest launches.
///
/// Relaxed throughout: what must precede the advance is each block's read of the epoch, which returned before its
/// workers began (they use its value), and nothing of the data: peers see packets through their flags, and the next
/// launch comes after this kernel's end. A release here made thread 0 wait for every store of its block to drain
/// before the count's round trip started; now the two overlap.
template <class TeamT>
WEFT_HOST_DEVICE_INLINE void finishOneShot(const TeamT& team, OneShotState* state, uint64_t counter) {
  team.blockSync();
  if (team.threadId != 0) return;
  if (team.numBlocks > 1) {
    const uint32_t before = atomicFetchAdd<MemoryOrder::kRelaxed, Scope::kDevice>(&state->done, 1u);
    if (before != team.numBlocks - 1) return;
    atomicStore<MemoryOrder::kRelaxed, Scope::kDevice>(&state->done, 0u);
  }
  atomicStore<MemoryOrder::kRelaxed, Scope::kDevice>(&state->counter, counter + 1);
}

/// Element `e` of a packet payload viewed as an array of T.
template <class T>
WEFT_HOST_DEVICE_INLINE T payloadElement(uint64_t payload, uint32_t e) {
  T v;
  memcpy(&v, reinterpret_cast<const uint8_t*>(&payload) + e * sizeof(T), sizeof(T));
  return v;
}

/// Packets j = j0 + u * stride (u < U) of `src` that lie below `count`, written under `flag` by rank `peer`: every
/// load is issued first, then the packets not there yet are polled in one loop within the budget (a timeout names the
/// peer). payload[u] is 0 past `count`. One wait loop for all U packets keeps the unrolled kernels small.
template <uint32_t U>
WEFT_HOST_DEVICE_INLINE void readPacketRound(const OneShotArgs& a, uint64_t peer, const LL16Packet* src, uint32_t flag,
                                             uint64_t count, uint64_t j0, uint64_t stride, uint64_t (&payload)[U]) {
  bool ready[U];
  bool all = true;
  uint32_t seen = 0;
  for (uint32_t u = 0; u < U; ++u) {
    const uint64_t j = j0 + u * stride;
    payload[u] = 0;
    ready[u] = j >= count || LL16Packet::tryLoad(src + j, flag, payload[u], seen);
    all = all && ready[u];
  }
  if (all) return;
  const bool arrived = spinWaitUntil(
      [&] {
        bool done = true;
        for (uint32_t u = 0; u < U; ++u) {
          if (!ready[u]) ready[u] = LL16Packet::tryLoad(src + j0 + u * stride, flag, payload[u], seen);
          done = done && ready[u];
        }
        return done;
      },
      WaitBudget{a.ctx.budgetNs});
  if (!arrived) {
    reportWaitTimeout(WaitSite{a.ctx.record, a.ctx.rank, static_cast<int32_t>(peer), a.kind}, WaitOp::kPacketRead, flag,
                      seen, a.ctx.budgetNs);
  }
}

/// The reduction step of the LL16 paths: packets j = j0 + u * stride (u < U) of one share of `bytes`
/// bytes, reduced in rank order 0..n-1 exactly as reduceOrdered does: this rank's own bytes from `own`, peer p's
/// from packet `slotPacket + j` of slot (parity, p) of this rank's packet buffer, waiting for `flag` within the
/// budget (a timeout names the peer). out[u] gets the finished payload (the op's last step applied, NaNs canonical);
/// 0 where j is past the share.
template <class T, uint32_t U>
WEFT_HOST_DEVICE_INLINE void reduceSharePackets(const OneShotArgs& a, uint64_t parity, uint32_t flag,
                                                const uint8_t* own, uint64_t bytes, uint64_t slotPacket, uint64_t j0,
                                                uint64_t stride, uint64_t (&out)[U]) {
  using Traits = ReduceTraits<T>;
  using Acc = typename Traits::Acc;
  constexpr uint32_t kPer = LL16Packet::kPayloadBytes / sizeof(T);  // elements per packet
  static_assert(kPer >= 1 && LL16Packet::kPayloadBytes % sizeof(T) == 0);
  const CollectiveContext& ctx = a.ctx;
  const uint64_t n = static_cast<uint64_t>(ctx.size);
  const uint64_t rank = static_cast<uint64_t>(ctx.rank);
  const uint64_t packets = packetCount<LL16Packet>(bytes);
  Acc acc[U][kPer];
  for (uint64_t p = 0; p < n; ++p) {
    uint64_t payload[U];
    if (p == rank) {
      for (uint32_t u = 0; u < U; ++u) {
        const uint64_t j = j0 + u * stride;
        payload[u] = j < packets ? detail::loadPayload<LL16Packet>(own + j * 8, bytes - j * 8) : 0;
      }
    } else {
      const auto* src =
          reinterpret_cast<const LL16Packet*>(a.packets[rank] + (parity * n + p) * a.slotBytes) + slotPacket;
      readPacketRound<U>(a, p, src, flag, packets, j0, stride, payload);
    }
    for (uint32_t u = 0; u < U; ++u) {
      for (uint32_t e = 0; e < kPer; ++e) {
        const Acc v = Traits::load(payloadElement<T>(payload[u], e));
        acc[u][e] = p == 0 ? v : reduceCombine(a.op, acc[u][e], v);
      }
    }
  }
  for (uint32_t u = 0; u < U; ++u) {
    out[u] = 0;
    if (j0 + u * stride >= packets) continue;
    for (uint32_t e = 0; e < kPer; ++e) {
      const T v = Traits::store(canonicalNan(reduceFinish(a.op, acc[u][e], ctx.size)));
      memcpy(reinterpret_cast<uint8_t*>(&out[u]) + e * sizeof(T), &v, sizeof(T));
    }
  }
}

/// One-shot allreduce of a.count elements (at most slotBytes / 2 bytes). Every worker, for its packets j
/// (j = flatId, flatId + flatCount, ...): loads 8 bytes of send, stores them as an LL16 packet under this launch's
/// flag into slot (parity, rank) of every peer's packet buffer; then, for the same j, reduces in rank order
/// 0..n-1 (its own bytes from send, peer p's from slot (parity, p) of its own buffer, waiting for each flag
/// within the budget; a timeout names the peer) exactly as reduceOrdered does, and writes recv. The same worker
/// reads and writes the bytes of packet j, so send == recv is safe.
///
/// With a.root >= 0 it is a one-shot reduce: every rank reduces, only the root writes recv (the others leave theirs
/// untouched).
///
/// With a.sendStride != 0 it is a one-shot reduceScatter: peer p gets the a.count elements at send + p * sendStride
/// and this rank reduces its own (send + rank * sendStride, which in place is recv) with what every peer sent it.
///
/// Why two parities are enough: a rank starts launch k + 2, which overwrites parity k & 1 in its peers, only after
/// its launch k + 1 read every peer's packets of launch k + 1; a peer writes those only in its launch k + 1,
/// which starts after its launch k (the reader of parity k & 1) has finished.
template <class T, uint32_t U = kOneShotUnroll, class TeamT>
WEFT_HOST_DEVICE void allReduceOneShot(const TeamT& team, const OneShotArgs& a) {
  const CollectiveContext& ctx = a.ctx;
  const OneShotEpoch epoch = readEpoch(*a.state);
  const uint64_t parity = epoch.parity;
  const uint32_t flag = epoch.flag;
  const uint64_t bytes = a.count * sizeof(T);
  const uint64_t packets = packetCount<LL16Packet>(bytes);
  const uint64_t n = static_cast<uint64_t>(ctx.size);
  const uint64_t rank = static_cast<uint64_t>(ctx.rank);
  const uint64_t stride = team.flatCount();
  const uint64_t round = stride * U;

  // Puts: this rank's packets into slot (parity, rank) of every peer.
  for (uint64_t j0 = team.flatId(); j0 < packets; j0 += round) {
    uint64_t payload[U];
    bool loaded = false;
    for (uint64_t p = 0; p < n; ++p) {
      if (p == rank) continue;
      if (!loaded || a.sendStride != 0) {
        const uint8_t* src = a.send + p * a.sendStride;
        for (uint32_t u = 0; u < U; ++u) {
          const uint64_t j = j0 + u * stride;
          payload[u] = j < packets ? detail::loadPayload<LL16Packet>(src + j * 8, bytes - j * 8) : 0;
        }
        loaded = true;
      }
      auto* dst = reinterpret_cast<LL16Packet*>(a.packets[p] + (parity * n + rank) * a.slotBytes);
      for (uint32_t u = 0; u < U; ++u) {
        const uint64_t j = j0 + u * stride;
        if (j < packets) LL16Packet::store(dst + j, payload[u], flag);
      }
    }
  }

  // Reduction in rank order (a reduce: only the root writes recv).
  const bool writesRecv = a.root < 0 || rank == static_cast<uint64_t>(a.root);
  const uint8_t* own = a.send + rank * a.sendStride;
  for (uint64_t j0 = team.flatId(); j0 < packets; j0 += round) {
    uint64_t out[U];
    reduceSharePackets<T, U>(a, parity, flag, own, bytes, 0, j0, stride, out);
    for (uint32_t u = 0; u < U; ++u) {
      const uint64_t j = j0 + u * stride;
      if (j >= packets || !writesRecv) break;
      detail::storePayload<LL16Packet>(a.recv + j * 8, out[u], bytes - j * 8);
    }
  }

  finishOneShot(team, a.state, epoch.counter);
}

/// allGather, one-shot LL16: the put phase of allReduceOneShot (this rank's `count` bytes as packets into slot
/// (parity, rank) of every peer), then every peer's packets out of this rank's slots into recv + p * recvStride,
/// and this rank's own bytes from send into recv + rank * recvStride (skipped in place). It shares the packet
/// buffers and the epoch with the one-shot allreduce: every launch of either reads every peer's packets, which is
/// what the two-parity argument above needs. `a.count` is in bytes here.
///
/// With a.sendStride != 0 it is a one-shot allToAll: peer p gets the `count` bytes at send + p * sendStride, and this
/// rank's own block goes from send + rank * sendStride to recv + rank * recvStride. In place (send == recv, equal
/// strides) is safe: the worker of packet j reads packet j of every block before it writes any.
///
/// With a.root >= 0 (and recvStride 0) it is a one-shot broadcast: the root's packets go to every peer, which copies
/// them into recv; every other rank publishes a single token packet, so that every launch still reads a packet of
/// every peer (the two-parity argument).
template <uint32_t U = kOneShotUnroll, class TeamT>
WEFT_HOST_DEVICE void allGatherOneShot(const TeamT& team, const OneShotArgs& a, uint64_t recvStride) {
  const CollectiveContext& ctx = a.ctx;
  const OneShotEpoch epoch = readEpoch(*a.state);
  const uint64_t parity = epoch.parity;
  const uint32_t flag = epoch.flag;
  const uint64_t bytes = a.count;
  const uint64_t packets = packetCount<LL16Packet>(bytes);
  const uint64_t n = static_cast<uint64_t>(ctx.size);
  const uint64_t rank = static_cast<uint64_t>(ctx.rank);
  const uint64_t stride = team.flatCount();
  const uint64_t round = stride * U;

  const bool rooted = a.root >= 0;
  const bool sender = !rooted || rank == static_cast<uint64_t>(a.root);  // this launch carries this rank's data
  // Packets rank p publishes: its data, or one token when the launch carries only the root's.
  auto publishedBy = [&](uint64_t p) { return !rooted || p == static_cast<uint64_t>(a.root) ? packets : uint64_t{1}; };

  for (uint64_t j0 = team.flatId(); j0 < packets; j0 += round) {
    uint64_t payload[U] = {};
    bool loaded = false;  // payload holds a block of send (the only one when sendStride is 0)
    auto load = [&](uint64_t block) {
      if ((loaded && a.sendStride == 0) || !sender) return;
      for (uint32_t u = 0; u < U; ++u) {
        const uint64_t j = j0 + u * stride;
        payload[u] =
            j < packets ? detail::loadPayload<LL16Packet>(a.send + block * a.sendStride + j * 8, bytes - j * 8) : 0;
      }
      loaded = true;
    };
    for (uint64_t p = 0; p < n; ++p) {
      if (p == rank) continue;
      load(p);
      auto* dst = reinterpret_cast<LL16Packet*>(a.packets[p] + (parity * n + rank) * a.slotBytes);
      for (uint32_t u = 0; u < U; ++u) {
        const uint64_t j = j0 + u * stride;
        if (j < publishedBy(rank)) LL16Packet::store(dst + j, payload[u], flag);
      }
    }
    uint8_t* own = a.recv + rank * recvStride;
    if (sender && own != a.send + rank * a.sendStride) {
      load(rank);
      for (uint32_t u = 0; u < U; ++u) {
        const uint64_t j = j0 + u * stride;
        if (j < packets) detail::storePayload<LL16Packet>(own + j * 8, payload[u], bytes - j * 8);
      }
    }
  }

  for (uint64_t p = 0; p < n; ++p) {
    if (p == rank) continue;
    const auto* src = reinterpret_cast<const LL16Packet*>(a.packets[rank] + (parity * n + p) * a.slotBytes);
    uint8_t* out = a.recv + p * recvStride;
    const uint64_t count = publishedBy(p);
    const bool data = !rooted || p == static_cast<uint64_t>(a.root);  // else a token, which carries nothing
    for (uint64_t j0 = team.flatId(); j0 < count; j0 += round) {
      uint64_t payload[U];
      readPacketRound<U>(a, p, src, flag, count, j0, stride, payload);
      for (uint32_t u = 0; u < U; ++u) {
        const uint64_t j = j0 + u * stride;
        if (j >= count || !data) break;
        detail::storePayload<LL16Packet>(out + j * 8, payload[u], bytes - j * 8);
      }
    }
  }

  finishOneShot(team, a.state, epoch.counter);
}

/// Bytes of each share of a two-shot launch of `bytes` bytes among n ranks: a multiple of the packet payload (so no
/// element straddles two shares), at least one packet.
WEFT_HOST_DEVICE_INLINE uint64_t twoShotShareBytes(uint64_t bytes, uint64_t n) {
  const uint64_t share = ((bytes + n - 1) / n + LL16Packet::kPayloadBytes - 1) / LL16Packet::kPayloadBytes;
  return (share == 0 ? 1 : share) * LL16Packet::kPayloadBytes;
}

/// Bytes of share q of a two-shot launch: [q * share, (q + 1) * share) clipped to the message (0 for the trailing
/// shares of a message shorter than n shares).
WEFT_HOST_DEVICE_INLINE uint64_t twoShotShareLength(uint64_t bytes, uint64_t share, uint64_t q) {
  const uint64_t begin = q * share;
  return begin >= bytes ? 0 : (bytes - begin < share ? bytes - begin : share);
}

/// Two-shot allreduce of a.count elements (each share at most slotBytes / 4 bytes): an LL16 reduce-scatter, then an
/// LL16 all-gather, with no rank sync and no grid barrier. Share q (twoShotShareBytes) is reduced by rank q.
/// Every worker, for its packets j (j = flatId, flatId + flatCount, ...):
///   1. stores packet j of share p of its input into the first half of slot (parity, rank) of peer p, for every peer;
///   2. reduces packet j of its own share in rank order (reduceSharePackets: own bytes from send, peer p's from the
///      first half of slot (parity, p)), writes it into recv and stores it into the second half of slot
///      (parity, rank) of every peer;
///   3. copies packet j of every peer p's reduced share out of the second half of slot (parity, p) into recv.
/// Each rank writes 4(n-1)/n times the message in packets where the one-shot writes 2(n-1) times it, at the price of
/// a second packet latency: the path for mid-sized messages among more than two ranks.
///
/// In place is safe: a worker reads every share's packet j (steps 1 and 2) before it writes any of them (2 and 3),
/// and no other worker touches packet j. The two-parity argument of allReduceOneShot needs every launch to read a
/// packet of every peer: a rank whose share is empty (a message shorter than n packets) still publishes one packet
/// in step 2, which its peers read and drop.
template <class T, uint32_t U = kOneShotUnroll, class TeamT>
WEFT_HOST_DEVICE void allReduceTwoShot(const TeamT& team, const OneShotArgs& a) {
  const CollectiveContext& ctx = a.ctx;
  const OneShotEpoch epoch = readEpoch(*a.state);
  const uint64_t parity = epoch.parity;
  const uint32_t flag = epoch.flag;
  const uint64_t bytes = a.count * sizeof(T);
  const uint64_t n = static_cast<uint64_t>(ctx.size);
  const uint64_t rank = static_cast<uint64_t>(ctx.rank);
  const uint64_t share = twoShotShareBytes(bytes, n);
  const uint64_t half = share / LL16Packet::kPayloadBytes;  // packets of the first half of a slot
  const uint64_t stride = team.flatCount();
  const uint64_t round = stride * U;
  auto slotOf = [&](uint64_t owner, uint64_t source) {
    return reinterpret_cast<LL16Packet*>(a.packets[owner] + (parity * n + source) * a.slotBytes);
  };
  // Packets a share publishes in step 2: its own, and at least one.
  auto published = [&](uint64_t q) {
    const uint64_t c = packetCount<LL16Packet>(twoShotShareLength(bytes, share, q));
    return c == 0 ? uint64_t{1} : c;
  };

  // 1. Reduce-scatter puts: share p of this rank's input into the first half of slot (parity, rank) of peer p.
  for (uint64_t j0 = team.flatId(); j0 < half; j0 += round) {
    for (uint64_t p = 0; p < n; ++p) {
      if (p == rank) continue;
      const uint64_t len = twoShotShareLength(bytes, share, p);
      const uint64_t packets = packetCount<LL16Packet>(len);
      const uint8_t* src = a.send + p * share;
      uint64_t payload[U];
      for (uint32_t u = 0; u < U; ++u) {
        const uint64_t j = j0 + u * stride;
        payload[u] = j < packets ? detail::loadPayload<LL16Packet>(src + j * 8, len - j * 8) : 0;
      }
      LL16Packet* dst = slotOf(p, rank);
      for (uint32_t u = 0; u < U; ++u) {
        const uint64_t j = j0 + u * stride;
        if (j < packets) LL16Packet::store(dst + j, payload[u], flag);
      }
    }
  }

  // 2. This rank's share: reduced, into recv and into the second half of slot (parity, rank) of every peer.
  const uint64_t mine = twoShotShareLength(bytes, share, rank);
  const uint64_t minePackets = packetCount<LL16Packet>(mine);
  for (uint64_t j0 = team.flatId(); j0 < published(rank); j0 += round) {
    uint64_t out[U];
    reduceSharePackets<T, U>(a, parity, flag, a.send + rank * share, mine, 0, j0, stride, out);
    for (uint32_t u = 0; u < U; ++u) {
      const uint64_t j = j0 + u * stride;
      if (j < minePackets) detail::storePayload<LL16Packet>(a.recv + rank * share + j * 8, out[u], mine - j * 8);
    }
    for (uint64_t p = 0; p < n; ++p) {
      if (p == rank) continue;
      LL16Packet* dst = slotOf(p, rank) + half;
      for (uint32_t u = 0; u < U; ++u) {
        const uint64_t j = j0 + u * stride;
        if (j < published(rank)) LL16Packet::store(dst + j, out[u], flag);
      }
    }
  }

  // 3. Every peer's reduced share, out of the second half of slot (parity, p) into recv.
  for (uint64_t p = 0; p < n; ++p) {
    if (p == rank) continue;
    const uint64_t len = twoShotShareLength(bytes, share, p);
    const uint64_t count = published(p);
    const LL16Packet* src = slotOf(rank, p) + half;
    for (uint64_t j0 = team.flatId(); j0 < count; j0 += round) {
      uint64_t payload[U];
      readPacketRound<U>(a, p, src, flag, count, j0, stride, payload);
      for (uint32_t u = 0; u < U; ++u) {
        const uint64_t j = j0 + u * stride;
        if (j < count && j * 8 < len) {
          detail::storePayload<LL16Packet>(a.recv + p * share + j * 8, payload[u], len - j * 8);
        }
      }
    }
  }

  finishOneShot(team, a.state, epoch.counter);
}

/// reduceScatter: per piece of the per-rank count, stage share q of the piece into scratch region q (n regions);
/// sync; rank r reduces region r of every rank into recv; sync.
/// reduceScatter on registered buffers, after exchangeOffers found every rank's send and recv mapped: this rank
/// reduces share `rank` of every rank's send straight into its recv, then finishZeroCopy (nobody reads this rank's
/// send once the kernel ends). In place (recv = share `rank` of send) is safe: element i of it is read and then
/// written by the same worker, and no peer reads that share.
template <class T, class TeamT>
WEFT_HOST_DEVICE void reduceScatterZeroCopy(const TeamT& team, const CollectiveArgs& a) {
  const CollectiveContext& ctx = a.ctx;
  const uint64_t share = static_cast<uint64_t>(ctx.rank) * a.count;
  reduceRange<T>(
      team, ctx, a.op, a.count, [&](int p) { return reinterpret_cast<const T*>(offeredSend(a, p)) + share; },
      reinterpret_cast<T*>(a.recv), static_cast<T*>(nullptr));
  finishZeroCopy(team, ctx, a.kind);
}

template <class T, class TeamT>
WEFT_HOST_DEVICE void reduceScatterSteps(const TeamT& team, const CollectiveArgs& a) {
  if (a.offers != 0 && exchangeOffers(team, a)) {
    reduceScatterZeroCopy<T>(team, a);
    return;
  }
  const CollectiveContext& ctx = a.ctx;
  const uint64_t region = regionBytes(ctx.scratchBytes, static_cast<uint64_t>(ctx.size));
  const uint64_t pieceMax = elementsIn<T>(region);
  const auto* send = reinterpret_cast<const T*>(a.send);
  auto* recv = reinterpret_cast<T*>(a.recv);
  uint8_t* mine = ctx.peers[ctx.rank].scratch;
  for (uint64_t start = 0; start < a.count; start += pieceMax) {
    const uint64_t c = minU64(pieceMax, a.count - start);
    for (int32_t q = 0; q < ctx.size; ++q) {
      copyCooperative(mine + region * static_cast<uint64_t>(q), send + static_cast<uint64_t>(q) * a.count + start,
                      c * sizeof(T), team.flatId(), team.flatCount());
    }
    rankSyncAll(team, ctx, a.kind);
    reduceFromScratch<T>(team, ctx, a.op, region * static_cast<uint64_t>(ctx.rank), c, recv + start,
                         static_cast<T*>(nullptr));
    rankSyncAll(team, ctx, a.kind);
  }
}

/// reduce on registered buffers, after exchangeOffers found every rank's send and the root's recv mapped: rank q
/// reduces share q of every rank's send straight into the root's recv, so every rank's workers take part, not the
/// root's alone; then finishZeroCopy. In place on the root is safe for the reason allReduceZeroCopy gives.
template <class T, class TeamT>
WEFT_HOST_DEVICE void reduceZeroCopy(const TeamT& team, const CollectiveArgs& a) {
  const CollectiveContext& ctx = a.ctx;
  const uint64_t n = static_cast<uint64_t>(ctx.size);
  const uint64_t rank = static_cast<uint64_t>(ctx.rank);
  const uint64_t lo = shareStart<T>(a.count, rank, n);
  const uint64_t hi = shareStart<T>(a.count, rank + 1, n);
  reduceRange<T>(
      team, ctx, a.op, hi - lo, [&](int p) { return reinterpret_cast<const T*>(offeredSend(a, p)) + lo; },
      reinterpret_cast<T*>(offeredRecv(a, a.root)) + lo, static_cast<T*>(nullptr));
  finishZeroCopy(team, ctx, a.kind);
}

/// reduce: per piece, stage; sync; the root reduces every rank's scratch into recv; sync.
template <class T, class TeamT>
WEFT_HOST_DEVICE void reduceSteps(const TeamT& team, const CollectiveArgs& a) {
  if (a.offers != 0 && exchangeOffers(team, a)) {
    reduceZeroCopy<T>(team, a);
    return;
  }
  const CollectiveContext& ctx = a.ctx;
  const uint64_t pieceMax = elementsIn<T>(regionBytes(ctx.scratchBytes, 1));
  const auto* send = reinterpret_cast<const T*>(a.send);
  auto* recv = reinterpret_cast<T*>(a.recv);
  uint8_t* mine = ctx.peers[ctx.rank].scratch;
  for (uint64_t start = 0; start < a.count; start += pieceMax) {
    const uint64_t c = minU64(pieceMax, a.count - start);
    copyCooperative(mine, send + start, c * sizeof(T), team.flatId(), team.flatCount());
    rankSyncAll(team, ctx, a.kind);
    if (ctx.rank == a.root) reduceFromScratch<T>(team, ctx, a.op, 0, c, recv + start, static_cast<T*>(nullptr));
    rankSyncAll(team, ctx, a.kind);
  }
}

/// allGather on registered sends: this rank copies every rank's send straight into its place in recv (each rank
/// starting at its own, so that the ranks read different peers at a time), then finishZeroCopy (nobody reads this
/// rank's send once the kernel ends). In place, this rank's own place already holds its send; the peers read only
/// that place, which nobody writes.
template <class TeamT>
WEFT_HOST_DEVICE void allGatherZeroCopy(const TeamT& team, const CollectiveArgs& a, uint64_t elementBytes) {
  const CollectiveContext& ctx = a.ctx;
  const uint64_t total = a.count * elementBytes;
  for (int32_t i = 0; i < ctx.size; ++i) {
    const int32_t p = (ctx.rank + i) % ctx.size;
    uint8_t* to = a.recv + static_cast<uint64_t>(p) * total;
    const uint8_t* from = offeredSend(a, p);
    if (to != from) copyCooperative(to, from, total, team.flatId(), team.flatCount());
  }
  finishZeroCopy(team, ctx, a.kind);
}

/// allGather: per piece (bytes), stage; sync; copy every rank's piece into its place in recv; sync.
template <class TeamT>
WEFT_HOST_DEVICE void allGatherSteps(const TeamT& team, const CollectiveArgs& a, uint64_t elementBytes) {
  if (a.offers != 0 && exchangeOffers(team, a)) {
    allGatherZeroCopy(team, a, elementBytes);
    return;
  }
  const CollectiveContext& ctx = a.ctx;
  const uint64_t pieceMax = regionBytes(ctx.scratchBytes, 1) / elementBytes * elementBytes;
  const uint64_t total = a.count * elementBytes;
  uint8_t* mine = ctx.peers[ctx.rank].scratch;
  for (uint64_t start = 0; start < total; start += pieceMax) {
    const uint64_t c = minU64(pieceMax, total - start);
    copyCooperative(mine, a.send + start, c, team.flatId(), team.flatCount());
    rankSyncAll(team, ctx, a.kind);
    for (int32_t p = 0; p < ctx.size; ++p) {
      copyCooperative(a.recv + static_cast<uint64_t>(p) * total + start, ctx.peers[p].scratch, c, team.flatId(),
                      team.flatCount());
    }
    rankSyncAll(team, ctx, a.kind);
  }
}

/// broadcast from a registered send on the root: every rank copies it straight into its recv, then finishZeroCopy
/// (nobody reads the root's send once the kernel ends).
template <class TeamT>
WEFT_HOST_DEVICE void broadcastZeroCopy(const TeamT& team, const CollectiveArgs& a, uint64_t elementBytes) {
  const uint8_t* from = offeredSend(a, a.root);
  if (a.recv != from) copyCooperative(a.recv, from, a.count * elementBytes, team.flatId(), team.flatCount());
  finishZeroCopy(team, a.ctx, a.kind);
}

/// broadcast: per piece, the root stages; sync; every rank copies the root's scratch into recv; sync.
template <class TeamT>
WEFT_HOST_DEVICE void broadcastSteps(const TeamT& team, const CollectiveArgs& a, uint64_t elementBytes) {
  if (a.offers != 0 && exchangeOffers(team, a)) {
    broadcastZeroCopy(team, a, elementBytes);
    return;
  }
  const CollectiveContext& ctx = a.ctx;
  const uint64_t pieceMax = regionBytes(ctx.scratchBytes, 1) / elementBytes * elementBytes;
  const uint64_t total = a.count * elementBytes;
  for (uint64_t start = 0; start < total; start += pieceMax) {
    const uint64_t c = minU64(pieceMax, total - start);
    if (ctx.rank == a.root)
      copyCooperative(ctx.peers[ctx.rank].scratch, a.send + start, c, team.flatId(), team.flatCount());
    rankSyncAll(team, ctx, a.kind);
    copyCooperative(a.recv + start, ctx.peers[a.root].scratch, c, team.flatId(), team.flatCount());
    rankSyncAll(team, ctx, a.kind);
  }
}

/// Bytes of the send (isSend) or receive stream between this rank and `peer`: the group's entries for that peer
/// and direction, concatenated in order.
WEFT_HOST_DEVICE_INLINE uint64_t groupStreamBytes(const CollectiveArgs& a, int32_t peer, uint32_t isSend) {
  uint64_t bytes = 0;
  for (uint32_t e = 0; e < a.groupCount; ++e) {
    if (a.group[e].peer == peer && a.group[e].isSend == isSend) bytes += a.group[e].bytes;
  }
  return bytes;
}

/// Copies bytes [from, from + len) of a stream: out of the entries into `flat` (isSend) or from `flat` into the
/// entries (receives).
template <class TeamT>
WEFT_HOST_DEVICE void copyStreamRange(const TeamT& team, const CollectiveArgs& a, int32_t peer, uint32_t isSend,
                                      uint64_t from, uint64_t len, uint8_t* flat) {
  uint64_t offset = 0;  // stream offset of the current entry
  for (uint32_t e = 0; e < a.groupCount && offset < from + len; ++e) {
    const GroupEntry& g = a.group[e];
    if (g.peer != peer || g.isSend != isSend) continue;
    const uint64_t lo = offset > from ? offset : from;
    const uint64_t hi = minU64(offset + g.bytes, from + len);
    if (lo < hi) {
      uint8_t* entryPart = g.buffer + (lo - offset);
      uint8_t* flatPart = flat + (lo - from);
      if (isSend) {
        copyCooperative(flatPart, entryPart, hi - lo, team.flatId(), team.flatCount());
      } else {
        copyCooperative(entryPart, flatPart, hi - lo, team.flatId(), team.flatCount());
      }
    }
    offset += g.bytes;
  }
}

/// Rounds of the pair (this rank, peer): both ranks compute the same number, since this rank's send stream is the
/// peer's receive stream and the other way round.
WEFT_HOST_DEVICE_INLINE uint64_t pairRounds(const CollectiveArgs& a, int32_t peer, uint64_t slot) {
  const uint64_t out = groupStreamBytes(a, peer, 1);
  const uint64_t in = groupStreamBytes(a, peer, 0);
  const uint64_t most = out > in ? out : in;
  return (most + slot - 1) / slot;
}

/// sendRecv (and allToAll, allToAllV): scratch is cut into one slot per destination rank. Round k: stage bytes
/// [k * slot, (k + 1) * slot) of the send stream to peer p in slot p of this rank's scratch, for every p; sync with
/// the peers still active in round k; copy the same range of the receive stream from p out of slot `rank` of p's
/// scratch; sync again. Only the ranks of a pair take part in its syncs, so ranks outside a group are not involved.
template <class TeamT>
WEFT_HOST_DEVICE void groupSteps(const TeamT& team, const CollectiveArgs& a) {
  const CollectiveContext& ctx = a.ctx;
  const uint64_t slot = regionBytes(ctx.scratchBytes, static_cast<uint64_t>(ctx.size));
  uint64_t rounds = 0;
  for (int32_t p = 0; p < ctx.size; ++p) {
    const uint64_t r = pairRounds(a, p, slot);
    rounds = r > rounds ? r : rounds;
  }
  uint8_t* mine = ctx.peers[ctx.rank].scratch;
  for (uint64_t k = 0; k < rounds; ++k) {
    const uint64_t from = k * slot;
    auto active = [&](int32_t p) { return pairRounds(a, p, slot) > k; };
    for (int32_t p = 0; p < ctx.size; ++p) {
      const uint64_t out = groupStreamBytes(a, p, 1);
      if (out > from) copyStreamRange(team, a, p, 1, from, minU64(slot, out - from), mine + slot * p);
    }
    rankSync(team, ctx, a.kind, active);
    for (int32_t p = 0; p < ctx.size; ++p) {
      const uint64_t in = groupStreamBytes(a, p, 0);
      if (in > from) {
        copyStreamRange(team, a, p, 0, from, minU64(slot, in - from),
                        ctx.peers[p].scratch + slot * static_cast<uint64_t>(ctx.rank));
      }
    }
    rankSync(team, ctx, a.kind, active);
  }
}

/// allToAll on registered sends (never in place: a rank whose buffers overlap offers no registration): this rank
/// copies block `rank` of every rank's send straight into block p of its recv, then finishZeroCopy.
template <class TeamT>
WEFT_HOST_DEVICE void allToAllZeroCopy(const TeamT& team, const CollectiveArgs& a, uint64_t elementBytes) {
  const CollectiveContext& ctx = a.ctx;
  const uint64_t bytes = a.count * elementBytes;
  for (int32_t i = 0; i < ctx.size; ++i) {
    const int32_t p = (ctx.rank + i) % ctx.size;
    copyCooperative(a.recv + static_cast<uint64_t>(p) * bytes,
                    offeredSend(a, p) + static_cast<uint64_t>(ctx.rank) * bytes, bytes, team.flatId(),
                    team.flatCount());
  }
  finishZeroCopy(team, ctx, a.kind);
}

/// Runs the reducing collectives for element type T.
template <class T, class TeamT>
WEFT_HOST_DEVICE void runReducing(const TeamT& team, const CollectiveArgs& a) {
  switch (static_cast<CollectiveKind>(a.kind)) {
    case CollectiveKind::kAllReduce: allReduceSteps<T>(team, a); break;
    case CollectiveKind::kReduceScatter: reduceScatterSteps<T>(team, a); break;
    case CollectiveKind::kReduce: reduceSteps<T>(team, a); break;
    default: break;
  }
}

/// Runs the collectives that move bytes only (elementBytes: the element size, so pieces hold whole elements).
template <class TeamT>
WEFT_HOST_DEVICE void runMoving(const TeamT& team, const CollectiveArgs& a, uint64_t elementBytes) {
  switch (static_cast<CollectiveKind>(a.kind)) {
    case CollectiveKind::kAllGather: allGatherSteps(team, a, elementBytes); break;
    case CollectiveKind::kBroadcast: broadcastSteps(team, a, elementBytes); break;
    case CollectiveKind::kAllToAll:
      if (a.offers != 0 && exchangeOffers(team, a)) {
        allToAllZeroCopy(team, a, elementBytes);
      } else {
        groupSteps(team, a);
      }
      break;
    case CollectiveKind::kAllToAllV:
    case CollectiveKind::kSendRecv: groupSteps(team, a); break;
    default: break;
  }
}

}  // namespace weft::detail
