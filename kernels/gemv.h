// W4A16 GEMV for decode: y[n] = sum_k W[n][k] x[k], W as 4-bit codes with an fp16
// scale and a uint8 zero point per 128-block (w = (q - z) * s), x and y fp16 in OCM.
//
// Mapping: each PE owns one output column of a tile of T columns (gemv_tile_cols, at
// most npe: the PEs past T idle); the 16 lanes of a PE take 16 consecutive k. Per
// 128-block a PE dequantises its 128 codes (one vector register) with vdq4.f32,
// exactly as the reference does, and multiply-accumulates against the broadcast x;
// lanes are summed at the tile's end.
//
// DDR layout (pack_gemv_weight): tile-major, then block-major; one block of a
// tile of W columns is [W x 64 B codes][W x 2 B fp16 scales][W x 1 B zeros] = 67 B
// per column. Tiles are W = T columns, the last one W = n % T (no padding
// columns: the packed weight is exactly n x k/128 x 67 bytes at any array size). A
// chunk, G consecutive blocks of one tile, is one contiguous DMA descriptor; the chunks
// of the last, narrower tile are shorter (the descriptor's size is rewritten when the DMA
// side reaches them, the consumer switches to the narrow routine).
//
// Tile width: T is the narrowest power of two from 1,024 whose block keeps the DDR port
// 1.25x as long as the array takes to consume it, so the array never falls behind, and
// at most npe: every array of 32x32 PEs or more runs the same tiles and cycles (a wider
// tile only delays a call's first chunk and its last block). Narrower tiles would be
// faster still, by 0.03% (2B decode, one block a chunk, 32 GB/s: 48,856,516 cycles at
// 1,024 columns, 48,844,385 at 256, 48,841,574 at 64), but every tile repeats the block's
// ~40 instructions and the simulator pays for them: a functional decode step took 7.35 s
// of CPU at 256 columns against 2.24 s at 1,024, a timing-only one 0.15 s against 0.05 s.
// So a 16x16 array (256-column tiles) decodes 0.02 to 0.09% faster than the larger ones.
//
// Tiling rule: one OCM buffer (one chunk) per DMA channel used, the most channels
// (<= dma_channels) whose buffers fit the scratch area; G = 1 when the port bounds the
// tile (the T rule found one), else 2 if they fit (an array narrower than the rule's T
// is the bound: two blocks a chunk halve the per-chunk work; measured on the 4x4 mini
// preset, one block a chunk is 7% slower). Chunks are round-robined over
// the channels and the next chunk of a channel starts as soon as its buffer is
// consumed, so the DDR port always has work queued. One channel (dma_channels = 1) takes
// two buffers where they fit: the next chunk starts into the other buffer as soon as the
// channel's chunk has arrived, before that chunk is consumed (dma.wait waits for every
// descriptor queued on a channel, so the next one is queued only after it returns); with
// one buffer the DDR idled through every chunk's consumption (2B decode, qc-u with one
// channel at 32 GB/s: 1.117 x the DDR floor; two buffers of 8-block chunks, 1.014 x).
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/builder.h"
#include "kernels/cost.h"
#include "kernels/w4_weights.h"
#include "sim/machine/config.h"

namespace gpnpu::kernels {

constexpr uint32_t kGemvColumnBlockBytes = 67;  // 64 codes + 2 scale + 1 zero

struct GemvArgs {
  uint32_t n = 0, k = 0;      // output and input sizes (k a multiple of 128)
  uint32_t w_ddr = 0;         // bus address of the packed weight (pack_gemv_weight)
  uint32_t x_ocm = 0;         // OCM offset of x, k fp16 values
  uint32_t y_ocm = 0;         // OCM offset of y, n fp16 values
  uint32_t scratch_ocm = 0;   // OCM offset of the DMA buffers
  uint32_t scratch_bytes = 0;
  uint32_t smem = 0;          // scalar-memory bytes for descriptors (64 per channel)
  bool prefetched = false;    // emit_gemv_prefetch(the same args) ran before: the first chunks are in flight
  // Parked chunks: chunk 3i + 2 of the weight for i < park_chunks (whole ones, gemv_chunk_bytes
  // each) was copied to OCM park_ocm + i * gemv_chunk_bytes beforehand by DMA the caller started
  // on any channels; the kernel waits for every channel (dma.waitall), streams the other chunks
  // and consumes a parked one after every two streamed ones, in the time it waits on the DDR for
  // the next. An image program parks the LM head's chunks where its tower leaves the DDR idle and
  // OCM free (docs/performance.md, issue 13). The last one's reads go 3 bytes past the park (as a
  // scratch buffer's past its chunk). Not with prefetched; gemv_park_ok.
  uint32_t park_ocm = 0, park_chunks = 0;
};

// Packs a quantised [n][k] weight into the layout above for the machine's tile width.
std::vector<uint8_t> pack_gemv_weight(const W4Weights& w, const sim::Config& cfg);
uint64_t gemv_weight_bytes(uint32_t n, uint32_t k);
// T, the columns of a tile (the layout's and the kernel's; the rule above), from the
// config's DDR bytes per cycle and the block's issue cycles (sim::Timing).
uint32_t gemv_tile_cols(const sim::Config& cfg);

// DMA channels and blocks per DMA chunk for this config and scratch size (the tiling rule).
struct GemvTiling {
  uint32_t channels = 0, chunk_blocks = 0;
  uint32_t buffers = 0;  // OCM chunk buffers: one a channel, or two on one channel
};
// The buffers the rule gives `channels` channels where the scratch has room.
inline uint32_t gemv_buffers(uint32_t channels) { return channels == 1 ? 2 : channels; }
GemvTiling gemv_tiling(const sim::Config& cfg, const GemvArgs& a);
// OCM scratch for `buffers` DMA buffers at one block a chunk.
uint64_t gemv_scratch_bytes(const sim::Config& cfg, uint32_t buffers);
// Bytes of one of the call's full chunks, and how many of its chunks may be parked (every third
// of its full ones, whole phase-1 iterations): GemvArgs::park_chunks.
uint32_t gemv_chunk_bytes(const sim::Config& cfg, const GemvArgs& a);
uint32_t gemv_parkable_chunks(const sim::Config& cfg, const GemvArgs& a);
// The parked chunks of a phase-1 iteration (a count of them is a multiple; 0: none on one channel).
uint32_t gemv_park_unit(const sim::Config& cfg, const GemvArgs& a);
bool gemv_park_ok(const sim::Config& cfg, const GemvArgs& a);  // whole iterations, at most the parkable

// macs = n * k, ddr_bytes = the packed weight (x and y are in OCM).
KernelCost cost_gemv(const sim::Config& cfg, const GemvArgs& a);

// Emits the kernel (no halt). Throws gpnpu::Error if the shapes or buffers do not fit.
void emit_gemv_w4(Builder& b, const sim::Config& cfg, const GemvArgs& a);
// The call's start-up hidden behind the kernels before it: starts the DMA of the first
// chunk of each channel the call uses (chunk c on channel c, into its buffer) and returns
// at once. Clobbers x19 and x31 only, and the descriptor smem [a.smem, a.smem + 64 C).
// Contract until emit_gemv_w4(a with prefetched = true): nothing writes the scratch
// buffers, the packed weight nor that smem; other kernels may use the DMA channels (their
// descriptors queue behind the prefetch, in order per channel).
void emit_gemv_prefetch(Builder& b, const sim::Config& cfg, const GemvArgs& a);

}  // namespace gpnpu::kernels
