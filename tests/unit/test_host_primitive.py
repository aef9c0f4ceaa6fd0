"""HostPrimitive create / diff / read / update / delete, for real, against a local shell.

The providers' own probe, plan and apply scripts run through the real transport on the local
filesystem (tests/unit/fakeconn.py); outputs go through the engine's own serialization
between calls (`recorded`), as they would between two `pulumi` commands.
"""

from __future__ import annotations

import grp
import json
import os
import pwd
import stat
from pathlib import Path

import pytest

from components.errors import FleetError
from components.providers import file as file_module
from components.providers import kept
from components.providers.account import AccountProvider, parse_account_probe
from components.providers.base import RolloutCheck
from components.providers.parts import INPUTS
from components.providers.command import CommandWithVerifyProvider
from components.providers.file import FileProvider, backup_path, sha256_text
from components.transport import MASK, SshTarget, display

from . import fakeconn
from .fakeconn import recorded

CONN = SshTarget("node1", "10.0.0.1").as_dict()
ME = pwd.getpwuid(os.getuid()).pw_name
MY_GROUP = grp.getgrgid(os.getgid()).gr_name


@pytest.fixture
def hosts(monkeypatch, tmp_path):
    monkeypatch.setattr(file_module, "BACKUP_DIR", str(tmp_path / "backup"))
    return fakeconn.install(monkeypatch)


def fprops(path: Path, content: str = "a=1\n", **kw) -> dict:
    """A File's inputs, as the File resource hands them over."""
    return {"conn": CONN, "path": str(path), "content": content, "mode": "0640", "owner": ME,
            "group": MY_GROUP, "validate": None, "secret": False, "sha256": None, "present": None, **kw}


def cprops(marker: Path, **kw) -> dict:
    """A CommandWithVerify's inputs: create a marker file, verify it is there, delete it."""
    return {"conn": CONN, "create": ["sh", "-c", 'echo made > "$1"', "sh", str(marker)],
            "verify": ["test", "-f", str(marker)], "delete": ["rm", "-f", "--", str(marker)],
            "create_stdin": None, "triggers": {}, "verified": None, "inputs_hash": None, **kw}


def create(provider, props: dict) -> tuple[str, dict]:
    res = provider.create(props)
    return res.id, recorded(res.outs)


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def leftovers(directory: Path) -> list[Path]:
    return list(directory.glob(".gpu-fleet.*"))


# ---- File ----------------------------------------------------------------------------
def test_file_create_writes_content_and_mode(hosts, tmp_path):
    path = tmp_path / "x.conf"
    id_, outs = create(FileProvider(), fprops(path))
    assert path.read_text() == "a=1\n" and mode_of(path) == 0o640
    assert id_ == f"node1:{path}"
    assert outs["sha256"] == sha256_text("a=1\n") and outs["present"] is True
    assert "content" not in outs and outs["original"] == "absent"
    # probe (and the kept record: none yet), keep the record on the host, write, probe again:
    # in two round trips, as before the record was kept
    assert [s.mutating for s in hosts.sent] == [False, True, True, False]
    assert len({s.trip for s in hosts.sent}) == 2
    assert fakeconn.kept_on_host("File", str(path)) == {
        "original": "absent", "made_parent": False, "original_sha256": None}
    assert leftovers(tmp_path) == []


def test_file_write_is_atomic_and_validated_on_the_temp_file(hosts, tmp_path):
    path = tmp_path / "x.conf"
    path.write_text("old\n")
    inode = path.stat().st_ino
    with pytest.raises(FleetError, match="(?s)^host node1: .* failed with exit code 1$"):
        FileProvider().create(fprops(path, validate=["false"]))
    assert path.read_text() == "old\n" and leftovers(tmp_path) == []
    FileProvider().create(fprops(path, validate=["grep", "-qx", "a=1", "{}"]))
    assert path.read_text() == "a=1\n"
    assert path.stat().st_ino != inode  # renamed into place, never rewritten in place


def test_file_in_sync_diff_update_and_read_send_no_mutating_command(hosts, tmp_path):
    p, path = FileProvider(), tmp_path / "x.conf"
    id_, outs = create(p, fprops(path))
    hosts.clear()
    d = p.diff(id_, outs, fprops(path))
    assert (d.changes, d.replaces) == (False, [])
    assert hosts.sent == []  # diff never touches a host
    assert recorded(p.update(id_, outs, fprops(path)).outs) == outs
    assert recorded(p.read(id_, outs).outs) == outs
    assert hosts.sent and hosts.mutating() == []


