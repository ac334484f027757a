// The text assembler and the program file formats. Operand parsing is driven by
// the instruction table's operand kinds; nothing here lists instructions.
#include <algorithm>
#include <bit>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <iterator>
#include <sstream>

#include "isa/atomic_file.h"
#include "isa/error.h"
#include "isa/io_rules.h"
#include "isa/program.h"

namespace gpnpu::isa {

uint32_t Program::intern(std::string_view name) {
  if (name_index.size() != names.size()) {
    name_index.clear();
    for (size_t k = 0; k < names.size(); ++k) name_index.emplace(names[k], uint32_t(k));
  }
  auto [it, added] = name_index.try_emplace(std::string(name), uint32_t(names.size()));
  if (added) names.emplace_back(name);
  return it->second;
}

namespace {

constexpr char kMagic[8] = {'G', 'P', 'N', 'P', 'U', 'B', 'I', 'N'};
constexpr uint32_t kVersion = 1;
constexpr uint64_t kMaxProgramBytes = 256 * io::kMiB;  // 32M instructions; larger is not a program

struct Token {
  std::string text;
  int col;  // 1-based column of its first character
};

std::string trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(uint8_t(s[b]))) ++b;
  while (e > b && std::isspace(uint8_t(s[e - 1]))) --e;
  return std::string(s.substr(b, e - b));
}

// Why a mark name cannot be spelled in assembly ("" if it can): disassembly
// prints it between quotes, so a quote or a control character (a newline) would
// not read back.
std::string bad_mark_name(std::string_view name) {
  if (name.empty()) return "a mark name cannot be empty";
  for (char c : name)
    if (c == '"' || uint8_t(c) < 0x20 || c == 0x7f)
      return fmt::format("a mark name cannot contain {}", c == '"' ? std::string("'\"'") : fmt::format("byte 0x{:02x}", uint8_t(c)));
  // The text rule of assembly (isa/io_rules.h): valid UTF-8, no invisible character.
  if (io::TextProblem p = io::find_text_problem(name, false); p.col)
    return fmt::format("a mark name cannot contain this: at byte {}, {}", p.col, p.message);
  return "";
}

bool is_ident(std::string_view s) {
  if (s.empty() || !(std::isalpha(uint8_t(s[0])) || s[0] == '_' || s[0] == '.')) return false;
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return std::isalnum(uint8_t(c)) || c == '_' || c == '.'; });
}

class Assembler {
 public:
  Assembler(std::string_view text, std::string_view file) : text_(text), file_(file) {}

  Program run() {
    prog_.source = file_;
    // Pass 1: labels and .equ; pass 2: encode.
    for (int pass = 1; pass <= 2; ++pass) {
      pass_ = pass;
      pc_ = 0;
      line_no_ = 0;
      size_t pos = 0;
      while (pos <= text_.size()) {
        size_t nl = text_.find('\n', pos);
        if (nl == std::string_view::npos) nl = text_.size();
        ++line_no_;
        line(text_.substr(pos, nl - pos));
        pos = nl + 1;
      }
    }
    return std::move(prog_);
  }

 private:
  [[noreturn]] void error(int col, const std::string& msg) const {
    fail("{}:{}:{}: {}", file_, line_no_, col, msg);
  }

  // The text rule (isa/io_rules.h): a NUL, control, invisible (BOM, zero-width) or
  // non-UTF-8 character anywhere, or a non-ASCII one outside comments and mark-name
  // strings, is named by its code point and column, never parsed as part of a token.
  void check_characters(std::string_view raw) const {
    if (io::TextProblem p = io::find_text_problem(raw, false); p.col) error(p.col, p.message);
    bool in_str = false;
    for (size_t k = 0; k < raw.size(); ++k) {
      if (raw[k] == '"') in_str = !in_str;
      if (!in_str && (raw[k] == '#' || raw[k] == ';')) return;
      if (!in_str && uint8_t(raw[k]) >= 0x80)
        error(int(k) + 1, io::find_text_problem(raw.substr(k), true).message +
                              ": mnemonics, registers, labels and .equ names are ASCII (other text may go in comments "
                              "and mark names)");
    }
  }

