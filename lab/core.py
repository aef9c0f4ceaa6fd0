"""`up`, `down` and `status`."""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from . import fake_nvml, image, net, nspawn, repo, rootfs, stackfile, storage
from .common import (
    CHECKPOINTS, HOSTS_DIR, INVENTORY, KEY, KNOWN_HOSTS, LOGS_DIR, STACK_FILE, STATE, LabError, cache_dir,
    check_tools, flock, last_line, log, rel, remove_tree, require_root,
)
from .hosts import BRIDGE, DEFAULT_NODES, Host, lab_hosts, machine_name
from .ssh import ensure_lab_key, ssh_ok

TOOLS = ["systemd-nspawn", "ssh", "ssh-keygen", "ip", "zstd", "tar", "mount"]
INVENTORY_VERSION = 1


# --- health ------------------------------------------------------------------------

def _expected(inv: dict, nodes: int) -> list[str]:
    """Why the recorded lab is not the lab `up` would build now (empty: it is)."""
    why = []
    if inv.get("version") != INVENTORY_VERSION:
        why.append("inventory format changed")
    if inv.get("state") != "up":
        why.append(f"recorded state is {inv.get('state')!r}")
    if inv.get("nodes") != nodes:
        why.append(f"{inv.get('nodes')} node(s) up, {nodes} asked for")
    if inv.get("image") != image.image_key():
        why.append("the image changed")
    if inv.get("repo") != repo.repo_key():
        why.append("the package list changed")
    if inv.get("boot") != nspawn.boot_key():
        why.append("the hosts' nspawn flags changed")
    if [h.get("name") for h in inv.get("hosts", [])] != [h.name for h in lab_hosts(nodes)]:
        why.append("different hosts")
    return why


def host_health(h: dict) -> tuple[bool, bool]:
    pid = h.get("pid")
    pid_ok = bool(pid and nspawn.is_lab_nspawn(int(pid)))
    return pid_ok, pid_ok and ssh_ok(h["address"])


def unhealthy(inv: dict) -> list[str]:
    problems = []
    if not net.bridge_exists():
        problems.append(f"bridge {BRIDGE} missing")
    if not KEY.exists() or not KNOWN_HOSTS.exists():
        problems.append("lab key or known_hosts missing")
    hosts = inv.get("hosts", [])
    with ThreadPoolExecutor(max_workers=max(1, len(hosts))) as ex:
        results = list(ex.map(host_health, hosts))
    for h, (pid_ok, ssh_up) in zip(hosts, results):
        if not pid_ok:
            problems.append(f"{h['name']}: systemd-nspawn (pid {h.get('pid')}) is not running")
        elif not ssh_up:
            problems.append(f"{h['name']}: ssh to {h['address']} fails")
    return problems


def leftovers() -> bool:
    return bool(HOSTS_DIR.exists() or net.bridge_exists() or nspawn.lab_nspawn_pids()
                or nspawn.cgroup_pids() or INVENTORY.exists())


# --- up --------------------------------------------------------------------------

def up(nodes: int = DEFAULT_NODES, timeout: float = 120.0, rootfs_mode: str | None = None) -> dict:
    require_root()
    check_tools(TOOLS)
    rootfs_mode = rootfs_mode or os.environ.get("GPU_FLEET_LAB_ROOTFS", "auto")
    if rootfs_mode not in ("auto", *rootfs.MODES):
        raise LabError(f"rootfs mode must be auto, overlay or copy (got {rootfs_mode!r})")
    rootfs.writable_on_tmpfs()  # GPU_FLEET_LAB_TMPFS checked before anything is touched
    hosts = lab_hosts(nodes)
    start = time.monotonic()
    with flock(STATE / ".lock", "lab"):
        ensure_lab_key()
        inv = stackfile.read_inventory()
        if inv is not None:
            why = _expected(inv, nodes) or unhealthy(inv)
            if not why:
                finish_stack(nodes)
                ensure_doubles(hosts)
                log(f"lab already up and healthy: {len(hosts)} hosts "
                    f"(checked in {time.monotonic() - start:.1f} s)")
                return inv
            log(f"restarting the lab: {'; '.join(why)}")
            _down(quiet=True)
        elif leftovers():
            log("cleaning up what a previous lab left behind")
            _down(quiet=True)
        try:
            return _boot(hosts, nodes, timeout, rootfs_mode, start)
        except BaseException:
            if os.environ.get("GPU_FLEET_LAB_KEEP_FAILED") != "1":
                log("boot failed: stopping the lab (logs kept in "
                    f"{rel(LOGS_DIR)}; GPU_FLEET_LAB_KEEP_FAILED=1 keeps the hosts)")
                try:
                    _down(quiet=True, keep_logs=True)
                except Exception as e:  # report the boot error, not this one
                    log(f"cleanup after the failed boot also failed: {e}")
            raise


def prepare() -> None:
    """The image and package repository, cached machine-wide (what `up` builds first): a second
    lab in a network namespace without the mirrors boots from them (scripts/lab-ns.sh)."""
    require_root()
    check_tools(TOOLS)
    start = time.monotonic()
    image.ensure_base()
    repo.ensure_repo()
    log(f"image and repository ready ({time.monotonic() - start:.1f} s)")


