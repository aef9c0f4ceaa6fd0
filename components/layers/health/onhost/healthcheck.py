#!/usr/bin/python3
"""gpu-fleet health check: the gate a node passes to serve, run by slurmd (HealthCheckProgram).

slurmd runs it as root when it starts and every HealthCheckInterval, with no arguments; it reads
its JSON config (/etc/gpu-fleet/health.json, rendered by the health layer) and checks:

- `gpus`: NVML sees every GPU the stack declares, with the UUIDs the GPU layer recorded;
- `xid`: no hardware XID (the stack's list) in the kernel's messages since this boot;
- `mounts`: every store is mounted where the storage layer proved it, from its server, with its
  filesystem type (read from /proc/self/mountinfo, what the kernel holds);
- `guard`: the guard wrote a fresh status from a live process (when the guards run).

Then it acts on its own node only, through scontrol, and only where the reason says it may:

- a failure on a node nobody drained: drained, `Reason=gpu-fleet health: ...`;
- a failure of a kind the stack reboots for (`reboot_on`) on a node serving or drained by the
  guard or by this check: drained, then `scontrol reboot` (Slurm reboots it through RebootProgram
  once its jobs end; it comes back drained) while the node had fewer than `max_reboots_per_day`
  in 24 h; past that it is drained as quarantined and held in the quarantine reservation;
- all checks pass on a node drained by this check (not quarantined): resumed;
- a node drained or down for any other reason (an admin's, the acceptance's) is never touched.

Every run leaves its result in `result_file` (what the layer's refresh reads) and every action a
JSON line in `event_log`; reboots are counted in `state_dir` (it survives the reboot).
Python 3 and its standard library, plus the GPU runtime layer's pynvml (`pynvml_dir`).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import subprocess
import sys
import time
from typing import Callable, Optional

CONFIG = "/etc/gpu-fleet/health.json"
DAY_S = 86400

#: `NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.`
XID_RE = re.compile(r"NVRM: Xid \((?P<dev>[^)]*)\): (?P<xid>\d+)")


# ---- checks: a read of the node and a pure judgement ------------------------------------------

def xid_failures(lines: list[str], xids: list[int], boot_time: float) -> list[str]:
    """The hardware XIDs logged since `boot_time` (lines stamped `<unix time> host kernel: ...`)."""
    out = []
    for line in lines:
        m = XID_RE.search(line)
        if not m or int(m.group("xid")) not in xids:
            continue
        try:
            at = float(line.split(maxsplit=1)[0])
        except (ValueError, IndexError):
            at = boot_time  # no stamp: this boot's journal (journalctl -k -b) only has this boot's
        if at >= boot_time:
            out.append(f"XID {m.group('xid')} on {m.group('dev')} since this boot")
    return sorted(set(out))


def mountinfo(text: str) -> dict[str, tuple[str, str]]:
    """/proc/self/mountinfo -> mount point -> (fstype, source); the last mount on a point wins."""
    out = {}
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        if not sep:
            continue
        fields, rfields = left.split(), right.split()
        if len(fields) >= 5 and len(rfields) >= 2:
            point = fields[4].replace("\\040", " ")
            out[point] = (rfields[0], rfields[1])
    return out


def mount_failures(mounts: dict[str, tuple[str, str]], stores: list[dict]) -> list[str]:
    out = []
    for s in stores:
        got = mounts.get(s["path"])
        if got is None:
            out.append(f"store {s['path']} is not mounted")
        elif got[0] not in s["fstypes"] or got[1] != s["source"]:
            out.append(f"store {s['path']} is {got[1]} ({got[0]}), not {s['source']} ({'/'.join(s['fstypes'])})")
    return out


def gpu_failures(seen: Optional[list[str]], error: Optional[str], count: int, uuids: list[str]) -> list[str]:
    """`seen`: the UUIDs NVML lists, in index order (None: NVML did not answer, `error` says why)."""
    if seen is None:
        return [f"NVML does not answer ({error})"]
    out = []
    if len(seen) != count:
        out.append(f"NVML sees {len(seen)} of the {count} GPUs the stack declares")
    missing = [u for u in uuids if u not in seen]
    if missing:
        out.append(f"GPU UUIDs the GPU layer recorded are gone: {', '.join(missing)}")
    return out


def guard_failures(status: Optional[dict], max_age_s: float, now: float, alive: Callable[[int], bool]) -> list[str]:
    if status is None:
        return ["the guard has written no status"]
    age = now - float(status.get("time", 0))
    if age > max_age_s:
        return [f"the guard's last sample is {age:.0f} s old"]
    if not alive(int(status.get("pid", 0))):
        return [f"the guard (pid {status.get('pid')}) is not running"]
    return []


# ---- the decision: pure -------------------------------------------------------------------------

def node_fields(text: str) -> dict[str, str]:
    """`scontrol show node <n> -o` -> {State: ..., Reason: ...} (values may hold spaces)."""
    starts = list(re.finditer(r"(?:^|(?<=\s))([A-Za-z][A-Za-z0-9_]*)=", text.strip()))
    return {m.group(1): text.strip()[m.end():(n.start() if n else None)].strip()
            for m, n in zip(starts, [*starts[1:], None])}


def decide(failures: dict[str, list[str]], state: str, reason: str, reboots: list[float], now: float,
           cfg: dict) -> list[tuple[str, str]]:
    """What to do: [(action, reason)] with action in drain, reboot, quarantine, resume.

    `failures`: kind -> what failed; `state`: Slurm's node state (IDLE+DRAIN, MIXED+DRAIN, DOWN...);
    `reason`: the node's reason; `reboots`: when this check asked Slurm to reboot the node."""
    flags = set(state.upper().replace("*", "").split("+"))
    held = bool(flags & {"DRAIN", "DRAINED", "DRAINING", "DOWN", "FAIL", "FAILING"})
    own, quarantined = cfg["own_reason"], f"{cfg['own_reason']} quarantined"
    ours, guards = reason.startswith(own), reason.startswith(cfg["guard_reason"])
    if flags & {"REBOOT_REQUESTED", "REBOOT_ISSUED"}:
        return []  # Slurm has the reboot in hand
    if reason.startswith(quarantined) and held:
        return []  # an admin lifts a quarantine (a resume, or a reboot with nextstate=RESUME)
    if held and not (ours or guards):
        return []  # another actor's drain: its reason says who decides
    if not failures:
        # its own drain, or the guard's for a fault a reboot fixes that this boot no longer has
        fixed = guards and any(reason.startswith(f"{cfg['guard_reason']} {k.upper()} ") for k in cfg["reboot_on"])
        return [("resume", "")] if held and (ours or fixed) else []
    fixable = [k for k in sorted(failures) if k in cfg["reboot_on"]]
    if fixable:
        k = fixable[0]
        what = f"{k}: {failures[k][0]}"
        recent = [t for t in reboots if now - t < DAY_S]
        if len(recent) < cfg["max_reboots_per_day"]:
            return [("reboot", f"{own} reboot {len(recent) + 1}/{cfg['max_reboots_per_day']} for {what}")]
        return [("quarantine", f"{quarantined} after {len(recent)} reboots in 24 h: {what}")]
    if held and guards:
        return []  # the guard's drain stands: nothing here a reboot fixes
    kind = sorted(failures)[0]
    why = f"{own} {kind}: {failures[kind][0]}"
    return [] if held and reason == why else [("drain", why)]


