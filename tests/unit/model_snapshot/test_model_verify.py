"""The model snapshot's proof (components/layers/model_snapshot/onhost/verify.py) on real files.

Safetensors files are written by the real `safetensors` library (serialize_file) or, for the
broken ones, by hand; the library's own parser (deserialize, safe_open) is the reference the
header checks must agree with. Git blob ids are checked against `git hash-object`, and the
hub's listing is built independently of verify.py (hashlib, git), LFS files with the blob id of
their pointer as the hub lists it. The CLI runs as the storage host runs it: the file alone,
copied out of the repository, under `python -I`.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
import types
from pathlib import Path

import pytest
from safetensors import SafetensorError, TensorSpec, deserialize, safe_open, serialize_file

from components.layers.model_snapshot.onhost import verify

VERIFY_PY = Path(verify.__file__)
LFS = 2048  # files at least this big are "LFS" in these trees (the hub lists their sha256)


# ---- writing files ---------------------------------------------------------------------

def write_safetensors(path: Path, tensors: dict[str, tuple[str, list[int], bytes]],
                      metadata: dict[str, str] | None = None) -> None:
    """With the real library: {name: (dtype as TensorSpec takes it, shape, data)}."""
    keep, specs = [], {}
    for name, (dtype, shape, data) in tensors.items():
        buf = ctypes.create_string_buffer(data, len(data) or 1)
        keep.append(buf)
        specs[name] = TensorSpec(dtype=dtype, shape=shape, data_ptr=ctypes.addressof(buf),
                                 data_len=len(data))
    path.parent.mkdir(parents=True, exist_ok=True)
    serialize_file(specs, str(path), metadata=metadata)


def write_raw(path: Path, header: dict | bytes, data: bytes) -> Path:
    """A safetensors file by hand: 8-byte length, the header as given, the data."""
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data)
    return path


def git_blob_id(path: Path) -> str:
    return subprocess.run(["git", "hash-object", "--no-filters", str(path)], check=True,
                          capture_output=True, text=True).stdout.strip()


def git_blob_id_of(data: bytes, tmp: Path) -> str:
    p = tmp / "blob.tmp"
    p.write_bytes(data)
    try:
        return git_blob_id(p)
    finally:
        p.unlink()


def hub_listing(root: Path, tmp: Path) -> list[dict]:
    """The hub's listing of a tree, normalised, computed without verify.py."""
    out = []
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if not p.is_file() or rel.startswith(".cache/"):
            continue
        data = p.read_bytes()
        if len(data) >= LFS:
            sha = hashlib.sha256(data).hexdigest()
            pointer = f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha}\nsize {len(data)}\n"
            out.append({"path": rel, "size": len(data), "sha256": sha,
                        "blob_id": git_blob_id_of(pointer.encode(), tmp)})
        else:
            out.append({"path": rel, "size": len(data), "sha256": None, "blob_id": git_blob_id(p)})
    return out


