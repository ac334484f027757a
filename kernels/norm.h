// Row norms of fp16 activations in OCM: RMSNorm (the LM), per-head RMSNorm (Qwen3
// q_norm / k_norm) and LayerNorm with bias (the vision tower and its mergers).
//
//   RMSNorm:   y = w * (x / sqrt(mean(x^2) + eps))            (model::ops::rmsnorm_rows)
//   LayerNorm: y = ((x - mean) / sqrt(var + eps)) * w + b      (model::ops::layernorm_rows)
//
// x, y, w, b are fp16 in OCM; y may equal x (in place). Sums, the normalisation and
// the scaling are fp32; y is rounded to fp16 (nearest even) once, at the end.
//
// The row is cut in chunks of 32 fp16 (64 B, one vector register). Sums of x and x^2
// run on the MAC array (vmac.f16 of the raw fp16 against fp16 1.0 or against itself:
// exact products, fp32 accumulation), the rest on the fp32 unit; fp16 <-> fp32
// conversions use vunpack.f16 / vpack.f16 (integer unit, occupancy 1).
// LayerNorm takes three passes (sum, sum of (x - mean)^2, output): the variance is
// never formed as E[x^2] - mean^2, which cancels when |mean| >> std.
//
// Two mappings (NormMapping):
//  - rows:  PE r owns row r of a tile of npe rows (oscatter with the row stride); a
//           PE walks its row chunk by chunk; w and b are broadcast (obcast). The row
//           is cached in LRM after the first pass when ceil(dim/32)*64 <= lrm_bytes,
//           otherwise every pass re-reads it from OCM. When a tile of rows leaves PEs
//           idle (rows <= npe / 2), the row is whole chunks and the OCM scratch is
//           given, the row is cut in H = 2 or 4 parts: part h of row r on PE r*H + h
//           (predicates p3..p6, by column), whose H partial sums meet through the
//           scratch (every PE of the row adds them in one order): the 128-row norms
//           of the prefill on 512 PEs, each part small enough for the LRM cache.
//  - split: one row at a time, spread over P = min(npe, ceil(dim/32)) PEs: chunk q of
//           the row goes to PE q % P (pass q / P). Each PE reduces its lanes
//           (vredsum), writes its partial sum to OCM scratch (ogather.w1), and every PE
//           reads all P partials back (obcast) and adds them in the same order, so
//           every PE holds the identical row sum. For decode (rows = 1).
// Rule (automatic): the mapping with the lower estimate of norm_estimate_cycles(),
// a cycle model fitted to measured runs (Norm.MappingRuleFollowsMeasurements runs
// both mappings and checks the pick is within 15 % of the better); in practice split
// for rows <= ~14 at dim 2048 (qc-u and mini), rows otherwise.
//
// dim need not be a multiple of 32 (the tail chunk is masked: its extra lanes are
// zeroed before the sums and the bytes past the row end are written back unchanged,
// read-modify-write), rows need not be a multiple of npe (the last tile is
// predicated with pset.range). The kernel READS up to 62 B past the end of the last
// row of x, y, w, b: those bytes must lie inside OCM.
//
// Resources: scalar x1..x31, vector v0..v31, predicates p1..p7, 2 hardware-loop
// levels, LRM bytes [0, ceil(dim/32)*64) (rows mapping, when it fits NormArgs::lrm_bytes) or
// [0, passes*64) (split), OCM scratch 4*16*ceil(P/16) bytes (split; rows in parts: 4 per PE).
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/builder.h"
#include "kernels/cost.h"
#include "sim/machine/config.h"

namespace gpnpu::kernels {

enum class NormKind { rms, layer };
enum class NormMapping { automatic, rows, split };

struct NormArgs {
  NormKind kind = NormKind::rms;
  uint32_t rows = 0, dim = 0;
  uint32_t x_ocm = 0, x_stride = 0;   // OCM offset of row 0, bytes between rows (0: dim*2)
  uint32_t y_ocm = 0, y_stride = 0;   // output (may equal x), bytes between rows (0: dim*2)
  uint32_t w_ocm = 0;                 // dim fp16 weights
  uint32_t b_ocm = 0;                 // dim fp16 bias (LayerNorm only)
  float eps = 1e-6f;
  uint32_t scratch_ocm = 0, scratch_bytes = 0;  // split mapping: norm_scratch_bytes(cfg) bytes
  NormMapping mapping = NormMapping::automatic;
  uint32_t lrm_bytes = 0;  // LRM [0, lrm_bytes) the kernel may use (0: all of it; the rest stays untouched)
  // The residual add fused in front (a block's h += y, then h's norm): x += r first, each
  // element widened to fp32, added and rounded to fp16 once (the element-wise add's bits),
  // written back to x, and y gets the norm of the new x. r has x's row stride; dim a multiple
  // of 32; y apart from x. Saves the add's pass over x through the OCM port.
  bool residual = false;
  uint32_t r_ocm = 0;
};

// Per-head RMSNorm in place or out of place: each row is `heads` consecutive vectors of
// head_dim, all normalised with the same w[head_dim]. Dense rows (x_stride = y_stride =
// heads*head_dim*2) run the rows mapping over rows*heads vectors of head_dim; strided ones
// (q or k inside the q|k|v rows) one head per PE, the same arithmetic (norm.cpp).
struct HeadNormArgs {
  uint32_t rows = 0, heads = 0, head_dim = 0;
  uint32_t x_ocm = 0, x_stride = 0;  // 0: heads*head_dim*2
  uint32_t y_ocm = 0, y_stride = 0;  // may equal x
  uint32_t w_ocm = 0;                // head_dim fp16
  float eps = 1e-6f;
};

// OCM scratch the split mapping needs (partial sums, one fp32 per PE, 64 B blocks).
uint32_t norm_scratch_bytes(const sim::Config& cfg);
// The mapping `automatic` resolves to for these args.
NormMapping norm_pick_mapping(const sim::Config& cfg, const NormArgs& a);
// The cycle model behind the rule (an estimate, not a simulation).
double norm_estimate_cycles(const sim::Config& cfg, const NormArgs& a, NormMapping m);

// Bytes through the OCM port at the minimum: read x once, write y once (the w and b
// broadcasts are 64 B per chunk step, not per PE, and are left out).
KernelCost cost_norm(const sim::Config& cfg, const NormArgs& a);
KernelCost cost_head_norm(const sim::Config& cfg, const HeadNormArgs& a);

// Emit the kernels (no halt). Throw gpnpu::Error if a shape or a buffer does not fit.
void emit_norm(Builder& b, const sim::Config& cfg, const NormArgs& a);
void emit_head_norm(Builder& b, const sim::Config& cfg, const HeadNormArgs& a);

// The per-head RMSNorm's arithmetic on registers, written once for emit_head_norm and the
// rotary's head norm in front (kernels/rope.h, RopeArgs::norm): each PE of predicate p holds one
// head of head_dim = 32 x.size() values as raw fp16 chunks x[c] and the weight's chunks w[c]; the
// results, rounded to fp16, replace x[c]. Sums on the MAC array in the rows mapping's order
// (chunks alternating between two accumulator pairs), fp32 normalisation and scaling. Uses v0,
// v1 and v20-v23, and t's registers.
struct HeadNormRegs {
  V inv, l, h, wl, wh;
};
void emit_head_norm_regs(Builder& b, const std::vector<V>& x, const std::vector<V>& w, const HeadNormRegs& t, P p,
                         float eps);

}  // namespace gpnpu::kernels
