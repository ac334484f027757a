// libFuzzer target: the image loader (model::load_image_rgb, PNG/JPEG through
// stb_image) on arbitrary bytes, then the processor's size checks and, for small
// images, the whole preprocessing pipeline at 32x32.
// Property: a bad file is a gpnpu::Error; a decoded image has width*height*3 bytes.
// Inputs whose header declares more than kFuzzPixels (and at most the loader's
// kMaxImagePixels, above which it refuses them unread) are not decoded: a few
// hundred bytes of JPEG can declare 13 Mpx, seconds of decoding under the fuzzing
// instrumentation for the same code paths a small image takes (a libFuzzer timeout,
// not a finding). Their headers still go through image_header_size.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_util.h"
#include "isa/error.h"
#include "model/inputs/image.h"

using namespace gpnpu;

namespace {
constexpr int64_t kFuzzPixels = 1 << 19;  // 724x724
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  int hw = 0, hh = 0;
  if (model::image_header_size(bytes, hw, hh)) {
    const int64_t px = int64_t(hw) * hh;
    if (px > kFuzzPixels && px <= model::kMaxImagePixels) return 0;
  }
  const std::string& path = fuzz::scratch_path("image", ".img");
  fuzz::write_bytes(path, bytes);
  try {
    model::RgbImage img = model::load_image_rgb(path);
    fuzz::check(img.width > 0 && img.height > 0, "decoded image has a positive size");
    fuzz::check(img.rgb.size() == size_t(img.width) * size_t(img.height) * 3, "rgb holds width*height*3 bytes");
    if (int64_t(img.width) * img.height <= 256 * 256) {
      model::PreprocessOptions opt;
      opt.width = opt.height = 32;
      opt.min_pixels = 32 * 32;
      model::ImageInput in = model::preprocess_rgb(img, opt, "fuzz image");
      fuzz::check(in.patches.size() == size_t(in.n_patches()) * size_t(in.patch_dim), "patches size");
    }
  } catch (const Error&) {
  }
  return 0;
}
