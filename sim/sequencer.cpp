#include "sim/sequencer.h"

#include "isa/execute.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "isa/error.h"
#include "sim/bus.h"
#include "sim/machine/config.h"
#include "sim/machine/timing.h"
#include "sim/dma.h"
#include "sim/port_model.h"

namespace gpnpu::sim {

using isa::Effect;
using isa::Unit;

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
    dma_.trace_power(nullptr, 0, 1);
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
  // The DDR moves whole bursts of every contiguous run (the port's rule); the DMA engine
  // puts the same counts into the power windows as the runs move.
  auto bursts = [&](uint32_t base, uint32_t stride, uint32_t pstride) {
    uint64_t n = 0;
    for_runs(base, d, stride, pstride, [&](uint64_t, uint64_t bytes) { n += whole_bursts(bytes, cfg_->ddr_burst_bytes); });
    return n;
  };
  if (src->region.name == "DDR") {
    tot[Stat::ddr_bytes_read] += d.bytes();
    tot[Stat::ddr_io_bytes_read] += bursts(d.src, d.src_stride, d.src_plane_stride);
  } else {
    tot[Stat::ocm_dma_bytes_read] += d.bytes();
  }
  if (dst->region.name == "DDR") {
    tot[Stat::ddr_bytes_written] += d.bytes();
    tot[Stat::ddr_io_bytes_written] += bursts(d.dst, d.dst_stride, d.dst_plane_stride);
  } else {
    tot[Stat::ocm_dma_bytes_written] += d.bytes();
  }
  tot[Stat::dma_descriptors]++;
  tot[Stat::dma_bytes] += d.bytes();
  (void)in;
  dma_.submit(ch, d);
}

