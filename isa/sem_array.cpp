// Semantics of the array units: ALU, fp32, MAC, special functions, cross-lane and
// cross-PE moves. Every function is one loop over the enabled PEs' lanes.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "isa/error.h"
#include "isa/lanes_simd.h"
#include "isa/semantics.h"

namespace gpnpu::isa {

namespace {

// Elementwise helpers: va[k] = f(vb[k]) and va[k] = f(vb[k], vc[k]).
// kInt: integer and bit operations, run PE by PE (for_lanes_int in isa/semantics.h).
template <bool kInt = true, typename F>
void map1(ArchState& s, const Insn& i, F&& f) {
  uint32_t* a = s.vreg(i.a);
  const uint32_t* b = s.vreg(i.b);
  auto g = [&](size_t k) { return f(b[k]); };
  if constexpr (kInt) for_lanes_int(s, i, a, g);
  else for_lanes(s, i, a, g);
}
template <bool kInt = true, typename F>
void map2(ArchState& s, const Insn& i, F&& f) {
  uint32_t* a = s.vreg(i.a);
  const uint32_t *b = s.vreg(i.b), *c = s.vreg(i.c);
  auto g = [&](size_t k) { return f(b[k], c[k]); };
  if constexpr (kInt) for_lanes_int(s, i, a, g);
  else for_lanes(s, i, a, g);
}
template <typename F>
void mapf1(ArchState& s, const Insn& i, F&& f) {
  map1<false>(s, i, [&](uint32_t b) { return as_u32(f(as_f32(b))); });
}
template <typename F>
void mapf2(ArchState& s, const Insn& i, F&& f) {
  map2<false>(s, i, [&](uint32_t b, uint32_t c) { return as_u32(f(as_f32(b), as_f32(c))); });
}
// Per-PE transform through a 16-lane temporary, safe when va aliases a source.
template <typename F>
void per_pe(ArchState& s, const Insn& i, F&& f) {
  uint32_t* a = s.vreg(i.a);
  for_pes(s, i, [&](uint32_t e) {
    uint32_t tmp[kLanes];
    f(e, tmp);
    std::memcpy(a + size_t(e) * kLanes, tmp, sizeof tmp);
  });
}
void check_sel(const Insn& i, uint32_t limit) {
  if (i.d >= limit)
    fail("{}: element group {} out of range (0..{})", i.info->mnemonic, i.d, limit - 1);
}

inline uint32_t f32_to_i32_sat(float f) {
  if (std::isnan(f)) return 0;
  float r = std::nearbyint(f);  // default rounding mode: to nearest even
  if (r >= 2147483648.0f) return 0x7fffffffu;
  if (r < -2147483648.0f) return 0x80000000u;
  return uint32_t(int32_t(r));
}

}  // namespace

SEM(vmov) {  // map1 with the identity, as one copy per run of enabled PEs
  uint32_t* a = s.vreg(i.a);
  const uint32_t* b = s.vreg(i.b);
  if (a != b) for_lane_runs(s, i, [&](size_t k, size_t n) { std::memcpy(a + k, b + k, n * 4); });
}
SEM(vsplat) {
  uint32_t v = X(s, i.b);
  uint32_t* a = s.vreg(i.a);
  for_lanes_int(s, i, a, [&](size_t) { return v; });
}
SEM(vsplati) {
  uint32_t v = uint32_t(i.imm);
  uint32_t* a = s.vreg(i.a);
  for_lanes_int(s, i, a, [&](size_t) { return v; });
}
SEM(vsplat_f32) { sem_vsplati(s, i); }
SEM(vadd_i32) { map2(s, i, [](uint32_t b, uint32_t c) { return b + c; }); }
SEM(vsub_i32) { map2(s, i, [](uint32_t b, uint32_t c) { return b - c; }); }
SEM(vmul_i32) { map2(s, i, [](uint32_t b, uint32_t c) { return b * c; }); }
SEM(vand) { map2(s, i, [](uint32_t b, uint32_t c) { return b & c; }); }
SEM(vor) { map2(s, i, [](uint32_t b, uint32_t c) { return b | c; }); }
SEM(vxor) { map2(s, i, [](uint32_t b, uint32_t c) { return b ^ c; }); }
SEM(vshl) { map1(s, i, [n = i.d](uint32_t b) { return b << n; }); }
SEM(vshr) { map1(s, i, [n = i.d](uint32_t b) { return b >> n; }); }
SEM(vsra) { map1(s, i, [n = i.d](uint32_t b) { return uint32_t(int32_t(b) >> n); }); }
SEM(vcmplt_f32) {
  map2(s, i, [](uint32_t b, uint32_t c) { return as_f32(b) < as_f32(c) ? 0xffffffffu : 0u; });
}
SEM(vcmplt_i32) {
  map2(s, i, [](uint32_t b, uint32_t c) { return int32_t(b) < int32_t(c) ? 0xffffffffu : 0u; });
}
SEM(vcmpeq_i32) { map2(s, i, [](uint32_t b, uint32_t c) { return b == c ? 0xffffffffu : 0u; }); }
SEM(vsel) {
  uint32_t* a = s.vreg(i.a);
  const uint32_t *b = s.vreg(i.b), *c = s.vreg(i.c), *d = s.vreg(i.d);
  // A bit select (both sources read): vectorises, where `d[k] ? b[k] : c[k]` branched per lane.
  for_lanes_int(s, i, a, [&](size_t k) {
    const uint32_t m = 0u - uint32_t(d[k] != 0);
    return (b[k] & m) | (c[k] & ~m);
  });
}
SEM(vlaneid) {
  uint32_t* a = s.vreg(i.a);
  for_lanes_int(s, i, a, [&](size_t k) { return uint32_t(k % kLanes); });
}
SEM(vpeid) {
  uint32_t* a = s.vreg(i.a);
  for_lanes_int(s, i, a, [&](size_t k) { return uint32_t(k / kLanes); });
}
SEM(vunpack_u4) {
  check_sel(i, 8);
  const uint32_t* b = s.vreg(i.b);
  per_pe(s, i, [&](uint32_t e, uint32_t* out) {
    const uint32_t* src = b + size_t(e) * kLanes;
    for (int l = 0; l < kLanes; ++l) {
      uint32_t code = i.d * 16 + l;  // nibble index in the 128-code block
      out[l] = (src[code / 8] >> (4 * (code % 8))) & 0xf;
    }
  });
}
SEM(vunpack_i8) {
  check_sel(i, 4);
  const uint32_t* b = s.vreg(i.b);
  per_pe(s, i, [&](uint32_t e, uint32_t* out) {
    const uint32_t* src = b + size_t(e) * kLanes;
    for (int l = 0; l < kLanes; ++l) {
      uint32_t byte = i.d * 16 + l;
      out[l] = uint32_t(int32_t(int8_t(src[byte / 4] >> (8 * (byte % 4)))));
    }
  });
}
SEM(vunpack_f16) {
  check_sel(i, 2);
  const uint32_t* b = s.vreg(i.b);
  per_pe(s, i, [&](uint32_t e, uint32_t* out) {
    const uint32_t* src = b + size_t(e) * kLanes;
    for (int l = 0; l < kLanes; ++l) {
      uint32_t el = i.d * 16 + l;
      out[l] = as_u32(f16_to_f32(uint16_t(src[el / 2] >> (16 * (el % 2)))));
    }
  });
}
namespace {
// An fp32 -> fp16 conversion over the window's PEs, which records its values' range
// (isa/fp16.h) into the state's numerics.
template <typename F>
void convert_f16(ArchState& s, uint32_t per_pe, F&& f) {
  F16Range r;
  f(s.win_lo, s.win_hi, r);
  s.note_f16(r, per_pe);
}
}  // namespace

SEM(vpack_f16) {
  convert_f16(s, 2 * kLanes, [&](uint32_t e0, uint32_t e1, F16Range& r) {
    // each PE reads both sources before writing
    lanes::pack_f16_pes(s.vreg(i.a), s.vreg(i.b), s.vreg(i.c), e0, e1, i.p ? s.predicate(i.p) : nullptr, s.f16_saturate, r);
  });
}

namespace {
// x86 keeps the first operand's NaN when both operands are NaNs, and a compiler may put
// either operand of a commutative + or * first: the definition names vc's (quieted), as
// the vectorised loops of the earlier builds ordered them.
inline float nan_of_c(float c, float r) { return c != c ? as_f32(as_u32(c) | 0x400000u) : r; }
}  // namespace
SEM(vadd_f32) { mapf2(s, i, [](float b, float c) { return nan_of_c(c, b + c); }); }
SEM(vsub_f32) { mapf2(s, i, [](float b, float c) { return b - c; }); }
SEM(vmul_f32) { mapf2(s, i, [](float b, float c) { return nan_of_c(c, b * c); }); }
SEM(vmla_f32) {
  uint32_t* a = s.vreg(i.a);
  const uint32_t *b = s.vreg(i.b), *c = s.vreg(i.c);
  for_lane_runs(s, i, [&](size_t k, size_t n) { lanes::mla_f32(a + k, b + k, c + k, n); });
}
SEM(vmax_f32) { mapf2(s, i, [](float b, float c) { return std::fmax(b, c); }); }
SEM(vmin_f32) { mapf2(s, i, [](float b, float c) { return std::fmin(b, c); }); }
SEM(vcvt_f32_f16) {
  uint32_t* a = s.vreg(i.a);
  const uint32_t* b = s.vreg(i.b);
  for_lane_runs(s, i, [&](size_t k, size_t n) { lanes::cvt_f32_f16(a + k, b + k, n); });
}
SEM(vcvt_f16_f32) {
  const uint8_t* pr = i.p ? s.predicate(i.p) : nullptr;
  convert_f16(s, kLanes, [&](uint32_t e0, uint32_t e1, F16Range& r) {
    uint32_t* a = s.vreg(i.a);
    const uint32_t* b = s.vreg(i.b);
    for (uint32_t e = e0; e < e1;) {  // runs of enabled PEs
      if (pr && !pr[e]) {
        ++e;
        continue;
      }
      uint32_t end = e + 1;
      while (end < e1 && (!pr || pr[end])) ++end;
      lanes::cvt_f16_f32(a, b, size_t(e) * kLanes, size_t(end - e) * kLanes, s.f16_saturate, r);
      e = end;
    }
  });
}
SEM(vcvt_f32_i32) { map1<false>(s, i, [](uint32_t b) { return as_u32(float(int32_t(b))); }); }
SEM(vcvt_i32_f32) { map1<false>(s, i, [](uint32_t b) { return f32_to_i32_sat(as_f32(b)); }); }

namespace {
template <bool kF16>
void dequant4(ArchState& s, const Insn& i) {
  check_sel(i, 8);
  // Each PE reads its own codes and meta before it writes: va may alias vb or vc.
  lanes::dequant4_pes(s.vreg(i.a), s.vreg(i.b), s.vreg(i.c), s.win_lo, s.win_hi, i.p ? s.predicate(i.p) : nullptr, i.d, kF16);
}
}  // namespace

SEM(vdq4_f32) { dequant4<false>(s, i); }
SEM(vdq4_f16) { dequant4<true>(s, i); }

SEM(vmac_f16) {
  uint32_t* a = s.vreg(i.a);
  if (s.lazy >> i.c & 1)  // vc is a lazy broadcast (unpredicated; isa/execute.h)
    return lanes::mac_f16_bcast(a + size_t(s.win_lo) * kLanes, s.vreg(i.b) + size_t(s.win_lo) * kLanes, s.lazy_lanes[i.c],
                                size_t(s.win_hi - s.win_lo) * kLanes);
  const uint32_t *b = s.vreg(i.b), *c = s.vreg(i.c);
  for_lane_runs(s, i, [&](size_t k, size_t n) { lanes::mac_f16(a + k, b + k, c + k, n); });
}
SEM(vmac_i8) {
  uint32_t* a = s.vreg(i.a);
  const uint32_t *b = s.vreg(i.b), *c = s.vreg(i.c);
  for_lanes_int(s, i, a, [&](size_t k) { return a[k] + uint32_t(int32_t(int8_t(b[k])) * int32_t(int8_t(c[k]))); });
}

SEM(vexp) { mapf1(s, i, [](float b) { return std::exp(b); }); }
SEM(vrcp) { mapf1(s, i, [](float b) { return 1.0f / b; }); }
SEM(vrsqrt) { mapf1(s, i, [](float b) { return 1.0f / std::sqrt(b); }); }
SEM(vtanh) { mapf1(s, i, [](float b) { return std::tanh(b); }); }
SEM(verf) { mapf1(s, i, [](float b) { return std::erf(b); }); }

namespace {
// Pairwise tree over 16 lanes in a fixed order: ((0+1)+(2+3))+... for determinism.
template <typename T, typename Op>
T tree16(const T* v, Op op) {
  T t8[8], t4[4], t2[2];
  for (int k = 0; k < 8; ++k) t8[k] = op(v[2 * k], v[2 * k + 1]);
  for (int k = 0; k < 4; ++k) t4[k] = op(t8[2 * k], t8[2 * k + 1]);
  for (int k = 0; k < 2; ++k) t2[k] = op(t4[2 * k], t4[2 * k + 1]);
  return op(t2[0], t2[1]);
}
template <typename Op>
void reduce_f32(ArchState& s, const Insn& i, Op op) {
  const uint32_t* b = s.vreg(i.b);
  per_pe(s, i, [&](uint32_t e, uint32_t* out) {
    float v[kLanes];
    for (int l = 0; l < kLanes; ++l) v[l] = as_f32(b[size_t(e) * kLanes + l]);
    uint32_t r = as_u32(tree16(v, op));
    std::fill(out, out + kLanes, r);
  });
}
}  // namespace

SEM(vredsum_f32) { reduce_f32(s, i, [](float x, float y) { return x + y; }); }
SEM(vredmax_f32) { reduce_f32(s, i, [](float x, float y) { return std::fmax(x, y); }); }
SEM(vredsum_i32) {
  const uint32_t* b = s.vreg(i.b);
  per_pe(s, i, [&](uint32_t e, uint32_t* out) {
    uint32_t r = tree16(b + size_t(e) * kLanes, [](uint32_t x, uint32_t y) { return x + y; });
    std::fill(out, out + kLanes, r);
  });
}
SEM(vmovn) {
  // Copy the source first: va may alias vb, and every PE reads another PE's lanes.
  const size_t n = size_t(s.npe) * kLanes;
  std::vector<uint32_t> src(s.vreg(i.b), s.vreg(i.b) + n);
  const uint32_t rows = s.shape.rows, cols = s.shape.cols;
  uint32_t* a = s.vreg(i.a);
  for_pes(s, i, [&](uint32_t e) {
    uint32_t r = e / cols, c = e % cols;
    switch (i.d) {
      case 0: r = (r + rows - 1) % rows; break;  // north
      case 1: c = (c + 1) % cols; break;         // east
      case 2: r = (r + 1) % rows; break;         // south
      default: c = (c + cols - 1) % cols; break; // west
    }
    std::memcpy(a + size_t(e) * kLanes, &src[size_t(r * cols + c) * kLanes], kLanes * 4);
  });
}
SEM(vdup) {
  if (i.d >= kLanes) fail("vdup: lane {} out of range (0..15)", i.d);
  const uint32_t* b = s.vreg(i.b);
  per_pe(s, i, [&](uint32_t e, uint32_t* out) { std::fill(out, out + kLanes, b[size_t(e) * kLanes + i.d]); });
}
SEM(vext) {
  uint32_t idx = uint32_t(i.imm);
  if (idx >= s.npe * kLanes)
    fail("vext: lane index {} is beyond the array ({} PEs x 16 lanes)", idx, s.npe);
  WX(s, i.a, s.vreg(i.b)[idx]);
}

}  // namespace gpnpu::isa
