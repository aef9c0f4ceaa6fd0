"""Provider failures reach the user as our one block, not as the SDK's traceback."""

from __future__ import annotations

import ast
import importlib.machinery
import sys
import traceback
import types
from pathlib import Path

import grpc
import pytest

from components.errors import FleetError
from components.providers import readable


def provider_main() -> types.ModuleType:
    """A stand-in for the engine's `python -m pulumi.dynamic` __main__ (importing the real one
    starts its server), running the SDK's own handler wrapper, taken from its source: it
    formats the exception with its module's `traceback`."""
    import pulumi.dynamic

    src = (Path(pulumi.dynamic.__file__).parent / "__main__.py").read_text()
    fn = next(n for n in ast.parse(src).body
              if isinstance(n, ast.FunctionDef) and n.name == "_abort_with_traceback")
    main = types.ModuleType("__main__")
    main.__spec__ = importlib.machinery.ModuleSpec(readable.PROVIDER_MAIN, None)
    main.__dict__.update(traceback=traceback, grpc=grpc)
    exec(compile(ast.Module([fn], []), "pulumi/dynamic/__main__.py", "exec"), main.__dict__)
    main.wrap = main._abort_with_traceback
    return main


class Context:
    def abort(self, code, details):
        self.details = details


def failing(exc):
    def handler(self, request, context):
        raise exc
    return handler


@pytest.mark.parametrize("env, fleet_alone", [(None, True), ("1", False)])
def test_a_fleet_error_is_reported_alone(monkeypatch, env, fleet_alone):
    if env:
        monkeypatch.setenv("GPU_FLEET_TRACEBACK", env)
    main = provider_main()
    assert readable.install(main) is fleet_alone
    ctx = Context()
    msg = "host node1: `apt-get install x=1` failed with exit code 100\n  output:\n    E: no such version"
    main.wrap(failing(FleetError(msg)))(None, None, ctx)
    if fleet_alone:
        assert ctx.details == msg
    else:
        assert ctx.details.startswith("Traceback (most recent call last):") and msg in ctx.details


def test_a_bug_keeps_its_traceback():
    main = provider_main()
    readable.install(main)
    ctx = Context()
    main.wrap(failing(KeyError("uid")))(None, None, ctx)
    assert "Traceback (most recent call last):" in ctx.details and "KeyError: 'uid'" in ctx.details


def test_nothing_changes_outside_the_provider_process():
    before = sys.modules["__main__"].__dict__.get("traceback")
    assert readable.install() is False
    assert sys.modules["__main__"].__dict__.get("traceback") is before
