// W4A16 quantiser and bundle I/O. See quant.h and docs/quantisation.md.
#include "model/checkpoint/quant.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <thread>

#include <fmt/format.h>

#include "isa/error.h"
#include "isa/fp16.h"
#include "model/checkpoint/config.h"
#include "model/checkpoint/safetensors.h"

namespace gpnpu::model {

float QuantTensor::scale(int64_t r, int64_t blk) const { return f16_to_f32(scales[size_t(r * nblocks() + blk)]); }

float QuantTensor::dequant(int64_t r, int64_t c) const {
  int64_t b = c / kQuantBlock;
  float v = float(int(code(r, c)) - int(zero(r, b))) * scale(r, b);
  auto it = std::lower_bound(fp16_cols.begin(), fp16_cols.end(), int32_t(c));
  if (it != fp16_cols.end() && *it == c) v += f16_to_f32(fp16_w[size_t(r) * fp16_cols.size() + size_t(it - fp16_cols.begin())]);
  return v;
}

namespace {

struct BlockParams {
  uint16_t s_bits = 0;
  float s = 0;       // fp16 value of the scale
  float inv = 0;     // 1 / s (0 when s == 0)
  int z = 0;
};

// Scale and zero for the range [lo, hi] (lo <= 0 <= hi, hi > lo). The scale is the
// smallest fp16 with 15 * s >= hi - lo, so the 16-level grid spans the range.
BlockParams params_for(float lo, float hi) {
  BlockParams p;
  const double span = double(hi) - double(lo);  // exact in double
  uint16_t sb = f32_to_f16(float(span / 15.0));
  while (15.0 * double(f16_to_f32(sb)) < span) ++sb;  // positive finite: next bits = next larger value
  if ((sb & 0x7c00) == 0x7c00) return p;  // overflow: caller reports
  if (sb == 0) sb = 1;                    // smallest subnormal (span is tiny but nonzero)
  p.s_bits = sb;
  p.s = f16_to_f32(sb);
  p.inv = 1.0f / p.s;
  double z = std::round(-double(lo) / double(p.s));
  p.z = int(std::clamp(z, 0.0, 15.0));
  return p;
}

// q = clamp(trunc(w * inv + (z + 0.5)), 0, 15): round to nearest (ties up) of w/s + z.
// For t < 0 truncation and floor both clamp to 0, so trunc is exact here; the vector and
// scalar forms below perform the same fp32 operations, element by element.
inline float code_f(float w, float inv, float zh) {
  float t = w * inv + zh;
  t = std::min(std::max(t, 0.0f), 15.0f);
  return float(int(t));
}

inline int code_of(float w, const BlockParams& p) { return int(code_f(w, p.inv, float(p.z) + 0.5f)); }

typedef float v8f __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));

// Fast score of a full block for the clipping search: squared error of the dequantised
// block, accumulated in 8 fp32 lanes (lane j takes elements j, j+8, ...), lanes summed
// in order. Deterministic; the final choice is re-checked with block_sse_exact.
float block_score(const float* w, int n, const BlockParams& p) {
  const float zh = float(p.z) + 0.5f, zf = float(p.z);
  float lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int i = 0;
  if (n >= 8) {
    const v8f inv = {p.inv, p.inv, p.inv, p.inv, p.inv, p.inv, p.inv, p.inv};
    const v8f vzh = {zh, zh, zh, zh, zh, zh, zh, zh};
    const v8f vz = {zf, zf, zf, zf, zf, zf, zf, zf};
    const v8f vs = {p.s, p.s, p.s, p.s, p.s, p.s, p.s, p.s};
    const v8f lo = {0, 0, 0, 0, 0, 0, 0, 0}, hi = {15, 15, 15, 15, 15, 15, 15, 15};
    v8f acc = lo;
    for (; i + 8 <= n; i += 8) {
      v8f x;
      std::memcpy(&x, w + i, sizeof x);
      v8f t = x * inv + vzh;
      t = t < lo ? lo : t;
      t = t > hi ? hi : t;
      v8f q = __builtin_convertvector(__builtin_convertvector(t, v8i), v8f);
      v8f d = x - (q - vz) * vs;
      acc += d * d;
    }
    std::memcpy(lanes, &acc, sizeof acc);
  }
  for (; i < n; ++i) {
    float d = w[i] - (code_f(w[i], p.inv, zh) - zf) * p.s;
    lanes[i & 7] += d * d;
  }
  float total = 0;
  for (float l : lanes) total += l;
  return total;
}

