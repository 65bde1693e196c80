// The bootstrap's wire format: frame headers, the incremental frame decoder, the setup messages and the layout
// of the UniqueId. Kept apart from the sockets so the fuzzer (test/fuzz/bootstrap_message_fuzz.cc) can feed it
// arbitrary bytes. Every decoder throws Error(kProtocolError) (kInvalidArgument for a UniqueId) on bad input and
// never allocates more than the input justifies.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <span>
#include <string>
#include <vector>
#include <weft/bootstrap.hpp>
#include <weft/unique_id.hpp>

namespace weft::detail {

/// "WFTB", little endian, first in every frame.
inline constexpr uint32_t kFrameMagic = 0x42544657;
/// Wire version; a peer with another one is refused.
inline constexpr uint16_t kWireVersion = 1;
/// Bytes of a frame header: magic u32, version u16, type u16, tag i32, reserved u32, length u64.
inline constexpr size_t kFrameHeaderBytes = 24;
/// Largest payload of any frame (the public constant, repeated here for the codec).
inline constexpr uint64_t kMaxFrameBytes = kMaxBootstrapMessageBytes;
/// Largest payload accepted before a connection has presented the secret, so a stray cannot make us buffer much.
inline constexpr uint64_t kMaxHelloBytes = 256;
/// Bytes of the per-job secret.
inline constexpr size_t kSecretBytes = 32;

/// What a frame carries.
enum class FrameType : uint16_t {
  kHello = 1,       ///< first frame on every connection: secret, rank, size, listen address
  kPeerTable = 2,   ///< root -> rank: every rank's listen address
  kAbort = 3,       ///< root -> rank: setup failed, with the error code and reason
  kUser = 4,        ///< tagged send/recv
  kCollective = 5,  ///< allGather / barrier / broadcast (tag says which)
};

/// A decoded frame header.
struct FrameHeader {
  FrameType type = FrameType::kUser;
  int32_t tag = 0;
  uint64_t length = 0;
};

/// A whole frame.
struct Frame {
  FrameType type = FrameType::kUser;
  int32_t tag = 0;
  std::vector<uint8_t> payload;
};

/// Writes the header into out[0, kFrameHeaderBytes).
void encodeFrameHeader(const FrameHeader& header, uint8_t* out);

/// Decodes and checks a header (magic, version, known type, length <= maxLength). Throws kProtocolError.
FrameHeader decodeFrameHeader(std::span<const uint8_t> bytes, uint64_t maxLength = kMaxFrameBytes);

/// Header plus payload in one buffer. Throws kInvalidArgument when bytes > kMaxFrameBytes.
std::vector<uint8_t> encodeFrame(FrameType type, int32_t tag, const void* payload, uint64_t bytes);

/// Cuts a byte stream into frames. Memory grows only with the bytes actually fed in.
class FrameDecoder {
 public:
  /// Appends `size` bytes of the stream. Throws kProtocolError at the first bad header; the decoder is unusable
  /// afterwards. Complete frames are queued for pop().
  void feed(const uint8_t* data, size_t size);

  /// Whether a complete frame is queued.
  bool hasFrame() const { return !frames_.empty(); }

  /// Takes the oldest complete frame (hasFrame() must be true).
  Frame pop();

  /// Whether part of a frame has been fed but not completed (an end of stream now means truncation).
  bool midFrame() const { return headerFill_ > 0 || inBody_; }

  /// Largest payload accepted from now on (kMaxHelloBytes until the peer is authenticated). While the limit is
  /// at most kMaxHelloBytes the decoder stops after each complete frame and keeps the bytes behind it: a peer may
  /// send its hello and its first messages in one burst, and those messages must be judged by the limit that
  /// holds once the hello has been checked. Raising the limit decodes the kept bytes (more frames may queue).
  void setMaxLength(uint64_t maxLength);

 private:
  uint64_t maxLength_ = kMaxFrameBytes;
  std::vector<uint8_t> held_;  ///< bytes after a frame completed under the hello limit
  std::array<uint8_t, kFrameHeaderBytes> header_{};
  size_t headerFill_ = 0;
  bool inBody_ = false;
  FrameHeader current_{};
  std::vector<uint8_t> body_;
  std::deque<Frame> frames_;
};

/// An IPv4 or IPv6 socket address in wire form.
struct SocketAddress {
  uint8_t family = 0;  ///< 4 or 6
  uint16_t port = 0;
  std::array<uint8_t, 16> ip{};  ///< network byte order; IPv4 uses the first 4 bytes
  uint32_t scopeId = 0;          ///< IPv6 link-local scope
  /// "1.2.3.4:5" or "[::1]:5".
  std::string toString() const;
  friend bool operator==(const SocketAddress&, const SocketAddress&) = default;
};

/// Bytes of an encoded SocketAddress.
inline constexpr size_t kSocketAddressBytes = 24;

/// First frame on a connection.
struct Hello {
  std::array<uint8_t, kSecretBytes> secret{};
  int32_t rank = -1;
  int32_t size = 0;
  SocketAddress listen;  ///< where this rank accepts its peers (family 0 when not announced)
};

std::vector<uint8_t> encodeHello(const Hello& hello);
/// Throws kProtocolError unless the payload is exactly one well-formed Hello.
Hello decodeHello(std::span<const uint8_t> payload);

std::vector<uint8_t> encodePeerTable(const std::vector<SocketAddress>& table);
/// Throws kProtocolError unless the payload holds exactly `expectedSize` well-formed addresses.
std::vector<SocketAddress> decodePeerTable(std::span<const uint8_t> payload, int expectedSize);

/// Why the root gave up on setup.
struct AbortNotice {
  uint32_t code = 0;  ///< an ErrorCode value
  std::string reason;
};

std::vector<uint8_t> encodeAbort(const AbortNotice& notice);
/// Throws kProtocolError on a malformed notice (unknown codes become kRemoteError).
AbortNotice decodeAbort(std::span<const uint8_t> payload);

/// What a UniqueId holds.
struct UniqueIdContents {
  SocketAddress root;
  std::array<uint8_t, kSecretBytes> secret{};
};

/// Layout: magic "WFID" (4), version u16, reserved u16, root address (24), secret (32), zeros to 128.
UniqueId encodeUniqueId(const UniqueIdContents& contents);
/// Throws kInvalidArgument naming the problem (magic, version, address family, port).
UniqueIdContents decodeUniqueId(const UniqueId& id);

/// Compares secrets in time independent of where they differ.
bool secretsEqual(const std::array<uint8_t, kSecretBytes>& a, const std::array<uint8_t, kSecretBytes>& b);

/// A secret derived from text (WEFT_BOOTSTRAP_SECRET or the root address): the same text gives the same secret.
std::array<uint8_t, kSecretBytes> deriveSecret(std::string_view text);

}  // namespace weft::detail