def test_file_drift_is_read_then_repaired(hosts, tmp_path):
    p, path = FileProvider(), tmp_path / "x.conf"
    id_, outs = create(p, fprops(path))
    path.write_text("edited by hand\n")
    hosts.clear()
    drifted = recorded(p.read(id_, outs).outs)
    assert hosts.mutating() == []  # refresh runs read-only probes only
    assert drifted["sha256"] == sha256_text("edited by hand\n") != outs["sha256"]
    d = p.diff(id_, drifted, fprops(path))
    assert (d.changes, d.replaces) == (True, [])
    repaired = recorded(p.update(id_, drifted, fprops(path)).outs)
    assert path.read_text() == "a=1\n" and len(hosts.mutating()) == 1
    assert repaired == outs

    os.chmod(path, 0o666)
    hosts.clear()
    drifted = recorded(p.read(id_, outs).outs)
    assert drifted["mode"] == "666"
    p.update(id_, drifted, fprops(path))
    assert hosts.mutating() == [display(["chmod", "--", "640", str(path)])]
    assert mode_of(path) == 0o640


def hprops(path: Path, content: str, store: Path, **kw) -> dict:
    """A by-hash File's inputs (File(..., by_hash=True)): the store's path and the SHA-256."""
    from components.providers.stored import store_text

    source, sha = store_text(content)
    assert Path(source).parent == store
    base = {k: v for k, v in fprops(path).items() if k != "content"}
    return {**base, "source": source, "source_sha256": sha, **kw}


@pytest.fixture
def store(monkeypatch, tmp_path):
    d = tmp_path / "store"
    monkeypatch.setenv("GPU_FLEET_STORE_DIR", str(d))
    return d


def test_a_state_with_inline_content_takes_by_hash_as_no_change_then_updates_and_drifts(hosts, tmp_path, store):
    """Issue 16: a node's slurm.conf moved from inline content to by hash. The old state (content
    in its inputs) diffs as no change against the same text by hash, a new text as an update
    that writes it from the store, and drift is still read from the host's hash."""
    p, path = FileProvider(), tmp_path / "slurm.conf"
    id_, outs = create(p, fprops(path, content="a=1\n"))
    hosts.clear()
    d = p.diff(id_, outs, hprops(path, "a=1\n", store))
    assert (d.changes, d.replaces) == (False, []) and hosts.sent == []
    news = hprops(path, "a=2\n", store)
    assert p.diff(id_, outs, news).changes
    outs2 = recorded(p.update(id_, outs, news).outs)
    assert path.read_text() == "a=2\n" and outs2["sha256"] == sha256_text("a=2\n")
    assert "content" not in outs2 and outs2["source_sha256"] == outs2["sha256"]
    assert recorded(p.update(id_, outs2, news).outs) == outs2  # a second up: nothing sent
    path.write_text("edited by hand\n")
    drifted = recorded(p.read(id_, outs2).outs)
    assert drifted["sha256"] == sha256_text("edited by hand\n")
    assert p.diff(id_, drifted, news).changes
    # back to inline content (an older gpu-fleet): no change either
    assert not p.diff(id_, outs2, fprops(path, content="a=2\n")).changes


def test_a_by_hash_file_refuses_a_store_entry_that_changed(hosts, tmp_path, store):
    p, path = FileProvider(), tmp_path / "slurm.conf"
    props = hprops(path, "a=1\n", store)
    Path(props["source"]).write_text("tampered\n")
    with pytest.raises(FleetError, match="changed since the program read it"):
        p.create(props)
    assert not path.exists()


def test_the_store_is_private(store):
    from components.providers.stored import store_text

    source, _ = store_text("x\n")
    assert stat.S_IMODE(store.stat().st_mode) == 0o700
    store.chmod(0o777)
    with pytest.raises(FleetError, match="not writable by others"):
        store_text("y\n")


def test_a_secret_file_is_never_by_hash():
    from components.providers.file import File

    with pytest.raises(ValueError, match="stays inline"):
        File("k", conn=CONN, path="/etc/munge/munge.key", content="s", secret=True, by_hash=True)


def test_file_original_is_backed_up_on_create_and_restored_on_delete(hosts, tmp_path):
    p, path = FileProvider(), tmp_path / "x.conf"
    path.write_text("original\n")
    os.chmod(path, 0o600)
    id_, outs = create(p, fprops(path))
    backup = Path(backup_path(str(path)))
    assert outs["original"] == "backup" and backup.read_text() == "original\n"
    assert path.read_text() == "a=1\n"
    p.delete(id_, outs)
    assert path.read_text() == "original\n" and mode_of(path) == 0o600
    assert not backup.exists()


