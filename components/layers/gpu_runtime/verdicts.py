"""The GPU baseline's verdict types: what one node must show (`GpuExpectation`), what the
judging found on it (`NodeVerdict`, with its stack output) and on the fleet (`FleetVerdict`).
Apart from baseline.py, which judges probe documents into them, so the types read on their own."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Optional

from ...config.hosts import NodeSpec
from .config import GpuRuntimeLayer
from .versions import cuda_version_text

Status = str  # "ok" | "failed" | "pending"


@dataclass(frozen=True)
class GpuExpectation:
    """What one node must show: from its `NodeSpec.gpus` and the stack's `gpu_runtime`."""

    node: str
    gpu_count: int
    gpu_model: str
    driver_version: str
    cuda_runtime: str
    #: cgroup v2 controllers that must be enabled (the seed: cpuset cpu memory io pids);
    #: empty: reported, not gated (the lab's hosts are cgroup v1 hybrids)
    required_cgroup_controllers: tuple[str, ...] = ()
    #: True: a clock that is not NTP-synchronized (or unknown) fails the node
    require_ntp: bool = False

    @classmethod
    def for_node(cls, node: NodeSpec, runtime: GpuRuntimeLayer, *,
                 required_cgroup_controllers: Iterable[str] = (),
                 require_ntp: bool = False) -> "GpuExpectation":
        if node.gpus is None:
            raise ValueError(f"node {node.name} declares no GPUs")
        return cls(node=node.name, gpu_count=node.gpus.count, gpu_model=node.gpus.model,
                   driver_version=runtime.driver_version, cuda_runtime=runtime.cuda_runtime,
                   required_cgroup_controllers=tuple(required_cgroup_controllers),
                   require_ntp=require_ntp)


@dataclass(frozen=True)
class NodeVerdict:
    node: str
    status: Status
    reasons: tuple[str, ...] = ()
    gpu_count: Optional[int] = None
    uuids: tuple[str, ...] = ()
    models: tuple[str, ...] = ()
    driver_version: Optional[str] = None
    nvml_version: Optional[str] = None
    kernel_module_version: Optional[str] = None
    cuda_driver_version: Optional[int] = None
    #: per device "major.minor" (V100: "7.0")
    compute_capability: tuple[str, ...] = ()
    #: every GPU supports BF16 (compute capability >= 8.0); SM70 (V100) -> False; None: unknown
    bf16: Optional[bool] = None
    #: the CUDA runtime probe: the toolkit it used (None: none found), the runtime version
    #: (12090), the devices it saw, and whether every one is SM 7.0 (None: not known)
    cuda_toolkit: Optional[str] = None
    cuda_runtime_version: Optional[int] = None
    cuda_device_count: Optional[int] = None
    sm70: Optional[bool] = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def cuda_runtime_output(self) -> dict[str, Any]:
        v = self.cuda_runtime_version
        return {"toolkit": self.cuda_toolkit,
                "version": cuda_version_text(v) if isinstance(v, int) and v > 0 else None,
                "device_count": self.cuda_device_count, "sm70": self.sm70}

    def output(self) -> dict[str, Any]:
        """The per-node stack output (`gpu.verdicts.<node>`): verdict, reasons, count, UUIDs,
        driver, CUDA."""
        cuda = self.cuda_driver_version
        return {
            "verdict": self.status,
            "reasons": list(self.reasons),
            "count": self.gpu_count,
            "uuids": list(self.uuids),
            "models": sorted(set(self.models)),
            "driver": self.driver_version,
            "nvml_version": self.nvml_version,
            "kernel_module": self.kernel_module_version,
            "cuda": cuda_version_text(cuda) if cuda else None,
            "cuda_driver_version": cuda,
            "compute_capability": sorted(set(self.compute_capability)),
            "bf16": self.bf16,
            "cuda_runtime": self.cuda_runtime_output(),
        }


@dataclass(frozen=True)
class FleetVerdict:
    nodes: dict[str, NodeVerdict]
    #: fleet-wide findings (duplicate UUIDs, drivers that differ between nodes)
    problems: tuple[str, ...] = ()
    #: probe documents for names the stack does not declare as GPU nodes (not judged)
    ignored: tuple[str, ...] = field(default=())

    @property
    def ok(self) -> bool:
        """No failed node and no fleet problem (pending nodes stay out by design)."""
        return not self.problems and all(v.status != "failed" for v in self.nodes.values())

    def names(self, status: Status) -> list[str]:
        return [n for n, v in self.nodes.items() if v.status == status]

    @property
    def passed(self) -> list[str]:
        return self.names("ok")

    @property
    def failed(self) -> list[str]:
        return self.names("failed")

    @property
    def pending(self) -> list[str]:
        return self.names("pending")

    def report(self) -> str:
        """Every problem and reason, one per line (for an error message or a log)."""
        lines = [f"GPU baseline: {len(self.passed)} ok, {len(self.failed)} failed, "
                 f"{len(self.pending)} pending"]
        lines += [f"  fleet: {p}" for p in self.problems]
        for v in self.nodes.values():
            lines += [f"  {v.node} [{v.status}]: {r}" for r in v.reasons]
        return "\n".join(lines)
