#!/bin/sh
# The manual: man/*.1 say what the programs' --help says (man/gen-man.py --check: after changing a
# usage text, `make man` regenerates them); sigserve.json(5), made from config/README.md, and
# libsigclient(3), made from clients/sigclient.h, hold every configuration key of the README's tables
# and every sigclient_* function of the header and of the built library; sigserve(1) points at
# sigserve.json(5); the build puts every page in BUILD/man (man/*.1 copied as they are), where
# `man -l` reads them before any install, and each section 1 page says its usage block once, in its
# SYNOPSIS; `make install-man` (part of `make install`) puts all five where man(1) finds them by
# name, and each renders without a warning (man, and groff -ww where groff is installed).
set -eu
. tests/deploy/lib.sh
for b in sigserve sigclient sigload; do [ -x "$BUILD/$b" ] || fail "$BUILD/$b is not built"; done
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sigserve-man.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM

"$PYTHON" man/gen-man.py --check "$BUILD" "$(cat VERSION)" || fail "man pages are stale: run 'make man'"
ok "man/sigserve.1, man/sigclient.1, man/sigload.1 match --help"
grep -q '^\.BR sigserve\.json (5)' man/sigserve.1 && grep -q 'See sigserve.json(5)' man/sigserve.1 ||
    fail "sigserve(1) does not point at sigserve.json(5)"
ok "sigserve(1) says: see sigserve.json(5)"

# Every page in BUILD/man, as the build leaves it: what README says to read before `make install`.
pages="$(cd man && echo *.1) libsigclient.3 sigserve.json.5"
make_build $(for p in $pages; do echo "$BUILD/man/$p"; done) >"$tmp/build-man.log" 2>&1 ||
    { cat "$tmp/build-man.log"; fail "make the pages in $BUILD/man"; }
[ "$(ls "$BUILD/man" | sort | tr '\n' ' ')" = "$(echo $pages | tr ' ' '\n' | sort | tr '\n' ' ')" ] ||
    fail "$BUILD/man holds $(ls "$BUILD/man" | tr '\n' ' '), expected $pages"
