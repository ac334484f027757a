// Running a program on the platform from a config: the entry point the CLI,
// the tests and the benchmarks share.
#pragma once
#include <string>

#include "isa/program.h"
#include "sim/machine/config.h"
#include "sim/stats.h"

namespace gpnpu::sim {

// Configures the platform, runs `program` to halt and returns its stats.
Stats run_program(const isa::Program& program, const Config& cfg, bool timing_only);

// Writes `text` to `path` through a temporary file and a rename, so a reader
// never sees half a file (isa/atomic_file.h).
void write_file_atomic(const std::string& path, const std::string& text);

}  // namespace gpnpu::sim