// Squared error exactly as quant_error_report computes it (double sum in element order).
double block_sse_exact(const float* w, int n, const BlockParams& p) {
  const float zh = float(p.z) + 0.5f, zf = float(p.z);
  double sse = 0;
  for (int i = 0; i < n; ++i) {
    float e = std::fabs(w[i] - (code_f(w[i], p.inv, zh) - zf) * p.s);
    sse += double(e) * e;
  }
  return sse;
}

void quantise_rows(const float* w, int64_t r0, int64_t r1, QuantTensor& q, bool clip, const std::string& what,
                   std::string& err) {
  const int64_t cols = q.cols, nb = q.nblocks(), stride = q.row_stride();
  for (int64_t r = r0; r < r1; ++r) {
    const float* row = w + r * cols;
    uint8_t* crow = q.codes.data() + r * stride;
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t c0 = b * kQuantBlock;
      const int n = int(std::min<int64_t>(kQuantBlock, cols - c0));
      const float* x = row + c0;
      float lo = 0, hi = 0;  // include 0 so the zero point is representable
      for (int i = 0; i < n; ++i) {
        if (!std::isfinite(x[i])) {
          if (err.empty())
            err = fmt::format("{}: non-finite weight {} at row {}, column {}; the checkpoint is corrupt", what, x[i],
                              r, c0 + i);
          return;
        }
        lo = std::min(lo, x[i]);
        hi = std::max(hi, x[i]);
      }
      BlockParams best;
      if (hi > lo) {
        const BlockParams minmax = params_for(lo, hi);
        if (minmax.s_bits == 0) {
          if (err.empty())
            err = fmt::format("{}: block at row {}, columns {}..{} spans [{}, {}]: the scale overflows fp16", what, r,
                              c0, c0 + n - 1, lo, hi);
          return;
        }
        best = minmax;
        if (clip) {
          float best_score = block_score(x, n, minmax);
          for (size_t k = 1; k < std::size(kClipFactors); ++k) {
            const float f = kClipFactors[k];
            BlockParams p = params_for(lo * f, hi * f);
            if (p.s_bits == 0) continue;
            float e = block_score(x, n, p);
            if (e < best_score) {
              best_score = e;
              best = p;
            }
          }
          // Never worse than min/max in the report's own arithmetic (the fp32 lane sums
          // can differ from it in the last bits).
          if (best.s_bits != minmax.s_bits || best.z != minmax.z)
            if (block_sse_exact(x, n, best) > block_sse_exact(x, n, minmax)) best = minmax;
        }
      }
      q.scales[size_t(r * nb + b)] = best.s_bits;
      q.zeros[size_t(r * nb + b)] = uint8_t(best.z);
      for (int i = 0; i < n; ++i) {
        const int c = int(c0) + i;
        const int code = best.s_bits ? code_of(x[i], best) : 0;
        uint8_t& byte = crow[c / 2];
        if (c & 1) byte = uint8_t((byte & 0x0f) | (code << 4));
        else byte = uint8_t((byte & 0xf0) | code);
      }
    }
  }
}

int resolve_threads(int t) {
  if (t > 0) return t;
  unsigned h = std::thread::hardware_concurrency();
  return h ? int(h) : 1;
}

}  // namespace

