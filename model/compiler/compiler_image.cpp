// The image program: vision tower, DeepStack and final mergers, embedding lookup
// and image splice, the prefill layers with DeepStack additions, and the LM head on
// the last row. Two plans, chosen from the config by the OCM rule in image_program():
// the resident plan below when its regions fit ocm_bytes (qc-u's 4 MiB and up), else
// the streamed plan (image_streamed.cpp: activations in DDR, row tiles), or the
// resident tower then the streamed prefill when the tower alone fits. Both plans emit the
// same blocks (blocks.h: VisionBlock, Merger, TextLayer, Head), each on its placement.
// This file also lays the image program's weights in DDR and settles its views of the PE
// array (settle_gemm_view and the steps after it).
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
// chunks of at most 3 Dv / Iv * N rows when its fc1 output must reuse the qkv space; with N,
// fc1's rows may run on from BIG into TMP, fc2's output then in XN: Resident::fc1_span), or
// over every row in chunks of fc1's columns with fp32 partial sums in LRM where that is
// estimated faster than the row chunks (rcv = 0: the chunks read the weights once);
// the prefill MLP runs in column chunks of the gate|up projection (gate_up_chunk columns of each, packed chunk by chunk in DDR),
// J chunks per GEMM call, each chunk followed by its SiLU gate.
#include <array>
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
#include "model/compiler/image_plan.h"
#include "model/reference/ops.h"

namespace gpnpu::model {

using namespace kernels;
using detail::layer_name;
using namespace blocks;


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
// The machine with the DMA channels the GEMM tiling rule counts (kernels::kGemmRuleChannels).
sim::Config rule_channels(sim::Config c) {
  c.dma_channels = int(kernels::kGemmRuleChannels);
  return c;
}
}  // namespace

