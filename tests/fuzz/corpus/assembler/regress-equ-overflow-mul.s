# regression (fuzz_assembler): signed overflow in a .equ expression was undefined behaviour
.equ O, 0xE0000000333*3333333
halt
