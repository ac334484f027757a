// Results are never half-written (issue 8): every output file of the CLI is
// written under a temporary name and renamed when complete (isa/atomic_file.h).
// Two ways to fail a write are tested for each writer:
//  - the directory does not exist: a clean one-line error naming the path;
//  - the disk "fills up" part-way: bash's `ulimit -f` caps the file size (with
//    SIGXFSZ ignored, a write past it fails with EFBIG). The command must fail
//    cleanly, leave no file under the target name and no temporary, and leave an
//    existing file of that name untouched.
// Each case first checks that the output, written without a limit, is larger than
// the limit, so the limited run really fails part-way (the negative control).
// The same holds for the trace writers (--trace text and .gtrc, --vcd, --timeline)
// and `gpnpu sweep --out`. A target that is not a regular file (/dev/null, /dev/full,
// /proc/self/fd/1, a link to one) is written in place, never replaced by a rename.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "errors_util.h"

namespace gpnpu::errors_test {
namespace {

// 1 KiB: bash's ulimit -f counts 1024-byte blocks.
constexpr const char* kLimit1K = "trap '' XFSZ; ulimit -f 1;";
constexpr const char* kLimit1M = "trap '' XFSZ; ulimit -f 1024;";

struct Writer {
  const char* name;
  std::string args;     // writes `target`
  std::string target;   // the output file
  const char* limit;    // ulimit prefix that makes the write fail part-way
  size_t limit_bytes;
  bool progress = false;  // stderr holds progress lines before the error line (sweep)
};

// A program of 300 instructions (2.4 KB as a binary, well over 1 KiB).
std::string big_program() {
  std::string s = "mark.begin \"body\"\n";
  for (int k = 0; k < 300; ++k) s += fmt::format("addi x1, x1, {}\n", k);
  return s + "mark.end \"body\"\nhalt\n";
}

void check_failed_write(const Writer& w, const std::string& dir) {
  SCOPED_TRACE(w.name);
  // Control: without the limit the command succeeds and writes more than the limit.
  CliResult ok = run_cli(w.args);
  ASSERT_EQ(ok.exit_code, 0) << ok.err;
  ASSERT_TRUE(fs::exists(w.target));
  ASSERT_GT(fs::file_size(w.target), w.limit_bytes) << "the output is too small to hit the limit";
  fs::remove(w.target);
  std::vector<std::string> before = list_dir(dir);

  // No file at all before: none after.
  CliResult r = run_cli(w.args, w.limit);
  if (w.progress && r.err.size() > 1) {  // keep the last line: the error
    size_t nl = r.err.rfind('\n', r.err.size() - 2);
    if (nl != std::string::npos) r.err = r.err.substr(nl + 1);
  }
  expect_clean_error(r, {});
  EXPECT_TRUE(r.err.find("File too large") != std::string::npos || r.err.find("disk full") != std::string::npos)
      << r.err;
  EXPECT_FALSE(fs::exists(w.target)) << "a partial " << w.target << " was left behind";
  EXPECT_EQ(list_dir(dir), before) << "a temporary file was left behind";

  // An existing file keeps its content.
  {
    write_file(w.target, "OLD");
    r = run_cli(w.args, w.limit);
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_EQ(read_file(w.target), "OLD");
    fs::remove(w.target);
  }
}

TEST(OutputFiles, FailedWritesLeaveNoPartialFile) {
  std::string dir = scratch_dir("failed_writes");
  std::string prog = dir + "/big.s";
  write_file(prog, big_program());
  std::string bin = dir + "/p.bin";
  std::string photo = source_path("tests/model/data/image_photo_256.png");
  std::string ck = dir + "/ck";
  // A tiny checkpoint to quantise (sparse zeros: fast to make and to read).
  ASSERT_EQ(run_cli("make-checkpoint --config tiny --no-data --out " + ck).exit_code, 0);
  const Writer writers[] = {
      {"asm -o", "asm " + prog + " -o " + bin, bin, kLimit1K, 1024},
      {"run --stats-json", "run -q " + prog + " --preset mini --stats-json " + dir + "/s.json", dir + "/s.json", kLimit1K,
       1024},
      {"run --stats-h5", "run -q " + prog + " --preset mini --stats-h5 " + dir + "/s.h5", dir + "/s.h5", kLimit1K, 1024},
      {"preprocess --out", "preprocess --image " + photo + " --out " + dir + "/patches.bin", dir + "/patches.bin",
       kLimit1K, 1024},
      {"preprocess --resized-png", "preprocess --image " + photo + " --resized-png " + dir + "/r.png", dir + "/r.png",
       kLimit1K, 1024},
      {"quantize --out", "quantize --model " + ck + " --out " + dir + "/bundle.safetensors",
       dir + "/bundle.safetensors", kLimit1M, 1 << 20},
  };
  for (const Writer& w : writers) check_failed_write(w, dir);
}

TEST(OutputFiles, FailedTraceAndSweepWritesLeaveNoPartialFile) {
  std::string dir = scratch_dir("failed_trace_writes");
  std::string prog = dir + "/big.s";
  write_file(prog, big_program());
  const std::string run = "run -q " + prog + " --preset mini ";
  const Writer writers[] = {
      {"--trace (text)", run + "--trace " + dir + "/t.txt", dir + "/t.txt", kLimit1K, 1024},
      {"--trace (.gtrc)", run + "--trace " + dir + "/t.gtrc", dir + "/t.gtrc", kLimit1K, 1024},
      {"--vcd", run + "--vcd " + dir + "/t.vcd", dir + "/t.vcd", kLimit1K, 1024},
      {"--timeline", run + "--timeline " + dir + "/t.json", dir + "/t.json", kLimit1K, 1024},
      // One point of the tiny model; the HDF5 file is written first and fails.
      {"sweep --out", "sweep --model synthetic:tiny --set ddr_gbps=16 --out " + dir + "/s.h5", dir + "/s.h5",
       kLimit1K, 1024, true},
  };
  for (const Writer& w : writers) {
    check_failed_write(w, dir);
    fs::remove(dir + "/s.csv");  // the sweep's CSV (written beside s.h5 by the control run)
  }
}

TEST(OutputFiles, TraceAndSweepMissingDirectoryIsACleanError) {
  std::string prog = source_path("tests/traces/programs/dma_mac.s");
  const std::string nowhere = "/nonexistent/dir";
  struct Case {
    std::string args;
    std::string want;
  };
  const Case cases[] = {
      {"run " + prog + " --trace " + nowhere + "/t.txt",
       "cannot write '/nonexistent/dir/t.txt': No such file or directory (check that the directory exists"},
      {"run " + prog + " --trace " + nowhere + "/t.gtrc",
       "cannot write '/nonexistent/dir/t.gtrc': No such file or directory"},
      // SystemC used to abort the process (an sc_report from inside sc_start).
      {"run " + prog + " --vcd " + nowhere + "/t.vcd", "cannot write '/nonexistent/dir/t.vcd': No such file or directory"},
      {"run " + prog + " --timeline " + nowhere + "/t.json",
       "cannot write '/nonexistent/dir/t.json': No such file or directory"},
      // Before any point runs (one stderr line: not even the sweep's plan).
      {"sweep --model synthetic:tiny --set ddr_gbps=16 --out " + nowhere + "/s.h5",
       "cannot write '/nonexistent/dir/s.h5': No such file or directory (check that the directory exists and is "
       "writable)"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.args);
    expect_clean_error(run_cli(c.args), {c.want});
  }
  EXPECT_FALSE(fs::exists(nowhere));
}

// Regression: a target that exists and is not a regular file used to get a
// temporary beside it and a rename over it. As root, `--stats-json /dev/full`
// replaced the device node /dev/full with a regular file (and `-o /dev/null`
// would have replaced /dev/null). Links in a scratch directory stand in for the
// devices here, so a regression replaces a link of ours, not a device.
TEST(OutputFiles, DeviceTargetsAreWrittenInPlace) {
  std::string dir = scratch_dir("device_targets");
  std::string prog = source_path("tests/traces/programs/dma_mac.s");
  const std::string null = dir + "/null", null_gtrc = dir + "/null.gtrc", full = dir + "/full",
                    full_gtrc = dir + "/full.gtrc";
  fs::create_symlink("/dev/null", null);
  fs::create_symlink("/dev/null", null_gtrc);
  fs::create_symlink("/dev/full", full);
  fs::create_symlink("/dev/full", full_gtrc);
  const std::vector<std::string> links = list_dir(dir);
  auto links_intact = [&] {
    EXPECT_EQ(list_dir(dir), links) << "a file or temporary was left beside the links";
    for (const std::string& l : {null, null_gtrc, full, full_gtrc}) {
      EXPECT_TRUE(fs::is_symlink(l)) << l << " was replaced";
      EXPECT_TRUE(fs::is_character_file(l)) << l;
    }
  };
  const std::string run = "run -q " + prog + " ";
  // Each option writes its file to `{}`.
  const std::string writers[] = {
      "asm " + prog + " -o {}",    run + "--stats-json {}", run + "--stats-h5 {}", run + "--trace {}",
      run + "--vcd {}",            run + "--timeline {}",
  };
  for (const std::string& w : writers) {
    bool trace = w.find("--trace") != std::string::npos;
    std::string to_null = fmt::format(fmt::runtime(w), trace ? null_gtrc : null);
    SCOPED_TRACE(to_null);
    CliResult r = run_cli(to_null);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.err, "");
    links_intact();
    // /dev/full: every write fails with ENOSPC.
    std::string to_full = fmt::format(fmt::runtime(w), trace ? full_gtrc : full);
    SCOPED_TRACE(to_full);
    expect_clean_error(run_cli(to_full), {"No space left on device"});
    links_intact();
  }
  // The text trace too (the name picks the form).
  expect_clean_error(run_cli(run + "--trace " + full), {"cannot write trace '" + full + "': No space left on device"});
  links_intact();

