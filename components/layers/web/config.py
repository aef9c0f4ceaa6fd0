"""The web layer's config: the images, their confinement, the token and the tailnet exposure."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, Optional, get_args

from pydantic import Field

from ...config.project import PROJECT
from ...config.types import (
    ChangeId, DebianVersion, HostName, ImageRef, PackageName, Registry, Strict, TailnetAddress, UserName, WebUrl,
)

if TYPE_CHECKING:
    from ...config.fleet import FleetConfig


class WebLimits(Strict):
    """What each web container may use; podman sets them and the layer reads them back from the
    kernel's cgroup files (a limit the kernel does not enforce fails the rollout)."""

    cpus: float = Field(0.5, gt=0, le=64)
    memory_mb: int = Field(256, ge=32, le=65536)
    pids: int = Field(128, ge=16, le=65536)


class WebRuntime(Strict):
    """podman's engine settings (containers.conf drop-in). The defaults suit a host booted by
    systemd with cgroup v2; the lab's nspawn hosts need `cgroupfs` (v1 controllers), no session
    keyring (keyctl is filtered) and no default sysctls (ping_group_range is read-only)."""

    cgroup_manager: Literal["systemd", "cgroupfs"] = "systemd"
    keyring: bool = True
    default_sysctls: bool = True
    #: registries reached over plain HTTP (the lab's own); a real fleet's are TLS
    insecure_registries: list[Registry] = Field(default_factory=list)


class WebTailnet(Strict):
    """The gateway also published on the controller's tailnet address: its own change (an ID,
    a baseline of what was published before, a marker) and its own rollback (remove the section:
    the port goes back to loopback only, verified closed on the tailnet address)."""

    address: TailnetAddress
    change_id: ChangeId
    #: the interface that carries the address (tailscaled's)
    interface: HostName = "tailscale0"


#: Slurm-web 6.0.0's viewing actions (its policy.yml), the only ones the anonymous role may hold
ViewAction = Literal["view-stats", "view-jobs", "view-nodes", "view-partitions", "view-qos", "view-accounts",
                     "view-reservations"]
VIEW_ACTIONS: tuple[ViewAction, ...] = get_args(ViewAction)
#: Slurm-web 6.0.0 speaks slurmrestd's API 0.0.41 to 0.0.44: Slurm 24.05 and later serve them
MIN_SLURM = (24, 5)
RESTD_APIS = ("0.0.41", "0.0.42", "0.0.43", "0.0.44")
SLURM_WEB = "6.0.0"


class WebLayer(Strict):
    """Slurm-web's agent and gateway as hardened podman containers on the controller: images by
    digest, a fixed non-root user, read-only rootfs, no capabilities, limits; the agent reaches
    slurmrestd only on its Unix socket with a short-lived token of a low-privilege user; the
    gateway's port on loopback only (an admin reaches it through an SSH tunnel)."""

    enabled: bool = False
    agent_image: Optional[ImageRef] = None
    gateway_image: Optional[ImageRef] = None
    #: the containers' user (numeric; no account on the host needs it)
    uid: int = Field(64210, ge=1000, le=2**31)
    gid: int = Field(64210, ge=1000, le=2**31)
    #: the gateway's port, published on 127.0.0.1 only
    port: int = Field(8080, ge=1024, le=65535)
    limits: WebLimits = WebLimits()
    #: the Slurm user whose token the agent holds: no Slurm admin or operator level
    token_user: UserName = "slurmweb"
    token_uid: int = Field(64211, ge=1000, le=2**31)
    token_lifetime_s: int = Field(3600, ge=60, le=7 * 86400)
    #: the controller's timer mints a new token this long before the current one expires
    renew_before_s: int = Field(900, ge=20)
    #: the watchdog timer's period (it restarts a unit whose container is gone)
    health_interval_s: int = Field(60, ge=2, le=3600)
    #: podman and its runtime, network and DNS, as Debian 12 packages them
    packages: dict[PackageName, DebianVersion] = Field(default_factory=lambda: {
        "podman": "4.3.1+ds1-8+deb12u1+b3", "crun": "1.8.1-1+deb12u1", "conmon": "2.1.6+ds1-1",
        "netavark": "1.4.0-3", "aardvark-dns": "1.4.0-3", "iptables": "1.8.9-2"})
    runtime: WebRuntime = WebRuntime()
    tailnet: Optional[WebTailnet] = None
    #: what Slurm-web's anonymous role may do (authentication is off: every visitor is anonymous)
    anonymous_actions: list[ViewAction] = Field(default_factory=lambda: list(VIEW_ACTIONS))
    #: the gateway's address as browsers reach it (Slurm-web's `ui.host`: the page calls the API
    #: there); by default the tailnet address when published there, else loopback (an SSH tunnel)
    public_url: Optional[WebUrl] = None

    def url(self) -> str:
        if self.public_url:
            return str(self.public_url)
        host = self.tailnet.address if self.tailnet else "127.0.0.1"
        return f"http://{f'[{host}]' if ':' in host else host}:{self.port}"



def check(cfg: FleetConfig) -> list[str]:
    """The web view needs slurmrestd (the accounting layer) and both images; the token is
    renewed before it expires."""
    w = cfg.web
    if not w.enabled:
        return []
    where = f"{PROJECT}:web"
    problems = [f"{where}.{f}: required when the layer is enabled (an image by digest)"
                for f in ("agent_image", "gateway_image") if getattr(w, f) is None]
    if not (cfg.slurm.enabled and cfg.accounting.enabled):
        problems.append(f"{where}.enabled: the web view reads slurmrestd, which the accounting layer "
                        "runs: enable slurm and accounting too")
    if w.renew_before_s >= w.token_lifetime_s:
        problems.append(f"{where}.renew_before_s: {w.renew_before_s} s is not less than token_lifetime_s "
                        f"({w.token_lifetime_s} s): the token would expire before it is renewed")
    release = cfg.slurm.release.version
    if tuple(int(x) for x in release.split(".")[:2]) < MIN_SLURM:
        problems.append(f"{where}.enabled: Slurm-web {SLURM_WEB} reads slurmrestd's API 0.0.41 to 0.0.44, which "
                        f"Slurm {MIN_SLURM[0]}.{MIN_SLURM[1]:02d} and later serve; {PROJECT}:slurm.release.version is "
                        f"{release}: upgrade Slurm or turn the web layer off")
    if not w.anonymous_actions or len(set(w.anonymous_actions)) != len(w.anonymous_actions):
        problems.append(f"{where}.anonymous_actions: {w.anonymous_actions}: name each viewing action once, "
                        "at least one")
    if w.token_uid in (w.uid, cfg.accounting.restd_uid):
        problems.append(f"{where}.token_uid: {w.token_uid} is already the containers' or slurmrestd's uid")
    return problems
