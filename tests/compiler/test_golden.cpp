// Issue 4 acceptance 5: the tiny model's image program and 20 decode steps on the
// simulator against the independent PyTorch W4A16 goldens (tests/model/golden/) and
// against the chain, step by step: logits cosine >= 0.9999 at every position and
// the same tokens (unless the reference's top-2 are within 0.1).
#include <gtest/gtest.h>
#include <hdf5.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <unistd.h>

#include "isa/fp16.h"
#include "kernels/rope.h"
#include "model/chain.h"
#include "model/compiler.h"
#include "model/prompt.h"
#include "model/quant.h"
#include "model/safetensors.h"
#include "model/synthetic.h"
#include "sim/platform.h"

namespace gpnpu::model {
namespace {

namespace fs = std::filesystem;

template <typename T>
std::vector<T> h5_read(hid_t f, const std::string& name, hid_t memtype) {
  hid_t ds = H5Dopen2(f, name.c_str(), H5P_DEFAULT);
  if (ds < 0) throw std::runtime_error("golden: dataset " + name + " missing");
  hid_t sp = H5Dget_space(ds);
  std::vector<T> v(size_t(H5Sget_simple_extent_npoints(sp)));
  H5Dread(ds, memtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data());
  H5Sclose(sp);
  H5Dclose(ds);
  return v;
}

double cosine(const float* a, const float* b, size_t n) {
  double d = 0, na = 0, nb = 0;
  for (size_t i = 0; i < n; ++i) {
    d += double(a[i]) * b[i];
    na += double(a[i]) * a[i];
    nb += double(b[i]) * b[i];
  }
  return d / std::sqrt(na * nb);
}

int argmax(const float* x, size_t n) { return int(std::max_element(x, x + n) - x); }
float top2_margin(const float* x, size_t n) {
  std::vector<float> v(x, x + n);
  std::partial_sort(v.begin(), v.begin() + 2, v.end(), std::greater<float>());
  return v[0] - v[1];
}

void write_rope(sim::Platform& p, const Compiler& c, uint64_t cos_off, uint64_t sin_off,
                const std::vector<std::array<int, 3>>& pos, bool ocm) {
  const TextConfig& t = c.model().text;
  std::vector<float> cos_t, sin_t;
  kernels::rope_tables_mrope(pos, t.head_dim, float(t.rope_theta), t.mrope_section, cos_t, sin_t);
  sim::MemoryTarget& m = ocm ? p.ocm() : p.ddr();
  m.write(cos_off, cos_t.data(), cos_t.size() * 4);
  m.write(sin_off, sin_t.data(), sin_t.size() * 4);
}

TEST(Golden, TinyDeviceMatchesThePyTorchW4A16Reference) {
  const std::string path = std::string(GPNPU_SOURCE_DIR) + "/tests/model/golden/reference_tiny_seed1.h5";
  ASSERT_TRUE(fs::exists(path)) << path;
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  std::vector<int> ids = h5_read<int>(f, "prompt_ids", H5T_NATIVE_INT);
  std::vector<int> grid = h5_read<int>(f, "grid_thw", H5T_NATIVE_INT);
  std::vector<float> pixels = h5_read<float>(f, "pixel_values", H5T_NATIVE_FLOAT);
  std::vector<int> gold_tokens = h5_read<int>(f, "w4a16/tokens", H5T_NATIVE_INT);
  std::vector<float> gold_logits = h5_read<float>(f, "w4a16/logits", H5T_NATIVE_FLOAT);
  H5Fclose(f);

  // The golden's checkpoint and bundle (tests/model/test_chain.cpp checks their hashes).
  fs::path dir = fs::temp_directory_path() / ("gpnpu_test_golden_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  SyntheticOptions so;
  so.seed = 1;
  make_synthetic_checkpoint(config_tiny(), dir.string(), so);
  write_quant_bundle(load_checkpoint(dir.string()), config_tiny(), (dir / "w4a16.safetensors").string());
  QuantBundle bundle((dir / "w4a16.safetensors").string());

  const ModelConfig mc = config_tiny();
  const size_t V = size_t(mc.text.vocab_size);
  ImageShape s;
  s.grid_h = grid[1];
  s.grid_w = grid[2];
  s.seq_len = int(ids.size());
  s.image_start = int(std::find(ids.begin(), ids.end(), ChatTokens{}.image_pad) - ids.begin());
  sim::Config cfg = sim::Config::make("qc-u", {});
  CompileOptions opt;
  opt.max_seq = 256;
  opt.max_patches = 512;
  Compiler c(mc, cfg, opt);
  CompiledProgram img = c.image_program(s), dec = c.decode_program();

  sim::Platform& p = sim::Platform::get();
  p.configure(cfg, false);
  c.load_weights(bundle, p.ddr());
  c.load_image_constants(bundle, s, p.ddr());
  std::vector<uint16_t> h(pixels.size());
  for (size_t i = 0; i < h.size(); ++i) h[i] = f32_to_f16(pixels[i]);
  p.ddr().write(c.image_io().patches_ddr - sim::kDdrRegion.base, h.data(), h.size() * 2);
  p.write_smem(c.image_io().ids_smem, ids.data(), uint32_t(ids.size() * 4));
  uint32_t zero = 0;
  p.write_smem(c.image_io().slot0_smem, &zero, 4);
  MropePositions mp = mrope_positions(ids, {MergedGrid{s.grid_h / 2, s.grid_w / 2}});
  std::vector<std::array<int, 3>> pos;
  for (auto& q : mp.pos) pos.push_back({q[0], q[1], q[2]});
  const uint64_t trope = c.image_io().trope_ddr - sim::kDdrRegion.base;
  write_rope(p, c, trope, trope + uint64_t(opt.max_seq) * mc.text.head_dim * 4, pos, false);

  auto weights = bundle_weights(bundle);
  Chain chain(mc, *weights);
  std::vector<float> chain_logits = chain.prefill(ids, {ImagePatches{1, s.grid_h, s.grid_w, pixels}}, pos);

  std::vector<float> logits(V);
  auto read_logits = [&](uint32_t off) {
    std::vector<uint16_t> l(V);
    p.ocm().read(off, l.data(), V * 2);
    for (size_t i = 0; i < V; ++i) logits[i] = f16_to_f32(l[i]);
  };
  p.run(img.program);
  read_logits(img.logits_ocm);
  double worst_gold = 1, worst_chain = 1;
  int mismatches = 0;
  const int steps = int(gold_tokens.size());
  for (int step = 0; step <= steps; ++step) {
    const float* gold = &gold_logits[size_t(step) * V];
    double cg = cosine(logits.data(), gold, V), cc = cosine(logits.data(), chain_logits.data(), V);
    worst_gold = std::min(worst_gold, cg);
    worst_chain = std::min(worst_chain, cc);
    int tok = argmax(logits.data(), V);
    if (step < steps && tok != gold_tokens[size_t(step)] && top2_margin(gold, V) >= 0.1f) ++mismatches;
    std::printf("step %2d: device %6d golden %6d  cos vs golden %.7f  vs chain %.7f\n", step, tok,
                step < steps ? gold_tokens[size_t(step)] : -1, cg, cc);
    if (step == steps) break;
    // Next decode step: the device's own token at the next cache slot and position.
    const uint32_t slot = uint32_t(s.seq_len + step);
    uint32_t args[3] = {uint32_t(tok), slot, slot + 1};
    p.write_smem(c.decode_io().token_smem, args, 12);
    auto dp = decode_position(slot, mp.rope_delta);
    write_rope(p, c, c.decode_io().cos_ocm, c.decode_io().sin_ocm, {{dp[0], dp[1], dp[2]}}, true);
    p.run(dec.program);
    read_logits(dec.logits_ocm);
    chain_logits = chain.decode(tok, {dp[0], dp[1], dp[2]});
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
  std::printf("tiny, image program + %d decode steps: min cosine vs PyTorch W4A16 %.7f, vs chain %.7f, %d token mismatches\n",
              steps, worst_gold, worst_chain, mismatches);
  EXPECT_GE(worst_gold, 0.9999);
  EXPECT_GE(worst_chain, 0.9999);
  EXPECT_EQ(mismatches, 0);
}

}  // namespace
}  // namespace gpnpu::model
