// A conversation on the simulated chip (contract in conversation.h).
#include "model/runtime/conversation.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <future>
#include <nlohmann/json.hpp>
#include <thread>

#include "isa/error.h"
#include "model/checkpoint/quant.h"
#include "model/compiler/compiler.h"
#include "model/inputs/image.h"
#include "model/inputs/prompt.h"
#include "model/inputs/tokenizer.h"
#include "model/reference/chain.h"
#include "model/runtime/session.h"

namespace gpnpu::model {

namespace {
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }
constexpr int kEndOfText = 151643;  // <|endoftext|>
}  // namespace

ChatNegative parse_chat_negative(const std::string& s) {
  if (s.empty() || s == "none") return ChatNegative::none;
  if (s == "stale-cache") return ChatNegative::stale_cache;
  if (s == "shifted-cache") return ChatNegative::shifted_cache;
  fail("--negative-control '{}': unknown control for chat (use stale-cache or shifted-cache)", s);
}

uint64_t ChatTurn::cycles(const std::string& kind) const {
  uint64_t c = 0;
  for (const ChatRun& r : runs)
    if (r.kind == kind) c += r.cycles;
  return c;
}
double ChatTurn::floor(const std::string& kind) const {
  double f = 0, macs = 0, weights = 0;
  for (const ChatRun& r : runs)
    if (r.kind == kind) f += r.floor(), macs += r.mac_floor, weights = std::max(weights, r.weights_floor);
  // (chunks read every weight again: the plan's cost, not the prompt's floor)
  return kind == "prefill" ? std::max(macs, weights) : f;
}
uint64_t ChatTurn::ttft_cycles() const { return cycles("vision") + cycles("prefill"); }

struct Conversation::Impl {
  ChatOptions opt;
  sim::Config cfg;
  ModelConfig mc;
  std::string model_name;
  std::unique_ptr<QuantBundle> bundle;
  std::unique_ptr<Compiler> comp;
  std::unique_ptr<Session> dev;
  CompiledProgram dec;
  std::map<std::pair<int, int>, CompiledProgram> vision;  // by grid
  std::unique_ptr<Tokenizer> tok;
  std::unique_ptr<WeightSource> weights;
  std::unique_ptr<Chain> chain;
  uint32_t fit = 0;                 // the most KV-cache slots the DDR holds
  int64_t next_pos = 0;             // the next free M-RoPE position
  std::optional<int> pending;       // the last answer token, not fed to any run yet
  std::vector<uint32_t> last_decode_slots;

  void say(const std::string& s) const {
    if (opt.log) opt.log(s);
  }
  // A run's cycles, bytes and floors.
  void measure(ChatRun& r, const sim::Stats& st, const CompiledProgram& prog, uint32_t context,
               uint64_t weight_bytes) const {
    r.cycles = st.total[sim::Stat::cycles];
    r.ddr_bytes = st.total[sim::Stat::ddr_bytes_read] + st.total[sim::Stat::ddr_bytes_written];
    for (const KernelCall& c : prog.calls) r.mac_floor += double(c.at(context).macs) / cfg.mac_peak(!c.int8);
    r.weights_floor = double(weight_bytes) / cfg.ddr_bytes_per_cycle();
  }
  // The cache gate: slots [0, expected) against the chain's.
  void gate_cache(ChatRun& r, uint32_t expected) const {
    const CacheCheck cc = check_cache(*dev, chain->cache(), int(expected), expected + 64);
    r.cache_slots = cc.slots;
    r.slot_cosine = cc.min_cos;
    for (std::string& f : cc.failures(int(expected))) r.failures.push_back(std::move(f));
  }
  void gate_logits(ChatRun& r, const std::vector<float>& got, const std::vector<float>& ref) const {
    r.chain_token = ops::argmax(ref);
    r.cosine = cosine(got, ref);
    if (!(*r.cosine >= kLogitsGate))
      r.failures.push_back(fmt::format("logits cosine {} < {}", format_cosine(*r.cosine), kLogitsGate));
    std::vector<float> s = ref;
    std::partial_sort(s.begin(), s.begin() + 2, s.end(), std::greater<float>());
    if (*r.device_token != *r.chain_token && s[0] - s[1] >= kMarginTie)
      r.failures.push_back(fmt::format("device token {} != chain token {} (chain margin {:.3f})", *r.device_token,
                                       *r.chain_token, s[0] - s[1]));
  }
};

