"""The web layer's pure parts: config rules, golden units and Slurm-web settings, the readback
judge and the check.

The readback fixtures are what readback.sh printed on the lab's controller (podman 4.3.1,
cgroup v1 controllers), trimmed to the fields the parser reads; each test changes one thing
and expects the judge to name it."""

from __future__ import annotations

import copy
import json

import pytest

from components.config.load import parse_fleet_config
from components.errors import ConfigError
from components.layers.web import render
from components.layers.web.check import check_problems, parse_check
from components.layers.web.render import (
    AGENT, AGENT_TEMPLATE, GATEWAY, config_files, container_specs, podman_run_argv, render_agent_ini,
    render_container_unit, render_containers_conf, render_gateway_ini, render_health_timer, render_health_unit,
    render_policy_ini, render_registries_conf, render_token_timer, render_token_unit,
)
from components.layers.web.runtime import judge, parse_readback
from tests.conftest import stack_config
from tests.unit.slurm.test_slurm_render import check_golden

AGENT_IMG = "storage:5000/gpu-fleet/slurm-web-agent@sha256:" + "a" * 64
GATEWAY_IMG = "storage:5000/gpu-fleet/slurm-web-gateway@sha256:" + "b" * 64


SHA = {AGENT: "a" * 16, GATEWAY: "b" * 16}


def web_raw(**web):
    raw = stack_config("canary")
    raw["gpu-fleet:accounting"] = {"enabled": True}
    raw["gpu-fleet:web"] = {"enabled": True, "agent_image": AGENT_IMG, "gateway_image": GATEWAY_IMG, **web}
    return raw


def problems(raw) -> list[str]:
    with pytest.raises(ConfigError) as e:
        parse_fleet_config(raw, "canary")
    return e.value.problems


CFG = parse_fleet_config(web_raw(runtime={"cgroup_manager": "cgroupfs", "keyring": False, "default_sysctls": False,
                                          "insecure_registries": ["storage:5000"]}), "canary")
SPECS = container_specs(CFG.web, "/run/slurmrestd", "/etc/slurm/jwt_hs256.key", SHA)


# ---- config ---------------------------------------------------------------------------------

@pytest.mark.parametrize("ref", ["storage:5000/gpu-fleet/slurm-web-agent:7.0.0",
                                 "gpu-fleet/agent@sha256:abc", "agent@sha256:" + "a" * 64,
                                 "storage:5000/x/agent@sha256:" + "A" * 64])
def test_an_image_not_pinned_by_a_full_digest_is_refused(ref):
    [p] = problems(web_raw(agent_image=ref))
    assert p.startswith("gpu-fleet:web.agent_image: ") and "by digest" in p, p


def test_the_web_view_needs_accounting_and_both_images():
    raw = web_raw()
    raw["gpu-fleet:accounting"] = {"enabled": False}
    del raw["gpu-fleet:web"]["gateway_image"]
    ps = problems(raw)
    assert any(p.startswith("gpu-fleet:web.gateway_image: required") for p in ps), ps
    assert any(p.startswith("gpu-fleet:web.enabled: the web view reads slurmrestd") for p in ps), ps


def test_a_token_renewed_after_it_expires_is_refused():
    [p] = problems(web_raw(token_lifetime_s=600, renew_before_s=600))
    assert p.startswith("gpu-fleet:web.renew_before_s: 600 s is not less than token_lifetime_s"), p


@pytest.mark.parametrize("field, value", [("uid", 0), ("port", 80), ("limits", {"memory_mb": 0}),
                                          ("limits", {"pids": 0}), ("limits", {"cpus": 0})])
def test_root_privileged_ports_and_missing_limits_are_refused(field, value):
    [p] = problems(web_raw(**{field: value}))
    assert p.startswith(f"gpu-fleet:web.{field}"), p


@pytest.mark.parametrize("version", ["22.05", "22.05.8", "23.11.10", "24.02.1"])
def test_slurm_web_on_a_slurm_before_24_05_is_refused_naming_both(version):
    raw = web_raw()
    raw["gpu-fleet:slurm"]["release"] = {"version": version, "debian_version": f"{version}-1"}
    [p] = problems(raw)
    assert p == (f"gpu-fleet:web.enabled: Slurm-web 6.0.0 reads slurmrestd's API 0.0.41 to 0.0.44, which Slurm "
                 f"24.05 and later serve; gpu-fleet:slurm.release.version is {version}: upgrade Slurm or turn "
                 "the web layer off"), p


