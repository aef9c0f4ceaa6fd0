"""Pure parsers and planners of the host primitives: plan, then re-plan on the result."""

from __future__ import annotations

import pytest

from components.providers.account import AccountProvider, parse_account_probe
from components.providers.parts import PlanRefused
from components.providers.command import CommandWithVerifyProvider
from components.providers.file import FileProvider, backup_path, sha256_text
from components.providers.packages import (
    _NO_START, POLICY_MARK, PackageSetProvider, parse_apt_simulation, parse_package_probe,
)
from components.providers.systemd import BY_TIMER, SystemdUnitProvider, parse_unit_probe

CONN = {"name": "node1", "address": "10.0.0.1"}


# ---- File ----------------------------------------------------------------------
def fprops(**kw):
    return {"conn": CONN, "path": "/etc/x.conf", "content": "a=1\n", "mode": "0640",
            "owner": "root", "group": "slurm", **kw}


def fobs(kind="file", content="a=1\n", mode="640", owner="root", group="slurm", backup=False):
    o = {"kind": kind, "backup": backup}
    if kind == "file":
        o.update(mode=mode, owner=owner, group=group, sha256=sha256_text(content))
    return o


def test_file_absent_is_written_atomically_with_mode():
    [step] = FileProvider().plan(fprops(), fobs("absent"), {"original": "absent"})
    assert step.stdin == b"a=1\n"
    assert step.argv[-4:] == ["/etc/x.conf", "root", "slurm", "640"]
    assert "mktemp" in step.argv[2] and "mv -f" in step.argv[2]


def test_file_in_sync_plans_nothing():
    assert FileProvider().plan(fprops(), fobs(), {"original": "absent"}) == []


def test_file_mode_drift_only_chmods():
    [step] = FileProvider().plan(fprops(), fobs(mode="644"), {})
    assert list(step.argv) == ["chmod", "--", "640", "/etc/x.conf"]


def test_file_existing_original_is_backed_up_then_restored():
    p = FileProvider()
    record = p.remember(fprops(), fobs(content="old\n"))
    assert record == {"original": "backup", "made_parent": False, "original_sha256": sha256_text("old\n")}
    steps = p.plan(fprops(), fobs(content="old\n"), record)
    assert [s.why.split()[0] for s in steps] == ["keep", "write"]
    assert backup_path("/etc/x.conf") in steps[0].argv
    [undo] = p.plan_delete({**fprops(), **record}, fobs(backup=True))
    assert list(undo.argv) == ["mv", "-f", "--", backup_path("/etc/x.conf"), "/etc/x.conf"]


def test_file_delete_removes_only_what_it_created():
    p = FileProvider()
    assert [list(s.argv) for s in p.plan_delete({**fprops(), "original": "absent"}, fobs())] == [
        ["rm", "-f", "--", "/etc/x.conf"]]
    assert p.plan_delete({**fprops(), "original": "absent"}, fobs("absent")) == []
    steps = p.plan_delete({**fprops(), "original": "absent", "made_parent": True}, fobs())
    assert [s.why for s in steps] == ["remove /etc/x.conf", "remove the directory created for /etc/x.conf"]


def test_file_refuses_to_replace_a_directory():
    with pytest.raises(PlanRefused):
        FileProvider().plan(fprops(), fobs("other"), {})


def test_file_probe_parser():
    from components.providers.file import parse_file_probe
    obs = parse_file_probe("kind file\nmeta 600 munge munge\nsha256 abc\nbackup no\n")
    assert obs == {"kind": "file", "mode": "600", "owner": "munge", "group": "munge",
                   "sha256": "abc", "backup": False, "parent": True}


def test_file_outputs_never_carry_content():
    assert "content" not in FileProvider().public_inputs(fprops(content="s3cret"))


# ---- PackageSet ---------------------------------------------------------------
PROBE = """== installed
hello 2.10-3 ii
jq 1.6-2.1 hi
libc6:amd64 2.36-9 ii
old 1.0 rc
"""


