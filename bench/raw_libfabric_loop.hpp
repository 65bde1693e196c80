// The floor of the libfabric rows of weft-bench primitives: a pair of bare libfabric endpoints (same provider and
// domain as weft's libfabric plugin picks) driven by a plain loop, with none of weft's code in the way.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <weft/bootstrap.hpp>

namespace weft::bench {

/// Whether this weft-bench was built against libfabric (CMake found it); without it RawFabricPair throws.
bool rawLibfabricAvailable();

/// How the raw loop tells the peer that a write has arrived.
enum class RawFabricSignal {
  /// The write itself carries it: fi_writedata (FI_REMOTE_CQ_DATA). The target's completion queue reports the write
  /// only once its bytes are in the target's memory, so one operation is both put and signal. Needs cq_data_size > 0.
  kWriteData,
  /// The write is posted with FI_DELIVERY_COMPLETE; once it completes, fi_atomic(FI_SUM, FI_UINT64) adds 1 to the
  /// peer's flag, which the peer polls. weft's plugin falls back to this protocol where CQ data cannot carry a signal
  /// (docs/libfabric.md, Signals).
  kAtomicAfterCompletion,
};

/// "fi_writedata" or "write+fi_atomic".
const char* rawFabricSignalName(RawFabricSignal signal);

/// Two raw endpoints, one in each rank of a pair, each with a registered source and destination of `bytes` and
/// flag words. Construction is pairwise and collective (both ranks, same tag): addresses and memory keys go through
/// the bootstrap. Progress is manual: every wait reads the completion queue. Every wait gives up after 30 s
/// (Error kTimeout). Not thread-safe.
class RawFabricPair {
 public:
  /// Opens the provider `provider` (empty: as weft's plugin chooses) on `domain` (empty: as the plugin chooses:
  /// WEFT_BOOTSTRAP_INTERFACE's, then not loopback, IPv4 before IPv6), with the plugin's fi_getinfo hints. Uses tags
  /// `tag` to `tag + 2`.
  RawFabricPair(Bootstrap& boot, int peer, const std::string& provider, const std::string& domain, uint64_t bytes,
                int tag);
  ~RawFabricPair();
  RawFabricPair(const RawFabricPair&) = delete;
  RawFabricPair& operator=(const RawFabricPair&) = delete;

  /// The provider, domain and what the loop uses, e.g. "provider tcp;ofi_rxm, domain eth0, ...".
  std::string description() const;
  /// Whether the provider offers `signal` (remote CQ data; FI_SUM on FI_UINT64).
  bool offers(RawFabricSignal signal) const;
  /// The cheapest signal offered: kWriteData (one operation, no completion to wait for) where the provider has
  /// remote CQ data, else kAtomicAfterCompletion.
  RawFabricSignal cheapestSignal() const;

  /// Check run: the lower rank writes `bytes` of a pattern (from `seed`) and signals with `signal`; the higher
  /// rank, which cleared its destination first, returns how many bytes arrived wrong (the lower rank returns 0).
  int checkWrite(uint64_t bytes, uint64_t seed, RawFabricSignal signal);

  /// Ping-pong: the lower rank writes `bytes` and signals with `signal`, the higher waits and answers the same way,
  /// `iters` times. Returns the one-way time in microseconds (round trip / 2), on both ranks.
  double pingPongMicros(uint64_t bytes, int iters, RawFabricSignal signal);

  /// Stream: the lower rank writes `bytes` `iters` times keeping a window of writes in flight (half the transmit
  /// queue, as the plugin does), waits for their completions, signals once (cheapestSignal); the higher rank waits
  /// for it and acknowledges. Returns GB/s (10^9 bytes per second) on the lower rank, 0 on the higher.
  double streamGigabytesPerSecond(uint64_t bytes, int iters);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace weft::bench