QuantTensor quantise(const float* w, int64_t rows, int64_t cols, const QuantOptions& opt, const std::string& what) {
  if (rows <= 0 || cols <= 0) fail("{}: cannot quantise an empty matrix [{}, {}]", what, rows, cols);
  if (opt.fp16_channels > 0) {
    const std::vector<int32_t> keep = outlier_channels(outlier_report(w, rows, cols, nullptr, what), opt.fp16_channels);
    if (!keep.empty()) {
      std::vector<float> rest(w, w + rows * cols);
      std::vector<uint16_t> kept(size_t(rows) * keep.size());
      for (int64_t r = 0; r < rows; ++r)
        for (size_t j = 0; j < keep.size(); ++j) {
          float& x = rest[size_t(r * cols + keep[j])];
          kept[size_t(r) * keep.size() + j] = f32_to_f16(x);
          x = 0;
        }
      QuantOptions plain = opt;
      plain.fp16_channels = 0;
      QuantTensor q = quantise(rest.data(), rows, cols, plain, what);
      q.fp16_cols = keep;
      q.fp16_w = std::move(kept);
      return q;
    }
  }
  QuantTensor q;
  q.rows = rows;
  q.cols = cols;
  q.codes.assign(size_t(rows * q.row_stride()), 0);
  q.scales.assign(size_t(rows * q.nblocks()), 0);
  q.zeros.assign(size_t(rows * q.nblocks()), 0);
  const int nt = int(std::min<int64_t>(resolve_threads(opt.threads), rows));
  std::vector<std::string> errs(static_cast<size_t>(nt));
  if (nt <= 1) {
    quantise_rows(w, 0, rows, q, opt.clip_search, what, errs[0]);
  } else {
    std::vector<std::thread> th;
    for (int t = 0; t < nt; ++t) {
      int64_t r0 = rows * t / nt, r1 = rows * (t + 1) / nt;
      th.emplace_back([&, r0, r1, t] { quantise_rows(w, r0, r1, q, opt.clip_search, what, errs[size_t(t)]); });
    }
    for (auto& x : th) x.join();
  }
  for (const auto& e : errs)
    if (!e.empty()) throw Error(e);
  return q;
}

void dequantise_row(const QuantTensor& q, int64_t r, float* out) {
  const int64_t nb = q.nblocks();
  const uint8_t* crow = q.codes.data() + r * q.row_stride();
  for (int64_t b = 0; b < nb; ++b) {
    const float s = f16_to_f32(q.scales[size_t(r * nb + b)]);
    const int z = q.zeros[size_t(r * nb + b)];
    const int64_t c1 = std::min<int64_t>(q.cols, (b + 1) * kQuantBlock);
    for (int64_t c = b * kQuantBlock; c < c1; ++c) {
      const uint8_t byte = crow[c / 2];
      const int code = (c & 1) ? (byte >> 4) : (byte & 15);
      out[c] = float(code - z) * s;
    }
  }
  const size_t n = q.fp16_cols.size();  // mixed precision: the codes encode 0 in these columns
  for (size_t j = 0; j < n; ++j) out[q.fp16_cols[j]] += f16_to_f32(q.fp16_w[size_t(r) * n + j]);
}

std::vector<float> dequantise(const QuantTensor& q) {
  std::vector<float> out(size_t(q.rows * q.cols));
  for (int64_t r = 0; r < q.rows; ++r) dequantise_row(q, r, out.data() + r * q.cols);
  return out;
}

QuantErrorReport quant_error_report(const float* w, const QuantTensor& q) {
  QuantErrorReport rep;
  rep.rows = q.rows;
  rep.nblocks = q.nblocks();
  const size_t nblk = size_t(q.rows * rep.nblocks);
  rep.max_abs_err.assign(nblk, 0);
  rep.max_abs_err_in.assign(nblk, 0);
  rep.half_step.assign(nblk, 0);
  rep.sse.assign(nblk, 0);
  rep.clipped.assign(nblk, 0);
  std::vector<float> row(size_t(q.cols));
  for (int64_t r = 0; r < q.rows; ++r) {
    dequantise_row(q, r, row.data());
    for (int64_t b = 0; b < rep.nblocks; ++b) {
      const size_t k = size_t(r * rep.nblocks + b);
      const float s = q.scale(r, b);
      const int z = q.zero(r, b);
      // Weights within half a step of the 16-level grid round to a code within s/2.
      const double glo = (double(-z) - 0.5) * s, ghi = (double(15 - z) + 0.5) * s;
      rep.half_step[k] = 0.5f * s;
      const int64_t c1 = std::min<int64_t>(q.cols, (b + 1) * kQuantBlock);
      for (int64_t c = b * kQuantBlock; c < c1; ++c) {
        const float x = w[r * q.cols + c];
        const float e = std::fabs(x - row[size_t(c)]);
        rep.sse[k] += double(e) * e;
        rep.max_abs_err[k] = std::max(rep.max_abs_err[k], e);
        if (x >= glo && x <= ghi) rep.max_abs_err_in[k] = std::max(rep.max_abs_err_in[k], e);
        else rep.clipped[k]++;
      }
      rep.total_sse += rep.sse[k];
      // A tiny allowance for the fp32 rounding of w * (1/s) at exact ties.
      if (rep.max_abs_err_in[k] > rep.half_step[k] * (1 + 1e-5f)) rep.blocks_over_bound++;
      if (rep.half_step[k] > 0) rep.worst_ratio_in = std::max(rep.worst_ratio_in, rep.max_abs_err_in[k] / rep.half_step[k]);
    }
  }
  return rep;
}

