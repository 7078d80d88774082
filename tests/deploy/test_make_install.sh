#!/bin/sh
# `make install`: what lands where (PREFIX, SYSCONFDIR, DESTDIR), libsigclient's SONAME and exported
# symbols, a program built against the installed library through pkg-config that links, runs and
# gets an answer from the installed sigserve started with the installed default config, the
# operator's config kept on a second install, and `make uninstall`.
set -eu
. tests/deploy/lib.sh
command -v pkg-config >/dev/null || skip "pkg-config is not installed"
version=$(cat VERSION)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sigserve-install.XXXXXX")
server=
cleanup () { [ -n "$server" ] && kill "$server" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT INT TERM

prefix=$tmp/usr
make_build install PREFIX="$prefix" SYSCONFDIR="$tmp/etc" >"$tmp/install.log" 2>&1 ||
    { cat "$tmp/install.log"; fail "make install PREFIX=$prefix"; }
for f in bin/sigserve bin/sigclient bin/sigload lib/libsigclient.so.$version lib/libsigclient.a \
         lib/pkgconfig/libsigclient.pc include/sigclient.h share/sigserve/sigserve.json \
         share/sigserve/models/tick_mlp.safetensors share/man/man1/sigserve.1 share/man/man1/sigclient.1 \
         share/man/man1/sigload.1 share/man/man3/libsigclient.3 share/man/man5/sigserve.json.5 \
         lib/systemd/system/sigserve.service lib/sysusers.d/sigserve.conf; do
    [ -f "$prefix/$f" ] || fail "make install did not install $prefix/$f"
done
[ "$(readlink "$prefix/lib/libsigclient.so.0")" = "libsigclient.so.$version" ] || fail "libsigclient.so.0 link"
[ "$(readlink "$prefix/lib/libsigclient.so")" = "libsigclient.so.0" ] || fail "libsigclient.so link"
[ -f "$tmp/etc/sigserve/sigserve.json" ] || fail "no $tmp/etc/sigserve/sigserve.json"
ok "make install PREFIX=... puts binaries, library, header, pkg-config file, config, model, man pages and unit in place"

soname=$(readelf -d "$prefix/lib/libsigclient.so.$version" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[ "$soname" = libsigclient.so.0 ] || fail "SONAME is '$soname', expected libsigclient.so.0"
others=$(nm -D --defined-only "$prefix/lib/libsigclient.so.$version" | awk '{print $3}' | grep -v '^sigclient_' || true)
[ -z "$others" ] || fail "libsigclient.so exports more than sigclient_*: $others"
nm -D --defined-only "$prefix/lib/libsigclient.so.$version" | grep -q ' sigclient_infer$' || fail "no sigclient_infer"
ok "libsigclient.so.$version: SONAME libsigclient.so.0, exports sigclient_* only"

grep -q "\"weights\": \"$prefix/share/sigserve/models/tick_mlp.safetensors\"" "$tmp/etc/sigserve/sigserve.json" ||
    fail "the installed config does not name the installed model"
# Plaintext on every interface is not a default a package should make (docs/security.md).
grep -q '"endpoints": \["tcp://127.0.0.1:5555"\]' "$tmp/etc/sigserve/sigserve.json" ||
    fail "the installed config does not listen on loopback only: $(grep endpoints "$tmp/etc/sigserve/sigserve.json")"
grep -q "ExecStart=$prefix/bin/sigserve --config $tmp/etc/sigserve/sigserve.json" \
    "$prefix/lib/systemd/system/sigserve.service" || fail "the installed unit does not start the installed sigserve"
"$prefix/bin/sigserve" --check-config "$tmp/etc/sigserve/sigserve.json" >"$tmp/check.log" 2>&1 ||
    { cat "$tmp/check.log"; fail "sigserve --check-config on the installed config"; }
ok "the installed config and unit name the installed paths, it listens on 127.0.0.1:5555; --check-config passes"

# A client program, built only through pkg-config.
cat >"$tmp/client.c" <<'C'
#include <sigclient.h>
#include <stdio.h>

int main (int argc, char **argv)
{
    const char *endpoints[] = { argv[1] };
    sigclient_t *client = sigclient_new (endpoints, 1, 5000);
    if (!client || argc != 2) return 2;
    float features[512], out[4];
    for (int i = 0; i < 512; i++) features[i] = (float) (i % 13) / 13.0f;
    size_t n = 0;
    sigclient_result_t result;
    if (sigclient_infer (client, "tick_mlp", features, 512, 1, out, 4, &n, &result) != 0) {
        fprintf (stderr, "%s\n", sigclient_error (client));
        return 1;
    }
    printf ("outputs=%zu first=%.6g status=%s\n", n, (double) out[0], sigclient_status_name (result.status));
    sigclient_destroy (&client);
    return 0;
}
C
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
[ "$(pkg-config --modversion libsigclient)" = "$version" ] || fail "pkg-config --modversion libsigclient"
libdir=$(pkg-config --variable=libdir libsigclient)
# shellcheck disable=SC2046
cc -o "$tmp/client" "$tmp/client.c" $(pkg-config --cflags --libs libsigclient) -Wl,-rpath,"$libdir" ||
    fail "cc client.c \$(pkg-config --cflags --libs libsigclient)"
readelf -d "$tmp/client" | grep -q 'NEEDED.*\[libsigclient.so.0\]' || fail "the client does not need libsigclient.so.0"
ldd "$tmp/client" | grep -q "libsigclient.so.0 => $prefix/lib/libsigclient.so.0" ||
    fail "the client does not load the installed library: $(ldd "$tmp/client" | grep sigclient)"
ok "a program built with \$(pkg-config --cflags --libs libsigclient) links against libsigclient.so.0"

port=$(free_port)
sed "s|tcp://127.0.0.1:5555|tcp://127.0.0.1:$port|" "$tmp/etc/sigserve/sigserve.json" >"$tmp/serve.json"
"$prefix/bin/sigserve" --config "$tmp/serve.json" >"$tmp/server.log" 2>&1 &
server=$!
wait_ready "$prefix/bin/sigclient" "tcp://127.0.0.1:$port" 30 || { cat "$tmp/server.log"; fail "installed sigserve not ready"; }
out=$("$tmp/client" "tcp://127.0.0.1:$port") || fail "the client program failed: $out"
case $out in "outputs=1 first="*" status=STATUS_OK") ;; *) fail "the client program printed '$out'" ;; esac
ok "it runs against the installed sigserve: $out"
kill -TERM "$server"
rc=0; wait "$server" || rc=$?
server=
[ "$rc" = 0 ] || { cat "$tmp/server.log"; fail "sigserve exited $rc after SIGTERM"; }
ok "the installed sigserve drains and exits 0 on SIGTERM"