def test_package_probe_parser():
    obs = parse_package_probe(PROBE)
    assert obs["installed"] == {"hello": "2.10-3", "jq": "1.6-2.1", "libc6": "2.36-9"}
    assert obs["held"] == {"jq"}


def test_package_probe_reads_holds_from_dpkg_status():
    """The probe asks dpkg alone: `apt-mark hold` sets the selection dpkg shows as the status's
    first letter (hi: held and installed; hn: held, not installed)."""
    obs = parse_package_probe("== installed\nhello 2.10-3 ii \njq 1.6-2.1 hi \ngone 1.0 hn \n"
                              "old 1.0 rc \n== dpkg-updates\n")
    assert obs == {"installed": {"hello": "2.10-3", "jq": "1.6-2.1"}, "held": {"jq", "gone"},
                   "interrupted": False, "leftover": False}
    assert PackageSetProvider().plan({"packages": {"jq": "1.6-2.1"}, "hold": True}, obs, {}) == []


def test_a_package_with_triggers_pending_is_installed_and_never_recorded_as_added():
    """CI: an interrupted dpkg run left libc-bin with its ldconfig trigger pending (status `it`);
    read as absent, the storage clients' install (which ran the trigger) recorded libc-bin as a
    package it added, and rollback tried to purge an essential package."""
    before = parse_package_probe("== installed\nlibc-bin 2.36-9 it \nlibc6 2.36-9 iW \n"
                                 "half 1.0 iU \nhalf2 1.0 iF \n== dpkg-updates\n")
    assert before["installed"] == {"libc-bin": "2.36-9", "libc6": "2.36-9"}
    after = parse_package_probe("== installed\nlibc-bin 2.36-9 ii \nlibc6 2.36-9 ii \nfuse 2.9 ii \n"
                                "half 1.0 ii \nhalf2 1.0 ii \n== dpkg-updates\n")
    added = PackageSetProvider().applied({"packages": {"fuse": "2.9"}}, {"added": []}, before, after, [])["added"]
    assert added == ["fuse", "half", "half2"]


def test_a_no_start_policy_an_interrupted_install_left_is_drift_and_up_removes_it():
    """The host lost power mid-install: packages_no_start.sh's policy-rc.d stays, and under it
    no later install on the host (an admin's, unattended-upgrades) starts a service. A set
    that installs under that policy records it on refresh and its next apply removes it; an
    admin's own policy-rc.d (another first lines) is not ours."""
    p = PackageSetProvider()
    props = {"conn": CONN, "packages": {"jq": "1.6-2.1"}, "hold": True, "start_services": False}
    ours = parse_package_probe(f"== installed\njq 1.6-2.1 hi \n== dpkg-updates\n== policy-rc.d\n#!/bin/sh\n{POLICY_MARK}\n")
    admins = parse_package_probe("== installed\njq 1.6-2.1 hi \n== dpkg-updates\n== policy-rc.d\n#!/bin/sh\nexit 101\n")
    assert ours["leftover"] is True and admins["leftover"] is False
    assert p.state(props, ours)["leftover"] == "/usr/sbin/policy-rc.d" and p.state(props, admins)["leftover"] is None
    assert [list(s.argv) for s in p.plan(props, ours, {})] == [["rm", "-f", "--", "/usr/sbin/policy-rc.d"]]
    assert p.plan(props, admins, {}) == []
    # a set that installs without the policy leaves it to the set that used it
    plain = {**props, "start_services": True}
    assert p.plan(plain, ours, {}) == [] and "leftover" not in p.state(plain, ours)
    # the diff: drift exactly when a refresh recorded the leftover
    clean = {**props, **p.state(props, admins)}
    assert p.diff("node1:packages:jq", clean, props).changes is False
    assert p.diff("node1:packages:jq", {**props, **p.state(props, ours)}, props).changes is True


