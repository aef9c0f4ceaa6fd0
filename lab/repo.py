"""The hosts' package source: a local apt repository built from the host's mirror.

Lab hosts cannot reach the Debian mirror. `ensure_repo` downloads the packages
listed in `lab/packages.txt` and their dependency closure (no recommends) with
the host's apt, indexes them with dpkg-scanpackages into a flat repository
(`Packages`, `Packages.gz`, `Release`) and caches it machine-wide under
`<cache>/lab/repo-<key>/`, keyed by the list. Every host gets it bound
read-only at /srv/lab-repo, with `deb [trusted=yes] file:/srv/lab-repo ./` as
its only apt source.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import re
import time
from pathlib import Path

from .common import LabError, cache_dir, check_tools, flock, log, remove_tree, run, sha16

PACKAGES_FILE = Path(__file__).with_name("packages.txt")
MOUNT_POINT = "/srv/lab-repo"
APT_LINE = f"deb [trusted=yes] file:{MOUNT_POINT} ./"
DEPENDS_FLAGS = ["--recurse", "--no-recommends", "--no-suggests", "--no-conflicts",
                 "--no-breaks", "--no-replaces", "--no-enhances"]
_NAME = re.compile(r"^[a-z0-9][a-z0-9+.-]+(?::[a-z0-9-]+)?$")


def read_packages(path: Path = PACKAGES_FILE) -> list[str]:
    names = []
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            names.append(line)
    return sorted(set(names))


def arch() -> str:
    return run(["dpkg", "--print-architecture"]).stdout.strip()


def repo_key(packages: list[str] | None = None) -> str:
    return sha16("repo-v1", arch(), packages if packages is not None else read_packages())


def closure_names(depends_output: str, host_arch: str) -> list[str]:
    """Real package names from `apt-cache depends --recurse` (its unindented lines).

    Virtual packages (`<name>`) are dropped; a `name:arch` is kept only for this
    architecture or `all`.
    """
    names = set()
    for line in depends_output.splitlines():
        if not line or line[0].isspace() or line.startswith("<"):
            continue
        name = line.strip()
        if ":" in name:
            name, _, a = name.partition(":")
            if a not in (host_arch, "all"):
                continue
        if _NAME.match(name):
            names.add(name)
    return sorted(names)


def ensure_repo() -> Path:
    """The cached repository for the current package list, built if needed."""
    packages = read_packages()
    cache = cache_dir()
    key = repo_key(packages)
    repo = cache / f"repo-{key}"
    ok = cache / f"repo-{key}.ok"
    if ok.exists() and (repo / "Packages.gz").exists():
        return repo
    with flock(cache / ".repo.lock", "repo"):
        if ok.exists() and (repo / "Packages.gz").exists():
            return repo
        build_repo(packages, repo)
        ok.write_text(f"{key}\n")
    return repo


def build_repo(packages: list[str], repo: Path) -> None:
    check_tools(["apt-get", "apt-cache", "dpkg-scanpackages"])
    start = time.monotonic()
    host_arch = arch()
    log(f"building the lab apt repository {repo.name} for: {' '.join(packages)}")
    log("  apt-get update (the host's sources)")
    upd = run(["apt-get", "update", "-qq"], check=False, timeout=600)
    if upd.returncode != 0:
        log(f"  apt-get update reported errors (continuing): {upd.stderr.strip()[-300:]}")
    dep = run(["apt-cache", "depends", *DEPENDS_FLAGS, *packages], check=False)
    names = closure_names(dep.stdout, host_arch)
    missing = [p for p in packages if p not in names]
    if dep.returncode != 0 or missing:
        raise LabError(f"apt-cache depends failed for {', '.join(missing) or 'the list'} "
                       f"(is it in {PACKAGES_FILE.name} spelled right?):\n{dep.stderr.strip()[-800:]}")
    log(f"  dependency closure: {len(names)} packages; downloading")
    tmp = repo.with_name(f".{repo.name}.tmp")
    remove_tree(tmp)
    tmp.mkdir(mode=0o755, parents=True)
    dl = ["apt-get", "download", "-q", "-o", "APT::Sandbox::User=root"]
    res = run([*dl, *names], cwd=tmp, check=False, timeout=1800)
    if res.returncode != 0:
        # One name without a candidate fails the whole batch: retry one by one.
        failed = []
        for n in names:
            if not list(tmp.glob(f"{n}_*.deb")):
                if run([*dl, n], cwd=tmp, check=False, timeout=600).returncode != 0:
                    failed.append(n)
        hard = [n for n in failed if n in packages]
        if hard:
            raise LabError(f"apt-get download failed for {', '.join(hard)}:\n{res.stderr[-800:]}")
        if failed:
            log(f"  skipped (no candidate to download): {', '.join(failed)}")
    scan = run(["dpkg-scanpackages", "--multiversion", "."], cwd=tmp)
    index = scan.stdout.encode()
    (tmp / "Packages").write_bytes(index)
    with open(tmp / "Packages.gz", "wb") as raw:
        with gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as gz:
            gz.write(index)
    (tmp / "Release").write_text(release_file(tmp, host_arch))
    for p in tmp.iterdir():
        os.chmod(p, 0o644)
    os.chmod(tmp, 0o755)
    remove_tree(repo)
    os.rename(tmp, repo)
    size = sum(p.stat().st_size for p in repo.iterdir()) / 2**20
    log(f"  repository ready: {len(list(repo.glob('*.deb')))} packages, {size:.1f} MiB, "
        f"in {time.monotonic() - start:.0f} s")


def release_file(repo: Path, host_arch: str) -> str:
    lines = [
        "Origin: gpu-fleet-lab",
        "Label: gpu-fleet-lab",
        "Suite: lab",
        "Codename: lab",
        f"Date: {time.strftime('%a, %d %b %Y %H:%M:%S UTC', time.gmtime())}",
        f"Architectures: {host_arch} all",
        "Description: packages for the gpu-fleet lab hosts",
    ]
    for algo, field in (("md5", "MD5Sum"), ("sha256", "SHA256")):
        lines.append(f"{field}:")
        for name in ("Packages", "Packages.gz"):
            data = (repo / name).read_bytes()
            lines.append(f" {hashlib.new(algo, data).hexdigest()} {len(data):>16} {name}")
    return "\n".join(lines) + "\n"
