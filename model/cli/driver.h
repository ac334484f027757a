// CLI commands built on the compiler and the host runtime: `gpnpu compile`, `gpnpu describe`.
#pragma once
#include <CLI/CLI.hpp>
#include <string>

#include "model/checkpoint/config.h"

namespace gpnpu::sim {
struct Config;
}

namespace gpnpu::model {

void add_compile_commands(CLI::App& app);
void add_describe_command(CLI::App& app);  // model/cli/driver_describe.cpp
void add_chat_command(CLI::App& app);      // model/cli/chat.cpp

// The machine in one line, for reports: the preset, the keys that differ from it and
// the figures that size a design point, e.g. "qc-u with pe_rows=64 pe_cols=64: 64x64
// PEs, 4 MiB OCM, 4 KiB LRM, 4 DMA channels, 32 GB/s DDR, 1.7 GHz".
std::string machine_summary(const sim::Config& cfg);

// The command line as typed (main sets it), for reports.
std::string& command_line();

}  // namespace gpnpu::model
