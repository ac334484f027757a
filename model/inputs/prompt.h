// Prompt assembly and M-RoPE positions for Qwen3-VL Instruct
// (spec docs/model.md sections 5.4-5.6 and 7.3).
//
// Contract:
//  - build_chat_prompt: the Qwen3-VL Instruct chat template for one user turn with at
//    most one image before the text, and the assistant opener (add_generation_prompt):
//      [<|im_start|>system\n{SYSTEM}<|im_end|>\n]            (only if system is non-empty)
//      <|im_start|>user\n<|vision_start|>{<|image_pad|> x n_image_tokens}<|vision_end|>{TEXT}
//      <|im_end|>\n<|im_start|>assistant\n
//    The image block is omitted when n_image_tokens == 0. There is no default system
//    prompt and no <think>. The plain-text pieces ("user\n", TEXT, "\n", "assistant\n")
//    are tokenised separately by `encode`; that equals tokenising the whole string
//    because the tokenizer splits on added tokens before BPE. Special-token ids come
//    from ChatTokens (spec 7.1), so any encode function will do (the real one is
//    Tokenizer::encode of model/inputs/tokenizer.h). Throws gpnpu::Error when the result is
//    longer than max_tokens.
//  - mrope_positions (get_rope_index): a (t, h, w) triple per prompt position. Text
//    tokens get (p, p, p) with p the next free position; the k-th run of image pads,
//    entered at s, covers the merged grid grids[k] in row-major order, token (bh, bw)
//    getting (s, s+bh, s+bw); afterwards the next free position is 1 + the largest
//    position used so far. rope_delta = (max position + 1) - sequence length.
//  - decode_position(n, delta): the token at absolute index n (= tokens already in the
//    KV cache) gets n + delta on all three axes.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace gpnpu::model {

using EncodeFn = std::function<std::vector<int>(std::string_view)>;

// Special-token ids (spec 7.1; config.json for the vision ones).
struct ChatTokens {
  int im_start = 151644;       // <|im_start|>
  int im_end = 151645;         // <|im_end|>
  int vision_start = 151652;   // <|vision_start|>
  int vision_end = 151653;     // <|vision_end|>
  int image_pad = 151655;      // <|image_pad|>
};

inline constexpr int kDefaultMaxPromptTokens = 4096;

std::vector<int> build_chat_prompt(const EncodeFn& encode, std::string_view user_text,
                                   int n_image_tokens, std::string_view system_text = {},
                                   int max_tokens = kDefaultMaxPromptTokens,
                                   const ChatTokens& tok = {});

// Merged (LM-token) grid of one image: grid_h / merge x grid_w / merge.
struct MergedGrid {
  int h = 0;
  int w = 0;
};

struct MropePositions {
  std::vector<std::array<int32_t, 3>> pos;  // [seq][t, h, w]
  int64_t rope_delta = 0;                   // <= 0 when an image is present
  int64_t next_position() const { return static_cast<int64_t>(pos.size()) + rope_delta; }
  // Planar [3][seq] (t row, then h, then w), the layout of HF's position_ids.
  std::vector<int32_t> planar() const;
};

// Throws gpnpu::Error when the image-pad runs do not match the grids (count or length).
MropePositions mrope_positions(const std::vector<int>& ids, const std::vector<MergedGrid>& grids,
                               int image_pad_id = ChatTokens{}.image_pad);

inline std::array<int32_t, 3> decode_position(int64_t n, int64_t rope_delta) {
  const auto p = static_cast<int32_t>(n + rope_delta);
  return {p, p, p};
}

}  // namespace gpnpu::model
