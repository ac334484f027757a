// The chain: the C++ float reference of the whole Qwen3-VL model (docs/model.md),
// built from the ops of model/reference/ops.h. It gates the simulated device step by step.
//
// Contract:
//  - fp32 compute on fp32 weights: either the original checkpoint (bf16/f16/f32 rows
//    converted on the fly: "fp32 mode") or the W4A16 bundle, whose very codes are
//    dequantised row block by row block ("W4A16 mode"; docs/testing.md model-test item 6). Weights stay
//    in their source; the WeightSource must outlive the Chain.
//  - ChainOptions::round_activations_f16 rounds every op output to fp16, where the device
//    keeps activations in fp16 memory (the kernels' rounding points); off by default, for
//    comparisons with the PyTorch fp32 reference. Accumulation is always fp32 (norm
//    statistics in double).
//  - Deterministic: the same inputs give bit-identical logits for any thread count, and
//    a decode step gives bit-identical logits to a prefill of the whole sequence
//    (each row is computed by the same code whatever the batch of rows).
//  - Prefill and decode append to the KV cache (post-RoPE K and V per layer); the vision
//    tower, the splice and DeepStack run only for the rows of a prefill that contains
//    image pads (HF drops pixel inputs at decode).
//  - Intermediates: ChainOptions::on_tensor is called with every named intermediate
//    (names below); when it is empty nothing is copied. TensorRecorder keeps the ones
//    you ask for.
//
// Intermediate names (shape in brackets; N patches, M = N/merge^2 image tokens, S rows of
// this prefill/decode call, Dv tower width, D LM width):
//   vision.{i}.patch_embed [N,Dv]   vision.{i}.pos_embed [N,Dv] (interpolated table)
//   vision.{i}.embed [N,Dv] (sum)   vision.{i}.block.{b}.q / .k (post-RoPE) [N,Dv]
//   vision.{i}.block.{b}.attn [N,Dv] (heads concatenated, before proj)
//   vision.{i}.block.{b}.attn_res [N,Dv]   vision.{i}.block.{b}.mlp_act [N,4Dv]
//   vision.{i}.block.{b}.out [N,Dv]   vision.{i}.deepstack.{j} [M,D]   vision.{i}.merger [M,D]
//   (i = image index in the call, b block, j tap)
//   lm.embed [S,D] (lookup)  lm.input [S,D] (after the image splice)
//   lm.layer.{l}.q [S,q_dim] lm.layer.{l}.k / .v [S,kv_dim] (q, k post-norm post-RoPE)
//   lm.layer.{l}.attn [S,q_dim]  lm.layer.{l}.attn_out [S,D] (o_proj)  lm.layer.{l}.attn_res [S,D]
//   lm.layer.{l}.mlp_act [S,F]  lm.layer.{l}.mlp_out [S,D] (down_proj)
//   lm.layer.{l}.out [S,D] (after the DeepStack add)  lm.final_norm [1,D]  logits [1,V]
#pragma once
#include <array>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "model/checkpoint/config.h"
#include "model/reference/ops.h"

namespace gpnpu::model {

class Checkpoint;
class QuantBundle;

// Where the chain's weights come from, by HF tensor name. Shapes are checked by element
// count (the chain knows them from the config); a mismatch or a missing tensor is a
// gpnpu::Error naming the source, the tensor, expected and actual sizes.
class WeightSource {
 public:
  virtual ~WeightSource() = default;
  virtual std::string describe() const = 0;  // "checkpoint DIR", "W4A16 bundle FILE", ...
  virtual bool has(const std::string& name) const = 0;
  // A whole (small) tensor as fp32: norms, biases, the position table.
  virtual std::vector<float> vector(const std::string& name, int64_t numel) const = 0;
  // A weight as a [rows][cols] matrix view (Conv3d flattened); loaders are thread-safe.
  virtual ops::Matrix matrix(const std::string& name, int64_t rows, int64_t cols) const = 0;
};

// fp32 weights held in memory (tests, synthetic models, deliberately corrupted copies).
class MemoryWeights : public WeightSource {
 public:
  void set(const std::string& name, std::vector<float> data) { t_[name] = std::move(data); }
  std::vector<float>& at(const std::string& name);  // gpnpu::Error if missing
  const std::map<std::string, std::vector<float>>& tensors() const { return t_; }
  std::string describe() const override { return "in-memory weights"; }
  bool has(const std::string& name) const override { return t_.count(name) != 0; }
  std::vector<float> vector(const std::string& name, int64_t numel) const override;
  ops::Matrix matrix(const std::string& name, int64_t rows, int64_t cols) const override;

