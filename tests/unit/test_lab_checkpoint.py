"""`python -m lab checkpoint`'s refusals, which come before any host is stopped (lab/checkpoint.py;
saving and restoring real hosts: tests/lab/test_lab_command.py)."""

from __future__ import annotations

import json

import pytest

from lab import __main__ as cli
from lab import checkpoint
from lab.common import LabError

INVENTORY = {"state": "up", "image": "img1", "repo": "r1", "rootfs_mode": "overlay",
             "hosts": [{"name": "storage", "address": "10.0.0.10", "roles": ["storage"]},
                       {"name": "node1", "address": "10.0.0.21", "roles": ["node"]}]}


@pytest.fixture
def lab_state(tmp_path, monkeypatch):
    monkeypatch.setattr(checkpoint, "STATE", tmp_path)
    monkeypatch.setattr(checkpoint, "CHECKPOINTS", tmp_path / "checkpoints")
    stopped: list[str] = []
    monkeypatch.setattr(checkpoint.nspawn, "stop_host", stopped.append)
    return tmp_path / "checkpoints", stopped


def test_a_name_that_is_not_a_plain_word_is_refused(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["checkpoint", "save", "../x"])
    assert e.value.code == 2
    assert "checkpoint name '../x': letters, digits, - and _ only" in capsys.readouterr().err


def test_nothing_is_stopped_when_the_lab_is_down(lab_state, monkeypatch):
    _, stopped = lab_state
    monkeypatch.setattr(checkpoint.stackfile, "read_inventory", lambda: None)
    with pytest.raises(LabError, match=r"the lab is not up \(python -m lab up\)"):
        checkpoint.save("x")
    assert stopped == []


def test_restoring_a_checkpoint_that_is_not_there_names_it_and_stops_nothing(lab_state, monkeypatch):
    _, stopped = lab_state
    monkeypatch.setattr(checkpoint.stackfile, "read_inventory", lambda: json.loads(json.dumps(INVENTORY)))
    with pytest.raises(LabError, match=r"no lab checkpoint 'base' \(python -m lab checkpoint save base\)"):
        checkpoint.restore("base")
    assert stopped == []


@pytest.mark.parametrize("change", [{"image": "img0"}, {"rootfs_mode": "copy"}, {"hosts": ["storage"]}])
def test_a_checkpoint_of_another_lab_is_refused_and_stops_nothing(lab_state, monkeypatch, change):
    store, stopped = lab_state
    meta = {"image": "img1", "rootfs_mode": "overlay", "hosts": ["storage", "node1"], "known_hosts": "", **change}
    (store / "base").mkdir(parents=True)
    (store / "base" / "checkpoint.json").write_text(json.dumps(meta))
    monkeypatch.setattr(checkpoint.stackfile, "read_inventory", lambda: json.loads(json.dumps(INVENTORY)))
    with pytest.raises(LabError, match="lab checkpoint 'base' was taken on another lab"):
        checkpoint.restore("base")
    assert stopped == []