def _boot(hosts: list[Host], nodes: int, timeout: float, rootfs_mode: str, start: float) -> dict:
    if not Path("/dev/fuse").exists():
        raise LabError("/dev/fuse is missing: the storage host (zfs-fuse) and the nodes (the NFS "
                       "client test double) need it; run `modprobe fuse`")
    base = image.ensure_base()
    repo_dir = repo.ensure_repo()
    t_prep = time.monotonic()
    net.ensure_bridge()
    if LOGS_DIR.exists():  # keep the previous boot's console log as <host>.log.1
        for p in LOGS_DIR.glob("*.log"):
            os.replace(p, p.with_name(p.name + ".1"))
    mode = rootfs_mode
    pubkeys: dict[str, str] = {}
    lab_pub = KEY.with_suffix(".pub").read_text()
    for h in hosts:
        mode = rootfs.prepare(h, base, mode)
        pubkeys[h.name] = rootfs.personalize(h, hosts, lab_pub)
    write_known_hosts(hosts, pubkeys)
    on = ", writable layers on tmpfs" if mode == "overlay" and rootfs.writable_on_tmpfs() else ""
    log(f"prepared {len(hosts)} root filesystems ({mode}{on}) in {time.monotonic() - t_prep:.1f} s; booting")

    inv = {
        "version": INVENTORY_VERSION, "state": "booting", "nodes": nodes,
        "image": image.image_key(), "repo": repo.repo_key(), "boot": nspawn.boot_key(),
        "rootfs_mode": mode,
        "bridge": BRIDGE, "identity_file": rel(KEY), "known_hosts_file": rel(KNOWN_HOSTS),
        "hosts": [],
    }
    pids: dict[str, int] = {}
    t_boot = time.monotonic()
    for h in hosts:
        pids[h.name] = nspawn.launch(h, repo_dir)
        inv["hosts"] = stackfile.inventory_hosts(hosts, pids)
        stackfile.write_inventory(inv)
    with ThreadPoolExecutor(max_workers=len(hosts)) as ex:
        ready = list(ex.map(lambda h: wait_for_ssh(h, pids[h.name], t_boot, timeout), hosts))
    ensure_doubles(hosts)
    inv["state"] = "up"
    stackfile.write_inventory(inv)
    finish_stack(nodes)
    times = ", ".join(f"{h.name} {t:.1f}s" for h, t in zip(hosts, ready))
    log(f"lab up: {len(hosts)} hosts booted to sshd in {max(ready):.1f} s ({times}); "
        f"total {time.monotonic() - start:.1f} s")
    for h in hosts:
        log(f"  {h.name:8} {h.address:14} pid {pids[h.name]:<7} {','.join(h.roles)}")
    return inv


def ensure_doubles(hosts: list[Host]) -> None:
    """What the hosts get after boot, each idempotent, side by side: the GPU test double on the
    nodes (fake_nvml), the storage host's pool and the NFS client test double (storage)."""
    with ThreadPoolExecutor(max_workers=2) as ex:
        for f in [ex.submit(fake_nvml.ensure, hosts), ex.submit(storage.ensure, hosts)]:
            f.result()


def wait_for_ssh(h: Host, pid: int, t0: float, timeout: float) -> float:
    logfile = nspawn.log_path(h.name)
    while True:
        if ssh_ok(h.address, connect_timeout=2):
            return time.monotonic() - t0
        if not nspawn.alive(pid):
            raise LabError(f"host {h.name} ({h.address}): systemd-nspawn exited during boot; "
                           f"see {rel(logfile)} (last line: {last_line(logfile)!r})")
        if time.monotonic() - t0 > timeout:
            raise LabError(f"host {h.name} ({h.address}): sshd not reachable after {timeout:g} s; "
                           f"see {rel(logfile)} (last line: {last_line(logfile)!r})")
        time.sleep(0.25)


def write_known_hosts(hosts: list[Host], pubkeys: dict[str, str]) -> None:
    lines = []
    for h in hosts:
        keytype, keydata = pubkeys[h.name].split()[:2]
        lines.append(f"{h.name},{h.address} {keytype} {keydata}")
    replace_known_hosts("\n".join(lines) + "\n")


def replace_known_hosts(text: str) -> None:
    """known_hosts as `text`, replaced whole (ssh never reads half of it)."""
    tmp = KNOWN_HOSTS.with_name(KNOWN_HOSTS.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, KNOWN_HOSTS)


def finish_stack(nodes: int) -> None:
    if stackfile.write_stack(nodes):
        log(f"wrote {rel(STACK_FILE)}")
    stackfile.validate_stack()


# --- reboot, reimage ---------------------------------------------------------------

def reboot(name: str, timeout: float = 120.0) -> float:
    """Restart one host of the running lab: a clean poweroff, then a boot of the same root
    filesystem (what it wrote stays, as on a real reboot). Returns the seconds to sshd."""
    return _restart(name, timeout, reimage=False)


