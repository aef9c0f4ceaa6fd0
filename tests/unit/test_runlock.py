"""components.runlock: who holds a stack's lock, said in one sentence; nothing cleared silently."""

from __future__ import annotations

import json
import os

from components import runlock

STACK = "lab"


def lock(**kw) -> dict:
    return {"pid": 4242, "username": "root", "hostname": "ctl-01", "timestamp": "2026-12-01T13:05:07Z", **kw}


def test_a_live_run_on_this_machine_means_wait():
    got = runlock.judge_lock(lock(), STACK, "ctl-01", is_alive=lambda pid: pid == 4242)
    assert got == ("stack lab is being updated by pid 4242 of root on ctl-01 since 2026-12-01T13:05:07Z: "
                   "wait for it to finish")


def test_a_dead_runs_lock_is_reported_with_the_command_and_kept():
    got = runlock.judge_lock(lock(), STACK, "ctl-01", is_alive=lambda pid: False)
    assert "that process is gone" in got and "`bin/pulumi cancel --stack lab --yes`" in got


def test_a_lock_from_another_machine_is_never_judged_dead():
    got = runlock.judge_lock(lock(hostname="laptop"), STACK, "ctl-01", is_alive=lambda pid: False)
    assert "on another machine (its process cannot be checked from here)" in got


def test_locks_are_found_under_the_file_backend_for_this_stack_only(tmp_path):
    d = tmp_path / ".pulumi" / "locks" / "organization" / "gpu-fleet"
    (d / "lab").mkdir(parents=True)
    (d / "canary").mkdir()
    (d / "lab" / "a.json").write_text(json.dumps(lock()))
    (d / "canary" / "b.json").write_text(json.dumps(lock(pid=1)))
    (d / "lab" / "c.json").write_text("{not json")
    got = runlock.locks(tmp_path, "lab")
    assert [g.get("pid") for g in got] == [4242, None] and got[1]["unreadable"] is True
    assert runlock.locks(tmp_path, "full") == []


def test_main_refuses_while_a_lock_is_there_and_leaves_it(tmp_path, monkeypatch, capsys):
    d = tmp_path / ".pulumi" / "locks" / "organization" / "gpu-fleet" / "lab"
    d.mkdir(parents=True)
    f = d / "x.json"
    f.write_text(json.dumps(lock(pid=os.getpid(), hostname=runlock.socket.gethostname())))
    monkeypatch.setenv("PULUMI_BACKEND_URL", f"file://{tmp_path}")
    assert runlock.main(["lab", "--pulumi", "/bin/false"]) == 1
    assert "wait for it to finish" in capsys.readouterr().err and f.exists()


def test_pending_operations_are_read_from_the_export():
    state = {"deployment": {"pending_operations": [{"type": "creating", "resource": {"urn": "u"}}]}}
    assert runlock.pending(state) == [{"type": "creating", "resource": {"urn": "u"}}]
    assert runlock.pending({"deployment": {}}) == []


def test_no_stack_yet_is_ready(tmp_path, monkeypatch):
    monkeypatch.setenv("PULUMI_BACKEND_URL", f"file://{tmp_path}")
    assert runlock.main(["lab", "--pulumi", "/bin/false"]) == 0
