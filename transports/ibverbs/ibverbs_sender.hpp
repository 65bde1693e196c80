// Posting work requests to one RC send queue: batching (several WRs per doorbell), selective signalling, and the
// completion bookkeeping that keeps the send queue from overflowing and makes flush exact. Written against
// SendQueue, so the same class drives a real QP in the plugin and a fake one in the unit tests.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <string>
#include <vector>

#include "ibverbs_failure.hpp"

namespace weft::ibverbs {

/// The two verbs calls a QpSender makes on one queue pair and its send CQ.
class SendQueue {
 public:
  virtual ~SendQueue() = default;
  /// Posts the chain starting at `first` (ibv_post_send's contract): 0, or an errno value with `*bad` set to the
  /// first WR that was not posted.
  virtual int post(ibv_send_wr* first, ibv_send_wr** bad) = 0;
  /// Polls at most `max` completions into `out` (ibv_poll_cq's contract): how many were written, < 0 on failure.
  virtual int poll(int max, ibv_wc* out) = 0;
};

/// Sizes a QpSender works within.
struct SenderLimits {
  uint32_t queueDepth = 512;     ///< the QP's max_send_wr: WRs posted and not yet retired never exceed it
  uint32_t maxBatch = 32;        ///< WRs chained into one ibv_post_send
  uint32_t signalInterval = 64;  ///< at most this many WRs in a row go unsignalled
  uint32_t maxInlineBytes = 0;   ///< sends/writes up to this size go IBV_SEND_INLINE (the QP's max_inline_data)
};

/// One operation to queue. The sender copies it; the source memory must stay registered until it is retired.
struct WorkRequest {
  ibv_wr_opcode opcode = IBV_WR_RDMA_WRITE;  ///< RDMA_WRITE, ATOMIC_FETCH_AND_ADD or SEND
  uint64_t localAddress = 0;                 ///< first source byte (RDMA write, send) or the 8-byte result buffer
  uint32_t length = 0;                       ///< bytes (8 for the atomic)
  uint32_t lkey = 0;                         ///< the local registration's key
  uint64_t remoteAddress = 0;                ///< destination (write, atomic); unused for a send
  uint32_t rkey = 0;                         ///< the destination registration's key
  uint64_t addValue = 0;                     ///< the atomic's addend
  bool fence = false;                        ///< IBV_SEND_FENCE: wait for earlier reads/atomics of this QP
};

/// Batches and posts WRs to one send queue and retires their completions. Not thread-safe: the owner serializes.
///
/// Invariants: at most limits.queueDepth WRs are posted and not retired; the last WR of every doorbell is signalled
/// and so is at least every signalInterval-th WR, so every posted WR is covered by a later signalled one and its
/// completion (which on an RC QP retires every WR before it) is enough to free the queue and to finish a flush.
class QpSender {
 public:
  /// `queue` must outlive the sender; `name` prefixes error messages (e.g. "mlx5_0 qp 0x1a2 (peer 10.0.0.2)").
  /// Throws IbvFailure(weftInvalidArgument) when the limits cannot keep the invariants (maxBatch 0 or above
  /// queueDepth, signalInterval 0).
  QpSender(SendQueue& queue, SenderLimits limits, std::string name);
  QpSender(const QpSender&) = delete;
  QpSender& operator=(const QpSender&) = delete;

  /// Queues `wr`. When the batch is full it is posted first (waiting for queue room at most until `deadline`).
  /// Throws IbvFailure: weftTimeout (no room by the deadline), weftRemoteError (a completion failed; the sender stays
  /// failed), weftSystemError (ibv_post_send refused), weftInvalidArgument (an opcode it does not handle).
  void enqueue(const WorkRequest& wr, Clock::time_point deadline);

  /// Posts every queued WR with one doorbell (nothing when none is queued), waiting for queue room at most until
  /// `deadline`. Throws as enqueue.
  void post(Clock::time_point deadline);

  /// Posts what is queued, then waits until every WR enqueued before the call has completed, at most until
  /// `deadline` (then IbvFailure(weftTimeout); the WRs stay pending and a later flush may finish them).
  void flush(Clock::time_point deadline);

  /// Retires whatever completions are ready, without waiting. Throws IbvFailure(weftRemoteError) on a failed one.
  void progress();

  /// WRs handed to enqueue so far.
  uint64_t enqueued() const { return enqueued_; }
  /// WRs posted to the queue so far.
  uint64_t posted() const { return posted_; }
  /// WRs known complete (retired by a signalled completion).
  uint64_t retired() const { return retired_; }
  /// WRs waiting in the current batch, not yet posted.
  size_t queued() const { return batch_.size(); }
  /// Doorbells rung (successful ibv_post_send calls).
  uint64_t doorbells() const { return doorbells_; }
  /// The first failure's text, "" while healthy.
  const std::string& failure() const { return failure_; }

 private:
  void throwIfFailed() const;
  void waitForRoom(uint64_t slots, Clock::time_point deadline);
  bool pollOnce();

  SendQueue& queue_;
  SenderLimits limits_;
  std::string name_;
  std::vector<WorkRequest> batch_;
  std::vector<ibv_send_wr> wrs_;  // scratch for one doorbell; sized maxBatch so chain pointers stay valid
  std::vector<ibv_sge> sges_;
  std::vector<ibv_wc> wcs_;
  uint64_t enqueued_ = 0;
  uint64_t posted_ = 0;
  uint64_t retired_ = 0;
  uint64_t doorbells_ = 0;
  uint32_t sinceSignal_ = 0;  // WRs posted since the last signalled one
  std::string failure_;
};

}  // namespace weft::ibverbs
