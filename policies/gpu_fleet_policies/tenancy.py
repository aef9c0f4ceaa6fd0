"""Tenancy: every team's GPUs are bounded, reclaim frees GPUs, preemption runs one way, and the
guarantees fit the fleet.

Checked on the tenancy layer's accounting objects (`SlurmAccounting`, components/providers/
sacct.py: `tenancy-ops` and `tenancy-accounting`, each a list of QOS, accounts and users'
associations with sacctmgr's fields) and on slurm.conf. A team is an account with a
`DefaultQOS`: its jobs run under that QOS, whose `GrpTRES` is the team's guarantee and its bound.

- `validate_team_qos_bounds`: a team's QOS sets a generic `gres/gpu` limit in GrpTRES (a typed
  limit alone does not bind a job that asks for GPUs without a type);
- `validate_no_suspend`: no PreemptMode SUSPEND, in slurm.conf (cluster or partition) or on a QOS
  (a suspended job keeps its GRES: the preemptor never gets the GPUs), and no GANG in slurm.conf
  (gang scheduling time-slices jobs by suspending them: their GPUs are not freed either);
- `validate_preemption_graph`: a preemptable QOS preempts no team's QOS, and the Preempt graph
  has no cycle;
- `validate_guarantees_fit`: the teams' `gres/gpu:<type>` guarantees add up to no more than the
  GPUs of that type of the stack's partition nodes (the stack config, as the layer's own check
  counts them: a node outside every partition runs no job).

The graph rules are stack policies: an account and the QOS it names may sit in different
resources. Objects whose members are unknown (preview) are skipped. The constants mirror the
program (tests/policy/test_tenancy_policies.py holds them equal).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from . import props as P
from . import stackconfig
from .common import Res, resource, stack_resources
from .slurm import SLURM_CONF, _conf_file
from .slurmconf import split_list

#: SlurmAccounting's type token (module "slurm", name "Accounting")
ACCOUNTING = "pulumi-python:dynamic/slurm:Accounting"
#: GpuSpec.type's default: a node's `gpus` without a type
DEFAULT_GPU_TYPE = "v100"
#: the project root: a `gpu-fleet:nodes_file` is relative to it, as the program reads it
ROOT = Path(__file__).resolve().parents[2]
GPU = "gres/gpu"
NO_CONFIG = "the engine did not send the stack's configuration"
FIX_GUARANTEE = "gpu-fleet:tenancy.teams[].guaranteed"


# ---- the objects ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Obj:
    """One QOS, account or user association of a SlurmAccounting resource."""

    kind: str
    name: str
    fields: dict[str, Any]  # lower-case field name -> value (UNKNOWN during preview)
    res: Res

    def raw(self, field: str) -> Any:
        return self.fields.get(field.lower())

    def text(self, field: str) -> Optional[str]:
        return P.text(self.raw(field))

    def known(self, field: str) -> bool:
        return not P.is_unknown(self.raw(field))

    @property
    def key(self) -> str:
        return self.name.lower()  # Slurm keeps QOS and account names in lower case

    def who(self) -> str:
        return self.res.describe("SlurmAccounting", f"{self.kind.upper() if self.kind == 'qos' else self.kind} "
                                                    f"{self.name}")


def objects(res: Res) -> list[Obj]:
    """A SlurmAccounting's members; none while the members are unknown."""
    members = res.get("members")
    if P.is_unknown(members) or not isinstance(members, list):
        return []
    out = []
    for m in members:
        m = P.reveal(m)
        if not isinstance(m, dict):
            continue
        kind, name = P.text(m.get("kind")), P.text(m.get("name"))
        fields = m.get("fields")
        if not kind or not name:
            continue
        fields = fields if isinstance(fields, dict) else {}
        out.append(Obj(kind.lower(), name, {str(k).lower(): v for k, v in fields.items()}, res))
    return out


def names(value: Optional[str]) -> list[str]:
    """A QOS list (`Preempt`, `QOS`) as lower-case names; `+name` as name."""
    return [n.strip().lstrip("+").lower() for n in split_list(value) if n.strip().lstrip("+")]


def tres(value: Optional[str]) -> dict[str, str]:
    """`gres/gpu=8,gres/gpu:v100=8` -> {'gres/gpu': '8', 'gres/gpu:v100': '8'}."""
    out = {}
    for part in split_list(value):
        key, sep, count = part.partition("=")
        if sep and key.strip():
            out[key.strip().lower()] = count.strip()
    return out


