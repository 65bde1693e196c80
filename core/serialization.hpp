// Little-endian byte writer and a bounds-checked reader for the wire formats weft defines itself.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>
#include <weft/error.hpp>

namespace weft::detail {

/// Appends fixed-width values to a byte vector.
class ByteWriter {
 public:
  template <class T>
  void put(T value) {
    static_assert(std::is_integral_v<T>);
    for (size_t i = 0; i < sizeof(T); ++i)
      bytes_.push_back(static_cast<uint8_t>(static_cast<uint64_t>(value) >> (8 * i)));
  }
  void putBytes(const void* data, size_t n) {
    auto p = static_cast<const uint8_t*>(data);
    bytes_.insert(bytes_.end(), p, p + n);
  }
  /// A u32 length followed by the bytes.
  void putBlob(const std::vector<uint8_t>& blob) {
    put<uint32_t>(static_cast<uint32_t>(blob.size()));
    putBytes(blob.data(), blob.size());
  }
  void putString(std::string_view s) {
    put<uint32_t>(static_cast<uint32_t>(s.size()));
    putBytes(s.data(), s.size());
  }
  std::vector<uint8_t> take() { return std::move(bytes_); }

 private:
  std::vector<uint8_t> bytes_;
};

/// Reads what ByteWriter wrote; every read is bounds-checked and throws kProtocolError naming `what_`.
class ByteReader {
 public:
  ByteReader(const uint8_t* data, size_t size, std::string what)
      : p_(data), end_(data + size), what_(std::move(what)) {}

  template <class T>
  T get() {
    need(sizeof(T));
    uint64_t v = 0;
    for (size_t i = 0; i < sizeof(T); ++i) v |= static_cast<uint64_t>(p_[i]) << (8 * i);
    p_ += sizeof(T);
    return static_cast<T>(v);
  }
  std::vector<uint8_t> getBlob(uint32_t maxBytes) {
    uint32_t n = get<uint32_t>();
    if (n > maxBytes)
      fail("a blob of " + std::to_string(n) + " bytes exceeds the limit of " + std::to_string(maxBytes));
    need(n);
    std::vector<uint8_t> out(p_, p_ + n);
    p_ += n;
    return out;
  }
  std::string getString(uint32_t maxBytes) {
    auto b = getBlob(maxBytes);
    return std::string(b.begin(), b.end());
  }
  size_t remaining() const { return static_cast<size_t>(end_ - p_); }
  [[noreturn]] void fail(const std::string& why) const { throw Error(ErrorCode::kProtocolError, what_ + ": " + why); }

 private:
  void need(size_t n) const {
    if (remaining() < n)
      fail("truncated (needs " + std::to_string(n) + " more bytes, has " + std::to_string(remaining()) + ")");
  }
  const uint8_t* p_;
  const uint8_t* end_;
  std::string what_;
};

}  // namespace weft::detail
