// Architectural state of the GPNPU: what the semantics functions read and write.
// Contract: the functional model only. Nothing here knows about cycles. The PE
// array is structure-of-arrays so that one array instruction is one loop over
// pes * 16 lanes: vector register r of PE e, lane l is v[(r * npe + e) * 16 + l].
// OCM storage belongs to the platform (sim/) and is lent to the state as a span.
#pragma once
#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>
#include <span>
#include <string>
#include <vector>

#include "isa/fp16.h"
#include "isa/isa.h"

namespace gpnpu::isa {

constexpr int kLanes = 16;        // 32-bit lanes per PE vector register

// PE e's address of a strided array access (oscatter, ogather, obcast.g's groups): 32-bit
// arithmetic, as an instruction's base + immediate (a base below 0 reaches OCM at the PEs whose
// offset passes it).
inline uint32_t pe_address(uint32_t base, uint32_t e, uint32_t stride) { return base + e * stride; }
constexpr int kVregs = 32;
constexpr int kXregs = 32;
constexpr int kPregs = 8;
// Predicate slots kPregs.. are not architectural: a PE-block batch keeps there the value
// that a predicate had when its deferred instructions issued, while the program writes
// the predicate again (isa/batch.h). 56 of them: a GEMM that scatters its next tile inside
// its MAC loop writes p4 four times an iteration (kernels/gemm.h), and with 8 slots its
// batches ran two iterations long.
constexpr int kPredSlots = 8 * kPregs;
constexpr int kLoopDepth = 4;     // nested hardware loops
constexpr int kDmaDescWords = 9;  // words of a DMA descriptor in scalar memory

// An allocator for the large per-PE arrays (register file, LRM): buffers of 1 MiB and
// more are aligned to 2 MiB and asked for transparent huge pages, so that an array
// instruction's 1,024 PEs take a few TLB entries instead of one per 4 KiB page. Smaller
// ones are 64-byte aligned: the SIMD bodies load 16 lanes a cache line at a time (a load
// across two lines costs about twice; isa/batch.h's broadcast lanes).
template <typename T>
struct HugeAlloc {
  using value_type = T;
  HugeAlloc() = default;
  template <typename U>
  HugeAlloc(const HugeAlloc<U>&) {}
  T* allocate(size_t n) {
    const size_t bytes = n * sizeof(T);
    if (bytes < (1u << 20)) return static_cast<T*>(::operator new(bytes, std::align_val_t(64)));
    constexpr size_t kHuge = size_t(2) << 20;
    void* p = std::aligned_alloc(kHuge, (bytes + kHuge - 1) / kHuge * kHuge);
    if (!p) throw std::bad_alloc();
    madvise(p, bytes, MADV_HUGEPAGE);
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t n) {
    if (n * sizeof(T) < (1u << 20)) ::operator delete(p, std::align_val_t(64));
    else std::free(p);
  }
  template <typename U>
  bool operator==(const HugeAlloc<U>&) const { return true; }
};

struct Batch;  // isa/batch.h

struct ArrayShape {
  uint32_t rows = 32, cols = 32;
  uint32_t npe() const { return rows * cols; }
};

// A DMA descriptor as read from scalar memory (9 little-endian 32-bit words):
//   src, dst            bus addresses (see the platform memory map)
//   row_bytes           contiguous bytes per row (> 0)
//   rows, src_stride, dst_stride        second dimension (rows >= 1)
//   planes, src_plane_stride, dst_plane_stride   third dimension (planes >= 1)
struct DmaDescriptor {
  uint32_t src = 0, dst = 0, row_bytes = 0;
  uint32_t rows = 1, src_stride = 0, dst_stride = 0;
  uint32_t planes = 1, src_plane_stride = 0, dst_plane_stride = 0;
  uint64_t bytes() const { return uint64_t(row_bytes) * rows * planes; }
};

// Side effects that the sequencer (timing model, platform) carries out.
enum class Effect : uint8_t { none, halt, mark_begin, mark_end, dma_start, dma_wait, dma_waitall };

struct LoopFrame {
  uint32_t start = 0, end = 0, remaining = 0;
};

struct ArchState {
  ArchState(ArrayShape shape, uint32_t lrm_bytes, uint32_t smem_bytes, std::span<uint8_t> ocm);
  // A view of `of` for another thread that runs part of a batch (isa/batch.cpp): vreg(),
  // predicate() and lrm_of() reach of's storage; the scalar fields are the view's own
  // (sync_view() copies what the array semantics read: predicate summaries and modes).
  struct View {};
  ArchState(View, ArchState& of);
  void sync_view(const ArchState& of);

