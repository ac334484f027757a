// Vectorised inner loops of the hottest array instructions (vmac.f16, vdq4.*): the same
// results bit for bit as the scalar definitions in sem_array.cpp, only faster. Each
// function picks, once per process, an AVX-512 body when the CPU has AVX-512F, else an
// AVX2 body when it has AVX2 and F16C (F16C conversions round to nearest even exactly
// like isa/fp16.h), and the scalar body otherwise; tests/isa/test_lanes_simd.cpp checks
// the body this CPU runs against the scalar one.
#pragma once
#include <cstddef>
#include <cstdint>

#include "isa/fp16.h"

namespace gpnpu::isa::lanes {

// a[k] += f16(b[k]) * f16(c[k]) in fp32 for k < n (b, c: fp16 in the low 16 bits;
// the product is exact in fp32, so fused and unfused evaluation agree).
void mac_f16(uint32_t* a, const uint32_t* b, const uint32_t* c, size_t n);

// mac_f16 with c the same 16 lanes in every PE: c16[k % 16] (n a multiple of 16).
void mac_f16_bcast(uint32_t* a, const uint32_t* b, const uint32_t* c16, size_t n);

// mac_f16 and mac_f16_bcast with vb already converted by mac_f16_operand (isa/batch.h
// converts a register once for the vmac.f16s of a block that read it). Bit-identical to
// mac_f16 / mac_f16_bcast: the operand is converted as their bodies convert it (the
// hardware conversion quiets a signalling NaN, and a product's NaN depends on that).
void mac_f16_operand(uint32_t* fb, const uint32_t* b, size_t n);
void mac_f16_cvt(uint32_t* a, const uint32_t* fb, const uint32_t* c, size_t n);
void mac_f16_cvt_bcast(uint32_t* a, const uint32_t* fb, const uint32_t* c16, size_t n);
// mac_f16_cvt_bcast over npes PEs whose c is c16_on where sel[pe] is set, else c16 (a
// two-pattern lazy register, isa/state.h).
void mac_f16_cvt_bcast2(uint32_t* a, const uint32_t* fb, const uint32_t* c16, const uint32_t* c16_on, const uint8_t* sel,
                        size_t npes);

// A chain of vmac.f16s by broadcasts into one accumulator (isa/batch.cpp defers a block's
// vmac.f16s until something else touches the accumulator): for each item t in order, over
// the PEs [e0, e1), a[e * 16 + l] += fb_t[e * 16 + l] * cf_t[l], cf_t the item's broadcast lanes
// converted by mac_f16_operand (cf_on where sel[e] is set: a two-pattern register). The
// same bits as mac_f16_cvt_bcast / mac_f16_cvt_bcast2 item by item (two roundings each),
// with the accumulator kept in host registers across the items.
struct MacItem {
  const uint32_t* fb;     // vb converted (mac_f16_operand), indexed e * 16 + l
  const uint32_t* cf;     // 16 fp32 lanes
  const uint32_t* cf_on;  // with sel: the lanes of the PEs whose sel is set
  const uint8_t* sel;     // null: one pattern
};
void mac_f16_cvt_chain(uint32_t* a, const MacItem* items, size_t n, size_t e0, size_t e1);
void mac_f16_cvt_chain_scalar(uint32_t* a, const MacItem* items, size_t n, size_t e0, size_t e1);
// The AVX2 (body 1) or AVX-512 (body 2) body, for the tests: false where the CPU lacks it.
bool mac_f16_cvt_chain_body(int body, uint32_t* a, const MacItem* items, size_t n, size_t e0, size_t e1);
// mac_f16_cvt_chain on kChainRows accumulators a[r] at once, with items it[r][0..n) that
// read the same vb conversions under the same selector (it[r][t].fb and it[r][t].sel the
// same for every r; cf, cf_on each row's own): the bits of mac_f16_cvt_chain on each
// accumulator in turn, each conversion loaded once for every accumulator (a GEMM's rows
// share its weights' vb).
constexpr int kChainRows = 4;
void mac_f16_cvt_chain_rows(uint32_t* const* a, const MacItem* const* it, size_t n, size_t e0, size_t e1);

// a[k] += b[k] * c[k] in fp32, the product rounded first (vmla.f32: not fused).
void mla_f32(uint32_t* a, const uint32_t* b, const uint32_t* c, size_t n);
// mla_f32 with c the same 16 lanes in every PE: c16[k % 16] (n a multiple of 16).
void mla_f32_bcast(uint32_t* a, const uint32_t* b, const uint32_t* c16, size_t n);

// vdq4.f32 then vmla.f32 by a broadcast, without the dequantised register: over npes PEs,
// a[e * 16 + l] += dq(e, l) * c16[l], dq(e, l) = (code(sel * 16 + l) - zero) * scale as
// vdq4.f32 computes it from the PE's 16 code words at codes + e * 16 and its scale and
// zero at meta2[2e], meta2[2e + 1] (isa/batch.h: lazy dequantisations).
void dq4_mla_f32_bcast(uint32_t* a, const uint32_t* codes, const uint32_t* meta2, uint32_t sel, const uint32_t* c16,
                       size_t npes);

// a[k] = f16_to_f32(b[k] & 0xffff) (vcvt.f32.f16).
void cvt_f32_f16(uint32_t* a, const uint32_t* b, size_t n);

// vpack.f16 over PEs [e0, e1) enabled by pred (nullptr: all): PE e's 16 lanes of out =
// f32_to_f16 of lo/hi pairs: lane l < 8 packs lo[2l], lo[2l+1], lane l >= 8 packs
// hi[2(l-8)], hi[2(l-8)+1] (low half first). Every value is recorded in r (isa/fp16.h)
// with index e * 32 + element; saturate clamps overflow to +-65,504.
void pack_f16_pes(uint32_t* out, const uint32_t* lo, const uint32_t* hi, uint32_t e0, uint32_t e1, const uint8_t* pred,
                  bool saturate, F16Range& r);

// vcvt.f16.f32 of lanes [k, k + n): a[j] = f32_to_f16(b[j]) in the low half, high half 0;
// recorded in r with index j.
void cvt_f16_f32(uint32_t* a, const uint32_t* b, size_t k, size_t n, bool saturate, F16Range& r);


// vdq4 over PEs [e0, e1) enabled by pred (nullptr: all): PE e's 16 lanes of out from
// its codes (16 words at e * 16: 128 nibbles, 8 per word, low nibble first) and meta
// (lane 0 scale, lane 1 zero point, fp32): out[l] = (code(sel * 16 + l) - zero) * scale,
// as fp16 bits when f16.
void dequant4_pes(uint32_t* out, const uint32_t* codes, const uint32_t* meta, uint32_t e0, uint32_t e1,
                  const uint8_t* pred, uint32_t sel, bool f16);

// Scalar bodies (the definitions), also used when the CPU lacks AVX-512.
void mac_f16_bcast_scalar(uint32_t* a, const uint32_t* b, const uint32_t* c16, size_t n);
void mla_f32_scalar(uint32_t* a, const uint32_t* b, const uint32_t* c, size_t n);
void mla_f32_bcast_scalar(uint32_t* a, const uint32_t* b, const uint32_t* c16, size_t n);
void cvt_f32_f16_scalar(uint32_t* a, const uint32_t* b, size_t n);
void dq4_mla_f32_bcast_scalar(uint32_t* a, const uint32_t* codes, const uint32_t* meta2, uint32_t sel, const uint32_t* c16,
                              size_t npes);
void pack_f16_scalar(uint32_t* out, const uint32_t* lo, const uint32_t* hi, bool saturate, F16Range& r, int64_t idx0);
void cvt_f16_f32_scalar(uint32_t* a, const uint32_t* b, size_t k, size_t n, bool saturate, F16Range& r);
void mac_f16_scalar(uint32_t* a, const uint32_t* b, const uint32_t* c, size_t n);
void mac_f16_cvt_scalar(uint32_t* a, const uint32_t* fb, const uint32_t* c, size_t n);
void mac_f16_cvt_bcast_scalar(uint32_t* a, const uint32_t* fb, const uint32_t* c16, size_t n);
void mac_f16_cvt_bcast2_scalar(uint32_t* a, const uint32_t* fb, const uint32_t* c16, const uint32_t* c16_on,
                               const uint8_t* sel, size_t npes);
void dequant4_scalar(uint32_t* out, const uint32_t* codes, float scale, float zero, uint32_t sel, bool f16);
bool have_avx512();
bool have_avx2();  // and F16C

}  // namespace gpnpu::isa::lanes
