#!/usr/bin/python3
"""gpu-fleet guard: drains this node in Slurm when its GPUs are in trouble.

Runs on a GPU node as `gpu-fleet-guard.service` (python3 and the stdlib, plus the pinned pynvml
the GPU runtime layer ships), with its JSON config (`--config`, rendered by the guards layer).
Every `interval_s` it reads each GPU's temperature through NVML and the kernel messages that
arrived, and drains the node (`scontrol update NodeName=... State=DRAIN Reason=...`) when:

- a GPU soaks in heat: at or above `soak_c` for `soak_s` seconds in a row (the budget starts
  again once it cools below), or reaches `hard_c` at once. Seed 004: the machine that powered
  off had sat above 88 C for 417 s; a static alarm on the instant value kills healthy long runs;
- the kernel logs an XID in `drain_xids` (`NVRM: Xid (PCI:0000:3b:00): 79, ...`), since this
  boot: a node whose GPU fell off the bus stays drained until it is rebooted and resumed;
- NVML stops answering, for a GPU or for all, or sees fewer GPUs than the stack declares: the
  guard cannot watch them, so the node takes no new job.

Draining stops new jobs only; the guard never resumes a node (an admin does, after looking).
With `memory` it also keeps the host alive (seed 004: a unified-memory host ran out without the
OOM killer ever acting, and went silent 43 minutes after the first NVRM out-of-memory line):
MemAvailable below `act_mib` for `sustain` samples in a row, or below `warn_mib` with
`nvrm_errors` NV_ERR_NO_MEMORY lines in 60 s, stops the GPU process (NVML's list) with the
largest host footprint whose name no `protect` prefix matches: SIGTERM, SIGKILL after
`grace_s` if the same process (pid and start time) still runs, then `cooldown_s` before the
next. It signals only the exact pid it chose, never by name (seed 004: `pkill -f` matched the
guard's own session). With `dry_run` it records what it would do and drains or stops nothing.
Every event is a JSON line in `event_log`, fsynced (seed 004: a machine that loses power keeps
only what reached the disk). `status_file` says what it sees now (atomically replaced each
sample): what the guards layer reads to prove the guard runs with the config it was given.
The kernel-log reader is a child process (`journalctl -k -b -f`); one that exits is started
again and recorded, and a line cut at a read's end waits for its rest (seed 004's lessons).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Callable, Optional

#: `NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.`
XID_RE = re.compile(r"NVRM: Xid \((?P<dev>[^)]*)\): (?P<xid>\d+)(?:, (?P<rest>.*))?")


def parse_xid(line: str) -> Optional[tuple[int, str, str]]:
    """(XID, device, the rest of the message) of a kernel line, or None."""
    m = XID_RE.search(line)
    if not m:
        return None
    return int(m.group("xid")), m.group("dev"), (m.group("rest") or "").strip()


def config_sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass
class Soak:
    """One GPU's heat budget: seconds in a row at or above soak_c."""

    soak_c: int
    soak_s: int
    hard_c: int
    above_s: float = 0.0
    last: Optional[float] = None

    def update(self, temp_c: int, now: float) -> Optional[str]:
        """Why the GPU trips now (None: it does not). Time is what really elapsed between samples."""
        dt = 0.0 if self.last is None else max(0.0, now - self.last)
        self.last = now
        if temp_c >= self.soak_c:
            self.above_s += dt
        else:
            self.above_s = 0.0
        if temp_c >= self.hard_c:
            return f"{temp_c} C, at or above hard_c {self.hard_c} C"
        if self.above_s >= self.soak_s:
            return (f"{temp_c} C after {self.above_s:.0f} s at or above soak_c {self.soak_c} C "
                    f"(budget {self.soak_s} s)")
        return None


class LineReader:
    """Whole lines from a child process's stdout without blocking; the child is started again
    when it exits (and `restarts` counts it)."""

    def __init__(self, argv: list[str]):
        self.argv = argv
        self.proc: Optional[subprocess.Popen] = None
        self.buf = b""
        self.restarts = 0

    def start(self) -> None:
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     stdin=subprocess.DEVNULL)
        os.set_blocking(self.proc.stdout.fileno(), False)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def lines(self) -> tuple[list[str], bool]:
        """(the complete lines that arrived, whether the child had to be started again)."""
        restarted = False
        if self.proc is None:
            self.start()
        while True:
            try:
                chunk = self.proc.stdout.read(65536)
            except (BlockingIOError, ValueError):
                chunk = None
            if not chunk:
                break
            self.buf += chunk
        *whole, self.buf = self.buf.split(b"\n")
        out = [w.decode("utf-8", "replace") for w in whole]
        if not self.alive():
            # what it wrote before it died was read above; the new one reads this boot's log (or
            # the file) from its start again, the cut line whole with it
            self.buf = b""
            self.proc.stdout.close()
            self.restarts += 1
            restarted = True
            self.start()
        return out, restarted

    def stop(self) -> None:
        if self.alive():
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def kernel_log_argv(source: str) -> list[str]:
    """This boot's kernel messages, then new ones as they come, each stamped with its unix time
    (`1733212345.123456 node07 kernel: NVRM: ...`)."""
    if source == "journal":
        return ["journalctl", "-k", "-b", "-f", "-o", "short-unix", "--no-pager", "-q"]
    return ["tail", "-n", "+1", "-F", source]  # a test double's file, in the same format


