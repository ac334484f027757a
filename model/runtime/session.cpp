// The host runtime (contract in session.h).
#include "model/runtime/session.h"

#include <fmt/format.h>

#include "isa/error.h"
#include "isa/fp16.h"
#include "model/checkpoint/quant.h"
#include "model/reference/ops.h"

namespace gpnpu::model {

Session::Session(const Compiler& compiler, bool timing_only)
    : comp_(compiler), timing_only_(timing_only), p_(sim::Platform::get()) {
  p_.configure(comp_.config(), timing_only);
}

void Session::load_weights(const QuantBundle& bundle) {
  if (timing_only_) fail("internal: a timing-only session takes no weights");
  comp_.load_weights(bundle, p_.ddr());
}

void Session::load_image_constants(const QuantBundle& bundle, const ImageShape& shape) {
  comp_.load_image_constants(bundle, shape, p_.ddr());
}

void Session::write_rope(sim::MemoryTarget& m, uint64_t cos_off, uint64_t sin_off,
                         std::span<const std::array<int, 3>> pos) {
  const ModelConfig& mc = comp_.model();
  std::vector<float> cos_t, sin_t;
  ops::rope_tables_mrope(pos, mc.text.head_dim, float(mc.text.rope_theta), mc.text.mrope_section, cos_t, sin_t);
  m.write(cos_off, cos_t.data(), cos_t.size() * 4);
  m.write(sin_off, sin_t.data(), sin_t.size() * 4);
}

void Session::write_prompt(std::span<const int> ids, std::span<const std::array<int, 3>> pos,
                           std::span<const float> patches, uint32_t first_slot) {
  const ImageIo& io = comp_.image_io();
  if (!timing_only_) {
    write_patches(patches);
    const uint64_t trope = io.trope_ddr - sim::kDdrRegion.base;
    write_rope(p_.ddr(), trope, trope + uint64_t(comp_.decode_io().max_seq) * comp_.model().text.head_dim * 4, pos);
  }
  p_.write_smem(io.ids_smem, ids.data(), uint32_t(ids.size() * 4));
  p_.write_smem(io.slot0_smem, &first_slot, 4);
}

void Session::write_patches(std::span<const float> patches) {
  if (timing_only_) return;
  std::vector<uint16_t> h(patches.size());
  for (size_t i = 0; i < h.size(); ++i) h[i] = f32_to_f16(patches[i]);
  p_.ddr().write(comp_.image_io().patches_ddr - sim::kDdrRegion.base, h.data(), h.size() * 2);
}

void Session::write_decode_args(int token, uint32_t slot, const std::array<int, 3>& pos) {
  const DecodeIo& io = comp_.decode_io();
  const uint32_t args[3] = {uint32_t(token), slot, slot + 1};
  p_.write_smem(io.token_smem, &args[0], 4);
  p_.write_smem(io.slot_smem, &args[1], 4);
  p_.write_smem(io.len_smem, &args[2], 4);
  if (!timing_only_) write_rope(p_.ocm(), io.cos_ocm, io.sin_ocm, std::span(&pos, 1));
}

const sim::Stats& Session::run(const CompiledProgram& program) {
  last_ = &program;
  return p_.run(program.program);
}

std::pair<sim::MemoryTarget*, uint64_t> Session::logits_at() const {
  if (!last_) fail("internal: no program has run in this session");
  if (last_->logits_ddr >= 0) return {&p_.ddr(), uint64_t(last_->logits_ddr)};
  return {&p_.ocm(), last_->logits_ocm};
}

std::vector<float> Session::logits() const {
  const auto [mem, at] = logits_at();
  std::vector<uint16_t> h(size_t(comp_.model().text.vocab_size));
  mem->read(at, h.data(), h.size() * 2);
  std::vector<float> l(h.size());
  for (size_t i = 0; i < h.size(); ++i) l[i] = f16_to_f32(h[i]);
  return l;
}

void Session::clear_logits() {
  const auto [mem, at] = logits_at();
  const std::vector<uint16_t> zeros(size_t(comp_.model().text.vocab_size), 0);
  mem->write(at, zeros.data(), zeros.size() * 2);
}

uint64_t Session::kv_offset(int layer, bool value, int head, uint32_t slot) const {
  const uint64_t hd = uint64_t(comp_.model().text.head_dim);
  return comp_.layout().at(fmt::format("L{}.{}cache", layer, value ? "v" : "k")).offset +
         (uint64_t(head) * comp_.decode_io().max_seq + slot) * hd * 2;
}

std::vector<uint16_t> Session::kv(int layer, bool value, int head, uint32_t n) const {
  std::vector<uint16_t> rows(size_t(n) * size_t(comp_.model().text.head_dim));
  p_.ddr().read(kv_offset(layer, value, head, 0), rows.data(), rows.size() * 2);
  return rows;
}

void Session::write_kv(int layer, bool value, int head, uint32_t slot, std::span<const uint16_t> elems,
                       uint32_t first) {
  p_.ddr().write(kv_offset(layer, value, head, slot) + uint64_t(first) * 2, elems.data(), elems.size() * 2);
}

void Session::write_ocm(uint32_t offset, const void* data, uint64_t bytes) { p_.ocm().write(offset, data, bytes); }
void Session::write_ddr(uint64_t offset, const void* data, uint64_t bytes) { p_.ddr().write(offset, data, bytes); }

std::vector<KernelRun> kernel_runs(const sim::Stats& st, const CompiledProgram& prog, const sim::Config& cfg,
                                   uint32_t context) {
  std::map<std::string, const KernelCall*> by_mark;
  for (const KernelCall& c : prog.calls) by_mark[c.mark] = &c;
  std::vector<KernelRun> runs;
  for (const sim::RegionCall& rc : st.calls()) {
    auto it = by_mark.find(st.names[rc.name]);
    if (it == by_mark.end()) continue;
    const kernels::KernelCost cost = it->second->at(context);
    runs.push_back({&rc, it->second, cost, kernels::floor_cycles(cfg, cost, !it->second->int8)});
  }
  return runs;
}

}  // namespace gpnpu::model
