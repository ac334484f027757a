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

// isa/batch.h converts vb once (mac_f16_operand) for the vmac.f16s that share it: the same
// bits as mac_f16 / mac_f16_bcast, on the body this CPU runs and on the scalar bodies, for
// fp16 bit patterns of every class (signalling and quiet NaNs in either operand). Not
// pinned, here or in MacF16MatchesTheScalarDefinitionBitForBit: which payload a product of
// two NaNs keeps (x86 returns the first operand's, and the compiler may swap the operands
// of a product), so lanes where both are NaN are left out.
TEST(LanesSimd, MacF16WithVbConvertedFirstMatchesMacF16BitForBit) {
  std::mt19937 rng(11);
  const size_t n = 16 * 64;
  std::vector<uint32_t> b(n), c(n), a(n), fb(n), fbs(n);
  for (size_t k = 0; k < n; ++k) {
    b[k] = rng();
    c[k] = rng();
    a[k] = rng() % 8 == 0 ? 0x7fc00001u + (rng() & 0xff) : std::bit_cast<uint32_t>(std::ldexp(float(int32_t(rng())), -20));
  }
  for (size_t k = 0; k < 16; ++k) b[k] = 0x7c01 + uint32_t(k) * 0x40, c[16 + k] = 0xfe01 + uint32_t(k);  // NaNs: sNaN, qNaN
  auto nan16 = [](uint32_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff); };
  for (size_t k = 0; k < n; ++k)
    if (nan16(b[k]) && nan16(c[k])) c[k] ^= 0x4000;  // c no longer a NaN
  for (size_t k = 0; k < 16; ++k)  // the broadcast operand c[16..31] meets every b
    for (size_t j = k; j < n; j += 16)
      if (nan16(b[j]) && nan16(c[16 + k])) b[j] ^= 0x4000;
  mac_f16_operand(fb.data(), b.data(), n);
  cvt_f32_f16_scalar(fbs.data(), b.data(), n);
  {  // the bodies' scalar tail (fewer lanes than a vector) converts as the vector part: signalling NaNs quiet
    const std::vector<uint32_t> h = {0x7c01, 0xfd00, 0x7e00, 0x3c00, 0x0001, 0x8000, 0x7c00, 0x7dff, 0xfc3f,
                                     0x1234, 0xfe01, 0x7c02, 0x5555, 0x7d01, 0x0400, 0xfbff, 0x7c01};
    std::vector<uint32_t> whole(17), tail(13);
    mac_f16_operand(whole.data(), h.data(), 17);  // 16 through the vector part (8 and 8 on AVX2)
    mac_f16_operand(tail.data(), h.data() + 1, 13);
    EXPECT_EQ(tail, std::vector<uint32_t>(whole.begin() + 1, whole.begin() + 14));
    EXPECT_EQ(whole[16], whole[0]);
    EXPECT_EQ(whole[0], 0x7fc02000u);  // quieted
  }
  std::vector<uint32_t> x = a, y = a;
  mac_f16(x.data(), b.data(), c.data(), n);
  mac_f16_cvt(y.data(), fb.data(), c.data(), n);
  EXPECT_EQ(x, y);
  x = a, y = a;
  mac_f16_scalar(x.data(), b.data(), c.data(), n);
  mac_f16_cvt_scalar(y.data(), fbs.data(), c.data(), n);
  EXPECT_EQ(x, y);
  x = a, y = a;
  mac_f16_bcast(x.data(), b.data(), c.data() + 16, n);
  mac_f16_cvt_bcast(y.data(), fb.data(), c.data() + 16, n);
  EXPECT_EQ(x, y);
  x = a, y = a;
  mac_f16_bcast_scalar(x.data(), b.data(), c.data() + 16, n);
  mac_f16_cvt_bcast_scalar(y.data(), fbs.data(), c.data() + 16, n);
  EXPECT_EQ(x, y);
  {  // two patterns (a two-pattern lazy register): c16 where sel is 0, c16_on (finite) where 1
    uint32_t on[16];
    std::vector<uint8_t> sel(n / 16);
    std::vector<uint32_t> cc(n);
    for (size_t k = 0; k < 16; ++k) on[k] = (c[16 + k] >> 1) & 0x3bffu;
    for (size_t e = 0; e < n / 16; ++e) sel[e] = uint8_t(e % 2 == 1 || e % 7 == 0);
    for (size_t k = 0; k < n; ++k) cc[k] = sel[k / 16] ? on[k % 16] : c[16 + k % 16];
    x = a, y = a;
    std::vector<uint32_t> z = a;
    mac_f16_scalar(x.data(), b.data(), cc.data(), n);
    mac_f16_cvt_bcast2(y.data(), fb.data(), c.data() + 16, on, sel.data(), n / 16);
    mac_f16_cvt_bcast2_scalar(z.data(), fbs.data(), c.data() + 16, on, sel.data(), n / 16);
    EXPECT_EQ(x, y);
    EXPECT_EQ(x, z);
    sel[3] ^= 1;  // negative control: one PE with the other pattern is seen
    y = a;
    mac_f16_cvt_bcast2(y.data(), fb.data(), c.data() + 16, on, sel.data(), n / 16);
    EXPECT_NE(x, y);
  }
  x = a;
  mac_f16_bcast_scalar(x.data(), b.data(), c.data() + 16, n);
  y = a;  // negative control: the product must use vb (a stale conversion is seen)
  mac_f16_cvt(y.data(), fbs.data() + 16, c.data(), n - 16);
  EXPECT_NE(std::vector<uint32_t>(x.begin(), x.end() - 16), std::vector<uint32_t>(y.begin(), y.end() - 16));
}

