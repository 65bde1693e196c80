// The staging ring of the libfabric plugin: pieces of a fixed pinned buffer handed to staged writes first in, first
// out. A piece stays taken until the write that reads it has completed; pieces are given back oldest first, so the
// free space is always one run, split in two where it wraps past the end.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

namespace weft::transport_support {

/// `Owner` says whose write a piece is (the plugin keeps the connection and the operation's sequence number).
template <class Owner>
class StagingRing {
 public:
  struct Piece {
    uint64_t start = 0, bytes = 0;
    Owner owner{};
  };

  explicit StagingRing(uint64_t capacity) : capacity_(capacity) {}

  uint64_t capacity() const { return capacity_; }
  bool empty() const { return pieces_.empty(); }
  size_t pieces() const { return pieces_.size(); }
  /// The oldest piece still taken (the ring must not be empty).
  const Piece& oldest() const { return pieces_.front(); }

  /// Where `bytes` contiguous free bytes start, or nothing while the ring is too full: after the newest piece, else
  /// from offset 0 when the rest of the buffer is too short. Taking `bytes` larger than the ring is a caller's bug.
  std::optional<uint64_t> room(uint64_t bytes) const {
    if (bytes == 0 || bytes > capacity_) {
      throw std::invalid_argument("staging ring: a piece of " + std::to_string(bytes) + " bytes in a ring of " +
                                  std::to_string(capacity_));
    }
    if (pieces_.empty()) return 0;
    const uint64_t tail = pieces_.front().start;
    if (head_ > tail) {  // free: [head, capacity) and [0, tail)
      if (capacity_ - head_ >= bytes) return head_;
      if (tail >= bytes) return 0;
      return std::nullopt;
    }
    // head <= tail with pieces taken: the free run is [head, tail) (none when they meet: the ring is full).
    if (tail - head_ >= bytes) return head_;
    return std::nullopt;
  }

  /// Takes the piece `room` returned for `bytes` (nothing else may change the ring in between).
  void take(uint64_t start, uint64_t bytes, Owner owner) {
    const std::optional<uint64_t> at = room(bytes);
    if (!at || *at != start) throw std::logic_error("staging ring: a piece taken where room() did not offer it");
    pieces_.push_back(Piece{start, bytes, std::move(owner)});
    head_ = start + bytes;
  }

  /// Gives back the oldest pieces while `inUse(owner)` says their writes are done; stops at the first still in use.
  template <class InUse>
  void release(InUse&& inUse) {
    while (!pieces_.empty() && !inUse(pieces_.front().owner)) pieces_.pop_front();
    if (pieces_.empty()) head_ = 0;
  }

 private:
  uint64_t capacity_;
  uint64_t head_ = 0;  // just past the newest piece
  std::deque<Piece> pieces_;
};

}  // namespace weft::transport_support
