// Shared helpers for kernel tests: random data, running an emitted kernel on
// the platform, and comparing against the chain's ops with an explicit bound.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "isa/fp16.h"
#include "kernels/builder.h"
#include "sim/platform.h"

namespace gpnpu::kernels::test {

inline std::vector<float> random_vector(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

inline std::vector<uint16_t> to_f16(const std::vector<float>& v) {
  std::vector<uint16_t> h(v.size());
  for (size_t i = 0; i < v.size(); ++i) h[i] = f32_to_f16(v[i]);
  return h;
}

inline std::vector<float> from_f16(const std::vector<uint16_t>& h) {
  std::vector<float> v(h.size());
  for (size_t i = 0; i < h.size(); ++i) v[i] = f16_to_f32(h[i]);
  return v;
}

struct Compare {
  double cosine = 0, max_abs = 0, max_ref = 0;
};
inline Compare compare(const std::vector<float>& got, const std::vector<float>& ref) {
  double dot = 0, ng = 0, nr = 0;
  Compare c;
  for (size_t i = 0; i < ref.size(); ++i) {
    dot += double(got[i]) * ref[i];
    ng += double(got[i]) * got[i];
    nr += double(ref[i]) * ref[i];
    c.max_abs = std::max(c.max_abs, std::fabs(double(got[i]) - ref[i]));
    c.max_ref = std::max(c.max_ref, std::fabs(double(ref[i])));
  }
  c.cosine = dot / std::sqrt(ng * nr);
  return c;
}

// Reads n fp16 values at OCM offset `off`.
inline std::vector<float> read_ocm_f16(uint32_t off, size_t n) {
  std::vector<uint16_t> h(n);
  sim::Platform::get().ocm().read(off, h.data(), n * 2);
  return from_f16(h);
}
inline void write_ocm_f16(uint32_t off, const std::vector<float>& v) {
  std::vector<uint16_t> h = to_f16(v);
  sim::Platform::get().ocm().write(off, h.data(), h.size() * 2);
}

}  // namespace gpnpu::kernels::test