// isa/batch.cpp defers a block's vmac.f16s by broadcasts and runs each accumulator's
// chain of them at once (mac_f16_cvt_chain): the same bits as the items one after the
// other through mac_f16_cvt_bcast / mac_f16_cvt_bcast2 (the body this CPU runs, and the
// scalar bodies), over a block whose PE count is not a multiple of 4, items of one and of
// two patterns, vb versions with NaNs (never meeting a NaN lane of c: see above), sums that
// overflow to inf and come back to NaN; the AVX2 and the AVX-512 bodies where the CPU has
// them. Negative controls: two items swapped, one PE's selector flipped.
TEST(LanesSimd, MacF16ChainMatchesTheVmacsOneAfterTheOther) {
  std::mt19937 rng(23);
  const size_t npes = 63, n = npes * 16, items = 9;
  std::vector<std::vector<uint32_t>> b(items, std::vector<uint32_t>(n)), fb = b, fbs = b;
  std::vector<std::vector<uint32_t>> c16(items, std::vector<uint32_t>(16)), on16 = c16;
  std::vector<std::vector<uint32_t>> cf(items, std::vector<uint32_t>(32)), cfs = cf;
  std::vector<std::vector<uint8_t>> sel(items, std::vector<uint8_t>(npes));
  auto nan16 = [](uint32_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff); };
  for (size_t t = 0; t < items; ++t) {
    for (size_t l = 0; l < 16; ++l) {
      c16[t][l] = rng() & 0x7bff;  // finite, either sign bit below
      if (rng() % 2) c16[t][l] |= 0x8000;
      on16[t][l] = rng() & 0xfbff;
    }
    for (size_t k = 0; k < n; ++k) {
      b[t][k] = rng();
      if (rng() % 16 == 0) b[t][k] = 0x7c01 + (rng() & 0x3fe);  // NaNs (c is finite)
      if (t == 4 && k % 5 == 0) b[t][k] = 0x7bff;            // 65504 * up to 65504: inf, then inf - inf
    }
    if (t == 4 || t == 5)
      for (size_t l = 0; l < 16; ++l) c16[t][l] = l % 2 ? 0x7bffu : 0xfbffu, on16[t][l] = 0x7bffu;
    for (size_t e = 0; e < npes; ++e) sel[t][e] = uint8_t(rng() % 3 == 0);
    mac_f16_operand(fb[t].data(), b[t].data(), n);
    cvt_f32_f16_scalar(fbs[t].data(), b[t].data(), n);
    mac_f16_operand(cf[t].data(), c16[t].data(), 16);
    mac_f16_operand(cf[t].data() + 16, on16[t].data(), 16);
    cvt_f32_f16_scalar(cfs[t].data(), c16[t].data(), 16);
    cvt_f32_f16_scalar(cfs[t].data() + 16, on16[t].data(), 16);
    for (size_t k = 0; k < n; ++k) ASSERT_FALSE(nan16(c16[t][k % 16]) || nan16(on16[t][k % 16]));
  }
  std::vector<uint32_t> a(n);
  for (size_t k = 0; k < n; ++k) a[k] = std::bit_cast<uint32_t>(std::ldexp(float(int32_t(rng())), -20));
  auto two = [](size_t t) { return t % 3 == 1; };  // items 1, 4, 7: two patterns
  // The vmacs one after the other, on fb / cf (this CPU's body) or fbs / cfs (scalar).
  auto one_by_one = [&](bool scalar, const std::vector<size_t>& order) {
    std::vector<uint32_t> x = a;
    for (size_t t : order) {
      const uint32_t* f = scalar ? fbs[t].data() : fb[t].data();
      if (two(t)) {
        if (scalar) mac_f16_cvt_bcast2_scalar(x.data(), f, c16[t].data(), on16[t].data(), sel[t].data(), npes);
        else mac_f16_cvt_bcast2(x.data(), f, c16[t].data(), on16[t].data(), sel[t].data(), npes);
      } else {
        if (scalar) mac_f16_cvt_bcast_scalar(x.data(), f, c16[t].data(), n);
        else mac_f16_cvt_bcast(x.data(), f, c16[t].data(), n);
      }
    }
    return x;
  };
  int body = 0;  // 0: as dispatched; 1, 2: the AVX2 / AVX-512 body
  auto chain = [&](bool scalar, const std::vector<size_t>& order) {
    std::vector<MacItem> it;
    for (size_t t : order) {
      const std::vector<uint32_t>& c = scalar ? cfs[t] : cf[t];
      it.push_back({scalar ? fbs[t].data() : fb[t].data(), c.data(), c.data() + 16, two(t) ? sel[t].data() : nullptr});
    }
    std::vector<uint32_t> x = a;
    if (scalar) {
      mac_f16_cvt_chain_scalar(x.data(), it.data(), it.size(), 0, 21);
      mac_f16_cvt_chain_scalar(x.data(), it.data(), it.size(), 21, npes);
    } else if (body) {
      EXPECT_TRUE(mac_f16_cvt_chain_body(body, x.data(), it.data(), it.size(), 0, 21));
      mac_f16_cvt_chain_body(body, x.data(), it.data(), it.size(), 21, npes);
    } else {  // in two ranges, the first not a multiple of 4 (or 8) PEs
      mac_f16_cvt_chain(x.data(), it.data(), it.size(), 0, 21);
      mac_f16_cvt_chain(x.data(), it.data(), it.size(), 21, npes);
    }
    return x;
  };
  std::vector<size_t> order(items);
  for (size_t t = 0; t < items; ++t) order[t] = t;
  const std::vector<uint32_t> want = one_by_one(false, order);
  EXPECT_EQ(chain(false, order), want);
  EXPECT_EQ(chain(true, order), one_by_one(true, order));
  EXPECT_EQ(one_by_one(true, order), want);  // (the scalar and vector bodies agree here: no NaN meets a NaN)
  size_t infs = 0, nans = 0;
  for (uint32_t w : want) infs += (w & 0x7fffffffu) == 0x7f800000u, nans += (w & 0x7fffffffu) > 0x7f800000u;
  EXPECT_GT(infs + nans, 0u);
  // A chain of one item is one vmac.f16.
  EXPECT_EQ(chain(false, {2}), one_by_one(false, {2}));
  // Both vector bodies where the CPU has them (this one runs the AVX-512 body if it can).
  for (body = 1; body <= 2; ++body) {
    if (mac_f16_cvt_chain_body(body, nullptr, nullptr, 0, 0, 0)) {
      EXPECT_EQ(chain(false, order), want) << "body " << body;
    }
  }
  body = 0;
  // Negative controls: the order of the items matters (two roundings per item), and so
  // does each PE's selector.
  std::vector<size_t> swapped = order;
  std::swap(swapped[0], swapped[2]);
  EXPECT_NE(chain(false, swapped), want);
  sel[1][62] ^= 1;  // the last PE: outside the four-PE groups
  EXPECT_NE(chain(false, order), want);
  sel[1][62] ^= 1;
  sel[7][5] ^= 1;
  EXPECT_NE(chain(false, order), want);
}

