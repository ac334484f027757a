// Parsing, validation and printing of the machine configuration.
#include "sim/config.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <nlohmann/json.hpp>

#include "isa/error.h"
#include "isa/io_rules.h"

namespace gpnpu::sim {

namespace {

constexpr const char* type_name(ParamType t) {
  return t == ParamType::count ? "count" : t == ParamType::bytes ? "bytes" : "real";
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

}  // namespace

const std::vector<ParamInfo>& param_table() {
  static const std::vector<ParamInfo> t = {
#define PARAM(ident, key, type, def, unit, desc) {key, ParamType::type, #def, unit, desc},
#include "sim/config_params.def"
#undef PARAM
  };
  return t;
}

void Config::set(const std::string& key_in, const std::string& value, const std::string& origin) {
  std::string key = trim(key_in);
#define PARAM(ident, k, type, def, unit, desc)                                        \
  if (key == k) {                                                                     \
    if constexpr (ParamType::type == ParamType::real)                                 \
      ident = parse_real(key, value, origin);                                         \
    else                                                                              \
      ident = parse_unsigned(key, value, ParamType::type == ParamType::bytes, origin); \
    refresh_units();                                                                  \
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

std::vector<std::string> Config::preset_names() {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(preset_dir(), ec))
    if (e.path().extension() == ".cfg") names.push_back(e.path().stem().string());
  std::sort(names.begin(), names.end());
  return names;
}

void Config::load_preset(const std::string& name_or_path) {
  std::string path = name_or_path;
  if (name_or_path.find('/') == std::string::npos && !name_or_path.ends_with(".cfg"))
    path = preset_dir() + "/" + name_or_path + ".cfg";
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    std::string known;
    for (const std::string& n : preset_names()) known += (known.empty() ? "" : ", ") + n;
    fail("unknown preset '{}': no file {} (presets: {})", name_or_path, path, known);
  }
  // A regular text file of at most 1 MiB, ASCII (isa/io_rules.h): a directory or a
  // device is refused, never read as an empty preset or forever.
  const std::string text = io::read_input(path, "preset", io::kMiB);
  io::check_text(text, path, {true, "preset files are ASCII (key = value # comment)"});
  std::istringstream in(text);
  std::string line;
  int no = 0;
  while (std::getline(in, line)) {
    ++no;
    std::string t = trim(line.substr(0, line.find('#')));
    if (t.empty()) continue;
    size_t eq = t.find('=');
    if (eq == std::string::npos) fail("{}:{}: expected 'key = value', got '{}'", path, no, t);
    set(t.substr(0, eq), t.substr(eq + 1), fmt::format("{}:{}", path, no));
  }
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
  for (const ParamInfo& p : param_table()) {
    std::string k = p.key;
    if ((k.starts_with("occ.") || k.starts_with("lat.")) && (std::stoull(get(k)) < 1 || std::stoull(get(k)) > 1000000))
      fail("config key '{}': {} is outside 1..1000000 cycles", k, get(k));
  }
  need(lat_mac16 >= 1 && lat_mac8 >= 1, "lat.mac16", "latencies must be at least 1");
  need(max_cycles >= 1, "max_cycles", "must be at least 1");
  // SystemC time is a 64-bit count of picoseconds, and one process may run many
  // programs back to back (describe): a run of max_cycles must fit four times over.
  const uint64_t period_ps = std::max<uint64_t>(1, uint64_t(std::llround(1000.0 / clock_ghz)));
  if (max_cycles > UINT64_MAX / 4 / period_ps)
    fail("config keys 'clock_ghz' and 'max_cycles': at {} GHz a cycle is {} ps, and max_cycles = {} cycles would pass "
         "SystemC's time range (2^64 ps, 213 days); raise clock_ghz or lower max_cycles (at most {} at this clock)",
         clock_ghz, period_ps, max_cycles, UINT64_MAX / 4 / period_ps);
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
