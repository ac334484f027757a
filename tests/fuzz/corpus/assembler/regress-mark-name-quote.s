# regression (fuzz_assembler): a mark name holding a quote did not read back
mark.begin "a"b"   # comment
mark.end "a"b"
halt
