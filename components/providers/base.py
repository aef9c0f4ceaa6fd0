"""Probe / plan / apply, shared by every host primitive.

A primitive says three things about its kind of object: how to read it from a
host in one read-only round trip (`probe_argv` + the pure `parse`), what state
it wants (`desired`, pure), and which commands turn observed into desired
(`plan`, pure). This base turns that into a Pulumi dynamic provider:

- `diff` compares the last recorded state with the desired one and never
  touches a host, so a second `pulumi up` with nothing changed sends nothing;
  it also guards where that state lives (`conn_change`): the same host reached
  another way (user, key, jump host) is an in-place update, the same host name
  at another address or port is refused before anything runs;
- `read` probes for real, so `pulumi refresh` records drift as a change;
- `create`/`update` probe, plan, apply, probe again and fail unless the new
  plan is empty (the host converged), returning full outputs;
- `delete` plans the way back to what the host had before;
- what create found is also kept on the host before its first change there, and read back by
  the next create in its probe's round trip (kept.py): a run killed before the engine saved
  its state is adopted, not recorded as the host's original.

Outputs are always full (`outputs`): the public inputs, what create recorded,
the observed state, and under `INPUTS` the stack's values of the input keys
that the observed state reuses (an Account's uid, a File's mode). The engine
drops an output whose value is None, and `read`/`delete` work from recorded
outputs, so without that copy a refresh that found a user gone would leave a
state whose next probe has no uid to ask for.

Providers are pickled by the engine: no connection, lock or socket lives on
`self`; connections come from the transport's module-level cache.

The family's root, `HostProvider`, holds those entry points once, built from hooks:
`HostPrimitive` fills them from probe/plan/apply, `ActionWithUndo` (undoable.py) from an
action and its undo, the web layer's providers from their whole scripts.
"""

from __future__ import annotations

import contextlib
from typing import Any, Optional, Sequence

from pulumi.dynamic import CreateResult, DiffResult, ReadResult, ResourceProvider, UpdateResult

from . import kept, readable
from ..transport import Connection, connection
from ..transport.command import Piece
from .parts import (
    INPUTS, NotConverged, Observed, Props, Step, _entry, _from_record, conn_change, has_unknown, kind_of,
    recorded_inputs, run_steps, target_of,
)

readable.install()  # in the engine's provider process: FleetErrors without SDK frames


class HostProvider(ResourceProvider):
    """The family's root: a dynamic provider for one object on one host. The engine's entry
    points live here once (conn guarded in diff, props normalized, errors short); each kind
    fills in the hooks: `HostPrimitive` from probe/plan/apply, `ActionWithUndo` (undoable.py)
    from an action and its undo, the web layer's containers from their own scripts."""

    #: the pickled provider (a class by reference, no state on `self`) holds no secret: in the
    #: clear in the state (issue 16); the SDK still makes it secret if one were captured
    serialize_as_secret_always = False

    #: input fields whose change means a different object (replace, not update)
    replace_on: tuple[str, ...] = ()

    #: output keys an update carries over from the recorded state (what create learnt)
    record_keys: tuple[str, ...] = ()

    #: a replacement deletes the old object before creating the new one (else after)
    delete_before_replace = True

    # ---- hooks -----------------------------------------------------------------
    def key(self, props: Props) -> str:
        """What this object is on its host (a path, a unit, a user), for ids and errors."""
        raise NotImplementedError

    def id_of(self, props: Props) -> str:
        return f"{target_of(props).name}:{self.key(props)}"

    def converge(self, props: Props, record: Props) -> Props:
        """Create and update: make the host hold the object, prove it, return full outputs;
        `record` is what `record_keys` kept from the last outputs (empty on create)."""
        raise NotImplementedError

    def observe(self, props: Props) -> Props:
        """Refresh: what the host shows now, merged over the recorded outputs."""
        raise NotImplementedError

    def undo(self, props: Props) -> None:
        """Delete, from the recorded outputs."""
        raise NotImplementedError

    def refuse(self, olds: Props, news: Props) -> None:
        """Raise PlanRefused for a change this kind will not make (in diff: before anything runs)."""

    def replaces(self, olds: Props, news: Props) -> list[str]:
        """The input fields whose change makes this another object (the stack's recorded value: a
        refresh may have put what the host shows under the same key)."""
        olds = recorded_inputs(olds)
        return sorted(k for k in self.replace_on if olds.get(k) != news.get(k))

    def drifted(self, olds: Props, news: Props) -> bool:
        """Whether the recorded state differs from what the stack now asks for (an update)."""
        raise NotImplementedError

    def _reading(self, id_: str, props: Props) -> contextlib.AbstractContextManager[None]:
        """Around read and delete's use of recorded outputs."""
        return contextlib.nullcontext()

    # ---- entry points ------------------------------------------------------------
    @_entry
    def create(self, props: Props) -> CreateResult:
        outs = self.converge(props, {})
        return CreateResult(id_=self.id_of(props), outs=outs)

    @_entry
    def update(self, _id: str, olds: Props, news: Props) -> UpdateResult:
        return UpdateResult(outs=self.converge(news, {k: olds[k] for k in self.record_keys if k in olds}))

    @_entry
    def diff(self, _id: str, olds: Props, news: Props) -> DiffResult:
        self.refuse(olds, news)
        how = conn_change(kind_of(self), _id, olds, news)
        replaces = self.replaces(olds, news) + (["conn"] if how == "replace" else [])
        return DiffResult(changes=how is not None or bool(replaces) or self.drifted(olds, news),
                          replaces=replaces, stables=[],
                          delete_before_replace=how == "replace" or (bool(replaces) and self.delete_before_replace))

    @_entry
    def read(self, id_: str, props: Props) -> ReadResult:
        props = recorded_inputs(props)  # what was recorded, the stack's inputs (INPUTS) carried on
        with self._reading(id_, props):
            outs = {**props, **self.observe(props)}
        return ReadResult(id_=id_, outs=outs)

    @_entry
    def delete(self, _id: str, props: Props) -> None:
        props = recorded_inputs(props)
        with self._reading(_id, props):
            self.undo(props)


