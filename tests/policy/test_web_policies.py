"""The web view's policies (issue 15), called directly: the agent and the gateway as the web
layer's spec declares them pass, each broken rule fails with a sentence naming the resource,
the field, the bad value and what is allowed, on the declared props and on the readback
(`observed`, `problems`) once the container exists, and values unknown during preview are
skipped."""

from __future__ import annotations

import copy
import importlib
import inspect
import pkgutil

import pytest

from gpu_fleet_policies import web
from gpu_fleet_policies.pack import DESCRIPTIONS, KINDS, VALIDATORS, declared_levels

from .fakes import (
    UNKNOWN_BOOL, UNKNOWN_NUM, UNKNOWN_OBJ, UNKNOWN_STR, Secret, policy_resource, resource_args,
    stack_args, violations,
)

CTL = {"name": "ctl", "address": "10.213.57.11"}
KEY = "/etc/slurm/jwt_hs256.key"
D1 = "sha256:" + "a" * 64
D2 = "sha256:" + "b" * 64
IMAGES = {"agent": f"storage:5000/gpu-fleet/slurm-web-agent@{D1}",
          "gateway": f"storage:5000/gpu-fleet/slurm-web-gateway@{D2}"}
RESOURCE_NAMES = ("web-image-by-digest", "web-non-root-user", "web-read-only-rootfs",
                  "web-capabilities-dropped", "web-no-new-privileges", "web-resource-limits",
                  "web-ports-loopback-or-tailnet", "web-mounts-read-only", "web-no-jwt-signing-key")
RESOURCE = [web.validate_image_by_digest, web.validate_non_root_user, web.validate_read_only_rootfs,
            web.validate_capabilities_dropped, web.validate_no_new_privileges, web.validate_limits,
            web.validate_ports, web.validate_mounts_read_only, web.validate_no_signing_key]
AGENT = 'Container "slurm-web-agent" (agent on ctl)'
GATEWAY = 'Container "slurm-web-gateway" (gateway on ctl)'


def props(component="agent", **changes) -> dict:
    """A container's props as the spec declares them (the gateway publishes 8080 on loopback)."""
    gw = component == "gateway"
    out = {
        "conn": CTL, "component": component, "name": f"slurm-web-{component}",
        "unit": f"slurm-web-{component}.service", "image": IMAGES[component], "user": "10001:10001",
        "read_only": True, "tmpfs": ["/tmp", "/run"], "cap_drop": ["ALL"], "cap_add": [],
        "no_new_privileges": True, "limits": {"cpus": 0.5, "memory_mb": 256.0, "pids": 128.0},
        "mounts": [{"source": f"/etc/gpu-fleet/web/{component}", "target": "/run/secrets/slurm-web",
                    "ro": True, "kind": "secret"}]
                  + ([] if gw else [{"source": "/run/slurmrestd", "target": "/run/slurmrestd", "ro": True,
                                     "kind": "socket"}]),
        "networks": ["gpu-fleet-web-internal"] + (["gpu-fleet-web-ingress"] if gw else []),
        "publish": [{"address": "127.0.0.1", "host_port": 8080.0, "container_port": 8080.0}] if gw else [],
        "env": {"TOKEN_FILE": "/run/secrets/slurm-web/token"} if not gw else {},
        "jwt_key": KEY, "tailnet": None, "observed": None, "problems": None,
    }
    out.update(changes)
    return out


def observed(component="agent", **changes) -> dict:
    """What the readback shows for a compliant container."""
    p = props(component)
    out = {"running": True, "image_digest": p["image"].partition("@")[2], "user": "10001:10001",
           "read_only": True, "cap_eff": web.NO_CAPS, "no_new_privs": 1.0,
           "memory_limit_bytes": 268435456.0, "pids_max": 128.0, "cpu_quota_us": 50000.0,
           "cpu_period_us": 100000.0,
           "mounts": [{k: m[k] for k in ("source", "target", "ro")} for m in p["mounts"]],
           "networks": p["networks"], "ports": copy.deepcopy(p["publish"])}
    out.update(changes)
    return out


def container(component="agent", **changes):
    return resource_args(web.CONTAINER, props(component, **changes), f"slurm-web-{component}")


