#!/bin/sh
# Where a kernel spills: every local-memory store and load (STL / LDL) of the functions whose names
# match PATTERN in OBJECT (an nvcc object built with -lineinfo), each with the source line it came
# from and a few instructions around it. Needs cuobjdump and nvdisasm (the GPU host has them; this
# machine's CUDA has neither). Usage: sh tools/sass-spills.sh OBJECT [PATTERN] [CONTEXT]
#   nvcc -O3 -std=c++17 -gencode arch=compute_90,code=sm_90 -lineinfo -Ikernels -c kernels/lstm_persistent.cu -o x.o
#   sh tools/sass-spills.sh x.o 'l_kernelILi1ELi0ELb0ELb0E'
set -eu
OBJ=$1
PATTERN=${2:-.}
CONTEXT=${3:-6}
CUDA_BIN=${CUDA_HOME:-/usr/local/cuda}/bin
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
(cd "$D" && "$CUDA_BIN/cuobjdump" -xelf all "$OLDPWD/$OBJ" >/dev/null)
for cubin in "$D"/*.cubin; do
    "$CUDA_BIN/nvdisasm" -c -gi "$cubin"
done | awk -v pat="$PATTERN" -v ctx="$CONTEXT" '
    /^[ \t]*\.text\./ || /^[ \t]*Function :/ { fn = $0; keep = (fn ~ pat); n = 0; next }
    !keep { next }
    /^[ \t]*\/\/##/ { src = $0; next }                      # nvdisasm -gi: the line an instruction came from
    {
        n++; line[n % 64] = $0; at[n % 64] = src
        if ($0 ~ /(STL|LDL)[ .]/) {
            printf "=== %s\n", fn
            for (i = n - ctx; i <= n; i++) if (i > 0) printf "%s\n    %s\n", at[i % 64], line[i % 64]
            after = ctx
            next
        }
        if (after > 0) { printf "%s\n    %s\n", src, $0; after--; if (after == 0) print "" }
    }'
