// Work a kernel call must do, so the compiler can report floors per call.
//
//   floor_cycles = max(macs / mac_peak, ddr_bytes / ddr_bytes_per_cycle,
//                      ocm_bytes / ocm_port_bytes)
//
// mac_peak = npe * 16 / occ.mac16 MAC per cycle for fp16 (npe * 16 / occ.mac8 for
// int8). ocm_bytes counts the bytes that must cross the OCM <-> array port
// (broadcast, scatter and gather share it): the floor of kernels that stream
// activations already resident in OCM (norms, element-wise ops), whose macs and
// ddr_bytes are 0.
#pragma once
#include <algorithm>
#include <cstdint>

#include "isa/isa.h"
#include "sim/machine/config.h"

namespace gpnpu::kernels {

struct KernelCost {
  uint64_t macs = 0, ddr_bytes = 0;
  uint64_t ocm_bytes = 0;  // bytes through the OCM <-> array port
};

inline double floor_cycles(const sim::Config& cfg, const KernelCost& c, bool fp16 = true) {
  return std::max({double(c.macs) / cfg.mac_peak(fp16), double(c.ddr_bytes) / cfg.ddr_bytes_per_cycle(),
                   double(c.ocm_bytes) / double(cfg.ocm_port_bytes)});
}

}  // namespace gpnpu::kernels