Conversation::Conversation(const ChatOptions& o) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.opt = o;
  if (o.tokens < 1) fail("--tokens {}: give at least 1 (the first comes from the prefill)", o.tokens);
  m.cfg = o.machine.config();
  if (o.timing_only && !std::filesystem::is_regular_file(o.model)) {
    m.mc = model_config_from_spec(o.model);
  } else {
    m.bundle = std::make_unique<QuantBundle>(resolve_bundle(o.model, o.cache_dir, o.log));
    m.mc = m.bundle->config();
  }
  m.model_name = o.model.starts_with("synthetic:")
                     ? fmt::format("qwen3-vl-{} (synthetic weights, seed 1)", o.model.substr(10))
                     : fmt::format("{} ({})", m.mc.name, o.model);
  CompileOptions copt;
  copt.fp16_channels = m.bundle && !m.bundle->fp16_tensors().empty();  // mixed precision (kernels/f16cols.h)
  const int ps = m.mc.vision.patch_size;
  copt.max_patches = std::max<uint32_t>(copt.max_patches, uint32_t((o.width / ps) * (o.height / ps)));
  m.fit = Compiler::max_context(m.mc, m.cfg, copt);
  copt.prefill_chunk = o.chunk;
  copt.image_tile_rows = o.stream_rows;
  copt.image_prefill = o.stream_prefill;
  copt.max_seq = o.max_context ? o.max_context : m.fit;
  m.say(fmt::format("compiling the decode program for {} ({} KV-cache slots) ...", m.cfg.name(), copt.max_seq));
  m.comp = std::make_unique<Compiler>(m.mc, m.cfg, copt);
  m.dec = m.comp->decode_program();
  m.dev = std::make_unique<Session>(*m.comp, o.timing_only);
  m.tok = std::make_unique<Tokenizer>(Tokenizer::load(Tokenizer::default_path()));
  if (!o.timing_only) {
    m.say("loading the weights into the simulated DDR ...");
    m.dev->load_weights(*m.bundle);
    m.weights = bundle_weights(*m.bundle);
    ChainOptions co;
    const int cores = int(std::max(1u, std::thread::hardware_concurrency()));
    co.threads = o.threads > 0 ? o.threads : std::max(1, cores - 1);
    m.chain = std::make_unique<Chain>(m.mc, *m.weights, co);
  }
}

Conversation::~Conversation() = default;

uint32_t Conversation::max_context() const { return impl_->comp->decode_io().max_seq; }
const sim::Config& Conversation::config() const { return impl_->cfg; }
std::string Conversation::model_name() const { return impl_->model_name; }
bool Conversation::timing_only() const { return impl_->opt.timing_only; }

