// The machine configuration: every parameter of sim/machine/config_params.def as a typed
// field, loaded from defaults, then a preset file, then `--set key=value` overrides.
// Contract: a Config is always valid (checked by validate()); errors name the key,
// the value, the accepted form and where the value came from.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "isa/isa.h"

namespace gpnpu::sim {

enum class ParamType { count, bytes, real, text };

struct ParamInfo {
  const char* key;
  ParamType type;
  const char* default_text;
  const char* unit;
  const char* description;
};
const std::vector<ParamInfo>& param_table();

struct Config {
#define PARAM(ident, key, type, def, unit, desc) GPNPU_PARAM_TYPE_##type ident = def;
#define GPNPU_PARAM_TYPE_count uint64_t
#define GPNPU_PARAM_TYPE_bytes uint64_t
#define GPNPU_PARAM_TYPE_real double
#define GPNPU_PARAM_TYPE_text std::string
#include "sim/machine/config_params.def"
#undef PARAM

  Config() { refresh_units(); }

  std::string preset = "qc-u";  // where the values came from, for reports

  // Apply "key=value"; `origin` says where it came from (for messages).
  void set(const std::string& key, const std::string& value, const std::string& origin = "--set");
  // Load a preset by name (sim/machine/presets/NAME.cfg) or by path to a .cfg file.
  void load_preset(const std::string& name_or_path);
  // Load a DRAM preset (sim/machine/presets/dram/NAME.cfg or a path): what `dram = NAME` does.
  void load_dram_preset(const std::string& name_or_path, const std::string& origin);
  void validate() const;

  // Latency and occupancy of a unit class, in cycles.
  uint32_t lat(isa::Unit u) const { return lat_[int(u)]; }
  uint32_t occ(isa::Unit u) const { return occ_[int(u)]; }
  // Peak DDR bytes per core cycle: ddr_gbps for the ideal port, the DRAM preset's
  // peak (channels x width x data rate) for ddr_model = dram.
  double ddr_bytes_per_cycle() const;
  bool dram_model() const { return ddr_model == "dram"; }
  uint32_t npe() const { return uint32_t(pe_rows * pe_cols); }
  // Peak MACs per cycle of the whole array: 16 lanes per PE, one MAC per lane every
  // occ.mac16 (fp16) or occ.mac8 (int8) cycles.
  double mac_peak(bool fp16 = true) const { return double(npe()) * 16.0 / occ(fp16 ? isa::Unit::mac16 : isa::Unit::mac8); }

  // Value of a key as text (for reports and `gpnpu config`).
  std::string get(const std::string& key) const;
  std::string to_json() const;  // every key, resolved, plus "preset"
  // The machine in words, for reports: the preset and the keys that differ from it,
  // e.g. "qc-u with pe_rows=64 pe_cols=64"; summary() adds the figures that size a
  // design point: "...: 64x64 PEs, 4 MiB OCM, 4 KiB LRM, 4 DMA channels, 32 GB/s DDR, 1.7 GHz".
  std::string name() const;
  std::string summary() const;

  // Builds a config: qc-u defaults, then `preset` (if not empty), then `sets`.
  static Config make(const std::string& preset, const std::vector<std::string>& sets);
  static std::vector<std::string> preset_names();
  static std::string preset_dir();
  static std::vector<std::string> dram_preset_names();

 private:
  void refresh_units();
  std::array<uint32_t, isa::kNumUnits> lat_{}, occ_{};
};

}  // namespace gpnpu::sim
