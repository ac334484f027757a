// Time has types: Cycles count core clock cycles; sc_time is SystemC's. They are
// converted only here. One cycle is the clock period rounded to a picosecond; all
// SystemC times the simulator creates are whole cycles, so conversion is exact.
#pragma once
#include <cmath>
#include <cstdint>
#include <numeric>
#include <systemc>

namespace gpnpu::sim {

using Cycles = uint64_t;

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

// A second clock domain beside the core clock (the DRAM command clock): counts of
// either clock convert to the other exactly (integer kHz, rounded up: an event
// between two edges of the target clock belongs to the next edge).
class ClockRatio {
 public:
  ClockRatio(double core_ghz, double other_mhz)
      : core_(uint64_t(std::llround(core_ghz * 1e6))), other_(uint64_t(std::llround(other_mhz * 1e3))) {
    if (core_ == 0) core_ = 1;
    if (other_ == 0) other_ = 1;
    uint64_t g = std::gcd(core_, other_);
    core_ /= g;
    other_ /= g;
  }
  uint64_t to_other(Cycles c) const { return uint64_t(((unsigned __int128)c * other_ + core_ - 1) / core_); }
  Cycles to_core(uint64_t t) const { return Cycles(((unsigned __int128)t * core_ + other_ - 1) / other_); }
  // Other-clock cycles per core cycle.
  double ratio() const { return double(other_) / double(core_); }

 private:
  uint64_t core_, other_;  // kHz, divided by their gcd
};

}  // namespace gpnpu::sim
