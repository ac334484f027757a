// The helper thread of split_pes (contract in lane_pool.h).
#include "isa/lane_pool.h"

#include <atomic>
#include <algorithm>
#include <chrono>
#include <cstdio>
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

using Clock = std::chrono::steady_clock;

class Pool {
 public:
  Pool() : th_([this] { worker(); }) {}
  ~Pool() {
    stop_ = true;
    seq_.fetch_add(1);
    seq_.notify_one();
    th_.join();
  }

  void run(uint32_t n, PeRangeFn f, bool forced) {
    if (skip_ > 0 && !forced) {  // backing off after a lost split
      --skip_;
      return f(0, n);
    }
    if (!forced && !machine_has_room()) return f(0, n);
    const uint32_t s = ++job_;
    f_ = f;
    n_ = n;
    done_.store(0, std::memory_order_relaxed);
    work_.store(uint64_t(s) << 32 | kSplitChunks << 16, std::memory_order_release);
    seq_.store(s);
    const Clock::time_point t0 = Clock::now();
    if (sleeping_.load()) seq_.notify_one();  // seq_cst with the helper's sleeping_/seq_ pair: no lost wake-up
    const Clock::time_point t1 = Clock::now();
    const uint32_t mine = take_chunks(s, true);
    int64_t gain = -(t1 - t0).count();  // the wake-up call is a cost
    if (mine < kSplitChunks) {
      const Clock::time_point t2 = Clock::now();
      for (uint32_t spins = 0; done_.load(std::memory_order_acquire) != kSplitChunks - mine;)
        if (++spins > kSpins) std::this_thread::yield();
        else GPNPU_PAUSE();
      // What the helper's chunks would have cost the caller, less the caller's wait for
      // them (none to compare with when the helper took every chunk: the caller was late).
      if (mine > 0) gain += (t2 - t1).count() * int64_t(kSplitChunks - mine) / int64_t(mine) - (Clock::now() - t2).count();
    }
    account(gain);
    rethrow();
  }

 private:
  static constexpr uint32_t kSpins = 1u << 16;  // caller's pause loop before it yields
  static constexpr uint32_t kMaxBackoff = 16;
  static constexpr auto kHelperSpin = std::chrono::microseconds(20);  // then the helper sleeps
  static constexpr int64_t kMaxCredit = 1'000'000;  // ns: what a busy spell may lose before the split backs off

  // The split's balance of time won and lost (clock ticks, ns): a deficit turns it off
  // for 1, 2, 4, .. 65,536 calls; a full credit shortens the next back-off again.
  void account(int64_t gain) {
    balance_ += gain;
    if (balance_ < 0) {
      skip_ = 1u << backoff_;
      if (backoff_ < kMaxBackoff) ++backoff_;
      balance_ = 0;
    } else if (balance_ > kMaxCredit) {
      balance_ = kMaxCredit;
      if (backoff_ > 0) --backoff_;
    }
  }

  // Whether a CPU is free for the helper: the kernel's count of runnable threads
  // (/proc/loadavg, field 4), less this thread and an awake helper, averaged over about
  // the last 80 ms (sampled every 10 ms), must leave room for both threads. Without
  // /proc/loadavg the machine counts as idle.
  bool machine_has_room() {
    const Clock::time_point now = Clock::now();
    if (now < next_sample_) return room_;
    next_sample_ = now + std::chrono::milliseconds(10);
    std::FILE* f = std::fopen("/proc/loadavg", "r");
    if (!f) return room_;
    double l1, l5, l15;
    int running = 0, total = 0;
    const bool ok = std::fscanf(f, "%lf %lf %lf %d/%d", &l1, &l5, &l15, &running, &total) == 5;
    std::fclose(f);
    if (!ok) return room_;
    const double others = std::max(0, running - 1 - (sleeping_.load() ? 0 : 1));
    others_ += (others - others_) / 8;
    room_ = others_ + 2 <= cpus_ + 0.5;
    return room_;
  }

  // Takes and runs chunks of job s, from the front or from the back, until none is left;
  // returns how many it ran.
  uint32_t take_chunks(uint32_t s, bool front) {
    uint32_t ran = 0;
    for (uint64_t w = work_.load(std::memory_order_acquire);;) {
      const uint32_t lo = uint32_t(w) & 0xffff, hi = uint32_t(w) >> 16;  // chunks [lo, hi) are left
      if (uint32_t(w >> 32) != s || lo >= hi) return ran;
      if (!work_.compare_exchange_weak(w, front ? w + 1 : w - (uint64_t(1) << 16), std::memory_order_acq_rel)) continue;
      const uint32_t j = front ? lo : hi - 1;
      try {
        f_(uint32_t(uint64_t(n_) * j / kSplitChunks), uint32_t(uint64_t(n_) * (j + 1) / kSplitChunks));
      } catch (...) {
        err_[j] = std::current_exception();
      }
      ++ran;
      w = work_.load(std::memory_order_acquire);
    }
  }

  void rethrow() {  // the first failing chunk in PE order, as one thread would have failed
    for (std::exception_ptr& e : err_)
      if (e) {
        std::exception_ptr x = e;
        for (std::exception_ptr& c : err_) c = nullptr;
        std::rethrow_exception(x);
      }
  }

  void worker() {
    uint32_t seen = 0;
    for (;;) {
      const Clock::time_point until = Clock::now() + kHelperSpin;
      for (uint32_t spins = 0; seq_.load(std::memory_order_acquire) == seen;) {
        GPNPU_PAUSE();
        if ((++spins & 63) == 0 && Clock::now() > until) {
          sleeping_.store(true);
          while (seq_.load() == seen) seq_.wait(seen);
          sleeping_.store(false);
        }
      }
      seen = seq_.load(std::memory_order_acquire);
      if (stop_) return;
      // Chunks of job `seen` only: the caller may have finished it and started another.
      if (const uint32_t ran = take_chunks(seen, false)) done_.fetch_add(ran, std::memory_order_release);
    }
  }

  std::atomic<uint32_t> seq_{0};    // the latest job number, for the helper's futex
  std::atomic<uint64_t> work_{0};   // job number << 32 | end << 16 | begin of the chunks left
  std::atomic<uint32_t> done_{0};   // chunks the helper finished in the current job
  std::atomic<bool> sleeping_{false}, stop_{false};
  PeRangeFn f_;
  uint32_t n_ = 0, job_ = 0;
  uint32_t skip_ = 0, backoff_ = 0;  // caller only
  int64_t balance_ = 0;
  Clock::time_point next_sample_{};
  double others_ = 0;  // runnable threads besides ours, averaged
  bool room_ = true;
  const double cpus_ = std::thread::hardware_concurrency();
  std::exception_ptr err_[kSplitChunks];
  std::thread th_;
};

std::atomic<bool>& enabled_flag() {
  static std::atomic<bool> on = [] {
    const char* e = std::getenv("GPNPU_SIM_THREADS");
    if (e && std::atoi(e) == 1) return false;
    return std::thread::hardware_concurrency() > 1;
  }();
  return on;
}
bool enabled() { return enabled_flag().load(std::memory_order_relaxed); }

std::atomic<bool> forced{false};

}  // namespace

void set_split_pes(bool on) { enabled_flag().store(on); }
void force_split_pes(bool on) { forced.store(on); }

void split_pes(uint32_t n, uint32_t insns, PeRangeFn f) {
  const bool force = forced.load(std::memory_order_relaxed);
  if (n < kMinSplitPes || !((enabled() && insns >= kMinSplitInsns) || force)) return f(0, n);
  static Pool pool;
  pool.run(n, f, force);
}

}  // namespace gpnpu::isa
