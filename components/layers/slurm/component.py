"""The Slurm layer: identities, pinned packages, MUNGE, rendered config, daemons, canary.

Order on every host follows the seed's lessons: numeric identities first (so
package scripts find `slurm`/`munge` with the stack's ids instead of inventing
their own), then exact package versions held, then the MUNGE key (a Pulumi
secret, 0400 munge:munge), then the rendered config, then the daemons with
`Delegate=yes` checked live. Nodes not in a partition (K3s-owned, unreachable)
get nothing. Config changes reach live daemons with `scontrol reconfigure`;
only changes Slurm cannot reconfigure (node and partition definitions,
cgroup.conf, gres.conf, the MUNGE key) restart daemons. Inside the layer the
controller and the canary nodes go first and must pass the acceptance job before
any other node's packages move; the acceptance layer's final run opens the
partitions. What the layer takes (`SlurmInputs`: the admitted nodes, what
slurmctld waits on) and hands on (`SlurmOutputs`) are typed; `Fleet` wires them.
"""

from __future__ import annotations

import pulumi

from dataclasses import dataclass, field
from typing import Mapping, Optional, Sequence

from ...kit import sha256
from ...admission import Admission
from ...config.hosts import HostSpec
from ...scripts import script
from ...site import Site
from ...providers import Accounts, CommandWithVerify, File, Files, PackageSet, SystemdUnit
from .canary import JobSpec
from .config import SlurmLayer
from .packages import SlurmPackages
from .scheduling import NO_SCHEDULING, Scheduling
from .render import (
    FAKE_GPUS_UNIT, SLURM_ETC, render_cgroup_conf, render_fake_gpus_unit, render_gres_conf, render_slurm_conf,
)
from .upgrades import SlurmPackagesProvider, own_packages
from .validate import validate_argv


# Reconfigure only daemons older than the current slurm.conf (why: the script's header).
_RECONFIGURE = script(__file__, "reconfigure.sh")
# Drain the nodes a new slurm.conf drops before slurmctld takes it (why: the script's header).
_RELEASE = script(__file__, "release_nodes.sh")
_ANSWERS = script(__file__, "controller_answers.sh")
#: how long the nodes wait for a (re)started slurmctld to answer
ANSWER_WAIT_S = 60
#: how long the release waits for jobs on a node leaving the cluster
RELEASE_WAIT_S = 600


def restart_key(slurm_conf: str, cgroup_conf: str, gres_conf: str, extra: str = "") -> str:
    """What daemons cannot take through `scontrol reconfigure` (22.05): node and
    partition definitions, plugins (auth, accounting storage and gathering, preemption,
    priority, job submission, topology) and enforcement, cgroup.conf, gres.conf, and the
    other layers' files (`extra`: topology.conf, job_submit.lua)."""
    structural = [line for line in slurm_conf.splitlines()
                  if line.startswith(("NodeName=", "PartitionName=", "SlurmctldHost=", "AuthType=",
                                      "AuthAltTypes=", "AccountingStorageType=", "JobAcctGatherType=",
                                      "SelectType", "GresTypes=", "ProctrackType=", "TaskPlugin=",
                                      "PreemptType=", "PriorityType=", "JobSubmitPlugins=", "TopologyPlugin=",
                                      "AccountingStorageEnforce="))]
    return sha256("\n".join(structural) + cgroup_conf + gres_conf + extra, 16)


@dataclass(frozen=True, kw_only=True)
class SlurmInputs:
    site: Site
    slurm: SlurmLayer
    #: acceptance.enabled: the partitions start INACTIVE and the canary-first gate runs
    acceptance: bool
    munge_key: pulumi.Output[str]
    #: which partition nodes the layer renders and serves (components/admission.py)
    admission: Admission
    #: what slurmctld waits on before it starts: the accounting layer's `ready`, handed over
    #: by Fleet once that layer exists (empty without accounting)
    controller_gate: pulumi.Input[Sequence[pulumi.Resource]]
    accounting: bool = False
    #: how the canary-first job runs (its paths: the storage layer's, when it is on)
    job: JobSpec
    #: node -> what must be in place before the layer touches it (a retired K3s node's stop)
    node_after: Mapping[str, Sequence[pulumi.Resource]] = field(default_factory=dict)
    #: another layer's scheduler settings and files (the tenancy layer's)
    scheduling: Scheduling = NO_SCHEDULING


