// The shared state behind RegisteredMemory (core-internal).
#pragma once

#include <map>
#include <string>
#include <weft/registered_memory.hpp>

#include "transport_plugin.hpp"

namespace weft::detail {

struct RegisteredMemoryImpl {
  RegisteredMemoryDescriptor descriptor;
  bool local = false;
  void* data = nullptr;  ///< local pointer, or the mapped peer memory (nullptr when not mappable)
  std::map<std::string, TransportMemory> localRegistrations;         ///< by transport name (local memory)
  std::map<std::string, TransportRemoteMemory> remoteRegistrations;  ///< by transport name (a peer's memory)
};

}  // namespace weft::detail
