"""The hub double (tests/doubles/hub) against the real, pinned huggingface_hub client.

What the model snapshot layer will rely on: `snapshot_download` into a local dir gets every
file byte for byte, `model_info(files_metadata=True)` reports what git and LFS would, branches
resolve, errors arrive as the client's own exception types, and a killed download leaves what
was finished alone on the next run.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import safetensors
from huggingface_hub import HfApi, constants, hf_hub_download, snapshot_download
from huggingface_hub.errors import (
    HfHubHTTPError,
    RemoteEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.utils import disable_progress_bars

from tests.doubles.hub import HubDouble, server
from tests.doubles.hub.model import write_model
from tests.pulumi_cli import ROOT

REPO = "lab/tiny-video-dit"
BIG = "transformer/diffusion_pytorch_model-00001-of-00003.safetensors"
disable_progress_bars()


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    root = tmp_path_factory.mktemp("hub")
    commit, files = write_model(root, REPO, big_mb=20)
    return root, commit, files


@pytest.fixture
def hub(model):
    with HubDouble(model[0]) as h:
        yield h


def fetch(hub, commit, dest, **kw):
    return snapshot_download(REPO, revision=commit, local_dir=dest, cache_dir=dest.parent / "hf-cache",
                             max_workers=8, endpoint=hub.url, token=kw.pop("token", False), **kw)


def sha256(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def test_model_is_a_real_sharded_diffusers_model(model, tmp_path):
    root, commit, files = model
    base = root / REPO / commit
    assert len(files) >= 12 and (root / REPO / "refs" / "main").read_text().strip() == commit
    assert (base / BIG).stat().st_size >= 20 * 2**20
    index = json.loads((base / "transformer/diffusion_pytorch_model.safetensors.index.json").read_text())
    shards = {p for p in files if p.startswith("transformer/diffusion_pytorch_model-")}
    assert set(index["weight_map"].values()) == {p.split("/")[1] for p in shards} and len(shards) == 3
    names = set()
    for shard in shards:
        names |= {name for name, _ in safetensors.deserialize((base / shard).read_bytes())}
    assert names == set(index["weight_map"])
    # deterministic: another root gets the same commit; the same root is not written again
    mtime = (base / BIG).stat().st_mtime_ns
    assert write_model(tmp_path, REPO, big_mb=20)[0] == commit
    assert write_model(root, REPO, big_mb=20) == (commit, files)
    assert (base / BIG).stat().st_mtime_ns == mtime


def test_snapshot_download_is_byte_identical_over_plain_http(hub, model, tmp_path):
    root, commit, files = model
    dest = tmp_path / "dl"
    assert fetch(hub, commit, dest) == str(dest)
    for rel in files:
        assert (dest / rel).read_bytes() == (root / REPO / commit / rel).read_bytes(), rel
    calls = [(r["method"], r["path"].split("?")[0]) for r in hub.requests]
    # a commit needs no repo_info: one tree listing, then HEAD + GET per file (no Xet route)
    assert calls.count(("GET", f"/api/models/{REPO}/tree/{commit}")) == 1
    for rel in files:
        url = f"/{REPO}/resolve/{commit}/{rel}"
        assert calls.count(("HEAD", url)) == 1 and calls.count(("GET", url)) == 1, rel
    assert len(calls) == 1 + 2 * len(files)


def test_model_info_reports_git_and_lfs_metadata(hub, model):
    root, commit, files = model
    base = root / REPO / commit
    info = HfApi(endpoint=hub.url).model_info(REPO, revision=commit, files_metadata=True, token=False)
    assert info.sha == commit and {s.rfilename for s in info.siblings} == set(files)
    for s in info.siblings:
        data = (base / s.rfilename).read_bytes()
        assert s.size == len(data)
        if s.rfilename.endswith(".safetensors") or len(data) >= 2**20:
            assert s.lfs is not None and s.lfs.sha256 == hashlib.sha256(data).hexdigest() and s.lfs.size == len(data)
            assert s.blob_id == server.git_blob_id(server.lfs_pointer(s.lfs.sha256, len(data)))
        else:
            assert s.lfs is None and s.blob_id == server.git_blob_id(data)
    assert any(s.rfilename == "tokenizer/tokenizer.json" and s.lfs for s in info.siblings)  # LFS by size


def test_blob_and_tree_ids_are_what_git_computes(hub, model, tmp_path):
    """The tree listing's oids are real git objects: a git repo of the same files (LFS ones as
    their pointers) has the same blob and folder ids."""
    root, commit, files = model
    work = tmp_path / "git"
    shutil.copytree(root / REPO / commit, work)
    entries = HfApi(endpoint=hub.url).list_repo_tree(REPO, revision=commit, recursive=True, token=False)
    entries = {e.path: e for e in entries}
    for rel in files:
        if entries[rel].lfs:
            (work / rel).write_bytes(server.lfs_pointer(entries[rel].lfs.sha256, entries[rel].size))
    git = lambda *a: subprocess.run(["git", "-C", str(work), *a], check=True, capture_output=True,  # noqa: E731
                                    text=True).stdout
    git("init", "-q")
    git("add", "-A")
    blobs = {line.split("\t")[1]: line.split()[1] for line in git("ls-files", "-s").splitlines()}
    tree = git("write-tree").strip()
    for rel in files:
        assert entries[rel].blob_id == blobs[rel], rel
    for d in ("transformer", "vae", "tokenizer"):
        assert entries[d].tree_id == git("rev-parse", f"{tree}:{d}").strip(), d


def test_branch_resolves_through_refs(hub, model, tmp_path):
    root, commit, _ = model
    api = HfApi(endpoint=hub.url)
    assert api.model_info(REPO, revision="main", token=False).sha == commit
    assert api.model_info(REPO, token=False).sha == commit  # no revision: the default branch
    fetch(hub, "main", tmp_path / "dl", allow_patterns=["*.json"])
    assert (tmp_path / "dl/model_index.json").is_file() and not (tmp_path / "dl" / BIG).exists()
    assert hub.requests[0]["path"] == f"/api/models/{REPO}/revision/main"


def test_errors_are_the_clients_own(hub, model, tmp_path):
    root, commit, _ = model
    api = HfApi(endpoint=hub.url)
    with pytest.raises(RevisionNotFoundError):
        api.model_info(REPO, revision="f" * 40, token=False)
    with pytest.raises(RevisionNotFoundError):
        fetch(hub, "no-such-branch", tmp_path / "a")
    with pytest.raises(RepositoryNotFoundError) as anonymous:
        api.model_info("lab/no-such-model", token=False)
    assert anonymous.value.response.status_code == 401  # as the hub: a private repo looks the same
    with pytest.raises(RepositoryNotFoundError):
        snapshot_download("lab/no-such-model", revision=commit, local_dir=tmp_path / "b",
                          cache_dir=tmp_path / "hf-cache", endpoint=hub.url, token=False)
    with pytest.raises(RepositoryNotFoundError) as authenticated:
        api.model_info("lab/no-such-model", token="hf_any")
    assert authenticated.value.response.status_code == 404
    with pytest.raises(RemoteEntryNotFoundError):
        hf_hub_download(REPO, "no/such/file.json", revision=commit, endpoint=hub.url, token=False,
                        cache_dir=tmp_path / "c")


def test_token_is_required_when_the_double_has_one(model, tmp_path):
    root, commit, files = model
    with HubDouble(root, token="hf_lab_secret") as hub:
        with pytest.raises(RepositoryNotFoundError) as missing:
            fetch(hub, commit, tmp_path / "none")
        assert missing.value.response.status_code == 401
        with pytest.raises(HfHubHTTPError) as wrong:
            HfApi(endpoint=hub.url).model_info(REPO, revision=commit, token="hf_wrong")
        assert wrong.value.response.status_code == 401 and not isinstance(wrong.value, RepositoryNotFoundError)
        assert not (tmp_path / "none" / BIG).exists()
        fetch(hub, commit, tmp_path / "ok", token="hf_lab_secret", allow_patterns=["vae/*"])
        assert sorted(p.name for p in (tmp_path / "ok/vae").iterdir()) == ["config.json",
                                                                          "diffusion_pytorch_model.safetensors"]
        assert {r["status"] for r in hub.requests[:2]} == {401}


def test_ranges_and_cached_digests(hub, model, monkeypatch):
    root, commit, _ = model
    url = f"{hub.url}/{REPO}/resolve/{commit}/{BIG}"
    data = (root / REPO / commit / BIG).read_bytes()
    req = urllib.request.Request(url, headers={"Range": "bytes=1000-1999"})
    with urllib.request.urlopen(req) as r:
        assert r.status == 206 and r.read() == data[1000:2000]
        assert r.headers["Content-Range"] == f"bytes 1000-1999/{len(data)}"
        assert r.headers["ETag"].strip('"') == r.headers["X-Linked-Etag"].strip('"') == hashlib.sha256(data).hexdigest()
    with urllib.request.urlopen(urllib.request.Request(url, headers={"Range": "bytes=-10"})) as r:
        assert r.status == 206 and r.read() == data[-10:]
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(urllib.request.Request(url, headers={"Range": f"bytes={len(data)}-"}))
    assert e.value.code == 416
    hashed = []
    real = server.file_meta
    monkeypatch.setattr(server, "file_meta", lambda p, rel: hashed.append(rel) or real(p, rel))
    for _ in range(3):
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD")) as r:
            assert r.headers["X-Repo-Commit"] == commit and int(r.headers["Content-Length"]) == len(data)
            assert r.headers["Accept-Ranges"] == "bytes" and "X-Xet-Hash" not in r.headers
    assert hashed == []  # hashed once (by the first request of this test), never per HEAD
    (root / REPO / commit / "README.md").touch()  # a changed mtime is hashed again
    urllib.request.urlopen(urllib.request.Request(f"{hub.url}/{REPO}/resolve/{commit}/README.md", method="HEAD"))
    assert hashed == ["README.md"]


def test_dropped_connection_resumes_with_a_range(model, tmp_path):
    """A connection cut mid-body: the client's own retry asks for the rest with a Range, from
    the last whole chunk it wrote (it reads 10 MiB chunks; the bytes after one are lost)."""
    root, commit, _ = model
    cut, chunk = 15 * 2**20, constants.DOWNLOAD_CHUNK_SIZE
    assert chunk < cut < (root / REPO / commit / BIG).stat().st_size
    with HubDouble(root, cut_after=cut) as hub:
        fetch(hub, commit, tmp_path / "dl", allow_patterns=[BIG])
    assert sha256(tmp_path / "dl" / BIG) == sha256(root / REPO / commit / BIG)
    gets = [r for r in hub.requests if r["method"] == "GET" and r["path"].endswith(BIG)]
    assert [(g["range"], g["status"], g["bytes_sent"]) for g in gets] == [
        (None, 200, cut), (f"bytes={chunk}-", 206, (root / REPO / commit / BIG).stat().st_size - chunk)]


def incomplete(partial_dir: Path) -> list[tuple[Path, int]]:
    """The client's partial files and their sizes. A small file can finish (renamed into place)
    between the listing and its stat: it is no longer partial, not an error."""
    out = []
    for p in partial_dir.glob("*.incomplete") if partial_dir.is_dir() else []:
        try:
            out.append((p, p.stat().st_size))
        except FileNotFoundError:
            pass
    return out


def metadata_written(dest, rel: str) -> bool:
    meta = dest / ".cache/huggingface/download" / f"{rel}.metadata"
    return meta.is_file() and meta.stat().st_size > 0


def test_killed_download_does_not_fetch_finished_files_again(model, tmp_path):
    """SIGKILL a snapshot_download halfway through the big shard, run it again: the finished
    files are not requested at all. huggingface_hub 2.4.0 writes each download to a
    process-unique `<etag>.<random>.incomplete` and never resumes one left by another process,
    so the big shard starts again at byte 0 (no Range) and the killed run's partial file stays
    behind under .cache/huggingface/download: the snapshot layer must sweep those."""
    root, commit, files = model
    dest = tmp_path / "dl"
    script = (f"from huggingface_hub import snapshot_download\n"
              f"snapshot_download({REPO!r}, revision={commit!r}, local_dir={str(dest)!r}, "
              f"cache_dir={str(tmp_path / 'hf-cache')!r}, max_workers=8, endpoint=URL, token=False)\n")
    env = dict(os.environ, HF_HUB_DISABLE_PROGRESS_BARS="1", HF_HOME=str(tmp_path / "hf-home"))
    env.pop("HF_TOKEN", None)
    big_size = (root / REPO / commit / BIG).stat().st_size
    partial_dir = dest / ".cache/huggingface/download/transformer"
    with HubDouble(root, rate_mbps=8) as hub:
        proc = subprocess.Popen([sys.executable, "-c", f"URL = {hub.url!r}\n" + script], env=env)
        deadline = time.monotonic() + 30
        partial = []
        while time.monotonic() < deadline and proc.poll() is None:
            partial = [p for p, size in incomplete(partial_dir) if size >= big_size // 3]
            # done: the file in place and its download metadata written (the client writes the
            # metadata after the file; a run killed in between checks that file again with a HEAD)
            others_done = all((dest / rel).is_file() and metadata_written(dest, rel) for rel in files if rel != BIG)
            if partial and others_done:
                break
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert partial and not (dest / BIG).exists(), "the big shard was not caught halfway"
        while time.monotonic() < deadline and not [r for r in hub.requests if r["path"].endswith(BIG)
                                                   and r["method"] == "GET"]:
            time.sleep(0.02)  # the double logs the cut GET once its next write finds no reader
        first = list(hub.requests)
        finished = {r["path"].rsplit(f"/resolve/{commit}/", 1)[1] for r in first
                    if r["method"] == "GET" and r["complete"] and "/resolve/" in r["path"]}
        assert finished == set(files) - {BIG}
        (cut,) = [r for r in first if r["method"] == "GET" and r["path"].endswith(BIG)]
        assert not cut["complete"] and 0 < cut["bytes_sent"] < big_size
        hub.rate = None
        fetch(hub, commit, dest)
        second = hub.requests[len(first):]
    for rel in files:
        assert (dest / rel).read_bytes() == (root / REPO / commit / rel).read_bytes(), rel
    assert not [r for r in second if r["path"].split(f"/resolve/{commit}/")[-1] in finished]
    big_gets = [r for r in second if r["method"] == "GET" and r["path"].endswith(BIG)]
    assert [(g["range"], g["bytes_sent"]) for g in big_gets] == [(None, big_size)]
    saved = sum((root / REPO / commit / rel).stat().st_size for rel in finished)
    left = [p for p in partial_dir.glob("*.incomplete")]
    assert [p.name for p in left] == [partial[0].name]
    print(f"\nrerun after SIGKILL: {len(second)} requests; {saved} bytes of {len(finished)} finished files "
          f"not fetched again; big shard fetched again from byte 0 ({big_size} bytes); "
          f"{left[0].stat().st_size} bytes of the killed run's partial file left behind")


def test_runs_as_its_own_process(model, tmp_path):
    root, commit, _ = model
    log, pid = tmp_path / "hub.log", tmp_path / "hub.pid"
    proc = subprocess.Popen([sys.executable, "-m", "tests.doubles.hub", "--root", str(root), "--port", "0",
                             "--log", str(log), "--pid-file", str(pid)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:") and pid.read_text().strip() == str(proc.pid)
        info = HfApi(endpoint=url).model_info(REPO, revision="main", files_metadata=True, token=False)
        assert info.sha == commit
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    assert not pid.exists()
    (entry,) = [json.loads(line) for line in log.read_text().splitlines()]
    assert entry["method"] == "GET" and entry["status"] == 200 and entry["path"].endswith("?blobs=true")
    assert entry["bytes_sent"] > 0 and entry["end"] >= entry["start"] and entry["range"] is None
