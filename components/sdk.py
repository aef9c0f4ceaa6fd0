"""Seven changes to the Pulumi Python SDK's program-side costs at fleet scale (issue 16).

Each replaces a private name of pulumi 3.272 (pinned in requirements.txt); `check()` (run by
`tune()` and by tests/unit/test_sdk.py) refuses an SDK where the name or the code it replaces
is not what this module was written against, so an upgrade fails loudly instead of silently
changing behaviour.

- No stack trace per resource (`pulumi.runtime.resource._get_stack_trace`): the SDK walks
  `traceback.extract_stack` twice a registration and the engine keeps every frame in the
  state (~1.3 KB a resource, 37 % of a node's state at 14 nodes). Nothing in the plan, the
  diff or an error message reads it; the engine writes no source position either.
- The end-of-program drain (`pulumi.runtime.stack.wait_for_rpcs`) waits on every pending
  Output with `asyncio.wait(..., FIRST_COMPLETED)`, then puts the rest back and waits again:
  O(pending) work per completed Output, quadratic in the resources. `FIRST_EXCEPTION` returns
  as soon as one fails (the same early error) or when all completed, so the loop runs once
  per batch, not once per Output. Only that call in that module sees the change.
- The SDK's own debug lines from resource registration (`pulumi.runtime.resource`'s
  `log.debug`: "registering resource ...", four a resource) and from its RPC bookkeeping
  (`pulumi.runtime.rpc_manager`'s "beginning rpc ...", one an RPC) are each a blocking gRPC
  call to the engine from the event loop, and the engine drops them unless run with
  `-v`/`--debug`: 36 % of the program's time at 140 nodes, and another ~8 % for the RPC ones.
  Dropped in those two modules only; the program's and the layers' own log lines (warnings)
  are untouched, and a failed RPC still fails the program. GPU_FLEET_SDK_DEBUG_LOG=1 keeps
  them, for debugging the SDK itself.
- The SDK's dependency-cycle check (`pulumi.runtime.resource_cycle_breaker.declare_dependency`,
  called for every dependency of every resource) walks everything the dependency reaches,
  forward, to see whether it reaches the resource being registered. A node's slurmd and its
  slurm.conf depend (through the admitted nodes) on the GPU baseline, which reaches every
  node: O(fleet) a resource, 26 % of the program at 1,250 nodes. `declare_dependency` below
  answers the same question backwards, from the resource being registered over the edges
  into it (what already depends on it: usually nothing), and records the same forward edges,
  so the same cycles are refused with the same error.
- The unknown check every Output's data runs on its value (`pulumi.runtime.rpc.contains_unknowns`,
  called through `pulumi.output.contains_unknowns`: 350,000 calls at 1,250 nodes, 10 % of the
  program) defines a closure and a set per call, for values that are mostly one string.
  `contains_unknowns` below answers the same question (an `Unknown` anywhere in nested dicts
  and lists) with a fast path for scalars and one loop for the rest; a randomized test checks
  it agrees with the SDK's on every value.
- Two answers that depend only on a class, computed per resource: the output types of a
  resource class (`pulumi._types.resource_types`, read from its annotations on every
  registration, 4 % of the program) and a dynamic provider's pickle
  (`pulumi.dynamic.dynamic.serialize_provider`: dill over a provider that holds no state is
  the same bytes every time, 4 %). Both are kept per class: the types as read once, the
  pickle only for a provider with no instance state whose pickling captured no secret (any
  other is pickled every time, as the SDK does). A side effect worth having: the SDK's
  `serialize_provider` wraps pickle's dict writer once more on every call and never unwraps
  it, so after ~1,000 calls in one process a provider that holds state fails to pickle with
  RecursionError (measured: 1,500 calls); called once per class, the chain stays short.
"""

from __future__ import annotations

import asyncio
import inspect
import os
from types import SimpleNamespace


class SdkChanged(RuntimeError):
    """The installed pulumi SDK is not the one components/sdk.py patches."""


def check() -> None:
    import pulumi
    import pulumi.log
    import pulumi.runtime.resource as resource
    import pulumi.runtime.stack as stack

    if not callable(getattr(resource, "_get_stack_trace", None)):
        raise SdkChanged("pulumi.runtime.resource._get_stack_trace is gone: revisit components/sdk.py")
    if resource.register_resource.__code__.co_names.count("_get_stack_trace") < 1:
        raise SdkChanged("register_resource no longer calls _get_stack_trace: revisit components/sdk.py")
    import pulumi.runtime.resource_cycle_breaker as cycles
    import pulumi.runtime.rpc as rpc

    if rpc.declare_dependency is not cycles.declare_dependency or not callable(getattr(cycles, "_add_dep", None)) \
            or getattr(cycles, "_DEPENDENCIES_PROPERTY", None) != "_direct_computed_dependencies":
        raise SdkChanged("pulumi.runtime.resource_cycle_breaker changed: revisit components/sdk.py")
    src = inspect.getsource(stack.wait_for_rpcs)
    if "return_when=asyncio.FIRST_COMPLETED" not in src or src.count("asyncio.wait(") != 1:
        raise SdkChanged("pulumi.runtime.stack.wait_for_rpcs changed: revisit components/sdk.py")
    import pulumi.output as output

    if not callable(getattr(rpc, "contains_unknowns", None)) \
            or "rpc.contains_unknowns(" not in inspect.getsource(output.contains_unknowns):
        raise SdkChanged("pulumi.output.contains_unknowns no longer asks pulumi.runtime.rpc: revisit components/sdk.py")
    import pulumi._types as types
    import pulumi.dynamic.dynamic as dynamic
    import pulumi.runtime._serialization as serialization

    if "_types.resource_types(" not in inspect.getsource(rpc.resolve_outputs) \
            or not callable(getattr(types, "resource_types", None)):
        raise SdkChanged("pulumi.runtime.rpc.resolve_outputs no longer asks _types.resource_types: "
                         "revisit components/sdk.py")
    if "_serialize(" not in inspect.getsource(dynamic.Resource.__init__) \
            or "serialize_provider" not in dynamic.Resource.__init__.__code__.co_names \
            or not callable(getattr(dynamic, "serialize_provider", None)) \
            or not hasattr(serialization, "_var_serialization_contained_secrets"):
        raise SdkChanged("pulumi.dynamic.Resource no longer pickles through serialize_provider: "
                         "revisit components/sdk.py")
    import pulumi.runtime.rpc_manager as rpc_manager

    for mod in (resource, rpc_manager):
        if getattr(mod, "log", None) is not pulumi.log or not callable(getattr(pulumi.log, "debug", None)):
            raise SdkChanged(f"{mod.__name__} no longer logs through pulumi.log: revisit components/sdk.py")


