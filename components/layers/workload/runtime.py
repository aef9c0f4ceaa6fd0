"""The workload runtime: one archive (runtime.tar.zst) a job verifies by SHA-256 and unpacks
node-local before it runs anything (the seed's frozen runtime, R0-R1).

It holds the pinned tools by path inside it (`bin/ffmpeg`: a static build, so a node needs no
library of its own and the batch PATH is never read), the scripts the jobs run (`lib/`: the
gates, the stage and assembly steps, the render command), `thresholds.json` (the gates' bounds)
and `manifest.json` (each tool's path, SHA-256 and version). `SHA256SUMS` lists every other file;
the stage step checks it after unpacking (onhost/stage.sh).

The archive is deterministic: the same inputs give the same bytes (sorted entries, owner 0,
mtime 0, one zstd thread), so its SHA-256 is a key a cache and a stack can pin.

    python -m components.layers.workload.runtime OUT.tar.zst --ffmpeg PATH --thresholds FILE
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Mapping, Optional, Sequence

from ...errors import FleetError

ONHOST = Path(__file__).with_name("onhost")
#: what every runtime carries from onhost/, under lib/ (render.sh: the lab's STAND-IN for the
#: video model, unless the stack names its own render command)
SCRIPTS = ("gates.py", "stage.sh", "preflight.sh", "assemble.sh", "contact_sheet.sh", "render.sh", "qa.sh",
           "publish.sh")
#: the STAND-IN's name in every runtime, whichever render command lib/render.sh is
STANDIN = "standin-render.sh"
#: zstd's level: the static ffmpeg (80 MB) packs to about a third
ZSTD_LEVEL = 12


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def tool_version(path: Path) -> str:
    """The first line of `ffmpeg -version` (the pinned build's own words)."""
    try:
        p = subprocess.run([str(path), "-hide_banner", "-version"], capture_output=True, text=True, timeout=30)
    except OSError as e:
        raise FleetError(f"workload runtime: {path} cannot run: {e}") from None
    first = (p.stdout.splitlines() or [""])[0].strip()
    if p.returncode != 0 or not first:
        raise FleetError(f"workload runtime: {path} -version failed (rc {p.returncode}): {p.stderr.strip()[-300:]}")
    return first


def contents(ffmpeg: Path, thresholds: Mapping[str, float], extra: Mapping[str, Path]) -> dict[str, tuple[bytes, int]]:
    """Archive path -> (bytes, mode), the manifest and SHA256SUMS included."""
    files: dict[str, tuple[bytes, int]] = {"bin/ffmpeg": (ffmpeg.read_bytes(), 0o755)}
    for name in SCRIPTS:
        files[f"lib/{name}"] = ((ONHOST / name).read_bytes(), 0o755)
    # the stand-in under its own name too, so a stack's render command may wrap it
    files[f"lib/{STANDIN}"] = files["lib/render.sh"]
    for name, path in sorted(extra.items()):
        files[f"lib/{name}"] = (path.read_bytes(), 0o755)
    files["thresholds.json"] = (json.dumps(dict(thresholds), indent=1, sort_keys=True).encode() + b"\n", 0o644)
    manifest = {"format": 1, "tools": {"ffmpeg": {"path": "bin/ffmpeg", "sha256": sha256_bytes(files["bin/ffmpeg"][0]),
                                                  "version": tool_version(ffmpeg)}}}
    files["manifest.json"] = (json.dumps(manifest, indent=1, sort_keys=True).encode() + b"\n", 0o644)
    sums = "".join(f"{sha256_bytes(data)}  {name}\n" for name, (data, _) in sorted(files.items()))
    files["SHA256SUMS"] = (sums.encode(), 0o644)
    return files


def pack(out: Path, ffmpeg: Path, thresholds: Mapping[str, float],
         extra: Optional[Mapping[str, Path]] = None) -> str:
    """Write the archive to `out` (atomically); its SHA-256."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for d in ("bin", "lib"):
            info = tarfile.TarInfo(d)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, 0
            tar.addfile(info)
        for name, (data, mode) in sorted(contents(ffmpeg, thresholds, extra or {}).items()):
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), mode, 0
            tar.addfile(info, io.BytesIO(data))
    tmp = out.with_name(f".{out.name}.tmp")
    try:
        subprocess.run(["zstd", "-q", f"-{ZSTD_LEVEL}", "-T1", "-f", "-o", str(tmp)], input=buf.getvalue(),
                       check=True, capture_output=True, timeout=600)
    except (OSError, subprocess.CalledProcessError) as e:
        raise FleetError(f"workload runtime: zstd could not write {tmp}: {e}") from None
    tmp.replace(out)
    return sha256_bytes(out.read_bytes())


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m components.layers.workload.runtime", description=__doc__.split("\n")[0])
    p.add_argument("out", type=Path)
    p.add_argument("--ffmpeg", type=Path, required=True, help="a static ffmpeg build")
    p.add_argument("--thresholds", type=Path, required=True, help="the gates' bounds (JSON)")
    args = p.parse_args(argv)
    try:
        digest = pack(args.out, args.ffmpeg, json.loads(args.thresholds.read_text()))
    except (OSError, ValueError, FleetError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"{digest}  {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
