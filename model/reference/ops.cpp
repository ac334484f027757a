// The chain's ops (see ops.h for the contract).
//
// Dot products: 16 fp32 partial sums, lane l accumulates the terms k = l (mod 16) in
// increasing k, then a fixed halving tree (l + 8, l + 4, l + 2, l + 1). Every kernel below
// (the 1x1 dot and the register-blocked tiles of linear()) evaluates exactly this order,
// so an output never depends on the tile it was computed in or on the thread count. The
// vector type is GCC's generic vector extension: lane-wise IEEE mul and add, identical
// on SSE2, AVX2 and AVX-512 (the tile driver is cloned per ISA at load time).
#include "model/reference/ops.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "isa/error.h"
#include "isa/fp16.h"

#pragma GCC diagnostic ignored "-Wpsabi"

namespace gpnpu::model::ops {

namespace {

constexpr int kLanes = 16;
typedef float v16 __attribute__((vector_size(64)));

inline __attribute__((always_inline)) v16 load16(const float* p) {
  v16 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// One output from its 16 lane sums t over k < k0: the tail x[k0..n) * w[k0..n) into lanes
// 0.. in order, then the fixed halving tree.
// The fixed halving tree over 16 lane sums.
inline __attribute__((always_inline)) float tree16(float* t) {
  for (int h = kLanes / 2; h >= 1; h /= 2)
    for (int l = 0; l < h; ++l) t[l] += t[l + h];
  return t[0];
}
inline __attribute__((always_inline)) float finish16(float* t, const float* x, const float* w, int64_t k0, int64_t n) {
  for (int64_t kk = k0; kk < n; ++kk) t[kk - k0] += x[kk] * w[kk];
  return tree16(t);
}

// acc[i][j] over x rows i < RM and weight rows j < RO; the tail (n % 16 terms) goes into
// lanes 0.. in order, exactly as if the vectors were padded with nothing.
template <int RM, int RO>
inline __attribute__((always_inline)) void tile(const float* const* xs, const float* const* ws,
                                                int64_t n, float* out, int64_t out_stride) {
  v16 acc[RM][RO];
  for (int i = 0; i < RM; ++i)
    for (int j = 0; j < RO; ++j) acc[i][j] = v16{};
  int64_t k = 0;
  for (; k + kLanes <= n; k += kLanes) {
    v16 w[RO];
    for (int j = 0; j < RO; ++j) w[j] = load16(ws[j] + k);
    for (int i = 0; i < RM; ++i) {
      v16 xv = load16(xs[i] + k);
      for (int j = 0; j < RO; ++j) acc[i][j] += xv * w[j];
    }
  }
  for (int i = 0; i < RM; ++i)
    for (int j = 0; j < RO; ++j) {
      float t[kLanes];
      std::memcpy(t, &acc[i][j], sizeof t);
      out[i * out_stride + j] = finish16(t, xs[i], ws[j], k, n);
    }
}

// Runs fn(i) for i in [0, n) split into `threads` contiguous chunks, one std::thread each.
template <typename F>
void parallel_ranges(int64_t n, int threads, F&& fn) {
  threads = std::max(1, std::min<int>(threads, int(std::min<int64_t>(n, 64))));
  if (threads <= 1) {
    fn(int64_t(0), n);
    return;
  }
  std::vector<std::thread> pool;
  std::exception_ptr err;
  std::mutex err_mu;
  for (int t = 0; t < threads; ++t) {
    int64_t a = n * t / threads, b = n * (t + 1) / threads;
    pool.emplace_back([&, a, b] {
      try {
        fn(a, b);
      } catch (...) {
        std::lock_guard<std::mutex> lk(err_mu);
        if (!err) err = std::current_exception();
      }
    });
  }
  for (auto& th : pool) th.join();
  if (err) std::rethrow_exception(err);
}

// Register tile of 4 activation rows x 2 weight rows; the edges use smaller tiles that
// evaluate the same per-element order.
constexpr int kTileM = 4, kTileO = 2;
// Weight rows loaded (dequantised) at a time: 32 for many activation rows; for a few
// rows (decode) as many as fit in ~32 KB, so the block is reused from L1.
int64_t weight_block(int64_t M, int64_t K) {
  if (M >= 8) return 32;
  return std::clamp<int64_t>(8192 / std::max<int64_t>(K, 1), 2, 32) & ~int64_t(1);
}

// y[m][o0 + j] for j < nb from the weight rows wblk (nb rows of K), all M activation rows.
__attribute__((target_clones("avx512f", "avx2", "default"))) void linear_block(
    const float* x, int64_t M, int64_t K, const float* wblk, int64_t nb, float* y,
    int64_t ystride) {
  for (int64_t m = 0; m < M; m += kTileM) {
    int rm = int(std::min<int64_t>(kTileM, M - m));
    const float* xs[kTileM];
    for (int i = 0; i < rm; ++i) xs[i] = x + (m + i) * K;
    for (int64_t j = 0; j < nb; j += kTileO) {
      int ro = int(std::min<int64_t>(kTileO, nb - j));
      const float* ws[kTileO];
      for (int t = 0; t < ro; ++t) ws[t] = wblk + (j + t) * K;
      float* out = y + m * ystride + j;
      // Every shape is inlined here, so each ISA clone vectorises all of them.
      switch ((rm - 1) * kTileO + (ro - 1)) {
        case 0: tile<1, 1>(xs, ws, K, out, ystride); break;
        case 1: tile<1, 2>(xs, ws, K, out, ystride); break;
        case 2: tile<2, 1>(xs, ws, K, out, ystride); break;
        case 3: tile<2, 2>(xs, ws, K, out, ystride); break;
        case 4: tile<3, 1>(xs, ws, K, out, ystride); break;
        case 5: tile<3, 2>(xs, ws, K, out, ystride); break;
        case 6: tile<4, 1>(xs, ws, K, out, ystride); break;
        default: tile<4, 2>(xs, ws, K, out, ystride); break;
      }
    }
  }
}

#if defined(__x86_64__)
// The same order with AVX2 intrinsics, each 16-lane accumulator as two 8-lane halves
// (separate multiply and add, as the generic vectors). On AVX2 GCC keeps the generic 4 x 2
// tile's accumulators on the stack (BM_ChainLinear: 4.7 GMAC/s); a 2 x 2 tile of halves
// stays in the 16 registers.
template <int RM, int RO>
__attribute__((target("avx2"), always_inline)) inline void tile_avx2(const float* x, const float* w, int64_t n,
                                                                   float* out, int64_t out_stride) {
  __m256 lo[RM][RO], hi[RM][RO];
  for (int i = 0; i < RM; ++i)
    for (int j = 0; j < RO; ++j) lo[i][j] = hi[i][j] = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + kLanes <= n; k += kLanes) {
    __m256 wl[RO], wh[RO];
    for (int j = 0; j < RO; ++j) wl[j] = _mm256_loadu_ps(w + j * n + k), wh[j] = _mm256_loadu_ps(w + j * n + k + 8);
    for (int i = 0; i < RM; ++i) {
      const __m256 xl = _mm256_loadu_ps(x + i * n + k), xh = _mm256_loadu_ps(x + i * n + k + 8);
      for (int j = 0; j < RO; ++j) {
        lo[i][j] = _mm256_add_ps(lo[i][j], _mm256_mul_ps(xl, wl[j]));
        hi[i][j] = _mm256_add_ps(hi[i][j], _mm256_mul_ps(xh, wh[j]));
      }
    }
  }
  for (int i = 0; i < RM; ++i)
    for (int j = 0; j < RO; ++j) {
      float t[kLanes];
      _mm256_storeu_ps(t, lo[i][j]);
      _mm256_storeu_ps(t + 8, hi[i][j]);
      out[i * out_stride + j] = finish16(t, x + i * n, w + j * n, k, n);
    }
}

__attribute__((target("avx2"))) void linear_block_avx2(const float* x, int64_t M, int64_t K, const float* wblk,
                                                       int64_t nb, float* y, int64_t ystride) {
  for (int64_t m = 0; m < M; m += 2) {
    const float* xm = x + m * K;
    for (int64_t j = 0; j < nb; j += 2) {
      const float* wj = wblk + j * K;
      float* out = y + m * ystride + j;
      if (M - m >= 2 && nb - j >= 2) tile_avx2<2, 2>(xm, wj, K, out, ystride);
      else if (M - m >= 2) tile_avx2<2, 1>(xm, wj, K, out, ystride);
      else if (nb - j >= 2) tile_avx2<1, 2>(xm, wj, K, out, ystride);
      else tile_avx2<1, 1>(xm, wj, K, out, ystride);
    }
  }
}

// AVX2 takes the intrinsics above (AVX-512, checked first, those below).
bool use_avx2_tiles() {
  static const bool ok = __builtin_cpu_supports("avx2");
  return ok;
}

// The same order with AVX-512 intrinsics, one 16-lane sum per register. GCC's avx512f
// clone of the generic tile kept the accumulators in memory (perf annotate of the 2B
// describe: a load and a store around every add); a 4 x 4 tile of registers (16
// accumulators, 4 weight vectors, one activation vector) stays in the 32 registers.
template <int RM, int RO>
__attribute__((target("avx512f"), always_inline)) inline void tile_avx512(const float* x, const float* w, int64_t n,
                                                                       float* out, int64_t out_stride) {
  __m512 acc[RM][RO];
#pragma GCC unroll 4
  for (int i = 0; i < RM; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < RO; ++j) acc[i][j] = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + kLanes <= n; k += kLanes) {
    __m512 wv[RO];
#pragma GCC unroll 4
    for (int j = 0; j < RO; ++j) wv[j] = _mm512_loadu_ps(w + j * n + k);
#pragma GCC unroll 4
    for (int i = 0; i < RM; ++i) {
      const __m512 xv = _mm512_loadu_ps(x + i * n + k);
#pragma GCC unroll 4
      for (int j = 0; j < RO; ++j) acc[i][j] = _mm512_add_ps(acc[i][j], _mm512_mul_ps(xv, wv[j]));
    }
  }
  for (int i = 0; i < RM; ++i)
    for (int j = 0; j < RO; ++j) {
      float t[kLanes];
      _mm512_storeu_ps(t, acc[i][j]);
      out[i * out_stride + j] = finish16(t, x + i * n, w + j * n, k, n);
    }
}

template <int RM>
__attribute__((target("avx512f"), always_inline)) inline void tile_avx512_rows(const float* x, const float* w,
                                                                            int64_t n, int ro, float* out,
                                                                            int64_t out_stride) {
  switch (ro) {
    case 1: tile_avx512<RM, 1>(x, w, n, out, out_stride); break;
    case 2: tile_avx512<RM, 2>(x, w, n, out, out_stride); break;
    case 3: tile_avx512<RM, 3>(x, w, n, out, out_stride); break;
    default: tile_avx512<RM, 4>(x, w, n, out, out_stride); break;
  }
}

__attribute__((target("avx512f"))) void linear_block_avx512(const float* x, int64_t M, int64_t K, const float* wblk,
                                                           int64_t nb, float* y, int64_t ystride) {
  for (int64_t m = 0; m < M; m += 4) {
    const float* xm = x + m * K;
    const int rm = int(std::min<int64_t>(4, M - m));
    for (int64_t j = 0; j < nb; j += 4) {
      const float* wj = wblk + j * K;
      const int ro = int(std::min<int64_t>(4, nb - j));
      float* out = y + m * ystride + j;
      switch (rm) {
        case 1: tile_avx512_rows<1>(xm, wj, K, ro, out, ystride); break;
        case 2: tile_avx512_rows<2>(xm, wj, K, ro, out, ystride); break;
        case 3: tile_avx512_rows<3>(xm, wj, K, ro, out, ystride); break;
        default: tile_avx512_rows<4>(xm, wj, K, ro, out, ystride); break;
      }
    }
  }
}

bool use_avx512_tiles() {
  static const bool ok = __builtin_cpu_supports("avx512f");
  return ok;
}
#endif

// ---- W4A16 codes read directly (few activation rows: decode) ------------------------------
//
// Each weight is dequantised in registers as float(int(q) - z) * s (integer subtract,
// exact conversion, one rounded multiply: the operations of the bundle's loader), then
// multiplied and added into the 16 lane sums in the order of tile() above, and the lanes
// combined by the same halving tree: every output keeps the bits of linear() over the
// loaded rows. Blocks are 16 columns (8 code bytes), inside one quantisation block.

#if defined(__x86_64__)
std::atomic<int> g_w4_isa_limit{2};

int w4_isa() {
  static const int have = __builtin_cpu_supports("avx512f") ? 2 : __builtin_cpu_supports("avx2") ? 1 : 0;
  return std::min(have, g_w4_isa_limit.load(std::memory_order_relaxed));
}

// 16 codes -> 16 bytes in column order (byte i: column 2i in the low nibble, 2i+1 high).
__attribute__((target("avx2"), always_inline)) inline __m128i w4_codes16(const uint8_t* c) {
  const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(c));
  const __m128i m = _mm_set1_epi8(15);
  return _mm_unpacklo_epi8(_mm_and_si128(b, m), _mm_and_si128(_mm_srli_epi16(b, 4), m));
}

