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
// Rates are per wall second (UseRealTime); the CPU column gives CPU time per run.
// Each has a full (functional) and a timing-only variant. Figures and the command
// are in docs/performance.md.
#include <benchmark/benchmark.h>

#include <fmt/format.h>

#include "isa/program.h"
#include "model/cli/driver_sweep.h"
#include "sim/machine/config.h"
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
