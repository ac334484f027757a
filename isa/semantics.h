// The vocabulary of the semantics functions: one small function per instruction,
// named sem_<ident> after its table row, written with the helpers below.
#pragma once
#include <bit>
#include <cstdint>

#include "isa/fp16.h"
#include "isa/lane_pool.h"
#include "isa/state.h"

namespace gpnpu::isa {

#define INSN(ident, mn, op, unit, ops, desc) void sem_##ident(ArchState& s, const Insn& i);
#include "isa/isa_table.def"
#undef INSN

#define SEM(ident) void sem_##ident([[maybe_unused]] ArchState& s, [[maybe_unused]] const Insn& i)

// scalar registers; x0 reads 0 and ignores writes
inline uint32_t X(const ArchState& s, int r) { return s.x[r]; }
inline void WX(ArchState& s, int r, uint32_t v) {
  if (r) s.x[r] = v;
}

inline float as_f32(uint32_t b) { return std::bit_cast<float>(b); }
inline uint32_t as_u32(float f) { return std::bit_cast<uint32_t>(f); }

// Apply `f(k, n)` to every run of consecutive lanes [k, k + n) of the PEs enabled by
// the instruction's predicate, so that vectorised loops see long contiguous ranges.
// Large arrays run in chunks on two threads (lane_pool.h): `f` may write only the
// lanes it is given.
template <typename F>
inline void for_lane_runs(ArchState& s, const Insn& i, F&& f) {
  if (s.predicate_contiguous(i.p)) {  // p0, or one run of PEs (the predicate's summary): no scan
    if (!s.pred_count[i.p]) return;
    const uint32_t b = s.pred_first[i.p];
    return split_pes(s.pred_count[i.p], [&](uint32_t e0, uint32_t e1) {
      f(size_t(b + e0) * kLanes, size_t(e1 - e0) * kLanes);
    });
  }
  const uint8_t* pr = s.predicate(i.p);
  split_pes(s.npe, [&](uint32_t e0, uint32_t e1) {
    for (uint32_t e = e0; e < e1;) {
      if (!pr[e]) {
        ++e;
        continue;
      }
      uint32_t end = e + 1;
      while (end < e1 && pr[end]) ++end;
      f(size_t(e) * kLanes, size_t(end - e) * kLanes);
      e = end;
    }
  });
}

// Apply `f(k)` to every lane of every PE enabled by the instruction's predicate; `f`
// receives the flat index (pe * 16 + lane) into each register so one loop serves all
// operands. `f` may write only lane k.
template <typename F>
inline void for_lanes(ArchState& s, const Insn& i, F&& f) {
  for_lane_runs(s, i, [&](size_t k0, size_t n) {
    for (size_t k = k0, end = k0 + n; k < end; ++k) f(k);
  });
}

// Apply `f(pe)` to every PE enabled by the predicate; `f` may write only that PE's
// lanes and LRM (the PEs run in chunks on two threads on large arrays).
template <typename F>
inline void for_pes(ArchState& s, const Insn& i, F&& f) {
  if (s.predicate_contiguous(i.p)) {  // as in for_lane_runs
    if (!s.pred_count[i.p]) return;
    const uint32_t b = s.pred_first[i.p];
    return split_pes(s.pred_count[i.p], [&](uint32_t e0, uint32_t e1) {
      for (uint32_t e = b + e0; e < b + e1; ++e) f(e);
    });
  }
  const uint8_t* pr = s.predicate(i.p);
  split_pes(s.npe, [&](uint32_t e0, uint32_t e1) {
    for (uint32_t e = e0; e < e1; ++e)
      if (pr[e]) f(e);
  });
}

// The same in PE order on one thread: for writes into shared memory (OCM), where a
// later PE overwrites an earlier one.
template <typename F>
inline void for_pes_in_order(ArchState& s, const Insn& i, F&& f) {
  const uint8_t* pr = s.predicate(i.p);
  for (uint32_t e = 0; e < s.npe; ++e)
    if (pr[e]) f(e);
}

}  // namespace gpnpu::isa