def created(component="agent", *, problems=(), readback=None, declared=None, **changes):
    """The stack after the container's create or refresh, as a stack policy sees it: its
    outputs, the readback known (`readback`, or a compliant one with `changes`)."""
    outs = props(component, observed=readback or observed(component, **changes), problems=list(problems),
                 **(declared or {}))
    return stack_args(policy_resource(web.CONTAINER, outs, f"slurm-web-{component}"))


def readback(args) -> list[str]:
    return violations(web.validate_readback, args)


def all_violations(args) -> list[str]:
    return [m for v in RESOURCE for m in violations(v, args)]


def one(validator, args) -> str:
    msgs = violations(validator, args)
    assert len(msgs) == 1, msgs
    return msgs[0]


# ---- the pack ---------------------------------------------------------------------------------

def test_registered_and_mandatory():
    levels = declared_levels()
    for name in RESOURCE_NAMES + ("web-secrets-per-component", "web-readback"):
        assert name in VALIDATORS and DESCRIPTIONS[name].endswith(".")
        assert levels[name] == "mandatory"
    assert [VALIDATORS[n] for n in RESOURCE_NAMES] == RESOURCE
    assert all(KINDS[n] == "resource" for n in RESOURCE_NAMES)
    assert KINDS["web-secrets-per-component"] == KINDS["web-readback"] == "stack"  # they see outputs
    assert VALIDATORS["web-readback"] is web.validate_readback
    assert VALIDATORS["web-secrets-per-component"] is web.validate_secrets_per_component


def test_type_tokens_mirror_the_layer():
    """`web:Container` and `web:Image` as dynamic resources: the web layer's classes carry the
    same tokens."""
    assert web.CONTAINER == "pulumi-python:dynamic/web:Container"
    assert web.IMAGE == "pulumi-python:dynamic/web:Image"
    try:
        layer = importlib.import_module("components.layers.web")
    except ModuleNotFoundError:
        return  # the layer has not landed yet
    modules = [layer] + [importlib.import_module(m.name) for m in
                         pkgutil.walk_packages(getattr(layer, "__path__", []), f"{layer.__name__}.")]
    tokens = {f"pulumi-python:{cls._resource_type_name}" for mod in modules
              for _, cls in inspect.getmembers(mod, inspect.isclass) if hasattr(cls, "_resource_type_name")}
    assert {web.CONTAINER, web.IMAGE} <= tokens, tokens


@pytest.mark.parametrize("component", ["agent", "gateway"])
def test_the_spec_containers_pass(component):
    assert all_violations(container(component)) == []
    assert readback(created(component)) == []  # and their readback
    assert all_violations(resource_args(web.IMAGE, {"conn": CTL, "component": component,
                                                    "ref": IMAGES[component], "digest": None,
                                                    "pulled": None}, f"slurm-web-{component}")) == []


def test_other_types_are_not_the_web_policies_business():
    bad = props(image="nginx:latest", user="root", read_only=False, cap_drop=[], limits={})
    for rtype in ("pulumi-python:dynamic/host:File", "pulumi-python:dynamic/web:Network"):
        assert all_violations(resource_args(rtype, bad)) == []


def test_unknown_values_during_preview_are_skipped():
    unknown = container(image=UNKNOWN_STR, user=UNKNOWN_STR, read_only=UNKNOWN_BOOL, cap_drop=UNKNOWN_OBJ,
                        cap_add=UNKNOWN_OBJ, no_new_privileges=UNKNOWN_BOOL, limits=UNKNOWN_OBJ,
                        publish=UNKNOWN_OBJ, mounts=UNKNOWN_OBJ, env=UNKNOWN_OBJ, jwt_key=UNKNOWN_STR,
                        observed=UNKNOWN_OBJ, problems=UNKNOWN_OBJ)
    assert all_violations(unknown) == []
    # unknown leaves inside known lists and objects
    leaves = container("gateway", limits={"cpus": UNKNOWN_NUM, "memory_mb": 256.0, "pids": 128.0},
                       publish=[{"address": UNKNOWN_STR, "host_port": 8080.0, "container_port": 8080.0}],
                       mounts=[{"source": UNKNOWN_STR, "target": "/x", "ro": UNKNOWN_BOOL, "kind": "secret"}],
                       env={"X": UNKNOWN_STR})
    assert all_violations(leaves) == []
    # a tailnet address not known yet: a non-loopback address may be it; every interface is not
    tn = container("gateway", tailnet=UNKNOWN_STR,
                   publish=[{"address": "100.64.0.11", "host_port": 8443.0, "container_port": 8080.0}])
    assert violations(web.validate_ports, tn) == []
    tn = container("gateway", tailnet=UNKNOWN_STR,
                   publish=[{"address": "0.0.0.0", "host_port": 8443.0, "container_port": 8080.0}])
    assert len(violations(web.validate_ports, tn)) == 1


