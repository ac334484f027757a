// Helpers shared by the simulator tests: run assembly text on the one Platform of
// the process and record each instruction's issue cycle; run the CLI binary and
// capture its exit code and stderr; read whole files.
// Contract: SystemC elaborates once per process, so every helper goes through
// sim::Platform::get() and configure() before each run (as run_program does).
#pragma once
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "isa/program.h"
#include "sim/machine/config.h"
#include "sim/platform.h"
#include "sim/stats.h"

namespace gpnpu::sim::test {

struct TimedRun {
  Stats stats;
  std::vector<uint32_t> pcs;     // pc of each issued instruction, in issue order
  std::vector<Cycles> cycles;    // its issue cycle
  // Issue cycle of the k-th issue of `pc` (k from 0).
  Cycles at(uint32_t pc, size_t k = 0) const {
    for (size_t i = 0; i < pcs.size(); ++i)
      if (pcs[i] == pc && k-- == 0) return cycles[i];
    throw std::runtime_error("pc " + std::to_string(pc) + " was not issued that often");
  }
};

// Assembles `text`, configures the platform with `cfg` and runs it, recording issues.
// `before_run` may fill DDR / scalar memory after configure() cleared them.
template <typename F>
TimedRun run_text(const std::string& text, const Config& cfg, bool timing_only, F&& before_run) {
  isa::Program prog = isa::assemble(text, "test.s");
  Platform& p = Platform::get();
  p.configure(cfg, timing_only);
  before_run(p);
  TimedRun r;
  p.sequencer().on_issue = [&r](const IssueEvent& e) {
    r.pcs.push_back(e.pc);
    r.cycles.push_back(e.cycle);
  };
  struct Reset {
    Platform& p;
    ~Reset() { p.sequencer().on_issue = nullptr; }
  } reset{p};
  r.stats = p.run(prog);
  return r;
}
inline TimedRun run_text(const std::string& text, const Config& cfg, bool timing_only = false) {
  return run_text(text, cfg, timing_only, [](Platform&) {});
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}
inline void write_file(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// A fresh scratch directory per test process.
inline std::string scratch_dir(const std::string& tag) {
  auto d = std::filesystem::temp_directory_path() / ("gpnpu_test_" + tag + "_" + std::to_string(::getpid()));
  std::filesystem::create_directories(d);
  return d.string();
}

struct CliResult {
  int exit_code;
  std::string out, err;
};
// Runs `gpnpu ARGS` (args are passed to the shell as written).
inline CliResult run_cli(const std::string& args) {
  std::string dir = scratch_dir("cli");
  std::string out = dir + "/stdout.txt", err = dir + "/stderr.txt";
  std::string cmd = std::string(GPNPU_BINARY) + " " + args + " >" + out + " 2>" + err;
  int status = std::system(cmd.c_str());
  CliResult r{WIFEXITED(status) ? WEXITSTATUS(status) : -1, read_file(out), read_file(err)};
  return r;
}

inline std::string source_path(const std::string& rel) { return std::string(GPNPU_SOURCE_DIR) + "/" + rel; }

}  // namespace gpnpu::sim::test
