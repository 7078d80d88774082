#!/bin/sh
# The container images as a user runs them, built the way `make image` builds them but under the
# test run's own tags (tests/deploy/images.sh: sigserve-test:cpu-RUN, never sigserve:cpu): `run
# --network host` answers health and infers tick_mlp on port 5555, the HEALTHCHECK passes, a config
# mounted at /etc/sigserve/sigserve.json replaces the default, and `stop` drains and exits 0. A
# user's weights as safetensors writes them (0600, owned by the user) mounted read-only: the
# container as its default user says which --user to run as and stops; run that way (docs/deploy.md,
# `--user "$(id -u):$(id -g)"`), it serves them, giving the answers of this build's sigserve on the
# host, and as that arbitrary uid it can write where it needs to. With a CUDA build (BUILD holds CUDA
# objects), the same for the cuda image, which must start without a GPU, say that there is none,
# and serve tick_mlp on the CPU. Needs docker or podman (SKIP otherwise); containers use the host's
# network, as they must on the project's machines.
set -eu
. tests/deploy/lib.sh
if docker info >/dev/null 2>&1; then engine=docker
elif podman info >/dev/null 2>&1; then engine=podman
else skip "neither 'docker info' nor 'podman info' answers (no container engine; ../shared/tools/oci-setup.sh sets up podman)"
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sigserve-image.XXXXXX")
names=""
host_server=
cleanup () {
    rc=$?
    for n in $names; do $engine rm -f "$n" >/dev/null 2>&1 || true; done
    [ -z "$host_server" ] || kill "$host_server" 2>/dev/null || true
    rm -rf "$tmp"
    images_done || rc=1
    exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM
client=$BUILD/sigclient
[ -x "$client" ] || fail "$client is not built"
images_begin

cpu=$(test_image cpu) || fail "the cpu image did not build"
size=$($engine image inspect --format '{{.Size}}' "$cpu")
ok "make image-cpu built $cpu with $engine in $(cat "$SIGSERVE_TEST_IMAGES/cpu.seconds") s: $((size / 1000000)) MB"

[ "$($engine image inspect --format '{{.Config.User}}' "$cpu")" = sigserve:sigserve ] || fail "the image does not run as sigserve"
$engine image inspect --format '{{json .Config.Healthcheck}}' "$cpu" | grep -q 'sigclient' ||
    fail "no HEALTHCHECK running sigclient in the image (podman needs --format docker)"
$engine image inspect --format '{{.Config.StopSignal}}' "$cpu" | grep -Eq '^(SIGTERM|15)$' || fail "STOPSIGNAL is not SIGTERM"
missing=$($engine run --rm --no-healthcheck --network host --entrypoint sh "$cpu" -c \
    'id -u; for b in /usr/bin/sigserve /usr/bin/sigclient /usr/bin/sigload; do ldd $b; done' 2>"$tmp/run.err") ||
    { cat "$tmp/run.err"; fail "ldd in the image: $missing"; }
case $missing in 0*) fail "the container runs as root" ;; esac
if echo "$missing" | grep -q 'not found'; then fail "libraries missing in the image: $(echo "$missing" | grep 'not found')"; fi
ok "non-root (uid $(echo "$missing" | head -n 1)), HEALTHCHECK and STOPSIGNAL SIGTERM kept, every library the binaries load present"

# run IMAGE NAME PORT [mounted config [more run options]]: a detached container on the host's
# network. (podman's complaints that it cannot schedule periodic health checks without systemd go
# to run.err: `podman healthcheck run` below runs the check itself.)
run () {
    start_container "$@"
    i=0
    until "$client" --endpoint "tcp://127.0.0.1:$3" --timeout 500 health >/dev/null 2>&1; do
        i=$((i + 1))
        if [ $i -ge 120 ] || [ "$($engine inspect --format '{{.State.Running}}' "$2")" != true ]; then
            $engine logs "$2" 2>&1 | tail -n 20; fail "$1 not ready on port $3"
        fi
        sleep 0.5
    done
}

# start_container: as run, without waiting.
start_container () {
    names="$names $2"
    if [ $# -ge 4 ]; then
        _image=$1 _name=$2 _port=$3 _config=$4
        shift 4
        # shellcheck disable=SC2086
        $engine run -d --name "$_name" --network host -v "$_config:/etc/sigserve/sigserve.json:ro" \
            -e SIGSERVE_HEALTH_ENDPOINT="tcp://127.0.0.1:$_port" "$@" "$_image" >/dev/null 2>>"$tmp/run.err"
    else
        $engine run -d --name "$2" --network host "$1" >/dev/null 2>>"$tmp/run.err"
    fi
}

# serves NAME PORT: health, the model list and one inference of tick_mlp; the backend in $backend.
serves () {
    out=$("$client" --endpoint "tcp://127.0.0.1:$2" health) || fail "health: $out"
    case $out in "live=1 ready=1 version=$(cat VERSION)") ;; *) fail "health said '$out'" ;; esac
    models=$("$client" --endpoint "tcp://127.0.0.1:$2" models) || fail "models: $models"
    backend=$(echo "$models" | awk '$1 == "tick_mlp" {print $3}')
    [ -n "$backend" ] || fail "$1 does not serve tick_mlp: $models"
    n=$("$client" --endpoint "tcp://127.0.0.1:$2" infer --model tick_mlp --random 512 2>/dev/null | wc -w) || fail "infer failed"
    [ "$n" = 1 ] || fail "infer gave $n outputs"
}