# ---- web-image-by-digest ----------------------------------------------------------------------

REPO = "storage:5000/gpu-fleet/slurm-web-agent"


@pytest.mark.parametrize("image, clause", [
    (f"{REPO}:7.0.0", "which is pinned by the tag '7.0.0' only, a name the registry can move"),
    (f"{REPO}:latest", "which is pinned by the tag 'latest' only, a name the registry can move"),
    (REPO, "which has neither tag nor digest, so it means the tag 'latest', a name the registry can move"),
    (f"{REPO}@sha256:abc123", "whose digest 'sha256:abc123' is not sha256: and 64 lower-case hex digits"),
    (f"{REPO}@sha256:{'A' * 64}", "is not sha256: and 64 lower-case hex digits"),
    (f"{REPO}@sha512:{'a' * 128}", "is not sha256: and 64 lower-case hex digits"),
    (f"{REPO}:7.0.0@{D1}", "which names a tag as well as the digest"),
    (f"@{D1}", "which names no repository before the digest"),
    ("", "which names no image"),
    (None, "which names no image"),
])
def test_an_image_not_by_digest_is_refused(image, clause):
    msg = one(web.validate_image_by_digest, container(image=image))
    assert msg.startswith(f"{AGENT} has image {image!r}, "), msg
    assert clause in msg, msg
    assert msg.endswith("; set it to <registry>/<path>@sha256:<64 hex> with no tag (the digest the "
                        "registry serves today; the lab's are in .state/lab/web-images.json)."), msg


def test_a_registry_port_is_not_a_tag():
    assert violations(web.validate_image_by_digest, container(image=f"storage:5000/slurm-web@{D1}")) == []
    assert violations(web.validate_image_by_digest, container(image=f"slurm-web@{D1}")) == []


def test_an_image_resource_is_checked_too():
    def image(ref, digest=None):
        return resource_args(web.IMAGE, {"conn": CTL, "component": "agent", "ref": ref, "digest": digest,
                                         "pulled": digest is not None}, "slurm-web-agent")
    assert violations(web.validate_image_by_digest, image(IMAGES["agent"], D1)) == []
    assert one(web.validate_image_by_digest, image(f"{REPO}:latest")).startswith(
        "Image \"slurm-web-agent\" (agent on ctl) has ref 'storage:5000/gpu-fleet/slurm-web-agent:latest', "
        "which is pinned by the tag 'latest' only")
    assert violations(web.validate_image_by_digest, image(IMAGES["agent"], D2)) == []  # an output
    pulled = policy_resource(web.IMAGE, {"conn": CTL, "component": "agent", "ref": IMAGES["agent"], "digest": D2,
                                         "pulled": True}, "slurm-web-agent")
    assert one(web.validate_readback, stack_args(pulled)) == (
        f"Image \"slurm-web-agent\" (agent on ctl) pulled digest '{D2}', not the {D1} its ref pins; pull "
        "the pinned digest (the registry must serve exactly that image).")


def test_the_observed_digest_must_be_the_pinned_one():
    assert one(web.validate_readback, created(image_digest=D2)) == (
        f"{AGENT} runs image digest '{D2}' (observed, podman inspect), not the {D1} its image pins; "
        "re-create the container from the pinned digest.")
    assert violations(web.validate_readback, created(image_digest=D1)) == []


# ---- web-non-root-user ------------------------------------------------------------------------

NOT_NUMERIC = ("which is not a numeric uid:gid (a name is resolved in the image's own /etc/passwd, a uid "
               "alone takes the image's group)")


