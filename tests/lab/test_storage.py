"""The storage layer on the lab: zfs-fuse datasets (real ZFS code in user space), exports
by the real nfs-ganesha, every node mounting through the `nfsfuse` TEST DOUBLE of the
kernel NFS client (the lab's kernel has none; the double speaks NFSv3 to the real server,
so read-only and root_squash are the server's doing), the canary using the store, the
seed's failure (pool not imported) failing closed, and a rollback that keeps the data."""

from __future__ import annotations


import pytest
import yaml

from tests.pulumi_cli import PulumiProject

from .labhosts import repo_version, ssh
from .test_slurm_cluster import NODES, as_user

SERVER_PACKAGES = ("nfs-ganesha", "nfs-ganesha-vfs")
CLIENT_PACKAGES = ("fuse", "python3-fusepy", "libnfs13")
MODELS, DATA = "/mnt/models", "/mnt/data"


def storage_version(package: str) -> str:
    out = ssh("storage", f"apt-get -q update >/dev/null 2>&1; apt-cache policy {package}").stdout
    return next(line.split()[1] for line in out.splitlines() if "Candidate:" in line)


def set_storage(proj: PulumiProject) -> None:
    cfg = {"enabled": True, "clients": "10.213.57.0/24", "server": "ganesha", "client": "fuse-libnfs",
           "server_packages": {p: storage_version(p) for p in SERVER_PACKAGES},
           "client_packages": {p: repo_version(p) for p in CLIENT_PACKAGES}}
    path = proj.dir / "stacks" / "Pulumi.lab.yaml"
    raw = yaml.safe_load(path.read_text())
    raw["config"]["gpu-fleet:storage"] = cfg
    path.write_text(yaml.safe_dump(raw, sort_keys=False))


def drop_datasets(before: str = "") -> None:
    """After a destroy (which keeps the data): the stores gone, for the next run (bench/workload.py).
    `before`: shell run first (with the pool imported)."""
    # zfs-fuse may still hold a dataset busy for a moment after its export stopped: try again
    # until both are gone (a dataset left behind unmounted fails the next module's first up)
    ssh("storage", f"zpool import -d /var/lib/zfs-vdev ai 2>/dev/null; {before}"
                   "for i in $(seq 30); do zfs destroy -r ai/models 2>/dev/null; zfs destroy -r ai/data 2>/dev/null; "
                   "zfs list -H -o name | grep -qE '^ai/(models|data)$' || exit 0; sleep 1; done; exit 1",
        check=False, timeout=180)



@pytest.fixture(scope="module")
def stored(lab, deployed, tmp_path_factory):
    """The deployed fleet with the storage layer on."""
    proj = deployed.project(tmp_path_factory.mktemp("storage"))
    set_storage(proj)
    proj.up(timeout=1200)
    return proj


def test_datasets_are_mounted_as_themselves_with_their_duties(stored):
    out = ssh("storage", "zfs get -H -o name,property,value readonly,sharenfs,mounted ai/models ai/data; "
                         "findmnt -n -o TARGET,SOURCE -T /srv/ai/models; findmnt -n -o TARGET,SOURCE -T /srv/ai/data/jobs"
              ).stdout
    assert "ai/models\treadonly\ton" in out and "ai/data\treadonly\toff" in out
    assert "ai/models\tsharenfs\toff" in out and "ai/data\tsharenfs\toff" in out
    assert "ai/models\tmounted\tyes" in out and "ai/data\tmounted\tyes" in out
    flat = " ".join(out.split())
    assert "/srv/ai/models ai/models" in flat and "/srv/ai/data ai/data" in flat, out


def test_ganesha_exports_exactly_the_two_stores_to_the_lab_network(stored):
    exported = stored.outputs()["storage"]["exported"]
    assert exported["models"] == {"path": "/srv/ai/models", "pseudo": "/models", "clients": ["10.213.57.0/24"]}
    assert exported["data"] == {"path": "/srv/ai/data", "pseudo": "/data", "clients": ["10.213.57.0/24"]}


def test_every_node_mounts_both_and_passes_the_client_check(stored):
    out = stored.outputs()["storage"]
    assert out["mountedOn"] == NODES and out["refused"] == {}
    for n in NODES:
        m = ssh(n, f"findmnt -n -o SOURCE,FSTYPE,OPTIONS --mountpoint {MODELS}").stdout.split()
        assert m[0] == "10.213.57.10:/models" and m[1] == "fuse.nfsfuse" and "ro" in m[2].split(","), m
        d = ssh(n, f"findmnt -n -o SOURCE,OPTIONS --mountpoint {DATA}").stdout.split()
        assert d[0] == "10.213.57.10:/data" and "rw" in d[1].split(","), d


