// The timing of a memory target's port (the contract every DDR model meets), and
// the ideal port: a shared pipe with a bandwidth and a latency, requests served in
// arrival order, each holding the port for bytes / bandwidth. Time is kept in exact
// rational fixed point (2^-20 cycle), so long streams do not drift.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "sim/machine/clock_ratio.h"

namespace gpnpu::sim {

// Bytes a port with `burst`-byte bursts moves for a request of `bytes`.
inline uint64_t whole_bursts(uint64_t bytes, uint64_t burst) { return (bytes + burst - 1) / burst * burst; }

// A request of `bytes` at target offset `addr`, arriving at core cycle `at`:
// returns the cycle its last byte is delivered. Called in arrival order of the
// TLM transactions; a model may keep state between requests (open rows).
class Port {
 public:
  virtual ~Port() = default;
  virtual Cycles request(Cycles at, uint64_t addr, uint64_t bytes, bool write) = 0;
  // The port's busy interval for the last request, [begin, end) in whole cycles (for
  // trace sinks: sim/memory_target.h PortSpan); its last byte is delivered at or after end.
  Cycles last_begin() const { return last_begin_; }
  Cycles last_end() const { return last_end_; }

 protected:
  Cycles last_begin_ = 0, last_end_ = 0;
};

class PortModel final : public Port {
 public:
  // bandwidth = num / den bytes per cycle (e.g. GB/s * 1e6 / GHz * 1e6).
  PortModel(double bytes_per_cycle_num, double bytes_per_cycle_den, Cycles latency, uint32_t burst)
      : num_(uint64_t(std::llround(bytes_per_cycle_num * 1e6))),
        den_(uint64_t(std::llround(bytes_per_cycle_den * 1e6))),
        latency_(latency),
        burst_(std::max<uint32_t>(burst, 1)) {}

  // A request of `bytes` arriving at cycle `at`: returns the cycle its last byte
  // is delivered (including the latency).
  Cycles request(Cycles at, uint64_t /*addr*/, uint64_t bytes, bool /*write*/) override {
    bytes = whole_bursts(bytes, burst_);
    unsigned __int128 at_ticks = (unsigned __int128)at << kFrac;
    unsigned __int128 start = std::max(at_ticks, free_);
    unsigned __int128 ticks = (((unsigned __int128)bytes * den_ << kFrac) + num_ - 1) / num_;
    free_ = start + ticks;
    last_begin_ = Cycles((start + (1ull << kFrac) - 1) >> kFrac);
    last_end_ = Cycles((free_ + (1ull << kFrac) - 1) >> kFrac);
    busy_ticks_ += ticks;
    bytes_ += bytes;
    return Cycles((free_ + (1ull << kFrac) - 1) >> kFrac) + latency_;
  }
  Cycles busy_cycles() const { return Cycles(busy_ticks_ >> kFrac); }
  // last_begin()/last_end(): both rounded up so back-to-back requests tile without
  // overlap; the last byte is delivered `latency` after end.
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
