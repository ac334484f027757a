// Lazy broadcasts (isa/execute.h) and PE-block batches (isa/batch.h) are invisible: a
// program that broadcasts into registers and then uses them every way (vmac.f16's
// broadcast operand, vmla.f32's, vcvt.f32.f16 of a broadcast, a predicated vshr of a
// broadcast onto itself (two patterns: read by vmac.f16, vmla.f32 and vcvt.f32.f16, its
// predicate changed before the reads, left to the end), other arithmetic, predicated writes,
// LRM stores, OCM gathers, overwrites, a second broadcast over a lazy one), and runs of
// deferred array instructions between scalar ones (LRM loads and splats from scalar
// registers that change within the run, a predicate over scattered PEs, fp16
// conversions that overflow in two instructions, the later one at a lower PE), and lazy
// dequantisations (vdq4.f32 read by vmla.f32 of a broadcast, sharing a snapshot, its vb
// and vc written before the reads (vc by a lazy broadcast between two vdq4.f32s), read otherwise, written in part, gathered, overwritten
// whole, va = vb, one left to the end), and per-PE lazy registers (oscatter.w1 onto every
// PE and onto some, elementwise instructions of them and of lane-uniform registers, a vsel
// by a lane mask (onto a source), read as vdq4.f32's scale and zero, read otherwise, a uniform register
// written in part before its next use, a uniform source that is also va, too many classes of lanes, one left to the end) leaves
// bit-identical registers, LRM and OCM, the same fp16 numerics and the same cycles
// whether it runs lazily and batched (no trace hook) or eagerly instruction by
// instruction (a trace hook turns both off). Negative control: the comparison sees a
// one-lane difference.
#include <gtest/gtest.h>

#include <cstring>

#include "isa/lane_pool.h"
#include "sim_test_util.h"

using namespace gpnpu;
using namespace gpnpu::sim;

