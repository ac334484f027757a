#include "kernels/rope.h"

#include <cmath>
#include <functional>

#include "isa/error.h"
#include "kernels/norm.h"

namespace gpnpu::kernels {

void emit_rope(Builder& b, const sim::Config& cfg, const RopeArgs& a) {
  const uint32_t npe = cfg.npe(), H = a.heads, hd = a.head_dim;
  if (hd == 0 || hd % 32 || hd > 128) fail("rope: head_dim {} must be a multiple of 32, at most 128", hd);
  if (H == 0 || H > npe) fail("rope: {} heads do not fit the {} PEs (one PE per head of a row)", H, npe);
  if (a.rows == 0) fail("rope: rows must be positive");
  const uint32_t hd2 = hd * 2, C = hd / 16, half = C / 2;  // C 16-dim chunks, C/2 of 32 fp16 (64 B)
  if (a.x_row_stride < H * hd2 || a.out_row_stride < H * hd2)
    fail("rope: row strides {} / {} are smaller than a row of {} heads x {} fp16", a.x_row_stride, a.out_row_stride, H, hd);
  if (a.norm && !a.tab_f32) fail("rope: the head norm in front (RopeArgs::norm) takes fp32 tables");
  const bool two_norms = a.norm && a.norm2_from > 0;
  if (a.norm2_from && (!a.norm || a.norm2_from >= H))
    fail("rope: norm2_from {} must name a head below heads {}, with the head norm on (0: one norm for every head)",
         a.norm2_from, H);
  const uint32_t TR = npe / H;  // tiling rule: rows per tile
  const uint32_t tiles = (a.rows + TR - 1) / TR;
  const int64_t tchunk = a.tab_f32 ? 64 : 32;
  auto Xr = [](uint32_t c) { return V{uint8_t(c)}; };        // 16 dims, fp32 (c < C)
  auto Cr = [](uint32_t c) { return V{uint8_t(8 + c)}; };    // cos of 16 dims of the first half (c < C/2)
  auto Sr = [](uint32_t c) { return V{uint8_t(16 + c)}; };   // sin likewise
  auto Pk = [](uint32_t j) { return V{uint8_t(28 + j)}; };   // 32 dims, fp16 pairs (j < C/2)

  b.li(X{1}, tiles);
  b.li(X{2}, a.rows);
  b.li(X{4}, TR);
  b.li(X{5}, a.x_ocm);
  b.li(X{6}, a.cos_ocm);
  b.li(X{7}, a.sin_ocm);
  b.li(X{8}, a.out_ocm);
  b.li(X{11}, hd2);
  if (a.norm) b.li(X{15}, a.norm_w_ocm);
  // Dense rows (row stride = heads x head_dim x 2): the tile's x in one scatter a 32 dims
  // over its PEs (PE e at e x hd2), its output in one gather; fp32 tables: each row's first
  // half of cos/sin to its heads' PEs in one grouped broadcast a 16 dims for the tile (a row
  // of the table a group of H PEs, x13 = the table's row stride, x14 = H).
  const bool x_dense = a.x_row_stride == H * hd2, out_dense = a.out_row_stride == H * hd2, grouped = a.tab_f32;
  // Strided rows go in pairs where a tile may have two (below); a row at a time for one.
  const bool pairs = std::min(a.rows, TR) >= 2;
  if (grouped) {
    b.li(X{13}, a.tab_row_stride);
    b.li(X{14}, H);
  }
  // Two norms: v13 = all ones on the PEs of the heads below norm2_from (PE e holds head e mod
  // H: e - H round((e - (H - 1) / 2) / H) in fp32, exact for any array), once for every tile.
  if (two_norms) {
    b.op("vpeid", {V{14}});
    b.op("vcvt.f32.i32", {V{14}, V{14}});
    b.op("vsplat.f32", {V{15}, F32{-float(H - 1) / 2}});
    b.op("vadd.f32", {V{13}, V{14}, V{15}});
    b.op("vsplat.f32", {V{15}, F32{1.0f / float(H)}});
    b.op("vmul.f32", {V{13}, V{13}, V{15}});
    b.op("vcvt.i32.f32", {V{13}, V{13}});
    b.op("vcvt.f32.i32", {V{13}, V{13}});
    b.op("vsplat.f32", {V{15}, F32{float(H)}});
    b.op("vmul.f32", {V{13}, V{13}, V{15}});
    b.op("vsub.f32", {V{13}, V{14}, V{13}});
    b.op("vsplat.f32", {V{15}, F32{float(a.norm2_from)}});
    b.op("vcmplt.f32", {V{13}, V{13}, V{15}});
    b.li(X{20}, a.norm2_w_ocm);
  }
  // (norm: the tables come after it, into the weights' registers)
  auto grouped_tables = [&] {
    for (uint32_t c = 0; c < half; ++c) {
      b.op("obcast.g", {Cr(c), Mem{X{6}, tchunk * c}, X{13}, X{14}}, P{2});
      b.op("obcast.g", {Sr(c), Mem{X{7}, tchunk * c}, X{13}, X{14}}, P{2});
    }
  };
  // A tile's strided rows (x3 of them) in pairs, a row's PEs [x9, x10): per pair `op` (a scatter
  // into Pk or a gather from it) of row 2i's chunks on p1, then row 2i + 1's on p3 (its predicate
  // set while the first row's take the port), into odd(j) where given (the odd rows' PEs then
  // collected in p4); `base` from `from` on, a row `rs` bytes on, moving a pair at a time; the
  // tile's last row alone where their count is odd.
  auto row_pairs = [&](const char* op, X base, X from, int64_t rs, const std::function<V(uint32_t)>& odd) {
    b.li(X{9}, 0);
    b.li(X{10}, H);
    b.op("addi", {base, from, 0});
    if (odd) b.op("pset.range", {P{4}, X{0}, X{0}});
    b.op("srli", {X{21}, X{3}, 1});
    b.op("andi", {X{22}, X{3}, 1});
    b.loop(X{21}, [&] {
      b.op("pset.range", {P{1}, X{9}, X{10}});
      b.op(op, {Pk(0), Mem{base, 0}, X{11}}, P{1});
      b.op("addi", {X{9}, X{9}, H});
      b.op("addi", {X{10}, X{10}, H});
      b.op("pset.range", {P{3}, X{9}, X{10}});
      for (uint32_t j = 1; j < half; ++j) b.op(op, {Pk(j), Mem{base, 64 * j}, X{11}}, P{1});
      if (odd) b.op("por", {P{4}, P{4}, P{3}});
      b.op("addi", {X{9}, X{9}, H});
      b.op("addi", {X{10}, X{10}, H});
      for (uint32_t j = 0; j < half; ++j) b.op(op, {odd ? odd(j) : Pk(j), Mem{base, rs + 64 * j}, X{11}}, P{3});
      b.op("addi", {base, base, 2 * rs});
    });
    b.loop(X{22}, [&] {
      b.op("pset.range", {P{1}, X{9}, X{10}});
      for (uint32_t j = 0; j < half; ++j) b.op(op, {Pk(j), Mem{base, 64 * j}, X{11}}, P{1});
    });
  };
  b.loop(X{1}, [&] {
    b.op("min", {X{3}, X{2}, X{4}});
    // p2: the tile's rows x heads
    b.li(X{12}, H);
    b.op("mul", {X{12}, X{12}, X{3}});
    b.op("pset.range", {P{2}, X{0}, X{12}});
    // ---- load the tile: x (32 dims a scatter, stride hd*2 across a row's heads) and the
    // first half of cos/sin; per row where the rows are not dense or the tables fp16 ----
    if (x_dense)
      for (uint32_t j = 0; j < half; ++j) b.op("oscatter", {Pk(j), Mem{X{5}, 64 * j}, X{11}}, P{2});
    if (grouped && !a.norm) grouped_tables();
    if (!x_dense && grouped && pairs) {
      // Strided rows, fp32 tables: the odd rows' scatters into Alt (v20..: a scatter into a
      // register waits for the last one into it, 8 cycles past its port time, which a row's two
      // scatters of 64 PEs on 64x64 do not cover), moved into Pk on their PEs (p4) after the loop.
      auto Alt = [](uint32_t j) { return V{uint8_t(20 + j)}; };
      row_pairs("oscatter", X{16}, X{5}, int64_t(a.x_row_stride) - int64_t(H) * hd2, Alt);
      for (uint32_t j = 0; j < half; ++j) b.op("vmov", {Pk(j), Alt(j)}, P{4});
    } else if (!x_dense || !grouped) {
      b.li(X{9}, 0);
      b.li(X{10}, H);
      b.op("addi", {X{16}, X{5}, 0});
      b.op("addi", {X{17}, X{6}, 0});
      b.op("addi", {X{18}, X{7}, 0});
      b.loop(X{3}, [&] {
        b.op("pset.range", {P{1}, X{9}, X{10}});
        if (!x_dense)
          for (uint32_t j = 0; j < half; ++j) b.op("oscatter", {Pk(j), Mem{X{16}, 64 * j}, X{11}}, P{1});
        // (the row's PEs all take the same table bytes: one predicated broadcast each)
        if (!grouped)
          for (uint32_t c = 0; c < half; ++c) {
            b.op("obcast.h", {Cr(c), Mem{X{17}, tchunk * c}}, P{1});
            b.op("obcast.h", {Sr(c), Mem{X{18}, tchunk * c}}, P{1});
          }
        b.op("addi", {X{9}, X{9}, H});
        b.op("addi", {X{10}, X{10}, H});
        if (!x_dense) b.op("addi", {X{16}, X{16}, int64_t(a.x_row_stride) - int64_t(H) * hd2});
        if (!grouped) {
          b.op("addi", {X{17}, X{17}, a.tab_row_stride});
          b.op("addi", {X{18}, X{18}, a.tab_row_stride});
        }
      });
    }
    if (a.norm) {
      // the head norm: the weight's chunks in the cos registers (the tables follow), the
      // results back in Pk; inv and the temporaries in the rotation's
      std::vector<V> xs, ws;
      for (uint32_t j = 0; j < half; ++j) {
        xs.push_back(Pk(j));
        ws.push_back(Cr(j));
        b.op("obcast", {Cr(j), Mem{X{15}, 64 * j}}, P{2});
        if (two_norms) {  // (the sin registers are free until the tables)
          b.op("obcast", {Sr(j), Mem{X{20}, 64 * j}}, P{2});
          b.op("vsel", {Cr(j), Cr(j), Sr(j), V{13}}, P{2});
        }
      }
      emit_head_norm_regs(b, xs, ws, {V{24}, V{25}, V{26}, V{27}, V{12}}, P{2}, a.eps);
      grouped_tables();
    }
    // ---- rotate (fp32) on the loaded PEs only (p2): the others hold other kernels'
    // registers, whose fp16 conversion would be counted (fp16 range) ----
    if (!a.tab_f32)
      for (uint32_t c = 0; c < half; ++c) {
        b.op("vcvt.f32.f16", {Cr(c), Cr(c)}, P{2});
        b.op("vcvt.f32.f16", {Sr(c), Sr(c)}, P{2});
      }
    for (uint32_t j = 0; j < half; ++j) {
      b.op("vunpack.f16", {Xr(2 * j), Pk(j), int64_t(0)}, P{2});
      b.op("vunpack.f16", {Xr(2 * j + 1), Pk(j), int64_t(1)}, P{2});
    }
    // x'[d] = x[d] cos[d] - x[d+h] sin[d], x'[d+h] = x[d+h] cos[d] + x[d] sin[d] (cos and
    // sin of d + h are those of d)
    for (uint32_t c = 0; c < half; ++c) {
      const uint32_t lo = c, hi = c + half;
      V t1{24}, t2{25}, t3{26}, t4{27};
      b.op("vmul.f32", {t1, Xr(lo), Cr(c)}, P{2});
      b.op("vmul.f32", {t2, Xr(hi), Sr(c)}, P{2});
      b.op("vmul.f32", {t3, Xr(hi), Cr(c)}, P{2});
      b.op("vmul.f32", {t4, Xr(lo), Sr(c)}, P{2});
      b.op("vsub.f32", {Xr(lo), t1, t2}, P{2});
      b.op("vadd.f32", {Xr(hi), t3, t4}, P{2});
    }
    for (uint32_t j = 0; j < half; ++j) b.op("vpack.f16", {Pk(j), Xr(2 * j), Xr(2 * j + 1)}, P{2});
    // ---- store the tile ----
    if (out_dense) {
      for (uint32_t j = 0; j < half; ++j) b.op("ogather", {Pk(j), Mem{X{8}, 64 * j}, X{11}}, P{2});
    } else if (pairs) {
      row_pairs("ogather", X{19}, X{8}, int64_t(a.out_row_stride) - int64_t(H) * hd2, {});
    } else {
      b.li(X{9}, 0);
      b.li(X{10}, H);
      b.op("addi", {X{19}, X{8}, 0});
      b.loop(X{3}, [&] {
        b.op("pset.range", {P{1}, X{9}, X{10}});
        for (uint32_t j = 0; j < half; ++j) b.op("ogather", {Pk(j), Mem{X{19}, 64 * j}, X{11}}, P{1});
        b.op("addi", {X{9}, X{9}, H});
        b.op("addi", {X{10}, X{10}, H});
        b.op("addi", {X{19}, X{19}, int64_t(a.out_row_stride) - int64_t(H) * hd2});
      });
    }
    b.op("addi", {X{5}, X{5}, int64_t(TR) * a.x_row_stride});
    b.op("addi", {X{6}, X{6}, int64_t(TR) * a.tab_row_stride});
    b.op("addi", {X{7}, X{7}, int64_t(TR) * a.tab_row_stride});
    b.op("addi", {X{8}, X{8}, int64_t(TR) * a.out_row_stride});
    b.op("sub", {X{2}, X{2}, X{4}});
  });
}

KernelCost cost_rope(const sim::Config&, const RopeArgs& a) {
  KernelCost c;
  const uint64_t tab = a.tab_f32 ? 4 : 2;
  // x in and out (fp16) plus the first half of the row's cos and sin once (broadcast to
  // its heads' PEs).
  c.ocm_bytes = uint64_t(a.rows) * a.head_dim * (a.heads * (2 + 2) + tab);
  return c;  // (norm: its weights are broadcast, 64 B a chunk a tile, left out as the norm's)
}

}  // namespace gpnpu::kernels
