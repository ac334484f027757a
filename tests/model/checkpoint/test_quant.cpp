// W4A16 quantiser tests: packing, the half-step error bound (with a negative control),
// the clipping search never worse than min/max per block, partial blocks, determinism,
// and the quantised bundle written from a synthetic tiny checkpoint.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>

#include <unistd.h>

#include "isa/error.h"
#include "isa/fp16.h"
#include "model/checkpoint/config.h"
#include "model/checkpoint/quant.h"
#include "model/checkpoint/safetensors.h"
#include "model/checkpoint/synthetic.h"

using namespace gpnpu::model;
namespace fs = std::filesystem;

namespace {

std::vector<float> gaussian(int64_t rows, int64_t cols, uint64_t seed, double std = 0.02) {
  NormalRng rng(seed);
  std::vector<float> w(size_t(rows * cols));
  for (auto& x : w) x = float(std * rng.normal());
  return w;
}

// Student-t with nu = 3 degrees of freedom (heavy tails), scaled by `scale`.
std::vector<float> student_t3(int64_t rows, int64_t cols, uint64_t seed, double scale = 0.02) {
  NormalRng rng(seed);
  std::vector<float> w(size_t(rows * cols));
  for (auto& x : w) {
    double z = rng.normal();
    double a = rng.normal(), b = rng.normal(), c = rng.normal();
    x = float(scale * z / std::sqrt((a * a + b * b + c * c) / 3));
  }
  return w;
}

// Gaussian with ~0.5% outliers 20x larger.
std::vector<float> gaussian_outliers(int64_t rows, int64_t cols, uint64_t seed) {
  std::vector<float> w = gaussian(rows, cols, seed);
  NormalRng rng(seed + 1);
  for (auto& x : w)
    if (rng.uniform() < 0.005) x *= 20;
  return w;
}

struct Summary {
  float worst_ratio = 0;  // max over blocks of max_abs_err / half_step
  double sse = 0;
};

}  // namespace

TEST(Quant, PackingAndFormula) {
  // One row, 5 columns: odd width, one partial block.
  std::vector<float> w = {0.0f, 1.0f, -0.5f, 0.25f, 0.75f};
  QuantTensor q = quantise(w.data(), 1, 5, {.clip_search = false, .threads = 1});
  ASSERT_EQ(q.nblocks(), 1);
  ASSERT_EQ(q.row_stride(), 3);
  ASSERT_EQ(q.codes.size(), 3u);
  // range [-0.5, 1.0]: s = smallest fp16 >= 1.5/15 = 0.1 -> 0.1000366..., z = round(0.5/s) = 5
  const float s = gpnpu::f16_to_f32(q.scales[0]);
  EXPECT_GE(15.0 * s, 1.5);
  EXPECT_LT(15.0 * gpnpu::f16_to_f32(uint16_t(q.scales[0] - 1)), 1.5);  // the smallest such fp16
  EXPECT_EQ(q.zeros[0], 5);
  for (int c = 0; c < 5; ++c) {
    int want = std::clamp(int(std::floor(double(w[size_t(c)]) / s + 0.5)) + 5, 0, 15);
    EXPECT_EQ(q.code(0, c), want) << c;
    uint8_t byte = q.codes[size_t(c / 2)];
    EXPECT_EQ((c & 1) ? byte >> 4 : byte & 15, want) << "low nibble = even column";
    EXPECT_EQ(q.dequant(0, c), float(want - 5) * s);
  }
  EXPECT_EQ(q.codes[2] >> 4, 0) << "unused high nibble of an odd row is 0";
  EXPECT_EQ(q.dequant(0, 0), 0.0f) << "zero is exactly representable";
  auto d = dequantise(q);
  for (int c = 0; c < 5; ++c) EXPECT_EQ(d[size_t(c)], q.dequant(0, c));
}

TEST(Quant, SpecialBlocks) {
  // All-zero block, all-positive block (range widened to 0: z = 0), all-negative (z = 15).
  std::vector<float> w(3 * 128);
  for (int i = 0; i < 128; ++i) {
    w[size_t(128 + i)] = 0.5f + float(i) / 256;
    w[size_t(256 + i)] = -0.5f - float(i) / 256;
  }
  QuantTensor q = quantise(w.data(), 3, 128, {.clip_search = true, .threads = 1});
  EXPECT_EQ(q.scales[0], 0);
  EXPECT_EQ(q.zeros[0], 0);
  EXPECT_EQ(q.zeros[1], 0);
  EXPECT_EQ(q.zeros[2], 15);
  auto d = dequantise(q);
  for (int i = 0; i < 128; ++i) EXPECT_EQ(d[size_t(i)], 0.0f);
  auto rep = quant_error_report(w.data(), q);
  EXPECT_EQ(rep.blocks_over_bound, 0);
  // Non-finite input is an error naming the tensor and position.
  w[5] = std::nanf("");
  try {
    quantise(w.data(), 3, 128, {}, "blk.weight");
    FAIL() << "no error";
  } catch (const gpnpu::Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("blk.weight"), std::string::npos) << m;
    EXPECT_NE(m.find("row 0, column 5"), std::string::npos) << m;
  }
}

