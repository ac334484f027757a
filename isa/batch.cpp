// PE-block batches (isa/batch.h).
#include "isa/batch.h"

#include <algorithm>
#include <cstring>

#include "isa/lanes_simd.h"
#include "isa/semantics.h"

namespace gpnpu::isa {

namespace {
// The OCM forms that read OCM into registers and may wait in a batch (an unpredicated
// obcast leaves a lazy broadcast at issue instead; oscatter.w1 may leave a per-PE lazy one).
bool reads_ocm(const Insn& in) {
  return in.exec == &sem_oscatter || in.exec == &sem_oscatter_h || in.exec == &sem_obcast_g ||
         (in.p != 0 && (in.exec == &sem_obcast || in.exec == &sem_obcast_h));
}
}  // namespace

bool batchable(const Insn& in) {
  const Unit u = in.info->unit;
  if (u == Unit::lrm || reads_ocm(in)) return true;
  return (unit_info(u).flags & kCompute) && in.exec != &sem_vmovn && in.exec != &sem_vext;
}

namespace {

// Whether `in` reads or writes what a deferred instruction writes or reads: the array's
// registers, predicates or LRM, or the numerics (marks, halt). An unpredicated obcast
// only replaces a lazy broadcast's lanes (isa/execute.h) and touches no register.
bool touches_array(const Insn& in) {
  const Unit u = in.info->unit;
  if (u == Unit::scalar || u == Unit::smem || u == Unit::branch || u == Unit::dma) return false;
  return !(in.p == 0 && (in.exec == &sem_obcast || in.exec == &sem_obcast_h));
}

bool reads_scalar(const Insn& in) {
  for (int k = 0; k < in.nsrc; ++k)
    if (in.src[k] < kRegV) return true;
  return false;
}

bool is_vreg(uint8_t id) { return id >= kRegV && id < kRegV + kVregs; }

// The register that `in` may read as a lazy broadcast's 16 lanes, or -1: vc of an
// unpredicated vmac.f16 or vmla.f32 that reads it only there.
int bcast_operand(const Insn& in) {
  if (in.p != 0 || (in.exec != &sem_vmac_f16 && in.exec != &sem_vmla_f32) || in.c == in.a || in.c == in.b) return -1;
  return in.c;
}

// Elementwise instructions that Batch::take_pl computes per PE and class of lanes: the
// number of their source registers (fields b, c, d; no operand but an immediate besides).
int pl_sources(const Insn& in) {
  const SemFn f = in.exec;
  if (f == &sem_vcvt_f32_f16 || f == &sem_vcvt_f32_i32 || f == &sem_vshr || f == &sem_vshl || f == &sem_vmov) return 1;
  if (f == &sem_vand || f == &sem_vor || f == &sem_vxor || f == &sem_vadd_i32 || f == &sem_vsub_i32 || f == &sem_vcmpeq_i32)
    return 2;
  return f == &sem_vsel ? 3 : 0;
}
constexpr uint8_t Insn::* kSourceField[3] = {&Insn::b, &Insn::c, &Insn::d};

// Sets the window for the scope and restores the whole array's when it ends.
struct Window {
  ArchState& s;
  Window(ArchState& s_, uint32_t lo, uint32_t hi) : s(s_) { s.win_lo = lo, s.win_hi = hi; }
  ~Window() { s.win_lo = 0, s.win_hi = s.npe; }
};

}  // namespace

// The lanes of lazy register r (both patterns and the selector of a two-pattern one).
void Batch::copy_lazy(ArchState& s, Entry& e, int r) {
  std::memcpy(e.lanes, s.lazy_lanes[r], sizeof e.lanes);
  if (!(s.lazy2 >> r & 1)) return;
  std::memcpy(e.lanes2, s.lazy_lanes2[r], sizeof e.lanes2);
  const uint8_t* sel = s.lazy_selector(r);
  // The same selector as the last copy (a split-2 GEMM's parity, row after row): shared, so
  // that settle sees its rows' items alike.
  if (!sels_.empty() && std::memcmp(&sels_[sels_.size() - s.npe], sel, s.npe) == 0) {
    e.sel = int32_t(sels_.size() / s.npe) - 1;
    return;
  }
  e.sel = int32_t(sels_.size() / s.npe);
  sels_.insert(sels_.end(), sel, sel + s.npe);
}

void Batch::push_fill(ArchState& s, int r) {
  Entry& e = entries_.emplace_back();
  e.kind = Kind::fill;
  e.reg = uint8_t(r);
  copy_lazy(s, e, r);
  s.clear_lazy(r);
  written_ |= 1u << r;
}

void Batch::push_dq_fill(ArchState& s, int r) {
  Entry& e = entries_.emplace_back();
  e.kind = Kind::dq_fill;
  e.reg = uint8_t(r);
  e.sel = snap_index(s.dq_snap[r]);
  e.codes = s.dq_snap[r]->codes;
  e.sel8 = s.dq_sel[r];
  s.drop_dq(r);
  written_ |= 1u << r;
}

// The snapshot of vdq4.f32 `in`'s vb and vc: this batch's current one when it copies the
// same registers, else one with no lazy register left (a new one if none), filled by a
// snap entry. A snapshot that lost its last register may be refilled in the same batch:
// each block runs the entries in order, so the earlier entries read it first.
// The snapshot shares vb's storage (ArchState::DqSnapshot) unless va is vb (a write-out
// of va would overwrite it) or another snapshot that lazy registers point at shares it:
// then the snap entry copies vb into a pool buffer.
ArchState::DqSnapshot* Batch::snapshot(ArchState& s, const Insn& in) {
  if (cur_snap_ && cur_b_ == in.b && cur_c_ == in.c) return cur_snap_;
  ArchState::DqSnapshot* sn = nullptr;
  bool share = in.a != in.b;
  for (auto& p : s.dq_snaps) {
    if (p->refs == 0) sn = p.get();
    else if (p->shared == in.b) share = false;
  }
  if (!sn) sn = s.dq_snaps.emplace_back(std::make_unique<ArchState::DqSnapshot>(s.npe)).get();
  s.release_codes(*sn);
  Entry& e = entries_.emplace_back();
  e.kind = Kind::snap;
  e.in = &in;
  e.sel = snap_index(sn);
  if (share) {
    sn->codes = s.vreg(in.b), sn->shared = in.b;
  } else {
    sn->codes = e.codes = s.take_buffer(), sn->owned = true;
  }
  if (s.lazy_pl >> in.c & 1) {  // a per-PE lazy vc: its lanes 0 and 1 now
    e.xs = int32_t(plv_.size());
    const uint32_t *scale = s.pl_of(in.c, s.pl_cls[in.c][0]), *zero = s.pl_of(in.c, s.pl_cls[in.c][1]);
    plv_.resize(plv_.size() + 2 * size_t(s.npe));
    uint32_t* m = &plv_[size_t(e.xs)];
    for (uint32_t pe = 0; pe < s.npe; ++pe) m[2 * pe] = scale[pe], m[2 * pe + 1] = zero[pe];
  }
  cur_snap_ = sn, cur_b_ = in.b, cur_c_ = in.c;
  return sn;
}

void Batch::push_pl_fill(ArchState& s, int r) {
  Entry& e = entries_.emplace_back();
  e.kind = Kind::pl_fill;
  e.reg = uint8_t(r);
  e.xs = int32_t(plv_.size());
  int ncls = 0;
  for (int l = 0; l < kLanes; ++l) e.lanes[l] = s.pl_cls[r][l], ncls = std::max(ncls, s.pl_cls[r][l] + 1);
  for (int c = 0; c < ArchState::kPlClasses; ++c)  // (a class not used: any words)
    plv_.insert(plv_.end(), s.pl_of(r, std::min(c, ncls - 1)), s.pl_of(r, std::min(c, ncls - 1)) + s.npe);
  s.lazy_pl &= ~(1u << r);
  written_ |= 1u << r;
}

// Whether every PE of register r holds the same 16 lanes (then in `lanes`): a lazy
// broadcast, or what ArchState::uni_yes / uni_no know, or else a look at its memory
// (current unless an entry writes it) that they keep until r is written.
bool Batch::lane_uniform(ArchState& s, int r, uint32_t* lanes) {
  const uint32_t bit = 1u << r;
  if (s.lazy & bit) {
    if (s.lazy2 & bit) return false;
    std::memcpy(lanes, s.lazy_lanes[r], sizeof s.lazy_lanes[r]);
    return true;
  }
  if ((s.lazy_dq | s.lazy_pl) & bit) return false;
  if (!(s.uni_yes & bit)) {
    if ((s.uni_no | written_) & bit) return false;
    const uint32_t* v = s.vreg(r);
    for (uint32_t e = 1; e < s.npe; ++e)
      if (std::memcmp(v + size_t(e) * kLanes, v, sizeof s.uni_lanes[r])) {
        s.uni_no |= bit;
        return false;
      }
    std::memcpy(s.uni_lanes[r], v, sizeof s.uni_lanes[r]);
    s.uni_yes |= bit;
  }
  std::memcpy(lanes, s.uni_lanes[r], sizeof s.uni_lanes[r]);
  return true;
}

// An unpredicated elementwise instruction (pl_sources) whose sources are per-PE lazy
// registers or lane-uniform ones leaves va per-PE lazy: its result's classes of lanes are
// those with the same sources' classes and uniform lanes (at most kPlClasses), and each
// class is computed now by the instruction's own semantics, on one word per PE: scratch_
// sees ArchState::pl_vals as registers of npe / 16 PEs (register r * kPlClasses + c is
// class c of r; the spare rows after them hold the uniform sources' lanes and results
// that va's other class still has to read).
bool Batch::take_pl(ArchState& s, const Insn& in) {
  const int n = in.p == 0 && s.npe % kLanes == 0 ? pl_sources(in) : 0;
  if (n == 0) return false;
  uint32_t uni[3][kLanes];
  bool any = false;
  for (int k = 0; k < n; ++k) {
    const int r = in.*kSourceField[k];
    if (s.lazy_pl >> r & 1) any = true;
    else if (!lane_uniform(s, r, uni[k])) return false;
  }
  if (!any) return false;
  auto key = [&](int k, int l) {
    const int r = in.*kSourceField[k];
    return s.lazy_pl >> r & 1 ? uint32_t(s.pl_cls[r][l]) : uni[k][l];
  };
  uint8_t cls[kLanes];
  int rep[ArchState::kPlClasses], ncls = 0;
  for (int l = 0; l < kLanes; ++l) {
    int c = 0;
    for (; c < ncls; ++c) {
      bool same = true;
      for (int k = 0; k < n; ++k) same = same && key(k, l) == key(k, rep[c]);
      if (same) break;
    }
    if (c == ncls) {
      if (ncls == ArchState::kPlClasses) return false;
      rep[ncls++] = l;
    }
    cls[l] = uint8_t(c);
  }
  if (!scratch_) {
    scratch_ = std::make_unique<ArchState>(ArrayShape{1, s.npe / kLanes}, 0, 0, std::span<uint8_t>{});
    scratch_->view_registers(s.pl_vals.data());
  }
  ArchState& t = *scratch_;
  constexpr int kSpare = kVregs * ArchState::kPlClasses;  // the first spare row
  bool reads_a = false;  // then a class of va is computed into a spare row first
  for (int k = 0; k < n; ++k) reads_a = reads_a || (in.*kSourceField[k] == in.a && (s.lazy_pl >> in.a & 1));
  reads_a = reads_a && ncls > 1;
  Insn x = in;
  for (int c = 0; c < ncls; ++c) {
    for (int k = 0; k < n; ++k) {
      const int r = in.*kSourceField[k];
      if (s.lazy_pl >> r & 1) {
        x.*kSourceField[k] = uint8_t(r * ArchState::kPlClasses + s.pl_cls[r][rep[c]]);
      } else {
        x.*kSourceField[k] = uint8_t(kSpare + k);
        std::fill(t.vreg(kSpare + k), t.vreg(kSpare + k) + s.npe, uni[k][rep[c]]);
      }
    }
    x.a = uint8_t(reads_a && c == 0 ? kSpare + 3 : in.a * ArchState::kPlClasses + c);
    x.exec(t, x);
  }
  if (reads_a) std::memcpy(s.pl_of(in.a, 0), t.vreg(kSpare + 3), size_t(s.npe) * 4);
  std::memcpy(s.pl_cls[in.a], cls, sizeof cls);
  s.set_pl(in.a);
  return true;
}

namespace {
// What take_pl may have learnt of va's uniform lanes, before va is written, is stale.
void forget_written(ArchState& s, const Insn& in) {
  for (int k = 0; k < in.ndst; ++k)
    if (is_vreg(in.dst[k])) s.forget_uniform(in.dst[k] - kRegV);
}
}  // namespace

namespace {
// Whether `in` overwrites every lane of register r on every PE without reading r.
bool overwrites(const Insn& in, int r) {
  if (in.p != 0) return false;
  const SemFn f = in.exec;
  if (f != &sem_oscatter && f != &sem_oscatter_h && f != &sem_vld && f != &sem_vld_h && f != &sem_obcast &&
      f != &sem_obcast_h && f != &sem_oscatter_w1)
    return false;
  for (int k = 0; k < in.nsrc; ++k)
    if (in.src[k] == kRegV + r) return false;
  return true;
}
}  // namespace

void Batch::before(ArchState& s, const Insn& in) {
  uint32_t dst = 0;
  for (int k = 0; k < in.ndst; ++k)
    if (is_vreg(in.dst[k])) dst |= 1u << (in.dst[k] - kRegV);
  if (!dst) return;
  if (!entries_.empty() && !batchable(in) && touches_array(in)) flush(s);  // (take() would, before `in` runs)
  for (uint32_t m = dst; m; m &= m - 1) {
    const int r = __builtin_ctz(m);
    s.forget_uniform(r);
    if (cur_snap_ && (r == cur_b_ || r == cur_c_)) cur_snap_ = nullptr;
    for (auto& p : s.dq_snaps) {
      ArchState::DqSnapshot& sn = *p;
      if (sn.shared != r) continue;
      if (sn.refs == 0) {  // (entries already made read it before `in` writes it)
        s.release_codes(sn);
        continue;
      }
      if (!entries_.empty() && reads_ocm(in) && overwrites(in, r)) flush(s);  // then rename, as below
      if (entries_.empty() && overwrites(in, r)) {  // r renamed: the snapshot keeps the storage
        s.set_storage(r, s.take_buffer());
        sn.owned = true, sn.shared = -1;
      } else {  // a copy, made now or in the batch's order
        uint32_t* c = s.take_buffer();
        if (entries_.empty()) {
          std::memcpy(c, sn.codes, size_t(s.npe) * kLanes * 4);
        } else {
          Entry& e = entries_.emplace_back();
          e.kind = Kind::copy;
          e.reg = uint8_t(r);
          e.codes = c;
        }
        sn.codes = c, sn.owned = true, sn.shared = -1;
      }
    }
  }
}

bool Batch::take(ArchState& s, const Insn& in) {
  if (!batchable(in)) {
    // A predicate instruction runs now, beside the batch (no deferred instruction writes
    // a predicate); entries that run under the predicate it writes keep its value.
    const bool beside = in.info->unit == Unit::pred && (!(preds_ >> in.a & 1) || keep_predicate(s, in.a));
    if (!entries_.empty() && touches_array(in) && !beside) flush(s);
    return false;
  }
  if (entries_.size() >= kMaxEntries) flush(s);
  {
    Window none(s, 0, 0);  // the instruction's checks, on no PE: an error names it
    in.exec(s, in);
  }
  if (reads_ocm(in) && s.pred_count[in.p]) {  // the OCM bytes it reads: a DMA write there runs the batch first
    // as the semantics' addresses (32 bits, the first enabled PE's (group's) on without wrapping)
    const bool grouped = in.exec == &sem_obcast_g;
    const uint32_t stride = in.exec == &sem_oscatter || in.exec == &sem_oscatter_h || grouped ? s.x[in.c] : 0;
    const uint32_t per = grouped ? std::max<uint32_t>(1, s.x[in.d]) : 1;  // (PEs a group; 0 failed above)
    const uint32_t first = s.pred_first[in.p] / per, last = s.pred_last[in.p] / per;
    const uint64_t lo = uint32_t(s.x[in.b] + uint32_t(in.imm) + stride * first);
    ocm_lo_ = std::min(ocm_lo_, lo);
    ocm_hi_ = std::max(ocm_hi_, lo + uint64_t(stride) * (last - first) + in.info->mem_bytes);
  }
  const bool pl = s.lazy_pl && take_pl(s, in);
  if (s.uni_yes) forget_written(s, in);
  if (pl) return true;
  int bc = bcast_operand(in);
  if (bc >= 0 && (s.lazy2 >> bc & 1) && in.exec != &sem_vmac_f16) bc = -1;  // two patterns: vmac.f16 only
  // vdq4.f32 leaves va lazy; vmla.f32 reads a lazy dequantisation vb times a lazy broadcast
  const bool dq = in.p == 0 && in.exec == &sem_vdq4_f32;
  const int dqb = bc >= 0 && in.exec == &sem_vmla_f32 && (s.lazy >> bc & 1) && (s.lazy_dq >> in.b & 1) && in.a != in.b
                      ? int(in.b) : -1;
  if (s.lazy | s.lazy_dq | s.lazy_pl) {  // as isa::execute(): lazy operands are written out first, here in the batch
    for (int k = 0; k < in.nsrc; ++k) {
      const uint8_t id = in.src[k];
      if (!is_vreg(id)) continue;
      const int r = id - kRegV;
      if ((s.lazy >> r & 1) && r != bc) push_fill(s, r);
      if ((s.lazy_dq >> r & 1) && r != dqb) push_dq_fill(s, r);
      if ((s.lazy_pl >> r & 1) && !(dq && r == in.c && r != in.b)) push_pl_fill(s, r);  // (vdq4.f32 copies its vc)
    }
    for (int k = 0; k < in.ndst; ++k) {  // vdq4.f32 replaces va whole (set_dq)
      const uint8_t id = in.dst[k];
      if (!is_vreg(id) || dq) continue;
      const int r = id - kRegV;
      if (s.lazy >> r & 1) push_fill(s, r);
      if (s.lazy_dq >> r & 1) push_dq_fill(s, r);
      if (s.lazy_pl >> r & 1) push_pl_fill(s, r);
    }
  }
  if (dq) {
    s.set_dq(in.a, snapshot(s, in), uint8_t(in.d));
    if (in.a == cur_b_ || in.a == cur_c_) cur_snap_ = nullptr;  // va is vb or vc: the next vdq4.f32 reads its new value
  } else {
    push_entry(s, in, bc, dqb);
  }
  for (int k = 0; k < in.ndst && !dq; ++k)
    if (is_vreg(in.dst[k])) written_ |= 1u << (in.dst[k] - kRegV);
  return true;
}

// Predicate p is about to be written while entries run under it: its value goes to a
// free slot (kPregs.., isa/state.h) and those entries run under the slot instead (false
// when every slot is taken: the batch must run first).
bool Batch::keep_predicate(ArchState& s, int p) {
  if (slots_ == kPredSlots - kPregs) return false;
  const int slot = kPregs + slots_++;
  std::memcpy(&s.pred[size_t(slot) * s.npe], s.predicate(p), s.npe);
  s.pred_count[slot] = s.pred_count[p], s.pred_first[slot] = s.pred_first[p], s.pred_last[slot] = s.pred_last[p];
  for (Entry& e : entries_)
    if (e.in && e.in->p == p) {
      Insn& moved = moved_.emplace_back(*e.in);
      moved.p = uint8_t(slot);
      e.in = &moved;
    }
  preds_ &= ~(1u << p);
  return true;
}

void Batch::push_entry(ArchState& s, const Insn& in, int bc, int dqb) {
  Entry& e = entries_.emplace_back();
  e.in = &in;
  preds_ |= 1u << in.p;
  e.pc = s.pc;
  if (dqb >= 0) {
    e.kind = Kind::dq_mla;
    copy_lazy(s, e, bc);
    e.sel = snap_index(s.dq_snap[dqb]);
    e.codes = s.dq_snap[dqb]->codes;
    e.sel8 = s.dq_sel[dqb];
  } else if (bc >= 0 && (s.lazy >> bc & 1)) {  // vc is a lazy broadcast: read its lanes now
    e.kind = s.lazy2 >> bc & 1 ? Kind::bcast2 : Kind::bcast;
    copy_lazy(s, e, bc);
  } else if (reads_scalar(in)) {
    e.xs = int32_t(xs_.size());
    std::copy(std::begin(s.x), std::end(s.x), xs_.emplace_back().begin());
  }
}

// vb of the vmac.f16s on the block [lo, hi) in fp32 (lanes::mac_f16_operand: as
// sem_vmac_f16 converts it, NaNs included), converted once for every vmac.f16 that reads
// it until it is written; each conversion takes a new version (deferred items still read
// the older ones).
const uint32_t* Batch::operand(Chunk& c, int b, uint32_t lo, uint32_t hi) {
  if (c.w->cached == b) return c.w->fb_cur;
  if (c.w->pend >> b & 1) settle(c, 1u << b, lo, hi);  // vb's own items first
  if (c.w->nver == Work::kVersions) {
    settle(c, c.w->pend, lo, hi);
    c.w->nver = 0;
  }
  uint32_t* fb = &c.w->fbv[size_t(c.w->nver++) * Work::kVersionStride];
  lanes::mac_f16_operand(fb, c.st.vreg(b) + size_t(lo) * kLanes, size_t(hi - lo) * kLanes);
  c.w->cached = b;
  c.w->fb_cur = fb;
  return fb;
}

// Runs the deferred items of the registers `regs` (Work) on the block [lo, hi). Several
// registers run 16 PEs at a time (what mac_f16_cvt_chain's AVX-512 body runs at once),
// each register's chain in turn, so that the versions of vb that their chains share stay
// in the L1 cache.
//
// Registers whose items read the same vb versions under the same selectors (a GEMM's
// rows: one weight vector, one activation per row) run kChainRows at a time
// (mac_f16_cvt_chain_rows), each version loaded once for all of them; the pending
// registers alike to one in `regs` settle with it (a chain may always run early: nothing
// else reads its accumulator before the entry that settles it).
void Batch::settle(Chunk& c, uint32_t regs, uint32_t lo, uint32_t hi) {
  regs &= c.w->pend;
  if (!regs) return;
  const uint32_t n = hi - lo;
  const auto& items = c.w->items;
  auto same_versions = [&](int r, int q) {
    const std::vector<lanes::MacItem>& a = items[r];
    const std::vector<lanes::MacItem>& b = items[q];
    if (a.size() != b.size()) return false;
    for (size_t t = 0; t < a.size(); ++t)
      if (a[t].fb != b[t].fb || a[t].sel != b[t].sel) return false;
    return true;
  };
  for (uint32_t m = regs, others = c.w->pend & ~regs; m && others; m &= m - 1)
    for (uint32_t q = others; q; q &= q - 1)
      if (same_versions(__builtin_ctz(m), __builtin_ctz(q))) regs |= 1u << __builtin_ctz(q), others &= ~(1u << __builtin_ctz(q));
  uint32_t rest = regs;
  for (uint32_t m = regs; m; m &= m - 1) {
    const int r = __builtin_ctz(m);
    if (!(rest >> r & 1)) continue;
    int rows[lanes::kChainRows] = {r};
    int k = 1;
    for (uint32_t q = rest & ~((2u << r) - 1); q && k < lanes::kChainRows; q &= q - 1)
      if (same_versions(r, __builtin_ctz(q))) rows[k++] = __builtin_ctz(q);
    if (k < lanes::kChainRows) continue;
    uint32_t* a[lanes::kChainRows];
    const lanes::MacItem* it[lanes::kChainRows];
    for (int j = 0; j < k; ++j) {
      a[j] = c.st.vreg(rows[j]) + size_t(lo) * kLanes, it[j] = items[rows[j]].data();
      rest &= ~(1u << rows[j]);
    }
    lanes::mac_f16_cvt_chain_rows(a, it, items[r].size(), 0, n);
  }
  const uint32_t step = rest & (rest - 1) ? 16 : n;
  for (uint32_t e = 0; e < n; e += step)
    for (uint32_t m = rest; m; m &= m - 1) {
      const int r = __builtin_ctz(m);
      const std::vector<lanes::MacItem>& it = items[r];
      lanes::mac_f16_cvt_chain(c.st.vreg(r) + size_t(lo) * kLanes, it.data(), it.size(), e, std::min(n, e + step));
    }
  for (uint32_t m = regs; m; m &= m - 1) c.w->items[__builtin_ctz(m)].clear();
  c.w->pend &= ~regs;
}

// vmac.f16 on the block [lo, hi): by a broadcast, deferred (Chunk); else now.
void Batch::mac(Chunk& c, const Entry& e, uint32_t lo, uint32_t hi) {
  ArchState& s = c.st;
  const Insn& in = *e.in;
  const uint32_t* fb = operand(c, in.b, lo, hi);
  if (e.kind == Kind::bcast || e.kind == Kind::bcast2) {
    const uint32_t* cf = &cf_[size_t(e.cf)];
    c.w->items[in.a].push_back({fb, cf, cf + kLanes, e.kind == Kind::bcast2 ? &sels_[size_t(e.sel) * s.npe + lo] : nullptr});
    c.w->pend |= 1u << in.a;
    return;
  }
  uint32_t* a = s.vreg(in.a);
  fb -= size_t(lo) * kLanes;  // indexed like the registers
  const uint32_t* vc = s.vreg(in.c);
  for_lane_runs(s, in, [&](size_t k, size_t n) { lanes::mac_f16_cvt(a + k, fb + k, vc + k, n); });
}

// Every entry on the PEs [e0, e1), a block of kBlockPes at a time.
void Batch::run_chunk(Chunk& c, uint32_t e0, uint32_t e1) {
  ArchState& s = c.st;
  static thread_local std::unique_ptr<Work> work;  // (per thread: a chunk's versions stay in its core's cache)
  if (!work) work = std::make_unique<Work>();
  c.w = work.get();
  c.first.assign(entries_.size(), {});
  for (uint32_t lo = e0; lo < e1; lo += kBlockPes) {
    const uint32_t hi = std::min(e1, lo + kBlockPes);
    Window block(s, lo, hi);
    c.w->cached = -1;
    c.w->nver = 0;
    for (size_t j = 0; j < entries_.size(); ++j) {
      const Entry& e = entries_[j];
      if (c.w->pend & touch_[j] && e.cf < 0) settle(c, touch_[j], lo, hi);  // (a deferred vmac.f16 settles its vb)
      switch (e.kind) {
        case Kind::fill: {
          uint32_t* v = s.vreg(e.reg);
          if (e.sel >= 0) {
            const uint8_t* sel = &sels_[size_t(e.sel) * s.npe];
            for (uint32_t pe = lo; pe < hi; ++pe) std::memcpy(v + size_t(pe) * kLanes, sel[pe] ? e.lanes2 : e.lanes, sizeof e.lanes);
          } else {
            for (uint32_t pe = lo; pe < hi; ++pe) std::memcpy(v + size_t(pe) * kLanes, e.lanes, sizeof e.lanes);
          }
          if (c.w->cached == e.reg) c.w->cached = -1;
          continue;
        }
        case Kind::copy:
          std::memcpy(e.codes + size_t(lo) * kLanes, s.vreg(e.reg) + size_t(lo) * kLanes, size_t(hi - lo) * kLanes * 4);
          continue;
        case Kind::snap: {
          const uint32_t *b = s.vreg(e.in->b), *m = s.vreg(e.in->c);
          ArchState::DqSnapshot& sn = *snaps_[size_t(e.sel)];
          if (e.codes) std::memcpy(e.codes + size_t(lo) * kLanes, b + size_t(lo) * kLanes, size_t(hi - lo) * kLanes * 4);
          if (e.xs >= 0) std::memcpy(&sn.meta[2 * lo], &plv_[size_t(e.xs) + 2 * lo], size_t(hi - lo) * 8);
          else
            for (uint32_t pe = lo; pe < hi; ++pe) std::memcpy(&sn.meta[2 * pe], m + size_t(pe) * kLanes, 8);
          continue;
        }
        case Kind::pl_fill: {
          uint8_t cls[kLanes];
          for (int l = 0; l < kLanes; ++l) cls[l] = uint8_t(e.lanes[l]);
          write_pl(s.vreg(e.reg), &plv_[size_t(e.xs)], &plv_[size_t(e.xs) + s.npe], cls, lo, hi);
          if (c.w->cached == e.reg) c.w->cached = -1;
          continue;
        }
        case Kind::dq_fill: {
          snaps_[size_t(e.sel)]->dequant(e.codes, s.vreg(e.reg), lo, hi, e.sel8);
          if (c.w->cached == e.reg) c.w->cached = -1;
          continue;
        }
        case Kind::dq_mla:
          lanes::dq4_mla_f32_bcast(s.vreg(e.in->a) + size_t(lo) * kLanes, e.codes + size_t(lo) * kLanes,
                                   &snaps_[size_t(e.sel)]->meta[2 * lo], e.sel8, e.lanes, hi - lo);
          break;
        case Kind::bcast2: mac(c, e, lo, hi); break;
        case Kind::bcast:
          if (e.in->exec == &sem_vmac_f16) mac(c, e, lo, hi);
          else lanes::mla_f32_bcast(s.vreg(e.in->a) + size_t(lo) * kLanes, s.vreg(e.in->b) + size_t(lo) * kLanes, e.lanes,
                                    size_t(hi - lo) * kLanes);
          break;
        case Kind::exec:
          if (e.in->exec == &sem_vmac_f16) {
            mac(c, e, lo, hi);
            break;
          }
          if (e.xs >= 0) std::copy(xs_[size_t(e.xs)].begin(), xs_[size_t(e.xs)].end(), s.x);
          s.pc = e.pc;
          s.f16_first_to = &c.first[j];
          e.in->exec(s, *e.in);
          s.f16_first_to = nullptr;
          break;
      }
      for (int k = 0; k < e.in->ndst; ++k)  // vb written: convert it again
        if (e.in->dst[k] == kRegV + c.w->cached) c.w->cached = -1;
    }
    settle(c, c.w->pend, lo, hi);
  }
}

void Batch::flush(ArchState& s) {
  if (entries_.empty()) return;
  // The chunks of PEs are independent (every deferred instruction touches only its own
  // PE), so they may run on two threads (split_pes: only while a CPU is free, and only
  // while it pays); each chunk runs with a view of the state of its own.
  // What each entry names (the deferred vmac.f16s' items settle before another entry
  // touches their accumulator) and the deferred vmac.f16s' lanes in fp32.
  touch_.resize(entries_.size());
  cf_.clear();
  for (size_t j = 0; j < entries_.size(); ++j) {
    Entry& e = entries_[j];
    uint32_t m = 0;
    if (e.kind == Kind::fill || e.kind == Kind::dq_fill || e.kind == Kind::pl_fill || e.kind == Kind::copy) m |= 1u << e.reg;
    if (e.in) {
      for (int k = 0; k < e.in->nsrc; ++k)
        if (is_vreg(e.in->src[k])) m |= 1u << (e.in->src[k] - kRegV);
      for (int k = 0; k < e.in->ndst; ++k)
        if (is_vreg(e.in->dst[k])) m |= 1u << (e.in->dst[k] - kRegV);
    }
    touch_[j] = m;
    e.cf = -1;
    if ((e.kind == Kind::bcast || e.kind == Kind::bcast2) && e.in->exec == &sem_vmac_f16) {
      e.cf = int32_t(cf_.size());
      cf_.resize(cf_.size() + 2 * kLanes);
      lanes::mac_f16_operand(&cf_[size_t(e.cf)], e.lanes, kLanes);
      if (e.kind == Kind::bcast2) lanes::mac_f16_operand(&cf_[size_t(e.cf) + kLanes], e.lanes2, kLanes);
    }
  }
  uint32_t used = 0;
  split_pes(s.npe, uint32_t(entries_.size()), [&](uint32_t e0, uint32_t e1) {
    const uint32_t j = split_chunk(s.npe, e0);
    if (!chunks_[j]) chunks_[j] = std::make_unique<Chunk>(s);  // (a chunk runs on one thread)
    chunks_[j]->st.sync_view(s);
    run_chunk(*chunks_[j], e0, e1);
  });
  for (uint32_t j = 0; j < kSplitChunks; ++j) {
    if (!chunks_[j] || chunks_[j]->first.empty()) continue;
    Chunk& c = *chunks_[j];
    used |= 1u << j;
    s.f16.merge(c.st.f16);  // sums and maxima: in any order
    c.st.f16 = {};
  }
  // The first non-finite fp16 in program order, and in PE order within an instruction
  // (chunks in PE order).
  for (size_t k = 0; k < entries_.size() && !s.f16_first.set; ++k)
    for (uint32_t j = 0; j < kSplitChunks; ++j)
      if (used >> j & 1 && chunks_[j]->first[k].set) {
        s.f16_first = chunks_[j]->first[k];
        break;
      }
  for (uint32_t j = 0; j < kSplitChunks; ++j)
    if (chunks_[j]) chunks_[j]->first.clear();
  entries_.clear();
  preds_ = 0;
  slots_ = 0;
  moved_.clear();
  ocm_lo_ = UINT64_MAX, ocm_hi_ = 0;
  cur_snap_ = nullptr;
  written_ = 0;
  plv_.clear();
  snaps_.clear();
  xs_.clear();
  sels_.clear();
}

}  // namespace gpnpu::isa
