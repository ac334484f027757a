// gpnpu sweep: a small sweep of the tiny model through the real CLI (one process per
// point), checked against its floors and for resumability; bad input; shards + merge.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "isa/error.h"
#include "isa/program.h"
#include "model/cli/driver_sweep.h"

namespace gpnpu::model {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

struct TempDir {
  fs::path dir;
  explicit TempDir(const std::string& name) {
    dir = fs::temp_directory_path() / ("gpnpu_test_sweep_" + name + "_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  std::string operator/(const std::string& f) const { return (dir / f).string(); }
};

struct Cli {
  int code;
  std::string output;  // stdout and stderr
};

Cli gpnpu(const std::string& args, const TempDir& tmp) {
  std::string log = tmp / "cli.log";
  std::string cmd = std::string(GPNPU_BINARY) + " " + args + " >" + log + " 2>&1";
  int st = std::system(cmd.c_str());
  std::ifstream in(log);
  std::stringstream ss;
  ss << in.rdbuf();
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, ss.str()};
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

size_t csv_rows(const std::string& path) {
  std::string s = slurp(path);
  size_t n = size_t(std::count(s.begin(), s.end(), '\n'));
  return n ? n - 1 : 0;
}

const std::string kSmall =
    "sweep --model synthetic:tiny --workload both --set ocm_bytes=4MiB,8MiB --set ddr_gbps=16,32,64";

// Acceptance 2: no point below its DDR (or compute) floor; decode and image cycles
// fall as the bandwidth rises, at every OCM size.
TEST(Sweep, SmallSweepRespectsTheFloorsAndGetsFasterWithBandwidth) {
  TempDir tmp("floors");
  Cli r = gpnpu(kSmall + " -j 2 --out " + (tmp / "s.h5"), tmp);
  ASSERT_EQ(r.code, 0) << r.output;
  SweepTable t = SweepTable::read(tmp / "s.h5");
  ASSERT_EQ(t.rows.size(), 6u);
  EXPECT_EQ(csv_rows(tmp / "s.csv"), 6u);
  for (const json& row : t.rows) {
    ASSERT_EQ(row.at("status"), "ok") << row.dump();
    for (const char* w : {"decode_", "image_"}) {
      const std::string p = w;
      double cycles = row.at(p + "cycles").get<double>();
      double ddr = row.at(p + "ddr_floor").get<double>(), compute = row.at(p + "compute_floor").get<double>();
      EXPECT_GT(ddr, 0.0) << row.dump();
      EXPECT_GE(cycles, ddr) << p << " below its DDR floor: " << row.dump();
      EXPECT_GE(cycles, compute) << p << " below its compute floor: " << row.dump();
    }
    // Decode streams the weights once: within 1.5x of the DDR floor (so the floor is not vacuous).
    EXPECT_LE(row.at("decode_cycles").get<double>(), 1.5 * row.at("decode_ddr_floor").get<double>());
    EXPECT_EQ(row.at("decode_bound"), "ddr");
  }
  // Rows are sorted by (ocm_bytes, ddr_gbps): within each OCM size, 16 < 32 < 64 GB/s.
  for (size_t o = 0; o < 2; ++o)
    for (size_t b = 1; b < 3; ++b) {
      const json& slow = t.rows[o * 3 + b - 1];
      const json& fast = t.rows[o * 3 + b];
      ASSERT_EQ(slow.at("ocm_bytes"), fast.at("ocm_bytes"));
      ASSERT_LT(slow.at("ddr_gbps").get<double>(), fast.at("ddr_gbps").get<double>());
      EXPECT_LT(fast.at("decode_cycles").get<uint64_t>(), slow.at("decode_cycles").get<uint64_t>()) << fast.dump();
      EXPECT_GT(fast.at("decode_tokens_per_s").get<double>(), slow.at("decode_tokens_per_s").get<double>());
      EXPECT_LE(fast.at("image_cycles").get<uint64_t>(), slow.at("image_cycles").get<uint64_t>()) << fast.dump();
    }
}

// Acceptance 3: a rerun computes nothing; a sweep killed midway and rerun gives the
// same bytes (HDF5 and CSV) as an uninterrupted run; so do merged shards.
TEST(Sweep, ResumableAfterAKillAndShardsMergeToTheSameFile) {
  TempDir tmp("resume");
  const std::string a = tmp / "a.h5", b = tmp / "b.h5";
  Cli r = gpnpu(kSmall + " -j 1 --out " + a, tmp);
  ASSERT_EQ(r.code, 0) << r.output;
  const std::string a_h5 = slurp(a), a_csv = slurp(tmp / "a.csv");
  ASSERT_EQ(csv_rows(tmp / "a.csv"), 6u);

  auto mtime = fs::last_write_time(a);
  r = gpnpu(kSmall + " -j 2 --out " + a, tmp);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("6 already in"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("0 to run"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("[1/"), std::string::npos) << "a rerun ran a point:\n" << r.output;
  EXPECT_EQ(fs::last_write_time(a), mtime) << "a rerun rewrote the file";

  // Kill (SIGKILL) the sweep once it has saved a point, before it has saved them all.
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::string cmd = std::string(GPNPU_BINARY) + " " + kSmall + " -j 1 --out " + b + " >/dev/null 2>&1";
    ::execl("/bin/sh", "sh", "-c", ("exec " + cmd).c_str(), (char*)nullptr);
    ::_exit(127);
  }
  size_t saved = 0;
  const auto t0 = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - t0 < std::chrono::seconds(60)) {
    if (fs::exists(tmp / "b.csv") && (saved = csv_rows(tmp / "b.csv")) >= 1) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ::kill(pid, SIGKILL);
  int st = 0;
  ::waitpid(pid, &st, 0);
  ASSERT_TRUE(WIFSIGNALED(st)) << "the sweep finished before it could be killed; the test needs a longer sweep";
  saved = SweepTable::read(b).rows.size();
  ASSERT_GE(saved, 1u);
  ASSERT_LT(saved, 6u);
  r = gpnpu(kSmall + " -j 2 --out " + b, tmp);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find(std::to_string(saved) + " already in"), std::string::npos) << r.output;
  EXPECT_EQ(slurp(b), a_h5) << "resumed HDF5 differs from the uninterrupted run";
  EXPECT_EQ(slurp(tmp / "b.csv"), a_csv) << "resumed CSV differs from the uninterrupted run";

  // Three shards, merged.
  std::string parts;
  for (int i = 0; i < 3; ++i) {
    std::string s = tmp / ("shard" + std::to_string(i) + ".h5");
    r = gpnpu(kSmall + " --shard " + std::to_string(i) + "/3 --out " + s, tmp);
    ASSERT_EQ(r.code, 0) << r.output;
    EXPECT_EQ(SweepTable::read(s).rows.size(), 2u);
    parts += " " + s;
  }
  // Control: a shard is not the whole sweep (the byte comparison can fail).
  EXPECT_NE(slurp(tmp / "shard0.h5"), a_h5);
  r = gpnpu("sweep-merge" + parts + " --out " + (tmp / "m.h5"), tmp);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(slurp(tmp / "m.h5"), a_h5) << "merged shards differ from the single run";
  EXPECT_EQ(slurp(tmp / "m.csv"), a_csv);

  // A different sweep into the same file is refused, and so is merging it.
  r = gpnpu("sweep --model synthetic:tiny --set ddr_gbps=16 --out " + a, tmp);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.output.find("holds a different sweep"), std::string::npos) << r.output;
  r = gpnpu("sweep --model synthetic:tiny --set ddr_gbps=16 --out " + (tmp / "other.h5"), tmp);
  ASSERT_EQ(r.code, 0) << r.output;
  r = gpnpu("sweep-merge " + a + " " + (tmp / "other.h5") + " --out " + (tmp / "bad.h5"), tmp);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.output.find("different sweep"), std::string::npos) << r.output;

