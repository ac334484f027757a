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
#include "kernels/embed.h"
#include "kernels/f16cols.h"
#include "kernels/gemv.h"
#include "model/compiler/compiler.h"
#include "model/checkpoint/quant.h"
#include "sim/machine/memory_map.h"

namespace gpnpu::model::detail {

inline uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

// Sequential OCM allocator: 64-byte aligned, with 64 bytes of slack after each
// buffer because kernels may read up to 62 bytes past the end of a row. Its errors name the
// OCM size the failing region alone needs (the regions after it may need more).
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
      fail("compiler: OCM of {} bytes is too small: '{}' needs {} bytes at offset {}; raise ocm_bytes to at least {}",
           size_, what, bytes, off, next_);
    return uint32_t(off);
  }
  uint64_t left() const { return size_ - next_; }
  uint32_t rest(const char* what, uint64_t at_least) {
    if (left() < at_least)
      fail("compiler: OCM of {} bytes leaves {} bytes for '{}', which needs at least {}; raise ocm_bytes to at least {}",
           size_, left(), what, at_least, align_up(size_ + at_least - left(), 64));
    uint32_t off = uint32_t(next_);
    next_ = size_;
    return off;
  }

 private:
  uint64_t size_, next_;
};

inline std::string layer_name(int i, const char* what) { return fmt::format("L{}.{}", i, what); }
// Mixed precision (kernels/f16cols.h): the DDR tensors beside a W4 weight.
inline std::string f16sel(const std::string& w) { return w + ".f16sel"; }  // one-hot selector, W4
inline std::string f16w(const std::string& w) { return w + ".f16w"; }      // [rows][kF16Cols] fp16

// Concatenates quantised tensors by rows (same cols). Mixed precision: the fp16 channels
// of the result are the union of the parts' (ascending), each row's values at its own.
inline QuantTensor concat_rows(const std::vector<QuantTensor>& parts) {
  QuantTensor out;
  out.cols = parts.at(0).cols;
  for (const QuantTensor& p : parts) {
    if (p.cols != out.cols) fail("compiler: cannot fuse tensors with {} and {} columns", out.cols, p.cols);
    out.rows += p.rows;
    out.codes.insert(out.codes.end(), p.codes.begin(), p.codes.end());
    out.scales.insert(out.scales.end(), p.scales.begin(), p.scales.end());
    out.zeros.insert(out.zeros.end(), p.zeros.begin(), p.zeros.end());
    out.fp16_cols.insert(out.fp16_cols.end(), p.fp16_cols.begin(), p.fp16_cols.end());
  }
  std::sort(out.fp16_cols.begin(), out.fp16_cols.end());
  out.fp16_cols.erase(std::unique(out.fp16_cols.begin(), out.fp16_cols.end()), out.fp16_cols.end());
  if (out.fp16_cols.empty()) return out;
  const size_t n = out.fp16_cols.size();
  out.fp16_w.assign(size_t(out.rows) * n, 0);
  int64_t r0 = 0;
  for (const QuantTensor& p : parts) {
    const size_t pn = p.fp16_cols.size();
    for (size_t j = 0; j < pn; ++j) {
      const size_t at = size_t(std::lower_bound(out.fp16_cols.begin(), out.fp16_cols.end(), p.fp16_cols[j]) -
                               out.fp16_cols.begin());
      for (int64_t r = 0; r < p.rows; ++r) out.fp16_w[size_t(r0 + r) * n + at] = p.fp16_w[size_t(r) * pn + j];
    }
    r0 += p.rows;
  }
  return out;
}

// Rows a0, b0, a1, b1, ... of two quantised tensors of the same shape without fp16 channels
// (a gate|up weight for GemmAct::silu_pairs).
inline QuantTensor interleave_rows(const QuantTensor& a, const QuantTensor& b) {
  if (a.rows != b.rows || a.cols != b.cols || !a.fp16_cols.empty() || !b.fp16_cols.empty())
    fail("compiler: internal: cannot interleave the rows of [{}][{}] and [{}][{}] tensors", a.rows, a.cols, b.rows,
         b.cols);
  QuantTensor out;
  out.rows = 2 * a.rows;
  out.cols = a.cols;
  const size_t rs = size_t(a.row_stride()), nb = size_t(a.nblocks());
  for (int64_t r = 0; r < a.rows; ++r)
    for (const QuantTensor* q : {&a, &b}) {
      out.codes.insert(out.codes.end(), q->codes.begin() + r * rs, q->codes.begin() + (r + 1) * rs);
      out.scales.insert(out.scales.end(), q->scales.begin() + r * nb, q->scales.begin() + (r + 1) * nb);
      out.zeros.insert(out.zeros.end(), q->zeros.begin() + r * nb, q->zeros.begin() + (r + 1) * nb);
    }
  return out;
}

