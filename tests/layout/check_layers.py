#!/usr/bin/python3
"""Every #include follows the documented library graph (issue 17, acceptance 1).

Reads the table between "<!-- layers" and "<!-- end of layers -->" in
docs/architecture.md (library, target, folders, may include), then every source file
(.h, .cpp, .def) under isa/ sim/ kernels/ model/ traces/ tests/ of ROOT, and fails,
naming file and line, on
  - an include of one of our files that the including file's library may not include;
  - an include of one of our files that does not exist;
  - a source file that no library of the table owns.
A file belongs to the library whose folder is the longest prefix of its path.
"may include" lists libraries (or single files, in backquotes); "nothing of ours" and
"everything" are what they say; a library may always include itself.
Usage: check_layers.py [--root DIR] [--doc FILE] [--expect FILE] [--graph]
  --graph also prints the include graph as found (library: the libraries it includes).
  exit 0: clean; 1: problems (listed on stdout). With --expect (the negative control):
  exit 0 only if the problems are exactly one per line of FILE, each containing that line.
"""
import argparse
import os
import re
import sys

import expect  # tests/layout/expect.py, beside this script

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_TOPS = ("isa", "sim", "kernels", "model", "traces", "tests")
SKIP_DIRS = {"fixtures", "corpus", "__pycache__"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def read_table(doc):
    text = open(doc, encoding="utf-8").read()
    m = re.search(r"<!-- layers.*?-->\n(.*?)<!-- end of layers -->", text, re.S)
    if not m:
        sys.exit(f"check_layers: no layers table in {doc}")
    libs = {}
    for line in m.group(1).splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 4 or cells[0] in ("library", "") or set(cells[0]) <= set("-"):
            continue
        name, _, folders, may = cells
        folders = [f.strip().strip("`") for f in folders.split(",")]
        if may == "nothing of ours":
            allowed = set()
        elif may == "everything":
            allowed = None
        else:
            allowed = {a.strip().strip("`") for a in may.split(",")}
        libs[name] = (folders, allowed)
    return libs


def owner(path, libs):
    best, best_len = None, -1
    for name, (folders, _) in libs.items():
        for f in folders:
            if (path == f or (f.endswith("/") and path.startswith(f))) and len(f) > best_len:
                best, best_len = name, len(f)
    return best


def sources(root):
    for top in SOURCE_TOPS:
        for d, subdirs, names in os.walk(os.path.join(root, top)):
            subdirs[:] = sorted(s for s in subdirs if s not in SKIP_DIRS)
            for n in sorted(names):
                if n.endswith((".h", ".cpp", ".def")):
                    yield os.path.relpath(os.path.join(d, n), root)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", default=os.path.join(HERE, "..", ".."))
    ap.add_argument("--doc", help="the document with the table (default ROOT/docs/architecture.md)")
    ap.add_argument("--expect")
    ap.add_argument("--graph", action="store_true")
    args = ap.parse_args()
    root = os.path.abspath(args.root)
    libs = read_table(args.doc or os.path.join(root, "docs", "architecture.md"))
    problems, files, edges = [], 0, {}
    for rel in sources(root):
        files += 1
        me = owner(rel, libs)
        if me is None:
            problems.append(f"{rel}: no library of the table owns this file")
            continue
        allowed = libs[me][1]
        for no, line in enumerate(open(os.path.join(root, rel), encoding="utf-8", errors="replace"), 1):
            m = INCLUDE.match(line)
            if not m:
                continue
            inc = m.group(1)
            if inc.split("/")[0] not in SOURCE_TOPS:
                continue  # a file beside this one (tests' helpers) or a generated one
            if not os.path.exists(os.path.join(root, inc)):
                problems.append(f"{rel}:{no}: includes \"{inc}\", which does not exist")
                continue
            them = owner(inc, libs)
            edges.setdefault(me, set()).add(them)
            if them == me or allowed is None or them in allowed or inc in allowed:
                continue
            problems.append(f"{rel}:{no}: {me} may not include \"{inc}\" ({them}); "
                            f"{me} may include: {', '.join(sorted(allowed)) or 'nothing of ours'} (docs/architecture.md)")
    for p in problems:
        print(p)
    if args.graph:
        for name in libs:
            print(f"  {name} -> {', '.join(sorted(edges.get(name, set()) - {name})) or '(nothing of ours)'}")
    print(f"check_layers: {files} files, {len(problems)} problem(s)")
    return expect.finish(problems, args.expect, "bad include")


if __name__ == "__main__":
    sys.exit(main())
