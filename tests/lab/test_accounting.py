"""The accounting layer on the lab: MariaDB on loopback, slurmdbd, slurmrestd on a Unix socket."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from debian.debian_support import version_compare

from tests.pulumi_cli import ROOT, PulumiProject

from .labhosts import HOSTS, lab_config, lab_conn, packages, repo_version, snapshot, ssh
from .test_slurm_cluster import NODES, as_user


@pytest.fixture(scope="module")
def accounted(lab, deployed, tmp_path_factory):
    """The deployed fleet with accounting on; "before" is the fresh hosts it was deployed on."""
    tmp = tmp_path_factory.mktemp("accounting")
    proj = deployed.project(tmp)
    proj.log = tmp / "commands.jsonl"
    proj.env["GPU_FLEET_COMMAND_LOG"] = str(proj.log)
    proj.ctl_packages_before = deployed.fresh_ctl_packages
    proj.run("config", "set", "--path", "gpu-fleet:accounting.enabled", "true", "--stack", "lab")
    proj.run("config", "set", "--path", "gpu-fleet:accounting.mariadb_version",
             repo_version("mariadb-server"), "--stack", "lab")
    proj.run("config", "set", "--path", "gpu-fleet:accounting.nftables_version",
             repo_version("nftables"), "--stack", "lab")
    proj.up(timeout=1200)
    return proj, deployed.fresh


def test_the_all_node_job_is_accounted_with_generic_and_typed_gpu_tres(accounted):
    proj, _ = accounted
    acc = json.loads(proj.run("stack", "output", "acceptance", "--json", "--stack", "lab").stdout)
    job = acc["fleetJob"]
    assert job["passed"] and job["nodes"] == NODES, job
    assert acc["criteria"]["4"] == "met"
    # read back from accounting here, not from the layer's own record of it
    tres = ssh("ctl", f"sacct -X -n -P -j {job['job_id']} -o AllocTRES").stdout.strip().split(",")
    assert "gres/gpu=24" in tres and "gres/gpu:v100=24" in tres, tres
    # each node's step past its --mem: OUT_OF_MEMORY in sacct, and the job's later steps still ran
    for n in NODES:
        checks = acc["nodes"][n]["checks"]
        assert "sacct State=OUT_OF_MEMORY" in checks["oom_confined"]["seen"], checks["oom_confined"]
        step = checks["oom_confined"]["seen"].split()[1]
        state = ssh("ctl", f"sacct -n -P -j {acc['nodes'][n]['jobs'][0]}.{step} -o State").stdout.strip()
        assert state == "OUT_OF_MEMORY", (n, state)
        assert checks["failed_job_leaves_nothing"]["passed"], checks


def test_a_new_gpu_job_is_accounted_by_model(accounted):
    out = ssh("ctl", as_user("srun -N1 -p lab -w node2 --gres=gpu:v100:2 -t 1 sh -c 'echo $SLURM_JOB_ID'")).stdout
    job = out.strip().splitlines()[-1]
    tres = ssh("ctl", f"for i in $(seq 20); do t=$(sacct -X -n -P -j {job} -o AllocTRES); "
                      "[ -n \"$t\" ] && break; sleep 1; done; echo $t").stdout.strip()
    assert "gres/gpu=2" in tres and "gres/gpu:v100=2" in tres, tres


def test_mariadb_listens_on_loopback_only_and_restd_on_no_tcp_port(accounted):
    listen = ssh("ctl", "ss -Hltnp").stdout
    db = [line.split()[3] for line in listen.splitlines() if "mariadbd" in line or "mysqld" in line]
    assert db and all(a.startswith("127.0.0.1:") for a in db), listen
    assert "slurmrestd" not in listen
    assert ssh("ctl", "test -S /run/slurmrestd/slurmrestd.socket && stat -c %U /run/slurmrestd").stdout.strip() \
        == "slurmrestd"
    assert ssh("ctl", "ps -o user= -C slurmrestd").stdout.strip() == "slurmrestd"


def test_secret_files_are_private(accounted):
    assert ssh("ctl", "stat -c '%a %U' /etc/slurm/slurmdbd.conf /etc/slurm/jwt_hs256.key").stdout.split("\n")[:2] \
        == ["600 slurm", "600 slurm"]


def test_db_password_and_jwt_key_never_in_plain_text(accounted):
    proj, _ = accounted
    secrets = [proj.run("config", "get", f"gpu-fleet:{k}", "--stack", "lab").stdout.strip()
               for k in ("db_password", "jwt_key")]
    state = proj.run("stack", "export", "--stack", "lab").stdout
    logs = ssh("ctl", "journalctl --no-pager -q; cat /var/log/slurm/*.log /var/log/mysql/*; true",
               check=False).stdout
    for s in secrets:
        assert len(s) >= 32
        assert s not in state and s not in proj.log.read_text() and s not in logs


CTL = "10.213.57.11"


def connects(host: str, address: str = CTL, port: int = 6819) -> bool:
    return ssh(host, f"timeout 5 bash -c 'exec 3<>/dev/tcp/{address}/{port}'", check=False).returncode == 0


def test_slurmdbd_admits_the_nodes_and_refuses_the_storage_host(accounted):
    proj, _ = accounted
    access = json.loads(proj.run("stack", "output", "dbdAccess", "--json", "--stack", "lab").stdout)
    assert access == {"reachedFrom": ["node1", "node2", "node3"], "refusedFrom": ["storage"]}
    # slurmdbd itself listens on every address: the kernel's table is what keeps storage out.
    assert "0.0.0.0:6819" in ssh("ctl", "ss -Hltn 'sport = :6819'").stdout
    assert connects("node3") and connects("ctl")
    assert not connects("storage")
    assert connects("storage", port=22)  # the host is there; only slurmdbd's port is closed to it
    assert ssh("ctl", "systemctl show -p Requires slurmdbd").stdout.count("gpu-fleet-slurmdbd-firewall.service") == 1


def test_a_flushed_firewall_is_noticed_and_loaded_again(accounted):
    proj, _ = accounted
    ssh("ctl", "nft delete table inet gpu_fleet_slurmdbd")
    assert connects("storage")  # what the refusing side of the check exists for
    preview = proj.run("preview", "--refresh", "--diff", "--stack", "lab").stdout
    assert "dbd-firewall-loaded" in preview, preview[-3000:]
    proj.up("--refresh", timeout=900)
    assert not connects("storage") and connects("node1")


def test_a_node_that_cannot_reach_slurmdbd_stops_the_rollout(accounted):
    proj, _ = accounted
    # node2 has no route to the controller (a broken route on the node, not on the controller)
    ssh("node2", f"ip route add unreachable {CTL}/32")
    ctld = ssh("ctl", "systemctl show -p MainPID --value slurmctld").stdout.strip()
    dbd = ssh("ctl", "systemctl show -p MainPID --value slurmdbd").stdout.strip()
    try:
        proj.run("config", "set", "--path", "gpu-fleet:accounting.dbd_clients[0]", "192.0.2.0/24",
                 "--stack", "lab")
        p = proj.run("up", "--yes", "--stack", "lab", timeout=900, check=False)
    finally:
        ssh("node2", f"ip route del unreachable {CTL}/32")
    assert p.returncode != 0
    assert f"node2 cannot reach slurmdbd at {CTL}:6819 (" in p.stdout, p.stdout[-3000:]
    assert "node1 cannot" not in p.stdout and "node3 cannot" not in p.stdout
    # the new rule set is in the kernel (192.0.2.0/24 admitted), slurmctld was left alone and
    # slurmdbd too: the ruleset is reloaded, not restarted (a restart propagates to slurmdbd)
    assert "192.0.2.0/24" in ssh("ctl", "nft list table inet gpu_fleet_slurmdbd").stdout
    assert ssh("ctl", "systemctl show -p MainPID --value slurmctld").stdout.strip() == ctld
    assert ssh("ctl", "systemctl show -p MainPID --value slurmdbd").stdout.strip() == dbd
    proj.run("config", "rm", "--path", "gpu-fleet:accounting.dbd_clients", "--stack", "lab")
    proj.up(timeout=900)
    assert "192.0.2.0/24" not in ssh("ctl", "nft list table inet gpu_fleet_slurmdbd").stdout


def test_second_up_changes_nothing(accounted):
    proj, _ = accounted
    proj.run("up", "--yes", "--stack", "lab", "--expect-no-changes")
    # a preview, too: it reads a null output as unknown (the history of a first up that
    # restored nothing made the cluster-ID adoption show an update in every preview)
    proj.run("preview", "--refresh", "--stack", "lab", "--expect-no-changes")


SACCT = Path(__file__).parent / "programs" / "sacct"


def sacctmgr(what: str, where: str, fields: str) -> str:
    return ssh("ctl", f"sacctmgr -n -P show {what} where {where} format={fields}").stdout.strip()


def qos_fields(proj: PulumiProject) -> dict:
    state = json.loads(proj.run("stack", "export", "--stack", "lab").stdout)
    qos = next(r for r in state["deployment"]["resources"] if r["type"].endswith("slurm:Qos"))
    return qos["outputs"]["fields"]


def test_sacct_objects_drift_is_seen_and_set_back(accounted, tmp_path):
    """SacctObject (components/providers/sacct.py) on the accounting stack's slurmdbd: create a
    QOS, an account and a user association; a QOS edited by hand is drift field by field on
    refresh and set back by up; destroy removes all three."""
    cluster = lab_config().slurm.cluster_name
    proj = PulumiProject.copy_of(tmp_path, [SACCT / "Pulumi.yaml", SACCT / "__main__.py", ROOT / "components"])
    proj.init_stack("lab")
    proj.run("config", "set", "conn", json.dumps(lab_conn("ctl")))
    proj.run("config", "set", "cluster", cluster)
    try:
        proj.up(timeout=600)
        assert sacctmgr("qos", "name=gf-test", "GrpTRES,MaxTRESPerAccount,Priority,Preempt,GraceTime") \
            == "gres/gpu=8|gres/gpu=4|10|normal|00:05:00"
        assert sacctmgr("association", f"cluster={cluster} account=gf-test user=gftest", "User,MaxJobs") \
            == "gftest|4"
        proj.run("up", "--yes", "--stack", "lab", "--expect-no-changes")

        ssh("ctl", "sacctmgr -i modify qos where name=gf-test set GrpTRES=gres/gpu=99 Priority=3")
        out = proj.refresh("--diff").stdout
        assert "gres/gpu=99" in out, out[-3000:]
        drift = qos_fields(proj)
        assert (drift["GrpTRES"], drift["Priority"], drift["MaxTRESPerAccount"]) == ("gres/gpu=99", "3", "gres/gpu=4")
        preview = proj.run("preview", "--diff", "--stack", "lab").stdout
        assert "gf-test-qos" in preview and "gf-test-account" not in preview, preview[-3000:]

        proj.up(timeout=600)
        assert sacctmgr("qos", "name=gf-test", "GrpTRES,Priority") == "gres/gpu=8|10"
        assert qos_fields(proj)["GrpTRES"] == "gres/gpu=8"
        proj.run("up", "--yes", "--stack", "lab", "--expect-no-changes")
    finally:
        proj.run("destroy", "--yes", "--stack", "lab", check=False, timeout=600)
    assert sacctmgr("qos", "name=gf-test", "Name") == ""
    assert sacctmgr("account", "name=gf-test", "Account") == ""
    assert sacctmgr("association", f"cluster={cluster} user=gftest", "User") == ""



BACKUPS = "/srv/gpu-fleet/backup/accounting"

# TEST DOUBLE (lab only): a disk that stores one byte of what `tee` writes wrong. The stream
# on stdout is untouched; the file gets byte 200 flipped after it is written.
BAD_DISK_TEE = r"""#!/bin/sh
# TEST DOUBLE (gpu-fleet lab): bit rot between the stream and the disk
/usr/bin/tee "$@"
rc=$?
python3 - "$1" <<'PY'
import sys
with open(sys.argv[1], "r+b") as f:
    f.seek(200); b = f.read(1); f.seek(200); f.write(bytes([b[0] ^ 0x01]))
