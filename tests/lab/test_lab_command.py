"""`python -m lab up|down|status`: idempotence, recovery from a killed `up`, and real hosts.

These run first in tests/lab (file order) and end with the default lab up, so the
session's `lab` fixture finds it healthy; the session ends with `lab down`.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time

import pytest
import yaml

from components.config.load import parse_fleet_config
from lab import net, nspawn, rootfs
from lab.common import mounts_under
from lab.hosts import CGROUP_PARENT, lab_hosts
from lab.repo import closure_names
from lab.stackfile import render_stack

from .conftest import ROOT, STATE, lab_command, load_lab

DEFAULT = [h.name for h in lab_hosts()]


# --- pure: the stack file and the closure parser (no root needed) ----------------------

def test_committed_lab_stack_is_what_up_writes_and_it_validates():
    committed = (ROOT / "stacks" / "Pulumi.lab.yaml").read_text()
    # `make lab` (stack init, secrets) may have appended keys the lab does not own; up keeps them.
    assert committed == render_stack(3, committed) == render_stack(3, render_stack(3, committed))
    assert render_stack(3).splitlines() == committed.splitlines()[:len(render_stack(3).splitlines())]
    cfg = parse_fleet_config(yaml.safe_load(committed)["config"], "stacks/Pulumi.lab.yaml")
    assert cfg.ssh.identity_file == ".state/lab/id_ed25519" and cfg.ssh.use_ssh_config is False
    assert (cfg.hosts.storage.name, cfg.hosts.storage.address) == ("storage", "10.213.57.10")
    assert (cfg.hosts.controller.name, cfg.hosts.controller.address) == ("ctl", "10.213.57.11")
    assert [(n.name, n.address) for n in cfg.nodes] == [(f"node{k}", f"10.213.57.{20 + k}") for k in (1, 2, 3)]
    assert [n.name for n in cfg.canary_nodes()] == ["node1"]
    assert cfg.slurm.cgroup_plugin == "cgroup/v1" and cfg.slurm.partitions[0].default
    assert "gpu-fleet:storage" not in yaml.safe_load(committed)["config"]  # not built: no section


def test_stack_file_for_more_nodes_validates_and_keeps_keys_others_added():
    five = parse_fleet_config(yaml.safe_load(render_stack(5))["config"], "x")
    assert [n.name for n in five.nodes] == [f"node{k}" for k in range(1, 6)]
    assert five.slurm.partitions[0].nodes == [f"node{k}" for k in range(1, 6)]
    existing = render_stack(3) + "encryptionsalt: v1:abc:def\n"
    existing = existing.replace("config:\n", "config:\n  gpu-fleet:web: {enabled: true}\n")
    again = render_stack(3, existing)
    data = yaml.safe_load(again)
    assert data["encryptionsalt"] == "v1:abc:def" and data["config"]["gpu-fleet:web"] == {"enabled": True}
    assert render_stack(3, again) == again


def test_closure_keeps_real_packages_of_this_arch():
    out = "jq\n  Depends: libjq1\nlibjq1\n  Depends: <libonig5>\n<virtual-x>\nlibc6:i386\nlibc6:amd64\nfoo:all\n"
    assert closure_names(out, "amd64") == ["foo", "jq", "libc6", "libjq1"]


# --- the command on this machine ------------------------------------------------------

def inventory() -> dict:
    return json.loads((STATE / "inventory.json").read_text())


def assert_lab_is_down() -> None:
    assert not (STATE / "inventory.json").exists()
    assert not (STATE / "hosts").exists()
    assert not mounts_under(STATE / "hosts"), "a host's tmpfs or overlay is left mounted"
    assert not net.bridge_exists()
    assert not nspawn.lab_nspawn_pids()
    assert not any((h / CGROUP_PARENT).exists() for h in nspawn.hierarchies())


def assert_every_host_answers(expected: list[str]) -> None:
    lab = load_lab()
    assert [h["name"] for h in lab.hosts] == expected
    for h in lab.hosts:
        assert lab.ssh(h["name"], "hostname").stdout.strip() == h["name"]


@pytest.fixture(scope="module")
def exclusive(lab_session):
    """These tests take the lab down: wait until no other test session uses it."""
    lab_session.exclusive()
    yield
    lab_session.shared()


def test_down_is_safe_twice(exclusive):
    had_key = (STATE / "id_ed25519").exists()  # a fresh checkout has none until the first up
    # a killed host's veth, its namespace not torn down yet: down removes it with the bridge
    net.ensure_bridge()
    subprocess.run(["ip", "link", "add", "gf-stale0", "type", "veth", "peer", "name", "gf-stale1"], check=True)
    subprocess.run(["ip", "link", "set", "gf-stale0", "master", net.BRIDGE], check=True)
    assert "gf-stale0" in net.bridge_ports()
    lab_command("down")
    assert subprocess.run(["ip", "link", "show", "gf-stale0"], capture_output=True).returncode != 0
    second = lab_command("down")
    assert "already down" in second.stdout
    assert_lab_is_down()
    assert (STATE / "id_ed25519").exists() == had_key, "down keeps the lab key"


def test_up_after_a_killed_up_cleans_up_and_boots(exclusive):
    proc = subprocess.Popen([sys.executable, "-m", "lab", "up"], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 900  # a cold machine builds the image first
    try:
        while True:
            try:
                inv = inventory()
            except (OSError, ValueError):
                inv = {}
            if inv.get("state") == "booting" and len(inv.get("hosts", [])) >= 2:
                break
            assert proc.poll() is None, "lab up finished before the test could kill it mid-boot"
            assert time.monotonic() < deadline, "lab up never started booting"
            time.sleep(0.05)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    orphans = nspawn.lab_nspawn_pids()
    assert orphans, "the killed up left no host running: nothing to clean up was tested"

    start = time.monotonic()
    p = lab_command("up")
    took = time.monotonic() - start
    assert "restarting the lab" in p.stdout, p.stdout
    assert not (orphans & nspawn.lab_nspawn_pids()), "the killed up's hosts still run"
    inv = inventory()
    assert inv["state"] == "up" and inv["boot"] == nspawn.boot_key()
    # what runs is what the inventory records: one launcher a host, each running its host's nspawn
    assert nspawn.launcher_pids() == {h["pid"] for h in inv["hosts"]}
    assert len(nspawn.lab_nspawn_pids() - nspawn.launcher_pids()) == len(inv["hosts"])
    assert_every_host_answers(DEFAULT)
    print(f"recovering up took {took:.1f} s")


def test_second_up_is_fast_and_changes_nothing(exclusive):
    lab_command("up")
    before = inventory()
    start = time.monotonic()
    p = lab_command("up")
    took = time.monotonic() - start
    assert "already up and healthy" in p.stdout, p.stdout
    assert took < 15, f"an up with the lab healthy took {took:.1f} s"
    assert inventory() == before
    # nothing to install again: not the fake NVML, not zfs-fuse or the pool, not nfsfuse
    assert p.stdout.count("\n") == 1, p.stdout


def test_status_reports_every_host(exclusive):
    p = lab_command("status")
    lines = p.stdout.splitlines()
    for name in DEFAULT:
        line = next(x for x in lines if x.startswith(name + " "))
        assert "alive" in line and "ssh ok" in line, line


# --- the hosts --------------------------------------------------------------------------

def test_each_host_has_its_own_name_address_and_host_key(lab):
    known = lab.known_hosts_file.read_text().splitlines()
    assert len({line.split()[2] for line in known}) == len(lab.hosts), "host keys are unique"
    for h in lab.hosts:
        out = lab.ssh(h["name"], "hostname; cat /etc/hostname; ip -4 -o addr show dev host0; "
                                 "cat /etc/machine-id").stdout.split("\n")
        assert out[0] == out[1] == h["name"]
        assert f" {h['address']}/24 " in out[2]
        assert any(line.startswith(f"{h['name']},{h['address']} ssh-ed25519 ") for line in known)
    ids = {lab.ssh(n, "cat /etc/machine-id").stdout for n in lab.names()}
    assert len(ids) == len(lab.hosts), "machine-ids are unique"


def test_each_hosts_writable_layer_is_a_tmpfs_of_its_own(lab):
    """Where the machine has the memory (lab/rootfs.py): what a host writes lands in its own
    tmpfs, not on this machine's disk."""
    if not rootfs.writable_on_tmpfs():
        pytest.skip("GPU_FLEET_LAB_TMPFS=0, or under 16 GiB of memory: the layers are on disk")
    for h in lab.hosts:
        hd = rootfs.host_dir(h["name"])
        mount = subprocess.run(["findmnt", "-n", "-o", "FSTYPE,SOURCE", "--mountpoint", str(hd)],
                               capture_output=True, text=True).stdout.split()
        assert mount == ["tmpfs", f"gpu-fleet-lab-{h['name']}"], (h["name"], mount)
        lab.ssh(h["name"], "head -c 65536 /dev/zero > /var/tmp/gf-tmpfs-probe")
        try:
            written = hd / "upper" / "var" / "tmp" / "gf-tmpfs-probe"
            assert written.stat().st_size == 65536 and written.stat().st_dev == hd.stat().st_dev
        finally:
            lab.ssh(h["name"], "rm -f /var/tmp/gf-tmpfs-probe")


