// libweft_nccl's engine-free parts: NCCL <-> weft type and result mapping, the [nccl] settings, and the fallback
// loader against real libraries (NVIDIA's libnccl.so.2 when the CUDA toolkit ships it, libm as a non-NCCL library).
#include <gtest/gtest.h>
#include <unistd.h>

#include <weft/config.hpp>
#include <weft/error.hpp>

#include "nccl_support.hpp"

namespace weft::detail {
namespace {

TEST(NcclSupportTest, EveryNcclTypeAndOpMapsToWeft) {
  const std::pair<ncclDataType_t, DataType> types[] = {{ncclInt8, DataType::kInt8},
                                                       {ncclUint8, DataType::kUint8},
                                                       {ncclInt32, DataType::kInt32},
                                                       {ncclUint32, DataType::kUint32},
                                                       {ncclInt64, DataType::kInt64},
                                                       {ncclUint64, DataType::kUint64},
                                                       {ncclFloat16, DataType::kFloat16},
                                                       {ncclFloat32, DataType::kFloat32},
                                                       {ncclFloat64, DataType::kFloat64},
                                                       {ncclBfloat16, DataType::kBfloat16},
                                                       {ncclFloat8e4m3, DataType::kFloat8E4M3},
                                                       {ncclFloat8e5m2, DataType::kFloat8E5M2}};
  for (const auto& [nccl, weft] : types) EXPECT_EQ(toDataType(nccl), weft) << nccl;
  EXPECT_EQ(toDataType(ncclNumTypes), std::nullopt);
  EXPECT_EQ(toDataType(static_cast<ncclDataType_t>(-1)), std::nullopt);
  EXPECT_EQ(toReduceOp(ncclSum), ReduceOp::kSum);
  EXPECT_EQ(toReduceOp(ncclProd), ReduceOp::kProd);
  EXPECT_EQ(toReduceOp(ncclMax), ReduceOp::kMax);
  EXPECT_EQ(toReduceOp(ncclMin), ReduceOp::kMin);
  EXPECT_EQ(toReduceOp(ncclAvg), ReduceOp::kAvg);
  EXPECT_EQ(toReduceOp(ncclNumOps), std::nullopt);  // the first PreMulSum handle
}

TEST(NcclSupportTest, ErrorCodesMapToNcclResults) {
  EXPECT_EQ(toResult(ErrorCode::kInvalidArgument), ncclInvalidArgument);
  EXPECT_EQ(toResult(ErrorCode::kNotSupported), ncclInvalidUsage);
  EXPECT_EQ(toResult(ErrorCode::kPluginError), ncclInvalidUsage);
  EXPECT_EQ(toResult(ErrorCode::kTimeout), ncclRemoteError);
  EXPECT_EQ(toResult(ErrorCode::kRemoteError), ncclRemoteError);
  EXPECT_EQ(toResult(ErrorCode::kSystemError), ncclSystemError);
  EXPECT_EQ(toResult(ErrorCode::kGpuError), ncclUnhandledCudaError);
  EXPECT_EQ(toResult(ErrorCode::kInternalError), ncclInternalError);
  for (int r = 0; r < ncclNumResults; ++r) {
    EXPECT_STRNE(resultString(static_cast<ncclResult_t>(r)), "unknown result code") << r;
  }
}

TEST(NcclSupportTest, SettingsFromFileAndEnvironment) {
  NcclSettings none = NcclSettings::fromConfig(Config::defaults());
  EXPECT_TRUE(none.fallbackLibrary.empty());
  EXPECT_EQ(none.forcedMask, 0u);

  Config file = Config::parse(
      "[nccl]\nfallback_library = \"/opt/nccl/libnccl.so.2\"\nforce_fallback = "
      "[\"alltoall\", \"sendrecv\"]\n",
      "test.toml");
  NcclSettings s = NcclSettings::fromConfig(file);
  EXPECT_EQ(s.fallbackLibrary, "/opt/nccl/libnccl.so.2");
  EXPECT_TRUE(s.forced(NcclOp::kAllToAll));
  EXPECT_TRUE(s.forced(NcclOp::kSendRecv));
  EXPECT_FALSE(s.forced(NcclOp::kAllReduce));

  file.applyEnvironment(Environment{{"WEFT_NCCL_FORCE_FALLBACK", "all"}, {"WEFT_NCCL_FALLBACK", "libnccl.so.2"}});
  s = NcclSettings::fromConfig(file);
  EXPECT_EQ(s.fallbackLibrary, "libnccl.so.2");
  for (int op = 0; op < kNcclOpCount; ++op)
    EXPECT_TRUE(s.forced(static_cast<NcclOp>(op))) << ncclOpName(static_cast<NcclOp>(op));

  EXPECT_THROW(Config::parse("[nccl]\nforce_fallback = [\"allreduse\"]\n", "t"), Error);
  EXPECT_THROW(Config::parse("[nccl]\nfallback = \"x\"\n", "t"), Error);
  Config c = Config::defaults();
  try {
    c.applyEnvironment(Environment{{"WEFT_NCCL_FORCE_FALLBACK", "allreduce,bogus"}});
    FAIL() << "an unknown operation was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kConfigError);
    EXPECT_NE(std::string(e.what()).find("bogus"), std::string::npos) << e.what();
  }
}

TEST(NcclSupportTest, FallbackLoaderRefusesWhatIsNotAnNccl) {
  try {
    FallbackLibrary::open("/nonexistent/libnccl.so.2");
    FAIL() << "a missing library loaded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kPluginError);
    EXPECT_NE(std::string(e.what()).find("/nonexistent/libnccl.so.2"), std::string::npos) << e.what();
  }
  try {
    FallbackLibrary::open("libm.so.6");
    FAIL() << "libm was taken for an NCCL";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("lacks ncclGetVersion"), std::string::npos) << e.what();
  }
}

// NVIDIA's library loads (no GPU is needed to dlopen it and ask its version and error strings).
TEST(NcclSupportTest, FallbackLoaderResolvesNvidiasLibrary) {
  const char* path = "/usr/local/cuda/lib64/libnccl.so.2";
  if (access(path, R_OK) != 0) GTEST_SKIP() << path << " is not installed";
  std::shared_ptr<FallbackLibrary> lib = FallbackLibrary::open(path);
  EXPECT_EQ(FallbackLibrary::open(path), lib) << "one library per path per process";
  EXPECT_GE(lib->version(), 22800);
  const FallbackApi& a = lib->api();
  for (const void* fn :
       {reinterpret_cast<const void*>(a.commInitRankConfig), reinterpret_cast<const void*>(a.allToAll),
        reinterpret_cast<const void*>(a.gather), reinterpret_cast<const void*>(a.scatter),
        reinterpret_cast<const void*>(a.commRegister), reinterpret_cast<const void*>(a.commWindowRegister),
        reinterpret_cast<const void*>(a.redOpCreatePreMulSum), reinterpret_cast<const void*>(a.commFinalize)}) {
    EXPECT_NE(fn, nullptr);
  }
  EXPECT_STREQ(a.getErrorString(ncclSuccess), "no error");
}

}  // namespace
}  // namespace weft::detail
