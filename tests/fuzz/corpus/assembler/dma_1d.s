# dma_1d.s (test program): 1-D DMA both directions and two channels in flight.
#   c0: DDR 0x10000 (64 KiB) -> OCM 0x8000;  c1: DDR 0x40000 (4 KiB) -> OCM 0x20000
#   then c3: OCM 0x8000 (64 KiB) -> DDR 0x300000
.equ OCM, 0xE0000000
    li   x1, 1
    # descriptor A at smem 0
    li   x2, 0x10000
    sw   x2, 0(x0)
    li   x2, OCM + 0x8000
    sw   x2, 4(x0)
    li   x2, 65536
    sw   x2, 8(x0)
    sw   x1, 12(x0)
    sw   x1, 24(x0)
    # descriptor B at smem 64
    li   x2, 0x40000
    sw   x2, 64(x0)
    li   x2, OCM + 0x20000
    sw   x2, 68(x0)
    li   x2, 4096
    sw   x2, 72(x0)
    sw   x1, 76(x0)
    sw   x1, 88(x0)
    # descriptor C at smem 128
    li   x2, OCM + 0x8000
    sw   x2, 128(x0)
    li   x2, 0x300000
    sw   x2, 132(x0)
    li   x2, 65536
    sw   x2, 136(x0)
    sw   x1, 140(x0)
    sw   x1, 152(x0)
    li   x3, 64
    li   x4, 128
    mark.begin "dma_in"
    dma.start c0, x0
    dma.start c1, x3
    dma.waitall
    mark.end "dma_in"
    mark.begin "dma_out"
    dma.start c3, x4
    dma.wait c3
    mark.end "dma_out"
    halt
