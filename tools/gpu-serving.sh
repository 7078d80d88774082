#!/bin/bash
# The serving measurements of docs/perf.md on a lent GPU host, over TCP loopback with sigload:
# the echo floor, latency-vs-throughput sweeps for CPU and CUDA with 1, 2 and 4 instances with
# and without batching, the >= 200k/s configuration, 1 -> 8 models, low load against the floor
# (default, busy-polling, persistent), the peers (PyTorch CUDA graph and eager, ONNX Runtime),
# keep-warm, metrics scraped vs not, the GPU-bound model of examples/gpu-bound on 1 and 2 GPUs
# (gpus), and tick_mlp on 1 vs 2 GPUs (gpus-tick). Binaries and libraries come from
# tools/gpu-libs.sh (.gpubuild, .devlibs); pyzmq for the peers as a wheel in .whl; the gpus step
# makes its weights with python3 (numpy or torch, examples/gpu-bound/make-weights.py).
#
#   OUT=... STEPS="floor sweeps scale fronts models lowload dtypes peers warm metrics core gpus gpus-tick transport transport-tput" bash tools/gpu-serving.sh
#
# Every step writes its sigload tables to $OUT/logs/<step>.log; a summary table is printed last.
# Cores: the host has 16 (x2 host: 32). sigload runs on the last 8, servers on the first ones
# (SERVER_CPUS, where the gpus step pins its workers).
set -u
OUT=${OUT:-/tmp/gpu-serving}
B=${BUILD:-.gpubuild}
export LD_LIBRARY_PATH="$PWD/.devlibs:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
STEPS=${STEPS:-"floor sweeps scale models lowload peers warm metrics"}
WARMUP=${WARMUP:-0.5}
DURATION=${DURATION:-2}
NCPU=$(nproc)
LOAD_CPUS=${LOAD_CPUS:-$((NCPU - 8))-$((NCPU - 1))}
SERVER_CPUS=${SERVER_CPUS:-0-$((NCPU - 9))}
GPUS_OUTSTANDING=${GPUS_OUTSTANDING:-64}     # gpus: the closed loop's requests in flight, every row
GPUS_DURATION=${GPUS_DURATION:-5}           # gpus: seconds measured a row
GPU_BOUND_DIR=${GPU_BOUND_DIR:-/tmp/gpu-bound}  # gpus: where its 545 MB of weights are made (kept for a next call)
LOGS=$OUT/logs
mkdir -p "$LOGS" "$OUT/curves"
SUMMARY=$OUT/summary.md
: >"$SUMMARY"
WEIGHTS=$PWD/$B/models/tick_mlp.safetensors
ECHO=tcp://127.0.0.1:56000
PIDS=""

cleanup () { for p in $PIDS; do kill -TERM "$p" 2>/dev/null; done; wait 2>/dev/null; }
trap cleanup EXIT

if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        && export PYTHONPATH=/tmp/site
fi

