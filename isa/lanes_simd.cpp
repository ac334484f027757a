// Vectorised lane loops (contract in lanes_simd.h).
#include "isa/lanes_simd.h"

#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <vector>

#include "isa/fp16.h"

namespace gpnpu::isa::lanes {

namespace {

const float* f16_table() {
  static const std::vector<float> t = [] {
    std::vector<float> v(65536);
    for (uint32_t h = 0; h < 65536; ++h) v[h] = f16_to_f32(uint16_t(h));
    return v;
  }();
  return t.data();
}

#if defined(__x86_64__)
// The lanes after the vector bodies' last full vector, as the hardware conversion: NaNs quiet.
inline void mac_f16_operand_tail(uint32_t* fb, const uint32_t* b, size_t n) {
  const float* t = f16_table();
  for (size_t k = 0; k < n; ++k) {
    const uint32_t x = std::bit_cast<uint32_t>(t[b[k] & 0xffff]);
    fb[k] = (x & 0x7f800000u) == 0x7f800000u && (x & 0x7fffff) ? x | 0x400000u : x;
  }
}

__attribute__((target("avx512f"))) void mac_f16_avx512(uint32_t* a, const uint32_t* b, const uint32_t* c, size_t n) {
  size_t k = 0;
  for (; k + 16 <= n; k += 16) {
    __m512 fb = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_loadu_si512(b + k)));  // low halves
    __m512 fc = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_loadu_si512(c + k)));
    __m512 fa = _mm512_loadu_ps(reinterpret_cast<const float*>(a + k));
    _mm512_storeu_ps(reinterpret_cast<float*>(a + k), _mm512_add_ps(fa, _mm512_mul_ps(fb, fc)));
  }
  if (k < n) mac_f16_scalar(a + k, b + k, c + k, n - k);
}

__attribute__((target("avx512f"))) void mac_f16_bcast_avx512(uint32_t* a, const uint32_t* b, const uint32_t* c16, size_t n) {
  const __m512 fc = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_loadu_si512(c16)));
  for (size_t k = 0; k + 16 <= n; k += 16) {
    __m512 fb = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_loadu_si512(b + k)));
    __m512 fa = _mm512_loadu_ps(reinterpret_cast<const float*>(a + k));
    _mm512_storeu_ps(reinterpret_cast<float*>(a + k), _mm512_add_ps(fa, _mm512_mul_ps(fb, fc)));
  }
}

__attribute__((target("avx512f"))) void mla_f32_avx512(uint32_t* a, const uint32_t* b, const uint32_t* c, size_t n) {
  size_t k = 0;
  for (; k + 16 <= n; k += 16) {
    __m512 p = _mm512_mul_ps(_mm512_loadu_ps(reinterpret_cast<const float*>(b + k)),
                             _mm512_loadu_ps(reinterpret_cast<const float*>(c + k)));
    _mm512_storeu_ps(reinterpret_cast<float*>(a + k), _mm512_add_ps(_mm512_loadu_ps(reinterpret_cast<const float*>(a + k)), p));
  }
  if (k < n) mla_f32_scalar(a + k, b + k, c + k, n - k);
}

__attribute__((target("avx512f"))) void cvt_f32_f16_avx512(uint32_t* a, const uint32_t* b, size_t n) {
  size_t k = 0;
  for (; k + 16 <= n; k += 16) {
    const __m512i x = _mm512_loadu_si512(b + k);  // a NaN: as in cvt_f32_f16_avx2 below
    if (_mm512_cmpgt_epi32_mask(_mm512_and_si512(x, _mm512_set1_epi32(0x7fff)), _mm512_set1_epi32(0x7c00)))
      cvt_f32_f16_scalar(a + k, b + k, 16);
    else
      _mm512_storeu_ps(reinterpret_cast<float*>(a + k), _mm512_cvtph_ps(_mm512_cvtepi32_epi16(x)));
  }
  if (k < n) cvt_f32_f16_scalar(a + k, b + k, n - k);
}

// The common case costs two compares per 16 values: a PE with any value that overflows,
// underflows a normal number, or is NaN takes the scalar definition (which counts them).
__attribute__((target("avx512f"))) inline __mmask16 f16_special(__m512 ax) {
  return _mm512_cmp_ps_mask(ax, _mm512_set1_ps(kF16OverflowAt), _CMP_NLT_UQ) |  // >= 65520, inf, NaN
         _mm512_mask_cmp_ps_mask(_mm512_cmp_ps_mask(ax, _mm512_set1_ps(kF16ZeroBelow), _CMP_LE_OQ), ax,
                                 _mm512_set1_ps(kF32MinNormal), _CMP_GE_OQ);     // normal, rounds to 0
}

__attribute__((target("avx512f"))) void pack_f16_pes_avx512(uint32_t* out, const uint32_t* lo, const uint32_t* hi,
                                                             uint32_t e0, uint32_t e1, const uint8_t* pred, bool saturate,
                                                             F16Range& r) {
  __m512 vmax = _mm512_setzero_ps();
  for (uint32_t e = e0; e < e1; ++e) {
    if (pred && !pred[e]) continue;
    const size_t k = size_t(e) * 16;
    __m512 l = _mm512_loadu_ps(reinterpret_cast<const float*>(lo + k)), h = _mm512_loadu_ps(reinterpret_cast<const float*>(hi + k));
    __m512 al = _mm512_abs_ps(l), ah = _mm512_abs_ps(h);
    if (f16_special(al) | f16_special(ah)) {
      pack_f16_scalar(out + k, lo + k, hi + k, saturate, r, int64_t(e) * 32);
      continue;
    }
    vmax = _mm512_max_ps(vmax, _mm512_max_ps(al, ah));
    // Lanes 0..7 pack lo[0..15] pairwise: the 16 halves of lo in order are exactly words 0..7.
    __m256i lh = _mm512_cvtps_ph(l, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256i hh = _mm512_cvtps_ph(h, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + k), lh);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + k + 8), hh);
  }
  const float m = _mm512_reduce_max_ps(vmax);
  if (m > r.max_abs) r.max_abs = m;
}

__attribute__((target("avx512f"))) void cvt_f16_f32_avx512(uint32_t* a, const uint32_t* b, size_t k, size_t n,
                                                            bool saturate, F16Range& r) {
  __m512 vmax = _mm512_setzero_ps();
  size_t j = k;
  for (; j + 16 <= k + n; j += 16) {
    __m512 v = _mm512_loadu_ps(reinterpret_cast<const float*>(b + j)), av = _mm512_abs_ps(v);
    if (f16_special(av)) {
      cvt_f16_f32_scalar(a, b, j, 16, saturate, r);
      continue;
    }
    vmax = _mm512_max_ps(vmax, av);
    _mm512_storeu_si512(a + j, _mm512_cvtepu16_epi32(_mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)));
  }
  if (j < k + n) cvt_f16_f32_scalar(a, b, j, k + n - j, saturate, r);
  const float m = _mm512_reduce_max_ps(vmax);
  if (m > r.max_abs) r.max_abs = m;
}

