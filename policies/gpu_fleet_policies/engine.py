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

Each patch checks that the SDK still has what it replaces and fails loudly otherwise
(tests/policy/test_validators.py::test_engine_patch_points runs the same check).
"""

from __future__ import annotations

from typing import Any, Optional

from . import relax, stackconfig

_installed = False


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
        return unproxy(sdk_deserialize(props, True))

    deserialize_properties.__wrapped__ = original
    return deserialize_properties


def patch_points() -> list[str]:
    """What install() needs from the SDK; empty when all of it is there."""
    import pulumi_policy.policy as sdk
    import pulumi_policy.secret as secret

    missing = []
    for name in ("deserialize_properties", "_PolicyAnalyzerServicer"):
        if not hasattr(sdk, name):
            missing.append(f"pulumi_policy.policy.{name}")
    servicer = getattr(sdk, "_PolicyAnalyzerServicer", None)
    for name in ("Configure", "ConfigureStack", "_get_enforcement_level"):
        if servicer is not None and not hasattr(servicer, name):
            missing.append(f"pulumi_policy.policy._PolicyAnalyzerServicer.{name}")
    for name in ("Secret", "_DictSecretsProxy", "_ListSecretsProxy"):
        if not hasattr(secret, name):
            missing.append(f"pulumi_policy.secret.{name}")
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

    # the patch itself: the servicer's methods replaced on its class
    servicer.Configure = Configure  # type: ignore[method-assign]
    servicer.ConfigureStack = ConfigureStack  # type: ignore[method-assign]
    servicer._get_enforcement_level = _get_enforcement_level  # type: ignore[method-assign]
    _installed = True

