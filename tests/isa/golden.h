// The fixture of the per-instruction golden tests. A test TEST_F(Golden, <ident>)
// covers the table row with that ident; TearDown fails the test if it never
// executed that row, and GoldenRegistry.EveryRowHasAGoldenTest (test_registry.cpp)
// fails if any row has no Golden test. Together: every row has a golden test
// that really runs it.
#pragma once
#include <set>
#include <string>

#include "tests/isa/isa_test_util.h"

namespace gpnpu::isa::test {

// Suites whose tests are named after table rows (the registry reads these).
inline const std::set<std::string> kGoldenSuites = {"Golden", "GoldenMemRows"};

class Golden : public ::testing::Test {
 public:
  Machine m;
  ArchState& s = m.s;
  std::set<std::string> executed;  // mnemonics this test ran

  void record(std::string_view mnemonic) { executed.insert(std::string(mnemonic)); }
  Insn run(std::string_view line, uint32_t pc = 0) {
    Insn in = exec_text(s, line, pc);
    record(in.info->mnemonic);
    return in;
  }
  Insn run_fields(std::string_view mnemonic, Fields f, uint32_t pc = 0) {
    Insn in = exec_word(s, word_of(mnemonic, f), pc);
    record(in.info->mnemonic);
    return in;
  }

 protected:
  void TearDown() override {
    const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
    if (!kGoldenSuites.count(info->test_suite_name())) return;  // a helper test on this fixture
    const std::string name = info->name();
    const OpInfo* row = nullptr;
    for (const OpInfo& o : table())
      if (name == o.ident) row = &o;
    ASSERT_NE(row, nullptr) << "Golden." << name << " is not named after a table row ident";
    EXPECT_TRUE(executed.count(row->mnemonic))
        << "Golden." << name << " never executed " << row->mnemonic;
  }
};

}  // namespace gpnpu::isa::test
