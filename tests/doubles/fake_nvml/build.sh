#!/bin/sh
# Build the fake NVML TEST DOUBLE: tests/doubles/fake_nvml/build.sh OUTDIR
#
# Writes OUTDIR/libnvidia-ml.so.1 (and a libnvidia-ml.so link). Put OUTDIR first
# in LD_LIBRARY_PATH and name a node configuration in FAKE_NVML_CONFIG; the real
# pynvml then loads the double instead of NVIDIA's library. Never install it
# into a system library directory. Compiler: $CC, default gcc.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: build.sh OUTDIR}
mkdir -p "$out"
${CC:-gcc} -std=c11 -O2 -g -Wall -Wextra -fPIC -shared -pthread -fvisibility=hidden \
    -Wl,-soname,libnvidia-ml.so.1 -Wl,--no-undefined \
    -o "$out/libnvidia-ml.so.1.tmp.$$" "$here/fake_nvml.c"
mv -f "$out/libnvidia-ml.so.1.tmp.$$" "$out/libnvidia-ml.so.1"
ln -sf libnvidia-ml.so.1 "$out/libnvidia-ml.so"
echo "$out/libnvidia-ml.so.1"
