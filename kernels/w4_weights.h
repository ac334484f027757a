// The int4 weights a W4A16 kernel packs (pack_gemv_weight, pack_gemm_weight): a
// non-owning view of a [rows = out][cols = in] matrix of 4-bit codes with one fp16
// scale and one zero point per block of kW4Block input channels of a row;
// w = (q - z) * s. Codes: two per byte, low nibble = even column, row-major, row
// stride ceil(cols/2) bytes. The model's quantised tensors provide it
// (model/checkpoint/quant.h, QuantTensor::view()); the kernels need nothing else.
#pragma once
#include <cstdint>
#include <span>

namespace gpnpu::kernels {

inline constexpr int kW4Block = 128;  // input channels per scale/zero block

struct W4Weights {
  int64_t rows = 0, cols = 0;
  std::span<const uint8_t> codes;    // [rows][row_stride()]
  std::span<const uint16_t> scales;  // [rows][nblocks()] fp16 bits
  std::span<const uint8_t> zeros;    // [rows][nblocks()] in 0..15

  int64_t nblocks() const { return (cols + kW4Block - 1) / kW4Block; }
  int64_t row_stride() const { return (cols + 1) / 2; }
  uint8_t code(int64_t r, int64_t c) const {
    uint8_t b = codes[size_t(r * row_stride() + c / 2)];
    return (c & 1) ? uint8_t(b >> 4) : uint8_t(b & 15);
  }
};

}  // namespace gpnpu::kernels
