// Conversations (issue 18): the tiny model's multi-turn chat on the simulator against
// the chain, with its negative controls, the chunked and streamed prefills, and the
// capacity check of a turn; `gpnpu chat` through a pseudo-terminal is
// tests/model/cli/chat_pty.py.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <string>

#include "isa/error.h"
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

// Chunks (the image rows split across them) and the streamed plan at an offset.
TEST(Chat, TinyChunkedAndStreamedPrefillsMatchTheChain) {
  for (bool streamed : {false, true}) {
    ChatOptions o = tiny(2);
    o.chunk = 24;
    if (streamed) o.stream_rows = 8;
    Conversation c(o);
    const ChatTurn& t1 = c.turn("What is in this photo?", kPhoto);
    expect_gated(t1);
    int chunks = 0;
    for (const ChatRun& r : t1.runs) {
      chunks += r.kind == "prefill";
      if (r.kind == "prefill") {
        EXPECT_EQ(r.plan.starts_with("streamed"), streamed) << r.plan;
      }
    }
    EXPECT_GT(chunks, 2);
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

}  // namespace
}  // namespace gpnpu::model
