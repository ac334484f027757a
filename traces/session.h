// A tracing session: attaches the requested sinks (instruction trace, timeline,
// VCD, hazard checker) to the platform's hooks for one run and writes their files
// afterwards. Nothing is attached for a sink not asked for, and with no sink the
// hooks stay empty (a null check each in the simulator).
//
//   traces::TraceOptions o;  o.trace = "run.trace";  o.check_hazards = true;
//   sim::Platform& p = sim::Platform::get();  p.configure(cfg, false);
//   traces::TraceSession s(p, program, o);
//   s.finish(p.run(program));   // writes the files; s.hazards() has the findings
//
// Call finish() after a failed run too (with p.stats()): the trace of a run that
// faulted is the one most worth reading.
#pragma once
#include <memory>
#include <string>

#include "isa/program.h"
#include "sim/platform.h"
#include "traces/hazards.h"
#include "traces/insn_trace.h"
#include "traces/timeline.h"
#include "traces/vcd.h"

namespace gpnpu::traces {

struct TraceOptions {
  std::string trace;         // instruction trace file ("" none; *.gtrc binary)
  std::string filter;        // TraceFilter spec
  std::string timeline;      // Perfetto JSON file
  std::string vcd;           // VCD file (SystemC tracing; before the process's first run)
  bool check_hazards = false;
  // A filter alone counts: the session refuses it (a filter that applies to nothing).
  bool any() const { return !trace.empty() || !timeline.empty() || !vcd.empty() || check_hazards || !filter.empty(); }
};

class TraceSession {
 public:
  // Attach after platform.configure() and before platform.run().
  TraceSession(sim::Platform& platform, const isa::Program& program, const TraceOptions& o);
  ~TraceSession();  // detaches the hooks

  // Writes the files (trace, timeline, VCD) from the run's stats.
  void finish(const sim::Stats& stats);
  HazardChecker* hazards() { return hazards_.get(); }
  InsnTracer* tracer() { return tracer_.get(); }

 private:
  void detach();
  sim::Platform& p_;
  sim::Cycles base_;
  std::unique_ptr<InsnTracer> tracer_;
  std::unique_ptr<Timeline> timeline_;
  std::unique_ptr<VcdWriter> vcd_;
  std::unique_ptr<HazardChecker> hazards_;
  TraceOptions o_;
  bool finished_ = false;
};

}  // namespace gpnpu::traces
