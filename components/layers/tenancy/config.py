"""The tenancy layer's config: teams with guaranteed GPUs, borrowing through an opportunistic
QOS with reclaim, leaf switches, GPU shards (seed 001's platform contract, in Slurm's terms)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, Optional

from pydantic import Field, field_validator

from ...config.project import PROJECT
from ...config.types import GresType, HostName, Strict, Text, UserName

if TYPE_CHECKING:
    from ...config.fleet import FleetConfig


class Team(Strict):
    """A Slurm account with its own QOS: `guaranteed` GPUs per type are the QOS's GrpTRES (the
    team never holds more under it, and jobs under it preempt the opportunistic QOS to get them)."""

    name: HostName
    #: GPU type -> GPUs the team is guaranteed (its QOS's gres/gpu:<type>; gres/gpu is their sum)
    guaranteed: dict[GresType, int] = Field(min_length=1)
    #: the account's share for fairshare priority (sshare's RawShares)
    fairshare: int = Field(1, ge=1, le=1_000_000)
    members: list[UserName] = Field(default_factory=list)

    @field_validator("guaranteed")
    @classmethod
    def _counts(cls, v: dict[str, int]) -> dict[str, int]:
        bad = {t: n for t, n in v.items() if n < 0}
        if bad:
            raise ValueError(f"GPU counts cannot be negative: {bad}")
        return v


class Opportunistic(Strict):
    """What a team runs beyond its guarantee: low priority, preempted by any team's own QOS.
    Preempted jobs get SIGTERM, `grace_s` to checkpoint, then are requeued (or cancelled)."""

    qos: HostName = "opportunistic"
    #: GPUs each team may borrow at once (the QOS's MaxTRESPerAccount)
    max_gpus_per_team: int = Field(ge=0)
    #: seconds between SIGTERM and the kill (the QOS's GraceTime)
    grace_s: int = Field(60, ge=0, le=86400)
    #: a borrowing job runs at least this long before it may be preempted (PreemptExemptTime)
    exempt_s: int = Field(0, ge=0, le=86400)
    #: REQUEUE or CANCEL; never SUSPEND: a suspended job keeps its GPUs (GRES are not released)
    preempt_mode: Text = "REQUEUE"


class Switch(Strict):
    """A leaf switch and the nodes under it (topology.conf; a node feature `leaf-<name>` lets a
    job ask for one leaf strictly, which `--switches` alone does not)."""

    name: HostName
    nodes: list[HostName] = Field(min_length=1)


class PriorityWeights(Strict):
    """priority/multifactor weights: fairshare between teams, the QOS (a team's own over
    borrowing), age so that nothing waits forever."""

    fairshare: int = Field(10000, ge=0, le=1_000_000)
    qos: int = Field(10000, ge=0, le=1_000_000)
    age: int = Field(1000, ge=0, le=1_000_000)


class TenancyLayer(Strict):
    """Teams' quotas, borrowing and reclaim, gang and topology, as Slurm accounting objects and
    scheduler settings. Needs the accounting layer (QOS live in slurmdbd)."""

    enabled: bool = False
    teams: list[Team] = Field(default_factory=list)
    opportunistic: Optional[Opportunistic] = None
    #: user -> team, for a user who is a member of more than one team
    default_team: dict[UserName, HostName] = Field(default_factory=dict)
    #: the account of the fleet's own jobs (the canary user's acceptance jobs): with associations
    #: enforced, a user without one cannot submit
    ops_account: HostName = "gpu-fleet-ops"
    switches: list[Switch] = Field(default_factory=list)
    priority: PriorityWeights = PriorityWeights()
    #: the preemption mode of the cluster (and of the team QOS): REQUEUE or CANCEL
    preempt_mode: Literal["REQUEUE", "CANCEL"] = "REQUEUE"
    #: job_submit.lua: type GPU requests that name no type (so that typed limits bind them) and
    #: refuse whole nodes' GPUs asked as a job total (a tensor-parallel group spread over nodes)
    job_submit: bool = True
    #: small jobs sharing a GPU: this many `gres/shard` on each GPU (0: none). Scheduling only:
    #: a shard does not confine the GPU's memory (that needs MPS limits or HAMi-core)
    shards_per_gpu: int = Field(0, ge=0, le=128)


def slurm_seconds(limit: str) -> Optional[int]:
    """A Slurm time limit (`MaxTime`) in seconds; None for INFINITE/UNLIMITED. Minutes alone,
    minutes:seconds, hours:minutes:seconds, days-hours[:minutes[:seconds]] as slurm.conf(5)."""
    if limit in ("INFINITE", "UNLIMITED"):
        return None
    days, sep, rest = limit.partition("-")
    if not sep:
        days, rest = "0", limit
        parts = [int(p) for p in rest.split(":")]
        h, m, s = ((0, parts[0], 0) if len(parts) == 1 else (0, parts[0], parts[1]) if len(parts) == 2
                   else (parts[0], parts[1], parts[2]))
    else:
        parts = [int(p) for p in rest.split(":")] + [0, 0]
        h, m, s = parts[0], parts[1], parts[2]
    return ((int(days) * 24 + h) * 60 + m) * 60 + s


def check(cfg: FleetConfig) -> list[str]:
    """Refused before any host: what the fleet cannot give, or Slurm could not keep."""
    t = cfg.tenancy
    if not t.enabled:
        return []
    where = f"{PROJECT}:tenancy"
    problems: list[str] = []
    if not cfg.accounting.enabled:
        problems.append(f"{where}.enabled: tenancy needs the accounting layer (QOS, accounts and "
                        f"associations live in slurmdbd): set {PROJECT}:accounting.enabled")
    if not t.teams:
        problems.append(f"{where}.teams: at least one team")
    slurm_nodes = cfg.slurm_nodes()
    capacity: dict[str, int] = {}
    for n in slurm_nodes:
        if n.gpus:
            capacity[n.gpus.type] = capacity.get(n.gpus.type, 0) + n.gpus.count
    names: set[str] = set()
    teams_of: dict[str, list[str]] = {}
    for i, team in enumerate(t.teams):
        tw = f"{where}.teams[{i}] ({team.name})"
        if team.name in names or team.name == t.ops_account:
            problems.append(f"{tw}.name: {team.name!r} is used twice (teams and ops_account are accounts)")
        names.add(team.name)
        for gtype in team.guaranteed:
            if gtype not in capacity:
                problems.append(f"{tw}.guaranteed.{gtype}: no node in a partition has {gtype} GPUs "
                                f"(types: {', '.join(sorted(capacity)) or 'none'})")
        for u in team.members:
            teams_of.setdefault(u, []).append(team.name)
    if t.opportunistic and t.opportunistic.qos in names:
        problems.append(f"{where}.opportunistic.qos: {t.opportunistic.qos!r} is also a team's QOS")
    for gtype, total in capacity.items():
        asked = sum(team.guaranteed.get(gtype, 0) for team in t.teams)
        if asked > total:
            problems.append(f"{where}.teams: the guarantees of {gtype} GPUs add up to {asked}, more than "
                            f"the {total} the fleet's partitions have (" + ", ".join(
                                f"{team.name} {team.guaranteed[gtype]}" for team in t.teams
                                if gtype in team.guaranteed) + ")")
    for user, teams in sorted(teams_of.items()):
        default = t.default_team.get(user)
        if len(teams) > 1 and default is None:
            problems.append(f"{where}.default_team.{user}: {user} is a member of {', '.join(teams)}; "
                            "say which team is the default account")
        elif default is not None and default not in teams:
            problems.append(f"{where}.default_team.{user}: {user} is not a member of {default}")
    for user in sorted(set(t.default_team) - set(teams_of)):
        problems.append(f"{where}.default_team.{user}: {user} is a member of no team")
    if cfg.slurm.canary_user in teams_of:
        problems.append(f"{where}.teams: the canary user {cfg.slurm.canary_user} runs the fleet's own "
                        f"jobs under {t.ops_account}; it cannot be a team member")
    o = t.opportunistic
    if o is not None:
        if o.preempt_mode.upper() not in ("REQUEUE", "CANCEL"):
            why = (" (a suspended job keeps its GPUs: GRES are not released, so nothing is reclaimed)"
                   if o.preempt_mode.upper().startswith("SUSPEND") else "")
            problems.append(f"{where}.opportunistic.preempt_mode: {o.preempt_mode!r} is not REQUEUE or "
                            f"CANCEL{why}")
        for pi, p in enumerate(cfg.slurm.partitions):
            limit = slurm_seconds(p.max_time)
            if limit is not None and o.grace_s > limit:
                problems.append(f"{where}.opportunistic.grace_s: {o.grace_s} s is longer than partition "
                                f"{p.name}'s MaxTime {p.max_time} ({PROJECT}:slurm.partitions[{pi}].max_time)")
    members = {n.name for n in slurm_nodes}
    seen: dict[str, str] = {}
    for si, sw in enumerate(t.switches):
        sw_where = f"{where}.switches[{si}] ({sw.name})"
        for ni, n in enumerate(sw.nodes):
            if n not in members:
                problems.append(f"{sw_where}.nodes[{ni}]: unknown node {n!r} (not in any partition)")
            elif n in seen:
                problems.append(f"{sw_where}.nodes[{ni}]: {n} is under switch {seen[n]} already")
            seen.setdefault(n, sw.name)
    if len({s.name for s in t.switches}) != len(t.switches):
        problems.append(f"{where}.switches: switch names must be unique")
    if t.switches and members - set(seen):
        problems.append(f"{where}.switches: every partition node sits under a leaf switch (topology/tree "
                        f"cannot place a job on a node no switch reaches); missing: "
                        f"{', '.join(n.name for n in slurm_nodes if n.name not in seen)}")
    return problems
