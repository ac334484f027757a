// Element-wise kernels on fp16 rows in OCM:
//   add       out = a + b                    residual add (model::ops::add_inplace), out may be a
//   bias_add  out[r][c] = a[r][c] + b[c]     bias per column, b = cols fp16 (stride ignored)
//   silu_mul  out = silu(a) * b              SwiGLU activation, a = gate, b = up (ops::silu_mul),
//                                            two separate row-major inputs (no interleaving)
//   gelu_tanh out = gelu_pytorch_tanh(a)     tower block MLP (ops::gelu_tanh), b unused
//   gelu_erf  out = 0.5 a (1 + erf(a/sqrt2)) mergers (ops::gelu_erf), b unused
// Every op reads fp16, computes in fp32 in the reference's operation order (see
// elementwise.cpp), and rounds to fp16 once. silu divides with vrcp then a multiply
// (the reference divides: up to 1 fp32 ulp apart, below fp16 rounding).
//
// Chunks of 32 fp16 (64 B, one vector register per operand); two chunks are in flight
// per loop step, interleaved stage by stage, so the in-order issue does not wait on one
// chunk's latency chain.
//
// Mappings (EwMapping):
//  - spread: a row is spread over P = min(npe, ceil(cols/32)) PEs, chunk q to PE q % P
//            (pass q / P); rows one after another. When a, b and out are all dense
//            (stride = cols*2) and the op is not bias_add, all rows are one flat row of
//            rows*cols elements. For decode (rows = 1) and dense tensors.
//  - rows:   PE r owns row r of a tile of npe rows and walks it chunk by chunk; the
//            bias is broadcast. For many short, strided rows. When a tile of rows
//            leaves PEs idle (rows <= npe / 2) and the row is whole chunks, the row is
//            cut in H = 2 or 4 equal parts (not bias_add): part h of row r on PE
//            h * npe / H + r, each part scattered and gathered through its own
//            predicate (p3..p6): the 128-row SiLU gates of the prefill on 512 PEs.
// Rule (automatic): spread when the tensors flatten (always best: every PE busy, one
// pass per npe chunks); otherwise (strided rows, bias_add) the mapping with the lower
// ew_estimate_cycles(), a per-step model: max(compute occupancy, port bytes) + latency.
//
// cols need not be a multiple of 32 (the tail chunk is written back read-modify-write:
// bytes past the row end keep their value), rows need not be a multiple of npe. The
// kernel READS up to 62 B past the end of the last row of each operand: they must lie
// inside OCM. Resources: x1..x31, v0..v31, p1..p6, 2 hardware-loop levels; no LRM.
#pragma once
#include <cstdint>

#include "kernels/builder.h"
#include "kernels/cost.h"
#include <vector>

#include "sim/machine/config.h"

namespace gpnpu::kernels {

enum class EwOp { add, bias_add, silu_mul, gelu_tanh, gelu_erf };
enum class EwMapping { automatic, spread, rows };

struct EwArgs {
  EwOp op = EwOp::add;
  uint32_t rows = 1, cols = 0;
  uint32_t a_ocm = 0, a_stride = 0;      // bytes between rows; 0: cols*2
  uint32_t b_ocm = 0, b_stride = 0;      // second operand (add: y, bias_add: bias vector, silu_mul: up)
  uint32_t out_ocm = 0, out_stride = 0;  // may equal a_ocm (in place)
  EwMapping mapping = EwMapping::automatic;
};

EwMapping ew_pick_mapping(const sim::Config& cfg, const EwArgs& a);
double ew_estimate_cycles(const sim::Config& cfg, const EwArgs& a, EwMapping m);
// Bytes through the OCM port at the minimum: inputs once, output once.
KernelCost cost_elementwise(const sim::Config& cfg, const EwArgs& a);
// Emits the kernel (no halt). Throws gpnpu::Error if a shape or a buffer does not fit.
void emit_elementwise(Builder& b, const sim::Config& cfg, const EwArgs& a);

// An activation's operations (silu_mul, gelu_tanh, gelu_erf), in order, on fp32 registers: z
// the input and the result (silu_mul: the gate), u (silu_mul: the up input; else a temporary),
// t a temporary, and constants one (1.0), half (0.5), c (gelu_tanh 0.044715, gelu_erf
// 1/sqrt(2)), k (sqrt(2/pi)), sign (the sign bit). emit_elementwise and the GEMM's epilogue
// (GemmArgs::act) both emit these, so they give the same bits.
enum class ActReg : uint8_t { z, t, u, one, half, c, k, sign, none };
struct ActStep {
  const char* op;
  ActReg d, a, b = ActReg::none;  // b: none for a unary operation (vmla.f32 also reads d)
};
const std::vector<ActStep>& act_steps(EwOp op);

}  // namespace gpnpu::kernels