_SCALARS = (str, int, float, bool, type(None))
_Unknown: type = type(None)  # pulumi.output.Unknown, bound by tune() (the SDK imports it late)


def contains_unknowns(val) -> bool:
    """Whether an `Unknown` is anywhere in `val` (dicts and lists walked, a cycle once)."""
    if isinstance(val, _SCALARS):
        return False
    seen: set[int] = set()
    todo = [val]
    while todo:
        v = todo.pop()
        if isinstance(v, _Unknown):
            return True
        if isinstance(v, (dict, list)) and id(v) not in seen:
            seen.add(id(v))
            todo.extend(v.values() if isinstance(v, dict) else v)
    return False


async def _wait(fs, *, timeout=None, return_when=asyncio.ALL_COMPLETED):
    if return_when == asyncio.FIRST_COMPLETED:
        return_when = asyncio.FIRST_EXCEPTION
    return await asyncio.wait(fs, timeout=timeout, return_when=return_when)


#: on a resource: the resources whose computed dependencies include it (the reverse edges)
_DEPENDENTS = "_gpu_fleet_dependents"


def declare_dependency(from_resource, to_resource) -> bool:
    """The SDK's contract: record that `from_resource` depends on `to_resource` unless that
    closes a cycle (`to_resource` already reaches `from_resource`); True when recorded."""
    import pulumi.runtime.resource_cycle_breaker as cycles

    # to_resource reaches from_resource forward <=> from_resource reaches it over reverse edges
    seen, todo = {from_resource}, [from_resource]
    while todo:
        r = todo.pop()
        if r == to_resource:
            return False
        for x in getattr(r, _DEPENDENTS, ()):
            if x not in seen:
                seen.add(x)
                todo.append(x)
    cycles._add_dep(from_resource, to_resource)
    dependents = getattr(to_resource, _DEPENDENTS, None)
    if dependents is None:
        dependents = set()
        setattr(to_resource, _DEPENDENTS, dependents)
    dependents.add(from_resource)
    return True


_TYPES: dict[type, dict] = {}
_PICKLES: dict[type, str] = {}


def resource_types(resource_cls: type) -> dict:
    """The SDK's `resource_types`, read once per class (annotations do not change at run time)."""
    got = _TYPES.get(resource_cls)
    if got is None:
        got = _TYPES[resource_cls] = _SDK["resource_types"](resource_cls)
    return got


def serialize_provider(provider) -> str:
    """The SDK's `serialize_provider`, kept per class for a provider with no instance state
    whose pickle captured no secret (runs inside the SDK's `_serialize` context)."""
    import pulumi.runtime._serialization as serialization

    if vars(provider):
        return _SDK["serialize_provider"](provider)
    cls = type(provider)
    got = _PICKLES.get(cls)
    if got is None:
        got = _SDK["serialize_provider"](provider)
        if not serialization._var_serialization_contained_secrets.get():
            _PICKLES[cls] = got
    return got


#: the SDK's own functions that the ones above call
_SDK: dict = {}


def tune() -> None:
    """Apply the seven changes (the program's __main__ calls this before any resource exists)."""
    import pulumi.runtime.resource as resource
    import pulumi.runtime.stack as stack
    from pulumi.runtime.proto import source_pb2

    if getattr(stack, "_gpu_fleet_tuned", False):
        return
    check()
    resource._get_stack_trace = lambda: source_pb2.StackTrace()
    proxy = SimpleNamespace(**{k: getattr(asyncio, k) for k in dir(asyncio) if not k.startswith("__")})
    proxy.wait = _wait
    stack.asyncio = proxy  # type: ignore[assignment]  # the patch: a namespace stands in for the module
    if os.environ.get("GPU_FLEET_SDK_DEBUG_LOG") != "1":
        import pulumi.runtime.rpc_manager as rpc_manager

        quiet = SimpleNamespace(**{k: getattr(resource.log, k) for k in dir(resource.log) if not k.startswith("__")})
        quiet.debug = lambda *a, **k: None
        resource.log = rpc_manager.log = quiet  # type: ignore[assignment]  # the patch, as above
    import pulumi.runtime.resource_cycle_breaker as cycles
    import pulumi.runtime.rpc as rpc

    cycles.declare_dependency = rpc.declare_dependency = declare_dependency
    import pulumi.output as output

    global _Unknown
    _Unknown = output.Unknown
    rpc.contains_unknowns = contains_unknowns
    import pulumi._types as types
    import pulumi.dynamic.dynamic as dynamic

    _SDK.update(resource_types=types.resource_types, serialize_provider=dynamic.serialize_provider)
    types.resource_types = resource_types
    dynamic.serialize_provider = serialize_provider
    stack._gpu_fleet_tuned = True  # type: ignore[attr-defined]  # our marker on the SDK's module