def model_tree(root: Path) -> Path:
    """A small model repository as huggingface_hub leaves it in a local_dir: two shards and
    their index, configs, a diffusers-like subfolder, and its .cache/ metadata."""
    rnd = os.urandom
    (root / "unet").mkdir(parents=True)
    (root / "config.json").write_text(json.dumps({"architectures": ["Tiny"], "hidden_size": 8}))
    (root / "generation_config.json").write_text(json.dumps({"max_length": 16}))
    (root / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 16}))
    (root / "model_index.json").write_text(json.dumps({"_class_name": "TinyPipeline"}))
    (root / "README.md").write_text("# tiny\n")
    write_safetensors(root / "model-00001-of-00002.safetensors", {
        "embed.weight": ("float32", [64, 32], rnd(64 * 32 * 4)),
        "layer.0.weight": ("bfloat16", [32, 32], rnd(32 * 32 * 2)),
    }, metadata={"format": "pt"})
    write_safetensors(root / "model-00002-of-00002.safetensors", {
        "layer.1.weight": ("float16", [32, 32], rnd(32 * 32 * 2)),
        "layer.1.bias": ("float16", [32], rnd(64)),
    }, metadata={"format": "pt"})
    weight_map = {"embed.weight": "model-00001-of-00002.safetensors",
                  "layer.0.weight": "model-00001-of-00002.safetensors",
                  "layer.1.weight": "model-00002-of-00002.safetensors",
                  "layer.1.bias": "model-00002-of-00002.safetensors"}
    (root / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": 64 * 32 * 4 + 2048 * 2 + 64}, "weight_map": weight_map}))
    (root / "unet" / "config.json").write_text(json.dumps({"in_channels": 4}))
    write_safetensors(root / "unet" / "diffusion_pytorch_model.safetensors",
                      {"conv.weight": ("float32", [4, 4, 3, 3], rnd(4 * 4 * 9 * 4))})
    cache = root / ".cache" / "huggingface" / "download"
    cache.mkdir(parents=True)
    (cache / "config.json.metadata").write_text("deadbeef\n")
    (cache / "broken.json").write_text("{not json")
    return root


@pytest.fixture
def tree(tmp_path):
    root = model_tree(tmp_path / "snap")
    return root, hub_listing(root, tmp_path)


def digests_of(root: Path) -> dict[str, verify.FileDigest]:
    files, others = verify.list_files(str(root))
    assert others == []
    return verify.hash_all(str(root), files, workers=4)


def flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


# ---- a good tree -----------------------------------------------------------------------

def test_good_tree_passes_before_and_after_publish(tree):
    root, expected = tree
    digests = digests_of(root)
    assert ".cache/huggingface/download/config.json.metadata" not in digests
    assert verify.compare(expected, digests) == []
    assert verify.extra_files(expected, digests) == []
    m = verify.build_manifest("org/tiny", "a" * 40, expected, digests)
    assert m["format"] == verify.FORMAT and m["repo"] == "org/tiny" and m["revision"] == "a" * 40
    assert [f["path"] for f in m["files"]] == sorted(e["path"] for e in expected)
    assert m["totals"] == {"files": len(expected), "bytes": sum(e["size"] for e in expected)}
    lfs = {f["path"] for f in m["files"] if f["lfs"]}
    assert lfs == {e["path"] for e in expected if e["sha256"]}
    assert lfs == {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}
    for f in m["files"]:
        assert f["blob_id"] == git_blob_id(root / f["path"])
        assert f["sha256"] == hashlib.sha256((root / f["path"]).read_bytes()).hexdigest()

    r = verify.check_tree(str(root), m)
    assert r["problems"] == []
    assert r["files"] == len(expected) and r["bytes"] == m["totals"]["bytes"]
    assert r["extra"] == []
    assert r["json"] == {p: "ok" for p in ["config.json", "generation_config.json", "model_index.json",
                                           "model.safetensors.index.json", "tokenizer_config.json",
                                           "unet/config.json"]}
    assert r["indexes"] == {"model.safetensors.index.json": "ok"}
    assert r["safetensors"]["model-00001-of-00002.safetensors"] == {
        "tensors": 2, "bytes": 64 * 32 * 4 + 32 * 32 * 2, "problems": []}
    assert set(r["safetensors"]) == {"model-00001-of-00002.safetensors",
                                     "model-00002-of-00002.safetensors",
                                     "unet/diffusion_pytorch_model.safetensors"}


def test_manifest_text_is_stable(tree):
    root, expected = tree
    digests = digests_of(root)
    a = verify.manifest_text(verify.build_manifest("org/tiny", "r", expected, digests))
    b = verify.manifest_text(verify.build_manifest("org/tiny", "r", list(reversed(expected)),
                                                   dict(reversed(list(digests.items())))))
    assert a == b and a.endswith("}\n")
    assert list(json.loads(a)) == sorted(json.loads(a))


def test_build_manifest_refuses_a_tree_with_problems(tree):
    root, expected = tree
    digests = digests_of(root)
    del digests["config.json"]
    with pytest.raises(verify.VerifyError, match="config.json: missing"):
        verify.build_manifest("org/tiny", "r", expected, digests)


# ---- hashing ---------------------------------------------------------------------------

@pytest.mark.parametrize("content", [b"", b"hello\n", b"\0\x01\xff" * 1000, os.urandom(3 * 1024 * 1024 + 7)],
                         ids=["empty", "text", "binary", "3MiB"])
def test_digests_agree_with_git_and_hashlib(tmp_path, content):
    p = tmp_path / "f"
    p.write_bytes(content)
    d = verify.hash_file(str(p), chunk=1 << 20)
    assert d == verify.FileDigest(len(content), hashlib.sha256(content).hexdigest(), git_blob_id(p))


def test_hash_all_names_an_unreadable_file(tmp_path):
    (tmp_path / "a").write_bytes(b"x")
    with pytest.raises(verify.VerifyError, match="gone: cannot read it"):
        verify.hash_all(str(tmp_path), ["a", "gone"], workers=2)


# ---- the hub's listing -----------------------------------------------------------------

def test_a_flipped_byte_in_an_lfs_file_names_it_and_both_sha256(tree):
    root, expected = tree
    shard = "model-00002-of-00002.safetensors"
    flip(root / shard, (root / shard).stat().st_size - 10)
    want = next(e for e in expected if e["path"] == shard)
    got = hashlib.sha256((root / shard).read_bytes()).hexdigest()
    assert verify.compare(expected, digests_of(root)) == [
        f"{shard}: SHA-256 mismatch (LFS file): expected {want['sha256']}, got {got}"]


def test_a_flipped_byte_in_a_small_file_names_it_and_both_blob_ids(tree):
    root, expected = tree
    want = next(e for e in expected if e["path"] == "unet/config.json")
    flip(root / "unet" / "config.json", 3)
    got = git_blob_id(root / "unet" / "config.json")
    assert verify.compare(expected, digests_of(root)) == [
        f"unet/config.json: git blob id mismatch: expected {want['blob_id']}, got {got}"]


def test_a_missing_file_and_a_size_mismatch(tree):
    root, expected = tree
    (root / "README.md").unlink()
    with open(root / "config.json", "a") as f:
        f.write(" ")
    size = next(e["size"] for e in expected if e["path"] == "config.json")
    assert verify.compare(expected, digests_of(root)) == [
        "README.md: missing (expected 7 bytes)",
        f"config.json: size mismatch: expected {size} bytes, got {size + 1}"]


def test_an_unlisted_file_is_extra_not_a_problem(tree):
    root, expected = tree
    (root / "notes.txt").write_text("left over\n")
    digests = digests_of(root)
    assert verify.compare(expected, digests) == []
    assert verify.extra_files(expected, digests) == ["notes.txt"]


@pytest.mark.parametrize("entry,message", [
    ({"path": "../etc/passwd", "size": 1, "sha256": None, "blob_id": "0" * 40}, "has an empty, '.' or '..' part"),
    ({"path": "/abs", "size": 1, "sha256": None, "blob_id": "0" * 40}, "not a relative POSIX path"),
    ({"path": "a", "size": -1, "sha256": None, "blob_id": "0" * 40}, "a: the listed size -1 is not a byte count"),
    ({"path": "a", "size": 1, "sha256": "XYZ", "blob_id": None}, "a: the listed sha256 'XYZ'"),
    ({"path": "a", "size": 1, "sha256": None, "blob_id": None}, "a: the listed blob_id None"),
])
def test_a_malformed_listing_is_a_problem(entry, message):
    problems = verify.compare([entry], {})
    assert len(problems) == 1 and message in problems[0]


# ---- safetensors headers ---------------------------------------------------------------

def test_header_parse_agrees_with_the_library(tmp_path, monkeypatch):
    p = tmp_path / "many.safetensors"
    tensors = {
        "f32": ("float32", [3, 5], os.urandom(60)),
        "bf16": ("bfloat16", [7], os.urandom(14)),
        "i64": ("int64", [2, 2], os.urandom(32)),
        "u8": ("uint8", [5], os.urandom(5)),
        "flag": ("bool", [3], b"\x00\x01\x00"),
        "fp8": ("float8_e4m3fn", [4], os.urandom(4)),
        "fp4": ("float4_e2m1fn_x2", [3], os.urandom(3)),    # 6 F4 values, 3 bytes
        "cplx": ("complex64", [2], os.urandom(16)),
        "scalar": ("float64", [], os.urandom(8)),
        "empty": ("float32", [0, 3], b""),
    }
    write_safetensors(p, tensors, metadata={"format": "pt", "note": "x"})
    r = verify.check_safetensors(str(p))
    assert r == {"tensors": len(tensors), "bytes": sum(len(t[2]) for t in tensors.values()), "problems": []}

    ours = verify.read_header(str(p))
    lib = {name: (t["dtype"], t["shape"]) for name, t in deserialize(p.read_bytes())}
    assert {n: (t["dtype"], t["shape"]) for n, t in ours["tensors"].items()} == lib
    assert lib["fp4"] == ("F4", [6])
    assert ours["data_length"] == p.stat().st_size - 8 - ours["header_length"]
    # safe_open wants a framework module at open, never for the header: a stand-in numpy
    monkeypatch.setitem(sys.modules, "numpy", types.ModuleType("numpy"))
    with safe_open(str(p), "numpy") as f:
        assert sorted(f.keys()) == sorted(ours["tensors"])
        assert f.metadata() == ours["metadata"] == {"format": "pt", "note": "x"}
        for name in f.keys():
            s = f.get_slice(name)
            assert (s.get_dtype(), s.get_shape()) == lib[name]


def U8(shape, offs):
    return {"dtype": "U8", "shape": shape, "data_offsets": offs}


BAD_HEADERS = {
    "gap": ({"a": U8([2], [0, 2]), "b": U8([2], [3, 5])}, bytes(5), "gap: data bytes 2..3 belong to no tensor"),
    "overlap": ({"a": U8([2], [0, 2]), "b": U8([2], [1, 3])}, bytes(3),
                "tensor 'b' (bytes 1..3) overlaps tensor 'a'"),
    "zero-size inside": ({"a": U8([4], [0, 4]), "z": U8([0], [2, 2])}, bytes(4), "tensor 'z' (bytes 2..2) overlaps"),
    "dtype x shape": ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}}, bytes(4),
                      "tensor 'a': data_offsets [0, 4] span 4 bytes, F32 x [2] needs 8"),
    "sub-byte": ({"a": {"dtype": "F4", "shape": [3], "data_offsets": [0, 2]}}, bytes(2),
                 "F4 x [3] is 12 bits, not a whole number of bytes"),
    "not covered": ({"a": U8([2], [0, 2])}, bytes(3), "the tensors end at data byte 2 but the file holds 3"),
    "unknown dtype": ({"a": {"dtype": "Q8", "shape": [2], "data_offsets": [0, 2]}}, bytes(2),
                      "tensor 'a': dtype 'Q8' is not a safetensors dtype"),
    "negative dim": ({"a": U8([-2], [0, 2])}, bytes(2), "shape [-2] is not a list of non-negative integers"),
    "bool dim": ({"a": U8([True], [0, 1])}, bytes(1), "shape [True] is not a list"),
    "three offsets": ({"a": U8([2], [0, 2, 2])}, bytes(2), "data_offsets [0, 2, 2] is not [begin, end]"),
    "no offsets": ({"a": {"dtype": "U8", "shape": [2]}}, bytes(2), "data_offsets None"),
    "metadata": ({"__metadata__": {"a": 1}, "t": U8([2], [0, 2])}, bytes(2), "__metadata__ is not an object of strings"),
    "not json": (b'{"a":', bytes(2), "header is not valid JSON"),
    "not utf-8": (b'{"\xff": 1}', b"", "header is not UTF-8"),
    "not an object": (b"[1, 2]", b"", "header is not a JSON object"),
}


