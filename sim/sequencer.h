// The sequencer: fetches the predecoded program, executes each instruction's
// semantics (the functional model, isa/) and times it (this file): in-order issue,
// one instruction per cycle at most, a scoreboard of register ready cycles, and a
// free cycle per unit class, with latency and occupancy from the config.
// It runs ahead of SystemC time (temporal decoupling) and synchronises only at
// DMA instructions, at the end of a quantum and at halt.
#pragma once
#include <array>
#include <functional>
#include <memory>
#include <string>
#include <systemc>
#include <vector>

#include "isa/program.h"
#include "isa/state.h"
#include "sim/clock.h"
#include "sim/machine/timing.h"
#include "sim/stats.h"

namespace gpnpu::sim {

class Bus;
class Config;
class DmaEngine;

// What a trace sink sees of each issued instruction: where and when it issued, and
// what it cost (sim/machine/timing.h), exactly as the sequencer timed it.
struct IssueEvent {
  uint32_t pc;
  Cycles cycle;  // issue cycle, relative to the run's start
  const isa::Insn* insn;
  const isa::ArchState* state;  // after execution
  Cost cost;
};

class Sequencer : public sc_core::sc_module {
 public:
  Sequencer(sc_core::sc_module_name name, const Clock& clock, DmaEngine& dma, Bus& bus);

  // Runs `program` on `state` from pc 0 to halt under `cfg`; returns when done.
  // Called from outside SystemC (the platform drives sc_start).
  void prepare(const Config& cfg, isa::ArchState& state, const isa::Program& program, Stats& stats,
               bool timing_only);
  // Starts the prepared run (from outside SystemC, before sc_start).
  void start() { pending_ = true; start_.notify(sc_core::SC_ZERO_TIME); }
  bool done() const { return done_; }
  // Loop iterations the last timing-only run skipped (sim/sequencer.cpp, LoopSkip).
  uint64_t skipped_iterations() const { return skipped_; }
  const std::string& error() const { return error_; }

  // Called for every issued instruction when set (tracing); nothing is done when empty.
  std::function<void(const IssueEvent&)> on_issue;
  // Called when a mark region closes (mark id, end cycle relative to the run's start):
  // progress reports on long runs. Marks are rare, so this costs nothing measurable.
  std::function<void(uint32_t mark, Cycles end)> on_mark_end;

 private:
  void thread();
  void execute();
  template <bool kHooks, bool kTimingOnly>
  void execute_loop();
  void sync(Cycles t);
  void take_numerics();
  std::string where(uint32_t pc, Cycles t) const;
  void check_channel(uint32_t ch, uint32_t pc, Cycles t) const;
  void start_dma(const isa::Insn& in, uint32_t pc, Cycles t);

  const Clock& clock_;
  DmaEngine& dma_;
  Bus& bus_;
  sc_core::sc_event start_;
  const Config* cfg_ = nullptr;
  isa::ArchState* st_ = nullptr;
  const isa::Program* program_ = nullptr;
  std::vector<isa::Insn> insns_;
  // What insns_ was decoded from: decoded again only when the program's words or its
  // count of names change (a describe's decode steps rerun one program).
  std::vector<uint64_t> decoded_words_;
  size_t decoded_names_ = 0;
  // What the issue loop reads of each instruction (sim/sequencer.cpp), made again only
  // when the program was decoded again or the timing or the mode changed.
  struct IssueCache;
  std::shared_ptr<IssueCache> issue_cache_;
  bool redecoded_ = true;
  Stats* stats_ = nullptr;
  bool timing_only_ = false;
  Cycles base_ = 0;
  uint64_t skipped_ = 0;
  bool done_ = false, pending_ = false;
  std::string error_;
};

}  // namespace gpnpu::sim