# config NAME SERVER_JSON MODELS_JSON: writes /tmp/NAME.json
config () {
    printf '{ "server": { "log_level": "warn", "stats_interval_s": 0, %s },\n  "models": [ %s ] }\n' "$2" "$3" >"/tmp/$1.json"
}
# model NAME EXTRA_JSON: a tick_mlp model object
model () {
    printf '{ "name": "%s", "weights": "%s", %s "layers": [ { "weight": "0.weight", "bias": "0.bias", "activation": "relu" }, { "weight": "2.weight", "bias": "2.bias", "activation": "relu" }, { "weight": "4.weight", "bias": "4.bias" } ] }' \
        "$1" "$WEIGHTS" "$2"
}
# tiny_model NAME EXTRA_JSON: tick_mlp's last layer alone (64 -> 1, 260 bytes of weights): a model whose
# compute (~0.1 us) and cache footprint vanish, so what is left is the serving core's own cost
tiny_model () {
    printf '{ "name": "%s", "weights": "%s", %s "layers": [ { "weight": "4.weight", "bias": "4.bias" } ] }' \
        "$1" "$WEIGHTS" "$2"
}
# serve NAME CPUS: starts sigserve on /tmp/NAME.json pinned to CPUS, waits until it answers
serve () {
    taskset -c "$2" "$B/sigserve" --config "/tmp/$1.json" >"$LOGS/sigserve_$1.log" 2>&1 &
    SERVER=$!
    PIDS="$PIDS $SERVER"
    for _ in $(seq 1 300); do
        # the models and their kernels ("persistent-nvrtc": specialised) into the server's log
        "$B/sigclient" --endpoint "${3:-tcp://127.0.0.1:5555}" --timeout 200 health >/dev/null 2>&1 \
            && { "$B/sigclient" --endpoint "${3:-tcp://127.0.0.1:5555}" models >>"$LOGS/sigserve_$1.log" 2>&1; return 0; }
        kill -0 "$SERVER" 2>/dev/null || { echo "sigserve $1 died: $(tail -n 3 "$LOGS/sigserve_$1.log")"; return 1; }
        sleep 0.2
    done
    return 1
}
stop () { kill -TERM "$SERVER" 2>/dev/null; wait "$SERVER" 2>/dev/null; }
# gpu_bound_config NAME INSTANCES DEVICES WEIGHTS: /tmp/NAME.json, examples/gpu-bound/sigserve.json
# with INSTANCES instances over DEVICES ("0" or "0,1"; instance i on the (i mod n)-th), WEIGHTS, no
# shedding by time (a closed loop holds at most GPUS_OUTSTANDING requests) and each worker pinned
# to a CPU of its own among SERVER_CPUS, one next to its GPU where sysfs says which: the default
# placement (the GPU's NUMA node) could put a spinning worker on sigload's CPUs. Prints the placement.
gpu_bound_config () {
    python3 - "$1" "$2" "$3" "$4" "$SERVER_CPUS" <<'PY'
import json, subprocess, sys
name, instances, devices, weights, server_cpus = sys.argv[1:6]


def cpulist(text):
    out = []
    for part in text.strip().split(","):
        if part:
            a, _, b = part.partition("-")
            out += range(int(a), int(b or a) + 1)
    return out


allowed = cpulist(server_cpus)
devices = [int(d) for d in devices.split(",")]
near = {}       # GPU index -> the CPUs of its NUMA node that the server may use
try:
    query = subprocess.run(["nvidia-smi", "--query-gpu=index,pci.bus_id", "--format=csv,noheader"],
                           capture_output=True, text=True, check=False).stdout
    for line in query.splitlines():
        index, bus = (f.strip() for f in line.split(","))
        bus = bus.lower()[-12:]         # 00000000:3B:00.0 -> 0000:3b:00.0, as sysfs names it
        with open(f"/sys/bus/pci/devices/{bus}/numa_node") as f:
            node = int(f.read())
        if node >= 0:
            with open(f"/sys/devices/system/node/node{node}/cpulist") as f:
                near[int(index)] = [c for c in cpulist(f.read()) if c in allowed]
except (OSError, ValueError):
    pass
cpus = []
for i in range(int(instances)):
    free = [c for c in near.get(devices[i % len(devices)], []) + allowed if c not in cpus]
    cpus.append(free[0] if free else allowed[i % len(allowed)])
with open("examples/gpu-bound/sigserve.json") as f:
    config = json.load(f)
config["server"].update({"log_level": "warn", "stats_interval_s": 0})
config["models"][0].update({"instances": int(instances), "devices": devices, "weights": weights, "cpus": cpus,
                            "max_queue_us": 60000000})
with open(f"/tmp/{name}.json", "w") as f:
    json.dump(config, f, indent=1)
print(f"{name}: {instances} instance(s) over GPU(s) {devices}, workers on CPUs {cpus}; "
      f"the GPUs' NUMA CPUs among {server_cpus}: {near or 'unknown'}")
PY
}
# run_load NAME ARGS...: one sigload run (with --floor, an echo step beside each step): its table in
# $LOGS/NAME.log, its CSV in $OUT/curves/NAME/summary.csv
run_load () {
    name=$1; shift
    taskset -c "$LOAD_CPUS" "$B/sigload" --warmup "$WARMUP" --duration "$DURATION" "$@" --out "$OUT/curves/$name" \
        >"$LOGS/$name.log" 2>&1
}
# load NAME ARGS...: run_load, its table kept in the summary
load () {
    run_load "$@"
    { echo "### $1"; grep -E '^\| (echo-)?(open|closed)|^saturated|^\| step' "$LOGS/$1.log"; echo; } >>"$SUMMARY"
}

{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv; nvcc --version | tail -n 2
  uname -r; nproc; grep -m1 'model name' /proc/cpuinfo; date -u; } >"$OUT/env.txt" 2>&1

taskset -c "${ECHO_CPUS:-6,7}" "$B/sigload" --serve-echo "$ECHO" >"$LOGS/echo.log" 2>&1 &
PIDS="$PIDS $!"
sleep 1

for step in $STEPS; do
case $step in
floor)      # the echo server alone, to saturation
    load floor --endpoint "$ECHO" --echo --rate 20k,50k,100k,150k,200k,250k,300k --connections 8 --stop-when-saturated
    ;;