# ---- the node's side ----------------------------------------------------------------------------

def run(argv: list[str]) -> tuple[int, str]:
    p = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    return p.returncode, (p.stdout + p.stderr).strip()


def boot_time() -> float:
    """When this (container or machine) booted: PID 1's start (a container shares the host's btime)."""
    with open("/proc/stat") as f:
        btime = next(float(line.split()[1]) for line in f if line.startswith("btime "))
    with open("/proc/1/stat") as f:
        start_ticks = float(f.read().rsplit(")", 1)[1].split()[19])
    return btime + start_ticks / os.sysconf("SC_CLK_TCK")


def kernel_lines(source: str) -> list[str]:
    if source == "journal":
        return run(["journalctl", "-k", "-b", "-o", "short-unix", "--no-pager", "-q"])[1].splitlines()
    try:
        with open(source, errors="replace") as f:
            return f.read().splitlines()
    except FileNotFoundError:
        return []


def nvml_uuids(pynvml_dir: str) -> tuple[Optional[list[str]], Optional[str]]:
    sys.path.insert(0, pynvml_dir)
    try:
        import pynvml as nv
        nv.nvmlInit()
        try:
            uuids = []
            for i in range(nv.nvmlDeviceGetCount()):
                u = nv.nvmlDeviceGetUUID(nv.nvmlDeviceGetHandleByIndex(i))
                uuids.append(u.decode() if isinstance(u, bytes) else u)
            return uuids, None
        finally:
            nv.nvmlShutdown()
    except Exception as e:  # NVMLError, or no pynvml at all: either way NVML cannot vouch for the GPUs
        return None, f"{type(e).__name__}: {e}"


