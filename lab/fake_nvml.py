"""TEST DOUBLE on the lab's nodes: the fake NVML library and a healthy 8 x V100 node each.

The lab has no GPU. So that the product's GPU baseline (components/layers/gpu_runtime/component.py)
runs its real probe with the real pynvml on the lab's nodes, `python -m lab up`
puts the test double of `tests/doubles/fake_nvml/` on every node host:

  /usr/local/lib/gpu-fleet-fake-nvml/libnvidia-ml.so.1   the fake, built here with gcc
  /etc/ld.so.conf.d/gpu-fleet-fake-nvml.conf             + ldconfig: dlopen finds it
  /usr/local/lib/gpu-fleet-fake-nvml/fakenode.py         lays out the node files below
  /usr/local/lib/gpu-fleet-fake-nvml/fake_gpu_check.py   plays the deep checks' commands
                                                         (dcgmi diag, all_reduce_perf)
  /usr/local/sbin/gpu-fleet-fake-nvml-node               re-lays them out from the config
  /etc/fake-nvml.json                                    the node's fake configuration
                                                         (written only when absent)
  /var/lib/gpu-fleet-fake-nvml/root/...                  what a container cannot have:
      proc/driver/nvidia/version, proc/modules, sys/module/nvidia/version
  /usr/local/cuda/{bin/nvcc,include,lib64/libcudart.so}  the fake CUDA toolkit
      (tests/doubles/fake_cuda/): the probe's CUDA runtime program is compiled with
      it (by tcc, installed from the lab repository) and its runtime reads the same
      /etc/fake-nvml.json

The default configuration is healthy: 8 x Tesla V100-SXM2-16GB, driver
580.173.02, UUIDs unique per node (tests/doubles/fake_nvml/harness.node_config).
A test that changes /etc/fake-nvml.json runs `gpu-fleet-fake-nvml-node` after it
(the kernel module files follow the config) and restores the healthy config
afterwards. Because /proc and /sys cannot be written in a container, the lab
stack points the probe at the files under FAKE_ROOT (PROBE_PATHS).

Idempotent: one SSH round trip per node compares a stamp (hash of the
double's sources) and installs only when it differs, so a running lab gets
the double without a reboot and a second `up` changes nothing on the nodes.
Nothing here is product code; the product never refers to these paths.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .common import ROOT, STATE, LabError, log, rel, run
from .hosts import Host
from .ssh import ssh_argv

SOURCE_DIR = ROOT / "tests" / "doubles" / "fake_nvml"
SOURCES = ("fake_nvml.c", "fake_json.h", "build.sh", "fakenode.py", "fake_gpu_check.py")
CUDA_SOURCE_DIR = ROOT / "tests" / "doubles" / "fake_cuda"
CUDA_SOURCES = ("fake_cudart.c", "cuda_runtime_api.h", "nvcc", "build.sh")
CUDA_HOME = "/usr/local/cuda"
#: what the fake nvcc compiles with on a node (the lab image has no C compiler)
NODE_COMPILER = ("tcc", "libc6-dev")
BUILD_DIR = STATE / "fake-nvml"

LIB_DIR = "/usr/local/lib/gpu-fleet-fake-nvml"
LDCONF = "/etc/ld.so.conf.d/gpu-fleet-fake-nvml.conf"
HELPER = "/usr/local/sbin/gpu-fleet-fake-nvml-node"
CONFIG = "/etc/fake-nvml.json"
FAKE_ROOT = "/var/lib/gpu-fleet-fake-nvml/root"

#: probe arguments for the lab's nodes (the probe's production defaults are the real paths);
#: the config field `gpu-fleet:gpu_runtime.probe_paths` carries them into the lab stack
PROBE_PATHS = {
    "nvidia_version_file": f"{FAKE_ROOT}/proc/driver/nvidia/version",
    "sys_module_dir": f"{FAKE_ROOT}/sys/module",
    "proc_modules": f"{FAKE_ROOT}/proc/modules",
}



def stack_lines() -> list[str]:
    """The lab stack's `gpu-fleet:gpu_runtime` key: the probe reads the double's kernel facts.

    For lab/stackfile.render_stack once GpuRuntimeLayer has `probe_paths` (then add
    "gpu-fleet:gpu_runtime" to OWNED_KEYS and regenerate stacks/Pulumi.lab.yaml).
    """
    paths = ", ".join(f"{k}: {v}" for k, v in PROBE_PATHS.items())
    return [
        "  gpu-fleet:gpu_runtime:",
        "    # TEST DOUBLE: a container cannot have /proc/driver/nvidia or /sys/module/nvidia;",
        "    # `lab up` lays the fake node's kernel facts out here (lab/fake_nvml.py).",
        f"    probe_paths: {{{paths}}}",
    ]


_HELPER_SH = f"""#!/bin/sh
# TEST DOUBLE (gpu-fleet lab): lay out the fake GPU node files that {CONFIG} describes
# (kernel module version and state) under {FAKE_ROOT}. Run after changing the config.
set -eu
rm -rf {FAKE_ROOT}
mkdir -p {FAKE_ROOT}
exec python3 {LIB_DIR}/fakenode.py "${{1:-{CONFIG}}}" {FAKE_ROOT} >/dev/null
"""

# $1: stamp. stdin: a tar of the double. Prints "unchanged" or "installed"; then checks that
# the dynamic loader finds the fake (as pynvml's CDLL("libnvidia-ml.so.1") does).
_INSTALL_SH = f"""
set -eu
stamp="$1"
if [ "$(cat {LIB_DIR}/STAMP 2>/dev/null)" = "$stamp" ] && [ -f {CONFIG} ]; then
  cat > /dev/null; echo unchanged
