// libFuzzer target: the program binary reader (Program::read_binary) and the
// decoder (Program::decode) on arbitrary bytes, then the disassembler.
// Property: a bad file is a gpnpu::Error; a file that reads and decodes
// disassembles without error, and when its branch targets lie inside the program
// the disassembly assembles back to the same words and names (a branch past the
// end has no label to name it; it faults when taken).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz_util.h"
#include "isa/error.h"
#include "isa/program.h"

using namespace gpnpu;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = fuzz::scratch_path("binary", ".bin");
  fuzz::write_bytes(path, std::string_view(reinterpret_cast<const char*>(data), size));
  isa::Program p;
  std::vector<isa::Insn> insns;
  try {
    p = isa::Program::read_binary(path);
    insns = p.decode();
  } catch (const Error&) {
    return 0;
  }
  std::string dis = p.disassemble();
  bool representable = true;
  for (uint32_t pc = 0; pc < insns.size(); ++pc) {
    uint32_t t;
    if (isa::branch_target(insns[pc], pc, t) && t > insns.size()) representable = false;
  }
  if (!representable) return 0;
  isa::Program q;
  try {
    q = isa::assemble(dis, "fuzz-disasm.s");
  } catch (const Error& e) {
    std::fprintf(stderr, "disassembly does not assemble: %s\n---\n%s---\n", e.what(), dis.c_str());
    fuzz::check(false, "disassemble(read_binary(b)) assembles");
  }
  fuzz::check(q.words == p.words, "assemble(disassemble(p)).words == p.words");
  fuzz::check(q.names == p.names, "assemble(disassemble(p)).names == p.names");
  return 0;
}
