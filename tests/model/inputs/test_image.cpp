// Image input tests against the goldens of scripts/reference/image_golden.py (written
// from the spec, independently of model/inputs/image.cpp). Regenerate the data with:
//   /usr/bin/python3 scripts/reference/image_golden.py --make-inputs --photos DIR
// (DIR: the data folder of scikit-image 0.19.3, Debian's python3-skimage)
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "isa/error.h"
#include "model/inputs/image.h"

namespace gpnpu::model {
namespace {

const std::string kRoot = GPNPU_SOURCE_DIR;
std::string data_path(const std::string& name) { return kRoot + "/tests/model/data/" + name; }

const nlohmann::json& golden() {
  static const nlohmann::json j = [] {
    std::ifstream f(data_path("image_golden.json"));
    EXPECT_TRUE(f.good()) << "missing tests/model/data/image_golden.json";
    return nlohmann::json::parse(f);
  }();
  return j;
}

const nlohmann::json& golden_case(const std::string& name) {
  for (const auto& c : golden()["cases"])
    if (c["name"] == name) return c;
  throw std::runtime_error("no golden case " + name);
}

PreprocessOptions options_for(const nlohmann::json& c) {
  PreprocessOptions opt;
  opt.min_pixels = c["min_pixels"];
  opt.max_pixels = c["max_pixels"];
  if (c["mode"] == "fixed") {
    opt.mode = ResizeMode::fixed;
    opt.height = c["resized_hw"][0];
    opt.width = c["resized_hw"][1];
  } else {
    opt.mode = ResizeMode::smart;
  }
  return opt;
}

// The same pseudo-random weights as weights_for() in the Python script.
double weight_at(uint64_t i) { return static_cast<double>((i * 2654435761ull) % 1000ull) / 1000.0 - 0.5; }

struct Sums {
  double sum = 0, sum_sq = 0, weighted = 0;
};
Sums patch_sums(const std::vector<float>& p) {
  Sums s;
  for (size_t i = 0; i < p.size(); ++i) {
    const double v = p[i];
    s.sum += v;
    s.sum_sq += v * v;
    s.weighted += v * weight_at(i);
  }
  return s;
}

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const gpnpu::Error& e) {
    return e.what();
  }
  return "";
}

// ------------------------------------------------------------------ smart_resize

TEST(ImageSmartResize, MatchesSpecTableAndPython) {
  // Spec 2.1 worked examples (W x H in -> W x H out), also recomputed by the script.
  const int spec[][4] = {{224, 224, 256, 256},   {448, 448, 448, 448},    {640, 480, 640, 480},
                         {800, 600, 800, 608},   {1280, 720, 1280, 704},  {1920, 1080, 1920, 1088},
                         {5000, 5000, 4096, 4096}};
  for (const auto& r : spec) {
    const auto [h, w] = smart_resize(r[1], r[0], 32, 65536, 16777216);
    EXPECT_EQ(w, r[2]) << r[0] << "x" << r[1];
    EXPECT_EQ(h, r[3]) << r[0] << "x" << r[1];
  }
  for (const auto& e : golden()["smart_resize"]) {
    const auto [h, w] = smart_resize(e["in_wh"][1], e["in_wh"][0], 32, 65536, 16777216);
    EXPECT_EQ(w, e["out_wh"][0].get<int>()) << e.dump();
    EXPECT_EQ(h, e["out_wh"][1].get<int>()) << e.dump();
  }
}

TEST(ImageSmartResize, RoundHalfToEvenAndAspectLimit) {
  // 80/32 = 2.5 rounds to 2 (Python round), not 3: 80 -> 64 for a side, when area allows.
  const auto [h, w] = smart_resize(80, 4000, 32, 1024, 16777216);
  EXPECT_EQ(h, 64);
  EXPECT_EQ(w, 4000 / 32 * 32);  // 125 -> 4000
  // Aspect exactly 200 is allowed; 201 is not.
  EXPECT_NO_THROW(smart_resize(32, 6400, 32, 65536, 16777216));
  EXPECT_NE(error_of([] { smart_resize(32, 6432, 32, 65536, 16777216); }).find("200"), std::string::npos);
}

