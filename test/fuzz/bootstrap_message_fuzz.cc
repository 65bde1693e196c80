// libFuzzer target for the bootstrap wire codec: arbitrary bytes go through the frame decoder (in chunks of a
// size the input picks, as a socket would deliver them) and every payload through the setup-message decoders.
// Anything but weft::Error (a crash, a sanitizer report, a huge allocation) is a bug.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <weft/error.hpp>

#include "bootstrap_message.hpp"

using namespace weft;
using namespace weft::detail;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  size_t chunk = 1 + data[0] % 64;
  bool hello = (data[0] & 0x80) != 0;
  ++data;
  --size;
  if (size >= kUniqueIdBytes) {
    UniqueId id;
    std::memcpy(id.bytes.data(), data, kUniqueIdBytes);
    try {
      UniqueIdContents c = decodeUniqueId(id);
      (void)c.root.toString();
    } catch (const Error&) {
    }
  }
  FrameDecoder decoder;
  if (hello) decoder.setMaxLength(kMaxHelloBytes);
  try {
    for (size_t pos = 0; pos < size; pos += chunk) {
      decoder.feed(data + pos, std::min(chunk, size - pos));
      while (decoder.hasFrame()) {
        Frame f = decoder.pop();
        try {
          switch (f.type) {
            case FrameType::kHello: (void)decodeHello(f.payload).listen.toString(); break;
            case FrameType::kPeerTable: (void)decodePeerTable(f.payload, f.tag & 0xff); break;
            case FrameType::kAbort: (void)decodeAbort(f.payload); break;
            default: break;
          }
        } catch (const Error&) {
        }
      }
    }
  } catch (const Error&) {
  }
  return 0;
}
