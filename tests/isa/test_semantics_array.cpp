// Golden tests of the array rows (ALU, fp32, MAC, SFU, cross-lane and cross-PE).
// The machine is 2 x 3 PEs (pe = row * 3 + col) unless a test says otherwise.
// Expected values are written by hand or by a formula in the test, never by
// calling the semantics' own helpers.
#include <cmath>
#include <limits>

#include "tests/isa/golden.h"

namespace gpnpu::isa::test {
namespace {

using Fn = std::function<uint32_t(uint32_t pe, int lane)>;
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// Checks every lane of register r; `enabled(pe)` false means "must equal old(pe, lane)".
void expect_v(Machine& m, int r, const Fn& want, const char* what = "",
              const std::function<bool(uint32_t)>& enabled = nullptr, const Fn& old = nullptr) {
  for (uint32_t e = 0; e < m.s.npe; ++e)
    for (int l = 0; l < kLanes; ++l) {
      uint32_t w = (!enabled || enabled(e)) ? want(e, l) : old(e, l);
      ASSERT_EQ(m.V(r, e, l), w) << what << " v" << r << " pe " << e << " lane " << l << std::hex
                                 << " got 0x" << m.V(r, e, l) << " want 0x" << w;
    }
}

TEST_F(Golden, vmov) {
  m.fill(2, [](uint32_t e, int l) { return e * 1000 + l; });
  m.fill(1, [](uint32_t, int) { return 0xdeadu; });
  m.set_pred(3, {0, 4});
  run("vmov v1, v2 @p3");
  expect_v(m, 1, [](uint32_t e, int l) { return e * 1000 + l; }, "vmov @p3",
           [](uint32_t e) { return e == 0 || e == 4; }, [](uint32_t, int) { return 0xdeadu; });
  run("vmov v1, v2");
  expect_v(m, 1, [](uint32_t e, int l) { return e * 1000 + l; });
}

TEST_F(Golden, vsplat) {
  s.x[5] = 0xcafef00d;
  run("vsplat v7, x5");
  expect_v(m, 7, [](uint32_t, int) { return 0xcafef00du; });
  run("vsplat v7, x0");
  expect_v(m, 7, [](uint32_t, int) { return 0u; });
}

TEST_F(Golden, vsplati) {
  m.set_pred(1, {5});
  run("vsplati v3, -2 @p1");
  expect_v(m, 3, [](uint32_t, int) { return 0xfffffffeu; }, "", [](uint32_t e) { return e == 5; },
           [](uint32_t, int) { return 0u; });
}

TEST_F(Golden, vsplat_f32) {
  run("vsplat.f32 v3, -0.0");
  expect_v(m, 3, [](uint32_t, int) { return 0x80000000u; });
  run("vsplat.f32 v3, 1e-5");
  expect_v(m, 3, [](uint32_t, int) { return 0x3727c5acu; });  // fp32 nearest to 1e-5
  run("vsplat.f32 v3, 0x7fc00001");                            // raw bits: a NaN with payload
  expect_v(m, 3, [](uint32_t, int) { return 0x7fc00001u; });
}

// Elementwise int32 ops on two patterns that include wrap-around and sign.
uint32_t pat_b(uint32_t e, int l) { return 0x7ffffff0u + e * 7 + uint32_t(l) * 3; }
uint32_t pat_c(uint32_t e, int l) { return uint32_t(l) * 0x11111111u - e; }

TEST_F(Golden, vadd_i32) {
  m.fill(2, pat_b);
  m.fill(3, pat_c);
  run("vadd.i32 v1, v2, v3");
  expect_v(m, 1, [](uint32_t e, int l) { return pat_b(e, l) + pat_c(e, l); });
  run("vadd.i32 v2, v2, v2");  // aliasing
  expect_v(m, 2, [](uint32_t e, int l) { return 2 * pat_b(e, l); });
}

TEST_F(Golden, vsub_i32) {
  m.fill(2, pat_b);
  m.fill(3, pat_c);
  run("vsub.i32 v1, v2, v3");
  expect_v(m, 1, [](uint32_t e, int l) { return pat_b(e, l) - pat_c(e, l); });
}

TEST_F(Golden, vmul_i32) {
  m.fill(2, pat_b);
  m.fill(3, pat_c);
  run("vmul.i32 v1, v2, v3");
  expect_v(m, 1, [](uint32_t e, int l) { return uint32_t(uint64_t(pat_b(e, l)) * pat_c(e, l)); });
}

TEST_F(Golden, vand) {
  m.fill(2, pat_b);
  m.fill(3, pat_c);
  run("vand v1, v2, v3");
  expect_v(m, 1, [](uint32_t e, int l) { return pat_b(e, l) & pat_c(e, l); });
}

TEST_F(Golden, vor) {
  m.fill(2, pat_b);
  m.fill(3, pat_c);
  run("vor v1, v2, v3");
  expect_v(m, 1, [](uint32_t e, int l) { return pat_b(e, l) | pat_c(e, l); });
}

TEST_F(Golden, vxor) {
  m.fill(2, pat_b);
  m.fill(3, pat_c);
  run("vxor v1, v2, v3");
  expect_v(m, 1, [](uint32_t e, int l) { return pat_b(e, l) ^ pat_c(e, l); });
}

TEST_F(Golden, vshl) {
  m.fill(2, [](uint32_t, int) { return 0x80000003u; });
  run("vshl v1, v2, 1");
  expect_v(m, 1, [](uint32_t, int) { return 6u; });
  run("vshl v1, v2, 31");
  expect_v(m, 1, [](uint32_t, int) { return 0x80000000u; });
  run("vshl v1, v2, 0");
  expect_v(m, 1, [](uint32_t, int) { return 0x80000003u; });
}

TEST_F(Golden, vshr) {
  m.fill(2, [](uint32_t, int) { return 0x80000010u; });
  run("vshr v1, v2, 4");
  expect_v(m, 1, [](uint32_t, int) { return 0x08000001u; });
}

TEST_F(Golden, vsra) {
  m.fill(2, [](uint32_t, int l) { return l % 2 ? 0x80000010u : 0x40000010u; });
  run("vsra v1, v2, 4");
  expect_v(m, 1, [](uint32_t, int l) { return l % 2 ? 0xf8000001u : 0x04000001u; });
  run("vsra v1, v2, 31");
  expect_v(m, 1, [](uint32_t, int l) { return l % 2 ? 0xffffffffu : 0u; });
}

// fp32 compare cases: lane -> (b, c, b < c)
struct FCmp {
  float b, c;
  bool lt;
};
const FCmp kFCmp[kLanes] = {{1, 2, true},         {2, 1, false},      {-0.0f, 0.0f, false}, {0.0f, -0.0f, false},
                            {kNaN, 1, false},     {1, kNaN, false},   {-kInf, -1e38f, true}, {1e38f, kInf, true},
                            {-1, -2, false},      {-2, -1, true},     {1e-45f, 0, false},   {0, 1e-45f, true},
                            {3, 3, false},        {-kInf, kInf, true}, {kNaN, kNaN, false}, {-1e-45f, 0, true}};

TEST_F(Golden, vcmplt_f32) {
  m.fillf(2, [](uint32_t, int l) { return kFCmp[l].b; });
  m.fillf(3, [](uint32_t, int l) { return kFCmp[l].c; });
  run("vcmplt.f32 v1, v2, v3");
  expect_v(m, 1, [](uint32_t, int l) { return kFCmp[l].lt ? 0xffffffffu : 0u; });
}

TEST_F(Golden, vcmplt_i32) {
  m.fill(2, [](uint32_t, int l) { return uint32_t(l - 8); });
  m.fill(3, [](uint32_t e, int) { return uint32_t(int(e) - 3); });
  run("vcmplt.i32 v1, v2, v3");
  expect_v(m, 1, [](uint32_t e, int l) { return l - 8 < int(e) - 3 ? 0xffffffffu : 0u; });
}

TEST_F(Golden, vcmpeq_i32) {
  m.fill(2, [](uint32_t, int l) { return uint32_t(l); });
  m.fill(3, [](uint32_t e, int) { return e * 3; });
  run("vcmpeq.i32 v1, v2, v3");
  expect_v(m, 1, [](uint32_t e, int l) { return uint32_t(l) == e * 3 ? 0xffffffffu : 0u; });
}

TEST_F(Golden, vsel) {
  m.fill(2, [](uint32_t e, int l) { return 100 + e * 16 + l; });
  m.fill(3, [](uint32_t e, int l) { return 900 + e * 16 + l; });
  m.fill(4, [](uint32_t e, int l) { return (l + e) % 3 == 0 ? 0x80000000u : (l % 5 == 0 ? 0u : 1u); });
  run("vsel v1, v2, v3, v4");
  expect_v(m, 1, [](uint32_t e, int l) {
    bool nonzero = (l + e) % 3 == 0 || l % 5 != 0;
    return nonzero ? 100 + e * 16 + l : 900 + e * 16 + l;
  });
}

TEST_F(Golden, vlaneid) {
  m.set_pred(2, {1, 2});
  run("vlaneid v9 @p2");
  expect_v(m, 9, [](uint32_t, int l) { return uint32_t(l); }, "", [](uint32_t e) { return e == 1 || e == 2; },
           [](uint32_t, int) { return 0u; });
}

TEST_F(Golden, vpeid) {
  run("vpeid v9");
  expect_v(m, 9, [](uint32_t e, int) { return e; });
}

// A 64-byte register viewed as 128 4-bit codes (low nibble first).
uint32_t code4(uint32_t e, int c) { return uint32_t(c * 7 + 3 + e) & 15; }
uint32_t packed4(uint32_t e, int word) {
  uint32_t w = 0;
  for (int j = 0; j < 8; ++j) w |= code4(e, word * 8 + j) << (4 * j);
  return w;
}

TEST_F(Golden, vunpack_u4) {
  m.fill(2, packed4);
  for (int n : {0, 3, 7}) {
    run("vunpack.u4 v1, v2, " + std::to_string(n));
    expect_v(m, 1, [n](uint32_t e, int l) { return code4(e, n * 16 + l); }, "vunpack.u4");
  }
  // the low nibble of word 0 is code 0: a single hand-written check
  m.fill(3, [](uint32_t, int w) { return w == 0 ? 0x000000a5u : 0u; });
  run("vunpack.u4 v1, v3, 0");
  EXPECT_EQ(m.V(1, 0, 0), 5u);
  EXPECT_EQ(m.V(1, 0, 1), 0xau);
  EXPECT_EQ(m.V(1, 0, 2), 0u);
  run("vunpack.u4 v2, v2, 5");  // va == vb
  expect_v(m, 2, [](uint32_t e, int l) { return code4(e, 5 * 16 + l); }, "vunpack.u4 aliased");
  std::string err = error_of([&] { run("vunpack.u4 v1, v2, 8"); });
  EXPECT_NE(err.find("vunpack.u4: element group 8 out of range (0..7)"), std::string::npos) << err;
}

// A 64-byte register viewed as 64 bytes, little endian within each lane.
uint32_t byte8(uint32_t e, int k) { return uint32_t(k * 37 + e * 11 + 0x70) & 0xff; }
uint32_t packed8(uint32_t e, int word) {
  uint32_t w = 0;
  for (int j = 0; j < 4; ++j) w |= byte8(e, word * 4 + j) << (8 * j);
  return w;
}

TEST_F(Golden, vunpack_i8) {
  m.fill(2, packed8);
  for (int n = 0; n < 4; ++n) {
    run("vunpack.i8 v1, v2, " + std::to_string(n));
    expect_v(m, 1, [n](uint32_t e, int l) {
      int b = int(byte8(e, n * 16 + l));
      return uint32_t(b >= 128 ? b - 256 : b);
    }, "vunpack.i8");
  }
  m.fill(3, [](uint32_t, int w) { return w == 0 ? 0x7f80ff01u : 0u; });
  run("vunpack.i8 v1, v3, 0");
  EXPECT_EQ(m.V(1, 0, 0), 1u);
  EXPECT_EQ(m.V(1, 0, 1), uint32_t(-1));
  EXPECT_EQ(m.V(1, 0, 2), uint32_t(-128));
  EXPECT_EQ(m.V(1, 0, 3), 127u);
  std::string err = error_of([&] { run("vunpack.i8 v1, v2, 4"); });
  EXPECT_NE(err.find("vunpack.i8: element group 4 out of range (0..3)"), std::string::npos) << err;
}

// 32 fp16 elements per register; element k lives in lane k/2, low half first.
uint16_t half_el(uint32_t e, int k) { return uint16_t((k % 2 ? 0x8000 : 0) | (0x3c00 + k * 3 + e * 100)); }
float half_val(uint32_t e, int k) { return (k % 2 ? -1.0f : 1.0f) * (1.0f + float(k * 3 + e * 100) / 1024.0f); }
uint32_t packed16(uint32_t e, int w) { return uint32_t(half_el(e, 2 * w)) | uint32_t(half_el(e, 2 * w + 1)) << 16; }

TEST_F(Golden, vunpack_f16) {
  m.fill(2, packed16);
  for (int n = 0; n < 2; ++n) {
    run("vunpack.f16 v1, v2, " + std::to_string(n));
    expect_v(m, 1, [n](uint32_t e, int l) { return fbits(half_val(e, n * 16 + l)); }, "vunpack.f16");
  }
  run("vunpack.f16 v2, v2, 1");  // va == vb reads the source before writing
  expect_v(m, 2, [](uint32_t e, int l) { return fbits(half_val(e, 16 + l)); }, "vunpack.f16 aliased");
  std::string err = error_of([&] { run("vunpack.f16 v1, v2, 2"); });
  EXPECT_NE(err.find("vunpack.f16: element group 2 out of range (0..1)"), std::string::npos) << err;
}

TEST_F(Golden, vpack_f16) {
  // vb lane l = 1 + l/1024 (fp16 0x3c00 + l); vc lane l = -(2 + l/512) (fp16 0xc000 + l)
  auto b = [](uint32_t, int l) { return 1.0f + float(l) / 1024.0f; };
  auto c = [](uint32_t e, int l) { return -(2.0f + float(l + e) / 512.0f); };
  auto el = [](uint32_t e, int k) -> uint32_t { return k < 16 ? 0x3c00u + k : 0xc000u + (k - 16) + e; };
  auto want = [el](uint32_t e, int w) { return el(e, 2 * w) | el(e, 2 * w + 1) << 16; };
  m.fillf(2, b);
  m.fillf(3, c);
  run("vpack.f16 v1, v2, v3");
  expect_v(m, 1, want, "vpack.f16");
  run("vpack.f16 v4, v2, v2");  // vb == vc
  expect_v(m, 4, [](uint32_t, int w) { return (0x3c00u + (2 * w) % 16) | (0x3c00u + (2 * w + 1) % 16) << 16; },
           "vpack.f16 vb==vc");
  run("vpack.f16 v2, v2, v3");  // va == vb
  expect_v(m, 2, want, "vpack.f16 va==vb");
  m.fillf(2, b);
  run("vpack.f16 v3, v2, v3");  // va == vc
  expect_v(m, 3, want, "vpack.f16 va==vc");
  // rounding to nearest even, overflow, subnormal
  const float in[4] = {1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048, 70000.0f, std::ldexp(1.5f, -24)};
  m.fillf(5, [&](uint32_t, int l) { return l < 4 ? in[l] : 0.0f; });
  run("vpack.f16 v6, v5, v5");
  EXPECT_EQ(m.V(6, 0, 0), 0x3c023c00u);  // ties: 1+2^-11 -> 1.0, 1+3*2^-11 -> 1+2^-9
  EXPECT_EQ(m.V(6, 0, 1), 0x00027c00u);  // 70000 -> inf; 1.5 * 2^-24 ties to even: 2 * 2^-24
}

// Two NaN operands: vadd.f32 and vmul.f32 keep vc's, quieted (the definition; a compiler
// may order the operands of a commutative + or * either way). One NaN: that one, quieted.
// Negative control (tried): without the rule in isa/sem_array.cpp, this build gives vb's.
template <typename Run>
void two_nans(Machine& m, Run&& run, const char* op, float both_finite) {
  const uint32_t qb = 0xffc00001u, sc = 0x7f800123u;  // vb: quiet, negative; vc: signalling, positive
  m.fill(2, [&](uint32_t, int l) { return l < 8 ? qb : fbits(1.5f); });
  m.fill(3, [&](uint32_t, int l) { return l % 2 ? sc : fbits(2.0f); });
  run(std::string(op) + " v1, v2, v3");
  expect_v(m, 1, [&](uint32_t, int l) { return l % 2 ? sc | 0x400000u : l < 8 ? qb : fbits(both_finite); }, op);
}

TEST_F(Golden, vadd_f32) {
  m.fillf(2, [](uint32_t e, int l) { return 0.1f * float(l) + float(e); });
  m.fillf(3, [](uint32_t, int l) { return l == 0 ? kInf : 0.7f; });
  run("vadd.f32 v1, v2, v3");
  expect_v(m, 1, [](uint32_t e, int l) { return fbits(l == 0 ? kInf : (0.1f * float(l) + float(e)) + 0.7f); });
  m.fillf(4, [](uint32_t, int) { return 16777216.0f; });
  m.fillf(5, [](uint32_t, int) { return 1.0f; });
  run("vadd.f32 v1, v4, v5");  // 2^24 + 1 rounds to even: 2^24
  EXPECT_EQ(m.VF(1, 3, 7), 16777216.0f);
  two_nans(m, [&](const std::string& t) { run(t); }, "vadd.f32", 3.5f);
}

TEST_F(Golden, vsub_f32) {
  m.fillf(2, [](uint32_t e, int l) { return 0.1f * float(l) + float(e); });
  m.fillf(3, [](uint32_t, int) { return 0.7f; });
  run("vsub.f32 v1, v2, v3");
  expect_v(m, 1, [](uint32_t e, int l) { return fbits((0.1f * float(l) + float(e)) - 0.7f); });
  run("vsub.f32 v1, v3, v3");  // x - x = +0
  expect_v(m, 1, [](uint32_t, int) { return 0u; });
}

TEST_F(Golden, vmul_f32) {
  m.fillf(2, [](uint32_t e, int l) { return 0.1f * float(l) - float(e); });
  m.fillf(3, [](uint32_t, int) { return -3.0f; });
  run("vmul.f32 v1, v2, v3");
  expect_v(m, 1, [](uint32_t e, int l) { return fbits((0.1f * float(l) - float(e)) * -3.0f); });
  two_nans(m, [&](const std::string& t) { run(t); }, "vmul.f32", 3.0f);
}

TEST_F(Golden, vmla_f32) {
  // (1 + 2^-12)^2 = 1 + 2^-11 + 2^-24: the product rounds (tie to even) to 1 + 2^-11,
  // so with two roundings a + b*c is exactly 0; a fused multiply-add would give 2^-24.
  const float b = 1.0f + 1.0f / 4096;
  m.fillf(1, [](uint32_t, int) { return -(1.0f + 1.0f / 2048); });
  m.fillf(2, [&](uint32_t, int) { return b; });
  m.fillf(3, [&](uint32_t, int) { return b; });
  run("vmla.f32 v1, v2, v3");
  expect_v(m, 1, [](uint32_t, int) { return 0u; });
  // accumulates: a = 0.5 + 2 * 3 = 6.5 on enabled PEs only
  m.fillf(4, [](uint32_t, int) { return 0.5f; });
  m.fillf(5, [](uint32_t, int) { return 2.0f; });
  m.fillf(6, [](uint32_t, int) { return 3.0f; });
  m.set_pred(1, {2, 3});
  run("vmla.f32 v4, v5, v6 @p1");
  expect_v(m, 4, [](uint32_t, int) { return fbits(6.5f); }, "vmla @p1", [](uint32_t e) { return e == 2 || e == 3; },
           [](uint32_t, int) { return fbits(0.5f); });
}

TEST_F(Golden, vmax_f32) {
  const float b[4] = {1, kNaN, -0.0f, -kInf}, c[4] = {2, 3, -1, kNaN};
  const float want[4] = {2, 3, -0.0f, -kInf};  // a NaN operand yields the other
  m.fillf(2, [&](uint32_t, int l) { return b[l % 4]; });
  m.fillf(3, [&](uint32_t, int l) { return c[l % 4]; });
  run("vmax.f32 v1, v2, v3");
  expect_v(m, 1, [&](uint32_t, int l) { return fbits(want[l % 4]); });
}

TEST_F(Golden, vmin_f32) {
  const float b[4] = {1, kNaN, 0.5f, kInf}, c[4] = {2, 3, -1, kNaN};
  const float want[4] = {1, 3, -1, kInf};
  m.fillf(2, [&](uint32_t, int l) { return b[l % 4]; });
  m.fillf(3, [&](uint32_t, int l) { return c[l % 4]; });
  run("vmin.f32 v1, v2, v3");
  expect_v(m, 1, [&](uint32_t, int l) { return fbits(want[l % 4]); });
}

TEST_F(Golden, vcvt_f32_f16) {
  // low half -> fp32; the high half is ignored
  const uint32_t in[10] = {0xdead3c00, 0x00000001, 0xffff7c00, 0x0000fc00, 0x12348000,
                           0x00007bff, 0x00003555, 0x00000400, 0x000003ff, 0x00007e00};
  const uint32_t want[10] = {0x3f800000, 0x33800000, 0x7f800000, 0xff800000, 0x80000000,
                             0x477fe000, 0x3eaaa000, 0x38800000, 0x387fc000, 0x7fc00000};
  m.fill(2, [&](uint32_t, int l) { return in[l % 10]; });
  run("vcvt.f32.f16 v1, v2");
  expect_v(m, 1, [&](uint32_t, int l) { return want[l % 10]; });
}

TEST_F(Golden, vcvt_f16_f32) {
  const float in[14] = {1.0f, 65504.0f, 65520.0f, 1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048, std::ldexp(1.0f, -24),
                        std::ldexp(1.0f, -25), std::ldexp(1.5f, -25), -0.0f, kNaN, -kInf, 1e-8f,
                        std::ldexp(1.0f, -14), -(65520.0f - 1.0f / 256)};
  const uint32_t want[14] = {0x3c00, 0x7bff, 0x7c00, 0x3c00, 0x3c02, 0x0001, 0x0000,
                             0x0001, 0x8000, 0x7e00, 0xfc00, 0x0000, 0x0400, 0xfbff};
  m.fillf(2, [&](uint32_t, int l) { return in[l % 14]; });
  m.fill(1, [](uint32_t, int) { return 0xffffffffu; });
  run("vcvt.f16.f32 v1, v2");
  expect_v(m, 1, [&](uint32_t, int l) { return want[l % 14]; });  // high half 0
}

TEST_F(Golden, vcvt_f32_i32) {
  const int32_t in[6] = {16777217, 16777219, -1, INT32_MIN, INT32_MAX, 0};
  const float want[6] = {16777216.0f, 16777220.0f, -1.0f, -2147483648.0f, 2147483648.0f, 0.0f};
  m.fill(2, [&](uint32_t, int l) { return uint32_t(in[l % 6]); });
  run("vcvt.f32.i32 v1, v2");
  expect_v(m, 1, [&](uint32_t, int l) { return fbits(want[l % 6]); });
}

TEST_F(Golden, vcvt_i32_f32) {
  const float in[16] = {2.5f,  3.5f,  -2.5f, -0.5f,        0.5f,          1.5f,   3e9f,          -3e9f,
                        kNaN,  kInf,  -kInf, 2147483520.0f, -2147483648.0f, 2147483648.0f, 1.9999999f, -1.5f};
  const int32_t want[16] = {2,         4,         -2,         0,          0,           2, INT32_MAX, INT32_MIN,
                            0,         INT32_MAX, INT32_MIN,  2147483520, INT32_MIN,   INT32_MAX, 2, -2};
  m.fillf(2, [&](uint32_t, int l) { return in[l]; });
  run("vcvt.i32.f32 v1, v2");
  expect_v(m, 1, [&](uint32_t, int l) { return uint32_t(want[l]); });
}

// W4 dequantisation: codes as in vunpack.u4, scale = lane 0 and zero = lane 1 of vc.
TEST_F(Golden, vdq4_f32) {
  m.fill(2, packed4);
  m.fillf(3, [](uint32_t e, int l) { return l == 0 ? (e % 2 ? -0.25f : 0.5f) : l == 1 ? 7.5f + float(e) : 1e30f; });
  for (int n : {0, 7}) {
    run("vdq4.f32 v1, v2, v3, " + std::to_string(n));
    expect_v(m, 1, [n](uint32_t e, int l) {
      return fbits((float(code4(e, n * 16 + l)) - (7.5f + float(e))) * (e % 2 ? -0.25f : 0.5f));
    }, "vdq4.f32");
  }
  // by hand: PE 0 code 0 is 3, zero 7.5, scale 0.5 -> -2.25
  EXPECT_EQ(m.VF(1, 0, 0), float(code4(0, 7 * 16)) * 0.5f - 3.75f);
  run("vdq4.f32 v1, v2, v3, 0");
  EXPECT_EQ(m.VF(1, 0, 0), -2.25f);
  run("vdq4.f32 v3, v2, v3, 2");  // va == vc: scale and zero read before the write
  expect_v(m, 3, [](uint32_t e, int l) {
    return fbits((float(code4(e, 32 + l)) - (7.5f + float(e))) * (e % 2 ? -0.25f : 0.5f));
  }, "vdq4.f32 va==vc");
  run("vdq4.f32 v2, v2, v1, 1");  // va == vb; v1 lanes 0/1 of PE 0 are -2.25 and code 1 - 7.5
  EXPECT_EQ(m.VF(2, 0, 0), (float(code4(0, 16)) - m.VF(1, 0, 1)) * -2.25f);
  std::string err = error_of([&] { run("vdq4.f32 v1, v2, v3, 8"); });
  EXPECT_NE(err.find("vdq4.f32: element group 8 out of range (0..7)"), std::string::npos) << err;
}

// The fp16 code of an exactly representable value, by search over all halves.
uint32_t exact_half(float v) {
  for (uint32_t h = 0; h < 0x10000; ++h)
    if ((h & 0x7c00) != 0x7c00 && fbits(f16_to_f32(uint16_t(h))) == fbits(v)) return h;
  ADD_FAILURE() << v << " is not an fp16 value";
  return 0;
}

TEST_F(Golden, vdq4_f16) {
  m.fill(2, packed4);
  m.fill(1, [](uint32_t, int) { return 0xffffffffu; });
  m.fillf(3, [](uint32_t e, int l) { return l == 0 ? 0.5f + float(e) : l == 1 ? 8.0f : 0.0f; });
  run("vdq4.f16 v1, v2, v3, 4");
  expect_v(m, 1, [](uint32_t e, int l) {
    return exact_half((float(code4(e, 64 + l)) - 8.0f) * (0.5f + float(e)));  // high half 0
  }, "vdq4.f16");
  // rounding: scale 1 + 2^-11, zero 0; code 1 -> tie to even 1.0, code 3 -> 3 + 2^-9
  m.fill(4, [](uint32_t, int w) { return w == 0 ? 0x00003001u : 0u; });  // codes 1, 0, 0, 3, ...
  m.fillf(5, [](uint32_t, int l) { return l == 0 ? 1.0f + 1.0f / 2048 : 0.0f; });
  run("vdq4.f16 v6, v4, v5, 0");
  EXPECT_EQ(m.V(6, 0, 0), 0x3c00u);
  EXPECT_EQ(m.V(6, 0, 1), 0x0000u);
  EXPECT_EQ(m.V(6, 0, 3), 0x4201u);
}

TEST_F(Golden, vmac_f16) {
  // fp16 (1 + 2^-10)^2 = 1 + 2^-9 + 2^-20 exactly: the product is not rounded to fp16
  m.fillf(1, [](uint32_t e, int) { return 0.5f + float(e); });
  m.fill(2, [](uint32_t, int) { return 0xffff3c01u; });  // high half ignored
  m.fill(3, [](uint32_t, int l) { return l % 2 ? 0x7c003c01u : 0x0000bc01u; });
  m.set_pred(4, {0, 1, 5});
  run("vmac.f16 v1, v2, v3 @p4");
  const float p = 1.0f + 1.0f / 512 + 1.0f / 1048576;
  expect_v(m, 1, [&](uint32_t e, int l) { return fbits(0.5f + float(e) + (l % 2 ? p : -p)); }, "vmac.f16",
           [](uint32_t e) { return e == 0 || e == 1 || e == 5; },
           [](uint32_t e, int) { return fbits(0.5f + float(e)); });
}

TEST_F(Golden, vmac_i8) {
  m.fill(1, [](uint32_t, int l) { return l == 0 ? 0x7fffffffu : 10u; });
  m.fill(2, [](uint32_t, int) { return 0x12345680u; });                      // low byte -128
  m.fill(3, [](uint32_t, int l) { return l % 2 ? 0xabcdefffu : 0x00000003u; });  // -1 or 3
  run("vmac.i8 v1, v2, v3");
  expect_v(m, 1, [](uint32_t, int l) {
    uint32_t acc = l == 0 ? 0x7fffffffu : 10u;
    return acc + uint32_t(l % 2 ? 128 : -384);
  });
  EXPECT_EQ(m.V(1, 0, 0), 0x7fffffffu - 384u);
  EXPECT_EQ(m.V(1, 0, 1), 138u);
}

// Special functions: exact values, then close to the double-precision function.
void sfu_case(Golden& g, const char* mn, double (*ref)(double), std::initializer_list<std::pair<float, float>> exact) {
  std::vector<std::pair<float, float>> ex(exact);
  g.m.fillf(2, [&](uint32_t e, int l) { return l < int(ex.size()) ? ex[l].first : 0.37f * float(l) - 0.5f * float(e) + 0.01f; });
  g.run(std::string(mn) + " v1, v2");
  for (uint32_t e = 0; e < g.s.npe; ++e)
    for (int l = 0; l < kLanes; ++l) {
      float got = g.m.VF(1, e, l);
      if (l < int(ex.size())) {
        float w = ex[l].second;
        if (std::isnan(w)) EXPECT_TRUE(std::isnan(got)) << mn << " lane " << l;
        else EXPECT_EQ(fbits(got), fbits(w)) << mn << "(" << ex[l].first << ") = " << got;
      } else {
        double x = 0.37f * float(l) - 0.5f * float(e) + 0.01f;
        double w = ref(x);
        if (std::isnan(w)) {
          EXPECT_TRUE(std::isnan(got)) << mn << "(" << x << ")";
          continue;
        }
        EXPECT_NEAR(got, w, 4e-7 * std::fabs(w) + 1e-30) << mn << "(" << x << ")";
      }
    }
}

TEST_F(Golden, vexp) {
  sfu_case(*this, "vexp.f32", [](double x) { return std::exp(x); },
           {{0.0f, 1.0f}, {-kInf, 0.0f}, {kInf, kInf}, {100.0f, kInf}, {kNaN, kNaN}});
}
TEST_F(Golden, vrcp) {
  sfu_case(*this, "vrcp.f32", [](double x) { return 1.0 / x; },
           {{4.0f, 0.25f}, {0.0f, kInf}, {-0.0f, -kInf}, {kInf, 0.0f}, {-2.0f, -0.5f}});
}
TEST_F(Golden, vrsqrt) {
  sfu_case(*this, "vrsqrt.f32", [](double x) { return x < 0 ? std::nan("") : 1.0 / std::sqrt(x); },
           {{4.0f, 0.5f}, {0.0f, kInf}, {-1.0f, kNaN}, {kInf, 0.0f}, {0.25f, 2.0f}});
}
TEST_F(Golden, vtanh) {
  sfu_case(*this, "vtanh.f32", [](double x) { return std::tanh(x); },
           {{0.0f, 0.0f}, {-0.0f, -0.0f}, {kInf, 1.0f}, {-kInf, -1.0f}, {20.0f, 1.0f}});
}
TEST_F(Golden, verf) {
  sfu_case(*this, "verf.f32", [](double x) { return std::erf(x); },
           {{0.0f, 0.0f}, {kInf, 1.0f}, {-kInf, -1.0f}, {10.0f, 1.0f}, {kNaN, kNaN}});
}

TEST_F(Golden, vredsum_f32) {
  // Lanes 2^24, 0, 1, 1, 0...: the pairwise tree ((0+1)+(2+3))+... gives 2^24 + 2;
  // a left-to-right sum, or a tree pairing lane k with k+8, gives 2^24.
  m.fillf(2, [](uint32_t e, int l) {
    float scale = float(1u << e);
    return scale * (l == 0 ? 16777216.0f : (l == 2 || l == 3) ? 1.0f : 0.0f);
  });
  run("vredsum.f32 v1, v2");
  expect_v(m, 1, [](uint32_t e, int) { return fbits(16777218.0f * float(1u << e)); });
  // second level: lanes 4..7 = 1, 0, 1, 0 pair to 1 + 1 before meeting lane 0
  m.fillf(3, [](uint32_t, int l) { return l == 0 ? 16777216.0f : (l == 4 || l == 6) ? 1.0f : 0.0f; });
  run("vredsum.f32 v3, v3");  // in place
  expect_v(m, 3, [](uint32_t, int) { return fbits(16777218.0f); });
}

TEST_F(Golden, vredmax_f32) {
  m.fillf(2, [](uint32_t e, int l) { return l == 5 ? kNaN : l == 9 ? -1.0f + float(e) : -100.0f - float(l); });
  run("vredmax.f32 v1, v2");
  expect_v(m, 1, [](uint32_t e, int) { return fbits(-1.0f + float(e)); });
  m.fillf(3, [](uint32_t, int) { return -kInf; });
  run("vredmax.f32 v1, v3");
  expect_v(m, 1, [](uint32_t, int) { return fbits(-kInf); });
}

TEST_F(Golden, vredsum_i32) {
  m.fill(2, [](uint32_t e, int l) { return l == 0 ? 0x7fffffffu : l == 1 ? e + 1 : 0u; });
  run("vredsum.i32 v1, v2");
  expect_v(m, 1, [](uint32_t e, int) { return 0x80000000u + e; });  // wraps
  m.fill(3, [](uint32_t e, int l) { return uint32_t(l) - 8 + e; });
  run("vredsum.i32 v1, v3");
  expect_v(m, 1, [](uint32_t e, int) { return uint32_t(-8 + 16 * int(e)); });  // sum of l-8 is -8
}

TEST_F(Golden, vmovn) {
  // 3 x 4 so that north and south differ; pe = r * 4 + c
  Machine mm(3, 4);
  auto val = [](uint32_t e, int l) { return e * 100 + uint32_t(l); };
  const char* dirs[4] = {"n", "e", "s", "w"};
  auto src = [](int d, uint32_t e) {
    uint32_t r = e / 4, c = e % 4;
    if (d == 0) r = (r + 2) % 3;  // from the PE above, wrapping to the bottom row
    if (d == 1) c = (c + 1) % 4;  // from the PE to the east
    if (d == 2) r = (r + 1) % 3;
    if (d == 3) c = (c + 3) % 4;
    return r * 4 + c;
  };
  for (int d = 0; d < 4; ++d) {
    mm.fill(2, val);
    exec_text(mm.s, std::string("vmovn v1, v2, ") + dirs[d]);
    expect_v(mm, 1, [&](uint32_t e, int l) { return val(src(d, e), l); }, dirs[d]);
    if (d == 0) { EXPECT_EQ(mm.V(1, 0, 3), val(8, 3)); }  // north of (0,0) is (2,0), by hand
    if (d == 1) { EXPECT_EQ(mm.V(1, 3, 3), val(0, 3)); }  // east of (0,3) is (0,0)
    if (d == 2) { EXPECT_EQ(mm.V(1, 9, 0), val(1, 0)); }  // south of (2,1) is (0,1)
    if (d == 3) { EXPECT_EQ(mm.V(1, 4, 0), val(7, 0)); }  // west of (1,0) is (1,3)
    exec_text(mm.s, std::string("vmovn v2, v2, ") + dirs[d]);  // va == vb
    expect_v(mm, 2, [&](uint32_t e, int l) { return val(src(d, e), l); }, dirs[d]);
  }
  // predicated, in place: enabled PEs read the old values of disabled ones
  mm.fill(2, val);
  mm.set_pred(1, {0, 5});
  exec_text(mm.s, "vmovn v2, v2, e @p1");
  expect_v(mm, 2, [&](uint32_t e, int l) { return val(src(1, e), l); }, "vmovn @p1",
           [](uint32_t e) { return e == 0 || e == 5; }, val);
  // The fixture's machine runs it once too, so TearDown sees the row executed.
  m.fill(2, val);
  run("vmovn v1, v2, s");  // 2 rows: south of row 1 wraps to row 0
  expect_v(m, 1, [&](uint32_t e, int l) { return val((e + 3) % 6, l); });
}

TEST_F(Golden, vdup) {
  m.fill(2, [](uint32_t e, int l) { return e * 100 + uint32_t(l); });
  run("vdup v1, v2, 13");
  expect_v(m, 1, [](uint32_t e, int) { return e * 100 + 13; });
  run("vdup v2, v2, 0");  // in place
  expect_v(m, 2, [](uint32_t e, int) { return e * 100; });
  std::string err = error_of([&] { run("vdup v1, v2, 16"); });
  EXPECT_NE(err.find("vdup: lane 16 out of range (0..15)"), std::string::npos) << err;
}

TEST_F(Golden, vext) {
  m.fill(2, [](uint32_t e, int l) { return e * 100 + uint32_t(l); });
  run("vext x1, v2, 71");  // PE 4, lane 7
  EXPECT_EQ(s.x[1], 407u);
  run("vext x1, v2, 95");  // the last lane of the last PE
  EXPECT_EQ(s.x[1], 515u);
  run("vext x0, v2, 3");
  EXPECT_EQ(s.x[0], 0u);
  std::string err = error_of([&] { run("vext x1, v2, 96"); });
  EXPECT_NE(err.find("vext: lane index 96 is beyond the array (6 PEs x 16 lanes)"), std::string::npos) << err;
  err = error_of([&] { run("vext x1, v2, -1"); });
  EXPECT_NE(err.find("beyond the array"), std::string::npos) << err;
}

}  // namespace
}  // namespace gpnpu::isa::test
