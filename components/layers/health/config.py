"""The node health layer's config: the check slurmd runs, reboot to recover, quarantine."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, Union

from pydantic import Field, field_validator

from ...config.project import PROJECT
from ...config.types import HostName, RemotePath, Strict

if TYPE_CHECKING:
    from ...config.fleet import FleetConfig

#: what a failed check is about; `xid` alone is fixed by a reboot by default (a GPU fallen off the
#: bus comes back with a power cycle; a missing mount or a dead guard does not need one)
Kind = Literal["xid", "gpus", "mounts", "guard"]

#: the most reboots a day a stack may allow a node before quarantine (policy: bounded)
MAX_REBOOTS_PER_DAY = 6


class HealthLayer(Strict):
    """A health check slurmd runs on every node in Slurm (HealthCheckProgram): it drains its node
    when a check fails, reboots a node drained for a fault a reboot can fix (through Slurm, once
    its jobs end), quarantines one whose fault survives the reboots, and resumes only the nodes it
    drained itself, once every check passes."""

    enabled: bool = False
    #: seconds between two runs on a node (HealthCheckInterval); slurmd also runs it at start
    interval_s: int = Field(60, ge=5, le=3600)
    #: the node states it runs in (HealthCheckNodeState): ANY keeps drained nodes checked too
    node_state: Literal["ANY", "IDLE", "ALLOC", "MIXED", "NONDRAINED_IDLE"] = "ANY"
    #: kinds of failure that reboot the node (drained, then `scontrol reboot` once its jobs end)
    reboot_on: list[Kind] = Field(default_factory=lambda: list[Kind](["xid"]))
    #: reboots of one node within 24 h before its next failure quarantines it
    max_reboots_per_day: int = Field(2, ge=0)
    #: the reservation a quarantined node is held in (no job but an admin's runs there)
    quarantine_reservation: HostName = "gpu-fleet-quarantine"
    #: seconds slurmctld waits for a rebooting node to register again (ResumeTimeout)
    reboot_timeout_s: int = Field(600, ge=30, le=7200)
    #: where the kernel's messages are read (as guards.kernel_log): `journal` on a real node, a
    #: file only for a test double
    kernel_log: Union[Literal["journal"], RemotePath] = "journal"

    @field_validator("reboot_on")
    @classmethod
    def _unique(cls, v: list[Kind]) -> list[Kind]:
        return sorted(set(v))


def check(cfg: FleetConfig) -> list[str]:
    """The health check reads the GPUs through the GPU runtime layer's pynvml and drains in Slurm."""
    h = cfg.health
    if not h.enabled:
        return []
    where = f"{PROJECT}:health"
    problems = []
    if not (cfg.slurm.enabled and cfg.gpu_runtime.enabled):
        problems.append(f"{where}.enabled: the health check runs under slurmd and reads the GPUs with the GPU "
                        "runtime layer's pynvml: enable slurm and gpu_runtime too")
    if h.max_reboots_per_day > MAX_REBOOTS_PER_DAY:
        problems.append(f"{where}.max_reboots_per_day: {h.max_reboots_per_day} is more than "
                        f"{MAX_REBOOTS_PER_DAY}: a node that needs that many reboots a day is broken")
    if cfg.guards.enabled and cfg.guards.kernel_log != h.kernel_log:
        problems.append(f"{where}.kernel_log: {h.kernel_log!r} is not the guards' ({cfg.guards.kernel_log!r}): "
                        "the guard and the health check must read the same kernel log")
    return problems
