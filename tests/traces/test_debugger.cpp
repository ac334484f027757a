// Debugger (acceptance 3): command files that use every command, on known.s whose
// trace is known line by line (test_insn_trace.cpp), so each stop can be checked.
#include <sstream>

#include "isa/error.h"
#include "sim/platform.h"
#include "trace_test_util.h"
#include "traces/debugger.h"

namespace gpnpu::traces::test {
namespace {

const std::string kKnown = std::string(GPNPU_SOURCE_DIR) + "/tests/traces/programs/known.s";

std::string debug(const std::string& commands, const char* source = "cmds") {
  isa::Program prog = isa::Program::load(kKnown);
  sim::Platform& p = sim::Platform::get();
  p.configure(sim::Config::make("mini", {}), false);
  std::istringstream in(commands);
  std::ostringstream out;
  debug_program(p, prog, in, out, source);
  return out.str();
}

// Asserts `needles` appear in `text` in this order.
void expect_in_order(const std::string& text, const std::vector<std::string>& needles) {
  size_t pos = 0;
  for (const std::string& n : needles) {
    size_t at = text.find(n, pos);
    ASSERT_NE(at, std::string::npos) << "missing (in order): " << n << "\n--- output ---\n" << text;
    pos = at + n.size();
  }
}

TEST(Debugger, EveryCommand) {
  std::string out = debug(R"(help
break mark body
break pc 8
break cycle 12
watch smem 8
watch ocm 0x40 4
breaks
disasm 5 4
continue
where
step
step 2
print x2
regs
delete 1
stepc 3
print v2 pe 1
vregs pe 2
preds
continue
unwatch 4
continue
mem ocm 0x40 12 hex
mem ocm 0x40 8 int4
mem smem 8 4 f32
mem lrm 0 4 fp16 pe 1
x ddr 0 8
print p
continue
step
where
quit
)");
  expect_in_order(out, {
      "gpnpu debug:", "stopped before pc 0",
      "break pc N | break N | break mark NAME | break cycle N",  // help
      "breakpoint 1: mark \"body\" begins",
      "breakpoint 2: before pc 8 `vadd.i32 v3, v2, v2`",
      "breakpoint 3: cycle 12",
      "watch 4: smem[0x8,+4) = 00 00 00 00",
      "watch 5: ocm[0x40,+4) = 00 00 00 00",
      "breakpoint 1: mark \"body\"", "breakpoint 2: pc 8", "breakpoint 3: cycle 12", "watch 4: smem[0x8,+4)",
      "     5  addi x2, x2, 4", "     6  mark.end \"body\"",  // disasm 5 4 (pcs 3..6)
      // continue: mark.begin at cycle 3 opens "body"
      "stopped before pc 4 (breakpoint 1: mark \"body\" begins)",
      "executed:          3 ctrl   pc=3     mark.begin \"body\"",
      "next:     pc=4 loop x1, L6",
      "before pc 4 `loop x1, L6` (last issue at cycle 3, 4 instructions executed)", "marks: body", "dma queued: c0=0",
      "stopped before pc 5 (step)",                     // step: the loop
      "stopped before pc 5 (step)", "=> x2=0x00000108",  // step 2: two addi
      "x2 = 0x00000108 = 264 = 264u",
      "x0  0x00000000", "x1  0x00000003", "x2  0x00000108",
      "breakpoint 1 removed",
      // stepc 3 from cycle 6: vadd at cycle 9 is the first to issue at >= 9, and the
      // breakpoint before pc 8 fires on the same stop
      "stopped before pc 8 (stepc: cycle 9 >= 9; breakpoint 2: pc 8)",
      "v2 of PE 1:", "hex  0000000e 0000000e", "f32  1.96182e-44",
      "vector registers of PE 2:", "v1  00000007 00000007", "v2  0000000e",
      "p0 16 PEs  p1 0 PEs",
      // continue: sw at cycle 12 (breakpoint 3) writes smem 8 (watch 4)
      "stopped before pc 10 (breakpoint 3: cycle 12; watch 4: smem[0x8,+4) changed: 00 00 00 00 -> 0c 01 00 00)",
      "watch 4 removed",
      // continue: the ogather writes 0x1c of PEs 0..2 at 0x40, 0x44, 0x48
      "stopped before pc 13 (watch 5: ocm[0x40,+4) changed: 00 00 00 00 -> 1c 00 00 00)",
      "ocm [0x40, 0x4c) as hex:", "0x00000040: 1c 00 00 00 1c 00 00 00 1c 00 00 00",
      "ocm [0x40, 0x48) as int4:", "0x00000040: c 1 0 0 0 0 0 0 c 1",
      "smem [0x8, 0xc) as f32:", "0x00000008: 3.75548e-43",
      "lrm [0x0, 0x4) of PE 1 as fp16:", "0x00000000: 0 0",
      "ddr [0x0, 0x8) as hex:", "00 00 00 00 00 00 00 00",
      "p0 16 PEs  p1 3 PEs",
      "program halted:", "16 instructions",
      "the program has halted", "halted after cycle 16",
  });
}

TEST(Debugger, QuitAndEndOfCommandsStopTheRun) {
  std::string out = debug("break 5\ncontinue\nquit\n");
  EXPECT_NE(out.find("stopped before pc 5 (breakpoint 1: pc 5)"), std::string::npos) << out;
  EXPECT_EQ(out.find("program halted"), std::string::npos) << out;
  out = debug("step 3\n");
  EXPECT_NE(out.find("(end of commands)"), std::string::npos) << out;
  EXPECT_EQ(out.find("program halted"), std::string::npos) << out;
  // The platform is usable afterwards: a plain run halts normally.
  out = debug("continue\n");
  EXPECT_NE(out.find("program halted:"), std::string::npos) << out;
}

TEST(Debugger, CommandFileErrorsNameTheLine) {
  auto err = [](const std::string& cmds) {
    try {
      debug(cmds, "script.dbg");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(err("step\nfrobnicate\n"), "script.dbg:2: unknown command 'frobnicate' (try `help`)");
  EXPECT_EQ(err("break pc 99\n"), "script.dbg:1: break: pc 99 is past the program's 14 instructions");
  EXPECT_EQ(err("mem ocm 0x3fffe 4\n"),
            "script.dbg:1: ocm [0x3fffe, 0x40002) is out of range: the ocm has 0x40000 bytes");
  EXPECT_EQ(err("break mark nosuch\n"), "script.dbg:1: break mark: the program has no mark \"nosuch\"");
  EXPECT_EQ(err("print v3 pe 99\n"), "script.dbg:1: PE 99 does not exist (the array has 16 PEs)");
  EXPECT_EQ(err("step\nstep\nmem lrm 0 4 hex pe x\n"), "script.dbg:3: PE 'x' is not a number (decimal or 0x hex)");
}

TEST(Debugger, CliReadsACommandFile) {
  std::string cmds = temp_path("cmds.dbg"), out;
  write_text(cmds, "# a comment\nbreak mark body\ncontinue\nprint x1\ncontinue\n");
  EXPECT_EQ(run_cli("debug " + kKnown + " --preset mini --commands " + cmds, out), 0) << out;
  expect_in_order(out, {"(gpnpu) break mark body", "stopped before pc 4", "x1 = 0x00000003", "program halted"});
  EXPECT_EQ(run_cli("debug " + kKnown + " --preset mini --commands /nonexistent", out), 1);
  EXPECT_NE(out.find("cannot open debugger command file '/nonexistent'"), std::string::npos) << out;
}

}  // namespace
}  // namespace gpnpu::traces::test
