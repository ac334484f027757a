// Internal to the compiler (compiler_image.cpp, image_streamed.cpp, compiler.cpp): the
// network written once. The vision block, merger, decoder layer and head as steps
// (VisionBlock, Merger, TextLayer, Head) that both image plans emit and whose steps between
// its GEMVs the decode program emits; the kernel calls they go through (KernelCalls); the
// model's sizes (Dims) and the image program's weight names. What only the plans share is in
// image_plan.h.
#pragma once

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

namespace gpnpu::model::blocks {

using namespace kernels;
using detail::layer_name;

inline std::string pm_name(int layer, uint32_t chunk, const char* what) {
  return layer_name(layer, fmt::format("pm{}.{}", chunk, what).c_str());
}
inline std::string vname(int b, const char* what) { return fmt::format("V{}.{}", b, what); }
inline std::string vpm_name(int block, uint32_t chunk, const char* what) {
  return vname(block, fmt::format("pm{}.{}", chunk, what).c_str());
}
inline std::string vgq_name(int block, uint32_t group) { return vname(block, fmt::format("gq{}", group).c_str()); }

inline std::string mname(int j, const char* what) {
  return j < 0 ? fmt::format("Mf.{}", what) : fmt::format("M{}.{}", j, what);
}
// A merger's fc1 and fc2 in chunks of pm_chunk(Md) columns of fc1 (Streamed::mpm).
inline std::string mpm_name(int j, uint32_t chunk, const char* what) {
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


// An activation goes into the GEMM's epilogue (kernels::GemmArgs::act) where twice its estimate
// (gemm_act_cycles) is below the element-wise call's: the element-wise estimate runs low, and in
// the streamed tower at 1,200 patches on qc-u (row tiles of 200, the fills spread over the MAC
// loops) the epilogue cost 243 cycles a row group, not the 124 of gemm_act_cycles; fusing the
// GELUs there on the estimates alone took 0.64 M cycles more (146.57 -> 147.21 M for the tower).
// On arrays of more than 1,024 PEs the estimate alone: 64x64 4 MiB 128 GB/s, the tower's fc1
// chunks and the mergers' fc1 with their GELUs, 22.38 -> 22.29 M cycles (14 points of the
// design-space grid faster, 8 and 16 MiB at 128 GB/s 1,032 cycles slower).
constexpr double kActMargin = 2.0;
inline bool act_fused(const sim::Config& cfg, const sim::Config& gcfg, uint32_t m, uint32_t n, uint32_t k,
                      uint32_t split, GemmAct act, const EwArgs& e) {
  const double margin = gcfg.npe() > 1024 ? 1.0 : kActMargin;
  return margin * gemm_act_cycles(gcfg, m, n, k, split, act) < ew_estimate_cycles(cfg, e, ew_pick_mapping(cfg, e));
}



// Mixed precision's OCM (kernels/f16cols.h): Xs of up to `rows` rows and the correction's
// DMA buffers; none without fp16 channels.
struct F16Regions {
  bool on = false;
  uint32_t xs = 0, scratch = 0;
};

// A GEMM call's partial sums (GemmArgs::acc_in, y_f32): in, fp32 [m][n] at ocm (row stride)
// added before the rounding; y_f32, Y written as fp32.
struct GemmAcc {
  bool in = false;
  uint32_t ocm = 0, stride = 0;
  bool y_f32 = false;
  uint32_t lrm = 0;  // the partial sums at this LRM offset (lrm_sums) instead of OCM
};

// One GEMM call of the image program (KernelCalls::gemm): Y [m][n] (row stride ys bytes at OCM
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
  uint32_t stage_ocm = 0, stage_bytes = 0;  // OCM free until the next GEMM's hand-off (GemmArgs::stage_ocm)
};

// A GEMM's n output columns in `count` groups run one after the other (KernelCalls::
// ChunkChain::groups): group 0 of `first` columns (0: n / count), then count - 1 groups that
// split the rest evenly. A smaller first group leaves LRM beside its partial sums for the up
// GEMM that runs with it (16x16 at 1 MiB: two groups of 768 and 1,280 columns where two of
// 1,024 do not fit beside gate|up's buffers).
struct ColumnGroups {
  uint32_t count = 1, first = 0;
  uint32_t cols(uint32_t n, uint32_t g) const {
    const uint32_t f = first ? first : n / count;
    return g == 0 ? f : (n - f) / (count - 1);
  }
  uint32_t start(uint32_t n, uint32_t g) const { return g == 0 ? 0 : cols(n, 0) + (g - 1) * cols(n, 1); }
  // Every group whole tiles of `tile` columns, together n.
  bool whole(uint32_t n, uint32_t tile) const {
    if (count == 1) return true;
    const uint32_t f = cols(n, 0);
    return f && f < n && (n - f) % (count - 1) == 0 && f % tile == 0 && cols(n, 1) % tile == 0;
  }
};

// The kernel calls of the blocks and their fixed OCM scratch (GEMM DMA buffers, norm
// scratch), shared by both image plans (and the decode program's steps between its GEMVs,
// which has no GEMM). GEMM calls chain their weight prefetch
// (GemmArgs::next) either by hand (prefetch(), the resident plan) or automatically:
// a first emission records the GEMMs in program order (record), the second chains
// each GEMM to the one after it (chain).
struct KernelCalls {
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
    if (!pre_w.empty() && next_w != pre_w)
      fail("compiler: internal: '{}' was handed off in part two calls ahead, but the next GEMM is '{}'", pre_w, next_w);
    const bool pre = !pre_w.empty();
    next_g.pre_units = pre ? next2_g.pre_units : 0;
    gemm_handoff(gcfg, g, next_g, between, next_at, next_whole);
    next_at = kernels::kLrmAnywhere;
    next_whole = false;
    if (pre && (!next_g.handed_off || next_g.lrm_p != next2_g.lrm_p))
      fail("compiler: internal: '{}' was placed at LRM {} two calls ahead, now at {}", pre_w, next2_g.lrm_p,
           next_g.lrm_p);
    if (pre) pre_w.clear();
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