  // /proc/self/fd/1 is the process's stdout: the report goes there.
  CliResult r = run_cli(run + "--stats-json /proc/self/fd/1");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(r.out.starts_with("{")) << r.out;
  EXPECT_NE(r.out.find("\"cycles\""), std::string::npos) << r.out;

  // A link to a regular file stays a link; the file it points to gets the report.
  const std::string real = dir + "/real.json", link = dir + "/link.json";
  write_file(real, "OLD");
  fs::create_symlink(real, link);
  r = run_cli(run + "--stats-json " + link);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_TRUE(read_file(real).starts_with("{")) << read_file(real);
  fs::remove(link);
  fs::remove(real);
  links_intact();
}

// One failing trace writer does not stop the others: each writes its file or
// removes its temporary (the VCD used to be left to the process's exit).
TEST(OutputFiles, EveryTraceWriterFinishesWhenOneFails) {
  std::string dir = scratch_dir("one_writer_fails");
  fs::create_symlink("/dev/full", dir + "/full");
  std::string prog = source_path("tests/traces/programs/dma_mac.s");
  CliResult r = run_cli("run -q " + prog + " --trace " + dir + "/full --timeline " + dir + "/t.json --vcd " + dir +
                        "/t.vcd");
  expect_clean_error(r, {"cannot write trace '" + dir + "/full': No space left on device"});
  EXPECT_EQ(list_dir(dir), (std::vector<std::string>{"full", "t.json", "t.vcd"}));
  EXPECT_TRUE(read_file(dir + "/t.json").starts_with("{")) << read_file(dir + "/t.json").substr(0, 100);
  EXPECT_NE(read_file(dir + "/t.vcd").find("$enddefinitions"), std::string::npos);
}

TEST(OutputFiles, FailedCheckpointWriteLeavesNoPartialSafetensors) {
  std::string dir = scratch_dir("failed_checkpoint");
  std::string ck = dir + "/ck";
  CliResult r = run_cli("make-checkpoint --config tiny --out " + ck, kLimit1M);
  expect_clean_error(r, {"model.safetensors"});
  EXPECT_FALSE(fs::exists(ck + "/model.safetensors")) << "a partial checkpoint was left behind";
  for (const std::string& n : list_dir(ck)) EXPECT_EQ(n.find(".tmp"), std::string::npos) << n;
  // Control: the same command without the limit writes a checkpoint over 1 MiB.
  fs::remove_all(ck);
  ASSERT_EQ(run_cli("make-checkpoint --config tiny --no-data --out " + ck).exit_code, 0);
  EXPECT_GT(fs::file_size(ck + "/model.safetensors"), uintmax_t(1) << 20);
}

TEST(OutputFiles, MissingDirectoryIsACleanError) {
  std::string dir = scratch_dir("missing_dir");
  std::string prog = source_path("examples/asm/mac_peak.s");
  std::string photo = source_path("tests/model/data/image_photo_256.png");
  const std::string nowhere = "/nonexistent/dir";
  std::string ck = dir + "/ck";
  ASSERT_EQ(run_cli("make-checkpoint --config tiny --no-data --out " + ck).exit_code, 0);
  struct Case {
    std::string args;
    std::string want;
  };
  const Case cases[] = {
      {"run " + prog + " --stats-json " + nowhere + "/s.json",
       "cannot write '/nonexistent/dir/s.json': No such file or directory"},
      {"run " + prog + " --stats-h5 " + nowhere + "/s.h5",
       "cannot write '/nonexistent/dir/s.h5': No such file or directory"},
      {"asm " + prog + " -o " + nowhere + "/p.bin", "cannot write '/nonexistent/dir/p.bin': No such file or directory"},
      {"preprocess --image " + photo + " --out " + nowhere + "/p.bin", "cannot write '/nonexistent/dir/p.bin'"},
      {"preprocess --image " + photo + " --resized-png " + nowhere + "/r.png", "cannot write '/nonexistent/dir/r.png'"},
      {"make-checkpoint --config tiny --no-data --out /dev/null/ck",
       "--out '/dev/null/ck': cannot create the directory: '/dev/null' is a character device, not a directory"},
      {"quantize --model " + ck + " --out " + nowhere + "/b.safetensors",
       "cannot write '/nonexistent/dir/b.safetensors': No such file or directory"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.args);
    expect_clean_error(run_cli(c.args), {c.want});
  }
  EXPECT_FALSE(fs::exists(nowhere));
}

}  // namespace
}  // namespace gpnpu::errors_test
