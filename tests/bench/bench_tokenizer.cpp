// Tokenizer load time (issue 16, acceptance 4: every describe and chat loads it before
// it simulates anything).
//   BM_TokenizerLoad: Tokenizer::load of the Qwen tokenizer.json (11 MB: 151,643 vocab
//     entries, 151,387 merges, 26 added tokens), the whole load: read, parse, tables.
//   BM_TokenizerJsonTree: nlohmann::json::parse of the same file into a document tree,
//     as load() did before the sixth stop: the part of the old load that the JSON reader
//     replaced.
// Figures and the command are in docs/performance.md ("Sixth stop").
#include <benchmark/benchmark.h>

#include <nlohmann/json.hpp>

#include "isa/io_rules.h"
#include "model/inputs/tokenizer.h"

namespace {

void BM_TokenizerLoad(benchmark::State& state) {
  const std::string path = gpnpu::model::Tokenizer::default_path();
  for (auto _ : state) {
    const auto t = gpnpu::model::Tokenizer::load(path);
    benchmark::DoNotOptimize(t.vocab_size());
  }
}

void BM_TokenizerJsonTree(benchmark::State& state) {
  const std::string path = gpnpu::model::Tokenizer::default_path();
  for (auto _ : state) {
    const std::string text = gpnpu::io::read_input(path, "tokenizer file", 256 * gpnpu::io::kMiB);
    const nlohmann::json j = nlohmann::json::parse(text);
    benchmark::DoNotOptimize(j.size());
  }
}

}  // namespace

BENCHMARK(BM_TokenizerLoad)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_TokenizerJsonTree)->Unit(benchmark::kMillisecond);
