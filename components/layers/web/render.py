"""Pure renderers of the web layer: Slurm-web's own configuration (agent.ini, gateway.ini,
policy.ini), the containers' specs, their systemd units, podman's engine drop-ins and the token
and watchdog units.

A container's spec (`container_specs`) is the single description both the unit's `podman run`
line and the readback judge (runtime.py) are built from, so what is asked for and what is
checked cannot drift apart. The units follow what `podman generate systemd --new` writes
(Type=notify through conmon, the container removed on stop): podman 4.3 has no Quadlet.
"""

from __future__ import annotations

import shlex
from typing import Any

from .config import SLURM_WEB, WebLayer


AGENT, GATEWAY = "agent", "gateway"
COMPONENTS = (AGENT, GATEWAY)
NAMES = {AGENT: "slurm-web-agent", GATEWAY: "slurm-web-gateway"}
INTERNAL_NET = "gpu-fleet-web-internal"
INGRESS_NET = "gpu-fleet-web-ingress"
#: per-component directories the containers see read-only (the seed's trap: a single-file mount
#: under a directory the image's own user owns fails; a directory per component does not)
SECRETS_DIR = "/etc/gpu-fleet/web"
SECRET_TARGET = "/run/secrets/slurm-web"
#: each component's configuration file in its directory; the agent's holds the slurmrestd token,
#: so the token unit writes it from the template (TOKEN_MARK standing for the token)
INI = {AGENT: "agent.ini", GATEWAY: "gateway.ini"}
AGENT_TEMPLATE = f"{SECRETS_DIR}/agent.ini.in"
TOKEN_MARK = "@SLURM_JWT@"
POLICY_FILE = "policy.ini"
#: Slurm-web's own signing key (the gateway signs the anonymous token, the agent checks it):
#: made on the controller, the same bytes in both directories; never Slurm's key
WEB_KEY_FILE = "jwt.key"
#: Slurm-web's own ports (its defaults), inside the containers
AGENT_PORT = 5012
GATEWAY_PORT = 5011
#: where the images hold upstream's definitions, templates and the built frontend
SHARE = "/usr/share/slurm-web"
LIBEXEC = "/usr/local/libexec/gpu-fleet"
TOKEN_SCRIPT = f"{LIBEXEC}/web-token.sh"
HEALTH_SCRIPT = f"{LIBEXEC}/web-health.sh"
WAIT_SCRIPT = f"{LIBEXEC}/web-wait.sh"
TOKEN_UNIT = "gpu-fleet-web-token.service"
TOKEN_TIMER = "gpu-fleet-web-token.timer"
HEALTH_UNIT = "gpu-fleet-web-health.service"
HEALTH_TIMER = "gpu-fleet-web-health.timer"
#: the watchdog and a reapply take it in turn: never both recreating a container
LOCK = "/run/gpu-fleet-web.lock"
CONTAINERS_CONF = "/etc/containers/containers.conf.d/50-gpu-fleet-web.conf"
#: per tailnet change: the baseline (what was published before; written once) and the marker
TAILNET_DIR = "/var/lib/gpu-fleet/web/tailnet"
REGISTRIES_CONF = "/etc/containers/registries.conf.d/50-gpu-fleet-web.conf"
TMPFS = {AGENT: ["/tmp"], GATEWAY: ["/tmp"]}


def unit_name(component: str) -> str:
    return f"{NAMES[component]}.service"


def secret_dir(component: str) -> str:
    return f"{SECRETS_DIR}/{component}"