def _count(v: Optional[str]) -> Optional[int]:
    """A TRES count; None for none, -1 (no limit) or anything not a whole number."""
    return int(v) if v is not None and v.isdigit() else None


class Tenancy:
    """The stack's accounting objects: QOS by name, team accounts by the QOS they default to."""

    def __init__(self, objs: list[Obj]) -> None:
        self.qos: dict[str, list[Obj]] = {}
        self.teams: dict[str, list[Obj]] = {}
        for o in objs:
            if o.kind == "qos":
                self.qos.setdefault(o.key, []).append(o)
            elif o.kind == "account" and o.known("DefaultQOS"):
                default = (o.text("DefaultQOS") or "").strip().lower()
                if default:
                    self.teams.setdefault(default, []).append(o)

    @classmethod
    def of_stack(cls, args) -> "Tenancy":
        return cls([o for r in stack_resources(args, ACCOUNTING) for o in objects(r)])

    def team_names(self, qos: str) -> str:
        return ", ".join(sorted({a.name for a in self.teams.get(qos, [])}))

    def preempts(self) -> dict[str, set[str]]:
        """QOS -> the QOS its Preempt names (every known definition's)."""
        out: dict[str, set[str]] = {}
        for key, defs in self.qos.items():
            for d in defs:
                if d.known("Preempt"):
                    out.setdefault(key, set()).update(names(d.text("Preempt")))
        return out

    def shown(self, key: str) -> str:
        defs = self.qos.get(key)
        return defs[0].name if defs else key


# ---- 1. every team's QOS bounds its GPUs -----------------------------------------------------

def validate_team_qos_bounds(args, report_violation) -> None:
    """A team's DefaultQOS sets GrpTRES gres/gpu=<n>: without it the team takes any GPU it finds."""
    t = Tenancy.of_stack(args)
    for key in sorted(t.teams):
        accounts = t.teams[key]
        teams = t.team_names(key)
        defs = t.qos.get(key)
        if not defs:
            a = accounts[0]
            report_violation(
                f"{a.who()} sets DefaultQOS={a.text('DefaultQOS')}, a QOS no SlurmAccounting resource of the "
                f"stack defines, so the GPU bound of team account {teams} cannot be checked; define the QOS "
                f"in the tenancy layer's objects with GrpTRES=gres/gpu=<n>,gres/gpu:<type>=<n> "
                f"({FIX_GUARANTEE}).", a.res.urn or None)
            continue
        for d in defs:
            if not d.known("GrpTRES"):
                continue  # checked again on real values
            grp = d.text("GrpTRES") or ""
            limits = tres(grp)
            if _count(limits.get(GPU)) is not None:
                continue
            typed = [k for k in limits if k.startswith(GPU + ":")]
            now = f"GrpTRES={grp}" if grp else "no GrpTRES"
            why = (" (a typed limit alone does not bind a job that asks for GPUs without a type)"
                   if typed else "")
            report_violation(
                f"{d.who()} is the DefaultQOS of team account {teams}, but it has {now}, with no "
                f"{GPU}=<n> limit{why}: the team's GPUs are unbounded; set GrpTRES="
                f"{GPU}=<n>,{GPU}:<type>=<n> to the team's guarantee ({FIX_GUARANTEE}).", d.res.urn or None)


# ---- 2. preemption frees GPUs: never SUSPEND, never GANG ------------------------------------------

WHY_SUSPEND = ("a suspended job keeps its GRES, so the GPUs it holds are not freed for the job that "
               "preempted it")
WHY_GANG = ("GANG time-slices jobs by suspending them in turn, and a suspended job keeps its GRES, so the "
            "GPUs it holds are not freed for another job either")
WHY_BOTH = ("SUSPEND and GANG both suspend jobs (GANG to time-slice them): " + WHY_SUSPEND
            + ", nor for another job")


def suspends(mode: Optional[str]) -> bool:
    """PreemptMode with SUSPEND among its flags (`SUSPEND`, `GANG,SUSPEND`, any case)."""
    return any(m.strip().upper() == "SUSPEND" for m in split_list(mode))


def gangs(mode: Optional[str]) -> bool:
    """PreemptMode with GANG among its flags (`GANG`, `REQUEUE,GANG`, any case)."""
    return any(m.strip().upper() == "GANG" for m in split_list(mode))


