"""PackageSet: exact package versions installed with apt and held.

The seed's lesson: every host must run the same binaries, and a routine
system update must not slip another Slurm in. So versions are exact
(`name=version`), held with `apt-mark hold`, and a version lower than what is
installed is refused unless `allow_downgrade` says so. Create records every
package the install added (dependencies too); delete purges exactly those,
after an apt simulation proves nothing else would go with them. With
`start_services=False` the packages' own scripts start no service that is not
running (scripts/packages_no_start.sh): the layer's SystemdUnits start them once
their config is in place.
"""

from __future__ import annotations

import re
import threading
from typing import Any, Optional

import pulumi
from debian.debian_support import version_compare
from pulumi.dynamic import DiffResult, Resource

from ..facts import shell
from ..facts.dpkg import parse_dpkg_status
from ..scripts import script
from ..kit import sh
from .base import HostPrimitive
from .parts import Observed, PlanRefused, Props, Step, _entry, target_of

APT_ENV = ["env", "DEBIAN_FRONTEND=noninteractive", "NEEDRESTART_MODE=a"]
#: apt waits for another apt on the same host (two package sets of two layers) instead of failing
APT_LOCK_WAIT = ["-o", "DPkg::Lock::Timeout=300"]
APT_OPTS = ["-y", "-q", *APT_LOCK_WAIT, "-o", "Dpkg::Options::=--force-confdef",
            "-o", "Dpkg::Options::=--force-confold"]

_PROBE = shell("dpkg") + script(__file__, "packages_probe.sh")
_NO_START = script(__file__, "packages_no_start.sh")
#: the line packages_no_start.sh marks its policy-rc.d with (it removes the file when the
#: install ends; a host that lost power meanwhile keeps it: refresh reports it, up removes it)
POLICY_RC = "/usr/sbin/policy-rc.d"
_MARK = re.search(r'^mark="(.+)"$', _NO_START, re.M)
assert _MARK is not None, "packages_no_start.sh sets mark=\"...\""
POLICY_MARK = _MARK.group(1)


def parse_package_probe(stdout: str) -> Observed:
    """{'installed': {name: version} (status i or h, then i, W or t: configured, or installed with
    triggers awaited or pending), 'held': set(names): dpkg's selection
    is hold (status h.), as `apt-mark hold` sets it, 'interrupted': dpkg has journal entries an
    interrupted run left (it refuses to install until configured), 'leftover': the no-start
    policy an interrupted install left (every later install on the host starts no service)}."""
    dpkg: list[str] = []
    interrupted = leftover = False
    section = None
    for line in stdout.splitlines():
        if line.startswith("== "):
            section = line[3:].strip()
        elif section == "installed":
            dpkg.append(line)
        elif section == "dpkg-updates" and line.split():
            interrupted = True
        elif section == "policy-rc.d" and line == POLICY_MARK:
            leftover = True
    status = parse_dpkg_status("\n".join(dpkg))
    return {"installed": status.installed, "held": status.held, "interrupted": interrupted, "leftover": leftover}



def parse_apt_simulation(stdout: str) -> set[str]:
    """Names apt would remove ('Remv x [..]' / 'Purg x [..]' lines of `apt-get -s`)."""
    out = set()
    for line in stdout.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] in ("Remv", "Purg"):
            out.add(parts[1].split(":")[0])
    return out


#: one package operation per host at a time in this provider process (which serves every
#: dynamic resource of a deployment): a set records what its install added as the packages
#: that appeared meanwhile, so another layer's set installing on the same host at the same
#: time would be counted in (and purged on its rollback)
_HOST_LOCKS: dict[str, threading.Lock] = {}
_HOST_LOCKS_GUARD = threading.Lock()


def host_lock(host: str) -> threading.Lock:
    with _HOST_LOCKS_GUARD:
        return _HOST_LOCKS.setdefault(host, threading.Lock())


