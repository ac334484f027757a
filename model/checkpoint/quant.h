// W4A16 weight quantiser and the quantised bundle (docs/quantisation.md).
//
// Scheme: a Linear weight W [rows = out, cols = in] is split, per output row, into
// blocks of 128 consecutive input channels (the last block is partial when
// cols % 128 != 0). Each block b of row r has an fp16 scale s[r][b] and an integer
// zero point z[r][b] in [0, 15] (stored as uint8); each weight has an unsigned 4-bit
// code q in [0, 15]; the dequantised weight is  w = (q - z) * s  with s the fp16 value
// (the product is exact in fp32).
//
// Quantiser contract (deterministic, bit-identical on every machine):
//  - The block range [lo, hi] is [min, max] widened to include 0, so z is representable
//    and a zero weight dequantises to exactly 0.
//  - Clipping search (QuantOptions::clip_search): candidate ranges [f*lo, f*hi] for the
//    factors in kClipFactors (1.0 first); each is scored by the squared error of the
//    DEQUANTISED block (fp16 scale, rounded codes; fp32 lane sums); the smallest wins,
//    ties go to the earlier (larger) factor. The winner is re-checked against f = 1.0
//    (plain min/max) with the double-precision sum quant_error_report uses, so the
//    search is never worse than min/max, block by block, in that measure.
//  - For a range [lo, hi]: s = (hi - lo) / 15 rounded UP to fp16 (so the 16-level grid
//    covers the range: every weight inside it is within s/2 of its dequantised value),
//    z = round(-lo / s) (in double), q = clamp(trunc(w * inv + (z + 0.5)), 0, 15) in
//    fp32 with inv = 1/s (nearest, ties up). An all-zero block gets s = 0, z = 0, q = 0.
//  - Codes: two per byte, low nibble = even column, row-major, row stride ceil(cols/2)
//    bytes (an odd last column leaves the high nibble 0).
//  - Mixed precision (QuantOptions::fp16_channels > 0): the input channels that hold the
//    most outlier weights (outlier_channels) are kept in fp16 beside the codes; the codes
//    quantise the matrix with those columns zeroed (so they encode exactly 0 there and the
//    blocks' ranges shrink), and w = (q - z) * s + fp16 part.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kernels/w4_weights.h"

namespace gpnpu::model {

class Checkpoint;
struct ModelConfig;

inline constexpr int kQuantBlock = kernels::kW4Block;  // input channels per scale/zero block
// Range-shrink factors tried by the clipping search, 1.0 (plain min/max) first.
inline constexpr float kClipFactors[] = {1.0f, 0.95f, 0.9f, 0.85f, 0.8f, 0.75f, 0.7f, 0.65f, 0.6f};

struct QuantTensor {
  int64_t rows = 0, cols = 0;
  std::vector<uint8_t> codes;    // [rows][row_stride()], two codes per byte
  std::vector<uint16_t> scales;  // [rows][nblocks()] fp16 bits
  std::vector<uint8_t> zeros;    // [rows][nblocks()] in 0..15

  // Mixed precision: input channels kept in fp16 (ascending), their values [rows][n].
  std::vector<int32_t> fp16_cols;
  std::vector<uint16_t> fp16_w;

