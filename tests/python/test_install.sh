#!/bin/sh
# `pip install ./clients/python` into a fresh virtual environment gives a working package and a
# working `sigclient-py`, with no C build on the Python path: the installed package carries its own
# generated signal_pb2. Then, against a live sigserve ($BUILD/sigserve, default build), runs
# sigclient-py health / models / infer from the venv's bin, and the client's suites
# (tests/python/test_client*.py) with the venv's python and no PYTHONPATH.
#
#   BUILD=build sh tests/python/test_install.sh      (PYTHON: the interpreter, default /usr/bin/python3)
#
# Offline first: a venv with --system-site-packages and `pip install --no-build-isolation --no-index`
# uses the system's setuptools, pyzmq and protobuf (Debian: python3-setuptools, python3-zmq,
# python3-protobuf). Only if something is missing there does pip go to the index; if it cannot
# fetch what it needs, or there is no venv module, this prints "SKIP: why" and exits 0. Last line:
# "N passed, N failed" (tests/run.sh reads it); exit status 0 when nothing failed.
set -u
BUILD=${BUILD:-build}
PYTHON=${PYTHON:-/usr/bin/python3}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 1
unset PYTHONPATH            # nothing from the tree or the build: only what pip installed
export PYTHONNOUSERSITE=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
VERSION=$(cat VERSION)
passed=0; failed=0
server_pid=""

skip() { echo "SKIP: $*"; exit 0; }
pass() { passed=$((passed + 1)); echo "PASS  $1"; }
fail() {
    failed=$((failed + 1)); echo "FAIL  $1"
    shift
    for f in "$@"; do [ -f "$f" ] && sed 's/^/      /' "$f" | tail -n 30; done
}
finish() { echo; echo "$passed passed, $failed failed"; [ "$failed" -eq 0 ]; exit $?; }

if [ ! -x "$BUILD/sigserve" ] || [ ! -f "$BUILD/models/tick_mlp.safetensors" ]; then
    echo "FAIL  $BUILD/sigserve or $BUILD/models/tick_mlp.safetensors is missing: build first (make BUILD=$BUILD)"
    failed=1
    finish
fi
BUILD_ABS=$(cd "$BUILD" && pwd)

