// The machine options of every command, declared once: --preset NAME|FILE.cfg and
// --set key=value (repeatable), resolved by Config::make (defaults, then the preset,
// then the overrides, then Config::validate). Every command that runs or compiles
// for a machine registers them through add(); checks of these values belong here or
// in Config, never in a command.
#pragma once
#include <string>
#include <vector>

#include "sim/machine/config.h"

namespace CLI {
class App;
}

namespace gpnpu::sim {

struct MachineOptions {
  std::string preset = "qc-u";
  std::vector<std::string> sets;  // "key=value", in command-line order

  // Registers --preset and --set on `cmd`. `set_help` replaces --set's description
  // where the command gives --set another form (the sweep's axes key=v1,v2,...).
  void add(CLI::App* cmd, const std::string& set_help = {}, const std::string& preset_help = {});
  Config config() const { return Config::make(preset, sets); }
};

}  // namespace gpnpu::sim
