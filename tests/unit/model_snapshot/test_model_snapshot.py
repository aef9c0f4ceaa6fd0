"""The model snapshot's judges (components/layers/model_snapshot/snapshot.py) on real probe
output, the Snapshot provider's rerun rule and its run on a published tree, and the Payload
primitive (components/providers/payload.py).

The probe output comes from the layer's own scripts run by a local shell over a snapshot
written by the real safetensors library (tests/unit/model_snapshot/test_model_verify.py's tree) and proven by
the real verify.py, as the storage host and a node would run them; the cases a local shell
cannot produce (an NFS mount's "Read-only file system") are that output with one section
changed."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from components.errors import FleetError
from components.layers.model_snapshot import snapshot as S
from components.layers.model_snapshot.onhost import verify
from components.providers import file as file_module
from components.providers.parts import PlanRefused
from components.providers.payload import PayloadProvider, sha256_file
from components.scripts import sections
from components.transport import SshTarget
from components.kit import sh
from tests.unit import fakeconn
from tests.unit.fakeconn import recorded
from tests.unit.model_snapshot.test_model_verify import hub_listing, model_tree
from tests.unit.test_host_primitive import ME, MY_GROUP

REV = "0123456789abcdef0123456789abcdef01234567"
REPO = "org/tiny"
VERIFY_PY = str(Path(verify.__file__))
CONN = SshTarget("storage", "192.0.2.10").as_dict()
EROFS = "refused sh: 1: cannot create /mnt/models/org/tiny/{}/.gpu-fleet-probe-gpu01-4242: Read-only file system"


# ---- a published snapshot, as publish.sh leaves it -------------------------------------------

class Published:
    """A snapshot at `dest` with its manifest inside, and the downloader's state directory."""

    def __init__(self, tmp: Path):
        self.models = tmp / "models"
        self.dest = self.models / REPO / REV
        self.state = self.models / ".staging" / REPO / f"{REV}.gpu-fleet"
        model_tree(self.dest)
        for p in sorted((self.dest / ".cache").rglob("*"), reverse=True):  # publish moves it away
            p.rmdir() if p.is_dir() else p.unlink()
        (self.dest / ".cache").rmdir()
        expected = hub_listing(self.dest, tmp)
        files, _ = verify.list_files(str(self.dest))
        self.m = verify.build_manifest(REPO, REV, expected, verify.hash_all(str(self.dest), files, workers=2))
        self.manifest = self.dest / ".gpu-fleet" / "manifest.json"
        self.manifest.parent.mkdir()
        self.manifest.write_text(verify.manifest_text(self.m))
        self.state.mkdir(parents=True)
        self.status = {"repo_id": REPO, "revision": REV, "files": len(expected), "exit": 0,
                       "fetched_bytes": 1234, "finished_before": 0}
        (self.state / "status.json").write_text(json.dumps(self.status) + "\n")
        self.sizes = {f["path"]: f["size"] for f in self.m["files"]}

    def probe(self, python: str = sys.executable) -> str:
        return run(S._PROBE, python, VERIFY_PY, str(self.dest), str(self.manifest), str(self.state))

    def view(self, marker: str = "model_index.json") -> str:
        return run(S._VIEW, str(self.dest), marker)


def run(script: str, *args: str) -> str:
    return subprocess.run(sh(script, *args), capture_output=True, text=True, check=False, timeout=120).stdout


@pytest.fixture
def snap(tmp_path) -> Published:
    return Published(tmp_path)


# ---- parse_probe and summary ---------------------------------------------------------------

def test_parse_probe_of_a_published_snapshot(snap):
    out = snap.probe()
    assert [line for line in out.splitlines() if line.startswith("== ")] == [
        "== published", "== manifest-sha256", "== manifest", "== check", "== status"]
    seen = S.parse_probe(out)
    assert seen["published"] is True
    assert seen["manifest_sha256"] == hashlib.sha256(snap.manifest.read_bytes()).hexdigest()
    assert seen["files"] == snap.sizes and not any(p.startswith(S.OWN) for p in seen["files"])
    assert seen["check"]["problems"] == [] and seen["check"]["extra"] == []
    assert seen["status"] == snap.status