@pytest.mark.parametrize("version", ["24.05", "24.11.5", "26.05.4"])
def test_slurm_24_05_and_later_take_the_web_layer(version):
    raw = web_raw()
    raw["gpu-fleet:slurm"]["release"] = {"version": version, "debian_version": f"{version}-1"}
    assert parse_fleet_config(raw, "canary").web.enabled


def test_anonymous_may_only_view_each_action_once():
    [p] = problems(web_raw(anonymous_actions=["view-jobs", "cache-reset"]))
    assert p.startswith("gpu-fleet:web.anonymous_actions[1]: ") and "view-reservations" in p, p
    [p] = problems(web_raw(anonymous_actions=["view-jobs", "view-jobs"]))
    assert p.startswith("gpu-fleet:web.anonymous_actions: ['view-jobs', 'view-jobs']: name each"), p
    [p] = problems(web_raw(anonymous_actions=[]))
    assert "at least one" in p, p


@pytest.mark.parametrize("url", ["ftp://ctl:8080", "http://ctl:8080/a b", "http://ctl:99999", "ctl:8080",
                                 "http://[fe80::1%eth0]:8080"])
def test_a_public_url_that_is_not_http_is_refused(url):
    [p] = problems(web_raw(public_url=url))
    assert p.startswith("gpu-fleet:web.public_url: ") and "http:// or https:// URL" in p, p


def test_the_ui_calls_loopback_the_tailnet_or_the_declared_url():
    assert CFG.web.url() == "http://127.0.0.1:8080"
    tn = parse_fleet_config(web_raw(tailnet={"address": "fd7a:115c:a1e0::b", "change_id": "t1"}), "canary")
    assert tn.web.url() == "http://[fd7a:115c:a1e0::b]:8080"
    pub = parse_fleet_config(web_raw(public_url="https://slurm.example.org/web"), "canary")
    assert pub.web.url() == "https://slurm.example.org/web"
    assert "host=https://slurm.example.org/web\n" in render_gateway_ini(pub.web)


def test_an_unknown_web_field_is_refused():
    [p] = problems(web_raw(listen_address="0.0.0.0"))
    assert p == "gpu-fleet:web.listen_address: unknown field", p


# ---- renderers --------------------------------------------------------------------------------

@pytest.mark.parametrize("component", [AGENT, GATEWAY])
def test_golden_container_units(component):
    check_golden(f"web.{render.NAMES[component]}.service", render_container_unit(SPECS[component]))


@pytest.mark.parametrize("name, text", [
    ("web.agent.ini.in", render_agent_ini(CFG.web, "gpu-fleet", "/run/slurmrestd/slurmrestd.socket")),
    ("web.gateway.ini", render_gateway_ini(CFG.web)), ("web.policy.ini", render_policy_ini(CFG.web))])
def test_golden_slurm_web_settings(name, text):
    check_golden(name, text)


def test_the_settings_files_land_in_each_components_directory():
    files = config_files(CFG.web, "gpu-fleet", "/run/slurmrestd/slurmrestd.socket")
    assert sorted(files) == [AGENT_TEMPLATE, "/etc/gpu-fleet/web/agent/policy.ini",
                             "/etc/gpu-fleet/web/gateway/gateway.ini"]
    assert "jwt_token=@SLURM_JWT@\n" in files[AGENT_TEMPLATE]
    one = parse_fleet_config(web_raw(anonymous_actions=["view-nodes"]), "canary")
    assert "[anonymous]\nactions=view-nodes\n" in render_policy_ini(one.web)


@pytest.mark.parametrize("name, fn", [
    ("web.containers.conf", render_containers_conf), ("web.registries.conf", render_registries_conf),
    ("web.gpu-fleet-web-token.service", render_token_unit), ("web.gpu-fleet-web-token.timer", render_token_timer),
    ("web.gpu-fleet-web-health.service", lambda _: render_health_unit()),
    ("web.gpu-fleet-web-health.timer", render_health_timer)])
def test_golden_engine_and_timers(name, fn):
    check_golden(name, fn(CFG.web))


def test_every_hardening_flag_is_on_the_run_line():
    argv = podman_run_argv(SPECS[GATEWAY])
    for flag in ("--read-only", "--read-only-tmpfs=false", "--cap-drop=ALL", "--security-opt=no-new-privileges",
                 "--user=64210:64210", "--memory=256m", "--memory-swap=256m", "--pids-limit=128", "--cpus=0.5",
                 "--publish=127.0.0.1:8080:5011/tcp", "--network=gpu-fleet-web-ingress",
                 "--network=gpu-fleet-web-internal", "--label=io.gpu-fleet.config=" + "b" * 16):
        assert flag in argv, flag
    assert argv[-3:] == [GATEWAY_IMG, "--conf", "/run/secrets/slurm-web/gateway.ini"]
    assert not any(a.startswith("--cap-add") for a in argv)


