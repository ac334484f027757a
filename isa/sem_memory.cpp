// Semantics of the memory instructions: PE local memory (LRM), OCM <-> array
// broadcast/scatter/gather, and DMA descriptors. Addresses are checked in every
// mode; data moves only in functional runs (not with --timing-only).
#include <algorithm>
#include <cstring>

#include "isa/error.h"
#include "isa/semantics.h"

namespace gpnpu::isa {

void check_range(const char* memory, uint64_t addr, uint64_t bytes, uint64_t limit) {
  if (addr + bytes > limit)
    fail("{} access out of range: bytes [0x{:x}, 0x{:x}) but the {} has 0x{:x} bytes", memory, addr,
         addr + bytes, memory, limit);
}

namespace {

constexpr uint32_t kVecBytes = kLanes * 4;   // a full register: 64 bytes
constexpr uint32_t kHalfBytes = kLanes * 2;  // 16 fp16: 32 bytes

uint32_t address(const ArchState& s, const Insn& i) { return X(s, i.b) + uint32_t(i.imm); }

// Copy 16 fp16 into the low halves of 16 lanes (high halves zero) and back.
inline void halves_to_lanes(const uint8_t* src, uint32_t* lanes) {
  uint16_t h[kLanes];
  std::memcpy(h, src, kHalfBytes);
  for (int l = 0; l < kLanes; ++l) lanes[l] = h[l];
}
inline void lanes_to_halves(const uint32_t* lanes, uint8_t* dst) {
  uint16_t h[kLanes];
  for (int l = 0; l < kLanes; ++l) h[l] = uint16_t(lanes[l]);
  std::memcpy(dst, h, kHalfBytes);
}

template <bool kHalf>
void lrm_load(ArchState& s, const Insn& i) {
  uint32_t addr = address(s, i);
  check_range("LRM", addr, kHalf ? kHalfBytes : kVecBytes, s.lrm_bytes);
  if (!s.functional) return;
  uint32_t* a = s.vreg(i.a);
  const uint8_t* lrm = s.lrm_of(0) + addr;
  const size_t stride = s.lrm_stride;
  for_pes(s, i, [&](uint32_t e) {
    const uint8_t* src = lrm + e * stride;
    __builtin_prefetch(src + 8 * stride);  // each PE's bytes are in another page: ask ahead
    __builtin_prefetch(src + 8 * stride + 63);
    if constexpr (kHalf) halves_to_lanes(src, a + size_t(e) * kLanes);
    else std::memcpy(a + size_t(e) * kLanes, src, kVecBytes);
  });
}
template <bool kHalf>
void lrm_store(ArchState& s, const Insn& i) {
  uint32_t addr = address(s, i);
  check_range("LRM", addr, kHalf ? kHalfBytes : kVecBytes, s.lrm_bytes);
  if (!s.functional) return;
  const uint32_t* a = s.vreg(i.a);
  for_pes(s, i, [&](uint32_t e) {
    uint8_t* dst = s.lrm_of(e) + addr;
    if constexpr (kHalf) lanes_to_halves(a + size_t(e) * kLanes, dst);
    else std::memcpy(dst, a + size_t(e) * kLanes, kVecBytes);
  });
}

template <bool kHalf>
void ocm_broadcast(ArchState& s, const Insn& i) {
  uint32_t addr = address(s, i);
  check_range("OCM", addr, kHalf ? kHalfBytes : kVecBytes, s.ocm.size());
  if (!s.functional) return;
  uint32_t row[kLanes];
  if constexpr (kHalf) halves_to_lanes(&s.ocm[addr], row);
  else std::memcpy(row, &s.ocm[addr], kVecBytes);
  if (s.lazy_broadcast && i.p == 0) {  // every PE gets the row: keep it lazy (isa/execute.h)
    std::memcpy(s.lazy_lanes[i.a], row, kVecBytes);
    s.set_lazy(i.a);
    return;
  }
  uint32_t* a = s.vreg(i.a);
  for_pes(s, i, [&](uint32_t e) { std::memcpy(a + size_t(e) * kLanes, row, kVecBytes); });
}

// Checks the address range that the enabled PEs touch: from the first one's pe_address, on
// without wrapping to the last one's.
void check_strided(const ArchState& s, const Insn& i, uint32_t base, uint32_t stride, uint32_t bytes) {
  const uint32_t first = s.pred_first[i.p], last = s.pred_last[i.p];  // the summary: no scan of the lanes
  if (s.pred_count[i.p] == 0) return;
  const uint32_t lo = pe_address(base, first, stride);
  check_range("OCM", lo, bytes, s.ocm.size());
  check_range("OCM", uint64_t(lo) + uint64_t(last - first) * stride, bytes, s.ocm.size());
}

// Grouped broadcast: PE e takes the 64 bytes at base + (e / group) * stride, one row per group
// of `group` consecutive PEs (the OCM port reads each row once: sim/machine/timing.h).
void ocm_group_broadcast(ArchState& s, const Insn& i) {
  const uint32_t base = address(s, i), stride = X(s, i.c), group = X(s, i.d);
  if (group == 0) fail("obcast.g: the group size x{} is 0; it must be the PEs of a group (>= 1)", i.d);
  if (s.pred_count[i.p] == 0) return;
  const uint32_t g0 = s.pred_first[i.p] / group, g1 = s.pred_last[i.p] / group;
  const uint32_t lo = pe_address(base, g0, stride);
  check_range("OCM", lo, kVecBytes, s.ocm.size());
  check_range("OCM", uint64_t(lo) + uint64_t(g1 - g0) * stride, kVecBytes, s.ocm.size());
  if (!s.functional) return;
  uint32_t* a = s.vreg(i.a);
  for_pes(s, i, [&](uint32_t e) {
    std::memcpy(a + size_t(e) * kLanes, &s.ocm[pe_address(base, e / group, stride)], kVecBytes);
  });
}

template <bool kHalf>
void ocm_scatter(ArchState& s, const Insn& i) {
  uint32_t base = address(s, i), stride = X(s, i.c);
  constexpr uint32_t bytes = kHalf ? kHalfBytes : kVecBytes;
  check_strided(s, i, base, stride, bytes);
  if (!s.functional) return;
  uint32_t* a = s.vreg(i.a);
  for_pes(s, i, [&](uint32_t e) {
    const uint8_t* src = &s.ocm[pe_address(base, e, stride)];
    if constexpr (kHalf) halves_to_lanes(src, a + size_t(e) * kLanes);
    else std::memcpy(a + size_t(e) * kLanes, src, bytes);
  });
}
template <bool kHalf>
void ocm_gather(ArchState& s, const Insn& i) {
  uint32_t base = address(s, i), stride = X(s, i.c);
  constexpr uint32_t bytes = kHalf ? kHalfBytes : kVecBytes;
  check_strided(s, i, base, stride, bytes);
  if (!s.functional) return;
  const uint32_t* a = s.vreg(i.a);
  for_pes(s, i, [&](uint32_t e) {
    uint8_t* dst = &s.ocm[pe_address(base, e, stride)];
    if constexpr (kHalf) lanes_to_halves(a + size_t(e) * kLanes, dst);
    else std::memcpy(dst, a + size_t(e) * kLanes, bytes);
  });
}

// One element per PE: scatter splats a 32-bit word into every lane, gather
// stores lane 0 (32 bits, or its low fp16).
void ocm_scatter_word(ArchState& s, const Insn& i) {
  uint32_t base = address(s, i), stride = X(s, i.c);
  check_strided(s, i, base, stride, 4);
  if (!s.functional) return;
  if (oscatter_w1_lazy(s, i)) {  // one word per PE (isa/batch.h)
    const bool all = i.p == 0 || s.pred_count[i.p] == s.npe;
    const uint8_t* pr = s.predicate(i.p);
    uint32_t* w = s.pl_of(i.a, 0);
    const uint8_t* ocm = s.ocm.data();
    if (all)
      for (uint32_t e = 0; e < s.npe; ++e) std::memcpy(&w[e], ocm + pe_address(base, e, stride), 4);
    else
      for (uint32_t e = 0; e < s.npe; ++e)
        if (pr[e]) std::memcpy(&w[e], ocm + pe_address(base, e, stride), 4);
    std::fill(std::begin(s.pl_cls[i.a]), std::end(s.pl_cls[i.a]), uint8_t(0));
    s.set_pl(i.a);
    return;
  }
  uint32_t* a = s.vreg(i.a);
  for_pes(s, i, [&](uint32_t e) {
    uint32_t w;
    std::memcpy(&w, &s.ocm[pe_address(base, e, stride)], 4);
    std::fill(a + size_t(e) * kLanes, a + size_t(e + 1) * kLanes, w);
  });
}
template <uint32_t kBytes>
void ocm_gather_element(ArchState& s, const Insn& i) {
  uint32_t base = address(s, i), stride = X(s, i.c);
  check_strided(s, i, base, stride, kBytes);
  if (!s.functional) return;
  const uint32_t* a = s.vreg(i.a);
  for_pes(s, i, [&](uint32_t e) { std::memcpy(&s.ocm[pe_address(base, e, stride)], a + size_t(e) * kLanes, kBytes); });
}

}  // namespace

SEM(oscatter_w1) { ocm_scatter_word(s, i); }
SEM(ogather_w1) { ocm_gather_element<4>(s, i); }
SEM(ogather_h1) { ocm_gather_element<2>(s, i); }
SEM(vld) { lrm_load<false>(s, i); }
SEM(vst) { lrm_store<false>(s, i); }
SEM(vld_h) { lrm_load<true>(s, i); }
SEM(vst_h) { lrm_store<true>(s, i); }
SEM(obcast) { ocm_broadcast<false>(s, i); }
SEM(obcast_h) { ocm_broadcast<true>(s, i); }
SEM(obcast_g) { ocm_group_broadcast(s, i); }
SEM(oscatter) { ocm_scatter<false>(s, i); }
SEM(oscatter_h) { ocm_scatter<true>(s, i); }
SEM(ogather) { ocm_gather<false>(s, i); }
SEM(ogather_h) { ocm_gather<true>(s, i); }

SEM(dma_start) {
  uint32_t addr = X(s, i.b);
  check_range("scalar memory (DMA descriptor)", addr, kDmaDescWords * 4, s.smem.size());
  uint32_t w[kDmaDescWords];
  std::memcpy(w, &s.smem[addr], sizeof w);
  DmaDescriptor d{w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7], w[8]};
  if (d.row_bytes == 0 || d.rows == 0 || d.planes == 0)
    fail("dma.start c{}: descriptor at scalar address 0x{:x} has an empty shape (row_bytes {}, rows {}, planes {}); every dimension must be at least 1",
         i.a, addr, d.row_bytes, d.rows, d.planes);
  s.dma = d;
  s.effect = Effect::dma_start;
  s.effect_arg = i.a;
}
SEM(dma_wait) {
  s.effect = Effect::dma_wait;
  s.effect_arg = i.a;
}
SEM(dma_waitall) { s.effect = Effect::dma_waitall; }

}  // namespace gpnpu::isa
