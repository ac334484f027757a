// Instruction trace (acceptance 1): the lines of a known program, the binary form
// read back as the same text, the filters; the timeline JSON has every track; the
// VCD parses and shows the signals moving.
#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "isa/error.h"
#include "sim/platform.h"
#include "trace_test_util.h"
#include "traces/session.h"

namespace gpnpu::traces::test {
namespace {

const std::string kPrograms = std::string(GPNPU_SOURCE_DIR) + "/tests/traces/programs/";

// Runs `program` on `preset` with the options; returns the stats.
sim::Stats run_with(const isa::Program& program, const char* preset, const TraceOptions& o) {
  sim::Platform& p = sim::Platform::get();
  p.configure(sim::Config::make(preset, {}), false);
  TraceSession s(p, program, o);
  sim::Stats st = p.run(program);
  s.finish(st);
  return st;
}

std::string strip_hashes(const std::string& s) { return std::regex_replace(s, std::regex(" #[0-9a-f]{16}"), ""); }

std::vector<std::string> texts(const std::vector<TraceLine>& lines) {
  std::vector<std::string> out;
  for (const TraceLine& l : lines) out.push_back(l.text);
  return out;
}

std::string lanes(const char* hex) {
  std::string s;
  for (int i = 0; i < 16; ++i) s += std::string(i ? " " : "") + hex;
  return s;
}

// The trace of known.s, line by line, as the timing model (docs/architecture.md)
// and the semantics fix it: valu results are ready 2 cycles after issue, the
// hardware loop has no back-edge cost, p1 enables PEs 0..2.
std::vector<std::string> known_lines() {
  auto L = [](uint64_t c, const char* u, uint32_t pc, const char* insn, const std::string& w) {
    return format_line(c, u, pc, insn, w);
  };
  return {
      L(0, "scalar", 0, "li x1, 3", "x1=0x00000003"),
      L(1, "scalar", 1, "li x2, 256", "x2=0x00000100"),
      L(2, "valu", 2, "vsplati v1, 7", "v1[pe0]=" + lanes("00000007")),
      L(3, "ctrl", 3, "mark.begin \"body\"", "mark.begin body"),
      L(4, "branch", 4, "loop x1, L6", ""),
      L(5, "scalar", 5, "addi x2, x2, 4", "x2=0x00000104"),
      L(6, "scalar", 5, "addi x2, x2, 4", "x2=0x00000108"),
      L(7, "scalar", 5, "addi x2, x2, 4", "x2=0x0000010c"),
      L(8, "ctrl", 6, "mark.end \"body\"", "mark.end body"),
      L(9, "valu", 7, "vadd.i32 v2, v1, v1", "v2[pe0]=" + lanes("0000000e")),
      L(11, "valu", 8, "vadd.i32 v3, v2, v2", "v3[pe0]=" + lanes("0000001c")),
      L(12, "smem", 9, "sw x2, 8(x0)", "smem[0x8]=0x0000010c"),
      L(13, "scalar", 10, "li x9, 4", "x9=0x00000004"),
      L(14, "pred", 11, "pset.range p1, x0, x1", "p1=3pe"),
      L(15, "ocm_wr", 12, "ogather.w1 v3, 64(x0), x9 @p1", "ocm[0x40,+4)x3pe/4"),
      L(16, "ctrl", 13, "halt", ""),
  };
}

TEST(InsnTrace, KnownProgramLineByLine) {
  isa::Program prog = isa::Program::load(kPrograms + "known.s");
  TraceOptions o;
  o.trace = temp_path("known.trace");
  run_with(prog, "mini", o);
  std::vector<TraceLine> got = read_trace(o.trace);
  std::vector<std::string> want = known_lines();
  ASSERT_EQ(got.size(), want.size()) << read_text(o.trace);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(strip_hashes(got[i].text), want[i]) << "line " << i;
  // The text really is greppable: one line per instruction, the header commented.
  std::string text = read_text(o.trace);
  EXPECT_TRUE(text.starts_with("# gpnpu instruction trace"));
  EXPECT_NE(text.find("pc=5     addi x2, x2, 4"), std::string::npos);
  // Vector hashes cover every PE: v1 (all 7) and v2 (all 14) differ.
  EXPECT_NE(got[2].writes.substr(got[2].writes.find('#')), got[9].writes.substr(got[9].writes.find('#')));
}

TEST(InsnTrace, NegativeControlAChangedProgramFailsTheLineCheck) {
  // The same check must fail for a program that differs in one immediate.
  std::string src = read_text(kPrograms + "known.s");
  src.replace(src.find("addi x2, x2, 4"), 14, "addi x2, x2, 5");
  isa::Program prog = isa::assemble(src, "known_changed.s");
  TraceOptions o;
  o.trace = temp_path("known_changed.trace");
  run_with(prog, "mini", o);
  std::vector<TraceLine> got = read_trace(o.trace);
  std::vector<std::string> want = known_lines();
  size_t mismatches = 0;
  for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) mismatches += strip_hashes(got[i].text) != want[i];
  EXPECT_GE(mismatches, 3u);
}

TEST(InsnTrace, BinaryFormReadsBackAsTheSameText) {
  isa::Program prog = isa::Program::load(kPrograms + "dma_mac.s");
  TraceOptions t, b;
  t.trace = temp_path("dma_mac.trace");
  b.trace = temp_path("dma_mac.gtrc");
  run_with(prog, "qc-u", t);
  run_with(prog, "qc-u", b);
  std::vector<TraceLine> lt = read_trace(t.trace), lb = read_trace(b.trace);
  ASSERT_EQ(lt.size(), 442u);  // every issued instruction (the stats count 442)
  EXPECT_EQ(texts(lt), texts(lb));
  auto size = [](const std::string& p) { return std::filesystem::file_size(p); };
  EXPECT_LT(size(b.trace) * 2, size(t.trace)) << "binary " << size(b.trace) << " B, text " << size(t.trace) << " B";
  EXPECT_NE(trace_header(b.trace).find("dma_mac.s"), std::string::npos);
  // No temporary file is left behind.
  EXPECT_FALSE(std::filesystem::exists(b.trace + ".tmp"));
}

TEST(InsnTrace, Filters) {
  isa::Program prog = isa::Program::load(kPrograms + "dma_mac.s");
  auto lines = [&](const std::string& filter) {
    TraceOptions o;
    o.trace = temp_path("filtered.trace");
    o.filter = filter;
    run_with(prog, "qc-u", o);
    return read_trace(o.trace);
  };
  // mark: the compute loop's mark.begin, 200 x 2 vmac and its mark.end.
  std::vector<TraceLine> m = lines("mark=compute");
  ASSERT_EQ(m.size(), 403u);
  EXPECT_NE(m.front().insn.find("mark.begin"), std::string::npos);
  EXPECT_NE(m.back().insn.find("mark.end"), std::string::npos);
  for (size_t i = 2; i + 1 < m.size(); ++i) EXPECT_EQ(m[i].insn.substr(0, 8), "vmac.f16");
  // pc range [35, 37): the two vmac.f16.
  std::vector<TraceLine> pc = lines("pc=35:37");
  ASSERT_EQ(pc.size(), 400u);
  for (const TraceLine& l : pc) EXPECT_TRUE(l.pc == 35 || l.pc == 36);
  // cycle window and every Nth, combined.
  std::vector<TraceLine> all = lines("");
  std::vector<TraceLine> win = lines("cycle=100:600");
  size_t in_window = 0;
  for (const TraceLine& l : all) in_window += l.cycle >= 100 && l.cycle < 600;
  EXPECT_EQ(win.size(), in_window);
  for (const TraceLine& l : win) EXPECT_TRUE(l.cycle >= 100 && l.cycle < 600);
  std::vector<TraceLine> every = lines("every=10");
  ASSERT_EQ(every.size(), (all.size() + 9) / 10);
  for (size_t i = 0; i < every.size(); ++i) EXPECT_EQ(every[i].text, all[i * 10].text);
  // pe: the lanes shown come from that PE (vsplati is the same everywhere; the
  // hash over all PEs does not change with the PE shown).
  std::vector<TraceLine> pe3 = lines("pe=3,pc=28:30");
  ASSERT_FALSE(pe3.empty());
  EXPECT_NE(pe3[0].writes.find("[pe3]"), std::string::npos);
}

TEST(InsnTrace, FilterErrorsAreClear) {
  EXPECT_THROW(TraceFilter::parse("pc=10"), Error);
  EXPECT_THROW(TraceFilter::parse("every=0"), Error);
  EXPECT_THROW(TraceFilter::parse("colour=red"), Error);
  try {
    TraceFilter::parse("cycle=5:2");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("empty range"), std::string::npos);
  }
  isa::Program prog = isa::Program::load(kPrograms + "known.s");
  TraceOptions o;
  o.trace = temp_path("bad.trace");
  o.filter = "mark=nosuch";
  sim::Platform& p = sim::Platform::get();
  p.configure(sim::Config::make("mini", {}), false);
  try {
    TraceSession s(p, prog, o);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("its marks: body"), std::string::npos) << e.what();
  }
}

