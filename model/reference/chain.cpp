// The chain (see chain.h for the contract and the intermediate names).
#include "model/reference/chain.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "isa/error.h"
#include "isa/fp16.h"
#include "model/inputs/prompt.h"
#include "model/checkpoint/quant.h"
#include "model/checkpoint/safetensors.h"

namespace gpnpu::model {

using ops::Matrix;

// ---- weight sources ---------------------------------------------------------------------

std::vector<float>& MemoryWeights::at(const std::string& name) {
  auto it = t_.find(name);
  if (it == t_.end()) fail("{}: no tensor {}", describe(), name);
  return it->second;
}

std::vector<float> MemoryWeights::vector(const std::string& name, int64_t numel) const {
  auto it = t_.find(name);
  if (it == t_.end()) fail("{}: tensor {} is missing", describe(), name);
  if (int64_t(it->second.size()) != numel)
    fail("{}: tensor {} has {} elements, the config needs {}", describe(), name, it->second.size(), numel);
  return it->second;
}

Matrix MemoryWeights::matrix(const std::string& name, int64_t rows, int64_t cols) const {
  auto it = t_.find(name);
  if (it == t_.end()) fail("{}: tensor {} is missing", describe(), name);
  if (int64_t(it->second.size()) != rows * cols)
    fail("{}: tensor {} has {} elements, the config needs [{}, {}]", describe(), name,
         it->second.size(), rows, cols);
  return Matrix::dense(name, rows, cols, it->second.data());
}

namespace {

class CheckpointWeights : public WeightSource {
 public:
  explicit CheckpointWeights(const Checkpoint& ck) : ck_(ck) {}
  std::string describe() const override { return "checkpoint " + ck_.path(); }
  bool has(const std::string& name) const override { return ck_.has(name); }
  const TensorView& view(const std::string& name, int64_t numel) const {
    if (!ck_.has(name)) fail("{}: tensor {} is missing", describe(), name);
    const TensorView& t = ck_.get(name);
    if (t.numel() != numel)
      fail("{}: tensor {} {} has {} elements, the config needs {}", describe(), name,
           shape_str(t.shape), t.numel(), numel);
    if (t.dtype != DType::BF16 && t.dtype != DType::F16 && t.dtype != DType::F32)
      fail("{}: tensor {} is {}, a float checkpoint needs BF16, F16 or F32", describe(), name,
           dtype_name(t.dtype));
    return t;
  }
  std::vector<float> vector(const std::string& name, int64_t numel) const override {
    return view(name, numel).to_f32();
  }
  Matrix matrix(const std::string& name, int64_t rows, int64_t cols) const override {
    const TensorView* t = &view(name, rows * cols);
    Matrix m;
    m.name = name;
    m.rows = rows;
    m.cols = cols;
    if (t->dtype == DType::F32 && reinterpret_cast<uintptr_t>(t->data) % alignof(float) == 0) {
      m.f32 = reinterpret_cast<const float*>(t->data);
      return m;
    }
    m.load = [t, cols](int64_t r0, int64_t n, float* dst) {
      const int64_t count = n * cols, first = r0 * cols;
      if (t->dtype == DType::BF16) {
        // bf16 -> fp32 is a 16-bit shift; staged through a small buffer so the loop
        // vectorises whatever the alignment of the mapping.
        // (fixed trip counts: GCC's -O2 cost model vectorises only those).
        const uint8_t* p = t->data + first * 2;
        constexpr int64_t kChunk = 1024;
        uint16_t buf[kChunk];
        uint32_t out[kChunk];
        int64_t i0 = 0;
        for (; i0 + kChunk <= count; i0 += kChunk) {
          std::memcpy(buf, p + 2 * i0, sizeof buf);
          for (int64_t i = 0; i < kChunk; ++i) out[i] = uint32_t(buf[i]) << 16;
          std::memcpy(dst + i0, out, sizeof out);
        }
        for (; i0 < count; ++i0) {
          uint16_t b;
          std::memcpy(&b, p + 2 * i0, 2);
          dst[i0] = bits_to_f32(uint32_t(b) << 16);
        }
      } else if (t->dtype == DType::F16) {
        const uint8_t* p = t->data + first * 2;
        for (int64_t i = 0; i < count; ++i) {
          uint16_t b;
          std::memcpy(&b, p + 2 * i, 2);
          dst[i] = f16_to_f32(b);
        }
      } else {
        std::memcpy(dst, t->data + first * 4, size_t(count) * 4);
      }
    };
    return m;
  }

