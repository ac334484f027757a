// The platform: the one place that builds and wires the GPNPU from the memory map
// (sim/machine/memory_map.h): sequencer, DMA engine, bus, DDR port and OCM.
// SystemC elaborates once per process, so there is one Platform per process;
// configure() re-sizes it for a new machine config (and clears all memory), run()
// executes a program to halt. DDR, OCM and scalar memory persist between runs of
// one configuration (the host driver carries the KV cache in DDR that way).
#pragma once
#include <memory>
#include <string>

#include "isa/program.h"
#include "isa/state.h"
#include "sim/bus.h"
#include "sim/clock.h"
#include "sim/machine/config.h"
#include "sim/dma.h"
#include "sim/dram.h"
#include "sim/memory_target.h"
#include "sim/sequencer.h"
#include "sim/stats.h"

namespace gpnpu::sim {

class Platform {
 public:
  static Platform& get();

  // Applies a machine config and mode; clears DDR, OCM, scalar memory and the array.
  void configure(const Config& cfg, bool timing_only);
  const Config& config() const { return cfg_; }
  bool timing_only() const { return timing_only_; }

  // Runs `program` from pc 0 to halt; registers and predicates start cleared.
  // Throws gpnpu::Error with pc, instruction and mark on a fault.
  const Stats& run(const isa::Program& program);
  const Stats& stats() const { return stats_; }

  // Host access (no simulated time): DDR by offset, scalar memory by address.
  MemoryTarget& ddr() { return *ddr_; }
  MemoryTarget& ocm() { return *ocm_; }
  isa::ArchState& state() { return *state_; }
  Sequencer& sequencer() { return *seq_; }
  DmaEngine& dma() { return *dma_; }
  void write_smem(uint32_t addr, const void* data, uint32_t bytes);

 private:
  Platform();
  void build();

  Config cfg_;
  bool timing_only_ = false;
  std::unique_ptr<Clock> clock_;
  std::unique_ptr<MemoryTarget> ddr_, ocm_;
  DramModel* dram_ = nullptr;  // the DDR port when ddr_model = dram (owned by ddr_)
  std::unique_ptr<Bus> bus_;
  std::unique_ptr<DmaEngine> dma_;
  std::unique_ptr<Sequencer> seq_;
  std::unique_ptr<isa::ArchState> state_;
  Stats stats_;
};

}  // namespace gpnpu::sim
