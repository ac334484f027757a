#include "kernels/park.h"

#include "isa/error.h"

namespace gpnpu::kernels {
namespace {

constexpr uint32_t kChunk = 64;  // bytes a PE takes a round (one vector register)

uint32_t rounds(const sim::Config& cfg, uint32_t bytes) {
  const uint64_t per_round = uint64_t(kChunk) * cfg.npe();
  return uint32_t((bytes + per_round - 1) / per_round);
}

void check(const sim::Config& cfg, const LrmParkArgs& a, const char* what) {
  if (a.bytes == 0 || a.bytes % kChunk)
    fail("{}: {} bytes: the run must be a positive multiple of {} bytes", what, a.bytes, kChunk);
  if (uint64_t(a.ocm) + a.bytes > cfg.ocm_bytes)
    fail("{}: OCM [{}, {}) does not fit the {} bytes of OCM", what, a.ocm, uint64_t(a.ocm) + a.bytes, cfg.ocm_bytes);
  if (a.lrm % kChunk || uint64_t(a.lrm) + lrm_park_bytes(cfg, a.bytes) > cfg.lrm_bytes)
    fail("{}: LRM [{}, {}) must be 64-byte aligned and inside lrm_bytes = {}", what, a.lrm,
         uint64_t(a.lrm) + lrm_park_bytes(cfg, a.bytes), cfg.lrm_bytes);
}

// Per round j: its OCM address into x1 and, on the last round when it does not reach every
// PE, p7 = the PEs it reaches (else p0).
P round_setup(Builder& b, const sim::Config& cfg, const LrmParkArgs& a, uint32_t j) {
  const uint64_t start = uint64_t(j) * kChunk * cfg.npe();
  b.li(X{1}, int64_t(a.ocm + start));
  const uint64_t pes = (a.bytes - start) / kChunk;
  if (pes >= cfg.npe()) return P{0};
  b.li(X{3}, int64_t(pes));
  b.op("pset.range", {P{7}, X{0}, X{3}});
  return P{7};
}

}  // namespace

uint32_t lrm_park_bytes(const sim::Config& cfg, uint32_t bytes) { return rounds(cfg, bytes) * kChunk; }

void emit_lrm_park(Builder& b, const sim::Config& cfg, const LrmParkArgs& a) {
  check(cfg, a, "lrm park");
  const uint32_t n = rounds(cfg, a.bytes);
  b.li(X{2}, kChunk);
  // The store of round j - 1 follows round j's scatter (the port moves on while it lands).
  P last = P{0};
  for (uint32_t j = 0; j <= n; ++j) {
    if (j < n) {
      const P p = round_setup(b, cfg, a, j);
      b.op("oscatter", {V{uint8_t(16 + j % 4)}, Mem{X{1}, 0}, X{2}}, p);
      if (j + 1 == n) last = p;
    }
    if (j > 0) b.op("vst", {V{uint8_t(16 + (j - 1) % 4)}, Mem{X{0}, int64_t(a.lrm + (j - 1) * kChunk)}},
                    j == n ? last : P{0});
  }
}

void emit_lrm_unpark(Builder& b, const sim::Config& cfg, const LrmParkArgs& a) {
  check(cfg, a, "lrm unpark");
  const uint32_t n = rounds(cfg, a.bytes);
  b.li(X{2}, kChunk);
  // Round j + 1's load goes ahead of round j's gather.
  b.op("vld", {V{16}, Mem{X{0}, int64_t(a.lrm)}});
  for (uint32_t j = 0; j < n; ++j) {
    if (j + 1 < n) b.op("vld", {V{uint8_t(16 + (j + 1) % 4)}, Mem{X{0}, int64_t(a.lrm + (j + 1) * kChunk)}});
    const P p = round_setup(b, cfg, a, j);
    b.op("ogather", {V{uint8_t(16 + j % 4)}, Mem{X{1}, 0}, X{2}}, p);
  }
}

KernelCost cost_lrm_park(const sim::Config&, const LrmParkArgs& a) {
  KernelCost c;
  c.ocm_bytes = a.bytes;
  return c;
}

}  // namespace gpnpu::kernels