  // Rows of another gpnpu build are not resumed: the file names its build.
  SweepTable t = SweepTable::read(b);
  ASSERT_TRUE(t.meta.contains("build"));
  const std::string ours = t.meta["build"];
  t.meta["build"] = "0123456789abcdef";
  t.write(b, tmp / "b.csv");
  r = gpnpu(kSmall + " --out " + b, tmp);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.output.find("holds a different sweep"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("gpnpu build 0123456789abcdef"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("gpnpu build " + ours), std::string::npos) << r.output;
}

// Acceptance 5: bad sweep input is a one-line error naming the key and the value,
// before any point runs and without touching the output file.
TEST(Sweep, BadInputGetsAClearError) {
  TempDir tmp("bad");
  const std::string out = " --out " + (tmp / "x.h5");
  struct Case {
    std::string args, expect;
  } cases[] = {
      {"--set ocm_byte=1MiB,2MiB", "unknown config key 'ocm_byte' (--set) (did you mean 'ocm_bytes'?)"},
      {"--set ocm_bytes=", "empty value list for 'ocm_bytes'"},
      {"--set ocm_bytes=1MiB,,2MiB", "empty value in the list for 'ocm_bytes'"},
      {"--set ddr_gbps=16,fast", "config key 'ddr_gbps' (--set): 'fast' is not a number"},
      {"--set ocm_bytes=1MiB,lots", "config key 'ocm_bytes' (--set): 'lots' is not a byte size"},
      {"--set ocm_bytes=1MiB,1048576", "'1MiB' and '1048576' are the same value of 'ocm_bytes'"},
      {"--set ddr_gbps=16 --set ddr_gbps=32", "key 'ddr_gbps' is swept twice"},
      {"--set ddr_gbps", "expected key=v1,v2,..."},
      {"--set ocm_bytes=1000,4MiB", "sweep point 'ocm_bytes=1000' is not a valid machine: config key 'ocm_bytes'"},
      {"--set ddr_gbps=16 --workload video", "--workload 'video': expected decode, image or both"},
      {"--set ddr_gbps=16 --shard 3/3", "--shard '3/3': expected i/n"},
      {"--set ddr_gbps=16 --model synthetic:huge", "--model 'synthetic:huge'"},
      {"--set ddr_gbps=16 -j 0", "--jobs: '0' is out of range: expected an integer from 1 to 1024"},
  };
  for (const Case& c : cases) {
    std::string model = c.args.find("--model") == std::string::npos ? " --model synthetic:tiny" : "";
    Cli r = gpnpu("sweep " + c.args + model + out, tmp);
    EXPECT_EQ(r.code, 1) << c.args << "\n" << r.output;
    EXPECT_NE(r.output.find("error: "), std::string::npos) << c.args << "\n" << r.output;
    EXPECT_NE(r.output.find(c.expect), std::string::npos) << c.args << ": expected '" << c.expect << "' in\n"
                                                          << r.output;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << "one line: " << r.output;
    EXPECT_FALSE(fs::exists(tmp / "x.h5")) << c.args;
  }
  // Not a sweep file: refused, and left alone.
  { std::ofstream(tmp / "x.h5") << "not hdf5"; }
  Cli r = gpnpu("sweep --model synthetic:tiny --set ddr_gbps=16" + out, tmp);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.output.find("is not an HDF5 file"), std::string::npos) << r.output;
  EXPECT_EQ(slurp(tmp / "x.h5"), "not hdf5");
}

