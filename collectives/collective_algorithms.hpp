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
};

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
  int32_t rank;
  int32_t size;
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

/// Grid barrier, called by one thread per block after a block barrier. Its wait has twice the semaphores' budget:
/// while block 0 waits for a peer the other blocks wait here, and the peer wait must be the one that runs out
/// first and is recorded (it names the peer). The fetch-add is acq_rel at system
/// scope, so the stores of every block (including the ones they made to mapped peer memory) happen before the
/// release of the last arriver, and every waiter's acquire of the new generation makes them visible to it.
WEFT_HOST_DEVICE_INLINE void gridBarrierOneThread(const CollectiveContext& ctx, uint32_t numBlocks, int32_t kind) {
  if (numBlocks == 1) return;
  GridBarrierState* s = ctx.barrier;
  const uint32_t generation = atomicLoad<MemoryOrder::kAcquire>(&s->generation);
  const uint32_t before = atomicFetchAdd<MemoryOrder::kAcqRel>(&s->arrived, 1u);
  if (before == numBlocks - 1) {
    atomicStore<MemoryOrder::kRelaxed>(&s->arrived, 0u);
    atomicStore<MemoryOrder::kRelease>(&s->generation, generation + 1);
    return;
  }
  uint32_t seen = generation;
  bool aborted = false;
  const bool ok = spinWaitUntil(
      [&] {
        seen = atomicLoad<MemoryOrder::kAcquire>(&s->generation);
        aborted = atomicLoad<MemoryOrder::kRelaxed>(&s->abort) != 0;
        return seen != generation || aborted;
      },
      WaitBudget{2 * ctx.budgetNs});
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

/// dst[i] = reduce over ranks of src_p[i], i < count, where src_p = peer p's scratch + offset (rank order).
template <class T, class TeamT>
WEFT_HOST_DEVICE_INLINE void reduceFromScratch(const TeamT& team, const CollectiveContext& ctx, ReduceOp op,
                                               uint64_t scratchOffset, uint64_t count, T* dst, T* dst2) {
  const uint64_t stride = team.flatCount();
  for (uint64_t i = team.flatId(); i < count; i += stride) {
    const T v = reduceOrdered<T>(
        op, ctx.size, [&](int p) { return reinterpret_cast<const T*>(ctx.peers[p].scratch + scratchOffset)[i]; });
    dst[i] = v;
    if (dst2 != nullptr) dst2[i] = v;
  }
}

// ---- the collectives --------------------------------------------------------------------------------------------

/// allReduce (scatter-gather): per piece, stage every share but this rank's own into the "in" half of scratch;
/// sync; rank r reduces its share (1/n of the piece) from every peer's "in" half and its own send buffer into its
/// "out" half and recv; sync; every rank copies every other share from its owner's "out" half into recv. The next
/// piece needs no sync in between: its staging writes the "in" half, which peers finished reading before the
/// second sync, and its reduction writes the "out" half only after its first sync, which no peer reaches before it
/// has copied out of this rank's "out" half. One sync after the last piece makes the scratch free for the next
/// operation.
template <class T, class TeamT>
WEFT_HOST_DEVICE void allReduceSteps(const TeamT& team, const CollectiveArgs& a) {
  const CollectiveContext& ctx = a.ctx;
  const uint64_t half = regionBytes(ctx.scratchBytes, 2);
  const uint64_t pieceMax = elementsIn<T>(half);
  const auto* send = reinterpret_cast<const T*>(a.send);
  auto* recv = reinterpret_cast<T*>(a.recv);
  const uint64_t n = static_cast<uint64_t>(ctx.size);
  uint8_t* mine = ctx.peers[ctx.rank].scratch;
  const uint64_t stride = team.flatCount();
  for (uint64_t start = 0; start < a.count; start += pieceMax) {
    const uint64_t c = minU64(pieceMax, a.count - start);
    const uint64_t lo = c * static_cast<uint64_t>(ctx.rank) / n;
    const uint64_t hi = c * static_cast<uint64_t>(ctx.rank + 1) / n;
    // Peers never read this rank's own share from scratch: it is reduced straight from send.
    copyCooperative(mine, send + start, lo * sizeof(T), team.flatId(), team.flatCount());
    copyCooperative(mine + hi * sizeof(T), send + start + hi, (c - hi) * sizeof(T), team.flatId(), team.flatCount());
    rankSyncAll(team, ctx, a.kind);
    T* out = reinterpret_cast<T*>(mine + half);
    for (uint64_t i = team.flatId(); i < hi - lo; i += stride) {
      const uint64_t e = lo + i;
      // Element e of send is read before recv's element e is written, by the same worker: in-place is safe.
      const T v = reduceOrdered<T>(a.op, ctx.size, [&](int p) {
        return p == ctx.rank ? send[start + e] : reinterpret_cast<const T*>(ctx.peers[p].scratch)[e];
      });
      out[e] = v;
      recv[start + e] = v;
    }
    rankSyncAll(team, ctx, a.kind);
    for (int32_t p = 0; p < ctx.size; ++p) {
      if (p == ctx.rank) continue;
      const uint64_t plo = c * static_cast<uint64_t>(p) / n;
      const uint64_t phi = c * static_cast<uint64_t>(p + 1) / n;
      copyCooperative(recv + start + plo, ctx.peers[p].scratch + half + plo * sizeof(T), (phi - plo) * sizeof(T),
                      team.flatId(), team.flatCount());
    }
  }
  rankSyncAll(team, ctx, a.kind);
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
  uint64_t count;  ///< elements of this launch
  const uint8_t* send;
  uint8_t* recv;
  uint8_t* packets[kOneShotMaxRanks];  ///< every rank's packet buffer, mapped ([rank]: this rank's own)
};
static_assert(std::is_trivially_copyable_v<OneShotArgs>);

/// Element `e` of a packet payload viewed as an array of T.
template <class T>
WEFT_HOST_DEVICE_INLINE T payloadElement(uint64_t payload, uint32_t e) {
  T v;
  memcpy(&v, reinterpret_cast<const uint8_t*>(&payload) + e * sizeof(T), sizeof(T));
  return v;
}

/// One-shot allreduce of a.count elements (at most slotBytes / 2 bytes). Every worker, for its packets j
/// (j = flatId, flatId + flatCount, ...): loads 8 bytes of send, stores them as an LL16 packet under this launch's
/// flag into slot (parity, rank) of every peer's packet buffer; then, for the same j, reduces in rank order
/// 0..n-1 (its own bytes from send, peer p's from slot (parity, p) of its own buffer, waiting for each flag
/// within the budget; a timeout names the peer) exactly as reduceOrdered does, and writes recv. The same worker
/// reads and writes the bytes of packet j, so send == recv is safe.
///
/// Why two parities are enough: a rank starts launch k + 2, which overwrites parity k & 1 in its peers, only after
/// its launch k + 1 read every peer's packets of launch k + 1; a peer writes those only in its launch k + 1,
/// which starts after its launch k (the reader of parity k & 1) has finished.
template <class T, class TeamT>
WEFT_HOST_DEVICE void allReduceOneShot(const TeamT& team, const OneShotArgs& a) {
  using Traits = ReduceTraits<T>;
  using Acc = typename Traits::Acc;
  constexpr uint32_t kPer = LL16Packet::kPayloadBytes / sizeof(T);  // elements per packet
  static_assert(kPer >= 1 && LL16Packet::kPayloadBytes % sizeof(T) == 0);
  const CollectiveContext& ctx = a.ctx;
  const uint64_t counter = atomicLoad<MemoryOrder::kRelaxed>(&a.state->counter);
  const uint64_t parity = counter & 1u;
  const uint32_t flag = static_cast<uint32_t>(counter >> 1) + 1u;
  const uint64_t bytes = a.count * sizeof(T);
  const uint64_t packets = packetCount<LL16Packet>(bytes);
  const uint64_t n = static_cast<uint64_t>(ctx.size);
  const uint64_t rank = static_cast<uint64_t>(ctx.rank);
  const uint64_t stride = team.flatCount();
  const uint64_t round = stride * kOneShotUnroll;

  // Puts: this rank's packets into slot (parity, rank) of every peer.
  for (uint64_t j0 = team.flatId(); j0 < packets; j0 += round) {
    uint64_t payload[kOneShotUnroll];
    for (uint32_t u = 0; u < kOneShotUnroll; ++u) {
      const uint64_t j = j0 + u * stride;
      payload[u] = j < packets ? detail::loadPayload<LL16Packet>(a.send + j * 8, bytes - j * 8) : 0;
    }
    for (uint64_t p = 0; p < n; ++p) {
      if (p == rank) continue;
      auto* dst = reinterpret_cast<LL16Packet*>(a.packets[p] + (parity * n + rank) * a.slotBytes);
      for (uint32_t u = 0; u < kOneShotUnroll; ++u) {
        const uint64_t j = j0 + u * stride;
        if (j < packets) LL16Packet::store(dst + j, payload[u], flag);
      }
    }
  }

  // Reduction in rank order.
  for (uint64_t j0 = team.flatId(); j0 < packets; j0 += round) {
    Acc acc[kOneShotUnroll][kPer];
    for (uint64_t p = 0; p < n; ++p) {
      uint64_t payload[kOneShotUnroll];
      if (p == rank) {
        for (uint32_t u = 0; u < kOneShotUnroll; ++u) {
          const uint64_t j = j0 + u * stride;
          payload[u] = j < packets ? detail::loadPayload<LL16Packet>(a.send + j * 8, bytes - j * 8) : 0;
        }
      } else {
        const auto* src = reinterpret_cast<const LL16Packet*>(a.packets[rank] + (parity * n + p) * a.slotBytes);
        bool ready[kOneShotUnroll];
        for (uint32_t u = 0; u < kOneShotUnroll; ++u) {
          const uint64_t j = j0 + u * stride;
          uint32_t seen = 0;
          payload[u] = 0;
          ready[u] = j >= packets || LL16Packet::tryLoad(src + j, flag, payload[u], seen);
        }
        for (uint32_t u = 0; u < kOneShotUnroll; ++u) {
          if (!ready[u]) {
            payload[u] = readPacket(src + j0 + u * stride, flag, ctx.budgetNs,
                                    WaitSite{ctx.record, ctx.rank, static_cast<int32_t>(p), a.kind});
          }
        }
      }
      for (uint32_t u = 0; u < kOneShotUnroll; ++u) {
        for (uint32_t e = 0; e < kPer; ++e) {
          const Acc v = Traits::load(payloadElement<T>(payload[u], e));
          acc[u][e] = p == 0 ? v : reduceCombine(a.op, acc[u][e], v);
        }
      }
    }
    for (uint32_t u = 0; u < kOneShotUnroll; ++u) {
      const uint64_t j = j0 + u * stride;
      if (j >= packets) break;
      uint64_t out = 0;
      for (uint32_t e = 0; e < kPer; ++e) {
        const T v = Traits::store(canonicalNan(reduceFinish(a.op, acc[u][e], ctx.size)));
        memcpy(reinterpret_cast<uint8_t*>(&out) + e * sizeof(T), &v, sizeof(T));
      }
      detail::storePayload<LL16Packet>(a.recv + j * 8, out, bytes - j * 8);
    }
  }

  // Epoch: every worker read the counter above; the last block to get here advances it for the next launch.
  team.blockSync();
  if (team.threadId == 0) {
    const uint32_t before = atomicFetchAdd<MemoryOrder::kAcqRel>(&a.state->done, 1u);
    if (before == team.numBlocks - 1) {
      atomicStore<MemoryOrder::kRelaxed>(&a.state->done, 0u);
      atomicStore<MemoryOrder::kRelease>(&a.state->counter, counter + 1);
    }
  }
}

/// reduceScatter: per piece of the per-rank count, stage share q of the piece into scratch region q (n regions);
/// sync; rank r reduces region r of every rank into recv; sync.
template <class T, class TeamT>
WEFT_HOST_DEVICE void reduceScatterSteps(const TeamT& team, const CollectiveArgs& a) {
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

/// reduce: per piece, stage; sync; the root reduces every rank's scratch into recv; sync.
template <class T, class TeamT>
WEFT_HOST_DEVICE void reduceSteps(const TeamT& team, const CollectiveArgs& a) {
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

/// allGather: per piece (bytes), stage; sync; copy every rank's piece into its place in recv; sync.
template <class TeamT>
WEFT_HOST_DEVICE void allGatherSteps(const TeamT& team, const CollectiveArgs& a, uint64_t elementBytes) {
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

/// broadcast: per piece, the root stages; sync; every rank copies the root's scratch into recv; sync.
template <class TeamT>
WEFT_HOST_DEVICE void broadcastSteps(const TeamT& team, const CollectiveArgs& a, uint64_t elementBytes) {
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
    case CollectiveKind::kAllToAllV:
    case CollectiveKind::kSendRecv: groupSteps(team, a); break;
    default: break;
  }
}

}  // namespace weft::detail