// ------------------------------------------------------------------ normalisation

TEST(ImageNormalise, BitExactWithReferenceLut) {
  const auto& lut = golden()["norm_lut"];
  ASSERT_EQ(lut.size(), 256u);
  int alt_diff = 0;
  for (int x = 0; x < 256; ++x) {
    const float ref = lut[x].get<float>();
    EXPECT_EQ(normalise_pixel(static_cast<uint8_t>(x)), ref) << x;
    // Negative control: the other formula of docs/testing.md model-test item 7 differs in the last
    // bit for some x, so this test can tell them apart.
    const float alt = (static_cast<float>(x) / 255.0f - 0.5f) / 0.5f;
    alt_diff += (alt != ref);
  }
  EXPECT_GT(alt_diff, 0);
  std::printf("[ image ] normalise: (x-127.5)/127.5 bit-exact for 256 codes; (x/255-0.5)/0.5 differs in %d\n",
              alt_diff);
}

// ------------------------------------------------------------------ whole pipeline

// Checks one golden case against the Python reference. `exact`: the resize is the
// identity (or compositing only), so everything must match bit for bit. Otherwise the
// resized bytes may differ from torch by at most 1 LSB in a handful of values: torch
// 1.13 computes its float32 filter weights with roundings that differ from ours in
// the last bit (measured: 1 value of 196608 for 451x300 -> 256x256).
struct CaseResult {
  int max_err = 0;     // max |C++ - torch| of the resized bytes (LSB)
  int n_diff = 0;      // how many resized bytes differ
  size_t n_values = 0;
};
CaseResult check_case(const std::string& name, bool exact) {
  const auto& c = golden_case(name);
  const ImageInput in = preprocess_image(kRoot + "/" + c["input"].get<std::string>(), options_for(c));
  EXPECT_EQ(in.orig_height, c["orig_hw"][0].get<int>());
  EXPECT_EQ(in.orig_width, c["orig_hw"][1].get<int>());
  EXPECT_EQ(in.resized.height, c["resized_hw"][0].get<int>());
  EXPECT_EQ(in.resized.width, c["resized_hw"][1].get<int>());
  EXPECT_EQ(in.grid_t, c["grid_thw"][0].get<int>());
  EXPECT_EQ(in.grid_h, c["grid_thw"][1].get<int>());
  EXPECT_EQ(in.grid_w, c["grid_thw"][2].get<int>());
  EXPECT_EQ(in.n_patches(), c["n_patches"].get<int>());
  EXPECT_EQ(in.n_tokens(), c["n_tokens"].get<int>());
  EXPECT_EQ(in.patch_dim, 1536);
  EXPECT_EQ(in.patches.size(), static_cast<size_t>(in.n_patches()) * 1536);

  // Resized bytes: exact integer checksums, and the full image where the script stored it.
  CaseResult res;
  res.n_values = in.resized.rgb.size();
  int64_t rsum = 0;
  uint64_t rweighted = 0;
  for (size_t i = 0; i < in.resized.rgb.size(); ++i) {
    rsum += in.resized.rgb[i];
    rweighted += static_cast<uint64_t>(in.resized.rgb[i]) * ((i * 2654435761ull) % 1000ull);
  }
  if (c.contains("resized_png")) {
    const RgbImage ref = load_image_rgb(kRoot + "/" + c["resized_png"].get<std::string>());
    EXPECT_EQ(ref.rgb.size(), in.resized.rgb.size());
    for (size_t i = 0; i < std::min(ref.rgb.size(), in.resized.rgb.size()); ++i) {
      const int d = std::abs(int(ref.rgb[i]) - int(in.resized.rgb[i]));
      res.max_err = std::max(res.max_err, d);
      res.n_diff += d != 0;
    }
  }
  const int64_t ref_sum = c["resized_sum"].get<int64_t>();
  if (exact) {
    EXPECT_EQ(rsum, ref_sum) << name;
    EXPECT_EQ(rweighted, c["resized_weighted"].get<uint64_t>()) << name;
  } else {
    EXPECT_LE(std::abs(rsum - ref_sum), 4) << name;
  }

  // Patch rows (stored as pixel codes; value = norm_lut[code]).
  const auto& lut = golden()["norm_lut"];
  for (const auto& [row, codes] : c["row_codes"].items()) {
    const size_t r = std::stoul(row);
    int mismatches = 0;
    for (size_t k = 0; k < 1536; ++k)
      mismatches += in.patches[r * 1536 + k] != lut[codes[k].get<int>()].get<float>();
    EXPECT_LE(mismatches, exact ? 0 : 8) << name << " row " << r;
  }
  // Whole-tensor checksums (double sums of float32 values; the weighted one catches any
  // permutation of rows or of elements within a row). One byte off by 1 LSB moves a sum
  // by 2/127.5 (the byte appears in both temporal copies).
  const double tol = exact ? 1e-6 : 0.2;
  const Sums s = patch_sums(in.patches);
  const auto& cs = c["checksums"];
  EXPECT_NEAR(s.sum, cs["sum"].get<double>(), tol) << name;
  EXPECT_NEAR(s.sum_sq, cs["sum_sq"].get<double>(), tol) << name;
  EXPECT_NEAR(s.weighted, cs["weighted"].get<double>(), tol) << name;
  std::printf("[ image ] %s: %dx%d -> %dx%d grid (1,%d,%d) tokens %d; resized bytes vs torch: max |err| %d LSB, "
              "%d of %zu differ; |sum diff| %lld; weighted patch checksum diff %.3g\n",
              name.c_str(), in.orig_width, in.orig_height, in.resized.width, in.resized.height, in.grid_h,
              in.grid_w, in.n_tokens(), res.max_err, res.n_diff, res.n_values,
              static_cast<long long>(std::abs(rsum - ref_sum)), std::fabs(s.weighted - cs["weighted"].get<double>()));
  return res;
}

