// Golden tests, one per table row (scalar, control, predicate rows here; the array
// rows are in test_semantics_array.cpp). Each TEST_F(Golden, <ident>) must execute
// the instruction it is named after (checked in TearDown), and the meta-test
// GoldenRegistry.EveryRowHasAGoldenTest fails if a table row has no such test.
// Expected values are written by hand, never computed by the semantics helpers.
#include "tests/isa/golden.h"

namespace gpnpu::isa::test {
namespace {

TEST_F(Golden, nop) {
  s.x[1] = 7;
  m.V(3, 2, 5) = 9;
  run("nop");
  EXPECT_EQ(s.x[1], 7u);
  EXPECT_EQ(m.V(3, 2, 5), 9u);
  EXPECT_EQ(s.next_pc, 1u);
  EXPECT_EQ(s.effect, Effect::none);
}

TEST_F(Golden, add) {
  s.x[2] = 0xfffffffe;
  s.x[3] = 5;
  run("add x1, x2, x3");
  EXPECT_EQ(s.x[1], 3u);  // wraps modulo 2^32
  run("add x0, x2, x3");  // x0 is never written
  EXPECT_EQ(s.x[0], 0u);
  s.x[4] = 11;
  run("add x4, x4, x0");  // x0 reads 0
  EXPECT_EQ(s.x[4], 11u);
}

TEST_F(Golden, sub) {
  s.x[2] = 3;
  s.x[3] = 5;
  run("sub x1, x2, x3");
  EXPECT_EQ(s.x[1], 0xfffffffeu);
  run("sub x0, x2, x3");
  EXPECT_EQ(s.x[0], 0u);
}

TEST_F(Golden, and_) {
  s.x[2] = 0xff00ff00;
  s.x[3] = 0x0ff00ff0;
  run("and x1, x2, x3");
  EXPECT_EQ(s.x[1], 0x0f000f00u);
}

TEST_F(Golden, or_) {
  s.x[2] = 0xff00ff00;
  s.x[3] = 0x0ff00ff0;
  run("or x1, x2, x3");
  EXPECT_EQ(s.x[1], 0xfff0fff0u);
}

TEST_F(Golden, xor_) {
  s.x[2] = 0xff00ff00;
  s.x[3] = 0x0ff00ff0;
  run("xor x1, x2, x3");
  EXPECT_EQ(s.x[1], 0xf0f0f0f0u);
}

TEST_F(Golden, sll) {
  s.x[2] = 0x80000003;
  s.x[3] = 33;  // only the low 5 bits count: shift by 1
  run("sll x1, x2, x3");
  EXPECT_EQ(s.x[1], 0x00000006u);
}

TEST_F(Golden, srl) {
  s.x[2] = 0x80000000;
  s.x[3] = 35;  // shift by 3, zeros in
  run("srl x1, x2, x3");
  EXPECT_EQ(s.x[1], 0x10000000u);
}

TEST_F(Golden, sra) {
  s.x[2] = 0x80000000;
  s.x[3] = 35;  // shift by 3, sign in
  run("sra x1, x2, x3");
  EXPECT_EQ(s.x[1], 0xf0000000u);
  s.x[2] = 0x40000000;
  run("sra x1, x2, x3");
  EXPECT_EQ(s.x[1], 0x08000000u);
}

TEST_F(Golden, mul) {
  s.x[2] = 0x10001;
  s.x[3] = 0x10001;
  run("mul x1, x2, x3");
  EXPECT_EQ(s.x[1], 0x00020001u);  // 0x1_0002_0001 truncated
  s.x[2] = uint32_t(-3);
  s.x[3] = 7;
  run("mul x1, x2, x3");
  EXPECT_EQ(s.x[1], uint32_t(-21));
}

TEST_F(Golden, slt) {
  s.x[2] = uint32_t(-1);
  s.x[3] = 1;
  run("slt x1, x2, x3");
  EXPECT_EQ(s.x[1], 1u);
  run("slt x1, x3, x2");
  EXPECT_EQ(s.x[1], 0u);
  run("slt x1, x3, x3");
  EXPECT_EQ(s.x[1], 0u);
}

TEST_F(Golden, sltu) {
  s.x[2] = 0xffffffff;
  s.x[3] = 1;
  run("sltu x1, x2, x3");
  EXPECT_EQ(s.x[1], 0u);
  run("sltu x1, x3, x2");
  EXPECT_EQ(s.x[1], 1u);
}

TEST_F(Golden, divu) {
  s.x[2] = 7;
  s.x[3] = 2;
  run("divu x1, x2, x3");
  EXPECT_EQ(s.x[1], 3u);
  s.x[2] = 0xffffffff;  // unsigned, not -1
  run("divu x1, x2, x3");
  EXPECT_EQ(s.x[1], 0x7fffffffu);
  s.x[3] = 0;
  run("divu x1, x2, x3");
  EXPECT_EQ(s.x[1], 0xffffffffu);
  s.x[2] = 5;
  run("divu x1, x2, x0");
  EXPECT_EQ(s.x[1], 0xffffffffu);
}

TEST_F(Golden, remu) {
  s.x[2] = 7;
  s.x[3] = 2;
  run("remu x1, x2, x3");
  EXPECT_EQ(s.x[1], 1u);
  s.x[2] = 0xfffffffe;
  s.x[3] = 10;
  run("remu x1, x2, x3");
  EXPECT_EQ(s.x[1], 4u);  // 4294967294 % 10
  s.x[3] = 0;
  run("remu x1, x2, x3");
  EXPECT_EQ(s.x[1], 0xfffffffeu);  // remainder by zero gives xb
}

TEST_F(Golden, min) {
  s.x[2] = uint32_t(-5);
  s.x[3] = 3;
  run("min x1, x2, x3");
  EXPECT_EQ(s.x[1], uint32_t(-5));
  run("min x1, x3, x2");
  EXPECT_EQ(s.x[1], uint32_t(-5));
}

TEST_F(Golden, max) {
  s.x[2] = uint32_t(-5);
  s.x[3] = 3;
  run("max x1, x2, x3");
  EXPECT_EQ(s.x[1], 3u);
  s.x[2] = 0x80000000;
  s.x[3] = 0x7fffffff;
  run("max x1, x2, x3");
  EXPECT_EQ(s.x[1], 0x7fffffffu);
}

TEST_F(Golden, addi) {
  s.x[2] = 10;
  run("addi x1, x2, -11");
  EXPECT_EQ(s.x[1], 0xffffffffu);
  run("addi x0, x2, 5");
  EXPECT_EQ(s.x[0], 0u);
  run("addi x1, x0, 2147483647");
  EXPECT_EQ(s.x[1], 0x7fffffffu);
}

TEST_F(Golden, andi) {
  s.x[2] = 0x12345678;
  run("andi x1, x2, -16");  // immediate is sign-extended to 0xfffffff0
  EXPECT_EQ(s.x[1], 0x12345670u);
}

TEST_F(Golden, ori) {
  s.x[2] = 0x12345678;
  run("ori x1, x2, 0x80000000");
  EXPECT_EQ(s.x[1], 0x92345678u);
}

TEST_F(Golden, xori) {
  s.x[2] = 0x12345678;
  run("xori x1, x2, -1");
  EXPECT_EQ(s.x[1], 0xedcba987u);
}

TEST_F(Golden, slli) {
  s.x[2] = 0x80000003;
  run("slli x1, x2, 33");
  EXPECT_EQ(s.x[1], 6u);
  run("slli x1, x2, 4");
  EXPECT_EQ(s.x[1], 0x00000030u);
}

TEST_F(Golden, srli) {
  s.x[2] = 0x80000000;
  run("srli x1, x2, 4");
  EXPECT_EQ(s.x[1], 0x08000000u);
}

TEST_F(Golden, srai) {
  s.x[2] = 0x80000010;
  run("srai x1, x2, 4");
  EXPECT_EQ(s.x[1], 0xf8000001u);  // sign bit copied in
  s.x[2] = 0x70000010;
  run("srai x1, x2, 4");
  EXPECT_EQ(s.x[1], 0x07000001u);
  s.x[2] = uint32_t(-1);
  run("srai x1, x2, 31");
  EXPECT_EQ(s.x[1], 0xffffffffu);
  s.x[2] = uint32_t(-8);
  run("srai x1, x2, 35");  // shift by 3
  EXPECT_EQ(s.x[1], uint32_t(-1));
}

TEST_F(Golden, muli) {
  s.x[2] = 7;
  run("muli x1, x2, -3");
  EXPECT_EQ(s.x[1], uint32_t(-21));
}

TEST_F(Golden, slti) {
  s.x[2] = uint32_t(-2);
  run("slti x1, x2, -1");
  EXPECT_EQ(s.x[1], 1u);
  run("slti x1, x2, -2");
  EXPECT_EQ(s.x[1], 0u);
  s.x[2] = 0x80000000;
  run("slti x1, x2, 0");
  EXPECT_EQ(s.x[1], 1u);
}

TEST_F(Golden, li) {
  run("li x1, -7");
  EXPECT_EQ(s.x[1], uint32_t(-7));
  run("li x1, 0xffffffff");
  EXPECT_EQ(s.x[1], 0xffffffffu);
  run("li x0, 5");
  EXPECT_EQ(s.x[0], 0u);
}

TEST_F(Golden, sw) {
  s.x[2] = 16;
  s.x[3] = 0x11223344;
  run("sw x3, -8(x2)");
  EXPECT_EQ(s.smem[8], 0x44);  // little endian
  EXPECT_EQ(s.smem[9], 0x33);
  EXPECT_EQ(s.smem[10], 0x22);
  EXPECT_EQ(s.smem[11], 0x11);
  EXPECT_EQ(s.smem[12], 0x00);
  EXPECT_EQ(s.smem[7], 0x00);
  s.x[2] = 253;
  std::string e = error_of([&] { run("sw x3, 0(x2)"); });
  EXPECT_NE(e.find("scalar memory access out of range: bytes [0xfd, 0x101)"), std::string::npos) << e;
  EXPECT_NE(e.find("has 0x100 bytes"), std::string::npos) << e;
}

TEST_F(Golden, lw) {
  s.smem[252] = 0x78;
  s.smem[253] = 0x56;
  s.smem[254] = 0x34;
  s.smem[255] = 0x12;
  s.x[2] = 250;
  run("lw x1, 2(x2)");
  EXPECT_EQ(s.x[1], 0x12345678u);
  run("lw x0, 2(x2)");
  EXPECT_EQ(s.x[0], 0u);
  std::string e = error_of([&] { run("lw x1, 3(x2)"); });
  EXPECT_NE(e.find("scalar memory access out of range: bytes [0xfd, 0x101)"), std::string::npos) << e;
  // xb + imm wraps in 32 bits: -4 from 0 is 0xfffffffc, far out of range
  e = error_of([&] { run("lw x1, -4(x0)"); });
  EXPECT_NE(e.find("[0xfffffffc, 0x100000000)"), std::string::npos) << e;
}

// Conditional branches: `taken` and `not taken` pairs at pc 10 with offsets +4 / -3.
void branch_case(Golden& g, const char* mn, uint32_t b, uint32_t c, bool taken) {
  g.s.x[2] = b;
  g.s.x[3] = c;
  Fields f;
  f.b = 2;
  f.c = 3;
  f.imm = 4;
  g.run_fields(mn, f, 10);
  EXPECT_EQ(g.s.next_pc, taken ? 14u : 11u) << mn << " " << b << " " << c;
  f.imm = -3;
  g.run_fields(mn, f, 10);
  EXPECT_EQ(g.s.next_pc, taken ? 7u : 11u) << mn << " " << b << " " << c;
}

TEST_F(Golden, beq) {
  branch_case(*this, "beq", 5, 5, true);
  branch_case(*this, "beq", 5, 6, false);
}
TEST_F(Golden, bne) {
  branch_case(*this, "bne", 5, 5, false);
  branch_case(*this, "bne", 5, 6, true);
}
TEST_F(Golden, blt) {
  branch_case(*this, "blt", uint32_t(-1), 1, true);
  branch_case(*this, "blt", 1, uint32_t(-1), false);
  branch_case(*this, "blt", 3, 3, false);
}
TEST_F(Golden, bge) {
  branch_case(*this, "bge", uint32_t(-1), 1, false);
  branch_case(*this, "bge", 1, uint32_t(-1), true);
  branch_case(*this, "bge", 3, 3, true);
}
TEST_F(Golden, bltu) {
  branch_case(*this, "bltu", uint32_t(-1), 1, false);
  branch_case(*this, "bltu", 1, uint32_t(-1), true);
  branch_case(*this, "bltu", 3, 3, false);
}
TEST_F(Golden, bgeu) {
  branch_case(*this, "bgeu", uint32_t(-1), 1, true);
  branch_case(*this, "bgeu", 1, uint32_t(-1), false);
  branch_case(*this, "bgeu", 3, 3, true);
}

TEST_F(Golden, jal) {
  Fields f;
  f.a = 1;
  f.imm = -5;
  run_fields("jal", f, 20);
  EXPECT_EQ(s.x[1], 21u);
  EXPECT_EQ(s.next_pc, 15u);
  f.a = 0;
  f.imm = 100;
  run_fields("jal", f, 20);
  EXPECT_EQ(s.x[0], 0u);
  EXPECT_EQ(s.next_pc, 120u);
}

TEST_F(Golden, jalr) {
  s.x[2] = 40;
  run("jalr x1, x2, -2", 7);
  EXPECT_EQ(s.x[1], 8u);
  EXPECT_EQ(s.next_pc, 38u);
  // xa == xb: the target uses the old xb
  run("jalr x2, x2, 1", 7);
  EXPECT_EQ(s.x[2], 8u);
  EXPECT_EQ(s.next_pc, 41u);
}

TEST_F(Golden, loop) {
  // Only the instruction itself here; whole loops run in HardwareLoop.* tests.
  s.x[2] = 3;
  Fields f;
  f.b = 2;
  f.imm = 4;
  run_fields("loop", f, 5);
  ASSERT_EQ(s.loop_depth, 1);
  EXPECT_EQ(s.loops[0].start, 6u);
  EXPECT_EQ(s.loops[0].end, 9u);
  EXPECT_EQ(s.loops[0].remaining, 3u);
  EXPECT_EQ(s.next_pc, 6u);
  s.x[2] = 0;  // count 0: skip to the end label, no frame
  run_fields("loop", f, 20);
  EXPECT_EQ(s.loop_depth, 1);
  EXPECT_EQ(s.next_pc, 24u);
  f.imm = 1;  // empty body
  std::string e = error_of([&] { run_fields("loop", f, 20); });
  EXPECT_NE(e.find("loop at pc 20: the body is empty"), std::string::npos) << e;
}

TEST_F(Golden, halt) {
  run("halt", 3);
  EXPECT_EQ(s.effect, Effect::halt);
}

TEST_F(Golden, mark_begin) {
  Program p;
  exec_text(s, "mark.begin \"attn\"", 0, &p);
  record("mark.begin");
  EXPECT_EQ(s.effect, Effect::mark_begin);
  ASSERT_EQ(p.names.size(), 1u);
  EXPECT_EQ(p.names[s.effect_arg], "attn");
  Fields f;
  f.imm = 5;
  run_fields("mark.begin", f);
  EXPECT_EQ(s.effect_arg, 5u);
}

TEST_F(Golden, mark_end) {
  Fields f;
  f.imm = 7;
  run_fields("mark.end", f);
  EXPECT_EQ(s.effect, Effect::mark_end);
  EXPECT_EQ(s.effect_arg, 7u);
}

// Predicates on a 2 x 3 array: pe = row * 3 + col.
std::vector<int> pred_bits(ArchState& s, int p) {
  return std::vector<int>(s.pred.begin() + p * s.npe, s.pred.begin() + (p + 1) * s.npe);
}

TEST_F(Golden, pset_range) {
  s.x[2] = 1;
  s.x[3] = 4;
  run("pset.range p1, x2, x3");
  EXPECT_EQ(pred_bits(s, 1), (std::vector<int>{0, 1, 1, 1, 0, 0}));
  EXPECT_EQ(s.pred_count[1], 3u);
  s.x[2] = 4;
  s.x[3] = 1;  // empty range
  run("pset.range p1, x2, x3");
  EXPECT_EQ(pred_bits(s, 1), (std::vector<int>{0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(s.pred_count[1], 0u);
  std::string e = error_of([&] { run("pset.range p0, x2, x3"); });
  EXPECT_NE(e.find("p0 is the constant all-ones predicate"), std::string::npos) << e;
  EXPECT_EQ(pred_bits(s, 0), (std::vector<int>{1, 1, 1, 1, 1, 1}));
}

TEST_F(Golden, pset_rows) {
  s.x[2] = 1;
  s.x[3] = 2;
  run("pset.rows p2, x2, x3");
  EXPECT_EQ(pred_bits(s, 2), (std::vector<int>{0, 0, 0, 1, 1, 1}));
  EXPECT_EQ(s.pred_count[2], 3u);
}

TEST_F(Golden, pset_cols) {
  s.x[2] = 1;
  s.x[3] = 2;
  run("pset.cols p3, x2, x3");
  EXPECT_EQ(pred_bits(s, 3), (std::vector<int>{0, 1, 0, 0, 1, 0}));
  EXPECT_EQ(s.pred_count[3], 2u);
}

TEST_F(Golden, pset_cmod) {
  s.x[2] = 1;
  s.x[3] = 2;
  run("pset.cmod p3, x2, x3");  // 2 x 3 PEs: the odd columns
  EXPECT_EQ(pred_bits(s, 3), (std::vector<int>{0, 1, 0, 0, 1, 0}));
  EXPECT_EQ(s.pred_count[3], 2u);
  s.x[3] = 0;
  run("pset.cmod p3, x2, x3");
  EXPECT_EQ(s.pred_count[3], 0u);
}

// The pset forms write their bytes and summary without the per-PE test
// (sem_scalar.cpp): every bound pair, empty, clipped and past 2^31 included, against
// the rows' definitions and against summarise_predicate() of the written bytes.
TEST(PsetRanges, MatchTheDefinitionsAndSummary) {
  Machine m(4, 5);
  ArchState& s = m.s;
  const uint32_t bounds[] = {0, 1, 2, 3, 4, 5, 6, 19, 20, 21, 0x7fffffffu, 0x80000000u, 0xfffffffeu, 0xffffffffu};
  struct Form {
    const char* text;
    std::function<bool(uint32_t e, uint32_t lo, uint32_t hi)> on;
  };
  const Form forms[] = {
      {"pset.range p2, x2, x3", [](uint32_t e, uint32_t lo, uint32_t hi) { return e >= lo && e < hi; }},
      {"pset.rows p2, x2, x3", [](uint32_t e, uint32_t lo, uint32_t hi) { return e / 5 >= lo && e / 5 < hi; }},
      {"pset.cols p2, x2, x3", [](uint32_t e, uint32_t lo, uint32_t hi) { return e % 5 >= lo && e % 5 < hi; }},
      {"pset.cmod p2, x2, x3", [](uint32_t e, uint32_t h, uint32_t m) { return m != 0 && e % 5 % m == h; }},
  };
  for (const Form& f : forms)
    for (uint32_t lo : bounds)
      for (uint32_t hi : bounds) {
        s.x[2] = lo, s.x[3] = hi;
        exec_text(s, f.text);
        std::vector<int> want(s.npe);
        for (uint32_t e = 0; e < s.npe; ++e) want[e] = f.on(e, lo, hi);
        ASSERT_EQ(pred_bits(s, 2), want) << f.text << " lo " << lo << " hi " << hi;
        const uint32_t count = s.pred_count[2], first = s.pred_first[2], last = s.pred_last[2];
        s.summarise_predicate(2);
        EXPECT_EQ(count, s.pred_count[2]) << f.text << " lo " << lo << " hi " << hi;
        EXPECT_EQ(first, s.pred_first[2]) << f.text << " lo " << lo << " hi " << hi;
        EXPECT_EQ(last, s.pred_last[2]) << f.text << " lo " << lo << " hi " << hi;
      }
}

// pand, por and pnot of one-run operands write runs directly (sem_scalar.cpp): every
// pair of runs on 20 PEs (empty, touching, overlapping, apart, whole), and operands
// that are not one run, against the definitions and summarise_predicate().
TEST(PredicateLogic, RunsMatchTheDefinitionsAndSummary) {
  Machine m(4, 5);
  ArchState& s = m.s;
  std::vector<std::vector<int>> preds;
  for (uint32_t lo = 0; lo <= 20; lo += 3)
    for (uint32_t hi = lo; hi <= 20; hi += 4) {
      std::vector<int> p(20, 0);
      for (uint32_t e = lo; e < hi; ++e) p[e] = 1;
      preds.push_back(p);
    }
  preds.push_back({1, 0, 1, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1});  // not one run
  preds.push_back(std::vector<int>(20, 1));
  auto set = [&](int p, const std::vector<int>& bits) {
    std::copy(bits.begin(), bits.end(), s.pred.begin() + p * s.npe);
    s.summarise_predicate(p);
  };
  for (const auto& b : preds)
    for (const auto& c : preds)
      for (const char* text : {"pand p3, p1, p2", "por p3, p1, p2", "pnot p3, p1"}) {
        set(1, b), set(2, c);
        exec_text(s, text);
        std::vector<int> want(20);
        for (int e = 0; e < 20; ++e)
          want[e] = text[1] == 'a' ? (b[e] & c[e]) : text[1] == 'o' ? (b[e] | c[e]) : !b[e];
        ASSERT_EQ(pred_bits(s, 3), want) << text;
        const uint32_t count = s.pred_count[3], first = s.pred_first[3], last = s.pred_last[3];
        s.summarise_predicate(3);
        ASSERT_EQ(count, s.pred_count[3]) << text;
        ASSERT_EQ(first, s.pred_first[3]) << text;
        ASSERT_EQ(last, s.pred_last[3]) << text;
      }
}

TEST_F(Golden, pand) {
  m.set_pred(1, {0, 1, 2});
  m.set_pred(2, {1, 4, 2});
  run("pand p3, p1, p2");
  EXPECT_EQ(pred_bits(s, 3), (std::vector<int>{0, 1, 1, 0, 0, 0}));
  EXPECT_EQ(s.pred_count[3], 2u);
  run("pand p3, p0, p2");
  EXPECT_EQ(pred_bits(s, 3), (std::vector<int>{0, 1, 1, 0, 1, 0}));
}

TEST_F(Golden, por) {
  m.set_pred(1, {0, 1});
  m.set_pred(2, {1, 5});
  run("por p7, p1, p2");
  EXPECT_EQ(pred_bits(s, 7), (std::vector<int>{1, 1, 0, 0, 0, 1}));
  EXPECT_EQ(s.pred_count[7], 3u);
}

TEST_F(Golden, pnot) {
  m.set_pred(1, {0, 5});
  run("pnot p1, p1");  // in place
  EXPECT_EQ(pred_bits(s, 1), (std::vector<int>{0, 1, 1, 1, 1, 0}));
  EXPECT_EQ(s.pred_count[1], 4u);
  run("pnot p2, p0");
  EXPECT_EQ(s.pred_count[2], 0u);
}

TEST_F(Golden, dma_start) {
  const uint32_t desc[9] = {0x1000, 0x2000, 48, 3, 64, 96, 2, 1024, 512};
  for (int k = 0; k < 9; ++k) m.put32(s.smem, 32 + 4 * k, desc[k]);
  s.x[2] = 32;
  run("dma.start c3, x2");
  EXPECT_EQ(s.effect, Effect::dma_start);
  EXPECT_EQ(s.effect_arg, 3u);
  EXPECT_EQ(s.dma.src, 0x1000u);
  EXPECT_EQ(s.dma.dst, 0x2000u);
  EXPECT_EQ(s.dma.row_bytes, 48u);
  EXPECT_EQ(s.dma.rows, 3u);
  EXPECT_EQ(s.dma.src_stride, 64u);
  EXPECT_EQ(s.dma.dst_stride, 96u);
  EXPECT_EQ(s.dma.planes, 2u);
  EXPECT_EQ(s.dma.src_plane_stride, 1024u);
  EXPECT_EQ(s.dma.dst_plane_stride, 512u);
  EXPECT_EQ(s.dma.bytes(), 48u * 3 * 2);

  // each dimension zero in turn: an error naming the channel and the address
  for (int zero : {2, 3, 6}) {
    for (int k = 0; k < 9; ++k) m.put32(s.smem, 32 + 4 * k, desc[k]);
    m.put32(s.smem, 32 + 4 * zero, 0);
    std::string e = error_of([&] { run("dma.start c1, x2"); });
    EXPECT_NE(e.find("dma.start c1: descriptor at scalar address 0x20 has an empty shape"), std::string::npos) << e;
  }
  // the descriptor must lie inside scalar memory: 36 bytes from 224 ends at 260
  s.x[2] = 224;
  std::string e = error_of([&] { run("dma.start c0, x2"); });
  EXPECT_NE(e.find("scalar memory (DMA descriptor) access out of range: bytes [0xe0, 0x104)"), std::string::npos) << e;
}

TEST_F(Golden, dma_wait) {
  run("dma.wait c5");
  EXPECT_EQ(s.effect, Effect::dma_wait);
  EXPECT_EQ(s.effect_arg, 5u);
}

TEST_F(Golden, dma_waitall) {
  run("dma.waitall");
  EXPECT_EQ(s.effect, Effect::dma_waitall);
}

}  // namespace
}  // namespace gpnpu::isa::test
