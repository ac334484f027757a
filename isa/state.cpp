// ArchState construction and the pc / hardware-loop advance rule.
#include "isa/state.h"

#include <algorithm>
#include <cstring>

#include "isa/error.h"
#include "isa/lanes_simd.h"

namespace gpnpu::isa {

ArchState::ArchState(ArrayShape shape_, uint32_t lrm_bytes_, uint32_t smem_bytes, std::span<uint8_t> ocm_)
    : smem(smem_bytes, 0),
      shape(shape_),
      npe(shape_.npe()),
      v(size_t(kVregs) * shape_.npe() * kLanes, 0),
      pred(size_t(kPredSlots) * shape_.npe(), 0),
      lrm_bytes(lrm_bytes_),
      lrm_stride(lrm_bytes_ + 64),
      lrm(size_t(shape_.npe()) * lrm_stride, 0),
      ocm(ocm_),
      win_hi(npe),
      lazy_sel(size_t(kVregs) * shape_.npe(), 0),
      pl_vals((size_t(kVregs) * kPlClasses + kPlSpare) * shape_.npe(), 0) {
  for (int r = 0; r < kVregs; ++r) own_map_[r] = slot(r);
  clear_predicates();
}

uint32_t* ArchState::take_buffer() {
  if (free_.empty()) {
    pool_.push_back(std::make_unique<uint32_t[]>(size_t(npe) * kLanes));
    return pool_.back().get();
  }
  uint32_t* p = free_.back();
  free_.pop_back();
  return p;
}

void ArchState::end_renames() {
  for (auto& sn : dq_snaps) release_codes(*sn);
  std::vector<std::pair<int, std::vector<uint32_t>>> moved;  // (registers may hold each other's slots)
  for (int r = 0; r < kVregs; ++r)
    if (own_map_[r] != slot(r)) moved.emplace_back(r, std::vector<uint32_t>(own_map_[r], own_map_[r] + size_t(npe) * kLanes));
  for (auto& [r, words] : moved) {
    own_map_[r] = slot(r);
    std::copy(words.begin(), words.end(), slot(r));
  }
  free_.clear();  // no register and no snapshot holds a pool buffer now
  for (auto& p : pool_) free_.push_back(p.get());
}

ArchState::ArchState(View, ArchState& of)
    : shape(of.shape),
      npe(of.npe),
      lrm_bytes(of.lrm_bytes),
      lrm_stride(of.lrm_stride),
      ocm(of.ocm),
      win_hi(of.npe),
      vmap_(of.own_map_),
      view_pred_(of.predicate(0)),
      view_lrm_(of.lrm_of(0)) {
  sync_view(of);
}

void ArchState::sync_view(const ArchState& of) {
  std::copy(std::begin(of.pred_count), std::end(of.pred_count), pred_count);
  std::copy(std::begin(of.pred_first), std::end(of.pred_first), pred_first);
  std::copy(std::begin(of.pred_last), std::end(of.pred_last), pred_last);
  functional = of.functional;
  f16_saturate = of.f16_saturate;
}

void ArchState::summarise_predicate(int p) {
  const uint8_t* pr = predicate(p);
  uint32_t n = 0;
  for (uint32_t e = 0; e < npe; ++e) n += pr[e];
  pred_count[p] = n;
  const void* first = n ? std::memchr(pr, 1, npe) : nullptr;
  const void* last = n ? memrchr(pr, 1, npe) : nullptr;
  pred_first[p] = first ? uint32_t(static_cast<const uint8_t*>(first) - pr) : npe;
  pred_last[p] = last ? uint32_t(static_cast<const uint8_t*>(last) - pr) : 0;
}

void ArchState::clear_predicates() {
  std::fill(pred.begin(), pred.begin() + npe, 1);  // p0: every PE
  std::fill(pred.begin() + npe, pred.end(), 0);
  for (int p = 0; p < kPredSlots; ++p) summarise_predicate(p);
}

void ArchState::materialise(int r) {
  uint32_t* v = vreg(r);
  if (lazy2 >> r & 1) {
    const uint8_t* sel = lazy_selector(r);
    for (uint32_t e = 0; e < npe; ++e) std::memcpy(v + size_t(e) * kLanes, sel[e] ? lazy_lanes2[r] : lazy_lanes[r], sizeof lazy_lanes[r]);
  } else {
    for (uint32_t e = 0; e < npe; ++e) std::copy(lazy_lanes[r], lazy_lanes[r] + kLanes, v + size_t(e) * kLanes);
  }
  clear_lazy(r);
}

void ArchState::DqSnapshot::dequant(const uint32_t* codes, uint32_t* v, uint32_t lo, uint32_t hi, uint8_t sel) const {
  for (uint32_t e = lo; e < hi; ++e) {
    const uint32_t m[kLanes] = {meta[2 * e], meta[2 * e + 1]};  // as vdq4.f32 reads vc: lanes 0 and 1
    lanes::dequant4_pes(v + size_t(e) * kLanes, codes + size_t(e) * kLanes, m, 0, 1, nullptr, sel, false);
  }
}

void ArchState::materialise_dq(int r) {
  dq_snap[r]->dequant(vreg(r), 0, npe, dq_sel[r]);
  drop_dq(r);
}

void write_pl(uint32_t* v, const uint32_t* w0, const uint32_t* w1, const uint8_t* cls, uint32_t lo, uint32_t hi) {
  uint32_t m[kLanes];
  for (int l = 0; l < kLanes; ++l) m[l] = cls[l] ? ~0u : 0u;
  for (uint32_t e = lo; e < hi; ++e) {
    const uint32_t x0 = w0[e], x1 = w1[e];
    uint32_t t[kLanes];
    for (int l = 0; l < kLanes; ++l) t[l] = (x1 & m[l]) | (x0 & ~m[l]);
    std::memcpy(v + size_t(e) * kLanes, t, sizeof t);
  }
}

void ArchState::materialise_pl(int r) {
  write_pl(vreg(r), pl_of(r, 0), pl_of(r, 1), pl_cls[r], 0, npe);
  lazy_pl &= ~(1u << r);
}

void ArchState::note_f16(const F16Range& r, uint32_t per_pe) {
  F16First& first = f16_first_to ? *f16_first_to : f16_first;
  if (r.first >= 0 && !first.set)
    first = {true, pc, uint32_t(r.first / per_pe), uint32_t(r.first % per_pe), r.first_value};
  F16Range m = r;
  m.first = -1;
  f16.merge(m);
}

uint64_t digest_bytes(const void* data, size_t n, uint64_t h) {
  // Four independent multiply-xorshift streams over 32-byte blocks, folded at the end.
  constexpr uint64_t kMul = 0x9fb21c651e98df25ull;
  auto mix = [](uint64_t x) { x ^= x >> 32; x *= kMul; return x ^ (x >> 29); };
  const uint8_t* p = static_cast<const uint8_t*>(data);
  uint64_t s[4] = {h ^ n, h + 1, h + 2, h + 3};
  size_t k = 0;
  for (; k + 32 <= n; k += 32)
    for (int j = 0; j < 4; ++j) {
      uint64_t w;
      std::memcpy(&w, p + k + 8 * j, 8);
      s[j] = (s[j] ^ w) * kMul;
      s[j] ^= s[j] >> 31;
    }
  uint64_t r = mix(s[0]) ^ mix(s[1] + 1) * 3 ^ mix(s[2] + 2) * 5 ^ mix(s[3] + 3) * 7;
  for (; k < n; ++k) r = mix(r ^ p[k]);
  return r;
}

uint64_t ArchState::digest() const {
  uint64_t h = digest_bytes(x, sizeof x, 1);
  h = digest_bytes(smem.data(), smem.size(), h);
  h = digest_bytes(v.data(), v.size() * sizeof(uint32_t), h);
  h = digest_bytes(pred.data(), size_t(kPregs) * npe, h);  // the architectural predicates
  std::vector<uint8_t> packed(size_t(npe) * lrm_bytes);  // the PEs' LRM without the padding
  for (uint32_t e = 0; e < npe; ++e) std::memcpy(&packed[size_t(e) * lrm_bytes], lrm_of(e), lrm_bytes);
  h = digest_bytes(packed.data(), packed.size(), h);
  return digest_bytes(ocm.data(), ocm.size(), h);
}

void ArchState::close_loop_iterations() {
  // A fall-through, a taken branch or a jump to the innermost body's end (a skipped
  // count-0 loop ending there too) closes a loop iteration there (several loops may end
  // together); any other taken branch or jump has set next_pc already.
  while (loop_depth > 0 && next_pc == loops[loop_depth - 1].end) {
    LoopFrame& f = loops[loop_depth - 1];
    if (--f.remaining > 0) {
      next_pc = f.start;
      return;
    }
    --loop_depth;
  }
}

}  // namespace gpnpu::isa
