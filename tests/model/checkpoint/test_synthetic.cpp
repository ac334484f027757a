// Synthetic checkpoint tests: the 2B layout through the real CLI path (header + sparse
// data), determinism across runs and thread counts, pinned values, value scales.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <unistd.h>

#include "isa/error.h"
#include "model/checkpoint/config.h"
#include "model/checkpoint/safetensors.h"
#include "temp_dir.h"
#include "model/checkpoint/synthetic.h"

using namespace gpnpu::model;
namespace fs = std::filesystem;

namespace {

using gpnpu::model::test::TempDir;

// Runs the gpnpu CLI; returns the exit status and stdout+stderr.
std::pair<int, std::string> run_cli(const std::string& args, const std::string& log) {
  std::string cmd = std::string(GPNPU_BINARY) + " " + args + " > " + log + " 2>&1";
  int rc = std::system(cmd.c_str());
  std::ifstream in(log);
  std::stringstream ss;
  ss << in.rdbuf();
  return {WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, ss.str()};
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct Moments {
  double mean = 0, std = 0;
};
Moments moments(const float* x, size_t n) {
  double s = 0, s2 = 0;
  for (size_t i = 0; i < n; ++i) {
    s += x[i];
    s2 += double(x[i]) * x[i];
  }
  Moments m;
  m.mean = s / double(n);
  m.std = std::sqrt(std::max(0.0, s2 / double(n) - m.mean * m.mean));
  return m;
}

}  // namespace

// Acceptance: make-checkpoint --config 2b writes all 625 tensors with the right shapes.
// The test runs the real command with --no-data: the same config.json, declarations and
// header writer as a full run (Synthetic.HeaderIdenticalWithAndWithoutData shows that),
// with the 4.26 GB data region left sparse so the test takes well under a second.
TEST(Synthetic, TwoBCheckpointHeaderHasAll625Tensors) {
  TempDir d("2b");
  auto t0 = std::chrono::steady_clock::now();
  auto [rc, out] = run_cli("make-checkpoint --config 2b --seed 1 --no-data --out " + (d / "m"), d / "log");
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_EQ(rc, 0) << out;
  std::printf("  [synthetic] make-checkpoint --config 2b --no-data: %.2f s\n", secs);

  SafetensorsFile f(d / "m/model.safetensors");
  ASSERT_EQ(f.tensors().size(), 625u);
  EXPECT_EQ(f.file_size(), 8 + f.header_size() + 4255064064ull);
  std::ifstream in(std::string(GPNPU_SOURCE_DIR) + "/tests/model/data/qwen3-vl-2b-tensors.txt");
  ASSERT_TRUE(in);
  std::string line;
  size_t n = 0;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    auto tab = line.find('\t');
    const std::string name = line.substr(0, tab);
    ASSERT_TRUE(f.has(name)) << name;
    const TensorView& t = f.get(name);
    EXPECT_EQ(shape_str(t.shape), line.substr(tab + 1)) << name;
    EXPECT_EQ(t.dtype, DType::BF16) << name;
    ++n;
  }
  EXPECT_EQ(n, 625u);
  EXPECT_EQ(ModelConfig::from_json_file(d / "m/config.json"), config_2b());
  EXPECT_EQ(f.metadata().at("format"), "pt");  // what HF's safe_open expects for PyTorch

  // The loader accepts it through the CLI too.
  auto [rc2, out2] = run_cli("check-checkpoint --model " + (d / "m"), d / "log2");
  EXPECT_EQ(rc2, 0) << out2;
  EXPECT_NE(out2.find("625 tensors"), std::string::npos) << out2;
}

