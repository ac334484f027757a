// gpnpu: the command-line tool. Subcommands: asm, disasm, run, config, debug,
// trace-diff, trace-print, and the
// model's (make-checkpoint, quantize, tokenize, detokenize, preprocess, ...).
// Every user error is a gpnpu::Error: printed as "error: ..." with exit code 1;
// so is anything else thrown (isa/cli_rules.h). Each command checks its paths
// before any work (isa/io_rules.h).
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>

#include "isa/cli_rules.h"
#include "isa/error.h"
#include "isa/io_rules.h"
#include "isa/program.h"
#include "model/cli/commands.h"
#include "model/cli/driver.h"
#include "model/cli/driver_sweep.h"
#include "sim/machine/config.h"
#include "sim/machine/options.h"
#include "sim/machine/config_limits.h"
#include "sim/run.h"
#include "traces/commands.h"

using namespace gpnpu;

namespace {

void add_isa_commands(CLI::App& app) {
  auto* as = app.add_subcommand("asm", "assemble a program: gpnpu asm IN.s -o OUT.bin");
  static std::string as_in, as_out;
  as->add_option("input", as_in, "assembly source")->required();
  as->add_option("-o,--output", as_out, "output binary")->required();
  as->callback([] {
    io::Outputs().input("program", as_in).output("-o", as_out).check();
    isa::Program p = isa::Program::load(as_in);
    p.write_binary(as_out);
    std::printf("%s: %zu instructions, %zu mark names -> %s\n", as_in.c_str(), p.words.size(), p.names.size(), as_out.c_str());
  });

  auto* dis = app.add_subcommand("disasm", "disassemble a program (binary or text) to assembly");
  static std::string dis_in;
  dis->add_option("input", dis_in, "program binary")->required();
  dis->callback([] { std::fputs(isa::Program::load(dis_in).disassemble().c_str(), stdout); });
}

void add_run_command(CLI::App& app) {
  auto* run = app.add_subcommand("run", "run a program (assembly or binary) on the simulated GPNPU");
  run->footer("A run stops with an error after max_cycles simulated cycles (an endless loop; `gpnpu config --list` "
              "gives the default): lower it with --set max_cycles=N to stop a suspect program sooner, raise it for "
              "a longer run.");
  static std::string prog;
  static sim::MachineOptions mo;
  static bool timing_only = false, quiet = false;
  static std::string stats_json, stats_h5;
  run->add_option("program", prog, "PROG.s or PROG.bin")->required();
  mo.add(run);
  run->add_flag("--timing-only", timing_only, "skip array arithmetic and DMA payloads (same cycles, faster)");
  run->add_option("--stats-json", stats_json, "write stats and the resolved config as JSON");
  run->add_option("--stats-h5", stats_h5, "write every mark region call as an HDF5 table");
  run->add_flag("-q,--quiet", quiet, "print nothing but errors");
  static traces::TraceOptions tracing;
  traces::add_run_trace_options(run, tracing);
  run->callback([] {
    io::Outputs paths;
    paths.input("program", prog).output("--stats-json", stats_json).output("--stats-h5", stats_h5);
    traces::declare_outputs(tracing, paths);
    paths.check();
    sim::Config cfg = mo.config();
    isa::Program p = isa::Program::load(prog);
    auto t0 = std::chrono::steady_clock::now();
    sim::Stats st = tracing.any() ? traces::run_traced(p, cfg, timing_only, tracing) : sim::run_program(p, cfg, timing_only);
    double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!stats_json.empty()) sim::write_file_atomic(stats_json, st.to_json(cfg, timing_only) + "\n");
    if (!stats_h5.empty()) st.write_hdf5(stats_h5, cfg);
    if (!quiet) {
      std::fputs(st.to_text(cfg).c_str(), stdout);
      uint64_t cycles = st.total[sim::Stat::cycles];
      std::printf("simulated %llu cycles in %.3f s wall (%.3g cycles/s)%s\n", (unsigned long long)cycles, wall,
                  wall > 0 ? double(cycles) / wall : 0.0, timing_only ? ", timing only" : "");
    }
  });
}

void add_config_command(CLI::App& app) {
  auto* c = app.add_subcommand("config", "print the resolved machine config (JSON), or every key with --list");
  static sim::MachineOptions mo;
  static bool list = false;
  mo.add(c);
  c->add_flag("--list", list, "list every key with its type, default, allowed values, unit and description");
  c->callback([] {
    if (list) {
      std::printf("%-20s %-6s %-14s %-20s %-12s %s\n", "key", "type", "default", "allowed", "unit", "description");
      for (const sim::ParamInfo& p : sim::param_table())
        std::printf("%-20s %-6s %-14s %-20s %-12s %s\n", p.key,
                    p.type == sim::ParamType::count   ? "count"
                    : p.type == sim::ParamType::bytes ? "bytes"
                    : p.type == sim::ParamType::real  ? "real"
                                                      : "text",
                    p.default_text, sim::param_allowed(p.key).c_str(), p.unit, p.description);
      std::string presets;
      for (const std::string& n : sim::Config::preset_names()) presets += " " + n;
      std::printf("presets:%s\n", presets.c_str());
      std::string dram;
      for (const std::string& n : sim::Config::dram_preset_names()) dram += " " + n;
      std::printf("DRAM presets (dram = NAME, with ddr_model = dram):%s\n", dram.c_str());
      return;
    }
    std::printf("%s\n", mo.config().to_json().c_str());
  });
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"gpnpu: cycle-level simulator of a GPNPU, with Qwen3-VL-2B compiled for it"};
  app.require_subcommand(1);
  add_isa_commands(app);
  add_run_command(app);
  add_config_command(app);
  traces::add_trace_commands(app);
  model::add_checkpoint_commands(app);
  model::add_tokenizer_commands(app);
  model::add_image_commands(app);
  model::add_compile_commands(app);
  model::add_describe_command(app);
  model::add_chat_command(app);
  model::add_sweep_commands(app);
  for (int k = 0; k < argc; ++k) model::command_line() += (k ? " " : "") + std::string(k ? argv[k] : "gpnpu");
  io::install_cleanup_handlers();
  return cli::run(app, argc, argv);
}