def test_summary_of_the_independent_check(snap):
    s = S.summary(S.parse_probe(snap.probe())["check"])
    assert s == {
        "files": len(snap.sizes), "bytes": sum(snap.sizes.values()),
        "json": ["config.json", "generation_config.json", "model.safetensors.index.json", "model_index.json",
                 "tokenizer_config.json", "unet/config.json"],
        "safetensors": 3, "tensors": 5, "indexes": ["model.safetensors.index.json"], "problems": []}
    assert json.dumps(s)  # what the stack output shows: plain JSON


def test_summary_of_an_empty_check():
    assert S.summary({}) == {"files": None, "bytes": None, "json": [], "safetensors": 0, "tensors": 0,
                             "indexes": [], "problems": []}


def test_parse_probe_of_nothing_published(tmp_path):
    out = run(S._PROBE, sys.executable, VERIFY_PY, str(tmp_path / "none"), str(tmp_path / "none/m.json"),
              str(tmp_path / "state"))
    assert S.parse_probe(out) == {"published": False, "manifest_sha256": None, "files": {}, "check": None,
                                  "status": None}


def test_parse_probe_of_a_damaged_snapshot(snap):
    (snap.dest / "unet" / "config.json").unlink()
    with open(snap.dest / "model-00002-of-00002.safetensors", "ab") as f:
        f.write(b"\0")
    seen = S.parse_probe(snap.probe())
    assert seen["published"] is True and seen["files"] == snap.sizes  # the manifest still lists them
    problems = seen["check"]["problems"]
    assert any(p.startswith("unet/config.json: missing (expected") for p in problems), problems
    assert any(p.startswith("model-00002-of-00002.safetensors: size mismatch") for p in problems), problems
    assert S.summary(seen["check"])["problems"] == problems


def test_parse_probe_when_the_check_cannot_run(snap):
    """The venv gone (or verify.py broken): the check section is no JSON, and that is a problem."""
    seen = S.parse_probe(snap.probe(python=str(snap.models / "no-venv" / "python")))
    assert seen["published"] is True
    [p] = seen["check"]["problems"]
    assert p.startswith("verify.py check printed no JSON: ") and "no-venv/python" in p


def test_parse_probe_of_broken_sections():
    out = "== published\nyes\n== manifest-sha256\n\n== manifest\n{not json\n== check\n\n== status\n{half"
    assert S.parse_probe(out) == {"published": True, "manifest_sha256": None, "files": {}, "check": None,
                                  "status": None}


# ---- judge_view ------------------------------------------------------------------------------

def view_text(files: dict[str, int], marker: str = "readable", write: str = EROFS.format(REV),
              own: bool = True) -> str:
    listing = [f"{size} {path}" for path, size in files.items()]
    if own:
        listing.append(f"4321 {S.OWN}manifest.json")
    return "\n".join(["== files", *listing, "== marker", marker, "== write", write]) + "\n"


def test_the_real_view_of_a_writable_tree_fails_only_the_write(snap):
    """node_view.sh on a local directory (writable: no NFS read-only mount here)."""
    out = snap.view()
    sec = sections(out)
    assert f"{os.path.getsize(snap.manifest)} {S.OWN}manifest.json" in sec["files"].splitlines()
    assert sec["marker"].strip() == "readable" and sec["write"].strip() == "allowed"
    assert not any(p.name.startswith(".gpu-fleet-probe") for p in snap.dest.iterdir())  # cleaned up
    assert S.judge_view(out, snap.sizes) == [
        "a write into the snapshot was allowed (expected: refused, Read-only file system)"]


def test_the_real_view_with_the_write_refused_as_a_read_only_mount_passes(snap):
    out = snap.view()
    good = out[:out.index("== write")] + "== write\n" + EROFS.format(REV) + "\n"
    assert S.judge_view(good, snap.sizes) == []


def test_the_real_view_of_a_missing_marker(snap):
    out = snap.view(marker="no_such_marker.json")
    assert sections(out)["marker"].strip() == "unreadable"
    assert "the acceptance marker is not readable" in S.judge_view(out, snap.sizes)


FILES = {"model_index.json": 30, "unet/config.json": 21, "unet/diffusion_pytorch_model.safetensors": 2400}


