#!/bin/sh
# The steps of `make fuzz` (mk/fuzz.mk) that are easier to read as shell than as make.
#
#   tests/fuzz/fuzz.sh probe CC DIR
#       exits 0 when CC can build and link a libFuzzer target with ASan and UBSan; otherwise
#       prints what is missing and exits 1.
#   tests/fuzz/fuzz.sh run DIR SECONDS NAME MAX_LEN
#       fuzzes DIR/fuzz_NAME for SECONDS on DIR/corpus-NAME, a copy of tests/fuzz/corpus/NAME
#       (new inputs go there, never into the repository), with tests/fuzz/NAME.dict when there
#       is one. Prints one summary line; on a crash, says where the input was written and exits 1.
set -u

probe () {
    cc=$1 dir=$2
    if ! command -v "$cc" >/dev/null 2>&1; then
        echo "$cc not found: install clang"
        return 1
    fi
    mkdir -p "$dir"
    printf '%s\n' '#include <stddef.h>' '#include <stdint.h>' \
        'int LLVMFuzzerTestOneInput (const uint8_t *d, size_t n);' \
        'int LLVMFuzzerTestOneInput (const uint8_t *d, size_t n) { (void) d; (void) n; return 0; }' \
        >"$dir/probe.c"
    if ! "$cc" -fsanitize=fuzzer,address,undefined "$dir/probe.c" -o "$dir/probe" >"$dir/probe.log" 2>&1; then
        echo "$cc cannot link a target with -fsanitize=fuzzer,address,undefined: it needs clang and its" \
             "libFuzzer runtime, on Debian clang and libclang-rt-14-dev (see $dir/probe.log)"
        return 1
    fi
    rm -f "$dir/probe" "$dir/probe.c" "$dir/probe.log"
}

run () {
    dir=$1 seconds=$2 name=$3 max_len=$4
    bin=$dir/fuzz_$name
    seeds=tests/fuzz/corpus/$name
    work=$dir/corpus-$name
    artifacts=$dir/artifacts-$name
    log=$dir/$name.log
    mkdir -p "$work" "$artifacts"
    cp -R "$seeds/." "$work/"
    dict=tests/fuzz/$name.dict
    [ -f "$dict" ] || dict=
    echo "fuzz $name: ${seconds} s on $work (seeds from $seeds${dict:+, dictionary $dict}); log $log"
    "$bin" -max_total_time="$seconds" -max_len="$max_len" -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 -artifact_prefix="$artifacts/" ${dict:+-dict="$dict"} "$work" >"$log" 2>&1
    rc=$?
    if [ $rc -ne 0 ]; then
        input=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -n 1)
        # The sanitizer's or libFuzzer's report (the stack), else the end of the log.
        report=$(sed -n '/ERROR: \|ALARM: \|==ERROR\|runtime error: /,/SUMMARY: /p' "$log" | head -n 60)
        echo "------ from $log:" >&2
        if [ -n "$report" ]; then printf '%s\n' "$report" >&2; else tail -n 40 "$log" >&2; fi
        echo "fuzz $name: FAILED (exit $rc): the input that failed was written to ${input:-$artifacts/ (see the log)}" >&2
        echo "fuzz $name: reproduce with: $bin ${input:-<input>}" >&2
        return 1
    fi
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    last=$(grep -E '^#[0-9]+' "$log" | tail -n 1)
    cov=$(printf '%s\n' "$last" | grep -oE 'cov: [0-9]+ ft: [0-9]+')
    corp=$(printf '%s\n' "$last" | sed -n 's/.* corp: \([0-9]*\)\/\([0-9a-zA-Z]*\).*/\1 inputs (\2)/p')
    files=$(find "$work" -type f | wc -l)
    echo "fuzz $name: ok: ${seconds} s, ${runs:-?} runs, corpus ${corp:-?} in use ($files files in $work)," \
         "${cov:-no coverage line}; no crash"
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case $cmd in
    probe) probe "$@" ;;
    run) run "$@" ;;
    *) echo "usage: $0 probe CC DIR | run DIR SECONDS NAME MAX_LEN" >&2; exit 2 ;;
esac
