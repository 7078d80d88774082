#!/bin/sh
# Issue 38's measurement on a GPU host: a model served by sigserve-test (the build with POST
# /debug/fault) under open-loop load from sigload, a fault injected part way, and what the clients
# saw: every request's status counted (sigload), every OK output checked against the same model run
# on the CPU before the load (--expect), the latency percentiles of the step that holds the fault
# (p99 during the switch) beside a step without one, and the server's fault metrics.
#
#   BUILD=.gpubuild OUT=/tmp/fd sh tools/fault-drive.sh
#
# CASES (default "warp:trap warp:kill warp:hang persistent:trap persistent:kill persistent:hang"):
# each KERNEL:FAULT (KERNEL cpu: the model on the CPU in the test build's CPU device process, which
# needs no GPU: "cpu:kill" runs anywhere) serves tick_mlp with "backend": "cuda", "kernel": KERNEL, INSTANCES instances
# (default 1) and MODEL_EXTRA (more model keys, e.g. '"fallback": "off",'), SERVER_EXTRA (server
# keys, e.g. '"standby": false,'); RATE (default 3k) requests/s for SECONDS (default 6) with the
# fault posted FAULT_AT seconds in (default 2). Per case: $OUT/<case>/ (config, server log, sigload
# table, metrics before and after); a table last: requests, OK, UNAVAILABLE, other errors, p50 /
# p99 / max of the faulted step, p99 of the clean step, the time from the fault's injection to the
# GPU instance serving again (the server log's "injecting a fault" to its "back after"), how the
# loss was seen (the "lost (...)" reason), and the metrics that say what happened.
set -u
BUILD=${BUILD:-build}
OUT=${OUT:-/tmp/fault-drive}
RATE=${RATE:-3k}
SECONDS_=${SECONDS:-6}
FAULT_AT=${FAULT_AT:-2}
INSTANCES=${INSTANCES:-1}
PORT=${PORT:-5571}
HTTP=${HTTP:-9471}
WEIGHTS=$(cd "$(dirname "${WEIGHTS:-$BUILD/models/tick_mlp.safetensors}")" && pwd)/$(basename "${WEIGHTS:-tick_mlp.safetensors}")
mkdir -p "$OUT"
table="$OUT/table.md"
echo "| case | requests | OK | UNAVAILABLE | other | faulted p50 / p99 / max us | clean p99 us | fault to GPU back ms | loss seen as | metrics after |" >"$table"
echo "| --- | ---: | ---: | ---: | ---: | --- | ---: | ---: | --- | --- |" >>"$table"

http () {   # http METHOD PATH: the body on stdout
    python3 - "$1" "http://127.0.0.1:$HTTP$2" <<'PY'
import sys, urllib.request
req = urllib.request.Request(sys.argv[2], method=sys.argv[1], data=b"" if sys.argv[1] == "POST" else None)
try:
    print(urllib.request.urlopen(req, timeout=10).read().decode())
except Exception as e:
    print("http error: %s" % e)
PY
}

layers='"layers": [ { "weight": "0.weight", "bias": "0.bias", "activation": "relu" }, { "weight": "2.weight", "bias": "2.bias", "activation": "relu" }, { "weight": "4.weight", "bias": "4.bias" } ]'
model () {  # model NAME KEYS
    echo "{ \"name\": \"$1\", \"weights\": \"$WEIGHTS\", $2 $layers }"
}

# the reference: the model on the CPU, 64 requests of one row
mkdir -p "$OUT/ref"
cat >"$OUT/ref/config.json" <<JSON
{ "server": { "endpoints": ["tcp://127.0.0.1:$PORT"] }, "models": [ $(model tick_mlp '"backend": "cpu",') ] }
JSON
"$BUILD/sigserve" --config "$OUT/ref/config.json" >"$OUT/ref/server.log" 2>&1 &
pid=$!
python3 - "$OUT/ref/features.txt" <<'PY'
import random, sys
random.seed(38)
with open(sys.argv[1], "w") as f:
    for _ in range(64):
        f.write(" ".join("%.7g" % random.uniform(-1, 1) for _ in range(512)) + "\n")
PY
: >"$OUT/ref/expected.txt"
for i in $(seq 1 100); do
    "$BUILD/sigclient" --endpoint "tcp://127.0.0.1:$PORT" --timeout 200 health >/dev/null 2>&1 && break
    sleep 0.1
done
ok=0
for i in $(seq 1 64); do
    sed -n "${i}p" "$OUT/ref/features.txt" >"$OUT/ref/one.txt"
    "$BUILD/sigclient" --endpoint "tcp://127.0.0.1:$PORT" --timeout 10000 infer --model tick_mlp --file "$OUT/ref/one.txt" \
        >"$OUT/ref/one.out" 2>>"$OUT/ref/client.log" || break
    grep -E '^-?[0-9]' "$OUT/ref/one.out" | head -n 1 >>"$OUT/ref/expected.txt"
    ok=$((ok + 1))
