// Bad input through the CLI, for the rows of docs/errors.md that no test of
// tests/isa, tests/sim or tests/model covers: each case runs `gpnpu ...` and
// expects exit code 1 with one stderr line "error: ..." holding the listed text.
// The test names are cited in docs/errors.md (column "test").
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cstring>

#include "errors_util.h"

namespace gpnpu::errors_test {
namespace {

struct Case {
  const char* name;
  std::string args;
  std::vector<std::string> want;
};

void expect_cases(const std::vector<Case>& cases) {
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    CliResult r = run_cli(c.args);
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_TRUE(r.err.starts_with("error: ")) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "one line: " << r.err;
    for (const std::string& w : c.want) EXPECT_NE(r.err.find(w), std::string::npos) << "missing '" << w << "' in: " << r.err;
  }
}

// A valid binary of `text` (assembled by the CLI), as bytes.
std::string assemble_bytes(const std::string& dir, const std::string& text) {
  write_file(dir + "/src.s", text);
  CliResult r = run_cli("asm " + dir + "/src.s -o " + dir + "/src.bin");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return read_file(dir + "/src.bin");
}

constexpr size_t kHeader = 8 + 4 + 4 + 4;  // magic, version, instruction count, name count

TEST(CliErrors, ProgramFiles) {
  std::string dir = scratch_dir("program_files");
  std::string good = assemble_bytes(dir, "mark.begin \"k\"\nmark.end \"k\"\nhalt\n");
  ASSERT_EQ(good.size(), kHeader + 3 * 8 + 4 + 1);
  auto variant = [&](const std::string& name, std::string bytes) {
    write_file(dir + "/" + name, bytes);
    return dir + "/" + name;
  };
  std::string v2 = good;
  v2[8] = 2;  // version 2
  std::string mark5 = good;
  mark5[kHeader + 4] = 5;  // mark.begin's name index (imm, high word) -> #5
  std::string quote = good;
  quote.back() = '"';  // the one mark name is now "\""
  std::string newline = good;
  newline.back() = '\n';
  expect_cases({
      {"missing program", "run " + dir + "/nope.s", {"cannot open program '" + dir + "/nope.s'", "No such file"}},
      {"binary version", "run " + variant("v2.bin", v2), {"has format version 2, this gpnpu reads 1"}},
      {"binary trailing bytes", "run " + variant("trail.bin", good + "xy"), {"trail.bin", "2 unexpected trailing bytes"}},
      {"binary mark index", "run " + variant("mark5.bin", mark5),
       {"pc 0: mark.begin names mark #5 but the program has 1 names"}},
      {"binary mark name with a quote", "disasm " + variant("quote.bin", quote),
       {"quote.bin' is corrupt: mark name 0: a mark name cannot contain '\"'"}},
      {"binary mark name with a newline", "run " + variant("nl.bin", newline),
       {"is corrupt: mark name 0: a mark name cannot contain byte 0x0a"}},
      {"disasm illegal encoding", "disasm " + variant("op.bin", good.substr(0, kHeader) + std::string(1, char(0xff)) +
                                                           good.substr(kHeader + 1)),
       {"illegal encoding at pc 0", "unknown opcode 0xff"}},
  });
}

TEST(CliErrors, AssemblySourceErrorsNameFileLineColumn) {
  std::string dir = scratch_dir("asm_source");
  write_file(dir + "/q.s", "nop\nmark.begin \"a\"b\"\n");
  write_file(dir + "/u.s", "nop\n  vfoo v1\n");
  expect_cases({
      {"quote in mark name", "asm " + dir + "/q.s -o " + dir + "/q.bin",
       {dir + "/q.s:2:12: a mark name cannot contain '\"'"}},
      {"unknown instruction", "run " + dir + "/u.s", {dir + "/u.s:2:3: unknown instruction 'vfoo'"}},
  });
  EXPECT_FALSE(fs::exists(dir + "/q.bin"));
}

TEST(CliErrors, ConfigValues) {
  std::string dir = scratch_dir("config_values");
  write_file(dir + "/noeq.cfg", "# comment\npe_rows 8\n");
  expect_cases({
      {"preset line without =", "config --preset " + dir + "/noeq.cfg",
       {dir + "/noeq.cfg:2: expected 'key = value', got 'pe_rows 8'"}},
      {"latency out of range", "config --set lat.sfu=0", {"config key 'lat.sfu': 0 is outside 1..1000000 cycles"}},
      {"byte size too large", "config --set ddr_bytes=99999999999GiB",
       {"config key 'ddr_bytes' (--set): '99999999999GiB' is too large"}},
      {"non-finite real", "config --set clock_ghz=inf", {"config key 'clock_ghz' (--set): 'inf' is not a number"}},
      {"DDR larger than its window", "config --set ddr_bytes=4GiB", {"config key 'ddr_bytes'", "between 4KiB and 3GiB"}},
  });
}

// A DMA descriptor at smem 0: src, dst, row_bytes, rows (planes = 1).
std::string desc(const std::string& src, const std::string& dst, const std::string& row_bytes,
                 const std::string& rows) {
  return fmt::format(
      "li x1, {}\nsw x1, 0(x0)\nli x1, {}\nsw x1, 4(x0)\nli x1, {}\nsw x1, 8(x0)\nli x1, {}\nsw x1, 12(x0)\n"
      "li x1, 1\nsw x1, 24(x0)\n",
      src, dst, row_bytes, rows);
}

TEST(CliErrors, RunTimeFaultsAndDmaMisuse) {
  std::string dir = scratch_dir("runtime");
  auto prog = [&](const std::string& name, const std::string& text) {
    write_file(dir + "/" + name, text);
    return dir + "/" + name;
  };
  expect_cases({
      {"scalar memory out of range", "run " + prog("smem.s", "li x1, 16384\nlw x2, 0(x1)\nhalt\n"),
       {"pc 1 ", "`lw x2, 0(x1)`", "scalar memory access out of range", "0x4000"}},
      {"write to p0", "run " + prog("p0.s", "li x1, 4\npset.range p0, x0, x1\nhalt\n"),
       {"pc 1 ", "p0 is the constant all-ones predicate and cannot be written"}},
      {"DMA empty shape", "run " + prog("empty.s", desc("0", "0xE0000000", "0", "1") + "dma.start c0, x0\nhalt\n"),
       {"`dma.start c0, x0`", "has an empty shape (row_bytes 0, rows 1, planes 1)"}},
      {"DMA descriptor outside scalar memory",
       "run " + prog("descaddr.s", "li x2, 16380\ndma.start c0, x2\nhalt\n"),
       {"pc 1 ", "scalar memory (DMA descriptor) access out of range"}},
      {"DMA run past the end of DDR",
       "run --set ddr_bytes=1MiB " + prog("ddrend.s", desc("0xFFFE0", "0xE0000000", "64", "1") +
                                                           "dma.start c1, x0\ndma.waitall\nhalt\n"),
       {"`dma.start c1, x0`", "DMA source [0x000fffe0, 0x00100020) is not inside one memory region"}},
  });
}

TEST(CliErrors, ModelInputs) {
  std::string dir = scratch_dir("model_inputs");
  write_file(dir + "/empty.png", "");
  fs::create_directories(dir + "/notackpt");
  write_file(dir + "/notackpt/config.json", "{}");
  expect_cases({
      {"empty image", "preprocess --image " + dir + "/empty.png", {"image '" + dir + "/empty.png' is empty (0 bytes)"}},
      {"bad --size", "preprocess --image " + dir + "/empty.png --size 12", {"--size '12' is not WxH"}},
      {"not a checkpoint directory", "check-checkpoint --model " + dir,
       {dir + ": not a checkpoint directory: expected model.safetensors"}},
      {"tokenize text file missing", "tokenize --file " + dir + "/nope.txt",
       {"cannot open text file '" + dir + "/nope.txt'", "No such file"}},
      {"unknown model config", "make-checkpoint --config 3b --out " + dir + "/ck",
       {"--config '3b': not a built-in config"}},
      // (an option whose range its own check sets: no int64 limits in the message)
      {"not a number of cached tokens", "compile --model synthetic:tiny --out " + dir + "/c --cached abc",
       {"--cached: 'abc' is not a whole number"}},
  });
  // ...nor in the help.
  const CliResult help = run_cli("compile --help");
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.out.find("--cached INT=140"), std::string::npos) << help.out;
  EXPECT_EQ(help.out.find("9223372036854775807"), std::string::npos) << help.out;
}

}  // namespace
}  // namespace gpnpu::errors_test
