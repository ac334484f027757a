// Qwen3-VL model configuration: the shapes and constants the host, the compiler,
// the chain (C++ float reference) and the synthetic-checkpoint generator share.
//
// Contract:
//  - ModelConfig mirrors the Hugging Face Qwen3-VL config.json (keys of
//    docs/model.md section 1). from_json_file() reads such a file, accepts
//    both the older layout (text_config.rope_theta / text_config.rope_scaling.mrope_section)
//    and the newer one (text_config.rope_parameters.{rope_theta,mrope_section}),
//    and validates it; every problem is a gpnpu::Error naming the file and the key.
//  - to_json() writes the HF layout back (older layout, plus the values needed to
//    read it again), so from_json(to_json(c)) == c.
//  - config_2b() is Qwen3-VL-2B-Instruct exactly; config_tiny() is a few layers with
//    small widths but every feature of the 2B model (GQA, q/k norm, M-RoPE with its
//    own sections, tower 2-D RoPE, 3 DeepStack taps with more LM layers than taps,
//    mergers, a position-table side other than 48, the full 151936-row vocabulary).
//  - expected_tensors() lists every checkpoint tensor (HF names, shapes, role) in
//    the order of tests/model/data/qwen3-vl-2b-tensors.txt; lm_head.weight is not listed (tied).
// Nothing here hard-codes the 2B numbers except config_2b(): code must read them from
// the config (tap indices, position-table side, head sizes, M-RoPE sections).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace gpnpu::model {

struct VisionConfig {
  int depth = 0;                  // ViT blocks
  int hidden_size = 0;            // tower width
  int num_heads = 0;              // head_dim = hidden_size / num_heads
  int intermediate_size = 0;      // block MLP width
  int patch_size = 16;            // pixels per patch side
  int temporal_patch_size = 2;    // frames per patch (an image is duplicated x2)
  int spatial_merge_size = 2;     // a merge x merge window of patches -> one LM token
  int in_channels = 3;
  int out_hidden_size = 0;        // merger output width (= text hidden_size)
  int num_position_embeddings = 0;  // learned table rows; a square grid side x side
  std::vector<int> deepstack_visual_indexes;  // 0-based block indices tapped, in order
  std::string hidden_act = "gelu_pytorch_tanh";  // block MLP activation (mergers use erf GELU)
  double layer_norm_eps = 1e-6;   // all tower LayerNorms (not an HF key; fixed in the model code)

  int head_dim() const { return hidden_size / num_heads; }
  // Flattened patch length: in_channels * temporal_patch_size * patch_size^2 (1536 for 2B).
  int patch_dim() const { return in_channels * temporal_patch_size * patch_size * patch_size; }
  // Side of the learned position grid: sqrt(num_position_embeddings) (48 for 2B).
  int pos_grid_side() const;
  // Merged (post-shuffle) width: hidden_size * spatial_merge_size^2 (4096 for 2B).
  int merged_dim() const { return hidden_size * spatial_merge_size * spatial_merge_size; }

  bool operator==(const VisionConfig&) const = default;
};

struct TextConfig {
  int hidden_size = 0;
  int num_hidden_layers = 0;
  int num_attention_heads = 0;
  int num_key_value_heads = 0;    // GQA: query head h uses kv head h / (heads / kv_heads)
  int head_dim = 0;               // per head; q width = heads*head_dim, kv width = kv_heads*head_dim
  int intermediate_size = 0;      // SwiGLU width
  int vocab_size = 0;             // embedding rows (151936; tokenizer ids 0..151668)
  double rms_norm_eps = 1e-6;
  double rope_theta = 5e6;
  std::vector<int> mrope_section;  // (t, h, w) frequency counts; sum == head_dim / 2
  bool mrope_interleaved = true;   // Qwen3-VL: interleaved axis assignment
  bool tie_word_embeddings = true; // lm_head = embed_tokens
  int64_t max_position_embeddings = 262144;
  std::string hidden_act = "silu";
  bool attention_bias = false;     // Qwen3-VL: no q/k/v/o biases

  int q_dim() const { return num_attention_heads * head_dim; }
  int kv_dim() const { return num_key_value_heads * head_dim; }

  bool operator==(const TextConfig&) const = default;
};

