// Bad input, second round (issue 19): the rules of isa/io_rules.h through the CLI.
//  - IssueExamples: every example of the issue gives a clear error with exit 1
//    (or, for TMPDIR, the correct result).
//  - EveryPathArgument: each subcommand with a directory, /dev/null, /dev/zero and
//    a FIFO as each of its path arguments, under a time and memory limit: an input
//    is refused with exit 1, exactly one `error:` line and no crash; an output takes
//    /dev/null and /dev/zero as sinks (exit 0) and refuses a directory and a FIFO
//    (an output directory the other way round).
//  - SameOutputPaths: two outputs of one command on the same path, or an output on
//    an input: exit 1 before any work (nothing on stdout, the input unchanged).
//  - SigintLeavesNoTemporary: SIGINT during make-checkpoint, a first describe and a
//    traced run leaves no temporary; stale ones of a dead process are swept.
// Commands run two at a time (the CI machine has 2 cores).
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <sstream>
#include <fmt/format.h>
#include <future>
#include <nlohmann/json.hpp>
#include <thread>

#include "errors_util.h"
#include "isa/io_rules.h"

namespace gpnpu::errors_test {
namespace {

using io::file_kind;

// Every command runs under these limits: 120 s (a loaded CI machine runs matplotlib slowly), 4 GiB of
// address space, no core file.
constexpr const char* kLimits = "ulimit -c 0; ulimit -v 4194304; exec timeout -s KILL 120";

struct Outcome {
  int code = -1;  // exit code; 128+N for a signal (bash), 137 for the timeout's KILL
  std::string out, err;
  double seconds = 0;
};

Outcome run(const std::string& args, const std::string& env = "") {
  static std::atomic<int> counter{0};
  const std::string dir = (fs::temp_directory_path() / ("gpnpu_badinput_cli_" + std::to_string(::getpid()))).string();
  fs::create_directories(dir);
  const std::string n = std::to_string(counter++);
  const std::string out = dir + "/out" + n, err = dir + "/err" + n, script = dir + "/cmd" + n + ".sh";
  write_file(script, fmt::format("{} {} env {} {} {} >{} 2>{}\n", "cd " + dir + ";", kLimits, env, GPNPU_BINARY, args,
                                 out, err));
  auto t0 = std::chrono::steady_clock::now();
  int status = std::system(("bash " + script).c_str());
  Outcome r;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = read_file(out);
  r.err = read_file(err);
  return r;
}

// Runs the commands two at a time; results in order.
std::vector<Outcome> run_all(const std::vector<std::string>& cmds) {
  std::vector<Outcome> res(cmds.size());
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t k; (k = next++) < cmds.size();) res[k] = run(cmds[k]);
  };
  std::thread a(worker), b(worker);
  a.join();
  b.join();
  return res;
}

int error_lines(const std::string& err) {
  int n = 0;
  std::istringstream in(err);
  for (std::string line; std::getline(in, line);) n += line.starts_with("error: ");
  return n;
}

// Exit 1, exactly one `error:` line holding every `want`, no crash report.
void expect_error(const Outcome& r, const std::vector<std::string>& want) {
  EXPECT_EQ(r.code, 1) << "stderr: " << r.err;
  EXPECT_EQ(error_lines(r.err), 1) << r.err;
  for (const char* bad : {"terminate called", "Aborted", "core dumped", "Sanitizer", "HDF5-DIAG", "Fatal"})
    EXPECT_EQ(r.err.find(bad), std::string::npos) << r.err;
  for (const std::string& w : want) EXPECT_NE(r.err.find(w), std::string::npos) << "missing '" << w << "' in: " << r.err;
}

// Fixtures shared by the tests of this file: made once per process.
struct Fixture {
  std::string dir, prog, loop, trace, ckpt, bundle, sweep, png, fifo, empty_dir, cmds;
  // The null and zero devices to give as OUTPUTS: as root, nodes of this scratch
  // directory (the same devices, 1:3 and 1:5), so that a bug that renames over its
  // output replaces them, not the machine's /dev/null; else /dev/null and /dev/zero.
  std::string null_out, zero_out;
};