sweeps)     # CPU and CUDA, 1/2/4 instances, batching on (64) and off (1)
    for backend in cpu cuda; do for inst in 1 2 4; do for mbr in 1 64; do
        name=$backend-i$inst-b$mbr
        extra="\"backend\": \"$backend\", \"instances\": $inst, \"max_rows\": 16, \"max_batch_rows\": $mbr, \"queue_depth\": 1024,"
        [ "$backend" = cuda ] && extra="$extra \"kernel\": \"fused\", \"zero_copy\": false,"
        config "$name" '"endpoints": ["tcp://127.0.0.1:5555"], "io_threads": 2' "$(model tick_mlp "$extra")"
        serve "$name" 0-5 || continue
        load "$name" --endpoint tcp://127.0.0.1:5555 --model tick_mlp --floor "$ECHO" --connections 8 \
            --rate 20k,50k,100k,150k,200k,250k --stop-when-saturated
        stop
    done; done; done
    ;;
scale)      # >= 200k single-row requests/s: endpoints, io_threads, instances, batching
    for ep in 2 4; do
        eps=""; sl=""
        for i in $(seq 0 $((ep - 1))); do eps="$eps${eps:+, }\"tcp://127.0.0.1:$((5560 + i))\""; sl="$sl --endpoint tcp://127.0.0.1:$((5560 + i))"; done
        config "scale-e$ep" "\"endpoints\": [$eps], \"io_threads\": 4" \
            "$(model tick_mlp '"backend": "cpu", "instances": 4, "max_batch_rows": 64, "queue_depth": 4096,')"
        serve "scale-e$ep" 0-7 tcp://127.0.0.1:5560 || continue
        load "scale-e$ep" $sl --model tick_mlp --connections 16 --threads 8 --io-threads 2 \
            --rate 100k,150k,200k,250k,300k,350k --stop-when-saturated
        stop
    done
    ;;
fronts)     # issue 18 item 4: single-row tick_mlp (CPU, 4 instances, batching up to 64 rows) from two sigload
            # processes over 2 endpoints, fronts 1 and 2 (and 4 endpoints with fronts 4), to saturation;
            # the echo floor from the same two processes: the usual echo (one thread, two endpoints) and
            # two echo processes (a thread each, as two fronts have). Server on CPUs 0-7, load on 8-15.
    taskset -c 4 "$B/sigload" --serve-echo tcp://127.0.0.1:56010 >"$LOGS/echo-a.log" 2>&1 &
    PIDS="$PIDS $!"
    taskset -c 5 "$B/sigload" --serve-echo tcp://127.0.0.1:56011 >"$LOGS/echo-b.log" 2>&1 &
    PIDS="$PIDS $!"
    taskset -c 6,7 "$B/sigload" --serve-echo tcp://127.0.0.1:56020 --serve-echo tcp://127.0.0.1:56021 \
        >"$LOGS/echo-one.log" 2>&1 &
    PIDS="$PIDS $!"
    sleep 1
    rates=${FRONTS_RATES:-100k,150k,200k,250k,300k,350k,400k,450k}
    load fronts-echo-one --endpoint tcp://127.0.0.1:56020 --endpoint tcp://127.0.0.1:56021 --echo --processes 2 \
        --connections 16 --threads 8 --io-threads 2 --rate "$rates" --stop-when-saturated
    load fronts-echo-two --endpoint tcp://127.0.0.1:56010 --endpoint tcp://127.0.0.1:56011 --echo --processes 2 \
        --connections 16 --threads 8 --io-threads 2 --rate "$rates" --stop-when-saturated
    for v in ${FRONTS_VARIANTS:-f1 f2 f2-i6 f4}; do
        eps='"tcp://127.0.0.1:5560", "tcp://127.0.0.1:5561"'; sl="--endpoint tcp://127.0.0.1:5560 --endpoint tcp://127.0.0.1:5561"
        inst=4
        case $v in
            f1) s='"io_threads": 2' ;;
            f2) s='"fronts": 2, "io_threads": 1' ;;
            f2-i6) s='"fronts": 2, "io_threads": 1'; inst=6 ;;
            f4*) s='"fronts": 4, "io_threads": 1'; inst=2; [ "$v" = f4-i4 ] && inst=4
                eps="$eps, \"tcp://127.0.0.1:5562\", \"tcp://127.0.0.1:5563\""
                sl="$sl --endpoint tcp://127.0.0.1:5562 --endpoint tcp://127.0.0.1:5563" ;;
        esac
        config "fronts-$v" "\"endpoints\": [$eps], $s" \
            "$(model tick_mlp "\"backend\": \"cpu\", \"instances\": $inst, \"max_batch_rows\": 64, \"queue_depth\": 4096,")"
        serve "fronts-$v" 0-7 tcp://127.0.0.1:5560 || continue
        load "fronts-$v" $sl --model tick_mlp --processes 2 --connections 16 --threads 8 --io-threads 2 \
            --rate "$rates" --stop-when-saturated
        ps -L -o tid,comm,psr,time -p "$SERVER" >"$LOGS/fronts-threads-$v.txt" 2>&1    # which thread used the CPU
        stop
    done
    ;;