def test_all_good():
    assert S.judge_view(view_text(FILES), FILES) == []


def test_the_snapshots_own_files_are_ignored():
    text = view_text(FILES) .replace("== marker", f"17 {S.OWN}other.json\n== marker")
    assert S.judge_view(text, FILES) == []
    # only the .gpu-fleet/ directory: a file of that name elsewhere is an extra
    text = view_text(FILES).replace("== marker", "9 unet/.gpu-fleet/x\n9 .gpu-fleet-x\n== marker")
    assert S.judge_view(text, FILES) == ["files the manifest does not list: .gpu-fleet-x, unet/.gpu-fleet/x"]


def test_a_missing_file():
    seen = {k: v for k, v in FILES.items() if k != "unet/config.json"}
    assert S.judge_view(view_text(seen), FILES) == ["1 of the manifest's 3 files are missing: unet/config.json"]


def test_a_size_difference():
    seen = {**FILES, "unet/diffusion_pytorch_model.safetensors": 2399}
    assert S.judge_view(view_text(seen), FILES) == [
        "unet/diffusion_pytorch_model.safetensors is 2399 bytes, the manifest says 2400"]


def test_sizes_as_the_engine_hands_them_over():
    """Recorded outputs come back with numbers as floats."""
    assert S.judge_view(view_text(FILES), {k: float(v) for k, v in FILES.items()}) == []


def test_an_extra_file():
    seen = {**FILES, "unet/leftover.bin": 5}
    assert S.judge_view(view_text(seen), FILES) == ["files the manifest does not list: unet/leftover.bin"]


def test_a_path_with_spaces():
    files = {"sub dir/a b.json": 3}
    assert S.judge_view(view_text(files), files) == []


def test_an_unreadable_marker():
    assert S.judge_view(view_text(FILES, marker="unreadable"), FILES) == ["the acceptance marker is not readable"]
    assert S.judge_view(view_text(FILES, marker=""), FILES) == ["the acceptance marker is not readable"]


def test_a_write_allowed():
    assert S.judge_view(view_text(FILES, write="allowed"), FILES) == [
        "a write into the snapshot was allowed (expected: refused, Read-only file system)"]


def test_a_write_refused_for_another_reason():
    why = "refused sh: 1: cannot create /mnt/models/org/tiny/x/.gpu-fleet-probe: Permission denied"
    assert S.judge_view(view_text(FILES, write=why), FILES) == [
        f"a write into the snapshot was {why} (expected: refused, Read-only file system)"]


def test_a_write_not_tried():
    assert S.judge_view(view_text(FILES, write=""), FILES) == [
        "a write into the snapshot was not tried (expected: refused, Read-only file system)"]


def test_a_node_that_sees_nothing_says_what_find_said():
    text = ("== files\nfind: '/mnt/models/org/tiny/r': No such file or directory\n"
            "== marker\nunreadable\n== write\nrefused sh: 1: cannot create x: Directory nonexistent\n")
    fails = S.judge_view(text, FILES)
    assert fails[0] == ("3 of the manifest's 3 files are missing: model_index.json, unet/config.json, "
                        "unet/diffusion_pytorch_model.safetensors (find: find: '/mnt/models/org/tiny/r': "
                        "No such file or directory)")
    assert fails[1:] == ["the acceptance marker is not readable",
                         "a write into the snapshot was refused sh: 1: cannot create x: Directory nonexistent "
                         "(expected: refused, Read-only file system)"]


def test_every_failure_at_once():
    seen = {"model_index.json": 31, "extra.txt": 1}
    fails = S.judge_view(view_text(seen, marker="unreadable", write="allowed"), FILES)
    assert fails == [
        "2 of the manifest's 3 files are missing: unet/config.json, unet/diffusion_pytorch_model.safetensors",
        "model_index.json is 31 bytes, the manifest says 30",
        "files the manifest does not list: extra.txt",
        "the acceptance marker is not readable",
        "a write into the snapshot was allowed (expected: refused, Read-only file system)",
    ]


# ---- the Snapshot provider --------------------------------------------------------------------

