"""Pulumi program: validate the stack's config, build the Fleet, export what it promises."""

from pathlib import Path

import pulumi

from components.config import load_stack_config, stack_file
from components.errors import FleetError
from components.fleet import Fleet
from components.stack_secrets import required_secret

stack = pulumi.get_stack()
try:
    cfg = load_stack_config(stack)
    munge_key = required_secret("munge_key", stack_file(stack)) if cfg.slurm.enabled else None
    acct = cfg.slurm.enabled and cfg.accounting.enabled
    db_password = required_secret("db_password", stack_file(stack)) if acct else None
    jwt_key = required_secret("jwt_key", stack_file(stack)) if acct else None
except FleetError as e:
    # RunError ends the program with the message alone, before any resource exists.
    raise pulumi.RunError(str(e)) from None

fleet = Fleet(stack, cfg, Path(__file__).resolve().parent, munge_key, db_password, jwt_key)
pulumi.export("summary", fleet.summary)
if fleet.gpu is not None:
    g = fleet.gpu
    pulumi.export("gpu", {"healthyNodes": g.healthy_nodes, "verdicts": g.verdicts, "problems": g.problems})
if fleet.slurm is not None:
    pulumi.export("slurmNodes", fleet.slurm.admitted)
if fleet.slurm is not None and fleet.slurm.accounting_history is not None:
    h = fleet.slurm.accounting_history
    pulumi.export("accountingHistory", {"restoredFrom": h.restored_from, "restoredJobs": h.restored_jobs})
if fleet.slurm is not None and fleet.slurm.dbd_access is not None:
    d = fleet.slurm.dbd_access
    pulumi.export("dbdAccess", {"reachedFrom": d.reached_from, "refusedFrom": d.refused_from})
if fleet.slurm is not None and fleet.slurm.cluster_id is not None:
    c = fleet.slurm.cluster_id
    pulumi.export("clusterId", {"adopted": c.adopt, "controllerId": c.controller_id, "dbdId": c.dbd_id,
                                "why": c.why, "kept": c.kept})
if fleet.slurm is not None and fleet.slurm.canary is not None:
    c = fleet.slurm.canary
    pulumi.export("canary", {"passed": c.passed, "jobId": c.job_id,
                             "cudaVisibleDevices": c.cuda_visible_devices, "cgroup": c.cgroup})
