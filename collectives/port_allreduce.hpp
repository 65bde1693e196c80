// The copy-engine allreduce (AllReduceAlgorithm::kPort), written once for GPU kernels and host teams. The bytes
// between ranks move as PortChannel puts that the proxy turns into copy-engine copies; the team only reduces.
//
// Every rank's scratch holds three regions of `regionBytes` at the same offsets: stage (the piece of this rank's input,
// copied in before the launch), in (slot p, slotBytes long, holds rank p's part of this rank's share) and out (the
// reduced piece, at the same place as in the message; copied into recv after the launch). Per piece:
//   1. block 0, one thread per peer q: put share q of stage into slot `rank` of q's in region, with a signal; then
//      wait for q's signal (q's part of this rank's share has arrived);
//   2. grid barrier; every block reduces share `rank` from stage and every peer's slot into out; grid barrier;
//   3. block 0, one thread per peer q: put share `rank` of out into the same place of q's out region, with a signal
//      and a flush (nothing still reads out when the launch ends); then wait for q's signal (q's reduced share).
// Reuse across pieces and calls needs nothing more: a peer puts into this rank's in region only after its previous
// launch ended, and this rank's second wait of that launch followed its reduction of that region; a peer puts into
// this rank's out region only after this rank's first-round signal of the same piece, which follows this rank's
// copy of the previous piece out of it (stream order).
#pragma once

#include <weft/port_channel_device.hpp>

#include "collective_algorithms.hpp"

namespace weft::detail {

/// One piece of a copy-engine allreduce (trivially copyable: a kernel argument).
struct PortAllReduceArgs {
  CollectiveContext ctx;
  ReduceOp op;
  int32_t kind;    ///< CollectiveKind::kAllReduce, for timeout records
  uint64_t count;  ///< elements of the piece
  uint64_t stageOffset;
  uint64_t inOffset;
  uint64_t outOffset;
  uint64_t slotBytes;                       ///< one peer's slot of the in region
  const PortChannelDeviceHandle* channels;  ///< [size]: entry p puts into rank p's scratch (entry rank unused)
};
static_assert(std::is_trivially_copyable_v<PortAllReduceArgs>);

template <class T, class TeamT>
WEFT_HOST_DEVICE void portAllReduce(const TeamT& team, const PortAllReduceArgs& a) {
  const CollectiveContext& ctx = a.ctx;
  const uint64_t n = static_cast<uint64_t>(ctx.size);
  const uint64_t rank = static_cast<uint64_t>(ctx.rank);
  uint8_t* mine = ctx.peers[ctx.rank].scratch;
  const uint64_t lo = shareStart<T>(a.count, rank, n);
  const uint64_t hi = shareStart<T>(a.count, rank + 1, n);
  if (team.blockId == 0) {
    for (uint64_t q = team.threadId; q < n; q += team.numThreads) {
      if (q == rank) continue;
      const PortChannelDeviceHandle& ch = a.channels[q];
      const uint64_t qlo = shareStart<T>(a.count, q, n);
      const uint64_t bytes = (shareStart<T>(a.count, q + 1, n) - qlo) * sizeof(T);
      if (bytes != 0) {
        ch.putWithSignal(a.inOffset + rank * a.slotBytes, a.stageOffset + qlo * sizeof(T), bytes);
      } else {
        ch.signal();
      }
    }
    // Every put before any wait: a worker serving several peers must not wait on one before signalling the next.
    for (uint64_t q = team.threadId; q < n; q += team.numThreads) {
      if (q != rank) a.channels[q].wait();
    }
  }
  gridBarrier(team, ctx, a.kind);
  reduceRange<T>(
      team, ctx, a.op, hi - lo,
      [&](int p) {
        return static_cast<uint64_t>(p) == rank
                   ? reinterpret_cast<const T*>(mine + a.stageOffset) + lo
                   : reinterpret_cast<const T*>(mine + a.inOffset + static_cast<uint64_t>(p) * a.slotBytes);
      },
      reinterpret_cast<T*>(mine + a.outOffset) + lo, nullptr);
  gridBarrier(team, ctx, a.kind);
  if (team.blockId == 0) {
    const uint64_t bytes = (hi - lo) * sizeof(T);
    for (uint64_t q = team.threadId; q < n; q += team.numThreads) {
      if (q == rank) continue;
      const PortChannelDeviceHandle& ch = a.channels[q];
      if (bytes != 0) {
        ch.putWithSignalAndFlush(a.outOffset + lo * sizeof(T), a.outOffset + lo * sizeof(T), bytes);
      } else {
        ch.signal();
      }
    }
    for (uint64_t q = team.threadId; q < n; q += team.numThreads) {
      if (q != rank) a.channels[q].wait();
    }
  }
}

}  // namespace weft::detail
