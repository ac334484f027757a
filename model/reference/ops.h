// The chain's individual ops: pure functions over row-major float spans.
//
// Contract:
//  - Every op is a plain fp32 implementation of one formula of docs/model.md;
//    tensors are row-major [rows][width] float spans; sizes are checked and a mismatch
//    is a gpnpu::Error naming the op, the argument and both sizes.
//  - Results are deterministic and bit-identical on every machine and for every thread
//    count: each output element is computed by exactly one thread with one fixed
//    summation order (dot products use 16 interleaved fp32 partial sums, lane = k mod 16,
//    combined by a fixed halving tree; no FMA contraction, see the top CMakeLists).
//  - Reductions of norms (mean, variance, mean of squares) are accumulated in double;
//    the normalised value and the scaling are fp32, as in the PyTorch fp32 reference.
//  - Weights of linear layers are Matrix views [out][in] that are either fp32 in memory
//    or dequantised block by block by a loader (W4A16 codes, bf16 rows of a mapped
//    checkpoint), so a 2B model never needs its weights expanded to fp32 at once.
//  - Nothing here rounds to fp16: the chain applies its rounding points on op outputs.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

namespace gpnpu::model::ops {

// W4A16 codes that linear() may read directly, dequantising each weight in registers
// as w = float(int(q) - z) * s, the very operations `load` performs, so the products
// keep their bits: row r's codes start at codes + r * row_stride, two per byte (the even
// column in the low nibble); scales (fp16 bits) and zeros are [rows][nblocks] for blocks
// of `block` columns. Set only where `load` is exactly that (no fp16 columns).
struct W4Codes {
  const uint8_t* codes = nullptr;
  const uint16_t* scales = nullptr;
  const uint8_t* zeros = nullptr;
  int64_t row_stride = 0, nblocks = 0;
  int64_t block = 0;
};

// A weight matrix [rows = out features][cols = in features].
struct Matrix {
  std::string name;        // for error messages (the checkpoint tensor name)
  int64_t rows = 0, cols = 0;
  const float* f32 = nullptr;  // row-major fp32 data, if it is held so
  // Otherwise: writes rows [row0, row0 + n) as fp32 into dst (n * cols floats).
  // Must be thread-safe (called concurrently for disjoint rows).
  std::function<void(int64_t row0, int64_t n, float* dst)> load;
  // Optionally, the codes `load` dequantises (valid while `load` lives): linear() reads
  // them directly for a few activation rows (decode), where dequantising each weight
  // into memory first would cost more than the product.
  W4Codes w4;

