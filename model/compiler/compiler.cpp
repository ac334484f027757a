// DDR layout, the decode program, and weight loading.
#include "model/compiler/compiler.h"

#include "model/compiler/compiler_emit.h"
#include "model/compiler/blocks.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <optional>

#include "isa/error.h"
#include "isa/fp16.h"
#include "kernels/attention.h"
#include "kernels/builder.h"
#include "kernels/elementwise.h"
#include "kernels/embed.h"
#include "kernels/f16cols.h"
#include "kernels/gemm.h"
#include "kernels/gemv.h"
#include "kernels/norm.h"
#include "kernels/rope.h"
#include "model/checkpoint/quant.h"
#include "sim/machine/memory_map.h"

namespace gpnpu::model {

using namespace kernels;

using detail::align_up;
using detail::layer_name;
constexpr uint64_t kAlign = 64;

uint64_t DdrLayout::add(const std::string& name, uint64_t bytes, const std::string& layout) {
  if (index_.count(name)) fail("compiler: DDR tensor '{}' laid out twice", name);
  uint64_t off = align_up(end_, kAlign);
  tensors_.push_back({name, off, bytes, layout});
  index_[name] = tensors_.size() - 1;
  end_ = off + bytes;
  return off;
}

void DdrLayout::truncate(size_t count) {
  for (size_t i = count; i < tensors_.size(); ++i) index_.erase(tensors_[i].name);
  tensors_.resize(std::min(count, tensors_.size()));
  end_ = tensors_.empty() ? 0 : tensors_.back().offset + tensors_.back().bytes;
}

const DdrTensor& DdrLayout::at(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) fail("compiler: no DDR tensor '{}'", name);
  return tensors_[it->second];
}

uint32_t DdrLayout::bus(const std::string& name) const { return sim::ddr_addr(at(name).offset); }

std::vector<std::string> qkv_names(int layer) {
  return {text_layer_name(layer, "self_attn.q_proj.weight"), text_layer_name(layer, "self_attn.k_proj.weight"),
          text_layer_name(layer, "self_attn.v_proj.weight")};
}
std::vector<std::string> gate_up_names(int layer) {
  return {text_layer_name(layer, "mlp.gate_proj.weight"), text_layer_name(layer, "mlp.up_proj.weight")};
}

Compiler::Compiler(const ModelConfig& model, const sim::Config& cfg, const CompileOptions& opt)
    : model_(model), cfg_(cfg), gemm_cfg_(gemm_view(model, cfg, opt)), opt_(opt) {
  cfg_.validate();
  if (opt_.max_seq == 0) fail("compiler: a KV cache of 0 slots holds no token; give a max context of at least 1");
  plan_ddr();
  if (ddr_.total() > cfg_.ddr_bytes)
    fail("compiler: a KV cache of {} tokens makes the model need {} bytes of DDR but ddr_bytes is {}: at most {} "
         "tokens fit; lower --max-context or raise ddr_bytes",
         opt_.max_seq, ddr_.total(), cfg_.ddr_bytes, max_context(model_, cfg_, opt_));
  plan_decode_ocm();
  settle_gemm_view();
  std::optional<Compiler> viewed;
  if (fewer_rows_apply()) viewed = *this;
  settle_tower_view();
  settle_pm_chunks();
  settle_pm_pairs();
  if (viewed) settle_fewer_rows(*viewed);
  settle_parts();
  record_gemm_splits();
}