def installed_for(path: str, now: float) -> float:
    """Seconds since the file was written (-1: there is none)."""
    try:
        return now - os.stat(path).st_mtime
    except FileNotFoundError:
        return -1.0


def pid_alive(pid: int) -> bool:
    return pid > 0 and os.path.exists(f"/proc/{pid}")


def read_json(path: str):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def write_json(path: str, doc) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def failures_now(cfg: dict) -> dict[str, list[str]]:
    now, booted = time.time(), boot_time()
    found: dict[str, list[str]] = {}
    if cfg.get("gpus"):
        seen, err = nvml_uuids(cfg["pynvml_dir"])
        found["gpus"] = gpu_failures(seen, err, cfg["gpus"], cfg.get("uuids") or [])
        found["xid"] = xid_failures(kernel_lines(cfg["kernel_log"]), cfg["xids"], booted)
    if cfg.get("stores"):
        with open("/proc/self/mountinfo") as f:
            found["mounts"] = mount_failures(mountinfo(f.read()), cfg["stores"])
    grace = cfg.get("guard_max_age_s") or 0
    if cfg.get("guard_status") and min(installed_for(cfg["guard_unit"], now), now - booted) > grace:
        # a guard installed (this rollout) or started (this boot) moments ago has not sampled yet
        found["guard"] = guard_failures(read_json(cfg["guard_status"]), cfg["guard_max_age_s"], now, pid_alive)
    return {k: v for k, v in found.items() if v}


def quarantine(cfg: dict, node: str) -> tuple[int, str]:
    """Hold the node in the quarantine reservation (made with it, or the node added)."""
    name = cfg["quarantine_reservation"]
    rc, out = run(["scontrol", "show", "reservation", name, "-o"])
    nodes = node_fields(out).get("Nodes", "") if rc == 0 else ""
    if rc != 0 or not nodes or nodes == "(null)":
        return run(["scontrol", "create", "reservation", f"ReservationName={name}", f"Nodes={node}",
                    "StartTime=now", "Duration=infinite", "Users=root", "Flags=MAINT,IGNORE_JOBS"])
    listed = run(["scontrol", "show", "hostnames", nodes])[1].split()
    if node in listed:
        return 0, "already held"
    return run(["scontrol", "update", f"ReservationName={name}", f"Nodes={','.join([*listed, node])}"])


def act(cfg: dict, node: str, action: str, reason: str) -> tuple[int, str]:
    if action == "drain":
        return run(["scontrol", "update", f"NodeName={node}", "State=DRAIN", f"Reason={reason}"])
    if action == "resume":
        return run(["scontrol", "update", f"NodeName={node}", "State=RESUME"])
    if action == "reboot":
        # drained first, then a plain reboot (once idle: a drained node takes no new job). Not
        # `ASAP nextstate=RESUME`: a next state makes slurmctld clear DRAIN when the node registers
        # after the boot, and slurmd runs its first check before it registers, so a fault that
        # survived the boot would serve until the next interval. Without one the node comes back
        # drained, under this check's reason, and serves once a check after the boot passes.
        rc, out = run(["scontrol", "update", f"NodeName={node}", "State=DRAIN", f"Reason={reason}"])
        return (rc, out) if rc else run(["scontrol", "reboot", f"reason={reason}", node])
    rc, out = run(["scontrol", "update", f"NodeName={node}", "State=DRAIN", f"Reason={reason}"])
    if rc == 0:
        rc, out = quarantine(cfg, node)
    return rc, out


