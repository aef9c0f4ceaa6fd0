"""The node guards layer's config: heat soak, XIDs, NVML silence and the host memory guard."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, Optional, Union

from pydantic import Field, field_validator

from ...config.project import PROJECT
from ...config.types import RemotePath, Strict, Text

if TYPE_CHECKING:
    from ...config.fleet import FleetConfig


#: XIDs that mean the GPU or its links failed (not a job's own fault, as 13, 31, 43 or 45 usually
#: are): double-bit ECC (48), GPU microcontroller halt/breakpoint (61, 62), row remapping and
#: page retirement (63, 64), NVLink (74), fallen off the bus (79), high single-bit ECC rate
#: (92), contained and uncontained ECC (94, 95)
DEFAULT_DRAIN_XIDS = (48, 61, 62, 63, 64, 74, 79, 92, 94, 95)


class GuardThermal(Strict):
    """Seed 004: what kills a machine is heat held over time, not a peak. A GPU at or above
    `soak_c` spends its `soak_s` budget (reset once it cools below); at `hard_c` at once."""

    soak_c: int = Field(88, ge=30, le=150)
    soak_s: int = Field(240, ge=1, le=86400)
    hard_c: int = Field(96, ge=30, le=150)


class GuardMemory(Strict):
    """Seed 004: a host out of memory may never see the OOM killer (unified memory is outside
    every cgroup) and stop answering 43 minutes after the first NVRM out-of-memory error. The guard
    acts on MemAvailable below `act_mib` for `sustain` samples in a row, or below `warn_mib` with
    `nvrm_errors` NV_ERR_NO_MEMORY kernel lines within 60 s: it stops the GPU process with the
    largest host footprint that no `protect` prefix names (SIGTERM, SIGKILL after `grace_s`),
    then waits `cooldown_s` before acting again."""

    act_mib: int = Field(3072, ge=1)
    warn_mib: int = Field(6144, ge=1)
    sustain: int = Field(3, ge=1, le=100)
    nvrm_errors: int = Field(5, ge=1, le=1000)
    #: process names (their /proc comm) that are never stopped, by prefix
    protect: list[Text] = Field(default_factory=list)
    grace_s: int = Field(20, ge=1, le=600)
    cooldown_s: int = Field(60, ge=0, le=3600)
    #: the GPUs share the host's memory (GB10, GH200): a process's GPU memory is host memory
    unified_memory: bool = False
    #: where MemAvailable is read; another path only for a test double (a lab host's is the machine's)
    meminfo: RemotePath = "/proc/meminfo"


class GuardsLayer(Strict):
    """A guard daemon on every GPU node in Slurm that drains its node (no new jobs; running ones
    finish or fail on their own) when a GPU soaks in heat or the kernel logs a hardware XID, or
    NVML stops answering, and (with `memory`) stops the largest GPU process before the host runs
    out of memory. It never resumes a node: an admin does, after looking."""

    enabled: bool = False
    #: seconds between samples of the GPUs' temperatures and the kernel log
    interval_s: int = Field(5, ge=1, le=300)
    thermal: GuardThermal = GuardThermal()
    #: XIDs that drain the node; any other XID is recorded, not acted on
    drain_xids: list[int] = Field(default_factory=lambda: list(DEFAULT_DRAIN_XIDS))
    #: record what the guard would do without draining (seed 004: run a night dry first)
    dry_run: bool = False
    #: where the kernel's messages are read: `journal` (journalctl -k, this boot) on a real node;
    #: a file's absolute path only for a test double (the lab's nodes have no kernel log of their own)
    kernel_log: Union[Literal["journal"], RemotePath] = "journal"
    #: the host memory guard (seed 004); off without this section
    memory: Optional[GuardMemory] = None

    @field_validator("drain_xids")
    @classmethod
    def _xids(cls, v: list[int]) -> list[int]:
        bad = [x for x in v if not 1 <= x <= 999]
        if bad:
            raise ValueError(f"{bad} are not XIDs (1-999)")
        return sorted(set(v))



def check(cfg: FleetConfig) -> list[str]:
    """The guards drain nodes in Slurm and read GPUs through the GPU layer's pynvml."""
    g = cfg.guards
    if not g.enabled:
        return []
    where = f"{PROJECT}:guards"
    problems = []
    if not (cfg.slurm.enabled and cfg.gpu_runtime.enabled):
        problems.append(f"{where}.enabled: the guards drain nodes in Slurm and read the GPUs with the GPU "
                        "runtime layer's pynvml: enable slurm and gpu_runtime too")
    if g.memory is not None and g.memory.act_mib >= g.memory.warn_mib:
        problems.append(f"{where}.memory.act_mib: {g.memory.act_mib} MiB is not below warn_mib "
                        f"({g.memory.warn_mib} MiB)")
    if g.thermal.soak_c >= g.thermal.hard_c:
        problems.append(f"{where}.thermal.soak_c: {g.thermal.soak_c} C is not below hard_c "
                        f"({g.thermal.hard_c} C)")
    if not any(n.gpus for n in cfg.slurm_nodes()):
        problems.append(f"{where}.enabled: no node in a Slurm partition has GPUs to guard")
    return problems
