#include "traces/hazards.h"

#include <algorithm>

#include <fmt/format.h>

#include "isa/state.h"
#include "sim/dma.h"
#include "sim/machine/memory_map.h"
#include "traces/insn_trace.h"

namespace gpnpu::traces {

namespace {
using sim::for_runs;  // the DMA engine's own rule for contiguous runs
bool in_ocm(uint64_t bus) { return bus >= sim::kOcmRegion.base && bus < sim::kOcmRegion.base + sim::kOcmRegion.window; }
}  // namespace

HazardChecker::HazardChecker(const sim::Config& cfg, const isa::Program& program)
    : cfg_(cfg),
      program_(program),
      disasm_(disassemble_all(program)),
      ocm_bytes_(cfg.ocm_bytes),
      npe_(cfg.npe()),
      lrm_bytes_(uint32_t(cfg.lrm_bytes)),
      ocm_writer_(cfg.ocm_bytes, 0),
      ocm_reader_(cfg.ocm_bytes, 0),
      lrm_written_(size_t(cfg.npe()) * cfg.lrm_bytes, 0),
      channel_q_(cfg.dma_channels),
      unsynced_(cfg.dma_channels) {
  writers_.push_back(Writer{});                    // 0: never written
  writers_.push_back(Writer{Writer::by_host, 0, 0, 0, true, true});  // 1: the host
}

void HazardChecker::host_wrote_ocm(uint64_t offset, uint64_t bytes) {
  uint64_t end = std::min(offset + bytes, ocm_bytes_);
  if (offset < end) std::fill(ocm_writer_.begin() + offset, ocm_writer_.begin() + end, 1u);
}

void HazardChecker::host_wrote_lrm(uint64_t offset, uint64_t bytes) {
  uint64_t end = std::min<uint64_t>(offset + bytes, lrm_bytes_);
  for (uint32_t e = 0; e < npe_ && offset < end; ++e)
    std::fill(lrm_written_.begin() + size_t(e) * lrm_bytes_ + offset, lrm_written_.begin() + size_t(e) * lrm_bytes_ + end, 1);
}

std::string HazardChecker::where(uint32_t pc, uint64_t cycle) const {
  std::string mark = marks_.empty() || marks_.back() >= program_.names.size() ? "" : program_.names[marks_.back()];
  return fmt::format("pc {} `{}` (cycle {}{})", pc, pc < disasm_.size() ? disasm_[pc] : "?", cycle,
                     mark.empty() ? "" : fmt::format(", mark \"{}\"", mark));
}

std::string HazardChecker::dma_name(uint32_t d) const {
  const Dma& x = dmas_[d];
  return fmt::format("DMA c{} started by pc {} `{}` at cycle {}", x.channel, x.pc, x.insn, x.cycle);
}

bool HazardChecker::in_flight(uint32_t writer) const {
  const Writer& w = writers_[writer];
  return w.who == Writer::by_dma && !dmas_[w.dma].synced;
}

void HazardChecker::add(const std::string& kind, uint32_t pc, uint64_t cycle, std::string message, uint32_t dma,
                        std::string after) {
  auto key = std::make_pair(kind, pc);
  auto it = seen_.find(key);
  if (it != seen_.end()) {
    hazards_[it->second].count++;
    return;
  }
  seen_[key] = hazards_.size();
  Hazard h;
  h.kind = kind;
  h.pc = pc;
  h.cycle = cycle;
  h.mark = marks_.empty() || marks_.back() >= program_.names.size() ? "" : program_.names[marks_.back()];
  h.count = 1;
  h.message = std::move(message);
  if (dma != UINT32_MAX) pending_.push_back(Pending{hazards_.size(), dma, h.message, std::move(after)});
  hazards_.push_back(std::move(h));
}

void HazardChecker::array_read(uint32_t pc, uint64_t cycle, uint64_t off, uint64_t bytes, uint32_t pe) {
  uint64_t end = std::min(off + bytes, ocm_bytes_);
  bool any = false;
  uint32_t last = UINT32_MAX;
  for (uint64_t b = off; b < end; ++b) {
    uint32_t w = ocm_writer_[b];
    if (w == last) continue;
    last = w;
    if (!w) continue;
    any = true;
    writers_[w].consumed = true;
    if (!said_read_ && in_flight(w)) {
      said_read_ = true;
      uint32_t d = writers_[w].dma;
      add("read-during-dma", pc, cycle,
          fmt::format("{}: array read of OCM [0x{:x}, 0x{:x}) (PE {}) while {} writes it", where(pc, cycle), off, end, pe,
                      dma_name(d)),
          d, fmt::format("; wait for it with `dma.wait c{}` before reading", dmas_[d].channel));
    }
  }
  if (!any && !said_never_ && end > off) {
    said_never_ = true;
    add("never-written", pc, cycle,
        fmt::format("{}: array read of OCM [0x{:x}, 0x{:x}) (PE {}) that nothing ever wrote (not the host, a DMA or an array store)",
                    where(pc, cycle), off, end, pe));
  }
}

void HazardChecker::array_write(uint32_t pc, uint64_t cycle, uint64_t off, uint64_t bytes, uint32_t writer) {
  uint64_t end = std::min(off + bytes, ocm_bytes_);
  for (uint64_t b = off; b < end; ++b) {
    if (!said_write_) {
      uint32_t r = ocm_reader_[b];
      if (r && !dmas_[r - 1].synced) {
        said_write_ = true;
        add("write-during-dma", pc, cycle,
            fmt::format("{}: array write of OCM [0x{:x}, 0x{:x}) while {} is still reading it; wait for it with `dma.wait c{}` first",
                        where(pc, cycle), off, end, dma_name(r - 1), dmas_[r - 1].channel));
      } else if (in_flight(ocm_writer_[b])) {
        said_write_ = true;
        uint32_t d = writers_[ocm_writer_[b]].dma;
        add("write-during-dma", pc, cycle,
            fmt::format("{}: array write of OCM [0x{:x}, 0x{:x}) while {} is still writing it; wait for it with `dma.wait c{}` first",
                        where(pc, cycle), off, end, dma_name(d), dmas_[d].channel));
      }
    }
    ocm_writer_[b] = writer;
  }
}

void HazardChecker::dma_started(uint32_t pc, uint64_t cycle, uint32_t channel, const isa::DmaDescriptor& d) {
  const uint32_t id = uint32_t(dmas_.size());
  const uint32_t writer = uint32_t(writers_.size());
  dmas_.push_back(Dma{channel, pc, writer, cycle, UINT64_MAX, false, pc < disasm_.size() ? disasm_[pc] : "?"});
  writers_.push_back(Writer{Writer::by_dma, pc, cycle, id, false, false});
  if (channel < channel_q_.size()) {
    channel_q_[channel].push_back(id);
    unsynced_[channel].push_back(id);
  }
  bool said_src = false, said_dst = false, said_never = false;
  if (in_ocm(d.src)) {
    for_runs(d.src, d, d.src_stride, d.src_plane_stride, [&](uint64_t bus, uint64_t n) {
      uint64_t off = bus - sim::kOcmRegion.base, end = std::min(off + n, ocm_bytes_);
      bool any = false;
      for (uint64_t b = off; b < end; ++b) {
        uint32_t w = ocm_writer_[b];
        if (w) {
          any = true;
          writers_[w].consumed = true;
          if (!said_src && in_flight(w)) {
            said_src = true;
            uint32_t o = writers_[w].dma;
            add("dma-during-dma", pc, cycle,
                fmt::format("{}: DMA c{} reads OCM [0x{:x}, 0x{:x}) while {} writes it", where(pc, cycle), channel, off, end,
                            dma_name(o)),
                o, fmt::format("; wait for it with `dma.wait c{}` first", dmas_[o].channel));
          }
        }
        ocm_reader_[b] = id + 1;
      }
      if (!any && !said_never && end > off) {
        said_never = true;
        add("never-written", pc, cycle,
            fmt::format("{}: DMA c{} reads OCM [0x{:x}, 0x{:x}) that nothing ever wrote", where(pc, cycle), channel, off, end));
      }
    });
  }
  if (in_ocm(d.dst)) {
    for_runs(d.dst, d, d.dst_stride, d.dst_plane_stride, [&](uint64_t bus, uint64_t n) {
      uint64_t off = bus - sim::kOcmRegion.base, end = std::min(off + n, ocm_bytes_);
      for (uint64_t b = off; b < end; ++b) {
        uint32_t w = ocm_writer_[b];
        Writer& old = writers_[w];
        if (w == writer) continue;  // overlapping runs of this very descriptor
        if (!said_dst && in_flight(w)) {
          said_dst = true;
          add("dma-during-dma", pc, cycle,
              fmt::format("{}: DMA c{} writes OCM [0x{:x}, 0x{:x}) while {} writes it too", where(pc, cycle), channel, off,
                          end, dma_name(old.dma)),
              old.dma, fmt::format("; wait for it with `dma.wait c{}` first", dmas_[old.dma].channel));
        } else if (w > 1 && !old.consumed && !old.reported) {
          old.reported = true;
          std::string by = old.who == Writer::by_dma ? dma_name(old.dma)
                                                  : fmt::format("the array store at pc {} `{}` (cycle {})", old.pc,
                                                                old.pc < disasm_.size() ? disasm_[old.pc] : "?", old.cycle);
          add("dma-overwrite", pc, cycle,
              fmt::format("{}: DMA c{} overwrites OCM [0x{:x}, 0x{:x}) holding data written by {} that nothing has read yet; consume it (or wait for its reader) before refilling the buffer",
                          where(pc, cycle), channel, off, end, by));
        }
        uint32_t r = ocm_reader_[b];
        if (!said_dst && r && r - 1 != id && !dmas_[r - 1].synced) {
          said_dst = true;
          add("dma-during-dma", pc, cycle,
              fmt::format("{}: DMA c{} writes OCM [0x{:x}, 0x{:x}) while {} is still reading it; wait for it with `dma.wait c{}` first",
                          where(pc, cycle), channel, off, end, dma_name(r - 1), dmas_[r - 1].channel));
        }
      }
      if (off < end) std::fill(ocm_writer_.begin() + off, ocm_writer_.begin() + end, writer);
    });
  }
}

void HazardChecker::sync(int channel) {
  for (size_t c = 0; c < unsynced_.size(); ++c) {
    if (channel >= 0 && size_t(channel) != c) continue;
    for (uint32_t d : unsynced_[c]) dmas_[d].synced = true;
    unsynced_[c].clear();
  }
}

void HazardChecker::on_issue(const sim::IssueEvent& e) {
  const isa::ArchState& s = *e.state;
  const isa::Insn& in = *e.insn;
  const isa::OpInfo& op = *in.info;
  const isa::Unit u = op.unit;
  if (s.effect == isa::Effect::mark_begin) marks_.push_back(s.effect_arg);
  said_read_ = said_write_ = said_never_ = false;
  if (op.mem_bytes) {  // an array memory row (INSN_MEM of isa_table.def)
    const uint32_t addr = s.x[in.b] + uint32_t(in.imm);
    const uint32_t bytes = op.mem_bytes;
    const uint8_t* pr = s.predicate(in.p);
    switch (u) {
      case isa::Unit::ocm_bc: array_read(e.pc, e.cycle, addr, bytes, 0); break;
      case isa::Unit::ocm_gb: {  // a row per group of x[d] PEs (obcast.g)
        const uint32_t stride = s.x[in.c], group = s.x[in.d];
        for (uint32_t pe = 0; group && pe < npe_; ++pe)
          if (pr[pe] && (pe == 0 || pe % group == 0 || !pr[pe - 1]))  // (the first PE of a group it reads for)
            array_read(e.pc, e.cycle, isa::pe_address(addr, pe / group, stride), bytes, pe);
        break;
      }
      case isa::Unit::ocm_rd: {
        const uint32_t stride = s.x[in.c];
        for (uint32_t pe = 0; pe < npe_; ++pe)
          if (pr[pe]) array_read(e.pc, e.cycle, isa::pe_address(addr, pe, stride), bytes, pe);
        break;
      }
      case isa::Unit::ocm_wr: {
        const uint32_t stride = s.x[in.c];
        const uint32_t writer = uint32_t(writers_.size());
        writers_.push_back(Writer{Writer::by_array, e.pc, e.cycle, 0, false, false});
        for (uint32_t pe = 0; pe < npe_; ++pe)
          if (pr[pe]) array_write(e.pc, e.cycle, isa::pe_address(addr, pe, stride), bytes, writer);
        break;
      }
      case isa::Unit::lrm: {
        if (uint64_t(addr) + bytes > lrm_bytes_) break;
        const bool store = op.ops[0].access == 0;
        for (uint32_t pe = 0; pe < npe_; ++pe) {
          if (!pr[pe]) continue;
          uint8_t* m = &lrm_written_[size_t(pe) * lrm_bytes_ + addr];
          if (store) {
            std::fill(m, m + bytes, 1);
          } else if (!said_never_ && std::find(m, m + bytes, 1) == m + bytes) {
            said_never_ = true;
            add("never-written", e.pc, e.cycle,
                fmt::format("{}: LRM read [0x{:x}, 0x{:x}) of PE {} that nothing ever wrote", where(e.pc, e.cycle), addr,
                            addr + bytes, pe));
          }
        }
        break;
      }
      default: break;
    }
  }
  switch (s.effect) {
    case isa::Effect::dma_start: dma_started(e.pc, e.cycle, s.effect_arg, s.dma); break;
    case isa::Effect::dma_wait: sync(int(s.effect_arg)); break;
    case isa::Effect::dma_waitall:
    case isa::Effect::halt: sync(-1); break;
    case isa::Effect::mark_end:
      if (!marks_.empty()) marks_.pop_back();
      break;
    default: break;
  }
}

void HazardChecker::on_dma(const sim::DmaEvent& e, sim::Cycles base) {
  if (e.kind != sim::DmaEvent::end || e.channel >= channel_q_.size() || channel_q_[e.channel].empty()) return;
  uint32_t d = channel_q_[e.channel].front();
  channel_q_[e.channel].pop_front();
  dmas_[d].complete = e.at >= base ? e.at - base : 0;
}

std::vector<Hazard> HazardChecker::hazards() const {
  std::vector<Hazard> out = hazards_;
  for (const Pending& p : pending_) {
    const Dma& d = dmas_[p.dma];
    const Hazard& h = out[p.hazard];
    std::string when;
    if (d.complete == UINT64_MAX) when = " (it had not completed when the run stopped)";
    else if (d.complete > h.cycle) when = fmt::format(" and is still running (it completes at cycle {})", d.complete);
    else
      when = fmt::format(" (it completed at cycle {} but the program never waited for it, so what the array sees depends on simulation order)",
                         d.complete);
    out[p.hazard].message = p.before + when + p.after;
  }
  for (Hazard& h : out)
    if (h.count > 1) h.message += fmt::format(" [{} times at this pc]", h.count);
  return out;
}

std::string HazardChecker::report() const {
  std::vector<Hazard> hs = hazards();
  if (hs.empty()) return "hazards: none found\n";
  std::string s = fmt::format("hazards: {} found\n", hs.size());
  for (const Hazard& h : hs) s += fmt::format("hazard {}: {}\n", h.kind, h.message);
  return s;
}

}  // namespace gpnpu::traces
