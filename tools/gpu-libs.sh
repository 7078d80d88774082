#!/bin/sh
# Copies the shared libraries that build/ needs and a CUDA host lacks (libzmq, protobuf-c, cJSON,
# OpenBLAS, Check's subunit and their dependencies) into .devlibs, for tools/gpu-run.sh.
set -eu
mkdir -p .devlibs
for bin in build/sigserve build/sigclient build/sigbench build/tests/test_*; do
    case "$bin" in *.log) continue;; esac
    ldd "$bin" | awk '/=> \//{print $3}'
done | sort -u | grep -vE '/(libc|libm|libpthread|libdl|librt|libresolv|libgcc_s|libstdc\+\+|ld-linux[^/]*)\.so' \
    | grep -v '/usr/local/cuda' | while read -r lib; do cp -L "$lib" .devlibs/; done
du -sh .devlibs
# The binaries and the demo weights alone (not the objects): what tools/gpu-run.sh runs, as BUILD.
rm -rf .gpubuild && mkdir -p .gpubuild/tests .gpubuild/models
cp build/sigserve build/sigclient build/sigbench build/sigload .gpubuild/
cp build/models/tick_mlp.safetensors .gpubuild/models/
for t in build/tests/test_*; do case "$t" in *.log) ;; *) cp "$t" .gpubuild/tests/;; esac; done
strip --strip-debug .gpubuild/sigserve .gpubuild/sigclient .gpubuild/sigbench .gpubuild/sigload .gpubuild/tests/* .devlibs/*
du -sh .gpubuild .devlibs