tmp=$(mktemp -d "${TMPDIR:-/tmp}/sigserve-install.XXXXXX") || exit 1
cleanup() {
    if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null; wait "$server_pid" 2>/dev/null; fi
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- install ----

# pip builds a local folder in place, leaving build/ and *.egg-info beside the sources: install from
# a copy of clients/python, so the shared tree stays clean, concurrent runs do not collide, and a
# file the package needs from outside its folder would be missed here too.
mkdir "$tmp/src"
(cd clients/python && tar cf - --exclude=./build --exclude=./dist --exclude='*.egg-info' --exclude=__pycache__ .) |
    (cd "$tmp/src" && tar xf -) || { echo "cannot copy clients/python"; exit 1; }

if ! "$PYTHON" -m venv --system-site-packages "$tmp/venv" >"$tmp/venv.log" 2>&1; then
    skip "$PYTHON -m venv failed ($(tail -n 1 "$tmp/venv.log"); Debian: apt-get install python3-venv)"
fi
VPY=$tmp/venv/bin/python
VBIN=$tmp/venv/bin

# What pip says when it cannot get a package: not a fault of ours.
UNFETCHABLE='No matching distribution|Could not find a version that satisfies|Failed to establish a new connection|Temporary failure in name resolution|Network is unreachable|Max retries exceeded|ProxyError|Read timed out|No module named .?(setuptools|wheel)|invalid command .?bdist_wheel'

how=""
if "$VPY" -c 'import setuptools, sys; sys.exit(int(setuptools.__version__.split(".")[0]) < 61)' 2>/dev/null; then
    if "$VPY" -m pip install --no-build-isolation --no-index "$tmp/src" >"$tmp/pip-offline.log" 2>&1; then
        how="offline, with the system's setuptools, pyzmq and protobuf"
    elif ! grep -Eq "$UNFETCHABLE" "$tmp/pip-offline.log"; then
        fail "pip install --no-build-isolation --no-index ./clients/python" "$tmp/pip-offline.log"
        finish
    fi
fi
if [ -z "$how" ]; then
    if "$VPY" -m pip install "$tmp/src" >"$tmp/pip-index.log" 2>&1; then
        how="from the package index"
    elif grep -Eq "$UNFETCHABLE" "$tmp/pip-index.log"; then
        skip "pip cannot fetch the build requirements or dependencies of ./clients/python ($(grep -Em 1 "$UNFETCHABLE" "$tmp/pip-index.log" | sed "s/^ *//" | cut -c1-160))"
    else
        fail "pip install ./clients/python" "$tmp/pip-index.log"
        finish
    fi
fi
pass "pip install ./clients/python into a fresh venv ($how)"

# The package imported is the installed one (not the tree's), with its own signal_pb2 and VERSION's version.
(cd "$tmp" && "$VPY" - "$tmp/venv" "$VERSION") >"$tmp/import.log" 2>&1 <<'EOF'
import importlib.metadata, os, sys
import sigclient
venv, version = sys.argv[1], sys.argv[2]
for what, path in (("sigclient", sigclient.__file__), ("signal_pb2", sigclient.pb.__file__)):
    assert os.path.realpath(path).startswith(os.path.realpath(venv) + os.sep), f"{what} from {path}, not the venv"
assert os.path.basename(os.path.dirname(sigclient.pb.__file__)) == "_pb", sigclient.pb.__file__
assert sigclient.__version__ == version, (sigclient.__version__, version)
assert importlib.metadata.version("sigserve-client") == version, importlib.metadata.version("sigserve-client")
print("ok", sigclient.__file__)
EOF
if [ $? -eq 0 ]; then pass "import sigclient: the venv's package, its own signal_pb2, version $VERSION"
else fail "import sigclient from the venv" "$tmp/import.log"; fi

if [ -x "$VBIN/sigclient-py" ] && "$VBIN/sigclient-py" --version >"$tmp/version.out" 2>&1 &&
   grep -q "^sigclient-py $VERSION (libzmq " "$tmp/version.out"; then
    pass "sigclient-py --version: $(cat "$tmp/version.out")"
else
    fail "sigclient-py --version" "$tmp/version.out"
fi

# ---- against a live sigserve ----

port=$("$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
endpoint="tcp://127.0.0.1:$port"
cat >"$tmp/sigserve.json" <<EOF
{
  "server": { "endpoints": ["$endpoint"], "log_level": "warn" },
  "models": [
    {
      "name": "tick_mlp", "backend": "cpu", "max_rows": 8,
      "weights": "$BUILD_ABS/models/tick_mlp.safetensors",
      "layers": [
        { "weight": "0.weight", "bias": "0.bias", "activation": "relu" },
        { "weight": "2.weight", "bias": "2.bias", "activation": "relu" },
        { "weight": "4.weight", "bias": "4.bias", "activation": "none" }
      ]
    }
  ]
}
EOF
"$BUILD_ABS/sigserve" --config "$tmp/sigserve.json" >"$tmp/sigserve.log" 2>&1 &
server_pid=$!
cli() { "$VBIN/sigclient-py" --endpoint "$endpoint" "$@" >"$tmp/out" 2>"$tmp/err"; }
tries=0
until cli --timeout 200 health; do
    tries=$((tries + 1))
    if ! kill -0 "$server_pid" 2>/dev/null || [ $tries -ge 100 ]; then
        fail "sigserve on $endpoint never became ready" "$tmp/sigserve.log" "$tmp/err"
        finish
    fi
    sleep 0.2
done

cli health; rc=$?
if [ $rc -eq 0 ] && [ "$(cat "$tmp/out")" = "live=1 ready=1 version=$VERSION" ] && [ ! -s "$tmp/err" ]; then
    pass "sigclient-py health: $(cat "$tmp/out")"
else fail "sigclient-py health (exit $rc)" "$tmp/out" "$tmp/err"; fi

cli models; rc=$?
if [ $rc -eq 0 ] && [ "$(wc -l <"$tmp/out")" -eq 2 ] &&
   head -n 1 "$tmp/out" | grep -Eq '^name +version +backend +kernel +input +output +max_rows +available +type +window +step_size$' &&
   tail -n 1 "$tmp/out" | grep -Eq '^tick_mlp +1 +cpu +loop +512 +1 +8 +yes +mlp +- +-$'; then
    pass "sigclient-py models: $(tail -n 1 "$tmp/out" | tr -s ' ')"
else fail "sigclient-py models (exit $rc)" "$tmp/out" "$tmp/err"; fi

cli infer --model tick_mlp --random 512; rc=$?
if [ $rc -eq 0 ] && [ "$(wc -l <"$tmp/out")" -eq 1 ] && grep -Eq '^-?[0-9][0-9.e+-]*$' "$tmp/out" &&
   grep -Eq '^request_id=1 status=STATUS_OK rows=1 queue_ns=[0-9]+ compute_ns=[1-9][0-9]* server_ns=[1-9][0-9]* round_trip_us=[0-9]+\.[0-9] model_version=1 backend=cpu$' "$tmp/err"; then
    pass "sigclient-py infer --model tick_mlp --random 512: $(cat "$tmp/out")"
else fail "sigclient-py infer --random 512 (exit $rc)" "$tmp/out" "$tmp/err"; fi

cli infer --model tick_mlp --random 512 --rows 4 --repeat 20 --warmup 2; rc=$?
if [ $rc -eq 0 ] && [ "$(wc -l <"$tmp/out")" -eq 4 ] &&
   grep -Eq '^repeat=20 warmup=2 round_trip_us p50=[0-9]+\.[0-9] ' "$tmp/err" &&
   grep -Eq '^repeat=20 warmup=2 server_us p50=[0-9]+\.[0-9] ' "$tmp/err"; then
    pass "sigclient-py infer --rows 4 --repeat 20 --warmup 2: 4 rows, percentiles in us"
else fail "sigclient-py infer --repeat (exit $rc)" "$tmp/out" "$tmp/err"; fi

want='sigclient-py: STATUS_BAD_SHAPE: features: expected rows x input size = 1 x 512 = 512 values for model "tick_mlp", got 511'
cli infer --model tick_mlp --random 511; rc=$?
if [ $rc -eq 1 ] && [ ! -s "$tmp/out" ] && [ "$(cat "$tmp/err")" = "$want" ]; then
    pass "sigclient-py infer with a bad shape: exit 1, the server's text"
else fail "sigclient-py infer --random 511 (exit $rc, want 1)" "$tmp/out" "$tmp/err"; fi

cli infer --model tick_mlp; rc=$?
if [ $rc -eq 2 ] && grep -q '^sigclient-py: infer needs one of --file, --stdin, --random$' "$tmp/err"; then
    pass "sigclient-py usage error: exit 2"
else fail "sigclient-py infer without features (exit $rc, want 2)" "$tmp/out" "$tmp/err"; fi

dead_port=$("$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$VBIN/sigclient-py" --endpoint "tcp://127.0.0.1:$dead_port" --timeout 200 health >"$tmp/out" 2>"$tmp/err"; rc=$?
if [ $rc -eq 3 ] && grep -q '^sigclient-py: timed out after 200 ms' "$tmp/err"; then
    pass "sigclient-py against nobody: exit 3"
else fail "sigclient-py health against a dead port (exit $rc, want 3)" "$tmp/out" "$tmp/err"; fi

kill "$server_pid" 2>/dev/null; wait "$server_pid" 2>/dev/null; server_pid=""

# ---- the client's own suites, on the installed package ----

for suite in test_client test_client_py_cli test_client_fleet test_client_streams test_client_batches; do
    (BUILD=$BUILD_ABS "$VPY" tests/python/$suite.py) >"$tmp/$suite.log" 2>&1; rc=$?
    summary=$(tail -n 1 "$tmp/$suite.log")
    if [ $rc -eq 0 ] && echo "$summary" | grep -Eq '^[1-9][0-9]* passed, 0 failed$'; then
        pass "tests/python/$suite.py with the venv's python, no PYTHONPATH: $summary"
    else fail "tests/python/$suite.py with the venv's python (exit $rc)" "$tmp/$suite.log"; fi
done

finish
