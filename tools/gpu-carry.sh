#!/bin/sh
# Packs this checkout's build ($BUILD, default build: tools/gpu-libs.sh) and its tools/ and
# tests/python/ into DEST/pack.tgz, for the device tool when it sends another checkout than this
# one (a helper's git worktree: the tool sends the session's checkout, so DEST must be a folder that
# checkout ignores, e.g. ../main/build-kern, carried by name). On the host:
#   cd build-kern && tar xzf pack.tgz && OUT=$OUT/x ... sh tools/gpu-run.sh
set -eu
DEST=${1:?usage: tools/gpu-carry.sh DEST}
sh tools/gpu-libs.sh >/dev/null
mkdir -p "$DEST"
tar czf "$DEST/pack.tgz" .devlibs .gpubuild tools tests/python
du -sh "$DEST/pack.tgz"
