// The host driver of `gpnpu describe` (contract in driver_host.h).
#include "model/runtime/driver_host.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <hdf5.h>
#include <sys/resource.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "isa/error.h"
#include "isa/io_rules.h"
#include "isa/fp16.h"
#include "model/reference/chain.h"
#include "model/compiler/compiler.h"
#include "model/inputs/image.h"
#include "model/inputs/prompt.h"
#include "model/checkpoint/quant.h"
#include "model/checkpoint/safetensors.h"
#include "model/checkpoint/synthetic.h"
#include "model/inputs/tokenizer.h"
#include "model/runtime/session.h"
#include "model/checkpoint/progress.h"

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
// `context`: the tokens a decode step attends to (the floors of its attention calls).
void collect(const sim::Stats& st, const CompiledProgram& prog, const sim::Config& cfg, const std::string& program,
             const std::vector<std::string>& stage_names, bool keep_calls, uint32_t context, DescribeResult& r) {
  // The stage regions' time spans, to place each call in its stage.
  struct Span {
    std::string name;
    sim::Cycles begin, end;
    double mj;
  };
  std::vector<Span> spans;
  for (const sim::RegionCall& rc : st.calls())
    if (std::find(stage_names.begin(), stage_names.end(), st.names[rc.name]) != stage_names.end())
      spans.push_back({st.names[rc.name], rc.begin, rc.end, sim::energy_of(rc.counters, cfg).total_mj()});
  auto stage_of = [&](const sim::RegionCall& rc) -> const std::string& {
    for (const Span& s : spans)
      if (rc.begin >= s.begin && rc.end <= s.end) return s.name;
    static const std::string none = "other";
    return none;
  };
  const double mac_peak16 = cfg.mac_peak(true), mac_peak8 = cfg.mac_peak(false);
  auto stage = [&](const std::string& name) -> StageRecord& {
    for (StageRecord& s : r.stages)
      if (s.name == name && s.program == program) return s;
    r.stages.push_back({name, program});
    return r.stages.back();
  };
  for (const Span& s : spans) {
    StageRecord& rec = stage(s.name);
    rec.cycles += s.end - s.begin;
    rec.energy_mj += s.mj;
    if (program == "decode") rec.steps++;
  }
  for (const KernelRun& k : kernel_runs(st, prog, cfg, context)) {
    const sim::RegionCall& rc = *k.region;
    const KernelCall& kc = *k.call;
    const kernels::KernelCost& cost = k.cost;
    const std::string& sname = stage_of(rc);
    StageRecord& s = stage(sname);
    s.calls++;
    s.macs += double(cost.macs);
    s.ddr_bytes += double(cost.ddr_bytes);
    s.mac_floor += double(cost.macs) / (kc.int8 ? mac_peak8 : mac_peak16);
    s.ddr_floor += double(cost.ddr_bytes) / cfg.ddr_bytes_per_cycle();
    if (keep_calls)
      r.calls.push_back({program, sname, kc.mark, kc.kernel, rc.end - rc.begin, k.floor, cost, kc.int8,
                         sim::energy_of(rc.counters, cfg).total_mj()});
  }
}

// A run's energy and power (sim/energy.h) into its step record; `watts` gets its windows.
void record_energy(const sim::Stats& st, const sim::Config& cfg, StepRecord& s, std::vector<double>* watts) {
  const std::vector<double> w = st.window_watts(cfg);
  s.energy = sim::energy_of(st.total, cfg);
  s.peak_w = st.peak_watts(cfg, w, 0, st.total[sim::Stat::cycles]);
  if (watts) *watts = w;
}

}  // namespace

std::vector<std::string> CacheCheck::failures(int expected) const {
  std::vector<std::string> f;
  if (slots != expected) f.push_back(fmt::format("KV cache holds {} slots, expected {}", slots, expected));
  if (bad)
    f.push_back(fmt::format("KV cache row cosine {} < {} at {} (the first of {} rows below the gate, in layer, K/V, "
                            "slot order; the lowest cosine is {})",
                            format_cosine(first_bad_cos), kCacheGate, first_bad, bad, format_cosine(min_cos)));
  return f;
}

