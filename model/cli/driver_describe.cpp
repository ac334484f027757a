// `gpnpu describe`: the user's run. Prints the inputs, progress, one line per step
// (gates against the chain), the answers and the performance report; writes the
// report as JSON (schema in docs/report.md) and, through scripts/report_html.py, as
// a self-contained HTML page. Exit status 2 when a gate fails.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <nlohmann/json.hpp>
#include <sys/wait.h>
#include <unistd.h>

#include <tuple>

#include "isa/cli_rules.h"
#include "isa/error.h"
#include "isa/fp16.h"
#include "isa/io_rules.h"
#include "model/cli/driver.h"
#include "model/runtime/driver_host.h"
#include "sim/machine/config.h"
#include "model/inputs/prompt.h"
#include "sim/run.h"

namespace gpnpu::model {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

std::string base64(const std::string& in) {
  static const char* t = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  for (size_t i = 0; i < in.size(); i += 3) {
    uint32_t v = uint32_t(uint8_t(in[i])) << 16;
    if (i + 1 < in.size()) v |= uint32_t(uint8_t(in[i + 1])) << 8;
    if (i + 2 < in.size()) v |= uint32_t(uint8_t(in[i + 2]));
    out += t[(v >> 18) & 63];
    out += t[(v >> 12) & 63];
    out += i + 1 < in.size() ? t[(v >> 6) & 63] : '=';
    out += i + 2 < in.size() ? t[v & 63] : '=';
  }
  return out;
}

template <typename T>
json opt(const std::optional<T>& v) {
  return v ? json(*v) : json(nullptr);
}

// "12,345,678"
std::string commas(uint64_t v) {
  std::string s = std::to_string(v), out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i && (s.size() - i) % 3 == 0) out += ',';
    out += s[i];
  }
  return out;
}

std::string step_line(const StepRecord& s) {
  std::string head = s.step < 0 ? fmt::format("  image   pos {:4d}:", s.pos) : fmt::format("  step {:2d} pos {:4d}:", s.step, s.pos);
  std::string gates;
  if (s.chain_token)
    gates = fmt::format(" chain {:6d}  logits cos {:>8s} (margin {:6.3f})  cache {}/{} slot cos {:>8s}  {:4s}", *s.chain_token,
                        format_cosine(*s.cosine), *s.margin, s.cache_slots, s.cache_expected, format_cosine(*s.slot_cosine),
                        s.ok ? "OK" : "FAIL");
  else
    gates = fmt::format("  cache -/{}  (timing only: no gates)", s.cache_expected);
  return fmt::format("{} device {:6d}{}  {:>13s} cycles  {:7.2f} s", head, s.device_token, gates, commas(s.cycles), s.wall_s);
}


// The photo's attribution: its row of the ATTRIBUTION.md table beside it (examples/photos/),
// cells joined, or null.
json attribution(const std::string& image) {
  std::ifstream in(fs::path(image).parent_path() / "ATTRIBUTION.md");
  const std::string name = fs::path(image).filename().string();
  for (std::string line; std::getline(in, line);) {
    if (!line.starts_with("|") || line.find(name) == std::string::npos) continue;
    std::string text, cell;
    std::stringstream ss(line.substr(1));
    while (std::getline(ss, cell, '|')) {
      size_t b = cell.find_first_not_of(' '), e = cell.find_last_not_of(' ');
      if (b == std::string::npos) continue;
      text += (text.empty() ? "" : ", ") + cell.substr(b, e - b + 1);
    }
    return text;
  }
  return nullptr;
}

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char ch : s) q += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return q + "'";
}

