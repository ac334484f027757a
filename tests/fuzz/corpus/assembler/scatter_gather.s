# scatter_gather.s (test program, qc-u: 1024 PEs): OCM <-> array forms and LRM.
#   DDR 0 (64 KiB, int32) -> OCM 0 by DMA; PE i scatters its 64 bytes at 64*i
#   OCM 0x10000 + 64*i = 2 * input, gathered by PEs 0..511 only (@p1)
#   OCM 0x20000 + 64*i = every lane the int32 sum of PE i's 16 input lanes
#   OCM 0x30000 + 128*i = OCM bytes [0, 64) broadcast, through LRM 256
#   OCM 0x50000 + 64*i = the low halves (16 fp16) of PE i's input, by oscatter.h/ogather.h
#   then OCM 0x10000..0x60000 (320 KiB) -> DDR 0x400000
.equ OCM, 0xE0000000
    li   x1, 1
    li   x2, 0
    sw   x2, 0(x0)
    li   x2, OCM
    sw   x2, 4(x0)
    li   x2, 65536
    sw   x2, 8(x0)
    sw   x1, 12(x0)
    sw   x1, 24(x0)
    li   x2, OCM + 0x10000
    sw   x2, 64(x0)
    li   x2, 0x400000
    sw   x2, 68(x0)
    li   x2, 327680
    sw   x2, 72(x0)
    sw   x1, 76(x0)
    sw   x1, 88(x0)
    li   x3, 64
    li   x4, 128
    li   x5, 512
    li   x10, 0x10000
    li   x11, 0x20000
    li   x12, 0x30000
    mark.begin "load"
    dma.start c0, x0
    dma.wait c0
    mark.end "load"
    mark.begin "array"
    pset.range p1, x0, x5
    oscatter v1, 0(x0), x3
    vadd.i32 v2, v1, v1
    vredsum.i32 v3, v1
    vmovn v4, v1, e
    ogather v2, 0(x10), x3 @p1
    ogather v3, 0(x11), x3
    obcast v5, 0(x0)
    vst  v5, 256(x0)
    vld  v6, 256(x0)
    ogather v6, 0(x12), x4
    oscatter.h v7, 0(x0), x3
    ogather.h v7, 0x50000(x0), x3
    mark.end "array"
    mark.begin "store"
    dma.start c1, x3
    dma.wait c1
    mark.end "store"
    halt
