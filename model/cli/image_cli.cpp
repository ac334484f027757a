// `gpnpu preprocess`: runs the image input pipeline on one file and prints the grid,
// the number of image tokens and statistics of the patch values; optionally writes
// the patches (raw little-endian float32, [n_patches][patch_dim], merge-window order)
// and the resized RGB image as PNG.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <memory>

#include <fmt/format.h>

#include "isa/atomic_file.h"
#include "isa/cli_rules.h"
#include "isa/error.h"
#include "isa/io_rules.h"
#include "model/cli/commands.h"
#include "model/inputs/image.h"

namespace gpnpu::model {

namespace {

constexpr int64_t kMaxOptionPixels = int64_t(1) << 32;  // --max-pixels/--min-pixels

struct PreprocessArgs {
  std::string image;
  std::string size;
  int64_t max_pixels = 0;
  int64_t min_pixels = 0;
  std::string out;
  std::string resized_png;
};

PreprocessOptions parse_options(const PreprocessArgs& a) {
  PreprocessOptions opt;
  if (a.min_pixels > 0) opt.min_pixels = a.min_pixels;
  if (a.max_pixels > 0) {
    opt.mode = ResizeMode::smart;
    opt.max_pixels = a.max_pixels;
  } else if (a.min_pixels > 0) {
    opt.mode = ResizeMode::smart;
  }
  if (!a.size.empty()) {
    if (opt.mode == ResizeMode::smart)
      fail("preprocess: give either --size or --max-pixels/--min-pixels, not both");
    if (a.size == "auto") {
      opt.mode = ResizeMode::smart;
      return opt;
    }
    if (a.size.find_first_of("xX") == std::string::npos)
      fail("preprocess: --size '{}' is not WxH (e.g. 448x448) or 'auto'", a.size);
    auto [w, h] = io::parse_pair(a.size, "preprocess: --size", "WxH", 1, 65536);
    opt.width = int(w);
    opt.height = int(h);
  }
  return opt;
}

void run_preprocess(const PreprocessArgs& a) {
  io::Outputs().input("--image", a.image).output("--out", a.out).output("--resized-png", a.resized_png).check();
  const PreprocessOptions opt = parse_options(a);
  const ImageInput in = preprocess_image(a.image, opt);
  double sum = 0, sq = 0;
  float mn = std::numeric_limits<float>::infinity(), mx = -mn;
  for (float v : in.patches) {
    sum += v;
    sq += static_cast<double>(v) * v;
    mn = std::min(mn, v);
    mx = std::max(mx, v);
  }
  const double n = static_cast<double>(in.patches.size());
  const double mean = sum / n;
  fmt::print("image        {}\n", a.image);
  fmt::print("input        {}x{} px (WxH)\n", in.orig_width, in.orig_height);
  fmt::print("resized      {}x{} px ({})\n", in.resized.width, in.resized.height,
             opt.mode == ResizeMode::fixed ? "fixed size" : "smart_resize");
  fmt::print("grid_thw     ({}, {}, {})\n", in.grid_t, in.grid_h, in.grid_w);
  fmt::print("patches      {} x {} floats\n", in.n_patches(), in.patch_dim);
  fmt::print("image tokens {} (merged grid {}x{})\n", in.n_tokens(), in.merged_h(), in.merged_w());
  fmt::print("patch values min {:.6f} max {:.6f} mean {:.6f} std {:.6f}\n", mn, mx, mean,
             std::sqrt(std::max(0.0, sq / n - mean * mean)));
  if (!a.out.empty()) {
    write_file_atomic(a.out, std::string_view(reinterpret_cast<const char*>(in.patches.data()),
                                              in.patches.size() * sizeof(float)));
    fmt::print("wrote        {} ({} bytes, float32 [{}][{}])\n", a.out, in.patches.size() * 4,
               in.n_patches(), in.patch_dim);
  }
  if (!a.resized_png.empty()) {
    save_png(a.resized_png, in.resized);
    fmt::print("wrote        {}\n", a.resized_png);
  }
}

}  // namespace

void add_image_commands(CLI::App& app) {
  auto args = std::make_shared<PreprocessArgs>();
  CLI::App* cmd = app.add_subcommand(
      "preprocess", "Image -> patches: resize, normalise, patchify (Qwen3-VL image processor)");
  cmd->add_option("--image", args->image, "PNG or JPEG file")->required();
  cmd->add_option("--size", args->size,
                  "target WxH in px, multiples of 32 (default 256x256 = 64 image tokens), "
                  "or 'auto' for smart_resize");
  cmd->add_option("--max-pixels", args->max_pixels,
                  "smart_resize with this pixel budget (processor default 16777216)")
      ->check(cli::integer(1, kMaxOptionPixels));
  cmd->add_option("--min-pixels", args->min_pixels,
                  "smart_resize lower bound in pixels (processor default 65536)")
      ->check(cli::integer(1, kMaxOptionPixels));
  cmd->add_option("--out", args->out, "write patches as raw float32 [n_patches][1536]");
  cmd->add_option("--resized-png", args->resized_png, "write the resized RGB image as PNG");
  cmd->callback([args] { run_preprocess(*args); });
}

}  // namespace gpnpu::model