CacheCheck check_cache(const Session& dev, const KvCache& chain, int expected, uint32_t scan) {
  const Compiler& c = dev.compiler();
  const TextConfig& t = c.model().text;
  const int nkv = t.num_key_value_heads, hd = t.head_dim, kvd = nkv * hd;
  const uint32_t max_seq = scan ? std::min(scan, c.decode_io().max_seq) : c.decode_io().max_seq;
  CacheCheck cc;
  std::vector<uint16_t> buf = dev.kv(0, false, 0, max_seq);
  for (uint32_t s = 0; s < max_seq; ++s)
    if (std::any_of(&buf[size_t(s) * hd], &buf[size_t(s + 1) * hd], [](uint16_t h) { return (h & 0x7fff) != 0; }))
      ++cc.slots;
  std::vector<float> got(size_t(expected) * kvd);
  for (int l = 0; l < t.num_hidden_layers; ++l)
    for (int which = 0; which < 2; ++which) {
      for (int h = 0; h < nkv; ++h) {
        std::vector<uint16_t> head = dev.kv(l, which, h, uint32_t(expected));
        for (int s = 0; s < expected; ++s)
          for (int e = 0; e < hd; ++e) got[size_t(s) * kvd + size_t(h) * hd + e] = f16_to_f32(head[size_t(s) * hd + e]);
      }
      const std::vector<float>& ref = which ? chain.v[size_t(l)] : chain.k[size_t(l)];
      for (int s = 0; s < expected && size_t(s + 1) * kvd <= ref.size(); ++s) {
        double cs = cosine(std::span(&got[size_t(s) * kvd], size_t(kvd)), std::span(&ref[size_t(s) * kvd], size_t(kvd)));
        if (std::isnan(cs) || cs < cc.min_cos) cc.min_cos = std::isnan(cc.min_cos) ? cc.min_cos : cs;
        if (!(cs >= kCacheGate) && cc.bad++ == 0) {
          cc.first_bad = fmt::format("layer {} {} slot {}", l, which ? "V" : "K", s);
          cc.first_bad_cos = cs;
        }
      }
    }
  return cc;
}

