#include "kernels/gemm.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>

#include "isa/error.h"
#include "isa/fp16.h"
#include "kernels/elementwise.h"
#include "sim/machine/memory_map.h"

namespace gpnpu::kernels {

namespace {
constexpr uint32_t kBlock = 128;
constexpr uint32_t kMaxRows = 16;  // accumulators v0..v15
// A unit sits kUnitPad bytes into its OCM buffer, so the odd-PE meta scatter of split 2
// (base 2*nblk bytes below the unit) stays inside the buffer.
constexpr uint32_t kUnitPad = 128;
uint32_t ceil_div(uint32_t a, uint32_t b) { return (a + b - 1) / b; }
uint32_t meta_lrm_bytes(uint32_t p) { return ceil_div(p, 8) * 32; }
// `bufs` LRM buffers of nblk blocks at split s (64/s code bytes per block) + look-ahead pad.
uint32_t lrm_need(uint32_t nblk, uint32_t s, uint32_t bufs = 2) {
  return bufs * (meta_lrm_bytes(nblk) + 64 / s * nblk) + 64;
}
// OCM buffer of DMA channel c: unit 0 (meta + first codes) always lands on channel 0, sized for
// the call's units (a call of one narrow tile: its own columns', 64x64 at 2 MiB: the mergers' fc1
// chunks of 1,024 columns at K = 4,096, 262 KB, not 524); the others for full code units.
uint32_t unit_buffer(const GemmPlan& pl, uint32_t c) {
  const bool narrow = c == 0 && pl.tiles == 1 && pl.tail_cols;
  return (kUnitPad + (c == 0 ? pl.meta_of(narrow) : 0) + pl.code_of(narrow) + 32 + 63) / 64 * 64;
}
// Staged code units (GemmArgs::stage_ocm, prestaged) lie this far apart in OCM: no pad around
// them (a code unit's scatter reads only its own bytes).
uint32_t staged_stride(const GemmPlan& pl) { return (pl.code_of(false) + 63) / 64 * 64; }
// The channels' buffers sit where they sit in every call on the machine and scratch
// region, so a call can start the next call's unit c on channel c as soon as its own
// last unit there is consumed: channel 0 (the meta unit, whose size differs between
// calls) at the region's start, channel c >= 1 (code units: npe * 64 B in every call) at
// D - c code buffers from the region's end, D = cfg.dma_channels.
// two: on one channel, a second buffer right after channel 0's (two_buffers).
uint32_t buffers_bytes(const sim::Config& cfg, const GemmPlan& pl, bool two = false) {
  return unit_buffer(pl, 0) + uint32_t(cfg.dma_channels - 1 + (two ? 1 : 0)) * unit_buffer(pl, 1);
}
// OCM offset of channel c's unit data.
uint32_t unit_data(const sim::Config& cfg, const GemmPlan& pl, const GemmArgs& a, uint32_t c) {
  if (c == 0) return a.scratch_ocm + kUnitPad;
  return a.scratch_ocm + a.scratch_bytes / 64 * 64 - uint32_t(cfg.dma_channels - c) * unit_buffer(pl, 1) + kUnitPad;
}
// One DMA channel and an even unit count: unit u streams into buffer u % 2 (channel 0's, then
// the one after it), so unit u + 1 starts as soon as unit u has arrived, before unit u is
// scattered (dma.wait waits for every descriptor queued on the channel, so the next is queued
// only after it returns); with one buffer the DDR idled through every unit's scatter.
// Where the scratch has room for the second buffer (gemm_scratch_bytes with two).
bool two_buffers(const sim::Config& cfg, const GemmPlan& pl, const GemmArgs& a) {
  return cfg.dma_channels == 1 && pl.units % 2 == 0 && buffers_bytes(cfg, pl, true) <= a.scratch_bytes;
}
// OCM offset of unit u's data (the unit's channel's buffer, or its buffer of two).
uint32_t unit_at(const sim::Config& cfg, const GemmPlan& pl, const GemmArgs& a, uint32_t u) {
  if (two_buffers(cfg, pl, a) && u % 2) return a.scratch_ocm + unit_buffer(pl, 0) + kUnitPad;
  return unit_data(cfg, pl, a, u % pl.channels);
}
// One LRM buffer (meta, then the codes of the PE's k) and where a call's two sit.
uint32_t lrm_buffer(const GemmPlan& pl) { return pl.meta_lrm + 64 / pl.split * pl.blocks; }
std::pair<uint32_t, uint32_t> lrm_buffers(const GemmPlan& pl, const GemmArgs& a) {
  if (pl.single) return {a.lrm_p, a.lrm_p};
  if (a.lrm_p == 0 && a.lrm_q == 0) return {0, lrm_buffer(pl)};
  return {a.lrm_p, a.lrm_q};
}
// The DMA side's buffers, descriptors and weight range (shared by the kernel and the prefetch).
void check_dma(const sim::Config& cfg, const GemmPlan& pl, const GemmArgs& a) {
  const uint32_t need = buffers_bytes(cfg, pl), C = pl.channels;
  if (need > a.scratch_bytes || uint64_t(a.scratch_ocm) + a.scratch_bytes > cfg.ocm_bytes)
    fail("gemm: the DMA buffers need {} bytes of OCM scratch ({} channel buffers, {} B each after the first), got {} "
         "at {} (gemm_scratch_bytes)",
         need, cfg.dma_channels, unit_buffer(pl, 1), a.scratch_bytes, a.scratch_ocm);
  const uint32_t descs = std::max<uint32_t>(C, two_buffers(cfg, pl, a) ? 2 : 1);
  if (a.smem + 64 * descs > cfg.smem_bytes)
    fail("gemm: descriptors need smem [{}, {}) inside {} bytes", a.smem, a.smem + 64 * descs, cfg.smem_bytes);
  if (uint64_t(a.w_ddr) + pl.weight_bytes() > uint64_t(UINT32_MAX))
    fail("gemm: the packed weight at 0x{:x} ({} bytes) passes the 32-bit bus", a.w_ddr, pl.weight_bytes());
}
// Fill pieces inside a routine's MAC loop (emit_gemm_w4): PEs per piece (2 cycles of the
// OCM port: the best of 1, 2, 4 and 8 measured on the 2B image program; 4 where a unit in
// pieces of 2 takes more iterations than a row group's loop has, or, at split 2, longer than
// the DDR takes to bring the other channels' units: 64x64, 2 MiB, 128 GB/s 34.13 -> 33.47 M
// cycles; 4 everywhere at split 2 lost at qc-u, 80.77 -> 80.85 M; doubled up to 16 where a unit
// takes more iterations still: the 2B tower's proj, two row sets at split 2 on 64x64, 16 rows
// a group, hands its fc1's units off in pieces of 64 PEs; 8 MiB, 128 GB/s, 22.74 -> 22.24 K
// cycles a block, the pair in Gemm.TwoRowSetsHandOffAWideTileInsideTheLoop), pieces per loop
// iteration at rr rows (the loop's free issue slots: occ.mac16 per vmac.f16, less the
// vmac, its broadcast, split 2's shift and the next weights' (a code load and a dequantise
// an iteration, the block's meta and pointers once a trip of 8 / split iterations: at most 3
// at split 1, 4 at split 2), at 4 instructions a piece, at most one per 4 rows), and the
// iterations one unit (npe x UB bytes) takes (whole trips). mult: pieces that many times
// wider (emit_gemm_w4: where a row group's loop has no room for its units otherwise).
uint32_t pieces_per_iter(const sim::Config& cfg, const GemmPlan& pl, uint32_t rr);
uint32_t piece_pes(const sim::Config& cfg, const GemmPlan& pl, uint32_t rr, uint32_t mult) {
  const uint32_t two = std::max<uint32_t>(1, 2 * uint32_t(cfg.ocm_port_bytes) / pl.unit_pe),
                 per = std::max(1u, pieces_per_iter(cfg, pl, rr)), limit = 8 / pl.split * pl.blocks;
  auto iters = [&](uint32_t pes) { return ceil_div(ceil_div(cfg.npe(), pes), per); };
  const double loop = double(iters(two)) * rr * cfg.occ(isa::Unit::mac16),
               ddr = double(pl.channels - 1) * pl.code_unit / cfg.ddr_bytes_per_cycle();
  uint32_t pes = iters(two) <= limit && (pl.split == 1 || loop <= ddr) ? two : 2 * two;
  while (iters(pes) > limit && pes < 8 * two) pes *= 2;
  return pes * mult;
}
// (A row slot issues its vmac, broadcast and shift: 2 at split 1, 3 at split 2, two row sets
// too: one grouped broadcast, obcast.g, for both rows. A sub-array whose upper rows would read
// past the OCM broadcasts them in turn, 4 a slot: its pieces then stretch the loop.)
uint32_t pieces_per_iter(const sim::Config& cfg, const GemmPlan& pl, uint32_t rr) {
  const uint32_t slot = pl.split == 1 ? 2 : 3;
  const int64_t free =
      int64_t(cfg.occ(isa::Unit::mac16)) * rr - int64_t(rr) * slot - (pl.split == 1 ? 3 : 4);
  return uint32_t(std::clamp<int64_t>(free / 4, 0, rr / 4));
}
uint32_t unit_iters(const sim::Config& cfg, const GemmPlan& pl, uint32_t rr, uint32_t mult = 1) {
  const uint32_t trip = 8 / pl.split,
                 pieces = ceil_div(cfg.npe(), piece_pes(cfg, pl, rr, mult));
  return ceil_div(ceil_div(pieces, std::max(1u, pieces_per_iter(cfg, pl, rr))), trip) * trip;
}
// The most tile-0 units (the last ones) a call of plan pl can scatter during its first
// row group of rr rows, one per unit_iters segment, each in LRM before the loop's look-
// ahead load first reads it (unit d at iteration u d - 1, u = unit_pe / 8 iterations a unit).
uint32_t max_stream_units(const sim::Config& cfg, const GemmPlan& pl, uint32_t rr) {
  if (!pieces_per_iter(cfg, pl, rr)) return 0;
  const uint32_t seg = unit_iters(cfg, pl, rr), U = pl.units, per_unit = pl.unit_pe / 8;
  uint32_t best = 0;
  for (uint32_t j = 1; j + 1 <= U; ++j) {
    bool ok = true;
    for (uint32_t s = 0; s < j && ok; ++s) ok = int64_t(s + 1) * seg <= per_unit * int64_t(U - j + s) - 1;
    if (ok) best = j;
  }
  return best;
}
// The MAC cycles of a call's last tile (plan of its rows): the DDR time its hand-off has.
double last_tile_mac_cycles(const sim::Config& cfg, const GemmPlan& pm) {
  const double rows = double(pm.groups - 1) * pm.rows + pm.slots(pm.last_rows);
  return rows * (8.0 / pm.split * pm.blocks) * cfg.occ(isa::Unit::mac16);
}
// Two calls ahead (gemm_two_ahead, emit_gemm_w4): next (plan pn) one wide tile in whole rounds of
// the C channels, handed off whole, on one buffer a channel, and the call after it (p2) on the
// same channels and unit size with a wide tile 0.
bool two_ahead_shapes(const sim::Config& cfg, const GemmPlan& pn, const GemmPlan& p2, uint32_t C, uint32_t unit_pe,
                      const GemmArgs& next) {
  return C >= 2 && next.handed_off && !next.handed_units && pn.tiles == 1 && !pn.tail_at(0) && pn.units % C == 0 &&
         pn.channels == C && p2.channels == C && !p2.tail_at(0) && p2.unit_pe == unit_pe &&
         !two_buffers(cfg, pn, next);
}
// An instruction a row group's MAC loop issues between its vmacs (emit_gemm_w4's body): after
// the ones before it, and `dist` slots or more after each of `deps` (their latency: a slot is a
// vmac's occ.mac16 cycles); by_end: its result is read by the next iteration's first vmac.
struct Extra {
  std::function<void()> emit;
  std::vector<std::pair<size_t, uint32_t>> deps;
  bool by_end = false;
  uint32_t from = 0;  // (no earlier slot)
};
// The slot of a group's rr (0..rr - 1; rr: after the last) each of `extra` issues in: the
// first from its earliest where the slot issues fewer than `room` instructions besides its vmac
// (load[j]: how many slot j issues, counted on), so that none stretches its slot; where none
// has room, its earliest (a cycle more).
std::vector<uint32_t> issue_plan(const std::vector<Extra>& extra, uint32_t room, uint32_t* load, uint32_t rr) {
  std::vector<uint32_t> at(extra.size());
  for (size_t i = 0; i < extra.size(); ++i) {
    uint32_t lo = std::max(i ? at[i - 1] : 0, extra[i].from);
    for (auto [d, dist] : extra[i].deps) lo = std::max(lo, at[d] + dist);
    const uint32_t end = extra[i].by_end && rr >= 2 ? rr - 1 : rr;
    uint32_t j = lo;
    while (j < end && load[j] >= room) ++j;
    if (j >= end) j = std::min(lo, rr);
    at[i] = j;
    if (j < rr) ++load[j];
  }
  return at;
}
// The epilogue's activation (GemmAct) on v28, a row a lane, in place, predicated by p:
// act_steps (kernels/elementwise.h), as emit_elementwise runs them, so the same bits. Uses
// v24-v27, v29, v31 (free after the MAC loop; the next group's prologue reloads them).
void emit_act(Builder& b, GemmAct act, P p) {
  const V z{28}, t{24}, u{25}, one{26}, half{27}, c{29}, k{31};
  b.op("vsplat.f32", {one, F32{1.0f}});
  if (act == GemmAct::none) return;
  if (act == GemmAct::silu_pairs) {
    b.op("vmovn", {u, z, Dir{1}});                // up j from the east neighbour (PE 2j + 1)
    b.op("vsplati", {half, int64_t(INT32_MIN)});  // (here the sign bit)
  } else {
    b.op("vsplat.f32", {c, F32{act == GemmAct::gelu_tanh ? 0.044715f : 0.7071067811865476f}});
    if (act == GemmAct::gelu_tanh) b.op("vsplat.f32", {k, F32{0.7978845608028654f}});
    b.op("vsplat.f32", {half, F32{0.5f}});
  }
  auto reg = [&](ActReg r) {
    switch (r) {
      case ActReg::z: return z;
      case ActReg::t: return t;
      case ActReg::u: return u;
      case ActReg::one: return one;
      case ActReg::c: return c;
      case ActReg::k: return k;
      default: return half;  // half, or the sign bit where half is not used (silu_mul)
    }
  };
  const EwOp op = act == GemmAct::silu_pairs ? EwOp::silu_mul
                  : act == GemmAct::gelu_tanh ? EwOp::gelu_tanh
                                               : EwOp::gelu_erf;
  for (const ActStep& st : act_steps(op)) {
    if (st.b == ActReg::none) b.op(st.op, {reg(st.d), reg(st.a)}, p);
    else b.op(st.op, {reg(st.d), reg(st.a), reg(st.b)}, p);
  }
}
// Starts units first..C-1 of tile 0 on channels first..C-1 (uses reg and x31).
void prefetch_units(Builder& b, const sim::Config& cfg, const GemmArgs& a, X reg, uint32_t first = 0) {
  const GemmPlan pl = plan_gemm(cfg, 0, a.n, a.k, a.split);
  check_dma(cfg, pl, a);
  const bool tail = pl.tail_at(0);
  if (a.pre_units % pl.channels || a.pre_units >= pl.units)
    fail("gemm: internal: {} units handed off two calls ahead (of {}, on {} channels)", a.pre_units, pl.units,
         pl.channels);
  for (uint32_t c = first; c < pl.channels; ++c) {
    const uint32_t u = a.pre_units + c;  // (unit u on channel u % C = c)
    const uint32_t bytes = u == 0 ? pl.meta_of(tail) + pl.code_of(tail) : pl.code_of(tail);
    b.descriptor(a.smem + 64 * c, uint32_t(a.w_ddr + pl.unit_offset(u, tail)), sim::ocm_addr(unit_data(cfg, pl, a, c)), bytes);
    b.li(reg, a.smem + 64 * c);
    b.op("dma.start", {Chan{uint8_t(c)}, reg});
  }
}
// The OCM scratch between channel 0's buffer and the others' (emit_gemm_prefetch_staged): its
// start and the code units it holds, staged_stride apart.
std::pair<uint32_t, uint32_t> prestage_room(const sim::Config& cfg, const GemmPlan& pl, const GemmArgs& a) {
  const uint32_t lo = (a.scratch_ocm + unit_buffer(pl, 0) + 63) / 64 * 64,
                 hi = a.scratch_ocm + a.scratch_bytes / 64 * 64 - uint32_t(cfg.dma_channels - 1) * unit_buffer(pl, 1);
  if (cfg.dma_channels < 2 || pl.channels < 2 || pl.tail_at(0) || hi < lo) return {lo, 0};
  return {lo, (hi - lo) / staged_stride(pl)};
}

}  // namespace

bool gemm_handoff(const sim::Config& cfg, const GemmArgs& prev, GemmArgs& next, uint32_t reserved, uint32_t at,
                  bool whole) {
  const GemmPlan pa = plan_gemm(cfg, 0, prev.n, prev.k, prev.split), pn = plan_gemm(cfg, 0, next.n, next.k, next.split);
  const auto [ap, aq] = lrm_buffers(pa, prev);
  const uint32_t last = pa.tiles % 2 ? ap : aq, bsa = lrm_buffer(pa), bsn = lrm_buffer(pn);
  const uint32_t lrm = uint32_t(std::min<uint64_t>(next.lrm_end ? next.lrm_end : cfg.lrm_bytes, UINT32_MAX));
  if (uint64_t(bsn) + 64 > lrm) return false;
  const uint32_t top = (lrm - 64 - bsn) / 64 * 64;  // the highest buffer start
  auto up64 = [](uint32_t v) { return (v + 63) / 64 * 64; };
  auto disjoint = [](uint64_t a0, uint64_t a1, uint64_t b0, uint64_t b1) { return a1 <= b0 || b1 <= a0; };
  // Tile 0 (p) above `reserved`, beside prev's last tile; the other buffer (q) anywhere
  // else (it fills after prev). Of the candidates, the one whose own last tile sits
  // nearest an end of LRM, which leaves the most room for the call after it. (p just above
  // a q at 0: the 2B prefill's q|k|v, four tiles, after a down chunk whose last tile sits at
  // 2,432 below partial sums at 3,072 on 32x32, had no place without it.)
  const bool last_in_p = pn.tiles % 2 == 1;
  int64_t best = -1;
  const std::vector<uint32_t> cands =
      at != kLrmAnywhere ? std::vector<uint32_t>{at}
                         : std::vector<uint32_t>{up64(reserved), up64(last + bsa), top, 0u, up64(bsn + 64)};
  for (uint32_t p : cands) {
    if (p < reserved || p > top || !disjoint(p, p + bsn, last, last + bsa)) continue;
    const std::vector<uint32_t> qs = pn.single ? std::vector<uint32_t>{p}  // (one buffer: one tile)
                                               : std::vector<uint32_t>{0u, up64(p + bsn), top};
    for (uint32_t q : qs) {
      if (!pn.single && (q > top || !disjoint(q, q + bsn + 64, p, p + bsn))) continue;
      const uint32_t own = last_in_p ? p : q;
      const int64_t score = std::min(own, top - own);
      if (best < 0 || score < best) {
        best = score;
        next.lrm_p = p;
        next.lrm_q = q;
      }
    }
  }
  next.handed_off = best >= 0;
  next.handed_units = 0;
  // A call of one tile with two row sets at split 2 (whose loop takes one unit a group, the
  // others going through the port between its groups) leaves the last round of the channels of a
  // next call of one tile at split 1 to that call, which takes them before its first group (64x64,
  // 4 MiB, 128 GB/s: the tower's proj handing fc1 off, -0.78 K cycles a block; 1, 2, 3, 5, 6 units
  // measured: -0.26, -0.55, -0.5, -0.06, +1.5 K).
  if (next.handed_off && prev.m && !whole && pa.tiles == 1 && pn.tiles == 1 && !pn.tail_at(0) && pn.split == 1 &&
      plan_gemm(cfg, prev.m, prev.n, prev.k, prev.split).sets == 2 && pn.units > 2 * pn.channels) {
    next.handed_units = pn.units - pn.channels;
    return true;
  }
  if (next.handed_off && prev.m && !whole && (pn.tiles > 1 || (!pn.tail_at(0) && pa.tiles > 1))) {
    // The bytes of next's tile 0 the DDR cannot bring during prev's last tile (its MAC
    // time) arrive while next's first row group computes (one unit more: measured best of 0 to 4).
    const GemmPlan pm = plan_gemm(cfg, prev.m, prev.n, prev.k, prev.split);
    const double last_tile = last_tile_mac_cycles(cfg, pm);
    const double short_bytes =
        double(pn.tile_bytes) - double(next.pre_units) * pn.code_unit - last_tile * cfg.ddr_bytes_per_cycle();
    if (short_bytes > 0) {
      const uint32_t want = uint32_t(short_bytes / pn.code_unit) + 1;
      // (prev scatters at least one unit past those handed off two calls ahead)
      const uint32_t tail = std::min({want, max_stream_units(cfg, pn, kMaxRows), pn.units - next.pre_units - 1});
      if (tail) next.handed_units = pn.units - tail;
    }
  }
  return next.handed_off;
}

uint32_t gemm_lrm_buffer(const sim::Config& cfg, uint32_t n, uint32_t k, uint32_t split) {
  return lrm_buffer(plan_gemm(cfg, 0, n, k, split));
}

uint32_t gemm_two_ahead(const sim::Config& cfg, const GemmArgs& prev, const GemmArgs& next, GemmArgs& next2,
                        uint32_t reserved, uint32_t at) {
  next2.pre_units = 0;
  if (!prev.m) return 0;
  const GemmPlan pa = plan_gemm(cfg, prev.m, prev.n, prev.k, prev.split);
  const GemmPlan pn = plan_gemm(cfg, 0, next.n, next.k, next.split);
  const GemmPlan p2 = plan_gemm(cfg, 0, next2.n, next2.k, next2.split);
  const uint32_t C = pa.channels;
  if (!two_ahead_shapes(cfg, pn, p2, C, pa.unit_pe, next)) return 0;
  // The DDR time prev's last tile leaves after next's tile 0, in whole rounds of the channels.
  const double spare =
      last_tile_mac_cycles(cfg, pa) * cfg.ddr_bytes_per_cycle() - double(pn.tile_bytes) - double(p2.meta_unit);
  // At most half the tile: the others go through the port between prev's row groups, its loops
  // having no issue room for them (64x64, 8 MiB, 2 channels: 200 GB/s 21,720,479 cycles with the
  // 14 the DDR had time for, 21,456,449 with 8; 128 GB/s, 4 channels: 8 best of 4 to 12).
  const uint32_t units = spare <= 0 ? 0 : std::min<uint32_t>(uint32_t(spare / p2.code_unit), p2.units / 2) / C * C;
  if (!units) return 0;
  next2.pre_units = units;
  // Its tile 0 (from next, as gemm_handoff places it) beside prev's last tile and next's tile
  // 0, with the 64 bytes past each that a kernel zeroes at its start: all three are in LRM
  // during prev.
  const auto [ap, aq] = lrm_buffers(pa, prev);
  const uint32_t last = pa.tiles % 2 ? ap : aq;
  auto disjoint = [](uint64_t a0, uint64_t a1, uint64_t b0, uint64_t b1) { return a1 <= b0 || b1 <= a0; };
  if (!gemm_handoff(cfg, next, next2, reserved, at)) return next2.pre_units = 0;
  const uint64_t n2a = next2.lrm_p, n2b = n2a + lrm_buffer(p2) + 64;
  if (!disjoint(n2a, n2b, last, last + lrm_buffer(pa) + 64) ||
      !disjoint(n2a, n2b, next.lrm_p, next.lrm_p + lrm_buffer(pn) + 64))
    return next2.pre_units = 0;
  return units;
}

uint32_t gemm_split(const sim::Config& cfg, uint32_t n, uint32_t k, uint32_t split) {
  if (k == 0 || k % kBlock) fail("gemm: K = {} must be a positive multiple of {}", k, kBlock);
  const uint32_t nblk = k / kBlock;
  auto ok = [&](uint32_t s, uint32_t bufs = 2) {
    return s >= 1 && s <= 2 && cfg.pe_cols % s == 0 && nblk % s == 0 && (s == 1 || 2 * nblk <= kUnitPad) &&
           lrm_need(nblk, s, bufs) <= cfg.lrm_bytes;
  };
  if (split) {
    if (!ok(split, 1))
      fail("gemm: split {} does not fit K = {} (needs split 1 or 2 dividing pe_cols = {} and the {} blocks, and "
           "{} LRM bytes <= lrm_bytes = {})",
           split, k, cfg.pe_cols, nblk, lrm_need(nblk, std::max(split, 1u), 1), cfg.lrm_bytes);
    return split;
  }
  // Split 2 where its tiles (npe / 2 columns, each half the MAC steps a row) take fewer
  // PE-steps than split 1's: the N columns leave part of split 1's last tile idle.
  const uint32_t npe = cfg.npe();
  if (ok(2) && ceil_div(2 * n, npe) < 2 * ceil_div(n, npe)) return 2;
  for (uint32_t s = 1; s <= 2; s *= 2)
    if (ok(s)) return s;
  // One buffer (GemmPlan::single: a tile a call), the smaller one where split 2 is possible.
  for (uint32_t s = 2; s >= 1; --s)
    if (ok(s, 1)) return s;
  fail("gemm: K = {} does not fit: an LRM buffer of {} blocks needs {} bytes, lrm_bytes = {} (split 2 needs an "
       "even block count and pe_cols); raise lrm_bytes to {} or more",
       k, nblk, gemm_lrm_need(cfg, k), cfg.lrm_bytes, gemm_lrm_need(cfg, k));
}

uint32_t gemm_unit_pe_bytes(const sim::Config& cfg) {
  // (Not from cfg.dma_channels: the image compiler may give its GEMMs fewer channels than the
  // machine it packs the weights for, and the packing and the calls must agree.)
  if (cfg.ocm_bytes <= (1u << 20)) return 64;
  const uint64_t four = uint64_t(kGemmRuleChannels) * cfg.npe() * 64, quarter = cfg.ocm_bytes / 4;
  return four > quarter || (four == quarter && cfg.ddr_bytes_per_cycle() >= kGemmFastDdr) ? 32 : 64;
}

uint32_t gemm_lrm_need(const sim::Config& cfg, uint32_t k) {
  const uint32_t nblk = k / kBlock;
  const bool two = cfg.pe_cols % 2 == 0 && nblk % 2 == 0 && 2 * nblk <= kUnitPad;  // split 2 possible
  return lrm_need(nblk, two ? 2 : 1, 1);
}

GemmPlan plan_gemm(const sim::Config& cfg, uint32_t m, uint32_t n, uint32_t k, uint32_t split) {
  if (n == 0) fail("gemm: N must be positive");
  GemmPlan p;
  p.split = gemm_split(cfg, n, k, split);
  p.cols = cfg.npe() / p.split;
  p.tiles = ceil_div(n, p.cols);
  p.blocks = k / kBlock;
  p.single = lrm_need(p.blocks, p.split) > cfg.lrm_bytes;
  p.meta_lrm = meta_lrm_bytes(p.blocks);
  p.unit_pe = gemm_unit_pe_bytes(cfg);
  p.units = p.blocks / p.split * (64 / p.unit_pe);
  // Channels: the most (<= dma_channels) that divide the unit count, so unit u of every
  // tile is on channel u % C and the next tile's units start in order.
  for (p.channels = std::min<uint32_t>(uint32_t(cfg.dma_channels), p.units); p.units % p.channels; --p.channels) {}
  p.meta_unit = p.cols * p.blocks * 4;
  p.code_unit = cfg.npe() * p.unit_pe;
  p.tile_bytes = uint64_t(p.cols) * p.blocks * 68;
  p.tail_cols = n % p.cols;
  p.tail_meta_unit = p.tail_cols * p.blocks * 4;
  p.tail_code_unit = p.tail_cols * p.split * p.unit_pe;
  // Two row sets (gemm.h): one narrow tile at split 2 on at most half the PEs (then 16 rows or more),
  // the upper copy from PE H = npe / 2, which must be even to start a split-2 pair (39x38 PEs: H = 741,
  // and the upper set's sums were junk).
  if (p.split == 2 && p.tiles == 1 && p.tail_cols && 2 * p.tail_cols * p.split <= cfg.npe() && cfg.npe() % 4 == 0)
    p.copies = 2;
  if (m) {
    if (p.copies == 2 && m >= 16) p.sets = 2;
    p.rows = m >= p.sets * kMaxRows ? kMaxRows : p.slots(m);
    p.groups = ceil_div(m, p.group_rows());
    p.last_rows = m - (p.groups - 1) * p.group_rows();
  }
  return p;
}

uint64_t gemm_weight_bytes(const sim::Config& cfg, uint32_t n, uint32_t k, uint32_t split) {
  return plan_gemm(cfg, 0, n, k, split).weight_bytes();
}

uint32_t gemm_lrm_acc_bytes(const sim::Config& cfg, uint32_t m, uint32_t n, uint32_t k, uint32_t split) {
  return plan_gemm(cfg, m, n, k, split).lrm_sums_bytes();
}
uint32_t gemm_scratch_bytes(const sim::Config& cfg, uint32_t n, uint32_t k, uint32_t split, bool two) {
  return buffers_bytes(cfg, plan_gemm(cfg, 0, n, k, split), two && cfg.dma_channels == 1);
}

std::vector<uint8_t> pack_gemm_weight(const W4Weights& w, const sim::Config& cfg, uint32_t split) {
  const uint32_t n = uint32_t(w.rows), k = uint32_t(w.cols);
  GemmPlan p = plan_gemm(cfg, 0, n, k, split);
  const uint32_t S = p.split, B = p.blocks;
  std::vector<uint8_t> out(p.weight_bytes(), 0);
  for (uint32_t t = 0; t < p.tiles; ++t) {
    uint8_t* tile = &out[size_t(t) * p.tile_bytes];
    const bool tail = p.tail_at(t);
    const uint32_t W = tail ? p.tail_cols : p.cols, pes = W * S;  // columns and PEs of this tile
    // Unit 0: per column, per block (fp16 s, fp16 z).
    for (uint32_t c = 0; c < W; ++c)
      for (uint32_t j = 0; j < B; ++j) {
        const uint32_t col = t * p.cols + c;
        uint16_t meta[2] = {w.scales[size_t(col) * B + j], f32_to_f16(float(w.zeros[size_t(col) * B + j]))};
        std::memcpy(tile + (size_t(c) * B + j) * 4, meta, 4);
      }
    // Code units: PE e's code stream (k of parity e % S, in k order), unit_pe bytes per unit.
    // Byte j of the stream holds its codes 2j (low nibble) and 2j + 1: k = 2jS + par and
    // 2jS + S + par. With S = 1 that is the row's own byte j.
    for (uint32_t e = 0; e < pes; ++e) {
      const uint32_t col = t * p.cols + e / S, par = e % S;
      const uint8_t* row = w.codes.data() + size_t(col) * w.row_stride();
      const uint32_t stream = k / S / 2, ub = p.unit_pe;  // bytes of this PE's codes: whole units
      for (uint32_t u = 0; u * ub < stream; ++u) {
        uint8_t* dst = tile + p.meta_of(tail) + (size_t(u) * pes + e) * ub;
        if (S == 1) {
          std::memcpy(dst, row + u * ub, ub);
          continue;
        }
        for (uint32_t j = u * ub; j < u * ub + ub; ++j) {
          const uint32_t c = 2 * j * S + par;
          dst[j % ub] = uint8_t(w.code(col, c) | w.code(col, c + S) << 4);
        }
      }
    }
  }
  return out;
}

KernelCost cost_gemm(const sim::Config& cfg, const GemmArgs& a) {
  KernelCost c;
  c.macs = uint64_t(a.m) * a.n * a.k;
  c.ddr_bytes = gemm_weight_bytes(cfg, a.n, a.k, a.split);  // exact: no padding columns
  return c;
}

double gemm_act_cycles(const sim::Config& cfg, uint32_t m, uint32_t n, uint32_t k, uint32_t split, GemmAct act) {
  if (act == GemmAct::none) return 0;
  const GemmPlan pl = plan_gemm(cfg, m, n, k, split);
  double group = pl.split == 1 ? 124 : 133;
  if (act == GemmAct::silu_pairs) {
    // a row's gather from half the PEs: ceil(bytes / port) cycles of the OCM write port
    auto gather = [&](uint32_t pes) { return std::max(1.0, std::ceil(2.0 * pes / cfg.ocm_port_bytes)); };
    group -= pl.rows * (gather(cfg.npe()) - gather(cfg.npe() / 2));
  }
  return group * pl.tiles * pl.groups;
}

void emit_gemm_w4(Builder& b, const sim::Config& cfg, const GemmArgs& a) {
  if (a.m == 0) fail("gemm: M must be positive");
  const GemmPlan pl = plan_gemm(cfg, a.m, a.n, a.k, a.split);
  if (pl.single && pl.tiles > 1)
    fail("gemm: two LRM buffers of K = {} do not fit lrm_bytes = {} ({} bytes each at split {}): one is a tile a call, "
         "N <= {} (got N = {}), or raise lrm_bytes to {}",
         a.k, cfg.lrm_bytes, lrm_buffer(pl), pl.split, pl.cols, a.n, lrm_need(pl.blocks, pl.split));
  const uint32_t npe = cfg.npe(), S = pl.split, T = pl.cols, B = pl.blocks, U = pl.units;
  const bool twin = pl.sets == 2;  // two row sets: the lower PEs [0, H), the upper ones [H, npe)
  const uint32_t H = npe / 2;
  // Two row sets at split 2: a slot's two rows in one grouped broadcast (obcast.g; the split-1
  // loop broadcasts half rows, which obcast.g does not move). Its PE e reads the row e / H rows
  // on, so on a sub-array the machine's PEs past the view read rows further on still: where
  // those reads from X's last row would pass the OCM's end (the tiny model's patch embedding
  // on 16 of 45x62's rows at 512 KiB), the upper row goes to every PE and the lower one to its
  // set in turn, as at split 1.
  // (whether X's reads end inside OCM: `more` rows past its last one and `pad` bytes past that)
  auto x_reads_fit = [&](uint32_t more, uint32_t pad) {
    return uint64_t(a.x_ocm) + uint64_t(a.m - 1 + more) * a.x_stride + 2 * a.k + pad <= cfg.ocm_bytes;
  };
  const bool twin_split2 = twin && pl.split == 2;
  bool pair_rows = twin_split2;
  if (pair_rows && a.sub_array) {
    const uint32_t groups = ceil_div(std::max(a.machine_pes, npe), H);
    pair_rows = x_reads_fit(groups > 2 ? groups - 2 : 0, 64);
  }
  // (the rows in turn at split 2 read 64 B past X's last row: the next slots' look-ahead)
  const uint32_t x_pad = twin_split2 && !pair_rows ? 64 : 0;
  const uint32_t C = pl.channels;
  const uint32_t BS = lrm_buffer(pl);  // one LRM buffer
  const auto [lrm_p, lrm_q] = lrm_buffers(pl, a);
  const GemmArgs* nx = a.next && a.next->handed_off ? a.next : nullptr;  // this call hands off to nx
  const uint64_t lrm_end = a.lrm_end ? std::min<uint64_t>(a.lrm_end, cfg.lrm_bytes) : cfg.lrm_bytes;
  if (uint64_t(std::max(lrm_p, lrm_q)) + BS + 64 > lrm_end)
    fail("gemm: LRM buffers at {} and {} ({} B each + 64) pass {} = {}", lrm_p, lrm_q, BS,
         a.lrm_end ? "lrm_end" : "lrm_bytes", lrm_end);
  const bool lrm_acc = a.lrm_in || a.lrm_out;
  if (lrm_acc) {
    const uint64_t bytes = pl.lrm_sums_bytes();
    if (a.acc_in || a.y_f32)
      fail("gemm: partial sums in LRM (lrm_in / lrm_out) and in OCM (acc_in / y_f32) exclude each other");
    if (a.lrm_acc % 64 || a.lrm_acc < lrm_end || a.lrm_acc + bytes > cfg.lrm_bytes)
      fail("gemm: the LRM partial sums [{}, {}) ({} tiles x {} row groups x 64 B) must be 64-byte aligned, at or above "
           "{} = {} and inside lrm_bytes = {}",
           a.lrm_acc, a.lrm_acc + bytes, pl.tiles, pl.groups, a.lrm_end ? "lrm_end" : "lrm_bytes", lrm_end,
           cfg.lrm_bytes);
    if (nx && (!nx->lrm_end || nx->lrm_end > a.lrm_acc))
      fail("gemm: the call handed off to keeps its LRM buffers below lrm_end = {}, above the partial sums at {}",
           nx->lrm_end, a.lrm_acc);
  }
  const bool act = a.act != GemmAct::none, silu = a.act == GemmAct::silu_pairs;
  if (act && (lrm_acc || a.acc_in || a.y_f32))
    fail("gemm: an epilogue activation (act) takes the final fp16 outputs, not partial sums (acc_in, y_f32, lrm_in, "
         "lrm_out)");
  if (silu && (S != 1 || a.n % 2))
    fail("gemm: silu_pairs needs split 1 and an even N (gate and up columns interleaved), got split {} and N = {}", S,
         a.n);
  if (silu && cfg.pe_cols % 2)
    fail("gemm: silu_pairs takes each up output from the gate PE's east neighbour, which needs an even pe_cols (got "
         "{}: the pairs would cross rows)",
         cfg.pe_cols);
  const uint32_t n_out = silu ? a.n / 2 : a.n;  // Y's columns
  const uint32_t ocm = uint32_t(cfg.ocm_bytes);
  if (a.x_stride < 2 * a.k || a.x_stride % 2) fail("gemm: x_stride {} must be even and >= 2*K = {}", a.x_stride, 2 * a.k);
  if (a.y_stride < 2 * n_out || a.y_stride % 2)
    fail("gemm: y_stride {} must be even and >= 2 x {} Y columns = {}", a.y_stride, n_out, 2 * n_out);
  if (!x_reads_fit(0, x_pad))
    fail("gemm: X [{} x {}] at OCM {} (stride {}) does not fit the {} bytes of OCM{}", a.m, a.k, a.x_ocm, a.x_stride, ocm,
         x_pad ? " with the 64 bytes past its last row that two row sets on a sub-array read: place X at least 64 bytes "
                 "lower"
               : "");
  const uint32_t y_bytes = a.y_f32 ? 4 : 2;  // per output
  if (a.y_f32 && a.y_stride < 4 * a.n) fail("gemm: y_stride {} must be >= 4*N = {} for fp32 Y", a.y_stride, 4 * a.n);
  if (uint64_t(a.y_ocm) + uint64_t(a.m - 1) * a.y_stride + y_bytes * n_out > ocm)
    fail("gemm: Y [{} x {}] at OCM {} (stride {}) does not fit the {} bytes of OCM", a.m, n_out, a.y_ocm, a.y_stride,
         ocm);
  if (a.acc_in && a.acc_stride < 4 * a.n) fail("gemm: acc_stride {} must be >= 4*N = {}", a.acc_stride, 4 * a.n);
  if (a.acc_in && uint64_t(a.acc_ocm) + uint64_t(a.m - 1) * a.acc_stride + 4 * a.n > ocm)
    fail("gemm: partial sums [{} x {}] fp32 at OCM {} (stride {}) do not fit the {} bytes of OCM", a.m, a.n, a.acc_ocm,
         a.acc_stride, ocm);
  check_dma(cfg, pl, a);
  const bool two = two_buffers(cfg, pl, a);
  auto buf = [&](uint32_t u) { return unit_at(cfg, pl, a, u); };  // unit u's data (channel u % C's buffer)
  auto desc = [&](uint32_t u) { return a.smem + (two ? u % 2 : u % C) * 64; };  // the descriptor unit u starts from
  const uint32_t bias_bytes = a.bias == GemmBias::f32 ? 4 : a.bias == GemmBias::f16 ? 2 : 0;

  // ---- registers ----
  // x1 tiles left, x2 DDR base of the tile being filled, x3 tiles after it, x4/x5 LRM
  // compute/fill buffer, x6 Y of the tile, x7 bias of the tile, x8 columns left,
  // x9/x24 PE range of a fill piece, x10 X of the row group, x11 Y of the row group,
  // x12/x13 the routine's code and meta pointers, x15 partial-sum scatter stride, x16 loop
  // count, x17 gather stride, x18 link, x19/x22/x28 temps (x19 also a meta segment's PE
  // stride), x20 64, x21 4P, x23 fills left,
  // x25 OCM source of the unit a routine part scatters, x26/x29 partial sums of the tile /
  // of the row group, x27 buffer xor, x30 the meta scatter stride of the call handed off to;
  // two row sets at split 2: x14 X's row stride, x31 H (set at each routine part's entry).
  // v0-v15 accumulators, v16-v19 epilogue temps (two row sets: also slot activations), v20
  // accumulator init (bias in lane 0),
  // v21 lane-0 mask, v22/v23 fill, v24 w, v25 next w, v26 codes, v27 meta, v28-v31 x.
  const X xT{1}, xD{2}, xMore{3}, xCur{4}, xFill{5}, xY{6}, xB{7}, xCols{8}, xLo{9}, xAct{10}, xYg{11};
  const X xC{12}, xG{13}, xCnt{16}, xGs{17}, xLink{18}, xT1{19}, xUnit{20}, xMs{21}, xT2{22}, xFills{23};
  const X xHi{24}, xSwap{27}, xT3{28}, xSrc{25}, xAs{15}, xA{26}, xAg{29}, xRows{14}, xHalf{31};
  const bool tail = pl.tail_cols != 0;
  if (pair_rows) b.li(xRows, a.x_stride);

  b.li(xT, pl.tiles);
  b.li(xD, a.w_ddr);
  b.li(xMore, pl.tiles - 1);
  b.li(xCur, lrm_p);
  b.li(xFill, lrm_p);
  b.li(xY, a.y_ocm);
  b.li(xB, a.bias_ocm);
  b.li(xCols, a.n);
  b.li(xGs, silu ? 1 : y_bytes / S);  // (silu: PE 2j writes Y column j)
  if (a.acc_in) {
    b.li(xA, a.acc_ocm);
    b.li(xAs, 4 / S);
  }
  if (lrm_acc) b.li(xA, a.lrm_acc);
  b.li(xUnit, pl.unit_pe);
  const uint32_t UB = pl.unit_pe;
  const bool half_units = UB == 32;  // (oscatter.h and vst.h move them)
  b.li(xMs, 4 * B / S);
  b.li(xFills, pl.tiles - 1);
  b.li(xSwap, lrm_p ^ lrm_q);
  b.op("vlaneid", {V{21}});
  b.op("vsplati", {V{20}, int64_t(0)});
  b.op("vcmpeq.i32", {V{21}, V{21}, V{20}});  // lane-0 mask
  // The accumulators (v0 up) start at v20 (0, or the tile's bias): where a row's gather takes
  // the port 4 cycles or more (1,024 gathering PEs of a tile at 512 B a cycle), each group's
  // epilogue sets them for the next group as its gathers take them (the port time hides the
  // moves); then the call sets them before its first tile, or with a bias each tile after
  // loading it. Elsewhere, and for partial sums in LRM (the tower's MLP chunks, DDR-bound at
  // 1 MiB, 16 GB/s: 6.7 K cycles slower so), each group's prologue sets them, where they wait on
  // its broadcasts anyway (16x16: 0.1% slower with them in the epilogue; the tiny model on qc-u,
  // 384 columns: 0.2%). 64x64, 8 MiB, 128 GB/s: 21.48 -> 21.47 M cycles; qc-u 79.55 -> 79.49 M.
  const bool long_gathers =
      uint64_t(std::min(n_out, silu ? T / 2 : T)) * 2 >= 4 * uint64_t(cfg.ocm_port_bytes);
  const bool zero_late = long_gathers && !lrm_acc;
  auto zero_all = [&] {
    if (zero_late)
      for (uint32_t r = 0; r < pl.rows; ++r) b.op("vmov", {V{uint8_t(r)}, V{20}});
  };
  if (a.bias == GemmBias::none) zero_all();
  // p2 = PEs in even columns (at split 2 they own the first K half and gather), p3 = odd;
  // on a sub-array, of the view's PEs only.
  auto even_odd = [&] {
    b.pset_cols_mod(P{2}, 0, 2, xT1, xT2);
    b.op("pnot", {P{3}, P{2}});
    if (a.sub_array) {
      b.li(xT3, npe);
      b.op("pset.range", {P{5}, X{0}, xT3});
      b.op("pand", {P{2}, P{2}, P{5}});
      b.op("pand", {P{3}, P{3}, P{5}});
    }
  };
  if (S == 2 || silu) even_odd();  // (silu: the gate columns' PEs, p2, gather)
  // Sub-array: p7 = the view's PEs (a full tile's scatters; split 2 with a narrow last
  // tile, whose even PEs take p7, scatters a full tile as its even and its odd PEs).
  if (a.sub_array && (S == 1 || !tail)) {
    b.li(xT3, npe);
    b.op("pset.range", {P{7}, X{0}, xT3});
  }
  if (tail) {
    // p6 = the narrow tile's PEs; split 2: p7 = its even ones, p5 = its odd ones.
    b.li(xT3, pl.tail_cols * S);
    b.op("pset.range", {P{6}, X{0}, xT3});
    if (S == 2) {
      b.op("pand", {P{7}, P{2}, P{6}});
      b.op("pand", {P{5}, P{3}, P{6}});
    }
  }

  // ---- the DMA / fill machinery ----
  // Unit u of the tile being filled (DDR base x2) is on channel u % C. Consuming it
  // restarts the channel with its next unit: u + C of the same tile, or unit u % C of
  // the next tile when one remains (x3 > 0).
  auto start_unit = [&](uint32_t c, X base, int64_t off, uint32_t u, bool narrow) {
    b.op("addi", {xT1, base, off});
    b.op("sw", {xT1, Mem{X{0}, desc(u)}});
    b.li(xT3, u == 0 ? pl.meta_of(narrow) + pl.code_of(narrow) : pl.code_of(narrow));
    b.op("sw", {xT3, Mem{X{0}, desc(u) + 8}});
    b.li(xT3, desc(u));
    b.op("dma.start", {Chan{uint8_t(c)}, xT3});
  };
  int pending = -1;         // fill register whose vst is still to issue
  int64_t pending_dst = 0;  // its LRM offset from pending_base
  X pending_base{0};
  bool pending_half = false;
  int fill_reg = 0;
  auto flush = [&] {
    if (pending < 0) return;
    b.op(pending_half ? "vst.h" : "vst", {V{uint8_t(pending)}, Mem{pending_base, pending_dst}});
    pending = -1;
  };
  // p4 = PEs [H, H + pes) (x19 = H after it): the upper row set's copy of [0, pes).
  auto upper_p4 = [&](uint32_t pes) {
    b.li(xT1, H);
    b.li(xT3, H + pes);
    b.op("pset.range", {P{4}, xT1, xT3});
  };
  // The upper row set's copy of a scatter to PEs [0, pes) (two row sets): to [H, H + pes), a
  // base H strides (sval bytes) lower; pair: the even and the odd PEs in turn, as below (even:
  // the even ones only). Uses p4.
  auto scatter_upper = [&](uint8_t r, bool half, int64_t src, X stride, uint32_t sval, bool pair, uint32_t pes,
                           uint32_t nblk, bool even = false) {
    const uint8_t last = !pair ? 0 : even ? 2 : 3;
    for (uint8_t parity = pair ? 2 : 0; parity <= last; ++parity) {  // (p2 even, p3 odd)
      upper_p4(pes);
      if (parity) b.op("pand", {P{4}, P{4}, P{parity}});
      const int64_t from = src - (parity == 3 ? 2 * int64_t(nblk) : 0) - int64_t(H) * sval;
      b.op(half ? "oscatter.h" : "oscatter", {V{r}, Mem{X{0}, from}, stride}, P{4});
    }
  };
  // Scatters into the next fill register, stored later to LRM base + dst; at split 2 the
  // meta of a column goes to both of its PEs (even PEs read column c at 2c * stride, odd
  // ones 2 * nblk bytes lower: the same bytes). sval: the stride's value. Where a row holds
  // whole pairs (even pe_cols; a sub-array has the machine's), the odd PEs copy it from their
  // west neighbour instead of a second scatter: half the port time.
  const bool pairs_west = cfg.pe_cols % 2 == 0;
  auto scatter_to = [&](X base, bool half, int64_t src, X stride, uint32_t sval, int64_t dst, bool pair, bool narrow,
                        uint32_t nblk) {
    const uint8_t r = uint8_t(22 + fill_reg);
    fill_reg ^= 1;
    if (pair && !narrow && pairs_west) {
      b.op("oscatter.h", {V{r}, Mem{X{0}, src}, stride}, P{2});
      b.op("vmovn", {V{r}, V{r}, Dir{3}}, P{3});
    } else if (pair) {
      b.op("oscatter.h", {V{r}, Mem{X{0}, src}, stride}, narrow ? P{7} : P{2});
      b.op("oscatter.h", {V{r}, Mem{X{0}, src - 2 * int64_t(nblk)}, stride}, narrow ? P{5} : P{3});
    } else if (narrow || !a.sub_array) {
      b.op(half ? "oscatter.h" : "oscatter", {V{r}, Mem{X{0}, src}, stride}, narrow ? P{6} : P{0});
    } else if (S == 1 || !tail) {
      b.op(half ? "oscatter.h" : "oscatter", {V{r}, Mem{X{0}, src}, stride}, P{7});
    } else {
      for (uint8_t p : {2, 3}) b.op(half ? "oscatter.h" : "oscatter", {V{r}, Mem{X{0}, src}, stride}, P{p});
    }
    if (pl.copies == 2 && narrow) scatter_upper(r, half, src, stride, sval, pair, pl.tail_cols * S, nblk);
    flush();  // the previous unit's store issues while this scatter streams
    pending = r;
    pending_base = base;
    pending_dst = dst;
    pending_half = half;
  };
  auto scatter = [&](bool half, int64_t src, X stride, uint32_t sval, int64_t dst, bool pair, bool narrow) {
    scatter_to(xFill, half, src, stride, sval, dst, pair, narrow, B);
  };
  // The next call's tile-0 units start as early as their channels allow: channel c's
  // buffer (at the same place in every call) takes the next call's unit c as soon as
  // this call's last unit on c is scattered, while this call fills its last tile; the
  // channels this call does not use start at its last tile. Not when nothing is filled
  // (one tile, handed off): then all start at the last tile.
  const GemmPlan px = a.next ? plan_gemm(cfg, 0, a.next->n, a.next->k, a.next->split) : GemmPlan{};
  const bool part0 = a.handed_off && a.handed_units && a.handed_units < U;  // tile 0 handed off in part
  const uint32_t early = a.next && !(pl.tiles == 1 && a.handed_off && !part0) ? std::min(C, px.channels) : 0;
  // The next call's units staged in a.stage_ocm (GemmArgs::stage_ocm), stage_stride bytes apart
  // (code units: no pad around them); set below with the spread (none: empty). A channel's units
  // skip them (its next unit is the next one C on that is not staged).
  std::vector<uint32_t> stage;
  uint32_t stage_stride = 0;
  auto stage_index = [&](uint32_t u) { return uint32_t(std::find(stage.begin(), stage.end(), u) - stage.begin()); };
  auto staged = [&](uint32_t u) { return stage_index(u) < stage.size(); };
  uint32_t stage_ocm = a.stage_ocm;
  auto stage_at = [&](uint32_t u) { return stage_ocm + stage_index(u) * stage_stride; };
  auto unstaged_from = [&](uint32_t u, uint32_t step) {
    while (staged(u)) u += step;
    return u;
  };
  auto start_next = [&](uint32_t c) {
    if (c >= early) return;
    const bool t0 = px.tail_at(0);
    const uint32_t u = unstaged_from(a.next->pre_units + c, px.channels);
    b.descriptor(a.next->smem + 64 * c, uint32_t(a.next->w_ddr + px.unit_offset(u, t0)),
                 sim::ocm_addr(unit_data(cfg, px, *a.next, c)), u == 0 ? px.meta_of(t0) + px.code_of(t0) : px.code_of(t0));
    b.li(xT3, a.next->smem + 64 * c);
    b.op("dma.start", {Chan{uint8_t(c)}, xT3});
  };
  // Restarts unit u's channel with its next unit: own (this call's next unit: the tile's, or
  // the next tile's), next (the next call's, in the last tile), or both. Two buffers: own
  // right after unit u's wait, next (whose buffers may overlap this call's) after its scatter.
  enum class Restart { both, own, next };
  auto restart = [&](uint32_t u, bool narrow, bool next_narrow, Restart r = Restart::both) {
    const uint32_t c = u % C;
    const bool own = r != Restart::next, nxt = r != Restart::own;
    if (u + C < U) {
      if (own) start_unit(c, xD, pl.unit_offset(u + C, narrow), u + C, narrow);
    } else if (narrow) {
      if (nxt) start_next(c);
    } else {
      // The next tile's unit u % C, or (this was the last tile) the next call's unit c.
      Label mine = b.label(), end = b.label();
      b.op("bne", {xMore, X{0}, mine});
      if (nxt) start_next(c);
      b.op("jal", {X{0}, end});
      b.bind(mine);
      if (own) start_unit(c, xD, int64_t(pl.tile_bytes) + pl.unit_offset(u % C, next_narrow), u % C, next_narrow);
      b.bind(end);
    }
  };
  // Unit u's restart after its scatter (two buffers: only the next call's part).
  auto restart_late = [&](uint32_t u, bool narrow, bool next_narrow) {
    restart(u, narrow, next_narrow, two ? Restart::next : Restart::both);
  };
  // Unit u of the tile being filled (narrow: the last tile); next_narrow: the tile
  // after it is the last one.
  // Waits for unit u and scatters its meta (unit 0), and its codes unless in_loop (the
  // group's MAC loop scatters them: group_with_fills).
  auto take_unit = [&](uint32_t u, bool narrow, bool in_loop, bool next_narrow, bool meta_here = true) {
    const uint32_t c = u % C;
    b.op("dma.wait", {Chan{uint8_t(c)}});
    if (two) restart(u, narrow, next_narrow, Restart::own);
    if (u == 0 && meta_here)
      for (uint32_t i = 0; i < ceil_div(B, 8); ++i) scatter(true, buf(u) + 32 * i, xMs, 4 * B / S, 32 * i, S == 2, narrow);
    if (!in_loop)
      scatter(half_units, buf(u) + (u == 0 ? pl.meta_of(narrow) : 0), xUnit, UB, pl.meta_lrm + UB * u, false, narrow);
  };
  auto fill_unit = [&](uint32_t u, bool narrow, bool next_narrow) {
    take_unit(u, narrow, false, next_narrow);
    restart_late(u, narrow, next_narrow);
  };
  // Units [u0, u1) of the tile after the current one (x23 tiles after the current one).
  auto fill_units = [&](uint32_t u0, uint32_t u1) {
    auto run = [&](bool narrow, bool next_narrow) {
      for (uint32_t u = u0; u < u1; ++u) fill_unit(u, narrow, next_narrow);
      flush();
    };
    if (!tail) return run(false, false);
    Label end = b.label(), not_last = b.label(), plain = b.label();
    b.li(xT3, 1);
    b.op("bne", {xFills, xT3, not_last});
    run(true, false);
    b.op("jal", {X{0}, end});
    b.bind(not_last);
    b.li(xT3, 2);
    b.op("bne", {xFills, xT3, plain});
    run(false, true);
    b.op("jal", {X{0}, end});
    b.bind(plain);
    run(false, false);
    b.bind(end);
  };
  // Hand-off: unit u of nx's tile 0 into LRM nx->lrm_p (absolute addresses: nx's
  // weight is known), then the channel restarts with nx's next unit (tile 0's u + C, or
  // tile 1's u % C).
  const GemmPlan pn = nx ? plan_gemm(cfg, 0, nx->n, nx->k, nx->split) : GemmPlan{};
  // The units this call scatters: nx's [nx_from, nx_units), then (two calls ahead) nx2's
  // [0, n2), numbered on from nx_units.
  const uint32_t nx_from = nx ? nx->pre_units : 0;
  if (nx && nx_from && nx_from >= (nx->handed_units ? nx->handed_units : pn.units))
    fail("gemm: internal: the call handed off has units [0, {}) in LRM already, none left for this one", nx_from);
  const uint32_t nx_units = nx && nx->handed_units ? nx->handed_units : pn.units;
  const GemmArgs* nx2 = nx && a.next2 && a.next2_units ? a.next2 : nullptr;
  const GemmPlan pn2 = nx2 ? plan_gemm(cfg, 0, nx2->n, nx2->k, nx2->split) : GemmPlan{};
  const uint32_t n2 = nx2 ? a.next2_units : 0, nx_total = nx_units + n2;
  if (nx2 && (!two_ahead_shapes(cfg, pn, pn2, C, pl.unit_pe, *nx) || nx_from || n2 % C || n2 > pn2.units ||
              !nx2->handed_off || nx2->pre_units != n2))
    fail("gemm: internal: two calls ahead needs the next call one tile handed off whole, its units and the "
         "{} units of the one after it whole rounds of the {} channels, that one's tile 0 wide and placed",
         n2, C);
  const bool nx_two = nx && two_buffers(cfg, pn, *nx);
  // nx's unit w (of its tile 0 or 1) on channel c (two buffers: into w's, from a whole
  // descriptor: the second one's smem may hold another kernel's since).
  auto start_at = [&](uint32_t c, uint32_t w, uint32_t src, uint32_t bytes) {
    const uint32_t d = nx->smem + 64 * (nx_two ? w % 2 : c);
    if (nx_two) {
      b.descriptor(d, src, sim::ocm_addr(unit_at(cfg, pn, *nx, w)), bytes);
      b.li(xT3, d);
      b.op("dma.start", {Chan{uint8_t(c)}, xT3});
      return;
    }
    b.li(xT1, src);
    b.op("sw", {xT1, Mem{X{0}, d}});
    b.li(xT3, bytes);
    b.op("sw", {xT3, Mem{X{0}, d + 8}});
    b.li(xT3, d);
    b.op("dma.start", {Chan{uint8_t(c)}, xT3});
  };
  const X xMsN{30};
  // A narrow tile 0 (one tile: its units are W columns' worth) goes to its W x split PEs
  // only, by p4 (free outside the tile start and the loop pieces), through the port; at
  // split 2 its meta to the even and the odd ones of them in turn (p4 & p2, p4 & p3).
  const bool nx_narrow = nx && pn.tail_at(0);
  auto scatter_next = [&](bool half, int64_t src, X stride, uint32_t sval, int64_t dst, bool pair) {
    if (!nx_narrow) return scatter_to(X{0}, half, src, stride, sval, dst, pair, false, pn.blocks);
    const uint8_t r = uint8_t(22 + fill_reg);
    fill_reg ^= 1;
    auto to_pes = [&](int64_t from, uint8_t parity) {
      b.li(xT3, pn.tail_cols * pn.split);
      b.op("pset.range", {P{4}, X{0}, xT3});
      if (parity) b.op("pand", {P{4}, P{4}, P{parity}});
      b.op(half ? "oscatter.h" : "oscatter", {V{r}, Mem{X{0}, from}, stride}, P{4});
    };
    // (pairs_west: the odd PEs of both copies copy their west neighbour's, as scatter_to does)
    const bool west = pair && pairs_west;
    if (pair) {
      to_pes(src, 2);
      if (!west) to_pes(src - 2 * int64_t(pn.blocks), 3);
    } else {
      to_pes(src, 0);
    }
    if (pn.copies == 2) scatter_upper(r, half, src, stride, sval, pair, pn.tail_cols * pn.split, pn.blocks, west);
    if (west) b.op("vmovn", {V{r}, V{r}, Dir{3}}, P{3});
    flush();
    pending = r;
    pending_base = X{0};
    pending_dst = dst;
    pending_half = half;
  };
  // Unit u of a handed-off tile 0 (plan p of call g; scat scatters it, to the narrow tile's PEs
  // where it is one): waits for its channel, scatters its meta (unit 0; meta stride in xMsN),
  // then its codes unless in_loop (its loop segment does).
  auto take_handed = [&](const GemmPlan& p, const GemmArgs& g, uint32_t u, uint32_t chan, bool narrow, bool in_loop,
                         bool meta_here, auto&& scat, int64_t staged_at = -1) {
    const uint32_t base = staged_at >= 0 ? uint32_t(staged_at) : unit_at(cfg, p, g, u);
    if (staged_at < 0) b.op("dma.wait", {Chan{uint8_t(chan)}});  // (a staged unit: waited long before)
    if (u == 0 && meta_here)
      for (uint32_t i = 0; i < ceil_div(p.blocks, 8); ++i)
        scat(true, base + 32 * i, xMsN, 4 * p.blocks / p.split, g.lrm_p + 32 * i, p.split == 2);
    if (!in_loop)
      scat(half_units, base + (u == 0 ? p.meta_of(narrow) : 0), xUnit, UB, g.lrm_p + p.meta_lrm + UB * u, false);
  };
  auto take_next_unit = [&](uint32_t u, bool in_loop, bool meta_here) {
    take_handed(pn, *nx, u, u % pn.channels, nx_narrow, in_loop, meta_here, scatter_next,
                staged(u) ? int64_t(stage_at(u)) : -1);
  };
  // A channel restarts with its next unit C on, past the staged ones (a whole round of the
  // channels, so every later unit stays on its channel); a staged unit has no channel.
  auto restart_next = [&](uint32_t u) {
    if (staged(u)) return;
    const uint32_t c = u % pn.channels, Un = pn.units, w = unstaged_from(u + pn.channels, pn.channels);
    if (w < Un) {
      start_at(c, w, uint32_t(nx->w_ddr + pn.unit_offset(w, nx_narrow)), pn.code_of(nx_narrow));
    } else if (pn.tiles > 1) {
      const bool n1 = pn.tail_at(1);
      const uint32_t v = u % pn.channels;
      start_at(c, v, uint32_t(nx->w_ddr + pn.tile_bytes + pn.unit_offset(v, n1)),
               v == 0 ? pn.meta_of(n1) + pn.code_of(n1) : pn.code_of(n1));
    }
  };
  // nx2's unit v (two calls ahead): on channel v % C once nx's units there are taken (its tile
  // 0 wide; its meta stride loaded with its unit 0, after all of nx's).
  auto take_next2_unit = [&](uint32_t v, bool in_loop, bool meta_here) {
    if (v == 0) b.li(xMsN, 4 * pn2.blocks / pn2.split);
    take_handed(pn2, *nx2, v, v % C, false, in_loop, meta_here,
                [&](bool half, int64_t src, X stride, uint32_t sval, int64_t dst, bool pair) {
                  scatter_to(X{0}, half, src, stride, sval, dst, pair, false, pn2.blocks);
                });
  };
  auto start_next2 = [&](uint32_t c, uint32_t v) {
    if (v < n2)
      start_at(c, v, uint32_t(nx2->w_ddr + pn2.unit_offset(v, false)),
               v == 0 ? pn2.meta_of(false) + pn2.code_of(false) : pn2.code_of(false));
  };
  // Unit u of those this call scatters: nx's, or nx2's from nx_units on.
  auto take_any = [&](uint32_t u, bool in_loop, bool meta_here = true) {
    if (u < nx_units) take_next_unit(u, in_loop, meta_here);
    else take_next2_unit(u - nx_units, in_loop, meta_here);
  };
  auto restart_any = [&](uint32_t u) {
    if (u >= nx_units) return start_next2((u - nx_units) % C, u - nx_units + C);
    if (nx2 && u + C >= pn.units) return start_next2(u % C, u + C - pn.units);
    restart_next(u);
  };
  auto src_any = [&](uint32_t u) -> int64_t {
    if (staged(u)) return stage_at(u);
    if (u < nx_units) return unit_at(cfg, pn, *nx, u) + (u == 0 ? pn.meta_of(nx_narrow) : 0);
    const uint32_t v = u - nx_units;
    return unit_at(cfg, pn2, *nx2, v) + (v == 0 ? pn2.meta_of(false) : 0);
  };
  auto dst_any = [&](uint32_t u) -> int64_t {
    if (u < nx_units) return int64_t(nx->lrm_p) + pn.meta_lrm + int64_t(UB) * u;
    return int64_t(nx2->lrm_p) + pn2.meta_lrm + int64_t(UB) * (u - nx_units);
  };
  auto fill_next_unit = [&](uint32_t u) {
    take_any(u, false);
    restart_any(u);
  };
  auto next_fill_tile = [&] {
    b.op("addi", {xD, xD, int64_t(pl.tile_bytes)});
    b.op("addi", {xMore, xMore, -1});
    b.op("xor", {xFill, xFill, xSwap});
  };

  // Late gathers: a row group's outputs (16 rows, one fp16 a row a PE) wait in LRM at hold_at
  // while the next group's loop writes them to Y in pieces of gather_pes PEs (2 port cycles
  // each) in the issue slots its trips leave, rows_per_trip rows a trip (its B trips take the
  // group's rows), so the port time of the gathers (16 x 16 cycles a group on 64x64) overlaps
  // the MACs; the tile's last group gathers its own rows. At split 1 on a whole array (no
  // narrow tile, one row set) with final fp16 outputs, where the gathers are long and LRM has
  // 128 bytes beside every buffer of this call and of the calls it fills (else, without a bias,
  // in registers: hold_reg below). Split 2 measured worse (its epilogue is bound by the pair
  // sums' cross-lane chain, and its loop has one free issue slot a row slot).
  const uint32_t gather_pes = uint32_t(cfg.ocm_port_bytes) * (silu ? 2 : 1),
                 rows_per_trip = pl.rows % B == 0 ? pl.rows / B : 0;
  const uint32_t hold_at = [&] {  // the lowest 128 bytes (64-aligned) past every such buffer and pad
    std::vector<std::pair<uint64_t, uint64_t>> used{{lrm_p, lrm_p + BS + 64}, {lrm_q, lrm_q + BS + 64}};
    for (const auto& [g, p] : {std::pair{nx, &pn}, std::pair{nx2, &pn2}})
      if (g) {
        const auto [gp, gq] = lrm_buffers(*p, *g);
        for (uint64_t at : {gp, gq}) used.push_back({at, at + lrm_buffer(*p) + 64});
      }
    for (uint64_t at = 0; at + 128 <= lrm_end; at += 64)
      if (std::none_of(used.begin(), used.end(), [&](auto u) { return at < u.second && u.first < at + 128; }))
        return uint32_t(at);
    return uint32_t(lrm_end);
  }();
  const bool defer = S == 1 && !twin && !tail && !lrm_acc && !a.acc_in && !a.y_f32 && pl.groups >= 2 &&
                     rows_per_trip && long_gathers && (hold_at + 128 <= lrm_end || a.bias == GemmBias::none);
  // Without the LRM room the rows wait in v17 (fp32, lane r), each taken by a one-lane select
  // (v18: lane id - row, 0 at the row's lane; v20 = 0: no bias) and an integer lane sum of the
  // bits (every lane then holds the row's; v19 = ones).
  const bool hold_reg = defer && hold_at + 128 > lrm_end;
  // The rows' lane sums (vredsum) in the free slots of the loop's last trip, run as a copy of
  // the body of its own (peel), where the epilogue waits on them: an activation collects every
  // row's sum before it starts (64x64, 8 MiB, 128 GB/s: 21.464 -> 21.460 M cycles), and short
  // gathers leave the sums' latency exposed (16x16, 4 MiB, 32 GB/s: 275.06 -> 274.78 M). Not
  // with long gathers and no activation: the gathers bound that epilogue (64x64, 4 MiB, 128 GB/s:
  // +4.5 K with it). Late gathers too: their epilogue ends in one store.
  const bool peel_sums = act || !long_gathers || defer;
  // The look-ahead load at a buffer's end reads 64 bytes past it (the other buffer's
  // start, or the pad): give them defined contents, so no load reads unwritten LRM.
  b.op("vsplati", {V{26}, int64_t(0)});
  b.op("vst", {V{26}, Mem{X{0}, int64_t(lrm_p + BS)}});
  b.op("vst", {V{26}, Mem{X{0}, int64_t(lrm_q + BS)}});
  // The late gathers' loads read the rows held at hold_at, in group 0 too (whose gathers write
  // nothing: p6 empty), and 64 bytes past them.
  if (defer && !hold_reg)
    for (int64_t off : {0, 64}) b.op("vst", {V{26}, Mem{X{0}, int64_t(hold_at) + off}});

  // ---- prologue: tile 0 streams in and is scattered into LRM buffer 0 ----
  // (prefetched: emit_gemm_prefetch started units 0..C-1 already; the descriptors are
  // written again because other kernels reuse the smem since. handed_off: tile 0 is in
  // LRM already and tile 1's first units are in flight.)
  const bool narrow0 = pl.tail_at(0), narrow1 = pl.tail_at(1);
  bool two_routines = pl.last_rows != pl.group_rows() || defer;  // (defer: the last group gathers itself; wide_last)
  for (uint32_t c = 0; c < C; ++c) {
    b.descriptor(desc(c), 0, sim::ocm_addr(buf(c)), 0);
    if (!a.prefetched && !a.handed_off) start_unit(c, xD, pl.unit_offset(c, narrow0), c, narrow0);
  }
  if (two) b.descriptor(desc(1), 0, sim::ocm_addr(buf(1)), 0);
  // A tile's last units can be scattered inside its own first row group's loop (one loop
  // segment each, just before the loop reads them) instead of through the port before
  // it: `ts` of them, those the other tiles would take after the previous tile's last
  // group, when the loop has the issue slots (split 1) and the call has 2 tiles or more
  // (not the narrow tile, whose units go to its PEs only). Tile 0: the units not handed
  // off (GemmArgs::handed_units; when the prologue loads it, the same ts).
  const uint32_t rr0 = pl.groups == 1 && two_routines ? pl.slots(pl.last_rows) : pl.rows;
  const uint32_t smax = pieces_per_iter(cfg, pl, rr0) >= 2 ? max_stream_units(cfg, pl, rr0) : 0;
  const uint32_t after_last = U - (pl.groups - 1) * U / pl.groups;
  const uint32_t ts = pl.tiles >= 2 && after_last <= smax ? after_last : 0;
  const uint32_t hu = !a.handed_off ? U - (narrow0 ? 0 : smax) : a.handed_units ? a.handed_units : U;
  if (hu < U && a.handed_off && pl.tiles < 2 && narrow0)
    fail("gemm: internal: a narrow tile 0 handed off in part on a one-tile call");
  const uint32_t ts0 = U - hu <= max_stream_units(cfg, pl, rr0) ? U - hu : 0;  // streamed in tile 0
  // Where no tile streams its own units in its group 0 (ts0 = ts = 0), the next tile's are
  // spread over every row group, group 0 too: each channel restarts a group earlier, and the
  // last units go in through the loops rather than the port after the last group. The last
  // tile spreads the next call's units so where the DDR brings them (beside the C already in
  // the channels) within that tile's MACs; else (a DDR-bound hand-off: the mergers' fc1 before
  // their fc2 on 64x64, 8 MiB, 128 GB/s, +19 K cycles) they start at group 1 as below, unless the
  // channels' C units arrive within a group's MACs: then the DDR would idle through the rest of
  // group 0 with the next call's units waiting in full buffers (32-byte units: 64x64, 4 MiB,
  // 128 GB/s, the gate|up's last tile handing the down off, 5.7 K cycles a layer; 21.50 -> 21.39 M
  // cycles, 64-byte units at 8 MiB fill theirs in 1.7 groups' time). 64x64,
  // 8 MiB, 128 GB/s: the gate|up call's first group and last tile left the DDR idle, 8.0 and
  // 4.8 K cycles a layer, while the down's units waited in the channels; 21.81 -> 21.56 M cycles.
  // Not on more channels than the tiling rule's 4, whose buffers keep the DDR going as it is (8
  // there: 21.59 M, spread 21.66 M; Image.MoreDmaChannelsTakeNoWorsePlan).
  // (The next call's units past the C in the channels take the DDR longer than the last tile's
  // MACs; the channels' C units arrive within a group's MACs. Staging reads both, below.)
  const double last_macs = last_tile_mac_cycles(cfg, pl), group_macs = last_macs / pl.groups;
  const double unit_ddr = double(pn.code_unit) / cfg.ddr_bytes_per_cycle();
  const bool handoff_ddr_bound = (double(nx_total - nx_from) - C) * unit_ddr > last_macs,
             channels_fill_fast = C * unit_ddr < group_macs;
  // A call of one tile spreads too where the next call's first units are in the channels at its
  // start (GemmArgs::next_started), its hand-off is not DDR-bound and the DDR fast (kGemmFastDdr):
  // from group 1 on, the DDR idled through group 0 with them in full buffers (the prefill's o_proj
  // handing the gate|up off, 64x64 at 4 MiB, 128 GB/s: -0.8 K cycles a layer). On a slower DDR
  // it waited for them instead (32x64 at 4 MiB, 16 and 32 GB/s: +0.02% and +0.03%).
  const bool one_tile_started =
      a.next_started && !handoff_ddr_bound && cfg.ddr_bytes_per_cycle() >= kGemmFastDdr;
  const bool spread = (pl.tiles >= 2 || one_tile_started) && !tail && ts0 == 0 && ts == 0 && pl.groups >= 2 && !two &&
                      C <= kGemmRuleChannels;
  const bool spread_nx = spread && nx && (!handoff_ddr_bound || channels_fill_fast);
  for (uint32_t u = a.handed_off ? hu : 0; u < U - ts0; ++u) fill_unit(u, narrow0, narrow1);
  flush();
  // One tile handed off in part: a channel whose last unit the previous call took starts the
  // next call's unit now (the others when their last unit here is taken).
  if (pl.tiles == 1 && part0)
    for (uint32_t c = 0; c < early; ++c)
      if ((U - 1 - c) / C * C + c < hu) start_next(c);
  next_fill_tile();

  // ---- tile loop ----
  if (a.next_started && !(a.next && pl.tiles == 1 && a.handed_off && !a.handed_units))
    fail("gemm: next_started needs a next call and a call of one tile handed off whole (this one: {} tiles)", pl.tiles);
  Label tile_loop = b.label(), done = b.label(), routine_full = b.label(), routine_last = b.label();
  b.bind(tile_loop);
  if (a.next) {
    // Last tile: every unit of this call is in LRM, so the DMA of the next call's tile 0
    // (its first units) overlaps this tile's MACs (unless they started before this call).
    Label skip = b.label();
    b.op("addi", {xT3, xT, -1});
    b.op("bne", {xT3, X{0}, skip});
    if (!a.next_started) prefetch_units(b, cfg, *a.next, xT3, early);
    if (nx) {
      if ((pn.split == 2 || (nx2 && pn2.split == 2)) && S == 1) even_odd();  // nx's meta goes to PE pairs
      b.li(xMsN, 4 * pn.blocks / pn.split);
    }
    b.bind(skip);
  }
  // Predicates: p4 = PEs of valid columns, p1 = those that gather (even ones at split 2).
  if (S == 2) b.op("slli", {xT3, xCols, 1});
  else b.op("addi", {xT3, xCols, 0});
  b.li(xT2, npe);
  b.op("min", {xT3, xT3, xT2});
  b.op("pset.range", {P{4}, X{0}, xT3});
  if (S == 2) b.op("pand", {P{1}, P{4}, P{2}});
  else b.op("pset.range", {P{1}, X{0}, xT3});
  if (a.bias != GemmBias::none) {
    b.li(xT2, bias_bytes / S);
    b.op("oscatter.w1", {V{20}, Mem{xB, 0}, xT2}, P{4});
    if (twin) {  // the upper row set's columns
      upper_p4(pl.tail_cols * S);
      b.op("oscatter.w1", {V{20}, Mem{xB, -int64_t(H) * (bias_bytes / S)}, xT2}, P{4});
    }
    if (a.bias == GemmBias::f16) b.op("vcvt.f32.f16", {V{20}, V{20}});
    b.op("vand", {V{20}, V{20}, V{21}});
    if (S == 2) b.op("vsplati", {V{20}, int64_t(0)}, P{3});
  }
  if (a.bias != GemmBias::none) zero_all();
  if (twin) {
    // p5 = the lower set's gathering PEs, p7 = the upper set's, p1 = both, p6 = the lower half.
    b.op("por", {P{5}, P{1}, P{1}});
    upper_p4(pl.tail_cols * S);
    b.op("pand", {P{7}, P{4}, P{2}});
    b.op("por", {P{1}, P{5}, P{7}});
    b.op("pset.range", {P{6}, X{0}, xT1});
  }
  // Fills inside the row groups' MAC loops. The next tile's units (in the last tile, nx's
  // tile 0) are spread over the G row groups as above: units [(g-1)D/G, gD/G) are taken
  // at the start of group g >= 1, the last ones after the last group (or, stream_units,
  // inside the next tile's group 0; spread: [gD/G, (g+1)D/G) at every group g, none
  // after). Of the units a group takes at its start, those its loop has iterations for
  // have their codes scattered inside it, one loop segment each (routine parts a, seg,
  // then b for the rest of the loop and the epilogue), in pieces of `piece` PEs
  // (pset.range p4 and a predicated oscatter between the broadcasts, in issue slots the
  // loop leaves free), so the port time overlaps the MACs; each unit's
  // channel restarts as its segment returns. The others (and unit 0's meta, unless its own
  // segments take it: group_with_fills) go through the port before the group.
  const uint32_t iters = 8 / S * B;  // loop iterations of a row group
  // The loop runs a 128-block's trip = 8 / S iterations a pass (one meta load a block); the
  // parts' iteration counts are whole trips.
  const uint32_t trip = 8 / S;
  auto trips = [&](uint32_t it) {
    if (it % trip) fail("gemm: internal: {} loop iterations are not whole trips of {}", it, trip);
    return it / trip;
  };
  // At split 1, fill pieces twice as wide (the least doubling) where a row group's loop has no
  // room for its quota of units (the next tile's, or in the last tile the next call's): the
  // others went through the port between the groups, 512 cycles a unit on 64x64 with the MACs
  // idle. 64x64, 128 GB/s: the gate|up's last tile taking the down's 22 units, 3 a group where
  // its loop had room for 2: 4 MiB 22.91 -> 22.68 M cycles, 2 MiB 28.52 -> 28.40 M, 8 MiB
  // 21.56 -> 21.54 M. (At split 2 too: 8 MiB 21.65 M; every call twice as wide: 21.77 M.)
  uint32_t mult = 1;
  const uint32_t quota_max = std::max(ceil_div(U, pl.groups), nx ? ceil_div(nx_total - nx_from, pl.groups) : 0u);
  while (S == 1 && pieces_per_iter(cfg, pl, pl.rows) >= 2 && mult < 4 &&
         quota_max * unit_iters(cfg, pl, pl.rows, mult) > iters)
    mult *= 2;
  // At split 2 (one row set) twice as wide where the loop has room for half the quota or less and
  // the DDR is fast (kGemmFastDdr) (64x64, 4 MiB, 128 GB/s: the prefill's o_proj handing the
  // gate|up's units off, 2 a group, one through the port, -0.86 K cycles a layer; the mergers'
  // fc1). Not where most of the quota fits (the down, 4 of 5 a group: +35 K cycles, its wide pieces
  // stall the broadcasts), with two row sets (the tower's proj +13 K, fc2 +2.4 K) or on a slower
  // DDR (32x64 at 64 GB/s +0.02%).
  if (S == 2 && !twin && cfg.ddr_bytes_per_cycle() >= kGemmFastDdr && pieces_per_iter(cfg, pl, pl.rows) >= 2 &&
      quota_max * unit_iters(cfg, pl, pl.rows) > iters && 2 * (iters / unit_iters(cfg, pl, pl.rows)) <= quota_max)
    mult = 2;
  // A call of one tile handing the next call off, whose last units would go through the port
  // after its last group with the MACs idle (and arrive late there): that group's routines take
  // pieces twice as wide and every unit left (its loop has the room), where the DDR is fast
  // (kGemmFastDdr) and brings the next call's units within 3/4 of the call's MACs at split 2, 7/8
  // at split 1, whose loop has the more issue slots and port time (64x64, 4 MiB, 128 GB/s: the
  // prefill's down handing q|k|v off, 0.57 of them, -0.4 K cycles a layer; its q|k|v handing
  // o_proj and the gate|up's first units off, 0.85, -0.39 K; the tower's fc2, two row sets, -0.1 K a
  // block; at 2 MiB the gate|up chunk calls at split 2, 0.85, waited for the last units inside the
  // loop: +0.32%).
  const uint32_t nx_n = nx ? nx_total - nx_from : 0, nx_after = nx_n - (pl.groups - 1) * nx_n / std::max(1u, pl.groups),
                 nx_last = pl.groups >= 2 ? (pl.groups - 1) * nx_n / pl.groups - (pl.groups - 2) * nx_n / pl.groups : 0;
  const bool wide_last = pl.tiles == 1 && nx && !nx_narrow && !spread_nx &&
                         pl.groups >= 2 && nx_after > 0 && mult == 1 && a.stage_bytes == 0 && !a.prestaged &&
                         cfg.ddr_bytes_per_cycle() >= kGemmFastDdr && pieces_per_iter(cfg, pl, pl.rows) >= 2 &&
                         (nx_last + nx_after) * unit_iters(cfg, pl, pl.rows, 2) <= iters &&
                         (S == 1 ? 8 : 4) * nx_n * unit_ddr <= (S == 1 ? 7 : 3) * last_macs;
  if (wide_last) two_routines = true;
  auto mult_of = [&](bool lastr) { return lastr && wide_last ? 2 * mult : mult; };
  auto piece_of = [&](uint32_t rr, bool lastr = false) { return piece_pes(cfg, pl, rr, mult_of(lastr)); };
  // Whether group g runs the last group's routines, and its row slots.
  auto last_of = [&](uint32_t g) { return g + 1 == pl.groups && two_routines; };
  auto rr_of = [&](uint32_t g) { return last_of(g) ? pl.slots(pl.last_rows) : pl.rows; };
  auto per_iter = [&](uint32_t rr) { return pieces_per_iter(cfg, pl, rr); };
  auto seg_iters = [&](uint32_t rr, bool lastr = false) { return unit_iters(cfg, pl, rr, mult_of(lastr)); };
  // The routine parts the groups call: (part, last routine, fill register) -> entry.
  enum class Part { full, a, seg, head, mid, b };
  // (seg: the segment a part a / seg scatters, Seg below: 0 every PE, 1 and 2 a narrow next
  // tile's lower and upper copy, 3 a meta chunk; of part b, 1: its last trip peeled, run_b)
  std::map<std::tuple<Part, bool, uint8_t, uint8_t>, Label> parts;
  auto part_label = [&](Part part, bool lastr, uint8_t r, uint8_t seg = 0) {
    auto [it, fresh] = parts.try_emplace({part, lastr, r, seg}, Label{0});
    if (fresh) it->second = b.label();
    return it->second;
  };
  // A unit's loop segments: PEs [lo, lo + pes) take their code bytes from the unit's OCM data
  // + off. This call's units (and a wide next tile's): one segment over every PE. A narrow
  // next tile's with two copies (nx_narrow, two row sets): its W x split PEs, then the upper
  // ones [H, H + W x split) from a base H strides lower, each segment a whole number of
  // iterations (else, and for a narrow tile of one copy, its units go through the port
  // between the row groups). 64x64, 8 MiB, 128 GB/s: the tower's GEMMs before its N = 1,024
  // ones hand their tiles off so, 24.10 -> 23.94 M cycles.
  // Segment 3: a 32-byte chunk of unit 0's meta to every PE (stride in x19), in pieces
  // meta_wide times as wide as the codes' (the same port time a piece).
  struct Seg {
    uint32_t lo, pes;
    int64_t off;
    bool meta = false;
  };
  const uint8_t kMetaSeg = 3;
  // Unit u's meta where its loop segments may take it: ceil(blocks / 8) chunks from OCM src +
  // 32 i to LRM base + dst + 32 i, PE stride in `stride`; pair (split 2): every PE's piece reads
  // at its own stride, and the odd PEs then copy their west neighbour's chunk over what they read
  // (none where a row holds no whole pairs).
  struct MetaChunks {
    uint32_t chunks = 0;
    int64_t src = 0;
    X base{0};
    int64_t dst = 0;
    X stride{0};
    bool pair = false;
  };
  auto meta_chunks = [&](const GemmPlan& p, int64_t src, X base, int64_t dst, X stride) {
    if (p.split == 2 && !pairs_west) return MetaChunks{};
    return MetaChunks{ceil_div(p.blocks, 8), src, base, dst, stride, p.split == 2};
  };
  auto meta_own = [&](uint32_t u) { return u ? MetaChunks{} : meta_chunks(pl, buf(0), xFill, 0, xMs); };
  auto meta_any = [&](uint32_t u) {
    if (u == 0 && !nx_narrow) return meta_chunks(pn, unit_at(cfg, pn, *nx, 0), X{0}, nx->lrm_p, xMsN);
    if (nx2 && u == nx_units) return meta_chunks(pn2, unit_at(cfg, pn2, *nx2, 0), X{0}, nx2->lrm_p, xMsN);
    return MetaChunks{};
  };
  const uint32_t meta_wide = half_units ? 1 : 2;
  // (a chunk's port time at least the dozen instructions its segment adds: 256 PEs at 512 B a
  // cycle; on mini's 16 a 128x2048x2048 call took 1,651 cycles more with them in the loop)
  const bool meta_worth = uint64_t(npe) * 32 >= 16 * uint64_t(cfg.ocm_port_bytes);
  const std::vector<Seg> all_segs = [&] {
    const uint32_t w = nx_narrow ? pn.tail_cols * pn.split : 0;
    return std::vector<Seg>{{0, npe, 0}, {0, w, 0}, {H, w, -int64_t(H) * UB}, {0, npe, 0, true}};
  }();
  const std::vector<uint8_t> own_segs{0};
  const std::vector<uint8_t> nx_segs = !nx_narrow ? own_segs : pn.copies == 2 ? std::vector<uint8_t>{1, 2}
                                                                              : std::vector<uint8_t>{};
  // Iterations of a segment; 0 where its pieces do not fill whole trips.
  auto seg_len = [&](uint32_t rr, const Seg& sg, bool lastr = false) -> uint32_t {
    if (sg.meta) return unit_iters(cfg, pl, rr, mult_of(lastr) * meta_wide);
    if (sg.pes == npe) return seg_iters(rr, lastr);
    // (a part-trip segment runs whole trips: its spare pieces below PE 0, or, for the upper
    // copy ending at the last PE, past it; not on a sub-array, whose machine has PEs there)
    const uint32_t per = piece_of(rr, lastr) * per_iter(rr);
    if (per && (sg.lo == 0 || (sg.lo + sg.pes == npe && !a.sub_array)))
      return ceil_div(ceil_div(sg.pes, per), trip) * trip;
    return per && sg.pes % (per * trip) == 0 ? sg.pes / per : 0;
  };
  auto unit_len = [&](uint32_t rr, const std::vector<uint8_t>& segs, bool lastr = false) {
    uint32_t n = 0;
    for (uint8_t sg : segs) {
      if (!seg_len(rr, all_segs[sg], lastr)) return 0u;
      n += seg_len(rr, all_segs[sg], lastr);
    }
    return n;
  };
  // (one piece an iteration takes so long that the channel's restart after the unit comes too
  // late: the DMA falls behind; measured at split 2 before the loop took a block a trip)
  auto in_loop_max = [&](uint32_t g, const std::vector<uint8_t>& segs) {
    const uint32_t len = unit_len(rr_of(g), segs, last_of(g));
    return per_iter(rr_of(g)) >= 2 && len ? iters / len : 0u;
  };
  // One segment of a routine's loop (part a: after the prologue; seg), fill register v22 + r.
  auto run_seg = [&](Part part, bool lastr, uint8_t r, uint8_t sg, int64_t src) {
    b.li(xSrc, src + all_segs[sg].off);
    b.op("jal", {xLink, part_label(part, lastr, r, sg)});
  };
  // Units taken at the start of group g (none at g = 0; spread: over every group).
  auto quota = [&](uint32_t g, uint32_t units, bool spread_all) -> std::pair<uint32_t, uint32_t> {
    if (spread_all) return {g * units / pl.groups, (g + 1) * units / pl.groups};
    if (g == 0) return {0, 0};
    return {(g - 1) * units / pl.groups, g * units / pl.groups};
  };
  // (wide_last: the last group takes every unit left)
  auto nx_quota = [&](uint32_t g, uint32_t units, bool spread_all) -> std::pair<uint32_t, uint32_t> {
    const auto q = quota(g, units, spread_all);
    return wide_last && g + 1 == pl.groups ? std::pair{q.first, units} : q;
  };
  // Staging (GemmArgs::stage_ocm): where the first tile's groups leave the DDR idle (a group's
  // units arrive within its MACs) and the last tile's hand-off is DDR-bound, C of nx's code units
  // (one tile 0 wide, no call two ahead): the last of the last tile's groups g_j, j < C, spread
  // evenly over its groups that take some, so each leaves the DDR a unit's time to catch up with
  // the loop's takes (64x64, 4 MiB, 128 GB/s: 21.39 -> 21.25 M cycles; the last C groups' 21.34 M,
  // the first C's 21.27 M). The first tile's group j starts unit g_j's DMA (below).
  const uint32_t stage_desc = a.smem + 64 * uint32_t(cfg.dma_channels), nn = nx_total - nx_from;
  stage_stride = staged_stride(pn);
  // (U >= groups: every group of the first tile takes units of its own, so its code, which starts
  // the staging DMAs, runs the branch below)
  if (spread && nx && !nx2 && !nx_narrow && !nx_two && C >= 2 && pn.channels == C && pl.groups >= C + 1 &&
      U >= pl.groups && uint64_t(C) * stage_stride <= a.stage_bytes &&
      uint64_t(a.stage_ocm) + a.stage_bytes <= cfg.ocm_bytes && stage_desc + 64 <= cfg.smem_bytes &&
      ceil_div(U, pl.groups) * double(pl.code_unit) / cfg.ddr_bytes_per_cycle() < group_macs && handoff_ddr_bound) {
    const uint32_t g0 = spread_nx ? 0 : 1;  // (the first group that takes some)
    for (uint32_t j = 0; j < C; ++j) {
      const auto [q0, q1] = quota(g0 + j * (pl.groups - g0) / C, nn, spread_nx);
      if (q1 > q0 && nx_from + q1 - 1 >= 1) stage.push_back(nx_from + q1 - 1);  // (unit 0 holds the meta)
    }
    if (stage.size() < C) stage.clear();
  }
  // Units staged before this call (GemmArgs::prestaged): nx's [C, C + prestaged), its channels' C.
  if (a.prestaged) {
    const auto [at, fit] = nx ? prestage_room(cfg, pn, *nx) : std::pair<uint32_t, uint32_t>{0, 0};
    if (!nx || !a.next_started || nx2 || nx_narrow || nx_two || nx_from || !stage.empty() || fit < a.prestaged ||
        pn.channels + a.prestaged > nx_units)
      fail("gemm: internal: {} units of the next call staged before this one, which hands off {} of its units [{}, {}) "
           "(staging needs its first units started, its tile 0 wide, room for them)",
           a.prestaged, nx ? nx_units - nx_from : 0, nx_from, nx_units);
    stage_ocm = at;
    for (uint32_t i = 0; i < a.prestaged; ++i) stage.push_back(pn.channels + i);
  }
  // Group g's routine scattering units [u0, u1) unit by unit: before(u), its segment
  // (the first also runs the prologue; codes from OCM src(u)), then its channel restarts
  // and its fill register goes to LRM base + dst0 + 64 u (its last piece is done by then);
  // part b runs the rest of the loop and the epilogue.
  // Part b: `count` more trips and the epilogue; where the sums are peeled (peel_sums) and a
  // trip is left, the last one is its own copy of the body (Part b, segment 1: count - 1 in the
  // loop) whose free slots take the rows' lane sums.
  auto run_b = [&](bool lastr, uint32_t count) {
    const bool peeled = peel_sums && count;
    b.li(xCnt, count - (peeled ? 1 : 0));
    b.op("jal", {xLink, part_label(Part::b, lastr, 0, peeled ? 1 : 0)});
  };
  auto segments = [&](uint32_t g, uint32_t u0, uint32_t u1, auto before, auto src, X base, int64_t dst0,
                      auto restart_u) {
    const bool lastr = last_of(g);
    for (uint32_t u = u0; u < u1; ++u) {
      const uint8_t r = uint8_t((u - u0) % 2);
      before(u);
      run_seg(u == u0 ? Part::a : Part::seg, lastr, r, 0, src(u));
      restart_u(u);
      b.op(half_units ? "vst.h" : "vst", {V{uint8_t(22 + r)}, Mem{base, dst0 + int64_t(UB) * u}});
    }
    run_b(lastr, trips(iters - (u1 - u0) * unit_len(rr_of(g), own_segs, lastr)));
  };
  // Group g taking units [u0, u1). Where they are more than the channels hold at once and
  // the DDR brings them no faster than twice the group's loop runs, they are spread over
  // the loop: each waited for as its turn comes, the loop's plain iterations shared out
  // between them (parts head, mid), so each channel restarts as soon as its unit is taken
  // rather than the group waiting at its start for units whose channels only restart
  // there, with the DDR idle behind them (32x32, 2 MiB, 64 GB/s: 85.4 -> 83.1 M cycles).
  // So too for two units or more (within the channels) that take the DDR the loop's time or
  // longer (64x64, 8 MiB, 128 GB/s: 21.460 -> 21.432 M; with the DDR's twice as fast, 4 MiB
  // gained 0.6% but 2 MiB lost 0.4%). Elsewhere all at the start. The first ones' codes go
  // through the port; the last k (those the loop has iterations for; none where segs has no
  // segment) are scattered in loop segments, those of a unit one after another (segs).
  // src(u), base + dst(u): a unit's code bytes in OCM and its LRM address.
  auto group_with_fills = [&](uint32_t g, Label full, uint32_t u0, uint32_t u1, auto take, auto src, X base,
                              auto dst, auto restart_u, const std::vector<uint8_t>& segs, auto meta_of_unit) {
    const bool lastr = last_of(g);
    const double loop = double(iters) * rr_of(g) * cfg.occ(isa::Unit::mac16);
    // (A narrow next tile's two copies hold a unit's channel through two segments: in the loop
    // only where its units stream in within it. Within half of it, when such segments had to be
    // whole trips of pieces, kept the 2B tower's v and qk handing their units off through the
    // port on 64x64: 2 MiB, 128 GB/s 28.04 -> 27.82 M cycles with both rules relaxed.)
    const bool two_copies = segs.size() == 2;
    const uint32_t n = u1 - u0,
                   k = two_copies && n * pn.code_of(true) / cfg.ddr_bytes_per_cycle() > loop
                           ? 0
                           : std::min(n, in_loop_max(g, segs)),
                   ui = u1 - k;
    uint32_t rest = iters - k * unit_len(rr_of(g), segs, lastr);
    // Unit 0's meta in loop segments too (before its codes'), where that unit's codes are, the
    // loop has room for all of it and the DMA stays ahead: the group's units' DDR time under its
    // loop's, and more than 2 channels (its channel restarts only after the meta; on 2 the other
    // one left the DDR idle: 32x64, 2 MiB, 64 GB/s, the prefill's chunk calls at 1.1 x their DDR
    // time, 41.48 -> 41.51 M cycles). 64x64, 8 MiB, 128 GB/s: 21.51 -> 21.48 M; qc-u 79.69 -> 79.55 M.
    MetaChunks mc;
    uint32_t meta_u = u1;
    for (uint32_t u = ui; u < u1 && segs == own_segs; ++u)
      if (meta_of_unit(u).chunks) mc = meta_of_unit(u), meta_u = u;
    const uint32_t meta_len = seg_len(rr_of(g), all_segs[kMetaSeg], lastr);
    const double ddr = double(n) * pl.code_unit / cfg.ddr_bytes_per_cycle();
    if (meta_u < u1 && meta_len && mc.chunks * meta_len <= rest && ddr < loop && C > 2 && meta_worth)
      rest -= mc.chunks * meta_len;
    else meta_u = u1;
    const uint32_t gap = (n > C && 2 * ddr >= loop) || (n > 1 && ddr >= loop) ? rest / n / trip * trip : 0;
    bool started = false;  // the prologue has run
    uint32_t nseg = 0;     // (the fill registers in turn)
    auto run = [&](Part part, uint8_t r) {
      b.op("jal", {xLink, part_label(part, lastr, r)});
      started = true;
    };
    // The group's units in turn. In group 0, whose units were started before the call and wait
    // in full buffers, a first unit carrying the meta in the loop goes last: its segments take
    // longest, and the other channels restart before it (64x64, 4 MiB, 128 GB/s: the gate|up's
    // group 0 with tile 1's meta unit first left the DDR idle 3.3 K cycles, -0.65 K a layer; in
    // the groups after, whose units come in during the group before, 32x32 at 128 GB/s lost
    // 386 cycles and 32x64 at 64 GB/s 1.5%).
    std::vector<uint32_t> order;
    for (uint32_t u = u0; u < u1; ++u) order.push_back(u);
    if (g == 0 && meta_u == u0 && ui == u0 && n > 1 && !gap) std::rotate(order.begin(), order.begin() + 1, order.end());
    for (uint32_t u : order) {
      if (u > u0 && gap) {
        flush();
        b.li(xCnt, trips(gap));
        run(started ? Part::mid : Part::head, 0);
      }
      if (u < ui) {
        take(u, false, true);
        restart_u(u);
        continue;
      }
      take(u, true, u != meta_u);
      flush();
      for (uint32_t i = 0; u == meta_u && i < mc.chunks; ++i) {
        const uint8_t r = uint8_t(nseg++ % 2);
        b.op("addi", {xT1, mc.stride, 0});
        run_seg(started ? Part::seg : Part::a, lastr, r, kMetaSeg, mc.src + 32 * i);
        started = true;
        if (mc.pair) b.op("vmovn", {V{uint8_t(22 + r)}, V{uint8_t(22 + r)}, Dir{3}}, P{3});
        b.op("vst.h", {V{uint8_t(22 + r)}, Mem{mc.base, mc.dst + 32 * int64_t(i)}});
      }
      const uint8_t r = uint8_t(nseg++ % 2);
      for (uint8_t sg : segs) {
        run_seg(started ? Part::seg : Part::a, lastr, r, sg, src(u));
        started = true;
      }
      restart_u(u);
      b.op(half_units ? "vst.h" : "vst", {V{uint8_t(22 + r)}, Mem{base, dst(u)}});
    }
    flush();
    if (!started) {
      b.op("jal", {xLink, full});
      return;
    }
    run_b(lastr, trips(rest - (n - 1) * gap));
  };
  // Group 0 of a tile whose units [u0, U) are on their way: each is scattered into the
  // compute buffer in its own loop segment; the channel then restarts with its next unit
  // (of this tile: x2 is the next tile's base by now), of the next tile (narrow when it
  // is the last), or, in the last tile, of the next call (start_next).
  auto stream_units = [&](uint32_t u0) {
    // (r as restart's: two buffers, own right after the wait, next after the segment)
    auto restart_u = [&](uint32_t u, Restart r) {
      const uint32_t c = u % C;
      const bool own = r != Restart::next, nxt = r != Restart::own;
      if (u + C < U) {
        if (own) start_unit(c, xD, pl.unit_offset(u + C, false) - int64_t(pl.tile_bytes), u + C, false);
      } else {
        Label mine = b.label(), wide = b.label(), end = b.label();
        b.op("bne", {xFills, X{0}, mine});
        if (nxt) start_next(c);
        b.op("jal", {X{0}, end});
        b.bind(mine);
        if (tail) {
          b.li(xT3, 1);
          b.op("bne", {xFills, xT3, wide});
          if (own) start_unit(c, xD, pl.unit_offset(u % C, true), u % C, true);
          b.op("jal", {X{0}, end});
        }
        b.bind(wide);
        if (own) start_unit(c, xD, pl.unit_offset(u % C, false), u % C, false);
        b.bind(end);
      }
    };
    auto wait = [&](uint32_t u) {
      b.op("dma.wait", {Chan{uint8_t(u % C)}});
      if (two) restart_u(u, Restart::own);
    };
    segments(0, u0, U, wait, [&](uint32_t u) { return buf(u); }, xCur, int64_t(pl.meta_lrm),
             [&](uint32_t u) { restart_u(u, two ? Restart::next : Restart::both); });
  };
  // Late gathers: no rows wait at a tile's start (p6 empty; the loop's gathers of group 0 write
  // nothing).
  const X xHold{26}, xPend{29}, xGlo{14}, xGhi{15};
  if (defer) {
    b.op("pset.range", {P{6}, X{0}, X{0}});
    b.li(xHold, hold_at);
    b.op("addi", {xPend, xY, 0});
    if (hold_reg) b.op("vsplati", {V{17}, int64_t(0)});  // (defined values for the empty gathers)
  }
  for (uint32_t g = 0; g < pl.groups; ++g) {
    b.li(xAct, int64_t(a.x_ocm) + int64_t(g) * pl.group_rows() * a.x_stride);
    b.op("addi", {xYg, xY, int64_t(g) * pl.group_rows() * a.y_stride});
    if (a.acc_in) b.op("addi", {xAg, xA, int64_t(g) * pl.group_rows() * a.acc_stride});
    if (lrm_acc) b.op("addi", {xAg, xA, int64_t(g) * 64});
    const Label full = last_of(g) ? routine_last : routine_full;
    const auto [u0, u1] = quota(g, U, spread);
    auto [n0, n1] = nx ? nx_quota(g, nx_total - nx_from, spread_nx) : std::pair<uint32_t, uint32_t>{0, 0};
    n0 += nx_from;
    n1 += nx_from;
    if (g == 0 && (ts0 || ts)) {
      // Tile 0 (x1 = tiles) streams ts0 units, a later full tile ts.
      Label plain = b.label(), gend = b.label(), first = b.label();
      if (ts0 != ts) {
        b.li(xT3, pl.tiles);
        b.op("beq", {xT, xT3, first});
      }
      if (ts) {
        if (tail) {
          b.li(xT3, 1);
          b.op("beq", {xT, xT3, plain});
        }
        stream_units(U - ts);
        b.op("jal", {X{0}, gend});
      } else {
        b.op("jal", {X{0}, plain});
      }
      if (ts0 != ts) {
        b.bind(first);
        if (ts0) stream_units(U - ts0);
        else b.op("jal", {xLink, full});
        b.op("jal", {X{0}, gend});
      }
      b.bind(plain);
      b.op("jal", {xLink, full});
      b.bind(gend);
      continue;
    }
    if (u1 == u0 && n1 == n0) {
      b.op("jal", {xLink, full});
      continue;
    }
    Label end = b.label(), last = b.label();
    b.op("beq", {xFills, X{0}, last});
    if (u1 > u0) {
      auto own = [&](bool next_narrow) {
        group_with_fills(
            g, full, u0, u1,
            [&](uint32_t u, bool in_loop, bool meta_here) { take_unit(u, false, in_loop, next_narrow, meta_here); },
            [&](uint32_t u) { return buf(u) + (u == 0 ? pl.meta_of(false) : 0); }, xFill,
            [&](uint32_t u) { return int64_t(pl.meta_lrm) + int64_t(UB) * u; },
            [&](uint32_t u) { restart_late(u, false, next_narrow); }, own_segs, meta_own);
      };
      if (tail) {
        // Filling the narrow last tile (x23 = 1): its units go to its PEs only, before the
        // group; filling the tile before it (x23 = 2): the restarts fetch the narrow tile.
        Label narrow = b.label(), next_narrow = b.label();
        b.li(xT3, 1);
        b.op("beq", {xFills, xT3, narrow});
        b.li(xT3, 2);
        b.op("beq", {xFills, xT3, next_narrow});
        own(false);
        b.op("jal", {X{0}, end});
        b.bind(next_narrow);
        own(true);
        b.op("jal", {X{0}, end});
        b.bind(narrow);
        for (uint32_t u = u0; u < u1; ++u) fill_unit(u, true, false);
        flush();
        b.op("jal", {xLink, full});
      } else {
        own(false);
      }
    } else {
      b.op("jal", {xLink, full});
    }
    if (g < stage.size() && !a.prestaged) {
      // The first tile's group g stages nx's unit stage[g] on the last channel, behind the
      // group's own unit there (taken last in the next group, by when the DDR has brought both).
      Label skip = b.label();
      b.li(xT3, pl.tiles);
      b.op("bne", {xT, xT3, skip});
      const uint32_t u = stage[g];
      b.descriptor(stage_desc, uint32_t(nx->w_ddr + pn.unit_offset(u, false)), sim::ocm_addr(stage_at(u)),
                   pn.code_of(false));
      b.li(xT3, stage_desc);
      b.op("dma.start", {Chan{uint8_t(C - 1)}, xT3});
      b.bind(skip);
    }
    b.op("jal", {X{0}, end});
    b.bind(last);
    if (n1 > n0) {
      group_with_fills(g, full, n0, n1, take_any, src_any, X{0}, dst_any, restart_any, nx_segs, meta_any);
    } else {
      b.op("jal", {xLink, full});
    }
    b.bind(end);
  }
  {
    // After the last group: the next tile's last units, or (last tile) nx's last ones.
    const uint32_t u0 = quota(pl.groups - 1, U, spread).second,
                   n0 = nx ? nx_from + nx_quota(pl.groups - 1, nx_total - nx_from, spread_nx).second : 0;
    if (U > u0 && ts) {
      // (streamed in the next tile's group 0, but into the narrow last tile)
      if (tail) {
        Label skip = b.label();
        b.li(xT3, 1);
        b.op("bne", {xFills, xT3, skip});
        for (uint32_t u = u0; u < U; ++u) fill_unit(u, true, false);
        flush();
        b.bind(skip);
      }
    } else if (U > u0) {
      Label skip = b.label();
      b.op("beq", {xFills, X{0}, skip});
      fill_units(u0, U);
      b.bind(skip);
    }
    if (nx && nx_total > n0) {
      Label skip = b.label();
      b.op("bne", {xFills, X{0}, skip});
      for (uint32_t u = n0; u < nx_total; ++u) fill_next_unit(u);
      flush();
      b.bind(skip);
    }
  }
  {
    Label noswap = b.label();
    b.op("beq", {xFills, X{0}, noswap});
    next_fill_tile();
    b.op("xor", {xCur, xCur, xSwap});
    b.bind(noswap);
  }
  b.op("addi", {xY, xY, int64_t(silu ? T / 2 : T) * y_bytes});
  if (a.acc_in) b.op("addi", {xA, xA, int64_t(T) * 4});
  if (lrm_acc) b.op("addi", {xA, xA, int64_t(pl.groups) * 64});
  b.op("addi", {xB, xB, int64_t(T) * bias_bytes});
  b.op("addi", {xCols, xCols, -int64_t(T)});
  b.op("addi", {xFills, xFills, -1});
  b.op("addi", {xT, xT, -1});
  b.op("bne", {xT, X{0}, tile_loop});
  b.op("jal", {X{0}, done});

  // ---- row-group routine: rr rows (a multiple of 4), the first `real` of them real ----
  // In: x10 = X of the group's row 0, x11 = Y of its row 0 at the tile's column 0,
  // x4 = LRM buffer, x12 / x13 the codes / meta of the block. The loop runs once per
  // 128-block (a trip: `trip` groups of 16 codes). Parts: full (as described above); a: the
  // prologue and seg; seg: a unit segment's trips with per_iter fill pieces each iteration
  // into v22 + r (from OCM x25); head: the prologue and x16 trips; mid: x16 trips; b: x16
  // more trips and the epilogue.
  auto routine = [&](Label entry, uint32_t real, Part part, uint8_t r, uint8_t sg, bool lastr) {
    const bool late = defer && !lastr;  // this group's rows wait for the next group's loop
    const uint32_t rr = pl.slots(real), nslots = twin ? (real + 1) / 2 : real;
    // Slot i's X (i >= rr: the next group of codes); two row sets: row 2i (set 0) or 2i + 1.
    auto rowoff = [&](uint32_t i, uint32_t set = 0) -> int64_t {
      const uint32_t r = twin ? 2 * (i % rr) + set : i % rr, grp = i / rr;
      return (r < real ? int64_t(r) * a.x_stride : 0) + int64_t(grp) * 32 * S;
    };
    // Slot i's activations: v28 + i % 4 (two row sets: v28-v31, v16-v19 in turn).
    auto xr = [&](uint32_t i) { return V{uint8_t(!twin || i % 8 < 4 ? 28 + i % 4 : 16 + i % 4)}; };
    // Split 2: obcast 32 activations (64 B); odd PEs take the odd k (high halves).
    const char* bcast = S == 2 ? "obcast" : "obcast.h";
    auto odd_shift = [&](uint32_t i) {
      if (S == 2) b.op("vshr", {xr(i), xr(i), int64_t(16)}, P{3});
    };
    // Two row sets: the upper row to every PE, then (3 slots later) the lower row to p6.
    // (xo: the trip's group's activations)
    auto upper_bcast = [&](uint32_t i, int64_t xo = 0) { b.op(bcast, {xr(i), Mem{xAct, xo + rowoff(i, 1)}}); };
    auto lower_bcast = [&](uint32_t i, int64_t xo = 0) { b.op(bcast, {xr(i), Mem{xAct, xo + rowoff(i)}}, P{6}); };
    // Two row sets at split 2 (pair_rows): both rows in one grouped broadcast, the lower set's
    // PEs [0, H) row 2i, the upper's row 2i + 1 a row stride (x14) on, H PEs a group (x31); a
    // slot whose upper row is past the group's real rows reads row 2i twice (stride x0).
    auto pair_bcast = [&](uint32_t i, int64_t xo = 0) {
      const bool upper_real = 2 * (i % rr) + 1 < real;
      b.op("obcast.g", {xr(i), Mem{xAct, xo + rowoff(i)}, upper_real ? xRows : X{0}, xHalf});
    };
    b.bind(entry);
    if (pair_rows) b.li(xHalf, H);  // (the descriptors between the parts use x31)
    if (part == Part::full || part == Part::a || part == Part::head) {
    b.op("addi", {xC, xCur, pl.meta_lrm});
    b.op("vld", {V{26}, Mem{xC, 0}});
    b.op("vld.h", {V{27}, Mem{xCur, 0}});
    b.op("addi", {xG, xCur, 0});
    for (uint32_t i = 0; i < (twin && !pair_rows ? 6 : 3); ++i) {
      if (pair_rows) pair_bcast(i);
      else if (twin) upper_bcast(i);
      else b.op(bcast, {xr(i), Mem{xAct, rowoff(i)}});
    }
    b.op("vcvt.f32.f16", {V{27}, V{27}});
    if (!zero_late)
      for (uint32_t r = 0; r < rr; ++r) b.op("vmov", {V{uint8_t(r)}, V{20}});
    if (twin && !pair_rows)
      for (uint32_t i = 0; i < 3; ++i) lower_bcast(i);
    b.op("vdq4.f16", {V{24}, V{26}, V{27}, int64_t(0)});
    odd_shift(0);
    }
    // A trip: the block's `trip` groups of 16 codes, group u's activations 32 S u bytes on
    // (x10 moves once a trip, in its last group), its dequantised weights in v24 + u % 2. The
    // next group's weights are prepared between the vmacs (codes at x12 + 8 (u + 1); in the
    // last group the next block's meta at x13 + 4, then x12 and x13 move), in the issue slots
    // the slot's broadcasts and fill pieces leave (issue_plan).
    // Fill pieces (per_iter of them an iteration, each 4 instructions: PEs [x9, x24) take their
    // 64 code bytes), spread evenly over the trip's free issue slots.
    const bool meta = sg == kMetaSeg;
    const uint32_t pieces_here = per_iter(rr), piece = piece_of(rr, lastr) * (meta ? meta_wide : 1);
    const bool long_piece = uint64_t(piece) * (meta || half_units ? 32 : 64) > 2 * uint64_t(cfg.ocm_port_bytes);
    auto piece_op = [&](uint32_t j) {
      switch (j % 4) {
        case 0: b.op("pset.range", {P{4}, xLo, xHi}); break;
        case 1:
          if (meta) b.op("oscatter.h", {V{uint8_t(22 + r)}, Mem{xSrc, 0}, xT1}, P{4});
          else b.op(half_units ? "oscatter.h" : "oscatter", {V{uint8_t(22 + r)}, Mem{xSrc, 0}, xUnit}, P{4});
          break;
        case 2: b.op("addi", {xLo, xLo, int64_t(piece)}); break;
        default: b.op("addi", {xHi, xHi, int64_t(piece)}); break;
      }
    };
    // The instructions a slot issues besides its vmac without stretching it (room), and those of
    // them its broadcasts (and split 2's shifts) take.
    const uint32_t room = cfg.occ(isa::Unit::mac16) - 1, fixed = pair_rows ? 2 : twin ? 3 : S == 2 ? 2 : 1;
    auto body = [&](bool pieces, bool reduce = false) {
      const int64_t step = int64_t(32) * S * trip;  // x10's move a trip
      std::vector<uint32_t> load(trip * rr, fixed);
      std::vector<std::vector<Extra>> extras(trip);
      std::vector<std::vector<uint32_t>> ats(trip);
      std::vector<size_t> moves(trip, 0);
      for (uint32_t u = 0; u < trip; ++u) {
        const V wn{uint8_t(24 + (u + 1) % 2)};
        // (slot distances: an LRM load's latency takes 2, the meta's fp32 conversion 2)
        std::vector<Extra>& extra = extras[u];
        extra.push_back({[&b, &xC = xC, u] { b.op("vld", {V{26}, Mem{xC, int64_t(8) * (u + 1)}}); }, {}});
        std::vector<std::pair<size_t, uint32_t>> dq_deps{{0, 2}};
        if (u + 1 == trip) {
          extra.push_back({[&] { b.op("vld.h", {V{27}, Mem{xG, 4}}); }, {}});
          extra.push_back({[&] { b.op("vcvt.f32.f16", {V{27}, V{27}}); }, {{1, 2}}});
          extra.push_back({[&] { b.op("addi", {xC, xC, int64_t(8) * trip}); }, {}});
          extra.push_back({[&] { b.op("addi", {xG, xG, 4}); }, {}});
          dq_deps.push_back({2, 2});
        }
        // The dequantisation after the codes' load (and the meta's conversion), and (the
        // trip's last group) x10's move, the broadcasts after it a trip's rows lower.
        extra.push_back({[&b, wn] { b.op("vdq4.f16", {wn, V{26}, V{27}, int64_t(0)}); }, dq_deps, true});
        if (u + 1 == trip) {
          moves[u] = extra.size();
          extra.push_back({[&] { b.op("addi", {xAct, xAct, step}); }, {}});
        }
        // (peel: the trip's last group's rows' lane sums, each 2 slots after its last vmac)
        if (reduce && u + 1 == trip)
          for (uint32_t r = 0; r < nslots; ++r)
            extra.push_back({[&b, r] { b.op("vredsum.f32", {V{uint8_t(r)}, V{uint8_t(r)}}); }, {}, false, r + 2});
        ats[u] = issue_plan(extra, room, load.data() + u * rr, rr);
      }
      // Instruction k of n at the first slot with room from k / n of the way through the trip.
      const uint32_t slots = trip * rr, n = pieces ? 4 * pieces_here * trip : 0;
      auto spread = [&](size_t count) {
        std::vector<uint32_t> at(count);
        for (uint32_t k = 0, j = 0; k < count; ++k) {
          j = std::max(j, uint32_t(uint64_t(k) * slots / count));
          while (j + 1 < slots && load[j] >= room) ++j;
          at[k] = j;
          ++load[j];
        }
        return at;
      };
      const std::vector<uint32_t> piece_at = spread(n);
      // Late gathers: rows_per_trip of the previous group's rows, each loaded from LRM (its fp16
      // in lane 0's low half) and written to Y in pieces of gather_pes PEs (p5 = the piece's PEs
      // that gather, p6: none in a tile's first group), in the slots left after the pieces.
      std::vector<std::function<void()>> gops;
      if (defer)
        for (uint32_t q = 0; q < rows_per_trip; ++q) {
          const V vt{uint8_t(hold_reg ? 16 : 16 + q % 2)};
          if (hold_reg) {
            gops.push_back([&b] { b.op("vsel", {V{16}, V{20}, V{17}, V{18}}); });
            gops.push_back([&b] { b.op("vredsum.i32", {V{16}, V{16}}); });  // (the bits: -0 stays -0)
            gops.push_back([&b] { b.op("vpack.f16", {V{16}, V{16}, V{16}}); });
            gops.push_back([&b] { b.op("vsub.i32", {V{18}, V{18}, V{19}}); });
          } else {
            gops.push_back([&b, vt, xHold] { b.op("vld", {vt, Mem{xHold, 0}}); });
            gops.push_back([&b, xHold] { b.op("addi", {xHold, xHold, 2}); });
          }
          for (uint32_t lo = 0; lo < T; lo += gather_pes) {
            gops.push_back([&b, lo, xGlo] { b.li(xGlo, lo); });
            gops.push_back([&b, lo, xGhi, gather_pes] { b.li(xGhi, lo + gather_pes); });
            gops.push_back([&b, xGlo, xGhi] { b.op("pset.range", {P{5}, xGlo, xGhi}); });
            gops.push_back([&b] { b.op("pand", {P{5}, P{5}, P{6}}); });
            gops.push_back([&b, vt, xPend, xGs] { b.op("ogather.h1", {vt, Mem{xPend, 0}, xGs}, P{5}); });
          }
          gops.push_back([&b, xPend, &a] { b.op("addi", {xPend, xPend, int64_t(a.y_stride)}); });
        }
      const std::vector<uint32_t> gather_at = spread(gops.size());
      size_t pk = 0, gk = 0;
      bool moved = false;  // x10 has moved: this trip's rows a step lower
      for (uint32_t u = 0; u < trip; ++u) {
        const V w{uint8_t(24 + u % 2)};
        const int64_t xo = int64_t(u) * 32 * S;
        size_t next = 0;
        bool hoisted = false;  // (this slot's broadcast went out in the slot before)
        for (uint32_t j = 0; j < rr; ++j) {
          b.op("vmac.f16", {V{uint8_t(j)}, w, xr(j)});
          const int64_t xj = xo - (moved ? step : 0);
          // A fill piece's scatter that takes the port longer than the slot leaves it after the
          // broadcast (more than 2 cycles: 64 PEs of 32-byte units), issued right after the
          // broadcast (before split 2's shift, a cycle later then) where its pset.range went in an
          // earlier slot: the next slot's broadcast waits for it a cycle less.
          const uint32_t slot = u * rr + j;
          const bool long_scatter = long_piece && pk < n && pk % 4 == 1 && piece_at[pk] == slot;
          auto pieces_here_now = [&] {
            if (long_scatter) piece_op(uint32_t(pk++));
          };
          if (pair_rows) {
            pair_bcast(j + 3, xj);
            pieces_here_now();
            odd_shift(j + 1);
          } else if (twin) {
            lower_bcast(j + 3, xj);
            odd_shift(j + 1);
            upper_bcast(j + 6, xj);
          } else if (S == 1) {
            // At split 1 a long piece's slot also takes the next slot's broadcast, ahead of the
            // piece (its register was read by this slot's vmac), where the piece's scatter is the
            // slot's only instruction besides them: the port then has that slot's spare cycles and
            // the next one's for the scatter, and no broadcast waits for it.
            const bool alone = (pk + 1 >= n || piece_at[pk + 1] != slot) &&
                               (gk >= gops.size() || gather_at[gk] != slot) &&
                               (next >= extras[u].size() || ats[u][next] != j);
            const bool hoist = long_scatter && j + 1 < rr && alone;
            if (!hoisted) b.op(bcast, {xr(j + 3), Mem{xAct, xj + rowoff(j + 3)}});
            hoisted = hoist;
            if (hoist) b.op(bcast, {xr(j + 4), Mem{xAct, xj + rowoff(j + 4)}});
            pieces_here_now();
          } else {
            b.op(bcast, {xr(j + 3), Mem{xAct, xj + rowoff(j + 3)}});
            pieces_here_now();
            odd_shift(j + 1);
          }
          for (; pk < n && piece_at[pk] == u * rr + j; ++pk) piece_op(uint32_t(pk));
          for (; gk < gops.size() && gather_at[gk] == u * rr + j; ++gk) gops[gk]();
          for (; next < extras[u].size() && ats[u][next] == j; ++next) {
            extras[u][next].emit();
            if (moves[u] && next == moves[u]) moved = true;
          }
        }
        for (; next < extras[u].size(); ++next) extras[u][next].emit();
      }
    };
    const bool peel = peel_sums && (part == Part::full || (part == Part::b && sg == 1));
    if (part == Part::full) b.li(xCnt, trips(iters) - (peel ? 1 : 0));
    if (part == Part::a || part == Part::seg) {
      // The segment's piece slots past its PEs' pieces (it runs whole trips) come first, below
      // PE 0: empty on any array (a sub-array's machine too).
      const Seg& sgm = all_segs[sg];
      const int64_t spare = int64_t(seg_len(rr, sgm, lastr)) * per_iter(rr) - ceil_div(sgm.pes, piece),
                    lo = sgm.lo && sgm.lo + sgm.pes == npe ? int64_t(sgm.lo)
                                                           : int64_t(sgm.lo) - std::max<int64_t>(0, spare) * piece;
      b.li(xLo, lo);
      b.li(xHi, lo + piece);
      b.li(xCnt, trips(seg_len(rr, sgm, lastr)));
      b.loop(xCnt, [&] { body(true); });
      b.op("jalr", {X{0}, xLink, 0});
      return;
    }
    b.loop(xCnt, [&] { body(false); });
    if (peel) body(false, true);
    if (part == Part::head || part == Part::mid) {
      b.op("jalr", {X{0}, xLink, 0});
      return;
    }
    // Epilogue, software-pipelined over the rows: lane sum, (split 2: + east half),
    // (acc_in: + the partial sum, scattered into v28 + r % 4, free once the loop is done),
    // fp16 (or fp32), one value per column into Y.
    // LRM partial sums at split 2: the pair's sums added once, to the lanes of every row at once
    // (below), not a row at a time (the same fp32 additions: own + east).
    const bool pair_late = lrm_acc && S == 2;
    uint32_t ready = S == 2 && !pair_late ? 6 : 2;  // the row's sum is complete
    if (a.acc_in) ready += 2;
    const uint32_t lag = lrm_acc ? ready : ready + (a.y_f32 ? 0 : 2);
    // (lane ids: an activation's in v26, free once the loop is done, where v30 would wait on the
    // loop's last look-ahead broadcast into it)
    const bool collect = act || late;  // every row's sum into a lane of v28
    const V lane_ids{uint8_t(collect ? 26 : 30)};
    if (lrm_acc || collect) b.op("vlaneid", {lane_ids});
    // (lrm_in: only the PEs that hold sums load them; a chain's seeds wrote only theirs)
    if (a.lrm_in) b.op("vld", {V{29}, Mem{xAg, 0}}, P{1});
    if (collect) {
      b.op("vsplati", {V{28}, int64_t(0)});  // (the lanes of rows past the group's real ones)
      b.op("vsplati", {V{27}, int64_t(1)});
    }
    if (lrm_acc) b.op("vsplati", {V{25}, int64_t(1)});  // (the loop's next w: free here)
    // Step s of `depth` stages over the slots: row(back, f) runs f on slot s - back.
    auto pipeline = [&](uint32_t depth, auto&& step) {
      for (uint32_t s = 0; s < nslots + depth; ++s)
        step([&](uint32_t back, auto f) {
          if (s >= back && s - back < nslots) f(uint8_t(s - back));
        });
    };
    // Slot r's rows to (or from, an OCM scatter) OCM at base + row * stride, PEs p: two row
    // sets, row 2r from p5 and row 2r + 1 from p7, whose base lies H PEs' steps (sval) lower.
    auto rows_op = [&](const char* op, V v, X base, uint32_t stride, X step, uint32_t sval, uint8_t r, P p) {
      if (!twin) {
        b.op(op, {v, Mem{base, int64_t(r) * stride}, step}, p);
        return;
      }
      b.op(op, {v, Mem{base, int64_t(2 * r) * stride}, step}, P{5});
      if (2u * r + 1 < real) b.op(op, {v, Mem{base, int64_t(2 * r + 1) * stride - int64_t(H) * sval}, step}, P{7});
    };
    const uint32_t gs = silu ? 1 : y_bytes / S;  // (xGs)
    auto zero = [&](uint8_t r) {  // (the next group's accumulator)
      if (zero_late) b.op("vmov", {V{r}, V{20}});
    };
    auto gather = [&](const char* op, uint8_t r, P p) { rows_op(op, V{r}, xYg, a.y_stride, xGs, gs, r, p); };
    // Two row sets' plain outputs: each step's two gathers (a row's lower set first in it, the row
    // before's upper set after the step's lane sum and pair move) with instructions between them,
    // which issue while the first takes the port (back to back, the second waited for it: 11
    // cycles a row on 64x64, 8 so).
    const bool split_sets = twin && !lrm_acc && !collect;
    const char* gop = a.y_f32 ? "ogather.w1" : "ogather.h1";
    auto upper_gather = [&](uint8_t r) {
      if (2u * r + 1 < real) b.op(gop, {V{r}, Mem{xYg, int64_t(2 * r + 1) * a.y_stride - int64_t(H) * gs}, xGs}, P{7});
      zero(r);
    };
    pipeline(lag + (split_sets ? 1 : 0), [&](auto row) {
      if (split_sets) row(lag, [&](uint8_t r) { b.op(gop, {V{r}, Mem{xYg, int64_t(2 * r) * a.y_stride}, xGs}, P{5}); });
      if (!peel) row(0, [&](uint8_t r) { b.op("vredsum.f32", {V{r}, V{r}}); });
      if (S == 2 && !pair_late) row(2, [&](uint8_t r) { b.op("vmovn", {V{uint8_t(16 + r % 4)}, V{r}, Dir{1}}); });
      if (split_sets) row(lag + 1, upper_gather);
      if (S == 2 && !pair_late) row(4, [&](uint8_t r) { b.op("vadd.f32", {V{r}, V{r}, V{uint8_t(16 + r % 4)}}); });
      if (a.acc_in) {
        row(ready - 4, [&](uint8_t r) {
          rows_op("oscatter.w1", V{uint8_t(28 + r % 4)}, xAg, a.acc_stride, xAs, 4 / S, r, P{1});
        });
        row(ready - 2, [&](uint8_t r) { b.op("vadd.f32", {V{r}, V{r}, V{uint8_t(28 + r % 4)}}); });
      }
      // LRM partial sums: row r's sum into lane r of v28 where lane id - r is 0 (v30 - r,
      // counted down a row at a time by the ones in v25, in v16 + r % 4), after the rows (split
      // 2: + the east PE's v28) v28 += the group's partial sums (v29), then stored, or lane r
      // spread to every lane of row r's register for the fp16 output below. An activation:
      // the same with the sum rounded to fp16 first (each lane of v28 then holds it twice).
      if (lrm_acc) {
        const auto count = [&](uint8_t r) { return r == 0 ? V{30} : V{uint8_t(16 + r % 4)}; };
        row(ready - 2, [&](uint8_t r) {
          if (r) b.op("vsub.i32", {count(r), r == 1 ? V{30} : count(r - 1), V{25}});
        });
        row(ready, [&](uint8_t r) { b.op("vsel", {V{28}, V{28}, V{r}, count(r)}); });
        return;
      }
      // An activation: row r's sum into lane r of v28 where lane id - r (v26 - r, counted
      // down a row at a time by the ones in v27) is 0: at split 1 a row ahead in v16 + r % 4,
      // so no row waits on the count's latency; at split 2 in v31 (v16-v19: the pair sums).
      if (collect) {
        const auto count = [&](uint8_t r) { return r == 0 ? lane_ids : V{uint8_t(S == 1 ? 16 + r % 4 : 31)}; };
        const auto down = [&](uint8_t r) {
          if (r) b.op("vsub.i32", {count(r), r == 1 ? lane_ids : count(r - 1), V{27}});
        };
        row(lag, [&](uint8_t r) {
          if (S == 2) down(r);
          b.op("vsel", {V{28}, V{28}, V{r}, count(r)}, P{1});
        });
        if (S == 1) row(lag - 2, down);
        if (late) row(lag, zero);
        return;
      }
      // Only the gathering PEs (p1) pack: the others hold columns past the matrix (the
      // narrow last tile), whose sums are junk and must not reach the fp16 range tracking.
      if (!a.y_f32) row(lag - 2, [&](uint8_t r) { b.op("vpack.f16", {V{r}, V{r}, V{r}}, P{1}); });
      if (!split_sets) {
        row(lag, [&](uint8_t r) { gather(gop, r, P{1}); });
        row(lag, zero);
      }
    });
    if (collect) {
      // The group's rows in v28 as fp32, the activation on them, each row spread back for its
      // gather (silu_pairs: the gate columns' PEs, p4 = p1 & p2, gather); late: the rows as
      // fp16 elements 0-15 to LRM for the next group's loop (p6 = the PEs that gather).
      const P pg = silu ? P{4} : P{1};
      if (act) {
        b.op("vpack.f16", {V{24}, V{28}, V{28}}, P{1});  // each lane rounded to fp16 and back
        b.op("vunpack.f16", {V{28}, V{24}, int64_t(0)}, P{1});
        if (silu) b.op("pand", {P{4}, P{1}, P{2}});
        emit_act(b, a.act, pg);
      }
      if (late) {
        if (hold_reg) {
          b.op("vmov", {V{17}, V{28}});
          b.op("vlaneid", {V{18}});  // (lane_ids: an activation's constants are over them)
          b.op("vsplati", {V{19}, int64_t(1)});
        } else {
          b.op("vpack.f16", {V{28}, V{28}, V{28}}, pg);
          b.op("vst", {V{28}, Mem{X{0}, int64_t(hold_at)}});
          b.li(xHold, hold_at);
        }
        b.op("addi", {xPend, xYg, 0});
        b.op("por", {P{6}, pg, pg});
      } else {
        pipeline(4, [&](auto row) {
          row(0, [&](uint8_t r) { b.op("vdup", {V{r}, V{28}, int64_t(r)}); });
          row(2, [&](uint8_t r) { b.op("vpack.f16", {V{r}, V{r}, V{r}}, pg); });
          row(4, [&](uint8_t r) { gather("ogather.h1", r, pg); });
          row(4, zero);
        });
      }
    }
    if (lrm_acc) {
      if (pair_late) {
        b.op("vmovn", {V{16}, V{28}, Dir{1}});
        b.op("vadd.f32", {V{28}, V{28}, V{16}});
      }
      if (a.lrm_in) b.op("vadd.f32", {V{28}, V{28}, V{29}});
      if (a.lrm_out) {
        b.op("vst", {V{28}, Mem{xAg, 0}});
      } else {
        pipeline(4, [&](auto row) {
          row(0, [&](uint8_t r) { b.op("vdup", {V{r}, V{28}, int64_t(r)}); });
          row(2, [&](uint8_t r) { b.op("vpack.f16", {V{r}, V{r}, V{r}}, P{1}); });
          row(4, [&](uint8_t r) { gather("ogather.h1", r, P{1}); });
        });
      }
    }
    for (uint32_t r = nslots; r < rr; ++r) zero(uint8_t(r));
    b.op("jalr", {X{0}, xLink, 0});
  };
  routine(routine_full, pl.group_rows(), Part::full, 0, 0, !two_routines);
  if (two_routines) routine(routine_last, pl.last_rows, Part::full, 0, 0, true);
  for (const auto& [key, entry] : parts)
    routine(entry, std::get<1>(key) ? pl.last_rows : pl.group_rows(), std::get<0>(key), std::get<2>(key),
            std::get<3>(key), std::get<1>(key) || !two_routines);
  b.bind(done);
}

KernelCost cost_gemm_lrm_seed(const sim::Config& cfg, const GemmSeedArgs& a) {
  const GemmPlan pl = plan_gemm(cfg, a.m, a.n, a.k, a.split);
  KernelCost c;
  c.ocm_bytes = uint64_t(a.rows) * pl.tiles * cfg.npe() * 4;
  return c;
}

void emit_gemm_lrm_seed(Builder& b, const sim::Config& cfg, const GemmSeedArgs& a) {
  if (a.m == 0 || a.rows == 0 || a.row0 + a.rows > a.m)
    fail("gemm seed: rows [{}, {}) must be a non-empty part of the call's {} rows", a.row0, a.row0 + a.rows, a.m);
  const GemmPlan pl = plan_gemm(cfg, a.m, a.n, a.k, a.split);
  const uint32_t S = pl.split, T = pl.cols, R = pl.group_rows(), H = cfg.npe() / 2;
  const bool twin = pl.sets == 2;  // row 2i of a group to slot i of the lower set (p5), 2i + 1 of the upper (p7)
  if (a.x_stride < 2 * a.n || a.x_stride % 2) fail("gemm seed: x_stride {} must be even and >= 2*N = {}", a.x_stride, 2 * a.n);
  if (uint64_t(a.x_ocm) + uint64_t(a.rows - 1) * a.x_stride + 2 * a.n > cfg.ocm_bytes)
    fail("gemm seed: X [{} x {}] at OCM {} (stride {}) does not fit the {} bytes of OCM", a.rows, a.n, a.x_ocm,
         a.x_stride, cfg.ocm_bytes);
  if (a.lrm_acc % 64 || a.lrm_acc + uint64_t(pl.lrm_sums_bytes()) > cfg.lrm_bytes)
    fail("gemm seed: the LRM partial sums [{}, {}) must be 64-byte aligned and inside lrm_bytes = {}", a.lrm_acc,
         a.lrm_acc + pl.lrm_sums_bytes(), cfg.lrm_bytes);
  const X xRow{1}, xS{2}, xL{3}, xT{4};
  b.op("vlaneid", {V{30}});
  b.li(xS, 2 / S);  // (split 2: even PE 2j reads column j's word)
  if (S == 2) b.pset_cols_mod(P{2}, 0, 2, xL, xT);
  for (uint32_t t = 0; t < pl.tiles; ++t) {
    // p4 = the PEs of the tile's columns, p1 = those holding a column's sum (even ones at split 2)
    b.li(xT, int64_t(std::min(T, a.n - t * T)) * S);
    b.op("pset.range", {P{4}, X{0}, xT});
    if (S == 2) b.op("pand", {P{1}, P{4}, P{2}});
    else b.op("pset.range", {P{1}, X{0}, xT});
    if (twin) {
      b.op("por", {P{5}, P{1}, P{1}});
      b.li(xL, H);
      b.li(xT, H + pl.tail_cols * S);
      b.op("pset.range", {P{4}, xL, xT});
      b.op("pand", {P{7}, P{4}, P{2}});
      b.op("por", {P{1}, P{5}, P{7}});
    }
    // Row j's PEs, lane and the offset of its base (the upper set's: H PEs' strides lower).
    auto row_p = [&](uint32_t j) { return !twin ? P{1} : (j % R) % 2 ? P{7} : P{5}; };
    auto lane = [&](uint32_t j) { return twin ? (j % R) / 2 : j % R; };
    auto below = [&](uint32_t j) { return twin && (j % R) % 2 ? int64_t(H) * (2 / S) : 0; };
    for (uint32_t g = a.row0 / R; g * R < a.row0 + a.rows; ++g) {
      const uint32_t j0 = std::max(g * R, a.row0), j1 = std::min(g * R + R, a.row0 + a.rows);
      b.li(xL, a.lrm_acc + (t * pl.groups + g) * 64);
      if (j1 - j0 < R) b.op("vld", {V{28}, Mem{xL, 0}});
      b.li(xRow, int64_t(a.x_ocm) + int64_t(j0 - a.row0) * a.x_stride + int64_t(t) * T * 2);
      for (uint32_t q0 = j0; q0 < j1; q0 += 4) {  // four rows at a time: their latencies overlap
        const uint32_t q1 = std::min(q0 + 4, j1);
        for (uint32_t j = q0; j < q1; ++j)
          b.op("oscatter.w1", {V{uint8_t(16 + j % 4)}, Mem{xRow, int64_t(j - j0) * a.x_stride - below(j)}, xS}, row_p(j));
        for (uint32_t j = q0; j < q1; ++j) {
          b.op("vcvt.f32.f16", {V{uint8_t(16 + j % 4)}, V{uint8_t(16 + j % 4)}}, row_p(j));
          b.op("vsplati", {V{uint8_t(20 + j % 4)}, int64_t(lane(j))});
          b.op("vcmpeq.i32", {V{uint8_t(20 + j % 4)}, V{30}, V{uint8_t(20 + j % 4)}});
        }
        for (uint32_t j = q0; j < q1; ++j)
          b.op("vsel", {V{28}, V{uint8_t(16 + j % 4)}, V{28}, V{uint8_t(20 + j % 4)}}, row_p(j));
      }
      b.op("vst", {V{28}, Mem{xL, 0}}, P{1});
    }
  }
}

void emit_gemm_prefetch(Builder& b, const sim::Config& cfg, const GemmArgs& a) { prefetch_units(b, cfg, a, X{1}); }

uint32_t emit_gemm_prefetch_staged(Builder& b, const sim::Config& cfg, const GemmArgs& a, uint32_t max_units) {
  prefetch_units(b, cfg, a, X{1});
  const GemmPlan pl = plan_gemm(cfg, 0, a.n, a.k, a.split);
  // (their descriptor in the slot past the channels': a channel's own keeps its buffer, which the
  // hand-off's restarts reuse)
  const uint32_t desc = a.smem + 64 * uint32_t(cfg.dma_channels);
  if (a.pre_units || desc + 64 > cfg.smem_bytes) return 0;
  const auto [at, fit] = prestage_room(cfg, pl, a);
  const uint32_t C = pl.channels, n = std::min({fit, max_units, pl.units > C ? pl.units - C : 0u}),
                 stride = staged_stride(pl);
  for (uint32_t i = 0; i < n; ++i) {
    const uint32_t u = C + i;
    b.descriptor(desc, uint32_t(a.w_ddr + pl.unit_offset(u, false)), sim::ocm_addr(at + i * stride), pl.code_of(false));
    b.li(X{1}, desc);
    b.op("dma.start", {Chan{uint8_t(u % C)}, X{1}});
  }
  return n;
}

}  // namespace gpnpu::kernels
