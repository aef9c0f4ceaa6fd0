"""A large fleet's preview, up, refresh or destroy as an operator reads it: per layer (issue 39).

The CLI prints a line per resource: 11,276 lines for 1,250 nodes, where a failed node or a
policy violation scrolls past unseen. For a large fleet (pending_hosts.LARGE_FLEET_NODES) or
with `VIEW=summary`, `make` runs the CLI with its own output in a log file under `.state/runs/` and prints this
instead, from the engine's event log: a progress line while the run goes, then per layer the
resources created, updated, replaced, deleted and unchanged and the hosts each one touches,
every error, warning and policy violation in full, and where the CLI's own output is.

A fact of the event log this reads: each resource step is a `resourcePreEvent` (the step
starts; `planning` in a preview) and a `resOutputsEvent` (done) or `resOpFailedEvent`
(failed), with `metadata.op`, `urn`, and the inputs (`new`, or `old` for a delete), whose
`conn.name` is the host a primitive acts on. The layer is the component under `Fleet` in the
URN's type chain (`gpu-fleet:index:Fleet$gpu-fleet:slurm:SlurmCluster$...` is `slurm`).
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, TextIO

#: seconds between progress lines
PROGRESS_EVERY_S = 15.0
#: the columns, in order; the engine's replace steps all count as one replace
COLUMNS = ("create", "update", "replace", "delete", "same", "refresh", "read", "failed")
_REPLACE = {"replace", "create-replacement", "delete-replaced", "discard-replaced", "import-replacement"}
_ROOT = "pulumi:pulumi:Stack"
_FLEET = "gpu-fleet:index:Fleet"


def layer_of(urn: str) -> str:
    """The layer a resource belongs to, from its URN's type chain: the module of the `gpu-fleet`
    component under `Fleet` ('fleet' for what `Fleet` registers itself, 'stack' for the root,
    'providers' for a provider, '(outside Fleet)' for anything else)."""
    try:
        chain = urn.split("::")[2].split("$")
    except IndexError:
        return "?"
    if chain == [_ROOT]:
        return "stack"
    if chain[0].startswith("pulumi:providers:"):
        return "providers"
    if chain[0] != _FLEET:
        return "(outside Fleet)"
    parts = chain[1].split(":") if len(chain) > 1 else []
    return parts[1] if len(parts) == 3 and parts[0] == "gpu-fleet" else "fleet"


def host_of(metadata: dict) -> Optional[str]:
    """The host a step acts on: `conn.name` in its new inputs (the old ones for a delete)."""
    for key in ("new", "old"):
        conn = ((metadata.get(key) or {}).get("inputs") or {}).get("conn")
        if isinstance(conn, dict) and isinstance(conn.get("name"), str):
            return conn["name"]
    return None


@dataclass
class Tally:
    """What an event log says so far; `add` takes one line of it."""

    ops: dict[str, str] = field(default_factory=dict)  # urn -> op (replace family folded)
    started: set[str] = field(default_factory=set)  # urns whose step began and has not ended
    hosts: dict[str, str] = field(default_factory=dict)  # urn -> host
    diagnostics: list[tuple[str, str, str]] = field(default_factory=list)  # (severity, urn, message)
    violations: list[tuple[str, str, str, str]] = field(default_factory=list)  # (level, policy, urn, msg)
    summary: dict = field(default_factory=dict)

    def add(self, line: str) -> None:
        try:
            event = json.loads(line)
        except ValueError:
            return  # a line the CLI is still writing: read again whole by the next pass
        if not isinstance(event, dict):
            return
        if "resourcePreEvent" in event:
            self._step(event["resourcePreEvent"].get("metadata") or {}, done=False)
        elif "resOutputsEvent" in event:
            self._step(event["resOutputsEvent"].get("metadata") or {}, done=True)
        elif "resOpFailedEvent" in event:
            md = event["resOpFailedEvent"].get("metadata") or {}
            if md.get("urn"):
                self.ops[md["urn"]] = "failed"
                self.started.discard(md["urn"])
        elif "diagnosticEvent" in event:
            d = event["diagnosticEvent"]
            if d.get("severity") in ("error", "warning") and not d.get("ephemeral"):
                self.diagnostics.append((d["severity"], d.get("urn") or "", (d.get("message") or "").strip()))
        elif "policyEvent" in event:
            p = event["policyEvent"]
            self.violations.append((p.get("enforcementLevel") or "", p.get("policyName") or "",
                                    p.get("resourceUrn") or "", (p.get("message") or "").strip()))
        elif "summaryEvent" in event:
            self.summary = event["summaryEvent"]

    def _step(self, md: dict, done: bool) -> None:
        urn, op = md.get("urn"), md.get("op")
        if not urn or not op or layer_of(urn) == "stack":
            return
        if self.ops.get(urn) == "failed":
            return
        op = "replace" if op in _REPLACE or self.ops.get(urn) == "replace" else op
        self.ops[urn] = op
        (self.started.discard if done else self.started.add)(urn)
        host = host_of(md)
        if host:
            self.hosts[urn] = host

    def counts(self) -> dict[str, int]:
        out = dict.fromkeys(COLUMNS, 0)
        for op in self.ops.values():
            out[op] = out.get(op, 0) + 1
        return out

    def by_layer(self) -> dict[str, tuple[dict[str, int], set[str]]]:
        """layer -> (count per op, hosts with a step that is not `same`)."""
        out: dict[str, tuple[dict[str, int], set[str]]] = {}
        for urn, op in self.ops.items():
            counts, hosts = out.setdefault(layer_of(urn), (dict.fromkeys(COLUMNS, 0), set()))
            counts[op] = counts.get(op, 0) + 1
            if op != "same" and urn in self.hosts:
                hosts.add(self.hosts[urn])
        return out


def progress_line(op: str, tally: Tally, elapsed_s: float) -> str:
    counts = tally.counts()
    done = ", ".join(f"{n:,} {k}" for k, n in counts.items() if n and k != "failed")
    running = f", {len(tally.started):,} running" if tally.started and op != "preview" else ""
    failed = f", {counts['failed']:,} FAILED" if counts["failed"] else ""
    return f"{op}: {elapsed_s:.0f} s, {len(tally.ops):,} resources so far ({done or 'none yet'}{running}{failed})"


def render(op: str, stack: str, tally: Tally, log: str) -> str:
    """The summary printed when the run has ended: a table per layer, then every error,
    warning and policy violation, then where the CLI's output is."""
    layers = tally.by_layer()
    cols = [c for c in COLUMNS if any(c_[c] for c_, _ in layers.values())] or ["same"]
    head = ["layer", *cols, "hosts changed"]
    rows = [[name, *(f"{counts[c]:,}" for c in cols), f"{len(hosts):,}"]
            for name, (counts, hosts) in sorted(layers.items())]
    total = tally.counts()
    all_hosts = {h for _, hosts in layers.values() for h in hosts}
    rows.append(["total", *(f"{total[c]:,}" for c in cols), f"{len(all_hosts):,}"])
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]

    def line(r: list[str]) -> str:
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip()

    s = tally.summary
    result = s.get("result") or ("ended" if s else "ended without the engine's summary (interrupted?)")
    took = f" in {s['durationSeconds']} s" if "durationSeconds" in s else ""
    out = [f"{op} of stack {stack}: {result}{took}; {len(tally.ops):,} resources", line(head),
           *(line(r) for r in rows)]
    if tally.started and op != "preview":
        out.append(f"{len(tally.started):,} steps began and did not end, e.g. {sorted(tally.started)[0]}")
    for level, policy, urn, msg in tally.violations:
        out.append(f"policy {policy} ({level}) on {urn or 'the stack'}:\n  {msg}")
    for severity, urn, msg in dict.fromkeys(tally.diagnostics):  # each once, in order
        out.append(f"{severity}{f' ({urn})' if urn else ''}: {msg}")
    found = sum(1 for v in tally.violations if v[0] in ("mandatory", "remediate"))
    for pack, version in sorted((s.get("PolicyPacks") or s.get("policyPacks") or {}).items()):
        out.append(f"policy pack {pack.split('|')[0]}@{version}: "
                   + (f"{found} mandatory violation(s), above" if found else "no mandatory violation"))
    out.append(f"the CLI's own output (every resource): {log}")
    return "\n".join(out)


class Follow:
    """Reads an event log as the CLI writes it (a thread), printing a progress line every
    `every` seconds; the Tally is whole once the context ends."""

    def __init__(self, path: str, op: str, out: TextIO, every: float = PROGRESS_EVERY_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.path, self.op, self.out, self.every, self.clock = path, op, out, every, clock
        self.tally = Tally()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._pos = 0
        self._start = clock()

    def __enter__(self) -> "Follow":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()
        self._read(final=True)

    def _run(self) -> None:
        last = self.clock()
        while not self._stop.wait(0.5):
            self._read(final=False)
            if self.clock() - last >= self.every:
                last = self.clock()
                print(progress_line(self.op, self.tally, last - self._start), file=self.out, flush=True)

    def _read(self, final: bool) -> None:
        try:
            with open(self.path, errors="replace") as f:
                f.seek(self._pos)
                while True:
                    line = f.readline()
                    if not line:
                        break
                    if not line.endswith("\n") and not final:
                        break  # still being written: read it whole next time
                    self._pos = f.tell()
                    self.tally.add(line)
        except OSError:
            return
