// Embedding lookup from the W4A16 table in the GEMV layout (kernels/gemv.h): the
// tied embedding is stored once, as the LM head's weight, and a token's row is
// dequantised from it on the device.
//
// Token t is column t % npe of tile t / npe. Its 128-code groups sit one per block,
// npe * 67 bytes apart, so three strided DMAs (codes, scales, zeros) gather the row
// into OCM scratch; then PE b dequantises block b (vdq4.f16) and gathers its 128
// fp16 to the output row. Token ids come from scalar memory at run time (one word
// per row), so the same program serves any prompt.
// Tiling rule: rows are done two at a time (both rows' DMAs started, then one wait: a row's
// lookup is bound by the DMA's latency), the next pair's DMAs running while a pair is
// dequantised; scratch holds min(rows, 4) rows: 67 * k / 128 + 8 bytes each; blocks are spread over
// the PEs, ceil(k / 128 / npe) passes.
#pragma once
#include <cstdint>

#include "kernels/builder.h"
#include "kernels/cost.h"
#include "sim/machine/config.h"

namespace gpnpu::kernels {

struct EmbedArgs {
  uint32_t vocab = 0, dim = 0;   // table rows (tokens) and columns (dim, a multiple of 128)
  uint32_t table_ddr = 0;        // bus address of the table in the GEMV layout
  uint32_t rows = 1;             // tokens looked up
  uint32_t ids_smem = 0;         // scalar-memory address of rows consecutive 32-bit token ids
  uint32_t out_ocm = 0, out_stride = 0;  // fp16 rows (stride 0: dim * 2)
  uint32_t scratch_ocm = 0;      // embed_scratch_bytes(dim, rows) bytes
  uint32_t smem = 0;             // 192 bytes for three descriptors
};

uint32_t embed_scratch_bytes(uint32_t dim, uint32_t rows);
KernelCost cost_embed(const sim::Config& cfg, const EmbedArgs& a);
void emit_embed(Builder& b, const sim::Config& cfg, const EmbedArgs& a);

}  // namespace gpnpu::kernels
