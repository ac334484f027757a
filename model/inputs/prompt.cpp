// Chat template and M-RoPE positions. See prompt.h.
#include "model/inputs/prompt.h"

#include <algorithm>

#include "isa/error.h"

namespace gpnpu::model {

std::vector<int> build_chat_prompt(const EncodeFn& encode, std::string_view user_text,
                                   int n_image_tokens, std::string_view system_text,
                                   int max_tokens, const ChatTokens& tok) {
  if (!encode) fail("build_chat_prompt: no encode function given");
  if (n_image_tokens < 0) fail("build_chat_prompt: negative image token count {}", n_image_tokens);
  std::vector<int> ids;
  auto text = [&](std::string_view s) {
    const std::vector<int> t = encode(s);
    ids.insert(ids.end(), t.begin(), t.end());
  };
  if (!system_text.empty()) {
    ids.push_back(tok.im_start);
    text("system\n");
    text(system_text);
    ids.push_back(tok.im_end);
    text("\n");
  }
  ids.push_back(tok.im_start);
  text("user\n");
  if (n_image_tokens > 0) {
    ids.push_back(tok.vision_start);
    ids.insert(ids.end(), static_cast<size_t>(n_image_tokens), tok.image_pad);
    ids.push_back(tok.vision_end);
  }
  text(user_text);
  ids.push_back(tok.im_end);
  text("\n");
  ids.push_back(tok.im_start);
  text("assistant\n");
  if (static_cast<int64_t>(ids.size()) > max_tokens)
    fail("prompt is {} tokens ({} of them image tokens, {} text bytes), more than the supported "
         "maximum of {}; shorten the text, use a smaller image, or raise the prompt limit",
         ids.size(), n_image_tokens, user_text.size() + system_text.size(), max_tokens);
  return ids;
}

std::vector<int32_t> MropePositions::planar() const {
  std::vector<int32_t> out(pos.size() * 3);
  for (size_t i = 0; i < pos.size(); ++i)
    for (int a = 0; a < 3; ++a) out[a * pos.size() + i] = pos[i][a];
  return out;
}

MropePositions mrope_positions(const std::vector<int>& ids, const std::vector<MergedGrid>& grids,
                               int image_pad_id) {
  MropePositions r;
  r.pos.reserve(ids.size());
  int64_t next = 0, max_used = -1;
  size_t img = 0;
  for (size_t i = 0; i < ids.size();) {
    if (ids[i] != image_pad_id) {
      const auto p = static_cast<int32_t>(next);
      r.pos.push_back({p, p, p});
      max_used = std::max(max_used, next);
      ++next;
      ++i;
      continue;
    }
    size_t run = 0;
    while (i + run < ids.size() && ids[i + run] == image_pad_id) ++run;
    if (img >= grids.size())
      fail("positions: image-pad run {} at token {} has no image grid ({} grids given)", img + 1, i,
           grids.size());
    const MergedGrid g = grids[img];
    if (g.h <= 0 || g.w <= 0 || run != static_cast<size_t>(g.h) * g.w)
      fail("positions: image {} has {} <|image_pad|> tokens at {} but its merged grid {}x{} needs {}",
           img + 1, run, i, g.h, g.w, static_cast<int64_t>(g.h) * g.w);
    const auto s = static_cast<int32_t>(next);
    for (int bh = 0; bh < g.h; ++bh)
      for (int bw = 0; bw < g.w; ++bw) r.pos.push_back({s, s + bh, s + bw});
    max_used = std::max<int64_t>(max_used, s + std::max(g.h - 1, g.w - 1));
    next = max_used + 1;
    i += run;
    ++img;
  }
  if (img != grids.size())
    fail("positions: {} image grids given but the prompt has {} image-pad runs", grids.size(), img);
  r.rope_delta = (max_used + 1) - static_cast<int64_t>(ids.size());
  return r;
}

}  // namespace gpnpu::model