TEST(ImagePipeline, Photo256) { EXPECT_EQ(check_case("photo_256", true).max_err, 0); }
TEST(ImagePipeline, Photo448Grey) { EXPECT_EQ(check_case("photo_448", true).max_err, 0); }
// Resize accuracy: downscale 451x300 -> 256x256 (default) with antialias, both axes.
TEST(ImagePipeline, BundledDefault256) {
  const CaseResult r = check_case("bundled_default_256", false);
  EXPECT_LE(r.max_err, 1);
  EXPECT_LE(r.n_diff, 4);
}
// smart_resize of the bundled photo: 451x300 -> 448x288 (checksums only).
TEST(ImagePipeline, BundledSmart) { check_case("bundled_smart", false); }
// Upscale 40x40 -> 64x64 (min_pixels 4096).
TEST(ImagePipeline, SmallUpscale) {
  const CaseResult r = check_case("small_40_upscale", false);
  EXPECT_LE(r.max_err, 1);
  EXPECT_LE(r.n_diff, 4);
}
TEST(ImagePipeline, RgbaCompositedOnWhite) { EXPECT_EQ(check_case("rgba_64", true).max_err, 0); }

TEST(ImagePipeline, SpecWorkedExampleGrids) {
  // Spec 2.1 / 5.6: 448x448 -> (1,28,28), 196 tokens on 14x14; 256x256 -> (1,16,16), 64.
  PreprocessOptions smart;
  smart.mode = ResizeMode::smart;
  const ImageInput a = preprocess_image(data_path("image_photo_448.png"), smart);
  EXPECT_EQ(a.grid_h, 28);
  EXPECT_EQ(a.grid_w, 28);
  EXPECT_EQ(a.n_tokens(), 196);
  EXPECT_EQ(a.merged_h(), 14);
  const ImageInput b = preprocess_image(data_path("image_photo_256.png"));  // default: fixed 256x256
  EXPECT_EQ(b.grid_h, 16);
  EXPECT_EQ(b.n_tokens(), 64);
}

