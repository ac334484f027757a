li x99, 1
foo x1
.bogus 1
lbl: lbl: nop
add x1, x2,
