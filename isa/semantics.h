// The vocabulary of the semantics functions: one small function per instruction,
// named sem_<ident> after its table row, written with the helpers below.
#pragma once
#include <bit>
#include <cstdint>

#include "isa/fp16.h"
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
// the instruction's predicate (one run for the whole array under p0), so that
// vectorised loops see long contiguous ranges.
template <typename F>
inline void for_lane_runs(ArchState& s, const Insn& i, F&& f) {
  if (i.p == 0) return f(size_t(0), size_t(s.npe) * kLanes);
  const uint8_t* pr = s.predicate(i.p);
  for (uint32_t e = 0; e < s.npe;) {
    if (!pr[e]) {
      ++e;
      continue;
    }
    uint32_t end = e + 1;
    while (end < s.npe && pr[end]) ++end;
    f(size_t(e) * kLanes, size_t(end - e) * kLanes);
    e = end;
  }
}

// Apply `f(k)` to every lane of every PE enabled by the instruction's predicate; `f`
// receives the flat index (pe * 16 + lane) into each register so one loop serves all
// operands.
template <typename F>
inline void for_lanes(ArchState& s, const Insn& i, F&& f) {
  for_lane_runs(s, i, [&](size_t k0, size_t n) {
    for (size_t k = k0, end = k0 + n; k < end; ++k) f(k);
  });
}

// Apply `f(pe)` to every PE enabled by the predicate.
template <typename F>
inline void for_pes(ArchState& s, const Insn& i, F&& f) {
  const uint8_t* pr = s.predicate(i.p);
  for (uint32_t e = 0; e < s.npe; ++e)
    if (pr[e]) f(e);
}

}  // namespace gpnpu::isa
