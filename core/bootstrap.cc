// The Bootstrap base class (variable-length helpers) and the text form of the UniqueId.
#include <fmt/format.h>

#include <cctype>
#include <cstring>
#include <weft/bootstrap.hpp>
#include <weft/error.hpp>
#include <weft/unique_id.hpp>

namespace weft {

Bootstrap::~Bootstrap() = default;

bool Bootstrap::hasMessage(int /*peer*/, int /*tag*/) { return false; }

void Bootstrap::sendBytes(const std::vector<uint8_t>& data, int peer, int tag) {
  if (data.size() > kMaxBootstrapMessageBytes) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("sendBytes of {} bytes to rank {} exceeds the limit of {} bytes", data.size(), peer,
                            kMaxBootstrapMessageBytes));
  }
  // Length first, as a fixed 8-byte little-endian value, so the receiver can size its buffer before the data.
  uint8_t length[8];
  uint64_t n = data.size();
  for (int i = 0; i < 8; ++i) length[i] = static_cast<uint8_t>(n >> (8 * i));
  send(length, sizeof(length), peer, tag);
  send(data.data(), data.size(), peer, tag);
}

std::vector<uint8_t> Bootstrap::recvBytes(int peer, int tag) {
  uint8_t length[8];
  recv(length, sizeof(length), peer, tag);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(length[i]) << (8 * i);
  if (n > kMaxBootstrapMessageBytes) {
    throw Error(ErrorCode::kProtocolError,
                fmt::format("recvBytes from rank {} (tag {}): announced length {} exceeds the limit of {} bytes", peer,
                            tag, n, kMaxBootstrapMessageBytes));
  }
  std::vector<uint8_t> data(n);
  recv(data.data(), n, peer, tag);
  return data;
}

std::string uniqueIdToString(const UniqueId& id) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string text(2 * kUniqueIdBytes, '0');
  for (size_t i = 0; i < kUniqueIdBytes; ++i) {
    text[2 * i] = kDigits[id.bytes[i] >> 4];
    text[2 * i + 1] = kDigits[id.bytes[i] & 0xf];
  }
  return text;
}

UniqueId uniqueIdFromString(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) text.remove_prefix(1);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.remove_suffix(1);
  if (text.size() != 2 * kUniqueIdBytes) {
    throw Error(ErrorCode::kInvalidArgument, fmt::format("unique id text has {} characters, expected {} hex digits",
                                                         text.size(), 2 * kUniqueIdBytes));
  }
  auto digit = [&](size_t pos) -> uint8_t {
    char c = text[pos];
    if (c >= '0' && c <= '9') return static_cast<uint8_t>(c - '0');
    if (c >= 'a' && c <= 'f') return static_cast<uint8_t>(c - 'a' + 10);
    if (c >= 'A' && c <= 'F') return static_cast<uint8_t>(c - 'A' + 10);
    throw Error(ErrorCode::kInvalidArgument, fmt::format("unique id text has a non-hex character at position {}", pos));
  };
  UniqueId id;
  for (size_t i = 0; i < kUniqueIdBytes; ++i) {
    id.bytes[i] = static_cast<uint8_t>((digit(2 * i) << 4) | digit(2 * i + 1));
  }
  return id;
}

}  // namespace weft
