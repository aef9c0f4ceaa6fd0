"""Slurm's accounting objects (QOS, accounts, users' associations) as typed host primitives.

One object a resource, read with the sacctmgr fact (components/facts/sacctmgr.py: one
`sacctmgr show` each, batched with the host's other probes into one round trip), planned field
by field by a pure planner (desired vs what sacctmgr prints -> one `sacctmgr -i modify` a
field, or the reason it needs none), applied with `sacctmgr -i` and read again. The recorded
`fields` are what sacctmgr prints, so `pulumi refresh` sees a field edited by hand (a QOS's
GrpTRES, Priority, Preempt ...) as drift in that field, and the next `up` sets it back.

Values are given as sacctmgr prints them (memory `mem=100G`); GraceTime, which sacctmgr sets in
seconds and prints as `00:05:00`, in either form and set in seconds; TRES lists compare as sets
of `name=count`, Preempt/QOS/Flags lists as sets, PreemptMode without case, Description as
sacctmgr stores it (lower case, ' as `): components/providers/sacct_values.py. Delete removes an
object create added; one that was there before gets back the values of the fields this resource set.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import pulumi
from pulumi.dynamic import Resource

from ..facts.sacctmgr import parse_parsable2, show_argv
from ..kit import sh
from ..transport.command import Piece, shell_join
from .base import HostPrimitive
from .bundle import BundleProvider
from .parts import Observed, PlanRefused, Props, Step
from .sacct_values import canonical, cleared, set_value

#: the fields each kind manages, by sacctmgr's names (format= and set take the same)
FIELDS = {
    "qos": ("Description", "Priority", "GraceTime", "PreemptExemptTime", "Preempt", "PreemptMode", "Flags",
            "UsageFactor", "GrpTRES", "GrpJobs", "GrpSubmitJobs", "GrpWall", "MaxTRES", "MaxTRESPerAccount",
            "MaxTRESPerUser", "MaxJobsPerAccount", "MaxJobsPerUser", "MaxSubmitJobsPerUser", "MaxWall"),
    "account": ("Fairshare", "GrpTRES", "GrpJobs", "GrpSubmitJobs", "GrpWall", "MaxTRES", "MaxJobs",
                "MaxSubmitJobs", "MaxWall", "QOS", "DefaultQOS"),
    "user": ("Fairshare", "GrpTRES", "GrpJobs", "GrpSubmitJobs", "GrpWall", "MaxTRES", "MaxJobs",
             "MaxSubmitJobs", "MaxWall", "QOS", "DefaultQOS"),
}
#: the key columns of each kind's `show`, ahead of its fields
_KEYS = {"qos": ("Name",), "account": ("Cluster", "Account", "User", "Partition"),
         "user": ("Cluster", "Account", "User", "Partition")}


def where(props: Props) -> list[str]:
    """sacctmgr's `where` for the object (also its `modify` and `delete`)."""
    kind, name = props["kind"], props["name"]
    if kind == "qos":
        return [f"name={name}"]
    conds = [f"cluster={props['cluster']}"]
    return [f"name={name}", *conds] if kind == "account" else [f"name={name}", f"account={props['account']}", *conds]


def _columns(props: Props) -> list[str]:
    """The key columns and the fields this resource manages (only those: a field name this
    sacctmgr does not know would fail every read); a field the kind has not is refused."""
    kind, fields = props["kind"], sorted(props.get("fields") or {})
    unknown = [f for f in fields if f not in FIELDS[kind]]
    if unknown:
        raise PlanRefused(f"{kind} {props['name']}: no field {', '.join(unknown)} (a {kind} has "
                          f"{', '.join(FIELDS[kind])})")
    return [*_KEYS[kind], *fields]


def probe_argv(props: Props) -> list[str]:
    kind = props["kind"]
    cols = _columns(props)
    if kind == "qos":
        return show_argv("qos", cols, name=props["name"])
    conds = {"cluster": props["cluster"], "account": props["account"] if kind == "user" else props["name"]}
    if kind == "user":
        conds["user"] = props["name"]
    return show_argv("association", cols, **conds)


