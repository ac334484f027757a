// The machine configuration: every parameter of sim/config_params.def as a typed
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

enum class ParamType { count, bytes, real, choice };  // choice: a word listed in the unit, '|'-separated

struct ParamInfo {
  const char* key;
  ParamType type;
  const char* default_text;
  const char* unit;
  const char* description;
};
const std::vector<ParamInfo>& param_table();

struct Config {
#define PARAM(ident, key, type, def, unit, desc) GPNPU_PARAM_TYPE_##type ident = GPNPU_PARAM_INIT_##type(def);
#define GPNPU_PARAM_TYPE_count uint64_t
#define GPNPU_PARAM_TYPE_bytes uint64_t
#define GPNPU_PARAM_TYPE_real double
#define GPNPU_PARAM_TYPE_choice std::string
#define GPNPU_PARAM_INIT_count(d) d
#define GPNPU_PARAM_INIT_bytes(d) d
#define GPNPU_PARAM_INIT_real(d) d
#define GPNPU_PARAM_INIT_choice(d) #d
#include "sim/config_params.def"
#undef PARAM

  Config() { refresh_units(); }

  std::string preset = "qc-u";  // where the values came from, for reports

  // Apply "key=value"; `origin` says where it came from (for messages).
  void set(const std::string& key, const std::string& value, const std::string& origin = "--set");
  // Load a preset by name (sim/presets/NAME.cfg) or by path to a .cfg file.
  void load_preset(const std::string& name_or_path);
  void validate() const;

  // Latency and occupancy of a unit class, in cycles.
  uint32_t lat(isa::Unit u) const { return lat_[int(u)]; }
  uint32_t occ(isa::Unit u) const { return occ_[int(u)]; }
  double ddr_bytes_per_cycle() const { return ddr_gbps / clock_ghz; }
  uint32_t npe() const { return uint32_t(pe_rows * pe_cols); }

  // Value of a key as text (for reports and `gpnpu config`).
  std::string get(const std::string& key) const;
  std::string to_json() const;  // every key, resolved, plus "preset"

  // Builds a config: qc-u defaults, then `preset` (if not empty), then `sets`.
  static Config make(const std::string& preset, const std::vector<std::string>& sets);
  static std::vector<std::string> preset_names();
  static std::string preset_dir();

 private:
  void refresh_units();
  std::array<uint32_t, isa::kNumUnits> lat_{}, occ_{};
};

}  // namespace gpnpu::sim
