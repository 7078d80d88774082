#!/usr/bin/env python3
"""Each round's best split over one core, per build and dtype, from sigbench --split logs.

    python3 tools/split-rounds.py DIR BUILD [BUILD ..]

reads DIR/<BUILD>-<round>.txt (round 1, 2, ..., until one is missing), the output of
`sigbench --split A,B.. --split-only` (table 5): in each, per dtype, the "cpu loop <dtype> ... one core"
row's p50 and the least p50 of the "split over" rows after it. Prints per build and dtype the median
ratio, every round's, and in how many rounds it was at most 0.6 (issue 36's 2-core target)."""
import os
import re
import statistics
import sys


def ratios(path):
    one, best, cur = {}, {}, None
    for line in open(path):
        f = [x.strip() for x in line.split('|')]
        if len(f) < 4:
            continue
        m = re.match(r'cpu loop (\w+) .*one core', f[1])
        if m:
            cur = m.group(1)
            one[cur], best[cur] = float(f[2]), float('inf')
        elif f[1].startswith('split over') and cur:
            best[cur] = min(best[cur], float(f[2]))
    return {d: best[d] / one[d] for d in one if best[d] < float('inf')}


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    folder = sys.argv[1]
    for build in sys.argv[2:]:
        per = {}
        r = 1
        while os.path.exists(f'{folder}/{build}-{r}.txt'):
            for d, x in ratios(f'{folder}/{build}-{r}.txt').items():
                per.setdefault(d, []).append(x)
            r += 1
        for d, xs in per.items():
            print(f'{build} {d}: median {statistics.median(xs):.3f}x over {len(xs)} rounds '
                  f'({" ".join(f"{x:.2f}" for x in xs)}), at most 0.6x in {sum(x <= 0.6 for x in xs)}')


if __name__ == '__main__':
    main()