def test_hosts_reach_each_other_by_name(lab):
    names = lab.names()
    probe = (
        "import socket, sys\n"
        "for n in sys.argv[1:]:\n"
        "    s = socket.create_connection((n, 22), 5)\n"
        "    assert s.recv(8) == b'SSH-2.0-', n\n"
        "    s.close()\n"
        "print('ok')\n"
    )
    for name in names:
        others = " ".join(n for n in names if n != name)
        out = lab.ssh(name, f"python3 -c {shlex.quote(probe)} {others}").stdout
        assert out.strip() == "ok"


def test_ssh_policy_and_test_users(lab):
    cfg = lab.ssh("node1", "sshd -T").stdout
    assert "permitrootlogin without-password" in cfg or "permitrootlogin prohibit-password" in cfg
    assert "passwordauthentication no" in cfg
    assert lab.ssh("node1", "sudo -n id -u", user="fleetadmin").stdout.strip() == "0"
    nopw = lab.ssh("node1", "sudo -n id -u", user="fleetnopw", check=False)
    assert nopw.returncode != 0 and "password is required" in nopw.stderr


def test_apt_installs_from_the_lab_repository_only(lab):
    node = "node2"
    sources = lab.ssh(node, "cat /etc/apt/sources.list.d/*; ls /etc/apt/sources.list 2>/dev/null || true").stdout
    assert sources.strip() == "deb [trusted=yes] file:/srv/lab-repo ./"
    try:
        out = lab.ssh(node, "apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q hello "
                            "&& hello", timeout=300).stdout
        assert "Hello, world!" in out
    finally:
        lab.ssh(node, "DEBIAN_FRONTEND=noninteractive apt-get purge -y -q hello", check=False)
    assert lab.ssh(node, "dpkg -s hello", check=False).returncode != 0, "hello left installed"


