#include "traces/session.h"

#include <cstdio>
#include <exception>

#include <fmt/format.h>

#include "isa/error.h"

namespace gpnpu::traces {

TraceSession::TraceSession(sim::Platform& p, const isa::Program& program, const TraceOptions& o) : p_(p), o_(o) {
  const sim::Config& cfg = p.config();
  const TraceFilter filter = TraceFilter::parse(o.filter);
  // A filter that would filter nothing is refused, not ignored.
  if (!o.filter.empty() && o.trace.empty() && o.timeline.empty())
    fail("--trace-filter '{}' applies to nothing: it filters --trace and --timeline (the VCD and --check-hazards "
         "see every instruction); give one of them, or drop the filter", o.filter);
  if (filter.has_trace_only_terms() && o.trace.empty())
    fail("--trace-filter '{}': every= and pe= apply to the instruction trace only (--trace); the timeline takes mark=, "
         "pc= and cycle=", o.filter);
  base_ = sim::Clock(cfg.clock_ghz).to_cycles(sc_core::sc_time_stamp());
  if (!o.trace.empty()) {
    std::string header = fmt::format("gpnpu instruction trace: {}, preset {}{}, filter '{}'",
                                     program.source.empty() ? "<program>" : program.source, cfg.preset,
                                     p.timing_only() ? ", timing only" : "", o.filter);
    if (filter.pe >= cfg.npe())
      fail("--trace-filter: pe={} does not exist: the array has {} PEs (pe=0..{}; pe_rows {} x pe_cols {})", filter.pe,
           cfg.npe(), cfg.npe() - 1, cfg.pe_rows, cfg.pe_cols);
    tracer_ = std::make_unique<InsnTracer>(o.trace, program, filter, header);
  }
  if (!o.timeline.empty())
    timeline_ = std::make_unique<Timeline>(cfg, program, filter, [](const std::string& w) {
      std::fprintf(stderr, "%s\n", w.c_str());
    });
  if (!o.vcd.empty()) vcd_ = std::make_unique<VcdWriter>(o.vcd, cfg);
  if (o.check_hazards) hazards_ = std::make_unique<HazardChecker>(cfg, program);
  if (!o.any()) return;  // (a filter alone was refused above)
  p.sequencer().on_issue = [this](const sim::IssueEvent& e) {
    if (tracer_) tracer_->on_issue(e);
    if (timeline_) timeline_->on_issue(e);
    if (vcd_) vcd_->on_issue(e, base_);
    if (hazards_) hazards_->on_issue(e);
  };
  if (timeline_ || vcd_ || hazards_)
    p.dma().on_event = [this](const sim::DmaEvent& e) {
      if (timeline_) timeline_->on_dma(e, base_);
      if (vcd_) vcd_->on_dma(e);
      if (hazards_) hazards_->on_dma(e, base_);
    };
}

TraceSession::~TraceSession() {
  detach();
  // The VCD probe is a SystemC thread that lives as long as the simulator: keep its
  // writer alive too (one per process; SystemC takes trace files only before the
  // first run anyway).
  static std::vector<std::unique_ptr<VcdWriter>> probes;
  if (vcd_) probes.push_back(std::move(vcd_));
}

void TraceSession::detach() {
  p_.sequencer().on_issue = nullptr;
  p_.dma().on_event = nullptr;
}

void TraceSession::finish(const sim::Stats& stats) {
  if (finished_) return;
  finished_ = true;
  detach();
  // Every writer finishes (writes its file or removes its temporary) even if an
  // earlier one failed; the first failure is reported.
  std::exception_ptr first;
  auto step = [&](auto f) {
    try {
      f();
    } catch (const Error&) {
      if (!first) first = std::current_exception();
    }
  };
  if (tracer_) step([&] { tracer_->close(); });
  if (timeline_) step([&] { timeline_->write(o_.timeline, stats); });
  if (vcd_) step([&] { vcd_->close(); });
  if (first) std::rethrow_exception(first);
}

}  // namespace gpnpu::traces
