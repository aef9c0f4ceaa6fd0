"""Shared fixtures: stack configs as the engine would hand them to the program."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent


def stack_config(stack: str) -> dict:
    """The `config:` mapping of a committed stack file."""
    return yaml.safe_load((ROOT / "stacks" / f"Pulumi.{stack}.yaml").read_text())["config"]


def fleet14() -> dict:
    """The full stack after its K3s retirement, as a plain Slurm fleet: the 12 K3s nodes owned by
    slurm, the layer's section gone. A valid 14-node fleet, for what the full fleet renders and
    declares without the retirement's resources."""
    raw = stack_config("full")
    # the committed stack's secrets are encrypted under that stack's salt: a stack written from
    # this config generates its own (PulumiProject.init_stack -> ensure_secrets)
    raw = {k: v for k, v in raw.items() if not (isinstance(v, dict) and "secure" in v)}
    del raw["gpu-fleet:k3s_retirement"]
    for n in raw["gpu-fleet:nodes"]:
        if n["owner"] == "k3s":
            n["owner"] = "slurm"
    return raw


@pytest.fixture
def full_config() -> dict:
    """The committed full stack as it is: the seed's target, 12 K3s nodes retired into Slurm."""
    return copy.deepcopy(stack_config("full"))


@pytest.fixture
def fleet14_config() -> dict:
    return fleet14()


@pytest.fixture
def canary_config() -> dict:
    return copy.deepcopy(stack_config("canary"))


@pytest.fixture
def accounting_cfg():
    """The canary stack, parsed, with the accounting layer on."""
    from components.config.load import parse_fleet_config

    raw = stack_config("canary")
    raw["gpu-fleet:accounting"] = {"enabled": True}
    return parse_fleet_config(raw, "canary")


@pytest.fixture(autouse=True, scope="session")
def _rendered_store(tmp_path_factory):
    """File(by_hash=True)'s local store (components/providers/stored.py): the tests' own, not the
    user's cache; the CLI tests' programs inherit it through the environment."""
    import os

    if "GPU_FLEET_STORE_DIR" not in os.environ:
        os.environ["GPU_FLEET_STORE_DIR"] = str(tmp_path_factory.mktemp("rendered-store"))
    # what each host's refresh probed last (components/transport/refresh.py): the tests' own
    if "GPU_FLEET_PROBE_DIR" not in os.environ:
        os.environ["GPU_FLEET_PROBE_DIR"] = str(tmp_path_factory.mktemp("probes"))
    yield


# ---- where the suite's time goes: wall seconds per test module, printed at the end ----------
_MODULE_SECONDS: dict[str, float] = {}

#: the packages every test project's Pulumi processes import (PulumiProject copies them with
#: their bytecode; the pack runs from this tree), and the lab's commands
COMPILED = ("components", "policies", "lab")


def pytest_sessionstart(session) -> None:
    """The project's own bytecode, written before any test copies the tree. Where
    PYTHONDONTWRITEBYTECODE is set, no import writes it, so each program, provider host and
    pack process compiled 130 modules from source again (a canary preview: 0.4 of 2.5 CPU-s).
    compileall writes it all the same (outside git: `__pycache__/` is ignored)."""
    import compileall

    for name in COMPILED:
        compileall.compile_dir(ROOT / name, quiet=1, workers=0)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Setup, call and teardown of each test, summed per module (module fixtures included)."""
    import time

    start = time.monotonic()
    yield
    path = item.nodeid.split("::", 1)[0]
    _MODULE_SECONDS[path] = _MODULE_SECONDS.get(path, 0.0) + time.monotonic() - start


def pytest_terminal_summary(terminalreporter) -> None:
    if not _MODULE_SECONDS:
        return
    total = sum(_MODULE_SECONDS.values())
    terminalreporter.section("wall time per test module (the slowest 25)")
    for path, secs in sorted(_MODULE_SECONDS.items(), key=lambda kv: -kv[1])[:25]:
        terminalreporter.write_line(f"{secs:8.1f} s  {100 * secs / total:5.1f} %  {path}")
    by_dir: dict[str, float] = {}
    for path, secs in _MODULE_SECONDS.items():
        top = "/".join(path.split("/")[:2])
        by_dir[top] = by_dir.get(top, 0.0) + secs
    terminalreporter.write_line("  ".join(f"{d}: {s:.0f} s" for d, s in sorted(by_dir.items())))
    _cli_summary(terminalreporter)


def _cli_summary(terminalreporter) -> None:
    """Where the Pulumi CLI's time went, per module and command (setup and teardown count
    for the test that was running), and the slowest single runs."""
    from tests.pulumi_cli import CLI_SECONDS

    if not CLI_SECONDS:
        return
    per: dict[tuple[str, str], list[float]] = {}
    for test, cmd, secs in CLI_SECONDS:
        per.setdefault((test.split("::", 1)[0], cmd.split(" ", 1)[0]), []).append(secs)
    terminalreporter.section("Pulumi CLI time per module and command (the slowest 30)")
    for (path, cmd), runs in sorted(per.items(), key=lambda kv: -sum(kv[1]))[:30]:
        terminalreporter.write_line(f"{sum(runs):8.1f} s  {len(runs):3d} x {cmd:<9} {path}")
    terminalreporter.write_line(f"all CLI runs: {len(CLI_SECONDS)}, {sum(s for *_, s in CLI_SECONDS):.0f} s")
    terminalreporter.section("the slowest 20 CLI runs")
    for test, cmd, secs in sorted(CLI_SECONDS, key=lambda r: -r[2])[:20]:
        terminalreporter.write_line(f"{secs:8.1f} s  {cmd:<14} {test}")
