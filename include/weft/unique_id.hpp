/// The 128-byte job id that lets the ranks of one job find each other (same size as ncclUniqueId).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace weft {

/// Size of a UniqueId in bytes: the NCCL size, so the NCCL API can carry one unchanged.
inline constexpr size_t kUniqueIdBytes = 128;

/// Opaque job id: magic and version, the root's address (IPv4 or IPv6, and port) and a random per-job secret.
/// Create it once (TcpBootstrap::createUniqueId) and hand the same bytes to every rank.
struct UniqueId {
  std::array<uint8_t, kUniqueIdBytes> bytes{};
  friend bool operator==(const UniqueId&, const UniqueId&) = default;
};

/// Lowercase hex text of the id: always 2 * kUniqueIdBytes (256) characters.
std::string uniqueIdToString(const UniqueId& id);

/// Parses the text of uniqueIdToString (either case; surrounding whitespace ignored). Throws
/// Error(kInvalidArgument) naming the problem when the text is not exactly 256 hex digits. The content is
/// checked only when a bootstrap uses the id.
UniqueId uniqueIdFromString(std::string_view text);

}  // namespace weft
