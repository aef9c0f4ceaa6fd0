"""Which installed Slurm a release replaces in place (components/layers/slurm/upgrades.py): the
window from SchedMD's upgrade guide, and the PackageSet refusing a jump outside it in preview
(from the recorded versions) and at apply (from the host's), with nothing planned."""

from __future__ import annotations

import pytest

from components.layers.slurm.upgrades import SlurmPackagesProvider, major, upgradable_from
from components.providers.parts import PlanRefused
from components.providers.packages import PackageSetProvider, parse_package_probe

CONN = {"name": "node1", "address": "10.0.0.1"}
OLD = "22.05.8-4+deb12u3"
NEW = "24.11.5-4+deb13u1~bookworm1"


def props(version: str = NEW) -> dict:
    return {"conn": CONN, "packages": {"slurmd": version, "slurm-client": version, "munge": "0.5.15-2"},
            "hold": True, "upgrade_from": ["slurm-client", "slurmd"]}


@pytest.mark.parametrize("version, majors", [
    ("22.05.8", ["22.05", "21.08", "20.11"]),           # two back, the nine-month cycle
    ("23.11.10-1", ["23.11", "23.02", "22.05"]),
    ("24.05.1", ["24.05", "23.11", "23.02"]),
    ("24.11.5-4+deb13u1~bookworm1", ["24.11", "24.05", "23.11", "23.02"]),  # three back from 24.11
    ("25.05.0", ["25.05", "24.11", "24.05", "23.11"]),
    ("1:25.11.2-1", ["25.11", "25.05", "24.11", "24.05"]),
    ("26.05.0", ["26.05", "25.11", "25.05", "24.11"]),  # the six-month cycle, past the table
])
def test_the_window_is_schedmds(version, majors):
    assert upgradable_from(version) == majors


def test_major_of_a_debian_version():
    assert major(OLD) == "22.05" and major("1:24.11.5-4+deb13u1~bookworm1") == "24.11"


def host(installed: dict[str, str]) -> dict:
    lines = "".join(f"{n} {v} ii \n" for n, v in installed.items())
    return parse_package_probe(f"== installed\n{lines}== dpkg-updates\n")


def test_a_jump_past_the_window_is_refused_at_apply_naming_host_versions_and_the_way_on():
    with pytest.raises(PlanRefused) as e:
        SlurmPackagesProvider().plan(props(), host({"slurmd": OLD, "slurm-client": OLD, "munge": "0.5.15-2"}), {})
    msg = str(e.value)
    assert msg.startswith(f"host node1: installed slurm-client {OLD}, slurmd {OLD}, the stack's {NEW}")
    assert "Slurm 24.11 upgrades in place only from 24.05, 23.11 or 23.02" in msg
    assert "Move the host to 23.02 or a later one of those first, or remove Slurm from it" in msg


@pytest.mark.parametrize("installed", [
    {},                                                    # a fresh host
    {"slurmd": "23.02.7-1", "slurm-client": "23.02.7-1"},  # inside the window
    {"slurmd": "24.11.1-1", "slurm-client": "24.11.1-1"},  # a maintenance release
    {"slurmd": NEW, "slurm-client": NEW},                  # nothing to move
])
def test_a_move_inside_the_window_is_planned(installed):
    steps = SlurmPackagesProvider().plan(props(), host(installed), {})
    assert steps and all(s.argv for s in steps)


def test_only_the_named_packages_are_judged():
    p = {**props(), "upgrade_from": ["slurmd"]}
    steps = SlurmPackagesProvider().plan(p, host({"slurmd": "24.05.1-1", "munge": "0.4.0-1"}), {})
    assert any("munge=0.5.15-2" in s.argv for s in steps)


def test_preview_refuses_from_the_recorded_versions_without_the_host():
    olds = {**props(OLD), "versions": {"munge": "0.5.15-2", "slurm-client": OLD, "slurmd": OLD}, "held": []}
    with pytest.raises(Exception, match="host node1: installed slurm-client 22.05.8-4"):
        SlurmPackagesProvider().diff("node1:packages", olds, props())
    ok = {**props("24.05.1-1"), "versions": {"slurm-client": "24.05.1-1", "slurmd": "24.05.1-1"}, "held": []}
    assert SlurmPackagesProvider().diff("node1:packages", ok, props()).changes is True


def test_a_set_without_the_rule_moves_anything():
    plain = PackageSetProvider().plan(props(), host({"slurmd": OLD, "slurm-client": OLD}), {})
    assert any(f"slurmd={NEW}" in s.argv for s in plain)


def test_the_slurm_sets_are_package_sets_in_errors_and_the_command_log():
    from components.providers.parts import kind_of
    assert kind_of(SlurmPackagesProvider()) == kind_of(PackageSetProvider()) == "PackageSet"


# ---- UpgradeWindow: the fleet checked before the release is published ----------------------
# The host boundary is a double here (the package sets' probe, one SSH command each); the lab test
# (test_slurm_cluster: `up --skip-preview`) reads real hosts.

