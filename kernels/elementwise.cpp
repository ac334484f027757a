#include "kernels/elementwise.h"

#include <algorithm>
#include <functional>
#include <optional>

#include "isa/error.h"

namespace gpnpu::kernels {

namespace {

constexpr uint32_t kChunk = 32;  // fp16 per chunk (64 B)
uint32_t ceil_div(uint32_t a, uint32_t b) { return (a + b - 1) / b; }

const char* op_name(EwOp op) {
  switch (op) {
    case EwOp::add: return "add";
    case EwOp::bias_add: return "bias_add";
    case EwOp::silu_mul: return "silu_mul";
    case EwOp::gelu_tanh: return "gelu_tanh";
    case EwOp::gelu_erf: return "gelu_erf";
  }
  return "?";
}
bool has_b(EwOp op) { return op == EwOp::add || op == EwOp::bias_add || op == EwOp::silu_mul; }
}  // namespace

const std::vector<ActStep>& act_steps(EwOp op) {
  using R = ActReg;
  // silu(g) * u = (g * (1 / (1 + exp(-g)))) * u (-g: a sign flip, exact)
  static const std::vector<ActStep> silu = {{"vxor", R::t, R::z, R::sign},  {"vexp.f32", R::t, R::t},
                                            {"vadd.f32", R::t, R::t, R::one}, {"vrcp.f32", R::t, R::t},
                                            {"vmul.f32", R::t, R::z, R::t},   {"vmul.f32", R::z, R::t, R::u}};
  // 0.5f*z*(1 + tanh(k*(z + 0.044715f*z*z*z))), C++ left-to-right order:
  // t = ((c*z)*z)*z; u = t + z (one vmla: z + round((c*z*z)*z)); u *= k; tanh; + 1
  static const std::vector<ActStep> tanh = {
      {"vmul.f32", R::t, R::z, R::c},   {"vmul.f32", R::t, R::t, R::z},    {"vmov", R::u, R::z},
      {"vmla.f32", R::u, R::t, R::z},   {"vmul.f32", R::u, R::u, R::k},    {"vtanh.f32", R::u, R::u},
      {"vadd.f32", R::u, R::u, R::one}, {"vmul.f32", R::t, R::z, R::half}, {"vmul.f32", R::z, R::t, R::u}};
  // 0.5f*z*(1 + erf(z*0.70710678f))
  static const std::vector<ActStep> erf = {{"vmul.f32", R::u, R::z, R::c},    {"verf.f32", R::u, R::u},
                                           {"vadd.f32", R::u, R::u, R::one},  {"vmul.f32", R::t, R::z, R::half},
                                           {"vmul.f32", R::z, R::t, R::u}};
  switch (op) {
    case EwOp::silu_mul: return silu;
    case EwOp::gelu_tanh: return tanh;
    case EwOp::gelu_erf: return erf;
    default: fail("act_steps: {} is not an activation", op_name(op));
  }
}

namespace {

// Vector registers, slot s in {0, 1}: raw a RA = v(8s), raw b RB = v(8s+1), a lo/hi
// AL/AH = v(8s+2, 8s+3), b lo/hi BL/BH = v(8s+4, 8s+5), temps TL/TH = v(8s+6, 8s+7).
// v16 old output bytes of the tail chunk; constants v20 1.0, v21 0.5, v22 0.044715 or
// 1/sqrt2, v23 sqrt(2/pi), v24 sign bit; v31 tail mask, v27 its complement.
V RA(int s) { return V{uint8_t(8 * s)}; }
V RB(int s) { return V{uint8_t(8 * s + 1)}; }
V AL(int s) { return V{uint8_t(8 * s + 2)}; }
V AH(int s) { return V{uint8_t(8 * s + 3)}; }
V BL(int s) { return V{uint8_t(8 * s + 4)}; }
V BH(int s) { return V{uint8_t(8 * s + 5)}; }
V TL(int s) { return V{uint8_t(8 * s + 6)}; }
V TH(int s) { return V{uint8_t(8 * s + 7)}; }

// Scalars: x1 row/tile loop, x2 step loop, x5 a, x6 b, x7 out, x8 / x9 / x11 PE strides
// of a / b / out, x16 / x17 / x18 row bases of a / b / out, x20 rows left, x22 npe.

struct Plan {
  bool spread = false;
  uint32_t rows = 0, n = 0;        // rows and elements per row after flattening
  uint32_t as = 0, bs = 0, os = 0;  // row strides
  uint32_t nchunks = 0, P = 0, nfull = 0, rem = 0, step = 0;
  bool tail = false;
  // Rows mapping in H parts: the row's chunks in H equal parts, part h of row r on PE
  // r * H + h (R = npe / H rows per tile), so short tiles keep more PEs busy.
  uint32_t H = 1, R = 0;
};

bool dense(const EwArgs& a) {
  auto d = [&](uint32_t s) { return s == 0 || s == a.cols * 2; };
  return d(a.a_stride) && d(a.out_stride) && (a.op == EwOp::gelu_tanh || a.op == EwOp::gelu_erf || d(a.b_stride));
}

Plan make_plan(const sim::Config& cfg, const EwArgs& a, bool spread) {
  Plan p;
  p.spread = spread;
  p.rows = a.rows;
  p.n = a.cols;
  p.as = a.a_stride ? a.a_stride : a.cols * 2;
  p.bs = a.op == EwOp::bias_add ? 0 : (a.b_stride ? a.b_stride : a.cols * 2);
  p.os = a.out_stride ? a.out_stride : a.cols * 2;
  if (spread && a.op != EwOp::bias_add && dense(a)) {
    p.n = a.rows * a.cols;
    p.rows = 1;
  }
  p.nchunks = ceil_div(p.n, kChunk);
  const uint32_t npe = cfg.npe();
  if (spread) {
    // As few steps as npe PEs allow, their chunks spread evenly over the PEs (a
    // larger array never takes a step more, nor a shorter last one that costs as much).
    p.P = ceil_div(p.nchunks, ceil_div(p.nchunks, std::min(npe, p.nchunks)));
    const uint32_t c = ceil_div(p.nchunks, p.P);
    p.rem = p.nchunks - (c - 1) * p.P;
    p.tail = p.rem != p.P || p.n % kChunk != 0;
    p.nfull = p.tail ? c - 1 : c;
    p.step = p.P * 64;
  } else {
    p.nfull = p.n / kChunk;
    p.tail = p.n % kChunk != 0;
    p.step = 64;
    // Parts (p3..p6): as many as the PEs a tile of rows leaves idle allow, dividing the
    // chunks, the array's columns and the strides, each part's first address inside OCM
    // (PE i = r H + h reads row r at base_h + i * stride / H, base_h = row 0 + h part -
    // h stride / H); not with a tail chunk, nor bias_add (its bias goes by column).
    auto fits = [&](uint32_t h2) {
      if (p.nfull % h2 || cfg.pe_cols % h2 || uint64_t(a.rows) * h2 > npe) return false;
      for (auto [off, st] : {std::pair{a.a_ocm, p.as}, {a.b_ocm, p.bs}, {a.out_ocm, p.os}}) {
        if (st % h2) return false;
        if (int64_t(off) + int64_t(h2 - 1) * (int64_t(p.nfull / h2) * 64 - st / h2) < 0) return false;
      }
      return true;
    };
    while (!p.tail && a.op != EwOp::bias_add && p.H < 4 && fits(p.H * 2)) p.H *= 2;
    p.nfull /= p.H;
    p.R = npe / p.H;
  }
  return p;
}

// Packed tail mask v31 (0xffff per fp16 whose element index < n) and v27 = ~v31, from
// `base` = per PE index of the first element of its tail chunk. Temps v28..v30.
void emit_masks(Builder& b, V base, uint32_t n) {
  b.op("vsplati", {V{28}, int64_t(n)});
  b.op("vlaneid", {V{29}});
  b.op("vshl", {V{29}, V{29}, int64_t(1)});
  b.op("vadd.i32", {V{29}, V{29}, base});
  b.op("vcmplt.i32", {V{31}, V{29}, V{28}});   // low half: element base + 2 lane
  b.op("vsplati", {V{30}, 1});
  b.op("vadd.i32", {V{29}, V{29}, V{30}});
  b.op("vcmplt.i32", {V{29}, V{29}, V{28}});   // high half: element base + 2 lane + 1
  b.op("vsplati", {V{30}, 0xffff});
  b.op("vand", {V{31}, V{31}, V{30}});
  b.op("vsplati", {V{30}, -65536});
  b.op("vand", {V{29}, V{29}, V{30}});
  b.op("vor", {V{31}, V{31}, V{29}});
  b.op("vsplati", {V{30}, -1});
  b.op("vxor", {V{27}, V{31}, V{30}});
}

// One step over k chunks per PE.
void emit_step(Builder& b, const EwArgs& a, const Plan& p, int k, bool tail) {
  const P pr = (tail && p.spread) ? P{2} : P{1};
  const int64_t st = p.step;
  // Part h (rows mapping in parts): PE r H + h reads row r at chunk h nfull, through its
  // own predicate p3 + h (x8/x9/x11 are the strides / H); one part: every active PE (pr).
  auto parts = [&](auto f) {
    for (uint32_t h = 0; h < p.H; ++h) f(p.H > 1 ? P{uint8_t(3 + h)} : pr, [&](uint32_t stride) {
      return int64_t(h) * p.nfull * 64 - int64_t(h) * (stride / p.H);
    });
  };
  // The loads part by part (each part's chunks of both operands, then the next part's): the
  // parts write the same registers, and a register written again waits for its last write
  // (lat.ocm_rd + the scatter's port time); between them the step's other loads keep the port
  // busy (qc-u, 128 rows of 1,024 in 4 parts: 24 cycles a scatter in turn, 16 so).
  const bool b_bcast = a.op == EwOp::bias_add && !p.spread, b_rows = has_b(a.op) && !b_bcast;
  parts([&](P ph, auto off) {
    for (int s = 0; s < k; ++s) {
      b.op("oscatter", {RA(s), Mem{X{5}, st * s + off(p.as)}, X{8}}, ph);
      if (b_rows) b.op("oscatter", {RB(s), Mem{X{6}, st * s + off(p.bs)}, X{9}}, ph);
    }
  });
  for (int s = 0; s < k && b_bcast; ++s) b.op("obcast", {RB(s), Mem{X{6}, 64 * s}});
  if (tail) b.op("oscatter", {V{16}, Mem{X{7}, 0}, X{11}}, pr);
  for (int s = 0; s < k; ++s) {
    b.op("vunpack.f16", {AL(s), RA(s), int64_t(0)}, pr);
    b.op("vunpack.f16", {AH(s), RA(s), int64_t(1)}, pr);
    if (has_b(a.op)) {
      b.op("vunpack.f16", {BL(s), RB(s), int64_t(0)}, pr);
      b.op("vunpack.f16", {BH(s), RB(s), int64_t(1)}, pr);
    }
  }
  // Each stage over all 2k vectors before the next stage.
  auto stage = [&](const char* m, V (*d)(int), V (*s1)(int), V (*s2)(int), V (*d2)(int), V (*t1)(int),
                   V (*t2)(int)) {
    for (int s = 0; s < k; ++s) {
      b.op(m, {d(s), s1(s), s2(s)}, pr);
      b.op(m, {d2(s), t1(s), t2(s)}, pr);
    }
  };
  auto stage_c = [&](const char* m, V (*d)(int), V (*s1)(int), V c, V (*d2)(int), V (*t1)(int)) {
    for (int s = 0; s < k; ++s) {
      b.op(m, {d(s), s1(s), c}, pr);
      b.op(m, {d2(s), t1(s), c}, pr);
    }
  };
  auto stage_1 = [&](const char* m, V (*d)(int), V (*s1)(int), V (*d2)(int), V (*t1)(int)) {
    for (int s = 0; s < k; ++s) {
      b.op(m, {d(s), s1(s)}, pr);
      b.op(m, {d2(s), t1(s)}, pr);
    }
  };
  V (*res_l)(int) = AL;
  V (*res_h)(int) = AH;
  if (a.op == EwOp::add || a.op == EwOp::bias_add) {
    stage("vadd.f32", AL, AL, BL, AH, AH, BH);  // x + y
  } else {
    // The activation (act_steps): z on a, u on b, t on the temps, the constants v20-v24.
    using Pair = std::pair<V (*)(int), V (*)(int)>;
    auto reg = [](ActReg r) -> Pair {
      return r == ActReg::z ? Pair{AL, AH} : r == ActReg::u ? Pair{BL, BH} : Pair{TL, TH};
    };
    auto constant = [](ActReg r) -> std::optional<V> {
      switch (r) {
        case ActReg::one: return V{20};
        case ActReg::half: return V{21};
        case ActReg::c: return V{22};
        case ActReg::k: return V{23};
        case ActReg::sign: return V{24};
        default: return std::nullopt;
      }
    };
    for (const ActStep& st : act_steps(a.op)) {
      const auto [dl, dh] = reg(st.d);
      const auto [sl, sh] = reg(st.a);
      if (st.b == ActReg::none) stage_1(st.op, dl, sl, dh, sh);
      else if (const std::optional<V> c = constant(st.b)) stage_c(st.op, dl, sl, *c, dh, sh);
      else stage(st.op, dl, sl, reg(st.b).first, dh, sh, reg(st.b).second);
    }
  }
  for (int s = 0; s < k; ++s) b.op("vpack.f16", {RA(s), res_l(s), res_h(s)}, pr);
  if (tail) {
    b.op("vand", {RA(0), RA(0), V{31}}, pr);
    b.op("vand", {V{16}, V{16}, V{27}}, pr);
    b.op("vor", {RA(0), RA(0), V{16}}, pr);
  }
  for (int s = 0; s < k; ++s)
    parts([&](P ph, auto off) { b.op("ogather", {RA(s), Mem{X{7}, st * s + off(p.os)}, X{11}}, ph); });
  b.op("addi", {X{5}, X{5}, st * k});
  if (has_b(a.op)) b.op("addi", {X{6}, X{6}, st * k});
  b.op("addi", {X{7}, X{7}, st * k});
}

void emit_row(Builder& b, const EwArgs& a, const Plan& p) {
  b.op("add", {X{5}, X{16}, X{0}});
  b.op("add", {X{6}, X{17}, X{0}});
  b.op("add", {X{7}, X{18}, X{0}});
  if (p.nfull / 2) {
    b.li(X{2}, p.nfull / 2);
    b.loop(X{2}, [&] { emit_step(b, a, p, 2, false); });
  }
  if (p.nfull % 2) emit_step(b, a, p, 1, false);
  if (p.tail) emit_step(b, a, p, 1, true);
}

void check(const sim::Config& cfg, const EwArgs& a, const Plan& p) {
  const char* name = op_name(a.op);
  if (a.rows == 0 || a.cols == 0) fail("elementwise {}: rows = {} and cols = {} must be positive", name, a.rows, a.cols);
  const uint64_t row = uint64_t(a.cols) * 2;
  if (p.as < row || p.os < row || (has_b(a.op) && a.op != EwOp::bias_add && p.bs < row))
    fail("elementwise {}: a row is {} B but the strides are a {} B, b {} B, out {} B", name, row, p.as, p.bs, p.os);
  const uint64_t span = uint64_t(ceil_div(a.cols, kChunk)) * 64;
  auto in_ocm = [&](const char* what, uint64_t off, uint64_t stride, uint64_t rows) {
    uint64_t end = off + (rows - 1) * stride + span;
    if (end > cfg.ocm_bytes)
      fail("elementwise {}: {} at OCM offset {} ends at {} ({} rows, stride {} B, read in 64 B chunks), past the {} B of OCM",
           name, what, off, end, rows, stride, uint64_t(cfg.ocm_bytes));
  };
  in_ocm("a", a.a_ocm, p.as, a.rows);
  in_ocm("out", a.out_ocm, p.os, a.rows);
  if (a.op == EwOp::bias_add)
    in_ocm("bias", a.b_ocm, 0, 1);
  else if (has_b(a.op))
    in_ocm("b", a.b_ocm, p.bs, a.rows);
}

}  // namespace

double ew_estimate_cycles(const sim::Config& cfg, const EwArgs& a, EwMapping m) {
  const double port = double(cfg.ocm_port_bytes), vf = cfg.occ(isa::Unit::vfpu), sfu = cfg.occ(isa::Unit::sfu);
  double comp = 0, lat = 0;
  switch (a.op) {
    case EwOp::add:
    case EwOp::bias_add: comp = 2 * vf; lat = 30; break;
    case EwOp::silu_mul: comp = std::max(6 * vf, 4 * sfu); lat = 80; break;
    case EwOp::gelu_tanh: comp = std::max(14 * vf, 2 * sfu); lat = 100; break;
    case EwOp::gelu_erf: comp = std::max(8 * vf, 2 * sfu); lat = 70; break;
  }
  const double ops = (has_b(a.op) && a.op != EwOp::bias_add) ? 3 : 2;  // 64 B operands per chunk through the port
  const Plan p = make_plan(cfg, a, m != EwMapping::rows);
  if (p.spread) {
    const double steps = p.nfull + (p.tail ? 1 : 0);
    return p.rows * (steps * std::max(comp, ops * p.P * 64 / port) + lat);
  }
  double total = 0;
  for (uint32_t r = 0; r < p.rows; r += p.R) {
    const uint32_t act = std::min(p.R, p.rows - r) * p.H;
    total += (p.nfull + (p.tail ? 1 : 0)) * std::max(comp, ops * act * 64 / port) + lat;
  }
  return total;
}

EwMapping ew_pick_mapping(const sim::Config& cfg, const EwArgs& a) {
  if (a.mapping != EwMapping::automatic) return a.mapping;
  if (a.op != EwOp::bias_add && dense(a)) return EwMapping::spread;
  return ew_estimate_cycles(cfg, a, EwMapping::spread) <= ew_estimate_cycles(cfg, a, EwMapping::rows) ? EwMapping::spread
                                                                                                      : EwMapping::rows;
}

KernelCost cost_elementwise(const sim::Config&, const EwArgs& a) {
  KernelCost c;
  const uint64_t t = uint64_t(a.rows) * a.cols * 2;
  c.ocm_bytes = t * ((has_b(a.op) && a.op != EwOp::bias_add) ? 3 : 2);
  return c;
}

void emit_elementwise(Builder& b, const sim::Config& cfg, const EwArgs& a) {
  if (a.rows == 0 || a.cols == 0)
    fail("elementwise {}: rows = {} and cols = {} must be positive", op_name(a.op), a.rows, a.cols);
  const Plan p = make_plan(cfg, a, ew_pick_mapping(cfg, a) == EwMapping::spread);
  check(cfg, a, p);
  const uint32_t npe = cfg.npe();

  // Constants.
  b.op("vsplat.f32", {V{20}, F32{1.0f}});
  b.op("vsplat.f32", {V{21}, F32{0.5f}});
  b.op("vsplat.f32", {V{22}, F32{a.op == EwOp::gelu_erf ? 0.7071067811865476f : 0.044715f}});
  b.op("vsplat.f32", {V{23}, F32{0.7978845608028654f}});
  b.op("vsplati", {V{24}, int64_t(INT32_MIN)});
  b.li(X{16}, a.a_ocm);
  b.li(X{17}, a.b_ocm);
  b.li(X{18}, a.out_ocm);
  b.li(X{22}, npe);

  if (p.spread) {
    b.li(X{8}, 64);
    b.li(X{9}, 64);
    b.li(X{11}, 64);
    b.li(X{21}, p.P);
    b.op("pset.range", {P{1}, X{0}, X{21}});
    b.li(X{21}, p.rem);
    b.op("pset.range", {P{2}, X{0}, X{21}});
    if (p.tail) {
      b.op("vpeid", {V{0}});
      b.op("vshl", {V{0}, V{0}, int64_t(5)});
      b.op("vsplati", {V{1}, int64_t(p.nfull) * p.P * kChunk});
      b.op("vadd.i32", {V{0}, V{0}, V{1}});
      emit_masks(b, V{0}, p.n);
    }
    b.li(X{1}, p.rows);
    b.loop(X{1}, [&] {
      emit_row(b, a, p);
      b.li(X{21}, p.as);
      b.op("add", {X{16}, X{16}, X{21}});
      if (a.op != EwOp::bias_add) {
        b.li(X{21}, p.bs);
        b.op("add", {X{17}, X{17}, X{21}});
      }
      b.li(X{21}, p.os);
      b.op("add", {X{18}, X{18}, X{21}});
    });
    return;
  }
  // Rows: tiles of npe rows, PE r owns row r.
  b.li(X{8}, p.as);
  b.li(X{9}, p.bs);
  b.li(X{11}, p.os);
  if (p.tail) {
    b.op("vsplati", {V{0}, int64_t(p.nfull) * kChunk});
    emit_masks(b, V{0}, p.n);
  }
  // Tiles of R rows (npe without parts). Parts: p3 + h = the PEs of the columns h mod H
  // (built once), each tile's p1 = its H x rows PEs and p3 + h = p1 & its columns.
  if (p.H > 1) {
    b.li(X{8}, p.as / p.H);
    b.li(X{9}, p.bs / p.H);
    b.li(X{11}, p.os / p.H);
    for (uint32_t h = 0; h < p.H; ++h)
      b.pset_cols_mod(P{uint8_t(3 + h)}, h, p.H, X{23}, X{24});
  }
  b.li(X{20}, p.rows);
  if (p.H > 1) b.li(X{22}, p.R);  // (x22 = npe otherwise)
  b.li(X{1}, ceil_div(p.rows, p.R));
  b.loop(X{1}, [&] {
    b.op("min", {X{21}, X{20}, X{22}});
    if (p.H > 1) b.op("muli", {X{21}, X{21}, int64_t(p.H)});
    b.op("pset.range", {P{1}, X{0}, X{21}});
    for (uint32_t h = 0; h < p.H && p.H > 1; ++h) b.op("pand", {P{uint8_t(3 + h)}, P{uint8_t(3 + h)}, P{1}});
    emit_row(b, a, p);
    b.li(X{21}, p.R * p.as);
    b.op("add", {X{16}, X{16}, X{21}});
    if (a.op != EwOp::bias_add) {
      b.li(X{21}, p.R * p.bs);
      b.op("add", {X{17}, X{17}, X{21}});
    }
    b.li(X{21}, p.R * p.os);
    b.op("add", {X{18}, X{18}, X{21}});
    b.op("sub", {X{20}, X{20}, X{22}});
  });
}

}  // namespace gpnpu::kernels