namespace {

const char* kProgram = R"(
    li   x3, 64
    li   x5, 512
    li   x10, 0x10000
    li   x11, 0x20000
    li   x12, 0x30000
    li   x13, 0x40000
    pset.range p1, x0, x5
    oscatter.h v1, 0(x0), x3
    obcast.h v2, 0x800(x0)
    vmac.f16 v3, v1, v2
    vmac.f16 v3, v1, v2
    obcast.h v2, 0x840(x0)
    vmac.f16 v3, v1, v2
    vmac.f16 v4, v1, v2 @p1
    obcast v5, 0x880(x0)
    vshr v5, v5, 16 @p1
    vmac.f16 v6, v1, v5
    obcast v7, 0x8c0(x0)
    vst  v7, 256(x0)
    obcast v8, 0x900(x0)
    vadd.i32 v9, v8, v8
    obcast v10, 0x940(x0)
    obcast v10, 0x980(x0) @p1
    obcast v11, 0x9c0(x0)
    vld  v11, 256(x0)
    obcast v12, 0xa00(x0)
    ogather v12, 0(x10), x3
    ogather v3, 0(x11), x3
    ogather v6, 0(x12), x3
    ogather v10, 0(x13), x3
    obcast v13, 0xa40(x0)
    obcast.h v14, 0xa80(x0)
    vcvt.f32.f16 v14, v14
    obcast.h v15, 0xac0(x0)
    vcvt.f32.f16 v16, v15
    vmac.f16 v16, v1, v15
    li   x20, 3
    li   x21, 40
    pset.cols p2, x20, x21
    li   x6, 0
    li   x7, 5
    loop x7, Lbody
    vld  v17, 0(x6)
    vsplat v18, x6
    vadd.i32 v17, v17, v18 @p2
    vst  v17, 512(x6)
    vld.h v19, 256(x6)
    addi x6, x6, 64
Lbody:
    li   x22, 0x7f000000
    vsplat v20, x22
    vsplat v21, x0
    li   x23, 700
    li   x24, 1024
    pset.range p3, x23, x24
    vsplat v21, x22 @p3
    vcvt.f16.f32 v22, v21
    vpack.f16 v23, v20, v20
    vmul.f32 v24, v17, v14
    vcvt.f32.f16 v29, v1
    obcast.h v25, 0xb00(x0)
    vcvt.f32.f16 v25, v25
    vmla.f32 v30, v29, v25
    vmla.f32 v30, v29, v25
    obcast.h v26, 0xb40(x0)
    vmac.f16 v31, v26, v26
    obcast.h v28, 0xb80(x0)
    vcvt.f32.f16 v28, v28
    vmla.f32 v28, v29, v28
    obcast v25, 0xbc0(x0)
    vshr v25, v25, 16 @p2
    pset.range p2, x0, x23
    vmac.f16 v30, v1, v25
    vmla.f32 v31, v29, v25
    obcast v26, 0xc00(x0)
    vshr v26, v26, 16 @p2
    vcvt.f32.f16 v27, v26
    obcast v28, 0xc40(x0)
    vshr v28, v28, 3 @p2
    vdq4.f32 v2, v1, v29, 0
    vdq4.f32 v3, v1, v29, 5
    obcast.h v4, 0xd00(x0)
    vcvt.f32.f16 v4, v4
    vmla.f32 v5, v2, v4
    vmla.f32 v5, v3, v4
    vadd.i32 v1, v1, v17
    vmla.f32 v5, v2, v4
    vdq4.f32 v6, v1, v29, 2
    vmul.f32 v29, v29, v29
    vmla.f32 v7, v6, v4
    vadd.f32 v8, v3, v3
    vdq4.f32 v9, v9, v29, 1
    vmla.f32 v10, v9, v4 @p2
    vdq4.f32 v11, v1, v29, 7
    vsplat v11, x6 @p2
    vdq4.f32 v12, v1, v29, 3
    ogather v12, 0(x13), x3
    vdq4.f32 v14, v1, v29, 4
    obcast v14, 0xd40(x0)
    vdq4.f32 v15, v1, v29, 6
    vmla.f32 v16, v15, v4
    vdq4.f32 v15, v1, v29, 2
    vmla.f32 v16, v15, v4
    li   x25, 4
    vsplati v20, 255
    vlaneid v21
    vsplati v22, 0
    vcmpeq.i32 v21, v21, v22
    oscatter.w1 v23, 0x100(x0), x25
    oscatter.w1 v24, 0x1100(x0), x25
    vcvt.f32.f16 v25, v23
    vand v24, v24, v20
    vcvt.f32.i32 v24, v24
    vsel v26, v25, v24, v21
    vadd.i32 v17, v26, v23
    obcast.h v12, 0xd80(x0)
    vcvt.f32.f16 v12, v12
    vdq4.f32 v27, v1, v26, 3
    vmla.f32 v28, v27, v12
    oscatter.w1 v23, 0x2100(x0), x25 @p2
    vadd.i32 v29, v23, v23
    vsel v23, v25, v23, v21
    vmul.f32 v9, v26, v25
    vsplat v20, x25 @p2
    vadd.i32 v30, v24, v20
    oscatter.w1 v31, 0x3100(x0), x25 @p2
    vsel v22, v23, v25, v19
    vlaneid v18
    vadd.i32 v18, v18, v24
    vdq4.f32 v2, v1, v29, 0
    obcast v29, 0xe00(x0)
    vdq4.f32 v3, v1, v29, 1
    vmla.f32 v5, v3, v12
    vsplati v20, 7
    oscatter.w1 v24, 0x1100(x0), x25
    vadd.i32 v20, v20, v24
    vmul.f32 v9, v20, v20
    vadd.i32 v30, v24, v20
    mark.begin "after"
    mark.end "after"
    halt
)";

struct Result {
  std::vector<uint32_t> v;
  std::vector<uint8_t> lrm, ocm;
  uint64_t cycles;
  std::string first_nonfinite;
  uint64_t overflow;
};