namespace {

// Scoreboard ids beyond the architectural ones: kNoReg is never written (ready at 0),
// kSinkReg is never read; an instruction's operand lists are padded with them so that
// the issue loop runs no loop of variable length.
constexpr uint8_t kNoReg = isa::kNumRegs, kSinkReg = isa::kNumRegs + 1;
constexpr int kReads = 5;          // distinct registers read or written, predicate included (vsel: 5)
constexpr uint8_t kRun = 0x80;     // IssueRec flag: execute the semantics in this run
constexpr uint8_t kCostPe = 0x40;  // IssueRec flag: cost_of() at issue (depends on the active PEs)
constexpr uint8_t kGroups = 0x20;  // IssueRec flag: a grouped broadcast (its port bytes counted at issue)

// The PE groups of a grouped broadcast (obcast.g: xd PEs a group) that hold a PE its predicate
// enables: the rows the OCM port reads (Timing::cost_of). 1 for any other instruction.
uint32_t pe_groups(const isa::ArchState& st, const isa::Insn& in, uint8_t flags) {
  const uint32_t g = st.x[in.d];
  if (!(flags & kGroups) || !g || !st.pred_count[in.p]) return 1;
  return st.pred_last[in.p] / g - st.pred_first[in.p] / g + 1;
}

// What an instruction adds to the counters at each issue, besides stalls and busy
// cycles: its unit's count and its energy events (sim/energy.h), lane operations per
// unit class, vector-register words read and written, LRM and OCM-port bytes, each
// per_pe x PEs + fixed. Counted from the unit, the operands and the enabled PEs only, so
// timing-only runs count the same. Instructions with equal counts share a class.
struct EventClass {
  uint8_t unit = 0;
  bool array = false;
  uint8_t vreads = 0, vwrites = 0;  // vector-register words per enabled PE
  int8_t event = -1, event2 = -1;   // the unit's event stats
  uint8_t per_pe = 0, fixed = 0;
  bool operator==(const EventClass&) const = default;
};
static_assert(kNumStats <= 127);

EventClass event_class(const isa::Insn& in) {
  EventClass c;
  const Unit u = in.info->unit;
  c.unit = uint8_t(u);
  c.array = isa::is_array_unit(u);
  if (!c.array) return c;
  for (int k = 0; k < in.nsrc; ++k) c.vreads += in.src[k] >= isa::kRegV && in.src[k] < isa::kRegP;
  for (int k = 0; k < in.ndst; ++k) c.vwrites += in.dst[k] >= isa::kRegV && in.dst[k] < isa::kRegP;
  c.vreads *= isa::kLanes;
  c.vwrites *= isa::kLanes;
  const uint8_t bytes = in.info->mem_bytes;
  auto lanes = [&](Stat s, int s2 = -1) { c.event = int8_t(s), c.event2 = int8_t(s2), c.per_pe = isa::kLanes; };
  switch (u) {
    case Unit::mac16: lanes(Stat::macs, int(Stat::macs_f16)); break;
    case Unit::mac8: lanes(Stat::macs, int(Stat::macs_int8)); break;
    case Unit::valu: lanes(Stat::valu_lane_ops); break;
    case Unit::vfpu: lanes(Stat::vfpu_lane_ops); break;
    case Unit::sfu: lanes(Stat::sfu_lane_ops); break;
    case Unit::xlane: lanes(Stat::xlane_lane_ops); break;
    case Unit::lrm: c.event = int8_t(Stat::lrm_bytes), c.per_pe = bytes; break;
    case Unit::ocm_bc: c.event = int8_t(Stat::ocm_array_bytes_read), c.fixed = bytes; break;
    case Unit::ocm_gb: break;  // (a row a group: counted at issue, kGroups)
    case Unit::ocm_rd: c.event = int8_t(Stat::ocm_array_bytes_read), c.per_pe = bytes; break;
    case Unit::ocm_wr: c.event = int8_t(Stat::ocm_array_bytes_written), c.per_pe = bytes; break;
    default: break;
  }
  return c;
}

// What the issue loop reads of an instruction at every issue, looked up once per run
// and packed in 16 bytes (the image program's 510,749 instructions are 8 MiB as
// records, 24 MiB as isa::Insn, which only executed instructions read): scoreboard
// operands, resource, flags, event class, and its cost when that does not depend on
// the active PEs (Timing::cost_of).
struct IssueRec {
  uint8_t reads[kReads];  // distinct scoreboard ids read or written (in-order writes); kNoReg after
  uint8_t p;
  uint8_t writes[2];      // scoreboard ids written; kSinkReg after
  uint8_t resource, flags;  // flags: the unit's (isa/isa.h), kRun, kCostPe
  uint8_t cls;              // EventClass index
  uint8_t pad = 0;
  uint16_t occupancy, latency;  // when !(flags & kCostPe)
};
static_assert(sizeof(IssueRec) == 16);

// Issue counts per event class, added to the totals only where someone reads them
// (power windows, marks, halt, the end of the run however it ends, each issue with
// trace hooks): at each issue the loop adds to one class, not to six counters.
struct ClassCounts {
  const std::vector<EventClass>& classes;
  struct Acc {
    uint64_t n = 0, pes = 0;  // issues, and their enabled PEs summed
  };
  std::vector<Acc> acc = std::vector<Acc>(classes.size());
  uint64_t stall = 0;

