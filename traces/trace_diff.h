// Trace diff: the first divergence between two instruction traces (text or .gtrc,
// any mix): the first line whose cycle, pc, instruction or writes differ, or the
// point where one trace ends before the other. Use it to find where a changed
// kernel, compiler or simulator first behaves differently.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "traces/insn_trace.h"

namespace gpnpu::traces {

struct TraceDivergence {
  bool same = true;
  size_t line = 0;        // index of the first differing line (0-based)
  uint64_t cycle = 0;     // of that line in A (or B when A ended)
  uint32_t pc = 0;
  std::string what;       // "instruction", "cycle", "write", "length"
  std::string write_a, write_b;  // the first differing write items ("" if none)
  std::string report;     // human-readable, several lines
};

TraceDivergence diff_traces(const std::vector<TraceLine>& a, const std::vector<TraceLine>& b,
                            const std::string& name_a = "A", const std::string& name_b = "B");

// Values only (`trace-diff --values-only`): the sequence of what the two runs wrote,
// ignoring when. Lines that write nothing (waits, nops, branches not taken, ...) are
// skipped, and cycle, unit, pc and instruction are not compared, so the same program
// on a retimed machine, or with waits or nops added, compares equal; the first
// differing write (or one run writing more) is the divergence (`what` = "write" or
// "length"; `line` is the index in A's lines). A change that reorders the writes
// (a new schedule of the same work) is reported at the first reordered write.
TraceDivergence diff_trace_values(const std::vector<TraceLine>& a, const std::vector<TraceLine>& b,
                                  const std::string& name_a = "A", const std::string& name_b = "B");

}  // namespace gpnpu::traces