  void line(std::string_view raw) {
    if (pass_ == 1) check_characters(raw);
    // strip comments (outside string literals)
    size_t cut = raw.size();
    bool in_str = false;
    for (size_t k = 0; k < raw.size(); ++k) {
      if (raw[k] == '"') in_str = !in_str;
      if (!in_str && (raw[k] == '#' || raw[k] == ';')) { cut = k; break; }
    }
    std::string_view body = raw.substr(0, cut);
    size_t start = 0;
    while (start < body.size() && std::isspace(uint8_t(body[start]))) ++start;
    // labels: ident ':' (possibly several)
    for (;;) {
      size_t k = start;
      while (k < body.size() && (std::isalnum(uint8_t(body[k])) || body[k] == '_' || body[k] == '.')) ++k;
      if (k > start && k < body.size() && body[k] == ':') {
        std::string name(body.substr(start, k - start));
        if (!is_ident(name)) error(int(start) + 1, fmt::format("'{}' is not a valid label name", name));
        if (pass_ == 1) {
          if (labels_.count(name) || equs_.count(name))
            error(int(start) + 1, fmt::format("label '{}' is defined twice", name));
          labels_[name] = pc_;
        }
        start = k + 1;
        while (start < body.size() && std::isspace(uint8_t(body[start]))) ++start;
        continue;
      }
      break;
    }
    if (start >= body.size()) return;
    size_t k = start;
    while (k < body.size() && !std::isspace(uint8_t(body[k]))) ++k;
    std::string mnemonic(body.substr(start, k - start));
    std::vector<Token> ops = split_operands(body, k);
    if (mnemonic == ".equ") return equ(ops, int(start) + 1);
    if (mnemonic == ".name") return name(ops, int(start) + 1);
    if (mnemonic[0] == '.') error(int(start) + 1, fmt::format("unknown directive '{}' (known: .equ, .name)", mnemonic));
    const OpInfo* info = find_mnemonic(mnemonic);
    if (!info) error(int(start) + 1, fmt::format("unknown instruction '{}' (docs/isa.md lists them)", mnemonic));
    if (pass_ == 2) encode(*info, ops, int(start) + 1);
    ++pc_;
  }

  std::vector<Token> split_operands(std::string_view body, size_t from) {
    std::vector<Token> out;
    size_t k = from;
    while (k < body.size()) {
      while (k < body.size() && std::isspace(uint8_t(body[k]))) ++k;
      if (k >= body.size()) break;
      size_t b = k;
      bool in_str = false;
      while (k < body.size() && (in_str || body[k] != ',')) {
        if (body[k] == '"') in_str = !in_str;
        ++k;
      }
      out.push_back({trim(body.substr(b, k - b)), int(b) + 1});
      if (out.back().text.empty()) error(int(b) + 1, "empty operand");
      if (k < body.size()) {
        ++k;  // comma
        if (k >= body.size() || trim(body.substr(k)).empty()) error(int(k), "operand missing after ','");
      }
    }
    // A trailing "@pN" predicate may follow the last operand after whitespace.
    if (!out.empty()) {
      Token& last = out.back();
      size_t at = last.text.rfind('@');
      if (at != std::string::npos && at > 0 && last.text[0] != '"') {
        Token pred{trim(last.text.substr(at)), last.col + int(at)};
        last.text = trim(last.text.substr(0, at));
        out.push_back(pred);
      }
    }
    return out;
  }