// A GEMM's rows share their vb versions: kChainRows accumulators at once
// (mac_f16_cvt_chain_rows) give the bits of each one's chain in turn, over a block whose
// PE count is not a multiple of 4, with NaN versions, sums that overflow to inf and come
// back to NaN, and items of two patterns (a selector shared by the rows, as a split-2
// GEMM's parity). Negative controls: two rows' broadcasts swapped; two items swapped; one
// PE's selector flipped.
TEST(LanesSimd, MacF16ChainRowsMatchEachRowsChain) {
  std::mt19937 rng(29);
  const size_t npes = 63, n = npes * 16, items = 7;
  constexpr int R = kChainRows;
  std::vector<std::vector<uint32_t>> fb(items, std::vector<uint32_t>(n));
  std::vector<std::vector<uint32_t>> cf(items * R, std::vector<uint32_t>(32));
  std::vector<std::vector<uint8_t>> sel(items, std::vector<uint8_t>(npes));
  auto two = [](size_t t) { return t % 3 == 1; };  // items 1, 4: two patterns
  for (auto& v : sel)
    for (uint8_t& b : v) b = uint8_t(rng() % 2);
  for (size_t t = 0; t < items; ++t) {
    std::vector<uint32_t> b(n);
    for (size_t k = 0; k < n; ++k) {
      b[k] = rng();
      if (rng() % 16 == 0) b[k] = 0x7c01 + (rng() & 0x3fe);  // NaNs (c is finite)
      if (t == 3 && k % 5 == 0) b[k] = 0x7bff;              // 65504 * 65504: inf, then inf - inf
    }
    mac_f16_operand(fb[t].data(), b.data(), n);
    for (int r = 0; r < R; ++r) {
      std::vector<uint32_t> c16(16);
      for (size_t l = 0; l < 16; ++l) c16[l] = (rng() & 0x7bff) | (rng() % 2 ? 0x8000 : 0);
      std::vector<uint32_t> on16(16);
      for (size_t l = 0; l < 16; ++l) on16[l] = rng() & 0xfbff;
      if (t == 3 || t == 4)
        for (size_t l = 0; l < 16; ++l) c16[l] = l % 2 ? 0x7bffu : 0xfbffu;
      mac_f16_operand(cf[t * R + r].data(), c16.data(), 16);
      mac_f16_operand(cf[t * R + r].data() + 16, on16.data(), 16);
    }
  }
  std::vector<std::vector<uint32_t>> start(R, std::vector<uint32_t>(n));
  for (auto& a : start)
    for (uint32_t& w : a) w = std::bit_cast<uint32_t>(std::ldexp(float(int32_t(rng())), -20));
  auto row_items = [&](int r, const std::vector<size_t>& order) {
    std::vector<MacItem> it;
    for (size_t t : order)
      it.push_back({fb[t].data(), cf[t * R + r].data(), cf[t * R + r].data() + 16, two(t) ? sel[t].data() : nullptr});
    return it;
  };
  std::vector<size_t> order(items);
  for (size_t t = 0; t < items; ++t) order[t] = t;
  // Each row's chain in turn (the reference), in two PE ranges, the first not a multiple of 4.
  std::vector<std::vector<uint32_t>> want = start;
  for (int r = 0; r < R; ++r) {
    const std::vector<MacItem> it = row_items(r, order);
    mac_f16_cvt_chain(want[r].data(), it.data(), it.size(), 0, 21);
    mac_f16_cvt_chain(want[r].data(), it.data(), it.size(), 21, npes);
  }
  auto rows = [&](const std::vector<std::vector<MacItem>>& it) {
    std::vector<std::vector<uint32_t>> x = start;
    uint32_t* a[R];
    const MacItem* p[R];
    for (int r = 0; r < R; ++r) a[r] = x[r].data(), p[r] = it[r].data();
    mac_f16_cvt_chain_rows(a, p, it[0].size(), 0, 21);
    mac_f16_cvt_chain_rows(a, p, it[0].size(), 21, npes);
    return x;
  };
  std::vector<std::vector<MacItem>> it(R);
  for (int r = 0; r < R; ++r) it[r] = row_items(r, order);
  EXPECT_EQ(rows(it), want);
  size_t infs = 0, nans = 0;
  for (const auto& a : want)
    for (uint32_t w : a) infs += (w & 0x7fffffffu) == 0x7f800000u, nans += (w & 0x7fffffffu) > 0x7f800000u;
  EXPECT_GT(infs + nans, 0u);
  // Negative controls.
  std::swap(it[1], it[2]);
  EXPECT_NE(rows(it), want);
  std::swap(it[1], it[2]);
  std::vector<size_t> swapped = order;
  std::swap(swapped[0], swapped[2]);
  it[3] = row_items(3, swapped);
  EXPECT_NE(rows(it), want);
  it[3] = row_items(3, order);
  EXPECT_EQ(rows(it), want);
  sel[4][61] ^= 1;
  EXPECT_NE(rows(it), want);
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
  {  // the broadcast form (vmla.f32 of a lazy broadcast in a batch): c16 in every PE
    const size_t m = 4096;
    std::vector<uint32_t> cc(m), xb(a.begin(), a.begin() + m), xs = xb, ys = xb;
    for (size_t k = 0; k < m; ++k) cc[k] = c[k % 16];
    mla_f32_bcast(xb.data(), b.data(), c.data(), m);
    mla_f32_bcast_scalar(xs.data(), b.data(), c.data(), m);
    mla_f32_scalar(ys.data(), b.data(), cc.data(), m);
    ASSERT_EQ(xb, ys);
    ASSERT_EQ(xs, ys);
  }
  std::vector<uint32_t> h(n);
  for (size_t k = 0; k < n; ++k) h[k] = rng();  // every fp16 pattern incl. NaN in the low half
  cvt_f32_f16(x.data(), h.data(), n);
  cvt_f32_f16_scalar(y.data(), h.data(), n);
  for (size_t k = 0; k < n; ++k) {
    if (x[k] != y[k]) {
      ASSERT_TRUE(std::isnan(std::bit_cast<float>(x[k])) && std::isnan(std::bit_cast<float>(y[k]))) << k;
    }
  }
  for (int t = 0; t < 20000; ++t) {
    uint32_t lo[16], hi[16], p[16], q[16];
    for (int l = 0; l < 16; ++l) {
      lo[l] = random_f32(rng);
      // Near the fp16 range and its rounding boundaries, subnormals included.
      hi[l] = std::bit_cast<uint32_t>(std::ldexp(float(int32_t(rng())) / 2147483648.0f, int(rng() % 44) - 26));
    }
    for (bool sat : {false, true}) {
      F16Range rp, rq;
      pack_f16_pes(p, lo, hi, 0, 1, nullptr, sat, rp);
      pack_f16_scalar(q, lo, hi, sat, rq, 0);
      for (int l = 0; l < 16; ++l) ASSERT_EQ(p[l], q[l]) << "t " << t << " lane " << l;
      // The same range, whichever body ran (the vector body takes the scalar one for a PE
      // with anything special, so equal counts check its fast-path test).
      ASSERT_EQ(rp.max_abs, rq.max_abs) << "t " << t;
      ASSERT_EQ(rp.overflow, rq.overflow);
      ASSERT_EQ(rp.underflow, rq.underflow);
      ASSERT_EQ(rp.nan, rq.nan);
      ASSERT_EQ(rp.first, rq.first);
      for (int l = 0; l < 16; ++l)  // the definition: f32_to_f16 of each element, clamped when saturating
        for (int h = 0; h < 2; ++h) {
          const float x = std::bit_cast<float>(l < 8 ? lo[2 * l + h] : hi[2 * (l - 8) + h]);
          uint16_t want = f32_to_f16(x);
          if (sat && (want & 0x7fff) == 0x7c00) want = uint16_t((want & 0x8000) | 0x7bff);
          ASSERT_EQ(uint16_t(q[l] >> (16 * h)), want) << x;
        }
    }
    std::vector<uint32_t> cv(16), cs(16);
    F16Range rv, rs;
    cvt_f16_f32(cv.data(), hi, 0, 16, false, rv);
    cvt_f16_f32_scalar(cs.data(), hi, 0, 16, false, rs);
    ASSERT_EQ(cv, cs);
    ASSERT_EQ(rv.max_abs, rs.max_abs);
    ASSERT_EQ(rv.overflow + rv.underflow + rv.nan, rs.overflow + rs.underflow + rs.nan);
  }
}