// Rows [r0, r0 + n) of a quantised tensor (with their fp16 channels).
inline QuantTensor slice_rows(const QuantTensor& q, int64_t r0, int64_t n) {
  QuantTensor out;
  out.rows = n;
  out.cols = q.cols;
  out.codes.assign(q.codes.begin() + r0 * q.row_stride(), q.codes.begin() + (r0 + n) * q.row_stride());
  out.scales.assign(q.scales.begin() + r0 * q.nblocks(), q.scales.begin() + (r0 + n) * q.nblocks());
  out.zeros.assign(q.zeros.begin() + r0 * q.nblocks(), q.zeros.begin() + (r0 + n) * q.nblocks());
  const int64_t f = int64_t(q.fp16_cols.size());
  out.fp16_cols = q.fp16_cols;
  out.fp16_w.assign(q.fp16_w.begin() + r0 * f, q.fp16_w.begin() + (r0 + n) * f);
  return out;
}

// Input columns [c0, c0 + n) of a quantised tensor without fp16 channels (c0 and n
// multiples of the quantisation block: the codes, scales and zeros of those blocks).
inline QuantTensor slice_cols(const QuantTensor& q, int64_t c0, int64_t n) {
  if (c0 % kQuantBlock || n % kQuantBlock || c0 + n > q.cols || !q.fp16_cols.empty())
    fail("compiler: internal: cannot slice columns [{}, {}) of a [{}][{}] tensor", c0, c0 + n, q.rows, q.cols);
  QuantTensor out;
  out.rows = q.rows;
  out.cols = n;
  const int64_t b0 = c0 / kQuantBlock, nb = n / kQuantBlock;
  for (int64_t r = 0; r < q.rows; ++r) {
    auto codes = q.codes.begin() + r * q.row_stride() + c0 / 2;
    out.codes.insert(out.codes.end(), codes, codes + n / 2);
    out.scales.insert(out.scales.end(), q.scales.begin() + r * q.nblocks() + b0, q.scales.begin() + r * q.nblocks() + b0 + nb);
    out.zeros.insert(out.zeros.end(), q.zeros.begin() + r * q.nblocks() + b0, q.zeros.begin() + r * q.nblocks() + b0 + nb);
  }
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

// A DMA copy's shape between bus addresses (the descriptor's fields): planes x rows x
// row_bytes; a stride of 0 is the packed one (row_bytes).
struct Copy {
  uint32_t src = 0, dst = 0;
  uint32_t row_bytes = 0, rows = 1;
  uint32_t src_stride = 0, dst_stride = 0;
  uint32_t planes = 1, src_plane_stride = 0, dst_plane_stride = 0;
};

// Appends marked kernel calls to a program and records their floors.
class Emitter {
 public:
  static constexpr uint32_t kSmem = 256;       // kernels' descriptor area (one kernel runs at a time)
  static constexpr uint32_t kSmemGemv = 512;   // GEMVs: their descriptors outlive the kernels before them (prefetch)
  static constexpr uint32_t kSmemCopy = 1024;  // the emitter's own copies

  Emitter(kernels::Builder& b, const sim::Config& cfg, std::vector<KernelCall>& calls)
      : b_(b), cfg_(cfg), calls_(calls) {}

  kernels::Builder& b() { return b_; }

  void call(const std::string& mark, const char* kernel, const kernels::KernelCost& cost,
            const std::function<void()>& emit, const kernels::KernelCost& per_token = {}) {
    try {
      if (!dry) b_.mark(mark, emit);
    } catch (const Error& e) {  // (which call: a kernel's own message names only its arguments)
      fail("{} (in kernel call '{}', {})", e.what(), mark, kernel);
    }
    calls_.push_back({mark, kernel, cost, false, per_token});
  }
  // Calls recorded without their instructions: a first pass that needs only the calls' order
  // (the streamed image plan's, which records its GEMMs for the prefetch chain).
  bool dry = false;

  // Mixed precision: Y [m rows, stride y_stride] += Xs W16^T, W16 at bus address w_ddr with n
  // rows, Xs at xs_ocm (kF16Cols fp16 per row), the correction's DMA buffers at scratch_ocm
  // (their size and the descriptors' smem are set here).
  void f16_add(const std::string& mark, kernels::F16ColsArgs f) {
    f.scratch_bytes = kernels::f16cols_scratch_bytes(cfg_);
    f.smem = kSmem;
    call(mark + ".f16_add", "f16cols", kernels::cost_f16cols(cfg_, f), [&] { kernels::emit_f16cols_add(b_, cfg_, f); });
  }
  // Mixed precision of a GEMV `g` on weight w: x gathered at the fp16 channels (the GEMV
  // on the selector, into xs), then the correction of y.
  void f16_gemv(const std::string& mark, const DdrLayout& ddr, const std::string& w, const kernels::GemvArgs& g,
                uint32_t xs, uint32_t scratch) {
    f16_gather(mark, ddr, w, g, xs);
    f16_add(mark, {.n = g.n, .w_ddr = ddr.bus(f16w(w)), .xs_ocm = xs, .y_ocm = g.y_ocm, .y_stride = g.n * 2,
                   .scratch_ocm = scratch});
  }
  // Its first half alone (a GEMV in column calls gathers x once; each call adds its rows of W16).
  void f16_gather(const std::string& mark, const DdrLayout& ddr, const std::string& w, const kernels::GemvArgs& g,
                  uint32_t xs) {
    kernels::GemvArgs s = g;
    s.prefetched = false;
    s.n = kernels::kF16Cols;
    s.w_ddr = ddr.bus(f16sel(w));
    s.y_ocm = xs;
    call(mark + ".f16_gather", "gemv", kernels::cost_gemv(cfg_, s), [&] { kernels::emit_gemv_w4(b_, cfg_, s); });
  }
  // Mixed precision of an embedding lookup e (its rows of token ids into its out rows): the
  // tokens' W16 rows (into xs), scattered to the fp16 channels by the one-hot weight.
  void f16_embed(const std::string& mark, const DdrLayout& ddr, const kernels::EmbedArgs& e, uint32_t xs,
                 uint32_t scratch) {
    kernels::F16RowsArgs r;
    r.rows = e.rows;
    r.w_ddr = ddr.bus(f16w("embed"));
    r.ids_smem = e.ids_smem;
    r.out_ocm = xs;
    r.smem = kSmem;
    call(mark + ".f16_gather", "f16rows", kernels::cost_f16rows(cfg_, r),
         [&] { kernels::emit_f16rows_gather(b_, cfg_, r); });
    f16_add(mark, {.m = e.rows, .n = e.dim, .w_ddr = ddr.bus("embed.f16onehot"), .xs_ocm = xs, .y_ocm = e.out_ocm,
                   .y_stride = e.out_stride ? e.out_stride : e.dim * 2, .scratch_ocm = scratch});
  }

  // A DMA copy between bus addresses, waited for: `bytes` contiguous, or a Copy's shape.
  void copy(const std::string& mark, uint32_t src, uint32_t dst, uint32_t bytes) {
    copy(mark, {.src = src, .dst = dst, .row_bytes = bytes});
  }
  void copy(const std::string& mark, const Copy& c) { start_copy(mark, "copy", 0, true, c); }
  // copy_behind: a contiguous copy started on channel 0 and not waited for; the caller
  // emits copy_wait() before the destination is read (or a source overwritten).
  void copy_behind(const std::string& mark, uint32_t src, uint32_t dst, uint32_t bytes) {
    start_copy(mark, "copy", 0, false, {.src = src, .dst = dst, .row_bytes = bytes});
  }
  void copy_wait() { wait(0); }
  // A copy started on DMA channel `chan` and not waited for: it overlaps the kernels
  // after it until wait(chan) (which also waits for anything queued on chan before it).
  // The channel holds dma_queue_depth descriptors; a start beyond that stalls.
  void copy_async(const std::string& mark, uint32_t chan, uint32_t src, uint32_t dst, uint32_t bytes) {
    copy_async(mark, chan, {.src = src, .dst = dst, .row_bytes = bytes});
  }
  void copy_async(const std::string& mark, uint32_t chan, const Copy& c) {
    start_copy(mark, "copy_async", chan, false, c);
  }
  void wait(uint32_t chan) { b_.op("dma.wait", {kernels::Chan{uint8_t(chan)}}); }

 private:
  void start_copy(const std::string& mark, const char* kernel, uint32_t chan, bool wait, const Copy& cp) {
    kernels::KernelCost c;
    const uint64_t bytes = uint64_t(cp.row_bytes) * cp.rows * cp.planes;
    const bool src_ddr = cp.src < sim::kOcmRegion.base, dst_ddr = cp.dst < sim::kOcmRegion.base;
    c.ddr_bytes = (src_ddr ? bytes : 0) + (dst_ddr ? bytes : 0);
    call(mark, kernel, c, [&] {
      using namespace kernels;
      // The engine reads the descriptor at dma.start: the slot is free again after it.
      b_.descriptor(kSmemCopy, cp.src, cp.dst, cp.row_bytes, cp.rows, cp.src_stride ? cp.src_stride : cp.row_bytes,
                    cp.dst_stride ? cp.dst_stride : cp.row_bytes, cp.planes, cp.src_plane_stride, cp.dst_plane_stride);
      b_.li(X{1}, kSmemCopy);
      b_.op("dma.start", {Chan{uint8_t(chan)}, X{1}});
      if (wait) b_.op("dma.wait", {Chan{uint8_t(chan)}});
    });
  }

  kernels::Builder& b_;
  const sim::Config& cfg_;
  std::vector<KernelCall>& calls_;
};

}  // namespace gpnpu::model::detail