else
  t=$(mktemp -d); trap 'rm -rf "$t"' EXIT
  tar -C "$t" -xf -
  mkdir -p {LIB_DIR} /usr/local/sbin
  install -m 0755 "$t/libnvidia-ml.so.1" {LIB_DIR}/libnvidia-ml.so.1
  ln -sf libnvidia-ml.so.1 {LIB_DIR}/libnvidia-ml.so
  install -m 0644 "$t/fakenode.py" {LIB_DIR}/fakenode.py
  install -m 0644 "$t/fake_gpu_check.py" {LIB_DIR}/fake_gpu_check.py
  install -m 0644 "$t/README" {LIB_DIR}/README
  install -m 0755 "$t/helper.sh" {HELPER}
  printf '# TEST DOUBLE (gpu-fleet lab): the fake libnvidia-ml.so.1\\n{LIB_DIR}\\n' > {LDCONF}
  ldconfig
  [ -f {CONFIG} ] || install -m 0644 "$t/fake-nvml.json" {CONFIG}
  rm -rf {CUDA_HOME}; mkdir -p {CUDA_HOME}; cp -a "$t/cuda/." {CUDA_HOME}/
  command -v tcc >/dev/null || {{ apt-get -q update >/dev/null 2>&1 || true;
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
      {" ".join(NODE_COMPILER)} >/dev/null; }}
  {HELPER}
  echo "$stamp" > {LIB_DIR}/STAMP
  echo installed
fi
python3 -c 'import ctypes; ctypes.CDLL("libnvidia-ml.so.1")' \\
  || {{ echo "the fake libnvidia-ml.so.1 does not load" >&2; exit 3; }}
"""

_README = f"""TEST DOUBLE, not NVIDIA's library: the gpu-fleet lab's fake NVML
(tests/doubles/fake_nvml in the gpu-fleet repository), installed by `python -m lab up`.
Configuration: {CONFIG}; node files: {FAKE_ROOT} (re-laid out by {HELPER}).
"""


def stamp() -> str:
    h = hashlib.sha256()
    for name in SOURCES:
        h.update(name.encode() + b"\0" + (SOURCE_DIR / name).read_bytes() + b"\0")
    for name in CUDA_SOURCES:
        h.update(name.encode() + b"\0" + (CUDA_SOURCE_DIR / name).read_bytes() + b"\0")
    h.update(_HELPER_SH.encode() + _INSTALL_SH.encode() + _README.encode())
    return h.hexdigest()[:16]


def healthy_config(node: str) -> dict:
    """The default fake node: 8 x V100, driver 580.173.02, UUIDs unique to `node`."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from tests.doubles.fake_nvml.harness import node_config

    return {"_test_double": "gpu-fleet lab: fake NVML configuration (tests/doubles/fake_nvml); "
                            "not a GPU", **node_config(node)}


