// Arbitrary bytes into RegisteredMemory deserialization: only weft::Error may come out, and a blob that
// parses must re-serialize to the same bytes.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <weft/error.hpp>
#include <weft/registered_memory.hpp>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto d = weft::RegisteredMemoryDescriptor::deserialize(data, size);
    auto again = d.serialize();
    if (again.size() != size || !std::equal(again.begin(), again.end(), data)) std::abort();
  } catch (const weft::Error&) {
  }
  return 0;
}
