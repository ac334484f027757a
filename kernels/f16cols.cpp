#include "kernels/f16cols.h"

#include <algorithm>
#include <cstring>

#include "isa/error.h"
#include "isa/fp16.h"
#include "sim/machine/memory_map.h"

namespace gpnpu::kernels {

namespace {
uint32_t ceil_div(uint32_t a, uint32_t b) { return (a + b - 1) / b; }
uint32_t buffer_bytes(const sim::Config& cfg) { return cfg.npe() * kF16RowBytes + 64; }
}  // namespace

uint32_t f16cols_scratch_bytes(const sim::Config& cfg) { return 2 * buffer_bytes(cfg); }

KernelCost cost_f16cols(const sim::Config&, const F16ColsArgs& a) {
  KernelCost c;
  c.macs = uint64_t(a.m) * a.n * kF16Cols;
  c.ddr_bytes = uint64_t(a.n) * kF16RowBytes;
  return c;
}

void emit_f16cols_add(Builder& b, const sim::Config& cfg, const F16ColsArgs& a) {
  if (a.m == 0 || a.n == 0) fail("f16cols: empty shape ({} x {})", a.m, a.n);
  if (a.scratch_bytes < f16cols_scratch_bytes(cfg))
    fail("f16cols: scratch of {} bytes, needs {} (two tiles of {} rows of W16)", a.scratch_bytes,
         f16cols_scratch_bytes(cfg), cfg.npe());
  const uint32_t T = cfg.npe(), tiles = ceil_div(a.n, T);
  const uint32_t y_stride = a.y_stride ? a.y_stride : a.n * 2;
  auto width = [&](uint32_t t) { return std::min(T, a.n - t * T); };
  auto buf = [&](uint32_t t) { return a.scratch_ocm + (t % 2) * buffer_bytes(cfg); };
  auto start = [&](uint32_t t) {
    const uint32_t c = t % 2;
    b.descriptor(a.smem + 64 * c, a.w_ddr + t * T * kF16RowBytes, sim::ocm_addr(buf(t)), width(t) * kF16RowBytes);
    b.li(X{19}, a.smem + 64 * c);
    b.op("dma.start", {Chan{uint8_t(c)}, X{19}});
  };
  b.li(X{8}, kF16RowBytes);
  b.li(X{9}, 2);
  for (uint32_t t = 0; t < std::min(tiles, 2u); ++t) start(t);
  for (uint32_t t = 0; t < tiles; ++t) {
    const uint32_t W = width(t);
    P pred{0};
    if (W < T) {
      pred = P{1};
      b.li(X{10}, W);
      b.op("pset.range", {P{1}, X{0}, X{10}});
    }
    b.op("dma.wait", {Chan{uint8_t(t % 2)}});
    b.op("oscatter.h", {V{0}, Mem{X{0}, buf(t)}, X{8}}, pred);
    b.op("vcvt.f32.f16", {V{0}, V{0}}, pred);
    if (t + 2 < tiles) start(t + 2);  // its buffer is in v0 now
    b.li(X{5}, a.xs_ocm);
    b.li(X{6}, a.y_ocm + t * T * 2);
    b.li(X{3}, a.m);
    b.loop(X{3}, [&] {
      b.op("obcast.h", {V{1}, Mem{X{5}, 0}});
      b.op("oscatter.w1", {V{3}, Mem{X{6}, 0}, X{9}}, pred);  // Y[m][r] in the low half
      b.op("vcvt.f32.f16", {V{1}, V{1}}, pred);
      b.op("vmul.f32", {V{2}, V{0}, V{1}}, pred);
      b.op("vredsum.f32", {V{2}, V{2}}, pred);
      b.op("vcvt.f32.f16", {V{3}, V{3}}, pred);
      b.op("vadd.f32", {V{3}, V{3}, V{2}}, pred);
      b.op("vcvt.f16.f32", {V{3}, V{3}}, pred);
      b.op("ogather.h1", {V{3}, Mem{X{6}, 0}, X{9}}, pred);
      b.op("addi", {X{5}, X{5}, a.xs_stride});
      b.op("addi", {X{6}, X{6}, y_stride});
    });
  }
}

KernelCost cost_f16rows(const sim::Config&, const F16RowsArgs& a) {
  KernelCost c;
  c.ddr_bytes = uint64_t(a.rows) * kF16RowBytes;
  return c;
}

void emit_f16rows_gather(Builder& b, const sim::Config&, const F16RowsArgs& a) {
  if (a.rows == 0) fail("f16rows: no rows to gather");
  b.descriptor(a.smem, 0, sim::ocm_addr(a.out_ocm), kF16RowBytes);
  b.li(X{1}, a.ids_smem);
  b.li(X{2}, sim::ocm_addr(a.out_ocm));
  b.li(X{3}, a.rows);
  b.li(X{4}, a.smem);
  b.li(X{6}, a.w_ddr);
  b.loop(X{3}, [&] {
    b.op("lw", {X{5}, Mem{X{1}, 0}});
    b.op("slli", {X{5}, X{5}, 5});  // x 32 B
    b.op("add", {X{5}, X{5}, X{6}});
    b.op("sw", {X{5}, Mem{X{0}, a.smem}});
    b.op("sw", {X{2}, Mem{X{0}, a.smem + 4}});
    b.op("dma.start", {Chan{0}, X{4}});  // the engine copies the descriptor: the next row may rewrite it
    b.op("addi", {X{1}, X{1}, 4});
    b.op("addi", {X{2}, X{2}, kF16RowBytes});
  });
  b.op("dma.wait", {Chan{0}});
}

W4Weights F16Selector::view() const {
  W4Weights w;
  w.rows = kF16Cols;
  w.cols = k;
  w.codes = codes;
  w.scales = scales;
  w.zeros = zeros;
  return w;
}

F16Selector f16cols_selector(const std::vector<int32_t>& cols, int64_t k) {
  if (cols.size() > kF16Cols)
    fail("mixed precision: {} fp16 input channels, the device takes at most {} per weight", cols.size(), kF16Cols);
  F16Selector s;
  s.k = k;
  const int64_t stride = (k + 1) / 2, nb = (k + kW4Block - 1) / kW4Block;
  s.codes.assign(size_t(kF16Cols * stride), 0);
  s.scales.assign(size_t(kF16Cols * nb), 0);
  s.zeros.assign(size_t(kF16Cols * nb), 0);
  for (size_t j = 0; j < cols.size(); ++j) {
    const int64_t c = cols[j];
    if (c < 0 || c >= k) fail("mixed precision: fp16 channel {} outside the {} input channels", c, k);
    s.codes[size_t(int64_t(j) * stride + c / 2)] = (c & 1) ? 0x10 : 0x01;
    s.scales[size_t(int64_t(j) * nb + c / kW4Block)] = f32_to_f16(1.0f);
  }
  return s;
}

std::vector<uint8_t> f16cols_rows(const std::vector<uint16_t>& values, int64_t rows, size_t n) {
  if (n > kF16Cols)
    fail("mixed precision: {} fp16 input channels, the device takes at most {} per weight", n, kF16Cols);
  std::vector<uint8_t> out(size_t(rows) * kF16RowBytes, 0);
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(&out[size_t(r) * kF16RowBytes], &values[size_t(r) * n], n * 2);
  return out;
}

std::vector<uint8_t> f16cols_onehot(const std::vector<int32_t>& cols, int64_t k) {
  std::vector<uint8_t> out(size_t(k) * kF16RowBytes, 0);
  const uint16_t one = f32_to_f16(1.0f);
  for (size_t j = 0; j < cols.size(); ++j) std::memcpy(&out[size_t(cols[j]) * kF16RowBytes + j * 2], &one, 2);
  return out;
}

}  // namespace gpnpu::kernels