def why_conf(mode: Optional[str]) -> Optional[str]:
    """Why a slurm.conf PreemptMode (cluster or partition) is refused; None if it is not."""
    s, g = suspends(mode), gangs(mode)
    return WHY_BOTH if s and g else WHY_SUSPEND if s else WHY_GANG if g else None


def validate_no_suspend(args, report_violation) -> None:
    """slurm.conf (cluster and partitions) and every QOS preempt by REQUEUE or CANCEL: no SUSPEND,
    and no GANG in slurm.conf (gang scheduling suspends jobs to time-slice them)."""
    found = _conf_file(args, SLURM_CONF)
    if found is not None:
        res, path, conf = found
        who = res.describe("File", path)
        mode = conf.get("PreemptMode")
        why = why_conf(mode)
        if why:
            report_violation(
                f"{who} sets PreemptMode={mode}: {why}; set PreemptMode=REQUEUE or CANCEL "
                "(gpu-fleet:tenancy.preempt_mode).", None)
        for part in conf.entities:
            pmode = part.get("preemptmode")
            why = why_conf(pmode) if "partitionname" in part else None
            if why:
                report_violation(
                    f"{who} gives partition {part['partitionname']} PreemptMode={pmode}: {why}; "
                    "remove it or set PreemptMode=REQUEUE or CANCEL.", None)
    acct = resource(args, ACCOUNTING)
    if acct is None:
        return
    for o in objects(acct):
        mode = o.text("PreemptMode")
        if o.kind == "qos" and suspends(mode):
            report_violation(
                f"{o.who()} sets PreemptMode={mode}: {WHY_SUSPEND}; set PreemptMode=requeue or cancel "
                "(gpu-fleet:tenancy.opportunistic.preempt_mode, gpu-fleet:tenancy.preempt_mode).",
                acct.urn or None)


# ---- 3. preemption runs one way ----------------------------------------------------------------

def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """One cycle (first node repeated last) for each strongly connected part that has one."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    parts: list[set[str]] = []

    def visit(v: str) -> None:  # Tarjan; the graphs are a few QOS
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = set()
            while True:
                w = stack.pop()
                on.discard(w)
                part.add(w)
                if w == v:
                    break
            parts.append(part)

    for v in sorted(edges):
        if v not in index:
            visit(v)
    out = []
    for part in parts:
        start = min(part)
        if len(part) == 1 and start not in edges.get(start, ()):
            continue
        # breadth first from start back to start, inside the part
        came: dict[str, str] = {}
        todo = [start]
        while todo and start not in came:
            v = todo.pop(0)
            for w in sorted(edges.get(v, ())):
                if w in part and w not in came:
                    came[w] = v
                    todo.append(w)
        path = [start]
        v = came[start]
        while v != start:
            path.append(v)
            v = came[v]
        out.append([start, *reversed(path[1:]), start])
    return sorted(out)


def validate_preemption_graph(args, report_violation) -> None:
    """A preemptable QOS never preempts a team's QOS, and no QOS preempts itself through others."""
    t = Tenancy.of_stack(args)
    edges = t.preempts()
    preempted_by: dict[str, set[str]] = {}
    for q, targets in edges.items():
        for p in targets:
            preempted_by.setdefault(p, set()).add(q)
    for q in sorted(edges):
        if q not in preempted_by:
            continue
        for team in sorted(edges[q] & set(t.teams)):
            d = t.qos[q][0]
            by = ", ".join(t.shown(x) for x in sorted(preempted_by[q]))
            verb = "preempts" if len(preempted_by[q]) == 1 else "preempt"
            report_violation(
                f"{d.who()} is preemptable (QOS {by} {verb} it), yet its Preempt names QOS {t.shown(team)}, "
                f"the DefaultQOS of team account {t.team_names(team)}: a job that may itself be preempted "
                f"would take a team's guaranteed GPUs; remove {t.shown(team)} from {d.name}'s Preempt (a team's "
                "QOS preempts the opportunistic one, never the other way).", d.res.urn or None)
    for cycle in _cycles(edges):
        d = t.qos[cycle[0]][0]
        shown = " -> ".join(t.shown(q) for q in cycle)
        what = (f"preempts itself (its Preempt names {d.name})" if len(cycle) == 2
                else f"is in a Preempt cycle, {shown} (each QOS's Preempt names the next)")
        report_violation(
            f"{d.who()} {what}: preemption must run one way, or jobs preempt each other in turn and none "
            "keeps its GPUs; remove one of these Preempt entries.", d.res.urn or None)


