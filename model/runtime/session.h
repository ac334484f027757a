// The host runtime: a device session, one compiled model on the simulated GPNPU.
// What a host program does with the device, and nothing else: put weights and
// inputs into device memory, run the programs the compiler made, read logits and
// the KV cache back. Gates, goldens and negative controls are the callers' (the
// describe driver, the tests); they corrupt the device only through write_kv and
// write_ocm, after a run and before they read it.
//
// Contract:
//  - Session(compiler, timing_only) configures the simulator for compiler.config()
//    (clearing DDR, OCM and scalar memory). The simulator is one per process, so
//    there is one live session at a time; the compiler must outlive the session.
//  - Functional sessions only: load_weights() (every weight, in the kernels'
//    layouts), load_image_constants() (the folded position table and the tower's
//    rotary tables of a grid); the positions and patches of write_prompt(); the
//    rotary tables of decode positions.
//  - write_prompt(ids, pos, patches, first_slot): the image program's inputs: the
//    token ids and the first KV-cache slot it writes (0 is the compiler's contract;
//    another value is for negative controls) in scalar memory; in a functional
//    session also the pixel patches (fp16) and the text rotary tables of `pos`.
//  - write_decode_args(token, slot, pos): one decode step's inputs: the token, its
//    cache slot and slot + 1 keys; in a functional session the rotary tables of `pos`.
//  - run(program) runs a program to halt; the stats are valid until the next run.
//    logits() reads the last run's logits (vocab fp16, as floats) where it left them: the
//    decode program's in DDR (its "logits" tensor), the image program's in OCM.
//  - kv(layer, value, head, n): the fp16 K (value = false) or V rows of slots [0, n)
//    of one KV head, [n][head_dim]; write_kv() overwrites elements of one row.
#pragma once
#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <span>
#include <vector>
#include <utility>

#include "model/compiler/compiler.h"
#include "sim/platform.h"

namespace gpnpu::model {

class QuantBundle;

class Session {
 public:
  Session(const Compiler& compiler, bool timing_only);

  const Compiler& compiler() const { return comp_; }
  bool timing_only() const { return timing_only_; }

  void load_weights(const QuantBundle& bundle);
  void load_image_constants(const QuantBundle& bundle, const ImageShape& shape);
  void write_prompt(std::span<const int> ids, std::span<const std::array<int, 3>> pos = {},
                    std::span<const float> patches = {}, uint32_t first_slot = 0);
  void write_decode_args(int token, uint32_t slot, const std::array<int, 3>& pos = {});
  // A vision run's input (issue 18): the pixel patches (fp16), functional sessions only.
  void write_patches(std::span<const float> patches);

  const sim::Stats& run(const CompiledProgram& program);
  std::vector<float> logits() const;
  void clear_logits();  // zeros where the last run left them (a negative control)
  // Where the last run left its logits: DDR or OCM, and the offset there.
  std::pair<sim::MemoryTarget*, uint64_t> logits_at() const;

  std::vector<uint16_t> kv(int layer, bool value, int head, uint32_t n) const;
  void write_kv(int layer, bool value, int head, uint32_t slot, std::span<const uint16_t> elems, uint32_t first = 0);
  void write_ocm(uint32_t offset, const void* data, uint64_t bytes);
  void write_ddr(uint64_t offset, const void* data, uint64_t bytes);

  // Progress hooks of long runs (sim::Sequencer::on_mark_end).
  sim::Sequencer& sequencer() { return p_.sequencer(); }

 private:
  void write_rope(sim::MemoryTarget& m, uint64_t cos_off, uint64_t sin_off, std::span<const std::array<int, 3>> pos);
  uint64_t kv_offset(int layer, bool value, int head, uint32_t slot) const;

  const Compiler& comp_;
  bool timing_only_;
  sim::Platform& p_;
  const CompiledProgram* last_ = nullptr;
};

// One kernel call of a run: its region call (cycles, counters) beside the compiler's
// call, its cost at `context` tokens attended (decode attention) and its floor. The one
// pairing of stats and compiled calls that describe's report and compile's table read.
struct KernelRun {
  const sim::RegionCall* region;
  const KernelCall* call;
  kernels::KernelCost cost;
  double floor;
};
std::vector<KernelRun> kernel_runs(const sim::Stats& st, const CompiledProgram& prog, const sim::Config& cfg,
                                   uint32_t context);

}  // namespace gpnpu::model