 private:
  const Checkpoint& ck_;
};

// w = float(q - z) * s, exactly dequantise_row() of model/checkpoint/quant.h, written so that whole
// 128-column blocks vectorise (decode reads every weight once per token).
// The codes are read from `codes` ([rows][row_stride()] bytes: the bundle's mapping).
void dequant_row_fast(const QuantTensor& q, const uint8_t* codes, int64_t r, float* out) {
  const int64_t nb = q.nblocks(), cols = q.cols;
  const uint8_t* crow = codes + r * q.row_stride();
  for (int64_t b = 0; b < nb; ++b) {
    const float s = f16_to_f32(q.scales[size_t(r * nb + b)]);
    const int z = q.zeros[size_t(r * nb + b)];
    const int64_t c0 = b * kQuantBlock;
    if (c0 + kQuantBlock <= cols) {
      const uint8_t* cb = crow + c0 / 2;
      float* o = out + c0;
      for (int i = 0; i < kQuantBlock / 2; ++i) {
        o[2 * i] = float(int(cb[i] & 15) - z) * s;
        o[2 * i + 1] = float(int(cb[i] >> 4) - z) * s;
      }
    } else {
      for (int64_t c = c0; c < cols; ++c) {
        const uint8_t byte = crow[c / 2];
        out[c] = float(int((c & 1) ? (byte >> 4) : (byte & 15)) - z) * s;
      }
    }
  }
  const size_t n = q.fp16_cols.size();  // mixed precision (model/checkpoint/quant.h): the codes encode 0 there
  for (size_t j = 0; j < n; ++j) out[q.fp16_cols[j]] += f16_to_f32(q.fp16_w[size_t(r) * n + j]);
}

class BundleWeights : public WeightSource {
 public:
  explicit BundleWeights(const QuantBundle& b) : b_(b) {}
  std::string describe() const override { return "W4A16 bundle " + b_.path(); }
  bool has(const std::string& name) const override {
    if (b_.is_quantised(name)) return true;
    try {
      (void)b_.get_f32(name);
      return true;
    } catch (const Error&) {
      return false;
    }
  }
  std::vector<float> vector(const std::string& name, int64_t numel) const override {
    std::vector<float> v = b_.is_quantised(name) ? b_.get_dequant(name) : b_.get_f32(name);
    if (int64_t(v.size()) != numel)
      fail("{}: tensor {} has {} elements, the config needs {}", describe(), name, v.size(), numel);
    return v;
  }
  Matrix matrix(const std::string& name, int64_t rows, int64_t cols) const override {
    Matrix m;
    m.name = name;
    m.rows = rows;
    m.cols = cols;
    if (!b_.is_quantised(name)) {
      // A float tensor used as a matrix (not expected for this scheme, but valid).
      auto v = std::make_shared<std::vector<float>>(vector(name, rows * cols));
      held_.push_back(v);
      m.f32 = v->data();
      return m;
    }
    // The codes stay in the bundle's mapping (the bundle outlives the chain); scales,
    // zeros and fp16 columns are copied (1/21 of the codes' size).
    const uint8_t* codes = nullptr;
    auto q = std::make_shared<QuantTensor>(b_.get_quant_mapped(name, codes));
    if (q->rows != rows || q->cols != cols)
      fail("{}: quantised tensor {} is [{}, {}], the config needs [{}, {}]", describe(), name,
           q->rows, q->cols, rows, cols);
    m.load = [q, codes](int64_t r0, int64_t n, float* dst) {
      for (int64_t r = 0; r < n; ++r) dequant_row_fast(*q, codes, r0 + r, dst + r * q->cols);
    };
    // The codes themselves, where the loader is the plain (q - z) s of every weight:
    // ops::linear reads them directly for decode.
    if (q->fp16_cols.empty()) {
      m.w4.codes = codes;
      m.w4.scales = q->scales.data();
      m.w4.zeros = q->zeros.data();
      m.w4.row_stride = q->row_stride();
      m.w4.nblocks = q->nblocks();
      m.w4.block = kQuantBlock;
    }
    return m;
  }

