// Feeds arbitrary text to Config::parse: a malformed file must give weft::Error(kConfigError) and nothing else (no
// crash, no other exception, no sanitizer report). A file that parses must satisfy the invariants below.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <weft/config.hpp>
#include <weft/error.hpp>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    weft::Config config = weft::Config::parse(text, "fuzz.toml");
    // Whatever parsed is usable: all three classes present, timeout positive.
    for (weft::PeerClass c : {weft::PeerClass::kSameProcess, weft::PeerClass::kSameHost, weft::PeerClass::kOtherHost}) {
      (void)config.transportsFor(c).size();
    }
    if (config.transports.size() != 3 || config.bootstrapTimeout.count() < 1) std::abort();
  } catch (const weft::Error& e) {
    // The one allowed failure; its message must say where.
    if (e.code() != weft::ErrorCode::kConfigError) std::abort();
    if (e.message().rfind("fuzz.toml:", 0) != 0) std::abort();
  }
  return 0;
}