@pytest.mark.parametrize("name", list(BAD_HEADERS))
def test_a_crafted_bad_header_is_refused_as_the_library_refuses_it(tmp_path, name):
    header, data, message = BAD_HEADERS[name]
    p = write_raw(tmp_path / "bad.safetensors", header, data)
    problems = verify.check_safetensors(str(p), "shard.safetensors")["problems"]
    assert problems and all(q.startswith("shard.safetensors: ") for q in problems)
    assert any(message in q for q in problems), problems
    with pytest.raises(SafetensorError):
        deserialize(p.read_bytes())


def test_a_duplicate_tensor_name_is_refused(tmp_path):
    raw = b'{"a":' + json.dumps(U8([2], [0, 2])).encode() + b',"a":' + json.dumps(U8([2], [0, 2])).encode() + b"}"
    p = write_raw(tmp_path / "dup.safetensors", raw, bytes(2))
    assert "key 'a' appears twice" in verify.check_safetensors(str(p))["problems"][0]


def test_a_good_handmade_header_with_padding_passes(tmp_path):
    raw = json.dumps({"a": U8([2], [0, 2]), "z": U8([0], [2, 2]),
                      "f6": {"dtype": "F6_E2M3", "shape": [4], "data_offsets": [2, 5]}}).encode() + b"   "
    p = write_raw(tmp_path / "ok.safetensors", raw, bytes(5))
    assert verify.check_safetensors(str(p)) == {"tensors": 3, "bytes": 5, "problems": []}
    assert sorted(n for n, _ in deserialize(p.read_bytes())) == ["a", "f6", "z"]


