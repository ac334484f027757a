// The host driver of `gpnpu describe` (contract in driver_host.h).
#include "model/driver_host.h"

#include <fmt/format.h>
#include <hdf5.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <nlohmann/json.hpp>
#include <thread>

#include "isa/error.h"
#include "isa/io_rules.h"
#include "isa/fp16.h"
#include "kernels/rope.h"
#include "model/chain.h"
#include "model/compiler.h"
#include "model/driver.h"
#include "model/image.h"
#include "model/prompt.h"
#include "model/quant.h"
#include "model/safetensors.h"
#include "model/synthetic.h"
#include "model/tokenizer.h"
#include "sim/platform.h"

namespace gpnpu::model {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

void say(const DescribeOptions& o, const std::string& s) {
  if (o.log) o.log(s);
}

constexpr int kEndOfText = 151643;  // <|endoftext|>; <|im_end|> is ChatTokens::im_end

// ---- goldens (scripts/reference/README.md: the HDF5 layout) ------------------------------

struct Golden {
  std::vector<int> ids, w4a16_tokens, fp32_tokens;
  std::vector<float> pixels, w4a16_logits;  // logits [steps + 1][vocab]
};

template <typename T>
std::vector<T> h5_read(hid_t f, const std::string& file, const std::string& name, hid_t memtype) {
  if (H5Lexists(f, name.c_str(), H5P_DEFAULT) <= 0)
    fail("golden '{}': dataset '{}' is missing (make goldens with scripts/reference/golden.py)", file, name);
  hid_t ds = H5Dopen2(f, name.c_str(), H5P_DEFAULT);
  hid_t sp = H5Dget_space(ds);
  std::vector<T> v(size_t(H5Sget_simple_extent_npoints(sp)));
  herr_t rc = H5Dread(ds, memtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data());
  H5Sclose(sp);
  H5Dclose(ds);
  if (rc < 0) fail("golden '{}': cannot read dataset '{}'", file, name);
  return v;
}

Golden read_golden(const std::string& path) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) fail("--golden '{}': cannot open it as HDF5 (a file from scripts/reference/golden.py)", path);
  Golden g;
  try {
    g.ids = h5_read<int>(f, path, "prompt_ids", H5T_NATIVE_INT);
    g.pixels = h5_read<float>(f, path, "pixel_values", H5T_NATIVE_FLOAT);
    g.w4a16_tokens = h5_read<int>(f, path, "w4a16/tokens", H5T_NATIVE_INT);
    g.w4a16_logits = h5_read<float>(f, path, "w4a16/logits", H5T_NATIVE_FLOAT);
    g.fp32_tokens = h5_read<int>(f, path, "fp32/tokens", H5T_NATIVE_INT);
  } catch (...) {
    H5Fclose(f);
    throw;
  }
  H5Fclose(f);
  return g;
}

// ---- small numerics ---------------------------------------------------------------------

using ops::argmax;  // the first largest, as the chain takes it
float top2_margin(std::span<const float> x) {
  float a = -INFINITY, b = -INFINITY;
  for (float v : x) {
    if (v > a) {
      b = a;
      a = v;
    } else if (v > b) {
      b = v;
    }
  }
  return a - b;
}

// ---- the machine side ---------------------------------------------------------------------

