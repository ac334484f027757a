# spin.s (debugger Ctrl-C test, tests/traces/test_debugger.cpp): counts x1 up
# forever; only a Ctrl-C at the debugger (or max_cycles) stops it.
    li   x1, 0
top:
    addi x1, x1, 1
    beq  x0, x0, top
    halt
