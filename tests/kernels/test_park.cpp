// LRM parking (kernels/park.h): a run of OCM bytes parked in the PEs' LRM and unparked to
// another place comes back bit for bit (whole rounds and a last partial one, on the 4x4 mini
// array and on qc-u; rows of a strided run come back contiguous); the OCM past the run is
// left alone; negative control: unparking from an LRM offset one register off does not give
// the run back. Timing-only cycles equal the functional run's.
#include "kernels/park.h"

#include <cstring>

#include "isa/error.h"
#include "kernel_harness.h"
#include "sim/run.h"

namespace gpnpu::kernels::test {
namespace {

struct ParkRun {
  std::vector<uint8_t> src, want, back, gap;  // OCM as written, the run's rows, what came back, OCM past it
  uint64_t cycles = 0;
};

// Parks `rows` rows of bytes / rows each, `stride` apart from OCM 0 (0: contiguous), and
// unparks them contiguous past the run and a 256-byte gap.
ParkRun run_park(const char* preset, uint32_t bytes, uint32_t lrm, int32_t unpark_shift, bool timing_only,
                 uint32_t rows = 1, uint32_t stride = 0) {
  const sim::Config cfg = sim::Config::make(preset, {});
  const uint32_t row = bytes / rows, span = stride ? (rows - 1) * stride + row : bytes, gap = 256;
  const LrmParkArgs park{.ocm = 0, .bytes = bytes, .lrm = lrm, .rows = rows, .stride = stride};
  LrmParkArgs unpark{.ocm = span + gap, .bytes = bytes, .lrm = uint32_t(int32_t(lrm) + unpark_shift)};
  Builder b;
  emit_lrm_slots(b, cfg, lrm_run_slots(cfg, park), true);
  emit_lrm_slots(b, cfg, lrm_run_slots(cfg, unpark), false);
  b.op("halt");
  isa::Program prog = b.finish();
  sim::Platform& p = sim::Platform::get();
  p.configure(cfg, timing_only);
  ParkRun r;
  std::mt19937 rng(bytes + lrm + rows);
  r.src.resize(span + gap);
  for (uint8_t& v : r.src) v = uint8_t(rng());
  for (uint32_t i = 0; i < rows; ++i) {
    const auto at = r.src.begin() + i * (stride ? stride : row);
    r.want.insert(r.want.end(), at, at + row);
  }
  if (!timing_only) p.ocm().write(0, r.src.data(), r.src.size());
  r.cycles = p.run(prog).total[sim::Stat::cycles];
  if (timing_only) return r;
  r.back.resize(bytes);
  p.ocm().read(unpark.ocm, r.back.data(), bytes);
  r.gap.resize(gap);
  p.ocm().read(span, r.gap.data(), gap);
  return r;
}

struct ParkShape {
  const char* preset;
  uint32_t bytes, lrm, rows = 1, stride = 0;
};
class ParkShapes : public ::testing::TestWithParam<ParkShape> {};

TEST_P(ParkShapes, UnparkGivesTheRunBackBitForBit) {
  const ParkShape s = GetParam();
  const sim::Config cfg = sim::Config::make(s.preset, {});
  ParkRun r = run_park(s.preset, s.bytes, s.lrm, 0, false, s.rows, s.stride);
  EXPECT_EQ(r.back, r.want);
  const uint32_t span = s.stride ? (s.rows - 1) * s.stride + s.bytes / s.rows : s.bytes;
  EXPECT_EQ(0, std::memcmp(r.gap.data(), r.src.data() + span, r.gap.size())) << "the OCM past the run changed";
  EXPECT_EQ(run_park(s.preset, s.bytes, s.lrm, 0, true, s.rows, s.stride).cycles, r.cycles);
  std::printf("park %s %u bytes (%u rows, stride %u) at LRM %u (%u a PE): %llu cycles there and back\n", s.preset,
              s.bytes, s.rows, s.stride, s.lrm, lrm_park_bytes(cfg, s.bytes), (unsigned long long)r.cycles);
}

// mini: 16 PEs (1 KiB a round): whole rounds, a partial last round, one PE's worth, rows of
// 192 bytes 320 apart (rows straddle rounds); qc-u: the 2B prefill's residual (128 x 2,048
// fp16) above 3 KiB of LRM, and its attention output (the q columns of its q|k|v rows:
// 4,096 of every 8,192 bytes).
INSTANTIATE_TEST_SUITE_P(Shapes, ParkShapes,
                         ::testing::Values(ParkShape{"mini", 4096, 256}, ParkShape{"mini", 4096 + 5 * 64, 1024},
                                           ParkShape{"mini", 64, 0}, ParkShape{"mini", 40 * 192, 512, 40, 320},
                                           ParkShape{"qc-u", 128 * 2048 * 2, 3072},
                                           ParkShape{"qc-u", 128 * 4096, 0, 128, 8192}));

// Slots whose two sides differ (emit_lrm_slots): head-major rows [4 heads][4 rows][128 B] parked
// with one piece a half (PE 4h + r takes head h, row r: stride 128) and unparked row-major
// [4 rows][4 heads x 128 B] with one piece a head and half (stride 512): the transpose the image
// compiler's tower attention rows take. Every byte lands where the layout says.
TEST(Park, SlotsMoveHeadMajorRowsToRowMajor) {
  const sim::Config cfg = sim::Config::make("mini", {});  // 16 PEs
  const uint32_t heads = 4, rows = 4, hb = 128, src = 0, dst = 4096;
  std::vector<LrmSlot> in, out;
  for (uint32_t c = 0; c < hb / 64; ++c) {
    in.push_back({.lrm = 64 * c, .pieces = {{0, heads * rows, int64_t(src + 64 * c), hb}}});
    LrmSlot o{.lrm = 64 * c, .pieces = {}};
    for (uint32_t h = 0; h < heads; ++h)
      o.pieces.push_back({h * rows, (h + 1) * rows, int64_t(dst + h * hb + 64 * c) - int64_t(h * rows) * heads * hb,
                          heads * hb});
    out.push_back(o);
  }
  Builder b;
  emit_lrm_slots(b, cfg, in, true);
  emit_lrm_slots(b, cfg, out, false);
  b.op("halt");
  isa::Program prog = b.finish();
  sim::Platform& p = sim::Platform::get();
  p.configure(cfg, false);
  std::vector<uint8_t> hm(heads * rows * hb), rm(heads * rows * hb);
  std::mt19937 rng(7);
  for (uint8_t& v : hm) v = uint8_t(rng());
  p.ocm().write(src, hm.data(), hm.size());
  p.run(prog);
  p.ocm().read(dst, rm.data(), rm.size());
  for (uint32_t h = 0; h < heads; ++h)
    for (uint32_t r = 0; r < rows; ++r)
      EXPECT_EQ(0, std::memcmp(&rm[(r * heads + h) * hb], &hm[(h * rows + r) * hb], hb))
          << "head " << h << " row " << r;
  EXPECT_EQ(cost_lrm_slots(in).ocm_bytes, hm.size());
}

TEST(Park, NegativeControlUnparkOneRegisterOffDiffers) {
  ParkRun r = run_park("mini", 4096, 256, 64, false);
  EXPECT_NE(0, std::memcmp(r.back.data(), r.src.data(), 4096));
}

TEST(Park, BadArgumentsSayWhatAndWhere) {
  const sim::Config cfg = sim::Config::make("mini", {});
  EXPECT_THROW(lrm_run_slots(cfg, {.ocm = 0, .bytes = 100, .lrm = 0}), gpnpu::Error);  // not a multiple of 64
  EXPECT_THROW(lrm_run_slots(cfg, {.ocm = 0, .bytes = 64, .lrm = 32}), gpnpu::Error);  // LRM not aligned
  try {
    lrm_run_slots(cfg, {.ocm = 0, .bytes = 64 * 16 * 2, .lrm = uint32_t(cfg.lrm_bytes - 64)});
    FAIL() << "an LRM region past lrm_bytes must fail";
  } catch (const gpnpu::Error& e) {
    EXPECT_NE(std::string(e.what()).find("lrm_bytes"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace gpnpu::kernels::test