  // scalar unit
  uint32_t x[kXregs] = {};
  uint32_t pc = 0, next_pc = 0;
  LoopFrame loops[kLoopDepth];
  int loop_depth = 0;
  std::vector<uint8_t> smem;

  // PE array
  ArrayShape shape;
  uint32_t npe;
  std::vector<uint32_t, HugeAlloc<uint32_t>> v;  // [reg][pe][lane]
  std::vector<uint8_t> pred;    // [slot][pe], 0 or 1; p0 is all ones; kPredSlots slots
  // Summary of each predicate, kept by summarise_predicate() whenever pred[p] changes:
  // active PEs, and the first and last active PE (first = npe when none). The timing
  // model and the address checks read only these, never the 1,024 bytes.
  uint32_t pred_count[kPredSlots];
  uint32_t pred_first[kPredSlots], pred_last[kPredSlots];
  void summarise_predicate(int p);
  void clear_predicates();  // p1..p7 off, p0 all on
  // Whether predicate p's active PEs are one contiguous run [first, last] (or none).
  bool predicate_contiguous(int p) const { return pred_count[p] == 0 || pred_last[p] - pred_first[p] + 1 == pred_count[p]; }
  uint32_t lrm_bytes;
  // Bytes from one PE's LRM to the next: lrm_bytes and one cache line, so that the PEs'
  // bytes at one address (what a vld reads) fall in different cache sets; with a
  // power-of-two stride all 1,024 share one set and every vld missed the L1 and L2.
  uint32_t lrm_stride;
  std::vector<uint8_t, HugeAlloc<uint8_t>> lrm;  // [pe][lrm_stride], of which the first lrm_bytes are the PE's LRM
  std::span<uint8_t> ocm;

  // false in --timing-only runs: memory instructions check addresses but move no data
  bool functional = true;

  // The PEs [win_lo, win_hi) that the array semantics visit (isa/semantics.h): every PE,
  // except while a batch of deferred array instructions runs one block of PEs at a time
  // (isa/batch.h; `batch` is set by the sequencer for the run, null otherwise).
  uint32_t win_lo = 0, win_hi = 0;
  Batch* batch = nullptr;