Result run(bool hooks, const char* program = kProgram) {
  Config cfg = Config::make("qc-u", {});
  Platform& p = Platform::get();
  p.configure(cfg, false);
  std::vector<uint16_t> h(0x60000 / 2);
  for (size_t k = 0; k < h.size(); ++k) h[k] = uint16_t(0x3000 + (k * 2654435761u >> 7) % 0x1800);  // fp16 in [0.125, 4)
  p.ocm().write(0, h.data(), h.size() * 2);
  isa::Program prog = isa::assemble(program, "lazy.s");
  if (hooks) p.sequencer().on_issue = [](const IssueEvent&) {};
  Result r;
  const Stats& st = p.run(prog);
  r.cycles = st.total[Stat::cycles];
  r.overflow = st.total[Stat::f16_overflow];
  r.first_nonfinite = fmt::format("{} pe {} element {} value {}", st.first_nonfinite.where, st.first_nonfinite.pe,
                                  st.first_nonfinite.element, st.first_nonfinite.value);
  p.sequencer().on_issue = nullptr;
  r.v.assign(p.state().v.begin(), p.state().v.end());
  for (uint32_t e = 0; e < p.state().npe; ++e)
    r.lrm.insert(r.lrm.end(), p.state().lrm_of(e), p.state().lrm_of(e) + p.state().lrm_bytes);
  r.ocm.resize(0x50000);
  p.ocm().read(0, r.ocm.data(), r.ocm.size());
  return r;
}

// Lanes of register `reg` that hold 0 (whether a program did something to it).
size_t zero_lanes(const Result& r, int reg, uint32_t npe) {
  size_t n = 0;
  for (size_t k = size_t(reg) * npe * 16; k < size_t(reg + 1) * npe * 16; ++k) n += r.v[k] == 0;
  return n;
}

// Register by register, so that a failure names it.
void expect_same_registers(const Result& lazy, const Result& eager, uint32_t npe) {
  for (int r = 0; r < 32; ++r) {
    size_t diff = 0;
    for (size_t k = size_t(r) * npe * 16; k < size_t(r + 1) * npe * 16; ++k) diff += lazy.v[k] != eager.v[k];
    EXPECT_EQ(diff, 0u) << "v" << r;
  }
}

// The program run lazily and batched (the batches' chunks forced onto two threads, or as
// the machine's load decides) and eagerly; both take the same cycles.
std::pair<Result, Result> lazy_and_eager(const char* program, bool split) {
  isa::force_split_pes(split);
  Result lazy = run(false, program);
  isa::force_split_pes(false);
  Result eager = run(true, program);
  EXPECT_EQ(lazy.cycles, eager.cycles);
  return {lazy, eager};
}

class LazyBroadcast : public ::testing::TestWithParam<bool> {};