  void flush(Counters& tot) {
    tot[Stat::stall_cycles] += stall;
    stall = 0;
    for (size_t k = 0; k < classes.size(); ++k) {
      const EventClass& c = classes[k];
      const Acc a = acc[k];
      if (!a.n) continue;
      acc[k] = {};
      tot[Stat::instructions] += a.n;
      tot.by_unit[c.unit] += a.n;
      if (!c.array) continue;
      tot[Stat::vrf_reads] += c.vreads * a.pes;
      tot[Stat::vrf_writes] += c.vwrites * a.pes;
      const uint64_t events = c.per_pe * a.pes + c.fixed * a.n;
      if (c.event >= 0) tot.v[c.event] += events;
      if (c.event2 >= 0) tot.v[c.event2] += events;
    }
  }
};

// The index of class c in classes, added if new.
uint8_t class_index(std::vector<EventClass>& classes, const EventClass& c) {
  for (size_t k = 0; k < classes.size(); ++k)
    if (classes[k] == c) return uint8_t(k);
  if (classes.size() == 256) fail("internal error: more than 256 instruction event classes");
  classes.push_back(c);
  return uint8_t(classes.size() - 1);
}

IssueRec issue_rec(const isa::Insn& in, const Timing& timing, bool timing_only, std::vector<EventClass>& classes,
                   std::array<int, 256>& class_of_opcode) {
  IssueRec x{};
  const Unit u = in.info->unit;
  const isa::UnitInfo& ui = isa::unit_info(u);
  std::fill(std::begin(x.reads), std::end(x.reads), kNoReg);
  std::fill(std::begin(x.writes), std::end(x.writes), kSinkReg);
  int nr = 0;
  auto read = [&](uint8_t id) {
    if (std::find(x.reads, x.reads + nr, id) != x.reads + nr) return;
    if (nr == kReads) fail("internal error: {} reads or writes more than {} registers", in.info->mnemonic, kReads);
    x.reads[nr++] = id;
  };
  for (int k = 0; k < in.nsrc; ++k) read(in.src[k]);
  for (int k = 0; k < in.ndst; ++k) read(x.writes[k] = in.dst[k]);
  x.p = in.p;
  x.resource = uint8_t(ui.resource);
  x.flags = ui.flags;
  if (!(timing_only && (ui.flags & isa::kCompute))) x.flags |= kRun;
  const Cost c = timing.cost_of(in, 0);
  if (ui.port == isa::Port::ocm_group) x.flags |= kGroups;
  if (ui.port != isa::Port::none && ui.port != isa::Port::ocm_row) x.flags |= kCostPe;
  else if (c.occupancy > UINT16_MAX || c.latency > UINT16_MAX) x.flags |= kCostPe;
  else x.occupancy = uint16_t(c.occupancy), x.latency = uint16_t(c.latency);
  int& cls = class_of_opcode[in.info->opcode];  // a row's class is the same at every pc
  if (cls < 0) cls = class_index(classes, event_class(in));
  x.cls = uint8_t(cls);
  return x;
}

// Timing-only runs skip the steady state of hardware loops. The timing of a loop
// iteration depends only on the scoreboard relative to the issue cycle (every
// register's ready cycle, every unit's free cycle, the array's busy and the last
// completion, each clamped at the issue cycle: a time already past is as good as now),
// on the instructions' costs and on the active PEs. When a body has no branch, DMA,
// mark, predicate write or scalar store, those active PEs do not change between
// iterations, and when two consecutive iterations start from the same relative
// scoreboard, every later one takes the same cycles and adds the same counts. The
// remaining iterations but the last are then skipped in one step: their semantics (the
// scalar updates and address checks that timing-only runs execute) still run, iteration
// by iteration, and an iteration whose semantics fail is not skipped, so the normal
// issue loop reports the error with its pc and cycle. Cycles and stats are the same
// as issuing every instruction (tests/sim/test_loop_skip.cpp).
struct LoopSkip {
  static constexpr int kState = isa::kNumRegs + 1 + isa::kNumUnits + 2;  // + kNoReg; array busy, last done
  using State = std::array<Cycles, kState>;
  std::vector<int8_t>& eligible;  // per loop start pc: -1 unknown, 0 no, 1 yes (kept with the issue records)
  std::vector<uint32_t> run_pcs = {};
  // The previous iteration start of an eligible loop.
  uint32_t start = UINT32_MAX, remaining = 0;
  Cycles now = 0;
  uint64_t stall = 0, busy = 0;
  State state{};

