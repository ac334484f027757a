// CLI: make-checkpoint, quantize, check-checkpoint (add_checkpoint_commands in model/commands.h).
#include <cstdint>
#include <filesystem>
#include <memory>

#include <fmt/format.h>

#include "isa/cli_rules.h"
#include "isa/error.h"
#include "isa/io_rules.h"
#include "model/commands.h"
#include "model/config.h"
#include "model/quant.h"
#include "model/safetensors.h"
#include "model/synthetic.h"

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

}  // namespace

void add_checkpoint_commands(CLI::App& app) {
  {
    struct Opts {
      std::string config = "tiny";
      uint64_t seed = 0;
      std::string out;
      int threads = 0;
      bool no_data = false;
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
      so.seed = o->seed;
      so.threads = o->threads;
      so.no_data = o->no_data;
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
      BundleStats st = write_quant_bundle(ck, cfg, o->out, qo);
      fmt::print(
          "quantize: {} quantised tensors ({} weights, {} blocks of {}), {} float tensors, {} bytes in {:.2f} s -> {}\n",
          st.quantised_tensors, st.weights, st.blocks, kQuantBlock, st.float_tensors, st.bytes, st.seconds, o->out);
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