def snap_props(snap: Published, **kw) -> dict:
    """A Snapshot's inputs, as the Snapshot resource hands them over."""
    return {"conn": CONN, "repo_id": REPO, "revision": REV, "unit": "gpu-fleet-model-download.service",
            "python": sys.executable, "verify": VERIFY_PY, "stage": str(snap.models / ".staging" / REPO / REV),
            "state": str(snap.state), "dest": str(snap.dest), "manifest": str(snap.manifest),
            "marker": "model_index.json", "timeout_s": 60, "triggers": {"store": {"ai/models": "123"}}, **kw}


def test_rerun_a_recorded_failure_forces_a_rerun():
    p, news = S.SnapshotProvider(), {"conn": CONN, "repo_id": REPO, "revision": REV, "dest": "/d",
                                      "marker": "m", "triggers": {"store": 1}}
    assert p.rerun({**news, "ok": True}, news) is False
    assert p.rerun({**news, "ok": False}, news) is True
    assert p.rerun(dict(news), news) is True  # no verdict recorded
    for k, v in (("revision", "f" * 40), ("repo_id", "org/other"), ("dest", "/e"), ("marker", "x"),
                 ("triggers", {"store": 2})):
        assert p.rerun({**news, "ok": True}, {**news, k: v}) is True, k
    # how the host is reached is no reason to download or check again
    assert p.rerun({**news, "ok": True}, {**news, "conn": {**CONN, "user": "admin"}}) is False


def test_diff_and_update_follow_the_rerun_rule():
    p = S.SnapshotProvider()
    news = {"conn": CONN, "repo_id": REPO, "revision": REV, "dest": "/d", "marker": "m", "triggers": {}}
    assert p.diff("id", {**news, "ok": True}, news).changes is False
    assert p.diff("id", {**news, "ok": False}, news).changes is True


@pytest.fixture
def hosts(monkeypatch):
    """The local shell as the storage host; snapshot.py takes its connections from the
    transport's cache itself (not through providers.base), so that seam is replaced too."""
    fake = fakeconn.install(monkeypatch)
    monkeypatch.setattr(S, "connection", fake.connection)
    return fake


def test_run_on_a_published_snapshot_checks_and_changes_nothing(hosts, snap):
    res = S.SnapshotProvider().create(snap_props(snap))
    assert len(hosts.sent) == 1 and hosts.mutating() == []  # published: one probe, no unit started
    outs = recorded(res.outs)
    assert outs["ok"] is True
    assert outs["manifest_sha256"] == hashlib.sha256(snap.manifest.read_bytes()).hexdigest()
    assert outs["files"] == snap.sizes
    assert outs["checks"]["problems"] == [] and outs["checks"]["safetensors"] == 3
    assert outs["download"] == {"ran_this_up": False, **snap.status}


def test_run_refuses_a_damaged_published_snapshot_and_leaves_it(hosts, snap):
    (snap.dest / "unet" / "config.json").unlink()
    with pytest.raises(FleetError) as exc:
        S.SnapshotProvider().create(snap_props(snap))
    msg = str(exc.value)
    assert msg.startswith(f"host storage: the published snapshot {snap.dest} fails its independent check")
    assert "\n  - unet/config.json: missing (expected" in msg
    assert hosts.mutating() == []


def test_run_refuses_a_snapshot_without_the_marker(hosts, snap):
    with pytest.raises(FleetError, match=r"has no no_such\.json \(model_snapshot\.marker\), which the "
                                         r"acceptance job reads"):
        S.SnapshotProvider().create(snap_props(snap, marker="no_such.json"))


def fake_systemctl(tmp: Path, monkeypatch, start: str) -> None:
    """`systemctl` and `journalctl` on the local shell's PATH: `start` runs the given sh text."""
    bin_ = tmp / "bin"
    bin_.mkdir()
    (bin_ / "systemctl").write_text(
        "#!/bin/sh\ncase \"$1\" in\n"
        f"  start) {start} ;;\n"
        "  show) case \"$*\" in *InactiveExitTimestamp*) echo @1796130000 ;; *) printf 'exit-code\\n4\\n' ;; esac ;;\n"
        "esac\n")
    (bin_ / "journalctl").write_text("#!/bin/sh\necho \"journal $*\"\n"
                                     "echo 'error: the hub lists 9 files, the stack expects files = 7'\n")
    for f in bin_.iterdir():
        f.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_}:{os.environ['PATH']}")


