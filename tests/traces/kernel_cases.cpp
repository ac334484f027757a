// The kernel programs of tests/kernels/ (gemv, embed, norm, elementwise), built with
// kernels/builder.h exactly as those tests build them, plus their host loading.
#include <random>

#include "isa/fp16.h"
#include "kernels/builder.h"
#include "kernels/elementwise.h"
#include "kernels/embed.h"
#include "kernels/gemv.h"
#include "kernels/norm.h"
#include "model/checkpoint/quant.h"
#include "sim/machine/memory_map.h"
#include "trace_test_util.h"

namespace gpnpu::traces::test {

namespace {
std::vector<float> random_vector(size_t n, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}
std::vector<uint16_t> f16(const std::vector<float>& v) {
  std::vector<uint16_t> h(v.size());
  for (size_t i = 0; i < v.size(); ++i) h[i] = f32_to_f16(v[i]);
  return h;
}
uint32_t up64(uint32_t v) { return (v + 63) / 64 * 64; }
}  // namespace

KernelCase gemv_case(uint32_t n, uint32_t k, const char* preset) {
  KernelCase c;
  c.name = "gemv";
  c.cfg = sim::Config::make(preset, {});
  kernels::GemvArgs a;
  a.n = n;
  a.k = k;
  a.x_ocm = 0;
  a.y_ocm = (k * 2 + 63) / 64 * 64;
  a.scratch_ocm = (a.y_ocm + n * 2 + 63) / 64 * 64;
  a.scratch_bytes = uint32_t(c.cfg.ocm_bytes) - a.scratch_ocm;
  a.w_ddr = sim::ddr_addr(0x1000);
  a.smem = 0;
  kernels::Builder b;
  b.mark("gemv", [&] { kernels::emit_gemv_w4(b, c.cfg, a); });
  b.op("halt");
  c.program = b.finish();
  c.program.source = "gemv";
  c.host_ocm = {{a.x_ocm, k * 2}};
  std::vector<float> w = random_vector(size_t(n) * k, 7, 0.02f), x = random_vector(k, 8, 1.0f);
  model::QuantTensor q = model::quantise(w.data(), n, k);
  c.load = [q, x, a, cfg = c.cfg](sim::Platform& p) {
    std::vector<uint8_t> packed = kernels::pack_gemv_weight(q.view(), cfg);
    p.ddr().write(0x1000, packed.data(), packed.size());
    std::vector<uint16_t> h = f16(x);
    p.ocm().write(a.x_ocm, h.data(), h.size() * 2);
  };
  return c;
}

KernelCase embed_case() {
  KernelCase c;
  c.name = "embed";
  c.cfg = sim::Config::make("mini", {});
  const uint32_t vocab = 40, dim = 256;
  std::vector<uint32_t> ids = {3, 17, 39};
  kernels::EmbedArgs a;
  a.vocab = vocab;
  a.dim = dim;
  a.table_ddr = sim::ddr_addr(0);
  a.rows = uint32_t(ids.size());
  a.ids_smem = 1024;
  a.out_ocm = 0;
  a.scratch_ocm = uint32_t(ids.size()) * dim * 2 + 64;
  a.smem = 0;
  kernels::Builder b;
  kernels::emit_embed(b, c.cfg, a);
  b.op("halt");
  c.program = b.finish();
  c.program.source = "embed";
  std::vector<float> w = random_vector(size_t(vocab) * dim, 11, 0.05f);
  model::QuantTensor q = model::quantise(w.data(), vocab, dim);
  c.load = [q, ids, a, cfg = c.cfg](sim::Platform& p) {
    std::vector<uint8_t> packed = kernels::pack_gemv_weight(q.view(), cfg);
    p.ddr().write(0, packed.data(), packed.size());
    p.write_smem(a.ids_smem, ids.data(), uint32_t(ids.size() * 4));
  };
  return c;
}

KernelCase norm_case(bool split) {
  KernelCase c;
  c.name = split ? "norm (split)" : "norm (rows)";
  c.cfg = sim::Config::make("mini", {});
  const uint32_t rows = split ? 1 : 5, dim = 200, stride = dim * 2;
  kernels::NormArgs a;
  a.kind = kernels::NormKind::layer;
  a.rows = rows;
  a.dim = dim;
  a.x_ocm = 0;
  a.x_stride = stride;
  a.y_ocm = up64(rows * stride + 64);
  a.y_stride = stride;
  a.w_ocm = up64(a.y_ocm + rows * stride + 64);
  a.b_ocm = up64(a.w_ocm + dim * 2 + 64);
  a.scratch_ocm = up64(a.b_ocm + dim * 2 + 64);
  a.scratch_bytes = kernels::norm_scratch_bytes(c.cfg);
  a.mapping = split ? kernels::NormMapping::split : kernels::NormMapping::rows;
  kernels::Builder b;
  kernels::emit_norm(b, c.cfg, a);
  b.op("halt");
  c.program = b.finish();
  c.program.source = "norm";
  c.host_ocm = {{a.x_ocm, rows * stride}, {a.y_ocm, rows * stride}, {a.w_ocm, dim * 2}, {a.b_ocm, dim * 2}};
  std::vector<float> x = random_vector(size_t(rows) * dim, 5, 1.5f), w = random_vector(dim, 6, 0.3f),
                     bias = random_vector(dim, 7, 0.2f);
  for (float& v : w) v += 1.0f;
  c.load = [x, w, bias, a](sim::Platform& p) {
    std::vector<uint16_t> hx = f16(x), hw = f16(w), hb = f16(bias), fill(hx.size(), 0x3c00);
    p.ocm().write(a.x_ocm, hx.data(), hx.size() * 2);
    p.ocm().write(a.y_ocm, fill.data(), fill.size() * 2);
    p.ocm().write(a.w_ocm, hw.data(), hw.size() * 2);
    p.ocm().write(a.b_ocm, hb.data(), hb.size() * 2);
  };
  return c;
}

KernelCase elementwise_case() {
  KernelCase c;
  c.name = "elementwise";
  c.cfg = sim::Config::make("mini", {});
  const uint32_t rows = 3, cols = 100, stride = 256;
  const uint32_t bytes = rows * stride;
  kernels::EwArgs a;
  a.op = kernels::EwOp::silu_mul;
  a.rows = rows;
  a.cols = cols;
  a.a_ocm = 0;
  a.a_stride = stride;
  a.b_ocm = up64(bytes + 64);
  a.b_stride = stride;
  a.out_ocm = up64(a.b_ocm + bytes + 64);
  a.out_stride = stride;
  kernels::Builder b;
  kernels::emit_elementwise(b, c.cfg, a);
  b.op("halt");
  c.program = b.finish();
  c.program.source = "elementwise";
  c.host_ocm = {{a.a_ocm, bytes}, {a.b_ocm, bytes}, {a.out_ocm, bytes}};
  std::vector<float> va = random_vector(bytes / 2, 9, 1.0f), vb = random_vector(bytes / 2, 10, 1.0f);
  c.load = [va, vb, a, bytes](sim::Platform& p) {
    std::vector<uint16_t> ha = f16(va), hb = f16(vb), ho(bytes / 2, 0);
    p.ocm().write(a.a_ocm, ha.data(), bytes);
    p.ocm().write(a.b_ocm, hb.data(), bytes);
    p.ocm().write(a.out_ocm, ho.data(), bytes);
  };
  return c;
}

}  // namespace gpnpu::traces::test