@pytest.mark.parametrize("user, clause", [
    ("slurm-web", NOT_NUMERIC),
    ("root", NOT_NUMERIC),
    ("10001", NOT_NUMERIC),
    ("10001:web", NOT_NUMERIC),
    ("-1:10001", NOT_NUMERIC),
    ("0:0", "whose uid and gid are 0 (root's)"),
    ("0:10001", "whose uid is 0 (root's)"),
    ("10001:0", "whose gid is 0 (root's)"),
    ("00:10001", "whose uid is 0 (root's)"),
])
def test_a_user_that_is_not_numeric_and_non_zero_is_refused(user, clause):
    assert one(web.validate_non_root_user, container(user=user)) == (
        f'{AGENT} runs as user {user!r}, {clause}; set user to a numeric, non-zero uid:gid such as '
        '"10001:10001".')


@pytest.mark.parametrize("user", [None, ""])
def test_no_user_is_refused(user):
    assert one(web.validate_non_root_user, container(user=user)) == (
        f"{AGENT} sets no user, so it runs as the image's default user (often root); set user to a "
        'numeric, non-zero uid:gid such as "10001:10001".')


def test_the_observed_user():
    assert violations(web.validate_readback, created(user="10001:10001")) == []
    assert violations(web.validate_non_root_user, container(user="999:999")) == []
    assert one(web.validate_readback, created(user="0:0")) == (
        f"{AGENT} runs as user '0:0' (observed, podman inspect), whose uid and gid are 0 (root's); set "
        'user to a numeric, non-zero uid:gid such as "10001:10001", and re-create it.')
    # the image's own user (999), not the declared one: the seed's trap
    assert one(web.validate_readback, created(user="999:999")) == (
        f"{AGENT} runs as user '999:999' (observed, podman inspect), not the declared '10001:10001'; "
        "re-create the container with its declared user.")


# ---- web-read-only-rootfs ---------------------------------------------------------------------

@pytest.mark.parametrize("value", [False, None, "true"])
def test_a_writable_rootfs_is_refused(value):
    assert one(web.validate_read_only_rootfs, container(read_only=value)) == (
        f"{AGENT} has read_only {value!r}, so its root filesystem is writable; set read_only=True (the "
        "paths it writes are tmpfs mounts).")


def test_the_observed_rootfs():
    assert violations(web.validate_readback, created()) == []
    assert one(web.validate_readback, created(read_only=False)) == (
        f"{AGENT} runs with read_only False (observed, podman inspect), so its root filesystem is "
        "writable; set read_only=True (the paths it writes are tmpfs mounts) and re-create it.")


# ---- web-capabilities-dropped -----------------------------------------------------------------

@pytest.mark.parametrize("drop", [["all"], ["ALL", "NET_RAW"], [" All "]])
def test_drop_all_in_any_case_passes(drop):
    assert violations(web.validate_capabilities_dropped, container(cap_drop=drop)) == []


@pytest.mark.parametrize("drop", [[], None, ["NET_RAW", "SYS_ADMIN"], ["CAP_ALL"]])
def test_not_dropping_all_is_refused(drop):
    assert one(web.validate_capabilities_dropped, container(cap_drop=drop)) == (
        f"{AGENT} has cap_drop {drop!r}, which does not drop ALL, so it keeps podman's default "
        'capabilities; set cap_drop=["ALL"].')


def test_adding_a_capability_is_refused():
    assert one(web.validate_capabilities_dropped, container(cap_add=["NET_BIND_SERVICE"])) == (
        f"{AGENT} adds capabilities ['NET_BIND_SERVICE'] (cap_add); a web container runs with none (its "
        "ports are above 1024): set cap_add=[].")
    assert violations(web.validate_capabilities_dropped, container(cap_add=None)) == []


@pytest.mark.parametrize("eff", ["00000000a80425fb", "0000000000000400", "", "none", None])
def test_observed_capabilities_must_be_none(eff):
    assert one(web.validate_readback, created(cap_eff=eff)) == (
        f"{AGENT} runs with effective capabilities {eff!r} (observed CapEff), not 0000000000000000; drop "
        "ALL, add none, and re-create it.")
    assert violations(web.validate_readback, created(cap_eff="0000000000000000")) == []


# ---- web-no-new-privileges --------------------------------------------------------------------

