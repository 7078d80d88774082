#!/usr/bin/env python3
"""Medians over the rounds of tools/gpu-serving.sh's 'core' step: for each variant and rate, the
echo floor's and the server's p50 and p99 (us), what the server adds over the floor of its own
sigload call, and sigload's server mean. Usage: core-medians.py SUMMARY.md"""
import re
import statistics
import sys


def main(path):
    text = open(path).read()
    runs = {}       # (variant, rate) -> [(floor p50, p99, server p50, p99, server mean)]
    for block in re.split(r"^### ", text, flags=re.M):
        name = block.split("\n", 1)[0].strip()
        m = re.match(r"core-(.+)-(\d+k)-r(\d+)$", name)
        if not m:
            continue
        floor = serv = None
        for line in block.split("\n"):
            c = [x.strip() for x in line.split("|")[1:-1]]
            if len(c) < 12 or not c[0].startswith(("echo-open", "open")):
                continue
            row = (float(c[5]), float(c[7]), c[10])
            if c[0].startswith("echo-"):
                floor = row
            else:
                serv = row
        if floor and serv:
            runs.setdefault((m.group(1), m.group(2)), []).append((floor[0], floor[1], serv[0], serv[1], float(serv[2])))
    print("| variant | rate | rounds | floor p50 | p50 | p50 - floor | floor p99 | p99 | p99 - floor | server mean |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for (variant, rate), rs in sorted(runs.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        med = [statistics.median(x[i] for x in rs) for i in range(5)]
        d50 = statistics.median(x[2] - x[0] for x in rs)
        d99 = statistics.median(x[3] - x[1] for x in rs)
        print(f"| {variant} | {rate}/s | {len(rs)} | {med[0]:.1f} | {med[2]:.1f} | {d50:+.1f} | {med[1]:.1f} | {med[3]:.1f} "
              f"| {d99:+.1f} | {med[4]:.1f} |")


if __name__ == "__main__":
    main(sys.argv[1])
