// Debugger (acceptance 3): command files that use every command, on known.s whose
// trace is known line by line (test_insn_trace.cpp), so each stop can be checked.
#include <fcntl.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <sstream>

#include "isa/error.h"
#include "sim/platform.h"
#include "trace_test_util.h"
#include "traces/debugger.h"

namespace gpnpu::traces::test {
namespace {

const std::string kKnown = std::string(GPNPU_SOURCE_DIR) + "/tests/traces/programs/known.s";

std::string debug(const std::string& commands, const char* source = "cmds") {
  isa::Program prog = isa::Program::load(kKnown);
  sim::Platform& p = sim::Platform::get();
  p.configure(sim::Config::make("mini", {}), false);
  std::istringstream in(commands);
  std::ostringstream out;
  debug_program(p, prog, in, out, source);
  return out.str();
}

// Asserts `needles` appear in `text` in this order.
void expect_in_order(const std::string& text, const std::vector<std::string>& needles) {
  size_t pos = 0;
  for (const std::string& n : needles) {
    size_t at = text.find(n, pos);
    ASSERT_NE(at, std::string::npos) << "missing (in order): " << n << "\n--- output ---\n" << text;
    pos = at + n.size();
  }
}

TEST(Debugger, EveryCommand) {
  std::string out = debug(R"(help
break mark body
break pc 8
break cycle 12
watch smem 8
watch ocm 0x40 4
breaks
disasm 5 4
continue
where
step
step 2
print x2
regs
delete 1
stepc 3
print v2 pe 1
vregs pe 2
preds
continue
unwatch 4
continue
mem ocm 0x40 12 hex
mem ocm 0x40 8 int4
mem smem 8 4 f32
mem lrm 0 4 fp16 pe 1
x ddr 0 8
print p
continue
step
where
quit
)");
  expect_in_order(out, {
      "gpnpu debug:", "stopped before pc 0",
      "break pc N | break N | break mark NAME | break cycle N",  // help
      "breakpoint 1: mark \"body\" begins",
      "breakpoint 2: before pc 8 `vadd.i32 v3, v2, v2`",
      "breakpoint 3: cycle 12",
      "watch 4: smem[0x8,+4) = 00 00 00 00",
      "watch 5: ocm[0x40,+4) = 00 00 00 00",
      "breakpoint 1: mark \"body\"", "breakpoint 2: pc 8", "breakpoint 3: cycle 12", "watch 4: smem[0x8,+4)",
      "     5  addi x2, x2, 4", "     6  mark.end \"body\"",  // disasm 5 4 (pcs 3..6)
      // continue: mark.begin at cycle 3 opens "body"
      "stopped before pc 4 (breakpoint 1: mark \"body\" begins)",
      "executed:          3 ctrl   pc=3     mark.begin \"body\"",
      "next:     pc=4 loop x1, L6",
      "before pc 4 `loop x1, L6` (last issue at cycle 3, 4 instructions executed)", "marks: body", "dma queued: c0=0",
      "stopped before pc 5 (step)",                     // step: the loop
      "stopped before pc 5 (step)", "=> x2=0x00000108",  // step 2: two addi
      "x2 = 0x00000108 = 264 = 264u",
      "x0  0x00000000", "x1  0x00000003", "x2  0x00000108",
      "breakpoint 1 removed",
      // stepc 3 from cycle 6: vadd at cycle 9 is the first to issue at >= 9, and the
      // breakpoint before pc 8 fires on the same stop
      "stopped before pc 8 (stepc: cycle 9 >= 9; breakpoint 2: pc 8)",
      "v2 of PE 1:", "hex  0000000e 0000000e", "f32  1.96182e-44",
      "vector registers of PE 2:", "v1  00000007 00000007", "v2  0000000e",
      "p0 16 PEs  p1 0 PEs",
      // continue: sw at cycle 12 (breakpoint 3) writes smem 8 (watch 4)
      "stopped before pc 10 (breakpoint 3: cycle 12; watch 4: smem[0x8,+4) changed: 00 00 00 00 -> 0c 01 00 00)",
      "watch 4 removed",
      // continue: the ogather writes 0x1c of PEs 0..2 at 0x40, 0x44, 0x48
      "stopped before pc 13 (watch 5: ocm[0x40,+4) changed: 00 00 00 00 -> 1c 00 00 00)",
      "ocm [0x40, 0x4c) as hex:", "0x00000040: 1c 00 00 00 1c 00 00 00 1c 00 00 00",
      "ocm [0x40, 0x48) as int4:", "0x00000040: c 1 0 0 0 0 0 0 c 1",
      "smem [0x8, 0xc) as f32:", "0x00000008: 3.75548e-43",
      "lrm [0x0, 0x4) of PE 1 as fp16:", "0x00000000: 0 0",
      "ddr [0x0, 0x8) as hex:", "00 00 00 00 00 00 00 00",
      "p0 16 PEs  p1 3 PEs",
      "program halted:", "16 instructions",
      "the program has halted", "halted after cycle 16",
  });
}

TEST(Debugger, QuitAndEndOfCommandsStopTheRun) {
  std::string out = debug("break 5\ncontinue\nquit\n");
  EXPECT_NE(out.find("stopped before pc 5 (breakpoint 1: pc 5)"), std::string::npos) << out;
  EXPECT_EQ(out.find("program halted"), std::string::npos) << out;
  out = debug("step 3\n");
  EXPECT_NE(out.find("(end of commands)"), std::string::npos) << out;
  EXPECT_EQ(out.find("program halted"), std::string::npos) << out;
  // The platform is usable afterwards: a plain run halts normally.
  out = debug("continue\n");
  EXPECT_NE(out.find("program halted:"), std::string::npos) << out;
}

TEST(Debugger, CommandFileErrorsNameTheLine) {
  auto err = [](const std::string& cmds) {
    try {
      debug(cmds, "script.dbg");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(err("step\nfrobnicate\n"), "script.dbg:2: unknown command 'frobnicate' (try `help`)");
  EXPECT_EQ(err("break pc 99\n"), "script.dbg:1: break: pc 99 is past the program's 14 instructions");
  EXPECT_EQ(err("mem ocm 0x3fffe 4\n"),
            "script.dbg:1: ocm [0x3fffe, 0x40002) is out of range: the ocm has 0x40000 bytes");
  EXPECT_EQ(err("break mark nosuch\n"), "script.dbg:1: break mark: the program has no mark \"nosuch\"");
  EXPECT_EQ(err("print v3 pe 99\n"), "script.dbg:1: PE 99 does not exist (the array has 16 PEs)");
  EXPECT_EQ(err("step\nstep\nmem lrm 0 4 hex pe x\n"), "script.dbg:3: PE 'x' is not a number (decimal or 0x hex)");
}

TEST(Debugger, CliReadsACommandFile) {
  std::string cmds = temp_path("cmds.dbg"), out;
  write_text(cmds, "# a comment\nbreak mark body\ncontinue\nprint x1\ncontinue\n");
  EXPECT_EQ(run_cli("debug " + kKnown + " --preset mini --commands " + cmds, out), 0) << out;
  expect_in_order(out, {"(gpnpu) break mark body", "stopped before pc 4", "x1 = 0x00000003", "program halted"});
  EXPECT_EQ(run_cli("debug " + kKnown + " --preset mini --commands /nonexistent", out), 1);
  EXPECT_NE(out.find("cannot open debugger command file '/nonexistent'"), std::string::npos) << out;
}

TEST(Debugger, AFaultIsCalledAFaultAndStateStaysInspectable) {
  isa::Program prog = isa::assemble("li x1, 5\nli x2, 0x7fff0\nlw x3, 0(x2)\nhalt\n", "fault.s");
  sim::Platform& p = sim::Platform::get();
  p.configure(sim::Config::make("mini", {}), false);
  std::istringstream in("continue\nprint x1\nwhere\ncontinue\nstep\n");
  std::ostringstream out;
  EXPECT_THROW(debug_program(p, prog, in, out, "cmds"), Error);
  expect_in_order(out.str(), {"the program faulted after 2 instructions", "it cannot run on",
                              "x1 = 0x00000005", "faulted: ", "the last instruction that completed was pc 1",
                              "the program faulted (`where` says where); it cannot run on",
                              "the program faulted (`where` says where); it cannot run on"});
  EXPECT_EQ(out.str().find("halted"), std::string::npos) << out.str();
}

TEST(Debugger, BreakAtAPastCycleIsRefused) {
  std::string out = debug("step 5\nbreak cycle 2\nbreak cycle 1000\ncontinue\n", "");
  expect_in_order(out, {"stopped before pc 5",
                        "error: break cycle 2: that cycle is past (the last instruction issued at cycle ",
                        "breakpoint 1: cycle 1000", "program halted"});
  // Before the run starts, every cycle is ahead.
  out = debug("break cycle 0\ncontinue\nquit\n", "");
  EXPECT_NE(out.find("breakpoint 1: cycle 0"), std::string::npos) << out;
}

// Ctrl-C through a pseudo-terminal, as a person at the keyboard: `continue` on an
// endless loop, Ctrl-C stops it and the (gpnpu) prompt returns; the state is
// inspectable (x1 counts the iterations run), `continue` goes on from there and a
// second Ctrl-C stops it further on; `quit` ends the session with exit status 0.
class Pty {
 public:
  Pty(const std::vector<std::string>& argv) {
    pid_ = forkpty(&fd_, nullptr, nullptr, nullptr);
    if (pid_ == 0) {
      std::vector<char*> a;
      for (const std::string& s : argv) a.push_back(const_cast<char*>(s.c_str()));
      a.push_back(nullptr);
      execv(a[0], a.data());
      _exit(127);
    }
  }
  ~Pty() {
    if (pid_ > 0 && !reaped_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (fd_ >= 0) close(fd_);
  }
  bool ok() const { return pid_ > 0; }
  void send(const std::string& s) { ASSERT_EQ(write(fd_, s.data(), s.size()), ssize_t(s.size())); }
  // Everything the child prints until `want` appears after the text already read (or
  // the timeout); the text read so far in `all`.
  std::string until(const std::string& want, double seconds) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    const size_t from = all.size();
    while (all.find(want, from) == std::string::npos && std::chrono::steady_clock::now() < end) {
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, 100) <= 0) continue;
      char buf[4096];
      ssize_t n = read(fd_, buf, sizeof buf);
      if (n <= 0) break;
      all.append(buf, size_t(n));
    }
    return all.substr(from);
  }
  int wait_exit(double seconds) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    int st = 0;
    while (std::chrono::steady_clock::now() < end) {
      until("\x01never", 0.1);  // drain the output so the child never blocks on a full pty
      if (waitpid(pid_, &st, WNOHANG) == pid_) {
        reaped_ = true;
        return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      }
    }
    return -1;
  }
  std::string all;