// Per-stage and per-call figures of one run, from its stats and the compiler's calls.
void collect(const sim::Stats& st, const CompiledProgram& prog, const sim::Config& cfg, const std::string& program,
             const std::vector<std::string>& stage_names, bool keep_calls, DescribeResult& r) {
  std::map<std::string, const KernelCall*> by_mark;
  for (const KernelCall& c : prog.calls) by_mark[c.mark] = &c;
  // The stage regions' time spans, to place each call in its stage.
  struct Span {
    std::string name;
    sim::Cycles begin, end;
  };
  std::vector<Span> spans;
  for (const sim::RegionCall& rc : st.calls())
    if (std::find(stage_names.begin(), stage_names.end(), st.names[rc.name]) != stage_names.end())
      spans.push_back({st.names[rc.name], rc.begin, rc.end});
  auto stage_of = [&](const sim::RegionCall& rc) -> const std::string& {
    for (const Span& s : spans)
      if (rc.begin >= s.begin && rc.end <= s.end) return s.name;
    static const std::string none = "other";
    return none;
  };
  const double mac_peak16 = double(cfg.npe()) * 16.0 / cfg.occ(isa::Unit::mac16);
  const double mac_peak8 = double(cfg.npe()) * 16.0 / cfg.occ(isa::Unit::mac8);
  auto stage = [&](const std::string& name) -> StageRecord& {
    for (StageRecord& s : r.stages)
      if (s.name == name && s.program == program) return s;
    r.stages.push_back({name, program});
    return r.stages.back();
  };
  for (const Span& s : spans) {
    StageRecord& rec = stage(s.name);
    rec.cycles += s.end - s.begin;
    if (program == "decode") rec.steps++;
  }
  for (const sim::RegionCall& rc : st.calls()) {
    auto it = by_mark.find(st.names[rc.name]);
    if (it == by_mark.end()) continue;
    const KernelCall& kc = *it->second;
    const std::string& sname = stage_of(rc);
    StageRecord& s = stage(sname);
    s.calls++;
    s.macs += double(kc.cost.macs);
    s.ddr_bytes += double(kc.cost.ddr_bytes);
    s.mac_floor += double(kc.cost.macs) / (kc.int8 ? mac_peak8 : mac_peak16);
    s.ddr_floor += double(kc.cost.ddr_bytes) / cfg.ddr_bytes_per_cycle();
    if (keep_calls)
      r.calls.push_back({program, sname, kc.mark, kc.kernel, rc.end - rc.begin,
                         kernels::floor_cycles(cfg, kc.cost, !kc.int8), kc.cost, kc.int8});
  }
}

// The device KV cache against the chain's: slots filled (layer 0, head 0 rows that are
// not all zero) and the lowest cosine of any cached (layer, slot) K or V row.
struct CacheCheck {
  int slots = 0;
  double min_cos = 1;
  std::string worst;
};

CacheCheck check_cache(sim::Platform& p, const Compiler& c, const KvCache& chain, int expected) {
  const TextConfig& t = c.model().text;
  const int nkv = t.num_key_value_heads, hd = t.head_dim, kvd = nkv * hd;
  const uint32_t max_seq = c.decode_io().max_seq;
  CacheCheck cc;
  std::vector<uint16_t> buf(size_t(max_seq) * hd);
  p.ddr().read(c.layout().at("L0.kcache").offset, buf.data(), buf.size() * 2);
  for (uint32_t s = 0; s < max_seq; ++s)
    if (std::any_of(&buf[size_t(s) * hd], &buf[size_t(s + 1) * hd], [](uint16_t h) { return (h & 0x7fff) != 0; }))
      ++cc.slots;
  std::vector<float> dev(size_t(expected) * kvd);
  std::vector<uint16_t> head(size_t(expected) * hd);
  for (int l = 0; l < t.num_hidden_layers; ++l)
    for (int which = 0; which < 2; ++which) {
      const DdrTensor& ten = c.layout().at(fmt::format("L{}.{}cache", l, which ? "v" : "k"));
      for (int h = 0; h < nkv; ++h) {
        p.ddr().read(ten.offset + uint64_t(h) * max_seq * hd * 2, head.data(), head.size() * 2);
        for (int s = 0; s < expected; ++s)
          for (int e = 0; e < hd; ++e) dev[size_t(s) * kvd + size_t(h) * hd + e] = f16_to_f32(head[size_t(s) * hd + e]);
      }
      const std::vector<float>& ref = which ? chain.v[size_t(l)] : chain.k[size_t(l)];
      for (int s = 0; s < expected && size_t(s + 1) * kvd <= ref.size(); ++s) {
        double cs = cosine(std::span(&dev[size_t(s) * kvd], size_t(kvd)), std::span(&ref[size_t(s) * kvd], size_t(kvd)));
        if (!(cs >= cc.min_cos)) {  // NaN (an all-zero row) counts as the worst
          cc.min_cos = std::isnan(cs) ? 0.0 : cs;
          cc.worst = fmt::format("layer {} {} slot {}", l, which ? "V" : "K", s);
        }
      }
    }
  return cc;
}

