"""Slurm configuration invariants, checked on the File resources that write it.

They encode the seed's contracts: jobs confined by cgroups (cores, RAM, no swap, devices),
root never runs jobs, MUNGE authenticates every message, GPUs are typed GRES so jobs ask
for a model and accounting counts GPU time per model. Matched by file name (slurm.conf,
cgroup.conf, gres.conf) in whatever directory the File writes.
"""

from __future__ import annotations

from typing import Optional

from . import props as P
from .common import Res, file_content, resource
from .slurmconf import SlurmConf, basename, is_yes, parse, parse_gres, split_list

SLURM_CONF = "slurm.conf"
CGROUP_CONF = "cgroup.conf"
GRES_CONF = "gres.conf"


def _conf_file(args, name: str) -> Optional[tuple[Res, str, SlurmConf]]:
    res = resource(args, P.FILE)
    if res is None:
        return None
    path = P.path_of(res.props)
    if path is None or basename(path) != name:
        return None
    content = file_content(res)
    if content is None:  # missing or unknown during preview: checked again with real values
        return None
    return res, path, parse(content)


def validate_cgroup_confinement(args, report_violation) -> None:
    """cgroup.conf confines cores, RAM and devices."""
    found = _conf_file(args, CGROUP_CONF)
    if found is None:
        return
    res, path, conf = found
    wrong = [w for key in ("ConstrainCores", "ConstrainRAMSpace", "ConstrainDevices") if (w := _want_yes(conf, key))]
    if wrong:
        report_violation(
            f"{res.describe('File', path)} does not confine jobs: set " + "; ".join(wrong)
            + ". Without these a job can use cores, memory or GPUs it was not allocated.",
            None)


def validate_swap_confinement(args, report_violation) -> None:
    """cgroup.conf lets no job swap (its own policy: a kernel without swap accounting, such as
    the lab's containers, relaxes only this one, with a reason)."""
    found = _conf_file(args, CGROUP_CONF)
    if found is None:
        return
    res, path, conf = found
    wrong = [w for w in [_want_yes(conf, "ConstrainSwapSpace")] if w]
    swap = conf.get("AllowedSwapSpace")
    if swap is None or swap.strip().rstrip("%") not in ("0", "0.0"):
        wrong.append(f"AllowedSwapSpace=0 (it has AllowedSwapSpace={swap})" if swap is not None
                     else "AllowedSwapSpace=0 (it is not set, and Slurm's default lets jobs swap)")
    if wrong:
        report_violation(
            f"{res.describe('File', path)} lets jobs swap: set " + "; ".join(wrong)
            + ". A job that swaps escapes its memory limit and slows the whole node.",
            None)


def _want_yes(conf: SlurmConf, key: str) -> Optional[str]:
    if is_yes(conf.get(key)):
        return None
    have = conf.get(key)
    return f"{key}=yes (it has {key}={have})" if have is not None else f"{key}=yes (it is not set)"


def validate_cgroup_plugins(args, report_violation) -> None:
    """slurm.conf tracks and binds tasks with cgroups, so cgroup.conf takes effect at all."""
    found = _conf_file(args, SLURM_CONF)
    if found is None:
        return
    res, path, conf = found
    who = res.describe("File", path)
    wrong = []
    if (conf.get("ProctrackType") or "").lower() != "proctrack/cgroup":
        wrong.append(f"ProctrackType=proctrack/cgroup (it has {conf.get('ProctrackType') or 'none'})")
    plugins = [p.strip().lower() for p in split_list(conf.get("TaskPlugin"))]
    if "task/cgroup" not in plugins:
        wrong.append(f"TaskPlugin to include task/cgroup (it has {conf.get('TaskPlugin') or 'none'})")
    if wrong:
        report_violation(
            f"{who} does not confine jobs with cgroups: set " + " and ".join(wrong)
            + ". Without them cgroup.conf's constraints never apply.", None)


def validate_no_root_jobs(args, report_violation) -> None:
    """slurm.conf sets DisableRootJobs=YES."""
    found = _conf_file(args, SLURM_CONF)
    if found is None:
        return
    res, path, conf = found
    have = conf.get("DisableRootJobs")
    if not is_yes(have):
        now = f"sets DisableRootJobs={have}" if have is not None else "does not set DisableRootJobs"
        report_violation(
            f"{res.describe('File', path)} {now}, so root may run jobs on the cluster; "
            "set DisableRootJobs=YES.", None)