def parse(props: Props, stdout: str) -> Observed:
    """{'present': bool, 'fields': {field: value as printed}} of this one object."""
    kind = props["kind"]
    rows = parse_parsable2(stdout, _columns(props))
    if kind == "qos":
        mine = [r for r in rows if r["Name"] == props["name"]]
    else:
        user = props["name"] if kind == "user" else ""
        account = props["account"] if kind == "user" else props["name"]
        mine = [r for r in rows if (r["Account"], r["User"], r["Partition"]) == (account, user, "")]
    if not mine:
        return {"present": False, "fields": {}}
    return {"present": True, "fields": {f: v for f, v in mine[0].items() if f not in _KEYS[kind]}}


@dataclass(frozen=True)
class FieldPlan:
    """What the planner decided for one field: a step, or why none is needed."""

    field: str
    step: Optional[Step]
    why: str


def _in_order(kind: str, fields: dict[str, Any]) -> list[str]:
    """The kind's order (QOS before DefaultQOS: a default must be in the list first)."""
    return sorted(fields, key=lambda f: (FIELDS[kind].index(f) if f in FIELDS[kind] else 99, f))


def plan_fields(props: Props, wanted: dict[str, Any], actual: dict[str, str]) -> list[FieldPlan]:
    """Pure: for each wanted field, the `sacctmgr -i modify` that sets it, or the reason it needs
    none. A TRES list is set whole: a TRES there but not wanted is set to -1."""
    kind, out = props["kind"], []
    for field in _in_order(kind, wanted):
        want, have = canonical(field, wanted[field]), canonical(field, actual.get(field))
        if want == have:
            out.append(FieldPlan(field, None, f"no change: {field} is {have or 'empty'} already"))
            continue
        if not want:
            value = cleared(field, have)
        elif "TRES" in field:
            keep = {p.split("=", 1)[0] for p in want.split(",")}
            gone = [f"{p.split('=', 1)[0]}=-1" for p in have.split(",") if p and p.split("=", 1)[0] not in keep]
            value = ",".join([want, *gone])
        else:
            value = set_value(field, want)
        argv = ["sacctmgr", "-i", "modify", kind, "where", *where(props), "set", f"{field}={value}"]
        out.append(FieldPlan(field, Step(argv, f"{field} {have or '(empty)'} -> {want or '(empty)'}"),
                             f"{field} differs"))
    return out


def plan(props: Props, obs: Observed, wanted: dict[str, Any]) -> list[Step]:
    """Pure: the steps from what the host has to `wanted`: an absent object is added with its
    fields in the same command (one sacctmgr call, not one per field: 200 teams' first `up`
    waits on slurmdbd once per object), a present one modified field by field."""
    if not obs["present"]:
        return [Step(add_argv(props, wanted), f"{props['kind']} {props['name']} absent")]
    return [p.step for p in plan_fields(props, wanted, obs["fields"]) if p.step is not None]


def add_argv(props: Props, wanted: Optional[dict[str, Any]] = None) -> list[str]:
    """`sacctmgr -i add` of the object with the wanted fields that are not empty (the kind's
    order: QOS before DefaultQOS)."""
    kind, name = props["kind"], props["name"]
    wanted = wanted or {}
    fields = [f"{f}={set_value(f, canonical(f, wanted[f]))}" for f in _in_order(kind, wanted)
              if canonical(f, wanted[f])]
    if kind == "qos":
        return ["sacctmgr", "-i", "add", "qos", name, *fields]
    if kind == "account":
        return ["sacctmgr", "-i", "add", "account", name, f"cluster={props['cluster']}", *fields]
    return ["sacctmgr", "-i", "add", "user", name, f"account={props['account']}", f"cluster={props['cluster']}",
            *fields]


def delete_argv(props: Props) -> list[str]:
    return ["sacctmgr", "-i", "delete", props["kind"], "where", *where(props)]


#: deleting an account's association on one cluster leaves the account's own record (sacctmgr
#: still shows it); the record goes too once no cluster holds the account any more
_DROP_UNUSED_ACCOUNT = ('sacctmgr -n -P show association where account="$1" format=Cluster | grep -q . '
                        '|| sacctmgr -i delete account where name="$1"')


def delete_steps(props: Props) -> list[Step]:
    """Remove an object create added: its association (or QOS), then an account left unused."""
    steps = [Step(delete_argv(props), f"remove {props['kind']} {props['name']} (created here)")]
    if props["kind"] == "account":
        steps.append(Step(sh(_DROP_UNUSED_ACCOUNT, props["name"]),
                          f"remove account {props['name']}'s record once no cluster holds it"))
    return steps


