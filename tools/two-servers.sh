#!/bin/bash
# Diagnostic: two sigserve processes on one GPU, both with "auto" for the demo model (as the
# integration suite's fixture and its second server are): how long the second takes to become
# ready, and which backend each chose. Usage: BUILD=.gpubuild bash tools/two-servers.sh
B=${BUILD:-build}
W=$PWD/$B/models/tick_mlp.safetensors
for port in 5801 5802; do
    cat >/tmp/two-$port.json <<JSON
{ "server": { "endpoints": ["tcp://127.0.0.1:$port"], "log_level": "info", "stats_interval_s": 0 },
  "models": [ { "name": "tick_mlp", "backend": "auto", "max_rows": 8, "weights": "$W",
    "layers": [ { "weight": "0.weight", "bias": "0.bias", "activation": "relu" },
                { "weight": "2.weight", "bias": "2.bias", "activation": "relu" },
                { "weight": "4.weight", "bias": "4.bias" } ] } ] }
JSON
done
start=$(date +%s.%N)
"$B/sigserve" --config /tmp/two-5801.json >/tmp/two-5801.log 2>&1 &
a=$!
for _ in $(seq 1 600); do "$B/sigclient" --endpoint tcp://127.0.0.1:5801 --timeout 200 health 2>/dev/null | grep -q 'ready=1' && break; sleep 0.1; done
echo "first ready after $(echo "$(date +%s.%N) - $start" | awk '{print $1 - $3}') s"
start=$(date +%s.%N)
"$B/sigserve" --config /tmp/two-5802.json >/tmp/two-5802.log 2>&1 &
b=$!
for _ in $(seq 1 600); do "$B/sigclient" --endpoint tcp://127.0.0.1:5802 --timeout 200 health 2>/dev/null | grep -q 'ready=1' && break; sleep 0.1; done
echo "second ready after $(echo "$(date +%s.%N) - $start" | awk '{print $1 - $3}') s"
kill -TERM $a $b; wait
grep -h "backend\|adaptive\|version 1" /tmp/two-5801.log /tmp/two-5802.log | cut -c1-300