models)     # 1 -> 8 models at once, the same total rate
    for n in 1 2 4 8; do
        ms=""; names=""
        for i in $(seq 1 "$n"); do
            ms="$ms${ms:+, }$(model "m$i" "\"backend\": \"cpu\", \"cpus\": [$(( (i - 1) % 6 ))],")"
            names="$names${names:+,}m$i"
        done
        config "models-$n" '"endpoints": ["tcp://127.0.0.1:5555"], "io_threads": 2, "cpus": [6]' "$ms"
        serve "models-$n" 0-6 || continue
        load "models-$n" --endpoint tcp://127.0.0.1:5555 --model "$names" --connections 8 --rate 40k
        stop
    done
    ;;
groups)     # issue 18 item 2: 1 -> 8 models at the same total 40k/s, each model its own worker ("own") against
            # one group for all ("group": a worker for every model), GROUPS_ROUNDS interleaved rounds
            # (tools/groups-medians.py); the front on CPU 6, the workers on 0-5 as in `models`.
            # GROUPS_VARIANTS adds "pairs" (models 1-2, 3-4, ... share a worker: two models' weights fit
            # a core's L2). GROUPS_MODEL=tiny: tick_mlp's last layer alone (tiny_model), to tell the serving core's
            # share from the models' (eight tick_mlp hold 4.7 MB of weights, over a core's L2)
    for round in $(seq 1 "${GROUPS_ROUNDS:-3}"); do
        for n in 1 2 4 8; do
            for v in ${GROUPS_VARIANTS:-own group}; do
                ms=""; names=""
                for i in $(seq 1 "$n"); do
                    g=""; [ "$v" = group ] && g='"group": "all",'
                    [ "$v" = pairs ] && g="\"group\": \"g$(( (i + 1) / 2 ))\","    # two models a worker
                    mk=model; [ "${GROUPS_MODEL:-}" = tiny ] && mk=tiny_model
                    ms="$ms${ms:+, }$($mk "m$i" "\"backend\": \"cpu\", $g")"
                    names="$names${names:+,}m$i"
                done
                config "groups-$v-$n" '"endpoints": ["tcp://127.0.0.1:5555"], "io_threads": 2, "cpus": [6]' "$ms"
                serve "groups-$v-$n" 0-6 || continue
                load "groups-$v-$n-r$round" --endpoint tcp://127.0.0.1:5555 --model "$names" --connections 8 --rate 40k
                stop
            done
        done
    done
    ;;
dtypes)     # issue 36: tick_mlp on the CPU loop in each weight dtype (DTYPES, default f32 bf16 int8) at 2k/s, one
            # connection, busy-polled front and worker on cores of their own, the echo floor in the same run: the
            # server's own time is p50 - floor p50, and a lower dtype should take off what its kernel saves (sigbench);
            # DTYPE-split4 (e.g. bf16-split4): the model split over cpus 3, 4, 5 and 1 ("split": "on"), the front on 2
    for d in ${DTYPES:-f32 bf16 int8}; do
        cpus='[3]'; split=''
        case $d in *-split4) cpus='[3, 4, 5, 1]'; split='"split": "on",' ;; esac
        config "dtype-$d" '"endpoints": ["tcp://127.0.0.1:5555"], "busy_poll": true, "cpus": [2]' \
            "$(model tick_mlp "\"backend\": \"cpu\", \"weight_dtype\": \"${d%-split4}\", \"cpus\": $cpus, $split")"
        serve "dtype-$d" 0-5 || continue
        load "dtype-$d" --endpoint tcp://127.0.0.1:5555 --model tick_mlp --floor "$ECHO" --connections 1 --rate 2k
        stop
    done
    ;;
lowload)    # 10k/s against the echo floor in the same run
    for v in default busypoll fused-zc persistent; do
        case $v in
            default) s='"endpoints": ["tcp://127.0.0.1:5555"]'; m='"backend": "cpu",' ;;
            busypoll) s='"endpoints": ["tcp://127.0.0.1:5555"], "busy_poll": true, "cpus": [2]'; m='"backend": "cpu", "cpus": [3],' ;;
            fused-zc) s='"endpoints": ["tcp://127.0.0.1:5555"], "busy_poll": true, "cpus": [2]'; m='"backend": "cuda", "kernel": "fused", "zero_copy": true, "cpus": [3],' ;;
            persistent) s='"endpoints": ["tcp://127.0.0.1:5555"], "busy_poll": true, "cpus": [2]'; m='"backend": "cuda", "kernel": "persistent", "cpus": [3],' ;;
        esac
        config "low-$v" "$s" "$(model tick_mlp "$m")"
        serve "low-$v" 0-5 || continue
        load "low-$v" --endpoint tcp://127.0.0.1:5555 --model tick_mlp --floor "$ECHO" --connections 1 --rate 10k
        stop
    done
    ;;
