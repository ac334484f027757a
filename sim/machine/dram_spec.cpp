#include "sim/machine/dram_spec.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>

#include "isa/error.h"
#include "sim/machine/config.h"

namespace gpnpu::sim {

namespace {

bool pow2(uint64_t v) { return v && (v & (v - 1)) == 0; }
uint32_t log2u(uint64_t v) { return uint32_t(std::bit_width(v) - 1); }

constexpr const char* kFieldNames[DramSpec::kFields] = {"Ch", "Ra", "Bg", "Ba", "Ro", "Co"};

}  // namespace

DramSpec DramSpec::from(const Config& cfg) {
  auto need = [](bool ok, const char* key, const std::string& why) {
    if (!ok) fail("config key '{}': {}", key, why);
  };
  DramSpec s;
  s.name = cfg.dram;
  s.clock = ClockRatio(cfg.clock_ghz, cfg.dram_clock_mhz);
  s.clock_mhz = cfg.dram_clock_mhz;
  need(cfg.dram_clock_mhz > 0, "dram.clock_mhz", "must be positive");
  need(cfg.dram_channels >= 1 && cfg.dram_channels <= 64 && pow2(cfg.dram_channels), "dram.channels",
       fmt::format("{} is not a power of two in 1..64", cfg.dram_channels));
  need(cfg.dram_bus_bits % cfg.dram_channels == 0 && (cfg.dram_bus_bits / cfg.dram_channels) % 8 == 0,
       "dram.channels",
       fmt::format("{} channels do not divide the {}-bit bus (dram.bus_bits) into whole bytes; use a channel count "
                   "that divides dram.bus_bits / 8",
                   cfg.dram_channels, cfg.dram_bus_bits));
  for (auto [key, v] : {std::pair{"dram.ranks", cfg.dram_ranks}, {"dram.bankgroups", cfg.dram_bankgroups},
                        {"dram.banks", cfg.dram_banks}, {"dram.rows", cfg.dram_rows}})
    need(pow2(v) && v <= (1u << 24), key, fmt::format("{} is not a power of two", v));
  need(cfg.dram_bankgroups * cfg.dram_banks <= 64, "dram.banks",
       fmt::format("{} bank groups x {} banks is more than 64 banks per rank", cfg.dram_bankgroups, cfg.dram_banks));
  need(cfg.dram_BL >= 1 && cfg.dram_beats_per_clock >= 1 && cfg.dram_BL % cfg.dram_beats_per_clock == 0, "dram.BL",
       fmt::format("BL = {} is not a multiple of dram.beats_per_clock = {}", cfg.dram_BL, cfg.dram_beats_per_clock));
  s.channels = uint32_t(cfg.dram_channels);
  s.ranks = uint32_t(cfg.dram_ranks);
  s.bankgroups = uint32_t(cfg.dram_bankgroups);
  s.banks = uint32_t(cfg.dram_banks);
  s.rows = cfg.dram_rows;
  s.row_bytes = cfg.dram_row_bytes;
  s.burst_bytes = cfg.dram_BL * (cfg.dram_bus_bits / cfg.dram_channels / 8);
  need(pow2(s.burst_bytes), "dram.BL",
       fmt::format("a burst of {} bytes (BL x channel width) is not a power of two", s.burst_bytes));
  need(pow2(s.row_bytes) && s.row_bytes >= s.burst_bytes, "dram.row_bytes",
       fmt::format("{} is not a power of two of at least one burst ({} bytes)", s.row_bytes, s.burst_bytes));
  s.capacity = uint64_t(s.channels) * s.ranks * s.bankgroups * s.banks * s.rows * s.row_bytes;

  // The mapping: two-letter fields, most significant first, each once.
  const std::string& m = cfg.dram_mapping;
  auto bad_map = [&](const std::string& why) {
    fail("config key 'dram.mapping': '{}' {}; give each of Ro Ba Bg Ra Co Ch once, most significant first "
         "(example: RoBaBgRaCoCh)",
         m, why);
  };
  if (m.size() != 2 * kFields) bad_map(fmt::format("has {} characters, not {} (six fields)", m.size(), 2 * kFields));
  const uint64_t widths[kFields] = {s.channels, s.ranks, s.bankgroups, s.banks, s.rows, s.row_bytes / s.burst_bytes};
  std::array<bool, kFields> seen{};
  uint32_t pos = 0;
  for (int i = kFields - 1; i >= 0; --i) {  // least significant field last in the string
    std::string tok = m.substr(size_t(i) * 2, 2);
    int f = int(std::find_if(std::begin(kFieldNames), std::end(kFieldNames), [&](const char* n) { return tok == n; }) -
                std::begin(kFieldNames));
    if (f == kFields) bad_map(fmt::format("has an unknown field '{}'", tok));
    if (seen[f]) bad_map(fmt::format("names {} twice", tok));
    seen[f] = true;
    s.bits[f] = log2u(widths[f]);
    s.shift[f] = pos;
    pos += s.bits[f];
  }
  need(s.capacity >= cfg.ddr_bytes, "dram.mapping",
       fmt::format("the mapping covers {} bytes ({} channels x {} ranks x {} bank groups x {} banks x {} rows x {} "
                   "bytes) but ddr_bytes is {}; add rows (dram.rows) or lower ddr_bytes",
                   s.capacity, s.channels, s.ranks, s.bankgroups, s.banks, s.rows, s.row_bytes, cfg.ddr_bytes));

  s.tBURST = uint32_t(cfg.dram_BL / cfg.dram_beats_per_clock);
  auto tm = [](uint64_t v) { return uint32_t(std::min<uint64_t>(v, 1u << 30)); };
  s.tCL = tm(cfg.dram_tCL), s.tCWL = tm(cfg.dram_tCWL), s.tRCD = tm(cfg.dram_tRCD), s.tRP = tm(cfg.dram_tRP);
  s.tRAS = tm(cfg.dram_tRAS), s.tRC = tm(cfg.dram_tRC), s.tCCD_S = tm(cfg.dram_tCCD_S), s.tCCD_L = tm(cfg.dram_tCCD_L);
  s.tRRD_S = tm(cfg.dram_tRRD_S), s.tRRD_L = tm(cfg.dram_tRRD_L), s.tFAW = tm(cfg.dram_tFAW), s.tWR = tm(cfg.dram_tWR);
  s.tWTR_S = tm(cfg.dram_tWTR_S), s.tWTR_L = tm(cfg.dram_tWTR_L), s.tRTW = tm(cfg.dram_tRTW), s.tRTP = tm(cfg.dram_tRTP);
  s.tRFC = tm(cfg.dram_tRFC), s.tRFCpb = tm(cfg.dram_tRFCpb), s.tREFI = tm(cfg.dram_tREFI);
  need(s.tRAS >= s.tRCD, "dram.tRAS",
       fmt::format("tRAS = {} is below tRCD = {}: a row must stay open until its first column command", s.tRAS, s.tRCD));
  need(s.tRC >= s.tRAS + s.tRP, "dram.tRC",
       fmt::format("tRC = {} is below tRAS + tRP = {} + {}: an activate cycle holds a row open and precharges it",
                   s.tRC, s.tRAS, s.tRP));

  const std::string& r = cfg.dram_refresh;
  need(r == "all" || r == "perbank" || r == "none", "dram.refresh", fmt::format("'{}' is not all, perbank or none", r));
  s.refresh = r == "all" ? Refresh::all : r == "perbank" ? Refresh::perbank : Refresh::none;
  if (s.refresh == Refresh::all)
    need(s.tREFI > s.tRFC, "dram.tREFI",
         fmt::format("tREFI = {} is not above tRFC = {}: the rank would never leave refresh", s.tREFI, s.tRFC));
  if (s.refresh == Refresh::perbank)
    need(s.tREFI / (s.bankgroups * s.banks) > s.tRFCpb, "dram.tREFI",
         fmt::format("tREFI / banks = {} / {} is not above tRFCpb = {}: per-bank refresh would never end", s.tREFI,
                     s.bankgroups * s.banks, s.tRFCpb));
  need(cfg.dram_page_policy == "open" || cfg.dram_page_policy == "close", "dram.page_policy",
       fmt::format("'{}' is not open or close", cfg.dram_page_policy));
  s.close_page = cfg.dram_page_policy == "close";
  s.fr_cap = uint32_t(std::min<uint64_t>(cfg.dram_fr_cap, 1u << 30));
  s.write_queue = uint32_t(std::min<uint64_t>(cfg.dram_write_queue, 1u << 20));
  s.ctrl_latency = cfg.dram_ctrl_latency_cycles;
  return s;
}

double DramSpec::peak_bytes_per_cycle() const {
  return double(channels) * double(burst_bytes) / double(tBURST) * clock.ratio();
}

}  // namespace gpnpu::sim
