// Energy and power: the one place they are computed. Every event the timing model
// counts (sim/stats.h) costs its entry of the machine's energy table (energy.<event>
// keys in sim/machine/config_params.def, in pJ); static power (power.* keys, in mW) is drawn
// for every cycle. So energy = sum over events of count x pJ, plus static mW x time,
// and a timing-only run has exactly the energy of the functional run (same counts).
// docs/energy.md states every assumption behind the default table.
//
// A DRAM model (ddr_model=dram, issue 14) adds its own events here: activate,
// read/write bursts and refresh counts as stats, IDD-based energies as config keys,
// each one more row of GPNPU_ENERGY_EVENTS in the group `ddr` (docs/energy.md).
#pragma once
#include <array>
#include <nlohmann/json.hpp>

#include "sim/stats.h"

namespace gpnpu::sim {

class Config;

// The split reported everywhere: dynamic DDR / OCM / MAC / other, then static.
enum class EnergyGroup : uint8_t { ddr, ocm, mac, other };
inline constexpr const char* kEnergyGroupNames[] = {"ddr", "ocm", "mac", "other"};

// E(event name = energy.<name> key, Config field, counted stat, group)
#define GPNPU_ENERGY_EVENTS(E)                                                           \
  E(mac_f16, energy_mac_f16, macs_f16, mac)                                              \
  E(mac_int8, energy_mac_int8, macs_int8, mac)                                           \
  E(valu_op, energy_valu_op, valu_lane_ops, other)                                       \
  E(vfpu_op, energy_vfpu_op, vfpu_lane_ops, other)                                       \
  E(sfu_op, energy_sfu_op, sfu_lane_ops, other)                                          \
  E(xlane_op, energy_xlane_op, xlane_lane_ops, other)                                    \
  E(vrf_read, energy_vrf_read, vrf_reads, other)                                         \
  E(vrf_write, energy_vrf_write, vrf_writes, other)                                      \
  E(lrm_byte, energy_lrm_byte, lrm_bytes, other)                                         \
  E(instruction, energy_instruction, instructions, other)                                \
  E(dma_descriptor, energy_dma_descriptor, dma_descriptors, other)                       \
  E(ocm_array_read_byte, energy_ocm_array_read_byte, ocm_array_bytes_read, ocm)          \
  E(ocm_array_write_byte, energy_ocm_array_write_byte, ocm_array_bytes_written, ocm)     \
  E(ocm_dma_read_byte, energy_ocm_dma_read_byte, ocm_dma_bytes_read, ocm)                \
  E(ocm_dma_write_byte, energy_ocm_dma_write_byte, ocm_dma_bytes_written, ocm)           \
  E(ddr_read_byte, energy_ddr_read_byte, ddr_io_bytes_read, ddr)                         \
  E(ddr_write_byte, energy_ddr_write_byte, ddr_io_bytes_written, ddr)

struct EnergyEvent {
  const char* name;  // the table key is "energy." + name
  Stat stat;
  EnergyGroup group;
};
#define GPNPU_ENERGY_COUNT(name, field, stat, group) +1
inline constexpr int kNumEnergyEvents = 0 GPNPU_ENERGY_EVENTS(GPNPU_ENERGY_COUNT);
#undef GPNPU_ENERGY_COUNT
const std::array<EnergyEvent, kNumEnergyEvents>& energy_events();

// Static power of the machine, mW: PEs, OCM (per MiB) and the DDR interface.
struct StaticPower {
  double pe_mw = 0, ocm_mw = 0, ddr_mw = 0;
  double total_mw() const { return pe_mw + ocm_mw + ddr_mw; }
};
StaticPower static_power(const Config& cfg);

struct Energy {
  std::array<double, kNumEnergyEvents> event_pj{};  // count x table value, in energy_events() order
  double static_pe_pj = 0, static_ocm_pj = 0, static_ddr_pj = 0;
  double seconds = 0;  // the cycles it covers, at the clock

  double dynamic_pj() const;  // the events, summed in table order
  double static_pj() const { return static_pe_pj + static_ocm_pj + static_ddr_pj; }
  double total_pj() const { return dynamic_pj() + static_pj(); }
  double group_pj(EnergyGroup g) const;
  double total_mj() const { return total_pj() * 1e-9; }
  double average_w() const { return seconds > 0 ? total_pj() * 1e-12 / seconds : 0.0; }
  bool operator==(const Energy&) const = default;
  Energy& operator+=(const Energy& o);  // the energy of both spans, one after the other
  Energy scaled(double f) const;        // every term (and the time) times f: a mean per step
};

// The energy of counters `c` (a run, a region, a window of `cycles` cycles).
Energy energy_of(const Counters& c, const Config& cfg);
// The same for a bare count array (power windows) covering `cycles` cycles.
Energy energy_of(const std::array<uint64_t, kNumStats>& counts, uint64_t cycles, const Config& cfg);

// {"total_mj", "dynamic_mj", "static_mj", "average_w", "split_mj": {ddr, ocm, mac,
// other, static}, "static_mj_by_part": {pe, ocm, ddr}, "events_pj": {name: pJ}}.
nlohmann::ordered_json energy_json(const Energy& e);

}  // namespace gpnpu::sim
