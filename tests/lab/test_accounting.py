"""The accounting layer on the lab: MariaDB on loopback, slurmdbd, slurmrestd on a Unix socket."""

from __future__ import annotations

import json

import pytest

from tests.pulumi_cli import PulumiProject

from .labhosts import ssh
from .test_slurm_cluster import HOSTS, as_user, snapshot


def repo_version(package: str) -> str:
    out = ssh("ctl", f"apt-get -q update >/dev/null 2>&1; apt-cache policy {package}").stdout
    return next(line.split()[1] for line in out.splitlines() if "Candidate:" in line)


@pytest.fixture(scope="module")
def accounted(lab, tmp_path_factory):
    before = {h: snapshot(h) for h in HOSTS}
    before_ctl_mysql = ssh("ctl", "getent passwd mysql; ls /var/lib/mysql 2>/dev/null | wc -l").stdout
    tmp = tmp_path_factory.mktemp("accounting")
    proj = PulumiProject.copy_of_repo(tmp)
    proj.log = tmp / "commands.jsonl"
    proj.env["GPU_FLEET_COMMAND_LOG"] = str(proj.log)
    proj.init_stack("lab")
    proj.run("config", "set", "--path", "gpu-fleet:accounting.enabled", "true", "--stack", "lab")
    proj.run("config", "set", "--path", "gpu-fleet:accounting.mariadb_version",
             repo_version("mariadb-server"), "--stack", "lab")
    proj.run("up", "--yes", "--stack", "lab", timeout=1200)
    yield proj, before, before_ctl_mysql
    proj.run("destroy", "--yes", "--stack", "lab", check=False, timeout=900)


def test_canary_passes_with_gpu_tres_accounted(accounted):
    proj, _, _ = accounted
    canary = json.loads(proj.run("stack", "output", "canary", "--json", "--stack", "lab").stdout)
    assert canary["passed"] is True
    tres = ssh("ctl", f"sacct -X -n -P -j {canary['jobId']} -o AllocTRES").stdout.strip()
    assert "gres/gpu=1" in tres.split(",") and "gres/gpu:v100=1" in tres.split(","), tres


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
    proj, _, _ = accounted
    secrets = [proj.run("config", "get", f"gpu-fleet:{k}", "--stack", "lab").stdout.strip()
               for k in ("db_password", "jwt_key")]
    state = proj.run("stack", "export", "--stack", "lab").stdout
    logs = ssh("ctl", "journalctl --no-pager -q; cat /var/log/slurm/*.log /var/log/mysql/*; true",
               check=False).stdout
    for s in secrets:
        assert len(s) >= 32
        assert s not in state and s not in proj.log.read_text() and s not in logs


def test_second_up_changes_nothing(accounted):
    proj, _, _ = accounted
    proj.run("up", "--yes", "--stack", "lab", "--expect-no-changes")


def test_destroy_leaves_hosts_as_before(accounted):
    proj, before, before_ctl_mysql = accounted
    proj.run("destroy", "--yes", "--stack", "lab", timeout=900)
    assert {h: snapshot(h) for h in HOSTS} == before
    assert ssh("ctl", "getent passwd mysql; ls /var/lib/mysql 2>/dev/null | wc -l").stdout == before_ctl_mysql