def render_agent_ini(w: WebLayer, cluster: str, restd_socket: str) -> str:
    """The agent's settings, with TOKEN_MARK where the token unit puts the minted token: the
    static mode takes a token slurmctld minted for the low-privilege user (the auto mode would
    need Slurm's own signing key in the container)."""
    return "\n".join([
        f"# gpu-fleet web layer: Slurm-web {SLURM_WEB} agent (the token unit writes it from {AGENT_TEMPLATE})",
        "[service]", f"cluster={cluster}", "interface=0.0.0.0", f"port={AGENT_PORT}", "",
        "[slurmrestd]", f"uri=unix://{restd_socket}", "auth=jwt", "jwt_mode=static", f"jwt_user={w.token_user}",
        f"jwt_token={TOKEN_MARK}", "",
        "[policy]", f"roles={SECRET_TARGET}/{POLICY_FILE}", "",
        "[jwt]", f"key={SECRET_TARGET}/{WEB_KEY_FILE}", "",
        "[racksdb]", "enabled=no", "", "[metrics]", "enabled=no", "", "[cache]", "enabled=no", ""])


def render_gateway_ini(w: WebLayer) -> str:
    """The gateway's settings: one agent, by its container's name on the internal network; no
    authentication (every visitor is anonymous, policy.ini says what that allows)."""
    return "\n".join([
        f"# gpu-fleet web layer: Slurm-web {SLURM_WEB} gateway",
        "[service]", "interface=0.0.0.0", f"port={GATEWAY_PORT}", "",
        "[ui]", f"host={w.url()}", "enabled=yes", f"path={SHARE}/frontend", f"templates={SHARE}/templates", "",
        "[agents]", f"url=http://{NAMES[AGENT]}:{AGENT_PORT}", "",
        "[authentication]", "enabled=no", "",
        "[jwt]", f"key={SECRET_TARGET}/{WEB_KEY_FILE}", ""])


def render_policy_ini(w: WebLayer) -> str:
    """Slurm-web's roles: anonymous holds the stack's viewing actions; no other role exists, so
    nobody can do more (authentication is off)."""
    return "\n".join([
        f"# gpu-fleet web layer: Slurm-web {SLURM_WEB} roles (authentication is off: every visitor is anonymous)",
        "[roles]", "anonymous", "", "[anonymous]", f"actions={','.join(w.anonymous_actions)}", ""])


def config_files(w: WebLayer, cluster: str, restd_socket: str) -> dict[str, str]:
    """Path on the controller -> content, for every configuration file the layer writes."""
    return {AGENT_TEMPLATE: render_agent_ini(w, cluster, restd_socket),
            f"{secret_dir(AGENT)}/{POLICY_FILE}": render_policy_ini(w),
            f"{secret_dir(GATEWAY)}/{INI[GATEWAY]}": render_gateway_ini(w)}


def container_specs(w: WebLayer, restd_socket_dir: str, jwt_key: str,
                    config_sha: dict[str, str]) -> dict[str, dict[str, Any]]:
    """component -> the `web:Container` props that say what runs (without the connection);
    `config_sha` (per component, a hash of its configuration) makes a change recreate it."""
    common = {
        "user": f"{w.uid}:{w.gid}", "read_only": True, "cap_drop": ["ALL"], "cap_add": [],
        "no_new_privileges": True, "jwt_key": jwt_key, "tailnet": None,
        "limits": {"cpus": w.limits.cpus, "memory_mb": w.limits.memory_mb, "pids": w.limits.pids},
    }
    agent = {
        **common, "component": AGENT, "name": NAMES[AGENT], "unit": unit_name(AGENT),
        "image": w.agent_image, "tmpfs": TMPFS[AGENT],
        "mounts": [{"source": secret_dir(AGENT), "target": SECRET_TARGET, "ro": True, "kind": "secret"},
                   {"source": restd_socket_dir, "target": restd_socket_dir, "ro": True, "kind": "socket"}],
        "networks": [INTERNAL_NET], "publish": [], "env": {},
        "args": ["--conf", f"{SECRET_TARGET}/{INI[AGENT]}"], "config_sha": config_sha[AGENT],
        "ready": f"http://127.0.0.1:{AGENT_PORT}/version",
        "after": ["slurmrestd.service"],
    }
    gateway = {
        **common, "component": GATEWAY, "name": NAMES[GATEWAY], "unit": unit_name(GATEWAY),
        "image": w.gateway_image, "tmpfs": TMPFS[GATEWAY],
        "mounts": [{"source": secret_dir(GATEWAY), "target": SECRET_TARGET, "ro": True, "kind": "secret"}],
        "tailnet": w.tailnet.address if w.tailnet else None,
        # ingress first: the published port forwards to the container's address on it
        "networks": [INGRESS_NET, INTERNAL_NET],
        "publish": [{"address": a, "host_port": w.port, "container_port": GATEWAY_PORT}
                    for a in ["127.0.0.1", *([w.tailnet.address] if w.tailnet else [])]],
        "env": {}, "args": ["--conf", f"{SECRET_TARGET}/{INI[GATEWAY]}"], "config_sha": config_sha[GATEWAY],
        "ready": f"http://127.0.0.1:{GATEWAY_PORT}/api/version",
        "after": [unit_name(AGENT)], "wait_for": [NAMES[AGENT], f"http://127.0.0.1:{AGENT_PORT}/version", "60"],
    }
    return {AGENT: agent, GATEWAY: gateway}


