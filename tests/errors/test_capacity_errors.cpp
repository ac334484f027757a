// The KV cache's capacity (issue 18; docs/errors.md, "KV-cache capacity"): --max-context
// past the DDR, --cached of compile at 0, negative or past the max context, and a chat
// turn that would pass it. Each is one clean "error: ..." line before anything runs.
#include <gtest/gtest.h>

#include <string>

#include "errors_util.h"

namespace gpnpu::errors_test {
namespace {

// 2B on qc-u with 32x64 PEs: 10,795 slots of 123,904 bytes fit beside 1,883,622,144 bytes of
// weights and buffers; --max-context auto takes 9,932, beside the image program's MLP chunk
// packings too (qc-u's own tower runs in one pass: no packings, 10,795).
TEST(CapacityErrors, CompileCachedIsCheckedAgainstTheMaxContext) {
  const std::string dir = scratch_dir("capacity_compile");
  const std::string c = "compile --set pe_cols=64 --out " + dir + "/out --run";
  expect_clean_error(run_cli(c + " --cached 0"),
                     {"--cached 0: needs at least 1 token in the KV cache; give 1 to 9932 (--max-context)"});
  expect_clean_error(run_cli(c + " --cached -3"), {"--cached -3: needs at least 1 token in the KV cache"});
  expect_clean_error(run_cli(c + " --cached 40000"),
                     {"--cached 40000: needs 40000 KV-cache slots, more than --max-context = 9932 (auto: the most "
                      "beside the image program's MLP chunk packings; up to 10795 fit the DDR without them); give "
                      "--cached 9932 or less, or a larger --max-context"});
  expect_clean_error(run_cli(c + " --max-context 10795 --cached 40000"),
                     {"--cached 40000: needs 40000 KV-cache slots, more than --max-context = 10795 (the most that fit "
                      "ddr_bytes beside the weights, 123904 bytes per token); give --cached 10795 or less"});
  expect_clean_error(run_cli(c + " --cached 4294967294"),
                     {"--cached 4294967294: needs 4294967294 KV-cache slots, more than --max-context = 9932"});
  expect_clean_error(run_cli(c + " --max-context 100 --cached 140"),
                     {"--seq 128: needs 128 KV-cache slots, more than --max-context = 100 (up to 10795 fit the DDR)"});
  EXPECT_FALSE(fs::exists(dir + "/out")) << "nothing is written before the checks";
}

// An LRM too small for a GEMM weight's one tile buffer (lrm_bytes 1 KiB; where two do not fit
// but one does, the image program runs the weight a tile a call, kernels::GemmPlan::single): the
// weight that needs the most (the 2B prefill's down, K = 6144, 1,792 bytes at split 2), the
// machine, and the least lrm_bytes that works for the whole model; one step of 64 bytes less is
// refused the same way.
TEST(CapacityErrors, LrmTooSmallForAWeightNamesItAndTheLeast) {
  const std::string dir = scratch_dir("capacity_lrm");
  expect_clean_error(run_cli("compile --out " + dir + "/out --set lrm_bytes=1024"),
                     {"compiler: weight 'L0.down.gemm' [2048 x 6144] needs an LRM tile buffer of 1792 bytes on "
                      "qc-u with lrm_bytes=1024: raise lrm_bytes to 1792 or more (the model's largest need)"});
  expect_clean_error(run_cli("compile --out " + dir + "/out --set lrm_bytes=1728"), {"raise lrm_bytes to 1792"});
  EXPECT_EQ(run_cli("compile --out " + dir + "/out2 --set lrm_bytes=1792").exit_code, 0);
}

// An OCM too small for one of the compiler's fixed regions names the region, its need and the
// OCM size that region alone needs, a multiple of 64 that the config key takes; compiling at
// that size gets past the region (the next error is another one's, naming a larger size). The
// image program's own error names the least OCM over the GEMMs' views (its view of 1 row):
// it compiles there, and 64 bytes less is refused with the same advice.
TEST(CapacityErrors, OcmTooSmallForARegionNamesTheSizeToRaiseTo) {
  const std::string dir = scratch_dir("capacity_ocm");
  expect_clean_error(run_cli("compile --out " + dir + "/out --set ocm_bytes=192KiB"),
                     {"compiler: OCM of 196608 bytes is too small: 'attention scratch and the LM head's staging' needs "
                      "131072 bytes at offset 89472; raise ocm_bytes to at least 220608"});
  expect_clean_error(run_cli("compile --out " + dir + "/out --set ocm_bytes=220608"),
                     {"compiler: OCM of 220608 bytes leaves 0 bytes for 'GEMV DMA buffers', which needs at least "
                      "68612; raise ocm_bytes to at least 289280"});
  const CliResult at = run_cli("compile --out " + dir + "/out --set ocm_bytes=289280");
  expect_clean_error(at, {"does not fit 289280 bytes of OCM even with its activations in DDR",
                          "raise ocm_bytes to 420736 or more"});
  EXPECT_EQ(at.err.find("GEMV DMA buffers"), std::string::npos) << at.err;
  EXPECT_FALSE(fs::exists(dir + "/out")) << "nothing is written before the checks";
  expect_clean_error(run_cli("compile --out " + dir + "/out --set ocm_bytes=420672"),
                     {"does not fit 420672 bytes of OCM", "raise ocm_bytes to 420736 or more"});
  EXPECT_EQ(run_cli("compile --out " + dir + "/out2 --set ocm_bytes=420736").exit_code, 0);
}

// On an odd pe_cols every GEMM runs at split 1 (split 2 pairs the neighbouring PEs of a row), so
// the same weight needs about twice the LRM: the error says so and what an even pe_cols would need.
TEST(CapacityErrors, OddPeColsSaysWhyTheLrmNeedDoubles) {
  const std::string dir = scratch_dir("capacity_odd_cols");
  expect_clean_error(run_cli("compile --out " + dir + "/out --set pe_cols=33 --set lrm_bytes=2048"),
                     {"needs an LRM tile buffer of 3328 bytes", "raise lrm_bytes to 3328 or more",
                      "pe_cols = 33 is odd, so every GEMM runs at split 1, which takes twice the LRM; with 34 the "
                      "weights fit this lrm_bytes"});
  expect_clean_error(run_cli("compile --out " + dir + "/out --set pe_cols=33 --set lrm_bytes=1024"),
                     {"with an even pe_cols they need 1792 bytes"});
  EXPECT_EQ(run_cli("compile --out " + dir + "/out2 --set pe_cols=33 --set lrm_bytes=3328").exit_code, 0);
}

// --max-context auto keeps the image program's MLP chunk packings (32x64 at qc-u's 4 MiB and 32
// GB/s) only where they leave the default 4,096 slots: in 1.99 GB of DDR they would leave about
// 65, without them 858 fit, and `compile` (its default --seq 128) runs with those, saying why the
// packings are out.
TEST(CapacityErrors, AutoContextLeavesThePackingsOutWhereTheyLeaveTooFewSlots) {
  const std::string dir = scratch_dir("capacity_auto");
  const CliResult r = run_cli("compile --out " + dir + "/out --set pe_cols=64 --set ddr_bytes=1990000000");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("(KV cache of 858 tokens)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("the MLP chunk packings left out so that the KV cache of 858 tokens fits"), std::string::npos)
      << r.out;
}

TEST(CapacityErrors, MaxContextPastTheDdrIsRefused) {
  const std::string dir = scratch_dir("capacity_max");
  expect_clean_error(run_cli("compile --out " + dir + "/out --max-context 20000"),
                     {"--max-context 20000: a KV cache of 20000 tokens takes about 2478080000 bytes (123904 per token) "
                      "beside the 1883622144 bytes of weights and buffers, more than ddr_bytes = 3221225472: at most "
                      "10795 tokens fit; give --max-context 10795 or less (or auto)"});
  expect_clean_error(run_cli("compile --out " + dir + "/out --max-context 20000 --set ddr_bytes=2GiB"),
                     {"or --set ddr_bytes=N (at most 3221225472)"});
  expect_clean_error(run_cli("compile --out " + dir + "/out --max-context 0"),
                     {"--max-context 0: the KV cache needs at least 1 slot; give a count from 1 to 10795"});
  expect_clean_error(run_cli("chat --timing-only --max-context many"),
                     {"--max-context 'many' is neither a count of tokens nor auto"});
  // The tiny model's largest cache is taken, and one slot past it is not.
  EXPECT_EQ(run_cli("compile --model synthetic:tiny --out " + dir + "/t --max-context 1564266").exit_code, 0);
  expect_clean_error(run_cli("compile --model synthetic:tiny --out " + dir + "/t --max-context 1564416"),
                     {"at most 1564266 tokens fit"});
}

TEST(CapacityErrors, ChatTurnPastTheMaxContextIsRefusedBeforeRunning) {
  const std::string dir = scratch_dir("capacity_chat");
  write_file(dir + "/turns.txt", "image: " + source_path("examples/photos/chelsea.png") + "\nWhat is in this photo?\n");
  CliResult r = run_cli("chat --model synthetic:tiny --timing-only --max-context 60 --script " + dir + "/turns.txt");
  expect_clean_error(r, {"turn 1: 0 cached tokens + 80 prompt tokens + 19 decode steps (for up to 20 answer tokens) "
                         "need 99 KV-cache slots, more than --max-context = 60; ask with fewer --tokens, start a new "
                         "conversation, or give a larger --max-context (at most 1564266 fit the DDR beside the weights)"});
  EXPECT_EQ(r.out.find("[turn 1"), std::string::npos) << "no run: " << r.out;
  // With room for it the same turn runs.
  EXPECT_EQ(run_cli("chat --model synthetic:tiny --timing-only --max-context 99 --script " + dir + "/turns.txt").exit_code,
            0);
}

TEST(CapacityErrors, ChatScriptErrorsNameTheLine) {
  const std::string dir = scratch_dir("capacity_script");
  write_file(dir + "/empty.txt", "# nothing\n\n");
  expect_clean_error(run_cli("chat --timing-only --script " + dir + "/empty.txt"),
                     {"holds no question (one question per line)"});
  write_file(dir + "/img.txt", "hello\nimage:\nwhat?\n");
  expect_clean_error(run_cli("chat --timing-only --script " + dir + "/img.txt"),
                     {"img.txt:2: 'image:' names no file (write 'image: FILE')"});
  write_file(dir + "/gone.txt", "image: " + dir + "/nope.png\nwhat?\n");
  expect_clean_error(run_cli("chat --timing-only --script " + dir + "/gone.txt"), {"gone.txt:1: image", "nope.png"});
  expect_clean_error(run_cli("chat --timing-only --negative-control stale-cache"),
                     {"--negative-control stale-cache needs a functional run"});
  expect_clean_error(run_cli("chat --model synthetic:tiny --negative-control zero --script " + dir + "/img.txt"),
                     {"--negative-control 'zero': unknown control for chat (use stale-cache or shifted-cache)"});
}

}  // namespace
}  // namespace gpnpu::errors_test
