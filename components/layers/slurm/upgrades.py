"""Which installed Slurm a release may replace in place (SchedMD's upgrade guide).

A slurmctld, slurmd or slurmdbd reads the state an older one saved only from a few major
releases back: the previous two, and since 24.11 the previous three. From further back the
state is lost, or the daemon refuses to start (the lab's 24.11 on 22.05's StateSaveLocation:
`fatal: Can not recover assoc_usage state, incompatible version`). The layer hands the
rule to each host's PackageSet (`SlurmPackagesProvider`), which refuses the jump at
`pulumi preview` (from the versions the state recorded) and again at apply (from what the
host has), before anything is installed.
"""

from __future__ import annotations

from typing import Optional

from ...providers.base import Props
from ...providers.packages import PackageSetProvider

#: majors before the six-month cycle (a nine-month one until 24.05)
_NINE_MONTH = ("17.02", "17.11", "18.08", "19.05", "20.02", "20.11", "21.08", "22.05", "23.02", "23.11", "24.05")


def major(version: str) -> str:
    """'1:22.05.8-4+deb12u3' or '22.05.8' -> '22.05'."""
    upstream = version.split(":", 1)[-1].split("-", 1)[0]
    return ".".join(upstream.split(".")[:2])


def _before(m: str) -> str | None:
    """The major release before `m` (None before the first this module knows)."""
    if m in _NINE_MONTH:
        i = _NINE_MONTH.index(m)
        return _NINE_MONTH[i - 1] if i else None
    year, month = (int(x) for x in m.split("."))
    if (year, month) <= (24, 5):
        return None  # not a Slurm major
    return f"{year:02d}.05" if month == 11 else ("24.05" if year == 24 else f"{year - 1:02d}.11")


def upgradable_from(version: str) -> list[str]:
    """The majors a release of `version` upgrades in place from, newest first (its own
    first: a maintenance release)."""
    m = major(version)
    back = 3 if tuple(int(x) for x in m.split(".")) >= (24, 11) else 2
    out = [m]
    while len(out) <= back and (prev := _before(out[-1])) is not None:
        out.append(prev)
    return out


def own_packages(packages: dict[str, str], debian_version: str) -> list[str]:
    """The names in a package set that are the release's own (its Debian version): those the
    window applies to (munge, PMIx, MariaDB move by their own rules)."""
    return sorted(n for n, v in packages.items() if v == debian_version)


class SlurmPackagesProvider(PackageSetProvider):
    """A PackageSet whose `upgrade_from` packages (the release's own) move only from a major
    their wanted version upgrades from; the state holds their names, the rule lives here."""

    kind = "PackageSet"  # the resource's kind in errors and the command log

    def refused_upgrade(self, props: Props, installed: dict[str, Optional[str]]) -> Optional[str]:
        want = props["packages"]
        names = [n for n in props.get("upgrade_from") or [] if n in want]
        if not names:
            return None
        ok = upgradable_from(want[names[0]])
        bad = [f"{n} {installed[n]}" for n in names
               if installed.get(n) and installed[n] != want[n] and major(installed[n]) not in ok]
        if not bad:
            return None
        older = ok[1:]
        froms = ", ".join(older[:-1]) + f" or {older[-1]}" if len(older) > 1 else "".join(older) or "nothing older"
        return (f"installed {', '.join(bad)}, the stack's {want[names[0]]}: Slurm {ok[0]} upgrades in place "
                f"only from {froms} (SchedMD's upgrade guide); from further back its daemons lose or refuse "
                f"the state the old ones saved. Move the host to {older[-1] if older else ok[0]} or a later "
                "one of those first, or remove Slurm from it")
