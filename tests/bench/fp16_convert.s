# tests/bench/fp16_convert.s: the worst case for the fp16 range tracking of functional runs
# (docs/performance.md): nothing but fp32 -> fp16 conversions over the whole array
# (8 vpack.f16 + 8 vcvt.f16.f32 per iteration, 1000 iterations), in one mark.
    li   x2, 0x447a0000
    vsplat v8, x2
    vsplat v9, x2
    li   x1, 1000
    mark.begin "convert"
    loop x1, end
    vpack.f16 v0, v8, v9
    vpack.f16 v1, v8, v9
    vpack.f16 v2, v8, v9
    vpack.f16 v3, v8, v9
    vpack.f16 v4, v8, v9
    vpack.f16 v5, v8, v9
    vpack.f16 v6, v8, v9
    vpack.f16 v7, v8, v9
    vcvt.f16.f32 v10, v8
    vcvt.f16.f32 v11, v8
    vcvt.f16.f32 v12, v8
    vcvt.f16.f32 v13, v8
    vcvt.f16.f32 v14, v8
    vcvt.f16.f32 v15, v8
    vcvt.f16.f32 v16, v8
    vcvt.f16.f32 v17, v8
end:
    mark.end "convert"
    halt