def test_read_only_is_the_servers_doing(stored):
    """With models mounted read-write by the double, the write still fails: NFS3ERR_ROFS."""
    p = ssh("node2", "mkdir -p /tmp/rw-models && mount -t fuse.nfsfuse 10.213.57.10:/models /tmp/rw-models "
                     "-o rw,allow_other && { echo x > /tmp/rw-models/probe; echo rc=$?; }; "
                     "umount /tmp/rw-models", check=False)
    assert "Read-only file system" in p.stdout + p.stderr and "rc=0" not in p.stdout


def test_the_canary_reads_the_marker_writes_its_job_root_and_cannot_write_models(stored):
    acc = stored.outputs()["acceptance"]
    assert acc["failed"] == {} and acc["accepted"], acc["failed"]
    for node, r in acc["nodes"].items():  # every node's job: marker read, job root written, EROFS
        assert r["checks"]["models_read_only"] == {"passed": True, "seen": "write into the model store: EROFS"}, node
        assert r["checks"]["model_marker"]["passed"] and r["checks"]["job_root"]["passed"], (node, r["checks"])
    out = ssh("ctl", as_user(f"srun -N1 -p lab -w node1 -t 1 sh -c 'cat {MODELS}/.gpu-fleet-store; "
                             f"echo x > {MODELS}/x 2>&1 || echo refused; id -u > {DATA}/jobs/u.$$; "
                             f"stat -c %u {DATA}/jobs/u.$$; rm {DATA}/jobs/u.$$'")).stdout
    assert "gpu-fleet store dataset=ai/models guid=" in out and "refused" in out
    assert out.strip().splitlines()[-1] == "64200"  # the canary user's own uid, not squashed


def test_a_second_up_changes_nothing(stored):
    stored.run("preview", "--stack", "lab", "--expect-no-changes")


def test_a_dataset_unmounted_by_hand_is_drift_and_not_exported_until_mounted(stored):
    ssh("storage", "systemctl stop nfs-ganesha && zfs unmount ai/models")
    try:
        refresh = stored.refresh(timeout=600).stdout
        assert "storage-datasets" in refresh, refresh[-2000:]  # the drift is recorded
        p = stored.run("up", "--yes", "--stack", "lab", check=False, timeout=900)
        text = p.stdout + p.stderr
        assert p.returncode != 0
        assert "dataset ai/models is not mounted (zfs get mounted: no)" in text, text[-3000:]
        assert ssh("storage", "systemctl is-active nfs-ganesha", check=False).stdout.strip() != "active"
        # ganesha's own start refuses too (its ExecStartPre), whatever starts it
        start = ssh("storage", "systemctl start nfs-ganesha", check=False)
        assert start.returncode != 0
        assert "ai/models is not mounted" in ssh("storage", "journalctl -u nfs-ganesha -n 20 --no-pager").stdout
    finally:
        ssh("storage", "zfs mount -o ro ai/models")
    stored.up(timeout=900)
    assert stored.outputs()["storage"]["mountedOn"] == NODES
    for n in NODES:
        assert ssh(n, f"cat {MODELS}/.gpu-fleet-store").stdout.startswith("gpu-fleet store dataset=ai/models")


def test_pool_not_imported_fails_closed_and_data_survives_a_rollback(stored):
    """The seed's failure: the pool is gone, /srv/ai/data an empty directory on the root disk."""
    ssh("storage", "echo 'seed bytes' > /srv/ai/data/inputs/keep.txt; sha256sum /srv/ai/data/inputs/keep.txt")
    ssh("storage", "systemctl stop nfs-ganesha; zpool export ai; test ! -e /srv/ai/data/inputs/keep.txt")
    try:
        p = stored.run("up", "--yes", "--stack", "lab", "--refresh", check=False, timeout=900)
        text = p.stdout + p.stderr
        assert p.returncode != 0
        assert "pool 'ai'" in text or "pool ai" in text, text[-3000:]
        # ganesha did not come back exporting the empty directories
        assert ssh("storage", "systemctl is-active nfs-ganesha", check=False).stdout.strip() != "active"
    finally:
        ssh("storage", "zpool import -d /var/lib/zfs-vdev ai")
    stored.up("--refresh", timeout=900)
    assert ssh("storage", "cat /srv/ai/data/inputs/keep.txt").stdout == "seed bytes\n"
    # the stores are new mounts: every node mounted them again (no stale handles)
    for n in NODES:
        assert ssh(n, f"cat {DATA}/inputs/keep.txt").stdout == "seed bytes\n"
    stored.run("destroy", "--yes", "--stack", "lab", timeout=900)
    assert ssh("storage", "zfs list -H -o name ai/data && cat /srv/ai/data/inputs/keep.txt").stdout \
        .endswith("seed bytes\n")
    for n in NODES:
        assert ssh(n, f"findmnt --mountpoint {DATA}", check=False).returncode != 0
    set_storage(stored)
    stored.up(timeout=1200)
    assert ssh("node3", f"cat {DATA}/inputs/keep.txt").stdout == "seed bytes\n"
