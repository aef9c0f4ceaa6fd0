"""ClusterID adoption on the lab, with Slurm 24.11 (the lab's 22.05 has no ClusterID).

The seed's failure: a controller that ran without accounting has its own ClusterID in its
state; the accounting database registers the cluster under another, and slurmctld refuses
to start (`CLUSTER ID MISMATCH`). On the shared 24.11 stack (conftest `release24`, accounting
off at first); it leaves accounting on.
"""

from __future__ import annotations

import json

from .labhosts import ssh
from .release24 import STATE, state_file
from .test_accounting import connects
from .test_slurm_cluster import as_user


def set_accounting(proj, on: bool):
    proj.run("config", "set", "--path", "gpu-fleet:accounting.enabled", str(on).lower(), "--stack", "lab")
    return proj.up(timeout=1500)


def cluster_id(proj) -> dict:
    return json.loads(proj.run("stack", "output", "clusterId", "--json", "--stack", "lab").stdout)


def test_a_controller_without_accounting_makes_its_own_cluster_id(release24):
    assert ssh("ctl", "slurmctld -V").stdout.split() == ["slurm-wlm", "24.11.5"]
    name, _, ident = release24.own.partition("|")
    assert name == "lab" and ident.isdigit(), release24.own


def test_accounting_adopts_the_dbds_cluster_id_and_keeps_the_controllers(release24):
    proj = release24
    set_accounting(proj, True)
    own = int(proj.own.partition("|")[2])
    got = cluster_id(proj)
    assert got["adopted"] is True and got["controllerId"] == own and got["dbdId"] != own, got
    assert "CLUSTER ID MISMATCH" in got["why"]
    assert state_file() == f"lab|{got['dbdId']}"
    assert ssh("ctl", f"cat {got['kept']}").stdout.strip() == proj.own  # the original, kept
    log = ssh("ctl", "cat /var/log/slurm/slurmctld.log").stdout
    assert f"started on cluster lab({got['dbdId']})" in log.splitlines()[-200:].__str__()
    # the fleet acceptance on 24.11: every node judged, the all-node job accounted generic and typed
    acc = json.loads(proj.run("stack", "output", "acceptance", "--json", "--stack", "lab").stdout)
    assert acc["failed"] == {} and acc["criteria"]["1"] == acc["criteria"]["2"] == acc["criteria"]["4"] == "met", acc
    job = acc["fleetJob"]
    tres = ssh("ctl", f"sacct -X -n -P -j {job['job_id']} -o AllocTRES").stdout.strip().split(",")
    assert f"gres/gpu={job['gpus']}" in tres and f"gres/gpu:v100={job['gpus']}" in tres, tres
    assert connects("node1") and not connects("storage")


def test_without_the_adoption_slurmctld_refuses_to_start(release24):
    """The mismatch itself, on the real daemons: the controller's original file back in place."""
    got = cluster_id(release24)
    ssh("ctl", f"systemctl stop slurmctld && cp -p {got['kept']} {STATE} && "
               "(systemctl start slurmctld || true)")
    try:
        # slurmctld registers with slurmdbd after its start returns; the refusal comes with
        # the answer (the log read at once raced it): wait for the daemon to go, up to 30 s
        ssh("ctl", "for i in $(seq 150); do systemctl -q is-active slurmctld || exit 0; sleep 0.2; done; exit 1",
            check=False)
        log = ssh("ctl", "tail -n 20 /var/log/slurm/slurmctld.log").stdout
        assert "CLUSTER ID MISMATCH" in log, log
        assert f'"ClusterID={got["controllerId"]}"' in log and f'should be "{got["dbdId"]}"' in log, log
        assert ssh("ctl", "systemctl is-active slurmctld", check=False).stdout.strip() != "active"
    finally:
        # put back what the test changed: the adopted ID, and the partition the restart closed
        ssh("ctl", f"printf 'lab|%s' {got['dbdId']} > {STATE} && systemctl start slurmctld && "
                   "scontrol update partitionname=lab state=up")


def test_rollback_gives_the_controller_its_own_id_back_and_reapply_adopts_again(release24):
    proj = release24
    before = cluster_id(proj)
    job = ssh("ctl", as_user("srun -N1 -p lab -w node2 --gres=gpu:v100:1 -t 1 sh -c 'echo $SLURM_JOB_ID'")).stdout
    job = job.strip().splitlines()[-1]
    ssh("ctl", f"for i in $(seq 30); do sacct -X -n -j {job} -o JobID | grep -q . && exit 0; sleep 1; done; exit 1")
    set_accounting(proj, False)
    assert state_file() == proj.own  # read by slurmctld at its next start
    assert ssh("ctl", "systemctl is-active slurmctld").stdout.strip() == "active"
    ssh("ctl", "systemctl restart slurmctld && scontrol update partitionname=lab state=up")
    assert state_file() == proj.own
    assert "started on cluster lab(%s)" % proj.own.partition("|")[2] in ssh(
        "ctl", "tail -n 50 /var/log/slurm/slurmctld.log").stdout
    out = ssh("ctl", as_user("srun -N1 -p lab -t 1 hostname")).stdout
    assert out.strip().startswith("node")
    set_accounting(proj, True)
    again = cluster_id(proj)
    assert again["adopted"] is True and again["dbdId"] == before["dbdId"], again  # the restored registration
    assert state_file() == f"lab|{before['dbdId']}"
    assert job in ssh("ctl", f"sacct -X -n -P -j {job} -o JobID").stdout
