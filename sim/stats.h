// Statistics, registered by name with a unit and a description (one table below),
// kept in total and per `mark` region. A region's counters are the differences of
// the totals between its mark.begin and mark.end, summed over its calls (nested
// regions are included in their parents). Each call is also kept as a row.
#pragma once
#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "isa/isa.h"
#include "sim/cycles.h"
#include "sim/dram.h"

namespace gpnpu::sim {

class Config;

#define GPNPU_STATS(S)                                                                              \
  S(cycles, "cycles", "cycles from the region's begin to its end (total: to the last completion)") \
  S(instructions, "count", "instructions issued")                                                  \
  S(stall_cycles, "cycles", "issue cycles lost waiting for operands, busy units or DMA")           \
  S(macs, "MAC", "multiply-accumulates done (enabled PEs x 16 lanes per MAC instruction)")         \
  S(ddr_bytes_read, "bytes", "bytes DMA read from DDR (counted when the descriptor starts)")      \
  S(ddr_bytes_written, "bytes", "bytes DMA wrote to DDR (counted when the descriptor starts)")    \
  S(dma_descriptors, "count", "DMA descriptors started")                                           \
  S(dma_bytes, "bytes", "bytes moved by DMA (all directions)")                                     \
  S(array_busy_cycles, "cycles", "cycles with at least one array unit occupied")                   \
  S(dram_reads, "count", "DRAM read bursts (ddr_model = dram; counted when the request is made)")   \
  S(dram_writes, "count", "DRAM write bursts")                                                       \
  S(dram_activates, "count", "DRAM row activates (ACT)")                                             \
  S(dram_precharges, "count", "DRAM precharges (PRE: row conflicts, refresh, close-page policy)")    \
  S(dram_refreshes, "count", "DRAM refresh commands (all-bank REFab, or per-bank REFpb), idle included") \
  S(dram_row_hits, "count", "DRAM bursts to the open row of their bank")                            \
  S(dram_row_misses, "count", "DRAM bursts to a bank with no open row (one ACT)")                   \
  S(dram_row_conflicts, "count", "DRAM bursts to a bank with another row open (PRE + ACT)")         \
  S(dram_turnarounds, "count", "DRAM data bus direction switches (read to write or write to read)")

enum class Stat : uint8_t {
#define GPNPU_STAT_ENUM(n, unit, desc) n,
  GPNPU_STATS(GPNPU_STAT_ENUM)
#undef GPNPU_STAT_ENUM
  count
};
constexpr int kNumStats = int(Stat::count);

struct StatInfo {
  const char* name;
  const char* unit;
  const char* description;
};
const StatInfo& stat_info(Stat s);

// Instruction counts per unit class are kept beside the named counters.
struct Counters {
  std::array<uint64_t, kNumStats> v{};
  std::array<uint64_t, isa::kNumUnits> by_unit{};
  uint64_t& operator[](Stat s) { return v[int(s)]; }
  uint64_t operator[](Stat s) const { return v[int(s)]; }
  void add_diff(const Counters& end, const Counters& begin);
};

struct RegionCall {
  uint32_t name;
  uint32_t depth;
  Cycles begin, end;
  Counters counters;
};

class Stats {
 public:
  Counters total;
  std::vector<std::string> names;  // mark names of the program
  std::vector<DramCounts> dram_channels;  // ddr_model = dram: the run's counts per DRAM channel

  void begin(uint32_t name, Cycles now);
  // Closes the innermost region; returns false if `name` is not that region.
  bool end(uint32_t name, Cycles now);
  uint32_t open_regions() const { return uint32_t(open_.size()); }
  // Name of the innermost open region, "" if none.
  std::string current_region() const;
  const std::vector<RegionCall>& calls() const { return calls_; }

  // Aggregated by region name, in order of first appearance.
  struct Region {
    std::string name;
    uint64_t calls = 0;
    Counters counters;
  };
  std::vector<Region> regions() const;

  // JSON with "cycles", "instructions", ..., "ddr_roofline_fraction", "units",
  // "regions" {name: same fields + "calls"}, "dram" (ddr_model = dram: the preset's
  // peak and sustained ceiling, counts per channel) and "config".
  std::string to_json(const Config& cfg, bool timing_only) const;
  std::string to_text(const Config& cfg) const;
  // Every region call as an HDF5 table (grows with the program; JSON would not).
  void write_hdf5(const std::string& path) const;

 private:
  struct Open {
    uint32_t name;
    Cycles begin;
    Counters at_begin;
  };
  std::vector<Open> open_;
  std::vector<RegionCall> calls_;
};

}  // namespace gpnpu::sim