// acc[i][j] over x rows i < RM (stride K) and weight rows o + j, j < RO; y[i * ystride + j].
template <int RM, int RO>
__attribute__((target("avx512f"), always_inline)) inline void w4_tile_avx512(const float* x, int64_t K,
                                                                          const W4Codes& w, int64_t o, float* y,
                                                                          int64_t ystride) {
  __m512 acc[RM][RO];
  for (int i = 0; i < RM; ++i)
    for (int j = 0; j < RO; ++j) acc[i][j] = _mm512_setzero_ps();
  const uint8_t* crow[RO];
  for (int j = 0; j < RO; ++j) crow[j] = w.codes + (o + j) * w.row_stride;
  for (int64_t b = 0; b < w.nblocks; ++b) {
    __m512 sv[RO];
    __m512i zv[RO];
    for (int j = 0; j < RO; ++j) {
      const int64_t sb = (o + j) * w.nblocks + b;
      sv[j] = _mm512_set1_ps(f16_to_f32(w.scales[sb]));
      zv[j] = _mm512_set1_epi32(w.zeros[sb]);
    }
    const int64_t k1 = std::min(K, (b + 1) * w.block);
    for (int64_t k = b * w.block; k < k1; k += kLanes) {
      __m512 wv[RO];
      for (int j = 0; j < RO; ++j) {
        const __m512i q = _mm512_cvtepu8_epi32(w4_codes16(crow[j] + k / 2));
        wv[j] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(q, zv[j])), sv[j]);
      }
      for (int i = 0; i < RM; ++i) {
        const __m512 xv = _mm512_loadu_ps(x + i * K + k);
        for (int j = 0; j < RO; ++j) acc[i][j] = _mm512_add_ps(acc[i][j], _mm512_mul_ps(xv, wv[j]));
      }
    }
  }
  for (int i = 0; i < RM; ++i)
    for (int j = 0; j < RO; ++j) {
      float t[kLanes];
      _mm512_storeu_ps(t, acc[i][j]);
      y[i * ystride + j] = tree16(t);
    }
}

