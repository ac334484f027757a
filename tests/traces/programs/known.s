# known.s (trace test): a program whose every trace line is known in advance.
# Run on `mini` (4 x 4 PEs). Expected lines: tests/traces/test_insn_trace.cpp.
    li   x1, 3
    li   x2, 0x100
    vsplati v1, 7
    mark.begin "body"
    loop x1, end
    addi x2, x2, 4
end:
    mark.end "body"
    vadd.i32 v2, v1, v1
    vadd.i32 v3, v2, v2
    sw   x2, 8(x0)
    li   x9, 4
    pset.range p1, x0, x1
    ogather.w1 v3, 64(x0), x9 @p1
    halt