 private:
  int fd_ = -1;
  pid_t pid_ = -1;
  bool reaped_ = false;
};

uint32_t x1_of(const std::string& text) {
  size_t at = text.rfind("x1 = 0x");
  return at == std::string::npos ? 0 : uint32_t(std::stoul(text.substr(at + 7, 8), nullptr, 16));
}

TEST(Debugger, CtrlCStopsAContinueAndThePromptReturns) {
  const std::string spin = std::string(GPNPU_SOURCE_DIR) + "/tests/traces/programs/spin.s";
  Pty t({GPNPU_BINARY, "debug", spin, "--preset", "mini"});
  ASSERT_TRUE(t.ok());
  ASSERT_NE(t.until("(gpnpu) ", 60).find("stopped before pc 0"), std::string::npos) << t.all;
  t.send("continue\n");
  // Running: no prompt comes back by itself.
  EXPECT_EQ(t.until("(gpnpu) ", 1.0).find("(gpnpu) "), std::string::npos) << t.all;
  t.send("\x03");  // Ctrl-C: the pty's line discipline sends SIGINT
  std::string stop = t.until("(gpnpu) ", 30);
  ASSERT_NE(stop.find("(interrupted (Ctrl-C))"), std::string::npos) << t.all;
  EXPECT_NE(stop.find("executed:"), std::string::npos) << stop;
  t.send("print x1\n");
  std::string first = t.until("(gpnpu) ", 30);
  const uint32_t n1 = x1_of(first);
  EXPECT_GT(n1, 0u) << first;
  t.send("where\n");
  EXPECT_NE(t.until("(gpnpu) ", 30).find("before pc "), std::string::npos) << t.all;
  t.send("continue\n");
  t.until("(gpnpu) ", 0.5);
  t.send("\x03");
  ASSERT_NE(t.until("(gpnpu) ", 30).find("(interrupted (Ctrl-C))"), std::string::npos) << t.all;
  t.send("print x1\n");
  const uint32_t n2 = x1_of(t.until("(gpnpu) ", 30));
  EXPECT_GT(n2, n1) << t.all;  // it went on from where it stopped
  t.send("quit\n");
  EXPECT_EQ(t.wait_exit(30), 0) << t.all;
}

// Negative control: without a terminal (a command file) there is no handler, and a
// SIGINT ends the process as it always did.
TEST(Debugger, CtrlCWithACommandFileEndsTheProcess) {
  std::string cmds = temp_path("spin.dbg");
  write_text(cmds, "continue\n");
  const std::string spin = std::string(GPNPU_SOURCE_DIR) + "/tests/traces/programs/spin.s";
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    int devnull = open("/dev/null", O_WRONLY);
    dup2(devnull, 1);
    dup2(devnull, 2);
    execl(GPNPU_BINARY, GPNPU_BINARY, "debug", spin.c_str(), "--preset", "mini", "--commands", cmds.c_str(),
          (char*)nullptr);
    _exit(127);
  }
  usleep(1500 * 1000);
  kill(pid, SIGINT);
  int st = 0;
  waitpid(pid, &st, 0);
  EXPECT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGINT) << st;
}

}  // namespace
}  // namespace gpnpu::traces::test