TEST(Synthetic, HeaderIdenticalWithAndWithoutData) {
  TempDir d("hdr");
  const ModelConfig cfg = config_tiny();
  make_synthetic_checkpoint(cfg, d / "full", {.seed = 5, .threads = 2, .no_data = false});
  make_synthetic_checkpoint(cfg, d / "empty", {.seed = 5, .threads = 2, .no_data = true});
  SafetensorsFile a(d / "full/model.safetensors"), b(d / "empty/model.safetensors");
  ASSERT_EQ(a.header_size(), b.header_size());
  EXPECT_EQ(a.file_size(), b.file_size());
  std::string ha = read_bytes(d / "full/model.safetensors").substr(0, 8 + a.header_size());
  std::string hb = read_bytes(d / "empty/model.safetensors").substr(0, 8 + b.header_size());
  EXPECT_EQ(ha, hb);
  EXPECT_EQ(read_bytes(d / "full/config.json"), read_bytes(d / "empty/config.json"));
  // The no-data file is all zeros after the header; the full one is not.
  const TensorView& t = b.get(kPosEmbed);
  EXPECT_EQ(moments(t.to_f32().data(), size_t(t.numel())).std, 0.0);
  EXPECT_GT(moments(a.get(kPosEmbed).to_f32().data(), size_t(t.numel())).std, 0.1);
}

TEST(Synthetic, DeterministicAcrossRunsAndThreads) {
  TempDir d("det");
  const ModelConfig cfg = config_tiny();
  make_synthetic_checkpoint(cfg, d / "a", {.seed = 9, .threads = 1, .no_data = false});
  make_synthetic_checkpoint(cfg, d / "b", {.seed = 9, .threads = 3, .no_data = false});
  const std::string a = read_bytes(d / "a/model.safetensors");
  EXPECT_EQ(a, read_bytes(d / "b/model.safetensors"));
  // The seed matters (every tensor's stream depends on it).
  for (const auto& s : expected_tensors(cfg)) {
    float x[8], y[8];
    synthetic_values(s, cfg, 9, 0, 8, x);
    synthetic_values(s, cfg, 10, 0, 8, y);
    EXPECT_NE(std::memcmp(x, y, sizeof x), 0) << s.name;
  }
}

// Pinned values: a change of the generator (and of every golden made from its
// checkpoints) shows here. Identical on every machine: integer PRNG + IEEE arithmetic.
TEST(Synthetic, PinnedValues) {
  const ModelConfig cfg = config_tiny();
  auto specs = expected_tensors(cfg);
  auto spec = [&](const std::string& n) {
    for (const auto& s : specs)
      if (s.name == n) return s;
    throw std::runtime_error(n);
  };
  float v[4];
  synthetic_values(spec(kPosEmbed), cfg, 0, 0, 4, v);
  std::printf("  [synthetic] pos_embed seed 0: %.9g %.9g %.9g %.9g\n", v[0], v[1], v[2], v[3]);
  uint16_t got[4], want[4] = {0x3da2, 0xbe84, 0x3e5b, 0xbec6};
  for (int i = 0; i < 4; ++i) got[i] = f32_to_bf16(v[i]);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(got[i], want[i]) << i;
  // Reading from the middle of a chunk gives the same values as from its start.
  std::vector<float> all(size_t(kSynthChunk + 10)), part(20);
  synthetic_values(spec(kEmbedTokens), cfg, 7, 0, int64_t(all.size()), all.data());
  synthetic_values(spec(kEmbedTokens), cfg, 7, kSynthChunk - 10, 20, part.data());
  for (int i = 0; i < 20; ++i) EXPECT_EQ(part[size_t(i)], all[size_t(kSynthChunk - 10 + i)]);
  // Past the end of the tensor is an error, not a hang.
  EXPECT_THROW(synthetic_values(spec(kFinalNorm), cfg, 7, 100, 100, part.data()), gpnpu::Error);
}

