"""A one-file Pulumi program over the project's components, on hosts that are a local shell.

The hosts' ssh is a TEST DOUBLE of the network hop only: ssh's last argument (the remote
command) runs in a local /bin/sh, and a control check (`-O check`) answers "no master", so the
real transport opens, runs and records every command as it would over OpenSSH.
"""

from __future__ import annotations

from pathlib import Path

from tests.pulumi_cli import ROOT, PulumiProject

FAKE_SSH = """#!/bin/sh
for a; do case "$a" in check) exit 255 ;; esac; cmd="$a"; done
exec /bin/sh -c "$cmd"
"""


def program_project(tmp: Path, program: str) -> PulumiProject:
    """`program` as the project's __main__.py (project gpu-fleet, with `components/`), the fake
    ssh first on its PATH. The caller writes and inits its stack."""
    (tmp / "program").mkdir()
    (tmp / "program" / "__main__.py").write_text(program)
    (tmp / "program" / "Pulumi.yaml").write_text(
        "name: gpu-fleet\nruntime:\n  name: python\n  options:\n    virtualenv: .venv\nstackConfigDir: stacks\n")
    proj = PulumiProject.copy_of(tmp, [tmp / "program" / "Pulumi.yaml", tmp / "program" / "__main__.py",
                                       ROOT / "components"])
    bin_dir = tmp / "fakessh"
    bin_dir.mkdir()
    (bin_dir / "ssh").write_text(FAKE_SSH)
    (bin_dir / "ssh").chmod(0o755)
    proj.env.update(PATH=f"{bin_dir}:{proj.env['PATH']}")
    return proj
