// Parsing, validation and printing of the machine configuration.
#include "sim/machine/config.h"

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
#include "sim/machine/dram_spec.h"
#include "sim/machine/config_limits.h"

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

// The allowed values of the keys that have limits: validate() checks them and
// `gpnpu config --list` shows them. A key not here takes any value of its type.
struct Limit {
  const char* key;    // a key, or a prefix ending in '.' (every lat.* / occ.* key)
  double lo, hi;      // inclusive (lo exclusive when lo_open); hi = kNoMax: no upper limit
  bool lo_open;
  uint64_t multiple;  // 0: any
  const char* why;    // appended to the message: the unit or the reason of the limit
};
constexpr double kNoMax = 1e300;
constexpr Limit kLimits[] = {
    {"clock_ghz", 0, 100, true, 0, ""},
    {"pe_rows", 1, 256, false, 0, ""},
    {"pe_cols", 1, 256, false, 0, ""},
    {"lrm_bytes", 64, 1 << 20, false, 64, ""},
    {"ocm_bytes", 4096, 256 << 20, false, 64, " (the OCM window of the memory map)"},
    {"ocm_port_bytes", 1, kNoMax, false, 0, ""},
    {"ocm_dma_bytes", 1, kNoMax, false, 0, ""},
    {"smem_bytes", 64, 1 << 24, false, 4, ""},
    {"dma_channels", 1, 32, false, 0, ""},
    {"dma_queue_depth", 1, 64, false, 0, ""},
    {"ddr_gbps", 0, kNoMax, true, 0, ""},
    {"ddr_burst_bytes", 1, kNoMax, false, 0, ""},
    {"ddr_bytes", 4096, double(0xC0000000ull), false, 0, " (the DDR window of the memory map)"},
    {"quantum_cycles", 1, kNoMax, false, 0, ""},
    {"lat.", 1, 1000000, false, 0, " cycles"},
    {"occ.", 1, 1000000, false, 0, " cycles"},
};

bool limit_covers(const Limit& l, std::string_view key) {
  std::string_view k = l.key;
  return k.ends_with('.') ? key.starts_with(k) : key == k;
}

// 4096 -> "4KiB", 1048576 -> "1MiB", 64 -> "64" (for byte keys), else the number.
std::string limit_number(double v, bool bytes) {
  if (bytes)
    for (auto [suffix, m] : {std::pair{"GiB", 1ull << 30}, {"MiB", 1ull << 20}, {"KiB", 1ull << 10}})
      if (v >= double(m) && std::fmod(v, double(m)) == 0) return fmt::format("{}{}", uint64_t(v / double(m)), suffix);
  return fmt::format("{}", v);
}

}  // namespace

std::string param_allowed(const std::string& key) {
  const ParamInfo* info = nullptr;
  for (const ParamInfo& p : param_table())
    if (key == p.key) info = &p;
  if (!info) return "";
  for (const Limit& l : kLimits) {
    if (!limit_covers(l, key)) continue;
    const bool bytes = info->type == ParamType::bytes;
    std::string r = l.hi == kNoMax ? fmt::format("{} {}", l.lo_open ? ">" : ">=", limit_number(l.lo, bytes))
                    : l.lo_open    ? fmt::format("({}, {}]", limit_number(l.lo, bytes), limit_number(l.hi, bytes))
                                   : fmt::format("{}..{}", limit_number(l.lo, bytes), limit_number(l.hi, bytes));
    return l.multiple > 1 ? fmt::format("{}, x{}", r, l.multiple) : r;
  }
  return info->type == ParamType::real ? "any" : ">= 0";
}

const std::vector<ParamInfo>& param_table() {
  static const std::vector<ParamInfo> t = {
#define PARAM(ident, key, type, def, unit, desc) {key, ParamType::type, default_text<ParamType::type>(#def, def), unit, desc},
#include "sim/machine/config_params.def"
#undef PARAM
  };
  return t;
}