// The scales of docs/testing.md model-test item 2.
TEST(Synthetic, ValueScales) {
  const ModelConfig cfg = config_tiny();
  const int64_t vh = cfg.vision.hidden_size;
  for (const auto& s : expected_tensors(cfg)) {
    if (s.numel() < 4096 && s.role != TensorRole::Norm) continue;
    std::vector<float> v(size_t(s.numel()));
    synthetic_values(s, cfg, 1, 0, s.numel(), v.data());
    SynthScale sc = synthetic_scale(s, cfg);
    if (s.name.find("attn.qkv.weight") != std::string::npos) {
      ASSERT_EQ(sc.wide_rows, 2 * vh);
      Moments qk = moments(v.data(), size_t(2 * vh * vh)), vv = moments(v.data() + 2 * vh * vh, size_t(vh * vh));
      EXPECT_NEAR(qk.std, 0.12, 0.004) << s.name;
      EXPECT_NEAR(vv.std, 0.02, 0.001) << s.name;
      continue;
    }
    Moments m = moments(v.data(), v.size());
    double tol = 4 / std::sqrt(double(v.size()));  // ~4 sigma of the sample std/mean (relative)
    switch (s.role) {
      case TensorRole::Norm:
        EXPECT_NEAR(m.mean, 1.0, 0.02 * (tol + 0.02)) << s.name;
        EXPECT_NEAR(m.std, 0.02, 0.02 * (tol + 0.3)) << s.name;
        break;
      case TensorRole::PosEmbed: EXPECT_NEAR(m.std, 0.3, 0.3 * tol) << s.name; break;
      default:
        EXPECT_NEAR(m.mean, 0.0, 0.02 * tol) << s.name;
        EXPECT_NEAR(m.std, 0.02, 0.02 * tol) << s.name;
    }
  }
}

// The tower's attention scores have the same spread at every width: with a unit-variance
// LayerNorm output, q and k have std wide_std * sqrt(width) and the scores q.k / sqrt(hd)
// std wide_std^2 * width = 0.12^2 * 128 = 1.84. A fixed 0.12 gave the 2B tower (width
// 1024) scores of std 14.7; its relative errors then grew ~2.5x per block, and fp16
// activations alone (the chain's round_activations_f16 against fp32) moved the 2B image
// logits to cosine 0.953, so no A16 device could pass the 0.9999 gate. The tiny value
// stays 0.12 exactly (its checkpoints and goldens do not change).
TEST(Synthetic, TowerScoreSpreadDoesNotDependOnWidth) {
  for (const ModelConfig& cfg : {config_tiny(), config_by_name("2b")}) {
    const int64_t vh = cfg.vision.hidden_size;
    bool found = false;
    for (const auto& s : expected_tensors(cfg)) {
      if (s.name.find("attn.qkv.weight") == std::string::npos) continue;
      SynthScale sc = synthetic_scale(s, cfg);
      ASSERT_EQ(sc.wide_rows, 2 * vh) << s.name;
      const double spread = double(sc.wide_std) * sc.wide_std * double(vh);
      EXPECT_NEAR(spread, 0.12 * 0.12 * 128, 1e-4) << cfg.name << " " << s.name << " wide_std " << sc.wide_std;
      found = true;
      break;  // every block has the same scale
    }
    EXPECT_TRUE(found) << cfg.name;
  }
  const ModelConfig tiny = config_tiny();
  for (const auto& s : expected_tensors(tiny))
    if (s.name.find("attn.qkv.weight") != std::string::npos) {
      EXPECT_EQ(synthetic_scale(s, tiny).wide_std, 0.12f);
    }
}

TEST(Synthetic, PortableLogAndNormals) {
  for (double x : {1e-300, 1e-20, 0.001, 0.3, 0.70710678, 0.7071068, 1.0, 1.5, 2.0, 123456.0, 1e300}) {
    EXPECT_NEAR(det_log(x), std::log(x), 4e-16 * std::max(1.0, std::fabs(std::log(x)))) << x;
  }
  NormalRng rng(42);
  double s = 0, s2 = 0, s4 = 0;
  const int n = 400000;
  for (int i = 0; i < n; ++i) {
    double z = rng.normal();
    s += z;
    s2 += z * z;
    s4 += z * z * z * z;
  }
  EXPECT_NEAR(s / n, 0.0, 0.01);
  EXPECT_NEAR(s2 / n, 1.0, 0.01);
  EXPECT_NEAR(s4 / n, 3.0, 0.06);  // Gaussian kurtosis
}

TEST(Synthetic, CliErrors) {
  TempDir d("cli");
  auto [rc, out] = run_cli("make-checkpoint --config 7b --out " + (d / "x"), d / "log");
  EXPECT_EQ(rc, 1);
  EXPECT_NE(out.find("error: --config '7b'"), std::string::npos) << out;
  auto [rc2, out2] = run_cli("check-checkpoint --model " + (d / "nothing"), d / "log2");
  EXPECT_EQ(rc2, 1);
  EXPECT_NE(out2.find("no such checkpoint"), std::string::npos) << out2;
}
