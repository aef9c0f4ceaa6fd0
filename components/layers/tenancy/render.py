"""Pure renderers: the tenancy config -> Slurm's accounting objects and scheduler settings.

Seed 001's promises in Slurm's terms (README "Tenancy"):
  - a team's guarantee is its own QOS's GrpTRES (generic and typed GPUs), which the team's jobs
    run under by default;
  - borrowing is the opportunistic QOS (priority 0, MaxTRESPerAccount); reclaim is
    preempt/qos: every team QOS lists the opportunistic one in `Preempt`, so a team's job takes
    its GPUs back after GraceTime (SIGTERM first), requeued, never suspended (a suspended job
    keeps its GRES);
  - fairshare between teams is each account's share under priority/multifactor;
  - a strict leaf is the node feature `leaf-<switch>`; topology.conf lets the scheduler prefer
    one leaf for the rest.
"""

from __future__ import annotations

from ...config.hosts import NodeSpec
from ..slurm.render import HEADER
from ..slurm.scheduling import NO_SCHEDULING, Scheduling
from .config import TenancyLayer

#: the priority of a team's own QOS over borrowing (the QOS factor of multifactor priority)
TEAM_QOS_PRIORITY = 100
#: what every Slurm association enforces: no job without an association, limits and QOS
ENFORCE = "associations,limits,qos"


def leaf_feature(switch: str) -> str:
    return f"leaf-{switch}"


def team_tres(guaranteed: dict[str, int]) -> str:
    """`gres/gpu=<sum>` and one `gres/gpu:<type>=<n>` a type: the generic limit binds requests
    that name no type, the typed ones requests that do."""
    return ",".join([f"gres/gpu={sum(guaranteed.values())}",
                     *(f"gres/gpu:{t}={n}" for t, n in sorted(guaranteed.items()))])


def accounting_objects(t: TenancyLayer, canary_user: str) -> list[dict]:
    """The QOS, accounts and users' associations, in the order they are created: QOS (the
    opportunistic one first: team QOS name it), accounts, users (a user's default team first:
    sacctmgr makes a new user's first account its default)."""
    o = t.opportunistic
    objs: list[dict] = []
    if o is not None:
        objs.append({"kind": "qos", "name": o.qos, "fields": {
            "Description": "gpu-fleet: borrowed GPUs, preemptable", "Priority": "0",
            "PreemptMode": o.preempt_mode.lower(), "GraceTime": str(o.grace_s),
            "PreemptExemptTime": str(o.exempt_s), "MaxTRESPerAccount": f"gres/gpu={o.max_gpus_per_team}"}})
    for team in t.teams:
        objs.append({"kind": "qos", "name": team.name, "fields": {
            "Description": f"gpu-fleet: team {team.name}'s guarantee", "Priority": str(TEAM_QOS_PRIORITY),
            "GrpTRES": team_tres(team.guaranteed), "Preempt": o.qos if o else "",
            "PreemptMode": t.preempt_mode.lower()}})
    objs.append({"kind": "account", "name": t.ops_account, "fields": {"Fairshare": "1"}})
    for team in t.teams:
        qos = [team.name, *([o.qos] if o else [])]
        objs.append({"kind": "account", "name": team.name, "fields": {
            "Fairshare": str(team.fairshare), "QOS": ",".join(qos), "DefaultQOS": team.name}})
    objs.append({"kind": "user", "name": canary_user, "account": t.ops_account, "fields": {}})
    users: list[tuple[str, str]] = []
    for team in t.teams:
        users += [(u, team.name) for u in team.members]
    # the default team's association before the others of the same user
    users.sort(key=lambda ua: (ua[1] != t.default_team.get(ua[0], ua[1])))
    for user, team_name in users:
        objs.append({"kind": "user", "name": user, "account": team_name, "fields": {}})
    return objs


def render_topology_conf(t: TenancyLayer) -> str:
    """One leaf switch a line with its nodes, and one spine over the leaves."""
    lines = [HEADER]
    lines += [f"SwitchName={sw.name} Nodes={','.join(sw.nodes)}" for sw in t.switches]
    lines.append(f"SwitchName=spine Switches={','.join(sw.name for sw in t.switches)}")
    return "\n".join(lines) + "\n"


def scheduling(t: TenancyLayer, nodes: list[NodeSpec]) -> Scheduling:
    """The slurm.conf section, node features and files the Slurm layer renders for tenancy."""
    if not t.enabled:
        return NO_SCHEDULING
    lines = [
        "PreemptType=preempt/qos",
        f"PreemptMode={t.preempt_mode}",
        "PriorityType=priority/multifactor",
        f"PriorityWeightFairshare={t.priority.fairshare}",
        f"PriorityWeightQOS={t.priority.qos}",
        f"PriorityWeightAge={t.priority.age}",
        f"AccountingStorageEnforce={ENFORCE}",
    ]
    files: dict[str, str] = {}
    features: dict[str, tuple[str, ...]] = {}
    if t.switches:
        lines.append("TopologyPlugin=topology/tree")
        files["topology.conf"] = render_topology_conf(t)
        known = {n.name for n in nodes}
        features = {n: (leaf_feature(sw.name),) for sw in t.switches for n in sw.nodes if n in known}
    return Scheduling(title="tenancy (gpu-fleet:tenancy)", lines=tuple(lines), features=features, files=files,
                      shards_per_gpu=t.shards_per_gpu)
