#include "traces/debugger.h"

#include <algorithm>
#include <csignal>
#include <istream>
#include <ostream>
#include <sstream>

#include "isa/error.h"
#include "isa/fp16.h"
#include "sim/machine/memory_map.h"
#include "traces/insn_trace.h"

namespace gpnpu::traces {

namespace {

// Thrown from the hook to end the run early (a gpnpu::Error, so the sequencer
// drains its DMAs and the platform returns cleanly).
const char* const kQuit = "debugger: quit";

// Ctrl-C at the terminal: the handler only sets this; the next issued instruction
// stops the run there, as a breakpoint would (gdb's behaviour).
volatile std::sig_atomic_t g_interrupted = 0;
extern "C" void on_sigint(int) { g_interrupted = 1; }

// Installs on_sigint for the debugger's lifetime and puts the previous handler back.
// SA_RESTART: a Ctrl-C at the prompt does not break the read of the next command.
struct SigintScope {
  struct sigaction old {};
  bool active;
  explicit SigintScope(bool on) : active(on) {
    if (!active) return;
    struct sigaction sa {};
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGINT, &sa, &old);
    g_interrupted = 0;
  }
  ~SigintScope() {
    if (active) sigaction(SIGINT, &old, nullptr);
  }
};

struct Breakpoint {
  enum Kind { pc, mark, cycle } kind;
  int id;
  uint64_t value;  // pc, mark id or cycle
  bool fired = false;
};

struct Watch {
  int id;
  std::string space;
  uint64_t addr;
  uint32_t bytes, pe;
  std::vector<uint8_t> last;
};

uint64_t number(const std::string& s, const char* what) {
  try {
    size_t used = 0;
    uint64_t v = std::stoull(s, &used, 0);
    if (used == s.size()) return v;
  } catch (const std::exception&) {
  }
  fail("{} '{}' is not a number (decimal or 0x hex)", what, s);
}

std::string hex_bytes(const std::vector<uint8_t>& b) {
  std::string s;
  for (size_t i = 0; i < b.size(); ++i) s += fmt::format("{}{:02x}", i ? " " : "", b[i]);
  return s;
}

class Dbg {
 public:
  Dbg(sim::Platform& p, const isa::Program& prog, std::istream& in, std::ostream& out, const std::string& source)
      : p_(p), prog_(prog), in_(in), out_(out), source_(source), disasm_(disassemble_all(prog)) {}

  void run() {
    out_ << fmt::format("gpnpu debug: {} ({} instructions, preset {}); stopped before pc 0\n",
                        prog_.source.empty() ? "<program>" : prog_.source, prog_.words.size(), p_.config().preset);
    if (!command_loop()) return;
    p_.sequencer().on_issue = [this](const sim::IssueEvent& e) { on_issue(e); };
    started_ = true;
    std::string error;
    try {
      p_.run(prog_);
    } catch (const Error& e) {
      error = e.what();
    }
    p_.sequencer().on_issue = nullptr;
    if (error.find(kQuit) != std::string::npos) return;
    if (fatal_) throw Error(error);
    halted_ = true;
    fault_ = error;
    if (!error.empty())
      out_ << fmt::format("the program faulted after {} instructions (last issue at cycle {}): {}\n"
                          "(its state is as the fault left it: regs, mem, where; it cannot run on)\n",
                          executed_, last_cycle_, error);
    else
      out_ << fmt::format("program halted: {} cycles, {} instructions\n", p_.stats().total[sim::Stat::cycles],
                          p_.stats().total[sim::Stat::instructions]);
    out_.flush();
    command_loop();
    if (!error.empty()) throw Error(error);
  }

