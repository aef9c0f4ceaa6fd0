"""TEST DOUBLE: the files of a GPU node that the probe reads besides NVML.

A fake NVML configuration (the JSON that `fake_nvml.c` reads through
`FAKE_NVML_CONFIG`) describes a whole node; the library ignores the keys
below and this module lays them out as files under a directory, because a
test cannot write `/proc` or `/sys`:

  kernel_module_version  the loaded nvidia module (default: driver_version);
                         null: no version file
  kernel_module_flavor   "proprietary" (default) or "open": the two NVRM line formats
  kernel_module_loaded   true (default): sys/module/nvidia and a proc/modules line
  cgroup_controllers     list (default: a cgroup v2 host's); null: no cgroup.controllers
  ntp_synchronized       true (default) / false / null: what a `timedatectl` shim says
                         (null: the shim fails as on a host without systemd)

`lay_out` returns the probe arguments that point at those files and the
directory of the `timedatectl` shim, to put first in PATH. Stdlib only, so it
also runs on a lab node: `python3 fakenode.py CONFIG ROOT` prints the same as JSON.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

DEFAULT_CONTROLLERS = ["cpuset", "cpu", "io", "memory", "hugetlb", "pids", "rdma", "misc"]


def nvrm_line(version: str, flavor: str = "proprietary") -> str:
    """The first line of /proc/driver/nvidia/version, as the two module flavors print it."""
    if flavor == "open":
        return (f"NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  {version}  "
                "Release Build  (dvs-builder@U22-I3-AF03-09-1)  Tue Jun 10 17:25:53 UTC 2025")
    return f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {version}  Tue Jun 10 17:25:53 UTC 2025"


def lay_out(config: dict, root: os.PathLike | str) -> dict:
    """Write the node files under `root`; return {'probe_args': [...], 'path_dir': str}."""
    root = Path(root)
    kmod = config.get("kernel_module_version", config.get("driver_version", "580.173.02"))
    loaded = config.get("kernel_module_loaded", True)
    controllers = config.get("cgroup_controllers", DEFAULT_CONTROLLERS)
    ntp = config.get("ntp_synchronized", True)

    version_file = root / "proc/driver/nvidia/version"
    sys_module = root / "sys/module"
    proc_modules = root / "proc/modules"
    cgroup_file = root / "sys/fs/cgroup/cgroup.controllers"
    bin_dir = root / "bin"
    for d in (version_file.parent, sys_module, cgroup_file.parent, bin_dir):
        d.mkdir(parents=True, exist_ok=True)

    if kmod is not None:
        version_file.write_text(
            nvrm_line(kmod, config.get("kernel_module_flavor", "proprietary")) + "\n"
            "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14+deb12u1) \n")
    modules = ["ext4 1007616 2 - Live 0x0000000000000000"]
    if loaded:
        (sys_module / "nvidia").mkdir(exist_ok=True)
        if kmod is not None:
            (sys_module / "nvidia" / "version").write_text(kmod + "\n")
        modules.insert(0, "nvidia 56004608 2 nvidia_uvm,nvidia_modeset, Live 0x0000000000000000 (POE)")
    proc_modules.write_text("\n".join(modules) + "\n")
    if controllers is not None:
        cgroup_file.write_text(" ".join(controllers) + "\n")

    shim = bin_dir / "timedatectl"
    if ntp is None:
        body = ('echo "System has not been booted with systemd as init system (PID 1). '
                "Can't operate.\" >&2\nexit 1\n")
    else:
        body = f'echo {"yes" if ntp else "no"}\n'
    shim.write_text("#!/bin/sh\n# fake timedatectl (test double)\n" + body)
    shim.chmod(shim.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)

    return {
        "probe_args": [
            "--nvidia-version-file", str(version_file),
            "--sys-module-dir", str(sys_module),
            "--proc-modules", str(proc_modules),
            "--cgroup-controllers", str(cgroup_file),
        ],
        "path_dir": str(bin_dir),
    }


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: fakenode.py CONFIG.json ROOT")
    print(json.dumps(lay_out(json.loads(Path(sys.argv[1]).read_text()), sys.argv[2])))
