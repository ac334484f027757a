// The image program: the tiny model against the chain's prefill (functional), and
// the full 2B program's cycles per stage (timing-only).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <filesystem>
#include <functional>
#include <random>
#include <sstream>
#include <unistd.h>

#include <fmt/format.h>

#include "isa/error.h"
#include "isa/fp16.h"
#include "kernels/gemm.h"
#include "kernels/rope.h"
#include "model/reference/chain.h"
#include "model/compiler/compiler.h"
#include "model/compiler/compiler_emit.h"
#include "model/inputs/prompt.h"
#include "model/checkpoint/quant.h"
#include "model/checkpoint/safetensors.h"
#include "model/checkpoint/synthetic.h"
#include "model/runtime/session.h"
#include "tiny_bundle.h"

namespace gpnpu::model {
namespace {

namespace fs = std::filesystem;

using test::cosine;
using test::TinyBundle;

// A prompt of `seq` tokens with the image pads from `start`.
std::vector<int> prompt_ids(const ImageShape& s) {
  std::vector<int> ids;
  for (int i = 0; i < s.seq_len; ++i) ids.push_back(i >= s.image_start && i < s.image_start + s.n_image_tokens()
                                                        ? ChatTokens{}.image_pad
                                                        : 1000 + 37 * i % 5000);
  return ids;
}

struct ImageRun {
  std::vector<float> logits;
  sim::Stats stats;
  std::vector<uint16_t> keys;  // layer 0, kv head 0: KV-cache slots [0, slot0 + prompt) (functional runs)
};

// Runs the image program; with a bundle, functionally on random pixels. before_run (negative
// controls) may change the session's memory first.
ImageRun run_image(const Compiler& c, const CompiledProgram& prog, const ImageShape& s, const QuantBundle* bundle,
                   const std::vector<float>& pixels, bool timing_only, uint32_t slot0 = 0,
                   const std::function<void(Session&)>& before_run = {}) {
  Session dev(c, timing_only);
  std::vector<int> ids = prompt_ids(s);
  std::vector<std::array<int, 3>> pos;
  if (bundle) {
    dev.load_weights(*bundle);
    dev.load_image_constants(*bundle, s);
    MropePositions mp = mrope_positions(ids, {MergedGrid{s.grid_h / 2, s.grid_w / 2}});
    for (auto& q : mp.pos) pos.push_back({q[0], q[1], q[2]});
  }
  dev.write_prompt(ids, pos, pixels, slot0);
  if (before_run) before_run(dev);
  ImageRun r;
  r.stats = dev.run(prog);
  if (!timing_only) {
    r.logits = dev.logits();
    r.keys = dev.kv(0, false, 0, slot0 + uint32_t(ids.size()));
  }
  return r;
}

TinyBundle& tiny_bundle() {
  static TinyBundle tiny("image_" + config_tiny().name);
  return tiny;
}

// tile_rows != 0 forces the streamed plan with row tiles of at most that many rows.
void tiny_matches_chain_prefill(const std::vector<std::string>& sets, uint32_t tile_rows = 0) {
  TinyBundle& tiny = tiny_bundle();
  sim::Config cfg = sim::Config::make("qc-u", sets);
  CompileOptions opt;
  opt.image_tile_rows = tile_rows;
  opt.max_seq = 64;
  opt.max_patches = 64;
  Compiler c(config_tiny(), cfg, opt);
  ImageShape s{4, 6, 20, 3};
  CompiledProgram prog = c.image_program(s);
  EXPECT_TRUE(prog.plan.starts_with(tile_rows ? "streamed" : "resident")) << prog.plan;
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int pd = c.model().vision.patch_dim();
  std::vector<float> pixels(size_t(s.grid_h * s.grid_w) * pd);
  for (float& v : pixels) v = round_f16(nd(rng));
  ImageRun dev = run_image(c, prog, s, tiny.bundle.get(), pixels, false);

  auto weights = bundle_weights(*tiny.bundle);
  Chain chain(config_tiny(), *weights);
  std::vector<float> ref = chain.prefill(prompt_ids(s), {ImagePatches{1, s.grid_h, s.grid_w, pixels}});
  double cs = cosine(dev.logits, ref);
  std::printf("tiny image program on %ux%u PEs, %llu B OCM: %s\n  logits cosine %.7f, %llu cycles\n",
              unsigned(cfg.pe_rows), unsigned(cfg.pe_cols), (unsigned long long)cfg.ocm_bytes, prog.plan.c_str(), cs, (unsigned long long)dev.stats.total[sim::Stat::cycles]);
  EXPECT_GE(cs, 0.9999);
  // Same cycles in timing-only mode.
  ImageRun t = run_image(c, prog, s, nullptr, {}, true);
  EXPECT_EQ(t.stats.total[sim::Stat::cycles], dev.stats.total[sim::Stat::cycles]);
}

TEST(Image, TinyMatchesTheChainPrefill) { tiny_matches_chain_prefill({}); }
// Other machine points (issue 13): the GEMMs' last tiles narrower than the array, a
// non-square array, and the streamed plan on the largest array.
TEST(Image, TinyMatchesTheChainPrefillOn16x16) { tiny_matches_chain_prefill({"pe_rows=16", "pe_cols=16"}); }
TEST(Image, TinyMatchesTheChainPrefillOn64x64) { tiny_matches_chain_prefill({"pe_rows=64", "pe_cols=64"}); }
// Shapes off the power-of-two grid (found by describing the tiny model at random points):
// npe / 2 odd (39x38: no second row set, whose upper pairs would start on an odd PE), and an odd
// pe_cols on a large array (53x59: the gate|up call's SiLU stays out of its epilogue, whose PE
// pairs would cross rows).
TEST(Image, TinyMatchesTheChainPrefillOnOddShapes) {
  tiny_matches_chain_prefill({"pe_rows=39", "pe_cols=38"});
  tiny_matches_chain_prefill({"pe_rows=53", "pe_cols=59", "ocm_bytes=2MiB", "lrm_bytes=6KiB"});
}
TEST(Image, TinyMatchesTheChainPrefillOn32x64Streamed) {
  tiny_matches_chain_prefill({"pe_rows=32", "pe_cols=64", "ocm_bytes=2MiB"}, 8);
}

// The prefill's last layer past its KV write: the head's row alone (o_proj one row's MACs), none
// without the head (a conversation's earlier chunk: no o_proj at all), in the resident plan, the
// three streamed phases (their one-row tail, its q, k and v in the q|k|v rows of one tile, or
// loaded where the rows take tiles: on 8x8 PEs at 256 GB/s, where that pays) and whole layers a
// tile. The logits match the chain (cosine >= 0.9999, the same top-1) and the last layer's keys
// and values without the head are bit for bit those with it; negative control: a key of that
// layer changed in DDR differs.
TEST(Image, LastLayerRunsOnlyTheHeadRow) {
  TinyBundle& tiny = tiny_bundle();
  ImageShape s{4, 6, 20, 3}, chunk = s;
  chunk.head = false;
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> pixels(size_t(s.grid_h * s.grid_w) * config_tiny().vision.patch_dim());
  for (float& v : pixels) v = round_f16(nd(rng));
  Chain chain(config_tiny(), *bundle_weights(*tiny.bundle));
  const std::vector<float> ref = chain.prefill(prompt_ids(s), {ImagePatches{1, s.grid_h, s.grid_w, pixels}});
  struct Case {
    std::vector<std::string> sets;
    uint32_t tile_rows, prefill;  // CompileOptions::image_tile_rows, image_prefill
    const char* plan;             // in the plan line (the three phases: which tail)
  };
  for (const Case& k :
       {Case{{}, 0, 0, "resident"},
        Case{{}, 20, 1, "the prefill's last layer on the head's row, its q, k, v in the q|k|v rows"},
        Case{{"pe_rows=8", "pe_cols=8", "ddr_gbps=256"}, 8, 1,
             "the prefill's last layer on the head's row, its keys and values reloaded"},
        Case{{}, 8, 2, "prefill 8 (whole layers)"}}) {
    CompileOptions opt;
    opt.max_seq = 64;
    opt.max_patches = 64;
    opt.image_tile_rows = k.tile_rows;
    opt.image_prefill = k.prefill;
    Compiler c(config_tiny(), sim::Config::make("qc-u", k.sets), opt);
    const auto& tc = c.model().text;
    const int last = tc.num_hidden_layers - 1;
    const CompiledProgram with = c.image_program(s), without = c.image_program(chunk);
    SCOPED_TRACE(with.plan);
    EXPECT_NE(with.plan.find(k.plan), std::string::npos);
    auto o_proj = [&](const CompiledProgram& p, int layer) {  // the layer's o_proj MACs (0: none)
      uint64_t macs = 0;
      for (const KernelCall& kc : p.calls)
        if (kc.mark.starts_with(fmt::format("P{}.", layer)) && kc.mark.find("o_proj") != std::string::npos)
          macs += kc.cost.macs;
      return macs;
    };
    const uint64_t row = uint64_t(tc.hidden_size) * tc.num_attention_heads * tc.head_dim;  // o_proj's MACs a row
    EXPECT_EQ(o_proj(with, 0), s.seq_len * row);
    EXPECT_EQ(o_proj(with, last), row);
    EXPECT_EQ(o_proj(without, last), 0u) << "no o_proj in the last layer without the head";

    const ImageRun dev = run_image(c, with, s, tiny.bundle.get(), pixels, false);
    EXPECT_GE(cosine(dev.logits, ref), 0.9999);
    EXPECT_EQ(std::max_element(dev.logits.begin(), dev.logits.end()) - dev.logits.begin(),
              std::max_element(ref.begin(), ref.end()) - ref.begin());
    auto kv = [&](const CompiledProgram& p, bool corrupt) {
      Session d(c, false);
      d.load_weights(*tiny.bundle);
      d.load_image_constants(*tiny.bundle, s);
      std::vector<int> ids = prompt_ids(s);
      std::vector<std::array<int, 3>> pos;
      for (auto& q : mrope_positions(ids, {MergedGrid{s.grid_h / 2, s.grid_w / 2}}).pos) pos.push_back({q[0], q[1], q[2]});
      d.write_prompt(ids, pos, pixels, 0);
      d.run(p);
      if (corrupt) d.write_kv(last, false, 0, 5, std::vector<uint16_t>{0x3c00});
      std::vector<uint16_t> all;
      for (int h = 0; h < tc.num_key_value_heads; ++h)
        for (bool value : {false, true}) {
          const std::vector<uint16_t> r = d.kv(last, value, h, uint32_t(s.seq_len));
          all.insert(all.end(), r.begin(), r.end());
        }
      return all;
    };
    const std::vector<uint16_t> keys = kv(with, false);
    EXPECT_EQ(kv(without, false), keys);
    EXPECT_NE(kv(without, true), keys) << "negative control: a changed key must differ";
  }
}

// ---- OCM size (issue 4, acceptance 7): the plan adapts to ocm_bytes ----

size_t argmax(const std::vector<float>& v) { return size_t(std::max_element(v.begin(), v.end()) - v.begin()); }

// A 12x12 image (144 patches, 36 image tokens) from row 5 of a 48-token prompt: its
// patches alone (432 KiB) keep the resident plan out of 1 MiB.
const ImageShape kOcmShape{12, 12, 48, 5};

// The tiny model with an LM MLP of 3072 (two packed gate|up chunks of 1536 columns, as
// the 2B model has four): the chunk loops and the gate|up calls of several chunks run.
ModelConfig config_tiny_wide() {
  ModelConfig m = config_tiny();
  m.name = "tiny_wide";
  m.text.intermediate_size = 3072;
  return m;
}
TinyBundle& wide_bundle() {
  static TinyBundle tiny("image_" + config_tiny_wide().name, config_tiny_wide());
  return tiny;
}

// Random fp16 pixels for `shape` (seed), and the chain's logits for them on `m`.
std::vector<float> ocm_pixels(const ModelConfig& m, uint32_t seed, const ImageShape& shape = kOcmShape) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> pixels(size_t(shape.grid_h * shape.grid_w) * m.vision.patch_dim());
  for (float& v : pixels) v = round_f16(nd(rng));
  return pixels;
}
// Compile options of the OCM tests: KV-cache slots for max_seq tokens, 256 patches.
CompileOptions ocm_options(uint32_t max_seq = 64) {
  CompileOptions opt;
  opt.max_seq = max_seq;
  opt.max_patches = 256;
  return opt;
}
struct OcmReference {
  std::vector<float> pixels, ref;
};
OcmReference ocm_reference(const ModelConfig& m, const QuantBundle& bundle, uint32_t seed,
                           const ImageShape& shape = kOcmShape) {
  OcmReference r;
  r.pixels = ocm_pixels(m, seed, shape);
  auto weights = bundle_weights(bundle);
  Chain chain(m, *weights);
  r.ref = chain.prefill(prompt_ids(shape), {ImagePatches{1, shape.grid_h, shape.grid_w, r.pixels}});
  return r;
}

struct OcmRun {
  std::string plan;
  std::vector<float> logits;
  uint64_t cycles = 0, timing_cycles = 0;
};

// The tiny model's image program for kOcmShape on `ocm_bytes` (functional, then
// timing-only); slot0 != 0 breaks the streamed plan's contract (negative control).
OcmRun tiny_ocm_run(const char* ocm_bytes, const std::vector<float>& pixels, CompileOptions opt = {},
                    uint32_t slot0 = 0) {
  sim::Config cfg = sim::Config::make("qc-u", {fmt::format("ocm_bytes={}", ocm_bytes)});
  opt.max_seq = 64;
  opt.max_patches = 256;
  Compiler c(config_tiny_wide(), cfg, opt);
  CompiledProgram prog = c.image_program(kOcmShape);
  OcmRun r;
  r.plan = prog.plan;
  if (!pixels.empty()) {
    ImageRun dev = run_image(c, prog, kOcmShape, wide_bundle().bundle.get(), pixels, false, slot0);
    r.logits = dev.logits;
    r.cycles = dev.stats.total[sim::Stat::cycles];
  }
  r.timing_cycles = run_image(c, prog, kOcmShape, nullptr, {}, true).stats.total[sim::Stat::cycles];
  return r;
}

// The wide tiny model's image program on 1 MiB (resident with its GEMMs' DMA buffers on
// one channel: with all four the plan does not fit and was streamed, 1,459,522 cycles),
// 800 KiB (the tower resident, the prefill streamed: tiles of 48 rows through whole layers,
// each tile's attention reading the keys up to its last row back from the cache; the GEMMs on half
// the array's rows, Compiler::gemm_view; the LM head's GEMV on as many DMA channels as its OCM holds), forced small
// tiles (ragged last tiles, the image rows cut by tile boundaries, several merger tiles, one
// kv head per attention call), in each copy mode of the row phases (waited, pipelined,
// stores behind), the prefill in three phases and in whole layers a tile, 8 MiB
// (resident, gate|up calls of 2 packed chunks) and 512 KiB (the prefill's MLP over every
// row in chunks with fp32 partial sums, Streamed::pm), each against the chain: logits cosine >=
// 0.9999, the same top-1, timing-only cycles = functional cycles; 1 MiB and 4 MiB
// cycles differ. Negative control: the streamed plan reads keys and values back from
// the KV cache from slot 0 (ImageIo::slot0_smem must hold 0): a wrong slot must fail
// the gate (in tiles of 20 rows and in whole layers; at 512 KiB the attention reads its keys
// in its q|k|v rows, whose controls expect_matches_chain runs: TinyMlpOverEveryRowMatchesTheChain).
TEST(ImageOcm, TinyMatchesTheChainOnEveryOcmPlan) {
  const auto [pixels, ref] = ocm_reference(config_tiny_wide(), *wide_bundle().bundle, 7);

  CompileOptions small;
  small.image_tile_rows = 20;
  small.image_attn_groups = 1;
  small.image_prefill = 1;    // three phases
  small.image_copy_mode = 1;  // waited
  CompileOptions pipelined = small, behind = small;  // the row phases' copy modes (CopyMode)
  pipelined.image_copy_mode = 2;
  behind.image_copy_mode = 3;
  // The prefill in whole layers a tile, in each copy mode.
  CompileOptions fused = small, fused_pipelined = pipelined, fused_behind = behind;
  for (CompileOptions* o : {&fused, &fused_pipelined, &fused_behind}) o->image_prefill = 2;
  struct Case {
    const char* ocm;
    CompileOptions opt;
    const char* plan;  // expected in the plan description
  };
  const std::vector<Case> cases = {
      {"1MiB", {}, "resident: tower MLP rows per chunk 144, gate|up chunks per call 1; GEMM DMA channels 2 (of 4"},
      {"800KiB", {}, "tower resident: tower MLP rows per chunk 144; prefill streamed: rows per tile 48 (whole "
                     "layers); copies waited; kv heads per attention call 2; GEMM DMA channels 4; GEMMs on 16 of the "
                     "32 PE rows"},
      {"1MiB", small, "tower 20|20 (qkv|MLP phases), mergers 5, prefill 20|20 (qkv|MLP phases); copies tower "
                      "waited|waited, prefill waited|waited; kv heads per attention call tower 1, prefill 1 (2|2 "
                      "buffer sets)"},
      {"1MiB", pipelined, "prefill 20|20 (qkv|MLP phases); copies tower pipelined|pipelined, prefill "
                          "pipelined|pipelined"},
      {"1MiB", behind, "prefill 20|20 (qkv|MLP phases); copies tower stores behind|stores behind, prefill stores "
                       "behind|stores behind"},
      {"1MiB", fused, "prefill 20 (whole layers); copies tower waited|waited, prefill waited; kv heads per attention "
                      "call tower 1, prefill 1 (2 tower buffer sets)"},
      {"1MiB", fused_pipelined, "prefill 20 (whole layers); copies tower pipelined|pipelined, prefill pipelined"},
      {"1MiB", fused_behind, "prefill 20 (whole layers); copies tower stores behind|stores behind, prefill stores "
                             "behind"},
      {"8MiB", {}, "resident: tower MLP rows per chunk 144, gate|up chunks per call 2"},
      // The prefill's MLP over all 48 rows, six chunks of 512 with fp32 partial sums.
      {"512KiB", {}, "prefill 48|48 (qkv|MLP phases; the attention reads q, k and v in the q|k|v rows; "
                           "the MLP in chunks of 512 with fp32 partial sums in LRM)"},
  };
  std::map<std::string, uint64_t> cycles;
  for (const Case& k : cases) {
    OcmRun r = tiny_ocm_run(k.ocm, pixels, k.opt);
    const double cs = cosine(r.logits, ref);
    std::printf("tiny image program, %s: %s\n  logits cosine %.7f, top-1 %zu (chain %zu), %llu cycles\n", k.ocm,
                r.plan.c_str(), cs, argmax(r.logits), argmax(ref), (unsigned long long)r.cycles);
    SCOPED_TRACE(std::string(k.ocm) + ": " + r.plan);
    EXPECT_NE(r.plan.find(k.plan), std::string::npos);
    EXPECT_GE(cs, 0.9999);
    EXPECT_EQ(argmax(r.logits), argmax(ref));
    EXPECT_EQ(r.timing_cycles, r.cycles);
    if (!k.opt.image_tile_rows) cycles[k.ocm] = r.cycles;
  }
  const uint64_t at4 = tiny_ocm_run("4MiB", {}).timing_cycles;
  std::printf("tiny image program, 4MiB: %llu cycles\n", (unsigned long long)at4);
  EXPECT_NE(cycles["1MiB"], at4) << "1 MiB and 4 MiB must differ";

  for (const auto& [ocm, o] : {std::pair<const char*, CompileOptions>{"1MiB", small}, {"1MiB", fused}}) {
    OcmRun bad = tiny_ocm_run(ocm, pixels, o, 3);
    const double cs = cosine(bad.logits, ref);
    std::printf("negative control (%s; keys written from slot 3, read from slot 0): logits cosine %.7f\n",
                bad.plan.c_str(), cs);
    EXPECT_LT(cs, 0.9999) << "a wrong KV-cache slot must fail the gate";
  }
}

// Negative control: the packed weight `tensor` (its bytes [from, to)) zeroed in DDR must fail the
// logits gate.
void expect_zeroed_weight_fails(const Compiler& c, const CompiledProgram& prog, const ImageShape& shape,
                                const QuantBundle* bundle, const std::vector<float>& pixels,
                                const std::vector<float>& ref, const std::string& tensor, const std::string& what,
                                uint64_t from = 0, uint64_t to = UINT64_MAX) {
  const DdrTensor& t = c.layout().at(tensor);
  const std::vector<uint8_t> zeros(std::min(to, t.bytes) - from, 0);
  const ImageRun bad = run_image(c, prog, shape, bundle, pixels, false, 0,
                                 [&](Session& dev) { dev.write_ddr(t.offset + from, zeros.data(), zeros.size()); });
  const double cs = cosine(bad.logits, ref);
  std::printf("negative control (%s zeroed): logits cosine %.7f\n", what.c_str(), cs);
  EXPECT_LT(cs, 0.9999) << "a zeroed " << what << " must fail the gate";
}

// A streamed image program against the chain's logits `ref`: cosine >= 0.9999, the same top-1
// and timing-only = functional cycles; with `control`, the negative control too (the keys
// written from slot 3 and read from slot 0, for plans that read them back from the KV cache:
// it must fail the gate). A prefill whose attention reads its keys in its q|k|v rows (no
// cached tokens: nothing read back) shows the slot on the cache itself: from slot 3 layer 0's
// keys land at slots [3, 3 + prompt), bit for bit the slot-0 run's [0, prompt), not at
// [0, prompt); and a zeroed o_proj weight of the last layer must fail the logits gate.
void expect_matches_chain(const Compiler& c, const CompiledProgram& prog, const ImageShape& shape,
                          const QuantBundle* bundle, const std::vector<float>& pixels, const std::vector<float>& ref,
                          const std::string& label, bool control = true) {
  const bool own_keys = prog.plan.find("reads q, k and v in the q|k|v rows") != std::string::npos;
  std::vector<uint16_t> keys0;
  for (uint32_t slot0 : {0u, 3u}) {
    if (slot0 && !control) continue;
    const ImageRun dev = run_image(c, prog, shape, bundle, pixels, false, slot0);
    const double cs = cosine(dev.logits, ref);
    std::printf("%s%s: %s\n  logits cosine %.7f, %llu cycles\n", label.c_str(),
                !slot0 ? ""
                : own_keys ? " (keys written from slot 3: their cache slots checked)"
                           : " (negative control: keys written from slot 3, read from slot 0)",
                prog.plan.c_str(), cs, (unsigned long long)dev.stats.total[sim::Stat::cycles]);
    if (slot0 && own_keys) {
      const size_t row = c.model().text.head_dim;
      ASSERT_EQ(dev.keys.size(), keys0.size() + 3 * row);
      EXPECT_TRUE(std::equal(keys0.begin(), keys0.end(), dev.keys.begin() + 3 * row))
          << "the keys from slot 3 must be the slot-0 run's";
      EXPECT_FALSE(std::equal(keys0.begin(), keys0.end(), dev.keys.begin())) << "control: not at slot 0";
      expect_zeroed_weight_fails(c, prog, shape, bundle, pixels, ref,
                                 fmt::format("L{}.o.gemm", c.model().text.num_hidden_layers - 1), "last o_proj");
      continue;
    }
    if (slot0) {
      EXPECT_LT(cs, 0.9999) << "a wrong KV-cache slot must fail the gate";
      continue;
    }
    keys0 = dev.keys;
    EXPECT_GE(cs, 0.9999);
    EXPECT_EQ(argmax(dev.logits), argmax(ref));
    EXPECT_EQ(run_image(c, prog, shape, nullptr, {}, true).stats.total[sim::Stat::cycles],
              dev.stats.total[sim::Stat::cycles]);
  }
}

// Whether the program has a kernel call of this mark.
bool has_call(const CompiledProgram& prog, const std::string& mark) {
  return std::any_of(prog.calls.begin(), prog.calls.end(), [&](const KernelCall& k) { return k.mark == mark; });
}
// A program with its activations parked in LRM (compiled by c with opt) against the same plan
// through DDR (CompileOptions::image_no_park, which has the calls ddr_marks): the parks move the
// same bytes, so the same logits bit for bit, in fewer cycles.
void expect_parks_match_ddr(const Compiler& c, CompileOptions opt, const CompiledProgram& prog,
                            const QuantBundle* bundle, const std::vector<float>& pixels, const char* what,
                            std::initializer_list<const char*> ddr_marks) {
  opt.image_no_park = true;
  const Compiler cd(c.model(), c.config(), opt);
  const CompiledProgram via_ddr = cd.image_program(kOcmShape);
  for (const char* m : ddr_marks) EXPECT_TRUE(has_call(via_ddr, m)) << m << " through DDR";
  const ImageRun parked = run_image(c, prog, kOcmShape, bundle, pixels, false, 0);
  const ImageRun stored = run_image(cd, via_ddr, kOcmShape, bundle, pixels, false, 0);
  EXPECT_EQ(parked.logits, stored.logits);
  const uint64_t pc = parked.stats.total[sim::Stat::cycles], sc = stored.stats.total[sim::Stat::cycles];
  std::printf("%s through LRM %llu cycles, through DDR %llu\n", what, (unsigned long long)pc, (unsigned long long)sc);
  EXPECT_LT(pc, sc);
}

// The streamed plan's phases over every row (Streamed::vqg, vpm, pm): the wide tiny model
// with a tower MLP of 1536 too (three chunks of 512 in the tower, six in the prefill; the
// tower's q|k|v by groups of 2 heads beside the attention from block 1 on, whose attention
// rows the MLP phase finds in its own buffer; the prefill's residual kept in OCM from a
// layer's MLP to the next layer's norm, then parked in LRM), on 432 KiB at 8 GB/s (where
// re-reading the weights costs more than the phases' extra copies and partial sums: the cost
// model picks them; the GEMMs on 2 of the 4 DMA channels, which leaves the next norms' load
// one). Against the chain (cosine >= 0.9999, the same top-1, timing-only = functional
// cycles); the negative control reads the KV cache from the wrong slot.
ModelConfig config_tiny_wider() {
  ModelConfig m = config_tiny_wide();
  m.name = "tiny_wider";
  m.vision.intermediate_size = 1536;
  return m;
}
TEST(ImageOcm, TinyMlpOverEveryRowMatchesTheChain) {
  static TinyBundle tiny("image_" + config_tiny_wider().name, config_tiny_wider());
  const auto [pixels, ref] = ocm_reference(config_tiny_wider(), *tiny.bundle, 9);
  sim::Config cfg = sim::Config::make("qc-u", {"ocm_bytes=432KiB", "ddr_gbps=8"});
  const CompileOptions opt = ocm_options();
  Compiler c(config_tiny_wider(), cfg, opt);
  const CompiledProgram prog = c.image_program(kOcmShape);
  EXPECT_NE(prog.plan.find("tower 144 (block 0: 72)|144 (qkv|MLP phases; the MLP in chunks of 512 with fp32 "
                           "partial sums in LRM; q|k|v 2 heads at a time beside the attention)"),
            std::string::npos) << prog.plan;
  EXPECT_NE(prog.plan.find("prefill 48|48 (qkv|MLP phases; the attention reads q, k and v in the q|k|v rows; "
                           "the MLP in chunks of 512 with fp32 partial sums in LRM)"),
            std::string::npos) << prog.plan;
  // Every row at once in both phases: the residual stays in OCM from a layer's MLP to the
  // next layer's norm, parked in LRM at the layer's start and back for its attention residual
  // (not stored and loaded back; the rows are not loaded either); so does the attention's
  // output (over q in the q|k|v rows) until o_proj reads it. The tower's residual too, from
  // block 0 to block 1; blocks 1-3 feed mergers: their rows parked after the MLP phase,
  // unparked into the merger's rows and into the next block's (not stored and loaded back).
  // The next layer's norm vectors come in after a layer's post_norm, on a DMA channel the
  // GEMMs leave free (not at the next layer's start, behind its weights).
  for (const char* m : {"P1.park_residual", "P1.unpark_residual", "P1.park_attn", "P1.unpark_attn",
                        "V1.park_residual", "V1.park_rows", "M0.t0.unpark_rows", "V2.unpark_rows", "V3.park_rows",
                        "Mf.t0.unpark_rows", "P1.load_next_norms"})
    EXPECT_TRUE(has_call(prog, m)) << m;
  for (const char* m : {"P1.store_residual", "P1.load_residual", "P1.t0.load", "P1.g0.store", "P1.load_attn",
                        "V1.load", "V2.load", "V1.store", "M0.t0.load", "Mf.t0.load", "P2.load_norms"})
    EXPECT_FALSE(has_call(prog, m)) << m;
  expect_matches_chain(c, prog, kOcmShape, tiny.bundle.get(), pixels, ref,
                       "tiny (wider MLPs) image program, 432 KiB, 8 GB/s");

  // Through DDR instead: the residual stored at the layer's start (the store waited for before
  // the q|k|v GEMM writes over the rows) and loaded back, the attention's output stored by its
  // calls and loaded for o_proj.
  expect_parks_match_ddr(c, opt, prog, tiny.bundle.get(), pixels, "residual and attention output",
                         {"P1.store_residual", "P1.load_residual", "V1.store_residual", "V1.store", "M0.t0.load",
                          "V2.load", "P1.g0.store", "P1.load_attn"});
}

// The tower's "q, k, v in turn, k and v kept" (Streamed::vkv, forced over every row by the knob
// image_qkv_rows) with its MLP phase over every row: q and the attention's output go through
// LRM slots (park_q after q's rotation, each group's q unparked head-major into the attention's
// staging, its output parked from there and unparked row-major for proj), not DDR (store_q,
// load_q, the calls' stores, load_attn). On 32x32 the planner takes every head in one call (one
// buffer set: the slots move through the array port); on 16x16 a head's 144 rows fill more than
// half the array, so four calls run the slots of four groups. Against the chain; the same
// logits bit for bit as with image_no_park, in fewer cycles; negative control: block 1's proj
// zeroed.
TEST(ImageOcm, TinyTowerQAndAttentionRowsThroughLrmMatchTheChain) {
  static TinyBundle tiny("image_" + config_tiny_wider().name, config_tiny_wider());
  const auto [pixels, ref] = ocm_reference(config_tiny_wider(), *tiny.bundle, 13);
  for (const bool small : {false, true}) {
    std::vector<std::string> sets = {"ocm_bytes=512KiB", "ddr_gbps=8"};
    if (small) sets.insert(sets.end(), {"pe_rows=16", "pe_cols=16"});
    const sim::Config cfg = sim::Config::make("qc-u", sets);
    CompileOptions opt = ocm_options();
    opt.image_qkv_rows = 144;
    Compiler c(config_tiny_wider(), cfg, opt);
    const CompiledProgram prog = c.image_program(kOcmShape);
    EXPECT_NE(prog.plan.find("q, k, v in turn, k and v kept for the attention"), std::string::npos) << prog.plan;
    EXPECT_NE(prog.plan.find(small ? "kv heads per attention call tower 1," : "kv heads per attention call tower 4,"),
              std::string::npos) << prog.plan;
    for (const char* m : {"V1.park_q", "V1.g0.unpark_q", small ? "V1.g3.park_attn" : "V1.g0.park_attn",
                          "V1.unpark_attn"})
      EXPECT_TRUE(has_call(prog, m)) << m;
    for (const char* m : {"V1.store_q", "V1.g0.load_q", "V1.g0.store", "V1.load_attn"})
      EXPECT_FALSE(has_call(prog, m)) << m;
    const std::string what = fmt::format("tiny (wider MLPs) image program, {}, 512 KiB, 8 GB/s, the tower's q, k, v "
                                         "in turn", small ? "16x16" : "32x32");
    expect_matches_chain(c, prog, kOcmShape, tiny.bundle.get(), pixels, ref, what, false);
    expect_parks_match_ddr(c, opt, prog, tiny.bundle.get(), pixels, "tower q and attention rows",
                           {"V1.store_q", "V1.g0.load_q", "V1.g0.store", "V1.load_attn"});
    expect_zeroed_weight_fails(c, prog, kOcmShape, tiny.bundle.get(), pixels, ref, "V1.proj", "block 1's proj");
  }
}

// The prefill's down over two gate|up chunks a call (pm_down_pairs: there a gate|up tile streams
// in slower than a down of one chunk runs its last tile; the 2B on 64x64 at 2 MiB and 128 GB/s:
// 35.09 -> 33.98 M cycles), forced by the knob where the rule allows it (the estimate keeps it
// only 3% below): the plan above, its SiLU rows of two chunks side by side. Against the chain;
// negative control: layer 1's second down (K = chunks 2 and 3) zeroed in DDR.
TEST(ImageOcm, TinyDownOverTwoChunksMatchesTheChain) {
  static TinyBundle tiny("image_" + config_tiny_wider().name, config_tiny_wider());
  const auto [pixels, ref] = ocm_reference(config_tiny_wider(), *tiny.bundle, 47);
  sim::Config cfg = sim::Config::make("qc-u", {"ocm_bytes=512KiB", "ddr_gbps=12"});
  CompileOptions opt = ocm_options();
  opt.image_down_pairs = true;
  Compiler c(config_tiny_wider(), cfg, opt);
  const CompiledProgram prog = c.image_program(kOcmShape);
  EXPECT_NE(prog.plan.find("the MLP in chunks of 512 with fp32 partial sums in LRM, the down over two chunks a call"),
            std::string::npos) << prog.plan;
  size_t downs = 0, gate_ups = 0;
  for (const KernelCall& k : prog.calls) {
    downs += k.mark.starts_with("P1.") && k.mark.ends_with(".down");
    gate_ups += k.mark.starts_with("P1.") && k.mark.find(".gate_up") != std::string::npos;
  }
  EXPECT_EQ(gate_ups, 6u);  // (3,072 / 512 chunks)
  EXPECT_EQ(downs, 3u);
  expect_matches_chain(c, prog, kOcmShape, tiny.bundle.get(), pixels, ref,
                       "tiny (wider MLPs) image program, 512 KiB, 12 GB/s, the down over two chunks", false);
  expect_zeroed_weight_fails(c, prog, kOcmShape, tiny.bundle.get(), pixels, ref, "L1.pm1.down",
                             "layer 1's second down (chunks 2 and 3)");
}

// The same on 32x64 PEs with chunks as wide as Compiler::settle_pm_chunks takes there for
// the 2B (CompileOptions::image_chunk_pes: tiles of 2,048 columns at split 2, the tower's 1536
// in one chunk, on row tiles of 72, the prefill's 3072 in chunks of 1024), packed and run as
// such, at 672 KiB. Against the chain, with the negative control.
TEST(ImageOcm, TinyWiderMlpChunksMatchTheChain) {
  static TinyBundle tiny("image_" + config_tiny_wider().name, config_tiny_wider());
  const auto [pixels, ref] = ocm_reference(config_tiny_wider(), *tiny.bundle, 9);
  sim::Config cfg = sim::Config::make("qc-u", {"pe_cols=64", "ocm_bytes=672KiB", "ddr_gbps=8"});
  CompileOptions opt = ocm_options();
  opt.image_gemm_rows = 32;
  opt.image_chunk_pes = 4096;
  Compiler c(config_tiny_wider(), cfg, opt);
  const CompiledProgram prog = c.image_program(kOcmShape);
  EXPECT_NE(prog.plan.find("|72 (qkv|MLP phases; the MLP in chunks of 1536 with fp32"), std::string::npos)
      << prog.plan;
  EXPECT_NE(prog.plan.find("prefill 48|48 (qkv|MLP phases; the attention reads q, k and v in the q|k|v rows; "
                           "the MLP in chunks of 1024 with fp32"), std::string::npos)
      << prog.plan;
  expect_matches_chain(c, prog, kOcmShape, tiny.bundle.get(), pixels, ref,
                       "tiny (wider MLPs) image program, 32x64, 672 KiB, 8 GB/s, wide chunks");
}

// The resident plan's tower MLP over every row in chunks (fc1 and GELU a chunk of fc1's
// columns at a time, fc2's chunk into fp32 partial sums in LRM: the 2B's where its row chunks
// would wait on the weights, e.g. 64x64 at 4 MiB and 64 GB/s), held by the knob
// CompileOptions::image_tower_chunks (the tiny model's tower rows always fit one pass): a
// 16x16 image (256 patches, the tower's 1536 in two chunks of 768: as wide as two fc1 tiles at
// split 2, 1024, allows: CompiledProgram::tower_chunk_pes) and a 96-token prompt at
// 2 MiB. Against the chain; negative control: one block's fc2 chunk 1 zeroed in DDR (the
// resident plan reads no keys back from the cache, so the slot control does not apply).
TEST(ImageOcm, TinyResidentTowerMlpInChunksMatchesTheChain) {
  static TinyBundle tiny("image_" + config_tiny_wider().name, config_tiny_wider());
  const ImageShape shape{16, 16, 96, 5};
  const auto [pixels, ref] = ocm_reference(config_tiny_wider(), *tiny.bundle, 17, shape);
  sim::Config cfg = sim::Config::make("qc-u", {"ocm_bytes=2MiB"});
  CompileOptions opt = ocm_options(256);
  opt.image_tower_chunks = true;
  Compiler c(config_tiny_wider(), cfg, opt);
  const CompiledProgram prog = c.image_program(shape);
  EXPECT_TRUE(prog.plan.starts_with("resident: tower MLP over every row in chunks of 768 (fp32 partial sums in LRM)"))
      << prog.plan;
  expect_matches_chain(c, prog, shape, tiny.bundle.get(), pixels, ref,
                       "tiny (wider MLPs) image program, 256 patches, 96 tokens, 2 MiB, the resident tower's MLP in "
                       "chunks",
                       false);
  expect_zeroed_weight_fails(c, prog, shape, tiny.bundle.get(), pixels, ref, "V1.pm1.fc2",
                             "tower block 1's fc2 chunk 1");
}

// The fc1 GEMMs' GELU in their epilogues (GemmArgs::act: the 2B's tower and mergers on wide
// arrays; the tiny models' GEMMs are too narrow for the cost model to fuse them, so the knob
// CompileOptions::image_gelu_fused forces it): the tower blocks (tanh) and the mergers (erf),
// resident and streamed (row tiles of 64: the tower's and the mergers' fc1 a tile at a time).
// The same logits, bit for bit,
// as the program with the element-wise calls, and fewer kernel calls. Against the chain;
// negative control: a merger's fc1 zeroed in DDR.
TEST(ImageOcm, TinyGeluInTheGemmEpilogueGivesTheSameLogits) {
  const auto [pixels, ref] = ocm_reference(config_tiny_wide(), *wide_bundle().bundle, 29);
  for (uint32_t tile_rows : {0u, 64u}) {
    std::vector<float> logits[2];
    size_t calls[2];
    for (bool fused : {false, true}) {
      CompileOptions opt = ocm_options();
      opt.image_gelu_fused = fused;
      opt.image_tile_rows = tile_rows;
      Compiler c(config_tiny_wide(), sim::Config::make("qc-u", {}), opt);
      const CompiledProgram prog = c.image_program(kOcmShape);
      EXPECT_TRUE(prog.plan.starts_with(tile_rows ? "streamed" : "resident")) << prog.plan;
      calls[fused] = prog.calls.size();
      logits[fused] = run_image(c, prog, kOcmShape, wide_bundle().bundle.get(), pixels, false).logits;
      if (!fused) continue;
      for (const KernelCall& k : prog.calls) EXPECT_EQ(k.mark.find(".gelu"), std::string::npos) << k.mark;
      const std::string what = std::string("tiny (wide) image program, GELU fused, ") + (tile_rows ? "streamed" : "resident");
      expect_matches_chain(c, prog, kOcmShape, wide_bundle().bundle.get(), pixels, ref, what, false);
      expect_zeroed_weight_fails(c, prog, kOcmShape, wide_bundle().bundle.get(), pixels, ref, "M0.fc1",
                                 "merger 0's fc1");
    }
    EXPECT_LT(calls[1], calls[0]);
    ASSERT_EQ(logits[0].size(), logits[1].size());
    EXPECT_EQ(std::memcmp(logits[0].data(), logits[1].data(), logits[0].size() * 4), 0);
  }
}

// The prefill's SiLU in its gate|up GEMMs' epilogues (GemmAct::silu_pairs over gate|up
// packings with gate and up rows interleaved: the 2B on 32x64; forced here by the knob
// CompileOptions::image_silu_fused), resident and streamed (row tiles of 64: the phases' gate|up
// chunk by chunk). The same logits, bit for bit, as the program with the SiLU calls. Against
// the chain; negative control: a layer's gate|up chunk zeroed in DDR.
TEST(ImageOcm, TinySiluInTheGemmEpilogueGivesTheSameLogits) {
  const auto [pixels, ref] = ocm_reference(config_tiny_wide(), *wide_bundle().bundle, 31);
  for (uint32_t tile_rows : {0u, 64u}) {
    std::vector<float> logits[2];
    for (bool fused : {false, true}) {
      CompileOptions opt = ocm_options();
      opt.image_silu_fused = fused;
      opt.image_tile_rows = tile_rows;
      Compiler c(config_tiny_wide(), sim::Config::make("qc-u", {}), opt);
      const CompiledProgram prog = c.image_program(kOcmShape);
      EXPECT_TRUE(prog.plan.starts_with(tile_rows ? "streamed" : "resident")) << prog.plan;
      logits[fused] = run_image(c, prog, kOcmShape, wide_bundle().bundle.get(), pixels, false).logits;
      size_t silu = 0;
      for (const KernelCall& k : prog.calls) silu += k.mark.find(".silu_mul") != std::string::npos;
      if (!fused) {
        EXPECT_GT(silu, 0u);
        continue;
      }
      EXPECT_EQ(silu, 0u);
      const std::string what = std::string("tiny (wide) image program, SiLU fused, ") + (tile_rows ? "streamed" : "resident");
      expect_matches_chain(c, prog, kOcmShape, wide_bundle().bundle.get(), pixels, ref, what, false);
      expect_zeroed_weight_fails(c, prog, kOcmShape, wide_bundle().bundle.get(), pixels, ref, "L1.gu0.gemm",
                                 "layer 1's gate|up chunk 0");
    }
    ASSERT_EQ(logits[0].size(), logits[1].size());
    EXPECT_EQ(std::memcmp(logits[0].data(), logits[1].data(), logits[0].size() * 4), 0);
  }
}

// Layer 1's gate|up calls with the SiLU in their epilogue, and the prefill's SiLU calls.
std::pair<size_t, size_t> fused_gate_ups(const CompiledProgram& prog) {
  size_t gate_ups = 0, silus = 0;
  for (const KernelCall& k : prog.calls) {
    gate_ups += k.mark.starts_with("P1.") && k.mark.ends_with(".gate_up_silu");
    silus += k.mark.starts_with("P") && k.mark.find(".silu_mul") != std::string::npos;
  }
  return {gate_ups, silus};
}

// The SiLU in the gate|up GEMMs of the streamed MLP over every row (its own chunk packings
// interleaved: Compiler::pm_gate_up_fused; the 2B on 32x64 and 64x64 at 2 MiB and 128 GB/s),
// forced by the knob on the tiny wider model's phases plan (32x64, 672 KiB, 16 GB/s: the chain's
// gate|up at split 1). Against the chain; negative control: a layer's gate|up chunk zeroed in DDR.
TEST(ImageOcm, TinySiluInTheMlpChunkChainMatchesTheChain) {
  static TinyBundle tiny("image_" + config_tiny_wider().name, config_tiny_wider());
  const auto [pixels, ref] = ocm_reference(config_tiny_wider(), *tiny.bundle, 41);
  sim::Config cfg = sim::Config::make("qc-u", {"pe_cols=64", "ocm_bytes=672KiB", "ddr_gbps=16"});
  CompileOptions opt = ocm_options();
  opt.image_gemm_rows = 32;
  opt.image_chunk_pes = 4096;
  opt.image_silu_fused = true;
  Compiler c(config_tiny_wider(), cfg, opt);
  const CompiledProgram prog = c.image_program(kOcmShape);
  EXPECT_NE(prog.plan.find("prefill 48|48 (qkv|MLP phases; the attention reads q, k and v in the q|k|v rows; "
                           "the MLP in chunks of"), std::string::npos) << prog.plan;
  const auto [gate_ups, silus] = fused_gate_ups(prog);
  EXPECT_GT(gate_ups, 0u);
  EXPECT_EQ(silus, 0u);
  expect_matches_chain(c, prog, kOcmShape, tiny.bundle.get(), pixels, ref,
                       "tiny (wider MLPs) image program, 32x64, 672 KiB, 16 GB/s, the SiLU in the chunk chain", false);
  expect_zeroed_weight_fails(c, prog, kOcmShape, tiny.bundle.get(), pixels, ref, "L1.pm0.gu",
                             "layer 1's gate|up chunk 0");
}


// The resident prefill's down GEMM in chunks beside its gate|up calls (Compiler::down_chunk_k:
// the 2B on 32x64, where the SiLU is fused and one chunk goes a call; here the tiny model with
// an MLP of 4,096 (4 chunks of 1,024) at 1 MiB and 1,024 GB/s (MAC-bound), the packings forced
// by a knob, the SiLU fused by a knob or a call
// after each gate|up call): down chunk c after gate|up calls 2c and 2c + 1, over their SiLU
// rows, into fp32 partial sums in LRM seeded with the residual, the last rounding residual + MLP
// into the residual stream (no mlp_residual call). Against the chain; negative control: a
// layer's down chunk zeroed in DDR.
TEST(ImageOcm, TinyDownInChunksBesideTheGateUpCallsMatchesTheChain) {
  ModelConfig m = config_tiny();
  m.name = "tiny_mlp4096";
  m.text.intermediate_size = 4096;
  static TinyBundle tiny("image_" + m.name, m);
  const auto [pixels, ref] = ocm_reference(m, *tiny.bundle, 37);
  for (bool fused : {true, false}) {
    SCOPED_TRACE(fused ? "SiLU fused" : "SiLU calls");
    CompileOptions opt = ocm_options();
    opt.image_silu_fused = fused;
    opt.image_down_chunks = true;
    Compiler c(m, sim::Config::make("qc-u", {"ocm_bytes=1MiB", "ddr_gbps=1024"}), opt);
    const CompiledProgram prog = c.image_program(kOcmShape);
    EXPECT_NE(prog.plan.find("gate|up chunks per call 1, the down in chunks of 2048"), std::string::npos) << prog.plan;
    size_t downs = 0, residuals = 0, silus = 0;
    for (const KernelCall& k : prog.calls) {
      downs += k.mark.starts_with("P1.") && k.mark.ends_with(".down");
      residuals += k.mark.starts_with("P") && k.mark.ends_with(".mlp_residual");
      silus += k.mark.starts_with("P1.") && k.mark.ends_with(".silu_mul");
    }
    EXPECT_EQ(downs, 2u);
    EXPECT_EQ(residuals, 0u);
    EXPECT_EQ(silus, fused ? 0u : 4u);
    expect_matches_chain(c, prog, kOcmShape, tiny.bundle.get(), pixels, ref,
                         "tiny (MLP 4096) image program, 1 MiB, the down in chunks beside the gate|up calls", false);
    expect_zeroed_weight_fails(c, prog, kOcmShape, tiny.bundle.get(), pixels, ref, "L1.dn1.gemm",
                               "layer 1's down chunk 1");
  }
}

// The knob where the gate|up chunks do not pair up (the 2B on 64x64 at 8 MiB: three of 2,048):
// there is no down chunk packing (down_chunk_k is 0), so the down runs whole; it divided by
// that 0 (SIGFPE) while laying the DDR out.
TEST(ImageOcm, DownChunksKnobWithAnOddChunkCountKeepsTheDownWhole) {
  CompileOptions opt;
  opt.image_down_chunks = true;
  Compiler c(config_2b(), sim::Config::make("qc-u", {"pe_rows=64", "pe_cols=64", "ocm_bytes=8MiB", "ddr_gbps=128"}),
             opt);
  const CompiledProgram prog = c.image_program(ImageShape{});
  EXPECT_EQ(prog.plan.find("the down in chunks"), std::string::npos) << prog.plan;
  EXPECT_FALSE(c.layout().has("L0.dn0.gemm"));
  EXPECT_TRUE(c.layout().has("L0.down.gemm"));
}

// Where the narrow gate|up chunks' resident plan takes one chunk a call (the 2B on 64x64 at 4
// MiB, 128 GB/s: six calls of 1,024 columns at split 2, each with its SiLU call, the down in
// chunks beside them), the chunks are laid as one (Compiler::plan_image_ddr): at split 1 its
// SiLU goes into the GEMM's epilogue, whose call needs no temporaries for the gate|up rows, so
// one call of every chunk fits (23.80 -> 23.01 M cycles). Before, the plan kept the six calls.
TEST(ImageOcm, GateUpAsOneFusedCallWhereItFitsWithoutTheTemporaries) {
  Compiler c(config_2b(), sim::Config::make("qc-u", {"pe_rows=64", "pe_cols=64", "ocm_bytes=4MiB", "ddr_gbps=128"}),
             CompileOptions{});
  const CompiledProgram prog = c.image_program(ImageShape{});
  EXPECT_TRUE(prog.plan.starts_with("resident: ")) << prog.plan;
  EXPECT_EQ(prog.plan.find("the down in chunks"), std::string::npos) << prog.plan;
  EXPECT_TRUE(c.layout().has("L0.gu0.gemm"));
  EXPECT_FALSE(c.layout().has("L0.gu1.gemm"));
  const auto [gate_ups, silus] = fused_gate_ups(prog);
  EXPECT_EQ(gate_ups, 1u);
  EXPECT_EQ(silus, 0u);
}

// The resident plan's rotary tables loaded a block (layer) at a time into its temporaries
// instead of their own region (the 2B on 64x64 at 4 MiB: the region's 128 KB let only one
// GEMM DMA channel fit; 39.84 -> 38.50 M cycles with two), forced by
// CompileOptions::image_rope_per_block: the tiny wide model at 1 MiB (the tables come in on
// the channel the GEMMs leave free) and at 8 MiB on 32x64 (on the last of the GEMMs' four, waited
// for before a layer's first prefetch: a wait drains the channel's queue); the prefill's go into
// the qkv / MLP region past the q|k|v rows at both, loaded right after the layer before's down.
// Against the chain; negative controls: the tower's tables zeroed in DDR, the prefill's.
TEST(ImageOcm, TinyRotaryTablesPerBlockMatchTheChain) {
  const auto [pixels, ref] = ocm_reference(config_tiny_wide(), *wide_bundle().bundle, 23);
  for (const auto& sets : {std::vector<std::string>{"ocm_bytes=1MiB"}, {"pe_cols=64", "ocm_bytes=8MiB"}}) {
    CompileOptions opt = ocm_options();
    opt.image_rope_per_block = true;
    Compiler c(config_tiny_wide(), sim::Config::make("qc-u", sets), opt);
    const CompiledProgram prog = c.image_program(kOcmShape);
    EXPECT_TRUE(prog.plan.starts_with("resident: ")) << prog.plan;
    EXPECT_NE(prog.plan.find("rotary tables a block at a time in the temporaries (the prefill's past its q|k|v rows)"),
              std::string::npos)
        << prog.plan;
    expect_matches_chain(c, prog, kOcmShape, wide_bundle().bundle.get(), pixels, ref,
                         "tiny (wide) image program, rotary tables a block at a time, " + sets.back(), false);
    expect_zeroed_weight_fails(c, prog, kOcmShape, wide_bundle().bundle.get(), pixels, ref, "const.vrope",
                               "the tower's rotary tables");
    expect_zeroed_weight_fails(c, prog, kOcmShape, wide_bundle().bundle.get(), pixels, ref, "in.trope",
                               "the prefill's rotary tables");
  }
}

// The tower's MLP in one pass with fc1's rows [N][Iv] run on from the qkv / MLP region into the
// temporaries after it (Resident::fc1_span; fc2's output in the normed rows): the 2B at qc-u,
// whose region holds the prefill's 1.5 MB where fc1's rows take 2 MB. The tiny model with a
// tower MLP of 2,048 (its rows, 576 KiB, above the patches' 432 KiB) at 840 KiB (the tower
// resident alone, the prefill streamed), 952 KiB (the rotary tables a block at a time in the
// temporaries too) and 1,112 KiB (resident; also with a mixed-precision bundle). Against the
// chain; negative controls: the last quarter of block 1's fc1 (its last columns) zeroed; in the
// mixed run, block 1's fc2.
TEST(ImageOcm, TinyTowerFc1RowsOnIntoTheTemporariesMatchTheChain) {
  ModelConfig m = config_tiny_wider();
  m.name = "tiny_fc1";
  m.vision.intermediate_size = 2048;
  static TinyBundle tiny("image_" + m.name, m);
  const auto [pixels, ref] = ocm_reference(m, *tiny.bundle, 29);
  for (const char* ocm : {"840KiB", "952KiB", "1112KiB"}) {
    Compiler c(m, sim::Config::make("qc-u", {fmt::format("ocm_bytes={}", ocm)}), ocm_options());
    const CompiledProgram prog = c.image_program(kOcmShape);
    EXPECT_NE(prog.plan.find("tower MLP rows per chunk 144 (its fc1 rows on into the temporaries)"), std::string::npos)
        << prog.plan;
    expect_matches_chain(c, prog, kOcmShape, tiny.bundle.get(), pixels, ref,
                         fmt::format("tiny (tower MLP 2048) image program, fc1's rows on into the temporaries, {}", ocm),
                         false);
    const uint64_t bytes = c.layout().at("V1.fc1").bytes;
    expect_zeroed_weight_fails(c, prog, kOcmShape, tiny.bundle.get(), pixels, ref, "V1.fc1",
                               "last quarter of block 1's fc1", bytes / 4 * 3);
  }
  // Mixed precision (--fp16-channels): fc2's corrections read fc1's rows in both regions (an
  // outlier input channel of block 1's fc2) and add into the normed rows.
  QuantOptions qo;
  qo.fp16_channels = 3;
  static TinyBundle mixed("image_" + m.name + "_mixed", m, qo,
                          {{"model.visual.blocks.1.mlp.linear_fc2.weight", -1, 5, 30.0f}});
  ASSERT_FALSE(mixed.bundle->fp16_tensors().empty());
  const auto [mpixels, mref] = ocm_reference(m, *mixed.bundle, 29);
  CompileOptions opt = ocm_options();
  opt.fp16_channels = true;
  Compiler c(m, sim::Config::make("qc-u", {"ocm_bytes=1112KiB"}), opt);
  const CompiledProgram prog = c.image_program(kOcmShape);
  EXPECT_NE(prog.plan.find("(its fc1 rows on into the temporaries)"), std::string::npos) << prog.plan;
  expect_matches_chain(c, prog, kOcmShape, mixed.bundle.get(), mpixels, mref,
                       "tiny (tower MLP 2048), mixed precision, fc1's rows on into the temporaries, 1112 KiB", false);
  expect_zeroed_weight_fails(c, prog, kOcmShape, mixed.bundle.get(), mpixels, mref, "V1.fc2", "block 1's fc2");
}

// The MLP over every row with its first and last parts in row tiles (Streamed::ppt, vpt: the
// 2B at 1 MiB, where the normed rows and the up output of every row fit but not the attention
// rows and residual too; forced here by CompileOptions::image_part_rows): the tiny wider model
// with a 160-token prompt at 512 KiB, parts in tiles of 48 rows (the tower's 256 rows in 6,
// the prefill's 160 in 4, the image rows cut by a boundary: their DeepStack rows added per
// tile; the tower's head groups store their attention rows, each tile loads its own).
// Against the chain (measured: cosine 0.9999984); negative control: the keys read from the
// wrong slot (0.983).
TEST(ImageOcm, TinyMlpPartsInRowTilesMatchTheChain) {
  static TinyBundle tiny("image_" + config_tiny_wider().name, config_tiny_wider());
  const ImageShape shape{16, 16, 160, 5};
  const auto [pixels, ref] = ocm_reference(config_tiny_wider(), *tiny.bundle, 13, shape);
  sim::Config cfg = sim::Config::make("qc-u", {"ocm_bytes=512KiB", "ddr_gbps=8"});
  CompileOptions opt = ocm_options(256);
  opt.image_part_rows = 48;
  Compiler c(config_tiny_wider(), cfg, opt);
  const CompiledProgram prog = c.image_program(shape);
  SCOPED_TRACE(prog.plan);
  EXPECT_NE(prog.plan.find("|256 (qkv|MLP phases; the MLP in chunks of 512 with fp32 partial sums in LRM, its out "
                           "GEMM and residuals in tiles of 48; q|k|v 2 heads at a time beside the attention)"),
            std::string::npos);
  EXPECT_NE(prog.plan.find("prefill 160|160 (qkv|MLP phases; the attention reads q, k and v in the q|k|v rows; "
                           "the MLP in chunks of 512 with fp32 partial sums in LRM, "
                           "its out GEMM and residuals in tiles of 48)"),
            std::string::npos);
  expect_matches_chain(c, prog, shape, tiny.bundle.get(), pixels, ref,
                       "tiny (wider MLPs) image program, 160 tokens, MLP parts in row tiles, 512 KiB, 8 GB/s");
}

// The streamed prefill's MLP over every row with its down in column groups (Streamed::pg: the 2B
// on 16x16 at 1 MiB, where one group's LRM sums of every row fit and the whole width's do not;
// forced here by CompileOptions::image_down_groups): the tiny model on 8x8 PEs (64-column tiles)
// with a 256-token prompt, the down in 2 groups of 64 columns (and the mergers' fc2, forced into
// chunks); a variant with a 256-wide text stream in 4 groups, and in 2 of 64 and 192 columns
// (ColumnGroups::first, CompileOptions::image_down_first: the 2B on 16x16 at 1 MiB, 768 and
// 1,280). The first group's SiLU rows go to DDR and every later group reads them back, its sums
// seeded with its residual columns (the variant's q|k|v phase in column groups too, its layer
// input the MLP phase's output kept in OCM: not loaded). Against the chain; negative control:
// the last group's tiles of a layer's down chunk zeroed in DDR (the first group's untouched).
TEST(ImageOcm, TinyDownInColumnGroupsMatchesTheChain) {
  ModelConfig wide = config_tiny();
  wide.name = "tiny_h256";
  wide.text.hidden_size = 256;
  wide.vision.out_hidden_size = 256;
  wide.text.intermediate_size = 768;  // (two chunks of 384: the later groups' order and loads)
  static TinyBundle tiny("image_tiny_groups", config_tiny()), h256("image_" + wide.name, wide);
  const ImageShape shape{16, 16, 256, 5};
  for (const auto& [m, bundle, groups, first] : {std::tuple{config_tiny(), tiny.bundle.get(), 2u, 0u},
                                                  {wide, h256.bundle.get(), 4u, 0u},
                                                  {wide, h256.bundle.get(), 2u, 64u}}) {
    SCOPED_TRACE(fmt::format("{}, {} groups, first {}", m.name, groups, first));
    const auto [pixels, ref] = ocm_reference(m, *bundle, 17, shape);
    CompileOptions opt = ocm_options(2048);  // (act.q holds the SiLU rows: 256 x 768)
    opt.image_down_groups = groups;
    opt.image_down_first = first;
    opt.image_merger_chunks = true;
    opt.image_gemm_rows = opt.image_tower_rows = 8;  // (every PE row: tiles of 64 columns)
    Compiler c(m, sim::Config::make("qc-u", {"pe_rows=8", "pe_cols=8", "ocm_bytes=640KiB", "ddr_gbps=8"}), opt);
    const CompiledProgram prog = c.image_program(shape);
    SCOPED_TRACE(prog.plan);
    EXPECT_NE(prog.plan.find("|256 (qkv|MLP phases"), std::string::npos);  // (the MLP phase over every row)
    const uint32_t W = m.text.hidden_size, last = first ? first : W / groups * (groups - 1);  // (the last group's first column)
    EXPECT_NE(prog.plan.find(fmt::format("fp32 partial sums in LRM, the down in {} column groups{}", groups,
                                         first ? fmt::format(" ({} columns, then {})", first, W - first) : "")),
              std::string::npos);
    EXPECT_NE(prog.plan.find(fmt::format("mergers 64 (in chunks of 512 with fp32 partial sums in LRM, fc2 in {} "
                                         "column groups)", groups)),
              std::string::npos);
    size_t later = 0, stores = 0;
    for (const KernelCall& k : prog.calls) {
      later += k.mark.starts_with(fmt::format("P1.g{}.mlp", groups - 1)) && k.mark.ends_with(".down");
      stores += k.mark.starts_with("P1.mlp") && k.mark.ends_with(".store_act");
    }
    EXPECT_GT(later, 0u);
    // (every down call's SiLU rows stored once and read by each later group, but the first group's
    // last, read where they are by the second group's first call: with two groups not stored)
    EXPECT_EQ(stores + (groups == 2), later);
    expect_matches_chain(c, prog, shape, bundle, pixels, ref,
                         fmt::format("{} image program, 256 tokens, the down in {} column groups (first {})", m.name,
                                     groups, first));
    const std::string down = "L1.pm0.down", fc2 = "Mf.pm0.fc2";
    expect_zeroed_weight_fails(c, prog, shape, bundle, pixels, ref, down, "layer 1's down chunk 0, its last group",
                               c.layout().at(down).bytes / W * last);
    expect_zeroed_weight_fails(c, prog, shape, bundle, pixels, ref, fc2, "the last merger's fc2 chunk 0, last group",
                               c.layout().at(fc2).bytes / groups * (groups - 1));
    if (m.name != wide.name) continue;
    // The MLP phase's output kept in OCM for the next layer's q|k|v phase (its rows normed in
    // place there): stored at the layer's start, not loaded.
    EXPECT_TRUE(has_call(prog, "P2.store_residual"));
    EXPECT_FALSE(has_call(prog, "P2.load"));
    // The wide variant's q|k|v phase in column groups too (Streamed::pqg, the cost model's choice:
    // its row tiles would read the weight twice): 64 columns (two heads) a call, q stored, k with
    // v written to the KV cache (the slot control above reads them back); negative control: the
    // last v group's tiles of layer 1's q|k|v zeroed.
    EXPECT_NE(prog.plan.find("prefill 256 (q|k|v 64 columns a call)|256"), std::string::npos);
    const std::string qkv = "L1.qkv.gemm";
    expect_zeroed_weight_fails(c, prog, shape, bundle, pixels, ref, qkv, "layer 1's last v group",
                               c.layout().at(qkv).bytes / 4 * 3);
  }
}

// The prefill's q|k|v phase in column groups (Streamed::pqg, forced by the test knob
// CompileOptions::image_qkv_groups where its rows take one tile) with the MLP phase over every
// row at once: the layer's output stays in the normed rows' buffer, where the next q|k|v phase
// normalises it in place, parked in LRM at the layer's start for the MLP's residual (not
// stored, not loaded). The tiny model on 8x8 at 432 KiB, 8 GB/s; against the chain, and the
// same logits with the residual through DDR (image_no_park: stored at the layer's start,
// waited for before the norm); negative control: layer 1's last v group zeroed.
TEST(ImageOcm, TinyQkvGroupsWithTheResidualParkedMatchTheChain) {
  static TinyBundle tiny("image_tiny_qkv_groups", config_tiny());
  const auto [pixels, ref] = ocm_reference(config_tiny(), *tiny.bundle, 21);
  CompileOptions opt = ocm_options(1024);  // (a planning shape that streams: the MLP chunk packings laid)
  opt.image_qkv_groups = true;
  opt.image_part_rows = 48;  // (the MLP phase over every row, its parts untiled)
  Compiler c(config_tiny(), sim::Config::make("qc-u", {"pe_rows=8", "pe_cols=8", "ocm_bytes=320KiB", "ddr_gbps=8"}),
             opt);
  const CompiledProgram prog = c.image_program(kOcmShape);
  EXPECT_NE(prog.plan.find("prefill 48 (q|k|v 64 columns a call)|48 (qkv|MLP phases"), std::string::npos) << prog.plan;
  for (const char* m : {"P2.park_residual", "P2.unpark_residual", "P2.kv0.k", "P2.q1.store_q"})
    EXPECT_TRUE(has_call(prog, m)) << m;
  for (const char* m : {"P2.load", "P2.store_residual", "P2.load_residual"}) EXPECT_FALSE(has_call(prog, m)) << m;
  expect_matches_chain(c, prog, kOcmShape, tiny.bundle.get(), pixels, ref,
                       "tiny image program, q|k|v in column groups, the residual parked");
  expect_parks_match_ddr(c, opt, prog, tiny.bundle.get(), pixels, "the kept residual", {"P2.store_residual"});
  const std::string qkv = "L1.qkv.gemm";
  expect_zeroed_weight_fails(c, prog, kOcmShape, tiny.bundle.get(), pixels, ref, qkv, "layer 1's last v group",
                             c.layout().at(qkv).bytes / 4 * 3);
}

// The tower's qkv phase in its other two forms at 512 KiB (the MLP over every row with the
// q|k|v by head groups is TinyMlpOverEveryRowMatchesTheChain's): by head groups (Streamed::vqg,
// 2 heads a group) with the tower's MLP in row tiles, which read the attention rows back from
// DDR (store_attn), on a 16x16 array at 8 GB/s; q, k and v in turn over every row
// (Streamed::vqa) at 32 GB/s (the MLP over every row beside them), through DDR and with k and
// v kept in OCM for the attention (Streamed::vkv: q alone stored and loaded by head groups, k
// and v read in place)
// (CompileOptions::image_tower_mlp_tiles, image_qkv_rows and image_qkv_buffers hold each form:
// with the row tiles' call start-ups counted the cost model takes the MLP over every row at
// 8 GB/s and the head groups at 32). The first also on one DMA channel (every copy, GEMM unit and attention
// staging queued on it; its prefill of one whole-layer tile never reads the KV cache back,
// so the slot control does not apply there). Each against the chain (logits cosine >= 0.9999, the same top-1),
// timing-only = functional. Negative control: the keys written from slot 3 and read from
// slot 0 fail the gate.
TEST(ImageOcm, TinyTowerQkvPhasesMatchTheChain) {
  static TinyBundle wider("image_" + config_tiny_wider().name, config_tiny_wider());
  struct Case {
    ModelConfig m;
    const QuantBundle* bundle;
    std::vector<std::string> sets;
    const char* plan;  // expected in the plan description
    bool control;      // the plan reads keys back from the KV cache (a prefill in phases)
    bool mlp_tiles = true;   // CompileOptions::image_tower_mlp_tiles (else the q, k, v knobs)
    uint32_t qkv_buffers = 0;  // CompileOptions::image_qkv_buffers (2: k and v through DDR too)
  };
  for (const Case& k : {Case{config_tiny_wide(), wide_bundle().bundle.get(), {"pe_rows=16", "pe_cols=16", "ddr_gbps=8"},
                             "tower 144 (block 0: 72)|144 (qkv|MLP phases; q|k|v 2 heads at a time beside the "
                             "attention)", true},
                        Case{config_tiny_wide(), wide_bundle().bundle.get(),
                             {"pe_rows=16", "pe_cols=16", "ddr_gbps=8", "dma_channels=1"},
                             "q|k|v 2 heads at a time beside the attention), mergers 36, prefill 48 (whole layers)",
                             false},
                        Case{config_tiny_wider(), wider.bundle.get(), {"ddr_gbps=32"},
                             "tower 144 (block 0: 72)|144 (qkv|MLP phases; the MLP in chunks of 512 with fp32 partial "
                             "sums in LRM; q, k, v in turn)", true, false, 2},
                        Case{config_tiny_wider(), wider.bundle.get(), {"ddr_gbps=32"},
                             "tower 144 (block 0: 72)|144 (qkv|MLP phases; the MLP in chunks of 512 with fp32 partial "
                             "sums in LRM; q, k, v in turn, k and v kept for the attention)", true, false}}) {
    const auto [pixels, ref] = ocm_reference(k.m, *k.bundle, 5);
    std::vector<std::string> sets = k.sets;
    sets.push_back("ocm_bytes=512KiB");
    sim::Config cfg = sim::Config::make("qc-u", sets);
    CompileOptions opt = ocm_options();
    // (The cost model's choices there: the MLP over every row beside the groups, the groups
    // beside the 144-row q, k, v; the knobs keep each form run.)
    opt.image_tower_mlp_tiles = k.mlp_tiles;
    if (!k.mlp_tiles) opt.image_qkv_rows = 144;
    opt.image_qkv_buffers = k.qkv_buffers;
    Compiler c(k.m, cfg, opt);
    const CompiledProgram prog = c.image_program(kOcmShape);
    SCOPED_TRACE(k.m.name + ": " + prog.plan);
    EXPECT_NE(prog.plan.find(k.plan), std::string::npos);
    expect_matches_chain(c, prog, kOcmShape, k.bundle, pixels, ref,
                         fmt::format("tiny ({}) image program, {}, 512 KiB", k.m.name, cfg.name()), k.control);
  }
}

// The prefill's MLP phase in row tiles (Streamed::pm, rpm < S: every chunk read once a tile):
// the wide tiny model with a 160-token prompt on 512 KiB at 8 GB/s, where its partial sums and
// chunk outputs for all rows do not fit: two tiles of 80 rows, the image's rows (60 to 95) cut
// by the tile boundary (each tile adds its own DeepStack rows). Against the chain (logits
// cosine >= 0.9999, the same top-1), timing-only = functional; negative control: the keys
// written from slot 3 and read from slot 0 fail the gate.
TEST(ImageOcm, TinyMlpInRowTilesMatchesTheChain) {
  const ImageShape shape{12, 12, 160, 60};
  const auto [pixels, ref] = ocm_reference(config_tiny_wide(), *wide_bundle().bundle, 11, shape);
  sim::Config cfg = sim::Config::make("qc-u", {"ocm_bytes=512KiB", "ddr_gbps=8"});
  CompileOptions opt = ocm_options(256);
  opt.image_ocm_sums = true;  // (in LRM they leave room for all 160 rows at once)
  Compiler c(config_tiny_wide(), cfg, opt);
  const CompiledProgram prog = c.image_program(shape);
  SCOPED_TRACE(prog.plan);
  EXPECT_NE(prog.plan.find("prefill 160|80 (qkv|MLP phases; the attention reads q, k and v in the q|k|v rows; "
                           "the MLP in chunks of 512 with fp32 partial sums in OCM)"),
            std::string::npos);
  expect_matches_chain(c, prog, shape, wide_bundle().bundle.get(), pixels, ref,
                       "tiny image program, 160 tokens, 512 KiB, 8 GB/s");
}

// The prefill's qkv phase, waited, with its rotary tables over the tile's rows after the q|k|v
// GEMM (where the four buffers do not fit: the 2B at 1 MiB): the tiny model with a 512-token
// prompt on 512 KiB at 8 GB/s in three phases, all 512 rows in one qkv tile. Against the chain
// (logits cosine >= 0.9999, the same top-1, timing-only = functional); negative control: the
// keys written from slot 3 and read from slot 0 fail the gate.
TEST(ImageOcm, TinyRopeOverTheQkvRowsMatchesTheChain) {
  const ImageShape shape{16, 16, 512, 4};
  const auto [pixels, ref] = ocm_reference(config_tiny(), *tiny_bundle().bundle, 17, shape);
  sim::Config cfg = sim::Config::make("qc-u", {"ocm_bytes=512KiB", "ddr_gbps=8"});
  CompileOptions opt = ocm_options(1024);
  opt.image_prefill = 1;  // three phases
  Compiler c(config_tiny(), cfg, opt);
  const CompiledProgram prog = c.image_program(shape);
  SCOPED_TRACE(prog.plan);
  EXPECT_NE(prog.plan.find("prefill 512|172 (qkv|MLP phases; cos, sin over the qkv rows; "
                           "the attention reads q, k and v in the q|k|v rows)"), std::string::npos);
  expect_matches_chain(c, prog, shape, tiny_bundle().bundle.get(), pixels, ref,
                       "tiny image program, 512 tokens, cos and sin over the qkv rows, 512 KiB, 8 GB/s");
}

// The prefill's MLP over every row at a cache offset (a conversation's later chunk): the wide
// tiny model's image program (48 rows, the image among them), then 48 text rows after those 48
// cached ones in the same session, at 512 KiB; the second run's logits against the chain's
// prefill of all 96 rows. Negative control: the second run writes its keys from slot 40
// (over the last cached rows) instead of 48.
TEST(ImageOcm, TinyMlpOverEveryRowAtACacheOffsetMatchesTheChain) {
  const std::vector<float> pixels = ocm_pixels(config_tiny_wide(), 13);
  sim::Config cfg = sim::Config::make("qc-u", {"ocm_bytes=512KiB"});
  const CompileOptions opt = ocm_options(128);
  Compiler c(config_tiny_wide(), cfg, opt);
  ImageShape s2;
  s2.vision = false;
  s2.seq_len = 48;
  s2.cache_offset = uint32_t(kOcmShape.seq_len);
  s2.image_rows = 0;
  const CompiledProgram p1 = c.image_program(kOcmShape), p2 = c.image_program(s2);
  std::vector<int> ids = prompt_ids(kOcmShape);
  for (int i = 0; i < s2.seq_len; ++i) ids.push_back(1000 + 37 * (i + kOcmShape.seq_len) % 5000);
  std::vector<std::array<int, 3>> pos;
  for (auto& q : mrope_positions(ids, {MergedGrid{kOcmShape.grid_h / 2, kOcmShape.grid_w / 2}}).pos)
    pos.push_back({q[0], q[1], q[2]});
  auto weights = bundle_weights(*wide_bundle().bundle);
  Chain chain(config_tiny_wide(), *weights);
  const std::vector<float> ref =
      chain.prefill(ids, {ImagePatches{1, kOcmShape.grid_h, kOcmShape.grid_w, pixels}});
  const size_t n1 = size_t(kOcmShape.seq_len);
  for (uint32_t slot : {uint32_t(n1), 40u}) {
    Session dev(c, false);
    dev.load_weights(*wide_bundle().bundle);
    dev.load_image_constants(*wide_bundle().bundle, kOcmShape);
    dev.write_prompt(std::span(ids).first(n1), std::span(pos).first(n1), pixels, 0);
    dev.run(p1);
    dev.write_prompt(std::span(ids).subspan(n1), std::span(pos).subspan(n1), {}, slot);
    dev.run(p2);
    const std::vector<float> logits = dev.logits();
    const double cs = cosine(logits, ref);
    std::printf("tiny chunk of 48 rows after 48 cached, 512 KiB%s: %s\n  logits cosine %.7f\n",
                slot == n1 ? "" : " (negative control: keys written from slot 40)", p2.plan.c_str(), cs);
    if (slot != n1) {
      EXPECT_LT(cs, 0.9999) << "keys written over the cached rows must fail the gate";
      continue;
    }
    EXPECT_NE(p2.plan.find("the MLP in chunks of 512 with fp32 partial sums in LRM"), std::string::npos) << p2.plan;
    EXPECT_GE(cs, 0.9999);
    EXPECT_EQ(argmax(logits), argmax(ref));
  }
}

// The prefill's gate|up calls where 1,536-column chunks would make split-2 GEMMs on the array
// (gate_up_chunk): the wide tiny model (MLP 3,072) on a 32x64 array with 8 MiB, resident, in
// chunks of 1,024 columns, 3 a call (6,144 columns: 3 whole tiles; a chunk count that is no power
// of two). Against the chain (logits cosine >= 0.9999, the same top-1, timing-only = functional);
// negative control: layer 0's last gate|up chunk zeroed in DDR fails the gate.
TEST(ImageOcm, TinyGateUpCallsOfWholeTilesOn32x64) {
  const auto [pixels, ref] = ocm_reference(config_tiny_wide(), *wide_bundle().bundle, 19);
  sim::Config cfg = sim::Config::make("qc-u", {"pe_cols=64", "ocm_bytes=8MiB"});
  Compiler c(config_tiny_wide(), cfg, ocm_options());
  const CompiledProgram prog = c.image_program(kOcmShape);
  EXPECT_NE(prog.plan.find("resident: tower MLP rows per chunk 144, gate|up chunks per call 3"), std::string::npos)
      << prog.plan;
  expect_matches_chain(c, prog, kOcmShape, wide_bundle().bundle.get(), pixels, ref,
                       "tiny (wide) image program, 32x64, 8 MiB", false);
  expect_zeroed_weight_fails(c, prog, kOcmShape, wide_bundle().bundle.get(), pixels, ref,
                             detail::layer_name(0, "gu2.gemm"), "layer 0's gate|up chunk 2");
}

// The same model on a 64x64 array (the GEMMs on every row): its gate|up chunks of 1,536 columns
// each (3,072 with up: a tile and a half at split 1 on 4,096 PEs) are packed on their own, so a
// call takes one of them (gate_up_chunk_split, DdrTensor::split): two back to back are not
// the packing of 6,144 columns (the plan took two a call, logits NaN).
TEST(ImageOcm, TinyGateUpChunksOn64x64MatchTheChain) {
  const auto [pixels, ref] = ocm_reference(config_tiny_wide(), *wide_bundle().bundle, 19);
  sim::Config cfg = sim::Config::make("qc-u", {"pe_rows=64", "pe_cols=64", "ocm_bytes=8MiB"});
  CompileOptions opt = ocm_options();
  opt.image_gemm_rows = 64;
  Compiler c(config_tiny_wide(), cfg, opt);
  const CompiledProgram prog = c.image_program(kOcmShape);
  EXPECT_NE(prog.plan.find("gate|up chunks per call 1"), std::string::npos) << prog.plan;
  expect_matches_chain(c, prog, kOcmShape, wide_bundle().bundle.get(), pixels, ref,
                       "tiny (wide) image program, 64x64, 8 MiB", false);
  expect_zeroed_weight_fails(c, prog, kOcmShape, wide_bundle().bundle.get(), pixels, ref,
                             detail::layer_name(0, "gu1.gemm"), "layer 0's gate|up chunk 1");
}

// A tiny model with a hidden size of 256 (K = 256: split 2 possible) and an MLP of 2,048 in
// chunks of 1,024 (2,048 columns with up: one whole tile at split 2 on 4,096 PEs).
ModelConfig config_h256_mlp2048() {
  ModelConfig m = config_tiny();
  m.name = "tiny_h256_mlp2048";
  m.text.hidden_size = 256;
  m.vision.out_hidden_size = 256;
  m.text.intermediate_size = 2048;
  return m;
}
TinyBundle& h256_mlp2048_bundle() {
  static TinyBundle tiny("image_tiny_h256_mlp2048", config_h256_mlp2048());
  return tiny;
}

// The model on 64x64, 8 MiB, its chunks as the compiler lays them or kept narrow (the knob):
// the plan's gate|up calls, against the chain; negative control: layer 1's chunk `zeroed`
// zeroed fails the gate.
void expect_h256_on_64x64(bool narrow, const char* calls, uint32_t zeroed) {
  const ModelConfig m = config_h256_mlp2048();
  TinyBundle& tiny = h256_mlp2048_bundle();
  const auto [pixels, ref] = ocm_reference(m, *tiny.bundle, 29);
  sim::Config cfg = sim::Config::make("qc-u", {"pe_rows=64", "pe_cols=64", "ocm_bytes=8MiB"});
  CompileOptions opt = ocm_options();
  opt.image_gemm_rows = 64;
  opt.image_narrow_gate_up = narrow;
  Compiler c(m, cfg, opt);
  EXPECT_EQ(c.layout().has(detail::layer_name(1, "gu1.gemm")), narrow);
  if (!narrow) {
    EXPECT_EQ(c.layout().at(detail::layer_name(1, "gu0.gemm")).split, 1u);
  }
  const CompiledProgram prog = c.image_program(kOcmShape);
  EXPECT_NE(prog.plan.find(calls), std::string::npos) << prog.plan;
  expect_matches_chain(c, prog, kOcmShape, tiny.bundle.get(), pixels, ref,
                       fmt::format("tiny (MLP 2,048) image program, 64x64, 8 MiB, {}", calls), false);
  const std::string w = fmt::format("gu{}.gemm", zeroed);
  expect_zeroed_weight_fails(c, prog, kOcmShape, tiny.bundle.get(), pixels, ref, detail::layer_name(1, w.c_str()),
                             fmt::format("layer 1's gate|up chunk {}", zeroed));
}

// As the 2B on 64x64 took them: the chunks two a call, the calls at split 2 (not the split 1
// that 4,096 columns take alone; the knob keeps the chunks).
TEST(ImageOcm, TinyGateUpCallsOfSplitTwoChunksOn64x64MatchTheChain) {
  expect_h256_on_64x64(true, "gate|up chunks per call 2", 1);
}

// Where one call takes every chunk and their columns together take another split, the chunks
// are laid as one (Compiler::gu_cw_): the same model, one chunk of 2,048 (4,096 columns: one
// whole tile at split 1), packed and read at split 1.
TEST(ImageOcm, OneGateUpChunkWhereACallTakesThemAll) { expect_h256_on_64x64(false, "gate|up chunks per call 1", 0); }

// The streamed tower's attention in one buffer set of 4 heads a call, where two sets of 2 heads
// a call left most of the PEs idle in every call (the 2B at 1 MiB, 128 GB/s: -0.44%; at 64x64,
// 2 MiB: -0.34%): the tiny model on 64x64 at 512 KiB, 128 GB/s, against the chain; negative
// control: block 1's proj weight zeroed fails the gate. (Two sets of 2 heads a call before: the
// plan string names them.)
TEST(ImageOcm, TinyAttentionInOneBufferSetOfMoreHeadsMatchesTheChain) {
  const ImageShape shape{};  // 256 patches, 128 tokens
  const auto [pixels, ref] = ocm_reference(config_tiny(), *tiny_bundle().bundle, 31, shape);
  const sim::Config cfg =
      sim::Config::make("qc-u", {"pe_rows=64", "pe_cols=64", "ocm_bytes=512KiB", "ddr_gbps=128"});
  Compiler c(config_tiny(), cfg, ocm_options(160));
  const CompiledProgram prog = c.image_program(shape);
  EXPECT_NE(prog.plan.find("kv heads per attention call tower 4, prefill 2 (1 tower buffer sets)"), std::string::npos)
      << prog.plan;
  expect_matches_chain(c, prog, shape, tiny_bundle().bundle.get(), pixels, ref,
                       "tiny image program, 64x64, 512 KiB, 128 GB/s, the tower's attention in one buffer set", false);
  expect_zeroed_weight_fails(c, prog, shape, tiny_bundle().bundle.get(), pixels, ref, "V1.proj", "block 1's proj");
}

// On 64x64 at 128 GB/s the tiny model's GEMMs are MAC-bound and o_proj (one tile, handed off
// whole) leaves gate|up's first tile to the DDR for longer than its MACs: gate|up's first units
// start right after q|k|v (GemmArgs::next_started; in the tower fc1's after q|k|v). Against the
// chain; negative control: layer 1's first gate|up chunk zeroed fails the gate.
TEST(ImageOcm, TinyUnitsStartedBeforeOProjMatchTheChain) {
  const auto [pixels, ref] = ocm_reference(config_tiny_wide(), *wide_bundle().bundle, 19);
  sim::Config cfg = sim::Config::make("qc-u", {"pe_rows=64", "pe_cols=64", "ocm_bytes=8MiB", "ddr_gbps=128"});
  Compiler c(config_tiny_wide(), cfg, ocm_options());
  const CompiledProgram prog = c.image_program(kOcmShape);
  expect_matches_chain(c, prog, kOcmShape, wide_bundle().bundle.get(), pixels, ref,
                       "tiny (wide) image program, 64x64, 8 MiB, 128 GB/s", false);
  expect_zeroed_weight_fails(c, prog, kOcmShape, wide_bundle().bundle.get(), pixels, ref,
                             detail::layer_name(1, "gu0.gemm"), "layer 1's gate|up chunk 0");
}

// The tower's q, k, v in turn (Streamed::vqa) in row tiles (the 2B at 1 MiB: tiles of 128
// through one output buffer, each store waited for; at 64 GB/s tiles of 88 through two):
// forced by CompileOptions::image_qkv_rows and image_qkv_buffers on the tiny wider model, 256
// patches and an 80-token prompt, 16x16 PEs, 512 KiB, 32 GB/s: tiles of 96, 96 and 64 rows,
// through two buffers and through one. Against the chain (logits cosine >= 0.9999, the same
// top-1, timing-only = functional); negative control: the keys written from slot 3 and read
// from slot 0 fail the gate.
TEST(ImageOcm, TinyTowerQkvInTurnInRowTilesMatchesTheChain) {
  static TinyBundle tiny("image_" + config_tiny_wider().name, config_tiny_wider());
  const ImageShape shape{16, 16, 80, 5};
  const auto [pixels, ref] = ocm_reference(config_tiny_wider(), *tiny.bundle, 23, shape);
  sim::Config cfg = sim::Config::make("qc-u", {"ocm_bytes=512KiB", "ddr_gbps=32", "pe_rows=16", "pe_cols=16"});
  for (uint32_t buffers : {2u, 1u}) {
    CompileOptions opt = ocm_options(128);
    opt.image_qkv_rows = 96;
    opt.image_qkv_buffers = buffers;
    Compiler c(config_tiny_wider(), cfg, opt);
    const CompiledProgram prog = c.image_program(shape);
    SCOPED_TRACE(prog.plan);
    EXPECT_NE(prog.plan.find(buffers == 2 ? "q, k, v in turn in tiles of 96)" : "q, k, v in turn in tiles of 96 through one buffer)"),
              std::string::npos);
    expect_matches_chain(c, prog, shape, tiny.bundle.get(), pixels, ref,
                         fmt::format("tiny (wider) image program, tower q, k, v in tiles of 96, {} buffer(s)", buffers));
  }
}

// The mergers' MLP in chunks over every merged row (Streamed::mpm: the 2B at 1 MiB, where its
// row tiles of 32 read every merger weight twice), forced by CompileOptions::image_merger_chunks
// on a tiny model with a wider tower (hidden 256: merger inputs of 1,024, two chunks of 512 with
// fp32 partial sums in LRM), 512 KiB. Against the chain (logits cosine >= 0.9999, the same top-1,
// timing-only = functional; the KV-slot control); negative control: the final merger's second
// fc2 chunk zeroed in DDR fails the gate.
ModelConfig config_tiny_wide_tower() {
  ModelConfig m = config_tiny_wide();
  m.name = "tiny_wide_tower";
  m.vision.hidden_size = 256;
  m.vision.intermediate_size = 512;
  return m;
}
TEST(ImageOcm, TinyMergersInChunksMatchTheChain) {
  static TinyBundle tiny("image_" + config_tiny_wide_tower().name, config_tiny_wide_tower());
  const auto [pixels, ref] = ocm_reference(config_tiny_wide_tower(), *tiny.bundle, 29);
  sim::Config cfg = sim::Config::make("qc-u", {"ocm_bytes=512KiB", "ddr_gbps=8"});
  CompileOptions opt = ocm_options();
  opt.image_merger_chunks = true;
  Compiler c(config_tiny_wide_tower(), cfg, opt);
  const CompiledProgram prog = c.image_program(kOcmShape);
  SCOPED_TRACE(prog.plan);
  EXPECT_NE(prog.plan.find("mergers 36 (in chunks of 512 with fp32 partial sums in LRM)"), std::string::npos);
  expect_matches_chain(c, prog, kOcmShape, tiny.bundle.get(), pixels, ref,
                       "tiny (wide tower) image program, mergers in chunks, 512 KiB");
  expect_zeroed_weight_fails(c, prog, kOcmShape, tiny.bundle.get(), pixels, ref, "Mf.pm1.fc2",
                             "the final merger's fc2 chunk 1");
}

// The tower's q, k, v in turn over every row in column groups (Streamed::vqc: the 2B on 16x16
// at 1 MiB, where two outputs of every row do not fit and row tiles would read the weights
// twice): the wide-tower tiny model (Dv 256, four heads of 64) on 8x8 PEs (64-column tiles) at
// 384 KiB, 128 tokens, each of q, k, v in four groups of one head a call, with its bias slice,
// rotated and stored to its columns of the q|k|v rows (held there by image_qkv_rows = every row
// and image_qkv_buffers = 2: k and v through DDR, not kept). Against the chain; negative
// control: the tiles of block 1's v after its first group zeroed in DDR (a group reading
// another's tiles would pass it).
TEST(ImageOcm, TinyTowerQkvInColumnGroupsMatchesTheChain) {
  static TinyBundle tiny("image_" + config_tiny_wide_tower().name, config_tiny_wide_tower());
  const ImageShape shape{16, 16, 128, 4};
  const auto [pixels, ref] = ocm_reference(config_tiny_wide_tower(), *tiny.bundle, 31, shape);
  CompileOptions opt = ocm_options(256);
  opt.image_qkv_rows = 256;
  opt.image_qkv_buffers = 2;
  opt.image_gemm_rows = opt.image_tower_rows = 8;
  Compiler c(config_tiny_wide_tower(),
             sim::Config::make("qc-u", {"pe_rows=8", "pe_cols=8", "ocm_bytes=384KiB", "ddr_gbps=8"}), opt);
  const CompiledProgram prog = c.image_program(shape);
  SCOPED_TRACE(prog.plan);
  EXPECT_NE(prog.plan.find("q, k, v in turn, 64 columns a call"), std::string::npos);
  EXPECT_TRUE(has_call(prog, "V1.v3")) << "block 1's v, its last column group";
  expect_matches_chain(c, prog, shape, tiny.bundle.get(), pixels, ref,
                       "tiny (wide tower) image program, the tower's q, k, v in column groups, 8x8, 384 KiB");
  const std::string v = "V1.pm2.qkv";
  expect_zeroed_weight_fails(c, prog, shape, tiny.bundle.get(), pixels, ref, v, "block 1's v, its groups after the first",
                             c.layout().at(v).bytes / 4);
}

// The streamed plan on one and two DMA channels (its kernels' copies and the embedding's
// three row gathers share them: the embedding used to start channels 1 and 2 whatever the
// machine had), against the chain. Negative controls (two channels, whose prefill's attention
// reads its keys in its q|k|v rows: on one, one tile of whole layers reads its own):
// expect_matches_chain's (the keys' cache slots, a zeroed weight).
TEST(ImageOcm, TinyStreamedOnOneAndTwoDmaChannels) {
  const auto [pixels, ref] = ocm_reference(config_tiny_wide(), *wide_bundle().bundle, 11);
  for (const char* ch : {"1", "2"}) {
    sim::Config cfg = sim::Config::make("qc-u", {"ocm_bytes=608KiB", fmt::format("dma_channels={}", ch)});
    Compiler c(config_tiny_wide(), cfg, ocm_options());
    const CompiledProgram prog = c.image_program(kOcmShape);
    EXPECT_TRUE(prog.plan.starts_with("streamed")) << prog.plan;
    expect_matches_chain(c, prog, kOcmShape, wide_bundle().bundle.get(), pixels, ref,
                         fmt::format("tiny image program, 608 KiB, {} DMA channel(s)", ch), ch[0] == '2');
  }
}

// The vision part on more PE rows than the prefill's (Compiler::image_in_parts; the knob
// CompileOptions::image_tower_rows): each part's weights packed for its own view, the parts
// meeting in DDR (the merged image rows and the DeepStack rows). 64x64 at 1 MiB, the tower and
// mergers on 64 rows, the prefill on 16: both parts resident; qc-u at 640 KiB, the tower on 32
// rows, the prefill on 8: both streamed. Against the chain (expect_matches_chain, with its
// KV-cache controls where the prefill streams); negative control: a zeroed tower weight, packed
// for the tower's view, must fail the gate.
TEST(ImageOcm, TinyTowerOnMoreRowsThanThePrefillMatchesTheChain) {
  const auto [pixels, ref] = ocm_reference(config_tiny_wide(), *wide_bundle().bundle, 13);
  struct Case {
    std::vector<std::string> machine;
    uint32_t gemm_rows, tower_rows;
    const char *tower_plan, *prefill_plan;
  };
  for (const Case& k : {Case{{"pe_rows=64", "pe_cols=64", "ocm_bytes=1MiB"}, 16, 64, "tower resident", "; prefill resident"},
                        Case{{"ocm_bytes=640KiB"}, 8, 32, "tower streamed", "; prefill streamed"}}) {
    CompileOptions opt = ocm_options();
    opt.image_gemm_rows = k.gemm_rows;
    opt.image_tower_rows = k.tower_rows;
    Compiler c(config_tiny_wide(), sim::Config::make("qc-u", k.machine), opt);
    const CompiledProgram prog = c.image_program(kOcmShape);
    SCOPED_TRACE(prog.plan);
    const uint32_t rows = uint32_t(c.config().pe_rows);
    EXPECT_NE(prog.plan.find(fmt::format("GEMMs on {} (tower and mergers) and {} (prefill) of the {} PE rows",
                                         k.tower_rows, k.gemm_rows, rows)),
              std::string::npos);
    EXPECT_TRUE(prog.plan.starts_with(k.tower_plan));
    EXPECT_NE(prog.plan.find(k.prefill_plan), std::string::npos);
    const std::string label = fmt::format("tiny image program in two parts (tower on {} rows, prefill on {} of {})",
                                          k.tower_rows, k.gemm_rows, rows);
    expect_matches_chain(c, prog, kOcmShape, wide_bundle().bundle.get(), pixels, ref, label,
                         std::string(k.prefill_plan) == "; prefill streamed");
    expect_zeroed_weight_fails(c, prog, kOcmShape, wide_bundle().bundle.get(), pixels, ref, "V0.proj",
                               "block 0's proj (the tower's view)");
  }
  // The knob's range, and mixed precision (one view).
  CompileOptions bad = ocm_options(), mixed = ocm_options();
  bad.image_tower_rows = 65;
  mixed.fp16_channels = true;
  mixed.image_gemm_rows = 16;
  mixed.image_tower_rows = 64;
  for (const auto& [o, says] : {std::pair{bad, "give --tower-rows 1 to 64"}, std::pair{mixed, "drop one of them"}}) {
    try {
      Compiler c(config_tiny_wide(), sim::Config::make("qc-u", {"pe_rows=64", "pe_cols=64"}), o);
      ADD_FAILURE() << "accepted: " << says;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  }
}

// The 2B image program, timing-only: 8 MiB spends the extra OCM (one tower MLP pass
// per block, one gate|up call per layer) and is faster than 4 MiB; 2 MiB streams the
// activations and is slower; 1 MiB compiles (docs/performance.md has its cycles).
TEST(ImageOcm, FullSizeCyclesChangeWithOcm) {
  ImageShape s{16, 16, 128, 4};
  std::map<std::string, uint64_t> cycles;
  for (const char* o : {"2MiB", "4MiB", "8MiB"}) {
    sim::Config cfg = sim::Config::make("qc-u", {fmt::format("ocm_bytes={}", o)});
    Compiler c(config_2b(), cfg);
    CompiledProgram prog = c.image_program(s);
    cycles[o] = run_image(c, prog, s, nullptr, {}, true).stats.total[sim::Stat::cycles];
    std::printf("2B image program, %s: %llu cycles (%s)\n", o, (unsigned long long)cycles[o], prog.plan.c_str());
  }
  EXPECT_LT(cycles["8MiB"], cycles["4MiB"]);
  EXPECT_GT(cycles["2MiB"], cycles["4MiB"]);
  Compiler c1(config_2b(), sim::Config::make("qc-u", {"ocm_bytes=1MiB"}));
  CompiledProgram p1 = c1.image_program(s);
  std::printf("2B image program, 1MiB: %s\n", p1.plan.c_str());
  EXPECT_TRUE(p1.plan.starts_with("streamed"));
}

// A conversation's prefill in resident chunks only where they are estimated below one streamed
// run (Compiler::prefill_chunk_rows; docs/chat.md, "Chunks or one run"): 1,016 tokens with a
// 2,048-slot cache. 32x64 at 2 MiB, 64 GB/s: 24 resident chunks of 43 rows ran 732.57 M cycles,
// the one run 237.58 M; 16x16 at 4 MiB, 32 GB/s: the chunks of 127 ran 1,521.74 M, one run
// 1,575.59 M. (Without the comparison the first returned 43.)
TEST(Image, PrefillChunksOnlyWhereEstimatedFaster) {
  CompileOptions o;
  o.max_seq = 2048;
  const Compiler wide(config_2b(), sim::Config::make("qc-u", {"pe_rows=32", "pe_cols=64", "ocm_bytes=2MiB",
                                                             "ddr_gbps=64"}), o);
  EXPECT_EQ(wide.prefill_chunk_rows(0, 1016), 1016u);
  EXPECT_EQ(wide.prefill_chunk_rows(0, 40), 40u);  // (resident as one run)
  const Compiler small(config_2b(), sim::Config::make("qc-u", {"pe_rows=16", "pe_cols=16"}), o);
  EXPECT_EQ(small.prefill_chunk_rows(0, 1016), 127u);
  o.prefill_chunk = 100;  // (gpnpu chat --chunk: as given)
  EXPECT_EQ(Compiler(config_2b(), sim::Config::make("qc-u", {}), o).prefill_chunk_rows(0, 1016), 100u);
}

// The image program's second packings (here the resident tower's MLP chunks, 32x64 at qc-u's 4
// MiB and 32 GB/s) are laid beside a KV cache of up to Compiler::max_context(..., packings = true)
// slots, --max-context auto; a larger cache, up to the most that fit without them, leaves them
// out (the tower's MLP then runs in one pass, and the plan says why). (qc-u's own tower runs in
// one pass since its fc1 rows may run on into the temporaries: no second packings there.)
TEST(ImageOcm, FullSizeMlpChunkPackingsGiveWayToALargerKvCache) {
  const sim::Config cfg = sim::Config::make("qc-u", {"pe_cols=64"});
  const CompileOptions base;
  const uint32_t packed = Compiler::max_context(config_2b(), cfg, base, true);
  const uint32_t fit = Compiler::max_context(config_2b(), cfg, base);
  EXPECT_EQ(packed, 9932u);
  EXPECT_EQ(fit, 10795u);
  auto compiled = [&](uint32_t slots) {
    CompileOptions o;
    o.max_seq = slots;
    Compiler c(config_2b(), cfg, o);
    return std::pair(c.layout().has("V0.pm0.fc1"), c.image_program(ImageShape{}).plan);
  };
  const auto [at_packed, plan_packed] = compiled(packed);
  EXPECT_TRUE(at_packed);
  EXPECT_TRUE(plan_packed.starts_with("resident: tower MLP over every row in chunks of 2048")) << plan_packed;
  const auto [past, plan_past] = compiled(packed + 1);
  EXPECT_FALSE(past);
  EXPECT_TRUE(plan_past.starts_with("resident: tower MLP rows per chunk 256 (its fc1 rows on into the temporaries)"))
      << plan_past;
  EXPECT_NE(plan_past.find("the MLP chunk packings left out so that the KV cache of 9933 tokens fits"), std::string::npos)
      << plan_past;
  EXPECT_FALSE(compiled(fit).first);
  EXPECT_THROW(compiled(fit + 1), Error);
}

// The 2B on 32x32 at 2 MiB: the streamed prefill's gate|up chunk (2,048 columns, two tiles at
// split 1) is packed at split 2 where a split-1 tile (1.1 MB) streams in slower than the down
// chunk before it runs the MACs of its last tile (32.8 K cycles): at 32 GB/s (the hand-off
// waited; 92.23 -> 90.87 M cycles, the 2B's gates pass there), not at 64 GB/s (pm_gate_up_split).
// The numerics of split-2 chunk calls: TinyGateUpCallsOfSplitTwoChunksOn64x64MatchTheChain.
TEST(ImageOcm, FullSizeGateUpTilesAtSplitTwoWhereTheDdrCannotKeepUp) {
  for (const auto& [gbps, split] : {std::pair{"ddr_gbps=32", 2u}, std::pair{"ddr_gbps=64", 0u}}) {
    const sim::Config cfg = sim::Config::make("qc-u", {"ocm_bytes=2MiB", gbps});
    Compiler c(config_2b(), cfg, {});
    ASSERT_TRUE(c.layout().has("L1.pm0.gu")) << gbps;
    EXPECT_EQ(c.layout().at("L1.pm0.gu").split, split) << gbps;
  }
}

// The 2B on 32x64 at 2 MiB, 32 GB/s, timing-only: the streamed plan takes MLP chunks as wide
// as the array (Compiler::settle_pm_chunks) and keeps the tower's k and v in OCM for the
// attention (Streamed::vkv); each runs faster than the form it replaced, forced by the knobs
// (512-wide chunks: CompileOptions::image_chunk_pes = 512; k and v through DDR:
// image_qkv_buffers = 1). (Their numerics: TinyWiderMlpChunksMatchTheChain and
// TinyTowerQkvPhasesMatchTheChain.)
TEST(ImageOcm, FullSizeWideArrayTakesWideChunksAndKeepsKeys) {
  const ImageShape s{};
  const sim::Config cfg = sim::Config::make("qc-u", {"pe_cols=64", "ocm_bytes=2MiB"});
  auto cycles = [&](const CompileOptions& o, const char* want) {
    Compiler c(config_2b(), cfg, o);
    const CompiledProgram prog = c.image_program(s);
    const uint64_t n = run_image(c, prog, s, nullptr, {}, true).stats.total[sim::Stat::cycles];
    std::printf("2B image program, 32x64, 2 MiB: %llu cycles (%s)\n", (unsigned long long)n, prog.plan.c_str());
    EXPECT_NE(prog.plan.find(want), std::string::npos) << prog.plan;
    return n;
  };
  CompileOptions narrow, through_ddr;
  narrow.image_chunk_pes = 512;
  through_ddr.image_qkv_buffers = 1;
  const uint64_t chosen = cycles({}, "the MLP in chunks of 2048 with fp32 partial sums in LRM; q, k, v in turn, k "
                                     "and v kept for the attention");
  EXPECT_LT(chosen, cycles(narrow, "the MLP in chunks of 512 with fp32 partial sums in LRM; q, k, v in turn, k"));
  EXPECT_LT(chosen, cycles(through_ddr, "the MLP in chunks of 2048 with fp32 partial sums in LRM; q, k, v in turn "
                                        "through one buffer"));
}

// The 2B on 32x64 at 2 MiB, 64 GB/s, timing-only: the tower's chunks take their own width
// (Compiler::settle_pm_chunks, pm_tower_npe_): 2,048 columns over every row, beside the
// prefill's 2,048-wide chunks (chosen again with the tower's kept), where the one width for both
// (forced: image_chunk_pes = 8,192) gave the tower 4,096-wide chunks in two row tiles of 128 that
// read every chunk twice.
TEST(ImageOcm, FullSizeWideArrayTakesTheTowersChunksOnTheirOwn) {
  const ImageShape s{};
  const sim::Config cfg = sim::Config::make("qc-u", {"pe_cols=64", "ocm_bytes=2MiB", "ddr_gbps=64"});
  auto cycles = [&](const CompileOptions& o, const char* tower, const char* prefill) {
    Compiler c(config_2b(), cfg, o);
    const CompiledProgram prog = c.image_program(s);
    const uint64_t n = run_image(c, prog, s, nullptr, {}, true).stats.total[sim::Stat::cycles];
    std::printf("2B image program, 32x64, 2 MiB, 64 GB/s: %llu cycles (%s)\n", (unsigned long long)n,
                prog.plan.c_str());
    EXPECT_NE(prog.plan.find(tower), std::string::npos) << prog.plan;
    EXPECT_NE(prog.plan.find(prefill), std::string::npos) << prog.plan;
    return n;
  };
  CompileOptions one_width;
  one_width.image_chunk_pes = 8192;
  const uint64_t chosen = cycles({}, "|256 (qkv|MLP phases; the MLP in chunks of 2048 with fp32 partial sums in LRM;",
                                 "the MLP in chunks of 2048 with fp32 partial sums in LRM)");
  EXPECT_LT(chosen, cycles(one_width, "|128 (qkv|MLP phases; the MLP in chunks of 4096 with fp32 partial sums in LRM;",
                           "the MLP in chunks of 2048 with fp32 partial sums in LRM)"));
}

// Too little OCM: a clear error naming the smallest workable ocm_bytes.
// (The GEMMs' view held to all 32 rows: on its own the compiler gives them fewer rows where no
// plan fits, and 400 KiB then runs on a part of them.)
TEST(ImageOcm, TooSmallOcmNamesTheLeastThatWorks) {
  CompileOptions all_rows;
  all_rows.image_gemm_rows = 32;
  std::string m;
  try {
    Compiler c(config_tiny(), sim::Config::make("qc-u", {"ocm_bytes=400KiB"}), all_rows);
    c.image_program(ImageShape{});
  } catch (const Error& e) {
    m = e.what();
  }
  std::printf("%s\n", m.c_str());
  EXPECT_NE(m.find("the image program (16x16 patches, 128 tokens) does not fit"), std::string::npos) << m;
  const size_t at = m.find("raise ocm_bytes to ");
  ASSERT_NE(at, std::string::npos) << m;
  const uint64_t least = std::stoull(m.substr(at + 19));
  EXPECT_GT(least, 409600u);
  // The named size works.
  Compiler c(config_tiny(), sim::Config::make("qc-u", {fmt::format("ocm_bytes={}", least)}), all_rows);
  EXPECT_TRUE(c.image_program(ImageShape{}).plan.starts_with("streamed"));
  const std::string fewer =
      Compiler(config_tiny(), sim::Config::make("qc-u", {"ocm_bytes=400KiB"})).image_program(ImageShape{}).plan;
  EXPECT_NE(fewer.find(" of the 32 PE rows"), std::string::npos) << fewer;
  // A conversation's prefill chunk (no tower) is named as it runs, not by a grid it does not run.
  ImageShape chunk;
  chunk.vision = false;
  chunk.seq_len = 42;
  chunk.cache_offset = 7;
  chunk.image_rows = 0;
  try {
    Compiler(config_tiny(), sim::Config::make("qc-u", {"ocm_bytes=256KiB"}), all_rows).image_program(chunk);
    ADD_FAILURE() << "a prefill run fitted 256 KiB";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("compiler: the prefill run (42 tokens after 7 cached) does not fit 262144 "
                                         "bytes of OCM"),
              std::string::npos)
        << e.what();
  }
}

// The 2B's default image program compiled for cfg with opt: its plan and timing-only cycles.
std::pair<std::string, uint64_t> plan_and_cycles(const sim::Config& cfg, const CompileOptions& opt = {}) {
  Compiler c(config_2b(), cfg, opt);
  const CompiledProgram prog = c.image_program(ImageShape{});
  return {prog.plan, run_image(c, prog, ImageShape{}, nullptr, {}, true).stats.total[sim::Stat::cycles]};
}
// The same with one knob of CompileOptions set.
template <class T>
std::pair<std::string, uint64_t> plan_and_cycles(const sim::Config& cfg, T CompileOptions::*knob, T value) {
  CompileOptions opt;
  opt.*knob = value;
  return plan_and_cycles(cfg, opt);
}

// The resident tower's MLP in chunks before its one pass where the finer estimate (a call's DDR:
// its tiles after the first and the next call's first tile) is 3% lower: 32x64 at 8 MiB, 32 GB/s,
// where one pass ran 64.33 M cycles against 4 MiB's chunks' 64.29 M (a monotone violation); now
// chunks at both, and 8 MiB no slower than 4 MiB. On 64x64 at 128 GB/s one pass stays.
TEST(Image, TowerChunksBeforeOnePassWhereTheFinerEstimateIsLower) {
  auto run = [&](const std::vector<std::string>& sets) { return plan_and_cycles(sim::Config::make("qc-u", sets)); };
  const auto [p8, c8] = run({"pe_cols=64", "ocm_bytes=8MiB", "ddr_gbps=32"});
  const auto [p4, c4] = run({"pe_cols=64", "ocm_bytes=4MiB", "ddr_gbps=32"});
  EXPECT_TRUE(p8.starts_with("resident: tower MLP over every row in chunks of 2048")) << p8;
  EXPECT_TRUE(p4.starts_with("resident: tower MLP over every row in chunks of 2048")) << p4;
  EXPECT_LE(c8, c4);
  std::printf("32x64, 32 GB/s: 8 MiB %llu cycles, 4 MiB %llu\n", (unsigned long long)c8, (unsigned long long)c4);
  const std::string big = Compiler(config_2b(), sim::Config::make("qc-u", {"pe_rows=64", "pe_cols=64", "ocm_bytes=8MiB",
                                                                            "ddr_gbps=128"}))
                              .image_program(ImageShape{})
                              .plan;
  EXPECT_TRUE(big.starts_with("resident: tower MLP rows per chunk 256")) << big;
  // 32x32 at 8 MiB, 16 GB/s: the chunks estimated 1.3% lower, short of the 3%; forced
  // (CompileOptions::image_tower_chunks) they run slower than the one pass it keeps.
  const sim::Config at16 = sim::Config::make("qc-u", {"ocm_bytes=8MiB", "ddr_gbps=16"});
  CompileOptions forced;
  forced.image_tower_chunks = true;
  const auto [p1, c1] = plan_and_cycles(at16);
  const auto [pc, cc] = plan_and_cycles(at16, forced);
  EXPECT_TRUE(p1.starts_with("resident: tower MLP rows per chunk 256")) << p1;
  EXPECT_TRUE(pc.starts_with("resident: tower MLP over every row in chunks")) << pc;
  EXPECT_LT(c1, cc);
  std::printf("32x32, 8 MiB, 16 GB/s: one pass %llu cycles, chunks forced %llu\n", (unsigned long long)c1,
              (unsigned long long)cc);
}

// The image GEMMs' view of the array (Compiler::gemm_view, settle_gemm_view): the rule takes all
// rows at qc-u and part of a 64x64 array on 2 MiB; CompileOptions::image_gemm_rows forces it (named in
// the plan), and more rows than the array has is an error naming the range.
TEST(Image, GemmViewRuleAndOverride) {
  EXPECT_EQ(Compiler(config_2b(), sim::Config::make("qc-u", {})).image_program(ImageShape{}).plan.find("GEMMs on"),
            std::string::npos);
  const sim::Config big = sim::Config::make("qc-u", {"pe_rows=64", "pe_cols=64", "ocm_bytes=2MiB", "ddr_gbps=16"});
  EXPECT_NE(Compiler(config_2b(), big).image_program(ImageShape{}).plan.find("GEMMs on 16 of the 64 PE rows"),
            std::string::npos);
  // At 64 GB/s the halving stops at 32 rows, and half as many again, 48, is estimated 3.7% below
  // (measured 42.53 -> 41.12 M cycles, the same DDR bytes); the vision part then takes all 64
  // (Compiler::settle_tower_view: 41.12 -> 37.31 M).
  const sim::Config at64 = sim::Config::make("qc-u", {"pe_rows=64", "pe_cols=64", "ocm_bytes=2MiB", "ddr_gbps=64"});
  const std::string p64 = Compiler(config_2b(), at64).image_program(ImageShape{}).plan;
  EXPECT_NE(p64.find("GEMMs on 64 (tower and mergers) and 48 (prefill) of the 64 PE rows"), std::string::npos) << p64;
  {
    // (timing-only: the parts against the one view, the tower's rows forced to the prefill's)
    auto cycles = [&](uint32_t rows) { return plan_and_cycles(at64, &CompileOptions::image_tower_rows, rows).second; };
    EXPECT_LT(cycles(0), cycles(48));
  }
  // A resident program whose view halves (8 MiB, 32 GB/s: 32 rows): its tower on every row (its
  // MACs on 32 rows took 1.11 x its weights' DDR time, 1.38 x as run), both parts resident;
  // measured 64.25 -> 62.09 M cycles (62.12 M with its MLP in chunks, as the plan now takes it).
  {
    const sim::Config at32 = sim::Config::make("qc-u", {"pe_rows=64", "pe_cols=64", "ocm_bytes=8MiB", "ddr_gbps=32"});
    auto run = [&](uint32_t rows) { return plan_and_cycles(at32, &CompileOptions::image_tower_rows, rows); };
    const auto [plan, cycles] = run(0);
    EXPECT_TRUE(plan.starts_with("tower resident")) << plan;
    EXPECT_NE(plan.find("; prefill resident"), std::string::npos) << plan;
    EXPECT_NE(plan.find("GEMMs on 64 (tower and mergers) and 32 (prefill) of the 64 PE rows"), std::string::npos)
        << plan;
    EXPECT_LT(cycles, run(32).second);
  }
  CompileOptions o;
  o.image_gemm_rows = 32;
  EXPECT_NE(Compiler(config_2b(), big, o).image_program(ImageShape{}).plan.find("GEMMs on 32 of the 64 PE rows"),
            std::string::npos);
  o.image_gemm_rows = 65;
  try {
    Compiler c(config_2b(), big, o);
    ADD_FAILURE() << "65 rows of 64 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("give --gemm-rows 1 to 64"), std::string::npos) << e.what();
  }
}

// The 2B image program on 64x64 at each point ("key=value ..."), at the base value of a key and
// at a larger one: the larger's timing-only cycles no more than the base's (+0.1%); plan_ok checks
// each plan (larger: the larger value's).
void more_takes_no_worse_plan(std::initializer_list<const char*> points, const char* base, const char* larger,
                              const std::function<void(const std::string& plan, bool larger)>& plan_ok) {
  for (const char* point : points) {
    std::vector<std::string> keys{"pe_rows=64", "pe_cols=64"};
    std::istringstream in(point);
    for (std::string kv; in >> kv;) keys.push_back(kv);
    uint64_t first = 0;
    for (const char* value : {base, larger}) {
      std::vector<std::string> k = keys;
      k.push_back(value);
      Compiler c(config_2b(), sim::Config::make("qc-u", k));
      const CompiledProgram prog = c.image_program(ImageShape{});
      SCOPED_TRACE(std::string(point) + ", " + value + ": " + prog.plan);
      plan_ok(prog.plan, value == larger);
      const uint64_t cycles = run_image(c, prog, ImageShape{}, nullptr, {}, true).stats.total[sim::Stat::cycles];
      if (!first) first = cycles;
      else EXPECT_LE(cycles, first + first / 1000);
    }
  }
}

// A MAC-heavy machine (half its rows would take over 1.5 x the weights' DDR time in MACs) kept
// its GEMMs on every row without comparing: 64x64 at 2 MiB, 80 GB/s streamed 43.51 M cycles where
// 64 GB/s, on 48 rows (the tower on 64), took 37.13 M. Now the program settled on 3/4 and 1/2 of
// the rows is taken where estimated 5% lower (Compiler::settle_fewer_rows): 33.78 M at 80 GB/s;
// at 128 GB/s every row stays (30.95 M, 48 rows 31.31 M).
TEST(Image, MacHeavyStreamedTriesFewerRows) {
  {
    // (the emitted program carries the estimate its plan was chosen by; a resident one none)
    const sim::Config at80 = sim::Config::make("qc-u", {"pe_rows=64", "pe_cols=64", "ocm_bytes=2MiB", "ddr_gbps=80"});
    const Compiler c(config_2b(), at80);
    ImageShape planned;
    planned.plan_only = true;
    EXPECT_EQ(c.image_program(ImageShape{}).est_cycles, c.image_program(planned).est_cycles);
    EXPECT_GT(c.image_program(planned).est_cycles, 0.0);
    EXPECT_EQ(Compiler(config_2b(), sim::Config::make("qc-u", {})).image_program(ImageShape{}).est_cycles, 0.0);
  }
  more_takes_no_worse_plan({"ocm_bytes=2MiB"}, "ddr_gbps=64", "ddr_gbps=80", [](const std::string& plan, bool) {
    EXPECT_NE(plan.find("GEMMs on 64 (tower and mergers) and 48 (prefill) of the 64 PE rows"), std::string::npos);
  });
  const sim::Config at128 = sim::Config::make("qc-u", {"pe_rows=64", "pe_cols=64", "ocm_bytes=2MiB", "ddr_gbps=128"});
  EXPECT_EQ(Compiler(config_2b(), at128).image_program(ImageShape{}).plan.find("GEMMs on"), std::string::npos);
}

// A streamed program on one view in two parts (Compiler::settle_parts: the vision part's plan
// with the OCM the prefill's GEMM buffers would take, the tower's MLP chunks as wide as half the
// view): 64x64 at 2 MiB, 128 GB/s reads fewer weight bytes in parts, so takes them (the tower's MLP
// over every row in chunks of 1,024, 8 kv heads an attention call), and runs faster than in one
// program (CompileOptions::image_parts = 2: 30.69 M cycles; 28.73 M); at 32 GB/s (the same bytes)
// one program stays.
TEST(Image, StreamedInPartsOnOneViewWhereFewerBytes) {
  const sim::Config at128 = sim::Config::make("qc-u", {"pe_rows=64", "pe_cols=64", "ocm_bytes=2MiB", "ddr_gbps=128"});
  auto compiled = [&](uint32_t parts) { return plan_and_cycles(at128, &CompileOptions::image_parts, parts); };
  const auto [plan, cycles] = compiled(0);
  EXPECT_TRUE(plan.starts_with("tower streamed: rows per tile 256 (block 0: 128)|256")) << plan;
  EXPECT_NE(plan.find("the MLP in chunks of 1024"), std::string::npos) << plan;
  EXPECT_NE(plan.find("kv heads per attention call 8"), std::string::npos) << plan;
  EXPECT_EQ(plan.find("GEMMs on"), std::string::npos) << plan;  // (one view)
  EXPECT_EQ(compiled(1), std::pair(plan, cycles));
  const auto [one_plan, one_cycles] = compiled(2);
  EXPECT_TRUE(one_plan.starts_with("streamed: ")) << one_plan;
  EXPECT_LT(cycles, one_cycles);
  const sim::Config at32 = sim::Config::make("qc-u", {"pe_rows=64", "pe_cols=64", "ocm_bytes=2MiB", "ddr_gbps=32"});
  EXPECT_TRUE(Compiler(config_2b(), at32).image_program(ImageShape{}).plan.starts_with("streamed: "));
}

// Two calls ahead (kernels::gemm_two_ahead): 64x64 at 8 MiB, 128 GB/s, each prefill layer's q|k|v
// has the DDR time past o_proj's tile for 8 of gate|up's first units, so takes them (the plan says
// so) and the program runs fewer cycles than without (CompileOptions::image_no_two_ahead:
// 22,528,845 -> 22,171,891); at 64 GB/s q|k|v has none to spare and the plan does not take it.
TEST(Image, TwoCallsAheadWhereQkvHasDdrTimeToSpare) {
  auto compiled = [&](const char* gbps, bool off) {
    return plan_and_cycles(sim::Config::make("qc-u", {"pe_rows=64", "pe_cols=64", "ocm_bytes=8MiB", gbps}),
                           &CompileOptions::image_no_two_ahead, off);
  };
  const char* kTwo = "q|k|v loads gate|up's first units (two calls ahead)";
  const auto [plan, cycles] = compiled("ddr_gbps=128", false);
  const auto [off_plan, off_cycles] = compiled("ddr_gbps=128", true);
  EXPECT_NE(plan.find(kTwo), std::string::npos) << plan;
  EXPECT_EQ(off_plan.find(kTwo), std::string::npos) << off_plan;
  EXPECT_LT(cycles, off_cycles);
  const sim::Config at64 = sim::Config::make("qc-u", {"pe_rows=64", "pe_cols=64", "ocm_bytes=8MiB", "ddr_gbps=64"});
  EXPECT_EQ(Compiler(config_2b(), at64).image_program(ImageShape{}).plan.find(kTwo), std::string::npos);
}

// Two calls ahead against the chain: the tiny tower with a text model of the 2B's layer shapes at
// half the width (hidden 1024, 8 q and 4 kv heads of 128, MLP 3072; 4 layers), on qc-u's array at
// 128 GB/s, resident: each layer's q|k|v takes 4 of gate|up's first units into LRM beside o_proj's
// tile (the layout of compiler_image.cpp: the down at 0, q|k|v above it, o_proj at 1,024, gate|up
// at the top), o_proj the rest; the last layer too (its o_proj and MLP on the head's row alone),
// and the final merger hands layer 0's q|k|v off at the layout's place. Logits cosine >= 0.9999,
// the same top-1, timing-only = functional cycles; negative controls: the codes of layer 1's or of
// the last layer's gate|up units 1 to 3 (of those q|k|v takes) zeroed fail the gate.
ModelConfig config_tiny_mid() {
  ModelConfig m = config_tiny();
  m.name = "tiny_mid";
  m.vision.out_hidden_size = 1024;
  TextConfig& t = m.text;
  t.hidden_size = 1024;
  t.num_attention_heads = 8;
  t.num_key_value_heads = 4;
  t.head_dim = 128;
  t.intermediate_size = 3072;
  t.num_hidden_layers = 4;
  t.mrope_section = {24, 20, 20};
  m.validate("config_tiny_mid");
  return m;
}
TEST(ImageOcm, TwoCallsAheadMatchesTheChain) {
  static TinyBundle mid("image_" + config_tiny_mid().name, config_tiny_mid());
  const auto [pixels, ref] = ocm_reference(config_tiny_mid(), *mid.bundle, 41);
  const sim::Config cfg = sim::Config::make("qc-u", {"ddr_gbps=128"});
  Compiler c(config_tiny_mid(), cfg, ocm_options());
  const CompiledProgram prog = c.image_program(kOcmShape);
  EXPECT_TRUE(prog.plan.starts_with("resident: ")) << prog.plan;
  EXPECT_NE(prog.plan.find("q|k|v loads gate|up's first units (two calls ahead)"), std::string::npos) << prog.plan;
  expect_matches_chain(c, prog, kOcmShape, mid.bundle.get(), pixels, ref,
                       "tiny tower, 1024-wide text, qc-u at 128 GB/s, two calls ahead", false);
  {  // (the cycles without it, for docs/performance.md: the plan's choice is not asserted here)
    CompileOptions off = ocm_options();
    off.image_no_two_ahead = true;
    const Compiler c_off(config_tiny_mid(), cfg, off);
    std::printf("without two calls ahead: %llu cycles\n",
                (unsigned long long)run_image(c_off, c_off.image_program(kOcmShape), kOcmShape, nullptr, {}, true)
                    .stats.total[sim::Stat::cycles]);
  }
  const kernels::GemmPlan gu = kernels::plan_gemm(cfg, 0, 2 * 3072, 1024);
  expect_zeroed_weight_fails(c, prog, kOcmShape, mid.bundle.get(), pixels, ref, "L1.gu0.gemm",
                             "the codes of layer 1's gate|up units 1-3, taken two calls ahead",
                             gu.unit_offset(1, false), gu.unit_offset(4, false));
  expect_zeroed_weight_fails(c, prog, kOcmShape, mid.bundle.get(), pixels, ref, "L3.gu0.gemm",
                             "the codes of the last layer's gate|up units 1-3, taken two calls ahead",
                             gu.unit_offset(1, false), gu.unit_offset(4, false));
}

// The LM head's chunks parked in free OCM (GemvArgs::park_chunks): copied by the tower's blocks,
// and into the DeepStack rows' region by the layers after the last DeepStack one, a chunk each
// (16x16 at 1024 GB/s, where a tower block's weights take the DDR a fraction of its MACs' time;
// 20x20 patches, so that the DeepStack rows' region holds a chunk; 2 MiB, so that the tower's
// share is 2 chunks). Against the chain, and the same logits bit for bit as the program compiled
// without the park (CompileOptions::image_no_park). Negative control: the first quarter of the
// head's weight in DDR zeroed under the parked program makes its logits differ.
TEST(ImageOcm, TinyLmHeadParkedInFreeOcmMatchesTheChain) {
  const ImageShape shape{20, 20, 128, 5};
  const auto [pixels, ref] = ocm_reference(config_tiny(), *tiny_bundle().bundle, 43, shape);
  const sim::Config cfg = sim::Config::make("qc-u", {"pe_rows=16", "pe_cols=16", "ocm_bytes=2MiB", "ddr_gbps=1024"});
  CompileOptions opt = ocm_options(160);
  opt.max_patches = 400;
  Compiler c(config_tiny(), cfg, opt);
  const CompiledProgram prog = c.image_program(shape);
  EXPECT_NE(prog.plan.find("LM head: 3 chunks parked in free OCM"), std::string::npos) << prog.plan;
  const int first_after = int(config_tiny().vision.deepstack_visual_indexes.size());
  EXPECT_TRUE(has_call(prog, "V1.park_head")) << "the tower's copies";
  EXPECT_TRUE(has_call(prog, fmt::format("P{}.park_head", first_after))) << "the DeepStack rows' region's copy";
  expect_matches_chain(c, prog, shape, tiny_bundle().bundle.get(), pixels, ref,
                       "tiny, 16x16 at 1024 GB/s, the LM head parked", false);
  CompileOptions off = opt;
  off.image_no_park = true;
  const Compiler c_off(config_tiny(), cfg, off);
  const CompiledProgram unparked = c_off.image_program(shape);
  EXPECT_EQ(unparked.plan.find("chunks parked"), std::string::npos) << unparked.plan;
  const ImageRun a = run_image(c, prog, shape, tiny_bundle().bundle.get(), pixels, false);
  const ImageRun b = run_image(c_off, unparked, shape, tiny_bundle().bundle.get(), pixels, false);
  EXPECT_EQ(a.logits, b.logits);
  std::printf("parked %llu cycles, unparked %llu\n", (unsigned long long)a.stats.total[sim::Stat::cycles],
              (unsigned long long)b.stats.total[sim::Stat::cycles]);
  const DdrTensor& w = c.layout().at("embed");
  const std::vector<uint8_t> zeros(w.bytes / 4, 0);
  const ImageRun bad = run_image(c, prog, shape, tiny_bundle().bundle.get(), pixels, false, 0,
                                 [&](Session& dev) { dev.write_ddr(w.offset, zeros.data(), zeros.size()); });
  EXPECT_NE(bad.logits, b.logits) << "negative control: the head's weight zeroed in part";
}

// The tiny model's program in two parts on one view (forced: CompileOptions::image_parts), 64x64
// at 512 KiB, 128 GB/s, against the chain; negative control: block 1's fc2 chunk 0 zeroed in DDR
// fails the gate.
TEST(ImageOcm, TinyInPartsOnOneViewMatchesTheChain) {
  const ImageShape shape{};  // 256 patches, 128 tokens
  const auto [pixels, ref] = ocm_reference(config_tiny(), *tiny_bundle().bundle, 37, shape);
  const sim::Config cfg =
      sim::Config::make("qc-u", {"pe_rows=64", "pe_cols=64", "ocm_bytes=512KiB", "ddr_gbps=128"});
  CompileOptions o = ocm_options(160);
  o.image_parts = 1;
  Compiler c(config_tiny(), cfg, o);
  const CompiledProgram prog = c.image_program(shape);
  EXPECT_TRUE(prog.plan.starts_with("tower streamed: ")) << prog.plan;
  EXPECT_NE(prog.plan.find("; prefill streamed: "), std::string::npos) << prog.plan;
  expect_matches_chain(c, prog, shape, tiny_bundle().bundle.get(), pixels, ref,
                       "tiny image program, 64x64, 512 KiB, 128 GB/s, in two parts on one view", false);
  expect_zeroed_weight_fails(c, prog, shape, tiny_bundle().bundle.get(), pixels, ref, "V1.pm0.fc2",
                             "block 1's fc2 chunk 0");
}

// The view's half within 5% of the whole view's estimate was taken: 64x64 at 3 MiB, 16 GB/s, the
// half (8 rows, +4.7%, then 12) ran 142.89 M cycles where 2 MiB ran 128.99 M; within 4% now, it
// keeps the rule's 16 rows (128.78 M). 2 MiB, 64 GB/s still takes its half (+3.7%, then 48 rows:
// Image.GemmViewRuleAndOverride).
TEST(Image, HalfViewOnlyWithinFourPercent) {
  more_takes_no_worse_plan({"ddr_gbps=16"}, "ocm_bytes=2MiB", "ocm_bytes=3MiB", [](const std::string& plan, bool) {
    EXPECT_NE(plan.find("GEMMs on 16 of the 64 PE rows"), std::string::npos);
  });
}

// The MLP chunks' width (Compiler::settle_pm_chunks) kept the 512-wide default unless a wider one
// was estimated 1% lower reading no more weight bytes: 32x64 at 3 MiB, 96 GB/s kept 512 (1.08 GB of
// weights, estimated 37.92 M) over 2,048 (0.96 GB, 37.78 M) and ran 42.15 M cycles where 2 MiB's
// 2,048-wide chunks ran 39.32 M. A width reading fewer bytes within kFewerBytes is taken now: 39.61 M.
TEST(Image, WiderChunksReadingFewerBytesTaken) {
  const sim::Config at3 = sim::Config::make("qc-u", {"pe_rows=32", "pe_cols=64", "ocm_bytes=3MiB", "ddr_gbps=96"});
  Compiler c(config_2b(), at3);
  const CompiledProgram prog = c.image_program(ImageShape{});
  EXPECT_EQ(prog.plan.find("chunks of 512"), std::string::npos) << prog.plan;
  EXPECT_NE(prog.plan.find("the MLP in chunks of 2048"), std::string::npos) << prog.plan;
  const uint64_t cycles = run_image(c, prog, ImageShape{}, nullptr, {}, true).stats.total[sim::Stat::cycles];
  EXPECT_LT(cycles, 40'000'000u);
}

// More DMA channels than kernels::kGemmRuleChannels never take a worse plan than 4 (timing-only
// cycles): 64x64 at 4 MiB, 64 GB/s, where the view rule halved the GEMMs' rows with 6 or 8 channels
// (41.26 M cycles against 34.73 M), and at 8 MiB, 128 GB/s, where 6 or 8 channels' buffers left the
// resident plan room only for the gate|up in two chunks a call (24.21 M against 22.82 M).
TEST(Image, MoreDmaChannelsTakeNoWorsePlan) {
  more_takes_no_worse_plan({"ocm_bytes=4MiB ddr_gbps=64", "ocm_bytes=8MiB ddr_gbps=128"}, "dma_channels=4",
                           "dma_channels=8", [](const std::string& plan, bool) {
                             EXPECT_EQ(plan.find("GEMMs on"), std::string::npos);
                             EXPECT_NE(plan.find("gate|up chunks per call 1"), std::string::npos);
                           });
}

// More LRM than the 4 KiB the tiling rule was tuned on took split 1 for K = 4,096 and 6,144 (tiles
// twice as wide, their first tile streamed twice as long, a tile's meta in every DMA buffer): 64x64
// at 2 MiB, 32 GB/s, 92.44 M cycles with 8 KiB where 4 KiB took 66.00; at 4 MiB, 128 GB/s (resident
// on both), 29.44 M for 24.60. The compiler also settles the view of 4 KiB of LRM and takes it there;
// compile's plan says so.
TEST(Image, MoreLrmTakesNoWorsePlan) {
  more_takes_no_worse_plan({"ocm_bytes=2MiB ddr_gbps=32", "ocm_bytes=4MiB ddr_gbps=128"}, "lrm_bytes=4KiB",
                           "lrm_bytes=8KiB", [](const std::string& plan, bool larger) {
                             EXPECT_EQ(plan.find("in 4096 of the 8192 LRM bytes a PE") != std::string::npos, larger);
                           });
  // With the rows given (--gemm-rows 32) the LRM view is still settled: 92.44 M cycles without it.
  CompileOptions o;
  o.image_gemm_rows = 32;
  const Compiler c(config_2b(),
                   sim::Config::make("qc-u", {"pe_rows=64", "pe_cols=64", "ocm_bytes=2MiB", "ddr_gbps=32", "lrm_bytes=8KiB"}), o);
  const std::string plan = c.image_program(ImageShape{}).plan;
  EXPECT_NE(plan.find("GEMMs on 32 of the 64 PE rows; GEMMs, partial sums and parks in 4096 of the 8192"),
            std::string::npos)
      << plan;
}

// The tower's q|k|v by head groups beside the attention (Streamed::vqg) was weighed against q, k
// and v in turn as if q were stored and q, k, v loaded back for the attention, where k and v stay
// in OCM and q and the output go through LRM (vkv, vqpark): 64x64 at 3 MiB, 32 GB/s took the head
// groups and its tower ran 17.09 M cycles where 2 MiB's ran 15.55 M (now 15.41 M; 32x32 at 2 MiB,
// 32 GB/s, 84.37 -> 82.55 M for the whole program).
TEST(Image, TowerOnMoreOcmNoSlower) {
  std::vector<uint64_t> tower;
  for (const char* ocm : {"ocm_bytes=2MiB", "ocm_bytes=3MiB"}) {
    Compiler c(config_2b(), sim::Config::make("qc-u", {"pe_rows=64", "pe_cols=64", "ddr_gbps=32", ocm}));
    const CompiledProgram prog = c.image_program(ImageShape{});
    SCOPED_TRACE(std::string(ocm) + ": " + prog.plan);
    EXPECT_EQ(prog.plan.find("heads at a time beside the attention"), std::string::npos);
    const ImageRun r = run_image(c, prog, ImageShape{}, nullptr, {}, true);
    for (const auto& reg : r.stats.regions())
      if (reg.name == "vision_tower") tower.push_back(reg.counters[sim::Stat::cycles]);
  }
  ASSERT_EQ(tower.size(), 2u);
  EXPECT_LE(tower[1], tower[0]);
}

// Machine shapes off the power-of-two grid (found by compiling random points of the issue's
// range): 21x48 PEs, whose npe / 2 = 504 is not whole 128-blocks, used to hang the MLP chunk
// search (pm_chunk_width); on 21x46 PEs at 512 KiB with 3 DMA channels the rule's view left the
// smallest row tiles no room (an odd row count was never halved) and now takes fewer rows. The
// plans compile (plan_only: no emission) and name the view they run on.
TEST(Image, OddArrayShapesCompile) {
  const CompiledProgram a =
      Compiler(config_2b(), sim::Config::make("qc-u", {"pe_rows=21", "pe_cols=48"})).image_program(ImageShape{});
  EXPECT_FALSE(a.plan.empty());
  const sim::Config small = sim::Config::make("qc-u", {"pe_rows=21", "pe_cols=46", "ocm_bytes=512KiB", "dma_channels=3"});
  const CompiledProgram b = Compiler(config_2b(), small).image_program(ImageShape{});
  EXPECT_TRUE(b.plan.starts_with("streamed")) << b.plan;
  EXPECT_NE(b.plan.find("of the 21 PE rows"), std::string::npos) << b.plan;
  // 32x48 at 1 MiB, 48 GB/s: the rule's 16 rows (768 PEs) left the MLPs no room to run over every
  // row (122.0 M cycles, 34% more than 32x32); 22 rows (1,056 PEs) read the weights once as 32x32
  // does (93.8 M).
  const sim::Config wide = sim::Config::make("qc-u", {"pe_cols=48", "ocm_bytes=1MiB", "ddr_gbps=48"});
  const CompiledProgram c = Compiler(config_2b(), wide).image_program(ImageShape{});
  EXPECT_NE(c.plan.find("GEMMs on 22 of the 32 PE rows"), std::string::npos) << c.plan;
  // 38x48 at 768 KiB, one DMA channel, 16 KiB of LRM (found by scripts/random_points.py): the
  // mergers' fc1 chunks of 512 on 19 rows take split 1 and a whole tile's meta, 175 KB of DMA
  // buffer, where the GEMM scratch was sized by the whole-width GEMMs (117 KB).
  const sim::Config tight = sim::Config::make(
      "qc-u", {"pe_rows=38", "pe_cols=48", "ocm_bytes=768KiB", "dma_channels=1", "lrm_bytes=16KiB"});
  EXPECT_TRUE(Compiler(config_2b(), tight).image_program(ImageShape{}).plan.starts_with("streamed"));
  // 45x28 at 512 KiB, 7 DMA channels, 128 GB/s: the rule's view (7 channels' buffers on a quarter
  // of the OCM) left the GEMMs 5 rows, and no wider view reads fewer weights; 18 rows, estimated
  // at a third of the cycles, ran 209.3 M against 543.8 M. Its 16 KiB of LRM now give way to the
  // view of 4 KiB (settle_gemm_view), on 20 rows: 185.2 M, as with 4 KiB of LRM.
  const sim::Config few = sim::Config::make(
      "qc-u", {"pe_rows=45", "pe_cols=28", "ocm_bytes=512KiB", "dma_channels=7", "lrm_bytes=16KiB", "ddr_gbps=128"});
  const CompiledProgram d = Compiler(config_2b(), few).image_program(ImageShape{});
  EXPECT_NE(d.plan.find("GEMMs on 20 of the 45 PE rows"), std::string::npos) << d.plan;
}

// Acceptance: the full 2B image program (256x256 photo, 128-token prompt), timing-only.
TEST(Image, FullSizeCyclesPerStage) {
  sim::Config cfg = sim::Config::make("qc-u", {});
  Compiler c(config_2b(), cfg);
  ImageShape s{16, 16, 128, 4};
  CompiledProgram prog = c.image_program(s);
  ImageRun r = run_image(c, prog, s, nullptr, {}, true);
  uint64_t total = r.stats.total[sim::Stat::cycles];
  std::printf("2B image program: %zu static instructions, %llu cycles\n", prog.program.words.size(),
              (unsigned long long)total);
  for (const auto& reg : r.stats.regions())
    if (reg.name == "vision_tower" || reg.name == "prefill" || reg.name == "head")
      std::printf("  %-14s %12llu cycles\n", reg.name.c_str(), (unsigned long long)reg.counters[sim::Stat::cycles]);
  // Issue 4 aims at <= 100 M cycles; this guards the current figure (100.2 M) against regressions.
  EXPECT_LE(total, 101500000u);
}

// The streamed tower's MLP over row tiles (Streamed::vrpm): a tiny model with a tower of 384
// features and an MLP of 1536 on 16x16 patches (256 rows) at 512 KiB, where the chunk
// chain's parts for all 256 rows do not fit beside the tower's other buffers: two tiles of 128
// rows, each reading every fc1 and fc2 chunk, the partial sums in LRM. Against the chain
// (logits cosine >= 0.9999, the same top-1, timing-only = functional), with the KV-slot
// control and a zeroed fc2 chunk (read by both tiles) failing the gate.
ModelConfig config_tiny_tower() {
  ModelConfig m = config_tiny_wider();
  m.name = "tiny_tower";
  m.vision.hidden_size = 384;
  return m;
}
// The tower's q|k|v in two calls (Compiler::tower_qkv_split), on the tiny model with a tower of
// 256 on qc-u: one call of N = 768 ran at split 1 on 768 of the 1,024 PEs; q|k (512) at split 2
// fills them and v (256) runs two row sets, both packed back to back under V<b>.qkv. Resident
// (its q|k rows dense, VisionBlock::qk_dense, v's rows after them), and streamed (block 0's q|k|v in row tiles, the calls chained automatically). Against the
// chain; negative control: block 1's v packing (the second call's weight, past q|k's) zeroed.
ModelConfig config_tiny_tower256() {
  ModelConfig m = config_tiny();
  m.name = "tiny_tower256";
  m.vision.hidden_size = 256;
  return m;
}
TEST(ImageOcm, TinyTowerQkvInTwoCallsMatchesTheChain) {
  static TinyBundle tiny("image_" + config_tiny_tower256().name, config_tiny_tower256());
  const auto [pixels, ref] = ocm_reference(config_tiny_tower256(), *tiny.bundle, 17);
  for (uint32_t tile_rows : {0u, 64u}) {
    const sim::Config cfg = sim::Config::make("qc-u", {});
    CompileOptions opt = ocm_options();
    opt.image_tile_rows = tile_rows;
    opt.image_gemm_rows = 32;  // (the view would be halved: the tiny model is DDR-bound)
    Compiler c(config_tiny_tower256(), cfg, opt);
    const CompiledProgram prog = c.image_program(kOcmShape);
    size_t qk = 0, v = 0, qkv = 0;
    for (const KernelCall& k : prog.calls) {
      if (k.mark[0] != 'V') continue;
      qk += k.mark.ends_with(".qk");
      v += k.mark.ends_with(".v");
      qkv += k.mark.ends_with(".qkv");
    }
    EXPECT_GT(qk, 0u) << prog.plan;
    EXPECT_EQ(qk, v);
    EXPECT_EQ(qkv, 0u);
    const std::string what = std::string("tiny image program (tower 256), its q|k|v in two calls, ") +
                             (tile_rows ? "streamed" : "resident");
    expect_matches_chain(c, prog, kOcmShape, tiny.bundle.get(), pixels, ref, what, false);
    expect_zeroed_weight_fails(c, prog, kOcmShape, tiny.bundle.get(), pixels, ref, "V1.qkv", "block 1's v packing",
                               kernels::gemm_weight_bytes(cfg, 2 * 256, 256));
  }
}

TEST(ImageOcm, TinyTowerMlpInRowTilesMatchesTheChain) {
  static TinyBundle tiny("image_" + config_tiny_tower().name, config_tiny_tower());
  const ImageShape shape{16, 16, 96, 5};
  const auto [pixels, ref] = ocm_reference(config_tiny_tower(), *tiny.bundle, 23, shape);
  sim::Config cfg = sim::Config::make("qc-u", {"ocm_bytes=512KiB", "ddr_gbps=8"});
  Compiler c(config_tiny_tower(), cfg, ocm_options(128));
  const CompiledProgram prog = c.image_program(shape);
  SCOPED_TRACE(prog.plan);
  EXPECT_NE(prog.plan.find("tower 256 (block 0: 52)|128 (qkv|MLP phases; the MLP in chunks of 512 with fp32 partial "
                           "sums in LRM;"),
            std::string::npos);
  auto calls = [&](const std::string& mark) {
    return std::count_if(prog.calls.begin(), prog.calls.end(), [&](const KernelCall& k) { return k.mark == mark; });
  };
  EXPECT_EQ(calls("V1.t0.proj"), 1);
  EXPECT_EQ(calls("V1.t1.proj"), 1);
  EXPECT_EQ(calls("V1.proj"), 0);
  expect_matches_chain(c, prog, shape, tiny.bundle.get(), pixels, ref, "tiny (tower 384) image program, 512 KiB, 8 GB/s");
  expect_zeroed_weight_fails(c, prog, shape, tiny.bundle.get(), pixels, ref, "V1.pm2.fc2", "block 1's third fc2 chunk");
}

}  // namespace
}  // namespace gpnpu::model
