#!/bin/sh
# Draws several sigload sweeps on one chart: p50 and p99 against the achieved rate, one line per
# configuration, the echo floor dashed. Steps that saturated are left out so that they do not
# stretch the axes or turn a line back: sigload's own verdict (summary.csv's saturated column:
# under 90% of the target rate, errors, or p99 over its limit; by the server or by sigload itself),
# or, in a summary.csv of a sigload older than that column, errors, under 90% of the target rate or
# a p99 over 50 ms. Each step left out is listed, with whose doing it was.
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
# rows KIND FILE: "achieved p50 p99 step" of FILE's unsaturated KIND steps; the others, as
# "left out: step (by whom: why)", on stderr
rows () {
    awk -F, -v kind="$1" '
        NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
        $col["kind"] != kind { next }
        {
            if ("saturated" in col)
                sat = $col["saturated"] == 1
            else
                sat = !($col["errors"] == 0 && $col["achieved_rps"] >= 0.9 * $col["target"] && $col["p99_us"] <= 50000)
            if (sat) {
                why = ("saturation" in col) ? $col["saturated_by"] ": " $col["saturation"] : "an older summary.csv"
                print "left out: " $col["step"] " (saturated, by " why ")" > "/dev/stderr"
                next
            }
            print $col["achieved_rps"], $col["p50_us"], $col["p99_us"], $col["step"]
        }' "$2"
}
echo "config,step,achieved_rps,p50_us,p99_us" >"$prefix.csv"
plots50="" plots99=""
first=1
for d in "$@"; do
    name=$(basename "$d")
    rows sigserve "$d/summary.csv" 2>"$tmp/$name.left" >"$tmp/$name.dat"
    sed "s|^left out: |$name: left out: |" "$tmp/$name.left"
    awk -v n="$name" '{ print n "," $4 "," $1 "," $2 "," $3 }' "$tmp/$name.dat" >>"$prefix.csv"
    plots50="$plots50${plots50:+, }'$tmp/$name.dat' using 1:2 with linespoints lw 2 title '$name'"
    plots99="$plots99${plots99:+, }'$tmp/$name.dat' using 1:3 with linespoints lw 2 title '$name'"
    if [ $first = 1 ]; then   # the echo floor of the first sweep (or FLOOR's), beside each of its steps
        rows echo "${FLOOR:-$d}/summary.csv" 2>/dev/null >"$tmp/floor.dat"
        first=0
    fi
done
for q in 50 99; do
    col=2; [ $q = 99 ] && col=3
    eval "plots=\$plots$q"
    [ -s "$tmp/floor.dat" ] && plots="'$tmp/floor.dat' using 1:$col with linespoints lw 2 dt 2 lc rgb 'black' title 'echo floor', $plots"
    gnuplot <<GP
set terminal pngcairo size 1280,800 noenhanced
set output '$prefix-p$q.png'
set title "$title: p$q latency against achieved rate (open loop, from each scheduled send)"
set grid
set key below horizontal
set logscale y
set xlabel 'achieved requests/s'
set ylabel 'p$q latency (us)'
plot $plots
GP
done
