"""Checkpoints of the whole lab: every host stopped cleanly, its writable layer kept, and booted
again; `restore` stops every host and boots it from what was kept, as a VM snapshot would.

The lab tests deploy the same fleet (GPU baseline, Slurm, acceptance) before most modules test their
own layer on it: deployed once and kept, each module starts from that fleet in seconds, not from
a first `up` of its own (tests/lab/conftest.py `deployed`). What a restore brings back is the
hosts' disks, not their running processes: every host boots again, so a restored fleet is also a
fleet that came through a reboot of every host at once.

A checkpoint lives in `.state/lab/checkpoints/<name>/` (on a tmpfs of its own where the hosts'
layers are: `rootfs.writable_on_tmpfs`) with the image it was taken on and the hosts' known_hosts;
`down` removes every checkpoint unless told to keep them (`--keep-checkpoints`: the hosts made
again from the image, a checkpoint then puts a deployed fleet back on them).
"""

from __future__ import annotations

import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from . import image, nspawn, rootfs, stackfile
from .core import ensure_doubles, replace_known_hosts, wait_for_ssh
from .common import CHECKPOINTS, KNOWN_HOSTS, STATE, LabError, cache_dir, flock, log, remove_tree, run
from .hosts import Host

TMPFS_SIZE = "8g"


def _parts(inv: dict, name: str) -> list[str]:
    """The host's directories a checkpoint keeps: the overlay's upper layer (or the whole copied
    root filesystem) and the container store where there is one."""
    hd = rootfs.host_dir(name)
    first = "upper" if inv.get("rootfs_mode") == "overlay" else "rootfs"
    return [p for p in (first, "containers") if (hd / p).is_dir()]


def _stop_all(hosts: list[Host]) -> None:
    with ThreadPoolExecutor(max_workers=len(hosts)) as ex:
        list(ex.map(lambda h: nspawn.stop_host(h.name), hosts))


def _boot_all(inv: dict, hosts: list[Host], timeout: float) -> float:
    repo_dir = cache_dir() / f"repo-{inv['repo']}"
    entries = {e["name"]: e for e in inv["hosts"]}
    t0 = time.monotonic()
    for h in hosts:
        entries[h.name]["pid"] = nspawn.launch(h, repo_dir)
        stackfile.write_inventory(inv)
    with ThreadPoolExecutor(max_workers=len(hosts)) as ex:
        ready = list(ex.map(lambda h: wait_for_ssh(h, entries[h.name]["pid"], t0, timeout), hosts))
    ensure_doubles(hosts)
    return max(ready)


def _copy(src: Path, dest: Path) -> None:
    """A directory tree as it is: owners, modes, xattrs (the overlay's opaque marks), whiteouts,
    sparse files (the storage host's pool) kept sparse."""
    run(["cp", "-a", "--sparse=always", str(src), str(dest)])


def _ensure_store() -> None:
    if CHECKPOINTS.is_dir():
        return
    CHECKPOINTS.mkdir(parents=True)
    if rootfs.writable_on_tmpfs():
        run(["mount", "-t", "tmpfs", "-o", f"size={TMPFS_SIZE},mode=0700", "gpu-fleet-lab-checkpoints",
             str(CHECKPOINTS)])


def save(name: str, timeout: float = 120.0) -> Path:
    """Stop every host, keep its disk as checkpoint `name` (replacing one of that name), boot it
    again. Returns the checkpoint's directory."""
    start = time.monotonic()
    with flock(STATE / ".lock", "lab"):
        inv, hosts = stackfile.running_inventory()
        _stop_all(hosts)
        _ensure_store()
        dest = CHECKPOINTS / name
        remove_tree(dest)
        dest.mkdir()
        for h in hosts:
            (dest / h.name).mkdir()
            for part in _parts(inv, h.name):
                _copy(rootfs.host_dir(h.name) / part, dest / h.name / part)
        meta = {"image": inv["image"], "rootfs_mode": inv.get("rootfs_mode"), "hosts": [h.name for h in hosts],
                "known_hosts": KNOWN_HOSTS.read_text()}
        (dest / "checkpoint.json").write_text(json.dumps(meta))
        took = _boot_all(inv, hosts, timeout)
    log(f"checkpoint {name}: {len(hosts)} hosts kept and booted again (sshd after {took:.1f} s); "
        f"total {time.monotonic() - start:.1f} s")
    return dest


def restore(name: str, timeout: float = 120.0) -> None:
    """Stop every host, put back its disk as checkpoint `name` kept it, boot it."""
    start = time.monotonic()
    src = CHECKPOINTS / name
    with flock(STATE / ".lock", "lab"):
        inv, hosts = stackfile.running_inventory()
        if not (src / "checkpoint.json").exists():
            raise LabError(f"no lab checkpoint {name!r} (python -m lab checkpoint save {name})")
        meta = json.loads((src / "checkpoint.json").read_text())
        if (meta["image"], meta["rootfs_mode"], meta["hosts"]) != (inv["image"], inv.get("rootfs_mode"),
                                                                   [h.name for h in hosts]):
            raise LabError(f"lab checkpoint {name!r} was taken on another lab (image, root filesystems "
                           "or hosts differ): save it again")
        _stop_all(hosts)
        base = image.ensure_base()
        for h in hosts:
            hd = rootfs.host_dir(h.name)
            if rootfs.is_mounted(h.name):
                run(["umount", str(hd / "rootfs")])
            # an overlay's rootfs is its (now empty) mount point; a copy's is the disk itself
            for part in ("upper", "work", "containers", *(() if meta["rootfs_mode"] == "overlay" else ("rootfs",))):
                remove_tree(hd / part)
            for part in os.listdir(src / h.name):
                _copy(src / h.name / part, hd / part)
            if meta["rootfs_mode"] == "overlay":
                rootfs.mount_overlay(base, hd)
        replace_known_hosts(meta["known_hosts"])
        took = _boot_all(inv, hosts, timeout)
    log(f"restored checkpoint {name}: {len(hosts)} hosts, sshd after {took:.1f} s; "
        f"total {time.monotonic() - start:.1f} s")


def drop(name: str) -> None:
    """Checkpoint `name` gone (no error when there is none)."""
    with flock(STATE / ".lock", "lab"):
        remove_tree(CHECKPOINTS / name)