def test_the_agent_has_no_port_and_never_the_signing_key():
    a = SPECS[AGENT]
    assert a["publish"] == [] and a["networks"] == ["gpu-fleet-web-internal"]
    assert all(m["ro"] for m in a["mounts"])
    assert not any("/etc/slurm" == m["source"] or "/etc/slurm/" in m["source"] or m["source"] in ("/", "/etc")
                   for s in SPECS.values() for m in s["mounts"])
    assert "jwt_hs256" not in render_container_unit(a)
    # the seed's trap: settings and keys are a directory per component, never a file under the image's own dir
    for c in (AGENT, GATEWAY):
        [secret] = [m for m in SPECS[c]["mounts"] if m["kind"] == "secret"]
        assert secret["source"] == f"/etc/gpu-fleet/web/{c}" and secret["target"] == "/run/secrets/slurm-web"


def test_the_token_is_renewed_before_it_expires():
    assert "OnUnitActiveSec=2700s" in render_token_timer(CFG.web)  # 3600 - 900
    assert ("slurmweb 3600 /etc/gpu-fleet/web/agent.ini.in /etc/gpu-fleet/web/agent/agent.ini 64210 "
            "/run/gpu-fleet-web.lock slurm-web-agent.service slurm-web-gateway.service") in render_token_unit(CFG.web)


def test_real_fleet_defaults_keep_podmans_own_settings():
    cfg = parse_fleet_config(web_raw(), "canary")
    text = render_containers_conf(cfg.web)
    assert 'cgroup_manager = "systemd"' in text
    assert "keyring" not in text and "default_sysctls" not in text


# ---- readback judge ---------------------------------------------------------------------------

def readback(spec, **over) -> str:
    """readback.sh's output for a container that is exactly `spec`, with `over` changed."""
    lim = spec["limits"]
    inspect = {
        "Image": "c0ffee", "ImageDigest": spec["image"].rsplit("@", 1)[1],
        "State": {"Running": over.get("running", True), "Pid": 4242},
        "Config": {"User": spec["user"]},
        "HostConfig": {"ReadonlyRootfs": over.get("read_only", True),
                       "SecurityOpt": ["no-new-privileges"],
                       "PortBindings": over.get("ports", {f"{p['container_port']}/tcp": [
                           {"HostIp": p["address"], "HostPort": str(p["host_port"])}] for p in spec["publish"]}),
                       "Tmpfs": {"/tmp": "rw"}},
        "Mounts": over.get("mounts", [{"Source": m["source"], "Destination": m["target"], "RW": not m["ro"]}
                                      for m in spec["mounts"]]),
        "NetworkSettings": {"Networks": {n: {} for n in spec["networks"]}},
    }
    uid, gid = over.get("user", spec["user"]).split(":")
    return "\n".join([
        "== unit", "active", "enabled", "== inspect", json.dumps([inspect]), "== status",
        f"Uid:\t{uid}\t{uid}\t{uid}\t{uid}", f"Gid:\t{gid}\t{gid}\t{gid}\t{gid}",
        f"CapEff:\t{over.get('cap_eff', '0000000000000000')}", "CapBnd:\t0000000000000000",
        f"NoNewPrivs:\t{over.get('nnp', 1)}", "== limits",
        f"memory {over.get('memory', lim['memory_mb'] * 2**20)}", f"pids {over.get('pids', lim['pids'])}",
        f"cpu {over.get('quota', int(lim['cpus'] * 100000))} 100000", ""])


@pytest.mark.parametrize("component", [AGENT, GATEWAY])
def test_a_container_that_is_its_spec_passes(component):
    spec = SPECS[component]
    assert judge(spec, parse_readback(readback(spec))) == []


@pytest.mark.parametrize("over, needle", [
    ({"running": False}, "is not running"),
    ({"user": "0:0"}, "runs as uid:gid 0:0"),
    ({"read_only": False}, "root filesystem is writable"),
    ({"cap_eff": "00000000a80425fb"}, "capabilities: effective 00000000a80425fb"),
    ({"nnp": 0}, "no_new_privs is 0"),
    ({"memory": 9223372036854771712}, "memory limit in the kernel is None"),
    ({"pids": "max"}, "pids.max in the kernel is None"),
    ({"quota": -1}, "CPU quota in the kernel is None"),
    ({"ports": {"8080/tcp": [{"HostIp": "", "HostPort": "8080"}]}}, "published ports are"),
    ({"mounts": [{"Source": "/etc/slurm", "Destination": "/etc/slurm", "RW": False}]}, "mounts are"),
])
def test_the_judge_names_what_differs(over, needle):
    spec = SPECS[GATEWAY]
    got = judge(spec, parse_readback(readback(spec, **over)))
    assert any(needle in p for p in got), got


