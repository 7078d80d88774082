#!/usr/bin/env python3
"""Every file of the source folders is named in a README, so that the folder READMEs stay true.

The folders: service/, transport/, clients/, kernels/, tools/, tests/ and deploy/, and every folder
under them. Each of those seven has a README.md. A file must be named in the README.md of its own
folder; a folder without a README.md is covered by the nearest one above it, which names the file
by its path from there (tools/README.md names `peers/peer.py`). A name is a whole word of the
README, in backticks or not; `zmtp_wire.{h,c}` names both files. Left out: README.md itself, dot
files, and the contents of a folder called corpus/ (fuzzing inputs, data), which the README above
it must name as `corpus/` instead.

    python3 tests/docs/test_readmes.py       (from the repository root; tests/run.sh runs it)

Prints each file that no README names, and exits 1; prints one summary line and exits 0 when every
file is named. The files are git's (tracked, and untracked but not ignored); without git, those on
disk outside __pycache__.
"""
import os
import re
import subprocess
import sys

ROOTS = ["service", "transport", "clients", "kernels", "tools", "tests", "deploy"]
DATA = "corpus"


def files():
    """Paths relative to the repository root, under ROOTS."""
    try:
        out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "--", *ROOTS],
                             capture_output=True, text=True, check=True).stdout.split("\n")
        paths = [p for p in out if p and os.path.exists(p)]
    except (OSError, subprocess.CalledProcessError):
        paths = []
        for root in ROOTS:
            for d, dirs, names in os.walk(root):
                dirs[:] = [x for x in dirs if x != "__pycache__" and not x.startswith(".")]
                paths += [os.path.join(d, n) for n in names if not n.endswith((".pyc", ".o", ".d"))]
    return sorted(set(p.replace(os.sep, "/") for p in paths))


def expand(token):
    """`a.{h,c}` -> a.h, a.c (one brace group, possibly nested no deeper)."""
    m = re.search(r"\{([^{}]*)\}", token)
    if not m:
        return [token]
    return [x for alt in m.group(1).split(",") for x in expand(token[:m.start()] + alt + token[m.end():])]


def names_in(text):
    """Every word of a README that could name a file, braces expanded."""
    words = set()
    for span in re.findall(r"`([^`]+)`", text):
        for w in span.split():
            words.update(expand(w.strip(",;:()")))
    for w in re.findall(r"[\w./{},@+-]+", text):
        w = w.strip(".,;:()")
        if "{" in w and "}" not in w:
            continue
        words.update(expand(w))
    return words | {w.rstrip("/") for w in words}


def main():
    problems, cache, count = [], {}, 0
    for root in ROOTS:
        if not os.path.isfile(os.path.join(root, "README.md")):
            problems.append(f"{root}/: no README.md")
    entries = []
    for path in files():
        parts = path.split("/")
        if parts[-1] == "README.md" or any(p.startswith(".") for p in parts):
            continue
        if DATA in parts[:-1]:                   # fuzzing inputs: their folder is named instead
            parts = parts[:parts.index(DATA) + 1]
        if parts not in entries:
            entries.append(parts)
    for parts in entries:
        path = "/".join(parts)
        count += 1
        # the nearest README.md, from the entry's own folder up to its root
        for depth in range(len(parts) - 1, 0, -1):
            readme = "/".join(parts[:depth] + ["README.md"])
            if os.path.isfile(readme):
                break
        else:
            problems.append(f"{path}: no README.md in its folder or above it")
            continue
        if readme not in cache:
            cache[readme] = names_in(open(readme, encoding="utf-8").read())
        rel = "/".join(parts[depth:])
        if not {rel, rel + "/", path} & cache[readme]:
            problems.append(f"{path}: not named in {readme} (as `{rel}`)")
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} file(s) no README names; each folder's README.md lists its files, one line each")
        return 1
    print(f"every one of {count} files in {', '.join(r + '/' for r in ROOTS)} is named in its folder's README")
    return 0


if __name__ == "__main__":
    os.chdir(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    sys.exit(main())
