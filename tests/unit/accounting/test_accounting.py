"""Pure parts of the accounting layer: renderers, the kernel-socket verdict, the TRES check."""

from __future__ import annotations

import pytest

from components.layers.slurm.canary import judge, judge_sacct, parse_gres_used, parse_job
from components.layers.accounting.component import (
    judge_accounting, render_slurmdbd_conf,
)


@pytest.fixture
def cfg(accounting_cfg):
    return accounting_cfg


def test_slurmdbd_conf(cfg):
    text = render_slurmdbd_conf(cfg.accounting, cfg.hosts.controller, "pw-123")
    lines = text.splitlines()
    for want in ("AuthType=auth/munge", "AuthAltTypes=auth/jwt", "StorageHost=127.0.0.1",
                 "StoragePass=pw-123", "StorageLoc=slurm_acct_db", "DbdHost=storage"):
        assert want in lines


LISTEN_OK = """== listen
127.0.0.1:3306 users:(("mariadbd",pid=1,fd=19))
0.0.0.0:6819 users:(("slurmdbd",pid=2,fd=7))
== restd
status 200
"""


def test_accounting_verdict_ok():
    facts, fails = judge_accounting(LISTEN_OK)
    assert fails == [] and facts == {"mariadb_listen": ["127.0.0.1:3306"], "restd_status": "200"}


def test_accounting_verdict_reads_the_kernel_view():
    bad = LISTEN_OK.replace("127.0.0.1:3306", "0.0.0.0:3306") + ""
    bad = bad.replace("== restd", '0.0.0.0:6820 users:(("slurmrestd",pid=3,fd=5))\n== restd')
    bad = bad.replace("status 200", "status")
    _, fails = judge_accounting(bad)
    assert fails == ["MariaDB listens beyond loopback: 0.0.0.0:3306",
                     "slurmrestd listens on TCP: 0.0.0.0:6820",
                     "slurmrestd did not answer on its Unix socket (HTTP status None)"]
    _, fails = judge_accounting("== listen\n== restd\nstatus 200\n")
    assert fails == ["MariaDB is not listening at all"]


def test_sacct_counts_generic_and_typed_gpu():
    assert judge_sacct("billing=1,cpu=1,gres/gpu=1,gres/gpu:v100=1,mem=100M,node=1", "v100") == []
    fails = judge_sacct("billing=1,cpu=1,gres/gpu=1,mem=100M,node=1", "v100")
    assert fails == ["sacct AllocTRES 'billing=1,cpu=1,gres/gpu=1,mem=100M,node=1' does not count gres/gpu:v100=1"]
    assert len(judge_sacct("", "v100")) == 2


JOB = "job=7\nnode=node1\ncvd=0\ncgroup=/slurm_node1/uid_64200/job_7/step_0/task_0\nmarker=none\njobroot=ok\nrc=0\n"


def test_canary_verdict():
    job = parse_job(JOB)
    assert judge(job, 0, 8, 0, marker_expected=False) == []
    # the seed's miscount: eight GPUs read as seven commas is never one GPU
    many = parse_job(JOB.replace("cvd=0", "cvd=0,1,2,3,4,5,6,7"))
    assert judge(many, 0, 8, 0, False) == ["CUDA_VISIBLE_DEVICES='0,1,2,3,4,5,6,7' is not exactly one GPU"]
    out_of_range = parse_job(JOB.replace("cvd=0", "cvd=9"))
    assert judge(out_of_range, 0, 8, 0, False) == ["CUDA_VISIBLE_DEVICES='9' is not an index in 0..7"]
    foreign = parse_job(JOB.replace("job_7", "job_6"))
    assert "does not contain job_7" in judge(foreign, 0, 8, 0, False)[0]
    assert judge(job, 0, 8, 1, False) == ["the node still has 1 GPU(s) allocated after the job"]
    assert judge(job, 1, 8, 0, True) == ["the canary job exited 1", "the model marker is none"]


def test_gres_used_parser():
    assert parse_gres_used("NodeName=n1 Gres=gpu:v100:8 GresUsed=gpu:v100:0(IDX:N/A) x") == 0
    assert parse_gres_used("GresUsed=gpu:v100:2(IDX:0-1)") == 2
    assert parse_gres_used("NodeName=n1 State=IDLE") is None
