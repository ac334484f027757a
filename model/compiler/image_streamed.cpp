// The streamed image plan (Compiler::image_streamed): activations in DDR, row tiles; the
// resident plan and the choice between them are in compiler_image.cpp.
#include "model/compiler/compiler.h"
#include "model/compiler/image_plan.h"

namespace gpnpu::model {

using namespace kernels;
using namespace blocks;
using detail::layer_name;

// ================= the streamed plan =================
// When the resident regions do not fit (small OCM, large images or prompts), the
// residual streams live in DDR (act.vh [N][Dv], act.h [S][H]). Every tower block runs
// in three phases (its attention sees every row):
//   A  per row tile: load the rows (block 0: patch embedding + position, stored), norm,
//      qkv GEMM, rope; store the q|k|v rows to act.vqkv;
//   B  per group of kv heads: q (head-major, one 3-D DMA) and k, v of every row from
//      DDR, attention, the output written back over q (its columns are dead once loaded);
//   C  per row tile: attention rows, proj GEMM, residual, norm, MLP (fc1 on the tile),
//      residual, store.
// A prefill layer runs either the same three phases (A: load the rows, layer 0:
// embedding + splice, stored; norm, qkv GEMM, per-head norms and rope in the q|k|v rows,
// k, v appended to the KV cache, q stored to act.q; B: per group of kv heads q, and k, v
// of every row back from the cache, attention, the output over q; C: attention rows, o
// GEMM, residual, norm, MLP as gate|up chunks and SiLU into [rows][I] and down, residual,
// DeepStack rows, store) or, whole layers a tile (its attention is causal: a tile's rows
// see only the keys up to its own), A, B and C on each tile in turn, the keys and values
// of every row up to the tile's last read back from the cache: q and the attention
// output never leave OCM, but each tile's attention uses rows x G x (kv heads a call)
// PEs and reads the earlier tiles' keys again. The cost model below picks.
// The mergers run per tile of merged rows; the head normalises the last row.
// Tiling rule (plan() below): fixed OCM (vectors, norm/embed scratch, GEMM DMA
// buffers), the rest W shared phase by phase. Each row phase (tower A, C; a prefill
// layer) takes a copy mode
// (CopyMode: every copy waited for; pipelined, the next tile's loads and the last
// tile's stores in flight while a tile runs; stores behind, only the stores in flight)
// and, for it, the fewest tiles whose buffers fit W (rows rounded up to a multiple of
// 4), the pair a cost model of one tile finds fastest (MAC cycles, the weights the tile
// re-streams, its activation copies, overlapped or not; the prefill's keys and values
// read back, waited for). The tower's attention phase (B) runs pipelined over two buffer
// sets when they fit (the next call's q, k, v load while this call computes), kv heads a
// call by the kernel's work (plan_attention_ocm) and the exposed first load and last
// store; the prefill's, the most kv heads (<= 4) whose staging fits beside q|k|v in the
// MLP activation's rows. The mergers: the fewest tiles that fit. GEMM
// DMA channels: all, or 2 when the estimated cycles are fewer (bigger tiles). A
// program with both stages whose tower fits the resident plan alone runs it resident
// and only the prefill streamed (image_program).
namespace {
// How a streamed row phase moves its activations (image_streamed's row_phase): every copy
// waited for (one buffer set); tile t+1's loads and tile t-1's stores in flight while tile t
// runs (the loaded and stored buffers doubled); only the stores in flight, the loads waited
// for at the tile's start (only the stored buffers doubled: more rows a tile).
enum CopyMode : uint32_t { kWaited = 1, kPipelined = 2, kStoresBehind = 3 };
const char* mode_name(uint32_t m) { return m == kPipelined ? "pipelined" : m == kStoresBehind ? "stores behind" : "waited"; }
// A row phase's buffers list first those it stores (and may load), then those it only
// loads, then its single ones: the buffers a copy mode doubles are the first `stored`
// (kStoresBehind) or `copied` (kPipelined), repeated after the list.
size_t doubled(uint32_t mode, size_t stored, size_t copied) {
  return mode == kPipelined ? copied : mode == kStoresBehind ? stored : 0;
}
struct Streamed {
  uint32_t rva = 0, rvc = 0, rm = 0, rpa = 0, rpc = 0, gv = 0, gp = 0;  // rows per tile, kv heads per call
  uint32_t sv = 1, sp = 1;  // buffer sets of the attention phases (2: the next group loads during this one)
  uint32_t sva = 1, svc = 1, spa = 1, spc = 1;  // copy modes of the row phases (kWaited, kPipelined, kStoresBehind)
  // The prefill in whole layers a tile (fused): rows per tile, copy mode, kv heads a call.
  bool fused = false;
  uint32_t rpf = 0, spf = 1, gpf = 0;
  // The prefill's MLP phase over every row at once (instead of C's row tiles): the o GEMM,
  // residual and norm of all rows, gate|up and down in pm_chunk columns with fp32 partial
  // sums, the residual; buffers pmb(part, rows, part tile rows, pg) of its three parts (each starts with the
  // normed rows). Where all rows do not fit, in tiles of rpm rows (each reads every chunk).
  bool pm = false;
  uint32_t rpm = 0;
  // Its down in 2 or 4 column groups over every row (ChunkChain::groups) where one group's LRM
  // sums fit and the whole width's do not (two with a narrower first where two equal ones do
  // not fit beside gate|up); else one.
  ColumnGroups pg = {};
  // Where the partial sums are in LRM, the MLP over every row may run its first and last
  // parts (out GEMM, residual, norm; residual again) in tiles of ppt rows (rpm: untiled), so
  // that only the normed rows and the up output take every row's OCM (1 MiB): each part tile
  // reads the out GEMM's weight again, the chunks read theirs once.
  uint32_t ppt = 0;
  std::function<std::vector<uint64_t>(uint32_t, uint32_t, uint32_t, ColumnGroups)> pmb;  // (part, rows, part tile rows, pg)
  // The same for the tower's MLP phase (C): proj, residual and norm of all rows, fc1 (and
  // GELU) and fc2 in pm_chunk columns; its parts' buffers vpmb(part, rows, part tile rows).
  // Where all rows do not fit, in tiles of vrpm rows (as rpm).
  bool vpm = false;
  uint32_t vrpm = 0, vpt = 0;  // the tower's MLP rows a tile, part tile rows (as rpm, ppt)
  // The mergers' MLP over every merged row in chunks of pm_chunk(Md) fc1 columns (fc1, GELU,
  // fc2 into fp32 partial sums in LRM), where their row tiles would read every weight again:
  // buffers mpmb() (the normed rows, fc2's output over them at the end; a chunk's fc1 output).
  bool mpm = false;
  uint32_t mg_groups = 1;  // their fc2 in this many column groups (ChunkChain::groups)
  std::function<std::vector<uint64_t>()> mpmb;
  std::function<std::vector<uint64_t>(uint32_t, uint32_t, uint32_t)> vpmb;  // (part, rows, part tile rows)
  // The tower's qkv phase (A) over every row from block 1 on, or in tiles of vqt rows (N:
  // every row at once): the norm of the rows, then q, k and v in turn (q and k rotated), each
  // stored while the next computes (vqo = 2 output buffers; 1: each store waited for before
  // the next GEMM); buffers vqab(rows, outputs, vqc). Where every row's outputs do not fit,
  // each of q, k and v in column groups of vqc (whole heads and tiles; 0: whole) over every row,
  // rather than row tiles that read the weights again.
  bool vqa = false;
  uint32_t vqt = 0, vqo = 2, vqc = 0;
  // With vqa over every row, k and v kept in OCM for the attention (blocks >= 1): q into k's
  // buffer and stored, then k and v into their own, which the attention reads in place (row
  // stride Dv); only q goes to DDR and back. Buffers vkvab() (the qkv phase) and vkvb(kv
  // heads, buffer sets) (the attention: k, v, then a set's q and output staging).
  bool vkv = false;
  std::function<std::vector<uint64_t>()> vkvab;
  std::function<std::vector<uint64_t>(uint32_t, uint32_t)> vkvb;
  std::function<std::vector<uint64_t>(uint32_t, uint32_t, uint32_t)> vqab;
  // Or, from block 1 on, its q|k|v by groups of vgq_heads heads, each group's GEMM beside its
  // attention (q, k and v never leave OCM: no qkv phase stores, no attention phase loads):
  // the norm of all rows, then per group its GEMM, rotation and attention into the attention
  // rows, which the MLP phase over every row (vpm) finds where its own are (else they are
  // stored); buffers vqgb().
  bool vqg = false;
  std::function<std::vector<uint64_t>()> vqgb;
  uint32_t channels = 0;  // DMA channels of the GEMMs
  bool two = false;       // one channel: the GEMMs' second buffer reserved (gemm_buffer_bytes)
  bool whole = true;      // the buffers hold the tower's and mergers' whole-width MLP GEMMs (gemm_buffer_bytes)
  bool with_pm = false;   // planned with the prefill's MLP over every row as a candidate (pm)
  double cost = 0;        // estimated cycles of the row phases (row_phase's cost model)
  double weight_bytes = 0;  // the weights' DDR bytes, every pass (its row tiles each read them)
  uint64_t fixed = 0, rVEC = 0, rGEMM = 0, W = 0;
  // Phase buffers (bytes), in allocation order.
  std::function<std::vector<uint64_t>(uint32_t)> mg;
  std::function<std::vector<uint64_t>(uint32_t, uint32_t)> ta, tc, pa, pc, pf;  // (rows, copy mode)
  std::function<std::vector<uint64_t>(uint32_t, uint32_t)> tb, pb;              // (kv heads, buffer sets)
  // The prefill's attention phase reading q where the qkv phase left it (its q|k|v rows, one
  // tile of every row), the output written over it and stored from there: no q store and
  // load. Buffers pbq(kv heads, sets): the q|k|v rows, then per set k and v; with no cached
  // tokens before the prompt (pbq_own) k and v are read in the q|k|v rows too, and a set has none.
  bool pq = false, pbq_own = false;
  // The prefill's qkv phase over every row in column groups (where its row tiles would read the
  // q|k|v weight again): every row normed in place, then the q|k|v GEMM qg columns (whole heads,
  // whole tiles of its packing) a call, each group's heads normed, rotated and stored to act.q
  // (q) or written to the KV cache (a k group with its v group), two output buffers. Buffers
  // pqgb(qg): the rows, cos, sin, two outputs [S][qg].
  bool pqg = false;
  uint32_t qg = 0;
  std::function<std::vector<uint64_t>(uint32_t)> pqgb;
  std::function<std::vector<uint64_t>(uint32_t, uint32_t)> pbq;
  std::vector<uint64_t> hd;
  bool ok = false;
};
uint64_t sum_fp(const std::vector<uint64_t>& v) {
  uint64_t t = 0;
  for (uint64_t s : v) t += detail::OcmAlloc::footprint(s);
  return t;
}
}  // namespace

CompiledProgram Compiler::image_streamed(const ImageShape& s, kernels::Builder* into,
                                         std::vector<KernelCall>* calls) const {
  const Dims d(model_);
  const VisionConfig& vc = model_.vision;
  const TextConfig& tc = model_.text;
  const uint32_t N = s.vision ? uint32_t(s.grid_h * s.grid_w) : 0, S = s.prefill ? uint32_t(s.seq_len) : 0, Nt = N / 4;
  const uint32_t ni = s.prefill ? uint32_t(std::max(0, s.chunk_image_rows())) : 0, i0 = uint32_t(s.image_first),
                 off = s.prefill ? s.cache_offset : 0;  // as in image_program
  const uint32_t cw = gu_chunk(), nchunks = d.I / cw;
  // The tower's part of a program in parts (image_in_parts): no halt, the program not finished.
  const bool part = into && !s.prefill;
  const uint32_t G = d.nq / d.nkv, hdv2 = d.hdv * 2, hd2 = d.hd * 2;
  const uint32_t qd = d.nq * d.hd * 2, kd = d.nkv * d.hd * 2;  // row bytes of q and of k (= v)
  // The prefill's qkv phase, waited, where its four buffers do not fit: the rotary tables
  // (fp32 cos, sin) over the tile's rows once its q|k|v GEMM has read them (at 1 MiB a third
  // fewer weight passes).
  const bool rope_in_rows = d.H * 2 >= d.hd * 8;
  const uint64_t gemv_min = gemv_scratch_bytes(cfg_, 1);
  using V64 = std::vector<uint64_t>;

  const uint32_t cap = opt_.image_tile_rows, gcap = opt_.image_attn_groups;
  // The prefill's attention staging inside a tile's q|k|v / MLP buffer (image_streamed's
  // plan, p.pf), offsets of the keys and values [off + S][g hd] read back from the cache (the
  // attention reads q in the q|k|v rows), at r rows a tile and g kv heads a call; g: the most
  // (<= 4) whose staging fits beside q|k|v in the MLP's rows, else 1.
  auto stage = [&](uint32_t r, uint32_t g) -> std::array<uint64_t, 2> {
    const uint64_t k0 = detail::OcmAlloc::footprint(uint64_t(r) * d.qkv_n * 2),
                   v0 = k0 + detail::OcmAlloc::footprint(uint64_t(off + S) * g * hd2);
    return {k0, v0};
  };
  auto stage_end = [&](uint32_t r, uint32_t g) { return stage(r, g)[1] + uint64_t(off + S) * g * hd2; };
  auto prefill_groups = [&](uint32_t r) {
    const uint32_t g = groups_per_call(d.nkv, gcap, [&](uint32_t g) { return stage_end(r, g) <= uint64_t(r) * (d.I + cw) * 2; });
    return g ? g : std::min(d.nkv, gcap ? gcap : 1u);
  };
  // The MLP phases' partial sums in LRM (lrm_sums): their offset, or 0 (in OCM). Their part 2
  // then holds the up output over part 1's attention rows (and residual: mlp_all_rows waits
  // for its store first).
  auto vsums = [&](uint32_t r) {
    return opt_.image_ocm_sums ? 0u : lrm_sums(gemm_cfg_, r, d.Dv, pm_chunk(d.Iv, 1), pm_chunk(d.Iv, 1), 0, d.Dv, d.Dv);
  };
  auto msums = [&](uint32_t groups = 1) {  // (the mergers': fc1 [c][Md], fc2 [H][c])
    return opt_.image_ocm_sums ? 0u
                               : lrm_sums(gemm_cfg_, Nt, d.H, pm_chunk(d.Md, 1), pm_chunk(d.Md, 1), 0, d.Md, 0, {groups});
  };
  auto psums = [&](uint32_t r, ColumnGroups groups = {}) {
    return opt_.image_ocm_sums ? 0u
                               : lrm_sums(gemm_cfg_, r, d.H, pm_chunk(d.I, 2) * pm_down(), 2 * pm_chunk(d.I, 2),
                                          pm_split(), d.H, d.nq * d.hd, groups);
  };
  // The DDR the column groups' input rows go through (ChunkChain::mid): act.q, free during the
  // tower and, in a prefill layer, read for the last time by the MLP phase's first part.
  auto mid_fits = [&](uint32_t rows, uint32_t inner) {
    return uint64_t(rows) * inner <= uint64_t(opt_.max_seq) * d.nq * d.hd;
  };
  // Where a residual of `bytes` kept in OCM between layers parks in LRM (kernels/park.h) across
  // the next layer's kernels up to its MLP phase, instead of a store (waited for before the
  // q|k|v GEMMs write over the rows) and a load: at the top of LRM, where that leaves the
  // window's GEMMs (n x k, below it) their split and at least the room of the MLP phase's
  // (below `sums`, its LRM partial sums: the window ends before they are written), so the
  // next GEMM's first tile still finds a place beside them (at 32x32, 2 MiB: 1 KiB more than
  // below the sums, where o_proj's tile found none); else 0.
  auto park_at = [&](uint32_t sums, uint32_t bytes, std::initializer_list<std::pair<uint32_t, uint32_t>> gemms) {
    const uint32_t need = lrm_park_bytes(cfg_, bytes);
    const uint32_t top = need < gemm_cfg_.lrm_bytes ? (uint32_t(gemm_cfg_.lrm_bytes) - need) / 64 * 64 : 0u;
    if (!sums || opt_.image_no_park || opt_.fp16_channels || top < sums || top < KernelCalls::kLrmShared)
      return 0u;
    sim::Config below = gemm_cfg_;
    below.lrm_bytes = top;
    try {
      for (auto [n, k] : gemms)
        if (!keeps_tiling(below, gemm_cfg_, n, k)) return 0u;
    } catch (const Error&) {
      return 0u;
    }
    return top;
  };
  auto plan = [&](uint32_t channels, bool pm, bool vq_tiles, bool two, bool whole = true) {
  Streamed p;
  p.channels = channels;
  p.two = two;
  p.whole = whole;
  p.with_pm = pm;
  std::vector<std::pair<uint32_t, uint32_t>> chunk_gemms;  // (the packings in DDR: Streamed::vpm, mpm, vqg)
  if (ddr_.has(vpm_name(0, 0, "fc1"))) chunk_gemms.insert(chunk_gemms.end(), {{pm_chunk(d.Iv, 1), d.Dv}, {d.Dv, pm_chunk(d.Iv, 1)}});
  if (ddr_.has(mpm_name(-1, 0, "fc1"))) chunk_gemms.insert(chunk_gemms.end(), {{pm_chunk(d.Md, 1), d.Md}, {d.H, pm_chunk(d.Md, 1)}});
  if (ddr_.has(vgq_name(1, 0))) chunk_gemms.push_back({3 * vgq_heads(d.hv) * d.hdv, d.Dv});
  p.rGEMM = gemm_buffer_bytes(gemm_cfg_, d, {.vision = N || !in_parts(), .text = S || !in_parts(), .channels = channels,
                                             .two = two, .cw = cw, .cp = pm ? pm_chunk(d.I, 2) : 0, .pairs = pm_down(),
                                             .more = chunk_gemms, .whole = whole});
  p.rVEC = std::max<uint64_t>({d.vision_vec() + d.Dv, d.merger_vec(true), d.merger_vec(false), d.text_vec()}) * 2;
  p.fixed = sum_fp({p.rVEC, norm_scratch_bytes(cfg_), embed_scratch_bytes(d.H, S), p.rGEMM}) +
            f16_footprint(cfg_, opt_.fp16_channels, std::max(N, S));
  p.W = cfg_.ocm_bytes > p.fixed ? cfg_.ocm_bytes - p.fixed : 0;
  // A row phase's buffers in a copy mode (doubled()).
  auto sets_of = [](V64 v, uint32_t mode, size_t stored, size_t copied) {
    const size_t n = doubled(mode, stored, copied);
    v.insert(v.end(), v.begin(), v.begin() + ptrdiff_t(n));
    return v;
  };
  // tower A: qkv [r][3Dv] (stored), x [r][Dv], cos, sin [r][hdv] fp32 (loaded), patches [r][pd]
  p.ta = [&, sets_of](uint32_t r, uint32_t mode) -> V64 {
    return sets_of({uint64_t(r) * 3 * d.Dv * 2, uint64_t(r) * d.Dv * 2, uint64_t(r) * d.hdv * 4,
                    uint64_t(r) * d.hdv * 4, uint64_t(r) * d.pd * 2},
                   mode, 1, 4);
  };
  // tower B: q head-major [g][N][hdv], k, v [N][g hdv], out head-major
  p.tb = [&](uint32_t g, uint32_t sets) -> V64 {
    const uint64_t x = uint64_t(g) * N * hdv2;
    return sets == 2 ? V64{x, x, x, x, x, x, x, x} : V64{x, x, x, x};
  };
  // tower C: residual [r][Dv] (loaded and stored), attention rows / normed rows [r][Dv] (loaded),
  // proj/fc2 out [r][Dv], fc1 [r][Iv]
  p.tc = [&, sets_of](uint32_t r, uint32_t mode) -> V64 {
    return sets_of({uint64_t(r) * d.Dv * 2, uint64_t(r) * d.Dv * 2, uint64_t(r) * d.Dv * 2, uint64_t(r) * d.Iv * 2},
                   mode, 1, 2);
  };
  // merger: rows [r][Md] (4r patches), fc1 [r][Md], fc2 [r][H]; in chunks (mpm): rows [Nt][Md], fc1 [Nt][c]
  p.mg = [&](uint32_t r) -> V64 { return {uint64_t(r) * d.Md * 2, uint64_t(r) * d.Md * 2, uint64_t(r) * d.H * 2}; };
  p.mpmb = [&]() -> V64 { return {uint64_t(Nt) * d.Md * 2, uint64_t(Nt) * pm_chunk(d.Md, 1) * 2}; };
  // prefill A: q|k|v [r][qkv_n] (q stored), rows [r][H], cos, sin (loaded); waited, where
  // those do not fit, cos and sin come in after the q|k|v GEMM over the rows (rope_in_rows).
  p.pa = [&, sets_of, W = p.W](uint32_t r, uint32_t mode) -> V64 {
    const V64 v = sets_of(
        {uint64_t(r) * d.qkv_n * 2, uint64_t(r) * d.H * 2, uint64_t(r) * d.hd * 4, uint64_t(r) * d.hd * 4}, mode, 1, 4);
    if (mode == kWaited && rope_in_rows && sum_fp(v) > W) return {v[0], v[1]};
    return v;
  };
  // prefill B: q head-major [g G][S][hd], k, v [S][g hd], out head-major
  p.pb = [&](uint32_t g, uint32_t sets) -> V64 {
    const uint64_t x = uint64_t(g) * G * S * hd2, y = uint64_t(g) * (off + S) * hd2;
    return sets == 2 ? V64{x, y, y, x, x, y, y, x} : V64{x, y, y, x};
  };
  p.pbq = [&](uint32_t g, uint32_t sets) -> V64 {
    const uint64_t y = uint64_t(g) * (off + S) * hd2;
    V64 v{uint64_t(S) * d.qkv_n * 2};
    for (uint32_t i = 0; i < sets && !p.pbq_own; ++i) v.insert(v.end(), {y, y});
    return v;
  };
  // prefill C: residual [r][H] (loaded and stored), attention rows / normed rows / down out
  // (loaded), o out / MLP activation [r][I + cw] (each gate|up chunk's [r][2 cw] output
  // lands at its own columns c cw, and its SiLU gate overwrites the gate half in place)
  p.pc = [&, sets_of](uint32_t r, uint32_t mode) -> V64 {
    return sets_of({uint64_t(r) * d.H * 2, uint64_t(r) * std::max(d.H * 2, qd),
                    uint64_t(r) * std::max(d.I + cw, d.H) * 2},
                   mode, 1, 2);
  };
  // tower qkv, q, k, v in turn (vqa): normed rows [r][Dv], cos, sin [r][hdv] fp32, `outs` outputs
  // [r][cols] (0: Dv)
  p.vqab = [&](uint32_t r, uint32_t outs, uint32_t cols) -> V64 {
    const uint64_t rows = uint64_t(r) * d.Dv * 2, tab = uint64_t(r) * d.hdv * 4,
                   y = uint64_t(r) * (cols ? cols : d.Dv) * 2;
    return outs == 2 ? V64{rows, tab, tab, y, y} : V64{rows, tab, tab, y};
  };
  p.vkvab = [&]() -> V64 {  // k (q first), v (cos, sin [N][hdv] fp32 first), normed rows
    const uint64_t rows = uint64_t(N) * d.Dv * 2;
    return {rows, std::max<uint64_t>(rows, uint64_t(N) * d.hdv * 8), rows};
  };
  p.vkvb = [&](uint32_t g, uint32_t sets) -> V64 {
    const uint64_t rows = uint64_t(N) * d.Dv * 2, x = uint64_t(g) * N * hdv2;
    return sets == 2 ? V64{rows, rows, x, x, x, x} : V64{rows, rows, x, x};
  };
  // tower q|k|v by head groups (vqg): normed rows [N][Dv], attention rows [N][Dv] (where
  // vpmb(1) has its own), cos, sin [N][hdv] fp32, the group-ordered q|k|v bias [3 Dv], a
  // group's q|k|v [N][3 g hdv], and [g][N][hdv] more (the attention's head-major staging once;
  // left: without it this plan fits 64x64 at 2 MiB, 32 GB/s, estimated 0.5% below the one
  // there and measured 2.3% slower, 65.65 -> 67.13 M cycles)
  p.vqgb = [&]() -> V64 {
    const uint64_t rows = uint64_t(N) * d.Dv * 2, w2 = uint64_t(vgq_heads(d.hv)) * hdv2, tab = uint64_t(N) * d.hdv * 4;
    return {rows, rows, tab, tab, uint64_t(d.Dv) * 6, N * 3 * w2, N * w2};
  };
  // tower MLP over every row (vpm), r rows a tile, its first and last parts in tiles of pt
  // rows: 1: normed rows / proj out [r][Dv], attention rows [pt][Dv], residual [pt][Dv] (in
  // tiles: over the attention rows, mlp_all_rows); 2: normed rows, partial sums [r][Dv] fp32
  // (over part 1's attention rows and residual; none in LRM: vsums), fc1 out [r][c]; 3: fc2
  // out (in the normed rows), residual [pt][Dv] (reloaded; unused where the residual seeds LRM
  // sums).
  p.vpmb = [&](uint32_t part, uint32_t r, uint32_t pt) -> V64 {
    const uint64_t rows = uint64_t(r) * d.Dv * 2, tile = uint64_t(pt) * d.Dv * 2;
    if (part == 1) return pt < r ? V64{rows, tile} : V64{rows, tile, tile};  // (tiles: the residual over A)
    const uint64_t up = uint64_t(r) * 2 * pm_chunk(d.Iv, 1);
    if (part == 2) return {rows, vsums(r) ? 0 : 2 * rows, up};
    return {rows, tile};
  };
  // prefill MLP over every row (pm), r rows a tile: 1: normed rows / o out [r][H], attention
  // rows [r][q], residual [r][H]; 2: normed rows, partial sums [r][H] fp32 (as vpmb's; LRM:
  // psums), gate|up [r][2 c];
  // 3: down out (in the normed rows; a tile's DeepStack rows over its own, dead after the
  // residual add), residual [pt][H] (where the residual seeds LRM sums: down out is the new
  // residual, the DeepStack rows go in this tile buffer).
  p.pmb = [&](uint32_t part, uint32_t r, uint32_t pt, ColumnGroups groups) -> V64 {
    const uint64_t rows = uint64_t(r) * d.H * 2, tile = uint64_t(pt) * d.H * 2;
    if (part == 1)  // (tiles: the residual over the attention rows)
      return pt < r ? V64{rows, std::max<uint64_t>(uint64_t(pt) * qd, tile)} : V64{rows, uint64_t(pt) * qd, tile};
    const uint64_t up = uint64_t(r) * up_row(true, pm_down(), pm_gate_up_fused()) * pm_chunk(d.I, 2);
    if (part == 2) return {rows, psums(r, groups) ? 0 : 2 * rows, up};
    return {rows, tile};
  };
  // prefill, whole layers a tile (fused): residual [r][H]
  // (loaded and stored), cos, sin [r][hd] fp32 (loaded), normed rows / attention output /
  // down out [r][max(H, q)], and BIG: q|k|v [r][qkv_n] with, beyond it, the attention's
  // staging (q head-major [g G][r][hd], keys and values [off + S][g hd] of g kv heads a
  // call), later o out / MLP activation (as in C).
  p.pf = [&, sets_of](uint32_t r, uint32_t mode) -> V64 {
    return sets_of({uint64_t(r) * d.H * 2, uint64_t(r) * d.hd * 4, uint64_t(r) * d.hd * 4,
                    uint64_t(r) * std::max(d.H * 2, qd),
                    std::max(uint64_t(r) * std::max(d.I + cw, d.H) * 2, stage_end(r, prefill_groups(r)))},
                   mode, 1, 3);
  };
  // head: the last row, logits, GEMV buffers (the rest)
  p.hd = {uint64_t(d.H) * 2, uint64_t(d.V) * 2, gemv_min};
  auto fits = [&](const V64& v) { return sum_fp(v) <= p.W; };
  // (a run without the tower or the prefill has no such tiles: 1 row, never used)
  // A row phase's rows per tile and copy mode, by a cost model of one tile of r rows (MAC
  // cycles m, with kCallCycles for each of its `calls` GEMM calls, weight DDR cycles w, load
  // and store DDR cycles l and s): waited, max(m, w) + l + s; pipelined, max(m, w + l + s)
  // (one tile's copies exposed); stores behind, max(m, w + s) + l (one tile's stores
  // exposed); each on the most rows its buffers leave.
  const double peak = gemm_cfg_.mac_peak(true), bw = cfg_.ddr_bytes_per_cycle();  // (the row phases are GEMMs)
  auto wb = [&](uint32_t n, uint32_t k) { return double(gemm_weight_bytes(cfg_, n, k)); };
  auto pe_macs = [&](uint32_t n, uint32_t k, uint32_t split = 0) { return row_macs(gemm_cfg_, n, k, split); };
  auto row_phase = [&](uint32_t total, const std::function<V64(uint32_t, uint32_t)>& sizes, double macs_row,
                       double wbytes, double calls, double load_row, double store_row, uint32_t& mode,
                       double times, double waited_tile = 0) {
    mode = kWaited;
    if (!total) return 1u;  // a run without the tower or the prefill: no such tiles
    double best = 0;
    uint32_t best_r = 0;
    std::vector<std::tuple<double, uint32_t, uint32_t>> options;  // (cost, rows, mode)
    for (uint32_t md : {kWaited, kPipelined, kStoresBehind}) {
      if (opt_.image_copy_mode && md != opt_.image_copy_mode) continue;
      const uint32_t r = rows_per_tile(total, cap, [&](uint32_t r) { return fits(sizes(r, md)); });
      if (!r) continue;
      const double tiles = std::ceil(double(total) / r), m = r * macs_row / peak + calls * kCallCycles, w = wbytes / bw,
                   l = r * load_row / bw, st = r * store_row / bw;
      double keys = 0;  // read back (waited_tile bytes each): up to each tile's last row, but the first's
      if (waited_tile)
        for (auto [r0, rows] : tiles_of(total, r))
          if (off + r0) keys += off + r0 + rows;
      const double c = (md == kWaited       ? tiles * (std::max(m, w) + l + st)
                        : md == kPipelined ? tiles * std::max(m, w + l + st) + l + st
                                           : tiles * (std::max(m, w + st) + l) + st) +
                       waited_tile * keys / bw;
      if (!best_r || c < best) best = c, best_r = r, mode = md;
      options.emplace_back(c, r, md);
    }
    // Fewer weight passes (more rows a tile) unless 5% or more above the least estimate.
    for (auto [c, r, md] : options)
      if (r > best_r && c < kFewerBytes * best) best = c, best_r = r, mode = md;
    p.cost += best * times;
    return best_r;
  };
  // Measured at qc-u: the prefill's GEMMs (K = 2048 and 6144) run 6.5% slower on 2 DMA
  // channels than on 4; the tower's (K = 1024 and 4096) as fast.
  const double slow = channels < 4 && channels < uint32_t(cfg_.dma_channels) ? 1.065 : 1.0;
  const double depth = vc.depth, layers = tc.num_hidden_layers;
  // One chunk of an MLP over every row (pm, vpm; KernelCalls::chunk_chain) on r rows: its up
  // GEMM ([r][w] -> [r][u], at split up_split) and its down GEMM's chunk ([r][c] -> [r][w]),
  // each call's weights streaming in during the call before it (gemm_handoff): up's MACs
  // beside down's weights, then down's MACs beside the next up's weights. (Where the calls are
  // one tile each, as on 2,048 PEs or more, a chunk takes that, not max(MACs, weights): 32x64,
  // 64 rows at 128 GB/s: 34 K cycles measured a chunk, 31 K this, 25 K the max.) A narrow
  // tile's idle PEs count.
  // (pairs: a down call over K = pairs c every pairs chunks, ChunkChain::pairs; each call's
  // weight streams in during the call before; per chunk.)
  auto chunk_est = [&](uint32_t r, uint32_t w, uint32_t c, uint32_t u, double sl, uint32_t up_split,
                       uint32_t pairs = 1) {
    const double m_up = sl * r * pe_macs(u, w, up_split) / peak, m_dn = sl * r * pe_macs(w, pairs * c) / peak;
    return ((pairs - 1) * std::max(m_up, wb(u, w) / bw) + std::max(m_up, wb(w, pairs * c) / bw) +
            std::max(m_dn, wb(u, w) / bw)) / pairs;
  };
  const double before_va = p.cost;
  p.rva = row_phase(N, p.ta, pe_macs(3 * d.Dv, d.Dv), wb(3 * d.Dv, d.Dv), 1, 2.0 * d.Dv + 8.0 * d.hdv, 6.0 * d.Dv,
                    p.sva, depth);
  // The tower's qkv phase q, k, v in turn (block 0 keeps the row tiles: it makes its rows from
  // the patches), over every row or in the fewest tiles that fit (two output buffers, else
  // one), when it is cheaper: per tile MACs or the weights, its loads waited for, the last
  // store (one buffer: every store). At 1 MiB two tiles of 128 rows where q|k|v [r][3 Dv]
  // took four of 64.
  // (The test knobs image_qkv_rows and image_qkv_buffers force it.)
  const uint32_t qknob = opt_.image_qkv_rows;
  if (N && p.rva && ddr_.has(vpm_name(0, 0, "qkv")) && !cap)
    for (uint32_t outs : {2u, 1u}) {
      if (opt_.image_qkv_buffers && outs != opt_.image_qkv_buffers) continue;
      // (every row in column groups through two buffers rather than whole through one, whose
      // waited stores the estimate undercounts: 16x16 at 1.5 MiB, 16 GB/s, 321.88 -> 318.92 M)
      if (outs == 1 && p.vqa && p.vqc) continue;
      uint32_t t = rows_per_tile(N, qknob, [&](uint32_t r) { return fits(p.vqab(r, outs, 0)); }), cols = 0;
      // (every row in column groups where row tiles would read the weights again: two outputs)
      if (t < N && (!qknob || qknob >= N) && outs == 2) {
        const uint32_t T = plan_gemm(gemm_cfg_, 0, d.Dv, d.Dv, ddr_.at(vpm_name(0, 0, "qkv")).split).cols;
        for (uint32_t c = d.Dv / 2; c >= T && c >= d.hdv && !cols; c /= 2)
          if (c % T == 0 && c % d.hdv == 0 && d.Dv % c == 0 && fits(p.vqab(N, outs, c))) cols = c, t = N;
      }
      if (!t || (t < N && !vq_tiles && !qknob)) continue;
      const double tiles = std::ceil(double(N) / t), calls = 3.0 * (cols ? d.Dv / cols : 1);
      // (one buffer: q's and k's stores waited for, their DDR time beside the next GEMM's
      // weights, under its MACs where they are more: 1 MiB, 64 GB/s, 0.10% measured, not 0.8%)
      const double stores = outs == 1 ? t * 4.0 * d.Dv : 0.0;
      const double vqa_c = depth * (tiles * std::max(t * 3.0 * pe_macs(d.Dv, d.Dv) / peak + calls * kCallCycles,
                                                     (wb(3 * d.Dv, d.Dv) + stores) / bw) +
                                    N * (4.0 * d.Dv + 8.0 * d.hdv) / bw);
      const double margin = t > (p.vqa ? p.vqt : p.rva) ? kFewerBytes : 1.0;  // (fewer weight passes)
      if (qknob || vqa_c < margin * (p.cost - before_va))
        p.vqa = true, p.vqt = t, p.vqo = outs, p.vqc = cols, p.cost = before_va + vqa_c;
      if (qknob) break;
    }
  const double a_phase = p.cost - before_va;
  const double before_vc = p.cost, macs_vc = pe_macs(d.Dv, d.Dv) + pe_macs(d.Iv, d.Dv) + pe_macs(d.Dv, d.Iv),
               wb_vc = wb(d.Dv, d.Dv) + wb(d.Iv, d.Dv) + wb(d.Dv, d.Iv);
  p.rvc = row_phase(N, p.tc, macs_vc, wb_vc, 3, 4.0 * d.Dv, 2.0 * d.Dv, p.svc, depth);
  // The tower's MLP phase over every row when it is cheaper (as the prefill's below).
  // With LRM sums, the first and last parts in tiles of vpt rows where all rows do not fit
  // (each reading the proj weight again); else in the fewest tiles of vrpm rows whose parts
  // fit (each reading every chunk: at 1 MiB two tiles of 128 rows where the row tiles of the
  // phase took five of 52 or four of 64).
  p.vrpm = p.vpt = N;
  const uint32_t knob = opt_.image_part_rows;
  const bool vchunks = N && ddr_.has(vpm_name(0, 0, "fc1")) && !cap;
  auto vparts_fit = [&](uint32_t r, uint32_t pt) {
    return fits(p.vpmb(1, r, pt)) && fits(p.vpmb(2, r, pt)) && fits(p.vpmb(3, r, pt));
  };
  if (vchunks && (!fits(p.vpmb(1, N, N)) || knob) && vsums(N) && fits(p.vpmb(2, N, 1)))
    p.vpt = rows_per_tile(N, knob, [&](uint32_t t) { return fits(p.vpmb(1, N, t)) && fits(p.vpmb(3, N, t)); });
  if (vchunks && !knob && !(p.vpt && vparts_fit(N, p.vpt)))
    p.vrpm = p.vpt = rows_per_tile(N, 0, [&](uint32_t r) { return vparts_fit(r, r); });
  if (vchunks && p.vpt && !opt_.image_tower_mlp_tiles && vparts_fit(p.vrpm, p.vpt)) {
    const uint32_t cv = pm_chunk(d.Iv, 1);
    sim::Config gc = gemm_cfg_;
    gc.dma_channels = int(channels);
    double vpm_c = 0;
    for (auto [r0, r] : tiles_of(N, p.vrpm)) {
      const GemmPlan fp = plan_gemm(gc, r, d.Dv, cv);
      const double port = (vsums(r) ? 0.0 : double(r) * 8 * gc.npe() / cfg_.ocm_port_bytes) + fp.groups * 200.0;
      const double proj_again = double((r + p.vpt - 1) / p.vpt - 1) * wb(d.Dv, d.Dv);
      vpm_c += depth * (std::max(r * pe_macs(d.Dv, d.Dv) / peak, wb(d.Dv, d.Dv) / bw) +
                        chunk_est(r, d.Dv, cv, cv, 1.0, 0) * (d.Iv / cv) + proj_again / bw +
                        (vsums(r) ? 6.0 : 8.0) * r * d.Dv / bw + double(d.Iv / cv) * fp.tiles * port);
    }
    if (!p.rvc || vpm_c < kFewerBytes * (p.cost - before_vc) || (knob && p.vpt < N))
      p.vpm = true, p.cost = before_vc + vpm_c;
  }
  p.rm = Nt ? rows_per_tile(Nt, cap ? std::max(1u, cap / 4) : 0, [&](uint32_t r) { return fits(p.mg(r)); }) : 1;
  // (the mergers in chunks where their row tiles would read the weights again: always fewer bytes,
  // the same MACs; the test knob image_merger_chunks forces them)
  // Where their sums of every merged row do not fit the LRM, fc2's columns in 2 or 4 groups
  // (ChunkChain::groups: the fc1 rows through DDR once more, a group's weights once).
  p.mpm = Nt && (p.rm < Nt || opt_.image_merger_chunks || !whole) && ddr_.has(mpm_name(-1, 0, "fc1")) && !cap &&
          fits(p.mpmb());
  if (p.mpm && (!msums() || opt_.image_down_groups)) {  // (the knob: also where one group fits)
    p.mg_groups = 0;
    for (uint32_t g = 2; g <= 4 && !p.mg_groups && mid_fits(Nt, d.Md); g *= 2)
      if (msums(g) && (!opt_.image_down_groups || g == opt_.image_down_groups)) p.mg_groups = g;
    p.mpm = p.mg_groups > 0;
    if (!p.mpm) p.mg_groups = 1;
  }
  // Attention phases: two buffer sets (the next group's q, k, v load while this group
  // computes, its output stores while the next computes) when they fit (and one set of more
  // heads does not cost less, below), else one.
  // Pipelined, the kv heads a call takes (1, 2 or 4) by a cost model: the calls' cycles
  // (attention_estimate) plus the first load and the last store, which are not overlapped.
  // More heads a call pay when their passes hold more rows x heads (N = 1200: 2 heads of 512
  // rows a pass, 1.5 passes a head instead of 2).
  auto attn_cycles = [&](uint32_t heads, uint32_t g, uint32_t g_size, uint32_t rows, uint32_t hd, uint32_t kv_rows) {
    OcmAttnArgs at;
    at.q_heads = g * g_size;
    at.kv_heads = g;
    at.head_dim = hd;
    at.seq = rows;
    at.causal = kv_rows != rows;  // the prefill (kv_rows = off + rows before them)
    at.kv_offset = kv_rows - rows;
    return std::ceil(double(heads) / g) * attention_estimate(cfg_, at);
  };
  // The bytes of a call's q, k, v loads and output stores over the DDR (cycles).
  auto io = [&](uint32_t g, uint32_t g_size, uint32_t rows, uint32_t hd, uint32_t kv_rows) {
    return double(g) * hd * 2 * (2.0 * g_size * rows + 2.0 * kv_rows) / bw;
  };
  auto attn_groups = [&](uint32_t heads, uint32_t g_size, uint32_t rows, uint32_t hd, uint32_t kv_rows,
                         const std::function<V64(uint32_t, uint32_t)>& sizes, uint32_t& sets) {
    if (!rows) return sets = 1;  // a run without the tower or the prefill: no such calls
    for (sets = 2; sets >= 1; --sets) {
      if (sets == 1 || gcap) {
        if (uint32_t g = groups_per_call(heads, gcap, [&](uint32_t g) { return fits(sizes(g, sets)); })) return g;
        continue;
      }
      uint32_t best = 0;
      double best_c = 0;
      for (uint32_t g : {1u, 2u, 4u}) {
        if (g > heads || !fits(sizes(g, 2))) continue;
        const double c = attn_cycles(heads, g, g_size, rows, hd, kv_rows) + io(g, g_size, rows, hd, kv_rows);
        if (!best || c < best_c * 0.99) best = g, best_c = c;
      }
      if (!best) continue;
      // One set of more heads a call where that is cheaper: its loads and stores wait, but its
      // calls are fewer where a call of two sets' heads leaves PEs idle (64x64 at 2 MiB, 128 GB/s:
      // the prefill's 8 kv heads in 4 calls of 2, each a pass on 512 of the 4,096 PEs). Only in
      // the program emitted: the plans the views are settled by keep two sets (weighed there too,
      // the lower estimate of 64 rows kept 64x64 at 2 MiB, 112 GB/s from the 48 rows whose
      // prefill runs 13% faster: 31.47 -> 36.17 M cycles).
      const uint32_t one =
          s.plan_only ? 0 : groups_per_call(heads, 0, [&](uint32_t g) { return fits(sizes(g, 1)); });
      if (one > best && attn_cycles(heads, one, g_size, rows, hd, kv_rows) +
                                std::ceil(double(heads) / one) * io(one, g_size, rows, hd, kv_rows) <
                            0.99 * best_c) {
        sets = 1;
        return one;
      }
      return best;
    }
    sets = 1;
    return 0u;
  };
  p.gv = attn_groups(d.hv, 1, N, d.hdv, N, p.tb, p.sv);
  // The tower's q|k|v by head groups beside the attention (vqg) when it is cheaper than what
  // it replaces in blocks >= 1, the qkv phase and the attention phase (its calls or its q, k,
  // v loads and output stores, pipelined): per group its GEMM (MACs at the PEs its columns
  // keep busy, or its weights at the DDR rate), per block the rows and rotary tables in and
  // the attention of every head, not overlapped. (p.cost leaves the attention phases out:
  // the difference goes in.)
  if (N && p.rva && p.gv && ddr_.has(vgq_name(1, 0)) && !cap && !qknob && fits(p.vqgb())) {
    const uint32_t gq = vgq_heads(d.hv), n = 3 * gq * d.hdv;
    const GemmPlan gp = plan_gemm(gemm_cfg_, N, n, d.Dv);
    const double use = double(n) / (double(gp.tiles) * gp.cols);
    // Where k and v would stay for the attention (p.vkv below), its phase loads q and stores its
    // output only; where q and the output would also go through LRM (vqpark below, with the MLP
    // phase over every row), the qkv phase stores no q and the attention phase moves nothing
    // through DDR. (Counted as p.vqa's q store and that phase's q, k, v loads, the path vqg
    // replaced was estimated at 224 K cycles a block on 64x64 at 3 MiB, 32 GB/s and measured 139 K,
    // against vqg's 202 K estimated and 201 K measured: the tower ran 17.09 M cycles, 15.41 M now.)
    const bool vkv = p.vqa && p.vqt == N && !opt_.image_qkv_buffers && fits(p.vkvab()) && fits(p.vkvb(p.gv, p.sv));
    const bool parked = vkv && p.vpm && p.vpt == N && !opt_.image_no_park && !opt_.fp16_channels && hdv2 % kLrmChunk == 0;
    const double b_phase = std::max(attn_cycles(d.hv, p.gv, 1, N, d.hdv, N),
                                    N * (parked ? 0.0 : vkv ? 4.0 : 8.0) * d.Dv / bw);
    const double a_kept = a_phase - (parked ? depth * N * 2.0 * d.Dv / bw : 0.0);
    const double vqg_c =
        (depth - 1) * (double(d.hv / gq) * std::max(N * double(n) * d.Dv / (peak * use), wb(n, d.Dv) / bw) +
                       attn_cycles(d.hv, gq, 1, N, d.hdv, N) + N * (2.0 * d.Dv + 8.0 * d.hdv) / bw);
    const double replaced = a_kept * (depth - 1) / depth + (depth - 1) * b_phase;
    if (vqg_c < replaced) p.vqg = true, p.vqa = false, p.cost += vqg_c - replaced;
  }
  // k and v kept for the attention where they fit (fewer bytes, the same MACs; the test knob
  // image_qkv_buffers keeps them going through DDR).
  p.vkv = p.vqa && p.vqt == N && p.gv && !opt_.image_qkv_buffers && fits(p.vkvab()) && fits(p.vkvb(p.gv, p.sv));
  // Where q and the attention's output go through LRM slots (vkv with its MLP phase over every
  // row: the tower's vqpark), a call's q and output move through the array port, not by DMA: a
  // second buffer set overlaps nothing, and one set of more heads a call (the attention's
  // estimate 1% lower) fills more of the array (32x64: 8 heads of 256 rows on its 2,048 PEs in
  // one call, not two calls of 4 on half of them: 14.5 K cycles for 19.8 K).
  if (p.vkv && p.vpm && p.vpt == N && !opt_.image_no_park && !gcap)
    for (uint32_t g = 2 * p.gv; g <= d.hv && uint64_t(N) * g <= cfg_.npe(); g *= 2)
      if (d.hv % g == 0 && fits(p.vkvb(g, 1)) &&
          attn_cycles(d.hv, g, 1, N, d.hdv, N) < 0.99 * attn_cycles(d.hv, p.gv, 1, N, d.hdv, N))
        p.gv = g, p.sv = 1;
  // The prefill in three phases or in whole layers a tile, the cheaper by the cost model:
  // the row phases (above) plus the attention, in phases the larger of its calls' work
  // and its copies (q, k, v in, the output out; pipelined), a tile at a time its calls
  // (rows x G x g PEs a pass, the keys up to the tile's last). (The prefill's KV-cache
  // write, waited for in every mode, is counted with the loads; a fused tile reads the
  // keys and values of every row up to its last back, waited for: 2 kd bytes a key.)
  const double macs_a = slow * d.qkv_n * d.H, macs_c = slow * d.H * (d.nq * d.hd + 3.0 * d.I);
  const double wb_a = wb(d.qkv_n, d.H), wb_c = wb(d.H, d.nq * d.hd) + wb(2 * cw, d.H) * nchunks + wb(d.H, d.I);
  const double before = p.cost;
  p.rpa = row_phase(S, p.pa, macs_a, wb_a, 1, d.H * 2.0 + 2.0 * kd + d.hd * 8.0, double(qd), p.spa, layers);
  // Or over every row in column groups (Streamed::pqg) where that reads the weight fewer times
  // and costs at most kFewerBytes more: the widest group (whole heads and tiles, dividing k's
  // columns) whose buffers fit; per layer the calls' MACs or the weight and the q, k, v stores,
  // the rows and tables in, waited.
  p.pqgb = [&](uint32_t qg) -> V64 {
    const uint64_t tab = uint64_t(S) * d.hd * 4, y = uint64_t(S) * qg * 2;
    return {uint64_t(S) * d.H * 2, tab, tab, y, y};
  };
  // (not in mixed precision: a GEMM's fp16 correction is its whole weight's, not a group's)
  if (S && p.rpa && (p.rpa < S || opt_.image_qkv_groups) && !cap && !opt_.image_copy_mode && !opt_.fp16_channels &&
      d.qkv_n == d.nq * d.hd + 2 * d.nkv * d.hd) {
    const uint32_t T = plan_gemm(gemm_cfg_, 0, d.qkv_n, d.H, ddr_.at(layer_name(0, "qkv.gemm")).split).cols;
    const uint32_t kcols = d.nkv * d.hd;
    for (uint32_t qg = kcols; qg >= d.hd; qg /= 2) {
      if (qg % T || qg % d.hd || kcols % qg || (d.nq * d.hd) % qg || !fits(p.pqgb(qg))) continue;
      const double calls = double(d.qkv_n / qg);
      const double c = layers * (std::max(S * macs_a / peak + calls * kCallCycles, (wb_a + S * (qd + 2.0 * kd)) / bw) +
                                 S * (d.H * 2.0 + d.hd * 8.0) / bw);
      if (c < kFewerBytes * (p.cost - before) || opt_.image_qkv_groups) p.pqg = true, p.qg = qg, p.cost = before + c;
      break;
    }
  }
  const double before_c = p.cost;
  p.rpc = row_phase(S, p.pc, macs_c, wb_c, 2.0 + nchunks, double(qd) + 2.0 * d.H, 2.0 * d.H, p.spc, layers);
  // The MLP over every row, where its packing is in DDR, no knob caps the rows and its parts
  // fit (else in the fewest tiles whose parts fit, each reading every chunk): per tile MACs or
  // weights once, its copies waited for (the attention rows and the residual in, the
  // residual reloaded and stored; its first store overlaps the first gate|up; with LRM sums
  // the residual seeds them: in and stored once), and the
  // partial sums through the OCM port (a scatter and a gather of npe words per row, tile and
  // chunk; none in LRM), ~200 cycles a row group's epilogue.
  // With LRM sums, also every row at once with the first and last parts in tiles (ppt),
  // each reading the o weight again (not under the MLP's MACs: a tile's o GEMM of few rows
  // waits on its weight): the cheaper estimate of the two.
  if (pm) {
    p.rpm = S ? rows_per_tile(S, 0, [&](uint32_t r) {
      return fits(p.pmb(1, r, r, {})) && fits(p.pmb(2, r, r, {})) && fits(p.pmb(3, r, r, {}));
    }) : 0;
    p.ppt = p.rpm;
    const uint32_t cp = pm_chunk(d.I, 2);
    sim::Config gc = gemm_cfg_;
    gc.dma_channels = int(channels);
    // (groups: the down in column groups, its input rows stored once and read back by every
    // group after the first but for the first group's last chunk, kept for the second group (with
    // two groups not stored), beside the chunks' weights; those groups' residual columns stored
    // and loaded, waited for)
    auto estimate = [&](uint32_t rows, uint32_t pt, ColumnGroups groups = {}) {
      double c = 0;
      for (auto [r0, r] : tiles_of(S, std::max(rows, 1u))) {
        const GemmPlan dp = plan_gemm(gc, r, d.H, cp);
        const bool lrm = psums(r, groups);
        const double port = (lrm ? 0.0 : double(r) * 8 * gc.npe() / cfg_.ocm_port_bytes) + dp.groups * 200.0;
        const double o_again = double((r + pt - 1) / pt - 1) * wb(d.H, d.nq * d.hd);
        double chunks = chunk_est(r, d.H, cp, 2 * cp, slow, pm_split(), pm_down()) * (d.I / cp);
        if (groups.count > 1)
          chunks = std::max(chunks, ((wb(2 * cp, d.H) + wb(d.H, cp)) * (d.I / cp) +
                                     2.0 * r * (double(d.I) * groups.count - cp * (groups.count == 2 ? 2 : 1))) / bw);
        c += layers * (std::max(r * slow * d.H * d.nq * d.hd / peak, wb(d.H, d.nq * d.hd) / bw) + chunks +
                       o_again / bw +
                       r * (double(qd) + (lrm ? 4.0 : 6.0) * d.H + 4.0 * (d.H - groups.cols(d.H, 0))) / bw +
                       double(d.I / cp) * dp.tiles * port);
      }
      return c;
    };
    double pm_c = p.rpm ? estimate(p.rpm, p.rpm) : 0.0;  // (no rows fit: none)
    if (S && (p.rpm < S || knob) && psums(S) && fits(p.pmb(2, S, 1, {}))) {
      const uint32_t pt =
          rows_per_tile(S, knob, [&](uint32_t t) { return fits(p.pmb(1, S, t, {})) && fits(p.pmb(3, S, t, {})); });
      if (pt && (!p.rpm || knob || estimate(S, pt) < kFewerBytes * pm_c)) p.rpm = S, p.ppt = pt, pm_c = estimate(S, pt);
    }
    // Every row at once with the down in column groups, the first whose sums fit the LRM beside
    // the GEMMs' buffers of: two, two with a narrower first group (whole tiles, the widest),
    // four; where the whole width's sums do not fit (16x16 at 1 MiB: two tiles of 64 rows read
    // every MLP weight twice); a down call a chunk.
    const uint32_t gknob = opt_.image_down_groups;
    std::vector<ColumnGroups> gcands;
    if (S && (gknob || (p.rpm < S && !knob && !psums(S))) && mid_fits(S, d.I) && pm_down() == 1) {
      const uint32_t tile = plan_gemm(gemm_cfg_, 0, d.H, cp).cols;
      gcands.push_back({2});
      for (uint32_t f = (d.H / 2 - 1) / tile * tile; f >= tile; f -= tile) gcands.push_back({2, f});
      gcands.push_back({4});
    }
    for (const ColumnGroups& g : gcands) {
      if ((gknob && g.count != gknob) || (opt_.image_down_first && g.first != opt_.image_down_first) ||
          !psums(S, g))
        continue;
      const uint32_t pt = fits(p.pmb(2, S, 1, g)) ? rows_per_tile(S, 0, [&](uint32_t t) {
        return fits(p.pmb(1, S, t, g)) && fits(p.pmb(3, S, t, g));
      }) : 0;
      if (pt && (!p.rpm || gknob || estimate(S, pt, g) < kFewerBytes * pm_c))
        p.rpm = S, p.ppt = pt, p.pg = g, pm_c = estimate(S, pt, g);
      break;
    }
    if (p.rpm) p.pm = true, p.cost = before_c + pm_c;
  }
  if (pm && !p.pm) p.rpc = 0;  // (a plan without the whole-width down's buffers)
  p.gp = attn_groups(d.nkv, G, S, d.hd, off + S, p.pb, p.sp);
  const uint32_t unkept_gp = p.gp;
  // q kept in the q|k|v rows (pq) where the qkv phase takes every row in one tile and the
  // attention's buffers fit beyond them, when the cost model says so: the q store (waited)
  // and its loads back go, the calls may take fewer kv heads.
  // (own: the keys and values read in the q|k|v rows, none from the cache)
  auto attn_phase_c = [&](uint32_t g, bool q_kept, bool own = false) {
    return std::max(attn_cycles(d.nkv, g, G, S, d.hd, off + S),
                    ((q_kept ? 1.0 : 2.0) * S * qd + (own ? 0.0 : 2.0 * (off + S) * kd)) / bw);
  };
  if (S && p.rpa == S && !gcap && !p.pqg) {
    // With no cached tokens: one set (nothing to load beside a call) of as many kv heads as fit,
    // or all of them in one call where their staging fits and the calls' estimate is lower (the
    // attention then takes up to 8 kv groups a pass: 32x64, 2 MiB, 64 GB/s, one call of eight
    // for two of four, 44.83 -> 44.63 M cycles).
    p.pbq_own = off == 0;
    uint32_t sets = 1;
    uint32_t g = p.pbq_own ? groups_per_call(d.nkv, gcap, [&](uint32_t g) { return fits(p.pbq(g, 1)); })
                           : attn_groups(d.nkv, G, S, d.hd, off + S, p.pbq, sets);
    if (p.pbq_own && g && g < d.nkv && fits(p.pbq(d.nkv, 1)) &&
        attn_cycles(d.nkv, d.nkv, G, S, d.hd, off + S) < 0.99 * attn_cycles(d.nkv, g, G, S, d.hd, off + S))
      g = d.nkv;
    if (g && (!p.gp || attn_phase_c(g, true, p.pbq_own) < attn_phase_c(p.gp, false) + S * double(qd) / bw))
      p.pq = true, p.gp = g, p.sp = sets;
  }
  const bool phased_ok = p.rpa && (p.rpc || p.pm) && p.gp && opt_.image_prefill != 2;
  double phased = p.cost - before;
  // (pq's saving does not enter the choice between phases and whole layers: at 16x16, 2 MiB,
  // 16 GB/s it made the phases estimated cheaper, measured 195.06 -> 199.11 M cycles)
  if (S && p.gp) phased += layers * attn_phase_c(unkept_gp ? unkept_gp : p.gp, !unkept_gp);
  p.cost = before;
  p.rpf = row_phase(S, p.pf, macs_a + macs_c, wb_a + wb_c, 3.0 + nchunks, d.H * 2.0 + 2.0 * kd + d.hd * 8.0,
                    2.0 * d.H, p.spf, layers, 2.0 * kd);
  const bool fused_ok = p.rpf && opt_.image_prefill != 1 && !pm;
  double fused = p.cost - before;
  if (S && p.rpf) {
    p.gpf = prefill_groups(p.rpf);
    for (auto [r0, rows] : tiles_of(S, p.rpf)) fused += layers * attn_cycles(d.nkv, p.gpf, G, rows, d.hd, off + r0 + rows);
  }
  p.fused = fused_ok && (!phased_ok || fused < phased);
  p.cost = before + (p.fused ? fused : phased);
  p.ok = p.rva && (p.rvc || p.vpm) && p.rm && p.gv && (phased_ok || fused_ok) && fits(p.hd) &&
         (whole || ((p.vpm || !N) && (p.mpm || !Nt)));
  // (the mergers: their weight passes, at the DDR rate)
  const double mergers = double(vc.deepstack_visual_indexes.size() + 1);
  if (p.ok && Nt)
    p.cost += (p.mpm ? 1.0 : std::ceil(double(Nt) / p.rm)) * (wb(d.Md, d.Md) + wb(d.H, d.Md)) * mergers / bw;
  if (p.ok) {
    auto passes = [](uint32_t rows, uint32_t per_tile) { return rows ? std::ceil(double(rows) / per_tile) : 0.0; };
    const double wb_mlp = wb(d.Iv, d.Dv) + wb(d.Dv, d.Iv), wb_pm = wb_c - wb(d.H, d.nq * d.hd);
    p.weight_bytes =
        depth * (wb(3 * d.Dv, d.Dv) * (p.vqg ? 1.0 : p.vqa ? passes(N, p.vqt) : passes(N, p.rva)) +
                 (p.vpm ? passes(N, p.vrpm) * (wb_mlp + wb(d.Dv, d.Dv) * passes(p.vrpm, p.vpt))
                        : wb_vc * passes(N, p.rvc))) +
        mergers * (wb(d.Md, d.Md) + wb(d.H, d.Md)) * (p.mpm ? 1.0 : passes(Nt, p.rm)) +
        layers * (p.fused ? (wb_a + wb_c) * passes(S, p.rpf)
                          : wb_a * (p.pqg ? 1.0 : passes(S, p.rpa)) +
                                (p.pm ? passes(S, p.rpm) * (wb_pm + wb(d.H, d.nq * d.hd) * passes(p.rpm, p.ppt))
                                      : wb_c * passes(S, p.rpc)));
  }
  return p;
  };
  // GEMM DMA channels: all of them, or 2 when the OCM their buffers give back saves
  // weight passes (fewer row tiles): the plan of fewer estimated cycles (2B at 1 and
  // 2 MiB: 2 channels; fewer channels alone make the prefill's GEMMs slower).
  // Each also with the prefill's MLP over every row (Streamed::pm) where its packing is in DDR
  // and no knob caps the rows.
  // The tower's q, k, v in row tiles (Streamed::vqt) then refines the chosen candidate only,
  // where it cuts the estimate by 1% or more: its estimate, lower than the row tiles', tipped
  // the choice to candidates whose prefill ran slower than estimated (32x64, 2 MiB, 128 GB/s:
  // 49.51 -> 52.06 M cycles), and smaller cuts ran slower (32x32, 2 MiB, 64 GB/s: 82.90 ->
  // 83.28).
  // (One channel: each also with the GEMMs' second buffer, taken unless the OCM it costs makes
  // the estimate kTwoBuffers higher.)
  // (The vision part alone, image_in_parts: also with buffers for its MLP chunks only,
  // Streamed::whole, the plan then running the tower's and mergers' MLPs in chunks.)
  std::vector<Streamed> cands;
  for (bool two : {true, false}) {
    if (two && cfg_.dma_channels != 1) continue;
    for (bool whole : {true, false}) {
      if (!whole && (S || !N || cap)) continue;
      cands.push_back(plan(uint32_t(cfg_.dma_channels), false, false, two, whole));
      if (cfg_.dma_channels > 2) cands.push_back(plan(2, false, false, two, whole));
    }
    if (S && ddr_.has(pm_name(0, 0, "gu")) && !cap) {
      cands.push_back(plan(uint32_t(cfg_.dma_channels), true, false, two));
      if (cfg_.dma_channels > 2) cands.push_back(plan(2, true, false, two));
    }
  }
  Streamed p = cands[0];
  // (weights once; the second buffer: the estimate leaves out the DDR time it saves)
  // (the knob image_down_groups: its plan, where one has it)
  auto score = [&](const Streamed& q) {
    if (opt_.image_down_groups && q.pg.count != opt_.image_down_groups) return HUGE_VAL;
    return (q.pm ? q.cost / kFewerBytes : q.cost) / (q.two ? kTwoBuffers : 1.0);
  };
  for (const Streamed& q : cands)
    if (q.ok && (!p.ok || score(q) < score(p))) p = q;
  if (p.ok) {
    const Streamed q = plan(p.channels, p.with_pm, true, p.two, p.whole);
    const bool fewer = q.vqa && (!p.vqa || q.vqt > p.vqt) && q.vqt > p.rva;  // (fewer weight passes)
    if (q.ok && q.cost < (fewer ? kFewerBytes : 0.99) * p.cost) p = q;
  }
  // The least OCM that works where none fits: tiles of 4 rows, one kv head per attention call.
  uint64_t least = UINT64_MAX, fixed = 0;
  if (!p.ok)
    for (const Streamed& q : cands) {
      const uint32_t r4 = std::min(N, 4u), m4 = std::min(Nt, 4u), p4 = std::min(S, 4u);
      // (the arrangement that needs less, or the forced one)
      const uint64_t phases = std::max({sum_fp(q.pa(p4, 1)), sum_fp(q.pc(p4, 1)), sum_fp(q.pb(1, 1))}),
                     layers = sum_fp(q.pf(p4, 1));
      const uint64_t prefill = opt_.image_prefill == 1   ? phases
                               : opt_.image_prefill == 2 ? layers
                                                         : std::min(phases, layers);
      const uint64_t need = q.fixed + std::max({sum_fp(q.ta(r4, 1)), sum_fp(q.tc(r4, 1)), sum_fp(q.tb(1, 1)), sum_fp(q.mg(m4)),
                                                prefill, sum_fp(q.hd)});
      if (need < least) least = need, fixed = q.fixed;
    }
  if (s.plan_only) {
    CompiledProgram o;
    o.plan = "streamed";
    o.est_cycles = p.ok ? p.cost : std::numeric_limits<double>::infinity();
    o.est_weight_bytes = p.weight_bytes;
    o.least_ocm = p.ok ? 0 : least;
    return o;
  }
  if (!p.ok) {
    // (named as it runs: a conversation's prefill chunk has no patches)
    const std::string run = !s.prefill ? fmt::format("the vision run ({}x{} patches)", s.grid_h, s.grid_w)
                            : !s.vision ? fmt::format("the prefill run ({} tokens after {} cached)", S, off)
                                        : fmt::format("the image program ({}x{} patches, {} tokens)", s.grid_h,
                                                      s.grid_w, S);
    fail("compiler: {} does not fit {} bytes of OCM even with its activations in DDR: tiles of 4 rows and one kv "
         "head per attention call need {} bytes ({} of them GEMM DMA buffers, vectors and scratch); raise ocm_bytes "
         "to {} or more",
         run, cfg_.ocm_bytes, least, fixed, least);
  }

  // Fixed regions, then W from `base`, allocated phase by phase.
  detail::OcmAlloc fa(cfg_.ocm_bytes);
  const uint32_t VEC = fa.take(p.rVEC, "vectors"), NSCR = fa.take(norm_scratch_bytes(cfg_), "norm scratch");
  const uint32_t ESCR = fa.take(embed_scratch_bytes(d.H, S), "embed scratch");
  const uint32_t GEMM = fa.take(p.rGEMM, "GEMM DMA buffers");
  const F16Regions f16 = take_f16(fa, cfg_, opt_.fp16_channels, std::max(N, S));
  const uint64_t base = fa.next();
  auto phase = [&](const V64& sizes) {
    detail::OcmAlloc w(cfg_.ocm_bytes, base);
    std::vector<uint32_t> off;
    for (uint64_t sz : sizes) off.push_back(w.take(sz, "streamed phase buffer"));
    return off;
  };

  const uint32_t vh = ddr_.bus("act.vh"), vqkv = ddr_.bus("act.vqkv"), ah = ddr_.bus("act.h"),
                 aq = ddr_.bus("act.q");
  const uint32_t vrope = ddr_.bus("const.vrope"), vsin = vrope + opt_.max_patches * d.hdv * 4;
  const uint32_t tcos = iio_.trope_ddr, tsin = iio_.trope_ddr + opt_.max_seq * d.hd * 4;
  constexpr uint32_t kNone = UINT32_MAX;
  const float veps = float(vc.layer_norm_eps), teps = float(tc.rms_norm_eps);
  const uint32_t is = ni ? uint32_t(s.image_start) : 0;

  std::vector<KernelCalls::Gemm> gemms;
  const bool gu_fused = gate_up_fused(), pm_fused = ddr_.has(pm_name(0, 0, "gu")) && pm_gate_up_fused();
  std::string tail_note;  // (the three phases' last layer, for the plan line)
  auto generate = [&](kernels::Builder& b, std::vector<KernelCall>& calls, bool record) {
    KernelCalls k(b, calls, cfg_, gemm_cfg_, ddr_);
    k.GEMM = GEMM;
    k.rGEMM = uint32_t(p.rGEMM);
    k.NSCR = NSCR;
    k.gcfg.dma_channels = int(p.channels);
    k.f16 = f16;
    k.fuse_gelu = opt_.image_gelu_fused;
    k.silu_pm = pm_fused;
    if (record) k.record = &gemms, k.em.dry = true;
    else k.chain = &gemms;
    detail::Emitter& em = k.em;
    auto begin = [&](const std::string& n) { b.op("mark.begin", {Name{n}}); };
    auto end = [&](const std::string& n) { b.op("mark.end", {Name{n}}); };
    // An attention phase over kv-head groups [g0, g0 + ng) of `total`, `per` a call.
    // With two buffer sets it is a pipeline: group i+1's loads (q on channel 1, k and v
    // on channel 2) start before group i's attention, group i's output is stored (channel
    // 0 or 3 by set) while group i+1 computes; a set's output buffer is written again two
    // groups later, after its store. With one set every copy is waited for.
    // io(set buffers, g0, ng, load, chan): the loads (load) or the store on DMA channel
    // chan (UINT32_MAX: waited for); attend(set buffers, g0, ng).
    const uint32_t nch = uint32_t(cfg_.dma_channels), chq = 1 % nch, chkv = 2 % nch, cho[2] = {0, 3 % nch};
    auto attention_phase = [&](uint32_t total, uint32_t per, uint32_t sets, const std::vector<uint32_t>& o,
                               const std::function<void(const uint32_t*, uint32_t, uint32_t, bool, uint32_t)>& io,
                               const std::function<void(const uint32_t*, uint32_t, uint32_t)>& attend) {
      const auto groups = tiles_of(total, per);
      auto set = [&](size_t i) { return o.data() + (i % sets) * 4; };
      if (sets == 1) {
        for (auto [g0, ng] : groups) {
          io(set(0), g0, ng, true, UINT32_MAX);
          attend(set(0), g0, ng);
          io(set(0), g0, ng, false, UINT32_MAX);
        }
        return;
      }
      io(set(0), groups[0].first, groups[0].second, true, chq);
      for (size_t i = 0; i < groups.size(); ++i) {
        em.wait(chq);
        em.wait(chkv);
        if (i + 1 < groups.size()) io(set(i + 1), groups[i + 1].first, groups[i + 1].second, true, chq);
        if (i >= 2) em.wait(cho[i % 2]);
        attend(set(i), groups[i].first, groups[i].second);
        io(set(i), groups[i].first, groups[i].second, false, cho[i % 2]);
      }
      em.wait(cho[0]);
      em.wait(cho[1]);
    };
    // A copy waited for (chan UINT32_MAX) or started on DMA channel chan.
    auto copy_shape_on = [&](uint32_t chan, const std::string& mark, const detail::Copy& c) {
      if (chan == UINT32_MAX) em.copy(mark, c);
      else em.copy_async(mark, chan, c);
    };
    auto copy_on = [&](uint32_t chan, const std::string& mark, uint32_t src, uint32_t dst, uint32_t bytes) {
      copy_shape_on(chan, mark, {.src = src, .dst = dst, .row_bytes = bytes});
    };
    // A row phase's tiles of `per` rows of `total`, in a copy mode (CopyMode). Pipelined:
    // while tile t runs, tile t-1's stores (channel cs) and tile t+1's loads (channel ca,
    // or cs for a buffer that is also stored from: it queues behind that buffer's store)
    // are in flight. run() starts them before its long GEMMs: kick(0) the stores, kick(1)
    // the loads (and the stores if not yet), so that they overlap MACs rather than short
    // kernels, and each GEMM finds the DDR port blocked by at most one of them (the port
    // serves a descriptor's runs in one go; a GEMM's weight stream has one tile of slack).
    // Stores behind: the same without the loads, which are waited for at the tile's
    // start. A doubled buffer is written again two tiles later, after the wait that
    // begins the tile between. A channel holds two descriptors: load() puts at most two
    // on ca and one on cs. load(t, r0, rows, set, ca, cs), run(t, r0, rows, set, kick),
    // store(t, r0, rows, set, cs): channel UINT32_MAX: the copy is waited for.
    const uint32_t ca = 2 % nch, cs = 3 % nch, kWait = UINT32_MAX;
    // Copies beside the GEMMs (the column groups'): on a DMA channel they leave free, else behind
    // their units on cs.
    const uint32_t cx = p.channels < nch ? nch - 1 : cs;
    // The tower's cos and sin: started on channel ca before its LayerNorm, waited for at the first
    // rotary where the GEMMs leave ca free, else before the first GEMM (its units would queue
    // behind them: waited at the rotary, 32x32 at 2 MiB, 16 GB/s ran 0.25% slower).
    const bool vrope_late = ca >= p.channels;
    auto vrope_wait = [&](bool at_rotary) {
      if (at_rotary == vrope_late) em.wait(ca);
    };
    // A residual kept in OCM between layers (blocks), at the next one's start: parked in LRM at
    // `park` (park_at; the GEMMs up to the MLP phase then keep below it) or, where that is 0,
    // stored to `ddr` on channel cs (waited for before anything writes over the rows).
    auto keep_rows = [&](const std::string& mark, uint32_t rows, uint32_t bytes, uint32_t park, uint32_t ddr) {
      if (!park) return copy_on(cs, mark + ".store_residual", ocm(rows), ddr, bytes);
      k.park(mark + ".park_residual", {.ocm = rows, .bytes = bytes, .lrm = park}, false);
      k.lrm_end = park;
    };
    using Kick = std::function<void(int)>;
    auto row_phase = [&](uint32_t total, uint32_t per, uint32_t mode,
                         const std::function<void(uint32_t, uint32_t, uint32_t, uint32_t, uint32_t, uint32_t)>& load,
                         const std::function<void(uint32_t, uint32_t, uint32_t, uint32_t, const Kick&)>& run,
                         const std::function<void(uint32_t, uint32_t, uint32_t, uint32_t, uint32_t)>& store) {
      const auto tiles = tiles_of(total, per);
      const uint32_t n = uint32_t(tiles.size());
      for (uint32_t t = 0; t < n; ++t) {
        const auto [r0, rows] = tiles[t];
        if (mode == kWaited) {
          load(t, r0, rows, 0, kWait, kWait);
          run(t, r0, rows, 0, [](int) {});
          store(t, r0, rows, 0, kWait);
          continue;
        }
        const bool ahead = mode == kPipelined;
        if (ahead && t == 0) load(0, r0, rows, 0, ca, cs);
        if (ahead) em.wait(ca);
        em.wait(cs);
        if (!ahead) load(t, r0, rows, t % 2, kWait, kWait);
        int kicked = -1;
        run(t, r0, rows, t % 2, [&](int part) {
          if (kicked < 0 && t > 0) store(t - 1, tiles[t - 1].first, tiles[t - 1].second, (t - 1) % 2, cs);
          if (ahead && kicked < 1 && part == 1 && t + 1 < n)
            load(t + 1, tiles[t + 1].first, tiles[t + 1].second, (t + 1) % 2, ca, cs);
          kicked = std::max(kicked, part);
        });
        if (kicked < 1) fail("compiler: internal: a pipelined row phase's tile did not start its copies");
      }
      if (mode != kWaited) {
        store(n - 1, tiles[n - 1].first, tiles[n - 1].second, (n - 1) % 2, cs);
        em.wait(cs);
      }
    };
    // Buffer i of set u of a row phase whose first `n` buffers are doubled (doubled()).
    auto buf = [](const std::vector<uint32_t>& o, size_t n, uint32_t u, size_t i) {
      return u && i < n ? o[o.size() - n + i] : o[i];
    };
    // An MLP phase over every row (Streamed::vpm, pm), in the buffers of its three parts
    // (Streamed::vpmb, pmb): the out GEMM (proj / o) of the attention rows, the residual and
    // its norm for all rows (the residual seeding the LRM partial sums, or stored to DDR
    // meanwhile), then per chunk of `chunk` inner columns the up GEMM (fc1 + its bias and
    // GELU, or gate|up and SiLU) and the down GEMM's chunk (fc2 / down) into fp32 partial sums
    // (the first with the down bias, the last rounding into the normed rows' buffer; seeded:
    // residual + MLP there), the residual reloaded and added (unless seeded),
    // after(residual), the store.
    struct MlpAllRows {
      std::string mark;
      uint32_t rows = 0, width = 0;
      // part buffers: [normed, attention, residual], [normed, sums, up], [normed, residual] (the
      // attention and residual buffers of a part tile's rows; in part tiles part 1 is [normed,
      // attention]: the residual comes in over the attention rows)
      std::vector<uint32_t> o1, o2, o3;
      // rows [r0, r0 + n) of the attention rows into OCM at A (none: they are there)
      std::function<void(uint32_t A, uint32_t r0, uint32_t n)> load_attn;
      uint32_t res_ddr = 0;
      // The block's steps (VisionBlock, TextLayer) on a part tile: its out GEMM (proj, o_proj) of
      // the attention rows a into y, and the norm after the attention (norm2, post_norm) of h into x.
      std::function<void(const Tile&, uint32_t a, uint32_t y)> out;
      std::function<void(const Tile&, uint32_t h, uint32_t x)> norm2;
      uint32_t chunk = 0, chunks = 0;
      bool gated = false;  // gate|up and SiLU (else fc1 and GELU)
      uint32_t pairs = 1;  // chunks a down call (ChunkChain::pairs)
      std::function<std::string(uint32_t, bool)> weight;  // chunk's up (false) or down (true) weight
      uint32_t up_bias = 0, down_bias = 0;  // kNone: none (up: chunk c at + 2 c chunk)
      // on rows [r0, r0 + n) at X3, with scratch for n rows (the tile's normed rows)
      std::function<void(uint32_t X3, uint32_t r0, uint32_t n, uint32_t scratch)> after = {};
      uint32_t sums_lrm = 0;  // the partial sums in LRM from this offset (lrm_sums; part 2 then has none)
      uint32_t part_rows = 0;  // the first and last parts in tiles of this many rows (0: all at once)
      // Seeded: the rows stay in the normed rows' buffer, not stored (the caller stores them).
      bool store_later = false;
      // The residual parked in LRM from this offset (the caller's lrm_run_slots park; 0: in DDR at
      // res_ddr): unparked into its buffer instead of loaded (one part tile only).
      uint32_t parked = 0;
      // After the last part tile's norm (the phase's last read of the layer's vectors).
      std::function<void()> after_norm = {};
      // Before the last down GEMM where there are two or more (the phase's last read of the
      // layer's vectors is the last up GEMM's bias).
      std::function<void()> before_last_down = {};
      // The down's columns in groups through DDR at mid_ddr (ChunkChain::groups, Streamed::pg),
      // each group's LRM sums seeded with its residual columns: the other groups' stored to
      // res_ddr in part 1 and loaded over the normed rows' once the last up GEMM has read them;
      // the later groups' sums at LRM sums_later.
      ColumnGroups groups = {};
      uint32_t mid_ddr = 0, sums_later = 0;
    };
    auto mlp_all_rows = [&](const MlpAllRows& m) {
      const uint32_t pt = m.part_rows ? std::min(m.part_rows, m.rows) : m.rows;
      // In part tiles the residual comes in after the out GEMM, over its attention rows (part 1
      // then takes one buffer a tile: at 1 MiB twice the rows a tile, half the out GEMM's reads).
      const bool tiled = pt < m.rows;
      const uint32_t XN = m.o1[0], A = m.o1[1], X1 = tiled ? A : m.o1[2], ACC = m.o2[1], U = m.o2[2], X3 = m.o3[1];
      // row bytes: residual, up output
      const uint32_t w2 = m.width * 2, us = up_row(m.gated, m.pairs, k.silu_pm) * m.chunk;
      // (the up output over the residual buffer, whose last store is still in flight)
      // With LRM sums the residual seeds them (emit_gemm_lrm_seed): the down GEMM's first chunk
      // adds it, its last rounds residual + MLP into the normed rows; else the residual goes
      // to DDR and back.
      const bool seed = m.sums_lrm != 0;
      const bool grouped = m.groups.count > 1;
      if (grouped && (!seed || !m.sums_later || m.parked))
        fail("compiler: internal: '{}' has its down in column groups without LRM sums of its own, or parked", m.mark);
      const uint32_t gn = m.groups.cols(m.width, 0);  // the first group's columns (its row bytes: m.width)
      const bool over_residual = !seed && U < X1 + uint64_t(pt) * w2 && U + uint64_t(m.rows) * us > X1;
      k.lrm_end = m.sums_lrm;  // the GEMMs from the out GEMM's hand-off on keep below the LRM sums
      // Part 1 (per part tile): the out GEMM into the normed rows, the residual, its norm.
      for (auto [r0, n] : tiles_of(m.rows, pt)) {
        const uint32_t xn = XN + r0 * w2;
        const uint32_t res = m.res_ddr + r0 * w2;
        if (tiled && !seed) em.wait(cs);  // (the tile before stores its residual from the attention rows)
        if (m.load_attn) m.load_attn(A, r0, n);
        if (m.parked && tiled) fail("compiler: internal: '{}' has its residual parked but its parts in tiles", m.mark);
        if (m.parked) k.park(m.mark + ".unpark_residual", {.ocm = X1, .bytes = n * w2, .lrm = m.parked}, true);
        else if (!tiled) copy_on(cs, m.mark + ".load_residual", res, ocm(X1), n * w2);  // behind the out GEMM
        const Tile part{.mark = m.mark, .r0 = r0, .rows = n};
        m.out(part, A, xn);
        if (tiled) em.copy(m.mark + ".load_residual", res, ocm(X1), n * w2);
        else em.wait(cs);
        k.ew(m.mark + ".attn_residual", {.op = EwOp::add, .rows = n, .cols = m.width, .a_ocm = X1, .b_ocm = xn,
                                         .out_ocm = X1});
        m.norm2(part, X1, xn);
        if (m.after_norm && r0 + n == m.rows) m.after_norm();
        if (seed) k.lrm_seed(m.mark + ".residual_sums", {.m = m.rows, .n = gn, .k = m.chunk, .row0 = r0,
                                                         .rows = n, .x_ocm = X1, .x_stride = w2,
                                                         .lrm_acc = m.sums_lrm});
        else copy_on(cs, m.mark + ".store_residual", ocm(X1), res, n * w2);
        if (grouped)  // (the other groups' residual columns, for their sums)
          copy_shape_on(cx, m.mark + ".store_residual_rest", {.src = ocm(X1 + gn * 2), .dst = res + gn * 2,
                                                              .row_bytes = w2 - gn * 2, .rows = n,
                                                              .src_stride = w2, .dst_stride = w2});
        if (grouped && tiled) em.wait(cx);  // (before the next part tile writes X1)
      }
      if (over_residual) em.wait(cs);
      if (grouped) em.wait(cx);  // (the up output may lie over X1)
      k.chunk_chain({.mark = m.mark, .rows = m.rows, .chunk = m.chunk, .chunks = m.chunks, .in = m.width,
                     .out_n = m.width, .gated = m.gated, .pairs = m.pairs, .weight = m.weight, .x = XN,
                     .x_stride = w2, .up = U, .up_stride = us, .up_bias = m.up_bias, .down_bias = m.down_bias,
                     .out = XN, .out_stride = w2,
                     .acc = ACC, .acc_stride = 2 * w2, .lrm = m.sums_lrm, .seeded = seed,
                     .before = [&](uint32_t c, bool down) {
                       // the residual stored before the partial sums overwrite it
                       if (down && c == 0 && !seed) em.wait(cs);
                       if (down && c > 0 && c == (m.chunks - 1) / m.pairs && m.before_last_down) m.before_last_down();
                     },
                     .groups = m.groups, .mid = m.mid_ddr, .chan = cx, .lrm_later = m.sums_later,
                     // The later groups' residual columns over the normed rows' (read for the
                     // last time by the last up GEMM), each seeding its group's sums.
                     .before_later = [&] {
                       copy_shape_on(cx, m.mark + ".load_residual_rest",
                                     {.src = m.res_ddr + gn * 2, .dst = ocm(XN + gn * 2), .row_bytes = w2 - gn * 2,
                                      .rows = m.rows, .src_stride = w2, .dst_stride = w2});
                     },
                     .group_start = [&](uint32_t g) {
                       k.lrm_seed(fmt::format("{}.g{}.residual_sums", m.mark, g),
                                  {.m = m.rows, .n = m.groups.cols(m.width, g), .k = m.chunk, .row0 = 0,
                                   .rows = m.rows, .x_ocm = XN + m.groups.start(m.width, g) * 2, .x_stride = w2,
                                   .lrm_acc = m.sums_later});
                     }});
      k.lrm_end = 0;  // (the GEMM after the phase, handed off by the last down, keeps below them too)
      // Part 3 (per part tile): the residual added to the down output (seeded: there already), stored.
      for (auto [r0, n] : tiles_of(m.rows, pt)) {
        if (seed) {
          if (m.after) m.after(XN + r0 * w2, r0, n, X3);
          if (!m.store_later) em.copy(m.mark + ".store", ocm(XN + r0 * w2), m.res_ddr + r0 * w2, n * w2);
          continue;
        }
        em.copy(m.mark + ".reload_residual", m.res_ddr + r0 * w2, ocm(X3), n * w2);
        k.ew(m.mark + ".mlp_residual", {.op = EwOp::add, .rows = n, .cols = m.width, .a_ocm = X3, .b_ocm = XN + r0 * w2,
                                        .out_ocm = X3});
        if (m.after) m.after(X3, r0, n, XN + r0 * w2);
        em.copy(m.mark + ".store", ocm(X3), m.res_ddr + r0 * w2, n * w2);
      }
    };

    // ================= vision tower =================
    // The LRM bound (GemmArgs::lrm_end) of the tower's last GEMM, which hands the prefill's
    // first GEMM its first tile (0: none, anywhere in LRM).
    uint32_t tower_last_lrm_end = 0;
    if (s.vision) {
      begin("vision_tower");
      // The residual kept in OCM from a block's MLP phase to the next block's norm (as the
      // prefill's kept_rows): where the MLP phase runs over every row at once with LRM sums
      // seeded with the residual (the rows end in its normed rows' buffer, the first of both
      // phases' buffers) and the next block's qkv phase takes every row at once (vqg, vkv, vqa
      // untiled). Its store to DDR (for the next MLP phase's residual) starts at the next
      // block's start, behind which its tables load; it is waited for before anything writes
      // the rows (vqg, vqa: the norm in place; vkv: the q GEMM, the norm writing its own
      // buffer); the load is gone.
      const bool vkept = p.vpm && p.vrpm == N && p.vpt == N && vsums(N) &&
                         (p.vqg || p.vkv || (p.vqa && p.vqt == N)) &&
                         phase(p.vqg ? p.vqgb() : p.vkv ? p.vkvab() : p.vqab(p.vqt, p.vqo, p.vqc))[0] ==
                             phase(p.vpmb(1, N, N))[0];
      // Block b's rows stay for block b + 1 unless a merger reads them after block b (from DDR,
      // its buffers over them).
      // The merger after block b: tap j, -1 after the last block, -2 none.
      auto merger_after = [&](int b) {
        const auto& taps = vc.deepstack_visual_indexes;
        for (int j = 0; j < int(taps.size()); ++j)
          if (taps[j] == b) return j;
        return b + 1 == vc.depth ? -1 : -2;
      };
      auto kept_after = [&](int b) { return vkept && b >= 0 && merger_after(b) == -2; };
      // The kept rows parked in LRM until the MLP phase (park_at) or stored, at the start of a
      // block after a kept one.
      const uint32_t vpark =
          vkept ? park_at(vsums(N), N * d.Dv * 2, {{d.Dv, d.Dv}, {3 * vgq_heads(d.hv) * d.hdv, d.Dv}}) : 0;
      auto keep_residual = [&](const std::string& B, uint32_t rows) {
        keep_rows(B, rows, N * d.Dv * 2, vpark, vh);
      };
      // A tap block's rows (and the last block's) parked at vpark after its MLP phase, for its
      // merger (unparked into the merger's rows) and the next block (unparked into the rows a
      // kept block leaves), not stored and loaded back twice: where the merger takes every row
      // in one tile and its GEMMs keep their split below the park. (32x64, 2 MiB, 64 GB/s: a
      // waited store of 20.6 K cycles and two loads of 14.1 K a tap.)
      const bool vtap_park = [&] {
        if (!vpark || p.mpm || p.rm < Nt) return false;
        sim::Config below = gemm_cfg_;
        below.lrm_bytes = vpark;
        try {
          for (auto [n, kk] : {std::pair{d.Md, d.Md}, std::pair{d.H, d.Md}})
            if (!keeps_tiling(below, gemm_cfg_, n, kk)) return false;
        } catch (const Error&) {
          return false;
        }
        return true;
      }();
      auto parked_out = [&](int b) { return vtap_park && b >= 0 && merger_after(b) >= -1; };
      // Block b's rows reach block b + 1 without DDR (kept in OCM, or parked for a merger).
      auto kept_in = [&](int b) { return kept_after(b) || (parked_out(b) && b + 1 < vc.depth); };
      // At block blk's start (mark B) its rows into `rows` where the block before kept them: parked
      // (keep_residual) or unparked; false: they are to be loaded.
      auto arrive = [&](const std::string& B, int blk, uint32_t rows) {
        if (parked_out(blk - 1)) {
          k.park(B + ".unpark_rows", {.ocm = rows, .bytes = N * d.Dv * 2, .lrm = vpark}, true);
          k.lrm_end = vpark;
        } else if (kept_after(blk - 1)) {
          keep_residual(B, rows);
        }
        return kept_in(blk - 1);
      };
      // "q, k, v in turn, k and v kept" (vkv) with the MLP phase over every row: q and the
      // attention's output through LRM slots below the kept residual's (or the top), not DDR.
      // q parked from its rows after its rotation, each group's q unparked head-major into the
      // attention's staging, its output parked from there (into the slots its q left) and
      // unparked row-major into the MLP phase's attention rows: slot (group, 64-byte half of a
      // head row), PE h N + r holding head h's row r. The q, k, v GEMMs (and the tiles they hand
      // off) keep below the slots.
      const uint32_t halves = hdv2 / kLrmChunk, vslots = d.hv / std::max(p.gv, 1u) * halves;
      const uint32_t vq_top = (vpark ? vpark : uint32_t(gemm_cfg_.lrm_bytes)) / kLrmChunk * kLrmChunk;
      const uint32_t vqpark = [&]() -> uint32_t {
        if (!p.vkv || !p.vpm || p.vpt != N || opt_.image_no_park || opt_.fp16_channels || hdv2 % kLrmChunk ||
            uint64_t(N) * p.gv > cfg_.npe() || d.hv % std::max(p.gv, 1u) || vq_top < vslots * kLrmChunk)
          return 0;
        const uint32_t at = vq_top - vslots * kLrmChunk;
        if (at < KernelCalls::kLrmShared) return 0;
        sim::Config below = gemm_cfg_;
        below.lrm_bytes = at;
        try {
          if (!keeps_tiling(below, gemm_cfg_, d.Dv, d.Dv)) return 0;
        } catch (const Error&) {
          return 0;
        }
        return at;
      }();
      // Group g's slots between rows [N][Dv] at `rows` (row-major: one piece a head and half)
      // or the head-major staging [gv][N][hdv] at `staged` (one piece a half).
      auto vq_rows = [&](uint32_t g, uint32_t rows) {
        std::vector<LrmSlot> v;
        for (uint32_t c = 0; c < halves; ++c) {
          LrmSlot sl{.lrm = vqpark + (g * halves + c) * kLrmChunk, .pieces = {}};
          for (uint32_t h = 0; h < p.gv; ++h)
            sl.pieces.push_back({h * N, (h + 1) * N,
                                 int64_t(rows) + (g * p.gv + h) * hdv2 + c * kLrmChunk - int64_t(h) * N * d.Dv * 2,
                                 d.Dv * 2});
          v.push_back(std::move(sl));
        }
        return v;
      };
      auto vq_staged = [&](uint32_t g, uint32_t staged) {
        std::vector<LrmSlot> v;
        for (uint32_t c = 0; c < halves; ++c)
          v.push_back({.lrm = vqpark + (g * halves + c) * kLrmChunk,
                       .pieces = {{0, p.gv * N, int64_t(staged) + c * kLrmChunk, hdv2}}});
        return v;
      };
      auto vq_all_rows = [&](uint32_t rows) {
        std::vector<LrmSlot> v;
        for (uint32_t g = 0; g < d.hv / p.gv; ++g)
          for (LrmSlot& sl : vq_rows(g, rows)) v.push_back(std::move(sl));
        return v;
      };
      VisionBlock vb{.k = k, .d = d, .vec = VEC, .eps = veps, .qkv_split = tower_qkv_split(),
                     .v_off = tower_v_offset()};
      const uint32_t patch_bias = VEC + d.vision_vec() * 2;  // (after the block's vectors)
      // A merger's vectors come in during the last down GEMM of the block before it (after the
      // block's last read of its own, the last fc1's bias) on a DMA channel the GEMMs leave free,
      // not at the merger's start behind its fc1's first units in the DDR queue (32x64, 2 MiB,
      // 64 GB/s: 6.4 K cycles a merger for 28 KB).
      const uint32_t vcn = nch - 1;
      bool mvec_early = false;  // the next merger's vectors are on vcn
      auto load_merger_vectors = [&](const std::string& B, int j) -> std::function<void()> {
        if (j < -1 || p.channels >= nch || opt_.fp16_channels) return {};
        return [&, B, j] {
          em.wait(vcn);
          copy_on(vcn, B + ".load_merger_vectors", ddr_.bus(mname(j, "vec")), ocm(VEC), d.merger_vec(j >= 0) * 2);
          mvec_early = true;
        };
      };
      // Merger j (-1: the last) of the rows in DDR at vh, or parked at vpark (parked_out).
      auto merger = [&](int j, bool parked) {
        const std::string M = j < 0 ? "Mf" : fmt::format("M{}", j);
        begin(M);
        if (mvec_early) em.wait(vcn);
        else em.copy(M + ".load_vectors", ddr_.bus(mname(j, "vec")), ocm(VEC), d.merger_vec(j >= 0) * 2);
        mvec_early = false;
        const Merger m{.k = k, .d = d, .j = j, .vec = VEC, .eps = veps};
        if (p.mpm) {
          // Every merged row (Streamed::mpm): per chunk c of cm fc1 columns, fc1 (its bias) and
          // GELU into U, fc2's chunk into fp32 partial sums in LRM (the first with fc2's bias),
          // the last rounded into the normed rows, which no GEMM reads after the last fc1.
          const std::vector<uint32_t> o = phase(p.mpmb());
          const uint32_t X = o[0], U = o[1], cm = pm_chunk(d.Md, 1), chunks = d.Md / cm, sums = msums(p.mg_groups);
          const Tile all{.mark = M, .r0 = 0, .rows = Nt};
          em.copy(M + ".load", vh, ocm(X), Nt * d.Md * 2);
          m.norm(all, X, X);
          k.lrm_end = sums;
          k.chunk_chain({.mark = M, .rows = Nt, .chunk = cm, .chunks = chunks, .in = d.Md, .out_n = d.H,
                         .act = EwOp::gelu_erf,
                         .weight = [&](uint32_t c, bool down) { return mpm_name(j, c, down ? "fc2" : "fc1"); },
                         .x = X, .x_stride = d.Md * 2, .up = U, .up_stride = cm * 2, .up_bias = m.fc1_bias(),
                         .down_bias = m.fc2_bias(), .out = X, .out_stride = d.H * 2, .lrm = sums,
                         .groups = {p.mg_groups}, .mid = aq, .chan = cx});
          k.lrm_end = 0;
          m.store(all, X);
          end(M);
          return;
        }
        const std::vector<uint32_t> o = phase(p.mg(p.rm));
        const uint32_t X = o[0], F1 = o[1], O = o[2];
        int t = 0;
        for (auto [r0, rows] : tiles_of(Nt, p.rm)) {
          const Tile mt{.mark = fmt::format("{}.t{}", M, t++), .r0 = r0, .rows = rows};
          if (parked && (r0 || rows != Nt)) fail("compiler: internal: '{}' unparks its rows in part", mt.mark);
          if (parked) k.park(mt.at("unpark_rows"), {.ocm = X, .bytes = rows * d.Md * 2, .lrm = vpark}, true);
          else em.copy(mt.at("load"), vh + r0 * d.Md * 2, ocm(X), rows * d.Md * 2);
          m.norm(mt, X, X);
          m.fc1(mt, X, F1);
          m.fc2(mt, F1, O);
          m.store(mt, O);
        }
        end(M);
      };
      for (int blk = 0; blk < vc.depth; ++blk) {
        const std::string B = fmt::format("V{}", blk);
        vb.block = blk;
        begin(B);
        em.copy(B + ".load_vectors", ddr_.bus(vname(blk, "vec")), ocm(VEC), d.vision_vec() * 2);
        if (blk == 0) em.copy("V.load_patch_bias", ddr_.bus("V.patch_bias"), ocm(patch_bias), d.Dv * 2);
        if (p.vqg && blk > 0) {
          // By head groups (Streamed::vqg): norm, then per group its q|k|v GEMM, the rotation of
          // its q and k, its attention into the group's columns of the attention rows. The MLP
          // phase over every row finds those rows in its own buffer; row tiles read them from DDR.
          const std::vector<uint32_t> o = phase(p.vqgb());
          const uint32_t X = o[0], ATT = o[1], RC = o[2], RS = o[3], QB = o[4], Y = o[5];
          const uint32_t gq = vgq_heads(d.hv), w2 = gq * hdv2, ys = 3 * w2;
          if (!arrive(B, blk, X)) em.copy(B + ".load", vh, ocm(X), N * d.Dv * 2);
          copy_on(ca, B + ".load_rope", vrope, ocm(RC), N * d.hdv * 4);
          copy_on(ca, B + ".load_rope_sin", vsin, ocm(RS), N * d.hdv * 4);
          em.copy(B + ".load_qkv_bias", ddr_.bus(vname(blk, "gqbias")), ocm(QB), 3 * d.Dv * 2);
          if (kept_after(blk - 1) && !vpark) em.wait(cs);
          vb.norm1({.mark = B, .r0 = 0, .rows = N}, X, X);
          vrope_wait(false);
          for (uint32_t g = 0; g < d.hv / gq; ++g) {
            const std::string A = fmt::format("{}.g{}", B, g);
            k.gemm(A + ".qkv", {.w = vgq_name(blk, g), .m = N, .n = 3 * gq * d.hdv, .k = d.Dv, .x = X, .xs = d.Dv * 2,
                                .y = Y, .ys = ys, .bias = QB + g * ys});
            if (g == 0) vrope_wait(true);
            k.rope(A + ".qk_rope", {.rows = N, .heads = 2 * gq, .head_dim = d.hdv, .x_ocm = Y, .x_row_stride = ys,
                                    .cos_ocm = RC, .sin_ocm = RS});  // q and k heads adjacent
            k.attention(A + ".attention", {.q_heads = gq, .kv_heads = gq, .head_dim = d.hdv, .seq = N,
                                           .causal = false, .q_ocm = Y, .q_row_stride = ys, .q_head_stride = hdv2,
                                           .k_ocm = Y + w2, .v_ocm = Y + 2 * w2, .kv_row_stride = ys,
                                           .out_ocm = ATT + g * w2, .out_row_stride = d.Dv * 2,
                                           .out_head_stride = hdv2, .max_groups = gq});
          }
          if (!p.vpm || p.vpt < N) em.copy(B + ".store_attn", {.src = ocm(ATT), .dst = vqkv, .row_bytes = d.Dv * 2,
                                                               .rows = N, .src_stride = d.Dv * 2,
                                                               .dst_stride = 3 * d.Dv * 2});
        } else if (p.vkv && blk > 0) {
          // Every row, k and v kept (Streamed::vkv): q into k's buffer, rotated and stored (the
          // attention loads it by head groups; the store waited for), then k and v into their
          // own for the attention (v's buffer held cos and sin until then).
          const std::vector<uint32_t> o = phase(p.vkvab());
          const uint32_t K = o[0], V = o[1], X = o[2], RC = V, RS = V + N * d.hdv * 4;
          const bool kept = arrive(B, blk, K);
          if (!kept) em.copy(B + ".load", vh, ocm(X), N * d.Dv * 2);
          copy_on(ca, B + ".load_rope", vrope, ocm(RC), N * d.hdv * 4);
          copy_on(ca, B + ".load_rope_sin", vsin, ocm(RS), N * d.hdv * 4);
          const Tile all{.mark = B, .r0 = 0, .rows = N};
          vb.norm1(all, kept ? K : X, X);
          if (kept_after(blk - 1) && !vpark) em.wait(cs);  // (the store reads the rows the q GEMM writes)
          if (vqpark) k.lrm_end = vqpark;
          vrope_wait(false);
          for (uint32_t j = 0; j < 3; ++j) {
            const uint32_t Y = j == 2 ? V : K;
            vb.qkv_apart(all, j, X, Y);
            if (j == 0) vrope_wait(true);
            if (j < 2) vb.rope_apart(all, j, Y, RC, RS);
            if (j == 0 && vqpark) k.slots(B + ".park_q", vq_all_rows(K), true);
            else if (j == 0) em.copy(B + ".store_q", {.src = ocm(K), .dst = vqkv, .row_bytes = d.Dv * 2, .rows = N,
                                                      .src_stride = d.Dv * 2, .dst_stride = 3 * d.Dv * 2});
          }
        } else if (p.vqa && blk > 0) {
          // Every row or tiles of vqt rows (Streamed::vqa): norm, then q, k, v in turn into the
          // output buffers in turn, each stored (its third of the q|k|v rows) on its buffer's
          // channel while the next computes, waited for before its buffer is written again.
          const std::vector<uint32_t> o = phase(p.vqab(p.vqt, p.vqo, p.vqc));
          const uint32_t X = o[0], RC = o[1], RS = o[2], chan[2] = {ca, cs};
          uint32_t t = 0;
          for (auto [r0, n] : tiles_of(N, p.vqt)) {
            const std::string T = p.vqt < N ? fmt::format("{}.t{}", B, t++) : B;
            const Tile tt{.mark = T, .r0 = r0, .rows = n};
            if (!arrive(T, blk, X)) em.copy(T + ".load", vh + r0 * d.Dv * 2, ocm(X), n * d.Dv * 2);
            em.copy(T + ".load_rope", vrope + r0 * d.hdv * 4, ocm(RC), n * d.hdv * 4);
            em.copy(T + ".load_rope_sin", vsin + r0 * d.hdv * 4, ocm(RS), n * d.hdv * 4);
            if (kept_after(blk - 1) && !vpark) em.wait(cs);
            vb.norm1(tt, X, X);
            for (uint32_t j = 0; j < 3 && !p.vqc; ++j) {
              const uint32_t u = (r0 / p.vqt * 3 + j) % p.vqo, Y = o[3 + u];
              em.wait(chan[u]);  // the last store from this buffer
              vb.qkv_apart(tt, j, X, Y);
              if (j < 2) vb.rope_apart(tt, j, Y, RC, RS);
              copy_shape_on(chan[u], fmt::format("{}.store_{}", T, "qkv"[j]),
                  {.src = ocm(Y), .dst = vqkv + r0 * 3 * d.Dv * 2 + j * d.Dv * 2, .row_bytes = d.Dv * 2, .rows = n,
                   .src_stride = d.Dv * 2, .dst_stride = 3 * d.Dv * 2});
            }
            // In column groups (Streamed::vqc): each of q, k, v a group of whole heads and tiles a
            // call, the output buffers in turn.
            const uint32_t vc = p.vqc, ng = vc ? d.Dv / vc : 0;
            for (uint32_t i = 0; i < 3 * ng; ++i) {
              const uint32_t j = i / ng, c0 = i % ng * vc, u = i % p.vqo, Y = o[3 + u];
              const std::string G = fmt::format("{}.{}{}", T, "qkv"[j], i % ng);
              const std::string w = vpm_name(blk, j, "qkv");
              em.wait(chan[u]);  // the last store from this buffer
              k.gemm(G, {.w = w, .m = n, .n = vc, .k = d.Dv, .x = X, .xs = d.Dv * 2, .y = Y, .ys = vc * 2,
                         .bias = vb.qkv_bias() + (j * d.Dv + c0) * 2, .w_off = k.column_offset(w, d.Dv, d.Dv, c0)});
              if (j < 2)
                k.rope(G + ".rope", {.rows = n, .heads = vc / d.hdv, .head_dim = d.hdv, .x_ocm = Y,
                                     .x_row_stride = vc * 2, .cos_ocm = RC, .sin_ocm = RS});
              copy_shape_on(chan[u], G + ".store",
                  {.src = ocm(Y), .dst = vqkv + r0 * 3 * d.Dv * 2 + (j * d.Dv + c0) * 2, .row_bytes = vc * 2, .rows = n,
                   .src_stride = vc * 2, .dst_stride = 3 * d.Dv * 2});
            }
          }
          em.wait(chan[0]);
          em.wait(chan[1]);
        } else {
          // qkv (stored), x, cos, sin (loaded), as the copy mode doubles them; the patches
          // (block 0, whose rows are made here) once.
          const std::vector<uint32_t> o = phase(p.ta(p.rva, p.sva));
          const size_t nd = doubled(p.sva, 1, 4);
          auto name = [&](uint32_t t) { return fmt::format("{}.t{}", B, t); };
          row_phase(
              N, p.rva, p.sva,
              [&](uint32_t t, uint32_t r0, uint32_t rows, uint32_t u, uint32_t cl, uint32_t cst) {
                const std::string T = name(t);
                if (blk) copy_on(cst, T + ".load", vh + r0 * d.Dv * 2, ocm(buf(o, nd, u, 1)), rows * d.Dv * 2);
                copy_on(cl, T + ".load_rope", vrope + r0 * d.hdv * 4, ocm(buf(o, nd, u, 2)), rows * d.hdv * 4);
                copy_on(cl, T + ".load_rope_sin", vsin + r0 * d.hdv * 4, ocm(buf(o, nd, u, 3)), rows * d.hdv * 4);
              },
              [&](uint32_t t, uint32_t r0, uint32_t rows, uint32_t u, const Kick& kick) {
                const Tile tt{.mark = name(t), .r0 = r0, .rows = rows};
                const uint32_t QKV = buf(o, nd, u, 0), X = buf(o, nd, u, 1), RC = buf(o, nd, u, 2),
                               RS = buf(o, nd, u, 3), P = o[4];
                if (blk == 0) {
                  vb.load_patches(tt, P, iio_.patches_ddr);
                  vb.patch_embed(tt, P, X, patch_bias);
                  vb.pos_add(tt, X, QKV);
                  em.copy(tt.at("store"), ocm(X), vh + r0 * d.Dv * 2, rows * d.Dv * 2);
                }
                vb.norm1(tt, X, X);
                kick(1);
                vb.qkv(tt, X, QKV);
                vb.qk_rope(tt, QKV, RC, RS);
              },
              [&](uint32_t t, uint32_t r0, uint32_t rows, uint32_t u, uint32_t cst) {
                copy_on(cst, name(t) + ".store_qkv", ocm(buf(o, nd, u, 0)), vqkv + r0 * 3 * d.Dv * 2,
                        rows * 3 * d.Dv * 2);
              });
        }
        if (p.vkv && blk > 0) {
          // k and v read in place (row stride Dv); q loaded and the output stored by head
          // group. (The set layout attention_phase takes: q, k, v, output per set.)
          const std::vector<uint32_t> o = phase(p.vkvb(p.gv, p.sv)), a = phase(p.vkvab());
          if (o[0] != a[0] || o[1] != a[1])
            fail("compiler: internal: the tower's keys and values are not where its attention reads them");
          std::vector<uint32_t> sets;
          for (uint32_t i = 0; i < p.sv; ++i) sets.insert(sets.end(), {o[2 + 2 * i], o[0], o[1], o[3 + 2 * i]});
          auto name = [&](uint32_t g0) { return fmt::format("{}.g{}", B, g0 / p.gv); };
          auto io = [&](const uint32_t* u, uint32_t g0, uint32_t ng, bool load, uint32_t ch) {
            const bool w = ch == UINT32_MAX;
            if (vqpark)
              return k.slots(name(g0) + (load ? ".unpark_q" : ".park_attn"), vq_staged(g0 / p.gv, load ? u[0] : u[3]),
                             !load);
            if (!load)
              return copy_shape_on(ch, name(g0) + ".store", {.src = ocm(u[3]), .dst = vqkv + g0 * hdv2,
                                                             .row_bytes = hdv2, .rows = N, .src_stride = hdv2,
                                                             .dst_stride = 3 * d.Dv * 2, .planes = ng,
                                                             .src_plane_stride = N * hdv2, .dst_plane_stride = hdv2});
            copy_shape_on(w ? ch : chq, name(g0) + ".load_q", {.src = vqkv + g0 * hdv2, .dst = ocm(u[0]),
                                                               .row_bytes = hdv2, .rows = N,
                                                               .src_stride = 3 * d.Dv * 2, .dst_stride = hdv2,
                                                               .planes = ng, .src_plane_stride = hdv2,
                                                               .dst_plane_stride = N * hdv2});
          };
          attention_phase(d.hv, p.gv, p.sv, sets, io, [&](const uint32_t* u, uint32_t g0, uint32_t ng) {
            k.attention(name(g0) + ".attention",
                        {.q_heads = ng, .kv_heads = ng, .head_dim = d.hdv, .seq = N, .causal = false, .q_ocm = u[0],
                         .q_row_stride = hdv2, .q_head_stride = N * hdv2, .k_ocm = u[1] + g0 * hdv2,
                         .v_ocm = u[2] + g0 * hdv2, .kv_row_stride = d.Dv * 2, .out_ocm = u[3],
                         .out_row_stride = hdv2, .out_head_stride = N * hdv2, .max_groups = ng});
          });
        } else if (!(p.vqg && blk > 0)) {
          auto name = [&](uint32_t g0) { return fmt::format("{}.g{}", B, g0 / p.gv); };
          auto io = [&](const uint32_t* u, uint32_t g0, uint32_t ng, bool load, uint32_t ch) {
            const std::string A = name(g0);
            const bool w = ch == UINT32_MAX;
            if (!load)
              return copy_shape_on(ch, A + ".store", {.src = ocm(u[3]), .dst = vqkv + g0 * hdv2, .row_bytes = hdv2,
                                                      .rows = N, .src_stride = hdv2, .dst_stride = 3 * d.Dv * 2,
                                                      .planes = ng, .src_plane_stride = N * hdv2,
                                                      .dst_plane_stride = hdv2});
            copy_shape_on(w ? ch : chq, A + ".load_q", {.src = vqkv + g0 * hdv2, .dst = ocm(u[0]), .row_bytes = hdv2,
                                                        .rows = N, .src_stride = 3 * d.Dv * 2, .dst_stride = hdv2,
                                                        .planes = ng, .src_plane_stride = hdv2,
                                                        .dst_plane_stride = N * hdv2});
            copy_shape_on(w ? ch : chkv, A + ".load_k", {.src = vqkv + d.Dv * 2 + g0 * hdv2, .dst = ocm(u[1]),
                                                         .row_bytes = ng * hdv2, .rows = N,
                                                         .src_stride = 3 * d.Dv * 2, .dst_stride = ng * hdv2});
            copy_shape_on(w ? ch : chkv, A + ".load_v", {.src = vqkv + 2 * d.Dv * 2 + g0 * hdv2, .dst = ocm(u[2]),
                                                         .row_bytes = ng * hdv2, .rows = N,
                                                         .src_stride = 3 * d.Dv * 2, .dst_stride = ng * hdv2});
          };
          attention_phase(d.hv, p.gv, p.sv, phase(p.tb(p.gv, p.sv)), io,
                          [&](const uint32_t* u, uint32_t g0, uint32_t ng) {
                            k.attention(name(g0) + ".attention",
                                        {.q_heads = ng, .kv_heads = ng, .head_dim = d.hdv, .seq = N, .causal = false,
                                         .q_ocm = u[0], .q_row_stride = hdv2, .q_head_stride = N * hdv2,
                                         .k_ocm = u[1], .v_ocm = u[2], .kv_row_stride = ng * hdv2, .out_ocm = u[3],
                                         .out_row_stride = hdv2, .out_head_stride = N * hdv2, .max_groups = ng});
                          });
        }
        if (p.vpm) {
          const bool in_place = p.vqg && blk > 0 && p.vpt == N;  // the attention rows where vqg left them
          if (in_place && phase(p.vpmb(1, N, N))[1] != phase(p.vqgb())[1])
            fail("compiler: internal: the tower's attention rows are not where its MLP phase reads them");
          // Over every row, or in tiles of vrpm rows (marks B.t<n>.*).
          uint32_t t = 0;
          for (auto [r0, rows] : tiles_of(N, p.vrpm)) {
            const std::string T = p.vrpm < N ? fmt::format("{}.t{}", B, t++) : B;
            mlp_all_rows({.mark = T, .rows = rows, .width = d.Dv, .o1 = phase(p.vpmb(1, p.vrpm, p.vpt)),
                          .o2 = phase(p.vpmb(2, p.vrpm, p.vpt)), .o3 = phase(p.vpmb(3, p.vrpm, p.vpt)),
                          .load_attn = in_place ? std::function<void(uint32_t, uint32_t, uint32_t)>()
                                                : [&](uint32_t A, uint32_t a0, uint32_t n) {
                            if (!(vqpark && blk > 0))
                              return em.copy(T + ".load_attn", {.src = vqkv + (r0 + a0) * 3 * d.Dv * 2, .dst = ocm(A),
                                                                .row_bytes = d.Dv * 2, .rows = n,
                                                                .src_stride = 3 * d.Dv * 2, .dst_stride = d.Dv * 2});
                            if (r0 + a0 || n != N)
                              fail("compiler: internal: '{}' unparks its attention rows in part", T);
                            k.slots(T + ".unpark_attn", vq_all_rows(A), false);
                          },
                          .res_ddr = vh + r0 * d.Dv * 2,
                          .out = [&](const Tile& t, uint32_t a, uint32_t y) { vb.proj(t, a, y); },
                          .norm2 = [&](const Tile& t, uint32_t h, uint32_t x) { vb.norm2(t, h, x); },
                          .chunk = pm_chunk(d.Iv, 1),
                          .chunks = d.Iv / pm_chunk(d.Iv, 1), .gated = false,
                          .weight = [&](uint32_t c, bool down) { return vpm_name(blk, c, down ? "fc2" : "fc1"); },
                          .up_bias = vb.fc1_bias(), .down_bias = vb.fc2_bias(),
                          .sums_lrm = vsums(p.vrpm) ? vsums(rows) : 0, .part_rows = p.vpt,
                          .store_later = kept_after(blk) || parked_out(blk),
                          .parked = kept_in(blk - 1) ? vpark : 0,
                          .before_last_down = r0 + rows == N ? load_merger_vectors(B, merger_after(blk))
                                                             : std::function<void()>()});
          }
          if (parked_out(blk)) {
            k.park(B + ".park_rows", {.ocm = phase(p.vpmb(1, N, N))[0], .bytes = N * d.Dv * 2, .lrm = vpark}, false);
            k.lrm_end = vpark;  // (the mergers' GEMMs keep below the rows)
          }
        } else {
          // residual rows (loaded, stored), attention / normed rows (loaded), as the copy mode
          // doubles them; proj/fc2 out, fc1 out once.
          const std::vector<uint32_t> o = phase(p.tc(p.rvc, p.svc));
          const size_t nd = doubled(p.svc, 1, 2);
          const uint32_t Tt = o[2], F = o[3];
          auto name = [&](uint32_t t) { return fmt::format("{}.t{}", B, t); };
          row_phase(
              N, p.rvc, p.svc,
              [&](uint32_t t, uint32_t r0, uint32_t rows, uint32_t u, uint32_t cl, uint32_t cst) {
                copy_shape_on(cl, name(t) + ".load_attn",
                              {.src = vqkv + r0 * 3 * d.Dv * 2, .dst = ocm(buf(o, nd, u, 1)), .row_bytes = d.Dv * 2,
                               .rows = rows, .src_stride = 3 * d.Dv * 2, .dst_stride = d.Dv * 2});
                copy_on(cst, name(t) + ".load_residual", vh + r0 * d.Dv * 2, ocm(buf(o, nd, u, 0)), rows * d.Dv * 2);
              },
              [&](uint32_t t, uint32_t r0, uint32_t rows, uint32_t u, const Kick& kick) {
                const Tile tt{.mark = name(t), .r0 = r0, .rows = rows};
                const uint32_t Hb = buf(o, nd, u, 0), X = buf(o, nd, u, 1);
                vb.attn_out(tt, X, Tt, Hb, X);
                kick(0);
                vb.fc1(tt, X, F);
                kick(1);
                vb.fc2(tt, F, Tt);
                vb.residual(tt, "mlp_residual", Hb, Tt);
              },
              [&](uint32_t t, uint32_t r0, uint32_t rows, uint32_t u, uint32_t cst) {
                copy_on(cst, name(t) + ".store", ocm(buf(o, nd, u, 0)), vh + r0 * d.Dv * 2, rows * d.Dv * 2);
              });
        }
        end(B);
        if (const int j = merger_after(blk); j >= 0) merger(j, parked_out(blk));
      }
      merger(-1, parked_out(vc.depth - 1));
      tower_last_lrm_end = k.lrm_end;
      k.lrm_end = 0;
      end("vision_tower");
    }  // s.vision
    if (!s.prefill) {
      if (!part) b.op("halt");
      return 0u;
    }

    // ================= prefill =================
    begin("prefill");
    TextLayer tl{.k = k, .d = d, .vec = VEC, .eps = teps, .first = is, .ni = ni, .i0 = i0,
                 .deepstack_layers = int(vc.deepstack_visual_indexes.size()), .ids_smem = iio_.ids_smem,
                 .embed_scratch = ESCR, .slot0_smem = iio_.slot0_smem, .max_seq = opt_.max_seq};
    // The residual kept in OCM from a layer's MLP phase to the next layer's norm where both run
    // on every row at once (the MLP's LRM sums leave it in the normed rows' buffer, the first
    // of both phases' buffers, which the q|k|v GEMM overwrites): its store to DDR (for the next
    // MLP phase) starts after the next layer's norm weights come in and goes behind the norm,
    // waited for before the q|k|v GEMM (q|k|v in column groups, Streamed::pqg, whose norm
    // writes the rows in place: before the norm); the load is gone. (32x64, 2 MiB, 128 GB/s: a
    // waited store of 11.9 K cycles and a load of 7.1 K a layer.)
    const uint32_t kept_rows = [&]() -> uint32_t {
      if (p.fused || !p.pm || p.rpm != S || !S || !psums(S, p.pg)) return kNone;
      const uint32_t XN = phase(p.pmb(1, p.rpm, p.ppt, p.pg))[0];
      if (p.pqg) return phase(p.pqgb(p.qg))[0] == XN ? XN : kNone;  // (normed in place there)
      if (p.rpa != S) return kNone;
      const std::vector<uint32_t> o = phase(p.pa(p.rpa, p.spa));
      for (size_t j = 1; j < o.size(); ++j)
        if (o[j] < XN + uint64_t(S) * d.H * 2) return kNone;
      return XN;
    }();
    // The kept rows parked in LRM until the MLP phase (park_at) where its parts take every row.
    const uint32_t ppark =
        kept_rows != kNone && p.ppt == S && p.pg.count == 1 ? park_at(psums(S), S * d.H * 2, {{d.qkv_n, d.H}}) : 0;
    // Layer 0's rows (embeddings and image rows) parked there too, not stored, where the GEMM
    // before it left the first q|k|v tile below the park (after the tower: its last GEMM kept
    // below it; a prefill run alone: nothing handed).
    const bool park0 = ppark && (!s.vision || (tower_last_lrm_end && tower_last_lrm_end <= ppark));
    bool parked0 = false;  // (layer 0's rows went to the park)
    // The attention's output, written over q in the q|k|v rows (pq), parked in LRM [0, ...) for
    // the MLP phase over every row at once (its o_proj's input) where it fits the LRM the
    // kernels between two GEMMs may use: not stored and loaded back.
    const bool apark = S && p.pq && p.pm && p.rpm == S && p.ppt == S && !opt_.image_no_park &&
                       !opt_.fp16_channels && lrm_park_bytes(cfg_, S * qd) <= KernelCalls::kLrmShared;
    // The KV write waited for after the attention, not before it, where the attention reads
    // the keys in the q|k|v rows (the write reads them too) and neither loads nor stores (its
    // output parked): the write's DDR time under the attention's.
    const bool kv_own = !p.fused && p.pq && p.pbq_own && p.rpa == S && apark;
    // The next layer's norm vectors loaded after this layer's post_norm (the MLP phase over
    // every row: the last read of them) on a DMA channel the GEMMs leave free, not at the next
    // layer's start, where the load waits behind the next GEMM's weight units in the DDR queue
    // (32x64, 2 MiB, 64 GB/s: 10.4 K cycles a layer for 8.7 KB).
    const uint32_t cn = nch - 1;
    const bool early_norms = p.pm && p.rpm == S && p.ppt == S && p.channels < nch && !opt_.fp16_channels;
    // The rows past layer i's KV write (read_from): the whole-layer tiles run those rows'
    // attention, o_proj and MLP; the three phases, after the q|k|v phase, the row alone (the
    // tail below) or none.
    auto tail_from = [&](int i) { return read_from(s, S, i, tc.num_hidden_layers); };
    // The three phases' tail: row S - 1's attention, tg kv heads a call, then the MLP phase's
    // kernels on that row from its residual in DDR (mlp_all_rows on the MLP chunk packings with
    // fp32 sums in OCM where the phase runs over every row, else after_attention on the gate|up
    // chunks and down), the row stored for the head. Its q, k and v: where the q|k|v phase is
    // one tile with no cached tokens (tail_own), in place in its q|k|v rows (the tail's buffers
    // after them); else q from DDR (stored for it where the attention phase would read it in
    // the q|k|v rows) and the keys and values from the cache, taken only where the layer's
    // every-row MLP is estimated to take longer than its weights' DDR time by more than that
    // reload. Buffers: the q|k|v rows or q, the attention output (after_attention: then the
    // normed row), the MLP's (over every row: normed row, residual, sums, up output, residual
    // again; else residual, MLP activation), the staged k, v. The residual kept
    // from the layer before goes to DDR, not to the LRM park. Where the buffers do not fit, or
    // the last layer adds DeepStack rows or is the first, the attention and MLP phases run every
    // row (tg = 0).
    const bool tail_own = off == 0 && p.rpa == S && !p.pqg;
    const uint32_t us = up_row(true, pm_down(), pm_fused) * pm_chunk(d.I, 2);  // (its up output row, pm)
    auto tail_bufs = [&](uint32_t g) -> V64 {
      const uint64_t kv = uint64_t(off + S) * g * hd2, w2 = d.H * 2;
      V64 v{tail_own ? p.pa(p.rpa, p.spa)[0] : qd, std::max<uint64_t>(qd, w2)};
      if (p.pm) v.insert(v.end(), {w2, w2, 2 * w2, us, w2});
      else v.insert(v.end(), {w2, uint64_t(d.I + cw) * 2});
      if (!tail_own) v.insert(v.end(), {kv, kv});
      return v;
    };
    const bool tail_ok = [&] {
      if (p.fused || !s.head || !S || tc.num_hidden_layers < 2 ||
          tc.num_hidden_layers <= int(vc.deepstack_visual_indexes.size()))
        return false;
      if (tail_own) return true;
      const double macs = double(S - 1) * d.H * (d.nq * d.hd + 3.0 * d.I), bpc = cfg_.ddr_bytes_per_cycle();
      return macs / gemm_cfg_.mac_peak(true) - double(past_kv_weight_bytes()) / bpc >
             2.0 * (off + S) * d.nkv * hd2 / bpc;
    }();
    const uint32_t tg = !tail_ok ? 0 : groups_per_call(d.nkv, gcap, [&](uint32_t g) {
      return base + sum_fp(tail_bufs(g)) <= cfg_.ocm_bytes;
    });
    if (!p.fused && s.head && S)
      tail_note = !tg      ? "; the prefill's last layer on every row"
                  : tail_own ? "; the prefill's last layer on the head's row, its q, k, v in the q|k|v rows"
                             : "; the prefill's last layer on the head's row, its keys and values reloaded";
    for (int i = 0; i < tc.num_hidden_layers; ++i) {
      const std::string L = fmt::format("P{}", i);
      tl.layer = i;
      begin(L);
      if (i && early_norms) em.wait(cn);  // (started after the layer before's post_norm)
      else em.copy(L + ".load_norms", ddr_.bus(layer_name(i, "norms")), ocm(VEC), d.text_vec() * 2);
      const uint32_t lpark = tg && tail_from(i) == S - 1 ? 0 : ppark;  // (the tail reads the residual in DDR)
      if (i && kept_rows != kNone) keep_rows(L, kept_rows, S * d.H * 2, lpark, ah);
      const uint32_t kc = ddr_.bus(layer_name(i, "kcache")), vcache = ddr_.bus(layer_name(i, "vcache"));
      const uint32_t qkvs = d.qkv_n * 2, as = (d.I + cw) * 2;  // q|k|v and MLP activation row strides
      // A tile's rows up to the attention: (layer 0) the embeddings into In, the image rows
      // spliced in (stored when the residual goes through DDR), the norm into X, the q|k|v
      // GEMM into QKV (pre_gemm() just before it), per-head norms and rope in the q|k|v
      // rows, k and v appended to the KV cache (the write overlaps q's norm and rotary, and
      // with kv_own the attention too: waited for after it).
      auto before_attention = [&](const std::string& T, uint32_t r0, uint32_t rows, uint32_t In, bool store_in,
                                  uint32_t X, uint32_t QKV, uint32_t RC, uint32_t RS,
                                  const std::function<void()>& pre_gemm, const std::function<void()>& post_gemm,
                                  const std::function<void()>& rope_ready) {
        const Tile t{.mark = T, .r0 = r0, .rows = rows};
        if (i == 0) {
          tl.embed(t, In);
          if (store_in && park0 && rows == S) {
            k.park(T + ".park_residual", {.ocm = In, .bytes = S * d.H * 2, .lrm = ppark}, false);
            k.lrm_end = ppark;
            parked0 = true;
          } else if (store_in) {
            em.copy(T + ".store", ocm(In), ah + r0 * d.H * 2, rows * d.H * 2);
          }
        }
        tl.input_norm(t, In, X);
        pre_gemm();
        tl.qkv(t, X, QKV);
        if (post_gemm) post_gemm();
        // q and k normed and rotated in one call (rope_ready: cos and sin arrive after the
        // GEMM), v's cache write started before it, k's after. The cache slot of row r0 is
        // slot0 + r0.
        if (rope_ready) rope_ready();
        tl.kv_write(t, QKV, false, "v");
        tl.qk_norm_rope(t, QKV, RC, RS);
        tl.kv_write(t, QKV, false, "k");
        if (!kv_own) emit_kv_write_wait(b, cfg_);
      };
      // A tile's rows after the attention (its output in X, row stride qd): the o GEMM into
      // ACT, the residual Hb, its norm into X, the MLP (kick(0) before its first gate|up
      // chunk, kick(1) before the middle one) and its residual, the DeepStack rows.
      auto after_attention = [&](const std::string& T, uint32_t r0, uint32_t rows, uint32_t Hb, uint32_t X,
                                 uint32_t ACT, const Kick& kick) {
        const Tile t{.mark = T, .r0 = r0, .rows = rows};
        tl.attn_out(t, X, ACT, Hb, X);
        kick(0);
        for (uint32_t c = 0; c < nchunks; ++c) {
          if (c == nchunks / 2) kick(1);
          // gate|up of chunk c at columns [c cw, c cw + 2 cw), its SiLU gate over the gate half
          tl.gate_up(t, {.call = c, .chunk0 = c, .n = 2 * cw, .x = X, .y = ACT + c * cw * 2, .ys = as,
                         .fused = gu_fused});
        }
        tl.down(t, ACT, as, X, Hb);
        tl.deepstack(t, Hb, X);
      };
      auto name = [&](uint32_t t) { return fmt::format("{}.t{}", L, t); };
      auto load_rope = [&](const std::string& T, uint32_t r0, uint32_t rows, uint32_t cl, uint32_t RC, uint32_t RS) {
        copy_on(cl, T + ".load_rope", tcos + r0 * d.hd * 4, ocm(RC), rows * d.hd * 4);
        copy_on(cl, T + ".load_rope_sin", tsin + r0 * d.hd * 4, ocm(RS), rows * d.hd * 4);
      };
      if (p.fused) {
        // residual rows (loaded, stored), cos, sin (loaded), as the copy mode doubles them;
        // normed rows / attention output, q|k|v (and the attention's staging) / MLP
        // activation once.
        const std::vector<uint32_t> o = phase(p.pf(p.rpf, p.spf));
        const size_t nd = doubled(p.spf, 1, 3);
        const uint32_t X = o[3], BIG = o[4], gk = p.gpf;
        const auto [k0, v0] = stage(p.rpf, gk);
        row_phase(
            S, p.rpf, p.spf,
            [&](uint32_t t, uint32_t r0, uint32_t rows, uint32_t u, uint32_t cl, uint32_t cst) {
              if (i) copy_on(cst, name(t) + ".load", ah + r0 * d.H * 2, ocm(buf(o, nd, u, 0)), rows * d.H * 2);
              load_rope(name(t), r0, rows, cl, buf(o, nd, u, 1), buf(o, nd, u, 2));
            },
            [&](uint32_t t, uint32_t r0, uint32_t rows, uint32_t u, const Kick& kick) {
              const std::string T = name(t);
              const uint32_t Hb = buf(o, nd, u, 0);
              before_attention(T, r0, rows, Hb, false, X, BIG, buf(o, nd, u, 1), buf(o, nd, u, 2), [] {}, {}, {});
              // The rows past the KV write: from a0 (all but in the last layer: tail_from).
              const uint32_t a0 = std::max(r0, tail_from(i)), n = r0 + rows > a0 ? r0 + rows - a0 : 0;
              if (!n) {
                kick(0);
                kick(1);
                return;
              }
              // Query rows [a0, r0 + rows) after off cached tokens see keys [0, off + r0 + rows):
              // read back from the cache, but for the first tile with none cached, whose keys
              // are its own (read in the q|k|v rows).
              const uint32_t keys = off + r0 + rows;
              const bool own = off + r0 == 0;
              for (uint32_t g0 = 0; g0 < d.nkv; g0 += gk) {
                const uint32_t ng = std::min(gk, d.nkv - g0);
                const std::string A = fmt::format("{}.g{}", T, g0 / gk);
                if (!own) k.load_kv(A, {.k_cache = kc, .v_cache = vcache, .max_seq = opt_.max_seq, .head_dim = d.hd,
                                        .g0 = g0, .heads = ng, .keys = keys,
                                        .k_ocm = uint32_t(BIG + k0), .v_ocm = uint32_t(BIG + v0)});
                k.attention(A + ".attention",
                            {.q_heads = ng * G, .kv_heads = ng, .head_dim = d.hd, .seq = n, .causal = true,
                             .q_ocm = BIG + (a0 - r0) * qkvs + g0 * G * hd2, .q_row_stride = qkvs, .q_head_stride = hd2,
                             .k_ocm = own ? BIG + qd + g0 * hd2 : uint32_t(BIG + k0),
                             .v_ocm = own ? BIG + qd + kd + g0 * hd2 : uint32_t(BIG + v0),
                             .kv_row_stride = own ? qkvs : ng * hd2, .out_ocm = X + g0 * G * hd2,
                             .out_row_stride = qd, .out_head_stride = hd2, .kv_offset = off + a0});
              }
              after_attention(T, a0, n, Hb + (a0 - r0) * d.H * 2, X, BIG, kick);
            },
            [&](uint32_t t, uint32_t r0, uint32_t rows, uint32_t u, uint32_t cst) {
              copy_on(cst, name(t) + ".store", ocm(buf(o, nd, u, 0)), ah + r0 * d.H * 2, rows * d.H * 2);
            });
      } else {
        if (p.pqg) {
          // Every row normed in place, then the q|k|v GEMM a column group at a time (Streamed::pqg):
          // q groups normed, rotated and stored to act.q; each k group normed and rotated, then its
          // v group, and both written to the KV cache; the two output buffers alternate, each
          // group's copies waited for before the group after next writes its buffer.
          const std::vector<uint32_t> o = phase(p.pqgb(p.qg));
          const uint32_t X = o[0], RC = o[1], RS = o[2], qg = p.qg, gh = qg / d.hd, qgroups = d.nq / gh;
          const Tile t{.mark = L, .r0 = 0, .rows = S};
          if (i == 0) {
            tl.embed(t, X);
            em.copy(L + ".store", ocm(X), ah, S * d.H * 2);
          } else if (kept_rows == kNone) {
            em.copy(L + ".load", ah, ocm(X), S * d.H * 2);
          }
          load_rope(L, 0, S, ca, RC, RS);
          if (i && kept_rows != kNone && !lpark) em.wait(cs);  // (the residual's store reads the rows normed here)
          tl.input_norm(t, X, X);
          em.wait(ca);
          const std::string W = layer_name(i, "qkv.gemm");
          uint32_t call = 0;
          // GEMM columns [c0, c0 + qg) into output buffer `call % 2`, after that buffer's copies.
          auto group = [&](const std::string& G, uint32_t c0) {
            const uint32_t Y = o[3 + call % 2];
            if (call >= 2) em.wait(cx);
            ++call;
            k.gemm(G, {.w = W, .m = S, .n = qg, .k = d.H, .x = X, .xs = d.H * 2, .y = Y, .ys = qg * 2,
                       .w_off = k.column_offset(W, d.qkv_n, d.H, c0)});
            return Y;
          };
          for (uint32_t g = 0; g < qgroups; ++g) {
            const std::string G = fmt::format("{}.q{}", L, g);
            const uint32_t Y = group(G + ".qkv", g * qg);
            tl.head_group(G, t, gh, Y, qg * 2, tl.q_norm_w(), RC, RS);
            copy_shape_on(cx, G + ".store_q", {.src = ocm(Y), .dst = aq + g * qg * 2, .row_bytes = qg * 2, .rows = S,
                                               .src_stride = qg * 2, .dst_stride = qd});
          }
          for (uint32_t g = 0; g < d.nkv / gh; ++g) {
            const std::string G = fmt::format("{}.kv{}", L, g);
            const uint32_t K = group(G + ".k", d.nq * d.hd + g * qg);
            tl.head_group(G + ".k", t, gh, K, qg * 2, tl.k_norm_w(), RC, RS);
            const uint32_t V = group(G + ".v", d.nq * d.hd + d.nkv * d.hd + g * qg);
            const uint32_t hd2 = d.hd * 2, plane = g * gh * opt_.max_seq * hd2;
            k.kv_write(G + ".kv_write", {.kv_heads = gh, .head_dim = d.hd, .rows = S, .k_ocm = K, .v_ocm = V,
                                         .row_stride = qg * 2, .k_cache_ddr = kc + plane, .v_cache_ddr = vcache + plane,
                                         .max_seq = opt_.max_seq, .pos_smem = tl.slot0_smem, .wait = true});
          }
          em.wait(cx);
        } else {
          // q|k|v (q stored), rows, cos, sin (loaded), as the copy mode doubles them.
          const std::vector<uint32_t> o = phase(p.pa(p.rpa, p.spa));
          const size_t nd = doubled(p.spa, 1, 4);
          const bool late = o.size() == 2;  // waited, cos and sin over the rows after the GEMM (p.pa)
          row_phase(
              S, p.rpa, p.spa,
              [&](uint32_t t, uint32_t r0, uint32_t rows, uint32_t u, uint32_t cl, uint32_t) {
                if (i && kept_rows == kNone)
                  copy_on(cl, name(t) + ".load", ah + r0 * d.H * 2, ocm(buf(o, nd, u, 1)), rows * d.H * 2);
                if (!late) load_rope(name(t), r0, rows, cl, buf(o, nd, u, 2), buf(o, nd, u, 3));
              },
              [&](uint32_t t, uint32_t r0, uint32_t rows, uint32_t u, const Kick& kick) {
                const uint32_t X = buf(o, nd, u, 1), RC = late ? X : buf(o, nd, u, 2),
                               RS = late ? X + rows * d.hd * 4 : buf(o, nd, u, 3);
                const bool kept = i && kept_rows != kNone;
                before_attention(name(t), r0, rows, kept ? kept_rows : X, true, X, buf(o, nd, u, 0), RC, RS,
                                 [&] {
                                   kick(1);
                                   if (kept && !lpark) em.wait(cs);  // (the residual's store reads the q|k|v rows)
                                 },
                                 late ? std::function<void()>([&] { load_rope(name(t), r0, rows, ca, RC, RS); })
                                      : nullptr,
                                 late ? std::function<void()>([&] { em.wait(ca); }) : nullptr);
              },
              [&](uint32_t t, uint32_t r0, uint32_t rows, uint32_t u, uint32_t cst) {
                if (!p.pq) copy_shape_on(cst, name(t) + ".store_q", {.src = ocm(buf(o, nd, u, 0)),
                                                                     .dst = aq + r0 * qd, .row_bytes = qd,
                                                                     .rows = rows, .src_stride = qkvs,
                                                                     .dst_stride = qd});
                else if (tail_from(i) == S - 1 && tg && !tail_own && r0 + rows == S)
                  copy_on(cst, name(t) + ".store_last_q", ocm(buf(o, nd, u, 0) + (rows - 1) * qkvs), aq + (S - 1) * qd,
                          qd);
              });
        }
        // The last layer: the tail, or without the head its keys and values alone.
        if (tail_from(i) == S || (tg && tail_from(i) == S - 1)) {
          if (kv_own) emit_kv_write_wait(b, cfg_);
          if (tail_from(i) == S - 1) {
            const std::vector<uint32_t> o = phase(tail_bufs(tg));
            const uint32_t AO = o[1];
            // q, k, v: the q|k|v rows' (row stride qkvs) or q's row and the staged keys and values
            const uint32_t Q = tail_own ? o[0] + (S - 1) * qkvs : o[0], K = tail_own ? o[0] + qd : o[p.pm ? 7 : 4],
                           Vb = tail_own ? o[0] + qd + kd : o[p.pm ? 8 : 5], ks = tail_own ? qkvs : 0;
            const std::string T = L + ".tail";
            k.lrm_end = 0;  // (no partial sums or parks past here)
            if (!tail_own) em.copy(T + ".load_q", aq + (S - 1) * qd, ocm(Q), qd);
            for (auto [g0, ng] : tiles_of(d.nkv, tg)) {
              const std::string A = fmt::format("{}.g{}", T, g0 / tg);
              if (!tail_own)
                k.load_kv(A, {.k_cache = kc, .v_cache = vcache, .max_seq = opt_.max_seq, .head_dim = d.hd, .g0 = g0,
                              .heads = ng, .keys = off + S, .k_ocm = K, .v_ocm = Vb});
              k.attention(A + ".attention",
                          {.q_heads = ng * G, .kv_heads = ng, .head_dim = d.hd, .seq = 1, .causal = true,
                           .q_ocm = Q + g0 * G * hd2, .q_row_stride = qd, .q_head_stride = hd2,
                           .k_ocm = K + (ks ? g0 * hd2 : 0), .v_ocm = Vb + (ks ? g0 * hd2 : 0),
                           .kv_row_stride = ks ? ks : ng * hd2, .out_ocm = AO + g0 * G * hd2,
                           .out_row_stride = qd, .out_head_stride = hd2, .kv_offset = off + S - 1});
            }
            const uint32_t res = ah + (S - 1) * d.H * 2;
            if (p.pm) {
              mlp_all_rows({.mark = T, .rows = 1, .width = d.H, .o1 = {o[2], AO, o[3]}, .o2 = {o[2], o[4], o[5]},
                            .o3 = {o[2], o[6]}, .load_attn = {}, .res_ddr = res,
                            .out = [&](const Tile& t, uint32_t a, uint32_t y) { tl.o_proj(t, a, y); },
                            .norm2 = [&](const Tile& t, uint32_t h, uint32_t x) { tl.post_norm(t, h, x); },
                            .chunk = pm_chunk(d.I, 2), .chunks = d.I / pm_chunk(d.I, 2), .gated = true,
                            .pairs = pm_down(),
                            .weight = [&](uint32_t c, bool down) { return pm_name(i, c, down ? "down" : "gu"); },
                            .up_bias = kNone, .down_bias = kNone, .after = {}, .sums_lrm = 0, .part_rows = 0,
                            .store_later = false, .parked = 0, .after_norm = {}, .before_last_down = {}});
            } else {
              em.copy(T + ".load_residual", res, ocm(o[2]), d.H * 2);
              after_attention(T, S - 1, 1, o[2], AO, o[3], [](int) {});
              em.copy(T + ".store", ocm(o[2]), res, d.H * 2);
            }
          }
          end(L);
          continue;
        }
        {
          // Keys and values of every row from the cache (slot0 = off: rows at slots [off, off + S)), and of
          // the off cached tokens before them.
          auto gname = [&](uint32_t g0) { return fmt::format("{}.g{}", L, g0 / p.gp); };
          // q kept (Streamed::pq): read and overwritten in the q|k|v rows at Q0 (row stride
          // qkvs), each group's output stored from there.
          std::vector<uint32_t> sets = phase(p.pq ? p.pbq(p.gp, p.sp) : p.pb(p.gp, p.sp));
          const uint32_t Q0 = sets[0];
          const bool own = p.pq && p.pbq_own;  // k and v in the q|k|v rows (Q0 + qd, + kd)
          if (p.pq) {
            std::vector<uint32_t> four;  // (a set's q and output: the q|k|v rows)
            for (uint32_t j = 0; j < p.sp; ++j) {
              const uint32_t kb = own ? Q0 + qd : sets[1 + 2 * j], vb = own ? Q0 + qd + kd : sets[2 + 2 * j];
              four.insert(four.end(), {Q0, kb, vb, Q0});
            }
            // (own: nothing loads and each call's output is stored from the q|k|v rows, so the
            // one set serves as two: the stores go behind the next call)
            if (own && p.sp == 1) four.insert(four.end(), four.begin(), four.end());
            sets = four;
          }
          auto io = [&](const uint32_t* u, uint32_t g0, uint32_t ng, bool load, uint32_t ch) {
            const std::string A = gname(g0);
            const bool w = ch == UINT32_MAX;
            const uint32_t nh = ng * G;
            if (!load && apark) return;  // (parked after the last call)
            if (!load && p.pq)
              return copy_shape_on(ch, A + ".store", {.src = ocm(Q0 + g0 * G * hd2), .dst = aq + g0 * G * hd2,
                                                      .row_bytes = nh * hd2, .rows = S, .src_stride = qkvs,
                                                      .dst_stride = qd});
            if (!load)
              return copy_shape_on(ch, A + ".store", {.src = ocm(u[3]), .dst = aq + g0 * G * hd2, .row_bytes = hd2,
                                                      .rows = S, .src_stride = hd2, .dst_stride = qd, .planes = nh,
                                                      .src_plane_stride = S * hd2, .dst_plane_stride = hd2});
            if (!p.pq)
              copy_shape_on(w ? ch : chq, A + ".load_q", {.src = aq + g0 * G * hd2, .dst = ocm(u[0]),
                                                          .row_bytes = hd2, .rows = S, .src_stride = qd,
                                                          .dst_stride = hd2, .planes = nh, .src_plane_stride = hd2,
                                                          .dst_plane_stride = S * hd2});
            if (own) return;
            copy_shape_on(w ? ch : chkv, A + ".load_k", {.src = kc + g0 * opt_.max_seq * hd2, .dst = ocm(u[1]),
                                                         .row_bytes = hd2, .rows = off + S, .src_stride = hd2,
                                                         .dst_stride = ng * hd2, .planes = ng,
                                                         .src_plane_stride = opt_.max_seq * hd2,
                                                         .dst_plane_stride = hd2});
            copy_shape_on(w ? ch : chkv, A + ".load_v", {.src = vcache + g0 * opt_.max_seq * hd2, .dst = ocm(u[2]),
                                                         .row_bytes = hd2, .rows = off + S, .src_stride = hd2,
                                                         .dst_stride = ng * hd2, .planes = ng,
                                                         .src_plane_stride = opt_.max_seq * hd2,
                                                         .dst_plane_stride = hd2});
          };
          const uint32_t nsets = uint32_t(sets.size() / 4);
          auto attend = [&](const uint32_t* u, uint32_t g0, uint32_t ng) {
            OcmAttnArgs at{.q_heads = ng * G, .kv_heads = ng, .head_dim = d.hd, .seq = S, .causal = true,
                           .q_ocm = u[0], .q_row_stride = hd2, .q_head_stride = S * hd2, .k_ocm = u[1], .v_ocm = u[2],
                           .kv_row_stride = ng * hd2, .out_ocm = u[3], .out_row_stride = hd2,
                           .out_head_stride = S * hd2, .max_groups = ng, .kv_offset = off};
            if (p.pq) {
              at.q_ocm = at.out_ocm = Q0 + g0 * G * hd2;
              at.q_row_stride = at.out_row_stride = qkvs;
              at.q_head_stride = at.out_head_stride = hd2;
            }
            if (own) {
              at.k_ocm = u[1] + g0 * hd2;
              at.v_ocm = u[2] + g0 * hd2;
              at.kv_row_stride = qkvs;
            }
            k.attention(gname(g0) + ".attention", at);
          };
          // (kv_own: no copies, so nothing to wait for between the calls; the KV write runs on)
          if (kv_own)
            for (auto [g0, ng] : tiles_of(d.nkv, p.gp)) attend(sets.data(), g0, ng);
          else
            attention_phase(d.nkv, p.gp, nsets, sets, io, attend);
          if (apark) k.park(L + ".park_attn", {.ocm = Q0, .bytes = S * qd, .lrm = 0, .rows = S, .stride = qkvs}, false);
          if (kv_own) emit_kv_write_wait(b, cfg_);  // (before the MLP phase writes over the q|k|v rows)
        }
        if (p.pm) {
          // Over every row, or in tiles of rpm rows (marks L.t<n>.*).
          uint32_t t = 0;
          for (auto [r0, rows] : tiles_of(S, p.rpm)) {
            const std::string T = p.rpm < S ? name(t++) : L;
            mlp_all_rows({.mark = T, .rows = rows, .width = d.H, .o1 = phase(p.pmb(1, p.rpm, p.ppt, p.pg)),
                          .o2 = phase(p.pmb(2, p.rpm, p.ppt, p.pg)), .o3 = phase(p.pmb(3, p.rpm, p.ppt, p.pg)),
                          .load_attn = [&](uint32_t A, uint32_t a0, uint32_t n) {
                            if (!apark) return em.copy(T + ".load_attn", aq + (r0 + a0) * qd, ocm(A), n * qd);
                            if (r0 + a0 || n != S)
                              fail("compiler: internal: '{}' unparks its attention rows in part", T);
                            k.park(T + ".unpark_attn", {.ocm = A, .bytes = n * qd, .lrm = 0}, true);
                          },
                          .res_ddr = ah + r0 * d.H * 2,
                          .out = [&](const Tile& t, uint32_t a, uint32_t y) { tl.o_proj(t, a, y); },
                          .norm2 = [&](const Tile& t, uint32_t h, uint32_t x) { tl.post_norm(t, h, x); },
                          .chunk = pm_chunk(d.I, 2), .chunks = d.I / pm_chunk(d.I, 2),
                          .gated = true, .pairs = pm_down(),
                          .weight = [&](uint32_t c, bool down) { return pm_name(i, c, down ? "down" : "gu"); },
                          .up_bias = kNone, .down_bias = kNone,
                          .after = [&](uint32_t X3, uint32_t a0, uint32_t n, uint32_t DS) {  // the DeepStack rows
                            tl.deepstack({.mark = T, .r0 = r0 + a0, .rows = n}, X3, DS);
                          },
                          .sums_lrm = psums(p.rpm, p.pg) ? psums(rows, p.pg) : 0, .part_rows = p.ppt,
                          .store_later = kept_rows != kNone && i + 1 < tc.num_hidden_layers,
                          .parked = (i ? kept_rows != kNone : parked0) ? ppark : 0,
                          .after_norm = [&] {
                            if (early_norms && i + 1 < tc.num_hidden_layers)
                              copy_on(cn, L + ".load_next_norms", ddr_.bus(layer_name(i + 1, "norms")), ocm(VEC),
                                      d.text_vec() * 2);
                          },
                          .groups = p.pg, .mid_ddr = aq,
                          .sums_later = p.pg.count > 1 ? lrm_sums_at(gemm_cfg_, rows, p.pg.cols(d.H, 1), pm_chunk(d.I, 2))
                                                       : 0});
          }
        } else {
          // residual rows (loaded, stored), attention / normed rows (loaded), as the copy mode
          // doubles them; GEMM outputs, MLP activation once.
          const std::vector<uint32_t> o = phase(p.pc(p.rpc, p.spc));
          const size_t nd = doubled(p.spc, 1, 2);
          row_phase(
              S, p.rpc, p.spc,
              [&](uint32_t t, uint32_t r0, uint32_t rows, uint32_t u, uint32_t cl, uint32_t cst) {
                copy_on(cl, name(t) + ".load_attn", aq + r0 * qd, ocm(buf(o, nd, u, 1)), rows * qd);
                copy_on(cst, name(t) + ".load_residual", ah + r0 * d.H * 2, ocm(buf(o, nd, u, 0)), rows * d.H * 2);
              },
              [&](uint32_t t, uint32_t r0, uint32_t rows, uint32_t u, const Kick& kick) {
                after_attention(name(t), r0, rows, buf(o, nd, u, 0), buf(o, nd, u, 1), o[2], kick);
              },
              [&](uint32_t t, uint32_t r0, uint32_t rows, uint32_t u, uint32_t cst) {
                copy_on(cst, name(t) + ".store", ocm(buf(o, nd, u, 0)), ah + r0 * d.H * 2, rows * d.H * 2);
              });
        }
      }
      end(L);
    }
    end("prefill");
    if (!s.head) {
      b.op("halt");
      return 0u;
    }

    // ================= head (last row) =================
    begin("head");
    const std::vector<uint32_t> o = phase(p.hd);
    const uint32_t X = o[0], LOG = o[1], SCR = o[2];
    em.copy("head.load", ah + (S - 1) * d.H * 2, ocm(X), d.H * 2);
    Head{.k = k, .d = d, .vec = VEC, .eps = teps}.run(X, X, LOG, SCR, uint32_t(cfg_.ocm_bytes - SCR));
    end("head");
    b.op("halt");
    return LOG;
  };
  // First emission: the GEMM order (for the prefetch chain); second: the program.
  kernels::Builder own;
  kernels::Builder& b = into ? *into : own;
  {
    kernels::Builder scratch;
    std::vector<KernelCall> calls;
    generate(scratch, calls, true);
  }
  CompiledProgram out;
  if (calls) out.calls = std::move(*calls);
  out.logits_ocm = generate(b, out.calls, false);
  if (part) *calls = std::move(out.calls);
  else out.program = b.finish();
  // The prefill's part of the plan: whole layers a tile, or its qkv|MLP phases.
  auto part_tiles = [](uint32_t pt, uint32_t rows) {
    return pt < rows ? fmt::format(", its out GEMM and residuals in tiles of {}", pt) : std::string();
  };
  const std::string rope_note =
      std::string(!p.fused && p.pa(p.rpa, p.spa).size() == 2 ? "; cos, sin over the qkv rows" : "") +
      (p.fused || !p.pq ? ""
       : p.pbq_own      ? "; the attention reads q, k and v in the q|k|v rows"
                        : "; the attention reads q in the q|k|v rows");
  const std::string parows = p.pqg ? fmt::format("{} (q|k|v {} columns a call)", S, p.qg) : std::to_string(p.rpa);
  const std::string prows = p.fused ? fmt::format("{} (whole layers)", p.rpf)
                            : p.pm    ? fmt::format("{}|{} (qkv|MLP phases{}; the MLP in chunks of {} with fp32 "
                                                    "partial sums in {}{}{})", parows, p.rpm, rope_note,
                                                    pm_chunk(d.I, 2), psums(p.rpm, p.pg) ? "LRM" : "OCM",
                                                    part_tiles(p.ppt, p.rpm) +
                                                        (p.pg.count > 1 ? fmt::format(", the down in {} column groups{}", p.pg.count,
                                                                                      p.pg.first ? fmt::format(" ({} columns, then {})", p.pg.first, p.pg.cols(d.H, 1)) : "")
                                                                        : ""),
                                                    pm_down() > 1 ? ", the down over two chunks a call" : "")
                                      : fmt::format("{}|{} (qkv|MLP phases{})", parows, p.rpc, rope_note);
  const std::string pcopies =
      p.fused ? std::string(mode_name(p.spf)) : fmt::format("{}|{}", mode_name(p.spa), mode_name(p.spc));
  const uint32_t pheads = p.fused ? p.gpf : p.gp;
  // The tower's row tiles (qkv|MLP phases), and the prefill's.
  const std::string va = p.vqa || p.vqg ? fmt::format("{} (block 0: {})", N, p.rva) : std::to_string(p.rva);
  const std::string qkv_note = p.vkv   ? std::string("; q, k, v in turn, k and v kept for the attention")
                               : p.vqa ? fmt::format("; q, k, v in turn{}{}{}", p.vqt < N ? fmt::format(" in tiles of {}", p.vqt) : "",
                                                     p.vqo == 1 ? " through one buffer" : "",
                                                     p.vqc ? fmt::format(", {} columns a call", p.vqc) : "")
                               : p.vqg ? fmt::format("; q|k|v {} heads at a time beside the attention", vgq_heads(d.hv))
                                       : "";
  const std::string mrows = p.mpm ? fmt::format("{} (in chunks of {} with fp32 partial sums in LRM{})", Nt,
                                                pm_chunk(d.Md, 1),
                                                p.mg_groups > 1 ? fmt::format(", fc2 in {} column groups", p.mg_groups)
                                                                : "")
                                  : std::to_string(p.rm);
  const std::string vrows =
      p.vpm ? fmt::format("{}|{} (qkv|MLP phases; the MLP in chunks of {} with fp32 partial sums in {}{}{})", va,
                          p.vrpm, pm_chunk(d.Iv, 1), vsums(p.vrpm) ? "LRM" : "OCM", part_tiles(p.vpt, p.vrpm),
                          qkv_note)
            : fmt::format("{}|{} (qkv|MLP phases{})", va, p.rvc, qkv_note);
  if (s.vision && s.prefill)
    out.plan = fmt::format("streamed: rows per tile tower {}, mergers {}, prefill {}; copies "
                           "tower {}|{}, prefill {}; kv heads per attention call tower {}, prefill {} ({} buffer "
                           "sets); GEMM DMA channels {}",
                           vrows, mrows, prows, mode_name(p.sva), mode_name(p.svc), pcopies, p.gv, pheads,
                           p.fused ? fmt::format("{} tower", p.sv) : fmt::format("{}|{}", p.sv, p.sp), p.channels);
  else if (s.vision)
    out.plan = fmt::format("streamed: rows per tile {}, mergers {}; copies {}|{}; kv heads "
                           "per attention call {} ({} buffer sets); GEMM DMA channels {}",
                           vrows, mrows, mode_name(p.sva), mode_name(p.svc), p.gv, p.sv, p.channels);
  else
    out.plan = fmt::format("streamed: rows per tile {}; copies {}; kv heads per attention call {}{}; GEMM DMA "
                           "channels {}",
                           prows, pcopies, pheads, p.fused ? "" : fmt::format(" ({} buffer sets)", p.sp), p.channels);
  out.plan += tail_note;
  out.est_cycles = p.cost;
  return out;
}

}  // namespace gpnpu::model
