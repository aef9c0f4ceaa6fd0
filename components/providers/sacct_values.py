"""How sacctmgr spells a field's value: one canonical spelling per value, so that what a stack asks
and what `sacctmgr show` prints compare equal (components/providers/sacct.py plans on them), and
the spelling `sacctmgr modify ... set` takes back."""

from __future__ import annotations

from typing import Any

_LISTS = ("Preempt", "QOS", "Flags")
_NOCASE = ("PreemptMode",)
#: fields sacctmgr prints as [days-]hours:minutes:seconds; GraceTime is set in whole seconds,
#: PreemptExemptTime as a time (a bare number there would be minutes), so it is set as H:MM:SS
_SECONDS = ("GraceTime", "PreemptExemptTime")
_AS_TIME = ("PreemptExemptTime",)


def _as_time(secs: str) -> str:
    n = int(secs)
    return f"{n // 3600}:{n // 60 % 60:02d}:{n % 60:02d}"


def _seconds(text: str) -> str:
    """`00:05:00`, `1-00:00:00`, `5:00` or `300` -> `300`; anything else as it is (sacctmgr
    refuses it, naming the field)."""
    days, _, clock = text.rpartition("-") if "-" in text.lstrip("-") else ("", "", text)
    parts = clock.split(":")
    if not (days.isdigit() or not days) or len(parts) > 3 or not all(p.isdigit() for p in parts):
        return text
    secs = 0
    for p in parts:
        secs = secs * 60 + int(p)
    return str(secs + int(days or 0) * 86400)


def canonical(field: str, value: Any) -> str:
    """One spelling per value, so that what was asked and what sacctmgr prints compare equal."""
    text = "" if value is None else str(value).strip()
    if field in _SECONDS and text:
        return _seconds(text)
    if "TRES" in field:
        return ",".join(sorted(p for p in text.split(",") if p))
    if field in _LISTS:
        return ",".join(sorted({p for p in text.split(",") if p}))
    if field == "Description":
        # sacctmgr stores a description lower-cased, each ' as ` (a QOS's "Team's GPUs" reads
        # back "team`s gpus"): compared as stored, or a description never converges
        return text.lower().replace("'", "`")
    return text.lower() if field in _NOCASE else text


def cleared(field: str, actual: str) -> str:
    """The `set` value that empties a field: each TRES -1, a list empty, a number or time -1."""
    if "TRES" in field:
        return ",".join(f"{p.split('=', 1)[0]}=-1" for p in actual.split(",") if p)
    return "" if field in ("Preempt", "QOS", "Description") else "-1"


def set_value(field: str, want: str) -> str:
    """A canonical value as sacctmgr takes it (PreemptExemptTime as a clock)."""
    return _as_time(want) if field in _AS_TIME and want.isdigit() else want
