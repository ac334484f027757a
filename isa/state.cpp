// ArchState construction and the pc / hardware-loop advance rule.
#include "isa/state.h"

#include <algorithm>

#include "isa/error.h"

namespace gpnpu::isa {

ArchState::ArchState(ArrayShape shape_, uint32_t lrm_bytes_, uint32_t smem_bytes, std::span<uint8_t> ocm_)
    : smem(smem_bytes, 0),
      shape(shape_),
      npe(shape_.npe()),
      v(size_t(kVregs) * shape_.npe() * kLanes, 0),
      pred(size_t(kPregs) * shape_.npe(), 0),
      lrm_bytes(lrm_bytes_),
      lrm(size_t(shape_.npe()) * lrm_bytes_, 0),
      ocm(ocm_) {
  std::fill(pred.begin(), pred.begin() + npe, 1);  // p0: every PE
  pred_count[0] = npe;
  for (int p = 1; p < kPregs; ++p) pred_count[p] = 0;
}

void ArchState::materialise(int r) {
  uint32_t* v = vreg(r);
  for (uint32_t e = 0; e < npe; ++e) std::copy(lazy_lanes[r], lazy_lanes[r] + kLanes, v + size_t(e) * kLanes);
  lazy &= ~(1u << r);
}

void ArchState::note_f16(const F16Range& r, uint32_t per_pe) {
  if (r.first >= 0 && !f16_first.set)
    f16_first = {true, pc, uint32_t(r.first / per_pe), uint32_t(r.first % per_pe), r.first_value};
  F16Range m = r;
  m.first = -1;
  f16.merge(m);
}

void ArchState::advance() {
  // A taken branch or jump has already set next_pc; a fall-through, or a jump to
  // the innermost body's end (a skipped count-0 loop ending there too), closes a
  // loop iteration there (several loops may end together).
  if (next_pc != pc + 1 && !(loop_depth > 0 && next_pc == loops[loop_depth - 1].end)) return;
  while (loop_depth > 0 && next_pc == loops[loop_depth - 1].end) {
    LoopFrame& f = loops[loop_depth - 1];
    if (--f.remaining > 0) {
      next_pc = f.start;
      return;
    }
    --loop_depth;
  }
}

}  // namespace gpnpu::isa