def build(key: str) -> Path | None:
    """Compile the double once per source version into the lab state dir (None: no compiler)."""
    out = BUILD_DIR / key
    lib = out / "libnvidia-ml.so.1"
    if lib.is_file():
        return lib
    if shutil.which(os.environ.get("CC", "gcc")) is None:
        return None
    if BUILD_DIR.exists():  # keep one build
        for old in BUILD_DIR.iterdir():
            if old.name != key:
                shutil.rmtree(old, ignore_errors=True)
    tmp = BUILD_DIR / f".{key}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    run(["sh", str(SOURCE_DIR / "build.sh"), str(tmp)], timeout=120)
    run(["sh", str(CUDA_SOURCE_DIR / "build.sh"), str(tmp / "cuda")], timeout=120)
    os.replace(tmp, out)
    return lib


def _bundle(lib: Path, node: str) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        def add(name: str, data: bytes, mode: int = 0o644) -> None:
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), mode, 0
            tar.addfile(info, io.BytesIO(data))

        add("libnvidia-ml.so.1", lib.read_bytes(), 0o755)
        add("fakenode.py", (SOURCE_DIR / "fakenode.py").read_bytes())
        add("fake_gpu_check.py", (SOURCE_DIR / "fake_gpu_check.py").read_bytes())
        add("helper.sh", _HELPER_SH.encode(), 0o755)
        add("README", _README.encode())
        add("fake-nvml.json", (json.dumps(healthy_config(node), indent=1) + "\n").encode())
        cuda = lib.parent / "cuda"
        for f in sorted(cuda.rglob("*")):
            if f.is_file():
                add(f"cuda/{f.relative_to(cuda)}", f.read_bytes(), f.stat().st_mode & 0o777)
        add("cuda/README", b"TEST DOUBLE, not NVIDIA's CUDA toolkit: tests/doubles/fake_cuda in the "
                           b"gpu-fleet repository, installed by `python -m lab up`.\n")
    return buf.getvalue()


def _install(h: Host, lib: Path, key: str) -> str:
    p = subprocess.run([*ssh_argv(h.address, connect_timeout=10), "--", "sh", "-c",
                        _quote(_INSTALL_SH), "sh", key],
                       input=_bundle(lib, h.name), capture_output=True, timeout=120)
    out = p.stdout.decode(errors="replace").strip()
    if p.returncode != 0:
        raise LabError(f"host {h.name}: installing the fake NVML test double failed "
                       f"(exit {p.returncode}): {out}\n{p.stderr.decode(errors='replace').strip()}")
    return out.splitlines()[-1] if out else ""


def _quote(s: str) -> str:
    import shlex

    return shlex.quote(s)


def ensure(hosts: list[Host]) -> None:
    """Put the double on every node host (idempotent; one SSH round trip per node)."""
    nodes = [h for h in hosts if "node" in h.roles]
    if not nodes:
        return
    start = time.monotonic()
    key = stamp()
    lib = build(key)
    if lib is None:
        log(f"WARNING: no C compiler ({os.environ.get('CC', 'gcc')}): the fake NVML test double "
            "is not installed, so the GPU baseline fails every lab node; install gcc")
        return
    with ThreadPoolExecutor(max_workers=len(nodes)) as ex:
        results = list(ex.map(lambda h: _install(h, lib, key), nodes))
    done = [h.name for h, r in zip(nodes, results) if r == "installed"]
    if done:
        log(f"fake NVML test double ({rel(lib)}) installed on {', '.join(done)} "
            f"in {time.monotonic() - start:.1f} s")