def test_a_checkpoint_puts_back_every_hosts_disk_and_survives_a_remake(lab, lab_session):
    """`lab checkpoint save` keeps each host's disk (the storage host's sparse pool files
    included) and boots it again; `restore` brings back what was kept and drops what was
    written since, on hosts made again from the image too, with the same host keys."""
    from .conftest import remake_hosts

    name = "test-lab-command"
    pool_kib = "du -k --apparent-size -s /var/lib/zfs-vdev; du -k -s /var/lib/zfs-vdev"  # apparent, used
    lab_session.exclusive()
    try:
        for h in lab.names():
            lab.ssh(h, f"echo {h} > /root/gf-kept")
        pool = lab.ssh("storage", pool_kib).stdout
        saved = lab_command("checkpoint", "save", name)
        assert "kept and booted again" in saved.stdout, saved.stdout
        for h in lab.names():
            lab.ssh(h, "echo later > /root/gf-later")
        lab_command("checkpoint", "restore", name)
        for h in lab.names():
            assert lab.ssh(h, "cat /root/gf-kept; ls /root/gf-later 2>/dev/null; true").stdout.split() == [h], h
        after = lab.ssh("storage", pool_kib).stdout
        used = [int(line.split()[0]) for line in (pool, after) for line in line.splitlines()]
        assert used[2] == used[0] and used[3] < used[2] // 4, (pool, after)  # the pool's files still sparse
        assert lab.ssh("storage", "zpool list -H -o health ai").stdout.strip() == "ONLINE"
        lab_session.shared()
        remake_hosts(lab_session)
        lab_session.exclusive()
        assert lab.ssh("node1", "ls /root/gf-kept", check=False).returncode != 0
        lab_command("checkpoint", "restore", name)  # known_hosts as the checkpoint's keys: ssh checks them
        assert lab.ssh("node1", "cat /root/gf-kept").stdout.strip() == "node1"
    finally:
        lab_command("checkpoint", "drop", name, check=False)
        for h in lab.names():
            lab.ssh(h, "rm -f /root/gf-kept /root/gf-later", check=False)
        lab_session.shared()