@dataclass(frozen=True)
class SlurmOutputs:
    admitted: pulumi.Output[list]
    #: on the controller: identities, the release's packages and MUNGE (what accounting needs)
    controller_base: Sequence[pulumi.Resource]
    slurmctld: pulumi.Resource
    #: every node's config pushed to the daemons (`scontrol reconfigure` when needed)
    reconfigured: pulumi.Resource
    canary_first: Optional[pulumi.Resource]
    #: hashes of what the layer applied; whoever must re-run on a change takes them
    triggers: dict

    def exports(self) -> dict[str, pulumi.Input]:
        return {"slurmNodes": self.admitted}


class SlurmCluster(pulumi.ComponentResource):
    """slurmctld on the controller, slurmd on every partition node, one MUNGE key, one config."""

    def __init__(self, name: str, inputs: SlurmInputs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-fleet:slurm:SlurmCluster", name, None, opts)
        site, munge_key, accounting = inputs.site, inputs.munge_key, inputs.accounting
        s = inputs.slurm
        nodes = site.slurm_nodes()
        by_name = {n.name: n for n in nodes}
        admitted = inputs.admission.admitted
        admitted_specs = admitted.apply(lambda names: [n for n in nodes if n.name in names])
        ctl = site.hosts.controller
        acct_host = ctl.name if accounting else None
        sched = inputs.scheduling
        self.slurm_conf = admitted_specs.apply(lambda ns: render_slurm_conf(
            s, ctl, nodes, acceptance=inputs.acceptance, accounting_host=acct_host, nodes=ns, scheduling=sched))
        self.cgroup_conf = render_cgroup_conf(s)
        self.gres_conf = admitted_specs.apply(lambda ns: render_gres_conf(s, ns, sched.shards_per_gpu))
        confs: dict[str, pulumi.Input[str]] = {
            "slurm.conf": self.slurm_conf, "cgroup.conf": self.cgroup_conf, "gres.conf": self.gres_conf,
            **sched.files}
        extra = "".join(f"{k}\n{v}" for k, v in sorted(sched.files.items()))
        restart = pulumi.Output.all(self.slurm_conf, self.gres_conf).apply(
            lambda t: restart_key(t[0], self.cgroup_conf, t[1], extra))
        conf_hash = self.slurm_conf.apply(lambda t: sha256(t, 16))
        # the daemons' restart trigger for a new key: 64 bits of the SHA-256 of 1024 random bytes
        # say nothing of the key, so in the clear (as a secret it was a ciphertext twice in
        # each daemon's state: ~0.6 KB a node, issue 16); the key itself stays a secret
        key_hash = pulumi.Output.unsecret(munge_key.apply(lambda k: sha256(k, 16)))

        self.packages = SlurmPackages(site, s.release, pulumi.ResourceOptions(parent=self), inputs.node_after)
        steps = _HostSteps(self, inputs, confs, restart=restart, conf_hash=conf_hash, key_hash=key_hash)
        daemons = steps.daemons

        # AuthAltTypes=auth/jwt (for slurmrestd) makes every daemon load the JWT plugin.
        jwt = {"slurm-wlm-jwt-plugin": s.release.debian_version} if accounting else {}
        slurmctld = steps.controller(ctl, {**s.release.controller_packages(), **jwt})
        ctl_conn = site.conn(ctl)
        node_packages = {**s.release.node_packages(), **jwt}
        packages_hash = sha256(repr(sorted(node_packages.items())), 16)

        canaries = [n for n in nodes if n.canary]
        rest = [n for n in nodes if not n.canary]
        for n in canaries:
            steps.node(n, node_packages)
        # Canary first inside the stack: the controller and the canary nodes take a new
        # release (or key, or restart-worthy config) and must pass the acceptance job before
        # any other node's packages move. A failure stops the rollout with the rest of the
        # fleet untouched; only the final acceptance (the acceptance layer) opens the partitions.
        canary_first = None
        if inputs.acceptance and rest and any(n.gpus for n in canaries):
            gate_nodes = admitted.apply(lambda names: [n.name for n in canaries if n.name in names])
            gate_node = gate_nodes.apply(
                lambda names: next((n for n in names if by_name[n].gpus), ""))
            canary_first = inputs.job.job(
                "canary-first", gate_node, gate_nodes,
                {"restart": restart, "key": key_hash, "packages": packages_hash, "canaries": gate_nodes},
                after=list(daemons), open_partitions=False, parent=self)
        for n in rest:
            steps.node(n, node_packages, after=(canary_first,) if canary_first else ())
        reconf = CommandWithVerify(
            "slurm-reconfigure", conn=ctl_conn, create=["sh", "-c", _RECONFIGURE, "sh", f"{SLURM_ETC}/slurm.conf"],
            verify=["scontrol", "ping"], triggers={"slurm.conf": conf_hash},
            opts=pulumi.ResourceOptions(parent=self, depends_on=daemons))
        self.outputs = SlurmOutputs(
            admitted=admitted, controller_base=steps.ctl_base, slurmctld=slurmctld, reconfigured=reconf,
            canary_first=canary_first,
            triggers={"restart": restart, "slurm.conf": conf_hash, "key": key_hash, "packages": packages_hash})
        self.register_outputs({"admitted": admitted})


class _HostSteps:
    """The layer's steps on one host, the controller's or a node's, and what they share: the
    texts and hashes derived once from the inputs, and what a later host waits on (the
    controller's validated slurm.conf, its slurmctld answering). Resources are the layer's
    children, declared in the order the layer calls the steps."""

    def __init__(self, layer: SlurmCluster, inputs: SlurmInputs, confs: dict,
                 restart: pulumi.Output[str], conf_hash: pulumi.Output[str], key_hash: pulumi.Output[str]):
        self.layer, self.inputs, self.confs = layer, inputs, confs
        self.restart, self.conf_hash, self.key_hash = restart, conf_hash, key_hash
        self.s = inputs.slurm
        self.by_name = {n.name: n for n in inputs.site.slurm_nodes()}
        self.daemons: list[pulumi.Resource] = []
        self.answers: list[pulumi.Resource] = []  # the controller's slurmctld answering
        self.ctl_conf: list[pulumi.Resource] = []  # the controller's validated slurm.conf
        #: on the controller: identities, packages and MUNGE (what accounting builds on)
        self.ctl_base: list[pulumi.Resource] = []

    def _opts(self, *depends_on) -> pulumi.ResourceOptions:
        return pulumi.ResourceOptions(parent=self.layer, depends_on=list(depends_on))

    def base(self, host: HostSpec, packages: dict[str, str], after: tuple[pulumi.Resource, ...]):
        """Identities, the release's packages and MUNGE with the stack's key, on any host:
        (conn, the accounts, the packages, munged)."""
        s, h = self.s, host.name
        conn = self.inputs.site.conn(host)
        # one resource for the host's three service accounts (issue 16: bundle.py); its
        # alias names the first of the three resources an earlier release kept
        ids = [Accounts(f"{h}-accounts", conn=conn, legacy=f"{h}-munge-account",
                        opts=self._opts(*self.inputs.node_after.get(h, ())), accounts=[
            {"user": "munge", "uid": s.munge_uid, "gid": s.munge_gid},
            {"user": "slurm", "uid": s.slurm_uid, "gid": s.slurm_gid},
            {"user": s.canary_user, "uid": s.canary_uid, "gid": s.canary_uid, "shell": "/bin/sh"}])]
        # the packages start no daemon: munged before its key, slurmd before its config
        # (24.11's waits out systemd's start timeout); the units below start them
        pkgs = PackageSet(f"{h}-slurm-packages", conn=conn, packages=packages, hold=True,
                          start_services=False, provider=SlurmPackagesProvider(),
                          upgrade_from=own_packages(packages, s.release.debian_version),
                          opts=self._opts(*ids, self.layer.packages.sources[h], *after))
        key = File(f"{h}-munge-key", conn=conn, path="/etc/munge/munge.key", content=self.inputs.munge_key,
                   mode="0400", owner="munge", group="munge", secret=True, opts=self._opts(pkgs))
        munge = SystemdUnit(f"{h}-munge", conn=conn, unit="munge.service", triggers={"key": self.key_hash},
                            opts=self._opts(key))
        return conn, ids, pkgs, munge

    def controller(self, host: HostSpec, packages: dict[str, str]) -> pulumi.Resource:
        """The controller: its slurm.conf validated in isolation before it is put in place (the
        nodes' copies follow only once it was), the nodes it drops drained, slurmctld once the
        accounting layer's gate is open, then until slurmctld answers."""
        h = host.name
        conn, ids, pkgs, munge = self.base(host, packages, ())
        # the controller's copies carry the text (so `preview --diff` shows it once), a File each;
        # slurm.conf last, validated beside the files it names (gres.conf, topology.conf ...)
        written = {name: File(f"{h}-{name}", conn=conn, path=f"{SLURM_ETC}/{name}", content=text,
                              mode="0644", opts=self._opts(pkgs, *self.ctl_conf))
                   for name, text in self.confs.items() if name != "slurm.conf"}
        written["slurm.conf"] = File(
            f"{h}-slurm.conf", conn=conn, path=f"{SLURM_ETC}/slurm.conf", content=self.confs["slurm.conf"],
            mode="0644", validate=validate_argv(f"{SLURM_ETC}/slurm.conf"),
            opts=self._opts(pkgs, *self.ctl_conf, *written.values()))
        files = list(written.values())
        self.ctl_conf.append(written["slurm.conf"])
        self.ctl_base.extend([*ids, pkgs, munge])
        # nodes the new slurm.conf drops are drained before slurmctld takes it
        deps: list[pulumi.Resource] = [munge, *files, CommandWithVerify(
            f"{h}-slurm-release-nodes", conn=conn,
            create=["bash", "-c", _RELEASE, "bash", f"{SLURM_ETC}/slurm.conf", str(RELEASE_WAIT_S)],
            verify=["true"], triggers={"slurm.conf": self.conf_hash}, opts=self._opts(*files))]
        # slurmctld also waits on what the accounting layer hands over (slurmdbd serving, the
        # ClusterID adopted): it refuses to start while slurmdbd cannot serve it
        gate = pulumi.Output.from_input(self.inputs.controller_gate)
        daemon = SystemdUnit(
            f"{h}-slurmctld", conn=conn, unit="slurmctld.service", enabled=True, active=True, properties={},
            triggers={"restart": self.restart, "key": self.key_hash},
            opts=pulumi.ResourceOptions(parent=self.layer, depends_on=gate.apply(lambda g: [*deps, *(g or [])])))
        self.daemons.append(daemon)
        self.answers.append(CommandWithVerify(
            f"{h}-slurmctld-answers", conn=conn, create=["sh", "-c", _ANSWERS, "sh", str(ANSWER_WAIT_S)],
            verify=["sh", "-c", "scontrol ping | grep -q ' is UP'"],
            triggers={"restart": self.restart, "key": self.key_hash}, opts=self._opts(daemon)))
        return daemon

    def node(self, host: HostSpec, packages: dict[str, str],
             after: tuple[pulumi.Resource, ...] = ()) -> pulumi.Resource:
        """A partition node: its config after the controller's, the lab's fake GPU devices, and
        slurmd, serving only when admitted, once slurmctld answers (a slurmd that starts while
        no controller listens cannot register at once)."""
        s, h = self.s, host.name
        conn, _, pkgs, munge = self.base(host, packages, after)
        # a node's three files are one resource (issue 16: bundle.py) whose members carry each
        # text's SHA-256 and the local store's path: the same texts, but O(1) state a node
        deps: list[pulumi.Resource] = [munge, Files(
            f"{h}-slurm-config", conn=conn, legacy=f"{h}-slurm.conf", opts=self._opts(pkgs, *self.ctl_conf),
            files=[{"path": f"{SLURM_ETC}/{name}", "content": text} for name, text in self.confs.items()])]
        if s.fake_gpu_devices and h in self.by_name:
            gpus = self.by_name[h].gpus
            assert gpus is not None, f"{h}: fake GPU devices need the node's gpus"
            # a unit, not a one-off mknod: /dev is made again at every boot (a real node's driver
            # makes /dev/nvidia* at boot), and a node rebooted through Slurm needs them before slurmd
            deps.append(SystemdUnit(
                f"{h}-fake-gpus", conn=conn, unit=FAKE_GPUS_UNIT, content=render_fake_gpus_unit(s, gpus.count),
                opts=self._opts(pkgs)))
        serving = self.inputs.admission.admitted.apply(lambda names: h in names)
        daemon = SystemdUnit(
            f"{h}-slurmd", conn=conn, unit="slurmd.service", enabled=serving, active=serving,
            properties={"Delegate": "yes"}, triggers={"restart": self.restart, "key": self.key_hash},
            opts=self._opts(*deps, self.answers[0]))
        self.daemons.append(daemon)
        return daemon
