// Seeded synthetic checkpoints. See synthetic.h for the contract and the scales.
#include "model/checkpoint/synthetic.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include <fmt/format.h>

#include "isa/atomic_file.h"
#include "isa/error.h"
#include "model/checkpoint/safetensors.h"

namespace gpnpu::model {

namespace fs = std::filesystem;

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

double det_log(double x) {
  // x = m * 2^e with m in [sqrt(1/2), sqrt(2)); log m = 2 atanh(s), s = (m-1)/(m+1),
  // |s| <= 0.1716, s^2 <= 0.0295; 12 terms of the odd series reach < 1e-17.
  int e = 0;
  double m = std::frexp(x, &e);  // exact; m in [0.5, 1)
  if (m < 0.70710678118654752440) {
    m *= 2;
    e -= 1;
  }
  const double s = (m - 1) / (m + 1);
  const double s2 = s * s;
  double p = 1.0 / 25;
  for (int k = 11; k >= 0; --k) p = 1.0 / (2 * k + 1) + s2 * p;
  return 2 * s * p + double(e) * 0.69314718055994530942;
}

double NormalRng::uniform() { return double(splitmix64(state) >> 11) * 0x1.0p-53; }

double NormalRng::normal() {
  if (has_spare) {
    has_spare = false;
    return spare;
  }
  double u, v, s;
  do {
    u = 2 * uniform() - 1;
    v = 2 * uniform() - 1;
    s = u * u + v * v;
  } while (s >= 1 || s == 0);
  const double f = std::sqrt(-2 * det_log(s) / s);  // sqrt is correctly rounded: portable
  spare = v * f;
  has_spare = true;
  return u * f;
}

namespace {

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

uint64_t chunk_seed(uint64_t seed, const std::string& name, int64_t chunk) {
  uint64_t st = seed ^ fnv1a(name);
  uint64_t k = splitmix64(st);
  st = k + uint64_t(chunk) * 0xD1B54A32D192ED03ull;
  return splitmix64(st);
}

int resolve_threads(int t) {
  if (t > 0) return t;
  unsigned h = std::thread::hardware_concurrency();
  return h ? int(h) : 1;
}

}  // namespace

SynthScale synthetic_scale(const TensorSpec& spec, const ModelConfig& cfg) {
  SynthScale s;
  switch (spec.role) {
    case TensorRole::Norm: s.mean = 1.0f; s.std = 0.02f; break;
    case TensorRole::Bias: s.std = 0.02f; break;
    case TensorRole::PosEmbed: s.std = 0.3f; break;
    case TensorRole::Embedding:
    case TensorRole::PatchEmbed:
    case TensorRole::Linear: s.std = 0.02f; break;
  }
  const std::string suffix = ".attn.qkv.weight";
  if (spec.role == TensorRole::Linear && spec.name.size() > suffix.size() &&
      spec.name.compare(spec.name.size() - suffix.size(), suffix.size(), suffix) == 0 &&
      spec.name.rfind("model.visual.blocks.", 0) == 0) {
    s.wide_rows = 2 * int64_t(cfg.vision.hidden_size);  // Q rows then K rows
    // 0.12 at the tiny tower's width 128, scaled by sqrt(128 / width): a LayerNorm
    // output (unit variance) then gives q and k of std 0.12 * sqrt(128) = 1.36 and
    // scores q.k / sqrt(head_dim) of std ~1.8 at every width (2B: 0.0424). A fixed 0.12
    // gave the 2B tower (width 1024) scores of std ~15: a chaotic tower whose relative
    // error grows ~2.5x per block, so that fp16 activations alone moved the 2B image
    // logits to cosine 0.953 against fp32 (docs/testing.md model-test item 2).
    s.wide_std = float(0.12 * std::sqrt(128.0 / double(cfg.vision.hidden_size)));
  }
  return s;
}

void synthetic_values(const TensorSpec& spec, const ModelConfig& cfg, uint64_t seed, int64_t first, int64_t count,
                      float* out) {
  if (first < 0 || count < 0 || first + count > spec.numel())
    fail("synthetic_values: elements [{}, {}) are outside tensor '{}' of {} elements", first, first + count, spec.name,
         spec.numel());
  const SynthScale sc = synthetic_scale(spec, cfg);
  const int64_t cols = spec.cols();
  const int64_t wide_end = sc.wide_rows * cols;  // element index where the wide rows end
  int64_t i = first;
  const int64_t end = first + count;
  while (i < end) {
    const int64_t chunk = i / kSynthChunk;
    const int64_t c0 = chunk * kSynthChunk;
    const int64_t c1 = std::min(c0 + kSynthChunk, spec.numel());
    NormalRng rng(chunk_seed(seed, spec.name, chunk));
    for (int64_t k = c0; k < i; ++k) rng.normal();  // skip to `i` inside the chunk
    const int64_t stop = std::min(c1, end);
    for (; i < stop; ++i) {
      const double n = rng.normal();
      const double sd = i < wide_end ? sc.wide_std : sc.std;
      out[i - first] = float(double(sc.mean) + sd * n);
    }
  }
}

SyntheticStats make_synthetic_checkpoint(const ModelConfig& cfg, const std::string& out_dir,
                                         const SyntheticOptions& opt) {
  auto t0 = std::chrono::steady_clock::now();
  cfg.validate(cfg.name.empty() ? "config" : cfg.name);
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) fail("{}: cannot create the output directory: {}", out_dir, ec.message());
  {
    const std::string p = (fs::path(out_dir) / "config.json").string();
    write_file_atomic(p, cfg.to_json().dump(2) + "\n");
  }
  const auto specs = expected_tensors(cfg);
  std::string planted;
  for (const Outlier& o : opt.outliers) {
    auto it = std::find_if(specs.begin(), specs.end(), [&](const TensorSpec& t) { return t.name == o.tensor; });
    if (it == specs.end())
      fail("outlier in '{}': the model has no such tensor (tensor names as in the checkpoint, e.g. "
           "model.language_model.embed_tokens.weight)", o.tensor);
    const int64_t rows = it->numel() / it->cols();
    if (o.row >= rows || o.col < 0 || o.col >= it->cols())
      fail("outlier in '{}': row {} column {} is outside its {} x {} elements", o.tensor, o.row, o.col, rows, it->cols());
    planted += fmt::format("{}{}[{}][{}]{}{}", planted.empty() ? "" : "; ", o.tensor, o.row < 0 ? std::string("*") : std::to_string(o.row),
                           o.col, o.row < 0 ? "*=" : "=", o.value);
  }
  std::vector<TensorDecl> decls;
  SyntheticStats st;
  for (const auto& s : specs) {
    decls.push_back({s.name, DType::BF16, s.shape});
    st.params += s.numel();
  }
  st.tensors = int64_t(specs.size());
  const std::string path = (fs::path(out_dir) / "model.safetensors").string();
  std::map<std::string, std::string> meta = {{"format", "pt"},
                                             {"generator", "gpnpu make-checkpoint"},
                                             {"seed", std::to_string(opt.seed)}};
  if (!planted.empty()) meta["outliers"] = planted;
  SafetensorsWriter wr(path, decls, meta);
  if (opt.no_data) {
    wr.skip_rest();
  } else {
    const int nt = resolve_threads(opt.threads);
    // One batch = nt * 16 chunks: generated in parallel (chunk-aligned, so the values do
    // not depend on the split), then written in order.
    const int64_t batch = int64_t(nt) * 16 * kSynthChunk;
    std::vector<float> vals;
    std::vector<uint16_t> bf;
    const uint64_t total_bytes = uint64_t(st.params) * 2;
    uint64_t done_bytes = 0;
    for (const auto& s : specs) {
      const int64_t n = s.numel();
      wr.begin_tensor(s.name);
      for (int64_t b0 = 0; b0 < n; b0 += batch) {
        const int64_t m = std::min(batch, n - b0);
        vals.resize(size_t(m));
        bf.resize(size_t(m));
        const int64_t nchunks = (m + kSynthChunk - 1) / kSynthChunk;
        auto work = [&](int t) {
          for (int64_t c = t; c < nchunks; c += nt) {
            const int64_t a = c * kSynthChunk, e = std::min(m, a + kSynthChunk);
            synthetic_values(s, cfg, opt.seed, b0 + a, e - a, vals.data() + a);
            for (int64_t k = a; k < e; ++k) bf[size_t(k)] = f32_to_bf16(vals[size_t(k)]);
          }
        };
        if (nt == 1 || nchunks == 1) {
          work(0);  // stride nt from chunk 0 covers the only chunk; with nt == 1, all
        } else {
          std::vector<std::thread> th;
          for (int t = 0; t < nt; ++t) th.emplace_back(work, t);
          for (auto& x : th) x.join();
        }
        for (const Outlier& o : opt.outliers) {  // rare: a few elements, or one column
          if (o.tensor != s.name) continue;
          const int64_t cols = s.cols();
          for (int64_t k = o.row < 0 ? (o.col - b0 % cols + cols) % cols : o.row * cols + o.col - b0; k >= 0 && k < m;
               k += o.row < 0 ? cols : m) {
            vals[size_t(k)] = o.row < 0 ? vals[size_t(k)] * o.value : o.value;
            bf[size_t(k)] = f32_to_bf16(vals[size_t(k)]);
          }
        }
        wr.append(bf.data(), size_t(m) * 2);
        done_bytes += uint64_t(m) * 2;
        if (opt.progress) opt.progress(done_bytes, total_bytes);
      }
    }
  }
  wr.finish();
  st.bytes = fs::file_size(path);
  st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return st;
}

}  // namespace gpnpu::model
