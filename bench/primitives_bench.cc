// weft-bench primitives: put/signal/wait latency and put bandwidth between pairs of ranks over the
// transport the config chooses (the host transport between processes of one host), each beside a floor
// measured in the same run: over the host transport a raw shared buffer, over libfabric a raw libfabric loop.
#include "primitives_bench.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <weft/communicator.hpp>
#include <weft/device.hpp>
#include <weft/error.hpp>
#include <weft/host_semaphore.hpp>
#include <weft/shared_host_memory.hpp>

#include "raw_libfabric_loop.hpp"
#include "raw_shared_page.hpp"

namespace weft::bench {

namespace {

using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

void fillPattern(uint8_t* p, uint64_t bytes, uint64_t seed) {
  for (uint64_t i = 0; i < bytes; ++i) p[i] = static_cast<uint8_t>((i * 131 + seed * 7 + 1) & 0xff);
}

int countWrong(const uint8_t* p, uint64_t bytes, uint64_t seed) {
  int wrong = 0;
  for (uint64_t i = 0; i < bytes; ++i) {
    if (p[i] != static_cast<uint8_t>((i * 131 + seed * 7 + 1) & 0xff)) ++wrong;
  }
  return wrong;
}

// Raw ping-pong: memcpy of `bytes` straight into the peer's buffer (the same mapped pages weft writes to),
// then a release store of the round number into the peer's flag, which it spins on with acquire loads.
// Both sides read the flags' current values, then meet (`sync`) before either stores: reading them while
// the peer might already be storing would race.
double rawPingPongMicros(RawSharedBuffer& raw, bool first, uint8_t* peerBuffer, const uint8_t* src, uint64_t bytes,
                         int iters, const std::function<void()>& sync) {
  uint64_t* mine = raw.flag(first ? 0 : 1);
  uint64_t* theirs = raw.flag(first ? 1 : 0);
  uint64_t base = atomicLoad<MemoryOrder::kAcquire>(mine);
  uint64_t sent = atomicLoad<MemoryOrder::kAcquire>(theirs);
  sync();
  auto waitFor = [&](uint64_t v) {
    if (!spinWaitUntil([&] { return atomicLoad<MemoryOrder::kAcquire>(mine) >= v; }, WaitBudget{30'000'000'000ull})) {
      throw Error(ErrorCode::kTimeout, "raw ping-pong: the peer stopped answering");
    }
  };
  auto t = Clock::now();
  for (int i = 1; i <= iters; ++i) {
    if (first) {
      std::memcpy(peerBuffer, src, bytes);
      atomicStore<MemoryOrder::kRelease>(theirs, sent + i);
      waitFor(base + i);
    } else {
      waitFor(base + i);
      std::memcpy(peerBuffer, src, bytes);
      atomicStore<MemoryOrder::kRelease>(theirs, sent + i);
    }
  }
  return secondsSince(t) * 1e6 / iters / 2;
}

}  // namespace

std::vector<BenchRow> runPrimitives(Bootstrap& boot, const BenchOptions& options) {
  std::vector<BenchRow> rows;
  const int rank = boot.rank();
  const int peer = rank ^ 1;
  const bool paired = peer < boot.size();
  const bool first = rank < peer;
  const auto sizes = options.sizes();
  const uint64_t maxBytes = sizes.back();

  // Every rank takes part in the collective setup; a rank without a partner (odd size) only waits.
  auto bootPtr = std::shared_ptr<Bootstrap>(&boot, [](Bootstrap*) {});
  Communicator comm(bootPtr);
  boot.barrier();
  if (!paired) return rows;
  std::shared_ptr<void> dstStorage = allocSharedHostMemory(maxBytes);
  std::shared_ptr<void> srcStorage = allocSharedHostMemory(maxBytes);
  auto* src = static_cast<uint8_t*>(srcStorage.get());
  auto* dst = static_cast<uint8_t*>(dstStorage.get());
  RegisteredMemory dstLocal = comm.registerMemory(dst, maxBytes, MemoryKind::kHost);
  RegisteredMemory srcLocal = comm.registerMemory(src, maxBytes, MemoryKind::kHost);
  comm.sendMemory(dstLocal, peer, 100);
  RegisteredMemory remote = comm.recvMemory(peer, 100);
  std::shared_ptr<Connection> conn = comm.connect(peer, 101, MemoryKind::kHost);
  Host2HostSemaphore sem(comm, conn, 102);
  fillPattern(src, maxBytes, rank);
  auto pairSync = [&] {
    if (first) {
      sem.signal();
      sem.wait();
    } else {
      sem.wait();
      sem.signal();
    }
  };

  // The floor. Over libfabric the peer's memory is not mapped: the floor is a raw libfabric loop on its own
  // endpoints (same provider and domain). Otherwise memcpy into the peer's mapped pages (the host transport).
  const bool overFabric = comm.transportFor(peer, MemoryKind::kHost) == "libfabric";
  std::unique_ptr<RawSharedBuffer> raw;
  std::unique_ptr<RawFabricPair> fabric;
  uint8_t* peerBuffer = nullptr;
  std::string latencyTitle = "put+signal latency", bandwidthTitle = "put bandwidth";
  if (overFabric) {
    const auto fabricOptions = comm.config().optionsFor("libfabric");
    auto option = [&](const char* key) {
      auto it = fabricOptions.find(key);
      return it != fabricOptions.end() ? it->second : std::string();
    };
    std::string floorText;
    if (rawLibfabricAvailable()) {
      fabric = std::make_unique<RawFabricPair>(boot, peer, option("provider"), option("domain"), maxBytes, 104);
      latencyTitle += std::string(" [raw ") + rawFabricSignalName(fabric->cheapestSignal()) + "]";
      bandwidthTitle += " [raw fi_write]";
      floorText = "raw libfabric loop (" + fabric->description() + ")";
    } else {
      latencyTitle += " [floor skipped]";
      bandwidthTitle += " [floor skipped]";
      floorText = "skipped: weft-bench was built without libfabric";
    }
    if (rank == 0) {
      std::printf("# weft-bench primitives: rank 0 -> 1 over libfabric; floor: %s\n", floorText.c_str());
      std::fflush(stdout);
    }
  } else {
    raw = std::make_unique<RawSharedBuffer>(boot, peer, 0, 103);
    // The peer's buffer as the host transport maps it: the floors write to the very same pages.
    peerBuffer = static_cast<uint8_t*>(remote.data());
    if (peerBuffer == nullptr) {
      throw Error(ErrorCode::kNotSupported, "the transport " + conn->transport() + " does not map peer memory");
    }
  }

  // Latency: put + signal, the peer waits and answers the same way.
  std::vector<BenchRow> protocolRows;  // libfabric: the second floor's rows, after the first's
  for (uint64_t bytes : sizes) {
    if (bytes > (1ull << 20)) break;
    const int iters = options.iterations > 0 ? options.iterations : 2000;
    BenchRow row{latencyTitle, "us", bytes, iters};
    // Check run: the receiver verifies what arrived.
    if (first) {
      conn->write(remote, 0, srcLocal, 0, bytes);
      sem.signal();
      sem.wait();
      row.wrong = 0;
    } else {
      sem.wait();
      row.wrong = options.check ? countWrong(dst, bytes, peer) : 0;
      conn->write(remote, 0, srcLocal, 0, bytes);
      sem.signal();
    }
    auto pingPong = [&](int n) {
      for (int i = 0; i < n; ++i) {
        if (first) {
          conn->write(remote, 0, srcLocal, 0, bytes);
          sem.signal();
          sem.wait();
        } else {
          sem.wait();
          conn->write(remote, 0, srcLocal, 0, bytes);
          sem.signal();
        }
      }
    };
    // The floors: over libfabric the raw loop with the cheapest signal, and beside it (second row) the raw loop
    // running the plugin's fallback protocol (write, its completion, then the atomic), where that is not already
    // the cheapest; otherwise the raw shared buffer.
    constexpr RawFabricSignal kWeftProtocol = RawFabricSignal::kAtomicAfterCompletion;
    const RawFabricSignal cheapest = fabric ? fabric->cheapestSignal() : kWeftProtocol;
    const bool protocolRow = fabric && cheapest != kWeftProtocol && fabric->offers(kWeftProtocol);
    BenchRow same{std::string("put+signal latency [raw ") + rawFabricSignalName(kWeftProtocol) + "]", "us", bytes,
                  iters};
    if (fabric && options.check) {
      row.wrong += fabric->checkWrite(bytes, bytes, cheapest);
      if (protocolRow) same.wrong = fabric->checkWrite(bytes, bytes + 2, kWeftProtocol);
    }
    // weft and its floors take turns, each round (warm-up, then timed), and each keeps its fastest: a slow moment of
    // the machine then spoils one round of one of them, not the ratio.
    auto fastest = [](double& best, double us) { best = best == 0 ? us : std::min(best, us); };
    for (int round = 0; round < options.rounds; ++round) {
      pingPong(options.warmup);
      const auto t = Clock::now();
      pingPong(iters);
      fastest(row.weft, secondsSince(t) * 1e6 / iters / 2);
      if (fabric) {
        fabric->pingPongMicros(bytes, options.warmup, cheapest);
        fastest(row.floor, fabric->pingPongMicros(bytes, iters, cheapest));
        if (protocolRow) {
          fabric->pingPongMicros(bytes, options.warmup, kWeftProtocol);
          fastest(same.floor, fabric->pingPongMicros(bytes, iters, kWeftProtocol));
        }
      } else if (raw) {
        rawPingPongMicros(*raw, first, peerBuffer, src, bytes, options.warmup, pairSync);
        fastest(row.floor, rawPingPongMicros(*raw, first, peerBuffer, src, bytes, iters, pairSync));
      }
    }
    if (protocolRow) {
      same.weft = row.weft;
      protocolRows.push_back(same);
    }
    rows.push_back(row);
  }
  rows.insert(rows.end(), protocolRows.begin(), protocolRows.end());

  // Bandwidth: the lower rank streams puts, each with a signal; the peer waits for all, then acknowledges.
  for (uint64_t bytes : sizes) {
    const int iters = options.iterationsFor(bytes);
    BenchRow row{bandwidthTitle, "GB/s", bytes, iters};
    auto stream = [&](int n) {
      if (first) {
        for (int i = 0; i < n; ++i) {
          conn->write(remote, 0, srcLocal, 0, bytes);
          sem.signal();
        }
        conn->flush();
        sem.wait();
      } else {
        for (int i = 0; i < n; ++i) sem.wait();
        sem.signal();
      }
    };
    stream(1);
    if (!first && options.check) row.wrong = countWrong(dst, bytes, peer);
    const int warmup = std::min(options.warmup, iters);
    auto weftRate = [&] {
      stream(warmup);
      pairSync();
      const auto t = Clock::now();
      stream(iters);
      return static_cast<double>(bytes) * iters / secondsSince(t) / 1e9;
    };
    std::function<double()> floorRate;
    if (fabric) {
      // Floor: the same bytes as raw fi_writes with a window in flight, one signal after their completions, the
      // peer's acknowledgement (weft's stream signals every put; the raw loop needs only the last).
      if (options.check) row.wrong += fabric->checkWrite(bytes, bytes + 1, fabric->cheapestSignal());
      floorRate = [&] {
        fabric->streamGigabytesPerSecond(bytes, warmup);
        return fabric->streamGigabytesPerSecond(bytes, iters);
      };
    } else if (raw) {
      // Floor: the same bytes memcpy'd straight into the same peer buffer, each copy followed by a release
      // store of a counter that the peer polls until the last one arrives (what put + signal + wait is at
      // its cheapest), then the same acknowledgement.
      floorRate = [&] {
        uint64_t* flag = raw->flag(1);
        uint64_t* ack = raw->flag(0);
        const uint64_t flagBase = atomicLoad<MemoryOrder::kAcquire>(flag);
        const uint64_t ackBase = atomicLoad<MemoryOrder::kAcquire>(ack);
        auto rawWait = [](uint64_t* word, uint64_t v) {
          if (!spinWaitUntil([&] { return atomicLoad<MemoryOrder::kAcquire>(word) >= v; },
                             WaitBudget{30'000'000'000ull})) {
            throw Error(ErrorCode::kTimeout, "raw bandwidth floor: the peer stopped answering");
          }
        };
        pairSync();
        const auto t = Clock::now();
        if (first) {
          for (int i = 1; i <= iters; ++i) {
            std::memcpy(peerBuffer, src, bytes);
            atomicStore<MemoryOrder::kRelease>(flag, flagBase + i);
          }
          rawWait(ack, ackBase + 1);
        } else {
          rawWait(flag, flagBase + iters);
          atomicStore<MemoryOrder::kRelease>(ack, ackBase + 1);
        }
        return first ? static_cast<double>(bytes) * iters / secondsSince(t) / 1e9 : 0.0;
      };
    }
    // Alternating rounds (each with its warm-up), each side's best, as the latency rows.
    for (int round = 0; round < options.rounds; ++round) {
      row.weft = std::max(row.weft, weftRate());
      if (floorRate) row.floor = std::max(row.floor, floorRate());
    }
    rows.push_back(row);
  }
  pairSync();
  return rows;
}

}  // namespace weft::bench
