"""Every host primitive through the real engine on a real lab host.

create -> a second `up` changes nothing and sends no mutating command (command
log) -> drift made by hand -> `pulumi refresh` records it -> `up` repairs it
-> `destroy` leaves the host as it was before (probe).
"""

from __future__ import annotations

import json
import secrets
import shlex
from pathlib import Path

import pytest

from components.errors import FleetError
from components.providers.packages import _NO_START
from components.providers.systemd import SystemdUnitProvider
from tests.pulumi_cli import ROOT, PulumiProject

from .labhosts import command_log, lab_conn, ssh

PROGRAM = Path(__file__).parent / "programs" / "primitives"
HOST = "node3"

# What the program manages, read back as the host sees it; also the "as before" probe.
SNAPSHOT = r"""
echo "file $(cat /etc/gpu-fleet-test/demo.conf 2>/dev/null | tr '\n' '|')"
echo "filemeta $(stat -c '%a %U %G' /etc/gpu-fleet-test/demo.conf 2>/dev/null)"
echo "secretmeta $(stat -c '%a %U %G' /etc/gpu-fleet-test/secret.key 2>/dev/null)"
echo "dir $(test -d /etc/gpu-fleet-test && ls -A /etc/gpu-fleet-test | tr '\n' ' ' || echo none)"
echo "user $(getent passwd gftest)"
echo "group $(getent group gftest)"
echo "unit $(systemctl is-enabled gf-demo.service 2>/dev/null) $(systemctl is-active gf-demo.service 2>/dev/null)"
echo "delegate $(systemctl show -p Delegate --value gf-demo.service 2>/dev/null)"
echo "unitfiles $(ls /etc/systemd/system | grep -c gf-demo)"
echo "pkg $(dpkg-query -W -f='${Package}=${Version} ' hello 2>/dev/null)"
echo "held $(apt-mark showhold | tr '\n' ' ')"
echo "marker $(cat /var/tmp/gf/marker 2>/dev/null)"
echo "dpkg $(dpkg-query -W -f='${Package}\n' | sha256sum | cut -c1-16)"
"""


def snapshot() -> dict[str, str]:
    out = ssh(HOST, SNAPSHOT).stdout
    return {k: v.strip() for k, _, v in (line.partition(" ") for line in out.splitlines())}


def hello_version() -> str:
    out = ssh(HOST, "apt-get -q update >/dev/null 2>&1; apt-cache policy hello").stdout
    return next(line.split()[1] for line in out.splitlines() if "Candidate:" in line)


@pytest.fixture
def program(lab, tmp_path):
    proj = PulumiProject.copy_of(
        tmp_path, [PROGRAM / "Pulumi.yaml", PROGRAM / "__main__.py", ROOT / "components"])
    proj.env["GPU_FLEET_COMMAND_LOG"] = str(tmp_path / "commands.jsonl")
    proj.init_stack("lab")
    proj.run("config", "set", "conns", json.dumps([lab_conn(HOST)]))
    proj.run("config", "set", "packages", json.dumps({"hello": hello_version()}))
    proj.secret = "gf-test-secret-" + secrets.token_hex(12)
    proj.run("config", "set", "--secret", "secret", proj.secret)
    proj.log = tmp_path / "commands.jsonl"
    yield proj
    proj.run("destroy", "--yes", "--stack", "lab", check=False)


def updated_resources(proj: PulumiProject) -> set[str]:
    steps = proj.preview_json("lab")["steps"]
    return {s["urn"].rsplit("::", 1)[1] for s in steps if s["op"] == "update"}