TEST(Timeline, JsonParsesAndHasEveryTrack) {
  isa::Program prog = isa::Program::load(kPrograms + "dma_mac.s");
  TraceOptions o;
  o.timeline = temp_path("dma_mac.json");
  sim::Stats st = run_with(prog, "qc-u", o);
  nlohmann::json j = nlohmann::json::parse(read_text(o.timeline));
  std::map<int, std::string> tracks;
  std::map<int, int> slices;
  std::set<std::string> counters, marks;
  double last_counter = 0, max_gbps = 0;
  for (const auto& e : j.at("traceEvents")) {
    std::string ph = e.at("ph");
    if (ph == "M" && e.at("name") == "thread_name") tracks[e.at("tid")] = e.at("args").at("name");
    if (ph == "X") {
      slices[e.at("tid")]++;
      EXPECT_GE(double(e.at("dur")), 0.0);
      if (e.at("tid") == 1) marks.insert(std::string(e.at("name")));
    }
    if (ph == "C") {
      counters.insert(std::string(e.at("name")));
      EXPECT_GE(double(e.at("ts")), last_counter);
      last_counter = e.at("ts");
      max_gbps = std::max(max_gbps, double(e.at("args").at("GB/s")));
    }
  }
  std::set<std::string> names;
  for (auto& [tid, name] : tracks) names.insert(name);
  for (const char* want : {"marks", "sequencer", "array", "mac", "ddr port", "dma c0", "dma c1", "dma c2", "dma c3"})
    EXPECT_TRUE(names.count(want)) << "no track " << want;
  for (auto& [tid, name] : tracks)
    if (name != "dma c3") {
      EXPECT_GT(slices[tid], 0) << "track " << name << " is empty";
    }
  EXPECT_TRUE(counters.count("ddr bandwidth"));
  EXPECT_EQ(marks, (std::set<std::string>{"outer", "compute"}));
  // The port never runs faster than its 32 GB/s, and it does run near it.
  EXPECT_LE(max_gbps, 32.0 * 1.001);
  EXPECT_GE(max_gbps, 32.0 * 0.9);
  // MAC slices: 400 vmac.f16 of occupancy 4 back to back, so the MAC track is busy
  // 1600 cycles, which is what the compute mark spans (1606 cycles with its tail).
  double mac_us = 0;
  for (const auto& e : j.at("traceEvents"))
    if (e.at("ph") == "X" && e.at("tid") == 4) mac_us += double(e.at("dur"));
  EXPECT_NEAR(mac_us * 1.7e3, 1600.0, 1.0);
  (void)st;
}

