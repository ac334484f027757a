// Hardware loops driven the way the sequencer drives them: set pc and next_pc,
// execute, ArchState::advance(), follow next_pc. Counts are checked against loop
// trip counts written by hand.
#include "tests/isa/isa_test_util.h"

namespace gpnpu::isa::test {
namespace {

// Runs `text` to its halt; returns the number of instructions executed.
uint64_t interpret(ArchState& s, std::string_view text, uint64_t max_steps = 100000) {
  Program p = assemble(text, "<loop>");
  std::vector<Insn> insns = p.decode();
  uint32_t pc = 0;
  for (uint64_t steps = 1; steps <= max_steps; ++steps) {
    if (pc >= insns.size()) fail("pc {} ran past the end of the program", pc);
    s.pc = pc;
    s.next_pc = pc + 1;
    s.effect = Effect::none;
    insns[pc].exec(s, insns[pc]);
    s.advance();
    if (s.effect == Effect::halt) return steps;
    pc = s.next_pc;
  }
  fail("no halt after {} steps", max_steps);
}

TEST(HardwareLoop, Nested) {
  Machine m;
  uint64_t steps = interpret(m.s, R"(
      li x1, 3
      li x2, 4
      loop x1, outer_end
        addi x10, x10, 1
        loop x2, inner_end
          addi x11, x11, 1
      inner_end:
        addi x12, x12, 1
      outer_end:
      halt
  )");
  EXPECT_EQ(m.s.x[10], 3u);
  EXPECT_EQ(m.s.x[11], 12u);
  EXPECT_EQ(m.s.x[12], 3u);
  EXPECT_EQ(m.s.loop_depth, 0);
  // li, li, loop, 3 * (addi, loop, 4 * addi, addi), halt: no per-iteration overhead
  EXPECT_EQ(steps, 3u + 3 * (1 + 1 + 4 + 1) + 1);
}

TEST(HardwareLoop, CountZeroSkipsTheBody) {
  Machine m;
  interpret(m.s, R"(
      loop x0, end
        addi x10, x10, 1
        addi x10, x10, 1
      end:
      addi x11, x11, 1
      halt
  )");
  EXPECT_EQ(m.s.x[10], 0u);
  EXPECT_EQ(m.s.x[11], 1u);
  EXPECT_EQ(m.s.loop_depth, 0);
}

TEST(HardwareLoop, CountIsReadOnce) {
  Machine m;
  interpret(m.s, R"(
      li x1, 3
      loop x1, end
        addi x1, x1, 5
        addi x10, x10, 1
      end:
      halt
  )");
  EXPECT_EQ(m.s.x[10], 3u);
  EXPECT_EQ(m.s.x[1], 18u);
}

TEST(HardwareLoop, LoopsEndingAtTheSamePc) {
  Machine m;
  interpret(m.s, R"(
      li x1, 2
      li x2, 3
      loop x1, end
        addi x10, x10, 1
        loop x2, end
          addi x11, x11, 1
      end:
      addi x12, x12, 1
      halt
  )");
  EXPECT_EQ(m.s.x[10], 2u);
  EXPECT_EQ(m.s.x[11], 6u);
  EXPECT_EQ(m.s.x[12], 1u);
  EXPECT_EQ(m.s.loop_depth, 0);
}

TEST(HardwareLoop, FourLevelsSomeEndingTogether) {
  Machine m;
  interpret(m.s, R"(
      li x1, 2
      li x2, 3
      li x3, 4
      li x4, 5
      loop x1, a
        loop x2, b
          addi x20, x20, 1
          loop x3, b
            loop x4, b
              addi x21, x21, 1
        b:
        addi x22, x22, 1
      a:
      halt
  )");
  EXPECT_EQ(m.s.x[20], 2u * 3);
  EXPECT_EQ(m.s.x[21], 2u * 3 * 4 * 5);
  EXPECT_EQ(m.s.x[22], 2u);
  EXPECT_EQ(m.s.loop_depth, 0);
}

// A zero-count inner loop that ends where its enclosing loop ends: skipping the
// inner body reaches the outer loop's end, which must close an outer iteration.
TEST(HardwareLoop, CountZeroInnerLoopAtTheOuterEnd) {
  Machine m;
  interpret(m.s, R"(
      li x1, 3
      loop x1, end
        addi x10, x10, 1
        loop x0, end
          addi x11, x11, 1
      end:
      addi x12, x12, 1
      halt
  )");
  EXPECT_EQ(m.s.x[10], 3u) << "the outer loop ran once: the inner skip did not close its iteration";
  EXPECT_EQ(m.s.x[11], 0u);
  EXPECT_EQ(m.s.x[12], 1u);
  EXPECT_EQ(m.s.loop_depth, 0) << "a loop frame leaked";
}

TEST(HardwareLoop, FifthLevelIsAnError) {
  Machine m;
  std::string e = error_of([&] {
    interpret(m.s, R"(
      li x1, 1
      loop x1, e
      loop x1, e
      loop x1, e
      loop x1, e
      loop x1, e
      nop
      e:
      halt
    )");
  });
  EXPECT_NE(e.find("loop at pc 5: more than 4 nested hardware loops"), std::string::npos) << e;
}

TEST(HardwareLoop, EmptyBodyIsAnError) {
  Machine m;
  std::string e = error_of([&] { interpret(m.s, "li x1, 2\nloop x1, e\ne: halt\n"); });
  EXPECT_NE(e.find("loop at pc 1: the body is empty"), std::string::npos) << e;
}

TEST(HardwareLoop, BranchInsideTheBody) {
  // A not-taken branch as the body's last instruction still closes the iteration;
  // a taken one jumps within the body.
  Machine m;
  interpret(m.s, R"(
      li x1, 4
      li x2, 2
      loop x1, end
        addi x10, x10, 1
        blt x10, x2, skip
        addi x11, x11, 1
      skip:
        bne x0, x0, skip
      end:
      halt
  )");
  EXPECT_EQ(m.s.x[10], 4u);
  EXPECT_EQ(m.s.x[11], 3u);  // iteration 1 skipped it
  EXPECT_EQ(m.s.loop_depth, 0);
}

}  // namespace
}  // namespace gpnpu::isa::test