__attribute__((target("avx512f"))) inline void dequant4_avx512(uint32_t* out, const uint32_t* codes, float scale, float zero,
                                                         uint32_t sel, bool f16) {
  // Lane l reads word 2 * sel + l / 8 at nibble l % 8.
  const __m512i idx = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
  const __m512i sh = _mm512_set_epi32(28, 24, 20, 16, 12, 8, 4, 0, 28, 24, 20, 16, 12, 8, 4, 0);
  __m512i w = _mm512_permutexvar_epi32(idx, _mm512_castsi128_si512(_mm_loadl_epi64(
                                                reinterpret_cast<const __m128i*>(codes + 2 * sel))));
  __m512i q = _mm512_and_si512(_mm512_srlv_epi32(w, sh), _mm512_set1_epi32(15));
  __m512 v = _mm512_mul_ps(_mm512_sub_ps(_mm512_cvtepi32_ps(q), _mm512_set1_ps(zero)), _mm512_set1_ps(scale));
  if (f16) {
    // NaN payloads are the one place the hardware conversion may differ: take the scalar path.
    if (_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q)) return dequant4_scalar(out, codes, scale, zero, sel, f16);
    _mm512_storeu_si512(out, _mm512_cvtepu16_epi32(_mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)));
  } else {
    _mm512_storeu_ps(reinterpret_cast<float*>(out), v);
  }
}
__attribute__((target("avx512f"))) void dequant4_pes_avx512(uint32_t* out, const uint32_t* codes, const uint32_t* meta,
                                                             uint32_t e0, uint32_t e1, const uint8_t* pred, uint32_t sel, bool f16) {
  for (uint32_t e = e0; e < e1; ++e) {
    if (pred && !pred[e]) continue;
    const size_t k = size_t(e) * 16;
    dequant4_avx512(out + k, codes + k, std::bit_cast<float>(meta[k]), std::bit_cast<float>(meta[k + 1]), sel, f16);
  }
}
// mac_f16_operand on AVX-512 CPUs: the same hardware conversion as the AVX2 body (NaNs
// quieted), 16 lanes at a time.
__attribute__((target("avx512f"))) void mac_f16_operand_avx512(uint32_t* fb, const uint32_t* b, size_t n) {
  size_t k = 0;
  for (; k + 16 <= n; k += 16)
    _mm512_storeu_ps(reinterpret_cast<float*>(fb + k), _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_loadu_si512(b + k))));
  if (k < n) mac_f16_operand_tail(fb + k, b + k, n - k);
}

// mac_f16_cvt on AVX-512 CPUs, with the operand order the compiler gives the AVX2 body
// (c * fb, then the product + a) pinned, so that two NaN operands give the same NaN.
__attribute__((target("avx512f"))) void mac_f16_cvt_avx512(uint32_t* a, const uint32_t* fb, const uint32_t* c, size_t n) {
  size_t k = 0;
  for (; k + 16 <= n; k += 16) {
    __m512 v = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_loadu_si512(c + k)));
    asm("vmulps %1, %0, %0" : "+v"(v) : "m"(*reinterpret_cast<const __m512*>(fb + k)));  // c * fb
    asm("vaddps %1, %0, %0" : "+v"(v) : "m"(*reinterpret_cast<const __m512*>(a + k)));   // product + a
    _mm512_storeu_ps(reinterpret_cast<float*>(a + k), v);
  }
  if (k < n) mac_f16_cvt_scalar(a + k, fb + k, c + k, n - k);
}

// mac_f16_cvt_chain on AVX-512 CPUs: one PE's 16 lanes a register, 16 PEs at a time,
// with the operand order of the AVX2 bodies it must equal (mac8 and mac8_two below).
__attribute__((target("avx512f"))) inline __m512 mac16(__m512 acc, const uint32_t* fb, __m512 c) {
  __m512 p;
  asm("vmulps %2, %1, %0" : "=v"(p) : "v"(c), "m"(*reinterpret_cast<const __m512*>(fb)));  // c * fb
  asm("vaddps %0, %1, %0" : "+v"(acc) : "v"(p));                                          // p + acc
  return acc;
}
__attribute__((target("avx512f"))) inline __m512 mac16_two(__m512 acc, const uint32_t* fb, const uint32_t* c) {
  __m512 p;
  asm("vmulps %2, %1, %0" : "=v"(p) : "v"(_mm512_loadu_ps(reinterpret_cast<const float*>(fb))),
      "m"(*reinterpret_cast<const __m512*>(c)));  // fb * c
  asm("vaddps %0, %1, %0" : "+v"(acc) : "v"(p));  // p + acc
  return acc;
}
__attribute__((target("avx512f"))) inline __m512 ld(const uint32_t* p) { return _mm512_loadu_ps(reinterpret_cast<const float*>(p)); }
// G PEs' chains at a time from PE e: G independent sums hide the add's latency (16 PEs
// ran the chains of a 64-PE block 12 to 15% faster than 8, measured in isolation).
template <int G>
__attribute__((target("avx512f"), always_inline)) inline void mac_chain_pes(uint32_t* a, const MacItem* it, size_t n,
                                                                          size_t e) {
  uint32_t* ae = a + e * 16;
  __m512 x[G];
  for (int p = 0; p < G; ++p) x[p] = ld(ae + 16 * p);
  for (size_t t = 0; t < n; ++t) {
    const uint32_t* fb = it[t].fb + e * 16;
    if (!it[t].sel) {
      const __m512 c = ld(it[t].cf);
      for (int p = 0; p < G; ++p) x[p] = mac16(x[p], fb + 16 * p, c);
    } else {
      const uint8_t* sel = it[t].sel + e;
      for (int p = 0; p < G; ++p) x[p] = mac16_two(x[p], fb + 16 * p, sel[p] ? it[t].cf_on : it[t].cf);
    }
  }
  for (int p = 0; p < G; ++p) _mm512_storeu_ps(reinterpret_cast<float*>(ae + 16 * p), x[p]);
}
__attribute__((target("avx512f"))) void mac_f16_cvt_chain_avx512(uint32_t* a, const MacItem* it, size_t n, size_t e0,
                                                                 size_t npes) {
  size_t e = e0;
  for (; e + 16 <= npes; e += 16) mac_chain_pes<16>(a, it, n, e);
  for (; e + 8 <= npes; e += 8) mac_chain_pes<8>(a, it, n, e);
  for (; e < npes; ++e) mac_chain_pes<1>(a, it, n, e);
}

