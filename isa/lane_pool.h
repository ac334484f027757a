// Two-way data parallelism for the array semantics: a large per-PE loop is split at a
// PE boundary, the first half runs on the calling thread and the second on one helper
// thread. Every lane of a PE is computed by the same code whichever thread runs it, so
// results do not depend on the split (the semantics only use it where each PE writes
// only its own lanes or LRM; stores into shared OCM stay in PE order).
//
// The helper spins briefly between instructions (an array instruction takes about a
// microsecond) and then sleeps; GPNPU_SIM_THREADS=1 turns the split off.
#pragma once
#include <cstdint>
#include <functional>

namespace gpnpu::isa {

// Runs f(0, m) and f(m, n) for some m in [0, n], concurrently when n >= kMinSplitPes.
void split_pes(uint32_t n, const std::function<void(uint32_t, uint32_t)>& f);

inline constexpr uint32_t kMinSplitPes = 256;

}  // namespace gpnpu::isa
