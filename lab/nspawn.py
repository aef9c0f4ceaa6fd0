"""Booting and stopping the hosts: cgroups, systemd-nspawn, and finding our processes.

As measured on this kind of machine (PID 1 is not systemd, cgroup v1 hybrid):
before systemd-nspawn starts, its process moves into
its own cgroup in every mounted hierarchy, `<mount>/gpu-fleet-lab/<host>` (v1
controllers with cpuset.cpus/mems set on the parents first, name=systemd, and
the cgroup2 `unified` one); it boots with SYSTEMD_NSPAWN_UNIFIED_HIERARCHY=1
(the controller with 0: `ROLE_HIERARCHY`)
and `--boot --register=no --keep-unit`. Nothing is bound onto the host's
/dev/console or /dev/null: stdin is /dev/null opened for reading, output goes
to the host's log file.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import time
from pathlib import Path

from .common import HOSTS_DIR, LOGS_DIR, LabError, k3s_cache_dir, remove_tree, sha16
from .hosts import BRIDGE, CGROUP_PARENT, Host, machine_name
from .repo import MOUNT_POINT
from .rootfs import rootfs_dir

NSPAWN = "systemd-nspawn"


# --- cgroups -------------------------------------------------------------------

def hierarchies() -> list[Path]:
    """Mount points of every cgroup hierarchy (v1 controllers, name=systemd, cgroup2)."""
    with open("/proc/self/mounts") as f, open("/proc/cgroups") as c:
        return distinct_hierarchies(f.read(), c.read())


def distinct_hierarchies(mounts: str, proc_cgroups: str) -> list[Path]:
    """The first mount point of each hierarchy in a /proc/self/mounts text, in mount order.

    A hierarchy mounted twice is one hierarchy: systemd-nspawn, booting a host with the
    unified hierarchy on a v1 machine, mounts cgroup2 at a /tmp/unifiedXXXXXX of its own for a
    moment. Another host's boot that read that mount made its cgroup there and failed when
    the mount went ("cannot create /tmp/unified.../cgroup.procs: Directory nonexistent").
    A v1 hierarchy is named by its controllers (or name=), which no two hierarchies share."""
    controllers = {line.split()[0] for line in proc_cgroups.splitlines() if line and not line.startswith("#")}
    seen: dict[tuple[str, frozenset[str]], Path] = {}
    for line in mounts.splitlines():
        _src, mp, fstype, opts, *_ = line.split()
        key: tuple[str, frozenset[str]]
        if fstype == "cgroup2":
            key = (fstype, frozenset())
        elif fstype == "cgroup":
            key = (fstype, frozenset(o for o in opts.split(",") if o in controllers or o.startswith("name=")))
        else:
            continue
        seen.setdefault(key, Path(mp))
    return list(seen.values())


def _copy_if_empty(src: Path, dst: Path) -> None:
    if dst.exists() and not dst.read_text().strip():
        dst.write_text(src.read_text().strip() + "\n")


def cgroup_procs_files(name: str) -> list[Path]:
    """Create the host's cgroup in every hierarchy; return the cgroup.procs files to join."""
    files = []
    for h in hierarchies():
        parent = h / CGROUP_PARENT
        leaf = parent / name
        leaf.mkdir(parents=True, exist_ok=True)
        if (h / "cpuset.cpus").exists() and not (h / "cgroup.controllers").exists():
            for f in ("cpuset.cpus", "cpuset.mems"):
                _copy_if_empty(h / f, parent / f)
                _copy_if_empty(parent / f, leaf / f)
        files.append(leaf / "cgroup.procs")
    return files


def _tops(name: str | None) -> list[Path]:
    """The lab's cgroup (or one host's) in every hierarchy."""
    return [h / CGROUP_PARENT / name if name else h / CGROUP_PARENT for h in hierarchies()]


def cgroup_pids(name: str | None = None) -> set[int]:
    """Every process in a lab cgroup (all hosts, or host `name`; all hierarchies)."""
    pids: set[int] = set()
    for top in _tops(name):
        if not top.is_dir():
            continue
        for dirpath, _dirs, files in os.walk(top):
            if "cgroup.procs" in files:
                try:
                    pids.update(int(x) for x in open(os.path.join(dirpath, "cgroup.procs")).read().split())
                except OSError:
                    pass
    return pids


def remove_cgroups(name: str | None = None) -> list[str]:
    """rmdir every lab cgroup (or host `name`'s), deepest first; return the ones that would not go."""
    left = []
    for top in _tops(name):
        if not top.is_dir():
            continue
        for dirpath, _dirs, _files in sorted(os.walk(top), key=lambda w: -len(w[0])):
            try:
                os.rmdir(dirpath)
            except OSError:
                left.append(dirpath)
    return left


