#include "traces/timeline.h"

#include <algorithm>

#include <fmt/format.h>

#include "isa/state.h"
#include "sim/clock.h"
#include "sim/machine/memory_map.h"
#include "sim/run.h"

namespace gpnpu::traces {

namespace {
std::string escape(std::string_view s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    if (uint8_t(c) < 0x20) {
      o += fmt::format("\\u{:04x}", int(c));
      continue;
    }
    o += c;
  }
  return o;
}
}  // namespace

Timeline::Timeline(const sim::Config& cfg, const isa::Program& program, const TraceFilter& filter, Warn warn)
    : cfg_(cfg), program_(program), track_end_(64, 0), match_(filter, program), warn_(std::move(warn)) {
  us_per_cycle_ = double(sim::Clock(cfg.clock_ghz).period_ps()) * 1e-6;
  const TraceFilter all;
  filtered_ = !filter.mark.empty() || filter.pc_lo != all.pc_lo || filter.pc_hi != all.pc_hi ||
              filter.cycle_lo != all.cycle_lo || filter.cycle_hi != all.cycle_hi;
}

void Timeline::add(uint32_t track, uint64_t begin, uint64_t end, const char* name, uint32_t pc, std::string label) {
  if (!open_) return;
  begin = std::max(begin, track_end_[track]);
  if (end <= begin) return;
  track_end_[track] = end;
  last_cycle_ = std::max(last_cycle_, end);
  kept_begin_ = std::min(kept_begin_, begin);
  slices_.push_back(Slice{track, begin, end, name, pc, std::move(label)});
  if (warn_ && estimated_bytes() >= warn_at_) {
    warn_(fmt::format("timeline: {} slices so far, about {:.0f} MB of JSON to write (and as much memory); narrow it "
                      "with --trace-filter mark=NAME, pc=LO:HI or cycle=LO:HI", slices_.size(), estimated_bytes() / 1e6));
    warn_at_ *= 2;
  }
}

void Timeline::on_issue(const sim::IssueEvent& e) {
  const isa::OpInfo& op = *e.insn->info;
  const isa::Unit u = op.unit;
  open_ = match_.on_issue(e);
  if (!open_) {
    next_issue_ = e.cycle + 1;  // no stall slice reaches back across filtered-out instructions
    return;
  }
  if (e.cycle > next_issue_) add(sequencer, next_issue_, e.cycle, nullptr, e.pc, fmt::format("stall: {}", op.mnemonic));
  add(sequencer, e.cycle, e.cycle + 1, op.mnemonic, e.pc);
  next_issue_ = e.cycle + 1;
  // Occupancy as the sequencer timed it (IssueEvent::cost), never recomputed here.
  const isa::UnitInfo& ui = isa::unit_info(u);
  if (ui.flags & isa::kArray) {
    add(array, e.cycle, e.cycle + e.cost.occupancy, op.mnemonic, e.pc);
    if (ui.flags & isa::kMac) add(mac, e.cycle, e.cycle + e.cost.occupancy, op.mnemonic, e.pc);
  }
}

void Timeline::on_dma(const sim::DmaEvent& e, sim::Cycles base) {
  auto rel = [&](sim::Cycles c) { return c >= base ? c - base : 0; };
  if (e.channel + 1 > max_channel_) max_channel_ = e.channel + 1;
  uint32_t track = dma0 + std::min<uint32_t>(e.channel, 40);
  switch (e.kind) {
    case sim::DmaEvent::begin:
    case sim::DmaEvent::end: break;  // below
    case sim::DmaEvent::transfer: {
      if (e.addr >= sim::kDdrRegion.base + sim::kDdrRegion.window) break;  // not a DDR run
      if (!open_) break;                                                     // filtered out
      // The port's busy interval as the DDR target's port model served the run.
      uint64_t begin = rel(e.port_begin), end = rel(e.port_end);
      ddr_busy_.emplace_back(begin, end);
      ddr_bytes_.push_back(e.bytes);
      add(ddr, begin, end, nullptr, UINT32_MAX,
          fmt::format("{} {} B (c{})", e.write ? "write" : "read", e.bytes, e.channel));
      break;
    }
  }
  // A descriptor's slice runs from its channel taking it to its completion.
  if (e.kind == sim::DmaEvent::begin) {
    pending_begin_.resize(std::max<size_t>(pending_begin_.size(), e.channel + 1));
    pending_begin_[e.channel] = rel(e.at);
  } else if (e.kind == sim::DmaEvent::end) {
    const isa::DmaDescriptor& d = *e.desc;
    uint64_t b = e.channel < pending_begin_.size() ? pending_begin_[e.channel] : rel(e.at);
    add(track, b, std::max(rel(e.at), b + 1), nullptr, UINT32_MAX,
        fmt::format("0x{:08x} -> 0x{:08x} {} B ({}x{}x{})", d.src, d.dst, d.bytes(), d.row_bytes, d.rows, d.planes));
  }
}