// ---- outliers ---------------------------------------------------------------------------

OutlierReport outlier_report(const float* w, int64_t rows, int64_t cols, const QuantTensor* q, const std::string& name) {
  OutlierReport rep;
  rep.tensor = name;
  rep.rows = rows;
  rep.cols = cols;
  const int64_t nb = (cols + kQuantBlock - 1) / kQuantBlock;
  rep.blocks = rows * nb;
  std::vector<int64_t> per_col(size_t(cols), 0);
  std::vector<float> deq(q ? size_t(cols) : 0), mag;
  std::vector<uint8_t> outlier(static_cast<size_t>(kQuantBlock));
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = w + r * cols;
    if (q) dequantise_row(*q, r, deq.data());
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t c0 = b * kQuantBlock, c1 = std::min(cols, c0 + kQuantBlock);
      double ss = 0;
      float mx = 0;
      int64_t at = c0;
      for (int64_t c = c0; c < c1; ++c) {
        ss += double(row[c]) * row[c];
        if (std::fabs(row[c]) > mx) mx = std::fabs(row[c]), at = c;
      }
      const double rms = std::sqrt(ss / double(c1 - c0));
      const bool is_outlier = rms > 0 && mx > kOutlierRatio * rms;
      if (rms > 0 && mx / rms > rep.worst_ratio) rep.worst_ratio = float(mx / rms), rep.worst_row = r, rep.worst_col = at;
      std::fill(outlier.begin(), outlier.end(), 0);
      if (is_outlier) {
        rep.outlier_blocks++;
        mag.assign(row + c0, row + c1);
        for (float& m : mag) m = std::fabs(m);
        std::nth_element(mag.begin(), mag.begin() + mag.size() / 2, mag.end());
        const float sigma = mag[mag.size() / 2] / 0.6745f;
        for (int64_t c = c0; c < c1; ++c)
          if (std::fabs(row[c]) > kOutlierRatio * sigma) outlier[size_t(c - c0)] = 1, per_col[size_t(c)]++;
      }
      if (!q) continue;
      for (int64_t c = c0; c < c1; ++c) {
        if (row[c] == 0) continue;
        const bool zero = deq[size_t(c)] == 0;
        rep.nonzero++;
        rep.zeroed += zero;
        if (is_outlier && !outlier[size_t(c - c0)]) rep.outlier_nonzero++, rep.outlier_zeroed += zero;
      }
    }
  }
  for (int64_t c = 0; c < cols; ++c)
    if (per_col[size_t(c)]) rep.channels.push_back({int32_t(c), per_col[size_t(c)]});
  std::stable_sort(rep.channels.begin(), rep.channels.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  return rep;
}

std::vector<int32_t> outlier_channels(const OutlierReport& rep, int n) {
  std::vector<int32_t> out;
  for (size_t k = 0; k < rep.channels.size() && int(k) < n; ++k) out.push_back(rep.channels[k].first);
  std::sort(out.begin(), out.end());
  return out;
}

// ---- bundle ---------------------------------------------------------------------------