  KernelCalls(kernels::Builder& bb, std::vector<KernelCall>& calls, const sim::Config& c, const sim::Config& gc,
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
    g.machine_pes = cfg.npe();
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
  // at: its first tile at that LRM offset where the previous GEMM hands it off (kernels::gemm_handoff).
  void prefetch(const std::string& w, uint32_t n, uint32_t k, uint32_t between = kLrmShared, uint64_t w_off = 0,
                uint32_t at = kernels::kLrmAnywhere, bool whole = false) {
    if (f16.on) return;
    next_g = base_args(w, first_call_n(w, n, k), k);
    next_g.w_ddr += uint32_t(w_off);
    next_w = w;
    next_between = between;
    next_at = at;
    next_whole = whole;
  }
  uint32_t next_at = kernels::kLrmAnywhere;
  bool next_whole = false;  // its tile 0 handed off whole (kernels::gemm_handoff's whole)
  // prefetch2(w, n, k) after prefetch(): the GEMM on w comes after the prefetched one, its first
  // tile at LRM `at`; the next gemm() call takes part of that tile where it has the DDR time
  // (kernels::gemm_two_ahead), the call after it the rest.
  // pre_w: the GEMM the last two-ahead call took units of (next2_g: their count and its place).
  std::string next2_w, pre_w;
  GemmArgs next2_g;
  uint32_t next2_between = 0, next2_at = kernels::kLrmAnywhere;
  void prefetch2(const std::string& w, uint32_t n, uint32_t k, uint32_t at, uint32_t between = kLrmShared) {
    if (f16.on) return;
    if (!pre_w.empty()) fail("compiler: internal: '{}' declared while '{}' waits for its hand-off", w, pre_w);
    next2_g = base_args(w, first_call_n(w, n, k), k);
    next2_w = w;
    next2_between = between;
    next2_at = at;
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
    GemmArgs g2 = base_args(w, first_call_n(w, n, k), k);
    if (w == pre_w) g2.pre_units = next2_g.pre_units;
    const kernels::GemmPlan p2 = plan_gemm(gcfg, 0, n, k, g2.split);
    const double first_tile = double(p2.tile_bytes) / cfg.ddr_bytes_per_cycle();
    if (first_tile <= double(next_m) * handed.n * handed.k / gcfg.mac_peak(true)) return;
    // Beside its first units, as many more as the window leaves the DDR time for, where the
    // scratch has room (kernels::emit_gemm_prefetch_staged; the next call takes them).
    const double spare = window * cfg.ddr_bytes_per_cycle() - window_bytes - double(p2.meta_unit) -
                         double(p2.channels) * p2.code_unit;
    started_staged = emit_gemm_prefetch_staged(b, gcfg, g2, spare > 0 ? uint32_t(spare / p2.code_unit) : 0u);
    started_w = w;
  }
  uint32_t started_staged = 0;  // (the units start_after_next staged)
  // A weight whose two LRM buffers do not fit (kernels::GemmPlan::single) runs a tile a call:
  // the calls over its tiles (o's columns from tile t on, and their bias, outputs and partial sums;
  // mark.col<t>), each prefetching the next. first_call_n: the columns of the first call on w.
  uint32_t first_call_n(const std::string& w, uint32_t n, uint32_t k) const {
    const kernels::GemmPlan pl = plan_gemm(gcfg, 0, n, k, ddr.at(w).split);
    return pl.single ? std::min(n, pl.cols) : n;
  }
  // The byte offset into w's packing (n x k) of its columns from c0 on (GemmOp::w_off): whole
  // tiles, c0 on a tile's edge.
  uint64_t column_offset(const std::string& w, uint32_t n, uint32_t k, uint32_t c0) const {
    const kernels::GemmPlan pl = plan_gemm(gcfg, 0, n, k, ddr.at(w).split);
    if (c0 % pl.cols) fail("compiler: internal: columns from {} of '{}' start inside a {}-column tile", c0, w, pl.cols);
    return uint64_t(c0 / pl.cols) * pl.tile_bytes;
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
    g.stage_ocm = o.stage_ocm;
    g.stage_bytes = o.stage_bytes;
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
      if (!next_w.empty() && !next2_w.empty()) {
        next_g.m = g.m;
        g.next2_units = gemm_two_ahead(gcfg, g, next_g, next2_g, next2_between, next2_at);
        if (g.next2_units) {
          g.next2 = &next2_g;
          pre_w = next2_w;
        }
      }
      next2_w.clear();
      g.next_started = !next_w.empty() && next_w == started_w;
      if (!started_w.empty() && !g.next_started)
        fail("compiler: internal: '{}' started before '{}', which is not its next GEMM", started_w, mark);
      g.prestaged = g.next_started ? started_staged : 0;
      started_staged = 0;
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
  uint32_t norm_lrm = kLrmShared;  // NormArgs::lrm_bytes (the decode program, with no GEMMs: 0, all of it)
  void norm(const std::string& mark, NormArgs n) {
    n.scratch_ocm = NSCR;
    n.scratch_bytes = norm_scratch_bytes(cfg);
    n.lrm_bytes = norm_lrm;
    lrm_since = std::max(lrm_since, kLrmShared);
    em.call(mark, "norm", cost_norm(cfg, n), [&] { emit_norm(b, cfg, n); });
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
    std::function<void(uint32_t, bool)> before = {};
    // The down's columns in groups, one after the other (whole tiles of its packings, the sums
    // in LRM, a down call a chunk): the first as above, each chunk's up output rows stored to
    // DDR at `mid` ([rows][chunks chunk]) before its down call; then each later group's down
    // calls on those rows read back (two buffers where the up output holds two), into its
    // columns of out, their sums at LRM lrm_later (0: lrm; below lrm where the later groups are
    // wider, from the first group's last down call on: lrm_end). The copies on DMA channel
    // `chan`; before_later() before the first group's last down call (the caller's loads for
    // the later groups, on chan), group_start(g) at group g's start with them arrived (seeded:
    // its sums' seed).
    ColumnGroups groups = {};
    uint32_t mid = 0, chan = 0, lrm_later = 0;
    std::function<void()> before_later = {};
    std::function<void(uint32_t)> group_start = {};
  };
  void chunk_chain(const ChunkChain& m) {
    constexpr uint32_t kNone = UINT32_MAX;
    const bool grouped = m.groups.count > 1;
    if (grouped && (m.pairs > 1 || !m.lrm || !m.groups.whole(m.out_n, 1) || f16.on))
      fail("compiler: internal: '{}' has its down in column groups without LRM sums, over two chunks or in mixed "
           "precision", m.mark);
    const uint32_t kb = m.chunk * 2, lrm_later = m.lrm_later ? m.lrm_later : m.lrm;
    const uint32_t nb = grouped && m.up_stride >= 2 * kb ? 2 : 1;  // the later groups' input buffers
    // The later groups' down calls (group, chunk): group 1 first on the first group's last chunk,
    // whose up output rows are still in the up buffer (not read back; with two groups not
    // stored), then on the others read back; call j's rows in buffer j % nb, call 1's loaded
    // beside the first group's last down call (two buffers).
    std::vector<std::pair<uint32_t, uint32_t>> later;
    for (uint32_t g = 1; g < m.groups.count; ++g)
      for (uint32_t c = 0; c < m.chunks; ++c) later.emplace_back(g, g == 1 ? (c + m.chunks - 1) % m.chunks : c);
    auto load_mid = [&](uint32_t j, bool wait) {
      const auto [g, c] = later[j];
      const detail::Copy cp{.src = m.mid + c * kb, .dst = sim::ocm_addr(m.up + j % nb * kb), .row_bytes = kb,
                            .rows = m.rows, .src_stride = m.chunks * kb, .dst_stride = m.up_stride};
      const std::string mark = fmt::format("{}.g{}.mlp{}.load_act", m.mark, g, c);
      if (wait) em.copy(mark, cp);
      else em.copy_async(mark, m.chan, cp);
    };
    for (uint32_t c = 0; c < m.chunks; ++c) {
      const std::string C = fmt::format("{}.mlp{}", m.mark, c);
      const bool last = c + 1 == m.chunks, into_out = last || m.lrm;
      if (grouped && c) em.wait(m.chan);  // (the up output's store)
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
      if (grouped && last && m.lrm_later) lrm_end = m.lrm_later;  // (its hand-off to the later groups' first call)
      if (grouped) {
        if (!last || m.groups.count > 2)
          em.copy_async(C + ".store_act", m.chan,
                        {.src = sim::ocm_addr(m.up), .dst = m.mid + c * kb, .row_bytes = kb, .rows = m.rows,
                         .src_stride = m.up_stride, .dst_stride = m.chunks * kb});
        if (last && m.before_later) m.before_later();
        if (last && nb == 2 && later.size() > 1) load_mid(1, false);
      }
      const GemmAcc acc{.in = c + 1 > m.pairs || m.seeded, .ocm = m.acc, .stride = m.acc_stride, .y_f32 = !last,
                        .lrm = m.lrm};
      gemm(C + (m.gated ? ".down" : ".fc2"),
           {.w = m.weight(c / m.pairs, true), .m = m.rows, .n = m.groups.cols(m.out_n, 0), .k = m.pairs * m.chunk, .x = m.up,
            .xs = m.up_stride, .y = into_out ? m.out : m.acc, .ys = into_out ? m.out_stride : m.acc_stride,
            .bias = c + 1 == m.pairs ? m.down_bias : kNone, .acc = acc});
    }
    if (!grouped) return;
    // The later groups: a group's down weights are whole tiles of each packing.
    em.wait(m.chan);
    for (uint32_t j = 0; j < uint32_t(later.size()); ++j) {
      const auto [g, c] = later[j];
      const uint32_t c0 = m.groups.start(m.out_n, g), i = j % m.chunks;  // (the group's i-th call)
      if (i == 0 && m.group_start) m.group_start(g);
      if (j && nb == 1) load_mid(j, true);
      else if (j) em.wait(m.chan);
      if (nb == 2 && j + 1 < later.size() && j) load_mid(j + 1, false);
      gemm(fmt::format("{}.g{}.mlp{}.{}", m.mark, g, c, m.gated ? "down" : "fc2"),
           {.w = m.weight(c, true), .m = m.rows, .n = m.groups.cols(m.out_n, g), .k = m.chunk,
            .x = m.up + j % nb * kb, .xs = m.up_stride, .y = m.out + c0 * 2, .ys = m.out_stride,
            .bias = i == 0 && m.down_bias != kNone ? m.down_bias + c0 * 2 : kNone,
            .acc = {.in = i > 0 || m.seeded, .y_f32 = i + 1 < m.chunks, .lrm = lrm_later},
            .w_off = column_offset(m.weight(c, true), m.out_n, m.chunk, c0)});
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
  // OCM attention: the caller names its shape and buffers (OcmAttnArgs fields); the scale and
  // LRM share are set here.
  void attention(const std::string& mark, OcmAttnArgs at) {
    at.scale = 1.0f / std::sqrt(float(at.head_dim));
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

inline uint32_t ocm(uint32_t off) { return sim::ocm_addr(off); }

// ---- The network, written once ----
// Each block of the model (a vision block, a merger, a decoder layer, the head) as the kernel
// calls of its steps, with their arguments, on a tile of rows: the one description the programs
// emit. A program places the buffers (OCM offsets) and schedules the steps around the copies,
// prefetches, waits and parks of its placement: the resident image plan on one tile of every
// row, the streamed plan in phases over row tiles (its MLP phase over every row, mlp_all_rows,
// calls the blocks' out GEMM and norm steps), the decode program the decoder layer's steps
// between its GEMVs on its one row. What depends on the placement stays with the programs: the
// attention (its staging), the MLP chunk chains (KernelCalls::chunk_chain), decode's GEMVs.

// (blocks' norms: no residual added first)
inline constexpr uint32_t kNoResidual = UINT32_MAX;

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
  KernelCalls& k;
  const Dims& d;
  int block = 0;
  uint32_t vec = 0;
  float eps = 0;
  bool qkv_split = false;
  uint64_t v_off = 0;  // v's weight in the q|k|v packing (split)
  // Split only: q|k rows dense ([rows][2 Dv], so the rotary loads and stores a tile of rows in
  // one scatter and gather a 32 dims, not a row at a time), v's rows after them with the same
  // stride (half of each unused), where the region has room for both.
  bool qk_dense = false;

  uint32_t qkv_stride() const { return (qk_dense ? 2 : 3) * d.Dv * 2; }  // bytes a row of the q|k|v rows
  uint32_t v_at(const Tile& t, uint32_t y) const { return qk_dense ? y + t.rows * qkv_stride() : y + 2 * d.Dv * 2; }

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
                        .ys = qkv_stride(), .bias = qkv_bias()});
    if (before) before(1);
    k.gemm(t.at("v"), {.w = w, .m = t.rows, .n = d.Dv, .k = d.Dv, .x = x, .xs = d.Dv * 2, .y = v_at(t, y),
                       .ys = qkv_stride(), .bias = qkv_bias() + 2 * d.Dv * 2, .w_off = v_off});
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
                             .x_row_stride = qkv_stride(), .cos_ocm = cos, .sin_ocm = sin});
  }
  // The attention rows a (row stride Dv) through proj into y, added to the residual h and h's
  // norm2 into x in one call (marked attn_residual: NormArgs::residual).
  void attn_out(const Tile& t, uint32_t a, uint32_t y, uint32_t h, uint32_t x) const {
    proj(t, a, y);
    norm2(t, h, x, y);
  }
  void proj(const Tile& t, uint32_t a, uint32_t y) const {
    k.gemm(t.at("proj"), {.w = vname(block, "proj"), .m = t.rows, .n = d.Dv, .k = d.Dv, .x = a, .xs = d.Dv * 2, .y = y,
                          .ys = d.Dv * 2, .bias = proj_bias()});
  }
  // (y: the residual added to h first, kNoResidual: none)
  void norm2(const Tile& t, uint32_t h, uint32_t x, uint32_t y = kNoResidual) const {
    k.norm(t.at(y == kNoResidual ? "norm2" : "attn_residual"),
           {.kind = NormKind::layer, .rows = t.rows, .dim = d.Dv, .x_ocm = h, .y_ocm = x, .w_ocm = n2w(),
            .b_ocm = n2w() + d.Dv * 2, .eps = eps, .residual = y != kNoResidual, .r_ocm = y});
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
  // The MLP residual h += y and the next block's norm1 of h into x in one call (marked
  // mlp_residual: NormArgs::residual), that norm's weight and bias at n1 ([2][Dv] fp16).
  void residual_norm1(const Tile& t, uint32_t h, uint32_t y, uint32_t x, uint32_t n1) const {
    k.norm(t.at("mlp_residual"), {.kind = NormKind::layer, .rows = t.rows, .dim = d.Dv, .x_ocm = h, .y_ocm = x,
                                  .w_ocm = n1, .b_ocm = n1 + d.Dv * 2, .eps = eps, .residual = true, .r_ocm = y});
  }
};

// A patch merger (j: DeepStack tap j, -1 the final merger): its LayerNorm (the final merger's
// per patch, before the 2x2 shuffle, a no-op in merge-window order), fc1 and its GELU, fc2, the
// merged rows stored for the prefill (act.ds<j>, act.img). A tile's rows are merged rows. Its
// vectors at vec: norm w, b, fc1, fc2 biases.
struct Merger {
  KernelCalls& k;
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
  // (chan: started on that DMA channel under `mark`, not waited for; the caller waits before y is
  // written again)
  void store(const Tile& t, uint32_t y, uint32_t chan = UINT32_MAX, const std::string& mark = {}) const {
    const std::string to = j < 0 ? std::string("act.img") : fmt::format("act.ds{}", j);
    const uint32_t dst = k.ddr.bus(to) + t.r0 * d.H * 2, bytes = t.rows * d.H * 2;
    if (chan == UINT32_MAX) k.em.copy(mark.empty() ? t.at("store") : mark, ocm(y), dst, bytes);
    else k.em.copy_async(mark, chan, ocm(y), dst, bytes);
  }
};

// A decoder layer: layer 0's embeddings (embed: the text rows looked up, the image rows
// spliced in), input_norm, qkv (q, k, v side by side in the q|k|v rows, row stride qkv_n * 2),
// k_norm and q_norm in place, the rotary, the KV write, the attention, attn_out (o_proj, its
// residual, post_norm), the MLP (gate_up per chunk call, down with its residual), the DeepStack
// rows (deepstack). Its vectors at vec (the layer's "norms"): input and post norm weights, q and
// k norm weights. The image program's prefill runs every step; the decode program
// (compiler.cpp) runs the steps between its GEMVs on its one row: its linear layers are GEMVs
// on their own packings, and its attention reads the KV cache in DDR.
struct TextLayer {
  KernelCalls& k;
  const Dims& d;
  int layer = 0;
  uint32_t vec = 0;
  float eps = 0;
  // The prompt's image rows: ni rows from row `first` (act.img rows from i0); the layers that
  // add DeepStack rows.
  uint32_t first = 0, ni = 0, i0 = 0;
  int deepstack_layers = 0;
  uint32_t ids_smem = 0, embed_scratch = 0, slot0_smem = 0, max_seq = 0;
  // The DeepStack rows kept in OCM by the tower (kKeptNone: read from DDR): act.ds<j>'s at
  // kept + j * kept_rows * H * 2. image_in_place: the image rows are in the residual rows
  // already (the final merger wrote them there), no splice.
  static constexpr uint32_t kKeptNone = UINT32_MAX;
  uint32_t kept = kKeptNone, kept_rows = 0;
  bool image_in_place = false;
  uint32_t kept_at(int j, uint32_t row) const { return kept + (uint32_t(j) * kept_rows + row) * d.H * 2; }

