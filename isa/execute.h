// One instruction on the functional model, as the sequencer runs it: the semantics
// function, with the lazy broadcasts of ArchState written out first wherever the
// instruction reads or writes such a register. Three uses of a lazy register stay lazy:
// an unpredicated obcast/obcast.h (it replaces the register), the broadcast operand
// (vc) of an unpredicated vmac.f16, which reads the 16 lanes directly, and the source
// of an unpredicated vcvt.f32.f16, whose result is then a lazy broadcast too (16 lanes
// converted instead of 16,384; no numerics to count: every fp16 converts exactly). Results are
// bit-identical to running every semantics function eagerly (the tests run both).
// With a batch (isa/batch.h), most array instructions are deferred instead.
#pragma once
#include "isa/batch.h"
#include "isa/lanes_simd.h"
#include "isa/semantics.h"

namespace gpnpu::isa {

inline void execute(ArchState& s, const Insn& in) {
  if (s.lazy && in.p == 0 && in.exec == &sem_vcvt_f32_f16 && (s.lazy >> in.b & 1)) {
    lanes::cvt_f32_f16(s.lazy_lanes[in.a], s.lazy_lanes[in.b], kLanes);
    s.lazy |= 1u << in.a;
    return;
  }
  if (s.batch && s.batch->take(s, in)) return;  // deferred into the batch (isa/batch.h)
  if (s.lazy) {
    const bool bcast = in.p == 0 && (in.exec == &sem_obcast || in.exec == &sem_obcast_h);
    const bool mac = in.p == 0 && in.exec == &sem_vmac_f16 && in.c != in.b;  // vb must be written out
    for (int k = 0; k < in.nsrc; ++k) {
      const int r = int(in.src[k]) - kRegV;
      if (r >= 0 && r < kVregs && (s.lazy >> r & 1) && !(mac && r == in.c)) s.materialise(r);
    }
    for (int k = 0; k < in.ndst; ++k) {
      const int r = int(in.dst[k]) - kRegV;
      if (r >= 0 && r < kVregs && (s.lazy >> r & 1)) {
        if (bcast) s.lazy &= ~(1u << r);  // replaced whole
        else s.materialise(r);
      }
    }
  }
  in.exec(s, in);
}

}  // namespace gpnpu::isa
