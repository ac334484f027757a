// W4A16 GEMM for the vision tower and the prefill:
//   Y[m][n] = sum_k X[m][k] W[n][k] (+ bias[n]),
// X and Y fp16 row-major in OCM (row strides in bytes), W as 4-bit codes with an fp16
// scale and an integer zero per 128-block (kernels/w4_weights.h: w = (q - z) * s), packed in
// DDR by pack_gemm_weight. Accumulation in fp32; Y rounded once to fp16.
//
// Rounding points (what the chain must mirror): the dequantised weight is rounded to
// fp16 (vdq4.f16) before the multiply; products fp16 x fp16 are exact in fp32; each
// PE accumulates its lanes in k order, the bias (if any) enters lane 0 before the
// first product; the 16 lanes are summed by vredsum.f32's pairwise tree (split 2: then
// the odd-k PE's sum is added; GemmArgs::acc_in: then the fp32 partial sum); one rounding
// to fp16 at the end (none with GemmArgs::y_f32). Tests: bit-exact or
// one fp16 ulp from ops::linear on round_f16(dequantise(W)).
//
// Mapping: a tile is T = npe / S output columns (npe of cfg: on a sub-array, GemmArgs::
// sub_array, the first cfg.npe() PEs of a larger machine); PE e owns column col0 + e / S and,
// at split S = 2, only the k of parity e % 2 (the pair's sums are added at the end).
// A PE keeps its codes and meta for the whole tile in its LRM (double buffered: the
// next tile's weights are filled while this tile computes). Rows go in groups of
// R <= 16 (one fp32 accumulator register per row). Per group of 16 codes (16 k, or
// 32 k at split 2): vld the 8 code bytes from LRM, vdq4.f16 them (s, z from the
// block's meta), then per row: obcast.h the row's 16 activations (split 2: obcast 32,
// odd PEs shift the high halves down) and vmac.f16 into the row's accumulator
// (consecutive vmacs hit different accumulators, hiding the MAC latency; broadcasts
// run 3 vmacs ahead; the next group's dequantise sits between the vmacs). The loop takes
// a 128-block a pass (8 / S groups of 16 codes unrolled: the block's meta loaded and the
// pointers moved once, so at split 2 a group's issue slots leave room for fill pieces;
// measured on the 2B image program: qc-u 81.08 -> 80.77 M cycles, 64x64 at 4 MiB,
// 128 GB/s 26.06 -> 25.32 M, docs/performance.md, twenty-seventh stop). At a row
// group's end: vredsum, (split 2: + east neighbour via vmovn), pack to fp16,
// ogather.h1 one fp16 per column into Y.
//
// DDR layout (pack_gemm_weight), tile after tile, tile t = columns [t*T, t*T + T),
// B = K / 128 blocks:
//   meta:        [T columns][B blocks][fp16 s, fp16 z]
//   code unit d: [npe PEs][UB bytes], d = 0..D-1: PE e's code stream (column t*T + e/S,
//                the k of parity e % S in k order, two codes per byte, low nibble
//                first), bytes [UB d, UB d + UB); UB = 64 (D = B/S), or 32 (D = 2B/S) where
//                64 a PE on four channels would take over a quarter of an OCM of 2 MiB or
//                more (gemm_unit_pe_bytes: 64x64 at 2 MiB), scattered then by oscatter.h and
//                stored by vst.h
// The last tile may be narrower: W = N mod T columns on its first W * S PEs, laid out
// the same way with W for T and W * S for npe (no padding columns: the packed weight
// is exactly N * B * 68 bytes at any array size). One tile is T * B * 68 bytes. DMA
// unit 0 is the meta plus code unit 0 (one contiguous descriptor), DMA unit d > 0 is
// code unit d. The narrow tile's units are scattered only to its PEs (p6; split 2:
// p7 even, p5 odd); the other PEs compute on stale LRM and do not gather.
//
// LRM layout per buffer: [meta: ceil(B/8) * 32 B, fp16 (s, z) pairs][codes 64 B * B/S];
// buffer 1 follows buffer 0; 64 B of padding after it (a look-ahead load reads there).
//
// Tiling rule: S is the smallest of 1, 2 (dividing pe_cols and B) for which two LRM
// buffers fit: 2 * (ceil(B/8) * 32 + 64 * B / S) + 64 <= lrm_bytes (qc-u: S = 1 up to
// K = 3584, S = 2 for K = 4096 and 6144); S = 2 also where it fits and its tiles take
// fewer PE-steps: ceil(2N / npe) < 2 ceil(N / npe) (N = 1024 on 2,048 PEs or more). Where
// no split has room for two, the one whose single buffer fits (2 first): GemmPlan::single.
// Units stream DDR -> OCM through one buffer per DMA channel (C = the most channels <=
// dma_channels dividing the D = B/S units; unit d on channel d % C; a channel's next
// unit starts as soon as its buffer is scattered; on one DMA channel with D even and scratch
// for two buffers (gemm_scratch_bytes with two): unit d into buffer d % 2, unit d + 1 started
// as soon as unit d has arrived, before unit d is scattered: 2B image program, qc-u with one
// channel, 89.35 -> 85.24 M cycles, `gpnpu compile --set dma_channels=1 --run`).
// Channel c's buffer sits at the same place in every call (channel 0 at the
// scratch's start, channel c >= 1 at dma_channels - c code buffers from its end), so the
// next call's unit c starts as soon as this call's last unit on c is scattered. The units
// of tile t+1 are taken during tile t: units [(g-1)D/G, gD/G) at the start of row group
// g >= 1, the last ones after the last group or (split 1) inside tile t+1's own first
// group; where no tile streams its own so, [gD/G, (g+1)D/G) at every group g (and the next
// call's in the last tile, where the DDR brings them within its MACs). A unit taken at a
// group's start has its codes scattered inside that group's MAC loop when the loop has
// issue slots for it (split 1): 16-PE pieces (pset.range + a predicated oscatter; wider
// where the group's units need it) between the broadcasts, one loop segment per unit (two
// for the next call's narrow tile 0 of two copies, GemmPlan::copies: its PEs, then the upper
// set's, where the DDR brings each unit within half a row group's loop), so the OCM port
// time overlaps the MACs. Tile 0 is loaded before the first row group unless the previous
// call handed it off (gemm_handoff: in part when it cannot stream in time, the rest then
// scattered in this call's first group) or started its first units (GemmArgs::next,
// emit_gemm_prefetch: prefetched = true). Measured figures: docs/performance.md, issue 13.
//
// Two row sets: a call of one narrow tile at split 2 whose W columns take at most half the
// array (W * 2 <= H = npe / 2: the 2B tower's N = 1,024 GEMMs on 64x64) has its tile's units
// scattered twice, to PEs [0, 2W) and again to [H, H + 2W), and over 16 rows or more each row
// slot computes two rows: row 2i of the group on the lower PEs, 2i + 1 on the upper ones (R
// slots, 2R rows a group). A slot's activations reach the two halves in two broadcasts into one
// register, the upper row to every PE six
// slots ahead, the lower row predicated to PEs [0, H) three slots ahead (a register is written
// again 8 cycles after a write), split 2's shift one ahead: 4 issue slots a vmac, in 8 rotating
// registers (v28-v31, v16-v19). Each half gathers its own rows (and reads its own partial
// sums, bias and seeds) with a base H PEs' strides below its first PE's (the ISA's OCM
// addresses wrap at 32 bits, so a base below 0 is fine). The LRM partial sums of a chain keep
// their layout, a lane a slot (both sets' PEs hold their own rows). Not the narrow last tile
// of a call of several tiles (its row groups are the other tiles'), and only where H is even (the
// upper set's first PE starts a split-2 pair).
//
// OCM: X rows are read only inside [x_ocm, x_ocm + (M-1)*x_stride + 2K) (two row sets on a
// sub-array: rows further on, or up to 64 B past the last row where those would pass the
// OCM's end: emit_gemm_w4, pair_rows); Y is written
// only at its M x N elements; the scratch holds the DMA buffers (gemm_scratch_bytes).
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/builder.h"
#include "kernels/cost.h"
#include "kernels/w4_weights.h"
#include "sim/machine/config.h"

