"""Commands as argv pieces: each piece quoted for the remote shell, secret pieces masked.

A `Secret` piece travels to the host but never into a log line, an error
message or a command log; `mask` replaces every secret value that might
echo back in a command's output.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Iterable, Sequence, Union

MASK = "********"


@dataclass(frozen=True)
class Secret:
    """An argv piece (or stdin payload) whose value must never be shown."""

    value: str

    def __repr__(self) -> str:  # never leak through repr() in tracebacks
        return "Secret(********)"

    __str__ = __repr__


Piece = Union[str, Secret]


def _raw(p: Piece) -> str:
    return p.value if isinstance(p, Secret) else str(p)


def shell_join(argv: Sequence[Piece]) -> str:
    """The command line the remote shell runs: every piece quoted."""
    return " ".join(shlex.quote(_raw(p)) for p in argv)


def display(argv: Sequence[Piece]) -> str:
    """The same command line with secret pieces masked, for logs and errors."""
    return " ".join(MASK if isinstance(p, Secret) else shlex.quote(str(p)) for p in argv)


def secrets_of(argv: Sequence[Piece], extra: Iterable[str] = ()) -> list[str]:
    vals = [p.value for p in argv if isinstance(p, Secret)] + [s for s in extra if s]
    return sorted({v for v in vals if v}, key=len, reverse=True)


def mask(text: str, secrets: Iterable[str]) -> str:
    """Replace every occurrence of each secret value (and each of its lines) in text."""
    for s in secrets:
        if not s:
            continue
        text = text.replace(s, MASK)
        for line in s.splitlines():
            if len(line) >= 8:
                text = text.replace(line, MASK)
    return text
