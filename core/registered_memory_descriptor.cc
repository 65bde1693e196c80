#include <weft/registered_memory.hpp>

#include "serialization.hpp"

namespace weft {
namespace {
constexpr uint32_t kMagic = 0x4d544657;  // "WFTM"
}

std::vector<uint8_t> RegisteredMemoryDescriptor::serialize() const {
  if (entries.size() > kMaxEntries)
    throw Error(ErrorCode::kInvalidArgument, "too many transport handles for one memory");
  detail::ByteWriter w;
  w.put<uint32_t>(kMagic);
  w.put<uint16_t>(kVersion);
  w.put<uint8_t>(static_cast<uint8_t>(kind));
  w.put<uint8_t>(0);
  w.put<int32_t>(rank);
  w.put<uint64_t>(size);
  w.put<uint64_t>(hostHash);
  w.put<uint32_t>(pid);
  w.put<uint64_t>(address);
  w.put<uint32_t>(static_cast<uint32_t>(entries.size()));
  for (const Entry& e : entries) {
    if (e.transport.size() > kMaxTransportName || e.handle.size() > kMaxHandleBytes) {
      throw Error(ErrorCode::kInvalidArgument, "transport handle of '" + e.transport + "' is too large to serialize");
    }
    w.putString(e.transport);
    w.putBlob(e.handle);
  }
  return w.take();
}

RegisteredMemoryDescriptor RegisteredMemoryDescriptor::deserialize(const uint8_t* data, size_t size) {
  detail::ByteReader r(data, size, "registered memory blob");
  if (r.get<uint32_t>() != kMagic) r.fail("bad magic (not a weft registered memory)");
  uint16_t version = r.get<uint16_t>();
  if (version != kVersion) {
    r.fail("format version " + std::to_string(version) + ", this weft reads version " + std::to_string(kVersion));
  }
  RegisteredMemoryDescriptor d;
  uint8_t kind = r.get<uint8_t>();
  if (kind > static_cast<uint8_t>(MemoryKind::kGpu)) r.fail("unknown memory kind " + std::to_string(kind));
  d.kind = static_cast<MemoryKind>(kind);
  if (r.get<uint8_t>() != 0) r.fail("reserved byte is not zero");
  d.rank = r.get<int32_t>();
  if (d.rank < 0) r.fail("negative rank");
  d.size = r.get<uint64_t>();
  d.hostHash = r.get<uint64_t>();
  d.pid = r.get<uint32_t>();
  d.address = r.get<uint64_t>();
  uint32_t n = r.get<uint32_t>();
  if (n > kMaxEntries)
    r.fail(std::to_string(n) + " transport handles exceed the limit of " + std::to_string(kMaxEntries));
  for (uint32_t i = 0; i < n; ++i) {
    Entry e;
    e.transport = r.getString(kMaxTransportName);
    if (e.transport.empty()) r.fail("empty transport name");
    e.handle = r.getBlob(kMaxHandleBytes);
    d.entries.push_back(std::move(e));
  }
  if (r.remaining() != 0) r.fail(std::to_string(r.remaining()) + " trailing bytes");
  return d;
}

}  // namespace weft