// The same with each 16-lane sum as two 8-lane halves.
template <int RM, int RO>
__attribute__((target("avx2"), always_inline)) inline void w4_tile_avx2(const float* x, int64_t K, const W4Codes& w,
                                                                     int64_t o, float* y, int64_t ystride) {
  __m256 lo[RM][RO], hi[RM][RO];
  for (int i = 0; i < RM; ++i)
    for (int j = 0; j < RO; ++j) lo[i][j] = hi[i][j] = _mm256_setzero_ps();
  const uint8_t* crow[RO];
  for (int j = 0; j < RO; ++j) crow[j] = w.codes + (o + j) * w.row_stride;
  for (int64_t b = 0; b < w.nblocks; ++b) {
    __m256 sv[RO];
    __m256i zv[RO];
    for (int j = 0; j < RO; ++j) {
      const int64_t sb = (o + j) * w.nblocks + b;
      sv[j] = _mm256_set1_ps(f16_to_f32(w.scales[sb]));
      zv[j] = _mm256_set1_epi32(w.zeros[sb]);
    }
    const int64_t k1 = std::min(K, (b + 1) * w.block);
    for (int64_t k = b * w.block; k < k1; k += kLanes) {
      __m256 wl[RO], wh[RO];
      for (int j = 0; j < RO; ++j) {
        const __m128i c = w4_codes16(crow[j] + k / 2);
        const __m256i q0 = _mm256_cvtepu8_epi32(c), q1 = _mm256_cvtepu8_epi32(_mm_srli_si128(c, 8));
        wl[j] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(q0, zv[j])), sv[j]);
        wh[j] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(q1, zv[j])), sv[j]);
      }
      for (int i = 0; i < RM; ++i) {
        const __m256 xl = _mm256_loadu_ps(x + i * K + k), xh = _mm256_loadu_ps(x + i * K + k + 8);
        for (int j = 0; j < RO; ++j) {
          lo[i][j] = _mm256_add_ps(lo[i][j], _mm256_mul_ps(xl, wl[j]));
          hi[i][j] = _mm256_add_ps(hi[i][j], _mm256_mul_ps(xh, wh[j]));
        }
      }
    }
  }
  for (int i = 0; i < RM; ++i)
    for (int j = 0; j < RO; ++j) {
      float t[kLanes];
      _mm256_storeu_ps(t, lo[i][j]);
      _mm256_storeu_ps(t + 8, hi[i][j]);
      y[i * ystride + j] = tree16(t);
    }
}

