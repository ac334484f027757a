.equ N, 4*8-1
.equ M, N+0x10
.name "first"
start: li x1, M
  addi x2, x1, -3
  vsplat.f32 v3, 1.5e-3 @p1
  vsplat.f32 v4, 0x7fc00000
  mark.begin "first"
  vld v1, 64(x2) @p0
  mark.end "first"
  jal x0, end
end: halt