  // Lazy broadcasts, a speed-up invisible to programs (isa/execute.h): with
  // lazy_broadcast on, an unpredicated obcast/obcast.h leaves its 16 lanes in
  // lazy_lanes[r] and sets bit r of `lazy` instead of writing every PE; execute()
  // writes them out before any other instruction touches r, and the sequencer writes
  // all of them out when a run ends. Off by default (direct semantics calls, tests).
  bool lazy_broadcast = false;
  uint32_t lazy = 0;
  uint32_t lazy_lanes[kVregs][kLanes] = {};
  // Two-pattern lazy registers (bits of lazy2, a subset of lazy): `vshr r, r, n @p` of a
  // lazy broadcast r leaves lazy_lanes[r] on the PEs that p disables and lazy_lanes2[r]
  // (the lanes shifted) on those it enables; lazy_sel row r is p's bytes at that time.
  uint32_t lazy2 = 0;
  uint32_t lazy_lanes2[kVregs][kLanes] = {};
  std::vector<uint8_t> lazy_sel;  // [reg][pe]
  const uint8_t* lazy_selector(int r) const { return &lazy_sel[size_t(r) * npe]; }
  // Register r is a lazy broadcast (one pattern) or no longer lazy at all.
  void set_lazy(int r) {
    if (lazy_dq >> r & 1) drop_dq(r);
    lazy_pl &= ~(1u << r);
    lazy |= 1u << r, lazy2 &= ~(1u << r);
  }
  void clear_lazy(int r) { lazy &= ~(1u << r), lazy2 &= ~(1u << r); }
  void materialise(int r);
  void materialise_all() {
    for (uint32_t m = lazy; m; m &= m - 1) materialise(__builtin_ctz(m));
    for (uint32_t m = lazy_dq; m; m &= m - 1) materialise_dq(__builtin_ctz(m));
    for (uint32_t m = lazy_pl; m; m &= m - 1) materialise_pl(__builtin_ctz(m));
  }
  // Per-PE lazy registers (isa/batch.h), never set together with the other lazy kinds:
  // lane l of PE e of register r (bit r of lazy_pl) is pl_of(r, pl_cls[r][l])[e], one word
  // per PE and class of lanes (an oscatter.w1 splats one word per PE: one class; a vsel
  // by a lane mask makes two). In a batch, elementwise instructions of such registers and
  // lane-uniform ones compute one word per PE and class instead of 16.
  static constexpr int kPlClasses = 2;
  uint32_t lazy_pl = 0;
  uint8_t pl_cls[kVregs][kLanes] = {};
  // [reg][class][pe], and kPlSpare more rows of npe words (isa/batch.cpp: take_pl)
  static constexpr int kPlSpare = 4;
  std::vector<uint32_t> pl_vals;
  uint32_t* pl_of(int r, int c) { return &pl_vals[(size_t(r) * kPlClasses + size_t(c)) * npe]; }
  void set_pl(int r) {  // (pl_of and pl_cls of r written)
    if (lazy_dq >> r & 1) drop_dq(r);
    clear_lazy(r);
    lazy_pl |= 1u << r;
  }
  void materialise_pl(int r);
  // What is known of registers whose every PE holds the same 16 lanes (uni_lanes[r]):
  // bits of uni_yes and uni_no; an instruction that writes r forgets it (execute(),
  // Batch::wrote), and isa/batch.cpp looks when neither bit is set.
  uint32_t uni_yes = 0, uni_no = 0;
  uint32_t uni_lanes[kVregs][kLanes] = {};
  void forget_uniform(int r) { uni_yes &= ~(1u << r), uni_no &= ~(1u << r); }
  // Lazy dequantisations (isa/batch.h), never set together with lazy: in a batch, an
  // unpredicated vdq4.f32 leaves its register r unwritten (bit r of lazy_dq) and points
  // it at a snapshot of the codes and the scale and zero it reads (a batch entry copies
  // them when the batch runs, so later writes to its vb and vc do not matter), with its
  // element group in dq_sel[r]. vmla.f32 of such a register by a lazy broadcast, in a
  // batch, dequantises straight into its products (lanes::dq4_mla_f32_bcast); anything
  // else that reads r or writes part of it writes r out first; a whole overwrite drops it.
  // The codes are not copied where that can be avoided (register renaming): a snapshot
  // shares the storage of register vb (`shared`) until vb is next written; then, if a
  // lazy register still points at it, it keeps that storage (`owned`) and vb is given a
  // buffer from the pool (an overwrite of every lane: oscatter, vld, ...; the decode GEMV
  // tile's next oscatter of the codes), or it takes a copy (isa/batch.cpp: Batch::before).
  struct DqSnapshot {
    explicit DqSnapshot(uint32_t npe) : meta(size_t(npe) * 2) {}
    uint32_t* codes = nullptr;    // [pe][16]: vb (owned, or register `shared`'s storage, or none)
    bool owned = false;           // codes is a pool buffer that the snapshot holds
    int shared = -1;
    std::vector<uint32_t> meta;   // [pe][2]: lanes 0 and 1 of vc (scale, zero)
    int refs = 0;                 // lazy registers that point at it
    // vdq4.f32 of element group sel on the PEs [lo, hi) into register storage v.
    void dequant(uint32_t* v, uint32_t lo, uint32_t hi, uint8_t sel) const { dequant(codes, v, lo, hi, sel); }
    void dequant(const uint32_t* codes, uint32_t* v, uint32_t lo, uint32_t hi, uint8_t sel) const;
  };
  // The storage of register r from now on (isa/batch.cpp renames registers while no
  // batch entry is pending; end_renames() puts every register back in v).
  void set_storage(int r, uint32_t* p) { own_map_[r] = p; }
  uint32_t* slot(int r) { return v.data() + size_t(r) * npe * kLanes; }
  // A buffer of one register from the pool (a new one if none is free), and back.
  uint32_t* take_buffer();
  void give_buffer(uint32_t* p) { free_.push_back(p); }
  // Detaches the snapshot from its storage (an owned buffer goes back to the pool).
  void release_codes(DqSnapshot& sn) {
    if (sn.owned) give_buffer(sn.codes);
    sn.codes = nullptr, sn.owned = false, sn.shared = -1;
  }
  // When a run ends, after materialise_all(): every snapshot released, every register back
  // in its slot of v (what the digest, the debugger and the next run read).
  void end_renames();
  uint32_t lazy_dq = 0;
  std::vector<std::unique_ptr<DqSnapshot>> dq_snaps;  // a pool (isa/batch.cpp takes one with no refs)
  DqSnapshot* dq_snap[kVregs] = {};
  uint8_t dq_sel[kVregs] = {};
  void set_dq(int r, DqSnapshot* sn, uint8_t sel) {
    ++sn->refs;
    if (lazy_dq >> r & 1) drop_dq(r);
    clear_lazy(r);
    lazy_pl &= ~(1u << r);
    lazy_dq |= 1u << r, dq_snap[r] = sn, dq_sel[r] = sel;
  }
  void drop_dq(int r) { --dq_snap[r]->refs, dq_snap[r] = nullptr, lazy_dq &= ~(1u << r); }
  void materialise_dq(int r);  // from a complete snapshot: outside a batch's run