// y[m][o] for all M (< 8) rows and weight rows [o0, o1). One weight row pair per step for
// one activation row (two independent chains of adds); one weight row for up to 4 rows.
#define GPNPU_W4_ROWS(NAME, TILE, ISA)                                                                  \
  __attribute__((target(ISA))) void NAME(const float* x, int64_t M, int64_t K, const W4Codes& w,      \
                                         int64_t o0, int64_t o1, float* y, int64_t N) {               \
    if (M == 1) {                                                                                     \
      int64_t o = o0;                                                                                 \
      for (; o + 2 <= o1; o += 2) {                                                                   \
        /* the codes of the row pair after next: from the page cache, a page at a time */           \
        const char* ahead = reinterpret_cast<const char*>(w.codes + (o + 4) * w.row_stride);           \
        for (int64_t p = 0; p < 2 * w.row_stride; p += 64) _mm_prefetch(ahead + p, _MM_HINT_T0);     \
        TILE<1, 2>(x, K, w, o, y + o, N);                                                             \
      }                                                                                               \
      if (o < o1) TILE<1, 1>(x, K, w, o, y + o, N);                                                   \
      return;                                                                                         \
    }                                                                                                 \
    for (int64_t m = 0; m < M; m += 4) {                                                              \
      const int rm = int(std::min<int64_t>(4, M - m));                                                \
      const float* xm = x + m * K;                                                                    \
      for (int64_t o = o0; o < o1; ++o) {                                                             \
        float* out = y + m * N + o;                                                                   \
        switch (rm) {                                                                                 \
          case 1: TILE<1, 1>(xm, K, w, o, out, N); break;                                             \
          case 2: TILE<2, 1>(xm, K, w, o, out, N); break;                                             \
          case 3: TILE<3, 1>(xm, K, w, o, out, N); break;                                             \
          default: TILE<4, 1>(xm, K, w, o, out, N); break;                                            \
        }                                                                                             \
      }                                                                                               \
    }                                                                                                 \
  }
GPNPU_W4_ROWS(w4_rows_avx512, w4_tile_avx512, "avx512f")
GPNPU_W4_ROWS(w4_rows_avx2, w4_tile_avx2, "avx2")
#undef GPNPU_W4_ROWS
#else
int w4_isa() { return 0; }
#endif

// The direct path's instruction set for M rows of W (0: none, take the loader).
int w4_direct(const Matrix& W, int64_t M) {
  if (W.f32 || !W.w4.codes || M >= 8 || W.cols % kLanes != 0 || W.w4.block <= 0 || W.w4.block % kLanes != 0 ||
      W.w4.nblocks != (W.cols + W.w4.block - 1) / W.w4.block || W.w4.row_stride < (W.cols + 1) / 2)
    return 0;
  return w4_isa();
}

void check_size(const char* op, const char* arg, size_t got, size_t want) {
  if (got != want)
    fail("ops::{}: {} has {} floats, expected {}; check the shapes passed by the caller", op, arg,
         got, want);
}

void check_rows(const char* op, const char* arg, size_t size, int64_t width) {
  if (width <= 0 || size % size_t(width) != 0)
    fail("ops::{}: {} has {} floats, not a multiple of the row width {}", op, arg, size, width);
}

}  // namespace

// ---- Matrix -----------------------------------------------------------------------------

Matrix Matrix::dense(std::string name, int64_t rows, int64_t cols, const float* data) {
  Matrix m;
  m.name = std::move(name);
  m.rows = rows;
  m.cols = cols;
  m.f32 = data;
  return m;
}

const float* Matrix::row(int64_t r, float* scratch) const {
  if (r < 0 || r >= rows) fail("ops: row {} out of range for {} [{}, {}]", r, name, rows, cols);
  if (f32) return f32 + r * cols;
  if (!load) fail("ops: weight {} has neither data nor a loader", name);
  load(r, 1, scratch);
  return scratch;
}

// ---- elementary -------------------------------------------------------------------------

float dot(const float* a, const float* b, int64_t n) {
  float out;
  tile<1, 1>(&a, &b, n, &out, 1);
  return out;
}

void round_f16_inplace(std::span<float> x) {
  for (float& v : x) v = round_f16(v);
}

void add_inplace(std::span<float> x, std::span<const float> y) {
  check_size("add_inplace", "y", y.size(), x.size());
  for (size_t i = 0; i < x.size(); ++i) x[i] += y[i];
}

// ---- norms ------------------------------------------------------------------------------

