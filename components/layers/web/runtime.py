"""What a web container really is, read back from podman and the kernel, and judged against
its spec (pure: the provider feeds it readback.sh's output).

Nothing is taken from the unit file: the image digest and user from `podman inspect`, the
capabilities and no_new_privs from the container process's /proc status, the limits from the
cgroup files the kernel enforces, the bound addresses from podman's port bindings.
"""

from __future__ import annotations

import json
from typing import Any, Optional

from ...scripts import sections

NO_CAPS = "0000000000000000"


def _kv(text: str) -> dict[str, str]:
    """`key value...` or `Key:<tab>value...` lines (limits, /proc status) -> key: the values."""
    out = {}
    for line in text.splitlines():
        if line.strip():
            k, *v = line.split(None, 1)
            out[k.rstrip(":")] = v[0].strip() if v else ""
    return out


def _first(fields: dict[str, str], key: str) -> Optional[str]:
    """The first of a key's values (a /proc status line has four uids), or None."""
    values = fields.get(key, "").split()
    return values[0] if values else None


def _limit(v: Optional[str]) -> Optional[int]:
    """A cgroup limit as a number; "max" (v2) and v1's huge 'unlimited' as None."""
    if v is None or v == "max":
        return None
    n = int(v)
    return None if n >= 2**62 else n


def parse_readback(stdout: str) -> dict[str, Any]:
    sec = sections(stdout)
    unit = (sec.get("unit") or "").split()
    obs: dict[str, Any] = {"unit_active": unit[0] if unit else "unknown",
                           "unit_enabled": unit[1] if len(unit) > 1 else "unknown"}
    if "absent" in sec or "inspect" not in sec:
        return {**obs, "exists": False, "running": False}
    [c] = json.loads(sec["inspect"])
    hc, cfg, st = c.get("HostConfig") or {}, c.get("Config") or {}, c.get("State") or {}
    status = _kv(sec.get("status") or "")
    lim = _kv(sec.get("limits") or "")
    cpu = (lim.get("cpu") or "").split()
    quota, period = (None, None)
    if len(cpu) == 2:
        quota = None if cpu[0] in ("max", "-1") else int(cpu[0])
        period = int(cpu[1])
    ports = []
    for cport, binds in sorted((hc.get("PortBindings") or {}).items()):
        for b in binds or []:
            ports.append({"address": b.get("HostIp") or "0.0.0.0", "host_port": int(b.get("HostPort") or 0),
                          "container_port": int(cport.split("/")[0])})
    mounts = sorted(({"source": m.get("Source"), "target": m.get("Destination"), "ro": not m.get("RW", True)}
                     for m in c.get("Mounts") or []), key=lambda m: m["target"])
    uid, gid = _first(status, "Uid"), _first(status, "Gid")
    return {
        **obs, "exists": True, "running": bool(st.get("Running")), "pid": st.get("Pid"),
        "image_digest": c.get("ImageDigest"), "image_id": c.get("Image"),
        "config_user": cfg.get("User"),
        "user": f"{uid}:{gid}" if uid is not None else None,
        "read_only": bool(hc.get("ReadonlyRootfs")),
        "cap_eff": _first(status, "CapEff"), "cap_bnd": _first(status, "CapBnd"),
        "no_new_privs": int(_first(status, "NoNewPrivs") or "-1"),
        "security_opt": sorted(hc.get("SecurityOpt") or []),
        "memory_limit_bytes": _limit(lim.get("memory")), "pids_max": _limit(lim.get("pids")),
        "cpu_quota_us": quota, "cpu_period_us": period,
        "mounts": mounts, "tmpfs": sorted((hc.get("Tmpfs") or {}).keys()),
        "networks": sorted((c.get("NetworkSettings") or {}).get("Networks") or {}),
        "ports": ports,
    }


def judge(spec: dict[str, Any], obs: dict[str, Any]) -> list[str]:
    """Every way the running container differs from its spec (empty: it is what was asked)."""
    name = spec["name"]
    if not obs.get("exists"):
        return [f"container {name} does not exist"]
    p: list[str] = []
    if not obs["running"]:
        p.append(f"container {name} is not running")
        return p
    digest = spec["image"].rsplit("@", 1)[1]
    if obs["image_digest"] != digest:
        p.append(f"image digest is {obs['image_digest']}, the stack pins {digest}")
    if obs["user"] != spec["user"]:
        p.append(f"its process runs as uid:gid {obs['user']}, not {spec['user']}")
    if spec["read_only"] and not obs["read_only"]:
        p.append("the root filesystem is writable")
    if obs["cap_eff"] != NO_CAPS or obs["cap_bnd"] != NO_CAPS:
        p.append(f"capabilities: effective {obs['cap_eff']}, bounding {obs['cap_bnd']} (want none)")
    if spec["no_new_privileges"] and obs["no_new_privs"] != 1:
        p.append(f"no_new_privs is {obs['no_new_privs']} in the kernel, not 1")
    lim = spec["limits"]
    want_mem = lim["memory_mb"] * 2**20
    if obs["memory_limit_bytes"] != want_mem:
        p.append(f"memory limit in the kernel is {obs['memory_limit_bytes']}, not {want_mem} bytes")
    if obs["pids_max"] != lim["pids"]:
        p.append(f"pids.max in the kernel is {obs['pids_max']}, not {lim['pids']}")
    q, per = obs["cpu_quota_us"], obs["cpu_period_us"]
    if not q or not per or abs(q / per - lim["cpus"]) > 0.01:
        p.append(f"CPU quota in the kernel is {q}/{per} us, not {lim['cpus']} CPUs")
    want_mounts = sorted(({"source": m["source"], "target": m["target"], "ro": m["ro"]} for m in spec["mounts"]),
                         key=lambda m: m["target"])
    if obs["mounts"] != want_mounts:
        p.append(f"mounts are {obs['mounts']}, not {want_mounts}")
    if obs["networks"] != sorted(spec["networks"]):
        p.append(f"networks are {obs['networks']}, not {sorted(spec['networks'])}")
    want_ports = sorted(spec["publish"], key=lambda x: (x["container_port"], x["address"]))
    if sorted(obs["ports"], key=lambda x: (x["container_port"], x["address"])) != want_ports:
        p.append(f"published ports are {obs['ports']}, not {want_ports}")
    return p