@pytest.mark.parametrize("policy", ["/usr/sbin/policy-rc.d", "/nonexistent/policy-rc.d"])
def test_the_package_probe_succeeds_with_or_without_a_policy_rc_d(policy):
    """The probe runs on this machine (a policy-rc.d that is not ours, and none at the path):
    its exit code is its success, and a read that fails stops the rollout."""
    import subprocess
    argv = PackageSetProvider().probe_argv({"packages": {}})
    script = argv[2].replace("/usr/sbin/policy-rc.d", policy)
    res = subprocess.run([*argv[:2], script, *argv[3:]], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    obs = parse_package_probe(res.stdout)
    assert "dpkg" in obs["installed"] and obs["leftover"] is False


def test_the_policy_mark_is_the_one_the_no_start_script_writes():
    assert POLICY_MARK.startswith("# gpu-fleet:") and f'mark="{POLICY_MARK}"' in _NO_START


def test_the_package_probe_script_holds_no_apt_mark():
    """`apt-mark showhold` loads apt's whole cache (0.37 s of CPU on the development machine)
    to print what dpkg-query already says."""
    argv = PackageSetProvider().probe_argv({"packages": {}})
    assert "dpkg-query" in argv[2] and "apt-mark" not in argv[2]


def test_packages_in_sync_only_hold_missing():
    p = PackageSetProvider()
    obs = parse_package_probe(PROBE)
    steps = p.plan({"packages": {"hello": "2.10-3", "jq": "1.6-2.1"}, "hold": True}, obs, {})
    assert [list(s.argv) for s in steps] == [["apt-mark", "hold", "hello"]]
    obs["held"].add("hello")
    assert p.plan({"packages": {"hello": "2.10-3", "jq": "1.6-2.1"}, "hold": True}, obs, {}) == []


def test_packages_install_exact_versions():
    p = PackageSetProvider()
    steps = p.plan({"packages": {"tree": "2.1.0-1"}, "hold": True}, parse_package_probe(PROBE), {})
    install = [s for s in steps if "install" in s.argv][0]
    assert "tree=2.1.0-1" in install.argv and "--no-install-recommends" in install.argv
    assert list(steps[-1].argv) == ["apt-mark", "hold", "tree"]


def test_an_interrupted_dpkg_is_configured_before_installing():
    """A run killed mid-install leaves dpkg's journal: apt refuses ('dpkg was interrupted, you
    must manually run dpkg --configure -a') until it is finished."""
    p = PackageSetProvider()
    obs = parse_package_probe(PROBE + "== dpkg-updates\n0001\n")
    assert obs["interrupted"] is True
    steps = p.plan({"packages": {"tree": "2.1.0-1"}, "hold": True}, obs, {})
    assert list(steps[0].argv)[-3:] == ["dpkg", "--configure", "-a"]
    assert any("install" in s.argv for s in steps[1:])
    # nothing to install: the journal is nobody's business here
    assert p.plan({"packages": {"hello": "2.10-3"}, "hold": False}, obs, {}) == []
    assert parse_package_probe(PROBE + "== dpkg-updates\n")["interrupted"] is False


def test_packages_refuse_silent_downgrade():
    with pytest.raises(PlanRefused, match="refusing to downgrade"):
        PackageSetProvider().plan({"packages": {"jq": "1.5-1"}}, parse_package_probe(PROBE), {})
    steps = PackageSetProvider().plan({"packages": {"jq": "1.5-1"}, "allow_downgrade": True},
                                      parse_package_probe(PROBE), {})
    assert list(steps[0].argv) == ["apt-mark", "unhold", "jq"]
    assert any("--allow-downgrades" in s.argv for s in steps)


def test_apt_simulation_parser():
    sim = "Purg hello [2.10-3]\nRemv libfoo:amd64 [1]\nInst x\n"
    assert parse_apt_simulation(sim) == {"hello", "libfoo"}


# ---- SystemdUnit --------------------------------------------------------------
UNIT = {"conn": CONN, "name": "demo.service", "content": "[Service]\nExecStart=/bin/sleep 1d\n",
        "dropins": {"10-delegate.conf": "[Service]\nDelegate=yes\n"}, "enabled": True,
        "active": True, "properties": {"Delegate": "yes"}}
F1, F2 = "/etc/systemd/system/demo.service", "/etc/systemd/system/demo.service.d/10-delegate.conf"


def unit_obs(files_ok=True, active="active", enabled="enabled", reload="no", delegate="yes"):
    def file(path, text):  # as the probe prints it: sha256sum's line, or absent
        return f"sha256 {sha256_text(text)}  {path}" if files_ok else f"file {path} absent"

    lines = [file(F1, UNIT['content']), file(F2, UNIT['dropins']['10-delegate.conf']),
             "== show", "LoadState=loaded", f"ActiveState={active}", f"UnitFileState={enabled}",
             f"NeedDaemonReload={reload}", f"Delegate={delegate}"]
    return parse_unit_probe("\n".join(lines))


def test_unit_from_scratch():
    steps = SystemdUnitProvider().plan(UNIT, unit_obs(False, "inactive", "disabled"), {})
    whys = [s.why for s in steps]
    assert whys[:2] == ["write unit " + F1, "write unit " + F2]
    assert [list(s.argv) for s in steps[2:]] == [
        ["systemctl", "daemon-reload"], ["systemctl", "enable", "demo.service"],
        ["systemctl", "start", "demo.service"]]


def test_unit_in_sync_plans_nothing():
    assert SystemdUnitProvider().plan(UNIT, unit_obs(), {}) == []


def test_unit_reload_only_when_needed():
    steps = SystemdUnitProvider().plan(UNIT, unit_obs(reload="yes"), {})
    assert [list(s.argv) for s in steps] == [["systemctl", "daemon-reload"]]


def test_unit_stopped_by_hand_is_started_not_reloaded():
    steps = SystemdUnitProvider().plan(UNIT, unit_obs(active="inactive"), {})
    assert [list(s.argv) for s in steps] == [["systemctl", "start", "demo.service"]]


@pytest.mark.parametrize("active", ["inactive", "activating", "active", "failed"])
def test_a_timer_driven_oneshot_is_never_started_stopped_or_restarted(active):
    """SystemdUnit(active=None): whatever its timer is doing when the layer is applied, the unit
    converges, and new files are written and loaded without a start (a stop would race the timer)."""
    oneshot = {**UNIT, "active": BY_TIMER, "properties": {}}
    p = SystemdUnitProvider()
    assert p.plan(oneshot, unit_obs(active=active), {}) == []
    assert p.state(oneshot, unit_obs(active=active)) == p.desired(oneshot)
    steps = p.plan({**oneshot, "content": "[Service]\nType=oneshot\nExecStart=/bin/true\n"},
                   unit_obs(active=active), {})
    assert [s.argv[0] for s in steps] == ["sh", "systemctl"] and list(steps[1].argv) == ["systemctl", "daemon-reload"]
    # a unit that must be stopped still is
    assert [list(s.argv) for s in p.plan({**oneshot, "active": False}, unit_obs(active=active), {})] == \
        ([["systemctl", "stop", "demo.service"]] if active in ("activating", "active") else [])


def test_unit_live_property_mismatch_is_not_in_sync():
    steps = SystemdUnitProvider().plan(UNIT, unit_obs(delegate="no"), {})
    assert steps and "Delegate=no (want yes)" in steps[0].why


MOUNT = {"conn": CONN, "name": "mnt-data.mount", "content": "[Mount]\nWhat=s:/data\nWhere=/mnt/data\n",
         "enabled": True, "active": True}


def mount_obs(reach: str):
    from components.providers.file import sha256_text as sha
    return parse_unit_probe("\n".join([
        f"sha256 {sha(MOUNT['content'])}  /etc/systemd/system/mnt-data.mount", "== show", "LoadState=loaded",
        "ActiveState=active", "UnitFileState=enabled", "NeedDaemonReload=no", "== reach", reach]))


def test_an_active_mount_whose_root_is_stale_is_mounted_again():
    p = SystemdUnitProvider()
    assert p.plan(MOUNT, mount_obs("ok"), {}) == []
    stale = mount_obs("stat: cannot statx '/mnt/data/.': Stale file handle")
    assert p.state(MOUNT, stale)["active"] is False  # refresh records it as drift
    steps = p.plan(MOUNT, stale, {})
    assert [list(s.argv) for s in steps] == [["systemctl", "restart", "mnt-data.mount"]]
    assert "Stale file handle" in steps[0].why


def test_unit_delete_restores_previous_state():
    p = SystemdUnitProvider()
    steps = p.plan_delete({**UNIT, "was_enabled": False, "was_active": False}, unit_obs())
    assert [s.argv[1] if s.argv[0] == "systemctl" else s.argv[0] for s in steps] == [
        "stop", "disable", "rm", "sh", "daemon-reload"]


# ---- Account ------------------------------------------------------------------
ACC = {"conn": CONN, "name": "slurm", "uid": 64030, "gid": 64030, "home": "/nonexistent",
       "shell": "/usr/sbin/nologin"}


def test_account_created_with_fixed_ids():
    obs = parse_account_probe("== passwd\n== group\n", "slurm", 64030, 64030)
    steps = AccountProvider().plan(ACC, obs, {})
    assert list(steps[0].argv) == ["groupadd", "--system", "-g", "64030", "slurm"]
    assert steps[1].argv[:5] == ["useradd", "--system", "-u", "64030", "-g"]


def test_account_in_sync():
    obs = parse_account_probe(  # getent answers each key: the name's entry, then the id's
        "== passwd\nslurm:x:64030:64030:slurm:/nonexistent:/usr/sbin/nologin\n"
        "slurm:x:64030:64030:slurm:/nonexistent:/usr/sbin/nologin\n"
        "== group\nslurm:x:64030:\nslurm:x:64030:\n", "slurm", 64030, 64030)
    assert AccountProvider().plan(ACC, obs, {}) == []


def test_account_never_renumbers():
    obs = parse_account_probe(
        "== passwd\nslurm:x:999:999:slurm:/var/lib/slurm:/bin/false\nmunge:x:64030:64030::/:/bin/false\n"
        "== group\nslurm:x:999:\n", "slurm", 64030, 64030)
    with pytest.raises(PlanRefused) as e:
        AccountProvider().plan(ACC, obs, {})
    msg = str(e.value)
    assert "user slurm exists with uid 999, the stack fixes uid 64030" in msg
    assert "uid 64030 already belongs to user munge" in msg and "never renumbers" in msg


# ---- CommandWithVerify --------------------------------------------------------
def test_command_verify_parser():
    p = CommandWithVerifyProvider()
    assert p.parse({}, "some output\nverify-rc 0\n") == {"verified": True}
    assert p.parse({}, "verify-rc 3\n") == {"verified": False}
    props = {"create": ["touch", "/x"], "verify": ["test", "-e", "/x"]}
    assert p.plan(props, {"verified": True}, {}) == []
    assert [list(s.argv) for s in p.plan(props, {"verified": False}, {})] == [["touch", "/x"]]


def test_packages_delete_keeps_holds_that_were_there_before():
    obs = parse_package_probe(PROBE)
    props = {"packages": {"jq": "1.6-2.1", "hello": "2.10-3"}, "added": ["hello"], "held_before": ["jq"]}
    obs["held"].add("hello")
    steps = PackageSetProvider().plan_delete(props, obs)
    assert [list(s.argv)[:3] for s in steps] == [["apt-mark", "unhold", "hello"],
                                                  ["env", "DEBIAN_FRONTEND=noninteractive", "NEEDRESTART_MODE=a"]]


def test_a_package_apply_reads_the_host_once_each_side_and_records_what_it_added(monkeypatch):
    """What an install added (its dependencies too) is the difference between the read before
    and the read after: two reads of the host, not four, the second in the steps' own round
    trip. An update keeps what create recorded (the holds already there on the first create
    stay on destroy)."""
    from components.providers import base
    from components.transport import Result

    before, after = [parse_package_probe(PROBE)], [PROBE + "tree 2.1.0-1 hi\nlibtree0 1 ii\n"]
    ran: list[list[str]] = []
    trips: list[list] = []

    def run_steps(conn, steps, then=None):
        trips.append([list(s.argv) for s in steps] + [then])
        ran.extend(list(s.argv) for s in steps)
        return Result(0, after.pop(0), "")

    monkeypatch.setattr(PackageSetProvider, "_conn", lambda self, props: type("C", (), {"t": None})())
    monkeypatch.setattr(PackageSetProvider, "probe", lambda self, conn, props, refresh=False: before.pop(0))
    monkeypatch.setattr(PackageSetProvider, "probe_kept", lambda self, conn, props: (before.pop(0), None, False))
    monkeypatch.setattr(base, "run_steps", run_steps)
    props = {"conn": {"name": "node1", "address": "10.0.0.1"}, "packages": {"tree": "2.1.0-1", "jq": "1.6-2.1"},
             "hold": True}
    outs = PackageSetProvider().apply(props, {})
    assert before == [] and after == []  # both reads used, and no third
    assert len(trips) == 1 and trips[0][-1] == PackageSetProvider().probe_argv(props)  # the read rides along
    assert outs["added"] == ["libtree0", "tree"] and outs["held_before"] == ["jq"]
    # first in that round trip: the host keeps every package it had (providers/kept.py)
    assert trips[0][0][:2] == ["sh", "-c"] and ran[0] == trips[0][0]
    assert outs["versions"] == {"jq": "1.6-2.1", "tree": "2.1.0-1"} and ran[-1] == ["apt-mark", "hold", "tree"]
    # an update (a newer tree) keeps the record and adds to it
    before[:] = [parse_package_probe(PROBE + "tree 2.1.0-1 hi\nlibtree0 1 ii\n")]
    after[:] = [PROBE + "tree 2.2-1 hi\nlibtree0 1 ii\nlibtree1 1 ii\n"]
    outs = PackageSetProvider().apply({**props, "packages": {"tree": "2.2-1", "jq": "1.6-2.1"}},
                                      {"added": outs["added"], "held_before": ["jq"]})
    assert outs["added"] == ["libtree0", "libtree1", "tree"] and outs["held_before"] == ["jq"]


def test_a_create_after_a_killed_install_records_what_that_install_added(monkeypatch):
    """The kept record (providers/kept.py) holds every package the host had before the first
    install: a create that finds the install done (the run was killed before the engine saved
    its state) records the killed run's packages as added, so a rollback purges them, and
    writes no second record."""
    from components.providers import base
    from components.transport import Result

    done = PROBE + "tree 2.1.0-1 hi\nlibtree0 1 ii\n"
    had = sorted(parse_package_probe(PROBE)["installed"])
    kept_ = {"added": [], "held_before": ["jq"], "installed_before": had}
    ran: list = []

    def run_steps(conn, steps, then=None):
        ran.extend(list(s.argv) for s in steps)
        return Result(0, done, "")

    monkeypatch.setattr(PackageSetProvider, "_conn", lambda self, props: type("C", (), {"t": None})())
    monkeypatch.setattr(PackageSetProvider, "probe_kept",
                        lambda self, conn, props: (parse_package_probe(done), kept_, True))
    monkeypatch.setattr(PackageSetProvider, "probe", lambda self, conn, props, refresh=False: parse_package_probe(done))
    monkeypatch.setattr(base, "run_steps", run_steps)
    props = {"conn": {"name": "node1", "address": "10.0.0.1"}, "packages": {"tree": "2.1.0-1", "jq": "1.6-2.1"},
             "hold": True}
    outs = PackageSetProvider().apply(props, {})
    assert ran == []  # the host is as the stack wants it: nothing to do, no second record
    assert outs["added"] == ["libtree0", "tree"] and outs["held_before"] == ["jq"]
    assert "installed_before" not in outs  # on the host only, never in the state
    # without the kept record the same host reads as all there before: nothing to purge
    monkeypatch.setattr(PackageSetProvider, "probe_kept",
                        lambda self, conn, props: (parse_package_probe(done), None, False))
    assert PackageSetProvider().apply(props, {})["added"] == []


def test_adopted_command_effect_is_not_undone():
    p = CommandWithVerifyProvider()
    props = {"create": ["touch", "/x"], "verify": ["test", "-e", "/x"], "delete": ["rm", "/x"]}
    assert [list(s.argv) for s in p.plan_delete(props, {"verified": True})] == [["rm", "/x"]]
    assert p.plan_delete({**props, "preexisting": True}, {"verified": True}) == []


def test_package_sets_on_one_host_never_apply_at_once(monkeypatch):
    """Two layers' package sets on one host: each records what appeared during its own install,
    so they must not overlap (the lab once recorded slurmd and libc-bin as a storage set's)."""
    import threading
    import time

    from components.providers import packages

    active: dict[str, int] = {}
    overlaps: list[str] = []
    guard = threading.Lock()
    # hosts a and b still apply in parallel: each one's first apply waits for the other's to
    # start (a lock over every host would make the first wait out its 5 s), not a wall-time bound
    started = {"a": threading.Event(), "b": threading.Event()}
    alone: list[str] = []

    def slow_apply(self, props, record):
        host = props["conn"]["name"]
        with guard:
            active[host] = active.get(host, 0) + 1
            if active[host] > 1:
                overlaps.append(host)
        started[host].set()
        if not started["b" if host == "a" else "a"].wait(5):
            alone.append(host)
        time.sleep(0.05)
        with guard:
            active[host] -= 1
        return {}

    # what runs under the set's host lock: the apply it shares with every host primitive
    monkeypatch.setattr(packages.HostPrimitive, "apply", slow_apply)
    p = packages.PackageSetProvider()
    props = [{"conn": {"name": h, "address": "10.0.0.1"}, "packages": {}} for h in ("a", "a", "a", "b", "b")]
    threads = [threading.Thread(target=p.apply, args=(pr, {})) for pr in props]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert overlaps == [] and alone == []


def test_the_file_probe_script_read_as_the_provider_reads_it(tmp_path):
    """The real script on this machine: sha256sum's own line carries the digest, the parent is
    found without dirname, a link and a directory are told apart from a file."""
    import hashlib
    import subprocess

    from components.providers.file import parse_file_probe

    def read(path):
        argv = FileProvider().probe_argv({"path": str(path)})
        return parse_file_probe(subprocess.run(argv, capture_output=True, text=True, check=True).stdout)

    f = tmp_path / "etc" / "slurm.conf"
    f.parent.mkdir()
    f.write_bytes(b"ClusterName=lab\n")
    f.chmod(0o640)
    obs = read(f)
    assert obs["kind"] == "file" and obs["mode"] == "640" and obs["parent"] is True
    assert obs["sha256"] == hashlib.sha256(b"ClusterName=lab\n").hexdigest()
    assert read(tmp_path / "missing" / "x") == {"kind": "absent", "backup": False, "parent": False}
    (tmp_path / "link").symlink_to(f)
    assert read(tmp_path / "link")["kind"] == "link"
    assert read(f.parent)["kind"] == "other"
    odd = tmp_path / "back\\slash"  # sha256sum escapes such a name: "\<hex>  <path>"
    odd.write_bytes(b"x")
    assert read(odd)["sha256"] == hashlib.sha256(b"x").hexdigest()


def test_the_account_probe_script_read_as_the_provider_reads_it(tmp_path):
    """The real script against a getent stub that answers as glibc's does (each key's entry,
    in key order; exit 2 when one is missing): name and id told apart, a duplicate uid read as
    getent's own answer for that uid, a missing key not a failed probe."""
    import os
    import subprocess

    passwd = ["other:x:64030:100::/:/bin/false", "slurm:x:64030:64030:slurm:/nonexistent:/usr/sbin/nologin",
              "munge:x:999:999::/:/bin/false"]
    group = ["slurm:x:64030:", "munge:x:999:"]
    stub = tmp_path / "getent"
    stub.write_text("#!/bin/sh\ndb=$1; shift; rc=0\nfor k in \"$@\"; do\n"
                    "  line=$(awk -F: -v k=\"$k\" '$1==k || $3==k {print; exit}' \"$GETENT_DIR/$db\")\n"
                    "  if [ -n \"$line\" ]; then echo \"$line\"; else rc=2; fi\ndone\nexit $rc\n")
    stub.chmod(0o755)
    (tmp_path / "passwd").write_text("\n".join(passwd) + "\n")
    (tmp_path / "group").write_text("\n".join(group) + "\n")
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}", "GETENT_DIR": str(tmp_path)}
    p = AccountProvider()

    def read(name, uid, gid):
        props = {**ACC, "name": name, "uid": uid, "gid": gid}
        out = subprocess.run(p.probe_argv(props), capture_output=True, text=True, env=env, check=True)
        return p.parse(props, out.stdout)

    obs = read("slurm", 64030, 64030)
    assert obs["user"]["name"] == "slurm" and obs["uid"]["name"] == "other"  # getent's answer for 64030
    assert obs["group"]["gid"] == 64030 and obs["gid"]["name"] == "slurm"
    assert "uid 64030 already belongs to user other" in "\n".join(p.conflicts({**ACC}, obs))
    obs = read("slurmrestd", 64031, 64031)
    assert obs == {"user": None, "group": None, "uid": None, "gid": None}
    obs = read("munge", 64030, 999)
    assert obs["user"]["uid"] == 999 and obs["uid"]["name"] == "other" and obs["gid"]["name"] == "munge"