// The range of a conversion: the largest finite |x| before rounding, and the counts at the
// exact rounding thresholds of round-to-nearest-even (65520 rounds to inf, 2^-25 to 0).
TEST(LanesSimd, F16RangeCountsOverflowUnderflowAndNaNAtTheExactThresholds) {
  const float v[16] = {1.0f, 65504.0f, 65519.996f, 65520.0f, -1e6f, INFINITY, -INFINITY, NAN,
                       std::ldexp(1.0f, -25), std::ldexp(1.5f, -25), 2e-38f, 1e-40f /* fp32 subnormal: not counted */,
                       0.0f, -0.0f, -3.0f, 100.0f};
  uint32_t lo[16], hi[16], out[16];
  for (int l = 0; l < 16; ++l) lo[l] = std::bit_cast<uint32_t>(v[l]), hi[l] = std::bit_cast<uint32_t>(1.0f);
  for (bool sat : {false, true}) {
    F16Range r;
    pack_f16_pes(out, lo, hi, 0, 1, nullptr, sat, r);
    EXPECT_EQ(r.overflow, 4u);   // 65520, -1e6, +inf, -inf
    EXPECT_EQ(r.underflow, 2u);  // 2^-25 and 2e-38 (normal); 1.5 * 2^-25 rounds to the smallest subnormal
    EXPECT_EQ(r.nan, 1u);
    EXPECT_EQ(r.max_abs, 1e6f);  // finite values, overflowing ones included
    EXPECT_EQ(r.first, sat ? 7 : 3);  // saturated overflow is finite: the NaN comes first then
    EXPECT_EQ(uint16_t(out[1] >> 16), sat ? 0x7bff : 0x7c00);  // 65520
    EXPECT_EQ(uint16_t(out[2]), sat ? 0xfbff : 0xfc00);         // -1e6
    EXPECT_EQ(uint16_t(out[1]), 0x7bff);                        // 65519.996 rounds to 65504 in both modes
  }
}