# --- processes -------------------------------------------------------------------

def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [a.decode(errors="replace") for a in raw.split(b"\0") if a]


def alive(pid: int) -> bool:
    """Running and not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _references_lab(args: list[str]) -> bool:
    marker = f"--directory={HOSTS_DIR}/"
    return any(marker in a for a in args)


def is_lab_nspawn(pid: int) -> bool:
    """The process (nspawn, or the launcher's shell that runs it) boots one of this lab's rootfs dirs."""
    return alive(pid) and _references_lab(_cmdline(pid))


def launcher_pids() -> set[int]:
    """The lab's launchers: the shells that run each host's nspawn and boot it again when it
    reboots itself (`launch`); the PID the inventory records for a host."""
    return {p for p in lab_nspawn_pids() if _cmdline(p)[:2] == ["/bin/sh", "-c"]}


def lab_nspawn_pids() -> set[int]:
    out = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            pid = int(entry)
            if pid != os.getpid() and is_lab_nspawn(pid):
                out.add(pid)
    return out


# --- boot --------------------------------------------------------------------------

#: what every host gets (besides its name, root directory and the lab repository)
COMMON_FLAGS = ("--boot", "--register=no", "--keep-unit", f"--network-bridge={BRIDGE}",
                "--console=read-only", "--link-journal=no", "--resolv-conf=off", "--timezone=off")
#: by role: /dev/fuse for zfs-fuse (storage) and for the NFS client test double (nodes);
#: nfs-ganesha's FSAL VFS opens files by handle, a syscall nspawn's seccomp filter denies
#: (its clients then get NFS3ERR_PERM). With --keep-unit --register=no no DeviceAllow is needed.
ROLE_FLAGS = {
    "storage": ("--bind=/dev/fuse", "--system-call-filter=open_by_handle_at"),
    "node": ("--bind=/dev/fuse",),
}


#: the lab's K3s parts (kine, kube-apiserver, kubectl: scripts/setup.sh builds them into the
#: machine-wide cache), bound read-only into every node so `python -m lab k3s install` copies
#: no binary (lab/k3s.py)
K3S_MOUNT_POINT = "/srv/lab-k3s"


#: SYSTEMD_NSPAWN_UNIFIED_HIERARCHY by role. The controller runs the web layer's podman, whose
#: limits need cgroup controllers: this machine's are all v1 (its cgroup2 tree has none), so the
#: controller boots with the legacy hierarchy (the v1 controllers, made writable by the image's
#: gpu-fleet-lab-cgroup-rw.service) and podman uses them through its cgroupfs manager. The
#: nodes keep the unified hierarchy plus the v1 controllers Slurm mounts (lab/image.py).
ROLE_HIERARCHY = {"controller": "0"}


def hierarchy(host: Host) -> str:
    return next((ROLE_HIERARCHY[r] for r in host.roles if r in ROLE_HIERARCHY), "1")


def boot_key() -> str:
    """Changes with the flags: `up` reboots a lab booted with other ones."""
    return sha16("boot-v1", COMMON_FLAGS, ROLE_FLAGS, "k3s-bind", K3S_MOUNT_POINT, ROLE_HIERARCHY,
                 "containers-bind")


def role_flags(host: Host) -> list[str]:
    flags: list[str] = []
    for role in host.roles:
        flags += [f for f in ROLE_FLAGS.get(role, ()) if f not in flags]
    if "node" in host.roles:
        flags.append(f"--bind-ro={k3s_cache_dir()}:{K3S_MOUNT_POINT}")
    if "controller" in host.roles:
        # podman's overlay driver cannot stack on the host's overlay rootfs: its storage is a
        # directory of this machine's filesystem (removed with the host on `lab down`)
        store = HOSTS_DIR / host.name / "containers"
        store.mkdir(parents=True, exist_ok=True)
        flags.append(f"--bind={store}:/var/lib/containers")
    return flags


def nspawn_argv(host: Host, repo: Path) -> list[str]:
    return [
        NSPAWN, *COMMON_FLAGS,
        f"--machine={machine_name(host.name)}",
        f"--directory={rootfs_dir(host.name)}",
        f"--bind-ro={repo}:{MOUNT_POINT}",
        *role_flags(host),
    ]


def log_path(name: str) -> Path:
    return LOGS_DIR / f"{name}.log"


#: systemd-nspawn's exit status when the container's systemd rebooted (systemd-nspawn(1))
REBOOTED = 133


def launch(host: Host, repo: Path) -> int:
    """Start the host detached (own session); return the PID of the shell that runs nspawn.

    The shell joins the host's cgroups, then runs nspawn and boots the host again when it exits
    with REBOOTED, as systemd-nspawn@.service does (RestartForceExitStatus=133): a host that
    reboots itself (Slurm's RebootProgram) comes back on the same root filesystem. A poweroff
    or a signal ends the loop."""
    procs = cgroup_procs_files(host.name)
    join = "".join(f"echo $$ > {shlex.quote(str(p))} || exit 97\n" for p in procs)
    script = (join + "while :; do\n  " + shlex.join(nspawn_argv(host, repo)) + "\n  rc=$?\n"
              f'  [ "$rc" -eq {REBOOTED} ] || exit "$rc"\n'
              '  echo "--- lab reboot $(date \'+%Y-%m-%d %H:%M:%S\'): the host rebooted itself"\ndone\n')
    LOGS_DIR.mkdir(parents=True, exist_ok=True)
    env = {
        "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "LANG": "C.UTF-8",
        "SYSTEMD_NSPAWN_UNIFIED_HIERARCHY": hierarchy(host),
    }
    with open(log_path(host.name), "ab") as out, open(os.devnull, "rb") as devnull:
        stamp = time.strftime('%Y-%m-%d %H:%M:%S')
        out.write(f"--- lab boot {stamp}: {shlex.join(nspawn_argv(host, repo))}\n".encode())
        out.flush()
        proc = subprocess.Popen(
            ["/bin/sh", "-c", script], stdin=devnull, stdout=out, stderr=subprocess.STDOUT,
            env=env, start_new_session=True, close_fds=True, cwd="/",
        )
    return proc.pid


# --- stop ----------------------------------------------------------------------------

def _signal(pids: set[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def _terminate(targets: set[int], timeout: float) -> None:
    """SIGTERM the nspawn processes (a clean poweroff inside), SIGKILL after `timeout`."""
    # nspawn turns SIGTERM into a poweroff request to the container's systemd, which a
    # container still early in boot (no handler yet) loses: repeat it every 2 s.
    deadline = time.monotonic() + timeout
    next_term = 0.0
    while time.monotonic() < deadline and any(alive(p) for p in targets):
        if time.monotonic() >= next_term:
            _signal({p for p in targets if alive(p)}, signal.SIGTERM)
            next_term = time.monotonic() + 2.0
        time.sleep(0.2)
    _signal({p for p in targets if alive(p)}, signal.SIGKILL)


def _reap(name: str | None, nspawn_pids) -> None:
    """Kill what is left in the lab's cgroups (or host `name`'s), then remove them."""
    # A host whose nspawn died (SIGKILL, crash) keeps running in its cgroups: kill it there.
    deadline = time.monotonic() + 15
    while True:
        left = {p for p in cgroup_pids(name) | nspawn_pids() if alive(p)}
        if not left:
            break
        if time.monotonic() > deadline:
            raise LabError(f"lab processes would not die: {sorted(left)[:20]}")
        _signal(left, signal.SIGKILL)
        time.sleep(0.2)
    time.sleep(0.1)
    left_cg = remove_cgroups(name)
    if left_cg:
        time.sleep(1)
        left_cg = remove_cgroups(name)
    if left_cg:
        raise LabError(f"could not remove lab cgroups: {', '.join(left_cg[:5])}")


def kill_all(recorded: set[int]) -> None:
    """Kill every lab host outright (SIGKILL, no poweroff inside), then what is left in a lab
    cgroup, and remove the cgroups. For `lab down` only, which throws the hosts' root
    filesystems away, so a clean poweroff kept nothing (the default lab: 3.6 -> 1.2 s)."""
    _signal({p for p in recorded if is_lab_nspawn(p)} | lab_nspawn_pids(), signal.SIGKILL)
    _reap(None, lab_nspawn_pids)


def host_nspawn_pids(name: str) -> set[int]:
    marker = f"--directory={rootfs_dir(name)}"
    return {p for p in lab_nspawn_pids() if marker in _cmdline(p)}


def stop_host(name: str, timeout: float = 20.0) -> None:
    """Stop one host (a clean poweroff inside, SIGKILL after `timeout`), then what is left in its
    cgroup; its root filesystem stays (mounted)."""
    _terminate(host_nspawn_pids(name), timeout)
    _reap(name, lambda: host_nspawn_pids(name))
    prop = Path("/run/systemd/nspawn/propagate") / name  # left behind by a killed nspawn
    if prop.is_dir():
        remove_tree(prop)
