// Attention kernels: KV-cache append, decode attention against the cache in DDR,
// and attention over q/k/v resident in OCM (causal GQA prefill, full tower).
// All of them: fp16 in memory, fp32 scores/softmax/accumulation, max-subtracted
// softmax, query head h reads kv head h / (q_heads / kv_heads), scores * scale.
//
// ---- KV cache layout (DDR, one layer) ---------------------------------------------
// K and V each [kv_heads][max_seq][head_dim] fp16 at k_cache_ddr / v_cache_ddr (bus
// addresses): one head's keys are contiguous, so a block of consecutive keys of one
// head is one DMA row. Slot `pos` of head g is at base + (g*max_seq + pos)*head_dim*2.
//
// ---- decode (emit_attention_decode) ------------------------------------------------
// One query row q [q_heads*head_dim] fp16 in OCM against L cached keys (the new one
// included, already appended). L is read at run time from a scalar-memory word
// (len_smem), so one compiled decode program serves every step.
// Mapping (flash decoding): NS key splits (at most 4; as many as the PEs and the scratch
// allow; 1 when G > 4); PE e = s*NS*kv_heads + sp*kv_heads + g owns query head
// g*G + s for split sp; its lanes take 16 dims (head_dim/16 registers of q and of the
// fp32 accumulator). The cache streams DDR -> OCM in rounds (K on one DMA channel, V on
// another, two slots double-buffered): a round of v keys (16 in the first round, then up
// to NS x 16; the last one short) gives each split kb = ceil(v / NS) consecutive keys,
// read exactly (one 3-D descriptor for the whole split blocks, a second start for the
// short one). Per key a PE scatters its kv head's row from its split's block and MACs it
// against q; the scores land in lanes (keys a split lacks: -big), the block updates the
// PE's running max / sum (exp on the SFU), rescales its accumulator, then each key's
// probability (fp16) is spread over the lanes and MACs the V row in (value MACs
// predicated to the splits that have the key). At the end split 0's PEs merge the
// others' max / sum / accumulators through OCM.
// Tiling rule: scratch = pad + 2 slots x (K + V) x NS x kv_heads x 16 keys x head_dim x 2
// bytes + the merge area ((head_dim/16 + 2) x NS x q_heads x 64 bytes when NS > 1); the
// pad keeps the scatter bases of the G PE groups >= 0.
// Only the L valid keys are read from DDR.
//
// ---- OCM attention (emit_attention_ocm): prefill (causal) and tower (full) ----------
// q [seq][q_heads*head_dim] at q_ocm with row stride / head stride (bytes), k and v
// [seq][kv_heads*head_dim] (row stride kv_row_stride, heads head_dim*2 apart), out like
// q. Mapping: a pass holds R query rows x GP kv groups; PE e = sub*R + il with
// sub = gl*G + s (query head h0 + sub, kv head g0 + gl): the PEs of one kv group are
// contiguous, so a 64-byte chunk of a key/value row reaches every group's PEs, each group its
// own head's chunk, in one grouped broadcast (obcast.g; obcast for one group): dims 2i and
// 2i+1 in lane i (`vshr` brings the odd dims to the low
// halves that vmac.f16 reads; q is held as loaded and shifted, the output as even- and
// odd-dim accumulators). Keys go in blocks of 16, fully unrolled: scores into lanes
// (one-hot lane masks from LRM when it has room), the online softmax, p_j spread by vdup; each
// block routine is one straight-line region reordered by the list scheduler
// (kernels/schedule.h). With head_dim 64 the regions are software pipelined (a block's
// softmax and values beside the next block's scores); with head_dim 128, q and the
// accumulators are parked in LRM in turn so each phase has registers to rotate over
// (LRM [0, lrm_bytes) only: masks, then the parking when both fit).
// Causal rows mask keys j > row once per block. The output must not overlap k or v (a
// pass's output writes are scheduled beside the next pass's loads); it may be q itself.
// Tiling rule: R = min(seq, npe / G), GP = kv_heads spread evenly over the fewest passes
// of at most npe / (G*R) groups; a chunk of a key row reaches every group's PEs (p7: the
// pass's) in one grouped broadcast (obcast.g: the groups' rows head_dim*2 bytes apart, G*R
// PEs a group), so a key step issues the same instructions whatever the groups.
// q is read and the output written in place, any row and head strides: a head's R rows by one
// strided oscatter / ogather per 64-byte chunk (its base R row strides below the head's first
// row, OCM addresses wrapping at 32 bits). (A head-major staging copy of q and the output,
// through the DMA and the array port, cost 64x64 4.1 K of the tower's 15.1 K cycles and of the
// prefill's 16.2 K.)
#pragma once
#include <cstdint>

#include "kernels/builder.h"
#include "kernels/cost.h"
#include "sim/machine/config.h"

