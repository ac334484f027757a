// The KV cache's capacity on the command line (issue 18, docs/chat.md): --max-context
// and the checks of token counts against it, before anything runs.
#include "model/cli/capacity.h"

#include <fmt/format.h>

#include "isa/error.h"
#include "isa/io_rules.h"
#include "sim/machine/memory_map.h"

namespace gpnpu::model {

void add_max_context_option(CLI::App* c, std::string& value) {
  c->add_option("--max-context", value,
                "KV-cache slots the programs are compiled for (tokens of a whole conversation): a count, or auto = "
                "the most that fit the DDR beside the weights and the image program's MLP chunk packings where that "
                "is 4096 or more (else without them; a larger count leaves them out)")
      ->capture_default_str();
}

Capacity resolve_max_context(const std::string& value, const ModelConfig& model, const sim::Config& cfg,
                             CompileOptions opt) {
  Capacity c;
  c.fit = Compiler::max_context(model, cfg, opt);
  opt.max_seq = 1;
  const uint64_t base = Compiler::ddr_need(model, cfg, opt);
  opt.max_seq = 2;
  c.bytes_per_token = Compiler::ddr_need(model, cfg, opt) - base;
  c.fixed_bytes = base - c.bytes_per_token;
  // auto: beside the image program's MLP chunk packings (faster image runs) where that still
  // leaves CompileOptions' default context (or all that fit without them), else without them.
  c.packed = Compiler::max_context(model, cfg, opt, true);
  if (c.packed < std::min(c.fit, CompileOptions{}.max_seq)) c.packed = c.fit;
  if (value == "auto") {
    c.max_context = c.packed;
    return c;
  }
  int64_t n = 0;
  try {
    n = io::parse_integer(value, "", INT64_MIN, INT64_MAX);
  } catch (const Error&) {
    fail("--max-context '{}' is neither a count of tokens nor auto (e.g. --max-context 4096; at most {} fit)", value,
         c.fit);
  }
  if (n < 1)
    fail("--max-context {}: the KV cache needs at least 1 slot; give a count from 1 to {} (the most that fit "
         "ddr_bytes = {} beside the weights) or auto",
         value, c.fit, cfg.ddr_bytes);
  if (n > int64_t(c.fit))
    fail("--max-context {}: a KV cache of {} tokens takes about {} bytes ({} per token) beside the {} bytes of "
         "weights and buffers, more than ddr_bytes = {}: at most {} tokens fit; give --max-context {} or less (or "
         "auto){}",
         value, n, uint64_t(n) * c.bytes_per_token, c.bytes_per_token, c.fixed_bytes, cfg.ddr_bytes, c.fit, c.fit,
         cfg.ddr_bytes < sim::kDdrRegion.window ? fmt::format(", or --set ddr_bytes=N (at most {})", sim::kDdrRegion.window)
                                              : "");
  c.max_context = uint32_t(n);
  return c;
}

void check_tokens(const std::string& what, int64_t tokens, const Capacity& cap, const std::string& fix) {
  if (tokens < 1)
    fail("{} {}: needs at least 1 token in the KV cache; give 1 to {} (--max-context)", what, tokens,
         cap.max_context);
  if (tokens <= int64_t(cap.max_context)) return;
  std::string why = fmt::format(" (up to {} fit the DDR)", cap.fit);
  if (cap.max_context == cap.fit)
    why = fmt::format(" (the most that fit ddr_bytes beside the weights, {} bytes per token)", cap.bytes_per_token);
  else if (cap.max_context == cap.packed)
    why = fmt::format(" (auto: the most beside the image program's MLP chunk packings; up to {} fit the DDR without them)",
                      cap.fit);
  fail("{} {}: needs {} KV-cache slots, more than --max-context = {}{}; {}", what, tokens, tokens, cap.max_context, why,
       fix);
}

}  // namespace gpnpu::model