 private:
  std::map<std::string, std::vector<float>> t_;
};

// fp32 mode: the original checkpoint, bf16/f16/f32 rows converted as they are read.
std::unique_ptr<WeightSource> checkpoint_weights(const Checkpoint& ck);
// W4A16 mode: the bundle's quantised tensors dequantised from their codes (w = (q - z) s),
// its float tensors as stored. The codes are read from the bundle's mapping (no copy);
// scales and zeros are copied once.
std::unique_ptr<WeightSource> bundle_weights(const QuantBundle& bundle);
// Every tensor of the source copied into memory as fp32 (for tests that corrupt one).
MemoryWeights copy_weights(const WeightSource& src, const ModelConfig& cfg);

using TensorHook = std::function<void(const std::string& name, const std::vector<int64_t>& shape,
                                      std::span<const float> data)>;

// Keeps copies of the intermediates whose names start with one of `prefixes`
// (all of them when empty). Install with opts.on_tensor = rec.hook().
class TensorRecorder {
 public:
  explicit TensorRecorder(std::vector<std::string> prefixes = {}) : prefixes_(std::move(prefixes)) {}
  TensorHook hook();
  struct Entry {
    std::vector<int64_t> shape;
    std::vector<float> data;
  };
  const std::map<std::string, Entry>& entries() const { return e_; }
  const Entry& at(const std::string& name) const;  // gpnpu::Error listing a few names if missing
  void clear() { e_.clear(); }

 private:
  std::vector<std::string> prefixes_;
  std::map<std::string, Entry> e_;
};

struct ChainOptions {
  bool round_activations_f16 = false;  // the device-gating mode: op outputs rounded to fp16
  int threads = 1;                     // results do not depend on it
  bool deepstack = true;               // false drops the DeepStack adds (negative controls only)
  TensorHook on_tensor;                // called with every named intermediate
};

// One image as the tower takes it: grid (t, h, w) in patches and the patch rows
// [t*h*w][patch_dim] in merge-window order (docs 2.3; model/inputs/image.h makes them).
struct ImagePatches {
  int t = 1, h = 0, w = 0;
  std::vector<float> pixels;
};

// What the tower gives the LM for one image.
struct VisionOutput {
  int64_t tokens = 0;                   // M = t*h*w / merge^2
  std::vector<float> embeds;            // [M][D] final merger
  std::vector<std::vector<float>> deepstack;  // per tap: [M][D]
};

struct KvCache {
  int layers = 0, kv_dim = 0;
  int64_t len = 0;                      // cached tokens
  int next_position = 0;                // 1 + the largest position used (decode default)
  std::vector<std::vector<float>> k, v; // [layer][len * kv_dim], post-RoPE K; V
  void clear();
};

struct Generation {
  std::vector<int> tokens;                  // steps greedy tokens
  std::vector<std::vector<float>> logits;   // steps + 1 rows: [0] last prompt position,
                                            // [i] after feeding tokens[i-1]
};

class Chain {
 public:
  Chain(const ModelConfig& cfg, const WeightSource& weights, ChainOptions opt = {});
  ~Chain();
  Chain(const Chain&) = delete;
  Chain& operator=(const Chain&) = delete;

  const ModelConfig& config() const { return cfg_; }
  ChainOptions& options() { return opt_; }

  // The vision tower and mergers for one image.
  VisionOutput vision(const ImagePatches& img, int image_index = 0);

  // Appends ids to the KV cache and returns the logits [vocab] of the last one. Image
  // pads (cfg.image_token_id) are replaced by the images' merger rows in order (their
  // count must match); positions: one (t, h, w) per id, or empty to compute them with
  // get_rope_index (model/inputs/prompt.h) for a prefill that starts an empty cache.
  std::vector<float> prefill(const std::vector<int>& ids, const std::vector<ImagePatches>& images,
                             const std::vector<std::array<int, 3>>& positions = {});
  // One token at `position` (default: cache().next_position on all three axes).
  std::vector<float> decode(int token);
  std::vector<float> decode(int token, std::array<int, 3> position);
  // Greedy: prefill, then `steps` tokens by argmax (stop ids are not honoured).
  Generation generate(const std::vector<int>& ids, const std::vector<ImagePatches>& images,
                      const std::vector<std::array<int, 3>>& positions, int steps);

  KvCache& cache() { return cache_; }
  void reset() { cache_.clear(); }

 private:
  struct Weights;
  void emit(const std::string& name, std::vector<int64_t> shape, std::span<const float> data) const;
  void round(std::span<float> x) const;
  std::vector<float> run_lm(const std::vector<int>& ids, const std::vector<VisionOutput>& vis,
                            const std::vector<std::array<int, 3>>& positions);

  ModelConfig cfg_;
  ChainOptions opt_;
  std::unique_ptr<Weights> w_;
  KvCache cache_;
};

// Cosine similarity in double (the gates' measure).
double cosine(std::span<const float> a, std::span<const float> b);

}  // namespace gpnpu::model