def result_problems(cfg: dict, sha: str, result: Optional[dict], now: float) -> list[str]:
    """Why the last result does not prove slurmd runs this check with this config (empty: it does)."""
    if result is None:
        return [f"no result in {cfg['result_file']}: slurmd has not run the check since boot"]
    out = []
    if result.get("config_sha256") != sha:
        out.append("the last result is from another config than the one on disk")
    age = now - float(result.get("time", 0))
    if age > 2 * cfg["interval_s"] + 30:
        out.append(f"the last result is {age:.0f} s old (interval {cfg['interval_s']} s): slurmd does not run it")
    return out


def check(path: str, wait_s: float) -> int:
    """Read-only: wait up to `wait_s` for a result slurmd's run wrote with the config on disk."""
    with open(path, "rb") as f:
        raw = f.read()
    cfg, sha = json.loads(raw), hashlib.sha256(raw).hexdigest()
    deadline = time.monotonic() + wait_s
    while True:
        result = read_json(cfg["result_file"])
        problems = result_problems(cfg, sha, result, time.time())
        if not problems and result is not None:
            print(json.dumps({k: result[k] for k in ("ok", "failures", "slurm")}, sort_keys=True))
            return 0
        if time.monotonic() >= deadline:
            print(f"health check on {cfg['node']}: " + "; ".join(problems), file=sys.stderr)
            return 1
        time.sleep(1)


def main(argv: Optional[list[str]] = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    os.environ.setdefault("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")  # slurmd gives it no environment
    path = os.environ.get("GPU_FLEET_HEALTH_CONFIG", CONFIG)
    if args[:1] == ["--check"]:
        return check(path, float(args[2]) if args[1:2] == ["--wait-s"] else 0.0)
    try:
        with open(path, "rb") as f:
            raw = f.read()
        cfg = json.loads(raw)
    except (OSError, ValueError):
        cfg = None
    if cfg is None:
        print(f"gpu-fleet health: no config at {path}", file=sys.stderr)
        return 1
    node = cfg["node"]
    os.makedirs(cfg["state_dir"], exist_ok=True)
    with open(os.path.join(cfg["state_dir"], "lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a run slurmd starts while one is still running waits
        now = time.time()
        failures = failures_now(cfg)
        rc, out = run(["scontrol", "show", "node", node, "-o"])
        fields = node_fields(out) if rc == 0 else {}
        state, reason = fields.get("State", ""), re.sub(r" \[[^]]*\]$", "", fields.get("Reason", "none"))
        reason = "" if reason == "none" else reason
        reboots_file = os.path.join(cfg["state_dir"], "reboots.json")
        reboots = [t for t in (read_json(reboots_file) or []) if now - t < DAY_S]
        actions = decide(failures, state, reason, reboots, now, cfg) if rc == 0 else []
        done = []
        for action, why in actions:
            arc, aout = act(cfg, node, action, why)
            done.append({"action": action, "reason": why, "rc": arc, "output": aout[-300:]})
            if action == "reboot" and arc == 0:
                write_json(reboots_file, [*reboots, now])
        result = {"node": node, "time": now, "ok": not failures, "failures": failures,
                  "slurm": {"state": state, "reason": reason} if rc == 0 else {"error": out[-300:]},
                  "actions": done, "reboots_24h": len(reboots) + sum(a["action"] == "reboot" for a in done),
                  "config_sha256": hashlib.sha256(raw).hexdigest()}
        write_json(cfg["result_file"], result)
        if failures or done:
            os.makedirs(os.path.dirname(cfg["event_log"]), exist_ok=True)
            with open(cfg["event_log"], "a") as f:
                f.write(json.dumps(result, sort_keys=True) + "\n")
                f.flush()
                os.fsync(f.fileno())
    # slurmd logs a non-zero exit; the drain above is what keeps jobs away
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
