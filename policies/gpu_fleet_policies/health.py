"""The node health loop: what slurmd runs as root, and how often it may reboot a node.

slurmd runs HealthCheckProgram as root on every node each interval, and RebootProgram as root when
slurmctld asks: whoever can write either file, or the check's config, owns every node. And a
reboot loop is an outage: the number of reboots the check may ask for a day is bounded.

- `validate_programs_root_only` (resource): the health layer's files (the check, the reboot
  program, the check's config) are owned by root:root and writable by nobody else;
- `validate_programs_shipped` (stack): slurm.conf's HealthCheckProgram and RebootProgram name
  files the stack ships that way (a Payload of the health layer), not any path on the node;
- `validate_reboots_bounded` (stack): `gpu-fleet:health.max_reboots_per_day` is at most
  MAX_REBOOTS_PER_DAY, and slurm.conf bounds the wait for a rebooting node (ResumeTimeout) when
  it sets a RebootProgram;
- `validate_spares_kept_spare` (stack): a spare (`gpu-fleet:health.spares.nodes`) is in no
  Default=YES partition of slurm.conf, and its NodeName line weighs more than every other node's
  (a spare used like any node is no spare when one is needed).

The constants mirror components/layers/health (tests/policy/test_health_policies.py holds them equal).
"""

from __future__ import annotations

from typing import Optional

from . import props as P
from . import stackconfig
from .common import Res, file_content, resource, stack_resources
from .slurmconf import parse

PAYLOAD = "pulumi-python:dynamic/host:Payload"
#: render.HEALTHCHECK, render.REBOOT, render.CONFIG
HEALTHCHECK = "/opt/gpu-fleet/bin/gpu-fleet-healthcheck"
REBOOT = "/opt/gpu-fleet/bin/gpu-fleet-reboot"
CONFIG = "/etc/gpu-fleet/health.json"
PROGRAMS = (HEALTHCHECK, REBOOT, CONFIG)
#: config.MAX_REBOOTS_PER_DAY
MAX_REBOOTS_PER_DAY = 6


def owner_problems(res: Res) -> list[str]:
    """Why someone but root could change the file (empty: nobody can)."""
    out = []
    owner, group = P.text(res.get("owner")) or "root", P.text(res.get("group")) or "root"
    if (owner, group) != ("root", "root"):
        out.append(f"is owned by {owner}:{group}, not root:root")
    mode = P.text(res.get("mode"))
    if mode is not None:
        try:
            bits = int(mode, 8)
        except ValueError:
            return [*out, f"has the mode {mode!r}, not an octal mode"]
        if bits & 0o022:
            out.append(f"has the mode {mode}: writable by its group or others")
    return out


def validate_programs_root_only(args, report_violation) -> None:
    res = resource(args, PAYLOAD, P.FILE)
    if res is None or P.path_of(res.props) not in PROGRAMS:
        return
    problems = owner_problems(res)
    if problems:
        kind = "Payload" if res.type == PAYLOAD else "File"
        report_violation(f"{res.describe(kind, P.path_of(res.props))} is run or read by slurmd as root, but "
                         f"{'; '.join(problems)}; ship it as the health layer does (root:root, 0755 or 0644).", None)


def _slurm_confs(args) -> list[tuple[Res, dict]]:
    out = []
    for r in stack_resources(args, P.FILE):
        path = P.path_of(r.props) or ""
        if path.rsplit("/", 1)[-1] == "slurm.conf":
            content = file_content(r)
            if content is not None:
                out.append((r, {k: parse(content).get(k) for k in ("HealthCheckProgram", "RebootProgram",
                                                                    "ResumeTimeout")}))
    return out


def validate_programs_shipped(args, report_violation) -> None:
    shipped: dict[str, list[Res]] = {}
    for r in stack_resources(args, PAYLOAD):
        path = P.path_of(r.props)
        if path is not None:
            shipped.setdefault(path, []).append(r)
    for res, conf in _slurm_confs(args):
        for key in ("HealthCheckProgram", "RebootProgram"):
            program: Optional[str] = conf[key]
            if program is None:
                continue
            ships = [r for r in shipped.get(program, []) if not owner_problems(r)]
            if not ships:
                report_violation(f"{res.describe('File', P.path_of(res.props))} sets {key}={program}, a file no "
                                 "Payload of this stack ships root-owned and writable by root alone: slurmd "
                                 "would run whatever is there as root. Enable gpu-fleet:health, which ships "
                                 f"{HEALTHCHECK} and {REBOOT}.", None)


def validate_reboots_bounded(args, report_violation) -> None:
    cfg = stackconfig.get() or {}
    health = cfg.get("health")
    if isinstance(health, dict) and health.get("enabled"):
        n = P.as_int(health.get("max_reboots_per_day"))
        if n is not None and n > MAX_REBOOTS_PER_DAY:
            report_violation(f"gpu-fleet:health.max_reboots_per_day is {n}: more than {MAX_REBOOTS_PER_DAY} "
                             "reboots a day is a node in a reboot loop, not a recovery.", None)
    for res, conf in _slurm_confs(args):
        if conf["RebootProgram"] and not conf["ResumeTimeout"]:
            report_violation(f"{res.describe('File', P.path_of(res.props))} sets RebootProgram but no "
                             "ResumeTimeout: how long slurmctld waits for a rebooting node is unbounded "
                             "(set gpu-fleet:health.reboot_timeout_s).", None)


def _weight(node: dict[str, str]) -> int:
    w = P.as_int(node.get("weight"))
    return 1 if w is None else w


def validate_spares_kept_spare(args, report_violation) -> None:
    cfg = stackconfig.get() or {}
    health = cfg.get("health")
    spares = (health.get("spares") or {}) if isinstance(health, dict) and health.get("enabled") else {}
    names = {str(n) for n in (spares.get("nodes") or [])} if isinstance(spares, dict) else set()
    if not names:
        return
    for r in stack_resources(args, P.FILE):
        path = P.path_of(r.props) or ""
        content = file_content(r) if path.rsplit("/", 1)[-1] == "slurm.conf" else None
        if content is None:
            continue
        conf = parse(content)
        where = r.describe("File", path)
        for part in conf.entities:
            if "partitionname" in part and part.get("default", "").upper() == "YES":
                inside = sorted(names & set(part.get("nodes", "").split(",")))
                if inside:
                    report_violation(f"{where}: the spares {inside} are in the default partition "
                                     f"{part['partitionname']}: every job without -p may take them. Keep spares "
                                     "out of the default partition (gpu-fleet:slurm.partitions).", None)
        nodes = conf.nodes()
        others = [_weight(n) for n in nodes if n["nodename"] not in names]
        for n in nodes:
            if n["nodename"] in names and others and _weight(n) <= max(others):
                report_violation(f"{where}: the spare {n['nodename']} has Weight={_weight(n)}, not more than "
                                 f"another node's ({max(others)}): the scheduler would use it like any node.", None)
