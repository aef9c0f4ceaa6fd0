"""Model snapshot proof: hash a downloaded Hugging Face snapshot against the hub's listing,
write its manifest, and check a published tree again without the hub.

huggingface_hub checks only the sizes of what it downloads, so before publish every LFS file's
SHA-256 and every other file's git blob id is compared with what the hub lists for the pinned
revision; the manifest written beside the snapshot records what was proven. After publish the
tree is checked on its own: every manifest file present with its size, every JSON file parses,
every safetensors header is consistent with its file (the tensors are never read), every shard
index names shards that exist.

Runs ON the storage host as a script, shipped as this one file:
    python3 verify.py manifest --root DIR --expected EXPECTED.json --repo R --revision REV
                               --out MANIFEST.json [--workers N]
    python3 verify.py check --root DIR --manifest MANIFEST.json
so it is the standard library only (Python >= 3.11) and imports nothing from `components`; the
control side imports it too (tests, bench). `--root` leaves out the top-level `.cache/`
(huggingface_hub's local_dir metadata). Exit status: 0 proven, 1 a problem (each printed on a
line naming the file), 2 a usage error.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import posixpath
import re
import stat
import struct
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

FORMAT = "gpu-fleet/model-manifest/1"
CHUNK = 8 << 20          # one read: large enough that hashlib runs without the GIL most of the time
MAX_HEADER = 100_000_000  # the bound the safetensors library itself puts on a header
MAX_PROBLEMS = 20         # per safetensors file or index: a broken file is not 10,000 lines
EXCLUDED = ".cache"       # huggingface_hub's local_dir metadata, never part of the snapshot

# Bits per element of every dtype the safetensors format defines (F4 and F6 pack below a byte;
# a tensor of them must still end on a byte boundary).
DTYPE_BITS = {
    "BOOL": 8, "U8": 8, "I8": 8,
    "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8, "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8,
    "I16": 16, "U16": 16, "F16": 16, "BF16": 16,
    "I32": 32, "U32": 32, "F32": 32,
    "I64": 64, "U64": 64, "F64": 64, "C64": 64,
    "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6,
}

_SHA256 = re.compile(r"[0-9a-f]{64}")
_SHA1 = re.compile(r"[0-9a-f]{40}")
_CONFIG = re.compile(r"(^|/)(model_index|config|[^/]*_config)\.json$")


class VerifyError(Exception):
    """A file could not be read, or an input is not what this module takes; the text names it."""


@dataclass(frozen=True)
class FileDigest:
    """What one read of a file proves: its size, SHA-256 (what the hub lists for an LFS file)
    and git blob id (sha1 of b"blob <size>\\0" + content: what it lists for any other file)."""
    size: int
    sha256: str
    blob_id: str


# ---- hashing ----------------------------------------------------------------------------

def hash_file(path: str, chunk: int = CHUNK) -> FileDigest:
    """Both digests in one read pass (the blob header needs the size first: taken from fstat,
    and a file that grows or shrinks while read is an error, not a digest)."""
    try:
        with open(path, "rb", buffering=0) as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode):
                raise VerifyError(f"{path}: not a regular file")
            size = st.st_size
            try:
                os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_SEQUENTIAL)
            except (AttributeError, OSError):
                pass
            sha, blob = hashlib.sha256(), hashlib.sha1(b"blob %d\0" % size)
            buf = bytearray(chunk)
            view = memoryview(buf)
            got = 0
            while n := f.readinto(buf):
                part = view[:n]
                sha.update(part)
                blob.update(part)
                got += n
    except OSError as e:
        raise VerifyError(f"{path}: cannot read it: {e.strerror or e}") from None
    if got != size:
        raise VerifyError(f"{path}: changed while it was read ({got} bytes read, {size} at the start)")
    return FileDigest(size, sha.hexdigest(), blob.hexdigest())


def hash_all(root: str, relpaths: list[str], workers: int | None = None) -> dict[str, FileDigest]:
    """Hash files under root in a thread pool (hashlib releases the GIL on large updates, so the
    threads hash in parallel); largest first, so one big shard does not start last."""
    paths = sorted(set(relpaths))
    if not paths:
        return {}

    def size(p: str) -> int:
        try:
            return os.stat(os.path.join(root, p)).st_size
        except OSError:
            return 0

    order = sorted(paths, key=size, reverse=True)
    workers = max(1, min(workers or os.cpu_count() or 1, len(paths)))
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="hash")
    try:
        futures = {p: pool.submit(hash_file, os.path.join(root, p)) for p in order}
        return {p: futures[p].result() for p in paths}
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def list_files(root: str, ignore: set[str] | frozenset[str] = frozenset()) -> tuple[list[str], list[str]]:
    """(regular files, anything else: links, devices, unreadable directories) under root as
    sorted POSIX relative paths, without the top-level `.cache/` and the paths in `ignore`."""
    files: list[str] = []
    others: list[str] = []

    def unreadable(e: OSError) -> None:
        others.append(os.path.relpath(e.filename, root) if e.filename else str(e))

    for dirpath, dirnames, filenames in os.walk(root, onerror=unreadable):
        rel = os.path.relpath(dirpath, root)
        if rel == ".":
            rel = ""
            dirnames[:] = [d for d in dirnames if d != EXCLUDED]
        for d in list(dirnames):
            if os.path.islink(os.path.join(dirpath, d)):
                others.append(posixpath.join(rel, d))
                dirnames.remove(d)
        for name in filenames:
            p = posixpath.join(rel, name)
            if p in ignore:
                continue
            try:
                mode = os.lstat(os.path.join(dirpath, name)).st_mode
            except OSError:
                mode = 0
            (files if stat.S_ISREG(mode) else others).append(p)
    return sorted(files), sorted(others)


# ---- the hub's listing -----------------------------------------------------------------

def unsafe_path(p: object) -> str | None:
    """Why p may not name a file of a snapshot (absolute, `..`, empty parts), or None."""
    if not isinstance(p, str) or not p:
        return "not a non-empty string"
    if p.startswith("/") or "\\" in p or "\0" in p:
        return "not a relative POSIX path"
    if any(part in ("", ".", "..") for part in p.split("/")):
        return "has an empty, '.' or '..' part"
    return None


def _expected_problems(expected: list[dict]) -> list[str]:
    problems, seen = [], set()
    if not isinstance(expected, list):
        return [f"expected: a list of files, got {type(expected).__name__}"]
    for i, e in enumerate(expected):
        where = f"expected[{i}]"
        if not isinstance(e, dict):
            problems.append(f"{where}: not an object")
            continue
        p = e.get("path")
        why = unsafe_path(p)
        if why:
            problems.append(f"{where}: path {p!r} {why}")
            continue
        if p in seen:
            problems.append(f"{p}: listed twice")
        seen.add(p)
        size, sha, blob = e.get("size"), e.get("sha256"), e.get("blob_id")
        if type(size) is not int or size < 0:
            problems.append(f"{p}: the listed size {size!r} is not a byte count")
        if sha is not None and not (isinstance(sha, str) and _SHA256.fullmatch(sha)):
            problems.append(f"{p}: the listed sha256 {sha!r} is not 64 lowercase hex digits")
        if sha is None and not (isinstance(blob, str) and _SHA1.fullmatch(blob)):
            problems.append(f"{p}: the listed blob_id {blob!r} is not 40 lowercase hex digits")
    return problems


def compare(expected: list[dict], digests: dict[str, FileDigest]) -> list[str]:
    """Problems of the downloaded files against the hub's listing, each naming the file with the
    expected and the measured value. `expected` entries: {"path", "size", "blob_id", "sha256"}
    with sha256 set for LFS files only (their hub blob_id is the pointer's, not the content's).
    A file present but not listed is not a problem here: see extra_files."""
    problems = _expected_problems(expected)
    if problems:
        return problems
    for e in sorted(expected, key=lambda e: e["path"]):
        p, d = e["path"], digests.get(e["path"])
        if d is None:
            problems.append(f"{p}: missing (expected {e['size']} bytes)")
        elif d.size != e["size"]:
            problems.append(f"{p}: size mismatch: expected {e['size']} bytes, got {d.size}")
        elif e.get("sha256") is not None:
            if d.sha256 != e["sha256"]:
                problems.append(f"{p}: SHA-256 mismatch (LFS file): expected {e['sha256']}, got {d.sha256}")
        elif d.blob_id != e["blob_id"]:
            problems.append(f"{p}: git blob id mismatch: expected {e['blob_id']}, got {d.blob_id}")
    return problems


def extra_files(expected: list[dict], digests: dict[str, FileDigest]) -> list[str]:
    """Files present that the hub does not list (reported, never published as proven)."""
    listed = {e.get("path") for e in expected if isinstance(e, dict)}
    return sorted(p for p in digests if p not in listed)


# ---- the manifest ----------------------------------------------------------------------

def build_manifest(repo_id: str, revision: str, expected: list[dict],
                   digests: dict[str, FileDigest]) -> dict:
    """The record of a proven snapshot: the hub's files with what was measured. Refuses
    (VerifyError) a tree that compare() does not pass, so no manifest vouches for one."""
    problems = compare(expected, digests)
    if problems:
        raise VerifyError("no manifest for a snapshot with problems: " + "; ".join(problems[:5]))
    files = []
    for e in sorted(expected, key=lambda e: e["path"]):
        d = digests[e["path"]]
        files.append({"path": e["path"], "size": d.size, "sha256": d.sha256, "blob_id": d.blob_id,
                      "lfs": e.get("sha256") is not None})
    return {"format": FORMAT, "repo": repo_id, "revision": revision, "files": files,
            "totals": {"files": len(files), "bytes": sum(f["size"] for f in files)}}


def manifest_text(m: dict) -> str:
    """Stable text (sorted keys, fixed indent, trailing newline): the same tree, the same bytes."""
    return json.dumps(m, sort_keys=True, indent=2) + "\n"


def _manifest_problems(m: object) -> list[str]:
    if not isinstance(m, dict):
        return ["manifest: not a JSON object"]
    if m.get("format") != FORMAT:
        return [f"manifest: format {m.get('format')!r}, this program reads {FORMAT!r}"]
    files = m.get("files")
    if not isinstance(files, list):
        return ["manifest: 'files' is not a list"]
    problems = []
    for i, f in enumerate(files):
        if not isinstance(f, dict):
            problems.append(f"manifest: files[{i}] is not an object")
            continue
        why = unsafe_path(f.get("path"))
        if why:
            problems.append(f"manifest: files[{i}] path {f.get('path')!r} {why}")
        elif type(f.get("size")) is not int or f["size"] < 0:
            problems.append(f"manifest: {f['path']}: size {f.get('size')!r} is not a byte count")
    if problems:
        return problems
    totals = m.get("totals")
    want = {"files": len(files), "bytes": sum(f["size"] for f in files)}
    if totals != want:
        problems.append(f"manifest: totals {totals!r} disagree with its files {want!r}")
    return problems


# ---- safetensors -----------------------------------------------------------------------

def _no_duplicates(pairs: list[tuple[str, object]]) -> dict:
    out = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"key {k!r} appears twice")
        out[k] = v
    return out


def _is_count(v: object) -> bool:
    return type(v) is int and v >= 0


def _read_header(path: str, label: str) -> tuple[int, int, object, list[str]]:
    """(file size, header length, parsed header or None, problems) from the first 8 + n bytes."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size < 8:
                return size, 0, None, [f"{label}: {size} bytes, shorter than the 8-byte header length"]
            (n,) = struct.unpack("<Q", f.read(8))
            if n > MAX_HEADER:
                return size, n, None, [f"{label}: header length {n} exceeds the {MAX_HEADER}-byte bound"]
            if n > size - 8:
                return size, n, None, [f"{label}: header length {n} but only {size - 8} bytes follow "
                                       "(truncated, or not a safetensors file)"]
            raw = f.read(n)
    except OSError as e:
        return 0, 0, None, [f"{label}: cannot read it: {e.strerror or e}"]
    if len(raw) != n:
        return size, n, None, [f"{label}: file shrank while its header was read"]
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        return size, n, None, [f"{label}: header is not UTF-8 (byte {e.start})"]
    try:
        obj = json.loads(text, object_pairs_hook=_no_duplicates)
    except ValueError as e:
        return size, n, None, [f"{label}: header is not valid JSON: {e}"]
    if not isinstance(obj, dict):
        return size, n, None, [f"{label}: header is not a JSON object"]
    return size, n, obj, []


