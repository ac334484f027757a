// Assembler errors: each message starts with FILE:LINE:COL (1-based, the column of
// the offending token) and says what is wrong. Columns are counted by hand.
#include "tests/isa/isa_test_util.h"

namespace gpnpu::isa::test {
namespace {

struct Case {
  const char* text;
  const char* want;  // expected message prefix, "f.s:LINE:COL: ..."
};

void expect_errors(std::initializer_list<Case> cases) {
  for (const Case& c : cases) {
    std::string e = error_of([&] { assemble(c.text, "f.s"); });
    EXPECT_EQ(e.substr(0, std::strlen(c.want)), c.want) << "source: " << c.text << "\nmessage: " << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << "one line: " << e;
  }
}

TEST(AssemblerErrors, UnknownMnemonic) {
  expect_errors({
      {"nop\n  vfoo v1, v2\n", "f.s:2:3: unknown instruction 'vfoo'"},
      {"# comment\n\n\tadd.i32 x1, x2, x3", "f.s:3:2: unknown instruction 'add.i32'"},
      {".word 3", "f.s:1:1: unknown directive '.word' (known: .equ, .name)"},
  });
}

TEST(AssemblerErrors, WrongOperandCount) {
  expect_errors({
      {"halt\nadd x1, x2\n", "f.s:2:1: 'add' takes 3 operands (Xa= Xb Xc), got 2"},
      {"  halt x1", "f.s:1:3: 'halt' takes 0 operands (no operands), got 1"},
      {"mark.begin", "f.s:1:1: 'mark.begin' takes 1 operand (Si), got 0"},
      {"add x1, x2,", "f.s:1:11: operand missing after ','"},
      {"add x1,, x2", "f.s:1:8: empty operand"},
  });
}

TEST(AssemblerErrors, BadRegister) {
  expect_errors({
      {"add x1, x32, x3", "f.s:1:9: scalar register x32 does not exist (x0..x31)"},
      {"vmov v1, v-1", "f.s:1:10: expected vector register v0..v31, got 'v-1'"},
      {"vmov v32, v1", "f.s:1:6: vector register v32 does not exist (v0..v31)"},
      {"add x1, v2, x3", "f.s:1:9: expected scalar register x0..x31, got 'v2'"},
      {"dma.wait x1", "f.s:1:10: expected DMA channel c0..c31, got 'x1'"},
  });
}

TEST(AssemblerErrors, BadPredicate) {
  expect_errors({
      {"vmov v1, v2 @p8", "f.s:1:14: predicate register p8 does not exist (p0..p7)"},
      {"vmov v1, v2 @q1", "f.s:1:14: expected predicate register p0..p7, got 'q1'"},
      {"add x1, x2, x3 @p1", "f.s:1:16: 'add' takes no predicate"},
      {"pand p1, p9, p2", "f.s:1:10: predicate register p9 does not exist (p0..p7)"},
  });
}

TEST(AssemblerErrors, ImmediateOutOf32BitRange) {
  expect_errors({
      {"li x1, 0x100000000", "f.s:1:8: immediate 4294967296 does not fit in 32 bits"},
      {"li x1, -2147483649", "f.s:1:8: immediate -2147483649 does not fit in 32 bits"},
      {"lw x1, 0x100000000(x2)", "f.s:1:8: immediate 4294967296 does not fit in 32 bits"},
      {"vshl v1, v2, 32", "f.s:1:14: '32' must be 0..31"},
      {"li x1, 99999999999999999999", "f.s:1:8: '99999999999999999999' is not a number"},
  });
  // the extremes fit
  EXPECT_EQ(assemble("li x1, 0xffffffff").words[0] >> 32, 0xffffffffu);
  EXPECT_EQ(assemble("li x1, -2147483648").words[0] >> 32, 0x80000000u);
}

TEST(AssemblerErrors, UndefinedLabel) {
  expect_errors({
      {"beq x1, x2, nowhere", "f.s:1:13: undefined label 'nowhere'"},
      {"a:\n  loop x1, b\n", "f.s:2:12: undefined label 'b'"},
  });
}

TEST(AssemblerErrors, DuplicateLabel) {
  expect_errors({
      {"a:\nnop\n  a: nop\n", "f.s:3:3: label 'a' is defined twice"},
      {".equ N, 1\nN: nop", "f.s:2:1: label 'N' is defined twice"},
      {"x: y: x: nop", "f.s:1:7: label 'x' is defined twice"},
  });
}

TEST(AssemblerErrors, BadEqu) {
  expect_errors({
      {".equ X", "f.s:1:1: .equ takes a name and a value: .equ NAME, VALUE"},
      {".equ 1X, 3", "f.s:1:6: '1X' is not a valid name"},
      {".equ X, 1\n.equ X, 2", "f.s:2:6: 'X' is defined twice"},
      {".equ Y, foo", "f.s:1:9: 'foo' is not a number or a defined .equ name"},
      {".equ Z, 3 / 2", "f.s:1:11: unexpected '/' in '3 / 2'"},
      {"li x1, FOO", "f.s:1:8: 'FOO' is not a number or a defined .equ name"},
  });
}

TEST(AssemblerErrors, BadMemoryOperand) {
  expect_errors({
      {"vld v1, 8[x2]", "f.s:1:9: expected a memory operand OFFSET(xN), got '8[x2]'"},
      {"lw x1, 4(y2)", "f.s:1:10: expected scalar register x0..x31, got 'y2'"},
      {"lw x1, 4(x2", "f.s:1:8: expected a memory operand OFFSET(xN), got '4(x2'"},
      {"sw x1, 4(x40)", "f.s:1:10: scalar register x40 does not exist"},
  });
  // an empty offset is 0
  EXPECT_EQ(assemble("lw x1, (x2)").words[0], assemble("lw x1, 0(x2)").words[0]);
}

TEST(AssemblerErrors, BadNameString) {
  expect_errors({
      {"mark.begin \"abc", "f.s:1:12: expected a quoted name, got \"abc"},
      {"mark.end abc", "f.s:1:10: expected a quoted name, got abc"},
      {"mark.begin \"\"", "f.s:1:12: a mark name cannot be empty"},
  });
}

TEST(AssemblerErrors, BadDirection) {
  expect_errors({
      {"vmovn v1, v2, x", "f.s:1:15: expected a direction n, e, s or w, got 'x'"},
      {"vmovn v1, v2, N", "f.s:1:15: expected a direction n, e, s or w, got 'N'"},
  });
}

TEST(AssemblerErrors, BadFloat) {
  expect_errors({
      {"vsplat.f32 v1, 1.5x", "f.s:1:16: '1.5x' is not a floating-point number"},
      {"vsplat.f32 v1, 1e39", "f.s:1:16: '1e39' overflows fp32"},
      {"vsplat.f32 v1, 0x1ffffffff", "f.s:1:16: immediate 8589934591 does not fit in 32 bits"},
  });
}

TEST(Assembler, AcceptsCrLfAndNoFinalNewline) {
  Program p = assemble("start:\r\n  li x1, 5\r\n  beq x0, x0, start", "crlf.s");
  ASSERT_EQ(p.words.size(), 2u);
  EXPECT_EQ(int32_t(p.words[1] >> 32), -1);
  EXPECT_EQ(p.lines, (std::vector<uint32_t>{2, 3}));
}

}  // namespace
}  // namespace gpnpu::isa::test
