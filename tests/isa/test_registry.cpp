// The meta-test that every table row has a golden test, and one generic test per
// predicated row: with @p1 the disabled PEs keep every register, LRM byte and OCM
// byte, and the enabled PEs get exactly what an unpredicated run gives them.
#include <random>

#include "tests/isa/golden.h"

namespace gpnpu::isa::test {
namespace {

TEST(GoldenRegistry, EveryRowHasAGoldenTest) {
  std::set<std::string> tested, rows;
  const ::testing::UnitTest& ut = *::testing::UnitTest::GetInstance();
  for (int k = 0; k < ut.total_test_suite_count(); ++k) {
    const ::testing::TestSuite& suite = *ut.GetTestSuite(k);
    if (!kGoldenSuites.count(suite.name())) continue;
    for (int t = 0; t < suite.total_test_count(); ++t) tested.insert(suite.GetTestInfo(t)->name());
  }
  for (const OpInfo& o : table()) rows.insert(o.ident);
  std::vector<std::string> missing, stray;
  std::set_difference(rows.begin(), rows.end(), tested.begin(), tested.end(), std::back_inserter(missing));
  std::set_difference(tested.begin(), tested.end(), rows.begin(), rows.end(), std::back_inserter(stray));
  EXPECT_TRUE(missing.empty()) << "rows without a golden test: " << ::testing::PrintToString(missing);
  EXPECT_TRUE(stray.empty()) << "golden tests not named after a row: " << ::testing::PrintToString(stray);
  EXPECT_EQ(tested.size(), table().size());
}

// Operand text for the generic predication run (registers chosen so that every row
// is legal with x5 = 0 as the memory base and x6 = 64 as the stride).
std::string operand_text(const OperandSpec& o) {
  const std::string field(1, o.field);
  switch (o.kind) {
    case 'V': return "v" + std::to_string(1 + (o.field - 'a'));
    case 'X': return o.field == 'a' ? "x7" : o.field == 'b' ? "x5" : "x6";
    case 'N': return "1";
    case 'D': return "e";
    case 'I': return "5";
    case 'F': return "1.5";
    case 'M': return "0(x5)";
    default: ADD_FAILURE() << "unexpected operand kind " << o.kind << " on an array row"; return "";
  }
}

void randomise(Machine& m) {
  std::mt19937 rng(1234);
  for (uint32_t& w : m.s.v) w = rng() % 3 == 0 ? fbits(float(int(rng() % 2001) - 1000) / 64.0f) : rng();
  for (uint8_t& b : m.s.lrm) b = uint8_t(rng());
  for (uint8_t& b : m.ocm) b = uint8_t(rng());
  m.s.x[5] = 0;
  m.s.x[6] = 64;
  m.set_pred(1, {1, 4});
}

class Predication : public ::testing::TestWithParam<std::string> {};

TEST_P(Predication, DisabledPesKeepTheirState) {
  const OpInfo& info = *find_mnemonic(GetParam());
  std::string text = info.mnemonic;
  for (int k = 0; k < info.nops; ++k) text += (k ? ", " : " ") + operand_text(info.ops[k]);
  Machine init, full, pred;
  randomise(init);
  randomise(full);
  randomise(pred);
  exec_text(full.s, text);
  exec_text(pred.s, text + " @p1");
  auto on = [](uint32_t e) { return e == 1 || e == 4; };
  bool changed = false;  // the instruction must do something visible on an enabled PE
  for (uint32_t e = 0; e < init.s.npe; ++e) {
    for (int r = 0; r < kVregs; ++r)
      for (int l = 0; l < kLanes; ++l) {
        uint32_t want = on(e) ? full.V(r, e, l) : init.V(r, e, l);
        ASSERT_EQ(pred.V(r, e, l), want) << text << " @p1: v" << r << " pe " << e << " lane " << l;
        changed |= on(e) && full.V(r, e, l) != init.V(r, e, l);
      }
    for (uint32_t k = 0; k < init.s.lrm_bytes; ++k) {
      uint8_t want = on(e) ? full.s.lrm_of(e)[k] : init.s.lrm_of(e)[k];
      ASSERT_EQ(pred.s.lrm_of(e)[k], want) << text << " @p1: LRM byte " << k << " of pe " << e;
      changed |= on(e) && full.s.lrm_of(e)[k] != init.s.lrm_of(e)[k];
    }
  }
  // OCM: a gather writes PE e's bytes at e * 64 (stride x6)
  for (uint32_t k = 0; k < init.ocm.size(); ++k) {
    uint32_t e = k / 64;
    bool mine = e < init.s.npe && on(e) && k % 64 < info.mem_bytes;
    ASSERT_EQ(pred.ocm[k], mine ? full.ocm[k] : init.ocm[k]) << text << " @p1: OCM byte " << k;
    changed |= mine && full.ocm[k] != init.ocm[k];
  }
  for (int r = 0; r < kXregs; ++r) ASSERT_EQ(pred.s.x[r], full.s.x[r]) << text;
  changed |= full.s.x[7] != init.s.x[7];  // vext writes x7
  EXPECT_TRUE(changed) << text << " changed nothing on the enabled PEs: the check would be vacuous";
}

std::vector<std::string> predicated_rows() {
  std::vector<std::string> out;
  for (const OpInfo& o : table())
    if (o.predicated) out.push_back(o.mnemonic);
  return out;
}

INSTANTIATE_TEST_SUITE_P(ArrayRows, Predication, ::testing::ValuesIn(predicated_rows()),
                         [](const ::testing::TestParamInfo<std::string>& p) {
                           std::string n = p.param;
                           for (char& c : n)
                             if (c == '.') c = '_';
                           return n;
                         });

}  // namespace
}  // namespace gpnpu::isa::test
