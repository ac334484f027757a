// Core clock cycles, and the one conversion between them and a second clock domain
// (the DRAM command clock, sim/dram.h). No SystemC here: sim/clock.h converts
// cycles to and from sc_time; config and the DRAM model include only this.
#pragma once
#include <cmath>
#include <cstdint>
#include <numeric>

namespace gpnpu::sim {

using Cycles = uint64_t;

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