// --trace-filter applies to the timeline (issue 20): mark=compute keeps the 400 vmac
// issues of the compute loop (and its mark slices), not the DMA prologue; pc= and
// cycle= likewise; a filter that keeps nothing leaves an empty file, not the whole run.
TEST(Timeline, FilterKeepsWhatPasses) {
  isa::Program prog = isa::Program::load(kPrograms + "dma_mac.s");
  auto slices = [&](const std::string& filter) {
    TraceOptions o;
    o.timeline = temp_path("filtered.json");
    o.filter = filter;
    run_with(prog, "qc-u", o);
    std::vector<nlohmann::json> x;
    const nlohmann::json j = nlohmann::json::parse(read_text(o.timeline));
    for (const auto& e : j.at("traceEvents"))
      if (e.at("ph") == "X") x.push_back(e);
    return x;
  };
  auto count = [](const std::vector<nlohmann::json>& x, int tid, const std::string& prefix = "") {
    return std::count_if(x.begin(), x.end(), [&](const nlohmann::json& e) {
      return e.at("tid") == tid && std::string(e.at("name")).starts_with(prefix);
    });
  };
  std::vector<nlohmann::json> all = slices(""), m = slices("mark=compute"), pc = slices("pc=35:37");
  EXPECT_EQ(count(m, Timeline::sequencer, "vmac.f16"), 400);
  EXPECT_EQ(count(m, Timeline::mac), count(all, Timeline::mac));  // all the MAC work is inside "compute"
  EXPECT_GT(count(m, Timeline::mac), 0);
  EXPECT_GT(count(all, Timeline::sequencer), count(m, Timeline::sequencer) + 10);  // the prologue is gone
  for (const auto& e : m) {
    if (e.at("tid") == Timeline::sequencer) {
      EXPECT_TRUE(e.at("args").contains("pc"));
    }
  }
  // Marks: only those over the kept span ("outer" clipped to it, "compute").
  std::set<std::string> marks;
  for (const auto& e : m)
    if (e.at("tid") == Timeline::marks) marks.insert(std::string(e.at("name")));
  EXPECT_EQ(marks, (std::set<std::string>{"outer", "compute"}));
  // pc: only instructions at pc 35 and 36 (the two vmac.f16), and their stalls.
  for (const auto& e : pc) {
    if (e.at("tid") == Timeline::sequencer) {
      EXPECT_TRUE(e.at("args").at("pc") == 35 || e.at("args").at("pc") == 36) << e;
    }
  }
  EXPECT_EQ(count(pc, Timeline::sequencer, "vmac.f16"), 400);
  // cycle: every kept instruction issued inside the window.
  for (const auto& e : slices("cycle=100:600")) {
    if (e.at("tid") == Timeline::sequencer && !std::string(e.at("name")).starts_with("stall")) {
      EXPECT_TRUE(e.at("args").at("cycle") >= 100 && e.at("args").at("cycle") < 600) << e;
    }
  }
  // Negative control: the unfiltered timeline has more than the filtered one on every track kept.
  EXPECT_GT(all.size(), m.size());
  EXPECT_TRUE(slices("cycle=999999999:").empty());
}

