#!/bin/sh
# sigclient-py convert (ONNX -> safetensors + config entry), end to end: in a virtual environment
# of its own, $BUILD/venv-convert (kept between runs, so a second run installs only the package),
# with onnx and onnxruntime from the package index and ./clients/python, runs
# tests/python/onnx_convert.py (its models: onnx_graphs.py) against the real $BUILD/sigserve. That
# file says what it checks.
#
#   BUILD=build sh tests/python/test_convert.sh      (PYTHON: the interpreter, default /usr/bin/python3)
#
# The venv has --system-site-packages, so pyzmq (and setuptools) come from the system (Debian:
# python3-zmq, python3-setuptools). If pip cannot fetch onnx (no index, no network), or there is no
# venv module, this prints "SKIP: why" and exits 0; without onnxruntime the outputs are checked
# against the test's float64 reference only (it says so). Last line "N passed, N failed".
set -u
BUILD=${BUILD:-build}
PYTHON=${PYTHON:-/usr/bin/python3}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 1
unset PYTHONPATH            # only what pip installed
export PYTHONNOUSERSITE=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1

skip() { echo "SKIP: $*"; exit 0; }

if [ ! -x "$BUILD/sigserve" ]; then
    echo "FAIL  $BUILD/sigserve is missing: build first (make BUILD=$BUILD)"
    echo; echo "0 passed, 1 failed"; exit 1
fi
BUILD_ABS=$(cd "$BUILD" && pwd)
VENV=$BUILD_ABS/venv-convert
VPY=$VENV/bin/python

tmp=$(mktemp -d "${TMPDIR:-/tmp}/sigserve-convert-sh.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM

# One run at a time sets the venv up (make test -j, two worktrees' runs do not share a build/).
exec 9>"$BUILD_ABS/venv-convert.lock"
command -v flock >/dev/null 2>&1 && flock 9

# What pip says when it cannot get a package: not a fault of ours (as in test_install.sh).
UNFETCHABLE='No matching distribution|Could not find a version that satisfies|Failed to establish a new connection|Temporary failure in name resolution|Network is unreachable|Max retries exceeded|ProxyError|Read timed out|No module named .?(setuptools|wheel)|invalid command .?bdist_wheel'

# A venv made by another interpreter, or half made, is made again.
if [ -x "$VPY" ] && [ "$("$VPY" -c 'import sys; print(sys.base_prefix)' 2>/dev/null)" != \
                      "$("$PYTHON" -c 'import sys; print(sys.base_prefix)')" ]; then
    rm -rf "$VENV"
fi
if [ ! -x "$VPY" ]; then
    if ! "$PYTHON" -m venv --system-site-packages "$VENV" >"$tmp/venv.log" 2>&1; then
        rm -rf "$VENV"
        skip "$PYTHON -m venv failed ($(tail -n 1 "$tmp/venv.log"); Debian: apt-get install python3-venv)"
    fi
fi

if ! "$VPY" -c 'import onnx, numpy' 2>/dev/null; then
    if ! "$VPY" -m pip install onnx >"$tmp/pip-onnx.log" 2>&1; then
        if grep -Eq "$UNFETCHABLE" "$tmp/pip-onnx.log"; then
            skip "pip cannot fetch onnx ($(grep -Em 1 "$UNFETCHABLE" "$tmp/pip-onnx.log" | sed "s/^ *//" | cut -c1-160))"
        fi
        echo "FAIL  pip install onnx"; tail -n 30 "$tmp/pip-onnx.log"
        echo; echo "0 passed, 1 failed"; exit 1
    fi
    echo "installed onnx into $VENV"
fi
if ! "$VPY" -c 'import onnxruntime' 2>/dev/null; then
    # Optional: the second reference. Tried once per venv; a failure is remembered, not retried each run.
    if [ ! -f "$VENV/onnxruntime-failed" ]; then
        if "$VPY" -m pip install onnxruntime >"$tmp/pip-ort.log" 2>&1; then
            echo "installed onnxruntime into $VENV"
        else
            grep -Em 1 "$UNFETCHABLE|ERROR" "$tmp/pip-ort.log" >"$VENV/onnxruntime-failed"
            echo "note: pip install onnxruntime failed: $(cut -c1-160 "$VENV/onnxruntime-failed")"
        fi
    fi
fi

# The package, from a copy (pip builds in place; the shared tree stays clean), every run: the tree
# may have changed. Its dependencies are there already (pyzmq from the system, protobuf with onnx).
mkdir "$tmp/src"
(cd clients/python && tar cf - --exclude=./build --exclude=./dist --exclude='*.egg-info' --exclude=__pycache__ .) |
    (cd "$tmp/src" && tar xf -) || { echo "cannot copy clients/python"; exit 1; }
if ! "$VPY" -m pip install --force-reinstall --no-deps --no-build-isolation --no-index "$tmp/src" \
        >"$tmp/pip-src.log" 2>&1; then
    if grep -Eq "$UNFETCHABLE" "$tmp/pip-src.log"; then
        skip "pip cannot build ./clients/python offline ($(grep -Em 1 "$UNFETCHABLE" "$tmp/pip-src.log" | cut -c1-160))"
    fi
    echo "FAIL  pip install ./clients/python"; tail -n 30 "$tmp/pip-src.log"
    echo; echo "0 passed, 1 failed"; exit 1
fi
if ! "$VPY" -c 'import zmq, google.protobuf, sigclient.convert' >"$tmp/import.log" 2>&1; then
    skip "the venv lacks pyzmq or protobuf ($(tail -n 1 "$tmp/import.log"); Debian: python3-zmq)"
fi
exec 9>&-

# The GRU's graphs after the others' (tests/python/onnx_convert_gru.py); the last line is its summary.
BUILD=$BUILD_ABS "$VPY" tests/python/onnx_convert.py; rc=$?
BUILD=$BUILD_ABS "$VPY" tests/python/onnx_convert_gru.py || rc=1
exit $rc
