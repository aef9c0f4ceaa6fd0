"""The node guards: least privilege for a daemon that runs as root on every GPU node.

Checked on the guards layer's SystemdUnit (`UNIT`): the guard must run as root (Slurm takes
`scontrol update` only from root or SlurmUser) so what bounds it is the unit: a capability
bounding set that is declared and holds nothing but CAP_KILL (what the memory guard needs to stop
another user's process), no ambient capabilities beyond it, no new privileges, and the file
system read-only but for its own directories (ProtectSystem=strict).

The constants mirror components/layers/guards/render.py (the pack does not import the program;
tests/policy/test_guards_policies.py holds them equal).
"""

from __future__ import annotations

from . import props as P
from .common import resource
from .exposure import _unit_lines, _unit_texts

#: render.UNIT
UNIT = "gpu-fleet-guard.service"
ALLOWED_CAPS = frozenset({"CAP_KILL"})


def unit_problems(texts: list[str]) -> list[str]:
    """What in the unit's [Service] section (its file, then its drop-ins) gives the guard more
    than it needs."""
    service: dict[str, list[str]] = {}
    for section, key, value in (line for text in texts for line in _unit_lines(text)):
        if section == "Service":
            service.setdefault(key, []).append(value)
    out = []
    bounding = service.get("CapabilityBoundingSet")
    if bounding is None:
        out.append("declares no CapabilityBoundingSet (root would keep every capability)")
    else:
        caps = set(" ".join(bounding).split())
        if any(c.startswith("~") for c in caps):
            out.append("bounds capabilities by exclusion (~...), which keeps every one not named")
        elif caps - ALLOWED_CAPS:
            out.append(f"keeps {', '.join(sorted(caps - ALLOWED_CAPS))} in its CapabilityBoundingSet "
                       "(CAP_KILL at most)")
    ambient = set(" ".join(service.get("AmbientCapabilities", [])).split())
    if ambient - ALLOWED_CAPS:
        out.append(f"grants ambient {', '.join(sorted(ambient - ALLOWED_CAPS))}")
    if (service.get("NoNewPrivileges") or ["no"])[-1].lower() not in ("yes", "true", "1", "on"):
        out.append("does not set NoNewPrivileges=yes")
    if (service.get("ProtectSystem") or [""])[-1] != "strict":
        out.append("does not set ProtectSystem=strict")
    return out


def validate_least_privilege(args, report_violation) -> None:
    res = resource(args, P.SYSTEMD_UNIT)
    if res is None or P.text(res.get("name")) != UNIT:
        return
    texts = _unit_texts(res)  # the unit file and its drop-ins: a drop-in can widen it too
    if texts is None:
        return
    problems = unit_problems(texts) if texts else ["has no unit file content"]
    if problems:
        report_violation(
            f"{res.describe('SystemdUnit', UNIT)} runs the guard as root but {'; '.join(problems)}; "
            "render it with components/layers/guards/render.py (CapabilityBoundingSet= empty, or "
            "CAP_KILL with the memory guard, NoNewPrivileges=yes, ProtectSystem=strict).", None)
