#include "sim/dma.h"

#include <algorithm>

#include "isa/error.h"
#include "sim/memory_target.h"
#include "sim/machine/memory_map.h"
#include "sim/port_model.h"

namespace gpnpu::sim {

DmaEngine::DmaEngine(sc_core::sc_module_name name, const Clock& clock)
    : sc_module(name), socket("socket"), clock_(clock) {}

void DmaEngine::configure(uint32_t channels, uint32_t queue_depth, Cycles setup, bool functional) {
  // Threads are spawned on demand and never removed; unused ones stay asleep.
  while (channels_.size() < channels) {
    uint32_t ch = uint32_t(channels_.size());
    channels_.push_back(std::make_unique<Channel>());
    sc_core::sc_spawn_options opt;
    sc_core::sc_spawn([this, ch] { channel_thread(ch); }, sc_core::sc_gen_unique_name("channel"), &opt);
  }
  for (auto& c : channels_) c->busy = c->last_done = 0;
  active_ = channels;
  depth_ = queue_depth;
  setup_ = setup;
  functional_ = functional;
}

void DmaEngine::submit(uint32_t channel, const isa::DmaDescriptor& d) {
  Channel& c = *channels_[channel];
  while (c.queue.size() >= depth_) sc_core::wait(c.changed);
  c.queue.push_back(d);
  c.work.notify(sc_core::SC_ZERO_TIME);
}

void DmaEngine::wait_idle(uint32_t channel) {
  Channel& c = *channels_[channel];
  while (!c.queue.empty()) sc_core::wait(c.changed);
}

void DmaEngine::wait_all_idle() {
  for (uint32_t ch = 0; ch < active_; ++ch) wait_idle(ch);
}

Cycles DmaEngine::last_done() const {
  Cycles t = 0;
  for (uint32_t ch = 0; ch < active_; ++ch) t = std::max(t, channels_[ch]->last_done);
  return t;
}

void DmaEngine::channel_thread(uint32_t ch) {
  Channel& c = *channels_[ch];
  for (;;) {
    while (c.queue.empty()) sc_core::wait(c.work);
    Cycles start = clock_.now();
    if (power_) power_->add(Stat::dma_descriptors, start - power_base_, 1);
#ifndef GPNPU_NO_TRACE_HOOKS
    if (on_event) on_event(DmaEvent{DmaEvent::begin, ch, &c.queue.front(), start});
#endif
    run(ch, c.queue.front());
    Cycles end = clock_.now();
#ifndef GPNPU_NO_TRACE_HOOKS
    if (on_event) on_event(DmaEvent{DmaEvent::end, ch, &c.queue.front(), end});
#endif
    c.busy += end - start;
    c.last_done = end;
    c.queue.pop_front();
    c.changed.notify(sc_core::SC_ZERO_TIME);
  }
}

void DmaEngine::run(uint32_t ch, const isa::DmaDescriptor& d) {
  Cycles t0 = clock_.now() + setup_;
  Cycles done = t0;
  tlm::tlm_generic_payload trans;
#ifndef GPNPU_NO_TRACE_HOOKS
  // Trace sinks see when the target's port served each run (the payload owns it).
  PortSpan* span = on_event ? new PortSpan : nullptr;
  if (span) trans.set_extension(span);
#endif
  // Timing: every run of both sides is requested at t0; the ports serialise them.
  AccessDirection dir;  // the side, for timing models that tell reads from writes (sim/dram.h)
  trans.set_extension(&dir);
  struct Clear {
    tlm::tlm_generic_payload& t;
    ~Clear() { t.clear_extension<AccessDirection>(); }
  } clear{trans};
  bool& write_side = dir.write;
  auto timing = [&](uint64_t addr, uint64_t bytes) {
    trans.set_command(tlm::TLM_IGNORE_COMMAND);
    trans.set_address(addr);
    trans.set_data_ptr(nullptr);
    trans.set_data_length(unsigned(bytes));
    trans.set_streaming_width(unsigned(bytes));
    trans.set_response_status(tlm::TLM_INCOMPLETE_RESPONSE);
    sc_core::sc_time delay = clock_.to_time(t0) - sc_core::sc_time_stamp();
    socket->b_transport(trans, delay);
    if (trans.is_response_error())
      fail("internal: DMA run [0x{:x}, +{}) was not accepted by the bus", addr, bytes);
    Cycles run_done = clock_.to_cycles(sc_core::sc_time_stamp() + delay);
    done = std::max(done, run_done);
    if (power_) {
      const bool ddr = in_region(kDdrRegion, addr);
      const Stat s = ddr ? (write_side ? Stat::ddr_io_bytes_written : Stat::ddr_io_bytes_read)
                         : (write_side ? Stat::ocm_dma_bytes_written : Stat::ocm_dma_bytes_read);
      power_->spread(s, t0 - power_base_, run_done - power_base_, ddr ? whole_bursts(bytes, ddr_burst_) : bytes);
    }
#ifndef GPNPU_NO_TRACE_HOOKS
    if (on_event)
      on_event(DmaEvent{DmaEvent::transfer, ch, &d, t0, run_done, addr, bytes, write_side, span ? span->begin : 0,
                        span ? span->end : 0});
#else
    (void)ch;
#endif
  };
  for_runs(d.src, d, d.src_stride, d.src_plane_stride, timing);
  write_side = true;
  for_runs(d.dst, d, d.dst_stride, d.dst_plane_stride, timing);
  sc_core::wait(clock_.to_time(done) - sc_core::sc_time_stamp());
  if (!functional_) return;

  // Payload: the source's bytes in order to the destination's in order. Between DDR and
  // OCM (two memories: no overlap) in pieces of kPieceBytes, which stay in the cache
  // between their read and their write; within one memory the whole source first (the
  // ranges may overlap).
  struct Run {
    uint64_t addr, bytes;
  };
  std::vector<Run> src, dst;
  for_runs(d.src, d, d.src_stride, d.src_plane_stride, [&](uint64_t a, uint64_t n) { src.push_back({a, n}); });
  for_runs(d.dst, d, d.dst_stride, d.dst_plane_stride, [&](uint64_t a, uint64_t n) { dst.push_back({a, n}); });
  for (const Run& r : dst)
    if (before_ocm_write && in_region(kOcmRegion, r.addr)) before_ocm_write(r.addr - kOcmRegion.base, r.bytes);
  const uint64_t piece = in_region(kOcmRegion, d.src) != in_region(kOcmRegion, d.dst) ? kPieceBytes : d.bytes();
  buffer_.resize(std::min<uint64_t>(piece, d.bytes()));
  // Moves the next `n` bytes of `runs` (from run i, byte k) between them and the buffer.
  auto move = [&](tlm::tlm_command cmd, const std::vector<Run>& runs, size_t& i, uint64_t& k, uint64_t n) {
    for (uint64_t off = 0; off < n;) {
      const uint64_t m = std::min(n - off, runs[i].bytes - k);
      trans.set_command(cmd);
      trans.set_address(runs[i].addr + k);
      trans.set_data_ptr(buffer_.data() + off);
      trans.set_data_length(unsigned(m));
      socket->transport_dbg(trans);
      off += m, k += m;
      if (k == runs[i].bytes) ++i, k = 0;
    }
  };
  size_t si = 0, di = 0;
  uint64_t sk = 0, dk = 0;
  for (uint64_t done_bytes = 0, total = d.bytes(); done_bytes < total;) {
    const uint64_t n = std::min<uint64_t>(buffer_.size(), total - done_bytes);
    move(tlm::TLM_READ_COMMAND, src, si, sk, n);
    move(tlm::TLM_WRITE_COMMAND, dst, di, dk, n);
    done_bytes += n;
  }
}

}  // namespace gpnpu::sim
