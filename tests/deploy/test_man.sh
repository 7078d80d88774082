#!/bin/sh
# man/*.1 say what the programs' --help says (man/gen-man.py --check): after changing a usage text,
# `make man` regenerates them. Each page is valid roff where groff is installed.
set -eu
. tests/deploy/lib.sh
for b in sigserve sigclient sigload; do [ -x "$BUILD/$b" ] || fail "$BUILD/$b is not built"; done
"$PYTHON" man/gen-man.py --check "$BUILD" "$(cat VERSION)" || fail "man pages are stale: run 'make man'"
ok "man/sigserve.1, man/sigclient.1, man/sigload.1 match --help"
if command -v groff >/dev/null 2>&1; then
    for p in man/*.1; do
        warnings=$(groff -man -ww -z "$p" 2>&1) || fail "groff $p"
        [ -z "$warnings" ] || fail "groff warns about $p: $warnings"
    done
    ok "groff -man -ww renders them without a warning"
fi
done_checks "man pages"
