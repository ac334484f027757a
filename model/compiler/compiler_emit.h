// Internal to the compiler (compiler*.cpp): OCM allocation and the calls that put
// one marked kernel call into a program, shared by the decode and image programs.
#pragma once
#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "isa/error.h"
#include "isa/fp16.h"
#include "kernels/builder.h"
#include "kernels/cost.h"
#include "model/compiler/compiler.h"
#include "model/checkpoint/quant.h"
#include "sim/machine/memory_map.h"

namespace gpnpu::model::detail {

inline uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

// Sequential OCM allocator: 64-byte aligned, with 64 bytes of slack after each
// buffer because kernels may read up to 62 bytes past the end of a row.
class OcmAlloc {
 public:
  explicit OcmAlloc(uint64_t size, uint64_t start = 0) : size_(size), next_(start) {}
  // The bytes take() uses for a buffer (with its slack and alignment).
  static uint64_t footprint(uint64_t bytes) { return align_up(bytes + 64, 64); }
  uint64_t next() const { return next_; }
  uint32_t take(uint64_t bytes, const char* what) {
    uint64_t off = next_;
    next_ = align_up(off + bytes + 64, 64);
    if (next_ > size_)
      fail("compiler: OCM of {} bytes is too small: '{}' needs {} bytes at offset {}; raise ocm_bytes", size_, what,
           bytes, off);
    return uint32_t(off);
  }
  uint64_t left() const { return size_ - next_; }
  uint32_t rest(const char* what, uint64_t at_least) {
    if (left() < at_least)
      fail("compiler: OCM of {} bytes leaves {} bytes for '{}', which needs at least {}; raise ocm_bytes", size_,
           left(), what, at_least);
    uint32_t off = uint32_t(next_);
    next_ = size_;
    return off;
  }

 private:
  uint64_t size_, next_;
};

inline std::string layer_name(int i, const char* what) { return fmt::format("L{}.{}", i, what); }

// Concatenates quantised tensors by rows (same cols).
inline QuantTensor concat_rows(const std::vector<QuantTensor>& parts) {
  QuantTensor out;
  out.cols = parts.at(0).cols;
  for (const QuantTensor& p : parts) {
    if (p.cols != out.cols) fail("compiler: cannot fuse tensors with {} and {} columns", out.cols, p.cols);
    out.rows += p.rows;
    out.codes.insert(out.codes.end(), p.codes.begin(), p.codes.end());
    out.scales.insert(out.scales.end(), p.scales.begin(), p.scales.end());
    out.zeros.insert(out.zeros.end(), p.zeros.begin(), p.zeros.end());
  }
  return out;
}

// Rows [r0, r0 + n) of a quantised tensor.
inline QuantTensor slice_rows(const QuantTensor& q, int64_t r0, int64_t n) {
  QuantTensor out;
  out.rows = n;
  out.cols = q.cols;
  out.codes.assign(q.codes.begin() + r0 * q.row_stride(), q.codes.begin() + (r0 + n) * q.row_stride());
  out.scales.assign(q.scales.begin() + r0 * q.nblocks(), q.scales.begin() + (r0 + n) * q.nblocks());
  out.zeros.assign(q.zeros.begin() + r0 * q.nblocks(), q.zeros.begin() + (r0 + n) * q.nblocks());
  return out;
}

inline std::vector<uint8_t> f16_bytes(const std::vector<float>& v) {
  std::vector<uint8_t> out(v.size() * 2);
  for (size_t i = 0; i < v.size(); ++i) {
    uint16_t h = f32_to_f16(v[i]);
    out[2 * i] = uint8_t(h);
    out[2 * i + 1] = uint8_t(h >> 8);
  }
  return out;
}

// Appends marked kernel calls to a program and records their floors.
class Emitter {
 public:
  static constexpr uint32_t kSmem = 256;       // kernels' descriptor area (one kernel runs at a time)
  static constexpr uint32_t kSmemCopy = 1024;  // the emitter's own copies

  Emitter(kernels::Builder& b, const sim::Config& cfg, std::vector<KernelCall>& calls)
      : b_(b), cfg_(cfg), calls_(calls) {}

  kernels::Builder& b() { return b_; }

  void call(const std::string& mark, const char* kernel, const kernels::KernelCost& cost,
            const std::function<void()>& emit, const kernels::KernelCost& per_token = {}) {
    b_.mark(mark, emit);
    calls_.push_back({mark, kernel, cost, false, per_token});
  }

  // A 2-D (3-D with planes > 1) DMA copy between bus addresses, waited for:
  // planes x rows x row_bytes.
  void copy(const std::string& mark, uint32_t src, uint32_t dst, uint32_t row_bytes, uint32_t rows = 1,
            uint32_t src_stride = 0, uint32_t dst_stride = 0, uint32_t planes = 1, uint32_t src_plane_stride = 0,
            uint32_t dst_plane_stride = 0) {
    kernels::KernelCost c;
    uint64_t bytes = uint64_t(row_bytes) * rows * planes;
    bool src_ddr = src < sim::kOcmRegion.base, dst_ddr = dst < sim::kOcmRegion.base;
    c.ddr_bytes = (src_ddr ? bytes : 0) + (dst_ddr ? bytes : 0);
    call(mark, "copy", c, [&] {
      using namespace kernels;
      b_.descriptor(kSmemCopy, src, dst, row_bytes, rows, src_stride ? src_stride : row_bytes,
                    dst_stride ? dst_stride : row_bytes, planes, src_plane_stride, dst_plane_stride);
      b_.li(X{1}, kSmemCopy);
      b_.op("dma.start", {Chan{0}, X{1}});
      b_.op("dma.wait", {Chan{0}});
    });
  }

 private:
  kernels::Builder& b_;
  const sim::Config& cfg_;
  std::vector<KernelCall>& calls_;
};

}  // namespace gpnpu::model::detail
