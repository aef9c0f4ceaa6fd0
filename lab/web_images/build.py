"""Build the lab's two stand-in Slurm-web images (TEST DOUBLES) as OCI archives, from Debian
packages of the lab's apt repository (lab/repo.py), cached machine-wide.

No Dockerfile and no container engine: each image is one layer, the files of a package
dependency closure (`dpkg-deb -x`, from the repository's Packages index, without the
packages an image never runs: dpkg, debconf, iproute2, ...) less documentation, plus the
stand-in's own files. Owners are root except the agent's /etc/slurm-web (uid/gid 999, mode
0700: the seed's trap). Everything is written deterministically (sorted, fixed mtimes, gzip
without a timestamp), so the same inputs give the same digests.

Cached under `<cache>/lab/web-images-<key>/` (`agent.oci.tar`, `gateway.oci.tar`,
`build.json`) with a `.ok` marker. Each image has its own key (its packages' SHA-256s, its own
sources and this file; in its label and its tag `7.0.0-lab-<key>`), so a change to one image
leaves the other's digest as it was; the cache's key hashes both.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import tarfile
import tempfile
import time
from pathlib import Path

from .. import repo as lab_repo
from ..common import LabError, cache_dir, flock, log, remove_tree, run, sha16

HERE = Path(__file__).resolve().parent
#: the version the stand-in stands in for
SLURM_WEB_VERSION = "7.0.0"
EPOCH = 1704067200  # 2024-01-01T00:00:00Z: every file's mtime and the images' creation time
CREATED = "2024-01-01T00:00:00Z"
PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
AGENT_UID = 999
#: never in an image: package tooling, init, and what nginx's Depends drag in unused
EXCLUDE = {"dpkg", "debconf", "debconf-2.0", "iproute2", "init-system-helpers", "lsb-base",
           "sysvinit-utils", "readline-common", "perl-base", "tzdata", "libc-bin", "base-files"}
#: trees dropped from every image (documentation, translations, charset converters)
PRUNE = ["usr/share/doc", "usr/share/man", "usr/share/info", "usr/share/locale",
         "usr/share/lintian", "usr/share/i18n", "usr/lib/x86_64-linux-gnu/gconv",
         "usr/share/nginx", "etc/nginx/sites-available", "etc/nginx/sites-enabled",
         "etc/nginx/modules-enabled", "etc/nginx/conf.d", "etc/init.d", "etc/logrotate.d",
         "etc/ufw", "lib/systemd", "usr/lib/systemd", "var/www", "var/log", "var/lib/nginx",
         "usr/lib/python3.11/ensurepip", "usr/lib/python3.11/idlelib", "usr/lib/python3.11/tkinter",
         "usr/lib/python3.11/turtledemo", "usr/lib/python3.11/pydoc_data",
         "usr/lib/python3.11/lib2to3", "usr/lib/python3.11/distutils"]

IMAGES = {
    "agent": {
        "repository": "gpu-fleet/slurm-web-agent",
        "roots": ["python3-minimal", "libpython3.11-stdlib"],
        "sources": ["agent.py"],
        "user": f"{AGENT_UID}:{AGENT_UID}",
        "entrypoint": ["/usr/bin/python3", "-I", "/usr/lib/slurm-web/agent.py"],
        "env": [PATH_ENV, "PYTHONDONTWRITEBYTECODE=1", "PYTHONUNBUFFERED=1"],
        "port": 8081,
    },
    "gateway": {
        "repository": "gpu-fleet/slurm-web-gateway",
        "roots": ["nginx-light"],
        "sources": ["nginx.conf", "index.html", "app.js"],
        "user": "65534:65534",
        "entrypoint": ["/usr/sbin/nginx", "-e", "stderr", "-g", "daemon off;"],
        "env": [PATH_ENV],
        "port": 8080,
    },
}

PASSWD = {
    "agent": ["root:x:0:0:root:/root:/usr/sbin/nologin",
              f"slurm-web:x:{AGENT_UID}:{AGENT_UID}:Slurm-web:/etc/slurm-web:/usr/sbin/nologin",
              "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin"],
    "gateway": ["root:x:0:0:root:/root:/usr/sbin/nologin",
                "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin"],
}
GROUP = {
    "agent": ["root:x:0:", f"slurm-web:x:{AGENT_UID}:", "nogroup:x:65534:"],
    "gateway": ["root:x:0:", "nogroup:x:65534:"],
}


# --- the repository's index and a dependency closure (pure) -------------------------------------

def parse_index(text: str) -> dict[str, dict]:
    """Packages index -> {name: stanza}; a name listed twice keeps its later stanza."""
    pkgs: dict[str, dict] = {}
    for block in text.split("\n\n"):
        fields: dict[str, str] = {}
        key = None
        for line in block.splitlines():
            if line[:1].isspace() and key:
                fields[key] += "\n" + line.strip()
            elif ":" in line:
                key, _, val = line.partition(":")
                fields[key] = val.strip()
        if "Package" in fields:
            pkgs[fields["Package"]] = fields
    return pkgs


def _alternatives(field: str) -> list[list[str]]:
    """'a (>= 1) | b, c:any' -> [['a', 'b'], ['c']] (versions and arch qualifiers dropped)."""
    out = []
    for clause in filter(None, (c.strip() for c in field.split(","))):
        out.append([alt.split("(")[0].split(":")[0].strip() for alt in clause.split("|")])
    return out


def closure(index: dict[str, dict], roots: list[str], exclude: set[str] = EXCLUDE) -> list[str]:
    """Names of the packages `roots` need (Pre-Depends and Depends, recursively; the first
    alternative the index has, by name or Provides), less `exclude`."""
    provides: dict[str, str] = {}
    for name, st in sorted(index.items()):
        for alt in _alternatives(st.get("Provides", "")):
            provides.setdefault(alt[0], name)
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name in seen or name in exclude:
            continue
        if name not in index:
            raise LabError(f"web images: {name} is not in the lab repository (lab/packages.txt)")
        seen.add(name)
        st = index[name]
        for clause in _alternatives(st.get("Pre-Depends", "")) + _alternatives(st.get("Depends", "")):
            if any(a in exclude for a in clause):
                continue
            pick = next((a for a in clause if a in index), None) or next(
                (provides[a] for a in clause if a in provides), None)
            if pick is None:
                raise LabError(f"web images: {name} needs {' | '.join(clause)}, not in the lab repository")
            todo.append(pick)
    return sorted(seen)


# --- key -----------------------------------------------------------------------------------

def _sources_hash(names: list[str]) -> str:
    h = hashlib.sha256()
    for name in sorted({*names, "build.py"}):
        h.update(name.encode() + b"\0" + (HERE / name).read_bytes() + b"\0")
    return h.hexdigest()


def plan(repo_dir: Path) -> dict:
    """What each image is made of and its key, and the cache key, from the repository's index."""
    index = parse_index((repo_dir / "Packages").read_text())
    images, keys = {}, {}
    for comp, spec in IMAGES.items():
        names = closure(index, spec["roots"])
        images[comp] = [(n, index[n]["Version"], index[n]["SHA256"], index[n]["Filename"]) for n in names]
        keys[comp] = sha16("web-image-v1", lab_repo.arch(), SLURM_WEB_VERSION, comp, images[comp],
                           _sources_hash(spec["sources"]))
    return {"key": sha16("web-images-v2", keys), "keys": keys, "packages": images}


