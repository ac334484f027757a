#include "kernels/norm.h"

#include <algorithm>
#include <functional>

#include "isa/error.h"

namespace gpnpu::kernels {

namespace {

constexpr uint32_t kChunk = 32;  // fp16 per chunk (one 64 B vector register)
uint32_t ceil_div(uint32_t a, uint32_t b) { return (a + b - 1) / b; }

// Register plan (vector): per slot s in {0, 1} (two chunks in flight, interleaved by stage)
//   raw x R = v2+s, unpacked x L = v4+2s / H = v5+2s, raw w W = v8+s, unpacked w
//   WL = v10+2s / WH = v11+2s, raw b B = v14+s, unpacked b BL = v16+2s / BH = v17+2s,
//   shifted raw T = v20+s, accumulators A(s, 0) = v0/v22, A(s, 1) = v1/v23.
// Constants: v31 packed tail mask (0xffff per valid fp16), v27 = ~v31, v24 / v25 fp32
//   masks of elements 0..15 / 16..31 of the tail chunk, v26 mask of the last block of
//   partial sums (split), v28 fp16 1.0 (LayerNorm sums), v29 mean, v30 1/sqrt(.).
V R(int s) { return V{uint8_t(2 + s)}; }
V L(int s) { return V{uint8_t(4 + 2 * s)}; }
V H(int s) { return V{uint8_t(5 + 2 * s)}; }
V W(int s) { return V{uint8_t(8 + s)}; }
V WL(int s) { return V{uint8_t(10 + 2 * s)}; }
V WH(int s) { return V{uint8_t(11 + 2 * s)}; }
V B(int s) { return V{uint8_t(14 + s)}; }
V BL(int s) { return V{uint8_t(16 + 2 * s)}; }
V BH(int s) { return V{uint8_t(17 + 2 * s)}; }
V T(int s) { return V{uint8_t(20 + s)}; }
V A(int s, int j) { return V{uint8_t(s == 0 ? j : 22 + j)}; }

// Scalar plan: x1 row/tile loop, x2 chunk loop, x5 x chunk, x6 y chunk, x7 w chunk,
// x15 b chunk, x10 LRM, x8 PE stride of x, x9 PE stride of y, x16 / x17 x / y row
// base, x20 rows left, x22 npe, x23 scratch, x24 = 4; NormArgs::residual: x13 r chunk,
// x18 r row base.

struct Plan {
  bool split = false;
  uint32_t nchunks = 0;  // chunks per row (the last may be partial)
  uint32_t P = 0;        // split: PEs per row
  uint32_t nfull = 0;    // full steps before the tail step (chunks per PE for rows, passes for split)
  bool tail = false;     // a last step with a mask (partial chunk, or fewer PEs)
  uint32_t rem = 0;      // split: PEs of the tail pass
  uint32_t step = 0;     // bytes from one step to the next (64 rows, P*64 split)
  bool cache = false;    // x kept in LRM between passes
  uint32_t x_stride = 0, y_stride = 0;
  // Rows mapping in H parts (as the element-wise kernels): part h of row r (chunks
  // [h nfull, (h+1) nfull)) on PE r H + h through predicate p3 + h, R = npe / H rows per
  // tile; the H partial sums of a row meet through the OCM scratch.
  uint32_t H = 1, R = 0;
};

// Parts of the rows mapping: the most (1, 2 or 4) that a tile of rows leaves PEs for,
// dividing the whole chunks, the array's columns and the strides, with the scratch for
// the partial sums and every part's first address inside OCM.
uint32_t norm_parts(const sim::Config& cfg, const NormArgs& a, uint32_t x_stride, uint32_t y_stride) {
  const uint32_t nfull = a.dim / kChunk, npe = cfg.npe();
  auto fits = [&](uint32_t h2) {
    if (a.dim % kChunk || nfull % h2 || cfg.pe_cols % h2 || uint64_t(a.rows) * h2 > npe) return false;
    if (a.scratch_bytes < ceil_div(npe, 16) * 64 || a.scratch_ocm < 4 * (h2 - 1)) return false;
    for (auto [off, st] : {std::pair{a.x_ocm, x_stride}, {a.y_ocm, y_stride}}) {
      if (st % h2) return false;
      if (int64_t(off) + int64_t(h2 - 1) * (int64_t(nfull / h2) * 64 - st / h2) < 0) return false;
    }
    return true;
  };
  uint32_t H = 1;
  while (H < 4 && fits(H * 2)) H *= 2;
  return H;
}

// The LRM bytes the kernel may use.
uint64_t lrm_limit(const sim::Config& cfg, const NormArgs& a) {
  return a.lrm_bytes ? std::min<uint64_t>(a.lrm_bytes, cfg.lrm_bytes) : cfg.lrm_bytes;
}

Plan make_plan(const sim::Config& cfg, const NormArgs& a, bool split) {
  Plan p;
  p.split = split;
  p.nchunks = ceil_div(a.dim, kChunk);
  p.x_stride = a.x_stride ? a.x_stride : a.dim * 2;
  p.y_stride = a.y_stride ? a.y_stride : a.dim * 2;
  const uint32_t npe = cfg.npe();
  if (!split) {
    p.H = norm_parts(cfg, a, p.x_stride, p.y_stride);
    p.R = npe / p.H;
    p.nfull = a.dim / kChunk / p.H;
    p.tail = a.dim % kChunk != 0;
    p.step = 64;
    p.cache = uint64_t(ceil_div(p.nchunks, p.H)) * 64 <= lrm_limit(cfg, a);
  } else {
    p.P = std::min(npe, p.nchunks);
    const uint32_t c = ceil_div(p.nchunks, p.P);
    p.rem = p.nchunks - (c - 1) * p.P;
    p.tail = p.rem != p.P || a.dim % kChunk != 0;
    p.nfull = p.tail ? c - 1 : c;
    p.step = p.P * 64;
    if (uint64_t(c) * 64 > lrm_limit(cfg, a))
      fail("norm (split): {} chunks per PE need {} B of LRM, it may use {} B; use the rows mapping", c, c * 64,
           lrm_limit(cfg, a));
    p.cache = true;
  }
  return p;
}

void check_args(const sim::Config& cfg, const NormArgs& a, const Plan& p) {
  const char* name = a.kind == NormKind::rms ? "rmsnorm" : "layernorm";
  if (a.rows == 0 || a.dim == 0) fail("{}: rows = {} and dim = {} must be positive", name, a.rows, a.dim);
  if (p.x_stride < a.dim * 2 || p.y_stride < a.dim * 2)
    fail("{}: row strides x {} B / y {} B are shorter than a row of {} fp16", name, p.x_stride, p.y_stride, a.dim);
  const uint64_t ocm = cfg.ocm_bytes, span = uint64_t(p.nchunks) * 64;
  auto in_ocm = [&](const char* what, uint64_t off, uint64_t stride, uint64_t rows) {
    uint64_t end = off + (rows - 1) * stride + span;
    if (end > ocm)
      fail("{}: {} at OCM offset {} ends at {} (rows {}, stride {}, read in 64 B chunks), past the {} B of OCM", name,
           what, off, end, rows, stride, ocm);
  };
  in_ocm("x", a.x_ocm, p.x_stride, a.rows);
  in_ocm("y", a.y_ocm, p.y_stride, a.rows);
  in_ocm("w", a.w_ocm, 0, 1);
  if (a.kind == NormKind::layer) in_ocm("b", a.b_ocm, 0, 1);
  if (a.residual) {
    if (a.dim % kChunk)
      fail("{} with the residual add: dim = {} must be a multiple of {} (or add with the element-wise kernel first)",
           name, a.dim, kChunk);
    if (a.y_ocm == a.x_ocm)
      fail("{} with the residual add: y (OCM {}) must not be x, which keeps the sum x + r", name, a.y_ocm);
    in_ocm("r", a.r_ocm, p.x_stride, a.rows);
  }
  if (p.split) {
    uint32_t need = norm_scratch_bytes(cfg);
    if (a.scratch_bytes < need || uint64_t(a.scratch_ocm) + need > ocm)
      fail("{} (split): needs {} B of OCM scratch for the partial sums, got {} B at {}", name, need, a.scratch_bytes,
           a.scratch_ocm);
  }
}

// Masks of the tail step. `base` (a vector register) holds, per PE, the index of the
// first element of its tail chunk; elements at index >= dim are masked off.
void emit_masks(Builder& b, V base, uint32_t dim) {
  b.op("vsplati", {V{20}, int64_t(dim)});     // limit
  b.op("vlaneid", {V{21}});
  b.op("vadd.i32", {V{24}, base, V{21}});
  b.op("vcmplt.i32", {V{24}, V{24}, V{20}});  // elements 0..15
  b.op("vsplati", {V{25}, 16});
  b.op("vadd.i32", {V{25}, V{25}, V{21}});
  b.op("vadd.i32", {V{25}, V{25}, base});
  b.op("vcmplt.i32", {V{25}, V{25}, V{20}});  // elements 16..31
  b.op("vshl", {V{21}, V{21}, int64_t(1)});   // 2 * lane: the packed element in the low half
  b.op("vadd.i32", {V{21}, V{21}, base});
  b.op("vcmplt.i32", {V{31}, V{21}, V{20}});
  b.op("vsplati", {V{27}, 1});
  b.op("vadd.i32", {V{21}, V{21}, V{27}});
  b.op("vcmplt.i32", {V{21}, V{21}, V{20}});  // high half
  b.op("vsplati", {V{27}, 0xffff});
  b.op("vand", {V{31}, V{31}, V{27}});
  b.op("vsplati", {V{27}, -65536});           // 0xffff0000
  b.op("vand", {V{21}, V{21}, V{27}});
  b.op("vor", {V{31}, V{31}, V{21}});
  b.op("vsplati", {V{27}, -1});
  b.op("vxor", {V{27}, V{31}, V{27}});
}

// Runs `body(k, tail)` over the steps of one pass: pairs of full steps in a hardware
// loop, one single full step if their count is odd, then the tail step.
void steps(Builder& b, const Plan& p, const std::function<void(int, bool)>& body) {
  if (p.nfull / 2) {
    b.li(X{2}, p.nfull / 2);
    b.loop(X{2}, [&] { body(2, false); });
  }
  if (p.nfull % 2) body(1, false);
  if (p.tail) body(1, true);
}

// Part h's predicate and its address offset for a row stride (x8 / x9 hold stride / H):
// PE r H + h reads row r at chunk h nfull.
P part_pred(const Plan& p, uint32_t h, P pr) { return p.H > 1 ? P{uint8_t(3 + h)} : pr; }
int64_t part_off(const Plan& p, uint32_t h, uint32_t stride) {
  return int64_t(h) * p.nfull * 64 - int64_t(h) * (stride / p.H);
}

// Loads raw x of k slots: from LRM (cached) or OCM, part by part (each part's slots, then the
// next part's: the parts write the same registers, and a register written again waits for its
// last write's latency; the other slots' scatters keep the port busy meanwhile).
void load_x(Builder& b, const Plan& p, int k, P pr, bool from_lrm) {
  if (from_lrm) {
    for (int s = 0; s < k; ++s) b.op("vld", {R(s), Mem{X{10}, 64 * s}}, pr);
    return;
  }
  for (uint32_t h = 0; h < p.H; ++h)
    for (int s = 0; s < k; ++s)
      b.op("oscatter", {R(s), Mem{X{5}, int64_t(p.step) * s + part_off(p, h, p.x_stride)}, X{8}}, part_pred(p, h, pr));
}

void advance(Builder& b, const Plan& p, int k, bool x, bool y, bool wb, bool lrm, bool bias) {
  if (x) b.op("addi", {X{5}, X{5}, int64_t(p.step) * k});
  if (y) b.op("addi", {X{6}, X{6}, int64_t(p.step) * k});
  if (wb) b.op("addi", {X{7}, X{7}, int64_t(p.step) * k});
  if (wb && bias) b.op("addi", {X{15}, X{15}, int64_t(p.step) * k});
  if (lrm) b.op("addi", {X{10}, X{10}, 64 * k});
}

// Resets the pass pointers to the row (tile) base.
void rewind(Builder& b, const NormArgs& a) {
  if (a.residual) b.op("add", {X{13}, X{18}, X{0}});
  b.op("add", {X{5}, X{16}, X{0}});
  b.op("add", {X{6}, X{17}, X{0}});
  b.li(X{7}, a.w_ocm);
  b.li(X{15}, a.b_ocm);
  b.li(X{10}, 0);
}

void zero_accs(Builder& b) {
  for (int s = 0; s < 2; ++s)
    for (int j = 0; j < 2; ++j) b.op("vsplati", {A(s, j), 0});
}

// Sums the four accumulators and the lanes into every lane of v0; with the split
// mapping also across the P PEs of the row (through OCM scratch).
void reduce(Builder& b, const Plan& p, uint32_t scratch) {
  b.op("vadd.f32", {V{0}, V{0}, V{1}});
  b.op("vadd.f32", {V{22}, V{22}, V{23}});
  b.op("vadd.f32", {V{0}, V{0}, V{22}});
  b.op("vredsum.f32", {V{0}, V{0}});
  if (p.H > 1) {
    // Every PE of a row's group reads the group's H partials (v1..v4) from the scratch
    // and adds them in one order: (t0 + t1) + (t2 + t3).
    b.op("ogather.w1", {V{0}, Mem{X{23}, 0}, X{24}}, P{1});
    for (uint32_t h = 0; h < p.H; ++h)
      for (uint32_t j = 0; j < p.H; ++j)
        b.op("oscatter.w1", {V{uint8_t(1 + j)}, Mem{X{23}, 4 * (int64_t(j) - int64_t(h))}, X{24}}, P{uint8_t(3 + h)});
    b.op("vadd.f32", {V{0}, V{1}, V{2}});
    if (p.H == 4) {
      b.op("vadd.f32", {V{3}, V{3}, V{4}});
      b.op("vadd.f32", {V{0}, V{0}, V{3}});
    }
  }
  if (!p.split) return;
  b.op("ogather.w1", {V{0}, Mem{X{23}, 0}, X{24}}, P{3});
  const uint32_t nb = ceil_div(p.P, 16);
  b.op("vsplati", {V{1}, 0});
  for (uint32_t k = 0; k < nb; ++k) {
    b.op("obcast", {V{2}, Mem{X{23}, int64_t(64 * k)}});
    if (k + 1 == nb) b.op("vand", {V{2}, V{2}, V{26}});
    b.op("vadd.f32", {V{1}, V{1}, V{2}});
  }
  b.op("vredsum.f32", {V{0}, V{1}});
  (void)scratch;
}

// inv (v30) = 1 / sqrt(v0 / dim + eps)
void inv_sqrt(Builder& b, uint32_t dim, float eps, V inv = V{30}) {
  b.op("vsplat.f32", {V{1}, F32{1.0f / float(dim)}});
  b.op("vmul.f32", {V{0}, V{0}, V{1}});
  b.op("vsplat.f32", {V{1}, F32{eps}});
  b.op("vadd.f32", {V{0}, V{0}, V{1}});
  b.op("vrsqrt.f32", {inv, V{0}});
}
void inv_sqrt(Builder& b, const NormArgs& a) { inv_sqrt(b, a.dim, a.eps); }

void emit_row_body(Builder& b, const NormArgs& a, const Plan& p) {
  const bool ln = a.kind == NormKind::layer;
  auto pred = [&](bool tail) { return (tail && p.split) ? P{2} : P{1}; };

  // ---- pass 1: sum of x^2 (RMS) or of x (LN), raw fp16 on the MAC array ----
  rewind(b, a);
  zero_accs(b);
  steps(b, p, [&](int k, bool tail) {
    P pr = pred(tail);
    load_x(b, p, k, pr, false);
    if (a.residual) {
      // x += r (raw r in W, widened into WL / WH; x into L / H), rounded, back to x
      for (uint32_t h = 0; h < p.H; ++h)
        for (int s = 0; s < k; ++s)
          b.op("oscatter", {W(s), Mem{X{13}, int64_t(p.step) * s + part_off(p, h, p.x_stride)}, X{8}},
               part_pred(p, h, pr));
      for (int s = 0; s < k; ++s) {
        b.op("vunpack.f16", {L(s), R(s), int64_t(0)}, pr);
        b.op("vunpack.f16", {H(s), R(s), int64_t(1)}, pr);
        b.op("vunpack.f16", {WL(s), W(s), int64_t(0)}, pr);
        b.op("vunpack.f16", {WH(s), W(s), int64_t(1)}, pr);
      }
      for (int s = 0; s < k; ++s) {
        b.op("vadd.f32", {L(s), L(s), WL(s)}, pr);
        b.op("vadd.f32", {H(s), H(s), WH(s)}, pr);
      }
      for (int s = 0; s < k; ++s) b.op("vpack.f16", {R(s), L(s), H(s)}, pr);
      for (int s = 0; s < k; ++s)
        for (uint32_t h = 0; h < p.H; ++h)
          b.op("ogather", {R(s), Mem{X{5}, int64_t(p.step) * s + part_off(p, h, p.x_stride)}, X{8}},
               part_pred(p, h, pr));
      b.op("addi", {X{13}, X{13}, int64_t(p.step) * k});
    }
    if (tail) b.op("vand", {R(0), R(0), V{31}}, pr);
    if (p.cache)
      for (int s = 0; s < k; ++s) b.op("vst", {R(s), Mem{X{10}, 64 * s}}, pr);
    for (int s = 0; s < k; ++s) b.op("vshr", {T(s), R(s), int64_t(16)}, pr);
    for (int s = 0; s < k; ++s) {
      b.op("vmac.f16", {A(s, 0), R(s), ln ? V{28} : R(s)}, pr);
      b.op("vmac.f16", {A(s, 1), T(s), ln ? V{28} : T(s)}, pr);
    }
    advance(b, p, k, true, false, false, p.cache, false);
  });
  reduce(b, p, a.scratch_ocm);

  if (ln) {
    // ---- pass 2: sum of (x - mean)^2 ----
    b.op("vsplat.f32", {V{1}, F32{1.0f / float(a.dim)}});
    b.op("vmul.f32", {V{29}, V{0}, V{1}});
    rewind(b, a);
    zero_accs(b);
    steps(b, p, [&](int k, bool tail) {
      P pr = pred(tail);
      load_x(b, p, k, pr, p.cache);
      for (int s = 0; s < k; ++s) {
        b.op("vunpack.f16", {L(s), R(s), int64_t(0)}, pr);
        b.op("vunpack.f16", {H(s), R(s), int64_t(1)}, pr);
      }
      for (int s = 0; s < k; ++s) {
        b.op("vsub.f32", {L(s), L(s), V{29}}, pr);
        b.op("vsub.f32", {H(s), H(s), V{29}}, pr);
      }
      if (tail) {
        b.op("vand", {L(0), L(0), V{24}}, pr);
        b.op("vand", {H(0), H(0), V{25}}, pr);
      }
      for (int s = 0; s < k; ++s) {
        b.op("vmla.f32", {A(s, 0), L(s), L(s)}, pr);
        b.op("vmla.f32", {A(s, 1), H(s), H(s)}, pr);
      }
      advance(b, p, k, !p.cache, false, false, p.cache, false);
    });
    reduce(b, p, a.scratch_ocm);
  }
  inv_sqrt(b, a);

  // ---- last pass: y = w * (x * inv)  or  y = ((x - mean) * inv) * w + b ----
  rewind(b, a);
  steps(b, p, [&](int k, bool tail) {
    P pr = pred(tail);
    load_x(b, p, k, pr, p.cache);
    if (p.split) {
      for (int s = 0; s < k; ++s) {
        b.op("oscatter", {W(s), Mem{X{7}, int64_t(p.step) * s}, X{9}}, pr);
        if (ln) b.op("oscatter", {B(s), Mem{X{15}, int64_t(p.step) * s}, X{9}}, pr);
      }
    } else {
      for (uint32_t h = 0; h < p.H; ++h)  // (part by part, as load_x)
        for (int s = 0; s < k; ++s) {
          const int64_t o = int64_t(h) * p.nfull * 64;
          b.op("obcast", {W(s), Mem{X{7}, 64 * s + o}}, part_pred(p, h, P{0}));
          if (ln) b.op("obcast", {B(s), Mem{X{15}, 64 * s + o}}, part_pred(p, h, P{0}));
        }
    }
    if (tail) b.op("oscatter", {T(0), Mem{X{6}, 0}, X{9}}, pr);  // y bytes to keep
    for (int s = 0; s < k; ++s) {
      b.op("vunpack.f16", {L(s), R(s), int64_t(0)}, pr);
      b.op("vunpack.f16", {H(s), R(s), int64_t(1)}, pr);
      b.op("vunpack.f16", {WL(s), W(s), int64_t(0)}, pr);
      b.op("vunpack.f16", {WH(s), W(s), int64_t(1)}, pr);
      if (ln) {
        b.op("vunpack.f16", {BL(s), B(s), int64_t(0)}, pr);
        b.op("vunpack.f16", {BH(s), B(s), int64_t(1)}, pr);
      }
    }
    if (ln)
      for (int s = 0; s < k; ++s) {
        b.op("vsub.f32", {L(s), L(s), V{29}}, pr);
        b.op("vsub.f32", {H(s), H(s), V{29}}, pr);
      }
    for (int s = 0; s < k; ++s) {
      b.op("vmul.f32", {L(s), L(s), V{30}}, pr);
      b.op("vmul.f32", {H(s), H(s), V{30}}, pr);
    }
    for (int s = 0; s < k; ++s) {
      if (ln) {
        b.op("vmla.f32", {BL(s), L(s), WL(s)}, pr);  // b + t * w, two roundings as the reference
        b.op("vmla.f32", {BH(s), H(s), WH(s)}, pr);
      } else {
        b.op("vmul.f32", {L(s), L(s), WL(s)}, pr);
        b.op("vmul.f32", {H(s), H(s), WH(s)}, pr);
      }
    }
    for (int s = 0; s < k; ++s) b.op("vpack.f16", {R(s), ln ? BL(s) : L(s), ln ? BH(s) : H(s)}, pr);
    if (tail) {
      b.op("vand", {R(0), R(0), V{31}}, pr);
      b.op("vand", {T(0), T(0), V{27}}, pr);
      b.op("vor", {R(0), R(0), T(0)}, pr);
    }
    for (int s = 0; s < k; ++s)
      for (uint32_t h = 0; h < p.H; ++h)
        b.op("ogather", {R(s), Mem{X{6}, int64_t(p.step) * s + part_off(p, h, p.y_stride)}, X{9}}, part_pred(p, h, pr));
    advance(b, p, k, !p.cache, true, true, p.cache, ln);
  });
}

void emit_plan(Builder& b, const sim::Config& cfg, const NormArgs& a, const Plan& p) {
  const uint32_t npe = cfg.npe();
  b.li(X{16}, a.x_ocm);
  b.li(X{17}, a.y_ocm);
  if (a.residual) b.li(X{18}, a.r_ocm);
  b.li(X{22}, npe);
  b.li(X{23}, a.scratch_ocm);
  b.li(X{24}, 4);
  if (a.kind == NormKind::layer) b.op("vsplati", {V{28}, 0x3c00});  // fp16 1.0 in the low half
  if (!p.split) {
    // Tiles of R rows (npe without parts); PE r owns row r of the tile (parts: PEs r H + h).
    b.li(X{8}, p.x_stride / p.H);
    b.li(X{9}, p.y_stride / p.H);
    if (p.tail) {
      b.op("vsplati", {V{2}, int64_t(p.nfull) * kChunk});
      emit_masks(b, V{2}, a.dim);
    }
    for (uint32_t h = 0; h < p.H && p.H > 1; ++h)  // p3 + h = the PEs of the columns h mod H
      b.pset_cols_mod(P{uint8_t(3 + h)}, h, p.H, X{25}, X{26});
    b.li(X{20}, a.rows);
    if (p.H > 1) b.li(X{22}, p.R);  // (x22 = npe otherwise)
    b.li(X{1}, ceil_div(a.rows, p.R));
    b.loop(X{1}, [&] {
      b.op("min", {X{21}, X{20}, X{22}});
      if (p.H > 1) b.op("muli", {X{21}, X{21}, int64_t(p.H)});
      b.op("pset.range", {P{1}, X{0}, X{21}});  // the PEs of this tile's rows
      for (uint32_t h = 0; h < p.H && p.H > 1; ++h) b.op("pand", {P{uint8_t(3 + h)}, P{uint8_t(3 + h)}, P{1}});
      emit_row_body(b, a, p);
      b.li(X{21}, p.R * p.x_stride);
      b.op("add", {X{16}, X{16}, X{21}});
      if (a.residual) b.op("add", {X{18}, X{18}, X{21}});
      b.li(X{21}, p.R * p.y_stride);
      b.op("add", {X{17}, X{17}, X{21}});
      b.op("sub", {X{20}, X{20}, X{22}});
    });
    return;
  }
  // Split: one row at a time over P PEs.
  const uint32_t nb = ceil_div(p.P, 16);
  b.li(X{8}, 64);
  b.li(X{9}, 64);
  b.li(X{21}, p.P);
  b.op("pset.range", {P{1}, X{0}, X{21}});
  b.li(X{21}, p.rem);
  b.op("pset.range", {P{2}, X{0}, X{21}});
  b.li(X{21}, std::min(npe, nb * 16));
  b.op("pset.range", {P{3}, X{0}, X{21}});  // PEs past P hold zero partial sums
  b.op("vlaneid", {V{26}});
  b.op("vsplati", {V{2}, int64_t(p.P - 16 * (nb - 1))});
  b.op("vcmplt.i32", {V{26}, V{26}, V{2}});
  if (p.tail) {
    b.op("vpeid", {V{2}});
    b.op("vshl", {V{2}, V{2}, int64_t(5)});
    b.op("vsplati", {V{3}, int64_t(p.nfull) * p.P * kChunk});
    b.op("vadd.i32", {V{2}, V{2}, V{3}});
    emit_masks(b, V{2}, a.dim);
  }
  b.li(X{1}, a.rows);
  b.loop(X{1}, [&] {
    emit_row_body(b, a, p);
    b.li(X{21}, p.x_stride);
    b.op("add", {X{16}, X{16}, X{21}});
    if (a.residual) b.op("add", {X{18}, X{18}, X{21}});
    b.li(X{21}, p.y_stride);
    b.op("add", {X{17}, X{17}, X{21}});
  });
}

}  // namespace

uint32_t norm_scratch_bytes(const sim::Config& cfg) { return ceil_div(cfg.npe(), 16) * 64; }

double norm_estimate_cycles(const sim::Config& cfg, const NormArgs& a, NormMapping m) {
  // Fitted to measured runs on qc-u and mini (their latencies are the same): the rows
  // mapping costs a latency-bound base per chunk plus the port time of that chunk's
  // scatters and gathers over the active PEs; the split mapping costs the cross-PE
  // reduction chains per row plus a latency-bound step per pass.
  const bool ln = a.kind == NormKind::layer;
  const double port = double(cfg.ocm_port_bytes);
  const uint32_t npe = cfg.npe(), nchunks = ceil_div(a.dim, kChunk);
  if (m == NormMapping::split) {
    const uint32_t P = std::min(npe, nchunks), c = ceil_div(nchunks, P);
    const double per_pass = (ln ? 45 : 27) + ((ln ? 3 : 2) + (a.residual ? 2 : 0)) * P * 64 / port;
    return double(a.rows) * ((ln ? 225 : 150) + c * per_pass);
  }
  const uint32_t H = norm_parts(cfg, a, a.x_stride ? a.x_stride : a.dim * 2, a.y_stride ? a.y_stride : a.dim * 2);
  const bool cache = uint64_t(ceil_div(nchunks, H)) * 64 <= lrm_limit(cfg, a);
  const double reads = (cache ? 1 : (ln ? 3 : 2)) + (a.residual ? 2 : 0);  // (residual: r in, x out)
  double total = 0;
  for (uint32_t r = 0; r < a.rows; r += npe / H) {
    const uint32_t active = std::min(npe / H, a.rows - r) * H;
    // (a part costs 11 cycles more per chunk: its own scatters, broadcasts and gathers; 16 before
    // they went part by part, load_x)
    total += ceil_div(nchunks, H) * ((ln ? 72 : 40) + (H > 1 ? 11.0 * H : 0) + (reads + 1) * active * 64 / port) +
             (ln ? 90 : 60);
  }
  return total;
}

NormMapping norm_pick_mapping(const sim::Config& cfg, const NormArgs& a) {
  if (a.mapping != NormMapping::automatic) return a.mapping;
  const uint32_t nchunks = ceil_div(std::max(a.dim, 1u), kChunk);
  const uint32_t c = ceil_div(nchunks, std::min(cfg.npe(), nchunks));
  if (uint64_t(c) * 64 > lrm_limit(cfg, a)) return NormMapping::rows;
  return norm_estimate_cycles(cfg, a, NormMapping::split) < norm_estimate_cycles(cfg, a, NormMapping::rows)
             ? NormMapping::split
             : NormMapping::rows;
}

KernelCost cost_norm(const sim::Config&, const NormArgs& a) {
  KernelCost c;
  c.ocm_bytes = uint64_t(a.rows) * a.dim * 2 * (a.residual ? 4 : 2);  // x in, y out (residual: r in, x out)
  return c;
}

KernelCost cost_head_norm(const sim::Config&, const HeadNormArgs& a) {
  KernelCost c;
  c.ocm_bytes = uint64_t(a.rows) * a.heads * a.head_dim * 2 * 2;
  return c;
}

void emit_norm(Builder& b, const sim::Config& cfg, const NormArgs& a) {
  if (a.rows == 0 || a.dim == 0) fail("norm: rows = {} and dim = {} must be positive", a.rows, a.dim);
  Plan p = make_plan(cfg, a, norm_pick_mapping(cfg, a) == NormMapping::split);
  check_args(cfg, a, p);
  emit_plan(b, cfg, a, p);
}

namespace {
// Strided rows of heads (q or k inside the q|k|v rows): PE e = r * heads + h holds head h
// of row r of a tile of npe / heads rows, its C = head_dim / 32 chunks in registers; per
// row, one predicated scatter per chunk (stride head_dim * 2 across the row's PEs) and one
// gather back. Each PE runs the rows mapping's arithmetic on its vector, in its order
// (chunks alternating between the two accumulator slots), so y is the same.
void emit_head_norm_rows_of_heads(Builder& b, const sim::Config& cfg, const HeadNormArgs& a, uint32_t xs, uint32_t ys) {
  const uint32_t Hh = a.heads, hd2 = a.head_dim * 2, C = a.head_dim / kChunk, TR = cfg.npe() / Hh;
  auto Xc = [](uint32_t c) { return V{uint8_t(12 + c)}; };  // raw x / y chunks: v12..v15
  auto Wc = [](uint32_t c) { return V{uint8_t(16 + c)}; };  // raw w chunks: v16..v19
  b.li(X{1}, (a.rows + TR - 1) / TR);
  b.li(X{2}, a.rows);
  b.li(X{4}, TR);
  b.li(X{5}, a.x_ocm);
  b.li(X{8}, a.y_ocm);
  b.li(X{11}, hd2);
  for (uint32_t c = 0; c < C; ++c) b.op("obcast", {Wc(c), Mem{X{0}, int64_t(a.w_ocm) + 64 * c}});
  b.loop(X{1}, [&] {
    b.op("min", {X{3}, X{2}, X{4}});
    auto rows = [&](X base, int64_t stride, const char* m) {
      b.li(X{9}, 0);
      b.li(X{10}, Hh);
      b.op("addi", {X{16}, base, 0});
      b.loop(X{3}, [&] {
        b.op("pset.range", {P{1}, X{9}, X{10}});
        for (uint32_t c = 0; c < C; ++c) b.op(m, {Xc(c), Mem{X{16}, 64 * c}, X{11}}, P{1});
        b.op("addi", {X{9}, X{9}, Hh});
        b.op("addi", {X{10}, X{10}, Hh});
        b.op("addi", {X{16}, X{16}, stride - int64_t(Hh) * hd2});
      });
    };
    rows(X{5}, xs, "oscatter");
    b.li(X{12}, Hh);
    b.op("mul", {X{12}, X{12}, X{3}});
    b.op("pset.range", {P{2}, X{0}, X{12}});  // the tile's rows x heads
    std::vector<V> xc, wc;
    for (uint32_t c = 0; c < C; ++c) xc.push_back(Xc(c)), wc.push_back(Wc(c));
    emit_head_norm_regs(b, xc, wc, {V{30}, L(0), H(0), WL(0), WH(0)}, P{2}, a.eps);
    rows(X{8}, ys, "ogather");
    b.op("addi", {X{5}, X{5}, int64_t(TR) * xs});
    b.op("addi", {X{8}, X{8}, int64_t(TR) * ys});
    b.op("sub", {X{2}, X{2}, X{4}});
  });
}
}  // namespace

void emit_head_norm_regs(Builder& b, const std::vector<V>& x, const std::vector<V>& w, const HeadNormRegs& t, P p,
                         float eps) {
  zero_accs(b);
  for (size_t c = 0; c < x.size(); ++c) {
    const int sl = int(c % 2);  // the rows mapping's slot of chunk c
    b.op("vshr", {T(sl), x[c], int64_t(16)}, p);
    b.op("vmac.f16", {A(sl, 0), x[c], x[c]}, p);
    b.op("vmac.f16", {A(sl, 1), T(sl), T(sl)}, p);
  }
  reduce(b, Plan{}, 0);
  inv_sqrt(b, uint32_t(x.size()) * kChunk, eps, t.inv);
  for (size_t c = 0; c < x.size(); ++c) {
    b.op("vunpack.f16", {t.l, x[c], int64_t(0)}, p);
    b.op("vunpack.f16", {t.h, x[c], int64_t(1)}, p);
    b.op("vunpack.f16", {t.wl, w[c], int64_t(0)}, p);
    b.op("vunpack.f16", {t.wh, w[c], int64_t(1)}, p);
    b.op("vmul.f32", {t.l, t.l, t.inv}, p);
    b.op("vmul.f32", {t.h, t.h, t.inv}, p);
    b.op("vmul.f32", {t.l, t.l, t.wl}, p);
    b.op("vmul.f32", {t.h, t.h, t.wh}, p);
    b.op("vpack.f16", {x[c], t.l, t.h}, p);
  }
}

void emit_head_norm(Builder& b, const sim::Config& cfg, const HeadNormArgs& a) {
  const uint32_t width = a.heads * a.head_dim * 2;
  const uint32_t xs = a.x_stride ? a.x_stride : width, ys = a.y_stride ? a.y_stride : width;
  if (a.rows == 0 || a.heads == 0 || a.head_dim == 0)
    fail("head_norm: rows {}, heads {}, head_dim {} must be positive", a.rows, a.heads, a.head_dim);
  if (xs < width || ys < width)
    fail("head_norm: row strides x {} B / y {} B are shorter than a row of heads {} x head_dim {} x 2 = {} B", xs, ys,
         a.heads, a.head_dim, width);
  const uint32_t C = a.head_dim / kChunk;
  if ((xs != width || ys != width) && a.head_dim % kChunk == 0 && C <= 4 && a.heads <= cfg.npe()) {
    emit_head_norm_rows_of_heads(b, cfg, a, xs, ys);
    return;
  }
  if (xs != width || ys != width) {  // strided rows: one rows-mapping norm per head
    for (uint32_t h = 0; h < a.heads; ++h) {
      NormArgs n;
      n.kind = NormKind::rms;
      n.rows = a.rows;
      n.dim = a.head_dim;
      n.x_ocm = a.x_ocm + h * a.head_dim * 2;
      n.x_stride = xs;
      n.y_ocm = a.y_ocm + h * a.head_dim * 2;
      n.y_stride = ys;
      n.w_ocm = a.w_ocm;
      n.eps = a.eps;
      n.mapping = NormMapping::rows;
      emit_norm(b, cfg, n);
    }
    return;
  }
  NormArgs n;
  n.kind = NormKind::rms;
  n.rows = a.rows * a.heads;
  n.dim = a.head_dim;
  n.x_ocm = a.x_ocm;
  n.y_ocm = a.y_ocm;
  n.w_ocm = a.w_ocm;
  n.eps = a.eps;
  n.mapping = NormMapping::rows;  // rows*heads vectors of head_dim: enough rows for the array
  emit_norm(b, cfg, n);
}

}  // namespace gpnpu::kernels
