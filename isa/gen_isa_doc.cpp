// Writes docs/isa.md, the ISA reference, from the instruction table.
// Usage: gen_isa_doc OUT.md   (run by the build; never edit docs/isa.md by hand)
#include <fmt/format.h>

#include <cstdio>
#include <fstream>
#include <map>

#include "isa/isa.h"
#include "isa/state.h"

using namespace gpnpu::isa;

namespace {
std::string syntax(const OpInfo& o) {
  static const std::map<char, std::string> kText = {
      {'X', "x"}, {'V', "v"}, {'P', "p"}, {'C', "cN"}, {'N', "n"}, {'D', "dir"},
      {'I', "imm"}, {'F', "fimm"}, {'L', "label"}, {'S', "\"name\""}, {'M', "imm(x)"}};
  std::string s = o.mnemonic;
  for (int k = 0; k < o.nops; ++k) {
    const OperandSpec& op = o.ops[k];
    s += k ? ", " : " ";
    std::string t = kText.at(op.kind);
    if (op.kind == 'X' || op.kind == 'V' || op.kind == 'P') t += op.field;
    if (op.kind == 'M') t = fmt::format("imm(x{})", op.field);
    s += t;
  }
  if (o.predicated) s += " [@p]";
  return s;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: gen_isa_doc OUT.md\n");
    return 2;
  }
  std::string out;
  out += "<!-- Generated from isa/isa_table.def by gen_isa_doc (built and run by `cmake --build build`). Do not edit. -->\n";
  out += "# GPNPU instruction set reference\n\n";
  out += fmt::format("{} instructions, 64 bits each. The table in `isa/isa_table.def` is the single source of truth.\n\n", table().size());
  out += "## Encoding\n\n"
         "| bits | field |\n|---|---|\n| 7:0 | opcode |\n| 12:8 | a |\n| 17:13 | b |\n| 22:18 | c |\n"
         "| 27:23 | d |\n| 30:28 | p (predicate of array instructions) |\n| 31 | zero |\n| 63:32 | imm (signed) |\n\n"
         "Fields an instruction does not use must be zero; the decoder rejects anything else as an illegal encoding.\n\n";
  out += "## Architectural state\n\n";
  out += fmt::format(
      "- scalar unit: {} registers x0..x31 of 32 bits (x0 reads 0), a scalar memory (`smem_bytes`), {} levels of hardware loops\n"
      "- PE array: `pe_rows` x `pe_cols` PEs, each with {} vector registers v0..v31 of {} lanes x 32 bits, local memory (LRM, `lrm_bytes`)\n"
      "- {} per-PE predicate registers p0..p7; p0 is all ones; an array instruction with `@pN` changes only the PEs whose bit is set\n"
      "- OCM (`ocm_bytes`), reached by the array through broadcast, scatter and gather, and by DMA; an array "
      "instruction's OCM address (xb + imm, and + i * xc for PE i) is 32-bit arithmetic, wrapping, and every "
      "enabled PE's bytes must lie inside OCM (a base below 0 with the first enabled PE's offset above it is "
      "fine)\n"
      "- DMA: `dma_channels` channels; a descriptor is {} words in scalar memory: src, dst, row_bytes, rows, src_stride, dst_stride, planes, src_plane_stride, dst_plane_stride (bus addresses, see the memory map in docs/architecture.md)\n\n",
      kXregs, kLoopDepth, kVregs, kLanes, kPregs, kDmaDescWords);
  out += "## Assembly syntax\n\n"
         "One instruction per line; `label:` before an instruction or alone; comments start with `#` or `;`; "
         "`.equ NAME, VALUE` defines a constant usable in immediates (`+ - *` allowed). "
         "Memory operands are `OFFSET(xN)`. Floating immediates are decimal (`1.5`, `-2e-3`) or raw bits (`0x3fc00000`). "
         "A predicate `@pN` follows the last operand. `gpnpu disasm` prints text that assembles back to the same bits.\n\n";
  std::string current;
  out += "## Instructions\n\n| opcode | syntax | unit | semantics |\n|---|---|---|---|\n";
  for (const OpInfo& o : table()) {
    std::string desc = o.description;
    for (size_t p = desc.find('|'); p != std::string::npos; p = desc.find('|', p + 2)) desc.replace(p, 1, "\\|");
    out += fmt::format("| 0x{:02x} | `{}` | {} | {} |\n", o.opcode, syntax(o), unit_name(o.unit), desc);
  }
  out += "\nUnits are timing classes: each has a latency (`lat.<unit>`) and an occupancy (`occ.<unit>`) in the machine config (docs/config.md).\n";
  std::ofstream f(argv[1]);
  f << out;
  return f ? 0 : 1;
}