# --- rootfs and OCI archive ----------------------------------------------------------------------

def _rootfs(comp: str, debs: list[Path], root: Path) -> None:
    for deb in debs:
        run(["dpkg-deb", "-x", str(deb), str(root)])
    for rel in PRUNE:
        p = root / rel
        if p.is_symlink() or p.is_file():
            p.unlink()
        elif p.is_dir():
            remove_tree(p)
    for d, mode in (("tmp", 0o1777), ("run", 0o755), ("etc", 0o755), ("var/tmp", 0o1777)):
        (root / d).mkdir(parents=True, exist_ok=True)
        os.chmod(root / d, mode)
    (root / "etc/passwd").write_text("\n".join(PASSWD[comp]) + "\n")
    (root / "etc/group").write_text("\n".join(GROUP[comp]) + "\n")
    (root / "etc/os-release").write_text(
        f'PRETTY_NAME="gpu-fleet lab stand-in for Slurm-web {SLURM_WEB_VERSION} ({comp}; TEST DOUBLE)"\n'
        "ID=gpu-fleet-lab\n")
    if comp == "agent":
        app = root / "usr/lib/slurm-web"
        app.mkdir(parents=True, exist_ok=True)
        (app / "agent.py").write_bytes((HERE / "agent.py").read_bytes())
        (root / "etc/slurm-web").mkdir(mode=0o700, exist_ok=True)
        os.chmod(root / "etc/slurm-web", 0o700)
        py = root / "usr/bin/python3"
        if not (py.is_symlink() or py.exists()):
            raise LabError("web images: the agent's root has no /usr/bin/python3")
    else:
        www = root / "usr/share/slurm-web"
        www.mkdir(parents=True, exist_ok=True)
        for name in ("index.html", "app.js"):
            (www / name).write_bytes((HERE / name).read_bytes())
        (root / "etc/nginx/nginx.conf").write_bytes((HERE / "nginx.conf").read_bytes())