def window(version: str = NEW, names=("ctl", "node1", "node2")) -> dict:
    sets = {"controller": {"packages": {"slurmctld": version, "slurm-client": version},
                           "upgrade_from": ["slurm-client", "slurmctld"]},
            "node": {"packages": {"slurmd": version, "slurm-client": version}, "upgrade_from": ["slurm-client", "slurmd"]}}
    return {"version": version, "sets": sets, "max_parallel": 4, "checked": None,
            "hosts": [{"conn": {"name": n, "address": f"10.0.0.{i + 1}"}, "set": "controller" if n == "ctl" else "node"}
                      for i, n in enumerate(names)]}


@pytest.fixture
def hosts(monkeypatch):
    """name -> installed versions (or an exception: the host cannot be read); records who was read."""
    from components.layers.slurm import upgrades
    have: dict = {}
    read: list[str] = []

    def probe(self, conn, props, refresh=False):
        read.append(conn.t.name)
        got = have.get(conn.t.name, {})
        if isinstance(got, Exception):
            raise got
        return host(got)
    monkeypatch.setattr(upgrades.SlurmPackagesProvider, "probe", probe)
    return have, read


def test_the_window_refuses_naming_every_host_outside_it_and_skips_one_it_cannot_read(hosts):
    from components.layers.slurm.upgrades import UpgradeWindowProvider
    from components.transport import HostUnreachable
    have, read = hosts
    have.update({"ctl": {"slurmctld": OLD, "slurm-client": OLD}, "node1": {"slurmd": "24.05.1-1"},
                 "node2": {"slurmd": OLD}, "node3": HostUnreachable("node3", "sh -c ...", 255, "", "cannot reach 10.0.0.4:22 over SSH")})
    olds = {"version": OLD, "checked": ["ctl", "node1", "node2", "node3"]}
    with pytest.raises(Exception) as e:
        UpgradeWindowProvider().update("w", olds, window(names=("ctl", "node1", "node2", "node3")))
    msg = str(e.value)
    assert msg.startswith(f"Slurm upgrade window: 2 host(s) cannot take release {NEW} in place; "
                          "nothing was published or installed:\n")
    assert f"  - host ctl: installed slurm-client {OLD}, slurmctld {OLD}, the stack's {NEW}" in msg
    assert f"  - host node2: installed slurmd {OLD}" in msg and "node1" not in msg and "node3" not in msg
    assert msg.index("host ctl") < msg.index("host node2")
    assert sorted(read) == ["ctl", "node1", "node2", "node3"]


def test_a_fleet_inside_the_window_is_recorded_as_checked(hosts):
    from components.layers.slurm.upgrades import UpgradeWindowProvider
    have, read = hosts
    have.update({"ctl": {"slurmctld": "24.05.1-1"}, "node1": {}, "node2": {"slurmd": NEW}})
    out = UpgradeWindowProvider().update("w", {"version": "24.05.1-1", "checked": ["ctl", "node1", "node2"]},
                                         window()).outs
    assert out == {"version": NEW, "checked": ["ctl", "node1", "node2"]} and sorted(read) == ["ctl", "node1", "node2"]


def test_created_the_window_records_the_release_and_reads_no_host(hosts):
    """A first converge: each host's package set probes it before installing anything; the
    window read before the publication would hold the whole rollout back (bench/README)."""
    from components.layers.slurm.upgrades import UpgradeWindowProvider
    have, read = hosts
    have.update({"node1": {"slurmd": OLD}})
    assert UpgradeWindowProvider().create(window()).outs == {"version": NEW, "checked": ["ctl", "node1", "node2"]}
    assert read == []


def test_the_window_reads_hosts_again_only_for_a_new_release_or_a_new_host(hosts):
    from components.layers.slurm.upgrades import UpgradeWindowProvider
    _, read = hosts
    p = UpgradeWindowProvider()
    olds = {**window(), "checked": ["ctl", "node1", "node2"]}
    assert p.diff("w", olds, window()).changes is False                          # a no-op: no host read
    assert p.diff("w", olds, window(names=("ctl", "node1"))).changes is False    # a host gone
    assert p.diff("w", olds, window(names=("ctl", "node1", "node2", "node3"))).changes is True
    assert p.diff("w", olds, window("24.11.6-1")).changes is True
    p.update("w", olds, window(names=("ctl", "node1", "node2", "node3")))
    assert read == ["node3"]
    read.clear()
    p.update("w", olds, window("24.11.6-1"))
    assert sorted(read) == ["ctl", "node1", "node2"]


def test_the_engines_check_passes_the_windows_inputs_through():
    """The engine calls `check(olds, news)` first; the provider must not shadow it."""
    from components.layers.slurm.upgrades import UpgradeWindowProvider
    assert UpgradeWindowProvider().check({}, window()).inputs == window()