void rmsnorm_rows(std::span<const float> x, std::span<float> y, int dim,
                  std::span<const float> w, float eps) {
  check_rows("rmsnorm_rows", "x", x.size(), dim);
  check_size("rmsnorm_rows", "y", y.size(), x.size());
  check_size("rmsnorm_rows", "w", w.size(), size_t(dim));
  size_t rows = x.size() / size_t(dim);
  for (size_t r = 0; r < rows; ++r) {
    const float* xr = x.data() + r * dim;
    float* yr = y.data() + r * dim;
    double ss = 0;
    for (int i = 0; i < dim; ++i) ss += double(xr[i]) * double(xr[i]);
    float inv = 1.0f / std::sqrt(float(ss / dim) + eps);
    for (int i = 0; i < dim; ++i) yr[i] = w[i] * (xr[i] * inv);
  }
}

void rmsnorm_heads(std::span<float> x, int heads, int head_dim, std::span<const float> w,
                   float eps) {
  check_rows("rmsnorm_heads", "x", x.size(), int64_t(heads) * head_dim);
  rmsnorm_rows(x, x, head_dim, w, eps);  // the heads of a row are consecutive vectors
}

void layernorm_rows(std::span<const float> x, std::span<float> y, int dim,
                    std::span<const float> w, std::span<const float> b, float eps) {
  check_rows("layernorm_rows", "x", x.size(), dim);
  check_size("layernorm_rows", "y", y.size(), x.size());
  check_size("layernorm_rows", "w", w.size(), size_t(dim));
  check_size("layernorm_rows", "b", b.size(), size_t(dim));
  size_t rows = x.size() / size_t(dim);
  for (size_t r = 0; r < rows; ++r) {
    const float* xr = x.data() + r * dim;
    float* yr = y.data() + r * dim;
    double s = 0;
    for (int i = 0; i < dim; ++i) s += xr[i];
    double mean = s / dim;
    double v = 0;
    for (int i = 0; i < dim; ++i) v += (xr[i] - mean) * (xr[i] - mean);
    float meanf = float(mean);
    float inv = 1.0f / std::sqrt(float(v / dim) + eps);
    for (int i = 0; i < dim; ++i) yr[i] = (xr[i] - meanf) * inv * w[i] + b[i];
  }
}

// ---- linear -----------------------------------------------------------------------------

void linear(std::span<const float> x, const Matrix& W, std::span<const float> bias,
            std::span<float> y, int threads) {
  const int64_t K = W.cols, N = W.rows;
  if (K <= 0 || N <= 0) fail("ops::linear: weight {} has shape [{}, {}]", W.name, N, K);
  if (x.size() % size_t(K) != 0)
    fail("ops::linear: input of {} floats is not a multiple of {}'s {} input features", x.size(),
         W.name, K);
  const int64_t M = int64_t(x.size()) / K;
  check_size("linear", "y", y.size(), size_t(M * N));
  if (!bias.empty()) check_size("linear", "bias", bias.size(), size_t(N));
  if (!W.f32 && !W.load) fail("ops::linear: weight {} has neither data nor a loader", W.name);
  if (M == 0) return;
#if defined(__x86_64__)
  if (const int isa = w4_direct(W, M)) {
    // Ranges of 16 weight rows (whole row pairs), each output written by one thread.
    parallel_ranges((N + 15) / 16, threads, [&](int64_t b0, int64_t b1) {
      const int64_t o0 = b0 * 16, o1 = std::min(N, b1 * 16);
      if (isa == 2) w4_rows_avx512(x.data(), M, K, W.w4, o0, o1, y.data(), N);
      else w4_rows_avx2(x.data(), M, K, W.w4, o0, o1, y.data(), N);
      if (!bias.empty())
        for (int64_t m = 0; m < M; ++m)
          for (int64_t o = o0; o < o1; ++o) y[size_t(m * N + o)] += bias[size_t(o)];
    });
    return;
  }
#endif
  // Split output features into ranges aligned to the weight block.
  const int64_t kWeightBlock = weight_block(M, K);
  const int64_t nblk = (N + kWeightBlock - 1) / kWeightBlock;
  parallel_ranges(nblk, threads, [&](int64_t b0, int64_t b1) {
    std::vector<float> buf;
    if (!W.f32) buf.resize(size_t(kWeightBlock * K));
    for (int64_t b = b0; b < b1; ++b) {
      int64_t o0 = b * kWeightBlock, nb = std::min(kWeightBlock, N - o0);
      const float* wblk;
      if (W.f32) {
        wblk = W.f32 + o0 * K;
      } else {
        W.load(o0, nb, buf.data());
        wblk = buf.data();
      }
#if defined(__x86_64__)
      if (use_avx512_tiles()) linear_block_avx512(x.data(), M, K, wblk, nb, y.data() + o0, N);
      else if (use_avx2_tiles()) linear_block_avx2(x.data(), M, K, wblk, nb, y.data() + o0, N);
      else
#endif
        linear_block(x.data(), M, K, wblk, nb, y.data() + o0, N);
      if (!bias.empty())
        for (int64_t m = 0; m < M; ++m)
          for (int64_t j = 0; j < nb; ++j) y[size_t(m * N + o0 + j)] += bias[size_t(o0 + j)];
    }
  });
}

const char* linear_path(const Matrix& W, int64_t M) {
  if (W.f32) return "f32";
  switch (w4_direct(W, M)) {
    case 2: return "w4-avx512";
    case 1: return "w4-avx2";
    default: return "load";
  }
}

int limit_w4_isa(int level) {
#if defined(__x86_64__)
  return g_w4_isa_limit.exchange(std::clamp(level, 0, 2));
#else
  (void)level;
  return 0;
#endif
}