const ChatTurn& Conversation::turn(const std::string& question, const std::string& image) {
  Impl& m = *impl_;
  const ChatOptions& o = m.opt;
  const bool functional = !o.timing_only;
  const ChatTokens ct;
  ChatTurn t;
  t.index = int(turns_.size()) + 1;
  t.question = question;
  t.image = image;
  t.cached_before = cached_;

  // ---- inputs: the turn's tokens and positions ----
  std::optional<ImageInput> in;
  if (!image.empty()) {
    PreprocessOptions po;
    if (o.width == 0 && o.height == 0) po.mode = ResizeMode::smart;
    po.width = o.width;
    po.height = o.height;
    po.patch_size = m.mc.vision.patch_size;
    po.temporal_patch_size = m.mc.vision.temporal_patch_size;
    po.merge_size = m.mc.vision.spatial_merge_size;
    in = preprocess_image(image, po);
  }
  const int nimg = in ? in->n_tokens() : 0;
  std::vector<int> ids;
  if (m.pending) {  // close the previous answer
    ids.push_back(*m.pending);
    if (*m.pending != ct.im_end) ids.push_back(ct.im_end);
    for (int id : m.tok->encode("\n")) ids.push_back(id);
  }
  for (int id : build_chat_prompt([&](std::string_view s) { return m.tok->encode(s); }, question, nimg))
    ids.push_back(id);
  for (int id : ids)
    if (id >= m.mc.text.vocab_size)
      fail("turn {}: token {} is outside the model's vocabulary (0..{}): the model does not fit this tokenizer",
           t.index, id, m.mc.text.vocab_size - 1);
  std::vector<MergedGrid> grids;
  if (in) grids.push_back({in->merged_h(), in->merged_w()});
  const MropePositions mp = mrope_positions(ids, grids, m.mc.image_token_id);
  std::vector<std::array<int, 3>> pos;
  for (const auto& q : mp.pos)
    pos.push_back({int(q[0] + m.next_pos), int(q[1] + m.next_pos), int(q[2] + m.next_pos)});
  const uint32_t T = uint32_t(ids.size());
  t.prompt_tokens = int(T);
  t.ids = ids;
  t.image_tokens = nimg;

  // ---- capacity, before anything runs ----
  const uint64_t need = uint64_t(cached_) + T + uint64_t(o.tokens) - 1;
  if (need > max_context())
    fail("turn {}: {} cached tokens + {} prompt tokens + {} decode steps (for up to {} answer tokens) need {} "
         "KV-cache slots, more than --max-context = {}; ask with fewer --tokens, start a new conversation, or give a "
         "larger --max-context (at most {} fit the DDR beside the weights)",
         t.index, cached_, T, o.tokens - 1, o.tokens, need, max_context(), m.fit);

  // The negative control stale-cache: the host "forgets" what the previous turn's decode steps wrote.
  if (o.negative == ChatNegative::stale_cache && functional) {
    const TextConfig& tc = m.mc.text;
    std::vector<uint16_t> zero(size_t(tc.head_dim), 0);
    for (uint32_t slot : m.last_decode_slots)
      for (int l = 0; l < tc.num_hidden_layers; ++l)
        for (bool v : {false, true})
          for (int h = 0; h < tc.num_key_value_heads; ++h) m.dev->write_kv(l, v, h, slot, zero);
  }

  // ---- the programs, every one compiled before anything runs (a failure leaves no trace) ----
  const CompiledProgram* vision = nullptr;
  ImageShape vshape;
  if (in) {
    vshape.grid_h = in->grid_h;
    vshape.grid_w = in->grid_w;
    vshape.prefill = false;
    auto it = m.vision.find({vshape.grid_h, vshape.grid_w});
    if (it == m.vision.end()) {
      m.say(fmt::format("compiling the vision program ({}x{} patches) ...", vshape.grid_h, vshape.grid_w));
      it = m.vision.emplace(std::pair{vshape.grid_h, vshape.grid_w}, m.comp->image_program(vshape)).first;
    }
    vision = &it->second;
  }
  struct Chunk {
    uint32_t r0, n;
    bool head;
    CompiledProgram prog;
  };
  std::vector<Chunk> chunks;
  const int is = in ? int(std::find(ids.begin(), ids.end(), m.mc.image_token_id) - ids.begin()) : -1;
  for (uint32_t r0 = 0, at = cached_; r0 < T;) {
    const uint32_t n = m.comp->prefill_chunk_rows(at, T - r0);
    ImageShape sh;
    sh.vision = false;
    sh.seq_len = int(n);
    sh.cache_offset = at;
    sh.image_rows = 0;
    sh.image_start = 0;
    if (in) {  // the chunk's share of the image rows
      const int a = std::max(is, int(r0)), e = std::min(is + nimg, int(r0 + n));
      if (e > a) {
        sh.image_start = a - int(r0);
        sh.image_rows = e - a;
        sh.image_first = a - is;
      }
    }
    sh.head = r0 + n == T;
    chunks.push_back({r0, n, sh.head, m.comp->image_program(sh)});
    r0 += n;
    at += n;
  }

  // ---- the chain's prefill of the whole turn, beside the device ----
  std::future<std::vector<float>> chain_logits;
  if (functional) {
    std::vector<ImagePatches> imgs;
    if (in) imgs.push_back({1, in->grid_h, in->grid_w, in->patches});
    chain_logits = std::async(std::launch::async, [&m, ids, imgs = std::move(imgs), pos] {
      return m.chain->prefill(ids, imgs, pos);
    });
  }
  std::vector<float> ref_last;

  // ---- vision run ----
  if (vision) {
    const auto t0 = Clock::now();
    if (functional) m.dev->load_image_constants(*m.bundle, vshape);
    m.dev->write_patches(in->patches);
    ChatRun r;
    r.kind = "vision";
    r.offset = cached_;
    r.plan = vision->plan;
    m.measure(r, m.dev->run(*vision), *vision, 0, m.comp->run_weight_bytes(true));
    r.wall_s = since(t0);
    t.runs.push_back(r);
  }

  // ---- prefill chunks ----
  const uint32_t shift = o.negative == ChatNegative::shifted_cache && !turns_.empty() ? 1 : 0;
  for (const Chunk& c : chunks) {
    const auto t0 = Clock::now();
    m.dev->write_prompt(std::span(ids).subspan(c.r0, c.n), std::span(pos).subspan(c.r0, c.n), {}, cached_ + shift);
    ChatRun r;
    r.kind = "prefill";
    r.offset = cached_;
    r.rows = c.n;
    r.plan = c.prog.plan;
    m.measure(r, m.dev->run(c.prog), c.prog, 0,
              m.comp->run_weight_bytes(false, c.head));
    cached_ += c.n;
    r.cache_expected = int(cached_);
    std::vector<float> logits;
    if (c.head) {
      if (functional) logits = m.dev->logits();
      r.device_token = functional ? ops::argmax(logits) : 0;
      if (o.keep_logits) r.logits = logits;
    }
    if (functional) {
      if (chain_logits.valid()) ref_last = chain_logits.get();
      m.gate_cache(r, cached_);
      if (c.head) m.gate_logits(r, logits, ref_last);
    }
    r.wall_s = since(t0);
    t.runs.push_back(r);
  }
  m.next_pos += mp.next_position();

  // ---- decode ----
  t.device.ids.push_back(*t.runs.back().device_token);
  if (t.runs.back().chain_token) t.chain.ids.push_back(*t.runs.back().chain_token);
  m.last_decode_slots.clear();
  for (int k = 0; k + 1 < o.tokens; ++k) {
    const int prev = t.device.ids.back();
    if (functional && (prev == ct.im_end || prev == kEndOfText)) break;
    const auto t0 = Clock::now();
    const uint32_t slot = cached_;
    const auto dp = decode_position(0, m.next_pos);
    m.dev->write_decode_args(prev, slot + shift, {dp[0], dp[1], dp[2]});
    std::future<std::vector<float>> next;
    if (functional)
      next = std::async(std::launch::async, [&m, prev, dp] { return m.chain->decode(prev, {dp[0], dp[1], dp[2]}); });
    ChatRun r;
    r.kind = "decode";
    r.offset = slot;
    r.rows = 1;
    m.measure(r, m.dev->run(m.dec), m.dec, slot + 1, m.comp->weight_bytes(false));
    ++cached_;
    ++m.next_pos;
    m.last_decode_slots.push_back(slot);
    r.cache_expected = int(cached_);
    if (functional) {
      const std::vector<float> got = m.dev->logits();
      r.device_token = ops::argmax(got);
      m.gate_logits(r, got, next.get());
      if (o.keep_logits) r.logits = got;
      m.gate_cache(r, cached_);
    } else {
      r.device_token = 0;
    }
    r.wall_s = since(t0);
    t.runs.push_back(r);
    t.device.ids.push_back(*r.device_token);
    if (r.chain_token) t.chain.ids.push_back(*r.chain_token);
  }
  m.pending = t.device.ids.back();
  t.cached_after = cached_;
  for (const ChatRun& r : t.runs)
    for (const std::string& f : r.failures)
      t.failures.push_back(fmt::format("turn {} {} run at offset {}: {}", t.index, r.kind, r.offset, f));
  t.ok = t.failures.empty();
  if (functional) {
    t.device.text = m.tok->decode(t.device.ids);
    t.chain.text = m.tok->decode(t.chain.ids);
  } else {
    t.device.ids.clear();  // placeholders, not an answer
  }
  turns_.push_back(std::move(t));
  return turns_.back();
}

