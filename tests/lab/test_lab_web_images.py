"""The lab's Slurm-web images (issues 15, 38, lab/web_images): `python -m lab web-images` builds
Slurm-web 6.0.0's agent and gateway from the vendored source and the lab's Debian packages, sets up Debian's
docker-registry on the storage host (plain HTTP, :5000, a systemd unit) and pushes both there
from the storage host; the registry serves both recorded digests (to this machine and, by the
name storage:5000, to the controller); a second run changes nothing; a registry found stopped
and disabled is set up again with the same digests; the agent image's /etc/slurm-web belongs to
uid/gid 999, mode 0700 (the seed's trap); each image holds Slurm-web 6.0.0 and upstream's definitions,
the gateway the built frontend; all read from the registry's own blobs."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
import time
import urllib.request

import pytest

from .conftest import STATE, lab_command

ACCEPT = "application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json"
REPOS = {"agent": "gpu-fleet/slurm-web-agent", "gateway": "gpu-fleet/slurm-web-gateway"}
#: what a run that does nothing leaves alone on the storage host
SNAPSHOT = ("find /var/lib/docker-registry -printf '%P %s\\n' | sort | sha256sum; "
            "systemctl show -p ActiveEnterTimestampMonotonic -p MainPID docker-registry.service; "
            "ls -d /var/tmp/lab-web-images.* /var/lib/containers 2>/dev/null || true")


def run_web_images() -> tuple[dict, str, float]:
    t0 = time.monotonic()
    p = lab_command("web-images", "--json", timeout=600)
    took = time.monotonic() - t0
    return json.loads(p.stdout[p.stdout.index("\n{") + 1:]), p.stdout, took


def get(url: str, accept: str = ACCEPT) -> tuple[int, dict, bytes]:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(urllib.request.Request(url, headers={"Accept": accept}), timeout=30) as r:
        return r.status, dict(r.headers), r.read()


@pytest.fixture(scope="module")
def images(lab):
    doc, out, took = run_web_images()
    print(f"\npython -m lab web-images: {took:.1f} s\n{out}")
    storage = lab.host("storage")["address"]
    return {"doc": doc, "registry": f"http://{storage}:5000", "lab": lab}


def digest_of(ref: str) -> str:
    return ref.split("@", 1)[1]


def test_record_names_the_registry_and_both_images_by_digest(images):
    doc = images["doc"]
    assert doc["registry"] == "storage:5000"
    for comp, repo in REPOS.items():
        name, _, digest = doc[comp].partition("@")
        assert name == f"storage:5000/{repo}"
        assert digest.startswith("sha256:") and len(digest) == 71
    assert json.loads((STATE / "web-images.json").read_text()) == doc


def test_registry_unit_and_both_digests_served(images):
    lab = images["lab"]
    st = lab.ssh("storage", "systemctl is-active docker-registry.service; "
                            "systemctl is-enabled docker-registry.service").stdout.split()
    assert st == ["active", "enabled"]
    for comp, repo in REPOS.items():
        digest = digest_of(images["doc"][comp])
        code, headers, body = get(f"{images['registry']}/v2/{repo}/manifests/{digest}")
        assert code == 200 and headers["Docker-Content-Digest"] == digest
        assert "sha256:" + hashlib.sha256(body).hexdigest() == digest
    # the controller reaches it by the name the record gives (read-only: one GET)
    digest = digest_of(images["doc"]["agent"])
    out = lab.ssh("ctl", "python3 -c 'import sys, urllib.request as u; r = u.urlopen(u.Request("
                         f"\"http://storage:5000/v2/{REPOS['agent']}/manifests/{digest}\", "
                         f"headers={{\"Accept\": \"{ACCEPT}\"}}), timeout=10); "
                         "print(r.headers[\"Docker-Content-Digest\"])'").stdout.strip()
    assert out == digest


def test_second_run_changes_nothing(images):
    lab = images["lab"]
    before = lab.ssh("storage", SNAPSHOT).stdout
    doc, out, took = run_web_images()
    print(f"\nsecond run: {took:.1f} s")
    assert doc == images["doc"]
    assert "already serves both" in out and "pushed" not in out
    assert lab.ssh("storage", SNAPSHOT).stdout == before
    assert "/var/tmp/lab-web-images." not in before


def test_agent_image_trap_owner_and_config(images):
    for comp, repo in REPOS.items():
        _, _, man = get(f"{images['registry']}/v2/{repo}/manifests/{digest_of(images['doc'][comp])}")
        manifest = json.loads(man)
        _, _, cfg = get(f"{images['registry']}/v2/{repo}/blobs/{manifest['config']['digest']}", "*/*")
        config = json.loads(cfg)["config"]
        [layer] = manifest["layers"]
        _, _, blob = get(f"{images['registry']}/v2/{repo}/blobs/{layer['digest']}", "*/*")
        raw = gzip.decompress(blob)
        assert len(raw) < 400 * 2**20, f"{comp} image is {len(raw) / 2**20:.1f} MiB"
        tar = tarfile.open(fileobj=io.BytesIO(raw))
        members = {m.name: m for m in tar.getmembers()}
        d = members["etc/slurm-web"]
        assert d.isdir() and (d.uid, d.gid, d.mode & 0o7777) == (999, 999, 0o700)
        assert "slurm-web:x:999:999:" in tar.extractfile("etc/passwd").read().decode()
        assert config["Entrypoint"] == ["/usr/bin/slurm-web", comp]
        assert config["Labels"]["org.opencontainers.image.version"] == "6.0.0"
        site = "usr/local/lib/python3.11/dist-packages"
        meta = tar.extractfile(f"{site}/slurm_web-6.0.0.dist-info/METADATA").read().decode()
        assert "Version: 6.0.0" in meta
        assert {f"usr/share/slurm-web/conf/{comp}.yml", "usr/share/slurm-web/conf/policy.yml",
                "usr/share/slurm-web/templates/message.html.j2", "usr/bin/slurm-web"} <= set(members)
        assert not [n for n in members if n.endswith(".pyc") or "/direct_url.json" in n]
        # the slurm-web command imports both components' modules: RacksDB and markdown in both
        assert {f"{site}/racksdb/__init__.py", f"{site}/markdown/__init__.py"} <= set(members)
        assert "usr/lib/python3/dist-packages/gi/__init__.py" in members  # Debian's, not a wheel
        ui = "usr/share/slurm-web/frontend/index.html"
        assert (ui in members) == (comp == "gateway")
        assert any(n.startswith("usr/share/slurm-web/frontend/assets/index-") for n in members) == (comp == "gateway")
        others = [n for n, m in members.items() if (m.uid, m.gid) != (0, 0) and not n.startswith("etc/slurm-web")]
        assert others == [], f"{comp}: files not owned by root: {others[:5]}"


def test_registry_found_stopped_is_set_up_again_with_the_same_digests(images):
    lab = images["lab"]
    lab.ssh("storage", "systemctl disable --now -q docker-registry.service")
    doc, out, took = run_web_images()
    print(f"\nafter the registry was stopped and disabled: {took:.1f} s")
    assert "pushed" in out
    assert doc == images["doc"]  # the build and the push are deterministic
    st = lab.ssh("storage", "systemctl is-active docker-registry.service; "
                            "systemctl is-enabled docker-registry.service").stdout.split()
    assert st == ["active", "enabled"]