peers)      # what a user would pick instead, same protocol, same client
    for engine in torch-graph torch-eager onnx-cpu; do
        taskset -c 0-3 python3 tools/peers/peer.py --engine "$engine" --weights "$WEIGHTS" --endpoint tcp://127.0.0.1:5600 \
            >"$LOGS/peer_$engine.log" 2>&1 &
        peer=$!
        PIDS="$PIDS $peer"
        for _ in $(seq 1 150); do
            "$B/sigclient" --endpoint tcp://127.0.0.1:5600 --timeout 200 health >/dev/null 2>&1 && break
            sleep 0.2
        done
        load "peer-$engine" --endpoint tcp://127.0.0.1:5600 --model tick_mlp --floor "$ECHO" --connections 8 \
            --rate 1k,2k,5k,10k,20k,40k --stop-when-saturated
        kill -TERM "$peer"; wait "$peer" 2>/dev/null
    done
    ;;
warm)       # keep-warm: a request every 20 ms, off and on
    for kw in 0 1000; do
        config "warm-$kw" '"endpoints": ["tcp://127.0.0.1:5555"]' "$(model tick_mlp "\"backend\": \"cpu\", \"keep_warm_us\": $kw,")"
        serve "warm-$kw" 0-3 || continue
        load "warm-$kw" --endpoint tcp://127.0.0.1:5555 --model tick_mlp --connections 1 --rate 50 --duration 20
        stop
    done
    ;;
metrics)    # metrics on and scraped every second, against off, same run
    for m in off on; do
        http=""; [ "$m" = on ] && http=', "http": "127.0.0.1:9464"'
        config "metrics-$m" "\"endpoints\": [\"tcp://127.0.0.1:5555\"]$http" "$(model tick_mlp '"backend": "cpu",')"
        serve "metrics-$m" 0-3 || continue
        scraper=""
        if [ "$m" = on ]; then
            ( while :; do python3 -c 'import urllib.request; urllib.request.urlopen("http://127.0.0.1:9464/metrics").read()' \
                2>/dev/null; sleep 1; done ) &
            scraper=$!
        fi
        load "metrics-$m" --endpoint tcp://127.0.0.1:5555 --model tick_mlp --floor "$ECHO" --connections 1 --rate 10k \
            --duration 5
        [ -n "$scraper" ] && kill "$scraper"
        stop
    done
    ;;
core)       # issue 18: the default config (tick_mlp on the CPU) against the echo floor in the same sigload
            # call at 1k/s and 10k/s, server.inline_us 0 (every request handed to a worker) vs the
            # default, and the same with busy_poll at 10k/s, CORE_ROUNDS interleaved rounds (medians:
            # tools/core-medians.py); the model in process (sigbench); the CPU an idle server uses;
            # three 15 ms stalls (SIGSTOP) during 10k/s, counting what is shed.
    taskset -c 1 "$B/sigbench" --weights "$WEIGHTS" --cpu 1 --iterations 20000 >"$LOGS/core-inprocess.log" 2>&1
    { echo "### core-inprocess"; grep -E '^\|' "$LOGS/core-inprocess.log"; echo; } >>"$SUMMARY"
    for round in $(seq 1 "${CORE_ROUNDS:-5}"); do
        for v in ${CORE_VARIANTS:-handoff default busypoll-handoff busypoll}; do
            s='"endpoints": ["tcp://127.0.0.1:5555"]'; m='"backend": "cpu",'; rates=${CORE_RATES:-"1k 10k"}
            case $v in busypoll*) s="$s, \"busy_poll\": true, \"cpus\": [2]"; m="$m \"cpus\": [3],"; rates=10k ;; esac
            case $v in spin*) s="$s, \"spin_us\": ${v#spin}" ;; esac     # spinN: spin_us N
            case $v in *handoff) s="$s, \"inline_us\": 0" ;; esac
            config "core-$v" "$s" "$(model tick_mlp "$m")"
            serve "core-$v" 0-5 || continue
            for rate in $rates; do      # the floor at each rate, in the same sigload call
                load "core-$v-$rate-r$round" --endpoint tcp://127.0.0.1:5555 --model tick_mlp --floor "$ECHO" \
                    --connections 1 --rate "$rate"
            done
            stop
        done
    done
    config core-idle '"endpoints": ["tcp://127.0.0.1:5555"]' "$(model tick_mlp '"backend": "cpu",')"
    if serve core-idle 0-5; then
        sleep 1
        t0=$(awk '{print $14 + $15}' "/proc/$SERVER/stat"); sleep 5; t1=$(awk '{print $14 + $15}' "/proc/$SERVER/stat")
        echo "idle: $((t1 - t0)) clock ticks of CPU in 5 s ($(getconf CLK_TCK) a second)" | tee -a "$SUMMARY" >"$LOGS/core-idle.log"
        ( sleep "$(awk "BEGIN { print $WARMUP + 1 }")"; for _ in 1 2 3; do kill -STOP "$SERVER"; sleep 0.015; kill -CONT "$SERVER"; sleep 0.4; done ) &
        load core-stalls --endpoint tcp://127.0.0.1:5555 --model tick_mlp --connections 1 --rate 10k --duration 3
        wait $!
        stop
    fi
    ;;
