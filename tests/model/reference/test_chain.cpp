// The chain on the tiny config: determinism, KV-cache decode = full recompute
// (docs/testing.md model-test item 8), the splice and DeepStack intermediates, the fp16 rounding mode,
// the fp32 and W4A16 weight sources, sensitivity to a dropped feature, and the gate
// against the PyTorch reference goldens (tests/model/golden/, when present).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>

#include "isa/error.h"
#include "isa/fp16.h"
#include "model/reference/chain.h"
#include "model/inputs/prompt.h"
#include "model/checkpoint/quant.h"
#include "model/checkpoint/safetensors.h"
#include "model/checkpoint/synthetic.h"

#include <hdf5.h>

namespace gpnpu::model {
namespace {

namespace fs = std::filesystem;

// The tiny model's synthetic weights in memory: the generator's own values, rounded to
// bf16 as make-checkpoint stores them (so they equal what the checkpoint loader reads).
MemoryWeights synthetic_memory(const ModelConfig& cfg, uint64_t seed) {
  MemoryWeights m;
  for (const TensorSpec& s : expected_tensors(cfg)) {
    std::vector<float> v(size_t(s.numel()));
    synthetic_values(s, cfg, seed, 0, s.numel(), v.data());
    for (float& x : v) x = bf16_to_f32(f32_to_bf16(x));
    m.set(s.name, std::move(v));
  }
  return m;
}

struct Fixture {
  ModelConfig cfg = config_tiny();
  MemoryWeights w = synthetic_memory(cfg, 1);
};
Fixture& fx() {
  static Fixture f;
  return f;
}

// An image of gh x gw patches with random pixels in [-1, 1], merge-window order.
ImagePatches random_image(const ModelConfig& cfg, int gh, int gw, uint32_t seed) {
  ImagePatches im;
  im.h = gh;
  im.w = gw;
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  im.pixels.resize(size_t(gh) * gw * cfg.vision.patch_dim());
  for (float& x : im.pixels) x = d(g);
  return im;
}

// <|im_start|>user\n<|vision_start|> pads <|vision_end|> some text <|im_end|>\n<|im_start|>assistant\n
std::vector<int> prompt(const ModelConfig& cfg, int n_pads) {
  std::vector<int> ids{151644, 872, 198, cfg.vision_start_token_id};
  ids.insert(ids.end(), size_t(n_pads), cfg.image_token_id);
  for (int t : {cfg.vision_end_token_id, 74785, 419, 2168, 13, 151645, 198, 151644, 77091, 198})
    ids.push_back(t);
  return ids;
}

std::vector<std::array<int, 3>> positions_for(const ModelConfig& cfg, const std::vector<int>& ids,
                                              const std::vector<ImagePatches>& ims) {
  std::vector<MergedGrid> grids;
  for (const auto& im : ims) grids.push_back({im.h / 2, im.w / 2});
  auto mp = mrope_positions(ids, grids, cfg.image_token_id);
  std::vector<std::array<int, 3>> pos;
  for (auto p : mp.pos) pos.push_back({int(p[0]), int(p[1]), int(p[2])});
  return pos;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

ChainOptions threads(int n) {
  ChainOptions o;
  o.threads = n;
  return o;
}

ChainOptions no_deepstack() {
  ChainOptions o;
  o.deepstack = false;
  return o;
}

TEST(Chain, DeterministicForAnyThreadCount) {
  auto& f = fx();
  std::vector<ImagePatches> ims{random_image(f.cfg, 4, 6, 5)};
  auto ids = prompt(f.cfg, 6);
  Chain c1(f.cfg, f.w, threads(1));
  Chain c2(f.cfg, f.w, threads(2));
  auto a = c1.prefill(ids, ims, positions_for(f.cfg, ids, ims));
  auto b = c2.prefill(ids, ims, {});  // positions computed by get_rope_index
  c1.reset();
  auto a2 = c1.prefill(ids, ims, positions_for(f.cfg, ids, ims));
  EXPECT_TRUE(same_bits(a, b));
  EXPECT_TRUE(same_bits(a, a2));
  ASSERT_EQ(a.size(), size_t(f.cfg.text.vocab_size));
  for (float x : a) ASSERT_TRUE(std::isfinite(x));
}

TEST(Chain, KvCacheDecodeEqualsFullRecompute) {
  auto& f = fx();
  std::vector<ImagePatches> ims{random_image(f.cfg, 6, 4, 6)};
  auto ids = prompt(f.cfg, 6);
  Chain c(f.cfg, f.w);
  Generation g = c.generate(ids, ims, positions_for(f.cfg, ids, ims), 4);
  ASSERT_EQ(g.tokens.size(), 4u);
  ASSERT_EQ(g.logits.size(), 5u);
  EXPECT_EQ(c.cache().len, int64_t(ids.size() + 4));
  // Recompute each step from scratch: the prompt plus the tokens so far in one prefill.
  for (int s = 1; s <= 4; ++s) {
    std::vector<int> full = ids;
    full.insert(full.end(), g.tokens.begin(), g.tokens.begin() + s);
    Chain r(f.cfg, f.w);
    auto logits = r.prefill(full, ims, positions_for(f.cfg, full, ims));
    EXPECT_TRUE(same_bits(logits, g.logits[size_t(s)])) << "step " << s << " cosine "
                                                         << cosine(logits, g.logits[size_t(s)]);
  }
  // A wrong decode position is visible: the same token at the next position + 1 differs.
  Chain d(f.cfg, f.w);
  d.prefill(ids, ims, positions_for(f.cfg, ids, ims));
  int p = d.cache().next_position + 1;
  auto off = d.decode(g.tokens[0], {p, p, p});
  EXPECT_FALSE(same_bits(off, g.logits[1]));
}

TEST(Chain, TextOnlyPrefillUsesSequentialPositions) {
  auto& f = fx();
  std::vector<int> ids{151644, 872, 198, 9707, 11, 1879, 0, 151645};
  Chain a(f.cfg, f.w), b(f.cfg, f.w);
  std::vector<std::array<int, 3>> pos;
  for (int i = 0; i < int(ids.size()); ++i) pos.push_back({i, i, i});
  EXPECT_TRUE(same_bits(a.prefill(ids, {}, {}), b.prefill(ids, {}, pos)));
  EXPECT_EQ(a.cache().next_position, int(ids.size()));
}

TEST(Chain, IntermediatesShowSpliceAndDeepstack) {
  auto& f = fx();
  std::vector<ImagePatches> ims{random_image(f.cfg, 4, 4, 7)};
  auto ids = prompt(f.cfg, 4);
  auto pos = positions_for(f.cfg, ids, ims);
  TensorRecorder rec, rec_nods;
  ChainOptions o;
  o.on_tensor = rec.hook();
  Chain c(f.cfg, f.w, o);
  c.prefill(ids, ims, pos);
  ChainOptions o2;
  o2.on_tensor = rec_nods.hook();
  o2.deepstack = false;
  Chain c2(f.cfg, f.w, o2);
  c2.prefill(ids, ims, pos);

  const int64_t D = f.cfg.text.hidden_size;
  const auto& merger = rec.at("vision.0.merger");
  ASSERT_EQ(merger.shape, (std::vector<int64_t>{4, D}));
  const auto& in = rec.at("lm.input");
  const auto& emb = rec.at("lm.embed");
  for (int i = 0; i < 4; ++i)  // image pads at rows 4..7
    for (int64_t d = 0; d < D; ++d) ASSERT_EQ(in.data[size_t((4 + i) * D + d)], merger.data[size_t(i * D + d)]);
  for (int64_t d = 0; d < D; ++d) ASSERT_EQ(in.data[size_t(3 * D + d)], emb.data[size_t(3 * D + d)]);
  // Layer 0: identical inputs; with DeepStack the image rows gain exactly ds_0, text rows nothing.
  const auto& l0 = rec.at("lm.layer.0.out");
  const auto& l0n = rec_nods.at("lm.layer.0.out");
  const auto& ds0 = rec.at("vision.0.deepstack.0");
  for (int64_t r = 0; r < int64_t(ids.size()); ++r)
    for (int64_t d = 0; d < D; ++d) {
      float a = l0.data[size_t(r * D + d)], b = l0n.data[size_t(r * D + d)];
      if (r >= 4 && r < 8)
        ASSERT_EQ(a, b + ds0.data[size_t((r - 4) * D + d)]);
      else
        ASSERT_EQ(a, b);
    }
  // Layers past the taps see it only through attention; the last layer has no add.
  EXPECT_EQ(rec.at("lm.layer.4.k").shape, (std::vector<int64_t>{int64_t(ids.size()), f.cfg.text.kv_dim()}));
  EXPECT_EQ(rec.at("vision.0.block.3.mlp_act").shape,
            (std::vector<int64_t>{16, f.cfg.vision.intermediate_size}));
  EXPECT_THROW(rec.at("no.such.tensor"), gpnpu::Error);
}

TEST(Chain, SensitivityToDroppedFeatures) {
  // Each deliberate change must move the logits past a 0.9999 cosine gate (docs/testing.md model-test item 2).
  auto& f = fx();
  std::vector<ImagePatches> ims{random_image(f.cfg, 4, 6, 8)};
  auto ids = prompt(f.cfg, 6);
  auto pos = positions_for(f.cfg, ids, ims);
  Chain good(f.cfg, f.w);
  auto ref = good.prefill(ids, ims, pos);

  Chain nods(f.cfg, f.w, no_deepstack());
  EXPECT_LT(cosine(ref, nods.prefill(ids, ims, pos)), 0.9999);

  auto swapped = pos;  // h and w of the image positions swapped
  for (auto& p : swapped) std::swap(p[1], p[2]);
  Chain sw(f.cfg, f.w);
  EXPECT_LT(cosine(ref, sw.prefill(ids, ims, swapped)), 0.9999);

  MemoryWeights bad = f.w;  // one corrupted weight row of an LM layer
  auto& wd = bad.at(text_layer_name(1, "mlp.down_proj.weight"));
  for (int i = 0; i < f.cfg.text.intermediate_size; ++i) wd[size_t(5 * f.cfg.text.intermediate_size + i)] *= 8.0f;
  Chain cb(f.cfg, bad);
  EXPECT_LT(cosine(ref, cb.prefill(ids, ims, pos)), 0.9999);
}

TEST(Chain, RoundActivationsF16) {
  auto& f = fx();
  std::vector<ImagePatches> ims{random_image(f.cfg, 4, 4, 9)};
  auto ids = prompt(f.cfg, 4);
  auto pos = positions_for(f.cfg, ids, ims);
  Chain a(f.cfg, f.w);
  ChainOptions o;
  o.round_activations_f16 = true;
  TensorRecorder rec({"lm.layer.2.attn_res", "vision.0.block.1.out"});
  o.on_tensor = rec.hook();
  Chain b(f.cfg, f.w, o);
  auto la = a.prefill(ids, ims, pos), lb = b.prefill(ids, ims, pos);
  EXPECT_FALSE(same_bits(la, lb));
  EXPECT_GT(cosine(la, lb), 0.999);
  for (float x : lb) ASSERT_EQ(x, round_f16(x));
  for (const auto& [name, e] : rec.entries())
    for (float x : e.data) ASSERT_EQ(x, round_f16(x)) << name;
}

TEST(Chain, RejectsInconsistentInputs) {
  auto& f = fx();
  Chain c(f.cfg, f.w);
  std::vector<ImagePatches> ims{random_image(f.cfg, 4, 4, 10)};
  EXPECT_THROW(c.prefill(prompt(f.cfg, 3), ims, {}), gpnpu::Error);  // 3 pads for 4 tokens
  ims[0].pixels.pop_back();
  EXPECT_THROW(c.vision(ims[0]), gpnpu::Error);
  c.reset();
  EXPECT_THROW(c.prefill({1, 2, 3}, {}, {{0, 0, 0}}), gpnpu::Error);  // 1 position for 3 ids
  EXPECT_THROW(c.prefill({f.cfg.text.vocab_size}, {}, {}), gpnpu::Error);
}

// ---- files: checkpoint (fp32 mode) and W4A16 bundle ----------------------------------

struct Files {
  fs::path dir;
  std::unique_ptr<Checkpoint> ck;
  std::unique_ptr<QuantBundle> bundle;
};
// make-checkpoint --config tiny --seed SEED and quantize, once per seed, in a temp dir.
Files& tiny_files(uint64_t seed) {
  static std::map<uint64_t, Files> cache;
  auto it = cache.find(seed);
  if (it != cache.end()) return it->second;
  Files f;
  f.dir = fs::temp_directory_path() / ("gpnpu_test_chain_" + std::to_string(::getpid()) + "_" + std::to_string(seed));
  fs::create_directories(f.dir);
  SyntheticOptions so;
  so.seed = seed;
  make_synthetic_checkpoint(config_tiny(), f.dir.string(), so);
  f.ck = std::make_unique<Checkpoint>(load_checkpoint(f.dir.string()));
  write_quant_bundle(*f.ck, config_tiny(), (f.dir / "w4a16.safetensors").string());
  f.bundle = std::make_unique<QuantBundle>((f.dir / "w4a16.safetensors").string());
  return cache.emplace(seed, std::move(f)).first->second;
}

struct CleanupFiles : ::testing::Environment {
  void TearDown() override {
    std::error_code ec;
    for (auto& e : fs::directory_iterator(fs::temp_directory_path(), ec))
      if (e.path().filename().string().rfind("gpnpu_test_chain_" + std::to_string(::getpid()) + "_", 0) == 0)
        fs::remove_all(e.path(), ec);
  }
};
const auto* const kCleanup = ::testing::AddGlobalTestEnvironment(new CleanupFiles);

TEST(Chain, CheckpointAndBundleSources) {
  auto& f = fx();
  Files& files = tiny_files(1);
  auto ckw = checkpoint_weights(*files.ck);
  auto bw = bundle_weights(*files.bundle);
  std::vector<ImagePatches> ims{random_image(f.cfg, 4, 4, 11)};
  auto ids = prompt(f.cfg, 4);
  auto pos = positions_for(f.cfg, ids, ims);
  // fp32 mode reads the bf16 checkpoint: the same values as the in-memory synthetic model.
  Chain mem(f.cfg, f.w), ck(f.cfg, *ckw), q(f.cfg, *bw);
  auto lm = mem.prefill(ids, ims, pos), lc = ck.prefill(ids, ims, pos), lq = q.prefill(ids, ims, pos);
  EXPECT_TRUE(same_bits(lm, lc));
  // W4A16 mode: related to fp32 but not equal (int4 noise through 5 random layers).
  EXPECT_FALSE(same_bits(lc, lq));
  EXPECT_GT(cosine(lc, lq), 0.8);
  std::printf("tiny seed 1: fp32 vs W4A16 logits cosine %.6f\n", cosine(lc, lq));
  // It uses the bundle's codes: a matrix row equals (q - z) * s of the stored codes.
  const std::string name = text_layer_name(2, "mlp.down_proj.weight");
  QuantTensor qt = files.bundle->get_quant(name);
  ops::Matrix m = bw->matrix(name, qt.rows, qt.cols);
  std::vector<float> row(size_t(qt.cols)), want(size_t(qt.cols));
  const float* r = m.row(7, row.data());
  dequantise_row(qt, 7, want.data());
  EXPECT_EQ(std::memcmp(r, want.data(), want.size() * 4), 0);
  for (int64_t c = 0; c < qt.cols; c += 37) EXPECT_EQ(r[c], qt.dequant(7, c));
}

// ---- the gate against the PyTorch reference goldens -----------------------------------

// SHA-256 (FIPS 180-4) of a safetensors file's data section, the bytes after the header:
// the goldens record it for the checkpoint and the bundle they were made from.
std::string sha256_data(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) fail("cannot open {}", path);
  uint64_t n = 0;
  if (std::fread(&n, 8, 1, f) != 1 || std::fseek(f, long(n), SEEK_CUR) != 0) fail("bad header in {}", path);
  static const uint32_t K[64] = {
      0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
      0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
      0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
      0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
      0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
      0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
      0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
      0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};
  uint32_t h[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  auto rotr = [](uint32_t x, int r) { return (x >> r) | (x << (32 - r)); };
  auto block = [&](const uint8_t* p) {
    uint32_t w[64];
    for (int i = 0; i < 16; ++i) w[i] = uint32_t(p[4 * i]) << 24 | uint32_t(p[4 * i + 1]) << 16 | uint32_t(p[4 * i + 2]) << 8 | p[4 * i + 3];
    for (int i = 16; i < 64; ++i) {
      uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
      uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
      w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f2 = h[5], g = h[6], hh = h[7];
    for (int i = 0; i < 64; ++i) {
      uint32_t t1 = hh + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f2) ^ (~e & g)) + K[i] + w[i];
      uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
      hh = g, g = f2, f2 = e, e = d + t1, d = c, c = b, b = a, a = t1 + t2;
    }
    h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e, h[5] += f2, h[6] += g, h[7] += hh;
  };
  std::vector<uint8_t> buf(1 << 20);
  uint64_t total = 0;
  size_t got, have = 0;
  while ((got = std::fread(buf.data() + have, 1, buf.size() - have, f)) > 0) {
    have += got;
    size_t full = have / 64 * 64;
    for (size_t i = 0; i < full; i += 64) block(buf.data() + i);
    total += full;
    std::memmove(buf.data(), buf.data() + full, have - full);
    have -= full;
  }
  std::fclose(f);
  total += have;
  uint8_t tail[128] = {};
  std::memcpy(tail, buf.data(), have);
  tail[have] = 0x80;
  size_t len = have + 1 + 8 <= 64 ? 64 : 128;
  uint64_t bits = total * 8;
  for (int i = 0; i < 8; ++i) tail[len - 1 - i] = uint8_t(bits >> (8 * i));
  for (size_t i = 0; i < len; i += 64) block(tail + i);
  std::string hex;
  for (uint32_t v : h) hex += fmt::format("{:08x}", v);
  return hex;
}

TEST(Chain, Sha256OfDataSection) {
  // "abc" as the data section of a minimal file (header length 2, header "{}").
  fs::path p = fs::temp_directory_path() / ("gpnpu_test_chain_sha_" + std::to_string(::getpid()));
  {
    std::FILE* f = std::fopen(p.c_str(), "wb");
    uint64_t n = 2;
    std::fwrite(&n, 8, 1, f);
    std::fwrite("{}abc", 1, 5, f);
    std::fclose(f);
  }
  EXPECT_EQ(sha256_data(p.string()), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  fs::remove(p);
}

struct Golden {
  std::vector<int> ids, grid;  // grid: n x 3
  std::vector<float> pixels;
  std::vector<int> pos_planar;  // 3 x S
  int steps = 0;
  struct Mode {
    std::vector<int> tokens;
    std::vector<float> logits;  // (steps + 1) x vocab
  };
  std::map<std::string, Mode> modes;
  std::map<std::string, std::string> attrs;  // string attributes (the data hashes)
};

template <typename T>
std::vector<T> h5_read(hid_t f, const std::string& name, hid_t memtype) {
  hid_t ds = H5Dopen2(f, name.c_str(), H5P_DEFAULT);
  if (ds < 0) fail("golden: dataset {} missing", name);
  hid_t sp = H5Dget_space(ds);
  hssize_t n = H5Sget_simple_extent_npoints(sp);
  std::vector<T> v(static_cast<size_t>(n));
  herr_t e = H5Dread(ds, memtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data());
  H5Sclose(sp);
  H5Dclose(ds);
  if (e < 0) fail("golden: cannot read {}", name);
  return v;
}

Golden read_golden(const std::string& path) {
  Golden g;
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) fail("golden: cannot open {}", path);
  g.ids = h5_read<int>(f, "prompt_ids", H5T_NATIVE_INT);
  g.grid = h5_read<int>(f, "grid_thw", H5T_NATIVE_INT);
  g.pixels = h5_read<float>(f, "pixel_values", H5T_NATIVE_FLOAT);
  g.pos_planar = h5_read<int>(f, "position_ids", H5T_NATIVE_INT);
  hid_t a = H5Aopen(f, "steps", H5P_DEFAULT);
  long long steps = 0;
  H5Aread(a, H5T_NATIVE_LLONG, &steps);
  H5Aclose(a);
  g.steps = int(steps);
  for (const char* name : {"checkpoint_data_sha256", "bundle_data_sha256"}) {
    if (H5Aexists(f, name) <= 0) continue;
    hid_t at = H5Aopen(f, name, H5P_DEFAULT);
    hid_t ty = H5Aget_type(at);
    std::string val;
    if (H5Tis_variable_str(ty) > 0) {
      char* str = nullptr;
      hid_t mt = H5Tcopy(H5T_C_S1);
      H5Tset_size(mt, H5T_VARIABLE);
      H5Tset_cset(mt, H5Tget_cset(ty));
      H5Aread(at, mt, &str);
      if (str) val = str;
      H5free_memory(str);
      H5Tclose(mt);
    } else {
      std::vector<char> b(H5Tget_size(ty) + 1, 0);
      H5Aread(at, ty, b.data());
      val = b.data();
    }
    H5Tclose(ty);
    H5Aclose(at);
    g.attrs[name] = val;
  }
  for (const char* m : {"fp32", "w4a16"}) {
    if (H5Lexists(f, m, H5P_DEFAULT) <= 0) continue;
    Golden::Mode mode;
    mode.tokens = h5_read<int>(f, std::string(m) + "/tokens", H5T_NATIVE_INT);
    mode.logits = h5_read<float>(f, std::string(m) + "/logits", H5T_NATIVE_FLOAT);
    g.modes[m] = std::move(mode);
  }
  H5Fclose(f);
  return g;
}

struct GateResult {
  double min_cos = 1;
  int token_mismatches = 0;
};

// Runs the chain on the golden's inputs and compares every logits row and token.
GateResult run_gate(const ModelConfig& cfg, const WeightSource& w, const Golden& g,
                    const Golden::Mode& want, ChainOptions opt = {}) {
  std::vector<ImagePatches> ims;
  size_t off = 0;
  for (size_t i = 0; i + 2 < g.grid.size(); i += 3) {
    ImagePatches im;
    im.t = g.grid[i];
    im.h = g.grid[i + 1];
    im.w = g.grid[i + 2];
    size_t n = size_t(im.t) * im.h * im.w * cfg.vision.patch_dim();
    im.pixels.assign(g.pixels.begin() + off, g.pixels.begin() + off + n);
    off += n;
    ims.push_back(std::move(im));
  }
  const size_t S = g.ids.size();
  std::vector<std::array<int, 3>> pos(S);
  for (size_t i = 0; i < S; ++i) pos[i] = {g.pos_planar[i], g.pos_planar[S + i], g.pos_planar[2 * S + i]};
  opt.threads = 2;
  Chain c(cfg, w, opt);
  Generation gen = c.generate(g.ids, ims, pos, g.steps);
  GateResult r;
  const size_t V = size_t(cfg.text.vocab_size);
  for (size_t s = 0; s < gen.logits.size(); ++s) {
    std::span<const float> ref(want.logits.data() + s * V, V);
    r.min_cos = std::min(r.min_cos, cosine(gen.logits[s], ref));
  }
  for (size_t s = 0; s < gen.tokens.size(); ++s) r.token_mismatches += gen.tokens[s] != want.tokens[s];
  return r;
}

TEST(Chain, MatchesPytorchReferenceGolden) {
  // GPNPU_CHAIN_GOLDEN overrides the file (a freshly generated golden, before it is committed).
  const char* env = std::getenv("GPNPU_CHAIN_GOLDEN");
  const fs::path path = env && *env ? fs::path(env)
                                    : fs::path(GPNPU_SOURCE_DIR) / "tests/model/golden/reference_tiny_seed1.h5";
  ASSERT_TRUE(fs::exists(path)) << path << " is missing (regenerate it: scripts/reference/check_goldens.sh --bless)";
  Golden g = read_golden(path.string());
  ASSERT_GT(g.steps, 0);
  const ModelConfig cfg = config_tiny();
  Files& files = tiny_files(1);
  auto ckw = checkpoint_weights(*files.ck);
  auto bw = bundle_weights(*files.bundle);
  // The golden must come from the very weights this test regenerates; otherwise the gate
  // compares different models (a changed generator or quantiser needs a rebless).
  ASSERT_EQ(g.attrs["checkpoint_data_sha256"], sha256_data((files.dir / "model.safetensors").string()))
      << "the golden was made from another checkpoint: rebless (scripts/reference/check_goldens.sh --bless)";
  if (g.modes.count("w4a16")) {
    EXPECT_EQ(g.attrs["bundle_data_sha256"], sha256_data((files.dir / "w4a16.safetensors").string()))
        << "the W4A16 golden was made from another bundle (the quantiser changed?): rebless "
           "(scripts/reference/check_goldens.sh --bless)";
  }
  const double gate = 0.99999;
  for (const auto& [mode, want] : g.modes) {
    ASSERT_EQ(want.logits.size(), size_t(g.steps + 1) * size_t(cfg.text.vocab_size)) << mode;
    const WeightSource& w = mode == "fp32" ? *ckw : *bw;
    GateResult r = run_gate(cfg, w, g, want);
    EXPECT_GE(r.min_cos, gate) << mode;
    EXPECT_EQ(r.token_mismatches, 0) << mode;
    std::printf("golden %s: min logits cosine %.9f over %d rows, %d token mismatches\n", mode.c_str(),
                r.min_cos, g.steps + 1, r.token_mismatches);
  }
  // Negative controls: the same gate must fail without DeepStack and with one corrupted weight.
  ASSERT_TRUE(g.modes.count("fp32"));
  GateResult nods = run_gate(cfg, *ckw, g, g.modes["fp32"], no_deepstack());
  EXPECT_TRUE(nods.min_cos < gate || nods.token_mismatches > 0) << "dropping DeepStack passed the gate";
  MemoryWeights bad = copy_weights(*ckw, cfg);
  auto& wd = bad.at(text_layer_name(1, "mlp.down_proj.weight"));
  for (int64_t i = 0; i < cfg.text.intermediate_size; ++i) wd[size_t(5 * cfg.text.intermediate_size + i)] *= 8.0f;
  GateResult cor = run_gate(cfg, bad, g, g.modes["fp32"]);
  EXPECT_TRUE(cor.min_cos < gate || cor.token_mismatches > 0) << "a corrupted weight passed the gate";
  std::printf("negative controls: no DeepStack min cosine %.6f, corrupted weight min cosine %.6f\n",
              nods.min_cos, cor.min_cos);
}

}  // namespace
}  // namespace gpnpu::model
