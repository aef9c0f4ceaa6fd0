"""Pure renderers: slurm.conf, gres.conf and cgroup.conf from the stack config.

Typed model in, text out, with a "managed by gpu-fleet" header; no host is
read. They encode the seed's four contracts:
  - scheduling: select/cons_tres + CR_Core_Memory + GresTypes=gpu, typed GPU GRES;
  - isolation: proctrack/cgroup + task/cgroup,task/affinity and cgroup constraints
    (cores, RAM, swap, devices);
  - identity: auth/munge + cred/munge;
  - operations: sched/backfill, ReturnToService, DisableRootJobs=YES.
Only nodes that are members of a partition get a NodeName line: nodes owned by
K3s or unreachable are never added (components/admission.py).
"""

from __future__ import annotations

from ...config.hosts import HostSpec, NodeSpec
from .config import SlurmLayer
from .scheduling import NO_SCHEDULING, Scheduling

ACCEPTANCE_PARTITION = "gpu-fleet-acceptance"
SLURM_ETC = "/etc/slurm"
STATE_SAVE_LOCATION = "/var/lib/slurm/slurmctld"
HEADER = "# Managed by gpu-fleet: changes made here are overwritten on the next `pulumi up`.\n"


def _compress(names: list[str]) -> str:
    """Comma list in stack order; Slurm accepts it as is and it diffs cleanly."""
    return ",".join(names)


def gres_of(node: NodeSpec, shards_per_gpu: int = 0) -> str:
    if not node.gpus:
        return ""
    shards = f",shard:{node.gpus.count * shards_per_gpu}" if shards_per_gpu else ""
    return f"gpu:{node.gpus.type}:{node.gpus.count}{shards}"


def render_slurm_conf(s: SlurmLayer, ctl: HostSpec, partition_nodes: list[NodeSpec], *, acceptance: bool,
                      accounting_host: str | None = None, nodes: list[NodeSpec] | None = None,
                      scheduling: Scheduling = NO_SCHEDULING) -> str:
    """`partition_nodes`: every node the partitions name; `nodes`: those admitted (default:
    all), the rest are left out, and a partition left without nodes stays INACTIVE.
    `acceptance`: the acceptance layer opens the partitions (they start INACTIVE).
    `scheduling`: another layer's section (tenancy) and node features."""
    members = partition_nodes if nodes is None else nodes
    admitted = {n.name for n in members}
    lines = [
        HEADER,
        f"ClusterName={s.cluster_name}",
        f"SlurmctldHost={ctl.name}({ctl.address})",
        "SlurmUser=slurm",
        "SlurmctldPort=6817",
        "SlurmdPort=6818",
        "",
        "# identity",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        "",
        "# scheduling",
        "SchedulerType=sched/backfill",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core_Memory",
        "GresTypes=gpu" + (",shard" if scheduling.shards_per_gpu else ""),
        f"DefMemPerCPU={s.def_mem_per_cpu_mib}",
        "",
        "# isolation",
        "ProctrackType=proctrack/cgroup",
        "TaskPlugin=task/cgroup,task/affinity",
        "",
        "# operations",
        "ReturnToService=2",
        "DisableRootJobs=YES",
        "MpiDefault=none",
        f"StateSaveLocation={STATE_SAVE_LOCATION}",
        "SlurmdSpoolDir=/var/lib/slurm/slurmd",
        "SlurmctldPidFile=/run/slurmctld.pid",
        "SlurmdPidFile=/run/slurmd.pid",
        "SlurmctldLogFile=/var/log/slurm/slurmctld.log",
        "SlurmdLogFile=/var/log/slurm/slurmd.log",
    ]
    if accounting_host:
        lines += [
            "",
            "# accounting",
            "AccountingStorageType=accounting_storage/slurmdbd",
            f"AccountingStorageHost={accounting_host}",
            "AccountingStorageTRES=" + ",".join(
                ["gres/gpu"] + sorted({f"gres/gpu:{n.gpus.type}" for n in partition_nodes if n.gpus})
                + (["gres/shard"] if scheduling.shards_per_gpu else [])),
            "JobAcctGatherType=jobacct_gather/cgroup",
            "AuthAltTypes=auth/jwt",
            "AuthAltParameters=jwt_key=/etc/slurm/jwt_hs256.key",
        ]
    if scheduling.lines:
        lines += ["", f"# {scheduling.title}", *scheduling.lines]
    lines += ["", "# nodes"]
    # lightest first: Slurm 22.05 fills a new reservation in node order, 24.11 by Weight
    for n in sorted(members, key=lambda m: scheduling.weights.get(m.name, 1)):
        gres = gres_of(n, scheduling.shards_per_gpu)
        features = scheduling.features.get(n.name)
        weight = scheduling.weights.get(n.name)
        lines.append(
            f"NodeName={n.name} NodeAddr={n.address} CPUs={n.cpus} RealMemory={n.real_memory_mib}"
            + (f" Gres={gres}" if gres else "") + (f" Features={','.join(features)}" if features else "")
            + (f" Weight={weight}" if weight else "") + " State=UNKNOWN"
        )
    lines += ["", "# partitions"]
    # Fail closed: production partitions start INACTIVE and only a passing acceptance run
    # sets them UP, so a rollout that stops half-way never serves a partial node set.
    state = "INACTIVE" if acceptance else "UP"
    for p in s.partitions:
        pnodes = [x for x in p.nodes if x in admitted]
        lines.append(
            f"PartitionName={p.name}" + (f" Nodes={_compress(pnodes)}" if pnodes else "")
            + f" Default={'YES' if p.default else 'NO'} MaxTime={p.max_time}"
            + f" State={state if pnodes else 'INACTIVE'}"
        )
    if acceptance and members:
        # Where the acceptance job runs: open only to the canary user, so it can prove a node
        # while the production partitions are INACTIVE after a failed rollout.
        lines.append(
            f"PartitionName={ACCEPTANCE_PARTITION} Nodes={_compress([n.name for n in members])}"
            f" Default=NO Hidden=YES AllowGroups={s.canary_user} MaxTime=10 State=UP"
        )
    return "\n".join(lines) + "\n"


