"""Bundle (components/providers/bundle.py): several Files on one host as one resource, for real,
against a local shell (tests/unit/fakeconn.py), outputs through the engine's serialization
between calls (`recorded`). Each member must behave as its own File would."""

from __future__ import annotations

from pathlib import Path

import pytest

from components.providers import file as file_module
from components.errors import FleetError
from components.providers.bundle import FilesProvider
from components.providers.file import FileProvider, backup_path, sha256_text
from components.providers.stored import store_text

from . import fakeconn
from .fakeconn import recorded
from .test_host_primitive import CONN, ME, MY_GROUP


@pytest.fixture
def hosts(monkeypatch, tmp_path):
    monkeypatch.setattr(file_module, "BACKUP_DIR", str(tmp_path / "backup"))
    monkeypatch.setenv("GPU_FLEET_STORE_DIR", str(tmp_path / "store"))
    return fakeconn.install(monkeypatch)


def member(path: Path, text: str) -> dict:
    source, sha = store_text(text)
    return {"path": str(path), "source": source, "source_sha256": sha, "mode": "0644", "owner": ME,
            "group": MY_GROUP, "validate": None, "secret": False}


def bundle(*members: dict) -> dict:
    return {"conn": CONN, "bundle": "node1-slurm-config", "members": list(members)}


def test_create_writes_every_member_and_records_each_original(hosts, tmp_path):
    a, b = tmp_path / "a.conf", tmp_path / "b.conf"
    a.write_text("original a\n")
    p = FilesProvider()
    res = p.create(bundle(member(a, "a=1\n"), member(b, "b=1\n")))
    outs = recorded(res.outs)
    assert res.id == "node1:node1-slurm-config"
    assert a.read_text() == "a=1\n" and b.read_text() == "b=1\n"
    assert Path(backup_path(str(a))).read_text() == "original a\n"
    assert outs["records"][str(a)]["original"] == "backup" and outs["records"][str(b)]["original"] == "absent"
    assert outs["state"][str(b)] == {"present": True, "sha256": sha256_text("b=1\n"), "mode": "644",
                                     "owner": ME, "group": MY_GROUP}
    # the members' probes share one round trip: probe (with the kept record: none yet), keep the
    # record on the host (providers/kept.py), keep a's original, two writes, probe again
    assert [s.mutating for s in hosts.sent] == [False, True, True, True, True, False]
    assert len({s.trip for s in hosts.sent}) == 2  # still two round trips
    assert fakeconn.kept_on_host("Files", "node1-slurm-config") == {"records": res.outs["records"]}


def test_in_sync_is_no_change_and_a_refresh_sends_one_read_only_command(hosts, tmp_path):
    a, b = tmp_path / "a.conf", tmp_path / "b.conf"
    p, props = FilesProvider(), bundle(member(a, "a=1\n"), member(b, "b=1\n"))
    outs = recorded(p.create(props).outs)
    hosts.clear()
    assert p.diff("node1:x", outs, props).changes is False and hosts.sent == []
    assert recorded(p.read("node1:x", outs).outs) == outs
    assert len(hosts.sent) == 1 and hosts.mutating() == []


def test_drift_in_one_member_is_read_and_only_that_member_rewritten(hosts, tmp_path):
    a, b = tmp_path / "a.conf", tmp_path / "b.conf"
    p, props = FilesProvider(), bundle(member(a, "a=1\n"), member(b, "b=1\n"))
    outs = recorded(p.create(props).outs)
    b.write_text("edited by hand\n")
    drifted = recorded(p.read("node1:x", outs).outs)
    assert drifted["state"][str(b)]["sha256"] == sha256_text("edited by hand\n")
    assert p.diff("node1:x", drifted, props).changes is True
    hosts.clear()
    again = recorded(p.update("node1:x", drifted, props).outs)
    assert b.read_text() == "b=1\n" and len(hosts.mutating()) == 1 and str(b) in hosts.mutating()[0]
    assert again == outs


def test_a_new_text_is_an_update_of_that_member(hosts, tmp_path):
    a, b = tmp_path / "a.conf", tmp_path / "b.conf"
    p = FilesProvider()
    outs = recorded(p.create(bundle(member(a, "a=1\n"), member(b, "b=1\n"))).outs)
    news = bundle(member(a, "a=2\n"), member(b, "b=1\n"))
    assert p.diff("node1:x", outs, news).changes is True
    p.update("node1:x", outs, news)
    assert a.read_text() == "a=2\n" and b.read_text() == "b=1\n"


def test_a_dropped_member_is_undone_and_a_new_one_records_its_own_original(hosts, tmp_path):
    a, b, c = tmp_path / "a.conf", tmp_path / "b.conf", tmp_path / "c.conf"
    b.write_text("original b\n")
    c.write_text("original c\n")
    p = FilesProvider()
    outs = recorded(p.create(bundle(member(a, "a=1\n"), member(b, "b=1\n"))).outs)
    news = bundle(member(a, "a=1\n"), member(c, "c=1\n"))
    after = recorded(p.update("node1:x", outs, news).outs)
    assert b.read_text() == "original b\n" and not Path(backup_path(str(b))).exists()  # b restored
    assert c.read_text() == "c=1\n" and after["records"][str(c)]["original"] == "backup"
    assert set(after["records"]) == set(after["state"]) == {str(a), str(c)}
    p.delete("node1:x", after)
    assert not a.exists() and c.read_text() == "original c\n"


def test_delete_undoes_every_member_as_its_own_file_would(hosts, tmp_path):
    a, b = tmp_path / "a.conf", tmp_path / "b.conf"
    a.write_text("original a\n")
    p = FilesProvider()
    outs = recorded(p.create(bundle(member(a, "a=1\n"), member(b, "b=1\n"))).outs)
    p.delete("node1:x", outs)
    assert a.read_text() == "original a\n" and not b.exists()


def test_the_members_are_a_files_own_plans(hosts, tmp_path):
    """Same steps as a File with the same inputs would plan: the bundle adds no logic of its own."""
    a = tmp_path / "a.conf"
    a.write_text("original a\n")
    m = member(a, "a=1\n")
    single, bundled = FileProvider(), FilesProvider()
    obs = single.probe(single._conn({**m, "conn": CONN}), {**m, "conn": CONN})
    rec = single.remember({**m, "conn": CONN}, obs)
    want = [s.why for s in single.plan({**m, "conn": CONN}, obs, rec)]
    props = bundle(m)
    bobs = bundled.probe(bundled._conn(props), props)
    got = [s.why for s in bundled.plan(props, bobs, bundled.remember(props, bobs))]
    assert got == want == [f"keep the original {a}", f"write {a}"]


def test_a_state_from_before_bundles_is_refused_in_diff_with_the_migration_to_run(hosts, tmp_path):
    """The bundle's alias brings the first member's old File to diff: refused before any host."""
    a = tmp_path / "a.conf"
    old = recorded(FileProvider().create({**member(a, "a=1\n"), "conn": CONN}).outs)
    hosts.clear()
    with pytest.raises(FleetError) as e:
        FilesProvider().diff(f"node1:{a}", old, bundle(member(a, "a=1\n")))
    msg = str(e.value)
    assert msg.startswith("host node1: Files node1-slurm-config: the stack's state holds its members")
    assert "make migrate STACK=<stack>" in msg and "no host is touched" in msg
    assert hosts.sent == []
