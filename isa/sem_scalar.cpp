// Semantics of the scalar unit, control flow, marks and per-PE predicates.
#include <algorithm>
#include <cstring>

#include "isa/error.h"
#include "isa/semantics.h"

namespace gpnpu::isa {

namespace {
inline int32_t sx(uint32_t v) { return int32_t(v); }
inline uint32_t IMM(const Insn& i) { return uint32_t(i.imm); }
inline void branch_if(ArchState& s, const Insn& i, bool taken) {
  if (taken) s.next_pc = uint32_t(int64_t(s.pc) + i.imm);
}
}  // namespace

SEM(nop) {}
SEM(add) { WX(s, i.a, X(s, i.b) + X(s, i.c)); }
SEM(sub) { WX(s, i.a, X(s, i.b) - X(s, i.c)); }
SEM(and_) { WX(s, i.a, X(s, i.b) & X(s, i.c)); }
SEM(or_) { WX(s, i.a, X(s, i.b) | X(s, i.c)); }
SEM(xor_) { WX(s, i.a, X(s, i.b) ^ X(s, i.c)); }
SEM(sll) { WX(s, i.a, X(s, i.b) << (X(s, i.c) & 31)); }
SEM(srl) { WX(s, i.a, X(s, i.b) >> (X(s, i.c) & 31)); }
SEM(sra) { WX(s, i.a, uint32_t(sx(X(s, i.b)) >> (X(s, i.c) & 31))); }
SEM(mul) { WX(s, i.a, X(s, i.b) * X(s, i.c)); }
SEM(slt) { WX(s, i.a, sx(X(s, i.b)) < sx(X(s, i.c))); }
SEM(sltu) { WX(s, i.a, X(s, i.b) < X(s, i.c)); }
SEM(divu) { WX(s, i.a, X(s, i.c) ? X(s, i.b) / X(s, i.c) : 0xffffffffu); }
SEM(remu) { WX(s, i.a, X(s, i.c) ? X(s, i.b) % X(s, i.c) : X(s, i.b)); }
SEM(min) { WX(s, i.a, uint32_t(std::min(sx(X(s, i.b)), sx(X(s, i.c))))); }
SEM(max) { WX(s, i.a, uint32_t(std::max(sx(X(s, i.b)), sx(X(s, i.c))))); }
SEM(addi) { WX(s, i.a, X(s, i.b) + IMM(i)); }
SEM(andi) { WX(s, i.a, X(s, i.b) & IMM(i)); }
SEM(ori) { WX(s, i.a, X(s, i.b) | IMM(i)); }
SEM(xori) { WX(s, i.a, X(s, i.b) ^ IMM(i)); }
SEM(slli) { WX(s, i.a, X(s, i.b) << (IMM(i) & 31)); }
SEM(srli) { WX(s, i.a, X(s, i.b) >> (IMM(i) & 31)); }
SEM(srai) { WX(s, i.a, uint32_t(sx(X(s, i.b)) >> (IMM(i) & 31))); }
SEM(muli) { WX(s, i.a, X(s, i.b) * IMM(i)); }
SEM(slti) { WX(s, i.a, sx(X(s, i.b)) < i.imm); }
SEM(li) { WX(s, i.a, IMM(i)); }

SEM(lw) {
  uint32_t addr = X(s, i.b) + IMM(i);
  check_range("scalar memory", addr, 4, s.smem.size());
  uint32_t v;
  std::memcpy(&v, &s.smem[addr], 4);
  WX(s, i.a, v);
}
SEM(sw) {
  uint32_t addr = X(s, i.b) + IMM(i);
  check_range("scalar memory", addr, 4, s.smem.size());
  uint32_t v = X(s, i.c);
  std::memcpy(&s.smem[addr], &v, 4);
}

SEM(beq) { branch_if(s, i, X(s, i.b) == X(s, i.c)); }
SEM(bne) { branch_if(s, i, X(s, i.b) != X(s, i.c)); }
SEM(blt) { branch_if(s, i, sx(X(s, i.b)) < sx(X(s, i.c))); }
SEM(bge) { branch_if(s, i, sx(X(s, i.b)) >= sx(X(s, i.c))); }
SEM(bltu) { branch_if(s, i, X(s, i.b) < X(s, i.c)); }
SEM(bgeu) { branch_if(s, i, X(s, i.b) >= X(s, i.c)); }
SEM(jal) {
  WX(s, i.a, s.pc + 1);
  branch_if(s, i, true);
}
SEM(jalr) {
  uint32_t target = X(s, i.b) + IMM(i);
  WX(s, i.a, s.pc + 1);
  s.next_pc = target;
}
SEM(loop) {
  uint32_t count = X(s, i.b);
  uint32_t end = uint32_t(int64_t(s.pc) + i.imm);
  if (end <= s.pc + 1) fail("loop at pc {}: the body is empty (end label must come after the next instruction)", s.pc);
  if (count == 0) {
    s.next_pc = end;
    return;
  }
  if (s.loop_depth == kLoopDepth) fail("loop at pc {}: more than {} nested hardware loops", s.pc, kLoopDepth);
  s.loops[s.loop_depth++] = LoopFrame{s.pc + 1, end, count};
}
SEM(halt) { s.effect = Effect::halt; }
SEM(mark_begin) {
  s.effect = Effect::mark_begin;
  s.effect_arg = IMM(i);
}
SEM(mark_end) {
  s.effect = Effect::mark_end;
  s.effect_arg = IMM(i);
}

namespace {
uint8_t* writable_pred(ArchState& s, int p) {
  if (p == 0) fail("p0 is the constant all-ones predicate and cannot be written");
  return &s.pred[size_t(p) * s.npe];
}
template <typename F>
void set_pred(ArchState& s, int p, F&& f) {
  uint8_t* pr = writable_pred(s, p);
  for (uint32_t e = 0; e < s.npe; ++e) pr[e] = f(e) ? 1 : 0;
  s.summarise_predicate(p);
}
// PEs [lo, hi) of every row of `rows` rows of `stride` PEs on, every other PE off
// (0 <= lo, hi <= stride), with the summary written directly: the range forms run at
// every issue of their instruction, timing-only runs too.
void set_pred_runs(ArchState& s, int p, uint32_t rows, uint32_t stride, uint32_t lo, uint32_t hi) {
  uint8_t* pr = writable_pred(s, p);
  std::memset(pr, 0, s.npe);
  if (lo >= hi || rows == 0) {
    s.pred_count[p] = 0, s.pred_first[p] = s.npe, s.pred_last[p] = 0;
    return;
  }
  for (uint32_t r = 0; r < rows; ++r) std::memset(pr + size_t(r) * stride + lo, 1, hi - lo);
  s.pred_count[p] = rows * (hi - lo);
  s.pred_first[p] = lo;
  s.pred_last[p] = (rows - 1) * stride + hi - 1;
}
}  // namespace

SEM(pset_range) {
  const uint32_t lo = std::min(X(s, i.b), s.npe), hi = std::min(X(s, i.c), s.npe);
  set_pred_runs(s, i.a, 1, s.npe, lo, hi);  // e in [lo, hi)
}
SEM(pset_rows) {
  const uint64_t cols = s.shape.cols;  // e / cols in [lo, hi): e in [lo * cols, hi * cols)
  const uint32_t lo = uint32_t(std::min<uint64_t>(X(s, i.b) * cols, s.npe));
  const uint32_t hi = uint32_t(std::min<uint64_t>(X(s, i.c) * cols, s.npe));
  set_pred_runs(s, i.a, 1, s.npe, lo, hi);
}
SEM(pset_cols) {
  const uint32_t cols = s.shape.cols;  // e % cols in [lo, hi), in each row
  set_pred_runs(s, i.a, s.shape.rows, cols, std::min(X(s, i.b), cols), std::min(X(s, i.c), cols));
}
SEM(pset_cmod) {
  const uint32_t cols = s.shape.cols, h = X(s, i.b), m = X(s, i.c);
  set_pred(s, i.a, [&](uint32_t e) { return m != 0 && (e % cols) % m == h; });
}
// pand, por and pnot of predicates whose active PEs are one run each (what pset.range
// and pset.rows write) give at most two runs: written with memset and their summary,
// without the per-PE loop and summarise_predicate(), which the decode program's por at
// long context spent 23% of a timing-only step on. Other operands take the PE loop.
namespace {
struct Run {
  uint32_t lo = 0, hi = 0;  // PEs [lo, hi); empty when lo >= hi
};
bool one_run(const ArchState& s, int p, Run& r) {
  if (!s.predicate_contiguous(p)) return false;
  r = s.pred_count[p] ? Run{s.pred_first[p], s.pred_last[p] + 1} : Run{};
  return true;
}
void set_pred_two_runs(ArchState& s, int p, Run a, Run b) {
  uint8_t* pr = writable_pred(s, p);
  if (a.lo >= a.hi) a = b, b = {};
  if (b.lo < b.hi && b.lo <= a.hi && a.lo <= b.hi) a = {std::min(a.lo, b.lo), std::max(a.hi, b.hi)}, b = {};  // they touch
  std::memset(pr, 0, s.npe);
  if (a.lo >= a.hi) {
    s.pred_count[p] = 0, s.pred_first[p] = s.npe, s.pred_last[p] = 0;
    return;
  }
  std::memset(pr + a.lo, 1, a.hi - a.lo);
  uint32_t count = a.hi - a.lo, first = a.lo, last = a.hi - 1;
  if (b.lo < b.hi) {
    std::memset(pr + b.lo, 1, b.hi - b.lo);
    count += b.hi - b.lo, first = std::min(first, b.lo), last = std::max(last, b.hi - 1);
  }
  s.pred_count[p] = count, s.pred_first[p] = first, s.pred_last[p] = last;
}
}  // namespace

SEM(pand) {
  Run b, c;
  if (one_run(s, i.b, b) && one_run(s, i.c, c)) return set_pred_two_runs(s, i.a, {std::max(b.lo, c.lo), std::min(b.hi, c.hi)}, {});
  const uint8_t *pb = s.predicate(i.b), *pc = s.predicate(i.c);
  set_pred(s, i.a, [&](uint32_t e) { return pb[e] & pc[e]; });
}
SEM(por) {
  Run b, c;
  if (one_run(s, i.b, b) && one_run(s, i.c, c)) return set_pred_two_runs(s, i.a, b, c);
  const uint8_t *pb = s.predicate(i.b), *pc = s.predicate(i.c);
  set_pred(s, i.a, [&](uint32_t e) { return pb[e] | pc[e]; });
}
SEM(pnot) {
  Run b;
  if (one_run(s, i.b, b)) return set_pred_two_runs(s, i.a, b.lo < b.hi ? Run{0, b.lo} : Run{0, s.npe}, b.lo < b.hi ? Run{b.hi, s.npe} : Run{});
  const uint8_t* pb = s.predicate(i.b);
  set_pred(s, i.a, [&](uint32_t e) { return !pb[e]; });
}

}  // namespace gpnpu::isa