void Compiler::add_weight(const std::string& name, uint32_t n, uint32_t k, const char* layout) {
  const bool gemm = std::string(layout) == "gemm";
  auto bytes = [&](uint32_t rows) {
    return gemm ? gemm_weight_bytes(cfg_, rows, k) : gemv_weight_bytes(rows, k);
  };
  // A GEMM weight whose LRM tile buffer does not fit (two that do not run a tile a call,
  // kernels::GemmPlan::single): the layout goes on (its bytes do not depend on the tiling) and
  // plan_ddr fails with the one needing the most LRM.
  if (gemm && k % kernels::kW4Block == 0 && kernels::gemm_lrm_need(cfg_, k) > cfg_.lrm_bytes) {
    sim::Config big = cfg_;
    big.lrm_bytes = kernels::gemm_lrm_need(cfg_, k);
    if (big.lrm_bytes > lrm_short_.second) lrm_short_ = {fmt::format("'{}' [{} x {}]", name, n, k), big.lrm_bytes};
    sim::Config even = cfg_;
    even.pe_cols += cfg_.pe_cols % 2;
    lrm_even_ = std::max(lrm_even_, kernels::gemm_lrm_need(even, k));
    ddr_.add(name, gemm_weight_bytes(big, n, k), layout);
    return;
  }
  ddr_.add(name, bytes(n), layout);
  if (!opt_.fp16_channels) return;
  ddr_.add(detail::f16sel(name), bytes(kF16Cols), layout);
  ddr_.add(detail::f16w(name), uint64_t(n) * kF16RowBytes, layout);
}

Compiler::Compiler(const ModelConfig& model, const sim::Config& cfg, const CompileOptions& opt, LayoutOnly l)
    : model_(model), cfg_(cfg), gemm_cfg_(gemm_view(model, cfg, opt)), opt_(opt) {
  pm_kept_ = l.packings;
  plan_ddr();
}

uint64_t Compiler::ddr_need(const ModelConfig& model, const sim::Config& cfg, const CompileOptions& opt,
                            bool packings) {
  return Compiler(model, cfg, opt, LayoutOnly{packings}).ddr_.total();
}

uint32_t Compiler::max_context(const ModelConfig& model, const sim::Config& cfg, CompileOptions opt, bool packings) {
  // The layout grows with the slots (K, V and the prefill's per-row areas): the largest
  // count whose layout fits, by bisection (the bus addresses are 32-bit, so < 2^32 bytes).
  auto fits = [&](uint32_t m) {
    opt.max_seq = m;
    return ddr_need(model, cfg, opt, packings) <= cfg.ddr_bytes;
  };
  if (!fits(1))
    fail("compiler: the model's weights and buffers alone need more than ddr_bytes = {} bytes of DDR; raise ddr_bytes",
         cfg.ddr_bytes);
  uint32_t lo = 1, hi = 1u << 24;  // fits(lo); hi: a bound (a slot takes over 256 bytes, ddr_bytes <= 3 GiB)
  if (fits(hi)) return hi;
  while (hi - lo > 1) {
    const uint32_t mid = lo + (hi - lo) / 2;
    (fits(mid) ? lo : hi) = mid;
  }
  return lo;
}

void Compiler::plan_ddr() {
  const TextConfig& t = model_.text;
  const uint32_t H = uint32_t(t.hidden_size), hd = uint32_t(t.head_dim);
  const uint32_t nq = uint32_t(t.num_attention_heads), nkv = uint32_t(t.num_key_value_heads);
  const uint32_t I = uint32_t(t.intermediate_size), V = uint32_t(t.vocab_size);
  add_weight("embed", V, H, "gemv");
  if (opt_.fp16_channels) ddr_.add("embed.f16onehot", uint64_t(H) * kF16RowBytes, "f16");
  ddr_.add("final_norm", uint64_t(H) * 2, "f16");
  for (int i = 0; i < t.num_hidden_layers; ++i) {
    add_weight(layer_name(i, "qkv"), (nq + 2 * nkv) * hd, H, "gemv");
    add_weight(layer_name(i, "o"), H, nq * hd, "gemv");
    add_weight(layer_name(i, "gateup"), 2 * I, H, "gemv");
    add_weight(layer_name(i, "down"), H, I, "gemv");
    ddr_.add(layer_name(i, "norms"), (2ull * H + 2ull * hd) * 2, "f16");  // input, post, q, k
    ddr_.add(layer_name(i, "kcache"), uint64_t(nkv) * opt_.max_seq * hd * 2, "kv");
    ddr_.add(layer_name(i, "vcache"), uint64_t(nkv) * opt_.max_seq * hd * 2, "kv");
  }
  ddr_.add("logits", uint64_t(V) * 2, "act");  // the decode program's (its LM head's calls copy them out)
  if (opt_.image) plan_image_ddr();
  // The second packings only speed the image program up: a KV cache that fits only without
  // them gets their room (qc-u: 9,932 tokens beside them, --max-context auto; up to 10,795).
  if (pm_first_ && !pm_kept_ && ddr_.total() > cfg_.ddr_bytes) {
    ddr_.truncate(pm_first_);
    pm_first_ = 0;
    pm_tower_only_ = false;
    pm_left_out_ = true;
  }
  if (lrm_short_.second) {
    // (an odd pe_cols takes split 1 only: split 2 pairs the neighbouring PEs of a row)
    const std::string odd =
        cfg_.pe_cols % 2 == 0 ? ""
        : lrm_even_ <= cfg_.lrm_bytes
            ? fmt::format("; or an even pe_cols (pe_cols = {} is odd, so every GEMM runs at split 1, which takes "
                          "twice the LRM; with {} the weights fit this lrm_bytes)",
                          cfg_.pe_cols, cfg_.pe_cols + 1)
            : fmt::format("; pe_cols = {} is odd, so every GEMM runs at split 1, which takes twice the LRM: with an "
                          "even pe_cols they need {} bytes",
                          cfg_.pe_cols, lrm_even_);
    fail("compiler: weight {} needs an LRM tile buffer of {} bytes on {}: raise lrm_bytes to {} or more "
         "(the model's largest need){}",
         lrm_short_.first, lrm_short_.second, cfg_.name(), lrm_short_.second, odd);
  }
}

