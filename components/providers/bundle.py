"""Bundle: several objects of one kind on one host as one resource (issue 16).

A node's three Slurm configuration files, or its three service accounts, buy the admin
nothing as separate resources: they change together, on one host, for one layer. As one
resource they cost the state, the engine and the program once instead of three times (URN,
parent, provider reference, dependencies, `conn`, the pickled provider).

Each member is still the member kind's own object: its probe, plan, delete and records are
the member provider's, unchanged. The bundle keys them by the member's `key` (a path,
`account:<name>`) and sends their probes as one command (one round trip, one line in a
refresh's reading of the host: transport/refresh.py). A member the stack drops is deleted as its own resource would have
been (its recorded original restored, the account it created removed); a new member is
created with its own record.

Outputs: `conn`, `bundle`, `members` (the members' public inputs, as given), `records` (by
key: what each member's create remembered, what its delete undoes) and `state` (by key: each
member's state as observed, what diff compares with the desired state).

A state from before bundles holds the members as separate resources: `components/migrate.py`
folds them into the bundle without touching a host. Until it ran, the bundle's alias to its
first member's old name brings that resource's state to diff, which refuses with the command
to run: otherwise the engine would create the bundle and then delete the old resources,
undoing on the host what the bundle just took over.
"""

from __future__ import annotations

from typing import Any, Optional

import pulumi
from pulumi.dynamic import DiffResult, Resource, UpdateResult

from ..transport.command import Piece, shell_join
from .account import AccountProvider
from ..errors import FleetError
from .base import HostPrimitive
from .parts import Observed, Props, Step, _entry, run_steps, target_of
from .file import FileProvider, stored_source

MIGRATE = "make migrate STACK=<stack>"
_END = "@@gpu-fleet-bundle-member"


class BundleProvider(HostPrimitive):
    """Subclasses name the member kind (`member`)."""

    member: HostPrimitive
    replace_on: tuple[str, ...] = ("bundle",)
    record_keys = ("records",)

    def key(self, props: Props) -> str:
        return props["bundle"]

    def members(self, props: Props) -> dict[str, Props]:
        """The members as the member provider takes them, by key, in the stack's order."""
        ms = [{**m, "conn": props["conn"]} for m in props.get("members") or []]
        return {self.member.key(m): m for m in ms}

    def probe_argv(self, props: Props) -> list[Piece]:
        """The members' probes in one command, each followed by a marker line; the command
        fails with the first failing member's status, as that probe alone would."""
        lines = [f'{{ {shell_join(self.member.probe_argv(m))}; }} || r=${{r:-$?}}; echo {_END}'
                 for m in self.members(props).values()]
        return ["sh", "-c", "; ".join(["r=", *lines, 'exit "${r:-0}"'])]

    def parse(self, props: Props, stdout: str) -> Observed:
        chunks: list[str] = []
        cur: list[str] = []
        for line in stdout.splitlines(keepends=True):
            if line.rstrip("\n") == _END:
                chunks.append("".join(cur))
                cur = []
            else:
                cur.append(line)
        ms = self.members(props)
        if len(chunks) != len(ms):
            raise FleetError(f"host {props['conn']['name']}: {props['bundle']}: the probe answered for "
                             f"{len(chunks)} of {len(ms)} members:\n{stdout[-2000:]}")
        return {k: self.member.parse(m, out) for (k, m), out in zip(ms.items(), chunks)}

    def desired(self, props: Props) -> dict[str, Any]:
        return {"state": {k: self.member.desired(m) for k, m in self.members(props).items()}}

    def state(self, props: Props, observed: Observed) -> dict[str, Any]:
        return {"state": {k: self.member.state(m, observed[k]) for k, m in self.members(props).items()}}

    def remember(self, props: Props, before: Observed) -> Props:
        return self.complete_record(props, before, {})

    def complete_record(self, props: Props, observed: Observed, record: Props) -> Props:
        """A record for each member: kept from before, or remembered now (a new member)."""
        had = record.get("records") or {}
        return {"records": {k: had[k] if k in had else self.member.remember(m, observed[k])
                            for k, m in self.members(props).items()}}

    def plan(self, props: Props, observed: Observed, record: Props) -> list[Step]:
        recs = record.get("records") or {}
        return [s for k, m in self.members(props).items()
                for s in self.member.plan(m, observed[k], recs.get(k) or {})]

    def plan_delete(self, props: Props, observed: Observed) -> list[Step]:
        recs = props.get("records") or {}
        ms = list(self.members(props).items())
        return [s for k, m in reversed(ms) for s in self.member.plan_delete({**m, **(recs.get(k) or {})}, observed[k])]

    def public_inputs(self, props: Props) -> Props:
        return {**props, "members": [
            {k: v for k, v in self.member.public_inputs(m).items() if k != "conn"}
            for m in self.members(props).values()]}

    def outputs(self, props: Props, record: Props, observed: Observed) -> Props:
        return {**self.public_inputs(props), **record, **self.state(props, observed)}

    # ---- entry points that differ from a single object's ---------------------------------
    @_entry
    def diff(self, _id: str, olds: Props, news: Props) -> DiffResult:
        if "state" not in olds:
            self._refuse_unmigrated(_id, olds, news)
        return HostPrimitive.diff.__wrapped__(self, _id, olds, news)

    @_entry
    def update(self, _id: str, olds: Props, news: Props) -> UpdateResult:
        """Members the stack dropped are deleted first, then the bundle is applied."""
        keep = set(self.members(news))
        gone = {k: m for k, m in self.members(olds).items() if k not in keep}
        records = olds.get("records") or {}
        if gone:
            conn = self._conn(news)
            dropped = {**olds, "members": [{x: v for x, v in m.items() if x != "conn"} for m in gone.values()],
                       "records": {k: records.get(k) or {} for k in gone}}
            run_steps(conn, self.plan_delete(dropped, self.probe(conn, dropped)))
        return UpdateResult(outs=self.apply(news, {"records": {k: v for k, v in records.items() if k in keep}}))

    def _refuse_unmigrated(self, _id: str, olds: Props, news: Props) -> None:
        host = (news.get("conn") or {}).get("name") or target_of(olds).name
        raise FleetError(
            f"host {host}: {type(self).__name__.removesuffix('Provider')} {news.get('bundle')}: the stack's "
            f"state holds its members as separate resources (gpu-fleet before bundles; this one's id is "
            f"{_id})\n"
            f"  why: `pulumi up` would create the bundle and then delete the old resources, undoing on the "
            f"host what the bundle took over\n"
            f"  run `{MIGRATE}` (python -m components.migrate --stack <stack>) once: it rewrites the state "
            f"only, no host is touched; then `pulumi up`"
        )