def _bracket(address: str) -> str:
    return f"[{address}]" if ":" in address else address


def podman_run_argv(spec: dict[str, Any]) -> list[str]:
    """`podman run` for one container, every hardening flag explicit."""
    lim = spec["limits"]
    argv = ["/usr/bin/podman", "run", "--cidfile=%t/%n.ctr-id", "--cgroups=no-conmon", "--rm",
            "--sdnotify=conmon", "--replace", "-d", f"--name={spec['name']}",
            f"--user={spec['user']}", "--read-only", "--read-only-tmpfs=false",
            # Slurm-web runs as the container's PID 1, for which the kernel ignores an unhandled
            # SIGTERM; on SIGINT its server stops at once and exits 0
            "--stop-signal=SIGINT"]
    argv += [f"--tmpfs={t}:rw,nosuid,nodev,noexec,size=16m,mode=1777" for t in spec["tmpfs"]]
    argv += [f"--cap-drop={c}" for c in spec["cap_drop"]]
    argv += [f"--cap-add={c}" for c in spec["cap_add"]]
    if spec["no_new_privileges"]:
        argv.append("--security-opt=no-new-privileges")
    argv += [f"--cpus={lim['cpus']}", f"--memory={lim['memory_mb']}m",
             f"--memory-swap={lim['memory_mb']}m", f"--pids-limit={lim['pids']}"]
    argv += [f"--network={n}" for n in spec["networks"]]
    argv += [f"--publish={_bracket(p['address'])}:{p['host_port']}:{p['container_port']}/tcp" for p in spec["publish"]]
    argv += [f"--volume={m['source']}:{m['target']}:{'ro' if m['ro'] else 'rw'}" for m in spec["mounts"]]
    argv += [f"--env={k}={v}" for k, v in sorted(spec["env"].items())]
    argv += [f"--label=io.gpu-fleet.component={spec['component']}",
             f"--label=io.gpu-fleet.config={spec['config_sha']}", spec["image"], *spec["args"]]
    return argv


