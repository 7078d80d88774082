# Shared by the tests/deploy/test_*.sh scripts (POSIX sh): run from the repository root with BUILD
# (default build) and PYTHON set, as tests/run.sh does. A script prints "ok - what" per check,
# "SKIP: why" (and exits 0) when it cannot run here, and ends with one summary line.
BUILD=${BUILD:-build}
PYTHON=${PYTHON:-/usr/bin/python3}
checks=0

ok () { checks=$((checks + 1)); echo "ok - $*"; }
fail () { echo "FAIL: $*" >&2; exit 1; }
skip () { echo "SKIP: $*"; exit 0; }
done_checks () { echo "$checks checks passed${1:+ ($1)}"; }

# A tcp port on 127.0.0.1 that was free a moment ago.
free_port () {
    "$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Whether something listens on tcp port $1 (of any local address).
port_busy () {
    "$PYTHON" -c 'import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
try:
    s.bind(("0.0.0.0", int(sys.argv[1])))
except OSError:
    sys.exit(0)
sys.exit(1)' "$1"
}

# wait_ready SIGCLIENT ENDPOINT SECONDS: until `SIGCLIENT health` says ready.
wait_ready () {
    _i=0
    while [ "$_i" -lt $(($3 * 10)) ]; do
        "$1" --endpoint "$2" --timeout 500 health >/dev/null 2>&1 && return 0
        sleep 0.1
        _i=$((_i + 1))
    done
    return 1
}

# The make that built BUILD, for targets a test needs. Under `make test`, MAKEFLAGS carries its
# command line (NVCC= and the like); run by hand, a BUILD without CUDA objects gets NVCC= so that
# a toolkit found now does not rebuild it with CUDA.
make_build () {
    [ -d "$BUILD/obj/kernels" ] || set -- NVCC= "$@"
    make --no-print-directory BUILD="$BUILD" "$@"
}

# Container images under test (tests/deploy/images.sh): those of the run that tests/run.sh or
# `make test-deploy` began (SIGSERVE_TEST_IMAGES), or, for a test started alone, a run of its own
# that images_done ends. Never sigserve:cpu or sigserve:cuda, which are the user's.
images_begin () {
    if [ -z "${SIGSERVE_TEST_IMAGES:-}" ]; then
        SIGSERVE_TEST_IMAGES=$(mktemp -d "${TMPDIR:-/tmp}/sigserve-images.XXXXXX")
        export SIGSERVE_TEST_IMAGES
        images_own=1
        sh tests/deploy/images.sh begin "$SIGSERVE_TEST_IMAGES" || fail "tests/deploy/images.sh begin"
    fi
}

# test_image cpu|cuda: the run's image, built by the first test that asks; prints its tag.
test_image () { sh tests/deploy/images.sh build "$SIGSERVE_TEST_IMAGES" "$1"; }

# images_done: ends a run of the test's own (its images removed and checked); 1 if that failed.
images_done () {
    if [ "${images_own:-0}" = 1 ]; then
        images_own=0
        sh tests/deploy/images.sh end "$SIGSERVE_TEST_IMAGES" || return 1
    fi
    return 0
}
