"""The layout checkers' exit: problems printed; with --expect FILE (the negative control),
success only when every expected line is among the problems and nothing else is."""


def finish(problems, expect, planted):
    """Returns the exit status. planted: what the fixture plants, for the verdict line."""
    if not expect:
        return 1 if problems else 0
    want = [w for w in open(expect, encoding="utf-8").read().splitlines() if w]
    missing = [w for w in want if not any(w in p for p in problems)]
    for w in missing:
        print(f"negative control: no problem reported containing '{w}'")
    ok = not missing and len(problems) == len(want)
    print(f"negative control: {'the checker sees every planted ' + planted if ok else 'FAILED'}")
    return 0 if ok else 1
