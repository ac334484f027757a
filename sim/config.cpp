// Parsing, validation and printing of the machine configuration.
#include "sim/config.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "isa/error.h"
#include "sim/dram.h"

namespace gpnpu::sim {

namespace {

constexpr const char* type_name(ParamType t) {
  return t == ParamType::count ? "count" : t == ParamType::bytes ? "bytes" : t == ParamType::real ? "real" : "text";
}

// Edit distance, for "did you mean" hints.
size_t distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1])});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r"), e = s.find_last_not_of(" \t\r");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

uint64_t parse_unsigned(const std::string& key, const std::string& text, bool bytes, const std::string& origin) {
  std::string t = trim(text);
  static const std::pair<const char*, uint64_t> kSuffixes[] = {
      {"KiB", 1ull << 10}, {"MiB", 1ull << 20}, {"GiB", 1ull << 30},
      {"KB", 1000}, {"MB", 1000000}, {"GB", 1000000000}};
  uint64_t mult = 1;
  if (bytes)
    for (auto [suf, m] : kSuffixes)
      if (t.size() > std::strlen(suf) && t.ends_with(suf)) {
        mult = m;
        t = trim(t.substr(0, t.size() - std::strlen(suf)));
        break;
      }
  errno = 0;
  char* end = nullptr;
  if (t.empty() || t[0] == '-') end = nullptr;
  unsigned long long v = t.empty() || t[0] == '-' ? 0 : std::strtoull(t.c_str(), &end, 0);
  if (!end || *end || errno)
    fail("config key '{}' ({}): '{}' is not {}", key, origin, text,
         bytes ? "a byte size (examples: 4096, 64KiB, 4MiB, 1GiB)" : "a non-negative integer");
  if (v > UINT64_MAX / mult) fail("config key '{}' ({}): '{}' is too large", key, origin, text);
  return v * mult;
}

double parse_real(const std::string& key, const std::string& text, const std::string& origin) {
  std::string t = trim(text);
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(t.c_str(), &end);
  if (t.empty() || *end || errno || !std::isfinite(v))
    fail("config key '{}' ({}): '{}' is not a number (example: 1.7)", key, origin, text);
  return v;
}

// A text default is a string literal: its default_text drops the quotes.
template <ParamType T, typename V>
const char* default_text(const char* stringified, V value) {
  if constexpr (T == ParamType::text)
    return value;
  else
    return stringified;
}

std::string text_value(const std::string& key, const std::string& text, const std::string& origin) {
  std::string t = trim(text);
  if (t.empty() || t.find_first_of(" \t") != std::string::npos)
    fail("config key '{}' ({}): '{}' is not a single word", key, origin, text);
  return t;
}

template <ParamType T, typename V>
void parse_into(V& out, const std::string& key, const std::string& value, const std::string& origin) {
  if constexpr (T == ParamType::real)
    out = parse_real(key, value, origin);
  else if constexpr (T == ParamType::text)
    out = text_value(key, value, origin);
  else
    out = parse_unsigned(key, value, T == ParamType::bytes, origin);
}

}  // namespace

const std::vector<ParamInfo>& param_table() {
  static const std::vector<ParamInfo> t = {
#define PARAM(ident, key, type, def, unit, desc) {key, ParamType::type, default_text<ParamType::type>(#def, def), unit, desc},
#include "sim/config_params.def"
#undef PARAM
  };
  return t;
}