def test_a_truncated_file_is_refused(tmp_path):
    p = tmp_path / "t.safetensors"
    write_safetensors(p, {"w": ("float32", [256], os.urandom(1024))})
    whole = p.read_bytes()
    (n,) = struct.unpack("<Q", whole[:8])
    cases = {
        len(whole) - 1: "the tensors need 1024 data bytes but the file holds only 1023 (truncated)",
        8 + n - 1: f"header length {n} but only {n - 1} bytes follow",
        5: "5 bytes, shorter than the 8-byte header length",
    }
    for cut, message in cases.items():
        p.write_bytes(whole[:cut])
        r = verify.check_safetensors(str(p))
        assert [q for q in r["problems"] if message in q], (cut, r)
        with pytest.raises(SafetensorError):
            deserialize(p.read_bytes())


def test_a_header_length_past_the_bound_is_refused_without_reading_it(tmp_path):
    p = tmp_path / "huge.safetensors"
    p.write_bytes(struct.pack("<Q", 200_000_000) + b"{}")
    assert "header length 200000000 exceeds the 100000000-byte bound" in verify.check_safetensors(str(p))["problems"][0]


# ---- indexes and the published tree ----------------------------------------------------

def test_an_index_naming_a_missing_shard(tree):
    root, expected = tree
    m = verify.build_manifest("org/tiny", "r", expected, digests_of(root))
    (root / "model-00002-of-00002.safetensors").unlink()
    present = {f["path"] for f in m["files"]} - {"model-00002-of-00002.safetensors"}
    assert verify.check_index(str(root), "model.safetensors.index.json", present) == [
        "model.safetensors.index.json: weight_map names shard 'model-00002-of-00002.safetensors' "
        "(2 tensors), which is not in the snapshot"]
    r = verify.check_tree(str(root), m)
    assert "model-00002-of-00002.safetensors: missing (expected" in r["problems"][0]
    assert r["indexes"]["model.safetensors.index.json"] != "ok" and len(r["problems"]) == 2


