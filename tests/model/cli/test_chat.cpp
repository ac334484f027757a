// Conversations (issue 18): the tiny model's multi-turn chat on the simulator against
// the chain and against the PyTorch reference (scripts/reference/chat_golden.py), with
// their negative controls, the chunked and streamed prefills, and the capacity check of
// a turn; `gpnpu chat` through a pseudo-terminal is tests/model/cli/chat_pty.py.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "isa/error.h"
#include "model/checkpoint/config.h"
#include "model/inputs/image.h"
#include "model/reference/chain.h"
#include "model/runtime/conversation.h"

namespace gpnpu::model {
namespace {

const std::string kPhoto = std::string(GPNPU_SOURCE_DIR) + "/examples/photos/chelsea.png";
const std::string kPhoto2 = std::string(GPNPU_SOURCE_DIR) + "/tests/model/data/image_photo_256.png";

ChatOptions tiny(int tokens) {
  ChatOptions o;
  o.model = "synthetic:tiny";
  o.tokens = tokens;
  o.threads = 2;
  return o;
}

// Every run with logits and every cache gate passed at the chain's figures.
void expect_gated(const ChatTurn& t) {
  EXPECT_TRUE(t.ok) << "turn " << t.index << ": " << (t.failures.empty() ? "" : t.failures[0]);
  int with_logits = 0;
  for (const ChatRun& r : t.runs) {
    if (r.kind == "vision") continue;
    ASSERT_TRUE(r.slot_cosine.has_value()) << r.kind << " at " << r.offset;
    EXPECT_GE(*r.slot_cosine, kCacheGate);
    EXPECT_EQ(r.cache_slots, r.cache_expected);
    if (r.cosine) {
      ++with_logits;
      EXPECT_GE(*r.cosine, kLogitsGate) << r.kind << " at " << r.offset;
    }
  }
  EXPECT_EQ(with_logits, int(t.device.ids.size()));  // one logits row per answer token
  EXPECT_EQ(t.device.ids, t.chain.ids);
}

// Acceptance 1: turn 1 with an image, turn 2 text, turn 3 a second image.
TEST(Chat, TinyThreeTurnsMatchTheChainOnEveryRun) {
  Conversation c(tiny(4));
  const ChatTurn& t1 = c.turn("What is in this photo?", kPhoto);
  expect_gated(t1);
  EXPECT_EQ(t1.runs.front().kind, "vision");
  EXPECT_EQ(t1.cached_before, 0u);
  const ChatTurn& t2 = c.turn("What colour is it?");
  expect_gated(t2);
  EXPECT_EQ(t2.runs.front().kind, "prefill");
  EXPECT_EQ(t2.runs.front().offset, t1.cached_after);  // the follow-up lands on the carried cache
  const ChatTurn& t3 = c.turn("And this one?", kPhoto2);
  expect_gated(t3);
  EXPECT_EQ(t3.runs.front().kind, "vision");
  EXPECT_EQ(c.turns().size(), 3u);
}

// Chunks (the image rows split across them) and the streamed plan at an offset, its
// prefill in three phases and in whole layers a tile.
TEST(Chat, TinyChunkedAndStreamedPrefillsMatchTheChain) {
  for (uint32_t arrangement : {0u, 1u, 2u}) {
    const bool streamed = arrangement != 0;
    ChatOptions o = tiny(2);
    o.chunk = 24;
    if (streamed) o.stream_rows = 8;
    o.stream_prefill = arrangement;
    Conversation c(o);
    const ChatTurn& t1 = c.turn("What is in this photo?", kPhoto);
    expect_gated(t1);
    int chunks = 0, q_kept = 0;
    for (const ChatRun& r : t1.runs) {
      chunks += r.kind == "prefill";
      if (r.kind == "prefill") {
        EXPECT_EQ(r.plan.starts_with("streamed"), streamed) << r.plan;
        if (streamed) {
          EXPECT_NE(r.plan.find(arrangement == 2 ? "(whole layers)" : "(qkv|MLP phases"), std::string::npos) << r.plan;
        }
        q_kept += r.plan.find("the attention reads q") != std::string::npos;  // (k and v too with none cached)
      }
    }
    EXPECT_GT(chunks, 2);
    // The turn's prefill floor: the chunks' MACs or one run's weights, not every chunk's weights.
    double macs = 0, weights = 0, summed = 0;
    for (const ChatRun& r : t1.runs)
      if (r.kind == "prefill") macs += r.mac_floor, weights = std::max(weights, r.weights_floor), summed += r.floor();
    EXPECT_DOUBLE_EQ(t1.floor("prefill"), std::max(macs, weights));
    EXPECT_LT(t1.floor("prefill"), summed);
    // (phases: a chunk's 8 rows are one qkv tile; some chunks' attention reads q where it is,
    // after cached keys: Streamed::pq with a kv offset)
    if (streamed && arrangement == 1) {
      EXPECT_GT(q_kept, 0);
    }
    expect_gated(c.turn("And the background?"));
  }
}

// The negative controls: a stale or shifted cache between turns must fail a gate (and
// turn 1, before the corruption, passes).
TEST(Chat, StaleOrShiftedCacheBetweenTurnsFailsTheGates) {
  for (ChatNegative n : {ChatNegative::stale_cache, ChatNegative::shifted_cache}) {
    ChatOptions o = tiny(3);
    o.negative = n;
    Conversation c(o);
    EXPECT_TRUE(c.turn("Hello there, who are you?").ok);
    const ChatTurn& t2 = c.turn("What can you do?");
    EXPECT_FALSE(t2.ok);
    ASSERT_FALSE(t2.failures.empty());
    EXPECT_NE(t2.failures[0].find("KV cache"), std::string::npos) << t2.failures[0];
  }
}

// A turn past --max-context is refused with the numbers, before anything runs.
TEST(Chat, TurnPastTheMaxContextIsRefusedBeforeRunning) {
  ChatOptions o = tiny(5);
  o.timing_only = true;
  o.max_context = 40;
  Conversation c(o);
  const ChatTurn& t1 = c.turn("Hello there, who are you?");
  const uint32_t cached = c.cached();
  EXPECT_EQ(cached, t1.cached_after);
  try {
    c.turn("And what else can you tell me about yourself, in detail?");
    FAIL() << "a turn past --max-context ran";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find(fmt::format("turn 2: {} cached tokens", cached)), std::string::npos) << m;
    EXPECT_NE(m.find("more than --max-context = 40"), std::string::npos) << m;
  }
  EXPECT_EQ(c.cached(), cached);
  EXPECT_EQ(c.turns().size(), 1u);
}

// Timing-only: every run kind runs and has a floor; the answer is no answer.
TEST(Chat, TimingOnlyRunsEveryKind) {
  ChatOptions o = tiny(3);
  o.timing_only = true;
  Conversation c(o);
  const ChatTurn& t = c.turn("What is in this photo?", kPhoto);
  EXPECT_GT(t.cycles("vision"), 0u);
  EXPECT_GT(t.cycles("prefill"), 0u);
  EXPECT_GT(t.cycles("decode"), 0u);
  EXPECT_TRUE(t.device.ids.empty());  // placeholders are no answer
  for (const ChatRun& r : t.runs) EXPECT_GT(r.floor(), 0) << r.kind;
}

// `gpnpu chat --script` writes the report as JSON and as a page holding the same figures.
TEST(Chat, CliScriptWritesTheReportJsonAndPage) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("gpnpu_test_chat_cli_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string script = (dir / "turns.txt").string(), js = (dir / "r.json").string(), html = (dir / "r.html").string();
  std::ofstream(script) << "# two turns\nimage: " << kPhoto << "\nWhat is in this photo?\nWhat <colour> is it?\n";
  ASSERT_EQ(std::system(fmt::format("{} chat --model synthetic:tiny --timing-only --tokens 3 --script {} --report-json {} "
                                    "--report-html {} >{}/out.txt",
                                    GPNPU_BINARY, script, js, html, dir.string())
                            .c_str()),
            0);
  std::ifstream jf(js), hf(html);
  const nlohmann::json j = nlohmann::json::parse(jf);
  const std::string page((std::istreambuf_iterator<char>(hf)), std::istreambuf_iterator<char>());
  EXPECT_EQ(j["schema"], "gpnpu-chat-report/1");
  ASSERT_EQ(j["turns"].size(), 2u);
  EXPECT_EQ(j["turns"][1]["cached_before"], j["turns"][0]["cached_after"]);
  EXPECT_EQ(j["turns"][0]["runs"][0]["kind"], "vision");
  for (const auto& t : j["turns"])
    for (const auto& r : t["runs"])
      EXPECT_NE(page.find(fmt::format("<td>{}</td>", r["cycles"].get<uint64_t>())), std::string::npos)
          << "run of " << r["cycles"] << " cycles not on the page";
  EXPECT_NE(page.find("What &lt;colour&gt; is it?"), std::string::npos);  // the question, escaped
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

// ---- against the PyTorch reference --------------------------------------------------------

namespace fs = std::filesystem;

template <typename T>
std::vector<T> h5_read(hid_t f, const std::string& name, hid_t type) {
  hid_t ds = H5Dopen2(f, name.c_str(), H5P_DEFAULT);
  if (ds < 0) throw Error("no dataset " + name);
  hid_t sp = H5Dget_space(ds);
  std::vector<T> v(size_t(H5Sget_simple_extent_npoints(sp)));
  H5Dread(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data());
  H5Sclose(sp);
  H5Dclose(ds);
  return v;
}

struct Reference {
  std::vector<std::vector<int>> tokens;
  std::vector<std::vector<float>> logits;  // per turn: [tokens][vocab]
};

// Every answer token's device logits row against the reference's: the lowest cosine, and
// whether the tokens agree.
struct Agreement {
  double min_cos = 1;
  bool same_tokens = true;
  int rows = 0;
};
Agreement agree(const ChatTurn& t, const std::vector<int>& ref_tokens, const std::vector<float>& ref_logits) {
  Agreement a;
  a.same_tokens = t.device.ids == ref_tokens;
  const size_t V = size_t(config_tiny().text.vocab_size);
  for (const ChatRun& r : t.runs) {
    if (r.logits.empty()) continue;
    if (size_t(a.rows + 1) * V > ref_logits.size()) {
      a.same_tokens = false;  // more rows than the reference's answer
      break;
    }
    a.min_cos = std::min(a.min_cos, cosine(r.logits, std::span(&ref_logits[size_t(a.rows) * V], V)));
    ++a.rows;
  }
  return a;
}

// Acceptance 1 against the independent PyTorch reference: the same 3 turns (image, text,
// second image), the same tokens, logits cosine >= 0.9999 on every row; a stale cache
// between turns must break that agreement.
TEST(Chat, TinyThreeTurnsMatchThePyTorchReference) {
  const fs::path dir = fs::temp_directory_path() / ("gpnpu_test_chat_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string ck = (dir / "tiny").string(), bundle = ck + "/w4a16.safetensors";
  ASSERT_EQ(std::system(fmt::format("{} make-checkpoint --config tiny --seed 1 --out {} >/dev/null && {} quantize "
                                    "--model {} --out {} >/dev/null",
                                    GPNPU_BINARY, ck, GPNPU_BINARY, ck, bundle)
                            .c_str()),
            0);
  const std::vector<std::pair<std::string, std::string>> script = {
      {"What is in this photo?", kPhoto}, {"What colour is it?", ""}, {"And this one?", kPhoto2}};
  auto converse = [&](ChatNegative n, size_t turns) {
    ChatOptions o = tiny(4);
    o.model = bundle;
    o.keep_logits = true;
    o.negative = n;
    auto c = std::make_unique<Conversation>(o);
    for (size_t i = 0; i < turns; ++i) c->turn(script[i].first, script[i].second);
    return c;
  };
  std::unique_ptr<Conversation> good = converse(ChatNegative::none, 3);

  // The reference's inputs: each turn's ids as the device fed them, its pixels.
  const ModelConfig mc = config_tiny();
  nlohmann::json spec;
  spec["steps"] = 4;
  for (size_t i = 0; i < 3; ++i) {
    nlohmann::json tj;
    tj["ids"] = good->turns()[i].ids;
    tj["pixels"] = nullptr;
    tj["grid"] = nullptr;
    if (!script[i].second.empty()) {
      PreprocessOptions po;
      po.width = po.height = 256;
      po.patch_size = mc.vision.patch_size;
      po.temporal_patch_size = mc.vision.temporal_patch_size;
      po.merge_size = mc.vision.spatial_merge_size;
      const ImageInput in = preprocess_image(script[i].second, po);
      const std::string pix = (dir / fmt::format("pixels{}.f32", i)).string();
      std::ofstream(pix, std::ios::binary).write(reinterpret_cast<const char*>(in.patches.data()),
                                                 std::streamsize(in.patches.size() * 4));
      tj["pixels"] = pix;
      tj["grid"] = {1, in.grid_h, in.grid_w};
    }
    spec["turns"].push_back(tj);
  }
  std::ofstream((dir / "spec.json").string()) << spec.dump();
  const std::string out = (dir / "ref.h5").string();
  ASSERT_EQ(std::system(fmt::format("/usr/bin/python3 {}/scripts/reference/chat_golden.py --model {} --bundle {} "
                                    "--spec {} --out {}",
                                    GPNPU_SOURCE_DIR, ck, bundle, (dir / "spec.json").string(), out)
                            .c_str()),
            0);
  Reference ref;
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  hid_t f = H5Fopen(out.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  for (int i = 1; i <= 3; ++i) {
    ref.tokens.push_back(h5_read<int>(f, fmt::format("turn{}/tokens", i), H5T_NATIVE_INT));
    ref.logits.push_back(h5_read<float>(f, fmt::format("turn{}/logits", i), H5T_NATIVE_FLOAT));
  }
  H5Fclose(f);

  for (size_t i = 0; i < 3; ++i) {
    const ChatTurn& t = good->turns()[i];
    EXPECT_TRUE(t.ok) << "turn " << t.index;
    const Agreement a = agree(t, ref.tokens[i], ref.logits[i]);
    EXPECT_TRUE(a.same_tokens) << "turn " << t.index;
    EXPECT_EQ(a.rows, int(ref.tokens[i].size())) << "turn " << t.index;
    EXPECT_GE(a.min_cos, kLogitsGate) << "turn " << t.index;
    std::printf("turn %d: %d rows, min logits cosine vs PyTorch %.7f, tokens %s\n", t.index, a.rows, a.min_cos,
                a.same_tokens ? "equal" : "DIFFER");
  }
  // Negative control: the host keeps a stale cache between turns 1 and 2.
  std::unique_ptr<Conversation> stale = converse(ChatNegative::stale_cache, 2);
  const Agreement a = agree(stale->turns()[1], ref.tokens[1], ref.logits[1]);
  EXPECT_FALSE(a.min_cos >= kLogitsGate && a.same_tokens)
      << "a stale cache still agrees with the reference (min cosine " << a.min_cos << ")";
  std::printf("negative control (stale cache): turn 2 min logits cosine vs PyTorch %.7f\n", a.min_cos);
  std::error_code ec;
  fs::remove_all(dir, ec);
}

}  // namespace
}  // namespace gpnpu::model