namespace {

// Writes fp16 `value` over every row of slot `slot` (all layers, K and V, all heads).
void fill_slot(Session& dev, int slot, uint16_t value) {
  const TextConfig& t = dev.compiler().model().text;
  std::vector<uint16_t> row(size_t(t.head_dim), value);
  for (int l = 0; l < t.num_hidden_layers; ++l)
    for (bool v : {false, true})
      for (int h = 0; h < t.num_key_value_heads; ++h) dev.write_kv(l, v, h, uint32_t(slot), row);
}

// The logits of the last run; the zero negative control clears them on the device first.
std::vector<float> read_logits(Session& dev, bool zero) {
  if (zero) dev.clear_logits();
  return dev.logits();
}

// The nan-cache control: fp16 NaN over two cache rows after the image program, the
// earlier of them (in layer, K/V, slot order) layer 1 V slot 2, then layer 3 K slot 1
// (head 0, every element). Needs 4 layers and 3 prompt slots (the tiny model has them).
void plant_nan_rows(Session& dev, int slots) {
  const TextConfig& t = dev.compiler().model().text;
  if (t.num_hidden_layers < 4 || slots < 3) fail("--negative-control nan-cache needs 4 layers and 3 prompt tokens");
  std::vector<uint16_t> nan(size_t(t.head_dim), 0x7e00);
  for (auto [layer, value, slot] : {std::tuple{3, false, 1}, std::tuple{1, true, 2}})
    dev.write_kv(layer, value, 0, uint32_t(slot), nan);
}


// ---- numerics (fp16 range of functional runs) ---------------------------------------------

// Every kernel call's fp16 range from one run's stats, aggregated by (program, mark).
void collect_numerics(const sim::Stats& st, const CompiledProgram& prog, const std::string& program,
                      DescribeResult& r) {
  std::map<std::string, const KernelCall*> by_mark;
  for (const KernelCall& c : prog.calls) by_mark[c.mark] = &c;
  std::map<std::string, size_t> index;
  for (size_t k = 0; k < r.numerics.size(); ++k)
    if (r.numerics[k].program == program) index[r.numerics[k].mark] = k;
  for (const sim::RegionCall& rc : st.calls()) {
    auto it = by_mark.find(st.names[rc.name]);
    if (it == by_mark.end()) continue;
    auto [at, fresh] = index.try_emplace(it->first, r.numerics.size());
    if (fresh) r.numerics.push_back({program, it->first, it->second->kernel});
    NumericsRecord& n = r.numerics[at->second];
    n.max_abs = std::max(n.max_abs, rc.counters.f16_max_abs);
    n.overflow += rc.counters[sim::Stat::f16_overflow];
    n.underflow += rc.counters[sim::Stat::f16_underflow];
    n.nan += rc.counters[sim::Stat::f16_nan];
  }
}

// The chain's large and non-finite values (|v| >= kLargeChainValue), by tensor, row and
// column, kept per chain call: where a device's non-finite fp16 value is looked up.
constexpr float kLargeChainValue = 16384.0f;
struct ChainValue {
  std::string tensor;
  int64_t row = 0, col = 0;
  float value = 0;
};
TensorHook large_values_hook(std::vector<ChainValue>& out) {
  return [&out](const std::string& name, const std::vector<int64_t>& shape, std::span<const float> d) {
    const int64_t cols = shape.empty() ? 1 : shape.back();
    int kept = 0;
    for (size_t k = 0; k < d.size() && kept < 256; ++k)
      if (!(std::fabs(d[k]) < kLargeChainValue)) {
        out.push_back({name, int64_t(k) / cols, int64_t(k) % cols, d[k]});
        ++kept;
      }
  };
}

// The one chain intermediate of an unfused kernel call, "" if none (chain_tensors_of, driver_host.h).
std::string chain_tensor_of(const std::string& mark) {
  if (mark == "embed" || mark == "embed.after_image") return "lm.embed";
  if (mark == "lm_head") return "logits";
  const size_t dot = mark.find('.');
  if (dot == std::string::npos || dot < 2) return "";
  const char kind = mark[0];
  const std::string num = mark.substr(1, dot - 1);
  if (num.find_first_not_of("0123456789") != std::string::npos) return "";
  std::string op = mark.substr(mark.rfind('.') + 1);
  while (!op.empty() && std::isdigit(static_cast<unsigned char>(op.back()))) op.pop_back();  // silu_mul0 ...
  static const std::map<std::string, std::string> lm = {
      {"silu_mul", "mlp_act"},  {"gate_up_silu", "mlp_act"}, {"down", "mlp_out"}, {"o_proj", "attn_out"},
      {"attn_residual", "attn_res"}, {"mlp_residual", "out"}, {"deepstack_add", "out"}, {"attention", "attn"},
      {"q_rope", "q"},          {"k_rope", "k"}};
  static const std::map<std::string, std::string> tower = {
      {"gelu", "mlp_act"},   {"fc1_gelu", "mlp_act"}, {"attn_residual", "attn_res"}, {"mlp_residual", "out"},
      {"attention", "attn"}, {"q_rope", "q"},          {"k_rope", "k"}};
  if (kind == 'L' || kind == 'P') {
    auto it = lm.find(op);
    return it == lm.end() ? "" : fmt::format("lm.layer.{}.{}", num, it->second);
  }
  if (kind == 'V') {
    auto it = tower.find(op);
    return it == tower.end() ? "" : fmt::format("vision.0.block.{}.{}", num, it->second);
  }
  return "";
}

// The message that stops the gates at a run's first non-finite fp16 value (the caller
// prefixes the run: "image program: ", "step N: "). The device
// names the kernel call, the instruction, the PE and the fp32 value; the row and column
// are those of the chain's element nearest that value in the call's tensor (row0: the
// position of the run's first row), or of its first non-finite element for a NaN.
std::string nonfinite_message(const sim::Stats::F16Event& e, int64_t row0, const std::vector<ChainValue>& chain,
                              const sim::Config& cfg) {
  const bool nan = std::isnan(e.value);
  const std::string call = e.mark.empty() ? "(no mark)" : e.mark;
  std::string head = nan ? fmt::format("non-finite fp16 (NaN): kernel call {} ({}, PE {} element {}) wrote NaN", call,
                                       e.where, e.pe, e.element)
                         : fmt::format("fp16 overflow: kernel call {} ({}, PE {} element {}) rounded the fp32 value {:.6g} "
                                       "to {}inf (the largest fp16 is 65504)",
                                       call, e.where, e.pe, e.element, e.value, e.value < 0 ? "-" : "+");
  const std::vector<std::string> tensors = chain_tensors_of(e.mark);
  const ChainValue* best = nullptr;
  for (const ChainValue& c : chain) {
    if (std::find(tensors.begin(), tensors.end(), c.tensor) == tensors.end()) continue;
    if (nan ? std::isnan(c.value) && !best
            : std::isfinite(c.value) && (!best || std::fabs(c.value - e.value) < std::fabs(best->value - e.value)))
      best = &c;
  }
  std::string where;
  if (tensors.empty()) {
    where = "; the chain keeps no intermediate for this kernel call, so no row and column";
  } else if (!best) {
    where = fmt::format("; the chain's {} has no {} value, so no row and column (what this call read on the device "
                        "already differed from the chain)",
                        fmt::join(tensors, " and "), nan ? "non-finite" : "such");
  } else {
    const bool lm = best->tensor.starts_with("lm.");
    where = fmt::format("; at row {}{}, column {} of the chain's {} (its element nearest that value) the chain has {:.6g}",
                        best->row + (lm ? row0 : 0), lm ? " (token position)" : "", best->col, best->tensor, best->value);
  }
  std::string fix = nan ? ""
                        : cfg.fp16_overflow == "inf"
                            ? "; --set fp16_overflow=saturate clamps to +-65504 instead (docs/describe.md, Numerics)"
                            : "";
  return head + where + fix;
}

}  // namespace