def test_run_starts_the_unit_when_not_published_and_reports_its_failure(hosts, snap, tmp_path, monkeypatch):
    props = snap_props(snap, dest=str(tmp_path / "not-yet"), manifest=str(tmp_path / "not-yet/m.json"))
    fake_systemctl(tmp_path, monkeypatch, "exit 1")
    with pytest.raises(FleetError) as exc:
        S.SnapshotProvider().create(props)
    msg = str(exc.value)
    assert msg.startswith(f"host storage: model snapshot {REPO}@{REV}: the download unit "
                          "gpu-fleet-model-download.service failed (systemctl start exit code 1); nothing is "
                          f"published at {tmp_path / 'not-yet'}, partial data stays in {props['stage']}:")
    assert "journal --no-pager -o cat -u gpu-fleet-model-download.service --since @1796130000" in msg
    assert "the stack expects files = 7" in msg
    assert hosts.mutating() == ["systemctl start -- gpu-fleet-model-download.service"]


def test_run_after_the_unit_published(hosts, snap, tmp_path, monkeypatch):
    """The unit's run publishes (here: a rename of the proven tree into place); then the check."""
    final = snap.models / "org" / "published" / REV
    props = snap_props(snap, dest=str(final), manifest=str(final / ".gpu-fleet" / "manifest.json"))
    fake_systemctl(tmp_path, monkeypatch, f"mkdir -p {final.parent} && mv {snap.dest} {final}")
    outs = recorded(S.SnapshotProvider().create(props).outs)
    assert outs["ok"] is True and outs["download"]["ran_this_up"] is True and outs["files"] == snap.sizes


def test_run_when_the_unit_succeeds_without_publishing(hosts, snap, tmp_path, monkeypatch):
    props = snap_props(snap, dest=str(tmp_path / "not-yet"), manifest=str(tmp_path / "not-yet/m.json"))
    fake_systemctl(tmp_path, monkeypatch, "exit 0")
    with pytest.raises(FleetError, match=r"the download unit gpu-fleet-model-download.service succeeded, yet"):
        S.SnapshotProvider().create(props)


def test_read_records_damage_as_not_ok_and_the_next_up_reruns(hosts, snap):
    p = S.SnapshotProvider()
    props = snap_props(snap)
    outs = recorded(p.create(props).outs)
    assert recorded(p.read("id", outs).outs)["ok"] is True
    assert p.diff("id", outs, props).changes is False
    (snap.dest / "config.json").write_text("{}")  # another size: the check fails
    hosts.clear()
    refreshed = recorded(p.read("id", outs).outs)
    assert refreshed["ok"] is False and hosts.mutating() == []  # refresh only reads
    assert p.rerun(refreshed, props) is True and p.diff("id", refreshed, props).changes is True


# ---- Payload ---------------------------------------------------------------------------------

PAYLOAD = bytes(range(256)) * 64 + b"\0tail"  # binary, NUL bytes: no text round trip survives


def payload_props(src: Path, path: Path, **kw) -> dict:
    """A Payload's inputs, as the Payload resource hands them over."""
    return {"conn": CONN, "path": str(path), "source": str(src), "source_sha256": sha256_file(src),
            "mode": "0640", "owner": ME, "group": MY_GROUP, "validate": None, "secret": False,
            "sha256": None, "present": None, **kw}


@pytest.fixture
def artifact(tmp_path) -> Path:
    src = tmp_path / "wheels.tar"
    src.write_bytes(PAYLOAD)
    return src


def test_sha256_file(artifact):
    assert sha256_file(artifact) == hashlib.sha256(PAYLOAD).hexdigest()


def test_digest_is_the_declared_sha256(artifact, tmp_path):
    props = payload_props(artifact, tmp_path / "out.tar")
    p = PayloadProvider()
    assert p.digest(props) == hashlib.sha256(PAYLOAD).hexdigest()
    assert p.desired(props)["sha256"] == props["source_sha256"]
    assert p.digest({**props, "source_sha256": "f" * 64}) == "f" * 64  # never re-read at plan time


