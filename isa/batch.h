// PE-block batches: a speed-up of functional runs, invisible to programs. One array
// instruction streams whole registers (1,024 PEs x 64 bytes = 64 KiB each) through a
// 2 MiB register file that does not stay in the L2 cache. Most array instructions touch
// only their own PE's registers and LRM, so a straight run of them gives the same
// result when it executes one block of PEs at a time (every instruction of the run on
// PEs 0..63, then every one on 64..127, ...), and a block's registers stay in the L1
// and L2 caches across the run.
//
// While the sequencer sets ArchState::batch (functional runs without trace hooks),
// isa::execute() defers such instructions ("batchable": every kCompute instruction but
// vmovn and vext, the LRM loads and stores, and the OCM forms that read OCM into
// registers: oscatter, oscatter.h, a predicated obcast) into the batch, with what they
// read of the rest of the state at issue time: the scalar registers (a copy, when they
// read one) and the lanes of a lazy broadcast (isa/execute.h). The OCM forms read OCM
// when the batch runs: the batch keeps the range they read, and a DMA that writes into
// it runs the batch first (before_ocm_write, called by the platform). A predicate
// instruction runs beside the batch; entries that run under the predicate it writes keep
// its old value in a predicate slot (kPredSlots, isa/state.h; the batch runs when the
// slots run out). An unpredicated obcast leaves a lazy broadcast at issue. Any other
// instruction that touches the array or the numerics (OCM gathers, oscatter.w1, vmovn,
// vext, marks, halt) first runs the batch (flush); scalar, branch, scalar-memory and DMA
// instructions do not. Each deferred instruction's checks (LRM range, element group,
// lane number) run at issue, on an empty window, so errors name the right instruction
// and cycle. The fp16 numerics (ArchState::f16) are sums and
// maxima, and the first non-finite conversion is kept per deferred instruction and
// taken in program order, so they equal an instruction-by-instruction run; tests/sim
// (test_lazy_broadcast.cpp) compares both ways bit for bit.
#pragma once
#include <array>
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "isa/lane_pool.h"
#include "isa/lanes_simd.h"
#include "isa/state.h"

namespace gpnpu::isa {

struct Batch {
  static constexpr uint32_t kBlockPes = 64;      // PEs per block: 4 KiB of each register
  static constexpr size_t kMaxEntries = 512;     // a longer run is flushed in parts

  // Defers `in` (true), or runs the batch first when `in` needs the array state up to
  // date (false: the caller then executes `in`).
  bool take(ArchState& s, const Insn& in);
  // Runs every deferred instruction, block by block (chunks of blocks on two threads
  // where split_pes splits, lane_pool.h); the batch is then empty.
  void flush(ArchState& s);
  bool empty() const { return entries_.empty(); }
  // OCM bytes [lo, hi) are about to be written (a DMA): runs the batch first if one of
  // its entries reads them (the OCM forms wait in a batch, reading OCM when it runs).
  void before_ocm_write(ArchState& s, uint64_t lo, uint64_t hi) {
    if (lo < ocm_hi_ && ocm_lo_ < hi) flush(s);
  }
  // `in` is about to execute (isa::execute(), before any of its effects): an instruction
  // that take() would not defer runs the batch first; then, for each register r that `in`
  // writes, what is known of r (lane-uniform, ArchState::uni_yes / uni_no) and the current
  // snapshot of r are stale, and a snapshot that shares r's storage stops sharing it
  // (ArchState::DqSnapshot: r renamed, or the snapshot given a copy).
  void before(ArchState& s, const Insn& in);

