"""Pure renderers of the web layer: the containers' specs, their systemd units, podman's
engine drop-ins and the token and watchdog units.

A container's spec (`container_specs`) is the single description both the unit's `podman run`
line and the readback judge (runtime.py) are built from, so what is asked for and what is
checked cannot drift apart. The units follow what `podman generate systemd --new` writes
(Type=notify through conmon, the container removed on stop): podman 4.3 has no Quadlet.
"""

from __future__ import annotations

import shlex
from typing import Any

from .config import WebLayer


AGENT, GATEWAY = "agent", "gateway"
COMPONENTS = (AGENT, GATEWAY)
NAMES = {AGENT: "slurm-web-agent", GATEWAY: "slurm-web-gateway"}
INTERNAL_NET = "gpu-fleet-web-internal"
INGRESS_NET = "gpu-fleet-web-ingress"
#: per-component directories the containers see read-only (the seed's trap: a single-file mount
#: under a directory the image's own user owns fails; a directory per component does not)
SECRETS_DIR = "/etc/gpu-fleet/web"
SECRET_TARGET = "/run/secrets/slurm-web"
TOKEN_FILE = "token"
AGENT_PORT = 8081
GATEWAY_PORT = 8080
LIBEXEC = "/usr/local/libexec/gpu-fleet"
TOKEN_SCRIPT = f"{LIBEXEC}/web-token.sh"
HEALTH_SCRIPT = f"{LIBEXEC}/web-health.sh"
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


def container_specs(w: WebLayer, restd_socket_dir: str, jwt_key: str) -> dict[str, dict[str, Any]]:
    """component -> the `web:Container` props that say what runs (without the connection)."""
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
        "networks": [INTERNAL_NET], "publish": [],
        "env": {"SLURMRESTD_SOCKET": f"{restd_socket_dir}/slurmrestd.socket",
                "TOKEN_FILE": f"{SECRET_TARGET}/{TOKEN_FILE}", "TOKEN_USER": w.token_user,
                "LISTEN_PORT": str(AGENT_PORT)},
        "after": ["slurmrestd.service"],
    }
    gateway = {
        **common, "component": GATEWAY, "name": NAMES[GATEWAY], "unit": unit_name(GATEWAY),
        "image": w.gateway_image, "tmpfs": TMPFS[GATEWAY], "mounts": [],
        "tailnet": w.tailnet.address if w.tailnet else None,
        # ingress first: the published port forwards to the container's address on it
        "networks": [INGRESS_NET, INTERNAL_NET],
        "publish": [{"address": a, "host_port": w.port, "container_port": GATEWAY_PORT}
                    for a in ["127.0.0.1", *([w.tailnet.address] if w.tailnet else [])]],
        "env": {}, "after": [unit_name(AGENT)],
    }
    return {AGENT: agent, GATEWAY: gateway}


def _bracket(address: str) -> str:
    return f"[{address}]" if ":" in address else address


def podman_run_argv(spec: dict[str, Any]) -> list[str]:
    """`podman run` for one container, every hardening flag explicit."""
    lim = spec["limits"]
    argv = ["/usr/bin/podman", "run", "--cidfile=%t/%n.ctr-id", "--cgroups=no-conmon", "--rm",
            "--sdnotify=conmon", "--replace", "-d", f"--name={spec['name']}",
            f"--user={spec['user']}", "--read-only", "--read-only-tmpfs=false"]
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
    argv += [f"--label=io.gpu-fleet.component={spec['component']}", spec["image"]]
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
        "# gpu-fleet web layer: mints the agent's slurmrestd token (a low-privilege Slurm user)\n"
        "[Unit]\nDescription=gpu-fleet web: renew the Slurm-web agent's token\n"
        "After=slurmctld.service\n\n[Service]\nType=oneshot\n"
        f"ExecStart={TOKEN_SCRIPT} {w.token_user} {w.token_lifetime_s} {secret_dir(AGENT)}/{TOKEN_FILE} {w.gid}\n"
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
        "[Unit]\nDescription=gpu-fleet web: watchdog of the Slurm-web containers\n\n"
        f"[Service]\nType=oneshot\nExecStart={HEALTH_SCRIPT} {LOCK} {units}\n"
    )


def render_health_timer(w: WebLayer) -> str:
    every = w.health_interval_s
    return (
        "[Unit]\nDescription=gpu-fleet web: watchdog timer\n\n"
        f"[Timer]\nOnActiveSec={every}s\nOnUnitActiveSec={every}s\nAccuracySec=1s\n\n"
        "[Install]\nWantedBy=timers.target\n"
    )
