// Hazard checker (acceptance 4): deliberately racy programs are caught, each kind
// with its pc and mark; the correct kernels of the model (gemv, embed, norm,
// elementwise, as the kernel tests build them) raise nothing; and the real GEMV with
// one dma.wait removed is caught.
#include "isa/error.h"
#include "sim/platform.h"
#include "trace_test_util.h"
#include "traces/session.h"

namespace gpnpu::traces::test {
namespace {

std::vector<Hazard> check(const isa::Program& prog, const sim::Config& cfg,
                          const std::vector<std::pair<uint32_t, uint32_t>>& host_ocm = {},
                          const std::function<void(sim::Platform&)>& load = {}) {
  sim::Platform& p = sim::Platform::get();
  p.configure(cfg, false);
  if (load) load(p);
  TraceOptions o;
  o.check_hazards = true;
  TraceSession s(p, prog, o);
  for (auto [off, n] : host_ocm) s.hazards()->host_wrote_ocm(off, n);
  sim::Stats st = p.run(prog);
  s.finish(st);
  return s.hazards()->hazards();
}

std::vector<Hazard> check_asm(const std::string& body) {
  std::string src = ".equ OCM, 0xE0000000\n" + body;
  return check(isa::assemble(src, "racy.s"), sim::Config::make("mini", {}));
}

// Descriptor at smem 0: 4 KiB DDR 0x10000 -> OCM 0x1000; at smem 64: OCM 0x1000 -> DDR 0x80000.
const std::string kDescriptors = R"(
    li   x1, 1
    li   x2, 0x10000
    sw   x2, 0(x0)
    li   x2, OCM + 0x1000
    sw   x2, 4(x0)
    li   x2, 4096
    sw   x2, 8(x0)
    sw   x1, 12(x0)
    sw   x1, 24(x0)
    li   x2, OCM + 0x1000
    sw   x2, 64(x0)
    li   x2, 0x80000
    sw   x2, 68(x0)
    li   x2, 4096
    sw   x2, 72(x0)
    sw   x1, 76(x0)
    sw   x1, 88(x0)
    li   x3, 64
    li   x8, 64
)";

const Hazard* find(const std::vector<Hazard>& hs, const std::string& kind) {
  for (const Hazard& h : hs)
    if (h.kind == kind) return &h;
  return nullptr;
}

std::string all(const std::vector<Hazard>& hs) {
  std::string s;
  for (const Hazard& h : hs) s += h.kind + ": " + h.message + "\n";
  return s;
}

TEST(Hazards, ArrayReadWhileTheDmaIsStillWriting) {
  auto hs = check_asm(kDescriptors + R"(
    mark.begin "load"
    dma.start c0, x0
    obcast v1, 0x1000(x0)       # pc 21: no dma.wait first
    dma.wait c0
    obcast v2, 0x1000(x0)       # fine: waited
    mark.end "load"
    halt
)");
  ASSERT_EQ(hs.size(), 1u) << all(hs);
  EXPECT_EQ(hs[0].kind, "read-during-dma");
  EXPECT_EQ(hs[0].pc, 21u);
  EXPECT_EQ(hs[0].mark, "load");
  EXPECT_NE(hs[0].message.find("pc 21 `obcast v1, 4096(x0)`"), std::string::npos) << hs[0].message;
  EXPECT_NE(hs[0].message.find("is still running (it completes at cycle"), std::string::npos) << hs[0].message;
  EXPECT_NE(hs[0].message.find("dma.wait c0"), std::string::npos);
}

// A strided array read from a base below 0 (OCM addresses wrap at 32 bits: the OCM attention's
// and the GEMM's two row sets' bases): PEs 8-11 read [0x1000, 0x2000), which the DMA is still
// filling. Negative control: the same read after `dma.wait` raises nothing.
std::vector<Hazard> wrapped_read(bool wait) {
  const std::string read = R"(
    li   x9, 8
    li   x10, 12
    pset.range p1, x9, x10
    li   x11, 1024
    li   x12, -4096
    oscatter v1, 0(x12), x11 @p1
    dma.waitall
    halt
)";
  return check_asm(kDescriptors + "    dma.start c0, x0\n" + (wait ? "    dma.wait c0\n" : "") + read);
}