// In-process: canonical values and the product order (first axis slowest).
TEST(Sweep, AxesAreCanonicalAndTheProductIsOrdered) {
  auto axes = parse_sweep_axes({"ocm_bytes=1MiB, 2097152", "ddr_gbps=16,32.5"}, "qc-u");
  ASSERT_EQ(axes.size(), 2u);
  EXPECT_EQ(axes[0].canonical, (std::vector<std::string>{"1048576", "2097152"}));
  EXPECT_EQ(axes[1].canonical, (std::vector<std::string>{"16", "32.5"}));
  EXPECT_TRUE(axes[1].real);
  auto pts = sweep_points(axes);
  ASSERT_EQ(pts.size(), 4u);
  EXPECT_EQ(pts[1], (std::vector<std::string>{"ocm_bytes=1048576", "ddr_gbps=32.5"}));
  EXPECT_EQ(pts[2], (std::vector<std::string>{"ocm_bytes=2097152", "ddr_gbps=16"}));
  EXPECT_THROW(parse_sweep_axes({}, "qc-u"), Error);
  EXPECT_EQ(sweep_csv_path("a/r.h5"), "a/r.csv");
  EXPECT_EQ(sweep_csv_path("r.hdf"), "r.hdf.csv");
}

// `gpnpu compile --prefill` forces the streamed prefill's arrangement (docs/performance.md
// compares both this way); the plan line names it, and the next one gives its estimate; a value
// outside the three is refused.
TEST(CompileCli, PrefillArrangementIsForcedAndNamed) {
  TempDir tmp("prefill");
  const Cli phases = gpnpu("compile --model synthetic:tiny --prefill phases --out " + (tmp / "p"), tmp);
  EXPECT_EQ(phases.code, 0) << phases.output;
  EXPECT_NE(phases.output.find("(qkv|MLP phases; the attention reads q, k and v in the q|k|v rows); copies"),
            std::string::npos)
      << phases.output;
  // A streamed plan's line says the cost model's estimate (the resident default's has none).
  EXPECT_NE(phases.output.find("image plan estimate: "), std::string::npos) << phases.output;
  const Cli plain = gpnpu("compile --model synthetic:tiny --out " + (tmp / "d"), tmp);
  EXPECT_EQ(plain.code, 0) << plain.output;
  EXPECT_EQ(plain.output.find("image plan estimate"), std::string::npos) << plain.output;
  const Cli layers = gpnpu("compile --model synthetic:tiny --prefill layers --out " + (tmp / "l"), tmp);
  EXPECT_EQ(layers.code, 0) << layers.output;
  EXPECT_NE(layers.output.find("(whole layers)"), std::string::npos) << layers.output;
  const Cli bad = gpnpu("compile --model synthetic:tiny --prefill fused --out " + (tmp / "b"), tmp);
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.output.find("--prefill"), std::string::npos) << bad.output;
}