@pytest.mark.parametrize("value", [False, None])
def test_without_no_new_privileges_is_refused(value):
    assert one(web.validate_no_new_privileges, container(no_new_privileges=value)) == (
        f"{AGENT} has no_new_privileges {value!r}; set no_new_privileges=True, so no setuid binary in "
        "the image gains privileges.")


@pytest.mark.parametrize("value", [0.0, None])
def test_observed_no_new_privs_must_be_one(value):
    assert one(web.validate_readback, created(no_new_privs=value)) == (
        f"{AGENT} runs with NoNewPrivs {value!r} (observed, /proc/<pid>/status), not 1; set "
        "no_new_privileges=True, so no setuid binary in the image gains privileges, and re-create it.")
    assert violations(web.validate_readback, created(no_new_privs=1.0)) == []


# ---- web-resource-limits ----------------------------------------------------------------------

@pytest.mark.parametrize("limits, shown", [
    ({"cpus": 0.0, "memory_mb": 256.0, "pids": 128.0}, "cpus=0.0"),
    ({"memory_mb": 256.0, "pids": 128.0}, "cpus=None"),
    ({"cpus": 0.5, "memory_mb": -1.0, "pids": 0.0}, "memory_mb=-1.0, pids=0.0"),
    ({"cpus": "1", "memory_mb": True, "pids": 128.0}, "cpus='1', memory_mb=True"),
    ({}, "cpus=None, memory_mb=None, pids=None"),
])
def test_missing_or_zero_limits_are_refused(limits, shown):
    assert one(web.validate_limits, container(limits=limits)) == (
        f"{AGENT} has limits {shown}: every web container has a CPU, memory and PID limit above 0; set "
        "limits.cpus, limits.memory_mb and limits.pids to values above 0.")


def test_no_limits_at_all_is_refused():
    assert one(web.validate_limits, container(limits=None)) == (
        f"{AGENT} sets no limits (None), so it may take every CPU, all memory and PIDs; set limits.cpus, "
        "limits.memory_mb and limits.pids to values above 0.")


def test_observed_limits():
    assert violations(web.validate_readback, created()) == []
    assert one(web.validate_readback, created(cpu_quota_us=-1.0, memory_limit_bytes=0.0)) == (
        f"{AGENT} runs with cpu_quota_us=-1.0, memory_limit_bytes=0.0 (observed, its cgroup), so a limit "
        "is not in force (0 or -1 is unlimited); set limits.cpus, limits.memory_mb and limits.pids to "
        "values above 0 and re-create it.")
    assert "pids_max=None" in one(web.validate_readback, created(pids_max=None))


# ---- web-ports-loopback-or-tailnet ------------------------------------------------------------

def publish(*addresses):
    return [{"address": a, "host_port": 8080.0, "container_port": 8080.0} for a in addresses]


@pytest.mark.parametrize("address", ["127.0.0.1", "::1", "[::1]", "127.0.0.2"])
def test_loopback_ports_pass(address):
    assert violations(web.validate_ports, container("gateway", publish=publish(address))) == []


@pytest.mark.parametrize("tailnet", ["100.64.0.11", "fd7a:115c:a1e0::b"])
def test_the_declared_tailnet_address_passes(tailnet):
    c = container("gateway", tailnet=tailnet, publish=publish("127.0.0.1", tailnet))
    assert violations(web.validate_ports, c) == []


FIX = ("publish on 127.0.0.1 (or ::1), or on the tailnet address declared in tailnet (100.64.0.0/10 or "
       "fd7a:115c:a1e0::/48).")


@pytest.mark.parametrize("address, shown, clause", [
    ("0.0.0.0", "'0.0.0.0'", "which is every interface of the host"),
    ("::", "'::'", "which is every interface of the host"),
    ("", "an empty address", "which is every interface of the host"),
    (None, "an empty address", "which is every interface of the host"),
    ("10.213.57.11", "'10.213.57.11'",
     "which is neither loopback nor the container's declared tailnet address (it declares none)"),
    ("localhost", "'localhost'",
     "which is neither loopback nor the container's declared tailnet address (it declares none)"),
])
def test_ports_on_other_addresses_are_refused(address, shown, clause):
    assert one(web.validate_ports, container("gateway", publish=publish(address))) == (
        f"{GATEWAY} publishes host port 8080 on {shown} (publish), {clause}; {FIX}")