  void equ(const std::vector<Token>& ops, int col) {
    if (ops.size() != 2) error(col, ".equ takes a name and a value: .equ NAME, VALUE");
    if (!is_ident(ops[0].text)) error(ops[0].col, fmt::format("'{}' is not a valid name", ops[0].text));
    if (pass_ == 1) {
      if (equs_.count(ops[0].text) || labels_.count(ops[0].text))
        error(ops[0].col, fmt::format("'{}' is defined twice", ops[0].text));
      equs_[ops[0].text] = integer(ops[1]);
    }
  }

  // .name "text": adds a mark name to the table now, so a disassembled program
  // keeps its name numbering (names are otherwise numbered by first use).
  void name(const std::vector<Token>& ops, int col) {
    if (ops.size() != 1 || ops[0].text.size() < 3 || ops[0].text.front() != '"' || ops[0].text.back() != '"')
      error(col, ".name takes one quoted, non-empty name: .name \"attention\"");
    std::string n = ops[0].text.substr(1, ops[0].text.size() - 2);
    if (std::string why = bad_mark_name(n); !why.empty()) error(ops[0].col, why);
    if (pass_ == 2) prog_.intern(n);
  }

  // Integer expression: terms joined by + - *, each a literal or a .equ name.
  int64_t integer(const Token& t) {
    const std::string& s = t.text;
    int64_t acc = 0;
    char op = '+';
    size_t k = 0;
    if (s.empty()) error(t.col, "expected a number");
    while (k < s.size()) {
      while (k < s.size() && s[k] == ' ') ++k;
      size_t b = k;
      if (k < s.size() && (s[k] == '-' || s[k] == '+')) ++k;
      while (k < s.size() && (std::isalnum(uint8_t(s[k])) || s[k] == '_' || s[k] == '.')) ++k;
      std::string term = s.substr(b, k - b);
      int64_t v = 0;
      if (term.empty()) error(t.col + int(b), fmt::format("expected a number in '{}'", s));
      std::string mag = (term[0] == '-' || term[0] == '+') ? term.substr(1) : term;
      if (auto it = equs_.find(mag); it != equs_.end()) {
        v = it->second;
      } else {
        errno = 0;
        char* end = nullptr;
        long long parsed = std::strtoll(mag.c_str(), &end, 0);
        if (mag.empty() || *end || errno) error(t.col + int(b), fmt::format("'{}' is not a number or a defined .equ name", term));
        v = parsed;
      }
      // Checked: an overflow is an error, not undefined behaviour (found by fuzz_assembler).
      bool overflow = term[0] == '-' && __builtin_sub_overflow(int64_t(0), v, &v);
      int64_t r = 0;
      overflow |= op == '+'   ? __builtin_add_overflow(acc, v, &r)
                   : op == '-' ? __builtin_sub_overflow(acc, v, &r)
                               : __builtin_mul_overflow(acc, v, &r);
      if (overflow) error(t.col, fmt::format("'{}' overflows 64-bit integer arithmetic", s));
      acc = r;
      while (k < s.size() && s[k] == ' ') ++k;
      if (k < s.size()) {
        op = s[k];
        if (op != '+' && op != '-' && op != '*') error(t.col + int(k), fmt::format("unexpected '{}' in '{}'", op, s));
        ++k;
      }
    }
    return acc;
  }

  int32_t imm32(const Token& t) {
    int64_t v = integer(t);
    if (v < INT32_MIN || v > int64_t(UINT32_MAX))
      error(t.col, fmt::format("immediate {} does not fit in 32 bits", v));
    return int32_t(uint32_t(v));
  }

  uint8_t reg(const Token& t, char prefix, int count, const char* what) {
    const std::string& s = t.text;
    if (s.size() < 2 || s[0] != prefix || !std::all_of(s.begin() + 1, s.end(), ::isdigit))
      error(t.col, fmt::format("expected {} {}0..{}{}, got '{}'", what, prefix, prefix, count - 1, s));
    int n = std::atoi(s.c_str() + 1);
    if (n >= count) error(t.col, fmt::format("{} {} does not exist ({}0..{}{})", what, s, prefix, prefix, count - 1));
    return uint8_t(n);
  }