namespace {

// The bundle's tensors (layout in quant.h); `kept`: the fp16 input channels each
// tensor keeps beside its int4 codes (mixed precision, none by default).
std::vector<TensorDecl> bundle_decls(const std::vector<TensorSpec>& specs, std::map<std::string, int64_t> kept = {}) {
  std::vector<TensorDecl> decls;
  for (const auto& s : specs) {
    if (s.quantised()) {
      const int64_t rows = s.rows(), cols = s.cols(), nb = (cols + kQuantBlock - 1) / kQuantBlock;
      decls.push_back({s.name + kQCodesSuffix, DType::U8, {rows, (cols + 1) / 2}});
      decls.push_back({s.name + kScalesSuffix, DType::F16, {rows, nb}});
      decls.push_back({s.name + kZerosSuffix, DType::U8, {rows, nb}});
      if (kept[s.name] > 0) {
        decls.push_back({s.name + kFp16ColsSuffix, DType::I32, {kept[s.name]}});
        decls.push_back({s.name + kFp16WSuffix, DType::F16, {rows, kept[s.name]}});
      }
    } else {
      decls.push_back({s.name, DType::F32, s.shape});
    }
  }
  return decls;
}

}  // namespace

uint64_t quant_bundle_data_bytes(const ModelConfig& cfg) {
  uint64_t n = 0;
  for (const TensorDecl& d : bundle_decls(expected_tensors(cfg))) n += d.nbytes();
  return n;
}

BundleStats write_quant_bundle(const Checkpoint& ck, const ModelConfig& cfg, const std::string& out_path,
                               const QuantOptions& opt) {
  auto t0 = std::chrono::steady_clock::now();
  ck.check(cfg);
  const auto specs = expected_tensors(cfg);
  // Mixed precision: the kept channels decide the tensors to declare (a first pass).
  std::map<std::string, int64_t> kept;
  if (opt.fp16_channels > 0)
    for (const auto& s : specs)
      if (s.quantised()) {
        std::vector<float> w = ck.get(s.name).to_f32();
        kept[s.name] = int64_t(outlier_channels(outlier_report(w.data(), s.rows(), s.cols(), nullptr, s.name),
                                                opt.fp16_channels).size());
      }
  const std::vector<TensorDecl> decls = bundle_decls(specs, kept);
  std::map<std::string, std::string> meta = {{"format", "gpnpu-w4a16"},
                                             {"version", "1"},
                                             {"block", std::to_string(kQuantBlock)},
                                             {"clip_search", opt.clip_search ? "true" : "false"},
                                             {"config", cfg.to_json().dump()},
                                             {"source", ck.path()}};
  if (opt.fp16_channels > 0) meta["fp16_channels"] = std::to_string(opt.fp16_channels);
  BundleStats st;
  SafetensorsWriter wr(out_path, decls, meta);
  uint64_t total_bytes = 0, done_bytes = 0;
  for (const auto& s : specs) total_bytes += ck.get(s.name).nbytes;
  for (const auto& s : specs) {
    const TensorView& tv = ck.get(s.name);
    done_bytes += tv.nbytes;
    std::vector<float> w = tv.to_f32();
    if (s.quantised()) {
      QuantTensor q = quantise(w.data(), s.rows(), s.cols(), opt, s.name);
      QuantErrorReport rep = quant_error_report(w.data(), q);
      if (rep.blocks_over_bound)
        fail("{}: internal error: {} blocks of '{}' exceed the half-step error bound", out_path, rep.blocks_over_bound,
             s.name);
      st.blocks_over_bound += rep.blocks_over_bound;
      OutlierReport out = outlier_report(w.data(), s.rows(), s.cols(), &q, s.name);
      st.nonzero += out.nonzero;
      st.zeroed += out.zeroed;
      if (out.outlier_blocks) st.outliers.push_back(std::move(out));
      wr.write(s.name + kQCodesSuffix, q.codes.data(), q.codes.size());
      wr.write(s.name + kScalesSuffix, q.scales.data(), q.scales.size() * 2);
      wr.write(s.name + kZerosSuffix, q.zeros.data(), q.zeros.size());
      if (int64_t(q.fp16_cols.size()) != kept[s.name])
        fail("{}: internal error: '{}' keeps {} fp16 channels, {} declared", out_path, s.name, q.fp16_cols.size(), kept[s.name]);
      if (!q.fp16_cols.empty()) {
        wr.write(s.name + kFp16ColsSuffix, q.fp16_cols.data(), q.fp16_cols.size() * 4);
        wr.write(s.name + kFp16WSuffix, q.fp16_w.data(), q.fp16_w.size() * 2);
        st.fp16_channels += int64_t(q.fp16_cols.size());
      }
      st.quantised_tensors++;
      st.weights += s.numel();
      st.blocks += int64_t(q.scales.size());
    } else {
      tv.check_finite();
      wr.write_f32(s.name, w.data(), w.size());
      st.float_tensors++;
    }
    if (opt.progress) opt.progress(done_bytes, total_bytes);
  }
  wr.finish();
  st.bytes = wr.header_bytes().size();  // the file's size: header, then every tensor's bytes
  for (const TensorDecl& d : decls) st.bytes += d.nbytes();
  st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return st;
}

