// The ibverbs transport's device-free pieces: write splitting, send-mode signal application, option parsing.
#include <gtest/gtest.h>

#include <cstring>
#include <thread>
#include <vector>

#include "ibverbs_failure.hpp"
#include "ibverbs_options.hpp"
#include "ibverbs_signal.hpp"
#include "ibverbs_split.hpp"

namespace weft::ibverbs {
namespace {

void expectCovers(const std::vector<WriteChunk>& chunks, uint64_t bytes, uint32_t qps, uint64_t maxMsg) {
  uint64_t next = 0;
  for (const auto& c : chunks) {
    EXPECT_EQ(c.offset, next);
    EXPECT_GT(c.bytes, 0u);
    EXPECT_LE(c.bytes, maxMsg);
    EXPECT_LT(c.qp, qps);
    next += c.bytes;
  }
  EXPECT_EQ(next, bytes);
}

TEST(IbverbsSplitTest, SmallWriteStaysOnTheRoundRobinQp) {
  auto c = splitWrite(1000, 4, 2, 1 << 20);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].qp, 2u);
  EXPECT_EQ(c[0].bytes, 1000u);
}

TEST(IbverbsSplitTest, LargeWriteIsStripedOverEveryQpAligned) {
  const uint64_t bytes = 1 << 20;
  auto c = splitWrite(bytes, 4, 1, 1 << 30);
  expectCovers(c, bytes, 4, 1 << 30);
  ASSERT_EQ(c.size(), 4u);
  EXPECT_EQ(c[0].qp, 1u);
  EXPECT_EQ(c[1].qp, 2u);
  EXPECT_EQ(c[2].qp, 3u);
  EXPECT_EQ(c[3].qp, 0u);
  for (const auto& k : c) EXPECT_EQ(k.offset % kStripeAlignment, 0u);
}

TEST(IbverbsSplitTest, MessageSizeLimitCutsEachStripe) {
  const uint64_t bytes = 3 * 1000 * 1000 + 7;
  auto c = splitWrite(bytes, 3, 0, 100000);
  expectCovers(c, bytes, 3, 100000);
  std::vector<uint64_t> perQp(3, 0);
  for (const auto& k : c) perQp[k.qp] += k.bytes;
  for (uint64_t b : perQp) EXPECT_GT(b, 900000u);  // spread, not piled onto one QP
}

TEST(IbverbsSplitTest, OddSizesAndOneQp) {
  for (uint64_t bytes : {1ull, 4095ull, 65536ull, 65537ull, 200001ull}) {
    for (uint32_t qps : {1u, 2u, 7u, 64u}) {
      expectCovers(splitWrite(bytes, qps, qps - 1, 4096), bytes, qps, 4096);
    }
  }
  EXPECT_TRUE(splitWrite(0, 2, 0, 4096).empty());
}

SignalMessage msg(uint32_t key, uint64_t offset, uint64_t value) { return {kSignalMagic, key, offset, value}; }

