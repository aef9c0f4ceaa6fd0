"""Benchmark: 1 GiB sequential write and read through a lab node's NFS mount of the data store,
against the same on the storage host's own dataset.

Deploys the lab stack with the storage layer on (ganesha on zfs-fuse; the nodes' client is the
`nfsfuse` TEST DOUBLE of the kernel NFS client), writes 1 GiB with `dd conv=fsync` and reads it
back, on the storage host under /srv/ai/data and on node1 under /mnt/data (the read on node2,
whose page cache has not seen the file; the machine's page cache dropped before each read),
prints MB/s and the ratio client/local, and destroys
the stack (the datasets stay). The seed's real fleet measured 803 MB/s write and 1.5 GB/s read
on one canary node over kernel NFS. Needs the lab: `python -m lab up`.

    .venv/bin/python bench/storage_throughput.py [--mib 1024]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.lab.labhosts import ssh  # noqa: E402
from tests.lab.test_storage import set_storage  # noqa: E402
from tests.pulumi_cli import PulumiProject  # noqa: E402

# $1 file, $2 MiB: milliseconds to write it (fsync'd)
_DD = r"""
set -eu
t0=$(date +%s%N); dd if=/dev/zero of="$1" bs=1M count="$2" conv=fsync status=none; t1=$(date +%s%N)
echo $(( (t1 - t0) / 1000000 ))
"""
# $1 file: milliseconds to read it
_READ = r"""
set -eu
t0=$(date +%s%N); dd if="$1" of=/dev/null bs=1M status=none; t1=$(date +%s%N)
echo $(( (t1 - t0) / 1000000 ))
"""


def timed(host: str, script: str, *args: str) -> float:
    quoted = " ".join(f"'{a}'" for a in args)
    out = ssh(host, f"sh -c {_q(script)} sh {quoted}").stdout.split()
    return int(out[-1]) / 1000


def drop_caches() -> None:
    """The lab's hosts share this machine's kernel: drop its page cache so a read comes from
    ZFS (zfs-fuse's own cache in user space stays), not from the writer's pages."""
    Path("/proc/sys/vm/drop_caches").write_text("3\n")


def _q(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=1024)
    mib = ap.parse_args().mib
    with tempfile.TemporaryDirectory() as tmp:
        proj = PulumiProject.copy_of_repo(Path(tmp))
        proj.init_stack("lab")
        set_storage(proj)
        try:
            proj.run("up", "--yes", "--stack", "lab", "--skip-preview", timeout=1200)
            local = "/srv/ai/data/jobs/bench.local"
            lw = timed("storage", _DD, local, str(mib))
            drop_caches()
            lr = timed("storage", _READ, local)
            ssh("storage", f"rm -f {local}")
            remote = "/mnt/data/jobs/bench.nfs"
            cw = timed("node1", _DD, remote, str(mib))
            drop_caches()
            cr = timed("node2", _READ, remote)
            ssh("node1", f"rm -f {remote}")
        finally:
            proj.run("destroy", "--yes", "--stack", "lab", check=False, timeout=900)
    rate = lambda s: mib * 1.048576 / s  # noqa: E731  (MB/s)
    print(f"{mib} MiB sequential, MB/s (seconds)")
    print(f"{'':28} {'write':>16} {'read':>16}")
    print(f"{'storage host, its dataset':28} {rate(lw):9.0f} ({lw:5.2f}) {rate(lr):9.0f} ({lr:5.2f})")
    print(f"{'node mount (nfsfuse, NFSv3)':28} {rate(cw):9.0f} ({cw:5.2f}) {rate(cr):9.0f} ({cr:5.2f})")
    print(f"{'ratio node / storage':28} {rate(cw) / rate(lw):16.2f} {rate(cr) / rate(lr):16.2f}")
    print(f"{'seed fleet (kernel NFS)':28} {803:9.0f}          {1500:9.0f}")


if __name__ == "__main__":
    main()
