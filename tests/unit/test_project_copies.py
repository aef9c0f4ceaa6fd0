"""The test projects (tests/pulumi_cli.PulumiProject) carry the tree's bytecode, valid in the copy:
with PYTHONDONTWRITEBYTECODE set, as here, every Pulumi process in a copy without it compiled the
program's 130 modules from source (a canary preview 2.5 -> 2.0 CPU-s with it)."""

from __future__ import annotations

import importlib.util
import struct

from tests.pulumi_cli import PulumiProject


def test_a_copy_of_the_repo_carries_valid_bytecode_for_every_module(tmp_path):
    proj = PulumiProject.copy_of_repo(tmp_path)
    sources = sorted((proj.dir / "components").rglob("*.py"))
    assert len(sources) > 100
    stale = []
    for src in sources:
        pyc = importlib.util.cache_from_source(str(src))
        try:
            header = open(pyc, "rb").read(16)
        except FileNotFoundError:
            stale.append(f"{src}: no bytecode")
            continue
        # the header importlib checks (PEP 552, timestamp-based): magic, flags, mtime, size
        magic, flags, mtime, size = header[:4], *struct.unpack("<III", header[4:16])
        st = src.stat()
        if (magic, flags, mtime, size) != (importlib.util.MAGIC_NUMBER, 0, int(st.st_mtime) & 0xFFFFFFFF,
                                           st.st_size & 0xFFFFFFFF):
            stale.append(f"{src}: bytecode not valid for this source")
    assert not stale, "\n".join(stale[:10])