// The final report on stdout: answers, cycles per stage, totals, the kernels furthest
// above their floors.
void print_report(const json& j) {
  std::printf("\nanswers:%s\n", j["mode"] == "timing-only" ? " none (timing only: the tokens fed back are placeholders)" : "");
  for (const auto& [who, a] : j["answers"].items()) {
    if (a["text"].is_null()) continue;
    std::string ids;
    for (const json& id : a["ids"]) ids += (ids.empty() ? "" : " ") + std::to_string(int(id));
    // The text as JSON (escapes, not raw control bytes) and the ids it decodes from.
    std::printf("  %-16s %s\n  %-16s ids %s\n", who.c_str(), json(a["text"]).dump(-1, ' ', false, json::error_handler_t::replace).c_str(),
                "", ids.c_str());
  }
  if (j["model"]["synthetic"] == true && j["mode"] != "timing-only")
    std::printf("  (synthetic weights: the model's weights are random, so the text is meaningless; what counts is that\n"
                "   the device matches the chain, the gates above)\n");
  const double ghz = j["machine"]["clock_ghz"];
  std::printf("\ncycles per stage at %.2f GHz (floors: MAC, DDR):\n", ghz);
  for (const json& s : j["stages"]) {
    std::string steps = s.contains("steps") ? fmt::format(" ({} steps)", int(s["steps"])) : "";
    std::printf("  %-8s %-14s %15s cycles %10.2f ms   MAC floor %13s  DDR floor %13s%s\n", std::string(s["program"]).c_str(),
                std::string(s["name"]).c_str(), commas(s["cycles"]).c_str(), double(s["ms"]),
                commas(uint64_t(double(s["mac_floor_cycles"]))).c_str(), commas(uint64_t(double(s["ddr_floor_cycles"]))).c_str(),
                steps.c_str());
  }
  const json& t = j["totals"];
  std::printf("\ntotal %s cycles = %.1f ms for %d tokens (%.2f tokens/s at %.2f GHz)\n", commas(t["cycles"]).c_str(),
              double(t["ms"]), int(t["tokens"]), double(t["tokens_per_s"]), ghz);
  if (double(t["ddr_bytes_per_token"]) > 0)
    std::printf("decode: %.2f ms/token, %.4f GB DDR per token, %.2f B/cycle = %.1f%% of the DDR roofline (%.2f B/cycle)\n",
                double(t["decode_ms_per_token"]), double(t["ddr_bytes_per_token"]) / 1e9, double(t["decode_bytes_per_cycle"]),
                100 * double(t["decode_roofline_share"]), double(j["machine"]["ddr_bytes_per_cycle"]));
  if (j.contains("dram"))  // ddr_model = dram (docs/dram.md)
    for (const char* prog : {"image", "decode"}) {
      const json& d = j["dram"][prog];
      std::printf("DRAM %s, %s: %.2f B/cycle = %.1f%% of its peak %.2f (sustained ceiling %.2f), row hits %.1f%%, "
                  "%s activates, %s refreshes\n",
                  std::string(j["dram"]["preset"]).c_str(), prog, double(d["bytes_per_cycle"]),
                  100 * double(d["bytes_per_cycle"]) / double(j["dram"]["peak_bytes_per_cycle"]),
                  double(j["dram"]["peak_bytes_per_cycle"]), double(j["dram"]["sustained_bytes_per_cycle"]),
                  100 * double(d["row_hit_rate"]), commas(d["activates"]).c_str(), commas(d["refreshes"]).c_str());
    }
  const json& e = j["energy"];
  auto split = [](const json& x) {
    const json& m = x["split_mj"];
    return fmt::format("DDR {:.3f}, OCM {:.3f}, MAC {:.3f}, other {:.3f}, static {:.3f} mJ", double(m["ddr"]),
                       double(m["ocm"]), double(m["mac"]), double(m["other"]), double(m["static"]));
  };
  auto watts = [](const json& x) {
    return fmt::format("average {:.3f} W, peak {}", double(x["average_w"]),
                       x["peak_w"].is_null() ? std::string("n/a") : fmt::format("{:.3f} W", double(x["peak_w"])));
  };
  std::printf("\nenergy (table in the machine config, assumptions in docs/energy.md; peak over %llu-cycle windows):\n",
              (unsigned long long)e["window_cycles"]);
  std::printf("  image program %10.3f mJ  (%s; %s)\n", double(e["image"]["total_mj"]), split(e["image"]).c_str(),
              watts(e["image"]).c_str());
  if (!e["decode_per_token"].is_null())
    std::printf("  decode        %10.3f mJ per token  (%s; %s)\n", double(e["decode_per_token"]["total_mj"]),
                split(e["decode_per_token"]).c_str(), watts(e["decode_per_token"]).c_str());
  std::printf("  run           %10.3f mJ for %d tokens: %.2f tokens/J, average %.3f W\n", double(e["run"]["total_mj"]),
              int(t["tokens"]), double(e["tokens_per_j"]), double(e["run"]["average_w"]));
  std::printf("\nthe ten kernel calls with the most cycles above their floors (image program and first decode step),\n"
              "sorted by cycles - floor:\n");
  std::printf("  %-7s %-30s %-16s %13s %13s %13s %6s\n", "program", "call", "kernel", "cycles", "floor", "above floor",
              "ratio");
  for (const json& c : j["worst_kernels"]) {
    double fl = c["floor"], cy = c["cycles"];
    std::printf("  %-7s %-30s %-16s %13s %13s %13s %6.2f\n", std::string(c["program"]).c_str(),
                std::string(c["mark"]).c_str(), std::string(c["kernel"]).c_str(), commas(uint64_t(cy)).c_str(),
                commas(uint64_t(fl)).c_str(), commas(uint64_t(std::max(0.0, cy - fl))).c_str(), fl > 0 ? cy / fl : 0.0);
  }
  const json& w = j["wall_s"];
  const json& cpu = j["cpu_s"];
  std::printf("\nwall: setup %.1f s, image program %.1f s, decode %.1f s, total %.1f s; CPU %.1f s user + %.1f s sys\n",
              double(w["setup"]), double(w["image"]), double(w["decode"]), double(w["total"]), double(cpu["user"]),
              double(cpu["sys"]));
  if (const json& c = j["chain_wall_s"]; !c.is_null())
    std::printf("the chain beside the device: prefill %.1f s, decode steps %.1f s; the device side then waited for it "
                "%.1f s and %.1f s\n",
                double(c["image"]), double(c["decode"]), double(c["waited_image"]), double(c["waited_decode"]));
  std::fflush(stdout);
}