// The half-step bound of plain min/max quantisation, on Gaussian and heavy-tailed
// matrices, with full and partial blocks (cols 1000 = 7*128 + 104; cols 301 odd).
TEST(Quant, MinMaxErrorWithinHalfStep) {
  struct Case {
    const char* name;
    std::vector<float> w;
    int64_t rows, cols;
  };
  std::vector<Case> cases = {{"gaussian 256x1024", gaussian(256, 1024, 1), 256, 1024},
                             {"student-t3 256x1024", student_t3(256, 1024, 2), 256, 1024},
                             {"outliers 256x1024", gaussian_outliers(256, 1024, 3), 256, 1024},
                             {"gaussian 64x1000 (partial)", gaussian(64, 1000, 4), 64, 1000},
                             {"student-t3 33x301 (odd)", student_t3(33, 301, 5), 33, 301}};
  for (const auto& c : cases) {
    QuantTensor q = quantise(c.w.data(), c.rows, c.cols, {.clip_search = false, .threads = 2});
    ASSERT_EQ(q.nblocks(), (c.cols + 127) / 128);
    auto rep = quant_error_report(c.w.data(), q);
    float worst = 0;
    for (size_t k = 0; k < rep.max_abs_err.size(); ++k) {
      ASSERT_EQ(rep.clipped[k], 0) << c.name << " block " << k;  // min/max covers every weight
      ASSERT_LE(rep.max_abs_err[k], rep.half_step[k] * (1 + 1e-5f)) << c.name << " block " << k;
      worst = std::max(worst, rep.max_abs_err[k] / rep.half_step[k]);
    }
    EXPECT_EQ(rep.blocks_over_bound, 0);
    std::printf("  [quant] %-28s min/max: worst block max|err| / half-step = %.6f, rms err = %.3e\n", c.name, worst,
                std::sqrt(rep.total_sse / double(c.rows * c.cols)));
  }
}

// Negative control: a corrupted code must break the bound (the gate can fail).
TEST(Quant, ErrorGateCatchesCorruptCode) {
  auto w = gaussian(8, 256, 7);
  QuantTensor q = quantise(w.data(), 8, 256, {.clip_search = false, .threads = 1});
  ASSERT_EQ(quant_error_report(w.data(), q).blocks_over_bound, 0);
  q.codes[3 * q.row_stride() + 70] ^= 0x44;  // flip bit 2 of both nibbles: off by 4 steps
  auto rep = quant_error_report(w.data(), q);
  EXPECT_EQ(rep.blocks_over_bound, 1);
  EXPECT_GT(rep.worst_ratio_in, 6.0f);
}

// The clipping search is never worse than plain min/max, block by block, and it helps
// on heavy tails.
TEST(Quant, ClipSearchNeverWorseThanMinMax) {
  struct Case {
    const char* name;
    std::vector<float> w;
    int64_t rows, cols;
  };
  std::vector<Case> cases = {{"gaussian 256x1024", gaussian(256, 1024, 11), 256, 1024},
                             {"student-t3 256x1024", student_t3(256, 1024, 12), 256, 1024},
                             {"outliers 256x1024", gaussian_outliers(256, 1024, 13), 256, 1024},
                             {"student-t3 31x333 (partial)", student_t3(31, 333, 14), 31, 333}};
  for (const auto& c : cases) {
    QuantTensor qm = quantise(c.w.data(), c.rows, c.cols, {.clip_search = false, .threads = 2});
    QuantTensor qc = quantise(c.w.data(), c.rows, c.cols, {.clip_search = true, .threads = 2});
    auto rm = quant_error_report(c.w.data(), qm);
    auto rc = quant_error_report(c.w.data(), qc);
    int64_t better = 0, clipped_blocks = 0;
    for (size_t k = 0; k < rm.sse.size(); ++k) {
      ASSERT_LE(rc.sse[k], rm.sse[k]) << c.name << " block " << k;
      better += rc.sse[k] < rm.sse[k] * (1 - 1e-6);
      clipped_blocks += rc.clipped[k] > 0;
    }
    // Weights inside the chosen grid are still within half a step.
    EXPECT_EQ(rc.blocks_over_bound, 0) << c.name;
    EXPECT_LE(rc.total_sse, rm.total_sse);
    std::printf("  [quant] %-28s clip search: sse %.4e vs min/max %.4e (%.1f%% lower), %lld/%zu blocks improved, "
                "%lld with clipped weights, in-grid worst ratio %.6f\n",
                c.name, rc.total_sse, rm.total_sse, 100 * (1 - rc.total_sse / rm.total_sse), (long long)better,
                rm.sse.size(), (long long)clipped_blocks, rc.worst_ratio_in);
    if (std::string(c.name).find("student") != std::string::npos) {
      EXPECT_LT(rc.total_sse, 0.97 * rm.total_sse);
    }
  }
}

