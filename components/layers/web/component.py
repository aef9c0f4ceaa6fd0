"""The web layer: Slurm-web's agent and gateway as hardened podman containers on the controller
(the seed's Web 与 Tailnet).

On the controller, in order:

1. podman and its runtime, network and DNS (`PackageSet`), its engine drop-in (web.runtime);
2. Slurm-web's configuration: its own signing key made on the controller (the same in both
   components' directories; never Slurm's), policy.ini (the anonymous role's viewing actions),
   gateway.ini, and the agent's settings template; the token: a Slurm user with no admin or
   operator level (`Account`), a oneshot unit that mints its slurmrestd token (`scontrol token`,
   bounded lifetime) into agent.ini from the template, and a timer that renews it
   `renew_before_s` before it expires (restarting the agent, which reads it at start); Slurm's
   JWT signing key stays with slurmctld and slurmrestd, never in a container;
3. both images pulled by digest (`web:Image`), an internal network (agent and gateway) and an
   ingress network (the gateway only: an internal network publishes no port);
4. the agent (slurmrestd's Unix socket and its directory mounted read-only, no port) and the
   gateway (its directory read-only, port on 127.0.0.1 only), each a systemd unit running `podman run` with every
   hardening flag, recreated under the watchdog's pause and the layer's lock, and read back from
   podman and the kernel (`web:Container`);
5. the watchdog timer, then `web:Check`: the page and the read API through the gateway as an
   anonymous visitor, every action but viewing refused, the port closed on the host's other
   addresses.

Rollback (destroy, or the layer off) removes the containers, units, timers, networks, the images
it pulled, the token and its user; Slurm and accounting keep running.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import pulumi

from ...kit import after_of, sha256
from ...site import Site
from ...providers import Account, CommandWithVerify, File, PackageSet, SystemdUnit
from .check import WebCheck
from .config import WebLayer
from .container import WebContainer, WebImage, WebNetwork
from .remote import HEALTH_SH, TOKEN_PROBE, TOKEN_SH, TOKEN_START, WAIT_SH, WEB_KEY, bash
from .tailnet import TailnetBaseline, TailnetExposure
from .render import (
    AGENT, AGENT_TEMPLATE, COMPONENTS, CONTAINERS_CONF, GATEWAY, HEALTH_SCRIPT, HEALTH_TIMER, HEALTH_UNIT, INGRESS_NET,
    INI, INTERNAL_NET, LOCK, NAMES, POLICY_FILE, REGISTRIES_CONF, TAILNET_DIR, TOKEN_SCRIPT, TOKEN_TIMER, TOKEN_UNIT,
    WAIT_SCRIPT, WEB_KEY_FILE, config_files, container_specs, render_container_unit, render_containers_conf,
    render_health_timer, render_health_unit, render_registries_conf, render_token_timer, render_token_unit, secret_dir,
)


@dataclass(frozen=True, kw_only=True)
class WebInputs:
    site: Site
    web: WebLayer
    #: the Slurm cluster's name (Slurm-web's cluster)
    cluster_name: str
    #: slurmrestd's socket directory and Slurm's JWT signing key (the accounting layer's)
    restd_socket_dir: str
    jwt_key: str
    #: slurmrestd up and verified: the token and the agent wait on it
    after: Sequence[pulumi.Resource]


@dataclass(frozen=True)
class WebOutputs:
    containers: dict[str, WebContainer]
    check: WebCheck
    tailnet: Optional[TailnetExposure] = None

    def exports(self) -> dict[str, pulumi.Input]:
        a, g = self.containers[AGENT], self.containers[GATEWAY]
        exposed = self.tailnet.seen if self.tailnet else None
        return {"web": pulumi.Output.all(a.observed, g.observed, self.check.seen, exposed).apply(lambda t: {
            "containers": {c: {k: o.get(k) for k in ("image_digest", "user", "read_only", "cap_eff", "no_new_privs",
                                                        "memory_limit_bytes", "pids_max", "cpu_quota_us", "ports")}
                           for c, o in zip(COMPONENTS, t[:2])},
            "check": t[2], "tailnet": t[3]})}


class Web(pulumi.ComponentResource):
    """Slurm-web on the controller: hardened containers, read-only to Slurm, loopback only."""

    def __init__(self, name: str, inputs: WebInputs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("gpu-fleet:web:Web", name, None, opts)
        site, w = inputs.site, inputs.web
        ctl = site.hosts.controller
        conn = site.conn(ctl)
        n = ctl.name
        after = after_of(self)

        # after accounting's packages (nftables): what this set records as added, and purges on
        # rollback, is then podman's own closure, never a library another layer installed with it
        packages = PackageSet(f"{n}-web-packages", conn=conn, packages=dict(w.packages), hold=True,
                              opts=after(*inputs.after))
        engine = [File(f"{n}-web-containers-conf", conn=conn, path=CONTAINERS_CONF,
                       content=render_containers_conf(w), opts=after(packages))]
        if w.runtime.insecure_registries:
            engine.append(File(f"{n}-web-registries-conf", conn=conn, path=REGISTRIES_CONF,
                               content=render_registries_conf(w), opts=after(packages)))

        # the token: a low-privilege Slurm user, minted here, renewed by a timer
        user = Account(f"{n}-web-token-user", conn=conn, user=w.token_user, uid=w.token_uid, gid=w.token_uid,
                       opts=after(*inputs.after))
        tscript = File(f"{n}-web-token-script", conn=conn, path=TOKEN_SCRIPT, content=TOKEN_SH,
                       mode="0755", opts=after())
        wscript = File(f"{n}-web-wait-script", conn=conn, path=WAIT_SCRIPT, content=WAIT_SH, mode="0755",
                       opts=after())
        tunit = SystemdUnit(f"{n}-web-token-unit", conn=conn, unit=TOKEN_UNIT, content=render_token_unit(w),
                            enabled=False, active=None, opts=after(tscript))
        # Slurm-web's own key and configuration, then the agent's settings with the token
        dirs = [secret_dir(c) for c in COMPONENTS]
        key = CommandWithVerify(
            f"{n}-web-key", conn=conn, create=bash(WEB_KEY, "ensure", str(w.gid), WEB_KEY_FILE, *dirs),
            verify=bash(WEB_KEY, "check", str(w.gid), WEB_KEY_FILE, *dirs),
            delete=["rm", "-rf", f"{secret_dir(AGENT)}/{WEB_KEY_FILE}", secret_dir(GATEWAY)], opts=after())
        confs = config_files(w, inputs.cluster_name, f"{inputs.restd_socket_dir}/slurmrestd.socket")
        files = [File(f"{n}-web-{path.rsplit('/', 1)[1].replace('.', '-')}", conn=conn, path=path, content=text,
                      opts=after(key)) for path, text in confs.items()]
        agent_ini = f"{secret_dir(AGENT)}/{INI[AGENT]}"
        token = CommandWithVerify(
            f"{n}-web-token", conn=conn, create=bash(TOKEN_START, TOKEN_UNIT),
            verify=bash(TOKEN_PROBE, agent_ini, w.token_user, str(w.gid), "30", AGENT_TEMPLATE),
            delete=["rm", "-rf", secret_dir(AGENT)],
            triggers={"unit": sha256(render_token_unit(w), 16), "template": sha256(confs[AGENT_TEMPLATE], 16)},
            opts=after(tunit, user, *files, *inputs.after))
        ttimer = SystemdUnit(f"{n}-web-token-timer", conn=conn, unit=TOKEN_TIMER, content=render_token_timer(w),
                             opts=after(token))

        # the layer's check: both required when it is enabled (and it is built only then)
        assert w.agent_image is not None and w.gateway_image is not None
        images = {c: WebImage(f"{n}-web-image-{c}", conn=conn, component=c, ref=ref, opts=after(*engine))
                  for c, ref in ((AGENT, w.agent_image), (GATEWAY, w.gateway_image))}
        nets = {name: WebNetwork(f"{n}-web-net-{name.rsplit('-', 1)[1]}", conn=conn, network=name,
                                 internal=name == INTERNAL_NET, opts=after(*engine))
                for name in (INTERNAL_NET, INGRESS_NET)}

        config_sha = {AGENT: sha256(confs[AGENT_TEMPLATE] + confs[f"{secret_dir(AGENT)}/{POLICY_FILE}"], 16),
                      GATEWAY: sha256(confs[f"{secret_dir(GATEWAY)}/{INI[GATEWAY]}"], 16)}
        specs = container_specs(w, inputs.restd_socket_dir, inputs.jwt_key, config_sha)
        units = {c: render_container_unit(specs[c]) for c in COMPONENTS}
        lifecycle = {"timer": HEALTH_TIMER, "health": HEALTH_UNIT, "lock": LOCK}
        agent = WebContainer(f"{n}-web-{AGENT}", conn=conn, spec=specs[AGENT], unit_content=units[AGENT],
                             **lifecycle, opts=after(images[AGENT], nets[INTERNAL_NET], token, *inputs.after))
        tailnet = None
        before_gateway: list[pulumi.Resource] = []
        if w.tailnet:
            t = {"conn": conn, "change_id": w.tailnet.change_id, "address": w.tailnet.address,
                 "interface": w.tailnet.interface, "port": w.port, "gateway": NAMES[GATEWAY], "dir": TAILNET_DIR}
            before_gateway.append(TailnetBaseline(f"{n}-web-tailnet-baseline", props=t, opts=after(agent)))
        gateway = WebContainer(f"{n}-web-{GATEWAY}", conn=conn, spec=specs[GATEWAY], unit_content=units[GATEWAY],
                               **lifecycle, opts=after(images[GATEWAY], *nets.values(), agent, key, *files,
                                                       wscript, *before_gateway))
        if w.tailnet:
            tailnet = TailnetExposure(f"{n}-web-tailnet", props=t, opts=after(gateway))

        hscript = File(f"{n}-web-health-script", conn=conn, path=HEALTH_SCRIPT, content=HEALTH_SH,
                       mode="0755", opts=after())
        hunit = SystemdUnit(f"{n}-web-health-unit", conn=conn, unit=HEALTH_UNIT, content=render_health_unit(),
                            enabled=False, active=None, opts=after(hscript))
        htimer = SystemdUnit(f"{n}-web-health-timer", conn=conn, unit=HEALTH_TIMER, content=render_health_timer(w),
                             opts=after(hunit, agent, gateway))
        check = WebCheck(f"{n}-web-check", conn=conn, port=w.port, cluster=inputs.cluster_name, url=w.url(),
                         actions=list(w.anonymous_actions), slurm_nodes=[x.name for x in site.slurm_nodes()],
                         triggers={c: sha256(u, 16) for c, u in units.items()},
                         tailnet=w.tailnet.address if w.tailnet else None,
                         opts=after(gateway, htimer, ttimer, *([tailnet] if tailnet else [])))
        self.outputs = WebOutputs({AGENT: agent, GATEWAY: gateway}, check, tailnet)
        self.register_outputs({})
