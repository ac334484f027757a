// Image input for Qwen3-VL: file -> RGB -> resize -> normalise -> patches
// (spec docs/model.md section 2; Qwen2VLImageProcessorFast behaviour).
//
// Contract:
//  - load_image_rgb(path): PNG or JPEG (stb_image, its other decoders compiled out) -> 8-bit RGB, HWC.
//    Grey is replicated to R=G=B; an alpha channel is composited onto white exactly
//    as PIL's Image.alpha_composite does it (HF convert_to_rgb), which for opaque
//    pixels is "alpha dropped". 16-bit PNGs are reduced to 8 bits by stb.
//  - An image whose header declares more than kMaxImagePixels pixels is refused
//    before it is decoded (a few bytes of JPEG can declare 16000x16000 px: seconds
//    of decoding and gigabytes of memory). The limit is PIL's Image.MAX_IMAGE_PIXELS,
//    the decompression-bomb limit the HF processor's loader warns at.
//  - Input limits (checked for every mode, as the processor checks them): each side
//    must be >= factor = patch * merge = 32 px ("height/width must be larger than
//    factor" in the HF processor), and max(h,w)/min(h,w) must be <= 200.
//  - Target size: ResizeMode::fixed (the default, 256x256 = 64 image tokens, as in
//    the seed run; both sides multiples of 32, area within [min_pixels, max_pixels])
//    or ResizeMode::smart (smart_resize of spec 2.1 with min/max_pixels).
//  - Resize: the antialiased bicubic of torch/torchvision (Keys kernel a = -0.5,
//    support widened by the scale when downscaling, weights normalised per output
//    pixel), computed in float32 on the uint8 image, width pass first then height,
//    then clamped to [0,255] and rounded half-to-even to uint8. This is what the
//    processor's Fast path does (torchvision resize on a uint8 tensor, antialias=True);
//    PIL's fixed-point bicubic (the slow processor) can differ by 1 LSB. A same-size
//    resize is the identity.
//  - Normalise: v = (x - 127.5f) / 127.5f in float32 (the Fast processor's fused form
//    of (x/255 - 0.5)/0.5; docs/testing.md model-test item 7). Both give -1 for 0 and 1 for 255.
//  - Patchify: grid (1, gh, gw) with gh = H/16, gw = W/16; one row of 1536 floats per
//    16x16 patch, rows in 2x2 merge-window order n = ((bh*(gw/2)+bw)*2+mh)*2+mw,
//    elements k = ((c*2+t)*16+py)*16+px with the frame duplicated for t = 0, 1.
//    That is exactly HF's pixel_values for one image.
// All failures throw gpnpu::Error naming the file and how to fix it.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace gpnpu::model {

// PIL's Image.MAX_IMAGE_PIXELS (1024 * 1024 * 1024 / 4 / 3): larger images are refused.
constexpr int64_t kMaxImagePixels = 89478485;

// The size a PNG or JPEG header declares, without decoding; false if the bytes are
// not a PNG or JPEG header stb_image can read, or hold a JPEG Huffman table
// load_image_rgb rejects as corrupt.
bool image_header_size(const std::string& bytes, int& width, int& height);

// An 8-bit RGB image, row-major HWC (pixel (y,x) channel c at (y*width+x)*3+c).
struct RgbImage {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> rgb;
};

enum class ResizeMode { fixed, smart };

struct PreprocessOptions {
  ResizeMode mode = ResizeMode::fixed;
  int width = 256;                 // fixed mode: target width in px (multiple of 32)
  int height = 256;                // fixed mode: target height in px (multiple of 32)
  int64_t min_pixels = 65536;      // preprocessor_config shortest_edge (256^2 = 64 tokens)
  int64_t max_pixels = 16777216;   // preprocessor_config longest_edge (4096^2)
  // Vision config (spec 1.2); a tiny test config may use other values.
  int patch_size = 16;
  int temporal_patch_size = 2;
  int merge_size = 2;
  int factor() const { return patch_size * merge_size; }
};