 private:
  // bcast: a vmac.f16 or vmla.f32 whose vc is a lazy broadcast, read from `lanes`;
  // bcast2: a vmac.f16 whose vc is a two-pattern lazy register (ArchState::lazy2).
  // Lazy dequantisations (ArchState::lazy_dq): snap copies a vdq4.f32's vb and vc into a
  // snapshot; dq_mla is a vmla.f32 whose vb is a lazy dequantisation (a snapshot and
  // element group `sel8`) and vc a lazy broadcast (`lanes`); dq_fill writes such a
  // register out. pl_fill writes a per-PE lazy register (ArchState::lazy_pl) out: `lanes`
  // holds each lane's class.
  // copy copies register `reg` into `codes` (a snapshot that stops sharing the register's
  // storage while entries are pending).
  enum class Kind : uint8_t { exec, fill, bcast, bcast2, snap, dq_mla, dq_fill, pl_fill, copy };
  struct Entry {
    const Insn* in = nullptr;
    Kind kind = Kind::exec;
    uint8_t reg = 0;          // fill, dq_fill: the register a lazy one is written out to
    uint8_t sel8 = 0;         // dq_mla, dq_fill: the element group
    // exec: index of the scalar registers' copy, or -1; pl_fill: its words in plv_; snap:
    // vc's scale and zero ([pe][2]) there, or -1
    int32_t xs = -1;
    // fill, bcast2 of a two-pattern register: its selector's copy in sels_; snap, dq_mla,
    // dq_fill: the snapshot's index in snaps_
    int32_t sel = -1;
    uint32_t pc = 0;
    // dq_mla, dq_fill: the snapshot's codes when the entry was made; snap: where it copies
    // vb (null: it shares vb's storage and copies only the scale and zero)
    uint32_t* codes = nullptr;
    int32_t cf = -1;          // a vmac.f16 of kind bcast or bcast2: its lanes in fp32 in cf_
    uint32_t lanes[kLanes];   // fill, bcast, bcast2: the broadcast lanes
    uint32_t lanes2[kLanes];  // the same, with sel: the lanes of the PEs whose selector is set
  };
  // What a thread runs a block's entries with: vb of the block's vmac.f16s converted to
  // fp32 once (a run of vmac.f16 that share vb: a matrix tile times several activations;
  // `cached` is that register, or -1, and fb_cur its conversion). A block's vmac.f16s by
  // broadcasts (kinds bcast, bcast2) are deferred: each appends an item (its vb's
  // conversion, a version in fbv that later conversions do not overwrite, and its lanes)
  // to its accumulator's list (`pend`: the registers with items), and the items run in
  // order when another entry names the accumulator, when the versions run out, and at the
  // block's end (settle): the accumulator stays in host registers across them instead of
  // streaming through the cache once per vmac.f16 (the tower's matmul: 16 accumulators, vb
  // rotated once per 16 vmac.f16s). One per thread, so that its 278 KB of versions stay
  // in that core's cache whichever chunks the thread runs.
  struct Work {
    static constexpr uint32_t kVersions = 64;
    // Words from one version to the next: a block's 4 KiB and 256 bytes, so that the
    // versions of a few PEs (what a chain reads) fall in different cache sets.
    static constexpr uint32_t kVersionStride = kBlockPes * kLanes + 64;
    alignas(64) uint32_t fbv[kVersions * kVersionStride];
    const uint32_t* fb_cur = nullptr;
    uint32_t nver = 0;
    int cached = -1;
    uint32_t pend = 0;
    std::vector<lanes::MacItem> items[kVregs];
  };
  // What one chunk of PEs runs with (the chunks of split_pes, lane_pool.h, run on two
  // threads): a view of the state (its own pc, scalar registers, window and numerics),
  // each entry's first non-finite fp16 conversion in the chunk, and the running thread's
  // Work.
  struct Chunk {
    explicit Chunk(ArchState& s) : st(ArchState::View{}, s) {}
    ArchState st;
    std::vector<ArchState::F16First> first;
    Work* w = nullptr;
  };
  void copy_lazy(ArchState& s, Entry& e, int r);
  void push_fill(ArchState& s, int r);
  void push_dq_fill(ArchState& s, int r);
  void push_entry(ArchState& s, const Insn& in, int bc, int dqb);
  void push_pl_fill(ArchState& s, int r);
  bool lane_uniform(ArchState& s, int r, uint32_t* lanes);
  bool take_pl(ArchState& s, const Insn& in);
  bool keep_predicate(ArchState& s, int p);
  ArchState::DqSnapshot* snapshot(ArchState& s, const Insn& in);
  void run_chunk(Chunk& c, uint32_t e0, uint32_t e1);
  void mac(Chunk& c, const Entry& e, uint32_t lo, uint32_t hi);
  const uint32_t* operand(Chunk& c, int b, uint32_t lo, uint32_t hi);
  void settle(Chunk& c, uint32_t regs, uint32_t lo, uint32_t hi);
  std::vector<uint32_t> touch_;  // each entry's vector registers (read or written), set by flush
  std::vector<uint32_t, HugeAlloc<uint32_t>> cf_;  // the deferred vmac.f16s' lanes in fp32 (Entry::cf), set by flush
  std::vector<Entry> entries_;
  std::unique_ptr<Chunk> chunks_[kSplitChunks];
  std::vector<std::array<uint32_t, kXregs>> xs_;
  std::vector<uint8_t> sels_;  // selectors of two-pattern registers, npe bytes each
  std::vector<ArchState::DqSnapshot*> snaps_;  // the snapshots that entries name
  int32_t snap_index(ArchState::DqSnapshot* sn) {
    snaps_.push_back(sn);
    return int32_t(snaps_.size() - 1);
  }
  // The snapshot that this batch's last snap entry fills and the registers it copies
  // (vb, vc), while neither is written (wrote()): later vdq4.f32s of the same vb and vc
  // share it.
  ArchState::DqSnapshot* cur_snap_ = nullptr;
  uint8_t cur_b_ = 0, cur_c_ = 0;
  uint32_t written_ = 0;       // registers that the entries write (their memory is not yet current)
  uint32_t preds_ = 0;         // predicates that the entries run under (field p)
  int slots_ = 0;              // predicate slots kPregs.. taken (keep_predicate)
  std::deque<Insn> moved_;     // entries' instructions moved to a slot's predicate
  uint64_t ocm_lo_ = UINT64_MAX, ocm_hi_ = 0;  // the OCM bytes that the entries read
  std::vector<uint32_t> plv_;  // words of per-PE lazy registers copied at issue
  std::unique_ptr<ArchState> scratch_;  // take_pl: one word per PE as 16 lanes of npe / 16 PEs
};

// Whether `in` may be deferred into a batch (see above).
bool batchable(const Insn& in);

}  // namespace gpnpu::isa
