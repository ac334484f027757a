// W4A16 GEMM: numerics against the chain's linear op on the dequantised weights, and
// cycles against max(MAC floor, DDR floor) on qc-u.
//
// The kernel's rounding points: the dequantised weight is rounded to fp16 (vdq4.f16)
// before the multiply, and Y is rounded once to fp16. The reference is therefore
// ops::linear on round_f16(dequantise(W)) (bias added in fp32), rounded to fp16; the
// only remaining differences are the fp32 summation orders (lane tree, bias in lane 0,
// split halves), so Y may differ by one fp16 ulp: |Y - ref| <= 2^-10 max|ref| + 1e-6.
// Against plain dequantised (fp32) weights the fp16 weight rounding adds at most
// 2^-11 relative per weight; that comparison is reported and gated by cosine.
#include "kernels/gemm.h"

#include <cstdio>
#include <optional>

#include "isa/error.h"
#include "kernel_harness.h"
#include "model/reference/ops.h"
#include "model/checkpoint/quant.h"
#include "sim/machine/memory_map.h"
#include "sim/run.h"

namespace gpnpu::kernels::test {
namespace {

struct GemmRun {
  std::vector<float> y, ref, ref_f32w;
  sim::Stats stats;
  KernelCost cost;
  size_t insns = 0;  // static program size
};

uint32_t align64(uint64_t v) { return uint32_t((v + 63) / 64 * 64); }

// delay > 0: a busy loop of `delay` iterations (a stand-in for the non-DMA kernels the
// compiler places between a prefetch and its GEMM) runs before the GEMM; with prefetch,
// emit_gemm_prefetch is emitted before that loop and the GEMM runs with prefetched = true.
// machine: the array the program runs on when cfg is the GEMM's view of it (the first
// cfg.npe() PEs; GemmArgs::sub_array = sub_array, machine_pes its PEs unless machine_pes_unset),
// else cfg. x_last: X at the top of OCM (its last row ending xpad bytes below the OCM's end),
// Y, the bias and the scratch from 0.
GemmRun run_gemm(const sim::Config& cfg, uint32_t m, uint32_t n, uint32_t k, GemmBias bias, uint32_t seed,
                 bool timing_only, uint32_t split = 0, bool prefetch = false, uint32_t delay = 0,
                 bool twice = false, const sim::Config* machine = nullptr, bool sub_array = false,
                 bool x_last = false, bool machine_pes_unset = false, uint32_t xpad = 64) {
  GemmRun r;
  GemmArgs a;
  a.sub_array = sub_array;
  a.machine_pes = machine && !machine_pes_unset ? machine->npe() : 0;
  a.m = m;
  a.n = n;
  a.k = k;
  a.split = split;
  a.x_stride = 2 * k;
  a.x_ocm = x_last ? uint32_t(cfg.ocm_bytes - uint64_t(m) * a.x_stride - xpad) : 0;
  a.y_ocm = x_last ? 0 : align64(uint64_t(m) * a.x_stride);
  a.y_stride = 2 * n;
  a.bias = bias;
  a.bias_ocm = align64(a.y_ocm + uint64_t(m) * a.y_stride);
  a.scratch_ocm = align64(a.bias_ocm + uint64_t(n) * 4 + 4);
  a.scratch_bytes = gemm_scratch_bytes(cfg, n, k, split);
  a.w_ddr = sim::ddr_addr(0x1000);
  a.smem = 0;
  Builder b;
  // twice: the same GEMM runs first (with prefetch: naming the second as GemmArgs::next,
  // which then starts in that call's last tile), so the result is checked after the second.
  if (twice) {
    GemmArgs first = a;
    if (prefetch) first.next = &a;
    emit_gemm_w4(b, cfg, first);
  } else if (prefetch) {
    emit_gemm_prefetch(b, cfg, a);
  }
  if (delay) {
    b.li(X{5}, delay);
    b.loop(X{5}, [&] { b.op("addi", {X{6}, X{6}, 1}); });
  }
  a.prefetched = prefetch;
  emit_gemm_w4(b, cfg, a);
  b.op("halt");
  isa::Program prog = b.finish();
  r.insns = prog.words.size();
  r.cost = cost_gemm(cfg, a);

  sim::Platform& p = sim::Platform::get();
  p.configure(machine ? *machine : cfg, timing_only);
  model::QuantTensor q;
  std::vector<float> x, bv;
  if (!timing_only) {
    std::vector<float> w = random_vector(size_t(n) * k, seed, 0.02f);
    x = random_vector(size_t(m) * k, seed + 1);
    for (float& v : x) v = round_f16(v);  // X lives in OCM as fp16
    q = model::quantise(w.data(), n, k);
    std::vector<uint8_t> packed = pack_gemm_weight(q.view(), cfg, split);
    EXPECT_EQ(packed.size(), r.cost.ddr_bytes);
    p.ddr().write(0x1000, packed.data(), packed.size());
    write_ocm_f16(a.x_ocm, x);
    if (bias != GemmBias::none) {
      bv = random_vector(n, seed + 2, 0.5f);
      if (bias == GemmBias::f16) {
        for (float& v : bv) v = round_f16(v);
        write_ocm_f16(a.bias_ocm, bv);
      } else {
        p.ocm().write(a.bias_ocm, bv.data(), bv.size() * 4);
      }
    }
  }
  r.stats = p.run(prog);
  if (timing_only) return r;
  r.y.resize(size_t(m) * n);
  for (uint32_t i = 0; i < m; ++i) {
    std::vector<float> row = read_ocm_f16(a.y_ocm + i * a.y_stride, n);
    std::copy(row.begin(), row.end(), r.y.begin() + size_t(i) * n);
  }
  // The chain's op on the very codes the device reads, dequantised (and rounded to
  // fp16 as vdq4.f16 does for the kernel's reference).
  std::vector<float> wd = model::dequantise(q), wh = wd;
  model::ops::round_f16_inplace(wh);
  model::ops::Matrix mh = model::ops::Matrix::dense("w_f16", n, k, wh.data());
  model::ops::Matrix mf = model::ops::Matrix::dense("w", n, k, wd.data());
  r.ref.assign(size_t(m) * n, 0.0f);
  r.ref_f32w.assign(size_t(m) * n, 0.0f);
  model::ops::linear(x, mh, bv, r.ref);
  model::ops::linear(x, mf, bv, r.ref_f32w);
  model::ops::round_f16_inplace(r.ref);
  model::ops::round_f16_inplace(r.ref_f32w);
  return r;
}

struct Shape {
  const char* preset;
  uint32_t m, n, k;
  GemmBias bias;
  uint32_t split;
};

class GemmShapes : public ::testing::TestWithParam<Shape> {};

TEST_P(GemmShapes, MatchesChainLinear) {
  Shape s = GetParam();
  sim::Config cfg = sim::Config::make(s.preset, {});
  GemmRun r = run_gemm(cfg, s.m, s.n, s.k, s.bias, 11, false, s.split);
  Compare c = compare(r.y, r.ref);
  Compare c32 = compare(r.y, r.ref_f32w);
  const double bound = c.max_ref * std::ldexp(1.0, -10) + 1e-6;  // one fp16 ulp
  EXPECT_GE(c.cosine, 0.9999) << s.m << "x" << s.n << "x" << s.k;
  EXPECT_LE(c.max_abs, bound) << "max |y - ref| = " << c.max_abs << " (max |ref| " << c.max_ref << ")";
  EXPECT_GE(c32.cosine, 0.9999);
  EXPECT_EQ(r.stats.total[sim::Stat::ddr_bytes_read], r.cost.ddr_bytes);
  std::printf("gemm %s M=%u N=%u K=%u: cosine %.7f max_abs %.3g (bound %.3g, max|ref| %.3g); vs fp32 weights "
              "cosine %.7f max_abs %.3g; %llu cycles\n",
              s.preset, s.m, s.n, s.k, c.cosine, c.max_abs, bound, c.max_ref, c32.cosine, c32.max_abs,
              (unsigned long long)r.stats.total[sim::Stat::cycles]);
}

// Rows not a multiple of the row group (16) or of 4, columns not a multiple of the
// tile, K not a multiple of 1024; both K splits; all bias kinds.
INSTANTIATE_TEST_SUITE_P(
    Shapes, GemmShapes,
    ::testing::Values(Shape{"mini", 5, 37, 384, GemmBias::none, 0}, Shape{"mini", 35, 50, 256, GemmBias::f32, 0},
                      Shape{"mini", 16, 16, 128, GemmBias::f16, 0}, Shape{"mini", 19, 23, 768, GemmBias::f16, 2},
                      Shape{"mini", 9, 20, 4096, GemmBias::f32, 0}, Shape{"qc-u", 20, 1100, 384, GemmBias::f32, 0},
                      Shape{"qc-u", 18, 600, 256, GemmBias::none, 2},
                      // 4 row groups of 16: the next tile's codes are scattered inside the MAC loops
                      // (routine parts a, seg, b), a narrow last tile, a bias.
                      Shape{"qc-u", 64, 2100, 1024, GemmBias::f16, 0},
                      // One narrow tile at split 2 on at most half the PEs: two row sets (a group of
                      // 32 rows and one of 8; one group of 16; an odd last group of 13 rows).
                      Shape{"qc-u", 40, 256, 1024, GemmBias::f32, 0}, Shape{"qc-u", 16, 200, 1024, GemmBias::none, 0},
                      Shape{"qc-u", 77, 130, 512, GemmBias::f16, 0},
                      Shape{"qc-u", 17, 256, 512, GemmBias::f16, 0}, Shape{"qc-u", 20, 256, 512, GemmBias::f16, 0},
                      Shape{"qc-u", 24, 256, 512, GemmBias::f16, 0}, Shape{"qc-u", 31, 256, 512, GemmBias::f16, 0},
                      Shape{"qc-u", 33, 256, 512, GemmBias::f16, 0}, Shape{"qc-u", 50, 256, 512, GemmBias::f16, 0},
                      Shape{"qc-u", 24, 64, 128, GemmBias::f16, 0}, Shape{"qc-u", 64, 64, 256, GemmBias::f32, 0},
                      Shape{"qc-u", 64, 128, 512, GemmBias::f16, 0}, Shape{"qc-u", 256, 128, 256, GemmBias::f16, 0}));

// Two row sets (a one-tile call at split 2 on at most half the PEs, 16 rows or more): timing-
// only gives the functional cycles, and on 64x64 the 2B tower's proj (N = 1,024 of a 2,048-column
// tile) takes far fewer cycles than a call of the whole tile (N = 2,048), which runs the same
// MAC steps a row that one row set would; fewer than 16 rows run one set.
TEST(Gemm, TwoRowSetsTakeTheIdlePes) {
  const sim::Config qcu = sim::Config::make("qc-u", {});
  EXPECT_EQ(plan_gemm(qcu, 40, 256, 1024).sets, 2u);
  EXPECT_EQ(plan_gemm(qcu, 15, 256, 1024).sets, 1u);
  EXPECT_EQ(plan_gemm(qcu, 15, 256, 1024).copies, 2u);
  EXPECT_EQ(plan_gemm(qcu, 40, 300, 1024).sets, 1u);  // 600 of 1,024 PEs
  EXPECT_EQ(plan_gemm(qcu, 40, 600, 1024).sets, 1u);  // two tiles
  GemmRun f = run_gemm(qcu, 40, 256, 1024, GemmBias::f32, 3, false);
  GemmRun t = run_gemm(qcu, 40, 256, 1024, GemmBias::f32, 3, true);
  EXPECT_EQ(f.stats.total[sim::Stat::cycles], t.stats.total[sim::Stat::cycles]);
  const sim::Config big = sim::Config::make("qc-u", {"pe_rows=64", "pe_cols=64"});
  ASSERT_EQ(plan_gemm(big, 256, 1024, 1024).sets, 2u);
  ASSERT_EQ(plan_gemm(big, 256, 2048, 1024).sets, 1u);
  const uint64_t twin = run_gemm(big, 256, 1024, 1024, GemmBias::f32, 3, true).stats.total[sim::Stat::cycles];
  const uint64_t whole = run_gemm(big, 256, 2048, 1024, GemmBias::f32, 3, true).stats.total[sim::Stat::cycles];
  std::printf("64x64, 256 rows, K = 1,024: N = 1,024 in two row sets %llu cycles, N = 2,048 %llu\n",
              (unsigned long long)twin, (unsigned long long)whole);
  EXPECT_LT(double(twin), 0.75 * double(whole));
  // The upper set starts at PE npe / 2, which must be even to start a split-2 pair: on 39x38 PEs
  // (H = 741) the call runs one set, and matches the chain (two sets there gave junk sums).
  const sim::Config odd = sim::Config::make("qc-u", {"pe_rows=39", "pe_cols=38"});
  EXPECT_EQ(plan_gemm(odd, 40, 128, 1536).copies, 1u);
  EXPECT_EQ(plan_gemm(odd, 40, 128, 1536).split, 2u);
  const GemmRun o = run_gemm(odd, 40, 128, 1536, GemmBias::f16, 5, false);
  const Compare oc = compare(o.y, o.ref);
  EXPECT_LE(oc.max_abs, oc.max_ref * std::ldexp(1.0, -10) + 1e-6);
}

// Units spread over the row groups' loops (more units a group than DMA channels, the DDR
// not much faster than the loop): split 2 taking them through the port between plain
// iterations (routine parts head, mid, b), and split 1 scattering them in loop segments
// between plain iterations (a, seg, mid, b), with a narrow last tile and a bias. Each
// matches the chain within one fp16 ulp, and timing-only gives the functional cycles.
// (Measured: 267,181 and 250,480 cycles; all taken at the groups' starts, with `gap` forced to
// 0 in group_with_fills, 293,251 and 256,282.)
TEST(Gemm, UnitsSpreadOverTheLoopMatchTheChain) {
  struct Case {
    std::vector<std::string> sets;
    uint32_t m, n, k;
    GemmBias bias;
    uint32_t split;
  };
  for (const Case& s : {Case{{"ddr_gbps=64"}, 64, 2048, 6144, GemmBias::none, 2},
                        Case{{"ddr_gbps=64", "lrm_bytes=8KiB"}, 64, 2100, 4096, GemmBias::f16, 1}}) {
    const sim::Config cfg = sim::Config::make("qc-u", s.sets);
    const GemmRun r = run_gemm(cfg, s.m, s.n, s.k, s.bias, 17, false, s.split);
    const GemmRun t = run_gemm(cfg, s.m, s.n, s.k, s.bias, 17, true, s.split);
    const Compare c = compare(r.y, r.ref);
    EXPECT_GE(c.cosine, 0.9999) << s.m << "x" << s.n << "x" << s.k;
    EXPECT_LE(c.max_abs, c.max_ref * std::ldexp(1.0, -10) + 1e-6) << s.m << "x" << s.n << "x" << s.k;
    EXPECT_EQ(r.stats.total[sim::Stat::cycles], t.stats.total[sim::Stat::cycles]);
    std::printf("gemm M=%u N=%u K=%u split %u at 64 GB/s: cosine %.7f max_abs %.3g; %llu cycles\n", s.m, s.n, s.k,
                s.split, c.cosine, c.max_abs,
                (unsigned long long)r.stats.total[sim::Stat::cycles]);
  }
}

TEST(Gemm, NegativeControlCorruptedOutputFailsTheGate) {
  sim::Config cfg = sim::Config::make("mini", {});
  GemmRun r = run_gemm(cfg, 35, 50, 256, GemmBias::f32, 11, false);
  Compare ok = compare(r.y, r.ref);
  ASSERT_LE(ok.max_abs, ok.max_ref * std::ldexp(1.0, -10) + 1e-6);
  // A wrong kernel: one column of one row group lost, one sign flipped.
  for (uint32_t i = 16; i < 32; ++i) r.y[size_t(i) * 50 + 7] = 0.0f;
  r.y[3] = -r.y[3];
  Compare c = compare(r.y, r.ref);
  EXPECT_LT(c.cosine, 0.9999);
  EXPECT_GT(c.max_abs, c.max_ref * std::ldexp(1.0, -10) + 1e-6);
}

TEST(Gemm, TimingOnlyGivesTheFunctionalCycles) {
  sim::Config cfg = sim::Config::make("mini", {});
  GemmRun f = run_gemm(cfg, 19, 23, 768, GemmBias::f16, 5, false, 2);
  GemmRun t = run_gemm(cfg, 19, 23, 768, GemmBias::f16, 5, true, 2);
  EXPECT_EQ(f.stats.total[sim::Stat::cycles], t.stats.total[sim::Stat::cycles]);
  EXPECT_GT(t.stats.total[sim::Stat::cycles], 0u);
}

// Prefetched tile 0 (emit_gemm_prefetch, a stand-in for other kernels, then the GEMM):
// the same numerics, timing-only == functional, and fewer cycles than without it.
TEST(Gemm, PrefetchedMatchesAndSavesTheStart) {
  for (Shape s : {Shape{"mini", 19, 23, 768, GemmBias::f16, 2}, Shape{"mini", 35, 50, 256, GemmBias::f32, 0},
                  Shape{"qc-u", 20, 1100, 384, GemmBias::f32, 0}, Shape{"qc-u", 40, 256, 1024, GemmBias::f16, 0}}) {
    sim::Config cfg = sim::Config::make(s.preset, {});
    const uint32_t delay = 3000;
    GemmRun f = run_gemm(cfg, s.m, s.n, s.k, s.bias, 7, false, s.split, true, delay);
    Compare c = compare(f.y, f.ref);
    EXPECT_GE(c.cosine, 0.9999) << s.m << "x" << s.n << "x" << s.k;
    EXPECT_LE(c.max_abs, c.max_ref * std::ldexp(1.0, -10) + 1e-6) << s.m << "x" << s.n << "x" << s.k;
    GemmRun t = run_gemm(cfg, s.m, s.n, s.k, s.bias, 7, true, s.split, true, delay);
    EXPECT_EQ(f.stats.total[sim::Stat::cycles], t.stats.total[sim::Stat::cycles]);
    GemmRun plain = run_gemm(cfg, s.m, s.n, s.k, s.bias, 7, true, s.split, false, delay);
    std::printf("gemm %s M=%u N=%u K=%u after a %u-iteration loop: %llu cycles prefetched, %llu not\n", s.preset,
                s.m, s.n, s.k, delay, (unsigned long long)t.stats.total[sim::Stat::cycles],
                (unsigned long long)plain.stats.total[sim::Stat::cycles]);
    EXPECT_LT(t.stats.total[sim::Stat::cycles], plain.stats.total[sim::Stat::cycles]);
  }
}

// GemmArgs::next: a call starts the next call's prefetch in its last tile; the second call
// (prefetched) gives the same numerics and the pair takes fewer cycles.
TEST(Gemm, NextCallPrefetchedInTheLastTile) {
  for (Shape s : {Shape{"mini", 19, 23, 768, GemmBias::f16, 2}, Shape{"mini", 35, 50, 256, GemmBias::f32, 0},
                  Shape{"qc-u", 20, 1100, 384, GemmBias::f32, 0}, Shape{"qc-u", 48, 2048, 1024, GemmBias::none, 0},
                  Shape{"qc-u", 40, 256, 1024, GemmBias::f16, 0}}) {
    sim::Config cfg = sim::Config::make(s.preset, {});
    GemmRun f = run_gemm(cfg, s.m, s.n, s.k, s.bias, 9, false, s.split, true, 500, true);
    Compare c = compare(f.y, f.ref);
    EXPECT_GE(c.cosine, 0.9999) << s.m << "x" << s.n << "x" << s.k;
    EXPECT_LE(c.max_abs, c.max_ref * std::ldexp(1.0, -10) + 1e-6) << s.m << "x" << s.n << "x" << s.k;
    GemmRun t = run_gemm(cfg, s.m, s.n, s.k, s.bias, 9, true, s.split, true, 500, true);
    EXPECT_EQ(f.stats.total[sim::Stat::cycles], t.stats.total[sim::Stat::cycles]);
    GemmRun plain = run_gemm(cfg, s.m, s.n, s.k, s.bias, 9, true, s.split, false, 500, true);
    std::printf("gemm %s M=%u N=%u K=%u twice: %llu cycles with next, %llu without\n", s.preset, s.m, s.n, s.k,
                (unsigned long long)t.stats.total[sim::Stat::cycles],
                (unsigned long long)plain.stats.total[sim::Stat::cycles]);
    EXPECT_LT(t.stats.total[sim::Stat::cycles], plain.stats.total[sim::Stat::cycles]);
  }
}

// One LRM buffer (GemmPlan::single): where two of a weight's tile buffers do not fit lrm_bytes but
// one does (mini at 448 bytes, K = 768: two take 512 at split 2), a call of one tile, full or
// narrow, matches the chain, alone, prefetched and as the second of two calls (each loading its
// tile before its row groups; the hand-off gives the next call's one buffer its place twice);
// a call of more tiles is refused, saying to run a tile a call.
TEST(Gemm, OneLrmBufferATileACall) {
  sim::Config cfg = sim::Config::make("mini", {});
  cfg.lrm_bytes = 448;
  const GemmPlan pl = plan_gemm(cfg, 24, 8, 768);
  ASSERT_TRUE(pl.single);
  EXPECT_EQ(pl.split, 2u);
  EXPECT_EQ(pl.cols, 8u);
  EXPECT_FALSE(plan_gemm(sim::Config::make("mini", {}), 24, 8, 768).single) << "the default LRM holds two";
  EXPECT_EQ(gemm_lrm_need(cfg, 768), 288u) << "one buffer: 32 B of meta, 192 of codes, the 64-byte pad";
  for (uint32_t n : {8u, 5u})
    for (int mode = 0; mode < 3; ++mode) {  // alone, prefetched, the second of two
      GemmRun f = run_gemm(cfg, 24, n, 768, GemmBias::f16, 13, false, 0, mode > 0, mode == 1 ? 400 : 0, mode == 2);
      Compare c = compare(f.y, f.ref);
      EXPECT_GE(c.cosine, 0.9999) << "N = " << n << ", mode " << mode;
      EXPECT_LE(c.max_abs, c.max_ref * std::ldexp(1.0, -10) + 1e-6) << "N = " << n << ", mode " << mode;
      GemmRun t = run_gemm(cfg, 24, n, 768, GemmBias::f16, 13, true, 0, mode > 0, mode == 1 ? 400 : 0, mode == 2);
      EXPECT_EQ(f.stats.total[sim::Stat::cycles], t.stats.total[sim::Stat::cycles]);
    }
  try {
    run_gemm(cfg, 24, 20, 768, GemmBias::none, 13, true);
    ADD_FAILURE() << "a call of three tiles with one LRM buffer ran";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("one is a tile a call, N <= 8 (got N = 20), or raise lrm_bytes to 512"),
              std::string::npos)
        << e.what();
  }
  // The hand-off to a call of one buffer places it once (p = q), above the reserved LRM.
  GemmArgs prev, next;
  prev.m = 24, prev.n = 8, prev.k = 256;
  next.n = 8, next.k = 768;
  ASSERT_TRUE(gemm_handoff(cfg, prev, next, 0));
  EXPECT_EQ(next.lrm_p, next.lrm_q);
}

// Two row sets on a sub-array with X at the top of OCM: the grouped broadcast (obcast.g) that
// gives each set its row gives the machine's PEs past the view (groups of H PEs) rows further on
// still, which from X's last rows would read past the OCM's end (a random point, the tiny model
// on 16 of 45x62's rows: out of range at the patch embedding). There the kernel broadcasts the
// upper and the lower row in turn: the chain's values, timing-only = functional. Negative
// control: without the machine's PE count the kernel keeps the grouped broadcast, and the run
// stops on the OCM access out of range.
TEST(Gemm, TwoRowSetsOnASubArrayReadNoPastTheOcm) {
  const sim::Config machine = sim::Config::make("qc-u", {"pe_rows=64", "pe_cols=64", "ocm_bytes=1MiB"});
  const sim::Config view = sim::Config::make("qc-u", {"pe_rows=16", "pe_cols=64", "ocm_bytes=1MiB"});
  const uint32_t m = 40, n = 128, k = 1536;
  ASSERT_EQ(plan_gemm(view, m, n, k).sets, 2u);
  ASSERT_EQ(plan_gemm(view, m, n, k).split, 2u);
  GemmRun f = run_gemm(view, m, n, k, GemmBias::f16, 5, false, 0, false, 0, false, &machine, true, true);
  const Compare c = compare(f.y, f.ref);
  EXPECT_GE(c.cosine, 0.9999);
  EXPECT_LE(c.max_abs, c.max_ref * std::ldexp(1.0, -10) + 1e-6);
  GemmRun t = run_gemm(view, m, n, k, GemmBias::f16, 5, true, 0, false, 0, false, &machine, true, true);
  EXPECT_EQ(f.stats.total[sim::Stat::cycles], t.stats.total[sim::Stat::cycles]);
  EXPECT_THROW(run_gemm(view, m, n, k, GemmBias::f16, 5, true, 0, false, 0, false, &machine, true, true, true), Error);
}

// A GEMM on the first half of the array's rows (GemmArgs::sub_array, cfg = the view):
// the chain's values at split 1 and 2, with a narrow last tile, chained to a second call;
// the OCM port carries exactly the bytes of the same program on an array of the view's
// size (every scatter held to the view's PEs). Negative control: without sub_array the
// full-tile scatters reach every PE of the machine and move more bytes.
TEST(Gemm, SubArrayMatchesAndScattersOnlyToItsPes) {
  for (Shape s : {Shape{"qc-u", 20, 1100, 384, GemmBias::f32, 1}, Shape{"qc-u", 19, 600, 1024, GemmBias::f16, 2}}) {
    const sim::Config machine = sim::Config::make(s.preset, {});
    const sim::Config view = sim::Config::make(s.preset, {"pe_rows=" + std::to_string(machine.pe_rows / 2)});
    GemmRun f = run_gemm(view, s.m, s.n, s.k, s.bias, 9, false, s.split, true, 500, true, &machine, true);
    Compare c = compare(f.y, f.ref);
    EXPECT_GE(c.cosine, 0.9999) << s.m << "x" << s.n << "x" << s.k;
    EXPECT_LE(c.max_abs, c.max_ref * std::ldexp(1.0, -10) + 1e-6) << s.m << "x" << s.n << "x" << s.k;
    GemmRun t = run_gemm(view, s.m, s.n, s.k, s.bias, 9, true, s.split, true, 500, true, &machine, true);
    EXPECT_EQ(f.stats.total[sim::Stat::cycles], t.stats.total[sim::Stat::cycles]);
    const GemmRun small = run_gemm(view, s.m, s.n, s.k, s.bias, 9, true, s.split, true, 500, true);
    for (sim::Stat st : {sim::Stat::ocm_array_bytes_read, sim::Stat::ocm_array_bytes_written})
      EXPECT_EQ(t.stats.total[st], small.stats.total[st]) << "split " << s.split;
    const GemmRun loose = run_gemm(view, s.m, s.n, s.k, s.bias, 9, true, s.split, true, 500, true, &machine, false);
    EXPECT_GT(loose.stats.total[sim::Stat::ocm_array_bytes_read], small.stats.total[sim::Stat::ocm_array_bytes_read]);
    std::printf("gemm sub-array %ux%ux%u split %u: %llu cycles (the view's own array: %llu)\n", s.m, s.n, s.k, s.split,
                (unsigned long long)t.stats.total[sim::Stat::cycles],
                (unsigned long long)small.stats.total[sim::Stat::cycles]);
  }
}

// A chained call's inputs: random X (fp16 values) into OCM and a random weight, packed, into
// DDR (seeds seed and seed + 10); its output read back beside the chain's (fp16 weights and
// rounding, as ops::linear).
struct CallData {
  std::vector<float> x;
  model::QuantTensor q;
};
CallData load_call(sim::Platform& p, const sim::Config& cfg, const GemmArgs& a, uint32_t seed) {
  CallData d;
  d.x = random_vector(size_t(a.m) * a.k, seed);
  for (float& v : d.x) v = round_f16(v);
  d.q = model::quantise(random_vector(size_t(a.n) * a.k, seed + 10, 0.02f).data(), a.n, a.k);
  const std::vector<uint8_t> packed = pack_gemm_weight(d.q.view(), cfg);
  p.ddr().write(a.w_ddr - sim::ddr_addr(0), packed.data(), packed.size());
  write_ocm_f16(a.x_ocm, d.x);
  return d;
}
void read_call(const GemmArgs& a, const CallData& d, std::vector<float>& y, std::vector<float>& ref) {
  y = read_ocm_f16(a.y_ocm, size_t(a.m) * a.n);
  std::vector<float> wh = model::dequantise(d.q);
  model::ops::round_f16_inplace(wh);
  ref.assign(size_t(a.m) * a.n, 0.0f);
  model::ops::linear(d.x, model::ops::Matrix::dense("w_f16", a.n, a.k, wh.data()), {}, ref);
  model::ops::round_f16_inplace(ref);
}

// gemm_handoff between two calls whose second's tile 0 (1.1 MB, split 2) takes longer to
// stream than the first's last tile computes: the first hands off only part of it
// (GemmArgs::handed_units) and the second scatters the rest inside its first row group's
// MAC loop. Both outputs match the chain and timing-only gives the functional cycles. (The
// cycles are printed beside those of the whole tile handed off: alone, this pair is
// DDR-bound either way; in the 2B image program the partial hand-off saves ~0.2 M cycles.)
struct PairRun {
  std::vector<float> y1, ref1, y2, ref2;
  uint64_t cycles = 0;
  uint32_t handed = 0, units = 0;
};
struct Call { uint32_t m, n, k; };
// handoff false: the first call only starts the second's first units (no gemm_handoff).
PairRun run_pair(bool timing_only, bool partial, Call c1 = {128, 1024, 1024}, Call c2 = {64, 2048, 4096},
                 bool handoff = true, const std::vector<std::string>& sets = {}, bool two = true) {
  const sim::Config cfg = sim::Config::make("qc-u", sets);
  uint32_t at = 0;
  auto take = [&](uint64_t bytes) { const uint32_t r = at; at = align64(at + bytes); return r; };
  GemmArgs a1, a2;
  for (auto [a, c] : {std::pair<GemmArgs*, Call>{&a1, c1}, {&a2, c2}}) {
    a->m = c.m, a->n = c.n, a->k = c.k;
    a->x_ocm = take(uint64_t(c.m) * c.k * 2), a->x_stride = 2 * c.k;
    a->y_ocm = take(uint64_t(c.m) * c.n * 2), a->y_stride = 2 * c.n;
  }
  // (two: on one DMA channel, room for the second buffer)
  const uint32_t scratch =
      std::max(gemm_scratch_bytes(cfg, c1.n, c1.k, 0, two), gemm_scratch_bytes(cfg, c2.n, c2.k, 0, two));
  a1.scratch_ocm = a2.scratch_ocm = take(scratch);
  a1.scratch_bytes = a2.scratch_bytes = scratch;
  const uint64_t w1_bytes = gemm_weight_bytes(cfg, c1.n, c1.k);
  a1.w_ddr = sim::ddr_addr(0x1000);
  a2.w_ddr = sim::ddr_addr(0x1000 + align64(w1_bytes));
  // As the compiler links them: the first call knows the second's weight, not its rows.
  GemmArgs link = a2;
  link.m = 0;
  a1.next = &link;
  a2.prefetched = true;
  PairRun r;
  if (handoff) {
    EXPECT_TRUE(gemm_handoff(cfg, a1, link, 0));
  }
  a2.handed_off = link.handed_off, a2.handed_units = link.handed_units, a2.lrm_p = link.lrm_p, a2.lrm_q = link.lrm_q;
  r.units = plan_gemm(cfg, 0, c2.n, c2.k).units;
  if (!partial) a2.handed_units = link.handed_units = 0;
  r.handed = a2.handed_units;
  Builder b;
  emit_gemm_w4(b, cfg, a1);
  emit_gemm_w4(b, cfg, a2);
  b.op("halt");
  isa::Program prog = b.finish();
  sim::Platform& p = sim::Platform::get();
  p.configure(cfg, timing_only);
  CallData d1, d2;
  if (!timing_only) d1 = load_call(p, cfg, a1, 40), d2 = load_call(p, cfg, a2, 41);
  r.cycles = p.run(prog).total[sim::Stat::cycles];
  if (timing_only) return r;
  read_call(a1, d1, r.y1, r.ref1);
  read_call(a2, d2, r.y2, r.ref2);
  return r;
}

// gemm_handoff's placement where the previous call's last tile sits high and partial sums lie
// above lrm_end: the 2B prefill's last down chunk (2,048 x 1,024, tiles at LRM 0 and 2,432,
// the second the last) before the next layer's q|k|v (4,096 x 2,048: four tiles of 1,088
// bytes a PE, below the sums at 3,072, above the 1 KiB the norms between use). Tile 0 then
// goes just above a second buffer at 0 (no other candidate had room for both).
TEST(Gemm, HandoffFindsRoomBelowPartialSums) {
  const sim::Config cfg = sim::Config::make("qc-u", {});
  GemmArgs prev, next;
  prev.m = 128, prev.n = 2048, prev.k = 1024, prev.lrm_p = 0, prev.lrm_q = 2432, prev.lrm_end = 3072;
  next.n = 4096, next.k = 2048, next.lrm_end = 3072;
  ASSERT_TRUE(gemm_handoff(cfg, prev, next, 1024));
  const GemmPlan pn = plan_gemm(cfg, 0, next.n, next.k);
  const uint32_t bs = pn.meta_lrm + 64 * pn.blocks / pn.split;  // one LRM buffer (gemm.h)
  auto apart = [](uint32_t a0, uint32_t a1, uint32_t b0, uint32_t b1) { return a1 <= b0 || b1 <= a0; };
  EXPECT_GE(next.lrm_p, 1024u) << "tile 0 over the norms' LRM";
  EXPECT_LE(next.lrm_p + bs + 64, 3072u);
  EXPECT_LE(next.lrm_q + bs + 64, 3072u);
  EXPECT_TRUE(apart(next.lrm_p, next.lrm_p + bs, 2432, 2432 + 544)) << "tile 0 over the previous call's last tile";
  EXPECT_TRUE(apart(next.lrm_p, next.lrm_p + bs, next.lrm_q, next.lrm_q + bs + 64));
  // Negative control: with the sums 1 KiB lower there is no room for both buffers.
  GemmArgs tight = next;
  tight.lrm_end = 3072 - 1024;
  EXPECT_FALSE(gemm_handoff(cfg, prev, tight, 1024));
}

// The second call's tile 0 handed off in part (its last units streamed inside its first row
// group's loop): both outputs match the chain, timing-only gives the functional cycles, no slower
// than the whole tile handed off. Negative control: the second call's first output row corrupted
// fails the gate.
void expect_partial_handoff(Call c1, Call c2, const char* what) {
  PairRun f = run_pair(false, true, c1, c2);
  ASSERT_GT(f.handed, 0u);
  ASSERT_LT(f.handed, f.units);
  for (auto [y, ref] : {std::pair{&f.y1, &f.ref1}, {&f.y2, &f.ref2}}) {
    Compare c = compare(*y, *ref);
    EXPECT_GE(c.cosine, 0.9999);
    EXPECT_LE(c.max_abs, c.max_ref * std::ldexp(1.0, -10) + 1e-6);
  }
  const PairRun t = run_pair(true, true, c1, c2), whole = run_pair(true, false, c1, c2);
  EXPECT_EQ(f.cycles, t.cycles);
  EXPECT_LE(t.cycles, whole.cycles);
  std::printf("two GEMMs, %s handed off in part (%u of %u units): %llu cycles; whole: %llu\n", what, f.handed,
              f.units, (unsigned long long)t.cycles, (unsigned long long)whole.cycles);
  f.y2[5] = -f.y2[5] + 1.0f;
  Compare bad = compare(f.y2, f.ref2);
  EXPECT_GT(bad.max_abs, bad.max_ref * std::ldexp(1.0, -10) + 1e-6);
}

TEST(Gemm, HandoffStreamsTheTailOfTileZero) {
  expect_partial_handoff({128, 1024, 1024}, {64, 2048, 4096}, "the second's tile 0");
}

// A call of one tile after one of two (qc-u: 1,024 x 2,048, 1.1 MB, after 2,048 x 1,024 whose last
// tile computes 32 K cycles, 0.6 MB at 32 GB/s): the first hands off only the units the DDR brings
// during its last tile, the second streams the rest, as for a call of more tiles (64x64, 8 MiB,
// 128 GB/s: the gate|up call before the down); `whole` keeps it whole.
TEST(Gemm, HandoffStreamsTheTailOfAOneTileCall) {
  const Call c1{128, 2048, 1024}, c2{64, 1024, 2048};
  const sim::Config cfg = sim::Config::make("qc-u", {});
  ASSERT_EQ(plan_gemm(cfg, c1.m, c1.n, c1.k).tiles, 2u);
  ASSERT_EQ(plan_gemm(cfg, c2.m, c2.n, c2.k).tiles, 1u);
  expect_partial_handoff(c1, c2, "the second of one tile");
  GemmArgs prev, next;
  prev.m = c1.m, prev.n = c1.n, prev.k = c1.k, next.n = c2.n, next.k = c2.k;
  ASSERT_TRUE(gemm_handoff(cfg, prev, next, 0, kLrmAnywhere, true));
  EXPECT_EQ(next.handed_units, 0u);
}

// gemm_handoff to a call whose only tile is narrow: its units go to its PEs only (predicate p4),
// through the port. Both outputs match the chain, timing-only gives the functional cycles, and
// the pair takes fewer cycles than with the second's tile loaded at its own start. Negative
// controls: a column of the second call's output lost (each of lost_cols) fails the gate.
// first: the call handing off (default: one of the same shape).
// faster: the hand-off saves cycles (two row sets: its second scatter of each unit into the
// same register waits for the first, which costs these small calls what the DMA overlap saves).
void expect_narrow_handoff(const Call& c, uint32_t split, std::initializer_list<uint32_t> lost_cols,
                           std::optional<Call> first = {}, bool faster = true) {
  const GemmPlan pl = plan_gemm(sim::Config::make("qc-u", {}), c.m, c.n, c.k);
  ASSERT_EQ(pl.split, split);
  ASSERT_TRUE(pl.tail_at(0));
  const Call c1 = first.value_or(c);
  PairRun f = run_pair(false, true, c1, c);
  EXPECT_EQ(f.handed, 0u);  // (a one-tile call: all of it)
  for (auto [y, ref] : {std::pair{&f.y1, &f.ref1}, {&f.y2, &f.ref2}}) {
    Compare cmp = compare(*y, *ref);
    EXPECT_GE(cmp.cosine, 0.9999);
    EXPECT_LE(cmp.max_abs, cmp.max_ref * std::ldexp(1.0, -10) + 1e-6);
  }
  const PairRun t = run_pair(true, true, c1, c), plain = run_pair(true, true, c1, c, false);
  EXPECT_EQ(f.cycles, t.cycles);
  if (faster) {
    EXPECT_LT(t.cycles, plain.cycles);
  }
  std::printf("two GEMMs, the second's narrow tile at split %u: %llu cycles handed off, %llu not\n", split,
              (unsigned long long)t.cycles, (unsigned long long)plain.cycles);
  for (uint32_t col : lost_cols) {
    PairRun g = f;
    for (uint32_t i = 0; i < c.m; ++i) g.y2[size_t(i) * c.n + col] = 0.0f;
    Compare bad = compare(g.y2, g.ref2);
    EXPECT_GT(bad.max_abs, bad.max_ref * std::ldexp(1.0, -10) + 1e-6) << "column " << col;
  }
}

// N = 768 of 1,024 columns, split 1 (the tower's q|k|v of 4 heads): its 768 PEs.
TEST(Gemm, HandoffOfANarrowTileZero) { expect_narrow_handoff({64, 768, 1024}, 1, {700}); }

// N = 384 of a 512-column tile at split 2, K = 2,048 (the 2B tower's fc2 and proj, N = 1,024
// on 64x64, whose tile 0 was loaded at the call's start): the narrow tile's meta goes to its
// even and its odd PEs in turn (p4 & p2, p4 & p3), its codes to its 768 PEs.
TEST(Gemm, HandoffOfANarrowTileZeroAtSplitTwo) {
  expect_narrow_handoff({48, 384, 2048}, 2, {200, 383});
  // From a call at split 1 (the tower's fc1 before its fc2): its PE pairs set for the meta.
  ASSERT_EQ(plan_gemm(sim::Config::make("qc-u", {}), 64, 1024, 1024).split, 1u);
  expect_narrow_handoff({48, 384, 2048}, 2, {200, 383}, Call{64, 1024, 1024});
}

// The same to a call of two row sets (N = 256 on 512 of qc-u's 1,024 PEs): its units go to
// its PEs [0, 512) and again to [512, 1024) though the call handing off does not know its rows
// (GemmPlan::copies); from a call like it, at split 1, at split 2 on every PE and on a narrow
// tile of 768. From the call at split 1 (whose loop has issue slots: the 2B tower's fc1 before
// its fc2 on 64x64) both copies of each unit are scattered inside its row groups' MAC loops, two
// loop segments a unit, rather than through the port between them: 49,129 cycles handed off
// against 49,448 before that and 49,408 not handed off. (The others, measured: 19,315 / 15,521 /
// 20,035 handed off against 19,200 / 15,504 / 20,030 not; the 2B tower's fc2 on 64x64 reads a
// 2.2 MB tile the hand-off streams during the call before.)
TEST(Gemm, HandoffToTwoRowSets) {
  ASSERT_EQ(plan_gemm(sim::Config::make("qc-u", {}), 48, 256, 1024).sets, 2u);
  expect_narrow_handoff({48, 256, 1024}, 2, {100, 255}, {}, false);
  expect_narrow_handoff({48, 256, 1024}, 2, {100, 255}, Call{64, 1024, 1024}, true);
  expect_narrow_handoff({64, 128, 512}, 2, {100}, Call{64, 512, 512}, false);
  expect_narrow_handoff({256, 128, 256}, 2, {100}, Call{256, 384, 256}, false);
}

// A call of two row sets handing off a wide tile (the 2B tower's proj before its fc1 on 64x64 at
// 8 MiB; here 1,024 GB/s, so that the DDR does not hide the difference): its grouped broadcast
// leaves a loop issue slot in four, so the next call's units are scattered inside its row
// groups' MAC loops in pieces of up to 8 x the port's two cycles (kernels/gemm.cpp, piece_pes):
// 97,592 cycles for the pair, 98,091 through the port between the groups (the kernel before).
// Both outputs match the chain and timing-only gives the functional cycles.
TEST(Gemm, TwoRowSetsHandOffAWideTileInsideTheLoop) {
  const std::vector<std::string> big{"pe_rows=64", "pe_cols=64", "ocm_bytes=8MiB", "ddr_gbps=1024"};
  const sim::Config cfg = sim::Config::make("qc-u", big);
  ASSERT_EQ(plan_gemm(cfg, 256, 1024, 1024).sets, 2u);
  ASSERT_EQ(plan_gemm(cfg, 256, 4096, 1024).cols, 4096u);  // (one tile on every PE)
  const Call c1{256, 1024, 1024}, c2{256, 4096, 1024};
  const PairRun f = run_pair(false, true, c1, c2, true, big), t = run_pair(true, true, c1, c2, true, big);
  for (auto [y, ref] : {std::pair{&f.y1, &f.ref1}, {&f.y2, &f.ref2}}) {
    Compare cmp = compare(*y, *ref);
    EXPECT_GE(cmp.cosine, 0.9999);
    EXPECT_LE(cmp.max_abs, cmp.max_ref * std::ldexp(1.0, -10) + 1e-6);
  }
  EXPECT_EQ(f.cycles, t.cycles);
  EXPECT_LT(t.cycles, 98091u);
  std::printf("64x64, 256 rows: proj (two row sets) handing fc1's tile off in its loops, then fc1: %llu cycles\n",
              (unsigned long long)t.cycles);
}

// One DMA channel (GemmPlan units even, scratch for two buffers): unit u streams into buffer u % 2
// and the next unit starts as soon as one has arrived, before its scatter (kernels/gemm.cpp,
// two_buffers); a call handing off writes the next call's buffer into each descriptor. Pairs as
// above (the second's tile 0 handed off whole and in part, a narrow one at split 2, one not handed
// off): the same values bit for bit as on four channels, timing-only gives the functional cycles,
// and at 8 GB/s (the DDR the bound) the pair within 3% of its four-channel cycles; with the scratch
// of one buffer 1.054 to 1.066 x (the narrow pair 1.012 x either way).
TEST(Gemm, OneChannelStreamsIntoTwoBuffers) {
  struct Case {
    Call c1, c2;
    bool partial, handoff;
  };
  for (const Case& k : {Case{{128, 1024, 1024}, {64, 2048, 4096}, true, true},
                        Case{{128, 1024, 1024}, {64, 2048, 4096}, false, true},
                        Case{{48, 384, 2048}, {48, 384, 2048}, true, true},
                        Case{{128, 2048, 1024}, {64, 1024, 2048}, true, false}}) {
    SCOPED_TRACE(fmt::format("{}x{}x{} then {}x{}x{}", k.c1.m, k.c1.n, k.c1.k, k.c2.m, k.c2.n, k.c2.k));
    const PairRun four = run_pair(false, k.partial, k.c1, k.c2, k.handoff);
    const PairRun one = run_pair(false, k.partial, k.c1, k.c2, k.handoff, {"dma_channels=1"});
    EXPECT_EQ(one.y1, four.y1);
    EXPECT_EQ(one.y2, four.y2);
    Compare c = compare(one.y2, one.ref2);
    EXPECT_LE(c.max_abs, c.max_ref * std::ldexp(1.0, -10) + 1e-6);
    EXPECT_EQ(run_pair(true, k.partial, k.c1, k.c2, k.handoff, {"dma_channels=1"}).cycles, one.cycles);
    const uint64_t slow4 = run_pair(true, k.partial, k.c1, k.c2, k.handoff, {"ddr_gbps=8"}).cycles,
                   slow1 = run_pair(true, k.partial, k.c1, k.c2, k.handoff, {"ddr_gbps=8", "dma_channels=1"}).cycles;
    const uint64_t single =
        run_pair(true, k.partial, k.c1, k.c2, k.handoff, {"ddr_gbps=8", "dma_channels=1"}, false).cycles;
    EXPECT_LE(double(slow1), 1.03 * double(slow4));
    EXPECT_LE(slow1, single);
    std::printf("pair on one DMA channel at 8 GB/s: %llu cycles, one buffer %llu, on four %llu (%.3f x, %.3f x)\n",
                (unsigned long long)slow1, (unsigned long long)single, (unsigned long long)slow4,
                double(slow1) / double(slow4), double(single) / double(slow4));
  }
}

// Three calls with other work between the first two (the prefill's attention between q|k|v and
// o_proj): the second takes one tile, handed off whole by the first, so it takes no unit of its
// own; the third's first units start right after the first call (emit_gemm_prefetch; the second
// runs with GemmArgs::next_started) instead of at the second's start, and stream while the work
// between runs. Every output matches the chain, timing-only gives the functional cycles, and the
// three take fewer cycles than with the third's units started by the second. Negative control:
// a row of the third call's output corrupted fails the gate.
struct ThreeRun {
  std::vector<float> y[3], ref[3];
  uint64_t cycles = 0;
};
// Three calls laid out in OCM from 0 (X, Y of each, then their shared DMA scratch) and DDR.
struct ThreeCalls {
  GemmArgs a[3];
};
ThreeCalls lay_three(const sim::Config& cfg, const Call (&calls)[3]) {
  uint32_t at = 0;
  auto take = [&](uint64_t bytes) { const uint32_t r = at; at = align64(at + bytes); return r; };
  ThreeCalls t;
  uint32_t scratch = 0, w = 0x1000;
  for (int i = 0; i < 3; ++i) {
    const Call& c = calls[i];
    GemmArgs& g = t.a[i];
    g.m = c.m, g.n = c.n, g.k = c.k;
    g.x_ocm = take(uint64_t(c.m) * c.k * 2), g.x_stride = 2 * c.k;
    g.y_ocm = take(uint64_t(c.m) * c.n * 2), g.y_stride = 2 * c.n;
    g.w_ddr = sim::ddr_addr(w);
    w += uint32_t(align64(gemm_weight_bytes(cfg, c.n, c.k)));
    scratch = std::max(scratch, gemm_scratch_bytes(cfg, c.n, c.k));
  }
  const uint32_t scratch_ocm = take(scratch);
  for (GemmArgs& g : t.a) g.scratch_ocm = scratch_ocm, g.scratch_bytes = scratch;
  return t;
}
// Call i + 1 runs as linked to call i (link[i]: its next as the compiler links it).
void take_links(GemmArgs (&a)[3], GemmArgs (&link)[2]) {
  for (int i = 0; i < 2; ++i) {
    a[i].next = &link[i];
    a[i + 1].prefetched = true;
    a[i + 1].handed_off = link[i].handed_off, a[i + 1].handed_units = link[i].handed_units;
    a[i + 1].lrm_p = link[i].lrm_p, a[i + 1].lrm_q = link[i].lrm_q;
  }
}
// The work between two calls (the prefill's attention between q|k|v and o_proj): `iters` scalar
// steps of 2 cycles.
void emit_work_between(Builder& b, uint32_t iters) {
  b.li(X{5}, iters);
  Label again = b.label();
  b.bind(again);
  b.op("addi", {X{5}, X{5}, -1});
  b.op("bne", {X{5}, X{0}, again});
}
// Runs prog (the three calls a) with random inputs from seed on (none timing-only) and reads
// their outputs and the chain's.
ThreeRun run_three_calls(const sim::Config& cfg, const GemmArgs (&a)[3], const isa::Program& prog, bool timing_only,
                         uint32_t seed) {
  sim::Platform& p = sim::Platform::get();
  p.configure(cfg, timing_only);
  CallData d[3];
  for (int i = 0; i < 3 && !timing_only; ++i) d[i] = load_call(p, cfg, a[i], seed + i);
  ThreeRun r;
  r.cycles = p.run(prog).total[sim::Stat::cycles];
  for (int i = 0; i < 3 && !timing_only; ++i) read_call(a[i], d[i], r.y[i], r.ref[i]);
  return r;
}

// Every output of f against the chain; then the third's value at `bad` corrupted must fail the
// gate (the negative control).
void expect_three_match(ThreeRun f, size_t bad) {
  for (int i = 0; i < 3; ++i) {
    Compare c = compare(f.y[i], f.ref[i]);
    EXPECT_GE(c.cosine, 0.9999) << "call " << i;
    EXPECT_LE(c.max_abs, c.max_ref * std::ldexp(1.0, -10) + 1e-6) << "call " << i;
  }
  f.y[2][bad] = -f.y[2][bad] + 1.0f;
  Compare c = compare(f.y[2], f.ref[2]);
  EXPECT_GT(c.max_abs, c.max_ref * std::ldexp(1.0, -10) + 1e-6);
}
ThreeRun run_three(bool timing_only, bool early) {
  const sim::Config cfg = sim::Config::make("qc-u", {});
  const Call calls[3] = {{128, 1024, 1024}, {64, 1024, 1024}, {64, 2048, 4096}};
  ThreeCalls t = lay_three(cfg, calls);
  GemmArgs(&a)[3] = t.a;
  // As the compiler links them (the next call's rows unknown).
  GemmArgs link[2] = {a[1], a[2]};
  for (int i = 0; i < 2; ++i) {
    link[i].m = 0;
    EXPECT_TRUE(gemm_handoff(cfg, a[i], link[i], 0));
  }
  take_links(a, link);
  EXPECT_EQ(plan_gemm(cfg, 0, calls[1].n, calls[1].k).tiles, 1u);
  EXPECT_EQ(a[1].handed_units, 0u);  // (the second call's one tile: handed off whole)
  a[1].next_started = early;
  Builder b;
  emit_gemm_w4(b, cfg, a[0]);
  if (early) emit_gemm_prefetch(b, cfg, link[1]);
  emit_work_between(b, 6000);  // about 12 K cycles
  emit_gemm_w4(b, cfg, a[1]);
  emit_gemm_w4(b, cfg, a[2]);
  b.op("halt");
  return run_three_calls(cfg, a, b.finish(), timing_only, 60);
}

TEST(Gemm, NextUnitsStartedBeforeACallOfNoUnits) {
  const ThreeRun f = run_three(false, true);
  expect_three_match(f, 7);
  const ThreeRun t = run_three(true, true), late = run_three(true, false);
  EXPECT_EQ(f.cycles, t.cycles);
  EXPECT_LT(t.cycles, late.cycles);
  std::printf("three GEMMs, the third's first units started before the second: %llu cycles; by the second: %llu\n",
              (unsigned long long)t.cycles, (unsigned long long)late.cycles);
}

// Units staged before the call that hands them off (kernels::emit_gemm_prefetch_staged,
// GemmArgs::prestaged): the 2B tower's v, proj (one tile, handed off whole by v) and fc1 (128 of
// its 256 rows) on 64x64
// at 4 MiB, 128 GB/s (32-byte units), the rotary and attention's time between v and proj. fc1's
// first units start right after v, and with them two more into the OCM scratch between channel
// 0's buffer and the others' (the scratch is the 2B image program's, larger than these calls'
// buffers); the proj takes those from there, so its last tile streams two units fewer. Every
// output matches the chain, timing-only gives the functional cycles, and the three take fewer
// cycles than with no unit staged. Negative control: a value of fc1's output corrupted fails.
ThreeRun run_prestaged(bool timing_only, bool stage) {
  const sim::Config cfg =
      sim::Config::make("qc-u", {"pe_rows=64", "pe_cols=64", "ocm_bytes=4MiB", "ddr_gbps=128"});
  const Call calls[3] = {{128, 1024, 1024}, {128, 1024, 1024}, {128, 4096, 1024}};  // (half the tower's rows: OCM)
  ThreeCalls t = lay_three(cfg, calls);
  GemmArgs(&a)[3] = t.a;
  const GemmPlan p2 = plan_gemm(cfg, 0, calls[2].n, calls[2].k);
  for (GemmArgs& g : a) g.scratch_bytes += 2 * p2.code_unit;  // (room for two code units)
  GemmArgs link[2] = {a[1], a[2]};
  link[0].m = link[1].m = 0;
  EXPECT_TRUE(gemm_handoff(cfg, a[0], link[0], 0, kLrmAnywhere, true));
  a[1].lrm_p = link[0].lrm_p, a[1].lrm_q = link[0].lrm_q;  // (fc1's tile 0 placed beside the proj's)
  EXPECT_TRUE(gemm_handoff(cfg, a[1], link[1], 0));
  // (the proj, two row sets at split 2, leaves fc1 the last round of its channels: fc1 takes
  // them before its first group)
  EXPECT_EQ(link[1].handed_units, p2.units - p2.channels);
  take_links(a, link);
  EXPECT_EQ(a[1].handed_units, 0u);  // (the proj's one tile: handed off whole)
  a[1].next_started = true;
  Builder b;
  emit_gemm_w4(b, cfg, a[0]);
  if (stage) {
    a[1].prestaged = emit_gemm_prefetch_staged(b, cfg, link[1], 8);
    EXPECT_EQ(a[1].prestaged, 2u);
  } else {
    emit_gemm_prefetch(b, cfg, link[1]);
  }
  emit_work_between(b, 7500);  // about 15 K cycles
  emit_gemm_w4(b, cfg, a[1]);
  emit_gemm_w4(b, cfg, a[2]);
  b.op("halt");
  return run_three_calls(cfg, a, b.finish(), timing_only, 90);
}

TEST(Gemm, UnitsStagedBeforeTheCallThatHandsThemOff) {
  const ThreeRun f = run_prestaged(false, true);
  expect_three_match(f, 11);
  const ThreeRun plain = run_prestaged(false, false);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(f.y[i], plain.y[i]) << "call " << i;
  const ThreeRun t = run_prestaged(true, true), unstaged = run_prestaged(true, false);
  EXPECT_EQ(f.cycles, t.cycles);
  EXPECT_EQ(plain.cycles, unstaged.cycles);
  EXPECT_LT(t.cycles, unstaged.cycles);
  std::printf("v, proj, fc1 (64x64, 4 MiB, 128 GB/s): two of fc1's units staged before the proj %llu cycles; none %llu\n",
              (unsigned long long)t.cycles, (unsigned long long)unstaged.cycles);
}

// Two calls ahead (GemmArgs::next2, gemm_two_ahead): the first call's MACs leave the DDR time
// for the second's one tile (handed off whole) and more, so the first also takes the third's
// first tile-0 units into LRM, on the same channels after the second's; the second takes the
// rest (GemmArgs::pre_units). 128 GB/s on qc-u's array. Every output matches the chain,
// timing-only gives the functional cycles, and the three take fewer cycles than with the third's
// units all taken by the second. Negative control: a value of the third's output corrupted
// fails the gate.
ThreeRun run_two_ahead(bool timing_only, bool two) {
  const sim::Config cfg = sim::Config::make("qc-u", {"ddr_gbps=128"});
  const Call calls[3] = {{128, 1024, 1024}, {16, 1024, 1024}, {16, 2048, 1024}};
  ThreeCalls t = lay_three(cfg, calls);
  GemmArgs(&a)[3] = t.a;
  GemmArgs link[2] = {a[1], a[2]};
  link[0].m = link[1].m = 0;
  EXPECT_TRUE(gemm_handoff(cfg, a[0], link[0], 0));
  const uint32_t third_at = 2048;  // (the third's tile 0 beside the first two's, in both runs)
  if (two) {
    a[0].next2_units = gemm_two_ahead(cfg, a[0], link[0], link[1], 0, third_at);
    EXPECT_EQ(a[0].next2_units, 4u);  // (half the third's 8 units a tile: 4 channels)
    EXPECT_EQ(link[1].pre_units, a[0].next2_units);
    a[0].next2 = &link[1];
  } else {
    EXPECT_TRUE(gemm_handoff(cfg, a[1], link[1], 0, third_at));
  }
  EXPECT_EQ(link[1].lrm_p, third_at);
  take_links(a, link);
  Builder b;
  emit_gemm_w4(b, cfg, a[0]);
  emit_work_between(b, 3000);  // about 6 K cycles
  emit_gemm_w4(b, cfg, a[1]);
  emit_gemm_w4(b, cfg, a[2]);
  b.op("halt");
  return run_three_calls(cfg, a, b.finish(), timing_only, 70);
}

TEST(Gemm, TwoCallsAheadTakesTheThirdsFirstUnits) {
  const ThreeRun f = run_two_ahead(false, true);
  expect_three_match(f, 5);
  const ThreeRun t = run_two_ahead(true, true), one = run_two_ahead(true, false);
  EXPECT_EQ(f.cycles, t.cycles);
  EXPECT_LT(t.cycles, one.cycles);
  std::printf("three GEMMs, the third's first units taken two calls ahead: %llu cycles; by the second: %llu\n",
              (unsigned long long)t.cycles, (unsigned long long)one.cycles);
}

// Where no tile streams its own units in its group 0, a call takes the next tile's units at every
// row group, group 0 too, and its last tile the next call's (kernels/gemm.cpp, spread): the 2B
// prefill's o_proj, gate|up (three tiles on every PE, its tile 0 handed off whole as the two-ahead
// chain leaves it) and down on 64x64 at 8 MiB, 128 GB/s, where the gate|up's DDR sat idle through
// its first groups while the down's units waited at its end. On 2 DMA channels (the 4 MiB plan's),
// the gate|up's last tile takes the down's units in pieces twice as wide (mult), 3 a group where
// its loop had room for 2. On 4 channels the meta of each tile's unit 0 (the gate|up's own, the
// down's at split 2, its odd PEs copying their west neighbour's) goes through loop segments too.
// Every output matches the chain, timing-only gives the functional cycles, and the three run
// faster than before each change: on 4 channels 405,566 cycles against 407,320 with the meta
// through the port between the row groups (410,283 with the units taken from group 1 on as well);
// on 2, 417,901 against 425,665 with pieces of the usual width (each measured with the change
// off; 404,314 and 417,668 after the later changes of the fifty-third stop). Negative control
// as above.
ThreeRun run_spread(bool timing_only, const char* channels) {
  const sim::Config cfg =
      sim::Config::make("qc-u", {"pe_rows=64", "pe_cols=64", "ocm_bytes=8MiB", "ddr_gbps=128", channels});
  const Call calls[3] = {{128, 2048, 2048}, {128, 12288, 2048}, {128, 2048, 6144}};
  ThreeCalls t = lay_three(cfg, calls);
  GemmArgs(&a)[3] = t.a;
  GemmArgs link[2] = {a[1], a[2]};
  link[0].m = link[1].m = 0;
  EXPECT_TRUE(gemm_handoff(cfg, a[0], link[0], 0, kLrmAnywhere, true));
  a[1].lrm_p = link[0].lrm_p, a[1].lrm_q = link[0].lrm_q;  // (the down's tile 0 placed beside them)
  EXPECT_TRUE(gemm_handoff(cfg, a[1], link[1], 0));
  take_links(a, link);
  EXPECT_EQ(plan_gemm(cfg, 128, calls[1].n, calls[1].k).tiles, 3u);
  EXPECT_EQ(a[1].handed_units, 0u);
  Builder b;
  for (const GemmArgs& g : a) emit_gemm_w4(b, cfg, g);
  b.op("halt");
  return run_three_calls(cfg, a, b.finish(), timing_only, 80);
}

TEST(Gemm, UnitsSpreadOverEveryGroupKeepTheDdrGoing) {
  for (auto [channels, before] : {std::pair{"dma_channels=4", 407320u}, {"dma_channels=2", 425665u}}) {
    SCOPED_TRACE(channels);
    const ThreeRun f = run_spread(false, channels);
    expect_three_match(f, 9);
    const ThreeRun t = run_spread(true, channels);
    EXPECT_EQ(f.cycles, t.cycles);
    EXPECT_LT(t.cycles, before);
    std::printf("64x64, 8 MiB, 128 GB/s, %s: o_proj, gate|up (3 tiles), down: %llu cycles\n", channels,
                (unsigned long long)t.cycles);
  }
}

// The gate|up handing the down off on 64x64 at 4 MiB, 128 GB/s, as in the 2B prefill (its tile
// 0 handed off whole by the call before it, the SiLU fused, the down reading its output): 32-byte
// units, whose channels' units arrive within a row group's MACs, so the first tile's groups leave
// the DDR idle while the last tile's hand-off of the down is DDR-bound. Given 512 KiB of free OCM
// (GemmArgs::stage_ocm), the gate|up stages four of the down's units there during its first tile
// (kernels/gemm.cpp). Shapes: the 2B's gate|up (12,288 x 2,048: three tiles, 128 rows: eight
// groups) and down (2,048 x 6,144: 48 units), a small call and the attention's time before them.
// Every output equals the run without the OCM bit for bit, the down's matches the chain on the
// gate|up's output (the staged units reached its LRM), timing-only gives the functional cycles,
// and the three run faster (537,196 cycles against 542,131: the gate|up 210.0 K against 214.9 K,
// as in the 2B program). Negative control: one down output corrupted fails both checks.
struct StagedRun {
  std::vector<float> y[3], ref;
  uint64_t cycles = 0;
};
StagedRun run_staged(bool timing_only, bool stage) {
  const sim::Config cfg =
      sim::Config::make("qc-u", {"pe_rows=64", "pe_cols=64", "ocm_bytes=4MiB", "ddr_gbps=128"});
  const Call calls[3] = {{16, 2048, 512}, {128, 12288, 2048}, {128, 2048, 6144}};
  GemmArgs a[3];
  uint32_t at = 0, w = 0x1000, scratch = 0;
  auto take = [&](uint64_t bytes) { const uint32_t r = at; at = align64(at + bytes); return r; };
  for (int i = 0; i < 3; ++i) {
    const Call& c = calls[i];
    a[i].m = c.m, a[i].n = c.n, a[i].k = c.k, a[i].x_stride = 2 * c.k;
    if (i < 2) a[i].x_ocm = take(uint64_t(c.m) * c.k * 2);
    const uint32_t out = i == 1 ? c.n / 2 : c.n;  // (the gate|up's SiLU pairs: half its columns)
    a[i].y_ocm = take(uint64_t(c.m) * out * 2), a[i].y_stride = 2 * out;
    a[i].w_ddr = sim::ddr_addr(w);
    w += uint32_t(align64(gemm_weight_bytes(cfg, c.n, c.k)));
    scratch = std::max(scratch, gemm_scratch_bytes(cfg, c.n, c.k));
  }
  a[1].act = GemmAct::silu_pairs;
  a[2].x_ocm = a[1].y_ocm;  // (the down reads the gate|up's output)
  const uint32_t scratch_ocm = take(scratch);
  for (GemmArgs& g : a) g.scratch_ocm = scratch_ocm, g.scratch_bytes = scratch;
  if (stage) a[1].stage_ocm = take(512 * 1024), a[1].stage_bytes = 512 * 1024;
  EXPECT_LE(at, cfg.ocm_bytes);
  GemmArgs link[2] = {a[1], a[2]};
  link[0].m = link[1].m = 0;
  EXPECT_TRUE(gemm_handoff(cfg, a[0], link[0], 0, kLrmAnywhere, true));
  a[1].lrm_p = link[0].lrm_p, a[1].lrm_q = link[0].lrm_q;
  EXPECT_TRUE(gemm_handoff(cfg, a[1], link[1], 0));
  take_links(a, link);
  // (between the first two calls, the layer's attention: the DDR brings the gate|up's tile 0 and
  // its tile 1's first units before it starts, as the two-ahead chain has them)
  Builder b;
  emit_gemm_w4(b, cfg, a[0]);
  emit_work_between(b, 40000);
  emit_gemm_w4(b, cfg, a[1]);
  emit_gemm_w4(b, cfg, a[2]);
  b.op("halt");
  sim::Platform& p = sim::Platform::get();
  p.configure(cfg, timing_only);
  CallData d[3];
  for (int i = 0; i < 3 && !timing_only; ++i) d[i] = load_call(p, cfg, a[i], 90 + i);
  StagedRun r;
  r.cycles = p.run(b.finish()).total[sim::Stat::cycles];
  if (timing_only) return r;
  for (int i = 0; i < 3; ++i) r.y[i] = read_ocm_f16(a[i].y_ocm, size_t(a[i].m) * a[i].y_stride / 2);
  d[2].x = r.y[1];
  std::vector<float> y2;
  read_call(a[2], d[2], y2, r.ref);
  return r;
}

TEST(Gemm, StagedUnitsOfTheNextCallTakeTheIdleDdr) {
  StagedRun f = run_staged(false, true);
  const StagedRun plain = run_staged(false, false);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(f.y[i], plain.y[i]) << "call " << i;
  Compare c = compare(f.y[2], f.ref);
  EXPECT_GE(c.cosine, 0.9999);
  EXPECT_LE(c.max_abs, c.max_ref * std::ldexp(1.0, -10) + 1e-6);
  const StagedRun t = run_staged(true, true);
  EXPECT_EQ(f.cycles, t.cycles);
  EXPECT_EQ(plain.cycles, run_staged(true, false).cycles);
  EXPECT_LT(t.cycles, plain.cycles);
  std::printf("64x64, 4 MiB, 128 GB/s: a call, gate|up (3 tiles), down, 4 units staged: %llu cycles; without: %llu\n",
              (unsigned long long)t.cycles, (unsigned long long)plain.cycles);
  f.y[2][11] = -f.y[2][11] + 1.0f;
  EXPECT_NE(f.y[2], plain.y[2]);
  Compare bad = compare(f.y[2], f.ref);
  EXPECT_GT(bad.max_abs, bad.max_ref * std::ldexp(1.0, -10) + 1e-6);
}

// A K split across calls (GemmArgs::acc_in, y_f32): W [n][chunks * kc] in chunks of kc
// inputs, each packed on its own; call 0 writes fp32 partial sums (with the bias), the
// middle calls add theirs in place, the last adds its own and rounds Y to fp16. The result
// is the whole GEMM up to the fp32 summation order: within one fp16 ulp of ops::linear.
// skip: the call whose partial sums are dropped (its output is never added; the negative
// control), or UINT32_MAX.
struct ChunkRun {
  std::vector<float> y, ref;
  uint64_t cycles = 0;
};
// lrm: the partial sums in LRM (GemmArgs::lrm_in, lrm_out) at its top, the calls' buffers
// below; handoff: each call hands its tile 0 to the next (gemm_handoff, as the compiler chains
// them); sub: on the first half of the array's rows (GemmArgs::sub_array); seed (with lrm): an
// fp16 [m][n] matrix seeds the sums (emit_gemm_lrm_seed, rows in two parts split inside a row
// group), the first call adds them (Y = X W^T + bias + seed, as an MLP's residual); seed_once
// (the negative control): only the first part is seeded.
struct ChunkOpts {
  bool lrm = false, handoff = false, sub = false, seed = false, seed_once = false;
};
ChunkRun run_chunks(const sim::Config& machine, uint32_t m, uint32_t n, uint32_t kc, uint32_t chunks, uint32_t split,
                    bool timing_only, uint32_t skip = UINT32_MAX, ChunkOpts o = {}) {
  sim::Config cfg = machine;
  const bool lrm = o.lrm, handoff = o.handoff, sub = o.sub;
  if (sub) cfg.pe_rows /= 2;
  const uint32_t k = kc * chunks;
  std::vector<float> w = random_vector(size_t(n) * k, 5, 0.02f), x = random_vector(size_t(m) * k, 6),
                     bv = random_vector(n, 7, 0.5f);
  for (float& v : x) v = round_f16(v);
  for (float& v : bv) v = round_f16(v);
  const uint32_t xo = 0, acc = align64(uint64_t(m) * k * 2), yo = align64(acc + uint64_t(m) * n * 4),
                 bo = align64(yo + uint64_t(m) * n * 2), scr = align64(bo + n * 2);
  Builder b;
  std::vector<std::vector<uint8_t>> packed;
  std::vector<float> wd(size_t(n) * k);  // the dequantised codes of every chunk, as one matrix
  uint32_t ddr = 0x1000;
  std::vector<GemmArgs> args(chunks);
  for (uint32_t c = 0; c < chunks; ++c) {
    std::vector<float> wc(size_t(n) * kc);
    for (uint32_t r = 0; r < n; ++r)
      std::copy_n(w.begin() + size_t(r) * k + c * kc, kc, wc.begin() + size_t(r) * kc);
    model::QuantTensor q = model::quantise(wc.data(), n, kc);
    std::vector<float> d = model::dequantise(q);
    for (uint32_t r = 0; r < n; ++r) std::copy_n(d.begin() + size_t(r) * kc, kc, wd.begin() + size_t(r) * k + c * kc);
    packed.push_back(pack_gemm_weight(q.view(), cfg, split));
    GemmArgs a;
    a.m = m, a.n = n, a.k = kc, a.split = split;
    a.sub_array = sub;
    a.w_ddr = sim::ddr_addr(ddr);
    ddr += uint32_t(packed.back().size() + 4095) / 4096 * 4096;
    a.x_ocm = xo + c * kc * 2, a.x_stride = 2 * k;
    a.acc_in = c > 0 && c != skip + 1, a.acc_ocm = acc, a.acc_stride = 4 * n;
    a.y_f32 = c + 1 < chunks;
    a.y_ocm = a.y_f32 ? acc : yo, a.y_stride = a.y_f32 ? 4 * n : 2 * n;
    if (c == 0) a.bias = GemmBias::f16, a.bias_ocm = bo;
    a.scratch_ocm = scr, a.scratch_bytes = gemm_scratch_bytes(cfg, n, kc, split);
    if (c == skip) a.y_ocm = yo, a.y_f32 = false, a.y_stride = 2 * n;  // its sums go nowhere the next call reads
    if (lrm) {
      a.lrm_in = a.acc_in, a.lrm_out = a.y_f32;
      a.acc_in = a.y_f32 = false;
      a.y_ocm = yo, a.y_stride = 2 * n;
      a.lrm_end = a.lrm_acc = (uint32_t(cfg.lrm_bytes) - gemm_lrm_acc_bytes(cfg, m, n, kc, split)) / 64 * 64;
    }
    args[c] = a;
  }
  const uint32_t so = align64(scr + uint64_t(args[0].scratch_bytes)), half = m / 2 + 1;
  std::vector<float> seed;
  if (o.seed) {
    seed = random_vector(size_t(m) * n, 8);
    for (float& v : seed) v = round_f16(v);
    for (auto [r0, rows] : {std::pair<uint32_t, uint32_t>{0, half}, {half, m - half}}) {
      if (r0 && o.seed_once) break;
      emit_gemm_lrm_seed(b, cfg, {.m = m, .n = n, .k = kc, .split = split, .row0 = r0, .rows = rows,
                                  .x_ocm = so + r0 * n * 2, .x_stride = n * 2, .lrm_acc = args[0].lrm_acc});
    }
    args[0].lrm_in = true;
  }
  for (uint32_t c = 0; c < chunks; ++c) {
    if (handoff && c + 1 < chunks) {
      args[c].next = &args[c + 1];
      args[c + 1].prefetched = true;
      gemm_handoff(cfg, args[c], args[c + 1], 0);
    }
    emit_gemm_w4(b, cfg, args[c]);
  }
  b.op("halt");
  isa::Program prog = b.finish();
  sim::Platform& p = sim::Platform::get();
  p.configure(machine, timing_only);
  ChunkRun r;
  if (!timing_only) {
    ddr = 0x1000;
    for (const auto& pk : packed) {
      p.ddr().write(ddr, pk.data(), pk.size());
      ddr += uint32_t(pk.size() + 4095) / 4096 * 4096;
    }
    write_ocm_f16(xo, x);
    write_ocm_f16(bo, bv);
    if (o.seed) write_ocm_f16(so, seed);
  }
  r.cycles = p.run(prog).total[sim::Stat::cycles];
  if (timing_only) return r;
  for (uint32_t i = 0; i < m; ++i) {
    std::vector<float> row = read_ocm_f16(yo + i * n * 2, n);
    r.y.insert(r.y.end(), row.begin(), row.end());
  }
  model::ops::round_f16_inplace(wd);
  r.ref.assign(size_t(m) * n, 0.0f);
  model::ops::linear(x, model::ops::Matrix::dense("w_f16", n, k, wd.data()), bv, r.ref);
  for (size_t i = 0; i < seed.size(); ++i) r.ref[i] += seed[i];
  model::ops::round_f16_inplace(r.ref);
  return r;
}

struct ChunkShape {
  const char* preset;
  uint32_t m, n, kc, chunks, split;
  ChunkOpts o = {};
};
class GemmChunks : public ::testing::TestWithParam<ChunkShape> {};
TEST_P(GemmChunks, PartialSumsMatchTheWholeGemm) {
  const ChunkShape s = GetParam();
  sim::Config cfg = sim::Config::make(s.preset, {});
  ChunkRun r = run_chunks(cfg, s.m, s.n, s.kc, s.chunks, s.split, false, UINT32_MAX, s.o);
  Compare c = compare(r.y, r.ref);
  const double bound = c.max_ref * std::ldexp(1.0, -10) + 1e-6;  // one fp16 ulp
  EXPECT_GE(c.cosine, 0.9999);
  EXPECT_LE(c.max_abs, bound) << "max |y - ref| = " << c.max_abs << " (max |ref| " << c.max_ref << ")";
  EXPECT_EQ(run_chunks(cfg, s.m, s.n, s.kc, s.chunks, s.split, true, UINT32_MAX, s.o).cycles, r.cycles);
  // Negative control: the middle call's partial sums never reach the last call.
  ChunkRun bad = run_chunks(cfg, s.m, s.n, s.kc, s.chunks, s.split, false, 1, s.o);
  Compare cb = compare(bad.y, bad.ref);
  EXPECT_GT(cb.max_abs, cb.max_ref * std::ldexp(1.0, -10) + 1e-6);
  std::printf("gemm %s M=%u N=%u K=%u x %u chunks (split %u, partial sums in %s%s%s%s): max_abs %.3g (bound %.3g); "
              "without chunk 1 %.3g; %llu cycles\n",
              s.preset, s.m, s.n, s.kc, s.chunks, plan_gemm(cfg, s.m, s.n, s.kc, s.split).split, s.o.lrm ? "LRM" : "OCM",
              s.o.handoff ? ", handed off" : "", s.o.sub ? ", half the rows" : "", s.o.seed ? ", seeded" : "",
              c.max_abs, bound, cb.max_abs, (unsigned long long)r.cycles);
  if (!s.o.seed) return;
  // Negative control: the second part of the rows never seeded.
  ChunkOpts once = s.o;
  once.seed_once = true;
  ChunkRun unseeded = run_chunks(cfg, s.m, s.n, s.kc, s.chunks, s.split, false, UINT32_MAX, once);
  Compare cu = compare(unseeded.y, unseeded.ref);
  EXPECT_GT(cu.max_abs, cu.max_ref * std::ldexp(1.0, -10) + 1e-6);
  std::printf("  rows [%u, %u) unseeded: max_abs %.3g\n", s.m / 2 + 1, s.m, cu.max_abs);
}
// Both splits, a narrow last tile (qc-u: 1100 columns), rows not a multiple of 16 or 4;
// the partial sums in OCM and in LRM.
INSTANTIATE_TEST_SUITE_P(Chunks, GemmChunks,
                         ::testing::Values(ChunkShape{"mini", 19, 37, 256, 3, 1}, ChunkShape{"mini", 21, 23, 256, 3, 2},
                                           ChunkShape{"qc-u", 35, 1100, 384, 3, 0},
                                           ChunkShape{"qc-u", 18, 600, 256, 4, 2},
                                           ChunkShape{"mini", 19, 37, 256, 3, 1, {.lrm = true}},
                                           ChunkShape{"mini", 21, 23, 256, 3, 2, {.lrm = true}},
                                           ChunkShape{"qc-u", 35, 1100, 384, 3, 0, {.lrm = true}},
                                           ChunkShape{"qc-u", 18, 600, 256, 4, 2, {.lrm = true}},
                                           ChunkShape{"qc-u", 35, 1100, 384, 3, 0, {.lrm = true, .handoff = true}},
                                           ChunkShape{"qc-u", 18, 600, 256, 4, 2, {.lrm = true, .handoff = true, .sub = true}},
                                           ChunkShape{"qc-u", 35, 1100, 384, 3, 0, {.handoff = true, .sub = true}},
                                           ChunkShape{"mini", 21, 23, 256, 3, 2, {.lrm = true, .seed = true}},
                                           ChunkShape{"qc-u", 35, 1100, 384, 3, 0, {.lrm = true, .seed = true}},
                                           ChunkShape{"qc-u", 18, 600, 256, 4, 2,
                                                      {.lrm = true, .handoff = true, .sub = true, .seed = true}},
                                           // One narrow tile at split 2 on at most half the PEs: two row sets.
                                           ChunkShape{"qc-u", 40, 256, 256, 3, 0},
                                           ChunkShape{"qc-u", 40, 256, 256, 3, 0, {.lrm = true}},
                                           ChunkShape{"qc-u", 45, 200, 256, 3, 0, {.lrm = true, .handoff = true, .seed = true}},
                                           ChunkShape{"qc-u", 40, 128, 256, 3, 0,
                                                      {.lrm = true, .handoff = true, .sub = true, .seed = true}}));


// Half units (gemm_unit_pe_bytes: 32 code bytes a PE where 64 on four channels would take over a
// quarter of an OCM of more than 1 MiB; 64x64 PEs, 2 MiB): every path that moves units - the
// prologue, the next tile's units at the row groups' starts and in loop segments (a, seg), a
// narrow last tile, split 2, two row sets, the next call prefetched, partial sums in OCM and
// LRM chained by hand-offs with seeds - matches the chain within one fp16 ulp, and timing-only
// gives the functional cycles.
TEST(Gemm, HalfUnitsMatchTheChain) {
  const sim::Config cfg = sim::Config::make("qc-u", {"pe_rows=64", "pe_cols=64", "ocm_bytes=2MiB"});
  ASSERT_EQ(gemm_unit_pe_bytes(cfg), 32u);
  sim::Config two = cfg;  // (the same units on fewer channels: packing and calls agree)
  two.dma_channels = 2;
  ASSERT_EQ(gemm_unit_pe_bytes(two), 32u);
  ASSERT_EQ(gemm_unit_pe_bytes(sim::Config::make("qc-u", {})), 64u);
  ASSERT_EQ(gemm_unit_pe_bytes(sim::Config::make("qc-u", {"ocm_bytes=786432"})), 64u);  // (a quarter holds them)
  // 64x64 from just above 1 MiB (at 1 MiB the compiler halves the GEMMs' view instead)
  ASSERT_EQ(gemm_unit_pe_bytes(sim::Config::make("qc-u", {"pe_rows=64", "pe_cols=64", "ocm_bytes=1MiB"})), 64u);
  ASSERT_EQ(gemm_unit_pe_bytes(sim::Config::make("qc-u", {"pe_rows=64", "pe_cols=64", "ocm_bytes=1280KiB"})), 32u);
  sim::Config four = cfg;  // (4 MiB: 64 bytes a PE)
  four.ocm_bytes = 4u << 20;
  ASSERT_EQ(plan_gemm(cfg, 64, 2100, 1024).units, 2 * plan_gemm(four, 64, 2100, 1024).units);
  for (Shape s : {Shape{"", 64, 2100, 1024, GemmBias::f16, 0}, Shape{"", 64, 2100, 1024, GemmBias::f16, 1},
                  Shape{"", 18, 600, 256, GemmBias::none, 2},
                  Shape{"", 40, 256, 1024, GemmBias::f32, 0}, Shape{"", 20, 1100, 384, GemmBias::f32, 0}}) {
    for (bool twice : {false, true}) {
      GemmRun f = run_gemm(cfg, s.m, s.n, s.k, s.bias, 13, false, s.split, twice, twice ? 500 : 0, twice);
      Compare c = compare(f.y, f.ref);
      EXPECT_GE(c.cosine, 0.9999) << s.m << "x" << s.n << "x" << s.k;
      EXPECT_LE(c.max_abs, c.max_ref * std::ldexp(1.0, -10) + 1e-6) << s.m << "x" << s.n << "x" << s.k << " " << twice;
      GemmRun t = run_gemm(cfg, s.m, s.n, s.k, s.bias, 13, true, s.split, twice, twice ? 500 : 0, twice);
      EXPECT_EQ(f.stats.total[sim::Stat::cycles], t.stats.total[sim::Stat::cycles]);
    }
  }
  for (ChunkShape s : {ChunkShape{"", 35, 1100, 384, 3, 0, {.lrm = true, .handoff = true, .seed = true}},
                       ChunkShape{"", 18, 600, 256, 4, 2, {.handoff = true}},
                       ChunkShape{"", 45, 200, 256, 3, 0, {.lrm = true, .handoff = true, .seed = true}}}) {
    ChunkRun r = run_chunks(cfg, s.m, s.n, s.kc, s.chunks, s.split, false, UINT32_MAX, s.o);
    Compare c = compare(r.y, r.ref);
    EXPECT_LE(c.max_abs, c.max_ref * std::ldexp(1.0, -10) + 1e-6) << s.m << "x" << s.n << "x" << s.kc;
    EXPECT_EQ(run_chunks(cfg, s.m, s.n, s.kc, s.chunks, s.split, true, UINT32_MAX, s.o).cycles, r.cycles);
  }
}

// LRM partial sums below the call's buffers (lrm_end not set), past LRM, or together with
// OCM ones: each a clear error naming the region, not a silent overwrite.
TEST(GemmChunks, LrmPartialSumsRegionChecked) {
  const sim::Config cfg = sim::Config::make("qc-u", {});
  auto message = [&](auto edit) {
    GemmArgs a;
    a.m = 32, a.n = 1024, a.k = 512;
    a.x_stride = 2 * a.k, a.y_stride = 2 * a.n, a.y_ocm = 65536;
    a.scratch_ocm = 262144, a.scratch_bytes = gemm_scratch_bytes(cfg, a.n, a.k);
    a.lrm_out = true;
    a.lrm_end = a.lrm_acc = 3072;
    edit(a);
    Builder b;
    try {
      emit_gemm_w4(b, cfg, a);
    } catch (const gpnpu::Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(message([](GemmArgs&) {}), "");
  EXPECT_NE(message([](GemmArgs& a) { a.lrm_end = 0; }).find("at or above lrm_bytes = 4096"), std::string::npos);
  EXPECT_NE(message([](GemmArgs& a) { a.lrm_acc = 4096 - 64; }).find("inside lrm_bytes"), std::string::npos);
  EXPECT_NE(message([](GemmArgs& a) { a.y_f32 = true, a.y_stride = 4 * a.n; }).find("exclude each other"),
            std::string::npos);
}

// A seed outside the call's rows, its LRM sums misaligned or past LRM, its rows past OCM: each
// a clear error naming what and where.
TEST(GemmChunks, LrmSeedArgumentsChecked) {
  const sim::Config cfg = sim::Config::make("qc-u", {});
  auto message = [&](auto edit) {
    GemmSeedArgs a{.m = 32, .n = 1024, .k = 512, .row0 = 0, .rows = 32, .x_ocm = 0, .x_stride = 2048,
                   .lrm_acc = 3072};
    edit(a);
    Builder b;
    try {
      emit_gemm_lrm_seed(b, cfg, a);
    } catch (const gpnpu::Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(message([](GemmSeedArgs&) {}), "");
  EXPECT_NE(message([](GemmSeedArgs& a) { a.row0 = 16, a.rows = 17; }).find("rows [16, 33)"), std::string::npos);
  EXPECT_NE(message([](GemmSeedArgs& a) { a.lrm_acc = 3072 + 32; }).find("64-byte aligned"), std::string::npos);
  EXPECT_NE(message([](GemmSeedArgs& a) { a.lrm_acc = 4096 - 64; }).find("inside lrm_bytes = 4096"), std::string::npos);
  EXPECT_NE(message([&](GemmSeedArgs& a) { a.x_ocm = uint32_t(cfg.ocm_bytes) - 2048; }).find("does not fit"),
            std::string::npos);
  EXPECT_NE(message([](GemmSeedArgs& a) { a.x_stride = 1000; }).find("x_stride 1000"), std::string::npos);
}

// The same chain, model-like (the prefill's down in chunks of 512 over 128 rows on qc-u):
// LRM partial sums take no OCM port time, so the chain is faster than with OCM ones.
TEST(GemmChunks, LrmPartialSumsFasterThanOcm) {
  const sim::Config cfg = sim::Config::make("qc-u", {});
  const uint64_t ocm = run_chunks(cfg, 128, 2048, 512, 4, 0, true).cycles,
                 lrm = run_chunks(cfg, 128, 2048, 512, 4, 0, true, UINT32_MAX, {.lrm = true}).cycles;
  EXPECT_LT(lrm, ocm);
  std::printf("gemm qc-u 128 x 2048 x (4 x 512): partial sums in OCM %llu cycles, in LRM %llu\n",
              (unsigned long long)ocm, (unsigned long long)lrm);
}

// Model-size shapes on qc-u, timing only: cycles against max(MAC floor, DDR floor).
// The limits guard the measured ratios (1.198, 1.155, 1.287); most of the excess is the
// pipeline start (tile 0's weights stream in before any MAC: 59 K, 30 K, 89 K cycles).
struct Perf {
  uint32_t m, n, k;
  double limit;
};
class GemmPerf : public ::testing::TestWithParam<Perf> {};
TEST_P(GemmPerf, NearTheFloor) {
  Perf s = GetParam();
  sim::Config cfg = sim::Config::make("qc-u", {});
  GemmRun r = run_gemm(cfg, s.m, s.n, s.k, GemmBias::none, 3, true);
  const double floor = floor_cycles(cfg, r.cost);
  const double mac = double(r.cost.macs) / (cfg.npe() * 16.0 / cfg.occ(isa::Unit::mac16));
  const double ddr = double(r.cost.ddr_bytes) / cfg.ddr_bytes_per_cycle();
  const uint64_t cycles = r.stats.total[sim::Stat::cycles];
  std::printf("gemm %u x %u -> %u: %llu cycles, MAC floor %.0f, DDR floor %.0f, ratio %.4f (%zu instructions)\n", s.m,
              s.k, s.n, (unsigned long long)cycles, mac, ddr, double(cycles) / floor, r.insns);
  // Across calls (GemmArgs::next, as the compiler chains them): the second of two calls,
  // whose first units were fetched during the first call's last tile.
  GemmRun two = run_gemm(cfg, s.m, s.n, s.k, GemmBias::none, 3, true, 0, true, 0, true);
  const uint64_t second = two.stats.total[sim::Stat::cycles] - cycles;
  std::printf("  a prefetched call (GemmArgs::next): %llu cycles, ratio %.4f\n", (unsigned long long)second,
              double(second) / floor);
  EXPECT_LT(second, cycles);
  RecordProperty("cycles", std::to_string(cycles));
  RecordProperty("floor", std::to_string(floor));
  EXPECT_LE(double(cycles), s.limit * floor);
}
INSTANTIATE_TEST_SUITE_P(Qcu, GemmPerf,
                         ::testing::Values(Perf{128, 6144, 2048, 1.21}, Perf{256, 4096, 1024, 1.17},
                                           Perf{128, 2048, 6144, 1.30}));

// Split 2 on 64x64 (the 2B prefill's MLP chunks at 4 MiB, 128 GB/s: 128 rows, K = 2,048, two
// tiles): with a 128-block a loop trip the loop leaves issue slots for fill pieces, so tile 1's
// units are scattered inside tile 0's row groups rather than through the OCM port between them
// (512 port cycles a unit). Timing only, against max(MAC floor, DDR floor), at 8 MiB, whose units
// are 64 bytes a PE (at 4 MiB and 128 GB/s they are 32 now, gemm_unit_pe_bytes: 93,399 cycles,
// 1.425 x). Measured: 86,570 cycles (1.321 x) now; at 4 MiB with 64-byte units 87,222 (1.331
// x), 87,861 (1.341 x) before the loop's weight preparation went into the slots its broadcasts
// and pieces leave (issue_plan: at split 2 they met, 2 cycles an iteration); 90,021 (1.374 x)
// with a group of 16 codes a trip.
TEST(Gemm, SplitTwoFillsInsideTheLoop) {
  const sim::Config cfg = sim::Config::make("qc-u", {"pe_rows=64", "pe_cols=64", "ocm_bytes=8MiB", "ddr_gbps=128"});
  ASSERT_EQ(gemm_unit_pe_bytes(cfg), 64u);
  ASSERT_EQ(plan_gemm(cfg, 128, 4096, 2048, 2).tiles, 2u);
  // The second of two calls (its first units fetched during the first's last tile).
  const GemmRun one = run_gemm(cfg, 128, 4096, 2048, GemmBias::none, 3, true, 2),
                two = run_gemm(cfg, 128, 4096, 2048, GemmBias::none, 3, true, 2, true, 0, true);
  const uint64_t second = two.stats.total[sim::Stat::cycles] - one.stats.total[sim::Stat::cycles];
  const double ratio = double(second) / floor_cycles(cfg, one.cost);
  std::printf("64x64, split 2, 128 x 2048 -> 4096, a prefetched call: %llu cycles, %.4f x the floor\n",
              (unsigned long long)second, ratio);
  EXPECT_LE(ratio, 1.335);
}

}  // namespace
}  // namespace gpnpu::kernels::test
