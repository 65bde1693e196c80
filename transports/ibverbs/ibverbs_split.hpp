// How one write is cut into RDMA writes: across the connection's queue pairs, and within each message size limit.
#pragma once

#include <cstdint>
#include <vector>

namespace weft::ibverbs {

/// One RDMA write of a split write: `bytes` at `offset` from the start of the write, posted on queue pair `qp`.
struct WriteChunk {
  uint64_t offset;
  uint64_t bytes;
  uint32_t qp;
};

/// Writes smaller than this stay on one queue pair: striping them costs more doorbells than it gains.
inline constexpr uint64_t kMinStripeBytes = 64 * 1024;
/// Stripe boundaries are multiples of this, so each QP's piece starts page-aligned within the write.
inline constexpr uint64_t kStripeAlignment = 4096;

/// Splits a write of `bytes` (> 0) over `qps` (>= 1) queue pairs, starting with `firstQp` (< qps, the round-robin
/// position), with no chunk larger than `maxMessageBytes` (>= 1, the port's max_msg_sz). Chunks are in offset
/// order, contiguous and cover [0, bytes) exactly. A write below kMinStripeBytes (or qps == 1) uses `firstQp` only.
std::vector<WriteChunk> splitWrite(uint64_t bytes, uint32_t qps, uint32_t firstQp, uint64_t maxMessageBytes);

}  // namespace weft::ibverbs
