"""The node health layer's config: the check slurmd runs, reboot to recover, quarantine, spares."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, Optional, Union

from pydantic import Field, field_validator

from ...config.project import PROJECT
from ...config.types import HostName, RemotePath, Strict, UserName

if TYPE_CHECKING:
    from ...config.fleet import FleetConfig

#: what a failed check is about; `xid` alone is fixed by a reboot by default (a GPU fallen off the
#: bus comes back with a power cycle; a missing mount or a dead guard does not need one)
Kind = Literal["xid", "gpus", "mounts", "guard"]

#: the most reboots a day a stack may allow a node before quarantine (policy: bounded)
MAX_REBOOTS_PER_DAY = 6


#: a spare's node Weight (Slurm's default is 1): the scheduler and a new reservation take it last
SPARE_WEIGHT = 1000


class LentReservation(Strict):
    """A standing reservation the stack keeps (`Flags=REPLACE_DOWN`): Slurm picks its nodes from
    `partition` (spares last, by their Weight) and, when one of them goes down or drained, takes a
    free node of the partition in its place: a spare, since nothing else is left idle for long."""

    name: HostName
    partition: HostName
    #: nodes it holds (NodeCnt: Slurm replaces nodes only in a reservation that names a count)
    node_count: int = Field(ge=1)
    users: list[UserName] = Field(default_factory=list)
    accounts: list[HostName] = Field(default_factory=list)


class Spares(Strict):
    """Hot spares: idle nodes, out of every default partition, with a high Weight, that a lent
    reservation takes when one of its nodes goes down or drained."""

    nodes: list[HostName] = Field(min_length=1)
    reservations: list[LentReservation] = Field(min_length=1)


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
    #: hot spares and the reservations they stand in for (none: no spares)
    spares: Optional[Spares] = None

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
    if h.spares is not None:
        problems += _spare_problems(cfg, f"{where}.spares")
    return problems


def _spare_problems(cfg: FleetConfig, where: str) -> list[str]:
    """Spares are Slurm nodes outside every default partition; a lent reservation draws from a
    partition that holds a spare and enough other nodes; someone may use it."""
    assert cfg.health.spares is not None
    sp, out = cfg.health.spares, []
    spares = set(sp.nodes)
    in_slurm = {n.name for n in cfg.slurm_nodes()}
    parts = {p.name: p for p in cfg.slurm.partitions}
    for i, n in enumerate(sp.nodes):
        if n not in in_slurm:
            out.append(f"{where}.nodes[{i}]: {n!r} is not a node Slurm runs on (a partition's, owned by slurm)")
        for p in cfg.slurm.partitions:
            if p.default and n in p.nodes:
                out.append(f"{where}.nodes[{i}]: {n!r} is in the default partition {p.name!r}: a spare takes no "
                           "job a user did not aim at it; take it out of that partition")
    seen: set[str] = set()
    for i, r in enumerate(sp.reservations):
        at = f"{where}.reservations[{i}]"
        if r.name in seen or r.name == cfg.health.quarantine_reservation:
            out.append(f"{at}.name: {r.name!r} is used twice (a reservation or the quarantine's)")
        seen.add(r.name)
        part = parts.get(r.partition)
        if part is None:
            out.append(f"{at}.partition: {r.partition!r} is not one of slurm.partitions")
            continue
        if not spares & set(part.nodes):
            out.append(f"{at}.partition: {r.partition!r} holds none of the spares {sorted(spares)}: "
                       "none could stand in for its nodes")
        regular = [n for n in part.nodes if n not in spares]
        if r.node_count > len(regular):
            out.append(f"{at}.node_count: {r.node_count} is more than the {len(regular)} nodes of {r.partition!r} "
                       "that are not spares: it would hold a spare from the start")
        if not (r.users or r.accounts):
            out.append(f"{at}: name its users or accounts: Slurm creates no reservation nobody may use")
    return out
