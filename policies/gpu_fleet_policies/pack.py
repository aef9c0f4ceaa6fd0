"""The pack's policies: names, descriptions, validators. `__main__.py` serves them.

Every policy is mandatory; a stack relaxes one only with a reason (see relax.py). The
validators live in their own modules so tests call them without starting the pack.
"""

from __future__ import annotations

from pulumi_policy import (
    EnforcementLevel, PolicyConfigSchema, ResourceValidationPolicy, Severity,
    StackValidationPolicy,
)

from .common import each_member
from . import (
    exposure, guards, health, hosts, identities, k3s, model, packages, relax, secrets, slurm, slurmweb, storage,
    tenancy, web,
)

PACK_NAME = "gpu-fleet"

# name, kind, description, validator, severity
_SPECS = [
    ("slurm-cgroup-confinement", "resource",
     "cgroup.conf confines every job: ConstrainCores, ConstrainRAMSpace and ConstrainDevices are yes.",
     slurm.validate_cgroup_confinement, Severity.HIGH),
    ("slurm-swap-confinement", "resource",
     "cgroup.conf lets no job swap: ConstrainSwapSpace is yes and AllowedSwapSpace is 0.",
     slurm.validate_swap_confinement, Severity.HIGH),
    ("slurm-cgroup-plugins", "resource",
     "slurm.conf tracks and binds tasks with cgroups (proctrack/cgroup, task/cgroup).",
     slurm.validate_cgroup_plugins, Severity.HIGH),
    ("slurm-no-root-jobs", "resource",
     "slurm.conf sets DisableRootJobs=YES: root never runs jobs.",
     slurm.validate_no_root_jobs, Severity.HIGH),
    ("slurm-munge-auth", "resource",
     "slurm.conf authenticates with MUNGE (AuthType=auth/munge).",
     slurm.validate_munge_auth, Severity.CRITICAL),
    ("slurm-typed-gpu-gres", "resource",
     "GPU GRES are typed (gpu:<type>:<count> in slurm.conf, Type= in gres.conf).",
     slurm.validate_typed_gres, Severity.MEDIUM),
    ("slurm-gpu-accounting", "resource",
     "With accounting on, AccountingStorageTRES counts gres/gpu and every typed GPU.",
     slurm.validate_gpu_accounting, Severity.MEDIUM),
    ("service-account-ids", "stack",
     "The slurm and munge accounts have one fixed uid and gid on every host.",
     identities.validate_service_ids, Severity.HIGH),
    ("packages-exact-versions", "resource",
     "Every package of a PackageSet is pinned to one exact version.",
     packages.validate_exact_versions, Severity.HIGH),
    ("packages-held", "resource",
     "Every PackageSet holds its packages against upgrades.",
     packages.validate_held, Severity.MEDIUM),
    ("secrets-are-pulumi-secrets", "resource",
     "The MUNGE key, database passwords and the JWT key are Pulumi secrets, never plain text.",
     secrets.validate_content_is_secret, Severity.CRITICAL),
    ("secret-files-private", "resource",
     "Files that hold secrets are private to their owner (no group/other access) and marked secret.",
     secrets.validate_private_mode, Severity.HIGH),
    ("mariadb-loopback-only", "resource",
     "MariaDB (the accounting database) listens on loopback only.",
     exposure.validate_mariadb_loopback, Severity.HIGH),
    ("slurmdbd-firewall-closed", "resource",
     "slurmdbd's port is closed to every source but the ones an nftables ruleset admits.",
     exposure.validate_slurmdbd_firewall, Severity.HIGH),
    ("slurmrestd-unix-socket-only", "resource",
     "slurmrestd listens on a Unix socket only, never on a TCP port.",
     exposure.validate_slurmrestd_unix_socket, Severity.HIGH),
    ("storage-exports-declared-datasets", "resource",
     "Every NFS export's path is the mountpoint of a dataset the stack declares (gpu-fleet:storage).",
     storage.validate_export_paths, Severity.HIGH),
    ("storage-models-export-read-only", "resource",
     "The models store is exported read-only to every client.",
     storage.validate_models_export_readonly, Severity.HIGH),
    ("storage-exports-root-squash", "resource",
     "No NFS export lets a client's root act as root (no no_root_squash, no anonymous uid 0).",
     storage.validate_export_root_squash, Severity.HIGH),
    ("storage-exports-no-world-clients", "resource",
     "No NFS export is open to everyone (*, a /0 network, or an export without a client).",
     storage.validate_export_clients, Severity.HIGH),
    ("storage-zfs-sharenfs-off", "resource",
     "Every dataset of the storage layer sets sharenfs=off: the layer owns the exports, ZFS never shares.",
     storage.validate_sharenfs_off, Severity.MEDIUM),
    ("storage-models-mount-read-only", "resource",
     "Every mount unit of the models store mounts it ro.",
     storage.validate_models_mount_readonly, Severity.HIGH),
    ("model-revision-pinned", "resource",
     "The model snapshot pins a 40-hex commit id, never a branch or a tag the hub can move.",
     model.validate_revision_pinned, Severity.HIGH),
    ("model-token-secret", "resource",
     "The hub token file is a Pulumi secret, declared secret=True, readable by its owner only (0600).",
     model.validate_token_secret, Severity.CRITICAL),
    ("model-downloader-not-at-boot", "resource",
     "The model download unit is never enabled: only `pulumi up` starts a download, never a boot.",
     model.validate_not_at_boot, Severity.MEDIUM),
    ("hosts-slurm-membership", "stack",
     "No unreachable node is in a Slurm partition, and no K3s node without a sealed bundle: the stack "
     "retires it with a K3s Stop that waits on a K3s Seal.",
     hosts.validate_slurm_membership, Severity.HIGH),
    ("k3s-postgres-restore-proof", "resource",
     "No K3s node that runs PostgreSQL is stopped without a restore proof for every database (dump "
     "restored into a scratch database, same tables and rows). The audit and proofs are unknown "
     "during a first preview (skipped); checked on real values before `pulumi up` stops K3s.",
     k3s.validate_postgres_proof, Severity.CRITICAL),
    ("k3s-batches-server-last", "stack",
     "K3s agents stop in batches of at least one, each agent after the seal and the whole previous "
     "batch, and the K3s server last, after every agent of its change.",
     k3s.validate_stop_order, Severity.HIGH),
    ("web-image-by-digest", "resource",
     "Every web container and image is pinned by digest (name@sha256:<64 hex>, no tag).",
     web.validate_image_by_digest, Severity.HIGH),
    ("web-non-root-user", "resource",
     "Every web container runs as a numeric, non-zero uid:gid, never a name or root.",
     web.validate_non_root_user, Severity.HIGH),
    ("web-read-only-rootfs", "resource",
     "Every web container has a read-only root filesystem.",
     web.validate_read_only_rootfs, Severity.HIGH),
    ("web-capabilities-dropped", "resource",
     "Every web container drops ALL capabilities and adds none.",
     web.validate_capabilities_dropped, Severity.HIGH),
    ("web-no-new-privileges", "resource",
     "Every web container runs with no-new-privileges.",
     web.validate_no_new_privileges, Severity.HIGH),
    ("web-resource-limits", "resource",
     "Every web container has CPU, memory and PID limits above 0.",
     web.validate_limits, Severity.MEDIUM),
    ("web-ports-loopback-or-tailnet", "resource",
     "Web containers publish ports on loopback or on their declared tailnet address only.",
     web.validate_ports, Severity.HIGH),
    ("web-mounts-read-only", "resource",
     "Every mount of a web container is read-only.",
     web.validate_mounts_read_only, Severity.HIGH),
    ("web-secrets-per-component", "stack",
     "The agent's and the gateway's secrets are directories of their own: no component mounts another's "
     "secret or a directory it shares with another's.",
     web.validate_secrets_per_component, Severity.HIGH),
    ("web-no-jwt-signing-key", "resource",
     "No web container mounts Slurm's JWT signing key or a directory holding it, or names it in its "
     "environment.",
     web.validate_no_signing_key, Severity.CRITICAL),
    ("web-readback", "stack",
     "A web container's readback (podman inspect, the kernel) obeys the same rules, its problems are "
     "empty, and an image pulled the digest it pins: checked on the state's outputs after a create or "
     "refresh, before `pulumi up` changes anything.",
     web.validate_readback, Severity.HIGH),
    ("web-anonymous-view-only", "resource",
     "Slurm-web's policy.ini grants the anonymous role viewing actions only (view-*): with authentication off "
     "every visitor is anonymous.",
     slurmweb.validate_anonymous_view_only, Severity.CRITICAL),
    ("web-gateway-agents-internal", "resource",
     "Slurm-web's gateway.ini lists only the agent container on the layer's internal network "
     "(http://slurm-web-agent:<port>).",
     slurmweb.validate_gateway_agents_internal, Severity.HIGH),
    ("web-agent-static-token", "resource",
     "Slurm-web's agent authenticates to slurmrestd with a minted token (auth=jwt, jwt_mode=static), never "
     "with Slurm's signing key.",
     slurmweb.validate_agent_static_token, Severity.CRITICAL),
    ("guards-least-privilege", "resource",
     "The node guard runs as root bounded by its unit: no capability but CAP_KILL (memory guard), "
     "NoNewPrivileges=yes, ProtectSystem=strict.",
     guards.validate_least_privilege, Severity.HIGH),
    ("health-programs-root-only", "resource",
     "The health check, Slurm's reboot program and the check's config are root:root and writable by root "
     "alone: slurmd runs them as root on every node.",
     health.validate_programs_root_only, Severity.CRITICAL),
    ("health-programs-shipped", "stack",
     "slurm.conf's HealthCheckProgram and RebootProgram name files the stack ships root-owned (the health "
     "layer's Payloads), not any path on the node.",
     health.validate_programs_shipped, Severity.CRITICAL),
    ("health-reboots-bounded", "stack",
     "The health loop's reboots are bounded: at most 6 a node a day, and a ResumeTimeout wherever slurm.conf "
     "sets a RebootProgram.",
     health.validate_reboots_bounded, Severity.HIGH),
    ("health-spares-kept-spare", "stack",
     "A hot spare is in no default partition and weighs more than every other node in slurm.conf: no job "
     "takes it before it is needed.",
     health.validate_spares_kept_spare, Severity.HIGH),
    ("tenancy-team-qos-bounds-gpus", "stack",
     "Every QOS a team account uses as its DefaultQOS bounds the team's GPUs: GrpTRES sets gres/gpu=<n>.",
     tenancy.validate_team_qos_bounds, Severity.HIGH),
    ("tenancy-no-suspend-preemption", "resource",
     "Preemption never suspends (SUSPEND or GANG in slurm.conf's PreemptMode or a partition's, SUSPEND in "
     "a QOS's): a suspended job keeps its GPUs.",
     tenancy.validate_no_suspend, Severity.HIGH),
    ("tenancy-preemption-graph", "stack",
     "Preemption runs one way: a preemptable QOS preempts no team's DefaultQOS, and no Preempt list "
     "leads back to itself.",
     tenancy.validate_preemption_graph, Severity.HIGH),
    ("tenancy-guarantees-fit", "stack",
     "The teams' GPU guarantees (their QOS's GrpTRES gres/gpu:<type>) add up to no more than the GPUs of "
     "that type the stack's partition nodes have.",
     tenancy.validate_guarantees_fit, Severity.HIGH),
    (relax.REASONS_POLICY, "stack",
     "Each policy this stack relaxes has a written reason in the policy pack config.",
     relax.validate_reasons, Severity.HIGH),
    (relax.REPORT_POLICY, "stack",
     "Lists every policy this stack relaxes, with its reason (printed in every preview).",
     relax.validate_report, Severity.LOW),
]

REASON_SCHEMA = PolicyConfigSchema(properties={
    "reason": {"type": "string",
               "description": "Why this stack may break the rule; required to relax the policy."},
})

VALIDATORS = {name: fn for name, _, _, fn, _ in _SPECS}
DESCRIPTIONS = {name: desc for name, _, desc, _, _ in _SPECS}
KINDS = {name: kind for name, kind, _, _, _ in _SPECS}


def declared_levels() -> dict[str, str]:
    """Policy name -> declared enforcement level (all mandatory but the relaxation report)."""
    return {name: relax.FIXED.get(name, "mandatory") for name in VALIDATORS}


def policies() -> list:
    out = []
    levels = declared_levels()
    for name, kind, desc, fn, severity in _SPECS:
        level = EnforcementLevel(levels[name])
        schema = None if name in relax.FIXED else REASON_SCHEMA
        cls = ResourceValidationPolicy if kind == "resource" else StackValidationPolicy
        out.append(cls(name=name, description=desc, validate=each_member(fn, kind), enforcement_level=level,
                       config_schema=schema, severity=severity))
    return out