class HostPrimitive(HostProvider):
    """An object the host can be read for (`probe_argv` + `parse`) and planned towards
    (`desired`, `plan`): create and update probe, plan, apply, probe again and fail unless
    the new plan is empty; refresh probes; delete plans the way back."""

    # ---- hooks -----------------------------------------------------------------
    def probe_argv(self, props: Props) -> Sequence[Piece]:
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

    def complete_record(self, props: Props, observed: Observed, record: Props) -> Props:
        """The record an apply works with: the one kept (an update), else `remember` now."""
        return record if record else self.remember(props, observed)

    def public_inputs(self, props: Props) -> Props:
        """Inputs copied into outputs; drop secret payloads (content) here."""
        return dict(props)

    def outputs(self, props: Props, record: Props, observed: Observed) -> Props:
        """Full outputs: public inputs, what create recorded, the observed state, and the stack's
        values of the input keys that state reuses (so the next read and delete still have them)."""
        public = self.public_inputs(props)
        state = self.state(props, observed)
        shadowed = {k: public[k] for k in state if public.get(k) is not None}
        return {**public, **record, **state, **({INPUTS: shadowed} if shadowed else {})}

    # ---- machinery -------------------------------------------------------------
    def _conn(self, props: Props) -> Connection:
        c = connection(target_of(props))
        c.connect()
        return c

    def probe(self, conn: Connection, props: Props, refresh: bool = False) -> Observed:
        """One read of the host; it may share a round trip (transport/batch.py), and a refresh's
        read may be answered by the host's one reading of this refresh (transport/refresh.py)."""
        res = conn.probe(self.probe_argv(props), refresh=refresh)
        return self.parse(props, res.stdout)

    def applied(self, props: Props, record: Props, before: Observed, after: Observed,
                ran: list[Step]) -> Props:
        """The outputs of an apply that converged; `before` is the host as the apply found it
        (what an install added is the difference: one read each side, no more), `ran` the
        steps it ran."""
        return self.outputs(props, record, after)

    def kept_key(self, props: Props) -> str:
        """What the kept record is filed under on the host: the object's key."""
        return self.key(props)

    def kept_path(self, props: Props) -> str:
        return kept.path_of(kind_of(self), self.kept_key(props))

    def keep_step(self, props: Props, record: Props) -> Step:
        """The step that keeps `record` on the host, first in a create's steps."""
        return kept.write_step(self.kept_path(props), kind_of(self), self.kept_key(props), record)

    def forget_steps(self, props: Props, there: bool) -> list[Step]:
        """The step that removes the kept record, last in a delete, when one is there."""
        return [kept.remove_step(self.kept_path(props))] if there else []

    def keeps_record(self) -> bool:
        """Whether create records what it found (the kind overrides `remember`): that record is
        also kept on the host (kept.py)."""
        cls = type(self)
        return cls.remember is not HostPrimitive.remember or cls.complete_record is not HostPrimitive.complete_record

    def kept_record(self, props: Props, before: Observed, record: Props) -> Props:
        """What goes to the host before the first change: the record (a kind adds what only a
        recovery needs, never into the state)."""
        return record

    def recover(self, props: Props, kept_: Props, before: Observed) -> tuple[Props, Observed]:
        """A create that found `kept_` on the host (a killed run changed it): the record, and
        the host as that run found it, as far as the record says."""
        return kept_, before

    def apply(self, props: Props, record: Props) -> Props:
        conn = self._conn(props)
        keep = not record and self.keeps_record()  # a create of a kind that records
        found: Optional[Props] = None
        if keep:  # the kept record rides in the probe's round trip
            before, found, _ = self.probe_kept(conn, props)
        else:
            before = self.probe(conn, props)
        as_found = before
        if found is not None:
            record, as_found = self.recover(props, found, before)
        record = self.complete_record(props, as_found, record)
        steps = self.plan(props, before, record)
        if keep and found is None and steps:
            steps = [self.keep_step(props, self.kept_record(props, before, record)), *steps]
        # the read after the steps rides in their round trip
        read = run_steps(conn, steps, then=self.probe_argv(props)) if steps else None
        after = self.parse(props, read.stdout) if read is not None else self.probe(conn, props)
        left = self.plan(props, after, record)
        if left:
            raise NotConverged(
                f"host {conn.t.name}: {self.key(props)} did not converge; still planned:\n"
                + "\n".join(f"  - {s}" for s in left)
            )
        return self.applied(props, record, as_found, after, steps)

    # ---- the root's hooks, from the ones above ------------------------------------
    def converge(self, props: Props, record: Props) -> Props:
        return self.apply(props, record)

    def drifted(self, olds: Props, news: Props) -> bool:
        # in a preview, an input another resource computes this run is a change
        return has_unknown(news) or any(olds.get(k) != v for k, v in self.desired(news).items())

    def observe(self, props: Props) -> Props:
        return self.state(props, self.probe(self._conn(props), props, refresh=True))

    def probe_kept(self, conn: Connection, props: Props) -> tuple[Observed, Optional[Props], bool]:
        """The probe and, in its round trip, the kept record: (observed, record, a file there)."""
        res = conn.probe(kept.probe_argv(self.kept_path(props), self.probe_argv(props)))
        own, found, there = kept.split(res.stdout)
        return self.parse(props, own), found, there

    def undo(self, props: Props) -> None:
        """The way back, then the kept record removed (in the same round trip), if there is one."""
        conn = self._conn(props)
        if not self.keeps_record():
            run_steps(conn, self.plan_delete(props, self.probe(conn, props)))
            return
        obs, _, there = self.probe_kept(conn, props)
        run_steps(conn, [*self.plan_delete(props, obs), *self.forget_steps(props, there)])

    def _reading(self, id_: str, props: Props) -> contextlib.AbstractContextManager[None]:
        return _from_record(kind_of(self), id_, props)


