#!/bin/sh
# deploy/compose.yaml: `up` starts sigserve (healthy) and the sigload job, which runs against it and
# writes its latency curves (<step>.hgrm, summary.csv, plots.gp) into the "curves" volume; `stop`
# ends sigserve with exit code 0. Uses `docker compose` or podman-compose (SKIP without either), the
# test run's cpu image (tests/deploy/images.sh) through SIGSERVE_IMAGE, and a free port through
# SIGSERVE_PORT/SIGSERVE_CONFIG.
set -eu
. tests/deploy/lib.sh
if docker info >/dev/null 2>&1 && docker compose version >/dev/null 2>&1; then engine=docker; compose="docker compose"
elif podman info >/dev/null 2>&1 && command -v podman-compose >/dev/null 2>&1; then engine=podman; compose=podman-compose
else skip "neither 'docker compose' nor podman-compose with a working engine (../shared/tools/oci-setup.sh sets up podman-compose)"
fi
if [ "$compose" = podman-compose ]; then
    # 1.0.x (Debian bookworm's 1.0.3) adds the project's network to network_mode: host services,
    # which podman refuses (containers/podman-compose#397).
    v=$(podman-compose --version 2>/dev/null | sed -n 's/^podman-composer\{0,1\} version:\{0,1\} *\([0-9][0-9.]*\).*/\1/p' | head -n 1)
    case $v in
        0.*|1.0|1.0.*) skip "podman-compose $v cannot run network_mode: host services (containers/podman-compose#397); pip install podman-compose (1.6 works)" ;;
    esac
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sigserve-compose.XXXXXX")
project=sigserve-test-$$
dc () { $compose -p "$project" -f deploy/compose.yaml "$@"; }
cleanup () {
    rc=$?
    dc down -v >/dev/null 2>&1 || true
    rm -rf "$tmp"
    images_done || rc=1
    exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM
images_begin

# The config compose mounts by default is the image's own default, on loopback: both services use
# the host's network, so * would be every interface of the host (docs/security.md).
sed -e 's|@DATADIR@|/usr/share/sigserve|' -e 's|@LOG_FORMAT@|json|' -e 's|@ENDPOINT@|tcp://127.0.0.1:5555|' \
    deploy/sigserve.json.in | cmp -s - deploy/compose-sigserve.json ||
    fail "deploy/compose-sigserve.json is not the image's default config on tcp://127.0.0.1:5555"
image=$(test_image cpu) || fail "the cpu image did not build"

port=$(free_port)
sed "s|tcp://127.0.0.1:5555|tcp://127.0.0.1:$port|" deploy/compose-sigserve.json >"$tmp/sigserve.json"
chmod 644 "$tmp/sigserve.json"
export SIGSERVE_IMAGE=$image SIGSERVE_PORT=$port SIGSERVE_CONFIG=$tmp/sigserve.json SIGLOAD_RATES=500,1k SIGLOAD_SECONDS=2
dc up -d >"$tmp/up.log" 2>&1 || { cat "$tmp/up.log"; fail "$compose up -d"; }
wait_ready "$BUILD/sigclient" "tcp://127.0.0.1:$port" 60 || { cat "$tmp/up.log"; fail "sigserve (compose) not ready on port $port"; }
ok "$compose up: sigserve answers on tcp://127.0.0.1:$port"

# The job's container, by the labels both tools set.
container () {
    $engine ps -a --filter "label=com.docker.compose.project=$project" \
        --filter "label=com.docker.compose.service=$1" --format '{{.ID}}' | head -n 1
}
i=0
while :; do
    job=$(container sigload)
    if [ -n "$job" ] && [ "$($engine inspect --format '{{.State.Status}}' "$job")" = exited ]; then break; fi
    i=$((i + 1)); [ $i -lt 120 ] || { dc logs >"$tmp/logs" 2>&1; tail -n 30 "$tmp/logs"; fail "the sigload job did not finish in 120 s"; }
    sleep 1
done
code=$($engine inspect --format '{{.State.ExitCode}}' "$job")
$engine logs "$job" >"$tmp/sigload.log" 2>&1 || true
[ "$code" = 0 ] || { cat "$tmp/sigload.log"; fail "the sigload job exited $code"; }
grep -q 'open-1000' "$tmp/sigload.log" || { cat "$tmp/sigload.log"; fail "the sigload job's table has no open-1000 step"; }
ok "the sigload job ran both steps against sigserve and exited 0"

volume=$($engine volume ls --format '{{.Name}}' | grep -E "^${project}_curves\$" | head -n 1)
[ -n "$volume" ] || fail "no volume ${project}_curves: $($engine volume ls --format '{{.Name}}' | tr '\n' ' ')"
files=$($engine run --rm --no-healthcheck --network host -v "$volume:/var/lib/sigserve" --entrypoint ls "$image" \
    /var/lib/sigserve/curves)
for f in open-500.hgrm open-1000.hgrm summary.csv plots.gp; do
    echo "$files" | grep -qx "$f" || fail "the curves volume lacks $f (has: $(echo "$files" | tr '\n' ' '))"
done
rows=$($engine run --rm --no-healthcheck --network host -v "$volume:/var/lib/sigserve" --entrypoint cat "$image" \
    /var/lib/sigserve/curves/summary.csv | wc -l)
[ "$rows" = 3 ] || fail "summary.csv has $rows lines, expected a header and 2 steps"
ok "the curves are in the volume $volume: $(echo "$files" | tr '\n' ' ')"

server=$(container sigserve)
$engine stop -t 30 "$server" >/dev/null 2>&1
code=$($engine inspect --format '{{.State.ExitCode}}' "$server")
[ "$code" = 0 ] || fail "sigserve (compose) exited $code when stopped"
ok "stopping sigserve drains and exits 0"
done_checks "compose with $compose"