PY
exit $rc
"""


def set_accounting(proj, on: bool, check: bool = True):
    proj.run("config", "set", "--path", "gpu-fleet:accounting.enabled", str(on).lower(), "--stack", "lab")
    return proj.up(timeout=1200, check=check)


def job_ids(last: str) -> set[str]:
    """The job ids 1..last that accounting has records of (by id: a time window lags)."""
    ids = ",".join(str(i) for i in range(1, int(last) + 1))
    out = ssh("ctl", f"sacct -X -n -P -j {ids} -o JobID").stdout
    return {line.strip() for line in out.splitlines() if line.strip()}


def wait_accounted(job: str) -> None:
    ssh("ctl", f"for i in $(seq 30); do sacct -X -n -j {job} -o JobID | grep -q . && exit 0; sleep 1; done; "
               f"echo 'job {job} never reached accounting' >&2; exit 1")


def gpu_job() -> str:
    out = ssh("ctl", as_user("srun -N1 -p lab -w node1 --gres=gpu:v100:1 -t 1 sh -c 'echo $SLURM_JOB_ID'")).stdout
    return out.strip().splitlines()[-1]


def db_jobs() -> set[str]:
    """Job ids straight from the database (slurmdbd may be stopped)."""
    return set(ssh("ctl", "mariadb -N -B -e 'SELECT id_job FROM slurm_acct_db.lab_job_table'").stdout.split())


def restored_from(proj) -> str:
    return proj.outputs()["accountingHistory"]["restoredFrom"]


def test_layer_rollback_and_reapply_keep_every_job_record(accounted):
    """One rollback and reapply here; test_a_damaged_dump_is_never_restored ends with the
    second, after the history grew, restored from that rollback's own (newest) dump."""
    proj, _ = accounted
    new = gpu_job()
    wait_accounted(new)
    before = job_ids(new)
    assert before == {str(i) for i in range(1, int(new) + 1)}, before
    set_accounting(proj, False)
    assert ssh("ctl", "systemctl is-active slurmdbd mariadb", check=False).stdout.split() != ["active", "active"]
    dumps = ssh("ctl", f"ls {BACKUPS}").stdout.split()
    for kind in (".sql.gz", ".sha256", ".fingerprint"):  # the dump, its hash, what it proved
        assert any(d.endswith(kind) for d in dumps), dumps
    set_accounting(proj, True)
    assert job_ids(new) == before
    assert restored_from(proj).startswith(f"{BACKUPS}/slurm_acct_db-")
    appended = gpu_job()
    wait_accounted(appended)
    assert job_ids(appended) >= before | {appended}