  void encode(const OpInfo& info, std::vector<Token> ops, int col) {
    Fields f;
    f.opcode = info.opcode;
    if (!ops.empty() && ops.back().text[0] == '@') {
      Token p = ops.back();
      ops.pop_back();
      if (!info.predicated) error(p.col, fmt::format("'{}' takes no predicate", info.mnemonic));
      Token r{p.text.substr(1), p.col + 1};
      f.p = reg(r, 'p', 8, "predicate register");
    }
    if (ops.size() != info.nops) {
      std::string want = info.nops ? info.operands : "no operands";
      error(col, fmt::format("'{}' takes {} operand{} ({}), got {}", info.mnemonic, info.nops,
                             info.nops == 1 ? "" : "s", want, ops.size()));
    }
    auto set = [&](char field, uint8_t v) {
      switch (field) {
        case 'a': f.a = v; break;
        case 'b': f.b = v; break;
        case 'c': f.c = v; break;
        default: f.d = v; break;
      }
    };
    for (size_t k = 0; k < ops.size(); ++k) {
      const OperandSpec& o = info.ops[k];
      const Token& t = ops[k];
      switch (o.kind) {
        case 'X': set(o.field, reg(t, 'x', 32, "scalar register")); break;
        case 'V': set(o.field, reg(t, 'v', 32, "vector register")); break;
        case 'P': set(o.field, reg(t, 'p', 8, "predicate register")); break;
        case 'C': set(o.field, reg(t, 'c', 32, "DMA channel")); break;
        case 'N': {
          int64_t v = integer(t);
          if (v < 0 || v > 31) error(t.col, fmt::format("'{}' must be 0..31", t.text));
          set(o.field, uint8_t(v));
          break;
        }
        case 'D': {
          static const std::string dirs[] = {"n", "e", "s", "w"};
          auto it = std::find(std::begin(dirs), std::end(dirs), t.text);
          if (it == std::end(dirs)) error(t.col, fmt::format("expected a direction n, e, s or w, got '{}'", t.text));
          set(o.field, uint8_t(it - std::begin(dirs)));
          break;
        }
        case 'I': f.imm = imm32(t); break;
        case 'F': f.imm = float_bits(t); break;
        case 'L': {
          auto it = labels_.find(t.text);
          if (it == labels_.end()) error(t.col, fmt::format("undefined label '{}'", t.text));
          f.imm = int32_t(int64_t(it->second) - int64_t(pc_));
          break;
        }
        case 'S': {
          if (t.text.size() < 2 || t.text.front() != '"' || t.text.back() != '"')
            error(t.col, fmt::format("expected a quoted name, got {}", t.text));
          std::string name = t.text.substr(1, t.text.size() - 2);
          if (std::string why = bad_mark_name(name); !why.empty()) error(t.col, why);
          f.imm = int32_t(prog_.intern(name));
          break;
        }
        case 'M': {
          size_t lp = t.text.find('('), rp = t.text.rfind(')');
          if (lp == std::string::npos || rp != t.text.size() - 1 || rp < lp)
            error(t.col, fmt::format("expected a memory operand OFFSET(xN), got '{}'", t.text));
          std::string off = trim(t.text.substr(0, lp));
          f.imm = off.empty() ? 0 : imm32(Token{off, t.col});
          set(o.field, reg(Token{trim(t.text.substr(lp + 1, rp - lp - 1)), t.col + int(lp) + 1}, 'x', 32, "scalar register"));
          break;
        }
      }
    }
    prog_.words.push_back(pack(f));
    prog_.lines.push_back(uint32_t(line_no_));
  }

