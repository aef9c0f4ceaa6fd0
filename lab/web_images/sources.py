"""What the Slurm-web images are built from, each fetched or built once and cached machine-wide
by its inputs: the vendored source tarball (hash verified first), the pinned wheels of each
component's Python dependencies (PyPI, `--require-hashes`) and the frontend built from its lock
file (`npm ci`, then upstream's own `npm run build`: vue-tsc and Vite).

The tarball is a `git archive` of the upstream tag without its `assets/` folder, so the five files
of `frontend/public` that link into it (the logos and the favicon) are broken links; the build puts
plain placeholder images of the right format in their place, made here, so Vite can resolve them.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import struct
import tarfile
import time
import zlib
from pathlib import Path

from ..common import ROOT, LabError, cache_dir, flock, log, remove_tree, run, sha16

HERE = Path(__file__).resolve().parent
VERSION = "6.0.0"
TARBALL = f"slurm-web-{VERSION}.tar.gz"
TARBALL_SHA256 = "6869b8341774f4fc9138084a19bdc2111c93f2166fd75dae27e9914e04032c61"
#: where the project's vendored sources are: beside the checkout, or where the variable says
VENDOR_DIRS = [Path(os.environ["GPU_FLEET_VENDOR_DIR"])] if os.environ.get("GPU_FLEET_VENDOR_DIR") else []
VENDOR_DIRS.append(ROOT.parent / "shared" / "vendor")
#: both components': the `slurm-web` command imports the agent's and the gateway's modules
REQUIREMENTS = HERE / "requirements.txt"
#: the images' Python (Debian 12's python3): the wheels must fit it
WHEEL_TARGET = ["--python-version", "3.11", "--implementation", "cp", "--abi", "cp311", "--abi", "none",
                "--platform", "manylinux_2_28_x86_64", "--platform", "manylinux2014_x86_64",
                "--platform", "any"]


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def tarball() -> Path:
    """The verified source tarball. Found beside the checkout (or in $GPU_FLEET_VENDOR_DIR) it is
    also kept in the machine-wide cache, so a checkout elsewhere on this machine finds it too."""
    kept = cache_dir() / "vendor" / f"{TARBALL_SHA256}.tar.gz"
    for cand in [*(d / TARBALL for d in VENDOR_DIRS), kept]:
        if not cand.is_file():
            continue
        got = sha256_file(cand)
        if got != TARBALL_SHA256:
            raise LabError(f"web images: {cand} has SHA-256 {got}, not {TARBALL_SHA256} "
                           "(shared/vendor/README.md): refusing to build from it")
        if cand != kept:
            kept.parent.mkdir(parents=True, exist_ok=True)
            tmp = kept.with_suffix(".tmp")
            shutil.copyfile(cand, tmp)
            os.replace(tmp, kept)
        return kept
    where = ", ".join(str(d) for d in VENDOR_DIRS)
    raise LabError(f"web images: {TARBALL} is in none of {where} nor the cache ({kept}); put the vendored "
                   "tarball there (or set GPU_FLEET_VENDOR_DIR)")


def unpack(src: Path, dest: Path) -> Path:
    """The tarball's tree under dest (its one top directory), extracted with tarfile's `data`
    filter (no absolute names, no links out of the tree kept as files)."""
    remove_tree(dest)
    dest.mkdir(parents=True)
    with tarfile.open(src) as tar:
        tar.extractall(dest, filter="data")
    [top] = [p for p in dest.iterdir() if p.is_dir()]
    return top


def source_tree() -> Path:
    """The verified tarball unpacked once into the cache (read by the builds, never written)."""
    out = cache_dir() / f"slurm-web-src-{TARBALL_SHA256[:16]}"
    if not (out / ".ok").exists():
        with flock(cache_dir() / ".slurm-web-src.lock", "Slurm-web source"):
            if not (out / ".ok").exists():
                top = unpack(tarball(), out / "tree")
                (out / ".ok").write_text(top.name + "\n")
    return out / "tree" / (out / ".ok").read_text().strip()


def requirements_hash() -> str:
    return hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()


def wheels() -> list[Path]:
    """The pinned wheels, downloaded once into the machine-wide wheel cache (pip checks every
    file against the requirements' hashes)."""
    req = REQUIREMENTS
    into = cache_dir() / "slurm-web-wheels" / sha16("wheels-v1", requirements_hash())
    ok = into / ".ok"
    if not ok.exists():
        with flock(cache_dir() / ".slurm-web-wheels.lock", "Slurm-web wheels"):
            if not ok.exists():
                remove_tree(into)
                into.mkdir(parents=True)
                t0 = time.monotonic()
                run([str(ROOT / ".venv/bin/pip"), "download", "-q", "--no-deps", "--only-binary=:all:",
                     "--require-hashes", *WHEEL_TARGET, "-d", str(into), "-r", str(req)], timeout=900)
                ok.write_text(requirements_hash() + "\n")
                log(f"  downloaded Slurm-web's {len(list(into.glob('*.whl')))} pinned wheels "
                    f"in {time.monotonic() - t0:.1f} s")
    return sorted(into.glob("*.whl"))


# --- the frontend ---------------------------------------------------------------------------------

def _png(width: int, height: int, rgb: tuple[int, int, int]) -> bytes:
    """A plain one-colour RGB PNG (the placeholders; deterministic bytes)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    rows = b"".join(b"\0" + bytes(rgb) * width for _ in range(height))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows, 9)) + chunk(b"IEND", b""))


def _ico(png: bytes, size: int) -> bytes:
    """An ICO holding one PNG image (as browsers and Vite take a favicon)."""
    return (struct.pack("<HHH", 0, 1, 1)
            + struct.pack("<BBBBHHII", size, size, 0, 0, 1, 32, len(png), 22) + png)


#: frontend/public's links into upstream's assets/ (not in the tarball) -> placeholder bytes
PLACEHOLDERS = {
    "public/logo/slurm-web_logo.png": _png(160, 40, (255, 255, 255)),
    "public/logo/slurm-web_logo_dark.png": _png(160, 40, (32, 32, 48)),
    "public/logo/slurm-web_horizontal.png": _png(240, 40, (39, 86, 160)),
    "public/logo/slurm-web_horizontal_dark.png": _png(240, 40, (32, 32, 48)),
    "public/favicon.ico": _ico(_png(32, 32, (39, 86, 160)), 32),
}


def frontend_key(frontend: Path) -> str:
    """The frontend's inputs: every file's name and bytes (links by target), the placeholders,
    the Node and npm versions that build it."""
    h = hashlib.sha256()
    for p in sorted(frontend.rglob("*")):
        rel = p.relative_to(frontend).as_posix()
        h.update(rel.encode() + b"\0")
        if p.is_symlink():
            h.update(b"-> " + os.readlink(p).encode())
        elif p.is_file():
            h.update(p.read_bytes())
        h.update(b"\0")
    tools = [run([t, "--version"]).stdout.strip() for t in ("node", "npm")]
    return sha16("frontend-v1", h.hexdigest(), sorted(PLACEHOLDERS.items()), tools)


def frontend(src: Path) -> Path:
    """The built UI (`dist/`), cached by frontend_key. npm's own cache is machine-wide too."""
    fe = src / "frontend"
    key = frontend_key(fe)
    out = cache_dir() / f"slurm-web-frontend-{key}"
    if (out / ".ok").exists():
        return out / "dist"
    with flock(cache_dir() / ".slurm-web-frontend.lock", "Slurm-web frontend"):
        if (out / ".ok").exists():
            return out / "dist"
        t0 = time.monotonic()
        work = out.with_name(f".{out.name}.tmp")
        remove_tree(work)
        shutil.copytree(fe, work, symlinks=True)
        for rel, data in PLACEHOLDERS.items():
            p = work / rel
            if p.is_symlink() and not p.exists():
                p.unlink()
                p.write_bytes(data)
        broken = [str(p.relative_to(work)) for p in work.rglob("*") if p.is_symlink() and not p.exists()
                  and not p.relative_to(work).as_posix().startswith("tests/")]
        if broken:
            raise LabError(f"web images: the frontend still links outside the tarball: {', '.join(broken)}")
        env = {**os.environ, "npm_config_cache": str(cache_dir() / "npm"), "npm_config_update_notifier": "false",
               "CI": "1"}
        run(["npm", "ci", "--no-audit", "--no-fund"], cwd=work, env=env, timeout=1200)
        run(["npm", "run", "build"], cwd=work, env=env, timeout=1200)
        if not (work / "dist" / "index.html").is_file():
            raise LabError("web images: npm run build wrote no dist/index.html")
        remove_tree(out)
        out.mkdir(parents=True)
        os.rename(work / "dist", out / "dist")
        remove_tree(work)
        (out / ".ok").write_text(key + "\n")
        log(f"  built the Slurm-web frontend (npm ci, npm run build) in {time.monotonic() - t0:.1f} s")
    return out / "dist"