def logged_at(line: str) -> Optional[float]:
    """The unix time a `short-unix` line was logged (None: it has no stamp)."""
    try:
        return float(line.split(maxsplit=1)[0])
    except (ValueError, IndexError):
        return None


@dataclass
class Guard:
    """The decisions, apart from NVML, the kernel log and scontrol (given as callables)."""

    cfg: dict
    drain: Callable[[str], tuple[bool, str]]
    record: Callable[[dict], None]
    soaks: dict[int, Soak] = field(default_factory=dict)
    #: the reasons the node was drained for (or, dry, would have been), each acted on once per
    #: condition (a GPU's heat, an XID on a device, NVML): key -> the reason as first written
    tripped: dict[str, str] = field(default_factory=dict)
    pending: dict[str, str] = field(default_factory=dict)
    #: key -> the last failed drain's output
    failed: dict[str, str] = field(default_factory=dict)
    xids_seen: int = 0
    #: held around each drain and its record, so that a stop cannot fall between them
    unstoppable: Callable[[], AbstractContextManager] = nullcontext

    def trip(self, key: str, reason: str, **detail) -> None:
        if key in self.tripped or key in self.pending:
            return
        self.record({"event": "would_drain" if self.cfg["dry_run"] else "trip", "reason": reason, **detail})
        (self.tripped if self.cfg["dry_run"] else self.pending)[key] = reason

    def rearm(self, key: str) -> None:
        """The condition is over (the GPU cooled below soak_c, NVML answers): the next one drains
        again (the node stays drained until an admin resumes it). A drain not yet done is kept."""
        self.tripped.pop(key, None)

    def sample(self, now: float, temps: Optional[dict[int, int]], nvml_error: Optional[str],
               lines: list[str], gpu_errors: Optional[dict[int, str]] = None) -> None:
        t = self.cfg["thermal"]
        gpu_errors = gpu_errors or {}
        if nvml_error is not None:
            self.trip("nvml", f"NVML does not answer ({nvml_error}): the GPUs cannot be watched", nvml=nvml_error)
        else:
            self.rearm("nvml")
            seen, expected = len(temps or {}) + len(gpu_errors), self.cfg.get("gpus")
            if expected is not None and seen < expected:
                self.trip("count", f"NVML sees {seen} of the {expected} GPUs the stack declares", seen=seen)
            else:
                self.rearm("count")
        for i, err in sorted(gpu_errors.items()):
            self.trip(f"lost:{i}", f"GPU {i} does not answer NVML ({err})", gpu=i, nvml=err)
        for i, temp in sorted((temps or {}).items()):
            self.rearm(f"lost:{i}")
            soak = self.soaks.setdefault(i, Soak(t["soak_c"], t["soak_s"], t["hard_c"]))
            why = soak.update(temp, now)
            if why:
                self.trip(f"heat:{i}", f"GPU {i} heat: {why}", gpu=i, temp_c=temp, above_s=round(soak.above_s, 1))
            elif temp < t["soak_c"]:
                self.rearm(f"heat:{i}")
        for line in lines:
            x = parse_xid(line)
            if x is None:
                continue
            xid, dev, rest = x
            self.xids_seen += 1
            if xid in self.cfg["drain_xids"]:
                self.trip(f"xid:{xid}:{dev}", f"XID {xid} on {dev}", xid=xid, device=dev, message=rest[:200])
            else:
                self.record({"event": "xid", "xid": xid, "device": dev, "message": rest[:200],
                             "action": "none: not in drain_xids"})
        self.flush()

    def flush(self) -> None:
        """Drain for every reason not yet acted on; one scontrol failing (slurmctld down) is
        tried again at the next sample."""
        for key, reason in list(self.pending.items()):
            with self.unstoppable():
                ok, out = self.drain(reason)
                if ok or self.failed.get(key) != out:  # a failure repeating itself is recorded once
                    self.record({"event": "drained" if ok else "drain_failed", "reason": reason,
                                 "output": out[-400:]})
            if ok:
                self.failed.pop(key, None)
                self.tripped[key] = self.pending.pop(key)
            else:
                self.failed[key] = out