def test_an_index_is_relative_to_its_directory_and_checked_against_shard_headers(tmp_path):
    root = tmp_path / "r"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "m.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"a": "s.safetensors", "b": "s.safetensors", "c": "../x.safetensors"}}))
    problems = verify.check_index(str(root), "sub/m.safetensors.index.json", {"sub/s.safetensors"},
                                  {"sub/s.safetensors": {"a"}})
    assert problems == [
        "sub/m.safetensors.index.json: tensor 'c' maps to shard '../x.safetensors', which has an empty, '.' or '..' part",
        "sub/m.safetensors.index.json: 1 tensors it maps to 'sub/s.safetensors' are not in that shard's header, e.g. 'b'"]


def test_check_tree_after_publish_finds_damage(tree):
    root, expected = tree
    m = verify.build_manifest("org/tiny", "r", expected, digests_of(root))
    size = {f["path"]: f["size"] for f in m["files"]}
    (root / "unet" / "config.json").write_text("[" + " " * (size["unet/config.json"] - 2) + "]")
    (root / "generation_config.json").write_text("{" + " " * (size["generation_config.json"] - 1))
    os.symlink("config.json", root / "alias.json")
    (root / "extra.bin").write_bytes(b"x")
    r = verify.check_tree(str(root), m)
    assert r["json"]["unet/config.json"] == "unet/config.json: a config file that is not a JSON object"
    assert r["json"]["generation_config.json"].startswith("generation_config.json: cannot read it as JSON")
    assert r["problems"][2] == "alias.json: not a regular file (a link, device or unreadable directory)"
    assert r["extra"] == ["extra.bin"] and len(r["problems"]) == 3 and r["files"] == len(expected)