  uint32_t qd() const { return d.nq * d.hd * 2; }   // row bytes of q
  uint32_t kd() const { return d.nkv * d.hd * 2; }  // of k (= v)
  uint32_t qkvs() const { return d.qkv_n * 2; }
  uint32_t q_norm_w() const { return vec + 4 * d.H; }  // the per-head norms' weights [hd] (q, k)
  uint32_t k_norm_w() const { return q_norm_w() + d.hd * 2; }

  void embed(const Tile& t, uint32_t in) const {
    const uint32_t w2 = d.H * 2, a = std::max(t.r0, first), e = std::min(t.r0 + t.rows, first + ni);
    for (auto [s0, s1] : {std::pair{t.r0, std::min(t.r0 + t.rows, first)}, {std::max(t.r0, first + ni), t.r0 + t.rows}})
      if (s1 > s0)
        k.embed(t.at(s0 == t.r0 ? "embed" : "embed.after_image"),
                {.vocab = d.V, .dim = d.H, .rows = s1 - s0, .ids_smem = ids_smem + s0 * 4,
                 .out_ocm = in + (s0 - t.r0) * w2, .scratch_ocm = embed_scratch});
    if (e > a && !image_in_place)
      k.em.copy(t.at("splice"), k.ddr.bus("act.img") + (a - first + i0) * w2, ocm(in + (a - t.r0) * w2), (e - a) * w2);
  }
  void input_norm(const Tile& t, uint32_t in, uint32_t x) const {
    k.norm(t.at("input_norm"), {.kind = NormKind::rms, .rows = t.rows, .dim = d.H, .x_ocm = in, .y_ocm = x,
                                .w_ocm = vec, .eps = eps});
  }
  void qkv(const Tile& t, uint32_t x, uint32_t y) const {
    k.gemm(t.at("qkv"), {.w = layer_name(layer, "qkv.gemm"), .m = t.rows, .n = d.qkv_n, .k = d.H, .x = x,
                         .xs = d.H * 2, .y = y, .ys = qkvs()});
  }
  // q and k (adjacent in the q|k|v rows) normed, each with its norm, and rotated in one call:
  // marked qk_rope.
  void qk_norm_rope(const Tile& t, uint32_t qkv, uint32_t cos, uint32_t sin) const {
    k.rope(t.at("qk_rope"), {.rows = t.rows, .heads = d.nq + d.nkv, .head_dim = d.hd, .x_ocm = qkv,
                             .x_row_stride = qkvs(), .cos_ocm = cos, .sin_ocm = sin, .norm = true,
                             .norm_w_ocm = q_norm_w(), .eps = eps, .norm2_from = d.nq, .norm2_w_ocm = k_norm_w()});
  }
  // A group of q or k heads made alone (the streamed plan's q|k|v column groups, Streamed::pqg):
  // the tile's rows of `heads` heads at x (row stride xs), normed (weights w: q_norm_w or
  // k_norm_w) and rotated, tables cos, sin [rows][hd] (kernels::RopeArgs::norm).
  void head_group(const std::string& mark, const Tile& t, uint32_t heads, uint32_t x, uint32_t xs, uint32_t w,
                  uint32_t cos, uint32_t sin) const {
    k.rope(mark + ".rope", {.rows = t.rows, .heads = heads, .head_dim = d.hd, .x_ocm = x, .x_row_stride = xs,
                            .cos_ocm = cos, .sin_ocm = sin, .norm = true, .norm_w_ocm = w, .eps = eps});
  }
  // k or v ("k", "v": marked k_write, v_write) of the tile's rows to cache slots slot0 + r0 on
  // (wait: the writes on the cache's channels waited for in the call; the prefill starts v's before
  // the rotary, k's after it).
  void kv_write(const Tile& t, uint32_t qkv, bool wait, const std::string& only) const {
    const uint32_t hd2 = d.hd * 2;
    k.kv_write(t.at(only + "_write"),
               {.kv_heads = d.nkv, .head_dim = d.hd, .rows = t.rows, .k_ocm = qkv + qd(), .v_ocm = qkv + qd() + kd(),
                .row_stride = qkvs(), .k_cache_ddr = k.ddr.bus(layer_name(layer, "kcache")) + t.r0 * hd2,
                .v_cache_ddr = k.ddr.bus(layer_name(layer, "vcache")) + t.r0 * hd2, .max_seq = max_seq,
                .pos_smem = slot0_smem, .wait = wait, .write_k = only != "v", .write_v = only != "k"});
  }
  // The attention rows a (row stride qd) through o_proj into y, added to the residual h and h's
  // post_norm into x in one call (marked attn_residual: NormArgs::residual).
  void attn_out(const Tile& t, uint32_t a, uint32_t y, uint32_t h, uint32_t x) const {
    o_proj(t, a, y);
    post_norm(t, h, x, y);
  }
  void o_proj(const Tile& t, uint32_t a, uint32_t y) const {
    k.gemm(t.at("o_proj"), {.w = layer_name(layer, "o.gemm"), .m = t.rows, .n = d.H, .k = d.nq * d.hd, .x = a,
                            .xs = qd(), .y = y, .ys = d.H * 2});
  }
  // (y: the residual added to h first, kNoResidual: none)
  void post_norm(const Tile& t, uint32_t h, uint32_t x, uint32_t y = kNoResidual) const {
    k.norm(t.at(y == kNoResidual ? "post_norm" : "attn_residual"),
           {.kind = NormKind::rms, .rows = t.rows, .dim = d.H, .x_ocm = h, .y_ocm = x, .w_ocm = vec + d.H * 2,
            .eps = eps, .residual = y != kNoResidual, .r_ocm = y});
  }
  // Gate|up call `call` (mark mlp<call>) on n columns of the packed chunks from chunk0, of the
  // normed rows x, with SiLU x up into y (row stride ys): KernelCalls::gate_up.
  struct GateUp {
    uint32_t call = 0, chunk0 = 0, n = 0, x = 0, y = 0, ys = 0;
    bool fused = false;
    uint32_t stage_ocm = 0, stage_bytes = 0;  // (GemmOp's)
  };
  void gate_up(const Tile& t, const GateUp& g) const {
    k.gate_up(t.at(fmt::format("mlp{}", g.call)),
              {.w = layer_name(layer, fmt::format("gu{}.gemm", g.chunk0).c_str()), .m = t.rows, .n = g.n, .k = d.H,
               .x = g.x, .xs = d.H * 2, .y = g.y, .ys = g.ys, .stage_ocm = g.stage_ocm, .stage_bytes = g.stage_bytes},
              g.fused);
  }
  // The activation rows act (row stride as) through down into y, added to the residual h; with
  // next_x, in one call with the next layer's input norm of h into next_x (its weights at vec by
  // then; marked mlp_residual: NormArgs::residual). after_gemm: emitted between the GEMM and the
  // residual (work that needs the activation rows dead).
  void down(const Tile& t, uint32_t act, uint32_t as, uint32_t y, uint32_t h, uint32_t next_x = kNoResidual,
            const std::function<void()>& after_gemm = {}) const {
    k.gemm(t.at("down"), {.w = layer_name(layer, "down.gemm"), .m = t.rows, .n = d.H, .k = d.I, .x = act, .xs = as,
                          .y = y, .ys = d.H * 2});
    if (after_gemm) after_gemm();
    if (next_x == kNoResidual) {
      residual(t, "mlp_residual", h, y);
      return;
    }
    k.norm(t.at("mlp_residual"), {.kind = NormKind::rms, .rows = t.rows, .dim = d.H, .x_ocm = h, .y_ocm = next_x,
                                  .w_ocm = vec, .eps = eps, .residual = true, .r_ocm = y});
  }
  // h += y (step: attn_residual or mlp_residual).
  void residual(const Tile& t, const char* step, uint32_t h, uint32_t y) const {
    k.ew(t.at(step), {.op = EwOp::add, .rows = t.rows, .cols = d.H, .a_ocm = h, .b_ocm = y, .out_ocm = h});
  }
  // Whether this layer adds DeepStack rows among the tile's (deepstack below).
  bool has_deepstack(const Tile& t) const {
    return layer < deepstack_layers && std::min(t.r0 + t.rows, first + ni) > std::max(t.r0, first);
  }
  // The DeepStack rows of this layer among the tile's rows (residual rows at h) added to them,
  // loaded into scratch; with chan, deepstack_start started that load on the DMA channel chan
  // (only the wait here).
  // (the load of those rows from act.ds<layer> into scratch, started on chan, or waited for)
  void load_deepstack(const Tile& t, uint32_t scratch, uint32_t chan) const {
    const uint32_t w2 = d.H * 2, a = std::max(t.r0, first), e = std::min(t.r0 + t.rows, first + ni);
    const uint32_t src = k.ddr.bus(fmt::format("act.ds{}", layer)) + (a - first + i0) * w2;
    if (chan == UINT32_MAX) k.em.copy(t.at("load_deepstack"), src, ocm(scratch), (e - a) * w2);
    else k.em.copy_async(t.at("load_deepstack"), chan, src, ocm(scratch), (e - a) * w2);
  }
  void deepstack_start(const Tile& t, uint32_t scratch, uint32_t chan) const {
    if (has_deepstack(t) && kept == kKeptNone) load_deepstack(t, scratch, chan);
  }
  void deepstack(const Tile& t, uint32_t h, uint32_t scratch, uint32_t chan = UINT32_MAX) const {
    const uint32_t w2 = d.H * 2, a = std::max(t.r0, first), e = std::min(t.r0 + t.rows, first + ni);
    if (!has_deepstack(t)) return;
    uint32_t src = scratch;  // (the rows added: loaded into scratch, or kept in OCM)
    if (kept == kKeptNone && chan != UINT32_MAX)
      k.em.wait(chan);
    else if (kept == kKeptNone)
      load_deepstack(t, scratch, UINT32_MAX);
    else
      src = kept_at(layer, a - first + i0);
    const uint32_t at = h + (a - t.r0) * w2;
    k.ew(t.at("deepstack_add"), {.op = EwOp::add, .rows = e - a, .cols = d.H, .a_ocm = at, .b_ocm = src,
                                 .out_ocm = at});
  }
};

// The head on the prompt's last row x: the final norm (its weight loaded into vec) into y, the
// LM head on the token table into the logits (fp16 [vocab]).
struct Head {
  KernelCalls& k;
  const Dims& d;
  uint32_t vec = 0;
  float eps = 0;
  // (park: the LM head's parked chunks, every third, kernels::GemvArgs::park_ocm and park_chunks)
  void run(uint32_t x, uint32_t y, uint32_t logits, uint32_t scratch, uint32_t scratch_bytes,
           std::pair<uint32_t, uint32_t> park = {}) const {
    k.em.copy("final_norm.load", k.ddr.bus("final_norm"), ocm(vec), d.H * 2);
    k.norm("final_norm", {.kind = NormKind::rms, .rows = 1, .dim = d.H, .x_ocm = x, .y_ocm = y, .w_ocm = vec,
                          .eps = eps});
    k.lm_head("lm_head", {.n = d.V, .k = d.H, .x_ocm = y, .y_ocm = logits, .scratch_ocm = scratch,
                          .scratch_bytes = scratch_bytes, .park_ocm = park.first, .park_chunks = park.second});
  }
};

}  // namespace gpnpu::model::blocks