# ---- 4. the guarantees fit the fleet -----------------------------------------------------------

def _nodes_file(value: Any) -> tuple[Optional[list], str]:
    import yaml

    rel = P.text(value)
    if not rel:
        return None, f"gpu-fleet:nodes_file is {P.reveal(value)!r}, not a path"
    path = Path(rel).expanduser()
    path = path if path.is_absolute() else ROOT / path
    try:
        doc = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as e:
        return None, f"gpu-fleet:nodes_file {rel} cannot be read ({e.__class__.__name__})"
    if not isinstance(doc, dict) or not isinstance(doc.get("nodes"), list):
        return None, f"gpu-fleet:nodes_file {rel} holds no `nodes` list"
    return doc["nodes"], ""


def capacity() -> tuple[Optional[dict[str, int]], str]:
    """GPU type -> GPUs of the nodes in the stack's partitions (gpu-fleet:nodes or nodes_file,
    gpu-fleet:slurm.partitions); (None, why) when the stack config cannot say."""
    cfg = stackconfig.get()
    if cfg is None:
        return None, NO_CONFIG
    nodes = cfg.get("nodes")
    if nodes is None and cfg.get("nodes_file") is not None:
        nodes, why = _nodes_file(cfg["nodes_file"])
        if nodes is None:
            return None, why
    if not isinstance(nodes, list):
        return None, "the stack config has no gpu-fleet:nodes list"
    slurm = cfg.get("slurm")
    parts = slurm.get("partitions") if isinstance(slurm, dict) else None
    members = {m for p in parts or [] if isinstance(p, dict) for m in p.get("nodes") or []}
    out: dict[str, int] = {}
    for n in nodes:
        gpus = n.get("gpus") if isinstance(n, dict) else None
        if not isinstance(gpus, dict) or n.get("name") not in members:
            continue
        gtype = str(gpus.get("type") or DEFAULT_GPU_TYPE)
        out[gtype] = out.get(gtype, 0) + (P.as_int(gpus.get("count")) or 0)
    return out, ""


def validate_guarantees_fit(args, report_violation) -> None:
    """The teams' GPU guarantees (their QOS's GrpTRES) fit the GPUs the stack's partitions have."""
    t = Tenancy.of_stack(args)
    asked: dict[str, list[tuple[Obj, int]]] = {}  # gres/gpu or gres/gpu:<type> -> (team QOS, count)
    for key in sorted(t.teams):
        defs = [d for d in t.qos.get(key, []) if d.known("GrpTRES")]
        if not defs:
            continue  # undefined: team-qos-bounds-gpus says so; unknown: checked on real values
        best: dict[str, int] = {}
        for d in defs:
            for k, v in tres(d.text("GrpTRES")).items():
                n = _count(v)
                if n is not None and (k == GPU or k.startswith(GPU + ":")):
                    best[k] = max(best.get(k, 0), n)
        for k, n in best.items():
            asked.setdefault(k, []).append((defs[0], n))
    if not asked:
        return
    cap, why = capacity()
    first = asked[sorted(asked)[0]][0][0]
    if cap is None:
        report_violation(
            f"{first.res.describe('SlurmAccounting')} guarantees teams GPUs ({_listed(asked)}), which cannot be "
            f"checked against the stack's nodes: {why}; refused until they can be.", first.res.urn or None)
        return
    for k in sorted(asked):
        total = sum(n for _, n in asked[k])
        gtype = k.partition(":")[2]
        have = cap.get(gtype, 0) if gtype else sum(cap.values())
        if total <= have:
            continue
        gpus = f"{gtype} GPUs" if gtype else "GPUs"
        d = asked[k][0][0]
        report_violation(
            f"{d.res.describe('SlurmAccounting')}: the teams' GrpTRES {k} guarantees add up to {total} ("
            + ", ".join(f"QOS {o.name} {n}" for o, n in asked[k])
            + f"), more than the {have} {gpus} of the nodes in the stack's partitions (gpu-fleet:nodes, "
            "gpu-fleet:slurm.partitions): a team would wait for GPUs it was guaranteed; lower the guarantees "
            f"({FIX_GUARANTEE}) or add nodes.", d.res.urn or None)


def _listed(asked: dict[str, list[tuple[Obj, int]]]) -> str:
    return "; ".join(f"{k}: " + ", ".join(f"{o.name} {n}" for o, n in asked[k]) for k in sorted(asked))