TEST(Vcd, FileParsesAndSignalsMove) {
  // SystemC accepts a trace file only before the first sc_start of a process: use the CLI.
  std::string vcd = temp_path("dma_mac.vcd"), out;
  std::filesystem::remove(vcd);
  ASSERT_EQ(run_cli("run " + kPrograms + "dma_mac.s -q --vcd " + vcd, out), 0) << out;
  std::ifstream in(vcd);
  ASSERT_TRUE(in) << out;
  std::map<std::string, std::string> id_of;  // name -> id
  std::map<std::string, uint64_t> max_value, changes;
  std::string line;
  bool defs_done = false;
  uint64_t time = 0, last_time = 0;
  while (std::getline(in, line)) {
    std::istringstream ss(line);
    std::string tok;
    ss >> tok;
    if (tok == "$var") {
      std::string type, width, id, name;
      ss >> type >> width >> id >> name;
      id_of[name] = id;
    } else if (tok == "$enddefinitions") {
      defs_done = true;
    } else if (defs_done && !tok.empty() && tok[0] == '#') {
      time = std::stoull(tok.substr(1));
      EXPECT_GE(time, last_time);
      last_time = time;
    } else if (defs_done && !tok.empty() && (tok[0] == 'b' || tok[0] == '0' || tok[0] == '1')) {
      std::string id, value;
      if (tok[0] == 'b') {
        value = tok.substr(1);
        ss >> id;
      } else {
        value = tok.substr(0, 1);
        id = tok.substr(1);
      }
      uint64_t v = std::stoull(value, nullptr, 2);
      max_value[id] = std::max(max_value[id], v);
      changes[id]++;
    }
  }
  ASSERT_TRUE(defs_done);
  for (const char* s : {"busy_mac16", "busy_valu", "busy_dma", "pc", "dma0_queue", "dma1_queue", "dma2_queue",
                        "dma3_queue", "ddr_bytes_in_flight"})
    ASSERT_TRUE(id_of.count(s)) << "no signal " << s;
  EXPECT_EQ(max_value[id_of["busy_mac16"]], 1u);
  EXPECT_GE(changes[id_of["busy_mac16"]], 2u);
  EXPECT_EQ(max_value[id_of["dma0_queue"]], 1u);
  EXPECT_EQ(max_value[id_of["dma3_queue"]], 0u);  // c3 is never used
  EXPECT_GE(max_value[id_of["ddr_bytes_in_flight"]], 16384u);
  EXPECT_EQ(max_value[id_of["pc"]], 43u);  // the halt
  // The last change is at the run's end: 3138 cycles of 588 ps.
  EXPECT_GE(last_time, 3000u * 588);
  EXPECT_LE(last_time, 3138u * 588);
}

}  // namespace
}  // namespace gpnpu::traces::test
