// libFuzzer target: the image loader (model::load_image_rgb, PNG/JPEG through
// stb_image) on arbitrary bytes, then the processor's size checks and, for small
// images, the whole preprocessing pipeline at 32x32.
// Property: a bad file is a gpnpu::Error; a decoded image has width*height*3 bytes.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz_util.h"
#include "isa/error.h"
#include "model/image.h"

using namespace gpnpu;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = fuzz::scratch_path("image", ".img");
  fuzz::write_bytes(path, std::string_view(reinterpret_cast<const char*>(data), size));
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