// The HTML page through the project's plotting script (scripts/report_html.py).
void write_html(const json& j, const std::string& html, const std::string& plots) {
  const fs::path script = fs::path(GPNPU_SOURCE_DIR) / "scripts" / "report_html.py";
  if (!fs::exists(script)) fail("--report-html: {} is missing (the source tree is incomplete)", script.string());
  // The JSON goes beside the page (its directory was checked writable before the run;
  // $TMPDIR may not exist), as a registered temporary (isa/io_rules.h); for a device
  // page (/dev/null) into $TMPDIR, else the working directory.
  std::string base = html;
  if (html.starts_with("/dev/") || html.starts_with("/proc/")) {
    std::error_code ec;
    const fs::path t = fs::temp_directory_path(ec);
    base = ((ec ? fs::path(".") : t) / "gpnpu-report").string();
  }
  io::ScopedTemp tmp(fmt::format("{}.tmp.{}.json", base, ::getpid()), false);
  sim::write_file_atomic(tmp.path(), j.dump() + "\n");
  std::string cmd = "/usr/bin/python3 " + shell_quote(script.string()) + " --json " + shell_quote(tmp.path()) +
                    " --html " + shell_quote(html);
  if (!plots.empty()) cmd += " --plots " + shell_quote(plots);
  const int status = std::system(cmd.c_str());
  if (status != 0)
    fail("--report-html '{}': scripts/report_html.py failed ({}); its message is above "
         "(it needs Debian's python3-matplotlib: scripts/install-deps.sh)", html,
         status < 0 ? "it could not be started"
         : WIFSIGNALED(status) ? fmt::format("killed by signal {}", WTERMSIG(status))
                               : fmt::format("exit status {}", WEXITSTATUS(status)));
  std::printf("report page: %s%s\n", html.c_str(), plots.empty() ? "" : (" (charts in " + plots + ")").c_str());
}

