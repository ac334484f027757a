# tests/bench/issue_loop.s: the issue loop's own cost per instruction (docs/performance.md,
# issue 16): 3,000,000 iterations of scalar adds and array instructions, which a
# --timing-only run issues and times without executing (36 M instructions).
    li   x1, 3000000
    loop x1, end
    addi x2, x2, 1
    vmac.f16 v0, v1, v2
    addi x3, x3, 1
    vmac.f16 v4, v5, v6
    addi x4, x4, 1
    vadd.f32 v7, v8, v9
    addi x5, x5, 1
    vmac.f16 v10, v11, v12
    addi x6, x6, 1
    vmul.f32 v13, v14, v15
end:
    halt