def _owner(comp: str, name: str) -> tuple[int, int]:
    if comp == "agent" and (name == "etc/slurm-web" or name.startswith("etc/slurm-web/")):
        return AGENT_UID, AGENT_UID
    return 0, 0


def layer_tar(comp: str, root: Path, out) -> None:
    """The root as one deterministic tar (sorted names, fixed mtimes, numeric owners)."""
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        paths = []
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            for n in sorted(dirnames + filenames):
                paths.append(Path(dirpath) / n)
        for p in sorted(paths, key=lambda x: x.relative_to(root).as_posix()):
            name = p.relative_to(root).as_posix()
            _add(tar, p, name, *_owner(comp, name))


def _add(tar: tarfile.TarFile, path: Path, name: str, uid: int = 0, gid: int = 0) -> None:
    """One entry, the same whenever the file is: numeric owner, no names, a fixed mtime."""
    ti = tar.gettarinfo(str(path), arcname=name)
    ti.uid, ti.gid, ti.uname, ti.gname, ti.mtime = uid, gid, "", "", EPOCH
    if ti.isreg():
        with open(path, "rb") as f:
            tar.addfile(ti, f)
    else:
        tar.addfile(ti)


def _blob(blobs: Path, data: bytes) -> tuple[str, int]:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    (blobs / digest.split(":")[1]).write_bytes(data)
    return digest, len(data)


