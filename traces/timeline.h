// The timeline: a Chrome/Perfetto JSON trace (the "Trace Event Format": load it at
// ui.perfetto.dev or chrome://tracing). One process "gpnpu" with one track each:
//   marks       the program's mark regions as nested slices (from the stats)
//   sequencer   one slice per issued instruction (1 cycle) and a "stall" slice for
//               each gap before an issue, named after the instruction that waited
//   array       array-unit occupancy (valu, vfpu, mac, sfu, xlane, lrm, ocm forms)
//   mac         the MAC array (vmac.f16, vmac.i8)
//   dma cN      one slice per descriptor, from the channel taking it to completion
//   ddr port    the port's busy intervals (bytes / bandwidth before each delivery)
// and a counter track "ddr bandwidth" (GB/s averaged over fixed bins of cycles).
// Times are microseconds of simulated time (cycles / clock); every slice's args
// carry its cycles. Slices on one track never overlap (a slice that would start
// inside the previous one is clipped to start at its end).
//
// A filter (TraceFilter: mark=, pc=, cycle=) keeps the instructions that pass it, the
// DMA and DDR activity while the last issued instruction passed, and the marks and
// bandwidth bins inside the span of what was kept. Size: about 130 bytes of JSON per
// slice (a 2B decode step is 1.67 M slices, 214 MB); `warn` is told the estimate each
// time it doubles past 64 MB, and before the file is written.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "isa/program.h"
#include "sim/machine/config.h"
#include "sim/dma.h"
#include "sim/sequencer.h"
#include "sim/stats.h"
#include "traces/insn_trace.h"

namespace gpnpu::traces {

class Timeline {
 public:
  using Warn = std::function<void(const std::string&)>;
  Timeline(const sim::Config& cfg, const isa::Program& program, const TraceFilter& filter = {}, Warn warn = {});

  void on_issue(const sim::IssueEvent& e);
  // `base`: the absolute cycle of the run's start (DMA events carry absolute cycles).
  void on_dma(const sim::DmaEvent& e, sim::Cycles base);
  // The JSON document; `stats` gives the mark regions.
  std::string json(const sim::Stats& stats) const;
  void write(const std::string& path, const sim::Stats& stats) const;

  // Track ids (Chrome "tid"s), in display order.
  enum Track : uint32_t { marks = 1, sequencer = 2, array = 3, mac = 4, ddr = 5, dma0 = 10 };

 private:
  struct Slice {
    uint32_t track;
    uint64_t begin, end;  // cycles
    const char* name;     // static text (mnemonics) or nullptr: use `label`
    uint32_t pc;          // UINT32_MAX: none
    std::string label;
  };
  void add(uint32_t track, uint64_t begin, uint64_t end, const char* name, uint32_t pc, std::string label = {});
  uint64_t estimated_bytes() const { return slices_.size() * kBytesPerSlice + 4096; }
  static constexpr uint64_t kBytesPerSlice = 130;  // measured: a 2B decode step, 214.5 MB / 1.67 M slices

  const sim::Config cfg_;
  const isa::Program& program_;
  double us_per_cycle_;
  std::vector<Slice> slices_;
  std::vector<uint64_t> track_end_;            // end of the last slice per track
  std::vector<std::pair<uint64_t, uint64_t>> ddr_busy_;  // [begin, end) cycles of each request
  std::vector<uint64_t> ddr_bytes_;
  std::vector<uint64_t> pending_begin_;  // per channel: cycle its running descriptor began
  uint64_t next_issue_ = 0, last_cycle_ = 0;
  uint32_t max_channel_ = 0;
  FilterMatch match_;
  bool filtered_ = false, open_ = true;  // a filter given; the last issued instruction passed it
  uint64_t kept_begin_ = UINT64_MAX;    // the span of the kept instructions (filtered only)
  Warn warn_;
  uint64_t warn_at_ = 64000000;  // the next estimated size (bytes) to warn at
};

}  // namespace gpnpu::traces
