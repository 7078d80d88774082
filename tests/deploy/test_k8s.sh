#!/bin/sh
# deploy/k8s: every manifest validates against the Kubernetes schemas (kubernetes-validate --strict,
# the oldest and newest versions it knows; SKIP without it: `pip install kubernetes-validate`), and
# the manifests agree with each other and with sigserve: the ConfigMap's sigserve.json passes
# `sigserve --check-config`, and sigserve started with it answers the probes (GET /readyz and
# /healthz on the port they use, 200), the headless Service and
# the PodDisruptionBudget select the pods of both Deployments, kustomization.yaml lists files that exist.
set -eu
. tests/deploy/lib.sh
dir=deploy/k8s
manifests="$dir/configmap.yaml $dir/deployment.yaml $dir/deployment-cuda.yaml $dir/service.yaml $dir/pdb.yaml"
if command -v kubernetes-validate >/dev/null 2>&1; then validate=kubernetes-validate
elif "$PYTHON" -c 'import kubernetes_validate' 2>/dev/null; then validate="$PYTHON -m kubernetes_validate"
else skip "kubernetes-validate is not installed (pip install kubernetes-validate)"
fi
"$PYTHON" -c 'import yaml' 2>/dev/null || skip "$PYTHON has no yaml module (Debian package python3-yaml)"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sigserve-k8s.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM

for k in 1.28.0 ""; do
    # shellcheck disable=SC2086
    $validate --strict --quiet ${k:+-k $k} $manifests >"$tmp/validate.log" 2>&1 || { cat "$tmp/validate.log"; fail "kubernetes-validate ${k:-(newest)}"; }
done
ok "$(echo $manifests | wc -w) manifests validate (kubernetes-validate --strict, Kubernetes 1.28 and $($validate --version 2>/dev/null | awk '{print $NF}'))"

# A broken manifest must fail: the validator is really at work.
sed 's/replicas: 3/replicas: "3"/' $dir/deployment.yaml >"$tmp/broken.yaml"
# shellcheck disable=SC2086
if $validate --strict --quiet "$tmp/broken.yaml" >/dev/null 2>&1; then fail "kubernetes-validate accepted replicas: \"3\""; fi
ok "a deliberately broken Deployment is rejected"

"$PYTHON" - "$dir" "$BUILD" "$tmp" <<'PY'
import json, os, subprocess, sys
import yaml

d, build, tmp = sys.argv[1:4]
load = lambda name: yaml.safe_load(open(os.path.join(d, name)))
cm, svc, pdb = load("configmap.yaml"), load("service.yaml"), load("pdb.yaml")
deps = [load("deployment.yaml"), load("deployment-cuda.yaml")]
kust = load("kustomization.yaml")


def fail(why):
    sys.exit(f"FAIL: {why}")


config = json.loads(cm["data"]["sigserve.json"])
http_port = int(config["server"]["http"].rsplit(":", 1)[1])
zmq_port = int(config["server"]["endpoints"][0].rsplit(":", 1)[1])
config["models"][0]["weights"] = os.path.abspath(os.path.join(build, "models", "tick_mlp.safetensors"))
path = os.path.join(tmp, "sigserve.json")
json.dump(config, open(path, "w"))
p = subprocess.run([os.path.join(build, "sigserve"), "--check-config", path], capture_output=True, text=True)
if p.returncode != 0:
    fail(f"the ConfigMap's sigserve.json fails sigserve --check-config: {p.stdout}{p.stderr}")
print("ok - the ConfigMap's sigserve.json passes sigserve --check-config (weights pointed at this build's)")

# The probes against the real server with that config (on free ports): /readyz and /healthz answer 200.
import socket, time, urllib.request


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