def _check_tensors(label: str, header: dict, data_len: int) -> tuple[int, int, list[str]]:
    """(tensor count, bytes the tensors span, problems) of a parsed header over data_len bytes."""
    problems: list[str] = []
    meta = header.pop("__metadata__", None)
    if meta is not None and not (isinstance(meta, dict)
                                 and all(isinstance(v, str) for v in meta.values())):
        problems.append(f"{label}: __metadata__ is not an object of strings")
    spans, all_placed = [], True
    for name, info in header.items():
        where = f"{label}: tensor {name!r}"
        if not isinstance(info, dict):
            problems.append(f"{where}: not an object")
            all_placed = False
            continue
        dtype, shape, offs = info.get("dtype"), info.get("shape"), info.get("data_offsets")
        if not (isinstance(offs, list) and len(offs) == 2 and all(map(_is_count, offs))
                and offs[0] <= offs[1]):
            problems.append(f"{where}: data_offsets {offs!r} is not [begin, end] with 0 <= begin <= end")
            all_placed = False
        else:
            spans.append((offs[0], offs[1], name))
        if dtype not in DTYPE_BITS:
            problems.append(f"{where}: dtype {dtype!r} is not a safetensors dtype")
        elif not (isinstance(shape, list) and all(map(_is_count, shape))):
            problems.append(f"{where}: shape {shape!r} is not a list of non-negative integers")
        elif isinstance(offs, list) and len(offs) == 2 and all(map(_is_count, offs)):
            bits = DTYPE_BITS[dtype]
            for dim in shape:
                bits *= dim
            if bits % 8:
                problems.append(f"{where}: {dtype} x {shape} is {bits} bits, not a whole number of bytes")
            elif offs[1] - offs[0] != bits // 8:
                problems.append(f"{where}: data_offsets {offs} span {offs[1] - offs[0]} bytes, "
                                f"{dtype} x {shape} needs {bits // 8}")
    covered = sum(e - b for b, e, _ in spans)
    if all_placed:
        pos, last = 0, None
        for b, e, name in sorted(spans):
            if b > pos:
                problems.append(f"{label}: gap: data bytes {pos}..{b} belong to no tensor "
                                f"(before tensor {name!r})")
            elif b < pos:
                problems.append(f"{label}: tensor {name!r} (bytes {b}..{e}) overlaps tensor {last!r} "
                                f"(ends at {pos})")
            if e >= pos:
                pos, last = e, name
        if pos < data_len:
            problems.append(f"{label}: the tensors end at data byte {pos} but the file holds "
                            f"{data_len}: not fully covered")
        elif pos > data_len:
            problems.append(f"{label}: the tensors need {pos} data bytes but the file holds only "
                            f"{data_len} (truncated)")
    return len(header), covered, problems


