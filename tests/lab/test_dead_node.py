"""A node gone for good (issue 17, part 2): its container stopped and never booted again, the
stack marks it `unreachable` and takes it out of its partition, `python -m components.forget`
(what `make forget` runs) forgets its resources from the state, and `up` converges for the
rest of the fleet without ever contacting the dead node. The lab is restored at the end
(`python -m lab up` boots the missing host again)."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time

import yaml

from components.forget import host_of
from lab import nspawn
from tests.pulumi_cli import ROOT, PulumiProject

from .conftest import lab_command
from .labhosts import command_log

VICTIM = "node3"
LIVE = ["node1", "node2"]


def stop_for_good(name: str) -> None:
    """Stop one lab host's systemd-nspawn (the lab's own nspawn of that host, found by its root
    directory): SIGTERM is nspawn's orderly poweroff of the container, which ends the lab's boot
    loop too (only a reboot boots it again); SIGKILL after 30 s. `python -m lab up` boots it again."""
    pids = nspawn.host_nspawn_pids(name)
    assert len(pids) == 1, f"{name} has not exactly one lab nspawn: {sorted(pids)}"
    pid = pids.pop()
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 30
    while nspawn.alive(pid) and time.monotonic() < deadline:
        time.sleep(0.5)
    if nspawn.alive(pid):
        os.kill(pid, signal.SIGKILL)


def mark_unreachable(proj: PulumiProject, name: str) -> None:
    """The admin's edit: the node `owner: unreachable`, out of every partition."""
    f = proj.dir / "stacks" / "Pulumi.lab.yaml"
    data = yaml.safe_load(f.read_text())
    cfg = data["config"]
    for n in cfg["gpu-fleet:nodes"]:
        if n["name"] == name:
            n["owner"] = "unreachable"
    for p in cfg["gpu-fleet:slurm"]["partitions"]:
        p["nodes"] = [n for n in p["nodes"] if n != name]
    f.write_text(yaml.safe_dump(data, sort_keys=False))


def forget(proj: PulumiProject, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "components.forget", "lab", VICTIM, "--cwd", str(proj.dir), *args],
                          cwd=ROOT, env=proj.env, capture_output=True, text=True, timeout=600,
                          stdin=subprocess.DEVNULL)


def recorded(proj: PulumiProject, name: str) -> dict[str, dict]:
    """urn -> the state's entry, for every resource recorded on host `name`; decrypted: a
    secret's ciphertext changes each time the engine writes the state."""
    state = json.loads(proj.run("stack", "export", "--stack", "lab", "--show-secrets").stdout)
    return {r["urn"]: r for r in state["deployment"]["resources"] if host_of(r) == name}


def take_down(proj: PulumiProject, lab_session) -> None:
    """The victim's machine dies; the admin marks it unreachable, out of its partition."""
    lab_session.exclusive()
    try:
        stop_for_good(VICTIM)
    finally:
        lab_session.shared()
    mark_unreachable(proj, VICTIM)


def test_a_dead_node_is_forgotten_and_the_rest_converges(deployed, lab_session, tmp_path):
    proj = deployed.project(tmp_path)
    log = tmp_path / "commands.jsonl"
    proj.env["GPU_FLEET_COMMAND_LOG"] = str(log)
    try:
        victims = list(recorded(proj, VICTIM))
        assert victims, f"nothing recorded on {VICTIM}"

        take_down(proj, lab_session)
        log.write_text("")

        p = forget(proj, "--yes")
        if p.returncode == 1:
            # other hosts' resources (slurm-reconfigure, the GPU baseline) still record a
            # dependency on the node's: forget prints the up that re-records them without it
            assert "still record a dependency on them" in p.stdout, p.stdout + p.stderr
            [cmd] = [ln.strip() for ln in p.stdout.splitlines() if ln.strip().startswith("bin/pulumi up ")]
            argv = shlex.split(cmd)[1:]
            for flag in ("--policy-pack", "--policy-pack-config"):  # the project copy has no pack
                while flag in argv:
                    i = argv.index(flag)
                    del argv[i:i + 2]
            assert argv.count("--exclude") == len(victims)
            up = proj.run(*argv, "--yes", "--skip-preview", check=False, timeout=1200)
            assert up.returncode == 0, (up.stdout + up.stderr)[-4000:]
            p = forget(proj, "--yes")
        assert p.returncode == 0, p.stdout + p.stderr
        assert f"forgot {len(victims)} resource(s) of {VICTIM} from stack lab:" in p.stdout
        for urn in victims:
            assert f"  forgot {urn}\n" in p.stdout
        assert recorded(proj, VICTIM) == {}

        up = proj.up(check=False, timeout=1200)
        assert up.returncode == 0, (up.stdout + up.stderr)[-4000:]
        out = proj.outputs()
        assert out["admission"]["admitted"] == LIVE
        assert (out["acceptance"]["accepted"] == out["admission"]["admitted"] and not out["acceptance"]["failed"])
        proj.run("preview", "--stack", "lab", "--expect-no-changes")
        # nothing, not even a connection attempt, went to the dead node after it died
        assert [c for c in command_log(log) if c["host"] == VICTIM] == []
    finally:
        lab_session.exclusive()
        try:
            lab_command("up")  # the dead host's process is gone: the lab boots its hosts again
        finally:
            lab_session.shared()


