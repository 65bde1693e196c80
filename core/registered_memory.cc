#include <weft/error.hpp>
#include <weft/registered_memory.hpp>

#include "registered_memory_impl.hpp"

namespace weft {

namespace {
const detail::RegisteredMemoryImpl& checked(const std::shared_ptr<detail::RegisteredMemoryImpl>& impl) {
  if (!impl) throw Error(ErrorCode::kInvalidUsage, "use of an empty RegisteredMemory");
  return *impl;
}
}  // namespace

void* RegisteredMemory::data() const { return checked(impl_).data; }
uint64_t RegisteredMemory::size() const { return checked(impl_).descriptor.size; }
int RegisteredMemory::rank() const { return checked(impl_).descriptor.rank; }
bool RegisteredMemory::isLocal() const { return checked(impl_).local; }
MemoryKind RegisteredMemory::kind() const { return checked(impl_).descriptor.kind; }

std::vector<std::string> RegisteredMemory::transports() const {
  const auto& impl = checked(impl_);
  std::vector<std::string> names;
  if (impl.local) {
    for (const auto& [name, reg] : impl.localRegistrations) names.push_back(name);
  } else {
    for (const auto& [name, reg] : impl.remoteRegistrations) names.push_back(name);
  }
  return names;
}

std::vector<uint8_t> RegisteredMemory::serialize() const {
  const auto& impl = checked(impl_);
  if (!impl.local) throw Error(ErrorCode::kInvalidUsage, "only a local registration can be sent to peers");
  return impl.descriptor.serialize();
}

}  // namespace weft
