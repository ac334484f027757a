// The quantiser and outliers (issue 21): the outlier report (blocks whose max |w| is far
// above their RMS, the share of weights quantised to zero, the channels that hold the
// outliers) on an embedding with three columns x100 and on a super weight; mixed
// precision (outlier channels kept in fp16) lowers the error of those rows; the bundle
// carries the fp16 channels and the chain honours them (the device refuses them by name:
// tests/model/cli/test_numerics.cpp); make-checkpoint's outlier options plant exactly what
// they say.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <unistd.h>

#include "isa/error.h"
#include "model/reference/chain.h"
#include "model/checkpoint/config.h"
#include "model/checkpoint/quant.h"
#include "model/checkpoint/safetensors.h"
#include "model/checkpoint/synthetic.h"

using namespace gpnpu;
using namespace gpnpu::model;
namespace fs = std::filesystem;

namespace {

const std::string kEmbed = "model.language_model.embed_tokens.weight";
constexpr int kCols[3] = {7, 42, 99};

// A Gaussian [rows][128] (std 0.02) with columns kCols x100: the x100 embedding.
std::vector<float> x100_matrix(int64_t rows) {
  NormalRng rng(5);
  std::vector<float> w(size_t(rows * 128));
  for (auto& x : w) x = float(0.02 * rng.normal());
  for (int64_t r = 0; r < rows; ++r)
    for (int c : kCols) w[size_t(r * 128 + c)] *= 100;
  return w;
}

// Sum of squared errors of the non-outlier weights (columns other than kCols).
double sse_rest(const std::vector<float>& w, const QuantTensor& q) {
  double s = 0;
  std::vector<float> row(size_t(q.cols));
  for (int64_t r = 0; r < q.rows; ++r) {
    dequantise_row(q, r, row.data());
    for (int64_t c = 0; c < q.cols; ++c)
      if (c != kCols[0] && c != kCols[1] && c != kCols[2]) s += std::pow(double(w[size_t(r * q.cols + c)]) - row[size_t(c)], 2);
  }
  return s;
}

TEST(Outliers, ReportNamesTheBlocksTheZeroedShareAndTheChannels) {
  const int64_t rows = 4096;
  // Plain Gaussian: no outlier block, ~12-13 % of the weights quantise to 0.
  NormalRng rng(5);
  std::vector<float> g(size_t(rows * 128));
  for (auto& x : g) x = float(0.02 * rng.normal());
  QuantTensor qg = quantise(g.data(), rows, 128);
  OutlierReport rg = outlier_report(g.data(), rows, 128, &qg, "gaussian");
  EXPECT_EQ(rg.outlier_blocks, 0);
  EXPECT_LT(rg.worst_ratio, kOutlierRatio);
  EXPECT_GT(rg.zero_share(), 0.08);
  EXPECT_LT(rg.zero_share(), 0.2);

  const std::vector<float> w = x100_matrix(rows);
  QuantTensor q = quantise(w.data(), rows, 128);
  OutlierReport r = outlier_report(w.data(), rows, 128, &q, kEmbed);
  std::printf("x100 columns: %lld of %lld blocks are outlier blocks (worst %.1f x RMS); zeroed: %.1f%% of their other "
              "weights, %.1f%% of the tensor; plain Gaussian %.1f%%\n",
              (long long)r.outlier_blocks, (long long)r.blocks, r.worst_ratio, 100 * r.outlier_zero_share(),
              100 * r.zero_share(), 100 * rg.zero_share());
  EXPECT_EQ(r.tensor, kEmbed);
  EXPECT_GT(r.outlier_blocks, rows * 9 / 10);
  EXPECT_GT(r.outlier_zero_share(), 0.9);
  ASSERT_GE(r.channels.size(), 3u);
  std::vector<int32_t> top = outlier_channels(r, 3);
  EXPECT_EQ(top, (std::vector<int32_t>{7, 42, 99}));

  // One super weight: one outlier block, its channel found.
  std::vector<float> s = g;
  s[size_t(100 * 128 + 17)] = 0.6f;  // 30 sigma
  QuantTensor qs = quantise(s.data(), rows, 128);
  OutlierReport rs = outlier_report(s.data(), rows, 128, &qs, "super");
  EXPECT_EQ(rs.outlier_blocks, 1);
  EXPECT_EQ(rs.worst_row, 100);
  EXPECT_EQ(rs.worst_col, 17);
  EXPECT_EQ(outlier_channels(rs, 4), (std::vector<int32_t>{17}));
}

TEST(Outliers, KeepingTheOutlierChannelsInFp16LowersTheErrorOfThoseRows) {
  const int64_t rows = 4096;
  const std::vector<float> w = x100_matrix(rows);
  QuantOptions mixed;
  mixed.fp16_channels = 3;
  QuantTensor plain = quantise(w.data(), rows, 128), mp = quantise(w.data(), rows, 128, mixed, kEmbed);
  EXPECT_EQ(mp.fp16_cols, (std::vector<int32_t>{7, 42, 99}));
  ASSERT_EQ(mp.fp16_w.size(), size_t(rows * 3));
  const double e_plain = sse_rest(w, plain), e_mixed = sse_rest(w, mp);
  // The kept channels are fp16-exact up to fp16 rounding.
  double e_kept = 0, e_kept_plain = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int c : kCols) {
      e_kept += std::pow(double(w[size_t(r * 128 + c)]) - mp.dequant(r, c), 2);
      e_kept_plain += std::pow(double(w[size_t(r * 128 + c)]) - plain.dequant(r, c), 2);
    }
  OutlierReport rm = outlier_report(w.data(), rows, 128, &mp, kEmbed);
  std::printf("x100 columns, W4A16 SSE of the other weights: %.4g plain, %.4g with 3 channels in fp16 (%.1fx lower); "
              "of the kept channels %.4g -> %.4g; zeroed %.1f%% -> %.1f%%\n",
              e_plain, e_mixed, e_plain / e_mixed, e_kept_plain, e_kept,
              100 * outlier_report(w.data(), rows, 128, &plain, kEmbed).zero_share(), 100 * rm.zero_share());
  EXPECT_LT(e_mixed * 20, e_plain);
  EXPECT_LT(e_kept, e_kept_plain);
  EXPECT_LT(rm.zero_share(), 0.2);
}