zmq_free, http_free = free_port(), free_port()
config["server"]["endpoints"] = [f"tcp://127.0.0.1:{zmq_free}"]
config["server"]["http"] = f"127.0.0.1:{http_free}"
json.dump(config, open(path, "w"))
log = open(os.path.join(tmp, "sigserve.log"), "w")
server = subprocess.Popen([os.path.join(build, "sigserve"), "--config", path], stdout=log, stderr=subprocess.STDOUT)
try:
    codes, deadline = {}, time.monotonic() + 30
    while time.monotonic() < deadline and codes.get("/readyz") != 200:
        for probe in ("/readyz", "/healthz"):
            try:
                codes[probe] = urllib.request.urlopen(f"http://127.0.0.1:{http_free}{probe}", timeout=2).status
            except Exception as e:  # not up yet (connection refused), or 503 while loading
                codes[probe] = getattr(e, "code", None)
        time.sleep(0.1)
    if codes != {"/readyz": 200, "/healthz": 200}:
        fail(f"the probes' endpoints answered {codes}:\n" + open(os.path.join(tmp, "sigserve.log")).read())
finally:
    server.terminate()
    server.wait(timeout=30)
print("ok - with that config sigserve answers the probes' GET /readyz and GET /healthz with 200")

svc_ports = {p["name"]: p for p in svc["spec"]["ports"]}
if svc["spec"].get("clusterIP") != "None":
    fail("the Service is not headless (clusterIP: None)")
if svc_ports["zmq"]["port"] != zmq_port or svc_ports["http"]["port"] != http_port:
    fail(f"the Service's ports {svc_ports} are not the config's {zmq_port} and {http_port}")
for dep in deps:
    name = dep["metadata"]["name"]
    pod = dep["spec"]["template"]
    labels = pod["metadata"]["labels"]
    for sel, what in ((svc["spec"]["selector"], "the Service"), (pdb["spec"]["selector"]["matchLabels"], "the PDB"),
                      (dep["spec"]["selector"]["matchLabels"], "its own selector")):
        if any(labels.get(k) != v for k, v in sel.items()):
            fail(f"{what} does not select the pods of {name}")
    c = pod["spec"]["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    if ports != {"zmq": zmq_port, "http": http_port}:
        fail(f"{name}: container ports {ports}, config {zmq_port}/{http_port}")
    for probe, path_ in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz"), ("startupProbe", "/readyz")):
        g = c[probe]["httpGet"]
        if g["path"] != path_ or ports.get(g["port"], g["port"]) != http_port:
            fail(f"{name}: {probe} asks {g}, expected {path_} on the http port {http_port}")
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    vols = {v["name"]: v for v in pod["spec"]["volumes"]}
    if mounts.get("config") != "/etc/sigserve" or vols["config"]["configMap"]["name"] != cm["metadata"]["name"]:
        fail(f"{name} does not mount the ConfigMap at /etc/sigserve")
    sc = c["securityContext"]
    if not (pod["spec"]["securityContext"]["runAsNonRoot"] and sc["readOnlyRootFilesystem"]
            and not sc["allowPrivilegeEscalation"]):
        fail(f"{name}: not non-root with a read-only root filesystem")
    grace = pod["spec"]["terminationGracePeriodSeconds"]
    pause = int(c["lifecycle"]["preStop"]["exec"]["command"][1])
    if grace * 1000 < pause * 1000 + config["server"]["drain_ms"] + 5000:
        fail(f"{name}: terminationGracePeriodSeconds {grace} does not cover the preStop pause and drain_ms")
gpu = deps[1]["spec"]["template"]["spec"]["containers"][0]
if gpu["resources"]["limits"].get("nvidia.com/gpu") != 1 or not gpu["image"].endswith(":cuda"):
    fail("deployment-cuda.yaml does not request a GPU for the cuda image")
print("ok - the headless Service and the PDB select both Deployments' pods; ports, probes (/healthz, /readyz on "
      f"{http_port}), config mount, grace period and the GPU request agree")

for r in kust["resources"]:
    if not os.path.exists(os.path.join(d, r)):
        fail(f"kustomization.yaml lists {r}, which does not exist")
print(f"ok - kustomization.yaml lists {', '.join(kust['resources'])}")
PY
checks=$((checks + 4))
done_checks "Kubernetes manifests"