def _capped(problems: list[str], label: str) -> list[str]:
    if len(problems) <= MAX_PROBLEMS:
        return problems
    return problems[:MAX_PROBLEMS] + [f"{label}: and {len(problems) - MAX_PROBLEMS} more problems"]


def _safetensors(path: str, label: str) -> tuple[dict, set[str]]:
    size, n, header, problems = _read_header(path, label)
    if header is None:
        return {"tensors": 0, "bytes": 0, "problems": problems}, set()
    names = {k for k in header if k != "__metadata__"}
    count, covered, problems = _check_tensors(label, header, size - 8 - n)
    return {"tensors": count, "bytes": covered, "problems": _capped(problems, label)}, names


def read_header(path: str) -> dict:
    """A safetensors file's parsed header, unchecked beyond being a JSON object: {"metadata":
    dict or None, "tensors": {name: its entry}, "header_length", "data_length"}; VerifyError
    when it cannot be read."""
    size, n, header, problems = _read_header(path, path)
    if header is None:
        raise VerifyError(problems[0])
    meta = header.pop("__metadata__", None)
    return {"metadata": meta, "tensors": header, "header_length": n, "data_length": size - 8 - n}


def check_safetensors(path: str, label: str | None = None) -> dict:
    """A safetensors file's header against the file, reading only the header (never the
    tensors): known dtypes, shapes, offsets contiguous from 0 without gap or overlap, each span
    = elements x dtype size, the last ending at the end of the file. -> {"tensors", "bytes",
    "problems"}, each problem naming the file (as `label`, default path) and the tensor."""
    return _safetensors(path, label or path)[0]