TEST(Quant, DeterministicAcrossThreadCounts) {
  auto w = student_t3(97, 640, 21);
  QuantTensor a = quantise(w.data(), 97, 640, {.clip_search = true, .threads = 1});
  QuantTensor b = quantise(w.data(), 97, 640, {.clip_search = true, .threads = 5});
  EXPECT_EQ(a.codes, b.codes);
  EXPECT_EQ(a.scales, b.scales);
  EXPECT_EQ(a.zeros, b.zeros);
}

// ---- the bundle -------------------------------------------------------------------------

TEST(QuantBundle, TinyCheckpointRoundTrip) {
  fs::path dir = fs::temp_directory_path() / ("gpnpu_qb_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const ModelConfig cfg = config_tiny();
  make_synthetic_checkpoint(cfg, (dir / "ck").string(), {.seed = 3, .threads = 2, .no_data = false});
  Checkpoint ck = load_checkpoint((dir / "ck").string());
  const std::string out = (dir / "tiny.w4a16.safetensors").string();
  auto t0 = std::chrono::steady_clock::now();
  BundleStats st = write_quant_bundle(ck, cfg, out, {.clip_search = true, .threads = 2});
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("  [quant] tiny bundle: %lld quantised tensors, %lld weights, %lld blocks, %llu bytes, %.2f s\n",
              (long long)st.quantised_tensors, (long long)st.weights, (long long)st.blocks,
              (unsigned long long)st.bytes, secs);
  EXPECT_EQ(st.blocks_over_bound, 0);

  // The header: 3 tensors per quantised weight, 1 per float tensor, exact dtypes/shapes.
  SafetensorsFile raw(out);
  int64_t nq = 0, nf = 0;
  for (const auto& s : expected_tensors(cfg)) (s.quantised() ? nq : nf)++;
  EXPECT_EQ(st.quantised_tensors, nq);
  EXPECT_EQ(int64_t(raw.tensors().size()), 3 * nq + nf);
  EXPECT_EQ(raw.metadata().at("format"), "gpnpu-w4a16");
  const auto& pe = raw.get(std::string(kPatchEmbedWeight) + ".qcodes");
  EXPECT_EQ(pe.dtype, DType::U8);
  EXPECT_EQ(pe.shape, (std::vector<int64_t>{128, 768}));  // [out, ceil(1536/2)]
  EXPECT_EQ(raw.get(std::string(kPatchEmbedWeight) + ".scales").shape, (std::vector<int64_t>{128, 12}));
  EXPECT_EQ(raw.get(std::string(kPatchEmbedWeight) + ".scales").dtype, DType::F16);
  EXPECT_EQ(raw.get(std::string(kEmbedTokens) + ".zeros").shape, (std::vector<int64_t>{151936, 1}));
  EXPECT_EQ(raw.get(kPosEmbed).dtype, DType::F32);

  QuantBundle qb(out);
  EXPECT_EQ(qb.config(), cfg);
  for (const auto& s : expected_tensors(cfg)) {
    std::vector<float> orig = ck.get_f32(s.name);
    if (s.quantised()) {
      ASSERT_TRUE(qb.is_quantised(s.name));
      QuantTensor q = qb.get_quant(s.name);
      ASSERT_EQ(q.rows, s.rows());
      ASSERT_EQ(q.cols, s.cols());
      // The bundle holds exactly what the quantiser makes from the checkpoint values.
      QuantTensor again = quantise(orig.data(), s.rows(), s.cols(), {.clip_search = true, .threads = 1});
      ASSERT_EQ(q.codes, again.codes) << s.name;
      ASSERT_EQ(q.scales, again.scales) << s.name;
      ASSERT_EQ(q.zeros, again.zeros) << s.name;
      EXPECT_EQ(quant_error_report(orig.data(), q).blocks_over_bound, 0) << s.name;
    } else {
      EXPECT_EQ(qb.get_f32(s.name), orig) << s.name;  // bf16 -> f32 is exact
    }
  }
  // Errors: a plain checkpoint is not a bundle; asking for the wrong kind.
  try {
    QuantBundle bad((dir / "ck" / "model.safetensors").string());
    ADD_FAILURE() << "no error";
  } catch (const gpnpu::Error& e) {
    EXPECT_NE(std::string(e.what()).find("not a gpnpu W4A16 bundle"), std::string::npos) << e.what();
  }
  EXPECT_THROW(qb.get_f32(kEmbedTokens), gpnpu::Error);
  EXPECT_THROW(qb.get_quant(kPosEmbed), gpnpu::Error);
  fs::remove_all(dir);
}

// Throughput figure for the report (not a gate): one 2048 x 2048 matrix, one thread.
TEST(Quant, Throughput) {
  auto w = gaussian(2048, 2048, 31);
  auto t0 = std::chrono::steady_clock::now();
  QuantTensor q = quantise(w.data(), 2048, 2048, {.clip_search = true, .threads = 1});
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("  [quant] 2048x2048 with clip search, 1 thread: %.3f s (%.1f M weights/s)\n", secs,
              4.194304 / secs);
  EXPECT_EQ(q.codes.size(), size_t(2048 * 1024));
}
