// Chat template and M-RoPE position tests. Goldens: tests/model/data/image_golden.json
// from scripts/reference/image_golden.py (spec 5.4-5.6, 7.3), regenerate with
//   /usr/bin/python3 scripts/reference/image_golden.py
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "isa/error.h"
#include "model/inputs/prompt.h"
#include "model/inputs/tokenizer.h"

namespace gpnpu::model {
namespace {

const std::string kRoot = GPNPU_SOURCE_DIR;

const nlohmann::json& golden_case(const std::string& name) {
  static const nlohmann::json j = [] {
    std::ifstream f(kRoot + "/tests/model/data/image_golden.json");
    EXPECT_TRUE(f.good());
    return nlohmann::json::parse(f);
  }();
  for (const auto& c : j["cases"])
    if (c["name"] == name) return c;
  throw std::runtime_error("no golden case " + name);
}

// A stand-in encoder knowing the text pieces of the spec 5.6 example (ids from the spec).
std::vector<int> stub_encode(std::string_view s) {
  static const std::map<std::string, std::vector<int>, std::less<>> table = {
      {"user\n", {872, 198}},
      {"assistant\n", {77091, 198}},
      {"system\n", {8948, 198}},
      {"\n", {198}},
      {"Describe this image.", {74785, 419, 2168, 13}},
      {"Be brief.", {3430, 9814, 13}},  // arbitrary ids for a system text
  };
  const auto it = table.find(s);
  if (it == table.end()) throw std::runtime_error("stub_encode: unknown piece '" + std::string(s) + "'");
  return it->second;
}

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const gpnpu::Error& e) {
    return e.what();
  }
  return "";
}

TEST(Prompt, SpecWorkedExample448) {
  // Spec 5.6, verbatim: 448x448 image (196 tokens on 14x14), "Describe this image.".
  std::vector<int> expect = {151644, 872, 198, 151652};
  expect.insert(expect.end(), 196, 151655);
  for (int id : {151653, 74785, 419, 2168, 13, 151645, 198, 151644, 77091, 198}) expect.push_back(id);
  const std::vector<int> ids = build_chat_prompt(stub_encode, "Describe this image.", 196);
  ASSERT_EQ(ids, expect);
  ASSERT_EQ(ids.size(), 210u);
  const MropePositions mp = mrope_positions(ids, {{14, 14}});
  ASSERT_EQ(mp.pos.size(), 210u);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(mp.pos[i], (std::array<int32_t, 3>{i, i, i}));
  for (int bh = 0; bh < 14; ++bh)
    for (int bw = 0; bw < 14; ++bw)
      EXPECT_EQ(mp.pos[4 + bh * 14 + bw], (std::array<int32_t, 3>{4, 4 + bh, 4 + bw}));
  for (int k = 0; k < 10; ++k) EXPECT_EQ(mp.pos[200 + k], (std::array<int32_t, 3>{18 + k, 18 + k, 18 + k}));
  EXPECT_EQ(mp.rope_delta, -182);
  EXPECT_EQ(decode_position(210, mp.rope_delta), (std::array<int32_t, 3>{28, 28, 28}));
  EXPECT_EQ(mp.next_position(), 28);
}

void check_golden_positions(const std::string& name) {
  const auto& c = golden_case(name);
  const int gh = c["grid_thw"][1], gw = c["grid_thw"][2];
  const std::vector<int> ids = build_chat_prompt(stub_encode, c["prompt_text"].get<std::string>(), gh * gw / 4);
  ASSERT_EQ(ids, c["prompt_ids"].get<std::vector<int>>()) << name;
  const MropePositions mp = mrope_positions(ids, {{gh / 2, gw / 2}});
  const auto& pos = c["positions"];
  ASSERT_EQ(mp.pos.size(), pos.size());
  for (size_t i = 0; i < pos.size(); ++i)
    for (int a = 0; a < 3; ++a) ASSERT_EQ(mp.pos[i][a], pos[i][a].get<int>()) << name << " pos " << i << " axis " << a;
  EXPECT_EQ(mp.rope_delta, c["rope_delta"].get<int64_t>());
  for (size_t k = 0; k < c["decode_positions"].size(); ++k) {
    const auto d = decode_position(static_cast<int64_t>(ids.size() + k), mp.rope_delta);
    for (int a = 0; a < 3; ++a) EXPECT_EQ(d[a], c["decode_positions"][k][a].get<int>());
  }
  // Planar layout [3][seq].
  const auto planar = mp.planar();
  EXPECT_EQ(planar[1 * ids.size() + 5], mp.pos[5][1]);
  std::printf("[ prompt ] %s: %zu tokens, %d image tokens, rope_delta %lld, all %zu triples match\n", name.c_str(),
              ids.size(), gh * gw / 4, static_cast<long long>(mp.rope_delta), pos.size());
}

TEST(Prompt, GoldenPositions256) { check_golden_positions("photo_256"); }
TEST(Prompt, GoldenPositions448) { check_golden_positions("photo_448"); }

