# mac_peak.s: the MAC units at their peak. Eight independent accumulators hide
# the MAC latency; hardware loops cost nothing per iteration.
#   fp16: 1024 PEs x 16 lanes / 4 cycles = 4096 MAC/cycle on qc-u
#   int8: 1024 PEs x 16 lanes / 1 cycle  = 16384 MAC/cycle on qc-u
#   gpnpu run examples/asm/mac_peak.s   (see macs_per_cycle of each region with --stats-json)
.equ ITERS, 500

    vsplati v8, 0x3c00      # fp16 1.0 in the low half of every lane
    vsplati v9, 0x4000      # fp16 2.0
    li   x1, ITERS
    mark.begin "mac_fp16"
    loop x1, fp16_end
    vmac.f16 v0, v8, v9
    vmac.f16 v1, v8, v9
    vmac.f16 v2, v8, v9
    vmac.f16 v3, v8, v9
    vmac.f16 v4, v8, v9
    vmac.f16 v5, v8, v9
    vmac.f16 v6, v8, v9
    vmac.f16 v7, v8, v9
fp16_end:
    mark.end "mac_fp16"

    vsplati v18, 3          # int8 3
    vsplati v19, -2         # int8 -2 (low byte 0xfe)
    mark.begin "mac_int8"
    loop x1, int8_end
    vmac.i8 v10, v18, v19
    vmac.i8 v11, v18, v19
    vmac.i8 v12, v18, v19
    vmac.i8 v13, v18, v19
    vmac.i8 v14, v18, v19
    vmac.i8 v15, v18, v19
    vmac.i8 v16, v18, v19
    vmac.i8 v17, v18, v19
int8_end:
    mark.end "mac_int8"
    halt