TEST(ImagePipeline, PatchOrderIsMergeWindow) {
  // Independent of the goldens: patch n of a synthetic image whose pixel encodes its
  // coordinates, checked against the spec formula n = ((bh*(gw/2)+bw)*2+mh)*2+mw.
  RgbImage img;
  img.width = 64;
  img.height = 96;  // gh = 6, gw = 4
  img.rgb.resize(64 * 96 * 3);
  for (int y = 0; y < 96; ++y)
    for (int x = 0; x < 64; ++x) {
      img.rgb[(y * 64 + x) * 3 + 0] = static_cast<uint8_t>(y);
      img.rgb[(y * 64 + x) * 3 + 1] = static_cast<uint8_t>(x);
      img.rgb[(y * 64 + x) * 3 + 2] = static_cast<uint8_t>((x + y) % 7);
    }
  const std::vector<float> p = patchify(img, 16, 2, 2);
  ASSERT_EQ(p.size(), 24u * 1536);
  for (int bh = 0; bh < 3; ++bh)
    for (int bw = 0; bw < 2; ++bw)
      for (int mh = 0; mh < 2; ++mh)
        for (int mw = 0; mw < 2; ++mw) {
          const int n = ((bh * 2 + bw) * 2 + mh) * 2 + mw, r = 2 * bh + mh, q = 2 * bw + mw;
          for (int c = 0; c < 3; ++c)
            for (int t = 0; t < 2; ++t)
              for (int py = 0; py < 16; ++py)
                for (int px = 0; px < 16; ++px) {
                  const int y = r * 16 + py, x = q * 16 + px;
                  const int code = c == 0 ? y : c == 1 ? x : (x + y) % 7;
                  ASSERT_EQ(p[n * 1536 + ((c * 2 + t) * 16 + py) * 16 + px], normalise_pixel(code))
                      << n << " " << c << " " << t << " " << py << " " << px;
                }
        }
  // Negative control: the weighted checksum sees a swap of two rows.
  std::vector<float> q = p;
  std::swap_ranges(q.begin() + 1536, q.begin() + 2 * 1536, q.begin() + 2 * 1536);
  EXPECT_GT(std::fabs(patch_sums(q).weighted - patch_sums(p).weighted), 1e-3);
}

TEST(ImageResize, IdentityAndKernel) {
  // Same size: identity. 2x upscale of a constant stays constant (weights sum to 1).
  RgbImage img;
  img.width = 40;
  img.height = 36;
  img.rgb.assign(40 * 36 * 3, 77);
  const RgbImage up = resize_bicubic_aa(img, 80, 72);
  for (uint8_t v : up.rgb) ASSERT_EQ(v, 77);
  for (size_t i = 0; i < img.rgb.size(); ++i) img.rgb[i] = static_cast<uint8_t>(i * 31);
  EXPECT_EQ(resize_bicubic_aa(img, 40, 36).rgb, img.rgb);
}

TEST(ImageResize, AntialiasMatters) {
  // Negative control for the resize comparison: a different resampler (nearest
  // neighbour) is far from the reference in the same max-|err| metric.
  const auto& c = golden_case("bundled_default_256");
  const RgbImage src = load_image_rgb(kRoot + "/examples/photos/chelsea.png");
  const RgbImage ref = load_image_rgb(kRoot + "/" + c["resized_png"].get<std::string>());
  int max_err = 0;
  for (int y = 0; y < 256; ++y)
    for (int x = 0; x < 256; ++x)
      for (int ch = 0; ch < 3; ++ch) {
        const int sy = y * src.height / 256, sx = x * src.width / 256;
        max_err = std::max(max_err, std::abs(int(src.rgb[(sy * src.width + sx) * 3 + ch]) -
                                             int(ref.rgb[(y * 256 + x) * 3 + ch])));
      }
  EXPECT_GT(max_err, 10);
}

// ------------------------------------------------------------------ decoding