def test_file_without_original_is_removed_with_the_directory_made_for_it(hosts, tmp_path):
    p, path = FileProvider(), tmp_path / "new" / "x.conf"
    id_, outs = create(p, fprops(path))
    assert outs["original"] == "absent" and outs["made_parent"] is True
    p.delete(id_, outs)
    assert not path.exists() and not path.parent.exists()


def test_secret_file_content_never_reaches_an_error(hosts, tmp_path):
    path, secret = tmp_path / "x.key", "token=gf-s3cr3t-9f2c1e"
    echo_and_fail = ["sh", "-c", 'echo "rejected: $(cat "$1")"; exit 4', "validate", "{}"]
    with pytest.raises(FleetError) as e:
        FileProvider().create(fprops(path, content=secret + "\n", secret=True, validate=echo_and_fail))
    msg = str(e.value)
    assert "host node1" in msg and "exit code 4" in msg and f"rejected: {MASK}" in msg
    assert secret not in msg and not path.exists()
    with pytest.raises(FleetError) as e:  # the same failure without secret=True shows it
        FileProvider().create(fprops(path, content=secret + "\n", validate=echo_and_fail))
    assert secret in str(e.value)


# ---- CommandWithVerify ---------------------------------------------------------------
def test_command_create_runs_create_then_verify_and_delete_runs_delete(hosts, tmp_path):
    p, marker = CommandWithVerifyProvider(), tmp_path / "marker"
    props = cprops(marker)
    id_, outs = create(p, props)
    verify = display(["sh", "-c", '"$@" 2>&1; echo "verify-rc $?"', "sh", *props["verify"]])
    assert [(s.cmd.endswith(verify), s.mutating) for s in hosts.sent] == [
        (True, False), (False, True), (False, True), (True, False)]  # probe, keep, create, verify
    assert hosts.sent[2].cmd == display(props["create"])
    assert marker.read_text() == "made\n"
    assert outs["verified"] is True and outs["preexisting"] is False
    key = "verify:" + json.dumps(props["verify"])
    assert fakeconn.kept_on_host("CommandWithVerify", key) == {"preexisting": False,
                                                               "inputs_hash": outs["inputs_hash"]}
    hosts.clear()
    p.delete(id_, outs)
    assert hosts.mutating()[0] == display(props["delete"]) and not marker.exists()
    assert fakeconn.kept_on_host("CommandWithVerify", key) is None  # forgotten last


def test_a_create_after_a_run_killed_before_its_state_was_saved_records_the_host_as_it_was(hosts, tmp_path):
    """A run that skips checkpoints (PULUMI_SKIP_CHECKPOINTS) and is killed has changed hosts
    its state never heard of. The next create finds its work done and, from what the first
    create kept on the host (providers/kept.py), records the host as it was before: nothing is
    applied twice, and a rollback puts back the original and removes what the killed run made."""
    f, own, new = FileProvider(), tmp_path / "own.conf", tmp_path / "new.conf"
    own.write_text("the host's own\n")
    c, marker = CommandWithVerifyProvider(), tmp_path / "marker"
    for p_, props in ((f, fprops(own)), (f, fprops(new)), (c, cprops(marker))):
        create(p_, props)  # the killed run: done on the host, never recorded
    hosts.clear()
    (oid, oouts), (nid, nouts), (cid, couts) = (create(f, fprops(own)), create(f, fprops(new)),
                                                create(c, cprops(marker)))
    assert hosts.mutating() == []  # nothing applied twice, no second record
    assert oouts["original"] == "backup" and oouts["original_sha256"] == sha256_text("the host's own\n")
    assert nouts["original"] == "absent" and couts["preexisting"] is False
    f.delete(oid, oouts)
    f.delete(nid, nouts)
    c.delete(cid, couts)
    assert own.read_text() == "the host's own\n" and not new.exists() and not marker.exists()
    assert fakeconn.kept_on_host("File", str(own)) is None and fakeconn.kept_on_host("File", str(new)) is None
    assert not Path(os.environ["GPU_FLEET_KEPT_DIR"]).exists()  # its folders go with the last record
    # without what was kept (a host from before this record existed), the same host reads as found
    create(f, fprops(new))
    Path(kept.path_of("File", str(new))).unlink()
    assert create(f, fprops(new))[1]["original"] == "backup"


def test_command_verify_failure_names_host_command_exit_code_and_output(hosts, tmp_path):
    props = cprops(tmp_path / "marker", create=["sh", "-c", "echo reconfiguring"],
                   verify=["sh", "-c", "echo slurmctld is not responding >&2; exit 3"])
    with pytest.raises(FleetError) as e:
        CommandWithVerifyProvider().create(props)
    msg = str(e.value)
    assert msg.startswith(f"host node1: `{display(props['verify'])}` failed with exit code 3")
    assert f"`{display(props['create'])}`" in msg and "slurmctld is not responding" in msg