namespace {
// Reads a `key = value` file (a machine or a DRAM preset) into `c`; a DRAM preset
// (only_prefix "dram.") sets nothing else.
void load_cfg_file(Config& c, const std::string& path, const std::string& only_prefix = "") {
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
#include "sim/machine/config_params.def"
#undef PARAM
  std::string best;
  size_t best_d = SIZE_MAX;
  for (const ParamInfo& p : param_table()) {
    size_t d = distance(key, p.key);
    if (d < best_d) { best_d = d; best = p.key; }
  }
  std::string hint = best_d <= 3 ? fmt::format(" (did you mean '{}'?)", best) : "";
  // A key of a family (energy.*, power.*, lat.*, occ.*) with no close match: name the family's keys.
  if (size_t dot = key.find('.'); hint.empty() && dot != std::string::npos && dot > 0) {
    std::string family;
    for (const ParamInfo& p : param_table())
      if (std::string_view(p.key).starts_with(key.substr(0, dot + 1))) family += (family.empty() ? "" : ", ") + std::string(p.key);
    if (!family.empty()) hint = fmt::format(" (the {}* keys are {})", key.substr(0, dot + 1), family);
  }
  fail("unknown config key '{}' ({}){}; `gpnpu config --list` prints every key", key, origin, hint);
}

std::string Config::preset_dir() {
  if (const char* env = std::getenv("GPNPU_PRESET_DIR")) return env;
  return std::string(GPNPU_SOURCE_DIR) + "/sim/machine/presets";
}

std::vector<std::string> Config::preset_names() { return cfg_names(preset_dir()); }
std::vector<std::string> Config::dram_preset_names() { return cfg_names(preset_dir() + "/dram"); }

void Config::load_dram_preset(const std::string& name_or_path, const std::string& origin) {
  const std::string path = preset_path(preset_dir() + "/dram", name_or_path);
  if (std::error_code ec; !std::filesystem::exists(path, ec))
    fail("config key 'dram' ({}): unknown DRAM preset '{}': no file {} (DRAM presets: {})", origin, name_or_path, path,
         join(dram_preset_names()));
  load_cfg_file(*this, path, "dram.");
  dram = name_or_path;
}

void Config::load_preset(const std::string& name_or_path) {
  const std::string path = preset_path(preset_dir(), name_or_path);
  if (std::error_code ec; !std::filesystem::exists(path, ec))
    fail("unknown preset '{}': no file {} (presets: {})", name_or_path, path, join(preset_names()));
  load_cfg_file(*this, path);
  preset = name_or_path;
}

void Config::refresh_units() {
#define UNIT(n, resource, port, flags, desc) \
  lat_[int(isa::Unit::n)] = uint32_t(lat_##n);   \
  occ_[int(isa::Unit::n)] = uint32_t(occ_##n);
#include "isa/unit_table.def"
#undef UNIT
}

void Config::validate() const {
  for (const Limit& l : kLimits)
    for (const ParamInfo& p : param_table()) {
      if (!limit_covers(l, p.key)) continue;
      const double v = std::stod(get(p.key));
      const bool bytes = p.type == ParamType::bytes;
      const bool ok = (l.lo_open ? v > l.lo : v >= l.lo) && v <= l.hi &&
                      (l.multiple <= 1 || std::fmod(v, double(l.multiple)) == 0);
      if (ok) continue;
      const std::string lo = limit_number(l.lo, bytes), hi = limit_number(l.hi, bytes), val = get(p.key);
      if (l.hi == kNoMax) fail("config key '{}': {}", p.key, l.lo_open ? "must be positive" : fmt::format("must be at least {}", lo));
      if (l.lo_open) fail("config key '{}': {} {} is outside ({}, {}]{}", p.key, val, p.unit, lo, hi, l.why);
      if (l.multiple > 1)
        fail("config key '{}': {} must be a multiple of {} between {} and {}{}", p.key, val, l.multiple, lo, hi, l.why);
      if (bytes) fail("config key '{}': {} must be between {} and {}{}", p.key, val, lo, hi, l.why);
      fail("config key '{}': {} is outside {}..{}{}", p.key, val, lo, hi, l.why);
    }
  auto need = [](bool ok, const char* key, const std::string& why) {
    if (!ok) fail("config key '{}': {}", key, why);
  };
  need(ddr_model == "ideal" || ddr_model == "dram", "ddr_model", fmt::format("'{}' is not ideal or dram", ddr_model));
  need(fp16_overflow == "inf" || fp16_overflow == "saturate", "fp16_overflow",
       fmt::format("'{}' is not one of inf,saturate", fp16_overflow));
  if (dram_model()) DramSpec::from(*this);  // throws on DRAM settings that contradict each other
  need(max_cycles >= 1, "max_cycles", "must be at least 1");
  // SystemC time is a 64-bit count of picoseconds, and one process may run many
  // programs back to back (describe): a run of max_cycles must fit four times over.
  const uint64_t period_ps = std::max<uint64_t>(1, uint64_t(std::llround(1000.0 / clock_ghz)));
  if (max_cycles > UINT64_MAX / 4 / period_ps)
    fail("config keys 'clock_ghz' and 'max_cycles': at {} GHz a cycle is {} ps, and max_cycles = {} cycles would pass "
         "SystemC's time range (2^64 ps, 213 days); raise clock_ghz or lower max_cycles (at most {} at this clock)",
         clock_ghz, period_ps, max_cycles, UINT64_MAX / 4 / period_ps);
  need(power_window_cycles >= 100, "power_window_cycles", fmt::format("{} is below 100 cycles", power_window_cycles));
  for (const ParamInfo& p : param_table()) {
    std::string k = p.key;
    if (!k.starts_with("energy.") && !k.starts_with("power.")) continue;
    const double v = std::stod(get(k));
    if (!(v >= 0))
      fail("config key '{}': {} {} is negative; energies and static powers must be >= 0 (0 leaves that term out)", k,
           get(k), p.unit);
    if (v > 1e9) fail("config key '{}': {} {} is above 1e9 {} (a typo?)", k, get(k), p.unit, p.unit);
  }
}

std::string Config::name() const {
  Config base;
  try {
    base = make(preset, {});
  } catch (const Error&) {
    // a preset given by a path that is gone: compare with the defaults
  }
  std::string changed;
  for (const ParamInfo& p : param_table())
    if (get(p.key) != base.get(p.key)) changed += fmt::format("{}{}={}", changed.empty() ? " with " : " ", p.key, get(p.key));
  return preset + changed;
}

std::string Config::summary() const {
  auto size = [](uint64_t b) {
    if (b % (1ull << 20) == 0) return fmt::format("{} MiB", b >> 20);
    if (b % (1ull << 10) == 0) return fmt::format("{} KiB", b >> 10);
    return fmt::format("{} B", b);
  };
  return fmt::format("{}: {}x{} PEs, {} OCM, {} LRM, {} DMA channels, {} GB/s DDR, {} GHz", name(), pe_rows, pe_cols,
                     size(ocm_bytes), size(lrm_bytes), dma_channels, ddr_gbps, clock_ghz);
}

double Config::ddr_bytes_per_cycle() const {
  return dram_model() ? DramSpec::from(*this).peak_bytes_per_cycle() : ddr_gbps / clock_ghz;
}

std::string Config::get(const std::string& key) const {
#define PARAM(ident, k, type, def, unit, desc) \
  if (key == k) return fmt::format("{}", ident);
#include "sim/machine/config_params.def"
#undef PARAM
  fail("unknown config key '{}'", key);
}

std::string Config::to_json() const {
  nlohmann::ordered_json j;
  j["preset"] = preset;
#define PARAM(ident, k, type, def, unit, desc) j[k] = ident;
#include "sim/machine/config_params.def"
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
