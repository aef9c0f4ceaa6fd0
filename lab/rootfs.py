"""Per-host root filesystems: an overlay on the shared base image (or a copy), personalized.

Each host's state lives in `.state/lab/hosts/<name>/`: `upper/` and `work/` of
its overlay (the lower layer is the cached base image, never written) and the
merged `rootfs/` systemd-nspawn boots. Where overlay mounts fail, `rootfs/` is
a full copy of the base instead. With an overlay, the host's directory is a tmpfs of its own
on a machine with the memory for it (`writable_on_tmpfs`). Before boot each host gets its own
machine-id, hostname, /etc/hosts, static address (systemd-networkd on host0),
ssh host key and the lab key in root's, fleetadmin's and fleetnopw's
authorized_keys.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

from .common import HOSTS_DIR, LabError, remove_tree, run, write_file
from .hosts import PREFIXLEN, Host, etc_hosts
from .image import ADMIN_UID, NOPW_UID

MODES = ("overlay", "copy")

#: Each host's writable layer (overlay upper and work, the controller's podman store) on a tmpfs:
#: the hosts' file churn (dpkg unpacking, journald, MariaDB, Slurm's state) then costs no ext4
#: journal or inode allocation on this machine's disk, which perf showed in every lab `up`.
#: tests/lab/test_accounting.py on a quiet machine: 337 -> 294 s, 341 -> 298 CPU-s. The size is a
#: cap, not a reservation (a lab's five hosts write about 1 GiB in the whole suite).
TMPFS_SIZE = "4g"
#: below this much memory a machine keeps the hosts' layers on disk
TMPFS_MIN_MEMORY_KB = 16 * 2**20


def memory_kb() -> int:
    """The machine's memory (MemTotal)."""
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 1024


def writable_on_tmpfs() -> bool:
    """GPU_FLEET_LAB_TMPFS: 1, 0, or auto (the default: on with 16 GiB of memory or more)."""
    choice = os.environ.get("GPU_FLEET_LAB_TMPFS", "auto")
    if choice not in ("auto", "0", "1"):
        raise LabError(f"GPU_FLEET_LAB_TMPFS must be auto, 0 or 1 (got {choice!r})")
    return choice == "1" or (choice == "auto" and memory_kb() >= TMPFS_MIN_MEMORY_KB)


def host_dir(name: str) -> Path:
    return HOSTS_DIR / name


def rootfs_dir(name: str) -> Path:
    return host_dir(name) / "rootfs"


def mount_overlay(base: Path, hd: Path) -> None:
    for d in ("upper", "work", "rootfs"):
        (hd / d).mkdir(parents=True, exist_ok=True)
    opts = f"lowerdir={base},upperdir={hd / 'upper'},workdir={hd / 'work'}"
    run(["mount", "-t", "overlay", "overlay", "-o", opts, str(hd / "rootfs")])


def copy_base(base: Path, hd: Path) -> None:
    (hd / "rootfs").mkdir(parents=True, exist_ok=True)
    run(["cp", "-a", "--reflink=auto", f"{base}/.", str(hd / "rootfs")])


def prepare(host: Host, base: Path, mode: str) -> str:
    """Create the host's rootfs in `mode` ('auto' tries overlay first); return the mode used."""
    hd = host_dir(host.name)
    on_tmpfs = writable_on_tmpfs()  # a wrong setting is refused here, not taken for a failed mount
    remove_tree(hd)  # unmounts a tmpfs of an earlier boot too
    hd.mkdir(parents=True)
    if mode in ("auto", "overlay"):
        try:
            if on_tmpfs:
                run(["mount", "-t", "tmpfs", "-o", f"size={TMPFS_SIZE},mode=0755", f"gpu-fleet-lab-{host.name}",
                     str(hd)])
            mount_overlay(base, hd)
            return "overlay"
        except LabError:
            if mode == "overlay":
                raise
            remove_tree(hd)
            hd.mkdir(parents=True)
    copy_base(base, hd)
    return "copy"


def new_host_key(host: Host) -> tuple[bytes, str]:
    """A fresh ed25519 host key (private bytes, public line) made on this machine."""
    kd = host_dir(host.name) / "hostkey"
    kd.mkdir(mode=0o700, exist_ok=True)
    key = kd / "ssh_host_ed25519_key"
    for p in (key, key.with_suffix(".pub")):
        if p.exists():
            p.unlink()
    run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"root@{host.name}", "-f", str(key)])
    return key.read_bytes(), key.with_suffix(".pub").read_text().strip()


def personalize(host: Host, hosts: list[Host], lab_pubkey: str) -> str:
    """Write the host's identity into its rootfs; return its public host key line."""
    root = rootfs_dir(host.name)
    write_file(root, "etc/hostname", host.name + "\n")
    write_file(root, "etc/hosts", etc_hosts(hosts))
    write_file(root, "etc/machine-id", uuid.uuid4().hex + "\n", 0o444)
    write_file(root, "etc/systemd/network/10-host0.network", (
        "# gpu-fleet lab: static address on the lab bridge\n"
        "[Match]\nName=host0\n\n"
        f"[Network]\nAddress={host.address}/{PREFIXLEN}\n"
        "LinkLocalAddressing=no\nIPv6AcceptRA=no\n"
    ))
    priv, pub = new_host_key(host)
    write_file(root, "etc/ssh/ssh_host_ed25519_key", priv, 0o600)
    write_file(root, "etc/ssh/ssh_host_ed25519_key.pub", pub + "\n", 0o644)
    auth = lab_pubkey.strip() + "\n"
    write_file(root, "root/.ssh/authorized_keys", auth, 0o600)
    for user, uid in (("fleetadmin", ADMIN_UID), ("fleetnopw", NOPW_UID)):
        write_file(root, f"home/{user}/.ssh/authorized_keys", auth, 0o600, uid, uid)
    return pub


def is_mounted(name: str) -> bool:
    return os.path.ismount(rootfs_dir(name))


def remove_all_hosts() -> None:
    if HOSTS_DIR.exists():
        remove_tree(HOSTS_DIR)