def test_a_container_pinned_elsewhere_is_named_with_both_digests():
    spec = copy.deepcopy(SPECS[AGENT])
    text = readback(spec)
    spec["image"] = spec["image"].rsplit("@", 1)[0] + "@sha256:" + "c" * 64
    [p] = judge(spec, parse_readback(text))
    assert p == f"image digest is sha256:{'a' * 64}, the stack pins sha256:{'c' * 64}"


def test_an_absent_container_is_one_problem():
    obs = parse_readback("== unit\ninactive\ndisabled\n== absent\n")
    assert judge(SPECS[AGENT], obs) == ["container slurm-web-agent does not exist"]


# ---- the outside check ------------------------------------------------------------------------

CHECK_OK = """== page
index 200
app True
asset /assets/index-Dm3x1Q.js 200
== config
http://127.0.0.1:8080
== http
GET /api/anonymous 200
GET /api/version 200
GET /api/clusters 200
GET /api/agents/gpu-fleet/ping 200
GET /api/agents/gpu-fleet/stats 200
GET /api/agents/gpu-fleet/jobs 200
GET /api/agents/gpu-fleet/nodes 200
GET /api/agents/gpu-fleet/partitions 200
GET /api/agents/gpu-fleet/qos 200
GET /api/agents/gpu-fleet/reservations 200
GET /api/agents/gpu-fleet/accounts 200
GET /api/agents/gpu-fleet/associations 403
GET /api/agents/gpu-fleet/cache/stats 403
POST /api/agents/gpu-fleet/cache/reset 403
POST /api/agents/gpu-fleet/jobs 405
DELETE /api/agents/gpu-fleet/jobs 405
PUT /api/agents/gpu-fleet/nodes 405
PATCH /api/agents/gpu-fleet/partitions 405
GET /api/users 501
== clusters
[{"name": "gpu-fleet", "permissions": {"roles": ["anonymous"], "actions": ["view-jobs"]}}]
== nodes
[{"name": "gpu01", "state": ["IDLE"], "gres": "gpu:v100:8"}]
== versions
{"slurm": "24.11.5", "api": "0.0.41"}
== lan
10.213.57.11 ConnectionRefusedError
== listen
127.0.0.1:3306 users:(("mariadbd",pid=1,fd=20))
127.0.0.1:8080 users:(("conmon",pid=7,fd=5))
"""
VIEWS = list(CFG.web.anonymous_actions)


def judged(text: str, actions=VIEWS, tailnet=None, url="http://127.0.0.1:8080") -> list[str]:
    return check_problems(parse_check(text), port=8080, cluster="gpu-fleet", url=url, actions=actions,
                          slurm_nodes=["gpu01"], tailnet=tailnet)


def test_the_check_passes_a_read_only_loopback_view():
    assert judged(CHECK_OK) == []
    assert parse_check(CHECK_OK)["versions"] == {"slurm": "24.11.5", "api": "0.0.41"}


@pytest.mark.parametrize("old, new, needle", [
    ("POST /api/agents/gpu-fleet/jobs 405", "POST /api/agents/gpu-fleet/jobs 200",
     "POST /api/agents/gpu-fleet/jobs through the gateway answered 200"),
    ("associations 403", "associations 200", "answered 200, not 403 (associations-view is not granted"),
    ("cache/reset 403", "cache/reset 200", "cache/reset through the gateway answered 200"),
    ("GET /api/agents/gpu-fleet/qos 200", "GET /api/agents/gpu-fleet/qos 500", "qos answered 500, not 200"),
    ("GET /api/anonymous 200", "GET /api/anonymous 401", "GET /api/anonymous answered 401"),
    ('"name": "gpu-fleet"', '"name": "other"', "not gpu-fleet (its agent unreachable?)"),
    ("app True", "app False", "without Slurm-web's app element"),
    ("js 200", "js 404", "the page's script /assets/index-Dm3x1Q.js answered 404"),
    ("== config\nhttp://127.0.0.1:8080", "== config\nhttp://localhost:5011", "not 'http://127.0.0.1:8080'"),
    ("10.213.57.11 ConnectionRefusedError", "10.213.57.11 open", "port 8080 answers on 10.213.57.11"),
    ("127.0.0.1:8080 users", "0.0.0.0:8080 users", "port 8080 is bound on 0.0.0.0:8080"),
    ('127.0.0.1:3306 users:(("mariadbd"', '10.0.0.1:6820 users:(("slurmrestd"', "slurmrestd"),
    ('"name": "gpu01"', '"name": "gpu02"', "does not list Slurm node(s) gpu01"),
    ("ping 200", "ping 500", "ping answered 500, slurmrestd API '0.0.41'"),
    ('"api": "0.0.41"', '"api": "0.0.40"', "slurmrestd API '0.0.40': the agent must have discovered one of 0.0.41"),
    ('{"slurm": "24.11.5", "api": "0.0.41"}', "{}", "slurmrestd API None"),
])
def test_the_check_names_what_it_refuses(old, new, needle):
    assert old in CHECK_OK
    got = judged(CHECK_OK.replace(old, new))
    assert any(needle in p for p in got), got


