"""The web layer's dynamic providers: images pulled by digest, podman networks, and the
containers (unit + runtime readback), all on the controller.

A container's create and update go through lifecycle.sh, which pauses the layer's watchdog,
waits for a watchdog run to end and takes the layer's lock before recreating (the seed's reapply
race); then readback.sh reads what runs and `runtime.judge` compares it with the spec: a
difference fails the `up`, naming each property. `read` (refresh) records the readback, so a
container that drifted (stopped, replaced by hand) is an update on the next `up`.
"""

from __future__ import annotations

from typing import Any, Optional

import pulumi
from pulumi.dynamic import Resource

from ...errors import FleetError
from ...providers.base import HostProvider
from ...providers.parts import Props
from ...transport import Connection
from .remote import LIFECYCLE, READBACK, WAIT, connect as _c, bash
from .runtime import judge, parse_readback


class WebProvider(HostProvider):
    """The web layer's kind of host object: made, read back and removed by its own commands and
    scripts (converge, observe, undo); diff reads the recorded state only: a replace for what
    names another object (`replace_on`), an update for drift. Holds no secret (the token is
    minted on the host)."""

    #: a replacement creates the new object before deleting the old one
    delete_before_replace = False


# --- images ---------------------------------------------------------------------------------

def _image_probe(conn: Connection, ref: str) -> Optional[str]:
    r = conn.run(["podman", "image", "inspect", "--format", "{{.Digest}}", ref], mutating=False, check=False)
    return r.stdout.strip() or None if r.rc == 0 else None


class WebImageProvider(WebProvider):
    replace_on = ("ref",)
    record_keys = ("pulled",)

    def id_of(self, props: Props) -> str:
        return f"{props['conn']['name']}:web-image:{props['component']}"

    def drifted(self, olds: Props, news: Props) -> bool:
        return olds.get("digest") != news["ref"].rsplit("@", 1)[1]

    def _ensure(self, props: Props, pulled: bool) -> Props:
        conn, ref = _c(props["conn"]), props["ref"]
        want = ref.rsplit("@", 1)[1]
        have = _image_probe(conn, ref)
        if have is None:
            conn.run(["podman", "pull", "--quiet", ref], mutating=True, timeout=900)
            pulled, have = True, _image_probe(conn, ref)
        if have != want:
            raise FleetError(f"web:Image {props['component']}: host {conn.t.name}: `podman image inspect {ref}` "
                             f"shows digest {have}, not the pinned {want}")
        return {**props, "digest": have, "pulled": pulled}

    def converge(self, props: Props, record: Props) -> Props:
        return self._ensure(props, bool(record.get("pulled")))

    def observe(self, props: Props) -> Props:
        return {"digest": _image_probe(_c(props["conn"]), props["ref"])}

    def undo(self, props: Props) -> None:
        if props.get("pulled"):  # an image the admin had before stays
            _c(props["conn"]).run(["podman", "rmi", "--ignore", props["ref"]], mutating=True)


