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
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "isa/program.h"
#include "sim/machine/config.h"
#include "sim/dma.h"
#include "sim/sequencer.h"
#include "sim/stats.h"

namespace gpnpu::traces {

class Timeline {
 public:
  Timeline(const sim::Config& cfg, const isa::Program& program);

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
};

}  // namespace gpnpu::traces
