// The vectorised lane loops (isa/lanes_simd.h) give exactly the scalar definitions'
// bits: random fp16 operands (normal, subnormal, inf, zero of both signs) for vmac.f16,
// every code, selector and a spread of scales (tiny, huge, zero, negative) for vdq4.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <random>
#include <vector>

#include "isa/fp16.h"
#include "isa/lanes_simd.h"

namespace gpnpu::isa::lanes {
namespace {

TEST(LanesSimd, MacF16MatchesTheScalarDefinitionBitForBit) {
  // Without AVX-512 both sides are the scalar body; the formula check below still bites.
  std::mt19937 rng(7);
  const size_t n = 16 * 1024 + 5;  // a tail that is not a multiple of 16
  std::vector<uint32_t> b(n), c(n), a(n);
  for (size_t k = 0; k < n; ++k) {
    b[k] = rng() & 0xffff;
    c[k] = rng();  // the high halves must be ignored
    if ((b[k] & 0x7c00) == 0x7c00) b[k] &= 0xfbff;  // keep NaN out of the sums (inf stays: 0x7c00 is masked to 0x7800)
    if ((c[k] & 0x7c00) == 0x7c00) c[k] &= 0xfffffbff;
    a[k] = std::bit_cast<uint32_t>(std::ldexp(float(int32_t(rng())), -20));
  }
  for (int rep = 0; rep < 3; ++rep) {
    std::vector<uint32_t> x = a, y = a;
    mac_f16(x.data(), b.data(), c.data(), n);
    mac_f16_scalar(y.data(), b.data(), c.data(), n);
    ASSERT_EQ(x, y) << "rep " << rep;
    for (size_t k = 0; k < n; k += 97)  // the definition: a + f16(b) * f16(c), the product exact in fp32
      ASSERT_EQ(y[k], std::bit_cast<uint32_t>(std::bit_cast<float>(a[k]) +
                                              f16_to_f32(uint16_t(b[k])) * f16_to_f32(uint16_t(c[k]))))
          << k;
    a = x;
  }
}

// Random fp32 bit patterns of every class but NaN (inf, subnormal, huge, tiny).
uint32_t random_f32(std::mt19937& rng) {
  uint32_t x = rng();
  if ((x & 0x7f800000u) == 0x7f800000u && (x & 0x7fffff)) x &= 0xff800000u;  // NaN -> inf
  return x;
}

TEST(LanesSimd, MlaF32CvtAndPackMatchTheScalarDefinitionsBitForBit) {
  std::mt19937 rng(5);
  const size_t n = 4096 + 7;
  std::vector<uint32_t> a(n), b(n), c(n);
  for (size_t k = 0; k < n; ++k) {
    a[k] = random_f32(rng);
    // Operands in a range where products are finite and often inexact (the rounding matters).
    b[k] = std::bit_cast<uint32_t>(std::ldexp(float(int32_t(rng())) / 2147483648.0f, int(rng() % 60) - 30));
    c[k] = std::bit_cast<uint32_t>(std::ldexp(float(int32_t(rng())) / 2147483648.0f, int(rng() % 60) - 30));
  }
  std::vector<uint32_t> x = a, y = a;
  mla_f32(x.data(), b.data(), c.data(), n);
  mla_f32_scalar(y.data(), b.data(), c.data(), n);
  ASSERT_EQ(x, y);
  std::vector<uint32_t> h(n);
  for (size_t k = 0; k < n; ++k) h[k] = rng();  // every fp16 pattern incl. NaN in the low half
  cvt_f32_f16(x.data(), h.data(), n);
  cvt_f32_f16_scalar(y.data(), h.data(), n);
  for (size_t k = 0; k < n; ++k)
    if (x[k] != y[k]) ASSERT_TRUE(std::isnan(std::bit_cast<float>(x[k])) && std::isnan(std::bit_cast<float>(y[k]))) << k;
  for (int t = 0; t < 20000; ++t) {
    uint32_t lo[16], hi[16], p[16], q[16];
    for (int l = 0; l < 16; ++l) {
      lo[l] = random_f32(rng);
      // Near the fp16 range and its rounding boundaries, subnormals included.
      hi[l] = std::bit_cast<uint32_t>(std::ldexp(float(int32_t(rng())) / 2147483648.0f, int(rng() % 44) - 26));
    }
    pack_f16(p, lo, hi);
    pack_f16_scalar(q, lo, hi);
    for (int l = 0; l < 16; ++l) ASSERT_EQ(p[l], q[l]) << "t " << t << " lane " << l;
  }
}

TEST(LanesSimd, Dequant4MatchesTheScalarDefinitionBitForBit) {
  std::mt19937 rng(11);
  const float scales[] = {0.0f, 1.0f, -0.5f, 3e-8f, 6e-5f, 1.5e-3f, 700.0f, 5000.0f, 65504.0f};
  for (int t = 0; t < 2000; ++t) {
    uint32_t codes[16];
    for (uint32_t& w : codes) w = rng();
    uint32_t meta[16] = {std::bit_cast<uint32_t>(0.0f)};
    float scale = t < 9 ? scales[t] : std::ldexp(float(rng() % 2048) / 1024.0f, int(rng() % 40) - 30);
    float zero = float(rng() % 16);
    for (uint32_t sel = 0; sel < 8; ++sel)
      for (bool f16 : {false, true}) {
        uint32_t x[16], y[16];
        meta[0] = std::bit_cast<uint32_t>(scale);
        meta[1] = std::bit_cast<uint32_t>(zero);
        dequant4_pes(x, codes, meta, 0, 1, nullptr, sel, f16);
        dequant4_scalar(y, codes, scale, zero, sel, f16);
        for (int l = 0; l < 16; ++l) {
          ASSERT_EQ(x[l], y[l]) << "scale " << scale << " sel " << sel << " lane " << l;
          const uint32_t code = sel * 16 + uint32_t(l);  // the definition, nibble by nibble
          const float w = (float((codes[code / 8] >> (4 * (code % 8))) & 15) - zero) * scale;
          ASSERT_EQ(y[l], f16 ? uint32_t(f32_to_f16(w)) : std::bit_cast<uint32_t>(w));
        }
      }
  }
}

}  // namespace
}  // namespace gpnpu::isa::lanes