 private:
  // Reads commands until one resumes the program (returns true) or the stream
  // ends or `quit` (returns false, or throws kQuit while running).
  bool command_loop() {
    std::string line;
    for (;;) {
      if (source_.empty()) out_ << "(gpnpu) " << std::flush;
      if (!std::getline(in_, line)) {
        if (!source_.empty()) out_ << "(end of commands)\n";
        return stop_session();
      }
      ++line_no_;
      size_t hash = line.find('#');
      if (hash != std::string::npos) line.resize(hash);
      std::istringstream ss(line);
      std::vector<std::string> t;
      for (std::string w; ss >> w;) t.push_back(w);
      if (t.empty()) continue;
      if (!source_.empty()) out_ << "(gpnpu) " << line << "\n";
      try {
        int r = execute(t);
        if (r > 0) {
          g_interrupted = 0;  // a Ctrl-C typed at the prompt does not stop the next run at once
          return true;
        }
        if (r < 0) return stop_session();
      } catch (const Error& e) {
        if (std::string(e.what()) == kQuit) throw;
        if (!source_.empty()) {
          fatal_ = true;
          fail("{}:{}: {}", source_, line_no_, e.what());
        }
        out_ << "error: " << e.what() << "\n";
      }
      out_.flush();
    }
  }

  bool stop_session() {
    out_.flush();
    if (started_ && !halted_) throw Error(kQuit);
    return false;
  }

