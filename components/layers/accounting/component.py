"""The accounting layer: MariaDB on loopback, slurmdbd, slurmrestd on a Unix socket.

All on the controller (the seed's storage server), before slurmctld starts:
MariaDB with its data in its own directory and bound to 127.0.0.1; the slurm
database user whose password is a Pulumi secret; `slurmdbd.conf` 0600 owned by
slurm; slurmdbd; the cluster registered; slurmrestd as its own unprivileged user
on a Unix socket only, with a JWT signing key (a Pulumi secret, 0600).

Its history survives rollback: `AccountingHistory` (between the database and
slurmdbd) removes the database only after a restore proved the backup, and
restores the newest proven dump into the empty database on reapply.

slurmdbd takes connections only from loopback, the controller and the compute
network: `dbd_firewall` loads the controller's nftables table before slurmdbd
may start, and proves it from both sides on every rollout.

Verified on every rollout by `AccountingCheck`, from the kernel's view, not the
config: MariaDB's listening sockets are loopback only, nothing listens on TCP for
slurmrestd, and slurmrestd answers on its socket with a token minted on the host
(the token never leaves it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import pulumi
from pulumi.dynamic import Resource

from .history import AccountingHistory
from . import firewall as fw
from .cluster_id import ClusterIdAdoption
from ...kit import after_of, sh, sha256
from ...config.hosts import HostSpec
from ...errors import FleetError
from ...scripts import script
from ...site import Site
from ...providers import Account, CommandWithVerify, File, PackageSet, SystemdUnit
from ...providers.base import RolloutCheck
from ...providers.parts import Props, target_of
from ..slurm.render import HEADER
from ..slurm.upgrades import SlurmPackagesProvider, own_packages
from ...transport import connection
from .config import AccountingLayer

JWT_KEY = "/etc/slurm/jwt_hs256.key"
RESTD_SOCKET_DIR = "/run/slurmrestd"
RESTD_SOCKET = f"{RESTD_SOCKET_DIR}/slurmrestd.socket"
MARIADB_CNF = "/etc/mysql/mariadb.conf.d/60-gpu-fleet.cnf"


def render_slurmdbd_conf(a: AccountingLayer, ctl: HostSpec, password: str) -> str:
    return "\n".join([
        HEADER,
        "AuthType=auth/munge",
        "AuthAltTypes=auth/jwt",
        f"AuthAltParameters=jwt_key={JWT_KEY}",
        f"DbdHost={ctl.name}",
        "SlurmUser=slurm",
        "StorageType=accounting_storage/mysql",
        "StorageHost=127.0.0.1",
        "StoragePort=3306",
        f"StorageUser={a.db_user}",
        f"StoragePass={password}",
        f"StorageLoc={a.database}",
        "PidFile=/run/slurmdbd.pid",
        "LogFile=/var/log/slurm/slurmdbd.log",
    ]) + "\n"


def render_mariadb_cnf(a: AccountingLayer) -> str:
    return "\n".join([
        HEADER, "[mysqld]", "bind-address = 127.0.0.1", "skip-name-resolve",
        f"datadir = {a.datadir}", "innodb_lock_wait_timeout = 900",
    ]) + "\n"


def render_slurmrestd_unit(a: AccountingLayer) -> str:
    return (
        "[Unit]\nDescription=Slurm REST daemon on a Unix socket (gpu-fleet)\n"
        "After=network.target munge.service slurmctld.service\n\n[Service]\n"
        f"User={a.restd_user}\nGroup={a.restd_user}\n"
        "RuntimeDirectory=slurmrestd\nRuntimeDirectoryMode=0755\n"
        "Environment=SLURM_JWT=daemon\n"
        f"ExecStart=/usr/sbin/slurmrestd -a rest_auth/jwt unix:{RESTD_SOCKET}\n"
        "Restart=on-failure\nNoNewPrivileges=yes\n\n[Install]\nWantedBy=multi-user.target\n")


# The DB user's password on stdin, never in argv, and never quoted by hand (db_user.sh).
_DB_USER = script(__file__, "db_user.sh")
# MariaDB loopback-only, slurmrestd on no TCP port, and answering on its socket.
_CHECK = script(__file__, "check.sh")


def judge_accounting(stdout: str) -> tuple[dict, list[str]]:
    """Pure: the listening sockets and the REST answer -> (facts, failed checks)."""
    section, listen, status = None, [], None
    for line in stdout.splitlines():
        if line.startswith("== "):
            section = line[3:]
        elif section == "listen" and line.strip():
            listen.append(line.split(None, 1))
        elif section == "restd" and line.startswith("status"):
            status = line[len("status"):].strip() or None
    fails = []
    mysqld = [addr for addr, *proc in listen if proc and ("mariadbd" in proc[0] or "mysqld" in proc[0])]
    if not mysqld:
        fails.append("MariaDB is not listening at all")
    wide = [a for a in mysqld if not (a.startswith("127.0.0.1:") or a.startswith("[::1]:"))]
    if wide:
        fails.append(f"MariaDB listens beyond loopback: {', '.join(wide)}")
    restd_tcp = [a for a, *proc in listen if proc and "slurmrestd" in proc[0]]
    if restd_tcp:
        fails.append(f"slurmrestd listens on TCP: {', '.join(restd_tcp)}")
    if status != "200":
        fails.append(f"slurmrestd did not answer on its Unix socket (HTTP status {status})")
    return {"mariadb_listen": sorted(mysqld), "restd_status": status}, fails


class AccountingCheckProvider(RolloutCheck):
    """Runs on every rollout of the layer."""

    def key(self, props: Props) -> str:
        return "accounting-check"

    def run(self, props: Props) -> dict:
        conn = connection(target_of(props))
        conn.connect()
        res = conn.run(sh(_CHECK, RESTD_SOCKET, props["user"]), mutating=False, check=False)
        facts, fails = judge_accounting(res.stdout)
        if fails:
            raise FleetError(f"host {conn.t.name}: accounting verification failed:\n  - "
                             + "\n  - ".join(fails) + "\n  probe output:\n    "
                             + (res.stdout + res.stderr).strip().replace("\n", "\n    "))
        return facts


class AccountingCheck(Resource, module="slurm", name="AccountingCheck"):
    mariadb_listen: pulumi.Output[list]
    restd_status: pulumi.Output[str]

    def __init__(self, name: str, *, conn: dict, user: str, triggers: pulumi.Input[dict],
                 opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__(AccountingCheckProvider(), name,
                         {"conn": conn, "user": user, "triggers": triggers,
                          "mariadb_listen": None, "restd_status": None}, opts)


@dataclass(frozen=True, kw_only=True)
class AccountingInputs:
    site: Site
    accounting: AccountingLayer
    #: the Slurm layer's cluster (registered in the DBD) and Debian release (slurmdbd, slurmrestd)
    cluster_name: str
    slurm_debian_version: str
    db_password: pulumi.Output[str]
    jwt_key: pulumi.Output[str]
    #: the Slurm layer's controller base (identities, packages, MUNGE): slurmdbd needs them
    controller_base: Sequence[pulumi.Resource]
    #: the Slurm layer's slurmctld: slurmrestd and the check come after it
    slurmctld: pulumi.Resource


@dataclass(frozen=True)
class AccountingOutputs:
    #: slurmdbd serving behind its firewall, the cluster registered, its ClusterID adopted:
    #: what slurmctld waits on
    ready: pulumi.Resource
    #: slurmrestd up and the loopback/socket verification passed
    checked: "AccountingCheck"
    history: AccountingHistory
    access: fw.DbdReachability
    cluster_id: ClusterIdAdoption

    def exports(self) -> dict[str, pulumi.Input]:
        """The stack outputs of the layer."""
        h, d, c = self.history, self.access, self.cluster_id
        return {
            "accountingHistory": pulumi.Output.all(h.restored_from, h.restored_jobs).apply(
                lambda t: {"restoredFrom": t[0] or None, "restoredJobs": t[1]}),
            "dbdAccess": pulumi.Output.all(d.reached_from, d.refused_from).apply(
                lambda t: {"reachedFrom": t[0], "refusedFrom": t[1]}),
            "clusterId": pulumi.Output.all(c.adopt, c.controller_id, c.dbd_id, c.why, c.kept).apply(
                lambda t: {"adopted": t[0], "controllerId": t[1], "dbdId": t[2], "why": t[3],
                           "kept": t[4]}),
        }


class Accounting(pulumi.ComponentResource):
    """MariaDB + slurmdbd (+ slurmrestd) on the controller; `outputs.ready` gates slurmctld."""

    def __init__(self, name: str, inputs: AccountingInputs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("gpu-fleet:accounting:Accounting", name, None, opts)
        site, db_password, jwt_key = inputs.site, inputs.db_password, inputs.jwt_key
        depends_on = list(inputs.controller_base)
        a, release = inputs.accounting, inputs.slurm_debian_version
        ctl = site.hosts.controller
        conn = site.conn(ctl)
        after = after_of(self)
        restd_user = Account("restd-account", conn=conn, user=a.restd_user, uid=a.restd_uid,
                             gid=a.restd_uid, opts=after(*depends_on))
        rules = fw.render_ruleset(fw.allowed_sources(a, site.hosts, site.nodes))
        firewall = self._dbd_firewall(a, conn, rules, after(restd_user, *depends_on))
        pinned = {"mariadb-server": a.mariadb_version, "slurmdbd": release, "slurmrestd": release,
                  "slurm-wlm-mysql-plugin": release}
        pkgs = {k: v for k, v in pinned.items() if v}
        packages = PackageSet("accounting-packages", conn=conn, packages=pkgs, hold=True,
                              provider=SlurmPackagesProvider(),
                              upgrade_from=own_packages(pkgs, release),
                              opts=after(firewall))
        cnf = File("mariadb-config", conn=conn, path=MARIADB_CNF, content=render_mariadb_cnf(a),
                   opts=after(packages))
        datadir = CommandWithVerify(
            "mariadb-datadir", conn=conn,
            create=["sh", "-c", 'set -e; install -d -o mysql -g mysql -m 0750 "$1"; '
                    '[ -d "$1/mysql" ] || mariadb-install-db --user=mysql --datadir="$1" >/dev/null',
                    "sh", a.datadir],
            verify=["test", "-d", f"{a.datadir}/mysql"], delete=["rm", "-rf", a.datadir],
            opts=after(cnf))
        mariadb = SystemdUnit("mariadb", conn=conn, unit="mariadb.service",
                              triggers={"cnf": sha256(render_mariadb_cnf(a), 16)}, opts=after(datadir))
        db_user = CommandWithVerify(
            "slurm-db-user", conn=conn, create=["sh", "-c", _DB_USER, "sh", a.database, a.db_user],
            create_stdin=db_password.apply(lambda pw: pw + "\n"),
            verify=["sh", "-c", 'mariadb -u root -N -e "SELECT 1 FROM mysql.user WHERE user=\'$1\'" | grep -q 1',
                    "sh", a.db_user],
            triggers={"password": db_password.apply(lambda t: sha256(t, 16))}, opts=after(mariadb))
        history = AccountingHistory("accounting-history", conn=conn, database=a.database,
                                          backup_dir=a.backup_dir, opts=after(db_user))
        key = File("jwt-key", conn=conn, path=JWT_KEY, content=jwt_key, mode="0600", owner="slurm",
                   group="slurm", secret=True, opts=after(packages))
        dbd_conf = File("slurmdbd-conf", conn=conn, path="/etc/slurm/slurmdbd.conf",
                        content=db_password.apply(lambda pw: render_slurmdbd_conf(a, ctl, pw)),
                        mode="0600", owner="slurm", group="slurm", secret=True, opts=after(packages))
        dbd_conf_sha = db_password.apply(lambda pw: sha256(render_slurmdbd_conf(a, ctl, pw), 16))
        dbd = SystemdUnit("slurmdbd", conn=conn, unit="slurmdbd.service",
                          dropins={"gpu-fleet-firewall.conf": fw.DBD_DROPIN},
                          triggers={"conf": dbd_conf_sha,
                                    "jwt": jwt_key.apply(lambda t: sha256(t, 16))},
                          opts=after(db_user, history, key, dbd_conf))
        # slurmctld refuses to start while slurmdbd cannot serve (no TRES from the database).
        serving = CommandWithVerify(
            "slurmdbd-serving", conn=conn,
            create=fw.WAIT_LISTENING, verify=fw.LISTENING, opts=after(dbd))
        # Fail closed before slurmctld uses accounting: the port is open to the nodes only.
        access = fw.DbdReachability(
            "dbd-reachability", conn=conn, address=ctl.address,
            clients=[site.conn(n) for n in site.nodes if n.owner != "unreachable"],
            outsiders=[site.conn(h) for h in fw.outsiders(a, site.hosts, site.nodes)],
            triggers={"rules": sha256(rules, 16), "dbd": dbd_conf_sha},
            max_parallel=site.ssh.max_parallel, opts=after(serving))
        # Registered by us before slurmctld starts with accounting, so that a controller with
        # state of its own meets the DBD's ClusterID here and not as a fatal error at start.
        cluster_name = inputs.cluster_name
        cluster = CommandWithVerify(
            "cluster-registration", conn=conn,
            create=["sh", "-c", 'sacctmgr -n -P list cluster format=cluster | grep -qx "$1" || '
                    'sacctmgr -i add cluster "$1"', "sh", cluster_name],
            verify=["sh", "-c", 'sacctmgr -n -P list cluster format=cluster | grep -qx "$1"', "sh", cluster_name],
            opts=after(access))
        cluster_id = ClusterIdAdoption(
            "cluster-id", conn=conn, cluster=cluster_name, database=a.database, backup_dir=a.backup_dir,
            triggers={"restored": history.restored_from}, opts=after(cluster))
        # slurmrestd and the verification, once slurmctld runs.
        restd_unit = render_slurmrestd_unit(a)
        restd = SystemdUnit("slurmrestd", conn=conn, unit="slurmrestd.service",
                            content=restd_unit, triggers={"jwt": jwt_key.apply(lambda t: sha256(t, 16))},
                            opts=after(inputs.slurmctld))
        checked = AccountingCheck("accounting-check", conn=conn, user=a.restd_user,
                                  triggers={"unit": sha256(restd_unit, 16),
                                            "jwt": jwt_key.apply(lambda t: sha256(t, 16))},
                                  opts=after(restd))
        self.outputs = AccountingOutputs(ready=cluster_id, checked=checked, history=history,
                                         access=access, cluster_id=cluster_id)
        self.register_outputs({})

    def _dbd_firewall(self, a: AccountingLayer, conn: dict, rules: str,
                      opts: pulumi.ResourceOptions) -> pulumi.Resource:
        """nftables (when the stack pins it), the validated ruleset, its unit, and the proof
        that the live table is the one loaded (refresh notices a flushed table)."""
        after = after_of(self)
        assert isinstance(opts.depends_on, list)  # after_of()'s options
        prev = [*opts.depends_on]
        if a.nftables_version:
            prev = [PackageSet("dbd-firewall-packages", conn=conn,
                               packages={"nftables": a.nftables_version}, hold=True,
                               opts=opts)]
        rules_file = File("dbd-firewall-rules", conn=conn, path=fw.RULES_PATH, content=rules,
                          validate=["nft", "-c", "-f", "{}"], opts=after(*prev))
        unit = SystemdUnit("dbd-firewall", conn=conn, unit=fw.UNIT, content=fw.render_unit(),
                           opts=after(rules_file))
        return CommandWithVerify("dbd-firewall-loaded", conn=conn, create=fw.LOAD,
                                 verify=fw.VERIFY_LOADED, triggers={"rules": sha256(rules, 16)},
                                 opts=after(unit))
