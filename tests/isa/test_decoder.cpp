// The decoder rejects every illegal encoding with a message that names the pc,
// the word and the reason; it accepts every legal one (see test_roundtrip.cpp).
#include "tests/isa/isa_test_util.h"

namespace gpnpu::isa::test {
namespace {

std::string decode_error(uint64_t word, uint32_t pc) {
  return error_of([&] { decode(word, pc); });
}

TEST(Decoder, UnknownOpcode) {
  int unknown = 0;
  for (int op = 0; op < 256; ++op) {
    if (find_opcode(uint8_t(op))) continue;
    ++unknown;
    std::string e = decode_error(uint64_t(op), 17);
    EXPECT_NE(e.find(fmt::format("illegal encoding at pc 17: word 0x{:016x} has unknown opcode 0x{:02x}", op, op)),
              std::string::npos)
        << e;
  }
  EXPECT_EQ(unknown, 256 - int(table().size()));
  for (const OpInfo& o : table()) EXPECT_EQ(find_opcode(o.opcode), &o);
}

// Which 5-bit fields a row's operands occupy.
std::string used_fields(const OpInfo& info) {
  std::string used;
  for (int k = 0; k < info.nops; ++k)
    if (info.ops[k].field != 'i') used += info.ops[k].field;
  return used;
}
bool uses_imm(const OpInfo& info) {
  for (int k = 0; k < info.nops; ++k)
    if (info.ops[k].field == 'i' || info.ops[k].kind == 'M') return true;
  return false;
}

TEST(Decoder, NonZeroUnusedField) {
  int rejected = 0;
  for (const OpInfo& info : table()) {
    const std::string used = used_fields(info);
    for (char field : std::string("abcd")) {
      if (used.find(field) != std::string::npos) continue;
      Fields f;
      f.opcode = info.opcode;
      uint8_t& slot = field == 'a' ? f.a : field == 'b' ? f.b : field == 'c' ? f.c : f.d;
      for (uint8_t v : {1, 16, 31}) {
        slot = v;
        std::string e = decode_error(pack(f), 3);
        EXPECT_NE(e.find(fmt::format("illegal encoding at pc 3: word 0x{:016x} ({}): field {} is not used by this "
                                     "instruction but is non-zero",
                                     pack(f), info.mnemonic, field)),
                  std::string::npos)
            << e;
        ++rejected;
      }
    }
    if (!uses_imm(info)) {
      Fields f;
      f.opcode = info.opcode;
      for (int32_t imm : {1, -1, INT32_MIN}) {
        f.imm = imm;
        std::string e = decode_error(pack(f), 9);
        EXPECT_NE(e.find(fmt::format("pc 9: word 0x{:016x} ({}): the immediate is not used", pack(f), info.mnemonic)),
                  std::string::npos)
            << e;
        ++rejected;
      }
    }
  }
  EXPECT_GT(rejected, 300);
  // spot check by hand: `nop` with a = 1 is 0x100
  EXPECT_NE(decode_error(0x100, 0).find("(nop): field a is not used"), std::string::npos);
}

TEST(Decoder, ReservedBit31) {
  for (const OpInfo& info : table()) {
    const uint64_t word = uint64_t(info.opcode) | (1ull << 31);
    std::string e = decode_error(word, 5);
    EXPECT_NE(e.find(fmt::format("illegal encoding at pc 5: word 0x{:016x} ({}): reserved bit 31 is set", word,
                                 info.mnemonic)),
              std::string::npos)
        << e;
  }
}

TEST(Decoder, PredicateOnANonArrayInstruction) {
  int non_array = 0;
  for (const OpInfo& info : table()) {
    EXPECT_EQ(info.predicated, is_array_unit(info.unit)) << info.mnemonic;
    Fields f;
    f.opcode = info.opcode;
    for (uint8_t p = 1; p < 8; ++p) {
      f.p = p;
      const uint64_t word = pack(f);
      EXPECT_EQ((word >> 28) & 7, p);
      if (info.predicated) continue;
      // operands at zero are legal for every row, so only the predicate is wrong
      std::string e = decode_error(word, 11);
      EXPECT_NE(e.find(fmt::format("pc 11: word 0x{:016x} ({}): predicate field set on an instruction that takes none",
                                   word, info.mnemonic)),
                std::string::npos)
          << e;
    }
    non_array += !info.predicated;
  }
  EXPECT_GT(non_array, 40);
  // an array row accepts every predicate register
  Fields f;
  f.p = 7;
  EXPECT_EQ(decode(word_of("vadd.f32", f), 0).p, 7);
  EXPECT_EQ(decode(word_of("vadd.f32", f), 0).src[decode(word_of("vadd.f32", f), 0).nsrc - 1], kRegP + 7);
}

TEST(Decoder, PredicateRegisterFieldAbove7) {
  for (const OpInfo& info : table())
    for (int k = 0; k < info.nops; ++k) {
      if (info.ops[k].kind != 'P') continue;
      for (uint8_t v : {8, 13, 31}) {
        Fields f;
        f.opcode = info.opcode;
        (info.ops[k].field == 'a' ? f.a : info.ops[k].field == 'b' ? f.b : f.c) = v;
        std::string e = decode_error(pack(f), 21);
        EXPECT_NE(e.find(fmt::format("pc 21: word 0x{:016x} ({}): predicate register p{} does not exist (p0..p7)",
                                     pack(f), info.mnemonic, v)),
                  std::string::npos)
            << e;
      }
    }
}

TEST(Decoder, DirectionAbove3) {
  Fields f;
  f.d = 4;
  std::string e = decode_error(word_of("vmovn", f), 2);
  EXPECT_NE(e.find("illegal encoding at pc 2: word 0x000000000200007b (vmovn): neighbour direction out of range"),
            std::string::npos)
      << e;
}

TEST(Decoder, ScoreboardRegisters) {
  // vmla.f32 v1, v2, v3 @p5: reads v1 v2 v3 p5, writes v1
  Fields f;
  f.a = 1;
  f.b = 2;
  f.c = 3;
  f.p = 5;
  Insn in = decode(word_of("vmla.f32", f), 0);
  ASSERT_EQ(in.ndst, 1);
  EXPECT_EQ(in.dst[0], kRegV + 1);
  ASSERT_EQ(in.nsrc, 4);
  EXPECT_EQ(in.src[0], kRegV + 1);
  EXPECT_EQ(in.src[1], kRegV + 2);
  EXPECT_EQ(in.src[2], kRegV + 3);
  EXPECT_EQ(in.src[3], kRegP + 5);
  // sw x3, 8(x4): reads x3 and x4, writes nothing
  Fields g;
  g.b = 4;
  g.c = 3;
  g.imm = 8;
  Insn st = decode(word_of("sw", g), 0);
  EXPECT_EQ(st.ndst, 0);
  ASSERT_EQ(st.nsrc, 2);
  EXPECT_EQ(st.src[0], kRegX + 3);
  EXPECT_EQ(st.src[1], kRegX + 4);
}

}  // namespace
}  // namespace gpnpu::isa::test