# healthy NAME: the image's own HEALTHCHECK passes.
healthy () {
    if [ $engine = podman ]; then
        podman healthcheck run "$1" >/dev/null 2>>"$tmp/run.err" || fail "podman healthcheck run $1 failed"
    else
        i=0
        until [ "$(docker inspect --format '{{.State.Health.Status}}' "$1")" = healthy ]; do
            i=$((i + 1)); [ $i -lt 90 ] || fail "$1 not healthy after 90 s"; sleep 1
        done
    fi
}

# stops NAME: `stop` ends it with exit code 0, after the drain (the log says so).
stops () {
    $engine stop -t 30 "$1" >/dev/null 2>>"$tmp/run.err" || fail "$engine stop $1"
    code=$($engine inspect --format '{{.State.ExitCode}}' "$1")
    [ "$code" = 0 ] || { $engine logs "$1" 2>&1 | tail -n 20; fail "$1 exited $code after $engine stop"; }
    $engine logs "$1" 2>&1 | grep -q 'draining' || fail "$1's log does not mention the drain"
}

id=$$
if port_busy 5555; then
    echo "note: port 5555 is in use on this host; the default config's run is left to the mounted-config run below"
else
    run "$cpu" "sigserve-test-cpu-$id" 5555
    serves "sigserve-test-cpu-$id" 5555
    ok "run --network host $cpu serves health and tick_mlp ($backend) on tcp://127.0.0.1:5555 (its config binds tcp://*:5555)"
    healthy "sigserve-test-cpu-$id"
    ok "its HEALTHCHECK (sigclient health) passes"
    $engine logs "sigserve-test-cpu-$id" 2>&1 | grep -q '^{.*"level"' || fail "the default config's log lines are not JSON"
    stops "sigserve-test-cpu-$id"
    ok "$engine stop drains and exits 0; log lines are JSON"
fi

port=$(free_port)
sed -e "s|@ENDPOINT@|tcp://127.0.0.1:$port|" -e 's|@LOG_FORMAT@|text|' -e 's|@DATADIR@|/usr/share/sigserve|' \
    deploy/sigserve.json.in >"$tmp/sigserve.json"
chmod 644 "$tmp/sigserve.json"
run "$cpu" "sigserve-test-mount-$id" "$port" "$tmp/sigserve.json"
serves "sigserve-test-mount-$id" "$port"
healthy "sigserve-test-mount-$id"
$engine logs "sigserve-test-mount-$id" 2>&1 | grep -q '^{' && fail "the mounted config's text log format was not used"
stops "sigserve-test-mount-$id"
ok "a config mounted at /etc/sigserve/sigserve.json replaces the default (port $port); healthy; stop exits 0"

# ---- Your weights: a file as safetensors writes it (0600, the user's), mounted read-only ----
# The user is the one running the test; when that is root, who reads anything, a made-up user who
# owns the file, as another user's file would be.
owner=$(id -u):$(id -g)
[ "$(id -u)" != 0 ] || owner=54321:54321
mkdir -m 0755 "$tmp/models"
cp "$BUILD/models/tick_mlp.safetensors" "$tmp/models/mine.safetensors"
chmod 0600 "$tmp/models/mine.safetensors"
[ "$(id -u)" != 0 ] || chown "$owner" "$tmp/models/mine.safetensors"
wport=$(free_port)
sed -e "s|@ENDPOINT@|tcp://127.0.0.1:$wport|" -e 's|@LOG_FORMAT@|text|' -e 's|@DATADIR@/models/tick_mlp.safetensors|/models/mine.safetensors|' \
    -e 's|"backend": "auto"|"backend": "cpu"|' deploy/sigserve.json.in >"$tmp/mine.json"
chmod 644 "$tmp/mine.json"
grep -q '"weights": "/models/mine.safetensors"' "$tmp/mine.json" || fail "could not point the config at /models/mine.safetensors"

# As the image's own user (uid 10001): sigserve cannot read it; the entrypoint says what to do.
start_container "$cpu" "sigserve-test-denied-$id" "$wport" "$tmp/mine.json" -v "$tmp/models:/models:ro"
code=$(timeout 60 $engine wait "sigserve-test-denied-$id" 2>/dev/null | tail -n 1) || fail "the container without --user did not stop"
$engine logs "sigserve-test-denied-$id" >"$tmp/denied.log" 2>&1
[ "$code" != 0 ] || { cat "$tmp/denied.log"; fail "sigserve as uid 10001 served a 0600 file of uid ${owner%%:*}"; }
grep -q 'Permission denied' "$tmp/denied.log" || { cat "$tmp/denied.log"; fail "no 'Permission denied' in the log"; }
grep -q -- "--user $owner " "$tmp/denied.log" || { cat "$tmp/denied.log"; fail "the entrypoint did not say --user $owner"; }
ok "weights 0600 of uid ${owner%%:*} mounted :ro: as uid 10001 the container exits $code and says: $(grep -o 'run the container as its owner, --user [0-9:]*' "$tmp/denied.log" | head -n 1)"