  // 1: resume, 0: stay at the prompt, -1: quit.
  int execute(const std::vector<std::string>& t) {
    const std::string& c = t[0];
    auto arg = [&](size_t i, const char* what) -> const std::string& {
      if (i >= t.size()) fail("`{}` needs {} (see `help`)", c, what);
      return t[i];
    };
    if (c == "quit" || c == "q") return -1;
    if (c == "help" || c == "h") {
      out_ << kHelp;
      return 0;
    }
    if (c == "step" || c == "s" || c == "stepc") {
      uint64_t n = t.size() > 1 ? number(t[1], "count") : 1;
      bool cycles = c == "stepc" || (t.size() > 2 && t[2].starts_with("cycle"));
      if (n == 0) fail("`{} 0` does nothing; give a positive count", c);
      if (halted_) {
        out_ << ended() << "\n";
        return 0;
      }
      if (cycles) until_cycle_ = last_cycle_ + n;
      else step_left_ = n;
      return 1;
    }
    if (c == "continue" || c == "c") {
      if (halted_) {
        out_ << ended() << "\n";
        return 0;
      }
      return 1;
    }
    if (c == "break" || c == "b") {
      Breakpoint b{Breakpoint::pc, next_id_, 0};  // the id is taken only when the breakpoint is set
      std::string kind = arg(1, "pc N, mark NAME or cycle N");
      if (kind == "mark") {
        const std::string& name = arg(2, "a mark name");
        auto it = std::find(prog_.names.begin(), prog_.names.end(), name);
        if (it == prog_.names.end()) fail("break mark: the program has no mark \"{}\"", name);
        b.kind = Breakpoint::mark;
        b.value = uint64_t(it - prog_.names.begin());
        out_ << fmt::format("breakpoint {}: mark \"{}\" begins\n", b.id, name);
      } else if (kind == "cycle") {
        b.kind = Breakpoint::cycle;
        b.value = number(arg(2, "a cycle"), "cycle");
        if (executed_ && b.value <= last_cycle_)
          fail("break cycle {}: that cycle is past (the last instruction issued at cycle {}); the simulator runs "
               "forward only: give a later cycle, or run again with the breakpoint set before `continue`",
               b.value, last_cycle_);
        out_ << fmt::format("breakpoint {}: cycle {}\n", b.id, b.value);
      } else {
        b.value = number(kind == "pc" ? arg(2, "a pc") : kind, "pc");
        if (b.value >= prog_.words.size()) fail("break: pc {} is past the program's {} instructions", b.value, prog_.words.size());
        out_ << fmt::format("breakpoint {}: before pc {} `{}`\n", b.id, b.value, disasm_[b.value]);
      }
      ++next_id_;
      breaks_.push_back(b);
      return 0;
    }
    if (c == "delete" || c == "unwatch") {
      bool w = c == "unwatch";
      if (t.size() == 1) {
        if (w) watches_.clear();
        else breaks_.clear();
        out_ << (w ? "all watches removed\n" : "all breakpoints removed\n");
        return 0;
      }
      int id = int(number(t[1], "id"));
      size_t before = w ? watches_.size() : breaks_.size();
      if (w) std::erase_if(watches_, [&](const Watch& x) { return x.id == id; });
      else std::erase_if(breaks_, [&](const Breakpoint& x) { return x.id == id; });
      if (before == (w ? watches_.size() : breaks_.size())) fail("{}: no {} {}", c, w ? "watch" : "breakpoint", id);
      out_ << fmt::format("{} {} removed\n", w ? "watch" : "breakpoint", id);
      return 0;
    }
    if (c == "breaks") {
      if (breaks_.empty() && watches_.empty()) out_ << "no breakpoints or watches\n";
      for (const Breakpoint& b : breaks_)
        out_ << fmt::format("breakpoint {}: {}\n", b.id,
                            b.kind == Breakpoint::pc     ? fmt::format("pc {}", b.value)
                            : b.kind == Breakpoint::mark ? fmt::format("mark \"{}\"", prog_.names[b.value])
                                                         : fmt::format("cycle {}", b.value));
      for (const Watch& w : watches_) out_ << fmt::format("watch {}: {}\n", w.id, watch_name(w));
      return 0;
    }
    if (c == "watch") {
      Watch w{next_id_++, arg(1, "a space (ocm, lrm, smem, ddr)"), number(arg(2, "an address"), "address"), 4, 0, {}};
      size_t i = 3;
      if (i < t.size() && t[i] != "pe") w.bytes = uint32_t(number(t[i++], "byte count"));
      if (i + 1 < t.size() && t[i] == "pe") w.pe = uint32_t(number(t[i + 1], "PE"));
      if (w.bytes == 0 || w.bytes > 4096) fail("watch: {} bytes; watch 1 to 4096 bytes", w.bytes);
      w.last = read(w.space, w.addr, w.bytes, w.pe);
      out_ << fmt::format("watch {}: {} = {}\n", w.id, watch_name(w), hex_bytes(w.last));
      watches_.push_back(std::move(w));
      return 0;
    }
    if (c == "regs") {
      const isa::ArchState& s = p_.state();
      for (int r = 0; r < isa::kXregs; ++r)
        out_ << fmt::format("x{:<2} 0x{:08x}{}", r, s.x[r], r % 8 == 7 ? "\n" : "  ");
      return 0;
    }
    if (c == "preds") {
      const isa::ArchState& s = p_.state();
      for (int r = 0; r < isa::kPregs; ++r) out_ << fmt::format("p{} {} PEs{}", r, s.pred_count[r], r == 7 ? "\n" : "  ");
      return 0;
    }
    if (c == "print" || c == "p") {
      const std::string& what = arg(1, "a register (xN, vN)");
      const isa::ArchState& s = p_.state();
      if (what == "x" || what == "regs") return execute({"regs"});
      if (what.size() > 1 && what[0] == 'x') {
        uint64_t r = number(what.substr(1), "register");
        if (r >= isa::kXregs) fail("print: no register {}", what);
        out_ << fmt::format("x{} = 0x{:08x} = {} = {}u\n", r, s.x[r], int32_t(s.x[r]), s.x[r]);
        return 0;
      }
      if (what.size() > 1 && what[0] == 'v') {
        uint64_t r = number(what.substr(1), "register");
        if (r >= isa::kVregs) fail("print: no register {}", what);
        uint32_t pe = pe_arg(t, 2);
        const uint32_t* l = &s.v[(size_t(r) * s.npe + pe) * isa::kLanes];
        std::string hex, f32, f16;
        for (int k = 0; k < isa::kLanes; ++k) {
          hex += fmt::format(" {:08x}", l[k]);
          f32 += fmt::format(" {:g}", bits_to_f32(l[k]));
          f16 += fmt::format(" {:g}", f16_to_f32(uint16_t(l[k])));
        }
        out_ << fmt::format("v{} of PE {}:\n  hex {}\n  f32 {}\n  f16 {}   (low halves)\n", r, pe, hex, f32, f16);
        return 0;
      }
      if (what[0] == 'p') return execute({"preds"});
      fail("print: '{}' is not a register (xN, vN [pe N], p)", what);
    }
    if (c == "vregs") {
      const isa::ArchState& s = p_.state();
      uint32_t pe = pe_arg(t, 1);
      out_ << fmt::format("vector registers of PE {}:\n", pe);
      for (int r = 0; r < isa::kVregs; ++r) {
        const uint32_t* l = &s.v[(size_t(r) * s.npe + pe) * isa::kLanes];
        std::string hex;
        for (int k = 0; k < isa::kLanes; ++k) hex += fmt::format(" {:08x}", l[k]);
        out_ << fmt::format("v{:<2}{}\n", r, hex);
      }
      return 0;
    }
    if (c == "mem" || c == "x") {
      std::string space = arg(1, "a space (ocm, lrm, smem, ddr)");
      uint64_t addr = number(arg(2, "an address"), "address");
      uint32_t bytes = 64, pe = 0;
      std::string format = "hex";
      for (size_t i = 3; i < t.size(); ++i) {
        if (t[i] == "pe") pe = uint32_t(number(arg(++i, "a PE"), "PE"));
        else if (t[i] == "hex" || t[i] == "fp16" || t[i] == "f16" || t[i] == "f32" || t[i] == "int4") format = t[i];
        else bytes = uint32_t(number(t[i], "byte count"));
      }
      if (bytes == 0 || bytes > (1u << 20)) fail("mem: {} bytes; show 1 byte to 1 MiB", bytes);
      std::vector<uint8_t> b = read(space, addr, bytes, pe);
      print_memory(space, addr, b, format, pe);
      return 0;
    }
    if (c == "disasm" || c == "d") {
      uint64_t at = t.size() > 1 ? number(t[1], "pc") : next_pc_;
      uint64_t n = t.size() > 2 ? number(t[2], "count") : 11;
      uint64_t lo = at > n / 2 ? at - n / 2 : 0, hi = std::min<uint64_t>(lo + n, disasm_.size());
      for (uint64_t pc = lo; pc < hi; ++pc) {
        bool brk = std::any_of(breaks_.begin(), breaks_.end(),
                               [&](const Breakpoint& b) { return b.kind == Breakpoint::pc && b.value == pc; });
        out_ << fmt::format("{}{}{:>6}  {}\n", pc == next_pc_ && !halted_ ? "=>" : "  ", brk ? "*" : " ", pc, disasm_[pc]);
      }
      return 0;
    }
    if (c == "where" || c == "info") {
      if (halted_ && !fault_.empty()) out_ << fmt::format("faulted: {}\n  the last instruction that completed was pc {}", fault_, last_pc_);
      else if (halted_) out_ << fmt::format("halted after cycle {}", last_cycle_);
      else out_ << fmt::format("before pc {} `{}`", next_pc_, next_pc_ < disasm_.size() ? disasm_[next_pc_] : "?");
      out_ << fmt::format(" (last issue at cycle {}, {} instructions executed)\n", last_cycle_, executed_);
      std::string m;
      for (uint32_t id : marks_) m += (m.empty() ? "" : " > ") + (id < prog_.names.size() ? prog_.names[id] : "?");
      out_ << "marks: " << (m.empty() ? "none open" : m) << "\n";
      std::string q;
      for (uint32_t ch = 0; ch < p_.dma().channels(); ++ch) q += fmt::format(" c{}={}", ch, p_.dma().queued(ch));
      out_ << "dma queued:" << q << "\n";
      return 0;
    }
    fail("unknown command '{}' (try `help`)", c);
  }