def test_a_lan_address_is_not_the_tailnet():
    c = container("gateway", tailnet="100.64.0.11", publish=publish("10.213.57.11"))
    assert one(web.validate_ports, c) == (
        f"{GATEWAY} publishes host port 8080 on '10.213.57.11' (publish), which is neither loopback nor "
        f"the container's declared tailnet address (100.64.0.11); {FIX}")


@pytest.mark.parametrize("tailnet", ["10.213.57.11", "0.0.0.0", "tailnet"])
def test_a_tailnet_that_is_no_tailnet_address_is_refused(tailnet):
    msg = one(web.validate_ports, container("gateway", tailnet=tailnet, publish=publish(tailnet)))
    assert msg.startswith(f"{GATEWAY} publishes host port 8080 on {tailnet!r} (publish), "), msg
    assert msg.endswith(FIX), msg


def test_observed_ports():
    assert violations(web.validate_readback, created("gateway")) == []
    assert one(web.validate_readback, created("gateway", ports=publish(""))) == (
        f"{GATEWAY} publishes host port 8080 on an empty address (observed.ports, podman inspect), "
        f"which is every interface of the host; {FIX}")
    assert readback(created("gateway", declared={"tailnet": "100.64.0.11"}, ports=publish("100.64.0.11"))) == []


# ---- web-mounts-read-only ---------------------------------------------------------------------

def test_a_writable_mount_is_refused():
    mounts = props()["mounts"]
    mounts[1] = {**mounts[1], "ro": False}
    assert one(web.validate_mounts_read_only, container(mounts=mounts)) == (
        f"{AGENT} mounts '/run/slurmrestd' at '/run/slurmrestd' read-write (ro is False); every mount of "
        "a web container is read-only: set ro=True.")
    del mounts[1]["ro"]  # podman's default is read-write
    assert "(ro is None)" in one(web.validate_mounts_read_only, container(mounts=mounts))


def test_an_observed_writable_mount_is_refused():
    obs = observed()
    obs["mounts"][0]["ro"] = False
    assert one(web.validate_readback, created(readback=obs)) == (
        f"{AGENT} mounts '/etc/gpu-fleet/web/agent' at '/run/secrets/slurm-web' read-write (observed, "
        "podman inspect) (ro is False); every mount of a web container is read-only: set ro=True.")
    assert violations(web.validate_readback, created()) == []


# ---- web-secrets-per-component (stack) --------------------------------------------------------

def stack(agent_secret="/etc/gpu-fleet/web/agent", gateway_secret="/etc/gpu-fleet/web/gateway"):
    def res(component, source):
        mounts = [{"source": source, "target": "/run/secrets/slurm-web", "ro": True, "kind": "secret"}]
        return policy_resource(web.CONTAINER, props(component, mounts=mounts), f"slurm-web-{component}")
    return violations(web.validate_secrets_per_component,
                      stack_args(res("agent", agent_secret), res("gateway", gateway_secret)))


FIX_SECRETS = ("give each component a secret directory of its own (/etc/gpu-fleet/web/<component>) and "
               "mount that directory.")


@pytest.mark.parametrize("agent, gateway", [
    ("/etc/gpu-fleet/web/agent", "/etc/gpu-fleet/web/gateway"),
    ("/etc/gpu-fleet/web/agent/token", "/etc/gpu-fleet/web/gateway"),   # a file in its own directory
    ("/etc/gpu-fleet/web/agent/token", "/etc/gpu-fleet/web/gateway/token"),
    ("/etc/gpu-fleet/web/agent/", "/etc/gpu-fleet/web//gateway"),
    ("/etc/gpu-fleet/web/agent", "/etc/gpu-fleet/web/agent2"),          # path components, not prefixes
])
def test_secret_directories_per_component_pass(agent, gateway):
    assert stack(agent, gateway) == []


def test_the_same_secret_directory_is_refused():
    assert stack("/etc/gpu-fleet/web", "/etc/gpu-fleet/web") == [
        f"{AGENT} mounts /etc/gpu-fleet/web, the same secret source as {GATEWAY}'s /etc/gpu-fleet/web, so "
        f"each can read the other's secrets; {FIX_SECRETS}"]


