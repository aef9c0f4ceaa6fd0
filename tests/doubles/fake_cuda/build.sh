#!/bin/sh
# Build the fake CUDA toolkit TEST DOUBLE: tests/doubles/fake_cuda/build.sh OUTDIR
#
# Lays out OUTDIR as a toolkit: bin/nvcc (a script around $CC), include/
# cuda_runtime_api.h (only what the probe uses) and lib64/libcudart.so (the
# fake runtime, reading the fake node named by FAKE_NVML_CONFIG). Give OUTDIR
# to the probe as --cuda-home. Never install it as a real toolkit.
# Compiler: $CC, default gcc.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: build.sh OUTDIR}
mkdir -p "$out/bin" "$out/include" "$out/lib64"
${CC:-gcc} -std=c11 -O2 -g -Wall -Wextra -fPIC -shared -pthread -fvisibility=hidden \
    -Wl,-soname,libcudart.so -Wl,--no-undefined \
    -o "$out/lib64/libcudart.so.tmp.$$" "$here/fake_cudart.c"
mv -f "$out/lib64/libcudart.so.tmp.$$" "$out/lib64/libcudart.so"
cp "$here/cuda_runtime_api.h" "$out/include/cuda_runtime_api.h"
cp "$here/nvcc" "$out/bin/nvcc"
chmod 755 "$out/bin/nvcc"
echo "$out"