// Writes fp16 `value` over every row of slot `slot` (all layers, K and V, all heads).
void fill_slot(sim::Platform& p, const Compiler& c, int slot, uint16_t value) {
  const TextConfig& t = c.model().text;
  std::vector<uint16_t> row(size_t(t.head_dim), value);
  for (int l = 0; l < t.num_hidden_layers; ++l)
    for (const char* kv : {"k", "v"})
      for (int h = 0; h < t.num_key_value_heads; ++h)
        p.ddr().write(c.layout().at(fmt::format("L{}.{}cache", l, kv)).offset +
                          (uint64_t(h) * c.decode_io().max_seq + uint64_t(slot)) * t.head_dim * 2,
                      row.data(), row.size() * 2);
}

void write_rope(sim::MemoryTarget& m, const ModelConfig& mc, uint64_t cos_off, uint64_t sin_off,
                const std::vector<std::array<int, 3>>& pos) {
  std::vector<float> cos_t, sin_t;
  kernels::rope_tables_mrope(pos, mc.text.head_dim, float(mc.text.rope_theta), mc.text.mrope_section, cos_t, sin_t);
  m.write(cos_off, cos_t.data(), cos_t.size() * 4);
  m.write(sin_off, sin_t.data(), sin_t.size() * 4);
}

std::vector<float> read_logits(sim::Platform& p, uint32_t off, size_t vocab, bool zero) {
  std::vector<uint16_t> h(vocab);
  if (zero) p.ocm().write(off, std::vector<uint16_t>(vocab, 0).data(), vocab * 2);  // negative control
  p.ocm().read(off, h.data(), vocab * 2);
  std::vector<float> l(vocab);
  for (size_t i = 0; i < vocab; ++i) l[i] = f16_to_f32(h[i]);
  return l;
}

}  // namespace

NegativeControl parse_negative_control(const std::string& s) {
  if (s.empty() || s == "none") return NegativeControl::none;
  if (s == "zero") return NegativeControl::zero;
  if (s == "one-word") return NegativeControl::one_word;
  if (s == "stale-cache") return NegativeControl::stale_cache;
  fail("--negative-control '{}': unknown control (use zero, one-word or stale-cache)", s);
}

const char* to_string(NegativeControl c) {
  switch (c) {
    case NegativeControl::zero: return "zero";
    case NegativeControl::one_word: return "one-word";
    case NegativeControl::stale_cache: return "stale-cache";
    default: return "none";
  }
}

std::string default_cache_dir() {
  if (const char* e = std::getenv("GPNPU_CACHE"); e && *e) return e;
  if (const char* e = std::getenv("XDG_CACHE_HOME"); e && *e) return (fs::path(e) / "gpnpu").string();
  if (const char* e = std::getenv("HOME"); e && *e) return (fs::path(e) / ".cache" / "gpnpu").string();
  return (fs::temp_directory_path() / "gpnpu-cache").string();
}

