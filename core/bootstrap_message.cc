#include "bootstrap_message.hpp"

#include <arpa/inet.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <weft/error.hpp>

namespace weft::detail {
namespace {

// Little-endian fixed-width fields, written byte by byte so the format does not depend on the host.
void putU16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
}
void putU32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void putU64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint16_t getU16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
uint32_t getU32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}
uint64_t getU64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

[[noreturn]] void protocolError(const std::string& what) { throw Error(ErrorCode::kProtocolError, what); }

bool knownType(uint16_t type) {
  return type >= static_cast<uint16_t>(FrameType::kHello) && type <= static_cast<uint16_t>(FrameType::kCollective);
}

// Address layout (kSocketAddressBytes): family u8, reserved u8, port u16, scope u32, ip[16].
void putAddress(uint8_t* p, const SocketAddress& a) {
  p[0] = a.family;
  p[1] = 0;
  putU16(p + 2, a.port);
  putU32(p + 4, a.scopeId);
  std::memcpy(p + 8, a.ip.data(), 16);
}

// `allowEmpty`: family 0 means "not announced" (a Hello that carries no listen address).
SocketAddress getAddress(const uint8_t* p, bool allowEmpty, const char* what) {
  SocketAddress a;
  a.family = p[0];
  a.port = getU16(p + 2);
  a.scopeId = getU32(p + 4);
  std::memcpy(a.ip.data(), p + 8, 16);
  if (a.family == 0 && allowEmpty) return a;
  if (a.family != 4 && a.family != 6)
    protocolError(fmt::format("{}: address family {} is neither 4 nor 6", what, a.family));
  if (a.port == 0) protocolError(fmt::format("{}: address has port 0", what));
  return a;
}

}  // namespace

void encodeFrameHeader(const FrameHeader& h, uint8_t* out) {
  putU32(out, kFrameMagic);
  putU16(out + 4, kWireVersion);
  putU16(out + 6, static_cast<uint16_t>(h.type));
  putU32(out + 8, static_cast<uint32_t>(h.tag));
  putU32(out + 12, 0);
  putU64(out + 16, h.length);
}

FrameHeader decodeFrameHeader(std::span<const uint8_t> b, uint64_t maxLength) {
  if (b.size() < kFrameHeaderBytes) {
    protocolError(fmt::format("truncated frame header: {} of {} bytes", b.size(), kFrameHeaderBytes));
  }
  uint32_t magic = getU32(b.data());
  if (magic != kFrameMagic) protocolError(fmt::format("bad frame magic 0x{:08x} (not a weft bootstrap peer)", magic));
  uint16_t version = getU16(b.data() + 4);
  if (version != kWireVersion) {
    protocolError(fmt::format("wire version {} is not this build's version {}", version, kWireVersion));
  }
  uint16_t type = getU16(b.data() + 6);
  if (!knownType(type)) protocolError(fmt::format("unknown frame type {}", type));
  if (getU32(b.data() + 12) != 0) protocolError("reserved frame header field is not zero");
  FrameHeader h;
  h.type = static_cast<FrameType>(type);
  h.tag = static_cast<int32_t>(getU32(b.data() + 8));
  h.length = getU64(b.data() + 16);
  if (h.length > maxLength) {
    protocolError(fmt::format("frame of {} bytes exceeds the limit of {} bytes", h.length, maxLength));
  }
  return h;
}

std::vector<uint8_t> encodeFrame(FrameType type, int32_t tag, const void* payload, uint64_t bytes) {
  if (bytes > kMaxFrameBytes) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("message of {} bytes exceeds the bootstrap limit of {} bytes", bytes, kMaxFrameBytes));
  }
  std::vector<uint8_t> frame(kFrameHeaderBytes + bytes);
  encodeFrameHeader(FrameHeader{type, tag, bytes}, frame.data());
  if (bytes > 0) std::memcpy(frame.data() + kFrameHeaderBytes, payload, bytes);
  return frame;
}

void FrameDecoder::setMaxLength(uint64_t maxLength) {
  maxLength_ = maxLength;
  if (maxLength_ > kMaxHelloBytes && !held_.empty()) {
    std::vector<uint8_t> rest = std::move(held_);
    held_.clear();
    feed(rest.data(), rest.size());
  }
}