void Compiler::plan_decode_ocm() {
  const TextConfig& t = model_.text;
  const uint32_t H = uint32_t(t.hidden_size), hd = uint32_t(t.head_dim);
  const uint32_t nq = uint32_t(t.num_attention_heads), nkv = uint32_t(t.num_key_value_heads);
  const uint32_t I = uint32_t(t.intermediate_size), V = uint32_t(t.vocab_size);
  detail::OcmAlloc a(cfg_.ocm_bytes);
  docm_.h = a.take(H * 2, "hidden");
  docm_.xn = a.take(std::max(H, I) * 2, "normed");
  docm_.qkv = a.take((nq + 2 * nkv) * hd * 2, "qkv");
  docm_.attn = a.take(nq * hd * 2, "attention out");
  docm_.o = a.take(H * 2, "projection out");
  docm_.gu = a.take(2 * I * 2, "gate and up");
  docm_.act = a.take(I * 2, "mlp activation");
  docm_.normw = a.take((2 * H + 2 * hd) * 2, "norm weights");
  docm_.finalw = a.take(H * 2, "final norm weight");
  dio_.cos_ocm = a.take(hd * 4, "rope cos");
  dio_.sin_ocm = a.take(hd * 4, "rope sin");
  dio_.max_seq = opt_.max_seq;
  docm_.norm_scratch = a.take(norm_scratch_bytes(cfg_), "norm scratch");
  docm_.embed_scratch = a.take(embed_scratch_bytes(H, 1), "embed scratch");
  if (opt_.fp16_channels) {
    docm_.f16xs = a.take(kF16RowBytes, "fp16 channels of x");
    docm_.f16scr = a.take(f16cols_scratch_bytes(cfg_), "fp16 correction buffers");
  }
  // The attention's key splits take what the GEMV's buffers leave (a one-block chunk on
  // every DMA channel, two on one: its tiling rule when the port is the bound). The LM head's two
  // staging buffers share their region (it runs after the last layer's attention); the
  // logits themselves go to DDR, so they take no OCM from the GEMVs (2B decode on 32x32 at
  // 512 KiB, 128 GB/s: 1.488 -> 1.04 x the DDR floor, the OCM's 304 KB of logits gone).
  const uint64_t gemv_min = gemv_scratch_bytes(cfg_, 1), gemv_want = gemv_scratch_bytes(cfg_, gemv_buffers(cfg_.dma_channels));
  DecodeAttnArgs probe;
  probe.q_heads = nq;
  probe.kv_heads = nkv;
  probe.head_dim = hd;
  probe.scratch_ocm = uint32_t(a.next());  // where take() puts it (the layout's pad depends on it)
  probe.scratch_bytes = uint32_t(std::min<uint64_t>(a.left() > gemv_want ? a.left() - gemv_want : 0, 0xffffffffu));
  docm_.attn_scratch_bytes = attention_decode_scratch_bytes(cfg_, probe);
  // An LM-head call: whole tiles of the GEMV packing, the most whose two staging buffers fit
  // what the GEMVs' buffers leave (as the attention's splits; not from the attention's own
  // size, which grows with the PEs: the same calls on every array; lm_calls in decode_program).
  const uint32_t T = gemv_tile_cols(cfg_), tiles = (V + T - 1) / T;
  docm_.lm_cols = std::min(V, std::clamp<uint32_t>(uint32_t(probe.scratch_bytes / (4ull * T)), 1u, tiles) * T);
  docm_.attn_scratch = a.take(std::max<uint64_t>(docm_.attn_scratch_bytes, 4ull * docm_.lm_cols),
                              "attention scratch and the LM head's staging");
  docm_.gemv_scratch_bytes = uint32_t(std::min<uint64_t>(a.left(), 0xffffffffu));
  docm_.gemv_scratch = a.rest("GEMV DMA buffers", gemv_min);
}