// ---- activations ------------------------------------------------------------------------

float gelu_tanh(float z) {
  const float k = 0.7978845608028654f;  // sqrt(2/pi)
  return 0.5f * z * (1.0f + std::tanh(k * (z + 0.044715f * z * z * z)));
}

float gelu_erf(float z) {
  return 0.5f * z * (1.0f + std::erf(z * 0.7071067811865476f));
}

float silu(float z) { return z / (1.0f + std::exp(-z)); }

void gelu_tanh(std::span<float> x) {
  for (float& v : x) v = gelu_tanh(v);
}

void gelu_erf(std::span<float> x) {
  for (float& v : x) v = gelu_erf(v);
}

void silu_mul(std::span<const float> gate, std::span<const float> up, std::span<float> out) {
  check_size("silu_mul", "up", up.size(), gate.size());
  check_size("silu_mul", "out", out.size(), gate.size());
  for (size_t i = 0; i < gate.size(); ++i) out[i] = silu(gate[i]) * up[i];
}

void mlp_swiglu(std::span<const float> x, const Matrix& Wgate, const Matrix& Wup,
                const Matrix& Wdown, std::span<float> y, int threads) {
  if (Wgate.cols <= 0 || x.size() % size_t(Wgate.cols) != 0)
    fail("ops::mlp_swiglu: input of {} floats does not match {} [{}, {}]", x.size(), Wgate.name,
         Wgate.rows, Wgate.cols);
  size_t M = x.size() / size_t(Wgate.cols);
  if (Wup.rows != Wgate.rows || Wup.cols != Wgate.cols || Wdown.cols != Wgate.rows)
    fail("ops::mlp_swiglu: shapes {} [{}, {}], {} [{}, {}], {} [{}, {}] do not chain", Wgate.name,
         Wgate.rows, Wgate.cols, Wup.name, Wup.rows, Wup.cols, Wdown.name, Wdown.rows, Wdown.cols);
  std::vector<float> g(M * size_t(Wgate.rows)), u(g.size());
  linear(x, Wgate, {}, g, threads);
  linear(x, Wup, {}, u, threads);
  silu_mul(g, u, g);
  linear(g, Wdown, {}, y, threads);
}

// ---- rotary -----------------------------------------------------------------------------

void rotate_half(float* x, const float* cos_a, const float* sin_a, int head_dim) {
  const int h = head_dim / 2;
  for (int d = 0; d < h; ++d) {
    float a = x[d], b = x[d + h];
    x[d] = a * cos_a[d] - b * sin_a[d];
    x[d + h] = b * cos_a[d] + a * sin_a[d];
  }
}

std::vector<float> inv_freq(float theta, int dim) {
  std::vector<float> inv(static_cast<size_t>(dim / 2));
  for (int j = 0; j < dim / 2; ++j) {
    float e = float(2 * j) / float(dim);
    inv[size_t(j)] = 1.0f / std::pow(theta, e);
  }
  return inv;
}

void rope_2d(std::span<float> x, int heads, int head_dim, std::span<const std::array<int, 2>> rq,
             float theta) {
  if (head_dim % 4 != 0) fail("ops::rope_2d: head_dim {} is not a multiple of 4", head_dim);
  const int64_t width = int64_t(heads) * head_dim;
  check_rows("rope_2d", "x", x.size(), width);
  check_size("rope_2d", "rq", rq.size(), x.size() / size_t(width));
  const int half = head_dim / 2, nf = head_dim / 4;
  std::vector<float> inv = inv_freq(theta, half);  // nf frequencies
  std::vector<float> c(static_cast<size_t>(half)), s(static_cast<size_t>(half));
  for (size_t n = 0; n < rq.size(); ++n) {
    for (int k = 0; k < nf; ++k) {
      float ar = float(rq[n][0]) * inv[size_t(k)];
      float aq = float(rq[n][1]) * inv[size_t(k)];
      c[size_t(k)] = std::cos(ar);
      s[size_t(k)] = std::sin(ar);
      c[size_t(nf + k)] = std::cos(aq);
      s[size_t(nf + k)] = std::sin(aq);
    }
    for (int h = 0; h < heads; ++h) rotate_half(x.data() + n * width + h * head_dim, c.data(), s.data(), head_dim);
  }
}

std::vector<int> mrope_axes(std::span<const int> section, int head_dim) {
  if (section.size() != 3) fail("ops::mrope_axes: mrope_section has {} entries, expected 3", section.size());
  if (section[0] + section[1] + section[2] != head_dim / 2)
    fail("ops::mrope_axes: mrope_section [{}, {}, {}] does not sum to head_dim/2 = {}", section[0],
         section[1], section[2], head_dim / 2);
  std::vector<int> axis(size_t(head_dim / 2), 0);
  for (int j = 0; j < head_dim / 2; ++j) {
    if (j % 3 == 1 && j < 3 * section[1]) axis[size_t(j)] = 1;
    else if (j % 3 == 2 && j < 3 * section[2]) axis[size_t(j)] = 2;
  }
  return axis;
}