uint32_t Compiler::pm_chunk(uint32_t inter, uint32_t up) const {
  return pm_chunk_width(up == 1 && pm_tower_npe_ ? pm_tower_npe_ : pm_npe_, inter, up);
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
  // The gate|up chunks as one (gu_cw_ = I) where the plan is resident and one chunk of I would
  // run at another split than the narrow chunks (the split of the call's columns, not of a
  // chunk's): the same bytes, whole tiles. Kept where the plan then stays resident with one
  // call, else laid again as they were. 64x64, 8 MiB, 128 GB/s: chunks of 1,024 at split 2 in a
  // call of six, 25.69 M cycles; one chunk at split 1, 24.53 M (split 1's loop scatters the next
  // tile's units inside it: kernels/gemm.cpp). Also where the narrow chunks' plan takes one a
  // call: at split 1 the SiLU goes into the GEMM's epilogue, which needs no temporaries for the
  // gate|up rows, so one call of every chunk may fit where calls of one did (64x64, 4 MiB,
  // 128 GB/s: six calls of 1,024 at split 2 and their SiLU calls, 23.80 M; one call, 23.01 M).
  const bool resident = fits && planned.plan.starts_with("resident"), whole = resident && planned.gate_up_whole;
  const uint32_t narrow = gate_up_chunk(cfg_, d.I);
  auto relay = [&](uint32_t cw) {
    ddr_.truncate(first);
    gu_cw_ = cw;
    plan_image_ddr();
  };
  // (On the GEMMs' view; on a machine of more DMA channels than the rule's also on the view the
  // rule's channels give, which settle_gemm_view may take: 64x64 at 4 MiB, 64 GB/s, 8 channels.)
  auto splits_differ = [&](const sim::Config& c) {
    return gemm_split(c, 2 * d.I, d.H) != gemm_split(c, 2 * narrow, d.H);
  };
  auto other_split = [&] {
    return splits_differ(gemm_cfg_) || (cfg_.dma_channels > int(kernels::kGemmRuleChannels) &&
                                        splits_differ(gemm_view(model_, rule_channels(cfg_), opt_)));
  };
  if (!gu_cw_ && resident && !opt_.image_narrow_gate_up && narrow < d.I && other_split()) return relay(d.I);
  if (gu_cw_ == d.I && narrow < d.I && !whole) return relay(narrow);
  if (!fits) return;
  // The resident prefill's down in chunks where its plan takes them (or the knob), where the
  // gate|up chunks pair up (down_chunk_k; an odd count of them has no such packing).
  pm_down_ = (opt_.image_down_chunks || (planned.plan.starts_with("resident") && planned.down_chunks)) &&
             down_chunk_k(gu_chunk(), d.I) != 0;
  if (planned.plan.starts_with("resident")) {
    // The resident tower's MLP over every row where its chunk packings would take it there: on
    // every PE row where settle_tower_view may move it (a view of fewer rows whose tower is
    // MAC-bound), as its plan there takes them, so that an auto KV cache leaves them room.
    uint32_t pes = planned.tower_chunk_pes;
    if (!opt_.image_gemm_rows && !opt_.image_tower_rows && gemm_cfg_.pe_rows < cfg_.pe_rows &&
        tower_mac_per_ddr() >= 1.0) {
      Compiler all = *this;
      all.tower_rows_ = uint32_t(cfg_.pe_rows);
      ImageShape vis = planning_shape(opt_);
      vis.plan_only = true;
      vis.prefill = vis.head = false;
      try {
        const CompiledProgram t = all.vision_part().image_program(vis, nullptr, nullptr);
        if (t.plan.starts_with("resident")) pes = t.tower_chunk_pes;
      } catch (const Error&) {
      }
    }
    if (!pes && !pm_down_) return;
    pm_first_ = ddr_.tensors().size();
    pm_tower_only_ = true;
    pm_npe_ = pes;
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
  // (In a program of two parts on one view also half the view's width, its chunk one narrow tile
  // run as two row sets: settle_parts; in the one program it cost 96 and 112 GB/s at 64x64, 2 MiB
  // 13% and 8%, their view settling then taking another plan.)
  auto tower_widths = [&](uint32_t npe) { return std::pair{widths(npe)[0], widths(npe)[1]}; };
  double best_c = chosen.est_cycles, best_wb = chosen.est_weight_bytes;
  uint32_t tower = 0;
  std::vector<uint32_t> tower_pes{gemm_cfg_.npe(), 2 * gemm_cfg_.npe(), 4 * gemm_cfg_.npe()};
  if (parts_) tower_pes.insert(tower_pes.begin(), gemm_cfg_.npe() / 2);
  for (uint32_t npe : tower_pes) {
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
    const auto rows4 = gemm_view(model_, rule_channels(cfg_), opt_).pe_rows;
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

void Compiler::settle_parts() {
  // A streamed program on one view in two parts (image_in_parts: the vision part's plan, then
  // the prefill's, each with the OCM the other's GEMM buffers and rows would take, and its own
  // MLP chunk widths, the tower's down to half the view's PEs: a chunk on half the array runs
  // as two row sets) where that reads fewer weight bytes within kFewerBytes of the one plan's
  // estimate. 64x64 at 2 MiB, 128 GB/s: the tower's MLP over every row in chunks of 1,024 and 8
  // kv heads an attention call, 10.18 -> 8.16 M cycles (the one plan's tower: 128-row tiles
  // reading its MLP twice, 4 heads a call on a quarter of the PEs), the program 30.69 -> 28.73 M.
  // (Also 2% below at no more bytes lost: 2 MiB, 24 GB/s +0.68%; at 32 GB/s +4.8%.)
  if (!opt_.image || opt_.fp16_channels || in_parts() || !pm_first_ || pm_tower_only_ || opt_.image_parts == 2)
    return;
  const CompiledProgram one = streamed_estimate();
  if (one.plan.empty()) return;
  Compiler alt = *this;
  alt.parts_ = true;
  alt.pm_npe_ = alt.pm_tower_npe_ = 0;
  alt.pm_pairs_ = 1;
  alt.relay_pm_packings();
  alt.settle_pm_chunks();
  alt.settle_pm_pairs();
  const CompiledProgram two = alt.streamed_estimate();
  if (two.plan.empty()) return;
  const bool fewer = two.est_weight_bytes < one.est_weight_bytes && two.est_cycles < kFewerBytes * one.est_cycles;
  if (fewer || opt_.image_parts == 1) *this = std::move(alt);
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
  // A resident program (no estimate): the tower on every row wherever its MACs on the view take
  // longer than its weights' DDR time and both parts stay resident. 2B, 1.11 x on the view (the
  // tower's GEMMs on half the PEs ran 1.38 x its DDR time): 64x64 at 8 MiB, 32 GB/s (32 rows)
  // 64.25 -> 62.09 M cycles, 16 GB/s (16 rows) 125.69 -> 122.34 M; 4 MiB 64.21 -> 62.34 M and
  // 126.11 -> 122.49 M; 32x64 (16 rows) at 16 GB/s, 4 and 8 MiB 2.8% and 2.4% faster.
  if (!opt_.image || opt_.image_gemm_rows || opt_.fp16_channels || gemm_cfg_.pe_rows >= cfg_.pe_rows) return;
  const double mac_per_ddr = tower_mac_per_ddr();
  if (mac_per_ddr < 1.0) return;
  ImageShape s = planning_shape(opt_);
  s.plan_only = true;
  try {
    const CompiledProgram one = image_program(s, nullptr, nullptr);
    if (one.plan.starts_with("resident")) {  // (plan_image_ddr laid its MLP chunks for this view)
      tower_rows_ = uint32_t(cfg_.pe_rows);
      ImageShape vis = s, rest = s;
      vis.prefill = vis.head = false;
      rest.vision = false;
      if (!vision_part().image_program(vis, nullptr, nullptr).plan.starts_with("resident") ||
          !image_program(rest, nullptr, nullptr).plan.starts_with("resident"))
        tower_rows_ = 0;
      return;
    }
    if (mac_per_ddr < 1.5 || !one.plan.starts_with("streamed") || !std::isfinite(one.est_cycles)) return;
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

double Compiler::tower_mac_per_ddr() const {
  const Dims d(model_);
  const ImageShape shape = planning_shape(opt_);
  double row = 0, bytes = 0;  // (a block's GEMMs: q|k|v, proj, fc1, fc2)
  for (auto [n, k] : {std::pair{3 * d.Dv, d.Dv}, {d.Dv, d.Dv}, {d.Iv, d.Dv}, {d.Dv, d.Iv}})
    row += row_macs(gemm_cfg_, n, k), bytes += double(gemm_weight_bytes(cfg_, n, k));
  return row * shape.grid_h * shape.grid_w / gemm_cfg_.mac_peak(true) / (bytes / cfg_.ddr_bytes_per_cycle());
}

Compiler Compiler::vision_part() const {
  Compiler c = *this;
  if (tower_rows_) c.gemm_cfg_.pe_rows = int(tower_rows_);
  c.tower_rows_ = 0;
  c.parts_ = false;
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
  if (s.vision && (views_differ() || parts_)) return image_in_parts(s, into, into_calls);
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
    bool fc1_span = false;  // the tower's MLP in one pass with fc1's rows on from BIG into TMP (below)
    uint64_t rH, rXN, rBIG, rTMP, rROPE, rVEC;
    uint64_t need() const {
      return footprint({rH, rXN, rBIG, rTMP, rROPE, rVEC});
    }
  };
  auto resident_plan = [&](uint32_t rcv, uint32_t pes, uint32_t J, bool rope_tmp, bool span) {
    Resident r;
    r.rcv = rcv;
    r.pes = pes;
    r.J = J;
    r.rope_tmp = rope_tmp;
    r.rH = mx({uint64_t(N) * d.Dv, uint64_t(S) * d.H}) * 2;
    r.rXN = mx({uint64_t(N) * d.Dv, uint64_t(S) * d.H, uint64_t(S) * d.nq * d.hd}) * 2;
    // (the tower MLP's up rows: a chunk's over every row, rcv rows of fc1's, or with span none here)
    const uint64_t up_rows = !rcv ? uint64_t(N) * width(pes) : span ? 0 : uint64_t(rcv) * d.Iv;
    r.rBIG = mx({uint64_t(N) * 3 * d.Dv, uint64_t(N) * d.pd, up_rows, uint64_t(S) * d.qkv_n, uint64_t(S) * d.I, d.V}) * 2;
    const uint64_t tables = mx({2ull * N * d.hdv, 2ull * S * d.hd}) * 4;
    // The gate|up rows [S][2 cw J] in TMP, but for one fused call of the whole gate|up (its SiLU
    // output goes straight into BIG). Fused narrow chunks keep the reservation: at 64x64, 4 MiB,
    // 32 GB/s dropping it let the prefill take six chunks a call (62.14 -> 61.91 M cycles), 5.7 K
    // under 8 MiB there, whose tower runs on 4 GEMM DMA channels where 4 MiB's runs on 2 (a
    // monotone violation of the design-space grid; the channel choice is not measured yet).
    const uint64_t gate_up_rows = gu_fused && cw == d.I ? 0 : uint64_t(S) * 2 * cw * J;
    r.rTMP = std::max({mx({uint64_t(N) * d.Dv, uint64_t(Nt) * d.H, uint64_t(S) * d.nq * d.hd, gate_up_rows,
                           uint64_t(S) * d.H}) * 2, gemv_min, rope_tmp ? tables : 0});
    r.rROPE = rope_tmp ? 0 : tables;
    r.rVEC = mx({d.vision_vec(), d.merger_vec(true), d.merger_vec(false), d.text_vec()}) * 2;
    // span: the tower's MLP in one pass (rcv = N) with fc1's rows [N][Iv] from BIG on into TMP
    // right after it (dead from the proj's residual to the block's end; fc2's output then goes
    // into XN, dead after fc1), where BIG is smaller (span_order below). 64x64 at 4 MiB, 128
    // GB/s: one pass where it took chunks over every row.
    const uint64_t fc1_rows = uint64_t(N) * d.Iv * 2;
    r.fc1_span = span && rcv == N && fc1_rows > r.rBIG;
    if (r.fc1_span) r.rBIG = std::max(r.rBIG, (fc1_rows - std::min(fc1_rows, r.rTMP + 64) + 63) / 64 * 64);
    return r;
  };
  auto fixed_with = [&](uint64_t gemm_bytes) {
    return footprint({norm_scratch_bytes(cfg_), embed_scratch_bytes(d.H, S), gemm_bytes}) +
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
  // Chunks go before the one pass where a finer estimate of the proj and the MLP is 3% or more
  // lower (kTowerChunksFirst), in the order above: a call's DDR is its tiles after the first and
  // the next call's first tile (handed off during its last tile), not the next call's whole
  // weight, and its fixed cycles (kCallCycles, a chunk's GELU call) add to its MACs only (the
  // DMA streams on across calls). A one-pass fc1 of two tiles streams its second and all of
  // fc2's tile beside its MACs, and the proj before it hands the first tile off: 32x64 (the
  // tower on every row), 8 MiB, 32 GB/s, a block 495 K cycles, in chunks of 2,048 474 K (the
  // whole 64.33 -> 64.06 M); 16 GB/s 122.93 -> 122.81 M; 64x64, 8 MiB, 64 GB/s 33.86 -> 33.71 M;
  // at 16 and 32 GB/s there 0.19% and 0.05% slower (the estimate's error). At 32x32 the chunks'
  // 3% is not reached (at 8 MiB, 16 GB/s, 1.3% below, they run 0.36% slower:
  // Image.TowerChunksBeforeOnePassWhereTheFinerEstimateIsLower).
  constexpr double kTowerChunksFirst = 0.97;
  auto tile0 = [&](uint32_t n, uint32_t kk) {
    return double(gemm_weight_bytes(cfg_, std::min(n, plan_gemm(gemm_cfg_, 1, n, kk).cols), kk));
  };
  // (extra: compute-side cycles beside the MACs, a chunk's GELU call)
  auto handed = [&](uint32_t r, uint32_t n, uint32_t kk, uint32_t next_n, uint32_t next_k, double extra = 0) {
    const GemmPlan g = plan_gemm(gemm_cfg_, 1, n, kk);
    const double ddr = double(gemm_weight_bytes(cfg_, n, kk)) - tile0(n, kk) + tile0(next_n, next_k);
    return std::max(double(r) * g.tiles * g.cols * kk / peak + kCallCycles + extra, ddr / bw);
  };
  // The proj (handing off the MLP's first call's tile) and the MLP, one pass or chunks of cv.
  const double one_pass = handed(N, d.Dv, d.Dv, d.Iv, d.Dv) + handed(N, d.Iv, d.Dv, d.Dv, d.Iv) +
                          handed(N, d.Dv, d.Iv, 3 * d.Dv, d.Dv);
  auto chunks_fine = [&](uint32_t cv) {
    const double gelu = 4.0 * N * cv / cfg_.ocm_port_bytes;
    return handed(N, d.Dv, d.Dv, cv, d.Dv) +
           d.Iv / cv * (handed(N, cv, d.Dv, d.Dv, cv, gelu) + handed(N, d.Dv, cv, cv, d.Dv));
  };
  // The choices (rcv, pes) in order of preference: the chunk widths before the one pass (by
  // estimate), one pass, the other chunk widths by estimate (the wider first at a tie), then the
  // row chunks.
  std::vector<std::pair<double, uint32_t>> chunked, before;
  if (vpm_laid || (s.plan_only && pm_allowed()))
    for (uint32_t pes : chunk_pes) {
      const uint32_t cv = width(pes);
      if (!vsums_of(cv)) continue;
      const double est = d.Iv / cv * (call(N, cv, d.Dv, d.Dv, cv) + call(N, d.Dv, cv, cv, d.Dv)),
                   fine = chunks_fine(cv);
      if (!opt_.image_tower_chunks && fine < kTowerChunksFirst * one_pass) before.push_back({est, pes});
      else if (opt_.image_tower_chunks || (rcv_fit < N && est < kTowerChunksMargin * rows_est()))
        chunked.push_back({est, pes});
    }
  std::stable_sort(chunked.begin(), chunked.end(), [](auto& a, auto& b) { return a.first < b.first; });
  std::stable_sort(before.begin(), before.end(), [](auto& a, auto& b) { return a.first < b.first; });
  std::vector<std::pair<uint32_t, uint32_t>> rcvs;
  for (auto [est, pes] : before) rcvs.push_back({0, pes});
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
  // chunks a call, 24.21 M cycles, where 4 channels take one, 22.82 M), and, where the MACs bound
  // the GEMMs, not for the same plan either: 4 channels' calls spread their units over every row
  // group (kernels/gemm.cpp) and the DMA keeps ahead of the MACs on them (8 channels, 128 GB/s:
  // 64x64 at 8 MiB 21.59 -> 21.56 M cycles, 32x64 37.60 -> 37.54 M; where the DDR bounds them,
  // 64x64 at 16 MiB, 64 GB/s, the 8 run 33.36 M, 4 would run 33.52 M).
  const GemmLoad load = gemm_load(model_, cfg_);
  const bool mac_bound = load.macs / gemm_cfg_.mac_peak(true) >= load.ddr_cycles;
  auto buffers = [&](uint32_t ch, bool two) {
    return gemm_buffer_bytes(gemm_cfg_, d, {.vision = s.vision || !in_parts(), .text = s.prefill || !in_parts(),
                                            .channels = ch, .two = two, .cw = cw});
  };
  // The span first (its OCM left to the LM head's park) but where the tower's q|k|v runs in two
  // calls, whose q|k rows go dense in a region of N x 4 Dv (VisionBlock::qk_dense; 64x64 at 8
  // MiB, 128 GB/s: span first +27 K cycles). Span first: 22 points 7-134 K cycles faster.
  const bool span_first = !tower_qkv_split();
  const std::array<bool, 2> span_order{span_first, !span_first};
  auto first_fit = [&](uint32_t ch, bool two, bool rope_tmp_too) -> std::optional<std::pair<size_t, Resident>> {
    const uint64_t fixed = fixed_with(buffers(ch, two));
    size_t rank = 0;
    for (auto [rcv, pes] : rcvs)
      for (uint32_t J : js)
        for (bool rope_tmp : {false, true})
          for (bool span : span_order) {
            if (rope_tmp && !rope_tmp_too) break;
            if (opt_.image_rope_per_block && !rope_tmp) continue;
            Resident r = resident_plan(rcv, pes, J, rope_tmp, span);
            if (span && !r.fc1_span) continue;  // (the same plan as without)
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
        if (auto fewer = first_fit(kernels::kGemmRuleChannels, false, rope_tmp_too);
            fewer && (fewer->first < fit->first || (fewer->first == fit->first && mac_bound)))
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
      rcv ? fmt::format("tower MLP rows per chunk {}{}", rcv, res->fc1_span ? " (its fc1 rows on into the temporaries)" : "")
          : fmt::format("tower MLP over every row in chunks of {} (fp32 partial sums in LRM)", cv);
  const uint64_t rH = res->rH, rXN = res->rXN, rBIG = res->rBIG, rTMP = res->rTMP, rROPE = res->rROPE,
                 rVEC = res->rVEC;

  // ---- OCM regions (bytes) ----
  detail::OcmAlloc a(cfg_.ocm_bytes);
  const uint32_t H = a.take(rH, "residual stream"), XN = a.take(rXN, "normed rows"), BIG = a.take(rBIG, "qkv / MLP");
  // The rotary tables: in their own region, loaded once a stage; or (rope_tmp) loaded a block
  // (layer) at a time into TMP, dead from the block's start to its attention, on a DMA channel
  // the GEMMs leave free where there is one, else (rope_shared) on their last one, behind the
  // units queued there; waited for before the rotary. A wait drains the channel's whole queue:
  // on a shared channel the prefill's waits go before its layer's first prefetch (after the q|k|v
  // they waited for o_proj's and gate|up's units too); the tower's stay after its q|k|v (before
  // it, +32 K). 64x64 at 4 MiB, 128 GB/s, 32-byte GEMM units: copied at the rotary (waiting on
  // the queue, 7.9 K cycles a layer) 22.03 M cycles, after the q|k|v 21.97 M, before 21.80 M.
  const uint32_t TMP = a.take(rTMP, "temporaries"), ROPE = res->rope_tmp ? TMP : a.take(rROPE, "rotary tables");
  // (rope_tmp: where the qkv / MLP region holds them past the q|k|v rows, the prefill's tables go
  // there instead, loaded right after the layer before's down, which read those rows last: the
  // DDR idles through its residual, where the load into TMP was waited for at the layer's start.
  // 64x64 at 4 MiB, 128 GB/s: 21.25 -> 21.21 M cycles)
  const uint32_t qkv_rows = (S * d.qkv_n * 2 + 63) / 64 * 64;
  const bool rope_big = res->rope_tmp && S && uint64_t(qkv_rows) + 2ull * S * d.hd * 4 <= rBIG;
  const uint32_t PROPE = rope_big ? BIG + qkv_rows : ROPE;
  // (fc1_span: the tower's fc2 output, fc1's rows [N][Iv] from BIG on into TMP)
  const uint32_t mlp_out = res->fc1_span ? XN : TMP;
  if (res->fc1_span && uint64_t(TMP) + rTMP < uint64_t(BIG) + uint64_t(N) * d.Iv * 2)
    fail("compiler: internal: the tower's fc1 rows ({} bytes from {}) pass the temporaries' end ({})",
         uint64_t(N) * d.Iv * 2, BIG, uint64_t(TMP) + rTMP);
  const uint32_t VEC = a.take(rVEC, "vectors");
  const uint32_t rope_ch = uint32_t(cfg_.dma_channels) - 1;
  const bool rope_shared = gemm_channels == uint32_t(cfg_.dma_channels);
  const uint32_t NSCR = a.take(norm_scratch_bytes(cfg_), "norm scratch");
  const uint32_t ESCR = a.take(embed_scratch_bytes(d.H, S), "embed scratch");
  const uint32_t GEMM = a.take(rGEMM, "GEMM DMA buffers");
  const uint32_t gk = off ? groups_per_call(d.nkv, 0, [&](uint32_t g) { return kv_stage(g) <= a.left(); }) : 0;
  const uint32_t KC = off ? a.take(uint64_t(off + S) * gk * d.hd * 2, "cached keys") : 0;
  const uint32_t VC = off ? a.take(uint64_t(off + S) * gk * d.hd * 2, "cached values") : 0;

  kernels::Builder own;
  kernels::Builder& b = into ? *into : own;
  CompiledProgram out;
  KernelCalls k(b, into ? *into_calls : out.calls, cfg_, gemm_cfg_, ddr_);
  k.GEMM = GEMM;
  k.rGEMM = uint32_t(rGEMM);
  k.gcfg.dma_channels = int(gemm_channels);
  const std::string channels_note =
      (gemm_channels < uint32_t(cfg_.dma_channels)
           ? fmt::format("; GEMM DMA channels {} (of {}: so that their buffers fit this plan)", gemm_channels,
                         cfg_.dma_channels)
           : "") +
      (res->rope_tmp ? rope_big ? "; rotary tables a block at a time in the temporaries (the prefill's past its q|k|v rows)"
                                : "; rotary tables a block at a time in the temporaries"
                     : "");
  k.NSCR = NSCR;
  k.f16 = take_f16(a, cfg_, opt_.fp16_channels, std::max(N, S));
  // The regions below only where the plan's leave room (none changes the plan): UINT32_MAX where not.
  auto take_if_room = [&](bool want, uint64_t bytes, const char* what) {
    return want && a.left() >= detail::OcmAlloc::footprint(bytes) ? a.take(bytes, what) : UINT32_MAX;
  };
  // The next vision block's norm1 weights (w, b), loaded with each block's vectors: that norm then
  // runs in the block's MLP residual call (below).
  const uint64_t n1_bytes = uint64_t(d.Dv) * 2 * 2;
  const uint32_t NEXT_N1 = take_if_room(s.vision, n1_bytes, "next block's norm1 weights");
  // The vectors of the merger after a block, loaded with the block's own: at the merger's start
  // its fc1 units fill the DMA queues, and a load behind them waited 5.3 K cycles (64x64, 8 MiB,
  // 128 GB/s).
  const uint64_t mvec_bytes = uint64_t(std::max(d.merger_vec(true), d.merger_vec(false))) * 2;
  const uint32_t MVEC = take_if_room(s.vision, mvec_bytes, "the next merger's vectors");
  // A tower block's weight bytes over the DDR's bandwidth, over its MACs at the array's peak.
  auto block_ddr_over_macs = [&] {
    double bytes = 0, macs = 0;
    for (auto [n, kk] : {std::pair{3 * d.Dv, d.Dv}, {d.Dv, d.Dv}, {d.Iv, d.Dv}, {d.Dv, d.Iv}}) {
      bytes += double(gemm_weight_bytes(gemm_cfg_, n, kk));
      macs += double(N) * n * kk;
    }
    return bytes / cfg_.ddr_bytes_per_cycle() / (macs / gemm_cfg_.mac_peak(true));
  };
  // The next vision block's vectors, loaded during the block before (beside its norm1's) into the
  // other of two buffers, where the mergers have theirs (MVEC) and a block's weights take the DDR
  // half its MACs' time or less: a block's own load waited 0.7-1 K cycles (64x64, 8 MiB, 128 GB/s);
  // closer to its MACs' pace the start waited for channel 0's queue (64x64, 8 MiB, 16 GB/s +0.5%).
  const bool next_vectors = s.vision && vc.depth > 1 && MVEC != UINT32_MAX && block_ddr_over_macs() <= 0.5;
  const uint32_t VEC2 = take_if_room(next_vectors, uint64_t(d.vision_vec()) * 2, "the next block's vectors");
  auto vec_of = [&](int blk) { return VEC2 != UINT32_MAX && blk % 2 ? VEC2 : VEC; };
  // The DeepStack mergers' rows kept in OCM from the tower to the prefill (TextLayer::kept), and
  // the final merger's written straight into the residual rows of the image (TextLayer::
  // image_in_place): the prefill adds them from there and splices nothing, and nothing goes
  // through DDR (act.ds*, act.img are for a conversation's vision run, whose prefill runs apart).
  // 64x64, 8 MiB, 128 GB/s: 3.6 K cycles a store and a load each.
  const uint32_t ntaps = uint32_t(vc.deepstack_visual_indexes.size());
  const uint64_t kept_bytes = uint64_t(ntaps) * Nt * d.H * 2;
  const bool in_place = s.vision && s.prefill && !knobs && ni == Nt && i0 == 0;
  const uint32_t KEPT = take_if_room(in_place && ntaps, kept_bytes, "the DeepStack rows");  // (or kKeptNone)
  // The LM head's chunks (every third) parked in the OCM the plan leaves free (kernels::GemvArgs::
  // park_chunks): the head reads its weight (163 MB for the 2B) with nothing beside it, DDR-bound,
  // while the tower's blocks leave the DDR idle most of their time (64x64, 8 MiB, 128 GB/s: 6.7
  // MB in 248 K cycles a block). Each block from the second copies an even share before its
  // rotary (no GEMM unit is queued then), a descriptor on each GEMM channel; the head takes a
  // parked chunk after every two streamed ones, while it waits on the DDR: each saves its DDR time.
  const kernels::GemvArgs head_g{.n = d.V, .k = d.H, .scratch_ocm = TMP, .scratch_bytes = uint32_t(rTMP)};
  uint32_t park_chunks = 0, PARK = 0, park_cb = 0;
  // Only where a block's weights take the DDR half its MACs' time or less (block_ddr_over_macs):
  // where it streams them closer to its MACs' pace the copies delay its own units (64x64, 8 MiB,
  // 64 GB/s, 0.82 x: the tower 180 K cycles slower for a head 50 K faster).
  if (s.vision && vc.depth > 1 && s.prefill && S && s.head && !k.f16.on && !knobs && !opt_.image_no_park &&
      block_ddr_over_macs() <= 0.5) {
    park_cb = kernels::gemv_chunk_bytes(cfg_, head_g);
    const uint64_t room = a.left() > 128 ? a.left() - 128 : 0;
    const uint32_t unit = std::max(1u, kernels::gemv_park_unit(cfg_, head_g));
    park_chunks = uint32_t(std::min<uint64_t>(kernels::gemv_parkable_chunks(cfg_, head_g), room / park_cb)) / unit * unit;
    if (park_chunks) PARK = a.take(uint64_t(park_chunks) * park_cb, "the LM head's parked chunks");
  }
  // The DeepStack rows' region (just below the park) holds kept_park chunks more once the last
  // DeepStack layer has added its rows: copied in the layers after it, a chunk each (below).
  uint32_t kept_park = 0;
  if (park_chunks && KEPT != TextLayer::kKeptNone && PARK == KEPT + detail::OcmAlloc::footprint(kept_bytes) &&
      int(ntaps) < tc.num_hidden_layers) {
    const uint32_t unit = std::max(1u, kernels::gemv_park_unit(cfg_, head_g));
    const uint32_t most = uint32_t(std::min<uint64_t>({detail::OcmAlloc::footprint(kept_bytes) / park_cb,
                                                       kernels::gemv_parkable_chunks(cfg_, head_g) - park_chunks,
                                                       tc.num_hidden_layers - ntaps}));
    kept_park = (park_chunks + most) / unit * unit - park_chunks;
    PARK -= kept_park * park_cb;
  }
  const uint32_t park_share = (park_chunks + vc.depth - 2) / (vc.depth - 1 ? vc.depth - 1 : 1);
  // Parked chunks [c0, c1), split over the GEMM channels (parked chunk u is the weight's 3u + 2).
  auto park_copy = [&](const std::string& M, uint32_t c0, uint32_t c1) {
    if (c0 >= c1) return;
    const uint32_t ch = uint32_t(k.gcfg.dma_channels), per = (c1 - c0 + ch - 1) / ch;
    for (uint32_t c = 0, u = c0; u < c1; ++c, u += per)
      k.em.copy_async(M + ".park_head", c,
                      {.src = ddr_.bus("embed") + (3 * u + 2) * park_cb, .dst = ocm(PARK + u * park_cb),
                       .row_bytes = park_cb, .rows = std::min(per, c1 - u), .src_stride = 3 * park_cb,
                       .dst_stride = park_cb});
  };
  // Block i's share: the park's chunks from kept_park on.
  auto park_piece = [&](const std::string& M, int i) {
    if (i < 1) return;
    const uint32_t c0 = kept_park + uint32_t(i - 1) * park_share;
    park_copy(M, c0, std::min(kept_park + park_chunks, c0 + park_share));
  };
  k.fuse_gelu = opt_.image_gelu_fused;
  detail::Emitter& em = k.em;
  // Rotary tables cos [rows][hd] then sin into ROPE from src and src + sin_off: waited for
  // (chan UINT32_MAX) or started on chan. rope_tmp: a block's (layer's) tables start before its
  // norm on rope_ch (tables_early) and are waited for before its rotary (tables_ready). one: both
  // in one descriptor, a slot of the channel's queue fewer (the prefill's next layer's tables
  // behind its down, where the sin's start waited for a slot: -21 cycles a layer, 64x64, 4 MiB,
  // 128 GB/s; not the tower's, whose q|k then started its units earlier into a busier DDR: +13 K).
  auto load_tables = [&](const std::string& M, uint32_t src, uint32_t sin_off, uint32_t bytes, uint32_t chan,
                         uint32_t at, bool one = false) {
    if (chan != UINT32_MAX && one) {
      em.copy_async(M + "load_rope", chan,
                    {.src = src, .dst = ocm(at), .row_bytes = bytes, .rows = 2, .src_stride = sin_off, .dst_stride = bytes});
      return;
    }
    for (uint32_t h : {0u, 1u}) {
      const std::string m = M + (h ? "load_rope_sin" : "load_rope");
      if (chan == UINT32_MAX) em.copy(m, src + h * sin_off, ocm(at + h * bytes), bytes);
      else em.copy_async(m, chan, src + h * sin_off, ocm(at + h * bytes), bytes);
    }
  };
  auto tables_early = [&](const std::function<void(uint32_t)>& load) {
    if (res->rope_tmp) load(rope_ch);
  };
  auto tables_ready = [&] {
    if (res->rope_tmp) em.wait(rope_ch);
  };
  auto prefetch = [&](const std::string& w, uint32_t n, uint32_t kk, uint32_t between = KernelCalls::kLrmShared,
                      uint64_t w_off = 0, uint32_t at = kernels::kLrmAnywhere, bool whole = false) {
    k.prefetch(w, n, kk, between, w_off, at, whole);
  };
  // The tower's q|k|v: one call, or q|k then v (tower_qkv_split): its first call's columns.
  const bool qkv_split = tower_qkv_split();
  const uint32_t qkv_n = (qkv_split ? 2 : 3) * d.Dv;
  const float veps = float(vc.layer_norm_eps), teps = float(tc.rms_norm_eps);

  // The prefill's layout, settled before the tower (whose final merger hands layer 0's q|k|v off
  // where the layers' two-ahead layout puts it); none without a prefill (its shapes are empty).
  // Gate|up calls of J packed chunks: [S][2 cw J] in TMP, chunk c' at column 2 cw c'.
  const bool pre = s.prefill && S;
  const uint32_t ncalls = pre ? nchunks / J : 0, gu_n = 2 * cw * J;
  const double p_attn =
      pre ? attention_estimate(cfg_, {.q_heads = d.nq, .kv_heads = d.nkv, .head_dim = d.hd, .seq = S, .causal = true})
          : 0;
  // The down in chunks beside the gate|up calls (down_chunk_k, their packings laid: plan_image_ddr),
  // its fp32 partial sums in LRM seeded with the residual, the last rounding residual + MLP into H.
  const uint32_t dk = pre ? down_chunk_k(cw, d.I) : 0, dsums = dk ? lrm_sums(gemm_cfg_, S, d.H, dk, gu_n, 0) : 0;
  const bool dchain = pre && down_chunked(J, dsums) && ddr_.has(layer_name(0, "dn0.gemm"));
  // Two calls ahead (kernels::gemm_two_ahead): where q|k|v's MACs leave the DDR time for
  // o_proj's weight and more, q|k|v also takes the first units of the gate|up call's first
  // tile (the DDR idled through its last units before). That needs the four GEMMs of a layer
  // (one gate|up call, one down call) at fixed LRM places: down at 0 (or just above gate|up's
  // second buffer, at 0, where its last tile is there), q|k|v after it, o_proj at kLrmShared
  // (below q|k|v), gate|up's first tile at the top;
  // taken where every hand-off of that layout fits (the same kernels::gemm_handoff the calls
  // run) and q|k|v takes some units.
  struct LayerLrm {
    uint32_t down = 0, qkv = 0, o = 0, gu = 0;
  };
  const std::optional<LayerLrm> two_ahead = [&]() -> std::optional<LayerLrm> {
    if (!pre || dchain || ncalls != 1 || opt_.image_no_two_ahead) return std::nullopt;
    const std::string wq = layer_name(0, "qkv.gemm"), wo = layer_name(0, "o.gemm"), wg = layer_name(0, "gu0.gemm"),
                      wd = layer_name(0, "down.gemm");
    if (!ddr_.has(wd)) return std::nullopt;
    auto lrm = [&](const std::string& w, uint32_t n, uint32_t kk) {
      return (kernels::gemm_lrm_buffer(gemm_cfg_, n, kk, ddr_.at(w).split) + 64 + 63) / 64 * 64;
    };
    const uint32_t R = KernelCalls::kLrmShared, L = gemm_cfg_.lrm_bytes;
    LayerLrm at;
    // (gate|up's second buffer goes to 0: where its last tile is there, the down right above it)
    const bool gu_last_in_q = kernels::plan_gemm(gemm_cfg_, 0, gu_n, d.H, ddr_.at(wg).split).tiles % 2 == 0;
    at.down = gu_last_in_q ? lrm(wg, gu_n, d.H) : 0;
    at.qkv = at.down + lrm(wd, d.H, d.I);
    at.o = R;
    at.gu = (L - lrm(wg, gu_n, d.H)) / 64 * 64;
    if (at.qkv < R || at.o + lrm(wo, d.H, d.nq * d.hd) > at.qkv) return std::nullopt;
    auto args = [&](const std::string& w, uint32_t n, uint32_t kk, uint32_t m) {
      GemmArgs g = k.base_args(w, k.first_call_n(w, n, kk), kk);
      g.m = m;
      return g;
    };
    GemmArgs dn = args(wd, d.H, d.I, S), qkv = args(wq, d.qkv_n, d.H, S), o = args(wo, d.H, d.nq * d.hd, S),
             gu = args(wg, gu_n, d.H, S), dn2 = dn;
    if (!kernels::gemm_handoff(gemm_cfg_, dn, qkv, R, at.qkv) || !kernels::gemm_handoff(gemm_cfg_, qkv, o, R, at.o, true) ||
        !kernels::gemm_two_ahead(gemm_cfg_, qkv, o, gu, R, at.gu) || (gu_last_in_q && gu.lrm_q != 0) ||
        !kernels::gemm_handoff(gemm_cfg_, gu, dn2, 0, at.down))
      return std::nullopt;
    return at;
  }();
  const uint32_t anywhere = kernels::kLrmAnywhere;

  // ================= vision tower =================
  if (s.vision) {
    b.op("mark.begin", {Name{"vision_tower"}});
    VisionBlock vb{.k = k, .d = d, .vec = VEC, .eps = veps, .qkv_split = qkv_split, .v_off = tower_v_offset(),
                   .qk_dense = qkv_split && rBIG >= uint64_t(N) * 4 * d.Dv * 2};
    const Tile all{.mark = "V", .r0 = 0, .rows = N};
    vb.load_patches(all, BIG, iio_.patches_ddr);
    em.copy("V.load_vectors", ddr_.bus("V.patch_bias"), ocm(VEC), d.Dv * 2);
    prefetch(vname(0, "qkv"), qkv_n, d.Dv);
    vb.patch_embed(all, BIG, H, VEC);
    vb.pos_add(all, H, XN);
    // Rotary tables: cos [N][hdv] then sin [N][hdv], as the rope calls expect.
    auto vtables = [&](const std::string& M) {
      return [&, M](uint32_t chan) {
        load_tables(M, ddr_.bus("const.vrope"), opt_.max_patches * d.hdv * 4, N * d.hdv * 4, chan, ROPE);
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
    bool vnormed = false;  // the block's norm1 ran in the block before's residual call
    // A DeepStack merger's rows to store (act.ds<j>) from OCM at `at`, and whether that store is
    // in flight (on channel 0, waited for before the temporaries are written again). Stored
    // after the next block's q|k|v, where the DDR brings fc1's first units, not after the merger,
    // where it took the DDR from the q|k's hand-off of v (64x64, 4 MiB, 128 GB/s: each store
    // 3.6 K cycles, the proj's hand-off 2.6 K longer for it; qc-u 79.165 -> 79.103 M), where a
    // block's weights take the DDR half its MACs' time or less (block_ddr_over_macs: closer to
    // their pace the store delayed them more, 32x64 at 4 MiB, 32 GB/s +0.03%).
    const bool ds_late = block_ddr_over_macs() <= 0.5;
    struct DsStore {
      Merger m;
      Tile t;
      uint32_t at = 0;
      bool started = false;
    };
    std::optional<DsStore> ds_store;
    // (waits for the store where started, else stores the rows here, waited for)
    auto ds_store_done = [&](const std::string& M) {
      if (ds_store && ds_store->started) em.wait(0);
      else if (ds_store) ds_store->m.store(ds_store->t, ds_store->at, UINT32_MAX, fmt::format("{}.store_ds{}", M, ds_store->m.j));
      ds_store.reset();
    };
    for (int blk = 0; blk < vc.depth; ++blk) {
      const std::string B = fmt::format("V{}", blk);
      const Tile t{.mark = B, .r0 = 0, .rows = N};
      vb.block = blk;
      b.op("mark.begin", {Name{B}});
      // The next block's norm1 in this block's MLP residual call (its weights in NEXT_N1, loaded
      // beside this block's vectors): one pass over h through the OCM port fewer (64x64, 8 MiB,
      // 128 GB/s: 1.1 K cycles a block). A DeepStack merger between them reads the same h and
      // norms it into TMP instead of the normed rows (where TMP holds its rows).
      const auto& taps = vc.deepstack_visual_indexes;
      const bool is_tap = std::find(taps.begin(), taps.end(), blk) != taps.end();
      const bool fuse_n1 = NEXT_N1 != UINT32_MAX && blk + 1 < vc.depth && (!is_tap || rTMP >= uint64_t(Nt) * d.Md * 2);
      if (fuse_n1)
        em.copy_async(B + ".load_next_norm1", 0, ddr_.bus(vname(blk + 1, "vec")), ocm(NEXT_N1), uint32_t(n1_bytes));
      // The first merger after this block (DeepStack tap j, or -1: the final merger), if any.
      const auto tap = std::find(taps.begin(), taps.end(), blk);
      const std::optional<int> merger_next = tap != taps.end() ? std::optional<int>(int(tap - taps.begin()))
                                             : blk + 1 == vc.depth ? std::optional<int>(-1)
                                                                   : std::nullopt;
      if (MVEC != UINT32_MAX && merger_next)
        em.copy_async(B + ".load_merger_vectors", 0, ddr_.bus(mname(*merger_next, "vec")), ocm(MVEC),
                      d.merger_vec(*merger_next >= 0) * 2);
      vb.vec = vec_of(blk);
      if (VEC2 == UINT32_MAX || blk == 0)
        em.copy(B + ".load_vectors", ddr_.bus(vname(blk, "vec")), ocm(vb.vec), d.vision_vec() * 2);
      if (VEC2 != UINT32_MAX && blk + 1 < vc.depth)
        em.copy_async(B + ".load_next_vectors", 0, ddr_.bus(vname(blk + 1, "vec")), ocm(vec_of(blk + 1)),
                      d.vision_vec() * 2);
      tables_early(vtables(B + "."));
      if (!vnormed) vb.norm1(t, H, XN);
      vnormed = false;
      vb.qkv(t, XN, BIG, [&](int j) {
        if (j == 0 && qkv_split) prefetch(vname(blk, "qkv"), d.Dv, d.Dv, 0, vb.v_off);
        else prefetch(vname(blk, "proj"), d.Dv, d.Dv, KernelCalls::kLrmShared, 0, kernels::kLrmAnywhere, true);
      });
      double ds_bytes = 0;
      if (ds_store) {
        ds_store->m.store(ds_store->t, ds_store->at, 0, fmt::format("{}.store_ds{}", B, ds_store->m.j));
        ds_bytes = double(Nt) * d.H * 2;
        ds_store->started = true;
      }
      // (before the MLP's first units start: behind them on a shared channel it waited 8.8 K
      // cycles a block, 64x64 at 4 MiB, 128 GB/s; before the q|k|v +32 K)
      tables_ready();
      // (the window: the rotary, its q and k rows in and out through the OCM port, and the attention)
      const double v_window = v_attn + 4.0 * N * d.Dv * 2 / cfg_.ocm_port_bytes;
      if (rcv == 0) k.start_after_next(vpm_name(blk, 0, "fc1"), cv, d.Dv, N, v_window, ds_bytes);
      else k.start_after_next(vname(blk, "fc1"), d.Iv, d.Dv, N, v_window, ds_bytes);
      park_piece(B, blk);
      vb.qk_rope(t, BIG, ROPE, ROPE + N * d.hdv * 4);
      k.attention(B + ".attention", {.q_heads = d.hv, .kv_heads = d.hv, .head_dim = d.hdv, .seq = N, .causal = false,
                                     .q_ocm = BIG, .q_row_stride = vb.qkv_stride(), .q_head_stride = d.hdv * 2,
                                     .k_ocm = BIG + d.Dv * 2, .v_ocm = vb.v_at(t, BIG), .kv_row_stride = vb.qkv_stride(),
                                     .out_ocm = XN, .out_row_stride = d.Dv * 2, .out_head_stride = d.hdv * 2});
      if (rcv == 0) {
        // Over every row: per chunk c of cv fc1 columns, fc1 (its bias slice) and GELU into
        // BIG, fc2's chunk into fp32 partial sums in LRM (the first with fc2's bias), the last
        // rounded into TMP. The GEMMs from the proj's hand-off on keep below the sums.
        k.lrm_end = vsums;
        prefetch(vpm_name(blk, 0, "fc1"), cv, d.Dv);
      } else {
        prefetch(vname(blk, "fc1"), d.Iv, d.Dv);
      }
      ds_store_done(B);
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
        vb.fc2(c, BIG, mlp_out + r0 * d.Dv * 2);
      }
      if (fuse_n1) vb.residual_norm1(t, H, mlp_out, XN, NEXT_N1);
      else vb.residual(t, "mlp_residual", H, mlp_out);
      vnormed = fuse_n1;
      b.op("mark.end", {Name{B}});
      // DeepStack tap: the block output through merger j, kept in DDR for the prefill.
      for (int j = 0; j < int(taps.size()); ++j) {
        if (taps[j] != blk) continue;
        const bool loaded = MVEC != UINT32_MAX;  // (this block's first merger)
        const Merger m{.k = k, .d = d, .j = j, .vec = loaded ? MVEC : VEC, .eps = veps};
        const Tile mt{.mark = fmt::format("M{}", j), .r0 = 0, .rows = Nt};
        b.op("mark.begin", {Name{mt.mark}});
        if (!loaded) em.copy(mt.at("load_vectors"), ddr_.bus(mname(j, "vec")), ocm(VEC), d.merger_vec(true) * 2);
        const uint32_t MX = fuse_n1 ? TMP : XN;  // (the normed rows hold the next block's norm1)
        m.norm(mt, H, MX);
        prefetch(mname(j, "fc2"), d.H, d.Md, 0);
        m.fc1(mt, MX, BIG);
        prefetch_after_block(blk, j + 1);
        if (KEPT != TextLayer::kKeptNone) {
          m.fc2(mt, BIG, KEPT + uint32_t(j) * Nt * d.H * 2);
        } else if (ds_late && rTMP >= uint64_t(Nt) * d.H * 2 + (res->rope_tmp ? 2ull * N * d.hdv * 4 : 0)) {
          // The merged rows at the temporaries' end, past the next block's rotary tables: stored
          // during its q|k rotary and attention (below), waited for before its proj writes there.
          const uint32_t at = TMP + uint32_t(rTMP - uint64_t(Nt) * d.H * 2) / 64 * 64;
          m.fc2(mt, BIG, at);
          ds_store.emplace(DsStore{m, mt, at});
        } else {
          m.fc2(mt, BIG, TMP);
          m.store(mt, TMP);
        }
        b.op("mark.end", {Name{mt.mark}});
      }
    }
    {
      // (loaded with the last block's vectors where that block is no DeepStack tap)
      const auto& taps = vc.deepstack_visual_indexes;
      const bool loaded = MVEC != UINT32_MAX && std::find(taps.begin(), taps.end(), vc.depth - 1) == taps.end();
      const Merger m{.k = k, .d = d, .j = -1, .vec = loaded ? MVEC : VEC, .eps = veps};
      const Tile mt{.mark = "Mf", .r0 = 0, .rows = Nt};
      b.op("mark.begin", {Name{"Mf"}});
      ds_store_done("Mf");  // (the last block's merger's, if any)
      if (!loaded) em.copy("Mf.load_vectors", ddr_.bus(mname(-1, "vec")), ocm(VEC), d.merger_vec(false) * 2);
      m.norm(mt, H, XN);
      prefetch(mname(-1, "fc2"), d.H, d.Md, 0);
      m.fc1(mt, XN, BIG);
      // (layer 0's q|k|v where the layers' two-ahead layout puts it, as every layer's after it)
      if (s.prefill)
        prefetch(layer_name(0, "qkv.gemm"), d.qkv_n, d.H, KernelCalls::kLrmShared, 0, two_ahead ? two_ahead->qkv : anywhere);
      if (in_place) {  // (the tower's rows in H are dead after the merger's norm)
        m.fc2(mt, BIG, H + uint32_t(s.image_start) * d.H * 2);
      } else {
        m.fc2(mt, BIG, TMP);
        m.store(mt, TMP);
      }
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
               .embed_scratch = ESCR, .slot0_smem = iio_.slot0_smem, .max_seq = opt_.max_seq, .kept = KEPT,
               .kept_rows = Nt, .image_in_place = in_place};
  // Embeddings of the text rows, the image rows spliced in.
  tl.embed({.mark = "", .r0 = 0, .rows = S}, H);
  auto ttables = [&](const std::string& M) {
    return [&, M](uint32_t chan) {
      load_tables(M, iio_.trope_ddr, opt_.max_seq * d.hd * 4, S * d.hd * 4, chan, PROPE, M.ends_with(".next_"));
    };
  };
  if (!res->rope_tmp) ttables("")(UINT32_MAX);
  const uint32_t qd = tl.qd(), qkvs = tl.qkvs();
  // q, k and v stay in the qkv rows (BIG, row stride qkv_n * 2): the per-head norms,
  // the rotary, the cache write and the attention read them there; the attention's
  // head-major staging goes to TMP.
  const uint32_t Q = BIG, K = BIG + qd, Vv = BIG + qd + tl.kd();
  bool normed = false;  // the layer's input norm ran in the layer before's residual call
  for (int i = 0; i < tc.num_hidden_layers; ++i) {
    const std::string L = fmt::format("P{}", i);
    tl.layer = i;
    b.op("mark.begin", {Name{L}});
    // Rows [r0, S) past the KV write (read_from): the tile `past`, residual rows at Hr.
    bool early_ds = false;
    const uint32_t r0 = read_from(s, S, i, tc.num_hidden_layers), rows = S - r0;
    const uint32_t Hr = H + r0 * d.H * 2;
    const Tile all{.mark = L, .r0 = 0, .rows = S}, past{.mark = L, .r0 = r0, .rows = rows};
    // Layer 0's norm weights load here; the others were started behind the previous layer's
    // post-attention norm (its vectors are dead then) and waited for after its first MLP
    // GEMM (a wait on channel 0 here would also wait for this layer's q|k|v weights).
    if (i == 0) em.copy(L + ".load_norms", ddr_.bus(layer_name(i, "norms")), ocm(VEC), d.text_vec() * 2);
    if (i == 0 || !rope_big) tables_early(ttables(L + "."));
    if (!normed) tl.input_norm(all, H, XN);
    normed = false;
    if (rope_shared) tables_ready();
    if (rows)
      prefetch(layer_name(i, "o.gemm"), d.H, d.nq * d.hd, KernelCalls::kLrmShared, 0,
               two_ahead ? two_ahead->o : anywhere, true);  // (whole: gate|up's units start during it)
    // (In the last layer too, whose o_proj and MLP run on the head's row alone: its q|k|v's DDR
    // idled 22 K cycles after o_proj's tile there, 64x64, 8 MiB, 128 GB/s.)
    if (two_ahead && rows) k.prefetch2(layer_name(i, "gu0.gemm"), gu_n, d.H, two_ahead->gu);
    tl.qkv(all, XN, BIG);
    // A chunk of the park into the DeepStack rows' region, a layer from the first after the
    // DeepStack ones, after its q|k|v (its units are in the channels then; 64x64, 8 MiB, 128 GB/s:
    // -8.9 K cycles for the 10 chunks; all in the last layer, whose DDR is busy, -3.1 K; before the
    // q|k|v, +73 K: the copies delayed its units).
    if (i >= int(ntaps) && uint32_t(i) - ntaps < kept_park) park_copy(L, uint32_t(i) - ntaps, uint32_t(i) - ntaps + 1);
    if (rows) k.start_after_next(layer_name(i, "gu0.gemm"), gu_n, d.H, rows, p_attn, double(S) * 2 * d.nkv * d.hd * 2);
    // q and k normed and rotated in one call; the cache write (DMA) of v starts before it, k's
    // after it, and both overlap the attention.
    if (!rope_shared) tables_ready();
    tl.kv_write(all, BIG, false, "v");
    tl.qk_norm_rope(all, BIG, PROPE, PROPE + S * d.hd * 4);
    tl.kv_write(all, BIG, off != 0, "k");
    // rope_big: the next layer's tables once this layer's MLP rows are dead
    const std::function<void()> next_tables = [&] {
      if (rope_big && i + 1 < tc.num_hidden_layers) tables_early(ttables(L + ".next_"));
    };
    if (!rows) {
      next_tables();
      if (!off) emit_kv_write_wait(b, cfg_);
      b.op("mark.end", {Name{L}});
      continue;
    }
    if (!off) {
      // The attention reads k and v in OCM; the MLP overwrites the rows the write reads.
      k.attention(L + ".attention", {.q_heads = d.nq, .kv_heads = d.nkv, .head_dim = d.hd, .seq = rows,
                                     .causal = true, .q_ocm = Q + r0 * qkvs, .q_row_stride = qkvs,
                                     .q_head_stride = d.hd * 2, .k_ocm = K, .v_ocm = Vv, .kv_row_stride = qkvs,
                                     .out_ocm = XN, .out_row_stride = qd, .out_head_stride = d.hd * 2, .kv_offset = r0});
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
                                       .out_ocm = XN + g0 * G * hd2, .out_row_stride = qd, .out_head_stride = hd2, .kv_offset = off + r0});
      }
    }
    if (dchain) k.lrm_end = dsums;
    prefetch(layer_name(i, "gu0.gemm"), gu_n, d.H, KernelCalls::kLrmShared, 0, two_ahead ? two_ahead->gu : anywhere);
    tl.attn_out(past, XN, TMP, Hr, XN);
    // The cache write (started after k's rotary) read k and v in the q|k|v rows, which the MLP
    // overwrites: waited for here, not after the attention, so the o_proj's MACs run beside its
    // DMA (64x64, 8 MiB, 128 GB/s: the attention ended 3 K cycles before the write).
    if (!off) emit_kv_write_wait(b, cfg_);
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
          tl.gate_up(past, {.call = c, .chunk0 = c, .n = 2 * cw, .x = XN, .y = BIG + c * cw * 2, .ys = d.I * 2,
                            .fused = true});
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
      next_tables();
      k.lrm_end = 0;
    }
    for (uint32_t c = 0; !dchain && c < ncalls; ++c) {
      const std::string C = fmt::format("{}.mlp{}", L, c);
      if (c + 1 < ncalls) prefetch(layer_name(i, fmt::format("gu{}.gemm", (c + 1) * J).c_str()), gu_n, d.H, 0);
      else  // (only SiLU gates between)
        prefetch(layer_name(i, "down.gemm"), d.H, d.I, 0, 0, two_ahead ? two_ahead->down : anywhere);
      // (fused: SiLU x up straight into the activation's rows; one call: TMP is free until the
      // down, which writes it, so the call may stage the down's units there)
      if (gu_fused)
        tl.gate_up(past, {.call = c, .chunk0 = c * J, .n = gu_n, .x = XN, .y = BIG + c * J * cw * 2, .ys = d.I * 2,
                          .fused = true, .stage_ocm = ncalls == 1 ? TMP : 0,
                          .stage_bytes = ncalls == 1 ? uint32_t(rTMP) : 0});
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
      if (i + 1 < tc.num_hidden_layers)
        prefetch(layer_name(i + 1, "qkv.gemm"), d.qkv_n, d.H, KernelCalls::kLrmShared, 0,
                 two_ahead ? two_ahead->qkv : anywhere);
      // (the next layer's input norm in the residual's call where no DeepStack rows come between)
      normed = i + 1 < tc.num_hidden_layers && rows == S && !tl.has_deepstack(past);
      // A layer adding DeepStack rows loads them into the normed rows (dead since the gate|up, its
      // input norm not fused then) as soon as the down's MACs are done, ahead of the next tables,
      // so the load runs beside the residual (64x64, 4 MiB, 128 GB/s: 3.6 -> 0.9 K cycles a layer).
      early_ds = !normed;
      tl.down(past, BIG, d.I * 2, TMP, Hr, normed ? XN : kNoResidual, [&] {
        if (early_ds) tl.deepstack_start(past, XN, 0);
        next_tables();
      });
    }
    if (early_ds) tl.deepstack(past, Hr, XN, 0);
    else tl.deepstack(past, Hr, TMP);
    b.op("mark.end", {Name{L}});
  }
  b.op("mark.end", {Name{"prefill"}});

  // ================= head (last row) =================
  if (s.head) {
  b.op("mark.begin", {Name{"head"}});
  Head{.k = k, .d = d, .vec = VEC, .eps = teps}.run(H + (S - 1) * d.H * 2, XN, BIG, TMP, uint32_t(rTMP),
                                                    {PARK, kept_park + park_chunks});
  b.op("mark.end", {Name{"head"}});
  }
  b.op("halt");
  out.program = b.finish();
  out.logits_ocm = BIG;
  out.plan = fmt::format("resident: {}, gate|up chunks per call {}{}{}{}{}", tower_note, J,
                         dchain ? fmt::format(", the down in chunks of {} beside them (fp32 partial sums in LRM)", dk) : "",
                         two_ahead ? ", q|k|v loads gate|up's first units (two calls ahead)" : "", channels_note,
                         park_chunks ? fmt::format("; LM head: {} chunks parked in free OCM", kept_park + park_chunks) : "");
  return out;
}

}  // namespace gpnpu::model
