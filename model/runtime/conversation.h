// A conversation on the simulated chip (issue 18, docs/chat.md): turns of questions,
// some with an image, answered by three kinds of run while the host carries the KV
// cache and the M-RoPE position state between them.
//
// Contract:
//  - Runs: vision (an image's pixels -> its image rows and DeepStack rows, left in DDR),
//    prefill (a chunk of a turn's tokens appended to the KV cache after the tokens
//    already there, attending to them; its image rows spliced from the last vision
//    run; the last chunk of a turn ends in the LM head), decode (one token). The
//    compiler builds each prefill chunk for its offset and rows (prefill_chunk_rows:
//    the most rows that run with activations in OCM); the vision program per grid and
//    the decode program once.
//  - A turn: the chat template's tokens for it (model/inputs/prompt.h): turn 1 is
//    build_chat_prompt(question, image tokens); a later turn first closes the previous
//    answer (its last token, which no run has fed yet, then <|im_end|> unless that token
//    is it, then "\n") and then opens its own user turn the same way. Positions: the
//    turn's get_rope_index positions shifted by the next free position of the
//    conversation (an image's rows take (s, s+h, s+w)); decode tokens take the next
//    free position each. Then decode until <|im_end|>/<|endoftext|> or `tokens` answer
//    tokens (the first from the prefill's logits).
//  - Capacity: before a turn runs, cached + turn tokens + tokens - 1 must fit
//    max_context (the KV-cache slots compiled for); otherwise gpnpu::Error with the
//    numbers, and nothing runs. A turn compiles all its programs before its first run
//    (and before the chain starts it), so an error there leaves the conversation as it was.
//  - Functional runs are gated as describe's steps are (model/runtime/driver_host.h):
//    the chain (W4A16 mode, fed the device's tokens) prefills each whole turn and
//    decodes beside the device; each prefill chunk's device cache rows [0, cached)
//    against the chain's (slots and row cosine), the last chunk's and every decode
//    step's logits (cosine, top-1 token unless a tie). Timing-only runs take placeholder
//    tokens (0), have no gates, and decode exactly tokens - 1 steps per turn.
//  - Negative controls (each must fail a gate): stale_cache (before each later turn the
//    slots the previous turn's decode steps wrote are zeroed, as if the host had kept the
//    cache from before them), shifted_cache (a later turn's chunks are written one slot
//    past the carried offset).
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "model/runtime/driver_host.h"
#include "sim/machine/options.h"

namespace gpnpu::model {

enum class ChatNegative { none, stale_cache, shifted_cache };
ChatNegative parse_chat_negative(const std::string& s);  // gpnpu::Error on an unknown name

struct ChatOptions {
  std::string model = "synthetic:2b";  // as describe's --model
  std::string cache_dir;
  sim::MachineOptions machine;
  uint32_t max_context = 0;  // KV-cache slots (0: the most that fit the DDR, Compiler::max_context)
  int tokens = 20;           // answer tokens per turn at most (>= 1)
  uint32_t chunk = 0;        // rows per prefill chunk (0: the compiler's OCM rule)
  uint32_t stream_rows = 0;     // test knob: CompileOptions::image_tile_rows (forces the streamed plan)
  uint32_t stream_prefill = 0;  // test knob: CompileOptions::image_prefill (1 three phases, 2 whole layers)
  bool keep_logits = false;  // keep every run's device logits (ChatRun::logits), for comparisons
  int width = 256, height = 256;
  bool timing_only = false;
  ChatNegative negative = ChatNegative::none;
  int threads = 0;
  std::function<void(const std::string&)> log;
};

// One run of a turn.
struct ChatRun {
  std::string kind;       // vision | prefill | decode
  uint32_t offset = 0;    // tokens cached before it
  uint32_t rows = 0;      // tokens it appends (vision: 0)
  std::string plan;       // the compiler's OCM plan (vision, prefill)
  uint64_t cycles = 0, ddr_bytes = 0;
  double mac_floor = 0, weights_floor = 0;  // cycles: every MAC at peak; the run's weights read once
  double floor() const { return std::max(mac_floor, weights_floor); }
  std::optional<int> device_token, chain_token;
  std::optional<double> cosine, slot_cosine;
  int cache_slots = 0, cache_expected = 0;
  std::vector<std::string> failures;
  double wall_s = 0;
  std::vector<float> logits;  // the device's, with ChatOptions::keep_logits (functional runs with logits)
};

struct ChatTurn {
  int index = 0;  // 1-based
  std::string question, image;
  int prompt_tokens = 0, image_tokens = 0;
  std::vector<int> ids;  // the tokens the turn fed (the previous answer's closing, its user turn)
  uint32_t cached_before = 0, cached_after = 0;
  std::vector<ChatRun> runs;
  Answer device, chain;
  std::vector<std::string> failures;
  bool ok = true;
  // Cycles of the runs of one kind, and their floor: the sum of the runs' floors, but for the
  // prefill, whose chunks are the plan's choice, max(every chunk's MACs, the weights of one run).
  uint64_t cycles(const std::string& kind) const;
  double floor(const std::string& kind) const;
  uint64_t ttft_cycles() const;  // vision + prefill + nothing else: the first answer token's
};

class Conversation {
 public:
  explicit Conversation(const ChatOptions& opt);
  ~Conversation();
  // Runs one turn (image: "" for none) and returns its record (also kept in turns()).
  const ChatTurn& turn(const std::string& question, const std::string& image = "");
  const std::vector<ChatTurn>& turns() const { return turns_; }
  uint32_t cached() const { return cached_; }
  uint32_t max_context() const;
  const sim::Config& config() const;
  std::string model_name() const;
  bool timing_only() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::vector<ChatTurn> turns_;
  uint32_t cached_ = 0;
};

// The report of schema gpnpu-chat-report/1 (docs/chat.md).
std::string chat_report_json(const Conversation& c);

}  // namespace gpnpu::model
