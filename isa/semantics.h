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

// Apply `f(dst_lane_ptr, pe_lane_index)` to every lane of every PE enabled by the
// instruction's predicate. `f` receives the flat index (pe * 16 + lane) into each
// register so one loop serves all operands.
template <typename F>
inline void for_lanes(ArchState& s, const Insn& i, F&& f) {
  const size_t n = size_t(s.npe) * kLanes;
  if (i.p == 0) {
    for (size_t k = 0; k < n; ++k) f(k);
    return;
  }
  const uint8_t* pr = s.predicate(i.p);
  for (uint32_t e = 0; e < s.npe; ++e)
    if (pr[e])
      for (size_t k = size_t(e) * kLanes, end = k + kLanes; k < end; ++k) f(k);
}

// Apply `f(pe)` to every PE enabled by the predicate.
template <typename F>
inline void for_pes(ArchState& s, const Insn& i, F&& f) {
  const uint8_t* pr = s.predicate(i.p);
  for (uint32_t e = 0; e < s.npe; ++e)
    if (pr[e]) f(e);
}

}  // namespace gpnpu::isa
