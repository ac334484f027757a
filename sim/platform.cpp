#include "sim/platform.h"

#include <pthread.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "isa/batch.h"
#include "isa/error.h"
#include "sim/machine/memory_map.h"

// libsystemc's own main() calls sc_main and prints a banner before it; our
// programs define main() themselves and drive SystemC through the Platform, so
// this sc_main only satisfies the library's reference and is never called.
int sc_main(int, char**) { return 1; }

#if defined(__SANITIZE_ADDRESS__)
#define GPNPU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define GPNPU_ASAN 1
#endif
#endif
#ifdef GPNPU_ASAN
#include <sanitizer/common_interface_defs.h>
#endif

namespace gpnpu::sim {

namespace {

// AddressSanitizer builds only. libsystemc 2.3.4 tells ASan about its coroutine
// switches (__sanitizer_start_switch_fiber), but announces every switch back to
// the main coroutine with an empty stack (bottom 0, size 0): after the first
// sc_start, ASan takes the main thread's stack to end at address 0. An exception
// thrown on the main stack afterwards makes __asan_handle_no_return skip its
// unpoisoning ("ASan is ignoring requested __asan_handle_no_return ... top:
// 0x000000000000") and ASan then reports stale poison as stack-use-after-scope
// (first in its own sigaltstack interceptor). So the real bounds of the main
// stack, taken before any switch, are announced again each time sc_start returns:
// a fiber "switch" from the main stack to itself. (SystemC also passes no fake
// stack to save, so detect_stack_use_after_return=1 cannot work with it: see
// docs/testing.md.)
struct MainStack {
  void* bottom = nullptr;
  size_t size = 0;
  MainStack() {
    pthread_attr_t a;
    if (pthread_getattr_np(pthread_self(), &a) != 0) return;
    if (pthread_attr_getstack(&a, &bottom, &size) != 0) bottom = nullptr, size = 0;
    pthread_attr_destroy(&a);
  }
};

void restore_main_stack_for_asan() {
#ifdef GPNPU_ASAN
  static const MainStack main_stack;
  if (!main_stack.bottom) return;
  __sanitizer_start_switch_fiber(nullptr, main_stack.bottom, main_stack.size);
  __sanitizer_finish_switch_fiber(nullptr, nullptr, nullptr);
#endif
}

}  // namespace

Platform& Platform::get() {
  static Platform p;
  return p;
}

Platform::Platform() {
  restore_main_stack_for_asan();  // takes the main stack's bounds before SystemC switches
  // SystemC prints a banner and info reports unless told not to.
  setenv("SYSTEMC_DISABLE_COPYRIGHT_MESSAGE", "1", 1);
  sc_core::sc_report_handler::set_actions(sc_core::SC_INFO, sc_core::SC_DO_NOTHING);
  build();
  configure(cfg_, false);
}

void Platform::build() {
  clock_ = std::make_unique<Clock>(cfg_.clock_ghz);
  ddr_ = std::make_unique<MemoryTarget>("ddr", /*sparse=*/true, *clock_);
  ocm_ = std::make_unique<MemoryTarget>("ocm", /*sparse=*/false, *clock_);
  bus_ = std::make_unique<Bus>("bus");
  dma_ = std::make_unique<DmaEngine>("dma", *clock_);
  seq_ = std::make_unique<Sequencer>("sequencer", *clock_, *dma_, *bus_);
  // Wiring from the memory map: one route per region.
  dma_->socket.bind(bus_->target);
  dma_->before_ocm_write = [this](uint64_t offset, uint64_t bytes) {
    if (state_ && state_->batch) state_->batch->before_ocm_write(*state_, offset, offset + bytes);
  };
  bus_->route(kDdrRegion).bind(ddr_->socket);
  bus_->route(kOcmRegion).bind(ocm_->socket);
}

void Platform::configure(const Config& cfg, bool timing_only) {
  cfg.validate();
  cfg_ = cfg;
  timing_only_ = timing_only;
  *clock_ = Clock(cfg.clock_ghz);
  dram_ = nullptr;
  if (cfg.dram_model()) {
    auto dram = std::make_unique<DramModel>(DramSpec::from(cfg), clock_->now());
    dram_ = dram.get();
    ddr_->configure(cfg.ddr_bytes, std::move(dram));
  } else {
    ddr_->configure(cfg.ddr_bytes, std::make_unique<PortModel>(cfg.ddr_gbps, cfg.clock_ghz, cfg.ddr_latency_cycles,
                                                               uint32_t(cfg.ddr_burst_bytes)));
  }
  ocm_->configure(cfg.ocm_bytes, std::make_unique<PortModel>(double(cfg.ocm_dma_bytes), 1.0, 1, 1));
  bus_->set_size(kDdrRegion, cfg.ddr_bytes);
  bus_->set_size(kOcmRegion, cfg.ocm_bytes);
  dma_->configure(uint32_t(cfg.dma_channels), uint32_t(cfg.dma_queue_depth), cfg.dma_setup_cycles, !timing_only);
  state_ = std::make_unique<isa::ArchState>(isa::ArrayShape{uint32_t(cfg.pe_rows), uint32_t(cfg.pe_cols)},
                                            uint32_t(cfg.lrm_bytes), uint32_t(cfg.smem_bytes),
                                            std::span<uint8_t>(ocm_->dense(), cfg.ocm_bytes));
  state_->functional = !timing_only;
}

void Platform::write_smem(uint32_t addr, const void* data, uint32_t bytes) {
  isa::check_range("scalar memory", addr, bytes, state_->smem.size());
  std::memcpy(&state_->smem[addr], data, bytes);
}

const Stats& Platform::run(const isa::Program& program) {
  isa::ArchState& st = *state_;
  std::fill(std::begin(st.x), std::end(st.x), 0);
  st.loop_depth = 0;
  std::fill(st.v.begin(), st.v.end(), 0);
  st.clear_predicates();
  stats_ = Stats();
  if (dram_) {
    dram_->clear_counts();
    dram_->attach(&stats_.total);
  }
  seq_->prepare(cfg_, st, program, stats_, timing_only_);
  seq_->start();
  sc_core::sc_start();
  restore_main_stack_for_asan();
  if (!seq_->done()) fail("internal: the simulation stopped before the program halted");
  if (!seq_->error().empty()) throw Error(seq_->error());
  if (dram_) {
    dram_->advance(clock_->now());  // refreshes up to the end of the run (idle ones too)
    stats_.dram_channels = dram_->channel_counts();
  }
  // GPNPU_SIM_DIGEST=FILE: one line per run with its cycles and digests of the final
  // state and DDR, to check that a change of the simulator keeps every run bit-identical
  // (docs/performance.md, "Simulator speed").
  if (const char* path = std::getenv("GPNPU_SIM_DIGEST"); path && *path) {
    std::FILE* f = std::fopen(path, "a");
    if (!f) fail("GPNPU_SIM_DIGEST: cannot open {} for appending", path);
    std::fprintf(f, "cycles %llu instructions %llu state %016llx ddr %016llx\n",
                 (unsigned long long)stats_.total[Stat::cycles], (unsigned long long)stats_.total[Stat::instructions],
                 (unsigned long long)st.digest(), (unsigned long long)ddr_->digest());
    std::fclose(f);
  }
  return stats_;
}

}  // namespace gpnpu::sim
