// Timing-only runs skip the steady state of hardware loops (sim/sequencer.cpp,
// LoopSkip): the skipped run must give the same cycles, counts, power windows, mark
// regions and errors as issuing every instruction. A trace hook turns the skipping off,
// so each program runs timing-only with and without a hook and the two stats JSON (and
// error messages) must be equal. The programs cover a GEMM-like body (broadcasts, MACs,
// LRM loads, address arithmetic), nested loops whose inner body scatters under a
// predicate that the outer loop changes (per-PE costs), a body with a scalar store (not
// skipped), a DMA in flight during the loop, power windows and time quanta that fall
// inside the loop, and an address error and max_cycles reached in a skipped stretch.
// The skip must have happened (Sequencer::skipped_iterations), and a negative control
// shows that one changed count in the stats JSON is seen.
#include <gtest/gtest.h>

#include "isa/error.h"
#include "sim_test_util.h"

using namespace gpnpu;
using namespace gpnpu::sim;

namespace {

const char* kGemm = R"(
.equ OCM, 0xE0000000
    li   x1, 1
    li   x2, 0x10000
    sw   x2, 0(x0)
    li   x2, OCM + 0x300000
    sw   x2, 4(x0)
    li   x2, 65536
    sw   x2, 8(x0)
    sw   x1, 12(x0)
    sw   x1, 24(x0)
    dma.start c0, x0
    li   x10, 0
    li   x12, 0
    li   x13, 0
    li   x4, 256
    li   x16, 300
    mark.begin "gemm"
    loop x16, L1
    vmac.f16 v0, v24, v28
    addi x10, x10, STEP
    obcast.h v31, 1024(x10)
    srli x14, x13, 3
    vmac.f16 v1, v24, v29
    obcast.h v28, 2048(x10)
    slli x14, x14, 2
    add  x14, x14, x4
    vmac.f16 v2, v24, v31
    vld  v26, 8(x12)
    vld.h v27, 0(x14)
    addi x12, x12, 8
    addi x13, x13, 1
    vcvt.f32.f16 v27, v27
L1:
    mark.end "gemm"
    dma.wait c0
    halt
)";

const char* kNested = R"(
    li   x5, 0
    li   x6, 16
    li   x3, 64
    li   x7, 6
    loop x7, Lo
    pset.range p1, x5, x6
    addi x6, x6, 100
    li   x8, 40
    li   x9, 0
    loop x8, Li
    oscatter v1, 0(x9), x3 @p1
    vmac.f16 v2, v1, v1 @p1
    vadd.i32 v3, v3, v2
    addi x9, x9, 64
Li:
    nop
Lo:
    li   x8, 50
    loop x8, Ls
    sw   x8, 0(x0)
    vadd.i32 v3, v3, v2
    vld  v4, 0(x0)
Ls:
    halt
)";

std::string with_step(const char* text, int step) {
  std::string s = text;
  s.replace(s.find("STEP"), 4, std::to_string(step));
  return s;
}

// The stats JSON of a timing-only run, or "error: MESSAGE".
std::string run(const std::string& text, const std::vector<std::string>& sets, bool hooks,
                uint64_t* skipped = nullptr) {
  Config cfg = Config::make("qc-u", sets);
  Platform& p = Platform::get();
  p.configure(cfg, true);
  isa::Program prog = isa::assemble(text, "skip.s");
  if (hooks) p.sequencer().on_issue = [](const IssueEvent&) {};
  struct Reset {
    Platform& p;
    ~Reset() { p.sequencer().on_issue = nullptr; }
  } reset{p};
  try {
    std::string json = p.run(prog).to_json(cfg, true);
    if (skipped) *skipped = p.sequencer().skipped_iterations();
    return json;
  } catch (const Error& e) {
    if (skipped) *skipped = p.sequencer().skipped_iterations();
    return std::string("error: ") + e.what();
  }
}

const std::vector<std::vector<std::string>> kMachines = {
    {},
    {"power_window_cycles=100", "quantum_cycles=37"},
    {"pe_rows=16", "pe_cols=16", "power_window_cycles=333", "quantum_cycles=1000"},
};

TEST(LoopSkip, GemmBodySameStatsAsEveryIssue) {
  for (const auto& sets : kMachines) {
    const std::string prog = with_step(kGemm, 32);
    uint64_t n = 0, none = 0;
    const std::string skipped = run(prog, sets, false, &n), issued = run(prog, sets, true, &none);
    ASSERT_EQ(skipped.rfind("error", 0), std::string::npos) << skipped;
    EXPECT_EQ(skipped, issued) << fmt::format("{}", fmt::join(sets, " "));
    // Most of the 300 iterations, fewer where windows and quanta end the skipped stretches.
    EXPECT_GT(n, sets.empty() ? 280u : 50u) << fmt::format("{}", fmt::join(sets, " "));
    EXPECT_EQ(none, 0u);
    // Negative control: one count changed is seen.
    std::string bad = skipped;
    const size_t at = bad.find("\"instructions\": ") + 16;
    bad[at] = bad[at] == '9' ? '1' : char(bad[at] + 1);
    EXPECT_NE(bad, issued);
  }
}

TEST(LoopSkip, NestedLoopsWithPredicatesAndStoresSameStats) {
  for (const auto& sets : kMachines) {
    uint64_t n = 0;
    const std::string skipped = run(kNested, sets, false, &n), issued = run(kNested, sets, true);
    ASSERT_EQ(skipped.rfind("error", 0), std::string::npos) << skipped;
    EXPECT_EQ(skipped, issued) << fmt::format("{}", fmt::join(sets, " "));
    EXPECT_GT(n, 0u);
  }
}

TEST(LoopSkip, ErrorsInASkippedStretchNameTheSamePcAndCycle) {
  // The broadcast address leaves the 4 MiB OCM at iteration ~64 of 300.
  const std::string prog = with_step(kGemm, 65536);
  uint64_t n = 0;
  const std::string skipped = run(prog, {}, false, &n), issued = run(prog, {}, true);
  EXPECT_GT(n, 50u);  // the error is in a skipped stretch
  EXPECT_NE(skipped.find("OCM access out of range"), std::string::npos) << skipped;
  EXPECT_NE(skipped.find(", cycle "), std::string::npos) << skipped;
  EXPECT_EQ(skipped, issued);
  // max_cycles reached inside the loop.
  const std::string p2 = with_step(kGemm, 32);
  n = 0;
  const std::string s2 = run(p2, {"max_cycles=4500"}, false, &n), i2 = run(p2, {"max_cycles=4500"}, true);
  EXPECT_NE(s2.find("passed max_cycles = 4500"), std::string::npos) << s2;
  EXPECT_EQ(s2, i2);
  EXPECT_GT(n, 50u);
}

}  // namespace
