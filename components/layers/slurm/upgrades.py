"""Which installed Slurm a release may replace in place (SchedMD's upgrade guide).

A slurmctld, slurmd or slurmdbd reads the state an older one saved only from a few major
releases back: the previous two, and since 24.11 the previous three. From further back the
state is lost, or the daemon refuses to start (the lab's 24.11 on 22.05's StateSaveLocation:
`fatal: Can not recover assoc_usage state, incompatible version`). The layer hands the
rule to each host's PackageSet (`SlurmPackagesProvider`), which refuses the jump at
`pulumi preview` (from the versions the state recorded) and again at apply (from what the
host has), before anything is installed.

`UpgradeWindow` applies the same rule once for the fleet, before a new release is published:
`pulumi up --skip-preview` steps resources without a preview, and the publication on the
storage host and every host's apt source come before the package sets. When the release
changes (and for hosts the stack adds) it reads each Slurm host's packages, read-only, and
refuses the release naming every host out of the window, so nothing is published or
repointed. A host it cannot reach is left to its own package set (whose probe fails first).
Created, it records the release and reads nothing: read before the publication on a first
converge it held the lab's 12-node run back 1.4 s (bench/README, session 17), and a host
that already holds a Slurm then is refused by its package set's probe, before any install.
"""

from __future__ import annotations

from typing import Optional

from pulumi.dynamic import CreateResult, DiffResult, Resource, ResourceProvider, UpdateResult

from ...providers.parts import PlanRefused, Props, _entry
from ...providers.packages import PackageSetProvider
from ...transport import HostError, SshTarget, fan_out

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
        bad = [f"{n} {have}" for n in names
               if (have := installed.get(n)) and have != want[n] and major(have) not in ok]
        if not bad:
            return None
        older = ok[1:]
        froms = ", ".join(older[:-1]) + f" or {older[-1]}" if len(older) > 1 else "".join(older) or "nothing older"
        return (f"installed {', '.join(bad)}, the stack's {want[names[0]]}: Slurm {ok[0]} upgrades in place "
                f"only from {froms} (SchedMD's upgrade guide); from further back its daemons lose or refuse "
                f"the state the old ones saved. Move the host to {older[-1] if older else ok[0]} or a later "
                "one of those first, or remove Slurm from it")


class UpgradeWindowProvider(ResourceProvider):
    """Reads the Slurm hosts' packages (read-only) when the release changes, or for hosts the
    stack adds, and refuses a release any of them cannot upgrade to in place; created, it
    records the release (the package sets' own probes judge a first converge)."""

    serialize_as_secret_always = False  # no secret captured (components/providers/base.py)

    def read_hosts(self, props: Props, names: list[str]) -> Props:
        hosts = {h["conn"]["name"]: h for h in props["hosts"] if h["conn"]["name"] in names}
        rule = SlurmPackagesProvider()

        def refusal(conn) -> Optional[str]:
            pkgs = props["sets"][hosts[conn.t.name]["set"]]
            try:
                installed = rule.probe(conn, pkgs)["installed"]  # the package sets' own read
            except HostError:
                return None  # its own package set's probe reports the host
            return rule.refused_upgrade(pkgs, installed)

        targets = [SshTarget.from_dict(h["conn"]) for h in hosts.values()]
        found = {n: why for n, why in fan_out(targets, refusal, props.get("max_parallel") or 16).items() if why}
        if found:
            raise PlanRefused(
                f"Slurm upgrade window: {len(found)} host(s) cannot take release {props['version']} in place; "
                "nothing was published or installed:\n"
                + "\n".join(f"  - host {n}: {found[n]}" for n in sorted(found)))
        return {"version": props["version"], "checked": sorted(h["conn"]["name"] for h in props["hosts"])}

    @_entry
    def create(self, props: Props) -> CreateResult:
        return CreateResult(id_="slurm-upgrade-window", outs=self.read_hosts(props, []))

    @_entry
    def diff(self, _id: str, olds: Props, news: Props) -> DiffResult:
        return DiffResult(changes=bool(_to_read(olds, news)), replaces=[], stables=[],
                          delete_before_replace=False)

    @_entry
    def update(self, _id: str, olds: Props, news: Props) -> UpdateResult:
        return UpdateResult(outs=self.read_hosts(news, _to_read(olds, news)))

    def delete(self, _id: str, props: Props) -> None:
        return None  # reading changed nothing


def _to_read(olds: Props, news: Props) -> list[str]:
    """Every host for a new release; else those the last check did not see (added since)."""
    names = [h["conn"]["name"] for h in news["hosts"]]
    if olds.get("version") != news["version"]:
        return names
    seen = set(olds.get("checked") or [])
    return [n for n in names if n not in seen]


class UpgradeWindow(Resource, module="slurm", name="UpgradeWindow"):
    """The fleet's Slurm hosts checked against the release's upgrade window, before it is published."""

    def __init__(self, name: str, *, version: str, sets: dict[str, dict], hosts: list[dict],
                 max_parallel: int = 16, opts=None):
        """`sets`: a package set's `packages` and `upgrade_from` by role; `hosts`: {conn, set}
        for each Slurm host (a role each: O(1) state a host)."""
        super().__init__(UpgradeWindowProvider(), name, {
            "version": version, "sets": sets, "hosts": hosts, "max_parallel": max_parallel,
            "checked": None}, opts)
