// The trace writers show exactly what the sequencer timed (issue 17, acceptance 2).
// One program with every unit class (programs/every_unit.s) runs in this process with
// a bare issue hook (what the sequencer issued, when, at what cost) and through the
// CLI with the instruction trace, the timeline and the VCD. The issue cycles of the
// text trace and of the timeline's sequencer track, the array and MAC tracks of the
// timeline, and every busy_<unit> signal of the VCD must equal the sequencer's; the
// array track must also add up to the sequencer's array_busy_cycles stat. On a second
// machine with other latencies, occupancies and OCM port width the issue cycles move,
// and the writers move with them.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <map>
#include <set>
#include <sstream>

#include "isa/program.h"
#include "sim/clock.h"
#include "sim/platform.h"
#include "trace_test_util.h"

namespace gpnpu::traces::test {
namespace {

const std::string kProgram = std::string(GPNPU_SOURCE_DIR) + "/tests/traces/programs/every_unit.s";

struct Issue {
  uint32_t pc;
  uint64_t cycle;
  isa::Unit unit;
  uint32_t occupancy;
};

struct SequencerView {
  std::vector<Issue> issues;
  uint64_t cycles = 0, array_busy = 0;
};

SequencerView run_in_process(const sim::Config& cfg) {
  sim::Platform& p = sim::Platform::get();
  p.configure(cfg, false);
  SequencerView v;
  p.sequencer().on_issue = [&](const sim::IssueEvent& e) {
    v.issues.push_back({e.pc, e.cycle, e.insn->info->unit, e.cost.occupancy});
  };
  isa::Program prog = isa::Program::load(kProgram);
  const sim::Stats& st = p.run(prog);
  p.sequencer().on_issue = nullptr;
  v.cycles = st.total[sim::Stat::cycles];
  v.array_busy = st.total[sim::Stat::array_busy_cycles];
  return v;
}

// A set of cycles as disjoint [begin, end) intervals.
using Intervals = std::map<uint64_t, uint64_t>;
Intervals merge(std::vector<std::pair<uint64_t, uint64_t>> v) {
  std::sort(v.begin(), v.end());
  Intervals out;
  for (auto [b, e] : v) {
    if (e <= b) continue;
    if (!out.empty()) {
      auto last = std::prev(out.end());
      if (b <= last->second) {
        last->second = std::max(last->second, e);
        continue;
      }
    }
    out[b] = e;
  }
  return out;
}

Intervals busy_of(const SequencerView& v, const std::function<bool(isa::Unit)>& which, uint64_t min_len = 0) {
  std::vector<std::pair<uint64_t, uint64_t>> iv;
  for (const Issue& i : v.issues)
    if (which(i.unit)) iv.push_back({i.cycle, i.cycle + std::max<uint64_t>(i.occupancy, min_len)});
  return merge(iv);
}

struct Writers {
  std::vector<std::pair<uint32_t, uint64_t>> text_issues, timeline_issues;  // (pc, cycle)
  Intervals array, mac;
  uint64_t array_total = 0, stats_cycles = 0;
  std::map<std::string, Intervals> vcd_busy;  // busy_<unit>, in cycles from the run's start
};

Writers run_cli_with_traces(const std::string& sets, const sim::Config& cfg) {
  const std::string t = temp_path("every_unit.txt"), tl = temp_path("every_unit.json"),
                    vcd = temp_path("every_unit.vcd"), st = temp_path("every_unit.stats.json");
  std::string out;
  EXPECT_EQ(run_cli("run " + kProgram + " -q " + sets + " --trace " + t + " --timeline " + tl + " --vcd " + vcd +
                        " --stats-json " + st,
                    out),
            0)
      << out;
  Writers w;
  std::istringstream text(read_text(t));
  for (std::string line; std::getline(text, line);) {
    std::istringstream ss(line);
    std::string cycle, unit, pc;
    ss >> cycle >> unit >> pc;
    if (pc.starts_with("pc=")) w.text_issues.push_back({uint32_t(std::stoul(pc.substr(3))), std::stoull(cycle)});
  }
  nlohmann::json j = nlohmann::json::parse(read_text(tl));
  std::vector<std::pair<uint64_t, uint64_t>> array, mac;
  for (const auto& e : j.at("traceEvents")) {
    if (e.at("ph") != "X") continue;
    const int tid = e.at("tid");
    const uint64_t b = e.at("args").at("cycle"), n = e.at("args").at("cycles");
    if (tid == 2 && !std::string(e.at("name")).starts_with("stall"))
      w.timeline_issues.push_back({uint32_t(e.at("args").at("pc")), b});
    if (tid == 3) {
      array.push_back({b, b + n});
      w.array_total += n;
    }
    if (tid == 4) mac.push_back({b, b + n});
  }
  w.array = merge(array);
  w.mac = merge(mac);
  w.stats_cycles = nlohmann::json::parse(read_text(st)).at("cycles");

  // VCD: the intervals where each busy_<unit> is 1.
  const uint64_t period = sim::Clock(cfg.clock_ghz).period_ps();
  std::map<std::string, std::string> name_of;  // id -> name
  std::map<std::string, uint64_t> rise;
  std::map<std::string, std::vector<std::pair<uint64_t, uint64_t>>> high;
  std::istringstream in(read_text(vcd));
  uint64_t time = 0;
  bool defs = true;
  for (std::string line; std::getline(in, line);) {
    std::istringstream ss(line);
    std::string tok;
    ss >> tok;
    if (defs) {
      if (tok == "$var") {
        std::string type, width, id, name;
        ss >> type >> width >> id >> name;
        if (name.starts_with("busy_")) name_of[id] = name;
      }
      if (tok == "$enddefinitions") defs = false;
      continue;
    }
    if (tok.starts_with("#")) time = std::stoull(tok.substr(1));
    if ((tok[0] == '0' || tok[0] == '1') && name_of.count(tok.substr(1))) {
      const std::string& name = name_of[tok.substr(1)];
      if (tok[0] == '1') rise[name] = time / period;
      else if (rise.count(name)) high[name].push_back({rise[name], time / period});
    }
  }
  for (auto& [name, iv] : high) w.vcd_busy[name] = merge(iv);
  return w;
}

void expect_agreement(const std::string& sets, const std::vector<std::string>& set_list, SequencerView* out) {
  const sim::Config cfg = sim::Config::make("qc-u", set_list);
  SequencerView seq = run_in_process(cfg);
  Writers w = run_cli_with_traces(sets, cfg);
  ASSERT_GT(seq.issues.size(), 40u);

  // Every unit class issued at least once.
  std::set<isa::Unit> units;
  for (const Issue& i : seq.issues) units.insert(i.unit);
  EXPECT_EQ(units.size(), size_t(isa::kNumUnits)) << "every_unit.s must exercise every unit class";

  // Issue cycles: the text trace and the timeline's sequencer track.
  std::vector<std::pair<uint32_t, uint64_t>> issued;
  for (const Issue& i : seq.issues) issued.push_back({i.pc, i.cycle});
  EXPECT_EQ(w.text_issues, issued) << "instruction trace vs sequencer";
  EXPECT_EQ(w.timeline_issues, issued) << "timeline sequencer track vs sequencer";
  EXPECT_EQ(w.stats_cycles, seq.cycles);

  // Occupancy: the timeline's array and MAC tracks, the VCD's busy flags.
  auto flag = [](uint8_t f) { return [f](isa::Unit u) { return (isa::unit_info(u).flags & f) != 0; }; };
  EXPECT_EQ(w.array, busy_of(seq, flag(isa::kArray))) << "timeline array track vs sequencer";
  EXPECT_EQ(w.array_total, seq.array_busy) << "timeline array track vs the sequencer's array_busy_cycles";
  EXPECT_EQ(w.mac, busy_of(seq, flag(isa::kMac))) << "timeline mac track vs sequencer";
  // The VCD counts cycles from the clock's start; this CLI process runs once, from 0.
  for (int u = 0; u < isa::kNumUnits; ++u) {
    const std::string name = "busy_" + std::string(isa::unit_name(isa::Unit(u)));
    EXPECT_EQ(w.vcd_busy[name], busy_of(seq, [u](isa::Unit x) { return int(x) == u; }, 1)) << "VCD " << name;
  }

  // The port rule, stated here on its own: an OCM form holds the port for its bytes.
  const isa::Program prog = isa::Program::load(kProgram);
  const std::vector<isa::Insn> insns = prog.decode();
  const uint64_t port = cfg.ocm_port_bytes, npe = cfg.npe();
  auto ceil_div = [](uint64_t a, uint64_t b) { return (a + b - 1) / b; };
  int checked = 0;
  for (const Issue& i : seq.issues) {
    const isa::Insn& in = insns[i.pc];
    const std::string mn = in.info->mnemonic;
    const uint64_t pes = in.p ? 8 : npe;  // @p1 enables PEs 0..7
    uint64_t want = 0;
    if (mn == "obcast") want = std::max<uint64_t>(cfg.occ(isa::Unit::ocm_bc), ceil_div(64, port));
    if (mn == "obcast.g")  // (every PE in groups of 128; @p1: PEs 0..7 in groups of 2)
      want = std::max<uint64_t>(cfg.occ(isa::Unit::ocm_gb), ceil_div(64 * (in.p ? 4 : npe / 128), port));
    if (mn == "oscatter") want = std::max<uint64_t>(cfg.occ(isa::Unit::ocm_rd), ceil_div(64 * pes, port));
    if (mn == "ogather") want = std::max<uint64_t>(cfg.occ(isa::Unit::ocm_wr), ceil_div(64 * pes, port));
    if (mn == "ogather.h") want = std::max<uint64_t>(cfg.occ(isa::Unit::ocm_wr), ceil_div(32 * pes, port));
    if (mn == "vmul.f32") want = cfg.occ(isa::Unit::vfpu);
    if (!want) continue;
    EXPECT_EQ(i.occupancy, want) << mn << " at pc " << i.pc;
    ++checked;
  }
  EXPECT_EQ(checked, 8);
  *out = seq;
}

TEST(TimingAgreement, TraceWritersShowWhatTheSequencerIssued) {
  SequencerView base, changed;
  expect_agreement("", {}, &base);
  // Another machine: the latencies, occupancies and port width every_unit.s depends on.
  const std::vector<std::string> sets = {"lat.vfpu=13", "occ.vfpu=5", "occ.sfu=11", "lat.xlane=9", "occ.mac16=6",
                                         "lat.lrm=7", "ocm_port_bytes=128", "lat.ocm_rd=20"};
  std::string cli;
  for (const std::string& s : sets) cli += " --set " + s;
  expect_agreement(cli, sets, &changed);
  // Both moved together: the issue cycles changed, and the writers followed (above).
  ASSERT_EQ(base.issues.size(), changed.issues.size());
  int moved = 0;
  for (size_t k = 0; k < base.issues.size(); ++k) moved += base.issues[k].cycle != changed.issues[k].cycle;
  EXPECT_GT(moved, 20) << "the changed machine must move the issue cycles";
  EXPECT_GT(changed.cycles, base.cycles);
}

}  // namespace
}  // namespace gpnpu::traces::test
