// One instruction on the functional model, as the sequencer runs it: the semantics
// function, with the lazy broadcasts of ArchState written out first wherever the
// instruction reads or writes such a register. Three uses of a lazy register stay lazy:
// an unpredicated obcast/obcast.h (it replaces the register), the broadcast operand
// (vc) of an unpredicated vmac.f16, which reads the 16 lanes directly, and the source
// of an unpredicated vcvt.f32.f16, whose result is then a lazy broadcast too (16 lanes
// converted instead of 16,384; no numerics to count: every fp16 converts exactly). A
// predicated `vshr r, r, n` of a lazy broadcast makes r a two-pattern lazy register
// (ArchState::lazy2: the shifted lanes where the predicate is on), which vmac.f16 in a
// batch also reads directly (the tower's fc2 shifts the odd PEs' fp16 pairs). In a batch,
// vdq4.f32 leaves lazy dequantisations (ArchState::lazy_dq) and oscatter.w1 and the
// elementwise instructions of its results per-PE lazy registers (ArchState::lazy_pl),
// written out here as the broadcasts are. Results are
// bit-identical to running every semantics function eagerly (the tests run both).
// With a batch (isa/batch.h), most array instructions are deferred instead.
#pragma once
#include "isa/batch.h"
#include "isa/lanes_simd.h"
#include "isa/semantics.h"

namespace gpnpu::isa {

inline void execute(ArchState& s, const Insn& in) {
  if (s.batch) s.batch->before(s, in);  // what a batch knows of the registers written (however they are written below)
  if (s.lazy && in.p == 0 && in.exec == &sem_vcvt_f32_f16 && (s.lazy >> in.b & 1) && !(s.lazy2 >> in.b & 1)) {
    lanes::cvt_f32_f16(s.lazy_lanes[in.a], s.lazy_lanes[in.b], kLanes);
    s.set_lazy(in.a);
    return;
  }
  if (s.lazy && in.p != 0 && in.exec == &sem_vshr && in.a == in.b && (s.lazy >> in.b & 1) && !(s.lazy2 >> in.b & 1)) {
    for (int l = 0; l < kLanes; ++l) s.lazy_lanes2[in.a][l] = s.lazy_lanes[in.a][l] >> in.d;  // as sem_vshr
    std::memcpy(&s.lazy_sel[size_t(in.a) * s.npe], s.predicate(in.p), s.npe);
    s.lazy2 |= 1u << in.a;
    return;
  }
  if (s.batch && s.batch->take(s, in)) return;  // deferred into the batch (isa/batch.h)
  if (s.lazy | s.lazy_dq | s.lazy_pl) {
    const bool bcast = in.p == 0 && (in.exec == &sem_obcast || in.exec == &sem_obcast_h);
    const bool pl = in.exec == &sem_oscatter_w1 && oscatter_w1_lazy(s, in);  // va stays (or becomes) per-PE lazy
    // vc stays lazy unless it is also vb (which must be written out) or has two patterns
    const bool mac = in.p == 0 && in.exec == &sem_vmac_f16 && in.c != in.b && !(s.lazy2 >> in.c & 1);
    for (int k = 0; k < in.nsrc; ++k) {
      const int r = int(in.src[k]) - kRegV;
      if (r >= 0 && r < kVregs && (s.lazy >> r & 1) && !(mac && r == in.c)) s.materialise(r);
      if (r >= 0 && r < kVregs && (s.lazy_dq >> r & 1)) s.materialise_dq(r);
      if (r >= 0 && r < kVregs && (s.lazy_pl >> r & 1)) s.materialise_pl(r);
    }
    for (int k = 0; k < in.ndst; ++k) {
      const int r = int(in.dst[k]) - kRegV;
      if (r >= 0 && r < kVregs && (s.lazy >> r & 1)) {
        if (bcast || pl) s.clear_lazy(r);  // replaced whole
        else s.materialise(r);
      }
      if (r >= 0 && r < kVregs && (s.lazy_dq >> r & 1)) {
        if (bcast || pl) s.drop_dq(r);
        else s.materialise_dq(r);
      }
      if (r >= 0 && r < kVregs && (s.lazy_pl >> r & 1) && !pl) {
        if (bcast) s.lazy_pl &= ~(1u << r);
        else s.materialise_pl(r);
      }
    }
  }
  in.exec(s, in);
}

}  // namespace gpnpu::isa
