#include "ibverbs_sender.hpp"

#include <sched.h>

#include <cstdio>
#include <cstring>

#include <utility>

namespace weft::ibverbs {

QpSender::QpSender(SendQueue& queue, SenderLimits limits, std::string name)
    : queue_(queue), limits_(limits), name_(std::move(name)) {
  if (limits_.maxBatch == 0 || limits_.maxBatch > limits_.queueDepth || limits_.signalInterval == 0) {
    throw IbvFailure(weftInvalidArgument, name_ + ": send limits cannot work (max batch " +
                                              std::to_string(limits_.maxBatch) + ", queue depth " +
                                              std::to_string(limits_.queueDepth) + ", signal interval " +
                                              std::to_string(limits_.signalInterval) + ")");
  }
  batch_.reserve(limits_.maxBatch);
  wrs_.resize(limits_.maxBatch);
  sges_.resize(limits_.maxBatch);
  wcs_.resize(16);
}

void QpSender::throwIfFailed() const {
  if (!failure_.empty()) throw IbvFailure(weftRemoteError, failure_);
}

void QpSender::enqueue(const WorkRequest& wr, Clock::time_point deadline) {
  throwIfFailed();
  if (wr.opcode != IBV_WR_RDMA_WRITE && wr.opcode != IBV_WR_ATOMIC_FETCH_AND_ADD && wr.opcode != IBV_WR_SEND) {
    throw IbvFailure(weftInvalidArgument, name_ + ": opcode " + std::to_string(wr.opcode) + " is not queued here");
  }
  if (batch_.size() == limits_.maxBatch) post(deadline);
  batch_.push_back(wr);
  ++enqueued_;
}

void QpSender::post(Clock::time_point deadline) {
  throwIfFailed();
  if (batch_.empty()) return;
  const uint64_t n = batch_.size();
  waitForRoom(n, deadline);
  for (uint64_t i = 0; i < n; ++i) {
    const WorkRequest& w = batch_[i];
    ibv_send_wr& wr = wrs_[i];
    ibv_sge& sge = sges_[i];
    wr = ibv_send_wr{};
    sge = ibv_sge{w.localAddress, w.length, w.lkey};
    wr.wr_id = posted_ + i + 1;  // sequence number: a completion of WR s retires every WR up to s
    wr.sg_list = &sge;
    wr.num_sge = w.length > 0 ? 1 : 0;
    wr.opcode = w.opcode;
    wr.next = i + 1 < n ? &wrs_[i + 1] : nullptr;
    if (w.opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
      wr.wr.atomic.remote_addr = w.remoteAddress;
      wr.wr.atomic.rkey = w.rkey;
      wr.wr.atomic.compare_add = w.addValue;
    } else {
      wr.wr.rdma.remote_addr = w.remoteAddress;
      wr.wr.rdma.rkey = w.rkey;
      if (w.length > 0 && w.length <= limits_.maxInlineBytes) wr.send_flags |= IBV_SEND_INLINE;
    }
    if (w.fence) wr.send_flags |= IBV_SEND_FENCE;
    const bool last = i + 1 == n;
    if (last || sinceSignal_ + 1 >= limits_.signalInterval) {
      wr.send_flags |= IBV_SEND_SIGNALED;
      sinceSignal_ = 0;
    } else {
      ++sinceSignal_;
    }
  }
  ibv_send_wr* bad = nullptr;
  int rc = queue_.post(&wrs_[0], &bad);
  if (rc != 0) {
    // A partial post leaves WRs on the queue whose completions we would misattribute: the sender is unusable.
    uint64_t accepted = bad != nullptr && bad >= &wrs_[0] && bad < &wrs_[0] + n ? bad - &wrs_[0] : 0;
    failure_ = name_ + ": ibv_post_send of " + std::to_string(n) + " work requests failed after " +
               std::to_string(accepted) + ": " + std::strerror(rc);
    throw IbvFailure(weftSystemError, failure_);
  }
  posted_ += n;
  ++doorbells_;
  batch_.clear();
}

void QpSender::flush(Clock::time_point deadline) {
  post(deadline);
  const uint64_t target = posted_;
  uint32_t idle = 0;
  while (retired_ < target) {
    if (pollOnce()) {
      idle = 0;
      continue;
    }
    if (Clock::now() >= deadline) {
      throw IbvFailure(weftTimeout, name_ + ": flush timed out with " + std::to_string(target - retired_) +
                                        " work requests not completed");
    }
    if (++idle > 64) sched_yield();
  }
}

void QpSender::progress() {
  while (pollOnce()) {
  }
}

void QpSender::waitForRoom(uint64_t slots, Clock::time_point deadline) {
  uint32_t idle = 0;
  while (posted_ - retired_ + slots > limits_.queueDepth) {
    if (pollOnce()) {
      idle = 0;
      continue;
    }
    if (Clock::now() >= deadline) {
      throw IbvFailure(weftTimeout, name_ + ": send queue full (" + std::to_string(posted_ - retired_) +
                                        " work requests outstanding of " + std::to_string(limits_.queueDepth) +
                                        ") past the deadline");
    }
    if (++idle > 64) sched_yield();
  }
}

bool QpSender::pollOnce() {
  throwIfFailed();
  int n = queue_.poll(static_cast<int>(wcs_.size()), wcs_.data());
  if (n < 0) {
    failure_ = name_ + ": ibv_poll_cq failed (" + std::to_string(n) + ")";
    throw IbvFailure(weftSystemError, failure_);
  }
  for (int i = 0; i < n; ++i) {
    const ibv_wc& wc = wcs_[i];
    if (wc.status != IBV_WC_SUCCESS) {
      if (failure_.empty()) {
        char vendor[32];
        std::snprintf(vendor, sizeof(vendor), "0x%x", wc.vendor_err);
        failure_ = name_ + ": work request " + std::to_string(wc.wr_id) + " failed: " + ibv_wc_status_str(wc.status) +
                   " (vendor error " + vendor + ")";
      }
      continue;
    }
    if (wc.wr_id > posted_) {
      failure_ = name_ + ": completion for work request " + std::to_string(wc.wr_id) + " that was never posted";
      continue;
    }
    if (wc.wr_id > retired_) retired_ = wc.wr_id;
  }
  throwIfFailed();
  return n > 0;
}

}  // namespace weft::ibverbs