const Fixture& fixture() {
  static Fixture f = [] {
    Fixture x;
    x.dir = scratch_dir("badinput");
    x.prog = x.dir + "/p.s";
    write_file(x.prog, "li x1, 3\nmark.begin \"k\"\naddi x1, x1, 1\nmark.end \"k\"\nhalt\n");
    x.loop = x.dir + "/loop.s";
    write_file(x.loop, "li x1, 1\nspin: bne x1, x0, spin\nhalt\n");
    x.trace = x.dir + "/t.txt";
    x.ckpt = x.dir + "/ck";
    x.bundle = x.dir + "/b.safetensors";
    x.sweep = x.dir + "/s.h5";
    x.png = source_path("tests/model/data/image_photo_256.png");
    x.fifo = x.dir + "/fifo";
    x.empty_dir = x.dir + "/empty";
    x.cmds = x.dir + "/cmds";
    write_file(x.cmds, "quit\n");
    fs::create_directories(x.empty_dir);
    EXPECT_EQ(::mkfifo(x.fifo.c_str(), 0644), 0);
    x.null_out = x.dir + "/null";
    x.zero_out = x.dir + "/zero";
    if (::mknod(x.null_out.c_str(), S_IFCHR | 0666, makedev(1, 3)) != 0) x.null_out = "/dev/null";
    if (::mknod(x.zero_out.c_str(), S_IFCHR | 0666, makedev(1, 5)) != 0) x.zero_out = "/dev/zero";
    std::vector<Outcome> r = run_all({"run -q " + x.prog + " --trace " + x.trace,
                                  "make-checkpoint --config tiny --seed 1 --out " + x.ckpt});
    for (const Outcome& k : r) EXPECT_EQ(k.code, 0) << k.err;
    r = run_all({"quantize --model " + x.ckpt + " --out " + x.bundle,
                 "sweep --model synthetic:tiny --set ddr_gbps=16 --out " + x.sweep});
    for (const Outcome& k : r) EXPECT_EQ(k.code, 0) << k.err;
    return x;
  }();
  return f;
}

