"""Paths, logging, command helpers and locks shared by the lab modules."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator, Sequence

ROOT = Path(__file__).resolve().parent.parent
STATE = ROOT / ".state" / "lab"
HOSTS_DIR = STATE / "hosts"
LOGS_DIR = STATE / "logs"
KEY = STATE / "id_ed25519"
KNOWN_HOSTS = STATE / "known_hosts"
INVENTORY = STATE / "inventory.json"
CHECKPOINTS = STATE / "checkpoints"
STACK_FILE = ROOT / "stacks" / "Pulumi.lab.yaml"


class LabError(Exception):
    """A lab step failed; the message says which and where to look."""


def log(msg: str) -> None:
    try:
        print(f"[lab {time.strftime('%H:%M:%S')}] {msg}", file=sys.stdout, flush=True)
    except (BrokenPipeError, ValueError):  # a closed pipe must not fail (or undo) the lab
        pass


def rel(path: Path) -> str:
    """A path relative to the repo root when it lies inside it."""
    try:
        return str(Path(path).relative_to(ROOT))
    except ValueError:
        return str(path)


def cache_dir() -> Path:
    """The machine-wide cache (`$GPU_FLEET_TOOL_CACHE/lab`), as scripts/setup.sh picks it."""
    base = Path(os.environ.get("GPU_FLEET_TOOL_CACHE") or "/var/cache/gpu-fleet")
    for cand in (base, Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gpu-fleet"):
        try:
            (cand / "lab").mkdir(parents=True, exist_ok=True)
            if os.access(cand / "lab", os.W_OK):
                os.chmod(cand / "lab", 0o755)
                return cand / "lab"
        except OSError:
            continue
    raise LabError(f"no writable cache directory ({base} or ~/.cache/gpu-fleet)")


def k3s_cache_dir() -> Path:
    """Where scripts/setup.sh caches the lab's K3s parts (`<cache>/k3s-lab/<key>/`), made if
    missing so the nodes can bind it before anything is built there."""
    d = cache_dir().parent / "k3s-lab"
    d.mkdir(parents=True, exist_ok=True)
    return d


def sha16(*parts: object) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(repr(p).encode())
        h.update(b"\0")
    return h.hexdigest()[:16]


def _tail(text: str | bytes | None, n: int = 2000) -> str:
    if text is None:
        return ""
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    return text[-n:].strip()


def run(
    argv: Sequence[str],
    *,
    check: bool = True,
    input: str | None = None,
    timeout: float | None = None,
    cwd: Path | None = None,
    env: dict | None = None,
) -> subprocess.CompletedProcess:
    """Run a command, capturing output; raise LabError naming it on failure."""
    try:
        cp = subprocess.run(
            list(argv), input=input, capture_output=True, text=True,
            timeout=timeout, cwd=cwd, env=env,
        )
    except subprocess.TimeoutExpired as e:
        raise LabError(f"timed out after {timeout} s: {shlex.join(argv)}\n{_tail(e.stdout)}{_tail(e.stderr)}") from None
    except FileNotFoundError:
        raise LabError(f"command not found: {argv[0]} (run scripts/setup.sh as root)") from None
    if check and cp.returncode != 0:
        raise LabError(
            f"command failed (exit {cp.returncode}): {shlex.join(argv)}\n"
            f"{_tail(cp.stdout)}\n{_tail(cp.stderr)}".rstrip()
        )
    return cp


def run_with_progress(argv: Sequence[str], logfile: Path, label: str, every: float = 15.0,
                      env: dict | None = None) -> None:
    """Run a long command with output to `logfile`; print a heartbeat with its last line."""
    start = time.monotonic()
    logfile.parent.mkdir(parents=True, exist_ok=True)
    with open(logfile, "wb") as out:
        proc = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, env=env)
        last = start
        while proc.poll() is None:
            time.sleep(0.5)
            now = time.monotonic()
            if now - last >= every:
                last = now
                log(f"  {label}: {int(now - start)} s ... {last_line(logfile)}")
    if proc.returncode != 0:
        raise LabError(f"{label} failed (exit {proc.returncode}); see {logfile}:\n"
                       + _tail(logfile.read_bytes(), 1500))


def last_line(path: Path) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 400))
            lines = [x for x in f.read().decode(errors="replace").splitlines() if x.strip()]
        return lines[-1].strip()[:120] if lines else ""
    except OSError:
        return ""


@contextlib.contextmanager
def flock(path: Path, what: str) -> Iterator[None]:
    """An exclusive lock file; released by the kernel when the process dies."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log(f"waiting for another lab command ({what} lock {path})")
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def mounts_under(path: Path) -> list[str]:
    """Mount points at or below `path` (host mount namespace), deepest first."""
    base = os.path.realpath(path)
    found = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            mp = line.split()[4].encode().decode("unicode_escape")
            if mp == base or mp.startswith(base.rstrip("/") + "/"):
                found.append(mp)
    return sorted(set(found), key=len, reverse=True)


def unmount_all(path: Path) -> None:
    for mp in mounts_under(path):
        if run(["umount", mp], check=False).returncode != 0:
            run(["umount", "-l", mp], check=False)
    left = mounts_under(path)
    if left:
        raise LabError(f"could not unmount {', '.join(left)}")


def remove_tree(path: Path) -> None:
    """rm -rf that never crosses into a mounted filesystem (unmounts first)."""
    if not os.path.lexists(path):
        return
    unmount_all(path)
    run(["rm", "-rf", "--one-file-system", "--", str(path)])


def write_file(root: Path, relpath: str, content: str | bytes, mode: int = 0o644,
               uid: int = 0, gid: int = 0) -> None:
    """Write a file inside a container root without following a symlink out of it."""
    target = root / relpath.lstrip("/")
    parent = target.parent
    cur = root
    for part in parent.relative_to(root).parts:
        cur = cur / part
        if cur.is_symlink():
            raise LabError(f"refusing to write through symlink {cur}")
        if not cur.exists():
            cur.mkdir(mode=0o755)
    if target.is_symlink() or (target.exists() and not target.is_file()):
        target.unlink()
    data = content.encode() if isinstance(content, str) else content
    tmp = target.with_name(f".{target.name}.lab-tmp")
    with open(tmp, "wb") as f:
        f.write(data)
    os.chmod(tmp, mode)
    os.chown(tmp, uid, gid)
    os.replace(tmp, target)


def check_tools(names: Sequence[str]) -> None:
    missing = [t for t in names if shutil.which(t) is None]
    if missing:
        raise LabError(f"missing tools: {', '.join(missing)} (run scripts/setup.sh as root; it "
                       "installs debootstrap systemd-container zstd openssh-client dpkg-dev iproute2)")


def require_root() -> None:
    if os.geteuid() != 0:
        raise LabError("the lab needs root (systemd-nspawn, mounts, cgroups, a bridge): "
                       "run `sudo .venv/bin/python -m lab ...`")