namespace gpnpu::kernels {

struct KvWriteArgs {
  uint32_t kv_heads = 0, head_dim = 0, rows = 0;  // rows appended (1 at decode, S at prefill)
  uint32_t k_ocm = 0, v_ocm = 0, row_stride = 0;  // new rows [rows][kv_heads*head_dim] fp16
  uint32_t k_cache_ddr = 0, v_cache_ddr = 0;      // bus addresses (sim::ddr_addr)
  uint32_t max_seq = 0;                           // slots per head
  uint32_t pos_smem = 0;                          // scalar-memory word: first slot written
  uint32_t smem = 0;                              // 128 bytes for two descriptors
  // false: the kernel returns with the two DMAs in flight; the caller emits
  // emit_kv_write_wait before anything overwrites the rows or reads the new slots (the
  // prefill's OCM attention reads k and v in OCM, so the write overlaps it).
  bool wait = true;
  // Which of the two to write (the prefill starts v's write before k's rotary, k's after it).
  bool write_k = true, write_v = true;
};
void emit_kv_write(Builder& b, const sim::Config& cfg, const KvWriteArgs& a);
void emit_kv_write_wait(Builder& b, const sim::Config& cfg);
KernelCost cost_kv_write(const sim::Config& cfg, const KvWriteArgs& a);

struct DecodeAttnArgs {
  uint32_t q_heads = 0, kv_heads = 0, head_dim = 0;
  float scale = 0;
  uint32_t q_ocm = 0, out_ocm = 0;              // [q_heads*head_dim] fp16 each
  uint32_t k_cache_ddr = 0, v_cache_ddr = 0, max_seq = 0;
  uint32_t len_smem = 0;                        // scalar-memory word: L >= 1 cached keys
  uint32_t scratch_ocm = 0, scratch_bytes = 0;  // DMA slots
  uint32_t smem = 0;                            // 256 bytes for four descriptors
  // Emitted (if set) where the last round's keys have arrived, before that round's compute: no
  // DMA of the kernel is outstanding after it and the kernel waits on no channel again, so the
  // next kernel's DMA may start there and overlap the last round and the merge (the decode's
  // o_proj weights: emit_gemv_prefetch). It may clobber x19 and x31 only. Runs once (L >= 1).
  std::function<void()> after_last_fetch;
};
// The scratch the kernel takes: the most splits whose layout fits a.scratch_bytes (a
// budget here; at least one split's layout).
uint32_t attention_decode_scratch_bytes(const sim::Config& cfg, const DecodeAttnArgs& a);
void emit_attention_decode(Builder& b, const sim::Config& cfg, const DecodeAttnArgs& a);
// `len` is the L the cost is asked for (the kernel itself reads L at run time).
KernelCost cost_attention_decode(const sim::Config& cfg, const DecodeAttnArgs& a, uint32_t len);

struct OcmAttnArgs {
  uint32_t q_heads = 0, kv_heads = 0, head_dim = 0, seq = 0;
  bool causal = false;
  float scale = 0;
  uint32_t q_ocm = 0, q_row_stride = 0, q_head_stride = 0;
  uint32_t k_ocm = 0, v_ocm = 0, kv_row_stride = 0;
  uint32_t out_ocm = 0, out_row_stride = 0, out_head_stride = 0;
  uint32_t max_groups = 0;  // cap on kv groups per pass (0: the tiling rule)
  // Keys before the first query row (a prefill chunk after cached tokens, issue 18): k
  // and v hold kv_offset + seq rows, query row i sits at key kv_offset + i (causal: it
  // sees keys [0, kv_offset + i]; full: all of them).
  uint32_t kv_offset = 0;
  // LRM [0, lrm_bytes) is the kernel's (one-hot lane masks, q and accumulator parking);
  // the rest stays untouched (0: all of it). The image program gives 1,024 B: above that
  // a GEMM may hold the next GEMM's first tile (kernels/gemm.h, gemm_handoff).
  uint32_t lrm_bytes = 0;
};
// Tiling rule: passes of `rows` query rows of `groups` kv groups (rows x groups x G <= the
// PEs), the groups spread evenly over the fewest passes. A pass costs its keys (causal: those
// its last row sees): a key step issues the same instructions whatever its groups (one
// grouped broadcast a chunk); of the rules "the most rows a pass" and "fewer rows, more
// groups", the one of less work (2% margin). qc-u, the streamed tower at 1,200 patches, 2
// heads a call: 3 passes of 512 rows instead of 4 of 1,024 and 176.
struct OcmAttnTiling {
  uint32_t rows = 0, groups = 0;
  double work = 0;  // keys, summed over the passes
};
OcmAttnTiling plan_attention_ocm(const sim::Config& cfg, const OcmAttnArgs& a);
void emit_attention_ocm(Builder& b, const sim::Config& cfg, const OcmAttnArgs& a);
KernelCost cost_attention_ocm(const sim::Config& cfg, const OcmAttnArgs& a);

}  // namespace gpnpu::kernels
