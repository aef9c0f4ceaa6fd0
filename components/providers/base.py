"""Probe / plan / apply, shared by every host primitive.

A primitive says three things about its kind of object: how to read it from a
host in one read-only round trip (`probe_argv` + the pure `parse`), what state
it wants (`desired`, pure), and which commands turn observed into desired
(`plan`, pure). This base turns that into a Pulumi dynamic provider:

- `diff` compares the last recorded state with the desired one and never
  touches a host, so a second `pulumi up` with nothing changed sends nothing;
- `read` probes for real, so `pulumi refresh` records drift as a change;
- `create`/`update` probe, plan, apply, probe again and fail unless the new
  plan is empty (the host converged), returning full outputs;
- `delete` plans the way back to what the host had before.

Providers are pickled by the engine: no connection, lock or socket lives on
`self`; connections come from the transport's module-level cache.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Optional, Sequence

from pulumi.dynamic import CreateResult, DiffResult, ReadResult, ResourceProvider, UpdateResult

from ..errors import FleetError
from ..transport import Connection, SshTarget, connection
from ..transport.command import Piece, display

Props = dict[str, Any]
Observed = dict[str, Any]


@dataclass(frozen=True)
class Step:
    """One mutating command of a plan, with the reason it is needed."""

    argv: Sequence[Piece]
    why: str
    stdin: Optional[bytes] = None
    stdin_secret: bool = False

    def __str__(self) -> str:
        return f"{self.why}: {display(self.argv)}"


class NotConverged(FleetError):
    """After applying its plan, a host still differs from the desired state."""


class PlanRefused(FleetError):
    """The planner will not do what was asked (renumber an id, downgrade silently, ...)."""


def target_of(props: Props) -> SshTarget:
    return SshTarget.from_dict(props["conn"])


def normalize(value: Any) -> Any:
    """The engine hands numbers over as floats (22.0); give integers back their type."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: normalize(v) for k, v in value.items()}
    if isinstance(value, list):
        return [normalize(v) for v in value]
    return value


def _entry(fn):
    """Provider entry point: normalized props in; our own errors out with a short traceback."""
    @functools.wraps(fn)
    def wrapper(self, *args):
        try:
            return fn(self, *(normalize(a) for a in args))
        except FleetError as e:
            raise FleetError(str(e)) from None
    return wrapper


class HostPrimitive(ResourceProvider):
    """Base dynamic provider: subclasses implement the pure hooks below."""

    #: input fields whose change means a different object (replace, not update)
    replace_on: tuple[str, ...] = ()

    # ---- hooks -----------------------------------------------------------------
    def key(self, props: Props) -> str:
        """What this object is on its host (a path, a unit, a user), for ids and errors."""
        raise NotImplementedError

    def probe_argv(self, props: Props) -> list[Piece]:
        raise NotImplementedError

    def parse(self, props: Props, stdout: str) -> Observed:
        raise NotImplementedError

    def desired(self, props: Props) -> dict[str, Any]:
        """The state keys this object must show on the host (recorded in outputs)."""
        raise NotImplementedError

    def state(self, props: Props, observed: Observed) -> dict[str, Any]:
        """The same keys as `desired`, read from the host."""
        raise NotImplementedError

    def plan(self, props: Props, observed: Observed, record: Props) -> list[Step]:
        """Commands from observed to desired; `record` holds what create learnt (outputs so far)."""
        raise NotImplementedError

    def plan_delete(self, props: Props, observed: Observed) -> list[Step]:
        raise NotImplementedError

    def remember(self, props: Props, before: Observed) -> Props:
        """What create must record about the host as it found it (to undo on delete)."""
        return {}

    def public_inputs(self, props: Props) -> Props:
        """Inputs copied into outputs; drop secret payloads (content) here."""
        return dict(props)

    # ---- machinery -------------------------------------------------------------
    def _conn(self, props: Props) -> Connection:
        c = connection(target_of(props))
        c.connect()
        return c

    def probe(self, conn: Connection, props: Props) -> Observed:
        res = conn.run(self.probe_argv(props), mutating=False)
        return self.parse(props, res.stdout)

    def apply(self, props: Props, record: Props) -> Props:
        conn = self._conn(props)
        observed = self.probe(conn, props)
        if not record:
            record = self.remember(props, observed)
        for step in self.plan(props, observed, record):
            conn.run(step.argv, mutating=True, stdin=step.stdin, stdin_secret=step.stdin_secret)
        observed = self.probe(conn, props)
        left = self.plan(props, observed, record)
        if left:
            raise NotConverged(
                f"host {conn.t.name}: {self.key(props)} did not converge; still planned:\n"
                + "\n".join(f"  - {s}" for s in left)
            )
        return {**self.public_inputs(props), **record, **self.state(props, observed)}

    #: output keys written by `remember` (carried across updates)
    record_keys: tuple[str, ...] = ()

    @_entry
    def create(self, props: Props) -> CreateResult:
        outs = self.apply(props, {})
        return CreateResult(id_=f"{target_of(props).name}:{self.key(props)}", outs=outs)

    @_entry
    def update(self, _id: str, olds: Props, news: Props) -> UpdateResult:
        record = {k: olds[k] for k in self.record_keys if k in olds}
        return UpdateResult(outs=self.apply(news, record))

    @_entry
    def diff(self, _id: str, olds: Props, news: Props) -> DiffResult:
        desired = self.desired(news)
        changes = sorted(k for k, v in desired.items() if olds.get(k) != v)
        replaces = sorted(k for k in self.replace_on if olds.get(k) != news.get(k))
        if olds.get("conn", {}).get("name") != news["conn"]["name"]:
            replaces.append("conn")
        changes = sorted(set(changes) | set(replaces))
        return DiffResult(changes=bool(changes), replaces=replaces, stables=[],
                          delete_before_replace=True)

    @_entry
    def read(self, id_: str, props: Props) -> ReadResult:
        conn = self._conn(props)
        observed = self.probe(conn, props)
        return ReadResult(id_=id_, outs={**props, **self.state(props, observed)})

    @_entry
    def delete(self, _id: str, props: Props) -> None:
        conn = self._conn(props)
        observed = self.probe(conn, props)
        for step in self.plan_delete(props, observed):
            conn.run(step.argv, mutating=True, stdin=step.stdin, stdin_secret=step.stdin_secret)


class RolloutCheck(ResourceProvider):
    """A verification that runs on create and whenever one of `rerun_on` changes (a rollout
    of what it checks), never on refresh (it may act, like submitting a job); delete has
    nothing to undo. Subclasses give `key` and `run` (props -> outputs, or raise)."""

    rerun_on: tuple[str, ...] = ("triggers",)

    def key(self, props: Props) -> str:
        raise NotImplementedError

    def run(self, props: Props) -> dict[str, Any]:
        raise NotImplementedError

    @_entry
    def create(self, props: Props) -> CreateResult:
        return CreateResult(id_=f"{target_of(props).name}:{self.key(props)}", outs={**props, **self.run(props)})

    @_entry
    def update(self, _id: str, olds: Props, news: Props) -> UpdateResult:
        return UpdateResult(outs={**news, **self.run(news)})

    @_entry
    def diff(self, _id: str, olds: Props, news: Props) -> DiffResult:
        changed = any(olds.get(k) != news.get(k) for k in self.rerun_on)
        return DiffResult(changes=changed, replaces=[], stables=[], delete_before_replace=False)

    def read(self, id_: str, props: Props) -> ReadResult:
        return ReadResult(id_=id_, outs=props)

    def delete(self, _id: str, props: Props) -> None:
        return None
