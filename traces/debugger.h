// The step-through debugger (`gpnpu debug PROG`): runs a program on the platform
// and stops on breakpoints, steps and watches to take commands from a stream (the
// terminal, or a file with --commands, one command a line, '#' comments).
//
// It stops *between* instructions: "stopped before pc N" means every instruction
// before it has executed (its results are visible) and pc N has not. A stop shows
// the instruction that just executed (cycle, pc, disassembly, what it wrote, as in
// the instruction trace) and the next one. Memory shown is the simulator's memory
// at that moment: a DMA in flight delivers its bytes when it completes.
//
// Commands (`help` prints them):
//   break pc N | break N | break mark NAME | break cycle N    set a breakpoint
//   delete [N]            remove breakpoint N (all without N); `breaks` lists them
//   watch SPACE ADDR [BYTES] [pe N]   stop when those bytes change (SPACE: ocm, lrm,
//                         smem, ddr; BYTES default 4); `unwatch [N]`
//   step [N]              execute N instructions (default 1)
//   stepc N               run until the first instruction issuing N cycles later
//   continue | c          run to the next breakpoint, watch or halt; at the terminal,
//                         Ctrl-C stops the run before the next instruction, like gdb
//                         (the prompt returns, state inspectable)
//   regs                  every scalar register; `print xN` one
//   print vN [pe N]       one vector register of one PE (hex, fp32, fp16 halves)
//   vregs [pe N]          the 32 vector registers of one PE (hex)
//   preds                 the predicate registers' active-PE counts
//   mem SPACE ADDR [BYTES] [hex|fp16|f32|int4] [pe N]   a memory range (x is an alias)
//   disasm [PC] [N]       N instructions around PC (default: around the next pc)
//   where                 position, cycle, open marks, DMA queues
//   help, quit
// A program that faults (a runtime error) is reported as faulted, with the error; its
// state stays inspectable but it cannot run on. `break cycle N` for a cycle already
// past is refused (the simulator does not run backwards).
// In a command file an unknown or malformed command is an error (FILE:LINE); at
// the terminal it is printed and the prompt returns. At the end of the commands
// the debugger stops (the program is not run further).
#pragma once
#include <iosfwd>
#include <string>

#include "isa/program.h"
#include "sim/platform.h"

namespace gpnpu::traces {

// Runs `program` on the configured platform under the debugger. `source` names the
// command stream in messages ("" for the terminal: errors are not fatal).
void debug_program(sim::Platform& platform, const isa::Program& program, std::istream& in, std::ostream& out,
                   const std::string& source);

}  // namespace gpnpu::traces
