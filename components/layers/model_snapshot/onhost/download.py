"""The model downloader, run on the storage host by its oneshot unit, in the layer's venv.

    python download.py /etc/gpu-fleet/model-snapshot.json

One pinned revision into the staging directory, with huggingface_hub: first what the hub
lists for that commit (`model_info(files_metadata=True)`: every file's size, git blob id and
LFS SHA-256), written as `expected.json` into the state directory, and only then the
download (`snapshot_download` into the staging directory: concurrent, resuming partial
files, skipping finished ones), retried up to `attempts` times on network errors. A
revision or repository the hub does not have, or a listing that differs from what the stack
expects, stops before anything is written. Progress goes to the journal every 15 s;
`status.json` sums it up for the layer (what was there before, what was fetched).

huggingface_hub resumes a file only within one process (each attempt writes a new
`<etag>.<random>.incomplete`), so a download killed half way would fetch its large files
again from byte 0. `resume_partials` continues the largest partial of each unfinished LFS
file with the library's own `http_get(resume_size=...)` (a Range request) and moves it into
place; snapshot_download then finds the file, checks its SHA-256 against the hub's ETag and
skips it.

Exit codes: 0 done, 2 bad config, 3 the hub does not have it, 4 the listing is not what the
stack expects, 5 the staging store is full, 6 the hub failed every attempt.
"""

from __future__ import annotations

import errno
import json
import os
import sys
import threading
import time
from pathlib import Path

EXIT_CONFIG, EXIT_MISSING, EXIT_UNEXPECTED, EXIT_FULL, EXIT_HUB = 2, 3, 4, 5, 6


def log(msg: str) -> None:
    print(msg, flush=True)


def expected_files(info, allow_patterns) -> list[dict]:
    """The hub's listing of the revision, filtered as snapshot_download filters it."""
    from huggingface_hub.utils import filter_repo_objects

    siblings = list(filter_repo_objects(info.siblings or [], allow_patterns=allow_patterns or None,
                                        key=lambda s: s.rfilename))
    out = []
    for s in siblings:
        lfs = s.lfs
        sha = (lfs.get("sha256") if isinstance(lfs, dict) else getattr(lfs, "sha256", None)) if lfs else None
        out.append({"path": s.rfilename, "size": s.size, "blob_id": s.blob_id, "sha256": sha})
    return sorted(out, key=lambda e: e["path"])


def on_disk(stage: Path, files: list[dict]) -> tuple[int, int]:
    """(finished files, bytes on disk including partial downloads) in the staging directory."""
    done = have = 0
    for f in files:
        p = stage / f["path"]
        if p.is_file():
            size = p.stat().st_size
            have += size
            done += size == f["size"]
    incomplete = stage / ".cache" / "huggingface" / "download"
    if incomplete.is_dir():
        have += sum(p.stat().st_size for p in incomplete.rglob("*.incomplete") if p.is_file())
    return done, have


def progress(stage: Path, files: list[dict], total: int, stop: threading.Event) -> None:
    start, last = time.monotonic(), on_disk(stage, files)[1]
    while not stop.wait(15):
        done, have = on_disk(stage, files)
        rate = (have - last) / 15 / 1e6
        last = have
        log(f"progress: {done}/{len(files)} files, {have}/{total} bytes "
            f"({100 * have / max(total, 1):.1f} %), {rate:.1f} MB/s, {time.monotonic() - start:.0f} s")


def resume_partials(cfg: dict, token, stage: Path, files: list[dict]) -> dict[str, int]:
    """Finish the unfinished LFS files from their largest partial download: {path: from byte}."""
    from huggingface_hub import hf_hub_url
    from huggingface_hub._local_folder import get_local_download_paths
    from huggingface_hub.file_download import http_get
    from huggingface_hub.utils import build_hf_headers

    resumed = {}
    for f in files:
        dest = stage / f["path"]
        if not f["sha256"] or (dest.is_file() and dest.stat().st_size == f["size"]):
            continue
        base = get_local_download_paths(stage, f["path"]).incomplete_path(f["sha256"])
        partials = sorted(base.parent.glob(f"{base.stem}.*.incomplete"), key=lambda p: p.stat().st_size)
        if not partials or not 0 < partials[-1].stat().st_size < f["size"]:
            continue
        keep, offset = partials[-1], partials[-1].stat().st_size
        log(f"resuming {f['path']} from byte {offset} of {f['size']}")
        with open(keep, "ab") as out:
            http_get(hf_hub_url(cfg["repo_id"], f["path"], revision=cfg["revision"], endpoint=cfg["endpoint"]),
                     out, resume_size=offset, headers=build_hf_headers(token=token), expected_size=f["size"])
        if keep.stat().st_size != f["size"]:
            raise OSError(f"{f['path']}: resumed to {keep.stat().st_size} bytes, expected {f['size']}")
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.replace(keep, dest)
        for stale in partials[:-1]:  # older attempts' partials of the same file: superseded
            stale.unlink(missing_ok=True)
        resumed[f["path"]] = offset
    return resumed