// The report's "energy" (docs/report.md): the image program, the mean decode step and
// the whole run (sim/energy.h), per kernel family, and power per window.
json energy_report(const sim::Config& cfg, const DescribeResult& r) {
  auto peak_json = [](double w) { return std::isnan(w) ? json(nullptr) : json(w); };
  auto with_peak = [&](const sim::Energy& e, double peak) {
    json j = sim::energy_json(e);
    j["peak_w"] = peak_json(peak);
    return j;
  };
  sim::Energy image, decode, all;
  double image_peak = NAN, decode_peak = NAN;
  size_t nsteps = 0;
  for (const StepRecord& s : r.steps) {
    all += s.energy;
    if (s.step < 0) {
      image = s.energy;
      image_peak = s.peak_w;
    } else {
      decode += s.energy;
      ++nsteps;
      if (!std::isnan(s.peak_w) && !(s.peak_w <= decode_peak)) decode_peak = s.peak_w;
    }
  }
  std::map<std::pair<std::string, std::string>, std::pair<uint64_t, double>> fam;  // (program, kernel) -> calls, mJ
  for (const CallRecord& c : r.calls) {
    auto& f = fam[{c.program, c.kernel}];
    f.first++;
    f.second += c.energy_mj;
  }
  json families = json::array();
  for (const auto& [k, v] : fam)
    families.push_back({{"program", k.first}, {"kernel", k.second}, {"calls", v.first}, {"energy_mj", v.second}});
  const double joules = all.total_pj() * 1e-12;
  return {{"window_cycles", cfg.power_window_cycles},
          {"image", with_peak(image, image_peak)},
          {"decode_per_token", nsteps ? with_peak(decode.scaled(1.0 / double(nsteps)), decode_peak) : json(nullptr)},
          {"run", sim::energy_json(all)},
          {"tokens_per_j", joules > 0 ? double(r.steps.size()) / joules : 0.0},
          {"decode_tokens_per_j", nsteps ? json(double(nsteps) / (decode.total_pj() * 1e-12)) : json(nullptr)},
          {"kernel_families", families},
          {"image_power_w", r.image_power_w},
          {"decode_power_w", r.decode_power_w}};
}

// The report's "numerics" (docs/report.md): every kernel call's fp16 range, totals and the
// first non-finite value; null in timing-only runs (nothing is computed).
json numerics_json(const DescribeOptions& o, const DescribeResult& r, const sim::Config& cfg) {
  if (o.timing_only) return nullptr;
  json calls = json::array();
  float max_abs = 0;
  uint64_t overflow = 0, underflow = 0, nan = 0;
  std::string max_at;
  for (const NumericsRecord& n : r.numerics) {
    calls.push_back({{"program", n.program}, {"mark", n.mark}, {"kernel", n.kernel}, {"max_abs", n.max_abs},
                     {"overflow", n.overflow}, {"underflow", n.underflow}, {"nan", n.nan}});
    if (n.max_abs > max_abs) max_abs = n.max_abs, max_at = n.program + " " + n.mark;
    overflow += n.overflow;
    underflow += n.underflow;
    nan += n.nan;
  }
  return {{"fp16_max", kF16Max},
          {"fp16_overflow", cfg.fp16_overflow},
          {"max_abs", max_abs},
          {"max_abs_at", max_at},
          {"headroom", max_abs > 0 ? json(kF16Max / max_abs) : json(nullptr)},
          {"overflow", overflow},
          {"underflow", underflow},
          {"nan", nan},
          {"first_nonfinite", r.nonfinite.empty() ? json(nullptr) : json(r.nonfinite)},
          {"calls", calls}};
}

