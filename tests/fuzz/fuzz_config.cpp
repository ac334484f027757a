// libFuzzer target: the machine-config parser (sim::Config) on arbitrary bytes.
// The input is a preset file, optionally followed by a line "--set" and then one
// `key=value` override per line: Config::make(preset, sets) parses the file then
// the overrides, then validates.
// Properties: bad text is a gpnpu::Error; a config that validates prints every key
// with get(), and setting every key to its printed value gives the same config.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_util.h"
#include "isa/error.h"
#include "sim/machine/config.h"

using namespace gpnpu;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  std::string_view file = in;
  std::vector<std::string> sets;
  if (size_t cut = in.find("--set\n"); cut != std::string_view::npos) {
    file = in.substr(0, cut);
    std::string_view rest = in.substr(cut + 6);
    while (!rest.empty()) {
      size_t nl = rest.find('\n');
      sets.emplace_back(rest.substr(0, nl));
      rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
    }
  }
  const std::string& path = fuzz::scratch_path("config", ".cfg");
  fuzz::write_bytes(path, file);
  sim::Config c;
  try {
    c = sim::Config::make(path, sets);
  } catch (const Error&) {
    return 0;
  }
  std::string json = c.to_json();
  sim::Config d;
  d.preset = c.preset;
  for (const sim::ParamInfo& p : sim::param_table()) {
    try {
      d.set(p.key, c.get(p.key), "round trip");
    } catch (const Error& e) {
      std::fprintf(stderr, "%s\n", e.what());
      fuzz::check(false, "set(key, get(key)) accepts the printed value");
    }
  }
  d.validate();
  fuzz::check(d.to_json() == json, "set(key, get(key)) for every key gives the same config");
  return 0;
}
