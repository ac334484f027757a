#!/usr/bin/python3
"""Every reference in the repository resolves inside it (issue 17, acceptance 3).

Scans every text file under ROOT (default: the repository) and fails, naming file
and line, on
  - a path into the tree (isa/, sim/, kernels/, model/, traces/, tests/, scripts/,
    docs/, examples/, followed by a file name with an extension) that does not exist;
  - a document (NAME.md, or the former private note "testing-notes") that is not in
    the tree (found by path, or by file name anywhere in the tree);
  - an absolute path of a developer machine (a path starting with one of the directories work, home, root, Users or mnt).
Generated and vendored things are not scanned: build*/, node_modules/, .git/, the fuzz
corpora, and this checker's own fixtures (tests/layout/fixtures/: the negative
control runs the checker on them with --root and must fail).
Usage: check_refs.py [--root DIR] [--expect FILE]
  exit 0: clean; 1: problems (listed on stdout). With --expect (the negative control):
  exit 0 only if the problems are exactly one per line of FILE, each containing that line.
"""
import argparse
import os
import re
import sys

import expect  # tests/layout/expect.py, beside this script

TOP = ("isa", "sim", "kernels", "model", "traces", "tests", "scripts", "docs", "examples")
SKIP_DIRS = {".git", "node_modules", "corpus", "fixtures", "__pycache__"}
TREE_PATH = re.compile(r"(?<![\w./${}-])(?:%s)/[\w./-]*\w\.[A-Za-z][\w.]*" % "|".join(TOP))
DOC = re.compile(r"(?<![\w-])([\w./-]*\w)\.md\b")
FORMER_NOTES = re.compile(r"\btesting-notes\b")
ABSOLUTE = re.compile(r"(?<![\w.~$}-])/(?:work|home|root|Users|mnt)/")
TEXT_EXT = {".cpp", ".h", ".def", ".txt", ".md", ".py", ".sh", ".cmake", ".cfg", ".json", ".s", ".yml", ".yaml",
            ".html", ".js", ".toml", ""}


def files(root):
    for d, subdirs, names in os.walk(root):
        rel_d = os.path.relpath(d, root)
        subdirs[:] = sorted(s for s in subdirs if s not in SKIP_DIRS and not s.startswith("build")
                            and not (rel_d == "." and s.startswith(".") and s != ".ci"))
        for n in sorted(names):
            if os.path.splitext(n)[1] in TEXT_EXT:
                yield os.path.join(d, n)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    ap.add_argument("--expect")
    args = ap.parse_args()
    root = os.path.abspath(args.root)
    all_files = list(files(root))
    rels = {os.path.relpath(f, root) for f in all_files}
    basenames = {os.path.basename(r) for r in rels}
    dirs = {os.path.dirname(r) for r in rels}
    problems = []
    for f in all_files:
        rel = os.path.relpath(f, root)
        if os.path.samefile(f, __file__) or os.path.basename(f) == ".git":
            continue  # this checker names what it looks for; a worktree's .git file is git's
        try:
            text = open(f, encoding="utf-8").read()
        except (UnicodeDecodeError, OSError):
            continue
        for no, line in enumerate(text.splitlines(), 1):
            for m in TREE_PATH.finditer(line):
                p = m.group(0).rstrip(".")
                if p.endswith(".md"):
                    continue  # documents: below
                # Patterns and placeholders (tests/<area>/..., model/compiler*.cpp) are not files.
                if any(c in line[m.start():m.end() + 1] for c in "*<>") or p in rels or p in dirs:
                    continue
                stem = os.path.splitext(os.path.basename(p))[0]
                if stem.isupper() or os.path.exists(os.path.join(root, p)) or os.path.exists(os.path.join(root, p + ".gz")):
                    continue  # a placeholder (NAME.cfg), a file, or a file the line gzips
                problems.append(f"{rel}:{no}: '{p}' is not in the repository")
            for m in DOC.finditer(line):
                name = m.group(1) + ".md"
                if name.split("/")[-1].split(".")[0].isupper() and name.split("/")[-1] != "README.md":
                    continue  # a placeholder such as OUT.md
                p = name.lstrip("/")
                if p in rels or os.path.basename(p) in basenames or os.path.exists(os.path.join(os.path.dirname(f), name)):
                    continue
                problems.append(f"{rel}:{no}: document '{name}' is not in the repository")
            if FORMER_NOTES.search(line):
                problems.append(f"{rel}:{no}: 'testing-notes' is not in the repository (docs/testing.md has the rules)")
            for m in ABSOLUTE.finditer(line):
                problems.append(f"{rel}:{no}: absolute path of a developer machine: '{line[m.start():m.start() + 40].split()[0]}'")
    for p in problems:
        print(p)
    print(f"check_refs: {len(all_files)} files, {len(problems)} problem(s)")
    return expect.finish(problems, args.expect, "problem")


if __name__ == "__main__":
    sys.exit(main())