  int32_t float_bits(const Token& t) {
    const std::string& s = t.text;
    if (s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) return imm32(t);  // raw bits
    errno = 0;
    char* end = nullptr;
    float v = std::strtof(s.c_str(), &end);
    if (s.empty() || *end) error(t.col, fmt::format("'{}' is not a floating-point number", s));
    if (errno == ERANGE && std::isinf(v)) error(t.col, fmt::format("'{}' overflows fp32", s));
    return int32_t(std::bit_cast<uint32_t>(v));
  }

  std::string_view text_;
  std::string file_;
  Program prog_;
  std::map<std::string, uint32_t> labels_;
  std::map<std::string, int64_t> equs_;
  int pass_ = 1;
  uint32_t pc_ = 0;
  int line_no_ = 0;
};

}  // namespace

Program assemble(std::string_view text, std::string_view filename) {
  return Assembler(text, filename).run();
}

void Program::write_binary(const std::string& path) const {
  // Written piece by piece (the words straight from the vector: a 2B image program's 48 MB
  // copied into one string first took a sixth of `gpnpu compile`'s time in copies and page faults).
  write_file_atomic(path, [this](const std::function<void(std::string_view)>& put) {
    std::string head(kMagic, 8);
    auto word = [&head](uint32_t v) { head.append(reinterpret_cast<const char*>(&v), sizeof v); };
    word(kVersion);
    word(uint32_t(words.size()));
    word(uint32_t(names.size()));
    put(head);
    put(std::string_view(reinterpret_cast<const char*>(words.data()), words.size() * sizeof(uint64_t)));
    std::string tail;
    for (const std::string& n : names) {
      const uint32_t size = uint32_t(n.size());
      tail.append(reinterpret_cast<const char*>(&size), sizeof size);
      tail += n;
    }
    put(tail);
  });  // a temporary file and a rename: never half a program
}

Program Program::read_binary(const std::string& path) {
  const std::string data = io::read_input(path, "program", kMaxProgramBytes);
  size_t pos = 0;
  auto take = [&](void* dst, size_t n, const char* what) {
    if (pos + n > data.size())
      fail("program '{}' is truncated: {} needs bytes [{}, {}) but the file has {}; re-run `gpnpu asm`",
           path, what, pos, pos + n, data.size());
    if (n) std::memcpy(dst, data.data() + pos, n);  // dst is null for an empty program (fuzz_binary)
    pos += n;
  };
  char magic[8];
  take(magic, 8, "the magic");
  if (std::memcmp(magic, kMagic, 8) != 0)
    fail("'{}' is not a gpnpu program (no GPNPUBIN magic); assemble text with `gpnpu asm`", path);
  uint32_t version, nwords, nnames;
  take(&version, 4, "the version");
  if (version != kVersion) fail("program '{}' has format version {}, this gpnpu reads {}", path, version, kVersion);
  take(&nwords, 4, "the instruction count");
  take(&nnames, 4, "the name count");
  Program p;
  p.source = path;
  if (uint64_t(nwords) * 8 > data.size()) fail("program '{}' is truncated: it declares {} instructions but has {} bytes", path, nwords, data.size());
  p.words.resize(nwords);
  take(p.words.data(), size_t(nwords) * 8, "the instructions");
  std::map<std::string, uint32_t> seen;
  for (uint32_t k = 0; k < nnames; ++k) {
    uint32_t len;
    take(&len, 4, "a name length");
    std::string n(len > data.size() ? 0 : len, '\0');
    if (len > data.size()) fail("program '{}' is corrupt: name {} has length {}", path, k, len);
    take(n.data(), len, "a name");
    if (std::string why = bad_mark_name(n); !why.empty())
      fail("program '{}' is corrupt: mark name {}: {}; re-run `gpnpu asm`", path, k, why);
    // The assembler interns names, so a repeat cannot come from it, and its
    // disassembly would renumber the marks (fuzz_binary).
    if (auto [it, fresh] = seen.emplace(n, k); !fresh)
      fail("program '{}' is corrupt: mark name {} \"{}\" repeats name {}; re-run `gpnpu asm`", path, k, n, it->second);
    p.names.push_back(std::move(n));
  }
  if (pos != data.size()) fail("program '{}' has {} unexpected trailing bytes", path, data.size() - pos);
  return p;
}

