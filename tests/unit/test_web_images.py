"""What the lab's Slurm-web images are built from (lab/web_images/sources.py): the vendored tarball is
refused unless its SHA-256 is the pinned one, every wheel is pinned by version and hash, and the
placeholder images stand in for exactly the links into upstream's assets/ the tarball lacks."""

from __future__ import annotations

import re
import struct
import tarfile

import pytest

from lab.common import LabError
from lab.web_images import sources


def test_a_tarball_with_another_hash_is_refused_naming_both(tmp_path, monkeypatch):
    vendor = tmp_path / "vendor"
    vendor.mkdir()
    (vendor / sources.TARBALL).write_bytes(b"not slurm-web")
    monkeypatch.setattr(sources, "VENDOR_DIRS", [vendor])
    monkeypatch.setattr(sources, "cache_dir", lambda: tmp_path / "cache")
    with pytest.raises(LabError) as e:
        sources.tarball()
    assert str(vendor / sources.TARBALL) in str(e.value) and sources.TARBALL_SHA256 in str(e.value)
    assert "refusing to build from it" in str(e.value)
    assert not (tmp_path / "cache").exists()  # nothing kept


def test_no_tarball_anywhere_says_where_to_put_it(tmp_path, monkeypatch):
    monkeypatch.setattr(sources, "VENDOR_DIRS", [tmp_path / "none"])
    monkeypatch.setattr(sources, "cache_dir", lambda: tmp_path / "cache")
    with pytest.raises(LabError, match="GPU_FLEET_VENDOR_DIR"):
        sources.tarball()


def test_every_wheel_is_pinned_by_version_and_hash():
    text = sources.REQUIREMENTS.read_text()
    reqs = re.split(r"\n(?=[A-Za-z])", "\n".join(line for line in text.splitlines() if not line.startswith("#")))
    assert len(reqs) > 20
    for req in reqs:
        assert re.fullmatch(r"[a-z0-9-]+==[0-9][^ ]* \\\n    --hash=sha256:[0-9a-f]{64}\n?", req), req
    names = {r.split("==")[0] for r in reqs}
    # what Debian's packages give the image, never a wheel; Slurm-web itself comes from the tarball
    assert not names & {"pygobject", "pycairo", "python-ldap", "slurm-web"}
    assert {"racksdb", "markdown", "flask", "async-timeout"} <= names  # agent, gateway, both, redis below 3.11.3


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_the_placeholders_are_images_of_their_format():
    for name, data in sources.PLACEHOLDERS.items():
        if name.endswith(".png"):
            w, h = _png_size(data)
            assert w > 0 and h > 0
        else:
            reserved, kind, count = struct.unpack("<HHH", data[:6])
            assert (reserved, kind, count) == (0, 1, 1)
            assert _png_size(data[22:]) == (32, 32)


def test_the_placeholders_stand_in_for_exactly_the_links_the_tarball_breaks():
    try:
        path = sources.tarball()
    except LabError as e:
        pytest.skip(f"the vendored tarball is not on this machine: {e}")
    with tarfile.open(path) as tar:
        links = {m.name.split("/frontend/", 1)[1] for m in tar.getmembers()
                 if m.issym() and "/frontend/" in m.name and m.linkname.startswith("../")
                 and not m.name.split("/frontend/", 1)[1].startswith("tests/")}
    assert links == set(sources.PLACEHOLDERS)
