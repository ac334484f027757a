# dma_2d.s (test program): 2-D strided DMA both directions; rows of 100 bytes
# (not a whole number of 64-byte DDR bursts).
#   DDR 0x2000, 8 rows x 100 bytes, stride 128 -> OCM 0x1000, stride 112
#   OCM 0x1000, 8 rows x 100 bytes, stride 112 -> DDR 0x200000, stride 104
.equ OCM, 0xE0000000
    li   x1, 0x2000
    sw   x1, 0(x0)
    li   x1, OCM + 0x1000
    sw   x1, 4(x0)
    li   x1, 100
    sw   x1, 8(x0)
    li   x1, 8
    sw   x1, 12(x0)
    li   x1, 128
    sw   x1, 16(x0)
    li   x1, 112
    sw   x1, 20(x0)
    li   x1, 1
    sw   x1, 24(x0)
    li   x1, OCM + 0x1000
    sw   x1, 64(x0)
    li   x1, 0x200000
    sw   x1, 68(x0)
    li   x1, 100
    sw   x1, 72(x0)
    li   x1, 8
    sw   x1, 76(x0)
    li   x1, 112
    sw   x1, 80(x0)
    li   x1, 104
    sw   x1, 84(x0)
    li   x1, 1
    sw   x1, 88(x0)
    li   x2, 64
    mark.begin "dma_2d"
    dma.start c2, x0
    dma.wait c2
    dma.start c0, x2
    dma.wait c0
    mark.end "dma_2d"
    halt
