# dma_3d.s (test program): 3-D strided DMA both directions.
#   DDR 0x1000: 3 planes x 4 rows x 48 bytes, row stride 64, plane stride 512
#     -> OCM 0: row stride 80, plane stride 400
#   OCM 0 (same shape) -> DDR 0x100000 packed (row stride 48, plane stride 192)
.equ OCM, 0xE0000000
    li   x1, 0x1000
    sw   x1, 0(x0)
    li   x1, OCM
    sw   x1, 4(x0)
    li   x1, 48
    sw   x1, 8(x0)
    li   x1, 4
    sw   x1, 12(x0)
    li   x1, 64
    sw   x1, 16(x0)
    li   x1, 80
    sw   x1, 20(x0)
    li   x1, 3
    sw   x1, 24(x0)
    li   x1, 512
    sw   x1, 28(x0)
    li   x1, 400
    sw   x1, 32(x0)
    li   x1, OCM
    sw   x1, 64(x0)
    li   x1, 0x100000
    sw   x1, 68(x0)
    li   x1, 48
    sw   x1, 72(x0)
    li   x1, 4
    sw   x1, 76(x0)
    li   x1, 80
    sw   x1, 80(x0)
    li   x1, 48
    sw   x1, 84(x0)
    li   x1, 3
    sw   x1, 88(x0)
    li   x1, 400
    sw   x1, 92(x0)
    li   x1, 192
    sw   x1, 96(x0)
    li   x2, 64
    mark.begin "dma_3d"
    dma.start c1, x0
    dma.wait c1
    dma.start c2, x2
    dma.wait c2
    mark.end "dma_3d"
    halt