// Every fp16 bit pattern, NaNs included: the hardware conversion quiets a signalling NaN
// where the definition keeps its bits, so the vector bodies must fall back there.
TEST(LanesSimd, CvtF32F16KeepsEveryBitPatternIncludingSignallingNaNs) {
  std::vector<uint32_t> b(65536 + 3), x(b.size()), y(b.size());
  for (uint32_t h = 0; h < b.size(); ++h) b[h] = (h & 0xffff) | (h << 16 & 0xabcd0000u);  // junk high halves
  cvt_f32_f16(x.data(), b.data(), b.size());
  cvt_f32_f16_scalar(y.data(), b.data(), b.size());
  ASSERT_EQ(x, y);
  EXPECT_EQ(x[0x7c01], 0x7f802000u);  // a signalling NaN stays signalling
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


// isa/batch.h: a vmla.f32 of a lazy dequantisation by a broadcast dequantises straight
// into its products. The same bits as vdq4.f32 (dequant4_pes) into a register and then
// mla_f32_bcast, on the body this CPU runs and the scalar one, over PEs with their own
// scale and zero (zero, negative, tiny, huge, inf: inf * 0 makes NaNs). Negative
// control: the other element group's products are seen.
TEST(LanesSimd, Dq4MlaF32BcastMatchesDequantThenMlaBitForBit) {
  std::mt19937 rng(13);
  const uint32_t npes = 37;
  const float scales[] = {0.0f, 1.0f, -0.5f, 3e-8f, 1.5e-3f, 700.0f, 65504.0f, 3e38f, INFINITY};
  std::vector<uint32_t> codes(npes * 16), meta(npes * 16), meta2(npes * 2), a(npes * 16);
  for (uint32_t e = 0; e < npes; ++e) {
    for (int l = 0; l < 16; ++l) codes[e * 16 + l] = rng(), meta[e * 16 + l] = rng();
    meta[e * 16] = std::bit_cast<uint32_t>(e < 9 ? scales[e] : std::ldexp(float(rng() % 2048) / 1024.0f, int(rng() % 40) - 30));
    meta[e * 16 + 1] = std::bit_cast<uint32_t>(float(rng() % 16) - (e % 3 == 0 ? 0.5f : 0.0f));
    meta2[2 * e] = meta[e * 16], meta2[2 * e + 1] = meta[e * 16 + 1];
  }
  for (uint32_t& w : a) w = std::bit_cast<uint32_t>(std::ldexp(float(int32_t(rng())), -30));
  uint32_t c16[16];
  for (uint32_t& w : c16) w = std::bit_cast<uint32_t>(std::ldexp(float(int32_t(rng())), -31));
  c16[3] = 0, c16[7] = std::bit_cast<uint32_t>(-0.0f), c16[9] = std::bit_cast<uint32_t>(1e30f);
  for (uint32_t sel = 0; sel < 8; ++sel) {
    std::vector<uint32_t> x = a, y = a, z = a, w = a, dq(npes * 16), dq_other(npes * 16);
    dq4_mla_f32_bcast(x.data(), codes.data(), meta2.data(), sel, c16, npes);
    dq4_mla_f32_bcast_scalar(y.data(), codes.data(), meta2.data(), sel, c16, npes);
    dequant4_pes(dq.data(), codes.data(), meta.data(), 0, npes, nullptr, sel, false);
    mla_f32_bcast_scalar(z.data(), dq.data(), c16, npes * 16);
    ASSERT_EQ(x, z) << "sel " << sel;
    ASSERT_EQ(y, z) << "sel " << sel;
    dequant4_pes(dq_other.data(), codes.data(), meta.data(), 0, npes, nullptr, (sel + 1) % 8, false);
    mla_f32_bcast_scalar(w.data(), dq_other.data(), c16, npes * 16);
    EXPECT_NE(x, w) << "sel " << sel;
  }
}


// vcvt.f16.f32 of 16-lane runs that are all NaN (the zero-weight model's 0/0) takes a
// vector path: the same bits, counts, first index and value as the tracked scalar
// definition, for NaNs of both signs and any payload (signalling ones included), runs
// that start at an offset, runs mixed with finite, huge and tiny values, and in place
// (the first value is the input's, read before it is overwritten). Negative
// control: one payload bit changed in the input is seen in the output.
TEST(LanesSimd, CvtF16F32OfNaNRunsMatchesTheTrackedDefinition) {
  std::mt19937 rng(17);
  const size_t n = 16 * 12 + 5;
  std::vector<uint32_t> b(n);
  for (size_t k = 0; k < n; ++k) {
    const size_t run = k / 16;
    const uint32_t nan = (rng() & 0x80000000u) | 0x7f800000u | (rng() & 0x7fffff) | (rng() % 2 ? 0x400000u : 1u);
    if (run % 3 != 2 || rng() % 4) b[k] = nan;
    else b[k] = std::bit_cast<uint32_t>(std::ldexp(float(int32_t(rng())), int(rng() % 60) - 60));
  }
  b[16 * 5 + 3] = std::bit_cast<uint32_t>(1e6f), b[16 * 8 + 9] = std::bit_cast<uint32_t>(1e-30f);
  for (size_t k0 : {size_t(0), size_t(16), size_t(3)})
    for (bool sat : {false, true}) {
      std::vector<uint32_t> x(n), y(n);
      F16Range rx, ry;
      cvt_f16_f32(x.data(), b.data(), k0, n - k0, sat, rx);
      cvt_f16_f32_scalar(y.data(), b.data(), k0, n - k0, sat, ry);
      ASSERT_EQ(x, y) << k0;
      for (size_t k = k0; k < n; ++k) {  // the definition, lane by lane
        F16Range r;
        ASSERT_EQ(y[k], f32_to_f16_tracked(std::bit_cast<float>(b[k]), sat, r, 0)) << k;
      }
      EXPECT_EQ(rx.nan, ry.nan);
      EXPECT_GT(rx.nan, 100u);
      EXPECT_EQ(rx.overflow, ry.overflow);
      EXPECT_EQ(rx.underflow, ry.underflow);
      EXPECT_EQ(rx.max_abs, ry.max_abs);
      EXPECT_EQ(rx.first, ry.first);
      EXPECT_EQ(rx.first, int64_t(k0));
      EXPECT_EQ(std::bit_cast<uint32_t>(rx.first_value), std::bit_cast<uint32_t>(ry.first_value));
      std::vector<uint32_t> in_place = b;  // vcvt.f16.f32 v, v: the same, the first value the input's
      F16Range ri;
      cvt_f16_f32(in_place.data(), in_place.data(), k0, n - k0, sat, ri);
      for (size_t k = k0; k < n; ++k) ASSERT_EQ(in_place[k], y[k]) << k;
      EXPECT_EQ(ri.first, ry.first);
      EXPECT_EQ(std::bit_cast<uint32_t>(ri.first_value), std::bit_cast<uint32_t>(ry.first_value));
      std::vector<uint32_t> c = b, z(n);
      c[16 * 4 + 7] ^= 0x100000;  // a payload bit the fp16 NaN keeps
      F16Range rz;
      cvt_f16_f32(z.data(), c.data(), k0, n - k0, sat, rz);
      EXPECT_NE(z, y);
    }
}

}  // namespace
}  // namespace gpnpu::isa::lanes
