// fp16 numerics through `gpnpu describe` (issue 21) on tiny checkpoints with planted
// outliers: a massive activation past 65,504 stops the gates with one message naming
// fp16 overflow, the kernel call, the position and the value, and runs under
// fp16_overflow = saturate (saturations counted, cosines shown); 3.5e4 on one token
// passes every gate and the report and the page show every kernel call's max |x|; NaN
// cosines print as NaN and the first bad cache row is named.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

#include "isa/error.h"
#include "model/checkpoint/config.h"
#include "model/checkpoint/quant.h"
#include "model/checkpoint/safetensors.h"
#include "model/runtime/driver_host.h"
#include "run_describe.h"
#include "model/checkpoint/synthetic.h"

namespace gpnpu::model {
namespace {

namespace fs = std::filesystem;

constexpr int kVisionStart = 151652;  // <|vision_start|>: once in every prompt, early (a delimiter token)
constexpr int kChannel = 7;
const std::string kEmbed = "model.language_model.embed_tokens.weight";
std::string mlp(int layer, const char* w) { return fmt::format("model.language_model.layers.{}.mlp.{}_proj.weight", layer, w); }

fs::path scratch() {
  static const fs::path d = fs::temp_directory_path() / ("gpnpu_numerics_" + std::to_string(::getpid()));
  static const struct Cleanup {  // the checkpoints and bundles go when the process ends
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(d, ec);
    }
  } cleanup;
  return d;
}

// A tiny checkpoint (seed 1) with the given outliers, made once per name.
std::string checkpoint(const std::string& name, const std::vector<Outlier>& outliers) {
  const fs::path dir = scratch() / name;
  if (!fs::exists(dir / "model.safetensors")) {
    SyntheticOptions so;
    so.seed = 1;
    so.outliers = outliers;
    make_synthetic_checkpoint(config_tiny(), dir.string(), so);
  }
  return dir.string();
}

// 3.5e4 in the residual stream of <|vision_start|> (its embedding row, channel 7).
std::vector<Outlier> massive_35k() { return {{kEmbed, kVisionStart, kChannel, 35000.0f}}; }

// The same, then a super neuron in layer 1's MLP (gate and up weights 10 on channel 7 of
// neuron 5, down weight 3 from it back to channel 7) adds ~3.8e4 to that token's channel 7:
// the residual passes 65,504 in layer 1's mlp_residual.
std::vector<Outlier> massive_past_range() {
  std::vector<Outlier> o = massive_35k();
  o.push_back({mlp(1, "gate"), 5, kChannel, 10.0f});
  o.push_back({mlp(1, "up"), 5, kChannel, 10.0f});
  o.push_back({mlp(1, "down"), kChannel, 5, 3.0f});
  return o;
}

DescribeOptions options(const std::string& model) {
  DescribeOptions o;
  o.model = model;
  o.cache_dir = (scratch() / "cache").string();
  o.image = std::string(GPNPU_SOURCE_DIR) + "/tests/model/data/image_photo_256.png";
  o.width = 256;  // the smallest the image processor takes
  o.height = 256;
  o.prompt = "Describe this image.";
  o.tokens = 2;
  return o;
}

const NumericsRecord* find_call(const DescribeResult& r, const std::string& program, const std::string& mark) {
  for (const NumericsRecord& n : r.numerics)
    if (n.program == program && n.mark == mark) return &n;
  return nullptr;
}

TEST(DescribeNumerics, AMassiveActivationPastTheFp16RangeStopsTheGatesWithOneMessage) {
  DescribeOptions o = options(checkpoint("past", massive_past_range()));
  DescribeResult r = describe(o);
  ASSERT_FALSE(r.ok);
  ASSERT_EQ(r.failures.size(), 1u) << r.failures[0];
  const std::string& m = r.failures[0];
  std::printf("inf: %s\n", m.c_str());
  EXPECT_EQ(m.find("image program: fp16 overflow: kernel call P1.mlp_residual ("), 0u) << m;
  EXPECT_NE(m.find("token position"), std::string::npos) << m;
  EXPECT_NE(m.find(fmt::format("column {} of the chain's lm.layer.1.out", kChannel)), std::string::npos) << m;
  EXPECT_NE(m.find("fp16_overflow=saturate"), std::string::npos) << m;
  EXPECT_EQ(r.steps.size(), 1u);  // no decode step after it
  EXPECT_EQ(r.nonfinite, m);

  // The same with saturating hardware: it runs, the saturations are counted, the cosines shown.
  o.machine.sets = {"fp16_overflow=saturate"};
  DescribeResult s = describe(o);
  EXPECT_TRUE(s.nonfinite.empty()) << s.nonfinite;
  ASSERT_EQ(s.steps.size(), 2u);
  const NumericsRecord* res = find_call(s, "image", "P1.mlp_residual");
  ASSERT_NE(res, nullptr);
  EXPECT_GT(res->overflow, 0u);
  EXPECT_GT(res->max_abs, 65504.0f);
  for (const StepRecord& st : s.steps) {
    ASSERT_TRUE(st.cosine.has_value());
    std::printf("saturate: step %d logits cosine %.7f slot cosine %.7f %s\n", st.step, *st.cosine, *st.slot_cosine,
                st.ok ? "OK" : "FAIL");
  }
  nlohmann::json j = nlohmann::json::parse(report_json(o, s));
  EXPECT_EQ(j["numerics"]["fp16_overflow"], "saturate");
  EXPECT_GT(j["numerics"]["overflow"].get<uint64_t>(), 0u);
}

// The non-finite message looks for the device's value among the chain tensors the call
// writes: a fused q|k rotary writes two of them, a chunked down one of two.
TEST(DescribeNumerics, EachKernelCallNamesTheChainTensorsItWrites) {
  using V = std::vector<std::string>;
  EXPECT_EQ(chain_tensors_of("V3.qk_rope"), (V{"vision.0.block.3.q", "vision.0.block.3.k"}));
  EXPECT_EQ(chain_tensors_of("P2.qk_rope"), (V{"lm.layer.2.q", "lm.layer.2.k"}));
  EXPECT_EQ(chain_tensors_of("V5.t1.qk_rope"), (V{"vision.0.block.5.q", "vision.0.block.5.k"}));
  EXPECT_EQ(chain_tensors_of("P0.t0.k_rope"), (V{"lm.layer.0.k"}));
  EXPECT_EQ(chain_tensors_of("P1.mlp_residual"), (V{"lm.layer.1.out"}));
  EXPECT_EQ(chain_tensors_of("L4.attention"), (V{"lm.layer.4.attn"}));
  // GEMMs with the activation in their epilogue write the activation (kernels::GemmAct)
  EXPECT_EQ(chain_tensors_of("V3.mlp1.fc1_gelu"), (V{"vision.0.block.3.mlp_act"}));
  EXPECT_EQ(chain_tensors_of("P2.mlp4.gate_up_silu"), (V{"lm.layer.2.mlp_act"}));
  // a down in chunks: its last chunk writes the MLP's output, or residual + MLP where the
  // partial sums start from the residual; a whole down the MLP's output
  EXPECT_EQ(chain_tensors_of("P5.mlp3.down"), (V{"lm.layer.5.mlp_out", "lm.layer.5.out"}));
  EXPECT_EQ(chain_tensors_of("P5.t1.mlp3.down"), (V{"lm.layer.5.mlp_out", "lm.layer.5.out"}));
  EXPECT_EQ(chain_tensors_of("P5.down"), (V{"lm.layer.5.mlp_out"}));
  EXPECT_EQ(chain_tensors_of("V2.mlp1.fc2"), (V{"vision.0.block.2.out"}));
  EXPECT_TRUE(chain_tensors_of("Mf.norm").empty());
  EXPECT_TRUE(chain_tensors_of("P1.qkv").empty());
}

TEST(DescribeNumerics, UnderTheRangeTheGatesPassAndTheReportShowsEveryCallsMaxAbs) {
  DescribeOptions o = options(checkpoint("35k", massive_35k()));
  DescribeResult r = describe(o);
  for (const std::string& f : r.failures) ADD_FAILURE() << f;
  ASSERT_TRUE(r.ok);
  nlohmann::json j = nlohmann::json::parse(report_json(o, r));
  const nlohmann::json& n = j["numerics"];
  EXPECT_EQ(n["overflow"], 0);
  EXPECT_EQ(n["nan"], 0);
  EXPECT_TRUE(n["first_nonfinite"].is_null());
  const double mx = n["max_abs"];
  std::printf("3.5e4: max |x| %.6g at %s, headroom %.3fx\n", mx, std::string(n["max_abs_at"]).c_str(), double(n["headroom"]));
  EXPECT_GT(mx, 34000);
  EXPECT_LT(mx, 65504);
  // Every kernel call that converts to fp16 is there, the residual adds carrying the 3.5e4.
  EXPECT_GE(double(n["calls"].size()), 0.5 * double(j["kernels"].size()));
  bool residual = false;
  for (const auto& c : n["calls"]) {
    EXPECT_LE(double(c["max_abs"]), mx);
    if (c["program"] == "image" && c["mark"] == "P0.attn_residual") residual = double(c["max_abs"]) > 34000;
  }
  EXPECT_TRUE(residual);
  // The page draws the headroom chart from them.
  const fs::path js = scratch() / "35k.json", page = scratch() / "35k.html";
  std::ofstream(js) << j.dump();
  const std::string cmd = "/usr/bin/python3 " + std::string(GPNPU_SOURCE_DIR) + "/scripts/report_html.py --json " +
                          js.string() + " --html " + page.string();
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  std::stringstream ss;
  ss << std::ifstream(page).rdbuf();
  EXPECT_NE(ss.str().find("data-chart=\"headroom\""), std::string::npos);
  EXPECT_NE(ss.str().find("P0.attn_residual"), std::string::npos);
}

// A mixed-precision bundle (quantize --fp16-channels) runs on the device: every GEMV, GEMM
// and embedding lookup adds its fp16 channels (kernels/f16cols.h) and the gates against
// the chain (which folds them into the weights) pass; the negative control drops them on
// the device (their W16 rows zeroed) and the gates fail.
TEST(DescribeNumerics, AMixedPrecisionBundleRunsOnTheDeviceAndItsGatesHoldTheFp16Channels) {
  // Outlier input channels in the embedding (decode embed, prefill embed, the tied LM head),
  // a prefill/decode linear of each fusion (q of q|k|v, gate of gate|up, down) and a tower GEMM.
  std::vector<Outlier> planted;
  for (int c : {7, 42, 99}) planted.push_back({kEmbed, -1, c, 100.0f});
  for (const std::string& t : {mlp(0, "down"), mlp(1, "gate"), fmt::format("model.language_model.layers.0.self_attn.q_proj.weight"),
                               fmt::format("model.visual.blocks.0.mlp.linear_fc1.weight")})
    planted.push_back({t, -1, 5, 30.0f});
  const std::string dir = checkpoint("mixed", planted);
  QuantOptions qo;
  qo.fp16_channels = 3;
  const std::string bundle = (scratch() / "mixed.safetensors").string();
  write_quant_bundle(load_checkpoint(dir), config_tiny(), bundle, qo);
  EXPECT_GE(QuantBundle(bundle).fp16_tensors().size(), 5u);
  DescribeOptions o = options(bundle);
  DescribeResult r = describe(o);
  for (const std::string& f : r.failures) ADD_FAILURE() << f;
  EXPECT_TRUE(r.ok);
  ASSERT_FALSE(r.steps.empty());
  for (const StepRecord& st : r.steps) EXPECT_GT(st.cosine.value_or(0), 0.9999) << "step " << st.step;
  std::printf("mixed: image program logits cosine %.7f, %zu steps\n", r.steps[0].cosine.value_or(0), r.steps.size());
  // The streamed plan (activations in DDR, row tiles: 1 MiB of OCM) runs the corrections per tile.
  DescribeOptions st = o;
  st.machine.sets = {"ocm_bytes=1MiB"};
  DescribeResult rs = describe(st);
  for (const std::string& f : rs.failures) ADD_FAILURE() << "1 MiB: " << f;
  EXPECT_TRUE(rs.ok);
  // One LRM buffer (8x8 at 896 bytes: the patch embedding a tile a call, kernels::GemmPlan::single):
  // the corrections once over the whole output, after its calls.
  DescribeOptions one = o;
  one.machine.sets = {"pe_rows=8", "pe_cols=8", "lrm_bytes=896"};
  DescribeResult r1 = describe(one);
  for (const std::string& f : r1.failures) ADD_FAILURE() << "896 B of LRM: " << f;
  EXPECT_TRUE(r1.ok);
  size_t cols = 0;
  for (const CallRecord& c : r1.calls) cols += c.mark.find("patch_embed.col1") != std::string::npos;
  EXPECT_GT(cols, 0u) << "the patch embedding ran as one call";
  o.negative = NegativeControl::drop_fp16;
  DescribeResult bad = describe(o);
  EXPECT_FALSE(bad.ok);
  ASSERT_FALSE(bad.failures.empty());
  std::printf("drop-fp16: %s\n", bad.failures[0].c_str());
}

// The device takes at most 16 fp16 channels per (fused) weight: q|k|v with 6 each is refused
// by name before anything runs.
TEST(DescribeNumerics, AFusedWeightPastSixteenFp16ChannelsIsRefusedByName) {
  std::vector<Outlier> planted;
  int col = 0;
  for (const char* w : {"q", "k", "v"})
    for (int j = 0; j < 6; ++j, ++col)
      planted.push_back({fmt::format("model.language_model.layers.0.self_attn.{}_proj.weight", w), -1, col, 40.0f});
  const std::string dir = checkpoint("qkv18", planted);
  QuantOptions qo;
  qo.fp16_channels = 6;
  const std::string bundle = (scratch() / "qkv18.safetensors").string();
  write_quant_bundle(load_checkpoint(dir), config_tiny(), bundle, qo);
  try {
    describe(options(bundle));
    ADD_FAILURE() << "18 fp16 channels in one fused weight ran on the device";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("weight 'L0.qkv' keeps 18 input channels in fp16 (the union over its fused "
                                         "tensors); the device takes at most 16 per weight"),
              std::string::npos)
        << e.what();
  }
}

