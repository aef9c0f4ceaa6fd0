"""ClusterID adoption: what the controller's state and the DBD's registration call for."""

from __future__ import annotations

import pytest

from components.layers.accounting.cluster_id import parse_probe, plan_adoption
from components.errors import FleetError


def test_a_mismatch_adopts_the_dbds_id():
    plan = plan_adoption("lab", "lab|2587", [837])
    assert plan["adopt"] is True and (plan["controller_id"], plan["dbd_id"]) == (2587, 837)
    assert "CLUSTER ID MISMATCH" in plan["why"]


@pytest.mark.parametrize("file_text, why", [
    (None, "no controller state yet"),
    ("lab", "no ClusterID (Slurm before 23.02)"),
    ("lab|837", "already has the DBD's ClusterID"),
])
def test_nothing_to_adopt(file_text, why):
    plan = plan_adoption("lab", file_text, [837])
    assert plan["adopt"] is False and why in plan["why"] and plan["dbd_id"] == 837


def test_another_clusters_state_is_refused():
    with pytest.raises(FleetError, match="belongs to cluster 'other', not 'lab'"):
        plan_adoption("lab", "other|12", [837])


@pytest.mark.parametrize("ids", [[], [1, 2]])
def test_the_cluster_must_be_registered_once(ids):
    with pytest.raises(FleetError, match="must be registered once"):
        plan_adoption("lab", "lab|12", ids)


def test_an_unreadable_id_is_refused():
    with pytest.raises(FleetError, match="unreadable ClusterID"):
        plan_adoption("lab", "lab|x1", [837])


def test_probe_parse():
    seen = parse_probe("== file\nlab|2587\n== sha\nabc123\n== dbd\n837\n")
    assert seen == {"file": "lab|2587", "sha": "abc123", "dbd": [837], "dbd_error": None}
    seen = parse_probe("== file\n== dbd\n")
    assert seen["file"] is None and seen["dbd"] == []
    seen = parse_probe("== file\n== dbd\nERROR 1146 (42S02): Table 'x.cluster_table' doesn't exist\n")
    assert seen["dbd_error"].startswith("ERROR 1146")


def test_a_release_without_cluster_ids_needs_nothing():
    seen = parse_probe("== file\nlab\n== sha\nabc\n== dbd\nno-cluster-ids\n")
    assert seen["dbd"] is None and seen["dbd_error"] is None
    plan = plan_adoption("lab", seen["file"], seen["dbd"])
    assert plan["adopt"] is False and "keeps no ClusterID" in plan["why"]
    with pytest.raises(FleetError, match="slurmdbd is older than slurmctld"):
        plan_adoption("lab", "lab|12", None)
