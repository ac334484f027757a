// Vectorised inner loops of the hottest array instructions (vmac.f16, vdq4.*): the same
// results bit for bit as the scalar definitions in sem_array.cpp, only faster. Each
// function picks, once per process, an AVX-512 body when the CPU has AVX-512F (F16C
// conversions round to nearest even exactly like isa/fp16.h) and the scalar body
// otherwise; tests/isa/test_lanes_simd.cpp checks the two against each other.
#pragma once
#include <cstddef>
#include <cstdint>

namespace gpnpu::isa::lanes {

// a[k] += f16(b[k]) * f16(c[k]) in fp32 for k < n (b, c: fp16 in the low 16 bits;
// the product is exact in fp32, so fused and unfused evaluation agree).
void mac_f16(uint32_t* a, const uint32_t* b, const uint32_t* c, size_t n);

// One PE's 16 lanes of vdq4: out[l] = (code(sel * 16 + l) - zero) * scale, codes the
// 128 nibbles of `codes` (8 per word, low nibble first); as fp16 bits when f16.
void dequant4(uint32_t* out, const uint32_t* codes, float scale, float zero, uint32_t sel, bool f16);

// Scalar bodies (the definitions), also used when the CPU lacks AVX-512.
void mac_f16_scalar(uint32_t* a, const uint32_t* b, const uint32_t* c, size_t n);
void dequant4_scalar(uint32_t* out, const uint32_t* codes, float scale, float zero, uint32_t sel, bool f16);
bool have_avx512();

}  // namespace gpnpu::isa::lanes
