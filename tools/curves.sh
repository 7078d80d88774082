#!/usr/bin/env bash
# make curves: the latency curves of docs/perf.md, on loopback, in a minute or two.
#
# Starts build/sigserve with the default config (config/sigserve.json) and a plain ZeroMQ echo
# server (sigload --serve-echo) on a free port, then runs one sigload: an open-loop rate sweep,
# each rate's echo floor step (same client, same message size, same rate) just before it, that
# stops at saturation (achieved < 90% of the target, errors, or p99 above 10x the first step's).
# Writes under $BUILD/curves/:
#   echo-open-<rate>.hgrm, open-<rate>.hgrm   HdrHistogram percentile distributions (us)
#   summary.csv, summary.md                    one row per step; the table sigload printed
#   percentiles.png, latency_vs_throughput.png, plots.gp (and the logs of both servers)
# The plots' titles carry the host, the model, the connections and the date (UTC); the echo floor
# is a dashed curve (its p50 and p99 at each rate). The steps that saturated are off the curves
# and out of the axes' ranges: each is a red triangle at its achieved rate, in a band of notes at
# the top of the graph that says whose doing it was: the server's, or sigload's own (its sender
# fell behind: on a small host the load generator and the server share the CPUs; PROCESSES=2
# spreads the load over two processes). The table says the same, and so do the lines below it.
# The servers are stopped on exit, whatever happens. Without gnuplot, everything but the PNGs is
# written (plots.gp draws them where gnuplot is: "gnuplot plots.gp" in $BUILD/curves).
#
# Knobs (environment): BUILD (build), CONFIG (config/sigserve.json), RATES (requests/s,
# comma-separated), WARMUP and DURATION (seconds per step), CONNECTIONS (sigload's DEALERs; at
# least PROCESSES), THREADS (sigload's worker threads; default: sigload's, one per CPU of its
# affinity mask, at most one per connection), PROCESSES (sigload's --processes, default 1).
set -u
BUILD=${BUILD:-build}
CONFIG=${CONFIG:-config/sigserve.json}
RATES=${RATES:-1000,5000,10000,20000,30000,40000,50000,60000,80000,100000}
WARMUP=${WARMUP:-0.5}
DURATION=${DURATION:-3}
PROCESSES=${PROCESSES:-1}
CONNECTIONS=${CONNECTIONS:-$PROCESSES}
THREADS=${THREADS:-}
OUT=$BUILD/curves

die () { echo "curves: $*" >&2; exit 1; }

for bin in sigserve sigclient sigload; do
    [ -x "$BUILD/$bin" ] || die "$BUILD/$bin is missing: run make first"
done
[ -r "$CONFIG" ] || die "cannot read $CONFIG"
command -v gnuplot >/dev/null 2>&1 ||
    echo "curves: gnuplot is not installed: the data and plots.gp are written, not the PNGs (apt-get install gnuplot-nox)" >&2

# The first endpoint and the first model of the config.
ENDPOINT=$(tr -d '\n' < "$CONFIG" | sed -n 's/.*"endpoints"[[:space:]]*:[[:space:]]*\[[[:space:]]*"\([^"]*\)".*/\1/p')
MODEL=$(tr -d '\n' < "$CONFIG" | sed -n 's/.*"models"[[:space:]]*:[[:space:]]*\[[[:space:]]*{[^}]*"name"[[:space:]]*:[[:space:]]*"\([^"]*\)".*/\1/p')
[ -n "$ENDPOINT" ] || die "no endpoint found in $CONFIG"
[ -n "$MODEL" ] || die "no model found in $CONFIG"

if "$BUILD/sigclient" --endpoint "$ENDPOINT" --timeout 300 health >/dev/null 2>&1; then
    die "something already answers on $ENDPOINT: stop it first (these curves need the machine to themselves)"
fi

free_port () {
    "${PYTHON:-python3}" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' \
        2>/dev/null || echo 5599
}
ECHO=tcp://127.0.0.1:$(free_port)

rm -rf "$OUT"
mkdir -p "$OUT" || die "cannot create $OUT"

# The default config names its weights under ../build/ (relative to config/); with another BUILD,
# run a copy that points at this build's models instead.
if [ "$BUILD" != build ] && grep -q '"\.\./build/' "$CONFIG"; then
    BUILD_ABS=$(cd "$BUILD" && pwd) || die "cannot resolve $BUILD"
    sed "s|\"\.\./build/|\"$BUILD_ABS/|g" "$CONFIG" > "$OUT/sigserve.json" || die "cannot write $OUT/sigserve.json"
    CONFIG=$OUT/sigserve.json
fi

SERVER_PID=
ECHO_PID=
cleanup () {
    for pid in $ECHO_PID $SERVER_PID; do
        kill -TERM "$pid" 2>/dev/null
    done
    for pid in $ECHO_PID $SERVER_PID; do
        wait "$pid" 2>/dev/null
    done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "curves: sigserve --config $CONFIG on $ENDPOINT (model $MODEL), echo floor on $ECHO"
"$BUILD/sigserve" --config "$CONFIG" --log-level warn >"$OUT/sigserve.log" 2>&1 &
SERVER_PID=$!
"$BUILD/sigload" --serve-echo "$ECHO" >"$OUT/echo.log" 2>&1 &
ECHO_PID=$!

ready=0
for _ in $(seq 1 150); do
    kill -0 "$SERVER_PID" 2>/dev/null || { cat "$OUT/sigserve.log" >&2; die "sigserve exited before it was ready"; }
    if "$BUILD/sigclient" --endpoint "$ENDPOINT" --timeout 200 health >/dev/null 2>&1; then
        ready=1
        break
    fi
    sleep 0.2
done
[ $ready -eq 1 ] || die "sigserve was not ready within 30 s ($OUT/sigserve.log)"
kill -0 "$ECHO_PID" 2>/dev/null || { cat "$OUT/echo.log" >&2; die "the echo server did not start"; }

start=$(date +%s)
"$BUILD/sigload" --endpoint "$ENDPOINT" --model "$MODEL" --floor "$ECHO" --rate "$RATES" \
    --warmup "$WARMUP" --duration "$DURATION" --connections "$CONNECTIONS" ${THREADS:+--threads "$THREADS"} \
    --processes "$PROCESSES" --stop-when-saturated --out "$OUT" | tee "$OUT/summary.md"
rc=${PIPESTATUS[0]}
echo "curves: $(( $(date +%s) - start )) s of load; files in $OUT:"
ls -l "$OUT"
# What saturated and whose doing it was, once more under the file list (sigload's lines below its table)
if grep -qE '^[^ |]+: (saturated by|not saturated, but sigload)' "$OUT/summary.md"; then
    echo "curves: what saturated, and whose doing it was:"
    grep -E '^[^ |]+: (saturated by|not saturated, but sigload)' "$OUT/summary.md" | sed 's/^/  /'
fi
# Exit 1 from sigload means errors were seen: expected in the saturated step that ends the sweep.
case $rc in
    0) ;;
    1) echo "curves: sigload saw errors (summary.md lists them); at saturation that is expected" ;;
    *) die "sigload failed (exit $rc)" ;;
esac
exit 0