// mac_f16_cvt_chain_rows on AVX-512 CPUs: kChainRows accumulators x 4 PEs at a time, each
// PE's conversion loaded once for the rows, with mac16's and mac16_two's operand orders.
// mac16r / mac16r_two take both factors in registers (the conversion is loaded once per
// PE for the four rows); sharing one helper with mac16 through a "vm" operand was 1-2%
// slower in BM_GemmW4 (measured).
__attribute__((target("avx512f"), always_inline)) inline __m512 mac16r(__m512 acc, __m512 f, __m512 c) {
  __m512 p;
  asm("vmulps %2, %1, %0" : "=v"(p) : "v"(c), "v"(f));  // c * fb
  asm("vaddps %0, %1, %0" : "+v"(acc) : "v"(p));        // p + acc
  return acc;
}
__attribute__((target("avx512f"), always_inline)) inline __m512 mac16r_two(__m512 acc, __m512 f, __m512 c) {
  __m512 p;
  asm("vmulps %2, %1, %0" : "=v"(p) : "v"(f), "v"(c));  // fb * c (mac16_two's order)
  asm("vaddps %0, %1, %0" : "+v"(acc) : "v"(p));        // p + acc
  return acc;
}
__attribute__((target("avx512f"))) void mac_f16_cvt_chain_rows_avx512(uint32_t* const* a, const MacItem* const* it,
                                                                      size_t n, size_t e0, size_t e1) {
  constexpr int R = kChainRows, G = 4;
  size_t e = e0;
  for (; e + G <= e1; e += G) {
    __m512 x[R][G];
    for (int r = 0; r < R; ++r)
      for (int p = 0; p < G; ++p) x[r][p] = ld(a[r] + (e + p) * 16);
    for (size_t t = 0; t < n; ++t) {
      const uint32_t* fb = it[0][t].fb + e * 16;
      __m512 f[G];
      for (int p = 0; p < G; ++p) f[p] = ld(fb + 16 * p);
      if (!it[0][t].sel) {
        for (int r = 0; r < R; ++r) {
          const __m512 c = ld(it[r][t].cf);
          for (int p = 0; p < G; ++p) x[r][p] = mac16r(x[r][p], f[p], c);
        }
      } else {  // the rows' selectors are one (it[r][t].sel the same)
        const uint8_t* sel = it[0][t].sel + e;
        for (int r = 0; r < R; ++r) {
          const __m512 c0 = ld(it[r][t].cf), c1 = ld(it[r][t].cf_on);
          for (int p = 0; p < G; ++p) x[r][p] = mac16r_two(x[r][p], f[p], sel[p] ? c1 : c0);
        }
      }
    }
    for (int r = 0; r < R; ++r)
      for (int p = 0; p < G; ++p) _mm512_storeu_ps(reinterpret_cast<float*>(a[r] + (e + p) * 16), x[r][p]);
  }
  if (e < e1)
    for (int r = 0; r < R; ++r) mac_f16_cvt_chain_avx512(a[r], it[r], n, e, e1);
}

// dq4_mla_f32_bcast on AVX-512 CPUs: one PE's 16 lanes a register, with the AVX2 body's
// operand order ((code - z) * s, then v * c, then the product + a), so that two NaN
// operands give the same NaN.
__attribute__((target("avx512f"))) void dq4_mla_f32_bcast_avx512(uint32_t* a, const uint32_t* codes, const uint32_t* meta2,
                                                                  uint32_t sel, const uint32_t* c16, size_t npes) {
  const __m512 c = ld(c16);
  const __m512i idx = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
  const __m512i sh = _mm512_set_epi32(28, 24, 20, 16, 12, 8, 4, 0, 28, 24, 20, 16, 12, 8, 4, 0);
  for (size_t e = 0; e < npes; ++e) {
    const size_t k = e * 16;
    const __m512i w = _mm512_permutexvar_epi32(
        idx, _mm512_castsi128_si512(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes + k + 2 * sel))));
    __m512 v = _mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srlv_epi32(w, sh), _mm512_set1_epi32(15)));
    const __m512 z = _mm512_set1_ps(std::bit_cast<float>(meta2[2 * e + 1])), s = _mm512_set1_ps(std::bit_cast<float>(meta2[2 * e]));
    asm("vsubps %1, %0, %0" : "+v"(v) : "v"(z));  // v - z
    asm("vmulps %1, %0, %0" : "+v"(v) : "v"(s));  // v * s
    asm("vmulps %1, %0, %0" : "+v"(v) : "v"(c));  // v * c
    asm("vaddps %1, %0, %0" : "+v"(v) : "m"(*reinterpret_cast<const __m512*>(a + k)));  // v + a
    _mm512_storeu_ps(reinterpret_cast<float*>(a + k), v);
  }
}

// AVX2 + F16C bodies (CPUs without AVX-512, e.g. AMD Zen 2/3): the same operations as the
// AVX-512 ones on 8 lanes at a time. No FMA in the target: a product and a sum stay two
// roundings (vmla.f32), exactly as the definitions.
#define GPNPU_AVX2 __attribute__((target("avx2,f16c")))
GPNPU_AVX2 inline __m256 f16_lo_to_f32(const uint32_t* p) {  // 8 lanes' low halves as fp32
  const __m256i m = _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)), _mm256_set1_epi32(0xffff));
  return _mm256_cvtph_ps(_mm_packus_epi32(_mm256_castsi256_si128(m), _mm256_extracti128_si256(m, 1)));
}
GPNPU_AVX2 inline __m256 load8(const uint32_t* p) { return _mm256_loadu_ps(reinterpret_cast<const float*>(p)); }
GPNPU_AVX2 inline void store8(uint32_t* p, __m256 v) { _mm256_storeu_ps(reinterpret_cast<float*>(p), v); }
GPNPU_AVX2 inline __m256 abs8(__m256 v) { return _mm256_and_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff))); }
GPNPU_AVX2 inline float hmax8(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}
// As f16_special above: |x| >= 65520, inf, NaN, or a normal |x| that rounds to zero.
GPNPU_AVX2 inline int f16_special8(__m256 ax) {
  const __m256 big = _mm256_cmp_ps(ax, _mm256_set1_ps(kF16OverflowAt), _CMP_NLT_UQ);
  const __m256 tiny = _mm256_and_ps(_mm256_cmp_ps(ax, _mm256_set1_ps(kF16ZeroBelow), _CMP_LE_OQ),
                                    _mm256_cmp_ps(ax, _mm256_set1_ps(kF32MinNormal), _CMP_GE_OQ));
  return _mm256_movemask_ps(_mm256_or_ps(big, tiny));
}
constexpr int kRne = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;

