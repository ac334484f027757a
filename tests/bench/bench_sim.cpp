// Simulator speed (acceptance 6): how fast the simulator runs, not the machine.
//   BM_VmacF16*: fp16 vmac over the whole qc-u array (1024 PEs x 16 lanes), a
//     hardware loop of 8 independent vmac.f16; counter array_insns/s = array
//     instructions simulated per wall second.
//   BM_DmaBound*: a DMA-bound loop (4 channels streaming DDR -> OCM, 64 MiB, as
//     examples/asm/ddr_stream.s); counter sim_cycles/s = simulated cycles per
//     wall second.
//   BM_DmaBoundTimingOnlyDram: the same with ddr_model = dram (LPDDR4X-4266): what
//     the DRAM model costs per simulated byte.
//   BM_Decode2b/ideal, /dram: one 2B decode step at qc-u, timing-only, compiled and
//     run as `gpnpu sweep` runs a point (issue 14, acceptance 4: the DRAM model's
//     CPU time against the ideal port's).
//   BM_Threads/<workload>/<threads>/<load>: the two-thread split of the array semantics
//     (isa/lane_pool.h) against one thread (threads 0: the default setting, 1: as
//     GPNPU_SIM_THREADS=1) on BM_VmacF16's program (vmac) and on one 2B decode step run
//     functionally with zero weights (decode), idle (load 0) and with `load` busy-loop
//     processes that the benchmark starts beside itself (issue 16, acceptance 3).
//   BM_GemmW4/<m>/<n>/<k>: one W4A16 GEMM kernel call (kernels/gemm.h) on qc-u, zero
//     weights and activations (the arithmetic costs the same): the work of the image
//     program's GEMMs (its vmac.f16 chains); counter lane_macs/s = the GEMM's m*n*k per
//     wall second.
//   BM_DecodeTimingOnly/<cached>: one 2B decode step, timing-only, with 140 or 4,096
//     tokens cached; counter ns/insn = CPU nanoseconds per simulated instruction
//     (issue 16, acceptance 4: the per-instruction cost must not grow with the context).
// Rates are per wall second (UseRealTime); the CPU column gives CPU time per run.
// Each has a full (functional) and a timing-only variant. Figures and the command
// are in docs/performance.md.
#include <benchmark/benchmark.h>

#include <fmt/format.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <ctime>

#include "isa/lane_pool.h"
#include "isa/program.h"
#include "kernels/gemm.h"
#include "model/checkpoint/config.h"
#include "model/runtime/session.h"
#include "model/cli/driver_sweep.h"
#include "sim/machine/config.h"
#include "sim/machine/memory_map.h"
#include "sim/platform.h"
#include "sim/run.h"

using namespace gpnpu;