def check_index(root: str, index_relpath: str, present: set[str],
                shard_tensors: dict[str, set[str]] | None = None) -> list[str]:
    """A `*.safetensors.index.json`: its weight_map names only shards in `present` (paths
    relative to the index's directory); with shard_tensors ({shard relpath: tensor names}),
    every tensor it maps is in the header of its shard."""
    label = index_relpath
    try:
        with open(os.path.join(root, index_relpath), encoding="utf-8") as f:
            index = json.load(f)
    except (OSError, ValueError) as e:
        return [f"{label}: cannot read it as JSON: {getattr(e, 'strerror', None) or e}"]
    wmap = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(wmap, dict) or not wmap:
        return [f"{label}: no weight_map object naming tensors"]
    base = posixpath.dirname(index_relpath)
    problems, by_shard = [], {}
    for tensor, shard in wmap.items():
        why = unsafe_path(shard)
        if why:
            problems.append(f"{label}: tensor {tensor!r} maps to shard {shard!r}, which {why}")
            continue
        by_shard.setdefault(posixpath.join(base, shard), []).append(tensor)
    for shard, tensors in sorted(by_shard.items()):
        if shard not in present:
            problems.append(f"{label}: weight_map names shard {shard!r} ({len(tensors)} tensors), "
                            "which is not in the snapshot")
        elif shard_tensors is not None and shard in shard_tensors:
            absent = sorted(set(tensors) - shard_tensors[shard])
            if absent:
                problems.append(f"{label}: {len(absent)} tensors it maps to {shard!r} are not in that "
                                f"shard's header, e.g. {absent[0]!r}")
    return _capped(problems, label)


