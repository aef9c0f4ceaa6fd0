"""Slurm-web's own configuration, as the web layer writes it (`host:File` resources of the
controller): what an anonymous visitor may do, where the gateway finds its agents, and how the
agent authenticates to slurmrestd.

- `policy.ini`: the anonymous role holds viewing actions only (Slurm-web 6.0.0's `view-*`; not
  `associations-view`, `cache-view`, `cache-reset`, and no `@role` that could bring others in).
  With authentication off every visitor is anonymous, so this is everything the page allows.
- `gateway.ini`: every agent URL names the agent container on the layer's internal network
  (`http://slurm-web-agent:<port>`): an address or another name would send the anonymous token
  and the visitors' queries off the controller.
- `agent.ini` (or its template): `jwt_mode=static` with a token minted for a low-privilege user;
  the auto mode signs tokens with Slurm's own key, which would then have to be in the container.

A file is Slurm-web's when its directory is the layer's (/etc/gpu-fleet/web and below) or
Slurm-web's own (/etc/slurm-web) and its name is the file's (`agent.ini.in` for the template).
Content unknown during a preview is skipped.
"""

from __future__ import annotations

import configparser
import posixpath
import re
from typing import Iterator, Optional
from urllib.parse import urlsplit

from . import props as P
from .common import Res, file_content, resource

DIRS = ("/etc/gpu-fleet/web", "/etc/slurm-web")
VIEW_ACTIONS = ("view-stats", "view-jobs", "view-nodes", "view-partitions", "view-qos", "view-accounts",
                "view-reservations")
#: the agent container's name: podman's DNS resolves it on the networks it is attached to
AGENT_HOST = "slurm-web-agent"


def _ini(text: str) -> Optional[configparser.ConfigParser]:
    cp = configparser.ConfigParser(allow_no_value=True, interpolation=None, strict=False)
    try:
        cp.read_string(text)
    except configparser.Error:
        return None
    return cp


def _slurmweb_file(args, *names: str) -> Optional[tuple[Res, str, configparser.ConfigParser]]:
    res = resource(args, P.FILE)
    if res is None:
        return None
    path = P.text(res.get("path")) or ""
    d, base = posixpath.split(posixpath.normpath(path))
    if base not in names or not any(d == x or d.startswith(x + "/") for x in DIRS):
        return None
    text = file_content(res)
    if text is None:
        return None
    cp = _ini(text)
    if cp is None:
        return res, path, configparser.ConfigParser()
    return res, path, cp


def _items(value: Optional[str]) -> list[str]:
    """A Slurm-web list: comma or newline separated."""
    return [x.strip() for x in re.split(r"[,\n]", value or "") if x.strip()]


def anonymous_problems(path: str, cp: configparser.ConfigParser) -> Iterator[str]:
    if not cp.has_section("anonymous"):
        return
    for action in _items(cp.get("anonymous", "actions", fallback="")):
        if action not in VIEW_ACTIONS:
            yield (f"{path} grants the anonymous role {action!r}: with authentication off every visitor is "
                   f"anonymous, so it may only view ({', '.join(VIEW_ACTIONS)})")


def validate_anonymous_view_only(args, report_violation) -> None:
    found = _slurmweb_file(args, "policy.ini")
    if found:
        res, path, cp = found
        for msg in anonymous_problems(path, cp):
            report_violation(f"{res.describe('File')}: {msg}", None)


def agent_url_problems(path: str, cp: configparser.ConfigParser) -> Iterator[str]:
    urls = _items(cp.get("agents", "url", fallback=""))
    if not urls:
        yield f"{path} lists no agent ([agents] url)"
    for url in urls:
        parts = urlsplit(url)
        if parts.scheme != "http" or parts.hostname != AGENT_HOST:
            yield (f"{path} lists agent {url!r}: the gateway reaches its agent only on the layer's internal "
                   f"network, by the agent container's name (http://{AGENT_HOST}:<port>)")


def validate_gateway_agents_internal(args, report_violation) -> None:
    found = _slurmweb_file(args, "gateway.ini")
    if found:
        res, path, cp = found
        for msg in agent_url_problems(path, cp):
            report_violation(f"{res.describe('File')}: {msg}", None)


def agent_auth_problems(path: str, cp: configparser.ConfigParser) -> Iterator[str]:
    mode = cp.get("slurmrestd", "jwt_mode", fallback="auto").strip()
    auth = cp.get("slurmrestd", "auth", fallback="jwt").strip()
    if auth != "jwt" or mode != "static":
        yield (f"{path} sets slurmrestd auth={auth} jwt_mode={mode}: the agent holds a token minted for a "
               "low-privilege user (auth=jwt, jwt_mode=static); the auto mode needs Slurm's signing key in the "
               "container and local needs slurmrestd's own user")
    if cp.has_option("slurmrestd", "jwt_key"):
        yield f"{path} names a slurmrestd signing key (jwt_key): no Slurm key belongs in Slurm-web's settings"


def validate_agent_static_token(args, report_violation) -> None:
    found = _slurmweb_file(args, "agent.ini", "agent.ini.in")
    if found:
        res, path, cp = found
        for msg in agent_auth_problems(path, cp):
            report_violation(f"{res.describe('File')}: {msg}", None)
