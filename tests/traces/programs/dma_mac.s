# dma_mac.s (timeline/VCD test): every track busy. Two DMA channels stream DDR ->
# OCM while the MAC array runs, inside nested marks; then OCM -> DDR.
.equ OCM, 0xE0000000
    li   x1, 1
    li   x2, 0x10000
    sw   x2, 0(x0)
    li   x2, OCM + 0x1000
    sw   x2, 4(x0)
    li   x2, 32768
    sw   x2, 8(x0)
    sw   x1, 12(x0)
    sw   x1, 24(x0)
    li   x2, 0x20000
    sw   x2, 64(x0)
    li   x2, OCM + 0x10000
    sw   x2, 68(x0)
    li   x2, 16384
    sw   x2, 72(x0)
    sw   x1, 76(x0)
    sw   x1, 88(x0)
    li   x2, OCM + 0x1000
    sw   x2, 128(x0)
    li   x2, 0x40000
    sw   x2, 132(x0)
    li   x2, 4096
    sw   x2, 136(x0)
    sw   x1, 140(x0)
    sw   x1, 152(x0)
    li   x3, 64
    li   x4, 128
    li   x5, 200
    vsplati v8, 0x3c00
    vsplati v9, 0x4000
    mark.begin "outer"
    dma.start c0, x0
    dma.start c1, x3
    mark.begin "compute"
    loop x5, body_end
    vmac.f16 v0, v8, v9
    vmac.f16 v1, v8, v9
body_end:
    mark.end "compute"
    dma.waitall
    obcast v2, 0x1000(x0)
    dma.start c2, x4
    dma.wait c2
    mark.end "outer"
    halt