TEST(BadInput, IssueExamples) {
  const Fixture& f = fixture();
  const std::string d = scratch_dir("examples");
  const std::string photo_dir = d + "/photo.png";
  fs::create_directories(photo_dir);
  write_file(d + "/file", "x");
  write_file(d + "/x.s", "halt\n");
  const std::string x_s_before = read_file(d + "/x.s");
  write_file(d + "/bom.s", "\xEF\xBB\xBFli x1, 1\nhalt\n");
  write_file(d + "/zw.s", "li x1, 1\n\xE2\x80\x8Bhalt\n");
  write_file(d + "/label.s", "caf\xC3\xA9: li x1, 1\nhalt\n");
  write_file(d + "/nul.s", std::string("li x1, 1\nha\0lt\n", 15));
  std::string bin = read_file(f.dir + "/p.s");
  // A valid binary with one magic byte flipped.
  ASSERT_EQ(run("asm " + f.prog + " -o " + d + "/ok.bin").code, 0);
  bin = read_file(d + "/ok.bin");
  bin[7] = 'X';
  write_file(d + "/flipped.bin", bin);
  // A DMA descriptor of 2^31 rows (stride 0: one run per row) from DDR to OCM.
  write_file(d + "/dma.s",
             "li x1, 0xE0000000\nsw x1, 4(x0)\nli x1, 64\nsw x1, 8(x0)\nli x1, 0x80000000\nsw x1, 12(x0)\n"
             "li x1, 1\nsw x1, 24(x0)\ndma.start c0, x0\ndma.waitall\nhalt\n");
  fs::create_directories(d + "/some.cfg");
  write_file(d + "/nbsp.cfg", "pe_rows = 8\nocm_bytes\xC2\xA0= 1MiB\n");
  write_file(d + "/big.cfg", "");
  fs::resize_file(d + "/big.cfg", 2 << 20);  // sparse: 2 MiB of zeros, over the 1 MiB a preset can be
  // A bundle with a NaN scale: the first fp16 of the first *.scales tensor.
  std::string b = read_file(f.bundle);
  uint64_t hlen;
  std::memcpy(&hlen, b.data(), 8);
  nlohmann::json h = nlohmann::json::parse(b.substr(8, hlen));
  std::string scales;
  for (auto it = h.begin(); it != h.end(); ++it)
    if (it.key().ends_with(".scales") && scales.empty()) {
      scales = it.key();
      size_t at = 8 + hlen + it.value()["data_offsets"][0].get<size_t>();
      b[at] = 0x00;
      b[at + 1] = 0x7e;  // fp16 NaN
    }
  ASSERT_FALSE(scales.empty());
  write_file(d + "/nan.safetensors", b);

  struct Case {
    const char* name;
    std::string args;
    std::vector<std::string> want;
  };
  const std::string tiny = " --model synthetic:tiny --timing-only --tokens 2 --cache-dir " + d + "/cache";
  std::vector<Case> cases = {
      // crashes
      {"run DIR", "run " + d, {"program '" + d + "' is a directory"}},
      {"disasm DIR", "disasm " + d, {"is a directory"}},
      {"debug DIR", "debug " + d + " --commands " + f.cmds, {"is a directory"}},
      {"--image DIR.png", "preprocess --image " + photo_dir, {"image '" + photo_dir + "' is a directory"}},
      {"--image /dev/zero", "preprocess --image /dev/zero", {"'/dev/zero' is a character device"}},
      {"compile --out FILE", "compile --model synthetic:tiny --out " + d + "/file", {"is a regular file, not a directory"}},
      // hangs
      {"DMA of 2^31 rows", "run " + d + "/dma.s --set max_cycles=100000000",
       {"dma.start c0", "rows 2147483648", "past max_cycles = 100000000"}},
      {"disasm /dev/zero", "disasm /dev/zero", {"character device"}},
      {"config --preset /dev/zero", "config --preset /dev/zero", {"preset '/dev/zero' is a character device"}},
      // silently wrong
      {"asm x.s -o x.s", "asm " + d + "/x.s -o " + d + "/x.s", {"is the input"}},
      {"quantize onto its own model", "quantize --model " + f.ckpt + " --out " + f.ckpt + "/model.safetensors",
       {"--out", "is the input --model's file"}},
      {"--report-json X --report-html X", "describe" + tiny + " --report-json " + d + "/r --report-html " + d + "/r",
       {"--report-json and --report-html are the same file"}},
      {"--trace X --timeline X", "run " + f.prog + " --trace " + d + "/t --timeline " + d + "/t",
       {"--trace and --timeline are the same file"}},
      {"--stats-json X --stats-h5 X", "run " + f.prog + " --stats-json " + d + "/s --stats-h5 " + d + "/s",
       {"--stats-json and --stats-h5 are the same file"}},
      {"preprocess --out p --resized-png p", "preprocess --image " + f.png + " --out " + d + "/p --resized-png " + d + "/p",
       {"--out and --resized-png are the same file"}},
      {"trace-diff DIR DIR", "trace-diff " + d + " " + d, {"trace '" + d + "' is a directory"}},
      {"--preset some.cfg/", "config --preset " + d + "/some.cfg/", {"is a directory"}},
      {"clock_ghz=1e-9 --vcd", "run " + f.prog + " --set clock_ghz=1e-9 --vcd " + d + "/v.vcd",
       {"SystemC's time range", "clock_ghz"}},
      {"--negative-control with --timing-only", "describe" + tiny + " --negative-control zero",
       {"--negative-control zero needs a functional run"}},
      {"--max-pixels 0", "preprocess --image " + f.png + " --max-pixels 0", {"--max-pixels", "'0' is out of range"}},
      // unclear
      {"BOM", "asm " + d + "/bom.s -o " + d + "/o.bin", {"bom.s:1:1: invisible character U+FEFF (BYTE ORDER MARK)"}},
      {"zero-width space", "run " + d + "/zw.s", {"zw.s:2:1: invisible character U+200B (ZERO WIDTH SPACE)"}},
      {"Unicode label", "asm " + d + "/label.s -o " + d + "/o.bin", {"label.s:1:4: non-ASCII character U+00E9"}},
      {"NUL byte", "asm " + d + "/nul.s -o " + d + "/o.bin", {"nul.s:2:3: NUL byte (U+0000)"}},
      {"flipped magic", "disasm " + d + "/flipped.bin", {"starts like a gpnpu program binary", "GPNPUBIX"}},
      {"--tokens 99999999999999999999", "describe" + tiny + " --tokens 99999999999999999999",
       {"--tokens", "'99999999999999999999' is out of range: expected an integer from 1 to 4096"}},
      {"--size 99999999999999999999x32", "preprocess --image " + f.png + " --size 99999999999999999999x32",
       {"'99999999999999999999' is out of range"}},
      {"--report-html DIR", "describe" + tiny + " --report-html " + d, {"--report-html '" + d + "' is a directory"}},
      {"NaN scale in a bundle", "describe --timing-only --tokens 2 --model " + d + "/nan.safetensors",
       {"tensor '" + scales + "' holds NaN at element 0"}},
      {"--trace-filter pe=1024", "run " + f.prog + " --trace " + d + "/t2 --trace-filter pe=1024",
       {"pe=1024 does not exist: the array has 1024 PEs"}},
      {"sweep --out x.csv", "sweep --model synthetic:tiny --set ddr_gbps=16 --out " + d + "/x.csv",
       {"name it '" + d + "/x.h5'"}},
      // the same rules, beyond the issue's examples
      {"no-break space in a preset", "config --preset " + d + "/nbsp.cfg",
       {"nbsp.cfg:2:10: invisible character U+00A0 (NO-BREAK SPACE)"}},
      {"a 2 MiB preset", "config --preset " + d + "/big.cfg", {"is 2097152 bytes, more than the 1 MiB a preset can be"}},
      {"an unknown option", "run " + f.prog + " --foo", {"--foo", "(run with --help for the options)"}},
  };
  std::vector<std::string> cmds;
  for (const Case& c : cases) cmds.push_back(c.args);
  std::vector<Outcome> res = run_all(cmds);
  for (size_t k = 0; k < cases.size(); ++k) {
    SCOPED_TRACE(cases[k].name);
    expect_error(res[k], cases[k].want);
    EXPECT_LT(res[k].seconds, 60) << "took too long";
  }
  EXPECT_EQ(read_file(d + "/x.s"), x_s_before) << "asm overwrote its source";
  EXPECT_FALSE(fs::exists(d + "/x.csv") || fs::exists(d + "/x.csv.csv"));
  // An endless loop stops at the default max_cycles, 2^32 (about 25 s of CPU), not 1e11 (about 10 minutes).
  Outcome cfg = run("config");
  EXPECT_NE(cfg.out.find("\"max_cycles\": 4294967296"), std::string::npos) << cfg.out;

  // TMPDIR that does not exist: the report page is still written (no temporary there).
  Outcome r = run("describe" + tiny + " --report-html " + d + "/r.html", "TMPDIR=/nonexistent");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(fs::exists(d + "/r.html"));
  for (const std::string& n : list_dir(d)) EXPECT_EQ(n.find(".tmp."), std::string::npos) << n;

  // Two sweeps into one file: the second is refused while the first holds the file.
  int fd = ::open((d + "/same.h5.lock").c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX), 0);
  ASSERT_EQ(::pwrite(fd, "4242\n", 5, 0), 5);
  r = run("sweep --model synthetic:tiny --set ddr_gbps=16 --out " + d + "/same.h5");
  expect_error(r, {"is being written by another gpnpu (pid 4242"});
  EXPECT_FALSE(fs::exists(d + "/same.h5"));
  ::close(fd);  // released: now it runs
  r = run("sweep --model synthetic:tiny --set ddr_gbps=16 --out " + d + "/same.h5");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_FALSE(fs::exists(d + "/same.h5.lock")) << "the lock file is removed when the sweep ends";
}