// Param: the batches' chunks of PEs forced onto two threads (isa/lane_pool.h), or as the
// machine's load decides.
TEST_P(LazyBroadcast, RegistersOcmAndCyclesEqualTheEagerRun) {
  const auto [lazy, eager] = lazy_and_eager(kProgram, GetParam());
  size_t diff = 0;
  for (size_t k = 0; k < lazy.v.size(); ++k) diff += lazy.v[k] != eager.v[k];
  EXPECT_EQ(diff, 0u);
  EXPECT_TRUE(lazy.ocm == eager.ocm);
  EXPECT_TRUE(lazy.lrm == eager.lrm);
  EXPECT_EQ(lazy.overflow, eager.overflow);
  EXPECT_GT(lazy.overflow, 0u);
  EXPECT_EQ(lazy.first_nonfinite, eager.first_nonfinite);
  EXPECT_NE(lazy.first_nonfinite.find("vcvt.f16.f32"), std::string::npos) << lazy.first_nonfinite;
  // The program did something: v3 accumulated, v13 (broadcast last) holds its row everywhere.
  const uint32_t npe = Platform::get().state().npe;
  const uint32_t* v13 = &lazy.v[size_t(13) * npe * 16];
  EXPECT_NE(v13[0], 0u);
  EXPECT_EQ(v13[16 * (npe - 1)], v13[0]);
  // Negative control: one lane changed is seen.
  Result bad = lazy;
  bad.v[size_t(3) * npe * 16 + 5] ^= 1;
  EXPECT_NE(bad.v, eager.v);
}
// Deferred vmac.f16s (isa/batch.h, Batch::Chunk): a block's vmac.f16s by broadcasts wait
// in their accumulator's chain until another entry names the accumulator. A matmul loop
// as the tower's (accumulators v0..v3 over vb versions v24, a two-pattern vc for one of
// them, an accumulator that is also vb; v12..v16: rows that read every vb version, run
// four at a time and the fifth alone; v17..v20: four such rows under one selector), more
// vb versions in one batch than a chunk keeps (the chains run early), then an accumulator read by vadd.f32, a predicated vmac.f16 of a
// register vc onto an accumulator, one replaced by a broadcast that a vmac.f16 then reads
// as va (a fill), one that becomes vb and is rewritten while others' chains still read its
// old version, and chains left to the batch's end.
const char* kMacProgram = R"(
    li   x3, 64
    li   x5, 512
    pset.range p3, x0, x5
    oscatter.h v24, 0(x0), x3
    oscatter.h v1, 0x4000(x0), x3
    vcvt.f32.f16 v0, v1
    vmov v2, v0
    vmov v3, v1
    vmov v4, v1
    vsplati v21, 1
    li   x6, 0
    li   x7, 40
    loop x7, Lend
    obcast.h v28, 0x800(x6)
    vmac.f16 v0, v24, v28
    obcast v29, 0x880(x6)
    vshr v29, v29, 16 @p3
    vmac.f16 v2, v24, v29
    vmac.f16 v3, v24, v28
    vmac.f16 v4, v4, v28
    obcast.h v30, 0x840(x6)
    vmac.f16 v12, v24, v30
    vmac.f16 v13, v24, v28
    vmac.f16 v14, v24, v30
    vmac.f16 v15, v24, v28
    vmac.f16 v16, v24, v30
    vmac.f16 v17, v24, v29
    vmac.f16 v18, v24, v29
    vmac.f16 v19, v24, v29
    vmac.f16 v20, v24, v29
    vadd.i32 v24, v24, v21
    addi x6, x6, 4
Lend:
    vadd.f32 v5, v0, v0
    vmac.f16 v0, v24, v28
    vmac.f16 v0, v24, v1 @p3
    vmac.f16 v2, v24, v28
    obcast v3, 0x900(x0)
    vmac.f16 v3, v24, v28
    vmac.f16 v6, v2, v28
    vmac.f16 v7, v24, v28
    vmac.f16 v2, v24, v28
    vmac.f16 v8, v2, v28
    vadd.i32 v2, v2, v21
    vmac.f16 v9, v2, v28
    vmac.f16 v0, v24, v29
    li   x7, 3
    loop x7, Lend2
    vmac.f16 v10, v24, v28
    vmac.f16 v11, v24, v29
    vadd.i32 v24, v24, v21
Lend2:
    halt
)";

