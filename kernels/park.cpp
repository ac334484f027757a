#include "kernels/park.h"

#include <vector>

#include "isa/error.h"

namespace gpnpu::kernels {
namespace {

constexpr uint32_t kChunk = 64;  // bytes a PE takes a round (one vector register)

uint32_t rounds(const sim::Config& cfg, uint32_t bytes) {
  const uint64_t per_round = uint64_t(kChunk) * cfg.npe();
  return uint32_t((bytes + per_round - 1) / per_round);
}

uint32_t stride_of(const LrmParkArgs& a) { return a.stride ? a.stride : a.bytes / a.rows; }

void check(const sim::Config& cfg, const LrmParkArgs& a, const char* what) {
  if (a.rows == 0 || a.bytes == 0 || a.bytes % a.rows || (a.bytes / a.rows) % kChunk)
    fail("{}: {} bytes in {} rows: the rows must be a positive multiple of {} bytes each", what, a.bytes, a.rows,
         kChunk);
  const uint32_t row = a.bytes / a.rows;
  if (stride_of(a) < row)
    fail("{}: row stride {} is shorter than a row ({} bytes)", what, stride_of(a), row);
  const uint64_t end = uint64_t(a.ocm) + uint64_t(a.rows - 1) * stride_of(a) + row;
  if (end > cfg.ocm_bytes) fail("{}: OCM [{}, {}) does not fit the {} bytes of OCM", what, a.ocm, end, cfg.ocm_bytes);
  if (a.lrm % kChunk || uint64_t(a.lrm) + lrm_park_bytes(cfg, a.bytes) > cfg.lrm_bytes)
    fail("{}: LRM [{}, {}) must be 64-byte aligned and inside lrm_bytes = {}", what, a.lrm,
         uint64_t(a.lrm) + lrm_park_bytes(cfg, a.bytes), cfg.lrm_bytes);
}

// The pieces of round j: PEs [pe0, pe1) take 64 bytes each from OCM base + 64 i (PE i; the
// base may lie below the run: OCM addresses wrap). One piece a round for a contiguous run,
// else one a row (or part of a row) the round reaches.
struct Piece {
  uint32_t pe0, pe1;
  int64_t base;
};
std::vector<Piece> pieces(const sim::Config& cfg, const LrmParkArgs& a, uint32_t j) {
  const uint64_t npe = cfg.npe(), k0 = uint64_t(j) * npe, chunks = a.bytes / kChunk,
                 k1 = std::min<uint64_t>(k0 + npe, chunks), per_row = a.bytes / a.rows / kChunk;
  const uint64_t stride = stride_of(a);
  std::vector<Piece> v;
  if (a.rows == 1 || stride == per_row * kChunk) {
    v.push_back({0, uint32_t(k1 - k0), int64_t(a.ocm) + int64_t(k0 * kChunk)});
    return v;
  }
  for (uint64_t k = k0; k < k1;) {
    const uint64_t r = k / per_row, end = std::min(k1, (r + 1) * per_row);
    const int64_t at = int64_t(a.ocm) + int64_t(r * stride + (k - r * per_row) * kChunk);
    v.push_back({uint32_t(k - k0), uint32_t(end - k0), at - int64_t((k - k0) * kChunk)});
    k = end;
  }
  return v;
}

// Runs `move(piece, predicate)` for every piece of round j, with x1 = its base, p7 = its PEs
// where they are not every PE (else p0).
template <class F>
void each_piece(Builder& b, const sim::Config& cfg, const LrmParkArgs& a, uint32_t j, F move) {
  for (const Piece& q : pieces(cfg, a, j)) {
    b.li(X{1}, q.base);
    P p{0};
    if (q.pe0 > 0 || q.pe1 < cfg.npe()) {
      b.li(X{3}, q.pe0);
      b.li(X{4}, q.pe1);
      b.op("pset.range", {P{7}, X{3}, X{4}});
      p = P{7};
    }
    move(p);
  }
}

}  // namespace

uint32_t lrm_park_bytes(const sim::Config& cfg, uint32_t bytes) { return rounds(cfg, bytes) * kChunk; }

void emit_lrm_park(Builder& b, const sim::Config& cfg, const LrmParkArgs& a) {
  check(cfg, a, "lrm park");
  const uint32_t n = rounds(cfg, a.bytes);
  b.li(X{2}, kChunk);
  // A round's register is stored after the next round's scatters (the port moves on while it
  // lands); the last round's store only on the PEs it reached.
  for (uint32_t j = 0; j <= n; ++j) {
    if (j < n)
      each_piece(b, cfg, a, j, [&](P p) { b.op("oscatter", {V{uint8_t(16 + j % 4)}, Mem{X{1}, 0}, X{2}}, p); });
    if (j == 0) continue;
    const uint32_t r = j - 1, reached = std::min<uint64_t>(cfg.npe(), a.bytes / kChunk - uint64_t(r) * cfg.npe());
    P p{0};
    if (reached < cfg.npe()) {
      b.li(X{4}, reached);
      b.op("pset.range", {P{7}, X{0}, X{4}});
      p = P{7};
    }
    b.op("vst", {V{uint8_t(16 + r % 4)}, Mem{X{0}, int64_t(a.lrm + r * kChunk)}}, p);
  }
}

void emit_lrm_unpark(Builder& b, const sim::Config& cfg, const LrmParkArgs& a) {
  check(cfg, a, "lrm unpark");
  const uint32_t n = rounds(cfg, a.bytes);
  b.li(X{2}, kChunk);
  // Round j + 1's load goes ahead of round j's gathers.
  b.op("vld", {V{16}, Mem{X{0}, int64_t(a.lrm)}});
  for (uint32_t j = 0; j < n; ++j) {
    if (j + 1 < n) b.op("vld", {V{uint8_t(16 + (j + 1) % 4)}, Mem{X{0}, int64_t(a.lrm + (j + 1) * kChunk)}});
    each_piece(b, cfg, a, j, [&](P p) { b.op("ogather", {V{uint8_t(16 + j % 4)}, Mem{X{1}, 0}, X{2}}, p); });
  }
}

KernelCost cost_lrm_park(const sim::Config&, const LrmParkArgs& a) {
  KernelCost c;
  c.ocm_bytes = a.bytes;
  return c;
}

}  // namespace gpnpu::kernels
