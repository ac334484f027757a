// The GPNPU instruction set, as data derived from isa_table.def.
// Contract: `table()` lists every instruction once; `decode` turns a 64-bit word into
// a predecoded Insn (semantics pointer, fields, scoreboard registers) or throws
// gpnpu::Error for an illegal encoding; `encode` is its inverse; `disassemble`
// prints the text `Assembler` accepts. Timing is not here (see sim/).
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

namespace gpnpu::isa {

struct ArchState;
struct Insn;
using SemFn = void (*)(ArchState&, const Insn&);

// Unit classes (isa/unit_table.def): each has lat.<name> and occ.<name> in the
// machine config; resource, port and flags are the table's.
enum class Unit : uint8_t {
#define UNIT(name, resource, port, flags, desc) name,
#include "isa/unit_table.def"
#undef UNIT
  count
};
constexpr int kNumUnits = int(Unit::count);
std::string_view unit_name(Unit u);

// How a unit class uses the OCM <-> array port (unit_table.def, column port).
enum class Port : uint8_t { none, ocm_row, ocm_group, ocm_per_pe };
inline constexpr uint8_t kNone = 0, kArray = 1, kCompute = 2, kMac = 4, kBranch = 8;  // unit flags
struct UnitInfo {
  const char* name;
  Unit resource;  // the class whose issue slot it occupies
  Port port;
  uint8_t flags;
  const char* description;
};
inline constexpr UnitInfo kUnits[] = {
#define UNIT(name, resource, port, flags, desc) {#name, Unit::resource, Port::port, flags, desc},
#include "isa/unit_table.def"
#undef UNIT
};
static_assert(std::size(kUnits) == size_t(kNumUnits));
constexpr const UnitInfo& unit_info(Unit u) { return kUnits[int(u)]; }
// Array units: predicated, on the PE array.
constexpr bool is_array_unit(Unit u) { return unit_info(u).flags & kArray; }
// Units whose semantics touch only array registers (skippable in timing-only mode).
constexpr bool is_array_compute(Unit u) { return unit_info(u).flags & kCompute; }

struct OperandSpec {
  char kind = 0;    // X V P C N D I F L S M (see isa_table.def)
  char field = 0;   // a b c d i
  char access = 0;  // 0 read, '=' write, '+' read-write
};

struct OpInfo {
  const char* ident;
  const char* mnemonic;
  uint8_t opcode;
  Unit unit;
  std::array<OperandSpec, 4> ops;
  uint8_t nops;
  bool predicated;
  uint8_t mem_bytes;     // bytes per PE of an array memory row (the table's INSN_MEM column), else 0
  const char* operands;  // the table's operand string
  const char* description;
  SemFn sem;
};

// The whole table, in table order.
const std::vector<OpInfo>& table();
// Lookup by mnemonic ("vmac.f16"); nullptr if unknown.
const OpInfo* find_mnemonic(std::string_view mnemonic);
// Lookup by opcode; nullptr if no row has it.
const OpInfo* find_opcode(uint8_t opcode);

// Register ids in one numbering for the scoreboard: x0..x31, v0..v31, p0..p7.
constexpr uint8_t kRegX = 0, kRegV = 32, kRegP = 64, kNumRegs = 72;

// A predecoded instruction: what the sequencer executes and times.
struct Insn {
  SemFn exec = nullptr;
  const OpInfo* info = nullptr;
  uint8_t a = 0, b = 0, c = 0, d = 0, p = 0;
  int32_t imm = 0;
  uint8_t nsrc = 0, ndst = 0;
  std::array<uint8_t, 5> src{};  // scoreboard ids read
  std::array<uint8_t, 2> dst{};  // scoreboard ids written
  uint64_t word = 0;
};

// Field layout of the 64-bit word.
struct Fields {
  uint8_t opcode = 0, a = 0, b = 0, c = 0, d = 0, p = 0;
  int32_t imm = 0;
};
uint64_t pack(const Fields& f);
Fields unpack(uint64_t word);

// Decode one word; throws gpnpu::Error("illegal encoding ...") naming the pc.
Insn decode(uint64_t word, uint32_t pc);

// Text of one instruction. `name_of(id)` gives mark names; `label_of(pc)` gives a
// label for a branch target (default: "L<pc>").
struct DisasmContext {
  std::function<std::string(uint32_t)> name_of;
  std::function<std::string(uint32_t)> label_of;
};
std::string disassemble(const Insn& insn, uint32_t pc, const DisasmContext& ctx = {});
// The same text appended to `s` (no string per instruction).
void append_disassembly(std::string& s, const Insn& insn, uint32_t pc, const DisasmContext& ctx = {});

// pc-relative target of a label operand, if the row has one.
bool branch_target(const Insn& insn, uint32_t pc, uint32_t& target);

}  // namespace gpnpu::isa