std::vector<std::string> chain_tensors_of(const std::string& mark) {
  const size_t last = mark.rfind('.');
  // A down (fc2) GEMM in chunks of its inputs (L.mlp<c>.down, V.mlp<c>.fc2): only the last
  // chunk writes fp16, the MLP's output, or residual + MLP where the partial sums start from
  // the residual (compiler_image.cpp, emit_gemm_lrm_seed): both (the tower's chain keeps no
  // MLP output: the block's).
  const size_t prev = last == std::string::npos || last == 0 ? std::string::npos : mark.rfind('.', last - 1);
  if (prev != std::string::npos && mark.compare(prev + 1, 3, "mlp") == 0) {
    const std::string op = mark.substr(last + 1), stem = mark.substr(0, mark.find('.') + 1);
    if (op == "down") return {chain_tensor_of(stem + "down"), chain_tensor_of(stem + "mlp_residual")};
    if (op == "fc2" && mark[0] == 'V') return {chain_tensor_of(stem + "mlp_residual")};
  }
  if (last != std::string::npos && mark.substr(last + 1) == "qk_rope") {
    const std::string stem = mark.substr(0, last + 1);
    std::vector<std::string> out;
    for (const char* op : {"q_rope", "k_rope"})
      if (std::string t = chain_tensor_of(stem + op); !t.empty()) out.push_back(t);
    return out;
  }
  const std::string t = chain_tensor_of(mark);
  return t.empty() ? std::vector<std::string>{} : std::vector<std::string>{t};
}

NegativeControl parse_negative_control(const std::string& s) {
  if (s.empty() || s == "none") return NegativeControl::none;
  if (s == "zero") return NegativeControl::zero;
  if (s == "one-word") return NegativeControl::one_word;
  if (s == "stale-cache") return NegativeControl::stale_cache;
  if (s == "nan-cache") return NegativeControl::nan_cache;
  if (s == "drop-fp16") return NegativeControl::drop_fp16;
  fail("--negative-control '{}': unknown control (use zero, one-word, stale-cache, nan-cache or drop-fp16)", s);
}

const char* to_string(NegativeControl c) {
  switch (c) {
    case NegativeControl::zero: return "zero";
    case NegativeControl::one_word: return "one-word";
    case NegativeControl::stale_cache: return "stale-cache";
    case NegativeControl::nan_cache: return "nan-cache";
    case NegativeControl::drop_fp16: return "drop-fp16";
    default: return "none";
  }
}

