#include "kernels/attention.h"

#include <algorithm>
#include <functional>
#include <vector>

#include "isa/error.h"
#include "kernels/schedule.h"
#include "sim/machine/memory_map.h"

namespace gpnpu::kernels {

namespace {

constexpr uint32_t kJ = 16;          // keys per block = lanes
constexpr float kNegBig = -1e30f;    // "minus infinity" that keeps exp() finite arithmetic NaN-free

// Vector registers of the decode kernel.
V Q(uint32_t c) { return V{uint8_t(c)}; }        // q, head_dim/16 registers (fp16 low halves)
V ACC(uint32_t c) { return V{uint8_t(8 + c)}; }  // fp32 output accumulator
const V KR[3] = {V{16}, V{17}, V{18}};           // rotating k/v chunk registers
const V A0{19}, A1{20}, T{21}, SV{22}, M{23}, L{24}, LANE{25}, IV{26}, MK{27}, P16{28}, TMP{30};
const V SPL{29}, SPARE{31};  // SPL: the PE's key split

// The decode kernel's block of keys (emit_block below).
struct BlockSpec {
  uint32_t C = 0;                 // head_dim / 16
  float scale = 0;
  int64_t key_stride = 0;         // bytes from one key row to the next
  P mac_pred{0};
  // Chunk c of the current key (address in x13) reaches the PEs in `groups` predicated
  // writes to one register (group s: load(c, s, dst)).
  uint32_t groups = 1;
  std::function<void(uint32_t c, uint32_t s, V dst)> load;
  std::vector<V> pool;  // registers the loads may rotate over (>= 3)
  // After the scores are in the lanes: mask some (the keys a PE's split does not have);
  // before each key's value MACs: set value_pred (x9 = the key in the block).
  std::function<void()> mask_scores, before_value_key;
  P value_pred{0};
};

// Software pipeline of one key's chunks: group s of chunk c loads at step c + d*s and
// chunk c's MAC issues at step c + la. Two writes to one register wait for the first
// one's latency (in-order writes), so the groups of a chunk are spaced d <= 2 steps
// apart (d*groups + 1 registers); with too few registers d = 0 (the writes serialise).
void emit_chunks(Builder&, const BlockSpec& s, const std::function<void()>& after_first_loads,
                 const std::function<void(uint32_t c, V reg)>& mac) {
  const uint32_t C = s.C, ng = s.groups, pool = uint32_t(s.pool.size());
  uint32_t d = 0;
  for (uint32_t dd = 1; dd <= 2; ++dd)
    if (ng * dd + 1 <= pool) d = dd;
  const uint32_t la = std::max(d * ng, std::min(pool - 1, 2u));
  const uint32_t nreg = la + 1;
  const uint32_t steps = C + la;
  for (uint32_t i = 0; i < steps; ++i) {
    for (uint32_t g = 0; g < ng; ++g) {
      const int64_t c = d ? int64_t(i) - int64_t(d * g) : int64_t(i);
      if (c >= 0 && c < int64_t(C)) s.load(uint32_t(c), g, s.pool[size_t(c) % nreg]);
    }
    if (i == 0) after_first_loads();
    int64_t c = int64_t(i) - int64_t(la);
    if (c >= 0 && c < int64_t(C)) mac(uint32_t(c), s.pool[size_t(c) % nreg]);
  }
}

// One block of nk (x8, 1..16) keys whose first K row is at x10 and V row at x12:
// scores into lanes, online-softmax update, V accumulation. Uses x9, x13.
void emit_block(Builder& b, const BlockSpec& s) {
  const uint32_t C = s.C;
  auto insert_prev = [&] {
    b.op("vsplat", {IV, X{9}});
    b.op("vcmpeq.i32", {MK, LANE, IV});
    b.op("vsel", {SV, T, SV, MK});
  };
  // ---- scores: key j's partial sums reduce while key j+1 loads and MACs ----
  b.op("vsplat.f32", {SV, F32{kNegBig}});
  b.op("vsplati", {A0, int64_t(0)});
  b.op("vsplati", {A1, int64_t(0)});
  b.li(X{9}, -1);
  b.op("addi", {X{13}, X{10}, 0});
  b.loop(X{8}, [&] {
    emit_chunks(
        b, s,
        [&] {
          b.op("vadd.f32", {T, A0, A1});
          b.op("vsplati", {A0, int64_t(0)});
          b.op("vsplati", {A1, int64_t(0)});
        },
        [&](uint32_t c, V reg) {
          b.op("vmac.f16", {c % 2 ? A1 : A0, reg, Q(c)}, s.mac_pred);
          if (c == 1) b.op("vredsum.f32", {T, T});
        });
    insert_prev();
    b.op("addi", {X{9}, X{9}, 1});
    b.op("addi", {X{13}, X{13}, s.key_stride});
  });
  b.op("vadd.f32", {T, A0, A1});
  b.op("vredsum.f32", {T, T});
  insert_prev();
  if (s.mask_scores) s.mask_scores();
  // ---- online softmax over the block (lanes = keys) ----
  b.op("vsplat.f32", {TMP, F32{s.scale}});
  b.op("vmul.f32", {SV, SV, TMP});
  b.op("vredmax.f32", {KR[0], SV});
  b.op("vmax.f32", {KR[1], M, KR[0]});  // new running max
  b.op("vsub.f32", {KR[2], M, KR[1]});
  b.op("vexp.f32", {A0, KR[2]});        // rescale of the old state
  b.op("vsub.f32", {KR[2], SV, KR[1]});
  b.op("vexp.f32", {A1, KR[2]});        // p of the block's keys (0 for masked lanes)
  b.op("vredsum.f32", {T, A1});
  b.op("vmul.f32", {L, L, A0});
  b.op("vadd.f32", {L, L, T});
  for (uint32_t c = 0; c < C; ++c) b.op("vmul.f32", {ACC(c), ACC(c), A0});
  b.op("vcvt.f16.f32", {P16, A1});
  b.op("vmov", {M, KR[1]});
  // ---- values: p_j (fp16) spread over the lanes (one non-zero lane summed), MAC the V row ----
  b.li(X{9}, 0);
  b.op("addi", {X{13}, X{12}, 0});
  b.op("vsplati", {TMP, int64_t(0)});
  b.loop(X{8}, [&] {
    if (s.before_value_key) s.before_value_key();
    b.op("vsplat", {IV, X{9}});
    b.op("vcmpeq.i32", {MK, LANE, IV});
    b.op("vsel", {T, P16, TMP, MK});
    emit_chunks(
        b, s, [&] { b.op("vredsum.i32", {T, T}); },
        [&](uint32_t c, V reg) { b.op("vmac.f16", {ACC(c), reg, T}, s.value_pred.n ? s.value_pred : s.mac_pred); });
    b.op("addi", {X{9}, X{9}, 1});
    b.op("addi", {X{13}, X{13}, s.key_stride});
  });
}

void init_state(Builder& b, uint32_t C) {
  for (uint32_t c = 0; c < C; ++c) b.op("vsplati", {ACC(c), int64_t(0)});
  b.op("vsplat.f32", {M, F32{kNegBig}});
  b.op("vsplati", {L, int64_t(0)});
}

// out = acc / l, rounded to fp16 (low halves of ACC).
void normalise(Builder& b, uint32_t C) {
  b.op("vrcp.f32", {T, L});
  for (uint32_t c = 0; c < C; ++c) b.op("vmul.f32", {ACC(c), ACC(c), T});
  for (uint32_t c = 0; c < C; ++c) b.op("vcvt.f16.f32", {ACC(c), ACC(c)});
}

void check_heads(const char* what, uint32_t qh, uint32_t kvh, uint32_t hd) {
  if (qh == 0 || kvh == 0 || qh % kvh) fail("{}: q heads {} must be a positive multiple of kv heads {}", what, qh, kvh);
  if (hd == 0 || hd % 32 || hd > 128) fail("{}: head_dim {} must be a multiple of 32, at most 128", what, hd);
}

// Key splits of the decode kernel (flash decoding): NS groups of q_heads PEs, each with a
// block of 16 keys a round and its own softmax state, merged at the end. As many as the
// PEs allow (at most 4: then the array keeps up with a 128 GB/s port), fewer when their
// DMA slots would not fit the scratch the caller gives (a.scratch_bytes).
struct DecodeLayout {
  uint32_t ns = 1;                // splits
  uint32_t pad = 0;               // before the slots: the scatter bases of the G PE groups stay >= 0
  uint32_t slot = 0;              // one round's K and V: [split][kv head][16 keys][head_dim], K then V
  uint32_t merge = 0;             // the splits' state for the merge: (C + 2) x NS x H x 64 bytes
  uint32_t bytes() const { return pad + 2 * slot + merge; }
};
DecodeLayout decode_layout(const sim::Config& cfg, const DecodeAttnArgs& a) {
  const uint32_t H = std::max(a.q_heads, 1u), KV = std::max(a.kv_heads, 1u), G = std::max(H / KV, 1u);
  const uint32_t P_ = kJ * a.head_dim * 2, C = a.head_dim / 16;
  DecodeLayout l;
  // G <= 4 with splits: p5 is the split predicates' temporary.
  for (l.ns = G > 4 ? 1 : std::max(1u, std::min(4u, cfg.npe() / H));; l.ns /= 2) {
    const uint32_t need_base = (G - 1) * l.ns * KV * P_;
    l.pad = a.scratch_ocm >= need_base ? 0 : need_base - a.scratch_ocm;
    l.slot = 2 * l.ns * KV * P_;
    l.merge = l.ns > 1 ? (C + 2) * l.ns * H * 64 : 0;
    if (l.ns == 1 || l.bytes() <= a.scratch_bytes) break;
  }
  return l;
}

}  // namespace

// ================================ KV-cache append ================================

void emit_kv_write(Builder& b, const sim::Config& cfg, const KvWriteArgs& a) {
  if (a.kv_heads == 0 || a.head_dim == 0 || a.rows == 0) fail("kv_write: kv_heads, head_dim and rows must be positive");
  if (a.row_stride < a.kv_heads * a.head_dim * 2) fail("kv_write: row stride {} < {} heads x {} fp16", a.row_stride, a.kv_heads, a.head_dim);
  if (!a.write_k && !a.write_v) fail("kv_write: neither k nor v to write (write_k, write_v)");
  const uint32_t hd2 = a.head_dim * 2;
  // Channels 2 and 3, past the GEMMs' first units on channels 0 and 1 (a dma.wait there would
  // also wait for a cache write still in flight).
  const uint8_t chK = uint8_t(2 % cfg.dma_channels), chV = uint8_t(3 % cfg.dma_channels);
  // One 3-D descriptor per tensor: planes = kv heads, rows = new rows.
  b.descriptor(a.smem, sim::ocm_addr(a.k_ocm), 0, hd2, a.rows, a.row_stride, hd2, a.kv_heads, hd2, a.max_seq * hd2);
  b.descriptor(a.smem + 64, sim::ocm_addr(a.v_ocm), 0, hd2, a.rows, a.row_stride, hd2, a.kv_heads, hd2, a.max_seq * hd2);
  b.op("lw", {X{1}, Mem{X{0}, a.pos_smem}});
  b.op("muli", {X{1}, X{1}, hd2});
  b.li(X{2}, a.k_cache_ddr);
  b.op("add", {X{2}, X{2}, X{1}});
  b.op("sw", {X{2}, Mem{X{0}, a.smem + 4}});
  b.li(X{2}, a.v_cache_ddr);
  b.op("add", {X{2}, X{2}, X{1}});
  b.op("sw", {X{2}, Mem{X{0}, a.smem + 64 + 4}});
  if (a.write_k) {
    b.li(X{3}, a.smem);
    b.op("dma.start", {Chan{chK}, X{3}});
  }
  if (a.write_v) {
    b.li(X{3}, a.smem + 64);
    b.op("dma.start", {Chan{chV}, X{3}});
  }
  // The decode attention that follows reads the new slot from DDR: finish here.
  if (a.wait) emit_kv_write_wait(b, cfg);
}

void emit_kv_write_wait(Builder& b, const sim::Config& cfg) {
  b.op("dma.wait", {Chan{uint8_t(2 % cfg.dma_channels)}});
  b.op("dma.wait", {Chan{uint8_t(3 % cfg.dma_channels)}});
}

KernelCost cost_kv_write(const sim::Config&, const KvWriteArgs& a) {
  KernelCost c;
  c.ddr_bytes = uint64_t(a.rows) * a.kv_heads * a.head_dim * 2 * (int(a.write_k) + int(a.write_v));
  return c;
}

// ================================ decode ================================

uint32_t attention_decode_scratch_bytes(const sim::Config& cfg, const DecodeAttnArgs& a) {
  return decode_layout(cfg, a).bytes();
}

void emit_attention_decode(Builder& b, const sim::Config& cfg, const DecodeAttnArgs& a) {
  check_heads("attention_decode", a.q_heads, a.kv_heads, a.head_dim);
  const uint32_t H = a.q_heads, KV = a.kv_heads, G = H / KV, hd2 = a.head_dim * 2, C = a.head_dim / 16;
  if (H > cfg.npe()) fail("attention_decode: {} query heads need {} PEs, the array has {}", H, H, cfg.npe());
  if (G > 5) fail("attention_decode: GQA group {} > 5 (one predicate per group member)", G);
  const DecodeLayout lay = decode_layout(cfg, a);
  const uint32_t NS = lay.ns, P_ = kJ * hd2, SB = KV * P_, R = NS * kJ;  // R: keys a round
  if (lay.bytes() > a.scratch_bytes)
    fail("attention_decode: needs {} bytes of OCM scratch (2 slots x K,V x {} splits x {} heads x {} keys x {} B, merge {}), has {}",
         lay.bytes(), NS, KV, kJ, hd2, lay.merge, a.scratch_bytes);
  // PE e = s*NS*KV + sp*KV + g: query head g*G + s, split sp (its keys at sp*SB + g*P in the slot).
  const uint32_t base = a.scratch_ocm + lay.pad;
  auto kslot = [&](uint32_t s) { return base + s * lay.slot; };
  auto vslot = [&](uint32_t s) { return base + s * lay.slot + NS * SB; };
  const uint32_t merge = base + 2 * lay.slot;
  auto pe = [&](uint32_t s, uint32_t sp, uint32_t g) { return s * NS * KV + sp * KV + g; };
  const uint32_t nch = uint32_t(cfg.dma_channels);
  auto chK = [&](uint32_t s) { return Chan{uint8_t((2 * s) % nch)}; };
  auto chV = [&](uint32_t s) { return Chan{uint8_t((2 * s + 1) % nch)}; };
  auto dK = [&](uint32_t s) { return a.smem + (2 * s) * 64; };
  auto dV = [&](uint32_t s) { return a.smem + (2 * s + 1) * 64; };

  // ---- prologue ----
  // Round descriptors: planes = kv heads, rows = splits (16 keys each); the source,
  // destination, row bytes and rows are set per round (a short last block: a second start).
  for (uint32_t s = 0; s < 2; ++s) {
    b.descriptor(dK(s), 0, 0, P_, 1, P_, SB, KV, a.max_seq * hd2, P_);
    b.descriptor(dV(s), 0, 0, P_, 1, P_, SB, KV, a.max_seq * hd2, P_);
  }
  b.op("lw", {X{1}, Mem{X{0}, a.len_smem}});
  b.li(X{2}, 0);  // next key to fetch
  b.li(X{3}, 0);  // next key to consume
  b.li(X{4}, a.k_cache_ddr);
  b.li(X{5}, a.v_cache_ddr);
  b.li(X{11}, P_);
  b.li(X{15}, kJ);  // keys of the next round to fetch
  b.li(X{29}, kJ);  // and to consume
  b.li(X{16}, hd2);
  // A round of v keys (at most x15: 16 in the first round, so that the first compute
  // starts early, then NS x 16) gives each split kb = ceil(v / NS) consecutive keys.
  uint32_t log2ns = 0;
  while ((1u << log2ns) < NS) ++log2ns;
  // Keys of the next round from those left (x1 - next) and the cap: all of them when at
  // most 16 + NS - 1 are left (the last round: short, its compute is exposed after the
  // last byte), else at most the cap and 16 fewer than left, a multiple of NS (whole
  // split blocks: a second, short descriptor would be queued behind the next round's).
  auto round_keys = [&](X v, X next, X cap, X tmp) {
    Label keep = b.label();
    b.op("sub", {v, X{1}, next});
    b.op("addi", {tmp, v, -int64_t(kJ + NS - 1)});
    b.op("bge", {X{0}, tmp, keep});
    b.op("addi", {tmp, v, -int64_t(kJ)});
    b.op("min", {v, tmp, cap});
    b.op("andi", {v, v, -int64_t(NS)});
    b.bind(keep);
  };
  auto round_shape = [&](X v, X kb) {
    b.op("addi", {kb, v, int64_t(NS - 1)});
    b.op("srli", {kb, kb, int64_t(log2ns)});
  };
  auto issue = [&](uint32_t s) {
    Label skip = b.label();
    b.op("bge", {X{2}, X{1}, skip});
    round_keys(X{17}, X{2}, X{15}, X{23});
    b.li(X{15}, R);
    round_shape(X{17}, X{19});
    b.op("divu", {X{18}, X{17}, X{19}});  // splits with kb keys
    b.op("mul", {X{21}, X{18}, X{19}});
    b.op("sub", {X{22}, X{17}, X{21}});   // keys of the next split (< kb)
    b.op("mul", {X{19}, X{19}, X{16}});   // kb rows in bytes
    for (uint32_t kv = 0; kv < 2; ++kv) {  // K, V
      const uint32_t d = kv ? dV(s) : dK(s), dst = kv ? vslot(s) : kslot(s);
      const X src{uint8_t(kv ? 5 : 4)};
      const Chan ch = kv ? chV(s) : chK(s);
      Label nf = b.label(), nt = b.label();
      b.op("beq", {X{18}, X{0}, nf});
      b.op("sw", {src, Mem{X{0}, d}});
      b.li(X{20}, sim::ocm_addr(dst));
      b.op("sw", {X{20}, Mem{X{0}, d + 4}});
      b.op("sw", {X{19}, Mem{X{0}, d + 8}});
      b.op("sw", {X{18}, Mem{X{0}, d + 12}});
      b.op("sw", {X{19}, Mem{X{0}, d + 16}});
      b.li(X{20}, d);
      b.op("dma.start", {ch, X{20}});
      b.bind(nf);
      b.op("beq", {X{22}, X{0}, nt});
      b.op("mul", {X{21}, X{18}, X{19}});
      b.op("add", {X{20}, src, X{21}});
      b.op("sw", {X{20}, Mem{X{0}, d}});
      b.op("muli", {X{21}, X{18}, SB});
      b.li(X{20}, sim::ocm_addr(dst));
      b.op("add", {X{20}, X{20}, X{21}});
      b.op("sw", {X{20}, Mem{X{0}, d + 4}});
      b.op("mul", {X{20}, X{22}, X{16}});
      b.op("sw", {X{20}, Mem{X{0}, d + 8}});
      b.li(X{20}, 1);
      b.op("sw", {X{20}, Mem{X{0}, d + 12}});
      b.li(X{20}, d);
      b.op("dma.start", {ch, X{20}});
      b.bind(nt);
    }
    b.op("mul", {X{18}, X{17}, X{16}});
    b.op("add", {X{4}, X{4}, X{18}});
    b.op("add", {X{5}, X{5}, X{18}});
    b.op("add", {X{2}, X{2}, X{17}});
    b.bind(skip);
  };
  // Fewer than four DMA channels: the slots' rounds share one (dma.wait waits for every
  // descriptor queued on a channel), so the next round is issued only once this one has
  // arrived, before its compute; with four or more, two rounds in flight from the start.
  const bool shared = nch < 4;
  issue(0);
  if (!shared) issue(1);
  for (uint32_t s = 0; s < G; ++s) {
    b.li(X{20}, pe(s, 0, 0));
    b.li(X{21}, pe(s + 1, 0, 0));
    b.op("pset.range", {P{uint8_t(1 + s)}, X{20}, X{21}});
  }
  b.li(X{20}, H * NS);
  b.op("pset.range", {P{7}, X{0}, X{20}});
  // q: PE (s, sp, g) gets head g*G + s (one PE per broadcast); SPL = sp.
  auto per_pe = [&](uint32_t nsplits, const std::function<void()>& body) {
    for (uint32_t s = 0; s < G; ++s)
      for (uint32_t sp = 0; sp < nsplits; ++sp) {
        b.li(X{24}, a.q_ocm + s * hd2);  // head g*G + s for g = 0
        b.li(X{21}, pe(s, sp, 0));
        b.li(X{23}, KV);
        b.loop(X{23}, [&] {
          b.op("addi", {X{25}, X{21}, 1});
          b.op("pset.range", {P{6}, X{21}, X{25}});
          body();
          b.op("addi", {X{24}, X{24}, int64_t(G) * hd2});
          b.op("addi", {X{21}, X{21}, 1});
        });
      }
  };
  per_pe(NS, [&] {
    for (uint32_t c = 0; c < C; ++c) b.op("obcast.h", {Q(c), Mem{X{24}, 32 * c}}, P{6});
  });
  for (uint32_t s = 0; s < G; ++s)
    for (uint32_t sp = 0; sp < NS; ++sp) {
      b.li(X{20}, pe(s, sp, 0));
      b.li(X{21}, pe(s, sp + 1, 0));
      b.op("pset.range", {P{6}, X{20}, X{21}});
      b.op("vsplati", {SPL, int64_t(sp)}, P{6});
    }
  init_state(b, C);
  b.op("vlaneid", {LANE});

  BlockSpec bs;
  bs.C = C;
  bs.scale = a.scale;
  bs.key_stride = hd2;
  bs.mac_pred = P{7};
  bs.groups = G;
  bs.pool = {KR[0], KR[1], KR[2], SPARE};
  bs.load = [&](uint32_t c, uint32_t s, V dst) {
    // PE (s, sp, g) reads slot + sp*SB + g*P + key*hd2: base x13 - s*NS*SB (>= 0 by the pad).
    b.op("oscatter.h", {dst, Mem{X{13}, int64_t(32 * c) - int64_t(s) * NS * SB}, X{11}}, P{uint8_t(1 + s)});
  };
  if (NS > 1) {
    // Keys a split does not have this round (x7 keys, x6 = kb a split): lanes >= x7 - kb*sp.
    bs.mask_scores = [&] {
      b.op("vsplat", {IV, X{6}});
      b.op("vmul.i32", {IV, IV, SPL});
      b.op("vsplat", {MK, X{7}});
      b.op("vsub.i32", {IV, MK, IV});
      b.op("vcmplt.i32", {MK, LANE, IV});
      b.op("vsplat.f32", {TMP, F32{kNegBig}});
      b.op("vsel", {SV, SV, TMP, MK});
    };
    // Value MACs of key x9 only in the splits that have it: sp < ceil((x7 - x9) / kb).
    bs.value_pred = P{6};
    bs.before_value_key = [&] {
      b.op("sub", {X{27}, X{7}, X{9}});
      b.op("add", {X{27}, X{27}, X{6}});
      b.op("addi", {X{27}, X{27}, -1});
      b.op("divu", {X{27}, X{27}, X{6}});
      b.op("muli", {X{27}, X{27}, KV});
      for (uint32_t s = 0; s < G; ++s) {
        if (s) b.op("addi", {X{27}, X{27}, int64_t(NS) * KV});
        b.li(X{28}, pe(s, 0, 0));
        b.op("pset.range", {P{uint8_t(s ? 5 : 6)}, X{28}, X{27}});
        if (s) b.op("por", {P{6}, P{6}, P{5}});
      }
    };
  }

  // ---- main loop: slot 0, slot 1, ... ----
  Label round = b.label(), done = b.label(), block = b.label();
  b.bind(round);
  for (uint32_t s = 0; s < 2; ++s) {
    b.op("bge", {X{3}, X{1}, done});
    b.op("dma.wait", {chK(s)});
    b.op("dma.wait", {chV(s)});
    if (shared) issue(1 - s);  // (slot 1 - s: its round consumed in the last iteration)
    b.li(X{10}, kslot(s));
    b.li(X{12}, vslot(s));
    round_keys(X{7}, X{3}, X{29}, X{24});
    b.li(X{29}, R);
    round_shape(X{7}, X{6});           // keys of split 0 (the most)
    b.op("addi", {X{8}, X{6}, 0});
    if (a.after_last_fetch) {  // (the last round: x3 + x7 reaches L)
      Label more = b.label();
      b.op("add", {X{24}, X{3}, X{7}});
      b.op("blt", {X{24}, X{1}, more});
      a.after_last_fetch();
      b.bind(more);
    }
    b.op("jal", {X{14}, block});
    b.op("add", {X{3}, X{3}, X{7}});
    if (!shared) issue(s);
  }
  b.op("jal", {X{0}, round});
  b.bind(block);
  emit_block(b, bs);
  b.op("jalr", {X{0}, X{14}, 0});

  // ---- epilogue: merge the splits into split 0, normalise, one gather per PE ----
  b.bind(done);
  if (NS > 1) {
    std::vector<V> state = {M, L};
    for (uint32_t c = 0; c < C; ++c) state.push_back(ACC(c));
    const V M2 = KR[0], L2 = KR[1], MN = KR[2], E1 = A0, E2 = A1;
    const V A2[8] = {T, SV, IV, MK, P16, TMP, SPL, SPARE};
    b.li(X{11}, 64);
    for (size_t r = 0; r < state.size(); ++r) {  // every PE's state at merge + (r*NS*H + e)*64
      b.li(X{13}, merge + r * NS * H * 64);
      b.op("ogather", {state[r], Mem{X{13}, 0}, X{11}}, P{7});
    }
    // split 0's PEs: (s, 0, g) for every s
    for (uint32_t s = 0; s < G; ++s) {
      b.li(X{20}, pe(s, 0, 0));
      b.li(X{21}, pe(s, 1, 0));
      b.op("pset.range", {P{uint8_t(s ? 5 : 6)}, X{20}, X{21}});
      if (s) b.op("por", {P{6}, P{6}, P{5}});
    }
    for (uint32_t sp = 1; sp < NS; ++sp) {
      for (size_t r = 0; r < state.size(); ++r) {
        b.li(X{13}, merge + r * NS * H * 64 + sp * KV * 64);
        b.op("oscatter", {r == 0 ? M2 : r == 1 ? L2 : A2[r - 2], Mem{X{13}, 0}, X{11}}, P{6});
      }
      // (only in split 0's PEs: the others' temporaries hold no state)
      b.op("vmax.f32", {MN, M, M2}, P{6});
      b.op("vsub.f32", {E1, M, MN}, P{6});
      b.op("vexp.f32", {E1, E1}, P{6});
      b.op("vsub.f32", {E2, M2, MN}, P{6});
      b.op("vexp.f32", {E2, E2}, P{6});
      b.op("vmul.f32", {L, L, E1}, P{6});
      b.op("vmla.f32", {L, L2, E2}, P{6});
      for (uint32_t c = 0; c < C; ++c) {
        b.op("vmul.f32", {ACC(c), ACC(c), E1}, P{6});
        b.op("vmla.f32", {ACC(c), A2[c], E2}, P{6});
      }
      b.op("vmov", {M, MN}, P{6});
    }
  }
  normalise(b, C);
  per_pe(1, [&] {
    for (uint32_t c = 0; c < C; ++c) b.op("ogather.h", {ACC(c), Mem{X{24}, int64_t(a.out_ocm) - int64_t(a.q_ocm) + 32 * c}, X{0}}, P{6});
  });
}

KernelCost cost_attention_decode(const sim::Config&, const DecodeAttnArgs& a, uint32_t len) {
  KernelCost c;
  c.ddr_bytes = uint64_t(len) * a.kv_heads * a.head_dim * 2 * 2;
  c.macs = uint64_t(len) * a.q_heads * a.head_dim * 2;
  return c;
}

// ================================ OCM attention ================================

OcmAttnTiling plan_attention_ocm(const sim::Config& cfg, const OcmAttnArgs& a) {
  const uint32_t npe = cfg.npe(), KV = a.kv_heads, G = a.q_heads / KV, S = a.seq;
  const uint32_t cap = a.max_groups ? std::min(KV, a.max_groups) : KV;
  // R rows of up to g groups a pass, the groups spread evenly over the fewest passes.
  auto tiling = [&](uint32_t g) {
    const uint32_t group_passes = (KV + g - 1) / g, gp = (KV + group_passes - 1) / group_passes;
    OcmAttnTiling t{std::min(S, npe / (G * gp)), gp, 0};
    double work = 0;
    for (uint32_t r0 = 0; r0 < S; r0 += t.rows)
      work += double(a.kv_offset + (a.causal ? std::min(S, r0 + t.rows) : S));
    t.work = work * group_passes;
    return t;
  };
  // The most groups a pass of min(S, npe / G) rows holds; fewer rows a pass and more
  // groups when that is less work (causal passes over the first rows see fewer keys).
  OcmAttnTiling best = tiling(std::max(1u, std::min(cap, npe / (G * std::min(S, npe / G)))));
  for (uint32_t g = 1; g <= cap && npe / (G * g) > 0; ++g) {
    const OcmAttnTiling t = tiling(g);
    if (t.work < best.work * 0.98) best = t;
  }
  return best;
}

void emit_attention_ocm(Builder& b, const sim::Config& cfg, const OcmAttnArgs& a) {
  check_heads("attention_ocm", a.q_heads, a.kv_heads, a.head_dim);
  const uint32_t H = a.q_heads, KV = a.kv_heads, G = H / KV, S = a.seq, hd2 = a.head_dim * 2, CH = a.head_dim / 32;
  const uint32_t npe = cfg.npe();
  if (S == 0) fail("attention_ocm: seq must be positive");
  if (G > npe) fail("attention_ocm: GQA group {} exceeds the {} PEs", G, npe);
  if (a.kv_row_stride < KV * hd2) fail("attention_ocm: kv row stride {} < {} heads x {} B", a.kv_row_stride, KV, hd2);
  // Tiling rule: R rows of GP kv groups per pass, the groups spread evenly over the fewest
  // passes; the pass's PEs in p7 (group gl's G*R of them from gl*G*R on).
  const OcmAttnTiling tiling = plan_attention_ocm(cfg, a);
  const uint32_t R = tiling.rows, GP = tiling.groups;

  struct Pass {
    uint32_t r0, nrows, g0, ng;
  };
  std::vector<Pass> passes;
  for (uint32_t r0 = 0; r0 < S; r0 += R)
    for (uint32_t g0 = 0; g0 < KV; g0 += GP) passes.push_back({r0, std::min(R, S - r0), g0, std::min(GP, KV - g0)});

  // Key splits: where a pass takes at most half the PEs (the 2B prefill's 128 rows x 16 heads
  // on 64x64), each (row, head) gets two PEs side by side, the even one the pass's first half of
  // the keys and the odd one the second half, each with its own softmax state, merged in the
  // pass end (the east neighbour's state, rescaled to the pair's max): half the blocks a pass.
  // Causal passes only (a row whose half holds no key of its own gets exp(-big) = 0 at the
  // merge), each with an even key count (both halves the same blocks, none past the last key),
  // in rows of whole pairs (even pe_cols).
  auto pass_keys = [&](const Pass& p) { return a.kv_offset + (a.causal ? std::min(S, p.r0 + p.nrows) : S); };
  bool split = a.causal && cfg.pe_cols % 2 == 0 && 2 * GP * G * R <= npe && a.q_row_stride % 2 == 0 &&
               a.out_row_stride % 2 == 0;
  for (const Pass& p : passes) split = split && pass_keys(p) % 2 == 0 && pass_keys(p) >= 2 * kJ;
  const uint32_t NS = split ? 2 : 1;
  // q is read and the output written where they are, a sub-group's rows by one strided
  // oscatter / ogather per 64-byte chunk from a base sub R rows' strides below its first
  // row (OCM addresses wrap at 32 bits, so such a base below 0 is fine).
  const uint32_t qb = a.q_ocm, qrs = a.q_row_stride, qhs = a.q_head_stride;
  const uint32_t ob = a.out_ocm, ors = a.out_row_stride, ohs = a.out_head_stride;

  // ---- registers ----
  // Each 64-byte chunk c of a row holds dims 32c + 2i (low half) and 32c + 2i + 1 (high
  // half) in lane i: q as loaded (QR, its low halves the even dims) and shifted right
  // by 16 (QS, the odd dims); the output accumulates the even dims in AE, the odd in AO.
  uint8_t next_reg = 0;
  auto take = [&] { return V{next_reg++}; };
  std::vector<V> QR, QS, AE, AO;
  for (uint32_t c = 0; c < CH; ++c) QR.push_back(take()), QS.push_back(take());
  for (uint32_t c = 0; c < CH; ++c) AE.push_back(take()), AO.push_back(take());
  const V M_ = take(), L_ = take(), SV_ = take(), P16_ = take(), LANE_ = take();
  const V RV_ = a.causal ? take() : V{0};
  std::vector<V> free_regs;
  while (next_reg < 32) free_regs.push_back(take());
  // With few free registers, q is parked in LRM during the value loop and the
  // accumulators during the score loop, each loop using the other's registers, and
  // each block is one scheduled region. With enough registers the regions are software
  // pipelined instead: block b's values run in one region with block b+1's scores and
  // softmax (disjoint register pools), so neither phase's start-up or tail is exposed.
  const uint32_t park_bytes = 2 * 2 * CH * 64, mask_bytes = kJ * 64;
  const uint32_t lrm = a.lrm_bytes ? std::min(a.lrm_bytes, uint32_t(cfg.lrm_bytes)) : uint32_t(cfg.lrm_bytes);
  const bool swap = free_regs.size() < 12 && lrm >= park_bytes;
  const bool pipelined = free_regs.size() >= 16;
  const bool lrm_masks = lrm >= mask_bytes + (swap ? park_bytes : 0);
  const uint32_t kLrmQ = lrm_masks ? mask_bytes : 0, kLrmAcc = kLrmQ + 2 * CH * 64;
  if (!a.causal && lrm_masks) free_regs.insert(free_regs.begin(), LANE_);  // only the prologue needs it
  // The block's scores (pipelined: copied, as the next block's scores refill SV while
  // this block's softmax runs) and three softmax temporaries, apart from the pools.
  auto take_free = [&] {
    V r = free_regs.back();
    free_regs.pop_back();
    return r;
  };
  const V SVP_ = pipelined ? take_free() : SV_;
  const std::vector<V> tmp = pipelined ? std::vector<V>{take_free(), take_free(), take_free()}
                                        : std::vector<V>(free_regs.end() - 3, free_regs.end());

  struct Pools {
    std::vector<V> kr, ks, acc, t, mk;  // chunk loads, their shifted copies, per-key registers
    uint32_t nkr = 0, nks = 0;          // rotation counters
  };
  auto make_pools = [&](std::vector<V> regs, bool scores) {
    Pools p;
    auto grab = [&](std::vector<V>& dst, size_t n) {
      for (size_t k = 0; k < n && !regs.empty(); ++k) dst.push_back(regs.front()), regs.erase(regs.begin());
    };
    const bool wide = regs.size() >= 14;
    grab(p.acc, wide ? 3 : 2);
    if (scores) {
      grab(p.t, wide ? 2 : 1);
      grab(p.mk, (wide ? 2 : 1) + (lrm_masks ? 0 : 1));  // without LRM masks: mk[last] is the lane index splat
    }
    const size_t nks = std::max<size_t>(1, regs.size() / 4);
    grab(p.ks, nks);
    p.kr = regs;
    if (p.kr.empty() || p.ks.empty() || p.acc.size() < 2) fail("attention_ocm: internal: too few registers");
    return p;
  };
  std::vector<V> regs_s = free_regs, regs_v = free_regs;
  if (swap) {
    regs_s.insert(regs_s.end(), AE.begin(), AE.end()), regs_s.insert(regs_s.end(), AO.begin(), AO.end());
    regs_v.insert(regs_v.end(), QR.begin(), QR.end()), regs_v.insert(regs_v.end(), QS.begin(), QS.end());
  }
  if (pipelined) {  // the value pool first, the score pool (with the softmax temporaries) last
    const size_t nv = free_regs.size() * 9 / 19;
    regs_v.assign(free_regs.begin(), free_regs.begin() + nv);
    regs_s.assign(free_regs.begin() + nv, free_regs.end());
  }
  Pools ps = make_pools(regs_s, true), pv = make_pools(regs_v, false);
  // A pipelined pass's first scores and last values run alone: they take both pools.
  std::vector<V> regs_all = regs_s;
  if (pipelined) regs_all.insert(regs_all.end(), regs_v.begin(), regs_v.end());
  Pools ps_all = make_pools(regs_all, true), pv_all = make_pools(regs_all, false);

  const int64_t ks = a.kv_row_stride;
  // One chunk of a key row (base register x10 or x12) in the PEs of every group: one grouped
  // broadcast (each group's row hd2 bytes on: x22, G*R PEs a group: x23), then its odd dims
  // shifted.
  auto load_chunk = [&](Pools& p, X base, uint32_t key, uint32_t c, V& raw, V& odd) {
    raw = p.kr[p.nkr++ % p.kr.size()];
    odd = p.ks[p.nks++ % p.ks.size()];
    const Mem row{base, int64_t(key) * ks + 64 * c};
    // (split: the even PEs' key from base, the odd PEs' from the second half's base, x24 / x25)
    const Mem row2{X{uint8_t(base.n == 10 ? 24 : 25)}, int64_t(key) * ks + 64 * c};
    for (uint32_t s2 = 0; s2 < NS; ++s2) {
      const P pp = split ? P{uint8_t(4 + s2)} : P{7};
      if (GP > 1) b.op("obcast.g", {raw, s2 ? row2 : row, X{22}, X{23}}, pp);
      else b.op("obcast", {raw, s2 ? row2 : row}, pp);
    }
    b.op("vshr", {odd, raw, int64_t(16)});
  };
  const P mac{7};  // the pass's PEs

  // Scores of a block of nk keys (K rows from x10, advanced 16 rows) into the lanes of SV
  // (lanes >= nk stay -big).
  auto emit_scores = [&](uint32_t nk, Pools& ps) {
    b.op("vsplat.f32", {SV_, F32{kNegBig}});
    if (swap)
      for (uint32_t c = 0; c < CH; ++c) {
        b.op("vld", {QR[c], Mem{X{0}, int64_t(kLrmQ + 128 * c)}});
        b.op("vld", {QS[c], Mem{X{0}, int64_t(kLrmQ + 128 * c + 64)}});
      }
    for (uint32_t j = 0; j < nk; ++j) {
      const V acc = ps.acc[j % ps.acc.size()];
      b.op("vsplati", {acc, int64_t(0)});
      for (uint32_t c = 0; c < CH; ++c) {
        V raw, odd;
        load_chunk(ps, X{10}, j, c, raw, odd);
        b.op("vmac.f16", {acc, raw, QR[c]}, mac);
        b.op("vmac.f16", {acc, odd, QS[c]}, mac);
      }
      const V t = ps.t[j % ps.t.size()];
      b.op("vredsum.f32", {t, acc});
      V mk;
      if (lrm_masks) {
        mk = ps.mk[j % ps.mk.size()];
        b.op("vld", {mk, Mem{X{0}, int64_t(64 * j)}});
      } else {
        mk = ps.mk[0];
        b.op("vsplati", {ps.mk.back(), int64_t(j)});
        b.op("vcmpeq.i32", {mk, LANE_, ps.mk.back()});
      }
      b.op("vsel", {SV_, t, SV_, mk});
    }
    b.op("addi", {X{10}, X{10}, int64_t(kJ) * ks});
    if (split) b.op("addi", {X{24}, X{24}, int64_t(kJ) * ks});
    if (a.causal) {  // lanes (keys) beyond this PE's row: score -> -big; RV moves to the next block
      b.op("vsplat.f32", {ps.t[0], F32{kNegBig}});
      b.op("vcmplt.i32", {ps.mk[0], RV_, LANE_});
      b.op("vsel", {SV_, ps.t[0], SV_, ps.mk[0]});
      b.op("vsplati", {ps.acc[0], int64_t(kJ)});
      b.op("vsub.i32", {RV_, RV_, ps.acc[0]});
    }
  };
  // The online-softmax update of a block whose scores are in sv (lanes >= its keys -big):
  // running max and sum, the accumulators rescaled, p (fp16) in P16.
  auto emit_softmax = [&](V sv) {
    if (swap)
      for (uint32_t c = 0; c < CH; ++c) {
        b.op("vld", {AE[c], Mem{X{0}, int64_t(kLrmAcc + 128 * c)}});
        b.op("vld", {AO[c], Mem{X{0}, int64_t(kLrmAcc + 128 * c + 64)}});
      }
    b.op("vsplat.f32", {tmp[0], F32{a.scale}});
    b.op("vmul.f32", {sv, sv, tmp[0]});
    b.op("vredmax.f32", {tmp[1], sv});
    b.op("vmax.f32", {tmp[2], M_, tmp[1]});  // new running max
    b.op("vsub.f32", {tmp[1], M_, tmp[2]});
    b.op("vexp.f32", {tmp[0], tmp[1]});      // rescale of the old state
    b.op("vsub.f32", {sv, sv, tmp[2]});
    b.op("vmov", {M_, tmp[2]});
    b.op("vexp.f32", {sv, sv});              // p of the block's keys (0 for masked lanes)
    b.op("vredsum.f32", {tmp[1], sv});
    b.op("vmul.f32", {L_, L_, tmp[0]});
    b.op("vadd.f32", {L_, L_, tmp[1]});
    for (uint32_t c = 0; c < CH; ++c) {
      b.op("vmul.f32", {AE[c], AE[c], tmp[0]});
      b.op("vmul.f32", {AO[c], AO[c], tmp[0]});
    }
    b.op("vcvt.f16.f32", {P16_, sv});
  };
  // Values of a block of nk keys (V rows from x12, advanced 16 rows): p_j (fp16, lane j
  // of p16) in every lane, MAC the V row.
  auto emit_values = [&](uint32_t nk, V p16, Pools& pv) {
    for (uint32_t j = 0; j < nk; ++j) {
      const V pj = pv.acc[j % pv.acc.size()];
      b.op("vdup", {pj, p16, int64_t(j)});
      for (uint32_t c = 0; c < CH; ++c) {
        V raw, odd;
        load_chunk(pv, X{12}, j, c, raw, odd);
        b.op("vmac.f16", {AE[c], raw, pj}, mac);
        b.op("vmac.f16", {AO[c], odd, pj}, mac);
      }
    }
    b.op("addi", {X{12}, X{12}, int64_t(kJ) * ks});
    if (split) b.op("addi", {X{25}, X{25}, int64_t(kJ) * ks});
    if (swap)
      for (uint32_t c = 0; c < CH; ++c) {
        b.op("vst", {AE[c], Mem{X{0}, int64_t(kLrmAcc + 128 * c)}});
        b.op("vst", {AO[c], Mem{X{0}, int64_t(kLrmAcc + 128 * c + 64)}});
      }
  };
  // A block routine, one scheduled region: pipelined, the softmax and values of the
  // previous block (np keys, 0: none) and the scores of this one (nk keys, 0: none);
  // else one whole block (np = nk).
  auto emit_block_body = [&](uint32_t np, uint32_t nk) {
    if (!pipelined) {  // one block: scores, softmax, values
      emit_scores(nk, ps);
      emit_softmax(SV_);
      emit_values(nk, P16_, pv);
    } else {  // the previous block's softmax and values beside this block's scores
      if (np && nk) b.op("vmov", {SVP_, SV_});
      if (np) emit_softmax(nk ? SVP_ : SV_), emit_values(np, P16_, nk ? pv : pv_all);
      if (nk) emit_scores(nk, np ? ps : ps_all);
    }
  };
  auto emit_block_fn = [&](uint32_t np, uint32_t nk) {
    const uint32_t begin = b.pc();
    emit_block_body(np, nk);
    schedule_region(b, begin, cfg);
    b.op("jalr", {X{0}, X{14}, 0});
  };
  std::vector<std::pair<std::pair<uint32_t, uint32_t>, Label>> block_fns;  // ((np, nk), routine)
  auto call_block = [&](uint32_t np, uint32_t nk) {
    auto it = std::find_if(block_fns.begin(), block_fns.end(), [&](const auto& f) { return f.first == std::pair{np, nk}; });
    if (it == block_fns.end()) it = block_fns.insert(block_fns.end(), {{np, nk}, b.label()});
    b.op("jal", {X{14}, it->second});
  };
  // The block routines of a pass of nkeys keys (16-key blocks, then a tail), as (np, nk).
  auto pass_calls = [&](uint32_t nkeys) {
    const uint32_t nfull = nkeys / kJ, tail = nkeys % kJ;
    std::vector<std::pair<uint32_t, uint32_t>> calls;
    if (!pipelined) {
      calls.assign(nfull, {kJ, kJ});
      if (tail) calls.push_back({tail, tail});
      return calls;
    }
    calls.push_back({0, nfull ? kJ : tail});
    for (uint32_t k = 1; k < nfull; ++k) calls.push_back({kJ, kJ});
    if (nfull && tail) calls.push_back({kJ, tail});
    calls.push_back({tail ? tail : kJ, 0});
    return calls;
  };
  // The middle calls of a pass (runs of the same routine in a counted loop).
  auto emit_calls = [&](const std::vector<std::pair<uint32_t, uint32_t>>& calls, size_t from, size_t to) {
    for (size_t k = from; k < to;) {
      size_t n = 1;
      while (k + n < to && calls[k + n] == calls[k]) ++n;
      if (n == 1) {
        call_block(calls[k].first, calls[k].second);
      } else {
        b.li(X{8}, n);
        Label again = b.label();
        b.bind(again);
        call_block(calls[k].first, calls[k].second);
        b.op("addi", {X{8}, X{8}, -1});
        b.op("bne", {X{8}, X{0}, again});
      }
      k += n;
    }
  };

  // ---- prologue: one-hot lane masks in LRM [0, 1024) ----
  b.li(X{11}, qrs / NS);  // (split: the even PEs of a pair read and write a row)
  b.li(X{30}, ors / NS);
  b.op("vlaneid", {LANE_});
  b.li(X{22}, hd2);         // obcast.g: a group's row from the one before
  b.li(X{23}, G * R * NS);  // and its PEs
  if (split) {  // p2 / p3: the even / odd PEs
    b.pset_cols_mod(P{2}, 0, 2, X{24}, X{25});
    b.op("pnot", {P{3}, P{2}});
  }
  if (lrm_masks)
    for (uint32_t j = 0; j < kJ; ++j) {
      b.op("vsplati", {tmp[0], int64_t(j)});
      b.op("vcmpeq.i32", {tmp[1], LANE_, tmp[0]});
      b.op("vst", {tmp[1], Mem{X{0}, int64_t(64 * j)}});
    }
  Label end = b.label();
  // Pass start (inline): the pass's PEs (p7), bases, q of the pass's rows and heads, the state.
  auto emit_setup = [&](const Pass& p) {
    const uint32_t h0 = p.g0 * G;
    b.li(X{20}, p.ng * G * R * NS);
    b.op("pset.range", {P{7}, X{0}, X{20}});
    if (split) {  // p4 / p5: the pass's even / odd PEs, whose keys start at 0 / half (x24, x25)
      b.op("pand", {P{4}, P{7}, P{2}});
      b.op("pand", {P{5}, P{7}, P{3}});
      const int64_t half = pass_keys(p) / 2;
      b.li(X{24}, int64_t(a.k_ocm) + int64_t(p.g0) * hd2 + half * ks);
      b.li(X{25}, int64_t(a.v_ocm) + int64_t(p.g0) * hd2 + half * ks);
    }
    b.li(X{20}, int64_t(qb) + int64_t(p.r0) * qrs + int64_t(h0) * qhs);
    b.li(X{21}, int64_t(ob) + int64_t(p.r0) * ors + int64_t(h0) * ohs);
    b.li(X{10}, int64_t(a.k_ocm) + int64_t(p.g0) * hd2);
    b.li(X{12}, int64_t(a.v_ocm) + int64_t(p.g0) * hd2);
  };
  // The sub-groups of a pass, each its PEs in p6 (x9, x15 = its PE range); those that read q
  // and write the output in p1 (split: the even ones; else p6).
  const P rw = split ? P{1} : P{6};
  auto per_sub = [&](const Pass& p, const std::function<void(uint32_t)>& body) {
    for (uint32_t sub = 0; sub < p.ng * G; ++sub) {
      b.li(X{9}, int64_t(sub) * R * NS);
      b.li(X{15}, (int64_t(sub) * R + p.nrows) * NS);
      b.op("pset.range", {P{6}, X{9}, X{15}});
      if (split) b.op("pand", {P{1}, P{6}, P{2}});
      body(sub);
    }
  };
  auto emit_init = [&](const Pass& p) {
    per_sub(p, [&](uint32_t sub) {
      const int64_t off = int64_t(sub) * qhs - int64_t(sub) * R * qrs;
      for (uint32_t c = 0; c < CH; ++c) b.op("oscatter", {QR[c], Mem{X{20}, off + 64 * c}, X{11}}, rw);
      if (a.causal) {  // RV = absolute row of the PE
        b.op("vpeid", {RV_}, P{6});
        if (split) b.op("vshr", {RV_, RV_, int64_t(1)}, P{6});
        b.li(X{13}, int64_t(p.r0 + a.kv_offset) - int64_t(sub) * R);
        b.op("vsplat", {tmp[0], X{13}});
        b.op("vadd.i32", {RV_, RV_, tmp[0]}, P{6});
      }
    });
    if (split) {  // the odd PEs: q from the west neighbour, rows counted from the second half
      for (uint32_t c = 0; c < CH; ++c) b.op("vmovn", {QR[c], QR[c], Dir{3}}, P{5});
      b.li(X{13}, pass_keys(p) / 2);
      b.op("vsplat", {tmp[0], X{13}});
      b.op("vsub.i32", {RV_, RV_, tmp[0]}, P{5});
    }
    for (uint32_t c = 0; c < CH; ++c) {
      b.op("vshr", {QS[c], QR[c], int64_t(16)});
      b.op("vsplati", {AE[c], int64_t(0)});
      b.op("vsplati", {AO[c], int64_t(0)});
    }
    b.op("vsplat.f32", {M_, F32{kNegBig}});
    b.op("vsplati", {L_, int64_t(0)});
    if (swap)
      for (uint32_t c = 0; c < CH; ++c) {
        b.op("vst", {QR[c], Mem{X{0}, int64_t(kLrmQ + 128 * c)}});
        b.op("vst", {QS[c], Mem{X{0}, int64_t(kLrmQ + 128 * c + 64)}});
        b.op("vst", {AE[c], Mem{X{0}, int64_t(kLrmAcc + 128 * c)}});
        b.op("vst", {AO[c], Mem{X{0}, int64_t(kLrmAcc + 128 * c + 64)}});
      }
  };
  // Pass end (inline): out = acc / l in fp16, even and odd dims interleaved back.
  auto emit_fini = [&](const Pass& p) {
    if (swap)
      for (uint32_t c = 0; c < CH; ++c) {
        b.op("vld", {AE[c], Mem{X{0}, int64_t(kLrmAcc + 128 * c)}});
        b.op("vld", {AO[c], Mem{X{0}, int64_t(kLrmAcc + 128 * c + 64)}});
      }
    if (split) {  // the pair's states merged into the even PE: m = max, each side scaled by exp(M - m)
      const V m1 = SV_, t = P16_, a0 = tmp[1], a1 = tmp[2];
      b.op("vmovn", {m1, M_, Dir{1}});
      b.op("vmax.f32", {tmp[0], M_, m1});
      b.op("vsub.f32", {a0, M_, tmp[0]});
      b.op("vsub.f32", {a1, m1, tmp[0]});
      b.op("vexp.f32", {a0, a0});
      b.op("vexp.f32", {a1, a1});
      auto merge = [&](V r, V other) {
        b.op("vmovn", {other, r, Dir{1}});
        b.op("vmul.f32", {r, r, a0});
        b.op("vmla.f32", {r, other, a1});
      };
      merge(L_, m1);
      for (uint32_t c = 0; c < CH; ++c) merge(AE[c], c % 2 ? m1 : t), merge(AO[c], c % 2 ? t : m1);
    }
    b.op("vrcp.f32", {tmp[0], L_});
    for (uint32_t c = 0; c < CH; ++c) {
      b.op("vmul.f32", {AE[c], AE[c], tmp[0]});
      b.op("vmul.f32", {AO[c], AO[c], tmp[0]});
      b.op("vcvt.f16.f32", {AE[c], AE[c]});
      b.op("vcvt.f16.f32", {AO[c], AO[c]});
      b.op("vshl", {AO[c], AO[c], int64_t(16)});
      b.op("vor", {AE[c], AE[c], AO[c]});
    }
    per_sub(p, [&](uint32_t sub) {
      const int64_t off = int64_t(sub) * ohs - int64_t(sub) * R * ors;
      for (uint32_t c = 0; c < CH; ++c) b.op("ogather", {AE[c], Mem{X{21}, off + 64 * c}, X{30}}, rw);
    });
  };
  // Passes: the last block routine and end of one pass, the start and first block
  // routine of the next are one scheduled region (the next pass's broadcasts start while
  // this one's output is written; its q and the output never overlap k, v or each other).
  std::vector<std::pair<uint32_t, uint32_t>> prev_calls;
  for (size_t pi = 0; pi <= passes.size(); ++pi) {
    const bool last = pi == passes.size();
    const Pass* p = last ? nullptr : &passes[pi];
    const std::vector<std::pair<uint32_t, uint32_t>> calls = p ? pass_calls(pass_keys(*p) / NS) : prev_calls;
    const size_t head = p && pipelined ? 1 : 0;
    const uint32_t begin = b.pc();
    if (pi > 0) {
      emit_block_body(prev_calls.back().first, prev_calls.back().second);
      emit_fini(passes[pi - 1]);
    }
    if (p) {
      emit_setup(*p);
      emit_init(*p);
      if (head) emit_block_body(calls[0].first, calls[0].second);
    }
    schedule_region(b, begin, cfg, true);
    if (last) break;
    emit_calls(calls, head, calls.size() - 1);
    prev_calls = calls;
  }
  b.op("jal", {X{0}, end});

  for (auto& [n, l] : block_fns) {
    b.bind(l);
    emit_block_fn(n.first, n.second);
  }
  b.bind(end);
}


KernelCost cost_attention_ocm(const sim::Config&, const OcmAttnArgs& a) {
  KernelCost c;
  const uint64_t pairs = uint64_t(a.seq) * a.kv_offset +
                         (a.causal ? uint64_t(a.seq) * (a.seq + 1) / 2 : uint64_t(a.seq) * a.seq);
  c.macs = pairs * a.q_heads * a.head_dim * 2;
  return c;
}

}  // namespace gpnpu::kernels
