// Golden tests of the array memory rows: LRM load/store, OCM broadcast, scatter and
// gather (strides, predication, out-of-range messages). 2 x 3 PEs, 256-byte LRM
// per PE, 1 KiB OCM. Expected bytes are assembled by hand from the fill patterns.
#include "tests/isa/golden.h"

namespace gpnpu::isa::test {
namespace {

uint8_t lrm_byte(uint32_t e, uint32_t k) { return uint8_t(k * 3 + e * 17 + 1); }
uint8_t ocm_byte(uint32_t k) { return uint8_t(k * 7 + (k >> 8) + 5); }
uint32_t le32(uint8_t b0, uint8_t b1, uint8_t b2, uint8_t b3) {
  return uint32_t(b0) | uint32_t(b1) << 8 | uint32_t(b2) << 16 | uint32_t(b3) << 24;
}

class GoldenMem : public Golden {
 protected:
  void SetUp() override {
    for (uint32_t e = 0; e < s.npe; ++e)
      for (uint32_t k = 0; k < s.lrm_bytes; ++k) s.lrm_of(e)[k] = lrm_byte(e, k);
    for (uint32_t k = 0; k < m.ocm.size(); ++k) m.ocm[k] = ocm_byte(k);
    m.fill(7, [](uint32_t e, int l) { return 0xa0000000u + e * 0x100 + uint32_t(l); });
  }
  // expected lane l of a 64-byte row at byte `addr` of `byte(k)`
  static uint32_t row_lane(const std::function<uint8_t(uint32_t)>& byte, uint32_t addr, int l) {
    uint32_t k = addr + 4 * uint32_t(l);
    return le32(byte(k), byte(k + 1), byte(k + 2), byte(k + 3));
  }
  static uint32_t half_lane(const std::function<uint8_t(uint32_t)>& byte, uint32_t addr, int l) {
    uint32_t k = addr + 2 * uint32_t(l);
    return le32(byte(k), byte(k + 1), 0, 0);
  }
  void expect_error(const std::string& line, const std::string& want) {
    std::string e = error_of([&] { run(line); });
    EXPECT_NE(e.find(want), std::string::npos) << line << " -> " << e;
  }
};

// The row tests of this file: suite GoldenMemRows is one of kGoldenSuites (golden.h).
class GoldenMemRows : public GoldenMem {};
#define GOLDEN_MEM(ident) TEST_F(GoldenMemRows, ident)

GOLDEN_MEM(vld) {
  s.x[2] = 16;
  run("vld v1, 32(x2)");
  for (uint32_t e = 0; e < s.npe; ++e)
    for (int l = 0; l < kLanes; ++l)
      ASSERT_EQ(m.V(1, e, l), row_lane([e](uint32_t k) { return lrm_byte(e, k); }, 48, l)) << e << " " << l;
  EXPECT_EQ(m.V(1, 2, 0), le32(lrm_byte(2, 48), lrm_byte(2, 49), lrm_byte(2, 50), lrm_byte(2, 51)));
  // the last full row fits; one byte further does not
  s.x[2] = 192;
  run("vld v1, 0(x2)");
  expect_error("vld v1, 1(x2)", "LRM access out of range: bytes [0xc1, 0x101) but the LRM has 0x100 bytes");
  expect_error("vld v1, -64(x0)", "LRM access out of range: bytes [0xffffffc0, 0x100000000)");
}

GOLDEN_MEM(vst) {
  s.x[2] = 100;
  m.set_pred(1, {1, 3});
  run("vst v7, -4(x2) @p1");  // 64 bytes at 96
  for (uint32_t e = 0; e < s.npe; ++e) {
    bool on = e == 1 || e == 3;
    for (uint32_t k = 0; k < s.lrm_bytes; ++k) {
      uint8_t want = lrm_byte(e, k);
      if (on && k >= 96 && k < 160) {
        uint32_t lane = 0xa0000000u + e * 0x100 + (k - 96) / 4;
        want = uint8_t(lane >> (8 * ((k - 96) % 4)));
      }
      ASSERT_EQ(s.lrm_of(e)[k], want) << "pe " << e << " byte " << k;
    }
  }
  expect_error("vst v7, 200(x0)", "LRM access out of range: bytes [0xc8, 0x108)");
}

GOLDEN_MEM(vld_h) {
  m.fill(1, [](uint32_t, int) { return 0xffffffffu; });
  run("vld.h v1, 10(x0)");
  for (uint32_t e = 0; e < s.npe; ++e)
    for (int l = 0; l < kLanes; ++l)
      ASSERT_EQ(m.V(1, e, l), half_lane([e](uint32_t k) { return lrm_byte(e, k); }, 10, l));  // high half 0
  run("vld.h v1, 224(x0)");  // 32 bytes end exactly at 256
  expect_error("vld.h v1, 225(x0)", "LRM access out of range: bytes [0xe1, 0x101)");
}

GOLDEN_MEM(vst_h) {
  run("vst.h v7, 8(x0)");
  for (uint32_t e = 0; e < s.npe; ++e)
    for (uint32_t k = 0; k < 64; ++k) {
      uint8_t want = lrm_byte(e, k);
      if (k >= 8 && k < 40) {
        uint32_t lane = 0xa0000000u + e * 0x100 + (k - 8) / 2;
        want = uint8_t(lane >> (8 * ((k - 8) % 2)));  // low half of each lane only
      }
      ASSERT_EQ(s.lrm_of(e)[k], want) << "pe " << e << " byte " << k;
    }
  expect_error("vst.h v7, 240(x0)", "LRM access out of range: bytes [0xf0, 0x110)");
}

GOLDEN_MEM(obcast) {
  s.x[3] = 900;
  run("obcast v1, 60(x3)");  // 64 bytes at 960 end at 1024
  for (uint32_t e = 0; e < s.npe; ++e)
    for (int l = 0; l < kLanes; ++l) ASSERT_EQ(m.V(1, e, l), row_lane(ocm_byte, 960, l));
  expect_error("obcast v1, 1000(x0)", "OCM access out of range: bytes [0x3e8, 0x428) but the OCM has 0x400 bytes");
}

GOLDEN_MEM(obcast_h) {
  m.set_pred(2, {4});
  run("obcast.h v7, 3(x0) @p2");
  for (uint32_t e = 0; e < s.npe; ++e)
    for (int l = 0; l < kLanes; ++l)
      ASSERT_EQ(m.V(7, e, l), e == 4 ? half_lane(ocm_byte, 3, l) : 0xa0000000u + e * 0x100 + uint32_t(l));
  expect_error("obcast.h v1, 993(x0)", "OCM access out of range: bytes [0x3e1, 0x401)");
}

GOLDEN_MEM(obcast_g) {
  s.x[2] = 8;
  s.x[3] = 96;  // group g reads the 64 bytes at 8 + g * 96
  s.x[4] = 3;   // of three PEs each
  run("obcast.g v1, 0(x2), x3, x4");
  for (uint32_t e = 0; e < s.npe; ++e)
    for (int l = 0; l < kLanes; ++l) ASSERT_EQ(m.V(1, e, l), row_lane(ocm_byte, 8 + e / 3 * 96, l)) << e;
  // predicated, groups of two: PEs 3 and 4 take groups 1 and 2, the others keep their registers
  s.x[4] = 2;
  m.set_pred(2, {3, 4});
  run("obcast.g v7, 64(x0), x3, x4 @p2");
  for (uint32_t e = 0; e < s.npe; ++e)
    ASSERT_EQ(m.V(7, e, 2), e == 3 || e == 4 ? row_lane(ocm_byte, 64 + e / 2 * 96, 2) : 0xa0000000u + e * 0x100 + 2u);
  s.x[4] = 3;
  // the last group's row past the OCM: an error naming OCM and the range
  s.x[3] = 4096;
  expect_error("obcast.g v1, 0(x0), x3, x4", "OCM access out of range");
  s.x[4] = 0;
  expect_error("obcast.g v1, 0(x0), x3, x4", "obcast.g: the group size x4 is 0");
}

GOLDEN_MEM(oscatter) {
  s.x[2] = 8;
  s.x[3] = 80;  // PE i reads 64 bytes at 8 + i * 80
  run("oscatter v1, 0(x2), x3");
  for (uint32_t e = 0; e < s.npe; ++e)
    for (int l = 0; l < kLanes; ++l) ASSERT_EQ(m.V(1, e, l), row_lane(ocm_byte, 8 + e * 80, l)) << e;
  // stride 0: every PE reads the same row
  run("oscatter v2, 16(x0), x0");
  for (uint32_t e = 0; e < s.npe; ++e) ASSERT_EQ(m.V(2, e, 5), row_lane(ocm_byte, 16, 5));
  // PE 5 would read [1008, 1072): an error naming OCM and the range
  s.x[3] = 200;
  expect_error("oscatter v1, 0(x2), x3", "OCM access out of range: bytes [0x3f0, 0x430) but the OCM has 0x400 bytes");
  // ... unless PE 5 is disabled: only enabled PEs' addresses are checked and read
  m.set_pred(1, {0, 1, 2, 3, 4});
  run("oscatter v7, 0(x2), x3 @p1");
  for (uint32_t e = 0; e < s.npe; ++e)
    ASSERT_EQ(m.V(7, e, 0), e < 5 ? row_lane(ocm_byte, 8 + e * 200, 0) : 0xa0000500u);
  // The address is 32-bit arithmetic: a base below 0 reaches OCM at the PEs past it (PEs 3..5
  // at -200 + e * 100), an enabled PE below it is out of range (the wrapped address named).
  s.x[2] = uint32_t(-200);
  s.x[3] = 100;
  m.set_pred(2, {3, 4, 5});
  run("oscatter v8, 0(x2), x3 @p2");
  for (uint32_t e = 3; e < s.npe; ++e) ASSERT_EQ(m.V(8, e, 0), row_lane(ocm_byte, e * 100 - 200, 0)) << e;
  m.set_pred(2, {1, 3});
  expect_error("oscatter v8, 0(x2), x3 @p2", "OCM access out of range: bytes [0xffffff9c, 0xffffffdc)");
}

GOLDEN_MEM(oscatter_h) {
  s.x[3] = 34;
  run("oscatter.h v1, 2(x0), x3");
  for (uint32_t e = 0; e < s.npe; ++e)
    for (int l = 0; l < kLanes; ++l) ASSERT_EQ(m.V(1, e, l), half_lane(ocm_byte, 2 + e * 34, l)) << e;
  s.x[3] = 199;  // PE 5 at 995 + 32 > 1024
  expect_error("oscatter.h v1, 0(x0), x3", "OCM access out of range: bytes [0x3e3, 0x403)");
}

GOLDEN_MEM(oscatter_w1) {
  s.x[3] = 6;
  run("oscatter.w1 v1, 1(x0), x3");
  for (uint32_t e = 0; e < s.npe; ++e)
    for (int l = 0; l < kLanes; ++l) ASSERT_EQ(m.V(1, e, l), row_lane(ocm_byte, 1 + e * 6, 0)) << e;
  s.x[3] = 204;  // PE 5 at 1021 + 4 > 1024
  expect_error("oscatter.w1 v1, 1(x0), x3", "OCM access out of range: bytes [0x3fd, 0x401)");
}

// OCM after a gather: PE i's `bytes` bytes at base + i * stride come from `lane_byte`.
void expect_gather(GoldenMem& g, uint32_t base, uint32_t stride, uint32_t bytes,
                   const std::function<bool(uint32_t)>& on,
                   const std::function<uint8_t(uint32_t e, uint32_t off)>& lane_byte) {
  std::vector<int> owner(g.m.ocm.size(), -1);
  for (uint32_t e = 0; e < g.s.npe; ++e)
    if (on(e))
      for (uint32_t k = 0; k < bytes; ++k) owner[base + e * stride + k] = int(e * 1000 + k);
  for (uint32_t k = 0; k < g.m.ocm.size(); ++k) {
    uint8_t want = owner[k] < 0 ? ocm_byte(k) : lane_byte(uint32_t(owner[k]) / 1000, uint32_t(owner[k]) % 1000);
    ASSERT_EQ(g.m.ocm[k], want) << "OCM byte " << k;
  }
}
uint8_t v7_byte(uint32_t e, uint32_t off) {  // byte `off` of v7 in PE e (lanes are little endian)
  uint32_t lane = 0xa0000000u + e * 0x100 + off / 4;
  return uint8_t(lane >> (8 * (off % 4)));
}
uint8_t v7_half_byte(uint32_t e, uint32_t off) {  // byte `off` of the packed low halves
  uint32_t lane = 0xa0000000u + e * 0x100 + off / 2;
  return uint8_t(lane >> (8 * (off % 2)));
}

GOLDEN_MEM(ogather) {
  s.x[2] = 10;
  s.x[3] = 70;  // 6-byte gaps between the rows stay untouched
  run("ogather v7, 5(x2), x3");
  expect_gather(*this, 15, 70, 64, [](uint32_t) { return true; }, v7_byte);
  SetUp();
  m.set_pred(3, {1, 4});
  run("ogather v7, 5(x2), x3 @p3");
  expect_gather(*this, 15, 70, 64, [](uint32_t e) { return e == 1 || e == 4; }, v7_byte);
  s.x[3] = 190;  // PE 5 would write [965, 1029)
  expect_error("ogather v7, 5(x2), x3", "OCM access out of range: bytes [0x3c5, 0x405)");
}

GOLDEN_MEM(ogather_h) {
  s.x[3] = 40;
  run("ogather.h v7, 0(x0), x3");
  expect_gather(*this, 0, 40, 32, [](uint32_t) { return true; }, v7_half_byte);
  s.x[3] = 199;
  expect_error("ogather.h v7, 0(x0), x3", "OCM access out of range: bytes [0x3e3, 0x403)");
}

GOLDEN_MEM(ogather_w1) {
  s.x[3] = 5;
  run("ogather.w1 v7, 3(x0), x3");  // lane 0 of each PE, 4 bytes
  expect_gather(*this, 3, 5, 4, [](uint32_t) { return true; }, v7_byte);
  s.x[3] = 204;
  expect_error("ogather.w1 v7, 1(x0), x3", "OCM access out of range: bytes [0x3fd, 0x401)");
}

GOLDEN_MEM(ogather_h1) {
  s.x[3] = 2;  // packed fp16 results, back to back
  m.set_pred(1, {0, 2, 5});
  run("ogather.h1 v7, 100(x0), x3 @p1");
  expect_gather(*this, 100, 2, 2, [](uint32_t e) { return e == 0 || e == 2 || e == 5; }, v7_byte);
  EXPECT_EQ(m.ocm[100], 0x00);  // lane 0 of PE 0 is 0xa0000000: low half 0x0000
  EXPECT_EQ(m.ocm[104], 0x00);
  EXPECT_EQ(m.ocm[105], 0x02);  // PE 2: 0xa0000200
  s.x[3] = 205;
  expect_error("ogather.h1 v7, 0(x0), x3", "OCM access out of range: bytes [0x401, 0x403)");
}

// --timing-only: addresses are still checked, no data moves.
TEST_F(GoldenMem, TimingOnlyChecksButMovesNothing) {
  s.functional = false;
  run("vld v1, 0(x0)");
  run("obcast v1, 0(x0)");
  run("ogather v7, 0(x0), x0");
  EXPECT_EQ(m.V(1, 0, 0), 0u);
  EXPECT_EQ(m.ocm[0], ocm_byte(0));
  expect_error("vld v1, 250(x0)", "LRM access out of range");
  expect_error("oscatter v1, 1000(x0), x0", "OCM access out of range");
}

}  // namespace
}  // namespace gpnpu::isa::test
