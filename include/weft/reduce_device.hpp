/// Element types and reductions of the collectives, for host and device code alike: fp16, bf16 and fp8
/// (E4M3, E5M2) held as their bit patterns with conversions to and from fp32, and the reduce operations with
/// one defined order and arithmetic so that a CPU reference can match a GPU result bit for bit.
///
/// Arithmetic (what every collective that reduces does, element by element):
/// - the values of ranks 0, 1, ..., n-1 are combined in that order: acc = v0; acc = op(acc, v1); ...
/// - fp16, bf16, fp8 and fp32 accumulate in fp32, fp64 in fp64; the result is rounded once to the element type,
///   to nearest even.
/// - signed integers accumulate in int64 and unsigned ones in uint64 with wrap-around (two's complement) sum and
///   product; the result is truncated to the element type, so sum and prod wrap exactly as in the element type.
/// - kAvg: the sum divided by n (floating point: one IEEE division in the accumulator type; integers: truncating
///   division of the 64-bit sum, so an int64/uint64 sum that wraps gives the average of the wrapped sum).
/// - kMin/kMax on floating point: a NaN operand gives NaN; otherwise the larger (smaller) value, the earlier rank's
///   on ties (so max(-0, +0) is the earlier rank's zero).
/// - a NaN result (of any op) is stored as the positive quiet NaN of the element type (fp16 0x7e00, bf16 0x7fc0,
///   E4M3 0x7f, E5M2 0x7e, fp32 0x7fc00000, fp64 0x7ff8...): the sign and payload of NaNs from arithmetic differ
///   between GPUs and CPUs, so results are made canonical to be bit-exact everywhere.
///
/// Conversions from fp32 (round to nearest even; fp32 subnormals are far below every small format's range):
/// - fp16: overflow gives +-inf, inf stays inf, NaN gives the quiet NaN 0x7e00 (sign kept).
/// - bf16: overflow gives +-inf, NaN gives a quiet NaN (payload's top bits kept, quiet bit set).
/// - fp8 E4M3 (the OCP "FN" format: no inf, S.1111.111 is NaN, largest finite 448): values that round beyond 448
///   and +-inf saturate to +-448; NaN gives 0x7f (sign kept).
/// - fp8 E5M2 (inf and NaN as IEEE, largest finite 57344): values that round beyond 57344 and +-inf saturate to
///   +-57344 (as CUDA's __NV_SATFINITE does); NaN gives 0x7e (sign kept).
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>
#include <weft/collectives.hpp>
#include <weft/platform.hpp>

#if defined(WEFT_COMPILER_CUDA)
#include <cuda_fp16.h>
#elif defined(WEFT_COMPILER_HIP)
#include <hip/hip_fp16.h>
#endif

namespace weft {

namespace detail {

WEFT_HOST_DEVICE_INLINE uint32_t floatToBits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof(u));
  return u;
}

WEFT_HOST_DEVICE_INLINE float bitsToFloat(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof(f));
  return f;
}

/// Encodes `f` into a binary format of kExp exponent and kMan mantissa bits (round to nearest even). kHasInf: the
/// all-ones exponent holds inf and NaN (IEEE); otherwise only all-ones exponent and mantissa is NaN. kSaturate:
/// overflow and inf give the largest finite value instead of inf.
template <int kExp, int kMan, bool kHasInf, bool kSaturate>
WEFT_HOST_DEVICE_INLINE uint32_t encodeSmallFloat(float f) {
  constexpr int kBias = (1 << (kExp - 1)) - 1;
  constexpr int kEmin = 1 - kBias;
  constexpr uint32_t kAllOnesExp = ((1u << kExp) - 1) << kMan;
  constexpr uint32_t kManMask = (1u << kMan) - 1;
  constexpr uint32_t kMaxFinite = kHasInf ? (kAllOnesExp - (1u << kMan)) | kManMask : kAllOnesExp | (kManMask - 1);
  constexpr uint32_t kNan = kHasInf ? kAllOnesExp | (1u << (kMan - 1)) : kAllOnesExp | kManMask;
  constexpr uint32_t kOverflow = (kSaturate || !kHasInf) ? kMaxFinite : kAllOnesExp;
  const uint32_t u = floatToBits(f);
  const uint32_t sign = (u >> 31) << (kExp + kMan);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | kNan;
  if (a == 0x7f800000u) return sign | kOverflow;
  const int e = static_cast<int>(a >> 23) - 127;
  if (e > 20) return sign | kOverflow;             // far beyond every format's range (and keeps shifts small)
  if (e < kEmin - kMan - 1) return sign;           // below half the smallest subnormal: rounds to zero
  const uint32_t m = (a & 0x7fffffu) | 0x800000u;  // e > -127 here, so the implicit bit is there
  const bool normal = e >= kEmin;
  const int shift = normal ? 23 - kMan : 23 - kMan + (kEmin - e);  // <= 24
  const uint32_t keep = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1);
  const uint32_t half = 1u << (shift - 1);
  uint32_t v = normal ? (static_cast<uint32_t>(e + kBias) << kMan) | (keep & kManMask) : keep;
  if (rem > half || (rem == half && (keep & 1u) != 0)) v += 1;  // a carry into the exponent is the right rounding
  if (v > kMaxFinite) return sign | kOverflow;
  return sign | v;
}

