// The element types and reductions of the collectives (include/weft/reduce_device.hpp), checked against references
// built independently here: decoding against the format's definition (ldexp), fp16 against the compiler's
// _Float16, encoding against a nearest-value search over every code of the format, and the reductions against
// plain loops that state the documented arithmetic.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>
#include <weft/collectives.hpp>
#include <weft/reduce_device.hpp>

namespace weft {
namespace {

struct Format {
  const char* name;
  int exp;
  int man;
  bool hasInf;    // IEEE specials in the all-ones exponent
  bool saturate;  // overflow gives the largest finite value
  uint32_t (*encode)(float);
  float (*decode)(uint32_t);
};

const Format kFormats[] = {
    {"fp16", 5, 10, true, false, [](float f) -> uint32_t { return Float16::fromFloat(f).bits; },
     [](uint32_t v) { return Float16{static_cast<uint16_t>(v)}.toFloat(); }},
    {"bf16", 8, 7, true, false, [](float f) -> uint32_t { return Bfloat16::fromFloat(f).bits; },
     [](uint32_t v) { return Bfloat16{static_cast<uint16_t>(v)}.toFloat(); }},
    {"e4m3", 4, 3, false, true, [](float f) -> uint32_t { return Float8E4M3::fromFloat(f).bits; },
     [](uint32_t v) { return Float8E4M3{static_cast<uint8_t>(v)}.toFloat(); }},
    {"e5m2", 5, 2, true, true, [](float f) -> uint32_t { return Float8E5M2::fromFloat(f).bits; },
     [](uint32_t v) { return Float8E5M2{static_cast<uint8_t>(v)}.toFloat(); }},
};

// The value of `code` from the format's definition; NaN for NaN codes.
double definitionValue(const Format& f, uint32_t code) {
  const uint32_t bias = (1u << (f.exp - 1)) - 1;
  const uint32_t expMask = (1u << f.exp) - 1;
  const uint32_t manMask = (1u << f.man) - 1;
  const bool negative = (code >> (f.exp + f.man)) & 1u;
  const uint32_t e = (code >> f.man) & expMask;
  const uint32_t m = code & manMask;
  double v;
  if (f.hasInf && e == expMask) {
    v = m == 0 ? std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
  } else if (!f.hasInf && e == expMask && m == manMask) {
    v = std::numeric_limits<double>::quiet_NaN();
  } else if (e == 0) {
    v = std::ldexp(static_cast<double>(m), 1 - static_cast<int>(bias) - f.man);
  } else {
    v = std::ldexp(1.0 + std::ldexp(static_cast<double>(m), -f.man), static_cast<int>(e) - static_cast<int>(bias));
  }
  return negative ? -v : v;
}

uint32_t codeCount(const Format& f) { return 1u << (f.exp + f.man + 1); }

// The non-negative finite codes, in increasing order of value.
std::vector<uint32_t> positiveFiniteCodes(const Format& f) {
  std::vector<uint32_t> codes;
  for (uint32_t c = 0; c < codeCount(f) / 2; ++c) {
    if (std::isfinite(definitionValue(f, c))) codes.push_back(c);
  }
  std::sort(codes.begin(), codes.end(),
            [&](uint32_t a, uint32_t b) { return definitionValue(f, a) < definitionValue(f, b); });
  return codes;
}

// The code fromFloat must give for finite `x` by the documented rule: nearest value, ties to the even code,
// overflow to inf (IEEE rule: from max + half an ulp on) or saturation to the largest finite value.
uint32_t referenceEncode(const Format& f, const std::vector<uint32_t>& codes, float x) {
  const uint32_t sign = std::signbit(x) ? 1u << (f.exp + f.man) : 0u;
  const double a = std::fabs(static_cast<double>(x));
  const double maxValue = definitionValue(f, codes.back());
  if (a > maxValue) {
    if (f.saturate) return sign | codes.back();
    const double ulp = maxValue - definitionValue(f, codes[codes.size() - 2]);
    if (a >= maxValue + ulp / 2) return sign | (((1u << f.exp) - 1) << f.man);
    return sign | codes.back();
  }
  auto it =
      std::lower_bound(codes.begin(), codes.end(), a, [&](uint32_t c, double v) { return definitionValue(f, c) < v; });
  if (definitionValue(f, *it) == a) return sign | *it;
  const uint32_t hi = *it;
  const uint32_t lo = *(it - 1);
  const double dLo = a - definitionValue(f, lo);
  const double dHi = definitionValue(f, hi) - a;
  if (dLo < dHi) return sign | lo;
  if (dHi < dLo) return sign | hi;
  return sign | ((lo & 1u) == 0 ? lo : hi);
}

TEST(CollectiveTypesTest, DecodeMatchesTheFormatDefinitionForEveryCode) {
  for (const Format& f : kFormats) {
    SCOPED_TRACE(f.name);
    uint64_t wrong = 0;
    for (uint32_t c = 0; c < codeCount(f); ++c) {
      const double want = definitionValue(f, c);
      const float got = f.decode(c);
      if (std::isnan(want)) {
        wrong += std::isnan(got) ? 0 : 1;
      } else {
        wrong += (static_cast<double>(got) == want && std::signbit(got) == std::signbit(want)) ? 0 : 1;
      }
    }
    EXPECT_EQ(wrong, 0u);
  }
  EXPECT_EQ(Float8E4M3{0x7e}.toFloat(), 448.0f);
  EXPECT_EQ(Float8E4M3{0x01}.toFloat(), std::ldexp(1.0f, -9));
  EXPECT_TRUE(std::isnan(Float8E4M3{0x7f}.toFloat()));
  EXPECT_EQ(Float8E4M3{0x78}.toFloat(), 256.0f);  // e = 15 is a normal exponent in E4M3 FN
  EXPECT_EQ(Float8E5M2{0x7b}.toFloat(), 57344.0f);
  EXPECT_TRUE(std::isinf(Float8E5M2{0x7c}.toFloat()));
  EXPECT_EQ(Float8E5M2{0x01}.toFloat(), std::ldexp(1.0f, -16));
  EXPECT_EQ(Float16{0x7bff}.toFloat(), 65504.0f);
  EXPECT_EQ(Bfloat16{0x3f80}.toFloat(), 1.0f);
}

TEST(CollectiveTypesTest, EncodeRoundsToNearestEvenAtEveryValueMidpointAndNeighbour) {
  std::mt19937 rng(7);
  for (const Format& f : kFormats) {
    SCOPED_TRACE(f.name);
    const std::vector<uint32_t> codes = positiveFiniteCodes(f);
    std::vector<float> probes = {0.0f,   -0.0f,  1e-30f,  -1e-30f,  std::numeric_limits<float>::denorm_min(),
                                 3e38f,  -3e38f, 1e6f,    65520.0f, 65519.99f,
                                 464.0f, 480.0f, 61440.0f};
    for (size_t i = 0; i < codes.size(); ++i) {
      const float v = static_cast<float>(definitionValue(f, codes[i]));
      probes.push_back(v);
      probes.push_back(-v);
      if (i + 1 < codes.size()) {
        const float mid = static_cast<float>((definitionValue(f, codes[i]) + definitionValue(f, codes[i + 1])) / 2);
        probes.push_back(mid);
        probes.push_back(-mid);
        probes.push_back(std::nextafter(mid, 0.0f));
        probes.push_back(std::nextafter(mid, 1e30f));
      }
    }
    std::uniform_int_distribution<uint32_t> bits;
    for (int i = 0; i < 200000; ++i) {
      uint32_t u = bits(rng);
      float x;
      std::memcpy(&x, &u, sizeof(x));
      if (std::isfinite(x)) probes.push_back(x);
    }
    uint64_t wrong = 0;
    for (float x : probes) {
      const uint32_t want = referenceEncode(f, codes, x);
      const uint32_t got = f.encode(x);
      if (got != want && wrong++ < 5) ADD_FAILURE() << "encode(" << x << ") = " << got << ", want " << want;
    }
    EXPECT_EQ(wrong, 0u);
  }
}

TEST(CollectiveTypesTest, SpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(Float16::fromFloat(inf).bits, 0x7c00);
  EXPECT_EQ(Float16::fromFloat(-inf).bits, 0xfc00);
  EXPECT_EQ(Float16::fromFloat(nan).bits, 0x7e00);
  EXPECT_EQ(Float16::fromFloat(-nan).bits, 0xfe00);
  EXPECT_EQ(Bfloat16::fromFloat(inf).bits, 0x7f80);
  EXPECT_TRUE(std::isnan(Bfloat16::fromFloat(nan).toFloat()));
  EXPECT_TRUE(std::isnan(Bfloat16::fromFloat(std::bit_cast<float>(0x7f800001u)).toFloat()));  // signalling NaN
  EXPECT_EQ(Bfloat16::fromFloat(3.4e38f).bits, 0x7f80);                                       // overflow rounds to inf
  EXPECT_EQ(Float8E4M3::fromFloat(inf).bits, 0x7e);                                           // saturates
  EXPECT_EQ(Float8E4M3::fromFloat(-inf).bits, 0xfe);
  EXPECT_EQ(Float8E4M3::fromFloat(1e6f).bits, 0x7e);
  EXPECT_EQ(Float8E4M3::fromFloat(nan).bits, 0x7f);
  EXPECT_EQ(Float8E4M3::fromFloat(-nan).bits, 0xff);
  EXPECT_EQ(Float8E5M2::fromFloat(inf).bits, 0x7b);
  EXPECT_EQ(Float8E5M2::fromFloat(-1e9f).bits, 0xfb);
  EXPECT_EQ(Float8E5M2::fromFloat(nan).bits, 0x7e);
  EXPECT_TRUE(std::isinf(Float8E5M2{0xfc}.toFloat()));
}

#if defined(__FLT16_MAX__)
TEST(CollectiveTypesTest, Float16MatchesTheCompilersFloat16) {
  uint64_t wrong = 0;
  for (uint32_t c = 0; c < 65536; ++c) {
    _Float16 h;
    const uint16_t bits = static_cast<uint16_t>(c);
    std::memcpy(&h, &bits, 2);
    const float want = static_cast<float>(h);
    const float got = Float16{bits}.toFloat();
    wrong +=
        (std::isnan(want) ? std::isnan(got) : std::bit_cast<uint32_t>(got) == std::bit_cast<uint32_t>(want)) ? 0 : 1;
  }
  std::mt19937 rng(11);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 500000; ++i) {
    const float x = std::bit_cast<float>(bits(rng));
    if (std::isnan(x)) continue;
    const _Float16 h = static_cast<_Float16>(x);
    uint16_t want;
    std::memcpy(&want, &h, 2);
    wrong += Float16::fromFloat(x).bits == want ? 0 : 1;
  }
  EXPECT_EQ(wrong, 0u);
}
#endif

TEST(CollectiveTypesTest, RoundTripOfEveryFiniteCode) {
  for (const Format& f : kFormats) {
    SCOPED_TRACE(f.name);
    uint64_t wrong = 0;
    for (uint32_t c = 0; c < codeCount(f); ++c) {
      const float v = f.decode(c);
      if (std::isnan(v)) {
        wrong += std::isnan(f.decode(f.encode(v))) ? 0 : 1;
      } else if (std::isfinite(v)) {
        wrong += f.encode(v) == c ? 0 : 1;
      }
    }
    EXPECT_EQ(wrong, 0u);
  }
}

// ---- reductions: every op on every type against loops that state the documented arithmetic ------------------

template <class T>
T reduceWithWeft(ReduceOp op, const std::vector<T>& v) {
  return reduceOrdered<T>(op, static_cast<int>(v.size()), [&](int p) { return v[static_cast<size_t>(p)]; });
}

template <class T>
void checkIntegerOps(std::mt19937& rng) {
  using Wide = std::conditional_t<std::is_signed_v<T>, int64_t, uint64_t>;
  std::uniform_int_distribution<int64_t> dist(
      std::numeric_limits<T>::min() / (sizeof(T) == 8 ? 1 : 1),
      static_cast<int64_t>(std::numeric_limits<T>::max() >> (sizeof(T) == 8 ? 1 : 0)));
  for (int n = 1; n <= 5; ++n) {
    for (int trial = 0; trial < 200; ++trial) {
      std::vector<T> v(static_cast<size_t>(n));
      for (auto& x : v) x = static_cast<T>(dist(rng));
      uint64_t sum = 0, prod = 1;
      Wide mx = static_cast<Wide>(v[0]), mn = static_cast<Wide>(v[0]);
      for (T x : v) {
        sum += static_cast<uint64_t>(static_cast<Wide>(x));
        prod *= static_cast<uint64_t>(static_cast<Wide>(x));
        mx = std::max(mx, static_cast<Wide>(x));
        mn = std::min(mn, static_cast<Wide>(x));
      }
      EXPECT_EQ(reduceWithWeft(ReduceOp::kSum, v), static_cast<T>(sum));
      EXPECT_EQ(reduceWithWeft(ReduceOp::kProd, v), static_cast<T>(prod));
      EXPECT_EQ(reduceWithWeft(ReduceOp::kMax, v), static_cast<T>(mx));
      EXPECT_EQ(reduceWithWeft(ReduceOp::kMin, v), static_cast<T>(mn));
      EXPECT_EQ(reduceWithWeft(ReduceOp::kAvg, v), static_cast<T>(static_cast<Wide>(sum) / static_cast<Wide>(n)));
    }
  }
}

TEST(CollectiveTypesTest, IntegerOpsWrapAndAverageTruncates) {
  std::mt19937 rng(3);
  checkIntegerOps<int8_t>(rng);
  checkIntegerOps<uint8_t>(rng);
  checkIntegerOps<int32_t>(rng);
  checkIntegerOps<uint32_t>(rng);
  checkIntegerOps<int64_t>(rng);
  checkIntegerOps<uint64_t>(rng);
  EXPECT_EQ(reduceWithWeft<int8_t>(ReduceOp::kSum, {100, 100}), static_cast<int8_t>(-56));
  EXPECT_EQ(reduceWithWeft<int8_t>(ReduceOp::kAvg, {100, 100}), 100);  // the sum is wider than int8
  EXPECT_EQ(reduceWithWeft<int32_t>(ReduceOp::kAvg, {-7, 0}), -3);     // truncating division
  EXPECT_EQ(reduceWithWeft<uint8_t>(ReduceOp::kProd, {16, 16, 3}), 0);
}

// Floating point: accumulate in Acc (fp32 for the small formats), rank order, round once.
template <class T, class Acc, class ToAcc, class FromAcc>
void checkFloatOps(std::mt19937& rng, ToAcc toAcc, FromAcc fromAcc, float range) {
  std::uniform_real_distribution<float> dist(-range, range);
  auto same = [](T a, T b) { return std::memcmp(&a, &b, sizeof(T)) == 0; };
  for (int n = 1; n <= 5; ++n) {
    for (int trial = 0; trial < 300; ++trial) {
      std::vector<T> v(static_cast<size_t>(n));
      for (auto& x : v) x = fromAcc(static_cast<Acc>(dist(rng)));
      Acc sum = toAcc(v[0]), prod = toAcc(v[0]), mx = toAcc(v[0]), mn = toAcc(v[0]);
      for (int p = 1; p < n; ++p) {
        const Acc x = toAcc(v[static_cast<size_t>(p)]);
        sum = sum + x;
        prod = prod * x;
        if (x > mx) mx = x;
        if (x < mn) mn = x;
      }
      EXPECT_TRUE(same(reduceWithWeft(ReduceOp::kSum, v), fromAcc(sum)));
      EXPECT_TRUE(same(reduceWithWeft(ReduceOp::kProd, v), fromAcc(prod)));
      EXPECT_TRUE(same(reduceWithWeft(ReduceOp::kMax, v), fromAcc(mx)));
      EXPECT_TRUE(same(reduceWithWeft(ReduceOp::kMin, v), fromAcc(mn)));
      EXPECT_TRUE(same(reduceWithWeft(ReduceOp::kAvg, v), fromAcc(sum / static_cast<Acc>(n))));
    }
  }
}

TEST(CollectiveTypesTest, FloatOpsAccumulateWideAndRoundOnce) {
  std::mt19937 rng(5);
  checkFloatOps<float, float>(
      rng, [](float x) { return x; }, [](float x) { return x; }, 1e3f);
  checkFloatOps<double, double>(
      rng, [](double x) { return x; }, [](double x) { return x; }, 1e3f);
  checkFloatOps<Float16, float>(
      rng, [](Float16 x) { return x.toFloat(); }, [](float x) { return Float16::fromFloat(x); }, 100.0f);
  checkFloatOps<Bfloat16, float>(
      rng, [](Bfloat16 x) { return x.toFloat(); }, [](float x) { return Bfloat16::fromFloat(x); }, 100.0f);
  checkFloatOps<Float8E4M3, float>(
      rng, [](Float8E4M3 x) { return x.toFloat(); }, [](float x) { return Float8E4M3::fromFloat(x); }, 20.0f);
  checkFloatOps<Float8E5M2, float>(
      rng, [](Float8E5M2 x) { return x.toFloat(); }, [](float x) { return Float8E5M2::fromFloat(x); }, 20.0f);
  // fp32 accumulation: 2048 + 1 + 1 is 2050 (fp16 steps would give 2048 each time).
  const std::vector<Float16> h = {Float16::fromFloat(2048), Float16::fromFloat(1), Float16::fromFloat(1)};
  EXPECT_EQ(reduceWithWeft(ReduceOp::kSum, h).toFloat(), 2050.0f);
  // fp8 sums saturate: 448 + 448 in E4M3 is 448; 57344 * 2 in E5M2 is 57344.
  EXPECT_EQ(reduceWithWeft<Float8E4M3>(ReduceOp::kSum, {Float8E4M3{0x7e}, Float8E4M3{0x7e}}).bits, 0x7e);
  EXPECT_EQ(reduceWithWeft<Float8E5M2>(ReduceOp::kSum, {Float8E5M2{0x7b}, Float8E5M2{0x7b}}).bits, 0x7b);
  // NaN wins min and max; ties keep the earlier rank's value.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(reduceWithWeft<float>(ReduceOp::kMax, {1.0f, nan, 3.0f})));
  EXPECT_TRUE(std::isnan(reduceWithWeft<float>(ReduceOp::kMin, {nan, 1.0f})));
  EXPECT_TRUE(std::signbit(reduceWithWeft<float>(ReduceOp::kMax, {-0.0f, 0.0f})));
  // A NaN result is the positive quiet NaN of the type, whatever sign the inputs' NaNs had.
  EXPECT_EQ(std::bit_cast<uint32_t>(reduceWithWeft<float>(ReduceOp::kSum, {1.0f, -nan})), 0x7fc00000u);
  EXPECT_EQ(std::bit_cast<uint64_t>(reduceWithWeft<double>(ReduceOp::kMin, {-static_cast<double>(nan), 2.0})),
            0x7ff8000000000000ull);
  EXPECT_EQ(reduceWithWeft<Float8E4M3>(ReduceOp::kSum, {Float8E4M3{0xff}, Float8E4M3{0x01}}).bits, 0x7f);
  EXPECT_EQ(reduceWithWeft<Float8E5M2>(ReduceOp::kProd, {Float8E5M2{0xff}, Float8E5M2{0x01}}).bits, 0x7e);
  EXPECT_EQ(reduceWithWeft<Float16>(ReduceOp::kMax, {Float16{0xfe01}, Float16{0x3c00}}).bits, 0x7e00);
  EXPECT_EQ(reduceWithWeft<Bfloat16>(ReduceOp::kAvg, {Bfloat16{0xffc1}, Bfloat16{0x3f80}}).bits, 0x7fc0);
}

TEST(CollectiveTypesTest, NamesAndSizes) {
  EXPECT_EQ(dataTypeBytes(DataType::kFloat8E5M2), 1u);
  EXPECT_EQ(dataTypeBytes(DataType::kBfloat16), 2u);
  EXPECT_EQ(dataTypeBytes(DataType::kUint64), 8u);
  EXPECT_EQ(dataTypeBytes(static_cast<DataType>(99)), 0u);
  EXPECT_STREQ(dataTypeName(DataType::kFloat16), "float16");
  EXPECT_STREQ(dataTypeName(static_cast<DataType>(-1)), "unknown");
  EXPECT_STREQ(reduceOpName(ReduceOp::kAvg), "avg");
  EXPECT_STREQ(collectiveKindName(CollectiveKind::kAllToAllV), "alltoallv");
  for (int t = 0; t < kDataTypeCount; ++t) EXPECT_GT(dataTypeBytes(static_cast<DataType>(t)), 0u);
}

}  // namespace
}  // namespace weft