void FrameDecoder::feed(const uint8_t* data, size_t size) {
  if (!held_.empty()) {  // still waiting for the limit to rise: keep everything in order behind what is held
    held_.insert(held_.end(), data, data + size);
    return;
  }
  while (size > 0) {
    if (!inBody_) {
      size_t take = std::min(size, kFrameHeaderBytes - headerFill_);
      std::memcpy(header_.data() + headerFill_, data, take);
      headerFill_ += take;
      data += take;
      size -= take;
      if (headerFill_ < kFrameHeaderBytes) return;
      current_ = decodeFrameHeader(header_, maxLength_);
      headerFill_ = 0;
      inBody_ = true;
      body_.clear();
      // No reserve(length): a lying length must not allocate before the bytes arrive.
    }
    size_t need = current_.length - body_.size();
    size_t take = std::min(size, need);
    body_.insert(body_.end(), data, data + take);
    data += take;
    size -= take;
    if (body_.size() == current_.length) {
      frames_.push_back(Frame{current_.type, current_.tag, std::move(body_)});
      body_ = {};
      inBody_ = false;
      if (maxLength_ <= kMaxHelloBytes && size > 0) {
        // Held, not decoded: what follows a hello is judged once the hello is checked. The caller checks the
        // hello before it reads again, so this holds at most one read's worth.
        held_.assign(data, data + size);
        return;
      }
    }
  }
}

Frame FrameDecoder::pop() {
  Frame f = std::move(frames_.front());
  frames_.pop_front();
  return f;
}

std::string SocketAddress::toString() const {
  char text[INET6_ADDRSTRLEN] = {};
  if (family == 4) {
    inet_ntop(AF_INET, ip.data(), text, sizeof(text));
    return fmt::format("{}:{}", text, port);
  }
  if (family == 6) {
    inet_ntop(AF_INET6, ip.data(), text, sizeof(text));
    return fmt::format("[{}]:{}", text, port);
  }
  return "<no address>";
}

// Hello layout: secret (32), rank i32, size i32, listen address (24).
constexpr size_t kHelloBytes = kSecretBytes + 8 + kSocketAddressBytes;
static_assert(kHelloBytes <= kMaxHelloBytes);

std::vector<uint8_t> encodeHello(const Hello& h) {
  std::vector<uint8_t> out(kHelloBytes);
  std::memcpy(out.data(), h.secret.data(), kSecretBytes);
  putU32(out.data() + kSecretBytes, static_cast<uint32_t>(h.rank));
  putU32(out.data() + kSecretBytes + 4, static_cast<uint32_t>(h.size));
  putAddress(out.data() + kSecretBytes + 8, h.listen);
  return out;
}

Hello decodeHello(std::span<const uint8_t> p) {
  if (p.size() != kHelloBytes) protocolError(fmt::format("hello of {} bytes, expected {}", p.size(), kHelloBytes));
  Hello h;
  std::memcpy(h.secret.data(), p.data(), kSecretBytes);
  h.rank = static_cast<int32_t>(getU32(p.data() + kSecretBytes));
  h.size = static_cast<int32_t>(getU32(p.data() + kSecretBytes + 4));
  h.listen = getAddress(p.data() + kSecretBytes + 8, /*allowEmpty=*/true, "hello");
  return h;
}

std::vector<uint8_t> encodePeerTable(const std::vector<SocketAddress>& table) {
  std::vector<uint8_t> out(4 + table.size() * kSocketAddressBytes);
  putU32(out.data(), static_cast<uint32_t>(table.size()));
  for (size_t i = 0; i < table.size(); ++i) putAddress(out.data() + 4 + i * kSocketAddressBytes, table[i]);
  return out;
}