std::string resolve_bundle(const std::string& spec, const std::string& cache_dir,
                           const std::function<void(const std::string&)>& log) {
  auto note = [&](const std::string& s) {
    if (log) log(s);
  };
  if (fs::is_regular_file(spec)) return spec;  // a bundle already
  const fs::path cache = cache_dir.empty() ? fs::path(default_cache_dir()) : fs::path(cache_dir);
  fs::path dir, ckpt;
  ModelConfig mc;
  bool synthetic = spec.starts_with("synthetic:");
  if (synthetic) {
    mc = model_config_from_spec(spec);  // checks the name
    dir = cache / fmt::format("synthetic-{}-seed1-g{}", spec.substr(10), kSyntheticGeneration);
  } else {
    if (!fs::is_directory(spec))
      fail("--model '{}': not synthetic:2b, synthetic:tiny, a checkpoint directory or a .safetensors bundle", spec);
    // Keyed by the directory's absolute path and its files' names, sizes and times.
    std::string key = fs::absolute(spec).string();
    std::vector<std::string> files;
    for (const auto& e : fs::directory_iterator(spec))
      if (e.is_regular_file())
        files.push_back(fmt::format("{}:{}:{}", e.path().filename().string(), e.file_size(),
                                    e.last_write_time().time_since_epoch().count()));
    std::sort(files.begin(), files.end());
    for (const std::string& f : files) key += "|" + f;
    dir = cache / fmt::format("checkpoint-{}-{:016x}", fs::absolute(spec).filename().string(), std::hash<std::string>{}(key));
    ckpt = spec;
  }
  const fs::path bundle = dir / "w4a16.safetensors";
  if (fs::exists(bundle)) return bundle.string();
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) fail("cache directory '{}': {} (set --cache-dir or $GPNPU_CACHE to a writable directory)", dir.string(), ec.message());
  // One process fills a cache entry; another waits for it and then reads its bundle.
  // Temporaries left by a process that died (kill -9) are removed first (isa/io_rules.h).
  io::FileLock lock(dir.string(), "model cache entry", io::FileLock::wait);
  if (fs::exists(bundle)) return bundle.string();
  io::sweep_stale_temps(dir.string());
  auto t0 = Clock::now();
  std::unique_ptr<io::ScopedTemp> ckpt_temp;  // the synthetic checkpoint: removed however this ends
  if (synthetic) {
    ckpt = dir / fmt::format("checkpoint.tmp.{}", ::getpid());
    ckpt_temp = std::make_unique<io::ScopedTemp>(ckpt.string(), true);
    note(fmt::format("making the {} checkpoint (synthetic weights, seed 1) once, in {} ...", spec, dir.string()));
    SyntheticOptions so;
    so.seed = 1;
    make_synthetic_checkpoint(mc, ckpt.string(), so);
    note(fmt::format("  checkpoint made in {:.1f} s", since(t0)));
  }
  note(fmt::format("quantising {} to W4A16 once (cached in {}) ...", synthetic ? spec : ckpt.string(), bundle.string()));
  auto t1 = Clock::now();
  Checkpoint ck = load_checkpoint(ckpt.string());
  ModelConfig cfg = synthetic ? mc : ModelConfig::from_json_file((ckpt / "config.json").string());
  write_quant_bundle(ck, cfg, bundle.string());  // written under a temporary name, then renamed
  note(fmt::format("  quantised in {:.1f} s", since(t1)));
  return bundle.string();
}

