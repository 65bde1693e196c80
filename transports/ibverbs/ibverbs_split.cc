#include "ibverbs_split.hpp"

#include <algorithm>

namespace weft::ibverbs {

std::vector<WriteChunk> splitWrite(uint64_t bytes, uint32_t qps, uint32_t firstQp, uint64_t maxMessageBytes) {
  std::vector<WriteChunk> out;
  if (bytes == 0 || qps == 0 || maxMessageBytes == 0) return out;
  firstQp %= qps;
  uint32_t stripes = bytes < kMinStripeBytes ? 1 : qps;
  // Even pieces, rounded up to the alignment; the last piece takes the remainder (and some QPs none when rounding
  // leaves nothing for them).
  uint64_t piece = (bytes + stripes - 1) / stripes;
  if (stripes > 1) piece = (piece + kStripeAlignment - 1) / kStripeAlignment * kStripeAlignment;
  uint64_t offset = 0;
  for (uint32_t s = 0; s < stripes && offset < bytes; ++s) {
    const uint64_t end = std::min(bytes, offset + piece);
    const uint32_t qp = (firstQp + s) % qps;
    while (offset < end) {
      const uint64_t n = std::min(end - offset, maxMessageBytes);
      out.push_back({offset, n, qp});
      offset += n;
    }
  }
  return out;
}

}  // namespace weft::ibverbs