class PackageSetProvider(HostPrimitive):
    record_keys = ("added", "held_before")

    def key(self, props: Props) -> str:
        return "packages:" + ",".join(sorted(props["packages"]))

    def probe_argv(self, props: Props) -> list[str]:
        return sh(_PROBE)

    def parse(self, props: Props, stdout: str) -> Observed:
        return parse_package_probe(stdout)

    @staticmethod
    def no_start(props: Props) -> bool:
        """The set installs under packages_no_start.sh's policy (start_services=False)."""
        return not props.get("start_services", True)

    def desired(self, props: Props) -> dict[str, Any]:
        names = sorted(props["packages"])
        quiet = {"leftover": None} if self.no_start(props) else {}
        return {"versions": {n: props["packages"][n] for n in names},
                "held": names if props.get("hold", True) else [], **quiet}

    def state(self, props: Props, obs: Observed) -> dict[str, Any]:
        """What the host has; for a set that installs under the no-start policy, also that
        policy when an interrupted install left it (drift)."""
        names = sorted(props["packages"])
        quiet = {"leftover": POLICY_RC if obs.get("leftover") else None} if self.no_start(props) else {}
        return {"versions": {n: obs["installed"].get(n) for n in names},
                "held": sorted(n for n in names if n in obs["held"]), **quiet}

    def refused_upgrade(self, props: Props, installed: dict[str, Optional[str]]) -> Optional[str]:
        """Why the set will not move its packages from what is installed (None: it may): a
        layer's rule for a jump its software does not support in place (layers/slurm/upgrades.py)."""
        return None

    def _refuse_upgrade(self, props: Props, installed: dict[str, Optional[str]]) -> None:
        why = self.refused_upgrade(props, installed)
        if why:
            raise PlanRefused(f"host {target_of(props).name}: {why}")

    @_entry
    def diff(self, _id: str, olds: Props, news: Props) -> DiffResult:
        """A jump the software does not support is refused in preview, from the versions the
        state recorded, before anything (the new release's publication included) is done."""
        self._refuse_upgrade(news, olds.get("versions") or {})
        return super().diff(_id, olds, news)

    def plan(self, props: Props, obs: Observed, record: Props) -> list[Step]:
        want = props["packages"]
        hold = props.get("hold", True)
        self._refuse_upgrade(props, obs["installed"])
        change = {}
        for name, version in sorted(want.items()):
            have = obs["installed"].get(name)
            if have == version:
                continue
            if have is not None and version_compare(have, version) > 0 and not props.get("allow_downgrade"):
                raise PlanRefused(
                    f"package {name}: installed {have} is newer than the stack's {version}; "
                    "refusing to downgrade silently (set allow_downgrade to do it on purpose)"
                )
            change[name] = version
        steps: list[Step] = []
        # a package's scripts start no service the layer has not started yet (its config is
        # not there): packages_no_start.sh; an upgrade still restarts what is running
        quiet = sh(_NO_START) if self.no_start(props) else []
        if quiet and obs.get("leftover"):
            steps.append(Step(["rm", "-f", "--", POLICY_RC], "remove the no-start policy an interrupted install "
                              "left (under it, no package on the host starts a service)"))
        if change and obs.get("interrupted"):
            # a run killed mid-install (the host lost power, its sshd went with the session):
            # dpkg refuses every install until the half-done one is configured
            steps.append(Step([*quiet, *APT_ENV, "dpkg", "--configure", "-a"],
                              "finish the package operation an interrupted run left"))
        if change:
            held_changing = sorted(n for n in change if n in obs["held"])
            if held_changing:
                steps.append(Step(["apt-mark", "unhold", *held_changing], "release the hold to change versions"))
            steps.append(Step([*APT_ENV, "apt-get", "-q", *APT_LOCK_WAIT, "update"], "refresh package lists"))
            args = [f"{n}={v}" for n, v in sorted(change.items())]
            extra = ["--allow-downgrades"] if props.get("allow_downgrade") else []
            steps.append(Step([*quiet, *APT_ENV, "apt-get", "install", *APT_OPTS, "--no-install-recommends",
                               *extra, *args], "install exact versions"
                              + (", starting no service that is not running" if quiet else "")))
        names = sorted(want)
        to_hold = [n for n in names if hold and (n not in obs["held"] or n in change)]
        to_unhold = [n for n in names if not hold and n in obs["held"]]
        if to_hold:
            steps.append(Step(["apt-mark", "hold", *to_hold], "hold the exact versions"))
        if to_unhold:
            steps.append(Step(["apt-mark", "unhold", *to_unhold], "release holds"))
        return steps

    def apply(self, props: Props, record: Props) -> Props:
        with host_lock(target_of(props).name):
            return super().apply(props, record)

    def complete_record(self, props: Props, observed: Observed, record: Props) -> Props:
        """What an update kept; on the first create, the holds already there (they stay on
        destroy)."""
        held_before = record.get("held_before")
        if held_before is None:
            held_before = sorted(n for n in props["packages"] if n in observed["held"])
        return {"added": sorted(record.get("added") or []), "held_before": held_before}

    def kept_record(self, props: Props, before: Observed, record: Props) -> Props:
        """On the host also every package installed before: what a killed install added is the
        difference, whoever finishes it (never in the state: hundreds of names a node)."""
        return {**record, "installed_before": sorted(before["installed"])}

    def recover(self, props: Props, kept_: Props, before: Observed) -> tuple[Props, Observed]:
        found = {**before, "installed": dict.fromkeys(kept_.get("installed_before") or [], "")}
        return {k: kept_[k] for k in self.record_keys if k in kept_}, found

    def applied(self, props: Props, record: Props, before: Observed, after: Observed,
                ran: list[Step]) -> Props:
        """Record every package the install added (dependencies included): rollback purges
        those and nothing else."""
        added = set(record["added"]) | (set(after["installed"]) - set(before["installed"]))
        return {**self.outputs(props, record, after), "added": sorted(added)}

    def plan_delete(self, props: Props, obs: Observed) -> list[Step]:
        added = [n for n in props.get("added", []) if n in obs["installed"]]
        keep = set(props.get("held_before") or [])
        held = sorted(n for n in props["packages"] if n in obs["held"] and n not in keep)
        steps = []
        if held:
            steps.append(Step(["apt-mark", "unhold", *held], "release holds"))
        if added:
            steps.append(Step([*APT_ENV, "apt-get", "purge", *APT_OPTS, *added],
                              "purge what this set installed"))
        return steps

    @_entry
    def delete(self, _id: str, props: Props) -> None:
        with host_lock(target_of(props).name):
            self._delete(props)

    def _delete(self, props: Props) -> None:
        conn = self._conn(props)
        obs, _, there = self.probe_kept(conn, props)
        added = [n for n in props.get("added", []) if n in obs["installed"]]
        if added:  # read-only proof that the purge takes nothing else with it
            sim = conn.run([*APT_ENV, "apt-get", "-s", "purge", *added], mutating=False)
            extra = sorted(parse_apt_simulation(sim.stdout) - set(added))
            if extra:
                raise PlanRefused(
                    f"host {conn.t.name}: purging {', '.join(added)} would also remove "
                    f"{', '.join(extra)}, which this package set did not install; refusing"
                )
        for step in [*self.plan_delete(props, obs), *self.forget_steps(props, there)]:
            conn.run(step.argv, mutating=True)