TEST(ImageLoad, JpegCloseToLibjpeg) {
  const RgbImage a = load_image_rgb(data_path("image_jpeg_64.jpg"));
  const RgbImage b = load_image_rgb(data_path("image_ref_jpeg_64_pil.png"));
  ASSERT_EQ(a.width, 64);
  ASSERT_EQ(a.height, 64);
  ASSERT_EQ(a.rgb.size(), b.rgb.size());
  int max_err = 0;
  double sum_err = 0;
  for (size_t i = 0; i < a.rgb.size(); ++i) {
    const int d = std::abs(int(a.rgb[i]) - int(b.rgb[i]));
    max_err = std::max(max_err, d);
    sum_err += d;
  }
  const double mean_err = sum_err / a.rgb.size();
  std::printf("[ image ] JPEG stb_image vs PIL/libjpeg: max |diff| %d, mean %.3f LSB\n", max_err, mean_err);
  // stb_image and libjpeg use different IDCTs and chroma upsampling: a few LSB.
  EXPECT_LE(max_err, 8);
  EXPECT_LT(mean_err, 1.5);
}

TEST(ImageLoad, GreyBecomesRgb) {
  const RgbImage g = load_image_rgb(data_path("image_photo_448.png"));
  for (size_t i = 0; i < g.rgb.size(); i += 3) {
    ASSERT_EQ(g.rgb[i], g.rgb[i + 1]);
    ASSERT_EQ(g.rgb[i], g.rgb[i + 2]);
  }
}

// ------------------------------------------------------------------ errors

TEST(ImageErrors, UnreadableFile) {
  const std::string path = data_path("no_such_image.png");
  const std::string e = error_of([&] { load_image_rgb(path); });
  EXPECT_NE(e.find(path), std::string::npos) << e;
  EXPECT_NE(e.find("No such file"), std::string::npos) << e;
}

TEST(ImageErrors, NotAnImage) {
  const std::string e = error_of([] { preprocess_image(data_path("image_not_an_image.png")); });
  EXPECT_NE(e.find("not a readable image"), std::string::npos) << e;
  EXPECT_NE(e.find("image_not_an_image.png"), std::string::npos) << e;
}

TEST(ImageErrors, TooSmall) {
  // 64x31: one side below the processor's minimum of 32 px, in both modes.
  for (ResizeMode m : {ResizeMode::fixed, ResizeMode::smart}) {
    PreprocessOptions opt;
    opt.mode = m;
    const std::string e = error_of([&] { preprocess_image(data_path("image_too_small_64x31.png"), opt); });
    EXPECT_NE(e.find("too small"), std::string::npos) << e;
    EXPECT_NE(e.find("64x31"), std::string::npos) << e;
    EXPECT_NE(e.find(">= 32 px"), std::string::npos) << e;
  }
  // 32x32 is fine (smart_resize scales it up to 256x256).
  RgbImage ok;
  ok.width = ok.height = 32;
  ok.rgb.assign(32 * 32 * 3, 9);
  PreprocessOptions smart;
  smart.mode = ResizeMode::smart;
  EXPECT_EQ(preprocess_rgb(ok, smart).n_tokens(), 64);
}

TEST(ImageErrors, TooElongated) {
  const std::string e = error_of([] { preprocess_image(data_path("image_too_elongated_6432x32.png")); });
  EXPECT_NE(e.find("too elongated"), std::string::npos) << e;
  EXPECT_NE(e.find("201.0 > 200"), std::string::npos) << e;
}

TEST(ImageErrors, BadTargetSize) {
  PreprocessOptions opt;
  opt.width = 250;
  EXPECT_NE(error_of([&] { preprocess_image(data_path("image_photo_256.png"), opt); }).find("multiples of 32"),
            std::string::npos);
  opt.width = opt.height = 128;  // 16384 px < min_pixels 65536
  EXPECT_NE(error_of([&] { preprocess_image(data_path("image_photo_256.png"), opt); }).find("outside"),
            std::string::npos);
}

// ------------------------------------------------------------------ tower position tables

