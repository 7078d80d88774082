#!/usr/bin/env python3
"""The house rules, checked over the source and the built objects (make check runs it). In service/:

  - service/ holds main.c and folders, nothing else of C at its top level;
  - every folder says what it is: a README.md, or a header comment in each of its headers;
  - no file in service/ is longer than 700 lines;
  - the layers, lowest first: base, weights, backends (backends/cuda with it), serving, front, ops,
    then main.c. A file includes headers of its own layer and the ones below only, and an object
    calls (references a symbol defined by) objects of its own layer and the ones below only;
  - whether the server has CUDA is decided in one place, the build (backends/gpu_load.c, which
    opens backends/cuda/ as libsigserve-cuda.so, or backends/no_gpu.c): no SIGSERVE_HAVE_CUDA in
    service/;
  - no call cycle between service modules: a module is one .c file's object, and A -> B when A
    references a symbol B defines (nm). A cycle means two files that cannot be understood, tested
    or replaced one without the other;
  - the same for clients/ (libsigclient, the sigclient CLI, sigload) and tools/: no call cycle
    between their modules either;
  - no source file elsewhere (C, CUDA, Python, shell: kernels/, clients/, tools/, tests/, common/,
    transport/, support/) is longer than 900 lines: split it by subject. A file another change is
    splitting is named in SPLIT_ELSEWHERE: said, not counted, until that change lands.

    python3 tools/check-house.py [BUILD]      (BUILD: the build folder, default build)

Prints what is wrong, one line each, and exits 1; prints one summary line and exits 0 when all is
well. Objects that were not built (the CUDA ones without nvcc) are left out of the call checks.
"""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SERVICE = os.path.join(ROOT, "service")
LAYERS = ["base", "weights", "backends", "serving", "front", "ops"]
MAX_LINES = 700
# The source folders whose files' lengths are checked (service/ against MAX_LINES, the rest against
# TREE_MAX_LINES), and what counts as a source file there.
TREE = ["service", "kernels", "clients", "tools", "tests", "common", "transport", "support"]
TREE_EXT = (".c", ".h", ".cu", ".cuh", ".cc", ".py", ".sh")
TREE_MAX_LINES = 900
# Files another change is splitting; said, not counted, until it lands. Remove a name once its file
# is under the limit: the check then says it is stale. (Empty since issue 37 split the benchmarks.)
SPLIT_ELSEWHERE = set()
# The folders whose objects are checked for call cycles besides service/ (which has its layers too).
CALL_FOLDERS = ["clients", "tools"]


def layer_of(rel):
    """rel: a path under service/ ("front/server.c"); main.c is above every layer."""
    top = rel.split("/")[0]
    return LAYERS.index(top) if top in LAYERS else len(LAYERS)


def sources():
    for d, _, files in os.walk(SERVICE):
        for f in sorted(files):
            if f.endswith((".c", ".h")):
                yield os.path.relpath(os.path.join(d, f), SERVICE)


def check_tree(problems):
    for f in sorted(os.listdir(SERVICE)):
        if f.endswith((".c", ".h")) and f != "main.c":
            problems.append(f"service/{f}: only main.c lives at the top of service/; put it in its layer's folder")
    for d, dirs, files in os.walk(SERVICE):
        if d == SERVICE:
            continue
        rel = os.path.relpath(d, SERVICE)
        headers = [f for f in files if f.endswith(".h")]
        if "README.md" in files:
            continue
        bare = [h for h in headers if not open(os.path.join(d, h)).read().lstrip().startswith("/*")]
        if not headers or bare:
            problems.append(f"service/{rel}/: no README.md, and {'no header' if not headers else ', '.join(bare)} "
                            "without a header comment saying what it is")
    for rel in sources():
        if "SIGSERVE_HAVE_CUDA" in open(os.path.join(SERVICE, rel)).read():
            problems.append(f"service/{rel}: asks SIGSERVE_HAVE_CUDA; the build decides (backends/backends.h)")


def check_includes(problems):
    inc = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
    for rel in sources():
        own = layer_of(rel)
        for h in inc.findall(open(os.path.join(SERVICE, rel)).read()):
            path = os.path.join(SERVICE, h)
            if not os.path.exists(path):
                continue        # common/, kernels/, generated headers: below every layer
            if layer_of(h) > own:
                problems.append(f"service/{rel}: includes {h}, a layer above its own "
                                f"({LAYERS[layer_of(h)] if layer_of(h) < len(LAYERS) else 'main'} over "
                                f"{LAYERS[own] if own < len(LAYERS) else 'main'})")


def symbols(obj):
    out = subprocess.run(["nm", "-g", "--defined-only", obj], capture_output=True, text=True).stdout
    defined = {line.split()[-1] for line in out.splitlines() if len(line.split()) >= 3}
    out = subprocess.run(["nm", "-g", "--undefined-only", obj], capture_output=True, text=True).stdout
    used = {line.split()[-1] for line in out.splitlines() if line.split()}
    return defined, used