CompiledProgram Compiler::decode_program() const {
  const TextConfig& t = model_.text;
  const uint32_t H = uint32_t(t.hidden_size), hd = uint32_t(t.head_dim);
  const uint32_t nq = uint32_t(t.num_attention_heads), nkv = uint32_t(t.num_key_value_heads);
  const uint32_t I = uint32_t(t.intermediate_size), V = uint32_t(t.vocab_size);
  const uint32_t qkv_n = (nq + 2 * nkv) * hd;
  const uint32_t kSmem = detail::Emitter::kSmem;
  const float eps = float(t.rms_norm_eps);
  const DecodeOcm& o = docm_;

  Builder b;
  CompiledProgram out;
  detail::Emitter em(b, cfg_, out.calls);
  auto call = [&](const std::string& mark, const char* kernel, KernelCost cost, const std::function<void()>& emit) {
    em.call(mark, kernel, cost, emit);
  };
  // GEMV calls start their weight stream before the small kernels that precede them
  // (emit_gemv_prefetch; those use no DMA); the next layer's norm weights load before the
  // down projection's prefetch (the DMA channels are in order); o_proj's inside the attention
  // (DecodeAttnArgs::after_last_fetch). Their descriptors live apart from the other kernels'
  // (kSmemGemv).
  auto gemv_args = [&](const std::string& w, uint32_t n, uint32_t k, uint32_t x, uint32_t y) {
    GemvArgs g;
    g.n = n;
    g.k = k;
    g.w_ddr = ddr_.bus(w);
    g.x_ocm = x;
    g.y_ocm = y;
    g.scratch_ocm = o.gemv_scratch;
    g.scratch_bytes = o.gemv_scratch_bytes;
    g.smem = detail::Emitter::kSmemGemv;
    return g;
  };
  auto prefetch = [&](GemvArgs& g) {
    emit_gemv_prefetch(b, cfg_, g);
    g.prefetched = true;
  };
  auto gemv = [&](const std::string& mark, const std::string& w, const GemvArgs& g) {
    call(mark, "gemv", cost_gemv(cfg_, g), [&] { emit_gemv_w4(b, cfg_, g); });
    if (opt_.fp16_channels) em.f16_gemv(mark, ddr_, w, g, o.f16xs, o.f16scr);
  };
  // Small vectors (norm weights) from DDR into OCM.
  auto load = [&](const std::string& mark, const std::string& name, uint32_t dst, uint32_t bytes) {
    em.copy(mark, ddr_.bus(name), sim::ocm_addr(dst), bytes);
  };
  // The layer's steps between its GEMVs, as the image program's prefill writes them
  // (blocks::TextLayer) on this program's one row; the norms may use all of LRM (no GEMM here).
  blocks::KernelCalls k(b, out.calls, cfg_, cfg_, ddr_);
  k.NSCR = o.norm_scratch;
  k.norm_lrm = 0;
  k.f16 = {.on = opt_.fp16_channels, .xs = o.f16xs, .scratch = o.f16scr};
  const blocks::Dims dims(model_);
  blocks::TextLayer tl{.k = k, .d = dims, .vec = o.normw, .eps = eps, .ids_smem = dio_.token_smem,
                      .embed_scratch = o.embed_scratch, .slot0_smem = dio_.slot_smem, .max_seq = opt_.max_seq};

  b.op("mark.begin", {Name{"decode"}});
  tl.embed({.mark = "", .r0 = 0, .rows = 1}, o.h);
  // The LM head in calls of o.lm_cols columns (whole tiles of its packing) and its last tile
  // alone, call c into staging buffer c % 2 (the attention's region), each copied to the DDR
  // logits on channel 0 while the next call runs (the next call's first wait on channel 0 waits
  // for the copy too, before it writes the other buffer, so a buffer is written again only
  // after its copy is done); the program waits only for the last tile's copy. The calls are as
  // wide as the staging allows: each call's start leaves the DDR idle for a few hundred cycles.
  std::vector<std::pair<uint32_t, uint32_t>> lm_calls;  // (first column, columns)
  {
    const uint32_t T = gemv_tile_cols(cfg_), last = V > T ? (V % T ? V % T : T) : V;
    for (uint32_t c0 = 0; c0 < V - last; c0 += o.lm_cols) lm_calls.emplace_back(c0, std::min(o.lm_cols, V - last - c0));
    lm_calls.emplace_back(V - last, last);
  }
  auto lm_args = [&](uint32_t c) {
    const auto [c0, n] = lm_calls[c];
    GemvArgs g = gemv_args("embed", n, H, o.xn, o.attn_scratch + (c % 2) * o.lm_cols * 2);
    g.w_ddr += uint32_t(gemv_weight_bytes(c0, H));
    return g;
  };
  const uint32_t norms_bytes = (2 * H + 2 * hd) * 2;
  load("L0.norms", layer_name(0, "norms"), o.normw, norms_bytes);
  GemvArgs qkv = gemv_args(layer_name(0, "qkv"), qkv_n, H, o.xn, o.qkv);
  for (int i = 0; i < t.num_hidden_layers; ++i) {
    const std::string L = fmt::format("L{}", i);
    b.op("mark.begin", {Name{L}});
    const blocks::Tile row{.mark = L, .r0 = 0, .rows = 1};
    tl.layer = i;
    tl.input_norm(row, o.h, o.xn);
    gemv(L + ".qkv", layer_name(i, "qkv"), qkv);
    tl.kv_write(row, o.qkv, false, "v");
    tl.qk_norm_rope(row, o.qkv, dio_.cos_ocm, dio_.sin_ocm);
    tl.kv_write(row, o.qkv, true, "k");
    DecodeAttnArgs at;
    at.q_heads = nq;
    at.kv_heads = nkv;
    at.head_dim = hd;
    at.scale = 1.0f / std::sqrt(float(hd));
    at.q_ocm = o.qkv;
    at.out_ocm = o.attn;
    at.k_cache_ddr = ddr_.bus(layer_name(i, "kcache"));
    at.v_cache_ddr = ddr_.bus(layer_name(i, "vcache"));
    at.max_seq = opt_.max_seq;
    at.len_smem = dio_.len_smem;
    at.scratch_ocm = o.attn_scratch;
    at.scratch_bytes = o.attn_scratch_bytes;
    at.smem = kSmem;
    // o_proj's first chunks start inside the attention, once its last round's keys are in (a
    // prefetch before it slowed the attention by what it saved: the attention streams the KV
    // cache on every channel); they come in beside the last round's compute and the merge.
    GemvArgs op = gemv_args(layer_name(i, "o"), H, nq * hd, o.attn, o.o);
    at.after_last_fetch = [&] { emit_gemv_prefetch(b, cfg_, op); };
    op.prefetched = true;
    // The kernel reads the context length at run time: its floor grows per token.
    em.call(L + ".attention", "attention_decode", cost_attention_decode(cfg_, at, 0),
            [&] { emit_attention_decode(b, cfg_, at); }, cost_attention_decode(cfg_, at, 1));
    gemv(L + ".o_proj", layer_name(i, "o"), op);
    GemvArgs gu = gemv_args(layer_name(i, "gateup"), 2 * I, H, o.xn, o.gu);
    prefetch(gu);
    tl.post_norm(row, o.h, o.xn, o.o);
    gemv(L + ".gate_up", layer_name(i, "gateup"), gu);
    // The next layer's norm weights (this layer's are used), or the final norm's.
    if (i + 1 < t.num_hidden_layers) load(layer_name(i + 1, "norms"), layer_name(i + 1, "norms"), o.normw, norms_bytes);
    else load("final_norm.load", "final_norm", o.finalw, H * 2);
    GemvArgs down = gemv_args(layer_name(i, "down"), H, I, o.act, o.o);
    prefetch(down);
    k.ew(L + ".silu_mul", {.op = EwOp::silu_mul, .rows = 1, .cols = I, .a_ocm = o.gu, .b_ocm = o.gu + I * 2,
                           .out_ocm = o.act});
    gemv(L + ".down", layer_name(i, "down"), down);
    qkv = i + 1 < t.num_hidden_layers ? gemv_args(layer_name(i + 1, "qkv"), qkv_n, H, o.xn, o.qkv)
                                      : lm_args(0);
    prefetch(qkv);
    tl.residual(row, "mlp_residual", o.h, o.o);
    b.op("mark.end", {Name{L}});
  }
  k.norm("final_norm", {.kind = NormKind::rms, .rows = 1, .dim = H, .x_ocm = o.h, .y_ocm = o.xn, .w_ocm = o.finalw,
                        .eps = eps});
  const uint32_t logits = ddr_.bus("logits");
  b.op("mark.begin", {Name{"lm_head"}});
  for (uint32_t c = 0; c < lm_calls.size(); ++c) {
    const std::string mark = fmt::format("lm_head.c{}", c);
    const GemvArgs g = qkv;  // (each call prefetched by the one before it; call 0 by the last layer)
    call(mark, "gemv", cost_gemv(cfg_, g), [&] { emit_gemv_w4(b, cfg_, g); });
    if (opt_.fp16_channels) {
      if (c == 0) em.f16_gather(mark, ddr_, "embed", g, o.f16xs);  // (x's channels, once: before the next prefetch)
      em.f16_add(mark, {.n = g.n, .w_ddr = ddr_.bus(detail::f16w("embed")) + lm_calls[c].first * kF16RowBytes,
                        .xs_ocm = o.f16xs, .y_ocm = g.y_ocm, .y_stride = g.n * 2, .scratch_ocm = o.f16scr});
    }
    em.copy_async(mark + ".store", 0, sim::ocm_addr(g.y_ocm), logits + lm_calls[c].first * 2, g.n * 2);
    if (c + 1 < lm_calls.size()) {
      qkv = lm_args(c + 1);
      prefetch(qkv);
    }
  }
  em.copy_wait();
  b.op("mark.end", {Name{"lm_head"}});
  b.op("mark.end", {Name{"decode"}});
  b.op("halt");
  out.program = b.finish();
  out.logits_ddr = int64_t(ddr_.at("logits").offset);
  return out;
}

