// Embedding lookup from the W4 table in the GEMV layout: the device row must equal
// the chain's dequantised row rounded to fp16, exactly.
#include "kernels/embed.h"

#include "kernel_harness.h"
#include "kernels/gemv.h"
#include "model/checkpoint/quant.h"
#include "sim/machine/memory_map.h"

namespace gpnpu::kernels::test {
namespace {

struct EmbedCase {
  const char* preset;
  uint32_t vocab, dim;
  std::vector<uint32_t> ids;
};

std::pair<std::vector<float>, sim::Stats> run_embed(const EmbedCase& c, bool timing_only,
                                                    std::vector<float>* ref) {
  sim::Config cfg = sim::Config::make(c.preset, {});
  std::vector<float> w = random_vector(size_t(c.vocab) * c.dim, 11, 0.05f);
  model::QuantTensor q = model::quantise(w.data(), c.vocab, c.dim);
  EmbedArgs a;
  a.vocab = c.vocab;
  a.dim = c.dim;
  a.table_ddr = sim::ddr_addr(0);
  a.rows = uint32_t(c.ids.size());
  a.ids_smem = 1024;
  a.out_ocm = 0;
  a.scratch_ocm = uint32_t(c.ids.size()) * c.dim * 2 + 64;
  a.smem = 0;
  Builder b;
  emit_embed(b, cfg, a);
  b.op("halt");
  isa::Program prog = b.finish();
  sim::Platform& p = sim::Platform::get();
  p.configure(cfg, timing_only);
  std::vector<uint8_t> packed = pack_gemv_weight(q.view(), cfg);
  p.ddr().write(0, packed.data(), packed.size());
  p.write_smem(a.ids_smem, c.ids.data(), uint32_t(c.ids.size() * 4));
  sim::Stats st = p.run(prog);
  if (ref) {
    std::vector<float> row(c.dim);
    for (uint32_t id : c.ids) {
      model::dequantise_row(q, id, row.data());
      for (float v : row) ref->push_back(round_f16(v));
    }
  }
  return {timing_only ? std::vector<float>{} : read_ocm_f16(0, c.ids.size() * c.dim), st};
}

class EmbedShapes : public ::testing::TestWithParam<EmbedCase> {};

TEST_P(EmbedShapes, RowsEqualTheDequantisedTable) {
  std::vector<float> ref;
  auto [got, st] = run_embed(GetParam(), false, &ref);
  ASSERT_EQ(got.size(), ref.size());
  for (size_t i = 0; i < ref.size(); ++i) ASSERT_EQ(got[i], ref[i]) << "element " << i;
  auto [unused, st_t] = run_embed(GetParam(), true, nullptr);
  EXPECT_EQ(st.total[sim::Stat::cycles], st_t.total[sim::Stat::cycles]);
}

INSTANTIATE_TEST_SUITE_P(Shapes, EmbedShapes,
                         ::testing::Values(EmbedCase{"mini", 50, 128, {0, 17, 49}},
                                           EmbedCase{"mini", 300, 2304, {299, 3, 16, 15}},
                                           EmbedCase{"qc-u", 1500, 2048, {1499, 0, 1024, 7}},
                                           // (pairs of rows in the pipelined loop's trips, the steps
                                           // after them and an odd last row)
                                           EmbedCase{"qc-u", 1500, 2048, {5, 1499, 0, 1024, 7, 8, 300, 301, 1200}},
                                           EmbedCase{"mini", 300, 2304, {299, 3, 16, 15, 100, 200}},
                                           EmbedCase{"mini", 50, 128, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}}));

TEST(Embed, NegativeControlWrongRowFails) {
  EmbedCase c{"mini", 50, 128, {17}};
  std::vector<float> ref;
  auto [got, st] = run_embed(c, false, &ref);
  EmbedCase other{"mini", 50, 128, {18}};
  std::vector<float> ref_other;
  run_embed(other, false, &ref_other);
  EXPECT_NE(got, ref_other);
  EXPECT_EQ(got, ref);
}

}  // namespace
}  // namespace gpnpu::kernels::test