 private:
  const QuantBundle& b_;
  mutable std::vector<std::shared_ptr<std::vector<float>>> held_;
};

}  // namespace

std::unique_ptr<WeightSource> checkpoint_weights(const Checkpoint& ck) {
  return std::make_unique<CheckpointWeights>(ck);
}

std::unique_ptr<WeightSource> bundle_weights(const QuantBundle& bundle) {
  return std::make_unique<BundleWeights>(bundle);
}

MemoryWeights copy_weights(const WeightSource& src, const ModelConfig& cfg) {
  MemoryWeights m;
  for (const TensorSpec& s : expected_tensors(cfg)) {
    if (s.shape.size() == 1 || s.role == TensorRole::PosEmbed || s.role == TensorRole::Norm ||
        s.role == TensorRole::Bias) {
      m.set(s.name, src.vector(s.name, s.numel()));
    } else {
      Matrix mat = src.matrix(s.name, s.rows(), s.cols());
      std::vector<float> d(size_t(s.numel()));
      if (mat.f32)
        std::copy_n(mat.f32, d.size(), d.data());
      else
        mat.load(0, s.rows(), d.data());
      m.set(s.name, std::move(d));
    }
  }
  if (src.has(kLmHead)) {
    Matrix mat = src.matrix(kLmHead, cfg.text.vocab_size, cfg.text.hidden_size);
    std::vector<float> d(size_t(mat.rows * mat.cols));
    if (mat.f32) std::copy_n(mat.f32, d.size(), d.data());
    else mat.load(0, mat.rows, d.data());
    m.set(kLmHead, std::move(d));
  }
  return m;
}

// ---- recorder ---------------------------------------------------------------------------

TensorHook TensorRecorder::hook() {
  return [this](const std::string& name, const std::vector<int64_t>& shape,
                std::span<const float> data) {
    bool keep = prefixes_.empty();
    for (const auto& p : prefixes_)
      if (name.compare(0, p.size(), p) == 0) keep = true;
    if (keep) e_[name] = Entry{shape, std::vector<float>(data.begin(), data.end())};
  };
}

const TensorRecorder::Entry& TensorRecorder::at(const std::string& name) const {
  auto it = e_.find(name);
  if (it == e_.end()) {
    std::string some;
    int n = 0;
    for (const auto& [k, v] : e_) {
      if (n++ == 5) break;
      some += (some.empty() ? "" : ", ") + k;
    }
    fail("TensorRecorder: no intermediate '{}' was recorded ({} recorded, e.g. {}); check the name "
         "and the recorder's prefixes",
         name, e_.size(), some);
  }
  return it->second;
}

void KvCache::clear() {
  len = 0;
  next_position = 0;
  for (auto& x : k) x.clear();
  for (auto& x : v) x.clear();
}

double cosine(std::span<const float> a, std::span<const float> b) {
  if (a.size() != b.size()) fail("cosine: sizes {} and {} differ", a.size(), b.size());
  double ab = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    ab += double(a[i]) * b[i];
    aa += double(a[i]) * a[i];
    bb += double(b[i]) * b[i];
  }
  return ab / (std::sqrt(aa) * std::sqrt(bb) + 1e-300);
}

// ---- the model's weights ----------------------------------------------------------------