class SacctObjectProvider(HostPrimitive):
    """One QOS, account or user association in slurmdbd, reached through the controller."""

    replace_on = ("kind", "name", "account", "cluster")
    record_keys = ("created", "before")

    def key(self, props: Props) -> str:
        what = f"{props['name']}@{props['account']}" if props["kind"] == "user" else props["name"]
        return f"sacct:{props['kind']}:{what}"

    def probe_argv(self, props: Props) -> list[str]:
        return probe_argv(props)

    def parse(self, props: Props, stdout: str) -> Observed:
        return parse(props, stdout)

    def desired(self, props: Props) -> dict[str, Any]:
        return {"present": True, "fields": {f: canonical(f, v) for f, v in sorted((props.get("fields") or {}).items())}}

    def state(self, props: Props, obs: Observed) -> dict[str, Any]:
        return {"present": obs["present"],
                "fields": {f: canonical(f, obs["fields"].get(f)) for f in sorted(props.get("fields") or {})}}

    def remember(self, props: Props, before: Observed) -> Props:
        """Whether create adds the object, and else the values it had in the fields set here."""
        return {"created": not before["present"],
                "before": {f: before["fields"].get(f, "") for f in sorted(props.get("fields") or {})}
                if before["present"] else {}}

    def plan(self, props: Props, obs: Observed, record: Props) -> list[Step]:
        return plan(props, obs, props.get("fields") or {})

    def plan_delete(self, props: Props, obs: Observed) -> list[Step]:
        if not obs["present"]:
            return []
        if props.get("created"):
            return delete_steps(props)
        return plan(props, obs, props.get("before") or {})


def _props(kind: str, conn: dict, name: str, fields: Optional[dict], **keys: Optional[str]) -> dict:
    return {"conn": conn, "kind": kind, "name": name, "account": keys.get("account"),
            "cluster": keys.get("cluster"), "fields": {k: str(v) for k, v in (fields or {}).items()},
            "present": None, "created": None, "before": None}


