#!/usr/bin/env python3
"""Medians over runs of the instance-scaling rows (sigbench / lstmbench --instances, with and without
--green): p50 and pooled p99 per model, dtype, placement and instance count, and p99(N) / p99(1).
Usage: tools/instances-table.py LOGDIR   (the logs of gpu-run.sh MLP_INSTANCES=1 INSTANCES=1
INST_GREEN="0 1": mlp_instances_D_K[_green]_R.log, lstm_instances[_green]_R.log)"""
import collections, glob, os, re, statistics, sys

rows = collections.defaultdict(list)   # (model, dtype, placement, n) -> [(p50, p99)]
for path in sorted(glob.glob(os.path.join(sys.argv[1], "*instances*.log"))):
    name = os.path.basename(path)
    green = "_green" in name
    for line in open(path, errors="replace"):
        if "instance(s) at once" not in line:
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        n = int(re.search(r"(\d+) instance\(s\) at once", line).group(1))
        if name.startswith("mlp"):
            model, dtype = "tick_mlp", re.search(r"(f32|f16|bf16) weights", line).group(1)
            p50, p99 = float(cells[2]), float(cells[4])
        else:
            m = re.match(r"(\w+) cuda (\w+) step", cells[0])
            model, dtype = "lstm " + m.group(1), m.group(2)
            p50, p99 = float(cells[1]), float(cells[3])
        rows[(model, dtype, "green" if green else "hardware", n)].append((p50, p99))

print("| model | dtype | placement | instances | runs | p50 (median) | pooled p99 (median) | p99 runs | p99 / 1 instance |")
print("| --- | --- | --- | ---: | ---: | ---: | ---: | --- | ---: |")
for key in sorted(rows, key=lambda k: (k[0], k[1], k[2], k[3])):
    model, dtype, place, n = key
    r = rows[key]
    p50 = statistics.median(x[0] for x in r)
    p99 = statistics.median(x[1] for x in r)
    one = statistics.median(x[1] for x in rows[(model, dtype, place, 1)]) if (model, dtype, place, 1) in rows else None
    ratio = "%.2f" % (p99 / one) if one else ""
    print("| %s | %s | %s | %d | %d | %.2f | %.2f | %s | %s |" % (model, dtype, place, n, len(r), p50, p99,
          " / ".join("%.2f" % x[1] for x in r), ratio))