std::string format_cosine(double c) { return std::isnan(c) ? "NaN" : fmt::format("{:.6f}", c); }

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
  // The first run's cost, said before it is paid: the disk it needs (the synthetic
  // checkpoint is temporary, the bundle stays) and where it goes.
  const ModelConfig cfg = synthetic ? mc : ModelConfig::from_json_file((ckpt / "config.json").string());
  uint64_t ckpt_bytes = 0;
  for (const TensorSpec& t : expected_tensors(cfg)) ckpt_bytes += uint64_t(t.numel()) * 2;  // bf16
  const uint64_t bundle_bytes = quant_bundle_data_bytes(cfg);
  const uint64_t need = bundle_bytes + (synthetic ? ckpt_bytes : 0);
  const fs::space_info sp = fs::space(dir, ec);
  note(fmt::format("first run of {}: no W4A16 bundle cached yet, so it is made once{} in {}: {}a {} bundle (kept; later "
                   "runs start at once); {} of disk needed, {} free. Progress lines follow; docs/performance.md gives "
                   "the measured first-run times.",
                   spec, synthetic ? " (synthetic weights, seed 1)" : "", dir.string(),
                   synthetic ? fmt::format("a {} bf16 checkpoint (temporary, deleted after), quantised to ", human_bytes(double(ckpt_bytes)))
                             : "the checkpoint quantised to ",
                   human_bytes(double(bundle_bytes)), human_bytes(double(need)),
                   ec ? std::string("unknown") : human_bytes(double(sp.available))));
  if (!ec && sp.available < need)
    fail("cache directory '{}': making the {} bundle needs {} of disk, only {} is free (set --cache-dir or $GPNPU_CACHE "
         "to a disk with room)", dir.string(), spec, human_bytes(double(need)), human_bytes(double(sp.available)));
  auto t0 = Clock::now();
  std::unique_ptr<io::ScopedTemp> ckpt_temp;  // the synthetic checkpoint: removed however this ends
  if (synthetic) {
    ckpt = dir / fmt::format("checkpoint.tmp.{}", ::getpid());
    ckpt_temp = std::make_unique<io::ScopedTemp>(ckpt.string(), true);
    note(fmt::format("making the {} checkpoint ...", spec));
    SyntheticOptions so;
    so.seed = 1;
    so.progress = progress_callback("checkpoint", note);
    make_synthetic_checkpoint(mc, ckpt.string(), so);
    note(fmt::format("  checkpoint made in {:.1f} s", since(t0)));
  }
  note(fmt::format("quantising {} to W4A16 ({}) ...", synthetic ? spec : ckpt.string(), bundle.string()));
  auto t1 = Clock::now();
  Checkpoint ck = load_checkpoint(ckpt.string());
  QuantOptions qo;
  qo.progress = progress_callback("quantising", note);
  write_quant_bundle(ck, cfg, bundle.string(), qo);  // written under a temporary name, then renamed
  note(fmt::format("  quantised in {:.1f} s", since(t1)));
  return bundle.string();
}