def test_a_secret_directory_holding_another_components_is_refused():
    assert stack("/etc/gpu-fleet/web/agent", "/etc/gpu-fleet/web") == [
        f"{AGENT} mounts /etc/gpu-fleet/web/agent, a secret source inside {GATEWAY}'s /etc/gpu-fleet/web, "
        f"so each can read the other's secrets; {FIX_SECRETS}"]
    assert stack("/etc/gpu-fleet", "/etc/gpu-fleet/web/gateway/token") == [
        f"{AGENT} mounts /etc/gpu-fleet, a secret source that holds {GATEWAY}'s "
        f"/etc/gpu-fleet/web/gateway/token, so each can read the other's secrets; {FIX_SECRETS}"]


@pytest.mark.parametrize("agent, gateway", [
    ("/etc/gpu-fleet/web/token", "/etc/gpu-fleet/web/gateway"),
    ("/etc/gpu-fleet/web/agent-token", "/etc/gpu-fleet/web/gateway-token"),
    ("/etc/gpu-fleet/web/agent.jwt", "/etc/gpu-fleet/web/gateway.jwt"),
])
def test_a_secret_file_in_a_shared_directory_is_refused(agent, gateway):
    assert stack(agent, gateway) == [
        f"{AGENT} mounts the secret file {agent} from /etc/gpu-fleet/web, a directory that also holds "
        f"{GATEWAY}'s secret {gateway}; {FIX_SECRETS}"]


def test_secrets_per_component_skips_what_is_unknown():
    assert stack(UNKNOWN_STR, "/etc/gpu-fleet/web") == []
    c = policy_resource(web.CONTAINER, props("agent", mounts=UNKNOWN_OBJ), "slurm-web-agent")
    g = policy_resource(web.CONTAINER, props("gateway"), "slurm-web-gateway")
    assert violations(web.validate_secrets_per_component, stack_args(c, g)) == []
    # socket and config mounts are not secrets
    sock = policy_resource(web.CONTAINER, props("gateway", mounts=[
        {"source": "/run/slurmrestd", "target": "/run/slurmrestd", "ro": True, "kind": "socket"}]), "gw")
    assert violations(web.validate_secrets_per_component,
                      stack_args(policy_resource(web.CONTAINER, props("agent"), "a"), sock)) == []


# ---- web-no-jwt-signing-key -------------------------------------------------------------------

KEY_FIX = ("whoever holds the key mints a token for any Slurm user; mount the component's own secret "
           "directory (its token only), never the key or a directory above it.")


def with_mount(source, component="agent", **extra):
    mounts = props(component)["mounts"] + [{"source": source, "target": "/mnt/x", "ro": True,
                                            "kind": "config"}]
    return container(component, mounts=mounts, **extra)


@pytest.mark.parametrize("component", ["agent", "gateway"])
def test_mounting_the_key_is_refused(component):
    who = AGENT if component == "agent" else GATEWAY
    assert one(web.validate_no_signing_key, with_mount(KEY, component)) == (
        f"{who} mounts {KEY} at '/mnt/x', which is Slurm's JWT signing key: {KEY_FIX}")


@pytest.mark.parametrize("source", ["/etc/slurm", "/etc/slurm/", "/etc", "/", "/etc/../etc/slurm"])
def test_mounting_a_directory_that_holds_the_key_is_refused(source):
    assert one(web.validate_no_signing_key, with_mount(source)) == (
        f"{AGENT} mounts {source} at '/mnt/x', which is a directory that holds Slurm's JWT signing key "
        f"{KEY}: {KEY_FIX}")


@pytest.mark.parametrize("source", ["/etc/slurm-web", "/etc/slur", "/etc/slurm/jwt_hs256.key.pub",
                                    "/etc/slurm/slurm.conf", "/run/slurmrestd"])
def test_other_paths_pass(source):
    assert violations(web.validate_no_signing_key, with_mount(source)) == []