procs)      # issue 20: the process boundary (server.gpu_processes) against threads, every GPU path, PROCS_ROUNDS
            # interleaved rounds (medians: tools/core-medians.py), the floor in the same sigload call:
            # graph (warp, graph) and persistent at 10k/s one connection, default config; persistent with
            # busy_poll; batching (fused, max_batch_rows 64, 2 instances) at 100k/s over 8 connections.
    for round in $(seq 1 "${PROCS_ROUNDS:-3}"); do
        for path in ${PROCS_PATHS:-graph persistent persistent-busypoll batching}; do
            for v in ${PROCS_VARIANTS:-threads processes}; do
                s='"endpoints": ["tcp://127.0.0.1:5555"]'
                case $v in threads*) s="$s, \"gpu_processes\": false" ;; esac
                # threads-handoff, processes-handoff: every request to the worker (inline_us 0): what
                # they were before the front ran a GPU model's requests inline on its idle instance
                # (threads: its context; processes: a persistent MLP's mailbox in the shared region)
                case $v in *-handoff) s="$s, \"inline_us\": 0" ;; esac
                conn=1; rate=10k
                case $path in
                    graph) m='"backend": "cuda", "kernel": "warp", "graph": true,' ;;
                    persistent) m='"backend": "cuda", "kernel": "persistent",' ;;
                    persistent-busypoll) s="$s, \"busy_poll\": true, \"cpus\": [2]"; m='"backend": "cuda", "kernel": "persistent", "cpus": [3],' ;;
                    batching) s="$s, \"io_threads\": 2"; m='"backend": "cuda", "kernel": "fused", "instances": 2, "max_batch_rows": 64, "queue_depth": 4096,'; conn=8; rate=100k ;;
                esac
                # *-generic: the persistent kernel not specialised for the model's shapes (NVRTC, the default)
                case $v in *-generic) m="$m \"specialise\": false," ;; esac
                config "procs-$path-$v" "$s" "$(model tick_mlp "$m")"
                serve "procs-$path-$v" 0-5 || continue
                load "core-procs-$path-$v-$rate-r$round" --endpoint tcp://127.0.0.1:5555 --model tick_mlp --floor "$ECHO" \
                    --connections "$conn" --rate "$rate"
                stop
            done
        done
    done
    ;;