def oci_archive(comp: str, root: Path, dest: Path, key: str) -> dict:
    spec = IMAGES[comp]
    raw = io.BytesIO()
    layer_tar(comp, root, raw)
    diff_id = "sha256:" + hashlib.sha256(raw.getvalue()).hexdigest()
    gz = io.BytesIO()
    with gzip.GzipFile(fileobj=gz, mode="wb", mtime=0, filename="", compresslevel=6) as g:
        g.write(raw.getvalue())
    with tempfile.TemporaryDirectory(dir=dest.parent) as td:
        lay = Path(td)
        blobs = lay / "blobs" / "sha256"
        blobs.mkdir(parents=True)
        layer_digest, layer_size = _blob(blobs, gz.getvalue())
        labels = {
            "org.opencontainers.image.title": f"slurm-web-{comp}",
            "org.opencontainers.image.version": f"{SLURM_WEB_VERSION}-lab",
            "org.opencontainers.image.description":
                f"TEST DOUBLE: the gpu-fleet lab's stand-in for Slurm-web {SLURM_WEB_VERSION} ({comp})",
            "io.gpu-fleet.lab.build-key": key,
        }
        config = {
            "created": CREATED, "architecture": "amd64", "os": "linux",
            "config": {"User": spec["user"], "Env": spec["env"], "Entrypoint": spec["entrypoint"],
                       "WorkingDir": "/", "ExposedPorts": {f"{spec['port']}/tcp": {}}, "Labels": labels},
            "rootfs": {"type": "layers", "diff_ids": [diff_id]},
            "history": [{"created": CREATED, "created_by": "lab/web_images/build.py (Debian packages)"}],
        }
        cfg_digest, cfg_size = _blob(blobs, json.dumps(config, sort_keys=True).encode())
        manifest = {
            "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                       "digest": cfg_digest, "size": cfg_size},
            "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                        "digest": layer_digest, "size": layer_size}],
        }
        man_digest, man_size = _blob(blobs, json.dumps(manifest, sort_keys=True).encode())
        (lay / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
        (lay / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [
            {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": man_digest,
             "size": man_size, "annotations": {"org.opencontainers.image.ref.name": tag(key)}}]}))
        with tarfile.open(dest, "w", format=tarfile.PAX_FORMAT) as tar:
            for p in sorted(lay.rglob("*")):
                _add(tar, p, p.relative_to(lay).as_posix())
    return {"manifest_digest": man_digest, "layer_digest": layer_digest, "diff_id": diff_id,
            "layer_bytes": layer_size, "rootfs_bytes": len(raw.getvalue())}


def tag(key: str) -> str:
    return f"{SLURM_WEB_VERSION}-lab-{key}"


# --- the cached build ---------------------------------------------------------------------------

def ensure(repo_dir: Path | None = None) -> dict:
    """The cached build for the current inputs (built if missing): {"key", "dir", "images":
    {comp: {"archive", "repository", "tag", "manifest_digest", ...}}}."""
    repo_dir = repo_dir or lab_repo.ensure_repo()
    p = plan(repo_dir)
    key = p["key"]
    cache = cache_dir()
    out = cache / f"web-images-{key}"
    ok = cache / f"web-images-{key}.ok"
    if not (ok.exists() and (out / "build.json").exists()):
        with flock(cache / ".web-images.lock", "web images"):
            if not (ok.exists() and (out / "build.json").exists()):
                _build(p, repo_dir, out)
                ok.write_text(f"{key}\n")
    info = json.loads((out / "build.json").read_text())
    for comp, img in info["images"].items():
        img["archive"] = str(out / f"{comp}.oci.tar")
    info["dir"] = str(out)
    return info


def _build(p: dict, repo_dir: Path, out: Path) -> None:
    start = time.monotonic()
    key = p["key"]
    tmp = out.with_name(f".{out.name}.tmp")
    remove_tree(tmp)
    tmp.mkdir(parents=True)
    info = {"key": key, "images": {}}
    for comp, pkgs in p["packages"].items():
        t0 = time.monotonic()
        root = tmp / f"{comp}-root"
        root.mkdir()
        _rootfs(comp, [repo_dir / fn for _, _, _, fn in pkgs], root)
        res = oci_archive(comp, root, tmp / f"{comp}.oci.tar", p["keys"][comp])
        remove_tree(root)
        res.update(repository=IMAGES[comp]["repository"], tag=tag(p["keys"][comp]),
                   packages=[f"{n}={v}" for n, v, _, _ in pkgs])
        info["images"][comp] = res
        log(f"  built the {comp} image: {len(pkgs)} packages, {res['rootfs_bytes'] / 2**20:.1f} MiB "
            f"({res['layer_bytes'] / 2**20:.1f} MiB compressed) in {time.monotonic() - t0:.1f} s")
    (tmp / "build.json").write_text(json.dumps(info, indent=1) + "\n")
    remove_tree(out)
    os.rename(tmp, out)
    log(f"web images {key} built in {time.monotonic() - start:.1f} s (cached in {out})")