def test_command_stdin_secret_is_masked_in_a_verify_failure(hosts, tmp_path):
    f, secret = tmp_path / "pw", "pw-gf-s3cr3t-0042"
    props = cprops(f, create=["sh", "-c", 'cat > "$1"', "sh", str(f)], create_stdin=secret,
                   verify=["sh", "-c", 'cat "$1"; exit 1', "sh", str(f)])
    with pytest.raises(FleetError) as e:
        CommandWithVerifyProvider().create(props)
    assert f.read_text() == secret and secret not in str(e.value) and MASK in str(e.value)


# ---- diff: where the state lives --------------------------------------------------------
def created_file(tmp_path: Path, **conn) -> tuple[FileProvider, str, dict, dict]:
    p, props = FileProvider(), {**fprops(tmp_path / "x.conf"), "conn": {**CONN, **conn}}
    return (p, *create(p, props), props)


def test_diff_content_change_is_an_update(hosts, tmp_path):
    p, id_, outs, props = created_file(tmp_path)
    hosts.clear()
    d = p.diff(id_, outs, {**props, "content": "a=2\n"})
    assert (d.changes, d.replaces) == (True, []) and hosts.sent == []


@pytest.mark.parametrize("moved,what", [
    ({"address": "10.0.0.2"}, "conn.address 10.0.0.1 -> 10.0.0.2"),
    ({"address": "node1.lab.example"}, "conn.address 10.0.0.1 -> node1.lab.example"),
    ({"port": 2222}, "conn.port 22 -> 2222"),
    ({"address": "10.0.0.2", "user": "fleet"}, "conn.address 10.0.0.1 -> 10.0.0.2"),
])
def test_diff_refuses_another_address_before_any_command(hosts, tmp_path, moved, what):
    p, id_, outs, props = created_file(tmp_path)
    hosts.clear()
    with pytest.raises(FleetError) as e:
        p.diff(id_, outs, {**props, "conn": {**CONN, **moved}})
    msg = str(e.value)
    assert msg.startswith(f"host node1: File {id_}: {what}; refusing")
    assert "lives on the machine at 10.0.0.1:22" in msg
    assert "take node1 out of the stack and run `pulumi up`" in msg and "pulumi state delete" in msg
    assert hosts.sent == []


@pytest.mark.parametrize("old,new", [("Node1.Lab.", "node1.lab"), ("::1", "0:0:0:0:0:0:0:1")])
def test_diff_same_address_spelled_otherwise_is_not_a_move(hosts, tmp_path, old, new):
    p, id_, outs, props = created_file(tmp_path, address=old)
    assert p.diff(id_, outs, props).changes is False
    d = p.diff(id_, outs, {**props, "conn": {**CONN, "address": new}})
    assert (d.changes, d.replaces) == (True, [])  # records the new spelling in place


@pytest.mark.parametrize("how", [
    {"user": "fleet"}, {"identity_file": "/keys/fleet"}, {"known_hosts_file": "/keys/known_hosts"},
    {"proxy_jump": "bastion"}, {"use_ssh_config": False}, {"connect_timeout_s": 5},
])
def test_diff_same_host_reached_another_way_is_an_update(hosts, tmp_path, how):
    p, id_, outs, props = created_file(tmp_path)
    hosts.clear()
    d = p.diff(id_, outs, {**props, "conn": {**CONN, **how}})
    assert (d.changes, d.replaces) == (True, []) and hosts.sent == []


def test_a_conn_recorded_with_every_default_spelled_out_is_the_same_target(hosts, tmp_path):
    """`conn` leaves out fields at their defaults (issue 16); a state written before records
    all of them, and diffs as no change."""
    assert CONN == {"name": "node1", "address": "10.0.0.1"}
    full = {**CONN, "port": 22, "user": "root", "identity_file": None, "known_hosts_file": None,
            "proxy_jump": None, "use_ssh_config": True, "connect_timeout_s": 10}
    assert SshTarget.from_dict(full) == SshTarget.from_dict(CONN)
    p, id_, outs, props = created_file(tmp_path)
    hosts.clear()
    assert p.diff(id_, {**outs, "conn": full}, props).changes is False
    assert hosts.sent == []


def test_diff_another_host_name_is_a_replace(hosts, tmp_path):
    p, id_, outs, props = created_file(tmp_path)
    d = p.diff(id_, outs, {**props, "conn": {**CONN, "name": "node9"}})
    assert (d.changes, d.replaces) == (True, ["conn"])


