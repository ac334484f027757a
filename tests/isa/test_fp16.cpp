// isa/fp16.h against brute-force references written from the IEEE 754 definition:
// every one of the 65536 halves decodes to sign * 2^(e-15) * 1.m (or 2^-14 * 0.m),
// and fp32 -> fp16 picks the nearest half (ties to the even code, overflow to inf)
// for every half, every midpoint between neighbours, their fp32 neighbours and a
// sweep over the fp32 bit patterns.
#include <algorithm>
#include <cmath>

#include "isa/fp16.h"
#include "tests/isa/isa_test_util.h"

namespace gpnpu::isa::test {
namespace {

// Value of a finite half, in double (exact).
double half_value(uint16_t h) {
  int sign = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  double mag = e == 0 ? std::ldexp(double(m), -24) : std::ldexp(1.0 + m / 1024.0, e - 15);
  return sign ? -mag : mag;
}

TEST(Fp16, DecodeAll65536) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const uint32_t got = fbits(f16_to_f32(uint16_t(h)));
    const uint32_t e = (h >> 10) & 31, m = h & 1023, sign = (h & 0x8000) << 16;
    if (e == 31) {  // inf, or NaN keeping its payload in the top mantissa bits
      ASSERT_EQ(got, sign | 0x7f800000u | (m << 13)) << std::hex << h;
      continue;
    }
    ASSERT_EQ(got, fbits(float(half_value(uint16_t(h))))) << std::hex << h;
    ASSERT_EQ(double(bitsf(got)), half_value(uint16_t(h))) << "not exact: " << std::hex << h;
  }
  // by hand
  EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(f16_to_f32(0x7bff), 65504.0f);
  EXPECT_EQ(fbits(f16_to_f32(0x8000)), 0x80000000u);
}

// Reference fp32 -> fp16: nearest of the sorted positive halves (plus 2^16 standing
// for infinity, code 0x7c00, which is where IEEE overflow rounding sends values
// at or above 65520), ties to the even code.
class Ref {
 public:
  Ref() {
    for (uint16_t h = 0; h <= 0x7c00; ++h) vals_.push_back(h == 0x7c00 ? 65536.0 : half_value(h));
  }
  uint16_t operator()(float f) const {
    uint32_t b = fbits(f);
    uint16_t sign = uint16_t((b >> 16) & 0x8000);
    if (std::isnan(f)) return 0;  // handled by the caller
    double a = std::fabs(double(f));
    if (a >= 65536.0) return sign | 0x7c00;
    auto it = std::lower_bound(vals_.begin(), vals_.end(), a);
    size_t hi = size_t(it - vals_.begin());
    if (vals_[hi] == a) return uint16_t(sign | hi);
    size_t lo = hi - 1;
    double dl = a - vals_[lo], dh = vals_[hi] - a;
    size_t pick = dl < dh ? lo : dh < dl ? hi : (lo % 2 == 0 ? lo : hi);
    return uint16_t(sign | pick);
  }

 private:
  std::vector<double> vals_;
};

TEST(Fp16, EncodeAgainstNearestHalf) {
  Ref ref;
  uint64_t n = 0;
  auto check = [&](float f) {
    ++n;
    ASSERT_EQ(f32_to_f16(f), ref(f)) << std::hex << "fp32 0x" << fbits(f) << " = " << f;
  };
  for (uint32_t h = 0; h < 0x7c00; ++h) {
    for (uint32_t sign : {0u, 0x8000u}) {
      const float exact = float(half_value(uint16_t(h | sign)));
      check(exact);
      check(std::nextafter(exact, 1e30f));
      check(std::nextafter(exact, -1e30f));
      // the midpoint to the next half (exact in fp32: 12 significant bits)
      double next = h + 1 == 0x7c00 ? 65536.0 : half_value(uint16_t(h + 1));
      const float mid = float((std::fabs(double(exact)) + next) / 2 * (sign ? -1 : 1));
      ASSERT_EQ(double(std::fabs(mid)), (std::fabs(double(exact)) + next) / 2);
      check(mid);
      check(std::nextafter(mid, 1e30f));
      check(std::nextafter(mid, -1e30f));
    }
  }
  for (uint64_t b = 0; b < (1ull << 32); b += 4093) {
    float f = bitsf(uint32_t(b));
    if (!std::isnan(f)) check(f);
  }
  EXPECT_GT(n, 1000000u);
}

TEST(Fp16, EncodeEdgeCasesByHand) {
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(65519.99f), 0x7bff);
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);  // the tie rounds to even, which is infinity
  EXPECT_EQ(f32_to_f16(1e10f), 0x7c00);
  EXPECT_EQ(f32_to_f16(-1e10f), 0xfc00);
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -25)), 0x0000);  // tie to even: 0
  EXPECT_EQ(f32_to_f16(std::ldexp(3.0f, -25)), 0x0002);  // tie to even: 2
  EXPECT_EQ(f32_to_f16(-std::ldexp(1.0f, -26)), 0x8000);
  EXPECT_EQ(f32_to_f16(std::ldexp(1023.5f, -24)), 0x0400);  // subnormal rounds up into the normals
  EXPECT_EQ(f32_to_f16(bitsf(0x00000001)), 0x0000);         // fp32 denormal
  EXPECT_EQ(f32_to_f16(1.0f + 1.0f / 2048), 0x3c00);
  EXPECT_EQ(f32_to_f16(1.0f + 3.0f / 2048), 0x3c02);
  // NaN stays NaN, sign and top payload bits kept, always quiet
  EXPECT_EQ(f32_to_f16(bitsf(0x7fc00000)), 0x7e00);
  EXPECT_EQ(f32_to_f16(bitsf(0xff800001)), 0xfe00);
  EXPECT_EQ(f32_to_f16(bitsf(0x7fa00000)), 0x7f00);
  EXPECT_EQ(round_f16(0.1f), float(half_value(0x2e66)));
}

}  // namespace
}  // namespace gpnpu::isa::test