TEST(Prompt, NonSquareGridUsesHeightThenWidth) {
  // Merged grid 2 (h) x 3 (w) at s = 4: h runs to 5, w to 6; next text position 7.
  std::vector<int> ids = build_chat_prompt(stub_encode, "Describe this image.", 6);
  const MropePositions mp = mrope_positions(ids, {{2, 3}});
  EXPECT_EQ(mp.pos[4], (std::array<int32_t, 3>{4, 4, 4}));
  EXPECT_EQ(mp.pos[6], (std::array<int32_t, 3>{4, 4, 6}));
  EXPECT_EQ(mp.pos[7], (std::array<int32_t, 3>{4, 5, 4}));
  EXPECT_EQ(mp.pos[9], (std::array<int32_t, 3>{4, 5, 6}));
  EXPECT_EQ(mp.pos[10], (std::array<int32_t, 3>{7, 7, 7}));  // <|vision_end|>
  // Negative control: the transposed grid gives different positions.
  const MropePositions tr = mrope_positions(ids, {{3, 2}});
  EXPECT_NE(tr.pos[6], mp.pos[6]);
}

TEST(Prompt, TextOnlyAndSystem) {
  const std::vector<int> ids = build_chat_prompt(stub_encode, "Describe this image.", 0, "Be brief.");
  const std::vector<int> expect = {151644, 8948, 198, 3430, 9814, 13, 151645, 198,  151644, 872, 198, 74785,
                                   419,    2168, 13,  151645, 198,  151644, 77091, 198};
  EXPECT_EQ(ids, expect);
  const MropePositions mp = mrope_positions(ids, {});
  EXPECT_EQ(mp.rope_delta, 0);
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(mp.pos[i][2], static_cast<int32_t>(i));
}

TEST(Prompt, TwoImagesAdvanceFromMaximum) {
  // Spec 5.4: "multiple images repeat this"; next = 1 + max position used so far.
  const std::vector<int> ids = {1, 151652, 151655, 151655, 151655, 151655, 151653, 151652,
                                151655, 151655, 151653, 2};
  const MropePositions mp = mrope_positions(ids, {{2, 2}, {1, 2}});
  EXPECT_EQ(mp.pos[2], (std::array<int32_t, 3>{2, 2, 2}));
  EXPECT_EQ(mp.pos[5], (std::array<int32_t, 3>{2, 3, 3}));
  EXPECT_EQ(mp.pos[6], (std::array<int32_t, 3>{4, 4, 4}));
  EXPECT_EQ(mp.pos[8], (std::array<int32_t, 3>{6, 6, 6}));
  EXPECT_EQ(mp.pos[9], (std::array<int32_t, 3>{6, 6, 7}));
  EXPECT_EQ(mp.pos[10], (std::array<int32_t, 3>{8, 8, 8}));
  EXPECT_EQ(mp.rope_delta, 10 - 12);
}

TEST(PromptErrors, TooLong) {
  const std::string e = error_of([] { build_chat_prompt(stub_encode, "Describe this image.", 4096); });
  EXPECT_NE(e.find("4110 tokens"), std::string::npos) << e;
  EXPECT_NE(e.find("maximum of 4096"), std::string::npos) << e;
  EXPECT_NO_THROW(build_chat_prompt(stub_encode, "Describe this image.", 4096, {}, 8192));
  // Exactly at the limit is fine.
  EXPECT_NO_THROW(build_chat_prompt(stub_encode, "Describe this image.", 4082));
  EXPECT_FALSE(error_of([] { build_chat_prompt(stub_encode, "Describe this image.", 4083); }).empty());
}

TEST(PromptErrors, GridMismatch) {
  const std::vector<int> ids = build_chat_prompt(stub_encode, "Describe this image.", 64);
  EXPECT_NE(error_of([&] { mrope_positions(ids, {{8, 7}}); }).find("needs 56"), std::string::npos);
  EXPECT_NE(error_of([&] { mrope_positions(ids, {}); }).find("no image grid"), std::string::npos);
  EXPECT_NE(error_of([&] { mrope_positions(ids, {{8, 8}, {1, 1}}); }).find("2 image grids"), std::string::npos);
}

TEST(Prompt, RealTokenizer) {
  const std::string path = Tokenizer::default_path();
  ASSERT_TRUE(std::filesystem::exists(path)) << "tokenizer.json not installed at " << path
                                             << " (scripts/install-deps.sh installs it)";
  const Tokenizer tok = Tokenizer::load(path);
  const auto enc = [&](std::string_view s) { return tok.encode(s); };
  const std::vector<int> ids = build_chat_prompt(enc, "Describe this image.", 196);
  EXPECT_EQ(ids, golden_case("photo_448")["prompt_ids"].get<std::vector<int>>());
  // Piecewise encoding equals encoding the rendered template with one <|image_pad|>.
  const std::vector<int> whole = tok.encode(
      "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>Describe this image.<|im_end|>\n"
      "<|im_start|>assistant\n");
  EXPECT_EQ(build_chat_prompt(enc, "Describe this image.", 1), whole);
}

}  // namespace
}  // namespace gpnpu::model
