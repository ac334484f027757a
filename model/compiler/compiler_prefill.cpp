// The runs of a conversation (issue 18, docs/chat.md): the chunk rule of the prefill
// and the weights each run reads. The programs themselves are the image program's
// (compiler_image.cpp) with ImageShape selecting the runs, the cache offset and the
// image rows.
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "model/compiler/compiler.h"

namespace gpnpu::model {

uint32_t Compiler::prefill_chunk_rows(uint32_t offset, uint32_t rows) const {
  // The ids of a chunk sit in scalar memory after the descriptor areas.
  const uint64_t room = cfg_.smem_bytes > iio_.ids_smem ? (cfg_.smem_bytes - iio_.ids_smem) / 4 : 0;
  rows = uint32_t(std::min<uint64_t>(rows, room));
  if (opt_.prefill_chunk) return std::max(1u, std::min(rows, opt_.prefill_chunk));
  // Chunks of n rows for `rows` rows after `offset`: the last one sits at offset + rows - n
  // and stages the most cached keys (offset + rows of them, as many for any n), so n fits
  // every chunk when it fits there.
  auto resident = [&](uint32_t n) {
    ImageShape sh;
    sh.vision = false;
    sh.seq_len = int(n);
    sh.cache_offset = offset + rows - n;
    sh.image_rows = 0;
    sh.head = false;
    sh.plan_only = true;
    return image_program(sh).plan == "resident";
  };
  if (rows <= 1 || resident(rows) || !resident(1)) return std::max(1u, rows);
  uint32_t lo = 1, hi = rows;  // resident(lo), !resident(hi): the plan's OCM need grows with the rows
  while (hi - lo > 1) {
    const uint32_t mid = lo + (hi - lo) / 2;
    (resident(mid) ? lo : hi) = mid;
  }
  // As few chunks as that takes, of even rows (each chunk reads every weight once: no
  // short last chunk); the later chunks' calls find the same size.
  const uint32_t chunks = (rows + lo - 1) / lo, n = (rows + chunks - 1) / chunks;
  // Those chunks only where they are estimated 3% or more below one streamed run of every row:
  // each chunk reads every weight again and stages all the keys before it, where the one run
  // reads the weights once a row tile. The resident plan has no estimate of its own; the
  // streamed plan's for each chunk stands in. Measured (docs/chat.md, "Chunks or one run"): 2B
  // at 30 points and prompts, the rule without the comparison ran up to 3.1 x the one run
  // (32x64, 2 MiB, 64 GB/s, 1,016 tokens in 24 chunks: 732.57 M cycles, one run 237.58 M);
  // with it, none more than 3.3% slower than the faster of the two.
  auto streamed = [&](uint32_t at, uint32_t count, bool head) {
    ImageShape sh;
    sh.vision = false;
    sh.seq_len = int(count);
    sh.cache_offset = at;
    sh.image_rows = 0;
    sh.head = head;
    sh.plan_only = true;
    return image_streamed(sh).est_cycles;
  };
  const double one = streamed(offset, rows, true);
  if (!std::isfinite(one)) return n;
  double chunked = 0;
  for (uint32_t r0 = 0; r0 < rows; r0 += n) chunked += streamed(offset + r0, std::min(n, rows - r0), r0 + n >= rows);
  return chunked < 0.97 * one ? n : rows;
}

uint64_t Compiler::run_weight_bytes(bool vision, bool head) const {
  uint64_t t = vision || !head ? 0 : ddr_.at("embed").bytes;  // (the head reads the table; the lookups a few rows)
  for (const DdrTensor& d : ddr_.tensors()) {
    if (d.layout != "gemm" && d.layout != "f16") continue;
    const bool tower = d.name[0] == 'V' || d.name[0] == 'M';  // V.patch, V<b>.*, M<j>.*, Mf.*
    if (tower == vision) t += d.bytes;
  }
  return vision || head ? t : t - past_kv_weight_bytes();
}

uint64_t Compiler::past_kv_weight_bytes() const {
  const std::string last = fmt::format("L{}.", model_.text.num_hidden_layers - 1);
  uint64_t t = 0;
  for (const DdrTensor& d : ddr_.tensors())
    if ((d.layout == "gemm" || d.layout == "f16") && d.name.starts_with(last) && !d.name.starts_with(last + "qkv") &&
        !d.name.starts_with(last + "norms"))
      t += d.bytes;
  return t;
}

}  // namespace gpnpu::model