def cycles(edges):
    """Tarjan's strongly connected components of EDGES (module -> set of modules): those of two or
    more modules, each sorted."""
    index, low, stack, on, comps, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            comps.append(comp)

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return [sorted(c) for c in comps if len(c) > 1]


def call_graph(mods):
    """MODS: module -> (defined, used). The symbols' owners and the edges A -> B (A uses a symbol
    B defines)."""
    owner = {}
    for m, (defined, _) in mods.items():
        for s in defined:
            owner[s] = m
    edges = {m: set() for m in mods}
    for m, (_, used) in mods.items():
        for s in used:
            o = owner.get(s)
            if o and o != m:
                edges[m].add(o)
    return owner, edges


def report_cycles(mods, owner, edges, prefix, problems):
    for comp in cycles(edges):
        why = []
        for a in comp:
            for b in sorted(edges[a] & set(comp)):
                calls = sorted(s for s in mods[a][1] if owner.get(s) == b)
                why.append(f"{a} -> {b} ({', '.join(calls[:4])}{', ...' if len(calls) > 4 else ''})")
        problems.append("call cycle between " + ", ".join(f"{prefix}{c}.c" for c in comp) + ": " + "; ".join(why))


def check_calls(build, problems):
    objdir = os.path.join(ROOT, build, "obj", "service")
    if not os.path.isdir(objdir):
        problems.append(f"{build}/obj/service: not built (make all first)")
        return 0
    mods = {}
    for rel in sources():
        if rel.endswith(".c"):
            obj = os.path.join(objdir, rel[:-2] + ".o")
            if os.path.exists(obj):
                mods[rel[:-2]] = symbols(obj)
    owner, edges = call_graph(mods)
    for m in sorted(edges):
        for o in sorted(edges[m]):
            if layer_of(o) > layer_of(m):
                for s in sorted(s for s in mods[m][1] if owner.get(s) == o):
                    problems.append(f"service/{m}.c calls {s} of service/{o}.c, a layer above its own")
    report_cycles(mods, owner, edges, "service/", problems)
    return len(mods)


def check_folder_calls(build, folder, problems):
    """No call cycle between the modules (one .c file's object each) of FOLDER (clients/, tools/),
    its subfolders included: a program's files (sigload's) and a library's (libsigclient's) alike."""
    mods = {}
    for d, _, files in os.walk(os.path.join(ROOT, folder)):
        for f in sorted(files):
            if not f.endswith(".c"):
                continue
            rel = os.path.relpath(os.path.join(d, f), ROOT)
            obj = os.path.join(ROOT, build, "obj", rel[:-2] + ".o")
            if os.path.exists(obj):
                mods[rel[:-2]] = symbols(obj)
    owner, edges = call_graph(mods)
    report_cycles(mods, owner, edges, "", problems)
    return len(mods)


def tree_sources():
    for top in TREE:
        for d, dirs, files in os.walk(os.path.join(ROOT, top)):
            dirs[:] = sorted(x for x in dirs if x not in ("__pycache__",))
            for f in sorted(files):
                if f.endswith(TREE_EXT):
                    yield os.path.relpath(os.path.join(d, f), ROOT)


def check_sizes(problems, notes):
    """Every source file of the tree within its limit: MAX_LINES in service/, TREE_MAX_LINES elsewhere."""
    seen = set()
    for rel in tree_sources():
        limit = MAX_LINES if rel.startswith("service/") else TREE_MAX_LINES
        with open(os.path.join(ROOT, rel), errors="replace") as f:
            n = sum(1 for _ in f)
        if n <= limit:
            continue
        seen.add(rel)
        if rel in SPLIT_ELSEWHERE:
            notes.append(f"{rel}: {n} lines, over {limit}: being split by another change (SPLIT_ELSEWHERE)")
        else:
            problems.append(f"{rel}: {n} lines, over {limit}: split it by subject")
    for rel in sorted(SPLIT_ELSEWHERE - seen):
        problems.append(f"{rel}: in SPLIT_ELSEWHERE but within its limit (or gone): take it out of the list")


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    problems, notes = [], []
    check_tree(problems)
    check_includes(problems)
    check_sizes(problems, notes)
    n = check_calls(build, problems)
    others = sum(check_folder_calls(build, folder, problems) for folder in CALL_FOLDERS)
    for p in notes:
        print("house: note: " + p)
    for p in problems:
        print("house: " + p)
    if problems:
        print(f"house: {len(problems)} problem(s)")
        return 1
    print(f"house: ok ({n} objects, layers {' < '.join(LAYERS)} < main, no cycle; {others} objects of "
          f"{' and '.join(f + '/' for f in CALL_FOLDERS)}, no cycle; no file over {MAX_LINES} lines in service/, "
          f"{TREE_MAX_LINES} elsewhere)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