uint64_t Compiler::weight_bytes(bool image_program) const {
  uint64_t t = image_program ? ddr_.at("embed").bytes : 0;  // the LM head
  if (image_program && opt_.fp16_channels)
    t += ddr_.at(detail::f16sel("embed")).bytes + ddr_.at(detail::f16w("embed")).bytes;
  for (const DdrTensor& d : ddr_.tensors())
    if (d.layout == "f16" || d.layout == (image_program ? "gemm" : "gemv")) t += d.bytes;
  return t;
}

void Compiler::put(DdrWriter ddr, const std::string& name, const std::vector<uint8_t>& bytes) const {
  const DdrTensor& d = ddr_.at(name);
  if (bytes.size() != d.bytes)
    fail("compiler: '{}' packs to {} bytes but the layout reserved {}", name, bytes.size(), d.bytes);
  ddr.write(d.offset, bytes.data(), bytes.size());
}

void Compiler::put_weight(DdrWriter ddr, const std::string& name, const QuantTensor& q) const {
  put_weight(ddr, name, q, q.view());
}

QuantTensor Compiler::put_bundle_weight(DdrWriter ddr, const std::string& name, const QuantBundle& bundle,
                                        const std::string& tensor) const {
  const uint8_t* codes = nullptr;
  QuantTensor q = bundle.get_quant_mapped(tensor, codes);
  W4Weights w = q.view();
  w.codes = {codes, size_t(q.rows * q.row_stride())};
  put_weight(ddr, name, q, w);
  return q;
}

