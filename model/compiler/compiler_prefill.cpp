// The runs of a conversation (issue 18, docs/chat.md): the chunk rule of the prefill
// and the weights each run reads. The programs themselves are the image program's
// (compiler_image.cpp) with ImageShape selecting the runs, the cache offset and the
// image rows.
#include <algorithm>

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
  const uint32_t chunks = (rows + lo - 1) / lo;
  return (rows + chunks - 1) / chunks;
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