struct Chain::Weights {
  struct Block {
    std::vector<float> n1w, n1b, n2w, n2b, qkv_b, proj_b, fc1_b, fc2_b;
    Matrix qkv, proj, fc1, fc2;
  };
  struct Merger {
    std::vector<float> nw, nb, fc1_b, fc2_b;
    Matrix fc1, fc2;
  };
  struct Layer {
    std::vector<float> in_norm, post_norm, q_norm, k_norm;
    Matrix q, k, v, o, gate, up, down;
  };
  Matrix patch;
  std::vector<float> patch_b, pos_table;
  std::vector<Block> blocks;
  Merger merger;
  std::vector<Merger> ds;
  Matrix embed, head;
  std::vector<Layer> layers;
  std::vector<float> final_norm;
};

Chain::Chain(const ModelConfig& cfg, const WeightSource& src, ChainOptions opt)
    : cfg_(cfg), opt_(std::move(opt)), w_(std::make_unique<Weights>()) {
  cfg_.validate("Chain config");
  const VisionConfig& v = cfg_.vision;
  const TextConfig& t = cfg_.text;
  if (v.hidden_act != "gelu_pytorch_tanh" && v.hidden_act != "gelu")
    fail("Chain: vision hidden_act '{}' is not supported (gelu_pytorch_tanh or gelu)", v.hidden_act);
  if (t.hidden_act != "silu") fail("Chain: text hidden_act '{}' is not supported (silu)", t.hidden_act);
  if (t.attention_bias) fail("Chain: text attention_bias = true is not supported (Qwen3-VL has none)");
  if (!t.mrope_interleaved) fail("Chain: only interleaved M-RoPE (Qwen3-VL) is supported");
  const int64_t Dv = v.hidden_size, Fv = v.intermediate_size, D = t.hidden_size, Dm = v.merged_dim();
  const int64_t O = v.out_hidden_size;
  Weights& w = *w_;
  w.patch = src.matrix(kPatchEmbedWeight, Dv, v.patch_dim());
  w.patch_b = src.vector(kPatchEmbedBias, Dv);
  w.pos_table = src.vector(kPosEmbed, int64_t(v.num_position_embeddings) * Dv);
  for (int b = 0; b < v.depth; ++b) {
    auto n = [&](const char* leaf) { return vision_block_name(b, leaf); };
    Weights::Block B;
    B.n1w = src.vector(n("norm1.weight"), Dv);
    B.n1b = src.vector(n("norm1.bias"), Dv);
    B.n2w = src.vector(n("norm2.weight"), Dv);
    B.n2b = src.vector(n("norm2.bias"), Dv);
    B.qkv = src.matrix(n("attn.qkv.weight"), 3 * Dv, Dv);
    B.qkv_b = src.vector(n("attn.qkv.bias"), 3 * Dv);
    B.proj = src.matrix(n("attn.proj.weight"), Dv, Dv);
    B.proj_b = src.vector(n("attn.proj.bias"), Dv);
    B.fc1 = src.matrix(n("mlp.linear_fc1.weight"), Fv, Dv);
    B.fc1_b = src.vector(n("mlp.linear_fc1.bias"), Fv);
    B.fc2 = src.matrix(n("mlp.linear_fc2.weight"), Dv, Fv);
    B.fc2_b = src.vector(n("mlp.linear_fc2.bias"), Dv);
    w.blocks.push_back(std::move(B));
  }
  auto merger = [&](const std::string& prefix, int64_t norm_dim) {
    Weights::Merger M;
    M.nw = src.vector(prefix + "norm.weight", norm_dim);
    M.nb = src.vector(prefix + "norm.bias", norm_dim);
    M.fc1 = src.matrix(prefix + "linear_fc1.weight", Dm, Dm);
    M.fc1_b = src.vector(prefix + "linear_fc1.bias", Dm);
    M.fc2 = src.matrix(prefix + "linear_fc2.weight", O, Dm);
    M.fc2_b = src.vector(prefix + "linear_fc2.bias", O);
    return M;
  };
  w.merger = merger(kMergerPrefix, Dv);
  for (size_t j = 0; j < v.deepstack_visual_indexes.size(); ++j)
    w.ds.push_back(merger(deepstack_merger_name(int(j), ""), Dm));
  w.embed = src.matrix(kEmbedTokens, t.vocab_size, D);
  w.head = src.has(kLmHead) ? src.matrix(kLmHead, t.vocab_size, D) : w.embed;
  for (int l = 0; l < t.num_hidden_layers; ++l) {
    auto n = [&](const char* leaf) { return text_layer_name(l, leaf); };
    Weights::Layer L;
    L.in_norm = src.vector(n("input_layernorm.weight"), D);
    L.post_norm = src.vector(n("post_attention_layernorm.weight"), D);
    L.q_norm = src.vector(n("self_attn.q_norm.weight"), t.head_dim);
    L.k_norm = src.vector(n("self_attn.k_norm.weight"), t.head_dim);
    L.q = src.matrix(n("self_attn.q_proj.weight"), t.q_dim(), D);
    L.k = src.matrix(n("self_attn.k_proj.weight"), t.kv_dim(), D);
    L.v = src.matrix(n("self_attn.v_proj.weight"), t.kv_dim(), D);
    L.o = src.matrix(n("self_attn.o_proj.weight"), D, t.q_dim());
    L.gate = src.matrix(n("mlp.gate_proj.weight"), t.intermediate_size, D);
    L.up = src.matrix(n("mlp.up_proj.weight"), t.intermediate_size, D);
    L.down = src.matrix(n("mlp.down_proj.weight"), D, t.intermediate_size);
    w.layers.push_back(std::move(L));
  }
  w.final_norm = src.vector(kFinalNorm, D);
  cache_.layers = t.num_hidden_layers;
  cache_.kv_dim = t.kv_dim();
  cache_.k.resize(size_t(t.num_hidden_layers));
  cache_.v.resize(size_t(t.num_hidden_layers));
}

