"""The acceptance's verdict across a slurmctld restart (slurm/scripts/partitions.sh,
acceptance/restart.py), run as the code runs it (`sh -c <text> sh <args>`) against a stub
scontrol on PATH that records its calls, in a directory standing for /etc/slurm."""

from __future__ import annotations

from pathlib import Path

import pytest

from components.kit import sh
from components.layers.acceptance.restart import SCRIPT, UNIT, render_unit
from components.layers.slurm.canary import PARTITIONS_INSTALLED, PARTITIONS_SH, VERDICT, set_partitions
from tests.unit.slurm.test_slurm_render import check_golden
from tests.unit.test_scripts_decisions import Stubs


@pytest.fixture
def site(tmp_path):
    stubs = Stubs(tmp_path)
    # `scontrol ping` answers as $PING says (UP unless told); updates are only recorded
    stubs.add("scontrol", '[ "$1" = ping ] && { echo "Slurmctld(primary) at ctl is ${PING:-UP}"; exit 0; }; exit 0')
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "slurm.conf").write_text("PartitionName=gpu Nodes=n1 State=INACTIVE\n")
    (etc / "gres.conf").write_text("NodeName=n1 Name=gpu File=/dev/nvidia0\n")
    (etc / "slurmdbd.conf").write_text("StorageHost=db1\n")
    return stubs, etc, tmp_path / "lib" / "open-partitions"


def set_(stubs: Stubs, etc: Path, verdict: Path, state: str, *parts: str):
    res = stubs.run(sh(PARTITIONS_SH, "set", state, verdict, etc, *parts))
    assert res.returncode == 0, res.stderr
    return res


def reopen(stubs: Stubs, etc: Path, verdict: Path, wait_s: int = 5, **env: str):
    stubs.log.write_text("")
    res = stubs.run(sh(PARTITIONS_SH, "reopen", verdict, etc, str(wait_s)), **env)
    assert res.returncode == 0, res.stderr  # the unit never fails: closed is its failure mode
    return res, [c for c in stubs.calls("scontrol") if c != "scontrol ping"]


def test_opening_records_the_verdict_and_a_restart_reopens_the_same_partitions(site):
    stubs, etc, verdict = site
    set_(stubs, etc, verdict, "UP", "gpu", "batch")
    assert stubs.calls("scontrol") == ["scontrol update PartitionName=gpu State=UP",
                                       "scontrol update PartitionName=batch State=UP"]
    lines = verdict.read_text().splitlines()
    assert lines[0].startswith("conf ") and len(lines[0]) == 5 + 64
    assert lines[1:] == ["partition gpu", "partition batch"]
    res, calls = reopen(stubs, etc, verdict)
    assert calls == ["scontrol update PartitionName=gpu State=UP", "scontrol update PartitionName=batch State=UP"]
    assert "partition gpu reopened" in res.stdout


@pytest.mark.parametrize("change", ["slurm.conf", "gres.conf", "topology.conf", "job_submit.lua"])
def test_a_configuration_changed_since_the_verdict_stays_closed(site, change):
    stubs, etc, verdict = site
    set_(stubs, etc, verdict, "UP", "gpu")
    (etc / change).write_text("# changed\n")
    res, calls = reopen(stubs, etc, verdict)
    assert calls == []
    assert "changed since the acceptance" in res.stdout


def test_accountings_own_file_is_not_part_of_the_verdict(site):
    """slurmdbd.conf (the database host, its password) changes with the accounting layer, which the
    acceptance does not judge again: it must not close the fleet at the next restart."""
    stubs, etc, verdict = site
    set_(stubs, etc, verdict, "UP", "gpu")
    (etc / "slurmdbd.conf").write_text("StorageHost=db2\n")
    _, calls = reopen(stubs, etc, verdict)
    assert calls == ["scontrol update PartitionName=gpu State=UP"]


def test_closing_withdraws_the_verdict_before_it_closes(site):
    stubs, etc, verdict = site
    set_(stubs, etc, verdict, "UP", "gpu")
    # scontrol fails the update: the partitions may be half closed, the verdict is gone already
    stubs.add("scontrol", "exit 1")
    res = stubs.run(sh(PARTITIONS_SH, "set", "INACTIVE", verdict, etc, "gpu"))
    assert res.returncode != 0
    assert not verdict.exists()
    _, calls = reopen(stubs, etc, verdict)
    assert calls == []


def test_no_verdict_opens_nothing(site):
    stubs, etc, verdict = site
    res, calls = reopen(stubs, etc, verdict)
    assert calls == [] and "no acceptance verdict" in res.stdout


def test_a_controller_that_does_not_answer_leaves_them_closed(site):
    stubs, etc, verdict = site
    set_(stubs, etc, verdict, "UP", "gpu")
    res, calls = reopen(stubs, etc, verdict, wait_s=1, PING="DOWN")
    assert calls == [] and "does not answer after 1 s" in res.stdout


def test_set_partitions_sends_one_command_naming_the_verdict():
    class Conn:
        def __init__(self):
            self.runs = []

        def run(self, argv, mutating, **kw):
            self.runs.append((argv, mutating))

    c = Conn()
    set_partitions(c, ["gpu", "batch"], "INACTIVE")
    [(argv, mutating)] = c.runs
    assert mutating and argv[-6:] == ["set", "INACTIVE", VERDICT, "/etc/slurm", "gpu", "batch"]


def test_golden_reopen_unit():
    text = render_unit()
    assert f"ExecStart={SCRIPT} reopen {VERDICT} /etc/slurm " in text
    check_golden(f"acceptance.{UNIT}", text)


def test_the_installed_script_runs_as_the_unit_executes_it(site, tmp_path):
    """The unit executes the file itself: it must carry its `#!` line (a command's text does not)."""
    stubs, etc, verdict = site
    set_(stubs, etc, verdict, "UP", "gpu")
    exe = tmp_path / "partitions.sh"
    exe.write_text(PARTITIONS_INSTALLED)
    exe.chmod(0o755)
    stubs.log.write_text("")
    res = stubs.run([exe, "reopen", verdict, etc, "5"])
    assert res.returncode == 0, res.stderr
    assert stubs.calls("scontrol")[-1] == "scontrol update PartitionName=gpu State=UP"
