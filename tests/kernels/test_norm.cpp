// Norm kernels (RMSNorm, per-head RMSNorm, LayerNorm) against the chain's ops on the
// very fp16 values the device reads; both mappings; timing-only cycles equal the
// functional run; bytes past the row ends are left untouched.
#include "kernels/norm.h"

#include <cstring>

#include "isa/error.h"
#include "kernel_harness.h"
#include "model/reference/ops.h"
#include "sim/run.h"

namespace gpnpu::kernels::test {
namespace {

constexpr uint16_t kSentinel = 0x7bff;  // fp16 65504: padding that must survive

struct NormShape {
  const char* preset;
  NormKind kind;
  uint32_t rows, dim, pad;  // pad: extra fp16 per row stride (not written by the kernel)
  NormMapping mapping;
  bool in_place;
  float mean = 0;           // offset of the inputs (LayerNorm cancellation)
  bool residual = false;    // NormArgs::residual: x += r first (x then checked bit for bit)
};

struct NormRun {
  std::vector<float> y, ref;
  std::vector<float> x_after, x_ref, ref_unadded;  // residual: x in OCM after the run, x + r, the norm of x alone
  uint64_t cycles = 0, cycles_timing = 0;
  bool padding_intact = true;
  NormMapping used = NormMapping::automatic;
};

uint32_t up64(uint32_t v) { return (v + 63) / 64 * 64; }

NormRun run_norm(const NormShape& s, uint32_t seed) {
  sim::Config cfg = sim::Config::make(s.preset, {});
  NormRun r;
  const uint32_t stride = (s.dim + s.pad) * 2;
  NormArgs a;
  a.kind = s.kind;
  a.rows = s.rows;
  a.dim = s.dim;
  a.x_ocm = 0;
  a.x_stride = stride;
  a.y_ocm = s.in_place ? 0 : up64(s.rows * stride + 64);
  a.y_stride = stride;
  a.w_ocm = up64(a.y_ocm + s.rows * stride + 64);
  a.b_ocm = up64(a.w_ocm + s.dim * 2 + 64);
  a.scratch_ocm = up64(a.b_ocm + s.dim * 2 + 64);
  a.residual = s.residual;
  a.r_ocm = up64(a.scratch_ocm + norm_scratch_bytes(cfg) + 64);
  a.scratch_bytes = norm_scratch_bytes(cfg);
  a.eps = s.kind == NormKind::rms ? 1e-6f : 1e-6f;
  a.mapping = s.mapping;
  r.used = norm_pick_mapping(cfg, a);

  std::vector<float> x = random_vector(size_t(s.rows) * s.dim, seed, 1.5f);
  for (float& v : x) v = round_f16(v + s.mean);
  std::vector<float> w = random_vector(s.dim, seed + 1, 0.3f), bias = random_vector(s.dim, seed + 2, 0.2f);
  for (float& v : w) v = round_f16(1.0f + v);
  for (float& v : bias) v = round_f16(v);
  std::vector<float> res = random_vector(x.size(), seed + 3, 1.0f);
  for (float& v : res) v = round_f16(v);

  Builder b;
  emit_norm(b, cfg, a);
  b.op("halt");
  isa::Program prog = b.finish();

  sim::Platform& p = sim::Platform::get();
  p.configure(cfg, false);
  // Rows with a sentinel in the padding, at x and (out of place) y.
  std::vector<uint16_t> img(size_t(s.rows) * (s.dim + s.pad), kSentinel);
  for (uint32_t i = 0; i < s.rows; ++i)
    for (uint32_t j = 0; j < s.dim; ++j) img[size_t(i) * (s.dim + s.pad) + j] = f32_to_f16(x[size_t(i) * s.dim + j]);
  p.ocm().write(a.x_ocm, img.data(), img.size() * 2);
  if (!s.in_place) {
    std::vector<uint16_t> fill(img.size(), kSentinel);
    p.ocm().write(a.y_ocm, fill.data(), fill.size() * 2);
  }
  write_ocm_f16(a.w_ocm, w);
  write_ocm_f16(a.b_ocm, bias);
  if (s.residual) {
    std::vector<uint16_t> rimg(img.size(), kSentinel);
    for (uint32_t i = 0; i < s.rows; ++i)
      for (uint32_t j = 0; j < s.dim; ++j) rimg[size_t(i) * (s.dim + s.pad) + j] = f32_to_f16(res[size_t(i) * s.dim + j]);
    p.ocm().write(a.r_ocm, rimg.data(), rimg.size() * 2);
  }
  r.cycles = p.run(prog).total[sim::Stat::cycles];
  auto norm_of = [&](const std::vector<float>& in, std::vector<float>& out) {
    out.resize(in.size());
    if (s.kind == NormKind::rms)
      model::ops::rmsnorm_rows(in, out, int(s.dim), w, a.eps);
    else
      model::ops::layernorm_rows(in, out, int(s.dim), w, bias, a.eps);
  };
  // The rows at `at` (their padding checked against the sentinel).
  auto read_rows = [&](uint32_t at) {
    std::vector<uint16_t> raw(img.size());
    p.ocm().read(at, raw.data(), raw.size() * 2);
    std::vector<float> v(x.size());
    for (uint32_t i = 0; i < s.rows; ++i) {
      for (uint32_t j = 0; j < s.dim; ++j) v[size_t(i) * s.dim + j] = f16_to_f32(raw[size_t(i) * (s.dim + s.pad) + j]);
      for (uint32_t j = s.dim; j < s.dim + s.pad; ++j)
        if (raw[size_t(i) * (s.dim + s.pad) + j] != kSentinel) r.padding_intact = false;
    }
    return v;
  };
  if (s.residual) {
    r.x_after = read_rows(a.x_ocm);
    norm_of(x, r.ref_unadded);
    model::ops::add_inplace(x, res);
    for (float& v : x) v = round_f16(v);
    r.x_ref = x;
  }

  r.y = read_rows(a.y_ocm);
  norm_of(x, r.ref);

  p.configure(cfg, true);
  r.cycles_timing = p.run(prog).total[sim::Stat::cycles];
  return r;
}

// Gate: cosine >= 0.9999 and, per element, |y - ref| <= 2^-10 |ref| + 2^-24
// (one fp16 rounding of the output is 2^-11 relative; the other 2^-11 covers the fp32
// sums against the reference's double sums moving a value across a rounding boundary).
struct Gate {
  double cosine = 0, max_abs = 0;
  size_t violations = 0;
};
Gate gate(const std::vector<float>& y, const std::vector<float>& ref) {
  Gate g;
  Compare c = compare(y, ref);
  g.cosine = c.cosine;
  g.max_abs = c.max_abs;
  for (size_t i = 0; i < y.size(); ++i)
    if (std::fabs(double(y[i]) - ref[i]) > std::fabs(double(ref[i])) * 0x1p-10 + 0x1p-24) ++g.violations;
  return g;
}
bool passes(const Gate& g) { return g.cosine >= 0.9999 && g.violations == 0; }

class NormShapes : public ::testing::TestWithParam<NormShape> {};

TEST_P(NormShapes, MatchesChainOp) {
  const NormShape s = GetParam();
  NormRun r = run_norm(s, 11 + s.rows + s.dim);
  Gate g = gate(r.y, r.ref);
  EXPECT_GE(g.cosine, 0.9999);
  EXPECT_EQ(g.violations, 0u) << "max |y - ref| " << g.max_abs;
  EXPECT_TRUE(r.padding_intact) << "the kernel wrote past a row end";
  EXPECT_EQ(r.cycles, r.cycles_timing) << "timing-only run differs from the functional run";
  if (s.residual) {
    // x + r bit for bit as the element-wise add rounds it; the norm of x alone must fail the
    // gate (the add happened before the norm)
    ASSERT_EQ(r.x_after.size(), r.x_ref.size());
    size_t off = 0;
    for (size_t i = 0; i < r.x_ref.size(); ++i) off += r.x_after[i] != r.x_ref[i];
    EXPECT_EQ(off, 0u) << "x + r differs from the element-wise add";
    EXPECT_FALSE(passes(gate(r.y, r.ref_unadded)));
  }
  std::printf("%s %s%s rows %u dim %u (%s): cosine %.7f max_abs %.3g cycles %llu\n", s.preset,
              s.kind == NormKind::rms ? "rmsnorm" : "layernorm", s.residual ? " + residual" : "", s.rows, s.dim,
              r.used == NormMapping::split ? "split" : "rows", g.cosine, g.max_abs, (unsigned long long)r.cycles);
}

using M = NormMapping;
INSTANTIATE_TEST_SUITE_P(
    Rms, NormShapes,
    ::testing::Values(NormShape{"mini", NormKind::rms, 1, 2048, 0, M::split, true},
                      NormShape{"mini", NormKind::rms, 1, 2048, 0, M::rows, false},
                      NormShape{"mini", NormKind::rms, 37, 64, 0, M::automatic, true},
                      NormShape{"mini", NormKind::rms, 5, 96, 16, M::rows, false},
                      NormShape{"mini", NormKind::rms, 20, 100, 7, M::rows, false},  // dim % 16 != 0
                      NormShape{"mini", NormKind::rms, 3, 1000, 5, M::split, false},
                      NormShape{"mini", NormKind::rms, 17, 2200, 3, M::rows, true},  // no LRM cache
                      NormShape{"qc-u", NormKind::rms, 1, 2048, 0, M::automatic, true},
                      NormShape{"qc-u", NormKind::rms, 40, 2048, 0, M::automatic, false}));
INSTANTIATE_TEST_SUITE_P(
    Layer, NormShapes,
    ::testing::Values(NormShape{"mini", NormKind::layer, 5, 1024, 0, M::rows, false},
                      NormShape{"mini", NormKind::layer, 20, 72, 9, M::rows, true, 8.0f},  // |mean| >> std
                      NormShape{"mini", NormKind::layer, 2, 4100, 0, M::split, false, 4.0f},
                      NormShape{"mini", NormKind::layer, 19, 1100, 0, M::rows, true},
                      NormShape{"mini", NormKind::layer, 2, 4096, 0, M::rows, true},  // no LRM cache
                      NormShape{"qc-u", NormKind::layer, 70, 1024, 0, M::automatic, false}));

// The residual add fused in front (NormArgs::residual): both mappings, parts (128 rows of 2,048
// on qc-u's 1,024 PEs: 2 parts... and 4 on mini), padding between the rows, LayerNorm.
INSTANTIATE_TEST_SUITE_P(
    Residual, NormShapes,
    ::testing::Values(NormShape{"mini", NormKind::rms, 1, 2048, 0, M::split, false, 0, true},
                      NormShape{"mini", NormKind::rms, 3, 1024, 16, M::split, false, 0, true},
                      NormShape{"mini", NormKind::rms, 20, 256, 32, M::rows, false, 0, true},
                      NormShape{"mini", NormKind::rms, 17, 2240, 0, M::rows, false, 0, true},  // no LRM cache
                      NormShape{"qc-u", NormKind::rms, 128, 2048, 0, M::automatic, false, 0, true},
                      NormShape{"mini", NormKind::layer, 19, 1024, 0, M::rows, false, 2.0f, true},
                      NormShape{"mini", NormKind::layer, 2, 4096, 0, M::rows, false, 0, true}));  // no LRM cache

TEST(Norm, ResidualRejectsPartialChunksAndYOnX) {
  sim::Config cfg = sim::Config::make("mini", {});
  NormArgs a{.rows = 2, .dim = 100, .x_ocm = 0, .y_ocm = 4096, .w_ocm = 8192, .residual = true, .r_ocm = 12288};
  auto message = [&] {
    Builder b;
    try {
      emit_norm(b, cfg, a);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  std::string m = message();
  EXPECT_NE(m.find("residual add: dim = 100 must be a multiple of 32"), std::string::npos) << m;
  a.dim = 128;
  a.y_ocm = 0;
  m = message();
  EXPECT_NE(m.find("residual add: y (OCM 0) must not be x"), std::string::npos) << m;
}

TEST(Norm, NegativeControlCorruptedOutputFailsTheGate) {
  NormRun r = run_norm(NormShape{"mini", NormKind::rms, 5, 96, 0, M::rows, false}, 3);
  ASSERT_TRUE(passes(gate(r.y, r.ref)));
  std::vector<float> bad = r.y;
  bad[7] *= 1.01f;  // one value 1 % off: the per-element bound must see it
  EXPECT_FALSE(passes(gate(bad, r.ref)));
  bad = r.y;
  for (size_t i = 0; i < 96; ++i) bad[i] = 0;  // a row never written
  EXPECT_FALSE(passes(gate(bad, r.ref)));
}

// Per-head RMSNorm (q_norm / k_norm) against ops::rmsnorm_heads, dense rows or rows
// `pad` bytes apart beyond their heads (q or k inside the prefill's q|k|v rows): the
// bytes between the rows must stay as they were.
struct HeadShape {
  const char* preset;
  uint32_t rows, heads, head_dim, pad = 0;
};
class HeadNormShapes : public ::testing::TestWithParam<HeadShape> {};

TEST_P(HeadNormShapes, MatchesChainOp) {
  const HeadShape s = GetParam();
  sim::Config cfg = sim::Config::make(s.preset, {});
  const uint32_t width = s.heads * s.head_dim, stride = width * 2 + s.pad;
  std::vector<float> x = random_vector(size_t(s.rows) * width, 5 + width, 2.0f);
  for (float& v : x) v = round_f16(v);
  std::vector<float> w = random_vector(s.head_dim, 6, 0.3f);
  for (float& v : w) v = round_f16(1.0f + v);
  HeadNormArgs a;
  a.rows = s.rows;
  a.heads = s.heads;
  a.head_dim = s.head_dim;
  a.x_ocm = 0;
  a.y_ocm = 0;
  a.x_stride = a.y_stride = s.pad ? stride : 0;
  a.w_ocm = up64(s.rows * stride + 64);
  Builder b;
  emit_head_norm(b, cfg, a);
  b.op("halt");
  isa::Program prog = b.finish();
  sim::Platform& p = sim::Platform::get();
  p.configure(cfg, false);
  const std::vector<float> sentinel(size_t(s.rows) * stride / 2, 7.0f);
  write_ocm_f16(0, sentinel);
  for (uint32_t r = 0; r < s.rows; ++r)
    write_ocm_f16(r * stride, std::vector<float>(x.begin() + size_t(r) * width, x.begin() + size_t(r + 1) * width));
  write_ocm_f16(a.w_ocm, w);
  uint64_t cycles = p.run(prog).total[sim::Stat::cycles];
  const std::vector<float> all = read_ocm_f16(0, sentinel.size());
  std::vector<float> y;
  for (uint32_t r = 0; r < s.rows; ++r) {
    y.insert(y.end(), all.begin() + size_t(r) * stride / 2, all.begin() + size_t(r) * stride / 2 + width);
    for (uint32_t e = width; e < stride / 2; ++e)
      EXPECT_EQ(all[size_t(r) * stride / 2 + e], 7.0f) << "row " << r << ": the pad between rows was written";
  }
  std::vector<float> ref = x;
  model::ops::rmsnorm_heads(ref, int(s.heads), int(s.head_dim), w, a.eps);
  Gate g = gate(y, ref);
  EXPECT_GE(g.cosine, 0.9999);
  EXPECT_EQ(g.violations, 0u) << "max |y - ref| " << g.max_abs;
  p.configure(cfg, true);
  EXPECT_EQ(p.run(prog).total[sim::Stat::cycles], cycles);
  std::printf("%s head_norm rows %u heads %u head_dim %u pad %u: cosine %.7f max_abs %.3g cycles %llu\n", s.preset,
              s.rows, s.heads, s.head_dim, s.pad, g.cosine, g.max_abs, (unsigned long long)cycles);
}
INSTANTIATE_TEST_SUITE_P(Heads, HeadNormShapes,
                         ::testing::Values(HeadShape{"mini", 1, 16, 128}, HeadShape{"mini", 3, 5, 80},
                                           HeadShape{"mini", 2, 4, 24}, HeadShape{"qc-u", 7, 16, 128},
                                           HeadShape{"mini", 3, 4, 128, 2 * 4 * 128 * 2},   // q of q|k|v rows
                                           HeadShape{"qc-u", 20, 2, 64, 96}));

TEST(HeadNorm, RejectsRowStridesShorterThanTheRow) {
  sim::Config cfg = sim::Config::make("mini", {});
  HeadNormArgs a;
  a.rows = 2;
  a.heads = 4;
  a.head_dim = 32;
  a.x_stride = a.y_stride = 4 * 32 * 2 - 64;
  Builder b;
  EXPECT_THROW(emit_head_norm(b, cfg, a), Error);
}

// Both mappings measured; the automatic rule must pick one within 15 % of the better.
TEST(Norm, MappingRuleFollowsMeasurements) {
  struct Case {
    const char* preset;
    NormKind kind;
    uint32_t rows, dim;
  };
  for (Case c : {Case{"qc-u", NormKind::rms, 1, 2048}, Case{"qc-u", NormKind::rms, 4, 2048},
                 Case{"qc-u", NormKind::rms, 16, 2048}, Case{"qc-u", NormKind::rms, 256, 2048},
                 Case{"qc-u", NormKind::layer, 1, 1024}, Case{"qc-u", NormKind::layer, 64, 1024},
                 Case{"mini", NormKind::rms, 1, 2048}, Case{"mini", NormKind::rms, 8, 2048},
                 Case{"mini", NormKind::rms, 64, 128}}) {
    sim::Config cfg = sim::Config::make(c.preset, {});
    uint64_t cyc[2];
    for (int m = 0; m < 2; ++m) {
      NormArgs a;
      a.kind = c.kind;
      a.rows = c.rows;
      a.dim = c.dim;
      a.x_ocm = 0;
      a.y_ocm = 0;
      a.w_ocm = up64(c.rows * c.dim * 2 + 64);
      a.b_ocm = up64(a.w_ocm + c.dim * 2 + 64);
      a.scratch_ocm = up64(a.b_ocm + c.dim * 2 + 64);
      a.scratch_bytes = norm_scratch_bytes(cfg);
      a.mapping = m ? NormMapping::split : NormMapping::rows;
      Builder b;
      emit_norm(b, cfg, a);
      b.op("halt");
      sim::Platform& p = sim::Platform::get();
      p.configure(cfg, true);
      cyc[m] = p.run(b.finish()).total[sim::Stat::cycles];
      if (m == 1) {
        a.mapping = NormMapping::automatic;
        bool split = norm_pick_mapping(cfg, a) == NormMapping::split;
        uint64_t best = std::min(cyc[0], cyc[1]), picked = split ? cyc[1] : cyc[0];
        double floor = floor_cycles(cfg, cost_norm(cfg, a));
        std::printf("%s %s rows %u dim %u: rows-mapping %llu, split %llu cycles, picks %s; OCM floor %.0f\n", c.preset,
                    c.kind == NormKind::rms ? "rms" : "ln", c.rows, c.dim, (unsigned long long)cyc[0],
                    (unsigned long long)cyc[1], split ? "split" : "rows", floor);
        EXPECT_LE(double(picked), 1.15 * double(best)) << c.preset << " rows " << c.rows << " dim " << c.dim;
      }
    }
  }
}

}  // namespace
}  // namespace gpnpu::kernels::test
