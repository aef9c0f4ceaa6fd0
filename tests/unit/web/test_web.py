"""The web layer's pure parts: config rules, golden units, the readback judge and the check.

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
    AGENT, GATEWAY, container_specs, podman_run_argv, render_container_unit, render_containers_conf,
    render_health_timer, render_health_unit, render_registries_conf, render_token_timer, render_token_unit,
)
from components.layers.web.runtime import judge, parse_readback
from tests.conftest import stack_config
from tests.unit.slurm.test_slurm_render import check_golden

AGENT_IMG = "storage:5000/gpu-fleet/slurm-web-agent@sha256:" + "a" * 64
GATEWAY_IMG = "storage:5000/gpu-fleet/slurm-web-gateway@sha256:" + "b" * 64


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
SPECS = container_specs(CFG.web, "/run/slurmrestd", "/etc/slurm/jwt_hs256.key")


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


def test_an_unknown_web_field_is_refused():
    [p] = problems(web_raw(listen_address="0.0.0.0"))
    assert p == "gpu-fleet:web.listen_address: unknown field", p


# ---- renderers --------------------------------------------------------------------------------

@pytest.mark.parametrize("component", [AGENT, GATEWAY])
def test_golden_container_units(component):
    check_golden(f"web.{render.NAMES[component]}.service", render_container_unit(SPECS[component]))


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
                 "--publish=127.0.0.1:8080:8080/tcp", "--network=gpu-fleet-web-ingress",
                 "--network=gpu-fleet-web-internal"):
        assert flag in argv, flag
    assert argv[-1] == GATEWAY_IMG
    assert not any(a.startswith("--cap-add") for a in argv)


def test_the_agent_has_no_port_and_never_the_signing_key():
    a = SPECS[AGENT]
    assert a["publish"] == [] and a["networks"] == ["gpu-fleet-web-internal"]
    assert all(m["ro"] for m in a["mounts"])
    assert not any("/etc/slurm" == m["source"] or "/etc/slurm/" in m["source"] or m["source"] in ("/", "/etc")
                   for s in SPECS.values() for m in s["mounts"])
    assert "jwt_hs256" not in render_container_unit(a)
    # the seed's trap: the token is a directory per component, never a file under the image's own dir
    [secret] = [m for m in a["mounts"] if m["kind"] == "secret"]
    assert secret["source"] == "/etc/gpu-fleet/web/agent" and secret["target"] == "/run/secrets/slurm-web"


def test_the_token_is_renewed_before_it_expires():
    assert "OnUnitActiveSec=2700s" in render_token_timer(CFG.web)  # 3600 - 900
    assert "slurmweb 3600 /etc/gpu-fleet/web/agent/token 64210" in render_token_unit(CFG.web)


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

CHECK_OK = """== http
GET / 200
GET /api/nodes 200
GET /api/partitions 200
GET /api/jobs 200
POST /api/jobs 403
DELETE /api/jobs/1 403
PUT /api/nodes 403
PATCH /api/nodes 403
== page
has-nodes-table True
== nodes
{"nodes": [{"name": "gpu01", "state": "idle", "gres": "gpu:v100:8"}]}
== lan
10.213.57.11 ConnectionRefusedError
== listen
127.0.0.1:3306 users:(("mariadbd",pid=1,fd=20))
127.0.0.1:8080 users:(("conmon",pid=7,fd=5))
"""


def test_the_check_passes_a_read_only_loopback_view():
    assert check_problems(parse_check(CHECK_OK), 8080, ["gpu01"]) == []


@pytest.mark.parametrize("old, new, needle", [
    ("POST /api/jobs 403", "POST /api/jobs 200", "POST /api/jobs through the gateway answered 200"),
    ("10.213.57.11 ConnectionRefusedError", "10.213.57.11 open", "port 8080 answers on 10.213.57.11"),
    ("127.0.0.1:8080 users", "0.0.0.0:8080 users", "port 8080 is bound on 0.0.0.0:8080"),
    ('127.0.0.1:3306 users:(("mariadbd"', '10.0.0.1:6820 users:(("slurmrestd"', "slurmrestd"),
    ("GET /api/jobs 200", "GET /api/jobs 502", "GET http://127.0.0.1:8080/api/jobs answered 502"),
    ('"name": "gpu01"', '"name": "gpu02"', "does not list Slurm node(s) gpu01"),
])
def test_the_check_names_what_it_refuses(old, new, needle):
    got = check_problems(parse_check(CHECK_OK.replace(old, new)), 8080, ["gpu01"])
    assert any(needle in p for p in got), got


# ---- the tailnet exposure -------------------------------------------------------------------

def test_a_tailnet_address_outside_the_tailnet_ranges_is_refused():
    [p] = problems(web_raw(tailnet={"address": "10.0.0.5", "change_id": "t1"}))
    assert p == ("gpu-fleet:web.tailnet.address: '10.0.0.5' is not a tailnet address (an IP address in "
                 "100.64.0.0/10 or fd7a:115c:a1e0::/48)"), p
    [p] = problems(web_raw(tailnet={"address": "100.64.0.11"}))
    assert p == "gpu-fleet:web.tailnet.change_id: required field is missing", p


def test_the_tailnet_adds_one_published_address_to_the_gateway_only():
    cfg = parse_fleet_config(web_raw(tailnet={"address": "100.64.0.11", "change_id": "t1"}), "canary")
    specs = container_specs(cfg.web, "/run/slurmrestd", "/etc/slurm/jwt_hs256.key")
    assert specs[GATEWAY]["publish"] == [{"address": a, "host_port": 8080, "container_port": 8080}
                                         for a in ("127.0.0.1", "100.64.0.11")]
    assert specs[GATEWAY]["tailnet"] == "100.64.0.11"
    assert specs[AGENT] == SPECS[AGENT] or {k for k in specs[AGENT] if specs[AGENT][k] != SPECS[AGENT][k]} <= {"image"}
    assert "--publish=100.64.0.11:8080:8080/tcp" in podman_run_argv(specs[GATEWAY])
    v6 = parse_fleet_config(web_raw(tailnet={"address": "fd7a:115c:a1e0::b", "change_id": "t1"}), "canary")
    assert "--publish=[fd7a:115c:a1e0::b]:8080:8080/tcp" in podman_run_argv(
        container_specs(v6.web, "/run/slurmrestd", "/k")[GATEWAY])


def test_the_check_allows_the_declared_tailnet_binding_only():
    text = CHECK_OK.replace("127.0.0.1:8080 users", "100.64.0.11:8080 users")
    assert check_problems(parse_check(text), 8080, ["gpu01"], "100.64.0.11") == []
    assert check_problems(parse_check(text), 8080, ["gpu01"]) == ["port 8080 is bound on 100.64.0.11:8080, not on loopback"]


def test_the_exposure_counts_only_with_its_marker_and_no_other_address_open():
    from components.layers.web.tailnet import exposed_as_declared, parse_states
    ok = "marker yes\nloopback 127.0.0.1 open\ntailnet 100.64.0.11 open\nother 10.213.57.11 ConnectionRefusedError\n"
    assert exposed_as_declared(parse_states(ok), "100.64.0.11")
    assert not exposed_as_declared(parse_states(ok.replace("marker yes", "marker no")), "100.64.0.11")
    assert not exposed_as_declared(parse_states(ok.replace("ConnectionRefusedError", "open")), "100.64.0.11")
    assert not exposed_as_declared(parse_states(ok.replace("tailnet 100.64.0.11 open", "tailnet 100.64.0.11 TimeoutError")),
                                   "100.64.0.11")