done
kill -TERM $pid; wait $pid 2>/dev/null
[ "$ok" = 64 ] || { echo "fault-drive: the CPU reference failed (see $OUT/ref)"; cat "$OUT/ref/client.log" | tail -3; exit 1; }

for c in ${CASES:-warp:trap warp:kill warp:hang persistent:trap persistent:kill persistent:hang}; do
    kernel=${c%%:*}; fault=${c#*:}; d="$OUT/$kernel-$fault"; mkdir -p "$d"
    keys="\"backend\": \"cuda\", \"kernel\": \"$kernel\","; flags=""; device=0
    if [ "$kernel" = cpu ]; then    # no GPU: the test build's CPU device process (CI's fault route)
        keys='"backend": "cpu",'; flags=--test-cpu-device-process; device=cpu
    fi
    cat >"$d/config.json" <<JSON
{ "server": { "endpoints": ["tcp://127.0.0.1:$PORT"], "http": "127.0.0.1:$HTTP", ${SERVER_EXTRA:-} "log_level": "info" },
  "models": [ $(model tick_mlp "$keys \"instances\": $INSTANCES, ${MODEL_EXTRA:-}") ] }
JSON
    "$BUILD/sigserve-test" $flags --config "$d/config.json" >"$d/server.log" 2>&1 &
    pid=$!
    up=0
    for i in $(seq 1 300); do
        http GET /readyz 2>/dev/null | grep -qi "ready\|ok" && { up=1; break; }
        kill -0 $pid 2>/dev/null || break
        sleep 0.1
    done
    if [ $up = 0 ]; then
        echo "| $kernel:$fault | server did not start: $(tail -n 1 "$d/server.log" | cut -c1-120) | | | | | | | | |" >>"$table"
        kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null; continue
    fi
    load () {   # load NAME: one step of RATE for SECONDS_
        "$BUILD/sigload" --endpoint "tcp://127.0.0.1:$PORT" --model tick_mlp --rate "$RATE" --warmup 1 --duration "$SECONDS_" \
            --features "$OUT/ref/features.txt" --expect "$OUT/ref/expected.txt" --tolerance 1e-3 --timeout 5000 --quiet \
            --out "$d/$1" >"$d/$1.md" 2>&1
    }
    load clean
    http GET /metrics >"$d/metrics_before.txt"
    load faulted &
    lpid=$!
    sleep $((1 + FAULT_AT))
    http POST "/debug/fault?device=$device&kind=$fault" >"$d/fault.txt"
    wait $lpid
    sleep 1
    http GET /metrics >"$d/metrics_after.txt"
    kill -TERM $pid; wait $pid 2>/dev/null
    row=$(python3 - "$d" <<'PY'
import csv, re, sys
d = sys.argv[1]
def step(name):
    try:
        return next(csv.DictReader(open("%s/%s/summary.csv" % (d, name))))
    except Exception:
        return {}
f, c = step("faulted"), step("clean")
def g(r, *keys):
    for k in keys:
        if k in r:
            return r[k]
    return "-"
text = open("%s/faulted.md" % d).read()
m_ = re.search(r"STATUS_UNAVAILABLE:([0-9]+)", g(f, "errors_by_status")); unavail = m_.group(1) if m_ else 0
# from the injection's log line to the GPU instance serving again (the server's clock), and how
# the loss was seen (the lost line's reason)
from datetime import datetime
def when(line):
    return datetime.strptime(line[:26], "%Y-%m-%dT%H:%M:%S.%f")
injected = back = None; seen_as = "-"
for line in open("%s/server.log" % d, errors="replace"):
    if "injecting a fault" in line and injected is None:
        injected = when(line)
    elif injected and " lost (" in line and seen_as == "-":
        seen_as = line.split(" lost (", 1)[1].split(");", 1)[0][:70].replace("|", "/")
    elif injected and "back after" in line and back is None:
        back = when(line)
to_back = "%.1f" % ((back - injected).total_seconds() * 1e3) if injected and back else "-"
m = open("%s/metrics_after.txt" % d).read()
keep = []
for line in m.splitlines():
    if re.match(r"sigserve_(device_losses_total|device_restarts_total|device_recovery_seconds|lost_requests_total|fallback_total|fallback_active|device_standby)", line):
        keep.append(line.replace("sigserve_", ""))
print("| %s | %s | %s | %s | %s | %s / %s / %s | %s | %s | %s | %s |" % (
    d.rsplit("/", 1)[1], g(f, "requests", "sent"), g(f, "ok"), unavail, int(g(f, "errors") if g(f, "errors") != "-" else 0) - int(unavail),
    g(f, "p50_us", "p50"), g(f, "p99_us", "p99"), g(f, "max_us", "max"), g(c, "p99_us", "p99"), to_back, seen_as,
    "; ".join(keep)[:600]))
PY
)
    echo "$row" >>"$table"
    echo "fault $kernel:$fault: $(cat "$d/fault.txt" | head -c 200)" >>"$OUT/faults.txt"
done
cat "$table"