def render_gres_conf(s: SlurmLayer, nodes: list[NodeSpec], shards_per_gpu: int = 0) -> str:
    """Typed GPU GRES per node; `File=` is required (Count= alone leaves the node INVAL).
    Shards, when on, are counted per GPU by its device file (a job's shards share one GPU)."""
    lines = [HEADER]
    if s.gres_autodetect == "nvml":
        lines.append("AutoDetect=nvml")
    for n in nodes:
        if not n.gpus:
            continue
        last = n.gpus.count - 1
        files = f"{s.gpu_device_prefix}[0-{last}]" if last else f"{s.gpu_device_prefix}0"
        lines.append(f"NodeName={n.name} Name=gpu Type={n.gpus.type} File={files}")
        if shards_per_gpu:
            lines += [f"NodeName={n.name} Name=shard Count={shards_per_gpu} File={s.gpu_device_prefix}{i}"
                      for i in range(n.gpus.count)]
    return "\n".join(lines) + "\n"


def render_cgroup_conf(s: SlurmLayer) -> str:
    """Constrain cores, RAM, swap and devices; `cgroup/v1` needs CgroupAutomount (the lab)."""
    plugin = s.cgroup_plugin
    lines = [HEADER, f"CgroupPlugin={plugin}"]
    if plugin == "cgroup/v1":
        lines.append("CgroupAutomount=yes")
    lines += ["ConstrainCores=yes", "ConstrainRAMSpace=yes"]
    if s.constrain_swap:
        lines += ["ConstrainSwapSpace=yes", "AllowedSwapSpace=0"]
    else:
        lines += [f"# Swap not confined: {s.constrain_swap_reason}", "ConstrainSwapSpace=no"]
    lines += ["ConstrainDevices=yes"]
    return "\n".join(lines) + "\n"


def count_visible_gpus(cuda_visible_devices: str) -> int:
    """GPUs a task sees, counted by fields: '0,1,...,7' is 8 (the seed once counted the 7 commas)."""
    return len([f for f in cuda_visible_devices.strip().split(",") if f.strip()])


FAKE_GPUS_UNIT = "gpu-fleet-fake-gpus.service"


def render_fake_gpus_unit(s: SlurmLayer, count: int) -> str:
    """TEST DOUBLE (`fake_gpu_devices`): the node's GPU device files (char 195:N), made at every
    boot before slurmd (gres.conf names them). Stopping the unit removes only the files it made
    (listed in its runtime directory): files already there (another owner's, such as the lab's
    K3s) stay, as the old one-off mknod left what it adopted. `$$`: systemd's `$`."""
    devs = " ".join(f"{s.gpu_device_prefix}{i}" for i in range(count))
    rundir = FAKE_GPUS_UNIT.removesuffix(".service")
    made = f"/run/{rundir}/made"
    return (
        "[Unit]\nDescription=gpu-fleet test double: fake GPU device files\nBefore=slurmd.service\n\n"
        "[Service]\nType=oneshot\nRemainAfterExit=yes\n"
        f"RuntimeDirectory={rundir}\n"
        f"ExecStart=/bin/sh -c 'i=0; for d in {devs}; do [ -c \"$$d\" ] || "
        f"{{ mknod -m 0666 \"$$d\" c 195 $$i && echo \"$$d\" >> {made}; }}; i=$$((i+1)); done'\n"
        f"ExecStop=/bin/sh -c '[ ! -f {made} ] || xargs -r rm -f -- < {made}'\n\n"
        "[Install]\nWantedBy=multi-user.target\n")

