// The host reference chain's matrix product (model/reference/ops.cpp, ops::linear): the
// work of the describe's gates beside the simulator (issue 16, acceptance 1).
//   BM_ChainLinear/M/K/N: y[M][N] = x[M][K] W[N][K]^T on one thread, fp32 weights held
//     in memory (the chain dequantises each weight block once per call; M rows reuse it).
//     128 x 2048 x 6144: a prefill gate|up projection; 1 x 2048 x 6144: a decode one.
// Figures and the command are in docs/performance.md.
#include <benchmark/benchmark.h>

#include <vector>

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

}  // namespace

BENCHMARK(BM_ChainLinear)->Args({128, 2048, 6144})->Args({1, 2048, 6144})->Unit(benchmark::kMillisecond)->UseRealTime();