// w: q's codes, scales and zeros (q.view(), or its codes in the mapped bundle), packed at the
// split its layout entry records (DdrTensor::split), the one its calls read.
void Compiler::put_weight(DdrWriter ddr, const std::string& name, const QuantTensor& q, const W4Weights& w) const {
  const DdrTensor& t = ddr_.at(name);
  const bool gemm = t.layout.starts_with("gemm");  // "gemm", "gemm-pm"
  auto pack = [&](const W4Weights& v) {
    return gemm ? pack_gemm_weight(v, gemm_cfg_, t.split) : pack_gemv_weight(v, cfg_);
  };
  put(ddr, name, pack(w));
  if (!opt_.fp16_channels) return;
  if (q.fp16_cols.size() > kF16Cols)
    fail("compiler: weight '{}' keeps {} input channels in fp16 (the union over its fused tensors); the device takes "
         "at most {} per weight: quantise with fewer --fp16-channels",
         name, q.fp16_cols.size(), kF16Cols);
  put(ddr, detail::f16sel(name), pack(f16cols_selector(q.fp16_cols, q.cols).view()));
  put(ddr, detail::f16w(name), f16cols_rows(q.fp16_w, q.rows, q.fp16_cols.size()));
}

void Compiler::load_weights(const QuantBundle& bundle, DdrWriter ddr) const {
  if (!bundle.fp16_tensors().empty() && !opt_.fp16_channels)
    fail("{}: {} tensor(s) keep input channels in fp16 (mixed precision, first '{}') but the programs were compiled "
         "without them: compile with CompileOptions::fp16_channels (describe does so for a mixed bundle)",
         bundle.path(), bundle.fp16_tensors().size(), bundle.fp16_tensors().front());
  const TextConfig& t = model_.text;
  auto put_f16 = [&](const std::string& name, const std::vector<float>& v) { put(ddr, name, detail::f16_bytes(v)); };
  const QuantTensor embed = put_bundle_weight(ddr, "embed", bundle, kEmbedTokens);
  if (opt_.fp16_channels) put(ddr, "embed.f16onehot", f16cols_onehot(embed.fp16_cols, embed.cols));
  put_f16("final_norm", bundle.get_f32(kFinalNorm));
  for (int i = 0; i < t.num_hidden_layers; ++i) {
    std::vector<QuantTensor> qkv;
    for (const std::string& n : qkv_names(i)) qkv.push_back(bundle.get_quant(n));
    put_weight(ddr, layer_name(i, "qkv"), detail::concat_rows(qkv));
    put_bundle_weight(ddr, layer_name(i, "o"), bundle, text_layer_name(i, "self_attn.o_proj.weight"));
    std::vector<QuantTensor> gu;
    for (const std::string& n : gate_up_names(i)) gu.push_back(bundle.get_quant(n));
    put_weight(ddr, layer_name(i, "gateup"), detail::concat_rows(gu));
    put_bundle_weight(ddr, layer_name(i, "down"), bundle, text_layer_name(i, "mlp.down_proj.weight"));
    std::vector<float> norms = bundle.get_f32(text_layer_name(i, "input_layernorm.weight"));
    for (const char* leaf : {"post_attention_layernorm.weight", "self_attn.q_norm.weight", "self_attn.k_norm.weight"}) {
      std::vector<float> v = bundle.get_f32(text_layer_name(i, leaf));
      norms.insert(norms.end(), v.begin(), v.end());
    }
    put_f16(layer_name(i, "norms"), norms);
  }
  if (opt_.image) load_image_weights(bundle, ddr);
}

}  // namespace gpnpu::model
