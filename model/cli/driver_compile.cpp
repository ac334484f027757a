// `gpnpu compile`: builds the decode and image programs for a model and a machine,
// writes them (binary and assembly), the DDR layout and every kernel call's floor,
// and with --run runs both timing-only and prints cycles per stage and the kernels
// furthest from their floors.
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <tuple>
#include <nlohmann/json.hpp>

#include "isa/cli_rules.h"
#include "isa/error.h"
#include "isa/io_rules.h"
#include "kernels/cost.h"
#include "model/compiler/compiler.h"
#include "model/cli/capacity.h"
#include "model/cli/driver.h"
#include "model/runtime/session.h"
#include "sim/machine/options.h"
#include "sim/run.h"

namespace gpnpu::model {

std::string& command_line() {
  static std::string s;
  return s;
}

namespace {

struct CallRow {
  std::string mark, kernel;
  uint64_t cycles;
  double floor;
  sim::Counters counters;
};

// Each kernel call's cycles (from the stats) beside its floor (from the compiler).
// `context`: tokens a decode step attends to.
std::vector<CallRow> call_rows(const sim::Stats& st, const CompiledProgram& prog, const sim::Config& cfg,
                               uint32_t context) {
  std::vector<CallRow> rows;
  for (const KernelRun& k : kernel_runs(st, prog, cfg, context))
    rows.push_back({k.call->mark, k.call->kernel, k.region->end - k.region->begin, k.floor, k.region->counters});
  return rows;
}

// weight_bytes: the program's weights, each read once (Compiler::weight_bytes).
void report(const char* what, const sim::Stats& st, const CompiledProgram& prog, const sim::Config& cfg,
            const std::vector<std::string>& stages, uint32_t context, uint64_t weight_bytes,
            nlohmann::ordered_json& j) {
  uint64_t total = st.total[sim::Stat::cycles];
  uint64_t bytes = st.total[sim::Stat::ddr_bytes_read] + st.total[sim::Stat::ddr_bytes_written];
  std::printf("%s program: %zu instructions, %llu cycles (%.2f ms at %.2f GHz), DDR %.4f GB, %.2f B/cycle (%.1f%% of the roofline)\n",
              what, prog.program.words.size(), (unsigned long long)total, total / (cfg.clock_ghz * 1e6), cfg.clock_ghz,
              bytes / 1e9, double(bytes) / total, 100.0 * double(bytes) / total / cfg.ddr_bytes_per_cycle());
  nlohmann::ordered_json pj;
  auto dram = [](const sim::Counters& c) {  // ddr_model = dram (docs/dram.md)
    using S = sim::Stat;
    return nlohmann::ordered_json{{"bursts", c[S::dram_reads] + c[S::dram_writes]}, {"row_hits", c[S::dram_row_hits]},
                                  {"activates", c[S::dram_activates]}, {"refreshes", c[S::dram_refreshes]},
                                  {"turnarounds", c[S::dram_turnarounds]}};
  };
  if (cfg.dram_model()) {
    const sim::Counters& c = st.total;
    const uint64_t bursts = c[sim::Stat::dram_reads] + c[sim::Stat::dram_writes];
    std::printf("  DRAM %s: row hits %.2f%% of %llu bursts, %llu activates, %llu refreshes, %llu turnarounds\n",
                cfg.dram.c_str(), bursts ? 100.0 * double(c[sim::Stat::dram_row_hits]) / double(bursts) : 0.0,
                (unsigned long long)bursts, (unsigned long long)c[sim::Stat::dram_activates],
                (unsigned long long)c[sim::Stat::dram_refreshes], (unsigned long long)c[sim::Stat::dram_turnarounds]);
    pj["dram"] = dram(c);
  }
  pj["instructions"] = prog.program.words.size();
  pj["cycles"] = total;
  pj["ddr_bytes"] = bytes;
  for (const auto& r : st.regions())
    if (std::find(stages.begin(), stages.end(), r.name) != stages.end()) {
      std::printf("  stage %-14s %12llu cycles\n", r.name.c_str(), (unsigned long long)r.counters[sim::Stat::cycles]);
      pj["stages"][r.name] = r.counters[sim::Stat::cycles];
    }
  std::vector<CallRow> rows = call_rows(st, prog, cfg, context);
  double floor_sum = 0;
  for (const CallRow& r : rows) floor_sum += r.floor;
  std::sort(rows.begin(), rows.end(),
            [](const CallRow& a, const CallRow& b) { return a.cycles - a.floor > b.cycles - b.floor; });
  // The program's floors: every MAC at the array's peak; every weight read once at the DDR bandwidth.
  double mac_floor = 0;
  for (const KernelCall& c : prog.calls)
    mac_floor += double(c.at(context).macs) / cfg.mac_peak(!c.int8);
  const double weights_floor = double(weight_bytes) / cfg.ddr_bytes_per_cycle();
  pj["mac_floor_cycles"] = mac_floor;
  pj["weights_floor_cycles"] = weights_floor;
  if (context) {  // decode: every call's bytes at this context, the KV cache's among them
    double bytes = 0;
    for (const KernelCall& c : prog.calls) bytes += double(c.at(context).ddr_bytes);
    const double bytes_floor = bytes / cfg.ddr_bytes_per_cycle();
    std::printf("  MAC floor %.0f cycles, DDR floor (weights, KV cache of %u tokens, logits) %.0f cycles: %.4f x their max\n",
                mac_floor, context, bytes_floor, double(total) / std::max(mac_floor, bytes_floor));
    pj["bytes_floor_cycles"] = bytes_floor;
  } else {
    std::printf("  MAC floor %.0f cycles, weights-once DDR floor %.0f cycles: %.3f x their max; DDR %.3f x the weights' "
                "bytes read once\n", mac_floor, weights_floor, double(total) / std::max(mac_floor, weights_floor),
                double(bytes) / double(std::max<uint64_t>(weight_bytes, 1)));
  }
  std::printf("  sum of kernel floors %.0f cycles; the ten calls furthest above their floors:\n", floor_sum);
  std::printf("  %-28s %-16s %12s %12s %7s\n", "call", "kernel", "cycles", "floor", "ratio");
  for (size_t k = 0; k < std::min<size_t>(10, rows.size()); ++k) {
    const CallRow& r = rows[k];
    std::printf("  %-28s %-16s %12llu %12.0f %7.2f\n", r.mark.c_str(), r.kernel.c_str(), (unsigned long long)r.cycles,
                r.floor, r.floor > 0 ? r.cycles / r.floor : 0.0);
  }
  pj["floor_cycles"] = floor_sum;
  for (const CallRow& r : rows) {
    pj["calls"].push_back({{"mark", r.mark}, {"kernel", r.kernel}, {"cycles", r.cycles}, {"floor", r.floor}});
    if (cfg.dram_model()) pj["calls"].back()["dram"] = dram(r.counters);
  }
  j[what] = pj;
}

}  // namespace

void add_compile_commands(CLI::App& app) {
  auto* c = app.add_subcommand("compile", "compile the image and decode programs of a model for a machine");
  static std::string model_spec = "synthetic:2b", out_dir, grid = "16x16";
  static sim::MachineOptions machine;
  static int seq = 128, image_start = 4;
  static int64_t cached = 140;
  static std::string max_context = "auto";
  static bool run = false, fp16_channels = false, assembly = false;
  static int gemm_rows = 0;
  static int tower_rows = 0;
  static std::string prefill = "auto";
  c->add_option("--model", model_spec, "synthetic:2b, synthetic:tiny, or a checkpoint directory")->capture_default_str();
  c->add_option("--out", out_dir, "output directory (programs, DDR layout, machine config, kernel floors)")->required();
  machine.add(c);
  c->add_option("--grid", grid, "image patch grid HxW of the image program (16x16 = a 256x256 image)")->capture_default_str();
  c->add_option("--seq", seq, "prompt tokens of the image program")->capture_default_str()->check(cli::integer(1, 4096));
  c->add_option("--image-start", image_start, "row of the first image token")
      ->capture_default_str()
      ->check(cli::integer(0, 4095));
  c->add_option("--cached", cached, "cached tokens for the decode run (--run), the new one included: 1 to --max-context")
      ->capture_default_str()
      ->check(cli::integer(INT64_MIN, INT64_MAX));  // the range: check_tokens in the callback
  add_max_context_option(c, max_context);
  c->add_flag("--asm", assembly,
              "also write the programs' assembly listings (decode.s, image.s; the 2B image program's is 100-330 MB, "
              "so not by default: `gpnpu disasm D/image.bin` gives the same text)");
  c->add_flag("--run", run, "run both programs timing-only and report cycles per stage and per kernel");
  c->add_option("--gemm-rows", gemm_rows,
                "run the image GEMMs on the first N PE rows (0: the compiler's choice, printed in the image plan)")
      ->capture_default_str()
      ->check(cli::integer(0, 1 << 16));
  c->add_option("--tower-rows", tower_rows,
                "run the vision tower's and mergers' GEMMs on the first N PE rows, the prefill's on --gemm-rows "
                "(0: the compiler's choice; rows other than the prefill's run the program in two parts, named in "
                "the image plan)")
      ->capture_default_str()
      ->check(cli::integer(0, 1 << 16));
  c->add_option("--prefill", prefill,
                "the streamed prefill's arrangement: auto (the compiler's cost model), phases (three phases a layer) "
                "or layers (whole layers a row tile); phases and layers force the streamed plan")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "phases", "layers"}));
  c->add_flag("--fp16-channels", fp16_channels,
              "compile for a mixed-precision bundle (quantize --fp16-channels): a gather and an fp16 correction "
              "after every GEMV, GEMM and embedding lookup (docs/quantisation.md)");
  c->callback([] {
    auto path = [](const char* f) { return (std::filesystem::path(out_dir) / f).string(); };
    io::Outputs paths;
    paths.input("--model", model_spec).input("--model's config.json", (std::filesystem::path(model_spec) / "config.json").string());
    paths.output_dir("--out", out_dir);
    for (const char* f : {"decode.bin", "image.bin", "ddr_layout.json", "config.json", "report.json"})
      paths.output(fmt::format("--out's {}", f), path(f));
    if (assembly)
      for (const char* f : {"decode.s", "image.s"}) paths.output(fmt::format("--out's {}", f), path(f));
    paths.check();
    sim::Config cfg = machine.config();
    ModelConfig m = model_config_from_spec(model_spec);
    ImageShape shape;
    std::tie(shape.grid_h, shape.grid_w) = io::parse_pair(grid, "--grid", "HxW in patches", 1, 1024);
    shape.seq_len = seq;
    shape.image_start = image_start;
    // Capacity first (issue 18): every count the runs need against the KV cache, before any run.
    CompileOptions copt;
    copt.fp16_channels = fp16_channels;
    copt.image_gemm_rows = uint32_t(gemm_rows);
    copt.image_tower_rows = uint32_t(tower_rows);
    copt.image_prefill = prefill == "phases" ? 1 : prefill == "layers" ? 2 : 0;
    const Capacity cap = resolve_max_context(max_context, m, cfg, copt);
    check_tokens("--seq", seq, cap, fmt::format("give --seq {} or less, or a larger --max-context", cap.max_context));
    check_tokens("--cached", cached, cap,
                 fmt::format("give --cached {} or less, or a larger --max-context", cap.max_context));
    copt.max_seq = cap.max_context;
    Compiler comp(m, cfg, copt);
    CompiledProgram dec = comp.decode_program(), img = comp.image_program(shape);
    std::filesystem::create_directories(out_dir);
    dec.program.write_binary(path("decode.bin"));
    img.program.write_binary(path("image.bin"));
    if (assembly) {
      dec.program.write_assembly(path("decode.s"));
      img.program.write_assembly(path("image.s"));
    }
    nlohmann::ordered_json layout;
    for (const DdrTensor& t : comp.layout().tensors())
      layout.push_back({{"name", t.name}, {"offset", t.offset}, {"bytes", t.bytes}, {"layout", t.layout}});
    sim::write_file_atomic(path("ddr_layout.json"), layout.dump(1) + "\n");
    sim::write_file_atomic(path("config.json"), cfg.to_json() + "\n");
    std::printf("compiled %s for %s\n  decode %zu instructions, image %zu instructions, DDR %.3f GB (KV cache of %u "
                "tokens) -> %s\n  image plan: %s\n",
                model_spec.c_str(), cfg.summary().c_str(), dec.program.words.size(), img.program.words.size(),
                comp.layout().total() / 1e9, cap.max_context, out_dir.c_str(), img.plan.c_str());
    if (img.est_cycles > 0)
      std::printf("  image plan estimate: %.0f cycles (the compiler's cost model, which chooses between streamed "
                  "plans; it leaves out the head and the tower's attention; --run gives the cycles)\n",
                  img.est_cycles);
    if (!run) return;
    nlohmann::ordered_json j;
    Session dev(comp, true);
    std::vector<int> ids(size_t(shape.seq_len), 0);
    dev.write_prompt(ids);
    report("image", dev.run(img), img, cfg, {"vision_tower", "prefill", "head"}, 0, comp.weight_bytes(true), j);
    dev.write_decode_args(0, uint32_t(cached - 1));
    report("decode", dev.run(dec), dec, cfg, {"decode"}, uint32_t(cached), comp.weight_bytes(false), j);
    j["config"] = nlohmann::ordered_json::parse(cfg.to_json());
    sim::write_file_atomic(path("report.json"), j.dump(1) + "\n");
  });
}

}  // namespace gpnpu::model
