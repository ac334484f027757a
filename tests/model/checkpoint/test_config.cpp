// Config tests: the 2B values against the spec (docs/model.md sections 1, 8, 9),
// the tiny config's features, config.json reading (real HF layout), round trip, errors.
#include <gtest/gtest.h>

#include <cctype>
#include <filesystem>
#include <functional>
#include <fstream>
#include <map>
#include <sstream>

#include <unistd.h>

#include "isa/error.h"
#include "model/checkpoint/config.h"

using namespace gpnpu::model;

namespace {

std::string cfg_data(const std::string& f) { return std::string(GPNPU_SOURCE_DIR) + "/tests/model/data/" + f; }

std::string tmp_file(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("gpnpu_cfg_" + std::to_string(::getpid()) + "_" + name)).string();
}

std::string write_json(const nlohmann::json& j, const std::string& name) {
  std::string p = tmp_file(name);
  std::ofstream(p) << j.dump(2);
  return p;
}

// Runs from_json on j and returns the error message ("" if it did not throw).
std::string error_of(const nlohmann::json& j) {
  try {
    ModelConfig::from_json(j, "test.json");
  } catch (const gpnpu::Error& e) {
    return e.what();
  }
  return "";
}

nlohmann::json hf_2b() {
  std::ifstream in(cfg_data("qwen3-vl-2b-config.json"));
  return nlohmann::json::parse(in);
}

}  // namespace

TEST(Config, TwoBMatchesSpec) {
  ModelConfig c = config_2b();
  const VisionConfig& v = c.vision;
  EXPECT_EQ(v.depth, 24);
  EXPECT_EQ(v.hidden_size, 1024);
  EXPECT_EQ(v.num_heads, 16);
  EXPECT_EQ(v.head_dim(), 64);
  EXPECT_EQ(v.intermediate_size, 4096);
  EXPECT_EQ(v.patch_size, 16);
  EXPECT_EQ(v.temporal_patch_size, 2);
  EXPECT_EQ(v.spatial_merge_size, 2);
  EXPECT_EQ(v.in_channels, 3);
  EXPECT_EQ(v.out_hidden_size, 2048);
  EXPECT_EQ(v.num_position_embeddings, 2304);
  EXPECT_EQ(v.pos_grid_side(), 48);
  EXPECT_EQ(v.patch_dim(), 1536);
  EXPECT_EQ(v.merged_dim(), 4096);
  EXPECT_EQ(v.deepstack_visual_indexes, (std::vector<int>{5, 11, 17}));
  EXPECT_EQ(v.hidden_act, "gelu_pytorch_tanh");
  const TextConfig& t = c.text;
  EXPECT_EQ(t.hidden_size, 2048);
  EXPECT_EQ(t.num_hidden_layers, 28);
  EXPECT_EQ(t.num_attention_heads, 16);
  EXPECT_EQ(t.num_key_value_heads, 8);
  EXPECT_EQ(t.head_dim, 128);
  EXPECT_EQ(t.q_dim(), 2048);
  EXPECT_EQ(t.kv_dim(), 1024);
  EXPECT_EQ(t.intermediate_size, 6144);
  EXPECT_EQ(t.vocab_size, 151936);
  EXPECT_EQ(t.rms_norm_eps, 1e-6);
  EXPECT_EQ(t.rope_theta, 5000000.0);
  EXPECT_EQ(t.mrope_section, (std::vector<int>{24, 20, 20}));
  EXPECT_TRUE(t.mrope_interleaved);
  EXPECT_TRUE(t.tie_word_embeddings);
  EXPECT_EQ(t.max_position_embeddings, 262144);
  EXPECT_FALSE(t.attention_bias);
  EXPECT_EQ(c.image_token_id, 151655);
  EXPECT_EQ(c.video_token_id, 151656);
  EXPECT_EQ(c.vision_start_token_id, 151652);
  EXPECT_EQ(c.vision_end_token_id, 151653);
  EXPECT_EQ(c.bos_token_id, 151643);
  EXPECT_EQ(c.eos_token_id, 151645);
  EXPECT_TRUE(c.tie_word_embeddings);
}