def test_sha256sum_line_reads_plain_and_escaped_names():
    """sha256sum escapes a name with a backslash or newline and marks the line with a leading
    backslash; the path is unescaped in one pass."""
    from components.providers.file import sha256sum_line

    assert sha256sum_line("ab12  /etc/slurm/slurm.conf") == ("ab12", "/etc/slurm/slurm.conf")
    assert sha256sum_line("\\ab12  /etc/a\\\\nb\\nc") == ("ab12", "/etc/a\\nb\nc")
    assert sha256sum_line("") == ("", "")


def test_an_install_that_starts_no_service_runs_under_the_no_start_policy():
    """start_services=False: the install (and a half-done one's configure) runs through
    packages_no_start.sh; the default runs apt-get itself, and the diff ignores the choice."""
    p = PackageSetProvider()
    obs = parse_package_probe(PROBE + "== dpkg-updates\n0001\n")
    want = {"packages": {"tree": "2.1.0-1"}, "hold": True}
    plain = p.plan(want, obs, {})
    quiet = p.plan({**want, "start_services": False}, obs, {})
    assert [s.argv[0] for s in plain] == ["env", "env", "env", "apt-mark"]
    wrapped = [s for s in quiet if s.argv[:2] == ["sh", "-c"]]
    assert len(wrapped) == 2 and "policy-rc.d" in wrapped[0].argv[2]
    assert [list(s.argv[4:]) for s in wrapped] == [list(plain[0].argv), list(plain[2].argv)]
    assert "starting no service" in wrapped[1].why
