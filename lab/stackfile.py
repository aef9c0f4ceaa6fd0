"""The `lab` stack file and the inventory, both written by `lab up`.

`render_stack(nodes)` is deterministic: the same node count gives the same
text, so `stacks/Pulumi.lab.yaml` can be committed. Keys written there by
others (a `pulumi stack init` salt, secrets, extra config) are kept as they are.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import yaml

from .common import INVENTORY, KEY, KNOWN_HOSTS, ROOT, STACK_FILE, LabError, rel
from . import fake_nvml
from .hosts import Host, lab_hosts

#: keys `lab up` writes, and so replaces; `gpu-fleet:storage` is not written (the lab stack runs
#: without the storage layer; its lab tests add the section) but stays owned so an old file loses it
OWNED_KEYS = ("gpu-fleet:ssh", "gpu-fleet:hosts", "gpu-fleet:storage", "gpu-fleet:nodes",
              "gpu-fleet:slurm", "gpu-fleet:gpu_runtime")
NODE_CPUS = 2
NODE_MEMORY_MIB = 1000
DEF_MEM_PER_CPU_MIB = 500
GPUS = "{count: 8, type: v100, model: Tesla V100-SXM2-16GB}"


#: used until the lab repository is built (a fresh machine previews before `lab up`)
DEFAULT_VERSIONS = {"slurmd": "22.05.8-4+deb12u3", "munge": "0.5.15-2+deb12u1",
                    "libpmix2": "4.2.2-1+deb12u1"}


def release_versions() -> dict[str, str]:
    """Exact versions of the Slurm release's packages in the lab repository."""
    from .repo import cache_dir, read_packages, repo_key

    packages_gz = cache_dir() / f"repo-{repo_key(read_packages())}" / "Packages"
    found = dict(DEFAULT_VERSIONS)
    if packages_gz.exists():
        name = None
        for line in packages_gz.read_text().splitlines():
            if line.startswith("Package: "):
                name = line.split(": ", 1)[1].strip()
            elif line.startswith("Version: ") and name in found:
                found[name] = line.split(": ", 1)[1].strip()
    return found


def render_stack(nodes: int, existing: str | None = None) -> str:
    hosts = lab_hosts(nodes)
    by_name = {h.name: h for h in hosts}
    node_hosts = [h for h in hosts if "node" in h.roles]
    lines = [
        "# The lab: local systemd-nspawn hosts on this machine (python -m lab up; see README).",
        f"# Written by `python -m lab up` for {nodes} node(s); the same node count gives the same",
        "# file. GPUs are device files (a test double); owner slurm, node1 is the canary.",
        "config:",
        "  gpu-fleet:ssh:",
        "    user: root",
        f"    identity_file: {rel(KEY)}",
        f"    known_hosts_file: {rel(KNOWN_HOSTS)}",
        "    use_ssh_config: false",
        "    connect_timeout_s: 10",
        "    max_parallel: 16",
        "  gpu-fleet:hosts:",
        f"    storage: {{name: storage, address: {by_name['storage'].address}}}",
        f"    controller: {{name: ctl, address: {by_name['ctl'].address}}}",
        "  gpu-fleet:nodes:",
    ]
    for h in node_hosts:
        canary = ", canary: true" if "canary" in h.roles else ""
        lines.append(
            f"    - {{name: {h.name}, address: {h.address}, owner: slurm, cpus: {NODE_CPUS}, "
            f"real_memory_mib: {NODE_MEMORY_MIB}, gpus: {GPUS}{canary}}}"
        )
    v = release_versions()
    lines += fake_nvml.stack_lines()
    lines += [
        "  gpu-fleet:slurm:",
        "    cluster_name: lab",
        "    # The lab's Slurm release is Debian's 22.05 (versions as served by the lab repository).",
        f"    release: {{version: '22.05', debian_version: '{v['slurmd']}', "
        f"munge_version: '{v['munge']}', pmix_version: '{v['libpmix2']}', "
        "source_dir: /srv/lab-repo}",
        "    # Where the containers differ from a real node:",
        "    cgroup_plugin: cgroup/v1",
        "    constrain_swap: false",
        "    constrain_swap_reason: the lab kernel has no swap accounting in the memory cgroup",
        "    fake_gpu_devices: true",
        "    gpu_device_prefix: /dev/fakegpu",
        "    gres_autodetect: 'off'",
        f"    def_mem_per_cpu_mib: {DEF_MEM_PER_CPU_MIB}",
        "    partitions:",
        f"      - {{name: lab, nodes: [{', '.join(h.name for h in node_hosts)}], default: true}}",
    ]
    text = "\n".join(lines) + "\n"
    # Keep what others added: extra config keys (e.g. secrets) and top-level keys (encryptionsalt).
    if existing:
        try:
            old = yaml.safe_load(existing) or {}
        except yaml.YAMLError:
            old = {}
        if isinstance(old, dict):
            extra_cfg = {k: v for k, v in (old.get("config") or {}).items() if k not in OWNED_KEYS}
            if extra_cfg:
                dumped = yaml.safe_dump(extra_cfg, sort_keys=True, default_flow_style=False, width=1000)
                text += "".join(f"  {ln}\n" for ln in dumped.splitlines())
            extra_top = {k: v for k, v in old.items() if k != "config"}
            if extra_top:
                text += yaml.safe_dump(extra_top, sort_keys=True, default_flow_style=False, width=1000)
    return text


def write_stack(nodes: int, path: Path = STACK_FILE) -> bool:
    """Write the stack file; return True if its content changed."""
    existing = path.read_text() if path.exists() else None
    text = render_stack(nodes, existing)
    if text == existing:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
    return True


def validate_stack(path: Path = STACK_FILE) -> None:
    """Check the file with the project's config model when it is importable (the .venv)."""
    import sys

    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    try:
        from components.config.load import parse_fleet_config
        from components.errors import ConfigError
    except ImportError:
        return
    try:
        parse_fleet_config(yaml.safe_load(path.read_text())["config"], rel(path))
    except ConfigError as e:
        raise LabError(f"the written stack file does not validate: {e}") from None


def read_inventory(path: Path = INVENTORY) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def running_inventory() -> tuple[dict, list[Host]]:
    """The inventory of the lab that is up, and its hosts; a sentence when it is not up."""
    inv = read_inventory()
    if inv is None or inv.get("state") != "up":
        raise LabError("the lab is not up (python -m lab up)")
    return inv, [Host(h["name"], h["address"], tuple(h["roles"])) for h in inv["hosts"]]


def write_inventory(data: dict, path: Path = INVENTORY) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n")
    os.replace(tmp, path)


def inventory_hosts(hosts: list[Host], pids: dict[str, int]) -> list[dict]:
    return [{**h.as_dict(), "pid": pids.get(h.name)} for h in hosts]