// The numerics part of the printed report: totals and the calls closest to fp16's limit.
void print_numerics(const json& n) {
  if (n.is_null()) return;
  const double m = n["max_abs"];
  const std::string share = m <= kF16Max ? fmt::format("{:.1f}% of 65504", 100 * m / kF16Max) : "beyond 65504";
  std::printf("\nfp16 numerics (fp16_overflow = %s): largest |x| written %.4g in %s (%s); %llu overflowed%s, "
              "%llu NaN, %llu normal values rounded to 0\n",
              std::string(n["fp16_overflow"]).c_str(), m, std::string(n["max_abs_at"]).c_str(), share.c_str(),
              (unsigned long long)n["overflow"], n["fp16_overflow"] == "saturate" ? " (saturated to +-65504)" : " (to inf)",
              (unsigned long long)n["nan"], (unsigned long long)n["underflow"]);
  std::vector<json> calls(n["calls"].begin(), n["calls"].end());
  std::stable_sort(calls.begin(), calls.end(), [](const json& a, const json& b) { return double(a["max_abs"]) > double(b["max_abs"]); });
  std::printf("  the five kernel calls nearest the limit:\n");
  for (size_t k = 0; k < std::min<size_t>(5, calls.size()); ++k)
    std::printf("  %-7s %-30s max |x| %10.4g  overflow %llu  NaN %llu\n", std::string(calls[k]["program"]).c_str(),
                std::string(calls[k]["mark"]).c_str(), double(calls[k]["max_abs"]), (unsigned long long)calls[k]["overflow"],
                (unsigned long long)calls[k]["nan"]);
  if (!n["first_nonfinite"].is_null()) std::printf("  %s\n", std::string(n["first_nonfinite"]).c_str());
}

}  // namespace

