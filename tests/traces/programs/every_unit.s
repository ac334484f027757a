# every_unit.s (trace agreement test, tests/traces/test_timing_agreement.cpp): every
# unit class of isa/unit_table.def, in dependence chains, so that a changed latency or
# occupancy moves the issue cycles the sequencer and the trace writers report.
.equ OCM, 0xE0000000
    li   x1, 1                       # scalar
    li   x2, 0x10000
    sw   x2, 0(x0)                   # smem: descriptor DDR 0x10000 -> OCM 0x1000, 4 KiB
    li   x2, OCM + 0x1000
    sw   x2, 4(x0)
    li   x2, 4096
    sw   x2, 8(x0)
    sw   x1, 12(x0)
    sw   x1, 24(x0)
    lw   x6, 8(x0)
    addi x6, x6, 1
    li   x3, 8
    li   x4, 64
    mark.begin "all"                 # ctrl
    dma.start c0, x0                 # dma
    pset.range p1, x0, x3            # pred: PEs 0..7
    vsplati v8, 0x3c00               # valu
    vsplati v9, 0x4000
    vcvt.f32.f16 v10, v8             # vfpu
    vmul.f32 v11, v10, v10
    vmac.f16 v0, v8, v9              # mac16
    vmac.i8 v1, v8, v9               # mac8 (on the same MAC array)
    vmac.f16 v0, v8, v9 @p1
    vexp.f32 v12, v11                # sfu
    vredsum.f32 v13, v12             # xlane
    vst  v13, 0(x0)                  # lrm
    vld  v14, 0(x0)
    vadd.i32 v15, v14, v14
    dma.wait c0
    obcast v16, 0x1000(x0)           # ocm_bc
    li   x5, 128
    obcast.g v21, 0x1000(x0), x4, x5 # ocm_gb: a row a group of 128 PEs
    li   x7, 2
    obcast.g v22, 0x1000(x0), x4, x7 @p1 # ocm_gb: PEs 0..7 in groups of 2 (4 rows)
    oscatter v17, 0x1000(x0), x4     # ocm_rd, every PE
    oscatter v18, 0x1000(x0), x4 @p1 # ocm_rd, 8 PEs
    vadd.i32 v19, v17, v18
    ogather v19, 0x20000(x0), x4     # ocm_wr
    ogather.h v19, 0x40000(x0), x4 @p1
    loop x3, body_end                # branch: a hardware loop
    vadd.i32 v20, v20, v16
    vmac.f16 v2, v8, v9
body_end:
    beq  x0, x0, done                # branch: taken
    nop
done:
    nop
    mark.end "all"
    halt
