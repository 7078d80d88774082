#!/bin/sh
# deploy/k8s run by a real engine: `podman kube play` of the CPU Deployment (deployment.yaml) with
# its ConfigMap (configmap.yaml), on the test run's cpu image (tests/deploy/images.sh). The pod
# becomes ready; the probes of the manifest (startup and readiness GET /readyz, liveness GET /healthz,
# on the port they name) answer 200; the container runs as the manifest says (uid 10001, read-only
# root filesystem, the ConfigMap at /etc/sigserve); sigclient gets health and an inference over
# ZeroMQ; stopping the pod drains and exits 0; `podman kube down` takes it all away.
#
# What podman is given is a test-only copy of the two manifests (written to the log, and checked to
# differ from them in these fields only), because this host has no container network and podman is
# not Kubernetes:
#   - hostNetwork: true (containers here must use the host's network);
#   - replicas: 1 (podman 4 starts every replica, which on one network would fight over the ports);
#   - the config's endpoints and the probes on free ports of 127.0.0.1, not 5555 and 9464 of every
#     interface; no `ports:` list (podman turns it into port mappings, which host networking refuses),
#     so the probes name the port by number instead of "http";
#   - the image: the test's tag; the names (Deployment, ConfigMap, the scratch volume) made unique,
#     since podman makes named volumes of them.
# SKIP where podman does not answer, or has no catatonit (the pod's infra container needs it).
set -eu
. tests/deploy/lib.sh
podman info >/dev/null 2>&1 || skip "podman does not answer ('podman info'): podman kube play runs the Kubernetes manifests (../shared/tools/oci-setup.sh sets podman up)"
command -v catatonit >/dev/null 2>&1 || [ -x /usr/libexec/podman/catatonit ] ||
    skip "podman kube play needs catatonit for the pod's infra container (Debian package catatonit)"
