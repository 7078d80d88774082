#!/bin/sh
# Draws several sigload sweeps on one chart: p50 and p99 against the achieved rate, one line per
# configuration, the echo floor dashed. Steps that saturated (errors, under 90% of the target
# rate, or p99 over 50 ms: a queue that only grows) are left out so they do not stretch the axis.
#
#   FLOOR=DIR sh tools/plot-sweeps.sh OUT_PREFIX "TITLE" DIR1 DIR2 ...
#
# Each DIR holds a sigload summary.csv; the floor is FLOOR's echo steps (default: DIR1's).
#
# Writes OUT_PREFIX-p50.png, OUT_PREFIX-p99.png and OUT_PREFIX.csv (the rows plotted).
set -eu
prefix=$1 title=$2; shift 2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "config,step,achieved_rps,p50_us,p99_us" >"$prefix.csv"
plots50="" plots99=""
first=1
for d in "$@"; do
    name=$(basename "$d")
    awk -F, -v n="$name" 'NR > 1 && $2 == "sigserve" && $8 == 0 && $5 >= 0.9 * $4 && $11 <= 50000 { print $5, $9, $11; print n "," $1 "," $5 "," $9 "," $11 >> "/dev/stderr" }' \
        "$d/summary.csv" >"$tmp/$name.dat" 2>>"$prefix.csv"
    plots50="$plots50${plots50:+, }'$tmp/$name.dat' using 1:2 with linespoints lw 2 title '$name'"
    plots99="$plots99${plots99:+, }'$tmp/$name.dat' using 1:3 with linespoints lw 2 title '$name'"
    if [ $first = 1 ]; then   # the echo floor of the first sweep
        awk -F, 'NR > 1 && $2 == "echo" && $8 == 0 && $5 >= 0.9 * $4 && $11 <= 50000 { print $5, $9, $11 }' \
            "${FLOOR:-$d}/summary.csv" >"$tmp/floor.dat"
        first=0
    fi
done
for q in 50 99; do
    col=2; [ $q = 99 ] && col=3
    eval "plots=\$plots$q"
    gnuplot <<GP
set terminal pngcairo size 1280,800 noenhanced
set output '$prefix-p$q.png'
set title "$title: p$q latency against achieved rate (open loop, from each scheduled send)"
set grid
set key top left
set logscale y
set xlabel 'achieved requests/s'
set ylabel 'p$q latency (us)'
plot '$tmp/floor.dat' using 1:$col with linespoints lw 2 dt 2 lc rgb 'black' title 'echo floor', $plots
GP
done