  uint32_t pe_arg(const std::vector<std::string>& t, size_t i) {
    if (i >= t.size()) return 0;
    if (t[i] != "pe" || i + 1 >= t.size()) fail("expected `pe N`, got '{}'", t[i]);
    uint64_t pe = number(t[i + 1], "PE");
    if (pe >= p_.state().npe) fail("PE {} does not exist (the array has {} PEs)", pe, p_.state().npe);
    return uint32_t(pe);
  }

  std::vector<uint8_t> read(const std::string& space, uint64_t addr, uint64_t n, uint32_t pe) {
    std::vector<uint8_t> b(n);
    isa::ArchState& s = p_.state();
    auto check = [&](uint64_t limit) {
      if (addr + n > limit)
        fail("{} [0x{:x}, 0x{:x}) is out of range: the {} has 0x{:x} bytes", space, addr, addr + n, space, limit);
    };
    if (space == "ocm") {
      if (addr >= sim::kOcmRegion.base) addr -= sim::kOcmRegion.base;  // a bus address
      check(p_.ocm().size());
      p_.ocm().read(addr, b.data(), n);
    } else if (space == "ddr") {
      check(p_.ddr().size());
      p_.ddr().read(addr, b.data(), n);
    } else if (space == "smem") {
      check(s.smem.size());
      std::copy_n(&s.smem[addr], n, b.begin());
    } else if (space == "lrm") {
      check(s.lrm_bytes);
      if (pe >= s.npe) fail("PE {} does not exist (the array has {} PEs)", pe, s.npe);
      std::copy_n(s.lrm_of(pe) + addr, n, b.begin());
    } else {
      fail("unknown memory '{}' (ocm, lrm, smem, ddr)", space);
    }
    return b;
  }