// The 16 lanes of one PE's vdq4.f32 element group w0 (lanes 0..7), w1 (lanes 8..15): as
// dequant4_pes_avx2, the code minus zero, times scale (two roundings).
GPNPU_AVX2 inline void dq4_f32_8x2(uint32_t w0, uint32_t w1, __m256 vz, __m256 vs, __m256& v0, __m256& v1) {
  const __m256i sh = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28), nib = _mm256_set1_epi32(15);
  v0 = _mm256_mul_ps(_mm256_sub_ps(_mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(int(w0)), sh), nib)), vz), vs);
  v1 = _mm256_mul_ps(_mm256_sub_ps(_mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(int(w1)), sh), nib)), vz), vs);
}

GPNPU_AVX2 void mac_f16_avx2(uint32_t* a, const uint32_t* b, const uint32_t* c, size_t n) {
  size_t k = 0;
  for (; k + 8 <= n; k += 8) store8(a + k, _mm256_add_ps(load8(a + k), _mm256_mul_ps(f16_lo_to_f32(b + k), f16_lo_to_f32(c + k))));
  if (k < n) mac_f16_scalar(a + k, b + k, c + k, n - k);
}

GPNPU_AVX2 void mac_f16_bcast_avx2(uint32_t* a, const uint32_t* b, const uint32_t* c16, size_t n) {
  const __m256 c0 = f16_lo_to_f32(c16), c1 = f16_lo_to_f32(c16 + 8);
  for (size_t k = 0; k + 16 <= n; k += 16) {
    store8(a + k, _mm256_add_ps(load8(a + k), _mm256_mul_ps(f16_lo_to_f32(b + k), c0)));
    store8(a + k + 8, _mm256_add_ps(load8(a + k + 8), _mm256_mul_ps(f16_lo_to_f32(b + k + 8), c1)));
  }
}

GPNPU_AVX2 void mac_f16_operand_avx2(uint32_t* fb, const uint32_t* b, size_t n) {
  size_t k = 0;
  for (; k + 8 <= n; k += 8) store8(fb + k, f16_lo_to_f32(b + k));
  mac_f16_operand_tail(fb + k, b + k, n - k);
}

GPNPU_AVX2 void mac_f16_cvt_avx2(uint32_t* a, const uint32_t* fb, const uint32_t* c, size_t n) {
  size_t k = 0;  // fb first in the product, as b in mac_f16_avx2: a NaN operand's payload wins the same way
  for (; k + 8 <= n; k += 8) store8(a + k, _mm256_add_ps(load8(a + k), _mm256_mul_ps(load8(fb + k), f16_lo_to_f32(c + k))));
  if (k < n) mac_f16_cvt_scalar(a + k, fb + k, c + k, n - k);
}

GPNPU_AVX2 void mac_f16_cvt_bcast_avx2(uint32_t* a, const uint32_t* fb, const uint32_t* c16, size_t n) {
  const __m256 c0 = f16_lo_to_f32(c16), c1 = f16_lo_to_f32(c16 + 8);
  for (size_t k = 0; k + 16 <= n; k += 16) {
    store8(a + k, _mm256_add_ps(load8(a + k), _mm256_mul_ps(load8(fb + k), c0)));
    store8(a + k + 8, _mm256_add_ps(load8(a + k + 8), _mm256_mul_ps(load8(fb + k + 8), c1)));
  }
}

GPNPU_AVX2 void mac_f16_cvt_bcast2_avx2(uint32_t* a, const uint32_t* fb, const uint32_t* c16, const uint32_t* c16_on,
                                        const uint8_t* sel, size_t npes) {
  const __m256 c[2][2] = {{f16_lo_to_f32(c16), f16_lo_to_f32(c16 + 8)}, {f16_lo_to_f32(c16_on), f16_lo_to_f32(c16_on + 8)}};
  for (size_t e = 0; e < npes; ++e) {
    const __m256* ce = c[sel[e] != 0];
    const size_t k = e * 16;
    store8(a + k, _mm256_add_ps(load8(a + k), _mm256_mul_ps(load8(fb + k), ce[0])));
    store8(a + k + 8, _mm256_add_ps(load8(a + k + 8), _mm256_mul_ps(load8(fb + k + 8), ce[1])));
  }
}

// acc + fb * c as mac_f16_cvt_bcast_avx2 and mac_f16_cvt_bcast2_avx2 compute it, with
// their operand order pinned (x86 returns the first source's payload when both are NaN).
// There the compiler folds the loads into the instructions: the product is the first
// source of the sum (the accumulator is loaded), and c the first source of the product in
// mac_f16_cvt_bcast_avx2 (fb is loaded) but fb in mac_f16_cvt_bcast2_avx2 (c is loaded).
// Here the accumulator stays in a register, where the compiler might put it first: the
// asm keeps the order (mac8 for one pattern, mac8_two for two).
GPNPU_AVX2 inline __m256 mac8(__m256 acc, const uint32_t* fb, __m256 c) {
  __m256 p;
  asm("vmulps %2, %1, %0" : "=x"(p) : "x"(c), "m"(*reinterpret_cast<const __m256*>(fb)));  // c * fb
  asm("vaddps %0, %1, %0" : "+x"(acc) : "x"(p));                                          // p + acc
  return acc;
}
GPNPU_AVX2 inline __m256 mac8_two(__m256 acc, const uint32_t* fb, const uint32_t* c) {
  __m256 p;
  asm("vmulps %2, %1, %0" : "=x"(p) : "x"(load8(fb)), "m"(*reinterpret_cast<const __m256*>(c)));  // fb * c
  asm("vaddps %0, %1, %0" : "+x"(acc) : "x"(p));                                                  // p + acc
  return acc;
}