def test_a_dump_that_differs_on_disk_stops_the_rollback_and_loses_nothing(accounted):
    proj, _ = accounted
    jobs = db_jobs()
    assert jobs
    ssh("ctl", f"cat > /usr/local/bin/tee <<'EOF'\n{BAD_DISK_TEE}EOF\nchmod 0755 /usr/local/bin/tee")
    try:
        p = set_accounting(proj, False, check=False)
    finally:
        ssh("ctl", "rm -f /usr/local/bin/tee")
    assert p.returncode != 0
    assert "refusing to remove the accounting database 'slurm_acct_db'" in p.stdout, p.stdout[-3000:]
    assert "SHA-256" in p.stdout or "not a valid gzip stream" in p.stdout, p.stdout[-3000:]
    assert db_jobs() == jobs
    set_accounting(proj, True)  # the rollout's own canary jobs append to the kept history
    assert db_jobs() >= jobs


def test_a_damaged_dump_is_never_restored(accounted):
    proj, _ = accounted
    jobs = db_jobs()
    set_accounting(proj, False)
    newest = ssh("ctl", f"ls -1 {BACKUPS}/*.sql.gz | sort | tail -n1").stdout.strip()
    flip = f"python3 -c \"f=open('{newest}','r+b'); f.seek(100); b=f.read(1); f.seek(100); f.write(bytes([b[0]^1]))\""
    ssh("ctl", flip)
    p = set_accounting(proj, True, check=False)
    assert p.returncode != 0
    assert "from a damaged backup" in p.stdout and "the backup recorded" in p.stdout, p.stdout[-3000:]
    assert ssh("ctl", "systemctl is-active slurmdbd", check=False).stdout.strip() != "active"
    ssh("ctl", flip)  # the byte back: the recorded hash matches again
    # A restore that does not give back what the backup proved (here: the proven fingerprint
    # says one more job row) leaves the database empty and stops the rollout.
    fp = f"{newest}.fingerprint"
    ssh("ctl", f"cp {fp} /tmp/fingerprint.orig && awk '$1 == \"jobs\" {{$3 = $3 + 1}} {{print}}' "
               f"/tmp/fingerprint.orig > {fp}")
    p = set_accounting(proj, True, check=False)
    assert p.returncode != 0
    assert "differs from the one its backup proved" in p.stdout, p.stdout[-3000:]
    assert ssh("ctl", "mariadb -N -B -e \"SELECT COUNT(*) FROM information_schema.tables "
                      "WHERE table_schema='slurm_acct_db'\"").stdout.strip() == "0"
    ssh("ctl", f"cp /tmp/fingerprint.orig {fp}")
    set_accounting(proj, True)
    assert db_jobs() >= jobs and restored_from(proj) == newest


