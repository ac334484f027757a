// Two-way data parallelism for PE-block batches (isa/batch.h): a batch's run over the
// PEs is cut at PE boundaries into kSplitChunks chunks, which the calling thread takes
// from the front (chunk 0, 1, ...) and one helper thread from the back (kSplitChunks - 1,
// ...), so that each thread keeps running mostly the same PEs and their registers stay
// in its core's cache. Every lane of a PE is computed by the same code whichever thread
// runs it, so results do not depend on who ran what (a batch's instructions write only
// their own PE's lanes and LRM). Single array instructions are not split: measured, the
// hand-off cost more than half of one instruction's work.
//
// The split cannot make a run much slower than one thread: it runs only while the
// kernel counts a CPU free for the helper (runnable threads, /proc/loadavg, averaged
// over about 80 ms); the caller never waits for a chunk the helper has not started (it
// takes it itself); the helper spins only briefly between batches and then sleeps on a
// futex; and the caller keeps a balance of the time the split won (the helper's chunks)
// and lost (waiting for a helper descheduled on a busy machine, waking it): a deficit
// turns the split off for the next 1, 2, 4, ... 65,536 calls.
// GPNPU_SIM_THREADS=1 turns it off entirely.
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

inline constexpr uint32_t kMinSplitPes = 256;
inline constexpr uint32_t kMinSplitInsns = 16;
inline constexpr uint32_t kSplitChunks = 8;

// Runs f over [0, n): either f(0, n) on the calling thread, or (n >= kMinSplitPes and
// a run of at least kMinSplitInsns instructions) f on the chunks
// [n * j / kSplitChunks, n * (j + 1) / kSplitChunks), j < kSplitChunks, concurrently on
// two threads.
void split_pes(uint32_t n, uint32_t insns, PeRangeFn f);

// Turns the split on or off for this process (the benchmarks compare both settings);
// by default it is on with more than one CPU unless GPNPU_SIM_THREADS=1.
void set_split_pes(bool on);

// For tests: while on, every call of at least kMinSplitPes PEs runs split (whatever its
// insns, the machine's load and the balance: results must not depend on who ran which chunk).
void force_split_pes(bool on);

// The chunk index j of a call f(e0, ...) of split_pes(n, insns, f) (0 for the whole range),
// for results that are merged in PE order afterwards.
inline uint32_t split_chunk(uint32_t n, uint32_t e0) {
  return uint32_t((uint64_t(e0) * kSplitChunks + n - 1) / n);
}

}  // namespace gpnpu::isa