// Four PEs at a time: their 8 accumulator vectors stay in registers across the items.
GPNPU_AVX2 void mac_f16_cvt_chain_avx2(uint32_t* a, const MacItem* it, size_t n, size_t e0, size_t npes) {
  size_t e = e0;
  for (; e + 4 <= npes; e += 4) {
    uint32_t* ae = a + e * 16;
    __m256 x0 = load8(ae), x1 = load8(ae + 8), x2 = load8(ae + 16), x3 = load8(ae + 24);
    __m256 x4 = load8(ae + 32), x5 = load8(ae + 40), x6 = load8(ae + 48), x7 = load8(ae + 56);
    for (size_t t = 0; t < n; ++t) {
      const uint32_t* fb = it[t].fb + e * 16;
      if (!it[t].sel) {
        const __m256 c0 = load8(it[t].cf), c1 = load8(it[t].cf + 8);
        x0 = mac8(x0, fb, c0);
        x1 = mac8(x1, fb + 8, c1);
        x2 = mac8(x2, fb + 16, c0);
        x3 = mac8(x3, fb + 24, c1);
        x4 = mac8(x4, fb + 32, c0);
        x5 = mac8(x5, fb + 40, c1);
        x6 = mac8(x6, fb + 48, c0);
        x7 = mac8(x7, fb + 56, c1);
      } else {
        const uint8_t* sel = it[t].sel + e;
        const uint32_t *p0 = sel[0] ? it[t].cf_on : it[t].cf, *p1 = sel[1] ? it[t].cf_on : it[t].cf;
        const uint32_t *p2 = sel[2] ? it[t].cf_on : it[t].cf, *p3 = sel[3] ? it[t].cf_on : it[t].cf;
        x0 = mac8_two(x0, fb, p0);
        x1 = mac8_two(x1, fb + 8, p0 + 8);
        x2 = mac8_two(x2, fb + 16, p1);
        x3 = mac8_two(x3, fb + 24, p1 + 8);
        x4 = mac8_two(x4, fb + 32, p2);
        x5 = mac8_two(x5, fb + 40, p2 + 8);
        x6 = mac8_two(x6, fb + 48, p3);
        x7 = mac8_two(x7, fb + 56, p3 + 8);
      }
    }
    store8(ae, x0), store8(ae + 8, x1), store8(ae + 16, x2), store8(ae + 24, x3);
    store8(ae + 32, x4), store8(ae + 40, x5), store8(ae + 48, x6), store8(ae + 56, x7);
  }
  for (; e < npes; ++e) {
    uint32_t* ae = a + e * 16;
    __m256 x0 = load8(ae), x1 = load8(ae + 8);
    for (size_t t = 0; t < n; ++t) {
      const uint32_t* fb = it[t].fb + e * 16;
      if (!it[t].sel) {
        x0 = mac8(x0, fb, load8(it[t].cf));
        x1 = mac8(x1, fb + 8, load8(it[t].cf + 8));
        continue;
      }
      const uint32_t* c = it[t].sel[e] ? it[t].cf_on : it[t].cf;
      x0 = mac8_two(x0, fb, c);
      x1 = mac8_two(x1, fb + 8, c + 8);
    }
    store8(ae, x0), store8(ae + 8, x1);
  }
}

GPNPU_AVX2 void dq4_mla_f32_bcast_avx2(uint32_t* a, const uint32_t* codes, const uint32_t* meta2, uint32_t sel,
                                       const uint32_t* c16, size_t npes) {
  const __m256 c0 = load8(c16), c1 = load8(c16 + 8);
  for (size_t e = 0; e < npes; ++e) {
    const size_t k = e * 16;
    __m256 v0, v1;
    dq4_f32_8x2(codes[k + 2 * sel], codes[k + 2 * sel + 1], _mm256_set1_ps(std::bit_cast<float>(meta2[2 * e + 1])),
                _mm256_set1_ps(std::bit_cast<float>(meta2[2 * e])), v0, v1);
    store8(a + k, _mm256_add_ps(load8(a + k), _mm256_mul_ps(v0, c0)));
    store8(a + k + 8, _mm256_add_ps(load8(a + k + 8), _mm256_mul_ps(v1, c1)));
  }
}

GPNPU_AVX2 void mla_f32_avx2(uint32_t* a, const uint32_t* b, const uint32_t* c, size_t n) {
  size_t k = 0;
  for (; k + 8 <= n; k += 8) store8(a + k, _mm256_add_ps(load8(a + k), _mm256_mul_ps(load8(b + k), load8(c + k))));
  if (k < n) mla_f32_scalar(a + k, b + k, c + k, n - k);
}

GPNPU_AVX2 void mla_f32_bcast_avx2(uint32_t* a, const uint32_t* b, const uint32_t* c16, size_t n) {
  const __m256 c0 = load8(c16), c1 = load8(c16 + 8);
  for (size_t k = 0; k + 16 <= n; k += 16) {
    store8(a + k, _mm256_add_ps(load8(a + k), _mm256_mul_ps(load8(b + k), c0)));
    store8(a + k + 8, _mm256_add_ps(load8(a + k + 8), _mm256_mul_ps(load8(b + k + 8), c1)));
  }
}

// The hardware conversion quiets a signalling NaN; the definition keeps its bits
// (sign, all-ones exponent, the 10 payload bits shifted up), so NaN lanes take those.
GPNPU_AVX2 void cvt_f32_f16_avx2(uint32_t* a, const uint32_t* b, size_t n) {
  size_t k = 0;
  for (; k + 8 <= n; k += 8) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + k));
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(h, _mm256_set1_epi32(0x7fff)), _mm256_set1_epi32(0x7c00));
    const __m256i bits = _mm256_or_si256(_mm256_slli_epi32(_mm256_and_si256(h, _mm256_set1_epi32(0x8000)), 16),
                                         _mm256_or_si256(_mm256_set1_epi32(0x7f800000),
                                                         _mm256_slli_epi32(_mm256_and_si256(h, _mm256_set1_epi32(0x3ff)), 13)));
    store8(a + k, _mm256_blendv_ps(f16_lo_to_f32(b + k), _mm256_castsi256_ps(bits), _mm256_castsi256_ps(nan)));
  }
  if (k < n) cvt_f32_f16_scalar(a + k, b + k, n - k);
}

GPNPU_AVX2 void pack_f16_pes_avx2(uint32_t* out, const uint32_t* lo, const uint32_t* hi, uint32_t e0, uint32_t e1,
                                  const uint8_t* pred, bool saturate, F16Range& r) {
  __m256 vmax = _mm256_setzero_ps();
  for (uint32_t e = e0; e < e1; ++e) {
    if (pred && !pred[e]) continue;
    const size_t k = size_t(e) * 16;
    const __m256 l0 = load8(lo + k), l1 = load8(lo + k + 8), h0 = load8(hi + k), h1 = load8(hi + k + 8);
    const __m256 al0 = abs8(l0), al1 = abs8(l1), ah0 = abs8(h0), ah1 = abs8(h1);
    if (f16_special8(al0) | f16_special8(al1) | f16_special8(ah0) | f16_special8(ah1)) {
      pack_f16_scalar(out + k, lo + k, hi + k, saturate, r, int64_t(e) * 32);
      continue;
    }
    vmax = _mm256_max_ps(vmax, _mm256_max_ps(_mm256_max_ps(al0, al1), _mm256_max_ps(ah0, ah1)));
    // lo's 16 halves in order are words 0..7, hi's words 8..15 (all read before any store).
    const __m128i p0 = _mm256_cvtps_ph(l0, kRne), p1 = _mm256_cvtps_ph(l1, kRne);
    const __m128i p2 = _mm256_cvtps_ph(h0, kRne), p3 = _mm256_cvtps_ph(h1, kRne);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + k), p0);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + k + 4), p1);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + k + 8), p2);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + k + 12), p3);
  }
  const float m = hmax8(vmax);
  if (m > r.max_abs) r.max_abs = m;
}

