// `gpnpu chat`: a conversation with Qwen3-VL on the simulated GPNPU (docs/chat.md),
// interactive (a `you>` prompt; on a terminal with line editing and a history kept in
// the cache directory, libedit) or scripted (--script FILE). Input
// lines: a question, or `image: FILE` (attaches the image to the next question); `#`
// starts a comment line in a script; `/quit` or end of input ends the conversation.
#include <fmt/format.h>

#include <editline/readline.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "isa/cli_rules.h"
#include "isa/error.h"
#include "isa/io_rules.h"
#include "model/checkpoint/quant.h"
#include "model/cli/capacity.h"
#include "model/cli/driver.h"
#include "model/inputs/prompt.h"
#include "model/runtime/conversation.h"
#include "sim/run.h"

namespace gpnpu::model {

namespace {

// The model's config before anything is loaded: a bundle's own, else the spec's.
ModelConfig config_of(const std::string& spec) {
  if (spec.ends_with(".safetensors") && std::filesystem::is_regular_file(spec)) return QuantBundle(spec).config();
  return model_config_from_spec(spec);
}

// The interactive prompt: on a terminal, libedit's readline (editing, the arrow keys
// through the history, which persists in `history_file`); otherwise plain lines, so
// that piped input works as it did. False at end of input.
class Prompt {
 public:
  explicit Prompt(std::string history_file) : tty_(::isatty(0) && ::isatty(1)), file_(std::move(history_file)) {
    if (!tty_) return;
    using_history();
    stifle_history(1000);
    if (!file_.empty()) read_history(file_.c_str());  // absent on first use: nothing to read
  }
  ~Prompt() {
    if (tty_ && !file_.empty()) write_history(file_.c_str());  // best effort: a read-only cache loses only history
  }
  bool read(const char* prompt, std::string& line) {
    if (!tty_) {
      std::printf("%s", prompt);
      std::fflush(stdout);
      return bool(std::getline(std::cin, line));
    }
    std::fflush(stdout);
    char* got = readline(prompt);
    if (!got) return false;
    line = got;
    std::free(got);
    if (!line.empty() && line != last_) add_history(line.c_str());
    last_ = line;
    return true;
  }

