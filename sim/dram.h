// The DRAM model of the DDR port (ddr_model = dram; docs/dram.md): channels x ranks
// x bank groups x banks, an open-row buffer per bank, an address mapping, a request
// queue per channel served first-ready first-come-first-served (FR-FCFS), reads and
// writes with turnarounds, all-bank or per-bank refresh, and the JEDEC timing set
// (sim/machine/config_params.def, block "DRAM"; presets in sim/machine/presets/dram/).
//
// Contract (sim/port_model.h): request(at, addr, bytes, write) returns the core
// cycle the last byte is delivered. Requests are TLM transactions (a DMA run: a
// whole contiguous descriptor side, or one row of a strided one) and arrive in
// time order. Small writes are posted: buffered per channel (dram.write_queue
// bursts) and drained in one batch, grouped by row. A request becomes bursts (dram.BL x channel width bytes) dealt to the
// channels by the mapping; each channel schedules its bursts at the earliest DRAM
// clock every timing allows, given every command already scheduled (commands of
// one kind issue in order). A long run of row hits is computed in bulk: once two
// consecutive periods of the burst pattern are the same shifted in time, the rest
// of the row is that shift repeated (exact: docs/dram.md, "Speed"), up to the next
// refresh. Time is kept in DRAM clocks from the moment the port was configured and
// converted to core cycles only through ClockRatio (sim/machine/clock_ratio.h).
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "sim/clock.h"
#include "sim/machine/dram_spec.h"
#include "sim/port_model.h"

namespace gpnpu::sim {

struct Counters;

// Measured on the model: a long sequential read stream (refresh and row switches
// included), bytes per core cycle. The "sustained ceiling" of reports.
double sustained_bytes_per_cycle(const DramSpec& spec);


// Counters of one channel (and their sum); the Stat of each is in sim/stats.h.
struct DramCounts {
  enum Kind : uint8_t { reads, writes, activates, precharges, refreshes, row_hits, row_misses, row_conflicts,
                        turnarounds, kKinds };
  std::array<uint64_t, kKinds> v{};
};

class DramModel final : public Port {
 public:
  // `origin`: the core cycle the model starts at (refresh is scheduled from there).
  DramModel(const DramSpec& spec, Cycles origin);

  Cycles request(Cycles at, uint64_t addr, uint64_t bytes, bool write) override;
  // At the end of a run: schedules the posted writes still buffered and performs the
  // refreshes due up to core cycle `now` (so their counts include idle time).
  void advance(Cycles now);

  // Counts go to the named stats of `sink` (the run's totals) as they happen.
  void attach(Counters* sink) { sink_ = sink; }
  const std::vector<DramCounts>& channel_counts() const { return counts_; }
  void clear_counts();
  const DramSpec& spec() const { return s_; }

 private:
  using Tick = int64_t;
  static constexpr Tick kNever = -(Tick(1) << 50);

  // Times of one channel, all in one vector (so a period of the burst pattern can
  // be compared and shifted as a whole); indices from the layout below.
  struct Channel {
    std::vector<Tick> t;
    std::vector<int64_t> open_row;  // per bank, -1 closed
    std::vector<Tick> next_ref;     // per rank: the next refresh deadline
    std::vector<uint64_t> refreshed; // per rank: banks refreshed in this round (per-bank refresh)
    int8_t last_dir = -1;           // 0 read, 1 write, -1 none yet
    struct Posted {
      uint64_t local;
      Tick arrival;
    };
    std::vector<Posted> write_queue;  // posted write bursts not yet scheduled
  };
  // Layout of Channel::t.
  static constexpr uint32_t kLastCol = 0, kBusFree = 1, kLastRd = 2, kLastWrEnd = 3, kRankBase = 4;
  uint32_t rank_size() const { return 5 + 3 * s_.bankgroups; }  // last ACT, 4-ACT window, per group: col, ACT, write end
  uint32_t rank_idx(uint32_t r) const { return kRankBase + r * rank_size(); }
  uint32_t group_idx(uint32_t r, uint32_t g) const { return rank_idx(r) + 5 + 3 * g; }
  uint32_t bank_idx(uint32_t b) const { return bank_base_ + 4 * b; }  // ACT, ready, last RD, write end

  struct Target {
    uint32_t rank, group, bank;  // bank: index in the channel
    int64_t row;
  };
  Target decode(uint64_t local) const;
  Tick schedule(uint32_t ch, const Target& x, bool write, Tick arrival);
  void refresh_due(uint32_t ch, uint32_t rank, Tick by);
  void close_bank(Channel& c, uint32_t ch, uint32_t bank, Tick after);
  void run_segment(uint32_t ch, uint64_t first, uint64_t last, bool write, Tick arrival);
  void serve(uint32_t ch, uint64_t first, uint64_t last, bool write, Tick arrival);
  void drain(uint32_t ch);
  void count(uint32_t ch, DramCounts::Kind k, uint64_t n = 1);
  Tick min_deadline(const Channel& c) const;

  DramSpec s_;
  Cycles origin_;
  uint32_t bank_base_, banks_per_channel_, inner_;  // inner_: bursts of one period (targets between Ch and Co)
  uint64_t cols_;                                   // bursts per row
  std::array<uint32_t, DramSpec::kFields> lshift_{}; // field positions in the channel-local burst index
  std::vector<Channel> ch_;
  std::vector<DramCounts> counts_;
  Counters* sink_ = nullptr;
  std::vector<Tick> snap_[2];
  std::vector<Tick> times_[2];
};

}  // namespace gpnpu::sim
