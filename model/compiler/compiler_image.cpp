// The image program: vision tower, DeepStack and final mergers, embedding lookup
// and image splice, the prefill layers with DeepStack additions, and the LM head on
// the last row. Two plans, chosen from the config by the OCM rule in image_program():
// the resident plan below when its regions fit ocm_bytes (qc-u's 4 MiB and up), else
// the streamed plan (image_streamed: activations in DDR, row tiles; see there), or the
// resident tower then the streamed prefill when the tower alone fits.
//
// Resident plan: activations stay in OCM in six regions reused phase by phase:
//
//   region  tower                              prefill
//   H       residual stream [N][Dv]            residual stream [S][D]
//   XN      LN output, attention output        RMSNorm output, attention output
//   BIG     patches, qkv [N][3Dv], fc1 chunk,   qkv [S][q+k+v] + dense v, attention
//           merger fc1                         staging, MLP activation [S][I], logits
//   TMP     attention staging, proj/fc2 out,   dense q | k, o / down out,
//           merger out                         gate|up chunk, DeepStack rows, GEMV buffers
//   ROPE    rotary tables [N][hd_v] x2         rotary tables [S][hd] x2
//   VEC     norm weights and biases of the block or layer being run
// plus the GEMM DMA buffers. Region sizes are the maxima over both phases.
//
// Tiling rules: the tower MLP runs in row chunks of rcv rows (N, or the fewest balanced
// chunks of at most 3 Dv / Iv * N rows when its fc1 output must reuse the qkv space), or
// over every row in chunks of fc1's columns with fp32 partial sums in LRM where that is
// estimated faster than the row chunks (rcv = 0: the chunks read the weights once);
// the prefill MLP runs in column chunks of the gate|up projection (gate_up_chunk columns of each, packed chunk by chunk in DDR),
// J chunks per GEMM call, each chunk followed by its SiLU gate.
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <optional>
#include <set>
#include <tuple>

#include "kernels/attention.h"
#include "kernels/elementwise.h"
#include "kernels/embed.h"
#include "kernels/f16cols.h"
#include "kernels/gemm.h"
#include "kernels/gemv.h"
#include "kernels/norm.h"
#include "kernels/park.h"
#include "kernels/rope.h"
#include "model/compiler/compiler.h"
#include "model/compiler/compiler_emit.h"
#include "model/reference/ops.h"