NVRM_OOM = "NV_ERR_NO_MEMORY"


def oom_times(lines: list[str]) -> list[Optional[float]]:
    """When each NV_ERR_NO_MEMORY line was logged (its own stamp, so a reader replaying this
    boot's log does not count old errors as new; None: no stamp)."""
    return [logged_at(line) for line in lines if NVRM_OOM in line]


@dataclass(frozen=True)
class Proc:
    """A GPU process as the guard chose it: (pid, start time) names it; a pid alone may be reused."""

    pid: int
    start: str
    name: str
    rss_mib: float
    gpu_mib: float

    def footprint(self, unified: bool) -> float:
        return self.rss_mib + (self.gpu_mib if unified else 0.0)


@dataclass
class MemoryGuard:
    m: dict
    dry_run: bool
    record: Callable[[dict], None]
    #: sends a signal to exactly that process (pid and start time); False: it is gone
    signal_: Callable[[Proc, int], bool]
    below: int = 0
    nvrm: list = field(default_factory=list)
    cooldown_until: float = 0.0
    stopping: Optional[tuple[Proc, float]] = None
    avail_mib: Optional[float] = None

    def sample(self, now: float, avail_mib: Optional[float], oom_at: list[Optional[float]],
               candidates: Callable[[], list[Proc]], wall: Optional[float] = None) -> None:
        """`now`: monotonic seconds; `oom_at`: the unix times the new NVRM out-of-memory lines were
        logged (None: unknown, counted as `wall`, the unix time now)."""
        m = self.m
        if self.stopping is not None:
            proc, deadline = self.stopping
            if now >= deadline:
                killed = self.signal_(proc, signal.SIGKILL)
                self.record({"event": "memory_kill" if killed else "memory_stopped", "pid": proc.pid,
                             "name": proc.name, "signal": "KILL" if killed else None})
                self.stopping = None
        wall = time.time() if wall is None else wall
        self.nvrm = [t for t in self.nvrm + [wall if t is None else t for t in oom_at] if wall - t <= 60]
        self.avail_mib = avail_mib
        if avail_mib is None:  # unreadable: nothing to judge by, and no reason to stop anything
            self.below = 0
            return
        # 0.0 MiB is a reading, the worst one (seed 004: never test it for truth)
        self.below = self.below + 1 if avail_mib < m["act_mib"] else 0
        if self.below >= m["sustain"]:
            why = (f"MemAvailable {avail_mib:.0f} MiB below act_mib {m['act_mib']} MiB for "
                   f"{self.below} samples")
        elif len(self.nvrm) >= m["nvrm_errors"] and avail_mib < m["warn_mib"]:
            why = (f"{len(self.nvrm)} NVRM out-of-memory errors in 60 s with MemAvailable "
                   f"{avail_mib:.0f} MiB below warn_mib {m['warn_mib']} MiB")
        else:
            return
        if now < self.cooldown_until or self.stopping is not None:
            return
        self.below = 0
        self.cooldown_until = now + m["cooldown_s"]
        procs = candidates()
        unified = m["unified_memory"]
        table = [{"pid": p.pid, "name": p.name, "rss_mib": round(p.rss_mib), "gpu_mib": round(p.gpu_mib)}
                 for p in sorted(procs, key=lambda p: -p.footprint(unified))]
        targets = [p for p in procs if not any(p.name.startswith(x) for x in m["protect"])]
        if not targets:
            self.record({"event": "memory_no_target", "reason": why, "processes": table})
            return
        t = max(targets, key=lambda p: p.footprint(unified))
        detail = {"reason": why, "pid": t.pid, "name": t.name, "footprint_mib": round(t.footprint(unified)),
                  "processes": table}
        if self.dry_run:
            self.record({"event": "memory_would_stop", **detail})
            return
        sent = self.signal_(t, signal.SIGTERM)
        self.record({"event": "memory_stop" if sent else "memory_gone", "signal": "TERM", **detail})
        if sent:
            self.stopping = (t, now + m["grace_s"])


# ---- the node's side -------------------------------------------------------------------------

