"""The lab's storage: what the storage layer finds already there, as an admin would leave it.

The product's storage layer (issue 13) never creates or destroys a pool, and installs the NFS
server and client packages itself. So `python -m lab up` plays the admin, and puts the test
double of the kernel NFS client on the nodes:

  storage  zfs-fuse (real ZFS code in user space: the lab's stand-in for the ZFS kernel
           module), run under the lab's drop-in (ZFS_FUSE_DROPIN; installed before the
           package, whose postinst starts the service), and the pool `ai`, a mirror of two
           2 GiB sparse files in /var/lib/zfs-vdev, created once, imported on every boot
  nodes    /usr/local/bin/nfsfuse, the FUSE NFS client double (tests/doubles/nfsfuse)

It creates no dataset and installs no NFS server or client package (they are in the lab
repository: lab/packages.txt). Both hosts get /dev/fuse from their nspawn flags
(nspawn.ROLE_FLAGS). Idempotent: one SSH round trip per host when nothing is missing.

For tests: `export_pool()` / `import_pool()` make and undo the seed's failure (the pool not
imported, its mountpoints left as empty directories on the root disk), `pool_health()`
reads the pool's state; `python -m lab reboot storage` (core.reboot) restarts the host.
"""

from __future__ import annotations

import hashlib
import shlex
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .common import ROOT, LabError, log
from .hosts import Host, lab_hosts
from .ssh import ssh_argv

POOL = "ai"
VDEV_DIR = "/var/lib/zfs-vdev"
VDEV_SIZE = "2G"
DROPIN_PATH = "/etc/systemd/system/zfs-fuse.service.d/lab.conf"
MOUNT_HELPER_PATH = "/usr/local/sbin/zfs-mount-lab"
HOST_SCRIPT = Path(__file__).with_name("storage-host.sh")
MOUNT_HELPER = Path(__file__).with_name("zfs-mount-lab.sh")
NFSFUSE = ROOT / "tests" / "doubles" / "nfsfuse" / "nfsfuse"
NFSFUSE_PATH = "/usr/local/bin/nfsfuse"

ZFS_FUSE_DROPIN = f"""\
# gpu-fleet lab (lab/storage.py): Debian's unit runs /etc/init.d/zfs-fuse, which in a
# container fails to write oom_score_adj (exit 3) and leaves the daemon orphaned; zfs-fuse
# never forks under systemd (Type=forking hangs; the stock unit has TimeoutSec=0); a stale
# pid file or socket aborts the next start. Run the daemon in the foreground instead.
[Service]
Type=simple
PIDFile=
ExecStartPre=/bin/rm -f /run/zfs-fuse.pid /run/zfs/zfs_socket
ExecStart=
ExecStart=/sbin/zfs-fuse --no-daemon
ExecStartPost={MOUNT_HELPER_PATH}
ExecStop=
ExecStop=/sbin/zfs unmount -a
KillMode=control-group
TimeoutStartSec=60
TimeoutStopSec=60
LimitMEMLOCK=infinity
LimitSTACK=infinity"""


def storage_host(hosts: list[Host] | None = None) -> Host:
    return next(h for h in hosts or lab_hosts() if "storage" in h.roles)


def ssh(host: Host, script: str, stdin: bytes = b"", timeout: float = 120,
        check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run `script` (a shell command line) on a lab host as root; output as text."""
    try:
        raw = subprocess.run([*ssh_argv(host.address, connect_timeout=10), "--", script],
                             input=stdin, capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise LabError(f"host {host.name}: timed out after {timeout:g} s: {script[:200]}") from None
    p = subprocess.CompletedProcess(raw.args, raw.returncode, raw.stdout.decode(errors="replace"),
                                    raw.stderr.decode(errors="replace"))
    if check and p.returncode != 0:
        raise LabError(f"host {host.name}: exit {p.returncode} from {script[:200]!r}:\n"
                       f"{p.stdout.strip()[-1500:]}\n{p.stderr.strip()[-1500:]}".rstrip())
    return p


# --- lab up ----------------------------------------------------------------------------

def _admin(h: Host) -> list[str]:
    """Run storage-host.sh; return the lines saying what it changed."""
    args = [POOL, VDEV_DIR, VDEV_SIZE, ZFS_FUSE_DROPIN, MOUNT_HELPER.read_text().rstrip("\n"),
            DROPIN_PATH, MOUNT_HELPER_PATH]
    p = ssh(h, shlex.join(["sh", "-c", HOST_SCRIPT.read_text(), "sh", *args]), timeout=300)
    lines = p.stdout.strip().splitlines()
    if not lines or lines[-1].split() != [POOL, "ONLINE"]:
        raise LabError(f"host {h.name}: pool {POOL} is not ONLINE after the lab's set-up: "
                       f"{p.stdout.strip()}\n{p.stderr.strip()}\n{pool_status(h)}")
    return lines[:-1]


def _nfsfuse(h: Host) -> list[str]:
    data = NFSFUSE.read_bytes()
    sha = hashlib.sha256(data).hexdigest()
    script = (f"if echo '{sha}  {NFSFUSE_PATH}' | sha256sum -c --status 2>/dev/null; "
              f"then cat >/dev/null; else install -D -m 0755 /dev/stdin {NFSFUSE_PATH} "
              f"&& echo 'installed {NFSFUSE_PATH}'; fi")
    out = ssh(h, script, stdin=data).stdout.strip()
    return [out] if out else []


def ensure(hosts: list[Host]) -> None:
    """The admin's part on the storage host and the NFS client double on every node."""
    start = time.monotonic()
    jobs = [(h, _admin) for h in hosts if "storage" in h.roles]
    jobs += [(h, _nfsfuse) for h in hosts if "node" in h.roles]
    with ThreadPoolExecutor(max_workers=max(1, len(jobs))) as ex:
        results = list(ex.map(lambda j: (j[0], j[1](j[0])), jobs))
    by_line: dict[str, list[str]] = {}  # "installed /usr/local/bin/nfsfuse" -> its nodes
    for h, lines in results:
        for line in filter(None, map(str.strip, lines)):
            by_line.setdefault(line, []).append(h.name)
    if by_line:
        did = "; ".join(f"{', '.join(names)}: {line}" for line, names in by_line.items())
        log(f"{did} ({time.monotonic() - start:.1f} s)")


# --- for tests: the pool as the seed lost it --------------------------------------------

def pool_status(h: Host | None = None) -> str:
    """`zpool status <pool>` on the storage host (its error text when the pool is not imported)."""
    p = ssh(h or storage_host(), f"zpool status {POOL} 2>&1", check=False)
    return p.stdout.strip()


def pool_health(h: Host | None = None) -> str | None:
    """The pool's health (ONLINE, DEGRADED, ...), or None when it is not imported."""
    p = ssh(h or storage_host(), f"zpool list -H -o health {POOL}", check=False)
    return p.stdout.strip() if p.returncode == 0 else None


def export_pool(h: Host | None = None) -> None:
    """`zpool export ai`: its datasets unmount, their mountpoints stay behind as empty
    directories on the root disk (what the seed's storage host had). Stop the NFS server
    first: while it holds an export the pool is busy (`zpool export -f` then unmounts a dataset
    yet leaves the pool imported and zfs-fuse busy until it restarts)."""
    ssh(h or storage_host(), f"zpool export {POOL}")


def import_pool(h: Host | None = None) -> None:
    """Import the pool again (as `lab up` does when it finds it exported) and mount its
    datasets as a boot does: readonly=on ones read-only, through the lab's mount helper."""
    _admin(h or storage_host())