std::vector<SocketAddress> decodePeerTable(std::span<const uint8_t> p, int expectedSize) {
  if (p.size() < 4) protocolError("truncated peer table");
  uint32_t count = getU32(p.data());
  if (expectedSize < 0 || count != static_cast<uint32_t>(expectedSize)) {
    protocolError(fmt::format("peer table lists {} ranks, the job has {}", count, expectedSize));
  }
  if (p.size() != 4 + uint64_t{count} * kSocketAddressBytes) {
    protocolError(fmt::format("peer table of {} bytes does not hold {} addresses", p.size(), count));
  }
  std::vector<SocketAddress> table(count);
  for (uint32_t i = 0; i < count; ++i) {
    // Rank 0's own entry is not used (everyone already reached it), so it may be empty.
    table[i] = getAddress(p.data() + 4 + i * kSocketAddressBytes, i == 0, "peer table");
  }
  return table;
}

std::vector<uint8_t> encodeAbort(const AbortNotice& n) {
  std::vector<uint8_t> out(4 + n.reason.size());
  putU32(out.data(), n.code);
  std::memcpy(out.data() + 4, n.reason.data(), n.reason.size());
  return out;
}

AbortNotice decodeAbort(std::span<const uint8_t> p) {
  if (p.size() < 4) protocolError("truncated abort notice");
  AbortNotice n;
  n.code = getU32(p.data());
  if (n.code > static_cast<uint32_t>(ErrorCode::kInternalError))
    n.code = static_cast<uint32_t>(ErrorCode::kRemoteError);
  n.reason.assign(reinterpret_cast<const char*>(p.data()) + 4, p.size() - 4);
  return n;
}

namespace {
constexpr uint32_t kIdMagic = 0x44494657;  // "WFID"
constexpr uint16_t kIdVersion = 1;
constexpr size_t kIdAddressOffset = 8;
constexpr size_t kIdSecretOffset = kIdAddressOffset + kSocketAddressBytes;
static_assert(kIdSecretOffset + kSecretBytes <= kUniqueIdBytes);
}  // namespace

UniqueId encodeUniqueId(const UniqueIdContents& c) {
  UniqueId id;
  putU32(id.bytes.data(), kIdMagic);
  putU16(id.bytes.data() + 4, kIdVersion);
  putAddress(id.bytes.data() + kIdAddressOffset, c.root);
  std::memcpy(id.bytes.data() + kIdSecretOffset, c.secret.data(), kSecretBytes);
  return id;
}

UniqueIdContents decodeUniqueId(const UniqueId& id) {
  const uint8_t* b = id.bytes.data();
  if (getU32(b) != kIdMagic) {
    throw Error(ErrorCode::kInvalidArgument, "unique id has a bad magic (not made by TcpBootstrap::createUniqueId)");
  }
  if (getU16(b + 4) != kIdVersion) {
    throw Error(ErrorCode::kInvalidArgument,
                fmt::format("unique id version {} is not this build's version {}", getU16(b + 4), kIdVersion));
  }
  UniqueIdContents c;
  try {
    c.root = getAddress(b + kIdAddressOffset, /*allowEmpty=*/false, "unique id");
  } catch (const Error& e) {
    throw Error(ErrorCode::kInvalidArgument, e.message());
  }
  std::memcpy(c.secret.data(), b + kIdSecretOffset, kSecretBytes);
  return c;
}

bool secretsEqual(const std::array<uint8_t, kSecretBytes>& a, const std::array<uint8_t, kSecretBytes>& b) {
  uint8_t diff = 0;
  for (size_t i = 0; i < kSecretBytes; ++i) diff |= static_cast<uint8_t>(a[i] ^ b[i]);
  return diff == 0;
}

std::array<uint8_t, kSecretBytes> deriveSecret(std::string_view text) {
  // FNV-1a over the text seeds four splitmix64 streams: deterministic and well mixed; not a cryptographic MAC
  // (a derived secret only keeps out strays, as the public header says).
  std::array<uint8_t, kSecretBytes> out{};
  uint64_t h = 0xcbf29ce484222325ull;
  for (char ch : std::string_view("weft-bootstrap-secret:")) h = (h ^ static_cast<uint8_t>(ch)) * 0x100000001b3ull;
  for (char ch : text) h = (h ^ static_cast<uint8_t>(ch)) * 0x100000001b3ull;
  for (size_t word = 0; word < kSecretBytes / 8; ++word) {
    h += 0x9e3779b97f4a7c15ull;
    uint64_t z = h;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    putU64(out.data() + word * 8, z);
  }
  return out;
}

}  // namespace weft::detail
