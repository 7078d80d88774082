#!/usr/bin/env python3
"""Medians over the rounds of tools/gpu-serving.sh's 'groups' step: for each variant (own workers,
one group) and model count, sigload's p50 and p99 (us) at 40k/s total, and p99 against the same
variant's one-model p99. Usage: groups-medians.py SUMMARY.md"""
import re
import statistics
import sys


def main(path):
    runs = {}       # (variant, n) -> [(p50, p99, errors)]
    for block in re.split(r"^### ", open(path).read(), flags=re.M):
        name = block.split("\n", 1)[0].strip()
        m = re.match(r"groups-(own|group|pairs)-(\d+)-r(\d+)$", name)
        if not m:
            continue
        for line in block.split("\n"):
            c = [x.strip() for x in line.split("|")[1:-1]]
            if len(c) >= 12 and c[0].startswith("open"):
                runs.setdefault((m.group(1), int(m.group(2))), []).append((float(c[5]), float(c[7]), c[-1]))
    print("| variant | models | rounds | p50 | p99 | p99 / one model's |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for variant in ("own", "group", "pairs"):
        base = None
        for n in sorted(k[1] for k in runs if k[0] == variant):
            r = runs[(variant, n)]
            p50 = statistics.median(x[0] for x in r)
            p99 = statistics.median(x[1] for x in r)
            base = base or p99
            print(f"| {variant} | {n} | {len(r)} | {p50:.1f} | {p99:.1f} | {p99 / base:.2f} |")


if __name__ == "__main__":
    main(sys.argv[1])