struct ModelConfig {
  std::string name;               // "2b", "tiny" or the file it came from (not compared)
  VisionConfig vision;
  TextConfig text;
  int image_token_id = 151655;    // <|image_pad|>
  int video_token_id = 151656;    // <|video_pad|>
  int vision_start_token_id = 151652;
  int vision_end_token_id = 151653;
  int bos_token_id = 151643;      // <|endoftext|>
  int eos_token_id = 151645;      // <|im_end|>
  bool tie_word_embeddings = true;

  // Reads an HF config.json; throws gpnpu::Error naming the file and key on any problem.
  static ModelConfig from_json_file(const std::string& path);
  // `where` names the source in error messages (a file path).
  static ModelConfig from_json(const nlohmann::json& j, const std::string& where);
  nlohmann::json to_json() const;
  // Consistency checks (divisibility, section sums, tap indices in range, ids < vocab);
  // throws gpnpu::Error naming `where` and the offending key.
  void validate(const std::string& where) const;

  bool operator==(const ModelConfig& o) const {
    return vision == o.vision && text == o.text && image_token_id == o.image_token_id &&
           video_token_id == o.video_token_id && vision_start_token_id == o.vision_start_token_id &&
           vision_end_token_id == o.vision_end_token_id && bos_token_id == o.bos_token_id &&
           eos_token_id == o.eos_token_id && tie_word_embeddings == o.tie_word_embeddings;
  }
};

ModelConfig config_2b();    // Qwen3-VL-2B-Instruct (spec section 1)
ModelConfig config_tiny();  // every feature, small widths, full vocabulary
// "2b" or "tiny"; anything else is a gpnpu::Error listing the names.
ModelConfig config_by_name(const std::string& name);

// ---- checkpoint tensor list -------------------------------------------------------

enum class TensorRole {
  Linear,      // 2-D [out, in] weight of a Linear layer: quantised to W4A16
  PatchEmbed,  // Conv3d weight [out, C, T, P, P]; used (and quantised) as [out, C*T*P*P]
  Embedding,   // embed_tokens [vocab, hidden]; tied LM head; quantised
  PosEmbed,    // learned position table [grid^2, hidden]; kept float
  Norm,        // LayerNorm / RMSNorm weight; kept float
  Bias,        // bias vector; kept float
};

struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;
  TensorRole role;

  int64_t numel() const;
  // True for Linear, PatchEmbed and Embedding: the tensors the W4A16 bundle quantises.
  bool quantised() const;
  // The 2-D [rows, cols] matrix view used by the quantiser (rows = shape[0]).
  int64_t rows() const { return shape.at(0); }
  int64_t cols() const { return numel() / shape.at(0); }
};

// Every tensor of the checkpoint in HF order (625 for 2B). lm_head.weight is absent
// because the embeddings are tied (a loader accepts it if present).
std::vector<TensorSpec> expected_tensors(const ModelConfig& cfg);

// HF tensor-name helpers, so callers never spell the prefixes by hand.
// vision_block_name(3, "attn.qkv.weight") == "model.visual.blocks.3.attn.qkv.weight"
std::string vision_block_name(int block, std::string_view leaf);
// deepstack_merger_name(1, "norm.weight") == "model.visual.deepstack_merger_list.1.norm.weight"
std::string deepstack_merger_name(int j, std::string_view leaf);
// text_layer_name(5, "mlp.up_proj.weight") == "model.language_model.layers.5.mlp.up_proj.weight"
std::string text_layer_name(int layer, std::string_view leaf);
inline constexpr const char* kPatchEmbedWeight = "model.visual.patch_embed.proj.weight";
inline constexpr const char* kPatchEmbedBias = "model.visual.patch_embed.proj.bias";
inline constexpr const char* kPosEmbed = "model.visual.pos_embed.weight";
inline constexpr const char* kMergerPrefix = "model.visual.merger.";  // + norm.weight, linear_fc1.weight, ...
inline constexpr const char* kEmbedTokens = "model.language_model.embed_tokens.weight";
inline constexpr const char* kFinalNorm = "model.language_model.norm.weight";
inline constexpr const char* kLmHead = "lm_head.weight";  // absent when tied

// A model by name: "synthetic:2b" (config_2b), "synthetic:tiny" (config_tiny), a
// checkpoint directory (its config.json) or a config.json file; gpnpu::Error otherwise.
ModelConfig model_config_from_spec(const std::string& spec);

}  // namespace gpnpu::model