namespace gpnpu::model {

using namespace kernels;
using detail::layer_name;

namespace {

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
uint32_t gate_up_chunk(const sim::Config& cfg, uint32_t inter) {
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
uint32_t down_chunk_k(uint32_t cw, uint32_t inter) { return (inter / cw) % 2 == 0 ? 2 * cw : 0; }

// Cycles of an OCM attention call: its key steps (plan_attention_ocm), each about
// hd x (0.47 + 0.08 G) cycles (measured at qc-u: 35 a step in the tower, 80 in the prefill).
double attention_estimate(const sim::Config& cfg, const OcmAttnArgs& a) {
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
uint32_t pm_chunk_width(uint32_t npe, uint32_t inter, uint32_t up) {
  uint32_t c = std::min(inter, std::max(kPmChunk, npe / 2 / up)) / kW4Block * kW4Block;
  while (inter % c) c -= kW4Block;
  return c;
}
std::string pm_name(int layer, uint32_t chunk, const char* what) {
  return layer_name(layer, fmt::format("pm{}.{}", chunk, what).c_str());
}
std::string vname(int b, const char* what) { return fmt::format("V{}.{}", b, what); }
std::string vpm_name(int block, uint32_t chunk, const char* what) {
  return vname(block, fmt::format("pm{}.{}", chunk, what).c_str());
}
// The first of a prefill run's S rows that layer i (of `layers`) computes past its KV write: 0 but
// in the last layer, where only the head's input (row S - 1) is read after it, and none without
// the head (a conversation's earlier chunk). Both plans run that layer's attention, o_proj, MLP
// and residuals on rows [read_from, S) alone.
uint32_t read_from(const ImageShape& s, uint32_t S, int i, int layers) {
  return i + 1 < layers ? 0 : s.head ? S - 1 : S;
}

// The tower's q|k|v made a group of vgq_heads heads at a time beside its attention
// (image_streamed, Streamed::vqg; blocks >= 1): the group's q, k and v rows packed as one GEMM
// weight (vgq_name), the q|k|v bias in the same order (vname(b, "gqbias")). Groups of 4 heads
// (2 or 1 where the heads do not divide so, at least two groups a block).
uint32_t vgq_heads(uint32_t heads) {
  for (uint32_t g : {4u, 2u})
    if (heads % g == 0 && heads / g >= 2) return g;
  return 1;
}
std::string vgq_name(int block, uint32_t group) { return vname(block, fmt::format("gq{}", group).c_str()); }
// The DDR cycles of an n x k GEMM's first tile at `split` (the whole weight where that is less),
// and the MAC cycles of a tile of one over `rows` rows: what a call's hand-off of the next call's
// first tile, during its own last tile, must fit in.
double first_tile_ddr(const sim::Config& gcfg, uint32_t n, uint32_t k, uint32_t split) {
  const GemmPlan p = plan_gemm(gcfg, 1, n, k, split);
  return double(std::min(p.tile_bytes, p.weight_bytes())) / gcfg.ddr_bytes_per_cycle();
}
double last_tile_macs(const sim::Config& gcfg, uint32_t rows, uint32_t n, uint32_t k) {
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
uint32_t pm_gate_up_split(const sim::Config& gcfg, uint32_t cp, uint32_t hidden, uint32_t rows) {
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
uint32_t pm_down_pairs(const sim::Config& gcfg, uint32_t cp, uint32_t inter, uint32_t hidden, uint32_t rows) {
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
uint32_t up_row(bool gated, uint32_t pairs, bool fused) {
  return gated ? 2 * (pairs > 1 && !fused ? 3 : 2) : 2;
}

// Whether n x k GEMMs (at split, 0: the rule's) keep their tiling on below's LRM: the same split,
// and two LRM buffers where full's have two (kernels::GemmPlan::single). Throws where none fits.
bool keeps_tiling(const sim::Config& below, const sim::Config& full, uint32_t n, uint32_t k, uint32_t split = 0) {
  const GemmPlan a = plan_gemm(below, 0, n, k, split), b = plan_gemm(full, 0, n, k, split);
  return a.split == b.split && a.single == b.single;
}

// The LRM offset of an MLP phase's partial sums (GemmArgs::lrm_out: its down GEMM of `width`
// outputs over `rows` rows in chunks of `chunk` inputs) at the top of LRM, or 0 where they do
// not fit beside the phase's GEMM buffers (the up GEMM of up_n outputs and up_k inputs, 0:
// width, split up_split, the down GEMM and the out GEMM before the chunks, width outputs and
// out_k inputs (0: none), keep their splits below them). They take no OCM and no OCM port time.
uint32_t lrm_sums(const sim::Config& gcfg, uint32_t rows, uint32_t width, uint32_t chunk, uint32_t up_n,
                  uint32_t up_split, uint32_t up_k = 0, uint32_t out_k = 0) {
  if (!up_k) up_k = width;
  const uint32_t bytes = gemm_lrm_acc_bytes(gcfg, rows, width, chunk);
  if (bytes + 64 >= gcfg.lrm_bytes) return 0;
  sim::Config below = gcfg;
  below.lrm_bytes = (uint32_t(gcfg.lrm_bytes) - bytes) / 64 * 64;
  try {
    if (!keeps_tiling(below, gcfg, up_n, up_k, up_split) || !keeps_tiling(below, gcfg, width, chunk) ||
        (out_k && !keeps_tiling(below, gcfg, width, out_k)))
      return 0;
  } catch (const Error&) {
    return 0;
  }
  return uint32_t(below.lrm_bytes);
}

std::string mname(int j, const char* what) { return j < 0 ? fmt::format("Mf.{}", what) : fmt::format("M{}.{}", j, what); }
// A merger's fc1 and fc2 in chunks of pm_chunk(Md) columns of fc1 (Streamed::mpm).
std::string mpm_name(int j, uint32_t chunk, const char* what) {
  return mname(j, fmt::format("pm{}.{}", chunk, what).c_str());
}

struct Dims {
  uint32_t Dv, hv, hdv, Iv, Md, pd;     // tower width, heads, head dim, MLP width, merged width, patch dim
  uint32_t H, nq, nkv, hd, I, V, qkv_n;  // LM
  explicit Dims(const ModelConfig& m) {
    const VisionConfig& v = m.vision;
    const TextConfig& t = m.text;
    Dv = uint32_t(v.hidden_size);
    hv = uint32_t(v.num_heads);
    hdv = uint32_t(v.head_dim());
    Iv = uint32_t(v.intermediate_size);
    Md = uint32_t(v.merged_dim());
    pd = uint32_t(v.patch_dim());
    H = uint32_t(t.hidden_size);
    nq = uint32_t(t.num_attention_heads);
    nkv = uint32_t(t.num_key_value_heads);
    hd = uint32_t(t.head_dim);
    I = uint32_t(t.intermediate_size);
    V = uint32_t(t.vocab_size);
    qkv_n = (nq + 2 * nkv) * hd;
  }
  // fp16 elements of the per-block / per-merger / per-layer vector bundles.
  uint32_t vision_vec() const { return 4 * Dv + 3 * Dv + Dv + Iv + Dv; }
  uint32_t merger_vec(bool post) const { return 2 * (post ? Md : Dv) + Md + H; }
  uint32_t text_vec() const { return 2 * H + 2 * hd; }
};

}  // namespace

sim::Config Compiler::gemm_view(const ModelConfig& model, const sim::Config& cfg, const CompileOptions& opt) {
  sim::Config g = cfg;
  if (opt.image_gemm_rows) {
    if (opt.image_gemm_rows > cfg.pe_rows)
      fail("compiler: GEMMs on {} PE rows, but the array has {} (pe_rows): give --gemm-rows 1 to {}",
           opt.image_gemm_rows, cfg.pe_rows, cfg.pe_rows);
    g.pe_rows = opt.image_gemm_rows;
    return g;
  }
  // A GEMM tile is as wide as the PEs it uses: on a large array its DMA buffers take OCM
  // the row tiles need, and its first and last tiles take longer to stream. Measured on
  // 2B (docs/performance.md, "GEMMs on part of the array"): 64x64 at 2 MiB, 16 GB/s:
  // 353.3 M cycles on all rows, 264.5 M on 16; at 16 MiB, 128 GB/s: 29.9 M on all, 42.0 M
  // on 32 (compute-bound there).
  const GemmLoad l = gemm_load(model, cfg);
  auto halve = [&](auto more) {  // (an odd count of rows to the lower half: 49 -> 24)
    while (g.pe_rows > 1 && more()) g.pe_rows /= 2;
  };
  // Above 1 MiB of OCM the DMA units carry 32 code bytes a PE where 64 would not fit so
  // (kernels::gemm_unit_pe_bytes) and the view keeps more rows: 64x64 at 2 MiB, 128 GB/s, all 64
  // rows 35.11 M cycles against 42.07 M on 32; at 1.25 MiB, 32 of its rows instead of 16, 64 GB/s
  // 86.31 -> 57.71 M (the same DDR bytes), 128 GB/s 78.83 -> 47.35 M; 1.5 MiB, 128 GB/s 78.24 ->
  // 45.20 M (that rule took 32-byte units from 2 MiB). (At 1 MiB the wider view's MLP chunks left
  // room for half the rows: DDR 1.47 -> 2.84 x the weights at 32x64 and 64x64, 64 GB/s 6% slower.)
  halve([&] { return double(g.dma_channels) * g.npe() * kernels::gemm_unit_pe_bytes(g) > double(cfg.ocm_bytes) / 4; });
  halve([&] { return l.macs / (g.mac_peak(true) / 2) <= 0.7 * l.ddr_cycles; });
  return g;
}

Compiler::GemmLoad Compiler::gemm_load(const ModelConfig& model, const sim::Config& cfg) {
  // The GEMMs of the default image program (16x16 patches, 128 tokens): their MACs, and
  // their weights once over the DDR.
  const Dims d(model);
  const ImageShape s;
  const double text = double(d.qkv_n) * d.H + double(d.H) * d.nq * d.hd + 3.0 * d.I * d.H;  // per row, one layer
  const double vision = 4.0 * d.Dv * d.Dv + 2.0 * d.Iv * d.Dv;                                    // per row, one block
  return {double(s.seq_len) * text * model.text.num_hidden_layers +
              double(s.grid_h) * s.grid_w * vision * model.vision.depth,
          (text * model.text.num_hidden_layers + vision * model.vision.depth) * 68.0 / 128.0 /
              cfg.ddr_bytes_per_cycle()};
}

namespace {
// The default image program (ImageShape{}) within the options' limits, plan only: what the
// layout and the views are chosen for.
ImageShape planning_shape(const CompileOptions& opt) {
  ImageShape def;
  def.plan_only = true;
  def.seq_len = int(std::min<uint32_t>(uint32_t(def.seq_len), opt.max_seq));
  while (def.grid_h > 2 &&
         (uint32_t(def.grid_h * def.grid_w) > opt.max_patches || def.image_start + def.n_image_tokens() > def.seq_len))
    def.grid_h = def.grid_w = def.grid_h - 2;
  return def;
}
}  // namespace

uint32_t Compiler::pm_chunk(uint32_t inter, uint32_t up) const {
  return pm_chunk_width(up == 1 && pm_tower_npe_ ? pm_tower_npe_ : pm_npe_, inter, up);
}
// An activation goes into the GEMM's epilogue (kernels::GemmArgs::act) where twice its estimate
// (gemm_act_cycles) is below the element-wise call's: the element-wise estimate runs low, and in
// the streamed tower at 1,200 patches on qc-u (row tiles of 200, the fills spread over the MAC
// loops) the epilogue cost 243 cycles a row group, not the 124 of gemm_act_cycles; fusing the
// GELUs there on the estimates alone took 0.64 M cycles more (146.57 -> 147.21 M for the tower).
constexpr double kActMargin = 2.0;
bool act_fused(const sim::Config& cfg, const sim::Config& gcfg, uint32_t m, uint32_t n, uint32_t k, uint32_t split,
               GemmAct act, const EwArgs& e) {
  return kActMargin * gemm_act_cycles(gcfg, m, n, k, split, act) < ew_estimate_cycles(cfg, e, ew_pick_mapping(cfg, e));
}

// Every call on the gate|up chunk packings (J chunks a call, J dividing the chunks) runs at split
// 1, no mixed precision (its correction comes before the SiLU), and the epilogue wins at the
// planning prompt's rows: 32x64 and 64x64, not 16x16 and 32x32.
bool Compiler::gate_up_fused() const {
  const Dims d(model_);
  if (opt_.fp16_channels || !opt_.image || gemm_cfg_.pe_cols % 2) return false;  // (silu_pairs: a row's PE pairs)
  const uint32_t cw = gu_chunk(), rows = uint32_t(planning_shape(opt_).seq_len);
  if (gemm_split(gemm_cfg_, 2 * cw, d.H) != 1) return false;
  const EwArgs e{.op = EwOp::silu_mul, .rows = rows, .cols = cw, .a_stride = 4 * cw, .b_stride = 4 * cw};
  return opt_.image_silu_fused || act_fused(cfg_, gemm_cfg_, rows, 2 * cw, d.H, 0, GemmAct::silu_pairs, e);
}

bool Compiler::pm_gate_up_fused() const {
  const Dims d(model_);
  if (opt_.fp16_channels || !opt_.image || d.I % kW4Block || gemm_cfg_.pe_cols % 2) return false;
  const uint32_t cp = pm_chunk(d.I, 2), rows = uint32_t(planning_shape(opt_).seq_len);
  if (gemm_split(gemm_cfg_, 2 * cp, d.H, pm_split()) != 1) return false;
  const EwArgs e{.op = EwOp::silu_mul, .rows = rows, .cols = cp, .a_stride = 4 * cp, .b_stride = 4 * cp};
  return opt_.image_silu_fused || act_fused(cfg_, gemm_cfg_, rows, 2 * cp, d.H, 1, GemmAct::silu_pairs, e);
}

uint32_t Compiler::gu_chunk() const { return gu_cw_ ? gu_cw_ : gate_up_chunk(cfg_, Dims(model_).I); }

// The resident prefill's gate|up chunks are packed one by one at the tiling rule's split for
// their 2 cw columns, recorded with them (DdrTensor::split), so every call on J of them runs at
// that split and takes J > 1 only where a chunk is whole tiles at it (then J packings back to
// back are the packing of 2 cw J columns). (On 64x64, cw = 1,024: chunks at split 2, where six
// chunks' 12,288 columns alone would take split 1; where one call takes all six they are laid
// as one chunk instead: plan_image_ddr.)
uint32_t Compiler::gate_up_chunk_split() const {
  const Dims d(model_);
  return gemm_split(gemm_cfg_, 2 * gu_chunk(), d.H);
}

void Compiler::record_gemm_splits() {
  if (!opt_.image) return;
  const Dims d(model_);
  const uint32_t cw = gu_chunk(), cp = pm_chunk(d.I, 2), gu = gate_up_chunk_split();
  const uint32_t pm = ddr_.has(pm_name(0, 0, "gu")) ? pm_split() : 0;  // (the streamed plan's packings, if laid)
  for (int i = 0; i < model_.text.num_hidden_layers; ++i) {
    for (uint32_t k = 0; k < d.I / cw; ++k) ddr_.set_split(layer_name(i, fmt::format("gu{}.gemm", k).c_str()), gu);
    if (pm)
      for (uint32_t k = 0; k < d.I / cp; ++k) ddr_.set_split(pm_name(i, k, "gu"), pm);
  }
}

// Where one call of 3 Dv leaves part of its tile idle and two calls fill theirs - q|k in whole
// tiles, v in two row sets (kernels/gemm.h) - the resident tower's q|k|v runs as those two: 64x64,
// N = 3,072 at split 1 on 3,072 of the 4,096 PEs, q|k at split 2 on all of them, v (N = 1,024)
// on both halves, 0.75 of the PE steps. The same DDR bytes: both packings back to back under
// V{b}.qkv. (Not with mixed precision: its fp16 columns are per packing.)
bool Compiler::tower_qkv_split() const {
  const Dims d(model_);
  return !opt_.fp16_channels && plan_gemm(gemm_cfg_, 0, 3 * d.Dv, d.Dv).tail_cols &&
         !plan_gemm(gemm_cfg_, 0, 2 * d.Dv, d.Dv).tail_cols && plan_gemm(gemm_cfg_, 16, d.Dv, d.Dv).sets == 2;
}
// Where the v call's packing starts in V{b}.qkv: after q|k's.
uint64_t Compiler::tower_v_offset() const { return gemm_weight_bytes(gemm_cfg_, 2 * Dims(model_).Dv, Dims(model_).Dv); }

uint32_t Compiler::pm_split() const {
  const Dims d(model_);
  return pm_gate_up_split(gemm_cfg_, pm_chunk(d.I, 2), d.H, uint32_t(planning_shape(opt_).seq_len));
}

void Compiler::plan_image_ddr() {
  const Dims d(model_);
  const size_t first = ddr_.tensors().size();
  const VisionConfig& v = model_.vision;
  const uint32_t P = opt_.max_patches;
  add_weight("V.patch", d.Dv, d.pd, "gemm");
  ddr_.add("V.patch_bias", uint64_t(d.Dv) * 2, "f16");
  for (int b = 0; b < v.depth; ++b) {
    add_weight(vname(b, "qkv"), 3 * d.Dv, d.Dv, "gemm");
    add_weight(vname(b, "proj"), d.Dv, d.Dv, "gemm");
    add_weight(vname(b, "fc1"), d.Iv, d.Dv, "gemm");
    add_weight(vname(b, "fc2"), d.Dv, d.Iv, "gemm");
    ddr_.add(vname(b, "vec"), uint64_t(d.vision_vec()) * 2, "f16");
  }
  const int taps = int(v.deepstack_visual_indexes.size());
  for (int j = -1; j < taps; ++j) {
    add_weight(mname(j, "fc1"), d.Md, d.Md, "gemm");
    add_weight(mname(j, "fc2"), d.H, d.Md, "gemm");
    ddr_.add(mname(j, "vec"), uint64_t(d.merger_vec(j >= 0)) * 2, "f16");
    ddr_.add(j < 0 ? "act.img" : fmt::format("act.ds{}", j), uint64_t(P / 4) * d.H * 2, "act");
  }
  const uint32_t cw = gu_chunk();
  for (int i = 0; i < model_.text.num_hidden_layers; ++i) {
    add_weight(layer_name(i, "qkv.gemm"), d.qkv_n, d.H, "gemm");
    add_weight(layer_name(i, "o.gemm"), d.H, d.nq * d.hd, "gemm");
    // In mixed precision each chunk's fp16 parts follow it: the chunks are then not
    // contiguous, and each gate|up GEMM call takes one chunk (J = 1).
    for (uint32_t k = 0; k < d.I / cw; ++k)
      add_weight(layer_name(i, fmt::format("gu{}.gemm", k).c_str()), 2 * cw, d.H, "gemm");
    add_weight(layer_name(i, "down.gemm"), d.H, d.I, "gemm");
  }
  ddr_.add("in.patches", uint64_t(P) * d.pd * 2, "input");
  ddr_.add("in.trope", 2ull * opt_.max_seq * d.hd * 4, "input");
  ddr_.add("const.vpos", uint64_t(P) * d.Dv * 2, "const");
  ddr_.add("const.vrope", 2ull * P * d.hdv * 4, "const");
  // The streamed plan's activations (image_streamed): residual streams and q|k|v / q
  // rows (the attention output overwrites the q columns).
  ddr_.add("act.vh", uint64_t(P) * d.Dv * 2, "act");
  ddr_.add("act.vqkv", uint64_t(P) * 3 * d.Dv * 2, "act");
  ddr_.add("act.h", uint64_t(opt_.max_seq) * d.H * 2, "act");
  ddr_.add("act.q", uint64_t(opt_.max_seq) * d.nq * d.hd * 2, "act");
  iio_.patches_ddr = ddr_.bus("in.patches");
  iio_.trope_ddr = ddr_.bus("in.trope");
  // The second packings (the tower's q, k, v one by one and by head groups, its MLP in
  // pm_chunk columns, then the prefill's MLP) where the default image program (ImageShape{})
  // does not fit the resident plan: the configurations whose images and prompts stream
  // (mixed precision: never; its fp16 parts are per packing). Layouts "gemm-pm" and "f16-pm"
  // (the head groups' reordered bias): the same weights again, not counted in the
  // weights-once floor (Compiler::weight_bytes).
  // (The plan knobs force the streamed plan and leave these out: a layout never larger than
  // the one Compiler::max_context measured without them.)
  if (!pm_allowed()) return;
  CompiledProgram planned;
  bool fits = true;
  try {
    planned = image_program(planning_shape(opt_), nullptr, nullptr);
  } catch (const Error&) {
    fits = false;  // the default shape does not fit this model's limits
  }
  // The gate|up chunks as one (gu_cw_ = I) where the resident plan's gate|up call takes every
  // chunk and would read one chunk of I at another split (the split of the call's columns, not
  // of a chunk's): the same bytes, the same OCM, whole tiles. Kept where the plan then stays
  // resident with one call, else laid again as they were. 64x64, 8 MiB, 128 GB/s: chunks of
  // 1,024 at split 2 in a call of six, 25.69 M cycles; one chunk at split 1, 24.53 M (split 1's
  // loop scatters the next tile's units inside it: kernels/gemm.cpp).
  const bool whole = fits && planned.plan.starts_with("resident") && planned.gate_up_whole;
  const uint32_t narrow = gate_up_chunk(cfg_, d.I);
  auto relay = [&](uint32_t cw) {
    ddr_.truncate(first);
    gu_cw_ = cw;
    plan_image_ddr();
  };
  if (!gu_cw_ && whole && !opt_.image_narrow_gate_up && narrow < d.I &&
      gemm_split(gemm_cfg_, 2 * d.I, d.H) != gemm_split(gemm_cfg_, 2 * narrow, d.H))
    return relay(d.I);
  if (gu_cw_ == d.I && narrow < d.I && !whole) return relay(narrow);
  if (!fits) return;
  // The resident prefill's down in chunks where its plan takes them (or the knob).
  pm_down_ = opt_.image_down_chunks || (planned.plan.starts_with("resident") && planned.down_chunks);
  if (planned.plan.starts_with("resident")) {
    // The resident tower's MLP over every row where its chunk packings would take it there.
    if (!planned.tower_chunk_pes && !pm_down_) return;
    pm_first_ = ddr_.tensors().size();
    pm_tower_only_ = true;
    pm_npe_ = planned.tower_chunk_pes;
    return add_pm_packings();
  }
  for (int b = 0; b < v.depth; ++b)  // the tower's q, k and v weights (Streamed::vqa)
    for (uint32_t j = 0; j < 3; ++j) ddr_.add(vpm_name(b, j, "qkv"), gemm_weight_bytes(cfg_, d.Dv, d.Dv), "gemm-pm");
  const uint32_t gq = vgq_heads(d.hv);
  for (int b = 1; b < v.depth; ++b) {  // the same by head group (Streamed::vqg)
    for (uint32_t g = 0; g < d.hv / gq; ++g)
      ddr_.add(vgq_name(b, g), gemm_weight_bytes(cfg_, 3 * gq * d.hdv, d.Dv), "gemm-pm");
    ddr_.add(vname(b, "gqbias"), uint64_t(3) * d.Dv * 2, "f16-pm");
  }
  pm_first_ = ddr_.tensors().size();
  add_pm_packings();
}

bool Compiler::pm_allowed() const {
  return !opt_.fp16_channels && Dims(model_).I % kW4Block == 0 && !opt_.image_tile_rows && !opt_.image_attn_groups &&
         !opt_.image_copy_mode && !opt_.image_prefill;
}

// The MLP chunks laid again (after a change of their widths or pairing).
void Compiler::relay_pm_packings() {
  ddr_.truncate(pm_first_);
  add_pm_packings();
}

// The MLP chunks (the layout's last tensors): the same bytes at any chunk width.
void Compiler::add_pm_packings() {
  const Dims d(model_);
  const VisionConfig& v = model_.vision;
  if (pm_down_) {  // (resident: the down's K in chunks of two gate|up chunks, down_chunk_k)
    const uint32_t dk = down_chunk_k(gu_chunk(), d.I);
    for (int i = 0; i < model_.text.num_hidden_layers; ++i)
      for (uint32_t k = 0; k < d.I / dk; ++k)
        ddr_.add(layer_name(i, fmt::format("dn{}.gemm", k).c_str()), gemm_weight_bytes(cfg_, d.H, dk), "gemm-pm");
  }
  if (d.Iv % kW4Block == 0 && (!pm_tower_only_ || pm_npe_))
    for (int b = 0; b < v.depth; ++b)
      for (uint32_t c = 0; c < d.Iv / pm_chunk(d.Iv, 1); ++c) {
        ddr_.add(vpm_name(b, c, "fc1"), gemm_weight_bytes(cfg_, pm_chunk(d.Iv, 1), d.Dv), "gemm-pm");
        ddr_.add(vpm_name(b, c, "fc2"), gemm_weight_bytes(cfg_, d.Dv, pm_chunk(d.Iv, 1)), "gemm-pm");
      }
  if (pm_tower_only_) return;
  if (d.Md % kW4Block == 0)  // the mergers' (Streamed::mpm)
    for (int j = -1; j < int(v.deepstack_visual_indexes.size()); ++j)
      for (uint32_t c = 0; c < d.Md / pm_chunk(d.Md, 1); ++c) {
        ddr_.add(mpm_name(j, c, "fc1"), gemm_weight_bytes(cfg_, pm_chunk(d.Md, 1), d.Md), "gemm-pm");
        ddr_.add(mpm_name(j, c, "fc2"), gemm_weight_bytes(cfg_, d.H, pm_chunk(d.Md, 1)), "gemm-pm");
      }
  const uint32_t cp = pm_chunk(d.I, 2);
  for (int i = 0; i < model_.text.num_hidden_layers; ++i)
    for (uint32_t k = 0; k < d.I / cp; ++k) {
      ddr_.add(pm_name(i, k, "gu"), gemm_weight_bytes(cfg_, 2 * cp, d.H), "gemm-pm");
      if (k % pm_down() == 0)
        ddr_.add(pm_name(i, k / pm_down(), "down"), gemm_weight_bytes(cfg_, d.H, cp * pm_down()), "gemm-pm");
    }
}

void Compiler::settle_pm_chunks() {
  // The MLP chunks 1, 2 or 4 tiles of the up GEMM at split 2 wide (on the GEMMs' view): of
  // those whose default image program reads the weights no more often, the one with the
  // least estimate where that is 1% or more below the 512-wide chunks': fewer calls, fewer
  // one-tile calls whose weights cannot stream under their own MACs, no narrow tiles.
  // 32x64, 2 MiB: 32 GB/s 86.80 -> 79.82 M cycles; 64 GB/s 59.15 -> 50.76 M (the tower's MLP
  // over every row, where its 512-wide chunks on half the PEs lost to row tiles); 16 GB/s
  // estimated 0.8% less, measured 0.3% more (DDR-bound), so not taken. A wide chunk's output
  // may not fit beside the rows (1 MiB, 128 GB/s: the prefill's MLP in two row tiles, 0.8%
  // faster but 2.72 x the weights' bytes instead of 2.22).
  if (!pm_first_) return;
  auto relay = [&](uint32_t npe) {
    pm_npe_ = npe;
    relay_pm_packings();
  };
  if (opt_.image_chunk_pes) return relay(opt_.image_chunk_pes);
  if (pm_tower_only_) return;  // (the resident tower's: laid as wide as its plan took them)
  auto plan = [&] { return streamed_estimate(); };
  const Dims d(model_);
  auto widths = [&](uint32_t npe) {
    return std::array{pm_chunk_width(npe, d.Iv, 1), pm_chunk_width(npe, d.Md, 1), pm_chunk_width(npe, d.I, 2)};
  };
  const CompiledProgram narrow = plan();
  if (narrow.plan.empty()) return;
  // (Also a width whose plan reads fewer weight bytes than the 512-wide chunks' within kFewerBytes
  // of their estimate: 32x64, 3 MiB, 96 GB/s, the 512-wide chunks' plan read 1.08 GB of weights
  // estimated 37.92 M; 2,048-wide 0.96 GB, 37.78 M, not 1% below.)
  double least = 0.99 * narrow.est_cycles, least_wb = narrow.est_weight_bytes;
  uint32_t best = 0;
  bool kept_out = false;  // a lower estimate whose plan read more weight bytes
  for (uint32_t npe : {gemm_cfg_.npe(), 2 * gemm_cfg_.npe(), 4 * gemm_cfg_.npe()}) {
    if (widths(npe) == widths(pm_npe_)) continue;
    relay(npe);
    const CompiledProgram w = plan();
    if (w.plan.empty()) continue;
    const bool fewer = w.est_weight_bytes < least_wb && w.est_cycles < kFewerBytes * narrow.est_cycles;
    if (fewer || (w.est_weight_bytes <= least_wb && w.est_cycles < least))
      least = w.est_cycles, least_wb = w.est_weight_bytes, best = npe;
    else if (w.est_cycles < least)
      kept_out = true;
  }
  if (pm_npe_ != best) relay(best);
  // Then the tower's and the mergers' chunks on their own, the prefill's kept: a width whose
  // plan reads fewer weight bytes within kFewerBytes of the chosen plan's estimate, else one
  // 1% below it reading no more (32x64, 2 MiB, 64 GB/s: the prefill's 2,048-wide chunks with
  // the tower's 4,096-wide ones in two row tiles estimated 44.21 M, the tower's 1,024-wide
  // over every row 44.44 M; measured 48.67 and 47.51 M).
  const CompiledProgram chosen = plan();
  if (chosen.plan.empty()) return;
  auto tower_widths = [&](uint32_t npe) { return std::pair{widths(npe)[0], widths(npe)[1]}; };
  double best_c = chosen.est_cycles, best_wb = chosen.est_weight_bytes;
  uint32_t tower = 0;
  for (uint32_t npe : {gemm_cfg_.npe(), 2 * gemm_cfg_.npe(), 4 * gemm_cfg_.npe()}) {
    if (tower_widths(npe) == tower_widths(pm_npe_)) continue;
    pm_tower_npe_ = npe;
    relay(pm_npe_);
    const CompiledProgram w = plan();
    if (w.plan.empty()) continue;
    const bool fewer = w.est_weight_bytes < best_wb && w.est_cycles < kFewerBytes * chosen.est_cycles;
    const bool faster = w.est_weight_bytes <= best_wb && w.est_cycles < 0.99 * best_c;
    if (fewer || faster) tower = npe, best_c = w.est_cycles, best_wb = w.est_weight_bytes;
  }
  pm_tower_npe_ = tower;
  relay(pm_npe_);
  // Then, where the first pass kept a width out for its weight bytes, the prefill's again, the
  // tower's and mergers' kept: the first pass moves them together, and a width whose tower read
  // more bytes kept a better prefill width out (32x64, 2 MiB, 64 GB/s: the prefill's 1,024-wide
  // chunks, measured 43.48 M cycles, for 2,048-wide, 42.11 M).
  if (!kept_out) return;
  const CompiledProgram kept = plan();
  if (kept.plan.empty()) return;
  pm_tower_npe_ = tower ? tower : std::max(pm_npe_, 1u);  // (1: the narrow default's widths)
  double least_kept = kept.est_cycles;
  uint32_t prefill = pm_npe_;
  for (uint32_t npe : {gemm_cfg_.npe(), 2 * gemm_cfg_.npe(), 4 * gemm_cfg_.npe()}) {
    if (widths(npe)[2] == widths(prefill)[2]) continue;
    relay(npe);
    const CompiledProgram w = plan();
    if (!w.plan.empty() && w.est_weight_bytes <= kept.est_weight_bytes && w.est_cycles < least_kept)
      least_kept = w.est_cycles, prefill = npe;
  }
  relay(prefill);
}

CompiledProgram Compiler::streamed_estimate() const {
  try {
    const CompiledProgram o = image_program(planning_shape(opt_), nullptr, nullptr);
    return o.plan == "streamed" && std::isfinite(o.est_cycles) ? o : CompiledProgram{};
  } catch (const Error&) {
    return CompiledProgram{};
  }
}

void Compiler::settle_pm_pairs() {
  // The prefill's down over two gate|up chunks where pm_down_pairs takes it, kept where the
  // default image program then reads no more weight bytes and its estimate falls by 3% or more
  // (its OCM, the first chunk's SiLU rows beside the second's gate|up rows, may cost the plan
  // more: at 1 MiB, 32 GB/s the MLP then took row tiles, 110.8 -> 129.8 M cycles; 64x64 at 2 MiB,
  // 128 GB/s estimated 6.3% less, measured 3.1%; 32x64 at 2 MiB, 32 GB/s estimated 2.7% less,
  // measured 0.03% more).
  if (!pm_first_ || pm_tower_only_) return;
  const Dims d(model_);
  if (pm_down_pairs(gemm_cfg_, pm_chunk(d.I, 2), d.I, d.H, uint32_t(planning_shape(opt_).seq_len)) < 2) return;
  const CompiledProgram one = streamed_estimate();
  if (one.plan.empty()) return;
  auto relay = [&](uint32_t pairs) {
    pm_pairs_ = pairs;
    relay_pm_packings();
  };
  relay(2);
  const CompiledProgram two = streamed_estimate();
  if (two.plan.empty() || (!opt_.image_down_pairs && (two.est_weight_bytes > one.est_weight_bytes ||
                                                       !(two.est_cycles < 0.97 * one.est_cycles))))
    relay(1);
}

void Compiler::load_image_weights(const QuantBundle& bundle, DdrWriter ddr) const {
  if (views_differ()) vision_part().load_vision_weights(bundle, ddr);
  else load_vision_weights(bundle, ddr);
  load_text_weights(bundle, ddr);
}

void Compiler::load_vision_weights(const QuantBundle& bundle, DdrWriter ddr) const {
  const Dims d(model_);
  const VisionConfig& v = model_.vision;
  auto gemm = [&](const std::string& name, const QuantTensor& q) { put_weight(ddr, name, q); };
  auto gemm_of = [&](const std::string& name, const std::string& tensor) { put_bundle_weight(ddr, name, bundle, tensor); };
  auto vec = [&](const std::string& name, const std::vector<std::string>& parts) {
    std::vector<float> all;
    for (const std::string& p : parts) {
      std::vector<float> x = bundle.get_f32(p);
      all.insert(all.end(), x.begin(), x.end());
    }
    put(ddr, name, detail::f16_bytes(all));
  };
  gemm_of("V.patch", kPatchEmbedWeight);
  vec("V.patch_bias", {kPatchEmbedBias});
  for (int b = 0; b < v.depth; ++b) {
    if (tower_qkv_split()) {  // q|k, then v, packed on their own
      const QuantTensor q = bundle.get_quant(vision_block_name(b, "attn.qkv.weight"));
      std::vector<uint8_t> bytes = pack_gemm_weight(detail::slice_rows(q, 0, 2 * d.Dv).view(), gemm_cfg_);
      const std::vector<uint8_t> v_part = pack_gemm_weight(detail::slice_rows(q, 2 * d.Dv, d.Dv).view(), gemm_cfg_);
      bytes.insert(bytes.end(), v_part.begin(), v_part.end());
      put(ddr, vname(b, "qkv"), bytes);
    } else {
      gemm_of(vname(b, "qkv"), vision_block_name(b, "attn.qkv.weight"));
    }
    const bool by_qkv = ddr_.has(vpm_name(b, 0, "qkv")), by_group = ddr_.has(vgq_name(b, 0));
    const QuantTensor qkv =
        by_qkv || by_group ? bundle.get_quant(vision_block_name(b, "attn.qkv.weight")) : QuantTensor{};
    if (by_qkv)
      for (uint32_t j = 0; j < 3; ++j) gemm(vpm_name(b, j, "qkv"), detail::slice_rows(qkv, j * d.Dv, d.Dv));
    if (by_group) {
      const std::vector<float> bias = bundle.get_f32(vision_block_name(b, "attn.qkv.bias"));
      const uint32_t w = vgq_heads(d.hv) * d.hdv;  // rows of one group's q (k, v)
      std::vector<float> gb;
      for (uint32_t g = 0; g < d.Dv / w; ++g) {
        std::vector<QuantTensor> parts;
        for (uint32_t j = 0; j < 3; ++j) {
          parts.push_back(detail::slice_rows(qkv, j * d.Dv + g * w, w));
          gb.insert(gb.end(), bias.begin() + (j * d.Dv + g * w), bias.begin() + (j * d.Dv + (g + 1) * w));
        }
        gemm(vgq_name(b, g), detail::concat_rows(parts));
      }
      put(ddr, vname(b, "gqbias"), detail::f16_bytes(gb));
    }
    gemm_of(vname(b, "proj"), vision_block_name(b, "attn.proj.weight"));
    gemm_of(vname(b, "fc1"), vision_block_name(b, "mlp.linear_fc1.weight"));
    gemm_of(vname(b, "fc2"), vision_block_name(b, "mlp.linear_fc2.weight"));
    if (ddr_.has(vpm_name(b, 0, "fc1"))) {
      const QuantTensor fc1 = bundle.get_quant(vision_block_name(b, "mlp.linear_fc1.weight")),
                        fc2 = bundle.get_quant(vision_block_name(b, "mlp.linear_fc2.weight"));
      const uint32_t cv = pm_chunk(d.Iv, 1);
      for (uint32_t c = 0; c < d.Iv / cv; ++c) {
        gemm(vpm_name(b, c, "fc1"), detail::slice_rows(fc1, c * cv, cv));
        gemm(vpm_name(b, c, "fc2"), detail::slice_cols(fc2, c * cv, cv));
      }
    }
    std::vector<std::string> parts;
    for (const char* leaf : {"norm1.weight", "norm1.bias", "norm2.weight", "norm2.bias", "attn.qkv.bias",
                             "attn.proj.bias", "mlp.linear_fc1.bias", "mlp.linear_fc2.bias"})
      parts.push_back(vision_block_name(b, leaf));
    vec(vname(b, "vec"), parts);
  }
  const int taps = int(v.deepstack_visual_indexes.size());
  for (int j = -1; j < taps; ++j) {
    auto leaf = [&](const char* l) {
      return j < 0 ? std::string(kMergerPrefix) + l : deepstack_merger_name(j, l);
    };
    gemm_of(mname(j, "fc1"), leaf("linear_fc1.weight"));
    gemm_of(mname(j, "fc2"), leaf("linear_fc2.weight"));
    vec(mname(j, "vec"), {leaf("norm.weight"), leaf("norm.bias"), leaf("linear_fc1.bias"), leaf("linear_fc2.bias")});
    if (ddr_.has(mpm_name(j, 0, "fc1"))) {
      const QuantTensor fc1 = bundle.get_quant(leaf("linear_fc1.weight")), fc2 = bundle.get_quant(leaf("linear_fc2.weight"));
      const uint32_t cm = pm_chunk(d.Md, 1);
      for (uint32_t c = 0; c < d.Md / cm; ++c) {
        gemm(mpm_name(j, c, "fc1"), detail::slice_rows(fc1, c * cm, cm));
        gemm(mpm_name(j, c, "fc2"), detail::slice_cols(fc2, c * cm, cm));
      }
    }
  }
}

void Compiler::load_text_weights(const QuantBundle& bundle, DdrWriter ddr) const {
  const Dims d(model_);
  auto gemm = [&](const std::string& name, const QuantTensor& q) { put_weight(ddr, name, q); };
  auto gemm_of = [&](const std::string& name, const std::string& tensor) { put_bundle_weight(ddr, name, bundle, tensor); };
  const uint32_t cw = gu_chunk();
  const bool gu_fused = gate_up_fused();
  for (int i = 0; i < model_.text.num_hidden_layers; ++i) {
    std::vector<QuantTensor> qkv;
    for (const std::string& n : qkv_names(i)) qkv.push_back(bundle.get_quant(n));
    gemm(layer_name(i, "qkv.gemm"), detail::concat_rows(qkv));
    gemm_of(layer_name(i, "o.gemm"), text_layer_name(i, "self_attn.o_proj.weight"));
    QuantTensor gate = bundle.get_quant(gate_up_names(i)[0]), up = bundle.get_quant(gate_up_names(i)[1]);
    for (uint32_t k = 0; k < d.I / cw; ++k) {
      const QuantTensor g = detail::slice_rows(gate, k * cw, cw), u = detail::slice_rows(up, k * cw, cw);
      gemm(layer_name(i, fmt::format("gu{}.gemm", k).c_str()),
           gu_fused ? detail::interleave_rows(g, u) : detail::concat_rows({g, u}));
    }
    gemm_of(layer_name(i, "down.gemm"), text_layer_name(i, "mlp.down_proj.weight"));
    // The down's inputs again in chunks: the resident plan's (down_chunk_k), the streamed plan's.
    const bool dn = ddr_.has(layer_name(i, "dn0.gemm")), pm = ddr_.has(pm_name(i, 0, "gu"));
    if (!dn && !pm) continue;
    const QuantTensor down = bundle.get_quant(text_layer_name(i, "mlp.down_proj.weight"));
    auto down_chunks = [&](uint32_t width, auto name) {
      for (uint32_t k = 0; k < d.I / width; ++k) gemm(name(k), detail::slice_cols(down, k * width, width));
    };
    if (dn)
      down_chunks(down_chunk_k(cw, d.I), [&](uint32_t k) { return layer_name(i, fmt::format("dn{}.gemm", k).c_str()); });
    if (!pm) continue;
    const uint32_t cp = pm_chunk(d.I, 2);
    const bool pm_fused = pm_gate_up_fused();
    for (uint32_t k = 0; k < d.I / cp; ++k) {
      const QuantTensor g = detail::slice_rows(gate, k * cp, cp), u = detail::slice_rows(up, k * cp, cp);
      put_weight(ddr, pm_name(i, k, "gu"), pm_fused ? detail::interleave_rows(g, u) : detail::concat_rows({g, u}));
    }
    down_chunks(cp * pm_down(), [&](uint32_t k) { return pm_name(i, k, "down"); });
  }
}

void Compiler::load_image_constants(const QuantBundle& bundle, const ImageShape& s, DdrWriter ddr) const {
  const Dims d(model_);
  const VisionConfig& v = model_.vision;
  const int n = s.grid_h * s.grid_w;
  // The learned position table, interpolated for this grid (a constant per grid).
  std::vector<float> table = bundle.get_f32(kPosEmbed), pos(size_t(n) * d.Dv);
  ops::pos_embed_bilinear(table, v.pos_grid_side(), int(d.Dv), s.grid_h, s.grid_w, v.spatial_merge_size, pos);
  std::vector<uint8_t> pb = detail::f16_bytes(pos);
  ddr.write(ddr_.at("const.vpos").offset, pb.data(), pb.size());
  // The tower's 2-D rotary tables, per patch in merge-window order.
  std::vector<std::array<int, 2>> rq = ops::merge_window_order(s.grid_h, s.grid_w, v.spatial_merge_size);
  std::vector<float> cos_t, sin_t;
  ops::rope_tables_2d(rq, int(d.hdv), 10000.0f, cos_t, sin_t);
  uint64_t off = ddr_.at("const.vrope").offset;
  ddr.write(off, cos_t.data(), cos_t.size() * 4);
  ddr.write(off + uint64_t(opt_.max_patches) * d.hdv * 4, sin_t.data(), sin_t.size() * 4);
}

namespace {

// The MACs a row of an n x k GEMM takes on view g's PEs, a narrow tile's idle ones counted (two
// row sets: half that): the tower's N = 1,024 on 48 rows of 64x64 (3,072 PEs), 1.5 n k. (n k where
// no split fits the LRM: that GEMM runs in chunks, as the plan then finds.)
double row_macs(const sim::Config& g, uint32_t n, uint32_t k, uint32_t split = 0) {
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
  std::vector<std::pair<uint32_t, uint32_t>> more;
  bool whole = true;
};
uint64_t gemm_buffer_bytes(const sim::Config& cfg, const Dims& d, const GemmBuffers& o) {
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

// Mixed precision's OCM (kernels/f16cols.h): Xs of up to `rows` rows and the correction's
// DMA buffers; none without fp16 channels.
struct F16Regions {
  bool on = false;
  uint32_t xs = 0, scratch = 0;
};
uint64_t f16_footprint(const sim::Config& cfg, bool on, uint32_t rows) {
  return on ? detail::OcmAlloc::footprint(uint64_t(rows) * kF16RowBytes) +
                  detail::OcmAlloc::footprint(f16cols_scratch_bytes(cfg))
            : 0;
}
F16Regions take_f16(detail::OcmAlloc& a, const sim::Config& cfg, bool on, uint32_t rows) {
  F16Regions r;
  r.on = on;
  if (!on) return r;
  r.xs = a.take(uint64_t(rows) * kF16RowBytes, "fp16 channels of the rows");
  r.scratch = a.take(f16cols_scratch_bytes(cfg), "fp16 correction buffers");
  return r;
}

// A GEMM call's partial sums (GemmArgs::acc_in, y_f32): in, fp32 [m][n] at ocm (row stride)
// added before the rounding; y_f32, Y written as fp32.
struct GemmAcc {
  bool in = false;
  uint32_t ocm = 0, stride = 0;
  bool y_f32 = false;
  uint32_t lrm = 0;  // the partial sums at this LRM offset (lrm_sums) instead of OCM
};

// One GEMM call of the image program (ImageKernels::gemm): Y [m][n] (row stride ys bytes at OCM
// y) = X [m][k] (row stride xs at OCM x) times the packed weight w (from w_off bytes into it),
// plus the fp16 bias [n] at OCM bias (UINT32_MAX: none); acc: partial sums in or out; act: the
// epilogue's activation.
struct GemmOp {
  std::string w;
  uint32_t m = 0, n = 0, k = 0;
  uint32_t x = 0, xs = 0, y = 0, ys = 0;
  uint32_t bias = UINT32_MAX;
  GemmAcc acc = {};
  GemmAct act = GemmAct::none;
  uint64_t w_off = 0;
};

// The kernels of the image program and their fixed OCM scratch (GEMM DMA buffers,
// norm scratch), shared by both plans. GEMM calls chain their weight prefetch
// (GemmArgs::next) either by hand (prefetch(), the resident plan) or automatically:
// a first emission records the GEMMs in program order (record), the second chains
// each GEMM to the one after it (chain).
struct ImageKernels {
  // weight, n, k, LRM bytes the kernels between the previous GEMM and this one use, the
  // weight's byte offset into w (GemmArgs::w_ddr)
  using Gemm = std::tuple<std::string, uint32_t, uint32_t, uint32_t, uint64_t>;

  kernels::Builder& b;
  detail::Emitter em;
  const sim::Config& cfg;
  sim::Config gcfg;  // the GEMMs' view of the machine (either plan may give them fewer DMA channels)
  const DdrLayout& ddr;
  uint32_t GEMM = 0, rGEMM = 0, NSCR = 0;
  // Mixed precision (CompileOptions::fp16_channels): the GEMMs then run unchained (the
  // gather GEMM between two calls uses their LRM and DMA channels).
  F16Regions f16;
  bool fuse_gelu = false;  // CompileOptions::image_gelu_fused
  bool silu_pm = false;    // the gated chunk chain's packings interleaved (Compiler::pm_gate_up_fused)
  std::vector<Gemm>* record = nullptr;
  const std::vector<Gemm>* chain = nullptr;
  size_t chain_i = 0;
  std::string prefetched_w, next_w;
  GemmArgs next_g, handed;  // handed: the LRM placement gemm_handoff gave the GEMM emitted next
  static constexpr uint32_t kSmem = detail::Emitter::kSmem;
  // LRM the kernels between two GEMMs may use: OCM attention parks q and its
  // accumulator in [0, 1024) (kernels/attention.h), norms are held to it (NormArgs::
  // lrm_bytes); above what they use a GEMM's last tile loads the next GEMM's first
  // tile (gemm_handoff). Element-wise kernels, rope, copies and the KV write use none.
  static constexpr uint32_t kLrmShared = 1024;
  uint32_t lrm_since = 0;     // LRM used by the kernels emitted since the last GEMM
  uint32_t next_between = 0;  // what prefetch() declared for the kernels before the next GEMM
  uint32_t handed_reserved = 0;
  uint32_t lrm_end = 0;  // GemmArgs::lrm_end of the GEMMs emitted (an MLP phase's LRM partial sums above it)
  // Links g to the GEMM after it (next_g, which g's last tile starts loading), the
  // kernels between them using LRM [0, between).
  void link(GemmArgs& g, uint32_t between) {
    gemm_handoff(gcfg, g, next_g, between);
    handed = next_g;
    handed_reserved = between;
    g.next = &next_g;
  }
  // The GEMM that was linked to the one before: its LRM placement.
  void take_handoff(GemmArgs& g, const std::string& mark) const {
    g.handed_off = handed.handed_off;
    g.handed_units = handed.handed_units;
    g.lrm_p = handed.lrm_p;
    g.lrm_q = handed.lrm_q;
    if (g.handed_off) g.lrm_end = handed.lrm_end;  // (the bound its placement kept to)
    if (g.handed_off && lrm_since > handed_reserved)
      fail("compiler: internal: kernels before '{}' use LRM [0, {}) where the previous GEMM left its first tile",
           mark, lrm_since);
  }

  ImageKernels(kernels::Builder& bb, std::vector<KernelCall>& calls, const sim::Config& c, const sim::Config& gc,
               const DdrLayout& d)
      : b(bb), em(bb, c, calls), cfg(c), gcfg(gc), ddr(d) {}

  GemmArgs base_args(const std::string& w, uint32_t n, uint32_t k) const {
    GemmArgs g;
    g.n = n;
    g.k = k;
    g.w_ddr = ddr.bus(w);
    g.scratch_ocm = GEMM;
    g.scratch_bytes = rGEMM;
    g.smem = kSmem;
    g.sub_array = gcfg.npe() < cfg.npe();
    g.lrm_end = lrm_end;
    g.split = ddr.at(w).split;
    return g;
  }
  // prefetch(w, n, k) names the GEMM after the next gemm() call: that call starts the DMA
  // of w's first tile-0 units in its last tile (GemmArgs::next; the kernels between the
  // two GEMMs do not touch the GEMM scratch), and the GEMM on w runs with prefetched.
  // between: the LRM the kernels emitted between the two GEMMs use (checked when the
  // GEMM on w is emitted).
  // w_off: the GEMM's weight that many bytes into w's (the tower's v after its q|k).
  void prefetch(const std::string& w, uint32_t n, uint32_t k, uint32_t between = kLrmShared, uint64_t w_off = 0) {
    if (f16.on) return;
    next_g = base_args(w, first_call_n(w, n, k), k);
    next_g.w_ddr += uint32_t(w_off);
    next_w = w;
    next_between = between;
  }
  // Right after a GEMM whose next call (prefetched, of next_m rows) takes no unit of its own
  // (one tile, handed off whole), the call after that (w: n x k) starts its first units
  // (GemmArgs::next_started), where its first tile takes the DDR longer than the next call's
  // MACs and the kernels between the two calls (`window` cycles, moving `window_bytes` through
  // the DDR themselves) leave the DDR idle: the units then come in beside them, not only during
  // the next call's MACs. (The prefill's attention between q|k|v and o_proj, with the KV write:
  // where that write alone fills the attention's time, 32 GB/s, the units queued before it
  // measured +0.06%.)
  std::string started_w;
  void start_after_next(const std::string& w, uint32_t n, uint32_t k, uint32_t next_m, double window,
                        double window_bytes = 0) {
    if (window_bytes / cfg.ddr_bytes_per_cycle() >= window) return;
    if (f16.on || prefetched_w.empty() || !handed.handed_off || handed.handed_units) return;
    if (plan_gemm(gcfg, 0, handed.n, handed.k, handed.split).tiles != 1) return;
    const GemmArgs g2 = base_args(w, first_call_n(w, n, k), k);
    const double first_tile = double(plan_gemm(gcfg, 0, n, k, g2.split).tile_bytes) / cfg.ddr_bytes_per_cycle();
    if (first_tile <= double(next_m) * handed.n * handed.k / gcfg.mac_peak(true)) return;
    emit_gemm_prefetch(b, gcfg, g2);
    started_w = w;
  }
  // A weight whose two LRM buffers do not fit (kernels::GemmPlan::single) runs a tile a call:
  // the calls over its tiles (o's columns from tile t on, and their bias, outputs and partial sums;
  // mark.col<t>), each prefetching the next. first_call_n: the columns of the first call on w.
  uint32_t first_call_n(const std::string& w, uint32_t n, uint32_t k) const {
    const kernels::GemmPlan pl = plan_gemm(gcfg, 0, n, k, ddr.at(w).split);
    return pl.single ? std::min(n, pl.cols) : n;
  }
  void gemm(const std::string& mark, const GemmOp& o) {
    const kernels::GemmPlan pl = plan_gemm(gcfg, o.m, o.n, o.k, ddr.at(o.w).split);
    if (!pl.single || pl.tiles == 1) {
      gemm_call(mark, o);
    } else {
      const uint32_t T = pl.cols;
      const bool manual = !record && !chain && !f16.on;  // (prefetch() by hand: each call names the next)
      const std::string after_w = next_w;
      const GemmArgs after_g = next_g;
      const uint32_t after_between = next_between;
      for (uint32_t t = 0; t < pl.tiles; ++t) {
        const uint32_t c0 = t * T;
        GemmOp ot = o;
        ot.n = std::min(T, o.n - c0);
        ot.w_off = o.w_off + t * pl.tile_bytes;
        ot.y = o.y + c0 * (o.act == GemmAct::silu_pairs ? 1 : o.acc.y_f32 ? 4 : 2);
        if (o.bias != UINT32_MAX) ot.bias = o.bias + c0 * 2;
        if (o.acc.lrm) ot.acc.lrm = o.acc.lrm + t * pl.groups * 64;
        else if (o.acc.in || o.acc.y_f32) ot.acc.ocm = o.acc.ocm + c0 * 4;
        if (manual && t + 1 < pl.tiles) {
          prefetch(o.w, std::min(T, o.n - c0 - T), o.k, 0, ot.w_off + pl.tile_bytes);
        } else if (manual) {
          next_w = after_w;
          next_g = after_g;
          next_between = after_between;
        }
        gemm_call(fmt::format("{}.col{}", mark, t), ot);
      }
    }
    if (!f16.on) return;
    GemmArgs sel = base_args(detail::f16sel(o.w), kF16Cols, o.k);
    sel.m = o.m;
    sel.x_ocm = o.x;
    sel.x_stride = o.xs;
    sel.y_ocm = f16.xs;
    sel.y_stride = kF16RowBytes;
    em.call(mark + ".f16_gather", "gemm", cost_gemm(gcfg, sel), [&] { emit_gemm_w4(b, gcfg, sel); });
    em.f16_add(mark, {.m = o.m, .n = o.n, .w_ddr = ddr.bus(detail::f16w(o.w)), .xs_ocm = f16.xs, .y_ocm = o.y,
                      .y_stride = o.ys, .scratch_ocm = f16.scratch});
  }
  void gemm_call(const std::string& mark, const GemmOp& o) {
    GemmArgs g = base_args(o.w, o.n, o.k);
    g.w_ddr += uint32_t(o.w_off);
    g.act = o.act;
    g.m = o.m;  // (gemm_handoff reads it)
    if (f16.on) {
    } else if (record) {
      record->emplace_back(o.w, o.n, o.k, lrm_since, o.w_off);
    } else if (chain) {
      if (chain_i >= chain->size() || std::get<0>((*chain)[chain_i]) != o.w)
        fail("compiler: internal: the GEMM chain does not match the program at '{}'", mark);
      g.prefetched = chain_i > 0;
      if (g.prefetched) take_handoff(g, mark);
      if (++chain_i < chain->size()) {
        const Gemm& nx = (*chain)[chain_i];
        next_g = base_args(std::get<0>(nx), std::get<1>(nx), std::get<2>(nx));
        next_g.w_ddr += uint32_t(std::get<4>(nx));
        link(g, std::get<3>(nx));
      }
    } else {
      if (!prefetched_w.empty() && prefetched_w != o.w)
        fail("compiler: internal: the prefetch of '{}' is followed by the GEMM of '{}'", prefetched_w, o.w);
      g.prefetched = prefetched_w == o.w;
      if (g.prefetched) take_handoff(g, mark);
      prefetched_w = next_w;
      if (!next_w.empty()) link(g, next_between);
      g.next_started = !next_w.empty() && next_w == started_w;
      if (!started_w.empty() && !g.next_started)
        fail("compiler: internal: '{}' started before '{}', which is not its next GEMM", started_w, mark);
      started_w.clear();
      next_w.clear();
    }
    g.x_ocm = o.x;
    g.x_stride = o.xs;
    g.y_ocm = o.y;
    g.y_stride = o.ys;
    g.bias = o.bias == UINT32_MAX ? GemmBias::none : GemmBias::f16;
    g.bias_ocm = o.bias == UINT32_MAX ? 0 : o.bias;
    if (o.acc.lrm) {
      g.lrm_in = o.acc.in;
      g.lrm_out = o.acc.y_f32;
      g.lrm_acc = o.acc.lrm;
    } else {
      g.acc_in = o.acc.in;
      g.acc_ocm = o.acc.ocm;
      g.acc_stride = o.acc.stride;
      g.y_f32 = o.acc.y_f32;
    }
    em.call(mark, "gemm", cost_gemm(gcfg, g), [&] { emit_gemm_w4(b, gcfg, g); });
    lrm_since = 0;
  }
  // An fc1 GEMM (o without its ys: dense rows) and its GELU (op: tanh or erf): one call
  // (mark_gelu), the GELU in its epilogue (GemmArgs::act: the same bits), where that costs fewer
  // cycles than the element-wise call by kActMargin (act_fused: arrays wider than 32x32; on 16x16
  // and 32x32 the pass over the output is about as cheap), else the element-wise kernel after it
  // (gelu_mark), as always with mixed precision, whose correction comes between them.
  void gemm_gelu(const std::string& mark, const std::string& gelu_mark, EwOp op, GemmOp o) {
    o.ys = o.n * 2;
    const GemmAct act = op == EwOp::gelu_erf ? GemmAct::gelu_erf : GemmAct::gelu_tanh;
    const EwArgs e{.op = op, .rows = o.m, .cols = o.n, .a_ocm = o.y, .b_ocm = o.y, .out_ocm = o.y};
    if (!f16.on && (fuse_gelu || act_fused(cfg, gcfg, o.m, o.n, o.k, base_args(o.w, o.n, o.k).split, act, e))) {
      o.act = act;
      gemm(mark + "_gelu", o);
      return;
    }
    gemm(mark, o);
    ew(gelu_mark, e);
  }
  // A gate|up GEMM (o: its n gate|up columns into y, row stride ys) and its SiLU x up into y:
  // one call (mark.gate_up_silu) where its packing interleaves gate and up rows (fused:
  // GemmAct::silu_pairs, SiLU x up over the gate half), else the GEMM's gate|up rows there and the
  // element-wise call over the gate half.
  void gate_up(const std::string& C, GemmOp o, bool fused) {
    if (fused) {
      o.act = GemmAct::silu_pairs;
      return gemm(C + ".gate_up_silu", o);
    }
    gemm(C + ".gate_up", o);
    ew(C + ".silu_mul", {.op = EwOp::silu_mul, .rows = o.m, .cols = o.n / 2, .a_ocm = o.y, .a_stride = o.ys,
                         .b_ocm = o.y + o.n, .b_stride = o.ys, .out_ocm = o.y, .out_stride = o.ys});
  }
  // The LRM partial sums at lrm of the GEMM chain on n x k over m rows: rows [row0, row0 + rows)
  // of fp16 [.][n] at x (emit_gemm_lrm_seed; the chain's weights packed at split 0).
  void lrm_seed(const std::string& mark, const GemmSeedArgs& s) {
    em.call(mark, "gemm_seed", cost_gemm_lrm_seed(gcfg, s), [&] { emit_gemm_lrm_seed(b, gcfg, s); });
  }
  // The OCM run [ocm, ocm + bytes) (rows `stride` apart) parked in every PE's LRM from lrm
  // (back: from there to ocm). Below kLrmShared it counts as LRM the kernels between two GEMMs
  // use (the next GEMM's first tile goes above it); above, the GEMMs keep below it (lrm_end).
  void park(const std::string& mark, const LrmParkArgs& run, bool back) {
    if (run.lrm < kLrmShared) lrm_since = std::max(lrm_since, run.lrm + lrm_park_bytes(cfg, run.bytes));
    slots(mark, lrm_run_slots(cfg, run), !back);
  }
  // OCM <-> LRM by slots (emit_lrm_slots; above kLrmShared: the GEMMs keep below them).
  void slots(const std::string& mark, const std::vector<LrmSlot>& v, bool to_lrm) {
    em.call(mark, to_lrm ? "lrm_park" : "lrm_unpark", cost_lrm_slots(v), [&] { emit_lrm_slots(b, cfg, v, to_lrm); });
  }
  // (the scratch and the LRM share are set here)
  void norm(const std::string& mark, NormArgs n) {
    n.scratch_ocm = NSCR;
    n.scratch_bytes = norm_scratch_bytes(cfg);
    n.lrm_bytes = kLrmShared;
    lrm_since = std::max(lrm_since, kLrmShared);
    em.call(mark, "norm", cost_norm(cfg, n), [&] { emit_norm(b, cfg, n); });
  }
  // In place (y = x).
  void head_norm(const std::string& mark, HeadNormArgs n) {
    n.y_ocm = n.x_ocm;
    n.y_stride = n.x_stride;
    lrm_since = std::max(lrm_since, kLrmShared);  // LRM [0, head_dim / 32 * 64)
    em.call(mark, "head_norm", cost_head_norm(cfg, n), [&] { emit_head_norm(b, cfg, n); });
  }
  void ew(const std::string& mark, const EwArgs& e) {
    em.call(mark, "elementwise", cost_elementwise(cfg, e), [&] { emit_elementwise(b, cfg, e); });
  }
  // An MLP over every row in chunks (both plans' one chunk chain): per chunk c of `chunk`
  // inner columns, the up GEMM into up (gated: gate|up, 2 chunk columns, then SiLU x up; else
  // fc1 with its bias slice, then act) and the down GEMM's chunk into fp32 partial sums (in
  // OCM at acc, or in LRM from lrm), the first with down_bias (seeded: adding to sums already
  // there), the last rounded into out. before(c, down): the caller's kernels before chunk c's
  // up GEMM (false) and before down GEMM c (true; c / pairs of the chunks): prefetches, waits.
  // (Its estimate: the streamed plan's chunk_est.)
  struct ChunkChain {
    std::string mark;
    uint32_t rows = 0, chunk = 0, chunks = 0, in = 0, out_n = 0;  // up: in -> chunk; down: chunk -> out_n
    bool gated = false;
    // gated: a down call every `pairs` chunks (its weight(c / pairs, true) over K = pairs chunk):
    // chunk c's SiLU rows at up + (c % pairs) chunk columns (its gate|up rows from there: up_row).
    uint32_t pairs = 1;
    EwOp act = EwOp::gelu_tanh;
    std::function<std::string(uint32_t, bool)> weight;  // chunk c's up (false) or down (true) weight
    uint32_t x = 0, x_stride = 0, up = 0, up_stride = 0;
    uint32_t up_bias = UINT32_MAX, down_bias = UINT32_MAX;  // UINT32_MAX: none (up: chunk c's at + 2 c chunk)
    uint32_t out = 0, out_stride = 0, acc = 0, acc_stride = 0, lrm = 0;
    bool seeded = false;
    std::function<void(uint32_t, bool)> before;
  };
  void chunk_chain(const ChunkChain& m) {
    constexpr uint32_t kNone = UINT32_MAX;
    for (uint32_t c = 0; c < m.chunks; ++c) {
      const std::string C = fmt::format("{}.mlp{}", m.mark, c);
      const bool last = c + 1 == m.chunks, into_out = last || m.lrm;
      if (m.before) m.before(c, false);
      if (m.pairs > 1 && !m.gated) fail("compiler: internal: a down over {} chunks of an fc1 chain", m.pairs);
      const uint32_t j = c % m.pairs;
      if (m.gated) {
        gate_up(C, {.w = m.weight(c, false), .m = m.rows, .n = 2 * m.chunk, .k = m.in, .x = m.x, .xs = m.x_stride,
                    .y = m.up + 2 * j * m.chunk, .ys = m.up_stride}, silu_pm);
      } else {
        if (m.up_stride != m.chunk * 2) fail("compiler: internal: the chunk chain's fc1 rows are not dense");
        gemm_gelu(C + ".fc1", C + ".gelu", m.act, {.w = m.weight(c, false), .m = m.rows, .n = m.chunk, .k = m.in,
                                                   .x = m.x, .xs = m.x_stride, .y = m.up,
                                                   .bias = m.up_bias == kNone ? kNone : m.up_bias + c * m.chunk * 2});
      }
      if (j + 1 < m.pairs) continue;
      if (m.before) m.before(c / m.pairs, true);
      const GemmAcc acc{.in = c + 1 > m.pairs || m.seeded, .ocm = m.acc, .stride = m.acc_stride, .y_f32 = !last,
                        .lrm = m.lrm};
      gemm(C + (m.gated ? ".down" : ".fc2"),
           {.w = m.weight(c / m.pairs, true), .m = m.rows, .n = m.out_n, .k = m.pairs * m.chunk, .x = m.up,
            .xs = m.up_stride, .y = into_out ? m.out : m.acc, .ys = into_out ? m.out_stride : m.acc_stride,
            .bias = c + 1 == m.pairs ? m.down_bias : kNone, .acc = acc});
    }
  }
  // In place (out = x); fp32 tables [rows][head_dim].
  void rope(const std::string& mark, RopeArgs r) {
    r.out_ocm = r.x_ocm;
    r.out_row_stride = r.x_row_stride;
    r.tab_row_stride = r.head_dim * 4;
    r.tab_f32 = true;
    em.call(mark, "rope", cost_rope(cfg, r), [&] { emit_rope(b, cfg, r); });
  }
  // OCM attention: the caller names its shape and buffers (OcmAttnArgs fields); the scale, smem
  // and LRM share are set here.
  void attention(const std::string& mark, OcmAttnArgs at) {
    at.scale = 1.0f / std::sqrt(float(at.head_dim));
    at.smem = kSmem;
    at.lrm_bytes = kLrmShared;  // lane masks, q and accumulator parking
    lrm_since = std::max(lrm_since, kLrmShared);
    em.call(mark, "attention", cost_attention_ocm(cfg, at), [&] { emit_attention_ocm(b, cfg, at); });
  }
  // Keys and values of kv heads [g0, g0 + heads), cache slots [0, keys), from a layer's KV
  // cache (k_cache, v_cache: bus addresses of [kv heads][max_seq][head_dim]) into k_ocm, v_ocm
  // ([keys][heads head_dim] each), waited for.
  struct KvLoad {
    uint32_t k_cache = 0, v_cache = 0, max_seq = 0, head_dim = 0;
    uint32_t g0 = 0, heads = 0, keys = 0;
    uint32_t k_ocm = 0, v_ocm = 0;
  };
  void load_kv(const std::string& mark, const KvLoad& l) {
    const uint32_t hd2 = l.head_dim * 2;
    for (const auto& [what, cache, to] : {std::tuple{".load_k", l.k_cache, l.k_ocm}, {".load_v", l.v_cache, l.v_ocm}})
      em.copy(mark + what, {.src = cache + l.g0 * l.max_seq * hd2, .dst = sim::ocm_addr(to), .row_bytes = hd2,
                            .rows = l.keys, .src_stride = hd2, .dst_stride = l.heads * hd2, .planes = l.heads,
                            .src_plane_stride = l.max_seq * hd2, .dst_plane_stride = hd2});
  }
  void kv_write(const std::string& mark, KvWriteArgs kv) {
    kv.smem = kSmem;
    em.call(mark, "kv_write", cost_kv_write(cfg, kv), [&] { emit_kv_write(b, cfg, kv); });
  }
  // Rows of the token table (table_ddr and smem are set here).
  void embed(const std::string& mark, EmbedArgs e) {
    e.table_ddr = ddr.bus("embed");
    e.smem = kSmem;
    em.call(mark, "embed", cost_embed(cfg, e), [&] { emit_embed(b, cfg, e); });
    if (f16.on) em.f16_embed(mark, ddr, e, f16.xs, f16.scratch);
  }
  // The LM head on the token table (w_ddr and smem are set here).
  void lm_head(const std::string& mark, GemvArgs g) {
    g.w_ddr = ddr.bus("embed");
    g.smem = kSmem;
    em.call(mark, "gemv", cost_gemv(cfg, g), [&] { emit_gemv_w4(b, cfg, g); });
    if (f16.on) em.f16_gemv(mark, ddr, "embed", g, f16.xs, f16.scratch);
  }
};

uint32_t ocm(uint32_t off) { return sim::ocm_addr(off); }

// ---- The network, written once ----
// Each block of the model (a vision block, a merger, a decoder layer of the prefill) as the
// kernel calls of its steps, with their arguments, on a tile of rows: the one description both
// image plans emit. A plan places the buffers (OCM offsets) and schedules the steps: the resident
// plan runs them on one tile of every row, the streamed plan in phases over row tiles, around
// the copies, prefetches, waits and parks of its placement. Steps whose kernels depend on the
// placement stay with the plans: the attention (its staging), the MLP chunk chains
// (ImageKernels::chunk_chain) and the streamed plan's MLP phase over every row (mlp_all_rows).

// A tile of a block's rows [r0, r0 + rows): its steps' marks are `mark`.<step> (the step alone
// where mark is empty).
struct Tile {
  std::string mark;
  uint32_t r0 = 0, rows = 0;
  std::string at(const std::string& step) const { return mark.empty() ? step : mark + "." + step; }
};

// A vision block: norm1, qkv (one GEMM, or q|k then v: Compiler::tower_qkv_split), the rotary of
// q and k (adjacent heads), the attention, attn_out (proj, its residual, norm2), the MLP (fc1 and
// its GELU, fc2), the MLP residual. Block 0's rows come from the patches (patch_embed, pos_add).
// Its vectors at vec (Compiler::load_vision_weights): norm1 w, b, norm2 w, b, qkv, proj, fc1,
// fc2 biases.
struct VisionBlock {
  ImageKernels& k;
  const Dims& d;
  int block = 0;
  uint32_t vec = 0;
  float eps = 0;
  bool qkv_split = false;
  uint64_t v_off = 0;  // v's weight in the q|k|v packing (split)

  uint32_t n1w() const { return vec; }
  uint32_t n2w() const { return vec + 2 * d.Dv * 2; }
  uint32_t qkv_bias() const { return vec + 4 * d.Dv * 2; }
  uint32_t proj_bias() const { return qkv_bias() + 3 * d.Dv * 2; }
  uint32_t fc1_bias() const { return proj_bias() + d.Dv * 2; }
  uint32_t fc2_bias() const { return fc1_bias() + d.Iv * 2; }

  void load_patches(const Tile& t, uint32_t p, uint32_t patches_ddr) const {
    k.em.copy(t.at("load_patches"), patches_ddr + t.r0 * d.pd * 2, ocm(p), t.rows * d.pd * 2);
  }
  void patch_embed(const Tile& t, uint32_t p, uint32_t x, uint32_t bias) const {
    k.gemm(t.at("patch_embed"), {.w = "V.patch", .m = t.rows, .n = d.Dv, .k = d.pd, .x = p, .xs = d.pd * 2, .y = x,
                                 .ys = d.Dv * 2, .bias = bias});
  }
  // The position embeddings (loaded into pos) added to x.
  void pos_add(const Tile& t, uint32_t x, uint32_t pos) const {
    k.em.copy(t.at("load_pos"), k.ddr.bus("const.vpos") + t.r0 * d.Dv * 2, ocm(pos), t.rows * d.Dv * 2);
    k.ew(t.at("pos_add"), {.op = EwOp::add, .rows = t.rows, .cols = d.Dv, .a_ocm = x, .b_ocm = pos, .out_ocm = x});
  }
  void norm1(const Tile& t, uint32_t x, uint32_t y) const {
    k.norm(t.at("norm1"), {.kind = NormKind::layer, .rows = t.rows, .dim = d.Dv, .x_ocm = x, .y_ocm = y,
                           .w_ocm = n1w(), .b_ocm = n1w() + d.Dv * 2, .eps = eps});
  }
  // q|k|v rows [rows][3 Dv] at y; before(j): the caller's kernels before GEMM j (0: q|k|v or
  // q|k, 1: v).
  void qkv(const Tile& t, uint32_t x, uint32_t y, const std::function<void(int)>& before = {}) const {
    const std::string w = vname(block, "qkv");
    if (before) before(0);
    if (!qkv_split) {
      k.gemm(t.at("qkv"), {.w = w, .m = t.rows, .n = 3 * d.Dv, .k = d.Dv, .x = x, .xs = d.Dv * 2, .y = y,
                           .ys = 3 * d.Dv * 2, .bias = qkv_bias()});
      return;
    }
    k.gemm(t.at("qk"), {.w = w, .m = t.rows, .n = 2 * d.Dv, .k = d.Dv, .x = x, .xs = d.Dv * 2, .y = y,
                        .ys = 3 * d.Dv * 2, .bias = qkv_bias()});
    if (before) before(1);
    k.gemm(t.at("v"), {.w = w, .m = t.rows, .n = d.Dv, .k = d.Dv, .x = x, .xs = d.Dv * 2, .y = y + 2 * d.Dv * 2,
                       .ys = 3 * d.Dv * 2, .bias = qkv_bias() + 2 * d.Dv * 2, .w_off = v_off});
  }
  // Or q, k, v apart (the streamed plan's packings vpm_name(block, j, "qkv"), j = 0, 1, 2): one
  // of them into y ([rows][Dv]), and the rotary of q or k there.
  void qkv_apart(const Tile& t, uint32_t j, uint32_t x, uint32_t y) const {
    k.gemm(t.at(std::string(1, "qkv"[j])), {.w = vpm_name(block, j, "qkv"), .m = t.rows, .n = d.Dv, .k = d.Dv, .x = x,
                                           .xs = d.Dv * 2, .y = y, .ys = d.Dv * 2, .bias = qkv_bias() + j * d.Dv * 2});
  }
  void rope_apart(const Tile& t, uint32_t j, uint32_t y, uint32_t cos, uint32_t sin) const {
    k.rope(t.at(fmt::format("{}_rope", "qk"[j])), {.rows = t.rows, .heads = d.hv, .head_dim = d.hdv, .x_ocm = y,
                                                    .x_row_stride = d.Dv * 2, .cos_ocm = cos, .sin_ocm = sin});
  }
  // q and k in the q|k|v rows at y (heads adjacent: one call), tables cos, sin [rows][hdv].
  void qk_rope(const Tile& t, uint32_t y, uint32_t cos, uint32_t sin) const {
    k.rope(t.at("qk_rope"), {.rows = t.rows, .heads = 2 * d.hv, .head_dim = d.hdv, .x_ocm = y,
                             .x_row_stride = 3 * d.Dv * 2, .cos_ocm = cos, .sin_ocm = sin});
  }
  // The attention rows a (row stride Dv) through proj into y, added to the residual h, h's
  // norm2 into x.
  void attn_out(const Tile& t, uint32_t a, uint32_t y, uint32_t h, uint32_t x) const {
    k.gemm(t.at("proj"), {.w = vname(block, "proj"), .m = t.rows, .n = d.Dv, .k = d.Dv, .x = a, .xs = d.Dv * 2, .y = y,
                          .ys = d.Dv * 2, .bias = proj_bias()});
    residual(t, "attn_residual", h, y);
    k.norm(t.at("norm2"), {.kind = NormKind::layer, .rows = t.rows, .dim = d.Dv, .x_ocm = h, .y_ocm = x,
                           .w_ocm = n2w(), .b_ocm = n2w() + d.Dv * 2, .eps = eps});
  }
  // fc1 of the normed rows x and its GELU into f ([rows][Iv]); fc2 of f into y.
  void fc1(const Tile& t, uint32_t x, uint32_t f) const {
    k.gemm_gelu(t.at("fc1"), t.at("gelu"), EwOp::gelu_tanh, {.w = vname(block, "fc1"), .m = t.rows, .n = d.Iv,
                                                             .k = d.Dv, .x = x, .xs = d.Dv * 2, .y = f,
                                                             .bias = fc1_bias()});
  }
  void fc2(const Tile& t, uint32_t f, uint32_t y) const {
    k.gemm(t.at("fc2"), {.w = vname(block, "fc2"), .m = t.rows, .n = d.Dv, .k = d.Iv, .x = f, .xs = d.Iv * 2, .y = y,
                         .ys = d.Dv * 2, .bias = fc2_bias()});
  }
  // h += y (step: attn_residual or mlp_residual).
  void residual(const Tile& t, const char* step, uint32_t h, uint32_t y) const {
    k.ew(t.at(step), {.op = EwOp::add, .rows = t.rows, .cols = d.Dv, .a_ocm = h, .b_ocm = y, .out_ocm = h});
  }
};

// A patch merger (j: DeepStack tap j, -1 the final merger): its LayerNorm (the final merger's
// per patch, before the 2x2 shuffle, a no-op in merge-window order), fc1 and its GELU, fc2, the
// merged rows stored for the prefill (act.ds<j>, act.img). A tile's rows are merged rows. Its
// vectors at vec: norm w, b, fc1, fc2 biases.
struct Merger {
  ImageKernels& k;
  const Dims& d;
  int j = -1;
  uint32_t vec = 0;
  float eps = 0;

  uint32_t norm_dim() const { return j < 0 ? d.Dv : d.Md; }
  uint32_t fc1_bias() const { return vec + 2 * norm_dim() * 2; }
  uint32_t fc2_bias() const { return fc1_bias() + d.Md * 2; }

  void norm(const Tile& t, uint32_t x, uint32_t y) const {
    k.norm(t.at("norm"), {.kind = NormKind::layer, .rows = j < 0 ? 4 * t.rows : t.rows, .dim = norm_dim(), .x_ocm = x,
                          .y_ocm = y, .w_ocm = vec, .b_ocm = vec + norm_dim() * 2, .eps = eps});
  }
  void fc1(const Tile& t, uint32_t x, uint32_t f) const {
    k.gemm_gelu(t.at("fc1"), t.at("gelu"), EwOp::gelu_erf, {.w = mname(j, "fc1"), .m = t.rows, .n = d.Md, .k = d.Md,
                                                            .x = x, .xs = d.Md * 2, .y = f, .bias = fc1_bias()});
  }
  void fc2(const Tile& t, uint32_t f, uint32_t y) const {
    k.gemm(t.at("fc2"), {.w = mname(j, "fc2"), .m = t.rows, .n = d.H, .k = d.Md, .x = f, .xs = d.Md * 2, .y = y,
                         .ys = d.H * 2, .bias = fc2_bias()});
  }
  void store(const Tile& t, uint32_t y) const {
    const std::string to = j < 0 ? std::string("act.img") : fmt::format("act.ds{}", j);
    k.em.copy(t.at("store"), ocm(y), k.ddr.bus(to) + t.r0 * d.H * 2, t.rows * d.H * 2);
  }
};

// A decoder layer of the prefill: layer 0's embeddings (embed: the text rows looked up, the
// image rows spliced in), input_norm, qkv (q, k, v side by side in the q|k|v rows, row stride
// qkv_n * 2), k_norm and q_norm in place, the rotary, the KV write, the attention, attn_out
// (o_proj, its residual, post_norm), the MLP (gate_up per chunk call, down with its residual),
// the DeepStack rows (deepstack). Its vectors at vec (Compiler::load_text_weights): input and
// post norm weights, q and k norm weights.
struct TextLayer {
  ImageKernels& k;
  const Dims& d;
  int layer = 0;
  uint32_t vec = 0;
  float eps = 0;
  // The prompt's image rows: ni rows from row `first` (act.img rows from i0); the layers that
  // add DeepStack rows.
  uint32_t first = 0, ni = 0, i0 = 0;
  int deepstack_layers = 0;
  uint32_t ids_smem = 0, embed_scratch = 0, slot0_smem = 0, max_seq = 0;

  uint32_t qd() const { return d.nq * d.hd * 2; }   // row bytes of q
  uint32_t kd() const { return d.nkv * d.hd * 2; }  // of k (= v)
  uint32_t qkvs() const { return d.qkv_n * 2; }

  void embed(const Tile& t, uint32_t in) const {
    const uint32_t w2 = d.H * 2, a = std::max(t.r0, first), e = std::min(t.r0 + t.rows, first + ni);
    for (auto [s0, s1] : {std::pair{t.r0, std::min(t.r0 + t.rows, first)}, {std::max(t.r0, first + ni), t.r0 + t.rows}})
      if (s1 > s0)
        k.embed(t.at(s0 == t.r0 ? "embed" : "embed.after_image"),
                {.vocab = d.V, .dim = d.H, .rows = s1 - s0, .ids_smem = ids_smem + s0 * 4,
                 .out_ocm = in + (s0 - t.r0) * w2, .scratch_ocm = embed_scratch});
    if (e > a) k.em.copy(t.at("splice"), k.ddr.bus("act.img") + (a - first + i0) * w2, ocm(in + (a - t.r0) * w2), (e - a) * w2);
  }
  void input_norm(const Tile& t, uint32_t in, uint32_t x) const {
    k.norm(t.at("input_norm"), {.kind = NormKind::rms, .rows = t.rows, .dim = d.H, .x_ocm = in, .y_ocm = x, .w_ocm = vec,
                                .eps = eps});
  }
  void qkv(const Tile& t, uint32_t x, uint32_t y) const {
    k.gemm(t.at("qkv"), {.w = layer_name(layer, "qkv.gemm"), .m = t.rows, .n = d.qkv_n, .k = d.H, .x = x,
                         .xs = d.H * 2, .y = y, .ys = qkvs()});
  }
  void k_norm(const Tile& t, uint32_t qkv) const {
    k.head_norm(t.at("k_norm"), {.rows = t.rows, .heads = d.nkv, .head_dim = d.hd, .x_ocm = qkv + qd(),
                                 .x_stride = qkvs(), .w_ocm = vec + 4 * d.H + d.hd * 2, .eps = eps});
  }
  void q_norm(const Tile& t, uint32_t qkv) const {
    k.head_norm(t.at("q_norm"), {.rows = t.rows, .heads = d.nq, .head_dim = d.hd, .x_ocm = qkv, .x_stride = qkvs(),
                                 .w_ocm = vec + 4 * d.H, .eps = eps});
  }
  // The rotary of q, k or both (which: "q", "k", "qk"; q and k heads adjacent) in the q|k|v
  // rows, tables cos, sin [rows][hd].
  void rope(const Tile& t, const std::string& which, uint32_t qkv, uint32_t cos, uint32_t sin) const {
    const bool q = which.starts_with('q'), kk = which.ends_with('k');
    k.rope(t.at(which + "_rope"), {.rows = t.rows, .heads = (q ? d.nq : 0) + (kk ? d.nkv : 0), .head_dim = d.hd,
                                   .x_ocm = q ? qkv : qkv + qd(), .x_row_stride = qkvs(), .cos_ocm = cos,
                                   .sin_ocm = sin});
  }
  // k and v of the tile's rows to cache slots slot0 + r0 on (wait: the write waited for in the call).
  void kv_write(const Tile& t, uint32_t qkv, bool wait) const {
    const uint32_t hd2 = d.hd * 2;
    k.kv_write(t.at("kv_write"), {.kv_heads = d.nkv, .head_dim = d.hd, .rows = t.rows, .k_ocm = qkv + qd(),
                                  .v_ocm = qkv + qd() + kd(), .row_stride = qkvs(),
                                  .k_cache_ddr = k.ddr.bus(layer_name(layer, "kcache")) + t.r0 * hd2,
                                  .v_cache_ddr = k.ddr.bus(layer_name(layer, "vcache")) + t.r0 * hd2,
                                  .max_seq = max_seq, .pos_smem = slot0_smem, .wait = wait});
  }
  // The attention rows a (row stride qd) through o_proj into y, added to the residual h, h's
  // post_norm into x.
  void attn_out(const Tile& t, uint32_t a, uint32_t y, uint32_t h, uint32_t x) const {
    k.gemm(t.at("o_proj"), {.w = layer_name(layer, "o.gemm"), .m = t.rows, .n = d.H, .k = d.nq * d.hd, .x = a,
                            .xs = qd(), .y = y, .ys = d.H * 2});
    residual(t, "attn_residual", h, y);
    k.norm(t.at("post_norm"), {.kind = NormKind::rms, .rows = t.rows, .dim = d.H, .x_ocm = h, .y_ocm = x,
                               .w_ocm = vec + d.H * 2, .eps = eps});
  }
  // Gate|up call c (mark mlp<c>) on n columns of packed chunks from chunk0, of the normed rows
  // x, with SiLU x up into y (row stride ys): ImageKernels::gate_up.
  void gate_up(const Tile& t, uint32_t c, uint32_t chunk0, uint32_t n, uint32_t x, uint32_t y, uint32_t ys,
               bool fused) const {
    k.gate_up(t.at(fmt::format("mlp{}", c)), {.w = layer_name(layer, fmt::format("gu{}.gemm", chunk0).c_str()),
                                              .m = t.rows, .n = n, .k = d.H, .x = x, .xs = d.H * 2, .y = y, .ys = ys},
              fused);
  }
  // The activation rows act (row stride as) through down into y, added to the residual h.
  void down(const Tile& t, uint32_t act, uint32_t as, uint32_t y, uint32_t h) const {
    k.gemm(t.at("down"), {.w = layer_name(layer, "down.gemm"), .m = t.rows, .n = d.H, .k = d.I, .x = act, .xs = as,
                          .y = y, .ys = d.H * 2});
    residual(t, "mlp_residual", h, y);
  }
  // h += y (step: attn_residual or mlp_residual).
  void residual(const Tile& t, const char* step, uint32_t h, uint32_t y) const {
    k.ew(t.at(step), {.op = EwOp::add, .rows = t.rows, .cols = d.H, .a_ocm = h, .b_ocm = y, .out_ocm = h});
  }
  // The DeepStack rows of this layer among the tile's rows (residual rows at h) added to them,
  // loaded into scratch.
  void deepstack(const Tile& t, uint32_t h, uint32_t scratch) const {
    const uint32_t w2 = d.H * 2, a = std::max(t.r0, first), e = std::min(t.r0 + t.rows, first + ni);
    if (layer >= deepstack_layers || e <= a) return;
    k.em.copy(t.at("load_deepstack"), k.ddr.bus(fmt::format("act.ds{}", layer)) + (a - first + i0) * w2, ocm(scratch),
              (e - a) * w2);
    const uint32_t at = h + (a - t.r0) * w2;
    k.ew(t.at("deepstack_add"), {.op = EwOp::add, .rows = e - a, .cols = d.H, .a_ocm = at, .b_ocm = scratch,
                                 .out_ocm = at});
  }
};

// The head on the prompt's last row x: the final norm (its weight loaded into vec) into y, the
// LM head on the token table into the logits (fp16 [vocab]).
struct Head {
  ImageKernels& k;
  const Dims& d;
  uint32_t vec = 0;
  float eps = 0;
  void run(uint32_t x, uint32_t y, uint32_t logits, uint32_t scratch, uint32_t scratch_bytes) const {
    k.em.copy("final_norm.load", k.ddr.bus("final_norm"), ocm(vec), d.H * 2);
    k.norm("final_norm", {.kind = NormKind::rms, .rows = 1, .dim = d.H, .x_ocm = x, .y_ocm = y, .w_ocm = vec,
                          .eps = eps});
    k.lm_head("lm_head", {.n = d.V, .k = d.H, .x_ocm = y, .y_ocm = logits, .scratch_ocm = scratch,
                          .scratch_bytes = scratch_bytes});
  }
};

// Bytes a list of buffers takes from an OcmAlloc (slack and alignment included).
uint64_t footprint(std::initializer_list<uint64_t> sizes) {
  uint64_t t = 0;
  for (uint64_t s : sizes) t += detail::OcmAlloc::footprint(s);
  return t;
}

// [r0, r0 + rows) tiles of `total` rows, `per` rows each (the last one shorter).
std::vector<std::pair<uint32_t, uint32_t>> tiles_of(uint32_t total, uint32_t per) {
  std::vector<std::pair<uint32_t, uint32_t>> t;
  for (uint32_t r0 = 0; r0 < total; r0 += per) t.push_back({r0, std::min(per, total - r0)});
  return t;
}

// Rows per tile: the fewest tiles whose rows (ceil(total / tiles), rounded up to a
// multiple of 4, the GEMM's row-group granule) fit; 0 when even 4 rows do not fit.
uint32_t rows_per_tile(uint32_t total, uint32_t cap, const std::function<bool(uint32_t)>& fits) {
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
uint32_t groups_per_call(uint32_t kv_heads, uint32_t cap, const std::function<bool(uint32_t)>& fits) {
  for (uint32_t g : {4u, 2u, 1u}) {
    const uint32_t gg = std::min({g, kv_heads, cap ? cap : g});
    if (fits(gg)) return gg;
  }
  return 0;
}

// The shape's own rules (both plans): the grid of a tower run, the rows, image rows and
// cache slots of a prefill run.
void check_image_shape(const ImageShape& s, const CompileOptions& opt, const sim::Config& cfg, const ImageIo& io) {
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

}  // namespace

void Compiler::settle_gemm_view() {
  if (!opt_.image) return;
  const sim::Config rule = gemm_cfg_;
  const bool rows_given = opt_.image_gemm_rows != 0;  // (--gemm-rows: those rows; the LRM view still settled)
  if (!rows_given) settle_view_from_rule();
  ImageShape s;
  s.plan_only = true;
  auto plan_on = [&](const sim::Config& v) {
    gemm_cfg_ = v;
    try {
      return image_program(s, nullptr, nullptr);
    } catch (const Error&) {
      CompiledProgram none;
      none.est_cycles = std::numeric_limits<double>::infinity();
      return none;
    }
  };
  // The settled view (a), or the one settled from `from` (b: the rule's view on other terms),
  // taken where the program is resident on b and not on a, or where both plans are resident or
  // both stream and `prefer_b` says so.
  using Prefer = std::function<bool(const CompiledProgram&, const CompiledProgram&, const sim::Config&,
                                    const sim::Config&)>;
  auto settle_from = [&](const sim::Config& from, const Prefer& prefer_b) {
    const sim::Config a = gemm_cfg_;
    gemm_cfg_ = from;
    if (!rows_given) settle_view_from_rule();
    const sim::Config b = gemm_cfg_;
    const CompiledProgram pa = plan_on(a), pb = plan_on(b);
    const bool ra = pa.plan.starts_with("resident"), rb = pb.plan.starts_with("resident");
    gemm_cfg_ = (ra == rb ? prefer_b(pa, pb, a, b) : rb) ? b : a;
  };
  // A machine of more DMA channels than kernels::kGemmRuleChannels: also from the view the rule
  // gives that many (the plans give the GEMMs fewer channels where more buffers do not fit),
  // preferred where both are resident on more rows, or both stream at a lower estimate. 64x64 at
  // 4 MiB, 64 GB/s: 6 or 8 channels halved the view to 32 rows, 41.26 M cycles, where 4 channels
  // keep 64, 34.73 M; 45x28 at 512 KiB with 7 channels keeps 18 rows (from the rule's 5), not the
  // 11 that 4 channels settle on.
  if (!rows_given && cfg_.dma_channels > int(kernels::kGemmRuleChannels)) {
    sim::Config four = cfg_;
    four.dma_channels = int(kernels::kGemmRuleChannels);
    const auto rows4 = gemm_view(model_, four, opt_).pe_rows;
    if (rows4 > rule.pe_rows) {
      sim::Config from = rule;
      from.pe_rows = rows4;
      settle_from(from, [](const CompiledProgram& pa, const CompiledProgram& pb, const sim::Config& a,
                           const sim::Config& b) {
        return pa.plan.starts_with("resident") ? b.pe_rows > a.pe_rows : pb.est_cycles < pa.est_cycles;
      });
    }
  }
  // A machine of more LRM than kernels::kGemmRuleLrm: also the view of that much LRM (its GEMMs
  // tile and its partial sums and parks lie as on such a machine; the rest of each PE's LRM
  // unused), preferred where both are resident, or both stream and it reads no more weight bytes
  // at a lower estimate (or fewer bytes within kFewerBytes of it). More LRM lets split 1 take
  // K = 4,096 and 6,144: tiles twice as wide, whose first tile streams twice as long before any
  // MAC and whose DMA buffers (a tile's meta) take OCM the row tiles need. 2B with 8 KiB of LRM:
  // 64x64 at 2 MiB, 32 GB/s, 92.44 M cycles where 4 KiB took 66.00; at 4 MiB, 128 GB/s, 29.44
  // for 24.60. (At 1 MiB, 128 GB/s the machine's LRM ran 11% faster but read 1.67 x the
  // weights-once bytes, the 4 KiB view 1.47 x.)
  if (cfg_.lrm_bytes > kernels::kGemmRuleLrm) {
    sim::Config from = rule;
    from.lrm_bytes = kernels::kGemmRuleLrm;
    settle_from(from, [](const CompiledProgram& pa, const CompiledProgram& pb, const sim::Config&,
                         const sim::Config&) {
      if (pa.plan.starts_with("resident")) return true;
      if (pb.est_weight_bytes < pa.est_weight_bytes) return pb.est_cycles < kFewerBytes * pa.est_cycles;
      return pb.est_weight_bytes == pa.est_weight_bytes && pb.est_cycles < pa.est_cycles;
    });
  }
}

void Compiler::settle_view_from_rule() {
  // The GEMMs' DMA buffers (npe x 64 B a channel) are OCM the resident plan's activations
  // need: where the view makes the default image program spill and half its rows keep it
  // resident (or stream it at a lower estimate), the half, unless its GEMM MACs would take
  // over 1.5 x the weights' DDR time.
  // 64x64 at 4 MiB: 64 GB/s (1.1 x) 48.99 -> 48.29 M cycles, slower than 32x64 without
  // it; 128 GB/s (2.2 x) 36.48 -> 42.84 M, so kept whole.
  ImageShape s;
  s.plan_only = true;
  auto resident = [&] { return image_program(s, nullptr, nullptr).plan.starts_with("resident"); };
  // A streamed view's estimate with the vision part on every row where that is lower and reads
  // no more weight bytes (image_in_parts; settle_tower_view decides after): a view of fewer rows
  // gives the prefill its OCM, not the tower its PEs (64x64 at 2 MiB, 64 GB/s: 48 rows, not 64
  // whose prefill spills; 32x48 at 1 MiB, 48 GB/s: 16 rows with the tower's on 32 read 1.14 x
  // the bytes of 22 and ran 113.06 M cycles, not 93.81).
  auto planned = [&] {
    const CompiledProgram one = image_program(s, nullptr, nullptr);
    if (opt_.fp16_channels || gemm_cfg_.pe_rows >= cfg_.pe_rows || !one.plan.starts_with("streamed")) return one;
    tower_rows_ = uint32_t(cfg_.pe_rows);
    CompiledProgram parts;
    try {
      parts = image_program(s, nullptr, nullptr);
    } catch (const Error&) {
      parts.est_cycles = std::numeric_limits<double>::infinity();
    }
    tower_rows_ = 0;
    return parts.est_cycles < one.est_cycles && parts.est_weight_bytes <= one.est_weight_bytes ? parts : one;
  };
  // A view on which the default image program fits no plan (its GEMMs' DMA buffers take the OCM
  // its smallest row tiles need: 512 KiB on 21x46 or 40x25 PEs, where the rule's view left them
  // 220 KB) takes fewer rows until one fits; where none does, the view whose error names the least
  // OCM (the halving finds it at that OCM: qc-u at 400 KiB, 1 of its 32 rows, 417,472 bytes, where
  // the rule's view named 460,480).
  try {
    const sim::Config rule = gemm_cfg_;
    sim::Config least = rule;
    uint64_t least_ocm = UINT64_MAX;
    auto fits = [&] {
      if (resident()) return true;
      const CompiledProgram o = planned();
      if (!std::isfinite(o.est_cycles) && o.least_ocm && o.least_ocm < least_ocm)
        least_ocm = o.least_ocm, least = gemm_cfg_;
      return std::isfinite(o.est_cycles);
    };
    while (gemm_cfg_.pe_rows > 1 && !fits()) gemm_cfg_.pe_rows /= 2;
    if (!fits()) gemm_cfg_ = least;
  } catch (const Error&) {
  }
  // More rows than the rule's view where they read the weights fewer times and their estimate is
  // 5% or more lower: the rule halves by the DMA buffers' OCM alone. The candidates: the rule's
  // rows doubled, every row, and the rows nearest a power of two of PEs (as many PEs as a
  // smaller array's). 32x48 at 1 MiB: 22 of its 32 rows (1,056 PEs) for the rule's 16, at 24, 48
  // and 96 GB/s 153.3 -> 129.6, 122.0 -> 93.8 and 129.2 -> 82.7 M cycles (32x32: 129.8, 91.3,
  // 81.0). At 1 MiB on 32x64 and 64x64 the rule's view stays: the wider ones read the weights
  // twice as often.
  try {
    const sim::Config from = gemm_cfg_;
    const CompiledProgram at = planned();
    if (from.pe_rows < cfg_.pe_rows && at.plan == "streamed" && std::isfinite(at.est_cycles)) {
      std::set<uint32_t> cands{uint32_t(cfg_.pe_rows)};
      for (uint32_t r = 2 * from.pe_rows; r < uint32_t(cfg_.pe_rows); r *= 2) cands.insert(r);
      for (uint64_t pes = 1; pes <= cfg_.npe(); pes *= 2)
        for (uint64_t r : {pes / cfg_.pe_cols, (pes + cfg_.pe_cols - 1) / cfg_.pe_cols})
          if (r > uint32_t(from.pe_rows) && r <= uint32_t(cfg_.pe_rows)) cands.insert(uint32_t(r));
      // (Where none reads fewer weights, one estimated at under half the rule's view's cycles,
      // the rows the rule took being too few for the GEMMs' MACs: 45x28 at 512 KiB, 7 DMA channels,
      // 128 GB/s, 18 of its rows for the rule's 5, 543.8 -> 209.3 M cycles, 1.2 x the DDR bytes.)
      double best = 0.95 * at.est_cycles, best_more = 0.5 * at.est_cycles;
      uint32_t rows = 0, rows_more = 0;
      for (uint32_t r : cands) {
        gemm_cfg_.pe_rows = int(r);
        const CompiledProgram o = planned();
        if (o.plan != "streamed") continue;
        if (o.est_weight_bytes < at.est_weight_bytes && o.est_cycles < best) best = o.est_cycles, rows = r;
        if (o.est_cycles < best_more) best_more = o.est_cycles, rows_more = r;
      }
      if (!rows) rows = rows_more;
      gemm_cfg_ = from;
      if (rows) {
        gemm_cfg_.pe_rows = int(rows);
        return;
      }
    }
  } catch (const Error&) {
  }
  if (gemm_cfg_.pe_rows < 2) return;
  sim::Config half = gemm_cfg_;
  half.pe_rows /= 2;
  if (mac_heavy(gemm_cfg_)) return;  // (settle_fewer_rows tries fewer rows after the other steps)
  const sim::Config whole = gemm_cfg_;
  try {
    if (resident()) return;
    const double streamed_whole = planned().est_cycles;
    gemm_cfg_ = half;
    // Both stream: the half unless its estimate is 4% higher (its smaller GEMM buffers leave
    // room for the MLP over every row). 64x64 at 2 MiB, 64 GB/s: whole 40.22 M estimated, half
    // 41.70 M (+3.7%), taken (then 48 rows, below), run 50.38 against 37.13 M cycles; at 3 MiB,
    // 16 GB/s (16 rows by the rule): 127.24 M, half 133.19 M (+4.7%), not taken, run 128.78 M
    // where the half (then 12 rows) ran 142.89 M. (At 5%, the fine grid's 32x64 and 64x64 at 3 MiB,
    // 16 GB/s ran 9.7% and 9.9% slower; its other points are the same at 4%.)
    if (resident()) return;
    double best = planned().est_cycles;
    if (!(best < 1.04 * streamed_whole)) {
      gemm_cfg_ = whole;
      return;
    }
    // Halved again while that cuts the estimate by 5% or more (or makes it resident): a
    // larger array then runs the program as a smaller one would (1 MiB, 16 GB/s: 32x32 on 8
    // of its rows, the prefill's MLP in 2 tiles of 64 rows instead of 3 of 44, 376.4 -> 339.8
    // M cycles, as 16x16).
    while (gemm_cfg_.pe_rows > 1) {
      const sim::Config prev = gemm_cfg_;
      gemm_cfg_.pe_rows /= 2;
      if (resident()) return;
      const double e = planned().est_cycles;
      if (!(e < 0.95 * best)) {
        gemm_cfg_ = prev;
        break;
      }
      best = e;
    }
    // Then half as many rows again as the view took, where the estimate is 2% or more lower: the
    // halving steps in powers of two, and between the view and twice its rows the GEMMs' MACs
    // can fall below the weights' DDR time while their buffers still leave the row tiles room.
    // 64x64 at 2 MiB, 64 GB/s: 48 rows for 32, estimated 47.08 -> 45.33 M, measured 42.53 ->
    // 41.12 M cycles, the same DDR bytes.
    const sim::Config settled = gemm_cfg_;
    gemm_cfg_.pe_rows += gemm_cfg_.pe_rows / 2;
    if (gemm_cfg_.pe_rows >= whole.pe_rows || gemm_cfg_.pe_rows == settled.pe_rows) {
      gemm_cfg_ = settled;
      return;
    }
    if (resident()) return;
    if (!(planned().est_cycles < 0.98 * best)) gemm_cfg_ = settled;
  } catch (const Error&) {
    gemm_cfg_ = whole;  // the default shape does not fit this model's limits: the rule's view
  }
}

bool Compiler::mac_heavy(const sim::Config& view) const {
  sim::Config half = view;
  half.pe_rows /= 2;
  const GemmLoad l = gemm_load(model_, cfg_);
  return l.macs / half.mac_peak(true) > 1.5 * l.ddr_cycles;
}

bool Compiler::fewer_rows_apply() const {
  if (!opt_.image || opt_.image_gemm_rows || opt_.image_tower_rows || opt_.fp16_channels) return false;
  return gemm_cfg_.pe_rows == cfg_.pe_rows && cfg_.pe_rows >= 4 && mac_heavy(gemm_cfg_);
}

void Compiler::settle_fewer_rows(const Compiler& viewed) {
  // Streamed plans only (a resident one has no estimate to compare). 64x64 at 2 MiB: 80 GB/s, 48
  // rows (the tower on 64) estimated 34.42 -> 28.66 M, measured 43.51 -> 33.78 M cycles; 96 and
  // 112 GB/s 39.27 -> 33.01 and 36.38 -> 31.59 M; at 128 GB/s every row stays (estimated 23.12 M
  // against 29.62 M; 48 rows forced with the tower on 64 measured 31.31 M against 30.95 M).
  ImageShape s = planning_shape(opt_);
  s.plan_only = true;
  auto estimate = [&](const Compiler& c) {
    try {
      const CompiledProgram o = c.image_program(s, nullptr, nullptr);
      if (o.plan.starts_with("streamed")) return o.est_cycles;
    } catch (const Error&) {
    }
    return std::numeric_limits<double>::infinity();
  };
  const double mine = estimate(*this);
  if (!std::isfinite(mine)) return;
  double best = 0.95 * mine;
  std::optional<Compiler> pick;
  for (int rows : {cfg_.pe_rows / 2 + cfg_.pe_rows / 4, cfg_.pe_rows / 2}) {
    Compiler alt = viewed;
    alt.gemm_cfg_.pe_rows = rows;
    alt.settle_tower_view();
    alt.settle_pm_chunks();
    alt.settle_pm_pairs();
    if (const double e = estimate(alt); e < best) best = e, pick = std::move(alt);
  }
  if (pick) *this = std::move(*pick);
}

void Compiler::settle_tower_view() {
  tower_rows_ = 0;
  if (opt_.image_tower_rows) {
    if (opt_.image_tower_rows > uint32_t(cfg_.pe_rows))
      fail("compiler: the tower's GEMMs on {} PE rows, but the array has {} (pe_rows): give --tower-rows 1 to {}",
           opt_.image_tower_rows, cfg_.pe_rows, cfg_.pe_rows);
    if (opt_.fp16_channels && opt_.image_tower_rows != uint32_t(gemm_cfg_.pe_rows))
      fail("compiler: --tower-rows {} with --fp16-channels: a mixed-precision image program runs on one view "
           "(--gemm-rows {}); drop one of them",
           opt_.image_tower_rows, gemm_cfg_.pe_rows);
    tower_rows_ = opt_.image_tower_rows;
    return;
  }
  // The compiler's choice: the vision part on more rows than the prefill's view, doubled up to
  // the array's, each taken where the program in parts is estimated 2% or more below the fewer
  // rows' (or the one view's) and reads no more weight bytes; only where the tower's GEMM MACs
  // on the prefill's view (a narrow tile's idle PEs counted) take 1.5 x its weights' DDR time or
  // more, as settle_gemm_view's rule: nearer the DDR bound more PEs gain the tower little and
  // the parts cost the prefill (64x64, 2 MiB, 32 GB/s, 1.25 x on 32 rows: estimated 2% faster,
  // measured 66.00 -> 68.34 M cycles, the tower unchanged). The bytes: at 1 MiB the tower on 32
  // of 64x64's rows ran 9% faster but read 1.68 x the weights-once bytes, not 1.47.
  if (!opt_.image || opt_.image_gemm_rows || opt_.fp16_channels || gemm_cfg_.pe_rows >= cfg_.pe_rows) return;
  const Dims d(model_);
  const ImageShape shape = planning_shape(opt_);
  double row = 0, bytes = 0;  // (a block's GEMMs: q|k|v, proj, fc1, fc2)
  for (auto [n, k] : {std::pair{3 * d.Dv, d.Dv}, {d.Dv, d.Dv}, {d.Iv, d.Dv}, {d.Dv, d.Iv}})
    row += row_macs(gemm_cfg_, n, k), bytes += double(gemm_weight_bytes(cfg_, n, k));
  if (row * shape.grid_h * shape.grid_w / gemm_cfg_.mac_peak(true) < 1.5 * bytes / cfg_.ddr_bytes_per_cycle()) return;
  ImageShape s = shape;
  s.plan_only = true;
  try {
    const CompiledProgram one = image_program(s, nullptr, nullptr);
    if (!one.plan.starts_with("streamed") || !std::isfinite(one.est_cycles)) return;
    double best = one.est_cycles;
    uint32_t pick = 0;
    for (uint32_t r = 2 * uint32_t(gemm_cfg_.pe_rows);; r *= 2) {
      tower_rows_ = std::min(r, uint32_t(cfg_.pe_rows));
      const CompiledProgram o = image_program(s, nullptr, nullptr);
      if (o.est_cycles < 0.98 * best && o.est_weight_bytes <= one.est_weight_bytes)
        best = o.est_cycles, pick = tower_rows_;
      if (r >= uint32_t(cfg_.pe_rows)) break;
    }
    tower_rows_ = pick;
  } catch (const Error&) {
    tower_rows_ = 0;
  }
}

Compiler Compiler::vision_part() const {
  Compiler c = *this;
  c.gemm_cfg_.pe_rows = int(tower_rows_);
  c.tower_rows_ = 0;
  c.vision_part_ = true;
  return c;
}

CompiledProgram Compiler::image_in_parts(const ImageShape& s, kernels::Builder* into,
                                         std::vector<KernelCall>* calls) const {
  const Compiler vp = vision_part();
  ImageShape vis = s;
  vis.prefill = vis.head = false;
  if (!s.prefill) return vp.image_program(vis, into, calls);
  ImageShape rest = s;
  rest.vision = false;
  if (s.plan_only) {
    const CompiledProgram v = vp.image_program(vis, nullptr, nullptr), r = image_program(rest, nullptr, nullptr);
    CompiledProgram o;
    o.plan = "streamed";
    o.est_cycles = v.plan.starts_with("streamed") && r.plan.starts_with("streamed")
                       ? v.est_cycles + r.est_cycles
                       : std::numeric_limits<double>::infinity();
    o.est_weight_bytes = v.est_weight_bytes + r.est_weight_bytes;
    return o;
  }
  if (into) fail("compiler: internal: an image program in parts emitted into another");
  kernels::Builder b;
  std::vector<KernelCall> cl;
  std::string vplan;
  double vest = 0;
  try {
    const CompiledProgram v = vp.image_program(vis, &b, &cl);
    vplan = v.plan, vest = v.est_cycles;
  } catch (const Error& e) {
    fail("{} (the image program's vision part, its GEMMs on {} of the {} PE rows: --tower-rows; the prefill's on {})",
         e.what(), tower_rows_, cfg_.pe_rows, gemm_cfg_.pe_rows);
  }
  CompiledProgram out = image_program(rest, &b, &cl);  // (finishes the program)
  if (!cl.empty()) out.calls = std::move(cl);         // (a resident prefill appended its calls there)
  out.est_cycles = vest && out.est_cycles ? vest + out.est_cycles : 0;  // (both streamed)
  out.plan = fmt::format("tower {}; prefill {}", vplan, out.plan);
  return out;
}

CompiledProgram Compiler::image_program(const ImageShape& s) const {
  CompiledProgram p = image_program(s, nullptr, nullptr);
  if (views_differ() && s.vision)
    p.plan += fmt::format("; GEMMs on {} (tower and mergers) and {} (prefill) of the {} PE rows", tower_rows_,
                          gemm_cfg_.pe_rows, cfg_.pe_rows);
  else if (gemm_cfg_.pe_rows < cfg_.pe_rows)
    p.plan += fmt::format("; GEMMs on {} of the {} PE rows", gemm_cfg_.pe_rows, cfg_.pe_rows);
  if (gemm_cfg_.lrm_bytes < cfg_.lrm_bytes)
    p.plan += fmt::format("; GEMMs, partial sums and parks in {} of the {} LRM bytes a PE", gemm_cfg_.lrm_bytes,
                          cfg_.lrm_bytes);
  if (pm_left_out_)
    p.plan += fmt::format("; the MLP chunk packings left out so that the KV cache of {} tokens fits (a smaller "
                          "--max-context lays them)",
                          opt_.max_seq);
  return p;
}

CompiledProgram Compiler::image_program(const ImageShape& s, kernels::Builder* into,
                                        std::vector<KernelCall>* into_calls) const {
  if (!opt_.image) fail("compiler: built without the image path (CompileOptions::image = false)");
  const Dims d(model_);
  const VisionConfig& vc = model_.vision;
  const TextConfig& tc = model_.text;
  // A run without the tower has no patches (N = 0), one without the prefill no rows (S = 0).
  const uint32_t N = s.vision ? uint32_t(s.grid_h * s.grid_w) : 0, S = s.prefill ? uint32_t(s.seq_len) : 0, Nt = N / 4;
  // The prefill's image rows: ni rows from row image_start, act.img rows [i0, i0 + ni); off cached tokens before.
  const uint32_t ni = s.prefill ? uint32_t(std::max(0, s.chunk_image_rows())) : 0, i0 = uint32_t(s.image_first),
                 off = s.prefill ? s.cache_offset : 0;
  check_image_shape(s, opt_, cfg_, iio_);
  if (s.vision && views_differ()) return image_in_parts(s, into, into_calls);
  const uint32_t cw = gu_chunk(), nchunks = d.I / cw;
  // The prefill's down in chunks (down_chunk_k) beside gate|up calls of one chunk (with the
  // SiLU fused, gate_up_fused, or a SiLU call after each), a prompt without cached tokens, the
  // partial sums in LRM (sums != 0), and only where the MLP's MACs take longer than its weights'
  // DDR time: DDR-bound, the down's first tile waits no matter what, and one chunk a call costs
  // (32x64 at 8 MiB and 32 GB/s: 65.65 -> 65.71 M cycles in chunks). Where the SiLU is fused the
  // plan takes one chunk a call for them (below); else only where it takes one chunk a call
  // anyway (64x64 at 4 MiB, 128 GB/s: 28.53 -> 27.91 M; at 8 MiB six chunks a call, 26.54 M,
  // beat one a call with the down in chunks, 27.56 M).
  const double mlp_macs = 3.0 * S * d.I * d.H / gemm_cfg_.mac_peak(true),
               mlp_ddr = double(gemm_weight_bytes(cfg_, 2 * cw, d.H) * nchunks + gemm_weight_bytes(cfg_, d.H, d.I)) /
                         cfg_.ddr_bytes_per_cycle();
  const bool gu_fused = gate_up_fused();
  auto down_chunked = [&](uint32_t J, uint32_t sums) {
    return S && !off && J == 1 && sums && mlp_ddr < mlp_macs;
  };
  const uint64_t gemv_min = gemv_scratch_bytes(cfg_, 1);
  auto mx = [](std::initializer_list<uint64_t> v) { return *std::max_element(v.begin(), v.end()); };

  // ---- The OCM rule ----
  // 1. Resident plan (every activation in OCM, regions below) when its regions fit
  //    ocm_bytes, spending spare OCM in this order of preference:
  //      tower MLP rows per chunk rcv = N (one fc1/fc2 pass per block) if BIG can
  //      grow to N x Iv, else over every row in chunks (rcv = 0, below) where estimated
  //      faster, else the fewest balanced chunks of at most 3 Dv N / Iv rows (the fc1
  //      output reuses the qkv space);
  //      prefill gate|up GEMM calls of J packed chunks of cw columns each (gate_up_chunk),
  //      J the largest divisor of I / cw (whose packings are contiguous in DDR) for which
  //      TMP can hold [S][2 cw J], those whose calls are whole tiles of the GEMM view first.
  //    qc-u (4 MiB), 2B, 16x16 + 128 tokens: rcv = 128, J = 1; 8 MiB: rcv = 256, J = 4.
  //    The GEMMs' DMA buffers take all DMA channels, or 2, or 1 when only that makes the
  //    plan fit (each buffer is a DMA unit of 64 B per PE: 256 KiB on a 64x64 array).
  // 2. Otherwise the streamed plan (image_streamed below): activations in DDR, row tiles.
  // The chunks a gate|up call may take: J dividing the chunk count where their packings are
  // contiguous (no padding between them), else 1; whole tiles of the GEMM view (2 cw J columns
  // a multiple of npe) first, each kind largest first.
  bool contiguous = true;
  for (int i = 0; i < tc.num_hidden_layers && contiguous; ++i)
    for (uint32_t c = 0; c + 1 < nchunks && contiguous; ++c) {
      const DdrTensor& t0 = ddr_.at(layer_name(i, fmt::format("gu{}.gemm", c).c_str()));
      contiguous = ddr_.at(layer_name(i, fmt::format("gu{}.gemm", c + 1).c_str())).offset == t0.offset + t0.bytes;
    }
  if ((2 * cw) % (gemm_cfg_.npe() / gate_up_chunk_split())) contiguous = false;  // (a chunk not whole tiles)
  std::vector<uint32_t> js;
  for (bool whole : {true, false})
    for (uint32_t j = contiguous ? nchunks : 1; j >= 1; --j)
      if (nchunks % j == 0 && (2ull * cw * j % gemm_cfg_.npe() == 0) == whole &&
          (!gu_fused || gemm_split(gemm_cfg_, 2 * cw * j, d.H) == 1))  // (silu_pairs: split 1 only)
        js.push_back(j);
  // One chunk a call where the SiLU is fused and the down can then run in chunks beside them
  // (down_chunked: its first tile no more than a gate|up call's; 32x64 at 8 MiB, 64 GB/s: 6 chunks
  // a call 42.58 M cycles).
  const uint32_t dk_plan = down_chunk_k(cw, d.I);
  if (dk_plan && gu_fused && down_chunked(1, lrm_sums(gemm_cfg_, S, d.H, dk_plan, 2 * cw, 0))) js = {1};
  // The tower's MLP chunks (rcv = 0 below): cv fc1 columns, as wide as on `pes` PEs
  // (pm_chunk_width), fp32 partial sums at vsums in LRM. Where they are laid, pm_npe_'s; planning
  // the layout, one or two tiles of fc1 at split 2: fewer calls where the wider chunk fits
  // (CompiledProgram::tower_chunk_pes).
  const bool vpm_laid = ddr_.has(vpm_name(0, 0, "fc1"));
  auto width = [&](uint32_t pes) { return pm_chunk_width(pes, d.Iv, 1); };
  std::vector<uint32_t> chunk_pes{pm_npe_};
  if (!vpm_laid) {
    chunk_pes = {2 * gemm_cfg_.npe(), gemm_cfg_.npe()};
    if (width(chunk_pes[0]) == width(chunk_pes[1])) chunk_pes.pop_back();
  }
  auto vsums_of = [&](uint32_t cv) {  // (the proj, Dv x Dv, hands off to the chunks below them)
    return N && d.Iv % kW4Block == 0 ? lrm_sums(gemm_cfg_, N, d.Dv, cv, cv, 0, d.Dv, d.Dv) : 0u;
  };
  struct Resident {
    uint32_t rcv = 0, J = 1, pes = 0;  // pes: the tower's MLP chunks' width where rcv = 0
    bool rope_tmp = false;  // the rotary tables loaded into TMP a block (layer) at a time (no ROPE region)
    uint64_t rH, rXN, rBIG, rTMP, rROPE, rVEC;
    uint64_t need() const {
      return footprint({rH, rXN, rBIG, rTMP, rROPE, rVEC});
    }
  };
  auto resident_plan = [&](uint32_t rcv, uint32_t pes, uint32_t J, bool rope_tmp) {
    Resident r;
    r.rcv = rcv;
    r.pes = pes;
    r.J = J;
    r.rope_tmp = rope_tmp;
    r.rH = mx({uint64_t(N) * d.Dv, uint64_t(S) * d.H}) * 2;
    r.rXN = mx({uint64_t(N) * d.Dv, uint64_t(S) * d.H, uint64_t(S) * d.nq * d.hd}) * 2;
    r.rBIG = mx({uint64_t(N) * 3 * d.Dv, uint64_t(N) * d.pd, rcv ? uint64_t(rcv) * d.Iv : uint64_t(N) * width(pes),
                 uint64_t(S) * d.qkv_n, uint64_t(S) * d.I, d.V}) * 2;
    const uint64_t tables = mx({2ull * N * d.hdv, 2ull * S * d.hd}) * 4;
    r.rTMP = std::max({mx({uint64_t(N) * d.Dv, uint64_t(Nt) * d.H, uint64_t(S) * d.nq * d.hd,
                           uint64_t(S) * 2 * cw * J, uint64_t(S) * d.H}) * 2, gemv_min, rope_tmp ? tables : 0});
    r.rROPE = rope_tmp ? 0 : tables;
    r.rVEC = mx({d.vision_vec(), d.merger_vec(true), d.merger_vec(false), d.text_vec()}) * 2;
    return r;
  };
  auto fixed_with = [&](uint64_t gemm_bytes) {
    return footprint({norm_scratch_bytes(cfg_), embed_scratch_bytes(d.H), gemm_bytes}) +
           f16_footprint(cfg_, opt_.fp16_channels, std::max(N, S));
  };
  // The test knobs force the streamed plan; image_prefill only where there is a prefill, and
  // the tower may still run resident beside it (placement per stage, below).
  const bool knobs = opt_.image_tile_rows || opt_.image_attn_groups || opt_.image_copy_mode;
  const bool forced = knobs || (opt_.image_prefill && s.prefill);
  // A chunk after cached tokens stages their keys and values (and its own) from the cache,
  // g kv heads per attention call: [off + S][g head_dim] each.
  auto kv_stage = [&](uint32_t g) -> uint64_t {
    return off ? 2 * detail::OcmAlloc::footprint(uint64_t(off + S) * g * d.hd * 2) : 0;
  };
  // The fewest chunks of at most 3 Dv N / Iv rows, balanced: each chunk re-streams the
  // fc1 and fc2 weights, and a short last chunk would wait on them (192 + 64 rows at
  // 256 patches: its GEMMs DDR-bound; 128 + 128 keeps both MAC-bound).
  const uint32_t rcv_max = std::max<uint32_t>(1, std::min<uint32_t>(N, 3 * d.Dv * N / d.Iv));
  const uint32_t rcv_fit = N ? (N + (N + rcv_max - 1) / rcv_max - 1) / ((N + rcv_max - 1) / rcv_max) : 1;
  // The tower's MLP over every row (rcv = 0) in chunks of cv fc1 columns, fp32 partial sums
  // in LRM, before row chunks that read its weights again, where its chunk packings are in DDR
  // (or, planning the layout, would be: CompiledProgram::tower_chunk_pes), the sums fit LRM
  // and its estimate is less than 3% above the row chunks' (fewer DDR bytes within the model's
  // error). A call of r rows takes its MACs (its tiles on the GEMMs' view) or the next call's
  // weights streaming beside them, whichever is more, and kCallCycles.
  // Measured a block (estimates): qc-u 608 K over every row in chunks of 512, 585 K in two row
  // chunks (564 K, 534 K: 5.6% above); 64x64 at 64 GB/s 370 K, 448 K (206 K, 260 K); at 128 GB/s
  // 0.68 M cycles less in all (a tie); 32x64 at 128 GB/s 1.1% slower in all over every row
  // (282 K, 272 K: 3.7% above, not kFewerBytes' 5%), at 64 GB/s 0.25% faster (the same).
  // Chunks two tiles wide (estimates: qc-u 544 K against 534 K in row chunks, 32x64 at 64 GB/s
  // 272 K, a tie): qc-u 81.72 -> 81.08 M in all, 32x64 at 64 GB/s 44.05 -> 43.45 M, at 128 GB/s
  // 39.97 -> 40.02 M.
  constexpr double kTowerChunksMargin = 1.03;
  const double peak = gemm_cfg_.mac_peak(true), bw = cfg_.ddr_bytes_per_cycle();
  auto call = [&](uint32_t r, uint32_t n, uint32_t kk, uint32_t next_n, uint32_t next_k) {
    const GemmPlan g = plan_gemm(gemm_cfg_, 1, n, kk);
    return std::max(double(r) * g.tiles * g.cols * kk / peak, double(gemm_weight_bytes(cfg_, next_n, next_k)) / bw) +
           kCallCycles;
  };
  auto rows_est = [&] {
    double e = 0;
    for (auto [r0, r] : tiles_of(N, rcv_fit)) e += call(r, d.Iv, d.Dv, d.Dv, d.Iv) + call(r, d.Dv, d.Iv, d.Iv, d.Dv);
    return e;
  };
  // The choices (rcv, pes) in order of preference: one pass, then the chunk widths by
  // estimate (the wider first at a tie), then the row chunks.
  std::vector<std::pair<double, uint32_t>> chunked;
  if (vpm_laid || (s.plan_only && pm_allowed()))
    for (uint32_t pes : chunk_pes) {
      const uint32_t cv = width(pes);
      if (!vsums_of(cv)) continue;
      const double est = d.Iv / cv * (call(N, cv, d.Dv, d.Dv, cv) + call(N, d.Dv, cv, cv, d.Dv));
      if (opt_.image_tower_chunks || (rcv_fit < N && est < kTowerChunksMargin * rows_est()))
        chunked.push_back({est, pes});
    }
  std::stable_sort(chunked.begin(), chunked.end(), [](auto& a, auto& b) { return a.first < b.first; });
  std::vector<std::pair<uint32_t, uint32_t>> rcvs;
  if (!opt_.image_tower_chunks || chunked.empty()) rcvs.push_back({N, 0});
  for (auto [est, pes] : chunked) rcvs.push_back({0, pes});
  if (!opt_.image_tower_chunks || chunked.empty()) rcvs.push_back({rcv_fit, 0});
  std::optional<Resident> res;
  uint32_t gemm_channels = uint32_t(cfg_.dma_channels);
  uint64_t rGEMM = 0;
  // (channels, two buffers on one): the machine's (one channel first with the second buffer), then
  // 4, 2 and 1 below it
  std::vector<std::pair<uint32_t, bool>> channel_options{{gemm_channels, gemm_channels == 1}};
  for (uint32_t ch : {kernels::kGemmRuleChannels, 2u, 1u})
    if (ch < gemm_channels || (ch == 1 && gemm_channels == 1)) channel_options.push_back({ch, false});
  // The first plan that fits, in the order of preference; rope_tmp: the rotary tables may go
  // into TMP a block at a time (no ROPE region) where only that makes it fit. A machine of more
  // channels than kernels::kGemmRuleChannels gives the GEMMs that many where their buffers then
  // fit a plan earlier in the order (64x64 at 8 MiB, 128 GB/s, 6 channels: the gate|up in two
  // chunks a call, 24.21 M cycles, where 4 channels take one, 22.82 M).
  auto buffers = [&](uint32_t ch, bool two) {
    return gemm_buffer_bytes(gemm_cfg_, d, {.vision = s.vision || !in_parts(), .text = s.prefill || !in_parts(),
                                            .channels = ch, .two = two, .cw = cw});
  };
  auto first_fit = [&](uint32_t ch, bool two, bool rope_tmp_too) -> std::optional<std::pair<size_t, Resident>> {
    const uint64_t fixed = fixed_with(buffers(ch, two));
    size_t rank = 0;
    for (auto [rcv, pes] : rcvs)
      for (uint32_t J : js)
        for (bool rope_tmp : {false, true}) {
          if (rope_tmp && !rope_tmp_too) break;
          if (opt_.image_rope_per_block && !rope_tmp) continue;
          Resident r = resident_plan(rcv, pes, J, rope_tmp);
          if (r.need() + fixed + kv_stage(1) <= cfg_.ocm_bytes) return std::pair{rank, r};
          ++rank;
        }
    return std::nullopt;
  };
  auto search = [&](bool rope_tmp_too) {
    res.reset();
    for (auto [ch, two] : channel_options) {
      if (forced) break;
      auto fit = first_fit(ch, two, rope_tmp_too);
      if (!fit) continue;
      if (ch > kernels::kGemmRuleChannels)
        if (auto fewer = first_fit(kernels::kGemmRuleChannels, false, rope_tmp_too); fewer && fewer->first < fit->first)
          fit = fewer, ch = kernels::kGemmRuleChannels, two = false;
      res = fit->second;
      gemm_channels = ch;
      rGEMM = buffers(ch, two);
      break;
    }
  };
  // The tables in TMP only for more GEMM DMA channels, never instead of the streamed one (64x64
  // at 4 MiB: two where the ROPE region left one). Not for a plan earlier in the order above:
  // their loads cost DDR time (32x64, 4 MiB, 16 GB/s: one pass with them 127.40 M cycles, the
  // chunks without 126.91 M).
  search(opt_.image_rope_per_block);
  if (res && !opt_.image_rope_per_block) {
    const auto kept = std::tuple(res, gemm_channels, rGEMM);
    search(true);
    if (!res || gemm_channels <= std::get<1>(kept)) std::tie(res, gemm_channels, rGEMM) = kept;
  }
  auto plan_only = [](const char* plan) {
    CompiledProgram o;
    o.plan = plan;
    return o;
  };
  if (!res && s.plan_only) {  // "streamed" and its estimate (none where its planning fails)
    try {
      return image_streamed(s);
    } catch (const Error&) {
      CompiledProgram o = plan_only("streamed");
      o.est_cycles = std::numeric_limits<double>::infinity();
      return o;
    }
  }
  if (!res && s.vision && s.prefill && !knobs && !into) {
    // Placement per stage: the tower resident when it fits alone, the prefill streamed
    // (they meet in DDR: act.img and the DeepStack rows).
    ImageShape tower = s;
    tower.prefill = tower.head = false;
    tower.plan_only = true;
    if (image_program(tower).plan.starts_with("resident")) {
      tower.plan_only = false;
      kernels::Builder b;
      std::vector<KernelCall> calls;
      const std::string tower_plan = image_program(tower, &b, &calls).plan;
      ImageShape rest = s;
      rest.vision = false;
      CompiledProgram out = image_streamed(rest, &b, &calls);
      out.plan = fmt::format("tower {}; prefill {}", tower_plan, out.plan);
      return out;
    }
  }
  if (!res) return image_streamed(s, into, into_calls);
  // (prefill_chunk_rows sizes chunks for the resident plan on at least 2 DMA channels: on
  // one its GEMMs run slower than a shorter chunk would; on 2 they cost less than a chunk
  // more, which reads every weight again.)
  if (s.plan_only) {
    CompiledProgram o = plan_only(gemm_channels < std::min(2u, uint32_t(cfg_.dma_channels))
                                      ? "resident, one GEMM DMA channel"
                                      : "resident");
    if (res->rcv == 0 && !vpm_laid && s.vision)
      o.tower_chunk_pes = res->pes;
    const uint32_t dk = down_chunk_k(cw, d.I);
    o.down_chunks = down_chunked(res->J, dk ? lrm_sums(gemm_cfg_, S, d.H, dk, 2 * cw * res->J, 0) : 0);
    o.gate_up_whole = res->J == nchunks;
    return o;
  }
  const uint32_t rcv = res->rcv, J = res->J, cv = width(res->pes), vsums = rcv ? 0 : vsums_of(cv);
  const std::string tower_note =
      rcv ? fmt::format("tower MLP rows per chunk {}", rcv)
          : fmt::format("tower MLP over every row in chunks of {} (fp32 partial sums in LRM)", cv);
  const uint64_t rH = res->rH, rXN = res->rXN, rBIG = res->rBIG, rTMP = res->rTMP, rROPE = res->rROPE,
                 rVEC = res->rVEC;

  // ---- OCM regions (bytes) ----
  detail::OcmAlloc a(cfg_.ocm_bytes);
  const uint32_t H = a.take(rH, "residual stream"), XN = a.take(rXN, "normed rows"), BIG = a.take(rBIG, "qkv / MLP");
  // The rotary tables: in their own region, loaded once a stage; or (rope_tmp) loaded a block
  // (layer) at a time into TMP, dead from the block's start to its attention, on a DMA channel
  // the GEMMs leave free where there is one (waited for before the rotary), else waited.
  const uint32_t TMP = a.take(rTMP, "temporaries"), ROPE = res->rope_tmp ? TMP : a.take(rROPE, "rotary tables");
  const uint32_t VEC = a.take(rVEC, "vectors");
  const uint32_t rope_ch = gemm_channels < uint32_t(cfg_.dma_channels) ? uint32_t(cfg_.dma_channels) - 1 : UINT32_MAX;
  const uint32_t NSCR = a.take(norm_scratch_bytes(cfg_), "norm scratch");
  const uint32_t ESCR = a.take(embed_scratch_bytes(d.H), "embed scratch");
  const uint32_t GEMM = a.take(rGEMM, "GEMM DMA buffers");
  const uint32_t gk = off ? groups_per_call(d.nkv, 0, [&](uint32_t g) { return kv_stage(g) <= a.left(); }) : 0;
  const uint32_t KC = off ? a.take(uint64_t(off + S) * gk * d.hd * 2, "cached keys") : 0;
  const uint32_t VC = off ? a.take(uint64_t(off + S) * gk * d.hd * 2, "cached values") : 0;

  kernels::Builder own;
  kernels::Builder& b = into ? *into : own;
  CompiledProgram out;
  ImageKernels k(b, into ? *into_calls : out.calls, cfg_, gemm_cfg_, ddr_);
  k.GEMM = GEMM;
  k.rGEMM = uint32_t(rGEMM);
  k.gcfg.dma_channels = int(gemm_channels);
  const std::string channels_note =
      (gemm_channels < uint32_t(cfg_.dma_channels)
           ? fmt::format("; GEMM DMA channels {} (of {}: so that their buffers fit this plan)", gemm_channels,
                         cfg_.dma_channels)
           : "") +
      (res->rope_tmp ? "; rotary tables a block at a time in the temporaries" : "");
  k.NSCR = NSCR;
  k.f16 = take_f16(a, cfg_, opt_.fp16_channels, std::max(N, S));
  k.fuse_gelu = opt_.image_gelu_fused;
  detail::Emitter& em = k.em;
  // Rotary tables cos [rows][hd] then sin into ROPE from src and src + sin_off: waited for
  // (chan UINT32_MAX) or started on chan. rope_tmp: a block's (layer's) tables start before its
  // norm where a channel is free (tables_early) and are ready before its rotary (tables_ready).
  auto load_tables = [&](const std::string& M, uint32_t src, uint32_t sin_off, uint32_t bytes, uint32_t chan) {
    for (uint32_t h : {0u, 1u}) {
      const std::string m = M + (h ? "load_rope_sin" : "load_rope");
      if (chan == UINT32_MAX) em.copy(m, src + h * sin_off, ocm(ROPE + h * bytes), bytes);
      else em.copy_async(m, chan, src + h * sin_off, ocm(ROPE + h * bytes), bytes);
    }
  };
  auto tables_early = [&](const std::function<void(uint32_t)>& load) {
    if (res->rope_tmp && rope_ch != UINT32_MAX) load(rope_ch);
  };
  auto tables_ready = [&](const std::function<void(uint32_t)>& load) {
    if (res->rope_tmp && rope_ch == UINT32_MAX) load(UINT32_MAX);
    if (res->rope_tmp && rope_ch != UINT32_MAX) em.wait(rope_ch);
  };
  auto prefetch = [&](const std::string& w, uint32_t n, uint32_t kk, uint32_t between = ImageKernels::kLrmShared,
                      uint64_t w_off = 0) { k.prefetch(w, n, kk, between, w_off); };
  // The tower's q|k|v: one call, or q|k then v (tower_qkv_split): its first call's columns.
  const bool qkv_split = tower_qkv_split();
  const uint32_t qkv_n = (qkv_split ? 2 : 3) * d.Dv;
  const float veps = float(vc.layer_norm_eps), teps = float(tc.rms_norm_eps);

  // ================= vision tower =================
  if (s.vision) {
    b.op("mark.begin", {Name{"vision_tower"}});
    VisionBlock vb{.k = k, .d = d, .vec = VEC, .eps = veps, .qkv_split = qkv_split, .v_off = tower_v_offset()};
    const Tile all{.mark = "V", .r0 = 0, .rows = N};
    vb.load_patches(all, BIG, iio_.patches_ddr);
    em.copy("V.load_vectors", ddr_.bus("V.patch_bias"), ocm(VEC), d.Dv * 2);
    prefetch(vname(0, "qkv"), qkv_n, d.Dv);
    vb.patch_embed(all, BIG, H, VEC);
    vb.pos_add(all, H, XN);
    // Rotary tables: cos [N][hdv] then sin [N][hdv], as the rope calls expect.
    auto vtables = [&](const std::string& M) {
      return [&, M](uint32_t chan) {
        load_tables(M, ddr_.bus("const.vrope"), opt_.max_patches * d.hdv * 4, N * d.hdv * 4, chan);
      };
    };
    if (!res->rope_tmp) vtables("V.")(UINT32_MAX);
    // The first GEMM after block blk's MLP (or after its merger j0 - 1): the next tap's
    // merger fc1, else the next block's qkv, else the final merger's fc1.
    auto prefetch_after_block = [&](int blk, int j0) {
      const auto& taps = vc.deepstack_visual_indexes;
      for (int j = j0; j < int(taps.size()); ++j)
        if (taps[j] == blk) return prefetch(mname(j, "fc1"), d.Md, d.Md);
      if (blk + 1 < vc.depth) return prefetch(vname(blk + 1, "qkv"), qkv_n, d.Dv);
      prefetch(mname(-1, "fc1"), d.Md, d.Md);
    };
    const double v_attn = attention_estimate(cfg_, {.q_heads = d.hv, .kv_heads = d.hv, .head_dim = d.hdv, .seq = N});
    for (int blk = 0; blk < vc.depth; ++blk) {
      const std::string B = fmt::format("V{}", blk);
      const Tile t{.mark = B, .r0 = 0, .rows = N};
      vb.block = blk;
      b.op("mark.begin", {Name{B}});
      em.copy(B + ".load_vectors", ddr_.bus(vname(blk, "vec")), ocm(VEC), d.vision_vec() * 2);
      tables_early(vtables(B + "."));
      vb.norm1(t, H, XN);
      vb.qkv(t, XN, BIG, [&](int j) {
        if (j == 0 && qkv_split) prefetch(vname(blk, "qkv"), d.Dv, d.Dv, 0, vb.v_off);
        else prefetch(vname(blk, "proj"), d.Dv, d.Dv);
      });
      if (rcv == 0) k.start_after_next(vpm_name(blk, 0, "fc1"), cv, d.Dv, N, v_attn);
      else k.start_after_next(vname(blk, "fc1"), d.Iv, d.Dv, N, v_attn);
      tables_ready(vtables(B + "."));
      vb.qk_rope(t, BIG, ROPE, ROPE + N * d.hdv * 4);
      k.attention(B + ".attention", {.q_heads = d.hv, .kv_heads = d.hv, .head_dim = d.hdv, .seq = N, .causal = false,
                                     .q_ocm = BIG, .q_row_stride = 3 * d.Dv * 2, .q_head_stride = d.hdv * 2,
                                     .k_ocm = BIG + d.Dv * 2, .v_ocm = BIG + 2 * d.Dv * 2, .kv_row_stride = 3 * d.Dv * 2,
                                     .out_ocm = XN, .out_row_stride = d.Dv * 2, .out_head_stride = d.hdv * 2,
                                     .scratch_ocm = TMP, .scratch_bytes = uint32_t(rTMP)});
      if (rcv == 0) {
        // Over every row: per chunk c of cv fc1 columns, fc1 (its bias slice) and GELU into
        // BIG, fc2's chunk into fp32 partial sums in LRM (the first with fc2's bias), the last
        // rounded into TMP. The GEMMs from the proj's hand-off on keep below the sums.
        k.lrm_end = vsums;
        prefetch(vpm_name(blk, 0, "fc1"), cv, d.Dv);
      } else {
        prefetch(vname(blk, "fc1"), d.Iv, d.Dv);
      }
      vb.attn_out(t, XN, TMP, H, XN);
      if (rcv == 0) {
        const uint32_t chunks = d.Iv / cv;
        k.chunk_chain({.mark = B, .rows = N, .chunk = cv, .chunks = chunks, .in = d.Dv, .out_n = d.Dv,
                       .weight = [&](uint32_t c, bool down) { return vpm_name(blk, c, down ? "fc2" : "fc1"); },
                       .x = XN, .x_stride = d.Dv * 2, .up = BIG, .up_stride = cv * 2, .up_bias = vb.fc1_bias(),
                       .down_bias = vb.fc2_bias(), .out = TMP, .out_stride = d.Dv * 2, .lrm = vsums,
                       .before = [&](uint32_t c, bool down) {
                         // (hand-prefetched: only the GELU between each pair)
                         if (!down) prefetch(vpm_name(blk, c, "fc2"), d.Dv, cv, 0);
                         else if (c + 1 < chunks) prefetch(vpm_name(blk, c + 1, "fc1"), cv, d.Dv, 0);
                         else prefetch_after_block(blk, 0);
                       }});
        k.lrm_end = 0;
      }
      for (uint32_t r0 = 0; rcv && r0 < N; r0 += rcv) {
        const Tile c{.mark = fmt::format("{}.mlp{}", B, r0 / rcv), .r0 = r0, .rows = std::min(rcv, N - r0)};
        prefetch(vname(blk, "fc2"), d.Dv, d.Iv, 0);  // only the GELU between
        vb.fc1(c, XN + r0 * d.Dv * 2, BIG);
        if (r0 + rcv < N) prefetch(vname(blk, "fc1"), d.Iv, d.Dv, 0);
        else prefetch_after_block(blk, 0);
        vb.fc2(c, BIG, TMP + r0 * d.Dv * 2);
      }
      vb.residual(t, "mlp_residual", H, TMP);
      b.op("mark.end", {Name{B}});
      // DeepStack tap: the block output through merger j, kept in DDR for the prefill.
      const auto& taps = vc.deepstack_visual_indexes;
      for (int j = 0; j < int(taps.size()); ++j) {
        if (taps[j] != blk) continue;
        const Merger m{.k = k, .d = d, .j = j, .vec = VEC, .eps = veps};
        const Tile mt{.mark = fmt::format("M{}", j), .r0 = 0, .rows = Nt};
        b.op("mark.begin", {Name{mt.mark}});
        em.copy(mt.at("load_vectors"), ddr_.bus(mname(j, "vec")), ocm(VEC), d.merger_vec(true) * 2);
        m.norm(mt, H, XN);
        prefetch(mname(j, "fc2"), d.H, d.Md, 0);
        m.fc1(mt, XN, BIG);
        prefetch_after_block(blk, j + 1);
        m.fc2(mt, BIG, TMP);
        m.store(mt, TMP);
        b.op("mark.end", {Name{mt.mark}});
      }
    }
    {
      const Merger m{.k = k, .d = d, .j = -1, .vec = VEC, .eps = veps};
      const Tile mt{.mark = "Mf", .r0 = 0, .rows = Nt};
      b.op("mark.begin", {Name{"Mf"}});
      em.copy("Mf.load_vectors", ddr_.bus(mname(-1, "vec")), ocm(VEC), d.merger_vec(false) * 2);
      m.norm(mt, H, XN);
      prefetch(mname(-1, "fc2"), d.H, d.Md, 0);
      m.fc1(mt, XN, BIG);
      if (s.prefill) prefetch(layer_name(0, "qkv.gemm"), d.qkv_n, d.H);
      m.fc2(mt, BIG, TMP);
      m.store(mt, TMP);
      b.op("mark.end", {Name{"Mf"}});
    }
    b.op("mark.end", {Name{"vision_tower"}});
  }  // s.vision
  if (!s.prefill) {
    if (!into) {
      b.op("halt");
      out.program = b.finish();
    }
    out.plan = fmt::format("resident: {}{}", tower_note, channels_note);
    return out;
  }

  // ================= prefill =================
  b.op("mark.begin", {Name{"prefill"}});
  const uint32_t is = ni ? uint32_t(s.image_start) : 0;
  TextLayer tl{.k = k, .d = d, .vec = VEC, .eps = teps, .first = is, .ni = ni, .i0 = i0,
               .deepstack_layers = int(vc.deepstack_visual_indexes.size()), .ids_smem = iio_.ids_smem,
               .embed_scratch = ESCR, .slot0_smem = iio_.slot0_smem, .max_seq = opt_.max_seq};
  // Embeddings of the text rows, the image rows spliced in.
  tl.embed({.mark = "", .r0 = 0, .rows = S}, H);
  auto ttables = [&](const std::string& M) {
    return [&, M](uint32_t chan) { load_tables(M, iio_.trope_ddr, opt_.max_seq * d.hd * 4, S * d.hd * 4, chan); };
  };
  if (!res->rope_tmp) ttables("")(UINT32_MAX);
  const uint32_t qd = tl.qd(), qkvs = tl.qkvs();
  // q, k and v stay in the qkv rows (BIG, row stride qkv_n * 2): the per-head norms,
  // the rotary, the cache write and the attention read them there; the attention's
  // head-major staging goes to TMP.
  const uint32_t Q = BIG, K = BIG + qd, Vv = BIG + qd + tl.kd();
  // Gate|up calls of J packed chunks: [S][2 cw J] in TMP, chunk c' at column 2 cw c'.
  const uint32_t ncalls = nchunks / J, gu_n = 2 * cw * J;
  const double p_attn =
      attention_estimate(cfg_, {.q_heads = d.nq, .kv_heads = d.nkv, .head_dim = d.hd, .seq = S, .causal = true});
  // The down in chunks beside the gate|up calls (down_chunk_k, their packings laid: plan_image_ddr),
  // its fp32 partial sums in LRM seeded with the residual, the last rounding residual + MLP into H.
  const uint32_t dk = down_chunk_k(cw, d.I), dsums = dk ? lrm_sums(gemm_cfg_, S, d.H, dk, gu_n, 0) : 0;
  const bool dchain = down_chunked(J, dsums) && ddr_.has(layer_name(0, "dn0.gemm"));
  for (int i = 0; i < tc.num_hidden_layers; ++i) {
    const std::string L = fmt::format("P{}", i);
    tl.layer = i;
    b.op("mark.begin", {Name{L}});
    // Rows [r0, S) past the KV write (read_from): the tile `past`, residual rows at Hr.
    const uint32_t r0 = read_from(s, S, i, tc.num_hidden_layers), rows = S - r0;
    const uint32_t Hr = H + r0 * d.H * 2;
    const Tile all{.mark = L, .r0 = 0, .rows = S}, past{.mark = L, .r0 = r0, .rows = rows};
    // Layer 0's norm weights load here; the others were started behind the previous layer's
    // post-attention norm (its vectors are dead then) and waited for after its first MLP
    // GEMM (a wait on channel 0 here would also wait for this layer's q|k|v weights).
    if (i == 0) em.copy(L + ".load_norms", ddr_.bus(layer_name(i, "norms")), ocm(VEC), d.text_vec() * 2);
    tables_early(ttables(L + "."));
    tl.input_norm(all, H, XN);
    if (rows) prefetch(layer_name(i, "o.gemm"), d.H, d.nq * d.hd);
    tl.qkv(all, XN, BIG);
    if (rows) k.start_after_next(layer_name(i, "gu0.gemm"), gu_n, d.H, rows, p_attn, double(S) * 2 * d.nkv * d.hd * 2);
    // q and k heads are adjacent in the rows: one rotary call for both; the cache write
    // (DMA) then overlaps the attention.
    tl.k_norm(all, BIG);
    tl.q_norm(all, BIG);
    tables_ready(ttables(L + "."));
    tl.rope(all, "qk", BIG, ROPE, ROPE + S * d.hd * 4);
    tl.kv_write(all, BIG, off != 0);
    if (!rows) {
      if (!off) emit_kv_write_wait(b, cfg_);
      b.op("mark.end", {Name{L}});
      continue;
    }
    if (!off) {
      // The attention reads k and v in OCM; the MLP overwrites the rows the write reads.
      k.attention(L + ".attention", {.q_heads = d.nq, .kv_heads = d.nkv, .head_dim = d.hd, .seq = rows,
                                     .causal = true, .q_ocm = Q + r0 * qkvs, .q_row_stride = qkvs,
                                     .q_head_stride = d.hd * 2, .k_ocm = K, .v_ocm = Vv, .kv_row_stride = qkvs,
                                     .out_ocm = XN, .out_row_stride = qd, .out_head_stride = d.hd * 2,
                                     .scratch_ocm = TMP, .scratch_bytes = uint32_t(rTMP), .kv_offset = r0});
      emit_kv_write_wait(b, cfg_);
    } else {
      // After cached tokens: keys and values of slots [0, off + S) from the cache, gk kv heads at a time.
      const uint32_t hd2 = d.hd * 2, G = d.nq / d.nkv, kc = ddr_.bus(layer_name(i, "kcache")),
                     vcc = ddr_.bus(layer_name(i, "vcache"));
      for (uint32_t g0 = 0; g0 < d.nkv; g0 += gk) {
        const uint32_t ng = std::min(gk, d.nkv - g0);
        const std::string A = fmt::format("{}.g{}", L, g0 / gk);
        k.load_kv(A, {.k_cache = kc, .v_cache = vcc, .max_seq = opt_.max_seq, .head_dim = d.hd, .g0 = g0, .heads = ng,
                      .keys = off + S, .k_ocm = KC, .v_ocm = VC});
        k.attention(A + ".attention", {.q_heads = ng * G, .kv_heads = ng, .head_dim = d.hd, .seq = rows,
                                       .causal = true, .q_ocm = Q + r0 * qkvs + g0 * G * hd2, .q_row_stride = qkvs,
                                       .q_head_stride = hd2, .k_ocm = KC, .v_ocm = VC, .kv_row_stride = ng * hd2,
                                       .out_ocm = XN + g0 * G * hd2, .out_row_stride = qd, .out_head_stride = hd2,
                                       .scratch_ocm = TMP, .scratch_bytes = uint32_t(rTMP), .kv_offset = off + r0});
      }
    }
    if (dchain) k.lrm_end = dsums;
    prefetch(layer_name(i, "gu0.gemm"), gu_n, d.H);
    tl.attn_out(past, XN, TMP, Hr, XN);
    if (i + 1 < tc.num_hidden_layers)
      em.copy_behind(L + ".load_next_norms", ddr_.bus(layer_name(i + 1, "norms")), ocm(VEC),
                     d.text_vec() * 2);
    if (dchain) {
      k.lrm_seed(L + ".residual_sums", {.m = rows, .n = d.H, .k = dk, .row0 = 0, .rows = rows, .x_ocm = Hr,
                                        .x_stride = d.H * 2, .lrm_acc = dsums});
      for (uint32_t c = 0; c < nchunks; ++c) {
        const std::string C = fmt::format("{}.mlp{}", L, c);
        const bool odd = c % 2;
        if (!odd) prefetch(layer_name(i, fmt::format("gu{}.gemm", c + 1).c_str()), gu_n, d.H, 0);
        else prefetch(layer_name(i, fmt::format("dn{}.gemm", c / 2).c_str()), d.H, dk, 0);
        if (gu_fused)
          tl.gate_up(past, c, c, 2 * cw, XN, BIG + c * cw * 2, d.I * 2, true);
        else {
          k.gemm(C + ".gate_up", {.w = layer_name(i, fmt::format("gu{}.gemm", c).c_str()), .m = rows, .n = gu_n,
                                  .k = d.H, .x = XN, .xs = d.H * 2, .y = TMP, .ys = gu_n * 2});
          k.ew(C + ".silu_mul", {.op = EwOp::silu_mul, .rows = rows, .cols = cw, .a_ocm = TMP, .a_stride = gu_n * 2,
                                 .b_ocm = TMP + cw * 2, .b_stride = gu_n * 2, .out_ocm = BIG + c * cw * 2,
                                 .out_stride = d.I * 2});
        }
        if (c == 0 && i + 1 < tc.num_hidden_layers) em.copy_wait();
        if (!odd) continue;
        const bool last = c + 1 == nchunks;
        if (!last) prefetch(layer_name(i, fmt::format("gu{}.gemm", c + 1).c_str()), gu_n, d.H, 0);
        else if (i + 1 < tc.num_hidden_layers) prefetch(layer_name(i + 1, "qkv.gemm"), d.qkv_n, d.H);
        k.gemm(C + ".down", {.w = layer_name(i, fmt::format("dn{}.gemm", c / 2).c_str()), .m = rows, .n = d.H,
                             .k = dk, .x = BIG + (c - 1) * cw * 2, .xs = d.I * 2, .y = Hr, .ys = d.H * 2,
                             .acc = {.in = true, .y_f32 = !last, .lrm = dsums}});
      }
      k.lrm_end = 0;
    }
    for (uint32_t c = 0; !dchain && c < ncalls; ++c) {
      const std::string C = fmt::format("{}.mlp{}", L, c);
      if (c + 1 < ncalls) prefetch(layer_name(i, fmt::format("gu{}.gemm", (c + 1) * J).c_str()), gu_n, d.H, 0);
      else prefetch(layer_name(i, "down.gemm"), d.H, d.I, 0);  // only SiLU gates between
      // (fused: SiLU x up straight into the activation's rows)
      if (gu_fused)
        tl.gate_up(past, c, c * J, gu_n, XN, BIG + c * J * cw * 2, d.I * 2, true);
      else
        k.gemm(C + ".gate_up", {.w = layer_name(i, fmt::format("gu{}.gemm", c * J).c_str()), .m = rows, .n = gu_n,
                                .k = d.H, .x = XN, .xs = d.H * 2, .y = TMP, .ys = gu_n * 2});
      if (c == 0 && i + 1 < tc.num_hidden_layers && ncalls > 1) em.copy_wait();  // the next layer's norm weights
      if (gu_fused) continue;
      if (ncalls == 1) {
        // One call takes every chunk: its S x J gate|up rows of 2 cw and the activation's S x J
        // rows of cw are each evenly spaced, so one SiLU gate takes them all.
        k.ew(C + ".silu_mul", {.op = EwOp::silu_mul, .rows = rows * J, .cols = cw, .a_ocm = TMP, .a_stride = 2 * cw * 2,
                               .b_ocm = TMP + cw * 2, .b_stride = 2 * cw * 2, .out_ocm = BIG, .out_stride = cw * 2});
        continue;
      }
      for (uint32_t cc = 0; cc < J; ++cc)
        k.ew(J == 1 ? C + ".silu_mul" : fmt::format("{}.silu_mul{}", C, cc),
             {.op = EwOp::silu_mul, .rows = rows, .cols = cw, .a_ocm = TMP + cc * 2 * cw * 2, .a_stride = gu_n * 2,
              .b_ocm = TMP + cc * 2 * cw * 2 + cw * 2, .b_stride = gu_n * 2, .out_ocm = BIG + (c * J + cc) * cw * 2,
              .out_stride = d.I * 2});
    }
    // (One gate|up call: the norm weights' copy waited for here, where the down's first wait on
    // channel 0 waits behind it anyway, not after the call: 32x64, 8 MiB, 64 GB/s 43.23 -> 42.94
    // M cycles. With several calls, after the first: here would cost qc-u 0.2%.)
    if (!dchain) {
      if (i + 1 < tc.num_hidden_layers && ncalls == 1) em.copy_wait();
      if (i + 1 < tc.num_hidden_layers) prefetch(layer_name(i + 1, "qkv.gemm"), d.qkv_n, d.H);
      tl.down(past, BIG, d.I * 2, TMP, Hr);
    }
    tl.deepstack(past, Hr, TMP);
    b.op("mark.end", {Name{L}});
  }
  b.op("mark.end", {Name{"prefill"}});

  // ================= head (last row) =================
  if (s.head) {
  b.op("mark.begin", {Name{"head"}});
  Head{.k = k, .d = d, .vec = VEC, .eps = teps}.run(H + (S - 1) * d.H * 2, XN, BIG, TMP, uint32_t(rTMP));
  b.op("mark.end", {Name{"head"}});
  }
  b.op("halt");
  out.program = b.finish();
  out.logits_ocm = BIG;
  out.plan = fmt::format("resident: {}, gate|up chunks per call {}{}{}", tower_note, J,
                         dchain ? fmt::format(", the down in chunks of {} beside them (fp32 partial sums in LRM)", dk) : "",
                         channels_note);
  return out;
}

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
  // sums, the residual; buffers pmb(part, rows) of its three parts (each starts with the
  // normed rows). Where all rows do not fit, in tiles of rpm rows (each reads every chunk).
  bool pm = false;
  uint32_t rpm = 0;
  // Where the partial sums are in LRM, the MLP over every row may run its first and last
  // parts (out GEMM, residual, norm; residual again) in tiles of ppt rows (rpm: untiled), so
  // that only the normed rows and the up output take every row's OCM (1 MiB): each part tile
  // reads the out GEMM's weight again, the chunks read theirs once.
  uint32_t ppt = 0;
  std::function<std::vector<uint64_t>(uint32_t, uint32_t, uint32_t)> pmb;  // (part, rows, part tile rows)
  // The same for the tower's MLP phase (C): proj, residual and norm of all rows, fc1 (and
  // GELU) and fc2 in pm_chunk columns; its parts' buffers vpmb(part, rows, part tile rows).
  // Where all rows do not fit, in tiles of vrpm rows (as rpm).
  bool vpm = false;
  uint32_t vrpm = 0, vpt = 0;  // the tower's MLP rows a tile, part tile rows (as rpm, ppt)
  // The mergers' MLP over every merged row in chunks of pm_chunk(Md) fc1 columns (fc1, GELU,
  // fc2 into fp32 partial sums in LRM), where their row tiles would read every weight again:
  // buffers mpmb() (the normed rows, fc2's output over them at the end; a chunk's fc1 output).
  bool mpm = false;
  std::function<std::vector<uint64_t>()> mpmb;
  std::function<std::vector<uint64_t>(uint32_t, uint32_t, uint32_t)> vpmb;  // (part, rows, part tile rows)
  // The tower's qkv phase (A) over every row from block 1 on, or in tiles of vqt rows (N:
  // every row at once): the norm of the rows, then q, k and v in turn (q and k rotated), each
  // stored while the next computes (vqo = 2 output buffers; 1: each store waited for before
  // the next GEMM); buffers vqab(rows, outputs).
  bool vqa = false;
  uint32_t vqt = 0, vqo = 2;
  // With vqa over every row, k and v kept in OCM for the attention (blocks >= 1): q into k's
  // buffer and stored, then k and v into their own, which the attention reads in place (row
  // stride Dv); only q goes to DDR and back. Buffers vkvab() (the qkv phase) and vkvb(kv
  // heads, buffer sets) (the attention: k, v, then a set's q and output staging).
  bool vkv = false;
  std::function<std::vector<uint64_t>()> vkvab;
  std::function<std::vector<uint64_t>(uint32_t, uint32_t)> vkvb;
  std::function<std::vector<uint64_t>(uint32_t, uint32_t)> vqab;
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
  // load. Buffers pbq(kv heads, sets): the q|k|v rows, then per set the head-major staging
  // of q and the output, k, v; with no cached tokens before the prompt (pbq_own) k and v are
  // read in the q|k|v rows too, and a set is its staging only.
  bool pq = false, pbq_own = false;
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
  // plan, p.pf), offsets of q head-major [g G][r][hd], keys and values [off + S][g hd], at r
  // rows a tile and g kv heads a call; g: the most (<= 4) whose staging fits beside q|k|v in
  // the MLP's rows, else 1.
  auto stage = [&](uint32_t r, uint32_t g) -> std::array<uint64_t, 3> {
    const uint64_t q0 = detail::OcmAlloc::footprint(uint64_t(r) * d.qkv_n * 2),
                   k0 = q0 + detail::OcmAlloc::footprint(uint64_t(g) * G * r * hd2),
                   v0 = k0 + detail::OcmAlloc::footprint(uint64_t(off + S) * g * hd2);
    return {q0, k0, v0};
  };
  auto stage_end = [&](uint32_t r, uint32_t g) { return stage(r, g)[2] + uint64_t(off + S) * g * hd2; };
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
  auto msums = [&] {  // (the mergers': fc1 [c][Md], fc2 [H][c])
    return opt_.image_ocm_sums ? 0u : lrm_sums(gemm_cfg_, Nt, d.H, pm_chunk(d.Md, 1), pm_chunk(d.Md, 1), 0, d.Md);
  };
  auto psums = [&](uint32_t r) {
    return opt_.image_ocm_sums ? 0u
                               : lrm_sums(gemm_cfg_, r, d.H, pm_chunk(d.I, 2) * pm_down(), 2 * pm_chunk(d.I, 2),
                                          pm_split(), d.H, d.nq * d.hd);
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
    if (!sums || opt_.image_no_park || opt_.fp16_channels || top < sums || top < ImageKernels::kLrmShared)
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
  p.fixed = sum_fp({p.rVEC, norm_scratch_bytes(cfg_), embed_scratch_bytes(d.H), p.rGEMM}) +
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
    const uint64_t x = uint64_t(g) * G * S * hd2, y = uint64_t(g) * (off + S) * hd2;
    V64 v{uint64_t(S) * d.qkv_n * 2};
    for (uint32_t i = 0; i < sets; ++i) {
      if (p.pbq_own) v.push_back(x);
      else v.insert(v.end(), {x, y, y});
    }
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
  // tower qkv, q, k, v in turn (vqa): normed rows [r][Dv], cos, sin [r][hdv] fp32, `outs` outputs [r][Dv]
  p.vqab = [&](uint32_t r, uint32_t outs) -> V64 {
    const uint64_t rows = uint64_t(r) * d.Dv * 2, tab = uint64_t(r) * d.hdv * 4;
    return outs == 2 ? V64{rows, tab, tab, rows, rows} : V64{rows, tab, tab, rows};
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
  // group's q|k|v [N][3 g hdv], the attention's head-major staging [g][N][hdv]
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
  p.pmb = [&](uint32_t part, uint32_t r, uint32_t pt) -> V64 {
    const uint64_t rows = uint64_t(r) * d.H * 2, tile = uint64_t(pt) * d.H * 2;
    if (part == 1)  // (tiles: the residual over the attention rows)
      return pt < r ? V64{rows, std::max<uint64_t>(uint64_t(pt) * qd, tile)} : V64{rows, uint64_t(pt) * qd, tile};
    const uint64_t up = uint64_t(r) * up_row(true, pm_down(), pm_gate_up_fused()) * pm_chunk(d.I, 2);
    if (part == 2) return {rows, psums(r) ? 0 : 2 * rows, up};
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
  // One chunk of an MLP over every row (pm, vpm; ImageKernels::chunk_chain) on r rows: its up
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
      const uint32_t t = rows_per_tile(N, qknob, [&](uint32_t r) { return fits(p.vqab(r, outs)); });
      if (!t || (t < N && !vq_tiles && !qknob)) continue;
      const double tiles = std::ceil(double(N) / t);
      // (one buffer: q's and k's stores waited for, their DDR time beside the next GEMM's
      // weights, under its MACs where they are more: 1 MiB, 64 GB/s, 0.10% measured, not 0.8%)
      const double stores = outs == 1 ? t * 4.0 * d.Dv : 0.0;
      const double vqa_c = depth * (tiles * std::max(t * 3.0 * pe_macs(d.Dv, d.Dv) / peak + 3 * kCallCycles,
                                                     (wb(3 * d.Dv, d.Dv) + stores) / bw) +
                                    N * (4.0 * d.Dv + 8.0 * d.hdv) / bw);
      const double margin = t > (p.vqa ? p.vqt : p.rva) ? kFewerBytes : 1.0;  // (fewer weight passes)
      if (qknob || vqa_c < margin * (p.cost - before_va)) p.vqa = true, p.vqt = t, p.vqo = outs, p.cost = before_va + vqa_c;
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
  p.mpm = Nt && (p.rm < Nt || opt_.image_merger_chunks || !whole) && ddr_.has(mpm_name(-1, 0, "fc1")) && !cap &&
          msums() && fits(p.mpmb());
  // Attention phases: two buffer sets (the next group's q, k, v load while this group
  // computes, its output stores while the next computes) when they fit, else one.
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
        const double io = double(g) * hd * 2 * (2.0 * g_size * rows + 2.0 * kv_rows) / bw;
        const double c = attn_cycles(heads, g, g_size, rows, hd, kv_rows) + io;
        if (!best || c < best_c * 0.99) best = g, best_c = c;
      }
      if (best) return best;
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
      return fits(p.pmb(1, r, r)) && fits(p.pmb(2, r, r)) && fits(p.pmb(3, r, r));
    }) : 0;
    p.ppt = p.rpm;
    const uint32_t cp = pm_chunk(d.I, 2);
    sim::Config gc = gemm_cfg_;
    gc.dma_channels = int(channels);
    auto estimate = [&](uint32_t rows, uint32_t pt) {
      double c = 0;
      for (auto [r0, r] : tiles_of(S, std::max(rows, 1u))) {
        const GemmPlan dp = plan_gemm(gc, r, d.H, cp);
        const double port = (psums(r) ? 0.0 : double(r) * 8 * gc.npe() / cfg_.ocm_port_bytes) + dp.groups * 200.0;
        const double o_again = double((r + pt - 1) / pt - 1) * wb(d.H, d.nq * d.hd);
        c += layers * (std::max(r * slow * d.H * d.nq * d.hd / peak, wb(d.H, d.nq * d.hd) / bw) +
                       chunk_est(r, d.H, cp, 2 * cp, slow, pm_split(), pm_down()) * (d.I / cp) +
                       o_again / bw +
                       r * (double(qd) + (psums(r) ? 4.0 : 6.0) * d.H) / bw +
                       double(d.I / cp) * dp.tiles * port);
      }
      return c;
    };
    double pm_c = p.rpm ? estimate(p.rpm, p.rpm) : 0.0;  // (no rows fit: none)
    if (S && (p.rpm < S || knob) && psums(S) && fits(p.pmb(2, S, 1))) {
      const uint32_t pt =
          rows_per_tile(S, knob, [&](uint32_t t) { return fits(p.pmb(1, S, t)) && fits(p.pmb(3, S, t)); });
      if (pt && (!p.rpm || knob || estimate(S, pt) < kFewerBytes * pm_c)) p.rpm = S, p.ppt = pt, pm_c = estimate(S, pt);
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
  if (S && p.rpa == S && !gcap) {
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
                          : wb_a * passes(S, p.rpa) +
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
  auto score = [&](const Streamed& q) { return (q.pm ? q.cost / kFewerBytes : q.cost) / (q.two ? kTwoBuffers : 1.0); };
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
  const uint32_t ESCR = fa.take(embed_scratch_bytes(d.H), "embed scratch");
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

  std::vector<ImageKernels::Gemm> gemms;
  const bool gu_fused = gate_up_fused(), pm_fused = ddr_.has(pm_name(0, 0, "gu")) && pm_gate_up_fused();
  std::string tail_note;  // (the three phases' last layer, for the plan line)
  auto generate = [&](kernels::Builder& b, std::vector<KernelCall>& calls, bool record) {
    ImageKernels k(b, calls, cfg_, gemm_cfg_, ddr_);
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
      uint32_t a_stride = 0, res_ddr = 0;
      std::string out_w;
      uint32_t out_k = 0, out_bias = 0;
      NormKind norm = NormKind::rms;
      uint32_t norm_w = 0, norm_b = 0;
      float eps = 0;
      uint32_t chunk = 0, chunks = 0;
      bool gated = false;  // gate|up and SiLU (else fc1 and GELU)
      uint32_t pairs = 1;  // chunks a down call (ChunkChain::pairs)
      std::function<std::string(uint32_t, bool)> weight;  // chunk's up (false) or down (true) weight
      uint32_t up_bias = 0, down_bias = 0;  // kNone: none (up: chunk c at + 2 c chunk)
      // on rows [r0, r0 + n) at X3, with scratch for n rows (the tile's normed rows)
      std::function<void(uint32_t X3, uint32_t r0, uint32_t n, uint32_t scratch)> after;
      uint32_t sums_lrm = 0;  // the partial sums in LRM from this offset (lrm_sums; part 2 then has none)
      uint32_t part_rows = 0;  // the first and last parts in tiles of this many rows (0: all at once)
      // Seeded: the rows stay in the normed rows' buffer, not stored (the caller stores them).
      bool store_later = false;
      // The residual parked in LRM from this offset (the caller's lrm_run_slots park; 0: in DDR at
      // res_ddr): unparked into its buffer instead of loaded (one part tile only).
      uint32_t parked = 0;
      // After the last part tile's norm (the phase's last read of the layer's vectors).
      std::function<void()> after_norm;
      // Before the last down GEMM where there are two or more (the phase's last read of the
      // layer's vectors is the last up GEMM's bias).
      std::function<void()> before_last_down;
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
        k.gemm(m.mark + (m.gated ? ".o_proj" : ".proj"), {.w = m.out_w, .m = n, .n = m.width, .k = m.out_k, .x = A,
                                                          .xs = m.a_stride, .y = xn, .ys = w2, .bias = m.out_bias});
        if (tiled) em.copy(m.mark + ".load_residual", res, ocm(X1), n * w2);
        else em.wait(cs);
        k.ew(m.mark + ".attn_residual", {.op = EwOp::add, .rows = n, .cols = m.width, .a_ocm = X1, .b_ocm = xn,
                                         .out_ocm = X1});
        k.norm(m.mark + (m.gated ? ".post_norm" : ".norm2"), {.kind = m.norm, .rows = n, .dim = m.width, .x_ocm = X1,
                                                              .y_ocm = xn, .w_ocm = m.norm_w, .b_ocm = m.norm_b,
                                                              .eps = m.eps});
        if (m.after_norm && r0 + n == m.rows) m.after_norm();
        if (seed) k.lrm_seed(m.mark + ".residual_sums", {.m = m.rows, .n = m.width, .k = m.chunk, .row0 = r0,
                                                         .rows = n, .x_ocm = X1, .x_stride = w2,
                                                         .lrm_acc = m.sums_lrm});
        else copy_on(cs, m.mark + ".store_residual", ocm(X1), res, n * w2);
      }
      if (over_residual) em.wait(cs);
      k.chunk_chain({.mark = m.mark, .rows = m.rows, .chunk = m.chunk, .chunks = m.chunks, .in = m.width,
                     .out_n = m.width, .gated = m.gated, .pairs = m.pairs, .weight = m.weight, .x = XN,
                     .x_stride = w2, .up = U, .up_stride = us, .up_bias = m.up_bias, .down_bias = m.down_bias,
                     .out = XN, .out_stride = w2,
                     .acc = ACC, .acc_stride = 2 * w2, .lrm = m.sums_lrm, .seeded = seed,
                     .before = [&](uint32_t c, bool down) {
                       // the residual stored before the partial sums overwrite it
                       if (down && c == 0 && !seed) em.wait(cs);
                       if (down && c > 0 && c == (m.chunks - 1) / m.pairs && m.before_last_down) m.before_last_down();
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
                         phase(p.vqg ? p.vqgb() : p.vkv ? p.vkvab() : p.vqab(p.vqt, p.vqo))[0] ==
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
        if (at < ImageKernels::kLrmShared) return 0;
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
      VisionBlock vb{.k = k, .d = d, .vec = VEC, .eps = veps, .qkv_split = tower_qkv_split(), .v_off = tower_v_offset()};
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
          const uint32_t X = o[0], U = o[1], cm = pm_chunk(d.Md, 1), chunks = d.Md / cm, sums = msums();
          const Tile all{.mark = M, .r0 = 0, .rows = Nt};
          em.copy(M + ".load", vh, ocm(X), Nt * d.Md * 2);
          m.norm(all, X, X);
          k.lrm_end = sums;
          k.chunk_chain({.mark = M, .rows = Nt, .chunk = cm, .chunks = chunks, .in = d.Md, .out_n = d.H,
                         .act = EwOp::gelu_erf,
                         .weight = [&](uint32_t c, bool down) { return mpm_name(j, c, down ? "fc2" : "fc1"); },
                         .x = X, .x_stride = d.Md * 2, .up = U, .up_stride = cm * 2, .up_bias = m.fc1_bias(),
                         .down_bias = m.fc2_bias(), .out = X, .out_stride = d.H * 2, .lrm = sums});
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
          // its q and k, its attention into the group's columns of the attention rows (q and
          // the output staged head-major in the scratch). The MLP phase over every row finds
          // those rows in its own buffer; row tiles read them from DDR.
          const std::vector<uint32_t> o = phase(p.vqgb());
          const uint32_t X = o[0], ATT = o[1], RC = o[2], RS = o[3], QB = o[4], Y = o[5], SCR = o[6];
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
                                           .out_head_stride = hdv2, .scratch_ocm = SCR, .scratch_bytes = N * w2,
                                           .max_groups = gq});
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
          const std::vector<uint32_t> o = phase(p.vqab(p.vqt, p.vqo));
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
            for (uint32_t j = 0; j < 3; ++j) {
              const uint32_t u = (r0 / p.vqt * 3 + j) % p.vqo, Y = o[3 + u];
              em.wait(chan[u]);  // the last store from this buffer
              vb.qkv_apart(tt, j, X, Y);
              if (j < 2) vb.rope_apart(tt, j, Y, RC, RS);
              copy_shape_on(chan[u], fmt::format("{}.store_{}", T, "qkv"[j]),
                  {.src = ocm(Y), .dst = vqkv + r0 * 3 * d.Dv * 2 + j * d.Dv * 2, .row_bytes = d.Dv * 2, .rows = n,
                   .src_stride = d.Dv * 2, .dst_stride = 3 * d.Dv * 2});
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
                          .a_stride = d.Dv * 2, .res_ddr = vh + r0 * d.Dv * 2, .out_w = vname(blk, "proj"),
                          .out_k = d.Dv, .out_bias = vb.proj_bias(), .norm = NormKind::layer,
                          .norm_w = vb.n2w(), .norm_b = vb.n2w() + d.Dv * 2, .eps = veps, .chunk = pm_chunk(d.Iv, 1),
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
    // waited for before the q|k|v GEMM; the load is gone. (32x64, 2 MiB, 128 GB/s: a waited
    // store of 11.9 K cycles and a load of 7.1 K a layer.)
    const uint32_t kept_rows = [&]() -> uint32_t {
      if (p.fused || !p.pm || p.rpm != S || !S || !psums(S) || p.rpa != S) return kNone;
      const uint32_t XN = phase(p.pmb(1, p.rpm, p.ppt))[0];
      const std::vector<uint32_t> o = phase(p.pa(p.rpa, p.spa));
      for (size_t j = 1; j < o.size(); ++j)
        if (o[j] < XN + uint64_t(S) * d.H * 2) return kNone;
      return XN;
    }();
    // The kept rows parked in LRM until the MLP phase (park_at) where its parts take every row.
    const uint32_t ppark = kept_rows != kNone && p.ppt == S ? park_at(psums(S), S * d.H * 2, {{d.qkv_n, d.H}}) : 0;
    // Layer 0's rows (embeddings and image rows) parked there too, not stored, where the GEMM
    // before it left the first q|k|v tile below the park (after the tower: its last GEMM kept
    // below it; a prefill run alone: nothing handed).
    const bool park0 = ppark && (!s.vision || (tower_last_lrm_end && tower_last_lrm_end <= ppark));
    bool parked0 = false;  // (layer 0's rows went to the park)
    // The attention's output, written over q in the q|k|v rows (pq), parked in LRM [0, ...) for
    // the MLP phase over every row at once (its o_proj's input) where it fits the LRM the
    // kernels between two GEMMs may use: not stored and loaded back.
    const bool apark = S && p.pq && p.pm && p.rpm == S && p.ppt == S && !opt_.image_no_park &&
                       !opt_.fp16_channels && lrm_park_bytes(cfg_, S * qd) <= ImageKernels::kLrmShared;
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
    // again; else residual, MLP activation), the attention's q staging, k, v. The residual kept
    // from the layer before goes to DDR, not to the LRM park. Where the buffers do not fit, or
    // the last layer adds DeepStack rows or is the first, the attention and MLP phases run every
    // row (tg = 0).
    const bool tail_own = off == 0 && p.rpa == S;
    const uint32_t us = up_row(true, pm_down(), pm_fused) * pm_chunk(d.I, 2);  // (its up output row, pm)
    auto tail_bufs = [&](uint32_t g) -> V64 {
      const uint64_t kv = uint64_t(off + S) * g * hd2, w2 = d.H * 2;
      V64 v{tail_own ? p.pa(p.rpa, p.spa)[0] : qd, std::max<uint64_t>(qd, w2)};
      if (p.pm) v.insert(v.end(), {w2, w2, 2 * w2, us, w2});
      else v.insert(v.end(), {w2, uint64_t(d.I + cw) * 2});
      v.push_back(uint64_t(d.nq) * hd2);
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
        // Where cos and sin arrive after the GEMM (rope_ready waits for them), q's norm goes
        // before k's rotary too, while they come. The cache slot of row r0 is slot0 + r0.
        tl.k_norm(t, QKV);
        if (rope_ready) tl.q_norm(t, QKV), rope_ready();
        tl.rope(t, "k", QKV, RC, RS);
        tl.kv_write(t, QKV, false);
        if (!rope_ready) tl.q_norm(t, QKV);
        tl.rope(t, "q", QKV, RC, RS);
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
          tl.gate_up(t, c, c, 2 * cw, X, ACT + c * cw * 2, as, gu_fused);
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
        const auto [q0, k0, v0] = stage(p.rpf, gk);
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
                             .out_row_stride = qd, .out_head_stride = hd2, .scratch_ocm = uint32_t(BIG + q0),
                             .scratch_bytes = uint32_t(k0 - q0), .kv_offset = off + a0});
              }
              after_attention(T, a0, n, Hb + (a0 - r0) * d.H * 2, X, BIG, kick);
            },
            [&](uint32_t t, uint32_t r0, uint32_t rows, uint32_t u, uint32_t cst) {
              copy_on(cst, name(t) + ".store", ocm(buf(o, nd, u, 0)), ah + r0 * d.H * 2, rows * d.H * 2);
            });
      } else {
        {
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
            const uint32_t AO = o[1], QS = o[p.pm ? 7 : 4];
            // q, k, v: the q|k|v rows' (row stride qkvs) or q's row and the staged keys and values
            const uint32_t Q = tail_own ? o[0] + (S - 1) * qkvs : o[0], K = tail_own ? o[0] + qd : o[p.pm ? 8 : 5],
                           Vb = tail_own ? o[0] + qd + kd : o[p.pm ? 9 : 6], ks = tail_own ? qkvs : 0;
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
                           .out_row_stride = qd, .out_head_stride = hd2, .scratch_ocm = QS,
                           .scratch_bytes = ng * G * hd2, .kv_offset = off + S - 1});
            }
            const uint32_t res = ah + (S - 1) * d.H * 2;
            if (p.pm) {
              mlp_all_rows({.mark = T, .rows = 1, .width = d.H, .o1 = {o[2], AO, o[3]}, .o2 = {o[2], o[4], o[5]},
                            .o3 = {o[2], o[6]}, .load_attn = {}, .a_stride = qd, .res_ddr = res,
                            .out_w = layer_name(i, "o.gemm"), .out_k = d.nq * d.hd, .out_bias = kNone,
                            .norm = NormKind::rms, .norm_w = tl.vec + d.H * 2, .norm_b = 0, .eps = teps,
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
          // qkvs), each group's output stored from there; a set's first buffer is the call's
          // head-major staging.
          std::vector<uint32_t> sets = phase(p.pq ? p.pbq(p.gp, p.sp) : p.pb(p.gp, p.sp));
          const uint32_t Q0 = sets[0];
          const bool own = p.pq && p.pbq_own;  // k and v in the q|k|v rows (Q0 + qd, + kd)
          if (p.pq) {
            std::vector<uint32_t> four;
            for (size_t j = 1; j < sets.size(); j += own ? 1 : 3) {
              const uint32_t kb = own ? Q0 + qd : sets[j + 1], vb = own ? Q0 + qd + kd : sets[j + 2];
              four.insert(four.end(), {sets[j], kb, vb, sets[j]});
            }
            // (own: nothing loads and each call's output is stored from the q|k|v rows, so one
            // staging serves as two sets: the stores go behind the next call)
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
              at.scratch_ocm = u[0];
              at.scratch_bytes = ng * G * S * hd2;
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
            mlp_all_rows({.mark = T, .rows = rows, .width = d.H, .o1 = phase(p.pmb(1, p.rpm, p.ppt)),
                          .o2 = phase(p.pmb(2, p.rpm, p.ppt)), .o3 = phase(p.pmb(3, p.rpm, p.ppt)),
                          .load_attn = [&](uint32_t A, uint32_t a0, uint32_t n) {
                            if (!apark) return em.copy(T + ".load_attn", aq + (r0 + a0) * qd, ocm(A), n * qd);
                            if (r0 + a0 || n != S)
                              fail("compiler: internal: '{}' unparks its attention rows in part", T);
                            k.park(T + ".unpark_attn", {.ocm = A, .bytes = n * qd, .lrm = 0}, true);
                          },
                          .a_stride = qd, .res_ddr = ah + r0 * d.H * 2, .out_w = layer_name(i, "o.gemm"),
                          .out_k = d.nq * d.hd, .out_bias = kNone, .norm = NormKind::rms, .norm_w = tl.vec + d.H * 2,
                          .norm_b = 0, .eps = teps, .chunk = pm_chunk(d.I, 2), .chunks = d.I / pm_chunk(d.I, 2),
                          .gated = true, .pairs = pm_down(),
                          .weight = [&](uint32_t c, bool down) { return pm_name(i, c, down ? "down" : "gu"); },
                          .up_bias = kNone, .down_bias = kNone,
                          .after = [&](uint32_t X3, uint32_t a0, uint32_t n, uint32_t DS) {  // the DeepStack rows
                            tl.deepstack({.mark = T, .r0 = r0 + a0, .rows = n}, X3, DS);
                          },
                          .sums_lrm = psums(p.rpm) ? psums(rows) : 0, .part_rows = p.ppt,
                          .store_later = kept_rows != kNone && i + 1 < tc.num_hidden_layers,
                          .parked = (i ? kept_rows != kNone : parked0) ? ppark : 0,
                          .after_norm = [&] {
                            if (early_norms && i + 1 < tc.num_hidden_layers)
                              copy_on(cn, L + ".load_next_norms", ddr_.bus(layer_name(i + 1, "norms")), ocm(VEC),
                                      d.text_vec() * 2);
                          }});
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
  const std::string prows = p.fused ? fmt::format("{} (whole layers)", p.rpf)
                            : p.pm    ? fmt::format("{}|{} (qkv|MLP phases{}; the MLP in chunks of {} with fp32 "
                                                    "partial sums in {}{}{})", p.rpa, p.rpm, rope_note,
                                                    pm_chunk(d.I, 2), psums(p.rpm) ? "LRM" : "OCM",
                                                    part_tiles(p.ppt, p.rpm),
                                                    pm_down() > 1 ? ", the down over two chunks a call" : "")
                                      : fmt::format("{}|{} (qkv|MLP phases{})", p.rpa, p.rpc, rope_note);
  const std::string pcopies =
      p.fused ? std::string(mode_name(p.spf)) : fmt::format("{}|{}", mode_name(p.spa), mode_name(p.spc));
  const uint32_t pheads = p.fused ? p.gpf : p.gp;
  // The tower's row tiles (qkv|MLP phases), and the prefill's.
  const std::string va = p.vqa || p.vqg ? fmt::format("{} (block 0: {})", N, p.rva) : std::to_string(p.rva);
  const std::string qkv_note = p.vkv   ? std::string("; q, k, v in turn, k and v kept for the attention")
                               : p.vqa ? fmt::format("; q, k, v in turn{}{}", p.vqt < N ? fmt::format(" in tiles of {}", p.vqt) : "",
                                                     p.vqo == 1 ? " through one buffer" : "")
                               : p.vqg ? fmt::format("; q|k|v {} heads at a time beside the attention", vgq_heads(d.hv))
                                       : "";
  const std::string mrows = p.mpm ? fmt::format("{} (in chunks of {} with fp32 partial sums in LRM)", Nt,
                                                pm_chunk(d.Md, 1))
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
