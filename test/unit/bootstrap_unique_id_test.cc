// UniqueId: text round trip, bad text, and the content checks a bootstrap applies.
#include <gtest/gtest.h>

#include <weft/bootstrap.hpp>
#include <weft/error.hpp>

#include "bootstrap_message.hpp"

namespace weft {
namespace {

ErrorCode codeOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.code();
  }
  ADD_FAILURE() << "no weft::Error thrown";
  return ErrorCode::kInternalError;
}

TEST(BootstrapUniqueIdTest, TextRoundTrip) {
  UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
  std::string text = uniqueIdToString(id);
  EXPECT_EQ(text.size(), 256u);
  EXPECT_EQ(text.find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_EQ(uniqueIdFromString(text), id);
  std::string upper = text;
  for (auto& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  EXPECT_EQ(uniqueIdFromString("  " + upper + "\n"), id);
}

TEST(BootstrapUniqueIdTest, BadTextIsInvalidArgument) {
  std::string text = uniqueIdToString(TcpBootstrap::createUniqueId("127.0.0.1"));
  EXPECT_EQ(codeOf([&] { uniqueIdFromString(""); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(codeOf([&] { uniqueIdFromString(text.substr(1)); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(codeOf([&] { uniqueIdFromString(text + "0"); }), ErrorCode::kInvalidArgument);
  std::string bad = text;
  bad[100] = 'g';
  try {
    uniqueIdFromString(bad);
    FAIL() << "accepted a non-hex character";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(e.message().find("position 100"), std::string::npos) << e.message();
  }
}

TEST(BootstrapUniqueIdTest, HoldsAddressPortAndRandomSecret) {
  UniqueId a = TcpBootstrap::createUniqueId("127.0.0.1:45678");
  UniqueId b = TcpBootstrap::createUniqueId("127.0.0.1:45678");
  auto ca = detail::decodeUniqueId(a);
  auto cb = detail::decodeUniqueId(b);
  EXPECT_EQ(ca.root.toString(), "127.0.0.1:45678");
  EXPECT_FALSE(detail::secretsEqual(ca.secret, cb.secret));
  EXPECT_NE(a, b);
  auto chosen = detail::decodeUniqueId(TcpBootstrap::createUniqueId("127.0.0.1"));
  EXPECT_NE(chosen.root.port, 0);
  auto v6 = detail::decodeUniqueId(TcpBootstrap::createUniqueId("[::1]:5000"));
  EXPECT_EQ(v6.root.family, 6);
  EXPECT_EQ(v6.root.toString(), "[::1]:5000");
  auto host = detail::decodeUniqueId(TcpBootstrap::createUniqueId(""));
  EXPECT_TRUE(host.root.family == 4 || host.root.family == 6);
  EXPECT_NE(host.root.port, 0);
}

TEST(BootstrapUniqueIdTest, BadAddressesAndIdsAreRefused) {
  EXPECT_EQ(codeOf([] { TcpBootstrap::createUniqueId("127.0.0.1:99999"); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(codeOf([] { TcpBootstrap::createUniqueId("127.0.0.1:"); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(codeOf([] { TcpBootstrap::createUniqueId("[::1"); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(codeOf([] { TcpBootstrap::createUniqueId("no-such-host.invalid:5"); }), ErrorCode::kInvalidArgument);
  UniqueId zero;
  EXPECT_EQ(codeOf([&] { TcpBootstrap(0, 1, zero, std::chrono::milliseconds(100)); }), ErrorCode::kInvalidArgument);
  UniqueId id = TcpBootstrap::createUniqueId("127.0.0.1");
  UniqueId badVersion = id;
  badVersion.bytes[4] ^= 0xff;
  EXPECT_EQ(codeOf([&] { TcpBootstrap(0, 1, badVersion, std::chrono::milliseconds(100)); }),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(codeOf([&] { TcpBootstrap(2, 2, id, std::chrono::milliseconds(100)); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(codeOf([&] { TcpBootstrap(0, 0, id, std::chrono::milliseconds(100)); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(codeOf([&] { TcpBootstrap(0, 1, std::string("127.0.0.1"), std::chrono::milliseconds(100)); }),
            ErrorCode::kInvalidArgument);
}

TEST(BootstrapUniqueIdTest, SingleRankJobWorksWithoutPeers) {
  TcpBootstrap boot(0, 1, TcpBootstrap::createUniqueId("127.0.0.1"), std::chrono::milliseconds(500));
  EXPECT_EQ(boot.rank(), 0);
  EXPECT_EQ(boot.size(), 1);
  int v = 7;
  boot.allGather(&v, sizeof(v));
  boot.barrier();
  boot.broadcast(&v, sizeof(v), 0);
  EXPECT_EQ(v, 7);
  boot.sendBytes({1, 2, 3}, 0, 9);
  EXPECT_EQ(boot.recvBytes(0, 9), (std::vector<uint8_t>{1, 2, 3}));
  EXPECT_EQ(codeOf([&] { boot.send(&v, sizeof(v), 1, 0); }), ErrorCode::kInvalidArgument);
  auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(codeOf([&] { boot.recv(&v, sizeof(v), 0, 1); }), ErrorCode::kTimeout);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
}

}  // namespace
}  // namespace weft
