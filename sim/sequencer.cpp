#include "sim/sequencer.h"

#include "isa/execute.h"

#include <algorithm>
#include <cmath>

#include "isa/error.h"
#include "sim/bus.h"
#include "sim/config.h"
#include "sim/dma.h"

namespace gpnpu::sim {

using isa::Effect;
using isa::Unit;

namespace {
// Unit classes that share one piece of hardware also share its free cycle: both
// MAC forms run on the same MAC array, and the three OCM forms use one port.
constexpr int resource(Unit u) {
  switch (u) {
    case Unit::mac8: return int(Unit::mac16);
    case Unit::ocm_bc:
    case Unit::ocm_wr: return int(Unit::ocm_rd);
    default: return int(u);
  }
}
}  // namespace

Sequencer::Sequencer(sc_core::sc_module_name name, const Clock& clock, DmaEngine& dma, Bus& bus)
    : sc_module(name), clock_(clock), dma_(dma), bus_(bus) {
  SC_HAS_PROCESS(Sequencer);
  SC_THREAD(thread);
}

void Sequencer::prepare(const Config& cfg, isa::ArchState& state, const isa::Program& program, Stats& stats,
                        bool timing_only) {
  cfg_ = &cfg;
  st_ = &state;
  program_ = &program;
  insns_ = program.decode();
  stats_ = &stats;
  stats_->names = program.names;
  timing_only_ = timing_only;
  done_ = false;
  error_.clear();
}

void Sequencer::thread() {
  for (;;) {
    while (!pending_) sc_core::wait(start_);
    pending_ = false;
    try {
      execute();
    } catch (const Error& e) {
      error_ = e.what();
      // Let descriptors already queued finish, so the next run starts with idle channels.
      dma_.wait_all_idle();
    }
    done_ = true;
    sc_core::sc_pause();
  }
}

void Sequencer::sync(Cycles t) {
  sc_core::sc_time target = clock_.to_time(base_ + t);
  if (target > sc_core::sc_time_stamp()) sc_core::wait(target - sc_core::sc_time_stamp());
}

std::string Sequencer::where(uint32_t pc, Cycles t) const {
  std::string insn = "?";
  if (pc < insns_.size()) {
    isa::DisasmContext ctx;
    ctx.name_of = [this](uint32_t id) { return id < program_->names.size() ? program_->names[id] : "?"; };
    insn = isa::disassemble(insns_[pc], pc, ctx);
  }
  std::string line = pc < program_->lines.size() ? fmt::format(" ({}:{})", program_->source, program_->lines[pc]) : "";
  std::string mark = stats_->current_region();
  return fmt::format("pc {}{} `{}`{}, cycle {}", pc, line, insn, mark.empty() ? "" : fmt::format(" in mark \"{}\"", mark), t);
}

void Sequencer::check_channel(uint32_t ch, uint32_t pc, Cycles t) const {
  if (ch >= dma_.channels())
    fail("{}: DMA channel c{} does not exist (dma_channels = {})", where(pc, t), ch, dma_.channels());
}

void Sequencer::start_dma(const isa::Insn& in, uint32_t pc, Cycles t) {
  const isa::DmaDescriptor& d = st_->dma;
  uint32_t ch = st_->effect_arg;
  check_channel(ch, pc, t);
  auto span = [&](uint32_t stride, uint32_t pstride) {
    return uint64_t(d.planes - 1) * pstride + uint64_t(d.rows - 1) * stride + d.row_bytes;
  };
  auto route = [&](const char* side, uint32_t addr, uint64_t bytes) {
    const Bus::Route* r = bus_.find(addr, bytes);
    if (!r) {
      std::string map;
      for (const Bus::Route& x : bus_.routes())
        map += fmt::format(" {} [0x{:08x}, 0x{:08x})", x.region.name, x.region.base, x.region.base + x.size);
      fail("{}: DMA {} [0x{:08x}, 0x{:08x}) is not inside one memory region (memory map:{})", where(pc, t), side,
           addr, uint64_t(addr) + bytes, map);
    }
    return r;
  };
  const Bus::Route* src = route("source", d.src, span(d.src_stride, d.src_plane_stride));
  const Bus::Route* dst = route("destination", d.dst, span(d.dst_stride, d.dst_plane_stride));
  // max_cycles holds in every wait, DMA included: a descriptor whose slowest port
  // alone (a lower bound of its time) would take it past max_cycles fails at its
  // dma.start, instead of simulating 2^31 rows before dma.wait returns.
  auto port_cycles = [&](const Bus::Route* r, uint32_t stride, uint32_t pstride) {
    const long double row = d.row_bytes;
    const bool rows_contig = d.rows == 1 || stride == d.row_bytes;
    const bool planes_contig = rows_contig && (d.planes == 1 || uint64_t(pstride) == uint64_t(d.row_bytes) * d.rows);
    const long double runs = planes_contig ? 1.0L : rows_contig ? (long double)d.planes : (long double)d.planes * d.rows;
    const long double run = planes_contig ? row * d.rows * d.planes : rows_contig ? row * d.rows : row;
    if (r->region.name == "DDR") {
      const long double burst = (long double)cfg_->ddr_burst_bytes;
      return runs * std::ceil(run / burst) * burst / cfg_->ddr_bytes_per_cycle();
    }
    return runs * run / (long double)cfg_->ocm_dma_bytes;
  };
  const long double need = std::max(port_cycles(src, d.src_stride, d.src_plane_stride),
                                    port_cycles(dst, d.dst_stride, d.dst_plane_stride));
  if ((long double)t + need > (long double)cfg_->max_cycles)
    fail("{}: dma.start c{}: the descriptor (row_bytes {}, rows {}, planes {}) needs at least {:.0f} cycles on its "
         "ports, past max_cycles = {} (check its rows and planes, or raise --set max_cycles=N)",
         where(pc, t), ch, d.row_bytes, d.rows, d.planes, double(need), cfg_->max_cycles);
  Counters& tot = stats_->total;
  if (src->region.name == "DDR") tot[Stat::ddr_bytes_read] += d.bytes();
  if (dst->region.name == "DDR") tot[Stat::ddr_bytes_written] += d.bytes();
  tot[Stat::dma_descriptors]++;
  tot[Stat::dma_bytes] += d.bytes();
  (void)in;
  dma_.submit(ch, d);
}

void Sequencer::execute() {
  // The hook is looked at once per run: without it the issue loop is compiled with
  // no trace code at all (a per-instruction check cost 10% on array-bound
  // timing-only runs, docs/performance.md).
#ifndef GPNPU_NO_TRACE_HOOKS
  if (on_issue) return execute_loop<true>();
#endif
  execute_loop<false>();
}

template <bool kHooks>
void Sequencer::execute_loop() {
  const Config& cfg = *cfg_;
  isa::ArchState& st = *st_;
  Counters& tot = stats_->total;
  base_ = clock_.now();
  std::array<Cycles, isa::kNumRegs> ready{};
  std::array<Cycles, isa::kNumUnits> unit_free{};
  std::array<uint32_t, isa::kNumUnits> lat{}, occ{};
  for (int u = 0; u < isa::kNumUnits; ++u) {
    lat[u] = cfg.lat(Unit(u));
    occ[u] = cfg.occ(Unit(u));
  }
  const Cycles max_cycles = cfg.max_cycles, quantum = cfg.quantum_cycles;
  const uint32_t port = uint32_t(cfg.ocm_port_bytes);
  Cycles now = 0, last_done = 0, array_busy_until = 0, next_sync = quantum;
  // Lazy broadcasts only where nobody looks at the registers between instructions
  // (no trace hooks); every register is written out when the run ends, however it ends.
  st.lazy_broadcast = !kHooks && !timing_only_;
  struct WriteOut {
    isa::ArchState& st;
    ~WriteOut() {
      st.materialise_all();
      st.lazy_broadcast = false;
    }
  } write_out{st};
  uint32_t pc = 0;
  const uint32_t n = uint32_t(insns_.size());

  for (;;) {
    if (pc >= n) fail("{}: pc {} is past the end of the program ({} instructions); end it with `halt`", where(pc ? pc - 1 : 0, now), pc, n);
    const isa::Insn& in = insns_[pc];
    const int u = int(in.info->unit), r = resource(in.info->unit);
    Cycles t = std::max(now, unit_free[r]);
    for (int k = 0; k < in.nsrc; ++k) t = std::max(t, ready[in.src[k]]);
    for (int k = 0; k < in.ndst; ++k) t = std::max(t, ready[in.dst[k]]);  // in-order writes

    st.pc = pc;
    st.next_pc = pc + 1;
    st.effect = Effect::none;
    try {
      if (!(timing_only_ && isa::is_array_compute(Unit(u)))) isa::execute(st, in);
    } catch (const Error& e) {
      fail("{}: {}", where(pc, t), e.what());
    }
    const bool taken = st.next_pc != pc + 1;
    st.advance();

    Cycles o = occ[u], l = lat[u];
    if (in.info->mem_bytes && u >= int(Unit::ocm_bc)) {
      uint64_t bytes = uint64_t(in.info->mem_bytes) * (u == int(Unit::ocm_bc) ? 1 : st.pred_count[in.p]);
      o = std::max<Cycles>(o, (bytes + port - 1) / port);
      l += o;
    }
    if (u == int(Unit::mac16) || u == int(Unit::mac8)) tot[Stat::macs] += uint64_t(st.pred_count[in.p]) * isa::kLanes;

    switch (st.effect) {
      case Effect::none: break;
      case Effect::dma_start:
        sync(t);
        start_dma(in, pc, t);
        t = std::max(t, clock_.now() - base_);
        break;
      case Effect::dma_wait:
        check_channel(st.effect_arg, pc, t);
        sync(t);
        dma_.wait_idle(st.effect_arg);
        t = std::max(t, clock_.now() - base_);
        break;
      case Effect::dma_waitall:
        sync(t);
        dma_.wait_all_idle();
        t = std::max(t, clock_.now() - base_);
        break;
      case Effect::mark_begin: stats_->begin(st.effect_arg, t); break;
      case Effect::mark_end:
        // The region ends when everything issued in it has completed.
        if (!stats_->end(st.effect_arg, std::max(t, last_done))) {
          std::string open = stats_->current_region();
          fail("{}: mark.end \"{}\" does not close the innermost open mark ({})", where(pc, t),
               program_->names.at(st.effect_arg), open.empty() ? "none is open" : "\"" + open + "\" is");
        }
        if (on_mark_end) on_mark_end(st.effect_arg, std::max(t, last_done));
        break;
      case Effect::halt: break;
    }

    tot[Stat::stall_cycles] += t - now;
    tot[Stat::instructions]++;
    tot.by_unit[u]++;
    unit_free[r] = t + o;
    for (int k = 0; k < in.ndst; ++k) ready[in.dst[k]] = t + l;
    last_done = std::max(last_done, t + l);
    if (isa::is_array_unit(Unit(u))) {
      Cycles b = std::max(t, array_busy_until);
      if (t + o > b) tot[Stat::array_busy_cycles] += t + o - b;
      array_busy_until = std::max(array_busy_until, t + o);
    }
    if constexpr (kHooks) on_issue(IssueEvent{pc, t, &in, &st});

    now = t + 1;
    if (taken && u == int(Unit::branch)) now += cfg.branch_taken_cycles;
    if (st.effect == Effect::halt) {
      if (stats_->open_regions())
        fail("{}: halt with mark \"{}\" still open; close it with mark.end", where(pc, t), stats_->current_region());
      sync(now);
      dma_.wait_all_idle();
      Cycles end = std::max({now, last_done, clock_.now() - base_});
      tot[Stat::cycles] = end;
      sync(end);
      return;
    }
    if (now > max_cycles)
      fail("{}: the run passed max_cycles = {} (an endless loop? raise it with --set max_cycles=N)", where(pc, t), max_cycles);
    if (now >= next_sync) {
      sync(now);
      next_sync = now + quantum;
    }
    pc = st.next_pc;
  }
}

}  // namespace gpnpu::sim