namespace {

isa::Program vmac_program(int iters) {
  std::string body;
  for (int k = 0; k < 8; ++k) body += fmt::format("vmac.f16 v{}, v8, v9\n", k);
  return isa::assemble(fmt::format("vsplati v8, 0x3c00\nvsplati v9, 0x4000\nli x1, {}\nloop x1, end\n{}end:\nhalt\n",
                                   iters, body),
                       "vmac.s");
}

void vmac(benchmark::State& state, bool timing_only) {
  const int iters = 1000;  // 8000 vmac.f16 per run
  isa::Program prog = vmac_program(iters);
  sim::Config cfg = sim::Config::make("qc-u", {});
  sim::Platform& p = sim::Platform::get();
  p.configure(cfg, timing_only);
  uint64_t insns = 0, cycles = 0;
  for (auto _ : state) {
    const sim::Stats& st = p.run(prog);
    insns += st.total.by_unit[int(isa::Unit::mac16)];
    cycles += st.total[sim::Stat::cycles];
  }
  state.counters["array_insns/s"] = benchmark::Counter(double(insns), benchmark::Counter::kIsRate);
  state.counters["sim_cycles/s"] = benchmark::Counter(double(cycles), benchmark::Counter::kIsRate);
  state.counters["lane_macs/s"] =
      benchmark::Counter(double(insns) * cfg.npe() * isa::kLanes, benchmark::Counter::kIsRate);
}

void dma_bound(benchmark::State& state, bool timing_only, const std::vector<std::string>& sets = {}) {
  isa::Program prog = isa::Program::load(std::string(GPNPU_SOURCE_DIR) + "/examples/asm/ddr_stream.s");
  sim::Config cfg = sim::Config::make("qc-u", sets);
  sim::Platform& p = sim::Platform::get();
  p.configure(cfg, timing_only);
  uint64_t cycles = 0, bytes = 0;
  for (auto _ : state) {
    const sim::Stats& st = p.run(prog);
    cycles += st.total[sim::Stat::cycles];
    bytes += st.total[sim::Stat::dma_bytes];
  }
  state.counters["sim_cycles/s"] = benchmark::Counter(double(cycles), benchmark::Counter::kIsRate);
  state.counters["dma_bytes/s"] = benchmark::Counter(double(bytes), benchmark::Counter::kIsRate);
}

void decode_2b(benchmark::State& state, const std::vector<std::string>& sets) {
  uint64_t cycles = 0;
  for (auto _ : state) cycles += uint64_t(model::run_sweep_point("synthetic:2b", "qc-u", "decode", sets)["decode_cycles"]);
  state.counters["sim_cycles/s"] = benchmark::Counter(double(cycles), benchmark::Counter::kIsRate);
}

// `n` processes that spin until the guard goes out of scope: the background load of a
// busy machine.
struct BusyLoad {
  std::vector<pid_t> pids;
  explicit BusyLoad(int n) {
    for (int k = 0; k < n; ++k) {
      const pid_t pid = fork();
      if (pid == 0) {
        volatile uint64_t x = 0;
        for (;;) x = x + 1;
      }
      if (pid > 0) pids.push_back(pid);
    }
  }
  ~BusyLoad() {
    for (pid_t pid : pids) kill(pid, SIGKILL);
    for (pid_t pid : pids) waitpid(pid, nullptr, 0);
  }
};

double cpu_seconds() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

// The 2B decode program with zero weights (the arithmetic costs the same), `cached`
// tokens in the KV cache.
struct Decode2b {
  model::ModelConfig mc = model::model_config_from_spec("synthetic:2b");
  sim::Config cfg = sim::Config::make("qc-u", {});
  model::Compiler c;
  model::CompiledProgram dp;
  model::Session dev;
  Decode2b(bool timing_only, uint32_t cached)
      : c(mc, cfg, [] { model::CompileOptions o; o.image = false; return o; }()), dp(c.decode_program()), dev(c, timing_only) {
    dev.write_decode_args(0, cached - 1);
  }
};

void threads(benchmark::State& state) {
  const bool decode = state.range(0) == 1;
  const bool one_thread = state.range(1) == 1;
  std::unique_ptr<Decode2b> d;
  isa::Program prog;
  if (decode) d = std::make_unique<Decode2b>(false, 140);
  else prog = vmac_program(1000), sim::Platform::get().configure(sim::Config::make("qc-u", {}), false);
  isa::set_split_pes(!one_thread);
  double cpu = 0;
  {
    BusyLoad load(int(state.range(2)));
    for (auto _ : state) {
      const double c0 = cpu_seconds();
      if (decode) d->dev.run(d->dp);
      else sim::Platform::get().run(prog);
      cpu += cpu_seconds() - c0;
    }
  }
  isa::set_split_pes(true);
  state.counters["cpu_s/iter"] = cpu / double(state.iterations());
}

void decode_timing_only(benchmark::State& state) {
  Decode2b d(true, uint32_t(state.range(0)));
  uint64_t insns = 0;
  double cpu = 0;
  for (auto _ : state) {
    const double c0 = cpu_seconds();
    insns += d.dev.run(d.dp).total[sim::Stat::instructions];
    cpu += cpu_seconds() - c0;
  }
  state.counters["ns/insn"] = 1e9 * cpu / double(insns);
  state.counters["insns"] = double(insns) / double(state.iterations());
}

void gemm_w4(benchmark::State& state) {
  kernels::GemmArgs a;
  a.m = uint32_t(state.range(0)), a.n = uint32_t(state.range(1)), a.k = uint32_t(state.range(2));
  const sim::Config cfg = sim::Config::make("qc-u", {});
  a.x_stride = 2 * a.k;
  a.y_ocm = a.m * a.x_stride;
  a.y_stride = 2 * a.n;
  a.scratch_ocm = a.y_ocm + a.m * a.y_stride;
  a.scratch_bytes = kernels::gemm_scratch_bytes(cfg, a.n, a.k);
  a.w_ddr = sim::ddr_addr(0);
  kernels::Builder b;
  kernels::emit_gemm_w4(b, cfg, a);
  b.op("halt");
  const isa::Program prog = b.finish();
  sim::Platform& p = sim::Platform::get();
  p.configure(cfg, false);
  for (auto _ : state) p.run(prog);
  state.counters["lane_macs/s"] =
      benchmark::Counter(double(a.m) * a.n * a.k * double(state.iterations()), benchmark::Counter::kIsRate);
}

void BM_VmacF16(benchmark::State& s) { vmac(s, false); }
void BM_VmacF16TimingOnly(benchmark::State& s) { vmac(s, true); }
void BM_DmaBound(benchmark::State& s) { dma_bound(s, false); }
void BM_DmaBoundTimingOnly(benchmark::State& s) { dma_bound(s, true); }
void BM_DmaBoundTimingOnlyDram(benchmark::State& s) { dma_bound(s, true, {"ddr_model=dram"}); }
void BM_Decode2b_ideal(benchmark::State& s) { decode_2b(s, {}); }
void BM_Decode2b_dram(benchmark::State& s) { decode_2b(s, {"ddr_model=dram", "dram=lpddr4x-4266-x64"}); }

}  // namespace

BENCHMARK(BM_VmacF16)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_VmacF16TimingOnly)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_DmaBound)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_DmaBoundTimingOnly)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_DmaBoundTimingOnlyDram)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Decode2b_ideal)->Name("BM_Decode2b/ideal")->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(3);
BENCHMARK(BM_Decode2b_dram)->Name("BM_Decode2b/dram")->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(3);
BENCHMARK(threads)->Name("BM_Threads")->ArgNames({"decode", "threads", "load"})
    ->ArgsProduct({{0, 1}, {0, 1}, {0, 2}})->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(2);
BENCHMARK(gemm_w4)->Name("BM_GemmW4")->Args({128, 2048, 2048})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(decode_timing_only)->Name("BM_DecodeTimingOnly")->Arg(140)->Arg(4096)->Unit(benchmark::kMillisecond)->UseRealTime();
