// Internal to the compiler (compiler_image.cpp, image_streamed.cpp): what the image program's two
// plans share besides the blocks (blocks.h): the plan rules' constants and estimates, the chunk
// widths and splits, the OCM footprints, tiles and the check of an image shape.
#pragma once

#include <functional>

#include "model/compiler/blocks.h"

namespace gpnpu::model::blocks {

constexpr uint32_t kGateUpChunk = 1536;  // most columns of gate (and of up) per prefill MLP chunk (fits qc-u at S = 128)

// Where a phase can read its weights once (an MLP over every row) or in row tiles that read
// them again, the first unless its estimate is 5% or more above: within the cost model's
// error, fewer DDR bytes (energy, docs/energy.md). (1 MiB, 128 GB/s: without it the estimate
// took the row tiles at 2.9 x the weights' bytes, and 64x64 ran 0.2% slower than at 64 GB/s.)
constexpr double kFewerBytes = 1.05;

// A row tile's GEMM call beside its MACs: start-up, epilogues and the code scatters its few
// rows cannot hide (not under the call's weights). Measured 2.6 K cycles a call of 44 rows on
// 1,024 PEs (the 2B tower's fc1 and fc2 in row tiles at 1 MiB: 10.4 K over their MACs a call
// of 4 tiles), 3.3 K a chunk call of 256 rows. Without it the estimate took the tower's MLP
// in 6 row tiles of 44 rows at 1 MiB, 128 GB/s (620 MB of weights) where over every row it
// runs 2.0% faster. (The chained chunk calls of an MLP over every row hand their start-ups
// off: charged there too, the tiny model's MLPs left that plan for 10-12% slower ones.)
constexpr double kCallCycles = 2500;

// On one DMA channel, the streamed plan's candidates with the GEMMs' second buffer reserved
// (gemm_buffer_bytes) win unless their estimate is this much higher: the estimate leaves out the
// DDR time the buffer saves. Image programs, x the floors, reserved / not, measured: 20x32 at 2
// MiB, 64 GB/s (estimates 0.4% apart) 1.351 / 1.400 x, taken; 38x48 at 768 KiB, 32 GB/s 3.579 /
// 3.858 x, taken; 34x17 at 512 KiB, 32 GB/s 3.346 / 3.216 x, not taken (the GEMMs whose buffers leave
// room stream into two all the same).
constexpr double kTwoBuffers = 1.02;

// Columns of gate (and of up) per prefill MLP chunk: a divisor c of inter up to kGateUpChunk
// for which the fewest chunks make a gate|up call of whole tiles of the array (2 c J columns a
// multiple of npe: npe / gcd(2 c, npe) chunks, dividing inter / c), the largest such c; else
// the largest divisor. (32x64: 1,024, one chunk a call of one whole tile, where 1,536 took split
// 2, each K step in two PE passes: 1.24 x the MAC floor, 45.97 -> 44.05 M cycles at 4 MiB and
// 64 GB/s.) cfg is the whole array: whole on it, whole on any GEMM view of it.
inline uint32_t gate_up_chunk(const sim::Config& cfg, uint32_t inter) {
  const uint64_t npe = cfg.npe();
  uint32_t best = 0, fit = 0;
  uint64_t best_j = 0;
  for (uint32_t c = 1; c <= std::min(inter, kGateUpChunk); ++c) {
    if (inter % c) continue;
    fit = c;
    const uint64_t j = npe / std::gcd(2 * uint64_t(c), npe);
    if ((inter / c) % j == 0 && (!best || j <= best_j)) best = c, best_j = j;
  }
  return best ? best : fit;
}

// The K of the resident prefill's down chunks (L.dn{c}): two gate|up chunks' columns, so that a
// down chunk, like a gate|up call, reads a tile of K = 2 cw and streams the next one's while it
// runs (one down over all of K has a first tile 3x as large, which the last gate|up call cannot
// stream in time: 32x64, 4 MiB, 64 GB/s: the layer's MLP waited 17 K cycles there); 0 where the
// chunks do not pair up.
inline uint32_t down_chunk_k(uint32_t cw, uint32_t inter) { return (inter / cw) % 2 == 0 ? 2 * cw : 0; }

// Cycles of an OCM attention call: its key steps (plan_attention_ocm), each about
// hd x (0.47 + 0.08 G) cycles (measured at qc-u: 35 a step in the tower, 80 in the prefill).
inline double attention_estimate(const sim::Config& cfg, const OcmAttnArgs& a) {
  return plan_attention_ocm(cfg, a).work * a.head_dim * (0.47 + 0.08 * (a.q_heads / a.kv_heads));
}

// The streamed plan's MLP phases over every row at once (image_streamed, Streamed::vpm for the
// tower, pm for the prefill): fc1|fc2 and gate|up|down in chunks of pm_chunk inner columns,
// packed on their own (vpm_name, pm_name): a chunk's up output [rows][c] (gate|up: 2 c) sits
// beside the fp32 partial sums [rows][width] and the normed rows.
// The width: kPmChunk, or on an array of npe PEs (npe > 0) at least one tile of the up GEMM at
// split 2 (npe / 2 of its outputs, up of them per inner column: 1 for fc1, 2 for gate|up), so
// that a wide array's up GEMM has no idle PEs (32x64, 2 MiB, 32 GB/s: the tower's fc1 chunks
// of 512 ran on half the PEs, 1.98x their MAC floor); the largest divisor of inter up to that.
// Compiler::settle_pm_chunks chooses npe (Compiler::pm_npe_). (inter is whole 128-blocks, and so
// is c from its start: on an array of 21 x 48 PEs, npe / 2 = 504 is not, and the search below
// once stepped past every divisor for ever.)
constexpr uint32_t kPmChunk = 512;
inline uint32_t pm_chunk_width(uint32_t npe, uint32_t inter, uint32_t up) {
  uint32_t c = std::min(inter, std::max(kPmChunk, npe / 2 / up)) / kW4Block * kW4Block;
  while (inter % c) c -= kW4Block;
  return c;
}

// The first of a prefill run's S rows that layer i (of `layers`) computes past its KV write: 0 but
// in the last layer, where only the head's input (row S - 1) is read after it, and none without
// the head (a conversation's earlier chunk). Both plans run that layer's attention, o_proj, MLP
// and residuals on rows [read_from, S) alone.
inline uint32_t read_from(const ImageShape& s, uint32_t S, int i, int layers) {
  return i + 1 < layers ? 0 : s.head ? S - 1 : S;
}

// The tower's q|k|v made a group of vgq_heads heads at a time beside its attention
// (image_streamed, Streamed::vqg; blocks >= 1): the group's q, k and v rows packed as one GEMM
// weight (vgq_name), the q|k|v bias in the same order (vname(b, "gqbias")). Groups of 4 heads
// (2 or 1 where the heads do not divide so, at least two groups a block).
inline uint32_t vgq_heads(uint32_t heads) {
  for (uint32_t g : {4u, 2u})
    if (heads % g == 0 && heads / g >= 2) return g;
  return 1;
}

// The DDR cycles of an n x k GEMM's first tile at `split` (the whole weight where that is less),
// and the MAC cycles of a tile of one over `rows` rows: what a call's hand-off of the next call's
// first tile, during its own last tile, must fit in.
inline double first_tile_ddr(const sim::Config& gcfg, uint32_t n, uint32_t k, uint32_t split) {
  const GemmPlan p = plan_gemm(gcfg, 1, n, k, split);
  return double(std::min(p.tile_bytes, p.weight_bytes())) / gcfg.ddr_bytes_per_cycle();
}
inline double last_tile_macs(const sim::Config& gcfg, uint32_t rows, uint32_t n, uint32_t k) {
  return double(rows) * plan_gemm(gcfg, rows, n, k).cols * k / gcfg.mac_peak(true);
}

// Its gate|up GEMMs at split 2 where a tile of them at split 1 (the whole weight where that is
// less) streams in slower than the down chunk before runs the MACs of its last tile over `rows`
// rows (the tile that down chunk hands off during its last tile is then half as large: 32x32,
// 2 MiB, 32 GB/s, when the chunk was one tile 113.7 -> 103.5 M cycles; two tiles, twenty-sixth
// stop, 92.23 -> 90.87 M). Where the DDR keeps up, split 1: a split 2 call spends an array cycle
// more a step on its pair's halves (32x64, 2 MiB, 128 GB/s: the gate|up calls at 1.13 x their
// MACs; 43.65 -> 42.98 M cycles at split 1; where the down chunk has two tiles, as on 32x32 at
// 1 MiB and 64 GB/s, split 1 took 2.4% more). Where even split 2's tile is too slow, the down
// may take two chunks a call instead (pm_down_pairs).
inline uint32_t pm_gate_up_split(const sim::Config& gcfg, uint32_t cp, uint32_t hidden, uint32_t rows) {
  if (first_tile_ddr(gcfg, 2 * cp, hidden, 0) <= last_tile_macs(gcfg, rows, hidden, cp)) return 0;
  try {  // (split 2 where its two LRM buffers fit)
    return plan_gemm(gcfg, 0, 2 * cp, hidden, 2).single ? 0 : 2;
  } catch (const Error&) {
    return 0;
  }
}

// Its down GEMM over two gate|up chunks at a time (K = 2 cp, the chunks' SiLU rows side by side)
// where a tile of the chunk's gate|up (at pm_gate_up_split's split) streams in slower than a down
// chunk of K = cp runs its last tile, and a down of K = 2 cp runs its last tile as long or longer:
// a call's first tile streams in during the call before, and gate|up's weight is twice a down
// chunk's, so a down over two chunks makes the calls alike (64x64, 2 MiB, 128 GB/s: gate|up one
// tile of 2.2 MB, 29.6 K cycles of DDR, against a down chunk of 16.4 K MAC cycles).
// Compiler::settle_pm_pairs keeps it where the estimate agrees.
inline uint32_t pm_down_pairs(const sim::Config& gcfg, uint32_t cp, uint32_t inter, uint32_t hidden, uint32_t rows) {
  if ((inter / cp) % 2) return 1;
  try {
    const double first = first_tile_ddr(gcfg, 2 * cp, hidden, pm_gate_up_split(gcfg, cp, hidden, rows));
    const double one = last_tile_macs(gcfg, rows, hidden, cp), two = last_tile_macs(gcfg, rows, hidden, 2 * cp);
    return first > one && first <= two ? 2 : 1;
  } catch (const Error&) {
    return 1;
  }
}

// Row bytes of an MLP chunk chain's up output, in chunk columns x 2 (ChunkChain::up): fc1's
// chunk; gate|up's rows (2 chunks), or with a down over two chunks the first chunk's SiLU rows
// beside the second's gate|up rows (3; fused, SiLU rows only: 2).
inline uint32_t up_row(bool gated, uint32_t pairs, bool fused) {
  return gated ? 2 * (pairs > 1 && !fused ? 3 : 2) : 2;
}

// Whether n x k GEMMs (at split, 0: the rule's) keep their tiling on below's LRM: the same split,
// and two LRM buffers where full's have two (kernels::GemmPlan::single). Throws where none fits.
inline bool keeps_tiling(const sim::Config& below, const sim::Config& full, uint32_t n, uint32_t k,
                         uint32_t split = 0) {
  const GemmPlan a = plan_gemm(below, 0, n, k, split), b = plan_gemm(full, 0, n, k, split);
  return a.split == b.split && a.single == b.single;
}

// The LRM offset of an MLP phase's partial sums (GemmArgs::lrm_out: its down GEMM of `width`
// outputs over `rows` rows in chunks of `chunk` inputs) at the top of LRM, or 0 where they do
// not fit beside the phase's GEMM buffers (the up GEMM of up_n outputs and up_k inputs, 0:
// width, split up_split, the down GEMM and the out GEMM before the chunks, width outputs and
// out_k inputs (0: none), keep their splits below them). They take no OCM and no OCM port time.
// groups: the down GEMM's columns in groups, one after the other (ChunkChain::groups), the
// sums of one group's columns at a time, each group whole tiles of the down's packing (else 0):
// the up and out GEMMs keep their splits below the first group's sums, the later groups' down
// below theirs (lrm_sums_at), the first group's down below both.
inline uint32_t lrm_sums_at(const sim::Config& gcfg, uint32_t rows, uint32_t n, uint32_t chunk) {
  const uint32_t bytes = gemm_lrm_acc_bytes(gcfg, rows, n, chunk);
  return bytes + 64 < gcfg.lrm_bytes ? (uint32_t(gcfg.lrm_bytes) - bytes) / 64 * 64 : 0u;
}
inline uint32_t lrm_sums(const sim::Config& gcfg, uint32_t rows, uint32_t width, uint32_t chunk, uint32_t up_n,
                         uint32_t up_split, uint32_t up_k = 0, uint32_t out_k = 0, ColumnGroups groups = {}) {
  if (!up_k) up_k = width;
  try {
    if (!groups.whole(width, plan_gemm(gcfg, 0, width, chunk).cols)) return 0;
    const uint32_t g0 = groups.cols(width, 0), gl = groups.count > 1 ? groups.cols(width, 1) : g0;
    sim::Config below = gcfg, later = gcfg;
    below.lrm_bytes = lrm_sums_at(gcfg, rows, g0, chunk);
    later.lrm_bytes = lrm_sums_at(gcfg, rows, gl, chunk);
    if (!below.lrm_bytes || !later.lrm_bytes) return 0;
    if (!keeps_tiling(below, gcfg, up_n, up_k, up_split) || !keeps_tiling(below, gcfg, g0, chunk) ||
        !keeps_tiling(later, gcfg, g0, chunk) || !keeps_tiling(later, gcfg, gl, chunk) ||
        (out_k && !keeps_tiling(below, gcfg, width, out_k)))
      return 0;
    return uint32_t(below.lrm_bytes);
  } catch (const Error&) {
    return 0;
  }
}

// The MACs a row of an n x k GEMM takes on view g's PEs, a narrow tile's idle ones counted (two
// row sets: half that): the tower's N = 1,024 on 48 rows of 64x64 (3,072 PEs), 1.5 n k. (n k where
// no split fits the LRM: that GEMM runs in chunks, as the plan then finds.)
inline double row_macs(const sim::Config& g, uint32_t n, uint32_t k, uint32_t split = 0) {
  try {
    const GemmPlan p = plan_gemm(g, 16, n, k, split);
    return double(p.tiles) * p.cols * k / p.sets;
  } catch (const Error&) {
    return double(n) * k;
  }
}

// The GEMM DMA buffers both plans reserve: the most any GEMM of the image program (of a program
// in parts, Compiler::image_in_parts: of its part, vision: the tower's and mergers', text: the
// prefill's) needs with `channels` DMA channels (gemm_scratch_bytes, kernels/gemm.h); two: on one
// channel, with the second buffer the GEMMs then stream into (both plans try it first on a machine
// of one channel: 2B on qc-u with one channel, 89.35 -> 85.24 M cycles).
// cw: the prefill's gate|up chunk width of a call (the resident plan's).
// cp: the chunk width of the streamed prefill's MLP over every row (Streamed::pm), whose
// chunks replace the whole-width gate|up and down GEMMs (0: none). more: other GEMMs' n x k
// (the streamed plan's chunk packings: a narrow chunk may take another split than the whole
// width, and its buffer holds a whole tile's meta: 2B on 19 of 38x48's rows with 16 KiB of LRM,
// the mergers' fc1 chunks of 512 at split 1 needed 175 KB where the whole fc1 at split 2 took 88).
// whole = false: not the tower's and mergers' whole-width MLP GEMMs (a plan running them in
// chunks, Streamed::vpm and mpm: the vision part on 64x64 at 2 MiB, two channels, 262 KB where
// fc2's K = 4,096 took 525 KB).
struct GemmBuffers {
  bool vision = false, text = false;  // the parts whose GEMMs the buffers serve
  uint32_t channels = 0;
  bool two = false;
  uint32_t cw = 0, cp = 0, pairs = 1;
  std::vector<std::pair<uint32_t, uint32_t>> more = {};
  bool whole = true;
};
inline uint64_t gemm_buffer_bytes(const sim::Config& cfg, const Dims& d, const GemmBuffers& o) {
  const auto& [vision, text, channels, two, cw, cp, pairs, more, whole] = o;
  sim::Config g = cfg;
  g.dma_channels = int(channels);
  uint64_t r = 0;
  auto need = [&](uint32_t n, uint32_t k) { r = std::max<uint64_t>(r, gemm_scratch_bytes(g, n, k, 0, two)); };
  if (vision) {
    for (auto [n, k] : {std::pair<uint32_t, uint32_t>{d.Dv, d.pd}, {3 * d.Dv, d.Dv}, {d.Dv, d.Dv}}) need(n, k);
    if (whole)
      for (auto [n, k] : {std::pair<uint32_t, uint32_t>{d.Iv, d.Dv}, {d.Dv, d.Iv}, {d.Md, d.Md}, {d.H, d.Md}})
        need(n, k);
    for (auto [n, k] : more) need(n, k);  // (the tower's and mergers' chunks)
  }
  if (text) {
    need(d.qkv_n, d.H);
    need(d.H, d.nq * d.hd);
    need(cp ? 2 * cp : 2 * cw, d.H);  // gate|up: the chunks over every row, or a call's chunk
    need(d.H, cp ? pairs * cp : d.I);  // down
  }
  return r;
}

inline uint64_t f16_footprint(const sim::Config& cfg, bool on, uint32_t rows) {
  return on ? detail::OcmAlloc::footprint(uint64_t(rows) * kF16RowBytes) +
                  detail::OcmAlloc::footprint(f16cols_scratch_bytes(cfg))
            : 0;
}
inline F16Regions take_f16(detail::OcmAlloc& a, const sim::Config& cfg, bool on, uint32_t rows) {
  F16Regions r;
  r.on = on;
  if (!on) return r;
  r.xs = a.take(uint64_t(rows) * kF16RowBytes, "fp16 channels of the rows");
  r.scratch = a.take(f16cols_scratch_bytes(cfg), "fp16 correction buffers");
  return r;
}

// Bytes a list of buffers takes from an OcmAlloc (slack and alignment included).
inline uint64_t footprint(std::initializer_list<uint64_t> sizes) {
  uint64_t t = 0;
  for (uint64_t s : sizes) t += detail::OcmAlloc::footprint(s);
  return t;
}

// [r0, r0 + rows) tiles of `total` rows, `per` rows each (the last one shorter).
inline std::vector<std::pair<uint32_t, uint32_t>> tiles_of(uint32_t total, uint32_t per) {
  std::vector<std::pair<uint32_t, uint32_t>> t;
  for (uint32_t r0 = 0; r0 < total; r0 += per) t.push_back({r0, std::min(per, total - r0)});
  return t;
}

// Rows per tile: the fewest tiles whose rows (ceil(total / tiles), rounded up to a
// multiple of 4, the GEMM's row-group granule) fit; 0 when even 4 rows do not fit.
inline uint32_t rows_per_tile(uint32_t total, uint32_t cap, const std::function<bool(uint32_t)>& fits) {
  uint32_t last = 0;
  for (uint32_t t = 1; t <= total; ++t) {
    uint32_t r = std::min(total, (total + t - 1) / t);
    if (r < total) r = std::min(total, (r + 3) / 4 * 4);
    if (cap) r = std::min(r, cap);
    if (r == last) continue;
    last = r;
    if (fits(r)) return r;
    if (r <= 4) break;
  }
  return 0;
}

// kv heads per attention call: 4 (the kernel's most per pass), 2 or 1, the most that fit.
inline uint32_t groups_per_call(uint32_t kv_heads, uint32_t cap, const std::function<bool(uint32_t)>& fits) {
  for (uint32_t g : {4u, 2u, 1u}) {
    const uint32_t gg = std::min({g, kv_heads, cap ? cap : g});
    if (fits(gg)) return gg;
  }
  return 0;
}

// The shape's own rules (both plans): the grid of a tower run, the rows, image rows and
// cache slots of a prefill run.
inline void check_image_shape(const ImageShape& s, const CompileOptions& opt, const sim::Config& cfg,
                              const ImageIo& io) {
  const uint32_t N = uint32_t(s.grid_h * s.grid_w);
  if (!s.vision && !s.prefill) fail("compiler: an image program needs the tower, the prefill or both");
  if (s.vision && (s.grid_h % 2 || s.grid_w % 2 || N == 0))
    fail("compiler: image grid {}x{} must have even sides (2x2 merge windows)", s.grid_h, s.grid_w);
  if (s.vision && N > opt.max_patches) fail("compiler: image of {} patches exceeds max_patches = {}", N, opt.max_patches);
  if (!s.prefill) return;
  const uint32_t S = uint32_t(std::max(0, s.seq_len));
  if (S == 0) fail("compiler: a prefill of {} tokens: give at least 1", s.seq_len);
  if (uint64_t(s.cache_offset) + S > opt.max_seq)
    fail("compiler: a prompt of {} tokens after {} cached tokens exceeds the KV cache's max_seq = {} slots", S,
         s.cache_offset, opt.max_seq);
  if (io.ids_smem + uint64_t(S) * 4 > cfg.smem_bytes)
    fail("compiler: a prompt of {} tokens needs {} bytes of scalar memory for its ids; raise smem_bytes", S,
         io.ids_smem + uint64_t(S) * 4);
  const int ni = s.chunk_image_rows();
  if (ni > 0 && (s.image_start < 0 || uint32_t(s.image_start) + uint32_t(ni) > S))
    fail("compiler: {} image tokens from row {} do not fit a prompt of {} tokens", ni, s.image_start, S);
  if (ni > 0 && (s.image_first < 0 || uint64_t(s.image_first) + uint32_t(ni) > opt.max_patches / 4))
    fail("compiler: image rows [{}, {}) pass the {} image rows the DDR holds (max_patches / 4)", s.image_first,
         s.image_first + ni, opt.max_patches / 4);
}

}  // namespace gpnpu::model::blocks
