// Mixed precision (docs/quantisation.md "Numerics"): the fp16 input channels a quantised
// weight keeps beside its int4 codes. The codes encode exactly 0 in those channels, so a
// linear layer is its W4 kernel plus a correction over at most kF16Cols channels:
//
//   gather:      Xs[m][j] = X[m][c_j]           (the W4 GEMV/GEMM kernel with a one-hot
//                                                 selector weight: exact, see f16cols_selector)
//   correction:  Y[m][r] = f16(Y[m][r] + sum_j Xs[m][j] * W16[r][j])      (emit_f16cols_add)
//
// and an embedding row is its W4 row plus W16[token] scattered to the channels c_j (the
// codes' row is exactly 0 there): emit_f16rows_gather fetches W16[token] rows, then
// emit_f16cols_add with the one-hot weight P[c][j] = (c == c_j) adds them in place.
//
// W16 in DDR: [n][kF16Cols] fp16, row-major (32 B per row; unused channels 0).
// Rounding (what a scalar model must mirror): products fp16 x fp16 exact in fp32, the
// 16 lanes summed by vredsum.f32's pairwise tree, added in fp32 to Y (fp16), one rounding.
//
// Mapping (emit_f16cols_add): PE e owns row r = t * npe + e of tile t: its 16 weights are
// one oscatter.h from the tile's DMA buffer (tiles stream through two buffers on DMA
// channels 0 and 1, the next tile's DMA overlapping this tile's rows); per row m the
// PEs broadcast Xs[m], multiply, reduce, and read-modify-write Y[m][r] (one fp16 per PE).
// The narrow last tile runs on its PEs only (p1). Resources: x1..x31, v0..v3, p1, ch 0-1.
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/builder.h"
#include "kernels/cost.h"
#include "kernels/w4_weights.h"
#include "sim/machine/config.h"

namespace gpnpu::kernels {

constexpr uint32_t kF16Cols = 16;                 // fp16 channels per weight on the device
constexpr uint32_t kF16RowBytes = kF16Cols * 2;  // one W16 row

struct F16ColsArgs {
  uint32_t m = 1, n = 0;             // rows of Y, and its columns (rows of W16)
  uint32_t w_ddr = 0;                // bus address of W16 [n][kF16Cols] fp16
  uint32_t xs_ocm = 0, xs_stride = kF16RowBytes;  // Xs rows: kF16Cols fp16 each
  uint32_t y_ocm = 0, y_stride = 0;  // Y rows (stride 0: n * 2); read and written in place
  uint32_t scratch_ocm = 0, scratch_bytes = 0;  // f16cols_scratch_bytes(cfg)
  uint32_t smem = 0;                 // 128 bytes: two descriptors
};
uint32_t f16cols_scratch_bytes(const sim::Config& cfg);
KernelCost cost_f16cols(const sim::Config& cfg, const F16ColsArgs& a);
void emit_f16cols_add(Builder& b, const sim::Config& cfg, const F16ColsArgs& a);

// Xs[r] = W16[ids[r]] for `rows` token ids in scalar memory (one DMA of 32 B per row).
struct F16RowsArgs {
  uint32_t rows = 1;
  uint32_t w_ddr = 0;       // bus address of W16 [vocab][kF16Cols]
  uint32_t ids_smem = 0;    // rows consecutive 32-bit token ids
  uint32_t out_ocm = 0;     // rows x 32 B, dense
  uint32_t smem = 0;        // 64 bytes: one descriptor
};
KernelCost cost_f16rows(const sim::Config& cfg, const F16RowsArgs& a);
void emit_f16rows_gather(Builder& b, const sim::Config& cfg, const F16RowsArgs& a);

// Host side. The one-hot selector S [kF16Cols][k] as W4 weights (scale 1, zero 0, code 1
// at (j, cols[j]), every other weight 0): the W4 kernels compute Xs = X S^T with it, exactly.
struct F16Selector {
  std::vector<uint8_t> codes;
  std::vector<uint16_t> scales;
  std::vector<uint8_t> zeros;
  W4Weights view() const;
  int64_t k = 0;
};
F16Selector f16cols_selector(const std::vector<int32_t>& cols, int64_t k);
// W16 rows: [rows][kF16Cols] fp16 bits from values[rows][cols.size()] (placed at slot j).
std::vector<uint8_t> f16cols_rows(const std::vector<uint16_t>& values, int64_t rows, size_t n);
// The one-hot fp16 weight P [k][kF16Cols]: P[c][j] = 1 when c == cols[j].
std::vector<uint8_t> f16cols_onehot(const std::vector<int32_t>& cols, int64_t k);

}  // namespace gpnpu::kernels
