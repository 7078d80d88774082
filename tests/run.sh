#!/bin/sh
# Runs the Check suites given as arguments, then the suites of tests/python, tests/deploy and
# tests/docs (the documentation's checks), then prints one line: "N passed, N failed, N skipped".
# GPU suites skip themselves (with the reason) when no CUDA device is present.
set -u
BUILD=${BUILD:-build}
PYTHON=${PYTHON:-/usr/bin/python3}
# Sanitizer builds (make test-asan): leaks inside system libraries are not ours to fix.
LSAN_OPTIONS="suppressions=$(pwd)/tests/lsan.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
export LSAN_OPTIONS
passed=0; failed=0; skipped=0; failed_names=""
for t in "$@"; do
    name=$(basename "$t")
    log="$BUILD/tests/$name.log"
    start=$(date +%s)
    "$t" >"$log" 2>&1
    rc=$?
    secs=$(( $(date +%s) - start ))
    # Check prints "100%: Checks: 12, Failures: 0, Errors: 0"; suites that skip print "SKIP: why".
    line=$(grep -E '^[0-9]+%: Checks:' "$log" | tail -n 1)
    if grep -q '^SKIP:' "$log"; then
        skipped=$((skipped + 1)); echo "SKIP  $name ($(grep '^SKIP:' "$log" | head -n 1 | cut -c7-))"
    elif [ $rc -eq 0 ]; then
        passed=$((passed + 1)); echo "PASS  $name  ${line} (${secs}s)"
    else
        failed=$((failed + 1)); failed_names="$failed_names $name"
        echo "FAIL  $name  ${line} (${secs}s)"; grep -E ':[EF]:' "$log" | head -n 20
        tail -n 5 "$log"
    fi
done
# The deploy tests that need container images share those of one run, built under the run's own
# tags and removed at its end with every image the run's builds created (tests/deploy/images.sh):
# make test leaves the user's images (sigserve:cpu, sigserve:cuda, their build cache) as they were.
# The end is a suite of its own, deploy_images, which checks that.
images=""
for py in tests/python/test_*.py tests/python/test_*.sh tests/deploy/test_*.sh tests/docs/test_*.py; do
    [ -f "$py" ] || continue
    name=$(basename "${py%.*}")
    log="$BUILD/tests/$name.log"
    # The deploy tests package and install the binaries (images, make install, a program linked
    # against the library): sanitizer builds are not what ships, and make test runs them.
    case "${SIGSERVE_SANITIZED:-}:$py" in
        1:tests/deploy/*)
            skipped=$((skipped + 1)); echo "SKIP  $name (a sanitizer build is not packaged; make test runs it)"
            continue ;;
        *:tests/deploy/*)
            if [ -z "$images" ]; then
                images=$BUILD/tests/images
                SIGSERVE_TEST_IMAGES=$images BUILD=$BUILD PYTHON=$PYTHON sh tests/deploy/images.sh begin "$images" \
                    >"$BUILD/tests/deploy_images_begin.log" 2>&1 || cat "$BUILD/tests/deploy_images_begin.log"
                export SIGSERVE_TEST_IMAGES="$images"
            fi ;;
    esac
    start=$(date +%s)
    case $py in
        *.sh) BUILD=$BUILD PYTHON=$PYTHON sh "$py" >"$log" 2>&1 ;;
        *) BUILD=$BUILD PYTHONPATH="$BUILD/gen/py:clients/python" "$PYTHON" "$py" >"$log" 2>&1 ;;
    esac
    rc=$?
    if [ $rc -eq 0 ] && grep -q '^SKIP:' "$log"; then
        skipped=$((skipped + 1)); echo "SKIP  $name ($(grep '^SKIP:' "$log" | head -n 1 | cut -c7-))"
    elif [ $rc -eq 0 ]; then passed=$((passed + 1)); echo "PASS  $name  $(tail -n 1 "$log") ($(( $(date +%s) - start ))s)"
    else failed=$((failed + 1)); failed_names="$failed_names $name"; echo "FAIL  $name"; tail -n 30 "$log"; fi
done
if [ -n "$images" ]; then
    name=deploy_images; log="$BUILD/tests/$name.log"
    BUILD=$BUILD PYTHON=$PYTHON sh tests/deploy/images.sh end "$images" >"$log" 2>&1
    rc=$?
    if [ $rc -eq 0 ] && grep -q '^SKIP:' "$log"; then
        skipped=$((skipped + 1)); echo "SKIP  $name ($(grep '^SKIP:' "$log" | head -n 1 | cut -c7-))"
    elif [ $rc -eq 0 ]; then passed=$((passed + 1)); echo "PASS  $name  $(tail -n 1 "$log")"
    else failed=$((failed + 1)); failed_names="$failed_names $name"; echo "FAIL  $name"; tail -n 30 "$log"; fi
fi
echo
[ -n "$failed_names" ] && echo "failed suites:$failed_names"
echo "$passed passed, $failed failed, $skipped skipped"
[ $failed -eq 0 ]