GPNPU_AVX2 void cvt_f16_f32_avx2(uint32_t* a, const uint32_t* b, size_t k, size_t n, bool saturate, F16Range& r) {
  __m256 vmax = _mm256_setzero_ps();
  size_t j = k;
  for (; j + 16 <= k + n; j += 16) {
    const __m256 v0 = load8(b + j), v1 = load8(b + j + 8), a0 = abs8(v0), a1 = abs8(v1);
    if (f16_special8(a0) | f16_special8(a1)) {
      if ((_mm256_movemask_ps(_mm256_cmp_ps(v0, v0, _CMP_UNORD_Q)) & _mm256_movemask_ps(_mm256_cmp_ps(v1, v1, _CMP_UNORD_Q))) ==
          0xff) {  // 16 NaNs (what f32_to_f16_tracked makes of them: sign, 0x7e00, the payload's top 9 bits)
        r.nan += 16;
        if (r.first < 0) r.first = int64_t(j), r.first_value = std::bit_cast<float>(b[j]);  // (before a, maybe b, is written)
        for (size_t h = j; h < j + 16; h += 8) {
          const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + h));
          const __m256i f = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(0x8000)),
                                            _mm256_or_si256(_mm256_set1_epi32(0x7e00),
                                                            _mm256_srli_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x7fffff)), 13)));
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(a + h), f);
        }
        continue;
      }
      cvt_f16_f32_scalar(a, b, j, 16, saturate, r);
      continue;
    }
    vmax = _mm256_max_ps(vmax, _mm256_max_ps(a0, a1));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(a + j), _mm256_cvtepu16_epi32(_mm256_cvtps_ph(v0, kRne)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(a + j + 8), _mm256_cvtepu16_epi32(_mm256_cvtps_ph(v1, kRne)));
  }
  if (j < k + n) cvt_f16_f32_scalar(a, b, j, k + n - j, saturate, r);
  const float m = hmax8(vmax);
  if (m > r.max_abs) r.max_abs = m;
}

GPNPU_AVX2 void dequant4_pes_avx2(uint32_t* out, const uint32_t* codes, const uint32_t* meta, uint32_t e0, uint32_t e1,
                                  const uint8_t* pred, uint32_t sel, bool f16) {
  for (uint32_t e = e0; e < e1; ++e) {
    if (pred && !pred[e]) continue;
    const size_t k = size_t(e) * 16;
    const float scale = std::bit_cast<float>(meta[k]), zero = std::bit_cast<float>(meta[k + 1]);
    // Lanes 0..7 read word 2 * sel at nibble l, lanes 8..15 word 2 * sel + 1 (out may alias codes).
    __m256 v0, v1;
    dq4_f32_8x2(codes[k + 2 * sel], codes[k + 2 * sel + 1], _mm256_set1_ps(zero), _mm256_set1_ps(scale), v0, v1);
    if (!f16) {
      store8(out + k, v0);
      store8(out + k + 8, v1);
      continue;
    }
    // NaN payloads are the one place the hardware conversion may differ: the scalar path.
    if (_mm256_movemask_ps(_mm256_or_ps(_mm256_cmp_ps(v0, v0, _CMP_UNORD_Q), _mm256_cmp_ps(v1, v1, _CMP_UNORD_Q)))) {
      dequant4_scalar(out + k, codes + k, scale, zero, sel, f16);
      continue;
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + k), _mm256_cvtepu16_epi32(_mm256_cvtps_ph(v0, kRne)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + k + 8), _mm256_cvtepu16_epi32(_mm256_cvtps_ph(v1, kRne)));
  }
}
#endif

}  // namespace

bool have_avx512() {
#if defined(__x86_64__)
  static const bool ok = __builtin_cpu_supports("avx512f");
  return ok;
#else
  return false;
#endif
}

bool have_avx2() {
#if defined(__x86_64__)
  static const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
  return ok;
#else
  return false;
#endif
}

void mac_f16_scalar(uint32_t* a, const uint32_t* b, const uint32_t* c, size_t n) {
  const float* t = f16_table();
  for (size_t k = 0; k < n; ++k) {
    float prod = t[b[k] & 0xffff] * t[c[k] & 0xffff];  // exact in fp32
    a[k] = std::bit_cast<uint32_t>(std::bit_cast<float>(a[k]) + prod);
  }
}

void mac_f16_bcast_scalar(uint32_t* a, const uint32_t* b, const uint32_t* c16, size_t n) {
  const float* t = f16_table();
  for (size_t k = 0; k < n; ++k) {
    float prod = t[b[k] & 0xffff] * t[c16[k % 16] & 0xffff];
    a[k] = std::bit_cast<uint32_t>(std::bit_cast<float>(a[k]) + prod);
  }
}

void mac_f16_cvt_scalar(uint32_t* a, const uint32_t* fb, const uint32_t* c, size_t n) {
  const float* t = f16_table();
  for (size_t k = 0; k < n; ++k) {
    float prod = std::bit_cast<float>(fb[k]) * t[c[k] & 0xffff];
    a[k] = std::bit_cast<uint32_t>(std::bit_cast<float>(a[k]) + prod);
  }
}

void mac_f16_cvt_bcast_scalar(uint32_t* a, const uint32_t* fb, const uint32_t* c16, size_t n) {
  const float* t = f16_table();
  for (size_t k = 0; k < n; ++k) {
    float prod = std::bit_cast<float>(fb[k]) * t[c16[k % 16] & 0xffff];
    a[k] = std::bit_cast<uint32_t>(std::bit_cast<float>(a[k]) + prod);
  }
}

