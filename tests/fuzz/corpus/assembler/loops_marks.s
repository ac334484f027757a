# loops_marks.s (test program): three nested hardware loops with nested marks,
# a branch loop inside, repeated region calls, and scalar memory.
#   regions: outer 1 call, middle 3, inner 12; smem word 256 = 3*4*5*5 = 300
    li   x1, 3
    li   x2, 4
    li   x3, 5
    vsplat.f32 v1, 0.5
    mark.begin "outer"
    loop x1, L1
    mark.begin "middle"
    loop x2, L2
    mark.begin "inner"
    loop x3, L3
    vexp.f32 v2, v1
    vadd.f32 v3, v2, v1
    add  x10, x10, x3
L3:
    mark.end "inner"
    vredsum.f32 v4, v3
L2:
    mark.end "middle"
    li   x4, 3
b1: addi x4, x4, -1
    vmac.f16 v5, v1, v1
    bne  x4, x0, b1
L1:
    mark.end "outer"
    mark.begin "tail"
    sw   x10, 256(x0)
    lw   x11, 256(x0)
    vrsqrt.f32 v6, v1
    vtanh.f32 v7, v6
    verf.f32 v8, v7
    vrcp.f32 v9, v8
    mark.end "tail"
    halt
