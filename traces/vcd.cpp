#include "traces/vcd.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "isa/atomic_file.h"
#include "isa/error.h"
#include "sim/machine/memory_map.h"

namespace gpnpu::traces {

VcdWriter::VcdWriter(const std::string& path, const sim::Config& cfg)
    : path_(path), clock_(cfg.clock_ghz), queue_(cfg.dma_channels, 0) {
  // SystemC writes "<base>.vcd" as the simulation runs, to a temporary name renamed
  // at close (isa/atomic_file.h's rules): beside the target, or, for a target that
  // is not a regular file (/dev/null, a FIFO), in the temporary directory, copied
  // into the target at close.
  AtomicFile target(path);
  if (target.direct()) {
    std::error_code ec;
    base_ = (std::filesystem::temp_directory_path(ec) / fmt::format("gpnpu-vcd.tmp.{}", ::getpid())).string();
  } else {
    base_ = target.temp();
  }
  tmp_ = base_ + ".vcd";
  // SystemC opens the file at the first sc_start and throws sc_report (an abort
  // from inside the kernel) if it cannot: create it here for a clean error instead.
  std::FILE* probe = std::fopen(tmp_.c_str(), "wb");
  if (!probe)
    fail("cannot write VCD '{}': cannot create '{}': {} (check that the directory exists and is writable)", path,
         tmp_, std::strerror(errno));
  std::fclose(probe);
  temp_id_ = io::register_temp(tmp_);  // removed on SIGINT/SIGTERM (isa/io_rules.h)
  tf_ = sc_core::sc_create_vcd_trace_file(base_.c_str());
  if (!tf_) {
    std::remove(tmp_.c_str());
    fail("cannot create VCD file '{}'", path);
  }
  tf_->set_time_unit(1, sc_core::SC_PS);
  for (int u = 0; u < isa::kNumUnits; ++u)
    sc_core::sc_trace(tf_, busy_[u], fmt::format("busy_{}", isa::unit_name(isa::Unit(u))));
  sc_core::sc_trace(tf_, pc_, "pc");
  for (size_t c = 0; c < queue_.size(); ++c) sc_core::sc_trace(tf_, queue_[c], fmt::format("dma{}_queue", c));
  sc_core::sc_trace(tf_, inflight_, "ddr_bytes_in_flight");
  sc_core::sc_spawn_options opt;
  sc_core::sc_spawn([this] { thread(); }, sc_core::sc_gen_unique_name("vcd_probe"), &opt);
}

VcdWriter::~VcdWriter() {
  try {
    close();
  } catch (const Error&) {
  }
}

void VcdWriter::close() {
  if (closed_ || !tf_) return;
  closed_ = true;
  sc_core::sc_close_vcd_trace_file(tf_);
  // SystemC does not check its writes. A closing comment appended and flushed
  // after them fails if they did: a full disk or a file-size limit still holds.
  struct Remove {
    std::string p;
    int id;
    ~Remove() {
      io::unregister_temp(id);
      std::remove(p.c_str());  // a no-op once renamed
    }
  } remove_tmp{tmp_, temp_id_};
  auto failed = [&](int err) {
    fail("cannot write VCD '{}': {} (disk full or file too large?)", path_, std::strerror(err ? err : EIO));
  };
  std::FILE* f = std::fopen(tmp_.c_str(), "ab");
  if (!f) failed(errno);
  bool ok = std::fputs("$comment end of gpnpu VCD $end\n", f) >= 0 && std::fflush(f) == 0;
  int err = errno;
  if (std::fclose(f) != 0 && ok) {
    ok = false;
    err = errno;
  }
  if (!ok) failed(err);
  AtomicFile target(path_);
  if (target.direct()) {
    // Copy into the device or FIFO (the temporary lives elsewhere).
    std::FILE* in = std::fopen(tmp_.c_str(), "rb");
    std::FILE* out = in ? std::fopen(path_.c_str(), "wb") : nullptr;
    if (!out) {
      err = errno;
      if (in) std::fclose(in);
      fail("cannot write VCD '{}': {}", path_, std::strerror(err));
    }
    char buf[1 << 16];
    size_t n;
    ok = true;
    while (ok && (n = std::fread(buf, 1, sizeof buf, in)) > 0) ok = std::fwrite(buf, 1, n, out) == n;
    ok = ok && !std::ferror(in) && std::fflush(out) == 0;
    err = errno;
    std::fclose(in);
    if (std::fclose(out) != 0 && ok) {
      ok = false;
      err = errno;
    }
    if (!ok) failed(err);
    return;
  }
  // Same directory: the name SystemC wrote becomes AtomicFile's temporary.
  if (std::rename(tmp_.c_str(), target.temp().c_str()) != 0)
    fail("cannot write VCD '{}': {}", path_, std::strerror(errno));
  target.commit();
}

void VcdWriter::push(sim::Cycles at, Kind k, uint32_t index, int64_t delta) {
  if (closed_) return;
  bool earliest = q_.empty() || at < q_.top().at;
  q_.push(Change{at, seq_++, k, index, delta});
  if (earliest) wake_.notify(sc_core::SC_ZERO_TIME);
}

void VcdWriter::on_issue(const sim::IssueEvent& e, sim::Cycles base) {
  const isa::Unit u = e.insn->info->unit;
  sim::Cycles t = base + e.cycle;
  // Occupancy as the sequencer timed it (IssueEvent::cost), never recomputed here.
  push(t, busy, uint32_t(u), +1);
  push(t + std::max<uint64_t>(e.cost.occupancy, 1), busy, uint32_t(u), -1);
  push(t, pc, 0, e.pc);
  if (e.state->effect == isa::Effect::dma_start) push(t, queue, e.state->effect_arg, +1);
}

void VcdWriter::on_dma(const sim::DmaEvent& e) {
  if (e.kind == sim::DmaEvent::end) push(e.at, queue, e.channel, -1);
  if (e.kind == sim::DmaEvent::transfer && e.addr < sim::kDdrRegion.base + sim::kDdrRegion.window) {
    push(e.at, inflight, 0, int64_t(e.bytes));
    push(e.done, inflight, 0, -int64_t(e.bytes));
  }
}

void VcdWriter::thread() {
  for (;;) {
    sim::Cycles now = clock_.now();
    while (!q_.empty() && q_.top().at <= now) {
      Change c = q_.top();
      q_.pop();
      switch (c.kind) {
        case busy:
          busy_count_[c.index] += int(c.delta);
          busy_[c.index] = busy_count_[c.index] > 0;
          break;
        case pc: pc_ = uint32_t(c.delta); break;
        case queue:
          if (c.index < queue_.size()) queue_[c.index] = uint32_t(std::max<int64_t>(0, int64_t(queue_[c.index]) + c.delta));
          break;
        case inflight: inflight_ = uint64_t(int64_t(inflight_) + c.delta); break;
      }
    }
    if (q_.empty()) sc_core::wait(wake_);
    else sc_core::wait(clock_.to_time(q_.top().at) - sc_core::sc_time_stamp(), wake_);
  }
}

}  // namespace gpnpu::traces