def pending(proj: PulumiProject, op: str, *args: str) -> subprocess.CompletedProcess:
    """What `make <op>` runs: pulumi with the unreachable nodes' resources excluded."""
    return subprocess.run([sys.executable, "-m", "components.pending_hosts", op, "lab", "--cwd", str(proj.dir),
                           "--pulumi", "pulumi", "--", *args], cwd=ROOT, env=proj.env, capture_output=True,
                          text=True, timeout=1200)


def test_an_unreachable_node_keeps_its_recorded_resources_while_the_rest_rolls_out(deployed, lab_session, tmp_path):
    """The seed's "pending" node: down, marked unreachable, out of its partition; `make up` and
    `make refresh` leave everything recorded for it as it was (a warning names it) and the
    rest of the fleet rolls out; booted again and given its owner back, one `up --refresh` takes
    it up again."""
    proj = deployed.project(tmp_path)
    log = tmp_path / "commands.jsonl"
    proj.env["GPU_FLEET_COMMAND_LOG"] = str(log)
    original = (proj.dir / "stacks" / "Pulumi.lab.yaml").read_text()
    try:
        before = recorded(proj, VICTIM)
        take_down(proj, lab_session)
        log.write_text("")

        p = pending(proj, "up", "--yes", "--skip-preview")
        assert p.returncode == 0, (p.stdout + p.stderr)[-4000:]
        assert (f"node {VICTIM} is marked unreachable: its {len(before)} recorded resources are left as they "
                "are (not read, changed or deleted) by this up") in p.stderr
        out = proj.outputs()
        assert out["admission"]["admitted"] == LIVE and (out["acceptance"]["accepted"] == out["admission"]["admitted"] and not out["acceptance"]["failed"])
        r = pending(proj, "refresh", "--yes", "--skip-preview")
        assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
        after = recorded(proj, VICTIM)
        changed = {u.rsplit("::", 1)[-1]: sorted(k for k in set(x.get("outputs") or {}) | set(before[u].get("outputs") or {})
                                                 if k != "__provider"  # the engine's copy of the provider code
                                                 and (x.get("outputs") or {}).get(k) != (before[u].get("outputs") or {}).get(k))
                   for u, x in after.items() if u in before}
        assert set(after) == set(before) and {u: k for u, k in changed.items() if k} == {}, changed
        assert [c for c in command_log(log) if c["host"] == VICTIM] == []

        lab_session.exclusive()
        try:
            lab_command("reboot", VICTIM)  # the machine is back, with what it had
        finally:
            lab_session.shared()
        (proj.dir / "stacks" / "Pulumi.lab.yaml").write_text(original)
        back = pending(proj, "up", "--yes", "--refresh", "--skip-preview")
        errors = [ln for ln in (back.stdout + back.stderr).splitlines() if "error" in ln.lower()]
        assert back.returncode == 0, "\n".join(errors[:40])
        out = proj.outputs()
        assert out["admission"]["admitted"] == [*LIVE, VICTIM] and (out["acceptance"]["accepted"] == out["admission"]["admitted"] and not out["acceptance"]["failed"])
    finally:
        lab_session.exclusive()
        try:
            lab_command("up")
        finally:
            lab_session.shared()
