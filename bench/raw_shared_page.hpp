// The floors of the host benchmarks signal through flags in a page shared by two ranks through POSIX
// shm_open, used with plain atomics, with none of weft's transport code in the way.
#pragma once

#include <cstdint>
#include <string>
#include <weft/bootstrap.hpp>

namespace weft::bench {

/// `bytes` of data plus two flag words, mapped by both ranks of a pair. Collective for the pair: the
/// lower rank creates it and sends its name to the other.
class RawSharedBuffer {
 public:
  RawSharedBuffer(Bootstrap& boot, int peer, uint64_t bytes, int tag);
  ~RawSharedBuffer();
  RawSharedBuffer(const RawSharedBuffer&) = delete;
  RawSharedBuffer& operator=(const RawSharedBuffer&) = delete;

  /// The data area.
  uint8_t* data() const { return data_; }
  /// The flag word rank `r` of the pair waits on (0: lower rank, 1: higher).
  uint64_t* flag(int r) const { return flags_ + 8 * r; }  // one cache line apart

 private:
  std::string name_;
  void* base_ = nullptr;
  uint64_t mapped_ = 0;
  uint8_t* data_ = nullptr;
  uint64_t* flags_ = nullptr;
};

}  // namespace weft::bench