  int64_t nblocks() const { return (cols + kQuantBlock - 1) / kQuantBlock; }
  int64_t row_stride() const { return (cols + 1) / 2; }
  uint8_t code(int64_t r, int64_t c) const {
    uint8_t b = codes[size_t(r * row_stride() + c / 2)];
    return (c & 1) ? uint8_t(b >> 4) : uint8_t(b & 15);
  }
  float scale(int64_t r, int64_t blk) const;  // fp16 -> float
  uint8_t zero(int64_t r, int64_t blk) const { return zeros[size_t(r * nblocks() + blk)]; }
  float dequant(int64_t r, int64_t c) const;  // (q - z) * s, plus the fp16 part
  // What the kernels pack (kernels/w4_weights.h); valid while this tensor lives.
  kernels::W4Weights view() const { return {rows, cols, codes, scales, zeros}; }
};

struct QuantOptions {
  bool clip_search = true;  // false: plain min/max range
  int fp16_channels = 0;    // mixed precision: keep up to this many outlier input channels per tensor in fp16
  int threads = 0;          // 0: std::thread::hardware_concurrency(); results do not depend on it
  // write_quant_bundle: called after each tensor with the source bytes done and their total.
  std::function<void(uint64_t done, uint64_t total)> progress = {};
};

// Quantises a row-major [rows, cols] float matrix. gpnpu::Error on a non-finite weight
// or a scale that overflows fp16 (|w| > ~983000), naming `what` (e.g. the tensor name).
QuantTensor quantise(const float* w, int64_t rows, int64_t cols, const QuantOptions& opt = {},
                     const std::string& what = "weight");
std::vector<float> dequantise(const QuantTensor& q);
void dequantise_row(const QuantTensor& q, int64_t r, float* out);  // out: cols floats

// Per-block error of a quantised matrix against its source, [rows][nblocks] each.
struct QuantErrorReport {
  int64_t rows = 0, nblocks = 0;
  std::vector<float> max_abs_err;      // max |w - deq| over the whole block
  std::vector<float> max_abs_err_in;   // same, over weights inside the grid [-z*s, (15-z)*s]
  std::vector<float> half_step;        // s / 2: the bound for weights inside the grid
  std::vector<double> sse;             // sum of squared errors of the block
  std::vector<int32_t> clipped;        // weights outside the grid (only with clipping)
  // Summary figures.
  double total_sse = 0;
  float worst_ratio_in = 0;            // max over blocks of max_abs_err_in / half_step
  int64_t blocks_over_bound = 0;       // blocks with max_abs_err_in > half_step (expect 0)
};
QuantErrorReport quant_error_report(const float* w, const QuantTensor& q);

// ---- outliers ---------------------------------------------------------------------------
// A block is an outlier block when its max |w| > kOutlierRatio x its RMS (a Gaussian
// block of 128 weights reaches 6 with probability ~3e-7; one weight of 10 sigma gives 7.5).
// Within an outlier block, the outlier weights are those with |w| > kOutlierRatio x the
// block's robust sigma (median |w| / 0.6745), so that a few large weights that inflate
// the RMS are all found.
inline constexpr float kOutlierRatio = 6.0f;

struct OutlierReport {
  std::string tensor;
  int64_t rows = 0, cols = 0, blocks = 0;
  int64_t outlier_blocks = 0;
  float worst_ratio = 0;                    // the largest max |w| / RMS of any block
  int64_t worst_row = 0, worst_col = 0;     // where that block's max |w| is
  int64_t nonzero = 0, zeroed = 0;          // non-zero weights, and those that dequantise to 0
  int64_t outlier_nonzero = 0, outlier_zeroed = 0;  // the same over the non-outlier weights of outlier blocks
  std::vector<std::pair<int32_t, int64_t>> channels;  // (input channel, outlier weights in it), most first
  double zero_share() const { return nonzero ? double(zeroed) / double(nonzero) : 0; }
  double outlier_zero_share() const { return outlier_nonzero ? double(outlier_zeroed) / double(outlier_nonzero) : 0; }
};
// The outlier report of `w` [rows][cols] (q: its quantisation, for the zero shares; may
// be null, then only the blocks and channels are found).
OutlierReport outlier_report(const float* w, int64_t rows, int64_t cols, const QuantTensor* q,
                             const std::string& name = "weight");
// Up to n input channels to keep in fp16: those holding the most outlier weights.
std::vector<int32_t> outlier_channels(const OutlierReport& rep, int n);

// ---- the quantised bundle -----------------------------------------------------------
// A safetensors file: for every quantised tensor NAME (TensorSpec::quantised(): all
// Linear weights, the patch embedding as [out, C*T*P*P], the tied embed_tokens):
//   NAME.qcodes U8 [rows, ceil(cols/2)], NAME.scales F16 [rows, nblocks],
//   NAME.zeros U8 [rows, nblocks];
// every other tensor (norms, biases, pos_embed) as NAME F32 with its original shape.
// Metadata: "format" = "gpnpu-w4a16", "version" = "1", "block" = "128",
// "config" = the config JSON (so the bundle alone describes the model),
// "source" = the checkpoint path. Mixed precision adds, for a tensor with kept channels,
// NAME.fp16_cols I32 [n] and NAME.fp16_w F16 [rows, n], and "fp16_channels" = the option.
inline constexpr const char* kQCodesSuffix = ".qcodes";
inline constexpr const char* kScalesSuffix = ".scales";
inline constexpr const char* kZerosSuffix = ".zeros";
inline constexpr const char* kFp16ColsSuffix = ".fp16_cols";
inline constexpr const char* kFp16WSuffix = ".fp16_w";

struct BundleStats {
  int64_t quantised_tensors = 0, float_tensors = 0;
  int64_t weights = 0;  // quantised weights
  int64_t blocks = 0;
  int64_t blocks_over_bound = 0;  // from quant_error_report (in-grid weights); expect 0
  int64_t nonzero = 0, zeroed = 0;  // non-zero weights, those that dequantise to 0 (all tensors)
  int64_t fp16_channels = 0;        // input channels kept in fp16, all tensors
  std::vector<OutlierReport> outliers;  // the tensors with outlier blocks, in bundle order
  double seconds = 0;
  uint64_t bytes = 0;  // file size
};

// Quantises every tensor of `ck` (checked against cfg first) into `out_path`, tensor
// by tensor (streaming). Deterministic for any thread count.
BundleStats write_quant_bundle(const Checkpoint& ck, const ModelConfig& cfg,
                               const std::string& out_path, const QuantOptions& opt = {});

// The tensor data bytes of the bundle write_quant_bundle makes for `cfg` (the file adds
// a header of a few hundred kB): for sizing the cache before the first run.
uint64_t quant_bundle_data_bytes(const ModelConfig& cfg);

// Reads a bundle back (mmapped). Checks format metadata and every tensor against the
// config stored in it; gpnpu::Error naming the file and tensor otherwise.
class QuantBundle {
 public:
  explicit QuantBundle(const std::string& path);
  ~QuantBundle();
  QuantBundle(QuantBundle&&) noexcept;
  QuantBundle& operator=(QuantBundle&&) noexcept;

  const ModelConfig& config() const;
  bool is_quantised(const std::string& name) const;
  QuantTensor get_quant(const std::string& name) const;     // copies codes/scales/zeros
  // As get_quant, but the codes stay in the mapped file: q.codes is left empty and `codes`
  // points at them ([rows][row_stride()] bytes), valid while this bundle lives.
  QuantTensor get_quant_mapped(const std::string& name, const uint8_t*& codes) const;
  std::vector<float> get_dequant(const std::string& name) const;  // dequantised, [rows*cols]
  std::vector<float> get_f32(const std::string& name) const;      // a float tensor
  const std::string& path() const;
  // Mixed precision: the tensors with input channels kept in fp16 (bundle order).
  const std::vector<std::string>& fp16_tensors() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gpnpu::model