TEST(Hazards, WrappedBaseReadWhileTheDmaIsStillWriting) {
  const std::vector<Hazard> hs = wrapped_read(false);
  ASSERT_EQ(hs.size(), 1u) << all(hs);
  EXPECT_EQ(hs[0].kind, "read-during-dma");
  EXPECT_TRUE(wrapped_read(true).empty()) << all(wrapped_read(true));
}

TEST(Hazards, ReadOfADmaThatFinishedButWasNeverWaitedFor) {
  // 100 iterations of nothing: the DMA has long completed, but nothing synchronised.
  auto hs = check_asm(kDescriptors + R"(
    dma.start c0, x0
    li   x5, 2000
    loop x5, idle
    nop
idle:
    obcast v1, 0x1000(x0)
    dma.waitall
    halt
)");
  ASSERT_EQ(hs.size(), 1u) << all(hs);
  EXPECT_EQ(hs[0].kind, "read-during-dma");
  EXPECT_NE(hs[0].message.find("never waited for it"), std::string::npos) << hs[0].message;
}

TEST(Hazards, DmaRefillsABufferNothingConsumed) {
  auto hs = check_asm(kDescriptors + R"(
    dma.start c0, x0
    dma.wait c0
    dma.start c0, x0            # pc 21: refills before anything read the first fill
    dma.wait c0
    oscatter v1, 0x1000(x0), x8
    halt
)");
  ASSERT_EQ(hs.size(), 1u) << all(hs);
  EXPECT_EQ(hs[0].kind, "dma-overwrite");
  EXPECT_EQ(hs[0].pc, 21u);
  EXPECT_NE(hs[0].message.find("nothing has read yet"), std::string::npos) << hs[0].message;
}

TEST(Hazards, ReadsOfNeverWrittenMemory) {
  auto hs = check_asm(R"(
    li x8, 64
    obcast v1, 0x2000(x0)       # pc 1: OCM nobody wrote
    vld v2, 128(x0)             # pc 2: LRM nobody wrote
    vst v1, 256(x0)
    vld v3, 256(x0)             # fine: written just before
    halt
)");
  ASSERT_EQ(hs.size(), 2u) << all(hs);
  EXPECT_EQ(hs[0].kind, "never-written");
  EXPECT_EQ(hs[0].pc, 1u);
  EXPECT_NE(hs[0].message.find("OCM [0x2000, 0x2040)"), std::string::npos) << hs[0].message;
  EXPECT_EQ(hs[1].pc, 2u);
  EXPECT_NE(hs[1].message.find("LRM read [0x80, 0xc0)"), std::string::npos) << hs[1].message;
}

// A grouped broadcast (obcast.g) reads one row a group of PEs: rows inside what the DMA loaded
// raise nothing; a group whose row lies past it is a read of never-written OCM (one report an
// instruction, the first such row); before the DMA is waited for, a read during the DMA.
TEST(Hazards, GroupedBroadcastReadsARowPerGroup) {
  auto hs = check_asm(kDescriptors + R"(
    li   x4, 4                          # pc 19: 4 PEs a group (4 groups on mini's 16 PEs)
    li   x5, 1024                       # pc 20: a group's row 1 KiB after the one before
    dma.start c0, x0                    # pc 21: OCM [0x1000, 0x2000)
    obcast.g v1, 0x1000(x0), x5, x4     # pc 22: before the wait
    dma.wait c0
    obcast.g v2, 0x1000(x0), x5, x4     # pc 24: rows 0x1000 .. 0x1c00, all loaded
    li   x5, 2048
    obcast.g v3, 0x1000(x0), x5, x4     # pc 26: groups 2 and 3 at 0x2000 and 0x2800
    halt
)");
  ASSERT_EQ(hs.size(), 2u) << all(hs);
  EXPECT_EQ(hs[0].kind, "read-during-dma");
  EXPECT_EQ(hs[0].pc, 22u);
  EXPECT_EQ(hs[1].kind, "never-written");
  EXPECT_EQ(hs[1].pc, 26u);
  EXPECT_NE(hs[1].message.find("OCM [0x2000, 0x2040)"), std::string::npos) << hs[1].message;
}

