#include <gtest/gtest.h>

#include <weft/error.hpp>
#include <weft/registered_memory.hpp>

namespace weft {
namespace {

RegisteredMemoryDescriptor sample() {
  RegisteredMemoryDescriptor d;
  d.rank = 3;
  d.size = 1ull << 33;  // larger than 4 GiB must survive
  d.kind = MemoryKind::kGpu;
  d.hostHash = 0x1122334455667788ull;
  d.pid = 4242;
  d.address = 0x7f0000001000ull;
  d.entries.push_back({"host", {1, 2, 3}});
  d.entries.push_back({"cuda_ipc", std::vector<uint8_t>(64, 0xab)});
  return d;
}

void expectProtocolError(const std::vector<uint8_t>& blob, const std::string& needle) {
  try {
    RegisteredMemoryDescriptor::deserialize(blob.data(), blob.size());
    FAIL() << "accepted a bad blob; expected: " << needle;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kProtocolError);
    EXPECT_NE(e.message().find(needle), std::string::npos) << e.message();
  }
}

TEST(RegisteredMemoryDescriptorTest, RoundTrip) {
  auto d = sample();
  auto blob = d.serialize();
  auto back = RegisteredMemoryDescriptor::deserialize(blob.data(), blob.size());
  EXPECT_EQ(back.rank, 3);
  EXPECT_EQ(back.size, 1ull << 33);
  EXPECT_EQ(back.kind, MemoryKind::kGpu);
  EXPECT_EQ(back.hostHash, d.hostHash);
  EXPECT_EQ(back.pid, 4242u);
  EXPECT_EQ(back.address, d.address);
  ASSERT_EQ(back.entries.size(), 2u);
  EXPECT_EQ(back.entries[1].transport, "cuda_ipc");
  EXPECT_EQ(back.entries[1].handle, d.entries[1].handle);
}

TEST(RegisteredMemoryDescriptorTest, EveryTruncationIsRejected) {
  auto blob = sample().serialize();
  for (size_t n = 0; n < blob.size(); ++n) {
    std::vector<uint8_t> cut(blob.begin(), blob.begin() + n);
    EXPECT_THROW(RegisteredMemoryDescriptor::deserialize(cut.data(), cut.size()), Error) << n;
  }
}

TEST(RegisteredMemoryDescriptorTest, BadFieldsAreNamed) {
  auto blob = sample().serialize();
  auto bad = blob;
  bad[0] ^= 0xff;
  expectProtocolError(bad, "bad magic");
  bad = blob;
  bad[4] = 9;
  expectProtocolError(bad, "format version 9");
  bad = blob;
  bad[6] = 7;
  expectProtocolError(bad, "unknown memory kind");
  bad = blob;
  bad.push_back(0);
  expectProtocolError(bad, "trailing bytes");
  // The entry count sits right before the first entry: claim a huge one.
  bad = blob;
  size_t countAt = 4 + 2 + 1 + 1 + 4 + 8 + 8 + 4 + 8;
  bad[countAt + 3] = 0x7f;
  expectProtocolError(bad, "exceed the limit");
  // A handle length far past the end must not allocate it.
  bad = blob;
  size_t firstHandleLen = countAt + 4 + 4 + 4;  // count, name length, "host"
  bad[firstHandleLen + 3] = 0x7f;
  expectProtocolError(bad, "exceeds the limit");
}

}  // namespace
}  // namespace weft
