// Helpers for the trace tests: temporary files, running the CLI, the kernel
// programs of the kernel tests (built the way tests/kernels/ builds them) with the
// OCM regions their hosts load.
#pragma once
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sys/wait.h>
#include <sstream>
#include <string>
#include <vector>

#include "isa/program.h"
#include "sim/machine/config.h"
#include "sim/platform.h"

namespace gpnpu::traces::test {

inline std::string temp_path(const std::string& name) {
  std::filesystem::path d = std::filesystem::temp_directory_path() / "gpnpu_traces_test";
  std::filesystem::create_directories(d);
  return (d / name).string();
}

inline std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

inline void write_text(const std::string& path, const std::string& text) {
  std::ofstream o(path);
  o << text;
}

// Runs the gpnpu binary; returns its exit code, stdout+stderr in `out`.
inline int run_cli(const std::string& args, std::string& out) {
  std::string cmd = std::string(GPNPU_BINARY) + " " + args + " 2>&1";
  FILE* f = popen(cmd.c_str(), "r");
  if (!f) return -1;
  char buf[4096];
  out.clear();
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  int rc = pclose(f);
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

// A kernel program as the kernel tests build it, with the host's loading step.
struct KernelCase {
  std::string name;
  sim::Config cfg;
  isa::Program program;
  std::vector<std::pair<uint32_t, uint32_t>> host_ocm;  // OCM ranges the host writes
  std::function<void(sim::Platform&)> load;             // writes the inputs after configure()
};

KernelCase gemv_case(uint32_t n = 37, uint32_t k = 384, const char* preset = "mini");
KernelCase embed_case();
KernelCase norm_case(bool split);
KernelCase elementwise_case();

}  // namespace gpnpu::traces::test