class SlurmQos(Resource, module="slurm", name="Qos"):
    """A QOS in slurmdbd, its fields as given (sacctmgr's names and spelling)."""

    fields: pulumi.Output[dict]

    def __init__(self, name: str, *, conn: dict, qos: str, fields: Optional[dict] = None,
                 opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__(SacctObjectProvider(), name, _props("qos", conn, qos, fields), opts)


class SlurmAccount(Resource, module="slurm", name="Account"):
    """An account on a cluster, its association's fields as given."""

    fields: pulumi.Output[dict]

    def __init__(self, name: str, *, conn: dict, account: str, cluster: str, fields: Optional[dict] = None,
                 opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__(SacctObjectProvider(), name, _props("account", conn, account, fields, cluster=cluster), opts)


class SlurmUser(Resource, module="slurm", name="User"):
    """A user's association with an account on a cluster, its fields as given."""

    fields: pulumi.Output[dict]

    def __init__(self, name: str, *, conn: dict, user: str, account: str, cluster: str,
                 fields: Optional[dict] = None, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__(SacctObjectProvider(), name,
                         _props("user", conn, user, fields, account=account, cluster=cluster), opts)


# ---- all of a cluster's objects as one resource ------------------------------------------------

_QOS_END, _ASSOC_END, _SQUEUE_FAILED = "@@gpu-fleet-qos-end", "@@gpu-fleet-assoc-end", "@@gpu-fleet-squeue-failed"
#: the jobs each account has queued or running: a team is not removed under them
_JOBS = "@jobs"


def _union(members: list[Props], kinds: tuple[str, ...]) -> list[str]:
    """The fields any member of `kinds` manages, in FIELDS order (only those: a field this
    sacctmgr does not know would fail the read)."""
    wanted = {f for m in members if m["kind"] in kinds for f in (m.get("fields") or {})}
    order = [f for k in kinds for f in FIELDS[k]]
    return [f for f in dict.fromkeys(order) if f in wanted]


def bundle_probe_script(cluster: str, members: list[Props]) -> list[Piece]:
    """One command for every object: all QOS, all of the cluster's associations, the queue's
    accounts (two sacctmgr calls and one squeue, however many teams)."""
    for m in members:
        _columns(m)  # refuses a field the kind has not, naming it
    qos = show_argv("qos", ["Name", *_union(members, ("qos",))])
    assoc = show_argv("association", [*_KEYS["account"], *_union(members, ("account", "user"))], cluster=cluster)
    return ["sh", "-c", f"set -e; {shell_join(qos)}; echo {_QOS_END}; {shell_join(assoc)}; echo {_ASSOC_END}; "
            f"squeue -h -a -t PENDING,RUNNING,SUSPENDED,REQUEUED -o '%a|%i' 2>/dev/null || echo {_SQUEUE_FAILED}"]


def bundle_parse(cluster: str, members: list[Props], stdout: str) -> dict[str, Any]:
    """Pure: the probe's output -> each member's {'present', 'fields'} by key, and under `@jobs`
    account -> its queued job ids (None when squeue did not answer: no slurmctld)."""
    qos_text, _, rest = stdout.partition(_QOS_END + "\n")
    assoc_text, _, queue = rest.partition(_ASSOC_END + "\n")
    qos_rows = {r["Name"]: r for r in parse_parsable2(qos_text, ["Name", *_union(members, ("qos",))])}
    acols = [*_KEYS["account"], *_union(members, ("account", "user"))]
    assoc_rows = {(r["Account"], r["User"]): r for r in parse_parsable2(assoc_text, acols)
                  if r["Cluster"] == cluster and r["Partition"] == ""}
    out: dict[str, Any] = {}
    for m in members:
        fields = sorted(m.get("fields") or {})
        if m["kind"] == "qos":
            row = qos_rows.get(m["name"])
        else:
            row = assoc_rows.get((m["account"], m["name"]) if m["kind"] == "user" else (m["name"], ""))
        out[SacctObjectProvider().key(m)] = ({"present": True, "fields": {f: row[f] for f in fields}}
                                             if row else {"present": False, "fields": {}})
    jobs: Optional[dict[str, list[str]]] = None
    if _SQUEUE_FAILED not in queue:
        jobs = {}
        for line in queue.splitlines():
            account, _, job = line.partition("|")
            if job:
                jobs.setdefault(account.lower(), []).append(job)
    out[_JOBS] = jobs
    return out


class SacctObjectsProvider(BundleProvider):
    """Every QOS, account and user association one layer keeps on a cluster, as one resource:
    one probe (two sacctmgr calls, whatever the count), each member planned by the member
    planner above, in the stack's order (QOS, then accounts, then users); removed in reverse.
    An account is never removed while jobs are queued or running under it."""

    member = SacctObjectProvider()
    replace_on: tuple[str, ...] = ("bundle", "cluster")

    def members(self, props: Props) -> dict[str, Props]:
        ms = [{**m, "conn": props["conn"], "cluster": props["cluster"]} for m in props.get("members") or []]
        return {self.member.key(m): m for m in ms}

    def probe_argv(self, props: Props) -> list[Piece]:
        return bundle_probe_script(props["cluster"], list(self.members(props).values()))

    def parse(self, props: Props, stdout: str) -> Observed:
        return bundle_parse(props["cluster"], list(self.members(props).values()), stdout)

    def plan_delete(self, props: Props, observed: Observed) -> list[Step]:
        jobs = observed.get(_JOBS) or {}
        recs = props.get("records") or {}
        busy = {m["name"]: jobs[m["name"]] for k, m in self.members(props).items()
                if m["kind"] == "account" and (recs.get(k) or {}).get("created") and observed[k]["present"]
                and jobs.get(m["name"])}
        if busy:
            raise PlanRefused("; ".join(f"account {a} still has queued or running jobs ({', '.join(js)})"
                                        for a, js in sorted(busy.items()))
                              + ": its association is removed once they end (its history stays in accounting "
                              "either way); wait for them or cancel them, then run `pulumi up` again")
        return super().plan_delete(props, observed)


class SlurmAccounting(Resource, module="slurm", name="Accounting"):
    """A cluster's QOS, accounts and users' associations, as one resource (see the provider).
    Each member: {'kind': 'qos'|'account'|'user', 'name', 'account' (a user's), 'fields'}."""

    state: pulumi.Output[dict]

    def __init__(self, name: str, *, conn: dict, cluster: str, members: list[dict],
                 opts: Optional[pulumi.ResourceOptions] = None):
        ms = [{"kind": m["kind"], "name": m["name"], "account": m.get("account"),
               "fields": {k: str(v) for k, v in (m.get("fields") or {}).items()}} for m in members]
        super().__init__(SacctObjectsProvider(), name,
                         {"conn": conn, "bundle": name, "cluster": cluster, "members": ms,
                          "records": None, "state": None}, opts)