# The reference: this build's sigserve on the host, same weights and backend, same request.
ref_port=$(free_port)
sed -e "s|tcp://127.0.0.1:$wport|tcp://127.0.0.1:$ref_port|" -e "s|/models/mine.safetensors|$tmp/models/mine.safetensors|" \
    "$tmp/mine.json" >"$tmp/reference.json"
"$BUILD/sigserve" --config "$tmp/reference.json" >"$tmp/reference.log" 2>&1 &
host_server=$!
wait_ready "$client" "tcp://127.0.0.1:$ref_port" 30 || { cat "$tmp/reference.log"; fail "sigserve on the host not ready"; }
"$client" --endpoint "tcp://127.0.0.1:$ref_port" infer --model tick_mlp --random 512 --rows 3 --seed 7 >"$tmp/reference.out" 2>/dev/null ||
    fail "infer on the host's sigserve"
kill "$host_server"; wait "$host_server" || true; host_server=

# The documented way: as the file's owner. Then the uid has no passwd entry in the image: what it
# must be able to write (/tmp, /var/lib/sigserve) it can.
run "$cpu" "sigserve-test-user-$id" "$wport" "$tmp/mine.json" -v "$tmp/models:/models:ro" --user "$owner"
serves "sigserve-test-user-$id" "$wport"
"$client" --endpoint "tcp://127.0.0.1:$wport" infer --model tick_mlp --random 512 --rows 3 --seed 7 >"$tmp/container.out" 2>/dev/null ||
    fail "infer (3 rows) on the container run with --user $owner"
"$PYTHON" - "$tmp/reference.out" "$tmp/container.out" <<'PY' || fail "the container's outputs differ from the host's"
import sys
ref, got = ([float(x) for x in open(p).read().split()] for p in sys.argv[1:3])
if len(ref) != 3 or len(got) != len(ref) or any(abs(a - b) > 1e-5 * max(1.0, abs(a)) for a, b in zip(ref, got)):
    sys.exit(f"host {ref} container {got}")
PY
inside=$($engine exec "sigserve-test-user-$id" sh -c 'id -u; touch /tmp/w /var/lib/sigserve/w && echo writable') ||
    fail "as uid ${owner%%:*}, /tmp or /var/lib/sigserve is not writable: $inside"
[ "$(echo "$inside" | head -n 1)" = "${owner%%:*}" ] || fail "the container runs as uid $(echo "$inside" | head -n 1), not ${owner%%:*}"
healthy "sigserve-test-user-$id"
stops "sigserve-test-user-$id"
ok "run with --user $owner it serves them: 3 rows equal to this build's sigserve on the host ($(head -n 1 "$tmp/container.out") ...), /tmp and /var/lib/sigserve writable, healthy, stop exits 0"

if [ -d "$BUILD/obj/kernels" ]; then
    cuda=$(test_image cuda) || fail "the cuda image did not build"
    size=$($engine image inspect --format '{{.Size}}' "$cuda")
    ok "make image-cuda built $cuda from $BUILD/sigserve in $(cat "$SIGSERVE_TEST_IMAGES/cuda.seconds") s: $((size / 1000000)) MB"
    run "$cuda" "sigserve-test-cuda-$id" "$port" "$tmp/sigserve.json"
    serves "sigserve-test-cuda-$id" "$port"
    [ "$backend" = cpu ] || fail "the cuda image without a GPU serves tick_mlp on '$backend'"
    $engine logs "sigserve-test-cuda-$id" 2>&1 | grep -q 'no CUDA device' || fail "the cuda image does not say that no GPU is present"
    "$client" --endpoint "tcp://127.0.0.1:$port" --version >/dev/null
    $engine exec "sigserve-test-cuda-$id" sigserve --version | grep -q 'cuda with CUDA runtime' || fail "the cuda image's sigserve is not the CUDA build"
    plugin=$($engine exec "sigserve-test-cuda-$id" ldd /usr/lib/sigserve/libsigserve-cuda.so) ||
        fail "the cuda image has no CUDA backend at /usr/lib/sigserve/libsigserve-cuda.so"
    if echo "$plugin" | grep -q 'not found'; then fail "libraries of the CUDA backend missing in the image: $(echo "$plugin" | grep 'not found')"; fi
    $engine exec "sigserve-test-cuda-$id" grep -q libcudart "/proc/1/maps" &&
        fail "the cuda image's sigserve serving on the CPU maps libcudart (the CUDA backend opens only for a GPU model)"
    stops "sigserve-test-cuda-$id"
    ok "the cuda image starts without a GPU, says so ($($engine logs "sigserve-test-cuda-$id" 2>&1 | grep -o 'no CUDA device[^"]*' | head -n 1)), serves tick_mlp on the CPU, stops with 0"
else
    echo "note: $BUILD has no CUDA objects: the cuda image is not built (make image-cuda with a CUDA build)"
fi
done_checks "images with $engine"
