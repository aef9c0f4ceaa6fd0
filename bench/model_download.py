"""Benchmark: huggingface_hub's snapshot_download against curl, and the snapshot layer's
hash_all against sha256sum, on the same generated model from the hub double.

Writes a diffusers-shaped model (tests/doubles/hub/model.py: one shard of --big-mb MiB, about
18 MB more in 15 files; kept under --model-root and reused), serves it with the hub double as
its own process on loopback, and times, each into a fresh directory:
  (a) snapshot_download(revision=<commit>, local_dir=..., max_workers=N), the pinned client;
  (b) curl fetching the same files from the same /resolve/ URLs, N at a time (xargs -P N);
  (c) components.layers.model_snapshot.onhost.verify.hash_all(root, files, N) over (a)'s download,
      against sha256sum over the same files, N at a time (xargs -P N).
The double's digests and the model's pages are warmed first, so both sides of a ratio read the
same cached bytes. Prints the median and the best of --repeat runs, MB/s, and the ratios
(goal: >= 0.9).

    .venv/bin/python bench/model_download.py [--big-mb 300] [--workers 8] [--repeat 5] [--target /dev/shm]
"""

from __future__ import annotations

import argparse
import filecmp
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.pop("HF_TOKEN", None)

from huggingface_hub import HfApi, snapshot_download  # noqa: E402

from components.layers.model_snapshot.onhost.verify import hash_all  # noqa: E402
from tests.doubles.hub.model import write_model  # noqa: E402

REPO = "lab/tiny-video-dit"


def start_double(root: Path, log: Path) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-m", "tests.doubles.hub", "--root", str(root), "--log", str(log)],
                            cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None  # stdout=PIPE
    return proc, proc.stdout.readline().strip()


def timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def run_hf(url: str, commit: str, dest: Path, workers: int) -> None:
    snapshot_download(REPO, revision=commit, local_dir=dest, cache_dir=dest.with_name(dest.name + ".hf-cache"),
                      max_workers=workers, endpoint=url, token=False)


def run_curl(url: str, commit: str, files: list[str], dest: Path, workers: int) -> None:
    args = "".join(f"{dest / rel}\n{url}/{REPO}/resolve/{commit}/{rel}\n" for rel in files)
    subprocess.run(["xargs", "-P", str(workers), "-n", "2", "-d", "\n", "curl", "-sf", "--create-dirs", "-o"],
                   input=args, text=True, check=True)


def run_sha256sum(root: Path, files: list[str], workers: int) -> None:
    subprocess.run(["xargs", "-P", str(workers), "-n", "1", "-d", "\n", "sha256sum"], input="\n".join(files),
                   cwd=root, text=True, check=True, stdout=subprocess.DEVNULL)


def same_tree(a: Path, b: Path, files: list[str]) -> None:
    bad = [rel for rel in files if not filecmp.cmp(a / rel, b / rel, shallow=False)]
    if bad:
        raise SystemExit(f"download differs from the model: {bad}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--big-mb", type=int, default=300, help="MiB in the largest shard")
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--model-root", default=str(Path(tempfile.gettempdir()) / "gpu-fleet-bench-hub"))
    ap.add_argument("--target", default=None, help="where the downloads go (default: the temp dir; "
                                                   "/dev/shm leaves the disk out)")
    a = ap.parse_args()
    t0 = time.perf_counter()
    commit, files = write_model(a.model_root, REPO, big_mb=a.big_mb)
    written = time.perf_counter() - t0
    model = Path(a.model_root) / REPO / commit
    total = sum((model / rel).stat().st_size for rel in files)
    work = Path(tempfile.mkdtemp(prefix="bench-model-download-", dir=a.target))
    log = work / "hub.log"
    proc, url = start_double(Path(a.model_root), log)
    times: dict[str, list[float]] = {"hf": [], "curl": [], "hash_all": [], "sha256sum": []}
    try:
        HfApi(endpoint=url).model_info(REPO, revision=commit, files_metadata=True, token=False)  # digests
        run_sha256sum(model, files, a.workers)  # the model's pages into the page cache
        for i in range(a.repeat):
            hf_dir, curl_dir = work / f"hf{i}", work / f"curl{i}"
            before = len(log.read_text().splitlines())
            order = [("hf", partial(run_hf, url, commit, hf_dir, a.workers)),
                     ("curl", partial(run_curl, url, commit, files, curl_dir, a.workers))]
            for name, fn in order if i % 2 == 0 else order[::-1]:
                times[name].append(timed(fn))
            same_tree(model, hf_dir, files)
            same_tree(model, curl_dir, files)
            requests = [json.loads(line) for line in log.read_text().splitlines()[before:]]
            hashers: list[tuple[str, Callable[[], object]]] = [
                ("hash_all", partial(hash_all, str(hf_dir), files, a.workers)),
                ("sha256sum", partial(run_sha256sum, hf_dir, files, a.workers))]
            for name, hasher in hashers if i % 2 == 0 else hashers[::-1]:
                times[name].append(timed(hasher))
            shutil.rmtree(curl_dir)
            if i < a.repeat - 1:
                shutil.rmtree(hf_dir)
        digests = hash_all(str(hf_dir), files, a.workers)
        if sum(d.size for d in digests.values()) != total:
            raise SystemExit("hash_all did not cover every byte")
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        shutil.rmtree(work, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    best = {k: min(v) for k, v in times.items()}
    rate = {k: total / 1e6 / s for k, s in med.items()}
    top = {k: total / 1e6 / s for k, s in best.items()}
    hf, curl = "hf_hub/", "curl/"  # in the User-Agent of each client's requests
    mine = {who: [r for r in requests if who in (r["user_agent"] or "")] for who in (hf, curl)}
    calls = {who: f"{len(rs)} ({'/'.join(sorted({r['method'] for r in rs}))})" for who, rs in mine.items()}
    print(f"model: {len(files)} files, {total / 1e6:.1f} MB (largest shard {a.big_mb} MiB), commit {commit[:12]}"
          f" (ready in {written:.1f} s); into {work.parent}; workers {a.workers}, median of {a.repeat}, "
          f"{os.cpu_count()} CPUs")
    print(f"{'':36} {'seconds':>8} {'MB/s':>8}   best: {'seconds':>8} {'MB/s':>8}")
    rows = [("(a) snapshot_download", "hf"), ("(b) curl, xargs -P", "curl"),
            ("(c) verify.hash_all (sha256+blob)", "hash_all"), ("    sha256sum, xargs -P", "sha256sum")]
    for label, k in rows:
        print(f"{label:36} {med[k]:8.2f} {rate[k]:8.0f}         {best[k]:8.2f} {top[k]:8.0f}")
    for label, x, y in (("snapshot_download / curl", "hf", "curl"), ("hash_all / sha256sum", "hash_all", "sha256sum")):
        print(f"ratio {label:30} {rate[x] / rate[y]:8.2f} {'':16} {top[x] / top[y]:8.2f}")
    print(f"requests for {len(files)} files: snapshot_download {calls[hf]}, curl {calls[curl]}")


if __name__ == "__main__":
    main()
