#!/bin/sh
# One device call for the persistent kernel's synchronisation (issue 19 item 2: the compact tail and
# the mbarrier hand-offs): a first traced timing (f32, f16; the serving kernel and its older
# synchronisation in the same run), the persistent test cases, memcheck over the persistent rows,
# then the variants and a second traced timing. Run from an unpacked tools/gpu-carry.sh pack:
#   cd build-x && tar xzf pack.tgz && OUT=$OUT/x sh tools/kern-tail-gpu.sh
# Logs in $OUT; a short table last.
set -u
OUT=${OUT:-/tmp/kt-out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$PWD/.devlibs:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
B=${BUILD:-.gpubuild}
W="--weights $B/models/tick_mlp.safetensors --cpu 3"
S="$OUT/summary.txt"
: >"$S"
step () {   # step NAME SECONDS COMMAND...
    n=$1 lim=$2; shift 2
    t0=$(date +%s)
    timeout "$lim" "$@" >"$OUT/$n.log" 2>&1
    printf '%-22s rc=%-3s %4ss %s\n' "$n" "$?" "$(( $(date +%s) - t0 ))" \
        "$(grep -E '^[0-9]+%: Checks|ERROR SUMMARY' "$OUT/$n.log" | tail -n 1)" >>"$S"
}
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv; nvcc --version | tail -n 1; date -u; } >"$OUT/env.txt" 2>&1
[ "${TRACE1:-1}" = 1 ] && step trace1 120 taskset -c 3 $B/sigbench $W --iterations "${ITER:-20000}" --only-persistent --dtypes "${DTYPES:-f32,f16}" --trace
[ "${TESTS:-1}" = 1 ] && step test_cuda_persistent "${CUDA_TIMEOUT:-360}" env CK_FORK=no $B/tests/test_cuda_persistent
if [ "${SANITIZE:-1}" = 1 ]; then
    step memcheck_persistent "${MC_LIMIT:-240}" compute-sanitizer --tool memcheck --error-exitcode 9 $B/sigbench --shape 597,293,33,1 \
        --rows 7 --iterations 40 --warmup 4 --only-persistent --persistent-variants --dtypes "${MC_DTYPES:-f32,f16,bf16}"
    [ "${MC_BYOUT:-1}" = 1 ] && step memcheck_by_outputs 150 compute-sanitizer --tool memcheck --error-exitcode 9 $B/sigbench --shape 37,6669,5 \
        --rows 3 --iterations 40 --warmup 4 --only-persistent --dtypes f32,bf16
    step memcheck_chunks "${MC_CHUNK_LIMIT:-150}" compute-sanitizer --tool memcheck --error-exitcode 9 $B/sigbench --shape 293,597,31,3 \
        --rows 16 --iterations 40 --warmup 4 --only-persistent --dtypes f32,f16
fi
[ "${VARIANTS:-1}" = 1 ] && step variants "${VAR_LIMIT:-150}" taskset -c 3 $B/sigbench $W --iterations "${ITER:-20000}" --only-persistent --persistent-variants
[ "${TRACE2:-1}" = 1 ] && step trace2 120 taskset -c 3 $B/sigbench $W --iterations "${ITER:-20000}" --only-persistent --dtypes "${DTYPES:-f32,f16}" --trace
cat "$OUT/env.txt"
for f in "$OUT"/trace*.log "$OUT"/variants.log; do
    [ -f "$f" ] || continue
    echo "== $(basename "$f")"
    grep -E '^\| (persistent|ping-pong floor \| \+ read the features, output as)|^\| (seen|->|tail layer)|^\| phase|relative error' "$f" | cut -c1-200
done
grep -hE ':[FE]:' "$OUT"/test_cuda_persistent.log 2>/dev/null | cut -c1-300 | head -n 10
cat "$S"