def test_primitives_lifecycle(program):
    proj = program
    before = snapshot()
    assert before["user"] == "" and before["unitfiles"] == "0", "lab host not clean: " + str(before)

    # create
    proj.run("up", "--yes", "--stack", "lab")
    s = snapshot()
    assert s["file"] == "# managed by gpu-fleet|variant=1|"
    assert s["filemeta"] == "640 root gftest"
    assert s["secretmeta"] == "400 gftest gftest"
    assert s["user"].startswith("gftest:x:64101:64101:") and s["group"].startswith("gftest:x:64101:")
    assert s["unit"] == "enabled active" and s["delegate"] == "yes"
    assert s["pkg"].startswith("hello=") and "hello" in s["held"].split()
    assert s["marker"] == "made"

    # a second up with nothing changed: no change, not one command sent
    proj.log.unlink()
    proj.run("up", "--yes", "--stack", "lab", "--expect-no-changes")
    assert command_log(proj.log) == []

    # up --refresh: read-only probes only
    proj.run("up", "--yes", "--stack", "lab", "--refresh", "--expect-no-changes")
    log = command_log(proj.log)
    assert log and not [c for c in log if c["mutating"]], log

    # drift by hand
    ssh(HOST, "echo tampered >> /etc/gpu-fleet-test/demo.conf; chmod 644 /etc/gpu-fleet-test/secret.key;"
              " systemctl stop gf-demo.service; apt-mark unhold hello >/dev/null;"
              " rm -rf /var/tmp/gf; usermod -s /bin/sh gftest")
    proj.run("refresh", "--yes", "--stack", "lab")
    assert updated_resources(proj) == {
        f"{HOST}-{r}" for r in ("file", "secret", "unit", "packages", "command", "account")}

    # up repairs, with mutating commands this time
    proj.log.unlink()
    proj.run("up", "--yes", "--stack", "lab")
    assert [c for c in command_log(proj.log) if c["mutating"]]
    s = snapshot()
    assert s["file"] == "# managed by gpu-fleet|variant=1|" and s["secretmeta"] == "400 gftest gftest"
    assert s["unit"] == "enabled active" and "hello" in s["held"].split() and s["marker"] == "made"
    assert s["user"].endswith(":/usr/sbin/nologin")
    proj.run("up", "--yes", "--stack", "lab", "--refresh", "--expect-no-changes")

    # a changed input updates in place
    proj.run("config", "set", "variant", "2")
    proj.run("up", "--yes", "--stack", "lab")
    assert snapshot()["file"] == "# managed by gpu-fleet|variant=2|"

    # secrets: never in plain text in state or the command log
    state = proj.run("stack", "export", "--stack", "lab").stdout
    assert proj.secret not in state
    assert proj.secret not in proj.log.read_text()

    # destroy: the host is as before
    proj.run("destroy", "--yes", "--stack", "lab")
    assert snapshot() == before


def test_the_no_start_policy_lets_running_services_restart_and_starts_nothing_new(lab):
    """packages_no_start.sh on a real host, around a command that asks the policy what
    invoke-rc.d and deb-systemd-invoke would ask: a start of a service not running refused
    (101), a restart of a running one (sshd) and any stop allowed; the policy gone when the
    command ends, its exit status passed on; an admin's own policy-rc.d left as it is and used."""
    asks = ["ssh.service restart", "--quiet ssh start", "gf-none.service start",
            "gf-none.service restart", "gf-none reload", "gf-none.service stop"]
    ask = "; ".join(f"/usr/sbin/policy-rc.d {q}; echo \"{q}=$?\"" for q in asks) + "; exit 7"
    run = (f"sh -c {shlex.quote(_NO_START)} sh sh -c {shlex.quote(ask)}; echo \"rc=$?\"; "
           "test -e /usr/sbin/policy-rc.d && echo left; :")
    out = ssh(HOST, run).stdout.splitlines()
    assert dict(line.rsplit("=", 1) for line in out if "=" in line) == {
        "ssh.service restart": "0", "--quiet ssh start": "0", "gf-none.service start": "101",
        "gf-none.service restart": "101", "gf-none reload": "101", "gf-none.service stop": "0",
        "rc": "7"}, out
    assert "left" not in out, out
    # an admin's policy: kept, and the command runs under it
    ssh(HOST, "printf '#!/bin/sh\\nexit 104\\n' > /usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d")
    try:
        out = ssh(HOST, f"sh -c {shlex.quote(_NO_START)} sh sh -c '/usr/sbin/policy-rc.d x start; echo $?'; "
                        "cat /usr/sbin/policy-rc.d").stdout
        assert out.splitlines() == ["104", "#!/bin/sh", "exit 104"], out
    finally:
        ssh(HOST, "rm -f /usr/sbin/policy-rc.d")


