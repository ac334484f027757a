// RoPE kernel against model::ops::mrope (interleaved M-RoPE) and model::ops::rope_2d
// (tower), on the very fp16 values the device reads, with the host-built tables;
// negative control (sin of the wrong sign, i.e. the other rotate_half convention);
// timing-only cycles equal the functional run.
#include "kernels/rope.h"

#include "kernel_harness.h"
#include "kernels/norm.h"
#include "model/reference/ops.h"
#include "sim/run.h"

namespace gpnpu::kernels::test {
namespace {

struct RopeShape {
  const char* preset;
  uint32_t rows, heads, head_dim;
  bool mrope;      // else the tower's 2-D rule
  bool tab_f32;
  uint32_t pad;    // extra fp16 per row stride
  bool in_place;
};

struct RopeRun {
  std::vector<float> y, ref;
  uint64_t cycles = 0;
};

uint32_t up64(uint32_t v) { return (v + 63) / 64 * 64; }

RopeRun run_rope(const RopeShape& s, bool timing_only, bool flip_sin = false) {
  sim::Config cfg = sim::Config::make(s.preset, {});
  const uint32_t width = s.heads * s.head_dim, stride = (width + s.pad) * 2;
  RopeArgs a;
  a.rows = s.rows;
  a.heads = s.heads;
  a.head_dim = s.head_dim;
  a.x_ocm = 0;
  a.x_row_stride = stride;
  a.out_ocm = s.in_place ? 0 : up64(s.rows * stride);
  a.out_row_stride = stride;
  const uint32_t tb = s.tab_f32 ? 4 : 2;
  a.tab_row_stride = s.head_dim * tb;
  a.cos_ocm = up64(a.out_ocm + s.rows * stride);
  a.sin_ocm = up64(a.cos_ocm + s.rows * a.tab_row_stride);
  a.tab_f32 = s.tab_f32;

  // Positions: M-RoPE triples with distinct t/h/w (an image block), or grid (r, q).
  std::vector<std::array<int, 3>> pos3(s.rows);
  std::vector<std::array<int, 2>> pos2(s.rows);
  for (uint32_t n = 0; n < s.rows; ++n) {
    pos3[n] = {int(3 + n / 7), int(5 + n % 7), int(11 + 2 * n)};
    pos2[n] = {int(n / 6), int(n % 6 + 2 * (n / 12))};
  }
  std::vector<float> cs, sn;
  const int section_lm[3] = {24, 20, 20};
  std::vector<int> section(section_lm, section_lm + 3);
  if (s.head_dim != 128) section = {int(s.head_dim / 2) - 2 * int(s.head_dim / 6), int(s.head_dim / 6), int(s.head_dim / 6)};
  const float theta = s.mrope ? 5e6f : 10000.0f;
  if (s.mrope) model::ops::rope_tables_mrope(pos3, int(s.head_dim), theta, section, cs, sn);
  else model::ops::rope_tables_2d(pos2, int(s.head_dim), theta, cs, sn);

  std::vector<float> x = random_vector(size_t(s.rows) * width, 17 + s.rows, 1.0f);
  for (float& v : x) v = round_f16(v);

  Builder b;
  emit_rope(b, cfg, a);
  b.op("halt");
  isa::Program prog = b.finish();
  sim::Platform& p = sim::Platform::get();
  p.configure(cfg, timing_only);
  RopeRun r;
  if (!timing_only) {
    for (uint32_t n = 0; n < s.rows; ++n) {
      std::vector<float> row(x.begin() + n * width, x.begin() + (n + 1) * width);
      write_ocm_f16(a.x_ocm + n * stride, row);
    }
    std::vector<float> sn_dev = sn;
    if (flip_sin)
      for (float& v : sn_dev) v = -v;
    if (s.tab_f32) {
      p.ocm().write(a.cos_ocm, cs.data(), cs.size() * 4);
      p.ocm().write(a.sin_ocm, sn_dev.data(), sn_dev.size() * 4);
    } else {
      write_ocm_f16(a.cos_ocm, cs);
      write_ocm_f16(a.sin_ocm, sn_dev);
    }
  }
  r.cycles = p.run(prog).total[sim::Stat::cycles];
  if (timing_only) return r;
  for (uint32_t n = 0; n < s.rows; ++n) {
    std::vector<float> row = read_ocm_f16(a.out_ocm + n * stride, width);
    r.y.insert(r.y.end(), row.begin(), row.end());
  }
  r.ref = x;
  if (s.mrope) model::ops::mrope(r.ref, int(s.heads), int(s.head_dim), pos3, theta, section);
  else model::ops::rope_2d(r.ref, int(s.heads), int(s.head_dim), pos2, theta);
  return r;
}

class RopeShapes : public ::testing::TestWithParam<RopeShape> {};

TEST_P(RopeShapes, MatchesChainRope) {
  RopeShape s = GetParam();
  RopeRun r = run_rope(s, false);
  Compare c = compare(r.y, r.ref);
  // fp32 tables: only the fp16 output rounding (half an ulp, 2^-11 relative);
  // fp16 tables add 2^-11 relative on each of cos and sin.
  double bound = c.max_ref * (s.tab_f32 ? 1.0 / 1024 : 1.0 / 256);
  EXPECT_GE(c.cosine, 0.9999);
  EXPECT_LE(c.max_abs, bound) << "max |y - ref| " << c.max_abs << ", max |ref| " << c.max_ref;
  RopeRun t = run_rope(s, true);
  EXPECT_EQ(t.cycles, r.cycles) << "timing-only must give the functional cycle count";
  std::printf("rope %s rows %u heads %u hd %u %s %s: cos %.7f max_abs %.3g (bound %.3g), %llu cycles\n", s.preset, s.rows,
              s.heads, s.head_dim, s.mrope ? "mrope" : "2d", s.tab_f32 ? "f32" : "f16", c.cosine, c.max_abs, bound,
              (unsigned long long)r.cycles);
}

// Rows not a multiple of the tile (npe/heads), heads not a power of two, strided rows (a
// scatter and a gather a row) and dense ones (one a tile), in place and out of place, fp32
// tables (a grouped broadcast a tile) and fp16 ones (a broadcast a row), both position rules.
INSTANTIATE_TEST_SUITE_P(Shapes, RopeShapes,
                         ::testing::Values(RopeShape{"mini", 7, 3, 64, true, true, 0, false},
                                           RopeShape{"mini", 11, 4, 64, true, false, 0, false},
                                           RopeShape{"mini", 13, 2, 128, true, false, 16, true},
                                           RopeShape{"mini", 37, 5, 64, false, true, 8, false},
                                           RopeShape{"qc-u", 128, 16, 128, true, true, 0, true},
                                           RopeShape{"qc-u", 256, 16, 64, false, true, 0, false}));

// The head-norm rotary runs' set-up: rows of `width` fp16 (x, row stride `stride` bytes) at OCM
// 0, in place, their M-RoPE tables after them (a: rows, head_dim, strides, tables, eps), weights
// from w_ocm on; run() loads x and the tables, runs b's program and reads the rows back.
struct NormRopeSetup {
  uint32_t rows, hd, width, stride, w_ocm;
  RopeArgs a;
  std::vector<std::array<int, 3>> pos3;
  std::vector<int> section;
  std::vector<float> cs, sn, x;
  NormRopeSetup(uint32_t rows_, uint32_t hd_, uint32_t width_, uint32_t pad, uint32_t seed)
      : rows(rows_), hd(hd_), width(width_), stride((width_ + pad) * 2), pos3(rows_) {
    a.rows = rows, a.head_dim = hd;
    a.x_ocm = a.out_ocm = 0;
    a.x_row_stride = a.out_row_stride = stride;
    a.tab_row_stride = hd * 4;
    a.cos_ocm = up64(rows * stride);
    a.sin_ocm = up64(a.cos_ocm + rows * a.tab_row_stride);
    a.eps = 1e-6f;
    w_ocm = up64(a.sin_ocm + rows * a.tab_row_stride) + 64;
    for (uint32_t n = 0; n < rows; ++n) pos3[n] = {int(3 + n / 7), int(5 + n % 7), int(11 + 2 * n)};
    section = hd == 128 ? std::vector<int>{24, 20, 20}
                        : std::vector<int>{int(hd / 2) - 2 * int(hd / 6), int(hd / 6), int(hd / 6)};
    model::ops::rope_tables_mrope(pos3, int(hd), 5e6f, section, cs, sn);
    x = random_vector(size_t(rows) * width, seed + rows, 2.0f);
    for (float& v : x) v = round_f16(v);
  }
  // Weights of the head norm: 1 + small, rounded to fp16.
  static std::vector<float> weights(uint32_t hd, uint32_t seed) {
    std::vector<float> w = random_vector(hd, seed, 0.4f);
    for (float& v : w) v = round_f16(1.0f + v);
    return w;
  }
  std::vector<uint16_t> run(const char* preset, Builder& b, const std::function<void()>& load_weights,
                            uint64_t& cycles) const {
    b.op("halt");
    isa::Program prog = b.finish();
    sim::Platform& p = sim::Platform::get();
    p.configure(sim::Config::make(preset, {}), false);
    for (uint32_t n = 0; n < rows; ++n)
      write_ocm_f16(n * stride, std::vector<float>(x.begin() + n * width, x.begin() + (n + 1) * width));
    p.ocm().write(a.cos_ocm, cs.data(), cs.size() * 4);
    p.ocm().write(a.sin_ocm, sn.data(), sn.size() * 4);
    load_weights();
    cycles = p.run(prog).total[sim::Stat::cycles];
    std::vector<uint16_t> y;
    for (uint32_t n = 0; n < rows; ++n) {
      std::vector<uint16_t> row(width);
      p.ocm().read(n * stride, row.data(), width * 2);
      y.insert(y.end(), row.begin(), row.end());
    }
    return y;
  }
};

// The per-head RMSNorm in front (RopeArgs::norm, Qwen3's q_norm / k_norm then the rotary): the
// same fp16 bits as emit_head_norm then emit_rope, in fewer cycles (one pass over x through the
// OCM port); against the chain (rmsnorm_heads, then mrope) within the two fp16 roundings.
// Strided rows (q or k inside the prefill's q|k|v rows, 128 rows of 16 heads of 128 on qc-u, in
// place) and dense ones (mini, 13 rows of 5 heads of 64). Negative control: the norm's weight
// read 64 bytes off must change the bits.
struct NormRopeRun {
  std::vector<uint16_t> y;
  std::vector<float> yf, ref;
  uint64_t cycles = 0;
};
NormRopeRun run_norm_rope(const char* preset, uint32_t rows, uint32_t heads, uint32_t hd, uint32_t pad, bool fused,
                          int64_t w_off = 0) {
  const sim::Config cfg = sim::Config::make(preset, {});
  NormRopeSetup st(rows, hd, heads * hd, pad, 29);
  RopeArgs a = st.a;
  a.heads = heads;
  const std::vector<float> w = NormRopeSetup::weights(hd, 31);
  Builder b;
  if (fused) {
    a.norm = true;
    a.norm_w_ocm = uint32_t(int64_t(st.w_ocm) + w_off);
  } else {
    emit_head_norm(b, cfg, {.rows = rows, .heads = heads, .head_dim = hd, .x_ocm = 0, .x_stride = st.stride,
                            .y_ocm = 0, .y_stride = st.stride, .w_ocm = st.w_ocm, .eps = a.eps});
  }
  emit_rope(b, cfg, a);
  NormRopeRun r;
  r.y = st.run(preset, b, [&] {
    write_ocm_f16(st.w_ocm, w);
    write_ocm_f16(st.w_ocm + hd * 2, std::vector<float>(hd, 1.0f));  // (what a weight read 64 B on meets)
  }, r.cycles);
  for (uint16_t v : r.y) r.yf.push_back(f16_to_f32(v));
  r.ref = st.x;
  model::ops::rmsnorm_heads(r.ref, int(heads), int(hd), w, a.eps);
  for (float& v : r.ref) v = round_f16(v);
  model::ops::mrope(r.ref, int(heads), int(hd), st.pos3, 5e6f, st.section);
  return r;
}

TEST(Rope, HeadNormInFrontGivesTheTwoKernelsBits) {
  struct Case {
    const char* preset;
    uint32_t rows, heads, hd, pad;
  };
  for (const Case& k : {Case{"qc-u", 128, 16, 128, 2048}, Case{"mini", 13, 5, 64, 0}}) {
    const NormRopeRun two = run_norm_rope(k.preset, k.rows, k.heads, k.hd, k.pad, false),
                      one = run_norm_rope(k.preset, k.rows, k.heads, k.hd, k.pad, true),
                      off = run_norm_rope(k.preset, k.rows, k.heads, k.hd, k.pad, true, 64);
    size_t diff = 0, diff_off = 0;
    for (size_t i = 0; i < two.y.size(); ++i) diff += two.y[i] != one.y[i], diff_off += two.y[i] != off.y[i];
    EXPECT_EQ(diff, 0u) << k.preset;
    EXPECT_GT(diff_off, two.y.size() / 2) << "negative control: a weight 64 B off";
    const Compare c = compare(one.yf, one.ref);
    EXPECT_GE(c.cosine, 0.9999);
    EXPECT_LE(c.max_abs, c.max_ref / 256) << "max |y - ref| " << c.max_abs;
    EXPECT_LT(one.cycles, two.cycles);
    std::printf("%s, %u rows of %u heads of %u: head norm then rope %llu cycles, in one call %llu\n", k.preset, k.rows,
                k.heads, k.hd, (unsigned long long)two.cycles, (unsigned long long)one.cycles);
  }
}

// Two head norms in one call (RopeArgs::norm2_from: the prefill's q and k, adjacent in the q|k|v
// rows, each with its weights): the same fp16 bits as a call for q's heads then one for k's, in
// fewer cycles. 128 rows of 16 + 8 heads of 128 in q|k|v rows on qc-u, 13 rows of 3 + 2 heads of
// 64 on mini (5 heads a row: a PE's head is its index mod 5). Negative control: k normed with
// q's weights must change k's bits.
struct QkRun {
  std::vector<uint16_t> y;
  uint64_t cycles = 0;
};
QkRun run_qk_norm_rope(const char* preset, uint32_t rows, uint32_t nq, uint32_t nk, uint32_t hd, uint32_t pad,
                       int mode) {  // 0: two calls, 1: one call, 2: one call with q's weights for k
  const sim::Config cfg = sim::Config::make(preset, {});
  const NormRopeSetup st(rows, hd, (nq + nk) * hd, pad, 41);
  const uint32_t wq = st.w_ocm, wk = wq + up64(hd * 2);
  const std::vector<float> w1 = NormRopeSetup::weights(hd, 43), w2 = NormRopeSetup::weights(hd, 47);
  RopeArgs a = st.a;
  a.norm = true;
  Builder b;
  if (mode == 0) {
    RopeArgs q = a, k = a;
    q.heads = nq, q.norm_w_ocm = wq;
    k.heads = nk, k.x_ocm = k.out_ocm = nq * hd * 2, k.norm_w_ocm = wk;
    emit_rope(b, cfg, q);
    emit_rope(b, cfg, k);
  } else {
    a.heads = nq + nk, a.norm_w_ocm = wq;
    a.norm2_from = nq, a.norm2_w_ocm = mode == 1 ? wk : wq;
    emit_rope(b, cfg, a);
  }
  QkRun r;
  r.y = st.run(preset, b, [&] {
    write_ocm_f16(wq, w1);
    write_ocm_f16(wk, w2);
  }, r.cycles);
  return r;
}

TEST(Rope, TwoHeadNormsInOneCallGiveTheTwoCallsBits) {
  struct Case {
    const char* preset;
    uint32_t rows, nq, nk, hd, pad;
  };
  for (const Case& k : {Case{"qc-u", 128, 16, 8, 128, 1024}, Case{"mini", 13, 3, 2, 64, 0}}) {
    const QkRun two = run_qk_norm_rope(k.preset, k.rows, k.nq, k.nk, k.hd, k.pad, 0),
                one = run_qk_norm_rope(k.preset, k.rows, k.nq, k.nk, k.hd, k.pad, 1),
                bad = run_qk_norm_rope(k.preset, k.rows, k.nq, k.nk, k.hd, k.pad, 2);
    const uint32_t width = (k.nq + k.nk) * k.hd;
    size_t diff = 0, diff_q = 0, diff_k = 0;
    for (size_t i = 0; i < two.y.size(); ++i) {
      diff += two.y[i] != one.y[i];
      (i % width < k.nq * k.hd ? diff_q : diff_k) += two.y[i] != bad.y[i];
    }
    EXPECT_EQ(diff, 0u) << k.preset;
    EXPECT_EQ(diff_q, 0u) << "negative control: q's heads keep their weights";
    EXPECT_GT(diff_k, size_t(k.rows) * k.nk * k.hd / 2) << "negative control: k normed with q's weights";
    EXPECT_LT(one.cycles, two.cycles);
    std::printf("%s, %u rows of %u + %u heads of %u: two calls %llu cycles, one %llu\n", k.preset, k.rows, k.nq, k.nk,
                k.hd, (unsigned long long)two.cycles, (unsigned long long)one.cycles);
  }
}

TEST(Rope, NegativeControlWrongRotateHalfSignFailsTheGate) {
  RopeShape s{"mini", 7, 3, 64, true, true, 0, false};
  RopeRun r = run_rope(s, false, /*flip_sin=*/true);
  Compare c = compare(r.y, r.ref);
  EXPECT_TRUE(c.cosine < 0.9999 || c.max_abs > c.max_ref / 1024) << "cos " << c.cosine << " max_abs " << c.max_abs;
}

}  // namespace
}  // namespace gpnpu::kernels::test
