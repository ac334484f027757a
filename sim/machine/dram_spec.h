// The DRAM settings of a machine config (ddr_model = dram; docs/dram.md), checked and
// resolved: geometry, address mapping, the JEDEC timing set in DRAM clocks. No
// SystemC: Config::validate checks them here; the model is sim/dram.h.
#pragma once
#include <array>
#include <cstdint>
#include <string>

#include "sim/machine/clock_ratio.h"

namespace gpnpu::sim {

class Config;

// The DRAM settings of a config, checked and resolved (Config::validate calls
// from(); its errors name the key and the rule).
struct DramSpec {
  enum Field : uint8_t { Ch, Ra, Bg, Ba, Ro, Co, kFields };
  enum class Refresh : uint8_t { all, perbank, none };

  std::string name;  // the preset
  uint32_t channels = 0, ranks = 0, bankgroups = 0, banks = 0;  // banks per bank group
  uint64_t rows = 0, row_bytes = 0, burst_bytes = 0, capacity = 0;
  std::array<uint32_t, kFields> bits{}, shift{};  // field widths and positions in the burst index
  uint32_t tBURST = 0, tCL = 0, tCWL = 0, tRCD = 0, tRP = 0, tRAS = 0, tRC = 0, tCCD_S = 0, tCCD_L = 0, tRRD_S = 0,
           tRRD_L = 0, tFAW = 0, tWR = 0, tWTR_S = 0, tWTR_L = 0, tRTW = 0, tRTP = 0, tRFC = 0, tRFCpb = 0, tREFI = 0;
  Refresh refresh = Refresh::all;
  bool close_page = false;
  uint32_t fr_cap = 0, write_queue = 0;
  Cycles ctrl_latency = 0;
  double clock_mhz = 0;
  ClockRatio clock{1.0, 1.0};  // core cycles <-> DRAM clocks

  static DramSpec from(const Config& cfg);
  // Peak: every channel's data bus busy every clock; bytes per core cycle and GB/s.
  double peak_bytes_per_cycle() const;
  double peak_gbps() const { return double(channels) * double(burst_bytes) / tBURST * clock_mhz * 1e-3; }
};

}  // namespace gpnpu::sim