namespace gpnpu::kernels {

enum class GemmBias : uint8_t { none, f32, f16 };

// An activation in the epilogue (GemmArgs::act), in the element-wise kernel's operations
// (kernels/elementwise.h: the same instructions, so the same bits as the GEMM rounded to
// fp16 and then emit_elementwise): each output is rounded to fp16, the activation runs in
// fp32, the result is rounded to fp16 once more. silu_pairs: the weight's rows interleave a
// gate and an up projection (row 2j gate j, row 2j + 1 up j: pack_gemm_weight of such a
// matrix) and Y gets N/2 columns, silu(gate j) x up j (EwOp::silu_mul); split 1 only (the
// output of PE 2j then lands 2j bytes into the row: a gather stride of 1), on an even pe_cols
// (PE 2j takes up j from its east neighbour, in the same row only then).
// Per row group the 16 rows' sums go into the lanes of one register (vsel where lane id - r
// is 0), are rounded to fp16 there, the activation runs once on the register and the rows are
// spread back for their gathers (the cost: gemm_act_cycles). The image compiler fuses where
// that beats the element-wise call (docs/performance.md, twenty-second stop).
enum class GemmAct : uint8_t { none, gelu_tanh, gelu_erf, silu_pairs };

struct GemmArgs {
  uint32_t m = 0, n = 0, k = 0;  // rows, output and input features (k a multiple of 128)
  uint32_t split = 0;            // K split S (0: the tiling rule); must match the packing
  uint32_t w_ddr = 0;            // bus address of the packed weight (pack_gemm_weight)
  uint32_t x_ocm = 0, x_stride = 0;  // OCM offset of X row 0; row stride in bytes (>= 2k)
  uint32_t y_ocm = 0, y_stride = 0;  // OCM offset of Y row 0; row stride in bytes (>= 2n)
  GemmBias bias = GemmBias::none;
  uint32_t bias_ocm = 0;         // OCM offset of n fp32 or fp16 values
  uint32_t scratch_ocm = 0;      // OCM DMA buffers (gemm_scratch_bytes)
  uint32_t scratch_bytes = 0;
  uint32_t smem = 0;             // scalar-memory bytes for descriptors (64 per channel)
  bool prefetched = false;       // emit_gemm_prefetch(the same w_ddr, n, k, split, scratch) ran before
  // The next GEMM call (or null): this call starts its prefetch (as emit_gemm_prefetch(*next))
  // at the start of its own last tile, when its DMA channels and OCM buffers are done, so
  // the DMA overlaps that tile's MACs; next is then emitted with prefetched = true. next
  // must use the same scratch region and smem area (only read while emitting).
  const GemmArgs* next = nullptr;
  // LRM buffers: tile 0 at lrm_p, the next tile at lrm_q, alternating; both 0: the
  // default layout (lrm_p = 0, lrm_q = one buffer). handed_off: the previous call
  // (whose `next` this is) scattered the whole of tile 0 to lrm_p during its own last
  // tile and started tile 1's first units (implies prefetched); set by gemm_handoff.
  bool handed_off = false;
  uint32_t lrm_p = 0, lrm_q = 0;
  // handed_off: the previous call scattered tile 0's units [0, handed_units) (0: all) and
  // started the others on their channels; this call scatters those during its first row
  // group (set by gemm_handoff).
  uint32_t handed_units = 0;
  // next_started: next's first units are on their channels already (emit_gemm_prefetch(*next)
  // ran before this call, after the call before it; this call takes no unit of its own: one
  // tile, handed off whole), so its last tile does not start them.
  bool next_started = false;
  // prestaged (with next_started): next's tile-0 code units [C, C + prestaged) (C its channels) are
  // in the free middle of its OCM scratch already (emit_gemm_prefetch_staged), each queued on
  // channel u % C behind next's unit there: this call's hand-off takes them from there, after
  // that unit's wait, and restarts no channel with them.
  uint32_t prestaged = 0;
  // Two calls ahead: next is one tile handed off whole and next2 (the call after it, placed by
  // gemm_handoff(*next, *next2)) takes its tile-0 units [0, next2_units) from this call too,
  // after next's, on the same channels (next2_units a multiple of the channels); the call
  // handing next2 off then takes units [pre_units, ...) of it (next2->pre_units = next2_units).
  const GemmArgs* next2 = nullptr;
  uint32_t next2_units = 0;
  uint32_t pre_units = 0;
  // OCM that nothing else touches from this call's start until the next call has taken its
  // tile 0 (0 bytes: none). Where it holds C code units and the call spreads its units over its
  // row groups (several tiles, C channels), C of the units it hands the next call off (each the
  // last its last tile's group takes, of groups spread over that tile) are staged there during
  // its first C row groups, one a group on the last channel while the DDR would idle (the group's
  // units arrive within its MACs), instead of streaming through the channels in its last tile,
  // where the hand-off is DDR-bound (64x64, 4 MiB, 128 GB/s: the prefill's gate|up handing the
  // down off in the temporaries).
  uint32_t stage_ocm = 0, stage_bytes = 0;
  // Partial sums (a K split across calls, e.g. a layer's MLP in chunks of its inner
  // dimension): acc_in adds fp32 partial sums [m][n] at acc_ocm (row stride acc_stride >= 4n)
  // to every output after its lane sum (and split 2's pair sum), before the rounding; y_f32
  // writes Y as fp32 (y_stride >= 4n) without rounding. Both may name the same rows (each
  // row is read before it is written), so a chain of calls accumulates in place.
  bool acc_in = false, y_f32 = false;
  uint32_t acc_ocm = 0, acc_stride = 0;
  // Partial sums in LRM (a chain of calls over chunks of K with the same m, n and split,
  // e.g. the MLP over every row, chunk by chunk): lrm_out writes each output's fp32 sum
  // (after its lane sum, pair sum and lrm_in's partial sum) to the PE's LRM instead of Y;
  // lrm_in adds the sums an lrm_out call left there before the rounding to fp16. PE e keeps
  // its column's sums of tile t, row group g at lrm_acc + (t * G + g) * 64, lane r = the
  // group's row r (gemm_lrm_acc_bytes: tiles x groups x 64 bytes), no OCM port traffic
  // (the OCM partial sums above move 8 bytes a PE a row through it). The region must lie
  // at or above lrm_end, below lrm_bytes.
  bool lrm_in = false, lrm_out = false;
  uint32_t lrm_acc = 0;
  // The call's LRM buffers, and the next call's tile 0 it hands off, stay below lrm_end
  // (0: lrm_bytes); gemm_handoff places next's buffers below next.lrm_end.
  uint32_t lrm_end = 0;
  // The machine's array is larger than cfg's (the GEMM's view: the first cfg.npe() PEs,
  // whole rows): every scatter is held to those PEs (the others compute on stale LRM and
  // never gather). The weight is packed for the view (pack_gemm_weight(w, view)).
  bool sub_array = false;
  uint32_t machine_pes = 0;  // (sub_array: the machine's PEs)
  // The epilogue's activation (above): Y then holds act(rounded sums), fp16; not with the
  // partial sums (acc_in, y_f32, lrm_in, lrm_out).
  GemmAct act = GemmAct::none;
};

// The static plan of one call (everything the emitter derives from cfg and shapes).
struct GemmPlan {
  uint32_t split = 1;        // S
  uint32_t cols = 0;         // T = npe / S columns per tile
  uint32_t tiles = 0;        // ceil(n / T)
  uint32_t blocks = 0;       // B = k / 128
  // One LRM buffer: two of the split's do not fit lrm_bytes (an odd pe_cols at 4 KiB: K = 4,096 and
  // 6,144), so no tile fills while another computes and a call takes one tile (the image compiler
  // runs such a weight a tile a call, KernelCalls::gemm; emit_gemm_w4 refuses more).
  bool single = false;
  uint32_t meta_lrm = 0;     // ceil(B/8) * 32
  uint32_t unit_pe = 64;     // UB: code bytes a PE takes from a DMA unit (gemm_unit_pe_bytes)
  uint32_t units = 0;        // D = B / S * 64 / UB DMA units per tile (unit 0 carries the meta)
  uint32_t channels = 0;     // C: DMA channels used (divides D)
  uint32_t meta_unit = 0, code_unit = 0;  // bytes of the two unit kinds (T*B*4, npe*UB)
  uint64_t tile_bytes = 0;   // T * B * 68
  uint32_t tail_cols = 0;    // W: columns of the narrow last tile (0: every tile is full)
  uint32_t tail_meta_unit = 0, tail_code_unit = 0;  // W*B*4, W*S*UB
  // Unit sizes and offsets of a full (tail = false) or the narrow (tail = true) tile.
  uint32_t meta_of(bool tail) const { return tail ? tail_meta_unit : meta_unit; }
  uint32_t code_of(bool tail) const { return tail ? tail_code_unit : code_unit; }
  int64_t unit_offset(uint32_t u, bool tail) const { return u == 0 ? 0 : int64_t(meta_of(tail)) + int64_t(u) * code_of(tail); }
  bool tail_at(uint32_t t) const { return tail_cols && t + 1 == tiles; }  // tile t is the narrow one
  uint64_t weight_bytes() const { return (tiles - (tail_cols ? 1 : 0)) * tile_bytes + uint64_t(tail_cols) * blocks * 68; }
  uint32_t rows = 0;         // R: row slots per group (accumulators: <= 16, a multiple of 4)
  uint32_t groups = 0;       // G: row groups
  uint32_t last_rows = 0;    // real rows of the last group
  // Copies of the tile in LRM: 2 where its one tile at split 2 takes at most half the array
  // (from the shape alone: the call handing its tile 0 off scatters both); else 1. Row sets: 2
  // where such a call runs two rows a slot (m >= 16: "two row sets" above); else 1.
  uint32_t copies = 1, sets = 1;
  uint32_t group_rows() const { return sets * rows; }
  // The slots a group of `real` rows runs (two row sets: a multiple of 8).
  uint32_t slots(uint32_t real) const { return sets == 2 ? ((real + 1) / 2 + 7) / 8 * 8 : (real + 3) / 4 * 4; }
  uint32_t lrm_sums_bytes() const { return tiles * groups * 64; }  // GemmArgs::lrm_acc's region
};

// split 0: the tiling rule above. Throws gpnpu::Error if K does not fit any split.
uint32_t gemm_split(const sim::Config& cfg, uint32_t n, uint32_t k, uint32_t split = 0);
// One LRM buffer of a call's tiles (meta and codes of a PE's K); a kernel reads and zeroes the
// 64 bytes past it.
uint32_t gemm_lrm_buffer(const sim::Config& cfg, uint32_t n, uint32_t k, uint32_t split = 0);
GemmPlan plan_gemm(const sim::Config& cfg, uint32_t m, uint32_t n, uint32_t k, uint32_t split = 0);
uint64_t gemm_weight_bytes(const sim::Config& cfg, uint32_t n, uint32_t k, uint32_t split = 0);
// The least lrm_bytes with which a K-input weight runs at some split on cfg's array: one LRM
// buffer (GemmPlan::single); two, for calls of several tiles, take twice its codes and meta.
uint32_t gemm_lrm_need(const sim::Config& cfg, uint32_t k);
// UB, the code bytes a PE takes from a DMA unit: 64, or 32 where units of 64 a PE on four DMA
// channels would take more than a quarter of an OCM of more than 1 MiB (64x64 at 2 MiB: the image
// compiler then keeps the GEMMs on every row, Compiler::gemm_view; at 1 MiB or less it halves
// their view instead, which leaves the row tiles more room). Four, not cfg.dma_channels: the
// packing and the calls must agree where the compiler gives its GEMMs fewer channels.
// Where they would take exactly a quarter, 32 on a DDR of kGemmFastDdr bytes a cycle or more:
// the image program's GEMMs then run on four channels where 64 leaves room for two (2B image
// program, 128 GB/s: 64x64 at 4 MiB 22.16 -> 21.80 M cycles, with the rotary tables' wait
// before the layer's prefetches, compiler_image.cpp; 32x64 at 2 MiB 38.26 -> 37.99 M). On a
// slower DDR 64: at 2 MiB they run faster (64 GB/s: 32x64 41.22 M against 41.42 M; 64x64, whose
// GEMMs' view is 32x64, 36.30 M against 38.32 M); at 4 MiB 32 runs faster now (64x64, 64 GB/s
// 33.02 M against 33.14 M) but ahead of 8 MiB (33.07 M, 64 there): a monotone violation of the
// design-space grid (docs/performance.md, "Fifty-seventh stop").
constexpr double kGemmFastDdr = 64;
uint32_t gemm_unit_pe_bytes(const sim::Config& cfg);
// The DMA channels whose buffers that rule counts (and Compiler::settle_gemm_view's view on a
// machine of more channels, where the program is resident on it).
constexpr uint32_t kGemmRuleChannels = 4;
// The LRM the tiling rule was tuned on (split 1 up to K = 3,584): on a machine of more,
// Compiler::settle_gemm_view also settles the GEMMs' view of this much.
constexpr uint32_t kGemmRuleLrm = 4096;
// LRM the partial sums of GemmArgs::lrm_in / lrm_out take: tiles x row groups x 64 bytes.
uint32_t gemm_lrm_acc_bytes(const sim::Config& cfg, uint32_t m, uint32_t n, uint32_t k, uint32_t split = 0);
// OCM scratch the DMA buffers need: one unit (plus 32 B) per channel; two: on one channel, also
// the second buffer (a call whose scratch has it streams into both).
uint32_t gemm_scratch_bytes(const sim::Config& cfg, uint32_t n, uint32_t k, uint32_t split = 0, bool two = false);

// Packs a quantised [n][k] weight into the layout above.
std::vector<uint8_t> pack_gemm_weight(const W4Weights& w, const sim::Config& cfg,
                                      uint32_t split = 0);

// macs = m*n*k, ddr_bytes = the packed weight (bias and activations are in OCM).
KernelCost cost_gemm(const sim::Config& cfg, const GemmArgs& a);
// The cycles an epilogue activation adds to a call of m x n x k at `split`: per tile and row
// group a fixed cost (the rows into lanes, the activation's dependent chain, the rows spread
// back), less, for silu_pairs, the gather bytes it saves. Measured against the call without it
// (tests/kernels/test_gemm_act.cpp's shapes at 128 rows, on 16x16, 32x32 and 32x64): 124 cycles
// a group at split 1, 133 at split 2; the element-wise call it replaces grows with the tile's PEs
// (a GELU, a tile as wide as the array: 71 cycles a tile and group on 16x16, 169 on 32x32, 297
// on 32x64).
double gemm_act_cycles(const sim::Config& cfg, uint32_t m, uint32_t n, uint32_t k, uint32_t split, GemmAct act);

// Emits the kernel (no halt). Throws gpnpu::Error if the shapes or buffers do not fit.
void emit_gemm_w4(Builder& b, const sim::Config& cfg, const GemmArgs& a);

// The call start hidden behind the previous call: places next's LRM buffers so that its
// tile 0 goes beside prev's last tile and above LRM [0, reserved) (what the kernels run
// between the two calls may use), then sets next.handed_off and next.lrm_p/q (prev.next
// must point at next when prev is emitted). prev's last tile then streams all of next's
// tile 0 into LRM (after its row groups, as it does for its own tiles), overlapped with
// its MACs, instead of next loading it before its first MAC. Of the placements that fit,
// the one leaving next's own last tile nearest an end of LRM (room for the call after
// it). Returns false (next.handed_off = false) when none fits or next's tile 0 is
// narrow. When next's tile 0 takes longer to stream than prev's last tile computes
// (prev.m must be set), prev hands off only its first units and next scatters the last
// ones inside its first row group's MAC loop (GemmArgs::handed_units), just before its
// loop reads them. qc-u, 2B image program: 99.27 M -> 89.10 M cycles (the norms and OCM
// attention between two GEMMs held to LRM [0, 1024)).
// A next call of one tile after a call of more is handed off in part so too, its last units
// streamed the same way (64x64, 8 MiB, 128 GB/s: the gate|up call's last tile waited ~8.6 K
// cycles a layer for the down's 6.3 MB tile; 21.90 -> 21.81 M cycles), unless `whole` (the
// caller starts the call after next during it: two calls ahead, KernelCalls::start_after_next,
// which need next to take no unit of its own). Not after a call of one tile: the 4 MiB plan's
// gate|up calls of one chunk then ran 0.1% ahead of the 8 MiB plan's call of six (64x64, 32 GB/s).
// at: next's tile 0 there (kLrmAnywhere: the best candidate), where that fits.
constexpr uint32_t kLrmAnywhere = UINT32_MAX;
bool gemm_handoff(const sim::Config& cfg, const GemmArgs& prev, GemmArgs& next, uint32_t reserved,
                  uint32_t at = kLrmAnywhere, bool whole = false);
// Two calls ahead (GemmArgs::next2): where prev's last tile leaves the DDR time for next's tile
// 0 (next: one tile, handed off whole by prev) and more, places next2 as gemm_handoff(next,
// next2, reserved, at) does, and where that keeps it off prev's last tile and next's tile 0,
// returns the units of its tile 0 prev takes (whole rounds of the channels, at most half the
// tile; next2.pre_units; 0: none).
uint32_t gemm_two_ahead(const sim::Config& cfg, const GemmArgs& prev, const GemmArgs& next, GemmArgs& next2,
                        uint32_t reserved, uint32_t at = kLrmAnywhere);

// Seeds a chain's LRM partial sums (GemmArgs::lrm_in, lrm_acc) with fp16 values: rows
// [row0, row0 + rows) of an [m][n] fp16 matrix at x_ocm (row stride x_stride) become, as
// fp32, the sums that the chain's first call (m, n, k, split as here, lrm_in) adds to its
// outputs, as if an earlier call had left them (lrm_out); the other rows' sums are kept.
// E.g. an MLP's residual as the down GEMM's starting sums: its last chunk then rounds
// residual + MLP once into fp16, and the residual need not stay in OCM (nor go through
// DDR) between the norm and the down GEMM. Per tile, row and PE of a valid column: one
// oscatter.w1 of the row (the PE's fp16 in the low half of the word), vcvt.f32.f16, and
// vsel into the row's lane of the group's sums (vld first where the group is partly
// seeded), vst at lrm_acc + (t * G + g) * 64 (two row sets: the rows of each set to its PEs).
// Uses v16-v23, v28, v30, p1, p2, p4, p5, p7, x1-x4.
struct GemmSeedArgs {
  uint32_t m = 0, n = 0, k = 0, split = 0;  // the chain's call (its row groups and tiles)
  uint32_t row0 = 0, rows = 0;              // the rows seeded
  uint32_t x_ocm = 0, x_stride = 0;         // OCM of row row0 (fp16 [rows][n]); stride in bytes (>= 2n)
  uint32_t lrm_acc = 0;                     // GemmArgs::lrm_acc of the chain
};
// ocm_bytes = one word a PE, a row and a tile through the port.
KernelCost cost_gemm_lrm_seed(const sim::Config& cfg, const GemmSeedArgs& a);
void emit_gemm_lrm_seed(Builder& b, const sim::Config& cfg, const GemmSeedArgs& a);

// Starts the DMA of tile 0's units 0..C-1 (C = plan_gemm(...).channels; unit 0 carries
// the meta) into the call's OCM scratch buffers, on channels 0..C-1, and returns at once
// (no wait; it clobbers x1, x31 and the descriptor smem [a.smem, a.smem + 64 C), which it
// may reuse as soon as the descriptors are submitted). Contract until the call
// emit_gemm_w4(a with prefetched = true): nothing writes [scratch_ocm, +gemm_scratch_bytes)
// nor the packed weight; other kernels may use the DMA channels (the engine is in-order per
// channel: their descriptors queue behind the prefetch, and a dma.wait on channel c < C
// also waits for it). Uses the same fields of a as emit_gemm_w4 (m may be 0).
void emit_gemm_prefetch(Builder& b, const sim::Config& cfg, const GemmArgs& a);
// emit_gemm_prefetch, then up to max_units more of tile 0's code units (C on, where no unit was
// handed off two calls ahead and the tile is not narrow) into the OCM scratch between channel 0's
// buffer and the others' (free where unit 0's buffer is smaller than the scratch's largest), each
// on channel u % C behind its first unit. Returns their count: the call handing a off then sets
// GemmArgs::prestaged to it. (Where the kernels between the prefetch and that call leave the DDR
// time: the units need not stream during that call's last tile.)
uint32_t emit_gemm_prefetch_staged(Builder& b, const sim::Config& cfg, const GemmArgs& a, uint32_t max_units);

}  // namespace gpnpu::kernels