  // Numerics of functional runs (no timing): the range of every fp32 -> fp16 conversion
  // (vpack.f16, vcvt.f16.f32) since the sequencer last took it, which it attributes to
  // the open mark; the first conversion that wrote a non-finite fp16 in the run; and
  // f16_saturate (machine parameter fp16_overflow = saturate) clamps overflow to +-65,504.
  struct F16First {
    bool set = false;
    uint32_t pc = 0, pe = 0, element = 0;  // element: of the PE's fp16 results (0..31 vpack, 0..15 vcvt)
    float value = 0;                       // the fp32 value before rounding
  };
  F16Range f16;
  F16First f16_first;
  F16First* f16_first_to = nullptr;  // where note_f16 records the first instead (a batch's entry)
  bool f16_saturate = false;
  void note_f16(const F16Range& r, uint32_t per_pe);  // merges r; indices are pe * per_pe + element

  // the last instruction's side effect for the sequencer
  Effect effect = Effect::none;
  uint32_t effect_arg = 0;  // mark id or DMA channel
  DmaDescriptor dma;

  uint32_t* vreg(int r) { return view_v_ ? view_v_ + size_t(r) * npe * kLanes : vmap_[r]; }
  // Registers r at base + r * npe * 16 from now on (a scratch state's view of other storage).
  void view_registers(uint32_t* base) { view_v_ = base; }
  const uint8_t* predicate(int p) const { return (view_pred_ ? view_pred_ : pred.data()) + size_t(p) * npe; }
  uint8_t* lrm_of(uint32_t pe) { return (view_lrm_ ? view_lrm_ : lrm.data()) + size_t(pe) * lrm_stride; }
  const uint8_t* lrm_of(uint32_t pe) const { return (view_lrm_ ? view_lrm_ : lrm.data()) + size_t(pe) * lrm_stride; }

  // A 64-bit digest of the architectural state (scalar and vector registers, predicates,
  // scalar memory, LRM and OCM) for bit-identity checks of whole runs (sim/platform.h).
  uint64_t digest() const;

  // Advance pc after the instruction at `pc` executed (branches set next_pc);
  // closes hardware-loop iterations. Inline: the sequencer calls it at every issue, and
  // only an instruction whose next pc is the innermost loop's end has work to do.
  void advance() {
    if (next_pc == loop_end()) close_loop_iterations();
  }
  void close_loop_iterations();
  // The innermost hardware loop's end, or kNoLoop outside loops (where advance() finds
  // nothing to close, whatever next_pc is).
  static constexpr uint32_t kNoLoop = UINT32_MAX;
  uint32_t loop_end() const { return loop_depth > 0 ? loops[loop_depth - 1].end : kNoLoop; }

 private:
  uint32_t* view_v_ = nullptr;  // a scratch state's registers (view_registers)
  uint32_t* own_map_[kVregs] = {};  // each register's storage: its slot of v unless renamed
  uint32_t* const* vmap_ = own_map_;  // own_map_, or (a View) the owner's
  std::vector<std::unique_ptr<uint32_t[]>> pool_;  // take_buffer's buffers
  std::vector<uint32_t*> free_;
  const uint8_t* view_pred_ = nullptr;
  uint8_t* view_lrm_ = nullptr;
};

// A per-PE lazy register written out (ArchState::lazy_pl) on the PEs [lo, hi): lane l of
// PE e of v = w1[e] where cls[l] is 1, else w0[e].
void write_pl(uint32_t* v, const uint32_t* w0, const uint32_t* w1, const uint8_t* cls, uint32_t lo, uint32_t hi);

// A fast, non-cryptographic 64-bit hash of n bytes, continuing from h.
uint64_t digest_bytes(const void* data, size_t n, uint64_t h);

// Bounds checks used by the semantics; they throw gpnpu::Error saying which memory,
// which address range and the limit. The sequencer adds pc, instruction and mark.
void check_range(const char* memory, uint64_t addr, uint64_t bytes, uint64_t limit);

}  // namespace gpnpu::isa
