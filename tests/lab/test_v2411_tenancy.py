"""The tenancy layer's lab tests (test_tenancy.py) on Slurm 24.11: the same tests, on the shared
24.11 stack (conftest `release24`; test_v2411_cluster_id leaves it with accounting on), with the
layer turned on over a running fleet instead of in its first `up`. Their last test turns the
layer off again.
"""

from __future__ import annotations

import pytest

from .labhosts import ssh
from .test_tenancy import TENANCY, add_users, remove_users, set_tenancy
from .test_tenancy import (  # noqa: F401  collected here, with this module's `tenancy`
    test_the_layer_enforces_and_the_fleet_still_accepts_under_the_ops_account,
    test_at_its_quota_a_team_pends_with_qosgrpgres_while_others_start,
    test_borrowed_gpus_are_reclaimed_after_the_grace_and_the_borrower_requeued,
    test_a_gang_job_pends_holding_nothing_while_the_free_nodes_run_other_jobs,
    test_a_tensor_parallel_job_gets_gpus_0_to_7_of_one_node_and_a_leaf_constraint_holds,
    test_two_shard_jobs_share_one_gpu_at_once_and_shards_are_accounted,
    test_job_submit_types_untyped_requests_and_refuses_a_spread_tensor_parallel_group,
    test_sshare_shows_each_teams_fairshare,
    test_a_qos_edited_by_hand_is_drift_and_up_sets_it_back_and_a_no_op_up_sends_no_sacctmgr,
    test_a_team_with_a_queued_job_is_not_removed_and_once_empty_goes_with_its_history_kept,
    test_turning_the_layer_off_removes_its_objects_and_settings_and_slurm_keeps_serving,
)

@pytest.fixture(scope="module")
def tenancy(release24):
    proj = release24
    assert ssh("ctl", "slurmctld -V").stdout.split() == ["slurm-wlm", "24.11.5"]
    proj.run("config", "set", "--path", "gpu-fleet:accounting.enabled", "true", "--stack", "lab")
    set_tenancy(proj, TENANCY)
    add_users()
    try:
        proj.up(timeout=1500)
        yield proj
    finally:
        remove_users()
