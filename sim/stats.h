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
#include "sim/machine/clock_ratio.h"
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
  S(dram_turnarounds, "count", "DRAM data bus direction switches (read to write or write to read)") \
  S(macs_f16, "MAC", "fp16 multiply-accumulates (vmac.f16: enabled PEs x 16 lanes)")               \
  S(macs_int8, "MAC", "int8 multiply-accumulates (vmac.i8: enabled PEs x 16 lanes)")               \
  S(valu_lane_ops, "ops", "lane operations of valu instructions (enabled PEs x 16 lanes)")        \
  S(vfpu_lane_ops, "ops", "lane operations of vfpu instructions (enabled PEs x 16 lanes)")        \
  S(sfu_lane_ops, "ops", "lane operations of sfu instructions (enabled PEs x 16 lanes)")          \
  S(xlane_lane_ops, "ops", "lane operations of xlane instructions (enabled PEs x 16 lanes)")      \
  S(vrf_reads, "words", "32-bit words read from vector registers (V operands read x enabled PEs x 16)") \
  S(vrf_writes, "words", "32-bit words written to vector registers (V operands written x enabled PEs x 16)") \
  S(lrm_bytes, "bytes", "bytes read or written in the PEs' LRM (vld/vst: bytes per PE x enabled PEs)") \
  S(ocm_array_bytes_read, "bytes", "bytes read from OCM by the array port (broadcast once, scatter per enabled PE)") \
  S(ocm_array_bytes_written, "bytes", "bytes written to OCM by the array port (gather, per enabled PE)") \
  S(ocm_dma_bytes_read, "bytes", "bytes DMA read from OCM (counted when the descriptor starts)")   \
  S(ocm_dma_bytes_written, "bytes", "bytes DMA wrote to OCM (counted when the descriptor starts)") \
  S(ddr_io_bytes_read, "bytes", "bytes the DDR interface reads: each contiguous run in whole ddr_burst_bytes bursts") \
  S(ddr_io_bytes_written, "bytes", "bytes the DDR interface writes: each contiguous run in whole ddr_burst_bytes bursts") \
  S(f16_overflow, "count", "fp32 values converted to fp16 beyond its range (|x| >= 65520 or inf): written as inf, or clamped to +-65504 with fp16_overflow = saturate (functional runs)") \
  S(f16_underflow, "count", "normal non-zero fp32 values converted to fp16 that became zero (functional runs)") \
  S(f16_nan, "count", "NaN values converted to fp16 (functional runs)")

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
  // Numerics (functional runs): the largest finite |x| converted to fp16 (vpack.f16,
  // vcvt.f16.f32), before rounding, in the region itself (a maximum, not a difference).
  float f16_max_abs = 0;
  uint64_t& operator[](Stat s) { return v[int(s)]; }
  uint64_t operator[](Stat s) const { return v[int(s)]; }
  void add_diff(const Counters& end, const Counters& begin);
};

// Energy-event counts per window of power_window_cycles cycles (relative to the run's
// start), for power over time and peak power. The sequencer's events go to the window
// of their issue cycle; the DMA engine's (dma_timed) are spread evenly over the cycles
// from each run's request to its delivery, so that a long transfer's energy lands where
// its bytes move. Every event is in exactly one window: the windows sum to the totals.
struct PowerTrace {
  Cycles window = 0;
  std::vector<std::array<uint64_t, kNumStats>> bins;
  void add(Stat s, Cycles at, uint64_t n);
  void spread(Stat s, Cycles from, Cycles to, uint64_t n);  // evenly over [from, to); at `from` if empty
};
// Stats whose windows the DMA engine fills (their totals are counted at dma.start).
constexpr bool dma_timed(Stat s) {
  return s == Stat::dma_descriptors || s == Stat::ocm_dma_bytes_read || s == Stat::ocm_dma_bytes_written ||
         s == Stat::ddr_io_bytes_read || s == Stat::ddr_io_bytes_written;
}

struct RegionCall {
  uint32_t name;
  uint32_t depth;
  Cycles begin, end;
  Counters counters;
};

class Stats {
 public:
  Counters total;
  PowerTrace power;
  std::vector<std::string> names;  // mark names of the program
  std::vector<DramCounts> dram_channels;  // ddr_model = dram: the run's counts per DRAM channel

  // The first fp32 -> fp16 conversion of the run that wrote inf or NaN (functional runs).
  struct F16Event {
    bool set = false;
    std::string mark;                      // innermost open mark ("" if none)
    std::string where;                     // pc, source line and instruction
    uint32_t pe = 0, element = 0;          // PE and element of its fp16 results
    float value = 0;                       // the fp32 value before rounding
  };
  F16Event first_nonfinite;

  // Folds the largest |x| converted to fp16 since the last call into every open region
  // and the total (the sequencer calls it at every mark and at halt).
  void note_f16_max(float m);

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

  // Average power of each window (W), the last one over its own length (sim/energy.h).
  std::vector<double> window_watts(const Config& cfg) const;
  // Highest window power among the full windows inside [begin, end); NaN if none fits.
  double peak_watts(const Config& cfg, const std::vector<double>& watts, Cycles begin, Cycles end) const;

  // JSON with "cycles", "instructions", ..., "ddr_roofline_fraction", "units", "energy",
  // "power" (windows), "regions" {name: same fields + "calls"}, "dram" (ddr_model = dram: the
  // preset's peak and sustained ceiling, counts per channel) and "config".
  std::string to_json(const Config& cfg, bool timing_only) const;
  std::string to_text(const Config& cfg) const;
  // Every region call as an HDF5 table (grows with the program; JSON would not).
  void write_hdf5(const std::string& path, const Config& cfg) const;

 private:
  struct Open {
    uint32_t name;
    Cycles begin;
    Counters at_begin;
    float f16_max_abs = 0;
  };
  std::vector<Open> open_;
  std::vector<RegionCall> calls_;
};

}  // namespace gpnpu::sim