  void print_memory(const std::string& space, uint64_t addr, const std::vector<uint8_t>& b, const std::string& format,
                    uint32_t pe) {
    std::string where = space == "lrm" ? fmt::format(" of PE {}", pe) : "";
    out_ << fmt::format("{} [0x{:x}, 0x{:x}){} as {}:\n", space, addr, addr + b.size(), where, format);
    const size_t per_line = 16;
    for (size_t off = 0; off < b.size(); off += per_line) {
      size_t n = std::min(per_line, b.size() - off);
      std::string line = fmt::format("  0x{:08x}:", addr + off);
      if (format == "hex") {
        for (size_t i = 0; i < n; ++i) line += fmt::format(" {:02x}", b[off + i]);
      } else if (format == "fp16" || format == "f16") {
        for (size_t i = 0; i + 1 < n; i += 2) line += fmt::format(" {:g}", f16_to_f32(uint16_t(b[off + i] | b[off + i + 1] << 8)));
      } else if (format == "f32") {
        for (size_t i = 0; i + 3 < n; i += 4) {
          uint32_t w = uint32_t(b[off + i]) | uint32_t(b[off + i + 1]) << 8 | uint32_t(b[off + i + 2]) << 16 | uint32_t(b[off + i + 3]) << 24;
          line += fmt::format(" {:g}", bits_to_f32(w));
        }
      } else {  // int4: two codes per byte, low nibble first
        for (size_t i = 0; i < n; ++i) line += fmt::format(" {:x} {:x}", b[off + i] & 15, b[off + i] >> 4);
      }
      out_ << line << "\n";
    }
  }

  std::string watch_name(const Watch& w) const {
    return fmt::format("{}[0x{:x},+{}){}", w.space, w.addr, w.bytes, w.space == "lrm" ? fmt::format(" of PE {}", w.pe) : "");
  }