// Which way round a path argument goes.
enum class Role { in_file, in_dir, out_file, out_dir, out_regular };  // out_regular: read back (a sweep's results)

struct PathArg {
  std::string cmd;  // the command, with {} where the path goes
  Role role;
};

TEST(BadInput, EveryPathArgument) {
  const Fixture& f = fixture();
  const std::string d = scratch_dir("paths");
  const std::string o = d + "/o";  // a fresh output name
  const std::string tiny = "describe --model synthetic:tiny --timing-only --tokens 2 --cache-dir " + d + "/cache";
  const std::vector<PathArg> args = {
      {"asm {} -o " + o, Role::in_file},
      {"asm " + f.prog + " -o {}", Role::out_file},
      {"disasm {}", Role::in_file},
      {"run {}", Role::in_file},
      {"run -q " + f.prog + " --preset {}", Role::in_file},
      {"run -q " + f.prog + " --stats-json {}", Role::out_file},
      {"run -q " + f.prog + " --stats-h5 {}", Role::out_file},
      {"run -q " + f.prog + " --trace {}", Role::out_file},
      {"run -q " + f.prog + " --timeline {}", Role::out_file},
      {"run -q " + f.prog + " --vcd {}", Role::out_file},
      {"config --preset {}", Role::in_file},
      {"debug {} --commands " + f.cmds, Role::in_file},
      {"debug " + f.prog + " --commands {}", Role::in_file},
      {"trace-diff {} " + f.trace, Role::in_file},
      {"trace-diff " + f.trace + " {}", Role::in_file},
      {"trace-print {}", Role::in_file},
      {"make-checkpoint --config {} --out " + o, Role::in_file},
      {"make-checkpoint --config tiny --no-data --out {}", Role::out_dir},
      {"quantize --model {} --out " + o, Role::in_dir},
      {"quantize --model " + f.ckpt + " --config {} --out " + o, Role::in_file},
      {"quantize --model " + f.ckpt + " --out {}", Role::out_file},
      {"check-checkpoint --model {}", Role::in_dir},
      {"tokenize --file {}", Role::in_file},
      {"tokenize hello --tokenizer {}", Role::in_file},
      {"detokenize 1 --tokenizer {}", Role::in_file},
      {"preprocess --image {}", Role::in_file},
      {"preprocess --image " + f.png + " --out {}", Role::out_file},
      {"preprocess --image " + f.png + " --resized-png {}", Role::out_file},
      {"compile --model {} --out " + o, Role::in_dir},
      {"compile --model synthetic:tiny --out {}", Role::out_dir},
      {"compile --model synthetic:tiny --preset {} --out " + o, Role::in_file},
      {tiny + " --image {}", Role::in_file},
      {tiny + " --preset {}", Role::in_file},
      {tiny + " --golden {}", Role::in_file},
      {"describe --timing-only --tokens 2 --cache-dir " + d + "/cache --model {}", Role::in_dir},
      {tiny + " --report-json {}", Role::out_file},
      {tiny + " --report-html {} --plots " + d + "/plots", Role::out_file},
      {tiny + " --report-html " + d + "/r.html --plots {}", Role::out_dir},
      {"describe --model synthetic:tiny --timing-only --tokens 2 --cache-dir {}", Role::out_dir},
      {"sweep --model {} --set ddr_gbps=16 --out " + o + ".h5", Role::in_dir},
      {"sweep --model synthetic:tiny --preset {} --set ddr_gbps=16 --out " + o + ".h5", Role::in_file},
      {"sweep --model synthetic:tiny --set ddr_gbps=16 --out {}", Role::out_regular},
      {"sweep-merge {} --out " + o + ".h5", Role::in_file},
      {"sweep-merge " + f.sweep + " --out {}", Role::out_regular},
      {"sweep-merge " + f.sweep + " {} --out " + o + ".h5", Role::in_file},
  };
  const std::vector<std::pair<const char*, std::string>> kinds = {
      {"a directory", f.empty_dir}, {"/dev/null", "/dev/null"}, {"/dev/zero", "/dev/zero"}, {"a FIFO", f.fifo}};
  // An output directory gets a fresh one (it is written into); every other role the shared empty one.
  auto path_of = [&](size_t arg, size_t kind) {
    const bool out = args[arg].role != Role::in_file && args[arg].role != Role::in_dir;
    if (out && kind == 1) return f.null_out;
    if (out && kind == 2) return f.zero_out;
    if (kind != 0 || args[arg].role != Role::out_dir) return kinds[kind].second;
    const std::string fresh = d + "/dir" + std::to_string(arg);
    fs::create_directories(fresh);
    return fresh;
  };
  std::vector<std::string> cmds;
  for (size_t a = 0; a < args.size(); ++a)
    for (size_t k = 0; k < kinds.size(); ++k) cmds.push_back(fmt::format(fmt::runtime(args[a].cmd), path_of(a, k)));
  std::vector<Outcome> res = run_all(cmds);
  size_t n = 0;
  for (size_t ai = 0; ai < args.size(); ++ai)
    for (size_t ki = 0; ki < kinds.size(); ++ki) {
      const PathArg& a = args[ai];
      const std::string path = path_of(ai, ki);
      const Outcome& r = res[n++];
      SCOPED_TRACE(fmt::format("{} with {} ({})", a.cmd, kinds[ki].first, path));
      EXPECT_NE(r.code, 137) << "killed by the time or memory limit";
      EXPECT_LT(r.code, 128) << "died of a signal: " << r.err;
      const bool dir = ki == 0, device = ki == 1 || ki == 2;
      const bool ok = (a.role == Role::out_file && device) || (a.role == Role::out_dir && dir);
      if (ok) {
        EXPECT_EQ(r.code, 0) << "a valid " << (dir ? "output directory" : "sink") << ": " << r.err;
      } else {
        expect_error(r, {});
        if (a.role == Role::in_file || a.role == Role::out_file || !dir) {
          EXPECT_NE(r.err.find(path), std::string::npos) << "the message names the path: " << r.err;
        }
      }
    }
  // The devices given as outputs are still devices (written in place, never renamed over).
  for (const std::string& dev : {f.null_out, f.zero_out, std::string("/dev/null"), std::string("/dev/zero")})
    EXPECT_EQ(file_kind(dev), "a character device") << dev;
}

