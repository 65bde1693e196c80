// QpSender (batching, selective signalling, completion bookkeeping) against a fake send queue that behaves as an RC
// QP does: slots of unsignalled WRs free only when a later signalled WR's completion is polled, completions come in
// order, and a failed WR reports its status. The fake checks the invariants on every post.
#include <gtest/gtest.h>

#include <deque>
#include <thread>

#include "ibverbs_sender.hpp"

namespace weft::ibverbs {
namespace {

class FakeQueue : public SendQueue {
 public:
  explicit FakeQueue(uint32_t depth) : depth_(depth) {}

  int post(ibv_send_wr* first, ibv_send_wr** bad) override {
    ++doorbells;
    uint32_t chain = 0;
    for (ibv_send_wr* w = first; w != nullptr; w = w->next) ++chain;
    chainLengths.push_back(chain);
    if (failPosts) {
      *bad = first;
      return ENOMEM;
    }
    for (ibv_send_wr* w = first; w != nullptr; w = w->next) {
      if (inQueue_.size() == depth_) {  // a real QP refuses the WR: the sender must never let this happen
        overflowed = true;
        *bad = w;
        return ENOMEM;
      }
      inQueue_.push_back({w->wr_id, (w->send_flags & IBV_SEND_SIGNALED) != 0, w->opcode, w->send_flags});
      ops.push_back({w->wr_id, (w->send_flags & IBV_SEND_SIGNALED) != 0, w->opcode, w->send_flags});
      if (w->num_sge == 1) bytes += w->sg_list[0].length;
    }
    return 0;
  }

  int poll(int max, ibv_wc* out) override {
    int n = 0;
    // "Hardware" executes up to `executePerPoll` WRs per poll (0: none, a stalled link).
    uint32_t budget = executePerPoll;
    while (budget > 0 && executed_ < inQueue_.size()) {
      --budget;
      const Op& op = inQueue_[executed_++];
      if (op.signalled || (failAt != 0 && op.wrId == failAt)) ready_.push_back(op);
    }
    while (n < max && !ready_.empty()) {
      Op op = ready_.front();
      ready_.pop_front();
      ibv_wc wc{};
      wc.wr_id = op.wrId;
      wc.status = failAt != 0 && op.wrId >= failAt ? IBV_WC_REM_ACCESS_ERR : IBV_WC_SUCCESS;
      out[n++] = wc;
      // Polling a completion frees its slot and every earlier one.
      while (!inQueue_.empty() && inQueue_.front().wrId <= op.wrId) {
        inQueue_.pop_front();
        --executed_;
      }
    }
    return n;
  }

  struct Op {
    uint64_t wrId;
    bool signalled;
    ibv_wr_opcode opcode;
    unsigned flags;
  };
  uint32_t executePerPoll = 1000;
  uint64_t failAt = 0;
  bool failPosts = false;
  bool overflowed = false;
  uint64_t doorbells = 0;
  uint64_t bytes = 0;
  std::vector<uint32_t> chainLengths;
  std::vector<Op> ops;
  size_t inQueue() const { return inQueue_.size(); }

