"""A state from before bundles, on the real engine: components/migrate.py and the bundle's guard.

Hosts are a local shell behind a fake ssh (a TEST DOUBLE of the network hop only:
programs.py); the resources are the real File and Files primitives on files
under tmp_path, children of a component typed as the Slurm layer, named as the layer names a
node's three configuration files. The `legacy` program declares them as three Files (the
release before bundles), the `bundled` one as one Files bundle with its alias, as the layer
does now. One of the three had an original on the host, which a rollback must put back.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.pulumi_cli import PulumiProject

from .programs import program_project

STACK = "t"
NAMES = ("slurm.conf", "cgroup.conf", "gres.conf")

PROGRAM = '''
import pulumi
from components.providers import File, Files
from components.transport import SshTarget

cfg = pulumi.Config("gpu-fleet")
root, shape = cfg.require("root"), cfg.require("shape")


class SlurmCluster(pulumi.ComponentResource):
    def __init__(self):
        super().__init__("gpu-fleet:slurm:SlurmCluster", "slurm")


slurm = SlurmCluster()
conn = SshTarget("node1", "127.0.0.1", use_ssh_config=False).as_dict()
texts = {n: f"# {n} for node1 ({cfg.get('edit') or 'v1'})\\n" for n in %r}
opts = pulumi.ResourceOptions(parent=slurm)
if shape == "legacy":
    for n, t in texts.items():
        File(f"node1-{n}", conn=conn, path=f"{root}/{n}", content=t, by_hash=True, opts=opts)
else:
    Files("node1-slurm-config", conn=conn, legacy="node1-slurm.conf", opts=opts,
          files=[{"path": f"{root}/{n}", "content": t} for n, t in texts.items()])
''' % (NAMES,)

def project(tmp: Path) -> PulumiProject:
    proj = program_project(tmp, PROGRAM)
    proj.env.update(GPU_FLEET_STORE_DIR=str(tmp / "store"), GPU_FLEET_PROBE_DIR=str(tmp / "probes"))
    shape(proj, "legacy")
    proj.init_stack(STACK, secrets=False)
    return proj


def shape(proj: PulumiProject, which: str, edit: str = "") -> None:
    extra = f"  gpu-fleet:edit: {edit}\n" if edit else ""
    proj.write_stack(STACK, f"config:\n  gpu-fleet:root: {proj.dir.parent / 'etc'}\n  gpu-fleet:shape: {which}\n{extra}")


def migrate(proj: PulumiProject, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "components.migrate", "--stack", STACK, *args], cwd=proj.dir, env=proj.env, capture_output=True, text=True,
                          timeout=300)


def resources(proj: PulumiProject) -> dict[str, dict]:
    state = json.loads(proj.run("stack", "export", "--stack", STACK).stdout)
    return {r["urn"].rsplit("::", 1)[1]: r for r in state["deployment"]["resources"]}


def test_a_state_from_before_bundles_is_refused_then_migrated_and_its_rollback_still_restores(tmp_path):
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "gres.conf").write_text("# the host's own gres.conf\n")
    proj = project(tmp_path)
    proj.run("up", "--stack", STACK, "--yes", "--skip-preview", timeout=300)
    written = {n: (etc / n).read_text() for n in NAMES}
    assert written["gres.conf"] == "# gres.conf for node1 (v1)\n"

    # the new release without the migration: refused in the preview, nothing on the host changes
    shape(proj, "bundled")
    p = proj.run("preview", "--stack", STACK, check=False, timeout=300)
    out = p.stdout + p.stderr
    assert p.returncode != 0
    assert "host node1: Files node1-slurm-config: the stack's state holds its members as separate resources" in out
    assert "make migrate STACK=<stack>" in out and "no host is touched" in out
    p = proj.run("up", "--stack", STACK, "--yes", check=False, timeout=300)
    assert p.returncode != 0 and {n: (etc / n).read_text() for n in NAMES} == written
    assert set(resources(proj)) >= {f"node1-{n}" for n in NAMES}

    dry = migrate(proj, "--dry-run")
    assert dry.returncode == 0 and "node1-slurm-config <- node1-slurm.conf, node1-cgroup.conf, node1-gres.conf" \
        in dry.stdout, dry.stdout + dry.stderr
    assert set(resources(proj)) >= {f"node1-{n}" for n in NAMES}  # a dry run writes nothing
    m = migrate(proj)
    assert m.returncode == 0, m.stdout + m.stderr
    [kept] = (proj.dir / ".state" / "migrate").glob(f"{STACK}-*.json")  # the state before, to import back
    assert {f"node1-{n}" for n in NAMES} <= {r["urn"].rsplit("::", 1)[1]
                                             for r in json.loads(kept.read_text())["deployment"]["resources"]}
    now = resources(proj)
    assert "node1-slurm-config" in now and not {f"node1-{n}" for n in NAMES} & set(now)
    bundle = now["node1-slurm-config"]
    assert bundle["outputs"]["records"][str(etc / "gres.conf")]["original"] == "backup"
    assert migrate(proj).stdout.strip().endswith("nothing to migrate (no per-object resource a bundle replaced)")

    # what the old Files recorded is the bundle's now: no change, then a change of one member
    proj.run("preview", "--stack", STACK, "--expect-no-changes", timeout=300)
    proj.run("up", "--stack", STACK, "--yes", "--refresh", "--expect-no-changes", timeout=300)
    assert {n: (etc / n).read_text() for n in NAMES} == written
    shape(proj, "bundled", edit="v2")
    proj.run("up", "--stack", STACK, "--yes", "--skip-preview", timeout=300)
    assert (etc / "slurm.conf").read_text() == "# slurm.conf for node1 (v2)\n"

    # the rollback undoes what the old Files made: the host's own gres.conf back, the others gone
    proj.run("destroy", "--stack", STACK, "--yes", "--skip-preview", timeout=300)
    assert (etc / "gres.conf").read_text() == "# the host's own gres.conf\n"
    assert not (etc / "slurm.conf").exists() and not (etc / "cgroup.conf").exists()