@pytest.mark.parametrize("provider,props", [(FileProvider, fprops), (CommandWithVerifyProvider, cprops)])
def test_new_ssh_user_reprobes_through_it_and_sends_no_mutating_command(hosts, tmp_path, provider, props):
    p, old = provider(), props(tmp_path / "x")
    id_, outs = create(p, old)
    new = {**old, "conn": {**CONN, "user": "fleet"}}
    hosts.clear()
    assert p.diff(id_, outs, new).changes is True
    updated = recorded(p.update(id_, outs, new).outs)
    assert hosts.sent and {s.target.user for s in hosts.sent} == {"fleet"}
    assert hosts.mutating() == []
    assert updated["conn"]["user"] == "fleet"
    assert p.diff(id_, updated, new).changes is False


class _Check(RolloutCheck):
    def __init__(self):
        self.runs = 0

    def key(self, props):
        return "check"

    def run(self, props):
        self.runs += 1
        return {"ok": True}


def test_rollout_check_records_a_new_ssh_user_without_rerunning_and_refuses_a_move():
    p = _Check()
    olds = {"conn": CONN, "triggers": {"conf": "a"}, "ok": True}
    new_user = {"conn": {**CONN, "user": "fleet"}, "triggers": {"conf": "a"}, "ok": None}
    assert p.diff("node1:check", olds, new_user).changes is True
    assert p.update("node1:check", olds, new_user).outs == {**olds, "conn": new_user["conn"]}
    assert p.runs == 0
    assert p.diff("node1:check", olds, {**olds, "triggers": {"conf": "b"}}).changes is True
    with pytest.raises(FleetError, match="^host node1: _Check node1:check: conn.address 10.0.0.1 -> 10.9.9.9; refusing"):
        p.diff("node1:check", olds, {**olds, "conn": {**CONN, "address": "10.9.9.9"}})


# ---- read never records what its next read cannot use ---------------------------------
ACC = {"conn": CONN, "name": "gf-absent-test-user", "uid": 64999, "gid": 64999,
       "home": "/nonexistent", "shell": "/usr/sbin/nologin"}
ACC_PRESENT = parse_account_probe(
    "== passwd\ngf-absent-test-user:x:64999:64999::/nonexistent:/usr/sbin/nologin\n"
    "== group\ngf-absent-test-user:x:64999:\n", "gf-absent-test-user", 64999, 64999)


def test_refresh_after_an_interrupted_destroy_keeps_what_the_next_probe_needs(hosts):
    """userdel ran, the engine never recorded the delete; refresh twice, then destroy again."""
    p, id_ = AccountProvider(), "node1:account:gf-absent-test-user"
    created = recorded(p.outputs(ACC, {"created_user": True, "created_group": True}, ACC_PRESENT))
    refreshed = recorded(p.read(id_, created).outs)
    assert "uid" not in refreshed  # the user is gone: the engine dropped the observed None
    assert refreshed[INPUTS]["uid"] == 64999
    again = recorded(p.read(id_, refreshed).outs)
    assert hosts.sent[-1].cmd.endswith("gf-absent-test-user 64999 64999")  # the stack's ids
    assert {k: again.get(k) for k in ("uid", "gid", "home")} == {"uid": None, "gid": None, "home": None}
    assert p.diff(id_, again, ACC).changes is True  # drift: the next up recreates the account
    hosts.clear()
    p.delete(id_, again)
    assert hosts.sent and hosts.mutating() == []  # nothing left to remove


def test_a_state_recorded_without_the_stack_inputs_is_a_clear_error(hosts):
    legacy = {k: v for k, v in ACC.items() if k != "uid"}
    for call in (lambda p: p.read("node1:acc", legacy), lambda p: p.delete("node1:acc", legacy)):
        with pytest.raises(FleetError) as e:
            call(AccountProvider())
        assert str(e.value).startswith("host node1: Account node1:acc: its recorded state lacks 'uid'")
        assert "`pulumi up` once without --refresh" in str(e.value)
    assert hosts.sent == []


def test_diff_with_an_input_computed_later_is_a_change_not_a_crash():
    """In a preview, a File's content can depend on a resource that updates in the same run."""
    from pulumi.output import Unknown

    from components.providers.file import FileProvider

    olds = {"conn": {"name": "h", "address": "10.0.0.1"}, "path": "/etc/x", "content": "a", "mode": "0644",
            "owner": "root", "group": "root", "present": True, "sha256": "00"}
    news = {**olds, "content": Unknown()}
    result = FileProvider().diff("h:/etc/x", olds, news)
    assert result.changes is True and not result.replaces