namespace {
// Reads a `key = value` file (a machine or a DRAM preset) into `c`; a DRAM preset
// (only_prefix "dram.") sets nothing else.
void load_cfg_file(Config& c, const std::string& path, const std::string& only_prefix = "") {
  std::ifstream in(path);
  std::string line;
  int no = 0;
  while (std::getline(in, line)) {
    ++no;
    std::string t = trim(line.substr(0, line.find('#')));
    if (t.empty()) continue;
    size_t eq = t.find('=');
    if (eq == std::string::npos) fail("{}:{}: expected 'key = value', got '{}'", path, no, t);
    const std::string key = trim(t.substr(0, eq));
    if (!key.starts_with(only_prefix))
      fail("{}:{}: a DRAM preset sets only {}* keys, not '{}'", path, no, only_prefix, key);
    c.set(key, t.substr(eq + 1), fmt::format("{}:{}", path, no));
  }
}

// A preset given by name (DIR/NAME.cfg) or by path (containing '/' or ending in .cfg).
std::string preset_path(const std::string& dir, const std::string& name_or_path) {
  if (name_or_path.find('/') == std::string::npos && !name_or_path.ends_with(".cfg")) return dir + "/" + name_or_path + ".cfg";
  return name_or_path;
}

std::vector<std::string> cfg_names(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec))
    if (e.path().extension() == ".cfg") names.push_back(e.path().stem().string());
  std::sort(names.begin(), names.end());
  return names;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& n : v) s += (s.empty() ? "" : ", ") + n;
  return s;
}
}  // namespace

void Config::set(const std::string& key_in, const std::string& value, const std::string& origin) {
  std::string key = trim(key_in);
#define PARAM(ident, k, type, def, unit, desc)                                        \
  if (key == k) {                                                                     \
    parse_into<ParamType::type>(ident, key, value, origin);                           \
    refresh_units();                                                                  \
    if (key == "dram") load_dram_preset(dram, origin);                                \
    return;                                                                           \
  }
#include "sim/config_params.def"
#undef PARAM
  std::string best;
  size_t best_d = SIZE_MAX;
  for (const ParamInfo& p : param_table()) {
    size_t d = distance(key, p.key);
    if (d < best_d) { best_d = d; best = p.key; }
  }
  std::string hint = best_d <= 3 ? fmt::format(" (did you mean '{}'?)", best) : "";
  fail("unknown config key '{}' ({}){}; `gpnpu config --list` prints every key", key, origin, hint);
}

std::string Config::preset_dir() {
  if (const char* env = std::getenv("GPNPU_PRESET_DIR")) return env;
  return std::string(GPNPU_SOURCE_DIR) + "/sim/presets";
}

std::vector<std::string> Config::preset_names() { return cfg_names(preset_dir()); }
std::vector<std::string> Config::dram_preset_names() { return cfg_names(preset_dir() + "/dram"); }

void Config::load_dram_preset(const std::string& name_or_path, const std::string& origin) {
  const std::string path = preset_path(preset_dir() + "/dram", name_or_path);
  if (!std::ifstream(path))
    fail("config key 'dram' ({}): unknown DRAM preset '{}': no file {} (DRAM presets: {})", origin, name_or_path, path,
         join(dram_preset_names()));
  load_cfg_file(*this, path, "dram.");
  dram = name_or_path;
}

void Config::load_preset(const std::string& name_or_path) {
  const std::string path = preset_path(preset_dir(), name_or_path);
  if (!std::ifstream(path)) fail("unknown preset '{}': no file {} (presets: {})", name_or_path, path, join(preset_names()));
  load_cfg_file(*this, path);
  preset = name_or_path;
}

void Config::refresh_units() {
#define GPNPU_UNIT_ASSIGN(n) lat_[int(isa::Unit::n)] = uint32_t(lat_##n); occ_[int(isa::Unit::n)] = uint32_t(occ_##n);
  GPNPU_UNITS(GPNPU_UNIT_ASSIGN)
#undef GPNPU_UNIT_ASSIGN
}

