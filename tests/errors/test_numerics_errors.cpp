// Bad input of the numerics options (issue 21; docs/errors.md, "Numerics"): each case
// runs `gpnpu ...` and expects exit code 1 with one stderr line "error: ..." holding
// the listed text.
#include <gtest/gtest.h>

#include <algorithm>

#include "errors_util.h"

namespace gpnpu::errors_test {
namespace {

TEST(NumericsErrors, OverflowModeAndOutlierOptions) {
  const std::string dir = scratch_dir("numerics");
  struct Case {
    std::string args;
    std::vector<std::string> want;
  };
  const std::vector<Case> cases = {
      {"run " + source_path("examples/asm/mac_peak.s") + " --timing-only --set fp16_overflow=clamp",
       {"config key 'fp16_overflow': 'clamp' is not one of inf,saturate"}},
      {"make-checkpoint --config tiny --out " + dir + "/a --massive-activation 151652:7",
       {"--massive-activation '151652:7': expected TOKEN:CHANNEL:VALUE"}},
      {"make-checkpoint --config tiny --out " + dir + "/b --massive-activation 999999:7:35000",
       {"token 999999 is outside the vocabulary (0..151935)"}},
      {"make-checkpoint --config tiny --out " + dir + "/c --super-weight model.nope.weight:1:2:3",
       {"outlier in 'model.nope.weight': the model has no such tensor"}},
      {"make-checkpoint --config tiny --out " + dir +
           "/d --super-weight model.language_model.layers.0.mlp.down_proj.weight:1:384:3",
       {"row 1 column 384 is outside its 128 x 384 elements"}},
      {"make-checkpoint --config tiny --out " + dir + "/e --scale-column model.language_model.embed_tokens.weight:x:100",
       {"'x' is not a number"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.args);
    CliResult r = run_cli(c.args);
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_TRUE(r.err.starts_with("error: ")) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "one line: " << r.err;
    for (const std::string& w : c.want) EXPECT_NE(r.err.find(w), std::string::npos) << "missing '" << w << "' in: " << r.err;
  }
}

}  // namespace
}  // namespace gpnpu::errors_test