void mac_f16_cvt_bcast2_scalar(uint32_t* a, const uint32_t* fb, const uint32_t* c16, const uint32_t* c16_on,
                               const uint8_t* sel, size_t npes) {
  for (size_t e = 0; e < npes; ++e) mac_f16_cvt_bcast_scalar(a + e * 16, fb + e * 16, sel[e] ? c16_on : c16, 16);
}

void mac_f16_cvt_chain_scalar(uint32_t* a, const MacItem* it, size_t n, size_t e0, size_t e1) {
  for (size_t t = 0; t < n; ++t)
    for (size_t e = e0; e < e1; ++e) {
      const uint32_t* c = it[t].sel && it[t].sel[e] ? it[t].cf_on : it[t].cf;
      for (size_t l = 0; l < 16; ++l) {
        float prod = std::bit_cast<float>(it[t].fb[e * 16 + l]) * std::bit_cast<float>(c[l]);
        a[e * 16 + l] = std::bit_cast<uint32_t>(std::bit_cast<float>(a[e * 16 + l]) + prod);
      }
    }
}

void mla_f32_scalar(uint32_t* a, const uint32_t* b, const uint32_t* c, size_t n) {
  for (size_t k = 0; k < n; ++k) {
    float prod = std::bit_cast<float>(b[k]) * std::bit_cast<float>(c[k]);
    a[k] = std::bit_cast<uint32_t>(std::bit_cast<float>(a[k]) + prod);
  }
}

void mla_f32_bcast_scalar(uint32_t* a, const uint32_t* b, const uint32_t* c16, size_t n) {
  for (size_t k = 0; k < n; ++k) {
    float prod = std::bit_cast<float>(b[k]) * std::bit_cast<float>(c16[k % 16]);
    a[k] = std::bit_cast<uint32_t>(std::bit_cast<float>(a[k]) + prod);
  }
}

void cvt_f32_f16_scalar(uint32_t* a, const uint32_t* b, size_t n) {
  const float* t = f16_table();
  for (size_t k = 0; k < n; ++k) a[k] = std::bit_cast<uint32_t>(t[b[k] & 0xffff]);
}

namespace {
// The scalar bodies' fast test, on bit patterns (so it vectorises without AVX-512): the
// largest |x| bits of n values folded into m, and whether any needs the tracked path:
// |x| >= 65520, inf or NaN (0x477ff000 is 65520.0f), or a normal |x| <= 2^-25 (0x33000000).
inline bool needs_tracking(const uint32_t* x, size_t n, uint32_t& m) {
  uint32_t special = 0;
  for (size_t k = 0; k < n; ++k) {
    const uint32_t a = x[k] & 0x7fffffffu;
    m = a > m ? a : m;
    special |= uint32_t(a >= 0x477ff000u) | uint32_t(a - 0x00800000u <= 0x33000000u - 0x00800000u);
  }
  return special != 0;
}
}  // namespace

void pack_f16_scalar(uint32_t* out, const uint32_t* lo, const uint32_t* hi, bool saturate, F16Range& r, int64_t idx0) {
  uint32_t tmp[16], m = 0;
  if (!(needs_tracking(lo, 16, m) | needs_tracking(hi, 16, m))) {  // the common case: the plain definition
    for (int l = 0; l < 16; ++l) {
      const uint32_t* src = l < 8 ? lo + 2 * l : hi + 2 * (l - 8);
      tmp[l] = uint32_t(f32_to_f16(std::bit_cast<float>(src[0]))) | uint32_t(f32_to_f16(std::bit_cast<float>(src[1]))) << 16;
    }
    r.max_abs = std::max(r.max_abs, std::bit_cast<float>(m));
  } else {
    for (int l = 0; l < 16; ++l) {
      const uint32_t* src = l < 8 ? lo + 2 * l : hi + 2 * (l - 8);
      tmp[l] = uint32_t(f32_to_f16_tracked(std::bit_cast<float>(src[0]), saturate, r, idx0 + 2 * l)) |
               uint32_t(f32_to_f16_tracked(std::bit_cast<float>(src[1]), saturate, r, idx0 + 2 * l + 1)) << 16;
    }
  }
  for (int l = 0; l < 16; ++l) out[l] = tmp[l];  // out may alias lo or hi
}

void cvt_f16_f32_scalar(uint32_t* a, const uint32_t* b, size_t k, size_t n, bool saturate, F16Range& r) {
  for (size_t j0 = k; j0 < k + n; j0 += 16) {
    const size_t j1 = std::min(k + n, j0 + 16);
    uint32_t m = 0;
    if (!needs_tracking(b + j0, j1 - j0, m)) {
      for (size_t j = j0; j < j1; ++j) a[j] = f32_to_f16(std::bit_cast<float>(b[j]));
      r.max_abs = std::max(r.max_abs, std::bit_cast<float>(m));
    } else {
      for (size_t j = j0; j < j1; ++j) a[j] = f32_to_f16_tracked(std::bit_cast<float>(b[j]), saturate, r, int64_t(j));
    }
  }
}

void dequant4_scalar(uint32_t* out, const uint32_t* codes, float scale, float zero, uint32_t sel, bool f16) {
  const uint32_t w[2] = {codes[2 * sel], codes[2 * sel + 1]};  // out may alias codes
  for (uint32_t l = 0; l < 16; ++l) {
    float q = float((w[l / 8] >> (4 * (l % 8))) & 0xf);
    float v = (q - zero) * scale;
    out[l] = f16 ? uint32_t(f32_to_f16(v)) : std::bit_cast<uint32_t>(v);
  }
}

void mac_f16(uint32_t* a, const uint32_t* b, const uint32_t* c, size_t n) {
#if defined(__x86_64__)
  if (have_avx512()) return mac_f16_avx512(a, b, c, n);
  if (have_avx2()) return mac_f16_avx2(a, b, c, n);
#endif
  mac_f16_scalar(a, b, c, n);
}

void mac_f16_bcast(uint32_t* a, const uint32_t* b, const uint32_t* c16, size_t n) {
#if defined(__x86_64__)
  if (have_avx512()) return mac_f16_bcast_avx512(a, b, c16, n);
  if (have_avx2()) return mac_f16_bcast_avx2(a, b, c16, n);
#endif
  mac_f16_bcast_scalar(a, b, c16, n);
}

void mac_f16_operand(uint32_t* fb, const uint32_t* b, size_t n) {
#if defined(__x86_64__)
  if (have_avx512()) return mac_f16_operand_avx512(fb, b, n);
  if (have_avx2()) return mac_f16_operand_avx2(fb, b, n);
#endif
  cvt_f32_f16_scalar(fb, b, n);
}

