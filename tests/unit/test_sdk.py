"""components/sdk.py: the SDK names it replaces are still there, and what it changes behaves."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from components import sdk


def _run(coro):
    """Run a coroutine on a loop of its own: asyncio.run would leave the main thread without a
    current loop, which the SDK's mocks (tests/mock) need."""
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.close()


def test_the_sdk_is_the_one_sdk_py_patches():
    sdk.check()


def test_the_drain_still_raises_the_first_error_without_waiting_for_the_rest():
    async def main():
        slow = asyncio.ensure_future(asyncio.sleep(30))
        bad = asyncio.ensure_future(_fail())
        done, not_done = await sdk._wait([slow, bad], return_when=asyncio.FIRST_COMPLETED)
        slow.cancel()
        return done, not_done, bad

    async def _fail():
        await asyncio.sleep(0)
        raise ValueError("boom")

    done, not_done, bad = _run(asyncio.wait_for(main(), 5))
    assert done == {bad} and len(not_done) == 1
    with pytest.raises(ValueError):
        bad.result()


def test_the_drain_waits_for_a_whole_batch_at_once():
    async def main():
        fs = [asyncio.ensure_future(asyncio.sleep(0.01 * i)) for i in range(5)]
        return await sdk._wait(fs, return_when=asyncio.FIRST_COMPLETED)

    done, not_done = _run(main())
    assert len(done) == 5 and not not_done


def test_providers_without_secrets_are_not_serialized_as_secret():
    from components.layers.accounting.history import AccountingHistoryProvider
    from components.layers.gpu_runtime.component import GpuBaselineProvider
    from components.providers.base import HostPrimitive, RolloutCheck

    for cls in (HostPrimitive, RolloutCheck, GpuBaselineProvider, AccountingHistoryProvider):
        assert cls.serialize_as_secret_always is False


def test_tune_drops_only_the_registration_debug_lines(monkeypatch):
    import pulumi.log
    import pulumi.runtime.resource as resource
    import pulumi.runtime.stack as stack

    import pulumi.runtime.resource_cycle_breaker as cycles
    import pulumi.runtime.rpc as rpc
    import pulumi.runtime.rpc_manager as rpc_manager

    import pulumi._types as types
    import pulumi.dynamic.dynamic as dynamic

    for mod, name in ((resource, "log"), (resource, "_get_stack_trace"), (stack, "asyncio"),
                      (cycles, "declare_dependency"), (rpc, "declare_dependency"), (rpc_manager, "log"),
                      (rpc, "contains_unknowns"), (types, "resource_types"),
                      (dynamic, "serialize_provider")):
        monkeypatch.setattr(mod, name, getattr(mod, name))
    monkeypatch.setattr(sdk, "_SDK", {})
    monkeypatch.setattr(stack, "_gpu_fleet_tuned", False, raising=False)
    sdk.tune()
    assert resource.log is not pulumi.log and resource.log.debug("x") is None
    assert resource.log.warn is pulumi.log.warn and pulumi.log.debug is not resource.log.debug
    assert rpc_manager.log is resource.log and rpc.contains_unknowns is sdk.contains_unknowns
    assert list(resource._get_stack_trace().frames) == []
    assert stack.asyncio.wait is sdk._wait and stack.asyncio.FIRST_COMPLETED == asyncio.FIRST_COMPLETED
    assert rpc.declare_dependency is sdk.declare_dependency is cycles.declare_dependency
    assert types.resource_types is sdk.resource_types and dynamic.serialize_provider is sdk.serialize_provider


def test_the_cycle_check_refuses_what_the_sdk_refuses():
    """Random graphs: sdk.declare_dependency and the SDK's own agree on every edge, and record
    the same forward dependencies."""
    import random

    import pulumi.runtime.resource_cycle_breaker as cycles

    class R:
        pass

    rnd = random.Random(16)
    for _ in range(30):
        ours, theirs = [R() for _ in range(12)], [R() for _ in range(12)]
        for _ in range(40):
            a, b = rnd.randrange(12), rnd.randrange(12)
            assert sdk.declare_dependency(ours[a], ours[b]) == cycles.declare_dependency(theirs[a], theirs[b])
        for o, t in zip(ours, theirs):
            assert {ours.index(x) for x in cycles._deps(o)} == {theirs.index(x) for x in cycles._deps(t)}


def test_the_provider_host_replaces_the_sdks_server_as_it_is_built(tmp_path, monkeypatch):
    from components import provider_host

    assert provider_host.check().endswith("pulumi/dynamic/__main__.py")
    changed = tmp_path / "pulumi" / "dynamic"
    changed.mkdir(parents=True)
    src = Path(provider_host.check()).read_text().replace("max_workers=4", "max_workers=8")
    (changed / "__main__.py").write_text(src)

    class Spec:
        origin = str(changed / "__main__.py")

    monkeypatch.setattr(provider_host.importlib.util, "find_spec", lambda name: Spec())
    with pytest.raises(provider_host.SdkChanged, match="revisit components/provider_host.py"):
        provider_host.check()