  void on_issue(const sim::IssueEvent& e) {
    const isa::ArchState& s = *e.state;
    ++executed_;
    last_cycle_ = e.cycle;
    last_pc_ = e.pc;
    next_pc_ = s.next_pc;
    if (s.effect == isa::Effect::mark_begin) marks_.push_back(s.effect_arg);
    if (s.effect == isa::Effect::mark_end && !marks_.empty()) marks_.pop_back();
    if (s.effect == isa::Effect::halt) return;  // the run ends; the prompt returns after it
    std::vector<std::string> why;
    if (g_interrupted) {
      g_interrupted = 0;
      why.push_back("interrupted (Ctrl-C)");
    }
    if (step_left_ && --step_left_ == 0) why.push_back("step");
    if (e.cycle >= until_cycle_) {
      why.push_back(fmt::format("stepc: cycle {} >= {}", e.cycle, until_cycle_));
      until_cycle_ = UINT64_MAX;
    }
    for (Breakpoint& b : breaks_) {
      if (b.kind == Breakpoint::pc && next_pc_ == b.value) why.push_back(fmt::format("breakpoint {}: pc {}", b.id, b.value));
      if (b.kind == Breakpoint::mark && s.effect == isa::Effect::mark_begin && s.effect_arg == b.value)
        why.push_back(fmt::format("breakpoint {}: mark \"{}\" begins", b.id, prog_.names[b.value]));
      if (b.kind == Breakpoint::cycle && !b.fired && e.cycle >= b.value) {
        b.fired = true;
        why.push_back(fmt::format("breakpoint {}: cycle {}", b.id, b.value));
      }
    }
    for (Watch& w : watches_) {
      std::vector<uint8_t> now = read(w.space, w.addr, w.bytes, w.pe);
      if (now != w.last) {
        why.push_back(fmt::format("watch {}: {} changed: {} -> {}", w.id, watch_name(w), hex_bytes(w.last), hex_bytes(now)));
        w.last = std::move(now);
      }
    }
    if (why.empty()) return;
    step_left_ = 0;
    until_cycle_ = UINT64_MAX;
    std::string reasons;
    for (const std::string& r : why) reasons += (reasons.empty() ? "" : "; ") + r;
    std::vector<TraceWrite> writes;
    InsnTracer::writes_of(e, 0, writes);
    out_ << fmt::format("stopped before pc {} ({})\n", next_pc_, reasons);
    out_ << "  executed: "
         << format_line(e.cycle, isa::unit_name(e.insn->info->unit), e.pc, disasm_[e.pc], format_writes(writes, prog_.names))
         << "\n";
    out_ << fmt::format("  next:     pc={} {}\n", next_pc_, next_pc_ < disasm_.size() ? disasm_[next_pc_] : "(past the end)");
    out_.flush();
    command_loop();
  }

  std::string ended() const {
    return fault_.empty() ? "the program has halted" : "the program faulted (`where` says where); it cannot run on";
  }

  static constexpr const char* kHelp =
      "break pc N | break N | break mark NAME | break cycle N   set a breakpoint\n"
      "delete [N]            remove a breakpoint (all without N); breaks: list them\n"
      "watch SPACE ADDR [BYTES] [pe N]   stop when the bytes change (ocm, lrm, smem, ddr)\n"
      "unwatch [N]           remove a watch\n"
      "step [N]              execute N instructions;  stepc N: run N cycles\n"
      "continue | c          run to a breakpoint, a watch or halt (Ctrl-C stops it where it is)\n"
      "regs | print xN       scalar registers;  print vN [pe N]: one PE's vector register\n"
      "vregs [pe N]          the 32 vector registers of a PE;  preds: predicate counts\n"
      "mem SPACE ADDR [BYTES] [hex|fp16|f32|int4] [pe N]   show memory (alias x)\n"
      "disasm [PC] [N]       instructions around PC;  where: position, marks, DMA queues\n"
      "quit\n";

  sim::Platform& p_;
  const isa::Program& prog_;
  std::istream& in_;
  std::ostream& out_;
  std::string source_;
  std::vector<std::string> disasm_;
  std::vector<Breakpoint> breaks_;
  std::vector<Watch> watches_;
  std::vector<uint32_t> marks_;
  int next_id_ = 1;
  size_t line_no_ = 0;
  uint64_t executed_ = 0, last_cycle_ = 0, step_left_ = 0, until_cycle_ = UINT64_MAX;
  uint32_t next_pc_ = 0, last_pc_ = 0;
  bool started_ = false, halted_ = false, fatal_ = false;
  std::string fault_;  // the error that ended the run ("" if it halted or runs)
};

}  // namespace

void debug_program(sim::Platform& platform, const isa::Program& program, std::istream& in, std::ostream& out,
                   const std::string& source) {
  SigintScope sigint(source.empty());  // at the terminal, Ctrl-C stops a run instead of the process
  Dbg(platform, program, in, out, source).run();
}

}  // namespace gpnpu::traces
