#!/usr/bin/python3
"""Every service module has a suite that names its functions, or a line in its folder's README that
says which suites cover it and why it has none of its own (issue 37 item 8).

A module is a .c file under service/. It is named by a suite when a test source (tests/**/*.c,
tests/**/*.h) names one of the functions or tables it exports (a definition at the start of a
line, not static). Otherwise its folder's README.md must have a line with the file in backquotes,
the words "covered by", and at least one suite in backquotes (`test_x`) that exists in tests/.
Prints each module without either, and "N modules: M named by a suite, K covered by a README line".

Run from the repository root: python3 tests/docs/test_module_suites.py
"""
import glob
import os
import re
import sys

FUNC = re.compile(r"^(?!static)[a-z_][\w \*]*?\b([a-z_]\w*)\s*\([^;{]*\)\s*\{", re.M)
TABLE = re.compile(r"^(?!static)(?:const )?[a-z_]\w*\s+\**([a-z_]\w*)\s*(?:\[[^\]]*\])?\s*=", re.M)
SUITE = re.compile(r"`(test_\w+)`")


def exported(path: str) -> set[str]:
    src = open(path, errors="replace").read()
    return (set(FUNC.findall(src)) | set(TABLE.findall(src))) - {"main"}


def suites() -> set[str]:
    names = set()
    for f in glob.glob("tests/**/test_*", recursive=True):
        names.add(os.path.splitext(os.path.basename(f))[0])
    return names


def readme_line(module: str, known: set[str]) -> str | None:
    """The README line that says which suites cover MODULE, or None."""
    readme = os.path.join(os.path.dirname(module), "README.md")
    if not os.path.exists(readme):
        return None
    name = f"`{os.path.basename(module)}`"
    for line in open(readme, errors="replace"):
        if name in line and "covered by" in line:
            named = SUITE.findall(line[line.index("covered by"):])
            if named and all(n in known for n in named):
                return line
    return None


def main() -> int:
    tests = " ".join(open(f, errors="replace").read()
                     for f in glob.glob("tests/**/*.c", recursive=True) + glob.glob("tests/**/*.h", recursive=True))
    words = set(re.findall(r"\b[a-z_]\w*\b", tests))
    known = suites()
    modules = sorted(glob.glob("service/**/*.c", recursive=True))
    named = covered = 0
    missing = []
    for m in modules:
        if exported(m) & words:
            named += 1
        elif readme_line(m, known):
            covered += 1
        else:
            missing.append(m)
    for m in missing:
        print(f"{m}: no suite names what it exports ({', '.join(sorted(exported(m))[:4]) or 'nothing'}), and "
              f"{os.path.join(os.path.dirname(m), 'README.md')} has no line with `{os.path.basename(m)}` "
              f"\"covered by `test_...`\" naming suites that exist")
    print(f"{len(modules)} modules: {named} named by a suite, {covered} covered by a README line, "
          f"{len(missing)} with neither")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
