// Attention kernels against model::ops::attention on the very fp16 values the device
// reads: KV-cache append + decode (L from scalar memory, one program reused for
// several L), causal GQA prefill and full tower attention with q/k/v in OCM;
// negative control; timing-only cycles equal the functional run; cycles vs floors.
#include "kernels/attention.h"

#include <cmath>

#include "kernel_harness.h"
#include "model/reference/ops.h"
#include "sim/machine/memory_map.h"
#include "sim/run.h"

namespace gpnpu::kernels::test {
namespace {

uint32_t up64(uint32_t v) { return (v + 63) / 64 * 64; }

std::vector<float> f16_random(size_t n, uint32_t seed, float scale) {
  std::vector<float> v = random_vector(n, seed, scale);
  for (float& x : v) x = round_f16(x);
  return v;
}

// The gate: cosine and max |err| <= 2^-9 * max|v| + 2^-10 * max|ref|. Why: the
// probabilities are rounded to fp16 before the V MAC (2^-11 relative each, summing
// to at most 2^-11 * max|v| since they add to 1) and the output is rounded to fp16
// (2^-11 * |out|); the bound leaves 4x margin on the first and 2x on the second.
struct Gate {
  double cosine, max_abs, bound;
  bool pass() const { return cosine >= 0.9999 && max_abs <= bound; }
};
Gate gate(const std::vector<float>& y, const std::vector<float>& ref, const std::vector<float>& v) {
  Compare c = compare(y, ref);
  double vmax = 0;
  for (float x : v) vmax = std::max(vmax, double(std::fabs(x)));
  return {c.cosine, c.max_abs, vmax / 512 + c.max_ref / 1024};
}

// ---------------------------------------------------------------- decode
struct DecodeShape {
  const char* preset;
  uint32_t q_heads, kv_heads, head_dim, max_seq;
  std::vector<uint32_t> lens;  // run the SAME program for each L (cache grows)
};

struct DecodeRun {
  std::vector<std::vector<float>> y, ref;
  std::vector<float> v_all;
  std::vector<uint64_t> cycles, ddr_read, ddr_written;
  std::vector<uint32_t> hook_runs;  // times the after_last_fetch hook ran, per L (with `hook`)
};

constexpr uint32_t kHookSmem = 2048;  // the hook's counter word

DecodeRun run_decode(const DecodeShape& s, bool timing_only, const std::vector<std::string>& sets = {},
                     bool hook = false) {
  sim::Config cfg = sim::Config::make(s.preset, sets);
  const uint32_t H = s.q_heads, KV = s.kv_heads, hd = s.head_dim, hd2 = hd * 2;
  const uint32_t kvw = KV * hd;
  DecodeAttnArgs a;
  a.q_heads = H;
  a.kv_heads = KV;
  a.head_dim = hd;
  a.scale = 1.0f / std::sqrt(float(hd));
  a.q_ocm = 0;
  a.out_ocm = up64(H * hd2);
  const uint32_t knew = up64(a.out_ocm + H * hd2), vnew = up64(knew + kvw * 2);
  a.scratch_ocm = up64(vnew + kvw * 2);
  a.scratch_bytes = uint32_t(cfg.ocm_bytes) - a.scratch_ocm;
  a.max_seq = s.max_seq;
  const uint32_t kc_off = 0x100000, vc_off = kc_off + KV * s.max_seq * hd2;
  a.k_cache_ddr = sim::ddr_addr(kc_off);
  a.v_cache_ddr = sim::ddr_addr(vc_off);
  a.len_smem = 0;
  a.smem = 64;
  KvWriteArgs w;
  w.kv_heads = KV;
  w.head_dim = hd;
  w.rows = 1;
  w.k_ocm = knew;
  w.v_ocm = vnew;
  w.row_stride = kvw * 2;
  w.k_cache_ddr = a.k_cache_ddr;
  w.v_cache_ddr = a.v_cache_ddr;
  w.max_seq = s.max_seq;
  w.pos_smem = 4;
  w.smem = 512;

  Builder b;
  // The hook counts its runs in scalar memory (x19 and x31 are its registers).
  if (hook)
    a.after_last_fetch = [&b] {
      b.op("lw", {X{19}, Mem{X{0}, kHookSmem}});
      b.op("addi", {X{19}, X{19}, 1});
      b.op("sw", {X{19}, Mem{X{0}, kHookSmem}});
      b.li(X{31}, 0);
    };
  emit_kv_write(b, cfg, w);
  emit_attention_decode(b, cfg, a);
  b.op("halt");
  isa::Program prog = b.finish();

  // Keys/values of every position; k scaled so the softmax is neither flat nor one-hot.
  const uint32_t Lmax = *std::max_element(s.lens.begin(), s.lens.end());
  std::vector<float> k_all = f16_random(size_t(Lmax) * kvw, 101, 1.5f);
  DecodeRun r;
  r.v_all = f16_random(size_t(Lmax) * kvw, 102, 1.0f);
  sim::Platform& p = sim::Platform::get();
  p.configure(cfg, timing_only);
  uint32_t filled = 0;  // cache slots written so far (by the host, before the first L)
  for (uint32_t L : s.lens) {
    std::vector<float> q = f16_random(size_t(H) * hd, 200 + L, 1.0f);
    if (!timing_only) {
      // Host-fill the slots before L-1 that are not in the cache yet (layout [g][pos][hd]).
      for (uint32_t pos = filled; pos + 1 < L; ++pos)
        for (uint32_t g = 0; g < KV; ++g) {
          std::vector<uint16_t> kh = to_f16(std::vector<float>(k_all.begin() + pos * kvw + g * hd, k_all.begin() + pos * kvw + (g + 1) * hd));
          std::vector<uint16_t> vh = to_f16(std::vector<float>(r.v_all.begin() + pos * kvw + g * hd, r.v_all.begin() + pos * kvw + (g + 1) * hd));
          p.ddr().write(kc_off + (uint64_t(g) * s.max_seq + pos) * hd2, kh.data(), hd2);
          p.ddr().write(vc_off + (uint64_t(g) * s.max_seq + pos) * hd2, vh.data(), hd2);
        }
      write_ocm_f16(a.q_ocm, q);
      write_ocm_f16(knew, std::vector<float>(k_all.begin() + (L - 1) * kvw, k_all.begin() + L * kvw));
      write_ocm_f16(vnew, std::vector<float>(r.v_all.begin() + (L - 1) * kvw, r.v_all.begin() + L * kvw));
    }
    filled = L;
    uint32_t len = L, pos = L - 1;
    p.write_smem(a.len_smem, &len, 4);
    p.write_smem(w.pos_smem, &pos, 4);
    const uint32_t zero = 0;
    p.write_smem(kHookSmem, &zero, 4);
    const sim::Stats& st = p.run(prog);
    uint32_t runs = 0;
    std::memcpy(&runs, &p.state().smem[kHookSmem], 4);
    r.hook_runs.push_back(runs);
    r.cycles.push_back(st.total[sim::Stat::cycles]);
    r.ddr_read.push_back(st.total[sim::Stat::ddr_bytes_read]);
    r.ddr_written.push_back(st.total[sim::Stat::ddr_bytes_written]);
    if (timing_only) continue;
    r.y.push_back(read_ocm_f16(a.out_ocm, size_t(H) * hd));
    std::vector<float> ref(size_t(H) * hd);
    model::ops::AttnShape as{int(H), int(KV), int(hd), a.scale, true, int64_t(L) - 1};
    model::ops::attention(q, std::span<const float>(k_all.data(), size_t(L) * kvw),
                          std::span<const float>(r.v_all.data(), size_t(L) * kvw), ref, as);
    r.ref.push_back(ref);
  }
  return r;
}

class DecodeShapes : public ::testing::TestWithParam<DecodeShape> {};

TEST_P(DecodeShapes, MatchesChainAttentionForEveryL) {
  const DecodeShape& s = GetParam();
  // (with the after_last_fetch hook: it runs once, whatever L, and changes no result)
  DecodeRun r = run_decode(s, false, {}, true);
  DecodeRun t = run_decode(s, true, {}, true);
  for (size_t i = 0; i < s.lens.size(); ++i) {
    const uint32_t L = s.lens[i];
    EXPECT_EQ(r.hook_runs[i], 1u) << "L " << L;
    EXPECT_EQ(t.hook_runs[i], 1u) << "L " << L;
    Gate g = gate(r.y[i], r.ref[i], r.v_all);
    EXPECT_TRUE(g.pass()) << "L " << L << ": cos " << g.cosine << " max_abs " << g.max_abs << " bound " << g.bound;
    // The cache read is exactly the L valid keys; the append writes one K and one V row.
    EXPECT_EQ(r.ddr_read[i], uint64_t(L) * s.kv_heads * s.head_dim * 4) << "L " << L;
    EXPECT_EQ(r.ddr_written[i], uint64_t(s.kv_heads) * s.head_dim * 4);
    EXPECT_EQ(t.cycles[i], r.cycles[i]) << "timing-only must give the functional cycle count (L " << L << ")";
    std::printf("decode %s %u/%u x %u L %u: cos %.7f max_abs %.3g (bound %.3g), %llu cycles\n", s.preset, s.q_heads,
                s.kv_heads, s.head_dim, L, g.cosine, g.max_abs, g.bound, (unsigned long long)r.cycles[i]);
  }
}

// L below, at and off the 16-key block; G = 1, 2 and 4; the model's head shape on qc-u.
INSTANTIATE_TEST_SUITE_P(Shapes, DecodeShapes,
                         ::testing::Values(DecodeShape{"mini", 4, 2, 64, 64, {5, 16, 37}},
                                           DecodeShape{"mini", 2, 2, 128, 48, {1, 33}},
                                           DecodeShape{"mini", 8, 2, 32, 40, {23}},
                                           DecodeShape{"qc-u", 16, 8, 128, 256, {140, 141}},
                                           // the tiny model's heads on qc-u: 4 key splits, rounds of 16 and 64 keys
                                           DecodeShape{"qc-u", 4, 2, 32, 300, {1, 17, 33, 80, 81, 95, 96, 97, 150, 299}}));

// Fewer than four DMA channels (the slots' K and V rounds share them): the next round is issued
// once this one has arrived, before its compute. The same values bit for bit as on four channels
// at every L (the hook once), timing-only equal to functional; the model's shape at 128 GB/s within
// 8% of its four-channel cycles on one and two channels (1.055 / 1.018 x; issued after the compute,
// a round's wait also took the one after it: 1.464 / 1.390 x).
TEST(AttentionDecode, SharedChannelsIssueTheNextRoundAfterTheWait) {
  for (const DecodeShape& s : {DecodeShape{"qc-u", 4, 2, 32, 300, {1, 17, 80, 96, 150, 299}},
                               DecodeShape{"qc-u", 16, 8, 128, 256, {140}}}) {
    const DecodeRun four = run_decode(s, false, {}, true);
    for (const char* ch : {"dma_channels=1", "dma_channels=2", "dma_channels=3"}) {
      const DecodeRun r = run_decode(s, false, {ch}, true), t = run_decode(s, true, {ch}, true);
      for (size_t i = 0; i < s.lens.size(); ++i) {
        EXPECT_EQ(r.y[i], four.y[i]) << ch << ", L " << s.lens[i];
        EXPECT_EQ(r.hook_runs[i], 1u) << ch << ", L " << s.lens[i];
        EXPECT_EQ(t.cycles[i], r.cycles[i]) << ch << ", L " << s.lens[i];
      }
    }
  }
  const DecodeShape m{"qc-u", 16, 8, 128, 4096, {140}};
  const uint64_t four = run_decode(m, true, {"ddr_gbps=128"}).cycles[0];
  for (const char* ch : {"dma_channels=1", "dma_channels=2"}) {
    const uint64_t c = run_decode(m, true, {"ddr_gbps=128", ch}).cycles[0];
    EXPECT_LE(double(c), 1.08 * double(four)) << ch;
    std::printf("decode attention L=140 at 128 GB/s, %s: %llu cycles, four channels %llu (%.3f x)\n", ch,
                (unsigned long long)c, (unsigned long long)four, double(c) / double(four));
  }
}

TEST(AttentionDecode, NegativeControlWrongKvHeadFailsTheGate) {
  DecodeShape s{"mini", 4, 2, 64, 64, {37}};
  DecodeRun r = run_decode(s, false);
  // A kernel that paired query head h with the wrong kv head: swap the two heads' outputs.
  std::vector<float> bad = r.y[0];
  std::swap_ranges(bad.begin(), bad.begin() + 64, bad.begin() + 2 * 64);
  Gate g = gate(bad, r.ref[0], r.v_all);
  EXPECT_FALSE(g.pass()) << "cos " << g.cosine << " max_abs " << g.max_abs;
}

// Model shape: L = 140, 16 heads x 128, 8 kv heads, on qc-u, timing-only, vs the DDR floor.
TEST(AttentionDecode, ModelShapeNearTheDdrFloor) {
  DecodeShape s{"qc-u", 16, 8, 128, 4096, {140}};
  DecodeRun t = run_decode(s, true);
  sim::Config cfg = sim::Config::make("qc-u", {});
  const double bytes = 140.0 * 8 * 128 * 2 * 2;
  const double floor = bytes / cfg.ddr_bytes_per_cycle();
  std::printf("decode attention L=140 (kv append + attention): %llu cycles, DDR floor %.0f (%.0f B), ratio %.4f\n",
              (unsigned long long)t.cycles[0], floor, bytes, double(t.cycles[0]) / floor);
  EXPECT_LE(double(t.cycles[0]), 1.10 * floor);
  // The same step with a DDR port 1000x faster: what the array and the sequencer cost.
  DecodeRun fast = run_decode(s, true, {"ddr_gbps=32000"});
  std::printf("  same with ddr_gbps=32000 (compute/issue bound): %llu cycles\n", (unsigned long long)fast.cycles[0]);
}

// ---------------------------------------------------------------- OCM (prefill, tower)
struct OcmShape {
  const char* preset;
  uint32_t q_heads, kv_heads, head_dim, seq;
  bool causal, head_major;  // q/out head-major or row-major (both read and written in place)
  float q_std = 1.0f, k_std = 1.5f;  // of the random q and k (scores std ~ q_std * k_std)
  uint32_t kv_offset = 0;            // keys before query row 0 (a prefill chunk after cached tokens)
  uint32_t pe_side = 0;              // pe_rows = pe_cols, with 4 MiB of OCM (0: the preset's)
  uint32_t lrm_bytes = 0;            // 0: the preset's
  uint32_t q_pad = 0;                // row-major q: bytes after each q row (q inside q|k|v rows; out stays dense)
};

struct OcmRun {
  std::vector<float> y, ref, v;
  uint64_t cycles = 0;
  uint64_t nan = 0;  // NaN values converted to fp16 on any PE
};

sim::Config ocm_config(const OcmShape& s) {
  std::vector<std::string> sets;
  if (s.pe_side) sets = {"pe_rows=" + std::to_string(s.pe_side), "pe_cols=" + std::to_string(s.pe_side), "ocm_bytes=4MiB"};
  if (s.lrm_bytes) sets.push_back("lrm_bytes=" + std::to_string(s.lrm_bytes));
  return sim::Config::make(s.preset, sets);
}

OcmRun run_ocm(const OcmShape& s, bool timing_only, uint32_t max_groups = 0) {
  sim::Config cfg = ocm_config(s);
  const uint32_t H = s.q_heads, KV = s.kv_heads, hd = s.head_dim, hd2 = hd * 2, S = s.seq, NK = s.kv_offset + S;
  OcmAttnArgs a;
  a.q_heads = H;
  a.kv_heads = KV;
  a.head_dim = hd;
  a.seq = S;
  a.causal = s.causal;
  a.kv_offset = s.kv_offset;
  a.scale = 1.0f / std::sqrt(float(hd));
  const uint32_t qbytes = H * S * hd2;
  a.q_ocm = 0;
  a.out_ocm = up64(qbytes + S * (s.head_major ? 0 : s.q_pad));
  if (s.head_major) {
    a.q_row_stride = a.out_row_stride = hd2;
    a.q_head_stride = a.out_head_stride = S * hd2;
  } else {
    a.q_row_stride = H * hd2 + s.q_pad;
    a.out_row_stride = H * hd2;
    a.q_head_stride = a.out_head_stride = hd2;
  }
  a.kv_row_stride = KV * hd2 + 64;  // strided k/v rows
  a.k_ocm = up64(a.out_ocm + qbytes);
  a.v_ocm = up64(a.k_ocm + NK * a.kv_row_stride);
  a.max_groups = max_groups;
  Builder b;
  // Registers as an earlier kernel may leave them: NaN in every lane of every PE (the
  // kernel must not compute on them, not even on the PEs whose results it never gathers).
  for (uint8_t r = 0; r < 32; ++r) b.op("vsplati", {V{r}, int64_t(0x7fc07fc0)});
  emit_attention_ocm(b, cfg, a);
  b.op("halt");
  isa::Program prog = b.finish();

  OcmRun r;
  std::vector<float> q = f16_random(size_t(S) * H * hd, 301, s.q_std);  // [S][H*hd] logical
  std::vector<float> k = f16_random(size_t(NK) * KV * hd, 302, s.k_std);
  r.v = f16_random(size_t(NK) * KV * hd, 303, 1.0f);
  sim::Platform& p = sim::Platform::get();
  p.configure(cfg, timing_only);
  if (!timing_only) {
    for (uint32_t i = 0; i < S; ++i)
      for (uint32_t h = 0; h < H; ++h)
        write_ocm_f16(a.q_ocm + i * a.q_row_stride + h * a.q_head_stride,
                      std::vector<float>(q.begin() + (i * H + h) * hd, q.begin() + (i * H + h + 1) * hd));
    for (uint32_t i = 0; i < NK; ++i) {
      write_ocm_f16(a.k_ocm + i * a.kv_row_stride, std::vector<float>(k.begin() + i * KV * hd, k.begin() + (i + 1) * KV * hd));
      write_ocm_f16(a.v_ocm + i * a.kv_row_stride, std::vector<float>(r.v.begin() + i * KV * hd, r.v.begin() + (i + 1) * KV * hd));
    }
  }
  const sim::Stats& st = p.run(prog);
  r.cycles = st.total[sim::Stat::cycles];
  r.nan = st.total[sim::Stat::f16_nan];
  if (timing_only) return r;
  for (uint32_t i = 0; i < S; ++i)
    for (uint32_t h = 0; h < H; ++h) {
      std::vector<float> row = read_ocm_f16(a.out_ocm + i * a.out_row_stride + h * a.out_head_stride, hd);
      r.y.insert(r.y.end(), row.begin(), row.end());
    }
  r.ref.assign(size_t(S) * H * hd, 0.0f);
  model::ops::AttnShape as{int(H), int(KV), int(hd), a.scale, s.causal, int64_t(s.kv_offset)};
  model::ops::attention(q, k, r.v, r.ref, as);
  return r;
}

class OcmShapes : public ::testing::TestWithParam<OcmShape> {};

TEST_P(OcmShapes, MatchesChainAttention) {
  const OcmShape& s = GetParam();
  OcmRun r = run_ocm(s, false);
  Gate g = gate(r.y, r.ref, r.v);
  EXPECT_TRUE(g.pass()) << "cos " << g.cosine << " max_abs " << g.max_abs << " bound " << g.bound;
  EXPECT_EQ(r.nan, 0u) << "NaN computed from stale registers";
  OcmRun t = run_ocm(s, true);
  EXPECT_EQ(t.cycles, r.cycles) << "timing-only must give the functional cycle count";
  const sim::Config cfg = ocm_config(s);
  std::printf("attention %s %ux%u LRM %u: %u/%u x %u S %u after %u keys %s %s: cos %.7f max_abs %.3g (bound %.3g), %llu cycles\n",
              s.preset, unsigned(cfg.pe_rows), unsigned(cfg.pe_cols), unsigned(cfg.lrm_bytes), s.q_heads, s.kv_heads, s.head_dim, s.seq, s.kv_offset, s.causal ? "causal" : "full",
              s.head_major ? "head-major" : "row-major",
              g.cosine, g.max_abs, g.bound, (unsigned long long)r.cycles);
}

// seq not a multiple of 16 or of the row tile, G = 1/2/4, both q layouts; the model's
// prefill shape (S = 128, 16/8 x 128, causal) and the tower shape (S = 256, 16 x 64, full;
// two keys per iteration) on qc-u; S = 200 on qc-u: a tower-like shape with an odd tail block.
INSTANTIATE_TEST_SUITE_P(Shapes, OcmShapes,
                         ::testing::Values(OcmShape{"mini", 4, 2, 128, 37, true, false},
                                           OcmShape{"mini", 2, 2, 64, 21, false, true},
                                           OcmShape{"mini", 8, 2, 32, 19, true, true},
                                           OcmShape{"qc-u", 16, 8, 128, 128, true, false},
                                           OcmShape{"qc-u", 16, 16, 64, 256, false, false},
                                           OcmShape{"qc-u", 4, 4, 64, 203, false, true},
                                           // after cached keys (issue 18): a chunk at an offset
                                           OcmShape{"mini", 4, 2, 128, 37, true, false, 1.0f, 1.5f, 29},
                                           OcmShape{"qc-u", 4, 2, 128, 20, true, false, 1.0f, 1.5f, 147},
                                           // other arrays (8x8, 16x16, 64x64): other tilings, group counts and
                                           // register plans; a small LRM (no one-hot masks, no parking)
                                           OcmShape{"mini", 16, 16, 64, 67, false, false, 1.0f, 1.5f, 0, 8},
                                           OcmShape{"mini", 16, 8, 128, 45, true, false, 1.0f, 1.5f, 19, 8},
                                           OcmShape{"mini", 8, 4, 128, 33, true, true, 1.0f, 1.5f, 0, 16},
                                           OcmShape{"mini", 16, 16, 64, 100, false, true, 1.0f, 1.5f, 0, 16},
                                           OcmShape{"qc-u", 16, 8, 128, 128, true, false, 1.0f, 1.5f, 0, 64},
                                           // a pass of 16 kv groups (64x64); 12 causal kv groups with staged
                                           // q and out
                                           OcmShape{"qc-u", 16, 16, 64, 256, false, false, 1.0f, 1.5f, 0, 64},
                                           OcmShape{"mini", 12, 12, 64, 40, true, false, 1.0f, 1.5f, 0, 16},
                                           OcmShape{"mini", 16, 8, 128, 29, true, false, 1.0f, 1.5f, 7, 8, 2048},
                                           OcmShape{"mini", 4, 4, 64, 35, false, false, 1.0f, 1.5f, 0, 8, 1024},
                                           OcmShape{"mini", 4, 2, 128, 21, true, true, 1.0f, 1.5f, 0, 0, 512},
                                           // seven and eight kv groups a pass: 7 x 2 x 18 of 256 PEs; 8
                                           // filling the array; 16 groups of 16 rows
                                           OcmShape{"mini", 14, 7, 64, 18, true, false, 1.0f, 1.5f, 0, 16},
                                           OcmShape{"mini", 8, 8, 64, 32, true, true, 1.0f, 1.5f, 0, 16},
                                           OcmShape{"mini", 16, 16, 128, 16, false, false, 1.0f, 1.5f, 5, 16},
                                           // q in the prefill's q|k|v rows (row stride q + k + v), out dense
                                           OcmShape{"qc-u", 16, 8, 128, 128, true, false, 1.0f, 1.5f, 0, 0, 0, 2 * 8 * 256},
                                           OcmShape{"qc-u", 16, 16, 64, 256, false, false, 1.0f, 1.5f, 0, 0, 0, 2 * 16 * 128},
                                           OcmShape{"mini", 4, 2, 128, 37, true, false, 1.0f, 1.5f, 0, 0, 0, 2 * 2 * 256},
                                           // fewer rows a pass, more kv groups (plan_attention_ocm): the
                                           // streamed prefill's call of 4 kv heads at 260 rows (passes of 128)
                                           OcmShape{"qc-u", 8, 4, 128, 260, true, true},
                                           // key splits (a pass on half the PEs or fewer): after cached keys,
                                           // head-major, one kv group (obcast), a small LRM (parked q)
                                           OcmShape{"qc-u", 4, 2, 128, 20, true, false, 1.0f, 1.5f, 148, 64},
                                           OcmShape{"qc-u", 16, 8, 128, 128, true, true, 1.0f, 1.5f, 0, 64},
                                           OcmShape{"mini", 4, 1, 64, 32, true, false, 1.0f, 1.5f, 0, 16},
                                           OcmShape{"mini", 4, 2, 128, 30, true, false, 1.0f, 1.5f, 2, 16, 512}));

// The tiling rule: the most rows a pass unless fewer rows with more kv groups take fewer
// key steps. The model's prefill at 128 rows (causal) takes passes of 64 rows x 8 groups
// (keys 64 + 128) instead of 2 x 1 of 128 rows x 4 (256); at 260 rows (4 kv heads) passes of
// 128 rows x 4 groups (keys 128 + 256 + 260) instead of 4 passes of 260 rows x 1 group; the
// tower at 1,200 patches, 2 heads: 3 passes of 512 rows instead of 2 x 2 of 1,024 and 176;
// at 784 patches the rule keeps 784 rows a pass.
TEST(AttentionOcm, FewerRowsAPassWhenThatIsLessWork) {
  const sim::Config cfg = sim::Config::make("qc-u", {});
  auto tiling = [&](uint32_t qh, uint32_t kvh, uint32_t seq, bool causal) {
    OcmAttnArgs a;
    a.q_heads = qh, a.kv_heads = kvh, a.head_dim = 128, a.seq = seq, a.causal = causal;
    const OcmAttnTiling t = plan_attention_ocm(cfg, a);
    return std::pair<uint32_t, uint32_t>{t.rows, t.groups};
  };
  EXPECT_EQ(tiling(16, 8, 128, true), (std::pair<uint32_t, uint32_t>{64, 8}));
  EXPECT_EQ(tiling(8, 4, 260, true), (std::pair<uint32_t, uint32_t>{128, 4}));
  EXPECT_EQ(tiling(2, 2, 1200, false), (std::pair<uint32_t, uint32_t>{512, 2}));
  EXPECT_EQ(tiling(1, 1, 1200, false), (std::pair<uint32_t, uint32_t>{1024, 1}));
  EXPECT_EQ(tiling(2, 2, 784, false), (std::pair<uint32_t, uint32_t>{784, 1}));
}

// As many kv groups a pass as the array holds (one grouped broadcast a chunk whatever the
// groups, instead of another pass): the 2B prefill and tower on 32x64, the tower's 16 heads on
// 64x64, the OcmShapes cases above; on 16x16 the prefill's passes of 16 rows x 8 groups (keys
// 16 + 32 + ... + 128 = 576, where 32 rows x 4 groups see 2 x 320).
TEST(AttentionOcm, GroupsAPassAsTheArrayHolds) {
  auto tiling = [](const char* preset, uint32_t rows, uint32_t cols, uint32_t qh, uint32_t kvh, uint32_t hd,
                   uint32_t seq, bool causal, uint32_t kv_offset = 0) {
    const sim::Config cfg = sim::Config::make(preset, {"pe_rows=" + std::to_string(rows), "pe_cols=" + std::to_string(cols)});
    OcmAttnArgs a;
    a.q_heads = qh, a.kv_heads = kvh, a.head_dim = hd, a.seq = seq, a.causal = causal, a.kv_offset = kv_offset;
    const OcmAttnTiling t = plan_attention_ocm(cfg, a);
    return std::pair<uint32_t, uint32_t>{t.rows, t.groups};
  };
  using RG = std::pair<uint32_t, uint32_t>;
  EXPECT_EQ(tiling("qc-u", 32, 64, 16, 8, 128, 128, true), (RG{128, 8}));
  EXPECT_EQ(tiling("qc-u", 32, 64, 16, 16, 64, 256, false), (RG{256, 8}));
  EXPECT_EQ(tiling("qc-u", 64, 64, 16, 16, 64, 256, false), (RG{256, 16}));
  EXPECT_EQ(tiling("qc-u", 16, 16, 16, 8, 128, 128, true), (RG{16, 8}));
  EXPECT_EQ(tiling("mini", 16, 16, 14, 7, 64, 18, true), (RG{18, 7}));
  EXPECT_EQ(tiling("mini", 16, 16, 8, 8, 64, 32, true), (RG{32, 8}));
  EXPECT_EQ(tiling("mini", 16, 16, 16, 16, 128, 16, false, 5), (RG{16, 16}));
}

// The tower at the scale of a wide synthetic tower whose Q/K rows do not shrink with the
// width (std 0.12 at width 1024: q and k of std 0.12 * sqrt(1024) = 3.84, |q| up to ~19,
// scores q.k / 8 of std ~15, a nearly one-hot softmax): the kernel still matches
// ops::attention on the same fp16 q, k, v to its fp16 rounding (measured cos 0.99999998,
// max |err| 0.0013, under one output ulp). Such a tower diverges from fp32 through its
// fp16 activations (rounding differences grow ~2.5x per block), not through this kernel.
TEST(AttentionOcm, TowerShapeWithSharpScores) {
  OcmShape s{"qc-u", 16, 16, 64, 256, false, false, 3.84f, 3.84f};
  OcmRun r = run_ocm(s, false);
  Gate g = gate(r.y, r.ref, r.v);
  EXPECT_GE(g.cosine, 0.99999) << "max_abs " << g.max_abs;
  EXPECT_TRUE(g.pass()) << "cos " << g.cosine << " max_abs " << g.max_abs << " bound " << g.bound;
  std::printf("attention qc-u tower, scores std ~15: cos %.8f max_abs %.3g (bound %.3g)\n", g.cosine, g.max_abs, g.bound);
}

// The image program gives the OCM attention LRM [0, 1,024): above it a GEMM may hold the
// next GEMM's first tile (gemm_handoff). On the prefill shape (head_dim 128: q and the
// accumulators are parked in LRM) the kernel must leave LRM [1,024, 4,096) as it was:
// a sentinel stored there before the kernel, summed per PE after it, against the sum it
// had. Negative control: without the budget the kernel uses that LRM and the sum changes.
uint64_t lrm_above_budget_changes(uint32_t budget) {
  sim::Config cfg = sim::Config::make("qc-u", {});
  const uint32_t H = 16, KV = 8, hd = 128, hd2 = hd * 2, S = 128, lrm = uint32_t(cfg.lrm_bytes), from = 1024;
  OcmAttnArgs a;
  a.q_heads = H;
  a.kv_heads = KV;
  a.head_dim = hd;
  a.seq = S;
  a.causal = true;
  a.scale = 1.0f / std::sqrt(float(hd));
  a.q_row_stride = a.out_row_stride = H * hd2;
  a.q_head_stride = a.out_head_stride = hd2;
  a.kv_row_stride = KV * hd2;
  a.out_ocm = up64(H * S * hd2);
  a.k_ocm = up64(a.out_ocm + H * S * hd2);
  a.v_ocm = up64(a.k_ocm + S * a.kv_row_stride);
  a.lrm_bytes = budget;
  const uint32_t sums = up64(a.v_ocm + S * a.kv_row_stride);  // [npe][64 B] after the kernel
  Builder b;
  b.li(X{1}, 0x1234567);
  b.op("vsplat", {V{0}, X{1}});
  for (uint32_t off = from; off < lrm; off += 64) b.op("vst", {V{0}, Mem{X{0}, int64_t(off)}});
  emit_attention_ocm(b, cfg, a);
  b.op("vsplati", {V{1}, int64_t(0)});
  for (uint32_t off = from; off < lrm; off += 64) {
    b.op("vld", {V{0}, Mem{X{0}, int64_t(off)}});
    b.op("vadd.i32", {V{1}, V{1}, V{0}});
  }
  b.li(X{1}, sums);
  b.li(X{2}, 64);
  b.op("ogather", {V{1}, Mem{X{1}, 0}, X{2}});
  b.op("halt");
  isa::Program prog = b.finish();
  sim::Platform& p = sim::Platform::get();
  p.configure(cfg, false);
  p.run(prog);
  const uint32_t want = uint32_t(0x1234567u * ((lrm - from) / 64));
  std::vector<uint32_t> got(size_t(cfg.npe()) * 16);
  p.ocm().read(sums, got.data(), got.size() * 4);
  return uint64_t(std::count_if(got.begin(), got.end(), [&](uint32_t v) { return v != want; }));
}

TEST(AttentionOcm, KeepsToItsLrmBudget) {
  EXPECT_EQ(lrm_above_budget_changes(1024), 0u) << "lanes whose LRM above the budget changed";
  EXPECT_GT(lrm_above_budget_changes(0), 0u) << "negative control: with all the LRM the kernel parks above 1,024";
}

TEST(AttentionOcm, NegativeControlNoCausalMaskFailsTheGate) {
  OcmShape s{"mini", 4, 2, 128, 37, true, false};
  OcmRun r = run_ocm(s, false);
  // The same kernel without the mask (what a missing causal mask computes).
  OcmShape full = s;
  full.causal = false;
  OcmRun u = run_ocm(full, false);
  Gate g = gate(u.y, r.ref, r.v);
  EXPECT_FALSE(g.pass()) << "cos " << g.cosine << " max_abs " << g.max_abs;
}

TEST(AttentionOcm, ModelShapeCycles) {
  sim::Config cfg = sim::Config::make("qc-u", {});
  for (OcmShape s : {OcmShape{"qc-u", 16, 8, 128, 128, true, false}, OcmShape{"qc-u", 16, 8, 128, 128, true, true},
                     OcmShape{"qc-u", 16, 16, 64, 256, false, false}, OcmShape{"qc-u", 16, 16, 64, 256, false, true}}) {
    OcmRun t = run_ocm(s, true);
    OcmAttnArgs a;
    a.q_heads = s.q_heads, a.kv_heads = s.kv_heads, a.head_dim = s.head_dim, a.seq = s.seq, a.causal = s.causal;
    double floor = floor_cycles(cfg, cost_attention_ocm(cfg, a));
    std::printf("attention qc-u %s S %u %u/%u x %u (%s): %llu cycles, MAC floor %.0f, ratio %.2f\n",
                s.causal ? "prefill" : "tower", s.seq, s.q_heads, s.kv_heads, s.head_dim,
                s.head_major ? "q/out head-major" : "q/out row-major", (unsigned long long)t.cycles, floor,
                double(t.cycles) / floor);
    EXPECT_GT(t.cycles, floor);
  }
}

}  // namespace
}  // namespace gpnpu::kernels::test
