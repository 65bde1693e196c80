#include <gtest/gtest.h>

#include <cerrno>
#include <weft/error.hpp>

namespace weft {
namespace {

TEST(ErrorTest, WhatCarriesCodeNameAndMessage) {
  Error e(ErrorCode::kTimeout, "rank 3 did not answer");
  EXPECT_EQ(e.code(), ErrorCode::kTimeout);
  EXPECT_EQ(e.message(), "rank 3 did not answer");
  EXPECT_STREQ(e.what(), "timeout: rank 3 did not answer");
}

TEST(ErrorTest, SystemErrorCarriesErrnoText) {
  try {
    throwSystemError("open /nonexistent", ENOENT);
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kSystemError);
    EXPECT_NE(e.message().find("No such file or directory"), std::string::npos) << e.message();
  }
}

}  // namespace
}  // namespace weft