DescribeResult describe(const DescribeOptions& o) {
  const auto t_start = Clock::now();
  DescribeResult r;
  if (o.tokens < 1) fail("--tokens {}: give at least 1 (the first comes from the image program)", o.tokens);
  const sim::Config cfg = sim::Config::make(o.preset, o.sets);
  r.config_json = cfg.to_json();

  // The model: a bundle for functional runs; timing-only runs need only the config.
  std::unique_ptr<QuantBundle> bundle;
  ModelConfig mc;
  if (o.timing_only && !fs::is_regular_file(o.model)) {
    mc = model_config_from_spec(o.model);
  } else {
    r.bundle_path = resolve_bundle(o.model, o.cache_dir, o.log);
    bundle = std::make_unique<QuantBundle>(r.bundle_path);
    mc = bundle->config();
  }
  r.model_name = o.model.starts_with("synthetic:") ? fmt::format("qwen3-vl-{} (synthetic weights, seed 1)", o.model.substr(10))
                                                   : fmt::format("{} ({})", mc.name, o.model);

  // Inputs: pixels, prompt ids, positions.
  PreprocessOptions po;
  po.width = o.width;
  po.height = o.height;
  po.patch_size = mc.vision.patch_size;
  po.temporal_patch_size = mc.vision.temporal_patch_size;
  po.merge_size = mc.vision.spatial_merge_size;
  ImageInput in = preprocess_image(o.image, po);
  r.png = encode_png(in.resized);
  Tokenizer tok = Tokenizer::load(Tokenizer::default_path());
  std::vector<int> ids = build_chat_prompt([&](std::string_view s) { return tok.encode(s); }, o.prompt, in.n_tokens());
  for (int id : ids)
    if (id >= mc.text.vocab_size)
      fail("prompt token {} is outside the model's vocabulary (0..{}): the model does not fit this tokenizer", id,
           mc.text.vocab_size - 1);
  MropePositions mp = mrope_positions(ids, {MergedGrid{in.merged_h(), in.merged_w()}}, mc.image_token_id);
  std::vector<std::array<int, 3>> pos;
  for (auto& q : mp.pos) pos.push_back({q[0], q[1], q[2]});
  const int S = int(ids.size());
  r.prompt_tokens = S;
  r.image_tokens = in.n_tokens();
  r.image_start = int(std::find(ids.begin(), ids.end(), mc.image_token_id) - ids.begin());
  r.grid_h = in.grid_h;
  r.grid_w = in.grid_w;

  std::optional<Golden> golden;
  if (!o.golden.empty()) {
    golden = read_golden(o.golden);
    if (golden->ids != ids)
      fail("--golden '{}' was made for another prompt ({} ids; this run has {}): give the golden's image, size and prompt",
           o.golden, golden->ids.size(), ids.size());
    if (golden->pixels != in.patches)
      fail("--golden '{}' was made for other pixels: give the golden's image and --size", o.golden);
  }

  // Programs.
  ImageShape shape;
  shape.grid_h = in.grid_h;
  shape.grid_w = in.grid_w;
  shape.seq_len = S;
  shape.image_start = r.image_start;
  CompileOptions copt;
  copt.max_seq = std::max<uint32_t>(copt.max_seq, uint32_t(S + o.tokens));
  copt.max_patches = std::max<uint32_t>(copt.max_patches, uint32_t(in.n_patches()));
  say(o, fmt::format("compiling the image program ({} tokens, {}x{} patches) and the decode program for {} ...", S,
                     in.grid_h, in.grid_w, o.preset));
  Compiler comp(mc, cfg, copt);
  CompiledProgram img = comp.image_program(shape), dec = comp.decode_program();
  r.image_instructions = img.program.words.size();
  r.decode_instructions = dec.program.words.size();

  sim::Platform& p = sim::Platform::get();
  p.configure(cfg, o.timing_only);
  const size_t V = size_t(mc.text.vocab_size);
  std::unique_ptr<WeightSource> weights;
  std::unique_ptr<Chain> chain;
  if (!o.timing_only) {
    say(o, "loading the weights into the simulated DDR ...");
    comp.load_weights(*bundle, p.ddr());
    comp.load_image_constants(*bundle, shape, p.ddr());
    std::vector<uint16_t> h(in.patches.size());
    for (size_t i = 0; i < h.size(); ++i) h[i] = f32_to_f16(in.patches[i]);
    p.ddr().write(comp.image_io().patches_ddr - sim::kDdrRegion.base, h.data(), h.size() * 2);
    const uint64_t trope = comp.image_io().trope_ddr - sim::kDdrRegion.base;
    write_rope(p.ddr(), mc, trope, trope + uint64_t(copt.max_seq) * mc.text.head_dim * 4, pos);
    weights = bundle_weights(*bundle);
    ChainOptions co;
    const int cores = int(std::max(1u, std::thread::hardware_concurrency()));
    // The chain runs beside the simulator, which keeps one core (and borrows a second
    // for half of each large array instruction when it is free).
    co.threads = o.threads > 0 ? o.threads : std::max(1, cores - 1);
    chain = std::make_unique<Chain>(mc, *weights, co);
  }
  p.write_smem(comp.image_io().ids_smem, ids.data(), uint32_t(ids.size() * 4));
  uint32_t zero = 0;
  p.write_smem(comp.image_io().slot0_smem, &zero, 4);
  r.wall_setup = since(t_start);

  // Progress during the long image program: every block / layer / stage that closes,
  // at most one line per 5 s of wall time (and every stage).
  auto last_note = Clock::now();
  const auto t_img = Clock::now();
  struct ResetHook {  // the hook refers to this frame: never leave it behind (errors included)
    sim::Sequencer& seq;
    ~ResetHook() { seq.on_mark_end = nullptr; }
  } reset_hook{p.sequencer()};
  p.sequencer().on_mark_end = [&](uint32_t mark, sim::Cycles end) {
    const std::string& name = img.program.names.at(mark);
    if (name.find('.') != std::string::npos) return;
    bool stage = name == "vision_tower" || name == "prefill" || name == "head";
    if (!stage && since(last_note) < 5.0) return;
    last_note = Clock::now();
    say(o, fmt::format("  image program: {} done at {:.1f} M cycles ({:.1f} s)", name, end / 1e6, since(t_img)));
  };

  // Gates of one run.
  auto gate = [&](StepRecord& s, std::span<const float> dev, const std::vector<float>* ref, int expected_slots,
                  std::optional<int> golden_row) {
    s.device_token = argmax(dev);
    s.cache_expected = expected_slots;
    if (!ref) return;
    s.chain_token = argmax(*ref);
    s.margin = top2_margin(*ref);
    double cs = cosine(dev, *ref);
    s.cosine = std::isnan(cs) ? 0.0 : cs;
    if (!(*s.cosine >= kLogitsGate)) s.failures.push_back(fmt::format("logits cosine {:.6f} < {}", *s.cosine, kLogitsGate));
    if (s.device_token != *s.chain_token && *s.margin >= kMarginTie)
      s.failures.push_back(fmt::format("device token {} != chain token {} (chain margin {:.3f})", s.device_token,
                                       *s.chain_token, *s.margin));
    CacheCheck cc = check_cache(p, comp, chain->cache(), expected_slots);
    s.cache_slots = cc.slots;
    s.slot_cosine = cc.min_cos;
    if (cc.slots != expected_slots)
      s.failures.push_back(fmt::format("KV cache holds {} slots, expected {}", cc.slots, expected_slots));
    if (!(cc.min_cos >= kCacheGate))
      s.failures.push_back(fmt::format("KV cache row cosine {:.6f} < {} at {}", cc.min_cos, kCacheGate, cc.worst));
    if (golden_row) {
      std::span<const float> g(&golden->w4a16_logits[size_t(*golden_row) * V], V);
      double gc = cosine(dev, g);
      s.golden_cosine = gc;
      if (!(gc >= kLogitsGate)) s.failures.push_back(fmt::format("cosine vs the PyTorch W4A16 golden {:.6f} < {}", gc, kLogitsGate));
      if (s.device_token != argmax(g) && top2_margin(g) >= kMarginTie)
        s.failures.push_back(fmt::format("device token {} != PyTorch W4A16 golden token {}", s.device_token, argmax(g)));
    }
    s.ok = s.failures.empty();
    for (const std::string& f : s.failures)
      r.failures.push_back(fmt::format("{}: {}", s.step < 0 ? std::string("image program") : fmt::format("step {}", s.step), f));
  };
  // The golden rows stay comparable while the device follows the golden's tokens.
  auto golden_row = [&](int row) -> std::optional<int> {
    if (!golden || row >= int(golden->w4a16_logits.size() / V)) return std::nullopt;
    for (int k = 0; k < row && k < int(r.device.ids.size()); ++k)
      if (r.device.ids[size_t(k)] != golden->w4a16_tokens[size_t(k)]) return std::nullopt;
    return row;
  };

  // The image program, the chain's prefill beside it.
  say(o, fmt::format("running the image program ({} instructions){} ...", img.program.words.size(),
                     o.timing_only ? ", timing only" : ""));
  std::future<std::vector<float>> chain_logits;
  if (chain)
    chain_logits = std::async(std::launch::async, [&] {
      return chain->prefill(ids, {ImagePatches{1, in.grid_h, in.grid_w, in.patches}}, pos);
    });
  StepRecord s0;
  s0.step = -1;
  s0.pos = S - 1;
  {
    const sim::Stats& st = p.run(img.program);
    s0.cycles = st.total[sim::Stat::cycles];
    s0.ddr_bytes = st.total[sim::Stat::ddr_bytes_read] + st.total[sim::Stat::ddr_bytes_written];
    r.image_cycles = s0.cycles;
    r.image_ddr_bytes = s0.ddr_bytes;
    collect(st, img, cfg, "image", {"vision_tower", "prefill", "head"}, true, r);
  }
  p.sequencer().on_mark_end = nullptr;
  if (o.timing_only) {
    s0.cache_expected = S;
  } else {
    std::vector<float> dev = read_logits(p, img.logits_ocm, V, o.negative == NegativeControl::zero);
    std::vector<float> ref = chain_logits.get();
    if (o.negative == NegativeControl::one_word) {
      // One fp16 word of the cache: layer 0, K, head 0, the last prompt slot, element 0.
      uint16_t big = f32_to_f16(32768.0f);
      p.ddr().write(comp.layout().at("L0.kcache").offset + uint64_t(S - 1) * mc.text.head_dim * 2, &big, 2);
    }
    gate(s0, dev, &ref, S, golden_row(0));
  }
  s0.wall_s = since(t_img);
  r.wall_image = s0.wall_s;
  r.steps.push_back(s0);
  r.device.ids.push_back(s0.device_token);
  if (s0.chain_token) r.chain.ids.push_back(*s0.chain_token);
  if (o.on_step) o.on_step(r.steps.back());

  // Decode steps, the chain's decode beside each.
  const auto t_dec = Clock::now();
  for (int k = 0; k + 1 < o.tokens; ++k) {
    const int prev = o.timing_only ? 0 : r.device.ids.back();
    if (!o.timing_only && (prev == ChatTokens{}.im_end || prev == kEndOfText)) break;
    const auto t_step = Clock::now();
    const uint32_t slot = uint32_t(S + k);
    uint32_t args[3] = {uint32_t(prev), slot, slot + 1};
    p.write_smem(comp.decode_io().token_smem, args, 12);
    auto dp = decode_position(slot, mp.rope_delta);
    if (!o.timing_only)
      write_rope(p.ocm(), mc, comp.decode_io().cos_ocm, comp.decode_io().sin_ocm, {{dp[0], dp[1], dp[2]}});
    std::future<std::vector<float>> next;
    if (chain)
      next = std::async(std::launch::async, [&, prev, dp] { return chain->decode(prev, {dp[0], dp[1], dp[2]}); });
    StepRecord s;
    s.step = k;
    s.pos = int(slot);
    {
      const sim::Stats& st = p.run(dec.program);
      s.cycles = st.total[sim::Stat::cycles];
      s.ddr_bytes = st.total[sim::Stat::ddr_bytes_read] + st.total[sim::Stat::ddr_bytes_written];
      collect(st, dec, cfg, "decode", {"decode"}, k == 0, r);
    }
    if (o.timing_only) {
      s.cache_expected = int(slot) + 1;
    } else {
      std::vector<float> dev = read_logits(p, dec.logits_ocm, V, o.negative == NegativeControl::zero);
      std::vector<float> ref = next.get();
      gate(s, dev, &ref, int(slot) + 1, golden_row(k + 1));
      // The host "forgets" the slot step 0 wrote: step 1 gets a stale cache.
      if (o.negative == NegativeControl::stale_cache && k == 0) fill_slot(p, comp, int(slot), 0);
    }
    s.wall_s = since(t_step);
    r.steps.push_back(s);
    r.device.ids.push_back(s.device_token);
    if (s.chain_token) r.chain.ids.push_back(*s.chain_token);
    if (o.on_step) o.on_step(r.steps.back());
  }
  r.wall_decode = since(t_dec);

  r.ok = r.failures.empty();
  if (!o.timing_only) {
    r.device.text = tok.decode(r.device.ids);
    r.chain.text = tok.decode(r.chain.ids);
  } else {
    r.device.ids.clear();  // placeholders, not an answer
  }
  if (golden) {
    const size_t n = std::max<size_t>(1, r.device.ids.size());
    Answer w, f;
    w.ids.assign(golden->w4a16_tokens.begin(), golden->w4a16_tokens.begin() + std::min(n, golden->w4a16_tokens.size()));
    f.ids.assign(golden->fp32_tokens.begin(), golden->fp32_tokens.begin() + std::min(n, golden->fp32_tokens.size()));
    w.text = tok.decode(w.ids);
    f.text = tok.decode(f.ids);
    r.reference_w4a16 = w;
    r.reference_fp32 = f;
  }
  return r;
}

}  // namespace gpnpu::model
