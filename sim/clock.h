// Time has types: Cycles count core clock cycles; sc_time is SystemC's. They are
// converted only here. One cycle is the clock period rounded to a picosecond; all
// SystemC times the simulator creates are whole cycles, so conversion is exact.
#pragma once
#include <cmath>
#include <cstdint>
#include <systemc>

#include "sim/machine/clock_ratio.h"

namespace gpnpu::sim {

class Clock {
 public:
  explicit Clock(double ghz) : period_ps_(uint64_t(std::llround(1000.0 / ghz))) {
    if (period_ps_ == 0) period_ps_ = 1;
  }
  sc_core::sc_time to_time(Cycles c) const { return sc_core::sc_time::from_value(c * period_ps_); }
  // Rounds up: a time between two edges belongs to the next cycle.
  Cycles to_cycles(const sc_core::sc_time& t) const { return (t.value() + period_ps_ - 1) / period_ps_; }
  Cycles now() const { return to_cycles(sc_core::sc_time_stamp()); }
  uint64_t period_ps() const { return period_ps_; }

 private:
  uint64_t period_ps_;
};


}  // namespace gpnpu::sim