def test_a_view_not_granted_must_be_refused():
    got = judged(CHECK_OK, actions=[a for a in VIEWS if a != "view-qos"])
    assert got == ["GET /api/agents/gpu-fleet/qos answered 200, not 403 (view-qos is not granted to anonymous)"]
    assert judged(CHECK_OK.replace("qos 200", "qos 403"), actions=[a for a in VIEWS if a != "view-qos"]) == []


# ---- the tailnet exposure -------------------------------------------------------------------

def test_a_tailnet_address_outside_the_tailnet_ranges_is_refused():
    [p] = problems(web_raw(tailnet={"address": "10.0.0.5", "change_id": "t1"}))
    assert p == ("gpu-fleet:web.tailnet.address: '10.0.0.5' is not a tailnet address (an IP address in "
                 "100.64.0.0/10 or fd7a:115c:a1e0::/48)"), p
    [p] = problems(web_raw(tailnet={"address": "100.64.0.11"}))
    assert p == "gpu-fleet:web.tailnet.change_id: required field is missing", p


def test_the_tailnet_adds_one_published_address_to_the_gateway_only():
    cfg = parse_fleet_config(web_raw(tailnet={"address": "100.64.0.11", "change_id": "t1"}), "canary")
    specs = container_specs(cfg.web, "/run/slurmrestd", "/etc/slurm/jwt_hs256.key", SHA)
    assert specs[GATEWAY]["publish"] == [{"address": a, "host_port": 8080, "container_port": 5011}
                                         for a in ("127.0.0.1", "100.64.0.11")]
    assert specs[GATEWAY]["tailnet"] == "100.64.0.11"
    assert specs[AGENT] == SPECS[AGENT] or {k for k in specs[AGENT] if specs[AGENT][k] != SPECS[AGENT][k]} <= {"image"}
    assert "--publish=100.64.0.11:8080:5011/tcp" in podman_run_argv(specs[GATEWAY])
    v6 = parse_fleet_config(web_raw(tailnet={"address": "fd7a:115c:a1e0::b", "change_id": "t1"}), "canary")
    assert "--publish=[fd7a:115c:a1e0::b]:8080:5011/tcp" in podman_run_argv(
        container_specs(v6.web, "/run/slurmrestd", "/k", SHA)[GATEWAY])


def test_the_check_allows_the_declared_tailnet_binding_only():
    text = CHECK_OK.replace("127.0.0.1:8080 users", "100.64.0.11:8080 users")
    assert judged(text, tailnet="100.64.0.11") == []
    assert judged(text) == ["port 8080 is bound on 100.64.0.11:8080, not on loopback"]


def test_the_exposure_counts_only_with_its_marker_and_no_other_address_open():
    from components.layers.web.tailnet import exposed_as_declared, parse_states
    ok = "marker yes\nloopback 127.0.0.1 open\ntailnet 100.64.0.11 open\nother 10.213.57.11 ConnectionRefusedError\n"
    assert exposed_as_declared(parse_states(ok), "100.64.0.11")
    assert not exposed_as_declared(parse_states(ok.replace("marker yes", "marker no")), "100.64.0.11")
    assert not exposed_as_declared(parse_states(ok.replace("ConnectionRefusedError", "open")), "100.64.0.11")
    assert not exposed_as_declared(parse_states(ok.replace("tailnet 100.64.0.11 open", "tailnet 100.64.0.11 TimeoutError")),
                                   "100.64.0.11")
