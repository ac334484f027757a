// The host reference chain's matrix product (model/reference/ops.cpp, ops::linear): the
// work of the describe's gates beside the simulator (issue 16, acceptance 1).
//   BM_ChainLinear/M/K/N: y[M][N] = x[M][K] W[N][K]^T on one thread, fp32 weights held
//     in memory (the chain dequantises each weight block once per call; M rows reuse it).
//     128 x 2048 x 6144: a prefill gate|up projection; 1 x 2048 x 6144: a decode one.
//   BM_ChainLinearW4/M/K/N/isa: the same from W4A16 codes (random), as the chain reads
//     the 2B bundle: isa 0 through the loader (each weight block dequantised into memory
//     first), 1 / 2 reading the codes in registers (ops::Matrix::w4) with AVX2 / AVX-512
//     (the label says which ran). Same bits either way.
// Figures and the command are in docs/performance.md.
#include <benchmark/benchmark.h>

#include <vector>

#include <random>

#include "model/checkpoint/quant.h"
#include "model/reference/ops.h"

namespace {

void BM_ChainLinear(benchmark::State& state) {
  const int64_t M = state.range(0), K = state.range(1), N = state.range(2);
  std::vector<float> x(size_t(M * K)), w(size_t(N * K)), y(size_t(M * N));
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(int(i * 2654435761u % 2001) - 1000) * 1e-3f;
  for (size_t i = 0; i < w.size(); ++i) w[i] = float(int(i * 40503u % 1999) - 999) * 1e-3f;
  const auto W = gpnpu::model::ops::Matrix::dense("w", N, K, w.data());
  for (auto _ : state) {
    gpnpu::model::ops::linear(x, W, {}, y, 1);
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GMAC/s"] =
      benchmark::Counter(double(M * K * N) * double(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
}

void BM_ChainLinearW4(benchmark::State& state) {
  using namespace gpnpu::model;
  const int64_t M = state.range(0), K = state.range(1), N = state.range(2);
  QuantTensor q;
  q.rows = N;
  q.cols = K;
  std::mt19937 g(1);
  q.codes.resize(size_t(N * q.row_stride()));
  for (auto& c : q.codes) c = uint8_t(g());
  q.scales.assign(size_t(N * q.nblocks()), 0x2000);  // 2^-7
  q.zeros.resize(q.scales.size());
  for (auto& z : q.zeros) z = uint8_t(g() % 16);
  std::vector<float> x(size_t(M * K)), y(size_t(M * N));
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(int(i * 2654435761u % 2001) - 1000) * 1e-3f;
  ops::Matrix W;
  W.name = "w4";
  W.rows = N;
  W.cols = K;
  W.load = [&](int64_t r0, int64_t n, float* dst) {
    for (int64_t r = 0; r < n; ++r) dequantise_row(q, r0 + r, dst + r * K);
  };
  if (state.range(3)) W.w4 = {q.codes.data(), q.scales.data(), q.zeros.data(), q.row_stride(), q.nblocks(), kQuantBlock};
  const int prev = ops::limit_w4_isa(int(state.range(3)));
  state.SetLabel(ops::linear_path(W, M));
  for (auto _ : state) {
    ops::linear(x, W, {}, y, 1);
    benchmark::DoNotOptimize(y.data());
  }
  ops::limit_w4_isa(prev);
  state.counters["GMAC/s"] =
      benchmark::Counter(double(M * K * N) * double(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
}

}  // namespace

BENCHMARK(BM_ChainLinearW4)->Args({1, 2048, 6144, 0})->Args({1, 2048, 6144, 1})->Args({1, 2048, 6144, 2})
    ->Args({1, 6144, 2048, 2})
    ->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_ChainLinear)->Args({128, 2048, 6144})->Args({1, 2048, 6144})->Unit(benchmark::kMillisecond)->UseRealTime();