/// Decodes a value of the format encodeSmallFloat<kExp, kMan, kHasInf, ...> writes (exact: every such value is an
/// fp32).
template <int kExp, int kMan, bool kHasInf>
WEFT_HOST_DEVICE_INLINE float decodeSmallFloat(uint32_t v) {
  constexpr int kBias = (1 << (kExp - 1)) - 1;
  constexpr int kEmin = 1 - kBias;
  constexpr uint32_t kExpMask = (1u << kExp) - 1;
  constexpr uint32_t kManMask = (1u << kMan) - 1;
  const uint32_t sign = ((v >> (kExp + kMan)) & 1u) << 31;
  const uint32_t ex = (v >> kMan) & kExpMask;
  const uint32_t man = v & kManMask;
  if (ex == kExpMask && (kHasInf || man == kManMask)) {
    if (kHasInf && man == 0) return bitsToFloat(sign | 0x7f800000u);
    return bitsToFloat(sign | 0x7fc00000u);
  }
  if (ex == 0) {
    // man * 2^(kEmin - kMan): both factors are exact in fp32 and so is the product.
    const float scale = bitsToFloat(static_cast<uint32_t>(kEmin - kMan + 127) << 23);
    return bitsToFloat(sign | floatToBits(static_cast<float>(man) * scale));
  }
  return bitsToFloat(sign | (static_cast<uint32_t>(static_cast<int>(ex) - kBias + 127) << 23) | (man << (23 - kMan)));
}

}  // namespace detail

/// IEEE binary16, held as its bits.
struct Float16 {
  uint16_t bits;
  /// fp32 -> fp16, round to nearest even (overflow: +-inf).
  WEFT_HOST_DEVICE_INLINE static Float16 fromFloat(float f) {
#if defined(WEFT_DEVICE_COMPILE)
    // The GPU's conversion instruction rounds the same way; the software encoder cost a third of the 64 MB fp16
    // allreduce on an H200. Only NaN needs the canonical pattern the hardware does not give.
    if (f != f) return Float16{static_cast<uint16_t>(((detail::floatToBits(f) >> 16) & 0x8000u) | 0x7e00u)};
    return Float16{__half_as_ushort(__float2half_rn(f))};
#else
    return Float16{static_cast<uint16_t>(detail::encodeSmallFloat<5, 10, true, false>(f))};
#endif
  }
  /// The exact fp32 value (a NaN's payload may differ between host and device; results are canonicalized).
  WEFT_HOST_DEVICE_INLINE float toFloat() const {
#if defined(WEFT_DEVICE_COMPILE)
    return __half2float(__ushort_as_half(bits));
#else
    return detail::decodeSmallFloat<5, 10, true>(bits);
#endif
  }
};

/// bfloat16 (the top half of an fp32), held as its bits.
struct Bfloat16 {
  uint16_t bits;
  /// fp32 -> bf16, round to nearest even (overflow: +-inf; NaN stays a quiet NaN).
  WEFT_HOST_DEVICE_INLINE static Bfloat16 fromFloat(float f) {
    const uint32_t u = detail::floatToBits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return Bfloat16{static_cast<uint16_t>((u >> 16) | 0x40u)};
    return Bfloat16{static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16)};
  }
  /// The exact fp32 value.
  WEFT_HOST_DEVICE_INLINE float toFloat() const { return detail::bitsToFloat(static_cast<uint32_t>(bits) << 16); }
};

/// fp8 E4M3 (OCP FN: no inf, largest finite 448), held as its bits.
struct Float8E4M3 {
  uint8_t bits;
  /// fp32 -> E4M3, round to nearest even; overflow and +-inf saturate to +-448; NaN gives 0x7f | sign.
  WEFT_HOST_DEVICE_INLINE static Float8E4M3 fromFloat(float f) {
    return Float8E4M3{static_cast<uint8_t>(detail::encodeSmallFloat<4, 3, false, true>(f))};
  }
  /// The exact fp32 value.
  WEFT_HOST_DEVICE_INLINE float toFloat() const { return detail::decodeSmallFloat<4, 3, false>(bits); }
};