std::string chat_report_json(const Conversation& c) {
  const sim::Config& cfg = c.config();
  nlohmann::ordered_json j;
  j["schema"] = "gpnpu-chat-report/1";
  j["model"] = c.model_name();
  j["machine"] = nlohmann::ordered_json::parse(cfg.to_json());
  j["max_context"] = c.max_context();
  j["timing_only"] = c.timing_only();
  bool ok = true;
  for (const ChatTurn& t : c.turns()) {
    ok = ok && t.ok;
    nlohmann::ordered_json tj;
    tj["turn"] = t.index;
    tj["question"] = t.question;
    tj["image"] = t.image;
    tj["prompt_tokens"] = t.prompt_tokens;
    tj["prompt_ids"] = t.ids;
    tj["image_tokens"] = t.image_tokens;
    tj["cached_before"] = t.cached_before;
    tj["cached_after"] = t.cached_after;
    tj["answer"] = {{"ids", t.device.ids}, {"text", t.device.text}};
    tj["chain_answer"] = {{"ids", t.chain.ids}, {"text", t.chain.text}};
    for (const char* kind : {"vision", "prefill", "decode"})
      tj["cycles"][kind] = {{"cycles", t.cycles(kind)}, {"floor", t.floor(kind)}};
    const double ghz = cfg.clock_ghz;
    const uint64_t dec = t.cycles("decode");
    const size_t steps = size_t(std::count_if(t.runs.begin(), t.runs.end(), [](const ChatRun& r) { return r.kind == "decode"; }));
    tj["ttft_ms"] = t.ttft_cycles() / (ghz * 1e6);
    tj["decode_tokens_per_s"] = dec ? steps / (dec / (ghz * 1e9)) : 0.0;
    for (const ChatRun& r : t.runs) {
      nlohmann::ordered_json rj{{"kind", r.kind}, {"offset", r.offset}, {"rows", r.rows}, {"cycles", r.cycles},
                                {"ddr_bytes", r.ddr_bytes}, {"mac_floor", r.mac_floor},
                                {"weights_floor", r.weights_floor}, {"cache_expected", r.cache_expected}};
      if (!r.plan.empty()) rj["plan"] = r.plan;
      if (r.cosine) rj["logits_cosine"] = *r.cosine;
      if (r.slot_cosine) rj["cache_min_cosine"] = *r.slot_cosine, rj["cache_slots"] = r.cache_slots;
      if (r.device_token) rj["device_token"] = *r.device_token;
      if (r.chain_token) rj["chain_token"] = *r.chain_token;
      rj["failures"] = r.failures;
      tj["runs"].push_back(rj);
    }
    tj["ok"] = t.ok;
    j["turns"].push_back(tj);
  }
  j["ok"] = ok;
  return j.dump(1) + "\n";
}

}  // namespace gpnpu::model
