// A shared port with a bandwidth and a latency: requests are served in arrival
// order, each holding the port for bytes / bandwidth. Time is kept in exact
// rational fixed point (2^-20 cycle), so long streams do not drift.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "sim/clock.h"

namespace gpnpu::sim {

// Bytes a port with `burst`-byte bursts moves for a request of `bytes`.
inline uint64_t whole_bursts(uint64_t bytes, uint64_t burst) { return (bytes + burst - 1) / burst * burst; }

class PortModel {
 public:
  // bandwidth = num / den bytes per cycle (e.g. GB/s * 1e6 / GHz * 1e6).
  PortModel(double bytes_per_cycle_num, double bytes_per_cycle_den, Cycles latency, uint32_t burst)
      : num_(uint64_t(std::llround(bytes_per_cycle_num * 1e6))),
        den_(uint64_t(std::llround(bytes_per_cycle_den * 1e6))),
        latency_(latency),
        burst_(std::max<uint32_t>(burst, 1)) {}

  // A request of `bytes` arriving at cycle `at`: returns the cycle its last byte
  // is delivered (including the latency).
  Cycles request(Cycles at, uint64_t bytes) {
    bytes = whole_bursts(bytes, burst_);
    unsigned __int128 at_ticks = (unsigned __int128)at << kFrac;
    unsigned __int128 start = std::max(at_ticks, free_);
    unsigned __int128 ticks = (((unsigned __int128)bytes * den_ << kFrac) + num_ - 1) / num_;
    free_ = start + ticks;
    busy_ticks_ += ticks;
    bytes_ += bytes;
    return Cycles((free_ + (1ull << kFrac) - 1) >> kFrac) + latency_;
  }
  Cycles busy_cycles() const { return Cycles(busy_ticks_ >> kFrac); }
  uint64_t bytes() const { return bytes_; }

 private:
  static constexpr int kFrac = 20;
  uint64_t num_, den_;
  Cycles latency_;
  uint32_t burst_;
  unsigned __int128 free_ = 0, busy_ticks_ = 0;
  uint64_t bytes_ = 0;
};

}  // namespace gpnpu::sim