def full(e: BaseException) -> bool:
    while e is not None:
        if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        e = e.__cause__ or e.__context__
    return False


def main(argv: list[str]) -> int:
    try:
        cfg = json.loads(Path(argv[1]).read_text())
        repo, rev, stage, state = cfg["repo_id"], cfg["revision"], Path(cfg["stage"]), Path(cfg["state"])
    except (IndexError, OSError, ValueError, KeyError) as e:
        log(f"error: cannot read the downloader's config: {e}")
        return EXIT_CONFIG
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    os.environ["HF_HOME"] = str(state / "hf-home")
    token = Path(cfg["token_file"]).read_text().strip() if cfg.get("token_file") else None

    from huggingface_hub import HfApi, snapshot_download
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError, RevisionNotFoundError

    api = HfApi(endpoint=cfg["endpoint"], token=token)
    attempts = int(cfg.get("attempts", 3))
    for attempt in range(1, attempts + 1):
        try:
            info = api.model_info(repo, revision=rev, files_metadata=True)
            break
        except RevisionNotFoundError:
            log(f"error: the hub at {cfg['endpoint']} has no revision {rev} of {repo}; nothing was written")
            return EXIT_MISSING
        except (RepositoryNotFoundError, GatedRepoError) as e:
            log(f"error: the hub at {cfg['endpoint']} refuses {repo} ({type(e).__name__}: the repository "
                "does not exist, or the token may not read it); nothing was written")
            return EXIT_MISSING
        except Exception as e:  # network: retried
            log(f"attempt {attempt}/{attempts}: listing {repo}@{rev} failed: {type(e).__name__}: {e}")
            if attempt == attempts:
                return EXIT_HUB
            time.sleep(min(30, 2 ** attempt))
    if info.sha != rev:
        log(f"error: the hub answered for commit {info.sha}, not the pinned {rev}; nothing was written")
        return EXIT_UNEXPECTED
    files = expected_files(info, cfg.get("allow_patterns"))
    total = sum(f["size"] for f in files)
    for key, got in (("expected_files", len(files)), ("expected_bytes", total)):
        if cfg.get(key) is not None and cfg[key] != got:
            log(f"error: the hub lists {len(files)} files, {total} bytes for {repo}@{rev}; the stack "
                f"expects {key.split('_')[1]} = {cfg[key]} (model_snapshot.{key}); nothing was written")
            return EXIT_UNEXPECTED
    if not files:
        log(f"error: the hub lists no files for {repo}@{rev} matching {cfg.get('allow_patterns')}")
        return EXIT_UNEXPECTED

    state.mkdir(parents=True, exist_ok=True)
    (state / "expected.json").write_text(json.dumps(files, indent=1, sort_keys=True) + "\n")
    stage.mkdir(parents=True, exist_ok=True)
    done0, have0 = on_disk(stage, files)
    log(f"{repo}@{rev}: {len(files)} files, {total} bytes; {done0} files finished before this run, "
        f"{have0} bytes on disk")
    status = {"repo_id": repo, "revision": rev, "files": len(files), "bytes": total,
              "finished_before": done0, "bytes_before": have0, "attempts": 0, "started": time.time()}
    stop = threading.Event()
    threading.Thread(target=progress, args=(stage, files, total, stop), daemon=True).start()
    code = EXIT_HUB
    try:
        for attempt in range(1, attempts + 1):
            status["attempts"] = attempt
            try:
                status.setdefault("resumed", {}).update(resume_partials(cfg, token, stage, files))
                snapshot_download(repo, revision=rev, local_dir=stage, endpoint=cfg["endpoint"], token=token,
                                  allow_patterns=cfg.get("allow_patterns") or None,
                                  max_workers=int(cfg.get("max_workers", 8)))
                code = 0
                break
            except Exception as e:
                if full(e):
                    done, have = on_disk(stage, files)
                    log(f"error: the models store is full ({e}); {done}/{len(files)} files, {have} bytes kept "
                        "in staging, nothing published; free space (or raise the quota) and run `pulumi up`")
                    code = EXIT_FULL
                    break
                log(f"attempt {attempt}/{attempts} failed: {type(e).__name__}: {e}")
                if attempt < attempts:
                    time.sleep(min(30, 2 ** attempt))
    finally:
        stop.set()
        done, have = on_disk(stage, files)
        status.update({"finished": done, "bytes_after": have, "fetched_bytes": max(0, have - have0),
                       "seconds": round(time.time() - status["started"], 1), "exit": code})
        (state / "status.json").write_text(json.dumps(status, sort_keys=True) + "\n")
    if code == 0:
        log(f"downloaded: {done}/{len(files)} files, fetched {status['fetched_bytes']} bytes in "
            f"{status['seconds']} s")
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv))
