// Round trips over the whole table: fields -> word -> decode -> disassemble ->
// assemble -> the same word, for several non-trivial operand sets per row; and a
// multi-instruction program through write_binary / read_binary / disassemble.
#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "tests/isa/isa_test_util.h"

namespace gpnpu::isa::test {
namespace {

// fp32 immediates: -0.0, the smallest and largest denormals, 1e-5, inf, -inf, a quiet
// NaN, a NaN with payload, the largest finite, 1/3, a negative integer.
const uint32_t kFloatBits[] = {0x80000000, 0x00000001, 0x007fffff, 0x3727c5ac, 0x7f800000, 0xff800000,
                               0x7fc00000, 0xffc00001, 0x7f7fffff, 0x3eaaaaab, 0xc2c80000, 0x00000000};
const int32_t kInts[] = {-1, INT32_MIN, INT32_MAX, 0, 7, -123456, 0x7ff};
// Label offsets relative to the instruction: forward and backward, and the instruction itself.
const int32_t kOffsets[] = {3, -4, 1, 0, -1, 2};
// Mark names that stress the tokenizer: spaces, comment characters, comma and @.
const char* const kNames[] = {"attn", "mlp.down #2; x", "a, b @p1", "layer 0"};

constexpr uint32_t kPc = 4;     // the instruction under test sits here
constexpr uint32_t kLen = 12;   // program length; labels point inside it

// Field values for variant v of a row: registers spread over 0..31, predicate
// registers over 0..7, directions 0..3, small numbers 0..31.
Fields variant_fields(const OpInfo& info, int v) {
  Fields f;
  f.opcode = info.opcode;
  for (int k = 0; k < info.nops; ++k) {
    const OperandSpec& o = info.ops[k];
    uint8_t reg = uint8_t((v * 13 + k * 7 + 31) % 32);
    uint8_t val = 0;
    switch (o.kind) {
      case 'X': case 'V': case 'C': case 'N': case 'M': val = reg; break;
      case 'P': val = uint8_t((v * 3 + k) % 8); break;
      case 'D': val = uint8_t((v + k) % 4); break;
      case 'I': f.imm = kInts[v % std::size(kInts)]; break;
      case 'F': f.imm = int32_t(kFloatBits[v % std::size(kFloatBits)]); break;
      case 'L': f.imm = kOffsets[v % std::size(kOffsets)]; break;
      case 'S': f.imm = v % int(std::size(kNames)); break;
    }
    if (o.kind == 'M') f.imm = kInts[(v + 3) % std::size(kInts)];
    if (o.field >= 'a' && o.field <= 'd') {
      switch (o.field) {
        case 'a': f.a = val; break;
        case 'b': f.b = val; break;
        case 'c': f.c = val; break;
        default: f.d = val; break;
      }
    }
  }
  if (info.predicated) f.p = uint8_t(v % 8);
  return f;
}

TEST(RoundTrip, EveryRowEncodeDecodeDisassembleAssemble) {
  int checked = 0;
  for (const OpInfo& info : table()) {
    const int variants = 12;  // covers every fp immediate, every predicate, every direction
    for (int v = 0; v < variants; ++v) {
      Fields f = variant_fields(info, v);
      const uint64_t word = pack(f);
      Insn in = decode(word, kPc);
      ASSERT_EQ(in.info, &info);
      EXPECT_EQ(in.a, f.a);
      EXPECT_EQ(in.b, f.b);
      EXPECT_EQ(in.c, f.c);
      EXPECT_EQ(in.d, f.d);
      EXPECT_EQ(in.p, f.p);
      EXPECT_EQ(in.imm, f.imm);
      EXPECT_EQ(in.word, word);
      EXPECT_EQ(in.exec, info.sem);

      DisasmContext ctx;
      ctx.name_of = [](uint32_t id) { return std::string(kNames[id]); };
      const std::string text = disassemble(in, kPc, ctx);
      // A program around it: mark names 0..id-1 interned first so that the S operand
      // gets the same index; a label L<t> before each pc; nops elsewhere.
      std::string src;
      int mark_id = -1;
      for (int k = 0; k < info.nops; ++k)
        if (info.ops[k].kind == 'S') mark_id = f.imm;
      for (uint32_t pc = 0; pc < kLen; ++pc) {
        src += "L" + std::to_string(pc) + ":\n";
        if (pc == kPc) src += "  " + text + "\n";
        else if (int(pc) < mark_id) src += std::string("  mark.begin \"") + kNames[pc] + "\"\n";
        else src += "  nop\n";
      }
      SCOPED_TRACE(info.mnemonic + std::string(" variant ") + std::to_string(v) + ": " + text);
      Program p;
      ASSERT_NO_THROW(p = assemble(src, "<roundtrip>"));
      ASSERT_EQ(p.words.size(), kLen);
      EXPECT_EQ(p.words[kPc], word) << std::hex << "got 0x" << p.words[kPc] << " want 0x" << word;
      if (mark_id >= 0) {
        EXPECT_EQ(p.names.at(size_t(mark_id)), kNames[mark_id]);
      }
      ++checked;
    }
  }
  EXPECT_EQ(checked, int(table().size()) * 12);
}

TEST(RoundTrip, FloatImmediatesKeepTheirBits) {
  // The decimal text of every fp immediate kind reads back to the same bits.
  for (uint32_t bits : kFloatBits) {
    Fields f;
    f.a = 3;
    f.imm = int32_t(bits);
    Insn in = decode(word_of("vsplat.f32", f), 0);
    std::string text = disassemble(in, 0);
    Program p = assemble(text);
    EXPECT_EQ(p.words.at(0), in.word) << text;
  }
  // Decimal spellings
  EXPECT_EQ(assemble("vsplat.f32 v1, -0.0").words[0] >> 32, 0x80000000u);
  EXPECT_EQ(assemble("vsplat.f32 v1, 1e-5").words[0] >> 32, 0x3727c5acu);
  EXPECT_EQ(assemble("vsplat.f32 v1, 1.4e-45").words[0] >> 32, 0x00000001u);
  EXPECT_EQ(assemble("vsplat.f32 v1, 0x7f800000").words[0] >> 32, 0x7f800000u);
}

const char* kProgram = R"(# a small kernel with every kind of operand
.equ ROWS, 4
.equ STRIDE, ROWS * 16 + 2
start:
    mark.begin "gemv"
    li x1, ROWS
    li x2, -STRIDE
    pset.rows p1, x0, x1
    loop x1, body_end          ; hardware loop
      vld v1, 64(x2)
      vmac.f16 v2, v1, v3 @p1
      vmovn v4, v2, w @p1
      vsplat.f32 v5, -1.5e-3
    body_end:
    mark.begin "inner, with comma"
    obcast.h v6, -32(x3) @p7
    oscatter v7, 0(x4), x5
    dma.start c2, x6
    dma.wait c2
    mark.end "inner, with comma"
    bne x1, x0, start
back: beq x0, x0, forward
    jal x1, back
forward:
    mark.end "gemv"
    halt
)";

TEST(RoundTrip, ProgramBinaryAndDisassembly) {
  Program p = assemble(kProgram, "kernel.s");
  ASSERT_EQ(p.words.size(), 20u);
  EXPECT_EQ(p.names, (std::vector<std::string>{"gemv", "inner, with comma"}));
  EXPECT_EQ(p.lines.front(), 5u);
  EXPECT_EQ(p.lines.back(), 26u);
  EXPECT_EQ(int32_t(p.words[2] >> 32), -66);  // -STRIDE

  const auto dir = std::filesystem::temp_directory_path() / ("gpnpu_isa_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string bin = (dir / "kernel.bin").string();
  p.write_binary(bin);
  Program q = Program::read_binary(bin);
  EXPECT_EQ(q.words, p.words);
  EXPECT_EQ(q.names, p.names);
  Program l = Program::load(bin);  // chosen by the magic
  EXPECT_EQ(l.words, p.words);

  const std::string text = p.disassemble();
  Program r = assemble(text, "disassembled.s");
  EXPECT_EQ(r.words, p.words) << text;
  EXPECT_EQ(r.names, p.names);
  EXPECT_EQ(r.disassemble(), text);  // a fixed point

  const std::string src = (dir / "kernel.s").string();
  std::ofstream(src) << text;
  EXPECT_EQ(Program::load(src).words, p.words);  // text chosen by the absence of magic

  // corrupt files: truncated and with trailing bytes
  std::string data;
  {
    std::ifstream in(bin, std::ios::binary);
    data.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  std::ofstream(bin, std::ios::binary) << data.substr(0, data.size() - 3);
  EXPECT_NE(error_of([&] { Program::read_binary(bin); }).find("is truncated"), std::string::npos);
  std::ofstream(bin, std::ios::binary) << data << "xy";
  EXPECT_NE(error_of([&] { Program::read_binary(bin); }).find("2 unexpected trailing bytes"), std::string::npos);
  std::filesystem::remove_all(dir);
}

// Program::disassemble promises text that assembles back to the same words, but
// the assembler interns mark names in first-use order: a program whose names table
// is in another order (built with intern() by an emitter) comes back renumbered.
// Disabled until the lead decides (see the report): enable to see it fail.
TEST(RoundTrip, NamesNotInFirstUseOrder) {
  Program p;
  p.intern("b");
  Fields f;
  f.imm = int32_t(p.intern("a"));
  p.words.push_back(word_of("mark.begin", f));
  f.imm = 0;
  p.words.push_back(word_of("mark.begin", f));
  Program r = assemble(p.disassemble());
  EXPECT_EQ(r.words, p.words) << p.disassemble();
}

TEST(RoundTrip, DecodeRejectsAMarkIdBeyondTheNames) {
  Program p = assemble("mark.begin \"a\"\nhalt\n");
  Fields f;
  f.imm = 1;
  p.words.push_back(word_of("mark.end", f));
  std::string e = error_of([&] { p.decode(); });
  EXPECT_NE(e.find("pc 2: mark.end names mark #1 but the program has 1 names"), std::string::npos) << e;
}

}  // namespace
}  // namespace gpnpu::isa::test
