// Bad input that a newcomer meets first (issue 20; docs/errors.md, "A newcomer's
// first hour"): a filter that would filter nothing, a prompt longer than the
// machine's scalar memory holds, a malformed --size, and the sweep plotter under a
// Python without Debian's modules. Each is one clean "error: ..." line, before any
// work is done.
#include <gtest/gtest.h>

#include <string>

#include "errors_util.h"

namespace gpnpu::errors_test {
namespace {

TEST(NewcomerErrors, TraceFilterThatAppliesToNothingIsRefused) {
  std::string dir = scratch_dir("newcomer_filter");
  write_file(dir + "/p.s", "mark.begin \"k\"\nli x1, 1\nmark.end \"k\"\nhalt\n");
  expect_clean_error(run_cli("run " + dir + "/p.s --trace-filter mark=k"),
                     {"--trace-filter 'mark=k' applies to nothing: it filters --trace and --timeline"});
  expect_clean_error(run_cli("run " + dir + "/p.s --vcd " + dir + "/t.vcd --trace-filter pc=0:2"),
                     {"--trace-filter 'pc=0:2' applies to nothing"});
  expect_clean_error(run_cli("run " + dir + "/p.s --timeline " + dir + "/t.json --trace-filter every=2"),
                     {"--trace-filter 'every=2': every= and pe= apply to the instruction trace only (--trace)"});
  EXPECT_FALSE(fs::exists(dir + "/t.json"));
  // The same filters are taken where they apply.
  EXPECT_EQ(run_cli("run " + dir + "/p.s -q --timeline " + dir + "/t.json --trace-filter mark=k").exit_code, 0);
  EXPECT_EQ(run_cli("run " + dir + "/p.s -q --trace " + dir + "/t.txt --trace-filter every=2").exit_code, 0);
}

TEST(NewcomerErrors, PromptLongerThanScalarMemoryIsRefusedUpFront) {
  std::string words;
  for (int i = 0; i < 3100; ++i) words += " a";
  CliResult r = run_cli("describe --timing-only --prompt '" + words + "'");
  expect_clean_error(r, {"the prompt is 3", "tokens (64 of them image tokens), more than the 3072 this machine's "
                         "scalar memory holds (smem_bytes 16384, the ids from byte 4096)", "or --set smem_bytes="});
  EXPECT_EQ(r.out.find("compiling"), std::string::npos) << r.out;
  // A machine with more scalar memory takes it (the tiny model: a short run).
  r = run_cli("describe --model synthetic:tiny --timing-only --tokens 1 --set smem_bytes=32KiB --prompt '" + words + "'");
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

TEST(NewcomerErrors, DescribeSizeMustBeWxHOrAuto) {
  expect_clean_error(run_cli("describe --timing-only --size 0x0"),
                     {"--size '0x0' (WxH in pixels, or 'auto'): '0' is out of range: expected an integer from 1 to 65536"});
  expect_clean_error(run_cli("describe --timing-only --size big"), {"--size 'big' is not WxH in pixels, or 'auto'"});
}

TEST(NewcomerErrors, PlotSweepWithoutDebiansModulesSaysWhatToDo) {
  // -S: no site packages, so h5py is missing from this very Python (/usr/bin/python3
  // itself: nothing to run again with).
  std::string dir = scratch_dir("newcomer_plot");
  std::string cmd = "/usr/bin/python3 -S " + source_path("scripts/plot_sweep.py") + " " +
                    source_path("docs/sweeps/example.h5") + " --out-dir " + dir + " >" + dir + "/out 2>" + dir + "/err";
  int status = std::system(cmd.c_str());
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << status;
  std::string err = read_file(dir + "/err");
  EXPECT_EQ(err, "error: plot_sweep.py needs the Python module 'h5py': run it with /usr/bin/python3 and Debian's "
                 "python3-h5py, python3-matplotlib and python3-numpy (scripts/install-deps.sh installs them)\n");
  EXPECT_TRUE(list_dir(dir) == std::vector<std::string>({"err", "out"}));
}

}  // namespace
}  // namespace gpnpu::errors_test
