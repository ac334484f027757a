// Mixed precision on the device (kernels/f16cols.h): the correction kernel bit-exact
// against its scalar definition, and a whole mixed-precision GEMV and embedding lookup
// (W4 kernel + selector + correction) against the chain's dequantised weights.
#include "kernels/f16cols.h"

#include "kernel_harness.h"
#include "kernels/embed.h"
#include "kernels/gemv.h"
#include "model/checkpoint/quant.h"
#include "model/reference/ops.h"
#include "sim/machine/memory_map.h"

namespace gpnpu::kernels::test {
namespace {

uint32_t up64(uint32_t v) { return (v + 63) / 64 * 64; }

// vredsum.f32's pairwise tree over 16 lanes.
float tree16(const float* v) {
  float t8[8], t4[4], t2[2];
  for (int k = 0; k < 8; ++k) t8[k] = v[2 * k] + v[2 * k + 1];
  for (int k = 0; k < 4; ++k) t4[k] = t8[2 * k] + t8[2 * k + 1];
  for (int k = 0; k < 2; ++k) t2[k] = t4[2 * k] + t4[2 * k + 1];
  return t2[0] + t2[1];
}

struct CorrCase {
  const char* preset;
  uint32_t m, n;
};

class F16ColsShapes : public ::testing::TestWithParam<CorrCase> {};

// Y = f16(Y + tree16(Xs * W16)) for every element, narrow last tile and buffer reuse included.
TEST_P(F16ColsShapes, CorrectionEqualsItsScalarDefinition) {
  const CorrCase c = GetParam();
  sim::Config cfg = sim::Config::make(c.preset, {});
  std::vector<float> y = random_vector(size_t(c.m) * c.n, 3), xs = random_vector(size_t(c.m) * kF16Cols, 4),
                     w = random_vector(size_t(c.n) * kF16Cols, 5, 0.5f);
  for (auto* v : {&y, &xs, &w})
    for (float& e : *v) e = round_f16(e);
  F16ColsArgs a;
  a.m = c.m;
  a.n = c.n;
  a.w_ddr = sim::ddr_addr(0x2000);
  a.xs_ocm = 0;
  a.y_ocm = up64(c.m * kF16RowBytes + 64);
  a.scratch_ocm = up64(a.y_ocm + c.m * c.n * 2 + 64);
  a.scratch_bytes = f16cols_scratch_bytes(cfg);
  a.smem = 0;
  Builder b;
  emit_f16cols_add(b, cfg, a);
  b.op("halt");
  sim::Platform& p = sim::Platform::get();
  p.configure(cfg, false);
  std::vector<uint16_t> wh = to_f16(w);
  p.ddr().write(0x2000, wh.data(), wh.size() * 2);
  write_ocm_f16(a.xs_ocm, xs);
  write_ocm_f16(a.y_ocm, y);
  sim::Stats st = p.run(b.finish());
  std::vector<float> got = read_ocm_f16(a.y_ocm, size_t(c.m) * c.n);
  size_t changed = 0;
  for (uint32_t m = 0; m < c.m; ++m)
    for (uint32_t r = 0; r < c.n; ++r) {
      float prod[kF16Cols];
      for (uint32_t j = 0; j < kF16Cols; ++j) prod[j] = xs[m * kF16Cols + j] * w[r * kF16Cols + j];
      const float want = round_f16(y[m * c.n + r] + tree16(prod));
      ASSERT_EQ(got[m * c.n + r], want) << "row " << m << " column " << r;
      changed += want != y[m * c.n + r];
    }
  EXPECT_GT(changed, size_t(c.m) * c.n / 2);  // the correction is not a no-op
  EXPECT_EQ(st.total[sim::Stat::ddr_bytes_read], uint64_t(c.n) * kF16RowBytes);
}

INSTANTIATE_TEST_SUITE_P(Shapes, F16ColsShapes,
                         ::testing::Values(CorrCase{"qc-u", 1, 2500}, CorrCase{"qc-u", 3, 1024},
                                           CorrCase{"mini", 5, 75}, CorrCase{"mini", 1, 16}));

// The correction of m x n outputs at y, W16 at DDR offset w16, Xs at xs, buffers at scratch.
F16ColsArgs correction(const sim::Config& cfg, uint32_t m, uint32_t n, uint32_t w16, uint32_t xs, uint32_t y,
                       uint32_t scratch) {
  F16ColsArgs f;
  f.m = m;
  f.n = n;
  f.w_ddr = sim::ddr_addr(w16);
  f.xs_ocm = xs;
  f.y_ocm = y;
  f.scratch_ocm = scratch;
  f.scratch_bytes = f16cols_scratch_bytes(cfg);
  return f;
}

// A weight with three outlier input channels kept in fp16 (quantise's mixed precision).
model::QuantTensor mixed_weight(uint32_t n, uint32_t k, std::vector<float>* w) {
  *w = random_vector(size_t(n) * k, 21, 0.02f);
  for (uint32_t r = 0; r < n; ++r)
    for (uint32_t c : {5u, 77u, 130u}) (*w)[size_t(r) * k + c] *= 100.0f;
  model::QuantOptions qo;
  qo.fp16_channels = 3;
  model::QuantTensor q = model::quantise(w->data(), n, k, qo);
  EXPECT_EQ(q.fp16_cols, (std::vector<int32_t>{5, 77, 130}));
  return q;
}

// y = W4 GEMV + selector GEMV (Xs = x at the fp16 channels) + correction, against the
// chain's linear on the dequantised weight (codes + fp16 part): within fp16 rounding, and
// far closer than the codes alone.
TEST(F16ColsMixed, GemvWithFp16ChannelsMatchesTheDequantisedWeight) {
  const sim::Config cfg = sim::Config::make("mini", {});
  const uint32_t n = 40, k = 256;
  std::vector<float> w;
  model::QuantTensor q = mixed_weight(n, k, &w);
  std::vector<float> x = random_vector(k, 22);
  for (float& v : x) v = round_f16(v);
  const uint32_t X = 0, Y = up64(k * 2 + 64), XS = up64(Y + n * 2 + 64), SCR = up64(XS + 128),
                 GSCR = up64(SCR + f16cols_scratch_bytes(cfg));
  const uint32_t w4 = 0, sel = 0x100000, w16 = 0x200000;
  Builder b;
  GemvArgs g;
  g.n = n;
  g.k = k;
  g.w_ddr = sim::ddr_addr(w4);
  g.x_ocm = X;
  g.y_ocm = Y;
  g.scratch_ocm = GSCR;
  g.scratch_bytes = uint32_t(cfg.ocm_bytes) - GSCR;
  emit_gemv_w4(b, cfg, g);
  GemvArgs s = g;
  s.n = kF16Cols;
  s.w_ddr = sim::ddr_addr(sel);
  s.y_ocm = XS;
  emit_gemv_w4(b, cfg, s);
  emit_f16cols_add(b, cfg, correction(cfg, 1, n, w16, XS, Y, SCR));
  b.op("halt");
  sim::Platform& p = sim::Platform::get();
  p.configure(cfg, false);
  auto put = [&](uint32_t off, const std::vector<uint8_t>& v) { p.ddr().write(off, v.data(), v.size()); };
  put(w4, pack_gemv_weight(q.view(), cfg));
  put(sel, pack_gemv_weight(f16cols_selector(q.fp16_cols, k).view(), cfg));
  put(w16, f16cols_rows(q.fp16_w, n, q.fp16_cols.size()));
  write_ocm_f16(X, x);
  p.run(b.finish());
  // The selector gathered x at the fp16 channels exactly (and 0 in the unused slots).
  std::vector<float> xs = read_ocm_f16(XS, kF16Cols);
  for (size_t j = 0; j < kF16Cols; ++j) EXPECT_EQ(xs[j], j < 3 ? x[q.fp16_cols[j]] : 0.0f) << "slot " << j;
  std::vector<float> got = read_ocm_f16(Y, n);
  std::vector<float> wd = model::dequantise(q), ref(n), codes_only(n);
  model::ops::linear(x, model::ops::Matrix::dense("w", n, k, wd.data()), {}, ref);
  Compare cm = compare(got, ref);
  for (uint32_t r = 0; r < n; ++r) EXPECT_NEAR(got[r], ref[r], 2e-3 * std::fabs(ref[r]) + 1e-3) << "row " << r;
  // Negative control: without the fp16 part (the codes alone) the rows are far off.
  for (uint32_t r = 0; r < n; ++r)
    for (size_t j = 0; j < q.fp16_cols.size(); ++j) wd[r * k + q.fp16_cols[j]] = 0.0f;
  model::ops::linear(x, model::ops::Matrix::dense("w", n, k, wd.data()), {}, codes_only);
  EXPECT_GT(cm.cosine, 0.99999);
  EXPECT_LT(compare(codes_only, ref).cosine, 0.9);
}

// The embedding row of a mixed table: W4 row (0 at the fp16 channels) + the token's W16 row
// scattered by the one-hot weight, exactly the dequantised row.
TEST(F16ColsMixed, EmbeddingRowsEqualTheDequantisedMixedTable) {
  const sim::Config cfg = sim::Config::make("mini", {});
  const uint32_t vocab = 40, dim = 256;
  std::vector<float> w;
  model::QuantTensor q = mixed_weight(vocab, dim, &w);
  const std::vector<uint32_t> ids = {3, 39, 0, 17};
  const uint32_t rows = uint32_t(ids.size());
  const uint32_t OUT = 0, XS = up64(rows * dim * 2 + 64), SCR = up64(XS + rows * kF16RowBytes + 64),
                 ESCR = up64(SCR + f16cols_scratch_bytes(cfg));
  const uint32_t table = 0, w16 = 0x100000, onehot = 0x200000;
  Builder b;
  EmbedArgs e;
  e.vocab = vocab;
  e.dim = dim;
  e.table_ddr = sim::ddr_addr(table);
  e.rows = rows;
  e.ids_smem = 1024;
  e.out_ocm = OUT;
  e.scratch_ocm = ESCR;
  emit_embed(b, cfg, e);
  F16RowsArgs g;
  g.rows = rows;
  g.w_ddr = sim::ddr_addr(w16);
  g.ids_smem = 1024;
  g.out_ocm = XS;
  g.smem = 256;
  emit_f16rows_gather(b, cfg, g);
  emit_f16cols_add(b, cfg, correction(cfg, rows, dim, onehot, XS, OUT, SCR));
  b.op("halt");
  sim::Platform& p = sim::Platform::get();
  p.configure(cfg, false);
  auto put = [&](uint32_t off, const std::vector<uint8_t>& v) { p.ddr().write(off, v.data(), v.size()); };
  put(table, pack_gemv_weight(q.view(), cfg));
  put(w16, f16cols_rows(q.fp16_w, vocab, q.fp16_cols.size()));
  put(onehot, f16cols_onehot(q.fp16_cols, dim));
  p.write_smem(1024, ids.data(), rows * 4);
  p.run(b.finish());
  std::vector<float> got = read_ocm_f16(OUT, size_t(rows) * dim), row(dim);
  size_t big = 0;
  for (uint32_t r = 0; r < rows; ++r) {
    model::dequantise_row(q, ids[r], row.data());
    for (uint32_t c = 0; c < dim; ++c) {
      ASSERT_EQ(got[r * dim + c], round_f16(row[c])) << "row " << r << " column " << c;
      big += std::fabs(row[c]) > 0.5f;
    }
  }
  EXPECT_GE(big, size_t(rows) * 3 - 1);  // the x100 channels are there
}

}  // namespace
}  // namespace gpnpu::kernels::test
