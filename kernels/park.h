// LRM parking: a run of OCM bytes moved into the PEs' local memories and back through the
// OCM <-> array port, for an activation that must outlive kernels whose OCM buffers lie over
// it while they leave the top of every PE's LRM alone. The image program parks a layer's
// residual rows across its q|k|v GEMM and attention (the streamed plan at 2 MiB), where a
// DDR store and load would cost two transfers of the rows at the DDR rate (512 KiB: 28 K
// cycles each at 32 GB/s), the store waited for before the q|k|v GEMM writes over the rows.
//
// Slots (emit_lrm_slots): a slot is one 64-byte register a PE at one LRM offset; its pieces
// say which OCM bytes each PE's register takes: PEs [pe0, pe1), PE i at OCM base + i x
// pe_stride (base may lie below the data: OCM addresses wrap). Parking scatters a slot's
// pieces into a register (oscatter, predicated to each piece's PEs: p7 = pset.range) and
// stores it (vst, on the PEs the pieces reached); unparking loads it (vld) and gathers the
// pieces back (ogather) to the same or other OCM places: the two sides' pieces may differ, so
// a move can change the layout (the image compiler's head-major <-> row-major attention rows).
// Four rotating registers (v16-v19) keep the port streaming. Clobbers x1-x4, p7, v16-v19.
//
// A run (lrm_run_slots): rows of bytes / rows each, `stride` apart in OCM, taken as one array
// of bytes; slot j (LRM lrm + 64 j) holds bytes [64 (j npe + i), + 64) in PE i: one piece a
// slot on a contiguous run, one a row (or part of a row) it reaches on a strided one.
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/builder.h"
#include "kernels/cost.h"
#include "sim/machine/config.h"

namespace gpnpu::kernels {

constexpr uint32_t kLrmChunk = 64;  // bytes a PE takes a slot (one vector register)

struct LrmPiece {
  uint32_t pe0 = 0, pe1 = 0;  // PEs [pe0, pe1)
  int64_t base = 0;           // PE i's bytes at OCM base + i x pe_stride
  uint32_t pe_stride = kLrmChunk;
};
struct LrmSlot {
  uint32_t lrm = 0;  // LRM offset, 64-byte aligned
  std::vector<LrmPiece> pieces;
};
// OCM -> LRM (to_lrm) or LRM -> OCM, slot by slot.
void emit_lrm_slots(Builder& b, const sim::Config& cfg, const std::vector<LrmSlot>& slots, bool to_lrm);
// The port bytes of either direction.
KernelCost cost_lrm_slots(const std::vector<LrmSlot>& slots);

struct LrmParkArgs {
  uint32_t ocm = 0;    // OCM offset of the run
  uint32_t bytes = 0;  // its length: rows of a positive multiple of 64 bytes each
  uint32_t lrm = 0;    // LRM offset (64-byte aligned) of lrm_park_bytes(cfg, bytes) a PE
  uint32_t rows = 1;   // the run's rows in OCM
  uint32_t stride = 0;  // their stride in OCM (0: contiguous)
};
// The LRM bytes a PE takes for a run of `bytes`.
uint32_t lrm_park_bytes(const sim::Config& cfg, uint32_t bytes);
// The run's slots (emit_lrm_slots parks them with to_lrm, unparks them without: the same bytes
// back at the same place or, with another ocm, elsewhere); throws on a run that does not fit.
std::vector<LrmSlot> lrm_run_slots(const sim::Config& cfg, const LrmParkArgs& a);

}  // namespace gpnpu::kernels
