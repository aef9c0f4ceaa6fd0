"""A newcomer's first command: `make preview STACK=<s>` on a fresh clone, for every committed stack.

The clone is the repository's files (tracked, and new ones git does not ignore) with each
committed stack file as git holds it (its index copy: a developer's own `make stack` writes
its salt and secrets into the working copy), and the built .venv and .tools linked in. It has
no .state: `make` finds no passphrase, backend or stack and must make them, as on a new
machine. Each preview must pass, and the stack file must afterwards hold the generated
secrets encrypted only: a committed salt or secret would fail at once with `incorrect
passphrase` (issue 33).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from components.config.project import PROJECT
from components.stack_secrets import STACK_SECRETS
from tests.pulumi_cli import ROOT


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout


def committed_stacks() -> list[str]:
    return sorted(p[len("stacks/Pulumi."):-len(".yaml")] for p in git("ls-files", "stacks/Pulumi.*.yaml").split())


def fresh_clone(dest: Path) -> Path:
    """The repository as a clone of the work in progress would have it (see the module doc)."""
    tracked = set(git("ls-files", "-z").split("\0"))
    for rel in filter(None, git("ls-files", "-z", "--cached", "--others", "--exclude-standard").split("\0")):
        src, out = ROOT / rel, dest / rel
        is_stack = rel.startswith("stacks/Pulumi.") and rel.endswith(".yaml")
        if (is_stack and rel not in tracked) or not (src.exists() or src.is_symlink()):
            continue  # a developer's own stack; a file deleted in the work in progress
        out.parent.mkdir(parents=True, exist_ok=True)
        if is_stack:
            out.write_text(git("show", f":{rel}"))
        else:
            shutil.copy2(src, out, follow_symlinks=False)
    for built in (".venv", ".tools"):  # what `make setup` builds, too slow to build per test
        (dest / built).symlink_to(ROOT / built)
    return dest


@pytest.fixture(scope="module")
def clone(tmp_path_factory) -> Path:
    return fresh_clone(tmp_path_factory.mktemp("fresh") / "gpu-fleet")


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> dict[str, str]:
    """A newcomer's environment: no Pulumi settings of the developer's (passphrase, backend)."""
    e = {k: v for k, v in os.environ.items() if not k.startswith(("PULUMI_", "GPU_FLEET_"))}
    e["PULUMI_HOME"] = str(tmp_path_factory.mktemp("pulumi-home"))  # not the developer's ~/.pulumi
    return e


def make(clone: Path, env: dict[str, str], *args: str) -> tuple[int, str, float]:
    """`make <args>` in the clone: exit code, output, seconds. The output goes to a file, not a
    pipe a plugin left behind could hold open; whatever the run left behind is ended with it."""
    log = clone.parent / f"make-{'-'.join(args)}.log"
    start = time.monotonic()
    with open(log, "w") as out:
        p = subprocess.Popen(["make", "--no-print-directory", *args], cwd=clone, env=env, stdout=out,
                             stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            rc = p.wait(timeout=600)
        except subprocess.TimeoutExpired:
            rc = -1
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
    return rc, log.read_text(), time.monotonic() - start


def test_every_committed_stack_ships_without_salt_or_secrets():
    for stack in committed_stacks():
        data = yaml.safe_load(git("show", f":stacks/Pulumi.{stack}.yaml")) or {}
        secure = [k for k, v in (data.get("config") or {}).items() if isinstance(v, dict) and "secure" in v]
        assert "encryptionsalt" not in data and not secure, (
            f"stacks/Pulumi.{stack}.yaml carries a developer's encryptionsalt or secrets ({secure}): a fresh "
            "clone's `make preview` fails with `incorrect passphrase`; commit the example stack without them")


@pytest.mark.parametrize("stack", committed_stacks())
def test_make_preview_works_on_a_fresh_clone(clone, env, stack):
    stack_file = clone / "stacks" / f"Pulumi.{stack}.yaml"
    before = yaml.safe_load(stack_file.read_text())
    rc, output, took = make(clone, env, "preview", f"STACK={stack}")
    assert rc == 0, f"make preview STACK={stack} exited {rc} after {took:.0f} s; its output:\n{output[-8000:]}"
    assert (clone / ".state" / "passphrase").stat().st_mode & 0o077 == 0  # generated, the owner's only

    text = stack_file.read_text()
    after = yaml.safe_load(text)
    cfg = after["config"]
    keys = [f"{PROJECT}:{k}" for k in STACK_SECRETS]
    assert all(isinstance(cfg.get(k), dict) and set(cfg[k]) == {"secure"} for k in keys), cfg.keys()
    # nothing else of the stack changed: its salt and the generated secrets were added
    assert {k: v for k, v in cfg.items() if k not in keys} == before["config"]
    assert set(after) - set(before) == {"encryptionsalt"}
    shown = json.loads(subprocess.run(["bin/pulumi", "config", "--stack", stack, "--show-secrets", "--json"],
                                      cwd=clone, env=env, capture_output=True, text=True, check=True,
                                      timeout=120).stdout)
    for key in keys:
        value = shown[key]["value"]
        assert shown[key]["secret"] and len(value) >= 32, key  # generated; the generated passphrase reads it
        for where, out in (("the stack file", text), ("the preview's output", output)):
            assert value not in out, f"{key} in plain text in {where}"


def test_setup_links_one_virtualenv_per_machine_that_git_ignores(tmp_path, env):
    """`scripts/setup.sh` in a clone without .venv links the machine's virtualenv for this
    requirements.txt (built once, in the tool cache) instead of installing the wheels again; a
    second clone links the same one; git does not list the link."""
    env = {**env, **{k: v for k, v in os.environ.items() if k == "GPU_FLEET_TOOL_CACHE"}}
    targets = []
    for name in ("one", "two"):
        clone = fresh_clone(tmp_path / name / "gpu-fleet")
        for built in (".venv", ".tools"):
            (clone / built).unlink()
        p = subprocess.run(["scripts/setup.sh"], cwd=clone, env=env, capture_output=True, text=True, timeout=900,
                           stdin=subprocess.DEVNULL)
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
        venv = clone / ".venv"
        assert venv.is_symlink(), "setup made a .venv of the clone's own"
        targets.append(venv.resolve())
        assert (targets[-1] / ".ok").is_file() and targets[-1].parent.name == "venv", targets[-1]
        imported = subprocess.run([str(venv / "bin" / "python"), "-c", "import pulumi, pydantic, components.fleet"],
                                  cwd=clone, capture_output=True, text=True, timeout=120)
        assert imported.returncode == 0, imported.stderr[-2000:]
    assert targets[0] == targets[1]
    assert f"virtualenv cached at {targets[1]}" in p.stdout + p.stderr and "building the virtualenv" not in p.stdout + p.stderr
    subprocess.run(["git", "init", "-q"], cwd=clone, check=True, timeout=60)
    untracked = subprocess.run(["git", "status", "--porcelain"], cwd=clone, capture_output=True, text=True,
                               check=True, timeout=60).stdout.splitlines()
    assert "?? .venv" not in untracked and "?? .tools/" not in untracked, untracked