def render_container_unit(spec: dict[str, Any]) -> str:
    after = " ".join(["network-online.target", *spec["after"]])
    argv = [shlex.quote(a).replace("'%t/%n.ctr-id'", "%t/%n.ctr-id") for a in podman_run_argv(spec)]
    run = " \\\n\t".join([" ".join(argv[:2]), *argv[2:]])
    return (
        "# gpu-fleet web layer: do not edit (pulumi up rewrites it)\n"
        "[Unit]\n"
        f"Description=Slurm-web {spec['component']} (gpu-fleet web layer)\n"
        "Wants=network-online.target\n"
        f"After={after}\n"
        "\n[Service]\n"
        "Environment=PODMAN_SYSTEMD_UNIT=%n\n"
        "Restart=on-failure\n"
        "TimeoutStopSec=30\n"
        "ExecStartPre=/bin/rm -f %t/%n.ctr-id\n"
        + (f"ExecStartPre={WAIT_SCRIPT} {' '.join(spec['wait_for'])}\n" if spec.get("wait_for") else "") +
        f"ExecStart={run}\n"
        "ExecStop=/usr/bin/podman stop --ignore -t 10 --cidfile=%t/%n.ctr-id\n"
        "ExecStopPost=/usr/bin/podman rm -f --ignore -t 10 --cidfile=%t/%n.ctr-id\n"
        "Type=notify\n"
        "NotifyAccess=all\n"
        "\n[Install]\n"
        "WantedBy=multi-user.target\n"
    )


def render_containers_conf(w: WebLayer) -> str:
    r = w.runtime
    lines = ["# gpu-fleet web layer: podman's engine settings (web.runtime)", "[containers]"]
    if not r.keyring:
        lines.append("keyring = false")
    if not r.default_sysctls:
        lines.append("default_sysctls = []")
    lines += ["", "[engine]", f'cgroup_manager = "{r.cgroup_manager}"', 'events_logger = "file"', ""]
    return "\n".join(lines)


def render_registries_conf(w: WebLayer) -> str:
    out = ["# gpu-fleet web layer: registries reached over plain HTTP (web.runtime.insecure_registries)"]
    for reg in w.runtime.insecure_registries:
        out += ["[[registry]]", f'location = "{reg}"', "insecure = true", ""]
    return "\n".join(out) + "\n"


def render_token_unit(w: WebLayer) -> str:
    return (
        "# gpu-fleet web layer: mints the agent's slurmrestd token (a low-privilege Slurm user) into\n"
        "# its agent.ini and restarts a running agent, which reads it only when it starts\n"
        "[Unit]\nDescription=gpu-fleet web: renew the Slurm-web agent's token\n"
        "After=slurmctld.service\nStartLimitIntervalSec=0\n\n[Service]\nType=oneshot\n"
        f"ExecStart={TOKEN_SCRIPT} {w.token_user} {w.token_lifetime_s} {AGENT_TEMPLATE} "
        f"{secret_dir(AGENT)}/{INI[AGENT]} {w.gid} {LOCK} {unit_name(AGENT)} {unit_name(GATEWAY)}\n"
    )


def render_token_timer(w: WebLayer) -> str:
    every = w.token_lifetime_s - w.renew_before_s
    return (
        "[Unit]\nDescription=gpu-fleet web: renew the agent's token before it expires\n\n"
        f"[Timer]\nOnActiveSec={every}s\nOnUnitActiveSec={every}s\nAccuracySec=1s\n\n"
        "[Install]\nWantedBy=timers.target\n"
    )


def render_health_unit() -> str:
    units = " ".join(f"{unit_name(c)}={NAMES[c]}" for c in COMPONENTS)
    return (
        "# gpu-fleet web layer: restarts a web unit whose container is gone (takes the layer's lock)\n"
        # a watchdog must never hit systemd's start limit: a unit that did, stays failed and
        # its timer no longer starts it (a reapply's pause and a fast timer start it often)
        "[Unit]\nDescription=gpu-fleet web: watchdog of the Slurm-web containers\n"
        "StartLimitIntervalSec=0\n\n"
        f"[Service]\nType=oneshot\nExecStart={HEALTH_SCRIPT} {LOCK} {units}\n"
    )


def render_health_timer(w: WebLayer) -> str:
    every = w.health_interval_s
    return (
        "[Unit]\nDescription=gpu-fleet web: watchdog timer\n\n"
        f"[Timer]\nOnActiveSec={every}s\nOnUnitActiveSec={every}s\nAccuracySec=1s\n\n"
        "[Install]\nWantedBy=timers.target\n"
    )
