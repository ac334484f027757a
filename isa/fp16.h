// IEEE 754 binary16 <-> binary32 conversion, bit-exact and portable.
// fp16 values travel as uint16_t bit patterns; conversion to fp16 rounds to
// nearest, ties to even, with overflow to infinity and gradual underflow.
#pragma once
#include <cstdint>
#include <cstring>

namespace gpnpu {

inline float bits_to_f32(uint32_t b) { float f; std::memcpy(&f, &b, 4); return f; }
inline uint32_t f32_to_bits(float f) { uint32_t b; std::memcpy(&b, &f, 4); return b; }

inline float f16_to_f32(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t man = h & 0x3ff;
  if (exp == 0x1f) return bits_to_f32(sign | 0x7f800000u | (man << 13));  // inf / nan
  if (exp == 0) {
    if (man == 0) return bits_to_f32(sign);
    // subnormal: value = man * 2^-24, exact in fp32
    float v = float(man) * 5.9604644775390625e-08f;
    return sign ? -v : v;
  }
  return bits_to_f32(sign | ((exp + 112) << 23) | (man << 13));
}

inline uint16_t f32_to_f16(float f) {
  uint32_t x = f32_to_bits(f);
  uint16_t sign = uint16_t((x >> 16) & 0x8000);
  uint32_t exp = (x >> 23) & 0xff;
  uint32_t man = x & 0x7fffff;
  if (exp == 0xff) return uint16_t(sign | 0x7c00 | (man ? 0x200 | (man >> 13) : 0));  // inf / nan
  int32_t e = int32_t(exp) - 127 + 15;
  if (e >= 0x1f) return uint16_t(sign | 0x7c00);  // overflow -> inf
  if (e <= 0) {
    if (e < -10) return sign;  // underflows to zero
    man |= 0x800000;           // implicit bit
    uint32_t shift = uint32_t(14 - e);
    uint32_t half = man >> shift;
    uint32_t rem = man & ((1u << shift) - 1);
    uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1))) half++;
    return uint16_t(sign | half);
  }
  uint32_t half = (uint32_t(e) << 10) | (man >> 13);
  uint32_t rem = man & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (half & 1))) half++;  // may carry into exp: correct
  return uint16_t(sign | half);
}

inline float round_f16(float f) { return f16_to_f32(f32_to_f16(f)); }

// ---- numerics tracking of fp32 -> fp16 conversions (functional runs) ----
// Thresholds of round-to-nearest-even: |x| >= 65520 rounds to inf (65,504 is the largest
// finite fp16); a normal |x| <= 2^-25 rounds to zero.
inline constexpr float kF16Max = 65504.0f;
inline constexpr float kF16OverflowAt = 65520.0f;
inline constexpr float kF16ZeroBelow = 2.98023223876953125e-08f;  // 2^-25 (itself rounds to 0)
inline constexpr float kF32MinNormal = 1.17549435e-38f;

// What a batch of conversions did. `first` is the index (in the caller's numbering) of
// the first value written as a non-finite fp16 (inf or NaN), -1 if none.
struct F16Range {
  float max_abs = 0;       // largest finite |x| converted, before rounding (may exceed 65,504)
  uint64_t overflow = 0;   // |x| >= 65520 or +-inf: written as inf, or clamped to +-65,504 when saturating
  uint64_t underflow = 0;  // normal non-zero x written as zero
  uint64_t nan = 0;        // NaN x
  int64_t first = -1;
  float first_value = 0;   // x at `first`
  void merge(const F16Range& o) {  // o's indices come after this one's
    if (o.max_abs > max_abs) max_abs = o.max_abs;
    overflow += o.overflow;
    underflow += o.underflow;
    nan += o.nan;
    if (first < 0 && o.first >= 0) first = o.first, first_value = o.first_value;
  }
};

// f32_to_f16 that records x in r (index idx); saturate clamps overflow to +-65,504.
inline uint16_t f32_to_f16_tracked(float x, bool saturate, F16Range& r, int64_t idx) {
  uint16_t h = f32_to_f16(x);
  const float ax = x < 0 ? -x : x;
  if (x != x) {
    r.nan++;
  } else if ((h & 0x7fff) == 0x7c00) {
    r.overflow++;
    if (ax <= 3.4028235e38f && ax > r.max_abs) r.max_abs = ax;
    if (saturate) return uint16_t((h & 0x8000) | 0x7bff);
  } else {
    if ((h & 0x7fff) == 0 && ax >= kF32MinNormal) r.underflow++;
    if (ax > r.max_abs) r.max_abs = ax;
    return h;
  }
  if (r.first < 0) r.first = idx, r.first_value = x;
  return h;
}

}  // namespace gpnpu