// Result of preprocessing one image.
struct ImageInput {
  int grid_t = 1;                  // always 1 for an image
  int grid_h = 0;                  // patch rows = height / patch_size
  int grid_w = 0;                  // patch cols = width / patch_size
  int patch_dim = 0;               // 3 * temporal * patch^2 = 1536
  std::vector<float> patches;      // [grid_h*grid_w][patch_dim], merge-window order
  RgbImage resized;                // the resized RGB image (for reports, debugging)
  int orig_width = 0;
  int orig_height = 0;
  int merge_size = 2;
  int n_patches() const { return grid_t * grid_h * grid_w; }
  // LM tokens (<|image_pad|> count) = patches / merge^2.
  int n_tokens() const { return n_patches() / (merge_size * merge_size); }
  int merged_h() const { return grid_h / merge_size; }
  int merged_w() const { return grid_w / merge_size; }
};

// Reads PNG/JPEG into RGB (see the contract). Throws gpnpu::Error when the file cannot
// be read or is not a decodable image.
RgbImage load_image_rgb(const std::string& path);

// Checks the processor's input limits (side >= factor, aspect <= 200); `what` names
// the image in the message.
void check_input_size(int height, int width, int factor, const std::string& what);

// smart_resize of spec 2.1 (double arithmetic, Python round-half-even, floor/ceil
// branches, sides clamped to >= factor). Returns {height, width}. Throws on aspect > 200.
std::pair<int, int> smart_resize(int height, int width, int factor, int64_t min_pixels,
                                 int64_t max_pixels);

// The target {height, width} for an input of the given size under the options
// (validates fixed sizes). Throws gpnpu::Error on bad options or input.
std::pair<int, int> target_size(int height, int width, const PreprocessOptions& opt,
                                const std::string& what);

// Antialiased bicubic resize (a = -0.5), uint8 -> uint8 (see the contract).
RgbImage resize_bicubic_aa(const RgbImage& in, int out_width, int out_height);

// (x - 127.5f) / 127.5f.
inline float normalise_pixel(uint8_t x) { return (static_cast<float>(x) - 127.5f) / 127.5f; }

// Patchify an already-resized image (sides multiples of patch*merge).
std::vector<float> patchify(const RgbImage& img, int patch_size, int temporal_patch_size,
                            int merge_size);

// The whole pipeline.
ImageInput preprocess_rgb(const RgbImage& img, const PreprocessOptions& opt,
                          const std::string& what = "image");
ImageInput preprocess_image(const std::string& path, const PreprocessOptions& opt = {});

// Writes an RGB image as PNG (for reports). Throws gpnpu::Error on failure.
void save_png(const std::string& path, const RgbImage& img);
// The image as PNG file bytes (reports embed it).
std::string encode_png(const RgbImage& img);

// ---- Position tables of the vision tower (plain host functions for the compiler) ----

// Spec 3.3: (row, col) in patch units of every patch, in merge-window order.
std::vector<std::array<int32_t, 2>> tower_rotary_ids(int grid_h, int grid_w, int merge_size = 2);

// Spec 3.2: bilinear interpolation of the learned grid_side x grid_side position table
// (48 for the 2B) to grid_h x grid_w, per patch in merge-window order:
// P(n) = sum_j weight[n][j] * E[index[n][j]], j = 0..3 in the order
// (floor,floor), (floor,ceil), (ceil,floor), (ceil,ceil) — HF's summation order.
// Coordinates use torch.linspace(0, side-1, steps) in float32 (bit-exact replica);
// weights are float32 products (1-dr)(1-dq), (1-dr)dq, dr(1-dq), dr*dq.
struct PosInterp {
  std::vector<std::array<int32_t, 4>> index;  // rows of the table (gy*side + gx)
  std::vector<std::array<float, 4>> weight;
};
PosInterp pos_embed_interp(int grid_h, int grid_w, int grid_side, int merge_size = 2);

// torch.linspace(start, end, steps) in float32 (CPU kernel formula).
std::vector<float> torch_linspace_f32(float start, float end, int steps);

}  // namespace gpnpu::model