def test_destroy_leaves_hosts_as_before(accounted):
    proj, before = accounted
    proj.run("destroy", "--yes", "--stack", "lab", timeout=900)
    after = {h: snapshot(h) for h in HOSTS}
    pkgs_after = packages("ctl")
    # Every package the layer installed is gone again. A base package the install had to
    # upgrade (MariaDB's perl wants the repository's perl-base) is not downgraded: no source
    # serves the old version. Everything else is exactly as before.
    assert set(pkgs_after) == set(proj.ctl_packages_before)
    changed = {p: (v, pkgs_after[p]) for p, v in proj.ctl_packages_before.items() if pkgs_after[p] != v}
    assert all(version_compare(new, old) > 0 for old, new in changed.values()), changed
    for h in HOSTS:
        b, a = dict(before[h]), dict(after[h])
        if h == "ctl" and changed:
            b.pop("pkgs"), a.pop("pkgs")
        assert a == b, h
    # The layer's own data directory is gone. Debian's mariadb-server purge keeps the package's
    # default /var/lib/mysql and the mysql account on purpose (data is never deleted silently);
    # the backup/restore issue decides what rollback does with them.
    assert ssh("ctl", "test -e /srv/gpu-fleet/mariadb && echo present || echo gone").stdout.strip() == "gone"
