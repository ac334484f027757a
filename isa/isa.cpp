// The instruction table compiled from isa_table.def, with its build-time checks,
// and the generic encoder, decoder and disassembler that read it.
#include "isa/isa.h"

#include <fmt/format.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <iterator>
#include <unordered_map>

#include "isa/error.h"
#include "isa/semantics.h"

namespace gpnpu::isa {

namespace {

struct RawRow {
  const char* ident;
  const char* mnemonic;
  uint8_t opcode;
  Unit unit;
  uint8_t mem_bytes;
  const char* operands;
  const char* description;
};

constexpr RawRow kRows[] = {
#define INSN(ident, mn, op, unit, ops, desc) {#ident, mn, op, Unit::unit, 0, ops, desc},
#define INSN_MEM(ident, mn, op, unit, bytes, ops, desc) {#ident, mn, op, Unit::unit, bytes, ops, desc},
#include "isa/isa_table.def"
#undef INSN_MEM
#undef INSN
};
constexpr int kNumRows = int(sizeof(kRows) / sizeof(kRows[0]));

constexpr bool is_kind(char k) {
  return k == 'X' || k == 'V' || k == 'P' || k == 'C' || k == 'N' || k == 'D' || k == 'I' ||
         k == 'F' || k == 'L' || k == 'S' || k == 'M';
}
constexpr bool imm_kind(char k) { return k == 'I' || k == 'F' || k == 'L' || k == 'S'; }

// Parses an operand string; returns the number of operands or -1 if malformed.
constexpr int parse_operands(const char* s, OperandSpec* out) {
  int n = 0;
  int i = 0;
  while (s[i]) {
    if (s[i] == ' ') { ++i; continue; }
    if (n == 4) return -1;
    OperandSpec o{};
    o.kind = s[i++];
    if (!is_kind(o.kind)) return -1;
    o.field = s[i] ? s[i++] : 0;
    if (s[i] == '=' || s[i] == '+') o.access = s[i++];
    if (s[i] != ' ' && s[i] != 0) return -1;
    bool reg_field = o.field >= 'a' && o.field <= 'd';
    if (imm_kind(o.kind) ? o.field != 'i' : !reg_field) return -1;
    if (o.access && o.kind != 'X' && o.kind != 'V' && o.kind != 'P') return -1;
    out[n++] = o;
  }
  return n;
}

// Fields a row's operands occupy, as a bit set (a=1, b=2, c=4, d=8, i=16).
constexpr int field_bit(char f) { return f == 'i' ? 16 : 1 << (f - 'a'); }
constexpr int fields_used(const OperandSpec* ops, int n, bool& overlap) {
  int used = 0;
  overlap = false;
  for (int k = 0; k < n; ++k) {
    int bits = field_bit(ops[k].field) | (ops[k].kind == 'M' ? 16 : 0);
    if (used & bits) overlap = true;
    used |= bits;
  }
  return used;
}

constexpr bool rows_well_formed() {
  for (int r = 0; r < kNumRows; ++r) {
    OperandSpec ops[4]{};
    int n = parse_operands(kRows[r].operands, ops);
    if (n < 0) return false;
    bool overlap = false;
    fields_used(ops, n, overlap);
    if (overlap) return false;
  }
  return true;
}
constexpr bool opcodes_unique() {
  for (int i = 0; i < kNumRows; ++i)
    for (int j = i + 1; j < kNumRows; ++j)
      if (kRows[i].opcode == kRows[j].opcode) return false;
  return true;
}
constexpr bool str_eq(const char* a, const char* b) {
  while (*a && *a == *b) { ++a; ++b; }
  return *a == *b;
}
constexpr bool mnemonics_unique() {
  for (int i = 0; i < kNumRows; ++i)
    for (int j = i + 1; j < kNumRows; ++j)
      if (str_eq(kRows[i].mnemonic, kRows[j].mnemonic)) return false;
  return true;
}
// The OCM port counts a row's memory bytes: a row on a port unit must give them, and
// only array rows may.
constexpr bool mem_bytes_consistent() {
  for (const RawRow& r : kRows) {
    if (unit_info(r.unit).port != Port::none && r.mem_bytes == 0) return false;
    if (r.mem_bytes && !is_array_unit(r.unit)) return false;
  }
  return true;
}
static_assert(opcodes_unique(), "isa_table.def: two rows share an opcode (overlapping encodings)");
static_assert(mem_bytes_consistent(),
              "isa_table.def: a row on an OCM port unit without INSN_MEM bytes, or memory bytes on a scalar row");
static_assert(mnemonics_unique(), "isa_table.def: two rows share a mnemonic");
static_assert(rows_well_formed(),
              "isa_table.def: a row has a malformed operand string or two operands in one field");

constexpr SemFn kSem[] = {
#define INSN(ident, mn, op, unit, ops, desc) &sem_##ident,
#include "isa/isa_table.def"
#undef INSN
};

std::vector<OpInfo> build_table() {
  std::vector<OpInfo> t;
  for (int r = 0; r < kNumRows; ++r) {
    const RawRow& row = kRows[r];
    OpInfo info{};
    info.ident = row.ident;
    info.mnemonic = row.mnemonic;
    info.opcode = row.opcode;
    info.unit = row.unit;
    info.nops = uint8_t(parse_operands(row.operands, info.ops.data()));
    info.predicated = is_array_unit(row.unit);
    info.mem_bytes = row.mem_bytes;
    info.operands = row.operands;
    info.description = row.description;
    info.sem = kSem[r];
    t.push_back(info);
  }
  return t;
}

uint8_t field_value(const Insn& i, char f) {
  switch (f) {
    case 'a': return i.a;
    case 'b': return i.b;
    case 'c': return i.c;
    default: return i.d;
  }
}

const char* const kDirNames[] = {"n", "e", "s", "w"};

}  // namespace

std::string_view unit_name(Unit u) { return unit_info(u).name; }

const std::vector<OpInfo>& table() {
  static const std::vector<OpInfo> t = build_table();
  return t;
}

const OpInfo* find_mnemonic(std::string_view mnemonic) {
  static const std::unordered_map<std::string_view, const OpInfo*> by_mnemonic = [] {
    std::unordered_map<std::string_view, const OpInfo*> m;
    for (const OpInfo& o : table()) m.emplace(o.mnemonic, &o);
    return m;
  }();
  // The kernel builder looks up millions of string literals: a small cache keyed by the
  // text's address answers most of them (a hit is checked against the text itself, so a
  // reused address can never return another row).
  thread_local std::array<const OpInfo*, 256> recent{};
  const OpInfo*& slot = recent[(reinterpret_cast<uintptr_t>(mnemonic.data()) >> 3 ^ mnemonic.size()) & 255];
  if (slot && mnemonic == slot->mnemonic) return slot;
  auto it = by_mnemonic.find(mnemonic);
  if (it == by_mnemonic.end()) return nullptr;
  return slot = it->second;
}

const OpInfo* find_opcode(uint8_t opcode) {
  static const std::array<const OpInfo*, 256> by_opcode = [] {
    std::array<const OpInfo*, 256> m{};
    for (const OpInfo& o : table()) m[o.opcode] = &o;
    return m;
  }();
  return by_opcode[opcode];
}

uint64_t pack(const Fields& f) {
  return uint64_t(f.opcode) | uint64_t(f.a & 31) << 8 | uint64_t(f.b & 31) << 13 |
         uint64_t(f.c & 31) << 18 | uint64_t(f.d & 31) << 23 | uint64_t(f.p & 7) << 28 |
         uint64_t(uint32_t(f.imm)) << 32;
}

Fields unpack(uint64_t w) {
  Fields f;
  f.opcode = uint8_t(w);
  f.a = (w >> 8) & 31;
  f.b = (w >> 13) & 31;
  f.c = (w >> 18) & 31;
  f.d = (w >> 23) & 31;
  f.p = (w >> 28) & 7;
  f.imm = int32_t(uint32_t(w >> 32));
  return f;
}

Insn decode(uint64_t word, uint32_t pc) {
  Fields f = unpack(word);
  const OpInfo* info = find_opcode(f.opcode);
  if (!info)
    fail("illegal encoding at pc {}: word 0x{:016x} has unknown opcode 0x{:02x}", pc, word,
         f.opcode);
  bool overlap = false;
  int used = fields_used(info->ops.data(), info->nops, overlap);
  auto reject = [&](std::string_view why) {
    fail("illegal encoding at pc {}: word 0x{:016x} ({}): {}", pc, word, info->mnemonic, why);
  };
  if (word & (1ull << 31)) reject("reserved bit 31 is set");
  if (!(used & 1) && f.a) reject("field a is not used by this instruction but is non-zero");
  if (!(used & 2) && f.b) reject("field b is not used by this instruction but is non-zero");
  if (!(used & 4) && f.c) reject("field c is not used by this instruction but is non-zero");
  if (!(used & 8) && f.d) reject("field d is not used by this instruction but is non-zero");
  if (!(used & 16) && f.imm) reject("the immediate is not used by this instruction but is non-zero");
  if (!info->predicated && f.p) reject("predicate field set on an instruction that takes none");

  Insn i;
  i.exec = info->sem;
  i.info = info;
  i.a = f.a; i.b = f.b; i.c = f.c; i.d = f.d; i.p = f.p;
  i.imm = f.imm;
  i.word = word;
  for (int k = 0; k < info->nops; ++k) {
    const OperandSpec& o = info->ops[k];
    uint8_t v = (o.kind == 'M') ? field_value(i, o.field) : (o.field == 'i' ? 0 : field_value(i, o.field));
    uint8_t id = 0xff;
    switch (o.kind) {
      case 'X': case 'M': id = uint8_t(kRegX + v); break;
      case 'V': id = uint8_t(kRegV + v); break;
      case 'P':
        if (v > 7) reject(fmt::format("predicate register p{} does not exist (p0..p7)", v));
        id = uint8_t(kRegP + v);
        break;
      case 'D': if (v > 3) reject("neighbour direction out of range (0..3 = n, e, s, w)"); break;
      default: break;
    }
    if (id == 0xff) continue;
    if (o.access == '=' || o.access == '+') i.dst[i.ndst++] = id;
    if (o.access != '=') i.src[i.nsrc++] = id;
  }
  if (info->predicated && i.p) i.src[i.nsrc++] = uint8_t(kRegP + i.p);
  return i;
}

bool branch_target(const Insn& insn, uint32_t pc, uint32_t& target) {
  for (int k = 0; k < insn.info->nops; ++k)
    if (insn.info->ops[k].kind == 'L') {
      target = uint32_t(int64_t(pc) + insn.imm);
      return true;
    }
  return false;
}

// Appends the decimal digits of v (no strlen of a temporary C string: disassembly of a
// multi-million-instruction program spends its time here).
static void append_int(std::string& s, int64_t v) {
  const fmt::format_int f(v);
  s.append(f.data(), f.size());
}

std::string disassemble(const Insn& insn, uint32_t pc, const DisasmContext& ctx) {
  std::string s;
  append_disassembly(s, insn, pc, ctx);
  return s;
}

void append_disassembly(std::string& s, const Insn& insn, uint32_t pc, const DisasmContext& ctx) {
  const OpInfo& info = *insn.info;
  s += info.mnemonic;
  auto to = std::back_inserter(s);
  for (int k = 0; k < info.nops; ++k) {
    const OperandSpec& o = info.ops[k];
    s += k == 0 ? " " : ", ";
    uint8_t v = o.field == 'i' ? 0 : field_value(insn, o.field);
    switch (o.kind) {
      case 'X': s += 'x'; append_int(s, v); break;
      case 'V': s += 'v'; append_int(s, v); break;
      case 'P': s += 'p'; append_int(s, v); break;
      case 'C': s += 'c'; append_int(s, v); break;
      case 'N': append_int(s, v); break;
      case 'D': s += kDirNames[v & 3]; break;
      case 'I':
        // Large values are addresses and masks far more often than counts: hex (as
        // the unsigned 32-bit word, which the assembler reads back to the same bits).
        if (insn.imm >= 0x10000 || insn.imm < -0x1000000) fmt::format_to(to, "0x{:x}", uint32_t(insn.imm));
        else append_int(s, insn.imm);
        break;
      case 'F': {
        // Shortest decimal that reads back to the same bits; raw bits for inf/nan.
        float f = std::bit_cast<float>(uint32_t(insn.imm));
        s += std::isfinite(f) ? fmt::format("{}", f) : fmt::format("0x{:08x}", uint32_t(insn.imm));
        break;
      }
      case 'L': {
        uint32_t t = uint32_t(int64_t(pc) + insn.imm);
        s += ctx.label_of ? ctx.label_of(t) : fmt::format("L{}", t);
        break;
      }
      case 'S':
        s += ctx.name_of ? fmt::format("\"{}\"", ctx.name_of(uint32_t(insn.imm)))
                         : fmt::format("#{}", insn.imm);
        break;
      case 'M':
        append_int(s, insn.imm);
        s += "(x";
        append_int(s, v);
        s += ')';
        break;
    }
  }
  if (info.predicated && insn.p) fmt::format_to(to, " @p{}", insn.p);
}

}  // namespace gpnpu::isa