TEST(Hazards, ArrayWriteWhileADmaReadsAndTwoDmasOnOneBuffer) {
  auto hs = check_asm(kDescriptors + R"(
    dma.start c0, x0
    dma.wait c0
    oscatter v1, 0x1000(x0), x8     # consume the fill
    dma.start c1, x3                # write back OCM 0x1000.. to DDR
    ogather v1, 0x1000(x0), x8      # pc 23: overwrites what c1 is still reading
    dma.start c2, x0                # pc 24: refills what c1 is still reading
    dma.start c3, x0                # pc 25: writes what c2 is writing
    dma.waitall
    halt
)");
  EXPECT_TRUE(find(hs, "write-during-dma")) << all(hs);
  EXPECT_EQ(find(hs, "write-during-dma")->pc, 23u);
  const Hazard* dd = find(hs, "dma-during-dma");
  ASSERT_TRUE(dd) << all(hs);
  EXPECT_EQ(dd->pc, 24u);
  bool second = false;
  for (const Hazard& h : hs) second |= h.kind == "dma-during-dma" && h.pc == 25;
  EXPECT_TRUE(second) << all(hs);
}

TEST(Hazards, CorrectKernelsRaiseNothing) {
  for (KernelCase c : {gemv_case(), gemv_case(1500, 256, "qc-u"), embed_case(), norm_case(false), norm_case(true),
                       elementwise_case()}) {
    auto hs = check(c.program, c.cfg, c.host_ocm, c.load);
    EXPECT_TRUE(hs.empty()) << c.name << ":\n" << all(hs);
  }
}

TEST(Hazards, GemvWithoutOneDmaWaitIsCaught) {
  KernelCase c = gemv_case();
  std::vector<std::string> dis = disassemble_all(c.program);
  uint32_t wait_pc = 0;
  for (uint32_t pc = 0; pc < dis.size() && !wait_pc; ++pc)
    if (dis[pc].starts_with("dma.wait c1")) wait_pc = pc;
  ASSERT_NE(wait_pc, 0u);
  c.program.words[wait_pc] = 0;  // nop: the bug of forgetting one wait
  auto hs = check(c.program, c.cfg, c.host_ocm, c.load);
  const Hazard* h = find(hs, "read-during-dma");
  ASSERT_TRUE(h) << all(hs);
  EXPECT_EQ(h->mark, "gemv");
  EXPECT_NE(h->message.find("oscatter"), std::string::npos) << h->message;
  EXPECT_NE(h->message.find("DMA c1"), std::string::npos) << h->message;
}

TEST(Hazards, CliExitsNonZeroAndReports) {
  std::string prog = temp_path("racy.s"), out;
  write_text(prog, ".equ OCM, 0xE0000000\n" + kDescriptors + "dma.start c0, x0\nobcast v1, 0x1000(x0)\ndma.waitall\nhalt\n");
  EXPECT_EQ(run_cli("run " + prog + " --preset mini -q --check-hazards", out), 1) << out;
  EXPECT_NE(out.find("hazard read-during-dma: pc 20"), std::string::npos) << out;
  EXPECT_NE(out.find("error: --check-hazards: 1 hazard found"), std::string::npos) << out;
  std::string ok = std::string(GPNPU_SOURCE_DIR) + "/tests/sim/programs/dma_1d.s";
  EXPECT_EQ(run_cli("run " + ok + " -q --check-hazards", out), 0) << out;
  EXPECT_NE(out.find("hazards: none found"), std::string::npos) << out;
}

}  // namespace
}  // namespace gpnpu::traces::test
