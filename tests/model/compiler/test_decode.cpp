// The decode program: functional steps on the tiny model against the chain, and the
// full 2B program's DDR traffic and cycles against the roofline (timing-only).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <unistd.h>

#include "isa/fp16.h"
#include "kernels/rope.h"
#include "model/reference/chain.h"
#include "model/compiler/compiler.h"
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

// One decode step on the device: token at cache slot `slot`, text position = slot.
std::vector<float> device_step(Session& dev, const CompiledProgram& prog, int token, uint32_t slot) {
  dev.write_decode_args(token, slot, {int(slot), int(slot), int(slot)});
  dev.run(prog);
  return dev.logits();
}

TinyBundle& tiny_bundle() {
  static TinyBundle tiny("decode");
  return tiny;
}

void decode_matches_chain(const char* preset, const std::vector<std::string>& sets) {
  TinyBundle& tiny = tiny_bundle();
  sim::Config cfg = sim::Config::make(preset, sets);
  CompileOptions opt;
  opt.max_seq = 64;
  Compiler c(config_tiny(), cfg, opt);
  CompiledProgram dp = c.decode_program();
  Session dev(c, false);
  dev.load_weights(*tiny.bundle);

  auto weights = bundle_weights(*tiny.bundle);
  Chain chain(config_tiny(), *weights);
  const std::vector<int> tokens = {9707, 11, 1879, 0, 151644, 872, 198, 3838};
  for (size_t i = 0; i < tokens.size(); ++i) {
    std::vector<float> ref = i == 0 ? chain.prefill({tokens[0]}, {}) : chain.decode(tokens[i]);
    std::vector<float> got = device_step(dev, dp, tokens[i], uint32_t(i));
    double cs = cosine(got, ref);
    EXPECT_GE(cs, 0.9999) << preset << " step " << i;
    std::printf("%s step %zu: logits cosine %.7f\n", preset, i, cs);
  }
}

TEST(Decode, TinyMatchesTheChainStepByStep) { decode_matches_chain("qc-u", {}); }
TEST(Decode, TinyMatchesTheChainOnOneMiBOfOcm) { decode_matches_chain("qc-u", {"ocm_bytes=1MiB"}); }
TEST(Decode, TinyMatchesTheChainOnAMiniArray) { decode_matches_chain("mini", {"ocm_bytes=1MiB"}); }
// Other array sizes (issue 13): every GEMV's last tile is narrower than the array (the
// tiny model's widths are below 4096 PEs; 32x64 is not square).
TEST(Decode, TinyMatchesTheChainOn16x16) { decode_matches_chain("qc-u", {"pe_rows=16", "pe_cols=16"}); }
// Half a MiB: the logits go to DDR (the host reads them there), the staging of the LM head's calls
// in the attention's region.
TEST(Decode, TinyMatchesTheChainOnHalfAMiBOfOcm) { decode_matches_chain("qc-u", {"ocm_bytes=512KiB"}); }
TEST(Decode, TinyMatchesTheChainOn64x64) { decode_matches_chain("qc-u", {"pe_rows=64", "pe_cols=64"}); }
TEST(Decode, TinyMatchesTheChainOn32x64With2MiB) {
  decode_matches_chain("qc-u", {"pe_rows=32", "pe_cols=64", "ocm_bytes=2MiB"});
}

// Negative control: one word of the KV cache corrupted (as a stale or clobbered
// cache would be) must turn the next steps' gate to a failure.
TEST(Decode, NegativeControlOneCacheWordFailsTheGate) {
  TinyBundle& tiny = tiny_bundle();
  sim::Config cfg = sim::Config::make("qc-u", {});
  CompileOptions opt;
  opt.max_seq = 64;
  Compiler c(config_tiny(), cfg, opt);
  CompiledProgram dp = c.decode_program();
  Session dev(c, false);
  dev.load_weights(*tiny.bundle);
  auto weights = bundle_weights(*tiny.bundle);
  Chain chain(config_tiny(), *weights);
  const std::vector<int> tokens = {9707, 11, 1879, 0};
  double worst = 1.0;
  for (size_t i = 0; i < tokens.size(); ++i) {
    std::vector<float> ref = i == 0 ? chain.prefill({tokens[0]}, {}) : chain.decode(tokens[i]);
    if (i == 2) {  // layer 0, kv head 0, slot 1, dimension 0 of K: a large wrong value
      uint16_t bad = f32_to_f16(40000.0f);
      dev.write_kv(0, false, 0, 1, std::span(&bad, 1));
    }
    std::vector<float> got = device_step(dev, dp, tokens[i], uint32_t(i));
    if (i >= 2) worst = std::min(worst, cosine(got, ref));
  }
  EXPECT_LT(worst, 0.9999) << "a corrupted cache word must fail the gate";
}

// Acceptance: the full 2B decode program at 140 cached tokens, timing-only.
TEST(Decode, FullSizeAtTheDdrRoofline) {
  sim::Config cfg = sim::Config::make("qc-u", {});
  Compiler c(config_2b(), cfg);
  CompiledProgram dp = c.decode_program();
  EXPECT_LE(dp.program.words.size(), 100000u) << "static instructions";
  Session dev(c, true);
  dev.write_decode_args(0, 139);
  const sim::Stats& st = dev.run(dp);
  uint64_t bytes = st.total[sim::Stat::ddr_bytes_read] + st.total[sim::Stat::ddr_bytes_written];
  uint64_t cycles = st.total[sim::Stat::cycles];
  double floor = double(bytes) / cfg.ddr_bytes_per_cycle();
  std::printf("2B decode at 140 cached: %zu static instructions, %.4f GB DDR, %llu cycles, floor %.0f, ratio %.4f\n",
              dp.program.words.size(), bytes / 1e9, (unsigned long long)cycles, floor, cycles / floor);
  EXPECT_LE(double(bytes), 0.93e9);
  EXPECT_LE(double(cycles), 1.02 * floor);
}

// The logits (304 KB of fp16) in DDR, not OCM: on 512 KiB every GEMV keeps four DMA channels'
// buffers (with the logits in OCM, two fit: 1.488 x the floor at 128 GB/s).
TEST(Decode, LogitsInDdrLeaveHalfAMiBItsGemvBuffers) {
  sim::Config cfg = sim::Config::make("qc-u", {"ocm_bytes=512KiB", "ddr_gbps=128"});
  Compiler c(config_2b(), cfg);
  CompiledProgram dp = c.decode_program();
  EXPECT_EQ(dp.logits_ddr, int64_t(c.layout().at("logits").offset));
  Session dev(c, true);
  dev.write_decode_args(0, 139);
  const sim::Stats& st = dev.run(dp);
  double bytes = 0;  // (as `compile --run`: every call's DDR bytes at 140 cached tokens, the logits' copy among them)
  for (const KernelCall& k : dp.calls) bytes += double(k.at(140).ddr_bytes);
  const double floor = bytes / cfg.ddr_bytes_per_cycle();
  const double cycles = double(st.total[sim::Stat::cycles]);
  std::printf("2B decode on 512 KiB at 128 GB/s: %.0f cycles, %.4f x its DDR floor\n", cycles, cycles / floor);
  EXPECT_LE(cycles, 1.05 * floor);
}

}  // namespace
}  // namespace gpnpu::model
