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

from pathlib import Path

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


def ops_objects(t: TenancyLayer, canary_user: str) -> list[dict]:
    """The fleet's own account and the canary user's association: with associations enforced,
    they exist before slurmctld takes the canary's job (no TRES limit: they need no TRES known)."""
    return [{"kind": "account", "name": t.ops_account, "fields": {"Fairshare": "1"}},
            {"kind": "user", "name": canary_user, "account": t.ops_account, "fields": {}}]


def team_objects(t: TenancyLayer) -> list[dict]:
    """The QOS, team accounts and members' associations, in the order they are created: QOS (the
    opportunistic one first: team QOS name it), accounts, users (a user's default team first:
    sacctmgr makes a new user's first account its default). Their GPU limits name TRES that
    slurmdbd knows only once slurmctld registered AccountingStorageTRES: they come after it."""
    o = t.opportunistic
    objs: list[dict] = []
    if o is not None:
        objs.append({"kind": "qos", "name": o.qos, "fields": {
            "Description": "gpu-fleet: borrowed gpus, preemptable", "Priority": "0",
            "PreemptMode": o.preempt_mode.lower(), "GraceTime": str(o.grace_s),
            "PreemptExemptTime": str(o.exempt_s), "MaxTRESPerAccount": f"gres/gpu={o.max_gpus_per_team}"}})
    for team in t.teams:
        objs.append({"kind": "qos", "name": team.name, "fields": {
            "Description": f"gpu-fleet: guarantee of team {team.name}", "Priority": str(TEAM_QOS_PRIORITY),
            "GrpTRES": team_tres(team.guaranteed), "Preempt": o.qos if o else "",
            "PreemptMode": t.preempt_mode.lower()}})
    for team in t.teams:
        qos = [team.name, *([o.qos] if o else [])]
        objs.append({"kind": "account", "name": team.name, "fields": {
            "Fairshare": str(team.fairshare), "QOS": ",".join(qos), "DefaultQOS": team.name}})
    users: list[tuple[str, str]] = []
    for team in t.teams:
        users += [(u, team.name) for u in team.members]
    # the default team's association before the others of the same user
    users.sort(key=lambda ua: (ua[1] != t.default_team.get(ua[0], ua[1])))
    for user, team_name in users:
        objs.append({"kind": "user", "name": user, "account": team_name, "fields": {}})
    return objs


def accounting_objects(t: TenancyLayer, canary_user: str) -> list[dict]:
    """Everything the layer keeps in slurmdbd, in the order it is created."""
    return ops_objects(t, canary_user) + team_objects(t)


def render_topology_conf(t: TenancyLayer) -> str:
    """One leaf switch a line with its nodes, and one spine over the leaves."""
    lines = [HEADER]
    lines += [f"SwitchName={sw.name} Nodes={','.join(sw.nodes)}" for sw in t.switches]
    lines.append(f"SwitchName=spine Switches={','.join(sw.name for sw in t.switches)}")
    return "\n".join(lines) + "\n"


JOB_SUBMIT = Path(__file__).with_name("job_submit.lua")


def render_job_submit(nodes: list[NodeSpec]) -> str:
    """The job_submit.lua rules (see the file) with the fleet's GPU types and the largest node's
    GPU count filled in."""
    types = sorted({n.gpus.type for n in nodes if n.gpus})
    node_gpus = max((n.gpus.count for n in nodes if n.gpus), default=1)
    return (JOB_SUBMIT.read_text().replace("@GPU_TYPES@", ", ".join(f'"{t}"' for t in types))
            .replace("@NODE_GPUS@", str(node_gpus)))


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
    if t.job_submit:
        lines.append("JobSubmitPlugins=lua")
        files["job_submit.lua"] = render_job_submit(nodes)
    features: dict[str, tuple[str, ...]] = {}
    if t.switches:
        lines.append("TopologyPlugin=topology/tree")
        files["topology.conf"] = render_topology_conf(t)
        known = {n.name for n in nodes}
        features = {n: (leaf_feature(sw.name),) for sw in t.switches for n in sw.nodes if n in known}
    return Scheduling(title="tenancy (gpu-fleet:tenancy)", lines=tuple(lines), features=features, files=files,
                      shards_per_gpu=t.shards_per_gpu)
