// Errors are precise (acceptance 7): each fault stops the run with a one-line
// message naming the pc, the instruction, the address and the mark as they apply.
// End to end through the CLI (exit code 1, stderr "error: ..."), and through the
// C++ API, where the platform must stay usable after a fault.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "isa/error.h"
#include "sim/run.h"
#include "sim_test_util.h"

using namespace gpnpu;
using namespace gpnpu::sim;
using gpnpu::sim::test::read_file;
using gpnpu::sim::test::run_cli;
using gpnpu::sim::test::scratch_dir;
using gpnpu::sim::test::source_path;
using gpnpu::sim::test::write_file;

namespace {

struct RuntimeCase {
  const char* name;
  const char* text;
  const char* extra_args;
  std::vector<std::string> expect;  // substrings of the message
};

// A descriptor at smem 0 for DDR 0 -> `dst`, 64 bytes.
#define DESC(dst)                     \
  "li x1, " dst "\n"                 \
  "sw x1, 4(x0)\n"                   \
  "li x1, 64\n"                      \
  "sw x1, 8(x0)\n"                   \
  "li x1, 1\n"                       \
  "sw x1, 12(x0)\n"                  \
  "sw x1, 24(x0)\n"

const RuntimeCase kRuntime[] = {
    {"ocm_scatter_out_of_range",
     "li x3, 64\n"
     "li x4, 0x3ff000\n"
     "mark.begin \"kern\"\n"
     "oscatter v1, 0(x4), x3\n"
     "mark.end \"kern\"\n"
     "halt\n",
     "",
     // PE 1023 reads 0x3ff000 + 1023 * 64 = 0x40efc0 of a 4 MiB OCM.
     {"pc 3 ", "prog.s:4", "`oscatter v1, 0(x4), x3`", "in mark \"kern\"", "OCM access out of range", "0x40efc0",
      "0x400000"}},
    {"lrm_out_of_range",
     "mark.begin \"norm\"\n"
     "vld v1, 4064(x0)\n"
     "mark.end \"norm\"\n"
     "halt\n",
     "",
     {"pc 1 ", "prog.s:2", "`vld v1, 4064(x0)`", "in mark \"norm\"", "LRM access out of range", "0xfe0", "0x1020",
      "0x1000"}},
    {"dma_unmapped_address",
     DESC("0xD0000000")
     "mark.begin \"copy\"\n"
     "dma.start c2, x0\n"
     "dma.waitall\n"
     "mark.end \"copy\"\n"
     "halt\n",
     "",
     {"pc 8 ", "`dma.start c2, x0`", "in mark \"copy\"", "DMA destination [0xd0000000, 0xd0000040)",
      "not inside one memory region", "DDR [0x00000000", "OCM [0xe0000000"}},
    {"dma_channel_does_not_exist",
     DESC("0xE0000000")
     "dma.start c6, x0\n"
     "halt\n",
     "",
     {"pc 7 ", "`dma.start c6, x0`", "DMA channel c6 does not exist", "dma_channels = 4"}},
    {"dma_wait_channel_does_not_exist",
     "dma.wait c2\n"
     "halt\n",
     "--set dma_channels=2",
     {"pc 0 ", "`dma.wait c2`", "DMA channel c2 does not exist", "dma_channels = 2"}},
    {"pc_past_the_end",
     "li x1, 1\n"
     "add x2, x1, x1\n",
     "",
     {"pc 2 is past the end of the program (2 instructions)", "halt"}},
    {"mark_end_mismatch",
     "mark.begin \"outer\"\n"
     "mark.begin \"inner\"\n"
     "mark.end \"outer\"\n"
     "halt\n",
     "",
     {"pc 2 ", "`mark.end \"outer\"`", "does not close the innermost open mark", "\"inner\" is"}},
    {"halt_with_open_mark",
     "mark.begin \"attn\"\n"
     "nop\n"
     "halt\n",
     "",
     {"pc 2 ", "`halt`", "halt with mark \"attn\" still open"}},
    {"max_cycles_exceeded",
     "mark.begin \"spin\"\n"
     "top: jal x0, top\n",
     "--set max_cycles=1000",
     {"pc 1 ", "in mark \"spin\"", "max_cycles = 1000", "--set max_cycles="}},
};

// Message of the gpnpu::Error a run throws ("" if none).
std::string run_error(const std::string& text, const Config& cfg, bool timing_only = false) {
  try {
    isa::Program p = isa::assemble(text, "prog.s");
    run_program(p, cfg, timing_only);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Errors, RuntimeFaultsThroughTheApi) {
  for (const RuntimeCase& c : kRuntime) {
    SCOPED_TRACE(c.name);
    std::vector<std::string> sets;
    std::string extra = c.extra_args;
    if (!extra.empty()) sets.push_back(extra.substr(std::string("--set ").size()));
    Config cfg = Config::make("qc-u", sets);
    std::string msg = run_error(c.text, cfg);
    ASSERT_FALSE(msg.empty()) << "no error";
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    for (const std::string& s : c.expect) EXPECT_NE(msg.find(s), std::string::npos) << "missing '" << s << "' in: " << msg;
    // The same errors in timing-only mode (addresses are checked in every mode).
    EXPECT_EQ(run_error(c.text, cfg, true), msg);
  }
}

TEST(Errors, RuntimeFaultsThroughTheCli) {
  std::string dir = scratch_dir("errors");
  for (const RuntimeCase& c : kRuntime) {
    SCOPED_TRACE(c.name);
    std::string prog = dir + "/prog.s";
    write_file(prog, c.text);
    for (const char* mode : {"", "--timing-only"}) {
      auto r = run_cli(fmt::format("run {} {} {}", prog, mode, c.extra_args));
      EXPECT_EQ(r.exit_code, 1) << r.err;
      EXPECT_TRUE(r.err.starts_with("error: ")) << r.err;
      EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "one line: " << r.err;
      for (const std::string& s : c.expect) EXPECT_NE(r.err.find(s), std::string::npos) << "missing '" << s << "' in: " << r.err;
    }
  }
}

TEST(Errors, PlatformIsUsableAfterAFault) {
  // A run that faults with a DMA descriptor still queued must not leak into the
  // next run: the next program gives the same stats as in a fresh platform.
  Config cfg = Config::make("qc-u", {});
  isa::Program good = isa::Program::load(source_path("tests/sim/programs/dma_1d.s"));
  std::string before = run_program(good, cfg, false).to_json(cfg, false);
  std::string msg = run_error(
      "li x1, 0xE0000000\nsw x1, 4(x0)\nli x1, 1048576\nsw x1, 8(x0)\nli x1, 1\nsw x1, 12(x0)\nsw x1, 24(x0)\n"
      "dma.start c0, x0\ndma.start c9, x0\nhalt\n",
      cfg);
  ASSERT_NE(msg.find("c9 does not exist"), std::string::npos) << msg;
  std::string after = run_program(good, cfg, false).to_json(cfg, false);
  EXPECT_EQ(before, after);
}

struct CliCase {
  const char* name;
  std::string args;
  std::vector<std::string> expect;
};

TEST(Errors, ConfigAndPresetErrors) {
  std::string dir = scratch_dir("config_errors");
  std::string bad_preset = dir + "/bad.cfg";
  write_file(bad_preset, "# a preset with a typo\npe_rows = 8\nocm_byte = 1MiB\n");
  std::string prog = source_path("examples/asm/mac_peak.s");
  const CliCase cases[] = {
      {"unknown key", "run " + prog + " --set ddr_gbs=16",
       {"unknown config key 'ddr_gbs' (--set)", "did you mean 'ddr_gbps'?", "gpnpu config --list"}},
      {"bad bytes", "run " + prog + " --set ocm_bytes=4XB",
       {"config key 'ocm_bytes' (--set): '4XB' is not a byte size", "4MiB"}},
      {"negative bytes", "config --set lrm_bytes=-4096", {"config key 'lrm_bytes'", "'-4096'", "byte size"}},
      {"bad real", "run " + prog + " --set clock_ghz=fast",
       {"config key 'clock_ghz' (--set): 'fast' is not a number"}},
      {"bad count", "config --set pe_rows=3.5", {"config key 'pe_rows'", "'3.5' is not a non-negative integer"}},
      {"out of range", "config --set pe_rows=0", {"config key 'pe_rows'", "outside 1..256"}},
      {"missing =", "config --set pe_rows", {"--set 'pe_rows': expected key=value"}},
      {"unknown preset", "run " + prog + " --preset qc-x",
       {"unknown preset 'qc-x'", "qc-x.cfg", "presets: ", "mini", "qc-u"}},
      {"bad key in preset file", "config --preset " + bad_preset,
       {"unknown config key 'ocm_byte'", bad_preset + ":3", "did you mean 'ocm_bytes'?"}},
  };
  for (const CliCase& c : cases) {
    SCOPED_TRACE(c.name);
    auto r = run_cli(c.args);
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_TRUE(r.err.starts_with("error: ")) << r.err;
    for (const std::string& s : c.expect) EXPECT_NE(r.err.find(s), std::string::npos) << "missing '" << s << "' in: " << r.err;
  }
  // Through the API too.
  try {
    Config::make("qc-u", {"lat.sfuu=3"});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("did you mean 'lat.sfu'?"), std::string::npos) << e.what();
  }
}

TEST(Errors, IllegalEncodingAndTruncatedBinary) {
  std::string dir = scratch_dir("binary_errors");
  isa::Program p = isa::assemble("li x1, 5\nadd x2, x1, x1\nmark.begin \"k\"\nmark.end \"k\"\nhalt\n", "ok.s");
  std::string good = dir + "/good.bin";
  p.write_binary(good);
  ASSERT_EQ(run_cli("run -q " + good).exit_code, 0);
  std::string bytes = read_file(good);
  const size_t header = 8 + 4 + 4 + 4;

  // pc 1: unknown opcode 0xff.
  std::string bad = bytes;
  bad[header + 8 * 1] = char(0xff);
  write_file(dir + "/opcode.bin", bad);
  auto r = run_cli("run " + dir + "/opcode.bin");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(r.err.starts_with("error: ")) << r.err;
  for (const char* s : {"illegal encoding at pc 1", "unknown opcode 0xff"})
    EXPECT_NE(r.err.find(s), std::string::npos) << r.err;

  // pc 4 (halt): a non-zero unused field.
  bad = bytes;
  bad[header + 8 * 4 + 1] = char(0x01);  // field a of halt
  write_file(dir + "/field.bin", bad);
  r = run_cli("run " + dir + "/field.bin");
  EXPECT_EQ(r.exit_code, 1);
  for (const char* s : {"illegal encoding at pc 4", "halt", "field a"}) EXPECT_NE(r.err.find(s), std::string::npos) << r.err;

  // Truncated: the last name and part of an instruction cut off.
  for (size_t cut : {bytes.size() - 1, header + 8 * 3 + 5, size_t(10)}) {
    write_file(dir + "/short.bin", bytes.substr(0, cut));
    r = run_cli("run " + dir + "/short.bin");
    EXPECT_EQ(r.exit_code, 1) << cut;
    EXPECT_TRUE(r.err.starts_with("error: ")) << r.err;
    EXPECT_NE(r.err.find("short.bin"), std::string::npos) << r.err;
    EXPECT_TRUE(r.err.find("truncated") != std::string::npos || r.err.find("corrupt") != std::string::npos) << r.err;
  }

  // Through the API: decode names the pc.
  bad = bytes;
  bad[header] = char(0xfe);
  write_file(dir + "/api.bin", bad);
  isa::Program q = isa::Program::load(dir + "/api.bin");
  try {
    run_program(q, Config::make("mini", {}), false);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("illegal encoding at pc 0"), std::string::npos) << e.what();
  }
}

}  // namespace
