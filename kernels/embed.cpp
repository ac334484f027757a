#include "kernels/embed.h"

#include <algorithm>

#include "isa/error.h"
#include "kernels/gemv.h"
#include "sim/machine/memory_map.h"

namespace gpnpu::kernels {

// A row's codes, scales and zeros, for up to four rows: two pairs, one dequantised while the other's
// DMAs run.
uint32_t embed_scratch_bytes(uint32_t dim, uint32_t rows) {
  return std::min(rows, 4u) * (dim / 128 * kGemvColumnBlockBytes + 8);
}

KernelCost cost_embed(const sim::Config&, const EmbedArgs& a) {
  KernelCost c;
  c.ddr_bytes = uint64_t(a.rows) * (a.dim / 128) * kGemvColumnBlockBytes;
  c.ocm_bytes = uint64_t(a.rows) * a.dim * 2;
  return c;
}

void emit_embed(Builder& b, const sim::Config& cfg, const EmbedArgs& a) {
  if (a.dim == 0 || a.dim % 128) fail("embed: dim {} must be a positive multiple of 128", a.dim);
  if (a.rows == 0) fail("embed: no rows to look up");
  const uint32_t T = gemv_tile_cols(cfg), npe = cfg.npe(), nblk = a.dim / 128;
  const uint32_t block_bytes = T * kGemvColumnBlockBytes, slot_bytes = embed_scratch_bytes(a.dim, 1);
  // Slot s (0-3) of the scratch: a row's codes, scales, zeros.
  auto codes = [&](uint32_t s) { return a.scratch_ocm + s * slot_bytes; };
  auto scales = [&](uint32_t s) { return codes(s) + nblk * 64; };
  auto zeros = [&](uint32_t s) { return scales(s) + nblk * 2; };
  const uint32_t out_stride = a.out_stride ? a.out_stride : a.dim * 2;
  const uint32_t passes = (nblk + npe - 1) / npe;
  // Descriptors: codes (64 B x nblk), scales (2 B x nblk), zeros (1 B x nblk), block stride apart;
  // each row writes its source and its slot's destinations into them before it starts them (a
  // descriptor is read when it starts, so every row reuses these three).
  b.descriptor(a.smem, 0, sim::ocm_addr(codes(0)), 64, nblk, block_bytes, 64);
  b.descriptor(a.smem + 64, 0, sim::ocm_addr(scales(0)), 2, nblk, block_bytes, 2);
  b.descriptor(a.smem + 128, 0, sim::ocm_addr(zeros(0)), 1, nblk, block_bytes, 1);
  b.op("vlaneid", {V{31}});
  b.op("vsplati", {V{29}, int64_t(0)});
  b.op("vcmpeq.i32", {V{31}, V{31}, V{29}});  // lane-0 mask
  b.op("vsplati", {V{30}, int64_t(0xff)});
  b.li(X{1}, a.ids_smem);
  b.li(X{2}, a.out_ocm);
  b.li(X{4}, T);
  b.li(X{5}, 64);
  b.li(X{6}, 2);
  b.li(X{7}, 1);
  b.li(X{8}, 256);  // output bytes per block
  b.li(X{12}, a.smem);
  b.li(X{13}, a.smem + 64);
  b.li(X{14}, a.smem + 128);
  // (slot s on channels 3s, 3s + 1, 3s + 2 mod the machine's dma_channels: a pair's six descriptors
  // fill 4 channels' queues of 2 at most)
  const uint32_t nch = uint32_t(std::max<uint64_t>(1, cfg.dma_channels));
  // The row whose id is at x1 + id_off into slot s: its three DMAs started.
  auto issue = [&](uint32_t s, int64_t id_off) {
    // Token t is column r = t % T of tile t / T, whose width W is T except for the
    // narrower last tile (gemv.h): codes at tile + r * 64 (block stride W * 67), scales
    // at tile + W * 64 + r * 2, zeros at tile + W * 66 + r.
    b.op("lw", {X{9}, Mem{X{1}, id_off}});
    b.op("divu", {X{10}, X{9}, X{4}});
    b.op("remu", {X{11}, X{9}, X{4}});
    b.op("muli", {X{17}, X{10}, T});
    b.li(X{18}, a.vocab);
    b.op("sub", {X{17}, X{18}, X{17}});
    b.op("min", {X{17}, X{17}, X{4}});  // W
    b.op("muli", {X{10}, X{10}, int64_t(nblk) * block_bytes});
    b.op("addi", {X{10}, X{10}, a.table_ddr});
    b.op("muli", {X{15}, X{11}, 64});
    b.op("add", {X{15}, X{15}, X{10}});
    b.op("sw", {X{15}, Mem{X{0}, a.smem}});
    b.op("muli", {X{18}, X{17}, 64});
    b.op("add", {X{15}, X{10}, X{18}});
    b.op("muli", {X{16}, X{11}, 2});
    b.op("add", {X{15}, X{15}, X{16}});
    b.op("sw", {X{15}, Mem{X{0}, a.smem + 64}});
    b.op("muli", {X{18}, X{17}, 66});
    b.op("add", {X{15}, X{10}, X{18}});
    b.op("add", {X{15}, X{15}, X{11}});
    b.op("sw", {X{15}, Mem{X{0}, a.smem + 128}});
    b.op("muli", {X{18}, X{17}, kGemvColumnBlockBytes});
    for (uint32_t d = 0; d < 3; ++d) b.op("sw", {X{18}, Mem{X{0}, a.smem + 64 * d + 16}});  // src stride
    const uint32_t dst[3] = {codes(s), scales(s), zeros(s)};
    for (uint32_t d = 0; d < 3 && a.rows >= 2; ++d) {  // (one row: slot 0's, as written above)
      b.li(X{15}, sim::ocm_addr(dst[d]));
      b.op("sw", {X{15}, Mem{X{0}, a.smem + 64 * d + 4}});
    }
    for (uint32_t d = 0; d < 3; ++d) b.op("dma.start", {Chan{uint8_t((3 * s + d) % nch)}, X{uint8_t(12 + d)}});
  };
  // Slot s to the output row at x2 + out_off: PE q (pass p) dequantises block p * npe + q.
  auto dequant = [&](uint32_t s, int64_t out_off) {
    for (uint32_t p = 0; p < passes; ++p) {
      uint32_t first = p * npe, count = std::min(npe, nblk - first);
      b.li(X{16}, count);
      b.op("pset.range", {P{1}, X{0}, X{16}});
      b.op("oscatter", {V{0}, Mem{X{0}, codes(s) + first * 64}, X{5}}, P{1});
      b.op("oscatter.w1", {V{1}, Mem{X{0}, scales(s) + first * 2}, X{6}}, P{1});
      b.op("oscatter.w1", {V{3}, Mem{X{0}, zeros(s) + first}, X{7}}, P{1});
      b.op("vcvt.f32.f16", {V{2}, V{1}}, P{1});
      b.op("vand", {V{3}, V{3}, V{30}}, P{1});
      b.op("vcvt.f32.i32", {V{3}, V{3}}, P{1});
      b.op("vsel", {V{4}, V{2}, V{3}, V{31}}, P{1});
      for (int n = 0; n < 8; ++n) b.op("vdq4.f16", {V{uint8_t(8 + n)}, V{0}, V{4}, int64_t(n)}, P{1});
      for (int n = 0; n < 8; ++n)
        b.op("ogather.h", {V{uint8_t(8 + n)}, Mem{X{2}, out_off + int64_t(first) * 256 + 32 * n}, X{8}}, P{1});
    }
  };
  // Pairs of rows, software-pipelined: step i starts pair i + 1's DMAs (into the other two slots),
  // dequantises pair i, then waits; a loop trip runs two steps (slots 0, 1 then 2, 3). An odd last
  // row alone.
  const uint32_t pairs = a.rows / 2;
  const int64_t os = out_stride;
  auto issue_pair = [&](uint32_t s0, int64_t id_off) {
    issue(s0, id_off);
    issue(s0 + 1, id_off + 4);
  };
  auto step = [&](uint32_t s0, int64_t i, bool next) {  // pair i (relative to x1, x2) in slots s0, s0 + 1
    if (next) issue_pair(2 - s0, 8 * (i + 1));
    dequant(s0, 2 * i * os);
    dequant(s0 + 1, (2 * i + 1) * os);
    if (next) b.op("dma.waitall");
  };
  if (pairs) {
    issue_pair(0, 0);
    b.op("dma.waitall");
    const uint32_t trips = (pairs - 1) / 2;
    if (trips) {
      b.li(X{3}, trips);
      b.loop(X{3}, [&] {
        step(0, 0, true);
        step(2, 1, true);
        b.op("addi", {X{1}, X{1}, 16});
        b.op("addi", {X{2}, X{2}, 4 * os});
      });
    }
    for (uint32_t i = 2 * trips; i < pairs; ++i) step(i % 2 ? 2 : 0, i - 2 * trips, i + 1 < pairs);
    b.op("addi", {X{1}, X{1}, 8 * int64_t(pairs - 2 * trips)});
    b.op("addi", {X{2}, X{2}, 2 * int64_t(pairs - 2 * trips) * os});
  }
  if (a.rows % 2) {
    issue(0, 0);
    b.op("dma.waitall");
    dequant(0, 0);
  }
}

}  // namespace gpnpu::kernels