std::string Timeline::json(const sim::Stats& stats) const {
  std::string o;
  o.reserve(slices_.size() * 120 + 4096);
  o += "{\"displayTimeUnit\":\"ns\",\"otherData\":{\"generator\":\"gpnpu --timeline\",";
  o += fmt::format("\"clock_ghz\":{},\"preset\":\"{}\"}},\n\"traceEvents\":[\n", cfg_.clock_ghz, escape(cfg_.preset));
  auto meta = [&](uint32_t tid, const std::string& name) {
    o += fmt::format("{{\"ph\":\"M\",\"pid\":1,\"tid\":{},\"name\":\"thread_name\",\"args\":{{\"name\":\"{}\"}}}},\n", tid, name);
    o += fmt::format("{{\"ph\":\"M\",\"pid\":1,\"tid\":{},\"name\":\"thread_sort_index\",\"args\":{{\"sort_index\":{}}}}},\n", tid, tid);
  };
  o += "{\"ph\":\"M\",\"pid\":1,\"name\":\"process_name\",\"args\":{\"name\":\"gpnpu\"}},\n";
  meta(marks, "marks");
  meta(sequencer, "sequencer");
  meta(array, "array");
  meta(mac, "mac");
  meta(ddr, "ddr port");
  uint32_t channels = std::max<uint32_t>(max_channel_, uint32_t(cfg_.dma_channels));
  for (uint32_t c = 0; c < channels; ++c) meta(dma0 + c, fmt::format("dma c{}", c));
  auto slice = [&](uint32_t tid, uint64_t b, uint64_t e, std::string_view name, const std::string& args) {
    o += fmt::format("{{\"ph\":\"X\",\"pid\":1,\"tid\":{},\"ts\":{:.6f},\"dur\":{:.6f},\"name\":\"{}\",\"args\":{{\"cycle\":{},\"cycles\":{}{}}}}},\n",
                     tid, double(b) * us_per_cycle_, double(e - b) * us_per_cycle_, escape(name), b, e - b, args);
  };
  // Marks: parents before children (calls are recorded at their end, children first).
  std::vector<const sim::RegionCall*> calls;
  for (const sim::RegionCall& c : stats.calls()) calls.push_back(&c);
  std::stable_sort(calls.begin(), calls.end(), [](auto* a, auto* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->depth < b->depth;
  });
  const uint64_t span_lo = filtered_ ? kept_begin_ : 0, span_hi = filtered_ ? last_cycle_ : UINT64_MAX;
  for (const sim::RegionCall* c : calls) {
    if (filtered_ && (c->end <= span_lo || c->begin >= span_hi)) continue;  // outside what the filter kept
    std::string name = c->name < stats.names.size() ? stats.names[c->name] : fmt::format("#{}", c->name);
    // Filtered: an enclosing mark is clipped to the span kept (it says where the span is).
    const uint64_t b = std::max<uint64_t>(c->begin, span_lo), e = std::min<uint64_t>(c->end, span_hi);
    slice(marks, b, std::max(e, b + 1), name,
          fmt::format(",\"depth\":{},\"instructions\":{},\"ddr_bytes_read\":{}", c->depth,
                      c->counters[sim::Stat::instructions], c->counters[sim::Stat::ddr_bytes_read]));
  }
  for (const Slice& s : slices_) {
    std::string args = s.pc != UINT32_MAX ? fmt::format(",\"pc\":{}", s.pc) : "";
    slice(s.track, s.begin, s.end, s.name ? std::string_view(s.name) : std::string_view(s.label), args);
  }
  // DDR bandwidth: bytes delivered per bin, spread evenly over each request's busy time.
  uint64_t end = filtered_ ? last_cycle_ : std::max(last_cycle_, stats.total[sim::Stat::cycles]);
  uint64_t bin = std::max<uint64_t>(64, (end + 1999) / 2000);
  std::vector<double> bytes(end / bin + 2, 0.0);
  for (size_t i = 0; i < ddr_busy_.size(); ++i) {
    auto [b, e] = ddr_busy_[i];
    if (e <= b) {
      bytes[b / bin] += double(ddr_bytes_[i]);
      continue;
    }
    double per_cycle = double(ddr_bytes_[i]) / double(e - b);
    for (uint64_t t = b; t < e;) {
      uint64_t k = t / bin, next = std::min(e, (k + 1) * bin);
      bytes[k] += per_cycle * double(next - t);
      t = next;
    }
  }
  double gbps_per_byte_per_cycle = cfg_.clock_ghz;  // B/cycle x Gcycle/s = GB/s
  for (size_t k = 0; k < bytes.size(); ++k)
    if (!filtered_ || ((k + 1) * bin > span_lo && k * bin <= span_hi))
      o += fmt::format("{{\"ph\":\"C\",\"pid\":1,\"name\":\"ddr bandwidth\",\"ts\":{:.6f},\"args\":{{\"GB/s\":{:.4f}}}}},\n",
                     double(k * bin) * us_per_cycle_, bytes[k] / double(bin) * gbps_per_byte_per_cycle);
  o += fmt::format("{{\"ph\":\"i\",\"pid\":1,\"tid\":{},\"s\":\"p\",\"name\":\"end\",\"ts\":{:.6f}}}\n]}}\n", sequencer,
                   double(end) * us_per_cycle_);
  return o;
}

void Timeline::write(const std::string& path, const sim::Stats& stats) const {
  if (warn_ && filtered_ && slices_.empty())
    warn_(fmt::format("timeline: the --trace-filter kept no instruction; {} holds no slice", path));
  if (warn_ && estimated_bytes() >= 64000000)
    warn_(fmt::format("timeline: writing {} slices, about {:.0f} MB, to {} ...", slices_.size(), estimated_bytes() / 1e6,
                      path));
  sim::write_file_atomic(path, json(stats));
}

}  // namespace gpnpu::traces