class AccountsProvider(BundleProvider):
    member = AccountProvider()


class FilesProvider(BundleProvider):
    member = FileProvider()


def _legacy(opts: Optional[pulumi.ResourceOptions], name: Optional[str], kind: str) -> pulumi.ResourceOptions:
    """The alias to the first member's resource of an earlier release (see the module's doc)."""
    aliases = [pulumi.Alias(name=name, type_=f"pulumi-python:dynamic/host:{kind}")] if name else []
    return pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(aliases=aliases))


class Accounts(Resource, module="host", name="Accounts"):
    """System users with same-named groups and fixed numeric ids, on one host: each member as
    `Account` takes it (user, uid, gid, home, shell)."""

    def __init__(self, name: str, *, conn: dict, accounts: list[dict], legacy: Optional[str] = None,
                 opts: Optional[pulumi.ResourceOptions] = None):
        members = [{"name": a["user"], "uid": a["uid"], "gid": a["gid"],
                    "home": a.get("home", "/nonexistent"), "shell": a.get("shell", "/usr/sbin/nologin")}
                   for a in accounts]
        super().__init__(AccountsProvider(), name, {"conn": conn, "bundle": name, "members": members},
                         _legacy(opts, legacy, "Account"))


class Files(Resource, module="host", name="Files"):
    """Files on one host, each by hash (`File(..., by_hash=True)`: its text in the local store,
    its SHA-256 in the state); no secret among them (a secret's content stays an inline File)."""

    def __init__(self, name: str, *, conn: dict, files: list[dict], legacy: Optional[str] = None,
                 opts: Optional[pulumi.ResourceOptions] = None):
        members = [{"path": f["path"], **stored_source(f["content"]),
                    "mode": f.get("mode", "0644"), "owner": f.get("owner", "root"),
                    "group": f.get("group", "root"), "validate": f.get("validate"), "secret": False}
                   for f in files]
        super().__init__(FilesProvider(), name, {"conn": conn, "bundle": name, "members": members},
                         _legacy(opts, legacy, "File"))