# A second install keeps the operator's config; uninstall removes what install put.
echo '{"edited": true}' >"$tmp/etc/sigserve/sigserve.json"
make_build install PREFIX="$prefix" SYSCONFDIR="$tmp/etc" >"$tmp/install2.log" 2>&1 ||
    { cat "$tmp/install2.log"; fail "second make install"; }
grep -q edited "$tmp/etc/sigserve/sigserve.json" || fail "a second make install overwrote the config in SYSCONFDIR"
make_build uninstall PREFIX="$prefix" SYSCONFDIR="$tmp/etc" >"$tmp/uninstall.log" 2>&1 || fail "make uninstall"
left=$(find "$prefix" -type f -o -type l)
[ -z "$left" ] || fail "make uninstall left: $left"
ok "a second install keeps the operator's config; make uninstall removes the rest"

# Staged, as a package build does: paths say /usr, files land under DESTDIR.
stage=$tmp/stage
make_build install PREFIX=/usr DESTDIR="$stage" >"$tmp/stage.log" 2>&1 || { cat "$tmp/stage.log"; fail "make install DESTDIR"; }
[ -x "$stage/usr/bin/sigserve" ] && [ -f "$stage/etc/sigserve/sigserve.json" ] || fail "DESTDIR install incomplete"
grep -q '"weights": "/usr/share/sigserve/models/tick_mlp.safetensors"' "$stage/etc/sigserve/sigserve.json" ||
    fail "the staged config does not name /usr/share/sigserve"
grep -q '^prefix=/usr$' "$stage/usr/lib/pkgconfig/libsigclient.pc" || fail "the staged .pc does not say prefix=/usr"
flags=$(PKG_CONFIG_SYSROOT_DIR=$stage PKG_CONFIG_PATH=$stage/usr/lib/pkgconfig pkg-config --cflags --libs libsigclient)
case $flags in *"-L$stage/usr/lib"*"-lsigclient"*) ;; *) fail "staged pkg-config flags: $flags" ;; esac
# shellcheck disable=SC2086
cc -o "$tmp/client-staged" "$tmp/client.c" $flags || fail "cc client.c $flags (the staged tree)"
ok "make install PREFIX=/usr DESTDIR=... stages /usr paths under DESTDIR (and links through PKG_CONFIG_SYSROOT_DIR)"
done_checks "make install"
