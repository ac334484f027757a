// The CLI of the trace tools: `gpnpu run` options (--trace, --trace-filter,
// --timeline, --vcd, --check-hazards) and the subcommands debug, trace-diff and
// trace-print. sim/main.cpp wires them in.
#pragma once
#include <CLI/CLI.hpp>

#include "isa/io_rules.h"
#include "isa/program.h"
#include "sim/machine/config.h"
#include "sim/stats.h"
#include "traces/session.h"

namespace gpnpu::traces {

// Adds the tracing options of `gpnpu run` to its subcommand.
void add_run_trace_options(CLI::App* run, TraceOptions& o);

// Adds the trace files of `o` to a command's outputs (isa/io_rules.h).
void declare_outputs(const TraceOptions& o, io::Outputs& paths);

// Configures the platform, runs `program` with the traces of `o` attached, writes
// them (also when the run faults, then rethrows) and prints the hazard report;
// throws gpnpu::Error when --check-hazards found any.
sim::Stats run_traced(const isa::Program& program, const sim::Config& cfg, bool timing_only, const TraceOptions& o);

// debug, trace-diff, trace-print.
void add_trace_commands(CLI::App& app);

}  // namespace gpnpu::traces
