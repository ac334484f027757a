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

}  // namespace gpnpu
