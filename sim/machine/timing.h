// The timing rule of one instruction, in one place: what issuing it costs on a
// machine. The sequencer calls cost_of() for every instruction it issues and hands
// the result to its trace sinks with the issue (sim::IssueEvent), so the trace
// writers show exactly what the sequencer timed; nothing else recomputes it.
//
//   resource    the unit class whose free cycle it takes (isa/unit_table.def)
//   occupancy   cycles until the next instruction on that resource may issue:
//               occ.<unit>, and for a unit on the OCM <-> array port at least
//               ceil(port_bytes / ocm_port_bytes)
//   latency     cycles from issue until its results may be read: lat.<unit>, plus
//               the port occupancy for a port unit (the latency counts from the
//               last byte)
//   port_bytes  bytes over the OCM <-> array port: the row's memory bytes once
//               (ocm_row), once per group of PEs that holds a PE its predicate
//               enables (ocm_group: obcast.g) or once per PE it enables (ocm_per_pe)
// docs/architecture.md ("Timing model") states the same rules in prose.
#pragma once
#include <algorithm>
#include <array>
#include <cstdint>

#include "isa/isa.h"
#include "sim/machine/config.h"

namespace gpnpu::sim {

struct Cost {
  isa::Unit resource = isa::Unit::scalar;
  uint32_t occupancy = 0, latency = 0;
  uint64_t port_bytes = 0;
};

class Timing {
 public:
  explicit Timing(const Config& cfg) : port_(uint32_t(cfg.ocm_port_bytes)) {
    for (int u = 0; u < isa::kNumUnits; ++u) {
      lat_[u] = cfg.lat(isa::Unit(u));
      occ_[u] = cfg.occ(isa::Unit(u));
    }
  }

  // The cost of issuing `in` with `active_pes` PEs enabled by its predicate, in `groups` PE
  // groups (ocm_group: those that hold an enabled PE).
  Cost cost_of(const isa::Insn& in, uint32_t active_pes, uint32_t groups = 1) const {
    const isa::Unit u = in.info->unit;
    const isa::UnitInfo& ui = isa::unit_info(u);
    Cost c{ui.resource, occ_[int(u)], lat_[int(u)], 0};
    if (ui.port != isa::Port::none) {
      const uint32_t rows = ui.port == isa::Port::ocm_row ? 1 : ui.port == isa::Port::ocm_group ? groups : active_pes;
      c.port_bytes = uint64_t(in.info->mem_bytes) * rows;
      c.occupancy = uint32_t(std::max<uint64_t>(c.occupancy, (c.port_bytes + port_ - 1) / port_));
      c.latency += c.occupancy;
    }
    return c;
  }
  bool operator==(const Timing&) const = default;

 private:
  std::array<uint32_t, isa::kNumUnits> lat_{}, occ_{};
  uint32_t port_;
};

}  // namespace gpnpu::sim