def test_the_key_path_comes_from_jwt_key_or_slurms_default():
    assert one(web.validate_no_signing_key, with_mount("/srv/keys", jwt_key="/srv/keys/jwt.key")).startswith(
        f"{AGENT} mounts /srv/keys at '/mnt/x', which is a directory that holds Slurm's JWT signing key "
        "/srv/keys/jwt.key")
    assert violations(web.validate_no_signing_key, with_mount("/etc/slurm", jwt_key="/srv/keys/jwt.key")) == []
    assert len(violations(web.validate_no_signing_key, with_mount("/etc/slurm", jwt_key=None))) == 1


def test_the_key_path_in_the_environment_is_refused():
    assert one(web.validate_no_signing_key, container(env={"JWT_KEY": KEY, "OK": "x"})) == (
        f"{AGENT} passes the path of Slurm's JWT signing key {KEY} in its environment "
        f"(JWT_KEY='{KEY}'); the web view holds a token only: remove it from env.")
    # a secret value is named, not shown
    assert one(web.validate_no_signing_key, container(env={"OPTS": Secret(f"--key={KEY}")})) == (
        f"{AGENT} passes the path of Slurm's JWT signing key {KEY} in its environment (OPTS); the web "
        "view holds a token only: remove it from env.")


def test_observed_mounts_of_the_key_are_refused():
    obs = observed()
    obs["mounts"].append({"source": "/etc/slurm", "target": "/etc/slurm", "ro": True})
    assert one(web.validate_readback, created(readback=obs)) == (
        f"{AGENT} mounts /etc/slurm at '/etc/slurm' (observed, podman inspect), which is a directory that "
        f"holds Slurm's JWT signing key {KEY}: {KEY_FIX}")
    assert violations(web.validate_readback, created()) == []


# ---- web-readback (stack) ---------------------------------------------------------------------

def test_readback_problems_are_refused():
    assert readback(created()) == []
    assert readback(stack_args(policy_resource(web.CONTAINER, props(), "slurm-web-agent"))) == []  # not created
    assert one(web.validate_readback, created(problems=["its process runs as uid:gid 999:999, not 10001:10001",
                                                        "the root filesystem is writable"])) == (
        f"{AGENT} does not run as it declares (problems from its readback: its process runs as uid:gid "
        "999:999, not 10001:10001; the root filesystem is writable); re-create it with `pulumi up` and find "
        "what changed it outside the stack.")


def test_a_container_that_does_not_run_is_its_problems_only():
    gone = {"unit_active": "inactive", "unit_enabled": "enabled", "exists": False, "running": False}
    assert readback(created(readback=gone, problems=["container slurm-web-agent does not exist"])) == [
        f"{AGENT} does not run as it declares (problems from its readback: container slurm-web-agent does not "
        "exist); re-create it with `pulumi up` and find what changed it outside the stack."]


def test_readback_skips_what_is_unknown_or_not_recorded():
    assert readback(created(user=UNKNOWN_STR, cap_eff=UNKNOWN_STR, pids_max=UNKNOWN_NUM,
                            image_digest=UNKNOWN_STR, ports=UNKNOWN_OBJ, mounts=UNKNOWN_OBJ)) == []
    assert readback(created(readback={"running": True, "user": "10001:10001"})) == []
    unknown = policy_resource(web.CONTAINER, props(observed=UNKNOWN_OBJ, problems=UNKNOWN_OBJ), "slurm-web-agent")
    assert readback(stack_args(unknown)) == []


def test_resource_policies_read_the_declared_props_only():
    """A resource policy sees the inputs, where the program passes `observed: None`; a readback
    there (a provider that carried one) is web-readback's, not checked twice."""
    bad = observed(user="0:0", cap_eff="00000000a80425fb", read_only=False)
    assert all_violations(container(observed=bad, problems=["drift"])) == []
    assert len(readback(created(readback=bad, problems=["drift"]))) == 4


def test_every_rule_is_checked_on_the_readback():
    obs = observed("gateway", image_digest=D1, user="0:0", read_only=False, cap_eff="1", no_new_privs=0.0,
                   pids_max=None, ports=publish("0.0.0.0"),
                   mounts=[{"source": "/etc/slurm", "target": "/k", "ro": False}])
    msgs = readback(created("gateway", readback=obs))
    assert len(msgs) == len(web.READBACK), msgs  # one for each rule (the key mount is read-write too)
    assert all(m.startswith(GATEWAY) for m in msgs), msgs