struct QuantBundle::Impl {
  std::unique_ptr<SafetensorsFile> file;
  ModelConfig cfg;
  std::map<std::string, TensorSpec> specs;
  std::vector<std::string> fp16_tensors;
};

QuantBundle::QuantBundle(const std::string& path) : impl_(std::make_unique<Impl>()) {
  impl_->file = std::make_unique<SafetensorsFile>(path);
  const auto& md = impl_->file->metadata();
  auto it = md.find("format");
  if (it == md.end() || it->second != "gpnpu-w4a16")
    fail("{}: not a gpnpu W4A16 bundle (metadata 'format' is not 'gpnpu-w4a16'); make one with `gpnpu quantize`", path);
  auto bl = md.find("block");
  if (bl == md.end() || bl->second != std::to_string(kQuantBlock))
    fail("{}: bundle block size '{}' is not {}; re-quantise with this version", path,
         bl == md.end() ? std::string("?") : bl->second, kQuantBlock);
  auto c = md.find("config");
  if (c == md.end()) fail("{}: bundle metadata has no 'config'; re-quantise with this version", path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(c->second);
  } catch (const nlohmann::json::parse_error& e) {
    fail("{}: bundle metadata 'config' is not valid JSON ({})", path, e.what());
  } catch (const nlohmann::json::exception& e) {  // e.g. a number too large (out_of_range)
    fail("{}: bundle metadata 'config' is not valid JSON ({})", path, e.what());
  }
  impl_->cfg = ModelConfig::from_json(j, path + " (metadata config)");
  for (const auto& s : expected_tensors(impl_->cfg)) {
    auto check = [&](const std::string& name, DType dt, const std::vector<int64_t>& shape) {
      if (!impl_->file->has(name))
        fail("{}: missing tensor '{}' in the W4A16 bundle; re-run `gpnpu quantize`", path, name);
      const TensorView& t = impl_->file->get(name);
      if (t.dtype != dt)
        fail("{}: wrong dtype for tensor '{}': expected {}, got {}", path, name, dtype_name(dt), dtype_name(t.dtype));
      if (t.shape != shape)
        fail("{}: wrong shape for tensor '{}': expected {}, got {}", path, name, shape_str(shape), shape_str(t.shape));
      t.check_finite();  // fp16 scales and f32 tensors: NaN/Inf refused here, not seen as a failed gate later
    };
    if (s.quantised()) {
      const int64_t rows = s.rows(), cols = s.cols(), nb = (cols + kQuantBlock - 1) / kQuantBlock;
      check(s.name + kQCodesSuffix, DType::U8, {rows, (cols + 1) / 2});
      check(s.name + kScalesSuffix, DType::F16, {rows, nb});
      check(s.name + kZerosSuffix, DType::U8, {rows, nb});
      if (impl_->file->has(s.name + kFp16ColsSuffix)) {  // mixed precision
        const int64_t n = impl_->file->get(s.name + kFp16ColsSuffix).shape.at(0);
        check(s.name + kFp16ColsSuffix, DType::I32, {n});
        check(s.name + kFp16WSuffix, DType::F16, {rows, n});
        impl_->fp16_tensors.push_back(s.name);
      }
    } else {
      check(s.name, DType::F32, s.shape);
    }
    impl_->specs.emplace(s.name, s);
  }
}