Program Program::load(const std::string& path) {
  const std::string data = io::read_input(path, "program", kMaxProgramBytes);
  if (data.size() >= 8 && std::memcmp(data.data(), kMagic, 8) == 0) return read_binary(path);
  // A binary whose magic is damaged (at most 2 of its 8 bytes) is not assembly:
  // refuse it before the assembler reports its bytes as an unknown instruction.
  if (data.size() >= 8) {
    int diff = 0;
    std::string shown;
    for (int k = 0; k < 8; ++k) {
      diff += data[size_t(k)] != kMagic[k];
      const uint8_t b = uint8_t(data[size_t(k)]);
      shown += b >= 0x20 && b < 0x7f ? std::string(1, char(b)) : fmt::format("\\x{:02x}", b);
    }
    if (diff <= 2)
      fail("'{}' is not assembly text: it starts like a gpnpu program binary, but its magic is '{}', not 'GPNPUBIN' "
           "(the file is damaged: re-run `gpnpu asm`)", path, shown);
  }
  return assemble(data, path);
}

Insn Program::decode_at(uint32_t pc) const {
  Insn i = isa::decode(words[pc], pc);
  for (int k = 0; k < i.info->nops; ++k)
    if (i.info->ops[k].kind == 'S' && uint32_t(i.imm) >= names.size())
      fail("pc {}: {} names mark #{} but the program has {} names", pc, i.info->mnemonic, i.imm, names.size());
  return i;
}

std::vector<Insn> Program::decode() const {
  std::vector<Insn> out;
  out.reserve(words.size());
  for (uint32_t pc = 0; pc < words.size(); ++pc) out.push_back(decode_at(pc));
  return out;
}

std::string Program::disassemble() const {
  std::string out;
  disassemble([&out](std::string_view piece) { out += piece; });
  return out;
}

void Program::write_assembly(const std::string& path) const {
  write_file_atomic(path, [this](const std::function<void(std::string_view)>& put) { disassemble(put); });
}

void Program::disassemble(const std::function<void(std::string_view)>& sink) const {
  constexpr size_t kPiece = 1 << 20;
  // Two passes over the words, each decoding one at a time (a program of 6 M instructions
  // decoded whole took 300 MB and a quarter of `gpnpu compile`'s time in page faults).
  const uint32_t count = uint32_t(words.size());
  std::vector<bool> target(count + 1, false);
  for (uint32_t pc = 0; pc < count; ++pc) {
    uint32_t t;
    if (branch_target(decode_at(pc), pc, t) && t < target.size()) target[t] = true;
  }
  DisasmContext ctx;
  ctx.name_of = [this](uint32_t id) { return id < names.size() ? names[id] : fmt::format("#{}", id); };
  std::string out;
  out.reserve(kPiece + 4096);
  auto to = std::back_inserter(out);
  for (const std::string& n : names) fmt::format_to(to, ".name \"{}\"\n", n);
  for (uint32_t pc = 0; pc <= count; ++pc) {
    if (target[pc]) fmt::format_to(to, "L{}:\n", pc);
    if (pc == count) break;
    // "    {:<40} # {}\n", without fmt's padding cost
    out += "    ";
    const size_t start = out.size();
    isa::append_disassembly(out, decode_at(pc), pc, ctx);
    if (out.size() - start < 40) out.append(40 - (out.size() - start), ' ');
    out += " # ";
    const fmt::format_int n(pc);
    out.append(n.data(), n.size());
    out += '\n';
    if (out.size() >= kPiece) {
      sink(out);
      out.clear();
    }
  }
  sink(out);
}

}  // namespace gpnpu::isa