DescribeResult describe(const DescribeOptions& o) {
  const auto t_start = Clock::now();
  DescribeResult r;
  if (o.tokens < 1) fail("--tokens {}: give at least 1 (the first comes from the image program)", o.tokens);
  const sim::Config cfg = o.machine.config();
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
  if (o.width == 0 && o.height == 0) po.mode = ResizeMode::smart;  // --size auto, as `preprocess` does it
  po.width = o.width;
  po.height = o.height;
  po.patch_size = mc.vision.patch_size;
  po.temporal_patch_size = mc.vision.temporal_patch_size;
  po.merge_size = mc.vision.spatial_merge_size;
  ImageInput in = preprocess_image(o.image, po);
  r.png = encode_png(in.resized);
  r.width = in.resized.width;
  r.height = in.resized.height;
  Tokenizer tok = Tokenizer::load(Tokenizer::default_path());
  std::vector<int> ids = build_chat_prompt([&](std::string_view s) { return tok.encode(s); }, o.prompt, in.n_tokens());
  // The image program reads the prompt's ids from scalar memory, after its descriptor
  // areas: that, not the tokenizer's 4,096, is the prompt limit of a machine (3,072 on
  // qc-u's 16 KiB). Said here, before the compiler runs, in the user's terms.
  if (const uint64_t room = cfg.smem_bytes > ImageIo{}.ids_smem ? (cfg.smem_bytes - ImageIo{}.ids_smem) / 4 : 0;
      ids.size() > room)
    fail("the prompt is {} tokens ({} of them image tokens), more than the {} this machine's scalar memory holds "
         "(smem_bytes {}, the ids from byte {}): shorten the prompt, use a smaller --size, or --set smem_bytes={}",
         ids.size(), in.n_tokens(), room, cfg.smem_bytes, ImageIo{}.ids_smem,
         (ImageIo{}.ids_smem + ids.size() * 4 + 1023) / 1024 * 1024);
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
  copt.fp16_channels = bundle && !bundle->fp16_tensors().empty();  // mixed precision (kernels/f16cols.h)
  say(o, fmt::format("compiling the image program ({} tokens, {}x{} patches) and the decode program for {} ...", S,
                     in.grid_h, in.grid_w, cfg.name()));
  Compiler comp(mc, cfg, copt);
  // The image program runs as two runs (issue 18, docs/chat.md): vision (the tower; its
  // image and DeepStack rows left in DDR) and prefill (the whole prompt, the image rows
  // spliced in, ending in the LM head), as a conversation's first turn runs them.
  ImageShape vshape = shape, pshape = shape;
  vshape.prefill = false;
  pshape.vision = false;
  const CompiledProgram vis = comp.image_program(vshape), pre = comp.image_program(pshape), dec = comp.decode_program();
  const std::pair<const char*, const CompiledProgram*> image_runs[] = {{"vision", &vis}, {"prefill", &pre}};
  for (const auto& [kind, prog] : image_runs) {
    r.image_runs.push_back({kind, prog->plan, prog->program.words.size()});
    r.image_instructions += prog->program.words.size();
  }
  r.decode_instructions = dec.program.words.size();

  Session dev(comp, o.timing_only);
  const size_t V = size_t(mc.text.vocab_size);
  std::unique_ptr<WeightSource> weights;
  std::vector<ChainValue> chain_large;  // of the chain's current call (numerics)
  std::unique_ptr<Chain> chain;
  std::future<std::vector<float>> chain_logits;  // the chain's prefill (declared after the chain: waited for first)
  if (!o.timing_only) {
    if (o.negative == NegativeControl::drop_fp16 && !copt.fp16_channels)  // before the chain starts
      fail("--negative-control drop-fp16 needs a mixed-precision bundle (quantize --fp16-channels)");
    weights = bundle_weights(*bundle);
    ChainOptions co;
    const int cores = int(std::max(1u, std::thread::hardware_concurrency()));
    // The chain runs beside the simulator, which keeps one core (and borrows a second
    // for the chunks of its PE-block batches when it is free, isa/lane_pool.h).
    co.threads = o.threads > 0 ? o.threads : std::max(1, cores - 1);
    co.on_tensor = large_values_hook(chain_large);
    chain = std::make_unique<Chain>(mc, *weights, co);
    // Its prefill needs nothing of the device: it starts now, beside the device's setup
    // (one thread), so that it leaves the simulator both cores for more of the image program.
    chain_logits = std::async(std::launch::async, [&] {
      const auto t0 = Clock::now();
      auto l = chain->prefill(ids, {ImagePatches{1, in.grid_h, in.grid_w, in.patches}}, pos);
      r.chain_image = since(t0);
      return l;
    });
    say(o, "loading the weights into the simulated DDR ...");
    dev.load_weights(*bundle);
    if (o.negative == NegativeControl::drop_fp16) {
      // The device without its fp16 channels (their W16 rows zero: codes only); the chain keeps them.
      for (const DdrTensor& t : comp.layout().tensors())
        if (t.name.ends_with(".f16w")) dev.write_ddr(t.offset, std::vector<uint8_t>(t.bytes, 0).data(), t.bytes);
    }
    dev.load_image_constants(*bundle, shape);
  }
  dev.write_patches(in.patches);  // the prompt's ids and rotary tables: after the vision run
  r.wall_setup = since(t_start);

  // Progress during the long image program: every block / layer / stage that closes,
  // at most one line per 5 s of wall time (and every stage), with the share of the
  // program done counted in its kernels' floor cycles (a fair clock: the calls run
  // close to their floors) and the time left at that rate.
  std::map<std::string, double> floor_of;
  double floor_total = 0, floor_done = 0;
  for (const auto& [kind, prog] : image_runs)
    for (const KernelCall& c : prog->calls) {
      const double f = kernels::floor_cycles(cfg, c.cost, !c.int8);
      floor_of[c.mark] += f;
      floor_total += f;
    }
  auto last_note = Clock::now();
  const auto t_img = Clock::now();
  struct ResetHook {  // the hook refers to this frame: never leave it behind (errors included)
    sim::Sequencer& seq;
    ~ResetHook() { seq.on_mark_end = nullptr; }
  } reset_hook{dev.sequencer()};
  const CompiledProgram* running = nullptr;  // the image run in progress
  sim::Cycles run_start = 0;                 // its first cycle, counted from the vision run's
  dev.sequencer().on_mark_end = [&](uint32_t mark, sim::Cycles end) {
    const std::string& name = running->program.names.at(mark);
    if (auto it = floor_of.find(name); it != floor_of.end()) floor_done += it->second;
    if (name.find('.') != std::string::npos) return;
    bool stage = name == "vision_tower" || name == "prefill" || name == "head";
    if (!stage && since(last_note) < 5.0) return;
    last_note = Clock::now();
    const double share = floor_total > 0 ? floor_done / floor_total : 0, t = since(t_img);
    say(o, fmt::format("  image program: {} done at {:.1f} M cycles ({:.1f} s; {:.0f}% of the program by its kernels' "
                       "floors{})", name, (run_start + end) / 1e6, t, 100 * share,
                       share > 0.02 && share < 1 ? fmt::format(", about {:.0f} s left", t * (1 - share) / share) : ""));
  };

  // Gates of one run.
  auto gate = [&](StepRecord& s, std::span<const float> got, const std::vector<float>* ref, int expected_slots,
                  std::optional<int> golden_row) {
    s.device_token = argmax(got);
    s.cache_expected = expected_slots;
    if (!ref) return;
    s.chain_token = argmax(*ref);
    s.margin = top2_margin(*ref);
    s.cosine = cosine(got, *ref);  // NaN stays NaN: non-finite logits never look like the zero control
    if (!(*s.cosine >= kLogitsGate))
      s.failures.push_back(fmt::format("logits cosine {} < {}", format_cosine(*s.cosine), kLogitsGate));
    if (s.device_token != *s.chain_token && *s.margin >= kMarginTie)
      s.failures.push_back(fmt::format("device token {} != chain token {} (chain margin {:.3f})", s.device_token,
                                       *s.chain_token, *s.margin));
    CacheCheck cc = check_cache(dev, chain->cache(), expected_slots);
    s.cache_slots = cc.slots;
    s.slot_cosine = cc.min_cos;
    for (std::string& f : cc.failures(expected_slots)) s.failures.push_back(std::move(f));
    if (golden_row) {
      std::span<const float> g(&golden->w4a16_logits[size_t(*golden_row) * V], V);
      double gc = cosine(got, g);
      s.golden_cosine = gc;
      if (!(gc >= kLogitsGate))
        s.failures.push_back(fmt::format("cosine vs the PyTorch W4A16 golden {} < {}", format_cosine(gc), kLogitsGate));
      if (s.device_token != argmax(g) && top2_margin(g) >= kMarginTie)
        s.failures.push_back(fmt::format("device token {} != PyTorch W4A16 golden token {}", s.device_token, argmax(g)));
    }
    s.ok = s.failures.empty();
    for (const std::string& f : s.failures)
      r.failures.push_back(fmt::format("{}: {}", s.step < 0 ? std::string("image program") : fmt::format("step {}", s.step), f));
  };
  // A run's first non-finite fp16 value replaces the step's gate failures with one message
  // and ends the run (no further step).
  auto stop_on_nonfinite = [&](StepRecord& s, const sim::Stats::F16Event& e, int64_t row0) {
    if (!e.set) return;
    r.failures.resize(r.failures.size() - s.failures.size());
    s.failures = {nonfinite_message(e, row0, chain_large, cfg)};
    s.ok = false;
    r.nonfinite = fmt::format("{}: {}", s.step < 0 ? std::string("image program") : fmt::format("step {}", s.step),
                              s.failures[0]);
    r.failures.push_back(r.nonfinite);
  };
  // The golden rows stay comparable while the device follows the golden's tokens.
  auto golden_row = [&](int row) -> std::optional<int> {
    if (!golden || row >= int(golden->w4a16_logits.size() / V)) return std::nullopt;
    for (int k = 0; k < row && k < int(r.device.ids.size()); ++k)
      if (r.device.ids[size_t(k)] != golden->w4a16_tokens[size_t(k)]) return std::nullopt;
    return row;
  };

  // The image program, the chain's prefill (started in the setup) beside it.
  say(o, fmt::format("running the image program: a vision run ({} instructions) and a prefill run ({}){} ...",
                     vis.program.words.size(), pre.program.words.size(), o.timing_only ? ", timing only" : ""));
  sim::Stats::F16Event nonfinite;
  StepRecord s0;
  s0.step = -1;
  s0.pos = S - 1;
  s0.peak_w = NAN;
  for (size_t k = 0; k < std::size(image_runs); ++k) {
    running = image_runs[k].second;
    const sim::Stats& st = dev.run(*running);
    ImageRunRecord& ir = r.image_runs[k];
    ir.cycles = st.total[sim::Stat::cycles];
    ir.ddr_bytes = st.total[sim::Stat::ddr_bytes_read] + st.total[sim::Stat::ddr_bytes_written];
    run_start += ir.cycles;
    s0.cycles += ir.cycles;
    s0.ddr_bytes += ir.ddr_bytes;
    s0.counters.add_diff(st.total, {});
    // Energy and power of the two runs, their windows one after the other.
    StepRecord e;
    std::vector<double> watts;
    record_energy(st, cfg, e, &watts);
    s0.energy += e.energy;
    if (!(e.peak_w <= s0.peak_w)) s0.peak_w = e.peak_w;
    r.image_power_w.insert(r.image_power_w.end(), watts.begin(), watts.end());
    collect(st, *running, cfg, "image", {"vision_tower", "prefill", "head"}, true, 0, r);
    if (!o.timing_only) collect_numerics(st, *running, "image", r);
    if (!nonfinite.set) nonfinite = st.first_nonfinite;
    if (k == 0) dev.write_prompt(ids, pos);  // the prefill run's inputs
  }
  r.image_cycles = s0.cycles;
  r.image_ddr_bytes = s0.ddr_bytes;
  dev.sequencer().on_mark_end = nullptr;
  if (o.timing_only) {
    s0.cache_expected = S;
  } else {
    std::vector<float> got = read_logits(dev, o.negative == NegativeControl::zero);
    const auto t_wait = Clock::now();
    std::vector<float> ref = chain_logits.get();
    r.chain_wait_image = since(t_wait);
    if (o.negative == NegativeControl::one_word) {
      // One fp16 word of the cache: layer 0, K, head 0, the last prompt slot, element 0.
      uint16_t big = f32_to_f16(32768.0f);
      dev.write_kv(0, false, 0, uint32_t(S - 1), std::span(&big, 1));
    }
    if (o.negative == NegativeControl::nan_cache) plant_nan_rows(dev, S);
    gate(s0, got, &ref, S, golden_row(0));
    stop_on_nonfinite(s0, nonfinite, 0);
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
    if (!r.nonfinite.empty()) break;
    const auto t_step = Clock::now();
    const uint32_t slot = uint32_t(S + k);
    auto dp = decode_position(slot, mp.rope_delta);
    dev.write_decode_args(prev, slot, {dp[0], dp[1], dp[2]});
    std::future<std::vector<float>> next;
    chain_large.clear();
    if (chain)
      next = std::async(std::launch::async, [&, prev, dp] {
        const auto t0 = Clock::now();
        auto l = chain->decode(prev, {dp[0], dp[1], dp[2]});
        r.chain_decode += since(t0);
        return l;
      });
    StepRecord s;
    s.step = k;
    s.pos = int(slot);
    {
      const sim::Stats& st = dev.run(dec);
      s.cycles = st.total[sim::Stat::cycles];
      s.ddr_bytes = st.total[sim::Stat::ddr_bytes_read] + st.total[sim::Stat::ddr_bytes_written];
      s.counters = st.total;
      collect(st, dec, cfg, "decode", {"decode"}, k == 0, slot + 1, r);
      record_energy(st, cfg, s, k == 0 ? &r.decode_power_w : nullptr);
      if (!o.timing_only) collect_numerics(st, dec, "decode", r);
      nonfinite = st.first_nonfinite;
    }
    if (o.timing_only) {
      s.cache_expected = int(slot) + 1;
    } else {
      std::vector<float> got = read_logits(dev, o.negative == NegativeControl::zero);
      const auto t_wait = Clock::now();
      std::vector<float> ref = next.get();
      r.chain_wait_decode += since(t_wait);
      gate(s, got, &ref, int(slot) + 1, golden_row(k + 1));
      stop_on_nonfinite(s, nonfinite, int64_t(slot));
      // The host "forgets" the slot step 0 wrote: step 1 gets a stale cache.
      if (o.negative == NegativeControl::stale_cache && k == 0) fill_slot(dev, int(slot), 0);
    }
    s.wall_s = since(t_step);
    r.steps.push_back(s);
    r.device.ids.push_back(s.device_token);
    if (s.chain_token) r.chain.ids.push_back(*s.chain_token);
    if (o.on_step) o.on_step(r.steps.back());
  }
  r.wall_decode = since(t_dec);
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  auto seconds = [](const timeval& t) { return double(t.tv_sec) + 1e-6 * double(t.tv_usec); };
  r.cpu_user = seconds(ru.ru_utime);
  r.cpu_sys = seconds(ru.ru_stime);

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
