// Writes docs/config.md, the machine configuration reference, from the parameter
// table (config_params.def) and the preset files (presets/*.cfg).
// Usage: gen_config_doc OUT.md   (run by the build; never edit docs/config.md by hand)
#include <fmt/format.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "sim/machine/config.h"

using namespace gpnpu::sim;

namespace {

const char* const kIntro = R"DOC(Every machine parameter is declared once, in `sim/machine/config_params.def`, with its
type, default, unit and a one-line description. `sim::Config` turns each row into
a typed field; `gpnpu config --list` prints the table below. This page is generated from the
table by `gen_config_doc` (sim/machine/gen_config_doc.cpp) on every build that changes
the table or a preset: edit those, never this page.

## How a configuration is built

A config is resolved in three layers, each overriding the one before:

1. **Defaults**: the values in `sim/machine/config_params.def` (they are the qc-u machine).
2. **Preset** (`--preset NAME`, default `qc-u`): the file `sim/machine/presets/NAME.cfg`,
   or any path to a `.cfg` file (a name containing `/` or ending in `.cfg` is a
   path). The preset directory can be moved with the environment variable
   `GPNPU_PRESET_DIR`. A preset file holds one `key = value` per line; `#` starts
   a comment; blank lines are ignored.
3. **Overrides** (`--set key=value`, repeatable): applied in command-line order
   after the preset.

The result is validated as a whole (`Config::validate`), then used. Every run that
writes `--stats-json` puts the resolved config, every key plus `"preset"`, under
`"config"` in the same file, so a result always carries the machine it ran on.
`gpnpu config [--preset P] [--set k=v ...]` prints the resolved config as JSON.

)DOC";

const char* const kMiddle = R"DOC(Examples:

```
gpnpu run examples/asm/ddr_stream.s --set ddr_gbps=64
gpnpu run prog.s --preset mini --set ocm_bytes=1MiB --set lat.sfu=24
gpnpu config --preset my_machine.cfg
```

## Value syntax

| type | accepts | examples |
|---|---|---|
| `count` | a non-negative integer; `0x` prefix for hex (C `strtoull` base 0, so a leading `0` means octal) | `32`, `0x20` |
| `bytes` | a count, optionally with a suffix `KiB`, `MiB`, `GiB` (powers of 2) or `KB`, `MB`, `GB` (powers of 10) | `4096`, `64KiB`, `4MiB`, `1GiB` |
| `real` | a finite decimal number | `1.7`, `32`, `1e9` |

## Errors

Each error is one line naming the key, where the value came from (`--set`, or
`FILE:LINE` of a preset) and the accepted form; the CLI prints it after `error: `
and exits with code 1 (tests/sim/test_errors.cpp holds every one):

```
error: unknown config key 'ddr_gbs' (--set) (did you mean 'ddr_gbps'?); `gpnpu config --list` prints every key
error: config key 'ocm_bytes' (--set): '4XB' is not a byte size (examples: 4096, 64KiB, 4MiB, 1GiB)
error: config key 'clock_ghz' (--set): 'fast' is not a number (example: 1.7)
error: config key 'pe_rows': 0 is outside 1..256
error: unknown preset 'qc-x': no file .../sim/machine/presets/qc-x.cfg (presets: mini, qc-u)
```

Validation limits (from `Config::validate`): `clock_ghz` in (0, 100]; `pe_rows`,
`pe_cols` 1..256; `lrm_bytes` a multiple of 64 in 64..1 MiB; `ocm_bytes` a
multiple of 64 in 4 KiB..256 MiB (the OCM window of the memory map); `smem_bytes`
a multiple of 4 in 64..16 MiB; `dma_channels` 1..32; `dma_queue_depth` 1..64;
`ddr_gbps` > 0; `ddr_bytes` 4 KiB..3 GiB (the DDR window); every `lat.*` and
`occ.*` 1..1000000; `quantum_cycles` >= 1.

## What the timing keys mean

`lat.U` and `occ.U` belong to the unit classes of the instruction table
(`isa/isa_table.def`, column `unit`; `docs/isa.md` lists each instruction's
unit). Latency is the cycles from an instruction's issue until a dependent
instruction may issue; occupancy is the cycles until the next instruction on the
same unit (or a unit sharing its hardware) may issue. See docs/architecture.md,
"Timing model", for the exact rules, the shared MAC array and OCM port, and how
the OCM forms add `bytes / ocm_port_bytes`. `max_cycles` and `quantum_cycles`
belong to the simulator, not the machine: they never change a cycle count of a
run that completes (a test runs with `quantum_cycles=7` and compares).

)DOC";

// A preset's description: the first comment paragraph of its file, without "NAME: ".
std::string preset_summary(const std::string& name) {
  std::ifstream in(Config::preset_dir() + "/" + name + ".cfg");
  std::string line, text;
  while (std::getline(in, line) && line.starts_with("#")) {
    std::string t = line.substr(line.find_first_not_of("# ") == std::string::npos ? line.size() : line.find_first_not_of("# "));
    text += (text.empty() ? "" : " ") + t;
  }
  if (text.starts_with(name + ": ")) text = text.substr(name.size() + 2);
  return text;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: gen_config_doc OUT.md\n");
    return 2;
  }
  std::string out;
  out += "<!-- Generated from sim/machine/config_params.def and sim/machine/presets/ by gen_config_doc (built and run by `cmake --build build`). Do not edit. -->\n";
  out += "# Machine configuration\n\n";
  out += kIntro;
  out += "Presets shipped (sim/machine/presets/):\n\n| preset | what it is |\n|---|---|\n";
  for (const std::string& name : Config::preset_names()) out += fmt::format("| `{}` | {} |\n", name, preset_summary(name));
  out += "\n";
  out += kMiddle;
  out += "## Every key\n\n| key | type | default (qc-u) | unit | description |\n|---|---|---|---|---|\n";
  for (const ParamInfo& p : param_table())
    out += fmt::format("| `{}` | {} | {} | {} | {} |\n", p.key,
                       p.type == ParamType::count ? "count" : p.type == ParamType::bytes ? "bytes" : "real",
                       p.default_text, p.unit, p.description);
  std::ofstream f(argv[1], std::ios::binary);
  f << out;
  if (!f.flush()) {
    std::fprintf(stderr, "gen_config_doc: cannot write %s\n", argv[1]);
    return 1;
  }
  return 0;
}
