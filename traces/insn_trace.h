// The instruction trace: one greppable line per executed instruction,
//
//      cycle unit   pc=N   disassembly                        => writes
//        1234 valu   pc=57    vsplati v8, 0                    => v8[pe0]=00000000 ... #5f1c...
//
// `cycle` is the issue cycle relative to the run's start; `writes` lists what the
// instruction wrote: scalar registers with their value (x3=0x00000010), predicates
// with their active-PE count (p1=37pe), vector registers as the 16 lanes (hex) of
// one chosen PE plus a 64-bit hash of the register over every PE (#...), memory as
// a range with a hash of the bytes written (smem, LRM of every enabled PE, OCM
// gathers), DMA descriptors queued and marks. Lines starting with '#' are headers.
//
// Two file forms, chosen by the name: FILE.gtrc is a compact binary form (a header
// with the program, so a reader can disassemble, then one varint-coded record per
// instruction); anything else is the text form. `gpnpu trace-print` prints a binary
// trace as the very text the text form holds, and read_trace() reads both.
//
// Filters (TraceFilter::parse, comma-separated): mark=NAME (only while that mark
// is open), pc=LO:HI (LO <= pc < HI), cycle=LO:HI (issue cycle), every=N (every Nth
// line that passes the others), pe=N (the PE whose lanes are shown).
// Cost: nothing unless a tracer is attached to the sequencer's on_issue hook.
#pragma once
#include <array>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "isa/atomic_file.h"
#include "isa/program.h"
#include "isa/state.h"
#include "sim/sequencer.h"

namespace gpnpu::traces {

struct TraceFilter {
  std::string mark;
  uint32_t pc_lo = 0, pc_hi = std::numeric_limits<uint32_t>::max();
  uint64_t cycle_lo = 0, cycle_hi = std::numeric_limits<uint64_t>::max();
  uint64_t every = 1;
  uint32_t pe = 0;
  // "mark=gemv,pc=10:50,cycle=0:5000,every=4,pe=3"; throws gpnpu::Error on bad input.
  static TraceFilter parse(const std::string& spec);
  // every= or pe= given: terms only the instruction trace has (the timeline takes
  // mark=, pc= and cycle=).
  bool has_trace_only_terms() const { return every != 1 || pe != 0; }
};

// Follows the marks a run opens and closes and says whether each issued instruction
// passes a filter's mark, pc and cycle terms: the instruction trace and the timeline
// filter with it. Throws gpnpu::Error naming the program's marks when the filter's
// mark is not one of them.
class FilterMatch {
 public:
  FilterMatch(const TraceFilter& filter, const isa::Program& program);
  bool on_issue(const sim::IssueEvent& e);  // call for every issued instruction, in order

 private:
  TraceFilter f_;
  std::vector<uint32_t> marks_;  // open mark ids, innermost last
  uint32_t mark_id_ = UINT32_MAX;
};

// One thing an instruction wrote.
struct TraceWrite {
  enum Kind : uint8_t { xreg, vreg, preg, smem, lrm, ocm, dma, mark_begin, mark_end };
  Kind kind = xreg;
  uint8_t reg = 0;          // xreg, vreg, preg; dma: channel
  uint32_t value = 0;       // xreg value; preg active PEs; smem word; mark name id
  uint32_t addr = 0;        // smem/lrm/ocm: first address (PE 0's for ocm); dma: src
  uint32_t addr2 = 0;       // dma: dst
  uint32_t bytes = 0;       // per PE (lrm/ocm), per descriptor (dma)
  uint32_t count = 0;       // PEs written (lrm/ocm)
  uint32_t stride = 0;      // ocm: bytes between PEs
  uint32_t pe = 0;          // vreg: the PE whose lanes are shown
  std::array<uint32_t, isa::kLanes> lanes{};  // vreg lanes of PE `pe`
  uint64_t hash = 0;        // vreg: all PEs; lrm/ocm: bytes written
};

struct TraceRecord {
  uint64_t cycle = 0;
  uint32_t pc = 0;
  std::vector<TraceWrite> writes;
};

// A trace as lines, whatever file form it came from (for printing and diffing).
struct TraceLine {
  uint64_t cycle = 0;
  uint32_t pc = 0;
  std::string unit, insn, writes;  // writes: "; "-separated, "" if none
  std::string text;                // the whole line
};

// Text of a record's writes ("x3=0x00000010; v8[pe0]=... #...").
std::string format_writes(const std::vector<TraceWrite>& w, const std::vector<std::string>& names);
// The whole line.
std::string format_line(uint64_t cycle, std::string_view unit, uint32_t pc, std::string_view insn,
                        std::string_view writes);

// Records executed instructions into FILE (text or .gtrc binary) as they issue.
// The file appears (atomically: written to FILE.tmp.PID, renamed; isa/atomic_file.h)
// at close(), which throws gpnpu::Error naming the file if any write failed (disk
// full, file too large) and then leaves no file and no temporary behind.
class InsnTracer {
 public:
  InsnTracer(const std::string& path, const isa::Program& program, const TraceFilter& filter,
             const std::string& header);
  ~InsnTracer();
  void on_issue(const sim::IssueEvent& e);
  void close();
  uint64_t lines() const { return lines_; }

  // The writes of one issued instruction (used by the debugger too).
  static void writes_of(const sim::IssueEvent& e, uint32_t pe, std::vector<TraceWrite>& out);

 private:
  void emit(const TraceRecord& r);
  void write(const std::string& bytes);

  std::string path_;
  AtomicFile out_;  // the temporary f_ writes (the target itself for /dev/null etc.)
  std::FILE* f_ = nullptr;
  int write_errno_ = 0;  // errno of the first failed write, 0 if none
  bool binary_ = false;
  const isa::Program& program_;
  TraceFilter filter_;
  FilterMatch match_;
  std::vector<std::string> disasm_;
  std::vector<std::string_view> units_;
  uint64_t passed_ = 0, lines_ = 0, last_cycle_ = 0;
  TraceRecord rec_;
  std::string buf_;
};

// Reads a trace file of either form; throws gpnpu::Error naming the file and line.
std::vector<TraceLine> read_trace(const std::string& path);
// Header lines ('#') of a trace file (text form) or the binary header's text.
std::string trace_header(const std::string& path);
bool is_binary_trace_path(const std::string& path);

// Disassembly of every pc of a program (mark names resolved).
std::vector<std::string> disassemble_all(const isa::Program& p);

}  // namespace gpnpu::traces