  bool body_eligible(const std::vector<isa::Insn>& insns, const IssueRec* rec, uint32_t begin, uint32_t end) {
    if (eligible.empty()) eligible.assign(insns.size(), -1);
    int8_t& e = eligible[begin];
    if (e < 0) {
      e = 1;
      uint64_t group_regs = 0, written = 0;  // x registers: obcast.g group sizes, scalar writes
      for (uint32_t q = begin; q < end && e; ++q) {
        const isa::Insn& in = insns[q];
        const Unit u = in.info->unit;
        if (u == Unit::branch || u == Unit::ctrl || u == Unit::dma || u == Unit::smem || u == Unit::pred) e = 0;
        if (u == Unit::ocm_gb) group_regs |= uint64_t(1) << in.d;
        for (int k = 0; k < in.ndst; ++k)
          if (in.dst[k] < isa::kRegV) written |= uint64_t(1) << in.dst[k];
        if (rec[q].flags & kRun)
          for (int k = 0; k < in.ndst; ++k) e &= !(in.dst[k] >= isa::kRegP);
      }
      if (group_regs & written) e = 0;  // (an obcast.g's cost then changes between iterations)
    }
    return e;
  }
};

}  // namespace

struct Sequencer::IssueCache {
  Timing timing;
  bool timing_only;
  std::vector<IssueRec> recs;
  std::vector<EventClass> classes;
  std::vector<int8_t> loop_eligible;
};

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
  if (program.words != decoded_words_ || program.names.size() != decoded_names_) {
    decoded_words_.clear();
    insns_ = program.decode();
    redecoded_ = true;
    decoded_words_ = program.words;
    decoded_names_ = program.names.size();
  }
  stats_ = &stats;
  stats_->names = program.names;
  timing_only_ = timing_only;
  done_ = false;
  error_.clear();
}


// The functional model's fp16 numerics since the last mark (isa/state.h) go to the
// innermost open region: between two mark instructions it does not change. Nothing to
// take in timing-only runs (the conversions do not run), and the cost is per mark.
void Sequencer::take_numerics() {
  isa::ArchState& st = *st_;
  Counters& tot = stats_->total;
  tot[Stat::f16_overflow] = st.f16.overflow;
  tot[Stat::f16_underflow] = st.f16.underflow;
  tot[Stat::f16_nan] = st.f16.nan;
  stats_->note_f16_max(st.f16.max_abs);
  st.f16.max_abs = 0;
  if (st.f16_first.set && !stats_->first_nonfinite.set) {
    const isa::ArchState::F16First& f = st.f16_first;
    Stats::F16Event& e = stats_->first_nonfinite;
    e.set = true;
    e.mark = stats_->current_region();
    std::string w = where(f.pc, 0);
    e.where = w.substr(0, std::min(w.find(" in mark"), w.rfind(", cycle")));  // pc, line and instruction
    e.pe = f.pe;
    e.element = f.element;
    e.value = f.value;
  }
}

void Sequencer::execute() {
  // The hook is looked at once per run: without it the issue loop is compiled with
  // no trace code at all (a per-instruction check cost 10% on array-bound
  // timing-only runs, docs/performance.md).
#ifndef GPNPU_NO_TRACE_HOOKS
  if (on_issue) return timing_only_ ? execute_loop<true, true>() : execute_loop<true, false>();
#endif
  timing_only_ ? execute_loop<false, true>() : execute_loop<false, false>();
}