// `gpnpu compile` writes the programs, not their listings (the 2B image program's is 100-330 MB);
// `--asm` adds them, and each listing assembles back to its binary word for word.
TEST(CompileCli, AssemblyListingsOnlyWithAsm) {
  TempDir tmp("asm");
  const Cli plain = gpnpu("compile --model synthetic:tiny --out " + (tmp / "p"), tmp);
  ASSERT_EQ(plain.code, 0) << plain.output;
  EXPECT_TRUE(std::filesystem::exists(tmp / "p/image.bin"));
  EXPECT_FALSE(std::filesystem::exists(tmp / "p/image.s"));
  EXPECT_FALSE(std::filesystem::exists(tmp / "p/decode.s"));
  const Cli listed = gpnpu("compile --model synthetic:tiny --asm --out " + (tmp / "a"), tmp);
  ASSERT_EQ(listed.code, 0) << listed.output;
  for (const char* prog : {"image", "decode"}) {
    const std::string s = tmp / ("a/" + std::string(prog) + ".s"), bin = tmp / ("a/" + std::string(prog) + ".bin");
    ASSERT_TRUE(std::filesystem::exists(s)) << s;
    EXPECT_EQ(slurp(bin), slurp(tmp / ("p/" + std::string(prog) + ".bin"))) << prog;
    const Cli re = gpnpu("asm " + s + " -o " + (tmp / "re.bin"), tmp);
    ASSERT_EQ(re.code, 0) << re.output;
    EXPECT_EQ(isa::Program::read_binary(tmp / "re.bin").words, isa::Program::read_binary(bin).words) << prog;
  }
}

}  // namespace
}  // namespace gpnpu::model
