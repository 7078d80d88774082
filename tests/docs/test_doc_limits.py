#!/usr/bin/env python3
"""The shapes issue 37 gave the two documents users read most, kept:

  - config/README.md has no line over 400 characters (a short table per object, the long text in a
    section per key below it);
  - docs/perf.md, the current results, is at most 400 lines (the dated lab notes go to docs/lab/);
  - docs/lab/README.md names every file of docs/lab/, and every file it links to exists.

    python3 tests/docs/test_doc_limits.py       (from the repository root; tests/run.sh runs it)

Prints what is wrong, one line each, and exits 1; prints one summary line and exits 0.
"""
import os
import re
import sys

MAX_CONFIG_LINE = 400
MAX_PERF_LINES = 400


def main():
    problems = []
    with open("config/README.md", encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if len(line.rstrip("\n")) > MAX_CONFIG_LINE:
                problems.append(f"config/README.md:{n}: {len(line.rstrip())} characters (at most {MAX_CONFIG_LINE}: "
                                "put the long text in the key's section)")
    with open("docs/perf.md", encoding="utf-8") as f:
        lines = sum(1 for _ in f)
    if lines > MAX_PERF_LINES:
        problems.append(f"docs/perf.md: {lines} lines (at most {MAX_PERF_LINES}: the current results only; "
                        "move the dated notes to docs/lab/)")
    index = open("docs/lab/README.md", encoding="utf-8").read()
    for name in sorted(os.listdir("docs/lab")):
        if name.endswith(".md") and name != "README.md" and name not in index:
            problems.append(f"docs/lab/{name}: not listed in docs/lab/README.md")
    for target in sorted(set(re.findall(r"\]\(([^)#]+)\)", index))):
        if not os.path.exists(os.path.join("docs/lab", target)):
            problems.append(f"docs/lab/README.md links to {target}, which does not exist")
    for p in problems:
        print(p)
    if problems:
        return 1
    print(f"config/README.md within {MAX_CONFIG_LINE} characters a line, docs/perf.md {lines} lines, "
          "docs/lab/README.md lists every lab file")
    return 0


if __name__ == "__main__":
    os.chdir(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    sys.exit(main())