void mac_f16_cvt(uint32_t* a, const uint32_t* fb, const uint32_t* c, size_t n) {
#if defined(__x86_64__)
  if (have_avx512()) return mac_f16_cvt_avx512(a, fb, c, n);
  if (have_avx2()) return mac_f16_cvt_avx2(a, fb, c, n);
#endif
  mac_f16_cvt_scalar(a, fb, c, n);
}

void mac_f16_cvt_bcast(uint32_t* a, const uint32_t* fb, const uint32_t* c16, size_t n) {
#if defined(__x86_64__)
  if (have_avx2()) return mac_f16_cvt_bcast_avx2(a, fb, c16, n);
#endif
  mac_f16_cvt_bcast_scalar(a, fb, c16, n);
}

void mac_f16_cvt_bcast2(uint32_t* a, const uint32_t* fb, const uint32_t* c16, const uint32_t* c16_on, const uint8_t* sel,
                        size_t npes) {
#if defined(__x86_64__)
  if (have_avx2()) return mac_f16_cvt_bcast2_avx2(a, fb, c16, c16_on, sel, npes);
#endif
  mac_f16_cvt_bcast2_scalar(a, fb, c16, c16_on, sel, npes);
}

bool mac_f16_cvt_chain_body(int body, uint32_t* a, const MacItem* items, size_t n, size_t e0, size_t e1) {
#if defined(__x86_64__)
  if (body == 2 && have_avx512()) return mac_f16_cvt_chain_avx512(a, items, n, e0, e1), true;
  if (body == 1 && have_avx2()) return mac_f16_cvt_chain_avx2(a, items, n, e0, e1), true;
#endif
  return false;
}

void mac_f16_cvt_chain_rows(uint32_t* const* a, const MacItem* const* it, size_t n, size_t e0, size_t e1) {
#if defined(__x86_64__)
  if (have_avx512()) return mac_f16_cvt_chain_rows_avx512(a, it, n, e0, e1);
#endif
  for (int r = 0; r < kChainRows; ++r) mac_f16_cvt_chain(a[r], it[r], n, e0, e1);
}

void mac_f16_cvt_chain(uint32_t* a, const MacItem* items, size_t n, size_t e0, size_t e1) {
#if defined(__x86_64__)
  if (have_avx512()) return mac_f16_cvt_chain_avx512(a, items, n, e0, e1);
  if (have_avx2()) return mac_f16_cvt_chain_avx2(a, items, n, e0, e1);
#endif
  mac_f16_cvt_chain_scalar(a, items, n, e0, e1);
}

void dq4_mla_f32_bcast(uint32_t* a, const uint32_t* codes, const uint32_t* meta2, uint32_t sel, const uint32_t* c16,
                       size_t npes) {
#if defined(__x86_64__)
  if (have_avx512()) return dq4_mla_f32_bcast_avx512(a, codes, meta2, sel, c16, npes);
  if (have_avx2()) return dq4_mla_f32_bcast_avx2(a, codes, meta2, sel, c16, npes);
#endif
  dq4_mla_f32_bcast_scalar(a, codes, meta2, sel, c16, npes);
}

void dq4_mla_f32_bcast_scalar(uint32_t* a, const uint32_t* codes, const uint32_t* meta2, uint32_t sel, const uint32_t* c16,
                              size_t npes) {
  for (size_t e = 0; e < npes; ++e) {
    uint32_t dq[16];
    dequant4_scalar(dq, codes + e * 16, std::bit_cast<float>(meta2[2 * e]), std::bit_cast<float>(meta2[2 * e + 1]), sel, false);
    mla_f32_bcast_scalar(a + e * 16, dq, c16, 16);
  }
}

void mla_f32(uint32_t* a, const uint32_t* b, const uint32_t* c, size_t n) {
#if defined(__x86_64__)
  if (have_avx512()) return mla_f32_avx512(a, b, c, n);
  if (have_avx2()) return mla_f32_avx2(a, b, c, n);
#endif
  mla_f32_scalar(a, b, c, n);
}

void mla_f32_bcast(uint32_t* a, const uint32_t* b, const uint32_t* c16, size_t n) {
#if defined(__x86_64__)
  if (have_avx2()) return mla_f32_bcast_avx2(a, b, c16, n);  // AVX-512 CPUs have AVX2 too
#endif
  mla_f32_bcast_scalar(a, b, c16, n);
}

void cvt_f32_f16(uint32_t* a, const uint32_t* b, size_t n) {
#if defined(__x86_64__)
  if (have_avx512()) return cvt_f32_f16_avx512(a, b, n);
  if (have_avx2()) return cvt_f32_f16_avx2(a, b, n);
#endif
  cvt_f32_f16_scalar(a, b, n);
}

void pack_f16_pes(uint32_t* out, const uint32_t* lo, const uint32_t* hi, uint32_t e0, uint32_t e1, const uint8_t* pred,
                  bool saturate, F16Range& r) {
#if defined(__x86_64__)
  if (have_avx512()) return pack_f16_pes_avx512(out, lo, hi, e0, e1, pred, saturate, r);
  if (have_avx2()) return pack_f16_pes_avx2(out, lo, hi, e0, e1, pred, saturate, r);
#endif
  for (uint32_t e = e0; e < e1; ++e)
    if (!pred || pred[e]) pack_f16_scalar(out + size_t(e) * 16, lo + size_t(e) * 16, hi + size_t(e) * 16, saturate, r, int64_t(e) * 32);
}

void cvt_f16_f32(uint32_t* a, const uint32_t* b, size_t k, size_t n, bool saturate, F16Range& r) {
#if defined(__x86_64__)
  if (have_avx512()) return cvt_f16_f32_avx512(a, b, k, n, saturate, r);
  if (have_avx2()) return cvt_f16_f32_avx2(a, b, k, n, saturate, r);
#endif
  cvt_f16_f32_scalar(a, b, k, n, saturate, r);
}

void dequant4_pes(uint32_t* out, const uint32_t* codes, const uint32_t* meta, uint32_t e0, uint32_t e1,
                  const uint8_t* pred, uint32_t sel, bool f16) {
#if defined(__x86_64__)
  if (have_avx512()) return dequant4_pes_avx512(out, codes, meta, e0, e1, pred, sel, f16);
  if (have_avx2()) return dequant4_pes_avx2(out, codes, meta, e0, e1, pred, sel, f16);
#endif
  for (uint32_t e = e0; e < e1; ++e) {
    if (pred && !pred[e]) continue;
    const size_t k = size_t(e) * 16;
    dequant4_scalar(out + k, codes + k, std::bit_cast<float>(meta[k]), std::bit_cast<float>(meta[k + 1]), sel, f16);
  }
}

}  // namespace gpnpu::isa::lanes
