#include "memory_channel_bench.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <weft/communicator.hpp>
#include <weft/error.hpp>
#include <weft/memory_channel.hpp>
#include <weft/shared_host_memory.hpp>

namespace weft::bench {

namespace {

using Clock = std::chrono::steady_clock;

constexpr uint64_t kBudgetNs = 30'000'000'000ull;
constexpr uint64_t kMaxPacketBytes = 1ull << 20;  // LL packets are for small messages

double secondsSince(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

uint8_t patternByte(int rank, uint64_t i) { return static_cast<uint8_t>(rank * 41 + i * 3 + 7); }

int countWrong(const uint8_t* p, uint64_t bytes, int fromRank) {
  int wrong = 0;
  for (uint64_t i = 0; i < bytes; ++i) wrong += p[i] != patternByte(fromRank, i) ? 1 : 0;
  return wrong;
}

// The floor's signal: a release store of a counter into the peer's mapped word, an acquire spin on our own.
struct RawFlags {
  uint64_t* mine;
  uint64_t* theirs;
  uint64_t sent = 0;
  uint64_t seen = 0;
  void signal() { atomicStore<MemoryOrder::kRelease>(theirs, ++sent); }
  void wait() {
    const uint64_t want = ++seen;
    if (!spinWaitUntil([&] { return atomicLoad<MemoryOrder::kAcquire>(mine) >= want; }, WaitBudget{kBudgetNs})) {
      throw Error(ErrorCode::kTimeout, "memory channel bench floor: the peer stopped answering");
    }
  }
};

}  // namespace

std::vector<BenchRow> runMemoryChannel(Bootstrap& boot, const BenchOptions& options) {
  std::vector<BenchRow> rows;
  const int rank = boot.rank();
  const int peer = rank ^ 1;
  const bool paired = peer < boot.size();
  const bool first = rank < peer;
  const auto sizes = options.sizes();
  const uint64_t maxBytes = sizes.back();

  auto bootPtr = std::shared_ptr<Bootstrap>(&boot, [](Bootstrap*) {});
  Config config = Config::load();
  config.transports[PeerClass::kSameHost] = {"host"};
  config.transports[PeerClass::kSameProcess] = {"host"};
  Communicator comm(bootPtr, config);
  boot.barrier();
  if (!paired) return rows;
  // Memory channels load and store into the peer's pages: a peer on another host (or network namespace) has none
  // this rank can map. Both sides of a pair see the same class, so both skip.
  if (comm.peerClass(peer) == PeerClass::kOtherHost) {
    if (first)
      std::printf("# weft-bench memory channel: skipped (rank %d is on another host: no mapped peer memory)\n", peer);
    return rows;
  }

  // data: the source slice [0, max) and the landing slice [max, 2 max); packets: LL16 room for the largest
  // packet message; flags: two words for the floor.
  const uint64_t packetBytes = packetBufferBytes<LL16Packet>(std::min(maxBytes, kMaxPacketBytes));
  auto dataStorage = allocSharedHostMemory(2 * maxBytes);
  auto packetStorage = allocSharedHostMemory(packetBytes);
  auto flagStorage = allocSharedHostMemory(64);
  auto* data = static_cast<uint8_t*>(dataStorage.get());
  RegisteredMemory localData = comm.registerMemory(data, 2 * maxBytes, MemoryKind::kHost);
  RegisteredMemory localPackets = comm.registerMemory(packetStorage.get(), packetBytes, MemoryKind::kHost);
  RegisteredMemory localFlags = comm.registerMemory(flagStorage.get(), 64, MemoryKind::kHost);
  comm.sendMemory(localData, peer, 200);
  comm.sendMemory(localPackets, peer, 201);
  comm.sendMemory(localFlags, peer, 202);
  RegisteredMemory peerData = comm.recvMemory(peer, 200);
  RegisteredMemory peerPackets = comm.recvMemory(peer, 201);
  RegisteredMemory peerFlags = comm.recvMemory(peer, 202);
  auto sem = std::make_shared<MemoryDevice2DeviceSemaphore>(comm, comm.connect(peer, 203, MemoryKind::kHost), 204,
                                                            MemoryKind::kHost);
  MemoryChannel putChannel(sem, peerData, localData, localPackets);
  MemoryChannel packetChannel(sem, peerPackets, localData, localPackets);
  const DeviceWaitOptions waits{nullptr, 0, kBudgetNs};
  const MemoryChannel::DeviceHandle put = putChannel.deviceHandle(waits);
  const MemoryChannel::DeviceHandle packets = packetChannel.deviceHandle(waits);
  RawFlags raw{static_cast<uint64_t*>(flagStorage.get()), static_cast<uint64_t*>(peerFlags.data())};
  auto* peerLanding = static_cast<uint8_t*>(peerData.data()) + maxBytes;
  for (uint64_t i = 0; i < maxBytes; ++i) data[i] = patternByte(rank, i);
  auto pairSync = [&] {
    if (first) {
      put.signal();
      put.wait();
    } else {
      put.wait();
      put.signal();
    }
  };

  // Semaphore ping-pong: signal, the peer waits and signals back. Floor: the same with raw counter stores.
  {
    const int iters = options.iterations > 0 ? options.iterations : 20000;
    BenchRow row{"memory semaphore ping-pong", "us", 0, iters};
    auto run = [&](auto& s, int n) {
      for (int i = 0; i < n; ++i) {
        if (first) {
          s.signal();
          s.wait();
        } else {
          s.wait();
          s.signal();
        }
      }
    };
    run(put, options.warmup);
    auto t = Clock::now();
    run(put, iters);
    row.weft = secondsSince(t) * 1e6 / iters / 2;
    run(raw, options.warmup);
    t = Clock::now();
    run(raw, iters);
    row.floor = secondsSince(t) * 1e6 / iters / 2;
    rows.push_back(row);
  }

  // LL packet ping-pong: the message goes out as packets under a fresh flag and comes back the same way.
  // Floor: memcpy into the peer's landing slice and a raw counter store, the same back.
  uint32_t flag = 0;
  auto packetRows = [&](auto packetTag, const char* name) {
    using Packet = decltype(packetTag);
    for (uint64_t bytes : sizes) {
      if (bytes > kMaxPacketBytes) break;
      const int iters = options.iterations > 0 ? options.iterations : 2000;
      BenchRow row{name, "us", bytes, iters};
      auto run = [&](int n, bool check) {
        for (int i = 0; i < n; ++i) {
          ++flag;
          if (first) {
            packets.putPackets<Packet>(0, 0, bytes, flag, 0, 1);
            packets.unpackPackets<Packet>(0, maxBytes, bytes, flag, 0, 1);
          } else {
            packets.unpackPackets<Packet>(0, maxBytes, bytes, flag, 0, 1);
            packets.putPackets<Packet>(0, 0, bytes, flag, 0, 1);
          }
          if (check) row.wrong += countWrong(data + maxBytes, bytes, peer);
        }
      };
      run(1, options.check);
      run(options.warmup, false);
      auto t = Clock::now();
      run(iters, false);
      row.weft = secondsSince(t) * 1e6 / iters / 2;
      auto floor = [&](int n) {
        for (int i = 0; i < n; ++i) {
          if (first) {
            std::memcpy(peerLanding, data, bytes);
            raw.signal();
            raw.wait();
          } else {
            raw.wait();
            std::memcpy(peerLanding, data, bytes);
            raw.signal();
          }
        }
      };
      floor(options.warmup);
      t = Clock::now();
      floor(iters);
      row.floor = secondsSince(t) * 1e6 / iters / 2;
      rows.push_back(row);
    }
  };
  packetRows(LL16Packet{}, "LL16 packet ping-pong");
  packetRows(LL8Packet{}, "LL8 packet ping-pong");

  // Put bandwidth: the lower rank streams put + signal into the peer's landing slice; the peer waits for all
  // and acknowledges. Floor: memcpy into the same peer pages with a raw counter store each.
  for (uint64_t bytes : sizes) {
    const int iters = options.iterationsFor(bytes);
    BenchRow row{"memory channel put bandwidth", "GB/s", bytes, iters};
    auto stream = [&](auto& s, int n, bool viaChannel) {
      if (first) {
        for (int i = 0; i < n; ++i) {
          if (viaChannel) {
            put.put(maxBytes, 0, bytes, 0, 1);
          } else {
            std::memcpy(peerLanding, data, bytes);
          }
          s.signal();
        }
        s.wait();
      } else {
        for (int i = 0; i < n; ++i) s.wait();
        s.signal();
      }
    };
    stream(put, 1, true);
    if (!first && options.check) row.wrong = countWrong(data + maxBytes, bytes, peer);
    stream(put, std::min(options.warmup, iters), true);
    pairSync();
    auto t = Clock::now();
    stream(put, iters, true);
    const double weftSeconds = secondsSince(t);
    pairSync();
    t = Clock::now();
    stream(raw, iters, false);
    const double floorSeconds = secondsSince(t);
    row.weft = first ? static_cast<double>(bytes) * iters / weftSeconds / 1e9 : 0;
    row.floor = first ? static_cast<double>(bytes) * iters / floorSeconds / 1e9 : 0;
    rows.push_back(row);
  }
  pairSync();
  return rows;
}

}  // namespace weft::bench