def validate_munge_auth(args, report_violation) -> None:
    """slurm.conf authenticates with MUNGE (AuthType=auth/munge; CredType, if set, cred/munge)."""
    found = _conf_file(args, SLURM_CONF)
    if found is None:
        return
    res, path, conf = found
    who = res.describe("File", path)
    auth = conf.get("AuthType")
    if (auth or "").lower() != "auth/munge":
        now = f"sets AuthType={auth}" if auth is not None else "does not set AuthType"
        report_violation(f"{who} {now}; set AuthType=auth/munge so every Slurm message is "
                         "authenticated with the cluster's MUNGE key.", None)
    cred = conf.get("CredType")
    if cred is not None and cred.lower() != "cred/munge":
        report_violation(f"{who} sets CredType={cred}; set CredType=cred/munge (or leave it "
                         "unset) so job credentials are signed with MUNGE.", None)


def _gpu_types(conf: SlurmConf) -> set[str]:
    types = set()
    for node in conf.nodes():
        for item in split_list(node.get("gres")):
            g = parse_gres(item)
            if g.name == "gpu" and g.type:
                types.add(g.type)
    return types


def validate_typed_gres(args, report_violation) -> None:
    """GPU GRES are typed: gpu:<type>:<count> on node lines, Type= in gres.conf."""
    for name in (SLURM_CONF, GRES_CONF):
        found = _conf_file(args, name)
        if found is None:
            continue
        res, path, conf = found
        who = res.describe("File", path)
        if name == SLURM_CONF:
            gpu_nodes = False
            for node in conf.nodes():
                for item in split_list(node.get("gres")):
                    g = parse_gres(item)
                    if g.name != "gpu":
                        continue
                    gpu_nodes = True
                    if not g.type:
                        report_violation(
                            f"{who} gives node {node.get('nodename')} the untyped GRES {item}; "
                            f"write it as gpu:<type>:<count> (for example gpu:v100:"
                            f"{g.count or 1}) so jobs request a GPU model and accounting "
                            "counts it.", None)
            types = [t.strip().lower() for t in split_list(conf.get("GresTypes"))]
            if gpu_nodes and "gpu" not in types:
                report_violation(f"{who} gives nodes GPU GRES but GresTypes does not list gpu; "
                                 "set GresTypes=gpu.", None)
        else:
            for entity in conf.lines:
                d = dict(entity)
                if (d.get("name") or "").lower() == "gpu" and not d.get("type"):
                    where = f" for node {d['nodename']}" if d.get("nodename") else ""
                    report_violation(
                        f"{who} declares GPUs{where} without a Type; add Type=<model> (for "
                        "example Type=v100) matching the node's Gres=gpu:<type>:<count>.", None)


def validate_gpu_accounting(args, report_violation) -> None:
    """With accounting on, AccountingStorageTRES counts gres/gpu and every typed GPU."""
    found = _conf_file(args, SLURM_CONF)
    if found is None:
        return
    res, path, conf = found
    storage = (conf.get("AccountingStorageType") or "").lower()
    if not storage or storage == "accounting_storage/none":
        return  # accounting is not configured (the accounting layer turns it on)
    tres = {t.strip().lower() for t in split_list(conf.get("AccountingStorageTRES"))}
    types = _gpu_types(conf)
    has_gpus = bool(types) or any(
        parse_gres(i).name == "gpu" for n in conf.nodes() for i in split_list(n.get("gres")))
    if not has_gpus:
        return
    need = ["gres/gpu"] + [f"gres/gpu:{t}" for t in sorted(types)]
    missing = [t for t in need if t.lower() not in tres]
    if missing:
        want = ",".join(sorted(tres | {m.lower() for m in missing}, key=lambda t: (t != "gres/gpu", t)))
        report_violation(
            f"{res.describe('File', path)} enables accounting ({conf.get('AccountingStorageType')}) "
            f"but AccountingStorageTRES does not count {', '.join(missing)}; set "
            f"AccountingStorageTRES={want} so GPU time is accounted per model.", None)