std::string report_json(const DescribeOptions& o, const DescribeResult& r) {
  const sim::Config cfg = o.machine.config();
  const double ghz = cfg.clock_ghz;
  json j;
  j["schema"] = "gpnpu-describe-report/1";
  j["command"] = o.command;
  j["mode"] = o.timing_only ? "timing-only" : "functional";
  j["model"] = {{"spec", o.model}, {"name", r.model_name},
                {"bundle", r.bundle_path.empty() ? json(nullptr) : json(r.bundle_path)},
                {"synthetic", o.model.starts_with("synthetic:")}};
  j["machine"] = {{"preset", o.machine.preset},
                  {"summary", cfg.summary()},
                  {"clock_ghz", ghz},
                  {"ddr_bytes_per_cycle", cfg.ddr_bytes_per_cycle()},
                  {"mac_per_cycle_f16", cfg.mac_peak(true)},
                  {"mac_per_cycle_int8", cfg.mac_peak(false)},
                  {"pe_rows", cfg.pe_rows},
                  {"pe_cols", cfg.pe_cols},
                  {"ocm_bytes", cfg.ocm_bytes}};
  j["config"] = json::parse(r.config_json);
  j["image"] = {{"path", o.image},
                {"attribution", attribution(o.image)},
                {"width", r.width},
                {"height", r.height},
                {"grid", {1, r.grid_h, r.grid_w}},
                {"png_base64", base64(r.png)}};
  j["prompt"] = {{"text", o.prompt}, {"tokens", r.prompt_tokens}, {"image_tokens", r.image_tokens}, {"image_start", r.image_start}};
  json stages = json::array();
  for (const StageRecord& s : r.stages) {
    json e = {{"name", s.name},        {"program", s.program},         {"cycles", s.cycles},
              {"ms", s.cycles / (ghz * 1e6)}, {"macs", s.macs},        {"ddr_bytes", s.ddr_bytes},
              {"mac_floor_cycles", s.mac_floor}, {"ddr_floor_cycles", s.ddr_floor}, {"calls", s.calls},
              {"energy_mj", s.energy_mj}};
    if (s.program == "decode") e["steps"] = s.steps;
    stages.push_back(e);
  }
  j["stages"] = stages;
  json dec_cycles = json::array(), dec_bytes = json::array();
  uint64_t total = 0, dec_total = 0, dec_ddr = 0;
  for (const StepRecord& s : r.steps) {
    total += s.cycles;
    if (s.step < 0) continue;
    dec_cycles.push_back(s.cycles);
    dec_bytes.push_back(s.ddr_bytes);
    dec_total += s.cycles;
    dec_ddr += s.ddr_bytes;
  }
  json image_runs = json::array();
  for (const ImageRunRecord& ir : r.image_runs)
    image_runs.push_back({{"kind", ir.kind}, {"plan", ir.plan}, {"instructions", ir.instructions},
                          {"cycles", ir.cycles}, {"ddr_bytes", ir.ddr_bytes}});
  j["programs"] = {{"image", {{"instructions", r.image_instructions}, {"cycles", r.image_cycles}, {"ddr_bytes", r.image_ddr_bytes},
                              {"runs", image_runs}}},
                   {"decode", {{"instructions", r.decode_instructions}, {"cycles_per_step", dec_cycles}, {"ddr_bytes_per_step", dec_bytes}}}};
  const size_t nsteps = dec_cycles.size();
  const double ms = total / (ghz * 1e6);
  j["totals"] = {{"cycles", total},
                 {"ms", ms},
                 {"tokens", r.steps.size()},
                 {"tokens_per_s", ms > 0 ? r.steps.size() / (ms / 1e3) : 0.0},
                 {"decode_ms_per_token", nsteps ? dec_total / (ghz * 1e6) / nsteps : 0.0},
                 {"ddr_bytes_per_token", nsteps ? double(dec_ddr) / nsteps : 0.0},
                 {"decode_bytes_per_cycle", dec_total ? double(dec_ddr) / dec_total : 0.0},
                 {"decode_roofline_share", dec_total ? double(dec_ddr) / dec_total / cfg.ddr_bytes_per_cycle() : 0.0}};
  if (cfg.dram_model()) {  // the DRAM's figures per program (docs/dram.md)
    const sim::DramSpec d = sim::DramSpec::from(cfg);
    j["dram"] = {{"preset", d.name}, {"peak_bytes_per_cycle", d.peak_bytes_per_cycle()},
                 {"sustained_bytes_per_cycle", sim::sustained_bytes_per_cycle(d)}};
    for (const char* prog : {"image", "decode"}) {
      sim::Counters c;
      uint64_t cycles = 0, bytes = 0;
      for (const StepRecord& s : r.steps)
        if ((s.step < 0) == (std::string(prog) == "image")) c.add_diff(s.counters, {}), cycles += s.cycles, bytes += s.ddr_bytes;
      const double bursts = double(c[sim::Stat::dram_reads] + c[sim::Stat::dram_writes]);
      j["dram"][prog] = {{"bytes_per_cycle", cycles ? double(bytes) / double(cycles) : 0.0},
                         {"row_hit_rate", bursts > 0 ? double(c[sim::Stat::dram_row_hits]) / bursts : 0.0},
                         {"activates", c[sim::Stat::dram_activates]},
                         {"refreshes", c[sim::Stat::dram_refreshes]},
                         {"turnarounds", c[sim::Stat::dram_turnarounds]}};
    }
    j["machine"]["ddr_sustained_bytes_per_cycle"] = j["dram"]["sustained_bytes_per_cycle"];
  }
  auto call_json = [](const CallRecord& c) {
    return json{{"program", c.program}, {"stage", c.stage},   {"mark", c.mark},
                {"kernel", c.kernel},   {"cycles", c.cycles}, {"floor", c.floor},
                {"macs", c.cost.macs},  {"ddr_bytes", c.cost.ddr_bytes}, {"int8", c.int8},
                {"energy_mj", c.energy_mj}};
  };
  j["energy"] = energy_report(cfg, r);
  json calls = json::array();
  for (const CallRecord& c : r.calls) calls.push_back(call_json(c));
  j["kernels"] = calls;
  std::vector<CallRecord> worst = r.calls;
  std::sort(worst.begin(), worst.end(),
            [](const CallRecord& a, const CallRecord& b) { return a.cycles - a.floor > b.cycles - b.floor; });
  worst.resize(std::min<size_t>(10, worst.size()));
  json wj = json::array();
  for (const CallRecord& c : worst) wj.push_back(call_json(c));
  j["worst_kernels"] = wj;
  json steps = json::array();
  for (const StepRecord& s : r.steps)
    steps.push_back({{"step", s.step},
                     {"pos", s.pos},
                     {"device_token", s.device_token},
                     {"chain_token", opt(s.chain_token)},
                     {"cosine", opt(s.cosine)},
                     {"margin", opt(s.margin)},
                     {"cache_slots", s.cache_slots},
                     {"cache_expected", s.cache_expected},
                     {"slot_cosine", opt(s.slot_cosine)},
                     {"ok", s.ok},
                     {"cycles", s.cycles},
                     {"wall_s", s.wall_s}});
  j["steps"] = steps;
  json answers;
  auto answer = [](const Answer& a, bool text) { return json{{"ids", a.ids}, {"text", text ? json(a.text) : json(nullptr)}}; };
  answers["device"] = answer(r.device, !o.timing_only);
  if (!o.timing_only) answers["chain"] = answer(r.chain, true);
  if (r.reference_w4a16) answers["reference_w4a16"] = answer(*r.reference_w4a16, true);
  if (r.reference_fp32) answers["reference_fp32"] = answer(*r.reference_fp32, true);
  j["answers"] = answers;
  j["numerics"] = numerics_json(o, r, cfg);
  j["gates"] = {{"ok", r.ok},
                {"negative_control", o.negative == NegativeControl::none ? json(nullptr) : json(to_string(o.negative))},
                {"failures", r.failures}};
  j["wall_s"] = {{"setup", r.wall_setup}, {"image", r.wall_image}, {"decode", r.wall_decode},
                 {"total", r.wall_setup + r.wall_image + r.wall_decode}};
  j["cpu_s"] = {{"user", r.cpu_user}, {"sys", r.cpu_sys}};
  j["chain_wall_s"] = o.timing_only ? json(nullptr)
                                    : json{{"image", r.chain_image}, {"decode", r.chain_decode},
                                           {"waited_image", r.chain_wait_image}, {"waited_decode", r.chain_wait_decode}};
  return j.dump(1) + "\n";
}

