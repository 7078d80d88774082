#!/bin/sh
# Issue 39's first defect on a GPU host: models with "backend": "auto" loaded beside a resident
# (persistent) kernel. Each scenario starts build/sigserve (BUILD) on a config of tick_mlp models,
# waits up to LIMIT seconds (default 30) for every model to be listed, and prints one line: ready in
# N s, or hung (then every thread's stack of sigserve and its device processes, where gdb is, and
# the log's last lines). Scenarios (SCENARIOS, default all):
#   two_auto          two "auto" models
#   three_auto        three "auto" models
#   pinned_then_auto  a persistent model ("cuda", "persistent"), then an "auto" one beside it
#   inproc            the same in the server's process (gpu_processes false)
#   reload            a persistent model, then an "auto" one added by a reload (SIGHUP)
#   reload_graph      a persistent model, then a zero-copy mbyv graph added by a reload (the candidate
#                     that waited beside a resident kernel, configured explicitly)
# Logs under $OUT (default /tmp/auto-gpu). On the host:
#   OUT=$OUT BUILD=.gpubuild sh tools/auto-gpu.sh
set -u
B=${BUILD:-build}
OUT=${OUT:-/tmp/auto-gpu}
LIMIT=${LIMIT:-30}
SCENARIOS=${SCENARIOS:-"two_auto three_auto pinned_then_auto inproc reload reload_graph"}
mkdir -p "$OUT"
WEIGHTS=$PWD/$B/models/tick_mlp.safetensors
EP=tcp://127.0.0.1:5599
SERVER=""

model () {
    printf '{ "name": "%s", "weights": "%s", %s "layers": [ { "weight": "0.weight", "bias": "0.bias", "activation": "relu" }, { "weight": "2.weight", "bias": "2.bias", "activation": "relu" }, { "weight": "4.weight", "bias": "4.bias" } ] }' \
        "$1" "$WEIGHTS" "$2"
}
# config FILE SERVER_EXTRA MODEL_JSON...
config () {
    f=$1 extra=$2
    shift 2
    models=$(printf '%s' "$1"; shift; for m in "$@"; do printf ', %s' "$m"; done)
    printf '{ "server": { "endpoints": ["%s"], "log_level": "debug", "stats_interval_s": 0 %s },\n  "models": [ %s ] }\n' \
        "$EP" "$extra" "$models" >"$f"
}
tree () { echo "$1"; for c in $(pgrep -P "$1"); do tree "$c"; done; }
stacks () {
    for p in $(tree "$SERVER"); do
        echo "--- pid $p ($(tr '\0' ' ' </proc/"$p"/cmdline 2>/dev/null))"
        if command -v gdb >/dev/null 2>&1; then
            gdb -p "$p" -batch -ex "thread apply all bt" 2>/dev/null | grep -E '^#|^Thread'
        else
            for t in /proc/"$p"/task/*; do echo "thread $(basename "$t"): $(cat "$t"/comm) wchan=$(cat "$t"/wchan 2>/dev/null) syscall=$(cut -d' ' -f1 "$t"/syscall 2>/dev/null)"; done
        fi
    done
}
# wait_models N NAME: up to LIMIT s for N models listed; prints the seconds, or returns 1
wait_models () {
    t0=$(date +%s.%N)
    while :; do
        n=$("$B/sigclient" --endpoint "$EP" --timeout 300 models 2>/dev/null | tail -n +2 | grep -c .)
        [ "${n:-0}" -ge "$1" ] && { echo "$t0 $(date +%s.%N)" | awk '{ printf "%.1f", $2 - $1 }'; return 0; }
        kill -0 "$SERVER" 2>/dev/null || return 1
        [ "$(echo "$t0 $(date +%s.%N) $LIMIT" | awk '{ print ($2 - $1 > $3) }')" = 1 ] && return 1
        sleep 0.2
    done
}
start () {
    "$B/sigserve" --config "$1" >"$OUT/$2.log" 2>&1 &
    SERVER=$!
}
finish () {   # finish NAME WHAT RC SECONDS
    if [ "$3" = 0 ]; then
        echo "| $1 | $2 | ready in $4 s |" >>"$OUT/summary.md"
    else
        echo "| $1 | $2 | NOT ready in $LIMIT s |" >>"$OUT/summary.md"
        stacks >"$OUT/$1.stacks" 2>&1
        grep -E "auto|persistent|model" "$OUT/$1.log" | tail -n 12 >>"$OUT/$1.stacks"
    fi
    "$B/sigclient" --endpoint "$EP" models >>"$OUT/$1.log" 2>&1
    for p in $(tree "$SERVER"); do kill -9 "$p" 2>/dev/null; done
    wait "$SERVER" 2>/dev/null
    sleep 1
}

echo "| scenario | what | result |" >"$OUT/summary.md"
echo "| --- | --- | --- |" >>"$OUT/summary.md"
for s in $SCENARIOS; do
    f=$OUT/$s.json
    case $s in
    two_auto)
        config "$f" "" "$(model a '"backend": "auto",')" "$(model b '"backend": "auto",')"
        start "$f" "$s"; secs=$(wait_models 2); finish "$s" "2 auto" $? "$secs" ;;
    three_auto)
        config "$f" "" "$(model a '"backend": "auto",')" "$(model b '"backend": "auto",')" "$(model c '"backend": "auto",')"
        start "$f" "$s"; secs=$(wait_models 3); finish "$s" "3 auto" $? "$secs" ;;
    pinned_then_auto)
        config "$f" "" "$(model a '"backend": "cuda", "kernel": "persistent",')" "$(model b '"backend": "auto",')"
        start "$f" "$s"; secs=$(wait_models 2); finish "$s" "persistent, then auto" $? "$secs" ;;
    inproc)
        config "$f" ', "gpu_processes": false' "$(model a '"backend": "cuda", "kernel": "persistent",')" \
            "$(model b '"backend": "auto",')" "$(model c '"backend": "auto",')"
        start "$f" "$s"; secs=$(wait_models 3); finish "$s" "persistent + 2 auto, gpu_processes false" $? "$secs" ;;
    reload)
        config "$f" "" "$(model a '"backend": "cuda", "kernel": "persistent",')"
        start "$f" "$s"
        if secs=$(wait_models 1); then
            config "$f" "" "$(model a '"backend": "cuda", "kernel": "persistent",')" "$(model b '"backend": "auto",')"
            kill -HUP "$SERVER"
            secs=$(wait_models 2); finish "$s" "auto added by a reload beside a persistent model" $? "$secs"
        else
            finish "$s" "the persistent model alone" 1 ""
        fi ;;
    reload_graph)
        config "$f" "" "$(model a '"backend": "cuda", "kernel": "persistent",')"
        start "$f" "$s"
        if secs=$(wait_models 1); then
            config "$f" "" "$(model a '"backend": "cuda", "kernel": "persistent",')" \
                "$(model b '"backend": "cuda", "kernel": "mbyv", "zero_copy": true,')"
            kill -HUP "$SERVER"
            secs=$(wait_models 2); finish "$s" "zero-copy mbyv graph added by a reload beside a persistent model" $? "$secs"
        else
            finish "$s" "the persistent model alone" 1 ""
        fi ;;
    esac
done
cat "$OUT/summary.md"
