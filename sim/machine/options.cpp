#include "sim/machine/options.h"

#include <CLI/CLI.hpp>

namespace gpnpu::sim {

void MachineOptions::add(CLI::App* cmd, const std::string& set_help, const std::string& preset_help) {
  cmd->add_option("--preset", preset,
                  preset_help.empty() ? "machine preset (sim/machine/presets/NAME.cfg) or a .cfg path" : preset_help)
      ->capture_default_str();
  cmd->add_option("--set", sets,
                  set_help.empty() ? "override a config key: --set key=value (repeatable); `gpnpu config --list`"
                                   : set_help);
}

}  // namespace gpnpu::sim