 private:
  uint32_t depth_;
  std::deque<Op> inQueue_;
  size_t executed_ = 0;
  std::deque<Op> ready_;
};

WorkRequest write(uint32_t bytes) {
  WorkRequest w;
  w.opcode = IBV_WR_RDMA_WRITE;
  w.localAddress = 0x1000;
  w.length = bytes;
  w.lkey = 1;
  w.remoteAddress = 0x2000;
  w.rkey = 2;
  return w;
}

Clock::time_point soon() { return Clock::now() + std::chrono::seconds(2); }

TEST(IbverbsSenderTest, BatchesIntoOneDoorbellAndSignalsTheLast) {
  FakeQueue q(64);
  QpSender s(q, SenderLimits{64, 8, 64, 0}, "qp");
  for (int i = 0; i < 5; ++i) s.enqueue(write(100), soon());
  EXPECT_EQ(q.doorbells, 0u);  // nothing posted until a flush, a signal or a full batch
  EXPECT_EQ(s.queued(), 5u);
  s.flush(soon());
  ASSERT_EQ(q.chainLengths, std::vector<uint32_t>{5});
  ASSERT_EQ(q.ops.size(), 5u);
  for (int i = 0; i < 4; ++i) EXPECT_FALSE(q.ops[i].signalled) << i;
  EXPECT_TRUE(q.ops[4].signalled);
  EXPECT_EQ(s.retired(), 5u);
  EXPECT_EQ(q.bytes, 500u);
}

TEST(IbverbsSenderTest, FullBatchIsPostedAndChainNeverExceedsMaxBatch) {
  FakeQueue q(64);
  QpSender s(q, SenderLimits{64, 8, 64, 0}, "qp");
  for (int i = 0; i < 20; ++i) s.enqueue(write(8), soon());
  EXPECT_EQ(q.chainLengths, (std::vector<uint32_t>{8, 8}));
  EXPECT_EQ(s.queued(), 4u);
  s.flush(soon());
  EXPECT_EQ(q.chainLengths, (std::vector<uint32_t>{8, 8, 4}));
  EXPECT_EQ(s.posted(), 20u);
  EXPECT_EQ(s.retired(), 20u);
}

TEST(IbverbsSenderTest, SignalsAtLeastEverySignalIntervalWithinABatch) {
  FakeQueue q(256);
  QpSender s(q, SenderLimits{256, 32, 5, 0}, "qp");
  for (int i = 0; i < 32; ++i) s.enqueue(write(8), soon());
  s.flush(soon());
  uint32_t run = 0;
  for (const auto& op : q.ops) {
    run = op.signalled ? 0 : run + 1;
    EXPECT_LT(run, 5u);
  }
  EXPECT_TRUE(q.ops.back().signalled);
}

TEST(IbverbsSenderTest, NeverOverflowsTheSendQueueWhenHardwareIsSlow) {
  FakeQueue q(16);
  q.executePerPoll = 1;  // one WR per poll: the sender must wait for room again and again
  QpSender s(q, SenderLimits{16, 8, 4, 0}, "qp");
  for (int i = 0; i < 1000; ++i) {
    s.enqueue(write(64), soon());
    ASSERT_LE(s.posted() - s.retired(), 16u);
  }
  s.flush(soon());
  EXPECT_FALSE(q.overflowed);
  EXPECT_EQ(s.posted(), 1000u);
  EXPECT_EQ(s.retired(), 1000u);
  EXPECT_EQ(q.inQueue(), 0u);
  EXPECT_EQ(q.bytes, 64000u);
}

TEST(IbverbsSenderTest, FlushWaitsOnlyForWhatWasPostedBefore) {
  FakeQueue q(64);
  q.executePerPoll = 0;  // stalled link
  QpSender s(q, SenderLimits{64, 8, 64, 0}, "qp");
  s.enqueue(write(8), soon());
  auto start = Clock::now();
  try {
    s.flush(Clock::now() + std::chrono::milliseconds(100));
    ADD_FAILURE() << "flush on a stalled queue returned";
  } catch (const IbvFailure& f) {
    EXPECT_EQ(f.code(), weftTimeout);
    EXPECT_NE(std::string(f.what()).find("1 work requests not completed"), std::string::npos) << f.what();
  }
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(2));
  q.executePerPoll = 1000;  // the link recovers: a later flush finishes the same WRs
  s.flush(soon());
  EXPECT_EQ(s.retired(), 1u);
}

TEST(IbverbsSenderTest, QueueFullTimesOut) {
  FakeQueue q(8);
  q.executePerPoll = 0;
  QpSender s(q, SenderLimits{8, 8, 8, 0}, "qp");
  for (int i = 0; i < 8; ++i) s.enqueue(write(8), soon());
  s.post(soon());
  s.enqueue(write(8), soon());
  try {
    s.post(Clock::now() + std::chrono::milliseconds(50));
    ADD_FAILURE() << "posted into a full queue";
  } catch (const IbvFailure& f) {
    EXPECT_EQ(f.code(), weftTimeout);
    EXPECT_NE(std::string(f.what()).find("send queue full"), std::string::npos) << f.what();
  }
  EXPECT_FALSE(q.overflowed);
}

TEST(IbverbsSenderTest, ErrorCompletionCarriesTheStatusTextAndSticks) {
  FakeQueue q(64);
  q.failAt = 3;
  QpSender s(q, SenderLimits{64, 8, 64, 0}, "mlx5_0 qp 7");
  for (int i = 0; i < 5; ++i) s.enqueue(write(8), soon());
  try {
    s.flush(soon());
    ADD_FAILURE() << "flush succeeded past a failed WR";
  } catch (const IbvFailure& f) {
    EXPECT_EQ(f.code(), weftRemoteError);
    std::string m = f.what();
    EXPECT_NE(m.find("mlx5_0 qp 7"), std::string::npos) << m;
    EXPECT_NE(m.find(ibv_wc_status_str(IBV_WC_REM_ACCESS_ERR)), std::string::npos) << m;
  }
  EXPECT_FALSE(s.failure().empty());
  try {
    s.enqueue(write(8), soon());
    ADD_FAILURE() << "a failed sender accepted more work";
  } catch (const IbvFailure& f) {
    EXPECT_EQ(f.code(), weftRemoteError);
  }
}

TEST(IbverbsSenderTest, RefusedPostIsASystemError) {
  FakeQueue q(64);
  q.failPosts = true;
  QpSender s(q, SenderLimits{64, 8, 64, 0}, "qp");
  s.enqueue(write(8), soon());
  try {
    s.post(soon());
    ADD_FAILURE();
  } catch (const IbvFailure& f) {
    EXPECT_EQ(f.code(), weftSystemError);
    EXPECT_NE(std::string(f.what()).find(std::strerror(ENOMEM)), std::string::npos) << f.what();
  }
}

TEST(IbverbsSenderTest, AtomicAndFenceAndInlineReachTheWorkRequest) {
  struct Capture : SendQueue {
    ibv_send_wr first{};
    ibv_sge sge{};
    int post(ibv_send_wr* f, ibv_send_wr**) override {
      first = *f;
      sge = *f->sg_list;
      return 0;
    }
    int poll(int, ibv_wc*) override { return 0; }
  } q;
  QpSender s(q, SenderLimits{16, 4, 16, 32}, "qp");
  WorkRequest a;
  a.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
  a.localAddress = 0x10;
  a.length = 8;
  a.lkey = 3;
  a.remoteAddress = 0x40;
  a.rkey = 9;
  a.addValue = 77;
  a.fence = true;
  s.enqueue(a, soon());
  s.post(soon());
  EXPECT_EQ(q.first.opcode, IBV_WR_ATOMIC_FETCH_AND_ADD);
  EXPECT_EQ(q.first.wr.atomic.remote_addr, 0x40u);
  EXPECT_EQ(q.first.wr.atomic.rkey, 9u);
  EXPECT_EQ(q.first.wr.atomic.compare_add, 77u);
  EXPECT_TRUE(q.first.send_flags & IBV_SEND_FENCE);
  EXPECT_TRUE(q.first.send_flags & IBV_SEND_SIGNALED);
  EXPECT_FALSE(q.first.send_flags & IBV_SEND_INLINE);  // atomics are never inline
  EXPECT_EQ(q.sge.lkey, 3u);
  s.enqueue(write(24), soon());
  s.post(soon());
  EXPECT_TRUE(q.first.send_flags & IBV_SEND_INLINE);
  s.enqueue(write(33), soon());
  s.post(soon());
  EXPECT_FALSE(q.first.send_flags & IBV_SEND_INLINE);
}

TEST(IbverbsSenderTest, ImpossibleLimitsAreRefused) {
  FakeQueue q(8);
  EXPECT_THROW(QpSender(q, SenderLimits{8, 0, 8, 0}, "qp"), IbvFailure);
  EXPECT_THROW(QpSender(q, SenderLimits{8, 9, 8, 0}, "qp"), IbvFailure);
  EXPECT_THROW(QpSender(q, SenderLimits{8, 8, 0, 0}, "qp"), IbvFailure);
}

}  // namespace
}  // namespace weft::ibverbs