  static Matrix dense(std::string name, int64_t rows, int64_t cols, const float* data);
  // Row r as fp32: either a pointer into f32 or `scratch` (cols floats) after loading.
  const float* row(int64_t r, float* scratch) const;
};

// ---- elementary -----------------------------------------------------------------------

// sum_k a[k]*b[k] with the fixed 16-lane order shared by linear() and attention().
float dot(const float* a, const float* b, int64_t n);
void round_f16_inplace(std::span<float> x);  // each value to the nearest fp16, ties to even
void add_inplace(std::span<float> x, std::span<const float> y);  // x += y (residuals)

// ---- norms ----------------------------------------------------------------------------

// y[r] = w * (x[r] / sqrt(mean(x[r]^2) + eps)); rows = x.size() / dim. y may alias x.
void rmsnorm_rows(std::span<const float> x, std::span<float> y, int dim,
                  std::span<const float> w, float eps);
// Per-head RMSNorm in place: each row is `heads` consecutive vectors of head_dim,
// every head normalised with the same weight w[head_dim] (Qwen3 q_norm / k_norm).
void rmsnorm_heads(std::span<float> x, int heads, int head_dim, std::span<const float> w,
                   float eps);
// y[r] = (x[r] - mean) / sqrt(var + eps) * w + b, biased variance. y may alias x.
void layernorm_rows(std::span<const float> x, std::span<float> y, int dim,
                    std::span<const float> w, std::span<const float> b, float eps);

// ---- linear ---------------------------------------------------------------------------

// y[m][o] = dot(x[m], W[o]) + bias[o]  (bias may be empty). rows = x.size() / W.cols.
// threads > 1 splits the output features into contiguous ranges; the result does not
// depend on the thread count, nor on whether W.w4 is read directly or through W.load.
void linear(std::span<const float> x, const Matrix& W, std::span<const float> bias,
            std::span<float> y, int threads = 1);
// Which path linear() takes for M activation rows of W: "f32" (weights in memory), "load"
// (dequantised into a buffer block by block) or "w4-avx512" / "w4-avx2" (codes read
// directly: W.w4 set, M < 8, cols and the block a multiple of 16, and the CPU has the
// instructions). A copy of W with w4 cleared takes "load", the
// definition the direct paths are checked against.
const char* linear_path(const Matrix& W, int64_t M);
// Tests: the widest instruction set the direct paths may use (2 = AVX-512, 1 = AVX2,
// 0 = none: "load"); returns the previous limit. Not thread-safe against running linear().
int limit_w4_isa(int level);

// ---- activations ----------------------------------------------------------------------

// 0.5*z*(1 + tanh(sqrt(2/pi)*(z + 0.044715*z^3)))   (gelu_pytorch_tanh, tower block MLP)
void gelu_tanh(std::span<float> x);
// 0.5*z*(1 + erf(z/sqrt(2)))                         (nn.GELU(), the mergers)
void gelu_erf(std::span<float> x);
float gelu_tanh(float z);
float gelu_erf(float z);
float silu(float z);  // z / (1 + exp(-z))
// out[i] = silu(gate[i]) * up[i]; out may alias gate or up.
void silu_mul(std::span<const float> gate, std::span<const float> up, std::span<float> out);
// The SwiGLU MLP: y = Wdown( silu(Wgate x) * (Wup x) ); rows = x.size() / Wgate.cols.
void mlp_swiglu(std::span<const float> x, const Matrix& Wgate, const Matrix& Wup,
                const Matrix& Wdown, std::span<float> y, int threads = 1);

// ---- rotary embeddings ----------------------------------------------------------------

// Rotate-half rotation of one head vector x[head_dim] by angles a[head_dim/2]:
// x'[d] = x[d] cos a[d] - x[d+h] sin a[d], x'[d+h] = x[d+h] cos a[d] + x[d] sin a[d],
// h = head_dim/2. cos and sin are fp32 values of a (std::cos/std::sin of a float).
void rotate_half(float* x, const float* cos_a, const float* sin_a, int head_dim);

// Inverse frequencies 1/theta^(2j/dim), j < dim/2, computed in fp32 as HF does
// (exponent float(2j)/dim in fp32, theta^e with powf, then 1/x).
std::vector<float> inv_freq(float theta, int dim);

// The vision tower's 2-D RoPE, in place on x [rows][heads*head_dim] (Q or K).
// rq[n] = (grid row r, grid col q) of patch n. head_dim/4 frequencies 1/theta^(4k/head_dim):
// angle[k] = r*inv[k], angle[head_dim/4 + k] = q*inv[k] (rotary half-width head_dim/2).
void rope_2d(std::span<float> x, int heads, int head_dim, std::span<const std::array<int, 2>> rq,
             float theta = 10000.0f);

// Per-frequency axis of interleaved M-RoPE (0 = t, 1 = h, 2 = w) for head_dim/2 frequencies:
// j%3==1 and j < 3*section[1] -> h; j%3==2 and j < 3*section[2] -> w; everything else t.
std::vector<int> mrope_axes(std::span<const int> section, int head_dim);
// The tables the RoPE kernel (kernels/rope.h) applies, fp32 [rows][head_dim] each, with
// the same angles as mrope / rope_2d above: angle[j] = pos * inv_freq[j], j < hd/2,
// cos/sin of a float as std::cos/std::sin, duplicated to cat(a, a).
void rope_tables_mrope(std::span<const std::array<int, 3>> pos, int head_dim, float theta,
                       std::span<const int> section, std::vector<float>& cos_t, std::vector<float>& sin_t);
void rope_tables_2d(std::span<const std::array<int, 2>> rq, int head_dim, float theta,
                    std::vector<float>& cos_t, std::vector<float>& sin_t);
// Interleaved M-RoPE in place on x [rows][heads*head_dim]; pos[n] = (t, h, w) of row n.
void mrope(std::span<float> x, int heads, int head_dim, std::span<const std::array<int, 3>> pos,
           float theta, std::span<const int> section);

// ---- attention ------------------------------------------------------------------------

struct AttnShape {
  int q_heads = 0, kv_heads = 0, head_dim = 0;  // query head h reads kv head h / (q/kv)
  float scale = 0;                              // usually 1/sqrt(head_dim)
  bool causal = false;
  // Causal only: absolute position of query row 0; query i sees keys j <= q_offset + i.
  // Prefill: 0. Decode against a cache of n keys (the new one included): n - 1.
  int64_t q_offset = 0;
};
// out[i][h] = sum_j softmax_j(scale * q[i][h].k[j][kvh]) v[j][kvh], max-subtracted softmax
// in fp32 (exp of s - max, divided by the sum). q, out: [nq][q_heads*head_dim];
// k, v: [nk][kv_heads*head_dim] (nk = k.size()/(kv_heads*head_dim)).
// threads > 1 splits (query row, head) pairs; results do not depend on it.
void attention(std::span<const float> q, std::span<const float> k, std::span<const float> v,
               std::span<float> out, const AttnShape& s, int threads = 1);

// ---- vision-specific ------------------------------------------------------------------

// torch.linspace(start, end, steps) in fp32, reproducing its two-sided evaluation.
std::vector<float> linspace_f32(float start, float end, int steps);
// Merge-window order (docs 2.3): patch n of the tower sits at grid (r, q) = result[n].
std::vector<std::array<int, 2>> merge_window_order(int gh, int gw, int merge);
// Bilinear position embedding for a gh x gw patch grid from a side x side table
// [side*side][dim], emitted in merge-window order: out [gh*gw][dim]. Weights
// (1-dh)(1-dw), (1-dh)dw, dh(1-dw), dh*dw in fp32, terms summed in that order.
void pos_embed_bilinear(std::span<const float> table, int side, int dim, int gh, int gw,
                        int merge, std::span<float> out);
// The 2x2 shuffle of the patch merger: in merge-window order the merge*merge patches of
// one window are consecutive rows, so [n][dim] -> [n/merge^2][merge^2*dim] keeps the
// memory order. Checks n % merge^2 == 0 and copies (out may alias x).
void merge_shuffle(std::span<const float> x, int dim, int merge, std::span<float> out);

// ---- language-model specific ----------------------------------------------------------

// out[i] = table[ids[i]] (rows loaded through the Matrix); ids checked against rows.
void embed_lookup(const Matrix& table, std::span<const int> ids, std::span<float> out);
// x[positions[i]] = src[i]: the image-token splice of the final merger's rows.
void splice_rows(std::span<float> x, int dim, std::span<const int> positions,
                 std::span<const float> src);
// x[positions[i]] += src[i]: the DeepStack add after the first LM layers.
void add_rows_at(std::span<float> x, int dim, std::span<const int> positions,
                 std::span<const float> src);
// Tied head: logits[m][v] = dot(x[m], E[v]) over the embedding table (linear, no bias).
void tied_head(std::span<const float> x, const Matrix& embed, std::span<float> logits,
               int threads = 1);

// Index of the largest value (the first one on ties).
int argmax(std::span<const float> x);

}  // namespace gpnpu::model::ops
