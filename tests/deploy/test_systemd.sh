#!/bin/sh
# deploy/systemd/sigserve.service: `systemd-analyze verify` on the unit as `make install` writes it
# (SKIP where systemd-analyze is missing), and the sd_notify protocol the unit's Type=notify relies
# on, without systemd: sigserve started with NOTIFY_SOCKET pointing at a datagram socket of this
# test sends READY=1 only once the model answers (and from its main pid), RELOADING=1 then READY=1
# around a SIGHUP, STOPPING=1 at SIGTERM, then exits 0.
set -eu
. tests/deploy/lib.sh
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sigserve-systemd.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
[ -x "$BUILD/sigserve" ] && [ -x "$BUILD/sigclient" ] || fail "$BUILD/sigserve and $BUILD/sigclient must be built"

# ---- the unit ----
unit_src=deploy/systemd/sigserve.service
grep -q '^Type=notify$' $unit_src || fail "the unit is not Type=notify"
for key in ProtectSystem=strict NoNewPrivileges=yes User=sigserve Restart=on-failure RestartPreventExitStatus=2 \
           KillSignal=SIGTERM; do
    grep -q "^$key\$" $unit_src || fail "the unit lacks $key"
done
for key in CPUAffinity CPUSchedulingPolicy; do
    grep -q "^#$key=" $unit_src || fail "the unit lacks a commented $key= example"
done
ok "the unit: Type=notify, a dedicated user, restart policy, hardening, commented CPU affinity and real-time options"
if command -v systemd-analyze >/dev/null 2>&1; then
    # As installed: the paths rewritten to this build's sigserve, the man pages where man finds them.
    mkdir -p "$tmp/unit" "$tmp/man/man1" "$tmp/man/man5"
    sed -e "s|/usr/local/bin/sigserve|$(pwd)/$BUILD/sigserve|" -e "s|/etc/sigserve/sigserve.json|$tmp/sigserve.json|" \
        $unit_src >"$tmp/unit/sigserve.service"
    cp man/*.1 "$tmp/man/man1/"
    make_build "$BUILD/man/sigserve.json.5" >/dev/null || fail "make $BUILD/man/sigserve.json.5"
    cp "$BUILD/man/sigserve.json.5" "$tmp/man/man5/"
    # Documentation=man:... is checked with man(1) where man-db is installed.
    man=yes; command -v man >/dev/null 2>&1 || man=no
    if MANPATH="$tmp/man" systemd-analyze verify --man=$man "$tmp/unit/sigserve.service" >"$tmp/verify.log" 2>&1 &&
        ! grep -q . "$tmp/verify.log"; then
        ok "systemd-analyze verify passes, without a warning"
    else
        cat "$tmp/verify.log"
        fail "systemd-analyze verify $unit_src"
    fi
else
    echo "note: systemd-analyze is not installed (Debian package systemd): the unit is not verified"
fi

# ---- sd_notify ----
port=$(free_port)
sed -e "s|\"tcp://127.0.0.1:5555\"|\"tcp://127.0.0.1:$port\"|" \
    -e "s|\"../build/models/tick_mlp.safetensors\"|\"$(pwd)/$BUILD/models/tick_mlp.safetensors\"|" \
    -e 's|"backend": "auto"|"backend": "cpu"|' config/sigserve.json >"$tmp/sigserve.json"
grep -q "127.0.0.1:$port" "$tmp/sigserve.json" || fail "could not write the test config"
"$PYTHON" - "$BUILD" "$tmp" "$port" <<'PY'
import os, signal, socket, struct, subprocess, sys, time

build, tmp, port = sys.argv[1], sys.argv[2], sys.argv[3]
endpoint = f"tcp://127.0.0.1:{port}"
path = os.path.join(tmp, "notify.sock")
listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
listener.bind(path)
listener.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
log = open(os.path.join(tmp, "sigserve.log"), "w")
server = subprocess.Popen([os.path.join(build, "sigserve"), "--config", os.path.join(tmp, "sigserve.json")],
                          env=dict(os.environ, NOTIFY_SOCKET=path), stdout=log, stderr=subprocess.STDOUT)


def fail(why):
    server.kill()
    print(open(os.path.join(tmp, "sigserve.log")).read())
    sys.exit(f"FAIL: {why}")


def receive(timeout=30):
    """The next notification as {key: value}, with the sender's pid."""
    listener.settimeout(0.1)
    deadline = time.monotonic() + timeout
    while True:
        try:
            data, anc, _, _ = listener.recvmsg(4096, socket.CMSG_SPACE(12))
            break
        except socket.timeout:
            rc = server.poll()
            if rc is not None:
                fail(f"sigserve ended with {rc} before notifying" + (
                     " (killed by the signal itself: a thread that does not block it took it, and its default "
                     "action ended the process without a drain)" if rc < 0 else ""))
            if time.monotonic() > deadline:
                fail(f"no notification within {timeout} s")
    pid = next((struct.unpack("3i", d)[0] for level, kind, d in anc
                if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS), None)
    fields = dict(line.split("=", 1) for line in data.decode().splitlines() if "=" in line)
    return fields, pid


def health():
    p = subprocess.run([os.path.join(build, "sigclient"), "--endpoint", endpoint, "--timeout", "2000", "health"],
                       capture_output=True, text=True)
    return p.returncode, p.stdout.strip()


msg, pid = receive()
if msg.get("READY") != "1":
    fail(f"the first notification is {msg}, expected READY=1")
if pid != server.pid:
    fail(f"READY=1 came from pid {pid}, not sigserve's main pid {server.pid} (NotifyAccess=main)")
rc, out = health()      # at once: READY=1 means serving
if rc != 0 or not out.startswith("live=1 ready=1"):
    fail(f"READY=1 arrived but health says rc={rc} '{out}'")
p = subprocess.run([os.path.join(build, "sigclient"), "--endpoint", endpoint, "infer", "--model", "tick_mlp",
                    "--random", "512"], capture_output=True, text=True)
if p.returncode != 0:
    fail(f"READY=1 arrived but tick_mlp does not answer: {p.stderr}")
print(f"ok - READY=1 (STATUS={msg.get('STATUS')}) from the main pid once tick_mlp answers")

server.send_signal(signal.SIGHUP)
msg, _ = receive()
if msg.get("RELOADING") != "1" or "MONOTONIC_USEC" not in msg:
    fail(f"after SIGHUP: {msg}, expected RELOADING=1 with MONOTONIC_USEC")
msg, _ = receive()
if msg.get("READY") != "1":
    fail(f"after RELOADING=1: {msg}, expected READY=1")
print(f"ok - SIGHUP: RELOADING=1 (MONOTONIC_USEC), then READY=1 (STATUS={msg.get('STATUS')})")

server.send_signal(signal.SIGTERM)
msg, _ = receive()
if msg.get("STOPPING") != "1":
    fail(f"after SIGTERM: {msg}, expected STOPPING=1")
try:
    rc = server.wait(timeout=30)
except subprocess.TimeoutExpired:
    fail("sigserve still running 30 s after SIGTERM")
if rc != 0:
    fail(f"sigserve exited {rc} after SIGTERM")
print("ok - SIGTERM: STOPPING=1, then exit 0")
PY
checks=$((checks + 3))
done_checks "systemd unit and sd_notify"
