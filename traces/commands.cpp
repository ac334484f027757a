#include "traces/commands.h"

#include <fstream>
#include <iostream>

#include "isa/error.h"
#include "sim/machine/options.h"
#include "sim/platform.h"
#include "traces/debugger.h"
#include "traces/trace_diff.h"

namespace gpnpu::traces {

void add_run_trace_options(CLI::App* run, TraceOptions& o) {
  run->add_option("--trace", o.trace, "write an instruction trace (FILE.gtrc: compact binary; else text)");
  run->add_option("--trace-filter", o.filter,
                  "what --trace and --timeline keep: mark=NAME,pc=LO:HI,cycle=LO:HI (both), every=N,pe=N (--trace "
                  "only); comma-separated, all optional");
  run->add_option("--timeline", o.timeline,
                  "write a Perfetto/Chrome JSON timeline (ui.perfetto.dev); ~130 bytes per instruction or stall, so "
                  "filter long runs (a 2B decode step is 214 MB)");
  run->add_option("--vcd", o.vcd, "write a VCD of unit busy flags, DMA queues and DDR bytes in flight (GTKWave)");
  run->add_flag("--check-hazards", o.check_hazards,
                "report DMA/array races and reads of never-written OCM/LRM (exit 1 if any)");
}

void declare_outputs(const TraceOptions& o, io::Outputs& paths) {
  paths.output("--trace", o.trace).output("--timeline", o.timeline).output("--vcd", o.vcd);
}

sim::Stats run_traced(const isa::Program& program, const sim::Config& cfg, bool timing_only, const TraceOptions& o) {
  sim::Platform& p = sim::Platform::get();
  p.configure(cfg, timing_only);
  TraceSession session(p, program, o);
  sim::Stats st;
  try {
    st = p.run(program);
  } catch (const Error&) {
    session.finish(p.stats());
    if (session.hazards()) std::fputs(session.hazards()->report().c_str(), stdout);
    throw;
  }
  session.finish(st);
  if (HazardChecker* h = session.hazards()) {
    std::fputs(h->report().c_str(), stdout);
    size_t n = h->hazards().size();
    if (n) {
      std::fflush(stdout);
      fail("--check-hazards: {} hazard{} found (listed above)", n, n == 1 ? "" : "s");
    }
  }
  return st;
}

void add_trace_commands(CLI::App& app) {
  auto* dbg = app.add_subcommand("debug", "step through a program: breakpoints, watches, registers, memory");
  static std::string prog, commands;
  static sim::MachineOptions machine;
  static bool timing_only = false;
  dbg->add_option("program", prog, "PROG.s or PROG.bin")->required();
  machine.add(dbg);
  dbg->add_option("--commands", commands, "read debugger commands from FILE (one a line) instead of the terminal");
  dbg->add_flag("--timing-only", timing_only, "skip array arithmetic and DMA payloads");
  dbg->callback([] {
    if (!commands.empty()) io::check_input(commands, "debugger command file", 64 * io::kMiB);
    sim::Config cfg = machine.config();
    isa::Program p = isa::Program::load(prog);
    sim::Platform& plat = sim::Platform::get();
    plat.configure(cfg, timing_only);
    if (commands.empty()) {
      debug_program(plat, p, std::cin, std::cout, "");
      return;
    }
    std::ifstream in(commands);
    if (!in) fail("debug: cannot read the command file '{}'", commands);
    debug_program(plat, p, in, std::cout, commands);
  });

  auto* diff = app.add_subcommand("trace-diff", "report the first divergence of two instruction traces (exit 1 if any)");
  static std::string a, b;
  static bool values_only = false;
  diff->add_option("a", a, "first trace (text or .gtrc)")->required();
  diff->add_option("b", b, "second trace (text or .gtrc)")->required();
  diff->add_flag("--values-only", values_only,
                 "compare only what was written, in order: ignore cycles, pcs and lines that write nothing "
                 "(checks that a timing or scheduling change left the values alone)");
  diff->callback([] {
    TraceDivergence d = values_only ? diff_trace_values(read_trace(a), read_trace(b), a, b)
                                    : diff_traces(read_trace(a), read_trace(b), a, b);
    std::fputs(d.report.c_str(), stdout);
    if (!d.same) {
      std::fflush(stdout);
      fail("traces differ{} (first divergence at line {}, cycle {}, pc {})", values_only ? " in their values" : "",
           d.line + 1, d.cycle, d.pc);
    }
  });

  auto* print = app.add_subcommand("trace-print", "print an instruction trace (binary .gtrc or text) as text lines");
  static std::string file;
  print->add_option("file", file, "trace file")->required();
  print->callback([] {
    std::string header = trace_header(file);
    if (is_binary_trace_path(file)) std::printf("# %s\n", header.c_str());
    else std::fputs(header.c_str(), stdout);
    for (const TraceLine& l : read_trace(file)) std::printf("%s\n", l.text.c_str());
  });
}

}  // namespace gpnpu::traces
