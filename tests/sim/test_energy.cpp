// Energy and power (issue 15): the energy of examples/asm/mac_peak.s and ddr_stream.s
// equals event counts worked out here from the programs' text times the machine's
// table (acceptance 1), one changed table entry moves the total by exactly count x
// delta (the negative control), the power windows sum to the totals, timing-only runs
// count the same events, and bad energy keys and values are clear errors (acceptance 5).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "isa/error.h"
#include "sim/energy.h"
#include "sim/run.h"
#include "sim_test_util.h"

using namespace gpnpu;
using namespace gpnpu::sim;
using gpnpu::sim::test::read_file;
using gpnpu::sim::test::run_cli;
using gpnpu::sim::test::scratch_dir;
using gpnpu::sim::test::source_path;

namespace {

// Event counts of a program, by energy event name (the rest are zero).
using Counts = std::map<std::string, uint64_t>;

// mac_peak.s on a machine of `pes` PEs: 2 x 500 iterations of 8 vmac (fp16, then int8),
// each reading 3 vector registers (va is read and written) and writing 1, on every
// PE's 16 lanes; 4 vsplati (valu, one register written each).
Counts mac_peak_counts(uint64_t pes) {
  const uint64_t lanes = pes * 16, vmacs = 500 * 8;
  return {{"mac_f16", vmacs * lanes},
          {"mac_int8", vmacs * lanes},
          {"valu_op", 4 * lanes},
          {"vrf_read", 2 * vmacs * 3 * lanes},
          {"vrf_write", 2 * vmacs * lanes + 4 * lanes},
          // 2 vsplati, li, mark.begin, loop, 4000 vmac, mark.end; 2 vsplati, mark.begin,
          // loop, 4000 vmac, mark.end; halt
          {"instruction", 4006 + 4005 + 1}};
}

// ddr_stream.s: 64 rounds x 4 channels of one 256 KiB contiguous descriptor, DDR ->
// OCM (whole 64-byte bursts: no rounding).
Counts ddr_stream_counts() {
  const uint64_t bytes = 64ull * 4 * 262144;
  return {{"dma_descriptor", 256},
          {"ddr_read_byte", bytes},
          {"ocm_dma_write_byte", bytes},
          // 6 li, 4 x 8 fill, 5 li, mark.begin, loop, 64 x 12 body, dma.waitall, mark.end, halt
          {"instruction", 6 + 32 + 5 + 1 + 1 + 768 + 1 + 1 + 1}};
}

double table_value(const Config& cfg, const std::string& event) {
  return std::stod(cfg.get("energy." + event));
}

// The energy the test expects: its own counts times the table, in pJ per event, and
// static power (mW per PE, per MiB of OCM, DDR interface) times the run's time.
struct Expected {
  std::map<std::string, double> event_pj;
  double total_pj = 0;
};
Expected expected_energy(const Counts& counts, const Config& cfg, uint64_t cycles) {
  Expected e;
  for (const EnergyEvent& ev : energy_events()) {
    auto it = counts.find(ev.name);
    e.event_pj[ev.name] = it == counts.end() ? 0.0 : double(it->second) * table_value(cfg, ev.name);
    e.total_pj += e.event_pj[ev.name];
  }
  const double static_mw = double(cfg.pe_rows * cfg.pe_cols) * std::stod(cfg.get("power.pe_mw")) +
                           double(cfg.ocm_bytes) / 1048576.0 * std::stod(cfg.get("power.ocm_mw_per_mib")) +
                           std::stod(cfg.get("power.ddr_mw_per_gbps")) * cfg.ddr_gbps;
  e.total_pj += static_mw * 1e-3 * (double(cycles) / (cfg.clock_ghz * 1e9)) * 1e12;
  return e;
}

// The stats JSON's energy (what `gpnpu run --stats-json` writes for a run on `cfg`)
// against the expectation from the test's counts and the table of `table`.
::testing::AssertionResult energy_matches(const Stats& st, const Config& cfg, const Counts& counts,
                                          const Config& table) {
  nlohmann::json j = nlohmann::json::parse(st.to_json(cfg, false));
  Expected e = expected_energy(counts, table, st.total[Stat::cycles]);
  for (const auto& [name, pj] : e.event_pj)
    if (j["energy"]["events_pj"][name].get<double>() != pj)
      return ::testing::AssertionFailure() << "energy." << name << ": stats " << j["energy"]["events_pj"][name]
                                           << " pJ, counts x table " << pj << " pJ";
  const double got = j["energy"]["total_mj"].get<double>() * 1e9;
  if (std::abs(got - e.total_pj) > 1e-12 * e.total_pj)
    return ::testing::AssertionFailure() << "total " << got << " pJ, expected " << e.total_pj << " pJ";
  return ::testing::AssertionSuccess();
}

struct Case {
  const char* program;
  Counts counts;
  const char* changed;  // the table entry the negative control changes
};

std::vector<Case> cases(const Config& cfg) {
  return {{"examples/asm/mac_peak.s", mac_peak_counts(cfg.npe()), "mac_f16"},
          {"examples/asm/ddr_stream.s", ddr_stream_counts(), "ddr_read_byte"}};
}

TEST(Energy, ExamplesEqualCountsTimesTheTable) {
  const Config cfg = Config::make("qc-u", {});
  for (const Case& c : cases(cfg)) {
    SCOPED_TRACE(c.program);
    const Stats st = run_program(isa::Program::load(source_path(c.program)), cfg, false);
    EXPECT_TRUE(energy_matches(st, cfg, c.counts, cfg));
    const Energy e = energy_of(st.total, cfg);
    std::printf("%s: %.6f mJ in %llu cycles (%.3f W): DDR %.6f, OCM %.6f, MAC %.6f, other %.6f, static %.6f mJ\n",
                c.program, e.total_mj(), (unsigned long long)st.total[Stat::cycles], e.average_w(),
                e.group_pj(EnergyGroup::ddr) * 1e-9, e.group_pj(EnergyGroup::ocm) * 1e-9,
                e.group_pj(EnergyGroup::mac) * 1e-9, e.group_pj(EnergyGroup::other) * 1e-9, e.static_pj() * 1e-9);
  }
}

// Negative control: one table entry changed by delta moves the total by exactly
// count x delta, and the unchanged expectation no longer matches.
TEST(Energy, ChangingOneEntryMovesTheTotalByCountTimesDelta) {
  const Config base = Config::make("qc-u", {});
  for (const Case& c : cases(base)) {
    SCOPED_TRACE(c.program);
    const double delta = 0.25;
    const Config changed =
        Config::make("qc-u", {fmt::format("energy.{}={}", c.changed, table_value(base, c.changed) + delta)});
    const isa::Program prog = isa::Program::load(source_path(c.program));
    const Stats a = run_program(prog, base, true), b = run_program(prog, changed, true);
    ASSERT_EQ(a.total.v, b.total.v);  // the table changes no count and no cycle
    const double ea = energy_of(a.total, base).total_pj(), eb = energy_of(b.total, changed).total_pj();
    const double want = double(c.counts.at(c.changed)) * delta;
    EXPECT_NEAR(eb - ea, want, 1e-9 * want);
    EXPECT_TRUE(energy_matches(b, changed, c.counts, changed));
    EXPECT_FALSE(energy_matches(b, changed, c.counts, base));  // the old table's expectation fails
  }
}

TEST(Energy, TimingOnlyCountsTheSameEvents) {
  const Config cfg = Config::make("qc-u", {"power_window_cycles=1000"});
  for (const char* path : {"examples/asm/mac_peak.s", "examples/asm/ddr_stream.s", "tests/sim/programs/scatter_gather.s",
                           "tests/sim/programs/dma_3d.s"}) {
    SCOPED_TRACE(path);
    const isa::Program prog = isa::Program::load(source_path(path));
    const Stats full = run_program(prog, cfg, false), fast = run_program(prog, cfg, true);
    EXPECT_EQ(energy_of(full.total, cfg), energy_of(fast.total, cfg));
    EXPECT_EQ(full.power.bins, fast.power.bins);
    EXPECT_GT(energy_of(full.total, cfg).dynamic_pj(), 0.0);
  }
}

// Negative control of the comparison above: a program that breaks the timing-only rule
// (it branches on vext, which reads 0 there) runs other instructions, and the energy
// comparison sees it.
TEST(Energy, NegativeControlTimingOnlyRuleBrokenGivesOtherEnergy) {
  const char* text =
      "vsplati v1, 7\n"
      "vext x1, v1, 0\n"
      "beq x1, x0, skip\n"
      "vexp.f32 v2, v1\n"
      "skip: halt\n";
  const Config cfg = Config::make("mini", {});
  const Stats full = test::run_text(text, cfg, false).stats, fast = test::run_text(text, cfg, true).stats;
  EXPECT_NE(energy_of(full.total, cfg), energy_of(fast.total, cfg));
  EXPECT_EQ(full.total[Stat::sfu_lane_ops], 16u * 16u);  // mini: 16 PEs x 16 lanes
  EXPECT_EQ(fast.total[Stat::sfu_lane_ops], 0u);
}

// Every event lands in exactly one power window: the windows sum to the totals, and
// the windows' energy sums to the run's dynamic energy.
TEST(Energy, PowerWindowsSumToTheTotals) {
  const Config cfg = Config::make("qc-u", {"power_window_cycles=1000"});
  for (const char* path : {"examples/asm/mac_peak.s", "examples/asm/ddr_stream.s", "tests/sim/programs/scatter_gather.s",
                           "tests/sim/programs/dma_2d.s"}) {
    SCOPED_TRACE(path);
    const Stats st = run_program(isa::Program::load(source_path(path)), cfg, true);
    const Cycles cycles = st.total[Stat::cycles];
    EXPECT_LE(st.power.bins.size(), (cycles + 999) / 1000);
    for (const EnergyEvent& ev : energy_events()) {
      uint64_t sum = 0;
      for (const auto& b : st.power.bins) sum += b[int(ev.stat)];
      EXPECT_EQ(sum, st.total[ev.stat]) << ev.name;
    }
    const std::vector<double> w = st.window_watts(cfg);
    ASSERT_EQ(w.size(), (cycles + 999) / 1000);
    double joules = 0;
    for (size_t k = 0; k < w.size(); ++k) joules += w[k] * double(std::min<Cycles>(1000, cycles - k * 1000)) / (cfg.clock_ghz * 1e9);
    const Energy e = energy_of(st.total, cfg);
    EXPECT_NEAR(joules, e.total_pj() * 1e-12, 1e-9 * e.total_pj() * 1e-12);
    // The peak is the highest full window (none: shorter than one window).
    const double peak = st.peak_watts(cfg, w, 0, cycles);
    if (cycles < 1000) {
      EXPECT_TRUE(std::isnan(peak));
    } else {
      EXPECT_EQ(peak, *std::max_element(w.begin(), w.begin() + cycles / 1000));
    }
  }
}

// A DMA's bytes are spread over the cycles they take, not put at dma.start: the
// stream's first window holds only what can move in it, not its whole first queue.
TEST(Energy, DmaBytesLandWhereTheyMove) {
  const Config cfg = Config::make("qc-u", {"power_window_cycles=10000"});
  const Stats st = run_program(isa::Program::load(source_path("examples/asm/ddr_stream.s")), cfg, true);
  ASSERT_GE(st.power.bins.size(), 300u);
  // 8 descriptors (2 MiB) are queued in the first cycles: counted at dma.start, window 0
  // would hold 2 MiB. Spread from request to delivery it holds about what the port moves
  // in 10,000 cycles (188,235 bytes), plus the share of the runs still queued in the port.
  const uint64_t first = st.power.bins[0][int(Stat::ddr_io_bytes_read)];
  EXPECT_GT(first, 10000 * cfg.ddr_bytes_per_cycle());
  EXPECT_LT(first, 524288u);
}

TEST(Energy, StatsJsonAndCliCarryTheBreakdown) {
  const std::string dir = scratch_dir("energy_cli");
  auto r = run_cli(fmt::format("run {} --set power_window_cycles=1000 --stats-json {}/s.json --stats-h5 {}/s.h5",
                               source_path("examples/asm/mac_peak.s"), dir, dir));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("energy "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("peak "), std::string::npos) << r.out;
  nlohmann::json j = nlohmann::json::parse(read_file(dir + "/s.json"));
  for (const char* k : {"total_mj", "dynamic_mj", "static_mj", "average_w", "split_mj", "events_pj", "peak_w"})
    EXPECT_TRUE(j["energy"].contains(k)) << k;
  EXPECT_TRUE(j["regions"]["mac_fp16"]["energy"]["peak_w"].is_number());
  EXPECT_GT(j["regions"]["mac_fp16"]["energy"]["split_mj"]["mac"].get<double>(), 0.0);
  EXPECT_EQ(j["regions"]["mac_int8"]["macs_f16"].get<uint64_t>(), 0u);
  EXPECT_EQ(j["power"]["window_cycles"].get<uint64_t>(), 1000u);
  EXPECT_FALSE(j["power"]["windows_w"].empty());
  EXPECT_EQ(j["config"]["energy.mac_f16"].get<double>(), 0.4);
}

// ---- acceptance 5: bad energy input ----

std::string config_error(const std::vector<std::string>& sets) {
  try {
    Config::make("qc-u", sets);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(EnergyErrors, NegativeNonFiniteAndUnknownKeysAreClearErrors) {
  EXPECT_EQ(config_error({"energy.mac_f16=-0.4"}),
            "config key 'energy.mac_f16': -0.4 pJ is negative; energies and static powers must be >= 0 (0 leaves that "
            "term out)");
  EXPECT_EQ(config_error({"power.ddr_mw_per_gbps=-5"}),
            "config key 'power.ddr_mw_per_gbps': -5 mW is negative; energies and static powers must be >= 0 (0 leaves that term "
            "out)");
  EXPECT_EQ(config_error({"energy.ddr_read_byte=inf"}),
            "config key 'energy.ddr_read_byte' (--set): 'inf' is not a number (example: 1.7)");
  EXPECT_EQ(config_error({"energy.sfu_op=nan"}), "config key 'energy.sfu_op' (--set): 'nan' is not a number (example: 1.7)");
  EXPECT_EQ(config_error({"energy.mac_f16=1e12"}), "config key 'energy.mac_f16': 1000000000000 pJ is above 1e9 pJ (a typo?)");
  EXPECT_EQ(config_error({"energy.mac_fp16=0.5"}),
            "unknown config key 'energy.mac_fp16' (--set) (did you mean 'energy.mac_f16'?); `gpnpu config --list` "
            "prints every key");
  const std::string unknown = config_error({"energy.dram_activate=2"});
  EXPECT_TRUE(unknown.starts_with("unknown config key 'energy.dram_activate' (--set) (the energy.* keys are "
                                  "energy.mac_f16, energy.mac_int8,"))
      << unknown;
  EXPECT_NE(unknown.find("energy.ddr_write_byte, energy.instruction)"), std::string::npos) << unknown;
  EXPECT_EQ(config_error({"power_window_cycles=10"}), "config key 'power_window_cycles': 10 is below 100 cycles");
  EXPECT_EQ(config_error({"energy.mac_f16=0"}), "(no error)");  // zero leaves the event out
}

TEST(EnergyErrors, PresetFileAndCliNameTheKey) {
  const std::string dir = scratch_dir("energy_errors");
  test::write_file(dir + "/bad.cfg", "energy.mac_int8 = -1\n");
  EXPECT_EQ(config_error({}), "(no error)");
  try {
    Config::make(dir + "/bad.cfg", {});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "config key 'energy.mac_int8': -1 pJ is negative; energies and static powers must be >= 0 (0 leaves "
                 "that term out)");
  }
  test::write_file(dir + "/typo.cfg", "energy.mac_i8 = 1\n");
  auto r = run_cli(fmt::format("run {} --preset {}/typo.cfg", source_path("examples/asm/mac_peak.s"), dir));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find(fmt::format("error: unknown config key 'energy.mac_i8' ({}/typo.cfg:1) (did you mean "
                                   "'energy.mac_int8'?)",
                                   dir)),
            std::string::npos)
      << r.err;
}

}  // namespace
