#!/bin/sh
# Copies the shared libraries that $BUILD (default build) needs and a CUDA host lacks (libzmq,
# protobuf-c, cJSON, OpenBLAS, Check's subunit and their dependencies) into .devlibs, and the
# binaries into .gpubuild, for tools/gpu-run.sh. BUILD=build-d sh tools/gpu-libs.sh packs
# another build folder.
set -eu
B=${BUILD:-build}
rm -rf .devlibs && mkdir -p .devlibs
# ONLY="sigbench tests/test_cuda_persistent": those binaries alone (the device tool carries 64 MiB with the tree)
ALL="sigserve sigserve-test sigclient sigbench sigload lstmbench rnncheck rtt $(cd "$B" && echo tests/test_*)"
ONLY=${ONLY:-$ALL}
for bin in $(for b in $ONLY; do echo "$B/$b"; done); do
    case "$bin" in *.log) continue;; esac
    [ -f "$bin" ] || continue
    ldd "$bin" | awk '/=> \//{print $3}'
done | sort -u | grep -vE '/(libc|libm|libpthread|libdl|librt|libresolv|libgcc_s|libstdc\+\+|ld-linux[^/]*)\.so' \
    | grep -v '/usr/local/cuda' | while read -r lib; do cp -L "$lib" .devlibs/; done
du -sh .devlibs
# The binaries and the demo weights alone (not the objects): what tools/gpu-run.sh runs, as BUILD.
rm -rf .gpubuild && mkdir -p .gpubuild/tests .gpubuild/models
for b in $ONLY; do case "$b" in *.log) ;; *) [ -f "$B/$b" ] && cp "$B/$b" ".gpubuild/$b";; esac; done
# sigserve opens its CUDA backend from beside itself when a model needs the GPU
case " $ONLY " in *" sigserve "*|*" sigserve-test "*) cp "$B/libsigserve-cuda.so" .gpubuild/;; esac
cp "$B"/models/tick_mlp.safetensors .gpubuild/models/
for f in .gpubuild/* .gpubuild/tests/* .devlibs/*; do [ -f "$f" ] && strip --strip-debug "$f"; done; :
du -sh .gpubuild .devlibs
# LINEINFO=1: an object of the LSTM kernel with line info, for tools/sass-spills.sh on the host (SPILLS=).
if [ "${LINEINFO:-0}" = 1 ]; then
    ${NVCC:-nvcc} -O3 -std=c++17 -gencode arch=compute_90,code=sm_90 -lineinfo -Ikernels -c kernels/lstm_persistent.cu \
        -o .gpubuild/lstm_persistent.lineinfo.o
fi
# BASE_BUILD=DIR: another build's sigserve, its CUDA library, sigclient, sigload and sigbench (for the
# A/B steps of tools/gpu-run.sh: SERVING_BASE=.gpubuild-base, BASE_SIGBENCH=.gpubuild-base/sigbench).
# Their libraries must be the ones .devlibs holds (the same machine's packages).
rm -rf .gpubuild-base
if [ -n "${BASE_BUILD:-}" ]; then
    mkdir -p .gpubuild-base/models
    for b in sigserve sigclient sigload sigbench libsigserve-cuda.so; do cp "$BASE_BUILD/$b" .gpubuild-base/; done
    cp "$BASE_BUILD"/models/tick_mlp.safetensors .gpubuild-base/models/
    for f in .gpubuild-base/*; do [ -f "$f" ] && strip --strip-debug "$f"; done
    du -sh .gpubuild-base
fi
# One compressed file to carry (the device tool carries 64 MiB in all; OpenBLAS alone is 36 MB):
# on the host, `tar xzf .gpupack.tgz` before tools/gpu-run.sh.
# PACK=xz: .gpupack.txz instead, about 2.5x smaller (the suites share most of their bytes; 15 suites and
# the servers: 59 MB gzip, 23 MB xz), slower to make; on the host `tar xJf .gpupack.txz` (or Python's
# tarfile where xz is missing).
rm -f .gpupack.tgz .gpupack.txz
if [ "${PACK:-gz}" = xz ]; then
    XZ_OPT=${XZ_OPT:--6 -T2} tar cJf .gpupack.txz .devlibs .gpubuild $( [ -d .gpubuild-base ] && echo .gpubuild-base ) $( [ -d .whl ] && echo .whl )
    du -sh .gpupack.txz
else
    tar czf .gpupack.tgz .devlibs .gpubuild $( [ -d .gpubuild-base ] && echo .gpubuild-base ) $( [ -d .whl ] && echo .whl )
    du -sh .gpupack.tgz
fi
