// fp16 numerics of functional runs (issue 21): every mark region gets the largest |x|
// converted to fp16 and the overflow / underflow / NaN counts (nested regions included
// in their parents), the run's first non-finite value is named with its mark, PE and
// element, fp16_overflow = saturate clamps and counts, and timing-only runs are
// unchanged in cycles and compute none of it.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>

#include "isa/error.h"
#include "isa/program.h"
#include "sim/machine/config.h"
#include "sim/platform.h"
#include "sim/run.h"

using namespace gpnpu;
using namespace gpnpu::sim;

namespace {

// 1000.0, 70000.0, -70000.0 (0xc788b800), 2^-101 (a normal fp32 that rounds to 0 in fp16), NaN.
const char* kProgram = R"(
    li x1, 0x447a0000
    li x2, 0x4788b800
    li x3, -947341312
    li x4, 0x0d000000
    li x5, 0x7fc00000
    vsplat v1, x1
    vsplat v2, x2
    vsplat v3, x3
    vsplat v4, x4
    vsplat v5, x5
    mark.begin "small"
    vpack.f16 v10, v1, v1
    mark.end "small"
    mark.begin "big"
    mark.begin "inner"
    vcvt.f16.f32 v11, v4
    mark.end "inner"
    vpack.f16 v12, v1, v2
    vcvt.f16.f32 v13, v3
    mark.end "big"
    mark.begin "nan"
    vcvt.f16.f32 v14, v5
    mark.end "nan"
    halt
)";

Stats::Region region(const Stats& st, const std::string& name) {
  for (const Stats::Region& r : st.regions())
    if (r.name == name) return r;
  throw std::runtime_error("no region " + name);
}

uint16_t lane_half(const isa::ArchState& s, int reg, size_t pe, int lane, int half) {
  return uint16_t(s.v[(size_t(reg) * s.npe + pe) * isa::kLanes + size_t(lane)] >> (16 * half));
}

TEST(Numerics, RegionsGetTheirFp16RangeAndTheFirstNonFiniteIsNamed) {
  const isa::Program prog = isa::assemble(kProgram, "numerics.s");
  const Config cfg = Config::make("qc-u", {});
  const uint64_t n = cfg.npe() * 16;  // values per vcvt; vpack converts 2n
  const Stats st = run_program(prog, cfg, false);

  const Stats::Region small = region(st, "small"), big = region(st, "big"), inner = region(st, "inner"),
                      nan = region(st, "nan");
  EXPECT_EQ(small.counters.f16_max_abs, 1000.0f);
  EXPECT_EQ(small.counters[Stat::f16_overflow] + small.counters[Stat::f16_underflow] + small.counters[Stat::f16_nan], 0u);
  EXPECT_EQ(inner.counters[Stat::f16_underflow], n);
  EXPECT_EQ(inner.counters[Stat::f16_overflow], 0u);
  EXPECT_EQ(inner.counters.f16_max_abs, std::ldexp(1.0f, -101));
  // "big" includes "inner": its underflows, and its own overflows (70000 in half the
  // vpack's elements, -70000 in every vcvt lane).
  EXPECT_EQ(big.counters[Stat::f16_underflow], n);
  EXPECT_EQ(big.counters[Stat::f16_overflow], n + n);
  EXPECT_EQ(big.counters.f16_max_abs, 70000.0f);
  EXPECT_EQ(nan.counters[Stat::f16_nan], n);
  EXPECT_EQ(st.total[Stat::f16_overflow], 2 * n);
  EXPECT_EQ(st.total[Stat::f16_nan], n);
  EXPECT_EQ(st.total.f16_max_abs, 70000.0f);
  // The first non-finite value: vpack.f16 v12 in "big", PE 0, element 16 (the first of vc's).
  ASSERT_TRUE(st.first_nonfinite.set);
  EXPECT_EQ(st.first_nonfinite.mark, "big");
  EXPECT_EQ(st.first_nonfinite.pe, 0u);
  EXPECT_EQ(st.first_nonfinite.element, 16u);
  EXPECT_EQ(st.first_nonfinite.value, 70000.0f);
  EXPECT_NE(st.first_nonfinite.where.find("vpack.f16"), std::string::npos) << st.first_nonfinite.where;
  // The JSON carries them by name.
  const std::string js = st.to_json(cfg, false);
  EXPECT_NE(js.find("\"f16_overflow\""), std::string::npos);
  EXPECT_NE(js.find("\"f16_max_abs\": 70000"), std::string::npos);
}

TEST(Numerics, SaturateClampsAndCountsWithTheSameCycles) {
  const isa::Program prog = isa::assemble(kProgram, "numerics.s");
  const Config inf = Config::make("qc-u", {}), sat = Config::make("qc-u", {"fp16_overflow=saturate"});
  const Stats a = run_program(prog, inf, false);
  Platform& p = Platform::get();
  p.configure(sat, false);
  const Stats b = p.run(prog);
  EXPECT_EQ(a.total[Stat::cycles], b.total[Stat::cycles]);
  EXPECT_EQ(b.total[Stat::f16_overflow], a.total[Stat::f16_overflow]);  // counted the same
  // Saturated: +-65504, never inf; the first non-finite is then the NaN.
  EXPECT_EQ(lane_half(p.state(), 12, 5, 8, 0), 0x7bff);
  EXPECT_EQ(lane_half(p.state(), 13, 5, 3, 0), 0xfbff);
  ASSERT_TRUE(b.first_nonfinite.set);
  EXPECT_EQ(b.first_nonfinite.mark, "nan");
  EXPECT_TRUE(std::isnan(b.first_nonfinite.value));
  // With inf, the same lanes hold inf.
  p.configure(inf, false);
  p.run(prog);
  EXPECT_EQ(lane_half(p.state(), 12, 5, 8, 0), 0x7c00);
  EXPECT_EQ(lane_half(p.state(), 13, 5, 3, 0), 0xfc00);
  EXPECT_THROW(Config::make("qc-u", {"fp16_overflow=clamp"}), Error);
}

TEST(Numerics, TimingOnlyRunsComputeNoneOfItAndKeepTheCycles) {
  const isa::Program prog = isa::assemble(kProgram, "numerics.s");
  const Config cfg = Config::make("qc-u", {});
  const Stats full = run_program(prog, cfg, false), fast = run_program(prog, cfg, true);
  EXPECT_EQ(full.total[Stat::cycles], fast.total[Stat::cycles]);
  EXPECT_EQ(fast.total[Stat::f16_overflow] + fast.total[Stat::f16_nan] + fast.total[Stat::f16_underflow], 0u);
  EXPECT_EQ(fast.total.f16_max_abs, 0.0f);
  EXPECT_FALSE(fast.first_nonfinite.set);
}

}  // namespace
