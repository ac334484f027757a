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
#include <type_traits>

namespace gpnpu::isa {

// A non-owning reference to a callable f(pe_begin, pe_end): no allocation on the
// array instructions' path (a std::function may allocate per call).
class PeRangeFn {
 public:
  PeRangeFn() = default;
  template <typename F, typename = std::enable_if_t<!std::is_same_v<std::decay_t<F>, PeRangeFn>>>
  PeRangeFn(F&& f)  // NOLINT: implicit, from a lambda that outlives the call
      : obj_(const_cast<void*>(static_cast<const void*>(&f))),
        call_([](void* o, uint32_t b, uint32_t e) { (*static_cast<std::remove_reference_t<F>*>(o))(b, e); }) {}
  void operator()(uint32_t b, uint32_t e) const { call_(obj_, b, e); }

 private:
  void* obj_ = nullptr;
  void (*call_)(void*, uint32_t, uint32_t) = nullptr;
};

// Runs f(0, m) and f(m, n) for some m in [0, n], concurrently when n >= kMinSplitPes.
void split_pes(uint32_t n, PeRangeFn f);

inline constexpr uint32_t kMinSplitPes = 256;

}  // namespace gpnpu::isa