void rope_tables_mrope(std::span<const std::array<int, 3>> pos, int head_dim, float theta,
                       std::span<const int> section, std::vector<float>& cos_t, std::vector<float>& sin_t) {
  const int half = head_dim / 2;
  std::vector<int> axis = mrope_axes(section, head_dim);
  std::vector<float> inv = inv_freq(theta, head_dim);
  cos_t.assign(pos.size() * size_t(head_dim), 0.0f);
  sin_t.assign(pos.size() * size_t(head_dim), 0.0f);
  for (size_t n = 0; n < pos.size(); ++n)
    for (int j = 0; j < half; ++j) {
      float ang = float(pos[n][size_t(axis[size_t(j)])]) * inv[size_t(j)];
      float c = std::cos(ang), s = std::sin(ang);
      for (int k : {j, j + half}) {
        cos_t[n * size_t(head_dim) + size_t(k)] = c;
        sin_t[n * size_t(head_dim) + size_t(k)] = s;
      }
    }
}

void rope_tables_2d(std::span<const std::array<int, 2>> rq, int head_dim, float theta,
                    std::vector<float>& cos_t, std::vector<float>& sin_t) {
  const int half = head_dim / 2, nf = head_dim / 4;
  std::vector<float> inv = inv_freq(theta, half);
  cos_t.assign(rq.size() * size_t(head_dim), 0.0f);
  sin_t.assign(rq.size() * size_t(head_dim), 0.0f);
  for (size_t n = 0; n < rq.size(); ++n)
    for (int k = 0; k < nf; ++k)
      for (int axis = 0; axis < 2; ++axis) {
        float ang = float(rq[n][size_t(axis)]) * inv[size_t(k)];
        float c = std::cos(ang), s = std::sin(ang);
        for (int d : {axis * nf + k, axis * nf + k + half}) {
          cos_t[n * size_t(head_dim) + size_t(d)] = c;
          sin_t[n * size_t(head_dim) + size_t(d)] = s;
        }
      }
}

void mrope(std::span<float> x, int heads, int head_dim, std::span<const std::array<int, 3>> pos,
           float theta, std::span<const int> section) {
  const int64_t width = int64_t(heads) * head_dim;
  check_rows("mrope", "x", x.size(), width);
  check_size("mrope", "pos", pos.size(), x.size() / size_t(width));
  const int half = head_dim / 2;
  std::vector<int> axis = mrope_axes(section, head_dim);
  std::vector<float> inv = inv_freq(theta, head_dim);
  std::vector<float> c(static_cast<size_t>(half)), s(static_cast<size_t>(half));
  for (size_t n = 0; n < pos.size(); ++n) {
    for (int j = 0; j < half; ++j) {
      float a = float(pos[n][size_t(axis[size_t(j)])]) * inv[size_t(j)];
      c[size_t(j)] = std::cos(a);
      s[size_t(j)] = std::sin(a);
    }
    for (int h = 0; h < heads; ++h) rotate_half(x.data() + n * width + h * head_dim, c.data(), s.data(), head_dim);
  }
}

// ---- attention --------------------------------------------------------------------------

void attention(std::span<const float> q, std::span<const float> k, std::span<const float> v,
               std::span<float> out, const AttnShape& s, int threads) {
  if (s.q_heads <= 0 || s.kv_heads <= 0 || s.head_dim <= 0 || s.q_heads % s.kv_heads != 0)
    fail("ops::attention: bad heads q {} kv {} head_dim {} (q heads must be a multiple of kv heads)",
         s.q_heads, s.kv_heads, s.head_dim);
  const int64_t qw = int64_t(s.q_heads) * s.head_dim, kw = int64_t(s.kv_heads) * s.head_dim;
  check_rows("attention", "q", q.size(), qw);
  check_rows("attention", "k", k.size(), kw);
  check_size("attention", "v", v.size(), k.size());
  check_size("attention", "out", out.size(), q.size());
  const int64_t nq = int64_t(q.size()) / qw, nk = int64_t(k.size()) / kw;
  if (s.causal && (s.q_offset < 0 || s.q_offset + nq > nk))
    fail("ops::attention: causal queries {}..{} need keys up to {}, have {}", s.q_offset,
         s.q_offset + nq - 1, s.q_offset + nq - 1, nk);
  const int group = s.q_heads / s.kv_heads;
  const int hd = s.head_dim;
  parallel_ranges(nq * s.q_heads, threads, [&](int64_t a, int64_t b) {
    std::vector<float> p(size_t(std::max<int64_t>(nk, 1)));
    std::vector<float> acc(static_cast<size_t>(hd));
    for (int64_t t = a; t < b; ++t) {
      int64_t i = t / s.q_heads;
      int h = int(t % s.q_heads), kvh = h / group;
      int64_t nvis = s.causal ? s.q_offset + i + 1 : nk;
      const float* qi = q.data() + i * qw + int64_t(h) * hd;
      float mx = -INFINITY;
      for (int64_t j = 0; j < nvis; ++j) {
        float sc = dot(qi, k.data() + j * kw + int64_t(kvh) * hd, hd) * s.scale;
        p[size_t(j)] = sc;
        mx = std::max(mx, sc);
      }
      float sum = 0;
      for (int64_t j = 0; j < nvis; ++j) {
        p[size_t(j)] = std::exp(p[size_t(j)] - mx);
        sum += p[size_t(j)];
      }
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t j = 0; j < nvis; ++j) {
        float pj = p[size_t(j)] / sum;
        const float* vj = v.data() + j * kw + int64_t(kvh) * hd;
        for (int d = 0; d < hd; ++d) acc[size_t(d)] += pj * vj[d];
      }
      std::copy(acc.begin(), acc.end(), out.data() + i * qw + int64_t(h) * hd);
    }
  });
}

// ---- vision -----------------------------------------------------------------------------

