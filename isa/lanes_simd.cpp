// Vectorised lane loops (contract in lanes_simd.h).
#include "isa/lanes_simd.h"

#include <immintrin.h>

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

__attribute__((target("avx512f"))) void dequant4_avx512(uint32_t* out, const uint32_t* codes, float scale, float zero,
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

void mac_f16_scalar(uint32_t* a, const uint32_t* b, const uint32_t* c, size_t n) {
  const float* t = f16_table();
  for (size_t k = 0; k < n; ++k) {
    float prod = t[b[k] & 0xffff] * t[c[k] & 0xffff];  // exact in fp32
    a[k] = std::bit_cast<uint32_t>(std::bit_cast<float>(a[k]) + prod);
  }
}

void dequant4_scalar(uint32_t* out, const uint32_t* codes, float scale, float zero, uint32_t sel, bool f16) {
  for (uint32_t l = 0; l < 16; ++l) {
    uint32_t code = sel * 16 + l;
    float q = float((codes[code / 8] >> (4 * (code % 8))) & 0xf);
    float w = (q - zero) * scale;
    out[l] = f16 ? uint32_t(f32_to_f16(w)) : std::bit_cast<uint32_t>(w);
  }
}

void mac_f16(uint32_t* a, const uint32_t* b, const uint32_t* c, size_t n) {
#if defined(__x86_64__)
  if (have_avx512()) return mac_f16_avx512(a, b, c, n);
#endif
  mac_f16_scalar(a, b, c, n);
}

void dequant4(uint32_t* out, const uint32_t* codes, float scale, float zero, uint32_t sel, bool f16) {
#if defined(__x86_64__)
  if (have_avx512()) return dequant4_avx512(out, codes, scale, zero, sel, f16);
#endif
  dequant4_scalar(out, codes, scale, zero, sel, f16);
}

}  // namespace gpnpu::isa::lanes