gpus)       # issue 20: the GPU-bound model of examples/gpu-bound (an MLP 256 -> 8192 x 3 -> 1, 545 MB of
            # float32, cuBLAS, 4 rows a launch) at one closed-loop load, GPUS_OUTSTANDING requests
            # outstanding: 1, 2, 4 and 8 instances on GPU 0, then 2, 4 and 8 over GPUs 0 and 1
            # (instance i on GPU i % 2; skipped with fewer than 2 GPUs); the best of each and the ratio.
            # The weights are made here, once, outside $OUT (GPU_BOUND_DIR: too large to come back).
    weights=$GPU_BOUND_DIR/gpu_bound.safetensors
    mkdir -p "$GPU_BOUND_DIR"
    { python3 examples/gpu-bound/make-weights.py --self-test
      if [ -f "$weights" ]; then
          echo "$weights: made by an earlier call, reused"; sha256sum "$weights"
      else
          python3 examples/gpu-bound/make-weights.py --out "$weights"
      fi; } >"$LOGS/gpus-weights.log" 2>&1
    { echo "### gpus: weights"; cat "$LOGS/gpus-weights.log"; echo; } | tee -a "$SUMMARY"
    if [ ! -f "$weights" ]; then
        echo "gpus: no weights, step skipped: $(tail -n 2 "$LOGS/gpus-weights.log")" | tee -a "$SUMMARY"
        continue
    fi
    ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
    rows="0:1 0:2 0:4 0:8"
    if [ "$ngpu" -ge 2 ]; then rows="$rows 0,1:2 0,1:4 0,1:8"
    else echo "gpus: $ngpu GPU(s) visible (nvidia-smi -L): the two-GPU rows are skipped" | tee -a "$SUMMARY"; fi
    results=$LOGS/gpus-results.txt
    : >"$results"
    for row in $rows; do
        devs=${row%%:*}; inst=${row#*:}
        name=gpus-d$(echo "$devs" | tr -d ,)-i$inst
        gpu_bound_config "$name" "$inst" "$devs" "$weights" >>"$LOGS/gpus-placement.log" 2>&1 || continue
        serve "$name" "$SERVER_CPUS" || { stop; echo "$devs $inst nostart" >>"$results"; continue; }
        if [ "$row" = 0:1 ]; then     # the outputs are O(1) numbers, for the record
            "$B/sigclient" infer --model gpu_bound --random 256 --rows 4 >"$LOGS/gpus-outputs.log" 2>&1
        fi
        run_load "$name" --endpoint tcp://127.0.0.1:5555 --model gpu_bound --concurrency "$GPUS_OUTSTANDING" \
            --connections 8 --io-threads 2 --duration "$GPUS_DURATION"
        stop
        # summary.csv: step,kind,mode,target,achieved_rps,requests,ok,errors,p50_us,p90_us,p99_us,...
        line=$(awk -F, -v d="$devs" -v i="$inst" '$2 == "sigserve" { print d, i, $5, $9, $11, $8 }' \
            "$OUT/curves/$name/summary.csv" 2>/dev/null)
        echo "${line:-$devs $inst noresult}" >>"$results"
    done
    awk -v n="$GPUS_OUTSTANDING" -v s="$GPUS_DURATION" '
        BEGIN { print "### gpus: examples/gpu-bound (MLP 256 -> 8192 x 3 -> 1, cuBLAS, max_batch_rows 4), closed loop, " \
                      n " outstanding, 8 connections, " s " s a row"
                print "| devices | instances | req/s | p50 us | p99 us |"; print "| --- | ---: | ---: | ---: | ---: |" }
        { dev = $1 == "0" ? "[0]" : "[0, 1]" }
        $3 == "nostart" { print "| " dev " | " $2 " | did not start (logs/sigserve_gpus-*.log) | | |"; next }
        $3 == "noresult" { print "| " dev " | " $2 " | no result (logs/gpus-*.log) | | |"; next }
        { printf "| %s | %s | %.0f | %.1f | %.1f |\n", dev, $2, $3, $4, $5
          if ($6 > 0) notes = notes dev " x " $2 ": " $6 " errors (its log in logs/ says which)\n"
          g = $1 == "0" ? 1 : 2
          if (!(g in best) || $3 > best[g]) { best[g] = $3; at[g] = $2 } }
        END { printf "\n%s", notes
              if (1 in best) printf "best one GPU: %d instance(s), %.0f req/s\n", at[1], best[1]
              if (2 in best) printf "best two GPUs: %d instance(s), %.0f req/s\n", at[2], best[2]
              if (best[1] > 0 && best[2] > 0) printf "two GPUs / one GPU: %.2fx\n", best[2] / best[1]
              print "" }' "$results" | tee -a "$SUMMARY"
    { echo "outputs of 4 random rows (1 instance on GPU 0):"; grep -v '^$' "$LOGS/gpus-outputs.log"; echo; } >>"$SUMMARY" 2>/dev/null
    ;;
gpus-tick)  # the transport-bound model on two GPUs (issue 14): tick_mlp's instances on GPU 0, then on GPUs 0 and 1
    for d in '[0]' '[0, 1]'; do
        name=gpus-tick-$(echo "$d" | tr -cd '0-9')
        config "$name" '"endpoints": ["tcp://127.0.0.1:5555", "tcp://127.0.0.1:5556"], "io_threads": 4' \
            "$(model tick_mlp "\"backend\": \"cuda\", \"kernel\": \"fused\", \"devices\": $d, \"instances\": 4, \"max_batch_rows\": 64, \"queue_depth\": 4096,")"
        serve "$name" 0-15 || continue
        load "$name" --endpoint tcp://127.0.0.1:5555 --endpoint tcp://127.0.0.1:5556 --model tick_mlp --floor "$ECHO" \
            --connections 16 --threads 8 --io-threads 2 --rate 50k,100k,150k,200k,250k,300k --stop-when-saturated
        stop
    done
    ;;