std::vector<float> linspace_f32(float start, float end, int steps) {
  if (steps <= 0) fail("ops::linspace_f32: steps {} must be positive", steps);
  std::vector<float> out(static_cast<size_t>(steps));
  if (steps == 1) {
    out[0] = start;
    return out;
  }
  const float step = (end - start) / float(steps - 1);
  const int halfway = steps / 2;
  for (int i = 0; i < steps; ++i)
    out[size_t(i)] = i < halfway ? start + step * float(i) : end - step * float(steps - i - 1);
  return out;
}

std::vector<std::array<int, 2>> merge_window_order(int gh, int gw, int merge) {
  if (merge <= 0 || gh % merge != 0 || gw % merge != 0)
    fail("ops::merge_window_order: grid {}x{} is not a multiple of the merge size {}", gh, gw, merge);
  std::vector<std::array<int, 2>> rq;
  rq.reserve(size_t(gh) * size_t(gw));
  for (int bh = 0; bh < gh / merge; ++bh)
    for (int bw = 0; bw < gw / merge; ++bw)
      for (int mh = 0; mh < merge; ++mh)
        for (int mw = 0; mw < merge; ++mw) rq.push_back({bh * merge + mh, bw * merge + mw});
  return rq;
}

void pos_embed_bilinear(std::span<const float> table, int side, int dim, int gh, int gw,
                        int merge, std::span<float> out) {
  check_size("pos_embed_bilinear", "table", table.size(), size_t(side) * side * dim);
  check_size("pos_embed_bilinear", "out", out.size(), size_t(gh) * gw * dim);
  std::vector<float> hi = linspace_f32(0.0f, float(side - 1), gh);
  std::vector<float> wi = linspace_f32(0.0f, float(side - 1), gw);
  auto order = merge_window_order(gh, gw, merge);
  for (size_t n = 0; n < order.size(); ++n) {
    int r = order[n][0], qc = order[n][1];
    float hr = hi[size_t(r)], wq = wi[size_t(qc)];
    int fr = int(hr), fq = int(wq);  // trunc, as Tensor.int()
    int cr = std::min(fr + 1, side - 1), cq = std::min(fq + 1, side - 1);
    float dh = hr - float(fr), dw = wq - float(fq);
    float w00 = (1.0f - dh) * (1.0f - dw), w01 = (1.0f - dh) * dw;
    float w10 = dh * (1.0f - dw), w11 = dh * dw;
    const float* e00 = table.data() + (size_t(fr) * side + fq) * dim;
    const float* e01 = table.data() + (size_t(fr) * side + cq) * dim;
    const float* e10 = table.data() + (size_t(cr) * side + fq) * dim;
    const float* e11 = table.data() + (size_t(cr) * side + cq) * dim;
    float* o = out.data() + n * dim;
    for (int d = 0; d < dim; ++d)
      o[d] = ((e00[d] * w00 + e01[d] * w01) + e10[d] * w10) + e11[d] * w11;
  }
}

void merge_shuffle(std::span<const float> x, int dim, int merge, std::span<float> out) {
  const int64_t win = int64_t(merge) * merge;
  check_rows("merge_shuffle", "x", x.size(), int64_t(dim) * win);
  check_size("merge_shuffle", "out", out.size(), x.size());
  if (out.data() != x.data()) std::copy(x.begin(), x.end(), out.begin());
}

// ---- language model ---------------------------------------------------------------------

void embed_lookup(const Matrix& table, std::span<const int> ids, std::span<float> out) {
  check_size("embed_lookup", "out", out.size(), ids.size() * size_t(table.cols));
  for (size_t i = 0; i < ids.size(); ++i) {
    int id = ids[i];
    if (id < 0 || id >= table.rows)
      fail("ops::embed_lookup: token id {} at position {} is outside {} ({} rows)", id, i,
           table.name, table.rows);
    float* o = out.data() + i * size_t(table.cols);
    if (table.f32)
      std::copy_n(table.f32 + int64_t(id) * table.cols, table.cols, o);
    else
      table.load(id, 1, o);
  }
}

void splice_rows(std::span<float> x, int dim, std::span<const int> positions,
                 std::span<const float> src) {
  check_rows("splice_rows", "x", x.size(), dim);
  check_size("splice_rows", "src", src.size(), positions.size() * size_t(dim));
  size_t rows = x.size() / size_t(dim);
  for (size_t i = 0; i < positions.size(); ++i) {
    if (positions[i] < 0 || size_t(positions[i]) >= rows)
      fail("ops::splice_rows: position {} outside the {} rows", positions[i], rows);
    std::copy_n(src.data() + i * dim, dim, x.data() + size_t(positions[i]) * dim);
  }
}

void add_rows_at(std::span<float> x, int dim, std::span<const int> positions,
                 std::span<const float> src) {
  check_rows("add_rows_at", "x", x.size(), dim);
  check_size("add_rows_at", "src", src.size(), positions.size() * size_t(dim));
  size_t rows = x.size() / size_t(dim);
  for (size_t i = 0; i < positions.size(); ++i) {
    if (positions[i] < 0 || size_t(positions[i]) >= rows)
      fail("ops::add_rows_at: position {} outside the {} rows", positions[i], rows);
    float* xr = x.data() + size_t(positions[i]) * dim;
    const float* sr = src.data() + i * dim;
    for (int d = 0; d < dim; ++d) xr[d] += sr[d];
  }
}

void tied_head(std::span<const float> x, const Matrix& embed, std::span<float> logits,
               int threads) {
  linear(x, embed, {}, logits, threads);
}

int argmax(std::span<const float> x) {
  if (x.empty()) fail("ops::argmax: empty input");
  size_t best = 0;
  for (size_t i = 1; i < x.size(); ++i)
    if (x[i] > x[best]) best = i;
  return int(best);
}

}  // namespace gpnpu::model::ops
