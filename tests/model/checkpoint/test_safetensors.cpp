// safetensors reader/writer and checkpoint loader tests: round trips, the HF directory
// layouts (single file, shards + index), and every error the loader must name clearly.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include <unistd.h>

#include "isa/error.h"
#include "isa/fp16.h"
#include "model/checkpoint/config.h"
#include "model/checkpoint/safetensors.h"
#include "temp_dir.h"

using namespace gpnpu::model;
namespace fs = std::filesystem;

namespace {

using gpnpu::model::test::TempDir;

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
}

// A raw safetensors file from a header string and a data section.
std::string raw_file(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[size_t(i)] = char((n >> (8 * i)) & 0xff);
  return out + header + data;
}

// Expects fn to throw gpnpu::Error whose message holds every string in `want`.
void expect_error(const std::function<void()>& fn, const std::vector<std::string>& want) {
  try {
    fn();
  } catch (const gpnpu::Error& e) {
    std::string m = e.what();
    for (const auto& w : want) EXPECT_NE(m.find(w), std::string::npos) << "want '" << w << "' in: " << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << "one line: " << m;
    return;
  }
  ADD_FAILURE() << "no gpnpu::Error thrown";
}

// Writes a tiny-config checkpoint header with sparse (zero) data, after `edit` changes
// the declarations: quick to make, read through the real loader.
void write_tiny_ckpt(const std::string& dir, const std::function<void(std::vector<TensorDecl>&)>& edit) {
  fs::create_directories(dir);
  std::ofstream(dir + "/config.json") << config_tiny().to_json().dump(2);
  std::vector<TensorDecl> decls;
  for (const auto& s : expected_tensors(config_tiny())) decls.push_back({s.name, DType::BF16, s.shape});
  edit(decls);
  SafetensorsWriter w(dir + "/model.safetensors", decls);
  w.skip_rest();
  w.finish();
}

}  // namespace

TEST(Safetensors, Bf16Conversion) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(f32_to_bf16(-2.0f), 0xc000);
  // 1 + 2^-8 is exactly halfway between bf16 1.0 and 1.0078125: ties to even (1.0).
  EXPECT_EQ(f32_to_bf16(1.0f + 0x1.0p-8f), 0x3f80);
  // 1 + 3*2^-8 is halfway between 1.0078125 (odd) and 1.015625 (even): rounds up.
  EXPECT_EQ(f32_to_bf16(1.0f + 3 * 0x1.0p-8f), 0x3f82);
  EXPECT_EQ(f32_to_bf16(1.0f + 0x1.0p-8f + 0x1.0p-20f), 0x3f81);
  EXPECT_EQ(bf16_to_f32(0x3f81), 1.0078125f);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::nanf("")))));
  EXPECT_TRUE(std::isinf(bf16_to_f32(f32_to_bf16(3.4e38f))));  // rounds past the max to inf
}

