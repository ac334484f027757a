// W4A16 GEMV: numerics against the chain's linear op on dequantised weights, and
// cycles against the DDR floor.
#include "kernels/gemv.h"

#include "kernel_harness.h"
#include "model/reference/ops.h"
#include "model/checkpoint/quant.h"
#include "sim/machine/memory_map.h"
#include "sim/run.h"

namespace gpnpu::kernels::test {
namespace {

struct GemvRun {
  std::vector<float> y, ref;
  sim::Stats stats;
  uint64_t weight_bytes = 0;
};

// prefetch: emit_gemv_prefetch first, then `between` cycles of other work (a busy loop),
// then the call with prefetched = true (without: the busy loop all the same).
// scratch_bytes: the DMA buffers' OCM (0: the rest of the OCM).
// park: `park` chunks parked (GemvArgs::park_chunks: chunk 3i + 2 at park_ocm + i chunks) at the
// OCM's end, copied there by one strided DMA on channel 0 before the `between` cycles (park_copy =
// false: not copied, a negative control).
GemvRun run_gemv(const sim::Config& cfg, uint32_t n, uint32_t k, uint32_t seed, bool timing_only, bool prefetch = false,
                 uint32_t between = 0, uint32_t scratch_bytes = 0, uint32_t park = 0, bool park_copy = true) {
  GemvRun r;
  std::vector<float> w = random_vector(size_t(n) * k, seed, 0.02f);
  std::vector<float> x = random_vector(k, seed + 1);
  for (float& v : x) v = round_f16(v);  // x lives in OCM as fp16
  model::QuantTensor q = model::quantise(w.data(), n, k);

  GemvArgs a;
  a.n = n;
  a.k = k;
  a.x_ocm = 0;
  a.y_ocm = (k * 2 + 63) / 64 * 64;
  a.scratch_ocm = (a.y_ocm + n * 2 + 63) / 64 * 64;
  a.scratch_bytes = scratch_bytes ? scratch_bytes : uint32_t(cfg.ocm_bytes) - a.scratch_ocm;
  a.w_ddr = sim::ddr_addr(0x1000);
  a.smem = 0;
  Builder b;
  if (park) {
    const uint32_t cb = gemv_chunk_bytes(cfg, a);
    a.scratch_bytes -= (park * cb + 64 + 63) / 64 * 64;  // (a chunk's last reads go 3 bytes past it)
    a.park_ocm = a.scratch_ocm + a.scratch_bytes;
    a.park_chunks = park;
    if (park_copy) {
      b.descriptor(512, a.w_ddr + 2 * cb, sim::ocm_addr(a.park_ocm), cb, park, 3 * cb, cb);
      b.li(X{1}, 512);
      b.op("dma.start", {Chan{0}, X{1}});
    }
  }
  if (between && !prefetch) {  // (the prefetch's own below)
    b.li(X{1}, between);
    b.loop(X{1}, [&] { b.op("nop"); });
  }
  if (prefetch) {
    emit_gemv_prefetch(b, cfg, a);
    a.prefetched = true;
    b.li(X{1}, between);
    b.loop(X{1}, [&] { b.op("nop"); });
  }
  emit_gemv_w4(b, cfg, a);
  b.op("halt");
  isa::Program prog = b.finish();

  sim::Platform& p = sim::Platform::get();
  p.configure(cfg, timing_only);
  if (!timing_only) {
    std::vector<uint8_t> packed = pack_gemv_weight(q.view(), cfg);
    p.ddr().write(0x1000, packed.data(), packed.size());
    write_ocm_f16(a.x_ocm, x);
  }
  r.weight_bytes = gemv_weight_bytes(n, k);
  r.stats = p.run(prog);
  if (timing_only) return r;
  r.y = read_ocm_f16(a.y_ocm, n);
  // The chain's op on the very codes the device reads, dequantised.
  std::vector<float> wd = model::dequantise(q);
  model::ops::Matrix m = model::ops::Matrix::dense("w", n, k, wd.data());
  r.ref.assign(n, 0.0f);
  model::ops::linear(x, m, {}, r.ref);
  return r;
}

struct Shape {
  const char* preset;
  uint32_t n, k;
};

class GemvShapes : public ::testing::TestWithParam<Shape> {};

TEST_P(GemvShapes, MatchesChainLinear) {
  Shape s = GetParam();
  sim::Config cfg = sim::Config::make(s.preset, {});
  GemvRun r = run_gemv(cfg, s.n, s.k, 7, false);
  Compare c = compare(r.y, r.ref);
  // fp16 output rounding bounds the error: half an fp16 ulp of the largest output.
  double bound = r.ref.empty() ? 0 : c.max_ref * 1e-3 + 1e-3;
  EXPECT_GE(c.cosine, 0.9999) << s.n << "x" << s.k;
  EXPECT_LE(c.max_abs, bound) << "max |y - ref| = " << c.max_abs << " (max |ref| " << c.max_ref << ")";
  EXPECT_EQ(r.stats.total[sim::Stat::ddr_bytes_read], r.weight_bytes);
  RecordProperty("cosine", std::to_string(c.cosine));
  RecordProperty("max_abs", std::to_string(c.max_abs));
}

// Columns not a multiple of the tile (npe) and several chunk counts.
INSTANTIATE_TEST_SUITE_P(Shapes, GemvShapes,
                         ::testing::Values(Shape{"mini", 16, 128}, Shape{"mini", 37, 384},
                                           Shape{"mini", 100, 1024}, Shape{"qc-u", 1500, 256},
                                           Shape{"qc-u", 2048, 2048}));

TEST(Gemv, NegativeControlCorruptedCodeFailsTheGate) {
  sim::Config cfg = sim::Config::make("mini", {});
  GemvRun r = run_gemv(cfg, 37, 384, 7, false);
  // Corrupt the output as a wrong kernel would: drop one column's value.
  r.y[5] = 0.0f;
  r.y[6] = -r.y[6];
  Compare c = compare(r.y, r.ref);
  EXPECT_LT(c.cosine, 0.9999);
}

// Acceptance: W4A16 GEMV 2048 -> 6144 on qc-u within 2% of its DDR floor.
TEST(Gemv, DecodeShapeAtTheDdrFloor) {
  sim::Config cfg = sim::Config::make("qc-u", {});
  GemvRun r = run_gemv(cfg, 6144, 2048, 3, true);
  double floor = double(r.weight_bytes) / cfg.ddr_bytes_per_cycle();
  uint64_t cycles = r.stats.total[sim::Stat::cycles];
  EXPECT_LE(double(cycles), 1.02 * floor) << cycles << " cycles, DDR floor " << floor;
  RecordProperty("cycles", std::to_string(cycles));
  RecordProperty("floor", std::to_string(floor));
  std::printf("gemv 2048->6144: %llu cycles, DDR floor %.0f, ratio %.4f\n", (unsigned long long)cycles, floor,
              double(cycles) / floor);
}

// The tile width follows the DDR bandwidth, not the array: at each bandwidth every array
// of 32x32 PEs or more takes the same tile and runs the call in exactly the same cycles
// (so more PEs never add cycles), within 3% of the DDR floor; a port faster than the
// array can follow at 1,024 columns takes wider tiles.
TEST(Gemv, TileWidthFollowsTheDdrNotTheArray) {
  for (std::string gbps : {"16", "32", "64", "128"}) {
    std::vector<uint64_t> cycles;
    std::vector<uint32_t> tiles;
    for (std::string pe : {"32x32", "32x64", "64x64"}) {
      const std::string rows = pe.substr(0, 2), cols = pe.substr(3);
      sim::Config cfg = sim::Config::make("qc-u", {"ddr_gbps=" + gbps, "pe_rows=" + rows, "pe_cols=" + cols});
      tiles.push_back(gemv_tile_cols(cfg));
      GemvRun r = run_gemv(cfg, 6144, 2048, 3, true);
      cycles.push_back(r.stats.total[sim::Stat::cycles]);
      EXPECT_LE(double(cycles.back()), 1.03 * double(r.weight_bytes) / cfg.ddr_bytes_per_cycle())
          << gbps << " GB/s, " << pe << ", T " << tiles.back();
    }
    for (size_t i = 1; i < cycles.size(); ++i) {
      EXPECT_EQ(tiles[i], tiles[0]) << gbps << " GB/s";
      EXPECT_EQ(cycles[i], cycles[0]) << gbps << " GB/s";
    }
  }
  EXPECT_GT(gemv_tile_cols(sim::Config::make("qc-u", {"ddr_gbps=512", "pe_rows=64", "pe_cols=64"})), 1024u);
}

// The call's start-up hidden behind other work: the same values, bit for bit; the call
// itself (after the prefetch and the work) shorter than a plain call.
TEST(Gemv, PrefetchedCallGivesTheSameValuesAndStartsSooner) {
  for (const Shape& s : {Shape{"mini", 37, 384}, Shape{"qc-u", 1500, 256}, Shape{"qc-u", 2048, 2048}}) {
    sim::Config cfg = sim::Config::make(s.preset, {});
    GemvRun plain = run_gemv(cfg, s.n, s.k, 7, false);
    GemvRun pre = run_gemv(cfg, s.n, s.k, 7, false, true, 0);
    ASSERT_EQ(pre.y, plain.y) << s.n << "x" << s.k;
    EXPECT_EQ(pre.stats.total[sim::Stat::ddr_bytes_read], plain.weight_bytes);
    // With 20,000 cycles of other work between, the whole run takes less than work + plain call.
    GemvRun hidden = run_gemv(cfg, s.n, s.k, 7, true, true, 20000);
    GemvRun work_only = run_gemv(cfg, s.n, s.k, 7, true, false, 0);
    EXPECT_LT(hidden.stats.total[sim::Stat::cycles], 20000 + work_only.stats.total[sim::Stat::cycles]) << s.n << "x" << s.k;
  }
}

// One DMA channel: two buffers (the next chunk streams into one while the other is consumed),
// chunks of several blocks. The same values bit for bit as four channels (every block in the
// same order), the prefetched start included; the decode shape within 2% of its DDR floor,
// where one buffer (the scratch for one block) leaves the DDR idle through every chunk's
// consumption.
// Parked chunks (GemvArgs::park_chunks: 2 of the 8 full chunks there can be, 6 of 64, also on 3
// DMA channels, whose phase-1 iterations take two rounds of them): the same
// values as the call streaming them all, and the call (after the park's copy and a wait long
// enough for it) faster by most of their DDR time; negative control: the park left uncopied (zeros in OCM)
// fails the gate. qc-u at 128 GB/s, with a narrow last tile (2,600 columns) and without.
TEST(Gemv, ParkedChunksGiveTheSameValuesAndSaveTheirDdrTime) {
  for (auto [s, channels] : {std::pair{Shape{"qc-u", 2600, 512}, "4"}, {Shape{"qc-u", 4096, 2048}, "4"},
                              {Shape{"qc-u", 4096, 2048}, "3"}}) {
    const sim::Config cfg = sim::Config::make(s.preset, {"ddr_gbps=128", std::string("dma_channels=") + channels});
    const uint32_t park = s.n == 2600 ? 2 : 6, between = 40000;
    const GemvRun plain = run_gemv(cfg, s.n, s.k, 7, false);
    const GemvRun parked = run_gemv(cfg, s.n, s.k, 7, false, false, between, 0, park);
    EXPECT_EQ(parked.y, plain.y) << s.n << "x" << s.k;
    EXPECT_EQ(parked.stats.total[sim::Stat::ddr_bytes_read], plain.stats.total[sim::Stat::ddr_bytes_read]);
    const GemvRun uncopied = run_gemv(cfg, s.n, s.k, 7, false, false, between, 0, park, false);
    EXPECT_LT(compare(uncopied.y, uncopied.ref).cosine, 0.9999) << s.n << "x" << s.k;
    const double chunk_ddr = double(gemv_tile_cols(cfg)) * kGemvColumnBlockBytes / cfg.ddr_bytes_per_cycle();
    const uint64_t with = run_gemv(cfg, s.n, s.k, 7, true, false, between, 0, park).stats.total[sim::Stat::cycles];
    const uint64_t without = run_gemv(cfg, s.n, s.k, 7, true, false, between).stats.total[sim::Stat::cycles];
    EXPECT_LT(double(with), double(without) - 0.8 * park * chunk_ddr) << s.n << "x" << s.k;
    std::printf("gemv %ux%u on %s channels, %u chunks parked: %llu cycles, streamed %llu\n", s.n, s.k, channels, park,
                (unsigned long long)with, (unsigned long long)without);
  }
}

TEST(Gemv, OneChannelStreamsIntoTwoBuffers) {
  for (const Shape& s : {Shape{"mini", 37, 384}, Shape{"qc-u", 1500, 256}, Shape{"qc-u", 2048, 2048}}) {
    const sim::Config four = sim::Config::make(s.preset, {}), one = sim::Config::make(s.preset, {"dma_channels=1"});
    const GemvRun ref = run_gemv(four, s.n, s.k, 7, false);
    EXPECT_EQ(run_gemv(one, s.n, s.k, 7, false).y, ref.y) << s.n << "x" << s.k;
    EXPECT_EQ(run_gemv(one, s.n, s.k, 7, false, true, 0).y, ref.y) << s.n << "x" << s.k << ", prefetched";
  }
  const sim::Config one = sim::Config::make("qc-u", {"dma_channels=1"});
  GemvArgs a;
  a.n = 6144;
  a.k = 2048;
  a.scratch_bytes = 1u << 30;
  const GemvTiling tl = gemv_tiling(one, a);
  EXPECT_EQ(tl.channels, 1u);
  EXPECT_EQ(tl.buffers, 2u);
  EXPECT_GT(tl.chunk_blocks, 1u);
  const GemvRun two = run_gemv(one, 6144, 2048, 3, true);
  const double floor = double(two.weight_bytes) / one.ddr_bytes_per_cycle();
  const uint64_t cycles = two.stats.total[sim::Stat::cycles];
  EXPECT_LE(double(cycles), 1.02 * floor) << cycles << " cycles, DDR floor " << floor;
  const uint32_t one_block = uint32_t(gemv_scratch_bytes(one, 1));
  const uint64_t single = run_gemv(one, 6144, 2048, 3, true, false, 0, one_block).stats.total[sim::Stat::cycles];
  EXPECT_GT(double(single), 1.05 * floor) << single << " cycles with one buffer";
  std::printf("gemv 2048->6144 on one DMA channel: two buffers %.4f x the DDR floor, one %.4f x\n",
              double(cycles) / floor, double(single) / floor);
}

}  // namespace
}  // namespace gpnpu::kernels::test
