// Element-wise kernels (residual add, bias add, SiLU-gated product, tanh and erf GELU)
// against the chain's ops on the very fp16 values the device reads; both mappings;
// timing-only cycles equal the functional run; bytes past the row ends untouched;
// the two GELUs are told apart element by element (docs/testing.md model-test item 3).
#include "kernels/elementwise.h"

#include "kernel_harness.h"
#include "model/reference/ops.h"
#include "sim/run.h"

namespace gpnpu::kernels::test {
namespace {

constexpr uint16_t kSentinel = 0x7bff;

struct EwShape {
  const char* preset;
  EwOp op;
  uint32_t rows, cols, pad;
  EwMapping mapping;
  bool in_place;
  float scale = 2.0f;  // std of the inputs
};

struct EwRun {
  std::vector<float> a, out, ref;
  uint64_t cycles = 0, cycles_timing = 0;
  bool padding_intact = true;
  EwMapping used = EwMapping::automatic;
  double floor = 0;
};

uint32_t up64(uint32_t v) { return (v + 63) / 64 * 64; }

std::vector<float> reference(EwOp op, const std::vector<float>& a, const std::vector<float>& b, uint32_t cols) {
  std::vector<float> r = a;
  switch (op) {
    case EwOp::add: model::ops::add_inplace(r, b); break;
    case EwOp::bias_add:
      for (size_t i = 0; i < r.size(); i += cols) model::ops::add_inplace(std::span<float>(r).subspan(i, cols), b);
      break;
    case EwOp::silu_mul: model::ops::silu_mul(a, b, r); break;
    case EwOp::gelu_tanh: model::ops::gelu_tanh(r); break;
    case EwOp::gelu_erf: model::ops::gelu_erf(r); break;
  }
  return r;
}

EwRun run_ew(const EwShape& s, uint32_t seed) {
  sim::Config cfg = sim::Config::make(s.preset, {});
  EwRun r;
  const uint32_t w = s.cols + s.pad, stride = w * 2, bytes = s.rows * stride;
  EwArgs a;
  a.op = s.op;
  a.rows = s.rows;
  a.cols = s.cols;
  a.a_ocm = 0;
  a.a_stride = stride;
  a.b_ocm = up64(bytes + 64);
  a.b_stride = stride;
  a.out_ocm = s.in_place ? 0 : up64(a.b_ocm + bytes + 64);
  a.out_stride = stride;
  a.mapping = s.mapping;
  r.used = ew_pick_mapping(cfg, a);
  r.floor = floor_cycles(cfg, cost_elementwise(cfg, a));

  r.a = random_vector(size_t(s.rows) * s.cols, seed, s.scale);
  for (float& v : r.a) v = round_f16(v);
  const size_t nb = s.op == EwOp::bias_add ? s.cols : r.a.size();
  std::vector<float> bv = random_vector(nb, seed + 1, 1.0f);
  for (float& v : bv) v = round_f16(v);

  Builder b;
  emit_elementwise(b, cfg, a);
  b.op("halt");
  isa::Program prog = b.finish();
  sim::Platform& p = sim::Platform::get();
  p.configure(cfg, false);
  auto image = [&](const std::vector<float>* v) {
    std::vector<uint16_t> img(size_t(s.rows) * w, kSentinel);
    if (v)
      for (uint32_t i = 0; i < s.rows; ++i)
        for (uint32_t j = 0; j < s.cols; ++j) img[size_t(i) * w + j] = f32_to_f16((*v)[size_t(i) * s.cols + j]);
    return img;
  };
  std::vector<uint16_t> ia = image(&r.a);
  p.ocm().write(a.a_ocm, ia.data(), ia.size() * 2);
  if (s.op == EwOp::bias_add) {
    write_ocm_f16(a.b_ocm, bv);
  } else {
    std::vector<uint16_t> ib = image(&bv);
    p.ocm().write(a.b_ocm, ib.data(), ib.size() * 2);
  }
  if (!s.in_place) {
    std::vector<uint16_t> io = image(nullptr);
    p.ocm().write(a.out_ocm, io.data(), io.size() * 2);
  }
  r.cycles = p.run(prog).total[sim::Stat::cycles];
  std::vector<uint16_t> out(size_t(s.rows) * w);
  p.ocm().read(a.out_ocm, out.data(), out.size() * 2);
  r.out.resize(r.a.size());
  for (uint32_t i = 0; i < s.rows; ++i) {
    for (uint32_t j = 0; j < s.cols; ++j) r.out[size_t(i) * s.cols + j] = f16_to_f32(out[size_t(i) * w + j]);
    for (uint32_t j = s.cols; j < w; ++j)
      if (out[size_t(i) * w + j] != kSentinel) r.padding_intact = false;
  }
  r.ref = reference(s.op, r.a, bv, s.cols);
  p.configure(cfg, true);
  r.cycles_timing = p.run(prog).total[sim::Stat::cycles];
  return r;
}

// Gate: cosine >= 0.9999 and, per element, |out - ref| <= 2^-10 |ref| + 2^-24: one fp16
// rounding of the output (2^-11 relative) plus as much again for fp32 differences
// (vrcp then multiply for silu's division) moving a value across a rounding boundary.
size_t violations(const std::vector<float>& y, const std::vector<float>& ref) {
  size_t n = 0;
  for (size_t i = 0; i < y.size(); ++i)
    if (std::fabs(double(y[i]) - ref[i]) > std::fabs(double(ref[i])) * 0x1p-10 + 0x1p-24) ++n;
  return n;
}
bool passes(const std::vector<float>& y, const std::vector<float>& ref) {
  return compare(y, ref).cosine >= 0.9999 && violations(y, ref) == 0;
}

const char* name(EwOp op) {
  switch (op) {
    case EwOp::add: return "add";
    case EwOp::bias_add: return "bias_add";
    case EwOp::silu_mul: return "silu_mul";
    case EwOp::gelu_tanh: return "gelu_tanh";
    case EwOp::gelu_erf: return "gelu_erf";
  }
  return "?";
}

class EwShapes : public ::testing::TestWithParam<EwShape> {};

TEST_P(EwShapes, MatchesChainOp) {
  const EwShape s = GetParam();
  EwRun r = run_ew(s, 21 + s.rows * 7 + s.cols);
  Compare c = compare(r.out, r.ref);
  EXPECT_GE(c.cosine, 0.9999);
  EXPECT_EQ(violations(r.out, r.ref), 0u) << "max |out - ref| " << c.max_abs;
  EXPECT_TRUE(r.padding_intact) << "the kernel wrote past a row end";
  EXPECT_EQ(r.cycles, r.cycles_timing) << "timing-only run differs from the functional run";
  std::printf("%s %s rows %u cols %u (%s): cosine %.7f max_abs %.3g cycles %llu, OCM floor %.0f\n", s.preset,
              name(s.op), s.rows, s.cols, r.used == EwMapping::spread ? "spread" : "rows", c.cosine, c.max_abs,
              (unsigned long long)r.cycles, r.floor);
}

using M = EwMapping;
INSTANTIATE_TEST_SUITE_P(
    Ops, EwShapes,
    ::testing::Values(EwShape{"mini", EwOp::add, 1, 2048, 0, M::automatic, true},
                      EwShape{"mini", EwOp::add, 37, 100, 6, M::rows, false},
                      EwShape{"mini", EwOp::add, 3, 1000, 3, M::spread, false},
                      EwShape{"qc-u", EwOp::add, 4, 2048, 0, M::automatic, true},
                      EwShape{"mini", EwOp::bias_add, 40, 96, 0, M::rows, true},
                      EwShape{"mini", EwOp::bias_add, 2, 1000, 2, M::spread, false},
                      EwShape{"qc-u", EwOp::bias_add, 33, 1024, 0, M::automatic, true},
                      EwShape{"mini", EwOp::silu_mul, 1, 6144, 0, M::automatic, true},
                      EwShape{"mini", EwOp::silu_mul, 5, 100, 4, M::rows, false, 4.0f},
                      EwShape{"mini", EwOp::silu_mul, 3, 333, 1, M::spread, false, 4.0f},
                      EwShape{"qc-u", EwOp::silu_mul, 2, 6144, 0, M::automatic, false},
                      EwShape{"mini", EwOp::gelu_tanh, 7, 4096, 0, M::automatic, true},
                      EwShape{"mini", EwOp::gelu_tanh, 20, 72, 9, M::rows, true},
                      EwShape{"qc-u", EwOp::gelu_tanh, 4, 4096, 0, M::automatic, false},
                      EwShape{"mini", EwOp::gelu_erf, 3, 4096, 0, M::automatic, true},
                      EwShape{"mini", EwOp::gelu_erf, 17, 50, 3, M::rows, false},
                      EwShape{"qc-u", EwOp::gelu_erf, 16, 4096, 0, M::automatic, true}));

TEST(Elementwise, NegativeControlCorruptedOutputFailsTheGate) {
  EwRun r = run_ew(EwShape{"mini", EwOp::silu_mul, 5, 100, 4, M::rows, false, 4.0f}, 9);
  ASSERT_TRUE(passes(r.out, r.ref));
  std::vector<float> bad = r.out;
  bad[13] = bad[13] * 1.01f + 1e-3f;
  EXPECT_FALSE(passes(bad, r.ref));
}

// docs/testing.md model-test item 3: swapping the tanh GELU for the erf GELU is invisible end to end,
// so each kernel must pass against its own formula and fail against the other one.
TEST(Elementwise, TanhAndErfGeluAreToldApart) {
  for (EwOp op : {EwOp::gelu_tanh, EwOp::gelu_erf}) {
    EwRun r = run_ew(EwShape{"mini", op, 4, 512, 0, M::automatic, true, 2.0f}, 5);
    std::vector<float> other = reference(op == EwOp::gelu_tanh ? EwOp::gelu_erf : EwOp::gelu_tanh, r.a, {}, 512);
    EXPECT_TRUE(passes(r.out, r.ref)) << name(op);
    size_t v = violations(r.out, other);
    EXPECT_GT(v, r.out.size() / 20) << name(op) << " also matches the other GELU";
    std::printf("%s against the other GELU: %zu of %zu elements outside the bound\n", name(op), v, r.out.size());
  }
}

// Model-size shapes on qc-u, timing only, against the OCM-port floor.
TEST(Elementwise, ModelShapesNearTheOcmFloor) {
  struct Case {
    EwOp op;
    uint32_t rows, cols;
  };
  sim::Config cfg = sim::Config::make("qc-u", {});
  for (Case c : {Case{EwOp::add, 1, 2048}, Case{EwOp::silu_mul, 1, 6144}, Case{EwOp::add, 256, 2048},
                 Case{EwOp::silu_mul, 128, 6144}, Case{EwOp::gelu_tanh, 256, 4096}, Case{EwOp::gelu_erf, 64, 4096},
                 Case{EwOp::bias_add, 256, 1024}}) {
    EwArgs a;
    a.op = c.op;
    a.rows = c.rows;
    a.cols = c.cols;
    const uint32_t bytes = up64(c.rows * c.cols * 2);
    a.a_ocm = 0;
    a.b_ocm = bytes;
    a.out_ocm = 0;  // in place (256 x 6144 x 3 tensors would not fit 4 MiB of OCM)
    Builder b;
    emit_elementwise(b, cfg, a);
    b.op("halt");
    sim::Platform& p = sim::Platform::get();
    p.configure(cfg, true);
    uint64_t cycles = p.run(b.finish()).total[sim::Stat::cycles];
    double floor = floor_cycles(cfg, cost_elementwise(cfg, a));
    std::printf("qc-u %s rows %u cols %u (%s): %llu cycles, OCM floor %.0f, ratio %.2f\n", name(c.op), c.rows, c.cols,
                ew_pick_mapping(cfg, a) == EwMapping::spread ? "spread" : "rows", (unsigned long long)cycles, floor,
                double(cycles) / floor);
    if (c.rows >= 64) {
      EXPECT_LE(double(cycles), 1.6 * floor);
    }
  }
}

}  // namespace
}  // namespace gpnpu::kernels::test