Chain::~Chain() = default;

void Chain::emit(const std::string& name, std::vector<int64_t> shape, std::span<const float> data) const {
  if (opt_.on_tensor) opt_.on_tensor(name, shape, data);
}

void Chain::round(std::span<float> x) const {
  if (opt_.round_activations_f16) ops::round_f16_inplace(x);
}

// ---- vision -----------------------------------------------------------------------------

VisionOutput Chain::vision(const ImagePatches& img, int image_index) {
  const VisionConfig& v = cfg_.vision;
  const Weights& w = *w_;
  const int merge = v.spatial_merge_size;
  if (img.t != 1)
    fail("Chain::vision: image {} has grid t = {}; only still images (t = 1) are supported", image_index, img.t);
  if (img.h <= 0 || img.w <= 0 || img.h % merge != 0 || img.w % merge != 0)
    fail("Chain::vision: image {} grid {}x{} patches is not a positive multiple of the merge size {}",
         image_index, img.h, img.w, merge);
  const int64_t N = int64_t(img.h) * img.w, Dv = v.hidden_size, Fv = v.intermediate_size;
  if (int64_t(img.pixels.size()) != N * v.patch_dim())
    fail("Chain::vision: image {} has {} pixel floats, grid {}x{} needs {} x {} = {}", image_index,
         img.pixels.size(), img.h, img.w, N, v.patch_dim(), N * v.patch_dim());
  const std::string pre = "vision." + std::to_string(image_index) + ".";
  const float eps = float(v.layer_norm_eps);
  const int th = opt_.threads;
  const int heads = v.num_heads, hd = v.head_dim();

  std::vector<float> x(size_t(N * Dv));
  ops::linear(img.pixels, w.patch, w.patch_b, x, th);
  round(x);
  emit(pre + "patch_embed", {N, Dv}, x);
  std::vector<float> pe(x.size());
  ops::pos_embed_bilinear(w.pos_table, v.pos_grid_side(), int(Dv), img.h, img.w, merge, pe);
  round(pe);
  emit(pre + "pos_embed", {N, Dv}, pe);
  ops::add_inplace(x, pe);
  round(x);
  emit(pre + "embed", {N, Dv}, x);

  const auto rq = ops::merge_window_order(img.h, img.w, merge);
  const int64_t M = N / (merge * merge), Dm = v.merged_dim();
  VisionOutput out;
  out.tokens = M;
  out.deepstack.resize(w.ds.size());

  // merger: optional LN over Dv before the shuffle (final) or over Dm after it (DeepStack).
  auto run_merger = [&](const Weights::Merger& mg, bool pre_shuffle, const std::vector<float>& in,
                        std::vector<float>& res) {
    std::vector<float> h(in.size());
    if (pre_shuffle) {
      ops::layernorm_rows(in, h, int(Dv), mg.nw, mg.nb, eps);
      ops::merge_shuffle(h, int(Dv), merge, h);
    } else {
      ops::merge_shuffle(in, int(Dv), merge, h);
      ops::layernorm_rows(h, h, int(Dm), mg.nw, mg.nb, eps);
    }
    round(h);
    std::vector<float> f(size_t(M * Dm));
    ops::linear(h, mg.fc1, mg.fc1_b, f, th);
    round(f);
    ops::gelu_erf(std::span<float>(f));
    round(f);
    res.assign(size_t(M * mg.fc2.rows), 0.0f);
    ops::linear(f, mg.fc2, mg.fc2_b, res, th);
    round(res);
  };

  std::vector<float> h(x.size()), qkv(size_t(N * 3 * Dv)), q(x.size()), k(x.size()), vv(x.size()),
      a(x.size()), p(x.size()), f(size_t(N * Fv));
  ops::AttnShape as{heads, heads, hd, float(1.0 / std::sqrt(double(hd))), false, 0};
  for (int b = 0; b < v.depth; ++b) {
    const Weights::Block& B = w.blocks[size_t(b)];
    const std::string bp = pre + "block." + std::to_string(b) + ".";
    ops::layernorm_rows(x, h, int(Dv), B.n1w, B.n1b, eps);
    round(h);
    ops::linear(h, B.qkv, B.qkv_b, qkv, th);
    round(qkv);
    for (int64_t n = 0; n < N; ++n) {
      const float* r = qkv.data() + n * 3 * Dv;
      std::copy_n(r, Dv, q.data() + n * Dv);
      std::copy_n(r + Dv, Dv, k.data() + n * Dv);
      std::copy_n(r + 2 * Dv, Dv, vv.data() + n * Dv);
    }
    ops::rope_2d(q, heads, hd, rq);
    ops::rope_2d(k, heads, hd, rq);
    round(q);
    round(k);
    emit(bp + "q", {N, Dv}, q);
    emit(bp + "k", {N, Dv}, k);
    ops::attention(q, k, vv, a, as, th);
    round(a);
    emit(bp + "attn", {N, Dv}, a);
    ops::linear(a, B.proj, B.proj_b, p, th);
    round(p);
    ops::add_inplace(x, p);
    round(x);
    emit(bp + "attn_res", {N, Dv}, x);
    ops::layernorm_rows(x, h, int(Dv), B.n2w, B.n2b, eps);
    round(h);
    ops::linear(h, B.fc1, B.fc1_b, f, th);
    round(f);
    if (v.hidden_act == "gelu_pytorch_tanh")
      ops::gelu_tanh(std::span<float>(f));
    else
      ops::gelu_erf(std::span<float>(f));
    round(f);
    emit(bp + "mlp_act", {N, Fv}, f);
    ops::linear(f, B.fc2, B.fc2_b, p, th);
    round(p);
    ops::add_inplace(x, p);
    round(x);
    emit(bp + "out", {N, Dv}, x);
    for (size_t j = 0; j < v.deepstack_visual_indexes.size(); ++j)
      if (v.deepstack_visual_indexes[j] == b) {
        run_merger(w.ds[j], false, x, out.deepstack[j]);
        emit(pre + "deepstack." + std::to_string(j), {M, v.out_hidden_size}, out.deepstack[j]);
      }
  }
  run_merger(w.merger, true, x, out.embeds);
  emit(pre + "merger", {M, v.out_hidden_size}, out.embeds);
  return out;
}

