#!/bin/sh
# Every config the project ships loads without a warning: `sigserve --check-config` passes and logs
# nothing at warn or error for config/*.json, deploy/sigserve.json.in as `make install` writes it and
# as the image's build writes it, deploy/compose-sigserve.json, the Kubernetes ConfigMap's
# sigserve.json and examples/*.json. A shipped file that warns about itself (a deprecated key, say)
# teaches every user who copies it to ignore warnings. Weights paths that name where the file is
# installed (/usr/share/sigserve/...) are pointed at this build's demo model; nothing else changes.
# A control run makes sure a warning is seen: config/sigserve.json with server.queue_depth added.
set -eu
. tests/deploy/lib.sh
[ -x "$BUILD/sigserve" ] || fail "$BUILD/sigserve is not built"
[ -f "$BUILD/models/tick_mlp.safetensors" ] || fail "$BUILD/models/tick_mlp.safetensors is not built"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sigserve-configs.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
demo=$(cd "$BUILD/models" && pwd)/tick_mlp.safetensors

# stage NAME SOURCE: $tmp/NAME, SOURCE with weights that do not exist here pointed at the demo
# model (relative ones resolved against SOURCE's folder, as sigserve does).
stage () {
    "$PYTHON" - "$2" "$tmp/$1" "$demo" "${3:-}" <<'PY'
import json, os, sys
src, dest, demo, origin = sys.argv[1:5]
config = json.load(open(src))
base = os.path.dirname(os.path.abspath(origin or src))
for m in config.get("models", []):
    w = m.get("weights")
    if isinstance(w, str) and not os.path.exists(os.path.join(base, w)):
        m["weights"] = demo
    elif isinstance(w, str):
        m["weights"] = os.path.join(base, w)
json.dump(config, open(dest, "w"), indent=2)
PY
}

# warnings FILE: the warn and error lines --check-config logs (text or JSON format); fails if it fails.
warnings () {
    "$BUILD/sigserve" --check-config "$1" >"$1.log" 2>&1 || { cat "$1.log"; return 2; }
    grep -E '^[0-9T:.-]+Z (warn|error) |"level":"(warn|error)"' "$1.log" || true
}

shipped=""
for f in config/*.json examples/*.json deploy/compose-sigserve.json; do
    [ -f "$f" ] || continue
    name=$(echo "$f" | tr / _)
    stage "$name" "$f"
    shipped="$shipped $name=$f"
done
# deploy/sigserve.json.in as make install writes it (mk/install.mk) and as the image's build does.
sed -e 's|@DATADIR@|/usr/share/sigserve|g' -e 's|@LOG_FORMAT@|text|g' -e 's|@ENDPOINT@|tcp://127.0.0.1:5555|g' \
    deploy/sigserve.json.in >"$tmp/installed.in"
stage installed.json "$tmp/installed.in" deploy/sigserve.json.in
sed -e 's|@DATADIR@|/usr/share/sigserve|g' -e 's|@LOG_FORMAT@|json|g' -e 's|@ENDPOINT@|tcp://*:5555|g' \
    deploy/sigserve.json.in >"$tmp/image.in"
stage image.json "$tmp/image.in" deploy/sigserve.json.in
shipped="$shipped installed.json=deploy/sigserve.json.in(make-install) image.json=deploy/sigserve.json.in(image)"
if "$PYTHON" -c 'import yaml' 2>/dev/null; then
    "$PYTHON" -c 'import sys, yaml
print(yaml.safe_load(open("deploy/k8s/configmap.yaml"))["data"]["sigserve.json"])' >"$tmp/configmap.in"
    stage configmap.json "$tmp/configmap.in" deploy/k8s/configmap.yaml
    shipped="$shipped configmap.json=deploy/k8s/configmap.yaml"
else
    echo "note: $PYTHON has no yaml module (Debian package python3-yaml): the ConfigMap's config is not checked"
fi

for entry in $shipped; do
    file=$tmp/${entry%%=*}
    said=$(warnings "$file") || fail "sigserve --check-config ${entry#*=} failed"
    [ -z "$said" ] || fail "${entry#*=} logs at load:
$said"
done
names=$(for e in $shipped; do echo "${e#*=}"; done | paste -sd ' ')
ok "$(echo $shipped | wc -w) shipped configs pass --check-config without a warning: $names"

# The control: a deprecated key is caught.
"$PYTHON" -c 'import json, sys
c = json.load(open(sys.argv[1])); c["server"]["queue_depth"] = 64
json.dump(c, open(sys.argv[2], "w"))' "$tmp/config_sigserve.json" "$tmp/deprecated.json"
said=$(warnings "$tmp/deprecated.json") || fail "--check-config on the control config failed"
echo "$said" | grep -q 'queue_depth' || fail "the control (server.queue_depth) was not seen as a warning: '$said'"
ok "the check sees a warning: server.queue_depth added to config/sigserve.json is caught"
done_checks "shipped configs"