transport)  # issue 35: our ZMTP engine against libzmq, every figure beside its physics in the same call. The raw
            # TCP and raw libzmq round trips (build/rtt: a thread each side, 2 KiB); the model in process (sigbench,
            # CPU loop); then TRANSPORT_ROUNDS interleaved rounds at 10k/s, one connection, the default config
            # (tick_mlp on the CPU): the echo floor of each engine (an echo server of that engine), sigload's zmtp
            # engine against sigserve on zmtp, libzmq clients against sigserve on zmtp and on libzmq (the >= 40%),
            # and the persistent MLP in its device process with busy_poll, sigload's zmtp engine busy-polling
            # (the kernel's own in-process p50: sigbench's persistent rows, in transport-inprocess). Medians:
            # tools/transport-table.py.
    taskset -c 4-7 "$B/rtt" --cpus 4,5 --bytes 2048 --iterations 50000 >"$LOGS/transport-rtt.log" 2>&1
    { echo "### transport-rtt"; grep -E '^\|' "$LOGS/transport-rtt.log"; echo; } >>"$SUMMARY"
    taskset -c 1 "$B/sigbench" --weights "$WEIGHTS" --cpu 1 --iterations 20000 >"$LOGS/transport-inprocess.log" 2>&1
    { echo "### transport-inprocess"; grep -E '^\|' "$LOGS/transport-inprocess.log"; echo; } >>"$SUMMARY"
    taskset -c 6 "$B/sigload" --serve-echo tcp://127.0.0.1:56100 --engine zmtp >"$LOGS/echo-zmtp.log" 2>&1 &
    PIDS="$PIDS $!"
    taskset -c 7 "$B/sigload" --serve-echo tcp://127.0.0.1:56101 --engine libzmq >"$LOGS/echo-libzmq.log" 2>&1 &
    PIDS="$PIDS $!"
    sleep 1
    for round in $(seq 1 "${TRANSPORT_ROUNDS:-3}"); do
        load "transport-echo-zmtp-r$round" --endpoint tcp://127.0.0.1:56100 --echo --engine zmtp --connections 1 --rate 10k
        load "transport-echo-libzmq-r$round" --endpoint tcp://127.0.0.1:56101 --echo --engine libzmq --connections 1 --rate 10k
        for t in zmtp libzmq; do
            config "transport-$t" "\"endpoints\": [\"tcp://127.0.0.1:5555\"], \"transport\": \"$t\"" \
                "$(model tick_mlp '"backend": "cpu",')"
            serve "transport-$t" 0-5 || continue
            for e in zmtp libzmq; do
                load "transport-$t-by-$e-r$round" --endpoint tcp://127.0.0.1:5555 --model tick_mlp --engine "$e" \
                    --connections 1 --rate 10k
            done
            stop
        done
        config transport-persistent '"endpoints": ["tcp://127.0.0.1:5555"], "transport": "zmtp", "busy_poll": true, "cpus": [2]' \
            "$(model tick_mlp '"backend": "cuda", "kernel": "persistent", "cpus": [3],')"
        if serve transport-persistent 0-5; then
            load "transport-persistent-r$round" --endpoint tcp://127.0.0.1:5555 --model tick_mlp --engine zmtp --busy-poll \
                --connections 1 --rate 10k
            stop
        fi
    done
    ;;
transport-tput)  # issue 35: single-row tick_mlp on the CPU (4 instances, batching up to 64 rows) through 4 fronts, to
            # saturation, sigload's zmtp engine from several processes: TPUT_VARIANTS of shared (one tcp endpoint every
            # front listens on, SO_REUSEPORT), own (4 endpoints, one a front) and own-libzmq (the same on libzmq, client
            # and server, for comparison); the server on TPUT_SERVER_CPUS (default
            # 0-9: ten CPUs for 8 serving threads, so that they spin), the load on TPUT_LOAD_CPUS (10-15)
    scpus=${TPUT_SERVER_CPUS:-0-9}; lcpus=${TPUT_LOAD_CPUS:-10-15}
    for v in ${TPUT_VARIANTS:-shared own}; do
        if [ "$v" = shared ]; then eps='"tcp://127.0.0.1:5560"'; sl="--endpoint tcp://127.0.0.1:5560"
        else eps='"tcp://127.0.0.1:5560", "tcp://127.0.0.1:5561", "tcp://127.0.0.1:5562", "tcp://127.0.0.1:5563"'
             sl="--endpoint tcp://127.0.0.1:5560 --endpoint tcp://127.0.0.1:5561 --endpoint tcp://127.0.0.1:5562 --endpoint tcp://127.0.0.1:5563"
        fi
        t=zmtp; case $v in *-libzmq) t=libzmq ;; esac     # own-libzmq: the same on libzmq, client and server
        config "transport-tput-$v" "\"endpoints\": [$eps], \"fronts\": 4, \"transport\": \"$t\"" \
            "$(model tick_mlp '"backend": "cpu", "instances": 4, "max_batch_rows": 64, "queue_depth": 8192,')"
        serve "transport-tput-$v" "$scpus" tcp://127.0.0.1:5560 || continue
        LOAD_CPUS=$lcpus load "transport-tput-$v" $sl --model tick_mlp --engine "$t" --processes "${TPUT_PROCESSES:-3}" \
            --connections 24 --threads "${TPUT_THREADS:-6}" --rate "${TPUT_RATES:-300k,400k,500k,600k,700k}" --stop-when-saturated
        ps -L -o tid,comm,psr,time -p "$SERVER" >"$LOGS/transport-tput-$v-threads.txt" 2>&1
        grep -E "adaptive spinning" "$LOGS/sigserve_transport-tput-$v.log" >>"$LOGS/transport-tput-$v-threads.txt"
        stop
    done
    ;;
esac
done
tar czf "$OUT/curves.tgz" -C "$OUT" curves 2>/dev/null && rm -rf "$OUT/curves"
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$OUT/logs"
cat "$OUT/env.txt"; echo; cat "$SUMMARY"
