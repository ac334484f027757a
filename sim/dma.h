// The DMA engine: `dma_channels` channels, each a SystemC thread that takes
// descriptors from its queue (depth dma_queue_depth) in order. For a descriptor
// it issues every contiguous source run and destination run on the bus at once
// (requests are pipelined; the ports serialise them), waits until the last one
// completes, then moves the payload (not in timing-only runs) with debug
// transport, so data appears at the destination when the descriptor completes.
#pragma once
#include <deque>
#include <functional>
#include <memory>
#include <systemc>
#include <tlm>
#include <tlm_utils/simple_initiator_socket.h>
#include <vector>

#include "isa/state.h"
#include "sim/clock.h"
#include "sim/stats.h"

namespace gpnpu::sim {

// What a trace sink sees of the DMA engine (traces/): a descriptor taken by its
// channel (begin), each contiguous run it requests on the bus (transfer), and its
// completion (end). Cycles are absolute (the clock's, not relative to a run).
struct DmaEvent {
  enum Kind : uint8_t { begin, transfer, end };
  Kind kind;
  uint32_t channel;
  const isa::DmaDescriptor* desc;
  Cycles at;             // begin/end: now; transfer: the cycle the run is requested
  Cycles done = 0;       // transfer: the cycle its last byte is delivered
  uint64_t addr = 0;     // transfer: bus address of the run
  uint64_t bytes = 0;    // transfer: bytes of the run
  bool write = false;    // transfer: destination side (else source side)
  Cycles port_begin = 0, port_end = 0;  // transfer: when the target's port served the run (PortSpan)
};

// Calls f(address, bytes) for each contiguous run of one side of a descriptor
// (the rule the DMA engine issues bus requests by; the hazard checker uses it too).
template <typename F>
inline void for_runs(uint32_t base, const isa::DmaDescriptor& d, uint32_t stride, uint32_t plane_stride, F&& f) {
  uint64_t row = d.row_bytes;
  bool rows_contiguous = d.rows == 1 || stride == row;
  bool planes_contiguous = rows_contiguous && (d.planes == 1 || plane_stride == row * d.rows);
  if (planes_contiguous) return f(uint64_t(base), row * d.rows * d.planes);
  for (uint64_t p = 0; p < d.planes; ++p) {
    uint64_t pb = base + p * plane_stride;
    if (rows_contiguous) {
      f(pb, row * d.rows);
      continue;
    }
    for (uint64_t r = 0; r < d.rows; ++r) f(pb + r * stride, row);
  }
}

class DmaEngine : public sc_core::sc_module {
 public:
  tlm_utils::simple_initiator_socket<DmaEngine> socket;

  DmaEngine(sc_core::sc_module_name name, const Clock& clock);

  // Applies channel count, queue depth, setup cost and mode; call while idle.
  void configure(uint32_t channels, uint32_t queue_depth, Cycles setup, bool functional);

  // From the sequencer's thread. submit() blocks (SystemC wait) while the queue is full.
  void submit(uint32_t channel, const isa::DmaDescriptor& d);
  void wait_idle(uint32_t channel);
  void wait_all_idle();
  bool idle(uint32_t channel) const { return channels_[channel]->queue.empty(); }

  uint32_t channels() const { return active_; }
  Cycles busy_cycles(uint32_t channel) const { return channels_[channel]->busy; }
  // Cycle at which each channel last completed a descriptor.
  Cycles last_done() const;
  // Descriptors queued on a channel, the running one included.
  uint32_t queued(uint32_t channel) const { return uint32_t(channels_[channel]->queue.size()); }

  // Called for every DMA event when set (tracing); nothing is done when empty.
  std::function<void(const DmaEvent&)> on_event;
  // Called before a functional run writes OCM bytes [offset, offset + bytes) (the
  // platform runs a PE-block batch that reads them first, isa/batch.h).
  std::function<void(uint64_t offset, uint64_t bytes)> before_ocm_write;

  // Puts the energy events of DMA (descriptors, OCM-port bytes, DDR bytes in whole
  // bursts) into `power`'s windows as they happen, cycles relative to `base` (the run's
  // start); nullptr stops it. Set by the sequencer for each run.
  void trace_power(PowerTrace* power, Cycles base, uint64_t ddr_burst) {
    power_ = power;
    power_base_ = base;
    ddr_burst_ = ddr_burst;
  }

 private:
  struct Channel {
    std::deque<isa::DmaDescriptor> queue;
    sc_core::sc_event work, changed;
    Cycles busy = 0, last_done = 0;
  };
  void channel_thread(uint32_t ch);
  void run(uint32_t ch, const isa::DmaDescriptor& d);

  const Clock& clock_;
  std::vector<std::unique_ptr<Channel>> channels_;
  uint32_t active_ = 0, depth_ = 1;
  Cycles setup_ = 0;
  bool functional_ = true;
  static constexpr uint64_t kPieceBytes = 64 << 10;  // a DDR <-> OCM payload's piece (run())
  std::vector<uint8_t> buffer_;
  PowerTrace* power_ = nullptr;
  Cycles power_base_ = 0;
  uint64_t ddr_burst_ = 1;
};

}  // namespace gpnpu::sim