// Section 9: the parameter counts computed from the shapes.
TEST(Config, TwoBParameterCountsMatchSpec) {
  auto specs = expected_tensors(config_2b());
  ASSERT_EQ(specs.size(), 625u);
  int64_t vision = 0, lm = 0, linear_lm = 0;
  for (const auto& s : specs) {
    if (s.name.rfind("model.visual.", 0) == 0) vision += s.numel();
    else lm += s.numel();
    if (s.name.rfind("model.language_model.layers.", 0) == 0 && s.role == TensorRole::Linear) linear_lm += s.numel();
  }
  EXPECT_EQ(vision, 406957056);
  EXPECT_EQ(lm, 1720574976);
  EXPECT_EQ(vision + lm, 2127532032);
  EXPECT_EQ(2 * (vision + lm), 4255064064);  // bf16 bytes
  EXPECT_EQ(linear_lm, 1409286144);          // section 10: quantised LM linears
}

// Section 8 / qwen3-vl-2b-tensors.txt: the same names, shapes and order.
TEST(Config, TwoBTensorListMatchesSpecFile) {
  std::ifstream in(cfg_data("qwen3-vl-2b-tensors.txt"));
  ASSERT_TRUE(in) << "missing tests/model/data/qwen3-vl-2b-tensors.txt";
  auto specs = expected_tensors(config_2b());
  std::string line;
  size_t i = 0;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    auto tab = line.find('\t');
    ASSERT_NE(tab, std::string::npos) << line;
    ASSERT_LT(i, specs.size());
    EXPECT_EQ(specs[i].name, line.substr(0, tab)) << "index " << i;
    std::ostringstream shp;
    shp << "[";
    for (size_t k = 0; k < specs[i].shape.size(); ++k) shp << (k ? ", " : "") << specs[i].shape[k];
    shp << "]";
    EXPECT_EQ(shp.str(), line.substr(tab + 1)) << specs[i].name;
    ++i;
  }
  EXPECT_EQ(i, specs.size());
}

TEST(Config, TinyHasEveryFeature) {
  ModelConfig t = config_tiny(), b = config_2b();
  // GQA, q/k norm, M-RoPE with its own sections summing to head_dim/2.
  EXPECT_LT(t.text.num_key_value_heads, t.text.num_attention_heads);
  EXPECT_EQ(t.text.num_attention_heads % t.text.num_key_value_heads, 0);
  int sum = 0;
  for (int s : t.text.mrope_section) sum += s;
  EXPECT_EQ(sum, t.text.head_dim / 2);
  EXPECT_NE(t.text.mrope_section, b.text.mrope_section);
  EXPECT_NE(t.text.head_dim, b.text.head_dim);  // head sizes must come from the config
  EXPECT_NE(t.vision.head_dim(), b.vision.head_dim());
  EXPECT_EQ(t.vision.head_dim() % 4, 0);        // 2-D RoPE: rows and columns halves
  // DeepStack: tower depth >= 4 with 3 taps, more LM layers than taps (docs/testing.md model-test item 4).
  EXPECT_GE(t.vision.depth, 4);
  EXPECT_EQ(t.vision.deepstack_visual_indexes.size(), 3u);
  EXPECT_GT(t.text.num_hidden_layers, int(t.vision.deepstack_visual_indexes.size()) + 1);
  EXPECT_NE(t.vision.deepstack_visual_indexes, b.vision.deepstack_visual_indexes);
  // A position-table side other than 48; full vocabulary.
  EXPECT_NE(t.vision.pos_grid_side(), 48);
  EXPECT_EQ(t.vision.pos_grid_side() * t.vision.pos_grid_side(), t.vision.num_position_embeddings);
  EXPECT_EQ(t.text.vocab_size, 151936);
  EXPECT_LT(t.image_token_id, t.text.vocab_size);
  EXPECT_EQ(t.vision.out_hidden_size, t.text.hidden_size);
  // Same tensor set (names modulo indices) as 2B; every Linear input width that is a
  // multiple of 128 in 2B is one in tiny too.
  auto ts = expected_tensors(t);
  auto bs = expected_tensors(b);
  std::map<std::string, int64_t> bcols;
  auto strip = [](std::string n) {
    std::string o;
    for (size_t i = 0; i < n.size(); ++i)
      if (!std::isdigit(static_cast<unsigned char>(n[i])) || (i && n[i - 1] != '.')) o += n[i];
    return o;
  };
  for (const auto& s : bs) bcols[strip(s.name)] = s.cols();
  for (const auto& s : ts) {
    ASSERT_TRUE(bcols.count(strip(s.name))) << s.name;
    if (s.quantised() && bcols[strip(s.name)] % 128 == 0) {
      EXPECT_EQ(s.cols() % 128, 0) << s.name;
    }
  }
  EXPECT_EQ(ts.size(), size_t(3 + 12 * 4 + 6 + 6 * 3 + 1 + 11 * 5 + 1));
}