class Nvml:
    """GPU temperatures through pynvml; NVML is initialised again after an error."""

    def __init__(self):
        import pynvml  # the GPU runtime layer's pinned copy (PYTHONPATH)
        self.nv = pynvml
        self.ok = False

    def temperatures(self) -> tuple[Optional[dict[int, int]], Optional[str], dict[int, str]]:
        """(temperature by GPU index, why NVML as a whole does not answer, why a GPU does not)."""
        nv = self.nv
        try:
            if not self.ok:
                nv.nvmlInit()
                self.ok = True
            count = nv.nvmlDeviceGetCount()
        except nv.NVMLError as e:
            if self.ok:
                try:
                    nv.nvmlShutdown()
                except nv.NVMLError:
                    pass
            self.ok = False
            return None, str(e), {}
        temps, errors = {}, {}
        for i in range(count):
            try:
                temps[i] = int(nv.nvmlDeviceGetTemperature(nv.nvmlDeviceGetHandleByIndex(i), nv.NVML_TEMPERATURE_GPU))
            except nv.NVMLError as e:  # one GPU lost (XID 79 territory): the others are still watched
                errors[i] = str(e)
        return temps, None, errors

    def processes(self) -> dict[int, float]:
        """pid -> GPU memory (MiB) summed over the GPUs, of every compute process NVML lists."""
        nv, out = self.nv, {}
        try:
            for i in range(nv.nvmlDeviceGetCount()):
                for p in nv.nvmlDeviceGetComputeRunningProcesses(nv.nvmlDeviceGetHandleByIndex(i)):
                    out[p.pid] = out.get(p.pid, 0.0) + (p.usedGpuMemory or 0) / 2**20
        except nv.NVMLError:
            return {}
        return out