void add_describe_command(CLI::App& app) {
  auto* c = app.add_subcommand("describe", "describe a photograph with Qwen3-VL on the simulated GPNPU, gated step by step");
  static DescribeOptions o;
  static std::string size = "256x256", negative, report_json_path, report_html, plots;
  o.image = std::string(GPNPU_SOURCE_DIR) + "/examples/photos/chelsea.png";
  o.prompt =
      "Describe this photograph in detail: the main subject and what it is doing, the setting and background, the "
      "lighting and colours, any text or signs you can read, and the mood. Then say in one short sentence what the "
      "photograph is about and why someone took it.";
  c->add_option("--image", o.image, "PNG or JPEG to describe (default: the bundled photo, examples/photos/)")->capture_default_str();
  c->add_option("--prompt", o.prompt, "the question (default: the seed run's)");
  c->add_option("--tokens", o.tokens, "answer tokens at most (the first from the image program)")
      ->capture_default_str()
      ->check(cli::integer(1, kDefaultMaxPromptTokens));
  c->add_option("--model", o.model, "synthetic:2b, synthetic:tiny, a checkpoint directory or a W4A16 bundle (.safetensors)")
      ->capture_default_str();
  c->add_option("--cache-dir", o.cache_dir,
                "where quantised bundles are cached (default $GPNPU_CACHE or ~/.cache/gpnpu); the first functional run "
                "of synthetic:2b makes its bundle there once: 4.26 GB of temporary checkpoint and a 1.12 GB bundle, "
                "minutes (docs/performance.md)");
  o.machine.add(c);
  c->add_option("--size", size, "resize the image to WxH pixels (multiples of 32), or 'auto': the processor's "
                "smart resize (as `gpnpu preprocess --size auto`)")->capture_default_str();
  c->add_flag("--timing-only", o.timing_only, "cycles only: no weights, no arithmetic, no gates (same cycle counts)");
  c->add_option("--negative-control", negative, "corrupt the device side to prove a gate fails: zero, one-word, stale-cache, nan-cache, drop-fp16 (a mixed bundle's fp16 channels)");
  c->add_option("--golden", o.golden, "PyTorch golden (.h5, scripts/reference/golden.py) of the same inputs: adds its answers and gates");
  c->add_option("--threads", o.threads, "chain threads (0: all cores but the simulator's)")
      ->capture_default_str()
      ->check(cli::integer(0, 1024));
  c->add_option("--report-json", report_json_path, "write the run report as JSON (docs/report.md)");
  c->add_option("--report-html", report_html, "write the run report as one self-contained HTML page");
  c->add_option("--plots", plots, "also write the report's charts as PNG files into this directory (with --report-html)");
  c->callback([] {
    if (size == "auto") o.width = o.height = 0;
    else std::tie(o.width, o.height) = io::parse_pair(size, "--size", "WxH in pixels, or 'auto'", 1, 65536);
    o.negative = parse_negative_control(negative);
    if (o.negative != NegativeControl::none && o.timing_only)
      fail("--negative-control {} needs a functional run: --timing-only has no gates to fail (drop --timing-only)",
           negative);
    if (!plots.empty() && report_html.empty()) fail("--plots needs --report-html (the charts are made with the page)");
    // Every path before the run (isa/io_rules.h): a bad output fails now, not after minutes.
    io::check_input(o.image, "image", 256 * io::kMiB);
    if (!o.golden.empty()) io::check_input(o.golden, "golden", uint64_t(1) << 40);
    io::Outputs()
        .input("--image", o.image)
        .input("--golden", o.golden)
        .input("--model", o.model)
        .output("--report-json", report_json_path)
        .output("--report-html", report_html)
        .output_dir("--plots", plots)
        .output_dir("--cache-dir", o.cache_dir)
        .check();
    o.command = command_line();
    o.log = [](const std::string& s) { std::fprintf(stderr, "%s\n", s.c_str()); };
    o.on_step = [](const StepRecord& s) {
      std::printf("%s\n", step_line(s).c_str());
      std::fflush(stdout);
    };
    std::printf("gpnpu describe: %s on %s%s\n  image  %s (resized to %s)\n", o.model.c_str(), o.machine.config().summary().c_str(),
                o.timing_only ? ", timing only" : "", o.image.c_str(),
                o.width ? fmt::format("{}x{}", o.width, o.height).c_str() : "auto: the processor's smart resize");
    if (o.model.starts_with("synthetic:") && !o.timing_only)
      std::printf("  weights synthetic (random, seed 1): the answer text will be meaningless; the gates check that the\n"
                  "         simulated chip computes what the host reference computes\n");
    std::fflush(stdout);
    DescribeResult r = describe(o);
    json rep = json::parse(report_json(o, r));
    print_report(rep);
    print_numerics(rep["numerics"]);
    if (!report_json_path.empty()) sim::write_file_atomic(report_json_path, rep.dump(1) + "\n");
    if (!report_html.empty()) write_html(rep, report_html, plots);
    if (!r.ok) {
      std::printf("FAIL: %zu gate(s) failed%s\n", r.failures.size(),
                  o.negative == NegativeControl::none ? "" : fmt::format(" (negative control {})", to_string(o.negative)).c_str());
      std::fflush(stdout);
      throw CLI::RuntimeError(2);
    }
  });
}

}  // namespace gpnpu::model
