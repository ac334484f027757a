// CLI commands built on the compiler and the host runtime: `gpnpu compile`, `gpnpu describe`.
#pragma once
#include <CLI/CLI.hpp>
#include <string>

#include "model/checkpoint/config.h"

namespace gpnpu::model {

void add_compile_commands(CLI::App& app);
void add_describe_command(CLI::App& app);  // model/cli/driver_describe.cpp
void add_chat_command(CLI::App& app);      // model/cli/chat.cpp

// The command line as typed (main sets it), for reports.
std::string& command_line();

}  // namespace gpnpu::model
