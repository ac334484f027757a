// Timing-boundary tests of the sequencer (acceptance 2): for every unit class with
// a latency above 1, a dependent instruction that would issue one cycle before its
// producer's result is ready stalls exactly one cycle, and one that reaches the
// latency issues without a stall. Also occupancy, the shared MAC array and OCM
// port, taken branches and hardware-loop back-edges. Every expected cycle is
// computed from the sim::Config, and each test runs on qc-u and on a machine whose
// latencies and occupancies are all changed (so a hard-coded number would fail).
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "sim_test_util.h"

using namespace gpnpu;
using namespace gpnpu::sim;
using gpnpu::sim::test::run_text;
using isa::Unit;

namespace {

// qc-u, and qc-u with the latency of every array unit and of scalar memory +3,
// their occupancy +1, and 5 taken-branch cycles. (Scalar ALU, branch and control
// stay at 1/1: the tests use them as one-per-cycle fillers.)
std::vector<Config> machines() {
  Config a = Config::make("qc-u", {});
  std::vector<std::string> sets = {"branch_taken_cycles=5"};
  for (const char* u : {"valu", "vfpu", "mac16", "mac8", "sfu", "xlane", "lrm", "ocm_bc", "ocm_rd", "ocm_wr", "smem"}) {
    sets.push_back(fmt::format("lat.{}={}", u, std::stoull(a.get(fmt::format("lat.{}", u))) + 3));
    sets.push_back(fmt::format("occ.{}={}", u, std::stoull(a.get(fmt::format("occ.{}", u))) + 1));
  }
  return {a, Config::make("qc-u", sets)};
}

std::string fillers(uint64_t n) {
  std::string s;
  for (uint64_t k = 0; k < n; ++k) s += "add x5, x6, x7\n";  // scalar, independent of everything
  return s;
}

uint64_t ceil_div(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

struct Producer {
  Unit unit;
  const char* producer;  // writes v1 (or x1)
  const char* consumer;  // reads v1 (or x1), on another unit
  uint64_t mem_bytes;    // OCM bytes moved (per PE for scatter), 0 if none
};

const Producer kProducers[] = {
    {Unit::valu, "vadd.i32 v1, v2, v3", "vredsum.i32 v4, v1", 0},
    {Unit::vfpu, "vadd.f32 v1, v2, v3", "vmov v4, v1", 0},
    {Unit::mac16, "vmac.f16 v1, v2, v3", "vmov v4, v1", 0},
    {Unit::mac8, "vmac.i8 v1, v2, v3", "vmov v4, v1", 0},
    {Unit::sfu, "vexp.f32 v1, v2", "vmov v4, v1", 0},
    {Unit::xlane, "vredsum.f32 v1, v2", "vmov v4, v1", 0},
    {Unit::lrm, "vld v1, 64(x0)", "vmov v4, v1", 0},
    {Unit::ocm_bc, "obcast v1, 128(x0)", "vmov v4, v1", 64},
    {Unit::ocm_rd, "oscatter v1, 0(x0), x8", "vmov v4, v1", 64},
    {Unit::smem, "lw x1, 16(x0)", "add x2, x1, x0", 0},
};

// Cycles from the producer's issue until its result can be read: lat, plus for
// OCM forms the port occupancy max(occ, bytes / ocm_port_bytes) (the last byte
// must cross the port first).
uint64_t result_latency(const Config& c, const Producer& p) {
  uint64_t l = c.lat(p.unit);
  if (p.mem_bytes) {
    uint64_t bytes = p.unit == Unit::ocm_bc ? p.mem_bytes : p.mem_bytes * c.npe();
    l += std::max<uint64_t>(c.occ(p.unit), ceil_div(bytes, c.ocm_port_bytes));
  }
  return l;
}

TEST(Timing, DependentInstructionStallsExactlyUntilTheLatency) {
  for (const Config& cfg : machines()) {
    for (const Producer& p : kProducers) {
      SCOPED_TRACE(fmt::format("unit {} ({}), lat.{} = {}", isa::unit_name(p.unit), p.producer,
                               isa::unit_name(p.unit), cfg.lat(p.unit)));
      const uint64_t L = result_latency(cfg, p);
      ASSERT_GE(L, 2u) << "only units with a latency above 1 have a boundary";
      // pc 0: producer at cycle 0; pcs 1..k: fillers; pc k+1: consumer.
      for (uint64_t k : {L - 2, L - 1}) {
        std::string text = fmt::format("{}\n{}{}\nhalt\n", p.producer, fillers(k), p.consumer);
        auto r = run_text(text, cfg);
        EXPECT_EQ(r.at(0), 0u);
        const uint32_t consumer_pc = uint32_t(k + 1);
        // Without the dependence it would issue at k + 1; it must issue exactly at L.
        EXPECT_EQ(r.at(consumer_pc), L) << "fillers " << k;
        EXPECT_EQ(r.stats.total[Stat::stall_cycles], k == L - 2 ? 1u : 0u) << "fillers " << k;
      }
    }
  }
}

TEST(Timing, ScoreboardIgnoresIndependentInstructions) {
  // Negative control for the test above: the same consumer position but reading a
  // register nobody writes issues at once, so the stall really comes from v1.
  for (const Config& cfg : machines()) {
    auto r = run_text("vexp.f32 v1, v2\nvmov v4, v3\nhalt\n", cfg);
    EXPECT_EQ(r.at(1), 1u);
    EXPECT_EQ(r.stats.total[Stat::stall_cycles], 0u);
  }
}

struct OccCase {
  Unit first_unit;
  const char* first;
  Unit second_unit;
  const char* second;
  uint64_t first_bytes;  // OCM bytes of the first (per PE for scatter/gather)
};
const OccCase kOccupancy[] = {
    {Unit::valu, "vadd.i32 v1, v2, v3", Unit::valu, "vadd.i32 v4, v2, v3", 0},
    {Unit::vfpu, "vadd.f32 v1, v2, v3", Unit::vfpu, "vmul.f32 v4, v2, v3", 0},
    {Unit::mac16, "vmac.f16 v1, v2, v3", Unit::mac16, "vmac.f16 v4, v2, v3", 0},
    {Unit::mac8, "vmac.i8 v1, v2, v3", Unit::mac8, "vmac.i8 v4, v2, v3", 0},
    // mac8 and mac16 share the MAC array: the second waits for the first's occupancy.
    {Unit::mac16, "vmac.f16 v1, v2, v3", Unit::mac8, "vmac.i8 v4, v2, v3", 0},
    {Unit::mac8, "vmac.i8 v1, v2, v3", Unit::mac16, "vmac.f16 v4, v2, v3", 0},
    {Unit::sfu, "vexp.f32 v1, v2", Unit::sfu, "vrcp.f32 v4, v2", 0},
    {Unit::xlane, "vredsum.f32 v1, v2", Unit::xlane, "vmovn v4, v2, e", 0},
    {Unit::lrm, "vld v1, 0(x0)", Unit::lrm, "vld v4, 64(x0)", 0},
    {Unit::smem, "lw x1, 0(x0)", Unit::smem, "lw x2, 4(x0)", 0},
    // OCM port: occupancy = max(occ, bytes / ocm_port_bytes); the three forms share it.
    {Unit::ocm_bc, "obcast v1, 0(x0)", Unit::ocm_bc, "obcast v4, 64(x0)", 64},
    {Unit::ocm_rd, "oscatter v1, 0(x0), x8", Unit::ocm_rd, "oscatter v4, 0(x0), x8", 64},
    {Unit::ocm_rd, "oscatter v1, 0(x0), x8", Unit::ocm_bc, "obcast v4, 0(x0)", 64},
    {Unit::ocm_wr, "ogather v2, 0(x0), x8", Unit::ocm_rd, "oscatter v4, 0(x0), x8", 64},
    {Unit::ocm_bc, "obcast v1, 0(x0)", Unit::ocm_wr, "ogather v2, 0(x0), x8", 64},
};

TEST(Timing, BackToBackIndependentInstructionsIssueOccupancyApart) {
  for (const Config& cfg : machines()) {
    for (const OccCase& c : kOccupancy) {
      SCOPED_TRACE(fmt::format("{} then {}", c.first, c.second));
      uint64_t occ = cfg.occ(c.first_unit);
      if (c.first_bytes) {
        uint64_t bytes = c.first_unit == Unit::ocm_bc ? c.first_bytes : c.first_bytes * cfg.npe();
        occ = std::max<uint64_t>(occ, ceil_div(bytes, cfg.ocm_port_bytes));
      }
      auto r = run_text(fmt::format("{}\n{}\nhalt\n", c.first, c.second), cfg);
      EXPECT_EQ(r.at(0), 0u);
      EXPECT_EQ(r.at(1), std::max<uint64_t>(occ, 1));
    }
  }
  // A unit that shares nothing is not held up: MAC then SFU issue on consecutive cycles.
  auto r = run_text("vmac.f16 v1, v2, v3\nvexp.f32 v4, v2\nhalt\n", machines()[0]);
  EXPECT_EQ(r.at(1), 1u);
}

TEST(Timing, OcmPortOccupancyFollowsPortWidth) {
  // Halving the port doubles a full-array scatter's occupancy (1024 PEs x 64 bytes).
  for (uint64_t port : {512u, 256u, 64u}) {
    Config cfg = Config::make("qc-u", {fmt::format("ocm_port_bytes={}", port)});
    auto r = run_text("oscatter v1, 0(x0), x8\noscatter v4, 0(x0), x8\nhalt\n", cfg);
    EXPECT_EQ(r.at(1), ceil_div(64 * cfg.npe(), port)) << "port " << port;
  }
  // A predicate shrinks the bytes moved: 32 PEs x 64 bytes = 2048 bytes = 4 cycles at 512.
  Config cfg = Config::make("qc-u", {});
  auto r = run_text("li x9, 32\npset.range p1, x0, x9\noscatter v1, 0(x0), x8 @p1\noscatter v4, 0(x0), x8\nhalt\n", cfg);
  EXPECT_EQ(r.at(3) - r.at(2), ceil_div(64 * 32, cfg.ocm_port_bytes));
}

TEST(Timing, TakenBranchCostsBranchTakenCyclesLoopBackEdgeCostsNothing) {
  for (const Config& cfg : machines()) {
    const uint64_t b = cfg.branch_taken_cycles;
    // pc0 taken beq, pc1 skipped, pc2 not-taken bne, pc3 jal (taken), pc4 skipped, pc5 halt
    auto r = run_text(
        "beq x0, x0, t1\n"
        "nop\n"
        "t1: bne x0, x0, t2\n"
        "t2: jal x1, t3\n"
        "nop\n"
        "t3: halt\n",
        cfg);
    EXPECT_EQ(r.at(0), 0u);
    EXPECT_EQ(r.at(2), 1 + b);            // after the taken beq
    EXPECT_EQ(r.at(3), 2 + b);            // the not-taken bne costs nothing extra
    EXPECT_EQ(r.at(5), 3 + 2 * b);        // after the taken jal
    EXPECT_EQ(r.pcs.size(), 4u);          // the skipped nops never issue

    // Hardware loop of 3 iterations over a 2-instruction body, nested in a 2-iteration
    // loop: every body instruction issues on the next cycle, back-edges included.
    auto h = run_text(
        "li x1, 2\n"            // pc0, cycle 0
        "li x2, 3\n"            // pc1, cycle 1
        "loop x1, outer\n"      // pc2, cycle 2
        "loop x2, inner\n"      // pc3
        "add x5, x6, x7\n"      // pc4
        "add x8, x6, x7\n"      // pc5
        "inner:\n"
        "outer:\n"
        "halt\n",               // pc6
        cfg);
    ASSERT_EQ(h.pcs.size(), 3u + 2 * (1 + 3 * 2) + 1);
    for (size_t k = 1; k < h.cycles.size(); ++k) EXPECT_EQ(h.cycles[k], h.cycles[k - 1] + 1) << "issue " << k;
    EXPECT_EQ(h.stats.total[Stat::stall_cycles], 0u);
    // The same loop written with a taken branch pays b per back-edge.
    auto s = run_text(
        "li x1, 3\n"
        "top: addi x1, x1, -1\n"
        "add x5, x6, x7\n"
        "bne x1, x0, top\n"
        "halt\n",
        cfg);
    EXPECT_EQ(s.at(4), 1 + 3 * 3 + 2 * b);
  }
}

TEST(Timing, RegionCyclesIncludeOutstandingLatency) {
  // mark.end closes a region when everything issued in it has completed.
  Config cfg = Config::make("qc-u", {});
  auto r = run_text("mark.begin \"r\"\nvexp.f32 v1, v2\nmark.end \"r\"\nhalt\n", cfg);
  ASSERT_EQ(r.stats.calls().size(), 1u);
  EXPECT_EQ(r.stats.calls()[0].end - r.stats.calls()[0].begin, 1 + cfg.lat(Unit::sfu));
  EXPECT_EQ(r.stats.total[Stat::cycles], 1 + cfg.lat(Unit::sfu));
}

}  // namespace