def start_time(pid: int) -> Optional[str]:
    """The process's start time (field 22 of /proc/<pid>/stat, after its name in parentheses)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def describe(pid: int, gpu_mib: float) -> Optional[Proc]:
    start = start_time(pid)
    try:
        with open(f"/proc/{pid}/comm") as f:
            name = f.read().strip()
        with open(f"/proc/{pid}/status") as f:
            rss = next((int(x.split()[1]) for x in f if x.startswith("VmRSS:")), 0)
    except (OSError, ValueError):
        return None
    return None if start is None else Proc(pid, start, name, rss / 1024, gpu_mib)


def gpu_processes(nvml: "Nvml") -> list[Proc]:
    me = os.getpid()
    return [p for p in (describe(pid, mib) for pid, mib in sorted(nvml.processes().items())
                        if pid > 1 and pid != me) if p is not None]


def signal_exactly(proc: Proc, sig: int) -> bool:
    """Signal the process only if it is still the one chosen (pid and start time): never a pid
    reused by another since."""
    if start_time(proc.pid) != proc.start:
        return False
    try:
        os.kill(proc.pid, sig)
    except ProcessLookupError:
        return False
    return True


def mem_available_mib(path: str) -> Optional[float]:
    try:
        with open(path) as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def scontrol_drain(node: str, scontrol: str) -> Callable[[str], tuple[bool, str]]:
    def drain(reason: str) -> tuple[bool, str]:
        argv = [scontrol, "update", f"NodeName={node}", "State=DRAIN", f"Reason=gpu-fleet guard: {reason}"]
        try:
            p = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired) as e:
            return False, str(e)
        return p.returncode == 0, (p.stdout + p.stderr).strip() or f"exit {p.returncode}"
    return drain


class EventLog:
    def __init__(self, path: str):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640)

    def __call__(self, event: dict) -> None:
        line = json.dumps({"t": round(time.time(), 3), **event}, sort_keys=True) + "\n"
        os.write(self.fd, line.encode())
        os.fsync(self.fd)


def write_status(path: str, doc: dict) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, sort_keys=True)
    os.replace(tmp, path)


def status_problems(cfg: dict, text: str, status: Optional[dict], main_pid: str, now: float) -> list[str]:
    """Why the running guard is not the one the config asks for (empty: it is)."""
    if status is None:
        return [f"no status in {cfg['status_file']}: the guard has not sampled yet"]
    out = []
    if str(status.get("pid")) != main_pid.strip():
        out.append(f"the status is from pid {status.get('pid')}, but the unit's main pid is {main_pid.strip() or 'none'}")
    if status.get("config_sha256") != config_sha(text):
        out.append("the guard runs with another config than the one on disk (not restarted?)")
    age = now - float(status.get("time", 0))
    if age > 3 * cfg["interval_s"] + 5:
        out.append(f"its last sample is {age:.0f} s old (interval {cfg['interval_s']} s): it is stuck")
    if not status.get("kernel_log_alive"):
        out.append("its kernel-log reader is not running")
    return out


def check(path: str, wait_s: float) -> int:
    """The guard proven from what it reports, not from its unit file: the unit's main process
    wrote a fresh status with the config on disk. Waits up to `wait_s` for it."""
    with open(path) as f:
        text = f.read()
    cfg = json.loads(text)
    deadline = time.monotonic() + wait_s
    while True:
        try:
            with open(cfg["status_file"]) as f:
                status = json.load(f)
        except (OSError, ValueError):
            status = None
        pid = subprocess.run(["systemctl", "show", "-p", "MainPID", "--value", "gpu-fleet-guard.service"],
                             capture_output=True, text=True).stdout
        problems = status_problems(cfg, text, status, pid, time.time())
        if not problems:
            print(json.dumps({k: status[k] for k in ("gpus", "tripped", "pending", "nvml_error", "dry_run")},
                             sort_keys=True))
            return 0
        if time.monotonic() >= deadline:
            print(f"guard on {cfg['node']}: " + "; ".join(problems), file=sys.stderr)
            return 1
        time.sleep(0.5)


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", required=True)
    ap.add_argument("--check", action="store_true", help="prove the running guard (exit 0) and quit")
    ap.add_argument("--wait-s", type=float, default=0.0, help="with --check: how long to wait for it")
    args = ap.parse_args(argv)
    if args.check:
        return check(args.config, args.wait_s)
    with open(args.config) as f:
        text = f.read()
    cfg = json.loads(text)
    record = EventLog(cfg["event_log"])
    stop = StopSignal()
    guard = Guard(cfg, scontrol_drain(cfg["node"], cfg.get("scontrol", "scontrol")), record,
                  unstoppable=stop.held)
    memory = MemoryGuard(cfg["memory"], cfg["dry_run"], record, signal_exactly) if cfg.get("memory") else None
    reader = LineReader(kernel_log_argv(cfg["kernel_log"]))
    nvml = Nvml()

    signal.signal(signal.SIGTERM, stop)
    record({"event": "start", "config_sha256": config_sha(text), "dry_run": cfg["dry_run"]})
    try:
        loop(cfg, config_sha(text), guard, memory, reader, nvml, record)
    except Stopped:
        pass
    reader.stop()
    record({"event": "stop"})
    return 0


class Stopped(Exception):
    """SIGTERM (systemctl stop): the loop ends between or during samples."""


class StopSignal:
    """The SIGTERM handler. Held, it waits: a stop while scontrol drains would leave the node
    drained with no `drained` event to say why (scontrol itself has a 30 s timeout)."""

    def __init__(self) -> None:
        self.holding = False
        self.asked = False

    def __call__(self, *_) -> None:
        if self.holding:
            self.asked = True
        else:
            raise Stopped

    @contextmanager
    def held(self):
        self.holding = True
        try:
            yield
        finally:
            self.holding = False
        if self.asked:
            raise Stopped


def loop(cfg: dict, sha: str, guard: Guard, memory: Optional[MemoryGuard], reader: LineReader, nvml: Nvml,
         record) -> None:
    while True:
        now = time.monotonic()
        temps, err, gpu_errors = nvml.temperatures()
        lines, restarted = reader.lines()
        if restarted:
            record({"event": "kernel_log_restarted", "restarts": reader.restarts})
        guard.sample(now, temps, err, lines, gpu_errors)
        if memory is not None:
            memory.sample(now, mem_available_mib(cfg["memory"]["meminfo"]), oom_times(lines),
                          lambda: gpu_processes(nvml))
        write_status(cfg["status_file"], {
            "pid": os.getpid(), "node": cfg["node"], "config_sha256": sha, "time": time.time(),
            "gpus": {str(i): {"temp_c": c, "above_soak_s": round(guard.soaks[i].above_s, 1)}
                     for i, c in sorted((temps or {}).items())},
            "nvml_error": err, "gpu_errors": {str(i): e for i, e in sorted(gpu_errors.items())},
            "kernel_log_alive": reader.alive(), "kernel_log_restarts": reader.restarts,
            "xids_seen": guard.xids_seen, "tripped": list(guard.tripped.values()),
            "pending": list(guard.pending.values()),
            "dry_run": cfg["dry_run"],
            "memory": None if memory is None else {
                "avail_mib": None if memory.avail_mib is None else round(memory.avail_mib),
                "below_samples": memory.below, "nvrm_60s": len(memory.nvrm),
                "stopping": None if memory.stopping is None else memory.stopping[0].pid}})
        time.sleep(max(0.0, cfg["interval_s"] - (time.monotonic() - now)))


if __name__ == "__main__":
    sys.exit(main())