for p in man/*.1; do cmp -s "$p" "$BUILD/man/${p#man/}" || fail "$BUILD/man/${p#man/} is not $p"; done
[ "$(echo $pages | wc -w)" -eq 5 ] || fail "expected five pages, found: $pages"
ok "$BUILD/man holds all five pages: $pages"
grep -qF 'read one with `man -l build/man/sigserve.1`' README.md ||
    fail "README does not say how to read the pages in build/man before make install"
ok "README says how to read them before make install (man -l build/man/sigserve.1)"

# The usage block once: in SYNOPSIS, not again at the top of DESCRIPTION (nor anywhere as "usage:").
for p in man/*.1; do
    ! grep -n '^usage:' "$p" || fail "$p repeats its usage block in DESCRIPTION"
    first=$(sed -n '/^\.SH SYNOPSIS/,/^\.fi/p' "$p" | sed -n '3p')
    [ -n "$first" ] && [ "$(grep -cxF -- "$first" "$p")" -eq 1 ] || fail "$p: '$first' is not said once"
done
ok "man/*.1 give their usage once, in SYNOPSIS"

make_build install-man DESTDIR="$tmp/stage" PREFIX=/usr >"$tmp/install.log" 2>&1 ||
    { cat "$tmp/install.log"; fail "make install-man"; }
mandir=$tmp/stage/usr/share/man
for f in man1/sigserve.1 man1/sigclient.1 man1/sigload.1 man3/libsigclient.3 man5/sigserve.json.5; do
    [ -f "$mandir/$f" ] || fail "make install-man did not install $f"
done
ok "make install-man installs man1/sigserve.1 sigclient.1 sigload.1, man3/libsigclient.3, man5/sigserve.json.5"

if command -v man >/dev/null 2>&1; then
    # By name, as a user asks for them once installed; troff's complaints go to stderr.
    for page in "1 sigserve" "1 sigclient" "1 sigload" "3 libsigclient" "5 sigserve.json"; do
        out=$tmp/$(echo "$page" | tr ' ' _).txt
        # shellcheck disable=SC2086
        MANPATH=$mandir MANWIDTH=80 man $page >"$out" 2>"$out.err" || { cat "$out.err"; fail "man $page"; }
        [ ! -s "$out.err" ] || { cat "$out.err"; fail "man $page warns"; }
        [ -s "$out" ] || fail "man $page printed nothing"
    done
    ok "man finds and renders all five through MANPATH, without a warning (MANWIDTH=80)"
    for p in $pages; do
        MANWIDTH=80 man -l "$BUILD/man/$p" >"$tmp/l.txt" 2>"$tmp/l.err" || { cat "$tmp/l.err"; fail "man -l $BUILD/man/$p"; }
        [ ! -s "$tmp/l.err" ] || { cat "$tmp/l.err"; fail "man -l $BUILD/man/$p warns"; }
        [ -s "$tmp/l.txt" ] || fail "man -l $BUILD/man/$p printed nothing"
    done
    ok "man -l renders each of $BUILD/man without a warning (as README says, before make install)"
    # What a reader sees: each line of the program's usage block (from its --help) once in the page.
    for b in sigserve sigclient sigload; do
        MANWIDTH=200 man -l "$BUILD/man/$b.1" >"$tmp/$b.txt" 2>/dev/null
        "$BUILD/$b" --help >"$tmp/$b.help"
        "$PYTHON" - "$tmp/$b.help" "$tmp/$b.txt" <<'PY' || fail "man -l $BUILD/man/$b.1 does not show its usage block once"
import sys
norm = lambda line: " ".join(line.split())
help_lines = open(sys.argv[1]).read().split("\n")
start = next(i for i, line in enumerate(help_lines) if line.startswith("usage:"))
end = start + 1
while end < len(help_lines) and help_lines[end].startswith(" ") and help_lines[end].strip():
    end += 1
block = [norm(help_lines[start][len("usage:"):])] + [norm(line) for line in help_lines[start + 1:end]]
page = [norm(line) for line in open(sys.argv[2]).read().split("\n")]
wrong = [f"{page.count(line)}x {line!r}" for line in block if page.count(line) != 1]
if wrong:
    print("\n".join(wrong))
sys.exit(1 if wrong else 0)
PY
    done
    ok "man -l shows each program's usage block once (sigserve, sigclient, sigload)"
    sections=$tmp/5_sigserve.json.txt
    library=$tmp/3_libsigclient.txt
    for page in "$sections" "$library"; do
        ! grep -nE '^\s*\|.*\||```|\\f[BIR]' "$page" || fail "$page shows Markdown tables, fences or roff escapes"
    done
else
    echo "note: man is not installed (Debian package man-db): pages rendered with groff only"
    sections=
fi

# Every key of config/README.md's tables is a tag in sigserve.json(5).
keys=$(sed -n 's/^| `\([a-z_]*\)` |.*/\1/p' config/README.md | sort -u)
[ "$(echo "$keys" | wc -w)" -gt 20 ] || fail "found only $(echo "$keys" | wc -w) keys in config/README.md's tables"
if [ -n "$sections" ]; then
    for k in $keys; do
        grep -qE "^ {7}$k( |\$)" "$sections" || fail "sigserve.json(5) has no entry for '$k'"
    done
    ok "sigserve.json(5) has an entry for each of the $(echo "$keys" | wc -w) keys in config/README.md"
fi

# Every sigclient_* function: declared in the header (comments left out) and exported by the library.
declared=$("$PYTHON" -c 'import re, sys
text = re.sub(r"/\*.*?\*/", "", open(sys.argv[1]).read(), flags=re.S)
print("\n".join(sorted(set(re.findall(r"\b(sigclient_\w+)\s*\(", text)))))' clients/sigclient.h)
[ "$(echo "$declared" | wc -w)" -gt 15 ] || fail "found only $(echo "$declared" | wc -w) functions in sigclient.h"
# The library as installed (a version script exports the API only).
so=$BUILD/libsigclient.so.$(cat VERSION)
make_build "$so" >"$tmp/so.log" 2>&1 || { cat "$tmp/so.log"; fail "make $so"; }
exported=$(nm -D --defined-only "$so" | awk '$2 == "T" {print $3}' | sort -u)
synopsis=$(sed -n '/^SYNOPSIS/,/^DESCRIPTION/p' "${library:-/dev/null}")
for f in $(printf '%s\n%s\n' "$declared" "$exported" | sort -u); do
    grep -q "\b$f\b" "$mandir/man3/libsigclient.3" || fail "libsigclient(3) does not mention $f"
    if [ -n "$sections" ]; then
        echo "$synopsis" | grep -q "[ *]$f (" || fail "libsigclient(3)'s SYNOPSIS lacks $f"
    fi
done
ok "libsigclient(3) has all $(printf '%s\n%s\n' "$declared" "$exported" | sort -u | wc -l) sigclient_* functions of sigclient.h and libsigclient.so in its SYNOPSIS"

if command -v groff >/dev/null 2>&1; then
    for p in man/*.1 "$mandir/man3/libsigclient.3" "$mandir/man5/sigserve.json.5"; do
        warnings=$(groff -man -ww -z "$p" 2>&1) || fail "groff $p"
        [ -z "$warnings" ] || fail "groff warns about $p: $warnings"
    done
    ok "groff -man -ww renders all five without a warning"
fi
done_checks "man pages"