TEST(BadInput, SameOutputPaths) {
  const Fixture& f = fixture();
  const std::string d = scratch_dir("same");
  const std::string img = d + "/in.png";
  fs::copy_file(f.png, img);
  const std::string prog = d + "/p.s";
  fs::copy_file(f.prog, prog);
  const std::string ck = d + "/ck";
  fs::copy(f.ckpt, ck);
  const std::string cfgjson = ck + "/config.json";
  const std::string run = "run " + prog + " ";
  const std::vector<std::string> run_outs = {"--stats-json", "--stats-h5", "--trace", "--timeline", "--vcd"};
  const std::string tiny = "describe --model synthetic:tiny --timing-only --tokens 2 --cache-dir " + d + "/cache --image " + img;
  std::vector<std::pair<std::string, std::string>> cases;  // command, text the error holds
  const std::string same = d + "/same";
  for (size_t a = 0; a < run_outs.size(); ++a) {
    cases.push_back({run + run_outs[a] + " " + prog, run_outs[a] + " '" + prog + "' is the input program"});
    for (size_t b = a + 1; b < run_outs.size(); ++b)
      cases.push_back({run + run_outs[a] + " " + same + " " + run_outs[b] + " " + same,
                       run_outs[a] + " and " + run_outs[b] + " are the same file"});
  }
  cases.insert(cases.end(), {
      {"asm " + prog + " -o " + prog, "-o '" + prog + "' is the input program"},
      {"preprocess --image " + img + " --out " + same + " --resized-png " + same, "--out and --resized-png are the same"},
      {"preprocess --image " + img + " --out " + img, "is the input --image"},
      {"preprocess --image " + img + " --resized-png " + img, "is the input --image"},
      {"quantize --model " + ck + " --out " + ck + "/model.safetensors", "is the input --model's file"},
      {"quantize --model " + ck + " --out " + cfgjson, "is the input --model's config.json"},
      {"make-checkpoint --config " + cfgjson + " --out " + ck, "is the input --config"},
      {"compile --model " + ck + " --out " + ck, "is the input --model's config.json"},
      {tiny + " --report-json " + same + " --report-html " + same, "--report-json and --report-html are the same file"},
      {tiny + " --report-json " + img, "is the input --image"},
      {tiny + " --report-html " + img, "is the input --image"},
      {"describe --model synthetic:tiny --timing-only --cache-dir " + d + "/c --report-html " + d + "/r.html --plots " +
           d + "/c",
       "--plots and --cache-dir are the same directory"},
      {"sweep --model " + cfgjson + " --set ddr_gbps=16 --out " + cfgjson, "is the input --model"},
      {"sweep-merge " + f.sweep + " --out " + f.sweep, "is the input shard"},
  });
  const std::string img_before = read_file(img), prog_before = read_file(prog), ck_before = read_file(cfgjson),
                    model_before = read_file(ck + "/model.safetensors"), sweep_before = read_file(f.sweep);
  std::vector<std::string> cmds;
  for (const auto& c : cases) cmds.push_back(c.first);
  std::vector<Outcome> res = run_all(cmds);
  for (size_t k = 0; k < cases.size(); ++k) {
    SCOPED_TRACE(cases[k].first);
    expect_error(res[k], {cases[k].second});
    EXPECT_EQ(res[k].out, "") << "work started before the check";
  }
  EXPECT_EQ(read_file(img), img_before);
  EXPECT_EQ(read_file(prog), prog_before);
  EXPECT_EQ(read_file(cfgjson), ck_before);
  EXPECT_EQ(read_file(ck + "/model.safetensors"), model_before);
  EXPECT_EQ(read_file(f.sweep), sweep_before);
  EXPECT_FALSE(fs::exists(same));
}