fs::path scratch() {
  static const fs::path d = fs::temp_directory_path() / ("gpnpu_outliers_" + std::to_string(::getpid()));
  return d;
}

TEST(Outliers, MakeCheckpointPlantsAndTheMixedBundleRoundTripsIntoTheChain) {
  const ModelConfig cfg = config_tiny();
  SyntheticOptions so;
  so.seed = 1;
  for (int c : kCols) so.outliers.push_back({kEmbed, -1, c, 100.0f});   // --scale-column
  so.outliers.push_back({kEmbed, 151652, 5, 35000.0f});                 // --massive-activation
  so.outliers.push_back({"model.language_model.layers.1.mlp.down_proj.weight", 3, 200, 2.5f});  // --super-weight
  const fs::path dir = scratch() / "ckpt";
  make_synthetic_checkpoint(cfg, dir.string(), so);
  SyntheticOptions base;
  base.seed = 1;
  make_synthetic_checkpoint(cfg, (scratch() / "base").string(), base);
  Checkpoint ck = load_checkpoint(dir.string()), ck0 = load_checkpoint((scratch() / "base").string());
  {
    std::vector<float> e = ck.get(kEmbed).to_f32(), e0 = ck0.get(kEmbed).to_f32();
    EXPECT_EQ(e[size_t(151652) * 128 + 5], 35072.0f);  // 35000 in bf16
    // x100 before the bf16 rounding: within one bf16 rounding of 100 x the stored base value.
    const float x = e0[size_t(9) * 128 + 7] * 100;
    EXPECT_NEAR(e[size_t(9) * 128 + 7], x, std::fabs(x) / 64);
    EXPECT_NE(e[size_t(9) * 128 + 7], e0[size_t(9) * 128 + 7]);
    EXPECT_EQ(e[size_t(9) * 128 + 8], e0[size_t(9) * 128 + 8]);
    std::vector<float> d = ck.get("model.language_model.layers.1.mlp.down_proj.weight").to_f32();
    EXPECT_EQ(d[size_t(3) * cfg.text.intermediate_size + 200], 2.5f);
  }
  // Plain and mixed bundles; the report names the embedding.
  QuantOptions mixed;
  mixed.fp16_channels = 3;
  const std::string plain_path = (scratch() / "plain.safetensors").string(), mixed_path = (scratch() / "mixed.safetensors").string();
  BundleStats sp = write_quant_bundle(ck, cfg, plain_path), sm = write_quant_bundle(ck, cfg, mixed_path, mixed);
  bool named = false;
  for (const OutlierReport& r : sp.outliers)
    if (r.tensor == kEmbed) named = r.outlier_zero_share() > 0.9;
  EXPECT_TRUE(named);
  EXPECT_GE(sm.fp16_channels, 3);
  QuantBundle bp(plain_path), bm(mixed_path);
  ASSERT_FALSE(bm.fp16_tensors().empty());
  EXPECT_TRUE(bp.fp16_tensors().empty());
  QuantTensor qe = bm.get_quant(kEmbed);
  EXPECT_EQ(qe.fp16_cols, (std::vector<int32_t>{7, 42, 99}));  // in every row; the 35000 is in one
  // The chain honours the fp16 channels: its embedding rows match the checkpoint closer.
  std::vector<float> src = ck.get(kEmbed).to_f32(), dp = bp.get_dequant(kEmbed), dm = bm.get_dequant(kEmbed);
  auto wm = bundle_weights(bm);
  std::vector<float> chain_row(128);
  wm->matrix(kEmbed, cfg.text.vocab_size, 128).load(9, 1, chain_row.data());
  for (int c = 0; c < 128; ++c) EXPECT_EQ(chain_row[size_t(c)], dm[size_t(9 * 128 + c)]) << c;
  double ep = 0, em = 0;
  for (size_t k = 0; k < src.size(); ++k) ep += std::pow(double(src[k]) - dp[k], 2), em += std::pow(double(src[k]) - dm[k], 2);
  std::printf("tiny x100 embedding: W4A16 SSE %.4g plain, %.4g mixed (%zu fp16 channels)\n", ep, em, qe.fp16_cols.size());
  EXPECT_LT(em * 10, ep);
  std::error_code ec;
  fs::remove_all(scratch(), ec);
}

}  // namespace