template <bool kHooks, bool kTimingOnly>
void Sequencer::execute_loop() {
  const Config& cfg = *cfg_;
  isa::ArchState& st = *st_;
  Counters& tot = stats_->total;
  base_ = clock_.now();
  std::array<Cycles, isa::kNumRegs + 2> ready{};  // + kNoReg, kSinkReg
  std::array<Cycles, isa::kNumUnits> unit_free{};
  const Timing timing(cfg);
  const Cycles max_cycles = cfg.max_cycles, quantum = cfg.quantum_cycles;
  Cycles now = 0, last_done = 0, array_busy_until = 0, next_sync = quantum;
  // Lazy broadcasts only where nobody looks at the registers between instructions
  // (no trace hooks); every register is written out when the run ends, however it ends.
  st.lazy_broadcast = !kHooks && !kTimingOnly;
  st.uni_yes = st.uni_no = 0;  // (the registers may have changed since the last run)
  st.effect = Effect::none;
  st.f16 = {};
  st.f16_first = {};
  st.f16_saturate = cfg.fp16_overflow == "saturate";
  // PE-block batches likewise (isa/batch.h): run before the lazy broadcasts are written out.
  isa::Batch batch;
  st.batch = st.lazy_broadcast ? &batch : nullptr;
  struct WriteOut {
    isa::ArchState& st;
    ~WriteOut() {
      if (st.batch) st.batch->flush(st);
      st.batch = nullptr;
      st.materialise_all();
      st.end_renames();
      st.lazy_broadcast = false;
    }
  } write_out{st};
  uint32_t pc = 0;
  const uint32_t n = uint32_t(insns_.size());
  if (redecoded_ || !issue_cache_ || !(issue_cache_->timing == timing) || issue_cache_->timing_only != kTimingOnly) {
    auto c = std::make_shared<IssueCache>(IssueCache{timing, kTimingOnly, std::vector<IssueRec>(n), {}, {}});
    std::array<int, 256> class_of_opcode;
    class_of_opcode.fill(-1);
    for (uint32_t k = 0; k < n; ++k) c->recs[k] = issue_rec(insns_[k], timing, kTimingOnly, c->classes, class_of_opcode);
    issue_cache_ = std::move(c);
    redecoded_ = false;
  }
  const std::vector<IssueRec>& recs = issue_cache_->recs;
  ClassCounts counts{issue_cache_->classes};
  struct FlushCounts {  // the counts reach the totals however the run ends
    ClassCounts& counts;
    Counters& tot;
    ~FlushCounts() { counts.flush(tot); }
  } flush_counts{counts, tot};
  // Power windows: the issue-timed counts of each window are the change of the totals
  // across it (the DMA engine fills the dma_timed stats itself).
  PowerTrace& power = stats_->power;
  power = PowerTrace{cfg.power_window_cycles, {}};
  dma_.trace_power(&power, base_, cfg.ddr_burst_bytes);
  Cycles window_start = 0, window_end = power.window;
  std::array<uint64_t, kNumStats> at_window = tot.v;
  auto close_window = [&] {
    counts.flush(tot);
    const size_t k = size_t(window_start / power.window);
    if (power.bins.size() <= k) power.bins.resize(k + 1);
    for (int s = 0; s < kNumStats; ++s)
      if (!dma_timed(Stat(s))) power.bins[k][s] += tot.v[s] - at_window[s];
    at_window = tot.v;
  };
  // The checks of the issue cycle against max_cycles and the next quantum, as one compare.
  const Cycles past_max = max_cycles == std::numeric_limits<Cycles>::max() ? max_cycles : max_cycles + 1;
  Cycles next_check = std::min(next_sync, past_max);

  const IssueRec* const rec = recs.data();
  ClassCounts::Acc* const acc = counts.acc.data();
  Cycles* const rd = ready.data();
  uint32_t loop_end = st.loop_end();
  LoopSkip skip{issue_cache_->loop_eligible};
  skipped_ = 0;
  // At the start of an iteration of the innermost loop (its back edge just taken):
  // compare the relative scoreboard with the previous iteration's, and skip the
  // remaining iterations but the last when they match (LoopSkip above).
  auto skip_iterations = [&] {
    isa::LoopFrame& f = st.loops[st.loop_depth - 1];
    if (!skip.body_eligible(insns_, rec, f.start, f.end)) return;
    LoopSkip::State s;
    size_t k = 0;
    auto rel = [&](Cycles c) { return c > now ? c - now : 0; };
    for (int i = 0; i <= isa::kNumRegs; ++i) s[k++] = rel(rd[i]);
    for (Cycles c : unit_free) s[k++] = rel(c);
    s[k++] = rel(array_busy_until);
    s[k++] = rel(last_done);
    const uint64_t stall = tot[Stat::stall_cycles] + counts.stall, busy = tot[Stat::array_busy_cycles];
    const bool periodic = skip.start == f.start && skip.remaining == f.remaining + 1 && skip.state == s;
    const Cycles d = now - skip.now;
    const uint64_t dstall = stall - skip.stall, dbusy = busy - skip.busy;
    skip.start = f.start, skip.remaining = f.remaining, skip.now = now, skip.stall = stall, skip.busy = busy, skip.state = s;
    if (!periodic) return;
    // Skipped iterations must not reach the next power window or the next check.
    uint64_t m = f.remaining - 1;
    m = std::min<uint64_t>(m, (window_end - now) / d);
    m = std::min<uint64_t>(m, (next_check - 1 - now) / d);
    if (m == 0) return;
    skip.run_pcs.clear();
    for (uint32_t q = f.start; q < f.end; ++q)
      if (rec[q].flags & kRun) skip.run_pcs.push_back(q);
    uint64_t done = 0;
    for (; done < m; ++done) {
      uint32_t x[isa::kXregs];
      std::copy(std::begin(st.x), std::end(st.x), x);
      try {
        for (uint32_t q : skip.run_pcs) {
          st.pc = q;
          st.next_pc = q + 1;
          insns_[q].exec(st, insns_[q]);
        }
      } catch (const Error&) {  // the issue loop runs this iteration and reports it
        std::copy(std::begin(x), std::end(x), st.x);
        break;
      }
    }
    if (done == 0) return;
    const Cycles shift = done * d;
    auto move = [&](Cycles& c) {
      if (c > now) c += shift;
    };
    for (int i = 0; i <= isa::kNumRegs + 1; ++i) move(rd[i]);
    for (Cycles& c : unit_free) move(c);
    move(array_busy_until);
    move(last_done);
    now += shift;
    counts.stall += done * dstall;
    tot[Stat::array_busy_cycles] += done * dbusy;
    for (uint32_t q = f.start; q < f.end; ++q) {
      acc[rec[q].cls].n += done;
      acc[rec[q].cls].pes += done * st.pred_count[rec[q].p];
      if (rec[q].flags & kGroups)  // (its xd and predicate are the same every iteration)
        tot[Stat::ocm_array_bytes_read] +=
            done * timing.cost_of(insns_[q], st.pred_count[rec[q].p], pe_groups(st, insns_[q], rec[q].flags)).port_bytes;
    }
    f.remaining -= uint32_t(done);
    skipped_ += done;
    skip.start = UINT32_MAX;
  };
  for (;;) {
    if (pc >= n) fail("{}: pc {} is past the end of the program ({} instructions); end it with `halt`", where(pc ? pc - 1 : 0, now), pc, n);
    const IssueRec& x = rec[pc];
    const int r = x.resource;
    const bool array = x.flags & isa::kArray;
    // The issue cycle: the resource is free, every source is ready and every
    // destination's last write has completed (in-order writes). A tree of maxima:
    // this is the loop's dependency chain from one issue to the next.
    const Cycles m01 = std::max(rd[x.reads[0]], rd[x.reads[1]]), m23 = std::max(rd[x.reads[2]], rd[x.reads[3]]);
    const Cycles m4 = std::max(rd[x.reads[4]], unit_free[r]);
    Cycles t = std::max(std::max(m01, m23), std::max(m4, now));

    if (t >= window_end) [[unlikely]] {
      close_window();
      window_start = t / power.window * power.window;
      window_end = window_start + power.window;
    }

    // The next pc: only executed instructions branch, set an effect or open a hardware
    // loop; the innermost loop's end is kept in loop_end, and the loop rule
    // (ArchState::advance) runs only when the next pc reaches it.
    uint32_t next = pc + 1;
    bool taken = false, effect = false;
    if (kHooks || (x.flags & kRun)) {  // the hooks see pc and next_pc of every instruction
      st.pc = pc;
      st.next_pc = next;
    }
    if (x.flags & kRun) {
      const isa::Insn& in = insns_[pc];
      try {
        // Timing-only runs have no lazy broadcasts and no batches: the semantics alone.
        if constexpr (kTimingOnly) in.exec(st, in);
        else isa::execute(st, in);
      } catch (const Error& e) {
        fail("{}: {}", where(pc, t), e.what());
      }
      taken = st.next_pc != next;
      next = st.next_pc;
      effect = st.effect != Effect::none;
      loop_end = st.loop_end();
    }
    bool back_edge = false;
    if (next == loop_end) [[unlikely]] {
      st.next_pc = next;
      st.advance();
      next = st.next_pc;
      loop_end = st.loop_end();
      back_edge = st.loop_depth > 0 && next == st.loops[st.loop_depth - 1].start;
    }

    const uint32_t pes = st.pred_count[x.p];
    Cost cost{isa::Unit(r), x.occupancy, x.latency, 0};
    if (kHooks || (x.flags & kCostPe)) cost = timing.cost_of(insns_[pc], pes, pe_groups(st, insns_[pc], x.flags));
    if (x.flags & kGroups) tot[Stat::ocm_array_bytes_read] += cost.port_bytes;
    const Cycles o = cost.occupancy, l = cost.latency;

    if (effect) [[unlikely]] {
      switch (st.effect) {
        case Effect::none: break;
        case Effect::dma_start:
          sync(t);
          start_dma(insns_[pc], pc, t);
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
        case Effect::mark_begin:
          counts.flush(tot);
          take_numerics();
          stats_->begin(st.effect_arg, t);
          break;
        case Effect::mark_end:
          counts.flush(tot);
          take_numerics();
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
    }

    counts.stall += t - now;
    acc[x.cls].n++;
    acc[x.cls].pes += pes;
    unit_free[r] = t + o;
    rd[x.writes[0]] = rd[x.writes[1]] = t + l;
    last_done = std::max(last_done, t + l);
    if (array) {
      Cycles b = std::max(t, array_busy_until);
      if (t + o > b) tot[Stat::array_busy_cycles] += t + o - b;
      array_busy_until = std::max(array_busy_until, t + o);
    }
    if constexpr (kHooks) {
      counts.flush(tot);
      on_issue(IssueEvent{pc, t, &insns_[pc], &st, cost});
    }

    now = t + 1;
    if (taken && (x.flags & isa::kBranch)) now += cfg.branch_taken_cycles;
    if (effect) [[unlikely]] {
      if (st.effect == Effect::halt) {
        counts.flush(tot);
        if (stats_->open_regions())
          fail("{}: halt with mark \"{}\" still open; close it with mark.end", where(pc, t), stats_->current_region());
        take_numerics();
        sync(now);
        dma_.wait_all_idle();
        Cycles end = std::max({now, last_done, clock_.now() - base_});
        tot[Stat::cycles] = end;
        close_window();
        sync(end);
        return;
      }
      st.effect = Effect::none;  // the semantics set it only when there is one
    }
    if (now >= next_check) [[unlikely]] {
      if (now > max_cycles)
        fail("{}: the run passed max_cycles = {} (an endless loop? raise it with --set max_cycles=N)", where(pc, t), max_cycles);
      if (now >= next_sync) {
        sync(now);
        next_sync = now + quantum;
      }
      next_check = std::min(next_sync, past_max);
    }
    if constexpr (kTimingOnly && !kHooks)
      if (back_edge) [[unlikely]] skip_iterations();
    pc = next;
  }
}

}  // namespace gpnpu::sim