TEST(ImageTowerTables, RotaryIdsAndPosInterpMatchReference) {
  for (const char* name : {"photo_256", "photo_448"}) {
    const auto& c = golden_case(name);
    const int gh = c["grid_thw"][1], gw = c["grid_thw"][2];
    const auto ids = tower_rotary_ids(gh, gw);
    const auto& rid = c["tower_rot_ids"];
    ASSERT_EQ(ids.size(), rid.size());
    for (size_t n = 0; n < ids.size(); ++n) {
      ASSERT_EQ(ids[n][0], rid[n][0].get<int>()) << name << " " << n;
      ASSERT_EQ(ids[n][1], rid[n][1].get<int>()) << name << " " << n;
    }
    const PosInterp pi = pos_embed_interp(gh, gw, 48);
    ASSERT_EQ(pi.index.size(), ids.size());
    int exact = 0;
    for (size_t n = 0; n < ids.size(); ++n)
      for (int j = 0; j < 4; ++j) {
        ASSERT_EQ(pi.index[n][j], c["pos_interp_idx"][n][j].get<int>()) << name << " " << n << " " << j;
        const float w = c["pos_interp_w"][n][j].get<float>();
        ASSERT_EQ(pi.weight[n][j], w) << name << " " << n << " " << j;
        ++exact;
      }
    std::printf("[ image ] %s: tower rot ids %zu, pos-interp %d weights bit-exact vs the Python reference (spec linspace)\n", name,
                ids.size(), exact);
  }
  // Spot values from the spec: first patch maps to table row 0 with weight 1; the last
  // patch of a 28x28 grid maps to row 47*48+47.
  const PosInterp pi = pos_embed_interp(28, 28, 48);
  EXPECT_EQ(pi.index[0][0], 0);
  EXPECT_EQ(pi.weight[0][0], 1.0f);
  EXPECT_EQ(pi.index.back()[0], 47 * 48 + 47);
}

TEST(ImageTowerTables, LinspaceMatchesTorchFormula) {
  // Negative control for bit-exactness: the naive start + i*step differs from torch's
  // two-sided formula for some i (28 steps over [0, 47]).
  const auto v = torch_linspace_f32(0.0f, 47.0f, 28);
  EXPECT_EQ(v.front(), 0.0f);
  EXPECT_EQ(v.back(), 47.0f);
  const float step = 47.0f / 27.0f;
  int naive_diff = 0;
  for (int i = 0; i < 28; ++i) naive_diff += (v[i] != step * static_cast<float>(i));
  EXPECT_GT(naive_diff, 0);
}

// ------------------------------------------------------------------ CLI

TEST(ImageCli, PreprocessPrintsGridAndWritesPatches) {
  const auto tmp = std::filesystem::temp_directory_path() / "gpnpu_test_preprocess.bin";
  const std::string cmd = std::string(GPNPU_BINARY) + " preprocess --image " + kRoot +
                          "/examples/photos/chelsea.png --out " + tmp.string() + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[512];
  while (fgets(buf, sizeof buf, p)) out += buf;
  const int rc = pclose(p);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("grid_thw     (1, 16, 16)"), std::string::npos) << out;
  EXPECT_NE(out.find("image tokens 64"), std::string::npos) << out;
  std::ifstream f(tmp, std::ios::binary);
  std::vector<float> got(256 * 1536);
  f.read(reinterpret_cast<char*>(got.data()), got.size() * 4);
  ASSERT_TRUE(f.good());
  EXPECT_EQ(got, preprocess_image(kRoot + "/examples/photos/chelsea.png").patches);
  std::filesystem::remove(tmp);

  const std::string bad = std::string(GPNPU_BINARY) + " preprocess --image /nonexistent.png 2>&1";
  p = popen(bad.c_str(), "r");
  out.clear();
  while (fgets(buf, sizeof buf, p)) out += buf;
  EXPECT_NE(pclose(p), 0);
  EXPECT_NE(out.find("error: "), std::string::npos) << out;
  EXPECT_NE(out.find("/nonexistent.png"), std::string::npos) << out;
}

}  // namespace
}  // namespace gpnpu::model
