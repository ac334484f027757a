# ddr_stream.s: stream 64 MiB from DDR into OCM on all 4 DMA channels and report
# the bandwidth achieved. Each channel owns a 256 KiB OCM buffer; descriptors are
# queued back to back (queue depth 2), so the DDR port never idles.
#   gpnpu run examples/asm/ddr_stream.s            -> region "stream": ~18.8 B/cycle
#   gpnpu run examples/asm/ddr_stream.s --set ddr_gbps=64
.equ CHUNK, 262144          # bytes per descriptor
.equ OCM, 0xE0000000        # OCM base on the bus (docs/architecture.md, memory map)
.equ ROUNDS, 64             # 64 rounds x 4 channels x 256 KiB = 64 MiB

    # One descriptor per channel in scalar memory at 0, 64, 128, 192:
    # src, dst, row_bytes, rows, src_stride, dst_stride, planes, src_plane_stride, dst_plane_stride
    li   x10, 0
    li   x11, OCM
    li   x12, CHUNK
    li   x13, 1
    li   x20, 0             # descriptor address
    li   x21, 4
fill:
    sw   x11, 4(x20)        # dst: this channel's OCM buffer
    sw   x12, 8(x20)        # row_bytes
    sw   x13, 12(x20)       # rows
    sw   x13, 24(x20)       # planes
    add  x11, x11, x12
    addi x20, x20, 64
    addi x21, x21, -1
    bne  x21, x0, fill

    li   x1, 0              # DDR source address
    li   x2, ROUNDS
    li   x3, 64
    li   x4, 128
    li   x5, 192
    mark.begin "stream"
    loop x2, done
    sw   x1, 0(x0)
    dma.start c0, x0
    add  x1, x1, x12
    sw   x1, 0(x3)
    dma.start c1, x3
    add  x1, x1, x12
    sw   x1, 0(x4)
    dma.start c2, x4
    add  x1, x1, x12
    sw   x1, 0(x5)
    dma.start c3, x5
    add  x1, x1, x12
done:
    dma.waitall
    mark.end "stream"
    halt
