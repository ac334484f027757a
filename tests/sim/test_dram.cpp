// The DRAM model (sim/dram.h, docs/dram.md), issue 14:
// - acceptance 1: access patterns against the analytic figure computed here from the
//   preset's timings, each with a negative control that changes the timing the
//   figure depends on (the measured figure must then miss the unchanged analytic one);
// - acceptance 5: DRAM config errors;
// - the model through the platform: timing-only = functional with ddr_model = dram,
//   stats by name and per channel, the ideal port unchanged by default.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>

#include "isa/error.h"
#include "sim/dram.h"
#include "sim/run.h"
#include "sim/stats.h"
#include "sim_test_util.h"

using namespace gpnpu;
using namespace gpnpu::sim;

namespace {

std::vector<std::string> with_dram(const std::string& preset, std::vector<std::string> sets) {
  sets.insert(sets.begin(), {"ddr_model=dram", "dram=" + preset});
  return sets;
}
DramSpec spec(const std::string& preset, const std::vector<std::string>& sets = {}) {
  return DramSpec::from(Config::make("qc-u", with_dram(preset, sets)));
}

// Byte address of a burst from its fields (the inverse of the model's mapping).
uint64_t address(const DramSpec& s, uint64_t ch, uint64_t rank, uint64_t group, uint64_t bank, uint64_t row,
                 uint64_t col) {
  uint64_t v[DramSpec::kFields] = {};
  v[DramSpec::Ch] = ch, v[DramSpec::Ra] = rank, v[DramSpec::Bg] = group, v[DramSpec::Ba] = bank,
  v[DramSpec::Ro] = row, v[DramSpec::Co] = col;
  uint64_t g = 0;
  for (int f = 0; f < DramSpec::kFields; ++f) g |= v[f] << s.shift[f];
  return g * s.burst_bytes;
}

// DRAM clocks from the model's start to a request's completion (latency removed).
double dram_clocks(const DramSpec& s, Cycles done) { return double(s.clock.to_other(done - s.ctrl_latency)); }

// A sequential read stream of `bytes` in 256 KiB requests, all at cycle 0: the
// fraction of the peak it reaches.
double stream_efficiency(const DramSpec& s, uint64_t bytes = 32ull << 20) {
  DramModel m(s, 0);
  Cycles done = 0;
  for (uint64_t a = 0; a < bytes; a += 256 << 10) done = std::max(done, m.request(0, a, 256 << 10, false));
  const double clocks = dram_clocks(s, done);
  return double(bytes) / (clocks * s.channels * s.burst_bytes / s.tBURST);
}

// |measured - analytic| <= tol * analytic, printed.
bool near(const char* what, double measured, double analytic, double tol) {
  const bool ok = std::fabs(measured - analytic) <= tol * analytic;
  std::printf("%-44s measured %.5g analytic %.5g (%+.2f%%, tolerance %.0f%%)%s\n", what, measured, analytic,
              100 * (measured / analytic - 1), 100 * tol, ok ? "" : "  <- outside");
  return ok;
}

// ---- acceptance 1: validation against analytic figures ----------------------------

// Sequential reads: bursts back to back (tCCD = tBURST; bank groups interleaved where
// tCCD_L > tBURST), row switches hidden behind other banks, and once per tREFI the
// stream stops: the last RD, tRTP to PRE, tRP to REF, tRFC, then ACT and tRCD to the
// next RD, minus the one burst slot it had anyway.
double stream_analytic(const DramSpec& s) {
  return 1.0 - double(s.tRTP + s.tRP + s.tRFC + s.tRCD - s.tBURST) / s.tREFI;
}

TEST(DramValidation, SequentialStreamEfficiencyWithin2Percent) {
  for (const char* preset : {"lpddr4x-4266-x64", "ddr4-3200-x64", "ddr5-4800-2x32"}) {
    SCOPED_TRACE(preset);
    const DramSpec s = spec(preset);
    const double analytic = stream_analytic(s);
    EXPECT_TRUE(near(fmt::format("{} sequential stream / peak", preset).c_str(), stream_efficiency(s), analytic, 0.02));
    // Negative control: twice the refresh cycle time moves the figure out of the band.
    const DramSpec slow = spec(preset, {fmt::format("dram.tRFC={}", 2 * s.tRFC)});
    EXPECT_FALSE(near("  negative control: tRFC x 2", stream_efficiency(slow), analytic, 0.02));
  }
}

TEST(DramValidation, RefreshShareIsTrfcOverTrefiWithin1Percent) {
  for (const char* preset : {"lpddr4x-4266-x64", "ddr4-3200-x64"}) {
    SCOPED_TRACE(preset);
    auto share = [](const DramSpec& s) {
      DramModel m(s, 0);
      Cycles done = 0;
      for (uint64_t a = 0; a < (32ull << 20); a += 256 << 10) done = std::max(done, m.request(0, a, 256 << 10, false));
      m.advance(done);
      // Time channel 0's rank spends refreshing, over the elapsed time.
      return double(m.channel_counts()[0].v[DramCounts::refreshes]) * s.tRFC / dram_clocks(s, done);
    };
    const DramSpec s = spec(preset);
    const double analytic = double(s.tRFC) / s.tREFI;
    EXPECT_TRUE(near(fmt::format("{} refresh share", preset).c_str(), share(s), analytic, 0.01));
    // What refresh costs the stream lies between tRFC / tREFI and that plus the
    // precharge and activate around it.
    const double cost = 1 - stream_efficiency(s) / stream_efficiency(spec(preset, {"dram.refresh=none"}));
    std::printf("  bandwidth lost to refresh %.4f, tRFC/tREFI %.4f\n", cost, analytic);
    EXPECT_GE(cost, analytic);
    EXPECT_LE(cost, double(s.tRFC + s.tRP + s.tRTP + s.tRCD) / s.tREFI);
    // Negative control: a shorter interval refreshes more often.
    const DramSpec often = spec(preset, {fmt::format("dram.tREFI={}", s.tREFI * 3 / 4)});
    EXPECT_FALSE(near("  negative control: tREFI x 3/4", share(often), analytic, 0.01));
  }
}

// 64-byte reads to random rows, the banks taken in turn: every access activates a
// row, so a channel does one access per max(tRRD, tFAW / 4, tRC / banks, tBURST).
double random_clocks_per_access(const DramSpec& s, uint32_t n) {
  DramModel m(s, 0);
  std::mt19937_64 rng(7);
  Cycles done = 0;
  const uint32_t nb = s.bankgroups * s.banks;
  for (uint32_t i = 0; i < n; ++i) {
    const uint64_t row = rng() % s.rows;
    done = std::max(done, m.request(0, address(s, 0, 0, 0, i % nb, row, 0), 64, false));
  }
  return dram_clocks(s, done) / n;
}
double random_analytic(const DramSpec& s) {
  return std::max({double(s.tRRD_S), s.tFAW / 4.0, double(s.tRC) / (s.bankgroups * s.banks), double(s.tBURST)});
}

TEST(DramValidation, RandomReadsBoundByTrrdTfawTrcWithin5Percent) {
  // The three bounds, each made the binding one in turn (refresh off: its share is
  // the test above).
  struct Case {
    const char* what;
    std::vector<std::string> sets, negative;
  } cases[] = {
      {"tRRD-bound (preset)", {"dram.refresh=none"}, {"dram.refresh=none", "dram.tRRD_S=33", "dram.tRRD_L=33"}},
      {"tFAW-bound", {"dram.refresh=none", "dram.tRRD_S=10", "dram.tRRD_L=10", "dram.tFAW=120"},
       {"dram.refresh=none", "dram.tRRD_S=10", "dram.tRRD_L=10", "dram.tFAW=180"}},
      {"tRC-bound", {"dram.refresh=none", "dram.tRC=320"}, {"dram.refresh=none", "dram.tRC=480"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const DramSpec s = spec("lpddr4x-4266-x64", c.sets);
    const double analytic = random_analytic(s);
    EXPECT_TRUE(near(fmt::format("random 64 B reads, {}: clocks per access", c.what).c_str(),
                     random_clocks_per_access(s, 4000), analytic, 0.05));
    EXPECT_FALSE(near("  negative control", random_clocks_per_access(spec("lpddr4x-4266-x64", c.negative), 4000),
                      analytic, 0.05));
  }
}

// One burst read, one written, alternately, in the open row of one bank: a pair
// costs the read-to-write turnaround (tRTW, or the data bus if longer), the write's
// latency and burst, and the write-to-read turnaround tWTR.
double rw_clocks_per_pair(const DramSpec& s, uint32_t pairs) {
  DramModel m(s, 0);
  Cycles done = 0;
  for (uint32_t i = 0; i < pairs; ++i) {
    done = std::max(done, m.request(0, address(s, 0, 0, 0, 0, 5, (2 * i) % 64), s.burst_bytes, false));
    done = std::max(done, m.request(0, address(s, 0, 0, 0, 0, 5, (2 * i + 1) % 64), s.burst_bytes, true));
  }
  EXPECT_EQ(m.channel_counts()[0].v[DramCounts::turnarounds], 2u * pairs - 1);
  return dram_clocks(s, done) / pairs;
}

TEST(DramValidation, ReadWriteAlternationPaysTwtrAndTrtw) {
  // Writes are not posted here (dram.write_queue = 0): each pays its turnarounds.
  const std::vector<std::string> base = {"dram.refresh=none", "dram.write_queue=0"};
  auto with = [&](std::vector<std::string> more) {
    more.insert(more.begin(), base.begin(), base.end());
    return spec("lpddr4x-4266-x64", more);
  };
  const DramSpec s = with({});
  const double analytic =
      std::max<double>(s.tRTW, double(s.tCL + s.tBURST) - s.tCWL) + s.tCWL + s.tBURST + s.tWTR_L;
  EXPECT_TRUE(near("read/write alternation: clocks per pair", rw_clocks_per_pair(s, 2000), analytic, 0.02));
  EXPECT_FALSE(near("  negative control: tWTR + 20", rw_clocks_per_pair(with({"dram.tWTR_S=42", "dram.tWTR_L=42"}), 2000),
                    analytic, 0.02));
  EXPECT_FALSE(near("  negative control: tRTW + 20", rw_clocks_per_pair(with({"dram.tRTW=56"}), 2000), analytic, 0.02));
  // Posted writes (the preset's write queue) batch the writes: far fewer turnarounds.
  const DramSpec posted = spec("lpddr4x-4266-x64", {"dram.refresh=none"});
  DramModel m(posted, 0);
  for (uint32_t i = 0; i < 256; ++i) {
    m.request(0, address(posted, 0, 0, 0, 0, 5, (2 * i) % 64), posted.burst_bytes, false);
    m.request(0, address(posted, 0, 0, 0, 0, 5, (2 * i + 1) % 64), posted.burst_bytes, true);
  }
  m.advance(0);
  EXPECT_EQ(m.channel_counts()[0].v[DramCounts::writes], 256u);
  EXPECT_EQ(m.channel_counts()[0].v[DramCounts::turnarounds], 2u * (256 / posted.write_queue) - 1)
      << "one write batch per write_queue writes: two turnarounds each";
}

// Reads alternating between two rows of one bank: every access is a row conflict,
// PRE + ACT, one per tRC (or tRAS + tRP, or tRCD + tRTP + tRP if longer).
double conflict_clocks_per_access(const DramSpec& s, uint32_t n, DramCounts* counts = nullptr) {
  DramModel m(s, 0);
  Cycles done = 0;
  for (uint32_t i = 0; i < n; ++i) done = std::max(done, m.request(0, address(s, 0, 0, 0, 3, 10 + i % 2, 0), s.burst_bytes, false));
  if (counts) *counts = m.channel_counts()[0];
  return dram_clocks(s, done) / n;
}

TEST(DramValidation, BankConflictPaysTrcPerAccess) {
  const DramSpec s = spec("lpddr4x-4266-x64", {"dram.refresh=none"});
  const double analytic = std::max({s.tRC, s.tRAS + s.tRP, s.tRCD + s.tRTP + s.tRP});
  DramCounts n;
  EXPECT_TRUE(near("bank conflicts: clocks per access", conflict_clocks_per_access(s, 2000, &n), analytic, 0.02));
  EXPECT_EQ(n.v[DramCounts::row_conflicts], 1999u);
  EXPECT_EQ(n.v[DramCounts::row_misses], 1u);
  EXPECT_EQ(n.v[DramCounts::activates], 2000u);
  EXPECT_EQ(n.v[DramCounts::row_hits], 0u);
  EXPECT_FALSE(near("  negative control: tRC + 60",
                    conflict_clocks_per_access(spec("lpddr4x-4266-x64", {"dram.refresh=none", "dram.tRC=189"}), 2000),
                    analytic, 0.02));
}

// ---- the model's own behaviour ------------------------------------------------------

TEST(DramModel, PeakIsChannelsTimesWidthTimesDataRate) {
  struct Want {
    const char* preset;
    double gbps;
  } wants[] = {{"lpddr4x-4266-x64", 34.128}, {"lpddr5-6400-x64", 51.2}, {"lpddr5x-8533-x64", 68.26},
               {"ddr4-3200-x64", 25.6},      {"ddr5-4800-2x32", 38.4}};
  for (const Want& w : wants) {
    const DramSpec s = spec(w.preset);
    EXPECT_NEAR(s.peak_gbps(), w.gbps, 0.01) << w.preset;
    EXPECT_NEAR(s.peak_bytes_per_cycle(), w.gbps / 1.7, 0.01) << w.preset;
    const Config cfg = Config::make("qc-u", with_dram(w.preset, {}));
    EXPECT_DOUBLE_EQ(cfg.ddr_bytes_per_cycle(), s.peak_bytes_per_cycle()) << "the roofline is the preset's peak";
    const double sustained = sustained_bytes_per_cycle(s);
    std::printf("%-18s peak %.3f GB/s, sustained sequential %.2f%%\n", w.preset, s.peak_gbps(),
                100 * sustained / s.peak_bytes_per_cycle());
    EXPECT_LT(sustained, s.peak_bytes_per_cycle());
    EXPECT_GT(sustained, 0.8 * s.peak_bytes_per_cycle());
  }
}

TEST(DramModel, DefaultsAreTheLpddr4xPreset) {
  Config a = Config::make("qc-u", {}), b = Config::make("qc-u", {"dram=lpddr4x-4266-x64"});
  EXPECT_EQ(a.to_json(), b.to_json());
  EXPECT_EQ(a.ddr_model, "ideal");
}

TEST(DramModel, SetAfterPresetOverridesAndPresetResets) {
  Config c = Config::make("qc-u", with_dram("lpddr5-6400-x64", {"dram.tRCD=21"}));
  EXPECT_EQ(c.dram_tRCD, 21u);
  EXPECT_EQ(c.dram_channels, 4u);
  Config d = Config::make("qc-u", with_dram("lpddr5-6400-x64", {"dram.tRCD=21", "dram=ddr4-3200-x64"}));
  EXPECT_EQ(d.dram_tRCD, 22u) << "loading a preset sets every dram.* key";
  EXPECT_EQ(d.dram_channels, 1u);
}

TEST(DramModel, ClosePagePrechargesAfterEachRequest) {
  // The same row read twice: a hit with the open page, a miss (ACT again) closed.
  for (bool close : {false, true}) {
    const DramSpec s =
        spec("lpddr4x-4266-x64", {"dram.refresh=none", close ? "dram.page_policy=close" : "dram.page_policy=open"});
    DramModel m(s, 0);
    m.request(0, address(s, 0, 0, 0, 2, 7, 0), s.burst_bytes, false);
    m.request(1000, address(s, 0, 0, 0, 2, 7, 1), s.burst_bytes, false);
    const DramCounts& n = m.channel_counts()[0];
    EXPECT_EQ(n.v[DramCounts::row_hits], close ? 0u : 1u);
    EXPECT_EQ(n.v[DramCounts::activates], close ? 2u : 1u);
    EXPECT_EQ(n.v[DramCounts::precharges], close ? 2u : 0u);
  }
}

TEST(DramModel, PerBankRefreshBlocksOneBankAtATime) {
  // LPDDR5 per-bank refresh: a stream loses much less than with all-bank refresh.
  const DramSpec pb = spec("lpddr5-6400-x64"), ab = spec("lpddr5-6400-x64", {"dram.refresh=all"});
  const double e_pb = stream_efficiency(pb), e_ab = stream_efficiency(ab),
               e_none = stream_efficiency(spec("lpddr5-6400-x64", {"dram.refresh=none"}));
  std::printf("LPDDR5-6400 stream: per-bank %.4f, all-bank %.4f, none %.4f of peak\n", e_pb, e_ab, e_none);
  EXPECT_GT(e_pb, e_ab);
  EXPECT_LE(e_pb, e_none);
  DramModel m(pb, 0);
  m.advance(Cycles(pb.clock.to_core(pb.tREFI)));  // one tREFI: every bank once
  EXPECT_EQ(m.channel_counts()[0].v[DramCounts::refreshes], uint64_t(pb.bankgroups * pb.banks));
}

TEST(DramModel, FrFcfsServesARowHitBeforeAnOlderMiss) {
  // One request spanning two spans of bank rows: the younger part hits an open row.
  auto run = [](uint32_t cap) {
    const DramSpec c = spec("lpddr4x-4266-x64", {"dram.refresh=none", fmt::format("dram.fr_cap={}", cap)});
    DramModel m(c, 0);
    // Open row 0 of bank 1 in every channel (the span after bank 0's row 0 in RoBaBgRaCoCh).
    m.request(0, address(c, 0, 0, 0, 1, 0, 0), c.channels * c.burst_bytes, false);
    // Bank 0 row 0 (a miss) then bank 1 row 0 (a hit): 2 rows x 4 channels.
    const uint64_t row = c.row_bytes * c.channels;
    return m.request(0, address(c, 0, 0, 0, 0, 0, 0), 2 * row, false);
  };
  const Cycles fcfs = run(0), fr = run(16);
  std::printf("FR-FCFS: %llu cycles, FCFS %llu\n", (unsigned long long)fr, (unsigned long long)fcfs);
  EXPECT_LT(fr, fcfs) << "the hit first hides the miss's activate";
}

// ---- acceptance 2: a published figure ----------------------------------------------

// DRAMsim3's "stream" generator (src/cpu.cc StreamCPU: stream-add, read a[i] and
// b[i], write c[i], 64 B each, three arrays at random addresses, 2 Mi elements)
// on its configs/DDR4_8Gb_x8_3200.ini, our ddr4-3200-x64 preset's source, with its
// address mapping (rochrababgco). DRAMsim3 reports 16.8452 GB/s for
// `dramsim3main configs/DDR4_8Gb_x8_3200.ini --stream stream -c 100000`
// (umd-memsys/DRAMsim3 issue 54). docs/dram.md discusses the difference.
TEST(DramCrossCheck, Dramsim3StreamAddOnDdr4_3200) {
  const DramSpec s = spec("ddr4-3200-x64", {"dram.mapping=RoChRaBaBgCo"});
  DramModel m(s, 0);
  std::mt19937_64 gen(1);
  Cycles done = 0;
  uint64_t n = 0;
  for (int set = 0; set < 4; ++set) {
    const uint64_t a = gen() % s.capacity & ~63ull, b = gen() % s.capacity & ~63ull, c = gen() % s.capacity & ~63ull;
    for (uint64_t off = 0; off < (2ull << 20) && n < 300000; off += 64, n += 3) {
      done = std::max(done, m.request(0, (a + off) % s.capacity, 64, false));
      done = std::max(done, m.request(0, (b + off) % s.capacity, 64, false));
      done = std::max(done, m.request(0, (c + off) % s.capacity, 64, true));
    }
  }
  const double gbps = double(n) * 64 / (double(done) / 1.7);
  std::printf("stream-add on DDR4-3200: %.2f GB/s here, 16.85 GB/s in DRAMsim3 (%+.1f%%)\n", gbps, 100 * (gbps / 16.8452 - 1));
  EXPECT_NEAR(gbps, 16.8452, 0.2 * 16.8452);
}

// ---- through the platform ------------------------------------------------------------

TEST(DramPlatform, TimingOnlyEqualsFunctionalWithDram) {
  for (const char* preset : {"lpddr4x-4266-x64", "lpddr5-6400-x64"}) {
    const Config cfg = Config::make("qc-u", with_dram(preset, {}));
    for (const char* prog : {"examples/asm/ddr_stream.s", "tests/sim/programs/dma_3d.s", "tests/sim/programs/scatter_gather.s"}) {
      SCOPED_TRACE(std::string(preset) + " " + prog);
      isa::Program p = isa::Program::load(test::source_path(prog));
      Stats full = run_program(p, cfg, false), fast = run_program(p, cfg, true);
      EXPECT_EQ(full.total[Stat::cycles], fast.total[Stat::cycles]);
      EXPECT_EQ(full.to_json(cfg, false), fast.to_json(cfg, false));
    }
  }
}

TEST(DramPlatform, DdrStreamReachesTheSustainedCeiling) {
  isa::Program prog = isa::Program::load(test::source_path("examples/asm/ddr_stream.s"));
  for (const char* preset : {"lpddr4x-4266-x64", "lpddr5-6400-x64", "ddr4-3200-x64"}) {
    const Config cfg = Config::make("qc-u", with_dram(preset, {}));
    const DramSpec s = DramSpec::from(cfg);
    Stats st = run_program(prog, cfg, true);
    Stats::Region r;
    for (const Stats::Region& x : st.regions())
      if (x.name == "stream") r = x;
    const double bpc = double(r.counters[Stat::ddr_bytes_read]) / double(r.counters[Stat::cycles]);
    const double hits = double(r.counters[Stat::dram_row_hits]) / double(r.counters[Stat::dram_reads]);
    std::printf("ddr_stream %-18s %.3f B/cycle = %.2f%% of peak (sustained ceiling %.2f%%), row hits %.2f%%\n", preset,
                bpc, 100 * bpc / s.peak_bytes_per_cycle(), 100 * sustained_bytes_per_cycle(s) / s.peak_bytes_per_cycle(),
                100 * hits);
    EXPECT_EQ(r.counters[Stat::dram_reads] * s.burst_bytes, r.counters[Stat::ddr_bytes_read]);
    EXPECT_GE(bpc, 0.97 * sustained_bytes_per_cycle(s));
    EXPECT_LE(bpc, s.peak_bytes_per_cycle());
    EXPECT_GT(hits, 0.95);
    uint64_t per_channel = 0;
    for (const DramCounts& c : st.dram_channels) per_channel += c.v[DramCounts::reads];
    EXPECT_EQ(per_channel, st.total[Stat::dram_reads]);
  }
}

TEST(DramPlatform, IdealPortIsTheDefaultAndUnchanged) {
  isa::Program prog = isa::Program::load(test::source_path("examples/asm/ddr_stream.s"));
  const Config ideal = Config::make("qc-u", {});
  Stats a = run_program(prog, ideal, true);
  EXPECT_EQ(a.total[Stat::dram_reads], 0u);
  EXPECT_EQ(a.to_json(ideal, true).find("sustained_bytes_per_cycle"), std::string::npos) << "no DRAM section";
  Stats b = run_program(prog, Config::make("qc-u", {"ddr_model=dram"}), true);
  EXPECT_NE(a.total[Stat::cycles], b.total[Stat::cycles]) << "the DRAM model must change the timing";
}

TEST(DramPlatform, SweepTakesThePresetAsAnAxis) {
  const std::string dir = test::scratch_dir("dram_sweep");
  auto r = test::run_cli(fmt::format("sweep --model synthetic:tiny --workload decode --set ddr_model=dram "
                                     "--set dram=lpddr4x-4266-x64,lpddr5-6400-x64 -j 1 --out {}/s.h5",
                                     dir));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string csv = test::read_file(dir + "/s.csv");
  EXPECT_NE(csv.find("decode_dram_row_hit_rate"), std::string::npos) << csv;
  EXPECT_NE(csv.find("lpddr4x-4266-x64"), std::string::npos) << csv;
  EXPECT_NE(csv.find("lpddr5-6400-x64"), std::string::npos) << csv;
}

// ---- acceptance 5: bad DRAM settings -------------------------------------------------

std::string config_error(const std::vector<std::string>& sets) {
  try {
    Config::make("qc-u", sets);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(DramErrors, UnknownPresetListsTheKnownOnes) {
  const std::string e = config_error({"dram=lpddr9"});
  EXPECT_NE(e.find("unknown DRAM preset 'lpddr9'"), std::string::npos) << e;
  EXPECT_NE(e.find("ddr4-3200-x64, ddr5-4800-2x32, lpddr4x-4266-x64, lpddr5-6400-x64, lpddr5x-8533-x64"),
            std::string::npos)
      << e;
}

TEST(DramErrors, PresetFileSetsOnlyDramKeys) {
  const std::string dir = test::scratch_dir("dram_preset");
  test::write_file(dir + "/bad.cfg", "dram.tRCD = 40\npe_rows = 8\n");
  const std::string e = config_error({"dram=" + dir + "/bad.cfg"});
  EXPECT_NE(e.find("bad.cfg:2: a DRAM preset sets only dram.* keys, not 'pe_rows'"), std::string::npos) << e;
}

TEST(DramErrors, TimingsThatContradictEachOther) {
  struct Case {
    std::vector<std::string> sets;
    const char* want;
  } cases[] = {
      {{"dram.tRAS=30"}, "config key 'dram.tRAS': tRAS = 30 is below tRCD = 39"},
      {{"dram.tRC=100"}, "config key 'dram.tRC': tRC = 100 is below tRAS + tRP = 90 + 39"},
      {{"dram.tREFI=811"}, "config key 'dram.tREFI': tREFI = 811 is not above tRFC = 811"},
      {{"dram=lpddr5-6400-x64", "dram.tRFCpb=200"}, "tREFI / banks = 3124 / 16 is not above tRFCpb = 200"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> sets = c.sets;
    sets.insert(sets.begin(), "ddr_model=dram");
    const std::string e = config_error(sets);
    EXPECT_NE(e.find(c.want), std::string::npos) << e;
    // Not checked while the ideal port is in use.
    EXPECT_EQ(config_error(c.sets), "");
  }
}

TEST(DramErrors, MappingThatDoesNotCoverTheCapacity) {
  std::string e = config_error({"ddr_model=dram", "dram.rows=16384"});
  EXPECT_NE(e.find("config key 'dram.mapping': the mapping covers 1073741824 bytes (4 channels x 1 ranks "
                   "x 1 bank groups x 8 banks x 16384 rows x 2048 bytes) but ddr_bytes is 3221225472"),
            std::string::npos)
      << e;
  e = config_error({"ddr_model=dram", "dram.mapping=RoBaBgRaCo"});
  EXPECT_NE(e.find("config key 'dram.mapping': 'RoBaBgRaCo' has 10 characters, not 12 (six fields)"), std::string::npos)
      << e;
  e = config_error({"ddr_model=dram", "dram.mapping=RoBaBgRaCoRo"});
  EXPECT_NE(e.find("'RoBaBgRaCoRo' names Ro twice"), std::string::npos) << e;
  e = config_error({"ddr_model=dram", "dram.mapping=RoBaBgRaCoXx"});
  EXPECT_NE(e.find("has an unknown field 'Xx'"), std::string::npos) << e;
}

TEST(DramErrors, ChannelCountThatDoesNotDivideTheBus) {
  std::string e = config_error({"ddr_model=dram", "dram.channels=16"});
  EXPECT_NE(e.find("config key 'dram.channels': 16 channels do not divide the 64-bit bus "
                   "(dram.bus_bits) into whole bytes"),
            std::string::npos)
      << e;
  e = config_error({"ddr_model=dram", "dram.channels=3"});
  EXPECT_NE(e.find("config key 'dram.channels': 3 is not a power of two in 1..64"), std::string::npos) << e;
}

TEST(DramErrors, BadWords) {
  EXPECT_NE(config_error({"ddr_model=hbm"}).find("config key 'ddr_model': 'hbm' is not ideal or dram"), std::string::npos);
  EXPECT_NE(config_error({"ddr_model=dram", "dram.page_policy=lazy"})
                .find("config key 'dram.page_policy': 'lazy' is not open or close"),
            std::string::npos);
  EXPECT_NE(config_error({"ddr_model=dram", "dram.refresh=sometimes"})
                .find("config key 'dram.refresh': 'sometimes' is not all, perbank or none"),
            std::string::npos);
}

TEST(DramErrors, CliPrintsTheMessageAndExits1) {
  auto r = test::run_cli("config --set ddr_model=dram --set dram=lpddr9");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("error: config key 'dram' (--set): unknown DRAM preset 'lpddr9'"), std::string::npos) << r.err;
}

}  // namespace