// ---- language model ---------------------------------------------------------------------

std::vector<float> Chain::run_lm(const std::vector<int>& ids, const std::vector<VisionOutput>& vis,
                                 const std::vector<std::array<int, 3>>& positions) {
  const TextConfig& t = cfg_.text;
  const Weights& w = *w_;
  const int64_t S = int64_t(ids.size()), D = t.hidden_size, F = t.intermediate_size;
  const int64_t QD = t.q_dim(), KD = t.kv_dim();
  const float eps = float(t.rms_norm_eps), theta = float(t.rope_theta);
  const int th = opt_.threads;
  if (S == 0) fail("Chain: empty token list");
  if (int64_t(positions.size()) != S)
    fail("Chain: {} positions for {} tokens; give one (t, h, w) triple per token", positions.size(), S);

  // Image rows: every image pad, in order, takes the next merger row.
  std::vector<int> img_rows;
  for (int64_t i = 0; i < S; ++i)
    if (ids[size_t(i)] == cfg_.image_token_id) img_rows.push_back(int(i));
  int64_t vis_tokens = 0;
  for (const auto& vo : vis) vis_tokens += vo.tokens;
  if (int64_t(img_rows.size()) != vis_tokens)
    fail("Chain: the tokens hold {} image pads (id {}) but the images give {} image tokens; "
         "expand each image's pad to t*h*w/merge^2 copies",
         img_rows.size(), cfg_.image_token_id, vis_tokens);

  std::vector<float> x(size_t(S * D));
  ops::embed_lookup(w.embed, ids, x);
  round(x);
  emit("lm.embed", {S, D}, x);
  const size_t ntaps = w.ds.size();
  std::vector<std::vector<float>> ds(ntaps);
  if (!img_rows.empty()) {
    std::vector<float> all;
    for (const auto& vo : vis) all.insert(all.end(), vo.embeds.begin(), vo.embeds.end());
    ops::splice_rows(x, int(D), img_rows, all);
    for (size_t j = 0; j < ntaps; ++j)
      for (const auto& vo : vis) ds[j].insert(ds[j].end(), vo.deepstack[j].begin(), vo.deepstack[j].end());
  }
  emit("lm.input", {S, D}, x);

  const int64_t past = cache_.len;
  ops::AttnShape as{t.num_attention_heads, t.num_key_value_heads, t.head_dim,
                    float(1.0 / std::sqrt(double(t.head_dim))), true, past};
  std::vector<float> h(x.size()), q(size_t(S * QD)), k(size_t(S * KD)), v(size_t(S * KD)),
      a(size_t(S * QD)), o(x.size()), g(size_t(S * F)), u(size_t(S * F));
  for (int l = 0; l < t.num_hidden_layers; ++l) {
    const Weights::Layer& L = w.layers[size_t(l)];
    const std::string lp = "lm.layer." + std::to_string(l) + ".";
    ops::rmsnorm_rows(x, h, int(D), L.in_norm, eps);
    round(h);
    ops::linear(h, L.q, {}, q, th);
    ops::linear(h, L.k, {}, k, th);
    ops::linear(h, L.v, {}, v, th);
    round(q);
    round(k);
    round(v);
    ops::rmsnorm_heads(q, t.num_attention_heads, t.head_dim, L.q_norm, eps);
    ops::rmsnorm_heads(k, t.num_key_value_heads, t.head_dim, L.k_norm, eps);
    round(q);
    round(k);
    ops::mrope(q, t.num_attention_heads, t.head_dim, positions, theta, t.mrope_section);
    ops::mrope(k, t.num_key_value_heads, t.head_dim, positions, theta, t.mrope_section);
    round(q);
    round(k);
    emit(lp + "q", {S, QD}, q);
    emit(lp + "k", {S, KD}, k);
    emit(lp + "v", {S, KD}, v);
    auto& ck = cache_.k[size_t(l)];
    auto& cv = cache_.v[size_t(l)];
    ck.insert(ck.end(), k.begin(), k.end());
    cv.insert(cv.end(), v.begin(), v.end());
    ops::attention(q, ck, cv, a, as, th);
    round(a);
    emit(lp + "attn", {S, QD}, a);
    ops::linear(a, L.o, {}, o, th);
    round(o);
    emit(lp + "attn_out", {S, D}, o);
    ops::add_inplace(x, o);
    round(x);
    emit(lp + "attn_res", {S, D}, x);
    ops::rmsnorm_rows(x, h, int(D), L.post_norm, eps);
    round(h);
    ops::linear(h, L.gate, {}, g, th);
    ops::linear(h, L.up, {}, u, th);
    round(g);
    round(u);
    ops::silu_mul(g, u, g);
    round(g);
    emit(lp + "mlp_act", {S, F}, g);
    ops::linear(g, L.down, {}, o, th);
    round(o);
    emit(lp + "mlp_out", {S, D}, o);
    ops::add_inplace(x, o);
    round(x);
    if (opt_.deepstack && size_t(l) < ntaps && !img_rows.empty()) {
      ops::add_rows_at(x, int(D), img_rows, ds[size_t(l)]);
      round(x);
    }
    emit(lp + "out", {S, D}, x);
  }
  cache_.len += S;
  for (const auto& p : positions)
    cache_.next_position = std::max(cache_.next_position, std::max({p[0], p[1], p[2]}) + 1);

  std::vector<float> last(x.end() - D, x.end()), hn(static_cast<size_t>(D));
  ops::rmsnorm_rows(last, hn, int(D), w.final_norm, eps);
  round(hn);
  emit("lm.final_norm", {1, D}, hn);
  std::vector<float> logits(size_t(t.vocab_size));
  ops::tied_head(hn, w.head, logits, th);
  round(logits);
  emit("logits", {1, t.vocab_size}, logits);
  return logits;
}