/// fp8 E5M2 (IEEE-like, largest finite 57344), held as its bits.
struct Float8E5M2 {
  uint8_t bits;
  /// fp32 -> E5M2, round to nearest even; overflow and +-inf saturate to +-57344; NaN gives 0x7e | sign.
  WEFT_HOST_DEVICE_INLINE static Float8E5M2 fromFloat(float f) {
    return Float8E5M2{static_cast<uint8_t>(detail::encodeSmallFloat<5, 2, true, true>(f))};
  }
  /// The exact fp32 value.
  WEFT_HOST_DEVICE_INLINE float toFloat() const { return detail::decodeSmallFloat<5, 2, true>(bits); }
};

/// How elements of T are accumulated: `Acc` is the accumulator type, load() widens, store() rounds or truncates.
template <class T>
struct ReduceTraits {
  static_assert(std::is_integral_v<T> || std::is_floating_point_v<T>, "not an element type");
  using Acc =
      std::conditional_t<std::is_floating_point_v<T>, T, std::conditional_t<std::is_signed_v<T>, int64_t, uint64_t>>;
  WEFT_HOST_DEVICE_INLINE static Acc load(T v) { return static_cast<Acc>(v); }
  WEFT_HOST_DEVICE_INLINE static T store(Acc a) { return static_cast<T>(a); }
};

/// fp16, bf16 and fp8 accumulate in fp32.
template <class T>
struct SmallFloatReduceTraits {
  using Acc = float;
  WEFT_HOST_DEVICE_INLINE static Acc load(T v) { return v.toFloat(); }
  WEFT_HOST_DEVICE_INLINE static T store(Acc a) { return T::fromFloat(a); }
};
template <>
struct ReduceTraits<Float16> : SmallFloatReduceTraits<Float16> {};
template <>
struct ReduceTraits<Bfloat16> : SmallFloatReduceTraits<Bfloat16> {};
template <>
struct ReduceTraits<Float8E4M3> : SmallFloatReduceTraits<Float8E4M3> {};
template <>
struct ReduceTraits<Float8E5M2> : SmallFloatReduceTraits<Float8E5M2> {};

/// Combines two accumulators with `op` (kAvg combines as kSum; see reduceFinish). Integer sum and product wrap.
template <class Acc>
WEFT_HOST_DEVICE_INLINE Acc reduceCombine(ReduceOp op, Acc a, Acc b) {
  if constexpr (std::is_integral_v<Acc>) {
    using U = std::make_unsigned_t<Acc>;
    switch (op) {
      case ReduceOp::kProd: return static_cast<Acc>(static_cast<U>(a) * static_cast<U>(b));
      case ReduceOp::kMax: return b > a ? b : a;
      case ReduceOp::kMin: return b < a ? b : a;
      default: return static_cast<Acc>(static_cast<U>(a) + static_cast<U>(b));
    }
  } else {
    switch (op) {
      case ReduceOp::kProd: return a * b;
      case ReduceOp::kMax:
        if (a != a) return a;
        if (b != b) return b;
        return b > a ? b : a;
      case ReduceOp::kMin:
        if (a != a) return a;
        if (b != b) return b;
        return b < a ? b : a;
      default: return a + b;
    }
  }
}

/// The last step over `n` ranks: kAvg divides by n; every other op returns `a`.
template <class Acc>
WEFT_HOST_DEVICE_INLINE Acc reduceFinish(ReduceOp op, Acc a, int n) {
  return op == ReduceOp::kAvg ? static_cast<Acc>(a / static_cast<Acc>(n)) : a;
}

/// Returns `a`, or the positive quiet NaN of its type when `a` is a NaN: GPUs and CPUs give NaNs of different sign
/// and payload for the same arithmetic, so a NaN result is made canonical before it is stored.
template <class Acc>
WEFT_HOST_DEVICE_INLINE Acc canonicalNan(Acc a) {
  if constexpr (std::is_same_v<Acc, float>) {
    return a != a ? detail::bitsToFloat(0x7fc00000u) : a;
  } else if constexpr (std::is_same_v<Acc, double>) {
    if (a == a) return a;
    const uint64_t bits = 0x7ff8000000000000ull;
    double d;
    memcpy(&d, &bits, sizeof(d));
    return d;
  } else {
    return a;
  }
}

/// Reduces value(0), value(1), ..., value(n - 1) (n >= 1) in that order with `op`, as every collective does. A NaN
/// result is stored as the positive quiet NaN (canonicalNan), whatever NaN the inputs held.
template <class T, class ValueOf>
WEFT_HOST_DEVICE_INLINE T reduceOrdered(ReduceOp op, int n, ValueOf&& value) {
  using Traits = ReduceTraits<T>;
  typename Traits::Acc acc = Traits::load(value(0));
  for (int p = 1; p < n; ++p) acc = reduceCombine(op, acc, Traits::load(value(p)));
  return Traits::store(canonicalNan(reduceFinish(op, acc, n)));
}

}  // namespace weft