// Starts `gpnpu args` in `cwd`, waits until `ready()` (a temporary exists), sends
// `sig` and returns the exit status.
int interrupt_when(const std::string& args, const std::string& cwd, const std::function<bool()>& ready, int sig) {
  pid_t pid = ::fork();
  if (pid == 0) {
    if (::chdir(cwd.c_str()) != 0) ::_exit(127);
    ::execl("/bin/sh", "sh", "-c", ("exec " + std::string(GPNPU_BINARY) + " " + args + " >/dev/null 2>&1").c_str(),
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  bool seen = false;
  for (int k = 0; k < 3000 && !seen; ++k) {  // up to 60 s
    seen = ready();
    if (!seen) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(seen) << "no temporary appeared: " << args;
  ::kill(pid, sig);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}

// Files and directories under `dir` whose name holds ".tmp." or ends in ".lock".
std::vector<std::string> temporaries(const std::string& dir) {
  std::vector<std::string> found;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    const std::string n = it->path().filename().string();
    if (n.find(".tmp.") != std::string::npos || n.ends_with(".lock")) found.push_back(it->path().string());
  }
  return found;
}

TEST(BadInput, SigintLeavesNoTemporary) {
  const Fixture& f = fixture();
  const std::string d = scratch_dir("sigint");
  auto has_temp = [](const std::string& dir) {
    return [dir] {
      for (const std::string& p : temporaries(dir))
        if (p.find(".tmp.") != std::string::npos) return true;
      return false;
    };
  };
  struct Case {
    const char* name;
    std::string args, watch;
  };
  const std::vector<Case> cases = {
      {"make-checkpoint", "make-checkpoint --config 2b --seed 1 --out " + d + "/ck2b", d + "/ck2b"},
      {"a first describe", "describe --model synthetic:tiny --tokens 2 --cache-dir " + d + "/cache", d + "/cache"},
      {"a traced run", "run " + f.loop + " --set max_cycles=100000000000 --trace " + d + "/run/t.txt --vcd " + d +
                           "/run/t.vcd --timeline " + d + "/run/t.json",
       d + "/run"},
  };
  fs::create_directories(d + "/run");
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    int status = interrupt_when(c.args, d, has_temp(c.watch), SIGINT);
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGINT) << "status " << status;
    EXPECT_EQ(temporaries(c.watch), std::vector<std::string>{});
  }
  // Negative control: SIGKILL gives no chance to clean up, and the temporaries stay ...
  const std::string traced = cases.back().args;
  int status = interrupt_when(traced, d, has_temp(d + "/run"), SIGKILL);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  EXPECT_FALSE(temporaries(d + "/run").empty()) << "the check above would not see a temporary";
  // ... until the next writer of the same files sweeps those of the dead process.
  Outcome again = run("run -q " + f.prog + " --trace " + d + "/run/t.txt --vcd " + d + "/run/t.vcd --timeline " + d +
                      "/run/t.json");
  EXPECT_EQ(again.code, 0) << again.err;
  EXPECT_EQ(temporaries(d + "/run"), std::vector<std::string>{});
  // The same for a temporary of a dead process made by hand.
  pid_t dead = ::fork();
  if (dead == 0) ::_exit(0);
  ::waitpid(dead, nullptr, 0);
  const std::string stale = d + "/run/s.json.tmp." + std::to_string(dead);
  write_file(stale, "partial");
  Outcome r = run("run -q " + f.prog + " --stats-json " + d + "/run/s.json");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_TRUE(fs::exists(d + "/run/s.json"));
}

}  // namespace
}  // namespace gpnpu::errors_test