std::pair<int, std::string> run_cli(const std::string& args) { return test::run_describe(args); }

TEST(DescribeNumerics, PlantedNaNRowsPrintNaNCosinesAndTheFirstBadRow) {
  DescribeOptions o = options("synthetic:tiny");
  o.negative = NegativeControl::nan_cache;
  DescribeResult r = describe(o);
  ASSERT_FALSE(r.ok);
  ASSERT_GE(r.failures.size(), 2u);
  // Planted at layer 3 K slot 1 and layer 1 V slot 2: the first in (layer, K/V, slot) order is named.
  EXPECT_EQ(r.failures[0].find("image program: KV cache row cosine NaN < 0.999 at layer 1 V slot 2 (the first of 2 rows"),
            0u)
      << r.failures[0];
  EXPECT_TRUE(std::isnan(*r.steps[0].slot_cosine));
  // The next decode step reads them: its first NaN stops the gates.
  EXPECT_EQ(r.failures.back().find("step 0: non-finite fp16 (NaN): kernel call L"), 0u)
      << r.failures.back();
  EXPECT_EQ(r.steps.size(), 2u);
  // The CLI prints NaN, never a cosine of 0.
  auto [rc, out] = run_cli("--model synthetic:tiny --cache-dir " + o.cache_dir + " --size 256x256 --tokens 2 " +
                           "--prompt 'Describe this image.' --negative-control nan-cache");
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("slot cos      NaN"), std::string::npos) << out;
  EXPECT_EQ(out.find("cos 0.000000"), std::string::npos) << out;
}

}  // namespace
}  // namespace gpnpu::model