std::vector<float> Chain::prefill(const std::vector<int>& ids, const std::vector<ImagePatches>& images,
                                  const std::vector<std::array<int, 3>>& positions) {
  std::vector<VisionOutput> vis;
  for (size_t i = 0; i < images.size(); ++i) vis.push_back(vision(images[i], int(i)));
  if (!positions.empty()) return run_lm(ids, vis, positions);
  if (cache_.len != 0 && !images.empty())
    fail("Chain::prefill: positions are needed for an image prefill that continues a cache of {} tokens",
         cache_.len);
  std::vector<std::array<int, 3>> pos;
  if (images.empty()) {
    for (size_t i = 0; i < ids.size(); ++i) {
      int p = cache_.next_position + int(i);
      pos.push_back({p, p, p});
    }
  } else {
    std::vector<MergedGrid> grids;
    for (const auto& im : images)
      grids.push_back({im.h / cfg_.vision.spatial_merge_size, im.w / cfg_.vision.spatial_merge_size});
    MropePositions mp = mrope_positions(ids, grids, cfg_.image_token_id);
    for (const auto& p : mp.pos) pos.push_back({int(p[0]), int(p[1]), int(p[2])});
  }
  return run_lm(ids, vis, pos);
}

std::vector<float> Chain::decode(int token) {
  const int p = cache_.next_position;
  return decode(token, {p, p, p});
}

std::vector<float> Chain::decode(int token, std::array<int, 3> position) {
  return run_lm({token}, {}, {position});
}

Generation Chain::generate(const std::vector<int>& ids, const std::vector<ImagePatches>& images,
                           const std::vector<std::array<int, 3>>& positions, int steps) {
  Generation g;
  g.logits.push_back(prefill(ids, images, positions));
  for (int s = 0; s < steps; ++s) {
    int tok = ops::argmax(g.logits.back());
    g.tokens.push_back(tok);
    g.logits.push_back(decode(tok));
  }
  return g;
}

}  // namespace gpnpu::model
