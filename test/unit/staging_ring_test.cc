// transports/libfabric/staging_ring.hpp: where pieces go, wrapping, a full ring, oldest-first release, and a long
// random run checked against a byte map (no two taken pieces ever overlap, and room is refused only when no run of
// that length is free after the newest piece or at the start).
#include "../../transports/libfabric/staging_ring.hpp"

#include <gtest/gtest.h>

#include <deque>
#include <random>
#include <set>

namespace weft::transport_support {
namespace {

using Ring = StagingRing<int>;
auto doneUpTo(int last) {
  return [last](int owner) { return owner > last; };  // in use while its owner is after `last`
}

TEST(StagingRingTest, PiecesFollowEachOtherThenWrapToTheStart) {
  Ring ring(100);
  ASSERT_EQ(ring.room(40), 0u);
  ring.take(0, 40, 1);
  ASSERT_EQ(ring.room(40), 40u);
  ring.take(40, 40, 2);
  EXPECT_FALSE(ring.room(30)) << "20 bytes left at the end, and the start is taken";
  ring.release(doneUpTo(1));  // the first write completed
  ASSERT_EQ(ring.pieces(), 1u);
  ASSERT_EQ(ring.room(30), 0u) << "too long for the end: wraps to the start, which is free now";
  ring.take(0, 30, 3);
  ASSERT_EQ(ring.room(10), 30u) << "after the newest piece, before the oldest";
  EXPECT_FALSE(ring.room(11));
  ring.take(30, 10, 4);
  EXPECT_FALSE(ring.room(1)) << "full: the newest piece ends where the oldest starts";
}

TEST(StagingRingTest, ReleaseStopsAtTheOldestPieceStillInUse) {
  Ring ring(64);
  ring.take(0, 16, 1);
  ring.take(16, 16, 2);
  ring.take(32, 16, 3);
  ring.release([](int owner) { return owner == 1; });  // 2 and 3 are done, 1 is not: nothing can be given back
  EXPECT_EQ(ring.pieces(), 3u);
  EXPECT_EQ(ring.oldest().owner, 1);
  ring.release([](int) { return false; });
  EXPECT_TRUE(ring.empty());
  EXPECT_EQ(ring.room(64), 0u) << "an empty ring starts over at 0";
}

TEST(StagingRingTest, BadSizesAndMisplacedPiecesAreRefused) {
  Ring ring(32);
  EXPECT_THROW((void)ring.room(0), std::invalid_argument);
  EXPECT_THROW((void)ring.room(33), std::invalid_argument);
  EXPECT_THROW(ring.take(8, 8, 1), std::logic_error) << "room() offers 0 in an empty ring";
}

TEST(StagingRingTest, ARandomRunNeverHandsOutABusyByte) {
  // A model of what is taken, kept beside the ring: a piece leaves it when its write and every older one are done.
  constexpr uint64_t kCapacity = 1000;
  struct Taken {
    uint64_t start, bytes;
    int owner;
  };
  Ring ring(kCapacity);
  std::deque<Taken> model;
  std::set<int> live;  // owners whose writes have not completed
  std::mt19937_64 rng(42);
  auto overlapsModel = [&](uint64_t at, uint64_t bytes) {
    for (const Taken& t : model) {
      if (at < t.start + t.bytes && t.start < at + bytes) return true;
    }
    return false;
  };
  int next = 1;
  uint64_t taken = 0, refused = 0, wrapped = 0;
  for (int step = 0; step < 100000; ++step) {
    if (!live.empty() && rng() % 3 == 0) {  // some write completes, not necessarily the oldest
      auto it = live.begin();
      std::advance(it, static_cast<long>(rng() % live.size()));
      live.erase(it);
      ring.release([&](int owner) { return live.count(owner) != 0; });
      while (!model.empty() && live.count(model.front().owner) == 0) model.pop_front();
      ASSERT_EQ(ring.pieces(), model.size());
    }
    const uint64_t bytes = 1 + rng() % 300;
    const std::optional<uint64_t> at = ring.room(bytes);
    if (!at) {
      // Refused only when both places it may use, after the newest piece and the start, are busy or too short.
      const uint64_t head = model.empty() ? 0 : model.back().start + model.back().bytes;
      EXPECT_TRUE(head + bytes > kCapacity || overlapsModel(head, bytes)) << "step " << step;
      EXPECT_TRUE(overlapsModel(0, bytes)) << "step " << step;
      ++refused;
      continue;
    }
    ASSERT_LE(*at + bytes, kCapacity);
    ASSERT_FALSE(overlapsModel(*at, bytes)) << "step " << step << ": [" << *at << ", +" << bytes << ") is taken";
    wrapped += *at == 0 && !model.empty();
    ring.take(*at, bytes, next);
    model.push_back(Taken{*at, bytes, next});
    live.insert(next++);
    ++taken;
  }
  EXPECT_GT(taken, 10000u);
  EXPECT_GT(refused, 100u) << "the run should fill the ring now and then";
  EXPECT_GT(wrapped, 100u) << "and wrap to the start";
}

}  // namespace
}  // namespace weft::transport_support