// Param: the batches' chunks forced onto two threads, or as the machine's load decides.
TEST_P(LazyBroadcast, DeferredVmacChainsEqualTheEagerRun) {
  const auto [lazy, eager] = lazy_and_eager(kMacProgram, GetParam());
  const uint32_t npe = Platform::get().state().npe;
  expect_same_registers(lazy, eager, npe);
  // The program did something: the accumulators moved from their start.
  for (int r : {0, 2, 3, 4, 10, 11, 12, 13, 16, 17}) EXPECT_LT(zero_lanes(lazy, r, npe), size_t(npe)) << "v" << r;
  EXPECT_NE(std::memcmp(&lazy.v[0], &lazy.v[size_t(5) * npe * 16], size_t(npe) * 64), 0);
}
// Lazy dequantisations that share vb's storage (ArchState::DqSnapshot): a GEMV loop as the
// decode's (oscatter of the codes into v0, vdq4.f32 of v0 read by vmla.f32 of broadcasts;
// the next tile's oscatter renames v0 while the last tile's registers still point at its
// codes), those registers read after v0 was overwritten (twice renamed), a predicated
// oscatter and an elementwise write of a shared vb (a copy now, and in the batch's order),
// two snapshots of one vb with different scales (the second copies), va = vb and va = vc
// (the next vdq4.f32 of the same registers reads their new values), a snapshot
// whose registers are all gone when vb is written, a snapshot taken again for another vb
// in the batch where entries still read its first codes, and registers left lazy to the end on
// renamed storage (the run's end puts every register back; the eager run that follows on
// the same platform reads its registers from there).
const char* kDqProgram = R"(
    li   x3, 64
    li   x5, 512
    pset.range p2, x0, x5
    oscatter.h v1, 0x8000(x0), x3
    vcvt.f32.f16 v4, v1
    vsplati v21, 3
    obcast.h v10, 0xa00(x0)
    vcvt.f32.f16 v10, v10
    oscatter v12, 0x6000(x0), x3
    oscatter v13, 0x7000(x0), x3
    oscatter v14, 0x8000(x0), x3
    vdq4.f32 v15, v12, v4, 1
    vmla.f32 v16, v15, v10
    vdq4.f32 v15, v13, v4, 2
    vmla.f32 v16, v15, v10
    vdq4.f32 v15, v14, v4, 3
    vmla.f32 v16, v15, v10
    vdq4.f32 v17, v13, v4, 5
    vmla.f32 v31, v17, v10
    li   x6, 0
    li   x7, 6
    loop x7, Lend
    oscatter v0, 0(x6), x3
    vdq4.f32 v18, v0, v4, 0
    vdq4.f32 v19, v0, v4, 3
    obcast.h v10, 0xa00(x6)
    vcvt.f32.f16 v10, v10
    vmla.f32 v8, v18, v10
    vmla.f32 v9, v19, v10
    addi x6, x6, 0x40
Lend:
    oscatter v0, 0x1000(x0), x3
    vadd.f32 v11, v18, v19
    oscatter v0, 0x2000(x0), x3
    vdq4.f32 v20, v0, v4, 1
    vdq4.f32 v22, v0, v1, 2
    oscatter v0, 0x3000(x0), x3 @p2
    vmla.f32 v8, v20, v10
    vmla.f32 v9, v22, v10
    vdq4.f32 v23, v0, v4, 5
    vmla.f32 v8, v23, v10
    vadd.i32 v0, v0, v21
    vmla.f32 v9, v23, v10
    vdq4.f32 v24, v0, v4, 6
    vdq4.f32 v24, v1, v4, 7
    oscatter v0, 0x4000(x0), x3
    vdq4.f32 v25, v25, v4, 4
    vdq4.f32 v26, v25, v4, 0
    vdq4.f32 v27, v0, v4, 2
    vdq4.f32 v28, v0, v4, 4
    oscatter v0, 0x5000(x0), x3
    vmla.f32 v9, v27, v10
    vmov v29, v4
    vdq4.f32 v29, v0, v29, 3
    vdq4.f32 v30, v0, v29, 1
    halt
)";

