// Seeded synthetic Qwen3-VL checkpoints: the real tensor names and shapes, bf16,
// values scaled like a trained model, written in the Hugging Face directory layout
// (config.json + model.safetensors) so the real loader reads them.
//
// Contract:
//  - Deterministic and identical on every machine and for any thread count: values come
//    from a counter-based splitmix64 stream keyed by (seed, tensor name, chunk of
//    kSynthChunk elements), turned into normals by the Marsaglia polar form of
//    Box-Muller with our own log (no libm transcendental calls).
//  - Scales (std of the normal draw):
//      norm weights             1 + 0.02 * N   (LayerNorm and RMSNorm, incl. q/k norms)
//      biases                   0.02 * N
//      linear weights           0.02 * N
//      tower attn.qkv rows of Q and K: 0.12 * sqrt(128 / vision width) * N (tiny: 0.12,
//                               2B: 0.0424; V rows 0.02): attention must not be uniform,
//                               or the tower's 2-D RoPE would be invisible, nor so sharp
//                               (scores of std ~15 with 0.12 at width 1024) that fp16
//                               activations make the tower diverge from fp32: the scores
//                               q.k / sqrt(head_dim) have std ~1.8 at every width
//      learned position table   0.3 * N (so the position embedding matters)
//      embed_tokens             0.02 * N
//    (docs/testing.md model-test item 2 says why.)
//  - Streams: generates and writes one tensor (in chunks) at a time, so the 2B model
//    (4.26 GB) needs only a few MB of memory beyond the page cache.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/checkpoint/config.h"

namespace gpnpu::model {

inline constexpr int64_t kSynthChunk = 1 << 16;  // elements per independently seeded chunk

// The generation of the synthetic values: bumped whenever a scale or the generator
// changes, so caches of synthetic bundles (gpnpu describe) never serve stale values.
// 2: the tower's Q/K std scales with sqrt(128 / width).
inline constexpr int kSyntheticGeneration = 2;

// A planted outlier (make-checkpoint options, docs/quantisation.md "Numerics"): after the
// normal draw, tensor[row][col] = value, or, with row < 0, every element of column col
// multiplied by value. Rows and columns are those of TensorSpec (a 1-D tensor is one
// column: row = element, col = 0). Values are stored in bf16 like every other.
struct Outlier {
  std::string tensor;
  int64_t row = 0, col = 0;
  float value = 0;
};

struct SyntheticOptions {
  uint64_t seed = 0;
  int threads = 0;        // 0: hardware_concurrency(); output does not depend on it
  bool no_data = false;   // header + sparse zero data only (fast layout test)
  // Called after each written batch with the tensor bytes written and their total.
  std::function<void(uint64_t done, uint64_t total)> progress = {};
  std::vector<Outlier> outliers = {};  // planted after the normal draw, in order
};

struct SyntheticStats {
  int64_t tensors = 0;
  int64_t params = 0;
  uint64_t bytes = 0;  // model.safetensors size
  double seconds = 0;
};

// Writes out_dir/config.json and out_dir/model.safetensors (creates out_dir).
SyntheticStats make_synthetic_checkpoint(const ModelConfig& cfg, const std::string& out_dir,
                                         const SyntheticOptions& opt);

// The std and mean of a tensor's synthetic values (the table above), from its spec.
struct SynthScale {
  float mean = 0, std = 0.02f;
  int64_t wide_rows = 0;  // the first wide_rows rows use wide_std (tower Q and K rows)
  float wide_std = 0;
};
SynthScale synthetic_scale(const TensorSpec& spec, const ModelConfig& cfg);

// Fills out[0..count) with elements [first, first+count) of tensor `name`'s stream,
// as floats before bf16 rounding (exposed for tests of determinism and statistics).
void synthetic_values(const TensorSpec& spec, const ModelConfig& cfg, uint64_t seed,
                      int64_t first, int64_t count, float* out);

// Deterministic PRNG pieces (also used by tests to make matrices).
uint64_t splitmix64(uint64_t& state);
double det_log(double x);  // natural log, portable (no libm), |rel err| < 1e-15 for x > 0
struct NormalRng {
  explicit NormalRng(uint64_t seed) : state(seed) {}
  double uniform();   // in [0, 1), 53 bits
  double normal();    // N(0,1), Marsaglia polar method
  uint64_t state;
  bool has_spare = false;
  double spare = 0;
};

}  // namespace gpnpu::model