 private:
  bool tty_;
  std::string file_, last_;
};

std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t\r"), b = s.find_last_not_of(" \t\r");
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

// One line of figures per turn: cycles per run kind against their floors, time to
// first token, decode rate, the cache, the gates.
void print_turn(const ChatTurn& t, const sim::Config& cfg, bool timing_only) {
  if (!timing_only) std::printf("assistant: %s\n", t.device.text.c_str());
  const double ghz = cfg.clock_ghz;
  size_t decodes = 0, prefills = 0;
  for (const ChatRun& r : t.runs) decodes += r.kind == "decode", prefills += r.kind == "prefill";
  std::string line = fmt::format("  [turn {}: {} prompt tokens", t.index, t.prompt_tokens);
  for (const char* kind : {"vision", "prefill", "decode"}) {
    const uint64_t c = t.cycles(kind);
    if (!c) continue;
    line += fmt::format("; {} {:.2f} M cycles ({:.3f}x floor{})", kind, c / 1e6, c / std::max(1.0, t.floor(kind)),
                        std::string(kind) == "prefill" ? fmt::format(", {} chunk{}", prefills, prefills == 1 ? "" : "s")
                        : std::string(kind) == "decode" ? fmt::format(", {} steps", decodes)
                                                        : "");
  }
  const uint64_t dec = t.cycles("decode");
  line += fmt::format("; first token {:.1f} ms", t.ttft_cycles() / (ghz * 1e6));
  if (dec) line += fmt::format(", {:.1f} tokens/s", decodes / (dec / (ghz * 1e9)));
  line += fmt::format("; cache {} -> {} tokens", t.cached_before, t.cached_after);
  if (!timing_only) {
    double worst = 1;
    for (const ChatRun& r : t.runs)
      if (r.cosine) worst = std::min(worst, *r.cosine);
    line += t.ok ? fmt::format("; gates pass, min logits cosine {}", format_cosine(worst))
                 : fmt::format("; {} GATE FAILURE(S)", t.failures.size());
  }
  std::printf("%s]\n", line.c_str());
  for (const std::string& f : t.failures) std::printf("  FAIL %s\n", f.c_str());
  std::fflush(stdout);
}

std::string html_escape(const std::string& t) {
  std::string o;
  for (char ch : t) {
    switch (ch) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      default: o += ch;
    }
  }
  return o;
}

// The report page: one self-contained HTML file made from the report's JSON (the same
// figures): per turn the question, the answer, cycles per run kind against floors, and
// every run.
std::string chat_html(const nlohmann::json& j) {
  std::string h = "<!doctype html><html><head><meta charset=\"utf-8\"><title>gpnpu chat</title><style>"
                  "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;margin:.5em 0}"
                  "td,th{border:1px solid #bbb;padding:2px 8px;text-align:right}td.l{text-align:left}"
                  ".fail{color:#b00}</style></head><body>";
  h += fmt::format("<h1>gpnpu chat</h1><p>{}; KV cache of {} tokens; {}</p>", html_escape(j["model"].get<std::string>()),
                   j["max_context"].get<uint64_t>(),
                   j["timing_only"].get<bool>() ? "timing only: placeholder tokens, no gates"
                   : j["ok"].get<bool>()        ? "every gate passed"
                                                : "<b class=fail>a gate failed</b>");
  const double ghz = j["machine"]["clock_ghz"].get<double>();
  for (const auto& t : j["turns"]) {
    h += fmt::format("<h2>Turn {}</h2><p><b>you:</b> {}{}</p><p><b>assistant:</b> {}</p>", t["turn"].get<int>(),
                     t["image"].get<std::string>().empty() ? "" : "[image " + html_escape(t["image"]) + "] ",
                     html_escape(t["question"]), html_escape(t["answer"]["text"]));
    h += fmt::format("<p>{} prompt tokens; cache {} &rarr; {} tokens; first token {:.2f} ms; decode {:.1f} tokens/s</p>",
                     t["prompt_tokens"].get<int>(), t["cached_before"].get<uint64_t>(), t["cached_after"].get<uint64_t>(),
                     t["ttft_ms"].get<double>(), t["decode_tokens_per_s"].get<double>());
    h += "<table><tr><th>run</th><th>offset</th><th>rows</th><th>cycles</th><th>ms</th><th>floor</th><th>ratio</th>"
         "<th>logits cosine</th><th>cache cosine</th><th class=l>gates</th></tr>";
    for (const auto& r : t["runs"]) {
      const double c = r["cycles"].get<double>(), fl = std::max(r["mac_floor"].get<double>(), r["weights_floor"].get<double>());
      auto opt = [&](const char* k) { return r.contains(k) ? fmt::format("{:.7f}", r[k].get<double>()) : std::string("-"); };
      std::string gates = r["failures"].empty() ? (r.contains("cache_min_cosine") ? "pass" : "-") : "";
      for (const auto& f : r["failures"]) gates += "<span class=fail>" + html_escape(f) + "</span><br>";
      h += fmt::format("<tr><td class=l>{}</td><td>{}</td><td>{}</td><td>{:.0f}</td><td>{:.3f}</td><td>{:.0f}</td>"
                       "<td>{:.3f}</td><td>{}</td><td>{}</td><td class=l>{}</td></tr>",
                       r["kind"].get<std::string>(), r["offset"].get<uint64_t>(), r["rows"].get<uint64_t>(), c,
                       c / (ghz * 1e6), fl, fl > 0 ? c / fl : 0.0, opt("logits_cosine"), opt("cache_min_cosine"), gates);
    }
    h += "</table>";
  }
  return h + "</body></html>\n";
}

}  // namespace

