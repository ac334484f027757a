// Image input: decode, RGB conversion, smart_resize, antialiased bicubic resize,
// normalisation, patchify, and the vision tower's position tables. See image.h.
#include "model/inputs/image.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>

#include "isa/atomic_file.h"
#include "isa/error.h"
#include "isa/io_rules.h"

#define STB_IMAGE_IMPLEMENTATION
#define STBI_FAILURE_USERMSG
// PNG and JPEG only (the processor's inputs): stb's other decoders are attack
// surface that nothing here needs.
#define STBI_ONLY_PNG
#define STBI_ONLY_JPEG
#include <stb_image.h>

#define STB_IMAGE_WRITE_IMPLEMENTATION
#define STB_IMAGE_WRITE_STATIC  // private copy: another file may also embed stb_image_write
#include <stb_image_write.h>

namespace gpnpu::model {

namespace {

// PIL's Image.alpha_composite(white, rgba) for one channel value (AlphaComposite.c,
// 7 fractional bits, divisions by 255 done as shift-and-add). Destination is opaque
// white, so dst.a = 255 and dst.c = 255.
uint8_t composite_on_white(uint32_t c, uint32_t a) {
  if (a == 0) return 255;
  constexpr uint32_t kBits = 7;
  const uint32_t blend = 255u * (255u - a);
  const uint32_t outa255 = a * 255u + blend;
  const uint32_t coef1 = a * 255u * 255u * (1u << kBits) / outa255;
  const uint32_t coef2 = 255u * (1u << kBits) - coef1;
  uint32_t tmp = c * coef1 + 255u * coef2 + (0x80u << kBits);
  tmp = ((tmp >> 8) + tmp) >> 8;
  return static_cast<uint8_t>(tmp >> kBits);
}

// Keys cubic convolution with a = -0.5, evaluated in float as torch's aa_filter does.
float cubic_aa(float x) {
  const float a = -0.5f;
  x = std::fabs(x);
  if (x < 1.0f) return ((a + 2.0f) * x - (a + 3.0f)) * x * x + 1.0f;
  if (x < 2.0f) return ((a * x - 5.0f * a) * x + 8.0f * a) * x - 4.0f * a;
  return 0.0f;
}

// Per-output-pixel source window and normalised weights along one axis, computed
// with torch's float/double promotions (UpSampleKernel.cpp, _compute_weights_aa):
// scale = in/out (float); support = 2*scale when downscaling, else 2; center =
// scale*(i+0.5) rounded to float; window [xmin, xmin+xsize); weights
// filter((j + xmin - center + 0.5) * invscale) normalised by their float sum.
struct AxisWeights {
  std::vector<int> xmin, xsize;
  std::vector<float> w;  // [out][stride]
  int stride = 0;
};

AxisWeights aa_weights(int in_size, int out_size) {
  AxisWeights aw;
  const float scale = static_cast<float>(in_size) / static_cast<float>(out_size);
  const float support = (scale >= 1.0f) ? static_cast<float>(4 * 0.5 * static_cast<double>(scale)) : 2.0f;
  const float invscale = (scale >= 1.0f) ? static_cast<float>(1.0 / static_cast<double>(scale)) : 1.0f;
  aw.stride = static_cast<int>(std::ceil(support)) * 2 + 1;
  aw.xmin.resize(out_size);
  aw.xsize.resize(out_size);
  aw.w.assign(static_cast<size_t>(out_size) * aw.stride, 0.0f);
  for (int i = 0; i < out_size; ++i) {
    const float center = static_cast<float>(static_cast<double>(scale) * (i + 0.5));
    const int64_t xmin =
        std::max<int64_t>(static_cast<int64_t>(static_cast<double>(center - support) + 0.5), 0);
    const int64_t xmax =
        std::min<int64_t>(static_cast<int64_t>(static_cast<double>(center + support) + 0.5), in_size);
    const int64_t xsize = std::min<int64_t>(xmax - xmin, aw.stride);
    float* w = &aw.w[static_cast<size_t>(i) * aw.stride];
    float total = 0.0f;
    for (int64_t j = 0; j < xsize; ++j) {
      const float d = static_cast<float>(static_cast<float>(j + xmin) - center);
      const float arg = static_cast<float>((static_cast<double>(d) + 0.5) * static_cast<double>(invscale));
      w[j] = cubic_aa(arg);
      total += w[j];
    }
    if (total != 0.0f)
      for (int64_t j = 0; j < xsize; ++j) w[j] /= total;
    aw.xmin[i] = static_cast<int>(xmin);
    aw.xsize[i] = static_cast<int>(xsize);
  }
  return aw;
}

// An image file is a regular file of at most 256 MiB (isa/io_rules.h): a directory
// or /dev/zero is refused before anything is read.
std::string read_file_bytes(const std::string& path) { return io::read_input(path, "image", 256 * io::kMiB); }

// stb_image 2.27 (Debian 12's libstb-dev) trusts the 16 code counts of a JPEG
// Huffman table: more than 256 codes write past stbi__huffman::size[257] (found by
// tests/fuzz/fuzz_image; upstream rejects it since 2.28, "bad DHT header"). Until
// Debian ships that, every DHT segment is checked here before stb sees the file.
// Likewise a scan that decodes with a Huffman table no DHT defined yet: stb reads
// the uninitialised table past its end (fuzz_image: maxcode[18]).
// The walk follows stb's: 0xFF fill bytes before SOI and before every marker,
// segments by their length, entropy-coded data after SOS scanned for the next
// marker, a table read as 1 + 16 count bytes (zeros past the end of the file)
// then its values, while the segment has bytes left.
void check_jpeg_huffman_tables(const std::string& d, const std::string& path) {
  auto byte = [&](size_t i) -> unsigned { return i < d.size() ? static_cast<uint8_t>(d[i]) : 0u; };
  // SOI, after any number of 0xFF fill bytes (stb accepts those too).
  size_t i = 0;
  while (i < d.size() && byte(i) == 0xFF) ++i;
  if (i == 0 || byte(i) != 0xD8) return;  // not a JPEG
  ++i;
  bool defined[2][4] = {};  // [DC, AC][table id]: set by DHT
  bool progressive = false;
  while (i + 1 < d.size()) {
    if (byte(i) != 0xFF) {  // entropy-coded data: look for the next marker
      ++i;
      continue;
    }
    const unsigned m = byte(i + 1);
    if (m == 0xFF) {  // fill byte
      ++i;
      continue;
    }
    if (m == 0x00 || m == 0x01 || m == 0xD8 || (m >= 0xD0 && m <= 0xD7)) {  // stuffed 0, TEM, SOI, RSTn
      i += 2;
      continue;
    }
    if (m == 0xD9) return;  // EOI
    const size_t len = (byte(i + 2) << 8) | byte(i + 3);
    const size_t end = i + 2 + len;
    if (m == 0xC2) progressive = true;
    if (m == 0xC4) {
      for (size_t p = i + 4; p < end;) {
        size_t n = 0;
        for (size_t k = 1; k <= 16; ++k) n += byte(p + k);
        if (n > 256)
          fail("'{}' is not a readable image (corrupt JPEG: a Huffman table declares {} codes, at most 256): give a "
               "PNG or JPEG file",
               path, n);
        const unsigned tc = byte(p) >> 4, th = byte(p) & 15;
        if (tc <= 1 && th <= 3) defined[tc][th] = true;
        p += 17 + n;
      }
    }
    if (m == 0xDA) {  // SOS: every table the scan decodes with must be defined by now
      const size_t ns = byte(i + 4);
      const unsigned ss = byte(i + 5 + 2 * ns), ah = byte(i + 7 + 2 * ns) >> 4;
      for (size_t c = 0; c < ns; ++c) {
        const unsigned td = byte(i + 6 + 2 * c) >> 4, ta = byte(i + 6 + 2 * c) & 15;
        const bool dc = progressive ? ss == 0 && ah == 0 : true, ac = progressive ? ss > 0 : true;
        if ((dc && td <= 3 && !defined[0][td]) || (ac && ta <= 3 && !defined[1][ta]))
          fail("'{}' is not a readable image (corrupt JPEG: a scan uses {} Huffman table {} before it is defined): "
               "give a PNG or JPEG file",
               path, dc && td <= 3 && !defined[0][td] ? "DC" : "AC", dc && td <= 3 && !defined[0][td] ? td : ta);
      }
    }
    i = end;
  }
}

}  // namespace

// Two PNG chunk checks before stb_image 2.27 reads the file (both found by
// fuzz_image), in one walk over the chunks up to IEND:
//  - stb copies the IDAT chunks into a buffer it allocates at the first non-empty
//    one: a zero-length IDAT before that is memcpy(NULL, src, 0) (UBSan: null
//    pointer passed as argument 1). Zero-length IDAT chunks add no image data, so
//    they are dropped.
//  - stb grows that buffer to a chunk's declared length before it reads the chunk:
//    205 bytes of PNG declaring a 2 GiB IDAT allocated 2 GiB. A chunk that runs
//    past the end of the file is corrupt (stb would fail on it after allocating):
//    it is an error here.
// A chunk header cut short is left for stb to reject.
static std::string checked_png(std::string d, const std::string& path) {
  static const char kSig[] = "\x89PNG\r\n\x1a\n";
  if (d.size() < 8 || d.compare(0, 8, kSig, 8) != 0) return d;
  auto u32 = [&](size_t i) {
    return uint32_t(uint8_t(d[i])) << 24 | uint32_t(uint8_t(d[i + 1])) << 16 | uint32_t(uint8_t(d[i + 2])) << 8 |
           uint32_t(uint8_t(d[i + 3]));
  };
  size_t i = 8;
  while (i + 12 <= d.size()) {
    const uint64_t len = u32(i);
    const std::string type = d.substr(i + 4, 4);
    if (len == 0 && type == "IDAT") {
      d.erase(i, 12);  // length, type, CRC
      continue;
    }
    if (i + 12 + len > d.size()) {
      std::string printable;
      for (char c : type) printable += std::isprint(static_cast<unsigned char>(c)) ? c : '?';
      fail("'{}' is not a readable image (corrupt PNG: chunk '{}' at byte {} declares {} bytes, the file has {} "
           "left): give a PNG or JPEG file",
           path, printable, i, len, d.size() - i - 12);
    }
    if (type == "IEND") break;
    i += 12 + len;
  }
  return d;
}

bool image_header_size(const std::string& bytes, int& width, int& height) {
  // stb parses the JPEG tables to reach the frame header: the same checks as
  // load_image_rgb first (stb_image 2.27 overruns on the tables they reject).
  try {
    check_jpeg_huffman_tables(bytes, "");
  } catch (const Error&) {
    return false;
  }
  int comp = 0;
  return stbi_info_from_memory(reinterpret_cast<const stbi_uc*>(bytes.data()), static_cast<int>(bytes.size()), &width,
                               &height, &comp) != 0;
}

RgbImage load_image_rgb(const std::string& path) {
  const std::string data = checked_png(read_file_bytes(path), path);
  if (data.empty()) fail("image '{}' is empty (0 bytes): give a PNG or JPEG file", path);
  check_jpeg_huffman_tables(data, path);
  int hw = 0, hh = 0;
  if (image_header_size(data, hw, hh) && int64_t(hw) * hh > kMaxImagePixels)
    fail("image '{}' declares {}x{} px (WxH) = {:.1f} Mpx, more than the {:.1f} Mpx this tool decodes (PIL's "
         "decompression-bomb limit); downscale it first",
         path, hw, hh, double(hw) * hh / 1e6, double(kMaxImagePixels) / 1e6);
  int w = 0, h = 0, n = 0;
  stbi_uc* px = stbi_load_from_memory(reinterpret_cast<const stbi_uc*>(data.data()),
                                      static_cast<int>(data.size()), &w, &h, &n, 0);
  if (!px)
    fail("'{}' is not a readable image ({}): give a PNG or JPEG file", path, stbi_failure_reason());
  RgbImage img;
  img.width = w;
  img.height = h;
  img.rgb.resize(static_cast<size_t>(w) * h * 3);
  const size_t npx = static_cast<size_t>(w) * h;
  for (size_t i = 0; i < npx; ++i) {
    const stbi_uc* s = px + i * n;
    uint8_t* d = &img.rgb[i * 3];
    switch (n) {
      case 1: d[0] = d[1] = d[2] = s[0]; break;
      case 2: d[0] = d[1] = d[2] = composite_on_white(s[0], s[1]); break;
      case 3: d[0] = s[0]; d[1] = s[1]; d[2] = s[2]; break;
      default:
        for (int c = 0; c < 3; ++c) d[c] = composite_on_white(s[c], s[3]);
    }
  }
  stbi_image_free(px);
  return img;
}

void check_input_size(int height, int width, int factor, const std::string& what) {
  if (height < factor || width < factor)
    fail("{} is too small: {}x{} px (WxH); the processor needs both sides >= {} px "
         "(patch 16 x merge 2); use a larger image",
         what, width, height, factor);
  const double ratio = static_cast<double>(std::max(height, width)) / std::min(height, width);
  if (ratio > 200.0)
    fail("{} is too elongated: {}x{} px (WxH), aspect ratio {:.1f} > 200, the processor's "
         "limit; crop it first",
         what, width, height, ratio);
}

std::pair<int, int> smart_resize(int height, int width, int factor, int64_t min_pixels,
                                 int64_t max_pixels) {
  if (height <= 0 || width <= 0) fail("smart_resize: bad size {}x{} (WxH)", width, height);
  const double ratio = static_cast<double>(std::max(height, width)) / std::min(height, width);
  if (ratio > 200.0)
    fail("smart_resize: aspect ratio {:.1f} of {}x{} (WxH) is > 200, the processor's limit",
         ratio, width, height);
  const double h = height, w = width, f = factor;
  // nearbyint under the default rounding mode = Python's round-half-to-even.
  int64_t hb = static_cast<int64_t>(std::nearbyint(h / f)) * factor;
  int64_t wb = static_cast<int64_t>(std::nearbyint(w / f)) * factor;
  if (hb * wb > max_pixels) {
    const double beta = std::sqrt(h * w / static_cast<double>(max_pixels));
    hb = std::max<int64_t>(factor, static_cast<int64_t>(std::floor(h / beta / f)) * factor);
    wb = std::max<int64_t>(factor, static_cast<int64_t>(std::floor(w / beta / f)) * factor);
  } else if (hb * wb < min_pixels) {
    const double beta = std::sqrt(static_cast<double>(min_pixels) / (h * w));
    hb = static_cast<int64_t>(std::ceil(h * beta / f)) * factor;
    wb = static_cast<int64_t>(std::ceil(w * beta / f)) * factor;
  }
  return {static_cast<int>(hb), static_cast<int>(wb)};
}

std::pair<int, int> target_size(int height, int width, const PreprocessOptions& opt,
                                const std::string& what) {
  const int f = opt.factor();
  if (opt.patch_size <= 0 || opt.merge_size <= 0 || opt.temporal_patch_size <= 0)
    fail("preprocess: patch_size, merge_size and temporal_patch_size must be positive");
  if (opt.min_pixels <= 0 || opt.max_pixels < opt.min_pixels)
    fail("preprocess: need 0 < min_pixels <= max_pixels, got {} and {}", opt.min_pixels,
         opt.max_pixels);
  check_input_size(height, width, f, what);
  if (opt.mode == ResizeMode::smart) return smart_resize(height, width, f, opt.min_pixels, opt.max_pixels);
  if (opt.width <= 0 || opt.height <= 0 || opt.width % f != 0 || opt.height % f != 0)
    fail("preprocess: target size {}x{} (WxH) must be positive multiples of {} px", opt.width,
         opt.height, f);
  const int64_t area = static_cast<int64_t>(opt.width) * opt.height;
  if (area < opt.min_pixels || area > opt.max_pixels)
    fail("preprocess: target size {}x{} (WxH) = {} px is outside the processor's range "
         "[{}, {}]; e.g. 256x256 is the smallest square",
         opt.width, opt.height, area, opt.min_pixels, opt.max_pixels);
  return {opt.height, opt.width};
}

RgbImage resize_bicubic_aa(const RgbImage& in, int out_width, int out_height) {
  if (in.width == out_width && in.height == out_height) return in;  // torch gives the identity too
  const int iw = in.width, ih = in.height;
  // Width pass (torch resamples the contiguous dimension first) into float.
  const AxisWeights wx = aa_weights(iw, out_width);
  std::vector<float> tmp(static_cast<size_t>(ih) * out_width * 3);
  for (int c = 0; c < 3; ++c)
    for (int y = 0; y < ih; ++y)
      for (int x = 0; x < out_width; ++x) {
        const float* w = &wx.w[static_cast<size_t>(x) * wx.stride];
        const uint8_t* src = &in.rgb[(static_cast<size_t>(y) * iw + wx.xmin[x]) * 3 + c];
        float acc = static_cast<float>(src[0]) * w[0];
        for (int j = 1; j < wx.xsize[x]; ++j) acc += static_cast<float>(src[j * 3]) * w[j];
        tmp[(static_cast<size_t>(y) * out_width + x) * 3 + c] = acc;
      }
  // Height pass, then clamp and round half-to-even as torch.round does.
  const AxisWeights wy = aa_weights(ih, out_height);
  RgbImage out;
  out.width = out_width;
  out.height = out_height;
  out.rgb.resize(static_cast<size_t>(out_width) * out_height * 3);
  const size_t row = static_cast<size_t>(out_width) * 3;
  for (int y = 0; y < out_height; ++y) {
    const float* w = &wy.w[static_cast<size_t>(y) * wy.stride];
    for (size_t xc = 0; xc < row; ++xc) {
      const float* src = &tmp[static_cast<size_t>(wy.xmin[y]) * row + xc];
      float acc = src[0] * w[0];
      for (int j = 1; j < wy.xsize[y]; ++j) acc += src[j * row] * w[j];
      acc = std::min(255.0f, std::max(0.0f, acc));
      out.rgb[static_cast<size_t>(y) * row + xc] = static_cast<uint8_t>(std::nearbyint(acc));
    }
  }
  return out;
}

std::vector<float> patchify(const RgbImage& img, int patch_size, int temporal_patch_size,
                            int merge_size) {
  const int p = patch_size, m = merge_size, t_n = temporal_patch_size;
  if (img.width % (p * m) != 0 || img.height % (p * m) != 0)
    fail("patchify: image {}x{} (WxH) is not a multiple of {} px", img.width, img.height, p * m);
  const int gh = img.height / p, gw = img.width / p;
  const size_t dim = static_cast<size_t>(3) * t_n * p * p;
  std::vector<float> out(static_cast<size_t>(gh) * gw * dim);
  float lut[256];
  for (int x = 0; x < 256; ++x) lut[x] = normalise_pixel(static_cast<uint8_t>(x));
  size_t n = 0;
  for (int bh = 0; bh < gh / m; ++bh)
    for (int bw = 0; bw < gw / m; ++bw)
      for (int mh = 0; mh < m; ++mh)
        for (int mw = 0; mw < m; ++mw, ++n) {
          const int r = bh * m + mh, q = bw * m + mw;
          float* row = &out[n * dim];
          for (int c = 0; c < 3; ++c)
            for (int t = 0; t < t_n; ++t)
              for (int py = 0; py < p; ++py)
                for (int px = 0; px < p; ++px) {
                  const size_t k = ((static_cast<size_t>(c) * t_n + t) * p + py) * p + px;
                  const size_t src = (static_cast<size_t>(r * p + py) * img.width + (q * p + px)) * 3 + c;
                  row[k] = lut[img.rgb[src]];
                }
        }
  return out;
}

ImageInput preprocess_rgb(const RgbImage& img, const PreprocessOptions& opt, const std::string& what) {
  const auto [th, tw] = target_size(img.height, img.width, opt, what);
  ImageInput r;
  r.orig_width = img.width;
  r.orig_height = img.height;
  r.merge_size = opt.merge_size;
  r.resized = resize_bicubic_aa(img, tw, th);
  r.grid_t = 1;
  r.grid_h = th / opt.patch_size;
  r.grid_w = tw / opt.patch_size;
  r.patch_dim = 3 * opt.temporal_patch_size * opt.patch_size * opt.patch_size;
  r.patches = patchify(r.resized, opt.patch_size, opt.temporal_patch_size, opt.merge_size);
  return r;
}

ImageInput preprocess_image(const std::string& path, const PreprocessOptions& opt) {
  return preprocess_rgb(load_image_rgb(path), opt, fmt::format("image '{}'", path));
}

std::string encode_png(const RgbImage& img) {
  std::string png;
  auto append = [](void* ctx, void* data, int size) {
    static_cast<std::string*>(ctx)->append(static_cast<const char*>(data), static_cast<size_t>(size));
  };
  if (!stbi_write_png_to_func(append, &png, img.width, img.height, 3, img.rgb.data(), img.width * 3))
    fail("cannot encode a {}x{} px image as PNG", img.width, img.height);
  return png;
}

void save_png(const std::string& path, const RgbImage& img) {
  // Encoded in memory (stbi_write_png ignores a failed fwrite), then written under
  // a temporary name and renamed: never half a PNG, and a full disk is an error.
  write_file_atomic(path, encode_png(img));
}

std::vector<std::array<int32_t, 2>> tower_rotary_ids(int grid_h, int grid_w, int merge_size) {
  std::vector<std::array<int32_t, 2>> ids;
  ids.reserve(static_cast<size_t>(grid_h) * grid_w);
  for (int bh = 0; bh < grid_h / merge_size; ++bh)
    for (int bw = 0; bw < grid_w / merge_size; ++bw)
      for (int mh = 0; mh < merge_size; ++mh)
        for (int mw = 0; mw < merge_size; ++mw)
          ids.push_back({bh * merge_size + mh, bw * merge_size + mw});
  return ids;
}

std::vector<float> torch_linspace_f32(float start, float end, int steps) {
  std::vector<float> v(std::max(steps, 0));
  if (steps == 1) v[0] = start;
  if (steps <= 1) return v;
  const float step = (end - start) / static_cast<float>(steps - 1);
  const int halfway = steps / 2;
  for (int i = 0; i < steps; ++i)
    v[i] = (i < halfway) ? start + step * static_cast<float>(i)
                         : end - step * static_cast<float>(steps - i - 1);
  return v;
}

PosInterp pos_embed_interp(int grid_h, int grid_w, int grid_side, int merge_size) {
  const float last = static_cast<float>(grid_side - 1);
  const std::vector<float> hr = torch_linspace_f32(0.0f, last, grid_h);
  const std::vector<float> hq = torch_linspace_f32(0.0f, last, grid_w);
  PosInterp pi;
  for (const auto& rq : tower_rotary_ids(grid_h, grid_w, merge_size)) {
    const float yr = hr[rq[0]], xq = hq[rq[1]];
    const int fr = static_cast<int>(yr), fq = static_cast<int>(xq);  // trunc, as .int()
    const int cr = std::min(fr + 1, grid_side - 1), cq = std::min(fq + 1, grid_side - 1);
    const float dr = yr - static_cast<float>(fr), dq = xq - static_cast<float>(fq);
    pi.index.push_back({fr * grid_side + fq, fr * grid_side + cq, cr * grid_side + fq, cr * grid_side + cq});
    pi.weight.push_back({(1.0f - dr) * (1.0f - dq), (1.0f - dr) * dq, dr * (1.0f - dq), dr * dq});
  }
  return pi;
}

}  // namespace gpnpu::model
