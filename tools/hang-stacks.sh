#!/bin/sh
# Runs COMMAND up to RUNS times (default 100); when one run takes longer than LIMIT seconds (default
# 10), prints every thread's stack of it and of its descendants (gdb), kills it and stops. For rare
# hangs in tests (first use: test_shm's futex waker under load, 2026-11-27).
#   RUNS=200 LIMIT=10 sh tools/hang-stacks.sh env CK_FORK=no build/tests/test_shm
set -u
RUNS=${RUNS:-100}
LIMIT=${LIMIT:-10}
tree () { echo "$1"; for c in $(pgrep -P "$1"); do tree "$c"; done; }
i=0
while [ "$i" -lt "$RUNS" ]; do
    i=$((i + 1))
    "$@" >/tmp/hang-stacks.out 2>&1 &
    pid=$!
    t=0
    while kill -0 "$pid" 2>/dev/null; do
        if [ "$t" -ge $((LIMIT * 10)) ]; then
            echo "run $i: still running after $LIMIT s; stacks:"
            for p in $(tree "$pid"); do
                echo "--- pid $p ($(tr '\0' ' ' </proc/"$p"/cmdline 2>/dev/null))"
                gdb -p "$p" -batch -ex "thread apply all bt" 2>/dev/null | grep -E '^#|^Thread'
            done
            for p in $(tree "$pid"); do kill -9 "$p" 2>/dev/null; done
            cat /tmp/hang-stacks.out
            exit 1
        fi
        sleep 0.1
        t=$((t + 1))
    done
done
echo "$RUNS runs, none over $LIMIT s"