# ---- the published tree ----------------------------------------------------------------

def _check_json(path: str, relpath: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        return f"{relpath}: cannot read it as JSON: {getattr(e, 'strerror', None) or e}"
    if _CONFIG.search(relpath) and not isinstance(doc, dict):
        return f"{relpath}: a config file that is not a JSON object"
    return "ok"


def check_tree(root: str, manifest: dict, ignore: set[str] | frozenset[str] = frozenset()) -> dict:
    """The checks after publish, without the hub and without hashing: every manifest file
    present as a regular file with its size; every .json parses (config files as objects);
    every .safetensors header; every shard index. Files under root that the manifest does not
    list (but `.cache/` and `ignore`) are reported as "extra", not as problems."""
    out = {"json": {}, "safetensors": {}, "indexes": {}, "files": 0, "bytes": 0, "extra": [],
           "problems": _manifest_problems(manifest)}
    if out["problems"]:
        return out
    problems = out["problems"]
    present: set[str] = set()
    for f in sorted(manifest["files"], key=lambda f: f["path"]):
        p = f["path"]
        try:
            st = os.lstat(os.path.join(root, p))
        except FileNotFoundError:
            problems.append(f"{p}: missing (expected {f['size']} bytes)")
            continue
        except OSError as e:
            problems.append(f"{p}: cannot stat it: {e.strerror or e}")
            continue
        if not stat.S_ISREG(st.st_mode):
            problems.append(f"{p}: not a regular file")
        elif st.st_size != f["size"]:
            problems.append(f"{p}: size mismatch: expected {f['size']} bytes, got {st.st_size}")
        else:
            present.add(p)
            out["files"] += 1
            out["bytes"] += st.st_size
    names: dict[str, set[str]] = {}
    for p in sorted(present):
        path = os.path.join(root, p)
        if p.endswith(".json"):
            out["json"][p] = verdict = _check_json(path, p)
            if verdict != "ok":
                problems.append(verdict)
        elif p.endswith(".safetensors"):
            out["safetensors"][p], names[p] = _safetensors(path, p)
            problems.extend(out["safetensors"][p]["problems"])
    for p in sorted(present):
        if p.endswith(".safetensors.index.json") and out["json"].get(p) == "ok":
            found = check_index(root, p, present, names)
            out["indexes"][p] = found or "ok"
            problems.extend(found)
    listed = {f["path"] for f in manifest["files"]}
    files, others = list_files(root, ignore)
    out["extra"] = [p for p in files if p not in listed]
    problems.extend(f"{p}: not a regular file (a link, device or unreadable directory)"
                    for p in others if p not in listed)
    return out


# ---- the command line ------------------------------------------------------------------

def _load_json(path: str, what: str) -> object:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        raise VerifyError(f"{what} {path}: cannot read it as JSON: {getattr(e, 'strerror', None) or e}") from None


def _inside(root: str, path: str) -> set[str]:
    """path's relative POSIX path under root when it lies there (so it is not a snapshot file)."""
    rel = os.path.relpath(os.path.abspath(path), os.path.abspath(root))
    return set() if rel == ".." or rel.startswith("../") else {rel.replace(os.sep, "/")}


def _write_atomic(path: str, text: str) -> None:
    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise VerifyError(f"{path}: cannot write the manifest: {e.strerror or e}") from None
    dfd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def _cmd_manifest(a: argparse.Namespace) -> int:
    started = time.monotonic()
    if not os.path.isdir(a.root):
        raise VerifyError(f"{a.root}: not a directory")
    expected = _load_json(a.expected, "expected file list")
    out = _inside(a.root, a.out)
    ignore = out | {f"{p}.tmp.{os.getpid()}" for p in out}
    files, others = list_files(a.root, ignore)
    problems = [f"{p}: not a regular file (a link, device or unreadable directory)" for p in others]
    digests = hash_all(a.root, files, a.workers)
    problems += compare(expected, digests)
    extra = extra_files(expected, digests) if isinstance(expected, list) else []
    if problems:
        for p in problems:
            print(p)
        for p in extra:
            print(f"note: {p}: present but not listed by the hub", file=sys.stderr)
        if os.path.lexists(a.out):
            os.unlink(a.out)
            print(f"note: removed the stale manifest {a.out}", file=sys.stderr)
        return 1
    m = build_manifest(a.repo, a.revision, expected, digests)
    _write_atomic(a.out, manifest_text(m))
    seconds = time.monotonic() - started
    hashed = sum(d.size for d in digests.values())
    print(json.dumps({"manifest": a.out, "repo": a.repo, "revision": a.revision,
                      **m["totals"], "extra": extra, "seconds": round(seconds, 3),
                      "mb_per_s": round(hashed / 1e6 / seconds, 1) if seconds > 0 else None},
                     sort_keys=True))
    return 0


def _cmd_check(a: argparse.Namespace) -> int:
    if not os.path.isdir(a.root):
        raise VerifyError(f"{a.root}: not a directory")
    result = check_tree(a.root, _load_json(a.manifest, "manifest"), _inside(a.root, a.manifest))
    print(json.dumps(result, sort_keys=True, indent=2))
    return 1 if result["problems"] else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="verify.py", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    m = sub.add_parser("manifest", help="hash a downloaded snapshot, compare it with the hub's "
                                        "listing, write its manifest when it passes")
    m.add_argument("--root", required=True, help="the snapshot directory (its .cache/ left out)")
    m.add_argument("--expected", required=True,
                   help='JSON list of {"path", "size", "blob_id", "sha256"} (sha256 null unless LFS)')
    m.add_argument("--repo", required=True)
    m.add_argument("--revision", required=True)
    m.add_argument("--out", required=True, help="where the manifest goes (only when no problem)")
    m.add_argument("--workers", type=int, default=None, help="hashing threads (default: CPUs)")
    c = sub.add_parser("check", help="check a published snapshot against its manifest")
    c.add_argument("--root", required=True)
    c.add_argument("--manifest", required=True)
    a = ap.parse_args(argv)
    if getattr(a, "workers", None) is not None and a.workers < 1:
        ap.error("--workers takes a whole number >= 1")
    try:
        return _cmd_manifest(a) if a.command == "manifest" else _cmd_check(a)
    except VerifyError as e:
        print(e)
        return 1


if __name__ == "__main__":
    sys.exit(main())