QuantBundle::~QuantBundle() = default;
QuantBundle::QuantBundle(QuantBundle&&) noexcept = default;
QuantBundle& QuantBundle::operator=(QuantBundle&&) noexcept = default;

const ModelConfig& QuantBundle::config() const { return impl_->cfg; }
const std::string& QuantBundle::path() const { return impl_->file->path(); }
const std::vector<std::string>& QuantBundle::fp16_tensors() const { return impl_->fp16_tensors; }

bool QuantBundle::is_quantised(const std::string& name) const {
  auto it = impl_->specs.find(name);
  return it != impl_->specs.end() && it->second.quantised();
}

QuantTensor QuantBundle::get_quant(const std::string& name) const {
  const uint8_t* codes = nullptr;
  QuantTensor q = get_quant_mapped(name, codes);
  q.codes.assign(codes, codes + q.rows * q.row_stride());
  return q;
}

QuantTensor QuantBundle::get_quant_mapped(const std::string& name, const uint8_t*& codes) const {
  auto it = impl_->specs.find(name);
  if (it == impl_->specs.end()) fail("{}: missing tensor '{}' (not a tensor of this model)", path(), name);
  if (!it->second.quantised())
    fail("{}: tensor '{}' is stored as F32, not quantised; use get_f32()", path(), name);
  const TensorSpec& s = it->second;
  QuantTensor q;
  q.rows = s.rows();
  q.cols = s.cols();
  const TensorView& c = impl_->file->get(name + kQCodesSuffix);
  const TensorView& sc = impl_->file->get(name + kScalesSuffix);
  const TensorView& z = impl_->file->get(name + kZerosSuffix);
  codes = c.data;  // its shape was checked when the bundle was opened
  q.scales.resize(sc.nbytes / 2);
  std::memcpy(q.scales.data(), sc.data, sc.nbytes);
  q.zeros.assign(z.data, z.data + z.nbytes);
  for (size_t i = 0; i < q.zeros.size(); ++i)
    if (q.zeros[i] > 15) fail("{}: tensor '{}': zero point {} > 15 at block {}; the bundle is corrupt", path(), name + kZerosSuffix, q.zeros[i], i);
  if (impl_->file->has(name + kFp16ColsSuffix)) {
    const TensorView& fc = impl_->file->get(name + kFp16ColsSuffix);
    const TensorView& fw = impl_->file->get(name + kFp16WSuffix);
    q.fp16_cols.resize(fc.nbytes / 4);
    std::memcpy(q.fp16_cols.data(), fc.data, fc.nbytes);
    q.fp16_w.resize(fw.nbytes / 2);
    std::memcpy(q.fp16_w.data(), fw.data, fw.nbytes);
    for (size_t j = 0; j < q.fp16_cols.size(); ++j)
      if (q.fp16_cols[j] < 0 || q.fp16_cols[j] >= q.cols || (j && q.fp16_cols[j] <= q.fp16_cols[j - 1]))
        fail("{}: tensor '{}': fp16 channel {} is out of order or outside 0..{}; the bundle is corrupt", path(),
             name + kFp16ColsSuffix, q.fp16_cols[j], q.cols - 1);
  }
  return q;
}

std::vector<float> QuantBundle::get_dequant(const std::string& name) const { return dequantise(get_quant(name)); }

std::vector<float> QuantBundle::get_f32(const std::string& name) const {
  auto it = impl_->specs.find(name);
  if (it == impl_->specs.end()) fail("{}: missing tensor '{}' (not a tensor of this model)", path(), name);
  if (it->second.quantised())
    fail("{}: tensor '{}' is quantised; use get_quant() or get_dequant()", path(), name);
  return impl_->file->get(name).to_f32();
}

}  // namespace gpnpu::model