def test_content_is_the_local_files_bytes(artifact, tmp_path):
    got = PayloadProvider().content(payload_props(artifact, tmp_path / "out.tar"))
    assert isinstance(got, bytes) and got == PAYLOAD


def test_a_source_changed_after_the_program_read_it_is_refused(artifact, tmp_path):
    props = payload_props(artifact, tmp_path / "out.tar")
    artifact.write_bytes(PAYLOAD + b"x")
    with pytest.raises(PlanRefused) as exc:
        PayloadProvider().content(props)
    msg = str(exc.value)
    assert msg.startswith(f"{tmp_path / 'out.tar'}: its local artifact {artifact} changed since the program read it")
    assert hashlib.sha256(PAYLOAD + b"x").hexdigest() in msg and props["source_sha256"] in msg


def test_a_missing_source_is_refused(artifact, tmp_path):
    props = payload_props(artifact, tmp_path / "out.tar")
    artifact.unlink()
    with pytest.raises(PlanRefused, match=rf"^{tmp_path / 'out.tar'}: cannot read its local artifact "
                                          rf"{artifact}: No such file or directory$"):
        PayloadProvider().content(props)


def test_public_inputs_and_outputs_never_hold_the_bytes(hosts, artifact, tmp_path, monkeypatch):
    monkeypatch.setattr(file_module, "BACKUP_DIR", str(tmp_path / "backup"))
    target = tmp_path / "host" / "wheels.tar"
    target.parent.mkdir()
    p, props = PayloadProvider(), payload_props(artifact, target)
    assert p.public_inputs(props) == props and "content" not in props
    res = p.create(props)
    assert target.read_bytes() == PAYLOAD and oct(target.stat().st_mode & 0o777) == "0o640"
    outs = recorded(res.outs)
    assert outs["sha256"] == props["source_sha256"] and outs["present"] is True
    text = json.dumps(outs)
    assert len(text) < 2000 and "content" not in outs
    assert PAYLOAD[:64].decode("latin-1") not in text
    # in sync: nothing sent but probes, and the artifact is not read again
    artifact.unlink()
    hosts.clear()
    assert p.diff("id", outs, props).changes is False
    p.update("id", outs, props)
    assert hosts.mutating() == []


def test_an_update_from_a_changed_source_fails_naming_the_path_and_writes_nothing(hosts, artifact, tmp_path,
                                                                                  monkeypatch):
    monkeypatch.setattr(file_module, "BACKUP_DIR", str(tmp_path / "backup"))
    target = tmp_path / "wheels.on-host.tar"
    p = PayloadProvider()
    outs = recorded(p.create(payload_props(artifact, target)).outs)
    artifact.write_bytes(b"v2")
    news = payload_props(artifact, target)  # the program read v2 ...
    artifact.write_bytes(b"v3")             # ... and it changed again before the write
    assert p.diff("id", outs, news).changes is True
    hosts.clear()
    with pytest.raises(FleetError, match=rf"^{target}: its local artifact {artifact} changed since the program"):
        p.update("id", outs, news)
    assert target.read_bytes() == PAYLOAD and hosts.mutating() == []
    artifact.write_bytes(b"v2")
    p.update("id", outs, news)
    assert target.read_bytes() == b"v2"