def reimage(name: str, timeout: float = 120.0) -> float:
    """Re-image one host in place, as a wiped and reinstalled machine under the same name and
    address: stopped, its root filesystem made again from the base image (everything it
    wrote is gone), a new ssh host key that the admin (the lab) enters in known_hosts, then
    booted with the lab's doubles. Returns the seconds to sshd."""
    return _restart(name, timeout, reimage=True)


def _restart(name: str, timeout: float, reimage: bool) -> float:
    """Stop one host of the running lab, re-image its root filesystem if asked, boot it."""
    require_root()
    with flock(STATE / ".lock", "lab"):
        inv, hosts = stackfile.running_inventory()
        host = next((h for h in hosts if h.name == name), None)
        if host is None:
            raise LabError(f"no lab host {name!r} (hosts: {', '.join(h.name for h in hosts)})")
        repo_dir = cache_dir() / f"repo-{inv['repo']}"
        if not (repo_dir / "Packages.gz").exists():
            raise LabError(f"the lab repository {repo_dir} is gone: run `python -m lab up`")
        t_stop = time.monotonic()
        nspawn.stop_host(name)
        if reimage:
            rootfs.prepare(host, image.ensure_base(), inv.get("rootfs_mode", "auto"))
            pub = rootfs.personalize(host, hosts, KEY.with_suffix(".pub").read_text())
            keys = {line.split(",", 1)[0]: line.split(" ", 1)[1] for line in KNOWN_HOSTS.read_text().splitlines()}
            write_known_hosts(hosts, {**keys, name: pub})
        t_boot = time.monotonic()
        entry = next(h for h in inv["hosts"] if h["name"] == name)
        entry["pid"] = nspawn.launch(host, repo_dir)
        stackfile.write_inventory(inv)
        took = wait_for_ssh(host, entry["pid"], t_boot, timeout)
        if reimage:
            ensure_doubles([host])
            log(f"re-imaged {name}: a fresh root filesystem and host key, sshd after {took:.1f} s "
                f"(total {time.monotonic() - t_stop:.1f} s, pid {entry['pid']})")
        else:
            log(f"rebooted {name}: stopped in {t_boot - t_stop:.1f} s, sshd after {took:.1f} s "
                f"(pid {entry['pid']})")
        return took


# --- down ---------------------------------------------------------------------------

def down(keep_checkpoints: bool = False) -> None:
    """Every host stopped and its state removed; the checkpoints too unless kept (a test
    that makes the hosts again from the image restores its deployed fleet from one after)."""
    require_root()
    with flock(STATE / ".lock", "lab"):
        _down(quiet=False)
        if not keep_checkpoints:
            remove_tree(CHECKPOINTS)


def _down(quiet: bool, keep_logs: bool = True) -> None:
    start = time.monotonic()
    inv = stackfile.read_inventory() or {}
    recorded = {int(h["pid"]) for h in inv.get("hosts", []) if h.get("pid")}
    names = {h["name"] for h in inv.get("hosts", []) if h.get("name")}
    if HOSTS_DIR.exists():
        names |= {p.name for p in HOSTS_DIR.iterdir() if p.is_dir()}
    had_any = leftovers()
    nspawn.kill_all(recorded)
    if HOSTS_DIR.exists():
        remove_tree(HOSTS_DIR)
    for n in names:  # nspawn's per-machine propagation dir, left behind by a killed nspawn
        prop = Path("/run/systemd/nspawn/propagate") / machine_name(n)
        if prop.is_dir():
            remove_tree(prop)
    net.delete_bridge()
    for p in (INVENTORY, KNOWN_HOSTS):
        if p.exists():
            p.unlink()
    if not keep_logs and LOGS_DIR.exists():
        remove_tree(LOGS_DIR)
    if not quiet:
        if had_any:
            log(f"lab down ({time.monotonic() - start:.1f} s); the cached image and repository stay")
        else:
            log("lab already down")


# --- status ----------------------------------------------------------------------------

def status() -> int:
    inv = stackfile.read_inventory()
    if inv is None:
        extra = " (but leftovers exist: run `python -m lab down`)" if os.geteuid() == 0 and leftovers() else ""
        print(f"lab is down{extra}")
        return 1
    hosts = inv.get("hosts", [])
    with ThreadPoolExecutor(max_workers=max(1, len(hosts))) as ex:
        results = list(ex.map(host_health, hosts))
    ok = inv.get("state") == "up"
    print(f"lab {inv.get('state')}: {len(hosts)} hosts, rootfs {inv.get('rootfs_mode')}, "
          f"bridge {BRIDGE} {'up' if net.bridge_exists() else 'MISSING'}")
    for h, (pid_ok, ssh_up) in zip(hosts, results):
        ok = ok and pid_ok and ssh_up
        print(f"{h['name']:8} {h['address']:14} pid {str(h.get('pid')):<7} "
              f"{'alive' if pid_ok else 'DEAD '}  ssh {'ok' if ssh_up else 'UNREACHABLE'}")
    return 0 if ok else 1
