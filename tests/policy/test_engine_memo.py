"""The pack's servicer decodes each message once per Analyze / AnalyzeStack call (engine.py,
item 5) and still gives every policy the verdict it gave before: the real SDK servicer with
the real policies, fed the requests the engine would send."""

from __future__ import annotations

import pytest
from google.protobuf import json_format as real_json_format
from google.protobuf import struct_pb2
from pulumi.runtime import proto

from gpu_fleet_policies import engine
from gpu_fleet_policies.pack import PACK_NAME, declared_levels, policies

FILE = "pulumi-python:dynamic/host:File"
BAD_CGROUP = "ConstrainCores=yes\nConstrainRAMSpace=no\nConstrainDevices=yes\n"


@pytest.fixture(scope="module")
def servicer():
    import pulumi_policy.policy as sdk
    from pulumi_policy import EnforcementLevel

    engine.install(declared_levels())
    return sdk._PolicyAnalyzerServicer(PACK_NAME, "0.0.1", policies(), EnforcementLevel.MANDATORY,
                                      None, None, None, None, None, None, None)


def file_request(name: str, content: str, path: str = "/etc/slurm/cgroup.conf") -> proto.AnalyzeRequest:
    props = struct_pb2.Struct()
    props.update({"conn": {"name": name, "address": "192.0.2.21"}, "path": path, "content": content,
                  "mode": "0644", "owner": "root", "group": "root"})
    provider = proto.AnalyzerProviderResource(type="pulumi:providers:pulumi-python", name="default",
                                              urn="urn:pulumi:s::p::pulumi:providers:pulumi-python::default")
    provider.properties.update({"version": "3.0.0"})
    return proto.AnalyzeRequest(type=FILE, properties=props, urn=f"urn:pulumi:s::p::{FILE}::{name}-cgroup",
                                name=f"{name}-cgroup", provider=provider)


class Counting:
    def __init__(self):
        self.calls = 0

    def __getattr__(self, name):
        return getattr(real_json_format, name)

    def MessageToDict(self, message, *a, **kw):
        self.calls += 1
        return real_json_format.MessageToDict(message, *a, **kw)


def violations(resp) -> dict[str, str]:
    return {d.policyName: d.message for d in resp.diagnostics}


def test_analyze_decodes_properties_and_provider_once_and_reports_as_before(servicer, monkeypatch):
    import pulumi_policy.policy as sdk

    counting = Counting()
    monkeypatch.setattr(sdk.json_format, "_json_format", counting)
    resp = servicer.Analyze(file_request("gpu01", BAD_CGROUP), None)
    assert counting.calls == 2  # the properties and the provider's, for every resource policy
    got = violations(resp)
    assert "ConstrainRAMSpace" in got["slurm-cgroup-confinement"], got
    assert getattr(engine._call, "memo", None) is None  # nothing kept once the call returns


def test_each_policy_gets_its_own_view_and_a_good_file_passes(servicer):
    resp = servicer.Analyze(file_request("gpu02", BAD_CGROUP.replace("RAMSpace=no", "RAMSpace=yes")), None)
    assert "slurm-cgroup-confinement" not in violations(resp)


def test_two_resources_in_analyze_stack_are_decoded_once_each_not_per_policy(servicer, monkeypatch):
    import pulumi_policy.policy as sdk

    counting = Counting()
    monkeypatch.setattr(sdk.json_format, "_json_format", counting)
    reqs = [file_request(n, BAD_CGROUP) for n in ("gpu01", "gpu02")]
    stack = proto.AnalyzeStackRequest(resources=[
        proto.AnalyzerResource(type=r.type, properties=r.properties, urn=r.urn, name=r.name, provider=r.provider)
        for r in reqs])
    servicer.AnalyzeStack(stack, None)
    assert counting.calls == 4  # each resource's properties and provider once, not per stack policy


def test_policies_share_one_read_only_view_of_a_resource_within_a_call():
    """Item 6: one proxy per message and call, shared by the policies, which cannot change it;
    unknowns still raise as the SDK's own proxy does."""
    import pulumi_policy.policy as sdk
    from pulumi_policy import EnforcementLevel, ResourceValidationPolicy
    from pulumi_policy.proxy import UnknownValueError

    seen: list = []

    def meddler(args, report_violation):
        seen.append((id(args.props), id(args.provider)))
        try:
            args.props["path"] = "/etc/passwd"
        except TypeError as e:
            seen.append(str(e))

    def reader(args, report_violation):
        seen.append((id(args.props), id(args.provider)))
        seen.append(args.props["path"])

    engine.install(declared_levels())
    srv = sdk._PolicyAnalyzerServicer(
        "t", "0.0.1", [ResourceValidationPolicy("meddler", "m", meddler), ResourceValidationPolicy("reader", "r", reader)],
        EnforcementLevel.MANDATORY, None, None, None, None, None, None, None)
    srv.Analyze(file_request("gpu03", BAD_CGROUP), None)
    (first, error, second, path) = seen
    assert first == second  # the same view and provider for both
    assert error.startswith("a policy may not change the properties it validates")
    assert path == "/etc/slurm/cgroup.conf"

    view = sdk.unknown_checking_proxy({"a": {"b": [1, {"c": "04da6b54-80e4-46f7-96ec-b56ff0331ba9"}]}})
    assert view["a"]["b"][0] == 1
    with pytest.raises(UnknownValueError):
        view["a"]["b"][1]["c"]  # the engine's unknown sentinel
    with pytest.raises(TypeError):
        view["a"]["x"] = 1


def test_remediate_answers_the_sdks_own_response_without_decoding_when_no_policy_remediates(servicer, monkeypatch):
    """The engine asks for remediations of every resource before analyzing it (engine.py item
    7): with no policy at the remediate level the answer is the SDK's, with no decoding."""
    import pulumi_policy.policy as sdk

    counting = Counting()
    monkeypatch.setattr(sdk.json_format, "_json_format", counting)
    req = file_request("gpu03", BAD_CGROUP)
    resp = servicer.Remediate(req, None)
    assert counting.calls == 0
    sdk_resp = type(servicer).Remediate.__wrapped__(servicer, req, None)
    assert counting.calls >= 1  # the SDK's own path decodes it
    assert resp == sdk_resp and not resp.remediations and not resp.not_applicable


def test_remediate_is_the_sdks_when_a_policy_is_at_the_remediate_level(servicer, monkeypatch):
    import pulumi_policy.policy as sdk
    from pulumi_policy import EnforcementLevel

    level = type(servicer)._get_enforcement_level

    def one_remediates(self, policy):
        return EnforcementLevel.REMEDIATE if policy.name == "slurm-cgroup-confinement" else level(self, policy)

    monkeypatch.setattr(type(servicer), "_get_enforcement_level", one_remediates)
    counting = Counting()
    monkeypatch.setattr(sdk.json_format, "_json_format", counting)
    resp = servicer.Remediate(file_request("gpu04", BAD_CGROUP), None)
    assert counting.calls >= 1
    # the SDK's answer: the policy has no remediation, so it is reported as not applicable
    assert [n.policy_name for n in resp.not_applicable] == ["slurm-cgroup-confinement"]