def test_a_python_module_payload_is_compiled_by_the_apply_and_read_from_bytecode(hosts, tmp_path, monkeypatch):
    """bytecode=True (the GPU probe's pynvml): the apply writes the module, then compiles it
    with the host's python3 as a checked-hash .pyc; a probe that imports it with
    PYTHONDONTWRITEBYTECODE=1 loads that bytecode; a second apply sends nothing; bytecode lost
    on the host is drift a refresh records and the next apply compiles again; a new module
    version is written and compiled; delete removes the module and its bytecode."""
    monkeypatch.setattr(file_module, "BACKUP_DIR", str(tmp_path / "backup"))
    src = tmp_path / "gf_module.py"  # pynvml's own name is taken in this venv (a .pth redirector)
    src.write_text("VERSION = 1\n")
    lib = tmp_path / "host" / "lib"
    lib.mkdir(parents=True)
    target = lib / "gf_module.py"
    p = PayloadProvider()
    props = payload_props(src, target, bytecode=True)
    assert p.probe_argv(props)[-1] == "pyc" and p.probe_argv(payload_props(src, target))[-1] != "pyc"
    outs = recorded(p.create(props).outs)
    assert outs["bytecode"] is True and target.read_text() == "VERSION = 1\n"
    pyc = sorted((lib / "__pycache__").glob("gf_module.*.pyc"))
    assert len(pyc) == 1
    assert [c for c in hosts.mutating() if c.startswith("python3 -c ")], hosts.mutating()

    def imported_from() -> str:
        env = {**os.environ, "PYTHONPATH": str(lib), "PYTHONDONTWRITEBYTECODE": "1"}
        r = subprocess.run([sys.executable, "-v", "-c", "import gf_module; print(gf_module.VERSION)"],
                           capture_output=True, text=True, env=env, check=True)
        return next((x for x in r.stderr.splitlines() if "gf_module" in x and "code object from" in x), "")

    assert str(pyc[0]) in imported_from()
    hosts.clear()
    assert p.diff("id", outs, props).changes is False
    p.update("id", outs, props)
    assert hosts.mutating() == []
    # the bytecode lost: a refresh reads it, the next apply compiles it again
    pyc[0].unlink()
    refreshed = recorded(p.read("id", outs).outs)
    assert refreshed["bytecode"] is False and p.diff("id", refreshed, props).changes is True
    hosts.clear()
    p.update("id", refreshed, props)
    assert [c.split()[0] for c in hosts.mutating()] == ["python3"] and pyc[0].exists()
    # a new version: written, then compiled (the checked-hash .pyc of v1 would not be used)
    src.write_text("VERSION = 2\n")
    v2 = payload_props(src, target, bytecode=True)
    hosts.clear()
    outs = recorded(p.update("id", outs, v2).outs)
    assert [c.split()[0] for c in hosts.mutating()] == ["sh", "python3"]
    assert str(pyc[0]) in imported_from()
    (lib / "__pycache__" / "other.cpython-311.pyc").write_bytes(b"")  # not this module's: kept
    p.delete("id", outs)
    assert not target.exists() and [x.name for x in (lib / "__pycache__").iterdir()] == ["other.cpython-311.pyc"]
    # made its directory: delete leaves none of it (the module, its bytecode, __pycache__, the dir)
    fresh = tmp_path / "host" / "fresh" / "gf_module.py"
    outs = recorded(p.create(payload_props(src, fresh, bytecode=True)).outs)
    assert outs["made_parent"] is True and list((fresh.parent / "__pycache__").glob("gf_module.*.pyc"))
    p.delete("id", outs)
    assert not fresh.parent.exists()
    # a host without python3: nothing to compile with, nothing planned for it
    obs = file_module.parse_file_probe("kind file\nsha256 " + v2["source_sha256"] + "  x\nbackup no\n"
                                       "parent yes\npython3 absent\n")
    assert p.state(v2, obs)["bytecode"] is True
    assert not [s for s in p.plan(v2, {**obs, "mode": "640", "owner": ME, "group": MY_GROUP}, {})
                if s.argv[0] == "python3"]


def test_a_file_added_to_a_published_snapshot_fails_the_run_and_the_refresh(hosts, snap):
    """The check reports it as extra; for a published tree that is damage (the nodes' view
    refuses it too), so the rollout stops naming it and a refresh records not ok."""
    p = S.SnapshotProvider()
    outs = recorded(p.create(snap_props(snap)).outs)
    extra = snap.dest / "added.bin"
    os.chmod(snap.dest, 0o755)
    extra.write_bytes(b"x")
    assert recorded(p.read("id", outs).outs)["ok"] is False
    with pytest.raises(FleetError, match=r"added\.bin is in the snapshot but not in its manifest"):
        p.create(snap_props(snap))


def test_problems_of_ignores_only_the_snapshots_own_files():
    assert S.problems_of({"problems": [], "extra": [".gpu-fleet/manifest.json"]}) == []
    assert S.problems_of({"problems": ["a: bad"], "extra": ["b"]}) == [
        "a: bad", "b is in the snapshot but not in its manifest"]
    assert S.problems_of(None) == ["verify.py check printed nothing"]
