// The image program: vision tower, DeepStack and final mergers, embedding lookup
// and image splice, the prefill layers with DeepStack additions, and the LM head on
// the last row. Activations stay in OCM in six regions reused phase by phase:
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
// plus the GEMM DMA buffers. Region sizes are the maxima over both phases; a machine
// whose OCM cannot hold them gets a clear error naming the shortfall.
//
// Tiling rules: the tower MLP runs in row chunks of at most 3 Dv / Iv * N rows (its
// fc1 output reuses the qkv space); the prefill MLP runs in column chunks of the
// gate|up projection (kGateUpChunk columns of each), each followed by its SiLU gate.
#include <cmath>

#include "kernels/attention.h"
#include "kernels/elementwise.h"
#include "kernels/embed.h"
#include "kernels/gemm.h"
#include "kernels/gemv.h"
#include "kernels/norm.h"
#include "kernels/rope.h"
#include "model/compiler.h"
#include "model/compiler_emit.h"
#include "model/ops.h"
#include "sim/memory_target.h"

namespace gpnpu::model {

using namespace kernels;
using detail::layer_name;

namespace {

constexpr uint32_t kGateUpChunk = 1536;  // columns of gate (and of up) per prefill MLP chunk (fits qc-u at S = 128)

uint32_t gate_up_chunk(uint32_t inter) {
  uint32_t cw = std::min(inter, kGateUpChunk);
  while (inter % cw) --cw;
  return cw;
}

std::string vname(int b, const char* what) { return fmt::format("V{}.{}", b, what); }
std::string mname(int j, const char* what) { return j < 0 ? fmt::format("Mf.{}", what) : fmt::format("M{}.{}", j, what); }

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

void Compiler::plan_image_ddr() {
  const Dims d(model_);
  const VisionConfig& v = model_.vision;
  const sim::Config& c = cfg_;
  const uint32_t P = opt_.max_patches;
  ddr_.add("V.patch", gemm_weight_bytes(c, d.Dv, d.pd), "gemm");
  ddr_.add("V.patch_bias", uint64_t(d.Dv) * 2, "f16");
  for (int b = 0; b < v.depth; ++b) {
    ddr_.add(vname(b, "qkv"), gemm_weight_bytes(c, 3 * d.Dv, d.Dv), "gemm");
    ddr_.add(vname(b, "proj"), gemm_weight_bytes(c, d.Dv, d.Dv), "gemm");
    ddr_.add(vname(b, "fc1"), gemm_weight_bytes(c, d.Iv, d.Dv), "gemm");
    ddr_.add(vname(b, "fc2"), gemm_weight_bytes(c, d.Dv, d.Iv), "gemm");
    ddr_.add(vname(b, "vec"), uint64_t(d.vision_vec()) * 2, "f16");
  }
  const int taps = int(v.deepstack_visual_indexes.size());
  for (int j = -1; j < taps; ++j) {
    ddr_.add(mname(j, "fc1"), gemm_weight_bytes(c, d.Md, d.Md), "gemm");
    ddr_.add(mname(j, "fc2"), gemm_weight_bytes(c, d.H, d.Md), "gemm");
    ddr_.add(mname(j, "vec"), uint64_t(d.merger_vec(j >= 0)) * 2, "f16");
    ddr_.add(j < 0 ? "act.img" : fmt::format("act.ds{}", j), uint64_t(P / 4) * d.H * 2, "act");
  }
  const uint32_t cw = gate_up_chunk(d.I);
  for (int i = 0; i < model_.text.num_hidden_layers; ++i) {
    ddr_.add(layer_name(i, "qkv.gemm"), gemm_weight_bytes(c, d.qkv_n, d.H), "gemm");
    ddr_.add(layer_name(i, "o.gemm"), gemm_weight_bytes(c, d.H, d.nq * d.hd), "gemm");
    for (uint32_t k = 0; k < d.I / cw; ++k)
      ddr_.add(layer_name(i, fmt::format("gu{}.gemm", k).c_str()), gemm_weight_bytes(c, 2 * cw, d.H), "gemm");
    ddr_.add(layer_name(i, "down.gemm"), gemm_weight_bytes(c, d.H, d.I), "gemm");
  }
  ddr_.add("in.patches", uint64_t(P) * d.pd * 2, "input");
  ddr_.add("in.trope", 2ull * opt_.max_seq * d.hd * 4, "input");
  ddr_.add("const.vpos", uint64_t(P) * d.Dv * 2, "const");
  ddr_.add("const.vrope", 2ull * P * d.hdv * 4, "const");
  iio_.patches_ddr = ddr_.bus("in.patches");
  iio_.trope_ddr = ddr_.bus("in.trope");
}

void Compiler::load_image_weights(const QuantBundle& bundle, sim::MemoryTarget& ddr) const {
  const Dims d(model_);
  const VisionConfig& v = model_.vision;
  auto put = [&](const std::string& name, const std::vector<uint8_t>& bytes) {
    const DdrTensor& t = ddr_.at(name);
    if (bytes.size() != t.bytes)
      fail("compiler: '{}' packs to {} bytes but the layout reserved {}", name, bytes.size(), t.bytes);
    ddr.write(t.offset, bytes.data(), bytes.size());
  };
  auto gemm = [&](const std::string& name, const QuantTensor& q) { put(name, pack_gemm_weight(q, cfg_)); };
  auto vec = [&](const std::string& name, const std::vector<std::string>& parts) {
    std::vector<float> all;
    for (const std::string& p : parts) {
      std::vector<float> x = bundle.get_f32(p);
      all.insert(all.end(), x.begin(), x.end());
    }
    put(name, detail::f16_bytes(all));
  };
  gemm("V.patch", bundle.get_quant(kPatchEmbedWeight));
  vec("V.patch_bias", {kPatchEmbedBias});
  for (int b = 0; b < v.depth; ++b) {
    gemm(vname(b, "qkv"), bundle.get_quant(vision_block_name(b, "attn.qkv.weight")));
    gemm(vname(b, "proj"), bundle.get_quant(vision_block_name(b, "attn.proj.weight")));
    gemm(vname(b, "fc1"), bundle.get_quant(vision_block_name(b, "mlp.linear_fc1.weight")));
    gemm(vname(b, "fc2"), bundle.get_quant(vision_block_name(b, "mlp.linear_fc2.weight")));
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
    gemm(mname(j, "fc1"), bundle.get_quant(leaf("linear_fc1.weight")));
    gemm(mname(j, "fc2"), bundle.get_quant(leaf("linear_fc2.weight")));
    vec(mname(j, "vec"), {leaf("norm.weight"), leaf("norm.bias"), leaf("linear_fc1.bias"), leaf("linear_fc2.bias")});
  }
  const uint32_t cw = gate_up_chunk(d.I);
  for (int i = 0; i < model_.text.num_hidden_layers; ++i) {
    std::vector<QuantTensor> qkv;
    for (const std::string& n : qkv_names(i)) qkv.push_back(bundle.get_quant(n));
    gemm(layer_name(i, "qkv.gemm"), detail::concat_rows(qkv));
    gemm(layer_name(i, "o.gemm"), bundle.get_quant(text_layer_name(i, "self_attn.o_proj.weight")));
    QuantTensor gate = bundle.get_quant(gate_up_names(i)[0]), up = bundle.get_quant(gate_up_names(i)[1]);
    for (uint32_t k = 0; k < d.I / cw; ++k)
      gemm(layer_name(i, fmt::format("gu{}.gemm", k).c_str()),
           detail::concat_rows({detail::slice_rows(gate, k * cw, cw), detail::slice_rows(up, k * cw, cw)}));
    gemm(layer_name(i, "down.gemm"), bundle.get_quant(text_layer_name(i, "mlp.down_proj.weight")));
  }
}

void Compiler::load_image_constants(const QuantBundle& bundle, const ImageShape& s, sim::MemoryTarget& ddr) const {
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
  rope_tables_2d(rq, int(d.hdv), 10000.0f, cos_t, sin_t);
  uint64_t off = ddr_.at("const.vrope").offset;
  ddr.write(off, cos_t.data(), cos_t.size() * 4);
  ddr.write(off + uint64_t(opt_.max_patches) * d.hdv * 4, sin_t.data(), sin_t.size() * 4);
}

CompiledProgram Compiler::image_program(const ImageShape& s) const {
  if (!opt_.image) fail("compiler: built without the image path (CompileOptions::image = false)");
  const Dims d(model_);
  const VisionConfig& vc = model_.vision;
  const TextConfig& tc = model_.text;
  const uint32_t N = uint32_t(s.grid_h * s.grid_w), S = uint32_t(s.seq_len), Nt = N / 4;
  if (s.grid_h % 2 || s.grid_w % 2 || N == 0)
    fail("compiler: image grid {}x{} must have even sides (2x2 merge windows)", s.grid_h, s.grid_w);
  if (N > opt_.max_patches) fail("compiler: image of {} patches exceeds max_patches = {}", N, opt_.max_patches);
  if (S > opt_.max_seq) fail("compiler: prompt of {} tokens exceeds max_seq = {}", S, opt_.max_seq);
  if (iio_.ids_smem + uint64_t(S) * 4 > cfg_.smem_bytes)
    fail("compiler: a prompt of {} tokens needs {} bytes of scalar memory for its ids; raise smem_bytes", S,
         iio_.ids_smem + uint64_t(S) * 4);
  if (s.image_start < 0 || uint32_t(s.image_start) + Nt > S)
    fail("compiler: {} image tokens from row {} do not fit a prompt of {} tokens", Nt, s.image_start, S);
  const uint32_t cw = gate_up_chunk(d.I);
  const uint32_t rcv = std::max<uint32_t>(1, std::min<uint32_t>(N, 3 * d.Dv * N / d.Iv));  // tower MLP rows per chunk

  // ---- OCM regions (bytes) ----
  auto mx = [](std::initializer_list<uint64_t> v) { return *std::max_element(v.begin(), v.end()); };
  const uint64_t rH = mx({uint64_t(N) * d.Dv, uint64_t(S) * d.H}) * 2;
  const uint64_t rXN = mx({uint64_t(N) * d.Dv, uint64_t(S) * d.H, uint64_t(S) * d.nq * d.hd}) * 2;
  const uint64_t rBIG = mx({uint64_t(N) * 3 * d.Dv, uint64_t(N) * d.pd, uint64_t(rcv) * d.Iv,
                            uint64_t(S) * (d.qkv_n + d.nkv * d.hd), uint64_t(S) * d.I, uint64_t(S) * d.nq * d.hd, d.V}) * 2;
  const uint64_t gemv_min = uint64_t(cfg_.dma_channels) * (uint64_t(cfg_.npe()) * kGemvColumnBlockBytes + 4);
  const uint64_t rTMP = std::max(mx({uint64_t(N) * d.Dv, uint64_t(Nt) * d.H, uint64_t(S) * (d.nq + d.nkv) * d.hd,
                                     uint64_t(S) * 2 * cw, uint64_t(S) * d.H}) * 2, gemv_min);
  const uint64_t rROPE = mx({2ull * N * d.hdv, 2ull * S * d.hd}) * 4;
  const uint64_t rVEC = mx({d.vision_vec(), d.merger_vec(true), d.merger_vec(false), d.text_vec()}) * 2;
  uint64_t rGEMM = 0;
  auto need_gemm = [&](uint32_t n, uint32_t k) { rGEMM = std::max<uint64_t>(rGEMM, gemm_scratch_bytes(cfg_, n, k)); };
  need_gemm(d.Dv, d.pd);
  need_gemm(3 * d.Dv, d.Dv);
  need_gemm(d.Dv, d.Dv);
  need_gemm(d.Iv, d.Dv);
  need_gemm(d.Dv, d.Iv);
  need_gemm(d.Md, d.Md);
  need_gemm(d.H, d.Md);
  need_gemm(d.qkv_n, d.H);
  need_gemm(d.H, d.nq * d.hd);
  need_gemm(2 * cw, d.H);
  need_gemm(d.H, d.I);
  detail::OcmAlloc a(cfg_.ocm_bytes);
  const uint32_t H = a.take(rH, "residual stream"), XN = a.take(rXN, "normed rows"), BIG = a.take(rBIG, "qkv / MLP");
  const uint32_t TMP = a.take(rTMP, "temporaries"), ROPE = a.take(rROPE, "rotary tables"), VEC = a.take(rVEC, "vectors");
  const uint32_t NSCR = a.take(norm_scratch_bytes(cfg_), "norm scratch");
  const uint32_t ESCR = a.take(embed_scratch_bytes(d.H), "embed scratch");
  const uint32_t GEMM = a.take(rGEMM, "GEMM DMA buffers");
  const uint32_t kSmem = detail::Emitter::kSmem;

  kernels::Builder b;
  CompiledProgram out;
  detail::Emitter em(b, cfg_, out.calls);
  auto ocm = [](uint32_t off) { return sim::ocm_addr(off); };

  // prefetch(w, n, k) names the GEMM after the next gemm() call: that call starts the DMA
  // of w's first tile-0 units in its last tile (GemmArgs::next; the kernels between the
  // two GEMMs do not touch the GEMM scratch), and the GEMM on w runs with prefetched.
  std::string prefetched_w, next_w;
  GemmArgs next_g;
  auto prefetch = [&](const std::string& w, uint32_t n, uint32_t k) {
    next_g = GemmArgs{};
    next_g.n = n;
    next_g.k = k;
    next_g.w_ddr = ddr_.bus(w);
    next_g.scratch_ocm = GEMM;
    next_g.scratch_bytes = uint32_t(rGEMM);
    next_g.smem = kSmem;
    next_w = w;
  };
  auto gemm = [&](const std::string& mark, const std::string& w, uint32_t m, uint32_t n, uint32_t k, uint32_t x,
                  uint32_t x_stride, uint32_t y, uint32_t y_stride, uint32_t bias) {
    if (!prefetched_w.empty() && prefetched_w != w)
      fail("compiler: internal: the prefetch of '{}' is followed by the GEMM of '{}'", prefetched_w, w);
    GemmArgs g;
    g.prefetched = prefetched_w == w;
    prefetched_w = next_w;
    g.next = next_w.empty() ? nullptr : &next_g;
    next_w.clear();
    g.m = m;
    g.n = n;
    g.k = k;
    g.w_ddr = ddr_.bus(w);
    g.x_ocm = x;
    g.x_stride = x_stride;
    g.y_ocm = y;
    g.y_stride = y_stride;
    g.bias = bias == UINT32_MAX ? GemmBias::none : GemmBias::f16;
    g.bias_ocm = bias == UINT32_MAX ? 0 : bias;
    g.scratch_ocm = GEMM;
    g.scratch_bytes = uint32_t(rGEMM);
    g.smem = kSmem;
    em.call(mark, "gemm", cost_gemm(cfg_, g), [&] { emit_gemm_w4(b, cfg_, g); });
  };
  auto norm = [&](const std::string& mark, NormKind kind, uint32_t rows, uint32_t dim, uint32_t x, uint32_t y,
                  uint32_t w, uint32_t bias, float eps) {
    NormArgs n;
    n.kind = kind;
    n.rows = rows;
    n.dim = dim;
    n.x_ocm = x;
    n.y_ocm = y;
    n.w_ocm = w;
    n.b_ocm = bias;
    n.eps = eps;
    n.scratch_ocm = NSCR;
    n.scratch_bytes = norm_scratch_bytes(cfg_);
    em.call(mark, "norm", cost_norm(cfg_, n), [&] { emit_norm(b, cfg_, n); });
  };
  auto ew = [&](const std::string& mark, EwOp op, uint32_t rows, uint32_t cols, uint32_t x, uint32_t xs, uint32_t y,
                uint32_t ys, uint32_t o, uint32_t os) {
    EwArgs e;
    e.op = op;
    e.rows = rows;
    e.cols = cols;
    e.a_ocm = x;
    e.a_stride = xs;
    e.b_ocm = y;
    e.b_stride = ys;
    e.out_ocm = o;
    e.out_stride = os;
    em.call(mark, "elementwise", cost_elementwise(cfg_, e), [&] { emit_elementwise(b, cfg_, e); });
  };
  auto rope = [&](const std::string& mark, uint32_t rows, uint32_t heads, uint32_t hd, uint32_t x, uint32_t stride) {
    RopeArgs r;
    r.rows = rows;
    r.heads = heads;
    r.head_dim = hd;
    r.x_ocm = r.out_ocm = x;
    r.x_row_stride = r.out_row_stride = stride;
    r.cos_ocm = ROPE;
    r.sin_ocm = ROPE + rows * hd * 4;
    r.tab_row_stride = hd * 4;
    r.tab_f32 = true;
    em.call(mark, "rope", cost_rope(cfg_, r), [&] { emit_rope(b, cfg_, r); });
  };
  auto attention = [&](const std::string& mark, uint32_t qh, uint32_t kvh, uint32_t hd, uint32_t seq, bool causal,
                       uint32_t q, uint32_t q_rs, uint32_t k, uint32_t v, uint32_t kv_rs, uint32_t o, uint32_t o_rs,
                       uint32_t scratch, uint64_t scratch_bytes) {
    OcmAttnArgs at;
    at.q_heads = qh;
    at.kv_heads = kvh;
    at.head_dim = hd;
    at.seq = seq;
    at.causal = causal;
    at.scale = 1.0f / std::sqrt(float(hd));
    at.q_ocm = q;
    at.q_row_stride = q_rs;
    at.q_head_stride = hd * 2;
    at.k_ocm = k;
    at.v_ocm = v;
    at.kv_row_stride = kv_rs;
    at.out_ocm = o;
    at.out_row_stride = o_rs;
    at.out_head_stride = hd * 2;
    at.scratch_ocm = scratch;
    at.scratch_bytes = uint32_t(scratch_bytes);
    at.smem = kSmem;
    em.call(mark, "attention", cost_attention_ocm(cfg_, at), [&] { emit_attention_ocm(b, cfg_, at); });
  };
  constexpr uint32_t kNone = UINT32_MAX;
  const float veps = float(vc.layer_norm_eps), teps = float(tc.rms_norm_eps);

  // ================= vision tower =================
  b.op("mark.begin", {Name{"vision_tower"}});
  em.copy("V.load_patches", iio_.patches_ddr, ocm(BIG), N * d.pd * 2);
  em.copy("V.load_vectors", ddr_.bus("V.patch_bias"), ocm(VEC), d.Dv * 2);
  prefetch(vname(0, "qkv"), 3 * d.Dv, d.Dv);
  gemm("V.patch_embed", "V.patch", N, d.Dv, d.pd, BIG, d.pd * 2, H, d.Dv * 2, VEC);
  em.copy("V.load_pos", ddr_.bus("const.vpos"), ocm(XN), N * d.Dv * 2);
  ew("V.pos_add", EwOp::add, N, d.Dv, H, 0, XN, 0, H, 0);
  // Rotary tables: cos [N][hdv] then sin [N][hdv], as the rope calls expect.
  em.copy("V.load_rope", ddr_.bus("const.vrope"), ocm(ROPE), N * d.hdv * 4);
  em.copy("V.load_rope_sin", ddr_.bus("const.vrope") + opt_.max_patches * d.hdv * 4, ocm(ROPE + N * d.hdv * 4),
          N * d.hdv * 4);
  const uint32_t vv_n1w = VEC, vv_n1b = VEC + d.Dv * 2, vv_n2w = VEC + 2 * d.Dv * 2, vv_n2b = VEC + 3 * d.Dv * 2;
  const uint32_t vv_qkvb = VEC + 4 * d.Dv * 2, vv_projb = vv_qkvb + 3 * d.Dv * 2, vv_fc1b = vv_projb + d.Dv * 2,
                 vv_fc2b = vv_fc1b + d.Iv * 2;
  // The first GEMM after block blk's MLP (or after its merger j0 - 1): the next tap's
  // merger fc1, else the next block's qkv, else the final merger's fc1.
  auto prefetch_after_block = [&](int blk, int j0) {
    const auto& taps = vc.deepstack_visual_indexes;
    for (int j = j0; j < int(taps.size()); ++j)
      if (taps[j] == blk) return prefetch(mname(j, "fc1"), d.Md, d.Md);
    if (blk + 1 < vc.depth) return prefetch(vname(blk + 1, "qkv"), 3 * d.Dv, d.Dv);
    prefetch(mname(-1, "fc1"), d.Md, d.Md);
  };
  for (int blk = 0; blk < vc.depth; ++blk) {
    const std::string B = fmt::format("V{}", blk);
    b.op("mark.begin", {Name{B}});
    em.copy(B + ".load_vectors", ddr_.bus(vname(blk, "vec")), ocm(VEC), d.vision_vec() * 2);
    norm(B + ".norm1", NormKind::layer, N, d.Dv, H, XN, vv_n1w, vv_n1b, veps);
    prefetch(vname(blk, "proj"), d.Dv, d.Dv);
    gemm(B + ".qkv", vname(blk, "qkv"), N, 3 * d.Dv, d.Dv, XN, d.Dv * 2, BIG, 3 * d.Dv * 2, vv_qkvb);
    rope(B + ".q_rope", N, d.hv, d.hdv, BIG, 3 * d.Dv * 2);
    rope(B + ".k_rope", N, d.hv, d.hdv, BIG + d.Dv * 2, 3 * d.Dv * 2);
    attention(B + ".attention", d.hv, d.hv, d.hdv, N, false, BIG, 3 * d.Dv * 2, BIG + d.Dv * 2, BIG + 2 * d.Dv * 2,
              3 * d.Dv * 2, XN, d.Dv * 2, TMP, rTMP);
    prefetch(vname(blk, "fc1"), d.Iv, d.Dv);
    gemm(B + ".proj", vname(blk, "proj"), N, d.Dv, d.Dv, XN, d.Dv * 2, TMP, d.Dv * 2, vv_projb);
    ew(B + ".attn_residual", EwOp::add, N, d.Dv, H, 0, TMP, 0, H, 0);
    norm(B + ".norm2", NormKind::layer, N, d.Dv, H, XN, vv_n2w, vv_n2b, veps);
    for (uint32_t r0 = 0; r0 < N; r0 += rcv) {
      const uint32_t rows = std::min(rcv, N - r0);
      const std::string C = fmt::format("{}.mlp{}", B, r0 / rcv);
      prefetch(vname(blk, "fc2"), d.Dv, d.Iv);
      gemm(C + ".fc1", vname(blk, "fc1"), rows, d.Iv, d.Dv, XN + r0 * d.Dv * 2, d.Dv * 2, BIG, d.Iv * 2, vv_fc1b);
      ew(C + ".gelu", EwOp::gelu_tanh, rows, d.Iv, BIG, 0, BIG, 0, BIG, 0);
      if (r0 + rcv < N) prefetch(vname(blk, "fc1"), d.Iv, d.Dv);
      else prefetch_after_block(blk, 0);
      gemm(C + ".fc2", vname(blk, "fc2"), rows, d.Dv, d.Iv, BIG, d.Iv * 2, TMP + r0 * d.Dv * 2, d.Dv * 2, vv_fc2b);
    }
    ew(B + ".mlp_residual", EwOp::add, N, d.Dv, H, 0, TMP, 0, H, 0);
    b.op("mark.end", {Name{B}});
    // DeepStack tap: the block output through merger j, kept in DDR for the prefill.
    const auto& taps = vc.deepstack_visual_indexes;
    for (int j = 0; j < int(taps.size()); ++j) {
      if (taps[j] != blk) continue;
      const std::string M = fmt::format("M{}", j);
      b.op("mark.begin", {Name{M}});
      em.copy(M + ".load_vectors", ddr_.bus(mname(j, "vec")), ocm(VEC), d.merger_vec(true) * 2);
      norm(M + ".norm", NormKind::layer, Nt, d.Md, H, XN, VEC, VEC + d.Md * 2, veps);
      prefetch(mname(j, "fc2"), d.H, d.Md);
      gemm(M + ".fc1", mname(j, "fc1"), Nt, d.Md, d.Md, XN, d.Md * 2, BIG, d.Md * 2, VEC + 2 * d.Md * 2);
      ew(M + ".gelu", EwOp::gelu_erf, Nt, d.Md, BIG, 0, BIG, 0, BIG, 0);
      prefetch_after_block(blk, j + 1);
      gemm(M + ".fc2", mname(j, "fc2"), Nt, d.H, d.Md, BIG, d.Md * 2, TMP, d.H * 2, VEC + 3 * d.Md * 2);
      em.copy(M + ".store", ocm(TMP), ddr_.bus(fmt::format("act.ds{}", j)), Nt * d.H * 2);
      b.op("mark.end", {Name{M}});
    }
  }
  {
    // Final merger: LayerNorm per patch, then the 2x2 shuffle (a no-op in merge-window order).
    b.op("mark.begin", {Name{"Mf"}});
    em.copy("Mf.load_vectors", ddr_.bus(mname(-1, "vec")), ocm(VEC), d.merger_vec(false) * 2);
    norm("Mf.norm", NormKind::layer, N, d.Dv, H, XN, VEC, VEC + d.Dv * 2, veps);
    prefetch(mname(-1, "fc2"), d.H, d.Md);
    gemm("Mf.fc1", mname(-1, "fc1"), Nt, d.Md, d.Md, XN, d.Md * 2, BIG, d.Md * 2, VEC + 2 * d.Dv * 2);
    ew("Mf.gelu", EwOp::gelu_erf, Nt, d.Md, BIG, 0, BIG, 0, BIG, 0);
    prefetch(layer_name(0, "qkv.gemm"), d.qkv_n, d.H);
    gemm("Mf.fc2", mname(-1, "fc2"), Nt, d.H, d.Md, BIG, d.Md * 2, TMP, d.H * 2, VEC + 2 * d.Dv * 2 + d.Md * 2);
    em.copy("Mf.store", ocm(TMP), ddr_.bus("act.img"), Nt * d.H * 2);
    b.op("mark.end", {Name{"Mf"}});
  }
  b.op("mark.end", {Name{"vision_tower"}});

  // ================= prefill =================
  b.op("mark.begin", {Name{"prefill"}});
  // Embeddings of the text rows (the image rows are spliced in below).
  for (auto [r0, rows] : {std::pair<uint32_t, uint32_t>{0, uint32_t(s.image_start)},
                          {uint32_t(s.image_start) + Nt, S - uint32_t(s.image_start) - Nt}}) {
    if (rows == 0) continue;
    EmbedArgs e;
    e.vocab = d.V;
    e.dim = d.H;
    e.table_ddr = ddr_.bus("embed");
    e.rows = rows;
    e.ids_smem = iio_.ids_smem + r0 * 4;
    e.out_ocm = H + r0 * d.H * 2;
    e.scratch_ocm = ESCR;
    e.smem = kSmem;
    em.call(r0 ? "embed.after_image" : "embed", "embed", cost_embed(cfg_, e), [&] { emit_embed(b, cfg_, e); });
  }
  em.copy("splice", ddr_.bus("act.img"), ocm(H + uint32_t(s.image_start) * d.H * 2), Nt * d.H * 2);
  em.copy("load_rope", iio_.trope_ddr, ocm(ROPE), S * d.hd * 4);
  em.copy("load_rope_sin", iio_.trope_ddr + opt_.max_seq * d.hd * 4, ocm(ROPE + S * d.hd * 4), S * d.hd * 4);
  const uint32_t qd = d.nq * d.hd * 2, kd = d.nkv * d.hd * 2;  // row bytes of q and of k (= v)
  // Dense q | k in TMP; dense v in BIG after the qkv rows (the attention staging
  // reuses the qkv rows, dead once split).
  const uint32_t Q = TMP, K = TMP + S * qd, Vv = BIG + S * d.qkv_n * 2;
  const uint32_t w_in = VEC, w_post = VEC + d.H * 2, w_q = VEC + 4 * d.H, w_k = w_q + d.hd * 2;
  for (int i = 0; i < tc.num_hidden_layers; ++i) {
    const std::string L = fmt::format("P{}", i);
    b.op("mark.begin", {Name{L}});
    em.copy(L + ".load_norms", ddr_.bus(layer_name(i, "norms")), ocm(VEC), d.text_vec() * 2);
    norm(L + ".input_norm", NormKind::rms, S, d.H, H, XN, w_in, 0, teps);
    prefetch(layer_name(i, "o.gemm"), d.H, d.nq * d.hd);
    gemm(L + ".qkv", layer_name(i, "qkv.gemm"), S, d.qkv_n, d.H, XN, d.H * 2, BIG, d.qkv_n * 2, kNone);
    // Dense q, k and v (the per-head norms want dense rows): three strided OCM copies.
    em.copy(L + ".split_q", ocm(BIG), ocm(Q), qd, S, d.qkv_n * 2, qd);
    em.copy(L + ".split_k", ocm(BIG + qd), ocm(K), kd, S, d.qkv_n * 2, kd);
    em.copy(L + ".split_v", ocm(BIG + qd + kd), ocm(Vv), kd, S, d.qkv_n * 2, kd);
    {
      HeadNormArgs qn;
      qn.rows = S;
      qn.heads = d.nq;
      qn.head_dim = d.hd;
      qn.x_ocm = qn.y_ocm = Q;
      qn.w_ocm = w_q;
      qn.eps = teps;
      em.call(L + ".q_norm", "head_norm", cost_head_norm(cfg_, qn), [&] { emit_head_norm(b, cfg_, qn); });
      HeadNormArgs kn = qn;
      kn.heads = d.nkv;
      kn.x_ocm = kn.y_ocm = K;
      kn.w_ocm = w_k;
      em.call(L + ".k_norm", "head_norm", cost_head_norm(cfg_, kn), [&] { emit_head_norm(b, cfg_, kn); });
    }
    rope(L + ".q_rope", S, d.nq, d.hd, Q, qd);
    rope(L + ".k_rope", S, d.nkv, d.hd, K, kd);
    {
      KvWriteArgs kv;
      kv.kv_heads = d.nkv;
      kv.head_dim = d.hd;
      kv.rows = S;
      kv.k_ocm = K;
      kv.v_ocm = Vv;
      kv.row_stride = kd;
      kv.k_cache_ddr = ddr_.bus(layer_name(i, "kcache"));
      kv.v_cache_ddr = ddr_.bus(layer_name(i, "vcache"));
      kv.max_seq = opt_.max_seq;
      kv.pos_smem = iio_.slot0_smem;
      kv.smem = kSmem;
      em.call(L + ".kv_write", "kv_write", cost_kv_write(cfg_, kv), [&] { emit_kv_write(b, cfg_, kv); });
    }
    attention(L + ".attention", d.nq, d.nkv, d.hd, S, true, Q, qd, K, Vv, kd, XN, qd, BIG, rBIG);
    prefetch(layer_name(i, "gu0.gemm"), 2 * cw, d.H);
    gemm(L + ".o_proj", layer_name(i, "o.gemm"), S, d.H, d.nq * d.hd, XN, qd, TMP, d.H * 2, kNone);
    ew(L + ".attn_residual", EwOp::add, S, d.H, H, 0, TMP, 0, H, 0);
    norm(L + ".post_norm", NormKind::rms, S, d.H, H, XN, w_post, 0, teps);
    for (uint32_t c = 0; c < d.I / cw; ++c) {
      const std::string C = fmt::format("{}.mlp{}", L, c);
      if (c + 1 < d.I / cw) prefetch(layer_name(i, fmt::format("gu{}.gemm", c + 1).c_str()), 2 * cw, d.H);
      else prefetch(layer_name(i, "down.gemm"), d.H, d.I);
      gemm(C + ".gate_up", layer_name(i, fmt::format("gu{}.gemm", c).c_str()), S, 2 * cw, d.H, XN, d.H * 2, TMP,
           2 * cw * 2, kNone);
      ew(C + ".silu_mul", EwOp::silu_mul, S, cw, TMP, 2 * cw * 2, TMP + cw * 2, 2 * cw * 2, BIG + c * cw * 2, d.I * 2);
    }
    if (i + 1 < tc.num_hidden_layers) prefetch(layer_name(i + 1, "qkv.gemm"), d.qkv_n, d.H);
    gemm(L + ".down", layer_name(i, "down.gemm"), S, d.H, d.I, BIG, d.I * 2, TMP, d.H * 2, kNone);
    ew(L + ".mlp_residual", EwOp::add, S, d.H, H, 0, TMP, 0, H, 0);
    if (i < int(vc.deepstack_visual_indexes.size())) {
      em.copy(L + ".load_deepstack", ddr_.bus(fmt::format("act.ds{}", i)), ocm(TMP), Nt * d.H * 2);
      const uint32_t rows_at = H + uint32_t(s.image_start) * d.H * 2;
      ew(L + ".deepstack_add", EwOp::add, Nt, d.H, rows_at, 0, TMP, 0, rows_at, 0);
    }
    b.op("mark.end", {Name{L}});
  }
  b.op("mark.end", {Name{"prefill"}});

  // ================= head (last row) =================
  b.op("mark.begin", {Name{"head"}});
  em.copy("final_norm.load", ddr_.bus("final_norm"), ocm(VEC), d.H * 2);
  norm("final_norm", NormKind::rms, 1, d.H, H + (S - 1) * d.H * 2, XN, VEC, 0, teps);
  {
    GemvArgs g;
    g.n = d.V;
    g.k = d.H;
    g.w_ddr = ddr_.bus("embed");
    g.x_ocm = XN;
    g.y_ocm = BIG;
    g.scratch_ocm = TMP;
    g.scratch_bytes = uint32_t(rTMP);
    g.smem = kSmem;
    em.call("lm_head", "gemv", cost_gemv(cfg_, g), [&] { emit_gemv_w4(b, cfg_, g); });
  }
  b.op("mark.end", {Name{"head"}});
  b.op("halt");
  out.program = b.finish();
  out.logits_ocm = BIG;
  return out;
}

}  // namespace gpnpu::model
