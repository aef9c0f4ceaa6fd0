"""The places where this pack needs more from the policy SDK than its public API gives.

pulumi-policy (pinned: 1.21.0, see requirements.txt) hides what a fail-closed pack
needs; `install()` provides them, once, before the pack starts serving:

1. **Secret-ness of inputs.** The engine sends secret values to the pack marked as secrets
   (`KeepSecrets: true` in the CLI's analyzer plugin), but the SDK's validation path
   unwraps them into plain values, so a policy cannot tell a Pulumi secret from a plain
   string. `install()` wraps the SDK's deserializer so validations see secret values as
   `pulumi_policy.Secret(value)` (the SDK's own marker class, as its remediation path
   already does); `props.snapshot` turns them into `Secret` leaves of a plain dict.
2. **The whole pack config.** A policy's `get_config()` shows only its own properties, and
   the enforcement level a stack chose is not visible at all. `install()` records what the
   engine's `Configure` call carries for every policy, so the relaxation policies can check
   that each relaxed policy gives a reason, and print every relaxation.
3. **Fail-closed relaxations.** A relaxation without a reason does not take effect (the
   policy stays at its declared level), and the two relaxation policies can never be
   relaxed themselves.
4. **The stack's config.** The engine sends it in `ConfigureStack`, which the SDK reads only
   for tags; `install()` keeps it for policies that need it (hosts: the K3s retirement list).
5. **One decoding per message, not per policy.** The SDK's `Analyze` converts a resource's
   properties (`json_format.MessageToDict`, then `deserialize_properties`) and its provider's
   once for every resource policy, and `AnalyzeStack` every resource once for every stack
   policy: 45 conversions a resource here, 70 % of the pack's time at 280 nodes. Within one
   `Analyze` or `AnalyzeStack` call `install()` remembers each conversion by the message;
   every policy still gets its own unknown-checking proxy (a copy of the containers), so
   what one policy does to its view cannot reach another's.

6. **One read-only view per message, not per policy.** The SDK wraps a resource's properties
   in its unknown-checking proxy (a copy of every container) for each policy, and its
   provider's too: at 140 nodes 126,100 proxies, 60 % of the pack's time after item 5. Within
   one call `install()` builds one proxy per decoded message and one provider resource per
   request, and shares them between the policies; the shared proxy refuses to be changed
   (`TypeError`), so no policy can alter what another one sees.

7. **No decoding for a remediation nobody does.** Before it analyzes a resource the engine asks
   the pack to remediate it (`Remediate`, per resource and pack), and the SDK decodes the
   properties and the provider for it (with its secret proxies, outside item 5's memo) before
   it looks for a policy at the `remediate` level. This pack has none unless a stack's config
   sets one: `install()` answers the SDK's own empty response at once when no resource policy
   is at that level, and otherwise lets the SDK do all of it. At 280 nodes the SDK's answers
   took 0.67 CPU-s of the pack's 9.9 in a preview (2,549 calls, 7 %).

Each patch checks that the SDK still has what it replaces and fails loudly otherwise
(tests/policy/test_validators.py::test_engine_patch_points runs the same check).
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Iterator, Optional

from . import relax, stackconfig

_installed = False
#: the conversions of the Analyze or AnalyzeStack call this thread is serving (item 5)
_call = threading.local()


@contextlib.contextmanager
def _one_call() -> Iterator[None]:
    outer = getattr(_call, "memo", None)
    _call.memo = {}
    try:
        yield
    finally:
        _call.memo = outer


class _RememberingJsonFormat:
    """`json_format` as the SDK's policy module uses it, with `MessageToDict` remembered per
    message for the length of one call (item 5)."""

    def __init__(self, json_format: Any) -> None:
        self._json_format = json_format

    def __getattr__(self, name: str) -> Any:
        return getattr(self._json_format, name)

    def MessageToDict(self, message: Any, *args: Any, **kwargs: Any) -> Any:
        memo = getattr(_call, "memo", None)
        if memo is None or args or kwargs:
            return self._json_format.MessageToDict(message, *args, **kwargs)
        # the same field read twice is the same message object (protobuf keeps the wrapper);
        # kept alive in the memo, so its id names it for the whole call. A new wrapper for the
        # same field would only miss: the SDK's own path, never a wrong answer.
        key = ("message", id(message))
        if key not in memo:
            memo[key] = (message, self._json_format.MessageToDict(message))
        return memo[key][1]


def _read_only_proxies():
    """`unknown_checking_proxy` as the SDK's, built once per message within a call (item 6), with
    dicts that refuse to be changed (the SDK's lists already do)."""
    from pulumi_policy.proxy import _DictProxy, _ListProxy

    class ReadOnlyDict(_DictProxy):
        def __setitem__(self, key: Any, value: Any) -> None:
            raise TypeError("a policy may not change the properties it validates (other policies share them)")

    def build(v: Any, path: list[str]) -> Any:
        if isinstance(v, list):
            return _ListProxy([build(x, [*path, str(i)]) for i, x in enumerate(v)], path)
        if isinstance(v, dict):
            return ReadOnlyDict({k: build(x, [*path, str(k)]) for k, x in v.items()}, path)
        return v

    def unknown_checking_proxy(props: dict) -> Any:
        memo = getattr(_call, "memo", None)
        if memo is None:
            return build(props, [])
        key = ("proxy", id(props))  # the decoded dict is the memo's own (item 5): its id names it
        if key not in memo:
            memo[key] = (props, build(props, []))
        return memo[key][1]

    return unknown_checking_proxy


def _secret_marking_deserialize(original):
    from pulumi_policy.deserialize import deserialize_properties as sdk_deserialize
    from pulumi_policy.secret import Secret, _DictSecretsProxy, _ListSecretsProxy

    def unproxy(v: Any) -> Any:
        if isinstance(v, Secret):
            return Secret(unproxy(v.value))
        if isinstance(v, _DictSecretsProxy):
            return {k: unproxy(x) for k, x in v["__target"].items()}
        if isinstance(v, _ListSecretsProxy):
            return [unproxy(x) for x in v["__target"]]
        if isinstance(v, dict):
            return {k: unproxy(x) for k, x in v.items()}
        if isinstance(v, list):
            return [unproxy(x) for x in v]
        return v

    def deserialize_properties(props, proxy_secrets: bool = False):
        if proxy_secrets:  # the remediation path: keep the SDK's own behaviour
            return original(props, proxy_secrets)
        memo = getattr(_call, "memo", None)
        if memo is None:
            return unproxy(sdk_deserialize(props, True))
        # within a call the same message's dict is the same object (remembered above, kept
        # alive by the memo): its id is its key, its value only ever read (by the SDK's proxy)
        key = ("deserialized", id(props))
        if key not in memo:
            memo[key] = (props, unproxy(sdk_deserialize(props, True)))
        return memo[key][1]

    deserialize_properties.__wrapped__ = original
    return deserialize_properties


def patch_points() -> list[str]:
    """What install() needs from the SDK; empty when all of it is there."""
    import pulumi_policy.policy as sdk
    import pulumi_policy.secret as secret

    missing = []
    for name in ("deserialize_properties", "_PolicyAnalyzerServicer", "json_format", "unknown_checking_proxy",
                 "ResourceValidationPolicy", "proto"):
        if not hasattr(sdk, name):
            missing.append(f"pulumi_policy.policy.{name}")
    servicer = getattr(sdk, "_PolicyAnalyzerServicer", None)
    for name in ("Configure", "ConfigureStack", "_get_enforcement_level", "Analyze", "AnalyzeStack",
                 "_get_provider_resource", "Remediate", "_configure_runtime_settings"):
        if servicer is not None and not hasattr(servicer, name):
            missing.append(f"pulumi_policy.policy._PolicyAnalyzerServicer.{name}")
    for name in ("Secret", "_DictSecretsProxy", "_ListSecretsProxy"):
        if not hasattr(secret, name):
            missing.append(f"pulumi_policy.secret.{name}")
    import pulumi_policy.proxy as proxy
    for name in ("_DictProxy", "_ListProxy"):
        if not hasattr(proxy, name):
            missing.append(f"pulumi_policy.proxy.{name}")
    return missing


def _level_name(level: int) -> Optional[str]:
    from pulumi.runtime import proto

    names: dict[int, str] = {proto.ADVISORY: "advisory", proto.MANDATORY: "mandatory",
                             proto.REMEDIATE: "remediate", proto.DISABLED: "disabled"}
    return names.get(level)


def install(declared: dict[str, str]) -> None:
    """Patch the SDK (idempotent). `declared`: policy name -> its declared enforcement level."""
    global _installed
    if _installed:
        return
    missing = patch_points()
    if missing:
        raise RuntimeError(
            "the gpu-fleet policy pack needs SDK internals this pulumi-policy lacks: "
            + ", ".join(missing) + "; pin pulumi-policy to the version in requirements.txt"
        )
    from google.protobuf import json_format
    import pulumi_policy.policy as sdk
    from pulumi.runtime import proto
    from pulumi_policy import EnforcementLevel

    sdk.deserialize_properties = _secret_marking_deserialize(sdk.deserialize_properties)
    servicer = sdk._PolicyAnalyzerServicer

    original_configure = servicer.Configure

    def Configure(self, request, context):
        config = {}
        for name in request.policyConfig:
            v = request.policyConfig[name]
            entry = dict(json_format.MessageToDict(v.properties))
            level = _level_name(v.enforcementLevel)
            if level is not None:
                entry["enforcementLevel"] = level
            config[name] = entry
        relax.configure(config, declared)
        return original_configure(self, request, context)

    original_stack = servicer.ConfigureStack

    def ConfigureStack(self, request, context):
        stackconfig.configure(dict(request.config))
        return original_stack(self, request, context)

    original_level = servicer._get_enforcement_level

    def _get_enforcement_level(self, policy):
        level = original_level(self, policy)
        effective = relax.effective_level(policy.name, level.value)
        return EnforcementLevel(effective)

    sdk.json_format = _RememberingJsonFormat(sdk.json_format)
    sdk.unknown_checking_proxy = _read_only_proxies()
    original_provider = servicer._get_provider_resource

    def _get_provider_resource(self, request):
        memo = getattr(_call, "memo", None)
        if memo is None:
            return original_provider(self, request)
        key = ("provider", id(request))  # a request (a stack's resource) lives as long as the call
        if key not in memo:
            memo[key] = (request, original_provider(self, request))
        return memo[key][1]

    original_analyze, original_analyze_stack = servicer.Analyze, servicer.AnalyzeStack
    original_remediate = servicer.Remediate

    def Remediate(self, request, context):
        # the SDK's loop skips every policy not at the remediate level: with none, its answer
        # is this empty response, after decoding the resource for nothing (item 7)
        policies = getattr(self, "_PolicyAnalyzerServicer__policies", None)
        if policies is None or any(isinstance(p, sdk.ResourceValidationPolicy)
                                   and self._get_enforcement_level(p) == EnforcementLevel.REMEDIATE
                                   for p in policies):
            return original_remediate(self, request, context)
        self._configure_runtime_settings()
        return proto.RemediateResponse()

    Remediate.__wrapped__ = original_remediate  # type: ignore[attr-defined]

    def Analyze(self, request, context):
        with _one_call():
            return original_analyze(self, request, context)

    def AnalyzeStack(self, request, context):
        with _one_call():
            return original_analyze_stack(self, request, context)

    # the patch itself: the servicer's methods replaced on its class
    servicer.Analyze = Analyze  # type: ignore[method-assign]
    servicer.AnalyzeStack = AnalyzeStack  # type: ignore[method-assign]
    servicer.Remediate = Remediate  # type: ignore[method-assign]
    servicer.Configure = Configure  # type: ignore[method-assign]
    servicer._get_provider_resource = _get_provider_resource  # type: ignore[method-assign]
    servicer.ConfigureStack = ConfigureStack  # type: ignore[method-assign]
    servicer._get_enforcement_level = _get_enforcement_level  # type: ignore[method-assign]
    _installed = True

