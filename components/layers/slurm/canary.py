"""Canary acceptance: the seed's single-GPU job, run on every rollout of the Slurm layer.

It is a Slurm job, so the Slurm layer owns it: the layer runs it as its canary-first gate
inside its rollout, and the acceptance layer (components/layers/acceptance) declares the
final run through the same `JobSpec`.

The job runs as an unprivileged user (DisableRootJobs=YES) through `srun` on
the controller, always under a timeout (a drained cluster blocks forever).
First a MUNGE credential made on the controller must decode on every node. Then
what the job proves is read from the job itself, not from configuration:
CUDA_VISIBLE_DEVICES is exactly one index in range (counted by fields), the
job's cgroup path contains its job id, the model marker is readable (when one
is configured), the job root is writable and the probe file is cleaned up, the
exit code is 0, and the node's GPUs are all free again afterwards.

Fail closed: if any check fails, every partition is set INACTIVE before the
deployment fails, so the cluster never half-serves; a passing run sets them UP,
except a canary-first gate (`open_partitions=False`): it runs on the canary
nodes before the rest of the fleet moves, and only the final run opens them.
`triggers` (hashes of everything the layer applied) make it run again whenever
the layer changes; with nothing changed it does not run at all.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

import pulumi
from pulumi.dynamic import Resource

from ...config.hosts import GpuSpec
from ...errors import FleetError
from ...facts.scontrol import parse_show_oneliner
from ...kit import sh
from ...providers.base import RolloutCheck
from ...providers.parts import Props, target_of
from ...scripts import installed, script
from ...site import Site
from ...transport import FanOutError, SshTarget, connection, fan_out
from .render import ACCEPTANCE_PARTITION, SLURM_ETC, count_visible_gpus

_NODES_READY = script(__file__, "nodes_ready.sh")
_JOB = script(__file__, "job.sh")
#: the partitions' state and the verdict that keeps it across a slurmctld restart: sent as a
#: command's text, and installed whole (its `#!` line too) for the unit that reopens them
PARTITIONS_SH = script(__file__, "partitions.sh")
PARTITIONS_INSTALLED = installed(__file__, "partitions.sh")
#: which partitions the last passing acceptance opened, for which Slurm configuration
VERDICT = "/var/lib/gpu-fleet/slurm/open-partitions"
#: "JobID|<fields>" of jobs or steps once accounting's record is final (the acceptance layer's too)
SACCT_FIELDS = script(__file__, "sacct_fields.sh")


def parse_job(stdout: str) -> dict[str, str]:
    out = {}
    for line in stdout.splitlines():
        k, sep, v = line.partition("=")
        if sep and k in ("job", "node", "cvd", "cgroup", "marker", "jobroot", "rowrite", "rc"):
            out[k] = v.strip()
    return out


def parse_gres_used(scontrol_node: str) -> Optional[int]:
    """GPUs in use on a node from `scontrol -d show node -o` (GresUsed=gpu:v100:0(IDX:N/A))."""
    nodes = parse_show_oneliner(scontrol_node)
    m = re.match(r"\S*?gpu(?::[A-Za-z0-9_]+)?:(\d+)", nodes[0].get("GresUsed", "")) if nodes else None
    return int(m.group(1)) if m else None


def judge(job: dict[str, str], rc: int, gpus_on_node: int, gres_used_after: Optional[int],
          marker_expected: bool, readonly_expected: bool = False) -> list[str]:
    """Every failed check, as a sentence naming what was seen (pure)."""
    fails = []
    if rc != 0:
        fails.append(f"the canary job exited {rc}")
    cvd = job.get("cvd", "")
    if count_visible_gpus(cvd) != 1:
        fails.append(f"CUDA_VISIBLE_DEVICES={cvd!r} is not exactly one GPU")
    elif not cvd.strip().isdigit() or not 0 <= int(cvd) < gpus_on_node:
        fails.append(f"CUDA_VISIBLE_DEVICES={cvd!r} is not an index in 0..{gpus_on_node - 1}")
    job_id = job.get("job", "")
    if not job_id or f"job_{job_id}" not in job.get("cgroup", ""):
        fails.append(f"the job's cgroup {job.get('cgroup')!r} does not contain job_{job_id}")
    if marker_expected and job.get("marker") != "ok":
        fails.append(f"the model marker is {job.get('marker', 'not checked')}")
    if job.get("jobroot") != "ok":
        fails.append("the job root is not writable or the probe file was not cleaned up")
    if readonly_expected and job.get("rowrite") != "refused":
        fails.append(f"a write into the read-only model store was {job.get('rowrite', 'not tried')}")
    if gres_used_after is None:
        fails.append("the node's GPU use after the job could not be read (scontrol show node)")
    elif gres_used_after != 0:
        fails.append(f"the node still has {gres_used_after} GPU(s) allocated after the job")
    return fails


def judge_sacct(alloc_tres: str, gpu_type: str, count: int = 1) -> list[str]:
    """The job's accounted TRES must count its `count` GPUs both generic and typed (the seed's rule)."""
    fields = dict(f.split("=", 1) for f in alloc_tres.split(",") if "=" in f)
    fails = []
    for key in ("gres/gpu", f"gres/gpu:{gpu_type}"):
        if fields.get(key) != str(count):
            fails.append(f"sacct AllocTRES {alloc_tres!r} does not count {key}={count}")
    return fails


class CanaryJobProvider(RolloutCheck):
    """Runs the acceptance on every rollout (a job is an action, not a probe)."""

    rerun_on = ("triggers", "node", "user", "marker", "job_root", "readonly_probe", "partitions", "partition",
                "nodes", "gpu_type")

    def key(self, props: Props) -> str:
        return f"canary:{props['node']}"

    def _partitions(self, conn, props: Props, state: str) -> None:
        set_partitions(conn, props["partitions"], state)

    def run(self, props: Props) -> dict[str, Any]:
        conn = connection(target_of(props))
        conn.connect()
        if not props.get("node"):
            self._partitions(conn, props, "INACTIVE")
            which = "GPU node" if props.get("open_partitions", True) else "canary node of the stack"
            raise FleetError(f"no {which} passed the GPU baseline: nothing to accept; partitions "
                             f"{', '.join(props['partitions'])} set INACTIVE (see the `gpu` output)")
        timeout = int(props["timeout_s"])
        ready = conn.run(sh(_NODES_READY, str(timeout), *props["nodes"]), mutating=False, check=False,
                         timeout=timeout + 30)
        if ready.rc != 0:
            self._partitions(conn, props, "INACTIVE")
            raise FleetError(
                f"host {conn.t.name}: Slurm nodes are not all idle after {timeout} s; partitions "
                f"{', '.join(props['partitions'])} set INACTIVE:\n  " + ready.stdout.strip().replace("\n", "\n  "))
        self._munge_gate(conn, props)
        job_argv = ["timeout", str(timeout), "runuser", "-u", props["user"], "--",
                    "srun", f"--partition={props['partition']}", "-N1", "-n1",
                    f"--nodelist={props['node']}", f"--gres=gpu:{props['gpu_type']}:1",
                    "--mem=100", "--time=2", "--job-name=gpu-fleet-canary",
                    *sh(_JOB, props.get("marker") or "", props["job_root"], props.get("readonly_probe") or "")]
        res = conn.run(["sh", "-c", 'cd /tmp && "$@"; echo "rc=$?"', "sh", *job_argv],
                       mutating=True, check=False, timeout=timeout + 30)
        job = parse_job(res.stdout)
        rc = int(job.get("rc", "255"))
        node = conn.run(["scontrol", "-d", "show", "node", "-o", props["node"]], mutating=False, check=False)
        fails = judge(job, rc, int(props["gpus"]), parse_gres_used(node.stdout), bool(props.get("marker")),
                      bool(props.get("readonly_probe")))
        if fails:
            self._partitions(conn, props, "INACTIVE")
            raise FleetError(
                f"canary acceptance on {props['node']} failed; partitions {', '.join(props['partitions'])} "
                "set INACTIVE:\n  - " + "\n  - ".join(fails) + "\n  job output:\n    "
                + (res.stdout + res.stderr).strip().replace("\n", "\n    "))
        if props.get("accounting"):
            fails = judge_sacct(self._sacct(conn, job.get("job", "")), props["gpu_type"])
            if fails:
                self._partitions(conn, props, "INACTIVE")
                raise FleetError(f"canary job {job.get('job')}: accounting check failed; partitions "
                                 f"{', '.join(props['partitions'])} set INACTIVE:\n  - " + "\n  - ".join(fails))
        if props.get("open_partitions", True):
            self._partitions(conn, props, "UP")
        return {"passed": True, "job_id": job.get("job"), "cuda_visible_devices": job.get("cvd"),
                "cgroup": job.get("cgroup"), "marker_check": job.get("marker"),
                "nodes_ready": ready.stdout.strip().splitlines()}

    def _sacct(self, conn, job_id: str) -> str:
        """AllocTRES of the job as accounting recorded it (records land a few seconds late)."""
        out = conn.run(sh(SACCT_FIELDS, "AllocTRES", job_id), mutating=False, check=False, timeout=90).stdout
        return out.strip().partition("|")[2]

    def _munge_gate(self, conn, props: Props) -> None:
        munge_gate(conn, [SshTarget.from_dict(c) for c in props.get("node_conns") or []], props["partitions"])


def set_partitions(conn, partitions: Sequence[str], state: str) -> None:
    """Open (UP) or close (INACTIVE) the partitions in one round trip; opening records the
    verdict a restarted slurmctld reopens them from (partitions.sh), closing withdraws it."""
    conn.run(sh(PARTITIONS_SH, "set", state, VERDICT, SLURM_ETC, *partitions), mutating=True)


def munge_gate(conn, nodes: Sequence[SshTarget], partitions: Sequence[str]) -> None:
    """A credential made on the controller must decode on every node (one key, one clock);
    else the partitions are set INACTIVE and the deployment fails."""
    cred = conn.run(["munge", "-n"], mutating=False).stdout.strip()

    def decode(c):
        out = c.run(["unmunge"], mutating=False, check=False, stdin=cred.encode(), stdin_secret=True)
        if "Success (0)" not in out.stdout:
            raise FleetError(f"unmunge failed: {(out.stdout + out.stderr).strip().splitlines()[:2]}")

    try:
        fan_out(list(nodes), decode)
    except FanOutError as e:
        set_partitions(conn, partitions, "INACTIVE")
        raise FleetError(f"a MUNGE credential from {conn.t.name} does not decode on every node; "
                         f"partitions {', '.join(partitions)} set INACTIVE:\n{e}") from None


class CanaryJob(Resource, module="slurm", name="CanaryJob"):
    """The acceptance job; fails the deployment and sets partitions INACTIVE on any failed check."""

    passed: pulumi.Output[bool]
    job_id: pulumi.Output[str]
    cuda_visible_devices: pulumi.Output[str]
    cgroup: pulumi.Output[str]

    def __init__(self, name: str, *, conn: dict, node: pulumi.Input[str], gpus: pulumi.Input[int],
                 gpu_type: pulumi.Input[str], user: str, nodes: pulumi.Input[list[str]],
                 partitions: list[str], partition: str, job_root: str,
                 triggers: pulumi.Input[dict], node_conns: Optional[pulumi.Input[list[dict]]] = None,
                 accounting: bool = False, open_partitions: bool = True,
                 marker: Optional[str] = None, readonly_probe: Optional[str] = None, timeout_s: int = 120,
                 opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__(
            CanaryJobProvider(), name,
            {"conn": conn, "node": node, "gpus": gpus, "gpu_type": gpu_type, "user": user,
             "nodes": nodes, "partitions": partitions, "partition": partition, "job_root": job_root,
             "node_conns": node_conns or [], "accounting": accounting,
             "open_partitions": open_partitions,
             "marker": marker, "readonly_probe": readonly_probe,
             "timeout_s": timeout_s, "triggers": triggers, "passed": None, "job_id": None,
             "cuda_visible_devices": None, "cgroup": None, "nodes_ready": None},
            opts,
        )


@dataclass(frozen=True)
class JobPaths:
    """What the job reads, writes and must fail to write: without the storage layer, a job
    root in /tmp and nothing else; with it, the store's marker, its job root and the
    read-only model mount (the storage layer's outputs)."""

    marker: Optional[str] = None
    job_root: str = "/tmp"
    readonly_probe: Optional[str] = None


@dataclass(frozen=True, kw_only=True)
class JobSpec:
    """Where and how the job runs, the same for every acceptance run of a stack: the Slurm
    layer's canary-first gate and the acceptance layer's final run both declare it here."""

    site: Site
    #: the Slurm layer's canary user and partitions (the job opens or closes them)
    canary_user: str
    partitions: tuple[str, ...]
    #: acceptance.job_timeout_s
    timeout_s: int
    accounting: bool
    paths: JobPaths = JobPaths()

    def at(self, paths: JobPaths) -> JobSpec:
        """The same job reading and writing `paths` (the final run: the model's marker)."""
        return dataclasses.replace(self, paths=paths)

    def job(self, name: str, node: pulumi.Output[str], on: pulumi.Output[list], triggers: Mapping,
            after: Sequence[pulumi.Resource], open_partitions: bool,
            parent: pulumi.Resource) -> CanaryJob:
        """The job on `node`, with every node of `on` registered and idle first."""
        site = self.site
        by_name = {n.name: n for n in site.nodes}

        def gpus(c: str) -> GpuSpec:
            g = by_name[c].gpus
            assert g is not None, f"{c}: a canary job runs on a GPU node"  # as its callers pick it
            return g

        return CanaryJob(
            name, conn=site.conn(site.hosts.controller), node=node,
            gpus=node.apply(lambda c: gpus(c).count if c else 0),
            gpu_type=node.apply(lambda c: gpus(c).type if c else ""),
            user=self.canary_user, nodes=on,
            partitions=list(self.partitions), partition=ACCEPTANCE_PARTITION,
            node_conns=on.apply(lambda ns: [site.conn(by_name[n]) for n in ns]),
            accounting=self.accounting, open_partitions=open_partitions, job_root=self.paths.job_root,
            marker=self.paths.marker, readonly_probe=self.paths.readonly_probe,
            timeout_s=self.timeout_s, triggers=dict(triggers),
            opts=pulumi.ResourceOptions(parent=parent, depends_on=list(after)))