TEST_P(LazyBroadcast, SharedDequantisationCodesEqualTheEagerRun) {
  const auto [lazy, eager] = lazy_and_eager(kDqProgram, GetParam());
  const uint32_t npe = Platform::get().state().npe;
  expect_same_registers(lazy, eager, npe);
  for (int r : {8, 9, 11, 16, 18, 20, 22, 23, 26, 27, 28, 30, 31})  // the program did something
    EXPECT_LT(zero_lanes(lazy, r, npe), size_t(npe) * 16 / 2) << "v" << r;
  // A third run, lazy again, gives the same (nothing of the renames outlives a run).
  Result again = run(false, kDqProgram);
  EXPECT_TRUE(again.v == lazy.v);
}
// OCM reads and predicates in a batch (isa/batch.h): oscatter, oscatter.h and a
// predicated obcast wait in the batch and read OCM when it runs, so a DMA that writes
// bytes they read runs the batch first (one that writes other bytes does not have to); a
// predicate written while entries run under it (pset.range, pnot) leaves them its old
// value, more times than a batch keeps (then the batch runs). An oscatter whose offset is
// negative reads below its base register (32-bit address arithmetic) alone in a batch.
const char* kOcmPredProgram = R"(
    li   x3, 64
    li   x5, 300
    pset.range p1, x0, x5
    li   x9, 0xe0010000
    li   x1, 4096
    li   x2, 16
    li   x4, 1
    sw   x0, 0x100(x0)
    sw   x9, 0x104(x0)
    sw   x1, 0x108(x0)
    sw   x2, 0x10c(x0)
    sw   x1, 0x110(x0)
    sw   x1, 0x114(x0)
    sw   x4, 0x118(x0)
    sw   x0, 0x11c(x0)
    sw   x0, 0x120(x0)
    li   x9, 0xe0040000
    sw   x0, 0x140(x0)
    sw   x9, 0x144(x0)
    sw   x1, 0x148(x0)
    sw   x2, 0x14c(x0)
    sw   x1, 0x150(x0)
    sw   x1, 0x154(x0)
    sw   x4, 0x158(x0)
    sw   x0, 0x15c(x0)
    sw   x0, 0x160(x0)
    oscatter v1, 0x10000(x0), x3
    oscatter.h v2, 0x10000(x0), x3 @p1
    obcast v3, 0x10040(x0) @p1
    oscatter v4, 0x20000(x0), x3
    vadd.i32 v5, v1, v4
    li   x8, 0x140
    dma.start c1, x8
    dma.wait c1
    li   x8, 0x100
    dma.start c0, x8
    dma.wait c0
    vadd.i32 v6, v1, v2
    oscatter v7, 0x10000(x0), x3
    oscatter v12, 0x40000(x0), x3
    vadd.i32 v8, v7, v3
    li   x6, 0
    li   x7, 12
    loop x7, Lp
    vadd.i32 v9, v9, v4 @p1
    oscatter.h v10, 0x2000(x6), x3 @p1
    vadd.i32 v11, v11, v10 @p2
    addi x5, x5, 61
    pset.range p1, x6, x5
    pnot p2, p1
    addi x6, x6, 16
Lp:
    ogather v9, 0x50000(x0), x3
    li   x16, 0x30040
    oscatter v13, -64(x16), x3
    li   x9, 0xe0030000
    sw   x0, 0x180(x0)
    sw   x9, 0x184(x0)
    sw   x1, 0x188(x0)
    sw   x2, 0x18c(x0)
    sw   x1, 0x190(x0)
    sw   x1, 0x194(x0)
    sw   x4, 0x198(x0)
    sw   x0, 0x19c(x0)
    sw   x0, 0x1a0(x0)
    li   x8, 0x180
    dma.start c2, x8
    dma.wait c2
    vadd.i32 v14, v13, v13
    halt
)";

TEST_P(LazyBroadcast, OcmReadsAndPredicatesWaitingInTheBatchEqualTheEagerRun) {
  const auto [lazy, eager] = lazy_and_eager(kOcmPredProgram, GetParam());
  const uint32_t npe = Platform::get().state().npe;
  auto zeros = [&](const Result& r, int reg) { return zero_lanes(r, reg, npe); };
  expect_same_registers(lazy, eager, npe);
  EXPECT_TRUE(lazy.ocm == eager.ocm);
  // The reads before the DMAs saw the OCM's pattern, those after them its zeros.
  EXPECT_EQ(zeros(lazy, 1), 0u);
  EXPECT_EQ(zeros(lazy, 7), size_t(npe) * 16);
  EXPECT_EQ(zeros(lazy, 12), size_t(npe) * 16);
  EXPECT_EQ(zeros(lazy, 13), 0u);
  for (int r : {9, 11}) EXPECT_LT(zeros(lazy, r), size_t(npe) * 16) << "v" << r;  // the loop did something
}

INSTANTIATE_TEST_SUITE_P(Split, LazyBroadcast, ::testing::Bool());

}  // namespace
