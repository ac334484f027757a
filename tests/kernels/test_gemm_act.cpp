// The GEMM's epilogue activations (GemmArgs::act): the same fp16 bits as the GEMM rounded
// to fp16 followed by the element-wise kernel (what the compiler emitted before), on split 1
// and split 2, a narrow last tile, a short last row group and an f16 bias; fewer cycles than
// the two calls. Negative controls: the SiLU pairs on a weight whose gate and up rows are not
// interleaved, and a GELU of the other kind, must change the output.
#include <cstring>

#include "isa/error.h"

#include "kernel_harness.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "model/checkpoint/quant.h"
#include "sim/machine/memory_map.h"
#include "sim/run.h"

namespace gpnpu::kernels::test {
namespace {

uint32_t align64(uint64_t v) { return uint32_t((v + 63) / 64 * 64); }

struct ActShape {
  const char* preset;
  uint32_t m, n, k;  // n: Y's columns (silu: the weight has 2n rows)
  GemmAct act;
  bool bias = false;
  std::vector<std::string> sets = {};  // machine keys over the preset
  bool tight_lrm = false;  // lrm_end right past the two buffers: the late gathers' rows wait in registers
};
sim::Config config(const ActShape& s) { return sim::Config::make(s.preset, s.sets); }

struct ActRun {
  std::vector<uint16_t> y;  // fp16 bits, [m][n]
  uint64_t cycles = 0;
};

// The weight of the fused call: [2n][k] with gate j at row 2j and up j at row 2j + 1
// (interleave) or gate rows then up rows (the two calls' layout); otherwise [n][k].
std::vector<float> weight(const ActShape& s, bool interleave) {
  const bool silu = s.act == GemmAct::silu_pairs;
  const uint32_t rows = silu ? 2 * s.n : s.n;
  std::vector<float> w = random_vector(size_t(rows) * s.k, 11, 0.05f), out = w;
  if (silu && interleave)
    for (uint32_t j = 0; j < s.n; ++j)
      for (uint32_t h : {0u, 1u})
        std::memcpy(&out[(size_t(2 * j + h)) * s.k], &w[(size_t(h * s.n + j)) * s.k], s.k * 4);
  return out;
}

// fused: one GEMM with s.act on the weight laid out as `interleave` says; else the GEMM
// (gate|up columns for SiLU) and emit_elementwise after it. `act` overrides s.act.
ActRun run(const ActShape& s, bool fused, bool interleave, GemmAct act) {
  const sim::Config cfg = config(s);
  const bool silu = s.act == GemmAct::silu_pairs;
  const uint32_t wn = silu ? 2 * s.n : s.n;  // the GEMM's N
  GemmArgs a;
  a.m = s.m;
  a.n = wn;
  a.k = s.k;
  a.x_ocm = 0;
  a.x_stride = 2 * s.k;
  a.y_ocm = align64(uint64_t(s.m) * a.x_stride);
  a.y_stride = 2 * wn;  // (fused SiLU: n columns written, row stride kept)
  a.bias = s.bias ? GemmBias::f16 : GemmBias::none;
  a.bias_ocm = align64(a.y_ocm + uint64_t(s.m) * a.y_stride);
  a.scratch_ocm = align64(a.bias_ocm + uint64_t(wn) * 2);
  a.scratch_bytes = gemm_scratch_bytes(cfg, wn, s.k);
  const uint32_t out_ocm = align64(a.scratch_ocm + a.scratch_bytes);
  a.w_ddr = sim::ddr_addr(0x1000);
  a.act = fused ? act : GemmAct::none;
  if (s.tight_lrm) a.lrm_end = 2 * gemm_lrm_buffer(cfg, wn, s.k) + 64;
  Builder b;
  emit_gemm_w4(b, cfg, a);
  if (!fused) {
    EwArgs e;
    e.rows = s.m;
    e.cols = s.n;
    e.a_ocm = a.y_ocm;
    e.a_stride = a.y_stride;
    e.out_ocm = out_ocm;
    e.out_stride = 2 * s.n;
    if (silu) {
      e.op = EwOp::silu_mul;
      e.b_ocm = a.y_ocm + 2 * s.n;
      e.b_stride = a.y_stride;
    } else {
      e.op = act == GemmAct::gelu_erf ? EwOp::gelu_erf : EwOp::gelu_tanh;
    }
    emit_elementwise(b, cfg, e);
  }
  b.op("halt");
  isa::Program prog = b.finish();

  sim::Platform& p = sim::Platform::get();
  p.configure(cfg, false);
  const std::vector<float> w = weight(s, interleave);
  const model::QuantTensor q = model::quantise(w.data(), wn, s.k);
  const std::vector<uint8_t> packed = pack_gemm_weight(q.view(), cfg);
  p.ddr().write(0x1000, packed.data(), packed.size());
  std::vector<float> x = random_vector(size_t(s.m) * s.k, 12);
  for (float& v : x) v = round_f16(v);
  write_ocm_f16(a.x_ocm, x);
  if (s.bias) {
    std::vector<float> bv = random_vector(wn, 13, 0.5f);
    for (float& v : bv) v = round_f16(v);
    write_ocm_f16(a.bias_ocm, bv);
  }
  ActRun r;
  r.cycles = p.run(prog).total[sim::Stat::cycles];
  const uint32_t y = fused ? a.y_ocm : out_ocm, ys = fused ? a.y_stride : 2 * s.n;
  for (uint32_t i = 0; i < s.m; ++i) {
    std::vector<uint16_t> row(s.n);
    p.ocm().read(y + i * ys, row.data(), row.size() * 2);
    r.y.insert(r.y.end(), row.begin(), row.end());
  }
  return r;
}

class GemmActShapes : public ::testing::TestWithParam<ActShape> {};

TEST_P(GemmActShapes, SameBitsAsTheGemmThenTheElementwiseKernel) {
  const ActShape& s = GetParam();
  // (plain: the GEMM alone, for the epilogue's and the element-wise call's own cycles)
  const ActRun two = run(s, false, false, s.act), one = run(s, true, true, s.act),
               plain = run(s, true, false, GemmAct::none);
  ASSERT_EQ(one.y.size(), two.y.size());
  size_t diff = 0;
  for (size_t i = 0; i < one.y.size(); ++i) diff += one.y[i] != two.y[i];
  EXPECT_EQ(diff, 0u) << "of " << one.y.size() << " outputs";
  // Where the epilogue's estimate is below the element-wise call's (KernelCalls::gemm_gelu
  // fuses below half of it), the fused call is the faster.
  const sim::Config cfg = config(s);
  const bool silu = s.act == GemmAct::silu_pairs;
  EwArgs e{.op = silu ? EwOp::silu_mul : s.act == GemmAct::gelu_erf ? EwOp::gelu_erf : EwOp::gelu_tanh,
           .rows = s.m, .cols = s.n, .a_stride = (silu ? 4 : 2) * s.n, .b_stride = (silu ? 4 : 2) * s.n};
  const double fused_est = gemm_act_cycles(cfg, s.m, silu ? 2 * s.n : s.n, s.k, 0, s.act),
               ew_est = ew_estimate_cycles(cfg, e, ew_pick_mapping(cfg, e));
  if (fused_est < ew_est) {
    EXPECT_LT(one.cycles, two.cycles) << "estimates: epilogue " << fused_est << ", element-wise call " << ew_est;
  }
  const GemmPlan pl = plan_gemm(cfg, s.m, silu ? 2 * s.n : s.n, s.k);
  const double groups = double(pl.tiles) * pl.groups;
  std::printf("%s %ux%u m %u n %u k %u act %d split %u: fused %llu cycles, GEMM + element-wise %llu; a tile and row "
              "group: epilogue +%.1f, element-wise call %.1f (estimates %.1f, %.1f)\n",
              s.preset, unsigned(cfg.pe_rows), unsigned(cfg.pe_cols), s.m, s.n, s.k, int(s.act), pl.split,
              (unsigned long long)one.cycles, (unsigned long long)two.cycles,
              (double(one.cycles) - double(plain.cycles)) / groups, (double(two.cycles) - double(plain.cycles)) / groups,
              fused_est / groups, ew_est / groups);
}

// qc-u (1,024 PEs): SiLU pairs over 2 tiles and a narrow third (2 x 1,280 columns), 37
// rows (a short last group); GELU (tanh) with an f16 bias, the tower's fc1 shape in part;
// GELU (erf) at split 2 (K = 4,096) with a narrow last tile. mini: small arrays.
INSTANTIATE_TEST_SUITE_P(Shapes, GemmActShapes,
                         ::testing::Values(ActShape{"qc-u", 37, 896, 1024, GemmAct::silu_pairs},
                                           ActShape{"qc-u", 40, 1536, 1024, GemmAct::gelu_tanh, true},
                                           ActShape{"qc-u", 20, 544, 4096, GemmAct::gelu_erf, true},
                                           ActShape{"mini", 19, 96, 256, GemmAct::silu_pairs},
                                           ActShape{"mini", 33, 200, 512, GemmAct::gelu_tanh, true},
                                           // gemm_act_cycles' measurements: 128 rows, tiles as wide as the array
                                           ActShape{"qc-u", 128, 512, 1024, GemmAct::gelu_tanh, false,
                                                    {"pe_rows=16", "pe_cols=16"}},
                                           ActShape{"qc-u", 128, 1024, 1024, GemmAct::gelu_tanh},
                                           ActShape{"qc-u", 128, 512, 1024, GemmAct::gelu_tanh},  // (split 2)
                                           ActShape{"qc-u", 128, 2048, 1024, GemmAct::gelu_tanh, false, {"pe_cols=64"}},
                                           ActShape{"qc-u", 128, 2048, 1024, GemmAct::silu_pairs, false, {"pe_cols=64"}},
                                           // late gathers from registers (no LRM room past the buffers)
                                           ActShape{"qc-u", 128, 2048, 1024, GemmAct::gelu_tanh, false, {"pe_cols=64"}, true},
                                           ActShape{"qc-u", 128, 2048, 1024, GemmAct::silu_pairs, false, {"pe_cols=64"}, true}));

TEST(GemmAct, NegativeControlsChangeTheOutput) {
  const ActShape silu{"mini", 19, 96, 256, GemmAct::silu_pairs};
  const ActRun ref = run(silu, false, false, silu.act);
  // The gate|up layout (not interleaved) under the fused SiLU pairs: gate j x up j no more.
  const ActRun wrong = run(silu, true, false, silu.act);
  size_t diff = 0;
  for (size_t i = 0; i < ref.y.size(); ++i) diff += ref.y[i] != wrong.y[i];
  EXPECT_GT(diff, ref.y.size() / 2);
  // The erf GELU where the tanh one is expected: most outputs the same, some one ulp apart.
  const ActShape gelu{"mini", 33, 200, 512, GemmAct::gelu_tanh, true};
  const ActRun tanh = run(gelu, false, false, GemmAct::gelu_tanh), erf = run(gelu, true, true, GemmAct::gelu_erf);
  diff = 0;
  for (size_t i = 0; i < tanh.y.size(); ++i) diff += tanh.y[i] != erf.y[i];
  EXPECT_GT(diff, 0u);
}

TEST(GemmAct, RefusesPartialSumsAndSplitTwoPairs) {
  const sim::Config cfg = sim::Config::make("qc-u", {});
  GemmArgs a;
  a.m = 16;
  a.n = 1024;
  a.k = 1024;
  a.x_stride = 2048;
  a.y_ocm = 65536;
  a.y_stride = 4096;
  a.scratch_ocm = 1 << 20;
  a.scratch_bytes = gemm_scratch_bytes(cfg, a.n, a.k);
  a.act = GemmAct::gelu_tanh;
  a.y_f32 = true;
  Builder b;
  EXPECT_THROW(emit_gemm_w4(b, cfg, a), gpnpu::Error);
  a.y_f32 = false;
  a.act = GemmAct::silu_pairs;
  a.split = 2;
  a.scratch_bytes = gemm_scratch_bytes(cfg, a.n, a.k, 2);
  EXPECT_THROW(emit_gemm_w4(b, cfg, a), gpnpu::Error);
  // The up output comes from the gate PE's east neighbour: on an odd pe_cols a pair would cross
  // rows (53x59: the tiny model's down read junk from the gate|up call's output).
  const sim::Config odd = sim::Config::make("qc-u", {"pe_cols=33"});
  a.split = 1;
  a.scratch_bytes = gemm_scratch_bytes(odd, a.n, a.k, 1);
  try {
    emit_gemm_w4(b, odd, a);
    ADD_FAILURE() << "silu_pairs on 33 columns accepted";
  } catch (const gpnpu::Error& e) {
    EXPECT_NE(std::string(e.what()).find("needs an even pe_cols (got 33"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace gpnpu::kernels::test
