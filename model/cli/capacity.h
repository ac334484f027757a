// The KV cache's capacity on the command line (issue 18): --max-context (a count or
// auto) resolved against the DDR, and token counts checked against it before any run.
// Every failure is a gpnpu::Error naming the option, the numbers and the fix.
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "model/compiler/compiler.h"

namespace gpnpu::model {

struct Capacity {
  uint32_t max_context = 0;      // the slots compiled for (CompileOptions::max_seq)
  uint32_t fit = 0;              // the most that fit the DDR (Compiler::max_context)
  uint32_t packed = 0;           // auto: the most beside the image program's second packings (resolve_max_context)
  uint64_t bytes_per_token = 0;  // DDR per slot (KV cache and the prefill's per-row areas)
  uint64_t fixed_bytes = 0;      // DDR of everything else (weights, image areas)
};

void add_max_context_option(CLI::App* c, std::string& value);
// `opt`: the compile options but max_seq (the DDR areas beside the cache).
Capacity resolve_max_context(const std::string& value, const ModelConfig& model, const sim::Config& cfg,
                             CompileOptions opt);
// `what` (e.g. "--cached") needs `tokens` slots: an error below 1 or past the max
// context, ending with `fix` (what the user can change).
void check_tokens(const std::string& what, int64_t tokens, const Capacity& cap, const std::string& fix);

}  // namespace gpnpu::model
