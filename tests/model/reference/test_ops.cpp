// The chain's ops, one by one, against their formulas (docs/testing.md model-test item 3): each op is
// compared with an independent double-precision evaluation of the formula of
// docs/model.md on several shapes, including widths that are not multiples of 16 or 128.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>

#include "isa/error.h"
#include "isa/fp16.h"
#include "model/checkpoint/quant.h"
#include "model/reference/ops.h"

namespace gpnpu::model::ops {
namespace {

std::vector<float> randn(size_t n, uint32_t seed, float stddev = 1.0f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, stddev);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

uint32_t bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

// Bitwise equality of two float vectors (determinism checks).
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

TEST(Ops, DotMatchesDoubleSumForOddLengths) {
  for (int n : {1, 7, 15, 16, 17, 100, 128, 129, 1000}) {
    auto a = randn(size_t(n), 1 + n), b = randn(size_t(n), 2 + n);
    double ref = 0, mag = 0;
    for (int i = 0; i < n; ++i) ref += double(a[i]) * b[i], mag += std::fabs(double(a[i]) * b[i]);
    EXPECT_NEAR(dot(a.data(), b.data(), n), ref, 1e-6 * mag + 1e-12) << "n=" << n;
  }
}

TEST(Ops, LinearMatchesFormulaOnOddShapes) {
  struct S { int M, K, N; bool bias; };
  for (S s : {S{1, 1, 1, false}, S{3, 15, 5, true}, S{5, 16, 33, true}, S{9, 33, 65, false},
              S{4, 130, 70, true}, S{7, 257, 3, true}}) {
    auto x = randn(size_t(s.M) * s.K, 10 + s.K), w = randn(size_t(s.N) * s.K, 20 + s.N);
    auto b = s.bias ? randn(size_t(s.N), 30) : std::vector<float>{};
    Matrix W = Matrix::dense("w", s.N, s.K, w.data());
    std::vector<float> y(size_t(s.M) * s.N);
    linear(x, W, b, y);
    for (int m = 0; m < s.M; ++m)
      for (int o = 0; o < s.N; ++o) {
        double ref = s.bias ? b[size_t(o)] : 0.0, mag = std::fabs(ref);
        for (int k = 0; k < s.K; ++k) {
          double t = double(x[size_t(m) * s.K + k]) * w[size_t(o) * s.K + k];
          ref += t, mag += std::fabs(t);
        }
        ASSERT_NEAR(y[size_t(m) * s.N + o], ref, 1e-6 * mag + 1e-9)
            << "M=" << s.M << " K=" << s.K << " N=" << s.N << " m=" << m << " o=" << o;
        // Every output is exactly the shared dot order plus the bias, whatever its tile.
        float d = dot(x.data() + size_t(m) * s.K, w.data() + size_t(o) * s.K, s.K);
        if (s.bias) d += b[size_t(o)];
        ASSERT_EQ(bits(y[size_t(m) * s.N + o]), bits(d));
      }
  }
}

TEST(Ops, LinearIsIndependentOfThreadsAndWeightStorage) {
  const int M = 6, K = 200, N = 77;
  auto x = randn(M * K, 3), w = randn(N * K, 4), b = randn(N, 5);
  Matrix dense = Matrix::dense("w", N, K, w.data());
  Matrix loaded;
  loaded.name = "w_loaded";
  loaded.rows = N;
  loaded.cols = K;
  loaded.load = [&](int64_t r0, int64_t n, float* dst) {
    std::copy_n(w.data() + r0 * K, n * K, dst);
  };
  std::vector<float> y1(M * N), y3(M * N), yl(M * N);
  linear(x, dense, b, y1, 1);
  linear(x, dense, b, y3, 3);
  linear(x, loaded, b, yl, 2);
  EXPECT_TRUE(same_bits(y1, y3));
  EXPECT_TRUE(same_bits(y1, yl));
  // Shape errors are reported, not silently truncated.
  std::vector<float> bad(M * N - 1);
  EXPECT_THROW(linear(x, dense, b, bad), gpnpu::Error);
}

// W4A16 codes read directly (decode): every output must keep the bits of the loader's
// path, whose definition is dequantise_row() (model/checkpoint/quant.h) followed by dot().
// Random codes, zeros and scales (normal and subnormal fp16), widths with a partial last
// quantisation block, 1 to 7 activation rows, odd weight rows, 1 and 3 threads, each
// instruction set this CPU has. The order is also evaluated here lane by lane (16 sums,
// lane = k mod 16, the halving tree); negative control: the same with each product fused
// into its add (std::fma, one rounding fewer) changes some outputs' bits.
TEST(Ops, LinearReadsW4CodesWithTheLoadersBits) {
  std::mt19937 g(7);
  int isas_run = 0;
  bool control_differs = false;
  for (int K : {16, 128, 144, 400, 2048}) {
    QuantTensor q;
    q.rows = 37;
    q.cols = K;
    q.codes.resize(size_t(q.rows * q.row_stride()));
    for (auto& c : q.codes) c = uint8_t(g());
    q.scales.resize(size_t(q.rows * q.nblocks()));
    q.zeros.resize(q.scales.size());
    for (size_t i = 0; i < q.scales.size(); ++i) {
      // Mostly normal scales around 2^-6, some subnormal (exponent 0), one of each sign.
      const uint16_t mant = uint16_t(g() & 0x3ff), sign = uint16_t((g() & 1) << 15);
      q.scales[i] = uint16_t(sign | (i % 7 == 3 ? mant : uint16_t((9 + g() % 4) << 10) | mant));
      q.zeros[i] = uint8_t(g() % 16);
    }
    Matrix loaded;
    loaded.name = "w4";
    loaded.rows = q.rows;
    loaded.cols = K;
    loaded.load = [&](int64_t r0, int64_t n, float* dst) {
      for (int64_t r = 0; r < n; ++r) dequantise_row(q, r0 + r, dst + r * K);
    };
    Matrix direct = loaded;
    direct.w4 = {q.codes.data(), q.scales.data(), q.zeros.data(), q.row_stride(), q.nblocks(), kQuantBlock};
    std::vector<float> wf = dequantise(q);
    // The lane order by hand, plain or with fused multiply-adds (the control).
    auto lanes = [&](const float* xr, const float* wr, bool fused) {
      float t[16] = {};
      for (int k = 0; k < K; ++k) t[k % 16] = fused ? std::fma(xr[k], wr[k], t[k % 16]) : t[k % 16] + xr[k] * wr[k];
      for (int h = 8; h >= 1; h /= 2)
        for (int l = 0; l < h; ++l) t[l] += t[l + h];
      return t[0];
    };
    for (int M = 1; M < 8; ++M) {
      auto x = randn(size_t(M) * K, uint32_t(100 + M + K)), b = randn(size_t(q.rows), 9);
      std::vector<float> yl(size_t(M) * q.rows), yd(yl.size());
      ASSERT_STREQ(linear_path(loaded, M), "load");
      linear(x, loaded, b, yl, 1);
      for (int m = 0; m < M; ++m)
        for (int o = 0; o < q.rows; ++o) {
          const float* xr = x.data() + size_t(m) * K;
          const float* wr = wf.data() + size_t(o) * K;
          const float got = yl[size_t(m) * q.rows + o];
          ASSERT_EQ(bits(got), bits(dot(xr, wr, K) + b[size_t(o)])) << "K=" << K << " M=" << M;
          ASSERT_EQ(bits(got), bits(lanes(xr, wr, false) + b[size_t(o)])) << "K=" << K << " M=" << M;
          control_differs = control_differs || bits(got) != bits(lanes(xr, wr, true) + b[size_t(o)]);
        }
      for (int isa : {2, 1}) {
        const int prev = limit_w4_isa(isa);
        const std::string path = linear_path(direct, M);
        if (path != "load") {
          isas_run += M == 1 && K == 2048;
          // (the level asked for, or the CPU's best below it: AVX-512 machines run both)
          const bool avx512 = isa == 2 && __builtin_cpu_supports("avx512f");
          EXPECT_EQ(path, avx512 ? "w4-avx512" : "w4-avx2");
          for (int th : {1, 3}) {
            std::fill(yd.begin(), yd.end(), 0.0f);
            linear(x, direct, b, yd, th);
            EXPECT_TRUE(same_bits(yl, yd)) << path << " K=" << K << " M=" << M << " threads=" << th;
          }
        }
        limit_w4_isa(prev);
      }
      EXPECT_STREQ(linear_path(direct, 8), "load");  // many rows: dequantised once per block
    }
  }
  EXPECT_TRUE(control_differs) << "fused multiply-adds gave the same bits everywhere: the comparison cannot see one rounding";
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx2")) {
    EXPECT_GE(isas_run, 1) << "no direct path ran on an AVX2 machine";
  }
#endif
  // Without AVX2 there is no direct path: the loader's path and the lane order were still checked.
  if (isas_run == 0) std::printf("no AVX2 here: only the loader's path was checked\n");
}

TEST(Ops, RmsnormRowsMatchesFormula) {
  for (int dim : {1, 7, 64, 130}) {
    const int rows = 3;
    auto x = randn(size_t(rows) * dim, 7 + dim, 3.0f), w = randn(size_t(dim), 8);
    std::vector<float> y(x.size());
    rmsnorm_rows(x, y, dim, w, 1e-6f);
    for (int r = 0; r < rows; ++r) {
      double ss = 0;
      for (int i = 0; i < dim; ++i) ss += double(x[r * dim + i]) * x[r * dim + i];
      double inv = 1.0 / std::sqrt(ss / dim + 1e-6);
      for (int i = 0; i < dim; ++i)
        ASSERT_NEAR(y[r * dim + i], w[i] * x[r * dim + i] * inv, 1e-5 * std::fabs(w[i]) + 1e-7);
    }
    // In place gives the same bits.
    std::vector<float> z = x;
    rmsnorm_rows(z, z, dim, w, 1e-6f);
    EXPECT_TRUE(same_bits(y, z));
  }
}

TEST(Ops, RmsnormHeadsNormalisesEachHeadSeparately) {
  const int heads = 3, hd = 24, rows = 2;
  auto x = randn(rows * heads * hd, 9), w = randn(hd, 10);
  for (int i = 0; i < hd; ++i) x[hd + i] *= 100.0f;  // head 1 of row 0 much larger
  std::vector<float> y = x;
  rmsnorm_heads(y, heads, hd, w, 1e-6f);
  for (int r = 0; r < rows; ++r)
    for (int h = 0; h < heads; ++h) {
      const float* xs = x.data() + (r * heads + h) * hd;
      double ss = 0;
      for (int i = 0; i < hd; ++i) ss += double(xs[i]) * xs[i];
      double inv = 1.0 / std::sqrt(ss / hd + 1e-6);
      for (int i = 0; i < hd; ++i)
        ASSERT_NEAR(y[(r * heads + h) * hd + i], w[i] * xs[i] * inv, 1e-5 * std::fabs(w[i]) + 1e-7);
    }
}

TEST(Ops, LayernormMatchesFormula) {
  for (int dim : {5, 64, 129}) {
    const int rows = 4;
    auto x = randn(size_t(rows) * dim, 11 + dim, 2.0f), w = randn(size_t(dim), 12),
         b = randn(size_t(dim), 13);
    for (auto& v : x) v += 5.0f;  // a large mean must be removed
    std::vector<float> y(x.size());
    layernorm_rows(x, y, dim, w, b, 1e-6f);
    for (int r = 0; r < rows; ++r) {
      double mean = 0, var = 0;
      for (int i = 0; i < dim; ++i) mean += x[r * dim + i];
      mean /= dim;
      for (int i = 0; i < dim; ++i) var += (x[r * dim + i] - mean) * (x[r * dim + i] - mean);
      var /= dim;  // biased
      for (int i = 0; i < dim; ++i) {
        double ref = (x[r * dim + i] - mean) / std::sqrt(var + 1e-6) * w[i] + b[i];
        ASSERT_NEAR(y[r * dim + i], ref, 2e-5 * (std::fabs(w[i]) + 1)) << dim << " " << r << " " << i;
      }
    }
  }
}

TEST(Ops, GeluTanhAndErfMatchTheirFormulasAndDiffer) {
  double max_diff = 0;
  for (double z = -6; z <= 6; z += 0.01) {
    double t = 0.5 * z * (1 + std::tanh(std::sqrt(2 / M_PI) * (z + 0.044715 * z * z * z)));
    double e = 0.5 * z * (1 + std::erf(z / std::sqrt(2.0)));
    ASSERT_NEAR(gelu_tanh(float(z)), t, 2e-6 * (1 + std::fabs(t))) << z;
    ASSERT_NEAR(gelu_erf(float(z)), e, 2e-6 * (1 + std::fabs(e))) << z;
    max_diff = std::max(max_diff, std::fabs(double(gelu_tanh(float(z))) - gelu_erf(float(z))));
  }
  // The two GELUs differ by ~1e-4 at most: far above the 2e-6 tolerance, so a swap fails.
  EXPECT_GT(max_diff, 1e-4);
  // PyTorch 1.13 values (F.gelu(approximate='tanh') and F.gelu) at 1.0, -0.5, 3.0.
  EXPECT_NEAR(gelu_tanh(1.0f), 0.8411920070648193f, 1e-6);
  EXPECT_NEAR(gelu_tanh(-0.5f), -0.1542859971523285f, 1e-6);
  EXPECT_NEAR(gelu_tanh(3.0f), 2.9963626861572266f, 1e-6);
  EXPECT_NEAR(gelu_erf(1.0f), 0.8413447141647339f, 1e-6);
  EXPECT_NEAR(gelu_erf(-0.5f), -0.1542687863111496f, 1e-6);
  EXPECT_NEAR(gelu_erf(3.0f), 2.995950222015381f, 1e-6);
  std::vector<float> v{1.0f, -0.5f}, u = v;
  gelu_tanh(std::span<float>(v));
  gelu_erf(std::span<float>(u));
  EXPECT_EQ(v[0], gelu_tanh(1.0f));
  EXPECT_EQ(u[1], gelu_erf(-0.5f));
}

TEST(Ops, SwigluMlpMatchesFormula) {
  const int M = 3, D = 20, F = 37;
  auto x = randn(M * D, 14), wg = randn(F * D, 15, 0.3f), wu = randn(F * D, 16, 0.3f),
       wd = randn(D * F, 17, 0.3f);
  Matrix G = Matrix::dense("gate", F, D, wg.data()), U = Matrix::dense("up", F, D, wu.data()),
         Dn = Matrix::dense("down", D, F, wd.data());
  std::vector<float> y(M * D);
  mlp_swiglu(x, G, U, Dn, y);
  for (int m = 0; m < M; ++m) {
    std::vector<double> h(F);
    for (int f = 0; f < F; ++f) {
      double g = 0, u = 0;
      for (int k = 0; k < D; ++k) g += double(x[m * D + k]) * wg[f * D + k], u += double(x[m * D + k]) * wu[f * D + k];
      h[f] = g / (1 + std::exp(-g)) * u;
    }
    for (int o = 0; o < D; ++o) {
      double ref = 0;
      for (int f = 0; f < F; ++f) ref += h[f] * wd[o * F + f];
      ASSERT_NEAR(y[m * D + o], ref, 1e-4);
    }
  }
}

// Reference rotate-half in double with the given angles.
void ref_rotate(std::vector<double>& x, const std::vector<double>& a) {
  size_t h = x.size() / 2;
  std::vector<double> y(x.size());
  for (size_t d = 0; d < h; ++d) {
    y[d] = x[d] * std::cos(a[d]) - x[d + h] * std::sin(a[d]);
    y[d + h] = x[d + h] * std::cos(a[d]) + x[d] * std::sin(a[d]);
  }
  x = y;
}

TEST(Ops, Rope2dMatchesFormula) {
  for (int hd : {16, 64}) {
    const int heads = 2;
    std::vector<std::array<int, 2>> rq{{0, 0}, {3, 1}, {1, 3}, {27, 40}};
    auto x = randn(rq.size() * heads * hd, 18 + hd);
    std::vector<float> y = x;
    rope_2d(y, heads, hd, rq);
    const int nf = hd / 4;
    for (size_t n = 0; n < rq.size(); ++n)
      for (int h = 0; h < heads; ++h) {
        std::vector<double> a(hd / 2);
        for (int k = 0; k < nf; ++k) {
          double inv = std::pow(10000.0, -2.0 * k / (hd / 2));
          a[k] = rq[n][0] * inv;
          a[nf + k] = rq[n][1] * inv;
        }
        std::vector<double> v(x.begin() + (n * heads + h) * hd, x.begin() + (n * heads + h + 1) * hd);
        ref_rotate(v, a);
        for (int d = 0; d < hd; ++d) ASSERT_NEAR(y[(n * heads + h) * hd + d], v[d], 3e-5) << hd << " " << n;
      }
    // (0, 0) is the identity; swapping r and q changes the result.
    for (int d = 0; d < heads * hd; ++d) EXPECT_EQ(y[d], x[d]);
    std::vector<float> s1 = x, s2 = x;
    std::vector<std::array<int, 2>> a{{3, 1}}, b{{1, 3}};
    rope_2d(std::span<float>(s1).first(heads * hd), heads, hd, a);
    rope_2d(std::span<float>(s2).first(heads * hd), heads, hd, b);
    EXPECT_FALSE(same_bits(s1, s2));
  }
}

TEST(Ops, MropeAxesAreInterleaved) {
  std::vector<int> sec{24, 20, 20};
  auto ax = mrope_axes(sec, 128);
  ASSERT_EQ(ax.size(), 64u);
  int cnt[3] = {0, 0, 0};
  for (int j = 0; j < 64; ++j) cnt[ax[j]]++;
  EXPECT_EQ(cnt[0], 24);
  EXPECT_EQ(cnt[1], 20);
  EXPECT_EQ(cnt[2], 20);
  for (int j = 0; j < 60; ++j) EXPECT_EQ(ax[j], j % 3) << j;  // THW repeated
  for (int j = 60; j < 64; ++j) EXPECT_EQ(ax[j], 0) << j;      // then TTTT
  // A small config: sections [4, 2, 2] over head_dim 16 -> T H W T H W T T.
  std::vector<int> small{4, 2, 2};
  EXPECT_EQ(mrope_axes(small, 16), (std::vector<int>{0, 1, 2, 0, 1, 2, 0, 0}));
  std::vector<int> bad{4, 2, 3};
  EXPECT_THROW(mrope_axes(bad, 16), gpnpu::Error);
}

TEST(Ops, MropeMatchesFormula) {
  const int heads = 3, hd = 32;
  std::vector<int> sec{6, 5, 5};
  std::vector<std::array<int, 3>> pos{{0, 0, 0}, {5, 5, 5}, {4, 7, 9}, {100, 3, 250}};
  auto x = randn(pos.size() * heads * hd, 19);
  std::vector<float> y = x;
  const double theta = 5e6;
  mrope(y, heads, hd, pos, float(theta), sec);
  auto ax = mrope_axes(sec, hd);
  for (size_t n = 0; n < pos.size(); ++n)
    for (int h = 0; h < heads; ++h) {
      std::vector<double> a(hd / 2);
      for (int j = 0; j < hd / 2; ++j) a[j] = pos[n][ax[j]] * std::pow(theta, -2.0 * j / hd);
      std::vector<double> v(x.begin() + (n * heads + h) * hd, x.begin() + (n * heads + h + 1) * hd);
      ref_rotate(v, a);
      for (int d = 0; d < hd; ++d) ASSERT_NEAR(y[(n * heads + h) * hd + d], v[d], 1e-4) << n << " " << d;
    }
  // Text positions (p, p, p) are plain 1-D RoPE, so the axis assignment cannot matter there,
  // while an image position with h != w must differ from the one with h and w swapped.
  std::vector<float> s1(x.begin(), x.begin() + heads * hd), s2 = s1;
  std::vector<std::array<int, 3>> p1{{4, 7, 9}}, p2{{4, 9, 7}};
  mrope(s1, heads, hd, p1, float(theta), sec);
  mrope(s2, heads, hd, p2, float(theta), sec);
  EXPECT_FALSE(same_bits(s1, s2));
}

// Naive attention in double for one query row and head.
std::vector<double> ref_attn(const std::vector<float>& q, const std::vector<float>& k,
                             const std::vector<float>& v, const AttnShape& s, int64_t i, int h,
                             int64_t nvis) {
  int hd = s.head_dim, kvh = h / (s.q_heads / s.kv_heads);
  int64_t qw = int64_t(s.q_heads) * hd, kw = int64_t(s.kv_heads) * hd;
  std::vector<double> sc(nvis);
  double mx = -1e300;
  for (int64_t j = 0; j < nvis; ++j) {
    double d = 0;
    for (int e = 0; e < hd; ++e) d += double(q[i * qw + h * hd + e]) * k[j * kw + kvh * hd + e];
    sc[j] = d * s.scale;
    mx = std::max(mx, sc[j]);
  }
  double sum = 0;
  for (auto& t : sc) sum += (t = std::exp(t - mx));
  std::vector<double> out(hd, 0.0);
  for (int64_t j = 0; j < nvis; ++j)
    for (int e = 0; e < hd; ++e) out[e] += sc[j] / sum * v[j * kw + kvh * hd + e];
  return out;
}

TEST(Ops, AttentionFullAndCausalGqaMatchFormula) {
  for (bool causal : {false, true}) {
    AttnShape s{4, 2, 24, 1.0f / std::sqrt(24.0f), causal, 0};
    const int64_t n = 19;
    auto q = randn(n * 4 * 24, 21, 2.0f), k = randn(n * 2 * 24, 22, 2.0f), v = randn(n * 2 * 24, 23);
    std::vector<float> out(q.size()), out3(q.size());
    attention(q, k, v, out, s, 1);
    attention(q, k, v, out3, s, 3);
    EXPECT_TRUE(same_bits(out, out3));
    for (int64_t i = 0; i < n; ++i)
      for (int h = 0; h < 4; ++h) {
        auto ref = ref_attn(q, k, v, s, i, h, causal ? i + 1 : n);
        for (int e = 0; e < 24; ++e) ASSERT_NEAR(out[(i * 4 + h) * 24 + e], ref[e], 1e-5) << causal << i << h;
      }
    if (causal) {
      // Row 0 sees only key 0: it is exactly v[0] of its kv head.
      for (int h = 0; h < 4; ++h)
        for (int e = 0; e < 24; ++e) EXPECT_EQ(out[h * 24 + e], v[(h / 2) * 24 + e]);
    }
  }
}

TEST(Ops, AttentionDecodeEqualsLastCausalRow) {
  AttnShape s{4, 2, 16, 0.25f, true, 0};
  const int64_t n = 11;
  auto q = randn(n * 64, 24), k = randn(n * 32, 25), v = randn(n * 32, 26);
  std::vector<float> full(q.size());
  attention(q, k, v, full, s, 1);
  AttnShape d = s;
  d.q_offset = n - 1;
  std::vector<float> one(64);
  attention(std::span<const float>(q).subspan((n - 1) * 64), k, v, one, d, 1);
  EXPECT_TRUE(std::equal(one.begin(), one.end(), full.end() - 64));
  // A query offset past the keys is an error, not a read out of bounds.
  d.q_offset = n;
  EXPECT_THROW(attention(std::span<const float>(q).subspan((n - 1) * 64), k, v, one, d), gpnpu::Error);
}

TEST(Ops, AttentionSoftmaxSubtractsTheMax) {
  // Scores near 1e4 overflow exp() unless the max is subtracted.
  AttnShape s{1, 1, 4, 1.0f, false, 0};
  std::vector<float> q{100, 0, 0, 0}, k{100, 0, 0, 0, 99.99f, 0, 0, 0}, v{1, 2, 3, 4, 5, 6, 7, 8};
  std::vector<float> out(4);
  attention(q, k, v, out, s);
  double w0 = 1.0 / (1.0 + std::exp(100.0 * 99.99 - 100.0 * 100.0));
  for (int e = 0; e < 4; ++e) {
    ASSERT_TRUE(std::isfinite(out[e]));
    EXPECT_NEAR(out[e], w0 * v[e] + (1 - w0) * v[4 + e], 1e-4);
  }
}

TEST(Ops, LinspaceReproducesTorch) {
  // torch.linspace(0, 47, 16) and (0, 47, 7) in fp32, as bit patterns (Debian PyTorch 1.13).
  const uint32_t t16[] = {0x0, 0x40488889, 0x40c88889, 0x41166667, 0x41488889, 0x417aaaab,
                          0x41966667, 0x41af7778, 0x41c88888, 0x41e19999, 0x41faaaaa, 0x4209ddde,
                          0x42166666, 0x4222eeef, 0x422f7778, 0x423c0000};
  const uint32_t t7[] = {0x0, 0x40faaaab, 0x417aaaab, 0x41bc0000, 0x41faaaaa, 0x421caaab, 0x423c0000};
  auto a = linspace_f32(0, 47, 16), b = linspace_f32(0, 47, 7);
  // Up to 14 steps torch evaluates the two-sided formula element by element (bit-exact
  // here); longer outputs go through its AVX2 vector path, whose arange() accumulates
  // differently: within 1 ulp.
  for (int i = 0; i < 16; ++i) EXPECT_LE(std::abs(int64_t(bits(a[i])) - int64_t(t16[i])), 1) << i;
  for (int i = 0; i < 7; ++i) EXPECT_EQ(bits(b[i]), t7[i]) << i;
  EXPECT_EQ(linspace_f32(0, 11, 1), std::vector<float>{0.0f});
}

TEST(Ops, MergeWindowOrder) {
  const int gh = 4, gw = 6;
  auto rq = merge_window_order(gh, gw, 2);
  ASSERT_EQ(rq.size(), size_t(gh * gw));
  for (int bh = 0; bh < gh / 2; ++bh)
    for (int bw = 0; bw < gw / 2; ++bw)
      for (int mh = 0; mh < 2; ++mh)
        for (int mw = 0; mw < 2; ++mw) {
          int n = ((bh * (gw / 2) + bw) * 2 + mh) * 2 + mw;
          EXPECT_EQ(rq[n][0], 2 * bh + mh);
          EXPECT_EQ(rq[n][1], 2 * bw + mw);
        }
  EXPECT_THROW(merge_window_order(5, 6, 2), gpnpu::Error);
}

TEST(Ops, PosEmbedBilinearMatchesFormula) {
  const int side = 7, dim = 5;
  auto table = randn(side * side * dim, 27);
  for (auto [gh, gw] : {std::pair{4, 6}, std::pair{2, 2}, std::pair{8, 14}}) {
    std::vector<float> out(size_t(gh) * gw * dim);
    pos_embed_bilinear(table, side, dim, gh, gw, 2, out);
    auto rq = merge_window_order(gh, gw, 2);
    for (size_t n = 0; n < rq.size(); ++n) {
      double hr = double(rq[n][0]) * (side - 1) / (gh - 1), wq = double(rq[n][1]) * (side - 1) / (gw - 1);
      int fr = int(hr), fq = int(wq), cr = std::min(fr + 1, side - 1), cq = std::min(fq + 1, side - 1);
      double dh = hr - fr, dw = wq - fq;
      for (int d = 0; d < dim; ++d) {
        auto E = [&](int r, int c) { return double(table[(r * side + c) * dim + d]); };
        double ref = (1 - dh) * (1 - dw) * E(fr, fq) + (1 - dh) * dw * E(fr, cq) +
                     dh * (1 - dw) * E(cr, fq) + dh * dw * E(cr, cq);
        ASSERT_NEAR(out[n * dim + d], ref, 1e-5) << gh << "x" << gw << " n=" << n;
      }
    }
    // The grid corners are exactly the table corners.
    for (int d = 0; d < dim; ++d) {
      EXPECT_EQ(out[d], table[d]);
      size_t last = size_t(((gh / 2 - 1) * (gw / 2) + gw / 2 - 1) * 4 + 3) * dim;
      EXPECT_EQ(out[last + d], table[(side * side - 1) * dim + d]);
    }
  }
}

TEST(Ops, MergeShuffleKeepsWindowRowsTogether) {
  std::vector<float> x(8 * 3);
  std::iota(x.begin(), x.end(), 0.0f);
  std::vector<float> y(x.size());
  merge_shuffle(x, 3, 2, y);
  // merged token 1 = [patch 4 | patch 5 | patch 6 | patch 7]
  for (int i = 0; i < 12; ++i) EXPECT_EQ(y[12 + i], float(12 + i));
  std::vector<float> bad(6 * 3);
  EXPECT_THROW(merge_shuffle(bad, 3, 2, bad), gpnpu::Error);
}

TEST(Ops, EmbedSpliceDeepstackHead) {
  const int V = 11, D = 6;
  auto E = randn(V * D, 28);
  Matrix M = Matrix::dense("embed", V, D, E.data());
  std::vector<int> ids{3, 10, 0, 3};
  std::vector<float> x(ids.size() * D);
  embed_lookup(M, ids, x);
  for (size_t i = 0; i < ids.size(); ++i)
    for (int d = 0; d < D; ++d) EXPECT_EQ(x[i * D + d], E[ids[i] * D + d]);
  std::vector<int> badids{11};
  std::vector<float> one(D);
  EXPECT_THROW(embed_lookup(M, badids, one), gpnpu::Error);

  std::vector<int> at{1, 2};
  auto src = randn(2 * D, 29);
  std::vector<float> s = x;
  splice_rows(s, D, at, src);
  for (int d = 0; d < D; ++d) {
    EXPECT_EQ(s[d], x[d]);
    EXPECT_EQ(s[D + d], src[d]);
    EXPECT_EQ(s[2 * D + d], src[D + d]);
    EXPECT_EQ(s[3 * D + d], x[3 * D + d]);
  }
  std::vector<float> a = x;
  add_rows_at(a, D, at, src);
  for (int d = 0; d < D; ++d) {
    EXPECT_EQ(a[d], x[d]);
    EXPECT_EQ(a[D + d], x[D + d] + src[d]);
    EXPECT_EQ(a[3 * D + d], x[3 * D + d]);
  }

  std::vector<float> logits(ids.size() * V);
  tied_head(x, M, logits);
  // Row i of x is embedding row ids[i]; by Cauchy-Schwarz its own row scores highest
  // unless another row is longer, so compare with the formula instead.
  for (size_t i = 0; i < ids.size(); ++i)
    for (int v = 0; v < V; ++v) {
      double ref = 0;
      for (int d = 0; d < D; ++d) ref += double(x[i * D + d]) * E[v * D + d];
      EXPECT_NEAR(logits[i * V + v], ref, 1e-5);
    }
  std::vector<float> am{1, 5, 5, 2};
  EXPECT_EQ(argmax(am), 1);
}

TEST(Ops, RoundF16) {
  std::vector<float> v{1.0f + 1.0f / 4096, 65504.0f, 1e-8f, -3.14159f};
  round_f16_inplace(v);
  EXPECT_EQ(v[0], 1.0f);  // below half an fp16 ulp (2^-11)
  EXPECT_EQ(v[1], 65504.0f);
  EXPECT_EQ(v[2], 0.0f);
  EXPECT_EQ(v[3], round_f16(-3.14159f));
  EXPECT_NE(v[3], -3.14159f);
}

}  // namespace
}  // namespace gpnpu::model::ops
