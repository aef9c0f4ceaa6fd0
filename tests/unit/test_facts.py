"""components/facts: each fact's parser on what its tool prints, and its shell functions run
against stub tools on PATH (the argv each one sends)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from components.facts import shell
from components.facts.dpkg import DpkgStatus, parse_dpkg_status
from components.facts.sacctmgr import parse_parsable2, show_argv
from components.facts.scontrol import parse_show_oneliner
from components.facts.systemd import parse_show


def run(tmp_path: Path, facts: tuple[str, ...], script: str, **stubs: str) -> subprocess.CompletedProcess:
    """`sh -c <facts' functions + script>` with each stub on PATH recording its argv in calls.log."""
    bin_ = tmp_path / "bin"
    bin_.mkdir(exist_ok=True)
    for name, body in stubs.items():
        (bin_ / name).write_text(f'#!/bin/sh\necho "{name} $*" >> {tmp_path}/calls.log\n{body}\n')
        (bin_ / name).chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_}:{os.environ['PATH']}"}
    return subprocess.run(["sh", "-c", shell(*facts) + script], env=env, capture_output=True, text=True,
                          timeout=30)


def calls(tmp_path: Path) -> list[str]:
    return (tmp_path / "calls.log").read_text().splitlines()


# ---- mounts ---------------------------------------------------------------------------------
def test_fact_mount_sends_findmnt_pairs_with_errors_on_stdout(tmp_path):
    p = run(tmp_path, ("mounts",), 'fact_mount -T /srv/x; fact_mount --mountpoint /mnt/m TARGET,ID',
            findmnt='echo "findmnt: oops" >&2; echo \'TARGET="/srv/x"\'')
    assert calls(tmp_path) == ["findmnt -n -P -o TARGET,SOURCE,FSTYPE,OPTIONS -T /srv/x",
                               "findmnt -n -P -o TARGET,ID --mountpoint /mnt/m"]
    assert "findmnt: oops" in p.stdout and p.stderr == ""


@pytest.mark.parametrize("options, ro", [("ro,relatime", True), ("rw,relatime", False),
                                         ("rw,errors=remount-ro", False), ("", False)])
def test_fact_mount_ro_reads_the_ro_option_only(tmp_path, options, ro):
    p = run(tmp_path, ("mounts",), "fact_mount_ro /mnt/m", findmnt=f"echo '{options}'")
    assert (p.returncode == 0) == ro
    assert calls(tmp_path) == ["findmnt -n -o OPTIONS --mountpoint /mnt/m"]


# ---- zfs ------------------------------------------------------------------------------------
def test_fact_zfs_get_and_zpool_health_argv(tmp_path):
    run(tmp_path, ("zfs",), "fact_zpool_health ai; fact_zfs_get mounted,guid ai/models ai/data",
        zpool="", zfs="")
    assert calls(tmp_path) == ["zpool list -H -o name,health ai",
                               "zfs get -H -p -o name,property,value,source mounted,guid ai/models ai/data"]


# ---- dpkg -----------------------------------------------------------------------------------
def test_fact_dpkg_status_argv(tmp_path):
    run(tmp_path, ("dpkg",), "fact_dpkg_status", **{"dpkg-query": ""})
    # (the stub's echo turns the format's trailing \n into a line break)
    assert calls(tmp_path)[0] == "dpkg-query -W -f=${Package} ${Version} ${db:Status-Abbrev}"


def test_parse_dpkg_status():
    text = ("hello 2.10-3 ii \njq 1.6-2.1 hi \nlibc-bin:amd64 2.36-9 it \nlibc6 2.36-9 iW \n"
            "half 1.0 iU \nfailed 1.0 iF \ngone 1.0 rc \nheld-gone 1.0 hn \nnoise\n")
    assert parse_dpkg_status(text) == DpkgStatus(
        {"hello": "2.10-3", "jq": "1.6-2.1", "libc-bin": "2.36-9", "libc6": "2.36-9"}, {"jq", "held-gone"})
    assert parse_dpkg_status("") == DpkgStatus({}, set())


# ---- systemd --------------------------------------------------------------------------------
def test_parse_show():
    text = "LoadState=loaded\nActiveState=active\nExecStart={ path=/bin/x ; argv[]=/bin/x a=b }\nnoise\n"
    assert parse_show(text) == {"LoadState": "loaded", "ActiveState": "active",
                                "ExecStart": "{ path=/bin/x ; argv[]=/bin/x a=b }"}


# ---- scontrol -------------------------------------------------------------------------------
def test_parse_show_oneliner_keeps_values_with_equals_and_blanks():
    text = ("NodeName=node1 Arch=x86_64 CfgTRES=cpu=80,mem=184000M,gres/gpu=8 "
            "GresUsed=gpu:v100:0(IDX:N/A) OS=Linux 6.1.0-18-amd64 #1 SMP Debian "
            "Reason=gpu-fleet: leaving the cluster [root@2024-01-01T00:00:00]\n"
            "Node node9 not found\n"
            "NodeName=node2 State=IDLE Comment=(null)\n")
    got = parse_show_oneliner(text)
    assert got[0]["CfgTRES"] == "cpu=80,mem=184000M,gres/gpu=8"
    assert got[0]["OS"] == "Linux 6.1.0-18-amd64 #1 SMP Debian"
    assert got[0]["Reason"] == "gpu-fleet: leaving the cluster [root@2024-01-01T00:00:00]"
    assert got[1] == {"NodeName": "node2", "State": "IDLE", "Comment": "(null)"}
    assert len(got) == 2 and parse_show_oneliner("") == []


# ---- sacctmgr -------------------------------------------------------------------------------
def test_sacctmgr_show_argv():
    assert show_argv("qos", ["Name", "GrpTRES"], name="gpu") == [
        "sacctmgr", "--noheader", "--parsable2", "show", "qos", "where", "name=gpu", "format=Name,GrpTRES"]
    assert show_argv("cluster", ["Cluster"]) == [
        "sacctmgr", "--noheader", "--parsable2", "show", "cluster", "format=Cluster"]


def test_parse_parsable2_by_position():
    fields = ["Name", "GrpTRES", "Preempt"]
    text = "gpu|cpu=4,gres/gpu=8|low,scavenger\nsacctmgr: warning: something\nlow||\n"
    assert parse_parsable2(text, fields) == [
        {"Name": "gpu", "GrpTRES": "cpu=4,gres/gpu=8", "Preempt": "low,scavenger"},
        {"Name": "low", "GrpTRES": "", "Preempt": ""}]
    assert parse_parsable2("", fields) == []
