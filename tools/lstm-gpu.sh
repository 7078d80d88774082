#!/bin/sh
# The LSTM work's GPU call, in two halves (tools/gpu-libs.sh adapted):
#   sh tools/lstm-gpu.sh pack   here: copies lstmbench, test_lstm and the LSTM GPU suites from $BUILD
#                               (default build-g) into .gpubuild-g and the shared libraries a CUDA
#                               host lacks into .devlibs-g (both in .git/info/exclude);
#   sh tools/lstm-gpu.sh run    on the device (carry .gpubuild-g and .devlibs-g): the GPU suites,
#                               the PyTorch comparison, lstmbench (GPU rows, a cluster-size sweep,
#                               CPU rows) and compute-sanitizer memcheck over short runs; logs under
#                               $OUT, a short table last. Every step has its own time limit (the
#                               whole stays under 470 s; 2026-11-23 on an H100 it took 273 s with the
#                               GPU rows cut at 120 s, hence 170 s now).
set -u

# setup LIBS: the output folder $O (OUT), LIBS first on the library path, EAGER module loading, the
# summary $S begun with the host's GPU, driver and toolkit; step TEXT: a timed line of the summary.
setup () {
    O=${OUT:-/tmp/lstm-out}
    mkdir -p "$O"
    export LD_LIBRARY_PATH="$1${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" CUDA_MODULE_LOADING=EAGER
    S="$O/summary.txt"
    { date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv,noheader
      nvcc --version | tail -n 2; echo "cpus: $(nproc)"; } > "$S" 2>&1
    t0=$(date +%s)
}
step () { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a "$S"; }
gpu_suites () {   # gpu_suites SECONDS: the LSTM GPU suites (plan 4's apart), each bounded by SECONDS
    for t in test_lstm_cuda test_lstm_cuda_apart; do
        CK_FORK=no timeout "$1" $B/tests/$t > "$O/$t.log" 2>&1
        step "   $t rc=$?: $(grep -E '^[0-9]+%: Checks' "$O/$t.log")"
        grep -E ':[EF]:' "$O/$t.log" | head -n 8 | tee -a "$S"
    done
}
case "${1:-}" in
pack)
    B=${BUILD:-build-g}
    rm -rf .gpubuild-g .devlibs-g
    mkdir -p .gpubuild-g/tests .devlibs-g
    for f in lstmbench tests/test_lstm tests/test_lstm_cuda tests/test_lstm_cuda_apart; do cp "$B/$f" ".gpubuild-g/$f" || exit 1; done
    for bin in .gpubuild-g/lstmbench .gpubuild-g/tests/*; do ldd "$bin" | awk '/=> \//{print $3}'; done | sort -u \
        | grep -vE '/(libc|libm|libpthread|libdl|librt|libresolv|libgcc_s|libstdc\+\+|ld-linux[^/]*)\.so' \
        | grep -v '/usr/local/cuda' | while read -r lib; do cp -L "$lib" .devlibs-g/; done
    strip --strip-debug .gpubuild-g/lstmbench .gpubuild-g/tests/* .devlibs-g/*
    du -sh .gpubuild-g .devlibs-g
    ;;
run)
    B=.gpubuild-g
    setup "$PWD/.devlibs-g"

    step "1. GPU suites (CK_FORK=no)"
    gpu_suites 120

    step "2. lstmbench, GPU rows (every size and weight type, floors)"
    timeout 170 taskset -c 2 $B/lstmbench --backends cuda --iterations 10000 --warmup 1000 --seconds 6 \
        > "$O/bench_cuda.log" 2>&1
    step "   rc=$?"

    step "3. lstmbench, cluster sizes (steps only: small and medium f16, small f32)"
    { timeout 25 taskset -c 2 $B/lstmbench --backends cuda --sizes small,medium --dtypes f16 --blocks 1,2,4,8,16 \
          --no-window --no-floors --iterations 10000 --warmup 500 --seconds 1.2
      timeout 15 taskset -c 2 $B/lstmbench --backends cuda --sizes small --dtypes f32 --blocks 1,2,4,8,16 \
          --no-window --no-floors --iterations 10000 --warmup 500 --seconds 1.2; } > "$O/bench_sweep.log" 2>&1
    step "   rc=$?"

    step "4. PyTorch nn.LSTM against sigserve"
    timeout 45 env BUILD=$B python3 tests/python/test_lstm_torch.py > "$O/torch.log" 2>&1
    step "   rc=$?: $(tail -n 1 "$O/torch.log")"

    step "5. lstmbench, CPU rows"
    timeout 45 taskset -c 2 $B/lstmbench --backends cpu --iterations 10000 --warmup 200 --seconds 5 \
        > "$O/bench_cpu.log" 2>&1
    step "   rc=$?"

    step "6. compute-sanitizer memcheck (cluster 1 and 4, grid 6)"
    { timeout 30 compute-sanitizer --tool memcheck $B/lstmbench --backends cuda --sizes small,2:5:33:70 \
          --dtypes f32,bf16 --blocks 1,4 --iterations 60 --warmup 5 --no-floors --seconds 5
      echo "rc=$?"
      timeout 20 compute-sanitizer --tool memcheck $B/lstmbench --backends cuda --sizes 2:5:33:70 --dtypes f16 --grid \
          --blocks 6 --iterations 60 --warmup 5 --no-floors --seconds 5
      echo "rc=$?"; } > "$O/memcheck.log" 2>&1
    step "   $(grep -E 'ERROR SUMMARY|^rc=' "$O/memcheck.log" | tr '\n' ' ')"

    {
        echo
        echo "| row (us) | p50 | p90 | p99 | p99.9 | min | max | mean | sd |"
        grep -hE '^\| (small|medium|large)' "$O/bench_cuda.log" "$O/bench_sweep.log" "$O/bench_cpu.log" \
            | sed -E 's/ \(n ([0-9]+)[^|]*\|/ (n \1) |/'
        grep -hE '(relative error|refused|watchdog|destroy of)' "$O"/test_lstm_cuda*.log | cut -c1-150 | head -n 26
        grep -hE '^(ok|FAIL)' "$O/torch.log"
    } | tee -a "$S"
    ;;
plan3)
    # Plan 3's GPU calls (docs/lstm-notes.md: half-precision products), run in the folder where
    # tools/gpu-carry.sh's pack was untarred (BUILD .gpubuild, libraries in .devlibs), logs under
    # $OUT, p50 / p99 of every row last. PHASE 1: the PyTorch comparison (float64) first, then
    # lstmbench steps in both kinds of products (--math wide,half: the old math and the new in one
    # binary, one run) with their traced rows and the floors, then memcheck; PHASE 2: the GPU suite
    # (LSTM_TEST_TIMEOUT, default 330 s), then the full windows in both; PHASE 3: the steps and the
    # windows again, half first (--math half,wide), for the spread between runs.
    B=${BUILD:-.gpubuild}
    setup "$PWD/.devlibs:/usr/local/cuda/lib64"
    bench () {   # bench LOG SECONDS TIMEOUT ARGS...: lstmbench on core 2
        log=$1 sec=$2 lim=$3; shift 3
        timeout "$lim" taskset -c 2 $B/lstmbench --backends cuda --iterations 10000 --warmup 500 --seconds "$sec" "$@" \
            > "$O/$log.log" 2>&1
        step "   $log rc=$?"
    }
    case "${PHASE:-1}" in
    1)
        step "1. PyTorch nn.LSTM against sigserve (float64), default products"
        timeout 60 env BUILD=$B python3 tests/python/test_lstm_torch.py > "$O/torch.log" 2>&1
        step "   rc=$?"; grep -hE '^(ok|FAIL)' "$O/torch.log" | tee -a "$S"
        step "2. lstmbench steps, wide and half products, traced rows, floors"
        bench steps1 3 215 --dtypes f16,bf16,f32 --math wide,half --no-window --trace
        step "3. compute-sanitizer memcheck: half products, cluster 1 and 4, grid 6 (odd shapes, steps and windows)"
        { timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 $B/lstmbench --backends cuda --sizes 2:5:33:70 \
              --dtypes f16,bf16 --math half --blocks 1,4 --iterations 60 --warmup 5 --no-floors --seconds 5; echo "rc=$?"
          timeout 40 compute-sanitizer --tool memcheck --error-exitcode 9 $B/lstmbench --backends cuda --sizes 2:5:33:70 \
              --dtypes f16 --math half --grid --blocks 6 --iterations 60 --warmup 5 --no-floors --seconds 5; echo "rc=$?"
        } > "$O/memcheck.log" 2>&1
        step "   $(grep -E 'ERROR SUMMARY|^rc=' "$O/memcheck.log" | tr '\n' ' ')"
        ;;
    2)
        step "1. GPU suites (CK_FORK=no)"
        gpu_suites "${LSTM_TEST_TIMEOUT:-330}"
        step "2. lstmbench full windows, wide and half products"
        bench windows2 1.2 65 --dtypes f16,bf16 --math wide,half --no-floors --iterations 3000
        ;;
    3)
        step "1. lstmbench steps and windows, half products first"
        bench steps3 2.5 330 --dtypes f16,bf16,f32 --math half,wide
        ;;
    esac
    {
        echo
        echo "| row (us) | p50 | p99 |"
        for f in "$O"/steps*.log "$O"/windows*.log; do
            [ -f "$f" ] && grep -hE '^\| (small|medium|large)' "$f" | awk -F'|' '{sub(/ \(n [0-9]+[^)]*\)/, "", $2); printf "|%s| %s | %s |\n", $2, $3, $5}'
        done
        for t in test_lstm_cuda test_lstm_cuda_apart; do
            [ -f "$O/$t.log" ] && grep -hE '(largest error|refused|watchdog|destroy of)' "$O/$t.log" | cut -c1-170 | head -n 60
        done
    } | tee -a "$S"
    ;;
*)
    echo "usage: sh tools/lstm-gpu.sh pack|run|plan3" >&2
    exit 2
    ;;
esac
