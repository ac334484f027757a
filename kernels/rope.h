// Rotary position embedding applied to q or k rows in OCM, from cos/sin tables the
// host (compiler) precomputes per row:
//
//   x'[d] = x[d] * cos[r][d] + rotate_half(x)[d] * sin[r][d]
//   rotate_half(x)[d] = -x[d + hd/2] (d < hd/2),  x[d - hd/2] (d >= hd/2)
//
// i.e. x'[d] = x[d] cos[d] - x[d+h] sin[d] and x'[d+h] = x[d+h] cos[d+h] + x[d] sin[d+h]
// (docs/model.md 3.3 and 5.3). The tables already encode which position
// (interleaved M-RoPE t/h/w axis per frequency, or the tower's 2-D row/column rule)
// drives each dimension, so this one kernel serves the LM and the tower:
// cos[r][d] = cos(angle_r[d mod hd/2]), sin likewise (build them with
// model::ops::rope_tables_mrope / rope_tables_2d, model/reference/ops.h, or any other rule).
//
// Layouts:
//   x    fp16 in OCM, row-major [rows][heads*head_dim], row stride x_row_stride bytes
//        (heads contiguous, head_dim*2 bytes apart); out the same with out_row_stride
//        (out may equal x: in place).
//   cos, sin: fp32 (tab_f32) or fp16 in OCM, [rows][head_dim], row stride tab_row_stride.
//
// The kernel reads only the first half of each table row: cos[r][d + hd/2] must equal
// cos[r][d] (and sin likewise), as the rotary tables above are built.
//
// Mapping: PE e = rl * heads + h holds head h of row r0 + rl of a tile of
// TR = npe / heads rows. One 64-byte scatter per 32 dims brings x (stride head_dim*2
// across the PEs: for the whole tile where the rows are dense, row stride = heads x
// head_dim x 2, else one predicated scatter a row) and, with fp32 tables, one grouped
// broadcast per 16 dims the first half of every row's cos/sin to its heads' PEs (obcast.g:
// a table row a group of `heads` PEs; fp16 tables: a predicated broadcast a row);
// vunpack.f16 spreads each 32 dims over two fp32 registers (16 consecutive dimensions
// each), the rotation is fp32 on the vector FPU, vpack.f16 rounds the pairs back, and one
// 64-byte gather per 32 dims writes them (the tile's, or a row's).
// Tiling rule: TR = floor(npe / heads) rows per tile (fails if heads > npe);
// head_dim must be a multiple of 32 and at most 128 (3 x head_dim/16 registers).
#pragma once
#include <cstdint>

#include "kernels/builder.h"
#include "kernels/cost.h"
#include "sim/machine/config.h"

namespace gpnpu::kernels {

struct RopeArgs {
  uint32_t rows = 0, heads = 0, head_dim = 0;
  uint32_t x_ocm = 0, x_row_stride = 0;      // input rows (bytes)
  uint32_t out_ocm = 0, out_row_stride = 0;  // output rows (may equal x)
  uint32_t cos_ocm = 0, sin_ocm = 0, tab_row_stride = 0;
  bool tab_f32 = true;  // tables fp32 (else fp16)
  // Qwen3's per-head RMSNorm (q_norm / k_norm) in front: each head normed with the head_dim fp16
  // weights at norm_w_ocm (the head norm's arithmetic, emit_head_norm_regs) and rounded to fp16,
  // then rotated: the bits of emit_head_norm then emit_rope, with one pass over x through the
  // OCM port instead of two. fp32 tables only.
  bool norm = false;
  uint32_t norm_w_ocm = 0;
  float eps = 1e-6f;
  // Two norms in one call (q and k adjacent in the q|k|v rows): heads from norm2_from on are
  // normed with the weights at norm2_w_ocm (0: every head with norm_w_ocm's). A call's fixed
  // cost once for both, its rows loop once (64x64: k's own call took 2.6 K cycles a layer).
  uint32_t norm2_from = 0, norm2_w_ocm = 0;
};

void emit_rope(Builder& b, const sim::Config& cfg, const RopeArgs& a);
KernelCost cost_rope(const sim::Config& cfg, const RopeArgs& a);

}  // namespace gpnpu::kernels