TEST(Config, ReadsHuggingFaceConfigJson) {
  ModelConfig c = ModelConfig::from_json_file(cfg_data("qwen3-vl-2b-config.json"));
  EXPECT_EQ(c, config_2b());
}

TEST(Config, AcceptsNewerRopeParametersLayout) {
  nlohmann::json j = hf_2b();
  auto& t = j["text_config"];
  t["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 5000000}, {"mrope_section", {24, 20, 20}},
                          {"mrope_interleaved", true}};
  t.erase("rope_scaling");
  t.erase("rope_theta");
  EXPECT_EQ(ModelConfig::from_json(j, "new.json"), config_2b());
}

TEST(Config, JsonRoundTrip) {
  for (const ModelConfig& c : {config_2b(), config_tiny()}) {
    std::string p = write_json(c.to_json(), c.name + ".json");
    ModelConfig r = ModelConfig::from_json_file(p);
    EXPECT_EQ(r, c) << c.name;
    EXPECT_EQ(r.to_json(), c.to_json()) << c.name;
    std::filesystem::remove(p);
  }
  EXPECT_NE(config_2b(), config_tiny());
}

TEST(Config, ByName) {
  EXPECT_EQ(config_by_name("2b"), config_2b());
  EXPECT_EQ(config_by_name("tiny"), config_tiny());
  try {
    config_by_name("7b");
    FAIL() << "no error";
  } catch (const gpnpu::Error& e) {
    EXPECT_NE(std::string(e.what()).find("'7b'"), std::string::npos) << e.what();
  }
}

TEST(Config, ErrorsNameTheKey) {
  struct Case {
    std::function<void(nlohmann::json&)> edit;
    std::string want;  // substrings expected in the message
  };
  std::vector<Case> cases = {
      {[](auto& j) { j["text_config"].erase("hidden_size"); }, "missing key 'text_config.hidden_size'"},
      {[](auto& j) { j["vision_config"]["depth"] = "24"; }, "'vision_config.depth' must be an integer"},
      {[](auto& j) { j["vision_config"]["num_heads"] = 0; }, "'vision_config.num_heads' must be a positive"},
      {[](auto& j) { j.erase("vision_config"); }, "missing key 'vision_config'"},
      {[](auto& j) { j["text_config"]["rope_scaling"]["mrope_section"] = {24, 20, 21}; }, "sums to 65"},
      {[](auto& j) { j["text_config"]["rope_scaling"].erase("mrope_section"); }, "rope_scaling.mrope_section"},
      {[](auto& j) { j["vision_config"]["deepstack_visual_indexes"] = {5, 11, 24}; }, "deepstack_visual_indexes[2]"},
      {[](auto& j) { j["vision_config"]["num_position_embeddings"] = 2300; }, "num_position_embeddings 2300"},
      {[](auto& j) { j["text_config"]["num_key_value_heads"] = 5; }, "num_key_value_heads 5"},
      {[](auto& j) { j["vision_config"]["out_hidden_size"] = 1024; }, "out_hidden_size 1024"},
      {[](auto& j) { j["model_type"] = "qwen3_vl_moe"; }, "'model_type' is 'qwen3_vl_moe'"},
      {[](auto& j) { j["image_token_id"] = 200000; }, "image_token_id 200000"},
      {[](auto& j) { j["text_config"]["rms_norm_eps"] = "x"; }, "'text_config.rms_norm_eps' must be a number"},
  };
  ASSERT_EQ(error_of(hf_2b()), "");  // control: the unedited file is fine
  for (const auto& c : cases) {
    nlohmann::json j = hf_2b();
    c.edit(j);
    std::string msg = error_of(j);
    EXPECT_NE(msg.find(c.want), std::string::npos) << "want '" << c.want << "' in: " << msg;
    EXPECT_NE(msg.find("test.json"), std::string::npos) << msg;
  }
}

TEST(Config, BadFileErrors) {
  std::string p = tmp_file("bad.json");
  std::ofstream(p) << "{\"vision_config\": {";
  try {
    ModelConfig::from_json_file(p);
    FAIL() << "no error";
  } catch (const gpnpu::Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find(p), std::string::npos) << m;
    EXPECT_NE(m.find("invalid JSON"), std::string::npos) << m;
  }
  std::filesystem::remove(p);
  EXPECT_THROW(ModelConfig::from_json_file(p), gpnpu::Error);  // missing file
}