"$PYTHON" -c 'import yaml' 2>/dev/null || skip "$PYTHON has no yaml module (Debian package python3-yaml)"
engine=podman
client=$BUILD/sigclient
[ -x "$client" ] || fail "$client is not built"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sigserve-kube.XXXXXX")
name=sigserve-test-$$
played=
pause_before=$(podman images --format '{{.Repository}}:{{.Tag}}' | grep -c '/podman-pause:' || true)
cleanup () {
    rc=$?
    if [ -n "$played" ]; then
        podman kube down "$tmp/play.yaml" >>"$tmp/down.log" 2>&1 || true
        podman volume rm -f "$name-config" "$name-tmp" >/dev/null 2>&1 || true
    fi
    if [ "$pause_before" = 0 ]; then     # podman built its pause image for this test: not ours to keep
        for p in $(podman images --format '{{.Repository}}:{{.Tag}}' | grep '/podman-pause:'); do
            podman rmi "$p" >/dev/null 2>&1 || echo "note: kept $p (in use by another pod)"
        done
    fi
    rm -rf "$tmp"
    images_done || rc=1
    exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM
images_begin
image=$(test_image cpu) || fail "the cpu image did not build"

zmq_port=$(free_port)
http_port=$(free_port)
"$PYTHON" - deploy/k8s "$tmp/play.yaml" "$image" "$name" "$zmq_port" "$http_port" <<'PY'
import copy, json, os, sys
import yaml

d, out, image, name, zmq_port, http_port = sys.argv[1:7]
cm = yaml.safe_load(open(os.path.join(d, "configmap.yaml")))
dep = yaml.safe_load(open(os.path.join(d, "deployment.yaml")))
orig_cm, orig_dep = copy.deepcopy(cm), copy.deepcopy(dep)

config = json.loads(cm["data"]["sigserve.json"])
config["server"]["endpoints"] = [f"tcp://127.0.0.1:{zmq_port}"]
config["server"]["http"] = f"127.0.0.1:{http_port}"
cm["data"]["sigserve.json"] = json.dumps(config, indent=2)
cm["metadata"]["name"] = f"{name}-config"
dep["metadata"]["name"] = name
dep["spec"]["replicas"] = 1
pod = dep["spec"]["template"]["spec"]
pod["hostNetwork"] = True
c = pod["containers"][0]
c["image"] = image
ports = {p["name"]: p["containerPort"] for p in c.pop("ports")}
numbers = {"http": int(http_port), "zmq": int(zmq_port)}
for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
    g = c[probe]["httpGet"]
    g["port"] = numbers[g["port"]] if g["port"] in numbers else numbers[[k for k, v in ports.items() if v == g["port"]][0]]
for v in pod["volumes"]:
    if "configMap" in v:
        v["configMap"]["name"] = cm["metadata"]["name"]
renamed = {v["name"]: f"{name}-{v['name']}" for v in pod["volumes"]}
for v in pod["volumes"]:
    v["name"] = renamed[v["name"]]
for m in c["volumeMounts"]:
    m["name"] = renamed[m["name"]]


def diff(a, b, path=""):
    """The paths where two documents differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [p for k in sorted(set(a) | set(b)) for p in diff(a.get(k), b.get(k), f"{path}.{k}")]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [p for i, (x, y) in enumerate(zip(a, b)) for p in diff(x, y, f"{path}[{i}]")]
    return [] if a == b else [path]


allowed = {".metadata.name", ".data.sigserve.json", ".spec.replicas", ".spec.template.spec.hostNetwork",
           ".spec.template.spec.containers[0].image", ".spec.template.spec.containers[0].ports"}
changed = diff(orig_cm, cm) + diff(orig_dep, dep)
extra = [p for p in changed if p not in allowed and not p.endswith(".httpGet.port") and ".volumes[" not in p
         and ".volumeMounts[" not in p]
if extra:
    sys.exit(f"FAIL: the test copy changes more than it says: {extra}")
config_diff = diff(json.loads(orig_cm["data"]["sigserve.json"]), config)
if any(not k.startswith((".server.endpoints", ".server.http")) for k in config_diff):
    sys.exit(f"FAIL: the test copy changes the config beyond endpoints and http: {config_diff}")
yaml.safe_dump_all([cm, dep], open(out, "w"), sort_keys=False)
print(f"test copy: {', '.join(changed)}")
PY
echo "---- $tmp/play.yaml"; cat "$tmp/play.yaml"; echo "----"
probes=$("$PYTHON" -c 'import sys, yaml
dep = list(yaml.safe_load_all(open(sys.argv[1])))[1]
c = dep["spec"]["template"]["spec"]["containers"][0]
for p in ("startupProbe", "readinessProbe", "livenessProbe"):
    print(p, c[p]["httpGet"]["path"], c[p]["httpGet"]["port"])' "$tmp/play.yaml")

start=$(date +%s)
played=1
podman kube play "$tmp/play.yaml" >"$tmp/play.log" 2>&1 || { cat "$tmp/play.log"; fail "podman kube play"; }
pod=$(podman pod ps --filter "name=^$name-pod" --format '{{.Name}}' | head -n 1)
[ -n "$pod" ] || { cat "$tmp/play.log"; fail "podman kube play made no pod named $name-pod*"; }
container=$(podman ps -a --filter "pod=$pod" --format '{{.Names}}' | grep -v -- '-infra$' | head -n 1)
[ "$(podman pod ps --filter "name=^$name-pod" --format '{{.Name}}' | wc -l)" = 1 ] || fail "more than one pod"

# get PORT PATH: the HTTP status code (000 when nothing answers).
get () {
    "$PYTHON" -c 'import sys, urllib.request
try:
    print(urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}{sys.argv[2]}", timeout=2).status)
except Exception as e:
    print(getattr(e, "code", None) or "000")' "$1" "$2"
}
i=0
until [ "$(get "$http_port" /readyz)" = 200 ]; do
    i=$((i + 1))
    if [ $i -ge 600 ] || [ "$(podman inspect --format '{{.State.Running}}' "$container")" != true ]; then
        podman logs "$container" 2>&1 | tail -n 20; fail "the pod $pod is not ready (GET /readyz) after $((i / 10)) s"
    fi
    sleep 0.1
done
ok "podman kube play: pod $pod ready (GET /readyz 200) $(( $(date +%s) - start )) s after the play"

echo "$probes" | while read -r probe path port; do
    code=$(get "$port" "$path")
    [ "$code" = 200 ] || fail "the $probe (GET $path on $port) answered $code"
done || exit 1
# podman runs the liveness probe as the container's health check: it must ask the same thing.
check=$(podman inspect --format '{{json .Config.Healthcheck.Test}}' "$container")
case $check in *":$http_port/healthz"*) ;; *) fail "podman's health check from the liveness probe is $check" ;; esac
ok "the manifest's probes answer 200: $(echo "$probes" | awk '{printf "%s%s %s", sep, $1, $2; sep=", "}') (podman made the liveness probe its health check: $check)"

user=$(podman inspect --format '{{.Config.User}}' "$container")
ro=$(podman inspect --format '{{.HostConfig.ReadonlyRootfs}}' "$container")
[ "$user" = 10001:10001 ] && [ "$ro" = true ] || fail "the container runs as '$user', read-only root: $ro"
podman exec "$container" cat /etc/sigserve/sigserve.json | grep -q "tcp://127.0.0.1:$zmq_port" ||
    fail "the ConfigMap is not what /etc/sigserve/sigserve.json holds"
ok "as the manifest says: uid 10001, read-only root filesystem, the ConfigMap at /etc/sigserve"

out=$("$client" --endpoint "tcp://127.0.0.1:$zmq_port" health) || fail "sigclient health: $out"
case $out in "live=1 ready=1 version=$(cat VERSION)") ;; *) fail "health said '$out'" ;; esac
n=$("$client" --endpoint "tcp://127.0.0.1:$zmq_port" infer --model tick_mlp --random 512 2>/dev/null | wc -w) ||
    fail "sigclient infer"
[ "$n" = 1 ] || fail "infer gave $n outputs"
ok "sigclient: $out; tick_mlp answers an inference over ZeroMQ"

podman pod stop -t 30 "$pod" >/dev/null 2>&1 || fail "podman pod stop"
code=$(podman inspect --format '{{.State.ExitCode}}' "$container")
[ "$code" = 0 ] || { podman logs "$container" 2>&1 | tail -n 20; fail "the container exited $code when the pod stopped"; }
podman logs "$container" 2>&1 | grep -q 'draining' || fail "the log does not mention the drain"
podman kube down "$tmp/play.yaml" >"$tmp/down.log" 2>&1 || { cat "$tmp/down.log"; fail "podman kube down"; }
podman volume rm -f "$name-config" "$name-tmp" >/dev/null 2>&1 || true
played=
left=$(podman ps -a --format '{{.Names}}' | grep -- "^$name" || true)
[ -z "$left" ] || fail "podman kube down left containers: $left"
[ -z "$(podman pod ps --filter "name=^$name" --format '{{.Name}}')" ] || fail "podman kube down left the pod"
[ -z "$(podman volume ls --format '{{.Name}}' | grep -- "^$name" || true)" ] || fail "volumes of the play are left"
ok "stopping the pod drains and exits 0; podman kube down removes pod and containers (and the test its volumes)"
done_checks "podman kube play of deploy/k8s"
