"""The Slurm-web settings policies, called directly: the layer's golden agent template, gateway.ini
and policy.ini pass; each way to open the view further (a non-viewing action for anonymous, an
agent off the internal network, the auto token mode or Slurm's key) is refused with a sentence
naming the file; a file elsewhere or unknown content is not judged."""

from __future__ import annotations

import pytest

from tests.pulumi_cli import ROOT

from gpu_fleet_policies import slurmweb
from gpu_fleet_policies.pack import DESCRIPTIONS, KINDS, VALIDATORS

from .fakes import UNKNOWN_STR, file_args, violations

GOLDEN = ROOT / "tests" / "golden"
AGENT_T = (GOLDEN / "web.agent.ini.in").read_text()
GATEWAY = (GOLDEN / "web.gateway.ini").read_text()
POLICY = (GOLDEN / "web.policy.ini").read_text()
PATHS = {"agent": "/etc/gpu-fleet/web/agent.ini.in", "gateway": "/etc/gpu-fleet/web/gateway/gateway.ini",
         "policy": "/etc/gpu-fleet/web/agent/policy.ini"}
POLICIES = {"web-anonymous-view-only": slurmweb.validate_anonymous_view_only,
            "web-gateway-agents-internal": slurmweb.validate_gateway_agents_internal,
            "web-agent-static-token": slurmweb.validate_agent_static_token}


def every(path: str, content) -> list[str]:
    return [m for fn in POLICIES.values() for m in violations(fn, file_args(path, content))]


def test_the_pack_serves_them_as_resource_policies():
    for name, fn in POLICIES.items():
        assert VALIDATORS[name] is fn and KINDS[name] == "resource" and DESCRIPTIONS[name]


@pytest.mark.parametrize("kind, text", [("agent", AGENT_T), ("gateway", GATEWAY), ("policy", POLICY)])
def test_the_layers_own_files_pass(kind, text):
    assert every(PATHS[kind], text) == []
    assert every(PATHS[kind], UNKNOWN_STR) == []


@pytest.mark.parametrize("actions, bad", [
    ("view-jobs,cache-reset", ["cache-reset"]),
    ("view-jobs,associations-view", ["associations-view"]),
    ("view-jobs,\n  cache-view", ["cache-view"]),
    ("@user", ["@user"]),
])
def test_anonymous_doing_more_than_viewing_is_refused(actions, bad):
    text = POLICY.replace(POLICY.split("actions=", 1)[1], actions + "\n")
    got = every(PATHS["policy"], text)
    assert len(got) == len(bad), got
    for msg, action in zip(got, bad):
        assert f"/etc/gpu-fleet/web/agent/policy.ini grants the anonymous role {action!r}" in msg, msg
        assert "may only view" in msg


def test_policy_under_slurm_webs_own_directory_is_judged_too_and_elsewhere_not():
    text = POLICY.replace("view-stats,", "cache-reset,")
    assert len(every("/etc/slurm-web/policy.ini", text)) == 1
    assert every("/srv/other/policy.ini", text) == []


@pytest.mark.parametrize("url", ["http://10.213.57.11:5012", "http://ctl:5012", "https://slurm-web-agent:5012",
                                 "http://slurm-web-agent:5012\n  http://203.0.113.9:5012"])
def test_a_gateway_listing_an_agent_off_the_internal_network_is_refused(url):
    text = GATEWAY.replace("url=http://slurm-web-agent:5012", f"url={url}")
    [msg] = every(PATHS["gateway"], text)
    assert "/etc/gpu-fleet/web/gateway/gateway.ini lists agent" in msg
    assert "by the agent container's name (http://slurm-web-agent:<port>)" in msg


def test_a_gateway_with_no_agent_is_refused():
    [msg] = every(PATHS["gateway"], GATEWAY.replace("url=http://slurm-web-agent:5012", "url="))
    assert msg.endswith("lists no agent ([agents] url)"), msg


@pytest.mark.parametrize("old, new, needle", [
    ("jwt_mode=static", "jwt_mode=auto", "auth=jwt jwt_mode=auto"),
    ("jwt_mode=static\n", "", "auth=jwt jwt_mode=auto"),  # auto is Slurm-web's default
    ("auth=jwt", "auth=local", "auth=local jwt_mode=static"),
    ("jwt_token=@SLURM_JWT@", "jwt_token=@SLURM_JWT@\njwt_key=/etc/slurm/jwt_hs256.key", "names a slurmrestd signing"),
])
def test_an_agent_that_would_need_slurms_key_is_refused(old, new, needle):
    for path in (PATHS["agent"], "/etc/gpu-fleet/web/agent/agent.ini"):
        [msg] = every(path, AGENT_T.replace(old, new))
        assert msg.startswith("File") and path in msg and needle in msg, msg