def test_a_unit_that_does_not_come_up_is_reported_with_its_journal(lab):
    """A start that does not take (the daemon exits at once, as 24.11's slurmctld on 22.05's
    state): the error names host and unit and carries what the daemon said in its journal."""
    unit = "gf-broken.service"
    props = {"conn": lab_conn(HOST), "name": unit, "enabled": False, "active": True, "dropins": {},
             "properties": {}, "triggers": {}, "files": None, "live": None,
             "content": "[Service]\nExecStart=/bin/sh -c 'echo gf-broken: no state I can read >&2; exit 3'\n"}
    try:
        with pytest.raises(FleetError) as err:
            SystemdUnitProvider().create(props)
        msg = str(err.value)
        assert f"host {HOST}: {unit} did not converge" in msg, msg
        assert "gf-broken: no state I can read" in msg.split("journal")[1], msg
    finally:
        ssh(HOST, f"systemctl stop {unit}; rm -f /etc/systemd/system/{unit}; systemctl daemon-reload; "
                  f"systemctl reset-failed {unit}; :")


def test_a_unit_with_triggers_starts_once_and_one_running_before_restarts_once(lab):
    """Restart triggers on a real systemd: a unit the apply itself starts loads what is there
    now, so it starts once (its first start is its only one); one that was running before
    (what it loaded then is unknown) is restarted once, on create and on new triggers."""
    unit, log = "gf-starts.service", "/var/tmp/gf-starts.log"
    # ExecStartPre: `systemctl start` returns only after it ran, so the count is never early
    content = f"[Service]\nExecStartPre=/bin/sh -c 'echo start >> {log}'\nExecStart=/bin/sleep infinity\n"
    props = {"conn": lab_conn(HOST), "name": unit, "enabled": False, "active": True, "dropins": {},
             "properties": {}, "triggers": {"key": "k1"}, "files": None, "live": None, "content": content}
    provider = SystemdUnitProvider()

    def starts() -> int:
        return int(ssh(HOST, f"cat {log} 2>/dev/null | wc -l").stdout)

    try:
        ssh(HOST, f"rm -f {log}")
        res = provider.create(props)
        assert starts() == 1 and res.outs["active"] is True and res.outs["was_active"] is False
        provider.delete(res.id, res.outs)
        assert "inactive" in ssh(HOST, f"systemctl is-active {unit}; :").stdout

        # running before create: a daemon started by hand on the same unit file
        ssh(HOST, f"rm -f {log}; printf %s {shlex.quote(content)} > /etc/systemd/system/{unit}; "
                  f"systemctl daemon-reload; systemctl start {unit}")
        assert starts() == 1
        res = provider.create(props)
        assert starts() == 2 and res.outs["was_active"] is True and "_started_by_apply" not in res.outs

        # update with new triggers: the running daemon restarts once; a stopped one starts once
        provider.update(res.id, res.outs, {**props, "triggers": {"key": "k2"}})
        assert starts() == 3
        ssh(HOST, f"systemctl stop {unit}")
        up = provider.update(res.id, res.outs, {**props, "triggers": {"key": "k3"}})
        assert starts() == 4 and up.outs["active"] is True and "_started_by_apply" not in up.outs
    finally:
        ssh(HOST, f"systemctl stop {unit}; rm -f /etc/systemd/system/{unit} {log}; systemctl daemon-reload; "
                  f"systemctl reset-failed {unit} 2>/dev/null; :")
