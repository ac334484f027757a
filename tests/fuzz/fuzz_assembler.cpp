// libFuzzer target: the text assembler (isa::assemble) on arbitrary bytes.
// Property: bad text is a gpnpu::Error; text that assembles disassembles to text
// that assembles back to the same words and mark names (program.h's contract).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz_util.h"
#include "isa/error.h"
#include "isa/program.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  gpnpu::isa::Program p;
  try {
    p = gpnpu::isa::assemble(text, "fuzz.s");
  } catch (const gpnpu::Error&) {
    return 0;
  }
  std::string dis = p.disassemble();
  gpnpu::isa::Program q;
  try {
    q = gpnpu::isa::assemble(dis, "fuzz-disasm.s");
  } catch (const gpnpu::Error& e) {
    std::fprintf(stderr, "disassembly does not assemble: %s\n---\n%s---\n", e.what(), dis.c_str());
    gpnpu::fuzz::check(false, "disassemble(assemble(text)) assembles");
  }
  gpnpu::fuzz::check(q.words == p.words, "assemble(disassemble(p)).words == p.words");
  gpnpu::fuzz::check(q.names == p.names, "assemble(disassemble(p)).names == p.names");
  return 0;
}