class PackageSet(Resource, module="host", name="PackageSet"):
    """Exact package versions on one host, held against upgrades.

    `start_services=False`: the install starts no service that is not running (an upgrade
    restarts those that are); for a layer whose SystemdUnits start its daemons after their
    config. How an install runs, not what it leaves: not part of the diff.

    `provider`: a layer's PackageSetProvider with its `refused_upgrade` rule, and
    `upgrade_from` the packages that rule reads: a jump it refuses stops the preview and the
    apply, nothing installed."""

    versions: pulumi.Output[dict]
    added: pulumi.Output[list]

    def __init__(self, name: str, *, conn: dict, packages: dict[str, str], hold: bool = True,
                 allow_downgrade: bool = False, start_services: bool = True,
                 upgrade_from: Optional[list[str]] = None, provider: Optional[PackageSetProvider] = None,
                 opts: Optional[pulumi.ResourceOptions] = None):
        # recorded only when off: the default leaves a stack's state as it was
        how: dict[str, object] = {} if start_services else {"start_services": False}
        if upgrade_from:
            how["upgrade_from"] = upgrade_from
        super().__init__(
            provider or PackageSetProvider(), name,
            {"conn": conn, "packages": packages, "hold": hold, "allow_downgrade": allow_downgrade,
             **how, "versions": None, "held": None, "added": None},
            opts,
        )
