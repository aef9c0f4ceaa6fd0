"""The GPU runtime layer's config: the baseline every node must match."""

from __future__ import annotations

from pydantic import Field

from ...config.types import CgroupController, DottedVersion, RemotePath, Strict

class GpuProbePaths(Strict):
    """Where the probe reads kernel facts; a real node's defaults (only the lab's double moves them)."""

    nvidia_version_file: RemotePath = "/proc/driver/nvidia/version"
    sys_module_dir: RemotePath = "/sys/module"
    proc_modules: RemotePath = "/proc/modules"
    cgroup_controllers: RemotePath = "/sys/fs/cgroup/cgroup.controllers"


class GpuRuntimeLayer(Strict):
    """The GPU baseline every node must match (the seed unified on 580.173.02 / CUDA 12.9.1).

    A node that fails it is kept out of Slurm (fail closed), with the reason in the outputs."""

    enabled: bool = True
    driver_version: DottedVersion = "580.173.02"
    cuda_runtime: DottedVersion = "12.9.1"
    pynvml_dir: RemotePath = "/opt/gpu-fleet/lib"
    probe_paths: GpuProbePaths = GpuProbePaths()
    required_cgroup_controllers: list[CgroupController] = Field(default_factory=list)
    require_ntp: bool = False
    probe_timeout_s: int = Field(120, ge=5)
