// VCD of the key signals, written by SystemC's own tracing (sc_create_vcd_trace_file),
// for GTKWave:
//   busy_<unit>        1 while an instruction occupies that unit class (valu, mac16, ...)
//   pc                 the pc of the last issued instruction
//   dma<N>_queue       descriptors queued on channel N, the running one included
//   ddr_bytes_in_flight  bytes requested from or to the DDR port and not yet delivered
// The sequencer runs ahead of SystemC time (temporal decoupling), so signal changes
// are queued with their cycle and applied by a probe thread when SystemC time gets
// there; the VCD shows them at their true cycles (time unit 1 ps; one cycle is the
// clock period). SystemC only accepts a trace file before its first sc_start in a
// process, so create the VcdWriter before the process's first run (the CLI does).
// Cost: nothing unless created.
#pragma once
#include <cstdint>
#include <queue>
#include <string>
#include <systemc>
#include <vector>

#include "isa/isa.h"
#include "sim/clock.h"
#include "sim/machine/config.h"
#include "sim/dma.h"
#include "sim/sequencer.h"

namespace gpnpu::traces {

class VcdWriter {
 public:
  // Writes `path` (through PATH.tmp.PID.vcd, renamed at close(); a target that is
  // not a regular file gets a copy from the temporary directory). Throws
  // gpnpu::Error naming the file if it cannot be created, and at close() if any
  // write failed (disk full, file too large): then no file and no temporary remain.
  VcdWriter(const std::string& path, const sim::Config& cfg);
  ~VcdWriter();
  void on_issue(const sim::IssueEvent& e, sim::Cycles base);
  void on_dma(const sim::DmaEvent& e);
  // Closes the file (SystemC writes it as the simulation runs).
  void close();

 private:
  enum Kind : uint8_t { busy, pc, queue, inflight };
  struct Change {
    sim::Cycles at;
    uint64_t seq;
    Kind kind;
    uint32_t index;
    int64_t delta;  // busy/queue/inflight: added; pc: the value
    bool operator>(const Change& o) const { return at != o.at ? at > o.at : seq > o.seq; }
  };
  void push(sim::Cycles at, Kind k, uint32_t index, int64_t delta);
  void thread();

  std::string path_;
  std::string base_, tmp_;  // the name given to SystemC, and the file it writes (base_.vcd)
  sim::Clock clock_;
  sc_core::sc_trace_file* tf_ = nullptr;
  sc_core::sc_event wake_;
  std::priority_queue<Change, std::vector<Change>, std::greater<Change>> q_;
  uint64_t seq_ = 0;
  // Traced values (SystemC samples them at every time step).
  bool busy_[isa::kNumUnits] = {};
  int busy_count_[isa::kNumUnits] = {};
  uint32_t pc_ = 0;
  std::vector<uint32_t> queue_;
  uint64_t inflight_ = 0;
  bool closed_ = false;
  int temp_id_ = -1;  // tmp_ in the temporaries registry (isa/io_rules.h)
};

}  // namespace gpnpu::traces