class RolloutCheck(ResourceProvider):
    """A verification that runs on create and whenever one of `rerun_on` changes (a rollout
    of what it checks), never on refresh (it may act, like submitting a job); delete has
    nothing to undo. Subclasses give `key` and `run` (props -> outputs, or raise)."""

    serialize_as_secret_always = False  # as HostPrimitive's

    rerun_on: tuple[str, ...] = ("triggers",)

    def key(self, props: Props) -> str:
        raise NotImplementedError

    def run(self, props: Props) -> dict[str, Any]:
        raise NotImplementedError

    @_entry
    def create(self, props: Props) -> CreateResult:
        return CreateResult(id_=f"{target_of(props).name}:{self.key(props)}", outs={**props, **self.run(props)})

    def rerun(self, olds: Props, news: Props) -> bool:
        return any(olds.get(k) != news.get(k) for k in self.rerun_on)

    @_entry
    def update(self, _id: str, olds: Props, news: Props) -> UpdateResult:
        if not self.rerun(olds, news):  # only the way to reach the host changed: record it
            return UpdateResult(outs={**olds, "conn": news["conn"]})
        return UpdateResult(outs={**news, **self.run(news)})

    @_entry
    def diff(self, _id: str, olds: Props, news: Props) -> DiffResult:
        how = conn_change(kind_of(self), _id, olds, news)
        replaces = ["conn"] if how == "replace" else []
        return DiffResult(changes=bool(how) or self.rerun(olds, news), replaces=replaces, stables=[],
                          delete_before_replace=True)

    def read(self, id_: str, props: Props) -> ReadResult:
        return ReadResult(id_=id_, outs=props)

    def delete(self, _id: str, props: Props) -> None:
        return None
