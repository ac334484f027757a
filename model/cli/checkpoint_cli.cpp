// CLI: make-checkpoint, quantize, check-checkpoint (add_checkpoint_commands in model/cli/commands.h).
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <vector>

#include <fmt/format.h>

#include "isa/cli_rules.h"
#include "isa/error.h"
#include "isa/io_rules.h"
#include "model/cli/commands.h"
#include "model/checkpoint/config.h"
#include "model/checkpoint/quant.h"
#include "model/checkpoint/safetensors.h"
#include "model/checkpoint/synthetic.h"
#include "model/checkpoint/progress.h"

namespace gpnpu::model {

namespace {

// "2b", "tiny", or a path to an HF config.json.
ModelConfig resolve_config(const std::string& s) {
  if (s == "2b" || s == "2B" || s == "tiny") return config_by_name(s);
  std::error_code ec;
  if (std::filesystem::is_regular_file(s, ec)) return ModelConfig::from_json_file(s);
  if (std::filesystem::is_directory(s, ec) && std::filesystem::exists(std::filesystem::path(s) / "config.json"))
    return ModelConfig::from_json_file((std::filesystem::path(s) / "config.json").string());
  fail("--config '{}': not a built-in config ('2b', 'tiny') nor a config.json file", s);
}

// "A:B:C..." split at ':' into exactly n fields, else an error naming the option and the form.
std::vector<std::string> fields(const std::string& opt, const std::string& v, size_t n, const char* form) {
  std::vector<std::string> f;
  size_t start = 0;
  for (size_t p; (p = v.find(':', start)) != std::string::npos; start = p + 1) f.push_back(v.substr(start, p - start));
  f.push_back(v.substr(start));
  if (f.size() != n) fail("{} '{}': expected {}", opt, v, form);
  return f;
}

double number(const std::string& opt, const std::string& v, const std::string& text) {
  try {
    size_t used = 0;
    double d = std::stod(text, &used);
    if (used == text.size() && std::isfinite(d)) return d;
  } catch (const std::exception&) {
  }
  fail("{} '{}': '{}' is not a number", opt, v, text);
}

// The outlier options of make-checkpoint (model/checkpoint/synthetic.h, Outlier).
std::vector<Outlier> parse_outliers(const ModelConfig& cfg, const std::vector<std::string>& massive,
                                    const std::vector<std::string>& super, const std::vector<std::string>& scale) {
  std::vector<Outlier> out;
  const std::string embed = "model.language_model.embed_tokens.weight";
  for (const std::string& v : massive) {
    auto f = fields("--massive-activation", v, 3, "TOKEN:CHANNEL:VALUE, e.g. 151644:7:35000");
    out.push_back({embed, int64_t(number("--massive-activation", v, f[0])), int64_t(number("--massive-activation", v, f[1])),
                   float(number("--massive-activation", v, f[2]))});
    if (out.back().row < 0 || out.back().row >= cfg.text.vocab_size)
      fail("--massive-activation '{}': token {} is outside the vocabulary (0..{})", v, f[0], cfg.text.vocab_size - 1);
  }
  for (const std::string& v : super) {
    auto f = fields("--super-weight", v, 4, "TENSOR:ROW:COL:VALUE, e.g. model.language_model.layers.1.mlp.down_proj.weight:7:100:2.5");
    out.push_back({f[0], int64_t(number("--super-weight", v, f[1])), int64_t(number("--super-weight", v, f[2])),
                   float(number("--super-weight", v, f[3]))});
    if (out.back().row < 0) fail("--super-weight '{}': the row must be >= 0", v);
  }
  for (const std::string& v : scale) {
    auto f = fields("--scale-column", v, 3, "TENSOR:COL:FACTOR, e.g. model.language_model.embed_tokens.weight:7:100");
    out.push_back({f[0], -1, int64_t(number("--scale-column", v, f[1])), float(number("--scale-column", v, f[2]))});
  }
  return out;
}

// What `quantize` says about outliers (docs/quantisation.md, Numerics): the share of
// weights that quantise to zero, and a warning per tensor with outlier blocks.
void print_outlier_summary(const BundleStats& st, const QuantOptions& qo) {
  const double all = st.nonzero ? 100.0 * double(st.zeroed) / double(st.nonzero) : 0;
  fmt::print("quantize: {:.1f}% of the non-zero weights quantise to 0 ({} of {}); {} tensor(s) with outlier blocks "
             "(max |w| > {} x the block RMS){}\n",
             all, st.zeroed, st.nonzero, st.outliers.size(), kOutlierRatio,
             st.fp16_channels ? fmt::format("; {} input channels kept in fp16", st.fp16_channels) : "");
  std::fflush(stdout);  // the summary before the warnings (stderr)
  for (const OutlierReport& r : st.outliers) {
    std::string chans;
    for (size_t k = 0; k < r.channels.size() && k < 5; ++k)
      chans += fmt::format("{}{} ({} weights)", k ? ", " : "", r.channels[k].first, r.channels[k].second);
    if (r.channels.size() > 5) chans += fmt::format(" and {} more", r.channels.size() - 5);
    fmt::print(stderr,
               "warning: {} [{} x {}]: {} of {} blocks have an outlier (max |w| up to {:.1f} x the block RMS, at row {} "
               "column {}); {:.1f}% of the other weights of those blocks quantise to 0 ({:.1f}% in this tensor, {:.1f}% "
               "in the model); outlier input channels: {}{}\n",
               r.tensor, r.rows, r.cols, r.outlier_blocks, r.blocks, r.worst_ratio, r.worst_row, r.worst_col,
               100 * r.outlier_zero_share(), 100 * r.zero_share(), all, chans.empty() ? "none" : chans,
               qo.fp16_channels ? fmt::format(" (up to {} kept in fp16)", qo.fp16_channels)
                                : "; keep them in fp16 with --fp16-channels N");
  }
}

}  // namespace

void add_checkpoint_commands(CLI::App& app) {
  {
    struct Opts {
      std::string config = "tiny";
      uint64_t seed = 0;
      std::string out;
      int threads = 0;
      bool no_data = false;
      std::vector<std::string> massive, super, scale;
    };
    auto o = std::make_shared<Opts>();
    CLI::App* c = app.add_subcommand(
        "make-checkpoint",
        "Write a seeded synthetic Qwen3-VL checkpoint (config.json + model.safetensors, bf16, real names and shapes)");
    c->add_option("--config", o->config, "Model config: 2b, tiny, or a config.json path")->capture_default_str();
    c->add_option("--seed", o->seed, "PRNG seed (values are identical on every machine)")
        ->capture_default_str()
        ->check(cli::integer(0, INT64_MAX));
    c->add_option("--out", o->out, "Output directory (created)")->required();
    c->add_option("--threads", o->threads, "Generator threads (0: all cores); output does not depend on it")
        ->capture_default_str()
        ->check(cli::integer(0, 1024));
    c->add_flag("--no-data", o->no_data,
                "Write config.json and the real header, but leave the tensor data as a sparse zero-filled region "
                "(fast; for layout tests)");
    c->add_option("--massive-activation", o->massive,
                  "TOKEN:CHANNEL:VALUE: embed_tokens[TOKEN][CHANNEL] = VALUE, so the residual stream of that token "
                  "carries VALUE through every layer (repeatable)");
    c->add_option("--super-weight", o->super, "TENSOR:ROW:COL:VALUE: one weight of any tensor set to VALUE (repeatable)");
    c->add_option("--scale-column", o->scale,
                  "TENSOR:COL:FACTOR: every weight of input channel COL multiplied by FACTOR (repeatable)");
    c->callback([o] {
      const std::string dir = o->out;
      io::Outputs()
          .input("--config", o->config)
          .output_dir("--out", dir)
          .output("--out's config.json", (std::filesystem::path(dir) / "config.json").string())
          .output("--out's model.safetensors", (std::filesystem::path(dir) / "model.safetensors").string())
          .check();
      ModelConfig cfg = resolve_config(o->config);
      SyntheticOptions so;
      so.outliers = parse_outliers(cfg, o->massive, o->super, o->scale);
      so.seed = o->seed;
      so.threads = o->threads;
      so.no_data = o->no_data;
      so.progress = progress_callback("writing", [](const std::string& l) { fmt::print(stderr, "{}\n", l); });
      SyntheticStats st = make_synthetic_checkpoint(cfg, o->out, so);
      fmt::print("make-checkpoint: config {} seed {}: {} tensors, {} parameters, {} bytes{} in {:.2f} s -> {}\n",
                 o->config, o->seed, st.tensors, st.params, st.bytes, o->no_data ? " (header only, sparse data)" : "",
                 st.seconds, o->out);
    });
  }
  {
    struct Opts {
      std::string model, out, config;
      int threads = 0;
      bool no_clip = false;
      int fp16_channels = 0;
    };
    auto o = std::make_shared<Opts>();
    CLI::App* c = app.add_subcommand(
        "quantize", "Quantise a checkpoint to the W4A16 bundle (int4 codes, fp16 scales, uint8 zeros per 128 inputs)");
    c->add_option("--model", o->model, "Checkpoint directory (config.json + model.safetensors or shards)")->required();
    c->add_option("--out", o->out, "Output bundle file (.safetensors)")->required();
    c->add_option("--config", o->config, "Override the config (2b, tiny or a config.json); default: the model's");
    c->add_option("--threads", o->threads, "Quantiser threads (0: all cores); output does not depend on it")
        ->capture_default_str()
        ->check(cli::integer(0, 1024));
    c->add_flag("--no-clip", o->no_clip, "Plain min/max ranges (no clipping search)");
    c->add_option("--fp16-channels", o->fp16_channels,
                  "Mixed precision: keep up to N outlier input channels per tensor in fp16 beside the int4 codes")
        ->capture_default_str()
        ->check(CLI::Range(0, 1024));
    c->callback([o] {
      Checkpoint ck = Checkpoint::open(o->model);
      io::Outputs paths;
      paths.input("--config", o->config).output("--out", o->out);
      for (const auto& f : ck.files()) paths.input("--model's file", f->path());
      paths.input("--model's config.json", (std::filesystem::path(o->model) / "config.json").string());
      paths.check();
      ModelConfig cfg = o->config.empty() ? ck.config() : resolve_config(o->config);
      QuantOptions qo;
      qo.threads = o->threads;
      qo.clip_search = !o->no_clip;
      qo.progress = progress_callback("quantising", [](const std::string& l) { fmt::print(stderr, "{}\n", l); });
      qo.fp16_channels = o->fp16_channels;
      BundleStats st = write_quant_bundle(ck, cfg, o->out, qo);
      fmt::print(
          "quantize: {} quantised tensors ({} weights, {} blocks of {}), {} float tensors, {} bytes in {:.2f} s -> {}\n",
          st.quantised_tensors, st.weights, st.blocks, kQuantBlock, st.float_tensors, st.bytes, st.seconds, o->out);
      print_outlier_summary(st, qo);
    });
  }
  {
    auto model = std::make_shared<std::string>();
    CLI::App* c = app.add_subcommand("check-checkpoint",
                                     "Open a checkpoint and check every tensor's name, shape and dtype against its config");
    c->add_option("--model", *model, "Checkpoint directory or .safetensors file")->required();
    c->callback([model] {
      Checkpoint ck = load_checkpoint(*model);
      fmt::print("check-checkpoint: {}: {} tensors in {} file(s), all match the config\n", *model, ck.names().size(),
                 ck.files().size());
    });
  }
}

}  // namespace gpnpu::model
