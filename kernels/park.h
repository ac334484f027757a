// LRM parking: a run of OCM bytes moved into the PEs' local memories and back through the
// OCM <-> array port, for an activation that must outlive kernels whose OCM buffers lie over
// it while they leave the top of every PE's LRM alone. The image program parks a layer's
// residual rows across its q|k|v GEMM and attention (the streamed plan at 2 MiB), where a
// DDR store and load would cost two transfers of the rows at the DDR rate (512 KiB: 28 K
// cycles each at 32 GB/s), the store waited for before the q|k|v GEMM writes over the rows.
//
// Layout: the run (rows of bytes / rows each, `stride` apart in OCM) taken as one array of
// bytes; round j moves 64 x npe of them: PE i holds bytes [64 (j npe + i), + 64) at LRM
// lrm + 64 j. A round is one oscatter and one vst (unpark: vld, ogather) on a contiguous
// run, one oscatter (ogather) a row it reaches on a strided one (p7 = pset.range: the PEs of
// that row; the last round's store on the PEs it reached); four rotating registers (v16-v19)
// keep the port streaming. Clobbers x1-x4, p7, v16-v19.
#pragma once
#include <cstdint>

#include "kernels/builder.h"
#include "kernels/cost.h"
#include "sim/machine/config.h"

namespace gpnpu::kernels {

struct LrmParkArgs {
  uint32_t ocm = 0;    // OCM offset of the run
  uint32_t bytes = 0;  // its length: rows of a positive multiple of 64 bytes each
  uint32_t lrm = 0;    // LRM offset (64-byte aligned) of lrm_park_bytes(cfg, bytes) a PE
  uint32_t rows = 1;   // the run's rows in OCM
  uint32_t stride = 0;  // their stride in OCM (0: contiguous)
};
// The LRM bytes a PE takes for a run of `bytes`.
uint32_t lrm_park_bytes(const sim::Config& cfg, uint32_t bytes);
// OCM -> LRM (park) and LRM -> OCM (unpark: the same bytes back at the same place or elsewhere).
void emit_lrm_park(Builder& b, const sim::Config& cfg, const LrmParkArgs& a);
void emit_lrm_unpark(Builder& b, const sim::Config& cfg, const LrmParkArgs& a);
// Either direction: the run's bytes through the port.
KernelCost cost_lrm_park(const sim::Config& cfg, const LrmParkArgs& a);

}  // namespace gpnpu::kernels
