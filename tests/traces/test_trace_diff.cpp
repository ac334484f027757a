// Trace diff (acceptance 5): a seeded one-instruction change to the GEMV kernel is
// found at the cycle and pc where the changed instruction first executes; a data
// change is found at the first instruction whose writes differ; identical runs are
// the same (the negative control); the CLI agrees.
#include <fmt/format.h>

#include "isa/isa.h"
#include "sim/platform.h"
#include "trace_test_util.h"
#include "traces/session.h"
#include "traces/trace_diff.h"

namespace gpnpu::traces::test {
namespace {

std::vector<TraceLine> trace_of(const KernelCase& c, const std::string& path) {
  sim::Platform& p = sim::Platform::get();
  p.configure(c.cfg, false);
  c.load(p);
  TraceOptions o;
  o.trace = path;
  TraceSession s(p, c.program, o);
  s.finish(p.run(c.program));
  return read_trace(path);
}

uint32_t pc_of(const isa::Program& p, const std::string& prefix) {
  std::vector<std::string> dis = disassemble_all(p);
  for (uint32_t pc = 0; pc < dis.size(); ++pc)
    if (dis[pc].starts_with(prefix)) return pc;
  ADD_FAILURE() << "no instruction " << prefix;
  return 0;
}

// The cases below run a GEMV of 100 columns on mini: a full tile (4 column groups of 16
// PEs), then the narrow one, so the full tile's routine, first in the program, runs first.
TEST(TraceDiff, FindsASeededOneInstructionChangeAtItsCycle) {
  KernelCase a = gemv_case(100), b = gemv_case(100);
  // Seed: the x pointer step of the block loop, 256 -> 192 bytes (a classic stride bug).
  uint32_t pc = pc_of(b.program, "addi x5, x5, 256");
  isa::Fields f = isa::unpack(b.program.words[pc]);
  f.imm = 192;
  b.program.words[pc] = isa::pack(f);
  std::vector<TraceLine> ta = trace_of(a, temp_path("gemv_a.trace")), tb = trace_of(b, temp_path("gemv_b.gtrc"));
  // Where the changed instruction first executes in the original run.
  size_t first = 0;
  while (first < ta.size() && ta[first].pc != pc) ++first;
  ASSERT_LT(first, ta.size());
  TraceDivergence d = diff_traces(ta, tb);
  EXPECT_FALSE(d.same);
  EXPECT_EQ(d.what, "instruction");
  EXPECT_EQ(d.line, first);
  EXPECT_EQ(d.pc, pc);
  EXPECT_EQ(d.cycle, ta[first].cycle);
  EXPECT_NE(d.report.find("`addi x5, x5, 256` vs `addi x5, x5, 192`"), std::string::npos) << d.report;
  EXPECT_EQ(d.write_a, "x5=" + fmt::format("0x{:08x}", 256));
  // Every line before it is the same in both.
  for (size_t i = 0; i < first; ++i) ASSERT_EQ(ta[i].text, tb[i].text);
}

TEST(TraceDiff, FindsADataChangeAtTheFirstDifferingWrite) {
  KernelCase a = gemv_case(100), b = gemv_case(100);
  auto load = b.load;
  b.load = [load](sim::Platform& p) {
    load(p);
    uint16_t one = 0x3c00;
    p.ocm().write(6, &one, 2);  // x[3] = 1.0 instead of its random value
  };
  std::vector<TraceLine> ta = trace_of(a, temp_path("gemv_a2.trace")), tb = trace_of(b, temp_path("gemv_c.trace"));
  TraceDivergence d = diff_traces(ta, tb);
  EXPECT_FALSE(d.same);
  EXPECT_EQ(d.what, "write");
  // The first instruction that reads x[3]: the first obcast.h of the first block.
  EXPECT_EQ(d.pc, pc_of(a.program, "obcast.h v10"));
  EXPECT_TRUE(d.write_a.starts_with("v10[pe0]=")) << d.report;
  EXPECT_NE(d.write_a, d.write_b);
}

TEST(TraceDiff, NegativeControlIdenticalRunsAreTheSame) {
  KernelCase a = gemv_case(100);
  std::vector<TraceLine> t1 = trace_of(a, temp_path("gemv_1.trace")), t2 = trace_of(a, temp_path("gemv_2.gtrc"));
  TraceDivergence d = diff_traces(t1, t2);
  EXPECT_TRUE(d.same) << d.report;
  // A trace cut short is a divergence of length.
  t2.pop_back();
  d = diff_traces(t1, t2);
  EXPECT_FALSE(d.same);
  EXPECT_EQ(d.what, "length");
  EXPECT_EQ(d.line, t2.size());
}

// Values only (issue 20): the same GEMV on a retimed machine (a quarter of the DDR
// bandwidth, slower MACs) issues at other cycles but writes the same values: the plain
// diff reports timing, the values-only diff calls them the same. A changed input value
// is still found by the values-only diff, at the first write it changes.
TEST(TraceDiff, ValuesOnlyIgnoresTimingButNotValues) {
  KernelCase a = gemv_case(100), retimed = gemv_case(100), changed = gemv_case(100);
  retimed.cfg.set("ddr_gbps", "8");
  retimed.cfg.set("lat.mac16", "13");
  retimed.cfg.validate();
  auto load = changed.load;
  changed.load = [load](sim::Platform& p) {
    load(p);
    uint16_t one = 0x3c00;
    p.ocm().write(6, &one, 2);  // x[3] = 1.0 instead of its random value
  };
  std::vector<TraceLine> ta = trace_of(a, temp_path("values_a.gtrc")), tr = trace_of(retimed, temp_path("values_r.trace")),
                         tc = trace_of(changed, temp_path("values_c.gtrc"));
  TraceDivergence timing = diff_traces(ta, tr);
  ASSERT_FALSE(timing.same);  // the retime is real: the plain diff sees it
  EXPECT_EQ(timing.what, "cycle") << timing.report;
  TraceDivergence v = diff_trace_values(ta, tr);
  EXPECT_TRUE(v.same) << v.report;
  EXPECT_NE(v.report.find("traces write the same values"), std::string::npos) << v.report;
  // Negative control: a changed value is a divergence, at the same line the plain diff finds.
  TraceDivergence plain = diff_traces(ta, tc), vc = diff_trace_values(ta, tc);
  EXPECT_FALSE(vc.same);
  EXPECT_EQ(vc.what, "write");
  EXPECT_EQ(vc.line, plain.line);
  EXPECT_EQ(vc.pc, pc_of(a.program, "obcast.h v10"));
  EXPECT_EQ(vc.write_a, plain.write_a);
  EXPECT_NE(vc.write_a, vc.write_b);
  // ... and so is one run writing less (cut short).
  tr.pop_back();
  while (!tr.empty() && tr.back().writes.empty()) tr.pop_back();
  tr.pop_back();
  TraceDivergence cut = diff_trace_values(ta, tr);
  EXPECT_FALSE(cut.same);
  EXPECT_EQ(cut.what, "length") << cut.report;
}

TEST(TraceDiff, ValuesOnlyCli) {
  // The same loop with nops added (a retimed program: other pcs and cycles) writes the
  // same values; one with another increment does not.
  std::string a = temp_path("val_a.s"), b = temp_path("val_b.s"), c = temp_path("val_c.s"), out;
  write_text(a, "li x1, 3\nloop x1, e\naddi x2, x2, 1\ne:\nsw x2, 8(x0)\nhalt\n");
  write_text(b, "li x1, 3\nnop\nloop x1, e\naddi x2, x2, 1\nnop\ne:\nnop\nsw x2, 8(x0)\nhalt\n");
  write_text(c, "li x1, 3\nloop x1, e\naddi x2, x2, 2\ne:\nsw x2, 8(x0)\nhalt\n");
  std::string ta = temp_path("val_a.trace"), tb = temp_path("val_b.gtrc"), tc = temp_path("val_c.trace");
  ASSERT_EQ(run_cli("run " + a + " -q --trace " + ta, out), 0) << out;
  ASSERT_EQ(run_cli("run " + b + " -q --trace " + tb, out), 0) << out;
  ASSERT_EQ(run_cli("run " + c + " -q --trace " + tc, out), 0) << out;
  EXPECT_EQ(run_cli("trace-diff " + ta + " " + tb, out), 1) << out;  // plain: the pcs differ
  EXPECT_EQ(run_cli("trace-diff --values-only " + ta + " " + tb, out), 0) << out;
  EXPECT_NE(out.find("traces write the same values: 5 writing lines"), std::string::npos) << out;
  EXPECT_EQ(run_cli("trace-diff --values-only " + ta + " " + tc, out), 1) << out;
  EXPECT_NE(out.find("differing write: x2=0x00000001 vs x2=0x00000002"), std::string::npos) << out;
  EXPECT_NE(out.find("error: traces differ in their values"), std::string::npos) << out;
}

TEST(TraceDiff, Cli) {
  std::string a = temp_path("cli_a.s"), b = temp_path("cli_b.s"), out;
  write_text(a, "li x1, 3\nloop x1, e\naddi x2, x2, 1\ne:\nhalt\n");
  write_text(b, "li x1, 3\nloop x1, e\naddi x2, x2, 2\ne:\nhalt\n");
  std::string ta = temp_path("cli_a.trace"), tb = temp_path("cli_b.gtrc");
  ASSERT_EQ(run_cli("run " + a + " -q --trace " + ta, out), 0) << out;
  ASSERT_EQ(run_cli("run " + b + " -q --trace " + tb, out), 0) << out;
  EXPECT_EQ(run_cli("trace-diff " + ta + " " + tb, out), 1);
  EXPECT_NE(out.find("first divergence at line 3 (cycle 2, pc 2)"), std::string::npos) << out;
  EXPECT_NE(out.find("error: traces differ"), std::string::npos) << out;
  EXPECT_EQ(run_cli("trace-diff " + ta + " " + ta, out), 0) << out;
  EXPECT_NE(out.find("traces are the same: 6 lines"), std::string::npos) << out;
  // trace-print shows the binary trace as text lines.
  EXPECT_EQ(run_cli("trace-print " + tb, out), 0) << out;
  EXPECT_NE(out.find("pc=2     addi x2, x2, 2"), std::string::npos) << out;
  EXPECT_NE(out.find("x2=0x00000006"), std::string::npos) << out;
  EXPECT_EQ(run_cli("trace-print " + a, out), 1);  // not a trace
  EXPECT_NE(out.find("not a trace line"), std::string::npos) << out;
}

}  // namespace
}  // namespace gpnpu::traces::test