void add_chat_command(CLI::App& app) {
  auto* c = app.add_subcommand("chat", "a conversation with Qwen3-VL on the simulated GPNPU: questions, images, "
                                       "follow-ups on the carried KV cache (docs/chat.md)");
  static ChatOptions o;
  static std::string script, size = "256x256", negative, report_json_path, report_html, max_context = "auto";
  c->add_option("--script", script, "run the turns of this file (one question per line; 'image: FILE' attaches an "
                                    "image to the next question; '#' comments) instead of asking on the terminal");
  c->add_option("--model", o.model, "synthetic:2b, synthetic:tiny, a checkpoint directory or a W4A16 bundle")
      ->capture_default_str();
  c->add_option("--cache-dir", o.cache_dir, "where quantised bundles are cached (as describe's)");
  c->add_option("--tokens", o.tokens, "answer tokens per turn at most (the first from the prefill)")
      ->capture_default_str()
      ->check(cli::integer(1, kDefaultMaxPromptTokens));
  c->add_option("--size", size, "resize images to WxH pixels (multiples of 32), or 'auto'")->capture_default_str();
  add_max_context_option(c, max_context);
  c->add_option("--chunk", o.chunk, "tokens per prefill run, the last one shorter (0: the most that run with their "
                                    "activations in OCM; a larger chunk streams them from DDR)")
      ->capture_default_str()
      ->check(cli::integer(0, 65536));
  o.machine.add(c);
  c->add_flag("--timing-only", o.timing_only, "cycles only: no weights, no arithmetic, no gates");
  c->add_option("--negative-control", negative,
                "corrupt the carried cache to prove a gate fails: stale-cache, shifted-cache");
  c->add_option("--threads", o.threads, "chain threads (0: all cores but the simulator's)")
      ->capture_default_str()
      ->check(cli::integer(0, 1024));
  c->add_option("--report-json", report_json_path, "write the conversation's report as JSON (docs/chat.md)");
  c->add_option("--report-html", report_html, "write the conversation's report as one self-contained HTML page");
  c->callback([] {
    if (size == "auto") o.width = o.height = 0;
    else std::tie(o.width, o.height) = io::parse_pair(size, "--size", "WxH in pixels, or 'auto'", 1, 65536);
    o.negative = parse_chat_negative(negative);
    if (o.negative != ChatNegative::none && o.timing_only)
      fail("--negative-control {} needs a functional run: --timing-only has no gates to fail (drop --timing-only)",
           negative);
    if (!script.empty()) io::check_input(script, "script", 16 * io::kMiB);
    io::Outputs()
        .input("--model", o.model)
        .output("--report-json", report_json_path)
        .output("--report-html", report_html)
        .output_dir("--cache-dir", o.cache_dir)
        .check();
    // The capacity first: --max-context against the DDR, before anything is loaded.
    {
      const sim::Config cfg = o.machine.config();
      CompileOptions copt;
      const Capacity cap = resolve_max_context(max_context, config_of(o.model), cfg, copt);
      // auto: the conversation takes the most that fit beside its own weights (a mixed-precision
      // bundle's fp16 channels among them: Compiler::max_context with its compile options).
      o.max_context = max_context == "auto" ? 0 : cap.max_context;
    }
    // The turns of the script, read (and their images checked) before any run.
    std::vector<std::pair<std::string, std::string>> turns;  // question, image
    if (!script.empty()) {
      std::ifstream in(script);
      std::string line, image;
      for (int no = 1; std::getline(in, line); ++no) {
        line = trim(line);
        if (line.empty() || line[0] == '#') continue;
        if (line.starts_with("image:")) {
          image = trim(line.substr(6));
          if (image.empty()) fail("{}:{}: 'image:' names no file (write 'image: FILE')", script, no);
          io::check_input(image, fmt::format("{}:{}: image", script, no), 256 * io::kMiB);
          continue;
        }
        turns.push_back({line, image});
        image.clear();
      }
      if (turns.empty()) fail("--script '{}' holds no question (one question per line)", script);
    }
    o.log = [](const std::string& s) {  // progress on stdout, with the conversation (stderr: the error line only)
      std::printf("%s\n", s.c_str());
      std::fflush(stdout);
    };
    std::printf("gpnpu chat: %s on %s%s; %s\n", o.model.c_str(), o.machine.config().summary().c_str(),
                o.timing_only ? ", timing only" : "",
                o.max_context ? fmt::format("KV cache of {} tokens", o.max_context).c_str()
                              : "KV cache of the most tokens that fit the DDR");
    std::fflush(stdout);
    Conversation conv(o);
    bool ok = true;
    auto ask = [&](const std::string& q, const std::string& img) {
      const ChatTurn& t = conv.turn(q, img);
      print_turn(t, conv.config(), o.timing_only);
      ok = ok && t.ok;
    };
    if (!script.empty()) {
      for (const auto& [q, img] : turns) {
        std::printf("you: %s%s\n", img.empty() ? "" : fmt::format("[image {}] ", img).c_str(), q.c_str());
        ask(q, img);
      }
    } else {
      std::printf("Type a question; 'image: FILE' attaches an image to the next one; /quit ends.\n");
      std::string line, image;
      std::error_code ec;
      const std::string dir = o.cache_dir.empty() ? default_cache_dir() : o.cache_dir;
      Prompt prompt(std::filesystem::create_directories(dir, ec) || std::filesystem::is_directory(dir, ec)
                        ? (std::filesystem::path(dir) / "chat_history").string()
                        : "");
      while (true) {
        if (!prompt.read("you> ", line)) break;
        line = trim(line);
        if (line == "/quit" || line == "/exit") break;
        if (line.empty()) continue;
        if (line.starts_with("image:")) {
          image = trim(line.substr(6));
          try {
            io::check_input(image, "image", 256 * io::kMiB);
            std::printf("(image %s attached to the next question)\n", image.c_str());
          } catch (const Error& e) {
            std::printf("error: %s\n", e.what());
            image.clear();
          }
          continue;
        }
        try {
          ask(line, image);
        } catch (const Error& e) {  // a turn refused (capacity, a bad image): the conversation goes on
          std::printf("error: %s\n", e.what());
        }
        image.clear();
      }
      std::printf("\n");
    }
    const std::string report = chat_report_json(conv);
    if (!report_json_path.empty()) sim::write_file_atomic(report_json_path, report);
    if (!report_html.empty()) {
      sim::write_file_atomic(report_html, chat_html(nlohmann::json::parse(report)));
      std::printf("report page: %s\n", report_html.c_str());
    }
    if (!ok) {
      std::printf("FAIL: a gate failed%s\n", o.negative == ChatNegative::none ? "" : " (negative control)");
      std::fflush(stdout);
      throw CLI::RuntimeError(2);
    }
  });
}

}  // namespace gpnpu::model
