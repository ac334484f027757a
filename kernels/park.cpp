#include "kernels/park.h"

#include <algorithm>

#include "isa/error.h"

namespace gpnpu::kernels {
namespace {

uint32_t rounds(const sim::Config& cfg, uint32_t bytes) {
  const uint64_t per_round = uint64_t(kLrmChunk) * cfg.npe();
  return uint32_t((bytes + per_round - 1) / per_round);
}

uint32_t stride_of(const LrmParkArgs& a) { return a.stride ? a.stride : a.bytes / a.rows; }

void check(const sim::Config& cfg, const LrmParkArgs& a) {
  const char* what = "lrm park";  // (a run: parked and unparked alike)
  if (a.rows == 0 || a.bytes == 0 || a.bytes % a.rows || (a.bytes / a.rows) % kLrmChunk)
    fail("{}: {} bytes in {} rows: the rows must be a positive multiple of {} bytes each", what, a.bytes, a.rows,
         kLrmChunk);
  const uint32_t row = a.bytes / a.rows;
  if (stride_of(a) < row) fail("{}: row stride {} is shorter than a row ({} bytes)", what, stride_of(a), row);
  const uint64_t end = uint64_t(a.ocm) + uint64_t(a.rows - 1) * stride_of(a) + row;
  if (end > cfg.ocm_bytes) fail("{}: OCM [{}, {}) does not fit the {} bytes of OCM", what, a.ocm, end, cfg.ocm_bytes);
  if (a.lrm % kLrmChunk || uint64_t(a.lrm) + lrm_park_bytes(cfg, a.bytes) > cfg.lrm_bytes)
    fail("{}: LRM [{}, {}) must be 64-byte aligned and inside lrm_bytes = {}", what, a.lrm,
         uint64_t(a.lrm) + lrm_park_bytes(cfg, a.bytes), cfg.lrm_bytes);
}

// p7 = PEs [pe0, pe1) where that is not every PE (else p0).
P pes(Builder& b, const sim::Config& cfg, uint32_t pe0, uint32_t pe1) {
  if (pe0 == 0 && pe1 >= cfg.npe()) return P{0};
  b.li(X{3}, pe0);
  b.li(X{4}, pe1);
  b.op("pset.range", {P{7}, X{3}, X{4}});
  return P{7};
}

}  // namespace

// Round j at LRM lrm + 64 j: one piece for a contiguous run, else one a row (or part of a row)
// the round reaches.
std::vector<LrmSlot> lrm_run_slots(const sim::Config& cfg, const LrmParkArgs& a) {
  check(cfg, a);
  const uint64_t npe = cfg.npe(), chunks = a.bytes / kLrmChunk, per_row = a.bytes / a.rows / kLrmChunk,
                 stride = stride_of(a);
  std::vector<LrmSlot> v;
  for (uint32_t j = 0; j < rounds(cfg, a.bytes); ++j) {
    LrmSlot s{.lrm = a.lrm + j * kLrmChunk, .pieces = {}};
    const uint64_t k0 = j * npe, k1 = std::min(k0 + npe, chunks);
    if (a.rows == 1 || stride == per_row * kLrmChunk) {
      s.pieces.push_back({0, uint32_t(k1 - k0), int64_t(a.ocm) + int64_t(k0 * kLrmChunk)});
    } else {
      for (uint64_t k = k0; k < k1;) {
        const uint64_t r = k / per_row, end = std::min(k1, (r + 1) * per_row);
        const int64_t at = int64_t(a.ocm) + int64_t(r * stride + (k - r * per_row) * kLrmChunk);
        s.pieces.push_back({uint32_t(k - k0), uint32_t(end - k0), at - int64_t((k - k0) * kLrmChunk)});
        k = end;
      }
    }
    v.push_back(std::move(s));
  }
  return v;
}

uint32_t lrm_park_bytes(const sim::Config& cfg, uint32_t bytes) { return rounds(cfg, bytes) * kLrmChunk; }

void emit_lrm_slots(Builder& b, const sim::Config& cfg, const std::vector<LrmSlot>& slots, bool to_lrm) {
  for (const LrmSlot& s : slots) {
    if (s.lrm % kLrmChunk || uint64_t(s.lrm) + kLrmChunk > cfg.lrm_bytes)
      fail("lrm park: slot at LRM {} must be 64-byte aligned and inside lrm_bytes = {}", s.lrm, cfg.lrm_bytes);
    for (const LrmPiece& q : s.pieces)
      if (q.pe0 >= q.pe1 || q.pe1 > cfg.npe())
        fail("lrm park: PEs [{}, {}) of a slot at LRM {} must be a non-empty part of the {} PEs", q.pe0, q.pe1, s.lrm,
             cfg.npe());
  }
  const size_t n = slots.size();
  auto reg = [](size_t j) { return V{uint8_t(16 + j % 4)}; };
  int64_t stride = -1;  // in x2
  auto move = [&](size_t j, const char* op) {
    for (const LrmPiece& q : slots[j].pieces) {
      b.li(X{1}, q.base);
      if (q.pe_stride != stride) b.li(X{2}, stride = q.pe_stride);
      b.op(op, {reg(j), Mem{X{1}, 0}, X{2}}, pes(b, cfg, q.pe0, q.pe1));
    }
  };
  auto span = [&](size_t j) {  // the PEs a slot's pieces reach
    uint32_t lo = UINT32_MAX, hi = 0;
    for (const LrmPiece& q : slots[j].pieces) lo = std::min(lo, q.pe0), hi = std::max(hi, q.pe1);
    return std::pair{lo, hi};
  };
  if (to_lrm) {
    // A slot's register is stored after the next slot's scatters (the port moves on while it
    // lands), on the PEs its pieces reached.
    for (size_t j = 0; j <= n; ++j) {
      if (j < n) move(j, "oscatter");
      if (j == 0) continue;
      const auto [lo, hi] = span(j - 1);
      b.op("vst", {reg(j - 1), Mem{X{0}, int64_t(slots[j - 1].lrm)}}, pes(b, cfg, lo, hi));
    }
    return;
  }
  // Slot j + 1's load goes ahead of slot j's gathers.
  if (n) b.op("vld", {reg(0), Mem{X{0}, int64_t(slots[0].lrm)}});
  for (size_t j = 0; j < n; ++j) {
    if (j + 1 < n) b.op("vld", {reg(j + 1), Mem{X{0}, int64_t(slots[j + 1].lrm)}});
    move(j, "ogather");
  }
}

KernelCost cost_lrm_slots(const std::vector<LrmSlot>& slots) {
  KernelCost c;
  for (const LrmSlot& s : slots)
    for (const LrmPiece& q : s.pieces) c.ocm_bytes += uint64_t(q.pe1 - q.pe0) * kLrmChunk;
  return c;
}

}  // namespace gpnpu::kernels
