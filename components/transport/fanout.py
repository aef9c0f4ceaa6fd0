"""One function on many hosts at once (bounded), each on the provider process's connection
for its host; a failure on any host is one FanOutError that names each failed host and the
hosts it completed on. Apart from ssh.py, which is one host's connection."""

from __future__ import annotations

import contextlib
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterable, TypeVar

from ..errors import FleetError
from .ssh import Connection, connection
from .target import SshTarget, acting_for, acting_label

T = TypeVar("T")


class FanOutError(FleetError):
    """Some hosts failed in a fan-out; says which failed and which completed."""

    def __init__(self, failures: dict[str, Exception], done: list[str]):
        self.failures, self.done = failures, done
        lines = [f"{len(failures)} host(s) failed:"]
        lines += [f"  - {h}: {e}" for h, e in sorted(failures.items())]
        lines.append(f"  completed on: {', '.join(sorted(done)) or 'no host'}")
        super().__init__("\n".join(lines))


def fan_out(targets: Iterable[SshTarget], fn: Callable[[Connection], T],
            max_parallel: int = 16) -> dict[str, T]:
    """Run fn on every host in parallel (bounded); raise FanOutError naming each failure."""
    targets = list(targets)
    results: dict[str, T] = {}
    failures: dict[str, Exception] = {}
    label = acting_label()  # the resource fanning out, for the command log

    def one(t: SshTarget):
        try:
            with acting_for(label) if label else contextlib.nullcontext():
                results[t.name] = fn(connection(t))
        except Exception as e:  # reported per host below
            failures[t.name] = e

    with ThreadPoolExecutor(max_workers=max(1, min(max_parallel, len(targets) or 1))) as ex:
        list(ex.map(one, targets))
    if failures:
        raise FanOutError(failures, list(results))
    return results
