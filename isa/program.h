// A GPNPU program: instruction words plus the table of mark names, its binary
// file format, the text assembler and the program disassembler.
//
// Binary format (little endian): "GPNPUBIN", u32 version (1), u32 instruction
// count, u32 name count, the 64-bit words, then each name as u32 length + bytes.
// A mark name is non-empty with no '"' and no control character (assembly must
// spell it between quotes); the assembler and the reader both reject others.
//
// Assembly: one instruction per line, `label:` before it or on its own line,
// comments from `#` or `;`, operands separated by commas, an optional predicate
// `@pN` after the last operand, `.equ NAME, VALUE` for constants. See docs/isa.md.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <unordered_map>

#include "isa/isa.h"

namespace gpnpu::isa {

struct Program {
  std::vector<uint64_t> words;
  std::vector<std::string> names;  // mark names; a mark's S operand indexes this
  std::vector<uint32_t> lines;     // source line of each instruction (assembled programs only)
  std::string source;              // file it came from, for messages

  // Index of `name` in names, added if new.
  uint32_t intern(std::string_view name);
  // intern()'s index of names (rebuilt when names changed size behind its back).
  std::unordered_map<std::string, uint32_t> name_index;

  void write_binary(const std::string& path) const;
  static Program read_binary(const std::string& path);
  // Reads assembly or binary, chosen by the file's first bytes.
  static Program load(const std::string& path);

  // Predecodes every word (throws on an illegal encoding, naming the pc).
  std::vector<Insn> decode() const;
  // The word at pc decoded (the same checks).
  Insn decode_at(uint32_t pc) const;
  // The whole program as assembly text that assembles back to the same words.
  std::string disassemble() const;
  // The same text, handed to `sink` in pieces of about 1 MiB (a multi-million-instruction
  // program's text need not sit in memory whole); write_assembly writes it to a file
  // (atomically, as every output).
  void disassemble(const std::function<void(std::string_view)>& sink) const;
  void write_assembly(const std::string& path) const;
};

// Assembles `text`; errors are gpnpu::Error "FILE:LINE:COL: message".
Program assemble(std::string_view text, std::string_view filename = "<input>");

}  // namespace gpnpu::isa