def test_the_unknown_check_agrees_with_the_sdks_on_every_value(monkeypatch):
    """Random nested values with and without unknowns (a shared sub-value and a cycle too)."""
    import random

    import pulumi.output as output
    import pulumi.runtime.rpc as rpc

    theirs = rpc.contains_unknowns
    assert theirs is not sdk.contains_unknowns  # the SDK's own (test_tune_... puts it back)
    monkeypatch.setattr(sdk, "_Unknown", output.Unknown)
    rnd = random.Random(16)

    def value(depth: int):
        r = rnd.random()
        if depth > 3 or r < 0.4:
            return rnd.choice([output.UNKNOWN if rnd.random() < 0.05 else None, "x", 3, 2.5, True, b"b", ("t",)])
        if r < 0.7:
            return {str(i): value(depth + 1) for i in range(rnd.randrange(4))}
        return [value(depth + 1) for _ in range(rnd.randrange(4))]

    for _ in range(2000):
        v = value(0)
        assert sdk.contains_unknowns(v) == theirs(v), v
    shared = [output.UNKNOWN]
    cyclic: list = [1, {"a": shared, "b": shared}]
    cyclic.append(cyclic)
    assert sdk.contains_unknowns(cyclic) is theirs(cyclic) is True
    assert sdk.contains_unknowns("x") is sdk.contains_unknowns([[], {}]) is False


def test_resource_types_are_read_once_per_class_and_are_the_sdks(monkeypatch):
    import pulumi._types as types

    from components.providers.bundle import Files
    from components.providers.file import File
    from components.providers.payload import Payload

    calls = []

    def counted(cls):
        calls.append(cls)
        return types.resource_types(cls)

    monkeypatch.setattr(sdk, "_SDK", {"resource_types": counted})
    monkeypatch.setattr(sdk, "_TYPES", {})
    for cls in (File, Payload, Files, File, Payload, File):
        assert sdk.resource_types(cls) == types.resource_types(cls)
    assert calls == [File, Payload, Files]
    assert set(sdk.resource_types(Payload)) >= {"sha256", "present"}


def test_a_stateless_providers_pickle_is_the_sdks_and_is_made_once(monkeypatch):
    """The same string as the SDK's own serialize_provider, computed once per class; a provider
    with instance state, or one whose pickle captured a secret, is pickled every time."""
    import pulumi.dynamic.dynamic as dynamic
    from pulumi.runtime import _serialization as ser

    from components.layers.gpu_runtime.component import GpuBaselineProvider
    from components.providers.file import FileProvider
    from components.providers.packages import PackageSetProvider

    calls = []

    def counted(provider):
        calls.append(type(provider))
        return dynamic.serialize_provider(provider)

    monkeypatch.setattr(sdk, "_SDK", {"serialize_provider": counted})
    monkeypatch.setattr(sdk, "_PICKLES", {})

    def both(provider):
        ours = ser._serialize(True, sdk.serialize_provider, provider)
        theirs = ser._serialize(True, dynamic.serialize_provider, provider)
        assert ours == theirs, type(provider)
        return ours

    for p in (FileProvider(), PackageSetProvider(), FileProvider(), GpuBaselineProvider(), FileProvider()):
        assert both(p)[1] is False
    assert calls == [FileProvider, PackageSetProvider, GpuBaselineProvider]

    # a provider with state goes to the SDK's function every time (a stub here: the SDK's own
    # wraps pickle's dict writer once more on every call and never unwraps it, so in a long
    # test process a dict-holding pickle runs out of recursion; with the per-class answers a
    # program calls it once per class, not once per resource)
    class Stateful(FileProvider):
        pass

    calls.clear()
    monkeypatch.setattr(sdk, "_SDK", {"serialize_provider": lambda p: calls.append(p.note) or f"pickled {p.note}"})
    a, b = Stateful(), Stateful()
    a.note, b.note = "one", "two"
    assert [sdk.serialize_provider(x) for x in (a, b, a)] == ["pickled one", "pickled two", "pickled one"]
    assert calls == ["one", "two", "one"] and Stateful not in sdk._PICKLES

    def secret_captured(provider):  # as the SDK's Output pickling marks a captured secret
        ser._var_serialization_contained_secrets.set(True)
        return "pickled"

    calls.clear()
    monkeypatch.setattr(sdk, "_SDK", {"serialize_provider": secret_captured})
    assert ser._serialize(True, sdk.serialize_provider, PackageSetProvider.__new__(type("P", (PackageSetProvider,), {}))) \
        == ("pickled", True)
    assert all(not k.__name__ == "P" for k in sdk._PICKLES)