def test_check_tree_refuses_a_manifest_that_is_not_one(tree):
    root, expected = tree
    m = verify.build_manifest("org/tiny", "r", expected, digests_of(root))
    assert verify.check_tree(str(root), {"format": "x"})["problems"] == [
        f"manifest: format 'x', this program reads {verify.FORMAT!r}"]
    m["totals"]["bytes"] += 1
    assert "disagree with its files" in verify.check_tree(str(root), m)["problems"][0]
    m["files"][0]["path"] = "../up"
    assert "'../up' has an empty, '.' or '..' part" in verify.check_tree(str(root), m)["problems"][0]


# ---- the command line, run as the storage host runs it ---------------------------------

@pytest.fixture
def cli(tmp_path):
    alone = tmp_path / "host" / "verify.py"
    alone.parent.mkdir()
    shutil.copy(VERIFY_PY, alone)

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-I", str(alone), *args], capture_output=True,
                              text=True, cwd=alone.parent, timeout=60)
    return run


def test_cli_manifest_then_check(tree, tmp_path, cli):
    root, expected = tree
    (tmp_path / "expected.json").write_text(json.dumps(expected))
    out = root / "MANIFEST.json"                                     # beside the files: not one of them
    r = cli("manifest", "--root", str(root), "--expected", str(tmp_path / "expected.json"),
            "--repo", "org/tiny", "--revision", "b" * 40, "--out", str(out), "--workers", "3")
    assert r.returncode == 0, r.stdout + r.stderr
    summary = json.loads(r.stdout)
    assert r.stdout.count("\n") == 1
    assert summary["files"] == len(expected) and summary["extra"] == [] and summary["manifest"] == str(out)
    want = verify.build_manifest("org/tiny", "b" * 40, expected, digests_of(root))
    assert out.read_text() == verify.manifest_text(want)

    r = cli("check", "--root", str(root), "--manifest", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    result = json.loads(r.stdout)
    assert result["problems"] == [] and result["extra"] == [] and result["files"] == len(expected)

    (root / "unet" / "config.json").unlink()
    r = cli("check", "--root", str(root), "--manifest", str(out))
    assert r.returncode == 1 and "unet/config.json: missing (expected" in json.loads(r.stdout)["problems"][0]


def test_cli_writes_no_manifest_on_a_problem(tree, tmp_path, cli):
    root, expected = tree
    (tmp_path / "expected.json").write_text(json.dumps(expected))
    out = tmp_path / "MANIFEST.json"
    flip(root / "model-00001-of-00002.safetensors", 100)
    (root / "extra.txt").write_text("x")
    args = ("manifest", "--root", str(root), "--expected", str(tmp_path / "expected.json"),
            "--repo", "org/tiny", "--revision", "r", "--out", str(out))
    r = cli(*args)
    assert r.returncode == 1 and not out.exists()
    assert r.stdout.splitlines()[0].startswith("model-00001-of-00002.safetensors: SHA-256 mismatch (LFS file): expected ")
    assert len(r.stdout.splitlines()) == 1
    assert "note: extra.txt: present but not listed by the hub" in r.stderr

    out.write_text("{}")                                             # an earlier run's manifest
    r = cli(*args)
    assert r.returncode == 1 and not out.exists() and "removed the stale manifest" in r.stderr


def test_cli_errors_are_readable(tmp_path, cli):
    r = cli("manifest", "--root", str(tmp_path), "--expected", str(tmp_path / "nope.json"),
            "--repo", "o/r", "--revision", "r", "--out", str(tmp_path / "m.json"))
    assert r.returncode == 1 and r.stdout.startswith(f"expected file list {tmp_path / 'nope.json'}: cannot read")
    r = cli("check", "--root", str(tmp_path / "absent"), "--manifest", str(tmp_path / "m.json"))
    assert r.returncode == 1 and "absent: not a directory" in r.stdout
    assert cli("check", "--root", str(tmp_path)).returncode == 2
