// A DMA's payload moves the source's bytes in order to the destination's in order,
// whatever the shapes of the two sides' runs (rows, planes, strides) and however the
// engine cuts the move into pieces (DDR <-> OCM in 64 KiB pieces, sim/dma.cpp): a
// 3-plane strided DDR -> OCM transfer of 144,000 bytes (pieces end inside rows), its way
// back OCM -> DDR into one contiguous run, and an overlapping OCM -> OCM copy (moved as a
// whole: the source is read before any byte is written). Expected bytes are computed
// here from the descriptors. Negative control: one byte changed is seen.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "sim_test_util.h"

using namespace gpnpu;
using namespace gpnpu::sim;

namespace {

const char* kProgram = R"(
    li   x1, 0x00010000
    li   x2, 0xe0020000
    li   x3, 1200
    li   x4, 40
    li   x5, 1280
    li   x6, 1216
    li   x7, 3
    li   x8, 64000
    li   x9, 50000
    sw   x1, 0x100(x0)
    sw   x2, 0x104(x0)
    sw   x3, 0x108(x0)
    sw   x4, 0x10c(x0)
    sw   x5, 0x110(x0)
    sw   x6, 0x114(x0)
    sw   x7, 0x118(x0)
    sw   x8, 0x11c(x0)
    sw   x9, 0x120(x0)
    li   x10, 0x100
    dma.start c0, x10
    dma.wait c0
    li   x11, 0x00100000
    sw   x2, 0x140(x0)
    sw   x11, 0x144(x0)
    sw   x3, 0x148(x0)
    sw   x4, 0x14c(x0)
    sw   x6, 0x150(x0)
    sw   x3, 0x154(x0)
    sw   x7, 0x158(x0)
    sw   x9, 0x15c(x0)
    li   x12, 48000
    sw   x12, 0x160(x0)
    li   x10, 0x140
    dma.start c1, x10
    dma.wait c1
    li   x13, 0xe0020100
    li   x14, 70000
    li   x15, 1
    sw   x2, 0x180(x0)
    sw   x13, 0x184(x0)
    sw   x14, 0x188(x0)
    sw   x15, 0x18c(x0)
    sw   x14, 0x190(x0)
    sw   x14, 0x194(x0)
    sw   x15, 0x198(x0)
    sw   x0, 0x19c(x0)
    sw   x0, 0x1a0(x0)
    li   x10, 0x180
    dma.start c2, x10
    dma.wait c2
    halt
)";

uint8_t pattern(uint64_t addr) { return uint8_t((addr * 2654435761u) >> 13); }

TEST(DmaPayload, StridedAndPiecewiseMovesKeepTheByteOrder) {
  Platform& p = Platform::get();
  p.configure(Config::make("qc-u", {}), false);
  std::vector<uint8_t> ddr(0x40000);
  for (uint64_t a = 0; a < ddr.size(); ++a) ddr[a] = pattern(a);
  p.ddr().write(0, ddr.data(), ddr.size());
  p.run(isa::assemble(kProgram, "dma_payload.s"));

  // The stream of the first transfer: plane q, row r, byte b of DDR 0x10000 + q*64000 + r*1280.
  std::vector<uint8_t> stream;
  for (uint64_t q = 0; q < 3; ++q)
    for (uint64_t r = 0; r < 40; ++r)
      for (uint64_t b = 0; b < 1200; ++b) stream.push_back(pattern(0x10000 + q * 64000 + r * 1280 + b));
  // OCM after the first transfer: the stream at 0x20000 + q*50000 + r*1216; then the
  // overlapping copy of 70,000 bytes from 0x20000 to 0x20100.
  std::vector<uint8_t> ocm(0x50000);
  p.ocm().read(0, ocm.data(), ocm.size());
  std::vector<uint8_t> want(0x50000, 0);
  size_t k = 0;
  for (uint64_t q = 0; q < 3; ++q)
    for (uint64_t r = 0; r < 40; ++r)
      for (uint64_t b = 0; b < 1200; ++b) want[0x20000 + q * 50000 + r * 1216 + b] = stream[k++];
  const std::vector<uint8_t> before_copy(want.begin() + 0x20000, want.begin() + 0x20000 + 70000);
  std::copy(before_copy.begin(), before_copy.end(), want.begin() + 0x20100);
  EXPECT_TRUE(ocm == want);
  // DDR 0x100000: the OCM's rows back, one contiguous run of the stream.
  std::vector<uint8_t> back(stream.size());
  p.ddr().read(0x100000, back.data(), back.size());
  EXPECT_TRUE(back == stream);
  // Negative control.
  back[70000] ^= 1;
  EXPECT_FALSE(back == stream);
}

// The sparse DDR (sim/memory_target.cpp): one reservation, huge pages asked for where a
// write fills them whole, a page counted from its first write. A 5 MiB write from an odd
// address (whole huge pages inside it) and small writes far apart read back, the
// untouched bytes between them read zero, and the digest is a function of the bytes and
// the written pages only: the same bytes written in other pieces give the same digest,
// one more page written (zeros) another.
TEST(SparseDdr, LargeAndScatteredWritesReadBackAndUntouchedBytesReadZero) {
  Platform& p = Platform::get();
  const Config cfg = Config::make("qc-u", {});
  auto load = [&](uint64_t piece) {  // the same bytes, written `piece` bytes at a time
    p.configure(cfg, false);
    std::vector<uint8_t> big(5u << 20);
    for (uint64_t a = 0; a < big.size(); ++a) big[a] = pattern(0x123457 + a);
    for (uint64_t a = 0; a < big.size(); a += piece)
      p.ddr().write(0x123457 + a, big.data() + a, std::min(piece, big.size() - a));
    for (uint64_t a : {0x40000000ull, 0x80000003ull, 0xBFFFFFF0ull}) {
      const uint8_t b[16] = {uint8_t(a), 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, uint8_t(a >> 24)};
      p.ddr().write(a, b, 16);
    }
  };
  load(5u << 20);
  std::vector<uint8_t> got(0x700000);
  p.ddr().read(0, got.data(), got.size());
  for (uint64_t a = 0; a < got.size(); ++a) {
    const uint8_t want = a >= 0x123457 && a < 0x123457 + (5u << 20) ? pattern(a) : 0;
    if (got[a] != want) ADD_FAILURE() << "DDR byte " << a << " is " << int(got[a]) << ", not " << int(want);
    if (got[a] != want) break;
  }
  uint8_t small[32];
  p.ddr().read(0x80000003ull - 8, small, 32);
  EXPECT_EQ(small[7], 0);
  EXPECT_EQ(small[8], 3);
  EXPECT_EQ(small[9], 1);
  EXPECT_EQ(small[23], 0x80);
  EXPECT_EQ(small[24], 0);
  const uint64_t whole = p.ddr().digest();
  load(4096 + 7);
  EXPECT_EQ(p.ddr().digest(), whole);
  const uint8_t zeros[4] = {};
  p.ddr().write(0x60000000, zeros, 4);  // a page more, its bytes still zero
  EXPECT_NE(p.ddr().digest(), whole);
}

}  // namespace