class WebImage(Resource, module="web", name="Image"):
    digest: pulumi.Output[str]

    def __init__(self, name: str, *, conn: dict, component: str, ref: str,
                 opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__(WebImageProvider(), name,
                         {"conn": conn, "component": component, "ref": ref, "digest": None, "pulled": None}, opts)


# --- networks -------------------------------------------------------------------------------

def _network_probe(conn: Connection, name: str) -> Optional[bool]:
    """The network's `internal` flag, or None when it does not exist."""
    r = conn.run(["podman", "network", "inspect", "--format", "{{.Internal}}", name], mutating=False, check=False)
    return r.stdout.strip() == "true" if r.rc == 0 else None


class WebNetworkProvider(WebProvider):
    replace_on = ("name", "internal")
    record_keys = ("created",)

    def id_of(self, props: Props) -> str:
        return f"{props['conn']['name']}:web-network:{props['name']}"

    def drifted(self, olds: Props, news: Props) -> bool:
        return olds.get("observed_internal") != news["internal"]

    def _ensure(self, props: Props, created: bool) -> Props:
        conn, name = _c(props["conn"]), props["name"]
        have = _network_probe(conn, name)
        if have is None:
            conn.run(["podman", "network", "create", *(["--internal"] if props["internal"] else []), name],
                     mutating=True)
            created, have = True, _network_probe(conn, name)
        if have != props["internal"]:
            raise FleetError(f"web:Network {name}: host {conn.t.name}: internal is {have}, the layer needs "
                             f"{props['internal']} "
                             "(a network of that name that is not the layer's: rename or remove it)")
        return {**props, "observed_internal": have, "created": created}

    def converge(self, props: Props, record: Props) -> Props:
        return self._ensure(props, bool(record.get("created")))

    def observe(self, props: Props) -> Props:
        return {"observed_internal": _network_probe(_c(props["conn"]), props["name"])}

    def undo(self, props: Props) -> None:
        if props.get("created"):  # not --force: a container someone else attached stops the rollback, named
            conn = _c(props["conn"])
            if _network_probe(conn, props["name"]) is not None:
                conn.run(["podman", "network", "rm", props["name"]], mutating=True)


class WebNetwork(Resource, module="web", name="Network"):
    def __init__(self, name: str, *, conn: dict, network: str, internal: bool,
                 opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__(WebNetworkProvider(), name,
                         {"conn": conn, "name": network, "internal": internal, "observed_internal": None,
                          "created": None}, opts)


# --- containers -----------------------------------------------------------------------------

#: props that are not part of what runs (the way to the host, the layer's watchdog and lock)
_NOT_SPEC = ("conn", "observed", "problems", "timer", "health", "lock")


def spec_of(props: Props) -> dict[str, Any]:
    return {k: v for k, v in props.items() if k not in _NOT_SPEC}


class WebContainerProvider(WebProvider):
    def id_of(self, props: Props) -> str:
        return f"{props['conn']['name']}:web-container:{props['name']}"

    def drifted(self, olds: Props, news: Props) -> bool:
        return (spec_of(olds) != spec_of(news) or olds.get("problems") != []
                or not (olds.get("observed") or {}).get("running"))

    def _readback(self, conn: Connection, props: Props) -> dict[str, Any]:
        return parse_readback(conn.run(bash(READBACK, props["name"], props["unit"]), mutating=False).stdout)

    def _apply(self, props: Props) -> Props:
        conn = _c(props["conn"])
        conn.run(bash(LIFECYCLE, "apply", props["unit"], props["name"], props["timer"], props["health"], props["lock"]),
                 mutating=True, stdin=props["unit_content"].encode(), timeout=300)
        # running is not serving: Slurm-web answers a few seconds after its container starts
        r = conn.run(bash(WAIT, props["name"], props["ready"], "90"), mutating=False, check=False, timeout=120)
        if r.rc != 0:
            why = r.stderr.strip() or r.stdout.strip()
            raise FleetError(f"web:Container {props['name']}: host {conn.t.name}: {why}")
        obs = self._readback(conn, props)
        problems = judge(props, obs)
        if problems:
            raise FleetError(f"web:Container {props['name']}: host {conn.t.name}: what podman and the kernel run "
                             "is not what the stack asks for (read back after the restart):\n  - "
                             + "\n  - ".join(problems))
        return {**props, "observed": obs, "problems": []}

    def converge(self, props: Props, record: Props) -> Props:
        return self._apply(props)

    def observe(self, props: Props) -> Props:
        obs = self._readback(_c(props["conn"]), props)
        return {"observed": obs, "problems": judge(props, obs)}

    def undo(self, props: Props) -> None:
        _c(props["conn"]).run(bash(LIFECYCLE, "remove", props["unit"], props["name"], props["timer"],
                                 props["health"], props["lock"]), mutating=True, timeout=300)


class WebContainer(Resource, module="web", name="Container"):
    observed: pulumi.Output[dict]
    problems: pulumi.Output[list]

    def __init__(self, name: str, *, conn: dict, spec: dict[str, Any], unit_content: str, timer: str,
                 health: str, lock: str, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__(WebContainerProvider(), name,
                         {"conn": conn, **spec, "unit_content": unit_content, "timer": timer, "health": health,
                          "lock": lock, "observed": None, "problems": None}, opts)
