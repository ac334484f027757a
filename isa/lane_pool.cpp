// The helper thread of split_pes (contract in lane_pool.h).
#include "isa/lane_pool.h"

#include <atomic>
#include <cstdlib>
#include <exception>
#include <thread>

#if defined(__x86_64__)
#include <immintrin.h>
#define GPNPU_PAUSE() _mm_pause()
#else
#define GPNPU_PAUSE() std::this_thread::yield()
#endif

namespace gpnpu::isa {

namespace {

class Pool {
 public:
  Pool() : th_([this] { worker(); }) {}
  ~Pool() {
    stop_ = true;
    seq_.fetch_add(1, std::memory_order_release);
    seq_.notify_one();
    th_.join();
  }

  void run(uint32_t n, PeRangeFn f) {
    const uint32_t m = n / 2;
    job_ = f;
    begin_ = m;
    end_ = n;
    err_ = nullptr;
    const uint32_t s = seq_.fetch_add(1, std::memory_order_release) + 1;
    seq_.notify_one();
    std::exception_ptr mine;
    try {
      f(0, m);
      // Not started by the helper yet (descheduled on a busy machine)? Take it back.
      uint32_t expect = s - 1;
      if (claimed_.compare_exchange_strong(expect, s, std::memory_order_acq_rel)) {
        f(m, n);
        return;
      }
    } catch (...) {
      mine = std::current_exception();
    }
    for (uint32_t spins = 0; done_.load(std::memory_order_acquire) != s;)
      if (++spins < kSpins) GPNPU_PAUSE();
      else std::this_thread::yield();
    if (mine) std::rethrow_exception(mine);
    if (err_) std::rethrow_exception(err_);
  }

 private:
  static constexpr uint32_t kSpins = 1u << 14;

  void worker() {
    uint32_t seen = 0;
    for (;;) {
      for (uint32_t spins = 0; seq_.load(std::memory_order_acquire) == seen;)
        if (++spins < kSpins) GPNPU_PAUSE();
        else seq_.wait(seen, std::memory_order_acquire);
      seen = seq_.load(std::memory_order_acquire);
      if (stop_) return;
      // The job is ours only if the caller has not taken it back.
      uint32_t expect = seen - 1;
      if (!claimed_.compare_exchange_strong(expect, seen, std::memory_order_acq_rel)) continue;
      try {
        job_(begin_, end_);
      } catch (...) {
        err_ = std::current_exception();
      }
      done_.store(seen, std::memory_order_release);
    }
  }

  std::atomic<uint32_t> seq_{0}, done_{0}, claimed_{0};  // job numbers
  std::atomic<bool> stop_{false};
  PeRangeFn job_;
  uint32_t begin_ = 0, end_ = 0;
  std::exception_ptr err_;
  std::thread th_;
};

bool enabled() {
  static const bool on = [] {
    const char* e = std::getenv("GPNPU_SIM_THREADS");
    if (e && std::atoi(e) == 1) return false;
    return std::thread::hardware_concurrency() > 1;
  }();
  return on;
}

}  // namespace

void split_pes(uint32_t n, PeRangeFn f) {
  if (n < kMinSplitPes || !enabled()) return f(0, n);
  static Pool pool;
  pool.run(n, f);
}

}  // namespace gpnpu::isa