TEST(IbverbsSignalTest, AppliesAddsExactlyFromSeveralThreads) {
  alignas(8) uint64_t words[4] = {};
  SignalTargets t;
  t.add(7, reinterpret_cast<uint8_t*>(words), sizeof(words), true);
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&] {
      for (int k = 0; k < 1000; ++k) {
        SignalMessage m = msg(7, 16, 3);
        ASSERT_EQ(t.apply(&m, sizeof(m)), "");
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(words[2], 12000u);
  EXPECT_EQ(words[0] + words[1] + words[3], 0u);
}

TEST(IbverbsSignalTest, RefusesMalformedAndOutOfBoundsSignals) {
  alignas(8) uint64_t words[2] = {};
  SignalTargets t;
  t.add(1, reinterpret_cast<uint8_t*>(words), sizeof(words), true);
  t.add(2, reinterpret_cast<uint8_t*>(words), sizeof(words), false);
  SignalMessage m = msg(1, 8, 1);
  EXPECT_NE(t.apply(&m, sizeof(m) - 1).find("bytes"), std::string::npos);
  SignalMessage bad = m;
  bad.magic = 0;
  EXPECT_NE(t.apply(&bad, sizeof(bad)).find("magic"), std::string::npos);
  SignalMessage unknown = msg(3, 0, 1);
  EXPECT_NE(t.apply(&unknown, sizeof(unknown)).find("not registered"), std::string::npos);
  SignalMessage beyond = msg(1, 9, 1);
  EXPECT_NE(t.apply(&beyond, sizeof(beyond)).find("beyond"), std::string::npos);
  SignalMessage huge = msg(1, UINT64_MAX - 3, 1);
  EXPECT_NE(t.apply(&huge, sizeof(huge)).find("beyond"), std::string::npos);
  SignalMessage unaligned = msg(1, 4, 1);
  EXPECT_NE(t.apply(&unaligned, sizeof(unaligned)).find("aligned"), std::string::npos);
  SignalMessage gpu = msg(2, 0, 1);
  EXPECT_NE(t.apply(&gpu, sizeof(gpu)).find("GPU"), std::string::npos);
  EXPECT_EQ(words[0] + words[1], 0u);
  EXPECT_EQ(t.apply(&m, sizeof(m)), "");
  EXPECT_EQ(words[1], 1u);
  t.remove(1);
  EXPECT_NE(t.apply(&m, sizeof(m)).find("not registered"), std::string::npos);
  EXPECT_EQ(words[1], 1u);
}

std::string optionError(std::vector<std::pair<std::string, std::string>> o) {
  try {
    parseOptions(o);
  } catch (const IbvFailure& f) {
    EXPECT_EQ(f.code(), weftInvalidArgument);
    return f.what();
  }
  return "";
}

TEST(IbverbsOptionsTest, ParsesEveryOption) {
  IbvOptions d = parseOptions({});
  EXPECT_TRUE(d.device.empty());
  EXPECT_EQ(d.port, 0u);
  EXPECT_EQ(d.gidIndex, -1);
  EXPECT_EQ(d.qpsPerPeer, 1u);
  EXPECT_EQ(d.signalMode, SignalMode::kAtomic);
  IbvOptions o = parseOptions(
      {{"device", "mlx5_2"}, {"port", "2"}, {"gid_index", "3"}, {"qps_per_peer", "4"}, {"atomics", "false"}});
  EXPECT_EQ(o.device, "mlx5_2");
  EXPECT_EQ(o.port, 2u);
  EXPECT_EQ(o.gidIndex, 3);
  EXPECT_EQ(o.qpsPerPeer, 4u);
  EXPECT_EQ(o.signalMode, SignalMode::kSend);
  EXPECT_EQ(parseOptions({{"atomics", "on"}}).signalMode, SignalMode::kAtomic);
}

TEST(IbverbsOptionsTest, BadValuesNameTheKeyAndTheRange) {
  EXPECT_EQ(optionError({{"port", "0"}}), "ibverbs option port='0' is not an integer in [1, 255]");
  EXPECT_EQ(optionError({{"qps_per_peer", "65"}}), "ibverbs option qps_per_peer='65' is not an integer in [1, 64]");
  EXPECT_EQ(optionError({{"gid_index", "-1"}}), "ibverbs option gid_index='-1' is not an integer in [0, 255]");
  EXPECT_EQ(optionError({{"gid_index", " 1"}}), "ibverbs option gid_index=' 1' is not an integer in [0, 255]");
  EXPECT_EQ(optionError({{"port", "99999999999999999999"}}),
            "ibverbs option port='99999999999999999999' is not an integer in [1, 255]");
  EXPECT_NE(optionError({{"atomics", "maybe"}}).find("not a boolean"), std::string::npos);
  EXPECT_NE(optionError({{"device", ""}}).find("1 to 63 characters"), std::string::npos);
  EXPECT_NE(optionError({{"gid", "1"}}).find("unknown option 'gid'"), std::string::npos);
}

}  // namespace
}  // namespace weft::ibverbs
