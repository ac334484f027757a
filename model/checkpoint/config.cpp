// Qwen3-VL configuration: HF config.json reading/writing, built-in configs, the
// checkpoint tensor list. See config.h for the contract.
#include "model/checkpoint/config.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "isa/error.h"
#include "isa/io_rules.h"

namespace gpnpu::model {

using nlohmann::json;

int VisionConfig::pos_grid_side() const {
  int s = int(std::lround(std::sqrt(double(num_position_embeddings))));
  return s;
}

// ---- JSON reading helpers: every error names the source and the dotted key ----------

namespace {

const char* json_type(const json& v) { return v.type_name(); }

const json* find(const json& obj, const char* key) {
  auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

int64_t get_int(const json& obj, const std::string& prefix, const char* key, const std::string& where,
                const int64_t* dflt = nullptr) {
  const json* v = find(obj, key);
  if (!v || v->is_null()) {
    if (dflt) return *dflt;
    fail("{}: missing key '{}{}' (a Qwen3-VL config.json has it; copy the config.json that came with the checkpoint)",
         where, prefix, key);
  }
  if (v->is_number_integer() || v->is_number_unsigned()) return v->get<int64_t>();
  if (v->is_number_float()) {
    double d = v->get<double>();
    if (d == std::floor(d) && std::fabs(d) < 9e15) return int64_t(d);
  }
  fail("{}: key '{}{}' must be an integer, got {} {}", where, prefix, key, json_type(*v), v->dump());
}

int get_pos_int(const json& obj, const std::string& prefix, const char* key, const std::string& where,
                const int64_t* dflt = nullptr) {
  int64_t x = get_int(obj, prefix, key, where, dflt);
  if (x <= 0 || x > (int64_t(1) << 30))
    fail("{}: key '{}{}' must be a positive integer, got {}", where, prefix, key, x);
  return int(x);
}

double get_num(const json& obj, const std::string& prefix, const char* key, const std::string& where,
               const double* dflt = nullptr) {
  const json* v = find(obj, key);
  if (!v || v->is_null()) {
    if (dflt) return *dflt;
    fail("{}: missing key '{}{}' (a Qwen3-VL config.json has it)", where, prefix, key);
  }
  if (!v->is_number()) fail("{}: key '{}{}' must be a number, got {} {}", where, prefix, key, json_type(*v), v->dump());
  return v->get<double>();
}

bool get_bool(const json& obj, const std::string& prefix, const char* key, const std::string& where, bool dflt) {
  const json* v = find(obj, key);
  if (!v || v->is_null()) return dflt;
  if (!v->is_boolean()) fail("{}: key '{}{}' must be true or false, got {}", where, prefix, key, v->dump());
  return v->get<bool>();
}

std::string get_str(const json& obj, const std::string& prefix, const char* key, const std::string& where,
                    const std::string& dflt) {
  const json* v = find(obj, key);
  if (!v || v->is_null()) return dflt;
  if (!v->is_string()) fail("{}: key '{}{}' must be a string, got {}", where, prefix, key, v->dump());
  return v->get<std::string>();
}

std::vector<int> get_int_list(const json& v, const std::string& key, const std::string& where) {
  if (!v.is_array()) fail("{}: key '{}' must be a list of integers, got {}", where, key, v.dump());
  std::vector<int> out;
  for (const auto& e : v) {
    if (!e.is_number_integer() && !e.is_number_unsigned())
      fail("{}: key '{}' must be a list of integers, got element {}", where, key, e.dump());
    out.push_back(e.get<int>());
  }
  return out;
}

const json& get_obj(const json& obj, const std::string& prefix, const char* key, const std::string& where) {
  const json* v = find(obj, key);
  if (!v) fail("{}: missing key '{}{}' (a Qwen3-VL config.json has it; is this a Qwen3-VL config?)", where, prefix, key);
  if (!v->is_object()) fail("{}: key '{}{}' must be an object, got {}", where, prefix, key, json_type(*v));
  return *v;
}

}  // namespace

ModelConfig ModelConfig::from_json(const json& j, const std::string& where) {
  if (!j.is_object()) fail("{}: the config must be a JSON object, got {}", where, json_type(j));
  std::string mt = get_str(j, "", "model_type", where, "qwen3_vl");
  if (mt != "qwen3_vl")
    fail("{}: key 'model_type' is '{}', expected 'qwen3_vl' (only dense Qwen3-VL checkpoints are supported)", where, mt);

  ModelConfig c;
  c.name = where;
  const json& vj = get_obj(j, "", "vision_config", where);
  const std::string vp = "vision_config.";
  VisionConfig& v = c.vision;
  v.depth = get_pos_int(vj, vp, "depth", where);
  v.hidden_size = get_pos_int(vj, vp, "hidden_size", where);
  v.num_heads = get_pos_int(vj, vp, "num_heads", where);
  v.intermediate_size = get_pos_int(vj, vp, "intermediate_size", where);
  const int64_t d16 = 16, d2 = 2, d3 = 3;
  v.patch_size = get_pos_int(vj, vp, "patch_size", where, &d16);
  v.temporal_patch_size = get_pos_int(vj, vp, "temporal_patch_size", where, &d2);
  v.spatial_merge_size = get_pos_int(vj, vp, "spatial_merge_size", where, &d2);
  v.in_channels = get_pos_int(vj, vp, "in_channels", where, &d3);
  v.out_hidden_size = get_pos_int(vj, vp, "out_hidden_size", where);
  v.num_position_embeddings = get_pos_int(vj, vp, "num_position_embeddings", where);
  {
    const json* ds = find(vj, "deepstack_visual_indexes");
    if (!ds) fail("{}: missing key 'vision_config.deepstack_visual_indexes' (a Qwen3-VL config.json has it)", where);
    v.deepstack_visual_indexes = get_int_list(*ds, vp + "deepstack_visual_indexes", where);
  }
  v.hidden_act = get_str(vj, vp, "hidden_act", where, "gelu_pytorch_tanh");

  const json& tj = get_obj(j, "", "text_config", where);
  const std::string tp = "text_config.";
  TextConfig& t = c.text;
  t.hidden_size = get_pos_int(tj, tp, "hidden_size", where);
  t.num_hidden_layers = get_pos_int(tj, tp, "num_hidden_layers", where);
  t.num_attention_heads = get_pos_int(tj, tp, "num_attention_heads", where);
  const int64_t dkv = t.num_attention_heads;
  t.num_key_value_heads = get_pos_int(tj, tp, "num_key_value_heads", where, &dkv);
  const int64_t dhd = t.hidden_size / t.num_attention_heads;
  t.head_dim = get_pos_int(tj, tp, "head_dim", where, &dhd);
  t.intermediate_size = get_pos_int(tj, tp, "intermediate_size", where);
  t.vocab_size = get_pos_int(tj, tp, "vocab_size", where);
  const double deps = 1e-6;
  t.rms_norm_eps = get_num(tj, tp, "rms_norm_eps", where, &deps);
  const int64_t dmax = 262144;
  t.max_position_embeddings = get_int(tj, tp, "max_position_embeddings", where, &dmax);
  t.hidden_act = get_str(tj, tp, "hidden_act", where, "silu");
  t.attention_bias = get_bool(tj, tp, "attention_bias", where, false);

  // rope: older layout text_config.rope_theta + text_config.rope_scaling.mrope_section;
  // newer: text_config.rope_parameters.{rope_theta, mrope_section, mrope_interleaved}.
  const json* rp = find(tj, "rope_parameters");
  const json* rs = find(tj, "rope_scaling");
  const json* rope = (rp && rp->is_object()) ? rp : (rs && rs->is_object()) ? rs : nullptr;
  const std::string rope_key = (rope == rp && rp) ? tp + "rope_parameters" : tp + "rope_scaling";
  if (!rope)
    fail("{}: missing key '{}rope_scaling' (or '{}rope_parameters') with mrope_section; Qwen3-VL needs M-RoPE",
         where, tp, tp);
  {
    const json* ms = find(*rope, "mrope_section");
    if (!ms) fail("{}: missing key '{}.mrope_section' (Qwen3-VL uses [24, 20, 20] for the 2B model)", where, rope_key);
    t.mrope_section = get_int_list(*ms, rope_key + ".mrope_section", where);
    t.mrope_interleaved = get_bool(*rope, rope_key + ".", "mrope_interleaved", where, true);
    std::string rtype = get_str(*rope, rope_key + ".", "rope_type", where, "default");
    if (rtype != "default")
      fail("{}: key '{}.rope_type' is '{}'; only 'default' (no rope scaling) is supported", where, rope_key, rtype);
  }
  if (find(tj, "rope_theta"))
    t.rope_theta = get_num(tj, tp, "rope_theta", where);
  else if (rope && find(*rope, "rope_theta"))
    t.rope_theta = get_num(*rope, rope_key + ".", "rope_theta", where);
  else
    fail("{}: missing key '{}rope_theta' (5000000 for Qwen3-VL)", where, tp);

  c.tie_word_embeddings = get_bool(j, "", "tie_word_embeddings", where, true);
  t.tie_word_embeddings = get_bool(tj, tp, "tie_word_embeddings", where, c.tie_word_embeddings);

  c.image_token_id = int(get_int(j, "", "image_token_id", where));
  const int64_t dvid = 151656;
  c.video_token_id = int(get_int(j, "", "video_token_id", where, &dvid));
  c.vision_start_token_id = int(get_int(j, "", "vision_start_token_id", where));
  c.vision_end_token_id = int(get_int(j, "", "vision_end_token_id", where));
  const int64_t dbos = 151643, deos = 151645;
  // bos/eos live in text_config in the HF file; accept the top level too.
  if (find(tj, "bos_token_id")) c.bos_token_id = int(get_int(tj, tp, "bos_token_id", where));
  else c.bos_token_id = int(get_int(j, "", "bos_token_id", where, &dbos));
  {
    const json* e = find(tj, "eos_token_id");
    const json* src = e ? e : find(j, "eos_token_id");
    if (!src || src->is_null()) c.eos_token_id = int(deos);
    else if (src->is_array() && !src->empty() && src->at(0).is_number_integer()) c.eos_token_id = src->at(0).get<int>();
    else if (src->is_number_integer()) c.eos_token_id = src->get<int>();
    else fail("{}: key '{}eos_token_id' must be an integer, got {}", where, e ? tp : "", src->dump());
  }
  c.validate(where);
  return c;
}

void ModelConfig::validate(const std::string& where) const {
  const VisionConfig& v = vision;
  const TextConfig& t = text;
  if (v.hidden_size % v.num_heads != 0)
    fail("{}: vision_config.hidden_size {} is not divisible by vision_config.num_heads {}", where, v.hidden_size,
         v.num_heads);
  if (v.head_dim() % 4 != 0)
    fail("{}: vision head_dim {} (hidden_size/num_heads) must be a multiple of 4 for the 2-D RoPE", where,
         v.head_dim());
  int side = v.pos_grid_side();
  if (int64_t(side) * side != v.num_position_embeddings)
    fail("{}: vision_config.num_position_embeddings {} is not a square (the table is a side x side grid)", where,
         v.num_position_embeddings);
  if (v.deepstack_visual_indexes.empty())
    fail("{}: vision_config.deepstack_visual_indexes is empty; Qwen3-VL has DeepStack taps", where);
  for (size_t i = 0; i < v.deepstack_visual_indexes.size(); ++i) {
    int b = v.deepstack_visual_indexes[i];
    if (b < 0 || b >= v.depth)
      fail("{}: vision_config.deepstack_visual_indexes[{}] = {} is outside the blocks 0..{}", where, i, b, v.depth - 1);
    if (i > 0 && b <= v.deepstack_visual_indexes[i - 1])
      fail("{}: vision_config.deepstack_visual_indexes must be strictly increasing, got {}", where,
           fmt::join(v.deepstack_visual_indexes, ", "));
  }
  if (int(v.deepstack_visual_indexes.size()) > t.num_hidden_layers)
    fail("{}: {} DeepStack taps but only {} text layers (text_config.num_hidden_layers)", where,
         v.deepstack_visual_indexes.size(), t.num_hidden_layers);
  if (v.out_hidden_size != t.hidden_size)
    fail("{}: vision_config.out_hidden_size {} must equal text_config.hidden_size {} (merger output feeds the LM)",
         where, v.out_hidden_size, t.hidden_size);
  if (v.hidden_act != "gelu_pytorch_tanh")
    fail("{}: vision_config.hidden_act '{}' is not supported (Qwen3-VL uses gelu_pytorch_tanh)", where, v.hidden_act);
  if (t.hidden_act != "silu")
    fail("{}: text_config.hidden_act '{}' is not supported (Qwen3-VL uses silu)", where, t.hidden_act);
  if (t.attention_bias)
    fail("{}: text_config.attention_bias is true; Qwen3-VL has no attention biases and this loader expects none", where);
  if (t.num_attention_heads % t.num_key_value_heads != 0)
    fail("{}: text_config.num_attention_heads {} is not a multiple of num_key_value_heads {}", where,
         t.num_attention_heads, t.num_key_value_heads);
  if (t.head_dim % 2 != 0) fail("{}: text_config.head_dim {} must be even (RoPE pairs)", where, t.head_dim);
  if (t.mrope_section.size() != 3)
    fail("{}: text_config mrope_section must have 3 entries (t, h, w), got {}", where, t.mrope_section.size());
  int sum = 0;
  for (int s : t.mrope_section) {
    if (s < 0) fail("{}: text_config mrope_section has a negative entry", where);
    sum += s;
  }
  if (sum != t.head_dim / 2)
    fail("{}: text_config mrope_section [{}] sums to {}, must be head_dim/2 = {}", where,
         fmt::join(t.mrope_section, ", "), sum, t.head_dim / 2);
  if (t.mrope_interleaved && (t.mrope_section[1] > t.mrope_section[0] || t.mrope_section[2] > t.mrope_section[0]))
    fail("{}: interleaved mrope_section [{}] needs t >= h and t >= w", where, fmt::join(t.mrope_section, ", "));
  if (!t.mrope_interleaved)
    fail("{}: text_config mrope_interleaved is false; Qwen3-VL uses the interleaved M-RoPE", where);
  if (!(t.rms_norm_eps > 0) || !(t.rope_theta > 1))
    fail("{}: text_config rms_norm_eps must be > 0 and rope_theta > 1 (got {}, {})", where, t.rms_norm_eps,
         t.rope_theta);
  if (!tie_word_embeddings || !t.tie_word_embeddings)
    fail("{}: tie_word_embeddings is false; this implementation expects tied embeddings (lm_head = embed_tokens)",
         where);
  for (auto [key, id] : {std::pair<const char*, int>{"image_token_id", image_token_id},
                         {"video_token_id", video_token_id},
                         {"vision_start_token_id", vision_start_token_id},
                         {"vision_end_token_id", vision_end_token_id},
                         {"bos_token_id", bos_token_id},
                         {"eos_token_id", eos_token_id}}) {
    if (id < 0 || id >= t.vocab_size)
      fail("{}: {} {} is outside the vocabulary 0..{} (text_config.vocab_size)", where, key, id, t.vocab_size - 1);
  }
}

json ModelConfig::to_json() const {
  const VisionConfig& v = vision;
  const TextConfig& t = text;
  json vj = {
      {"deepstack_visual_indexes", v.deepstack_visual_indexes},
      {"depth", v.depth},
      {"hidden_act", v.hidden_act},
      {"hidden_size", v.hidden_size},
      {"in_channels", v.in_channels},
      {"initializer_range", 0.02},
      {"intermediate_size", v.intermediate_size},
      {"model_type", "qwen3_vl"},
      {"num_heads", v.num_heads},
      {"num_position_embeddings", v.num_position_embeddings},
      {"out_hidden_size", v.out_hidden_size},
      {"patch_size", v.patch_size},
      {"spatial_merge_size", v.spatial_merge_size},
      {"temporal_patch_size", v.temporal_patch_size},
  };
  json tj = {
      {"attention_bias", t.attention_bias},
      {"attention_dropout", 0.0},
      {"bos_token_id", bos_token_id},
      {"dtype", "bfloat16"},
      {"eos_token_id", eos_token_id},
      {"head_dim", t.head_dim},
      {"hidden_act", t.hidden_act},
      {"hidden_size", t.hidden_size},
      {"initializer_range", 0.02},
      {"intermediate_size", t.intermediate_size},
      {"max_position_embeddings", t.max_position_embeddings},
      {"model_type", "qwen3_vl_text"},
      {"num_attention_heads", t.num_attention_heads},
      {"num_hidden_layers", t.num_hidden_layers},
      {"num_key_value_heads", t.num_key_value_heads},
      {"rms_norm_eps", t.rms_norm_eps},
      {"rope_scaling",
       {{"mrope_interleaved", t.mrope_interleaved}, {"mrope_section", t.mrope_section}, {"rope_type", "default"}}},
      {"rope_theta", t.rope_theta},
      {"tie_word_embeddings", t.tie_word_embeddings},
      {"use_cache", true},
      {"vocab_size", t.vocab_size},
  };
  json j = {
      {"architectures", {"Qwen3VLForConditionalGeneration"}},
      {"image_token_id", image_token_id},
      {"model_type", "qwen3_vl"},
      {"text_config", tj},
      {"tie_word_embeddings", tie_word_embeddings},
      {"video_token_id", video_token_id},
      {"vision_config", vj},
      {"vision_end_token_id", vision_end_token_id},
      {"vision_start_token_id", vision_start_token_id},
  };
  return j;
}

ModelConfig ModelConfig::from_json_file(const std::string& path) {
  const std::string text = io::read_input(path, "model config (a Hugging Face config.json)", 64 * io::kMiB);
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    fail("{}: invalid JSON at byte {} ({}); the file is not a valid config.json", path, e.byte, e.what());
  } catch (const json::exception& e) {  // e.g. a number too large (out_of_range), not a parse_error
    fail("{}: invalid JSON ({}); the file is not a valid config.json", path, e.what());
  }
  return from_json(j, path);
}

ModelConfig config_2b() {
  ModelConfig c;
  c.name = "2b";
  VisionConfig& v = c.vision;
  v.depth = 24;
  v.hidden_size = 1024;
  v.num_heads = 16;
  v.intermediate_size = 4096;
  v.patch_size = 16;
  v.temporal_patch_size = 2;
  v.spatial_merge_size = 2;
  v.in_channels = 3;
  v.out_hidden_size = 2048;
  v.num_position_embeddings = 2304;
  v.deepstack_visual_indexes = {5, 11, 17};
  v.hidden_act = "gelu_pytorch_tanh";
  TextConfig& t = c.text;
  t.hidden_size = 2048;
  t.num_hidden_layers = 28;
  t.num_attention_heads = 16;
  t.num_key_value_heads = 8;
  t.head_dim = 128;
  t.intermediate_size = 6144;
  t.vocab_size = 151936;
  t.rms_norm_eps = 1e-6;
  t.rope_theta = 5000000.0;
  t.mrope_section = {24, 20, 20};
  t.mrope_interleaved = true;
  t.tie_word_embeddings = true;
  t.max_position_embeddings = 262144;
  c.validate("config_2b");
  return c;
}

ModelConfig config_tiny() {
  ModelConfig c;
  c.name = "tiny";
  VisionConfig& v = c.vision;
  v.depth = 4;
  v.hidden_size = 128;             // a multiple of 128 like the real 1024
  v.num_heads = 4;                 // head_dim 32 (2B: 64): 2-D RoPE over 8 + 8 frequencies
  v.intermediate_size = 256;
  v.patch_size = 16;               // same pixels per patch: patch_dim 1536 as in 2B
  v.temporal_patch_size = 2;
  v.spatial_merge_size = 2;
  v.in_channels = 3;
  v.out_hidden_size = 128;
  v.num_position_embeddings = 256; // a 16 x 16 grid (2B: 48 x 48)
  v.deepstack_visual_indexes = {1, 2, 3};
  TextConfig& t = c.text;
  t.hidden_size = 128;
  t.num_hidden_layers = 5;         // more layers than DeepStack taps (docs/testing.md model-test item 4)
  t.num_attention_heads = 4;
  t.num_key_value_heads = 2;       // GQA group 2
  t.head_dim = 32;                 // q width 128, kv width 64 (2B: 128)
  t.intermediate_size = 384;
  t.vocab_size = 151936;           // full vocabulary: real tokenizer ids fit
  t.rms_norm_eps = 1e-6;
  t.rope_theta = 5000000.0;
  t.mrope_section = {6, 5, 5};     // sums to head_dim / 2 = 16
  t.mrope_interleaved = true;
  t.tie_word_embeddings = true;
  t.max_position_embeddings = 262144;
  c.validate("config_tiny");
  return c;
}

ModelConfig config_by_name(const std::string& name) {
  if (name == "2b" || name == "2B") return config_2b();
  if (name == "tiny") return config_tiny();
  fail("unknown model config '{}'; built-in configs are '2b' and 'tiny' (or pass a config.json path)", name);
}

// ---- tensor list ----------------------------------------------------------------------

int64_t TensorSpec::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

bool TensorSpec::quantised() const {
  return role == TensorRole::Linear || role == TensorRole::PatchEmbed || role == TensorRole::Embedding;
}

std::string vision_block_name(int block, std::string_view leaf) {
  return fmt::format("model.visual.blocks.{}.{}", block, leaf);
}
std::string deepstack_merger_name(int j, std::string_view leaf) {
  return fmt::format("model.visual.deepstack_merger_list.{}.{}", j, leaf);
}
std::string text_layer_name(int layer, std::string_view leaf) {
  return fmt::format("model.language_model.layers.{}.{}", layer, leaf);
}

std::vector<TensorSpec> expected_tensors(const ModelConfig& cfg) {
  const VisionConfig& v = cfg.vision;
  const TextConfig& t = cfg.text;
  using R = TensorRole;
  std::vector<TensorSpec> out;
  auto add = [&](std::string name, std::vector<int64_t> shape, R role) {
    out.push_back(TensorSpec{std::move(name), std::move(shape), role});
  };
  const int64_t vh = v.hidden_size, vi = v.intermediate_size, md = v.merged_dim(), oh = v.out_hidden_size;
  add(kPatchEmbedWeight, {vh, v.in_channels, v.temporal_patch_size, v.patch_size, v.patch_size}, R::PatchEmbed);
  add(kPatchEmbedBias, {vh}, R::Bias);
  add(kPosEmbed, {v.num_position_embeddings, vh}, R::PosEmbed);
  for (int b = 0; b < v.depth; ++b) {
    add(vision_block_name(b, "norm1.weight"), {vh}, R::Norm);
    add(vision_block_name(b, "norm1.bias"), {vh}, R::Bias);
    add(vision_block_name(b, "norm2.weight"), {vh}, R::Norm);
    add(vision_block_name(b, "norm2.bias"), {vh}, R::Bias);
    add(vision_block_name(b, "attn.qkv.weight"), {3 * vh, vh}, R::Linear);
    add(vision_block_name(b, "attn.qkv.bias"), {3 * vh}, R::Bias);
    add(vision_block_name(b, "attn.proj.weight"), {vh, vh}, R::Linear);
    add(vision_block_name(b, "attn.proj.bias"), {vh}, R::Bias);
    add(vision_block_name(b, "mlp.linear_fc1.weight"), {vi, vh}, R::Linear);
    add(vision_block_name(b, "mlp.linear_fc1.bias"), {vi}, R::Bias);
    add(vision_block_name(b, "mlp.linear_fc2.weight"), {vh, vi}, R::Linear);
    add(vision_block_name(b, "mlp.linear_fc2.bias"), {vh}, R::Bias);
  }
  const std::string m = kMergerPrefix;
  add(m + "norm.weight", {vh}, R::Norm);
  add(m + "norm.bias", {vh}, R::Bias);
  add(m + "linear_fc1.weight", {md, md}, R::Linear);
  add(m + "linear_fc1.bias", {md}, R::Bias);
  add(m + "linear_fc2.weight", {oh, md}, R::Linear);
  add(m + "linear_fc2.bias", {oh}, R::Bias);
  for (int j = 0; j < int(v.deepstack_visual_indexes.size()); ++j) {
    add(deepstack_merger_name(j, "norm.weight"), {md}, R::Norm);
    add(deepstack_merger_name(j, "norm.bias"), {md}, R::Bias);
    add(deepstack_merger_name(j, "linear_fc1.weight"), {md, md}, R::Linear);
    add(deepstack_merger_name(j, "linear_fc1.bias"), {md}, R::Bias);
    add(deepstack_merger_name(j, "linear_fc2.weight"), {oh, md}, R::Linear);
    add(deepstack_merger_name(j, "linear_fc2.bias"), {oh}, R::Bias);
  }
  const int64_t h = t.hidden_size, q = t.q_dim(), kv = t.kv_dim(), inter = t.intermediate_size, hd = t.head_dim;
  add(kEmbedTokens, {t.vocab_size, h}, R::Embedding);
  for (int l = 0; l < t.num_hidden_layers; ++l) {
    add(text_layer_name(l, "input_layernorm.weight"), {h}, R::Norm);
    add(text_layer_name(l, "self_attn.q_proj.weight"), {q, h}, R::Linear);
    add(text_layer_name(l, "self_attn.k_proj.weight"), {kv, h}, R::Linear);
    add(text_layer_name(l, "self_attn.v_proj.weight"), {kv, h}, R::Linear);
    add(text_layer_name(l, "self_attn.o_proj.weight"), {h, q}, R::Linear);
    add(text_layer_name(l, "self_attn.q_norm.weight"), {hd}, R::Norm);
    add(text_layer_name(l, "self_attn.k_norm.weight"), {hd}, R::Norm);
    add(text_layer_name(l, "post_attention_layernorm.weight"), {h}, R::Norm);
    add(text_layer_name(l, "mlp.gate_proj.weight"), {inter, h}, R::Linear);
    add(text_layer_name(l, "mlp.up_proj.weight"), {inter, h}, R::Linear);
    add(text_layer_name(l, "mlp.down_proj.weight"), {h, inter}, R::Linear);
  }
  add(kFinalNorm, {h}, R::Norm);
  return out;
}

ModelConfig model_config_from_spec(const std::string& spec) {
  if (spec == "synthetic:2b" || spec == "synthetic:2B") return config_2b();
  if (spec == "synthetic:tiny") return config_tiny();
  if (spec.starts_with("synthetic:"))
    fail("--model '{}': unknown synthetic model (use synthetic:2b or synthetic:tiny)", spec);
  std::error_code ec;
  std::filesystem::path p(spec);
  if (std::filesystem::is_directory(p, ec)) {
    p /= "config.json";
    if (!std::filesystem::is_regular_file(p, ec)) fail("--model '{}': directory has no config.json", spec);
  }
  if (!std::filesystem::is_regular_file(p, ec))
    fail("--model '{}': expected synthetic:2b, synthetic:tiny, a checkpoint directory with config.json, or a "
         "config.json file",
         spec);
  return ModelConfig::from_json_file(p.string());
}

}  // namespace gpnpu::model
