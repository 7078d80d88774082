#!/bin/sh
# Install the Debian packages that sigserve's build, tests and tools need.
# Idempotent: does nothing when every package is already installed.
# Uses sudo when not root; says what to run by hand when it cannot install.
set -eu

PACKAGES="build-essential pkg-config
libzmq3-dev libprotobuf-c-dev protobuf-c-compiler libcjson-dev
libczmq-dev libsodium-dev libmicrohttpd-dev libsystemd-dev
check libsubunit-dev libopenblas-dev
python3 python3-zmq python3-protobuf protobuf-compiler
gnuplot-nox python3-yaml python3-numpy
clang libclang-rt-dev"
# The benchmarks' library peers (sigbench's oneDNN rows); --no-bench leaves them out (the image's
# build stage: it ships no benchmark).
BENCH_PACKAGES="libdnnl-dev"
[ "${1:-}" = "--no-bench" ] || PACKAGES="$PACKAGES $BENCH_PACKAGES"

missing=""
for p in $PACKAGES; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing="$missing $p"
    fi
done

if [ -z "$missing" ]; then
    echo "install-deps: all packages present"
    exit 0
fi

echo "install-deps: installing:$missing"
if [ "$(id -u)" -eq 0 ]; then
    SUDO=""
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    SUDO="sudo -n"
else
    echo "install-deps: cannot install as $(id -un) (not root and no password-less sudo)." >&2
    echo "install-deps: run this once as root, then retry:" >&2
    echo "    apt-get update && apt-get install -y --no-install-recommends$missing" >&2
    exit 1
fi

if ! command -v apt-get >/dev/null 2>&1; then
    echo "install-deps: apt-get not found; sigserve's installer supports Debian and Ubuntu only." >&2
    echo "install-deps: install the equivalents of:$missing" >&2
    exit 1
fi

export DEBIAN_FRONTEND=noninteractive
# shellcheck disable=SC2086
if ! $SUDO apt-get install -y --no-install-recommends $missing; then
    echo "install-deps: first try failed; refreshing package lists" >&2
    $SUDO apt-get update
    # shellcheck disable=SC2086
    $SUDO apt-get install -y --no-install-recommends $missing
fi
echo "install-deps: done"
