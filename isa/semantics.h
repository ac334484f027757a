// The vocabulary of the semantics functions: one small function per instruction,
// named sem_<ident> after its table row, written with the helpers below.
#pragma once
#include <algorithm>
#include <bit>
#include <cstring>
#include <cstdint>

#include "isa/fp16.h"
#include "isa/state.h"

namespace gpnpu::isa {

#define INSN(ident, mn, op, unit, ops, desc) void sem_##ident(ArchState& s, const Insn& i);
#include "isa/isa_table.def"
#undef INSN

#define SEM(ident) void sem_##ident([[maybe_unused]] ArchState& s, [[maybe_unused]] const Insn& i)

// Whether oscatter.w1 `i` leaves va a per-PE lazy register (ArchState::lazy_pl; in a
// batch's run): it writes every PE, or va is one already with one class of lanes.
inline bool oscatter_w1_lazy(const ArchState& s, const Insn& i) {
  if (!s.batch || !s.lazy_broadcast) return false;
  if (i.p == 0 || s.pred_count[i.p] == s.npe) return true;
  if (!(s.lazy_pl >> i.a & 1)) return false;
  for (int l = 0; l < kLanes; ++l)
    if (s.pl_cls[i.a][l]) return false;
  return true;
}

// scalar registers; x0 reads 0 and ignores writes
inline uint32_t X(const ArchState& s, int r) { return s.x[r]; }
inline void WX(ArchState& s, int r, uint32_t v) {
  if (r) s.x[r] = v;
}

inline float as_f32(uint32_t b) { return std::bit_cast<float>(b); }
inline uint32_t as_u32(float f) { return std::bit_cast<uint32_t>(f); }

// Apply `f(k, n)` to every run of consecutive lanes [k, k + n) of the PEs enabled by
// the instruction's predicate, so that vectorised loops see long contiguous ranges.
// Only the PEs of the state's window [win_lo, win_hi) are visited (all of them but
// while a batch runs block by block, isa/batch.h; the batch's chunks of PEs are what
// runs on two threads, lane_pool.h).
template <typename F>
inline void for_lane_runs(ArchState& s, const Insn& i, F&& f) {
  const uint32_t lo = s.win_lo, hi = s.win_hi;
  if (s.predicate_contiguous(i.p)) {  // p0, or one run of PEs (the predicate's summary): no scan
    const uint32_t b = std::max(s.pred_first[i.p], lo), e = std::min(s.pred_first[i.p] + s.pred_count[i.p], hi);
    if (b < e) f(size_t(b) * kLanes, size_t(e - b) * kLanes);
    return;
  }
  const uint8_t* pr = s.predicate(i.p);
  for (uint32_t e = lo; e < hi;) {
    if (!pr[e]) {
      ++e;
      continue;
    }
    uint32_t end = e + 1;
    while (end < hi && pr[end]) ++end;
    f(size_t(e) * kLanes, size_t(end - e) * kLanes);
    e = end;
  }
}

// Write a[k] = f(k) to every lane of every PE enabled by the instruction's predicate;
// `f` receives the flat index (pe * 16 + lane) into each register so one loop serves
// all operands, and may read any operand's lane k (a may alias them).
template <typename F>
inline void for_lanes(ArchState& s, const Insn& i, uint32_t* a, F&& f) {
  for_lane_runs(s, i, [&](size_t k0, size_t n) {
    for (size_t k = k0, end = k0 + n; k < end; ++k) a[k] = f(k);
  });
}
// The same, PE by PE through a 16-lane temporary: a loop of constant length that
// vectorises without alias checks, much faster on predicates that enable scattered PEs.
// Only for integer and bit operations: std::fmax and the like may round a signed zero
// differently where the compiler vectorises them, and the definitions must not change.
template <typename F>
inline void for_lanes_int(ArchState& s, const Insn& i, uint32_t* a, F&& f) {
  for_lane_runs(s, i, [&](size_t k0, size_t n) {
    for (size_t e = k0, end = k0 + n; e < end; e += kLanes) {
      uint32_t t[kLanes];
      for (size_t l = 0; l < kLanes; ++l) t[l] = f(e + l);
      std::memcpy(a + e, t, sizeof t);
    }
  });
}

// Apply `f(pe)` to every PE enabled by the predicate (in the window, as above), in PE
// order (the OCM forms' stores: a later PE overwrites an earlier one).
template <typename F>
inline void for_pes(ArchState& s, const Insn& i, F&& f) {
  const uint32_t lo = s.win_lo, hi = s.win_hi;
  if (s.predicate_contiguous(i.p)) {  // as in for_lane_runs
    const uint32_t b = std::max(s.pred_first[i.p], lo), e = std::min(s.pred_first[i.p] + s.pred_count[i.p], hi);
    for (uint32_t k = b; k < e; ++k) f(k);
    return;
  }
  const uint8_t* pr = s.predicate(i.p);
  for (uint32_t e = lo; e < hi; ++e)
    if (pr[e]) f(e);
}

}  // namespace gpnpu::isa
