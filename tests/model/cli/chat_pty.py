#!/usr/bin/python3
"""`gpnpu chat` driven through a pseudo-terminal (issue 18): type two questions, read two
answers, recall the second question with the up arrow (the prompt's history) and read
its answer, quit. Usage: chat_pty.py GPNPU [--negative-control]

Passes (exit 0) when both answers come back with their gates passed and /quit ends the
session with exit code 0. With --negative-control the session runs with
--negative-control stale-cache: the second answer must report a gate failure and the
session exit 2; the script exits 0 only then (so a test that cannot see failures fails).
"""
import os
import pty
import re
import select
import sys
import time

gpnpu = sys.argv[1]
negative = "--negative-control" in sys.argv[2:]
args = [gpnpu, "chat", "--model", "synthetic:tiny", "--tokens", "3", "--threads", "2"]
if negative:
    args += ["--negative-control", "stale-cache"]

pid, fd = pty.fork()
if pid == 0:
    os.execv(gpnpu, args)

buf = b""


def read_until(pattern, timeout=240):
    """Reads the terminal until `pattern` (a regex) matches what came since the last call."""
    global buf
    deadline = time.time() + timeout
    while True:
        m = re.search(pattern, buf)
        if m:
            got, buf = buf[: m.end()], buf[m.end():]
            return got.decode(errors="replace")
        left = deadline - time.time()
        if left <= 0:
            sys.exit(f"FAIL: no {pattern!r} within {timeout} s; the terminal showed:\n{buf.decode(errors='replace')}")
        r, _, _ = select.select([fd], [], [], left)
        if r:
            try:
                data = os.read(fd, 4096)
            except OSError:
                data = b""
            if not data:
                sys.exit(f"FAIL: the session ended before {pattern!r}; it showed:\n{buf.decode(errors='replace')}")
            buf += data


def ask(question):
    read_until(rb"you> ")
    os.write(fd, question.encode() + b"\n")
    out = read_until(rb"\[turn \d+:[^\]]*\]")
    answer = re.search(r"assistant: (.*)", out)
    if not answer:
        sys.exit(f"FAIL: no answer to {question!r}:\n{out}")
    print(f"asked {question!r}: answer {answer.group(1).strip()!r}")
    return out


first = ask("What can you do?")
second = ask("Tell me more.")
if not negative:
    # The history: the up arrow brings back the last question, Enter asks it again.
    read_until(rb"you> ")
    os.write(fd, b"\x1b[A")
    read_until(rb"Tell me more\.")
    os.write(fd, b"\n")
    third = read_until(rb"\[turn 3:[^\]]*\]")
    print("the up arrow recalled 'Tell me more.' and turn 3 answered it")
read_until(rb"you> ")
os.write(fd, b"/quit\n")
_, status = os.waitpid(pid, 0)
code = os.waitstatus_to_exitcode(status)
passed = [("gates pass" in t) for t in (first, second)]
print(f"gates passed per answer: {passed}; exit code {code}")
if negative:
    ok = passed == [True, False] and code == 2
    print("negative control:", "the stale cache failed the second answer's gates, as it must" if ok else "NOT caught")
    sys.exit(0 if ok else 1)
sys.exit(0 if passed == [True, True] and code == 0 else 1)
