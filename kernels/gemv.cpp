#include "kernels/gemv.h"

#include <algorithm>
#include <cstring>

#include "isa/error.h"
#include "sim/machine/memory_map.h"
#include "sim/machine/timing.h"

namespace gpnpu::kernels {

namespace {
constexpr uint32_t kBlock = 128;
// The narrowest tile (gemv.h, "Tile width"): every array of 32x32 PEs or more then runs the
// same tiles, and the simulator runs no more instructions than at the qc-u array.
constexpr uint32_t kMinTileCols = 1024;
uint32_t ceil_div(uint32_t a, uint32_t b) { return (a + b - 1) / b; }
}  // namespace

uint64_t gemv_weight_bytes(uint32_t n, uint32_t k) { return uint64_t(n) * (k / kBlock) * kGemvColumnBlockBytes; }

namespace {
// A tile wider than the array: PE e owns columns e, e + npe, ... (groups of npe columns,
// at most 4), group j accumulating into acc(j, 0) and acc(j, 1).
constexpr uint32_t kMaxGroups = 4;
V acc(uint32_t j, uint32_t h) {
  static constexpr uint8_t regs[kMaxGroups][2] = {{8, 9}, {5, 6}, {7, 26}, {27, 28}};
  return V{regs[j][h]};
}
uint32_t groups(uint32_t W, uint32_t npe) { return ceil_div(W, npe); }
// Group j of a tile of W columns: all PEs, or (the last, partial one) p2.
P group_pred(uint32_t W, uint32_t npe, uint32_t j) { return (j + 1) * npe <= W ? P{0} : P{2}; }

// One 128-block of a tile of W columns from the buffer at x7 (x5: x; x8, x9, x10: the
// scatter strides; v30, v31: the masks), accumulated into v8 and v9 (W <= npe: the tile's
// PEs are `pred`) or, on a wider tile, into each group's accumulators.
void emit_block(Builder& b, uint32_t W, P pred, uint32_t npe) {
  // Group j's codes, scale and zero (v0, v4: lane 0 scale, lane 1 zero), then its 128
  // weights dequantised into v18..v25 (staged over the 8 groups of 16 codes, so no
  // instruction waits on the one before it).
  auto codes = [&](uint32_t j, P p) {
    b.op("oscatter", {V{0}, Mem{X{7}, int64_t(j) * npe * 64}, X{8}}, p);
    b.op("oscatter.w1", {V{1}, Mem{X{7}, int64_t(W) * 64 + int64_t(j) * npe * 2}, X{9}}, p);
    b.op("oscatter.w1", {V{3}, Mem{X{7}, int64_t(W) * 66 + int64_t(j) * npe}, X{10}}, p);
    b.op("vcvt.f32.f16", {V{2}, V{1}});
    b.op("vand", {V{3}, V{3}, V{30}});
    b.op("vcvt.f32.i32", {V{3}, V{3}});
    b.op("vsel", {V{4}, V{2}, V{3}, V{31}});
  };
  auto dequant = [&] {
    for (int n = 0; n < 8; ++n) b.op("vdq4.f32", {V{uint8_t(18 + n)}, V{0}, V{4}, int64_t(n)});
  };
  auto x = [&] { for (int n = 0; n < 8; ++n) b.op("obcast.h", {V{uint8_t(10 + n)}, Mem{X{5}, 32 * n}}); };
  auto x_f32 = [&] { for (int n = 0; n < 8; ++n) b.op("vcvt.f32.f16", {V{uint8_t(10 + n)}, V{uint8_t(10 + n)}}); };
  auto mla = [&](uint32_t j) {
    for (int n = 0; n < 8; ++n) b.op("vmla.f32", {acc(j, n % 2), V{uint8_t(18 + n)}, V{uint8_t(10 + n)}});
  };
  if (W > npe) {
    x();
    x_f32();
    for (uint32_t j = 0; j < groups(W, npe); ++j) {
      codes(j, group_pred(W, npe, j));
      dequant();
      mla(j);
    }
  } else {
    codes(0, pred);
    x();
    dequant();
    x_f32();
    mla(0);
  }
  b.op("addi", {X{7}, X{7}, int64_t(W) * kGemvColumnBlockBytes});
  b.op("addi", {X{5}, X{5}, kBlock * 2});
}

// Issue cycles of one block of W columns: the occupancies of its instructions, in order.
uint64_t block_cycles(const sim::Config& cfg, uint32_t W) {
  Builder b;
  emit_block(b, W, P{0}, cfg.npe());
  const isa::Program p = b.finish();
  const sim::Timing timing(cfg);
  uint64_t cycles = 0;
  for (uint32_t pc = 0; pc < p.words.size(); ++pc)
    cycles += std::max<uint32_t>(1, timing.cost_of(isa::decode(p.words[pc], pc), std::min(W, cfg.npe())).occupancy);
  return cycles;
}

// gemv.h, "Tile width": whether the DDR port, with the margin, bounds a block of T columns.
bool port_bound(const sim::Config& cfg, uint32_t T) {
  return T * kGemvColumnBlockBytes / cfg.ddr_bytes_per_cycle() >= 1.25 * double(block_cycles(cfg, T));
}
}  // namespace

uint32_t gemv_tile_cols(const sim::Config& cfg) {
  const uint32_t npe = cfg.npe();
  // An array of fewer PEs than the narrowest tile takes it in column groups when npe, a
  // power of two, divides it (at most kMaxGroups), else tiles of npe columns.
  if (npe < kMinTileCols)
    return (npe & (npe - 1)) == 0 ? std::min(kMinTileCols, kMaxGroups * npe) : npe;
  for (uint32_t T = kMinTileCols; T < npe; T *= 2)
    if (port_bound(cfg, T)) return T;
  return npe;
}

std::vector<uint8_t> pack_gemv_weight(const W4Weights& w, const sim::Config& cfg) {
  const uint32_t n = uint32_t(w.rows), k = uint32_t(w.cols), T = gemv_tile_cols(cfg);
  if (k % kBlock) fail("pack_gemv_weight: K = {} is not a multiple of {}", k, kBlock);
  const uint32_t nblk = k / kBlock, ntiles = ceil_div(n, T);
  std::vector<uint8_t> out(gemv_weight_bytes(n, k), 0);
  for (uint32_t t = 0; t < ntiles; ++t) {
    const uint32_t W = std::min(T, n - t * T);  // columns of this tile
    for (uint32_t b = 0; b < nblk; ++b) {
      uint8_t* blk = &out[(uint64_t(t) * T * nblk + uint64_t(b) * W) * kGemvColumnBlockBytes];
      uint8_t* scales = blk + W * 64;
      uint8_t* zeros = scales + W * 2;
      for (uint32_t e = 0; e < W; ++e) {
        const uint32_t col = t * T + e;
        std::memcpy(blk + e * 64, &w.codes[size_t(col) * w.row_stride() + b * 64], 64);
        uint16_t s = w.scales[size_t(col) * nblk + b];
        std::memcpy(scales + e * 2, &s, 2);
        zeros[e] = w.zeros[size_t(col) * nblk + b];
      }
    }
  }
  return out;
}

KernelCost cost_gemv(const sim::Config&, const GemvArgs& a) {
  KernelCost c;
  c.macs = uint64_t(a.n) * a.k;
  c.ddr_bytes = gemv_weight_bytes(a.n, a.k);
  return c;
}

uint64_t gemv_scratch_bytes(const sim::Config& cfg, uint32_t buffers) {
  return uint64_t(buffers) * (uint64_t(gemv_tile_cols(cfg)) * kGemvColumnBlockBytes + 4);
}

// 2B decode on qc-u with one DMA channel, x the DDR floor at 32 / 128 GB/s: one buffer 1.117 /
// -; two, chunks of 1 block 1.043 / -, 2 blocks 1.025 / 1.100, 4: 1.017 / 1.067, 8: 1.014 / 1.058.
constexpr uint32_t kOneChannelBlocks = 8;
GemvTiling gemv_tiling(const sim::Config& cfg, const GemvArgs& a) {
  const uint32_t T = gemv_tile_cols(cfg), nblk = a.k / kBlock;
  const uint32_t gmax = port_bound(cfg, T) || nblk % 2 ? 1 : 2;
  // Two buffers on one channel: chunks of up to kOneChannelBlocks blocks (dividing the call's),
  // as each starts only once the one before has arrived, which exposes the DDR's latency once
  // a chunk.
  for (uint32_t ch = uint32_t(cfg.dma_channels); ch >= 1; --ch)
    for (uint32_t bufs = ch == 1 && cfg.dma_channels == 1 ? 2 : ch; bufs >= ch; --bufs)
      for (uint32_t g = bufs > ch ? kOneChannelBlocks : gmax; g >= 1; --g)
        if (nblk % g == 0 && bufs * (uint64_t(g) * T * kGemvColumnBlockBytes + 4) <= a.scratch_bytes)
          return {ch, g, bufs};
  fail("gemv: one 128-block of {} columns ({} bytes) does not fit the {} bytes of OCM scratch; give it more OCM", T,
       T * kGemvColumnBlockBytes + 4, a.scratch_bytes);
}

namespace {
// The chunk stream of one call (the tiling rule's G and channels): C chunks, the last Ct
// of them the narrow tile's.
struct GemvChunks {
  uint32_t T, nblk, tail, G, Ct, C, chunk_bytes, tail_chunk_bytes, ch;
  bool two = false;  // one channel, two buffers (the tiling rule)
  GemvChunks(const sim::Config& cfg, const GemvArgs& a) {
    if (a.k == 0 || a.k % kBlock) fail("gemv: K = {} must be a positive multiple of {}", a.k, kBlock);
    if (a.n == 0) fail("gemv: N must be positive");
    T = gemv_tile_cols(cfg), nblk = a.k / kBlock, tail = a.n % T;
    const GemvTiling tl = gemv_tiling(cfg, a);
    G = tl.chunk_blocks;
    Ct = tail ? nblk / G : 0;
    C = a.n / T * (nblk / G) + Ct;
    chunk_bytes = G * T * kGemvColumnBlockBytes;
    tail_chunk_bytes = G * tail * kGemvColumnBlockBytes;
    ch = std::min(tl.channels, C);
    two = ch == 1 && tl.buffers == 2 && C > 1;
  }
  uint32_t size(uint32_t c) const { return c + Ct >= C ? tail_chunk_bytes : chunk_bytes; }
  // Buffers are spaced for full chunks, so a narrow chunk's routine reads stay inside its buffer.
  uint32_t buf(const GemvArgs& a, uint32_t c) const { return a.scratch_ocm + c * (chunk_bytes + 4); }
};
}  // namespace

uint32_t gemv_chunk_bytes(const sim::Config& cfg, const GemvArgs& a) { return GemvChunks(cfg, a).chunk_bytes; }
uint32_t gemv_park_unit(const sim::Config& cfg, const GemvArgs& a) {
  const GemvChunks k(cfg, a);
  return k.two ? 0 : k.ch % 2 ? k.ch : k.ch / 2;  // (the parked chunks of a phase-1 iteration)
}
uint32_t gemv_parkable_chunks(const sim::Config& cfg, const GemvArgs& a) {
  const GemvChunks k(cfg, a);
  const uint32_t unit = gemv_park_unit(cfg, a);
  return unit ? (k.C - k.Ct) / 3 / unit * unit : 0;
}
bool gemv_park_ok(const sim::Config& cfg, const GemvArgs& a) {
  const uint32_t unit = gemv_park_unit(cfg, a);
  return unit && a.park_chunks % unit == 0 && a.park_chunks <= gemv_parkable_chunks(cfg, a);
}

void emit_gemv_prefetch(Builder& b, const sim::Config& cfg, const GemvArgs& a) {
  const GemvChunks k(cfg, a);
  uint32_t src = a.w_ddr;
  for (uint32_t c = 0; c < k.ch; ++c) {
    b.descriptor(a.smem + c * 64, src, sim::ocm_addr(k.buf(a, c)), k.size(c));
    b.li(X{19}, a.smem + c * 64);
    b.op("dma.start", {Chan{uint8_t(c)}, X{19}});
    src += k.size(c);
  }
}

void emit_gemv_w4(Builder& b, const sim::Config& cfg, const GemvArgs& a) {
  GemvChunks k(cfg, a);
  // Parked chunks (GemvArgs::park_chunks): chunk 3i + 2 for i < Pk; the DMA streams the other
  // C (gemv_park_ok).
  const uint32_t Pk = a.park_chunks;
  if (Pk) {
    if (a.prefetched) fail("gemv: parked chunks and a prefetch cannot both start the call");
    if (!gemv_park_ok(cfg, a))
      fail("gemv: {} parked chunks do not fit the call (every third of its {} full chunks, whole phase-1 "
           "iterations of {} on its {} channels)",
           Pk, k.C - k.Ct, gemv_park_unit(cfg, a), k.ch);
    k.C -= Pk;
  }
  const uint32_t T = k.T, nblk = k.nblk, tail = k.tail, G = k.G, Ct = k.Ct, C = k.C;
  const uint32_t chunk_bytes = k.chunk_bytes, tail_chunk_bytes = k.tail_chunk_bytes, ch = k.ch;
  auto buf = [&](uint32_t c) { return k.buf(a, c); };
  auto desc = [&](uint32_t c) { return a.smem + c * 64; };

  // ---- prologue: constants, descriptors, first chunks in flight ----
  // x2 DDR address of the next chunk, x3 chunks left to start, x12 its size, x24 the
  // narrow tile's chunk count (x12 switches when x3 reaches it).
  b.li(X{1}, C + Pk);
  b.li(X{2}, a.w_ddr);
  if (Pk) {  // x26: the phase-1 toggle (a chunk after the pair's second is parked), x27 its starts left
    b.li(X{26}, 0);
    b.li(X{27}, 2 * Pk);
  }
  b.li(X{3}, C);
  b.li(X{4}, 0);
  b.li(X{5}, a.x_ocm);
  b.li(X{6}, a.y_ocm);
  b.li(X{8}, 64);
  b.li(X{9}, 2);
  b.li(X{10}, 1);
  b.li(X{11}, nblk);
  b.li(X{12}, C == Ct ? tail_chunk_bytes : chunk_bytes);
  if (G > 1) b.li(X{13}, G);
  b.li(X{15}, a.n);
  b.li(X{16}, T);
  b.li(X{24}, Ct);
  b.op("min", {X{17}, X{15}, X{16}});
  b.op("pset.range", {P{1}, X{0}, X{17}});  // p1: the tile's PEs, all of them when T = npe
  b.op("vsplati", {V{30}, int64_t(0xff)});
  b.op("vlaneid", {V{31}});
  b.op("vsplati", {V{29}, int64_t(0)});
  b.op("vcmpeq.i32", {V{31}, V{31}, V{29}});  // lane-0 mask
  b.op("vsplati", {V{8}, int64_t(0)});
  b.op("vsplati", {V{9}, int64_t(0)});
  for (uint32_t j = 1; j < groups(T, cfg.npe()); ++j)
    for (uint32_t h : {0u, 1u}) b.op("vsplati", {acc(j, h), int64_t(0)});
  if (T > cfg.npe() && tail % cfg.npe()) {  // column groups: p2 = the narrow tile's last, partial group
    b.li(X{17}, tail % cfg.npe());
    b.op("pset.range", {P{2}, X{0}, X{17}});
  }
  const uint32_t slots = k.two ? 2 : ch;  // chunk buffers, each with its descriptor
  for (uint32_t c = 0; c < slots; ++c)
    b.descriptor(desc(c), 0, sim::ocm_addr(buf(c)), C == Ct ? tail_chunk_bytes : chunk_bytes);
  // The next chunk into buffer c (on channel c, or the one channel). issue = false: the chunk
  // is in flight already (prefetched); only the registers move on.
  auto start_chunk = [&](uint32_t c, bool issue = true) {
    b.op("sw", {X{2}, Mem{X{0}, desc(c)}});
    if (Ct && C != Ct) b.op("sw", {X{12}, Mem{X{0}, desc(c) + 8}});
    if (issue) {
      b.li(X{19}, desc(c));
      b.op("dma.start", {Chan{uint8_t(c % ch)}, X{19}});
    }
    b.op("add", {X{2}, X{2}, X{12}});
    if (Pk) {  // (past a pair's second chunk, over the parked one)
      Label no = b.label(), flip = b.label();
      b.op("beq", {X{27}, X{0}, no});
      b.op("addi", {X{27}, X{27}, -1});
      b.op("beq", {X{26}, X{0}, flip});
      b.op("add", {X{2}, X{2}, X{12}});
      b.bind(flip);
      b.op("xori", {X{26}, X{26}, 1});
      b.bind(no);
    }
    b.op("addi", {X{3}, X{3}, -1});
    if (Ct && C != Ct) {
      Label full = b.label();
      b.op("bne", {X{3}, X{24}, full});
      b.li(X{12}, tail_chunk_bytes);
      b.bind(full);
    }
  };
  if (Pk) b.op("dma.waitall");
  for (uint32_t c = 0; c < ch && C; ++c) start_chunk(c, !a.prefetched);

  // ---- main loop: per channel, wait for its chunk, consume it, refill (two buffers on one
  // channel: wait for the chunk, start the next into the other buffer, consume) ----
  Label round = b.label(), done = b.label(), chunk = b.label();
  if (Pk) {
    // Phase 1: a parked chunk after every two streamed ones (the chunks' order), in the time the
    // array waits on the DDR for the next; an iteration is two rounds of the channels where they
    // are odd (x20: the next parked chunk; their copies were waited for above: long done where
    // the caller placed them).
    const uint32_t R = ch % 2 ? 2 : 1;
    Label phase = b.label();
    b.li(X{20}, a.park_ocm);
    b.li(X{25}, Pk / (R * ch / 2));
    b.bind(phase);
    for (uint32_t i = 0; i < R * slots; ++i) {
      const uint32_t c = i % slots;
      Label skip = b.label();
      b.op("dma.wait", {Chan{uint8_t(c)}});
      b.li(X{7}, buf(c));
      b.op("jal", {X{14}, chunk});
      b.op("addi", {X{1}, X{1}, -1});
      b.op("beq", {X{3}, X{0}, skip});
      start_chunk(c);
      b.bind(skip);
      if (i % 2 == 0) continue;
      b.op("add", {X{7}, X{20}, X{0}});
      b.op("jal", {X{14}, chunk});
      b.op("add", {X{20}, X{7}, X{0}});
      b.op("addi", {X{1}, X{1}, -1});
    }
    b.op("addi", {X{25}, X{25}, -1});
    b.op("bne", {X{25}, X{0}, phase});
  }
  b.bind(round);
  for (uint32_t c = 0; c < slots; ++c) {
    Label skip = b.label();
    b.op("beq", {X{1}, X{0}, done});
    b.op("dma.wait", {Chan{uint8_t(c % ch)}});
    if (k.two) {
      b.op("beq", {X{3}, X{0}, skip});
      start_chunk(1 - c);
      b.bind(skip);
    }
    b.li(X{7}, buf(c));
    b.op("jal", {X{14}, chunk});
    b.op("addi", {X{1}, X{1}, -1});
    if (!k.two) {
      b.op("beq", {X{3}, X{0}, skip});
      start_chunk(c);
      b.bind(skip);
    }
  }
  b.op("jal", {X{0}, round});

  // ---- subroutine: G blocks of one tile of W columns from the buffer at x7 ----
  const uint32_t npe = cfg.npe();
  // (column groups: a narrow tile narrower than the array reads with p2, its PEs)
  auto blocks = [&](uint32_t W) {
    const P pred = T <= npe ? P{1} : W < npe ? P{2} : P{0};
    if (G == 1) return emit_block(b, W, pred, npe);  // no loop: it would cost more than the block
    b.loop(X{13}, [&] { emit_block(b, W, pred, npe); });
  };
  Label ret = b.label(), narrow = b.label(), tile_end = b.label();
  b.bind(chunk);
  if (T > npe) {
    // Column groups (T = g npe): each tile kind has its own routine and tile end (p2 set in
    // the prologue).
    auto routine = [&](uint32_t W) {
      blocks(W);
      b.op("addi", {X{4}, X{4}, int64_t(G)});
      b.op("bne", {X{4}, X{11}, ret});
      for (uint32_t j = 0; j < groups(W, npe); ++j) {
        b.op("vadd.f32", {acc(j, 0), acc(j, 0), acc(j, 1)});
        b.op("vredsum.f32", {acc(j, 0), acc(j, 0)});
        b.op("vcvt.f16.f32", {acc(j, 0), acc(j, 0)}, group_pred(W, npe, j));  // (below)
        b.op("ogather.h1", {acc(j, 0), Mem{X{6}, int64_t(j) * npe * 2}, X{9}}, group_pred(W, npe, j));
        b.op("vsplati", {acc(j, 0), int64_t(0)});
        b.op("vsplati", {acc(j, 1), int64_t(0)});
      }
      b.li(X{4}, 0);
      b.li(X{5}, a.x_ocm);
      b.op("addi", {X{6}, X{6}, int64_t(T) * 2});
      b.op("sub", {X{15}, X{15}, X{16}});
      b.op("jal", {X{0}, ret});
    };
    if (tail) b.op("blt", {X{15}, X{16}, narrow});
    routine(T);
    if (tail) {
      b.bind(narrow);
      routine(tail);
    }
  } else {
    if (tail) {
      b.op("blt", {X{15}, X{16}, narrow});  // fewer columns left than PEs: the narrow tile
      blocks(T);
      b.op("jal", {X{0}, tile_end});
      b.bind(narrow);
      blocks(tail);  // only the tile's PEs read (p1 = its columns)
      b.bind(tile_end);
    } else {
      blocks(T);
    }
    b.op("addi", {X{4}, X{4}, int64_t(G)});
    b.op("bne", {X{4}, X{11}, ret});
    // Tile done: sum the lanes, store one fp16 per column, move to the next tile.
    b.op("vadd.f32", {V{8}, V{8}, V{9}});
    b.op("vredsum.f32", {V{8}, V{8}});
    // Only the tile's PEs round: the others dequantised and accumulated whatever their
    // registers held (their scatters are predicated off), junk that must not reach the fp16
    // range tracking (a call of the narrow tile alone, the 2B decode's last LM-head call, met
    // stale registers of earlier kernels there: -128,730, an overflow).
    b.op("vcvt.f16.f32", {V{8}, V{8}}, P{1});
    b.op("ogather.h1", {V{8}, Mem{X{6}, 0}, X{9}}, P{1});
    b.op("vsplati", {V{8}, int64_t(0)});
    b.op("vsplati", {V{9}, int64_t(0)});
    b.li(X{4}, 0);
    b.li(X{5}, a.x_ocm);
    b.op("addi", {X{6}, X{6}, int64_t(T) * 2});
    b.op("sub", {X{15}, X{15}, X{16}});
    b.op("min", {X{17}, X{15}, X{16}});
    b.op("pset.range", {P{1}, X{0}, X{17}});
  }
  b.bind(ret);
  b.op("jalr", {X{0}, X{14}, 0});
  b.bind(done);
}

}  // namespace gpnpu::kernels