void Config::validate() const {
  auto need = [](bool ok, const char* key, const std::string& why) {
    if (!ok) fail("config key '{}': {}", key, why);
  };
  need(clock_ghz > 0 && clock_ghz <= 100, "clock_ghz", fmt::format("{} GHz is outside (0, 100]", clock_ghz));
  need(pe_rows >= 1 && pe_rows <= 256, "pe_rows", fmt::format("{} is outside 1..256", pe_rows));
  need(pe_cols >= 1 && pe_cols <= 256, "pe_cols", fmt::format("{} is outside 1..256", pe_cols));
  need(lrm_bytes >= 64 && lrm_bytes % 64 == 0 && lrm_bytes <= (1u << 20), "lrm_bytes",
       fmt::format("{} must be a multiple of 64 between 64 and 1MiB", lrm_bytes));
  need(ocm_bytes >= 4096 && ocm_bytes % 64 == 0 && ocm_bytes <= (256ull << 20), "ocm_bytes",
       fmt::format("{} must be a multiple of 64 between 4KiB and 256MiB (the OCM window of the memory map)", ocm_bytes));
  need(ocm_port_bytes >= 1, "ocm_port_bytes", "must be at least 1");
  need(ocm_dma_bytes >= 1, "ocm_dma_bytes", "must be at least 1");
  need(smem_bytes >= 64 && smem_bytes % 4 == 0 && smem_bytes <= (1u << 24), "smem_bytes",
       fmt::format("{} must be a multiple of 4 between 64 and 16MiB", smem_bytes));
  need(dma_channels >= 1 && dma_channels <= 32, "dma_channels", fmt::format("{} is outside 1..32", dma_channels));
  need(dma_queue_depth >= 1 && dma_queue_depth <= 64, "dma_queue_depth", fmt::format("{} is outside 1..64", dma_queue_depth));
  need(ddr_gbps > 0, "ddr_gbps", "must be positive");
  need(ddr_burst_bytes >= 1, "ddr_burst_bytes", "must be at least 1");
  need(ddr_bytes >= 4096 && ddr_bytes <= 0xC0000000ull, "ddr_bytes",
       fmt::format("{} must be between 4KiB and 3GiB (the DDR window of the memory map)", ddr_bytes));
  need(quantum_cycles >= 1, "quantum_cycles", "must be at least 1");
  need(ddr_model == "ideal" || ddr_model == "dram", "ddr_model", fmt::format("'{}' is not ideal or dram", ddr_model));
  if (dram_model()) DramSpec::from(*this);  // throws on DRAM settings that contradict each other
  for (const ParamInfo& p : param_table()) {
    std::string k = p.key;
    if ((k.starts_with("occ.") || k.starts_with("lat.")) && (std::stoull(get(k)) < 1 || std::stoull(get(k)) > 1000000))
      fail("config key '{}': {} is outside 1..1000000 cycles", k, get(k));
  }
  need(lat_mac16 >= 1 && lat_mac8 >= 1, "lat.mac16", "latencies must be at least 1");
}

double Config::ddr_bytes_per_cycle() const {
  return dram_model() ? DramSpec::from(*this).peak_bytes_per_cycle() : ddr_gbps / clock_ghz;
}

std::string Config::get(const std::string& key) const {
#define PARAM(ident, k, type, def, unit, desc) \
  if (key == k) return fmt::format("{}", ident);
#include "sim/config_params.def"
#undef PARAM
  fail("unknown config key '{}'", key);
}

std::string Config::to_json() const {
  nlohmann::ordered_json j;
  j["preset"] = preset;
#define PARAM(ident, k, type, def, unit, desc) j[k] = ident;
#include "sim/config_params.def"
#undef PARAM
  return j.dump(2);
}

Config Config::make(const std::string& preset_name, const std::vector<std::string>& sets) {
  Config c;
  if (!preset_name.empty()) c.load_preset(preset_name);
  for (const std::string& s : sets) {
    size_t eq = s.find('=');
    if (eq == std::string::npos) fail("--set '{}': expected key=value (example: --set ocm_bytes=8MiB)", s);
    c.set(s.substr(0, eq), s.substr(eq + 1), "--set");
  }
  c.validate();
  return c;
}

}  // namespace gpnpu::sim
