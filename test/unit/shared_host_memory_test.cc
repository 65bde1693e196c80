#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <multi_process.hpp>
#include <weft/error.hpp>
#include <weft/shared_host_memory.hpp>

namespace weft {
namespace {

const uint64_t kPage = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));

TEST(SharedHostMemoryTest, IsZeroedPageRoundedAndFound) {
  auto mem = allocSharedHostMemory(100);
  ASSERT_NE(mem, nullptr);
  auto* p = static_cast<unsigned char*>(mem.get());
  for (uint64_t i = 0; i < kPage; ++i) ASSERT_EQ(p[i], 0) << "byte " << i;
  int fd = -1;
  uint64_t offset = 99;
  ASSERT_TRUE(findSharedHostMemory(p, 100, &fd, &offset));
  EXPECT_EQ(offset, 0u);
  struct stat st {};
  ASSERT_EQ(fstat(fd, &st), 0);
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), kPage);  // rounded up to one page
  // The whole rounded page belongs to the allocation; the next byte does not.
  EXPECT_TRUE(findSharedHostMemory(p, kPage, &fd, &offset));
  EXPECT_FALSE(findSharedHostMemory(p, kPage + 1, &fd, &offset));
}

TEST(SharedHostMemoryTest, PointerInsideGivesOffsetAndRangeMustFit) {
  auto mem = allocSharedHostMemory(3 * kPage);
  auto* p = static_cast<char*>(mem.get());
  int fd0 = -1, fd = -1;
  uint64_t offset = 0;
  ASSERT_TRUE(findSharedHostMemory(p, 1, &fd0, &offset));
  ASSERT_TRUE(findSharedHostMemory(p + kPage + 10, 20, &fd, &offset));
  EXPECT_EQ(fd, fd0);
  EXPECT_EQ(offset, kPage + 10);
  fd = -7;
  offset = 5;
  EXPECT_FALSE(findSharedHostMemory(p + 3 * kPage - 10, 11, &fd, &offset));
  EXPECT_FALSE(findSharedHostMemory(p + 3 * kPage, 1, &fd, &offset));
  EXPECT_EQ(fd, -7) << "outputs must stay untouched on failure";
  EXPECT_EQ(offset, 5u);
}

TEST(SharedHostMemoryTest, OtherMemoryIsNotFoundAndFreedMemoryIsForgotten) {
  void* heap = std::malloc(64);
  int fd = -1;
  uint64_t offset = 0;
  EXPECT_FALSE(findSharedHostMemory(heap, 64, &fd, &offset));
  std::free(heap);
  auto a = allocSharedHostMemory(kPage);
  auto b = allocSharedHostMemory(kPage);
  void* pa = a.get();
  a.reset();
  EXPECT_FALSE(findSharedHostMemory(pa, 1, &fd, &offset));
  EXPECT_TRUE(findSharedHostMemory(b.get(), 1, &fd, &offset));
}

// The allocation behind a pointer: its base and size for any range inside, nothing for a range that leaves it or for
// other memory, and a serial that a new allocation never repeats, even at the address of a freed one (what
// registration on first use tells a reallocated buffer apart by).
TEST(SharedHostMemoryTest, AllocationLookupGivesBaseSizeAndASerialNeverRepeated) {
  std::shared_ptr<void> a = allocSharedHostMemory(10000);
  const auto page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t rounded = (10000 + page - 1) / page * page;
  auto* base = static_cast<uint8_t*>(a.get());
  SharedHostAllocation first;
  ASSERT_TRUE(findSharedHostAllocation(base + 100, 500, &first));
  EXPECT_EQ(first.base, a.get());
  EXPECT_EQ(first.bytes, rounded);
  SharedHostAllocation whole;
  ASSERT_TRUE(findSharedHostAllocation(base, rounded, &whole));
  EXPECT_EQ(whole.serial, first.serial);
  SharedHostAllocation untouched{reinterpret_cast<void*>(1), 2, 3};
  EXPECT_FALSE(findSharedHostAllocation(base + rounded - 8, 16, &untouched)) << "a range past the end";
  EXPECT_EQ(untouched.bytes, 2u) << "the output is left alone on failure";
  int local = 0;
  EXPECT_FALSE(findSharedHostAllocation(&local, sizeof(local), &untouched));
  std::shared_ptr<void> b = allocSharedHostMemory(10000);
  SharedHostAllocation other;
  ASSERT_TRUE(findSharedHostAllocation(b.get(), 1, &other));
  EXPECT_NE(other.serial, first.serial);
  const void* freedAt = a.get();
  a.reset();
  EXPECT_FALSE(findSharedHostAllocation(freedAt, 1, &untouched));
  std::shared_ptr<void> c = allocSharedHostMemory(10000);
  SharedHostAllocation again;
  ASSERT_TRUE(findSharedHostAllocation(c.get(), 1, &again));
  EXPECT_NE(again.serial, first.serial) << (c.get() == freedAt ? "same address, " : "") << "serial repeated";
  EXPECT_NE(again.serial, other.serial);
}

TEST(SharedHostMemoryTest, TheFileMapsTheSamePages) {
  auto mem = allocSharedHostMemory(2 * kPage);
  int fd = -1;
  uint64_t offset = 0;
  ASSERT_TRUE(findSharedHostMemory(mem.get(), 2 * kPage, &fd, &offset));
  void* second = mmap(nullptr, 2 * kPage, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ASSERT_NE(second, MAP_FAILED);
  std::memcpy(static_cast<char*>(mem.get()) + kPage, "weft", 5);
  EXPECT_STREQ(static_cast<char*>(second) + kPage, "weft");
  munmap(second, 2 * kPage);
}

TEST(SharedHostMemoryTest, ForkedChildSharesThePages) {
  auto mem = allocSharedHostMemory(kPage);
  auto* word = static_cast<volatile uint64_t*>(mem.get());
  auto results = test::runRanks(
      1, [&](int, int) { *word = 0x1234abcdULL; }, std::chrono::seconds(10));
  WEFT_EXPECT_RANKS_OK(results);
  EXPECT_EQ(*word, 0x1234abcdULL);
}

TEST(SharedHostMemoryTest, BadSizesAreRefused) {
  for (uint64_t bytes : {uint64_t{0}, uint64_t{1} << 60, ~uint64_t{0}}) {
    try {
      allocSharedHostMemory(bytes);
      FAIL() << "no throw for " << bytes;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    }
  }
}

}  // namespace
}  // namespace weft
