#include "ibverbs_options.hpp"

#include <cerrno>
#include <cstdlib>

#include "ibverbs_failure.hpp"

namespace weft::ibverbs {
namespace {

uint32_t parseInt(const std::string& key, const std::string& value, uint32_t lo, uint32_t hi) {
  char* end = nullptr;
  errno = 0;
  unsigned long long v = std::strtoull(value.c_str(), &end, 10);
  // strtoull accepts a sign and leading blanks; a config value has neither.
  if (value.empty() || value[0] < '0' || value[0] > '9' || *end != '\0' || errno != 0 || v < lo || v > hi) {
    throw IbvFailure(weftInvalidArgument, "ibverbs option " + key + "='" + value + "' is not an integer in [" +
                                              std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  return static_cast<uint32_t>(v);
}

bool parseBool(const std::string& key, const std::string& value) {
  for (const char* t : {"true", "1", "yes", "on"}) {
    if (value == t) return true;
  }
  for (const char* f : {"false", "0", "no", "off"}) {
    if (value == f) return false;
  }
  throw IbvFailure(weftInvalidArgument,
                   "ibverbs option " + key + "='" + value + "' is not a boolean (true/false, 1/0, yes/no, on/off)");
}

}  // namespace

IbvOptions parseOptions(const std::vector<std::pair<std::string, std::string>>& options) {
  IbvOptions o;
  for (const auto& [key, value] : options) {
    if (key == "device") {
      if (value.empty() || value.size() >= 64) {
        throw IbvFailure(weftInvalidArgument, "ibverbs option device='" + value + "' must be 1 to 63 characters");
      }
      o.device = value;
    } else if (key == "port") {
      o.port = parseInt(key, value, 1, 255);
    } else if (key == "gid_index") {
      o.gidIndex = static_cast<int32_t>(parseInt(key, value, 0, 255));
    } else if (key == "qps_per_peer") {
      o.qpsPerPeer = parseInt(key, value, 1, 64);
    } else if (key == "atomics") {
      o.signalMode = parseBool(key, value) ? SignalMode::kAtomic : SignalMode::kSend;
    } else {
      throw IbvFailure(weftInvalidArgument, "unknown option '" + key +
                                                "' (the ibverbs transport knows device, port, gid_index, qps_per_peer, "
                                                "atomics)");
    }
  }
  return o;
}

}  // namespace weft::ibverbs