TEST(Safetensors, WriteReadRoundTripAllDtypes) {
  TempDir d("rt");
  std::vector<float> f = {1.5f, -2.25f, 3.0e-3f, 65504.0f, 0.0f, -0.0f};
  std::vector<uint8_t> u8 = {0, 1, 254, 255};
  std::vector<int8_t> i8 = {-128, -1, 0, 127};
  std::vector<int32_t> i32 = {-(1 << 24), -5, 7, 1 << 24};
  std::vector<TensorDecl> decls = {{"a.f32", DType::F32, {2, 3}},  {"b.bf16", DType::BF16, {6}},
                                   {"c.f16", DType::F16, {3, 2}},  {"d.u8", DType::U8, {4}},
                                   {"e.i8", DType::I8, {2, 2}},    {"f.i32", DType::I32, {4}},
                                   {"g.empty", DType::F32, {0, 5}}};
  std::string path = d / "x.safetensors";
  {
    SafetensorsWriter w(path, decls, {{"k", "v"}});
    EXPECT_EQ(w.header_bytes().size() % 8, 0u);
    w.write_f32("a.f32", f.data(), f.size());
    w.write_f32("b.bf16", f.data(), f.size());
    w.write_f32("c.f16", f.data(), f.size());
    w.write("d.u8", u8.data(), u8.size());
    w.write("e.i8", i8.data(), i8.size());
    w.begin_tensor("f.i32");  // piecewise
    w.append(i32.data(), 8);
    w.append(i32.data() + 2, 8);
    w.write("g.empty", nullptr, 0);
    w.finish();
  }
  SafetensorsFile r(path);
  EXPECT_EQ(r.metadata().at("k"), "v");
  ASSERT_EQ(r.tensors().size(), 7u);
  EXPECT_EQ(r.get("a.f32").shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(r.get("a.f32").to_f32(), f);
  auto b = r.get("b.bf16").to_f32();
  auto c = r.get("c.f16").to_f32();
  for (size_t i = 0; i < f.size(); ++i) {
    EXPECT_EQ(b[i], bf16_to_f32(f32_to_bf16(f[i])));
    EXPECT_EQ(c[i], gpnpu::round_f16(f[i]));
  }
  EXPECT_EQ(r.get("d.u8").to_f32(), (std::vector<float>{0, 1, 254, 255}));
  EXPECT_EQ(r.get("e.i8").to_f32(), (std::vector<float>{-128, -1, 0, 127}));
  EXPECT_EQ(r.get("f.i32").to_f32(), (std::vector<float>{-16777216.f, -5, 7, 16777216.f}));
  EXPECT_EQ(r.get("g.empty").numel(), 0);
  EXPECT_EQ(r.get("d.u8").dtype, DType::U8);
  expect_error([&] { r.get("nope"); }, {path, "missing tensor 'nope'"});
}

TEST(Safetensors, WriterMisuseErrors) {
  TempDir d("wr");
  std::vector<TensorDecl> decls = {{"a", DType::F32, {2}}, {"b", DType::U8, {3}}};
  float a[2] = {1, 2};
  {
    SafetensorsWriter w(d / "1.st", decls);
    expect_error([&] { w.write("b", a, 3); }, {"'b' written out of order", "next declared tensor is 'a'"});
  }
  {
    SafetensorsWriter w(d / "2.st", decls);
    expect_error([&] { w.write("a", a, 4); }, {"'a' got 4 bytes", "needs 8"});
  }
  {
    SafetensorsWriter w(d / "3.st", decls);
    w.write("a", a, 8);
    expect_error([&] { w.finish(); }, {"only 1 of 2", "'b'"});
  }
}

// ---- corrupt and truncated files: each error names the file, the tensor and what to do --

TEST(Safetensors, TruncatedFile) {
  TempDir d("trunc");
  std::string path = d / "t.safetensors";
  {
    SafetensorsWriter w(path, {{"w", DType::F32, {4, 4}}});
    std::vector<float> v(16, 1.0f);
    w.write_f32("w", v.data(), v.size());
    w.finish();
  }
  ASSERT_NO_THROW(SafetensorsFile ok(path));  // control
  std::string bytes = read_bytes(path);
  write_bytes(path, bytes.substr(0, bytes.size() - 10));  // cut into the data
  expect_error([&] { SafetensorsFile f(path); }, {path, "truncated", "'w'", "data_offsets [0, 64]", "regenerate"});
  write_bytes(path, bytes.substr(0, 20));  // cut into the header
  expect_error([&] { SafetensorsFile f(path); }, {path, "truncated", "header length"});
  write_bytes(path, bytes.substr(0, 5));  // not even the length prefix
  expect_error([&] { SafetensorsFile f(path); }, {path, "truncated", "5 bytes"});
}

TEST(Safetensors, CorruptHeader) {
  TempDir d("corrupt");
  std::string path = d / "c.safetensors";
  const std::string data(64, '\0');
  auto check = [&](const std::string& header, const std::vector<std::string>& want) {
    write_bytes(path, raw_file(header, data));
    std::vector<std::string> w = want;
    w.push_back(path);
    expect_error([&] { SafetensorsFile f(path); }, w);
  };
  // Control: a valid header over the same data opens.
  write_bytes(path, raw_file(R"({"w":{"dtype":"F32","shape":[4,4],"data_offsets":[0,64]}})", data));
  ASSERT_NO_THROW(SafetensorsFile ok(path));
  check(R"({"w":{"dtype":"F32","shape":[4,4],"data_offsets":[0,64]})", {"corrupt safetensors header", "invalid JSON"});
  check(std::string(16, '\xff'), {"invalid JSON"});
  check(R"({"w":{"dtype":"F32","shape":[4,4],"data_offsets":[0,128]}})", {"'w'", "data_offsets [0, 128]", "64-byte"});
  check(R"({"w":{"dtype":"F32","shape":[4,4],"data_offsets":[0,32]}})",
        {"'w'", "hold 32 bytes but F32 [4, 4] needs 64"});
  check(R"({"w":{"dtype":"F32","shape":[2,4],"data_offsets":[0,32]},"v":{"dtype":"F32","shape":[4],"data_offsets":[16,32]}})",
        {"overlap", "'w'", "'v'"});
  check(R"({"w":{"dtype":"Q4","shape":[4],"data_offsets":[0,2]}})", {"'w'", "unsupported dtype 'Q4'"});
  check(R"({"w":{"dtype":"F32","shape":[4]}})", {"'w'", "data_offsets"});
  check(R"({"w":{"dtype":"F32","shape":[-4],"data_offsets":[0,16]}})", {"'w'", "shape entry -4"});
  check(R"([1,2,3])", {"expected a JSON object"});
}

// ---- the checkpoint loader --------------------------------------------------------------

TEST(Checkpoint, OpensHfDirectoryAndChecks) {
  TempDir d("ok");
  write_tiny_ckpt(d / "m", [](auto&) {});
  Checkpoint ck = load_checkpoint(d / "m");
  EXPECT_EQ(ck.config(), config_tiny());
  EXPECT_EQ(ck.names().size(), expected_tensors(config_tiny()).size());
  EXPECT_EQ(ck.get(kEmbedTokens).shape, (std::vector<int64_t>{151936, 128}));
  // A single .safetensors file path works too (config.json beside it is read).
  Checkpoint ck2 = load_checkpoint(d / "m/model.safetensors");
  EXPECT_EQ(ck2.names(), ck.names());
}

TEST(Checkpoint, AcceptsTiedLmHeadIfPresent) {
  TempDir d("lmhead");
  write_tiny_ckpt(d / "m", [](auto& decls) { decls.push_back({kLmHead, DType::BF16, {151936, 128}}); });
  EXPECT_NO_THROW(load_checkpoint(d / "m"));
  write_tiny_ckpt(d / "m2", [](auto& decls) { decls.push_back({kLmHead, DType::BF16, {151936, 64}}); });
  expect_error([&] { load_checkpoint(d / "m2"); }, {"wrong shape", "'lm_head.weight'", "[151936, 128]", "[151936, 64]"});
}

TEST(Checkpoint, MissingTensor) {
  TempDir d("missing");
  const std::string victim = text_layer_name(3, "self_attn.k_norm.weight");
  write_tiny_ckpt(d / "m", [&](auto& decls) {
    std::erase_if(decls, [&](const TensorDecl& t) { return t.name == victim; });
  });
  expect_error([&] { load_checkpoint(d / "m"); },
               {d / "m", "missing tensor '" + victim + "'", "[32]", "does not match the config"});
}

TEST(Checkpoint, WrongShape) {
  TempDir d("shape");
  const std::string victim = vision_block_name(2, "attn.qkv.weight");
  write_tiny_ckpt(d / "m", [&](auto& decls) {
    for (auto& t : decls)
      if (t.name == victim) t.shape = {384, 64};
  });
  expect_error([&] { load_checkpoint(d / "m"); },
               {"model.safetensors", "wrong shape for tensor '" + victim + "'", "expected [384, 128], got [384, 64]"});
  // The 2B config against a tiny checkpoint: the first tensor already differs.
  ModelConfig b = config_2b();
  expect_error([&] { load_checkpoint(d / "m", &b); }, {"wrong shape", "model.visual.patch_embed.proj.weight"});
}

TEST(Checkpoint, WrongDtype) {
  TempDir d("dtype");
  write_tiny_ckpt(d / "m", [&](auto& decls) {
    for (auto& t : decls)
      if (t.name == kFinalNorm) t.dtype = DType::I32;
  });
  expect_error([&] { load_checkpoint(d / "m"); },
               {"wrong dtype for tensor 'model.language_model.norm.weight'", "expected BF16, F16 or F32, got I32"});
}

TEST(Checkpoint, UnexpectedTensor) {
  TempDir d("extra");
  write_tiny_ckpt(d / "m", [&](auto& decls) { decls.push_back({"model.visual.blocks.4.norm1.weight", DType::BF16, {128}}); });
  expect_error([&] { load_checkpoint(d / "m"); }, {"unexpected tensor 'model.visual.blocks.4.norm1.weight'"});
}

TEST(Checkpoint, ShardedLayout) {
  TempDir d("shards");
  const std::string dir = d / "m";
  fs::create_directories(dir);
  std::ofstream(dir + "/config.json") << config_tiny().to_json().dump(2);
  auto specs = expected_tensors(config_tiny());
  std::vector<TensorDecl> a, b;
  nlohmann::json index;
  index["metadata"] = {{"total_size", 0}};
  for (size_t i = 0; i < specs.size(); ++i) {
    bool first = i < specs.size() / 2;
    (first ? a : b).push_back({specs[i].name, DType::BF16, specs[i].shape});
    index["weight_map"][specs[i].name] = first ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
  }
  for (auto [decls, name] : {std::pair{&a, "model-00001-of-00002.safetensors"}, std::pair{&b, "model-00002-of-00002.safetensors"}}) {
    SafetensorsWriter w(dir + "/" + name, *decls);
    w.skip_rest();
    w.finish();
  }
  std::ofstream(dir + "/model.safetensors.index.json") << index.dump(2);
  Checkpoint ck = load_checkpoint(dir);
  EXPECT_EQ(ck.files().size(), 2u);
  EXPECT_EQ(ck.names().size(), specs.size());
  // A shard missing on disk, and the index pointing a tensor to the wrong shard.
  fs::rename(dir + "/model-00002-of-00002.safetensors", dir + "/x");
  expect_error([&] { Checkpoint::open(dir); }, {"shard 'model-00002-of-00002.safetensors'", "missing"});
  fs::rename(dir + "/x", dir + "/model-00002-of-00002.safetensors");
  index["weight_map"][specs[0].name] = "model-00002-of-00002.safetensors";
  std::ofstream(dir + "/model.safetensors.index.json") << index.dump(2);
  expect_error([&] { Checkpoint::open(dir); }, {"missing tensor '" + specs[0].name + "'", "index"});
}

TEST(Checkpoint, NotACheckpoint) {
  TempDir d("none");
  expect_error([&] { Checkpoint::open(d / "nothing"); }, {"no such checkpoint"});
  expect_error([&] { Checkpoint::open(d.p.string()); }, {"model.safetensors", "model.safetensors.index.json"});
}
